//! A patient's isolated environment for one stage run: a checkout of its
//! branch `ward/issue-<n>` and, when the stage asks for one, its own
//! emulator container. [`Workspace::up`] before the agent,
//! [`Workspace::commit_leftovers`] after it, [`Workspace::down`] whatever
//! happened in between (a signal included, see [`Cancel`]).
//!
//! The checkout is one per patient, not one per run ([`WorkspaceMode`]):
//! locally a worktree under the ward home, kept between the patient's
//! stages and reset and cleaned at the start of each; in a CI job the job's
//! own fresh checkout. [`Workspace::release`] removes the worktree when the
//! patient leaves; [`reap`] removes what killed runs and closed patients
//! left, and only what ward can prove it made.
//!
//! Down is diagnostics first, then removal of what this run owns (the
//! emulator), then verification that it is gone. [`WorkspaceReport::write`]
//! puts `report.json` in the run's artifacts folder; the report carries the
//! workspace's own setup, commit and teardown times.

pub mod added;
pub mod bundle;
pub mod checkpoint;
pub mod ci;
pub mod emulator;
mod errors;
pub mod git;
pub mod reaper;
pub mod shared;
pub mod snapshot;
pub mod worktree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::watch;

use self::emulator::{Docker, Emulator, EmulatorError, Owner, Teardown};
use self::worktree::{
    CommitIdentity, GitRepo, Head, Layout, Original, PatientLock, PatientRequest, TaskBranch, Worktree,
    WorktreeCleanup, WorktreeError,
};
use crate::config::{CheckpointConfig, EmulatorConfig};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{first}; putting the checkout back failed too: {cleanup}")]
    CleanupAfter { first: Box<WorkspaceError>, cleanup: Box<WorkspaceError> },
    #[error("the workspace of issue #{issue}, run {run} was not cleaned up: {}", problems.join("; "))]
    Teardown { issue: u64, run: String, problems: Vec<String> },
    #[error("cancelled by a signal before the workspace of issue #{issue} came up; nothing was created")]
    Cancelled { issue: u64 },
    #[error(
        "could not {op} the checkpoint {}: {message}; to start from the seed instead, remove it with its \
         `.json` marker, or give the patient the `restart` outcome",
        path.display()
    )]
    Checkpoint { path: PathBuf, op: &'static str, message: String },
    #[error(
        "the emulator's data did not read back after ward loaded {what}: {detail}; the stage stopped before its \
         agent ran. Both exports are in {} (`.loaded` and `.read-back`). An import that fails quietly does this: \
         make the `import` command stop at the first error and exit non-zero (psql: `-v ON_ERROR_STOP=1 \
         --single-transaction`)",
        artifacts.display()
    )]
    ReadBack { what: String, detail: String, artifacts: PathBuf },
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

/// Where a patient's stages run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// One worktree per patient under the ward home, kept between its
    /// stages (reset and cleaned at the start of each), removed when the
    /// patient leaves or by the reaper. The default outside CI.
    Worktree,
    /// The job's own checkout: ward checks the patient's branch out there
    /// and runs the agent in it, with no second checkout, then puts the
    /// checkout back. For CI jobs, whose fresh checkout is disposable; the
    /// default when `GITHUB_ACTIONS=true`.
    Checkout,
}

/// Why a repository's stages cannot get a workspace. Each is one sentence
/// with the fix; ward never falls back to running an agent in a person's
/// own checkout.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "HEAD of {} is detached (at {}), so ward cannot tell which branch patients' branches start from: \
         set WARD_BASE to that branch (for example `WARD_BASE={suggestion}`) or check it out \
         (`git -C {} switch {suggestion}`); ward never runs an agent in your own checkout",
        root.display(), &commit[..commit.len().min(12)], root.display()
    )]
    Detached { root: PathBuf, commit: String, suggestion: String },
    #[error(
        "the repository at {} has no commit yet (branch `{branch}` is unborn), and patients' branches start \
         from a commit: commit the project first, or set WARD_BASE to a branch that has commits",
        root.display()
    )]
    Unborn { root: PathBuf, branch: String },
    #[error(
        "{} is inside the repository at {}, not at its top: run ward with `--root {}`",
        root.display(), top.display(), top.display()
    )]
    NotTopLevel { root: PathBuf, top: PathBuf },
    #[error("`{value}` is not a workspace mode: set WARD_WORKSPACE to `worktree` or `checkout`")]
    BadMode { value: String },
    #[error("could not read the git repository at {}: {message}", root.display())]
    Unreadable { root: PathBuf, message: String },
}

