//! The git boundary of a workspace: task branches (git2, refs only) and the
//! patient's checkout (the git CLI, see [`super::git`]).
//!
//! - One branch per patient, `ward/issue-<n>`, created from the base branch
//!   on first use and reused afterwards; a `restart` resets it to the base.
//! - Locally, one worktree per patient, `<home>/worktrees/<repo>/ward-issue-<n>`,
//!   kept between its stages: each stage resets it to the branch head and
//!   cleans it, so every run starts from exactly the committed state. It is
//!   removed when the patient leaves (discharge) or by the reaper.
//! - Ownership is recorded in ward's state folder,
//!   `<home>/state/<repo>/issue-<n>.json`, outside every worktree and every
//!   `.git` (the agent is pointed at neither), and before any checkout
//!   starts: a run killed half-way leaves a record that says "creating",
//!   and the next run of the patient, or the reaper, clears it at once.
//!   A run holds `issue-<n>.lock` (an advisory lock the kernel releases when
//!   the process ends, however it ends) while the workspace is up.
//! - Removal deletes only `<home>/worktrees/<repo>/ward-issue-<n>` (a path
//!   ward derives, never one it reads back from a file) and the git
//!   metadata of that worktree, then checks both are gone.
//! - In a disposable CI checkout, the patient's branch is checked out in
//!   the checkout itself ([`switch_checkout`]): no second checkout.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use git2::{BranchType, ErrorCode, Repository};
use serde::{Deserialize, Serialize};

pub use super::errors::WorktreeError;
use super::errors::{Result, git, io_err};
pub use super::git::CommitIdentity;
use super::git::{self, Checkout, local};
use super::snapshot::{self, Snapshot};

/// The largest index (about 5,000 files) whose worktree ward snapshots.
const SNAPSHOT_MOST_INDEX_BYTES: u64 = 512 * 1024;

/// Task branches are `ward/issue-<n>`.
pub const BRANCH_PREFIX: &str = "ward/issue-";

/// `Ok(None)` for NotFound, the error otherwise.
fn found<T>(r: std::result::Result<T, git2::Error>) -> std::result::Result<Option<T>, git2::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The task branch after [`GitRepo::task_branch`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskBranch {
    pub name: String,
    pub head: String,
    /// The base branch's commit when the branch was looked up.
    pub base: String,
    pub created: bool,
    pub reset: bool,
    /// Created locally from `refs/remotes/origin/ward/issue-<n>` (an earlier
    /// stage's push, on a runner that starts from a fresh checkout).
    pub from_remote: bool,
}

/// Where a stage's agent works: the patient's worktree, or the job's checkout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Worktree {
    /// The name of its git metadata folder (`.git/worktrees/<name>`), or
    /// `checkout` for the job's own checkout.
    pub name: String,
    pub path: PathBuf,
    pub branch: String,
    /// The commit the run started at.
    pub start: String,
    /// Its git folder: `.git/worktrees/<name>`, or the checkout's `.git`.
    pub metadata: PathBuf,
    /// How long the checkout took (creation, or reset and clean).
    pub ready_ms: u64,
    /// Whether this run created it (a patient's first stage) or reused it.
    pub created: bool,
}

/// Proof that a worktree is gone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorktreeCleanup {
    pub name: String,
    pub path: PathBuf,
    pub folder_gone: bool,
    pub metadata_gone: bool,
}

