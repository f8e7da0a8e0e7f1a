//! Never flail: a stuck agent hands over with an I-PASS handoff, and the
//! receiver reads it back before doing anything else.
//!
//! - Every IPASS_HANDOFF has the five I-PASS sections, each non-empty.
//! - The receiving run is the next run of any stage after a run whose
//!   accepted outcome was a handoff (it declared `stuck`, or wrote an
//!   IPASS_HANDOFF). Its FIRST note must be an IPASS_READBACK that restates
//!   the handoff under the same five headings, each non-empty, and is not
//!   a copy (the whole handoff, or more than two of its sections word for
//!   word).

use super::{Refusal, Route, RunInput, Verdict, has_substance, last_accepted_outcome, list, missing_sections};
use crate::chart::{DraftNote, Note, NoteKind};

pub const NAME: &str = "handoff";

/// The I-PASS sections, in order.
pub const IPASS_SECTIONS: &[&str] = &[
    "Illness severity",
    "Patient summary",
    "Action list",
    "Situation awareness and contingency",
    "Synthesis by receiver",
];

/// The outcome of a run that hands over.
pub const STUCK: &str = "stuck";

/// The handoff the next run must read back, if one is pending: the
/// IPASS_HANDOFF of the run whose outcome is the latest accepted one.
pub fn pending_handoff(chart: &[Note]) -> Option<&Note> {
    let last = last_accepted_outcome(chart)?;
    let run = &last.meta.run;
    let handoff = chart.iter().rev().find(|n| n.kind == NoteKind::IpassHandoff && &n.meta.run == run);
    match handoff {
        Some(h) => Some(h),
        // Declared stuck without a handoff note (an older chart): the read-back
        // is still owed, against the latest handoff if any.
        None if last.body.trim() == STUCK => {
            Some(chart.iter().rev().find(|n| n.kind == NoteKind::IpassHandoff).unwrap_or(last))
        }
        None => None,
    }
}

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// The I-PASS sections a read-back copies word for word from the handoff.
fn copied_sections(readback: &str, handoff: &str) -> Vec<&'static str> {
    let given = super::sections(handoff);
    let back = super::sections(readback);
    let find = |all: &[super::Section<'_>], want: &str| {
        all.iter().find(|s| s.heading.eq_ignore_ascii_case(want)).map(|s| normalise(&s.content))
    };
    IPASS_SECTIONS
        .iter()
        .copied()
        .filter(|want| matches!((find(&back, want), find(&given, want)), (Some(a), Some(b)) if !b.is_empty() && a == b))
        .collect()
}

/// A read-back that copies more than this many sections is a copy.
const MAX_COPIED_SECTIONS: usize = 2;

/// What is wrong with a read-back of `handoff`, if anything.
fn readback_problem(readback: &DraftNote, handoff: &Note) -> Option<String> {
    let line = readback.line;
    if !has_substance(&readback.body) {
        return Some(format!("the IPASS_READBACK on line {line} is empty"));
    }
    if handoff.kind == NoteKind::IpassHandoff {
        let (copy, original) = (normalise(&readback.body), normalise(&handoff.body));
        let copied = copied_sections(&readback.body, &handoff.body);
        if copy == original || copy.contains(&original) || copied.len() > MAX_COPIED_SECTIONS {
            return Some(format!(
                "the IPASS_READBACK on line {line} copies the handoff of run `{}` instead of restating it \
                 (sections copied word for word: {})",
                handoff.meta.run,
                if copied.is_empty() { "all of it".to_string() } else { copied.join(", ") }
            ));
        }
    }
    let missing = missing_sections(&readback.body, IPASS_SECTIONS);
    (!missing.is_empty()).then(|| {
        format!("the IPASS_READBACK on line {line} does not restate every part of the handoff: {}", list(&missing))
    })
}