/// How a repository's stage runs get their workspace: decided once per
/// command by [`WorkspacePlan::detect`]; the caller may change any field
/// (the mode included).
#[derive(Debug, Clone)]
pub struct WorkspacePlan {
    pub mode: WorkspaceMode,
    pub home: PathBuf,
    pub base: String,
    pub docker_socket: Option<String>,
    pub identity: CommitIdentity,
    /// GitHub mode: where the treat stage pushes the task branch.
    pub push: Option<PushTarget>,
    /// Whose containers these are, with [`installation_id`]: `owner/name`
    /// in Actions, else the repository's git folder.
    pub repository: String,
    /// Folders (from the top of the checkout) ward never commits: its own
    /// state, `.ward/`, and locally the local forge's `charts/`.
    pub state_paths: Vec<String>,
    /// Initialise submodules in the workspace; `None`: when `.gitmodules`
    /// exists. `WARD_SUBMODULES=0` or `1` sets it.
    pub submodules: Option<bool>,
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

/// Which of `paths` (from the top of the repository) are ward's own: under
/// one of `state_paths` (`.ward/`, locally the local forge's `charts/`).
pub fn ward_files(paths: &[String], state_paths: &[String]) -> Vec<String> {
    paths.iter().filter(|p| state_paths.iter().any(|s| git::under(p, s))).cloned().collect()
}

impl WorkspacePlan {
    /// The plan for the repository whose top folder is `root`. `Ok(None)`
    /// when `root` is in no git repository at all (there is no checkout to
    /// protect and nothing to commit to: the caller runs the agent in the
    /// folder it was given). The base branch is `WARD_BASE`, else the branch
    /// checked out at `root`; a detached or unborn HEAD without `WARD_BASE`
    /// is an error naming both, never a fallback. The mode is `checkout`
    /// when `GITHUB_ACTIONS=true`, else `worktree`; `WARD_WORKSPACE` sets it.
    pub fn detect(root: &Path, get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, PlanError> {
        Self::detect_for(root, get, true)
    }

    /// [`WorkspacePlan::detect`] for the reaper, which starts no branch:
    /// a detached or unborn HEAD is no error (`base` is then empty).
    pub fn detect_for_reaping(root: &Path, get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, PlanError> {
        Self::detect_for(root, get, false)
    }

    fn detect_for(
        root: &Path,
        get: impl Fn(&str) -> Option<String>,
        needs_base: bool,
    ) -> Result<Option<Self>, PlanError> {
        let set = |k: &str| get(k).filter(|v| !v.is_empty());
        let unreadable = |e: WorktreeError| PlanError::Unreadable { root: root.to_path_buf(), message: e.to_string() };
        let Some(git) = GitRepo::discover(root).map_err(unreadable)? else { return Ok(None) };
        if let Some(top) = git.workdir()
            && !same_dir(top, root)
        {
            return Err(PlanError::NotTopLevel { root: root.to_path_buf(), top: top.to_path_buf() });
        }
        let base = match (set("WARD_BASE"), git.head().map_err(unreadable)?) {
            (Some(base), _) => base,
            (None, Head::Branch(b)) => b,
            (None, _) if !needs_base => String::new(),
            (None, Head::Detached(commit)) => {
                let suggestion = git.default_branch_guess().unwrap_or_else(|| "main".into());
                return Err(PlanError::Detached { root: root.to_path_buf(), commit, suggestion });
            }
            (None, Head::Unborn(branch)) => return Err(PlanError::Unborn { root: root.to_path_buf(), branch }),
        };
        let actions = set("GITHUB_ACTIONS").as_deref() == Some("true");
        let mode = match set("WARD_WORKSPACE").as_deref() {
            None => {
                if actions {
                    WorkspaceMode::Checkout
                } else {
                    WorkspaceMode::Worktree
                }
            }
            Some("worktree") => WorkspaceMode::Worktree,
            Some("checkout") => WorkspaceMode::Checkout,
            Some(other) => return Err(PlanError::BadMode { value: other.into() }),
        };
        let home = ward_home(&get).unwrap_or_else(|| root.join(".ward").join("home"));
        let repository = match set("GITHUB_REPOSITORY").filter(|_| actions) {
            Some(r) => r,
            None => git.git_dir().canonicalize().unwrap_or_else(|_| git.git_dir().to_path_buf()).display().to_string(),
        };
        let mut state_paths = vec![".ward".to_string()];
        if !actions {
            state_paths.push("charts".into());
        }
        let submodules = match set("WARD_SUBMODULES").as_deref() {
            Some("0") | Some("false") => Some(false),
            Some(_) => Some(true),
            None => None,
        };
        let push = PushTarget::detect(&get, crate::secrets::Secrets::global().github_token());
        let identity = CommitIdentity::default();
        Ok(Some(Self { mode, home, base, docker_socket: None, identity, push, repository, state_paths, submodules }))
    }

    /// The request of one stage run: no emulator, no restart, containers
    /// expiring after two hours; the caller adjusts the fields.
    pub fn request(&self, root: &Path, issue: u64, stage: &str, run: &str, artifacts: &Path) -> WorkspaceRequest {
        WorkspaceRequest {
            mode: self.mode,
            repo: root.to_path_buf(),
            home: self.home.clone(),
            base: self.base.clone(),
            issue,
            stage: stage.into(),
            run: run.into(),
            restart: false,
            emulator: None,
            checkpoints: false,
            docker_socket: self.docker_socket.clone(),
            expires_after: Duration::from_secs(2 * 60 * 60),
            identity: self.identity.clone(),
            artifacts: artifacts.to_path_buf(),
            remote: self.push.clone(),
            repository: self.repository.clone(),
            state_paths: self.state_paths.clone(),
            submodules: self.submodules,
        }
    }

    /// Removes the patient's worktree and checkpoints when the patient
    /// leaves without a workspace up (merged by the merge queue, closed by
    /// a person), verified; `None` when there is no worktree, or in
    /// checkout mode (the job's checkout is not ward's).
    pub async fn release(&self, root: &Path, issue: u64) -> Result<Option<WorktreeCleanup>, WorkspaceError> {
        if self.mode == WorkspaceMode::Checkout {
            return Ok(None);
        }
        let owner =
            checkpoint::Owner { repository: self.repository.clone(), installation: installation_id(&self.home)? };
        let (root, home) = (root.to_path_buf(), self.home.clone());
        blocking(move || {
            let git = GitRepo::open(&root)?;
            let layout = Layout::new(&home, &git)?;
            let cleanup = worktree::remove_patient(&git, &layout, issue, None)?;
            checkpoint::Store::new(&layout.checkpoints, owner).drop_patient(issue)?;
            Ok(cleanup)
        })
        .await
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// This installation of ward: a random id generated once and kept in the
/// ward home (`<home>/installation-id`). Containers carry it, and the
/// reaper removes only containers that carry it.
pub fn installation_id(home: &Path) -> Result<String, WorkspaceError> {
    let path = home.join("installation-id");
    let io = |op: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| WorkspaceError::Io { op, path, source }
    };
    if let Ok(text) = std::fs::read_to_string(&path)
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_string());
    }
    std::fs::create_dir_all(home).map_err(io("create", home))?;
    let mut bytes = [0u8; 16];
    {
        use std::io::Read;
        let mut urandom = std::fs::File::open("/dev/urandom").map_err(io("open", Path::new("/dev/urandom")))?;
        urandom.read_exact(&mut bytes).map_err(io("read", Path::new("/dev/urandom")))?;
    }
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // Written aside, then linked into place: two first runs at once agree
    // on whichever id was linked first.
    let tmp = home.join(format!(".installation-id.{}", std::process::id()));
    std::fs::write(&tmp, format!("{id}\n")).map_err(io("write", &tmp))?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(&path).map_err(io("read", &path))?.trim().to_string())
        }
        Err(e) => Err(io("write", &path)(e)),
    }
}

/// What a stage run asks for.
#[derive(Debug, Clone)]
pub struct WorkspaceRequest {
    pub mode: WorkspaceMode,
    /// The repository (its top folder, or `.git`).
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
    /// Use the patient's checkpoints ([`checkpoint`]) when the emulator has
    /// a checkpoint section: start from the latest one on the branch (a
    /// `restart` drops them first), else from the seed, whose export is
    /// kept; [`Workspace::checkpoint`] saves one. Stage runs set it.
    pub checkpoints: bool,
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
    /// See [`WorkspacePlan::repository`].
    pub repository: String,
    /// See [`WorkspacePlan::state_paths`].
    pub state_paths: Vec<String>,
    /// See [`WorkspacePlan::submodules`].
    pub submodules: Option<bool>,
}

/// What the workspace holds while it is up.
enum Hold {
    /// The patient's lock; released at down.
    Patient { layout: Layout, lock: PatientLock },
    /// Where the job's checkout was, to put it back at down.
    Checkout(Original),
}

