//! The local CI: `ci.command` run on one commit, in a fresh detached
//! worktree of it (nothing the patient's worktree holds, ignored files
//! included, leaks in), with an environment built from scratch, a time
//! limit over its whole process group, and its output kept in a log. The
//! local forge has no CI of its own: the stage records this result as the
//! commit's check run (stage/local.rs).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::errors::WorktreeError;
use super::git;

/// How the local CI ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CiEnd {
    Passed,
    /// The command's exit code (`None`: killed by a signal).
    Failed(Option<i32>),
    TimedOut,
    /// It could not run at all (no checkout, no shell): the sentence says why.
    NotRun(String),
}

/// Why the local CI could not run at all.
#[derive(Debug, thiserror::Error)]
enum NotRun {
    #[error(transparent)]
    Git(#[from] WorktreeError),
    #[error("could not create {}: {source}", path.display())]
    Create { path: PathBuf, source: std::io::Error },
    #[error("could not open {} twice: {source}", path.display())]
    Twice { path: PathBuf, source: std::io::Error },
    #[error("could not start `sh -c {command}`: {source}")]
    Start { command: String, source: std::io::Error },
    #[error("could not wait for the local CI: {0}")]
    Wait(std::io::Error),
}

#[derive(Debug, Clone)]
pub struct CiRun {
    pub end: CiEnd,
    /// The command's stdout and stderr, interleaved.
    pub log: PathBuf,
    pub elapsed: Duration,
}

impl CiRun {
    /// The last `lines` lines of the output, for the failing check's summary.
    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read(&self.log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Runs `command` (`sh -c`) on `commit` of the repository at `repo`, in a
/// worktree made for it and removed after, at most `limit`; the output goes
/// to `log`.
pub async fn run(repo: &Path, commit: &str, command: &str, limit: Duration, log: &Path) -> CiRun {
    let started = Instant::now();
    let end = match checkout_and_run(repo, commit, command, limit, log).await {
        Ok(end) => end,
        Err(why) => {
            let _ = std::fs::write(log, format!("ward: the local CI did not run: {why}\n"));
            CiEnd::NotRun(why.to_string())
        }
    };
    CiRun { end, log: log.to_path_buf(), elapsed: started.elapsed() }
}

async fn checkout_and_run(
    repo: &Path,
    commit: &str,
    command: &str,
    limit: Duration,
    log: &Path,
) -> Result<CiEnd, NotRun> {
    let scratch = git::Scratch::new()?;
    let checkout = scratch.0.join("checkout");
    let mut add = git::local(repo);
    add.args(["worktree", "add", "--detach", "--quiet"]).arg(&checkout).arg(commit);
    git::run(add, "check out the commit for the local CI", None)?;
    let end = run_command(&checkout, command, limit, log).await;
    let mut remove = git::local(repo);
    remove.args(["worktree", "remove", "--force"]).arg(&checkout);
    if let Err(e) = git::run(remove, "remove the local CI's checkout", None) {
        tracing::warn!("{e}; `git worktree prune` clears it once its folder is gone");
    }
    end
}

async fn run_command(dir: &Path, command: &str, limit: Duration, log: &Path) -> Result<CiEnd, NotRun> {
    let create = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NotRun::Create { path, source }
    };
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent).map_err(create(parent))?;
    }
    let out = File::create(log).map_err(create(log))?;
    let err = out.try_clone().map_err(|source| NotRun::Twice { path: log.to_path_buf(), source })?;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        // The command runs the branch's code, which an agent wrote: it gets
        // no variable of ward's beyond what a shell needs.
        .env_clear()
        .envs(["PATH", "HOME", "LANG", "TMPDIR", "USER"].iter().filter_map(|k| Some((*k, std::env::var_os(k)?))))
        .env("CI", "true")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| NotRun::Start { command: command.into(), source })?;
    let group = child.id().map(|p| p as i32);
    let kill = || {
        if let Some(pgid) = group {
            // SAFETY: kill(2) with a negative pid signals the group we created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    };
    let end = match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(status)) if status.success() => CiEnd::Passed,
        Ok(Ok(status)) => CiEnd::Failed(status.code()),
        Ok(Err(e)) => return Err(NotRun::Wait(e)),
        Err(_) => {
            kill();
            let _ = child.wait().await;
            CiEnd::TimedOut
        }
    };
    // Whatever it left running goes too.
    kill();
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(file: &str, text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join(file), text).unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new(file)).unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let who = git2::Signature::now("t", "t@example.invalid").unwrap();
        let id = repo.commit(Some("HEAD"), &who, &who, "one", &tree, &[]).unwrap();
        (dir, id.to_string())
    }

    #[tokio::test]
    async fn the_command_runs_on_the_commit_and_its_output_is_kept() {
        let (dir, commit) = repo_with("check.sh", "echo checking; exit 3\n");
        // A file only in the user's checkout is not in the CI's.
        std::fs::write(dir.path().join("local-only"), "x").unwrap();
        let log = dir.path().join("out/ci.log");
        let red = run(dir.path(), &commit, "test ! -e local-only && sh check.sh", Duration::from_secs(30), &log).await;
        assert_eq!(red.end, CiEnd::Failed(Some(3)));
        assert_eq!(red.tail(5), "checking");
        let worktrees = git2::Repository::open(dir.path()).unwrap().worktrees().unwrap();
        assert_eq!(worktrees.len(), 0, "the CI's checkout is removed");

        let green = run(dir.path(), &commit, "true", Duration::from_secs(30), &log).await;
        assert_eq!(green.end, CiEnd::Passed);
    }

    #[tokio::test]
    async fn a_command_past_its_limit_is_stopped() {
        let (dir, commit) = repo_with("a", "a");
        let log = dir.path().join("ci.log");
        let started = Instant::now();
        let slow = run(dir.path(), &commit, "sleep 30 & sleep 30", Duration::from_millis(300), &log).await;
        assert_eq!(slow.end, CiEnd::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
