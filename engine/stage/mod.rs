//! One stage run ("rounds"): the only place that sequences the steps.
//!
//! ```text
//! guard ─► prepare ─► treat ─► judge ─► record          (and the workspace down, whatever happened)
//!   │                   │
//!   │                   └─ seals the visit: the agent's run as a folder (visit.rs)
//!   └─ a chief's approval: approve (audit again, merge)
//! ```
//!
//! On GitHub the run is split in two jobs ([`Phase`]): the *visit* job
//! (read-only token) runs guard ─► prepare ─► treat ─► seal, writing
//! nothing to the forge; the *record* job (write token, no agent) runs
//! guard ─► prepare ─► intake ─► judge ─► record on the sealed visit.
//! With a cap on agents a *slot* job comes first: guard ─► (audit first)
//! ─► an agent slot, or the patient queued (no agent, no visit).
//!
//! - [`guard`]: one ordered list of checks; the lockdown comes before
//!   anything that moves a patient or starts an agent.
//! - [`prepare`]: the admission notes (durable before the agent), the
//!   workspace, the prompt.
//! - [`treat`]: the agent, its environment, time limit and budget; its
//!   result is sealed as a [`visit::Visit`].
//! - [`judge`]: the hospital's rules over the visit; decides, writes nothing.
//! - [`record`]: the notes and the move, through [`crate::transfer`].
//! - [`resume`]: a run that finds an earlier run's OUTCOME recorded but
//!   its move not made completes that move; the agent never runs twice
//!   for one recorded visit.
//!
//! A failed guard or an invalid run is a chart note and a defined result,
//! never a crash; notes are in the chart before any label moves.

mod approve;
mod capacity;
mod guard;
mod intake;
mod judge;
mod landing;
pub mod local;
mod patient;
mod prepare;
mod record;
mod result;
mod resume;
mod seal;
mod settle;
mod treat;
pub mod visit;
mod waiting;
mod wake;
pub mod watch;

use tracing::{Instrument, info_span, warn};

pub use judge::validate_notes;
// A department's run of its role runs its agent as a stage does.
pub use result::{
    EXIT_BAD_INPUT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, EXIT_REFUSED, Phase, StageRequest, StageResult, Transition,
};
pub(crate) use treat::{Frame, run_framed};

use crate::hospital::Hospital;
use crate::workspace::Workspace;

/// Runs one stage for one issue, then tears its workspace down whatever
/// happened: diagnostics, removal, verification. The workspace report is
/// written only when the run succeeded and the teardown was verified.
pub async fn run_stage(h: &Hospital, req: &StageRequest) -> anyhow::Result<StageResult> {
    // A repository ward can't work in (a detached HEAD without WARD_BASE)
    // refuses before anything is read or written.
    h.workspace_plan()?;
    let patient = match guard::admit(h, req).await? {
        guard::Admitted::Stop(result) => return Ok(result),
        guard::Admitted::Approval(patient) => {
            let span =
                info_span!("approval", repo = %h.forge.describe(), issue = patient.issue.number.0, run = %patient.run);
            let result = approve::approve(h, &patient, req.approver.as_deref()).instrument(span).await;
            tell_after(h, &patient, &result).await;
            return result;
        }
        guard::Admitted::Settle(patient, dequeued) => {
            let span = info_span!("merge queue", repo = %h.forge.describe(), issue = patient.issue.number.0, run = %patient.run);
            let result = settle::settle(h, &patient, dequeued.as_deref()).instrument(span).await;
            tell_after(h, &patient, &result).await;
            return result;
        }
        guard::Admitted::Stage(patient) => patient,
    };
    crate::fault::point("after-guard");
    // A run whose visit is already recorded is not run again: its move is completed.
    // Completing it writes: the visit job leaves it to the record job.
    if let Some(unmoved) = resume::unmoved(h, &patient).await? {
        if !req.phase.writes() {
            let reason = format!("{} has a recorded visit whose move the record job completes", patient.issue.number);
            return Ok(StageResult::Deferred { issue: patient.issue.number, reason });
        }
        if let Some(result) = resume::complete(h, &patient, unmoved).await? {
            return Ok(result);
        }
    }
    let span = info_span!("stage", repo = %h.forge.describe(), issue = patient.issue.number.0, stage = patient.stage.name, run = %patient.run);
    let mut workspace = None;
    let result = rounds(h, &patient, req, &mut workspace).instrument(span).await;
    let result = teardown(h, workspace, result).await;
    write_report(&patient, &result);
    // The visit job writes nothing: the record job tells the patient's
    // comment (the slot job tells it too when it queued the patient).
    // One process frees its slot here; on GitHub the record job (or the
    // release job) does, after the visit (see `rounds`).
    if req.phase.writes() || req.phase == Phase::Slot {
        tell_after(h, &patient, &result).await;
    }
    if req.phase == Phase::Whole {
        capacity::free(h, &patient).await;
    }
    result
}

