//! The git boundary of a workspace. Every git2 call ward makes for
//! worktrees and task branches is in this file, behind [`GitRepo`]; a
//! missing object comes back as `None`, never as an error to match on.
//!
//! - One branch per task, `ward/issue-<n>`, created from the base branch on
//!   first use and reused afterwards; a `restart` resets it to the base.
//! - One worktree per stage run, `<WARD_HOME>/worktrees/ward-issue-<n>-<run>`,
//!   whose git metadata (`.git/worktrees/<name>/`) holds a `ward.json` marker:
//!   the reaper only ever touches worktrees that carry it.
//! - Removal deletes the folder and the metadata, then checks both are gone.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use git2::{BranchType, ErrorCode, IndexAddOption, Repository, WorktreeAddOptions, WorktreePruneOptions};
use serde::{Deserialize, Serialize};

/// Task branches are `ward/issue-<n>`.
pub const BRANCH_PREFIX: &str = "ward/issue-";
/// Marker file in a worktree's git metadata folder: ward created it.
const MARKER: &str = "ward.json";

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("could not {op} `{object}`: {}", source.message())]
    Git {
        op: &'static str,
        object: String,
        #[source]
        source: git2::Error,
    },
    #[error(
        "base branch `{base}` does not exist in {} (looked for refs/heads/{base} and refs/remotes/origin/{base}); \
         fetch it or configure the right base branch",
        repo.display()
    )]
    BaseMissing { base: String, repo: PathBuf },
    #[error(
        "worktree path {} already exists; ward never reuses or deletes a folder it did not create: \
         remove it by hand or point WARD_HOME elsewhere",
        path.display()
    )]
    PathExists { path: PathBuf },
    #[error(
        "branch `{branch}` is already checked out in {}; another run may still hold it \
         (`ward sweep` reaps worktrees older than their TTL)",
        path.display()
    )]
    BranchBusy { branch: String, path: PathBuf },
    #[error("cleanup of worktree `{name}` is not verified: {what} is still at {}", path.display())]
    NotRemoved { name: String, what: &'static str, path: PathBuf },
    #[error("could not {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the `.git` file of worktree {} now points to {}, not to its metadata; ward will not commit there",
        path.display(),
        points_to.display()
    )]
    Tampered { path: PathBuf, points_to: PathBuf },
    #[error("git could not push or fetch `{branch}` ({status}): {stderr}")]
    Push { branch: String, status: String, stderr: String },
}

type Result<T> = std::result::Result<T, WorktreeError>;

