//! Check precedent before bothering the chiefs.
//!
//! - Every `P-####` an agent cites, in any note, must exist in the log; an
//!   invented (or malformed) id invalidates the run.
//! - An ESCALATION (outcome `escalate`, or an ESCALATION note) is accepted
//!   only when the engine recorded a PRECEDENT_LOOKUP for this run and the
//!   note has its three sections: `## Question for the chiefs`,
//!   `## Precedents considered`, `## What was tried`.
//! - A precedent cited in the ESCALATION note applies unless it is set
//!   aside: under `## Precedents considered` as `P-####: why it does not
//!   apply` (the form `skills/precedent-first.md` teaches), or on any line
//!   that says `does not apply` / `not applicable`. A reason that says the
//!   precedent applies does not set it aside. A cited precedent that applies
//!   turns the escalation back: the stage runs again and follows it. With no
//!   precedent cited, `## Precedents considered` says why none applies.

use std::sync::LazyLock;

use regex::Regex;

use super::{Refusal, Route, RunInput, Verdict, list, missing_sections};
use crate::chart::NoteKind;
use crate::precedent::is_precedent_id;

pub const NAME: &str = "escalation";

pub const ESCALATION_SECTIONS: &[&str] = &["Question for the chiefs", "Precedents considered", "What was tried"];

/// The outcome that hands a patient to the chiefs.
pub const ESCALATE: &str = "escalate";

/// How many times in a row an escalation is turned back before the run is
/// held for a person instead (a stage that keeps escalating would loop).
pub const MAX_TURN_BACKS: usize = 2;

/// REFUSAL notes of this rule that turned a run back since the latest
/// accepted outcome.
fn turn_backs_since_last_outcome(chart: &[crate::chart::Note]) -> usize {
    let start = super::last_accepted_outcome(chart)
        .and_then(|last| chart.iter().rposition(|n| std::ptr::eq(n, last)))
        .map_or(0, |i| i + 1);
    chart[start..]
        .iter()
        .filter(|n| {
            n.kind == NoteKind::Refusal
                && n.body.starts_with(&format!("Rule: {NAME}\n"))
                && n.body.contains("stage runs again")
        })
        .count()
}

/// Phrases that mark a cited precedent as considered and set aside.
const NOT_APPLYING: &[&str] = &["does not apply", "doesn't apply", "not applicable", "does not cover"];

static CITATION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bP-\d{3,}\b").expect("citation regex is valid"));

/// Every precedent id cited in `text`, in order of first appearance.
pub fn citations(text: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for m in CITATION.find_iter(text) {
        if !out.contains(&m.as_str()) {
            out.push(m.as_str());
        }
    }
    out
}

/// True when `line` sets precedent `id` aside: it says so (`does not
/// apply`, ...), or, under `## Precedents considered`, it is the skill's
/// form `P-####: why it does not apply` with a reason that does not say
/// the precedent applies.
fn sets_aside(line: &str, id: &str, considered: bool) -> bool {
    let lower = line.to_lowercase();
    if NOT_APPLYING.iter().any(|p| lower.contains(p)) {
        return true;
    }
    if !considered {
        return false;
    }
    let Some(at) = line.find(id) else { return false };
    let rest = line[at + id.len()..].trim_start_matches(['`', '*', '_', ' ']);
    let Some(reason) = rest.strip_prefix(':').or_else(|| rest.strip_prefix(" -")).or_else(|| rest.strip_prefix('—'))
    else {
        return false;
    };
    let reason = reason.to_lowercase();
    let says_applies = reason.contains("applies") && !reason.contains("not apply") && !reason.contains("n't apply");
    super::has_substance(&reason) && !says_applies
}

/// The ids cited in an ESCALATION body that it never sets aside: each
/// cited precedent must be set aside on a line of `## Precedents
/// considered` (or with an explicit `does not apply` anywhere).
pub fn applying_citations(text: &str) -> Vec<&str> {
    let considered: Vec<String> = super::sections(text)
        .into_iter()
        .filter(|s| s.heading.eq_ignore_ascii_case("Precedents considered"))
        .map(|s| s.content)
        .collect();
    citations(text)
        .into_iter()
        .filter(|id| {
            let in_considered =
                considered.iter().flat_map(|c| c.lines()).filter(|l| l.contains(id)).any(|l| sets_aside(l, id, true));
            let elsewhere = text.lines().filter(|l| l.contains(id)).any(|l| sets_aside(l, id, false));
            !(in_considered || elsewhere)
        })
        .collect()
}

