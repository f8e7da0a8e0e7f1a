//! The visit's commits as a git bundle: written by the visit job (which ran
//! the agent and holds no write token), taken in by the record job (which
//! holds one and runs nothing of the agent's).
//!
//! The record job treats the bundle as hostile: it is read only by git in a
//! fresh bare repository with a clean environment ([`super::git::remote`]:
//! no hooks, no system or global configuration, nothing of the agent's
//! `.git`), after its size is checked; it must carry exactly one ref,
//! `refs/heads/ward/issue-<n>`, whose commits descend from the commit the
//! record job itself decides the run started at (a resolving stage's
//! rebase: from the base's tip as the record job fetched it); no file it
//! adds may pass [`MAX_FILE_BYTES`]. Nothing is ever checked out of it.

use std::path::{Path, PathBuf};

use super::errors::{Result, WorktreeError, io_err};
use super::git::{self, Checkout, Scratch};

/// The largest bundle the record job reads.
pub const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;
/// The largest file a visit's commits may add or change.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// The most commits one visit may add.
pub const MAX_COMMITS: usize = 200;
/// The bundle's name in the sealed visit.
pub const BUNDLE_FILE: &str = "visit.bundle";

/// Writes the commits of `branch` on top of `start` as a bundle at `out`;
/// `false` (no file) when the branch is still at `start`.
pub fn create(co: &Checkout, branch: &str, start: &str, out: &Path) -> Result<bool> {
    let mut head = co.git();
    head.args(["rev-parse", "--verify", "--quiet", &format!("refs/heads/{branch}^{{commit}}")]);
    if git::text(head, "rev-parse")? == start {
        return Ok(false);
    }
    let mut cmd = co.git();
    cmd.args(["bundle", "create", "--quiet"]).arg(out).args([format!("refs/heads/{branch}"), format!("^{start}")]);
    git::run(cmd, "bundle create", None).map(|_| true)
}

/// Why a visit's bundle was refused: a sentence for the REFUSAL.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Git(#[from] WorktreeError),
}

/// Where the visit's commits sit once taken in: a fresh bare repository
/// (removed on drop) with the remote's branch and base fetched, and the
/// visit's head, checked.
pub struct Intake {
    _scratch: Scratch,
    /// The bare repository (read it with `groundedness::Tree::commit`).
    pub bare: PathBuf,
    pub start: String,
    /// The visit's head: `start` when it committed nothing.
    pub head: String,
    /// The files the visit's commits changed against `start`.
    pub changed: Vec<String>,
    /// The lines they changed (added plus removed; a binary file one), as
    /// ward counts them from the commits: what `max_diff_lines` checks.
    pub diff_lines: u64,
    /// The push replaces the remote branch (a restart from the base, a
    /// resolving stage's rebase), with a lease on `remote_head`.
    pub force: bool,
    /// The remote branch as this job fetched it (`None`: no such branch).
    pub remote_head: Option<String>,
    /// The patient's emulator data the visit sealed, once intake checked it.
    pub checkpoint: Option<Box<super::shared::Sealed>>,
    /// When it sealed none (its data did not change): the visit job's
    /// reading of the schema, a CHECKPOINT note's body naming `head`.
    pub schema: Option<String>,
}

/// What the record job knows, from its own reading, about where the run started.
pub struct Expected<'a> {
    pub remote_url: &'a str,
    pub token: Option<&'a str>,
    pub base: &'a str,
    /// `ward/issue-<n>`.
    pub branch: &'a str,
    /// The chart says the patient restarts from the base.
    pub restart: bool,
    /// A resolving stage (`mode: resolve`): its head may be the branch
    /// rebased onto the base's current tip instead of descending from
    /// where the run started.
    pub resolve: bool,
}

/// A fresh bare repository in a scratch folder of its own (removed with
/// it), where the record job takes a bundle in; git runs on it with a clean
/// environment ([`git::remote`]).
pub struct RecordRepo {
    pub scratch: Scratch,
    pub bare: PathBuf,
}

impl RecordRepo {
    pub fn new(name: &str) -> std::result::Result<Self, BundleError> {
        let scratch = Scratch::new()?;
        let bare = scratch.0.join(name);
        let mut init = git::remote(&scratch.0);
        init.args(["init", "--quiet", "--bare"]).arg(&bare);
        git::run(init, "make the record repository in", None)?;
        Ok(Self { scratch, bare })
    }

