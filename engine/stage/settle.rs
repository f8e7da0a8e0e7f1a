//! A patient resting in GitHub's merge queue (at the merge-queue label) is woken by its pull
//! request closing or being dequeued (`pull_request` closed / dequeued), by
//! the sweep's look, or by a person's dispatch. What happened is read from
//! GitHub, never taken from the event (the event gives only the dequeue
//! reason): merged is discharged, as a direct merge would be; still queued
//! changes nothing; a head that moved since it was enqueued is audited
//! again; dequeued for a merge conflict (`MERGE_CONFLICT`) goes to the
//! resolving stage (treatment when the pipeline has none), told to rebase
//! onto the base, as ward's own queue sends a conflict; anything else
//! (dequeued, closed) goes back to treatment as a failed integration does
//! (each `audit-failed`, so the send-back limit counts it). A patient in
//! ward's own queue (GitHub's was off on its base) is left to that queue
//! while its state holds it.

use tracing::info;

use super::patient::Patient;
use super::result::StageResult;
use crate::chart::control::{self, Opening};
use crate::chart::{Note, NoteKind, Seen};
use crate::config::AUDIT_FAILED;
use crate::discharge::audit;
use crate::forge::PullState;
use crate::hospital::Hospital;
use crate::transfer::{Move, transfer};

/// `dequeued`: the reason the `pull_request` dequeued event gave, if one woke it.
pub async fn settle(h: &Hospital, patient: &Patient<'_>, dequeued: Option<&str>) -> anyhow::Result<StageResult> {
    let number = patient.issue.number;
    let facts =
        h.forge.pull_facts(&audit::patient_branch(number)).await.map_err(|e| super::landing::unread(number, e))?;
    let enqueued_at = enqueued_head(&patient.chart);
    let seen = Seen::Read(patient.stored.clone());
    let Some(f) = facts else {
        let why = format!("{number} rested in GitHub's merge queue, but its branch has no pull request any more.");
        return back_to_treatment(h, patient, seen, why).await;
    };
    let pull = &f.pull;
    let queued = f.merge_queue.as_ref().is_some_and(|q| q.queued);
    if pull.state == PullState::Merged {
        let body = format!(
            "GitHub's merge queue merged pull request #{} (head {}) into `{}`.",
            pull.number, pull.head_sha, pull.base_branch
        );
        let notes = vec![patient.engine_note(h, NoteKind::DischargeChecklist, body)];
        let (run, now) = (&patient.run, h.now());
        let (moved, family) =
            crate::discharge::discharge(&*h.forge, &h.config, &patient.issue, seen, notes, run, now, None).await?;
        info!(?family, "merged by GitHub's merge queue");
        let to = h.config.discharge.discharged_label.clone();
        return Ok(StageResult::Moved(patient.moved_by_engine("discharged", to, &moved)));
    }
    if wards_queue_holds(&patient.chart) {
        return in_wards_queue(h, patient, seen, pull).await;
    }
    if pull.state == PullState::Open && queued {
        let reason = format!("{number}: pull request #{} is still in GitHub's merge queue; nothing to do", pull.number);
        return Ok(StageResult::NoOp { issue: number, reason });
    }
    if pull.state == PullState::Open && enqueued_at.as_deref().is_some_and(|at| at != pull.head_sha) {
        // A push takes a pull request out of the queue: the new head is audited.
        let stage = patient.stage;
        let body = format!(
            "Left GitHub's merge queue: pull request #{} moved from the enqueued head {} to {}. The audit is \
             taken again.",
            pull.number,
            enqueued_at.unwrap_or_default(),
            pull.head_sha
        );
        let notes = vec![patient.engine_note(h, NoteKind::Waiting, body)];
        let to = stage.config.label.clone();
        let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::To(to.clone())).await?;
        return Ok(StageResult::Moved(patient.moved_by_engine("head-moved", to, &moved)));
    }
    // A conflict has an owner: the resolving stage. The event's reason
    // decides only where the patient goes; what the note says of the pull
    // request is what ward read of it.
    if pull.state == PullState::Open && dequeued.is_some_and(is_merge_conflict) {
        let reason = dequeued.unwrap_or_default();
        let why = format!(
            "GitHub's merge queue took pull request #{} out of the queue at head {} (reason: `{}`): its change \
             does not merge into `{}` as the queue built it (the base's tip and the pull requests queued before \
             it). GitHub names no conflicting files: a pull request tells only whether it merges.",
            pull.number,
            pull.head_sha,
            reason.escape_debug(),
            pull.base_branch
        );
        return to_resolve(h, patient, seen, why, &pull.base_branch).await;
    }
    let why = match (pull.state, dequeued) {
        (PullState::Open, Some(reason)) => format!(
            "GitHub's merge queue took pull request #{} out of the queue at head {} (reason: `{}`). When the \
             reason is a failed check, the merge group's checks ran on the branch merged with `{}` and the \
             patients queued before it; their runs are on the Actions page of the merge group's branch \
             (`gh-readonly-queue/{}/pr-{}-…`).",
            pull.number,
            pull.head_sha,
            reason.escape_debug(),
            pull.base_branch,
            pull.base_branch,
            pull.number
        ),
        (PullState::Open, None) => format!(
            "GitHub's merge queue no longer holds pull request #{} (head {}), and it was not merged: it was \
             taken out of the queue while no event reached ward.",
            pull.number, pull.head_sha
        ),
        _ => format!("Pull request #{} was closed without being merged while in GitHub's merge queue.", pull.number),
    };
    back_to_treatment(h, patient, seen, why).await
}