/// A workspace that is up.
pub struct Workspace {
    pub issue: u64,
    pub stage: String,
    pub run: String,
    pub mode: WorkspaceMode,
    pub repo: PathBuf,
    pub branch: TaskBranch,
    /// Where the agent works.
    pub worktree: Worktree,
    pub emulator: Option<Emulator>,
    /// The run's artifacts folder: diagnostics, seed logs, report.json.
    pub artifacts: PathBuf,
    /// The commit [`Workspace::commit_leftovers`] made, if any.
    pub commit: Option<String>,
    docker: Option<Docker>,
    identity: CommitIdentity,
    state_paths: Vec<String>,
    submodules: bool,
    hold: Hold,
    /// The patient's checkpoints, when the request used them.
    checkpoints: Option<checkpoint::Store>,
    /// The emulator's data: how it was checkpointed and where it started.
    data: Option<Data>,
    data_report: DataReport,
    /// What the data an accepted treatment left did to the schema, read
    /// when it was checkpointed ([`Workspace::checkpoint`]).
    schema: Option<TreatedSchema>,
    up_ms: u64,
    commit_ms: u64,
    /// The patient's worktree as the run started: clean at its start
    /// ([`snapshot`]); `None` in a job's checkout, with submodules, and
    /// once the run's changes were discarded.
    at_start: Option<Arc<snapshot::Snapshot>>,
}

/// The emulator's data of a run that uses checkpoints.
struct Data {
    config: CheckpointConfig,
    /// The export the run started from (the checkpoint loaded, or the
    /// seed's); `None` when the seed's export failed.
    start: Option<Vec<u8>>,
    /// The checkpoint it was loaded from; `None`: the seed.
    from: Option<checkpoint::Marker>,
    /// [`inside_env`].
    env: Vec<String>,
}

/// The database schema after an accepted treatment, against the seed's
/// export, as ward read the two exports: what a CHECKPOINT note records
/// and the discharge audit's migration check reads.
#[derive(Debug, Clone, PartialEq)]
pub struct TreatedSchema {
    /// The branch head the data belongs to (`None`: the branch was gone).
    pub commit: Option<String>,
    pub reading: checkpoint::SchemaReading,
}

/// What the run did with checkpoints, in `report.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DataReport {
    /// The checkpoint the emulator started from (its `.data` file); `None`: the seed.
    pub loaded: Option<PathBuf>,
    /// The commit that checkpoint belongs to.
    pub loaded_commit: Option<String>,
    /// Checkpoints dropped at the start (a `restart`) or at discharge.
    pub dropped: Vec<String>,
    /// The checkpoint this run saved.
    pub saved: Option<PathBuf>,
    /// On GitHub: the commit of the patient's shared checkpoint
    /// ([`shared`]) taken into this job's store.
    pub shared: Option<String>,
    /// Whether the load was read back and matched: the checkpoint's
    /// export after its import is the checkpoint, or the seed changed
    /// the empty emulator's data.
    pub read_back: bool,
    /// What went wrong with an export (the run went on), or with a load's
    /// read-back (the stage stopped before its agent).
    pub problems: Vec<String>,
}

/// The code reviewer's view of the data: the checkpoint its emulator
/// started from against the seed's export.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataView {
    /// The commit of the checkpoint.
    pub commit: String,
    /// Whether the seed's export was there to compare with (else the diff
    /// is against no data at all).
    pub seed_kept: bool,
    /// The rows that changed. For a PostgreSQL dump, data rows only (each
    /// prefixed with its table); otherwise the export's lines.
    pub diff: checkpoint::DataDiff,
    /// For a PostgreSQL dump: the schema's lines that changed (`None`: the
    /// export is not a pg_dump).
    pub schema: Option<checkpoint::DataDiff>,
    /// For a PostgreSQL dump: each table's rows and checksum, before and after.
    pub tables: Vec<checkpoint::TableSummary>,
}

/// What became of the checkout at the end of a stage.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum WorktreeEnd {
    /// Kept for the patient's next stage, recorded as ward's in `record`.
    Kept { path: PathBuf, record: PathBuf, created: bool },
    /// Removed, and verified gone (the patient left).
    Removed(WorktreeCleanup),
    /// CI mode: the job's checkout, put back on what it was on.
    Restored { path: PathBuf, to: String },
}

/// The success report: everything a person needs to trust the teardown.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceReport {
    pub issue: u64,
    pub stage: String,
    pub run: String,
    pub mode: WorkspaceMode,
    pub branch: String,
    pub commit: Option<String>,
    pub worktree: WorktreeEnd,
    pub containers: Vec<ContainerReport>,
    pub emulator_cleanup_verified: bool,
    pub readiness_ms: Option<u64>,
    pub seed: Option<emulator::SeedResult>,
    /// Checkpoints: what the emulator started from, what was saved.
    pub data: DataReport,
    /// Setup: the checkout (created, or reset and cleaned) and the emulator.
    pub up_ms: u64,
    /// The leftovers commit.
    pub commit_ms: u64,
    /// Teardown.
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

    /// The workspace's share of the stage's time: setup, commit, teardown.
    pub fn engine_ms(&self) -> u64 {
        self.up_ms + self.commit_ms + self.down_ms
    }
}

/// A fresh emulator for one check outside a patient's stage (the merge
/// queue's integration check): owned, labelled and reaped like a stage's
/// (this installation, this repository, `ward.expires`), seeded in
/// `workdir`, its diagnostics in the ward home's run folder.
pub struct CheckEmulator {
    docker: Docker,
    emulator: Emulator,
    artifacts: PathBuf,
}

impl CheckEmulator {
    /// Under the hospital's `plan`: its home (the artifacts, the
    /// installation the container is labelled with) and its Docker host,
    /// as the stages' emulators are.
    pub async fn start(
        plan: &WorkspacePlan,
        config: &EmulatorConfig,
        issue: u64,
        run: &str,
        workdir: &Path,
        expires_after: Duration,
    ) -> Result<Self, WorkspaceError> {
        let owner = Owner {
            run: run.into(),
            issue,
            stage: "merge-queue".into(),
            expires: Utc::now() + chrono::Duration::from_std(expires_after).unwrap_or(chrono::Duration::hours(2)),
            repository: plan.repository.clone(),
            installation: installation_id(&plan.home)?,
        };
        let artifacts = artifacts_dir(&plan.home, issue, run);
        let docker = Docker::connect(plan.docker_socket.as_deref()).await?;
        let emulator = emulator::start(&docker, config, &owner, workdir, &artifacts, &Cancel::new()).await?;
        Ok(Self { docker, emulator, artifacts })
    }

    /// The rendered `expose` variables, for the check's environment.
    pub fn vars(&self) -> &std::collections::BTreeMap<String, String> {
        &self.emulator.vars
    }

    /// Diagnostics, removal, verification.
    pub async fn stop(self) -> Result<Teardown, WorkspaceError> {
        Ok(emulator::stop(&self.docker, &self.emulator.id, &self.emulator.name, &self.artifacts).await?)
    }
}

