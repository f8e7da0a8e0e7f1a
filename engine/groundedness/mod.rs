//! Groundedness: scores a run's notes against reality. The claims a note
//! makes that can be checked ([`claims`]) are checked against the tree the
//! run leaves ([`Tree`]) and the precedent log:
//!
//! - a path exists: a file, a folder or a submodule, from the repository
//!   root or, when not there, as the tail of a tracked path (`lib.rs`,
//!   `src/lib.rs` of a package, `../util.mjs` of an import). A path on a
//!   line that marks the file as new (`(new)` after the path, as
//!   `skills/plan-format.md` asks, or words like "create `engine/x.rs`")
//!   may be missing before treatment, not after; in a plan
//!   (TREATMENT_PLAN, REVISED_PLAN) it may always be missing, since a plan
//!   names files treatment will create, even when it is rewritten in the
//!   middle of treatment;
//! - a line reference is within the file's real content (and its column
//!   within the line);
//! - a test named under a "Tests" heading occurs as a word in the tracked
//!   files (or the file the claim names) after treatment;
//! - a precedent id (`P-0007`) is in the log.
//!
//! Some claims cannot be checked here: inside a submodule that is not
//! initialised, in an LFS file whose content is not here, a path git
//! ignores, a path the note says was removed. They are listed, not
//! counted. The score is grounded claims / checked claims (1.0 with none).
//! Below `departments.groundedness.threshold` the run is invalid: the stage
//! reruns once, then escalates ([`decide`]). Extraction and decision are
//! pure; [`score_notes`] reads the tree.

mod check;
pub mod claims;
pub mod tree;

use std::collections::HashSet;
use std::fmt;

use chrono::{DateTime, Utc};

use crate::chart::{Note, NoteKind, NoteMeta};

use self::check::{Verdict, check_lines, check_path, check_test};
pub use self::claims::{Claim, ClaimKind, extract_claims};
pub use self::tree::{Tree, TreeError};

/// What the claims are checked against.
pub struct Facts<'a> {
    /// The tree the run leaves: [`Tree::worktree`] of the agent's worktree,
    /// or [`Tree::commit`] of a repository holding the run's commits.
    pub tree: &'a Tree,
    /// Ids in the precedent log.
    pub precedents: &'a HashSet<String>,
    /// True once the stage has changed code (treat and after): planned new
    /// files must exist, and tests named must exist.
    pub after_treatment: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub claim: Claim,
    /// `None`: grounded. `Some(why)`: not grounded, and why.
    pub problem: Option<String>,
}

/// A claim that could not be checked here, and why; not counted.
#[derive(Debug, Clone, PartialEq)]
pub struct Unchecked {
    pub claim: Claim,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Score {
    pub checked: Vec<Checked>,
    pub unchecked: Vec<Unchecked>,
}

impl Score {
    pub fn grounded(&self) -> usize {
        self.checked.iter().filter(|c| c.problem.is_none()).count()
    }

    /// Grounded / checked; 1.0 when nothing was checkable.
    pub fn value(&self) -> f64 {
        if self.checked.is_empty() { 1.0 } else { self.grounded() as f64 / self.checked.len() as f64 }
    }
}

impl fmt::Display for Score {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} ({} of {} claims grounded)", self.value(), self.grounded(), self.checked.len())
    }
}

/// Note kinds that are plans: what they name is still to be done, so the
/// files they mark new may be missing even after treatment began, and the
/// tests they name are still to be written.
pub const PLAN_KINDS: &[&str] = &["TREATMENT_PLAN", "REVISED_PLAN"];

/// Checks every claim of `bodies` against `facts`.
pub fn score<'a>(bodies: impl IntoIterator<Item = &'a str>, facts: &Facts<'_>) -> Score {
    score_notes(bodies.into_iter().map(|b| ("", b)), facts)
}