/// Whether the latest queue note is ward's own queue's (GitHub's queue
/// was off on the base when the patient was audited).
fn wards_queue_holds(chart: &[Note]) -> bool {
    let queues = [Opening::InForgeQueue, Opening::InWardQueue];
    chart
        .iter()
        .rfind(|n| n.kind == NoteKind::Waiting && queues.iter().any(|q| q.opens(&n.body)))
        .is_some_and(|n| Opening::InWardQueue.opens(&n.body))
}

/// A patient in ward's own queue is the queue's (ward-queue.yml) while the
/// queue's state holds it; one the state lost (a crash between the enqueue
/// and the move, a hand-edited state) is audited again, and the audit
/// enqueues it again.
async fn in_wards_queue(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    pull: &crate::forge::PullRequest,
) -> anyhow::Result<StageResult> {
    let number = patient.issue.number;
    let state = crate::state::load(&*h.forge).await?;
    if let Some(at) = state.merge_queue.waiting.iter().position(|e| e.issue == number) {
        let reason = format!("{number} is in ward's merge queue with {at} ahead of it; the queue's turns take it");
        return Ok(StageResult::NoOp { issue: number, reason });
    }
    let Some(stage) = h.config.audit_stage() else { anyhow::bail!("the pipeline has no auditing stage") };
    let body = format!(
        "ward's merge queue no longer holds pull request #{} (head {}), and it was not merged: the audit is taken \
         again, and a pass enqueues it again.",
        pull.number, pull.head_sha
    );
    let notes = vec![patient.engine_note(h, NoteKind::Waiting, body)];
    let to = stage.config.label.clone();
    let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::To(to.clone())).await?;
    Ok(StageResult::Moved(patient.moved_by_engine("not-in-queue", to, &moved)))
}

/// The head the patient was enqueued at: the `Head:` line of the latest
/// note written when GitHub's queue took it.
fn enqueued_head(chart: &[Note]) -> Option<String> {
    let note = chart.iter().rfind(|n| n.kind == NoteKind::Waiting && Opening::InForgeQueue.opens(&n.body))?;
    control::head(&note.body).map(str::to_string)
}

/// Whether GitHub's `dequeued` reason is a merge conflict (its reasons are
/// upper-case words; the fake sends `MERGE_CONFLICT` as GitHub does).
fn is_merge_conflict(reason: &str) -> bool {
    reason.trim().eq_ignore_ascii_case("MERGE_CONFLICT")
}

/// The treating stage's label.
fn treating_label(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<String> {
    h.config
        .treating_stage()
        .map(|s| s.config.label.clone())
        .ok_or_else(|| anyhow::anyhow!("the pipeline has no treating stage to send {} back to", patient.issue.number))
}

/// Back to the treating stage with what GitHub's queue did: `audit-failed`.
async fn back_to_treatment(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    why: String,
) -> anyhow::Result<StageResult> {
    let to = treating_label(h, patient)?;
    let body = format!("{why} Back to treatment: fix what failed, and the audit enqueues the new head.");
    send_back(h, patient, seen, body, to).await
}

/// A conflict to the resolving stage (`mode: resolve`; treatment when the
/// pipeline has none), told to rebase onto the base: `audit-failed`, as
/// ward's own queue sends one.
async fn to_resolve(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    why: String,
    base: &str,
) -> anyhow::Result<StageResult> {
    let (to, stage) = match h.config.resolving_stage() {
        Some(r) => (r.config.label.clone(), "the resolving stage"),
        None => (treating_label(h, patient)?, "treatment"),
    };
    let body = format!(
        "{why} To {stage}: rebase this branch onto `{base}` (git names the conflicting files as it stops), keeping \
         what both changes intend; the resolution goes through code review like any change, and the audit \
         enqueues the new head. A branch that rebases cleanly conflicted with a pull request still queued ahead \
         of it, not yet on `{base}`: there is nothing to resolve until it lands."
    );
    send_back(h, patient, seen, body, to).await
}

/// The patient to `to` with `body` and the outcome `audit-failed` (the
/// send-back limit counts it).
async fn send_back(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    body: String,
    to: String,
) -> anyhow::Result<StageResult> {
    let notes = vec![
        patient.engine_note(h, NoteKind::DischargeChecklist, body),
        patient.engine_note(h, NoteKind::Outcome, AUDIT_FAILED.into()),
    ];
    let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::To(to.clone())).await?;
    Ok(StageResult::Moved(patient.moved_by_engine(AUDIT_FAILED, to, &moved)))
}