/// The emulator's variables as seen from inside its container, for its
/// checkpoint commands: `env`, and `expose` rendered with each container
/// port as itself (the host there is the container).
pub fn inside_env(config: &EmulatorConfig) -> Vec<String> {
    let ports: std::collections::BTreeMap<u16, u16> = config.ports.iter().map(|p| (*p, *p)).collect();
    let exposed = crate::config::render_expose(&config.expose, &ports).unwrap_or_default();
    config.env.iter().chain(exposed.iter()).map(|(k, v)| format!("{k}={v}")).collect()
}

/// The artifacts folder of one run.
pub fn artifacts_dir(home: &Path, issue: u64, run: &str) -> PathBuf {
    let run: String =
        run.chars().map(|c| if c.is_ascii_alphanumeric() || "-_".contains(c) { c } else { '-' }).collect();
    home.join("runs").join(format!("issue-{issue}-{run}"))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorktreeError> + Send + 'static,
) -> Result<T, WorkspaceError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| WorkspaceError::Join(e.to_string()))?.map_err(Into::into)
}

impl Workspace {
    /// The patient's checkout at its branch head, then the emulator if
    /// asked for. A failure puts back whatever this call changed (the
    /// patient's worktree is kept: it is clean, and the next run resets it
    /// anyway) before it returns.
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
        let r = req.clone();
        let (branch, worktree, hold, submodules, at_start) = blocking(move || {
            let git = GitRepo::open(&r.repo)?;
            if let Some(remote) = r.remote.as_ref().filter(|_| !r.restart) {
                git::fetch_branch(
                    git.git_dir(),
                    &remote.url,
                    &worktree::branch_name(r.issue),
                    remote.token.as_deref(),
                )?;
            }
            let top = git.workdir().map(Path::to_path_buf).unwrap_or_else(|| r.repo.clone());
            let submodules = r.submodules.unwrap_or_else(|| top.join(".gitmodules").exists());
            let preq = PatientRequest {
                issue: r.issue,
                base: &r.base,
                restart: r.restart,
                stage: &r.stage,
                run: &r.run,
                submodules,
            };
            let (branch, wt, hold, at_start) = match r.mode {
                WorkspaceMode::Worktree => {
                    let layout = Layout::new(&r.home, &git)?;
                    let (branch, wt, lock, at_start) = worktree::open_patient(&git, &layout, &preq)?;
                    (branch, wt, Hold::Patient { layout, lock }, at_start.map(Arc::new))
                }
                WorkspaceMode::Checkout => {
                    let (branch, wt, original) = worktree::switch_checkout(&git, &top, &preq, &r.state_paths)?;
                    (branch, wt, Hold::Checkout(original), None)
                }
            };
            // A repository that keeps files in LFS needs git-lfs to commit them.
            if !git::lfs_installed() && git.declares_lfs(&wt.start)? {
                if let Hold::Checkout(original) = &hold {
                    let co = git::Checkout::new(&wt.metadata, &wt.path);
                    worktree::restore_checkout(&git, &co, original, &r.state_paths, submodules)?;
                }
                return Err(WorktreeError::LfsMissing { path: top, file: None });
            }
            Ok((branch, wt, hold, submodules, at_start))
        })
        .await?;
        let mut ws = Workspace {
            issue: req.issue,
            stage: req.stage.clone(),
            run: req.run.clone(),
            mode: req.mode,
            repo: req.repo.clone(),
            branch,
            worktree,
            emulator: None,
            commit: None,
            docker: None,
            artifacts,
            identity: req.identity.clone(),
            state_paths: req.state_paths.clone(),
            submodules,
            hold,
            checkpoints: None,
            data: None,
            data_report: DataReport::default(),
            schema: None,
            up_ms: 0,
            commit_ms: 0,
            at_start,
        };
        // The patient's checkpoints: dropped on a restart, the latest on the
        // branch chosen (its emulator then starts without the seed).
        let checkpointing = req.emulator.as_ref().and_then(EmulatorConfig::checkpoint).filter(|_| req.checkpoints);
        let mut latest = None;
        if req.checkpoints {
            match ws.open_checkpoints(&req, checkpointing.is_some()).await {
                Ok(found) => latest = found,
                Err(first) => {
                    return Err(match ws.put_back().await {
                        Ok(_) => first,
                        Err(c) => WorkspaceError::CleanupAfter { first: Box::new(first), cleanup: Box::new(c) },
                    });
                }
            }
        }
        if let Some(config) = &req.emulator {
            let mut config = config.clone();
            if latest.is_some() {
                config.seed = None;
            }
            let config = &config;
            let started = async {
                let owner = Owner {
                    run: req.run.clone(),
                    issue: req.issue,
                    stage: req.stage.clone(),
                    expires: Utc::now()
                        + chrono::Duration::from_std(req.expires_after).unwrap_or(chrono::Duration::hours(2)),
                    repository: req.repository.clone(),
                    installation: installation_id(&req.home).map_err(|e| EmulatorError::Api {
                        op: "label containers with",
                        object: "the installation id".into(),
                        message: e.to_string(),
                    })?,
                };
                let docker = Docker::connect(req.docker_socket.as_deref()).await?;
                let em = emulator::start(&docker, config, &owner, &ws.worktree.path, &ws.artifacts, cancel).await?;
                Ok::<_, EmulatorError>((docker, em))
            }
            .await;
            match started {
                Ok((docker, em)) => {
                    ws.docker = Some(docker);
                    ws.emulator = Some(em);
                    if let Some(checkpointing) = checkpointing
                        && let Err(first) = ws.load_data(checkpointing, config, latest).await
                    {
                        // The emulator is this run's: taken down with the
                        // checkout put back, the problem in report.json.
                        ws.data_report.problems.push(first.to_string());
                        return Err(match ws.finish(false).await {
                            Ok(report) => {
                                if let Err(e) = report.write() {
                                    tracing::warn!("{e}");
                                }
                                first
                            }
                            Err(c) => WorkspaceError::CleanupAfter { first: Box::new(first), cleanup: Box::new(c) },
                        });
                    }
                }
                Err(first) => {
                    return Err(match ws.put_back().await {
                        Ok(_) => first.into(),
                        Err(c) => WorkspaceError::CleanupAfter { first: Box::new(first.into()), cleanup: Box::new(c) },
                    });
                }
            }
        }
        ws.up_ms = started.elapsed().as_millis() as u64;
        Ok(ws)
    }

    /// The patient's checkpoint store: every checkpoint dropped on a
    /// restart; the newest on the branch (when `choose`).
    async fn open_checkpoints(
        &mut self,
        req: &WorkspaceRequest,
        choose: bool,
    ) -> Result<Option<checkpoint::Checkpoint>, WorkspaceError> {
        let owner = checkpoint::Owner { repository: req.repository.clone(), installation: installation_id(&req.home)? };
        let (repo, home, issue, restart, head) =
            (req.repo.clone(), req.home.clone(), req.issue, req.restart, self.worktree.start.clone());
        // On GitHub the patient's checkpoint comes from the forge (each job
        // has a home of its own); a restart starts from the seed.
        let remote = req.remote.clone().filter(|_| choose && !restart);
        let (store, dropped, latest, shared) = blocking(move || {
            let git = GitRepo::open(&repo)?;
            let store = checkpoint::Store::new(&Layout::new(&home, &git)?.checkpoints, owner);
            let dropped = if restart { store.drop_patient(issue)? } else { Vec::new() };
            let shared = remote.map(|r| take_shared(&store, &r, issue));
            let latest = if choose { store.latest(&git, issue, &head, Utc::now()) } else { None };
            Ok((store, dropped, latest, shared))
        })
        .await?;
        self.checkpoints = Some(store);
        self.data_report.dropped = dropped;
        match shared {
            Some(Ok(commit)) => self.data_report.shared = commit,
            Some(Err(problem)) => self.data_report.problems.push(problem.to_string()),
            None => {}
        }
        Ok(latest)
    }

    /// The emulator's data at the start: the chosen checkpoint imported,
    /// or (started from the seed) the seed's export kept as the data
    /// diff's left side. Every load is read back: after a checkpoint's
    /// import the export must be the checkpoint itself, and after a seed
    /// it must differ from the export of the empty emulator taken before
    /// the seed; otherwise [`WorkspaceError::ReadBack`]. A checkpoint that
    /// does not import is an error; an export that fails after a seed is a
    /// problem in the report, and the run goes on.
    async fn load_data(
        &mut self,
        config: CheckpointConfig,
        emulator: &EmulatorConfig,
        latest: Option<checkpoint::Checkpoint>,
    ) -> Result<(), WorkspaceError> {
        let (Some(docker), Some(em), Some(store)) = (&self.docker, &self.emulator, &self.checkpoints) else {
            return Ok(());
        };
        let env = inside_env(emulator);
        match latest {
            Some(cp) => {
                docker.exec(&em.id, &config.import, &env, Some(&cp.data), config.time_limit).await.map_err(|e| {
                    WorkspaceError::Checkpoint { path: cp.path.clone(), op: "load", message: e.to_string() }
                })?;
                let back = docker.exec(&em.id, &config.export, &env, None, config.time_limit).await.map_err(|e| {
                    WorkspaceError::Checkpoint { path: cp.path.clone(), op: "read back", message: e.to_string() }
                })?;
                if back != cp.data {
                    let what = format!("the checkpoint {}", cp.path.display());
                    return Err(self.read_back_failed(what, &cp.data, &back));
                }
                self.data_report.loaded = Some(cp.path);
                self.data_report.loaded_commit = cp.marker.commit.clone();
                self.data_report.read_back = true;
                self.data = Some(Data { config, start: Some(cp.data), from: Some(cp.marker), env });
            }
            None => {
                let exported = docker.exec(&em.id, &config.export, &env, None, config.time_limit).await;
                let start = match exported {
                    Ok(out) => {
                        if let (Some(empty), Some(seed)) = (&em.before_seed, &em.seed) {
                            if *empty == out {
                                let what = format!("the seed (`{}`)", seed.command.join(" "));
                                return Err(self.read_back_failed(what, empty, &out));
                            }
                            self.data_report.read_back = true;
                        }
                        match store.save(self.issue, None, &self.run, &self.stage, config.keep, &out) {
                            Ok(_) => Some(out),
                            Err(e) => {
                                self.data_report.problems.push(format!("the seed's export was not kept: {e}"));
                                Some(out)
                            }
                        }
                    }
                    Err(e) => {
                        self.data_report.problems.push(format!("the seed's export failed: {e}"));
                        None
                    }
                };
                self.data = Some(Data { config, start, from: None, env });
            }
        }
        Ok(())
    }

    /// The read-back error, with what was loaded and what came back written
    /// into the artifacts folder.
    fn read_back_failed(&self, what: String, loaded: &[u8], back: &[u8]) -> WorkspaceError {
        let dir = self.artifacts.join("read-back");
        let _ = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("export.loaded"), loaded))
            .and_then(|()| std::fs::write(dir.join("export.read-back"), back));
        let detail = if loaded == back {
            "the seed changed nothing: the export after it is the export of the empty emulator".to_string()
        } else {
            let d = checkpoint::diff(loaded, back, 400);
            let first = d.text.lines().next().unwrap_or_default();
            format!(
                "the export after the load differs from what was loaded ({} lines missing, {} lines extra; first: `{}`)",
                d.removed,
                d.added,
                crate::untrusted::shown(first)
            )
        };
        WorkspaceError::ReadBack { what, detail, artifacts: dir }
    }

    /// The end of an accepted treatment: the emulator's data exported and,
    /// when it differs from what the run started from or the run started
    /// from a checkpoint the new head no longer descends from (a rebase),
    /// saved as a checkpoint of the branch's head commit. `None` when
    /// nothing was saved (no checkpointing, or nothing to carry forward).
    pub async fn checkpoint(&mut self) -> Result<Option<PathBuf>, WorkspaceError> {
        let saved = self.save_checkpoint().await;
        if let Err(e) = &saved {
            self.data_report.problems.push(e.to_string());
        }
        saved
    }

    async fn save_checkpoint(&mut self) -> Result<Option<PathBuf>, WorkspaceError> {
        let (Some(docker), Some(em), Some(store), Some(data)) =
            (&self.docker, &self.emulator, &self.checkpoints, &self.data)
        else {
            return Ok(None);
        };
        let c = &data.config;
        let fail = |op, message: String| WorkspaceError::Checkpoint { path: store.patient(self.issue), op, message };
        let (repo, branch) = (self.repo.clone(), self.branch.name.clone());
        let from = data.from.as_ref().and_then(|m| m.commit.clone());
        let (head, still_found) = blocking(move || {
            let git = GitRepo::open(&repo)?;
            let head = git.branch_head(&branch)?;
            let found = match (&from, &head) {
                (Some(from), Some(head)) => git.is_ancestor(from, head),
                _ => true,
            };
            Ok((head, found))
        })
        .await?;
        let out = match docker.exec(&em.id, &c.export, &data.env, None, c.time_limit).await {
            Ok(out) => out,
            Err(e) => {
                let e = fail("export the emulator's data into", e.to_string());
                // The schema this treatment left is then unknown, and said so.
                let why = format!("the emulator's data could not be exported after the treatment: {e}");
                self.schema = Some(TreatedSchema { commit: head, reading: checkpoint::SchemaReading::Unknown(why) });
                return Err(e);
            }
        };
        let seed = store.seed(self.issue);
        let reading = checkpoint::read_schema(seed.as_ref().map(|s| s.data.as_slice()), &out);
        self.schema = Some(TreatedSchema { commit: head.clone(), reading });
        let unchanged = data.start.as_deref() == Some(out.as_slice());
        // Unchanged data needs no checkpoint while the next stage still
        // finds the one it came from; after a rebase (the head no longer
        // descends from that checkpoint's commit) the data is saved again
        // for the new head, or the next stage would start from the seed.
        if unchanged && still_found {
            return Ok(None);
        }
        let head = head.ok_or_else(|| fail("find the branch head for", format!("`{}` is gone", self.branch.name)))?;
        let saved = store
            .save(self.issue, Some(&head), &self.run, &self.stage, c.keep, &out)
            .map_err(|e| fail("save", e.to_string()))?;
        self.data_report.saved = Some(saved.clone());
        Ok(Some(saved))
    }

    /// After [`Workspace::checkpoint`]: what the treatment's data did to
    /// the schema. `None` when the run keeps no checkpoints, or its branch
    /// head could not be read.
    pub fn treated_schema(&self) -> Option<&TreatedSchema> {
        self.schema.as_ref()
    }

    /// The visit job's end for a treating stage: the emulator's data saved
    /// as [`Workspace::checkpoint`] saves it, and that checkpoint with the
    /// seed's export written into the sealed visit `out` ([`shared::seal`]),
    /// for the record job to share. `false` when nothing was saved.
    pub async fn seal_checkpoint(&mut self, out: &Path) -> Result<bool, WorkspaceError> {
        let Some(saved) = self.checkpoint().await? else { return Ok(false) };
        let Some(store) = &self.checkpoints else { return Ok(false) };
        let fail = |message: String| WorkspaceError::Checkpoint { path: saved.clone(), op: "seal", message };
        let cp = store.at(&saved).ok_or_else(|| fail("it no longer matches its marker".into()))?;
        shared::seal(out, &cp, store.seed(self.issue).as_ref()).map_err(|e| fail(e.to_string()))?;
        Ok(true)
    }

    /// For the code reviewer: what the data the emulator started from (a
    /// checkpoint) changed against the seed's export, at most `max` bytes
    /// of lines. `None` when the run started from the seed.
    pub fn data_view(&self, max: usize) -> Option<DataView> {
        let data = self.data.as_ref()?;
        let commit = data.from.as_ref()?.commit.clone()?;
        let seed = self.checkpoints.as_ref().and_then(|s| s.seed(self.issue));
        let after = data.start.as_deref().unwrap_or_default();
        let before = seed.as_ref().map_or(&[][..], |s| &s.data);
        // A PostgreSQL dump is read apart: the schema, each table's counts
        // and checksums, then the rows (the budget shared between them).
        if let (Some(b), Some(a)) = (checkpoint::SqlDump::parse(before), checkpoint::SqlDump::parse(after)) {
            let (bs, as_) = (b.schema.join("\n") + "\n", a.schema.join("\n") + "\n");
            let schema = checkpoint::diff(bs.as_bytes(), as_.as_bytes(), max / 4);
            let diff = checkpoint::diff(b.rows().as_bytes(), a.rows().as_bytes(), max - schema.text.len());
            let tables = checkpoint::table_summaries(&b, &a);
            return Some(DataView { commit, seed_kept: seed.is_some(), diff, schema: Some(schema), tables });
        }
        let diff = checkpoint::diff(before, after, max);
        Some(DataView { commit, seed_kept: seed.is_some(), diff, schema: None, tables: Vec::new() })
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

    /// The setup time so far (checkout and emulator).
    pub fn up_ms(&self) -> u64 {
        self.up_ms
    }

    /// Commits what the agent left uncommitted, once, through the
    /// repository's own filters (see [`git::commit_leftovers`]); `None`
    /// when nothing changed. Refused when the checkout's `.git` no longer
    /// leads to the repository ward checked out there.
    pub async fn commit_leftovers(&mut self) -> Result<Option<String>, WorkspaceError> {
        let started = Instant::now();
        let message = format!(
            "ward: issue #{} stage {} run {}\n\nChanges the agent left uncommitted in its worktree.\n",
            self.issue, self.stage, self.run
        );
        let (repo, wt, who, state) =
            (self.repo.clone(), self.worktree.clone(), self.identity.clone(), self.state_paths.clone());
        let at_start = self.at_start.clone();
        let made = blocking(move || {
            let git = GitRepo::open(&repo)?;
            worktree::verify_git_dir(&wt.path, &wt.metadata, git.git_dir())?;
            let start = at_start.as_deref().map(|s| (wt.start.as_str(), s));
            git::commit_leftovers(&git::Checkout::new(&wt.metadata, &wt.path), &state, &who, &message, start)
        })
        .await;
        self.commit_ms += started.elapsed().as_millis() as u64;
        let made = made?;
        if made.is_some() {
            self.commit = made.clone();
        }
        Ok(made)
    }

    /// The visit job's end: what the agent left committed (under ward's
    /// identity, as [`Workspace::commit_leftovers`]), then the run's commits
    /// on top of where it started written as a bundle at `out`. `false` (no
    /// file) when the run committed nothing. Whether any of it is kept is
    /// the record job's decision, never this job's.
    pub async fn bundle(&mut self, out: &Path) -> Result<bool, WorkspaceError> {
        self.commit_leftovers().await?;
        let (wt, branch, out) = (self.worktree.clone(), self.branch.name.clone(), out.to_path_buf());
        blocking(move || bundle::create(&git::Checkout::new(&wt.metadata, &wt.path), &branch, &wt.start, &out)).await
    }

    /// The commit this run started at.
    pub fn start(&self) -> &str {
        &self.worktree.start
    }

    /// The files this run changed, relative to the top of the checkout:
    /// against the commit it started at, whether the agent committed them,
    /// staged them or left them (untracked files included, ignored ones and
    /// ward's own folders not). For stages that must not change code.
    pub async fn changed_paths(&self) -> Result<Vec<String>, WorkspaceError> {
        let (wt, state, at_start) = (self.worktree.clone(), self.state_paths.clone(), self.at_start.clone());
        blocking(move || {
            worktree::changed_since(&git::Checkout::new(&wt.metadata, &wt.path), &wt.start, &state, at_start.as_deref())
        })
        .await
    }

    /// The files under ward's own folders (its state paths) that the
    /// branch's commits changed since the run started: an agent that
    /// committed ward's locks or runs (see [`crate::rules::changes::no_ward_files`]).
    /// What is left uncommitted there is ward's and no change.
    pub async fn ward_files_committed(&self) -> Result<Vec<String>, WorkspaceError> {
        let (wt, state) = (self.worktree.clone(), self.state_paths.clone());
        blocking(move || worktree::committed_under(&git::Checkout::new(&wt.metadata, &wt.path), &wt.start, &state))
            .await
    }

    /// The lines this run added since it started, file by file (commits,
    /// index and work tree, untracked files included): what the credential
    /// scan reads.
    pub async fn added_lines(&self) -> Result<Vec<added::Added>, WorkspaceError> {
        let (wt, state) = (self.worktree.clone(), self.state_paths.clone());
        blocking(move || added::since(&git::Checkout::new(&wt.metadata, &wt.path), &wt.start, &state)).await
    }

    /// How many lines this run changed against the commit it started at
    /// (added plus removed), however it changed them; see
    /// [`worktree::diff_lines_since`].
    pub async fn diff_lines(&self) -> Result<u64, WorkspaceError> {
        let (wt, state) = (self.worktree.clone(), self.state_paths.clone());
        blocking(move || worktree::diff_lines_since(&git::Checkout::new(&wt.metadata, &wt.path), &wt.start, &state))
            .await
    }

    /// Throws away everything this run did: the branch back at the commit
    /// the run started at (the agent's own commits included), the checkout
    /// clean. What [`Workspace::commit_leftovers`] made is discarded too.
    pub async fn discard(&mut self) -> Result<(), WorkspaceError> {
        let (wt, state, mode) = (self.worktree.clone(), self.state_paths.clone(), self.mode);
        blocking(move || {
            let co = git::Checkout::new(&wt.metadata, &wt.path);
            worktree::reset_to(&co, &wt.start, mode == WorkspaceMode::Worktree, &state)
        })
        .await?;
        self.commit = None;
        self.at_start = None;
        Ok(())
    }

    /// Pushes the task branch (forced after a `restart` reset it, or when
    /// the run rebased it: its head no longer descends from where the run
    /// started). `false` when there is nothing to push: the branch is still
    /// at the base.
    pub async fn push(&self, target: &PushTarget) -> Result<bool, WorkspaceError> {
        let (repo, branch, base, reset) =
            (self.repo.clone(), self.branch.name.clone(), self.branch.base.clone(), self.branch.reset);
        let (target, start) = (target.clone(), self.worktree.start.clone());
        blocking(move || {
            let git = GitRepo::open(&repo)?;
            let Some(head) = git.branch_head(&branch)?.filter(|head| *head != base) else { return Ok(false) };
            let force = reset || !git.is_ancestor(&start, &head);
            git::push_branch(git.git_dir(), &target.url, &branch, target.token.as_deref(), force)?;
            Ok(true)
        })
        .await
    }

    /// The checkout's part of teardown: in CI mode the job's checkout back
    /// on what it was on; locally the record's time of use (the worktree
    /// stays for the next stage, which resets it).
    async fn put_back(&mut self) -> Result<WorktreeEnd, WorkspaceError> {
        let (path, state, submodules) = (self.worktree.path.clone(), self.state_paths.clone(), self.submodules);
        match &self.hold {
            Hold::Checkout(original) => {
                let original = original.clone();
                let to = match &original {
                    Original::Branch(b) => b.clone(),
                    Original::Detached(sha) => sha.clone(),
                };
                let (repo, metadata) = (self.repo.clone(), self.worktree.metadata.clone());
                blocking(move || {
                    let git = GitRepo::open(&repo)?;
                    let co = git::Checkout::new(&metadata, &path);
                    worktree::restore_checkout(&git, &co, &original, &state, submodules)
                })
                .await?;
                Ok(WorktreeEnd::Restored { path: self.worktree.path.clone(), to })
            }
            Hold::Patient { layout, .. } => {
                Ok(WorktreeEnd::Kept { path, record: layout.record(self.issue), created: self.worktree.created })
            }
        }
    }

    /// Captures the emulator's diagnostics, removes the container and
    /// verifies it is gone, and puts the checkout back (the patient's
    /// worktree stays for its next stage). Every step runs even when an
    /// earlier one failed; any failure is an error naming all of them.
    /// Nothing is committed here: [`Workspace::commit_leftovers`] does that
    /// once, when the caller decides the run's work is kept.
    pub async fn down(self) -> Result<WorkspaceReport, WorkspaceError> {
        self.finish(false).await
    }

    /// [`Workspace::down`], then the patient's worktree removed and
    /// verified gone: the patient left (discharge). In CI mode the same as
    /// down (the job's checkout is not ward's to remove).
    pub async fn release(self) -> Result<WorkspaceReport, WorkspaceError> {
        self.finish(true).await
    }

    async fn finish(mut self, release: bool) -> Result<WorkspaceReport, WorkspaceError> {
        let started = Instant::now();
        let mut problems = Vec::new();
        let mut containers = Vec::new();
        if let (Some(docker), Some(em)) = (&self.docker, &self.emulator) {
            match emulator::stop(docker, &em.id, &em.name, &self.artifacts).await {
                Ok(t) => containers.push(ContainerReport::new(em, t)),
                Err(e) => problems.push(e.to_string()),
            }
        }
        let mut end = match self.put_back().await {
            Ok(end) => Some(end),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        };
        match std::mem::replace(&mut self.hold, Hold::Checkout(Original::Detached(String::new()))) {
            Hold::Patient { layout, lock } if release => {
                let (repo, issue) = (self.repo.clone(), self.issue);
                let removed = blocking(move || {
                    let git = GitRepo::open(&repo)?;
                    worktree::remove_patient(&git, &layout, issue, Some(&lock))
                })
                .await;
                match removed {
                    Ok(Some(cleanup)) => end = Some(WorktreeEnd::Removed(cleanup)),
                    Ok(None) => {}
                    Err(e) => problems.push(e.to_string()),
                }
            }
            // Dropping the hold releases the patient's lock.
            _ => {}
        }
        // A patient who leaves takes its checkpoints along.
        if release && let Some(store) = &self.checkpoints {
            match store.drop_patient(self.issue) {
                Ok(dropped) => self.data_report.dropped.extend(dropped),
                Err(e) => problems.push(format!("the checkpoints of #{} were not removed: {e}", self.issue)),
            }
        }
        // Without an end, putting the checkout back failed and said why.
        let worktree = match end {
            Some(worktree) if problems.is_empty() => worktree,
            _ => return Err(WorkspaceError::Teardown { issue: self.issue, run: self.run, problems }),
        };
        Ok(WorkspaceReport {
            issue: self.issue,
            stage: self.stage,
            run: self.run,
            mode: self.mode,
            branch: self.branch.name,
            commit: self.commit,
            worktree,
            emulator_cleanup_verified: containers.iter().all(|c| c.removed_verified),
            readiness_ms: self.emulator.as_ref().map(|e| e.ready_ms),
            seed: self.emulator.as_ref().and_then(|e| e.seed.clone()),
            data: self.data_report,
            containers,
            up_ms: self.up_ms,
            commit_ms: self.commit_ms,
            down_ms: started.elapsed().as_millis() as u64,
            artifacts: self.artifacts,
        })
    }
}