impl WorktreeCleanup {
    pub fn verified(&self) -> bool {
        self.folder_gone && self.metadata_gone
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReapReport {
    /// (name, why it was removed)
    pub removed_worktrees: Vec<(String, String)>,
    pub deleted_branches: Vec<String>,
    /// (name, why it was kept)
    pub kept: Vec<(String, String)>,
}

/// The branch of a task.
pub fn branch_name(issue: u64) -> String {
    format!("{BRANCH_PREFIX}{issue}")
}

/// The HEAD of a checkout, for [`super::WorkspacePlan::detect`].
#[derive(Debug, Clone, PartialEq)]
pub enum Head {
    Branch(String),
    Detached(String),
    /// No commit yet; the branch HEAD names.
    Unborn(String),
}

/// A repository, opened once; the only holder of git2 objects in ward's workspace.
pub struct GitRepo {
    repo: Repository,
    root: PathBuf,
}

impl GitRepo {
    pub fn open(path: &Path) -> Result<Self> {
        let repo = Repository::open(path).map_err(git("open the repository", path.display().to_string()))?;
        let root = repo.commondir().to_path_buf();
        Ok(Self { repo, root })
    }

    /// The repository `path` is in (searching upwards), or `None`.
    pub fn discover(path: &Path) -> Result<Option<Self>> {
        match Repository::discover(path) {
            Ok(repo) => {
                let root = repo.commondir().to_path_buf();
                Ok(Some(Self { repo, root }))
            }
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(git("open the repository", path.display().to_string())(e)),
        }
    }

    /// The folder of the checkout it was opened at, if it has one.
    pub fn workdir(&self) -> Option<&Path> {
        self.repo.workdir()
    }

    /// Serialises changes to worktree metadata across threads and processes
    /// (an exclusive lock on `.git/ward-worktrees.lock`, released on drop):
    /// git's "already checked out" check reads every worktree and is fooled
    /// by one another run is adding or removing at the same moment.
    fn metadata_lock(&self) -> Result<std::fs::File> {
        let path = self.root.join("ward-worktrees.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        file.lock().map_err(io_err("lock", &path))?;
        Ok(file)
    }

    /// The common git folder (`.git`).
    pub fn git_dir(&self) -> &Path {
        &self.root
    }

    /// What HEAD of the checkout it was opened at is.
    pub fn head(&self) -> Result<Head> {
        match self.repo.head() {
            Ok(h) if h.is_branch() => Ok(Head::Branch(h.shorthand().unwrap_or_default().to_string())),
            Ok(h) => Ok(Head::Detached(h.target().map(|o| o.to_string()).unwrap_or_default())),
            Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
                let name = self
                    .repo
                    .find_reference("HEAD")
                    .ok()
                    .and_then(|r| r.symbolic_target().map(str::to_string))
                    .unwrap_or_default();
                Ok(Head::Unborn(name.trim_start_matches("refs/heads/").to_string()))
            }
            Err(e) => Err(git("read HEAD of", self.root.display().to_string())(e)),
        }
    }

    /// The short name of the branch checked out at the repository's root;
    /// `None` on a detached or unborn HEAD.
    pub fn current_branch(&self) -> Result<Option<String>> {
        Ok(match self.head()? {
            Head::Branch(b) => Some(b),
            _ => None,
        })
    }

    /// The branch a person would call the default: `origin/HEAD`'s, else
    /// `main` or `master` when one exists. For error messages.
    pub fn default_branch_guess(&self) -> Option<String> {
        let origin = self.repo.find_reference("refs/remotes/origin/HEAD").ok();
        if let Some(target) = origin.as_ref().and_then(|r| r.symbolic_target()) {
            return Some(target.trim_start_matches("refs/remotes/origin/").to_string());
        }
        ["main", "master"].into_iter().find(|b| self.repo.find_branch(b, BranchType::Local).is_ok()).map(str::to_string)
    }

    /// The commit a branch points at, or `None`.
    pub fn branch_head(&self, name: &str) -> Result<Option<String>> {
        let branch = found(self.repo.find_branch(name, BranchType::Local)).map_err(git("look up branch", name))?;
        Ok(branch.and_then(|b| b.get().target()).map(|o| o.to_string()))
    }

    /// Whether `ancestor` is `of` or one of its ancestors. A commit the
    /// repository does not have (an id from elsewhere) is neither.
    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> bool {
        let (Ok(a), Ok(b)) = (git2::Oid::from_str(ancestor), git2::Oid::from_str(of)) else { return false };
        if self.repo.find_commit(a).is_err() || self.repo.find_commit(b).is_err() {
            return false;
        }
        a == b || self.repo.graph_descendant_of(b, a).unwrap_or(false)
    }

    /// The base branch's commit: `refs/heads/<base>`, else `refs/remotes/origin/<base>`.
    fn base_commit(&self, base: &str) -> Result<git2::Commit<'_>> {
        for refname in [format!("refs/heads/{base}"), format!("refs/remotes/origin/{base}")] {
            let r = found(self.repo.find_reference(&refname)).map_err(git("look up", refname.clone()))?;
            if let Some(r) = r {
                return r.peel_to_commit().map_err(git("read the commit of", refname));
            }
        }
        Err(WorktreeError::BaseMissing { base: base.into(), repo: self.root.clone() })
    }

    /// The base branch's commit id.
    pub fn base_id(&self, base: &str) -> Result<String> {
        Ok(self.base_commit(base)?.id().to_string())
    }

    /// `ward/issue-<n>`: created from `base` on first use (or from the
    /// remote's branch of an earlier stage), reused after, reset to `base`
    /// when `restart`. A branch checked out anywhere is never reset here.
    pub fn task_branch(&self, issue: u64, base: &str, restart: bool) -> Result<TaskBranch> {
        let name = branch_name(issue);
        let _lock = self.metadata_lock()?;
        let base_commit = self.base_commit(base)?;
        let existing = found(self.repo.find_branch(&name, BranchType::Local)).map_err(git("look up branch", &name))?;
        let (created, reset) = match existing {
            Some(_) if !restart => (false, false),
            Some(_) => {
                if let Some(path) = self.checked_out_in(&format!("refs/heads/{name}"))? {
                    return Err(WorktreeError::BranchBusy { branch: name, path });
                }
                (false, true)
            }
            None => (true, false),
        };
        let mut from_remote = false;
        if created && !restart {
            let remote = format!("refs/remotes/origin/{name}");
            let r = found(self.repo.find_reference(&remote)).map_err(git("look up", remote.clone()))?;
            if let Some(r) = r {
                let commit = r.peel_to_commit().map_err(git("read the commit of", remote))?;
                self.repo.branch(&name, &commit, false).map_err(git("create branch", &name))?;
                from_remote = true;
            }
        }
        if (created && !from_remote) || reset {
            self.repo.branch(&name, &base_commit, reset).map_err(git("create branch", &name))?;
        }
        let head = self.branch_head(&name)?.unwrap_or_default();
        Ok(TaskBranch { name, head, base: base_commit.id().to_string(), created, reset, from_remote })
    }

    /// The worktree folder that has `refname` checked out, if any. Reads
    /// the metadata files directly: another run may be adding or removing
    /// its own worktree at this moment, and a half-made one is skipped.
    fn checked_out_in(&self, refname: &str) -> Result<Option<PathBuf>> {
        // The main checkout (whose HEAD is the common folder's).
        let main = std::fs::read_to_string(self.root.join("HEAD")).unwrap_or_default();
        if main.trim() == format!("ref: {refname}") && !self.repo.is_bare() {
            let top = self.root.parent().map(Path::to_path_buf).unwrap_or_else(|| self.root.clone());
            return Ok(Some(top));
        }
        let admin = self.root.join("worktrees");
        let Ok(entries) = std::fs::read_dir(&admin) else { return Ok(None) };
        for entry in entries.flatten() {
            let head = std::fs::read_to_string(entry.path().join("HEAD")).unwrap_or_default();
            if head.trim() != format!("ref: {refname}") {
                continue;
            }
            let gitdir = std::fs::read_to_string(entry.path().join("gitdir")).unwrap_or_default();
            let path = Path::new(gitdir.trim()).parent().map(Path::to_path_buf).unwrap_or_else(|| entry.path());
            return Ok(Some(path));
        }
        Ok(None)
    }

    /// Whether the tree of `commit` has a `.gitattributes` that puts files
    /// in LFS (`filter=lfs`). Reads the attribute files only.
    pub fn declares_lfs(&self, commit: &str) -> Result<bool> {
        let oid = git2::Oid::from_str(commit).map_err(git("read", commit))?;
        let tree = self.repo.find_commit(oid).and_then(|c| c.tree()).map_err(git("read the tree of", commit))?;
        let mut lfs = false;
        tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
            if entry.name() == Some(".gitattributes")
                && let Ok(blob) = self.repo.find_blob(entry.id())
                && String::from_utf8_lossy(blob.content()).contains("filter=lfs")
            {
                lfs = true;
                return git2::TreeWalkResult::Abort;
            }
            git2::TreeWalkResult::Ok
        })
        .or_else(|e| if lfs { Ok(()) } else { Err(e) })
        .map_err(git("read the tree of", commit))?;
        let info = self.root.join("info/attributes");
        Ok(lfs || std::fs::read_to_string(info).is_ok_and(|t| t.contains("filter=lfs")))
    }

    /// Whether every commit of branch `name` is in `base` (the local branch
    /// or its `origin/` copy): its head is one of theirs or an ancestor.
    pub fn merged_into(&self, name: &str, base: &str) -> Result<bool> {
        let Some(head) = self.repo.refname_to_id(&format!("refs/heads/{name}")).ok() else { return Ok(true) };
        for base_ref in [format!("refs/heads/{base}"), format!("refs/remotes/origin/{base}")] {
            let Ok(tip) = self.repo.refname_to_id(&base_ref) else { continue };
            if tip == head || self.repo.graph_descendant_of(tip, head).map_err(git("compare", name))? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes `ward/issue-<n>` of the `closed` issues that no checkout
    /// holds and whose commits are all in `base` (a closed issue's change
    /// that never merged is kept for a person to look at); other branches
    /// are never touched.
    pub fn delete_closed_branches(&self, closed: &[u64], base: &str, report: &mut ReapReport) -> Result<()> {
        let _lock = self.metadata_lock()?;
        let closed: BTreeSet<u64> = closed.iter().copied().collect();
        let branches =
            self.repo.branches(Some(BranchType::Local)).map_err(git("list branches of", "the repository"))?;
        let mut doomed = Vec::new();
        for branch in branches {
            let (branch, _) = branch.map_err(git("list branches of", "the repository"))?;
            let Some(name) = branch.name().ok().flatten().map(str::to_string) else { continue };
            let issue = name.strip_prefix(BRANCH_PREFIX).and_then(|n| n.parse::<u64>().ok());
            if issue.is_some_and(|n| closed.contains(&n)) {
                doomed.push(name);
            }
        }
        for name in doomed {
            if let Some(path) = self.checked_out_in(&format!("refs/heads/{name}"))? {
                report.kept.push((name, format!("checked out in {}", path.display())));
                continue;
            }
            if !self.merged_into(&name, base)? {
                report.kept.push((name, format!("its commits are not merged into `{base}`")));
                continue;
            }
            let mut branch = self.repo.find_branch(&name, BranchType::Local).map_err(git("look up branch", &name))?;
            branch.delete().map_err(git("delete branch", &name))?;
            if self.branch_head(&name)?.is_some() {
                return Err(WorktreeError::NotRemoved { name, what: "the branch", path: self.root.clone() });
            }
            report.deleted_branches.push(name);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Patient worktrees
// ---------------------------------------------------------------------------

/// Where ward keeps one repository's patient worktrees and its records of
/// them, under the ward home. `<repo>` is the repository's folder name and
/// a hash of its git folder, so repositories sharing a home never meet.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<home>/worktrees/<repo>`: the only folder ward removes worktrees from.
    pub worktrees: PathBuf,
    /// `<home>/state/<repo>`: ownership records and locks.
    pub state: PathBuf,
    /// `<home>/checkpoints/<repo>`: the patients' emulator data
    /// ([`super::checkpoint`]), the only folder ward removes them from.
    pub checkpoints: PathBuf,
    /// The repository's common git folder, canonical.
    pub git_dir: PathBuf,
    /// How long [`Layout::lock`] waits for another holder of a patient.
    pub lock_wait: Duration,
}

/// What ward records about a patient's worktree, before it exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub issue: u64,
    /// `creating` until the checkout is complete, then `ready`.
    pub state: RecordState,
    /// The repository's git folder (for people; ward derives every path it removes).
    pub repository: PathBuf,
    /// The worktree's git metadata folder, once git made it.
    pub metadata: Option<PathBuf>,
    pub created_at: DateTime<Utc>,
    pub used_at: DateTime<Utc>,
    /// The stage run that last used it.
    pub run: String,
    pub stage: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    Creating,
    Ready,
}

/// A patient's workspace lock; released when dropped or when the process ends.
#[derive(Debug)]
pub struct PatientLock(#[allow(dead_code)] std::fs::File);

/// How long a run waits for another process's hold on the same patient
/// (the reaper's is brief) before it gives up with [`WorktreeError::Busy`].
const LOCK_WAIT: Duration = Duration::from_secs(120);

impl Layout {
    /// The layout of `git`'s repository under `home`, folders created.
    pub fn new(home: &Path, git: &GitRepo) -> Result<Self> {
        use sha2::Digest;
        let git_dir = git.root.canonicalize().map_err(io_err("resolve", &git.root))?;
        let hash: String = sha2::Sha256::digest(git_dir.as_os_str().as_encoded_bytes())
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect();
        let folder = if git_dir.file_name().is_some_and(|n| n == ".git") { git_dir.parent() } else { Some(&*git_dir) };
        let name: String = folder
            .and_then(Path::file_name)
            .map(|n| {
                n.to_string_lossy()
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' })
                    .collect()
            })
            .unwrap_or_default();
        let key = format!("{}-{hash}", name.trim_start_matches('.'));
        let folder = |kind: &str| {
            let dir = home.join(kind).join(&key);
            std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
            dir.canonicalize().map_err(io_err("resolve", &dir))
        };
        let (worktrees, state, checkpoints) = (folder("worktrees")?, folder("state")?, folder("checkpoints")?);
        Ok(Self { worktrees, state, checkpoints, git_dir, lock_wait: LOCK_WAIT })
    }

    /// The patient's worktree folder.
    pub fn worktree(&self, issue: u64) -> PathBuf {
        self.worktrees.join(format!("ward-issue-{issue}"))
    }

    /// The patient's ownership record.
    pub fn record(&self, issue: u64) -> PathBuf {
        self.state.join(format!("issue-{issue}.json"))
    }

    fn lock_file(&self, issue: u64) -> Result<std::fs::File> {
        let path = self.state.join(format!("issue-{issue}.lock"));
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io_err("open", &path))
    }

    /// Takes the patient's lock, waiting a while for another holder.
    pub fn lock(&self, issue: u64) -> Result<PatientLock> {
        let file = self.lock_file(issue)?;
        let deadline = std::time::Instant::now() + self.lock_wait;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(PatientLock(file)),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = self
                        .read_record(issue)
                        .map(|r| format!("stage `{}`, run `{}`", r.stage, r.run))
                        .unwrap_or_else(|| "a run or the reaper".into());
                    return Err(WorktreeError::Busy { issue, holder });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io_err("lock", &self.state)(e)),
            }
        }
    }

    /// The patient's lock if nobody holds it.
    fn try_lock(&self, issue: u64) -> Result<Option<PatientLock>> {
        let file = self.lock_file(issue)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(PatientLock(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(io_err("lock", &self.state)(e)),
        }
    }

    pub fn read_record(&self, issue: u64) -> Option<Record> {
        let text = std::fs::read_to_string(self.record(issue)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes the record whole (a temporary file, then a rename): a run
    /// killed mid-write leaves the old record or the new one. No fsync: a
    /// killed process loses nothing the kernel has, and an fsync right
    /// after a checkout would wait for the whole checkout to reach the disk.
    fn write_record(&self, record: &Record) -> Result<()> {
        let path = self.record(record.issue);
        let tmp = self.state.join(format!(".issue-{}.json.tmp", record.issue));
        let text = serde_json::to_string_pretty(record).unwrap_or_default();
        std::fs::write(&tmp, text + "\n").map_err(io_err("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("write", &path))
    }

    /// The issues ward has records for, from the record file names.
    fn recorded_issues(&self) -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(&self.state) else { return Vec::new() };
        let mut issues: Vec<u64> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("issue-")?.strip_suffix(".json")?.parse().ok()
            })
            .collect();
        issues.sort_unstable();
        issues
    }
}

/// What a patient's stage asks of its worktree.
#[derive(Debug, Clone)]
pub struct PatientRequest<'a> {
    pub issue: u64,
    pub base: &'a str,
    pub restart: bool,
    pub stage: &'a str,
    pub run: &'a str,
    /// Initialise submodules (`git submodule update --init --recursive`).
    pub submodules: bool,
}

