//! After the discharge audit, written once for the three ways there: the
//! auditing stage's record, a chief's approval, and the completion of a
//! recorded move. [`audit`] gathers the facts and takes the audit;
//! [`land`] lands a passed one and moves the patient: discharged when
//! merged, else resting where it waits, with the note that says why —
//! in a merge queue (ward's or GitHub's), at the pending label when the
//! head moved on from the audited commit (the wake-up or the sweep audits
//! the new head), or at the resolving stage (treatment when the pipeline
//! has none) when the pull request conflicts with its base. A patient that
//! leaves (discharged, or restarted from the base) takes its shared
//! checkpoint along ([`drop_shared_checkpoint`]).

use tracing::info;

use super::patient::Patient;
use crate::chart::control::{ControlLine, Opening};
use crate::chart::{Note, NoteKind, Seen};
use crate::discharge::{Landing, audit as facts};
use crate::forge::PullRequest;
use crate::hospital::Hospital;
use crate::rules::discharge_audit::{self, AuditFacts, Checklist};
use crate::transfer::{Move, Moved, transfer_telling};

/// The facts of the patient's pull request and the audit over them and its
/// chart. Facts the forge could not read fail the run, nothing decided
/// ([`unread`]).
pub(super) async fn audit(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<(AuditFacts, Checklist)> {
    let number = patient.issue.number;
    let facts =
        facts::gather(&*h.forge, &facts::patient_branch(number), &h.config).await.map_err(|e| unread(number, e))?;
    let checklist = discharge_audit::audit(&h.config, &patient.chart, &facts);
    Ok((facts, checklist))
}

/// A discharge audit whose facts could not be read: the run fails with
/// nothing decided or written, so the next trigger (or the sweep) audits
/// again; no ❔ becomes a send-back, no agent runs.
pub fn unread(number: crate::forge::IssueNumber, e: crate::forge::ForgeError) -> anyhow::Error {
    anyhow::anyhow!(
        "the discharge audit of {number} could not read the pull request's facts, so nothing was decided: {e}; the \
         next trigger or the charge nurse's sweep audits again"
    )
}

/// Where [`land`] left the patient.
pub(super) struct Landed {
    /// The label the patient is at now.
    pub label: String,
    pub moved: Moved,
}

/// Lands the pull request of a passed audit (`facts`) and moves the
/// patient with `notes` (and the note of where it waits, if it waits).
pub(super) async fn land(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    mut notes: Vec<Note>,
    facts: &AuditFacts,
) -> anyhow::Result<Landed> {
    let pull = facts.pull.as_ref().map_err(|e| anyhow::anyhow!("the audited pull request: {e}"))?;
    let queue = facts.merge_queue.as_ref();
    let number = patient.issue.number;
    let (label, kind, note, wards) =
        match crate::discharge::land(&*h.forge, &h.config, number, pull, queue, h.now()).await? {
            Landing::Merged => return discharge(h, patient, seen, notes).await,
            Landing::Queued { label, note, wards } => (label, NoteKind::Waiting, note, wards),
            Landing::HeadMoved => {
                (h.config.discharge.pending_label.clone(), NoteKind::Waiting, head_moved_body(pull, facts), false)
            }
            Landing::Conflict { files, message } => {
                let (label, body) = conflict(h, pull, &files, &message)?;
                // `audit-failed`: the send-back limit counts it, as the queue's do.
                notes.push(patient.engine_note(h, NoteKind::DischargeChecklist, body));
                (label, NoteKind::Outcome, crate::config::AUDIT_FAILED.to_string(), false)
            }
        };
    notes.push(patient.engine_note(h, kind, note));
    let to = Move::To(label.clone());
    let moved = transfer_telling(&*h.forge, &h.config, &patient.issue, seen, notes, to, &patient.tell(h)).await?;
    // After the move: the queue's turn finds the patient at its label.
    if wards {
        crate::discharge::queue::start(&*h.forge).await;
    }
    Ok(Landed { label, moved })
}

/// Discharges the patient with `notes`: labelled, closed, its family
/// released, its comment written; it takes its shared checkpoint along.
pub(super) async fn discharge(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    notes: Vec<Note>,
) -> anyhow::Result<Landed> {
    let tell = Some(&patient.tell(h));
    let (moved, family) =
        crate::discharge::discharge(&*h.forge, &h.config, &patient.issue, seen, notes, &patient.run, h.now(), tell)
            .await?;
    info!(?family, "discharged");
    drop_shared_checkpoint(h, patient, "discharged");
    Ok(Landed { label: h.config.discharge.discharged_label.clone(), moved })
}

/// The WAITING note of a merge refused because the head moved on from the
/// audited commit; its `Head:` line is the audited one, so any wake-up on
/// the new head audits it.
fn head_moved_body(pull: &PullRequest, facts: &AuditFacts) -> String {
    format!(
        "Pull request #{} moved on from the audited head before it was merged; nothing was merged. The next \
         audit reads the new head: a review or CI on it wakes the patient; the charge nurse's sweep looks too.\n\n\
         {}\n{}\n",
        pull.number,
        ControlLine::Head(&pull.head_sha),
        ControlLine::Ci(&super::wake::ci_fingerprint(facts.ci.as_ref().ok()))
    )
}

/// Where a conflicting patient goes (the resolving stage, else treatment)
/// and the note that tells its fellow what to bring up to date.
fn conflict(h: &Hospital, pull: &PullRequest, files: &[String], message: &str) -> anyhow::Result<(String, String)> {
    let stage = h.config.resolving_stage().or_else(|| h.config.treating_stage());
    let stage = stage.ok_or_else(|| {
        anyhow::anyhow!(
            "pull request #{} conflicts with its base and the pipeline has no stage to resolve it: {message}",
            pull.number
        )
    })?;
    let named = match files {
        [] => "the forge names no files".to_string(),
        _ => files.iter().map(|f| format!("`{}`", f.escape_debug())).collect::<Vec<_>>().join(", "),
    };
    let body = format!(
        "{} the audited head {} of pull request #{} does not merge into `{}` ({message}). Conflicting files: \
         {named}. Resolve the conflict on this branch: rebase it onto `{}` (or merge `{}` into it), keeping what \
         both sides intend; the resolution goes through code review like any change.",
        Opening::MergeConflict,
        pull.head_sha,
        pull.number,
        pull.base_branch,
        pull.base_branch,
        pull.base_branch
    );
    Ok((stage.config.label.clone(), body))
}

/// Where patients' checkpoints are shared between jobs ([`crate::workspace::shared`]): the
/// push target, on GitHub, when some emulator of the pipeline keeps
/// checkpoints; `None` otherwise (nothing to share, no call made).
pub(super) fn shared_target(h: &Hospital) -> anyhow::Result<Option<crate::workspace::PushTarget>> {
    let Some(plan) = h.workspace_plan()? else { return Ok(None) };
    let stages = h.config.stages().filter_map(|s| s.config.emulator.as_ref());
    let checkpointing = h.config.emulator.iter().chain(stages).any(|e| e.checkpoint().is_some());
    Ok(plan.push.clone().filter(|_| checkpointing))
}

/// Deletes the patient's shared checkpoint (a restart, a discharge); a
/// failure is a line (the reaper removes it once the issue is closed, and
/// a restart's next stage never takes it: it starts from the seed).
pub(super) fn drop_shared_checkpoint(h: &Hospital, patient: &Patient<'_>, why: &str) {
    let number = patient.issue.number;
    let target = match shared_target(h) {
        Ok(Some(target)) => target,
        Ok(None) => return,
        Err(e) => return tracing::warn!("{e:#}"),
    };
    match crate::workspace::shared::drop_patient(&target.url, target.token.as_deref(), number.0) {
        Ok(true) => info!(why, "the shared checkpoint of {number} was deleted"),
        Ok(false) => {}
        Err(e) => tracing::warn!("could not delete `{}` ({why}): {e}", crate::workspace::shared::ref_name(number.0)),
    }
}