    /// git with `args` on the bare repository.
    pub fn git(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = git::remote(&self.scratch.0);
        cmd.arg("--git-dir").arg(&self.bare).args(args);
        cmd
    }
}

/// Takes a visit's bundle in (see the module comment). `bundle` is `None`
/// when the visit committed nothing; `claimed_start` is what the visit says
/// it started at, accepted only when it is what the record job expects.
pub fn take_in(
    bundle: Option<&Path>,
    claimed_start: &str,
    expect: &Expected<'_>,
) -> std::result::Result<Intake, BundleError> {
    let refuse = |s: String| Err(BundleError::Refused(s));
    let repo = RecordRepo::new("visit.git")?;
    let (scratch, bare) = (&repo.scratch, &repo.bare);
    let git_in = |args: &[&str]| repo.git(args);
    // The remote as it is now: the patient's branch (if any) and the base.
    let base_ref = "refs/ward/base";
    let branch_ref = "refs/ward/branch";
    git::fetch_into(bare, &scratch.0, expect.remote_url, expect.base, base_ref, expect.token)?;
    let remote_head =
        match git::fetch_into(bare, &scratch.0, expect.remote_url, expect.branch, branch_ref, expect.token)? {
            true => Some(git::text(git_in(&["rev-parse", branch_ref]), "rev-parse")?),
            false => None,
        };
    let is_ancestor =
        |a: &str, b: &str| git::run(git_in(&["merge-base", "--is-ancestor", a, b]), "merge-base", None).is_ok();
    let start_ok = match (&remote_head, expect.restart) {
        (Some(head), false) => head == claimed_start,
        _ => is_ancestor(claimed_start, base_ref),
    };
    if !start_ok {
        return refuse(format!(
            "the visit says it started at {claimed_start}, but `{}` is at {} now{}; the branch moved while the agent \
             ran, or the visit is not this run's",
            expect.branch,
            remote_head.as_deref().unwrap_or("nothing (no such branch)"),
            if expect.restart { " and a restart starts from the base" } else { "" }
        ));
    }
    let head = match bundle {
        None => claimed_start.to_string(),
        Some(file) => fetch_bundle(file, bare, &scratch.0, expect.branch)?,
    };
    // Every bound is measured from where the commits start: the run's start,
    // or for a resolving stage's rebase the base's tip this job fetched.
    let from = if is_ancestor(claimed_start, &head) {
        claimed_start.to_string()
    } else if !expect.resolve {
        return refuse(format!(
            "the visit's `{}` does not descend from {claimed_start}, where the run started (only a resolving \
             stage may rebase the branch)",
            expect.branch
        ));
    } else if is_ancestor(base_ref, &head) {
        git::text(git_in(&["rev-parse", base_ref]), "rev-parse")?
    } else {
        let tip = git::text(git_in(&["rev-parse", base_ref]), "rev-parse")?;
        return refuse(format!(
            "the resolving visit's `{}` descends neither from {claimed_start}, where the run started, nor from \
             `{}` at {tip}, the base's tip now: a rebase must be onto the base as it is",
            expect.branch, expect.base
        ));
    };
    let force = remote_head.as_deref().is_some_and(|h| h != claimed_start) || from != claimed_start;
    let range = format!("{from}..{head}");
    let count = git::text(git_in(&["rev-list", "--count", &range]), "rev-list")?;
    if count.parse::<usize>().unwrap_or(usize::MAX) > MAX_COMMITS {
        return refuse(format!("the visit adds {count} commits, over the limit of {MAX_COMMITS}"));
    }
    let (changed, diff_lines) = too_large_or_changed(bare, &from, &head)?;
    let RecordRepo { scratch, bare } = repo;
    Ok(Intake {
        _scratch: scratch,
        bare,
        start: claimed_start.to_string(),
        head,
        changed,
        diff_lines,
        force,
        remote_head,
        checkpoint: None,
        schema: None,
    })
}

