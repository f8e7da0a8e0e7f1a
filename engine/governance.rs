//! The hospital's own changes are governed: every run records the version
//! of the pipeline it ran under, and the safety report breaks outcomes,
//! send-backs, stalls and cost down by that version, so a prompt change
//! that made things worse shows up beside the one before it and can be
//! reverted.
//!
//! The pipeline version is a hash of what decides an agent's behaviour:
//! `.github/ward.yml`, `roles/` and `skills/` (where ward.yml's `paths`
//! puts them), by content. A commit that
//! touches nothing of them keeps the version; one that changes a word of a
//! role changes it. It is written into every run's ADMISSION note; the
//! other notes of a run carry the run id, so each note has a version.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::chart::{Note, NoteKind};

/// The version charts written before versions existed are counted under.
pub const UNKNOWN: &str = "unknown";

/// What the ADMISSION note says, and the report reads back.
static LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^Pipeline version: `([0-9a-f]{12})`\.?$").expect("version regex"));

/// The version an ADMISSION note's body records, if it records one.
pub fn recorded_version(body: &str) -> Option<String> {
    LINE.captures(body).map(|c| c[1].to_string())
}

/// The admission note's line for `version`.
pub fn admission_line(version: &str) -> String {
    format!("Pipeline version: `{version}`.")
}

/// The version of the pipeline under `root`: the first 12 hex digits of a
/// SHA-256 over each file's path and content, in path order. A file that
/// cannot be read counts by its path and the error's kind, so the version
/// still changes when it does.
pub fn version(root: &Path) -> String {
    version_with(root, &crate::config::PathsConfig::read(root))
}

/// [`version`] with the roles and skills where `paths` puts them.
pub fn version_with(root: &Path, paths: &crate::config::PathsConfig) -> String {
    let mut files = vec![".github/ward.yml".to_string()];
    for dir in [paths.roles_dir(), paths.skills_dir()] {
        collect(root, Path::new(&dir), &mut files);
    }
    files.sort();
    let mut h = Sha256::new();
    for rel in &files {
        h.update(rel.as_bytes());
        h.update([0]);
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => h.update(&bytes),
            Err(e) => h.update(format!("unreadable: {:?}", e.kind()).as_bytes()),
        }
        h.update([0]);
    }
    h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect()
}

fn collect(root: &Path, rel: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else { return };
    for entry in entries.flatten() {
        let path = rel.join(entry.file_name());
        match entry.file_type() {
            Ok(t) if t.is_dir() => collect(root, &path, out),
            Ok(t) if t.is_file() => out.push(path.to_string_lossy().replace('\\', "/")),
            _ => {}
        }
    }
}

/// What one pipeline version did in the report's window.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct VersionStats {
    pub version: String,
    /// When a run under it was first and last admitted.
    pub first_seen: Option<chrono::DateTime<chrono::Utc>>,
    pub last_seen: Option<chrono::DateTime<chrono::Utc>>,
    pub runs: usize,
    pub outcomes: BTreeMap<String, usize>,
    pub send_backs: usize,
    /// Stalled runs the charge nurse re-triggered.
    pub stalls: usize,
    pub cost: f64,
}