/// After the labels moved: the patient's comment says where the patient
/// is now (one call; two more the first time, to chart its id), unless the
/// run's move wrote it already ([`Transition::told`]). The chart as the
/// guard read it, with this run's outcome; a run that found nothing to do
/// changes nothing (a wake-up stays at 3 calls).
async fn tell_after(h: &Hospital, patient: &patient::Patient<'_>, result: &anyhow::Result<StageResult>) {
    let tell = patient.tell(h);
    let (place, line, outcome) = match result {
        Ok(StageResult::Moved(t)) if t.told => return,
        Ok(StageResult::Moved(t)) => {
            let meta = crate::chart::NoteMeta { run: t.run.clone(), stage: t.stage.clone(), ..tell.meta.clone() };
            let outcome = crate::chart::Note { kind: crate::chart::NoteKind::Outcome, meta, body: t.outcome.clone() };
            (t.to.clone(), None, Some(outcome))
        }
        Ok(StageResult::Refused { stage, to, .. }) => (
            to.clone().unwrap_or_else(|| patient.label_in.clone()),
            Some(format!("**Last run:** `{stage}` was refused; the chart's REFUSAL note says why.")),
            None,
        ),
        Ok(StageResult::Invalid { stage, run, .. }) => (
            patient.label_in.clone(),
            Some(format!("**Last run:** `{stage}` run `{run}` was invalid; the chart's REFUSAL note says why.")),
            None,
        ),
        Ok(StageResult::NoOp { .. } | StageResult::Deferred { .. } | StageResult::SlotTaken { .. }) | Err(_) => {
            return;
        }
    };
    let notes: std::borrow::Cow<'_, [crate::chart::Note]> = match outcome {
        Some(outcome) => patient.chart.iter().cloned().chain([outcome]).collect(),
        None => std::borrow::Cow::Borrowed(&patient.chart),
    };
    // The run wrote since the guard read the chart: a first comment's
    // note reads it again rather than fail a compare-and-swap.
    let seen = crate::chart::Seen::NotRead;
    tell.update(&*h.forge, &h.config, Some(&place), &notes, seen, line.as_deref()).await;
}

/// Completes the run's `report.json` (the workspace's report, when the run
/// had a workspace) with how the run ended and the exit code `ward stage`
/// gives it, for every run past the guards: moved, refused, invalid, or
/// failed with an error.
fn write_report(patient: &patient::Patient<'_>, result: &anyhow::Result<StageResult>) {
    let path = patient.folder.join("report.json");
    let mut report = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&t).ok())
        .unwrap_or_default();
    report.insert("issue".into(), patient.issue.number.0.into());
    report.insert("stage".into(), patient.stage.name.into());
    report.insert("run".into(), patient.run.clone().into());
    let (ended, code) = match result {
        Ok(r) => (serde_json::to_value(r).unwrap_or_default(), r.exit_code()),
        Err(e) => (serde_json::json!({"result": "error", "error": format!("{e:#}")}), EXIT_FAILED),
    };
    report.insert("result".into(), ended);
    report.insert("exit_code".into(), code.into());
    let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    if let Err(e) = std::fs::create_dir_all(&patient.folder).and_then(|()| std::fs::write(&path, text)) {
        warn!("could not write {}: {e}", path.display());
    }
}

