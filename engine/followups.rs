//! Follow-ups become issues: work an agent found out of scope and wrote as a
//! `Follow-up: ...` line is filed as an issue of its own, labelled
//! `follow_ups.label` and never admitted (a person admits it or closes it).
//!
//! Filing is idempotent. Each follow-up has a stable key (a hash of the
//! patient and the follow-up's text); the chart records what was filed in a
//! FOLLOW_UP note, and the issue's first line is a marker naming patient and
//! key, trusted only on issues the engine wrote. A run that crashed between
//! filing and charting finds its issue by the marker; a re-run files nothing.
//!
//! The text is an agent's, so it is untrusted: it goes into the issue's body
//! inside a code fence (no mentions, links or markup act), and the title is
//! cut to one plain line.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use anyhow::Context;
use regex::Regex;
use sha2::{Digest, Sha256};
use tracing::info;

use crate::chart::{Note, NoteKind};
use crate::config::Config;
use crate::forge::{Forge, Issue, IssueNumber, NewIssue};

/// One follow-up an agent wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUp {
    pub key: String,
    pub text: String,
}

/// Longest follow-up text kept; the rest is cut with an ellipsis.
const MAX_TEXT: usize = 1_000;
/// Longest title, in characters.
const MAX_TITLE: usize = 80;

static LINE: LazyLock<Regex> = LazyLock::new(|| {
    // `Follow-up: x`, `- Follow-up: x`, `* **Follow-up:** x`, any case.
    Regex::new(r"(?i)^\s*(?:[-*+]\s+)?(?:\*\*)?follow-up:(?:\*\*)?\s*(.*?)\s*$").expect("follow-up regex")
});
static FILED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\(key `([0-9a-f]{16})`\)").expect("filed regex"));
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^<!-- ward-follow-up patient=([1-9][0-9]{0,11}) key=([0-9a-f]{16}) -->$").expect("marker regex")
});

/// The follow-ups in the notes agents wrote, in chart order, each once.
/// Lines inside code fences are examples, not follow-ups; `None.` is none.
pub fn collect(patient: IssueNumber, notes: &[Note]) -> Vec<FollowUp> {
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for note in notes.iter().filter(|n| !n.kind.engine_only()) {
        let mut fence: Option<&str> = None;
        for line in note.body.lines() {
            let trimmed = line.trim_start();
            let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
            match (fence, marker) {
                (None, Some(m)) => fence = Some(m),
                (Some(open), Some(m)) if open == m => fence = None,
                _ => {}
            }
            if fence.is_some() || marker.is_some() {
                continue;
            }
            let Some(text) = LINE.captures(line).map(|c| c[1].to_string()) else { continue };
            let text = shorten(&text.split_whitespace().collect::<Vec<_>>().join(" "), MAX_TEXT);
            let none = text.trim_end_matches('.').eq_ignore_ascii_case("none");
            if text.is_empty() || none {
                continue;
            }
            let key = key(patient, &text);
            if seen.insert(key.clone()) {
                found.push(FollowUp { key, text });
            }
        }
    }
    found
}