/// A `.git` file's target: `gitdir: <path>`.
fn gitdir_of(dot_git: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dot_git).ok()?;
    text.trim().strip_prefix("gitdir:").map(|p| PathBuf::from(p.trim()))
}

fn same(a: &Path, b: &Path) -> bool {
    a.canonicalize().ok().is_some_and(|a| b.canonicalize().is_ok_and(|b| a == b))
}

/// The patient's worktree, up and at its branch head: reused (reset and
/// cleaned) when ward made it and it is intact; else created, after
/// clearing whatever a killed run left. Returns it with the patient's lock,
/// which the caller holds until the stage is done.
pub fn open_patient(
    git: &GitRepo,
    layout: &Layout,
    req: &PatientRequest<'_>,
) -> Result<(TaskBranch, Worktree, PatientLock, Option<Snapshot>)> {
    let started = std::time::Instant::now();
    let lock = layout.lock(req.issue)?;
    let path = layout.worktree(req.issue);
    let record = layout.read_record(req.issue);
    let now = Utc::now();
    if let Some(record) = &record {
        if record.state == RecordState::Ready
            && let Some(metadata) = intact(git, layout, req.issue, record)
        {
            let co = Checkout::new(&metadata, &path);
            let (branch, start, snapshot) = refresh(git, &co, req)?;
            if req.submodules {
                fresh_submodules(git, &co)?;
            }
            let used = Record { used_at: now, run: req.run.into(), stage: req.stage.into(), ..record.clone() };
            layout.write_record(&used)?;
            let wt = worktree(&path, &metadata, &branch.name, start, started, false);
            return Ok((branch, wt, lock, snapshot));
        }
        // Half-made by a run that was killed, or no longer intact: clear it.
        remove_patient_locked(git, layout, req.issue, Some(record))?;
    } else if path.symlink_metadata().is_ok() {
        return Err(WorktreeError::PathExists { path });
    }
    let mut record = Record {
        issue: req.issue,
        state: RecordState::Creating,
        repository: layout.git_dir.clone(),
        metadata: None,
        created_at: now,
        used_at: now,
        run: req.run.into(),
        stage: req.stage.into(),
    };
    // Recorded before any checkout starts.
    layout.write_record(&record)?;
    let branch = match checkout_free(git, req) {
        Ok(branch) => branch,
        Err(e) => {
            // Nothing was made: no record either.
            let _ = std::fs::remove_file(layout.record(req.issue));
            return Err(e);
        }
    };
    {
        let _meta = git.metadata_lock()?;
        let mut add = local(git.workdir().unwrap_or(&git.root));
        let mut git_dir = std::ffi::OsString::from("--git-dir=");
        git_dir.push(&git.root);
        add.arg(git_dir).args(["worktree", "add", "--quiet"]).arg(&path).arg(&branch.name);
        git::run(add, "worktree add", None)?;
    }
    let metadata = gitdir_of(&path.join(".git"))
        .filter(|m| m.parent().is_some_and(|p| same(p, &git.root.join("worktrees"))))
        .ok_or_else(|| WorktreeError::Tampered { path: path.clone(), points_to: path.join(".git") })?;
    record.metadata = Some(metadata.clone());
    let co = Checkout::new(&metadata, &path);
    if req.submodules {
        submodules(git, &co)?;
    }
    record.state = RecordState::Ready;
    layout.write_record(&record)?;
    let snapshot = start_snapshot(&co, req);
    let wt = worktree(&path, &metadata, &branch.name, branch.head.clone(), started, true);
    Ok((branch, wt, lock, snapshot))
}

