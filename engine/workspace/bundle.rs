//! The visit's commits as a git bundle: written by the visit job (which ran
//! the agent and holds no write token), taken in by the record job (which
//! holds one and runs nothing of the agent's).
//!
//! The record job treats the bundle as hostile: it is read only by git in a
//! fresh bare repository with a clean environment ([`super::git::remote`]:
//! no hooks, no system or global configuration, nothing of the agent's
//! `.git`), after its size is checked; it must carry exactly one ref,
//! `refs/heads/ward/issue-<n>`, whose commits descend from the commit the
//! record job itself decides the run started at; no file it adds may pass
//! [`MAX_FILE_BYTES`]. Nothing is ever checked out of it.

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
    /// The push replaces the remote branch (a restart from the base).
    pub force: bool,
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
    let scratch = Scratch::new()?;
    let bare = scratch.0.join("visit.git");
    let mut init = git::remote(&scratch.0);
    init.args(["init", "--quiet", "--bare"]).arg(&bare);
    git::run(init, "make the record repository in", None)?;
    let git_in = |args: &[&str]| {
        let mut cmd = git::remote(&scratch.0);
        cmd.arg("--git-dir").arg(&bare).args(args);
        cmd
    };
    // The remote as it is now: the patient's branch (if any) and the base.
    let base_ref = "refs/ward/base";
    let branch_ref = "refs/ward/branch";
    git::fetch_into(&bare, &scratch.0, expect.remote_url, expect.base, base_ref, expect.token)?;
    let remote_head =
        match git::fetch_into(&bare, &scratch.0, expect.remote_url, expect.branch, branch_ref, expect.token)? {
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
    let force = remote_head.as_deref().is_some_and(|h| h != claimed_start);
    let head = match bundle {
        None => claimed_start.to_string(),
        Some(file) => fetch_bundle(file, &bare, &scratch.0, expect.branch)?,
    };
    if !is_ancestor(claimed_start, &head) {
        return refuse(format!(
            "the visit's `{}` does not descend from {claimed_start}, where the run started",
            expect.branch
        ));
    }
    let range = format!("{claimed_start}..{head}");
    let count = git::text(git_in(&["rev-list", "--count", &range]), "rev-list")?;
    if count.parse::<usize>().unwrap_or(usize::MAX) > MAX_COMMITS {
        return refuse(format!("the visit adds {count} commits, over the limit of {MAX_COMMITS}"));
    }
    let (changed, diff_lines) = too_large_or_changed(&bare, claimed_start, &head)?;
    Ok(Intake { _scratch: scratch, bare, start: claimed_start.to_string(), head, changed, diff_lines, force })
}

/// Checks the bundle's size and refs, and fetches it: its head.
fn fetch_bundle(file: &Path, bare: &Path, scratch: &Path, branch: &str) -> std::result::Result<String, BundleError> {
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
fn too_large_or_changed(bare: &Path, start: &str, head: &str) -> std::result::Result<(Vec<String>, u64), BundleError> {
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

/// Pushes the visit's head to `branch` from the record repository.
pub fn push(intake: &Intake, remote_url: &str, branch: &str, token: Option<&str>) -> Result<()> {
    git::push_ref(&intake.bare, "refs/ward/visit", remote_url, branch, token, intake.force)
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
        let refused = |r: std::result::Result<Intake, BundleError>| match r {
            Err(BundleError::Refused(why)) => why,
            Err(e) => panic!("an error, not a refusal: {e}"),
            Ok(_) => panic!("accepted"),
        };
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
}
