//! No code without a plan; no plan without review.
//!
//! Before the agent: a treating stage (mode `treat`) starts only when the
//! latest TREATMENT_PLAN or REVISED_PLAN in the chart was approved by a
//! PLAN_REVIEW written after it (the review's run declared `approve`, and
//! the latest review after the plan is the approving one). Otherwise the
//! patient goes back to the stage that writes plans.
//!
//! After the agent: every plan a run writes names its diagnosis, files to
//! change, tests to add, risks and open questions, each non-empty; a plan
//! missing a section never reaches review.

use super::{GuardInput, Refusal, Route, RunInput, Verdict, list, missing_sections, outcome_of_run, run_was_refused};
use crate::chart::{Note, NoteKind};
use crate::config::Config;

pub const NAME: &str = "plan-gate";

/// Sections every plan holds, in this order.
pub const PLAN_SECTIONS: &[&str] = &["Diagnosis", "Files to change", "Tests to add", "Risks", "Open questions"];

/// Sections of a plan review.
pub const PLAN_REVIEW_SECTIONS: &[&str] = &["Findings", "Verdict"];

/// The outcome of a plan review that approves the plan.
pub const APPROVE: &str = "approve";

/// Where the latest plan stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PlanStatus<'a> {
    NoPlan,
    /// The latest plan has no review after it.
    Unreviewed {
        plan: &'a Note,
    },
    /// The latest review after the latest plan did not approve it.
    NotApproved {
        plan: &'a Note,
        review: &'a Note,
        outcome: Option<&'a str>,
    },
    Approved {
        plan: &'a Note,
        review: &'a Note,
    },
}

/// Reads the chart: the latest plan and the latest counted review after
/// it. Notes of refused runs do not count, and a review counts only when
/// its role may write PLAN_REVIEW.
pub fn plan_status<'a>(config: &Config, chart: &'a [Note]) -> PlanStatus<'a> {
    let counts = |n: &Note| !run_was_refused(chart, &n.meta.run);
    let Some(at) = chart.iter().rposition(|n| n.kind.is_plan() && counts(n)) else {
        return PlanStatus::NoPlan;
    };
    let plan = &chart[at];
    let reviewer_may = |n: &Note| config.role(&n.meta.role).is_some_and(|r| r.writes.contains(&NoteKind::PlanReview));
    let review = chart[at + 1..].iter().rev().find(|n| n.kind == NoteKind::PlanReview && counts(n) && reviewer_may(n));
    match review {
        None => PlanStatus::Unreviewed { plan },
        Some(review) => match outcome_of_run(chart, &review.meta.run) {
            Some(APPROVE) => PlanStatus::Approved { plan, review },
            outcome => PlanStatus::NotApproved { plan, review, outcome },
        },
    }
}

/// The label of the stage that writes treatment plans (the first stage
/// that requires TREATMENT_PLAN, for any outcome).
pub fn planning_label(config: &Config) -> Option<&str> {
    config
        .stages()
        .find(|s| {
            s.config.requires.contains(&NoteKind::TreatmentPlan)
                || s.config.requires_for.values().any(|ks| ks.contains(&NoteKind::TreatmentPlan))
        })
        .map(|s| s.config.label.as_str())
}

pub fn before(input: &GuardInput<'_>) -> Verdict {
    if !input.stage.mode().treats() {
        return Ok(());
    }
    let why = match plan_status(input.config, input.chart) {
        PlanStatus::Approved { .. } => return Ok(()),
        PlanStatus::NoPlan => "the chart holds no TREATMENT_PLAN or REVISED_PLAN".to_string(),
        PlanStatus::Unreviewed { plan } => format!(
            "the latest plan ({} of run `{}`) has not been reviewed; no PLAN_REVIEW follows it",
            plan.kind, plan.meta.run
        ),
        PlanStatus::NotApproved { plan, review, outcome } => format!(
            "the latest plan ({} of run `{}`) was not approved: the PLAN_REVIEW of run `{}` ended `{}`",
            plan.kind,
            plan.meta.run,
            review.meta.run,
            outcome.unwrap_or("without an outcome")
        ),
    };
    let route = planning_label(input.config).map_or(Route::Stay, |l| Route::To(l.to_string()));
    Err(Refusal::new(
        NAME,
        format!("Stage `{}` changes code, but {why}.", input.stage.name),
        "Post a treatment plan and have it approved in plan review before treating (no code without a plan, \
         no plan without review).",
        route,
    ))
}

