//! Thin: seal the credentials, parse the command line, send logs to stderr,
//! run, map the result to an exit code (0 moved or nothing to do, 1 failed,
//! 2 bad input, 3 locked, 4 refused: engine/stage/result.rs, the README).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // First, while ward has one thread and no child: credentials leave the
    // environment (ward re-executes itself when there were any) and the
    // process becomes unreadable to the agent (see engine/secrets.rs).
    let sealed = match ward::secrets::seal() {
        Ok(sealed) => sealed,
        Err(err) => {
            eprintln!("error: {}", ward::untrusted::shown(&err.to_string()));
            return ExitCode::from(1);
        }
    };
    // The agent's side of the network wall (engine/agent/wall.rs): before
    // any thread, so that it may make its namespaces.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == ward::agent::wall::SUBCOMMAND) {
        return ExitCode::from(ward::agent::wall::main(&args[2..]).clamp(0, 255) as u8);
    }
    let cli = ward::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("WARD_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(|| Logs(std::io::stderr()))
        // Colour only for a person at a terminal, never into log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    tracing::debug!(?sealed, "credentials sealed");
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: could not start ward's async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(ward::cli::run(cli))
}

/// stderr for the logs: a log line can carry text from an agent or an
/// issue, and none of it may start a workflow command in an Actions log.
struct Logs(std::io::Stderr);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(ward::untrusted::no_workflow_commands(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
