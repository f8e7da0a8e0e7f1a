//! The ward an attack runs against: a git repository with ward installed and
//! one patient admitted, ward started as an ordinary user (a dedicated
//! unprivileged account when the tests run as root, as CI does; else the
//! current user), credentials in ward's environment that a workflow step
//! would have, and the attacking agent set as `agent.command`.
//!
//! Every credential is a canary (it contains `CANARY`): an attack is inert
//! when no canary appears in its loot nor in any file under the sandbox.
//! Each attack also has a control it must find (a decoy credential of the
//! same shape, in a process or a file of the same user, containing
//! `DECOY`), so an attack that silently stopped working fails its test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

/// The account ward and its agent run as when the tests run as root.
pub const USER: &str = "ward-hostile";

/// What a workflow step may hold that grants access, as canaries. ward
/// authenticates with `WARD_TOKEN` (else `GITHUB_TOKEN`); the runner gives
/// steps the `ACTIONS_*` ones.
pub const CANARIES: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "ghs_CANARYgithubtoken0000000000000000000"),
    ("WARD_TOKEN", "github_pat_CANARYwardtoken000000000000000"),
    ("GH_TOKEN", "gho_CANARYghtoken000000000000000000000000"),
    ("ACTIONS_RUNTIME_TOKEN", "eyJ0eXAiOiJKV1QiCANARYruntime.token.sig"),
    ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "eyJ0eXAiOiJKV1QiCANARYidrequest.token.sig"),
    (
        "ACTIONS_ID_TOKEN_REQUEST_URL",
        "https://pipelines.actions.githubusercontent.com/CANARYoidc/idtoken?api-version=2.0",
    ),
    ("ACTIONS_RUNTIME_URL", "https://pipelines.actions.githubusercontent.com/CANARYruntime/"),
    ("ACTIONS_CACHE_URL", "https://artifactcache.actions.githubusercontent.com/CANARYcache/"),
    ("ACTIONS_RESULTS_URL", "https://results-receiver.actions.githubusercontent.com/CANARYresults/"),
];

/// The decoys: a credential in another process's environment and on its
/// command line, in a file under `$HOME`, and in the memory of a child the
/// mem attack starts itself.
pub const DECOY_ENV: &str = "gho_DECOYenvironment0000000000000000";
pub const DECOY_ARGV: &str = "ghs_DECOYcommandline0000000000000000";
pub const DECOY_FILE: &str = "ghp_DECOYcredentialfile0000000000000";
pub const DECOY_MEM: &str = "ghu_DECOYmemory000000000000000000000";

thread_local! {
    /// Set by [`as_root_here`]: this test thread runs ward as root itself.
    static AS_ROOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// From now on, this test thread runs ward as the user the tests run as
/// (root, where they run as root), not as [`USER`]: the walls' tests run
/// each attack both ways.
#[allow(dead_code)]
pub fn as_root_here() {
    AS_ROOT.with(|r| r.set(true));
}

/// `(uid, gid)` to run as, or `None` to run as the current user.
fn account() -> Option<(u32, u32)> {
    if AS_ROOT.with(|r| r.get()) {
        return None;
    }
    unprivileged_account()
}

fn unprivileged_account() -> Option<(u32, u32)> {
    static ACCOUNT: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *ACCOUNT.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let id = |flag: &str| -> Option<u32> {
            let out = Command::new("id").args([flag, USER]).output().ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse().ok().filter(|_| out.status.success())
        };
        if id("-u").is_none() {
            // Idempotent across test processes: useradd locks /etc/passwd,
            // and exit 9 means another test created the account first.
            let out = Command::new("useradd")
                .args(["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"])
                .args(["--shell", "/usr/sbin/nologin", USER])
                .output()
                .expect("useradd runs (the hostile tests create an unprivileged account when run as root)");
            assert!(
                out.status.success() || out.status.code() == Some(9),
                "useradd {USER}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some((id("-u").expect("the account exists"), id("-g").expect("the account has a group")))
    })
}

/// Whether the tests run as root (then ward runs as [`USER`]).
pub fn is_root() -> bool {
    account().is_some()
}

/// A command run as the ward user, with an empty environment.
fn as_user(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = match account() {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}")).arg("--init-groups").arg("--");
            c.arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()));
    cmd
}

fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The ward binary, where the ward user can run it: the build's own when
/// every folder above it is open to others, else a copy in `dir`.
fn ward_for_user(dir: &Path) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_ward"));
    let usable = as_user("test").arg("-x").arg(&built).status().is_ok_and(|s| s.success());
    if usable {
        return built;
    }
    let copy = dir.join("ward");
    std::fs::copy(&built, &copy).expect("copy the ward binary for the ward user");
    copy
}

/// One sandbox: `repo` (git, ward installed, patient #1 admitted), `home`,
/// `runner_temp`, the agents and the loot file, all owned by the ward user.
pub struct Sandbox {
    dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub home: PathBuf,
    pub runner_temp: PathBuf,
    pub agents: PathBuf,
    pub loot: PathBuf,
    pub ward: PathBuf,
}

