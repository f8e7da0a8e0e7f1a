//! Groundedness: scores a run's notes against reality. The claims a note
//! makes that can be checked are checked:
//!
//! - file paths it names exist in the worktree. A path on a line that marks
//!   the file as new (`(new)` after the path, as `skills/plan-format.md`
//!   asks, or words like "create `engine/x.rs`") may be missing before
//!   treatment, not after; in a plan (TREATMENT_PLAN, REVISED_PLAN) it may
//!   always be missing, since a plan names files treatment will create,
//!   even when it is rewritten in the middle of treatment;
//! - line references (`path:line`, `path:from-to`) are within the file;
//! - tests it names under a "Tests" heading exist after treatment;
//! - precedent ids it cites (`P-0007`) exist in the log.
//!
//! The score is grounded claims / claims (1.0 with no claims). Below
//! `departments.groundedness.threshold` the run is invalid: the stage reruns
//! once, then escalates ([`decide`]). The extraction and the decision are
//! pure; [`score`] reads the worktree.

use std::collections::HashSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use chrono::{DateTime, Utc};
use regex::Regex;

use crate::chart::{ENGINE_ROLE, Note, NoteKind, NoteMeta};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    Path,
    LineRef,
    Test,
    Precedent,
}

/// One checkable statement found in the notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub kind: ClaimKind,
    /// As written (`engine/chart.rs:40`, `P-0003`, `sweep_revives_once`).
    pub text: String,
    /// The path part, for paths and line references.
    pub path: Option<String>,
    pub lines: Option<(usize, usize)>,
    /// The note says the file is new (create/add/new on the same line).
    pub planned_new: bool,
}

const EXTENSIONS: &[&str] = &[
    "rs", "toml", "md", "yml", "yaml", "json", "jsonl", "lock", "py", "js", "ts", "tsx", "go", "c", "h", "cc", "cpp",
    "hpp", "java", "kt", "rb", "sh", "sql", "txt", "html", "css", "svg", "proto", "cfg", "ini",
];

fn path_token() -> Regex {
    Regex::new(r"^(?P<path>[A-Za-z0-9_./-]*[A-Za-z][A-Za-z0-9_./-]*\.(?P<ext>[A-Za-z0-9]{1,8}))(?::(?P<from>\d+)(?:-(?P<to>\d+))?)?$")
        .expect("path regex is valid")
}

fn precedent_id() -> Regex {
    Regex::new(r"\bP-\d{4}\b").expect("precedent regex is valid")
}

fn test_name() -> Regex {
    Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$").expect("test regex is valid")
}

/// Finds the checkable claims in a note body. Pure.
pub fn extract_claims(text: &str) -> Vec<Claim> {
    let path_re = path_token();
    let test_re = test_name();
    let mut out: Vec<Claim> = Vec::new();
    let mut seen = HashSet::new();
    let mut in_tests = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            in_tests = trimmed.to_ascii_lowercase().contains("test");
            continue;
        }
        let lower = line.to_ascii_lowercase();
        let planned_new = ["new", "create", "creates", "add", "adds", "added"]
            .iter()
            .any(|w| lower.split(|c: char| !c.is_ascii_alphanumeric()).any(|t| t == *w));
        // Backticked spans first: they are what notes use for code.
        let ticked: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        let words = line.split(|c: char| c.is_whitespace() || "`'\"()[]{}<>,;".contains(c));
        for raw in words.chain(ticked.iter().copied()) {
            let token = raw.trim_end_matches(['.', ':', '!', '?']);
            if token.is_empty() || token.contains("://") || token.starts_with("www.") {
                continue;
            }
            if let Some(c) = path_re.captures(token) {
                let path = c["path"].to_string();
                let is_known_ext = EXTENSIONS.contains(&c["ext"].to_ascii_lowercase().as_str());
                let was_ticked = ticked.contains(&raw);
                // A known extension, and a slash or code formatting: prose like
                // `e.g./i.e.` or `v1.2` is not a path.
                if !is_known_ext || !(path.contains('/') || was_ticked) {
                    continue;
                }
                let lines = c.name("from").map(|f| {
                    let from: usize = f.as_str().parse().unwrap_or(0);
                    let to = c.name("to").and_then(|t| t.as_str().parse().ok()).unwrap_or(from);
                    (from, to)
                });
                let kind = if lines.is_some() { ClaimKind::LineRef } else { ClaimKind::Path };
                if seen.insert((kind, token.to_string())) {
                    out.push(Claim { kind, text: token.to_string(), path: Some(path), lines, planned_new });
                }
                continue;
            }
            if in_tests
                && ticked.contains(&raw)
                && test_re.is_match(token)
                && token.len() > 3
                && seen.insert((ClaimKind::Test, token.to_string()))
            {
                out.push(Claim { kind: ClaimKind::Test, text: token.into(), path: None, lines: None, planned_new });
            }
        }
        for m in precedent_id().find_iter(line) {
            if seen.insert((ClaimKind::Precedent, m.as_str().to_string())) {
                out.push(Claim {
                    kind: ClaimKind::Precedent,
                    text: m.as_str().into(),
                    path: None,
                    lines: None,
                    planned_new: false,
                });
            }
        }
    }
    out
}