pub fn after(input: &RunInput<'_>) -> Verdict {
    // Citations anywhere must exist.
    let mut unknown: Vec<String> = Vec::new();
    for note in &input.notes.notes {
        for id in citations(&note.body) {
            if !is_precedent_id(id) {
                unknown.push(format!("`{id}` in the {} on line {} (ids look like `P-0001`)", note.kind, note.line));
            } else if input.precedents.get(id).is_none() {
                unknown.push(format!("`{id}` in the {} on line {}", note.kind, note.line));
            }
        }
    }
    if !unknown.is_empty() {
        return Err(Refusal::new(
            NAME,
            format!(
                "The run cites precedents that are not in the log: {} (the log holds {} entries).",
                list(&unknown),
                input.precedents.entries.len()
            ),
            format!(
                "Cite only precedents that exist in `{}`; never invent one.",
                input.config.precedents.log.display()
            ),
            Route::Stay,
        ));
    }

    let escalations: Vec<_> = input.notes.notes.iter().filter(|n| n.kind == NoteKind::Escalation).collect();
    if escalations.is_empty() && input.outcome() != Some(ESCALATE) {
        return Ok(());
    }
    let mut problems = Vec::new();
    let looked_up = input.chart.iter().any(|n| n.kind == NoteKind::PrecedentLookup && n.meta.run == input.run);
    if !looked_up {
        problems.push(format!("no PRECEDENT_LOOKUP was recorded for run `{}`", input.run));
    }
    for note in &escalations {
        let missing = missing_sections(&note.body, ESCALATION_SECTIONS);
        if !missing.is_empty() {
            problems.push(format!("the ESCALATION on line {}: {}", note.line, list(&missing)));
        }
    }
    if !problems.is_empty() {
        return Err(Refusal::new(
            NAME,
            format!("The escalation is not acceptable: {}.", problems.join("; ")),
            format!(
                "Read the precedents the engine found first, then escalate with non-empty sections {}.",
                ESCALATION_SECTIONS.iter().map(|s| format!("`## {s}`")).collect::<Vec<_>>().join(", ")
            ),
            Route::Stay,
        ));
    }

    let applying: Vec<&str> = escalations.iter().flat_map(|n| applying_citations(&n.body)).collect();
    if let Some(first) = applying.first().and_then(|id| input.precedents.get(id)) {
        let ids: Vec<String> = applying.iter().map(|id| format!("`{id}`")).collect();
        let earlier = turn_backs_since_last_outcome(input.chart);
        if earlier >= MAX_TURN_BACKS {
            return Err(Refusal::new(
                NAME,
                format!(
                    "The escalation cites {} as applying, and escalations of this patient were already turned back \
                     {earlier} times since its last accepted outcome.",
                    list(&ids)
                ),
                format!(
                    "A person decides: follow {} and move the patient on, or apply `ward:chief` by hand.",
                    first.id
                ),
                Route::Stay,
            ));
        }
        return Err(Refusal::new(
            NAME,
            format!(
                "The escalation cites {} without setting {} aside, so a precedent applies and the chiefs \
                 have already decided: {} ({}): {}",
                list(&ids),
                if ids.len() == 1 { "it" } else { "them" },
                first.id,
                first.date,
                first.decision.trim()
            ),
            format!(
                "Follow {} instead of escalating. If it truly does not apply, say so on the line that cites it \
                 (\"{} does not apply because ...\").",
                first.id, first.id
            ),
            Route::Rerun,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::testing::*;
    use super::*;
    use crate::chart::{AgentNotes, Note};
    use crate::precedent::PrecedentLog;

    const LOG: &str = "
- id: P-0001
  date: 2026-01-10
  chief: maria
  tags: [tests, flaky]
  question: A test fails one run in twenty. May the fellow delete it?
  decision: Never delete a flaky test. Quarantine it with an issue that names the owner.
";

    fn check(chart: &[Note], notes: &AgentNotes) -> Verdict {
        let config = config();
        let log = PrecedentLog::parse(LOG, Path::new("log.yaml")).unwrap();
        after(&RunInput {
            config: &config,
            stage: config.stage("diagnose").unwrap(),
            run: "r5",
            chart,
            notes,
            precedents: &log,
            depth: 0,
        })
    }

    fn lookup() -> Vec<Note> {
        vec![note("PRECEDENT_LOOKUP", "r5", "diagnose", "engine", "- P-0001")]
    }

    fn escalation(considered: &str) -> String {
        format!(
            "## Question for the chiefs\nMay we drop Python 3.8?\n\n## Precedents considered\n{considered}\n\n## What was tried\nRead the support policy.\n"
        )
    }

    #[test]
    fn an_escalation_that_sets_precedents_aside_is_accepted() {
        let none = escalation("None in the log is about supported versions.");
        check(&lookup(), &agent(&[("ESCALATION", &none)], &["escalate"])).unwrap();
        let aside = escalation("- P-0001 does not apply: it is about flaky tests.");
        check(&lookup(), &agent(&[("ESCALATION", &aside)], &["escalate"])).unwrap();
    }

    #[test]
    fn an_escalation_citing_a_real_precedent_that_applies_is_turned_back() {
        let cited = escalation("- P-0001 covers this: never delete a flaky test.");
        let err = check(&lookup(), &agent(&[("ESCALATION", &cited)], &["escalate"])).unwrap_err();
        assert_eq!(err.route, Route::Rerun);
        assert!(err.reason.contains("P-0001 (2026-01-10): Never delete a flaky test."), "{err}");
        assert!(err.help.starts_with("Follow P-0001 instead of escalating."), "{err}");
    }

    #[test]
    fn an_invented_precedent_invalidates_the_run_wherever_it_is_cited() {
        let invented = escalation("- P-0042 does not apply.");
        let err = check(&lookup(), &agent(&[("ESCALATION", &invented)], &["escalate"])).unwrap_err();
        assert_eq!(err.route, Route::Stay);
        assert!(err.reason.contains("`P-0042` in the ESCALATION on line 1"), "{err}");
        let err = check(&[], &agent(&[("TREATMENT_PLAN", "as P-00001 says")], &["plan-posted"])).unwrap_err();
        assert!(err.reason.contains("(ids look like `P-0001`)"), "{err}");
    }

    #[test]
    fn escalating_without_a_lookup_or_sections_is_invalid() {
        let ok = escalation("None applies.");
        let err = check(&[], &agent(&[("ESCALATION", &ok)], &["escalate"])).unwrap_err();
        assert!(err.reason.contains("no PRECEDENT_LOOKUP was recorded for run `r5`"), "{err}");
        // The lookup of another run does not count.
        let other = vec![note("PRECEDENT_LOOKUP", "r4", "diagnose", "engine", "")];
        assert!(check(&other, &agent(&[("ESCALATION", &ok)], &["escalate"])).is_err());
        let thin = "## Question for the chiefs\nMay we?\n";
        let err = check(&lookup(), &agent(&[("ESCALATION", thin)], &["escalate"])).unwrap_err();
        assert!(
            err.reason.contains("`## Precedents considered` is missing and `## What was tried` is missing"),
            "{err}"
        );
    }

    #[test]
    fn runs_that_do_not_escalate_pass_untouched() {
        check(&[], &agent(&[("TREATMENT_PLAN", "per P-0001, quarantine")], &["plan-posted"])).unwrap();
    }

    #[test]
    fn the_skill_form_sets_a_precedent_aside_but_a_bare_or_approving_citation_does_not() {
        let skill = escalation("- `P-0001`: it is about flaky tests; ours is about supported versions.");
        check(&lookup(), &agent(&[("ESCALATION", &skill)], &["escalate"])).unwrap();
        for applies in ["- P-0001", "- P-0001: this applies, but the chiefs may want to revisit it", "- P-0001:   "] {
            let body = escalation(applies);
            let err = check(&lookup(), &agent(&[("ESCALATION", &body)], &["escalate"])).unwrap_err();
            assert_eq!(err.route, Route::Rerun, "{applies}");
        }
        // Cited under another heading and never set aside: it applies.
        let body = escalation("None applies: nothing about versions.")
            .replace("Read the support policy.", "Tried what P-0001 says.");
        assert_eq!(check(&lookup(), &agent(&[("ESCALATION", &body)], &["escalate"])).unwrap_err().route, Route::Rerun);
    }

    #[test]
    fn turning_back_stops_after_two_in_a_row() {
        let cited = escalation("- P-0001 covers this.");
        let notes = agent(&[("ESCALATION", &cited)], &["escalate"]);
        let mut chart = vec![outcome("r1", "admit", "ready")];
        let mut routes = Vec::new();
        for run in ["t1", "t2", "t3"] {
            let mut now = chart.clone();
            now.extend(lookup());
            let err = check(&now, &notes).unwrap_err();
            routes.push(err.route.clone());
            chart.push(note("REFUSAL", run, "diagnose", "engine", &err.note_body()));
        }
        assert_eq!(routes, vec![Route::Rerun, Route::Rerun, Route::Stay]);
        // An accepted outcome starts the count again.
        chart.push(outcome("r9", "diagnose", "plan-posted"));
        chart.extend(lookup());
        assert_eq!(check(&chart, &notes).unwrap_err().route, Route::Rerun);
    }

    #[test]
    fn citations_are_found_once_each() {
        assert_eq!(citations("P-0001, P-0002 and again P-0001; XP-0003 no"), vec!["P-0001", "P-0002"]);
    }
}
