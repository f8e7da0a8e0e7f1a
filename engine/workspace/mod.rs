//! One task's isolated environment for one stage run: its own git worktree
//! on `ward/issue-<n>` and, when the stage asks for one, its own emulator
//! container. [`Workspace::up`] before the agent, [`Workspace::down`] after
//! it, whatever happened in between (a signal included, see [`Cancel`]).
//!
//! Down is diagnostics first, then removal of what this run owns, then
//! verification that it is gone. [`WorkspaceReport::write`] puts
//! `report.json` in the run's artifacts folder; callers write it only when
//! the run and its teardown both succeeded.

pub mod emulator;
pub mod reaper;
pub mod worktree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use tokio::sync::watch;

use self::emulator::{Docker, Emulator, EmulatorError, Owner, Teardown};
use self::worktree::{CommitIdentity, GitRepo, Marker, TaskBranch, Worktree, WorktreeCleanup, WorktreeError};
use crate::config::EmulatorConfig;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    #[error("{first}; the worktree cleanup failed too: {cleanup}")]
    CleanupAfter { first: Box<WorkspaceError>, cleanup: Box<WorkspaceError> },
    #[error("the workspace of issue #{issue}, run {run} was not cleaned up: {}", problems.join("; "))]
    Teardown { issue: u64, run: String, problems: Vec<String> },
    #[error("cancelled by a signal before the workspace of issue #{issue} came up; nothing was created")]
    Cancelled { issue: u64 },
    #[error("a git task panicked or was cancelled: {0}")]
    Join(String),
    #[error("could not {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where ward keeps worktrees and run artifacts: `WARD_HOME`, else
/// `$RUNNER_TEMP/ward` in GitHub Actions, else the user cache folder
/// (`$XDG_CACHE_HOME/ward`, `~/.cache/ward`). `get` reads the environment.
pub fn ward_home(get: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| get(k).filter(|v| !v.is_empty());
    if let Some(home) = set("WARD_HOME") {
        return Some(home.into());
    }
    if set("GITHUB_ACTIONS").as_deref() == Some("true")
        && let Some(tmp) = set("RUNNER_TEMP")
    {
        return Some(Path::new(&tmp).join("ward"));
    }
    if let Some(cache) = set("XDG_CACHE_HOME") {
        return Some(Path::new(&cache).join("ward"));
    }
    set("HOME").map(|h| Path::new(&h).join(".cache").join("ward"))
}

/// A cancellation that SIGINT and SIGTERM (a cancelled Actions job) trigger.
/// Waits observe it and return; teardown then still runs.
#[derive(Clone)]
pub struct Cancel {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Default for Cancel {
    fn default() -> Self {
        let (tx, rx) = watch::channel(false);
        Self { tx: Arc::new(tx), rx }
    }
}

impl Cancel {
    /// A cancellation only [`Cancel::cancel`] triggers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cancellation SIGINT or SIGTERM triggers. Once installed, these
    /// signals no longer end the process: the caller tears down and exits.
    pub fn on_signals() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let cancel = Self::new();
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => tracing::warn!("SIGINT: cancelling; the workspace is still torn down"),
                _ = term.recv() => tracing::warn!("SIGTERM: cancelling; the workspace is still torn down"),
            }
            c.cancel();
        });
        Ok(cancel)
    }

    /// The process's one signal-triggered cancellation, installed on first
    /// use. Once installed, a signal between two stage runs is not lost: the
    /// next run sees [`Cancel::is_cancelled`] and stops before it starts.
    pub fn process() -> std::io::Result<Self> {
        static PROCESS: std::sync::OnceLock<Cancel> = std::sync::OnceLock::new();
        if let Some(c) = PROCESS.get() {
            return Ok(c.clone());
        }
        let c = Self::on_signals()?;
        Ok(PROCESS.get_or_init(|| c).clone())
    }

    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once cancelled (at once if it already is).
    pub async fn cancelled(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Runs `f` unless cancelled first: `None` means a signal came.
    pub async fn guard<F: std::future::Future>(&self, f: F) -> Option<F::Output> {
        tokio::select! {
            out = f => Some(out),
            _ = self.cancelled() => None,
        }
    }
}