/// The notes of every patient, grouped by the pipeline version of the run
/// they belong to (a SWEEP note by the version the patient last ran
/// under), oldest version first. `send_back` says whether (stage, outcome)
/// sends a patient back; `cost` reads a COST note.
pub fn by_version<'a>(
    charts: impl IntoIterator<Item = &'a [Note]>,
    in_window: impl Fn(&Note) -> bool,
    send_back: impl Fn(&str, &str) -> bool,
    cost: impl Fn(&Note) -> f64,
) -> Vec<VersionStats> {
    let mut stats: BTreeMap<String, VersionStats> = BTreeMap::new();
    for notes in charts {
        let mut of_run: BTreeMap<&str, String> = BTreeMap::new();
        let mut latest = UNKNOWN.to_string();
        for n in notes {
            if n.kind == NoteKind::Admission {
                latest = LINE.captures(&n.body).map_or(UNKNOWN.to_string(), |c| c[1].to_string());
                of_run.insert(&n.meta.run, latest.clone());
            }
            let counted = matches!(n.kind, NoteKind::Admission | NoteKind::Outcome | NoteKind::Sweep | NoteKind::Cost);
            if !counted || !in_window(n) {
                continue;
            }
            let version = of_run.get(n.meta.run.as_str()).unwrap_or(&latest);
            let s = stats
                .entry(version.clone())
                .or_insert_with(|| VersionStats { version: version.clone(), ..VersionStats::default() });
            match n.kind {
                NoteKind::Admission => {
                    s.runs += 1;
                    s.first_seen = Some(s.first_seen.map_or(n.meta.at, |t| t.min(n.meta.at)));
                    s.last_seen = Some(s.last_seen.map_or(n.meta.at, |t| t.max(n.meta.at)));
                }
                NoteKind::Outcome => {
                    let outcome = n.body.trim();
                    *s.outcomes.entry(outcome.to_string()).or_insert(0) += 1;
                    s.send_backs += usize::from(send_back(&n.meta.stage, outcome));
                }
                NoteKind::Sweep => s.stalls += 1,
                NoteKind::Cost => s.cost += cost(n),
                _ => {}
            }
        }
    }
    let mut out: Vec<VersionStats> = stats.into_values().collect();
    out.sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then_with(|| a.version.cmp(&b.version)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::NoteMeta;
    use chrono::{TimeZone, Utc};

    fn note(kind: NoteKind, run: &str, stage: &str, hour: u32, body: &str) -> Note {
        let at = Utc.with_ymd_and_hms(2026, 11, 30, hour, 0, 0).unwrap();
        Note { kind, meta: NoteMeta { run: run.into(), stage: stage.into(), role: "x".into(), at }, body: body.into() }
    }

    #[test]
    fn the_version_changes_with_a_role_and_not_with_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".github")).unwrap();
        std::fs::create_dir_all(root.join("roles/nested")).unwrap();
        std::fs::write(root.join(".github/ward.yml"), "version: 1\n").unwrap();
        std::fs::write(root.join("roles/fellow.md"), "Fix it.\n").unwrap();
        let first = version(root);
        assert_eq!(first.len(), 12);
        std::fs::write(root.join("src.rs"), "fn main() {}\n").unwrap();
        assert_eq!(version(root), first, "code is not the pipeline");
        std::fs::write(root.join("roles/nested/extra.md"), "Be brief.\n").unwrap();
        let second = version(root);
        assert_ne!(second, first, "a new role file is a new pipeline");
        std::fs::write(root.join("roles/fellow.md"), "Fix it well.\n").unwrap();
        assert_ne!(version(root), second, "so is a changed word");
    }

    #[test]
    fn the_version_follows_the_roles_and_skills_where_ward_yml_puts_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in [".github", ".github/ward/skills", "roles"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(
            root.join(".github/ward.yml"),
            "version: 1\npaths:\n  roles: .github/ward/roles/\n  skills: .github/ward/skills/\n",
        )
        .unwrap();
        std::fs::write(root.join(".github/ward/skills/x.md"), "Be brief.\n").unwrap();
        let first = version(root);
        std::fs::write(root.join("roles/site.yml"), "- hosts: all\n").unwrap();
        assert_eq!(version(root), first, "the repository's own roles/ is not the pipeline once ward's live elsewhere");
        std::fs::write(root.join(".github/ward/skills/x.md"), "Be briefer.\n").unwrap();
        assert_ne!(version(root), first, "a changed skill where ward.yml puts the skills is a new pipeline");
    }

    #[test]
    fn notes_count_under_the_version_their_run_was_admitted_with() {
        let (a, b) = ("aaaaaaaaaaaa", "bbbbbbbbbbbb");
        let chart = vec![
            note(NoteKind::Admission, "r1", "code-review", 1, &format!("Stage started.\n{}", admission_line(a))),
            note(NoteKind::Cost, "r1", "code-review", 1, "2.00"),
            note(NoteKind::Outcome, "r1", "code-review", 1, "request-changes"),
            note(NoteKind::Admission, "r2", "treat", 2, &format!("Stage started.\n{}", admission_line(b))),
            note(NoteKind::Sweep, "sweep-1", "treat", 3, "stalled"),
            note(NoteKind::Cost, "r1", "code-review", 4, "0.50"),
            note(NoteKind::Outcome, "r2", "treat", 4, "treated"),
        ];
        let old = vec![
            note(NoteKind::Admission, "r0", "admit", 0, "Stage started."),
            note(NoteKind::Outcome, "r0", "admit", 0, "ready"),
        ];
        let charts: Vec<&[Note]> = vec![&chart, &old];
        let stats = by_version(
            charts,
            |_| true,
            |stage, outcome| (stage, outcome) == ("code-review", "request-changes"),
            |n| n.body.parse().unwrap_or(0.0),
        );
        let names: Vec<&str> = stats.iter().map(|s| s.version.as_str()).collect();
        assert_eq!(names, [UNKNOWN, a, b], "oldest first; charts from before versions count as unknown");
        let (ua, ub) = (&stats[1], &stats[2]);
        assert_eq!((ua.runs, ua.send_backs, ua.stalls, ua.cost), (1, 1, 0, 2.5), "a late note of r1 stays with r1");
        assert_eq!((ub.runs, ub.send_backs, ub.stalls, ub.cost), (1, 0, 1, 0.0), "the sweep by the latest version");
        assert_eq!(ub.outcomes, BTreeMap::from([("treated".to_string(), 1)]));
    }
}
