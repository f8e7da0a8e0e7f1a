//! The agent: one subprocess per stage run. Its environment is built from
//! scratch (no credential reaches it, even when `agent.pass_env` names one;
//! ward's own process is closed to it, see [`crate::secrets`]), its
//! prompt is a file, its notes come back through `$WARD_NOTES`, and its
//! wall-clock limit is enforced here by killing its whole process group.
//! It gets a HOME and a temp folder of its own for the run ([`home`]);
//! what it says of its own failures is read as it comes ([`report`]).
//! The built-in stand-in agent is a program of its own: `crate::stand_in`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub mod gate;
pub mod home;
pub mod report;
pub mod wall;

/// Everything one agent run needs.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Argument vector before substitution (`{prompt}`, `{prompt_file}`, `{ward}`).
    pub command: Vec<String>,
    pub workdir: PathBuf,
    /// `WARD_*` variables and emulator variables, set by the engine.
    pub env: Vec<(String, String)>,
    /// Names of engine variables passed through as they are.
    pub pass_env: Vec<String>,
    /// Set whatever ward's environment holds (the preset's: telemetry off,
    /// the gateway); the engine's own `env` still wins.
    pub fixed_env: Vec<(String, String)>,
    /// Its private HOME and temp folder; `$WARD_NOTES` is `area.notes`.
    pub area: home::Area,
    pub prompt_file: PathBuf,
    /// Where `stdout.log` and `stderr.log` go.
    pub artifacts: PathBuf,
    pub time_limit: Duration,
    /// This ward binary, for `{ward}`.
    pub ward_exe: PathBuf,
    /// Behind the walls ([`wall`]): the ports relayed to ward's gate, the
    /// paths hidden and those writable; `None`: on the host's network.
    pub wall: Option<Walled>,
}

/// What the wall around one agent run holds.
#[derive(Debug, Clone, Default)]
pub struct Walled {
    pub relays: Vec<wall::Relay>,
    /// What is hidden, and what alone the agent may write.
    pub mounts: wall::Mounts,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEnd {
    Exited(i32),
    Signalled(i32),
    TimedOut,
}

#[derive(Debug, Clone)]
pub struct AgentExit {
    pub end: AgentEnd,
    pub elapsed: Duration,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl AgentExit {
    pub fn success(&self) -> bool {
        self.end == AgentEnd::Exited(0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("could not start the agent `{program}`: {message} (check `agent.command` in .github/ward.yml)")]
    Spawn { program: String, message: String },
    #[error("could not {action}: {message}")]
    Io { action: String, message: String },
}

fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
    let action = action.into();
    move |e| AgentError::Io { action, message: e.to_string() }
}

/// Substitutes the placeholders of one argument.
pub fn substitute(arg: &str, prompt: &str, spec: &AgentSpec) -> String {
    arg.replace("{prompt_file}", &spec.prompt_file.to_string_lossy())
        .replace("{notes_file}", &spec.area.notes.to_string_lossy())
        .replace("{ward}", &spec.ward_exe.to_string_lossy())
        .replace("{prompt}", prompt)
}

/// The agent's whole environment: a few basics, its own HOME and temp
/// folder, the pass-through names, the preset's settings, then the engine's
/// own variables (which win).
pub fn build_env(spec: &AgentSpec, from: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v));
    };
    set("PATH", from("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()));
    set("LANG", from("LANG").unwrap_or_else(|| "C.UTF-8".into()));
    for (k, v) in spec.area.env() {
        set(&k, v);
    }
    // Credentials never pass, whatever the config says (it refuses them too).
    for name in spec.pass_env.iter().filter(|n| !crate::secrets::is_credential(n)) {
        if let Some(v) = from(name) {
            set(name, v);
        }
    }
    for (k, v) in spec.fixed_env.iter().chain(&spec.env) {
        set(k, v.clone());
    }
    set("WARD_NOTES", spec.area.notes.to_string_lossy().into_owned());
    env
}

/// Runs the agent to completion or to its time limit.
pub async fn run(spec: &AgentSpec) -> Result<AgentExit, AgentError> {
    std::fs::create_dir_all(&spec.artifacts).map_err(io(format!("create {}", spec.artifacts.display())))?;
    let prompt = std::fs::read_to_string(&spec.prompt_file)
        .map_err(io(format!("read the prompt {}", spec.prompt_file.display())))?;
    let mut args: Vec<String> = spec.command.iter().map(|a| substitute(a, &prompt, spec)).collect();
    if args.is_empty() {
        return Err(AgentError::Spawn { program: String::new(), message: "the command is empty".into() });
    }
    if let Some(w) = &spec.wall {
        args = wall::command(&spec.ward_exe, &w.relays, &w.mounts, &args);
    }
    let stdout = spec.artifacts.join("agent.stdout.log");
    let stderr = spec.artifacts.join("agent.stderr.log");
    let out = File::create(&stdout).map_err(io(format!("create {}", stdout.display())))?;
    let err = File::create(&stderr).map_err(io(format!("create {}", stderr.display())))?;

    let mut cmd = tokio::process::Command::new(&args[0]);
    cmd.args(&args[1..])
        .current_dir(&spec.workdir)
        .env_clear()
        .envs(build_env(spec, |k| std::env::var(k).ok()))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group, so the limit kills everything it started.
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| AgentError::Spawn { program: args[0].clone(), message: e.to_string() })?;
    let group = ProcessGroup(child.id().map(|p| p as i32));
    let end = match tokio::time::timeout(spec.time_limit, child.wait()).await {
        Ok(status) => {
            let status = status.map_err(io("wait for the agent"))?;
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(code), _) => AgentEnd::Exited(code),
                (None, Some(sig)) => AgentEnd::Signalled(sig),
                (None, None) => AgentEnd::Signalled(0),
            }
        }
        Err(_) => {
            group.kill();
            let _ = child.wait().await;
            AgentEnd::TimedOut
        }
    };
    // Whatever the agent left running in its group goes too, and what it
    // daemonised out of the group (when ward is its subreaper).
    group.kill();
    reap_orphans();
    Ok(AgentExit { end, elapsed: started.elapsed(), stdout, stderr })
}

