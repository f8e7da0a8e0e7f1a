//! A treatment proposed on the local forge, where GitHub would see a push:
//! the branch's commits recorded as its pull request, then the local CI
//! (`ci.command`) run on that head and recorded as the head's check run,
//! pending then completed. The discharge audit reads both as it reads
//! GitHub's; a red local CI sends the patient back to treatment with the
//! failing output, as red checks do on GitHub.

use std::path::Path;

use anyhow::Context;
use tracing::{info, warn};

use super::patient::Patient;
use crate::config::CiConfig;
use crate::forge::local::LocalForge;
use crate::forge::{CiFailure, CiState, CiStatus, Forge, NewPullRequest};
use crate::hospital::Hospital;
use crate::workspace::Workspace;
use crate::workspace::ci::{self, CiEnd};

/// The name of the local CI's check run.
pub const CHECK_NAME: &str = "local-ci";

/// Records the treatment's head as the patient's pull request and runs the
/// local CI on it. Does nothing on any other forge.
pub async fn propose(h: &Hospital, patient: &Patient<'_>, ws: &Workspace) -> anyhow::Result<()> {
    let Some(local) = h.forge.as_local() else { return Ok(()) };
    let Some(plan) = h.workspace_plan()? else { return Ok(()) };
    let number = patient.issue.number;
    let new = NewPullRequest {
        head_branch: ws.branch.name.clone(),
        base_branch: plan.base.clone(),
        title: format!("{} ({number})", patient.issue.title),
        body: format!("Closes {number}.\n\nTreated by ward, stage `{}`, run `{}`.", patient.stage.name, patient.run),
    };
    let recorded =
        local.record_push(new).await.with_context(|| format!("could not record the pull request of {number}"))?;
    let Some(pull) = recorded else { return Ok(()) };
    info!(pull = pull.number, head = %pull.head_sha, "pull request recorded on the local forge");
    if h.config.ci.command.is_some() {
        run_ci(local, &ws.repo, &pull.head_sha, &h.config.ci, &patient.folder).await?;
    }
    Ok(())
}

/// Runs the local CI on `head` unless it already completed there (a run
/// that committed nothing new), recording pending, then the result. The
/// output is `ci.log` in `folder` (the run's artifacts).
pub async fn run_ci(
    local: &LocalForge,
    repo: &Path,
    head: &str,
    config: &CiConfig,
    folder: &Path,
) -> anyhow::Result<CiStatus> {
    let Some(command) = &config.command else { anyhow::bail!("ward.yml sets no `ci.command`") };
    let before = local.ci_status(head).await?;
    if matches!(before.state, CiState::Success | CiState::Failure) {
        info!(%head, "the local CI already ran on this head");
        return Ok(before);
    }
    local.set_ci_status(head, &CiStatus::new(CiState::Pending, vec![format!("{CHECK_NAME}: pending")]))?;
    let run = ci::run(repo, head, command, config.time_limit, &folder.join("ci.log")).await;
    let secs = run.elapsed.as_secs_f32();
    let (conclusion, what) = match &run.end {
        CiEnd::Passed => {
            let status = CiStatus::new(CiState::Success, vec![format!("{CHECK_NAME}: success")]);
            local.set_ci_status(head, &status)?;
            info!(%head, secs, "local CI passed");
            return Ok(status);
        }
        CiEnd::Failed(Some(code)) => ("failure", format!("exited with code {code} after {secs:.1}s")),
        CiEnd::Failed(None) => ("failure", format!("was killed by a signal after {secs:.1}s")),
        CiEnd::TimedOut => ("timed_out", format!("was stopped at its time limit ({secs:.1}s; `ci.time_limit`)")),
        CiEnd::NotRun(why) => ("error", format!("did not run: {why}")),
    };
    warn!(%head, conclusion, "local CI failed");
    let summary = format!("`{command}` {what}. Its last lines:\n\n{}", run.tail(40));
    let mut status = CiStatus::new(CiState::Failure, vec![format!("{CHECK_NAME}: {conclusion}")]);
    status.failures.push(CiFailure {
        name: CHECK_NAME.into(),
        conclusion: conclusion.into(),
        url: run.log.display().to_string(),
        summary: Some(summary),
    });
    local.set_ci_status(head, &status)?;
    Ok(status)
}