/// The snapshot a run starts from (see [`super::snapshot`]); none with
/// submodules (their folders are git's to judge), in a large worktree (its
/// walks cost more than the git processes they save: BENCHMARKS.md), or
/// when the walk fails.
fn start_snapshot(co: &Checkout, req: &PatientRequest<'_>) -> Option<Snapshot> {
    let index = std::fs::metadata(co.git_dir.join("index")).map(|m| m.len()).unwrap_or(u64::MAX);
    if req.submodules || index > SNAPSHOT_MOST_INDEX_BYTES {
        return None;
    }
    Snapshot::take(&co.work_tree, &co.git_dir)
        .inspect_err(|e| tracing::debug!("no snapshot of {}: {e}", co.work_tree.display()))
        .ok()
}

/// The task branch, when no checkout holds it.
fn checkout_free(git: &GitRepo, req: &PatientRequest<'_>) -> Result<TaskBranch> {
    let branch = git.task_branch(req.issue, req.base, req.restart)?;
    let _meta = git.metadata_lock()?;
    match git.checked_out_in(&format!("refs/heads/{}", branch.name))? {
        Some(busy) => Err(WorktreeError::BranchBusy { branch: branch.name, path: busy }),
        None => Ok(branch),
    }
}

fn worktree(
    path: &Path,
    metadata: &Path,
    branch: &str,
    start: String,
    started: std::time::Instant,
    created: bool,
) -> Worktree {
    Worktree {
        name: metadata.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        path: path.to_path_buf(),
        branch: branch.into(),
        start,
        metadata: metadata.to_path_buf(),
        ready_ms: started.elapsed().as_millis() as u64,
        created,
    }
}

