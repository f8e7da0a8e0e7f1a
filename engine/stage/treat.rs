//! Treat: the agent runs, with the environment, time limit and budget the
//! engine enforces, and what it produced is sealed into the run's folder as
//! a [`Visit`]. What comes after reads the visit back, never the agent.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};

use super::guard::Patient;
use super::prepare::Prepared;
use super::visit::{STDOUT_FILE, Visit};
use crate::agent::{self, AgentEnd, AgentSpec};
use crate::hospital::Hospital;
use crate::workspace::{Cancel, Workspace};

/// Runs the agent and seals its visit. `command` replaces `agent.command`
/// for this run (scripted scenarios).
pub async fn treat(
    h: &Hospital,
    patient: &Patient<'_>,
    prepared: &Prepared,
    command: Option<Vec<String>>,
    slot: Option<&Workspace>,
) -> anyhow::Result<Visit> {
    let stage = patient.stage;
    let spec = AgentSpec {
        command: command.unwrap_or_else(|| h.config.agent.command.clone()),
        workdir: prepared.workdir.clone(),
        // The emulator's variables go to the agent's environment and nowhere else.
        env: agent_env(h, patient, prepared).into_iter().chain(prepared.emulator_env.iter().cloned()).collect(),
        pass_env: h.config.agent.pass_env.clone(),
        prompt_file: prepared.prompt_file.clone(),
        notes_file: prepared.notes_file.clone(),
        artifacts: patient.folder.clone(),
        time_limit: stage.config.time_limit,
        ward_exe: h.ward_exe.clone(),
    };
    info!(command = ?spec.command.first(), "agent starts");
    // The engine enforces the run's dollars while it goes (the wall clock is
    // crate::agent's); dropping the agent's future kills its process group.
    let budget = &h.config.departments.budget;
    let stdout = patient.folder.join(STDOUT_FILE);
    let watch = crate::budget::watch(
        &stdout,
        budget,
        stage.config.time_limit + Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let in_workspace = slot.is_some();
    let run_agent = async {
        if !in_workspace {
            return agent::run(&spec).await.map_err(anyhow::Error::from);
        }
        // A signal (a cancelled Actions job) ends the agent; the caller still tears the workspace down.
        Cancel::process()?
            .guard(agent::run(&spec))
            .await
            .with_context(|| {
                format!(
                    "stage `{}` of issue {} was cancelled by a signal while the agent ran; no label moved",
                    stage.name, patient.issue.number
                )
            })?
            .map_err(anyhow::Error::from)
    };
    let started = std::time::Instant::now();
    let (end, stopped) = tokio::select! {
        exit = run_agent => (exit?.end, None),
        (breach, _) = watch => {
            warn!(%breach, "budget reached; the agent was stopped");
            (AgentEnd::Signalled(libc::SIGKILL), Some(breach))
        }
    };
    let agent_ms = started.elapsed().as_millis() as u64;
    info!(agent_ms, ?end, "agent ended");
    // What the run changed is read now, by ward; nothing of it is committed
    // before it is judged (record commits a treating stage's accepted run,
    // and discards everything else).
    let changed = match slot {
        Some(ws) => ws.changed_paths().await.with_context(|| {
            format!(
                "could not read what the agent changed in the worktree of issue {}, stage `{}`",
                patient.issue.number, stage.name
            )
        })?,
        None => Vec::new(),
    };
    let diff_lines = match slot {
        Some(ws) if stage.mode().treats() && !changed.is_empty() => ws.diff_lines().await.with_context(|| {
            format!(
                "could not count the lines the agent changed in the worktree of issue {}, stage `{}`",
                patient.issue.number, stage.name
            )
        })?,
        _ => 0,
    };
    let visit = Visit {
        issue: patient.issue.number,
        stage: stage.name.into(),
        run: patient.run.clone(),
        label_in: patient.label_in.clone(),
        end,
        agent_ms,
        stopped,
        usage: usage(&stdout, budget),
        commit: None,
        changed,
        start: slot.map(|ws| ws.start().to_string()),
        diff_lines,
        notes: Default::default(),
        stderr_tail: String::new(),
    };
    visit.seal(&patient.folder)?;
    Ok(Visit::open(&patient.folder)?)
}

/// What the agent's output says it spent.
fn usage(stdout: &Path, budget: &crate::config::BudgetConfig) -> Option<crate::budget::Usage> {
    let text = std::fs::read(stdout).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    crate::budget::parse_usage(&text, budget)
}

/// ward's own variables in the agent's environment.
fn agent_env(h: &Hospital, patient: &Patient<'_>, prepared: &Prepared) -> Vec<(String, String)> {
    let stage = patient.stage;
    [
        ("WARD_ISSUE", patient.issue.number.0.to_string()),
        ("WARD_STAGE", stage.name.to_string()),
        ("WARD_MODE", stage.mode().to_string()),
        ("WARD_ROLE", stage.config.role.clone()),
        ("WARD_RUN", patient.run.clone()),
        ("WARD_PROMPT", prepared.prompt_file.display().to_string()),
        ("WARD_NOTES", prepared.notes_file.display().to_string()),
        ("WARD_WORKTREE", prepared.workdir.display().to_string()),
        ("WARD_SENTINEL", h.sentinels.prefix().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