/// Checks the bundle's size and refs, and fetches it: its head.
pub fn fetch_bundle(
    file: &Path,
    bare: &Path,
    scratch: &Path,
    branch: &str,
) -> std::result::Result<String, BundleError> {
    let refuse = |s: String| Err(BundleError::Refused(s));
    let len = std::fs::metadata(file).map_err(io_err("read", file))?.len();
    if len > MAX_BUNDLE_BYTES {
        return refuse(format!("the visit's bundle is {len} bytes, over the limit of {MAX_BUNDLE_BYTES}"));
    }
    let mut heads = git::remote(scratch);
    heads.arg("--git-dir").arg(bare).args(["bundle", "list-heads"]).arg(file);
    let listed = match git::text(heads, "bundle list-heads") {
        Ok(t) => t,
        Err(e) => return refuse(format!("the visit's bundle is not a git bundle git can read: {e}")),
    };
    let wanted = format!("refs/heads/{branch}");
    let refs: Vec<(&str, &str)> = listed.lines().filter_map(|l| l.split_once(' ')).collect();
    match refs.as_slice() {
        [(_, name)] if *name == wanted => {}
        _ => {
            let names: Vec<String> = refs.iter().map(|(_, n)| format!("`{}`", n.escape_debug())).collect();
            return refuse(format!(
                "the visit's bundle must carry exactly one ref, `{wanted}`; it carries {}",
                if names.is_empty() { "none".into() } else { names.join(", ") }
            ));
        }
    }
    let mut fetch = git::remote(scratch);
    fetch.arg("--git-dir").arg(bare).args(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]);
    fetch.arg(file).arg(format!("{wanted}:refs/ward/visit"));
    if let Err(e) = git::run(fetch, "fetch the visit's bundle", None) {
        return refuse(format!("the visit's bundle does not apply on top of where the run started: {e}"));
    }
    let mut head = git::remote(scratch);
    head.arg("--git-dir").arg(bare).args(["rev-parse", "refs/ward/visit^{commit}"]);
    Ok(git::text(head, "rev-parse")?)
}

/// The paths changed from `start` to `head` and the lines they changed; a
/// file over [`MAX_FILE_BYTES`] refuses.
pub fn too_large_or_changed(
    bare: &Path,
    start: &str,
    head: &str,
) -> std::result::Result<(Vec<String>, u64), BundleError> {
    let gerr = |e: git2::Error| WorktreeError::Git { op: "read", object: "the visit's commits".into(), source: e };
    let repo = git2::Repository::open_bare(bare).map_err(gerr)?;
    let tree = |rev: &str| repo.revparse_single(rev).and_then(|o| o.peel_to_tree());
    let (old, new) = (tree(start).map_err(gerr)?, tree(head).map_err(gerr)?);
    let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), None).map_err(gerr)?;
    let odb = repo.odb().map_err(gerr)?;
    let mut changed = Vec::new();
    let mut lines = 0u64;
    for (idx, delta) in diff.deltas().enumerate() {
        let file = delta.new_file();
        let path =
            file.path().or(delta.old_file().path()).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        if !file.id().is_zero()
            && let Ok((size, _)) = odb.read_header(file.id())
            && size as u64 > MAX_FILE_BYTES
        {
            return Err(BundleError::Refused(format!(
                "the visit's commits make `{}` {size} bytes, over the limit of {MAX_FILE_BYTES} bytes per file",
                path.escape_debug()
            )));
        }
        changed.push(path);
        lines += match git2::Patch::from_diff(&diff, idx).map_err(gerr)? {
            Some(patch) if !patch.delta().flags().contains(git2::DiffFlags::BINARY) => {
                let (_, added, removed) = patch.line_stats().map_err(gerr)?;
                (added + removed) as u64
            }
            _ => 1,
        };
    }
    changed.sort();
    changed.dedup();
    Ok((changed, lines))
}