fn git(op: &'static str, object: impl Into<String>) -> impl FnOnce(git2::Error) -> WorktreeError {
    let object = object.into();
    move |source| WorktreeError::Git { op, object, source }
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WorktreeError {
    let path = path.to_path_buf();
    move |source| WorktreeError::Io { op, path, source }
}

/// `Ok(None)` for NotFound, the error otherwise.
fn found<T>(r: std::result::Result<T, git2::Error>) -> std::result::Result<Option<T>, git2::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Who commits what an agent left behind. Default: `ward <ward@users.noreply.github.com>`, now.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitIdentity {
    pub name: String,
    pub email: String,
    /// Seconds since the epoch (UTC); `None` is now. Tests fix it.
    pub time: Option<i64>,
}

impl Default for CommitIdentity {
    fn default() -> Self {
        Self { name: "ward".into(), email: "ward@users.noreply.github.com".into(), time: None }
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

/// One stage run's worktree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Worktree {
    /// Also the name of its metadata folder `.git/worktrees/<name>`.
    pub name: String,
    pub path: PathBuf,
    pub branch: String,
    /// The commit the worktree started at.
    pub start: String,
    pub metadata: PathBuf,
}

/// What ward records about a worktree it created, in its metadata folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub issue: u64,
    pub stage: String,
    pub run: String,
    pub created_at: DateTime<Utc>,
}

/// The marker as written: what ward knows, and the folder it created.
/// Removal trusts this path, never the `gitdir` file an agent could rewrite.
#[derive(Serialize, Deserialize)]
struct Recorded {
    #[serde(flatten)]
    marker: Marker,
    path: PathBuf,
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
    pub removed_worktrees: Vec<String>,
    pub deleted_branches: Vec<String>,
    /// (name, why it was kept)
    pub kept: Vec<(String, String)>,
}

/// The branch of a task.
pub fn branch_name(issue: u64) -> String {
    format!("{BRANCH_PREFIX}{issue}")
}

/// A run id as it may appear in a folder and a git metadata name.
fn sanitize(run: &str) -> String {
    run.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect()
}

/// The worktree name of one stage run: `ward-issue-<n>-<run>`.
pub fn worktree_name(issue: u64, run: &str) -> String {
    format!("ward-issue-{issue}-{}", sanitize(run))
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

    /// Serialises changes to worktree metadata across threads and processes
    /// (an exclusive lock on `.git/ward-worktrees.lock`, released on drop).
    /// libgit2's "already checked out" check reads every worktree and is
    /// fooled by one another run is adding at the same moment.
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

    /// The short name of the branch checked out at the repository's root;
    /// `None` on a detached or unborn HEAD.
    pub fn current_branch(&self) -> Result<Option<String>> {
        let head = match found(self.repo.head()) {
            Ok(h) => h,
            Err(e) if e.code() == ErrorCode::UnbornBranch => None,
            Err(e) => return Err(git("read HEAD of", self.root.display().to_string())(e)),
        };
        Ok(head.filter(|h| h.is_branch()).and_then(|h| h.shorthand().map(str::to_string)))
    }

    /// The commit a branch points at, or `None`.
    pub fn branch_head(&self, name: &str) -> Result<Option<String>> {
        let branch = found(self.repo.find_branch(name, BranchType::Local)).map_err(git("look up branch", name))?;
        Ok(branch.and_then(|b| b.get().target()).map(|o| o.to_string()))
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

    /// `ward/issue-<n>`: created from `base` on first use, reused after, reset
    /// to `base` when `restart`.
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

    /// Adds the worktree of one stage run on the task branch.
    pub fn add_worktree(&self, home: &Path, branch: &str, marker: &Marker) -> Result<Worktree> {
        let name = worktree_name(marker.issue, &marker.run);
        let _lock = self.metadata_lock()?;
        let parent = home.join("worktrees");
        let path = parent.join(&name);
        if path.exists() || path.symlink_metadata().is_ok() {
            return Err(WorktreeError::PathExists { path });
        }
        let metadata = self.root.join("worktrees").join(&name);
        if metadata.exists() {
            return Err(WorktreeError::PathExists { path: metadata });
        }
        let refname = format!("refs/heads/{branch}");
        if let Some(busy) = self.checked_out_in(&refname)? {
            return Err(WorktreeError::BranchBusy { branch: branch.into(), path: busy });
        }
        std::fs::create_dir_all(&parent).map_err(io_err("create the worktrees folder", &parent))?;
        // libgit2 creates `.git/worktrees` exclusively: two runs adding their
        // first worktrees at once would race for it.
        let admin = self.root.join("worktrees");
        std::fs::create_dir_all(&admin).map_err(io_err("create", &admin))?;
        let reference = self.repo.find_reference(&refname).map_err(git("look up", &refname))?;
        let start = reference.target().map(|o| o.to_string()).unwrap_or_default();
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        if let Err(e) = self.repo.worktree(&name, &path, Some(&opts)) {
            // libgit2 creates the metadata folder before the working folder:
            // leave nothing half-made behind.
            let _ = std::fs::remove_dir_all(&metadata);
            let _ = std::fs::remove_dir(&path);
            return Err(git("add worktree", path.display().to_string())(e));
        }
        let recorded = Recorded { marker: marker.clone(), path: path.clone() };
        let text = serde_json::to_string_pretty(&recorded).unwrap_or_default();
        std::fs::write(metadata.join(MARKER), text).map_err(io_err("write the ward marker in", &metadata))?;
        Ok(Worktree { name, path, branch: branch.into(), start, metadata })
    }

    /// Commits whatever the agent left in the worktree (new, changed and
    /// deleted files; ignored files stay out). `None` when nothing changed.
    pub fn commit_all(&self, wt: &Worktree, who: &CommitIdentity, message: &str) -> Result<Option<String>> {
        let object = wt.path.display().to_string();
        let repo = Repository::open(&wt.path).map_err(git("open worktree", &object))?;
        // The agent owns the folder, `.git` file included: commit only if it
        // still leads to this worktree's metadata in this repository.
        let same = |a: &Path, b: &Path| a.canonicalize().ok().is_some_and(|a| b.canonicalize().is_ok_and(|b| a == b));
        if !same(repo.path(), &wt.metadata) || !same(repo.commondir(), &self.root) {
            return Err(WorktreeError::Tampered { path: wt.path.clone(), points_to: repo.path().to_path_buf() });
        }
        let mut index = repo.index().map_err(git("read the index of", &object))?;
        index.add_all(["*"], IndexAddOption::DEFAULT, None).map_err(git("stage the changes in", &object))?;
        index.update_all(["*"], None).map_err(git("stage the deletions in", &object))?;
        index.write().map_err(git("write the index of", &object))?;
        let tree_id = index.write_tree().map_err(git("write the tree of", &object))?;
        let parent = repo.head().and_then(|h| h.peel_to_commit()).map_err(git("read HEAD of", &object))?;
        if parent.tree_id() == tree_id {
            return Ok(None);
        }
        let tree = repo.find_tree(tree_id).map_err(git("read the tree of", &object))?;
        let sig = match who.time {
            Some(t) => git2::Signature::new(&who.name, &who.email, &git2::Time::new(t, 0)),
            None => git2::Signature::now(&who.name, &who.email),
        }
        .map_err(git("make the signature of", &who.name))?;
        let oid =
            repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent]).map_err(git("commit in", &object))?;
        Ok(Some(oid.to_string()))
    }

    /// Removes the worktree folder and its metadata, then checks both are gone.
    pub fn remove_worktree(&self, wt: &Worktree) -> Result<WorktreeCleanup> {
        let _lock = self.metadata_lock()?;
        self.remove_worktree_locked(wt)
    }

    fn remove_worktree_locked(&self, wt: &Worktree) -> Result<WorktreeCleanup> {
        let handle = found(self.repo.find_worktree(&wt.name)).map_err(git("open worktree", &wt.name))?;
        if let Some(handle) = handle {
            // Metadata only: libgit2 would delete the folder named in the
            // `gitdir` file, which the agent could have rewritten. The folder
            // ward created is removed below, by the path ward recorded.
            let mut opts = WorktreePruneOptions::new();
            opts.valid(true).working_tree(false).locked(false);
            handle.prune(Some(&mut opts)).map_err(git("remove worktree", wt.path.display().to_string()))?;
        }
        if wt.path.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&wt.path).map_err(io_err("remove worktree folder", &wt.path))?;
        }
        self.verify_removed(wt)
    }

    fn verify_removed(&self, wt: &Worktree) -> Result<WorktreeCleanup> {
        let known = found(self.repo.find_worktree(&wt.name)).map_err(git("look up worktree", &wt.name))?.is_some();
        let cleanup = WorktreeCleanup {
            name: wt.name.clone(),
            path: wt.path.clone(),
            folder_gone: wt.path.symlink_metadata().is_err(),
            metadata_gone: !known && wt.metadata.symlink_metadata().is_err(),
        };
        if !cleanup.folder_gone {
            return Err(WorktreeError::NotRemoved { name: wt.name.clone(), what: "the folder", path: wt.path.clone() });
        }
        if !cleanup.metadata_gone {
            let path = wt.metadata.clone();
            return Err(WorktreeError::NotRemoved { name: wt.name.clone(), what: "the git metadata", path });
        }
        Ok(cleanup)
    }

    /// The charge nurse's reaper: removes ward's worktrees created more than
    /// `ttl` before `now`, and deletes `ward/issue-<n>` branches of the
    /// `closed` issues that no worktree holds. Worktrees without ward's
    /// marker and other branches are never touched.
    pub fn reap(&self, ttl: Duration, now: DateTime<Utc>, closed: &[u64]) -> Result<ReapReport> {
        let _lock = self.metadata_lock()?;
        let mut report = ReapReport::default();
        let names = self.repo.worktrees().map_err(git("list worktrees of", self.root.display().to_string()))?;
        let names: Vec<String> = names.iter().flatten().map(str::to_string).collect();
        for name in names {
            let metadata = self.root.join("worktrees").join(&name);
            let marker = std::fs::read_to_string(metadata.join(MARKER)).ok();
            let Some(Recorded { marker, path }) = marker.and_then(|t| serde_json::from_str(&t).ok()) else {
                report.kept.push((name, "not created by ward".into()));
                continue;
            };
            let ward_shaped = path.file_name().is_some_and(|f| f == name.as_str())
                && path.parent().and_then(Path::file_name).is_some_and(|p| p == "worktrees");
            if !ward_shaped {
                report.kept.push((name, format!("recorded path {} is not a ward worktree path", path.display())));
                continue;
            }
            let age = now.signed_duration_since(marker.created_at).to_std().unwrap_or_default();
            if age <= ttl {
                report.kept.push((name, format!("younger than {}", humantime::format_duration(ttl))));
                continue;
            }
            let head = std::fs::read_to_string(metadata.join("HEAD")).unwrap_or_default();
            let branch = head.trim().trim_start_matches("ref: refs/heads/").to_string();
            let wt = Worktree { name: name.clone(), path, branch, start: String::new(), metadata };
            self.remove_worktree_locked(&wt)?;
            report.removed_worktrees.push(name);
        }
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
            let mut branch = self.repo.find_branch(&name, BranchType::Local).map_err(git("look up branch", &name))?;
            branch.delete().map_err(git("delete branch", &name))?;
            if self.branch_head(&name)?.is_some() {
                return Err(WorktreeError::NotRemoved { name, what: "the branch", path: self.root.clone() });
            }
            report.deleted_branches.push(name);
        }
        Ok(report)
    }
}

