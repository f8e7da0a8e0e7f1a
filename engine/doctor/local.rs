//! The checks of the repository folder and this machine.

use std::path::{Path, PathBuf};

use super::{Check, Report};
use crate::config::schema::{SCHEMA_PATH, schema_text};
use crate::config::{CONFIG_PATH, Config};
use crate::precedent::PrecedentLog;
use crate::prompt::Prompts;

/// The local checks, and the configuration when it loaded (the GitHub
/// checks need it). `path` is the `PATH` the agent will get.
pub async fn local(root: &Path, path: &str, fix: bool) -> (Report, Option<Config>) {
    let mut report = Report::default();
    let config = match Config::load(root) {
        Ok(c) => {
            report.0.push(Check::ok(
                "ward.yml",
                format!("{CONFIG_PATH} is valid ({} stages, {} roles)", c.stages.len(), c.roles.len()),
            ));
            Some(c)
        }
        Err(e) => {
            let first = e.0.first().map(|e| e.to_string()).unwrap_or_default();
            let more = if e.0.len() > 1 { format!(" (and {} more)", e.0.len() - 1) } else { String::new() };
            report.0.push(Check::fail(
                "ward.yml",
                format!("{first}{more}"),
                "fix it; `ward config check` lists every problem",
            ));
            None
        }
    };
    if let Some(config) = &config {
        report.0.extend(files(root, config));
        report.0.push(agent(config, root, path));
        report.0.push(docker(config).await);
    }
    report.0.push(gitignore(root, fix));
    report.0.push(schema_file(root, fix));
    (report, config)
}

/// Roles render, skills are there, the precedent log reads.
fn files(root: &Path, config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    let problems = Prompts::for_config(root, config).check(config);
    out.push(match problems.first() {
        None => Check::ok("roles", format!("{} role templates render", config.roles.len())),
        Some(p) => {
            Check::fail("roles", p.to_string(), "fix the template, or restore it with `ward init` in a scratch folder")
        }
    });
    let dir = config.paths.skills_dir();
    let skills = std::fs::read_dir(root.join(&dir))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.path().extension().is_some_and(|x| x == "md")).count())
        .unwrap_or(0);
    out.push(if skills > 0 {
        Check::ok("skills", format!("{skills} skills in {dir}/"))
    } else {
        Check::fail(
            "skills",
            format!("{dir}/ has no skill"),
            format!("restore {dir}/ (`ward init` in a scratch folder writes the default ones; `paths.skills` in ward.yml says where they live)"),
        )
    });
    let log = root.join(&config.precedents.log);
    out.push(match PrecedentLog::load(&log) {
        Ok(l) => Check::ok("precedents", format!("{} entries in {}", l.entries.len(), config.precedents.log.display())),
        Err(e) => Check::fail("precedents", e.to_string(), "fix the log (`ward precedents check` says where)"),
    });
    out
}

