//! The local forge's merge, with git2: an audited pull request's head goes
//! into the base branch of the local repository, by fast-forward when the
//! base has not moved, else by a merge commit. A conflict refuses the merge
//! and names the files; a checkout of the base branch (the person's own
//! folder) is updated with it, and local changes there that the merge would
//! overwrite refuse it too. Nothing moves unless everything can.

use std::path::Path;

use git2::{Oid, Repository, Signature};

/// How the head reached the base branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// The base branch moved forward to the head.
    FastForward(String),
    /// A merge commit of the base and the head.
    MergeCommit(String),
    /// The head was already in the base branch (a rerun).
    Already(String),
}

impl Merged {
    /// The commit the base branch is at afterwards.
    pub fn commit(&self) -> &str {
        match self {
            Merged::FastForward(c) | Merged::MergeCommit(c) | Merged::Already(c) => c,
        }
    }
}

/// What one merge needs.
pub struct MergeRequest<'a> {
    pub repository: &'a Path,
    /// The pull request's head branch (`ward/issue-7`).
    pub branch: &'a str,
    /// The audited head commit: exactly this is merged.
    pub head: &'a str,
    pub base: &'a str,
    pub message: &'a str,
    pub who: &'a Signature<'static>,
}

/// Why a merge was refused; the repository is unchanged then.
#[derive(Debug, thiserror::Error)]
pub enum MergeRefusal {
    /// Both sides changed the same lines: the branch is brought up to date
    /// (the resolving stage's work) before it is audited again.
    #[error(
        "merging `{branch}` into `{base}` conflicts in {}; nothing was merged: bring the branch up to date with \
         `{base}` (rebase or merge, resolving those files), then audit it again",
        quoted(files)
    )]
    Conflict { branch: String, base: String, files: Vec<String> },
    /// Anything else, as a sentence saying what stopped it and what to do.
    #[error("{0}")]
    Other(String),
}

impl From<String> for MergeRefusal {
    fn from(sentence: String) -> Self {
        MergeRefusal::Other(sentence)
    }
}

fn quoted(files: &[String]) -> String {
    files.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
}

/// Merges `req.head` into `req.base`.
pub fn merge_into_base(req: &MergeRequest<'_>) -> Result<Merged, MergeRefusal> {
    let at = req.repository.display();
    let repo = Repository::open(req.repository).map_err(|e| format!("{at} is not a git repository: {e}"))?;
    let head = Oid::from_str(req.head)
        .ok()
        .filter(|_| !req.head.is_empty())
        .ok_or_else(|| format!("the pull request's head `{}` is not a commit id", req.head))?;
    let head_commit = repo.find_commit(head).map_err(|_| format!("the audited head {head} is not a commit of {at}"))?;
    if let Ok(branch) = repo.find_branch(req.branch, git2::BranchType::Local)
        && let Some(tip) = branch.get().target()
        && tip != head
    {
        return Err(format!(
            "branch `{}` is at {tip}, not at the audited head {head}; audit the new head before merging",
            req.branch
        )
        .into());
    }
    let base_name = format!("refs/heads/{}", req.base);
    let mut base_ref = repo
        .find_reference(&base_name)
        .map_err(|_| format!("the base branch `{}` does not exist in {at}", req.base))?;
    let base = base_ref.target().ok_or_else(|| format!("`{}` in {at} is not a branch", req.base))?;
    let descends = |a: Oid, b: Oid| repo.graph_descendant_of(a, b).map_err(|e| format!("could not read {at}: {e}"));
    if base == head || descends(base, head)? {
        return Ok(Merged::Already(base.to_string()));
    }
    let merged = if descends(head, base)? {
        Merged::FastForward(head.to_string())
    } else {
        let base_commit = repo.find_commit(base).map_err(|e| format!("could not read `{}`: {e}", req.base))?;
        let mut index = repo
            .merge_commits(&base_commit, &head_commit, None)
            .map_err(|e| format!("could not merge `{}` into `{}`: {e}", req.branch, req.base))?;
        if index.has_conflicts() {
            return Err(MergeRefusal::Conflict {
                branch: req.branch.to_string(),
                base: req.base.to_string(),
                files: conflicted_files(&index),
            });
        }
        let tree_id = index.write_tree_to(&repo).map_err(|e| format!("could not write the merged tree: {e}"))?;
        let tree = repo.find_tree(tree_id).map_err(|e| format!("could not read the merged tree: {e}"))?;
        let id = repo
            .commit(None, req.who, req.who, req.message, &tree, &[&base_commit, &head_commit])
            .map_err(|e| format!("could not write the merge commit: {e}"))?;
        Merged::MergeCommit(id.to_string())
    };
    let new = Oid::from_str(merged.commit()).expect("an id git2 gave");
    update_checkouts(&repo, &base_name, new)?;
    base_ref
        .set_target(new, &format!("ward: merge {} into {}", req.branch, req.base))
        .map_err(|e| format!("could not move `{}` to {new} (did it move meanwhile?): {e}", req.base))?;
    Ok(merged)
}

