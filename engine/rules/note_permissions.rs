//! Each role writes only its own notes. The kinds a role may write come from
//! `ward.yml` (`roles.<role>.writes`); engine kinds are never the agent's.
//! A run must write the stage's required kinds (`requires`) and the kinds
//! its outcome requires (`requires_for`), and declare exactly one outcome
//! of its stage.

use super::{Refusal, Route, RunInput, Verdict, list};
use crate::chart::NoteKind;

pub const NAME: &str = "note-permissions";

pub fn after(input: &RunInput<'_>) -> Verdict {
    let stage = input.stage;
    let role = input.role();
    let mut problems = Vec::new();

    let writes = input.config.role(role).map(|r| r.writes.as_slice()).unwrap_or_default();
    let mut forbidden: Vec<String> = Vec::new();
    for note in &input.notes.notes {
        let kind = note.kind;
        let label = format!("`{kind}` (line {})", note.line);
        if kind.engine_only() {
            forbidden.push(format!("{label}, which only the engine writes"));
        } else if !writes.contains(&kind) {
            forbidden.push(label);
        }
    }
    if !forbidden.is_empty() {
        problems.push(format!(
            "role `{role}` may not write {} (it may write: {})",
            list(&forbidden),
            if writes.is_empty() {
                "nothing".to_string()
            } else {
                writes.iter().map(|w| w.as_str()).collect::<Vec<_>>().join(", ")
            }
        ));
    }

    let outcomes: Vec<&str> = stage.config.outcomes.keys().map(String::as_str).collect();
    let declared = &input.notes.outcomes;
    match declared.as_slice() {
        [] => problems.push(format!(
            "no outcome was declared; write exactly one line `<!-- {}:OUTCOME name -->` with one of: {}",
            input.config.sentinel_prefix,
            outcomes.join(", ")
        )),
        [(name, line)] if !stage.config.outcomes.contains_key(name) => problems.push(format!(
            "outcome `{name}` (line {line}) is not an outcome of stage `{}` (its outcomes: {})",
            stage.name,
            outcomes.join(", ")
        )),
        [_] => {}
        many => problems.push(format!(
            "{} outcomes were declared ({}); a run declares exactly one",
            many.len(),
            many.iter().map(|(n, l)| format!("`{n}` on line {l}")).collect::<Vec<_>>().join(", ")
        )),
    }

    let written: Vec<NoteKind> = input.notes.kinds().collect();
    let missing = |kinds: &[NoteKind]| -> Vec<String> {
        kinds.iter().filter(|k| !written.contains(k)).map(|k| format!("`{k}`")).collect()
    };
    let always = missing(&stage.config.requires);
    if !always.is_empty() {
        problems.push(format!("stage `{}` requires {} in every run", stage.name, list(&always)));
    }
    if let Some(outcome) = input.outcome()
        && let Some(kinds) = stage.config.requires_for.get(outcome)
    {
        let for_outcome = missing(kinds);
        if !for_outcome.is_empty() {
            problems.push(format!("outcome `{outcome}` requires {}", list(&for_outcome)));
        }
    }

    if problems.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        NAME,
        format!("{}.", problems.join("; ")),
        format!(
            "Write only the notes role `{role}` may write, every note stage `{}` requires, and one outcome.",
            stage.name
        ),
        Route::Stay,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::precedent::PrecedentLog;

    fn check(stage: &str, notes: &crate::chart::AgentNotes) -> Verdict {
        let config = config();
        let log = PrecedentLog::default();
        after(&RunInput {
            config: &config,
            stage: config.stage(stage).unwrap(),
            run: "r1",
            chart: &[],
            notes,
            precedents: &log,
            depth: 0,
        })
    }

    #[test]
    fn a_plan_with_its_outcome_passes() {
        check("diagnose", &agent(&[("TREATMENT_PLAN", PLAN)], &["plan-posted"])).unwrap();
    }

    #[test]
    fn a_fellow_cannot_write_a_code_review() {
        let err = check("treat", &agent(&[("TREATMENT_NOTE", "done"), ("CODE_REVIEW", CODE_REVIEW)], &["treated"]))
            .unwrap_err();
        assert_eq!(err.route, Route::Stay);
        assert!(err.reason.starts_with("role `fellow` may not write `CODE_REVIEW` (line 11)"), "{err}");
    }

    #[test]
    fn nobody_but_the_nurse_writes_the_discharge_checklist() {
        let err =
            check("code-review", &agent(&[("CODE_REVIEW", CODE_REVIEW), ("DISCHARGE_CHECKLIST", "ok")], &["approve"]))
                .unwrap_err();
        assert!(err.reason.contains("`DISCHARGE_CHECKLIST`"), "{err}");
    }

    #[test]
    fn engine_kinds_are_refused_even_from_the_notes_file() {
        let err =
            check("diagnose", &agent(&[("TREATMENT_PLAN", PLAN), ("REFUSAL", "x")], &["plan-posted"])).unwrap_err();
        assert!(err.reason.contains("`REFUSAL` (line 11), which only the engine writes"), "{err}");
    }

    #[test]
    fn exactly_one_known_outcome() {
        let none = check("diagnose", &agent(&[("TREATMENT_PLAN", PLAN)], &[])).unwrap_err();
        assert!(none.reason.contains("no outcome was declared"), "{none}");
        let two = check("diagnose", &agent(&[("TREATMENT_PLAN", PLAN)], &["plan-posted", "stuck"])).unwrap_err();
        assert!(two.reason.contains("2 outcomes were declared"), "{two}");
        let unknown = check("diagnose", &agent(&[("TREATMENT_PLAN", PLAN)], &["treated"])).unwrap_err();
        assert!(unknown.reason.contains("`treated` (line 1000) is not an outcome of stage `diagnose`"), "{unknown}");
    }

    #[test]
    fn required_kinds_for_the_stage_and_for_the_outcome() {
        let err = check("plan-review", &agent(&[], &["approve"])).unwrap_err();
        assert!(err.reason.contains("stage `plan-review` requires `PLAN_REVIEW` in every run"), "{err}");
        let err = check("treat", &agent(&[("TREATMENT_NOTE", "x")], &["scope-changed"])).unwrap_err();
        assert!(err.reason.contains("outcome `scope-changed` requires `REVISED_PLAN`"), "{err}");
        let err = check("treat", &agent(&[("TREATMENT_NOTE", "x")], &["stuck"])).unwrap_err();
        assert!(err.reason.contains("outcome `stuck` requires `IPASS_HANDOFF`"), "{err}");
    }
}
