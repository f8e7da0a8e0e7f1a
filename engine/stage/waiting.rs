//! Waiting is a state. The discharge audit is taken before the nurse's
//! agent: when all that is missing has simply not happened yet (CI running
//! or not started, no counting review yet), the patient rests at
//! `discharge.pending_label` with one WAITING note saying what is missing,
//! and no agent runs. Red CI and changes requested by a person whose review
//! counts go back to treatment, named, without the nurse. Anything else is
//! the nurse's.
//!
//! A wake-up first looks cheaply whether anything changed
//! ([`super::wake::nothing_new`]); only a change gets here.

use tracing::info;

use super::patient::Patient;
use super::result::StageResult;
use super::wake::ci_fingerprint;
use crate::chart::control::ControlLine;
use crate::chart::{NoteKind, Seen};
use crate::config::AUDIT_FAILED;
use crate::hospital::Hospital;
use crate::rules::discharge_audit::{AuditFacts, Checklist, Verdict};
use crate::transfer::{Move, transfer_telling};

/// What the audit before the nurse decided.
#[allow(clippy::large_enum_variant)] // made once per discharge run
pub enum BeforeNurse {
    /// The nurse runs, reading this audit.
    Nurse(AuditFacts, Checklist),
    /// The run ends here: the patient waits, or went back to treatment.
    Done(StageResult),
}

/// The audit before the nurse, and what it decides.
/// `writes` is `false` in the visit job: a patient that waits or goes back
/// runs no agent, and the record job, auditing again, writes why.
pub async fn before_nurse(h: &Hospital, patient: &Patient<'_>, writes: bool) -> anyhow::Result<BeforeNurse> {
    let (facts, checklist) = super::landing::audit(h, patient).await?;
    let treat = h.config.treating_stage().map(|s| s.config.label.clone());
    let nurse = match (checklist.verdict(), &treat) {
        (Verdict::Waiting, _) => false,
        (Verdict::Failed, Some(_)) => checklist.for_treatment().is_empty(),
        _ => true,
    };
    if !writes && !nurse {
        let reason =
            format!("the audit before the nurse of {} runs no agent; the record job writes it", patient.issue.number);
        return Ok(BeforeNurse::Done(StageResult::Deferred { issue: patient.issue.number, reason }));
    }
    match (checklist.verdict(), treat) {
        (Verdict::Waiting, _) => wait(h, patient, &facts, &checklist).await.map(BeforeNurse::Done),
        (Verdict::Failed, Some(treat)) if !checklist.for_treatment().is_empty() => {
            back_to_treatment(h, patient, &checklist, treat).await.map(BeforeNurse::Done)
        }
        _ => Ok(BeforeNurse::Nurse(facts, checklist)),
    }
}

/// The WAITING note's body: what is missing, then the two lines a wake-up
/// compares (`Head:` and `CI:`).
pub fn waiting_body(checklist: &Checklist, facts: &AuditFacts) -> String {
    let pull = checklist.pull.map_or("the pull request".to_string(), |p| format!("pull request #{p}"));
    let mut body = format!(
        "Waiting for what has not happened yet on {pull}; no agent runs until something below changes. A review \
         submitted or CI completed on the branch wakes the patient; the charge nurse's sweep looks too.\n\n"
    );
    for line in checklist.missing() {
        body.push_str(&line);
        body.push('\n');
    }
    let head = ControlLine::Head(checklist.head.as_deref().unwrap_or("unknown"));
    body.push_str(&format!("\n{head}\n{}\n", ControlLine::Ci(&ci_fingerprint(facts.ci.as_ref().ok()))));
    body
}

/// The patient waits at the pending label with one WAITING note. A wait
/// that finds the same as the last WAITING note writes nothing.
async fn wait(
    h: &Hospital,
    patient: &Patient<'_>,
    facts: &AuditFacts,
    list: &Checklist,
) -> anyhow::Result<StageResult> {
    let pending = h.config.discharge.pending_label.clone();
    let body = waiting_body(list, facts);
    let number = patient.issue.number;
    let last = patient.chart.iter().rfind(|n| n.kind == NoteKind::Waiting);
    if patient.label_in == pending && last.is_some_and(|n| n.body.trim() == body.trim()) {
        return Ok(StageResult::NoOp { issue: number, reason: "the audit found nothing new; still waiting".into() });
    }
    info!(missing = list.missing().len(), "waiting");
    let note = patient.engine_note(h, NoteKind::Waiting, body);
    let seen = Seen::Read(patient.stored.clone());
    let to = if patient.label_in == pending { Move::Stay } else { Move::To(pending.clone()) };
    let moved = transfer_telling(&*h.forge, &h.config, &patient.issue, seen, vec![note], to, &patient.tell(h)).await?;
    Ok(StageResult::Moved(patient.moved_by_engine("waiting", pending, &moved)))
}

/// Red CI, or changes requested by a person whose review counts: back to
/// treatment with the checklist (failing checks named, the review's text),
/// which the fellow's next prompt carries. The outcome is `audit-failed`,
/// so the send-back limit counts it.
async fn back_to_treatment(
    h: &Hospital,
    patient: &Patient<'_>,
    list: &Checklist,
    treat: String,
) -> anyhow::Result<StageResult> {
    let why: Vec<String> = list.for_treatment().iter().map(|i| format!("{}: {}", i.title, i.note)).collect();
    info!(why = %why.join("; "), "back to treatment");
    let body = format!(
        "Back to treatment (`{treat}`), not code review: what failed is the fellow's to fix.\n\n{}",
        list.render()
    );
    let notes = vec![
        patient.engine_note(h, NoteKind::DischargeChecklist, body),
        patient.engine_note(h, NoteKind::Outcome, AUDIT_FAILED.into()),
    ];
    let seen = Seen::Read(patient.stored.clone());
    let to = Move::To(treat.clone());
    let moved = transfer_telling(&*h.forge, &h.config, &patient.issue, seen, notes, to, &patient.tell(h)).await?;
    Ok(StageResult::Moved(patient.moved_by_engine(AUDIT_FAILED, treat, &moved)))
}
