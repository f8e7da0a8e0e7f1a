//! Helpers for `tests/workspace.rs`: deterministic git repositories, the
//! docstore test image (built statically and packaged `FROM scratch`, once
//! per test run), a fresh-connection docstore client, and Docker checks by
//! label so every test can prove it left nothing behind.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use ward::config::EmulatorConfig;
use ward::workspace::worktree::CommitIdentity;

/// The local test image; kept between runs as a cache (rebuilt when the
/// docstore binary changes). Remove with `docker rmi ward-docstore:test`.
pub const IMAGE: &str = "ward-docstore:test";
const IMAGE_LABEL: &str = "ward.test.docstore-sha256";

/// The fixed moment of every test commit.
pub const EPOCH: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a command, panicking with its output when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The statically linked docstore binary, built once per test process.
pub fn docstore_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest_dir().join("target"))
            .join("docstore");
        let triple = "x86_64-unknown-linux-gnu";
        run(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--quiet", "--target", triple, "--manifest-path"])
            .arg(manifest_dir().join("tests/docstore/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"));
        target.join(triple).join("release").join("docstore")
    })
}

fn sha256_hex(path: &Path) -> String {
    use sha2::Digest;
    let bytes = std::fs::read(path).expect("read docstore binary");
    sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `ward-docstore:test`, built from the docstore binary unless an image of
/// the same binary is already there.
pub fn docstore_image() -> &'static str {
    static IMAGE_READY: OnceLock<()> = OnceLock::new();
    IMAGE_READY.get_or_init(|| {
        let bin = docstore_bin();
        let sha = sha256_hex(bin);
        let have = Command::new("docker")
            .args(["image", "inspect", "--format", &format!("{{{{ index .Config.Labels \"{IMAGE_LABEL}\" }}}}"), IMAGE])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == sha)
            .unwrap_or(false);
        if !have {
            let ctx = tempfile::tempdir().expect("build context");
            std::fs::copy(bin, ctx.path().join("docstore")).expect("copy docstore");
            std::fs::copy(manifest_dir().join("tests/docstore/Dockerfile"), ctx.path().join("Dockerfile"))
                .expect("copy Dockerfile");
            run(Command::new("docker")
                .args(["build", "--quiet", "--label", &format!("{IMAGE_LABEL}={sha}"), "-t", IMAGE])
                .arg(ctx.path()));
        }
    });
    IMAGE
}

/// The emulator section the tests use, with `extra` YAML lines appended.
pub fn emulator_config(extra: &str) -> EmulatorConfig {
    let text = format!(
        r#"
image: {image}
ports: [8081, 8082]
ready: {{ http: {{ port: 8082, path: /ready }}, time_limit: 10s }}
expose:
  DOCSTORE_ENDPOINT: "http://127.0.0.1:{{{{ ports[8081] }}}}"
  COSMOS_ENDPOINT: "http://{{{{ host }}}}:{{{{ ports[8081] }}}}"
{extra}"#,
        image = docstore_image()
    );
    let config: EmulatorConfig = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let problems = ward::config::emulator_validate(&config, "emulator");
    assert!(problems.is_empty(), "{problems:?}");
    config
}

pub fn identity() -> CommitIdentity {
    CommitIdentity { time: Some(EPOCH), ..CommitIdentity::default() }
}

/// A git command with no user or system configuration and fixed dates.
pub fn git(dir: &Path, home: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_AUTHOR_DATE", format!("@{EPOCH} +0000"))
        .env("GIT_COMMITTER_NAME", "Test Author")
        .env("GIT_COMMITTER_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_DATE", format!("@{EPOCH} +0000"));
    cmd
}

/// A deterministic repository on `main` with the given files in one commit,
/// plus a WARD_HOME and a git HOME, all in one temporary folder.
pub struct TestRepo {
    pub tmp: tempfile::TempDir,
    pub path: PathBuf,
    pub home: PathBuf,
    pub git_home: PathBuf,
    /// The first branch (`main` unless [`TestRepo::on_branch`] said otherwise).
    pub base: String,
}

impl TestRepo {
    pub fn new(files: &[(&str, &str)]) -> Self {
        Self::on_branch("main", files)
    }

    /// [`TestRepo::new`] with another first branch (`master`, say).
    pub fn on_branch(branch: &str, files: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().expect("temporary folder");
        let path = tmp.path().join("repo");
        let home = tmp.path().join("ward-home");
        let git_home = tmp.path().join("git-home");
        for d in [&path, &home, &git_home] {
            std::fs::create_dir_all(d).unwrap();
        }
        let repo = Self { tmp, path, home, git_home, base: branch.into() };
        run(repo.git().args(["init", "--quiet", &format!("--initial-branch={branch}")]));
        for (name, text) in files {
            let file = repo.path.join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, text).unwrap();
            if name.ends_with(".sh") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        run(repo.git().args(["add", "-A"]));
        run(repo.git().args(["commit", "--quiet", "-m", "base"]));
        repo
    }

