//! The cap on agents at once (`capacity` in ward.yml), at the stage's
//! edge: a run takes a slot before its workspace and agent start, and a
//! patient beyond the cap rests at the queued label with a WAITING note
//! saying why. Whatever way the run ends, its slot is freed and the oldest
//! queued patient that fits is started ([`crate::state::slots`]).

use tracing::{info, warn};

use super::patient::Patient;
use super::result::StageResult;
use crate::chart::{NoteKind, Seen};
use crate::hospital::Hospital;
use crate::state::slots::{self, Take};
use crate::transfer::{Move, transfer};

/// Takes a slot for this run; `Some` when the patient was queued instead
/// (the run ends there, no agent started).
pub async fn take(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<Option<StageResult>> {
    if !h.config.capacity.capped(&h.config) {
        return Ok(None);
    }
    let number = patient.issue.number;
    let why = match slots::take(&*h.forge, &h.config, number, patient.stage, &patient.run, h.now()).await? {
        Take::Granted => return Ok(None),
        Take::Full(why) => why,
    };
    let queued = h.config.capacity.queued_label.clone();
    info!(%why, "queued for an agent slot");
    let body = format!(
        "Queued at `{queued}` before stage `{}`: {why}. No agent ran. The run that frees a slot starts the oldest \
         queued patient (the charge nurse's sweep does too, once a crashed run's slot expired); this patient \
         goes back to `{}` then.",
        patient.stage.name, patient.label_in
    );
    let note = patient.engine_note(h, NoteKind::Waiting, body);
    let seen = Seen::Read(patient.stored.clone());
    let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, vec![note], Move::To(queued.clone())).await?;
    Ok(Some(StageResult::Moved(patient.moved_by_engine("queued", queued, &moved))))
}

/// The slot job's half of [`take`] (`ward slot`, on GitHub): a slot for
/// this run, which the visit job then runs its agent under, or the patient
/// queued (the visit job is skipped).
pub async fn take_for_visit(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<StageResult> {
    let number = patient.issue.number;
    if !h.config.capacity.capped(&h.config) {
        let reason = format!("no cap on agents is set, so {number}'s visit runs without a slot");
        return Ok(StageResult::Deferred { issue: number, reason });
    }
    Ok(match take(h, patient).await? {
        Some(queued) => queued,
        None => StageResult::SlotTaken { issue: number, stage: patient.stage.name.into(), run: patient.run.clone() },
    })
}

/// The visit job's check before its agent: with a cap, an agent runs only
/// while the state shows this run's slot for this patient (the slot job
/// took it; it may have been freed after a failure, expired, or been taken
/// over by a newer run of the same patient). `Some` stops the visit.
pub async fn unheld(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<Option<StageResult>> {
    if !h.config.capacity.capped(&h.config) {
        return Ok(None);
    }
    let number = patient.issue.number;
    if slots::held(&*h.forge, &patient.run, number, h.now()).await? {
        return Ok(None);
    }
    let reason = format!(
        "no agent runs: `capacity` caps agents, and run {} holds no agent slot for {number} in the sweep's state          (the `slot` job of ward-stage.yml takes it before the visit: it was freed or expired since, a newer run of          the patient took it over, or the workflow lacks that job, then copy the shipped ward-stage.yml); the          charge nurse's sweep starts the patient again",
        patient.run
    );
    Ok(Some(StageResult::NoOp { issue: number, reason }))
}

/// Frees this run's slot and starts the next queued patient. A failure is
/// logged, not the run's: the slot then expires, and the sweep starts the
/// queue.
pub async fn free(h: &Hospital, patient: &Patient<'_>) {
    if !h.config.capacity.capped(&h.config) {
        return;
    }
    match slots::free(&*h.forge, &h.config, Some(&patient.run), h.now()).await {
        Ok(Some(next)) => info!(next = next.0, "an agent slot freed; the oldest queued patient starts"),
        Ok(None) => {}
        Err(e) => warn!(
            "could not free the agent slot of run {} (issue {}): {e:#}; it expires by itself and the sweep starts \
             the queue",
            patient.run, patient.issue.number
        ),
    }
}
