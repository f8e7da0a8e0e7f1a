//! Thin: parse the command line, send logs to stderr, run, map the result to
//! an exit code (0 ok, 1 failed, 2 bad input).

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = ward::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("WARD_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    ward::cli::run(cli).await
}