/// The label of the stage that reviews plans (the first that requires PLAN_REVIEW).
pub fn plan_review_label(config: &Config) -> Option<&str> {
    config
        .stages()
        .find(|s| {
            s.config.requires.contains(&NoteKind::PlanReview)
                || s.config.requires_for.values().any(|ks| ks.contains(&NoteKind::PlanReview))
        })
        .map(|s| s.config.label.as_str())
}

pub fn after(input: &RunInput<'_>) -> Verdict {
    let mut problems = Vec::new();
    // Never improvise: a plan changed during treatment goes back to review
    // before any more code does.
    let wrote_plan = input.notes.notes.iter().find(|n| n.kind.is_plan());
    if let (Some(plan), Some(review)) = (wrote_plan, plan_review_label(input.config))
        && input.stage.mode().treats()
    {
        let to = input.outcome().and_then(|o| input.stage.config.outcomes.get(o));
        if to.is_some_and(|l| l != review) {
            problems.push(format!(
                "the {} on line {} changes the plan during treatment, but outcome `{}` does not send it to `{review}`",
                plan.kind,
                plan.line,
                input.outcome().unwrap_or_default()
            ));
        }
    }
    for note in input.notes.notes.iter().filter(|n| n.kind.is_plan()) {
        let missing = missing_sections(&note.body, PLAN_SECTIONS);
        if !missing.is_empty() {
            problems.push(format!("the {} on line {}: {}", note.kind, note.line, list(&missing)));
        }
    }
    for note in input.notes.notes.iter().filter(|n| n.kind == NoteKind::PlanReview) {
        let missing = missing_sections(&note.body, PLAN_REVIEW_SECTIONS);
        if !missing.is_empty() {
            problems.push(format!("the PLAN_REVIEW on line {}: {}", note.line, list(&missing)));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        NAME,
        format!("The plan cannot be used: {}.", problems.join("; ")),
        format!(
            "A plan needs non-empty sections {}; a plan review needs {}. A plan changed during treatment goes to \
             plan review (outcome `scope-changed`) before more code.",
            PLAN_SECTIONS.iter().map(|s| format!("`## {s}`")).collect::<Vec<_>>().join(", "),
            PLAN_REVIEW_SECTIONS.iter().map(|s| format!("`## {s}`")).collect::<Vec<_>>().join(", ")
        ),
        Route::Stay,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::precedent::PrecedentLog;

    fn gate(chart: &[Note]) -> Verdict {
        let config = config();
        before(&GuardInput { config: &config, stage: config.stage("treat").unwrap(), chart, dependencies: &[] })
    }

    fn plan(run: &str) -> Note {
        note("TREATMENT_PLAN", run, "diagnose", "fellow", PLAN)
    }

    fn review(run: &str, verdict: &str) -> [Note; 2] {
        [
            note("PLAN_REVIEW", run, "plan-review", "review-attending", "## Findings\nok\n## Verdict\nok"),
            outcome(run, "plan-review", verdict),
        ]
    }

    #[test]
    fn treat_without_a_plan_goes_back_to_diagnose() {
        let err = gate(&[]).unwrap_err();
        assert_eq!(err.route, Route::To("ward:diagnose".into()));
        assert!(err.reason.contains("holds no TREATMENT_PLAN"), "{err}");
    }

    #[test]
    fn an_approved_plan_opens_the_gate() {
        let mut chart = vec![plan("r1"), outcome("r1", "diagnose", "plan-posted")];
        chart.extend(review("r2", "approve"));
        gate(&chart).unwrap();
    }

    #[test]
    fn an_unreviewed_or_rejected_plan_keeps_it_shut() {
        let err = gate(&[plan("r1")]).unwrap_err();
        assert!(err.reason.contains("has not been reviewed"), "{err}");
        let mut chart = vec![plan("r1")];
        chart.extend(review("r2", "approve"));
        chart.extend(review("r3", "reject"));
        let err = gate(&chart).unwrap_err();
        assert!(err.reason.contains("PLAN_REVIEW of run `r3` ended `reject`"), "{err}");
    }

    #[test]
    fn a_plan_approved_then_revised_needs_a_new_approval() {
        let mut chart = vec![plan("r1")];
        chart.extend(review("r2", "approve"));
        chart.push(note("REVISED_PLAN", "r3", "treat", "fellow", PLAN));
        chart.push(outcome("r3", "treat", "scope-changed"));
        let err = gate(&chart).unwrap_err();
        assert!(err.reason.contains("(REVISED_PLAN of run `r3`) has not been reviewed"), "{err}");
        chart.extend(review("r4", "approve"));
        gate(&chart).unwrap();
    }

    #[test]
    fn reviews_from_refused_runs_or_wrong_roles_do_not_count() {
        let mut chart = vec![plan("r1")];
        chart.extend(review("r2", "approve"));
        chart.push(note("REFUSAL", "r2", "plan-review", "engine", "Rule: x"));
        assert!(gate(&chart).is_err(), "refused review");
        let chart = vec![
            plan("r1"),
            note("PLAN_REVIEW", "r2", "treat", "fellow", "## Findings\nmine\n## Verdict\nfine"),
            outcome("r2", "treat", "approve"),
        ];
        assert!(gate(&chart).is_err(), "a fellow's review");
    }

    #[test]
    fn a_revised_plan_cannot_ride_along_with_the_treatment() {
        let config = config();
        let log = PrecedentLog::default();
        let notes = agent(&[("TREATMENT_NOTE", "done"), ("REVISED_PLAN", PLAN)], &["treated"]);
        let input = RunInput {
            config: &config,
            stage: config.stage("treat").unwrap(),
            run: "r5",
            chart: &[],
            notes: &notes,
            precedents: &log,
            depth: 0,
        };
        let err = after(&input).unwrap_err();
        assert!(
            err.reason.contains("the REVISED_PLAN on line 11 changes the plan during treatment, but outcome `treated` does not send it to `ward:plan-review`"),
            "{err}"
        );
        let ok = agent(&[("REVISED_PLAN", PLAN)], &["scope-changed"]);
        after(&RunInput { notes: &ok, ..input }).unwrap();
    }

    #[test]
    fn other_stages_are_not_gated() {
        let config = config();
        let input =
            GuardInput { config: &config, stage: config.stage("diagnose").unwrap(), chart: &[], dependencies: &[] };
        before(&input).unwrap();
    }

    #[test]
    fn a_plan_missing_a_section_is_rejected_before_review() {
        let config = config();
        let log = PrecedentLog::default();
        let body = PLAN.replace("## Risks\nCold cache after deploy.\n", "## Risks\n\n");
        let body = body.replace("## Open questions\nNone.\n", "");
        let notes = agent(&[("TREATMENT_PLAN", &body)], &["plan-posted"]);
        let input = RunInput {
            config: &config,
            stage: config.stage("diagnose").unwrap(),
            run: "r1",
            chart: &[],
            notes: &notes,
            precedents: &log,
            depth: 0,
        };
        let err = after(&input).unwrap_err();
        assert_eq!(err.route, Route::Stay);
        assert!(
            err.reason.contains("the TREATMENT_PLAN on line 1: `## Risks` is empty and `## Open questions` is missing"),
            "{err}"
        );
        let good = agent(&[("TREATMENT_PLAN", PLAN)], &["plan-posted"]);
        after(&RunInput { notes: &good, ..input }).unwrap();
    }
}