/// Set once this process is a child subreaper ([`become_subreaper`]).
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes ward the child subreaper of everything it starts
/// (`PR_SET_CHILD_SUBREAPER`): a child the agent daemonised (a double fork,
/// `setsid`, its own process group) is re-parented to ward instead of init,
/// so that [`reap_orphans`] finds and kills it once the agent has ended.
/// Only for a process that runs one stage (`ward stage`, `ward visit`):
/// every child ward has after its agent ended is then the agent's.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl(2) with an integer argument; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    SUBREAPER.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Kills and waits for every child of this process, until none is left
/// (a killed child's own children are re-parented to ward in turn). A no-op
/// unless [`become_subreaper`] was called.
pub fn reap_orphans() -> usize {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return 0;
    }
    let me = std::process::id() as i32;
    let mut killed = 0;
    for _ in 0..64 {
        let children = children_of(me);
        if children.is_empty() {
            break;
        }
        for (pid, state) in children {
            // SAFETY: kill(2) and waitpid(2) on our own child.
            unsafe {
                // One that already exited (a zombie) is only reaped.
                if state != 'Z' {
                    libc::kill(pid, libc::SIGKILL);
                    killed += 1;
                }
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
    if killed > 0 {
        tracing::warn!(killed, "processes the agent left running were killed");
    }
    killed
}

/// The processes whose parent is `parent`, with their state (`Z` for one
/// that exited and waits to be reaped), from `/proc/*/stat`.
fn children_of(parent: i32) -> Vec<(i32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let mut fields = after.split_whitespace();
            let state = fields.next()?.chars().next()?;
            (fields.next()?.parse::<i32>().ok()? == parent).then_some((pid, state))
        })
        .collect()
}

/// Kills the agent's process group when dropped (a cancelled run too).
struct ProcessGroup(Option<i32>);

impl ProcessGroup {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) with a negative pid signals the group we created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last lines of a log, for an error message.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &Path, command: &[&str], limit: Duration) -> AgentSpec {
        std::fs::write(dir.join("prompt.md"), "hello prompt").unwrap();
        AgentSpec {
            command: command.iter().map(|s| s.to_string()).collect(),
            workdir: dir.to_path_buf(),
            env: vec![],
            pass_env: vec![],
            fixed_env: vec![],
            area: home::Area::make(dir, &home::Setup::default()).unwrap(),
            prompt_file: dir.join("prompt.md"),
            artifacts: dir.join("artifacts"),
            time_limit: limit,
            ward_exe: "/bin/false".into(),
            wall: None,
        }
    }

    #[tokio::test]
    async fn the_environment_is_built_from_scratch() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("GITHUB_TOKEN", "secret-token") };
        let s = spec(dir.path(), &["sh", "-c", "env; echo {prompt} > $WARD_NOTES"], Duration::from_secs(10));
        let exit = run(&s).await.unwrap();
        assert!(exit.success());
        let env = std::fs::read_to_string(&exit.stdout).unwrap();
        assert!(!env.contains("secret-token"), "the token leaked: {env}");
        assert!(env.contains("WARD_NOTES="));
        assert!(env.contains(&format!("HOME={}", s.area.home.display())), "its own HOME: {env}");
        assert_eq!(std::fs::read_to_string(&s.area.notes).unwrap(), "hello prompt\n");
    }

    #[test]
    fn pass_env_passes_what_it_names_except_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spec(dir.path(), &["true"], Duration::from_secs(1));
        s.pass_env = vec!["ANTHROPIC_API_KEY".into(), "GITHUB_TOKEN".into(), "ACTIONS_RUNTIME_TOKEN".into()];
        let env = build_env(&s, |k| Some(format!("value of {k}")));
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "PATH",
                "LANG",
                "HOME",
                "XDG_CONFIG_HOME",
                "XDG_CACHE_HOME",
                "XDG_DATA_HOME",
                "XDG_STATE_HOME",
                "TMPDIR",
                "TMP",
                "TEMP",
                "ANTHROPIC_API_KEY",
                "WARD_NOTES"
            ]
        );
    }

    #[tokio::test]
    async fn a_hanging_agent_and_its_children_are_killed_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let s = spec(dir.path(), &["sh", "-c", &script], Duration::from_millis(300));
        let exit = run(&s).await.unwrap();
        assert_eq!(exit.end, AgentEnd::TimedOut);
        assert!(exit.elapsed < Duration::from_secs(5));
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // The kill is sent; on a loaded machine its delivery takes a moment.
        let gone = || {
            // SAFETY: signal 0 only checks whether the process exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            !alive || std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z")).unwrap_or(true)
        };
        let waited = std::time::Instant::now();
        while !gone() && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone(), "the grandchild {pid} survived the limit");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(dir.path(), &["/nonexistent/agent"], Duration::from_secs(1));
        let err = run(&s).await.unwrap_err();
        assert!(err.to_string().starts_with("could not start the agent `/nonexistent/agent`"), "{err}");
    }
}
