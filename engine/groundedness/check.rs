//! Checking one claim against the tree: does the path name something,
//! are the lines (and column) in the file's real content, is the test
//! there. Each answer is grounded, not grounded (and why), or not
//! checkable here (and why).

use super::tree::{self, Lookup, Tree};
use super::{Claim, Facts};

/// How one claim fared.
pub(super) enum Verdict {
    Grounded,
    Ungrounded(String),
    Unknowable(String),
    /// Not about the tree at all (an absolute path elsewhere): dropped.
    Dropped,
}

fn missing(tree: &Tree, why: Option<String>) -> Verdict {
    match why {
        Some(why) => Verdict::Unknowable(why),
        None => Verdict::Ungrounded(format!("does not exist in {}", tree.describe())),
    }
}

pub(super) fn check_path(claim: &Claim, in_plan: bool, facts: &Facts<'_>) -> Verdict {
    let path = claim.path.as_deref().unwrap_or_default();
    match facts.tree.lookup(path) {
        Lookup::Files(_) | Lookup::Folder | Lookup::Submodule => Verdict::Grounded,
        Lookup::Outside => Verdict::Dropped,
        Lookup::Missing(_) if claim.planned_new && (in_plan || !facts.after_treatment) => Verdict::Grounded,
        Lookup::Missing(None) if claim.planned_gone => {
            Verdict::Unknowable("is not in the tree, and the note says it was removed or moved".into())
        }
        Lookup::Missing(why) => missing(facts.tree, why),
    }
}

pub(super) fn check_lines(claim: &Claim, tree: &Tree, reader: &mut tree::Reader<'_>) -> Verdict {
    let (from, to) = claim.lines.unwrap_or((1, 1));
    if from == 0 || to < from {
        return Verdict::Ungrounded("is not a valid line range (lines count from 1)".into());
    }
    let files = match tree.lookup(claim.path.as_deref().unwrap_or_default()) {
        Lookup::Files(files) => files,
        Lookup::Folder => return Verdict::Ungrounded("is a folder, not a file".into()),
        Lookup::Submodule => return Verdict::Ungrounded("is a submodule, not a file".into()),
        Lookup::Outside => return Verdict::Dropped,
        Lookup::Missing(why) => return missing(tree, why),
    };
    // Any file the path can name will do (a bare name may name several).
    let mut first_problem = None;
    let mut unknowable = None;
    for (key, entry) in files {
        if entry.symlink {
            unknowable.get_or_insert_with(|| "is a symbolic link; its target is not read".to_string());
            continue;
        }
        let bytes = match reader.read(key, entry) {
            Ok(bytes) => bytes,
            Err(why) => {
                unknowable.get_or_insert(why.to_string());
                continue;
            }
        };
        match within(&bytes, from, to, claim.column) {
            None => return Verdict::Grounded,
            Some(problem) => {
                first_problem.get_or_insert(problem);
            }
        }
    }
    match (unknowable, first_problem) {
        (Some(why), _) => Verdict::Unknowable(why),
        // The note says these lines went away: they may have.
        (None, Some(_)) if claim.planned_gone => {
            Verdict::Unknowable("is out of range, and the note says it was removed or moved".into())
        }
        (None, Some(problem)) => Verdict::Ungrounded(problem),
        (None, None) => missing(tree, None),
    }
}

/// `None` when lines `from..=to` (and `column` of `from`) exist in `bytes`.
fn within(bytes: &[u8], from: usize, to: usize, column: Option<usize>) -> Option<String> {
    if bytes[..bytes.len().min(8000)].contains(&0) {
        return Some("is a binary file, not lines of text".into());
    }
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
    let count = newlines + usize::from(!bytes.is_empty() && !bytes.ends_with(b"\n"));
    if to > count {
        return Some(format!("is out of range: the file has {count} lines"));
    }
    let column = column?;
    let line = bytes.split(|&b| b == b'\n').nth(from - 1).unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end_matches('\r');
    // Compilers count characters, bytes or display columns (tabs to 8).
    let chars = line.chars().count();
    let display = line.chars().fold(0, |w, c| if c == '\t' { (w / 8 + 1) * 8 } else { w + 1 });
    let width = chars.max(display).max(line.len());
    (column > width + 1).then(|| format!("is out of range: line {from} has {width} columns"))
}

pub(super) fn check_test(
    claim: &Claim,
    tree: &Tree,
    reader: &mut tree::Reader<'_>,
    everywhere: &tree::Found,
) -> Verdict {
    let word = claim.test_identifier();
    let Some(path) = claim.path.as_deref() else {
        if everywhere.words.contains(word) {
            return Verdict::Grounded;
        }
        return match everywhere.unread.first() {
            Some(why) => Verdict::Unknowable(format!("is not found in the files that could be read; {why}")),
            None => Verdict::Ungrounded(format!("is not found in any file of {}", tree.describe())),
        };
    };
    let files = match tree.lookup(path) {
        Lookup::Files(files) => files,
        Lookup::Outside => return Verdict::Dropped,
        Lookup::Folder | Lookup::Submodule => return Verdict::Ungrounded(format!("`{path}` is a folder, not a file")),
        Lookup::Missing(why) => return missing(tree, why),
    };
    let found = reader.search(&[word], Some(&files));
    match (found.words.contains(word), found.unread.first()) {
        (true, _) => Verdict::Grounded,
        (false, Some(why)) => Verdict::Unknowable(why.clone()),
        (false, None) => Verdict::Ungrounded(format!("is not found in `{path}`")),
    }
}