/// The metadata folder of a ready worktree whose links all still lead
/// where ward made them; `None` when anything was changed.
fn intact(git: &GitRepo, layout: &Layout, issue: u64, record: &Record) -> Option<PathBuf> {
    let path = layout.worktree(issue);
    let metadata = record.metadata.clone()?;
    let ok = metadata.parent().is_some_and(|p| same(p, &git.root.join("worktrees")))
        && gitdir_of(&path.join(".git")).is_some_and(|m| same(&m, &metadata))
        && std::fs::read_to_string(metadata.join("gitdir"))
            .is_ok_and(|g| same(Path::new(g.trim()), &path.join(".git")))
        && std::fs::read_to_string(metadata.join("commondir")).is_ok_and(|c| same(&metadata.join(c.trim()), &git.root))
        && std::fs::read_to_string(metadata.join("HEAD"))
            .is_ok_and(|h| h.trim() == format!("ref: refs/heads/{}", branch_name(issue)));
    ok.then_some(metadata)
}

/// Back to exactly the committed state of the branch head (or of the base
/// on `restart`): reset, then clean out everything else, ignored files too.
/// Both are skipped when the worktree is already exactly the branch head
/// (the previous stage left it so), which its snapshot proves without git.
fn refresh(git: &GitRepo, co: &Checkout, req: &PatientRequest<'_>) -> Result<(TaskBranch, String, Option<Snapshot>)> {
    // The patient's lock is ours: an index lock can only be a killed run's.
    let _ = std::fs::remove_file(co.git_dir.join("index.lock"));
    let base = git.base_id(req.base)?;
    let name = branch_name(req.issue);
    let task = |head: &str| TaskBranch {
        name: name.clone(),
        head: head.to_string(),
        base: base.clone(),
        created: false,
        reset: req.restart,
        from_remote: false,
    };
    if !req.restart
        && let Some(head) = git.branch_head(&name)?
        && let Some(snapshot) = start_snapshot(co, req)
        && snapshot::is_clean_at(&co.work_tree, &co.git_dir, &head, &snapshot)
    {
        return Ok((task(&head), head, Some(snapshot)));
    }
    let target = if req.restart { base.clone() } else { "HEAD".to_string() };
    let mut reset = co.git();
    reset.args(["reset", "--quiet", "--hard", &target]);
    git::run(reset, "reset", None)?;
    let mut clean = co.git();
    clean.args(["clean", "-ffdxq"]);
    git::run(clean, "clean", None)?;
    let head = git.branch_head(&name)?.unwrap_or_default();
    Ok((task(&head), head, start_snapshot(co, req)))
}

/// The submodule paths `.gitmodules` names, each a plain relative path
/// inside the checkout (anything else is left to git to refuse).
fn submodule_paths(co: &Checkout) -> Vec<(String, PathBuf)> {
    let file = co.work_tree.join(".gitmodules");
    if !file.exists() {
        return Vec::new();
    }
    let mut list = local(&co.work_tree);
    list.arg("config").arg("--file").arg(&file).args(["--get-regexp", r"^submodule\..*\.path$"]);
    let listed = git::run(list, "read .gitmodules in", None).map(|o| String::from_utf8_lossy(&o).into_owned());
    listed
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (key, path) = line.split_once(' ')?;
            let name = key.strip_prefix("submodule.")?.strip_suffix(".path")?;
            let path = PathBuf::from(path.trim());
            let plain = path.components().all(|c| matches!(c, std::path::Component::Normal(_)));
            (plain && !name.contains("..")).then(|| (name.to_string(), path))
        })
        .collect()
}

/// Initialises the submodules of a checkout. A submodule the repository's
/// own checkout already has (`.git/modules/<name>`) is cloned from there,
/// without the network.
fn submodules(git: &GitRepo, co: &Checkout) -> Result<()> {
    let paths = submodule_paths(co);
    if paths.is_empty() {
        return Ok(());
    }
    let mut update = co.git();
    for (name, _) in &paths {
        let module = git.root.join("modules").join(name);
        if module.join("HEAD").exists() {
            update.args(["-c", "protocol.file.allow=always", "-c"]);
            update.arg(format!("submodule.{name}.url={}", module.display()));
        }
    }
    update.args(["submodule", "update", "--init", "--recursive", "--quiet"]);
    git::run(update, "submodule update", None).map(drop)
}

