//! A chief's approval (human approval mode): the guard has checked the
//! lockdown and taken the patient's lock. Who applied the approved label is
//! checked, the audit is taken again (commits may have landed since), and
//! the engine merges and discharges, or sends the patient back.

use tracing::{info, warn};

use super::patient::Patient;
use super::result::StageResult;
use crate::chart::{NoteKind, Seen};
use crate::config::AUDIT_FAILED;
use crate::hospital::Hospital;
use crate::rules::approval::{self, applied_by};
use crate::transfer::{Move, transfer};

/// `commenter` is who said `/ward approve`; without one, the approver is
/// whoever applied the approved label.
pub async fn approve(h: &Hospital, patient: &Patient<'_>, commenter: Option<&str>) -> anyhow::Result<StageResult> {
    let (number, stage) = (patient.issue.number, patient.stage);
    let d = &h.config.discharge;
    let approver = match commenter {
        Some(who) => Some((who.to_string(), h.forge.permission(who).await?)),
        None => match applied_by(&h.forge.label_events(number).await?, &d.approved_label) {
            Some(e) => Some((e.actor.clone(), h.forge.permission(&e.actor).await?)),
            None => None,
        },
    };
    let how = match commenter {
        Some(_) => "said `/ward approve`".to_string(),
        None => format!("applied `{}`", d.approved_label),
    };
    let seen = Seen::Read(patient.stored.clone());
    let approved = approval::may_merge(
        &h.config,
        &patient.chart,
        &patient.issue.labels,
        approver.as_ref().map(|(who, p)| (who.as_str(), *p)),
    );
    let (who, permission) = match approved {
        Ok(chief) => chief,
        Err(refusal) => {
            warn!(%refusal, "approval refused");
            // The approved label comes off; the patient stays where it waits.
            let to = match (Move::from(&refusal.route), h.config.ward_label(&patient.issue.labels)) {
                (Move::Stay, Some(place)) => Move::To(place.to_string()),
                (to, _) => to,
            };
            let note = patient.engine_note(h, NoteKind::Refusal, refusal.note_body());
            let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, vec![note], to).await?;
            let reason = refusal.to_string();
            return Ok(StageResult::Refused {
                issue: number,
                stage: stage.name.into(),
                reason,
                to: moved.at,
                locked: false,
            });
        }
    };

    // Audit again: the head may have moved since the audit that passed.
    let (facts, checklist) = super::landing::audit(h, patient).await?;
    let outcome = checklist.outcome();
    let body =
        format!("`{who}` ({} permission) {how}.\n\n{}", format!("{permission:?}").to_lowercase(), checklist.render());
    let notes = vec![
        patient.engine_note(h, NoteKind::DischargeChecklist, body),
        patient.engine_note(h, NoteKind::Outcome, outcome.to_string()),
    ];
    let (to, moved) = if checklist.passed() {
        let landed = super::landing::land(h, patient, seen, notes, &facts).await?;
        info!(to = %landed.label, "landed after approval");
        (landed.label, landed.moved)
    } else {
        let back = stage.config.outcomes.get(AUDIT_FAILED).cloned().unwrap_or_else(|| stage.config.label.clone());
        let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::To(back.clone())).await?;
        (back, moved)
    };
    Ok(StageResult::Moved(patient.moved_by_engine(outcome, to, &moved)))
}