pub fn after(input: &RunInput<'_>) -> Verdict {
    let mut problems = Vec::new();
    let mut help = Vec::new();
    for note in input.notes.notes.iter().filter(|n| n.kind == NoteKind::IpassHandoff) {
        let missing = missing_sections(&note.body, IPASS_SECTIONS);
        if !missing.is_empty() {
            problems.push(format!("the IPASS_HANDOFF on line {}: {}", note.line, list(&missing)));
        }
    }
    if !problems.is_empty() {
        help.push(format!(
            "An I-PASS handoff needs non-empty sections {}.",
            IPASS_SECTIONS.iter().map(|s| format!("`## {s}`")).collect::<Vec<_>>().join(", ")
        ));
    }

    if let Some(handoff) = pending_handoff(input.chart) {
        let from = &handoff.meta.run;
        match input.notes.notes.first() {
            None => problems.push(format!("this run receives the handoff of run `{from}` but wrote no notes")),
            Some(first) if first.kind != NoteKind::IpassReadback => problems.push(format!(
                "this run receives the handoff of run `{from}`, but its first note is {} (line {}), not IPASS_READBACK",
                first.kind, first.line
            )),
            Some(first) => problems.extend(readback_problem(first, handoff)),
        }
        if problems.iter().any(|p| p.contains("IPASS_READBACK") || p.contains("receives the handoff")) {
            help.push(
                "Begin with an IPASS_READBACK that restates the handoff in your own words under the same five \
                 headings (Illness severity, Patient summary, Action list, Situation awareness and contingency, \
                 Synthesis by receiver), then act."
                    .to_string(),
            );
        }
    }

    if problems.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(NAME, format!("{}.", problems.join("; ")), help.join(" "), Route::Stay))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::chart::AgentNotes;
    use crate::precedent::PrecedentLog;

    fn check(stage: &str, chart: &[Note], notes: &AgentNotes) -> Verdict {
        let config = config();
        let log = PrecedentLog::default();
        after(&RunInput {
            config: &config,
            stage: config.stage(stage).unwrap(),
            run: "r9",
            chart,
            notes,
            precedents: &log,
            depth: 0,
        })
    }

    const READBACK: &str = "## Illness severity\nWatcher, stable.\n## Patient summary\nOnly CI fails the cache test.\n\
        ## Action list\nI rerun it with debug logs.\n## Situation awareness and contingency\nEmulator may be down.\n\
        ## Synthesis by receiver\nConfirmed: CI only.\n## What I will do\nResume.";

    fn stuck_chart() -> Vec<Note> {
        vec![note("IPASS_HANDOFF", "r1", "treat", "fellow", HANDOFF), outcome("r1", "treat", "stuck")]
    }

    #[test]
    fn a_complete_handoff_passes_and_an_incomplete_one_names_the_gaps() {
        check("treat", &[], &agent(&[("IPASS_HANDOFF", HANDOFF)], &["stuck"])).unwrap();
        let partial = HANDOFF.replace("## Action list\n- run with RUST_LOG=debug\n", "## Action list\n\n");
        let partial = partial.replace("## Synthesis by receiver\nReceiver restates before acting.\n", "");
        let err = check("treat", &[], &agent(&[("IPASS_HANDOFF", &partial)], &["stuck"])).unwrap_err();
        assert_eq!(err.route, Route::Stay);
        assert!(err.reason.contains("`## Action list` is empty and `## Synthesis by receiver` is missing"), "{err}");
    }

    #[test]
    fn the_receiver_reads_back_first() {
        let chart = stuck_chart();
        let good = agent(&[("IPASS_READBACK", READBACK), ("ESCALATION", "x")], &["resume"]);
        check("consult", &chart, &good).unwrap();

        let late = agent(&[("ESCALATION", "x"), ("IPASS_READBACK", READBACK)], &["escalate"]);
        let err = check("consult", &chart, &late).unwrap_err();
        assert!(err.reason.contains("its first note is ESCALATION (line 1), not IPASS_READBACK"), "{err}");

        let none = agent(&[], &["resume"]);
        assert!(check("consult", &chart, &none).unwrap_err().reason.contains("wrote no notes"));
    }

    #[test]
    fn a_copied_or_empty_read_back_is_not_a_read_back() {
        let chart = stuck_chart();
        let copy = agent(&[("IPASS_READBACK", &format!("Read back:\n{HANDOFF}"))], &["resume"]);
        assert!(check("consult", &chart, &copy).unwrap_err().reason.contains("copies the handoff of run `r1`"));
        let empty = agent(&[("IPASS_READBACK", "<!-- todo -->")], &["resume"]);
        assert!(check("consult", &chart, &empty).unwrap_err().reason.contains("is empty"));
        // Three sections pasted under the right headings, two restated: still a copy.
        let pasted = HANDOFF
            .replace("Cache test fails on CI only.", "Only CI fails it.")
            .replace("Receiver restates before acting.", "I confirm: CI only.");
        let err = check("consult", &chart, &agent(&[("IPASS_READBACK", &pasted)], &["resume"])).unwrap_err();
        assert!(err.reason.contains("Illness severity, Action list, Situation awareness and contingency"), "{err}");
        let partial = agent(&[("IPASS_READBACK", "Stable; I take over.")], &["resume"]);
        let err = check("consult", &chart, &partial).unwrap_err();
        assert!(
            err.reason.contains("does not restate every part of the handoff: `## Illness severity` is missing"),
            "{err}"
        );
    }

    #[test]
    fn any_stage_after_a_handoff_owes_the_read_back_until_one_is_accepted() {
        let mut chart = stuck_chart();
        // A person moved the patient straight to treat: still the receiver.
        let notes = agent(&[("TREATMENT_NOTE", "done")], &["treated"]);
        assert!(check("treat", &chart, &notes).is_err());
        // A refused receiving run does not settle it.
        chart.push(note("IPASS_READBACK", "r2", "consult", "review-attending", READBACK));
        chart.push(outcome("r2", "consult", "resume"));
        chart.push(note("REFUSAL", "r2", "consult", "engine", "Rule: x"));
        assert!(check("treat", &chart, &notes).is_err());
        // An accepted one does.
        chart.push(note("IPASS_READBACK", "r3", "consult", "review-attending", READBACK));
        chart.push(outcome("r3", "consult", "resume"));
        check("treat", &chart, &notes).unwrap();
    }
}