/// Submodules made again from scratch for the next stage: a submodule's
/// git folder is the agent's to write (its `core.worktree` included), so
/// nothing of it is kept between stages.
fn fresh_submodules(git: &GitRepo, co: &Checkout) -> Result<()> {
    let modules = co.git_dir.join("modules");
    if modules.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&modules).map_err(io_err("remove the submodules of", &modules))?;
    }
    for (_, path) in submodule_paths(co) {
        let dir = co.work_tree.join(path);
        if dir.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&dir).map_err(io_err("remove the submodule", &dir))?;
        }
    }
    submodules(git, co)
}

/// Removes the patient's worktree (after its stages, at discharge), then
/// checks it is gone. `None` when ward has no record of one. `held` is the
/// patient's lock when the caller holds it already.
pub fn remove_patient(
    git: &GitRepo,
    layout: &Layout,
    issue: u64,
    held: Option<&PatientLock>,
) -> Result<Option<WorktreeCleanup>> {
    let _lock = match held {
        Some(_) => None,
        None => Some(layout.lock(issue)?),
    };
    let record = layout.read_record(issue);
    if record.is_none() && layout.worktree(issue).symlink_metadata().is_err() {
        return Ok(None);
    }
    if record.is_none() {
        // A folder at ward's path that ward has no record of is not ward's.
        return Err(WorktreeError::PathExists { path: layout.worktree(issue) });
    }
    remove_patient_locked(git, layout, issue, record.as_ref()).map(Some)
}

/// The git metadata folders of the patient's worktree: any whose `gitdir`
/// leads to ward's path, and the recorded one while it is named after
/// ward's folder (git names it so) and holds the patient's branch (an agent
/// may have rewritten its `gitdir`).
fn metadata_of(git: &GitRepo, layout: &Layout, issue: u64, record: Option<&Record>) -> Vec<PathBuf> {
    let admin = git.root.join("worktrees");
    let dot_git = layout.worktree(issue).join(".git");
    let head = format!("ref: refs/heads/{}", branch_name(issue));
    let prefix = format!("ward-issue-{issue}");
    let ours = |m: &Path| {
        let named = m.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix(&prefix));
        std::fs::read_to_string(m.join("gitdir")).is_ok_and(|g| Path::new(g.trim()) == dot_git)
            || (named.is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
                && std::fs::read_to_string(m.join("HEAD")).is_ok_and(|h| h.trim() == head))
    };
    let mut found: Vec<PathBuf> = Vec::new();
    let recorded = record.and_then(|r| r.metadata.as_ref()).and_then(|m| m.file_name()).map(|n| admin.join(n));
    if let Some(m) = recorded.filter(|m| ours(m)) {
        found.push(m);
    }
    if let Ok(entries) = std::fs::read_dir(&admin) {
        for e in entries.flatten() {
            let m = e.path();
            let leads_here = std::fs::read_to_string(m.join("gitdir")).is_ok_and(|g| Path::new(g.trim()) == dot_git);
            if leads_here && !found.contains(&m) {
                found.push(m);
            }
        }
    }
    found
}

fn remove_patient_locked(
    git: &GitRepo,
    layout: &Layout,
    issue: u64,
    record: Option<&Record>,
) -> Result<WorktreeCleanup> {
    let _meta = git.metadata_lock()?;
    let path = layout.worktree(issue);
    let metadata = metadata_of(git, layout, issue, record);
    for m in &metadata {
        std::fs::remove_dir_all(m).map_err(io_err("remove worktree metadata", m))?;
    }
    if path.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&path).map_err(io_err("remove worktree folder", &path))?;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let cleanup = WorktreeCleanup {
        name: name.clone(),
        path: path.clone(),
        folder_gone: path.symlink_metadata().is_err(),
        metadata_gone: metadata.iter().all(|m| m.symlink_metadata().is_err()),
    };
    if !cleanup.folder_gone {
        return Err(WorktreeError::NotRemoved { name, what: "the folder", path });
    }
    if let Some(m) = metadata.iter().find(|m| m.symlink_metadata().is_ok()) {
        return Err(WorktreeError::NotRemoved { name, what: "the git metadata", path: m.clone() });
    }
    let file = layout.record(issue);
    if file.exists() {
        std::fs::remove_file(&file).map_err(io_err("remove the record", &file))?;
    }
    Ok(cleanup)
}

/// The charge nurse's reaper for patient worktrees: removes, among those
/// ward has records of and no run holds, the half-made ones (a killed run's)
/// at once, those of `closed` issues, and those unused for longer than
/// `idle`; then deletes the `ward/issue-<n>` branches of `closed` issues
/// that no checkout holds and that are merged into `base`. Nothing ward has no record of is touched, and
/// nothing outside its own worktree folder is ever removed.
pub fn reap_patients(
    git: &GitRepo,
    layout: &Layout,
    idle: Duration,
    now: DateTime<Utc>,
    closed: &[u64],
    base: &str,
) -> Result<ReapReport> {
    let mut report = ReapReport::default();
    for issue in layout.recorded_issues() {
        let name = format!("ward-issue-{issue}");
        let Some(_lock) = layout.try_lock(issue)? else {
            report.kept.push((name, "in use by a running stage".into()));
            continue;
        };
        let record = layout.read_record(issue);
        let idle_for = record.as_ref().map(|r| now.signed_duration_since(r.used_at).to_std().unwrap_or_default());
        let why = match &record {
            None => "its record is unreadable".to_string(),
            Some(r) if r.state == RecordState::Creating => "half-made by a run that was killed".into(),
            Some(_) if closed.contains(&issue) => "its issue is closed".into(),
            Some(_) if idle_for.is_some_and(|d| d > idle) => {
                format!("unused for longer than {}", humantime::format_duration(idle))
            }
            Some(_) => {
                report.kept.push((name, format!("used within {}", humantime::format_duration(idle))));
                continue;
            }
        };
        remove_patient_locked(git, layout, issue, record.as_ref())?;
        report.removed_worktrees.push((name, why));
    }
    git.delete_closed_branches(closed, base, &mut report)?;
    Ok(report)
}