/// Pushes `branch` to `remote_url` with the `git` CLI.
///
/// Why the CLI and not git2: ward builds git2 without its `https` feature,
/// which would pull OpenSSL (a C build dependency on every machine that
/// builds ward, and a second TLS stack next to rustls); every runner has
/// `git`, and it honours the runner's proxy settings.
///
/// The token never reaches argv or logs: it goes to git through `GIT_CONFIG_*`
/// environment variables as an `http.<remote_url>.extraheader`, and is
/// scrubbed from any error text. The repository's own configuration and
/// hooks are writable by the agent, so git never reads them here: the push
/// runs from a throwaway bare clone that shares the repository's objects
/// (`--shared`), with no system or global configuration and no hooks.
pub fn push_branch(repo: &Path, remote_url: &str, branch: &str, token: Option<&str>, force: bool) -> Result<()> {
    let scratch = Scratch::new()?;
    let bare = scratch.0.join("push.git");
    let mut clone = Command::new("git");
    clone.args(["clone", "--quiet", "--bare", "--shared", "--no-tags", "--single-branch", "--branch", branch]);
    clone.arg(repo).arg(&bare);
    clean_git_env(&mut clone, &scratch.0);
    run_git(clone, branch, None, "run `git clone --shared` of", repo)?;
    let refspec = format!("{}refs/heads/{branch}:refs/heads/{branch}", if force { "+" } else { "" });
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(&bare).args(["-c", "core.hooksPath=/dev/null", "push", "--no-verify", "--porcelain"]);
    cmd.args([remote_url, &refspec]);
    clean_git_env(&mut cmd, &scratch.0);
    authorize(&mut cmd, remote_url, token);
    run_git(cmd, branch, token, "run `git push` in", repo)
}