/// The agent's program, found where the agent will look for it.
fn agent(config: &Config, root: &Path, path: &str) -> Check {
    let command = &config.agent.command;
    let Some(program) = command.first() else {
        return Check::fail("agent", "no command", "name a preset or a command under `agent:`");
    };
    if program == "{ward}" {
        return Check::ok("agent", "the built-in stand-in (`{ward}`)");
    }
    let preset = config.agent.applied.as_ref().filter(|a| !a.own_command).map(|a| a.preset);
    let mut needed = vec![program.as_str()];
    if let Some(p) = preset {
        needed.push(p.program);
    }
    for name in needed {
        if find_program(name, root, path).is_none() {
            let fix = match preset {
                Some(p) => format!("install it: `{}` (docs/agents.md shows the workflow step)", p.install),
                None => "install it, or fix `agent.command` in .github/ward.yml".into(),
            };
            return Check::fail("agent", format!("`{name}` is not on PATH"), fix);
        }
    }
    let Some(p) = config.agent.applied.as_ref().map(|a| a.preset) else {
        return Check::ok("agent", format!("`{program}` found on PATH"));
    };
    let Some(cli) = find_program(p.program, root, path) else {
        return Check::ok("agent", format!("`{program}` found on PATH"));
    };
    let printed = match version(&cli, path) {
        Ok(v) => v,
        Err(why) => {
            return Check::fail(
                "agent",
                format!("`{} --version` {why}", p.program),
                format!("reinstall it: `{}` (docs/agents.md)", p.install),
            );
        }
    };
    let mut found = format!("preset `{}`: `{}` prints `{printed}`", p.name, p.program);
    match p.proven {
        Some(v) if printed.contains(v) => found.push_str(", the version ward's end-to-end tests prove"),
        Some(v) => found.push_str(&format!(
            "; ward's end-to-end tests prove {v} (`{}`): another version may print or ask otherwise",
            p.install
        )),
        None => found.push_str("; this preset is unproven: no test of ward's runs its CLI (docs/agents.md)"),
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && !p.as_root.is_empty() {
        let set: Vec<String> = p.as_root.iter().map(|(k, v)| format!("{k}={v}")).collect();
        found.push_str(&format!(
            "; as root ward sets {} for it (it refuses to run unattended as root otherwise)",
            set.join(" ")
        ));
    }
    Check::ok("agent", found)
}

/// Why `cli --version` printed no version, said after the command.
#[derive(Debug, thiserror::Error)]
enum NoVersion {
    #[error("could not run: {0}")]
    Run(std::io::Error),
    #[error("did not answer within 10 s")]
    Silent,
    /// It ended with `status`, and the first line of its stderr.
    #[error("failed ({status}): {said}")]
    Failed { status: std::process::ExitStatus, said: String },
}

/// What `cli --version` prints (its first line), within ten seconds.
fn version(cli: &Path, path: &str) -> Result<String, NoVersion> {
    let home = std::env::temp_dir().join(format!("ward-doctor-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).map_err(NoVersion::Run)?;
    let result = run_version(cli, path, &home);
    let _ = std::fs::remove_dir_all(&home);
    result
}

fn run_version(cli: &Path, path: &str, home: &Path) -> Result<String, NoVersion> {
    let mut child = std::process::Command::new(cli)
        .arg("--version")
        .env_clear()
        .env("PATH", path)
        // Its own HOME, as in a stage: nothing of the user's changes.
        .env("HOME", home)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(NoVersion::Run)?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < std::time::Duration::from_secs(10) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NoVersion::Silent);
            }
        }
    }
    let out = child.wait_with_output().map_err(NoVersion::Run)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    match (out.status.success(), first.is_empty()) {
        (true, false) => Ok(crate::untrusted::excerpt(&first)),
        _ => Err(NoVersion::Failed {
            status: out.status,
            said: crate::untrusted::excerpt(String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("")),
        }),
    }
}

/// Where `name` runs from: a path (relative to the repository), or the
/// first executable file of that name on `path`.
fn find_program(name: &str, root: &Path, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if name.contains('/') {
        let p = root.join(name);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|p| executable(p))
}

async fn docker(config: &Config) -> Check {
    let uses = config.emulator.is_some() || config.stages().any(|s| s.config.emulator.is_some());
    if !uses {
        return Check::ok("docker", "no emulator is configured, so Docker is not needed");
    }
    match super::probe_docker().await {
        Ok(()) => Check::ok("docker", "the Docker engine answers (emulators need it)"),
        Err(e) => Check::fail(
            "docker",
            format!("the Docker engine does not answer ({e}), and an emulator is configured"),
            "start Docker, or set DOCKER_HOST to where it listens",
        ),
    }
}

/// ward's run state (worktrees, the local forge, artifacts) stays out of git.
fn gitignore(root: &Path, fix: bool) -> Check {
    let file = root.join(".gitignore");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let ignored = text.lines().map(str::trim).any(|l| matches!(l, ".ward" | ".ward/" | "/.ward" | "/.ward/"));
    if ignored {
        return Check::ok(".gitignore", "ignores .ward/");
    }
    if fix {
        let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
        return match std::fs::write(&file, format!("{text}{sep}/.ward/\n")) {
            Ok(()) => Check::fixed(".gitignore", "added `/.ward/`"),
            Err(e) => {
                Check::fail(".gitignore", format!("could not write {} ({e})", file.display()), "add `/.ward/` by hand")
            }
        };
    }
    Check::fail(
        ".gitignore",
        "does not ignore .ward/ (ward's worktrees, run artifacts and local forge)",
        "add `/.ward/` to .gitignore, or run `ward doctor --fix`",
    )
}

/// The schema ward.yml's first line points at is this ward's.
fn schema_file(root: &Path, fix: bool) -> Check {
    let file = root.join(SCHEMA_PATH);
    let current = std::fs::read_to_string(&file).ok();
    if current.as_deref() == Some(schema_text().as_str()) {
        return Check::ok("schema", format!("{SCHEMA_PATH} is this ward's"));
    }
    let found = if current.is_some() { "is an older ward's" } else { "is missing" };
    if fix {
        return match std::fs::write(&file, schema_text()) {
            Ok(()) => Check::fixed("schema", format!("{SCHEMA_PATH} {found}; wrote this ward's")),
            Err(e) => Check::fail("schema", format!("could not write {SCHEMA_PATH} ({e})"), "check the folder"),
        };
    }
    Check::fail(
        "schema",
        format!("{SCHEMA_PATH} {found} (editors check ward.yml against it)"),
        format!("`ward config schema > {SCHEMA_PATH}`, or `ward doctor --fix`"),
    )
}
