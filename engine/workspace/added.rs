//! The lines a run added, file by file, with their numbers in the new
//! file: what the credential scan ([`crate::secrets::scan`]) reads before
//! anything is committed or pushed. ward's own folders are left out, as
//! everywhere else; a binary file is named with no lines.

use std::path::Path;

use git2::Repository;

use super::errors::{Result, git};
use super::git::Checkout;

/// One file's added lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub path: String,
    pub lines: Vec<(usize, String)>,
}

/// What the checkout has added since `start`: its commits, its index and
/// its work tree, untracked files included (ward commits those).
pub fn since(co: &Checkout, start: &str, state_paths: &[String]) -> Result<Vec<Added>> {
    super::worktree::diff_since(co, start, |diff, object| collect(diff, state_paths, object))
}

/// What the commits `start..head` of the repository at `repo` added (a
/// visit's commits taken in by the record job).
pub fn between(repo: &Path, start: &str, head: &str, state_paths: &[String]) -> Result<Vec<Added>> {
    let object = repo.display().to_string();
    let repo = Repository::open(repo).map_err(git("open the repository", &object))?;
    let tree = |rev: &str| repo.revparse_single(rev).and_then(|o| o.peel_to_tree());
    let old = tree(start).map_err(git("read the commit the run started at", start))?;
    let new = tree(head).map_err(git("read the visit's head", head))?;
    let diff =
        repo.diff_tree_to_tree(Some(&old), Some(&new), None).map_err(git("diff the visit's commits", &object))?;
    collect(&diff, state_paths, &object)
}

fn collect(diff: &git2::Diff<'_>, state_paths: &[String], object: &str) -> Result<Vec<Added>> {
    let ours = |path: &Path| super::worktree::under_state(path, state_paths);
    let mut out = Vec::new();
    for idx in 0..diff.deltas().len() {
        let Some(patch) = git2::Patch::from_diff(diff, idx).map_err(git("diff", object))? else { continue };
        let delta = patch.delta();
        let Some(path) = delta.new_file().path().filter(|p| !ours(p)) else { continue };
        if delta.status() == git2::Delta::Deleted {
            continue;
        }
        let mut lines = Vec::new();
        for hunk in 0..patch.num_hunks() {
            let count = patch.num_lines_in_hunk(hunk).map_err(git("diff", object))?;
            for i in 0..count {
                let line = patch.line_in_hunk(hunk, i).map_err(git("diff", object))?;
                if line.origin() == '+'
                    && let Some(number) = line.new_lineno()
                {
                    let text = String::from_utf8_lossy(line.content());
                    lines.push((number as usize, text.trim_end_matches(['\n', '\r']).to_string()));
                }
            }
        }
        out.push(Added { path: path.to_string_lossy().into_owned(), lines });
    }
    Ok(out)
}