/// Prepare, treat, judge, record; in the visit job prepare, treat and seal;
/// in the record job prepare, intake (the sealed visit instead of the
/// agent), judge, record.
async fn rounds(
    h: &Hospital,
    patient: &patient::Patient<'_>,
    req: &StageRequest,
    workspace: &mut Option<Workspace>,
) -> anyhow::Result<StageResult> {
    // The auditing stage audits before its agent: a patient whose CI or
    // review has not come yet waits without one.
    let audit = match patient.stage.mode().audits() {
        true => match waiting::before_nurse(h, patient, req.phase.writes()).await? {
            waiting::BeforeNurse::Done(result) => return Ok(result),
            waiting::BeforeNurse::Nurse(facts, checklist) => Some((facts, checklist)),
        },
        false => None,
    };
    // The record job reads the visit before it writes anything: a visit
    // that is not this run's is dropped with nothing written. What it takes
    // in: the visit, its commits, and why it was refused if it broke a bound.
    let taken = match &req.phase {
        Phase::Record { from } => match intake::take_in(h, patient, from)? {
            intake::Taken::Dropped(result) => return Ok(result),
            intake::Taken::Visit(visit, committed) => Some((*visit, committed, None)),
            intake::Taken::Refused(visit, reason) => Some((*visit, None, Some(reason))),
        },
        _ => None,
    };
    // The cap on agents at once: beyond it, the patient waits for a slot.
    // Taking a slot writes, before the agent: one process takes it here;
    // on GitHub the slot job takes it and ends, and the visit job (which
    // cannot write) runs the agent only while the state shows that slot.
    match &req.phase {
        Phase::Whole => {
            if let Some(queued) = capacity::take(h, patient).await? {
                return Ok(queued);
            }
        }
        Phase::Slot => return capacity::take_for_visit(h, patient).await,
        Phase::Visit { .. } => {
            if let Some(stop) = capacity::unheld(h, patient).await? {
                return Ok(stop);
            }
        }
        Phase::Record { .. } => {}
    }
    let prepared = prepare::prepare(h, patient, audit, workspace, &req.phase).await?;
    crate::fault::point("after-prepare");
    let (visit, committed, refused) = match taken {
        Some(taken) => taken,
        None => (treat::treat(h, patient, &prepared, req.agent_command.clone(), workspace.as_ref()).await?, None, None),
    };
    crate::fault::point("after-treat");
    if let Phase::Visit { out } = &req.phase {
        return seal::seal(patient, &visit, workspace.as_mut(), out).await;
    }
    let judgment = match refused {
        Some(reason) => judge::Judgment::Invalid { reason: format!("the sealed visit was refused: {reason}") },
        None => judge::judge(h, patient, &prepared, &visit, committed.as_ref()).await?,
    };
    crate::fault::point("after-judge");
    // A restart's next stage drops the patient's checkpoints, as its
    // workspace does in one process; on GitHub the record job, which may write.
    if matches!(req.phase, Phase::Record { .. })
        && patient
            .chart
            .iter()
            .rfind(|n| n.kind == crate::chart::NoteKind::Outcome)
            .is_some_and(|n| n.body.trim() == "restart")
    {
        landing::drop_shared_checkpoint(h, patient, "a restart from the base");
    }
    record::record(h, patient, &prepared, &visit, judgment, workspace.as_mut(), committed.as_ref()).await
}

async fn teardown(
    h: &Hospital,
    workspace: Option<Workspace>,
    result: anyhow::Result<StageResult>,
) -> anyhow::Result<StageResult> {
    let Some(ws) = workspace else { return result };
    let run = ws.run.clone();
    // A patient who leaves takes its worktree along.
    let leaving = matches!(&result, Ok(StageResult::Moved(t)) if t.to == h.config.discharge.discharged_label);
    let down = if leaving { ws.release().await } else { ws.down().await };
    match (result, down) {
        (Ok(mut r), Ok(report)) => {
            // The stage's time includes the workspace's teardown.
            if let StageResult::Moved(t) = &mut r {
                t.total_ms += u128::from(report.down_ms);
                t.engine_us += u128::from(report.down_ms) * 1000;
            }
            // Every run's, an invalid one's too (issue 15).
            report.write()?;
            Ok(r)
        }
        (Ok(_), Err(e)) => {
            Err(anyhow::Error::new(e).context(format!("run {run} finished, but its workspace teardown failed")))
        }
        (Err(e), Ok(report)) => {
            if let Err(write) = report.write() {
                warn!("could not write the workspace report: {write}");
            }
            Err(e)
        }
        (Err(e), Err(down)) => Err(e.context(format!("and then the workspace teardown failed too: {down}"))),
    }
}
