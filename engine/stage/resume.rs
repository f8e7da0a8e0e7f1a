//! A run whose visit is already recorded is never run again. When a run
//! dies after its OUTCOME reached the chart but before the patient moved
//! (a crash, a lost answer, retries exhausted on the labels or the merge),
//! the next run of that stage finds the OUTCOME and completes the move it
//! names instead of starting the agent a second time: the children of a
//! decomposition, the follow-ups, the merge of a passed audit, the labels
//! and the next stage, each of which is idempotent.
//!
//! A stage label put on again after that OUTCOME (a person sending the
//! patient back) is a new visit: the stage runs as usual.

use tracing::info;

use super::patient::Patient;
use super::result::{StageResult, Transition};
use crate::chart::{Note, NoteKind, Seen};
use crate::forge::LabelAction;
use crate::hospital::Hospital;
use crate::rules::approval::{self, AfterAudit};
use crate::transfer::{Move, transfer};

/// The recorded outcome of an earlier run of this stage whose move did not
/// happen, and where it leads.
pub struct Unmoved {
    pub run: String,
    pub outcome: String,
    pub to: String,
}

/// The chart's last OUTCOME, when it is this stage's, leads away from the
/// label the patient still carries, and that label was not put on again
/// since (one extra read, only in that case).
pub async fn unmoved(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<Option<Unmoved>> {
    let Some(last) = patient.chart.iter().rfind(|n| n.kind == NoteKind::Outcome) else { return Ok(None) };
    if last.meta.stage != patient.stage.name {
        return Ok(None);
    }
    let outcome = last.body.trim().to_string();
    let Some(to) = patient.stage.config.outcomes.get(&outcome).cloned() else { return Ok(None) };
    if to == patient.label_in || patient.issue.labels.contains(&to) {
        return Ok(None);
    }
    let events = h.forge.label_events(patient.issue.number).await?;
    // Whole seconds: the chart keeps a note's time to the second, a label
    // event may be finer; a label put on in the outcome's own second was
    // put on before it (the move comes after the outcome).
    let again = |e: &crate::forge::LabelEvent| e.label == patient.label_in && e.action == LabelAction::Added;
    if events.iter().any(|e| again(e) && e.at.timestamp() > last.meta.at.timestamp()) {
        return Ok(None);
    }
    Ok(Some(Unmoved { run: last.meta.run.clone(), outcome, to }))
}

/// Completes the move of `unmoved`; `None` when it can no longer be made
/// as recorded (the audit behind a discharge fails now): the stage runs.
pub async fn complete(h: &Hospital, patient: &Patient<'_>, unmoved: Unmoved) -> anyhow::Result<Option<StageResult>> {
    let (number, stage) = (patient.issue.number, patient.stage);
    info!(run = %unmoved.run, outcome = %unmoved.outcome, to = %unmoved.to, "completing a recorded run's move");
    let stored = super::record::file_follow_ups(h, patient, patient.stored.clone()).await;
    let seen = Seen::Read(stored);
    let discharged = &h.config.discharge.discharged_label;
    let mut to = unmoved.to.clone();
    if to == h.config.decomposition.waiting_label
        && let Some(note) = recorded(&patient.chart, &unmoved.run, NoteKind::Decomposition)
    {
        let children = crate::rules::decomposition::parse_children(&note.body)
            .map_err(|p| anyhow::anyhow!("a recorded decomposition became unreadable: {}", p.join("; ")))?;
        crate::family::create_children(&*h.forge, &h.config, number, &children).await?;
    }
    let moved = if to == *discharged {
        // The merge may not have happened: audit again (a commit may have
        // landed since), merge what passes, as the run would have.
        let (facts, checklist) = super::landing::audit(h, patient).await?;
        match approval::after_audit(&h.config, &patient.chart, checklist.passed()) {
            AfterAudit::SendBack => return Ok(None),
            AfterAudit::AwaitChief(label) => {
                to = label.clone();
                transfer(&*h.forge, &h.config, &patient.issue, seen, Vec::new(), Move::To(label)).await?
            }
            AfterAudit::Merge => {
                let landed = super::landing::land(h, patient, seen, Vec::new(), &facts).await?;
                to = landed.label;
                landed.moved
            }
        }
    } else {
        transfer(&*h.forge, &h.config, &patient.issue, seen, Vec::new(), Move::To(to.clone())).await?
    };
    // The move of the recorded run: its role and run, not this one's.
    let by_engine = patient.moved_by_engine(&unmoved.outcome, to, &moved);
    Ok(Some(StageResult::Moved(Transition { role: stage.config.role.clone(), run: unmoved.run, ..by_engine })))
}

fn recorded<'c>(chart: &'c [Note], run: &str, kind: NoteKind) -> Option<&'c Note> {
    chart.iter().rfind(|n| n.kind == kind && n.meta.run == run)
}