    pub fn git(&self) -> Command {
        git(&self.path, &self.git_home)
    }

    pub fn rev(&self, rev: &str) -> Option<String> {
        let out = self.git().args(["rev-parse", "--verify", "--quiet", rev]).output().unwrap();
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    pub fn request(&self, issue: u64, stage: &str, run: &str) -> ward::workspace::WorkspaceRequest {
        ward::workspace::WorkspaceRequest {
            mode: ward::workspace::WorkspaceMode::Worktree,
            repo: self.path.clone(),
            home: self.home.clone(),
            base: self.base.clone(),
            issue,
            stage: stage.into(),
            run: run.into(),
            restart: false,
            emulator: None,
            checkpoints: false,
            docker_socket: None,
            expires_after: Duration::from_secs(3600),
            identity: identity(),
            artifacts: ward::workspace::artifacts_dir(&self.home, issue, run),
            remote: None,
            repository: self.path.display().to_string(),
            state_paths: vec![".ward".into(), "charts".into()],
            submodules: None,
        }
    }

    /// The patient's worktree folder under this repository's ward home.
    pub fn patient_worktree(&self, issue: u64) -> PathBuf {
        let git = ward::workspace::worktree::GitRepo::open(&self.path).unwrap();
        ward::workspace::worktree::Layout::new(&self.home, &git).unwrap().worktree(issue)
    }

    /// The ward layout of this repository (worktrees and records).
    pub fn layout(&self) -> ward::workspace::worktree::Layout {
        let git = ward::workspace::worktree::GitRepo::open(&self.path).unwrap();
        ward::workspace::worktree::Layout::new(&self.home, &git).unwrap()
    }
}

/// A unique run id for this test process: `t<pid>-<name>`.
pub fn run_id(name: &str) -> String {
    format!("t{}-{name}", std::process::id())
}

/// Container ids Docker knows with `ward.run=<run>` (running or not).
pub fn containers_of_run(run: &str) -> Vec<String> {
    let out = run_docker(&["ps", "-aq", "--no-trunc", "--filter", &format!("label=ward.run={run}")]);
    out.lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

pub fn run_docker(args: &[&str]) -> String {
    run(Command::new("docker").args(args))
}

/// Removes every container of the given runs when dropped, so a failing
/// test leaves nothing behind either (the tests assert the engine did it first).
pub struct DockerJanitor(pub Vec<String>);

impl Drop for DockerJanitor {
    fn drop(&mut self) {
        for run in &self.0 {
            for id in containers_of_run(run) {
                let _ = Command::new("docker").args(["rm", "-f", "-v", &id]).output();
            }
        }
    }
}

/// A fresh HTTP connection per call: every read is by a new client.
pub struct DocClient {
    pub endpoint: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    pub status: u16,
    pub etag: Option<String>,
    pub body: serde_json::Value,
}

impl DocClient {
    pub fn new(endpoint: &str) -> Self {
        Self { endpoint: endpoint.trim_end_matches('/').to_string() }
    }

    fn call(&self, method: &str, path: &str, pk: &str, if_match: Option<&str>, body: &str) -> std::io::Result<Doc> {
        let authority = self.endpoint.trim_start_matches("http://");
        let mut s = TcpStream::connect(authority)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nx-partition-key: {pk}\r\n");
        if let Some(e) = if_match {
            req.push_str(&format!("If-Match: {e}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(req.as_bytes())?;
        let mut raw = String::new();
        s.read_to_string(&mut raw)?;
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let etag = head.lines().find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("etag")).map(|(_, v)| v.trim().to_string())
        });
        Ok(Doc { status, etag, body: serde_json::from_str(body).unwrap_or(serde_json::Value::Null) })
    }

    pub fn get(&self, db: &str, coll: &str, id: &str, pk: &str) -> std::io::Result<Doc> {
        self.call("GET", &format!("/dbs/{db}/colls/{coll}/docs/{id}"), pk, None, "")
    }

    pub fn put(
        &self,
        db: &str,
        coll: &str,
        id: &str,
        pk: &str,
        body: &serde_json::Value,
        if_match: Option<&str>,
    ) -> std::io::Result<Doc> {
        self.call("PUT", &format!("/dbs/{db}/colls/{coll}/docs/{id}"), pk, if_match, &body.to_string())
    }
}

/// The emulator's endpoint as the agent sees it.
pub fn endpoint(vars: &BTreeMap<String, String>) -> String {
    vars.get("DOCSTORE_ENDPOINT").cloned().expect("DOCSTORE_ENDPOINT is exposed")
}

/// Where the proofs keep their evidence: `WARD_EVIDENCE_DIR`, else a
/// folder under the target directory.
pub fn evidence_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("WARD_EVIDENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("target").join("evidence"));
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