/// Checks every claim of the `(kind, body)` notes against `facts`; in a
/// plan ([`PLAN_KINDS`]) a path marked new need not exist yet and tests
/// are not looked for.
pub fn score_notes<'a>(notes: impl IntoIterator<Item = (&'a str, &'a str)>, facts: &Facts<'_>) -> Score {
    let claims: Vec<(Claim, bool)> = {
        let mut seen = HashSet::new();
        notes
            .into_iter()
            .flat_map(|(kind, body)| {
                let plan = PLAN_KINDS.contains(&kind);
                extract_claims(body).into_iter().map(move |c| (c, plan))
            })
            .filter(|(c, _)| seen.insert((c.kind, c.text.clone())))
            // A plan names tests it will write; before treatment so does any note.
            .filter(|(c, plan)| c.kind != ClaimKind::Test || (facts.after_treatment && !plan))
            .collect()
    };
    let mut reader = facts.tree.reader();
    // One pass over the tree for every test named without its file.
    let words: Vec<&str> = {
        let mut w: Vec<&str> = claims
            .iter()
            .filter(|(c, _)| c.kind == ClaimKind::Test && c.path.is_none())
            .map(|(c, _)| c.test_identifier())
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    let everywhere = reader.search(&words, None);
    let mut score = Score::default();
    for (claim, in_plan) in claims {
        let verdict = match claim.kind {
            ClaimKind::Precedent => match facts.precedents.contains(&claim.text) {
                true => Verdict::Grounded,
                false => Verdict::Ungrounded("is not in the precedent log".into()),
            },
            ClaimKind::Test => check_test(&claim, facts.tree, &mut reader, &everywhere),
            ClaimKind::Path => check_path(&claim, in_plan, facts),
            ClaimKind::LineRef => check_lines(&claim, facts.tree, &mut reader),
        };
        match verdict {
            Verdict::Grounded => score.checked.push(Checked { claim, problem: None }),
            Verdict::Ungrounded(why) => score.checked.push(Checked { claim, problem: Some(why) }),
            Verdict::Unknowable(why) => score.unchecked.push(Unchecked { claim, why }),
            Verdict::Dropped => {}
        }
    }
    score
}

/// What to do with a run after scoring it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    /// Invalid: run the stage once more.
    Rerun,
    /// Invalid again: send the patient to the chiefs.
    Escalate,
}

/// Pure: `earlier_invalid` counts invalid runs of this stage in this visit
/// (see [`earlier_invalid`]).
pub fn decide(score: f64, threshold: f64, earlier_invalid: u32) -> Decision {
    if score >= threshold {
        Decision::Accept
    } else if earlier_invalid == 0 {
        Decision::Rerun
    } else {
        Decision::Escalate
    }
}

const INVALID: &str = "verdict: invalid";

/// Invalid GROUNDEDNESS notes of `stage` written at or after `since` (the
/// time its label was applied).
pub fn earlier_invalid(notes: &[Note], stage: &str, since: DateTime<Utc>) -> u32 {
    notes
        .iter()
        .filter(|n| n.kind == NoteKind::Groundedness && n.meta.stage == stage && n.meta.at >= since)
        .filter(|n| n.body.lines().any(|l| l.trim() == INVALID))
        .count() as u32
}