/// How a repository's stage runs get their workspace: decided once per
/// command by [`WorkspacePlan::detect`].
#[derive(Debug, Clone)]
pub struct WorkspacePlan {
    pub home: PathBuf,
    pub base: String,
    pub docker_socket: Option<String>,
    pub identity: CommitIdentity,
    /// GitHub mode: where the treat stage pushes the task branch.
    pub push: Option<PushTarget>,
}

/// A remote to push task branches to, with the token to do it.
#[derive(Clone)]
pub struct PushTarget {
    /// `https://github.com/OWNER/NAME.git`; no credentials in it.
    pub url: String,
    pub token: Option<String>,
}

impl std::fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let token = self.token.as_ref().map(|_| "***");
        f.debug_struct("PushTarget").field("url", &self.url).field("token", &token).finish()
    }
}

impl PushTarget {
    /// In GitHub Actions: `$GITHUB_SERVER_URL/$GITHUB_REPOSITORY.git` with
    /// `token` (ward's, from [`crate::secrets`]). `None` elsewhere.
    pub fn detect(get: impl Fn(&str) -> Option<String>, token: Option<&str>) -> Option<Self> {
        let set = |k: &str| get(k).filter(|v| !v.is_empty());
        if set("GITHUB_ACTIONS").as_deref() != Some("true") {
            return None;
        }
        let repo = set("GITHUB_REPOSITORY")?;
        let server = set("GITHUB_SERVER_URL").unwrap_or_else(|| "https://github.com".into());
        let url = format!("{}/{repo}.git", server.trim_end_matches('/'));
        Some(Self { url, token: token.filter(|t| !t.is_empty()).map(str::to_string) })
    }
}

impl WorkspacePlan {
    /// `None` when `root` is not a git repository with a branch checked out
    /// (then a run works in the folder it was given, as before). The base
    /// branch is `WARD_BASE`, else the branch checked out at `root`.
    pub fn detect(root: &Path, get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let git = GitRepo::open(root).ok()?;
        let base = get("WARD_BASE").filter(|b| !b.is_empty()).or_else(|| git.current_branch().ok().flatten());
        let Some(base) = base else {
            tracing::warn!(
                root = %root.display(),
                "no worktrees: HEAD is detached or unborn; set WARD_BASE to the branch task branches start from"
            );
            return None;
        };
        let home = ward_home(&get).unwrap_or_else(|| root.join(".ward").join("home"));
        let push = PushTarget::detect(&get, crate::secrets::Secrets::global().github_token());
        Some(Self { home, base, docker_socket: None, identity: CommitIdentity::default(), push })
    }

    /// The request of one stage run: no emulator, no restart, containers
    /// expiring after two hours; the caller adjusts the fields.
    pub fn request(&self, root: &Path, issue: u64, stage: &str, run: &str, artifacts: &Path) -> WorkspaceRequest {
        WorkspaceRequest {
            repo: root.to_path_buf(),
            home: self.home.clone(),
            base: self.base.clone(),
            issue,
            stage: stage.into(),
            run: run.into(),
            restart: false,
            emulator: None,
            docker_socket: self.docker_socket.clone(),
            expires_after: Duration::from_secs(2 * 60 * 60),
            identity: self.identity.clone(),
            artifacts: artifacts.to_path_buf(),
            remote: self.push.clone(),
        }
    }
}