/// Why the patient's shared checkpoint was not taken: a line of the
/// run's data report.
#[derive(Debug, thiserror::Error)]
enum NotTaken {
    #[error("{0}; the run starts without it")]
    Unusable(shared::Unusable),
    #[error("the shared checkpoint of #{issue} was not taken in ({source}); the run starts from the seed")]
    Adopt { issue: u64, source: WorktreeError },
}

/// The patient's shared checkpoint fetched and, when usable, saved into
/// `store` (with the seed's export it carries): its commit, `None` when
/// there is none, or why it was not taken.
fn take_shared(store: &checkpoint::Store, remote: &PushTarget, issue: u64) -> Result<Option<String>, NotTaken> {
    let fetched = shared::fetch(&remote.url, remote.token.as_deref(), issue);
    let Some(sealed) = fetched.map_err(NotTaken::Unusable)? else { return Ok(None) };
    let adopt = |part: &shared::Part| store.adopt(&part.marker, &part.data);
    let taken = sealed.seed.as_ref().map(adopt).transpose().and_then(|_| adopt(&sealed.checkpoint));
    match taken {
        Ok(_) => Ok(Some(sealed.commit().to_string())),
        Err(source) => Err(NotTaken::Adopt { issue, source }),
    }
}

/// The charge nurse's reaper over workspaces. Removes containers past their
/// `ward.expires` that carry both this installation's id and this
/// repository (a container of another installation or repository is never
/// touched, whatever its labels say); checkpoints of this installation and
/// repository past their expiry or of `closed` issues; patient worktrees ward has records
/// of that no run holds and that are half-made, of `closed` issues, or
/// unused for longer than `idle` (see [`worktree::reap_patients`]); and
/// `ward/issue-<n>` branches of `closed` issues that are merged into the
/// base branch (an unmerged one is kept, with a line). One line per thing
/// removed; Docker being unreachable is a line too, not an error.
pub async fn reap(
    plan: &WorkspacePlan,
    root: &Path,
    now: DateTime<Utc>,
    idle: Duration,
    closed: &[u64],
    artifacts: &Path,
) -> Result<Vec<String>, WorkspaceError> {
    let mut lines = Vec::new();
    match Docker::connect(plan.docker_socket.as_deref()).await {
        Ok(docker) => {
            let installation = installation_id(&plan.home)?;
            let gone = emulator::reap_expired(&docker, now, artifacts, &plan.repository, &installation).await?;
            lines.extend(gone.into_iter().map(|name| format!("container `{name}` (past its `ward.expires`)")));
        }
        Err(e) => lines.push(format!("containers not checked: {e}")),
    }
    let closed_patients = closed.to_vec();
    let (root, home, closed, base) = (root.to_path_buf(), plan.home.clone(), closed.to_vec(), plan.base.clone());
    let owner = checkpoint::Owner { repository: plan.repository.clone(), installation: installation_id(&plan.home)? };
    let (report, checkpoints) = blocking(move || {
        let git = GitRepo::open(&root)?;
        let layout = Layout::new(&home, &git)?;
        // A detached HEAD names no base: the default branch then.
        let base = if base.is_empty() { git.default_branch_guess().unwrap_or_default() } else { base };
        let report = worktree::reap_patients(&git, &layout, idle, now, &closed, &base)?;
        let checkpoints = checkpoint::Store::new(&layout.checkpoints, owner).reap(now, &closed)?;
        Ok((report, checkpoints))
    })
    .await?;
    lines.extend(checkpoints);
    // On GitHub: the shared checkpoints of closed patients and expired ones.
    if let Some(remote) = plan.push.clone() {
        let shared = blocking(move || shared::reap(&remote.url, remote.token.as_deref(), &closed_patients, now)).await;
        match shared {
            Ok(removed) => lines.extend(removed),
            Err(e) => lines.push(format!("shared checkpoints not checked: {e}")),
        }
    }
    lines.extend(report.removed_worktrees.into_iter().map(|(w, why)| format!("worktree `{w}` ({why})")));
    lines.extend(report.deleted_branches.into_iter().map(|b| format!("branch `{b}` (its issue is closed)")));
    lines.extend(
        report
            .kept
            .into_iter()
            .filter(|(_, why)| why.starts_with("its commits"))
            .map(|(b, why)| format!("kept `{b}`: {why}")),
    );
    Ok(lines)
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

    /// A repository with one commit on `master`.
    fn repo_on_master() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = git2::RepositoryInitOptions::new();
        opts.initial_head("master");
        let repo = git2::Repository::init_opts(dir.path(), &opts).unwrap();
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "base", &repo.find_tree(tree).unwrap(), &[]).unwrap();
        dir
    }

    #[test]
    fn the_mode_follows_ci_unless_ward_workspace_says_otherwise() {
        let dir = repo_on_master();
        let local = WorkspacePlan::detect(dir.path(), env(&[("WARD_HOME", "/w")])).unwrap().unwrap();
        assert_eq!((local.mode, local.base.as_str()), (WorkspaceMode::Worktree, "master"));
        assert_eq!(local.state_paths, vec![".ward".to_string(), "charts".to_string()]);
        assert!(local.repository.ends_with(".git"), "{}", local.repository);
        assert_eq!(local.submodules, None);
        let ci = [("GITHUB_ACTIONS", "true"), ("GITHUB_REPOSITORY", "o/n"), ("WARD_SUBMODULES", "0")];
        let ci = WorkspacePlan::detect(dir.path(), env(&ci)).unwrap().unwrap();
        assert_eq!((ci.mode, ci.repository.as_str(), ci.submodules), (WorkspaceMode::Checkout, "o/n", Some(false)));
        assert_eq!(ci.state_paths, vec![".ward".to_string()]);
        let chosen = [("GITHUB_ACTIONS", "true"), ("WARD_WORKSPACE", "worktree")];
        assert_eq!(WorkspacePlan::detect(dir.path(), env(&chosen)).unwrap().unwrap().mode, WorkspaceMode::Worktree);
        let err = WorkspacePlan::detect(dir.path(), env(&[("WARD_WORKSPACE", "in-place")])).unwrap_err();
        assert!(err.to_string().contains("`in-place` is not a workspace mode"), "{err}");
    }

    #[test]
    fn an_installation_id_is_made_once_and_kept() {
        let home = tempfile::tempdir().unwrap();
        let id = installation_id(home.path()).unwrap();
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(installation_id(home.path()).unwrap(), id);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(installation_id(other.path()).unwrap(), id, "another home is another installation");
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