/// Pushes the visit's head to `branch` from the record repository; a
/// forced push only with a lease on the branch as this job fetched it, so
/// a commit pushed meanwhile is never lost.
pub fn push(intake: &Intake, remote_url: &str, branch: &str, token: Option<&str>) -> Result<()> {
    let lease = intake.force.then_some(intake.remote_head.as_deref()).flatten();
    git::push_ref(&intake.bare, "refs/ward/visit", remote_url, branch, token, lease)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git").current_dir(dir).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A "remote" (a bare repository) with `main` and `ward/issue-1`, and a
    /// clone where the visit's commits are made.
    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf, String) {
        let dir = tempfile::tempdir().unwrap();
        let remote = dir.path().join("remote.git");
        let work = dir.path().join("work");
        sh(dir.path(), &["init", "--quiet", "--bare", "-b", "main", remote.to_str().unwrap()]);
        sh(dir.path(), &["init", "--quiet", "-b", "main", work.to_str().unwrap()]);
        for (k, v) in [("user.name", "t"), ("user.email", "t@example.com")] {
            sh(&work, &["config", k, v]);
        }
        std::fs::write(work.join("a.txt"), "a\n").unwrap();
        sh(&work, &["add", "-A"]);
        sh(&work, &["commit", "--quiet", "-m", "base"]);
        sh(&work, &["branch", "ward/issue-1"]);
        sh(&work, &["push", "--quiet", remote.to_str().unwrap(), "main", "ward/issue-1"]);
        let start = sh(&work, &["rev-parse", "HEAD"]);
        sh(&work, &["switch", "--quiet", "ward/issue-1"]);
        (dir, remote, work, start)
    }

    fn expect(remote: &Path) -> Expected<'_> {
        Expected {
            remote_url: remote.to_str().unwrap(),
            token: None,
            base: "main",
            branch: "ward/issue-1",
            restart: false,
            resolve: false,
        }
    }

    fn commit(work: &Path, file: &str, bytes: &[u8]) {
        std::fs::write(work.join(file), bytes).unwrap();
        sh(work, &["add", "-A"]);
        sh(work, &["commit", "--quiet", "-m", "visit"]);
    }

    #[test]
    fn a_visits_commits_are_taken_in_and_pushed_from_a_fresh_repository() {
        let (dir, remote, work, start) = setup();
        commit(&work, "b.txt", b"b\n");
        commit(&work, "c.txt", b"1\n2\n3\n");
        let file = dir.path().join(BUNDLE_FILE);
        let co = Checkout::new(&work.join(".git"), &work);
        assert!(create(&co, "ward/issue-1", &start, &file).unwrap());
        let intake = take_in(Some(&file), &start, &expect(&remote)).unwrap();
        assert_eq!(intake.changed, ["b.txt", "c.txt"]);
        assert_eq!(intake.diff_lines, 4, "counted from the commits, never from the visit's own claim");
        assert_eq!(intake.head, sh(&work, &["rev-parse", "HEAD"]));
        assert!(!intake.force);
        push(&intake, remote.to_str().unwrap(), "ward/issue-1", None).unwrap();
        assert_eq!(sh(&remote, &["rev-parse", "ward/issue-1"]), intake.head);
        // No commit: no bundle.
        assert!(!create(&co, "ward/issue-1", &intake.head, &dir.path().join("none")).unwrap());
    }

    #[test]
    fn a_bundle_with_another_ref_a_huge_file_or_a_moved_start_is_refused_with_a_sentence() {
        let (dir, remote, work, start) = setup();
        commit(&work, "b.txt", b"b\n");
        let file = dir.path().join("two.bundle");
        sh(&work, &["branch", "elsewhere"]);
        sh(
            &work,
            &["bundle", "create", "--quiet", file.to_str().unwrap(), "ward/issue-1", "elsewhere", &format!("^{start}")],
        );
        let why = refused(take_in(Some(&file), &start, &expect(&remote)));
        assert!(
            why.contains("exactly one ref, `refs/heads/ward/issue-1`") && why.contains("`refs/heads/elsewhere`"),
            "{why}"
        );

        commit(&work, "huge.bin", &vec![b'x'; MAX_FILE_BYTES as usize + 1]);
        let file = dir.path().join("huge.bundle");
        assert!(create(&Checkout::new(&work.join(".git"), &work), "ward/issue-1", &start, &file).unwrap());
        let why = refused(take_in(Some(&file), &start, &expect(&remote)));
        assert!(why.contains("`huge.bin`") && why.contains("over the limit"), "{why}");

        // The visit claims a start the branch is not at.
        let head = sh(&work, &["rev-parse", "HEAD"]);
        let why = refused(take_in(None, &head, &expect(&remote)));
        assert!(why.contains("the branch moved while the agent ran"), "{why}");
    }

    fn refused(r: std::result::Result<Intake, BundleError>) -> String {
        match r {
            Err(BundleError::Refused(why)) => why,
            Err(e) => panic!("an error, not a refusal: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    /// The patient's branch one commit past the base on the remote (where
    /// the run starts), then the base moves on with a commit of its own:
    /// `(dir, remote, work, start)`, the work tree on the branch.
    fn base_moved_on() -> (tempfile::TempDir, PathBuf, PathBuf, String) {
        let (dir, remote, work, _) = setup();
        commit(&work, "b.txt", b"b\n");
        sh(&work, &["push", "--quiet", remote.to_str().unwrap(), "ward/issue-1"]);
        let start = sh(&work, &["rev-parse", "HEAD"]);
        sh(&work, &["switch", "--quiet", "main"]);
        commit(&work, "m.txt", b"m\n");
        sh(&work, &["push", "--quiet", remote.to_str().unwrap(), "main"]);
        sh(&work, &["switch", "--quiet", "ward/issue-1"]);
        (dir, remote, work, start)
    }

    #[test]
    fn a_resolving_visits_rebase_onto_the_bases_tip_is_measured_from_the_base_and_pushed_with_a_lease() {
        let (dir, remote, work, start) = base_moved_on();
        sh(&work, &["rebase", "--quiet", "main"]);
        let file = dir.path().join(BUNDLE_FILE);
        assert!(create(&Checkout::new(&work.join(".git"), &work), "ward/issue-1", &start, &file).unwrap());
        let resolving = Expected { resolve: true, ..expect(&remote) };
        let intake = take_in(Some(&file), &start, &resolving).unwrap();
        assert!(intake.force, "a rebase replaces the branch");
        assert_eq!(intake.remote_head.as_deref(), Some(start.as_str()));
        assert_eq!(intake.changed, ["b.txt"], "measured from the base's tip: the base's own commit is not the visit's");
        assert_eq!(intake.diff_lines, 1);

        // A commit pushed to the branch meanwhile: the lease refuses, nothing is lost.
        sh(&work, &["switch", "--quiet", "-c", "meanwhile", &start]);
        commit(&work, "c.txt", b"c\n");
        let meanwhile = sh(&work, &["rev-parse", "HEAD"]);
        sh(&work, &["push", "--quiet", remote.to_str().unwrap(), "meanwhile:ward/issue-1"]);
        let err = push(&intake, remote.to_str().unwrap(), "ward/issue-1", None).unwrap_err().to_string();
        assert!(err.contains("stale info"), "{err}");
        assert_eq!(sh(&remote, &["rev-parse", "ward/issue-1"]), meanwhile);

        // The branch where the run started: the rebased head replaces it.
        sh(
            &work,
            &["push", "--quiet", "--force", remote.to_str().unwrap(), &format!("{start}:refs/heads/ward/issue-1")],
        );
        push(&intake, remote.to_str().unwrap(), "ward/issue-1", None).unwrap();
        assert_eq!(sh(&remote, &["rev-parse", "ward/issue-1"]), intake.head);
        assert_eq!(sh(&remote, &["rev-parse", "ward/issue-1~1"]), sh(&remote, &["rev-parse", "main"]));
    }

    #[test]
    fn a_rewritten_history_is_refused_outside_a_resolving_stage_and_a_rebase_onto_an_old_base_in_it() {
        let (dir, remote, work, start) = base_moved_on();
        // Rebased onto the base's tip, by a treatment: refused.
        sh(&work, &["switch", "--quiet", "-c", "rebased"]);
        sh(&work, &["rebase", "--quiet", "main"]);
        sh(&work, &["branch", "--quiet", "-f", "ward/issue-1", "rebased"]);
        let file = dir.path().join("rebased.bundle");
        let co = Checkout::new(&work.join(".git"), &work);
        assert!(create(&co, "ward/issue-1", &start, &file).unwrap());
        let why = refused(take_in(Some(&file), &start, &expect(&remote)));
        assert!(why.contains("does not descend from") && why.contains("only a resolving stage"), "{why}");

        // Rewritten on the old base (an amended commit), by a resolving stage: refused too.
        sh(&work, &["switch", "--quiet", "-C", "amended", &start]);
        sh(&work, &["commit", "--quiet", "--amend", "-m", "rewritten"]);
        sh(&work, &["branch", "--quiet", "-f", "ward/issue-1", "amended"]);
        let file = dir.path().join("amended.bundle");
        assert!(create(&co, "ward/issue-1", &start, &file).unwrap());
        let why = refused(take_in(Some(&file), &start, &Expected { resolve: true, ..expect(&remote) }));
        assert!(why.contains("descends neither") && why.contains("the base's tip now"), "{why}");
        assert_eq!(sh(&remote, &["rev-parse", "ward/issue-1"]), start, "nothing was pushed");
    }
}