/// When the patient's current visit to its stage began: the latest OUTCOME
/// in the chart (the one that moved it here), or the beginning of time.
pub fn visit_start(notes: &[Note]) -> DateTime<Utc> {
    notes.iter().filter(|n| n.kind == NoteKind::Outcome).map(|n| n.meta.at).max().unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The GROUNDEDNESS note for the chart: the score, the verdict, every
/// claim that did not hold and the claims that could not be checked.
pub fn groundedness_note(score: &Score, threshold: f64, stage: &str, run: &str, at: DateTime<Utc>) -> Note {
    const SHOW: usize = 25;
    let valid = score.value() >= threshold;
    let mut body = format!(
        "score: {:.2}\nclaims: {}\ngrounded: {}\nnot checkable: {}\nthreshold: {threshold:.2}\nverdict: {}\n",
        score.value(),
        score.checked.len(),
        score.grounded(),
        score.unchecked.len(),
        if valid { "valid" } else { "invalid" }
    );
    let failed: Vec<(&Claim, &str)> =
        score.checked.iter().filter_map(|c| Some((&c.claim, c.problem.as_deref()?))).collect();
    let unchecked: Vec<(&Claim, &str)> = score.unchecked.iter().map(|u| (&u.claim, u.why.as_str())).collect();
    for (title, list) in [("Not grounded", failed), ("Not checkable here (not counted)", unchecked)] {
        if list.is_empty() {
            continue;
        }
        body.push_str(&format!("\n{title}:\n"));
        for (claim, why) in list.iter().take(SHOW) {
            body.push_str(&format!("- `{}` {why}\n", claim.text));
        }
        if list.len() > SHOW {
            body.push_str(&format!("- and {} more\n", list.len() - SHOW));
        }
    }
    Note { kind: NoteKind::Groundedness, meta: NoteMeta::engine(run, stage, at), body }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worktree with one commit of `files`.
    fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let git = git2::Repository::init(dir.path()).unwrap();
        for (path, text) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        let mut index = git.index().unwrap();
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
        let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
        let who = git2::Signature::new("t", "t@t.invalid", &git2::Time::new(0, 0)).unwrap();
        git.commit(Some("HEAD"), &who, &who, "start", &tree, &[]).unwrap();
        dir
    }

    fn problems(s: &Score) -> Vec<(String, bool)> {
        s.checked.iter().map(|c| (c.claim.text.clone(), c.problem.is_some())).collect()
    }

    #[test]
    fn a_path_marked_new_may_be_missing_in_a_plan_but_an_unmarked_one_may_not() {
        let dir = repo(&[("CHANGELOG.md", "# Changelog\n")]);
        let tree = Tree::worktree(dir.path()).unwrap();
        let precedents = HashSet::new();
        let plan = "## Files to change\n- `src/audit.rs` (new): the audit writer.\n- `src/export.rs`\n\
                    - `CHANGELOG.md`: note the fix.\n";
        let expected = vec![
            ("src/audit.rs".to_string(), false),
            ("src/export.rs".to_string(), true),
            ("CHANGELOG.md".to_string(), false),
        ];
        // Before treatment, as a plan or as any note: `(new)` marks a file to create.
        let before = Facts { tree: &tree, precedents: &precedents, after_treatment: false };
        assert!(extract_claims(plan)[0].planned_new && !extract_claims(plan)[1].planned_new);
        assert_eq!(problems(&score([plan], &before)), expected);
        assert_eq!(problems(&score_notes([("TREATMENT_PLAN", plan)], &before)), expected);
        // A plan rewritten during treatment still names files to create.
        let during = Facts { after_treatment: true, ..before };
        assert_eq!(problems(&score_notes([("REVISED_PLAN", plan)], &during)), expected);
        // A treatment note after treatment claims the new file exists by now.
        let note = "## Treatment\n- `src/audit.rs` (new): the audit writer.\n";
        let s = score_notes([("TREATMENT_NOTE", note)], &during);
        assert_eq!(problems(&s), vec![("src/audit.rs".to_string(), true)]);
        assert_eq!(s.checked[0].problem.as_deref(), Some("does not exist in the worktree"));
    }

    #[test]
    fn what_the_agent_left_counts_and_what_git_ignores_is_not_checkable() {
        let dir = repo(&[(".gitignore", "/build/\n"), ("src/lib.rs", "fn a() {}\n"), ("src/gone.rs", "x\n")]);
        std::fs::write(dir.path().join("src/new.rs"), "fn b() {}\nfn c() {}\n#[test]\nfn left_behind() {}\n").unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "fn a() {}\nfn a2() {}\n").unwrap();
        std::fs::remove_file(dir.path().join("src/gone.rs")).unwrap();
        std::fs::create_dir_all(dir.path().join("build")).unwrap();
        std::fs::write(dir.path().join("build/out.txt"), "built\n").unwrap();
        let tree = Tree::worktree(dir.path()).unwrap();
        let precedents = HashSet::new();
        let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };
        let note = "Wrote `src/new.rs:4`, changed `src/lib.rs:2`, `src/gone.rs` is still used, see `build/out.txt`.\n\
                    ## Tests\n- `left_behind`\n";
        let s = score([note], &facts);
        assert_eq!(
            problems(&s),
            vec![
                ("src/new.rs:4".to_string(), false),
                ("src/lib.rs:2".to_string(), false),
                ("src/gone.rs".to_string(), true),
                ("left_behind".to_string(), false),
            ]
        );
        assert_eq!(s.unchecked.len(), 1, "{s:?}");
        assert!(s.unchecked[0].why.contains("ignored by git"), "{s:?}");
        // The same claims against the commit alone: what was left is not in it.
        let head = Tree::commit(dir.path(), "HEAD").unwrap();
        let s = score([note], &Facts { tree: &head, ..facts });
        assert_eq!(
            problems(&s),
            vec![
                ("src/new.rs:4".to_string(), true),
                ("src/lib.rs:2".to_string(), true),
                ("src/gone.rs".to_string(), false),
                ("left_behind".to_string(), true),
            ]
        );
        assert!(s.unchecked[0].why.contains("`build/`, a folder of installed, built or git's own files"), "{s:?}");
        assert!(s.checked[0].problem.as_deref().unwrap().starts_with("does not exist in commit "), "{s:?}");
    }

    #[test]
    fn columns_bare_names_and_absolute_paths() {
        let dir = repo(&[("crates/a/src/lib.rs", "fn a() {}\n\tlet x = 1;\n")]);
        let tree = Tree::worktree(dir.path()).unwrap();
        let precedents = HashSet::new();
        let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };
        let abs = format!("{}/crates/a/src/lib.rs:1", dir.path().display());
        let note = format!(
            "`lib.rs:2:9` `src/lib.rs:1:10` `crates/a/src/lib.rs:2:40` `main.rs` {abs} /usr/lib/x.rs:3 `lib.rs:0`"
        );
        let s = score([note.as_str()], &facts);
        assert_eq!(
            problems(&s),
            vec![
                ("lib.rs:2:9".to_string(), false),
                ("src/lib.rs:1:10".to_string(), false),
                ("crates/a/src/lib.rs:2:40".to_string(), true),
                ("main.rs".to_string(), true),
                ("lib.rs:0".to_string(), true),
                (abs, false),
            ]
        );
    }

    #[test]
    fn the_decision_reruns_once_then_escalates() {
        assert_eq!(decide(0.9, 0.8, 0), Decision::Accept);
        assert_eq!(decide(0.5, 0.8, 0), Decision::Rerun);
        assert_eq!(decide(0.5, 0.8, 1), Decision::Escalate);
        assert_eq!(decide(0.0, 0.0, 5), Decision::Accept, "threshold 0 turns the rule off");
    }
}
