//! What can go wrong with a workspace's git: one error type for the
//! branch and checkout work ([`super::worktree`]) and the git CLI it runs
//! ([`super::git`]), each a sentence that says what to do.

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("could not {op} `{object}`: {}", source.message())]
    Git {
        op: &'static str,
        object: String,
        #[source]
        source: git2::Error,
    },
    #[error("`{cmd}` failed{} ({status}): {stderr}", dir.as_ref().map(|d| format!(" in {}", d.display())).unwrap_or_default(), cmd = op)]
    Cli { op: &'static str, dir: Option<PathBuf>, status: String, stderr: String },
    #[error(
        "base branch `{base}` does not exist in {} (looked for refs/heads/{base} and refs/remotes/origin/{base}); \
         fetch it or set WARD_BASE to the branch patients' branches start from",
        repo.display()
    )]
    BaseMissing { base: String, repo: PathBuf },
    #[error(
        "worktree path {} already exists and ward has no record of creating it; ward never reuses or deletes \
         a folder it did not create: remove it by hand or point WARD_HOME elsewhere",
        path.display()
    )]
    PathExists { path: PathBuf },
    #[error(
        "branch `{branch}` is checked out in {}, which is not a workspace ward made; git checks a branch out \
         in one place only: switch that checkout to another branch (`git -C {} switch -`) and run the stage again",
        path.display(),
        path.display()
    )]
    BranchBusy { branch: String, path: PathBuf },
    #[error(
        "the workspace of issue #{issue} is in use by another ward process ({holder}); it is released the moment \
         that process ends, however it ends: wait for it, or end it"
    )]
    Busy { issue: u64, holder: String },
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
        "the `.git` of {} now leads to {}, not to the repository ward checked out there; ward will not commit there",
        path.display(),
        points_to.display()
    )]
    Tampered { path: PathBuf, points_to: PathBuf },
    #[error("git could not push or fetch `{branch}` ({status}): {stderr}")]
    Push { branch: String, status: String, stderr: String },
    #[error(
        "{} stores files in Git LFS{} but `git-lfs` is not installed, and ward never commits such files raw: \
         install git-lfs (`apt-get install git-lfs`) and run the stage again",
        path.display(),
        file.as_ref().map(|f| format!(" (`{f}`)")).unwrap_or_default()
    )]
    LfsMissing { path: PathBuf, file: Option<String> },
    #[error(
        "`{file}` is an LFS file by `.gitattributes` but is staged as a raw file, not as an LFS pointer; \
         ward commits nothing: stage it with `git lfs track` in place, or leave it out"
    )]
    LfsRaw { file: String },
    #[error(
        "the checkout at {} has changes ({}); in a CI job ward runs the agent in the job's own fresh checkout, \
         which must be clean: ward leaves these alone and runs nothing",
        path.display(),
        files.join(", ")
    )]
    CheckoutDirty { path: PathBuf, files: Vec<String> },
}

impl WorktreeError {
    /// A push or fetch failure, named by the branch it was for.
    pub(crate) fn for_branch(self, branch: &str) -> Self {
        match self {
            WorktreeError::Cli { status, stderr, .. } => WorktreeError::Push { branch: branch.into(), status, stderr },
            other => other,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, WorktreeError>;

pub(crate) fn git(op: &'static str, object: impl Into<String>) -> impl FnOnce(git2::Error) -> WorktreeError {
    let object = object.into();
    move |source| WorktreeError::Git { op, object, source }
}

pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WorktreeError {
    let path = path.to_path_buf();
    move |source| WorktreeError::Io { op, path, source }
}