/// What the claims are checked against.
pub struct Facts<'a> {
    pub worktree: &'a Path,
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

#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub checked: Vec<Checked>,
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

/// A relative path that stays inside the worktree, or why not.
fn inside(worktree: &Path, path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path.trim_start_matches("./"));
    if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir | Component::Prefix(_))) {
        return Err("points outside the worktree".into());
    }
    Ok(worktree.join(p))
}

/// Source files of the worktree (no `.git`, `target`, `node_modules`), for
/// finding named tests.
fn source_texts(root: &Path) -> Vec<String> {
    const MAX_FILES: usize = 20_000;
    const MAX_BYTES: u64 = 1 << 20;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if !matches!(name.as_ref(), ".git" | "target" | "node_modules") {
                    stack.push(e.path());
                }
            } else if ft.is_file() && e.metadata().is_ok_and(|m| m.len() <= MAX_BYTES) {
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    out.push(text);
                }
                if out.len() >= MAX_FILES {
                    return out;
                }
            }
        }
    }
    out
}

/// Note kinds that are plans: what they name is still to be done, so the
/// files they mark new may be missing even after treatment began.
pub const PLAN_KINDS: &[&str] = &["TREATMENT_PLAN", "REVISED_PLAN"];

/// Checks every claim of `bodies` against `facts`.
pub fn score<'a>(bodies: impl IntoIterator<Item = &'a str>, facts: &Facts<'_>) -> Score {
    score_notes(bodies.into_iter().map(|b| ("", b)), facts)
}

/// Checks every claim of the `(kind, body)` notes against `facts`; in a
/// plan ([`PLAN_KINDS`]) a path marked new need not exist yet.
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
            .collect()
    };
    let needs_sources = facts.after_treatment && claims.iter().any(|(c, _)| c.kind == ClaimKind::Test);
    let sources = if needs_sources { source_texts(facts.worktree) } else { Vec::new() };
    let mut checked = Vec::new();
    for (claim, in_plan) in claims {
        let problem = match claim.kind {
            ClaimKind::Precedent => {
                (!facts.precedents.contains(&claim.text)).then(|| "is not in the precedent log".to_string())
            }
            ClaimKind::Test => {
                if !facts.after_treatment {
                    continue; // a plan names tests it will write
                }
                let name = claim.text.rsplit("::").next().unwrap_or(&claim.text);
                let word = Regex::new(&format!(r"\b{}\b", regex::escape(name))).expect("escaped name is a regex");
                (!sources.iter().any(|s| word.is_match(s))).then(|| "is not found in any file of the worktree".into())
            }
            ClaimKind::Path | ClaimKind::LineRef => {
                let path = claim.path.as_deref().unwrap_or_default();
                match inside(facts.worktree, path) {
                    Err(e) => Some(e),
                    Ok(full) if !full.exists() => {
                        if claim.planned_new && (in_plan || !facts.after_treatment) && claim.kind == ClaimKind::Path {
                            None
                        } else {
                            Some("does not exist in the worktree".into())
                        }
                    }
                    Ok(full) => match claim.lines {
                        None => None,
                        Some((from, to)) => match std::fs::read_to_string(&full) {
                            Err(_) => Some("is not a readable text file".into()),
                            Ok(text) => {
                                let count = text.lines().count();
                                if from == 0 || to < from || to > count {
                                    Some(format!("is out of range: the file has {count} lines"))
                                } else {
                                    None
                                }
                            }
                        },
                    },
                }
            }
        };
        checked.push(Checked { claim, problem });
    }
    Score { checked }
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