/// What a stage run asks for.
#[derive(Debug, Clone)]
pub struct WorkspaceRequest {
    /// The repository (its worktree root or `.git`).
    pub repo: PathBuf,
    /// [`ward_home`].
    pub home: PathBuf,
    /// The branch task branches start from (`main`).
    pub base: String,
    pub issue: u64,
    pub stage: String,
    pub run: String,
    /// Reset `ward/issue-<n>` to the base first (the `restart` outcome).
    pub restart: bool,
    pub emulator: Option<EmulatorConfig>,
    /// Docker socket; `None` is `DOCKER_HOST` or the default.
    pub docker_socket: Option<String>,
    /// Containers carry `ward.expires` = now + this (the reaper's TTL).
    pub expires_after: Duration,
    pub identity: CommitIdentity,
    /// The run's artifacts folder: diagnostics, seed log, report.json
    /// ([`artifacts_dir`] when the caller has none of its own).
    pub artifacts: PathBuf,
    /// GitHub mode: fetch the task branch from here first, so a fresh
    /// checkout continues where the last stage's push left it.
    pub remote: Option<PushTarget>,
}

/// A workspace that is up.
pub struct Workspace {
    pub issue: u64,
    pub stage: String,
    pub run: String,
    pub repo: PathBuf,
    pub branch: TaskBranch,
    pub worktree: Worktree,
    pub emulator: Option<Emulator>,
    /// `<home>/runs/issue-<n>-<run>`: diagnostics, seed logs, report.json.
    pub artifacts: PathBuf,
    /// The commit [`Workspace::commit_leftovers`] made, if any.
    pub commit: Option<String>,
    docker: Option<Docker>,
    identity: CommitIdentity,
    up_ms: u64,
}

/// The success report: everything a person needs to trust the teardown.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceReport {
    pub issue: u64,
    pub stage: String,
    pub run: String,
    pub branch: String,
    pub commit: Option<String>,
    pub worktree: WorktreeCleanup,
    pub worktree_cleanup_verified: bool,
    pub containers: Vec<ContainerReport>,
    pub emulator_cleanup_verified: bool,
    pub readiness_ms: Option<u64>,
    pub seed: Option<emulator::SeedResult>,
    pub up_ms: u64,
    pub down_ms: u64,
    #[serde(skip)]
    pub artifacts: PathBuf,
}

/// One container this run created, from creation to verified removal.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerReport {
    pub id: String,
    pub name: String,
    pub image: String,
    /// Container port -> host port on 127.0.0.1.
    pub ports: std::collections::BTreeMap<u16, u16>,
    pub ready_ms: u64,
    /// `None` when it was still running at teardown (the normal case).
    pub exit_code: Option<i64>,
    pub log: PathBuf,
    pub inspect: PathBuf,
    pub removed_verified: bool,
    pub remove_ms: u64,
}

impl ContainerReport {
    fn new(em: &Emulator, t: Teardown) -> Self {
        Self {
            id: em.id.clone(),
            name: em.name.clone(),
            image: em.image.clone(),
            ports: em.ports.clone(),
            ready_ms: em.ready_ms,
            exit_code: t.exit_code,
            log: t.log,
            inspect: t.inspect,
            removed_verified: t.removed_verified,
            remove_ms: t.remove_ms,
        }
    }
}