impl Sandbox {
    pub fn new() -> Self {
        Self::installed(&[], |_| {})
    }

    /// A sandbox whose repository `prepare` fills first, then `ward init`
    /// with `init_args` installs ward into.
    pub fn installed(init_args: &[&str], prepare: impl FnOnce(&Path)) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let root = dir.path();
        let (repo, home, runner_temp, agents) =
            (root.join("repo"), root.join("home"), root.join("runner-temp"), root.join("agents"));
        for d in [&repo, &home, &runner_temp, &agents] {
            std::fs::create_dir_all(d).unwrap();
        }
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
        for entry in std::fs::read_dir(&source).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "sh") {
                std::fs::copy(&path, agents.join(path.file_name().unwrap())).unwrap();
            }
        }
        // What a person's machine or a self-hosted runner may hold: a git
        // credential file in $HOME (the files attack's control).
        std::fs::write(home.join(".git-credentials"), format!("https://x-access-token:{DECOY_FILE}@github.com\n"))
            .unwrap();
        let loot = root.join("loot.txt");
        std::fs::write(&loot, "").unwrap();
        let ward = ward_for_user(root);
        let s = Self { repo, home, runner_temp, agents, loot, ward, dir };
        s.give_to_user(s.dir.path());

        s.git(&["init", "-q", "-b", "main"]);
        prepare(&s.repo);
        s.give_to_user(&s.repo);
        let init: Vec<&str> = std::iter::once("init").chain(init_args.iter().copied()).collect();
        check(s.ward_cmd(&init, &[]).output().unwrap(), "ward init");
        std::fs::write(s.repo.join(".gitignore"), "/.ward\n").unwrap();
        s.give_to_user(&s.repo);
        s.git(&["add", "-A"]);
        s.git(&["commit", "-q", "-m", "install ward"]);
        check(
            s.ward_cmd(&["admit", "--title", "greet fails on empty names", "--body", "Steps: run it."], &[])
                .output()
                .unwrap(),
            "ward admit",
        );
        s
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes `path` (recursively) the ward user's.
    pub fn give_to_user(&self, path: &Path) {
        if let Some((uid, gid)) = account() {
            let out = Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(path).output().unwrap();
            check(out, "chown");
        }
    }

    fn git(&self, args: &[&str]) {
        self.git_as(("tester", "tester@ward.invalid"), args);
    }

    /// git in the repository as the ward user, committing as `(name, email)`;
    /// its standard output.
    pub fn git_as(&self, (name, email): (&str, &str), args: &[&str]) -> String {
        let out = as_user("git")
            .args(args)
            .current_dir(&self.repo)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", name)
            .env("GIT_AUTHOR_EMAIL", email)
            .env("GIT_COMMITTER_NAME", name)
            .env("GIT_COMMITTER_EMAIL", email)
            .output()
            .unwrap();
        String::from_utf8_lossy(&check(out, &format!("git {args:?}")).stdout).into_owned()
    }

    /// git's standard output for a command that changes nothing.
    pub fn git_out(&self, args: &[&str]) -> String {
        self.git_as(("tester", "tester@ward.invalid"), args)
    }

    /// Changes `.github/ward.yml` and commits it.
    pub fn edit_config(&self, edit: impl FnOnce(String) -> String) {
        let config = self.repo.join(".github/ward.yml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, edit(text)).unwrap();
        self.git(&["commit", "-q", "-a", "-m", "ward.yml under test"]);
    }

    /// Runs stages of patient #1 (each with the sandbox's agent) until it
    /// is at `label`; each run must succeed.
    pub fn stage_until(&self, label: &str) {
        for _ in 0..10 {
            if self.labels(1) == [label] {
                return;
            }
            let out = self.stage(&[]);
            check(out, &format!("a stage on the way to `{label}`"));
        }
        panic!("patient #1 never reached `{label}`: it is at {:?}", self.labels(1));
    }

    /// Patient #n's chart on the local forge.
    pub fn chart(&self, n: u64) -> String {
        std::fs::read_to_string(self.repo.join(format!("charts/{n}.md"))).unwrap_or_default()
    }

    /// Changes issue #n's record on the local forge (what a person or the
    /// issue's author does on GitHub).
    pub fn edit_issue(&self, n: u64, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = self.repo.join(format!(".ward/forge/issues/{n}.json"));
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        self.give_to_user(&path);
    }

    /// A bare repository at `server/OWNER/NAME.git` playing GitHub's git
    /// server; returns the `GITHUB_SERVER_URL` that finds it.
    pub fn git_server(&self, owner: &str, name: &str) -> String {
        let server = self.path().join("server");
        let bare = server.join(owner).join(format!("{name}.git"));
        std::fs::create_dir_all(&bare).unwrap();
        self.give_to_user(&server);
        let out = as_user("git").arg("init").arg("-q").arg("--bare").arg(&bare).output().unwrap();
        check(out, "git init --bare");
        format!("file://{}", server.display())
    }

    /// `ward ARGS` in the repository as the ward user, with a person's
    /// basic environment plus `env`.
    pub fn ward_cmd(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = as_user(&self.ward);
        cmd.args(["--root"])
            .arg(&self.repo)
            .args(args)
            .current_dir(&self.repo)
            .env("HOME", &self.home)
            .env("USER", USER)
            .env("LANG", "C.UTF-8")
            .envs(env.iter().copied())
            .stdin(Stdio::null());
        cmd
    }

    /// Sets the agent to `tests/hostile/NAME.sh` with `args` after its
    /// loot file, `agent.pass_env` to `pass_env`, and `agent.writable` to
    /// the loot file.
    pub fn agent(&self, name: &str, args: &[&str], pass_env: &[&str]) {
        let script = self.agents.join(format!("{name}.sh"));
        let mut command =
            vec!["sh".to_string(), script.display().to_string(), "{ward}".into(), self.loot.display().to_string()];
        command.extend(args.iter().map(|a| a.to_string()));
        let config = self.repo.join(".github/ward.yml");
        let text = std::fs::read_to_string(&config).unwrap();
        let default = "command: [\"{ward}\", \"stand-in\"]\n  pass_env: []";
        assert!(text.contains(default), "ward.yml's default agent moved");
        // The loot file is outside the worktree: behind the walls the agent
        // writes it only because ward.yml names it writable.
        let ours = format!(
            "command: {}\n  pass_env: {}\n  writable: [{}]",
            serde_json::to_string(&command).unwrap(),
            serde_json::to_string(pass_env).unwrap(),
            serde_json::to_string(&self.loot.display().to_string()).unwrap()
        );
        std::fs::write(&config, text.replacen(default, &ours, 1)).unwrap();
        // Committed: in a CI job ward works in the job's checkout, which must be clean.
        self.git(&["commit", "-q", "-a", "-m", "the agent under test"]);
    }

    /// The environment of a workflow step: every canary, plus `RUNNER_TEMP`.
    pub fn step_env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = CANARIES.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.push(("RUNNER_TEMP".into(), self.runner_temp.display().to_string()));
        env
    }

    /// `ward stage --issue 1` on the local forge, with the step's credentials.
    pub fn stage(&self, extra_env: &[(&str, &str)]) -> Output {
        let env = self.step_env();
        let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        env.extend_from_slice(extra_env);
        self.ward_cmd(&["stage", "--issue", "1"], &env).output().unwrap()
    }

    /// The labels of issue `n` on the local forge.
    pub fn labels(&self, n: u64) -> Vec<String> {
        let text = std::fs::read_to_string(self.repo.join(format!(".ward/forge/issues/{n}.json"))).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect()
    }

    pub fn loot(&self) -> String {
        std::fs::read_to_string(&self.loot).unwrap_or_default()
    }

    /// A process of the ward user holding decoys in its environment and on
    /// its command line, running until dropped.
    pub fn decoy(&self) -> Decoy {
        let child = as_user("sh")
            .args(["-c", "while :; do sleep 1; done", DECOY_ARGV])
            .env("DECOY_TOKEN", DECOY_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the decoy");
        Decoy(child)
    }

    /// Fails when the attack found a canary, or any file under the sandbox
    /// (repository, worktrees, charts, notes, artifacts, logs, home,
    /// runner temp, loot) holds one.
    pub fn assert_no_canary(&self, out: &Output) {
        let loot = self.loot();
        for (name, value) in CANARIES {
            assert!(!loot.contains(value), "the agent stole {name}:\n{}", excerpt(&loot, value));
        }
        assert!(!loot.contains("CANARY"), "the agent stole a canary:\n{}", excerpt(&loot, "CANARY"));
        for file in files_under(self.path()) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains("CANARY"), "a canary is in {}:\n{}", file.display(), excerpt(&text, "CANARY"));
        }
        let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!printed.contains("CANARY"), "ward printed a canary:\n{printed}");
    }

    /// Fails unless the stage ran to its normal outcome: the planner's
    /// triage moved patient #1 to diagnosis.
    pub fn assert_normal_outcome(&self, out: &Output) {
        assert!(
            out.status.success(),
            "ward stage failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(self.labels(1), ["ward:diagnose"], "{}", String::from_utf8_lossy(&out.stdout));
    }
}

/// A decoy process, killed (by its id) when dropped.
pub struct Decoy(Child);

impl Decoy {
    pub fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let (mut todo, mut files) = (vec![dir.to_path_buf()], Vec::new());
    while let Some(path) = todo.pop() {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                todo.extend(std::fs::read_dir(&path).into_iter().flatten().flatten().map(|e| e.path()))
            }
            Ok(m) if m.is_file() => files.push(path),
            _ => {}
        }
    }
    files
}

/// The lines around the first `needle`, for a failure message.
pub fn excerpt(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or(0);
    let start = text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let end = text[at..].find('\n').map(|i| at + i).unwrap_or(text.len());
    text[start..end].chars().take(600).collect()
}