/// The paths of the conflicting entries, each once.
fn conflicted_files(index: &git2::Index) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    if let Ok(conflicts) = index.conflicts() {
        for c in conflicts.flatten() {
            let entry = c.our.or(c.their).or(c.ancestor);
            if let Some(path) = entry.map(|e| String::from_utf8_lossy(&e.path).into_owned())
                && !files.contains(&path)
            {
                files.push(path);
            }
        }
    }
    files
}

/// Brings every checkout of `base_name` (the main folder, or a linked
/// worktree) to `new` with a safe checkout: files changed there that the
/// merge would overwrite refuse it, before any branch moves.
fn update_checkouts(repo: &Repository, base_name: &str, new: Oid) -> Result<(), MergeRefusal> {
    let mut checkouts: Vec<Repository> = Vec::new();
    if !repo.is_bare() {
        checkouts.push(
            Repository::open(repo.path())
                .map_err(|e| MergeRefusal::Other(format!("could not reopen the repository: {e}")))?,
        );
    }
    for name in
        repo.worktrees().map_err(|e| MergeRefusal::Other(format!("could not list worktrees: {e}")))?.iter().flatten()
    {
        if let Ok(wt) = repo.find_worktree(name)
            && let Ok(r) = Repository::open_from_worktree(&wt)
        {
            checkouts.push(r);
        }
    }
    for checkout in checkouts {
        let on_base = checkout.head().ok().and_then(|h| h.name().map(str::to_string)).as_deref() == Some(base_name);
        if !on_base {
            continue;
        }
        let folder = checkout.workdir().map(|p| p.display().to_string()).unwrap_or_default();
        let tree = checkout
            .find_commit(new)
            .and_then(|c| c.tree())
            .map_err(|e| MergeRefusal::Other(format!("could not read {new}: {e}")))?;
        checkout.checkout_tree(tree.as_object(), Some(git2::build::CheckoutBuilder::new().safe())).map_err(|e| {
            MergeRefusal::Other(format!(
                "the checkout of `{}` at {folder} has changes the merge would overwrite ({}); commit or stash \
                 them, then run the discharge again",
                base_name.trim_start_matches("refs/heads/"),
                e.message()
            ))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig() -> Signature<'static> {
        Signature::new("ward-engine", "engine@ward.invalid", &git2::Time::new(1_767_225_600, 0)).unwrap()
    }

    /// Commits `files` on top of `parent` and points `branch` there.
    fn commit(repo: &Repository, branch: &str, parent: Option<Oid>, files: &[(&str, &str)]) -> Oid {
        let mut builder = match parent {
            Some(p) => repo.treebuilder(Some(&repo.find_commit(p).unwrap().tree().unwrap())).unwrap(),
            None => repo.treebuilder(None).unwrap(),
        };
        for (path, text) in files {
            builder.insert(path, repo.blob(text.as_bytes()).unwrap(), 0o100644).unwrap();
        }
        let tree = repo.find_tree(builder.write().unwrap()).unwrap();
        let parents: Vec<git2::Commit<'_>> = parent.iter().map(|p| repo.find_commit(*p).unwrap()).collect();
        let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
        let id = repo.commit(None, &sig(), &sig(), "c", &tree, &refs).unwrap();
        repo.reference(&format!("refs/heads/{branch}"), id, true, "test").unwrap();
        id
    }

    /// A repository with `main` checked out at one commit, and its folder.
    fn repo() -> (tempfile::TempDir, Repository, Oid) {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = git2::RepositoryInitOptions::new();
        opts.initial_head("main");
        let repo = Repository::init_opts(dir.path(), &opts).unwrap();
        let base = commit(&repo, "main", None, &[("a.txt", "a\n"), ("b.txt", "b\n")]);
        repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force())).unwrap();
        (dir, repo, base)
    }

    fn request<'a>(dir: &'a Path, head: &'a str, who: &'a Signature<'static>) -> MergeRequest<'a> {
        MergeRequest { repository: dir, branch: "ward/issue-1", head, base: "main", message: "Merge #1", who }
    }

    #[test]
    fn a_branch_ahead_of_main_fast_forwards_it_and_the_checkout() {
        let (dir, repo, base) = repo();
        let head = commit(&repo, "ward/issue-1", Some(base), &[("a.txt", "fixed\n")]).to_string();
        let who = sig();
        assert_eq!(merge_into_base(&request(dir.path(), &head, &who)).unwrap(), Merged::FastForward(head.clone()));
        assert_eq!(repo.refname_to_id("refs/heads/main").unwrap().to_string(), head);
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "fixed\n");
        assert!(repo.statuses(None).unwrap().is_empty(), "the checkout is clean after the merge");
        // A rerun merges nothing more.
        assert_eq!(merge_into_base(&request(dir.path(), &head, &who)).unwrap(), Merged::Already(head));
    }

    #[test]
    fn a_moved_main_gets_a_merge_commit_with_both_parents() {
        let (dir, repo, base) = repo();
        let head = commit(&repo, "ward/issue-1", Some(base), &[("a.txt", "fixed\n")]);
        let moved = commit(&repo, "main", Some(base), &[("b.txt", "other\n")]);
        repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force())).unwrap();
        let who = sig();
        let merged = merge_into_base(&request(dir.path(), &head.to_string(), &who)).unwrap();
        let Merged::MergeCommit(id) = merged else { panic!("{merged:?}") };
        let commit = repo.find_commit(Oid::from_str(&id).unwrap()).unwrap();
        assert_eq!(commit.parent_ids().collect::<Vec<_>>(), vec![moved, head]);
        assert_eq!(repo.refname_to_id("refs/heads/main").unwrap().to_string(), id);
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "fixed\n");
        assert_eq!(std::fs::read_to_string(dir.path().join("b.txt")).unwrap(), "other\n");
    }

    #[test]
    fn a_conflict_refuses_the_merge_names_the_file_and_moves_nothing() {
        let (dir, repo, base) = repo();
        let head = commit(&repo, "ward/issue-1", Some(base), &[("a.txt", "theirs\n")]);
        let moved = commit(&repo, "main", Some(base), &[("a.txt", "ours\n")]);
        repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force())).unwrap();
        let who = sig();
        let err = merge_into_base(&request(dir.path(), &head.to_string(), &who)).unwrap_err();
        assert!(matches!(&err, MergeRefusal::Conflict { files, .. } if files == &["a.txt"]), "{err}");
        let err = err.to_string();
        assert!(err.contains("conflicts in `a.txt`") && err.contains("nothing was merged"), "{err}");
        assert_eq!(repo.refname_to_id("refs/heads/main").unwrap(), moved);
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "ours\n");
    }

    #[test]
    fn local_changes_the_merge_would_overwrite_refuse_it() {
        let (dir, repo, base) = repo();
        let head = commit(&repo, "ward/issue-1", Some(base), &[("a.txt", "fixed\n")]);
        std::fs::write(dir.path().join("a.txt"), "my unsaved work\n").unwrap();
        let who = sig();
        let err = merge_into_base(&request(dir.path(), &head.to_string(), &who)).unwrap_err().to_string();
        assert!(err.contains("commit or stash them"), "{err}");
        assert_eq!(repo.refname_to_id("refs/heads/main").unwrap(), base);
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "my unsaved work\n");
    }

    #[test]
    fn a_head_that_is_not_the_branch_tip_is_not_merged() {
        let (dir, repo, base) = repo();
        let audited = commit(&repo, "ward/issue-1", Some(base), &[("a.txt", "one\n")]);
        commit(&repo, "ward/issue-1", Some(audited), &[("a.txt", "two\n")]);
        let who = sig();
        let err = merge_into_base(&request(dir.path(), &audited.to_string(), &who)).unwrap_err().to_string();
        assert!(err.contains("audit the new head"), "{err}");
        assert_eq!(repo.refname_to_id("refs/heads/main").unwrap(), base);
    }
}