/// The stable key: the same text on the same patient is the same follow-up.
fn key(patient: IssueNumber, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(patient.0.to_string());
    h.update([0]);
    h.update(text.to_lowercase());
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Keys already filed, by the chart's FOLLOW_UP notes.
pub fn filed_keys(notes: &[Note]) -> BTreeSet<String> {
    crate::chart::of_kind(notes, NoteKind::FollowUp)
        .flat_map(|n| FILED.captures_iter(&n.body).map(|c| c[1].to_string()).collect::<Vec<_>>())
        .collect()
}

/// The issue a follow-up becomes.
pub fn new_issue(config: &Config, patient: IssueNumber, follow_up: &FollowUp) -> NewIssue {
    let title = format!("Follow-up of {patient}: {}", shorten(&plain(&follow_up.text), MAX_TITLE));
    let body = format!(
        "<!-- ward-follow-up patient={} key={} -->\n\
         An agent treating {patient} found this out of scope and wrote it as a follow-up:\n\n\
         {}\n\n\
         ward filed it and did not admit it: nothing runs until a person with the admission permission \
         applies `{}`. If it is not worth doing, close it.",
        patient.0,
        follow_up.key,
        crate::untrusted::fence(&follow_up.text, "text"),
        config.admission
    );
    NewIssue { title, body, labels: vec![config.follow_ups.label.clone()] }
}

/// The key of a follow-up issue the engine filed for `patient`, if `issue` is one.
fn trusted_key(issue: &Issue, patient: IssueNumber, engine: &crate::forge::EngineAccount) -> Option<String> {
    if !engine.is(&issue.author) {
        return None;
    }
    let caps = MARKER.captures(issue.body.lines().next()?)?;
    (caps[1].parse::<u64>().ok()? == patient.0).then(|| caps[2].to_string())
}

/// Files the follow-ups of `notes` (the patient's chart) not filed yet, up
/// to the per-patient limit, and returns the FOLLOW_UP note's body for
/// the chart, or `None` when nothing was filed. Costs no call when every
/// follow-up is already charted.
pub async fn file(
    forge: &dyn Forge,
    config: &Config,
    patient: IssueNumber,
    notes: &[Note],
) -> anyhow::Result<Option<String>> {
    if !config.follow_ups.file {
        return Ok(None);
    }
    let filed = filed_keys(notes);
    let room = config.follow_ups.max_per_patient.saturating_sub(filed.len());
    let due: Vec<FollowUp> =
        collect(patient, notes).into_iter().filter(|f| !filed.contains(&f.key)).take(room).collect();
    if due.is_empty() {
        return Ok(None);
    }
    // A crash between filing and charting left issues the chart doesn't name.
    let open = forge.open_issues_with_label(&config.follow_ups.label).await.with_context(|| {
        format!("could not list the `{}` issues to file the follow-ups of {patient}", config.follow_ups.label)
    })?;
    let mut lines = Vec::new();
    for f in &due {
        let existing = open.iter().find(|i| trusted_key(i, patient, forge.engine_account()).as_ref() == Some(&f.key));
        let number = match existing {
            Some(issue) => issue.number,
            None => {
                let issue = forge
                    .create_issue(new_issue(config, patient, f))
                    .await
                    .with_context(|| format!("could not file a follow-up of {patient}"))?;
                info!(patient = patient.0, follow_up = issue.number.0, "follow-up filed");
                issue.number
            }
        };
        lines.push(format!("- {number}: {} (key `{}`)", shorten(&plain(&f.text), MAX_TITLE), f.key));
    }
    Ok(Some(format!("Filed as issues, not admitted (a person admits or closes each):\n{}", lines.join("\n"))))
}

/// One line of printable text: control characters become spaces, and
/// backticks go so the chart's inline code stays closed.
fn plain(text: &str) -> String {
    text.chars().map(|c| if c.is_control() || c == '`' { ' ' } else { c }).collect::<String>().trim().to_string()
}

/// One line of at most `max` characters (not bytes), an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::NoteMeta;

    fn note(kind: NoteKind, body: &str) -> Note {
        let meta = NoteMeta { run: "r1".into(), stage: "treat".into(), role: "fellow".into(), at: chrono::Utc::now() };
        Note { kind, meta, body: body.into() }
    }

    #[test]
    fn follow_ups_are_read_from_agents_notes_once_each_and_not_from_fences_or_the_engines() {
        let notes = [
            note(
                NoteKind::TreatmentPlan,
                "## Open questions\nFollow-up: the parser   copies twice.\n- Follow-up: None.",
            ),
            note(
                NoteKind::TreatmentNote,
                "```\nFollow-up: an example in a fence\n```\n* **Follow-up:** rename `greet`\nfollow-up: The parser copies twice.",
            ),
            note(NoteKind::Refusal, "Follow-up: written by the engine"),
        ];
        let found = collect(IssueNumber(7), &notes);
        let texts: Vec<_> = found.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["the parser copies twice.", "rename `greet`"]);
        assert_ne!(found[0].key, found[1].key);
        assert_eq!(found[0].key, collect(IssueNumber(7), &notes)[0].key, "the key is stable");
        assert_ne!(found[0].key, collect(IssueNumber(8), &notes)[0].key, "and belongs to its patient");
    }

    #[test]
    fn the_filed_issue_fences_the_agents_text_and_names_its_patient_in_a_marker() {
        let config =
            Config::parse(include_str!("../.github/ward.yml"), std::path::Path::new(crate::config::CONFIG_PATH), None)
                .expect("shipped config is valid");
        let f =
            FollowUp { key: "0123456789abcdef".into(), text: "ping @octocat ``` `ward:admit` [x](http://e)".into() };
        let new = new_issue(&config, IssueNumber(7), &f);
        assert_eq!(new.labels, ["ward:follow-up"]);
        assert!(new.title.starts_with("Follow-up of #7: ping @octocat"), "{}", new.title);
        assert!(!new.title.contains('`'));
        let first = new.body.lines().next().unwrap();
        assert_eq!(first, "<!-- ward-follow-up patient=7 key=0123456789abcdef -->");
        assert!(new.body.contains("````text\nping @octocat"), "a fence longer than any run inside: {}", new.body);
        let engine = Issue {
            number: IssueNumber(9),
            title: new.title.clone(),
            body: new.body.clone(),
            author: "github-actions[bot]".into(),
            state: crate::forge::IssueState::Open,
            labels: new.labels.clone(),
        };
        assert_eq!(
            trusted_key(&engine, IssueNumber(7), &"github-actions[bot]".into()).as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(trusted_key(&engine, IssueNumber(8), &"github-actions[bot]".into()), None, "another patient's");
        let forged = Issue { author: "mallory".into(), ..engine };
        assert_eq!(
            trusted_key(&forged, IssueNumber(7), &"github-actions[bot]".into()),
            None,
            "a person's copy of the marker"
        );
    }

    #[test]
    fn filed_keys_come_from_follow_up_notes_only() {
        let notes = [
            note(
                NoteKind::FollowUp,
                "Filed as issues:\n- #9: x (key `0123456789abcdef`)\n- #10: y (key `fedcba9876543210`)",
            ),
            note(NoteKind::TreatmentNote, "(key `aaaaaaaaaaaaaaaa`)"),
        ];
        assert_eq!(filed_keys(&notes).into_iter().collect::<Vec<_>>(), ["0123456789abcdef", "fedcba9876543210"]);
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(shorten("ééé", 2), "éé…");
        assert_eq!(shorten("ab", 2), "ab");
        assert_eq!(plain("a\u{1b}[31mb\nc`"), "a [31mb c");
    }
}
