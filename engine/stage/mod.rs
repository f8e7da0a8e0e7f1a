//! One stage run ("rounds"): the only place that sequences the steps.
//!
//! ```text
//! guard ─► prepare ─► treat ─► judge ─► record          (and the workspace down, whatever happened)
//!   │                   │
//!   │                   └─ seals the visit: the agent's run as a folder (visit.rs)
//!   └─ a chief's approval: approve (audit again, merge)
//! ```
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
mod guard;
mod judge;
mod prepare;
mod record;
mod result;
mod resume;
mod treat;
pub mod visit;
mod waiting;
mod wake;

use tracing::{Instrument, info_span};

pub use judge::validate_notes;
pub use result::{StageRequest, StageResult, Transition};

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
            return approve::approve(h, patient).instrument(span).await;
        }
        guard::Admitted::Stage(patient) => patient,
    };
    crate::fault::point("after-guard");
    // A run whose visit is already recorded is not run again: its move is completed.
    if let Some(unmoved) = resume::unmoved(h, &patient).await?
        && let Some(result) = resume::complete(h, &patient, unmoved).await?
    {
        return Ok(result);
    }
    let span = info_span!("stage", repo = %h.forge.describe(), issue = patient.issue.number.0, stage = patient.stage.name, run = %patient.run);
    let mut workspace = None;
    let result = rounds(h, &patient, req, &mut workspace).instrument(span).await;
    teardown(h, workspace, result).await
}

/// Prepare, treat, judge, record.
async fn rounds(
    h: &Hospital,
    patient: &guard::Patient<'_>,
    req: &StageRequest,
    workspace: &mut Option<Workspace>,
) -> anyhow::Result<StageResult> {
    // The auditing stage audits before its agent: a patient whose CI or
    // review has not come yet waits without one.
    let audit = match patient.stage.mode().audits() {
        true => match waiting::before_nurse(h, patient).await? {
            waiting::BeforeNurse::Done(result) => return Ok(result),
            waiting::BeforeNurse::Nurse(facts, checklist) => Some((facts, checklist)),
        },
        false => None,
    };
    let prepared = prepare::prepare(h, patient, audit, workspace).await?;
    crate::fault::point("after-prepare");
    let visit = treat::treat(h, patient, &prepared, req.agent_command.clone(), workspace.as_ref()).await?;
    crate::fault::point("after-treat");
    let judgment = judge::judge(h, patient, &prepared, &visit).await?;
    crate::fault::point("after-judge");
    record::record(h, patient, &prepared, &visit, judgment, workspace.as_mut()).await
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
            if !r.is_failure() {
                report.write()?;
            }
            Ok(r)
        }
        (Ok(_), Err(e)) => {
            Err(anyhow::Error::new(e).context(format!("run {run} finished, but its workspace teardown failed")))
        }
        (Err(e), Ok(_)) => Err(e),
        (Err(e), Err(down)) => Err(e.context(format!("and then the workspace teardown failed too: {down}"))),
    }
}