impl WorkspaceReport {
    /// Writes `report.json` into the artifacts folder; returns its path.
    pub fn write(&self) -> Result<PathBuf, WorkspaceError> {
        let path = self.artifacts.join("report.json");
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        std::fs::write(&path, text + "\n").map_err(|source| WorkspaceError::Io {
            op: "write",
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

/// The artifacts folder of one run.
pub fn artifacts_dir(home: &Path, issue: u64, run: &str) -> PathBuf {
    home.join("runs").join(worktree::worktree_name(issue, run).trim_start_matches("ward-"))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorktreeError> + Send + 'static,
) -> Result<T, WorkspaceError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| WorkspaceError::Join(e.to_string()))?.map_err(Into::into)
}

impl Workspace {
    /// Task branch, worktree, then the emulator if asked for. A failure
    /// removes whatever this call made before it returns.
    pub async fn up(req: WorkspaceRequest, cancel: &Cancel) -> Result<Self, WorkspaceError> {
        if cancel.is_cancelled() {
            return Err(WorkspaceError::Cancelled { issue: req.issue });
        }
        let started = Instant::now();
        let artifacts = req.artifacts.clone();
        std::fs::create_dir_all(&artifacts).map_err(|source| WorkspaceError::Io {
            op: "create",
            path: artifacts.clone(),
            source,
        })?;
        let marker =
            Marker { issue: req.issue, stage: req.stage.clone(), run: req.run.clone(), created_at: Utc::now() };
        let (repo, home, base, issue, restart) =
            (req.repo.clone(), req.home.clone(), req.base.clone(), req.issue, req.restart);
        let remote = req.remote.clone();
        let (branch, worktree) = blocking(move || {
            if let Some(remote) = remote.filter(|_| !restart) {
                worktree::fetch_branch(&repo, &remote.url, &worktree::branch_name(issue), remote.token.as_deref())?;
            }
            let git = GitRepo::open(&repo)?;
            let branch = git.task_branch(issue, &base, restart)?;
            let wt = git.add_worktree(&home, &branch.name, &marker)?;
            Ok((branch, wt))
        })
        .await?;
        let mut ws = Workspace {
            issue: req.issue,
            stage: req.stage.clone(),
            run: req.run.clone(),
            repo: req.repo.clone(),
            branch,
            worktree,
            emulator: None,
            commit: None,
            docker: None,
            artifacts,
            identity: req.identity.clone(),
            up_ms: 0,
        };
        if let Some(config) = &req.emulator {
            let owner = Owner {
                run: req.run.clone(),
                issue: req.issue,
                stage: req.stage.clone(),
                expires: Utc::now()
                    + chrono::Duration::from_std(req.expires_after).unwrap_or(chrono::Duration::hours(2)),
            };
            let started = async {
                let docker = Docker::connect(req.docker_socket.as_deref()).await?;
                let em = emulator::start(&docker, config, &owner, &ws.worktree.path, &ws.artifacts, cancel).await?;
                Ok::<_, EmulatorError>((docker, em))
            }
            .await;
            match started {
                Ok((docker, em)) => {
                    ws.docker = Some(docker);
                    ws.emulator = Some(em);
                }
                Err(first) => {
                    let wt = ws.worktree.clone();
                    let repo = ws.repo.clone();
                    let cleanup = blocking(move || GitRepo::open(&repo)?.remove_worktree(&wt)).await;
                    return Err(match cleanup {
                        Ok(_) => first.into(),
                        Err(c) => WorkspaceError::CleanupAfter { first: Box::new(first.into()), cleanup: Box::new(c) },
                    });
                }
            }
        }
        ws.up_ms = started.elapsed().as_millis() as u64;
        Ok(ws)
    }

    /// Variables for the agent's environment (and nothing else's):
    /// `WARD_WORKTREE` and the emulator's exposed variables.
    pub fn agent_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("WARD_WORKTREE".to_string(), self.worktree.path.display().to_string())];
        if let Some(em) = &self.emulator {
            env.extend(em.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        env
    }

    /// Commits what the agent left uncommitted; `None` when nothing changed.
    /// The commit is remembered for the report.
    pub async fn commit_leftovers(&mut self) -> Result<Option<String>, WorkspaceError> {
        let message = format!(
            "ward: issue #{} stage {} run {}\n\nChanges the agent left uncommitted in its worktree.\n",
            self.issue, self.stage, self.run
        );
        let (repo, wt, who) = (self.repo.clone(), self.worktree.clone(), self.identity.clone());
        let made = blocking(move || GitRepo::open(&repo)?.commit_all(&wt, &who, &message)).await?;
        if made.is_some() {
            self.commit = made.clone();
        }
        Ok(made)
    }

    /// Pushes the task branch (forced after a `restart` reset it). `false`
    /// when there is nothing to push: the branch is still at the base.
    pub async fn push(&self, target: &PushTarget) -> Result<bool, WorkspaceError> {
        let (repo, branch, base, force) =
            (self.repo.clone(), self.branch.name.clone(), self.branch.base.clone(), self.branch.reset);
        let target = target.clone();
        blocking(move || {
            let git = GitRepo::open(&repo)?;
            if git.branch_head(&branch)?.is_none_or(|head| head == base) {
                return Ok(false);
            }
            worktree::push_branch(&repo, &target.url, &branch, target.token.as_deref(), force)?;
            Ok(true)
        })
        .await
    }

    /// Commits leftovers, captures the emulator's diagnostics, removes the
    /// container and the worktree, and verifies both are gone. Every step
    /// runs even when an earlier one failed; any failure is an error naming
    /// all of them.
    pub async fn down(mut self) -> Result<WorkspaceReport, WorkspaceError> {
        let started = Instant::now();
        let mut problems = Vec::new();
        if let Err(e) = self.commit_leftovers().await {
            problems.push(format!("committing the agent's changes: {e}"));
        }
        let commit = self.commit.clone();
        let mut containers = Vec::new();
        if let (Some(docker), Some(em)) = (&self.docker, &self.emulator) {
            match emulator::stop(docker, &em.id, &em.name, &self.artifacts).await {
                Ok(t) => containers.push(ContainerReport::new(em, t)),
                Err(e) => problems.push(e.to_string()),
            }
        }
        let (repo, wt) = (self.repo.clone(), self.worktree.clone());
        let cleanup = blocking(move || GitRepo::open(&repo)?.remove_worktree(&wt)).await;
        let cleanup = match cleanup {
            Ok(c) => Some(c),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        };
        if !problems.is_empty() {
            return Err(WorkspaceError::Teardown { issue: self.issue, run: self.run, problems });
        }
        let worktree = cleanup.expect("no problems means the worktree cleanup succeeded");
        Ok(WorkspaceReport {
            issue: self.issue,
            stage: self.stage,
            run: self.run,
            branch: self.branch.name,
            commit,
            worktree_cleanup_verified: worktree.verified(),
            worktree,
            emulator_cleanup_verified: containers.iter().all(|c| c.removed_verified),
            readiness_ms: self.emulator.as_ref().map(|e| e.ready_ms),
            seed: self.emulator.as_ref().and_then(|e| e.seed.clone()),
            containers,
            up_ms: self.up_ms,
            down_ms: started.elapsed().as_millis() as u64,
            artifacts: self.artifacts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn ward_home_prefers_the_variable_then_the_runner_then_the_cache() {
        assert_eq!(ward_home(env(&[("WARD_HOME", "/w"), ("HOME", "/h")])), Some("/w".into()));
        let actions = [("GITHUB_ACTIONS", "true"), ("RUNNER_TEMP", "/rt"), ("HOME", "/h")];
        assert_eq!(ward_home(env(&actions)), Some("/rt/ward".into()));
        assert_eq!(ward_home(env(&[("RUNNER_TEMP", "/rt"), ("HOME", "/h")])), Some("/h/.cache/ward".into()));
        assert_eq!(ward_home(env(&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")])), Some("/c/ward".into()));
        assert_eq!(ward_home(env(&[])), None);
    }

    #[test]
    fn a_push_target_exists_only_in_actions_and_never_shows_its_token() {
        assert!(PushTarget::detect(env(&[("GITHUB_REPOSITORY", "o/n")]), Some("t")).is_none());
        let actions = [("GITHUB_ACTIONS", "true"), ("GITHUB_REPOSITORY", "o/n")];
        let t = PushTarget::detect(env(&actions), Some("gh-secret")).unwrap();
        assert_eq!(t.url, "https://github.com/o/n.git");
        assert_eq!(t.token.as_deref(), Some("gh-secret"));
        assert!(!format!("{t:?}").contains("gh-secret"));
        assert_eq!(PushTarget::detect(env(&actions), Some("")).unwrap().token, None);
    }

    #[tokio::test]
    async fn a_cancel_ends_a_guarded_wait() {
        let cancel = Cancel::new();
        let c = cancel.clone();
        tokio::spawn(async move { c.cancel() });
        assert_eq!(cancel.guard(std::future::pending::<()>()).await, None);
        assert!(cancel.is_cancelled());
    }
}
