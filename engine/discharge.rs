//! Discharge: merging a patient whose audit passed, and human approval mode.
//!
//! The discharge stage audits (see [`crate::audit`]); with a passed audit
//! the engine squash-merges and discharges, or, with `human_approval: true`,
//! parks the patient at the awaiting label. A chief (maintain or admin)
//! applying the approved label starts [`approve`]: the engine checks who
//! applied it, audits again (commits may have landed since), merges and
//! discharges. Every refusal is a REFUSAL note and a defined label.

use std::time::Instant;

use anyhow::Context;
use tracing::{info, info_span, warn};

use crate::audit;
use crate::chart::{ENGINE_ROLE, Note, NoteKind, NoteMeta};
use crate::config::{Config, DispatchMode};
use crate::forge::{Forge, Issue, PullRequest, PullState};
use crate::rules::approval::{self, applied_by};
use crate::rules::discharge_audit::{self, Checklist};
use crate::stage::{Hospital, StageResult, Transition, new_run_id, try_lock_issue};

/// The mode of the stage that audits before discharge.
pub const AUDIT_MODE: &str = "discharge";

/// The stage that audits (mode `discharge`), if the pipeline has one.
pub fn audit_stage(config: &Config) -> Option<crate::config::Stage<'_>> {
    config.audit_stage()
}

/// Squash-merges the pull request unless it is merged already (a rerun).
pub async fn merge(forge: &dyn Forge, pull: &PullRequest) -> anyhow::Result<()> {
    if pull.state == PullState::Merged {
        return Ok(());
    }
    forge
        .merge_pull_request(pull.number, &pull.head_sha)
        .await
        .with_context(|| format!("could not merge pull request #{} at the audited head {}", pull.number, pull.head_sha))
}

/// Labels the patient discharged (keeping labels that are not ward's),
/// closes it, and releases its family. Returns what else moved.
pub async fn discharge(h: &Hospital, issue: &Issue, run: &str) -> anyhow::Result<Vec<String>> {
    let labels = h.config.labels_at(&issue.labels, &h.config.discharge.discharged_label);
    h.forge.set_labels(issue.number, &labels).await?;
    h.forge.close_issue(issue.number).await?;
    let now = (h.clock)();
    let after = Issue { labels, ..issue.clone() };
    let dispatch = h.config.dispatch == DispatchMode::RepositoryDispatch;
    crate::family::release(&*h.forge, &h.config, &h.sentinels, &after, run, now, dispatch).await
}

/// A chief applied the approved label: check who, audit again, merge and
/// discharge, or refuse with a note.
pub async fn approve(h: &Hospital, issue: &Issue, run: Option<String>) -> anyhow::Result<StageResult> {
    let started = Instant::now();
    let number = issue.number;
    let d = &h.config.discharge;
    let Some(stage) = audit_stage(&h.config) else {
        anyhow::bail!("`{}` is on {number}, but no stage of .github/ward.yml audits discharge", d.approved_label);
    };
    let Some(_lock) = try_lock_issue(&h.root, number).await? else {
        return Ok(StageResult::NoOp {
            issue: number.0,
            reason: format!("another run is already working on {number}"),
        });
    };
    let run = run.unwrap_or_else(|| new_run_id((h.clock)()));
    let span = info_span!("approval", issue = number.0, run = %run);
    let _enter = span.enter();
    let meta = || NoteMeta { run: run.clone(), stage: stage.name.into(), role: ENGINE_ROLE.into(), at: (h.clock)() };
    let note = |kind: NoteKind, body: String| Note { kind, meta: meta(), body };

    let events = h.forge.label_events(number).await?;
    let approver = applied_by(&events, &d.approved_label);
    let approver = match approver {
        Some(e) => Some((e.actor.clone(), h.forge.permission(&e.actor).await?)),
        None => None,
    };
    if let Err(refusal) =
        approval::may_merge(&h.config, &issue.labels, approver.as_ref().map(|(who, p)| (who.as_str(), *p)))
    {
        warn!(%refusal, "approval refused");
        crate::chart::append(
            &*h.forge,
            &h.sentinels,
            number,
            crate::chart::Seen::NotRead,
            &[note(NoteKind::Refusal, refusal.note_body())],
        )
        .await?;
        let labels: Vec<String> = issue.labels.iter().filter(|l| **l != d.approved_label).cloned().collect();
        h.forge.set_labels(number, &labels).await?;
        return Ok(StageResult::Refused {
            issue: number.0,
            stage: stage.name.into(),
            reason: refusal.to_string(),
            to: labels.iter().find(|l| h.config.is_ward_label(l)).cloned(),
        });
    }
    let (who, permission) = approver.expect("may_merge checked the approver");

    // Audit again: the head may have moved since the audit that passed.
    let chart = audit::read_chart(&*h.forge, &h.config, number).await?;
    let facts = audit::gather(&*h.forge, &audit::patient_branch(number)).await;
    let checklist: Checklist = discharge_audit::audit(&h.config, &chart, &facts);
    let outcome = checklist.outcome();
    let body = format!(
        "`{who}` ({} permission) applied `{}`.\n\n{}",
        format!("{permission:?}").to_lowercase(),
        d.approved_label,
        checklist.render()
    );
    let notes = [note(NoteKind::DischargeChecklist, body), note(NoteKind::Outcome, outcome.to_string())];
    crate::chart::append(&*h.forge, &h.sentinels, number, crate::chart::Seen::NotRead, &notes).await?;

    let from = d.approved_label.clone();
    let (to, dispatched) = if checklist.passed() {
        let pull = facts.pull.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
        merge(&*h.forge, pull).await?;
        let moved = discharge(h, issue, &run).await?;
        info!(?moved, "merged after approval");
        (d.discharged_label.clone(), false)
    } else {
        let back =
            stage.config.outcomes.get(discharge_audit::FAILED).cloned().unwrap_or_else(|| stage.config.label.clone());
        let labels = h.config.labels_at(&issue.labels, &back);
        h.forge.set_labels(number, &labels).await?;
        let dispatch =
            h.config.stage_by_label(&back).is_some() && h.config.dispatch == DispatchMode::RepositoryDispatch;
        if dispatch {
            h.forge.dispatch_stage(number, &back).await?;
        }
        (back, dispatch)
    };
    let artifacts = h.artifacts.join(number.0.to_string()).join(&run);
    Ok(StageResult::Moved(Transition {
        issue: number.0,
        stage: stage.name.into(),
        role: ENGINE_ROLE.into(),
        run,
        outcome: outcome.into(),
        from,
        to,
        dispatched,
        total_ms: started.elapsed().as_millis(),
        agent_ms: 0,
        engine_us: started.elapsed().as_micros(),
        artifacts,
    }))
}