// ---------------------------------------------------------------------------
// The job's own checkout (CI)
// ---------------------------------------------------------------------------

/// Where the job's checkout was before ward switched it.
#[derive(Debug, Clone, PartialEq)]
pub enum Original {
    Branch(String),
    Detached(String),
}

/// Paths with changes in the checkout at `root`, ward's own folders left out.
fn changes(co: &Checkout, state_paths: &[String]) -> Result<Vec<String>> {
    let mut status = co.git();
    status.args(["status", "--porcelain=v1", "-z", "--untracked-files=normal", "--", "."]);
    for p in state_paths {
        status.arg(format!(":(top,exclude){}", p.trim_matches('/')));
    }
    let out = git::run(status, "status", None)?;
    Ok(out.split(|b| *b == 0).filter(|f| f.len() > 3).map(|f| String::from_utf8_lossy(&f[3..]).into_owned()).collect())
}

/// CI mode: checks the patient's branch out in the job's own checkout at
/// `root` (which must be clean), and returns where it was.
pub fn switch_checkout(
    git: &GitRepo,
    root: &Path,
    req: &PatientRequest<'_>,
    state_paths: &[String],
) -> Result<(TaskBranch, Worktree, Original)> {
    let started = std::time::Instant::now();
    let original = match git.head()? {
        Head::Branch(b) => Original::Branch(b),
        Head::Detached(sha) => Original::Detached(sha),
        Head::Unborn(_) => return Err(WorktreeError::BaseMissing { base: req.base.into(), repo: git.root.clone() }),
    };
    let co = Checkout::new(&git.root, root);
    let dirty = changes(&co, state_paths)?;
    if !dirty.is_empty() {
        let mut files: Vec<String> = dirty.into_iter().take(5).collect();
        files.iter_mut().for_each(|f| *f = format!("`{f}`"));
        return Err(WorktreeError::CheckoutDirty { path: root.to_path_buf(), files });
    }
    // ward's own files (the stage's lock is already there) stay out of what an agent commits.
    exclude_state_paths(&co, state_paths)?;
    let branch = git.task_branch(req.issue, req.base, req.restart)?;
    let mut checkout = co.git();
    checkout.args(["checkout", "--quiet", &branch.name]);
    git::run(checkout, "checkout", None)?;
    if req.submodules {
        fresh_submodules(git, &co)?;
    }
    let wt = Worktree {
        name: "checkout".into(),
        path: root.to_path_buf(),
        branch: branch.name.clone(),
        start: branch.head.clone(),
        metadata: git.root.clone(),
        ready_ms: started.elapsed().as_millis() as u64,
        created: false,
    };
    Ok((branch, wt, original))
}

/// CI mode, after the stage: the checkout back where it was, and what the
/// agent left there (outside ward's own folders and ignored files) gone.
pub fn restore_checkout(
    git: &GitRepo,
    co: &Checkout,
    original: &Original,
    state_paths: &[String],
    submodules: bool,
) -> Result<()> {
    let mut checkout = co.git();
    checkout.args(["checkout", "--quiet", "--force"]);
    match original {
        Original::Branch(b) => checkout.arg(b),
        Original::Detached(sha) => checkout.args(["--detach", sha]),
    };
    git::run(checkout, "checkout", None)?;
    let mut clean = co.git();
    clean.args(["clean", "-ffdq", "--", "."]);
    for p in state_paths {
        clean.arg(format!(":(top,exclude){}", p.trim_matches('/')));
    }
    git::run(clean, "clean", None)?;
    if submodules {
        fresh_submodules(git, co)?;
    }
    Ok(())
}

/// Files changed in the checkout since `start` (committed, staged, left,
/// untracked), ward's own folders and ignored files left out. With the
/// snapshot of the clean checkout at `start`, a run that provably touched
/// nothing outside ward's folders is answered without git.
pub fn changed_since(
    co: &Checkout,
    start: &str,
    state_paths: &[String],
    at_start: Option<&Snapshot>,
) -> Result<Vec<String>> {
    if let Some(before) = at_start
        && untouched(co, before, state_paths)
    {
        return Ok(Vec::new());
    }
    let excludes: Vec<String> = state_paths.iter().map(|p| format!(":(top,exclude){}", p.trim_matches('/'))).collect();
    let mut diff = co.git();
    diff.args(["diff", "--name-only", "-z", "--no-renames", start, "--", "."]).args(&excludes);
    let mut others = co.git();
    others.args(["ls-files", "--others", "--exclude-standard", "-z", "--", "."]).args(&excludes);
    let mut paths = BTreeSet::new();
    for (cmd, op) in [(diff, "diff"), (others, "ls-files")] {
        let out = git::run(cmd, op, None)?;
        paths.extend(out.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()));
    }
    Ok(paths.into_iter().collect())
}

/// The paths under `state_paths` that differ between `start` and the
/// checkout's `HEAD`: what the run's commits changed in ward's own folders
/// (nothing left uncommitted counts: that is ward's own working state).
pub fn committed_under(co: &Checkout, start: &str, state_paths: &[String]) -> Result<Vec<String>> {
    if state_paths.is_empty() {
        return Ok(Vec::new());
    }
    let only: Vec<String> = state_paths.iter().map(|p| format!(":(top){}", p.trim_matches('/'))).collect();
    let mut diff = co.git();
    diff.args(["diff", "--name-only", "-z", "--no-renames", start, "HEAD", "--"]).args(&only);
    let out = git::run(diff, "diff", None)?;
    Ok(out.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect())
}