/// The GROUNDEDNESS note for the chart: the score, the verdict, and every
/// claim that did not hold.
pub fn groundedness_note(score: &Score, threshold: f64, stage: &str, run: &str, at: DateTime<Utc>) -> Note {
    const SHOW: usize = 25;
    let valid = score.value() >= threshold;
    let mut body = format!(
        "score: {:.2}\nclaims: {}\ngrounded: {}\nthreshold: {threshold:.2}\nverdict: {}\n",
        score.value(),
        score.checked.len(),
        score.grounded(),
        if valid { "valid" } else { "invalid" }
    );
    let failed: Vec<&Checked> = score.checked.iter().filter(|c| c.problem.is_some()).collect();
    if !failed.is_empty() {
        body.push_str("\nNot grounded:\n");
        for c in failed.iter().take(SHOW) {
            body.push_str(&format!("- `{}` {}\n", c.claim.text, c.problem.as_deref().unwrap_or_default()));
        }
        if failed.len() > SHOW {
            body.push_str(&format!("- and {} more\n", failed.len() - SHOW));
        }
    }
    Note {
        kind: NoteKind::Groundedness,
        meta: NoteMeta { run: run.into(), stage: stage.into(), role: ENGINE_ROLE.into(), at },
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_found_and_prose_is_not() {
        let text = "## Diagnosis\nThe bug is in `engine/chart.rs:40-42` and engine/forge/local.rs.\n\
                    See https://example.com/a/b.rs, e.g./i.e. v1.2, and `Cargo.toml`. Per P-0003.\n\
                    Create `engine/new.rs`.\n## Tests\n- `sweep_revives_once`\n- `a`\n";
        let claims = extract_claims(text);
        let texts: Vec<&str> = claims.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "engine/chart.rs:40-42",
                "engine/forge/local.rs",
                "Cargo.toml",
                "P-0003",
                "engine/new.rs",
                "sweep_revives_once"
            ]
        );
        assert_eq!(claims[0].lines, Some((40, 42)));
        assert!(claims[4].planned_new);
    }

    #[test]
    fn a_path_marked_new_may_be_missing_in_a_plan_but_an_unmarked_one_may_not() {
        let tree = tempfile::tempdir().unwrap();
        std::fs::write(tree.path().join("CHANGELOG.md"), "# Changelog\n").unwrap();
        let precedents = HashSet::new();
        let plan = "## Files to change\n- `src/audit.rs` (new): the audit writer.\n- `src/export.rs`\n\
                    - `CHANGELOG.md`: note the fix.\n";
        let problems = |s: &Score| -> Vec<(String, bool)> {
            s.checked.iter().map(|c| (c.claim.text.clone(), c.problem.is_some())).collect()
        };
        let expected = vec![
            ("src/audit.rs".to_string(), false),
            ("src/export.rs".to_string(), true),
            ("CHANGELOG.md".to_string(), false),
        ];
        // Before treatment, as a plan or as any note: `(new)` marks a file to create.
        let before = Facts { worktree: tree.path(), precedents: &precedents, after_treatment: false };
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
    fn the_decision_reruns_once_then_escalates() {
        assert_eq!(decide(0.9, 0.8, 0), Decision::Accept);
        assert_eq!(decide(0.5, 0.8, 0), Decision::Rerun);
        assert_eq!(decide(0.5, 0.8, 1), Decision::Escalate);
        assert_eq!(decide(0.0, 0.0, 5), Decision::Accept, "threshold 0 turns the rule off");
    }
}