/// Fetches `branch` from `remote_url` into `refs/remotes/origin/<branch>`,
/// so a run on a fresh checkout continues the task where the last stage's
/// push left it. `false` when the remote has no such branch. Runs before the
/// agent, with the same clean environment and scoped token as the push.
pub fn fetch_branch(repo: &Path, remote_url: &str, branch: &str, token: Option<&str>) -> Result<bool> {
    let scratch = Scratch::new()?;
    let refspec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(repo).args(["-c", "core.hooksPath=/dev/null", "fetch", "--quiet", "--no-tags", remote_url]);
    cmd.arg(&refspec);
    clean_git_env(&mut cmd, &scratch.0);
    authorize(&mut cmd, remote_url, token);
    match run_git(cmd, branch, token, "run `git fetch` in", repo) {
        Ok(()) => Ok(true),
        Err(WorktreeError::Push { stderr, .. }) if stderr.contains("couldn't find remote ref") => Ok(false),
        Err(e) => Err(e),
    }
}

/// A private temporary folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let dir = std::env::temp_dir().join(format!("ward-git-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// No system or global git configuration, no prompts; proxies pass through.
fn clean_git_env(cmd: &mut Command, home: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
    for proxy in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"] {
        if let Some(v) = std::env::var_os(proxy) {
            cmd.env(proxy, v);
        }
    }
}

/// The token as an `http.<remote_url>.extraheader`, through the environment.
fn authorize(cmd: &mut Command, remote_url: &str, token: Option<&str>) {
    use base64::Engine as _;
    if let Some(token) = token {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", format!("http.{remote_url}.extraheader"))
            .env("GIT_CONFIG_VALUE_0", format!("AUTHORIZATION: basic {basic}"));
    }
}

/// Runs git; a failure is an error with git's own words, the token scrubbed.
fn run_git(mut cmd: Command, branch: &str, token: Option<&str>, op: &'static str, repo: &Path) -> Result<()> {
    let out = cmd.output().map_err(io_err(op, repo))?;
    if out.status.success() {
        return Ok(());
    }
    let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        stderr = stderr.replace(token, "***");
    }
    Err(WorktreeError::Push { branch: branch.into(), status: out.status.to_string(), stderr })
}