/// Keeps ward's own folders out of what git sees in the checkout
/// (`info/exclude`, where git reads it: the common git folder of a linked
/// worktree), before any agent runs there: `git add -A` then leaves them
/// out, whatever the repository's `.gitignore` says.
pub fn exclude_state_paths(co: &Checkout, state_paths: &[String]) -> Result<()> {
    let mut path = co.git();
    path.args(["rev-parse", "--git-path", "info/exclude"]);
    let file = PathBuf::from(git::text(path, "rev-parse")?);
    let file = if file.is_absolute() { file } else { co.work_tree.join(file) };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let missing: Vec<String> = state_paths
        .iter()
        .map(|p| format!("/{}/", p.trim_matches('/')))
        .filter(|line| !text.lines().any(|l| l.trim() == line))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(io_err("create", parent))?;
    }
    let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
    let added = format!(
        "{text}{sep}# ward's own files (its locks, runs and state): never the patient's\n{}\n",
        missing.join("\n")
    );
    std::fs::write(&file, added).map_err(io_err("write", &file))
}

/// Whether nothing outside ward's folders changed since `before`, the
/// index and HEAD included (see [`super::snapshot`]).
fn untouched(co: &Checkout, before: &Snapshot, state_paths: &[String]) -> bool {
    let Ok(now) = Snapshot::take(&co.work_tree, &co.git_dir) else { return false };
    let Some(suspects) = before.suspects(&now) else { return false };
    suspects.iter().all(|p| p.to_str().is_some_and(|p| state_paths.iter().any(|s| git::under(p, s))))
}

/// How many lines the checkout changed since `start` (added plus removed,
/// committed, staged, left or untracked), read with git2 and not from the
/// agent: what `max_diff_lines` is measured by. Ward's own folders and
/// ignored files are left out, as in [`changed_since`]; a binary file counts
/// as one line (it has no lines, but it is a change).
pub fn diff_lines_since(co: &Checkout, start: &str, state_paths: &[String]) -> Result<u64> {
    diff_since(co, start, |diff, object| count_lines(diff, state_paths, object))
}

/// The checkout's difference from `start` (its commits, index and work
/// tree, untracked files with their content), read by `read` with the
/// checkout's name for errors.
pub(super) fn diff_since<T>(
    co: &Checkout,
    start: &str,
    read: impl FnOnce(&git2::Diff<'_>, &str) -> Result<T>,
) -> Result<T> {
    let object = co.work_tree.display().to_string();
    let repo = Repository::open(&co.git_dir).map_err(git("open the checkout", &object))?;
    repo.set_workdir(&co.work_tree, false).map_err(git("open the checkout", &object))?;
    let tree = repo
        .revparse_single(start)
        .and_then(|o| o.peel_to_tree())
        .map_err(git("read the commit the run started at", start))?;
    let mut opts = git2::DiffOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true).show_untracked_content(true);
    let diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .map_err(git("diff the checkout", &object))?;
    read(&diff, &object)
}

/// Whether `path` is under one of ward's own folders (`state_paths`).
pub(super) fn under_state(path: &Path, state_paths: &[String]) -> bool {
    state_paths.iter().any(|p| {
        let p = p.trim_matches('/');
        !p.is_empty() && path.starts_with(p)
    })
}

fn count_lines(diff: &git2::Diff<'_>, state_paths: &[String], object: &str) -> Result<u64> {
    let ours = |path: &Path| under_state(path, state_paths);
    let mut lines = 0u64;
    for (idx, delta) in diff.deltas().enumerate() {
        let path = delta.new_file().path().or_else(|| delta.old_file().path());
        if path.is_some_and(ours) {
            continue;
        }
        let patch = git2::Patch::from_diff(diff, idx).map_err(git("diff the checkout", object))?;
        lines += match patch {
            Some(patch) if !patch.delta().flags().contains(git2::DiffFlags::BINARY) => {
                let (_, added, removed) = patch.line_stats().map_err(git("count the lines of", object))?;
                (added + removed) as u64
            }
            _ => 1,
        };
    }
    Ok(lines)
}

/// The checkout and its branch back at `commit`, everything else cleaned
/// out (ignored files too when `ignored`; never ward's own folders).
pub fn reset_to(co: &Checkout, commit: &str, ignored: bool, state_paths: &[String]) -> Result<()> {
    let _ = std::fs::remove_file(co.git_dir.join("index.lock"));
    // ward's own files an agent committed: out of the index first, so that
    // the reset leaves them (its locks, runs and the local forge) on disk.
    if !state_paths.is_empty() {
        let mut untrack = co.git();
        untrack.args(["rm", "-r", "-q", "--cached", "--ignore-unmatch", "--"]);
        untrack.args(state_paths.iter().map(|p| format!(":(top){}", p.trim_matches('/'))));
        git::run(untrack, "rm --cached", None)?;
    }
    let mut reset = co.git();
    reset.args(["reset", "--quiet", "--hard", commit]);
    git::run(reset, "reset", None)?;
    let mut clean = co.git();
    clean.args(["clean", if ignored { "-ffdxq" } else { "-ffdq" }, "--", "."]);
    for p in state_paths {
        clean.arg(format!(":(top,exclude){}", p.trim_matches('/')));
    }
    git::run(clean, "clean", None).map(drop)
}

/// Refuses to commit through a `.git` that no longer leads to `git_dir` in
/// the repository `common` (the agent owns the folder, `.git` included).
pub fn verify_git_dir(path: &Path, git_dir: &Path, common: &Path) -> Result<()> {
    let object = path.display().to_string();
    let repo = Repository::open(path).map_err(git("open the checkout", &object))?;
    if !same(repo.path(), git_dir) || !same(repo.commondir(), common) {
        return Err(WorktreeError::Tampered { path: path.to_path_buf(), points_to: repo.path().to_path_buf() });
    }
    Ok(())
}

/// Pushes `branch` to `remote_url`; see [`git::push_branch`].
pub fn push_branch(repo: &Path, remote_url: &str, branch: &str, token: Option<&str>, force: bool) -> Result<()> {
    let git_dir = GitRepo::open(repo)?.root;
    git::push_branch(&git_dir, remote_url, branch, token, force)
}

/// Fetches `branch` from `remote_url`; see [`git::fetch_branch`].
pub fn fetch_branch(repo: &Path, remote_url: &str, branch: &str, token: Option<&str>) -> Result<bool> {
    let git_dir = GitRepo::open(repo)?.root;
    git::fetch_branch(&git_dir, remote_url, branch, token)
}
