//! One stage run ("rounds"): the only place that sequences the steps.
//!
//! ```text
//! guard ─► workspace up ─► prompt ─► agent ─► validate ─► chart ─► labels ─► dispatch ─► workspace down
//! ```
//!
//! A failed guard or an invalid run is a chart note and a defined result,
//! never a crash; notes are in the chart before any label moves.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use tracing::{info, info_span, warn};

use crate::agent::{self, AgentEnd, AgentSpec};
use crate::chart::{self, AgentNotes, ENGINE_ROLE, Note, NoteMeta, Sentinels};
use crate::config::{Config, DispatchMode, Stage};
use crate::forge::local::{Clock, system_clock};
use crate::forge::{Forge, Issue, IssueNumber, IssueState};
use crate::precedent::PrecedentLog;
use crate::prompt::{
    IssueContext, PrecedentContext, PromptContext, Prompts, RoleContext, StageContext, WorkspaceContext,
    fence_untrusted, pending_handoff, select_notes,
};
use crate::rules::{self, GuardInput, Refusal, Route, RunInput, discharge_audit};
use crate::workspace::{Cancel, Workspace, WorkspacePlan};

/// What every stage run of one repository shares: loaded once per command.
pub struct Hospital {
    /// The repository root: `.github/ward.yml`, `roles/`, `skills/`, `precedents/`.
    pub root: PathBuf,
    pub config: Config,
    pub forge: Arc<dyn Forge>,
    pub prompts: Prompts,
    pub precedents: PrecedentLog,
    pub sentinels: Sentinels,
    /// Per-run folders (prompt, notes, agent logs, run.json) go under here.
    pub artifacts: PathBuf,
    /// Where the agent runs.
    pub workdir: PathBuf,
    /// This ward binary (the stand-in agent is `ward stand-in`).
    pub ward_exe: PathBuf,
    pub clock: Clock,
    /// The patient's workspace on `ward/issue-<n>` (and emulator, when the
    /// stage has one); `Ok(None)` runs the agent in `workdir` (`root` is in
    /// no git repository, or the caller chose scratch); an error (a detached
    /// HEAD without `WARD_BASE`) refuses every stage run with its sentence.
    pub workspace: Result<Option<WorkspacePlan>, crate::workspace::PlanError>,
}

impl Hospital {
    /// Loads and validates everything under `root`. Errors name the file.
    pub fn load(root: &Path, forge: Arc<dyn Forge>) -> anyhow::Result<Self> {
        let config = Config::load(root).map_err(|e| anyhow::anyhow!("{e}"))?;
        let precedents = PrecedentLog::load(&root.join(&config.precedents.log))?;
        let ward_exe = std::env::current_exe().context("could not find the ward binary itself")?;
        Ok(Self {
            root: root.to_path_buf(),
            sentinels: Sentinels::new(&config.sentinel_prefix),
            prompts: Prompts::new(root),
            config,
            forge,
            precedents,
            artifacts: std::env::var_os("WARD_ARTIFACTS")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join(".ward").join("runs")),
            workdir: root.to_path_buf(),
            ward_exe,
            clock: system_clock(),
            workspace: WorkspacePlan::detect(root, |k| std::env::var(k).ok()),
        })
    }
}

/// Which run to make.
#[derive(Debug, Clone, Default)]
pub struct StageRequest {
    pub issue: u64,
    /// The label in the trigger saw; `None` takes the issue's ward label.
    pub label: Option<String>,
    /// Replaces `agent.command` for this run (scripted scenarios).
    pub agent_command: Option<Vec<String>>,
    pub run_id: Option<String>,
}

/// A label that moved.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    pub issue: u64,
    pub stage: String,
    pub role: String,
    pub run: String,
    pub outcome: String,
    pub from: String,
    pub to: String,
    pub dispatched: bool,
    pub total_ms: u128,
    pub agent_ms: u128,
    /// The engine's own time: the whole run less the agent's.
    pub engine_us: u128,
    pub artifacts: PathBuf,
}

/// How a stage run ended.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum StageResult {
    /// The run was valid and the label moved.
    Moved(Transition),
    /// Nothing to do (label already gone, issue closed, resting label,
    /// another run in progress). Exit 0.
    NoOp { issue: u64, reason: String },
    /// A guard refused the run; a REFUSAL note says why and the label went
    /// where the rule sends it (or stayed).
    Refused { issue: u64, stage: String, reason: String, to: Option<String> },
    /// The agent's run was invalid; a REFUSAL note says why, the label did
    /// not move, the raw notes are kept in the artifacts. Exit 1.
    Invalid { issue: u64, stage: String, run: String, reason: String, artifacts: PathBuf },
}

impl StageResult {
    pub fn is_failure(&self) -> bool {
        matches!(self, StageResult::Invalid { .. })
    }
}

/// A run id that is unique per run and has no spaces: the Actions run and
/// attempt when there is one, else time and process.
pub fn new_run_id(now: chrono::DateTime<chrono::Utc>) -> String {
    match (std::env::var("GITHUB_RUN_ID"), std::env::var("GITHUB_RUN_ATTEMPT")) {
        (Ok(id), Ok(attempt)) if !id.is_empty() => format!("gh{id}.{attempt}"),
        _ => format!("{}-{:x}{:04x}", now.format("%Y%m%dT%H%M%S%3f"), std::process::id(), rand_suffix()),
    }
}

fn rand_suffix() -> u16 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    (nanos ^ (nanos >> 16)) as u16
}

/// The ward labels on an issue, in the issue's order.
pub fn ward_labels<'a>(config: &Config, issue: &'a Issue) -> Vec<&'a str> {
    issue.labels.iter().map(String::as_str).filter(|l| config.is_ward_label(l) && *l != LOCKDOWN_LABEL).collect()
}

pub const LOCKDOWN_LABEL: &str = "ward:lockdown";

/// The labels after a transition: the label in removed, the label out
/// added, every label that is not ward's kept.
pub fn next_labels(issue: &Issue, label_in: &str, label_out: &str) -> Vec<String> {
    let mut labels: Vec<String> = issue.labels.iter().filter(|l| *l != label_in && *l != label_out).cloned().collect();
    labels.push(label_out.to_string());
    labels
}

/// Runs one stage for one issue, then tears its workspace down whatever
/// happened: diagnostics, removal, verification. `report.json` is written
/// only when the run succeeded and the teardown was verified.
pub async fn run_stage(h: &Hospital, req: &StageRequest) -> anyhow::Result<StageResult> {
    let mut workspace = None;
    let result = stage_steps(h, req, &mut workspace).await;
    let Some(ws) = workspace else { return result };
    let run = ws.run.clone();
    // A patient who leaves takes its worktree along.
    let leaving = matches!(&result, Ok(StageResult::Moved(t)) if t.to == h.config.discharge.discharged_label);
    let teardown = if leaving { ws.release().await } else { ws.down().await };
    match (result, teardown) {
        (Ok(mut r), Ok(report)) => {
            // The stage's time includes the workspace's teardown.
            if let StageResult::Moved(t) = &mut r {
                t.total_ms += report.down_ms as u128;
                t.engine_us += report.down_ms as u128 * 1000;
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

async fn stage_steps(h: &Hospital, req: &StageRequest, slot: &mut Option<Workspace>) -> anyhow::Result<StageResult> {
    let started = Instant::now();
    let number = IssueNumber(req.issue);
    let plan = h.workspace.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?.as_ref();
    let issue = h.forge.issue(number).await.with_context(|| format!("could not read issue {number}"))?;
    let no_op = |reason: String| Ok(StageResult::NoOp { issue: req.issue, reason });

    // Guard: which stage, and is it still ours to run?
    if issue.state == IssueState::Closed {
        return no_op(format!("issue {number} is closed"));
    }
    // Human approval mode: a chief's approval label is its own path.
    if issue.labels.contains(&h.config.discharge.approved_label)
        && req.label.as_ref().is_none_or(|l| *l == h.config.discharge.approved_label)
    {
        return crate::discharge::approve(h, &issue, req.run_id.clone()).await;
    }
    let ward = ward_labels(&h.config, &issue);
    if let Some(label) = &req.label
        && !issue.labels.contains(label)
    {
        return no_op(format!("issue {number} no longer carries `{label}`; another run already handled it"));
    }
    let label_in = match (req.label.as_deref(), ward.as_slice()) {
        (_, []) => bail!(
            "issue {number} carries no ward label; apply `{}` to admit it (labels: {})",
            h.config.admission,
            list(&issue.labels)
        ),
        (_, [one]) => one.to_string(),
        (_, many) => bail!(
            "issue {number} carries {} ward labels ({}); a patient is in one place at a time: remove all but one",
            many.len(),
            list(many)
        ),
    };
    let Some(stage) = h.config.stage_by_label(&label_in) else {
        if h.config.is_resting_label(&label_in) {
            return no_op(format!("issue {number} rests at `{label_in}`; no stage starts there"));
        }
        bail!("label `{label_in}` on issue {number} matches no stage in .github/ward.yml");
    };
    let role_name = stage.config.role.as_str();
    let role = h.config.role(role_name).context("validated config names a known role")?;

    // One run per issue at a time: a concurrent delivery is a no-op.
    let Some(_lock) = try_lock_issue(&h.root, number).await? else {
        return no_op(format!("another run is already working on issue {number}"));
    };

    let now = (h.clock)();
    let run = req.run_id.clone().unwrap_or_else(|| new_run_id(now));
    let span = info_span!("stage", repo = %h.forge.describe(), issue = req.issue, stage = stage.name, run = %run);
    let _enter = span.enter();
    // Infection control first: while a lockdown is open nothing runs and no label moves.
    if let Some(lockdown) = crate::lockdown::active_lockdown(&*h.forge).await? {
        let note = crate::lockdown::lockdown_note(&lockdown, stage.name, &run, now);
        chart::store_notes(&*h.forge, &h.sentinels, number, None, &[note]).await?;
        let reason = lockdown.to_string();
        return Ok(StageResult::Refused { issue: req.issue, stage: stage.name.into(), reason, to: None });
    }
    let artifacts = h.artifacts.join(req.issue.to_string()).join(&run);
    std::fs::create_dir_all(&artifacts).with_context(|| format!("could not create {}", artifacts.display()))?;

    let stored = h.forge.read_chart(number).await?;
    let chart_notes = match &stored {
        Some(c) => h.sentinels.parse_chart(&c.text).map_err(|e| {
            anyhow::anyhow!("the chart of issue {number} is not readable: {e}; fix or move it, nothing was changed")
        })?,
        None => Vec::new(),
    };
    let meta = |role: &str| NoteMeta { run: run.clone(), stage: stage.name.into(), role: role.into(), at: (h.clock)() };
    let engine_note = |kind: &str, body: String| Note { kind: kind.into(), meta: meta(ENGINE_ROLE), body };

    // The hospital's rules that must hold before the agent (plan gate,
    // open dependencies of a decomposition child).
    let dependencies = crate::family::dependencies(&*h.forge, &h.config, &h.sentinels, &issue).await?;
    let guard = GuardInput { config: &h.config, stage, chart: &chart_notes, dependencies: &dependencies };
    if let Err(refusal) = rules::guard(&guard) {
        return refuse(h, &issue, &label_in, stage, stored, engine_note("REFUSAL", refusal.note_body()), &refusal)
            .await;
    }
    // Budget left? A patient over its limits goes to the chiefs before any agent starts.
    let budget = &h.config.departments.budget;
    let spend = crate::budget::patient_spend(&chart_notes, &budget.send_back_set(&h.config));
    if let Some(breach) = crate::budget::check_patient(budget, &spend) {
        return send_over_budget(h, req.issue, stage, &run, &breach, None, false).await;
    }

    // Admission to the stage: durable before the agent starts, so a crash
    // is visible to the charge nurse.
    let admission = engine_note(
        "ADMISSION",
        format!(
            "Stage `{}` ({} in {} mode) started for `{label_in}`; time limit {}.",
            stage.name,
            role_name,
            stage.mode(),
            humantime::format_duration(stage.config.time_limit)
        ),
    );
    // The precedent lookup is recorded before the agent runs (precedent
    // first), and so is the engine's discharge audit: the nurse reads it.
    let found = h.precedents.search(&format!("{} {}", issue.title, issue.body), h.config.precedents.top);
    let lookup = engine_note("PRECEDENT_LOOKUP", precedent_lookup_body(&found));
    let mut audit = match stage.mode() == crate::discharge::AUDIT_MODE {
        true => {
            let facts = crate::audit::gather(&*h.forge, &crate::audit::patient_branch(number)).await;
            let checklist = discharge_audit::audit(&h.config, &chart_notes, &facts);
            Some((facts, checklist))
        }
        false => None,
    };
    let mut before_agent = vec![admission, lookup];
    if let Some((_, checklist)) = &audit {
        before_agent.push(engine_note("DISCHARGE_CHECKLIST", checklist.render()));
    }
    // `stored` was read just above, so an absent chart needs no second read.
    let stored = chart::store_notes_on(&*h.forge, &h.sentinels, number, stored, &before_agent).await?;
    let mut chart_notes = chart_notes;
    chart_notes.extend(before_agent);

    // Workspace up: the task's worktree, and the stage's emulator if it has one.
    if let Some(plan) = plan {
        let mut wreq = plan.request(&h.root, req.issue, stage.name, &run, &artifacts);
        wreq.emulator = h.config.emulator_for(stage.name).cloned();
        wreq.expires_after = stage.config.time_limit + stage.config.stall_after;
        wreq.restart =
            chart_notes.iter().rev().find(|n| n.kind == "OUTCOME").is_some_and(|n| n.body.trim() == "restart");
        let ws = Workspace::up(wreq, &Cancel::process()?)
            .await
            .with_context(|| format!("could not bring up the workspace of issue {number}, stage `{}`", stage.name))?;
        *slot = Some(ws);
    }
    let workdir = slot.as_ref().map_or_else(|| h.workdir.clone(), |w| w.worktree.path.clone());
    let emulator_env: Vec<(String, String)> = slot
        .as_ref()
        .and_then(|w| w.emulator.as_ref())
        .map(|e| e.vars.clone().into_iter().collect())
        .unwrap_or_default();

    // Prompt.
    let ctx = PromptContext {
        issue: IssueContext {
            number: req.issue,
            author: issue.author.clone(),
            fenced: fence_untrusted(&h.sentinels, &issue),
        },
        stage: StageContext::new(stage),
        role: RoleContext { name: role_name.into(), writes: role.writes.clone() },
        notes: select_notes(&chart_notes),
        handoff: pending_handoff(&chart_notes),
        precedents: found.iter().map(PrecedentContext::from_match).collect(),
        workspace: WorkspaceContext {
            path: workdir.display().to_string(),
            branch: crate::workspace::worktree::branch_name(req.issue),
            base: plan.map_or_else(|| "main".into(), |p| p.base.clone()),
            env: emulator_env.iter().map(|(k, _)| k.clone()).collect(),
        },
        sentinel: h.sentinels.prefix().into(),
        notes_file: "$WARD_NOTES".into(),
    };
    let prompt = h.prompts.render(&role.prompt, &ctx).map_err(|e| anyhow::anyhow!("{e}"))?;
    let prompt_file = artifacts.join("prompt.md");
    std::fs::write(&prompt_file, &prompt).with_context(|| format!("could not write {}", prompt_file.display()))?;

    // Agent.
    let notes_file = artifacts.join("notes.md");
    let spec = AgentSpec {
        command: req.agent_command.clone().unwrap_or_else(|| h.config.agent.command.clone()),
        workdir: workdir.clone(),
        // The emulator's variables go to the agent's environment and nowhere else.
        env: agent_env(req.issue, stage, role_name, &run, &prompt_file, &notes_file, &workdir, h.sentinels.prefix())
            .into_iter()
            .chain(emulator_env)
            .collect(),
        pass_env: h.config.agent.pass_env.clone(),
        prompt_file,
        notes_file: notes_file.clone(),
        artifacts: artifacts.clone(),
        time_limit: stage.config.time_limit,
        ward_exe: h.ward_exe.clone(),
    };
    info!(command = ?spec.command.first(), "agent starts");
    // The engine enforces the run's dollars while it goes (the wall clock is
    // agent.rs's); dropping the agent's future kills its process group.
    let agent_stdout = artifacts.join("agent.stdout.log");
    let watch = crate::budget::watch(
        &agent_stdout,
        budget,
        stage.config.time_limit + Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let has_workspace = slot.is_some();
    let run_agent =
        async {
            if has_workspace {
                // A signal (a cancelled Actions job) ends the agent; the caller still tears the workspace down.
                Cancel::process()?.guard(agent::run(&spec)).await.with_context(|| {
                format!(
                    "stage `{}` of issue {number} was cancelled by a signal while the agent ran; no label moved",
                    stage.name
                )
            })?
            .map_err(anyhow::Error::from)
            } else {
                agent::run(&spec).await.map_err(anyhow::Error::from)
            }
        };
    let exit = tokio::select! {
        exit = run_agent => exit?,
        (breach, usage) = watch => {
            warn!(%breach, "budget reached; the agent was stopped");
            return send_over_budget(h, req.issue, stage, &run, &breach, usage.as_ref(), true).await;
        }
    };
    if let Some(ws) = slot.as_mut() {
        // Durable before any label moves: the next stage starts from it.
        ws.commit_leftovers().await?;
        // GitHub mode: the treat stage pushes the branch and opens (or, by the push, updates) the pull request.
        let push = plan.and_then(|p| p.push.as_ref());
        if let Some(target) = push.filter(|_| stage.mode() == "treat")
            && ws.push(target).await?
        {
            let base = plan.map(|p| p.base.clone()).unwrap_or_default();
            let new = crate::forge::NewPullRequest {
                head_branch: ws.branch.name.clone(),
                base_branch: base,
                title: format!("{} (#{})", issue.title, req.issue),
                body: format!("Closes #{}.\n\nTreated by ward, stage `{}`, run `{run}`.", req.issue, stage.name),
            };
            let pr = h.forge.open_pull_request(new).await?;
            info!(pull = pr.number, "pull request open");
        }
    }
    info!(elapsed_ms = exit.elapsed.as_millis(), end = ?exit.end, "agent ended");
    let stdout = std::fs::read(&exit.stdout).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let usage = crate::budget::parse_usage(&stdout, budget);
    let cost = crate::budget::cost_note(usage.as_ref(), stage.name, &run, (h.clock)());
    let health = crate::sweep::AgentRun {
        issue: number,
        stage: stage.name.into(),
        run: run.clone(),
        ok: exit.success(),
        at: (h.clock)(),
    };
    // Only failures cost calls; the sweep sees successes as patients moving.
    if !health.ok
        && let Err(e) = crate::sweep::record_agent_run(&*h.forge, health).await
    {
        warn!("could not record the agent's failure for the sweep: {e}");
    }
    if let Some(breach) = crate::budget::check_run(budget, Duration::MAX, Duration::ZERO, usage.as_ref()) {
        return send_over_budget(h, req.issue, stage, &run, &breach, usage.as_ref(), false).await;
    }

    // Validate: the notes contract, then the hospital's rules.
    let mut turned_back = None;
    let depth = crate::family::depth(&*h.forge, &issue).await?;
    let checked = check_agent_run(h, stage, &exit, &notes_file).and_then(|(notes, outcome)| {
        let input = RunInput {
            config: &h.config,
            stage,
            run: &run,
            chart: &chart_notes,
            notes: &notes,
            precedents: &h.precedents,
            depth,
        };
        match rules::validate(&input) {
            Ok(()) => Ok((notes, outcome)),
            Err(refusal) if refusal.route == Route::Stay => Err(refusal.to_string()),
            Err(refusal) => {
                turned_back = Some(refusal);
                Ok((notes, outcome))
            }
        }
    });
    let (notes, outcome) = match checked {
        Ok(ok) => ok,
        Err(reason) => {
            warn!(%reason, "invalid run");
            let refusal = engine_note(
                "REFUSAL",
                format!(
                    "The run of stage `{}` was invalid and the label stays at `{label_in}`: {reason}\n\n\
                     What the agent wrote is kept in the run's artifacts (`notes.md`, `agent.stderr.log`).",
                    stage.name
                ),
            );
            chart::store_notes(&*h.forge, &h.sentinels, number, stored, &[cost, refusal]).await?;
            write_run_json(
                &artifacts,
                &serde_json::json!({"issue": req.issue, "stage": stage.name, "run": run, "result": "invalid", "reason": reason}),
            );
            return Ok(StageResult::Invalid { issue: req.issue, stage: stage.name.into(), run, reason, artifacts });
        }
    };

    if let Some(refusal) = turned_back {
        warn!(%refusal, "run turned back");
        return refuse(h, &issue, &label_in, stage, stored, engine_note("REFUSAL", refusal.note_body()), &refusal)
            .await;
    }
    // A passing audit is taken again on facts gathered now, not before the
    // agent: a commit pushed while the nurse worked is not merged unaudited.
    // (A failing one fails either way.)
    if audit.as_ref().is_some_and(|(_, checklist)| checklist.passed()) {
        let facts = crate::audit::gather(&*h.forge, &crate::audit::patient_branch(number)).await;
        let checklist = discharge_audit::audit(&h.config, &chart_notes, &facts);
        audit = Some((facts, checklist));
    }
    // The nurse adds judgment but cannot pass a failing audit.
    let (outcome, overruled) = match &audit {
        Some((_, checklist)) => {
            let (o, why) = discharge_audit::final_outcome(checklist, &outcome);
            (o.to_string(), why)
        }
        None => (outcome, None),
    };

    // Groundedness: the notes' checkable claims against the worktree and the log.
    let threshold = h.config.departments.groundedness.threshold;
    let mut batch = vec![cost];
    if threshold > 0.0 {
        use crate::groundedness as g;
        let ids: std::collections::HashSet<String> = h.precedents.entries.iter().map(|p| p.id.clone()).collect();
        let after_treatment =
            notes.kinds().any(|k| matches!(k, "TREATMENT_NOTE" | "CODE_REVIEW" | "DISCHARGE_CHECKLIST"));
        let facts = g::Facts { worktree: &workdir, precedents: &ids, after_treatment };
        let score = g::score_notes(notes.notes.iter().map(|n| (n.kind.as_str(), n.body.as_str())), &facts);
        batch.push(g::groundedness_note(&score, threshold, stage.name, &run, (h.clock)()));
        let earlier = g::earlier_invalid(&chart_notes, stage.name, g::visit_start(&chart_notes));
        let decision = g::decide(score.value(), threshold, earlier);
        if decision != g::Decision::Accept {
            return ungrounded(h, &issue, stage, &run, stored, batch, &score, decision, &artifacts).await;
        }
    }

    // Chart: the agent's notes, stamped, then the outcome. Durable before labels move.
    batch.extend(notes.notes.iter().map(|d| Note {
        kind: d.kind.clone(),
        meta: meta(role_name),
        body: d.body.clone(),
    }));
    if let Some(why) = overruled {
        batch.push(engine_note("DISCHARGE_CHECKLIST", why));
    }
    batch.push(Note { kind: "OUTCOME".into(), meta: meta(role_name), body: outcome.clone() });
    chart::store_notes(&*h.forge, &h.sentinels, number, stored, &batch).await?;

    // A decomposition: its children exist before the parent starts waiting.
    let waits = stage.config.outcomes.get(&outcome) == Some(&h.config.decomposition.waiting_label);
    if let Some(note) = notes.notes.iter().rfind(|n| n.kind == "DECOMPOSITION")
        && waits
    {
        let children = rules::decomposition::parse_children(&note.body)
            .map_err(|p| anyhow::anyhow!("validated decomposition became unreadable: {}", p.join("; ")))?;
        let dispatch = h.config.dispatch == DispatchMode::RepositoryDispatch;
        let created = crate::family::create_children(&*h.forge, &h.config, number, &children, dispatch).await?;
        info!(children = created.len(), "decomposition");
    }

    // Labels, in one write; then the next stage. A passed audit merges, or
    // waits for a chief in human approval mode.
    let mut label_out = stage.config.outcomes[&outcome].clone();
    let discharged = &h.config.discharge.discharged_label;
    if let Some((facts, checklist)) = &audit
        && label_out == *discharged
    {
        match rules::approval::after_audit(&h.config, checklist.passed()) {
            rules::approval::AfterAudit::Merge => {
                let pull = facts.pull.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
                crate::discharge::merge(&*h.forge, pull).await?;
            }
            rules::approval::AfterAudit::AwaitChief(label) => label_out = label,
            rules::approval::AfterAudit::SendBack => bail!("the audit failed but the outcome is `{outcome}`"),
        }
    }
    if label_out == *discharged {
        let moved = crate::discharge::discharge(h, &issue, &run).await?;
        info!(?moved, "discharged");
    } else {
        h.forge.set_labels(number, &next_labels(&issue, &label_in, &label_out)).await?;
    }
    let dispatched =
        h.config.stage_by_label(&label_out).is_some() && h.config.dispatch == DispatchMode::RepositoryDispatch;
    if dispatched {
        h.forge.dispatch_stage(number, &label_out).await?;
    }
    let t = Transition {
        issue: req.issue,
        stage: stage.name.into(),
        role: role_name.into(),
        run,
        outcome,
        from: label_in,
        to: label_out,
        dispatched,
        total_ms: started.elapsed().as_millis(),
        agent_ms: exit.elapsed.as_millis(),
        engine_us: started.elapsed().saturating_sub(exit.elapsed).as_micros(),
        artifacts: artifacts.clone(),
    };
    info!(outcome = %t.outcome, to = %t.to, total_ms = t.total_ms, "label moved");
    write_run_json(&artifacts, &serde_json::to_value(&t).unwrap_or_default());
    Ok(StageResult::Moved(t))
}

/// Writes a rule's REFUSAL note and sends the patient where the rule says:
/// another label (dispatched when it starts a stage), the same stage again
/// (dispatched), or nowhere.
async fn refuse(
    h: &Hospital,
    issue: &Issue,
    label_in: &str,
    stage: Stage<'_>,
    stored: Option<crate::forge::StoredChart>,
    note: Note,
    refusal: &Refusal,
) -> anyhow::Result<StageResult> {
    warn!(rule = refusal.rule, reason = %refusal.reason, "refused");
    chart::store_notes(&*h.forge, &h.sentinels, issue.number, stored, &[note]).await?;
    let dispatch_mode = h.config.dispatch == DispatchMode::RepositoryDispatch;
    let to = match &refusal.route {
        Route::To(label) => {
            h.forge.set_labels(issue.number, &next_labels(issue, label_in, label)).await?;
            if dispatch_mode && h.config.stage_by_label(label).is_some() {
                h.forge.dispatch_stage(issue.number, label).await?;
            }
            Some(label.clone())
        }
        Route::Rerun => {
            if dispatch_mode {
                h.forge.dispatch_stage(issue.number, label_in).await?;
            }
            Some(label_in.to_string())
        }
        Route::Stay => None,
    };
    Ok(StageResult::Refused { issue: issue.number.0, stage: stage.name.into(), reason: refusal.to_string(), to })
}

pub const DISCHARGED_LABEL: &str = "ward:discharged";
pub const AWAITING_CHIEF_LABEL: &str = "ward:awaiting-chief";

#[allow(clippy::too_many_arguments)]
fn agent_env(
    issue: u64,
    stage: Stage<'_>,
    role: &str,
    run: &str,
    prompt: &Path,
    notes: &Path,
    workdir: &Path,
    sentinel: &str,
) -> Vec<(String, String)> {
    [
        ("WARD_ISSUE", issue.to_string()),
        ("WARD_STAGE", stage.name.to_string()),
        ("WARD_MODE", stage.mode().to_string()),
        ("WARD_ROLE", role.to_string()),
        ("WARD_RUN", run.to_string()),
        ("WARD_PROMPT", prompt.display().to_string()),
        ("WARD_NOTES", notes.display().to_string()),
        ("WARD_WORKTREE", workdir.display().to_string()),
        ("WARD_SENTINEL", sentinel.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Checks what the agent did: it exited 0 within its limit, wrote a
/// readable notes file with only its role's kinds, the kinds the stage and
/// the outcome require, and exactly one declared outcome.
fn check_agent_run(
    h: &Hospital,
    stage: Stage<'_>,
    exit: &agent::AgentExit,
    notes_file: &Path,
) -> Result<(AgentNotes, String), String> {
    match exit.end {
        AgentEnd::Exited(0) => {}
        AgentEnd::TimedOut => {
            return Err(format!(
                "the agent was stopped at its time limit of {} (stage `{}`); its whole process group was killed",
                humantime::format_duration(stage.config.time_limit),
                stage.name
            ));
        }
        AgentEnd::Exited(code) => {
            return Err(format!(
                "the agent exited with code {code}; last lines of its stderr:\n\n```\n{}\n```",
                agent::tail(&exit.stderr, 10)
            ));
        }
        AgentEnd::Signalled(sig) => return Err(format!("the agent was killed by signal {sig}")),
    }
    let text = match std::fs::read_to_string(notes_file) {
        Ok(t) if !t.trim().is_empty() => t,
        Ok(_) | Err(_) => return Err("the agent wrote no notes to $WARD_NOTES".into()),
    };
    let notes = h.sentinels.parse_agent_notes(&text).map_err(|e| format!("$WARD_NOTES {e}"))?;
    validate_notes(&h.config, stage, &notes).map(|outcome| (notes, outcome))
}

/// The contract every run must meet, whatever the role.
pub fn validate_notes(config: &Config, stage: Stage<'_>, notes: &AgentNotes) -> Result<String, String> {
    let role = &stage.config.role;
    let writes = config.role(role).map(|r| r.writes.as_slice()).unwrap_or_default();
    let mut problems = Vec::new();
    for n in &notes.notes {
        if !writes.contains(&n.kind) {
            problems.push(format!(
                "line {}: role `{role}` may not write `{}` (it may write: {})",
                n.line,
                n.kind,
                list(writes)
            ));
        }
    }
    let outcome = match notes.outcomes.as_slice() {
        [] => {
            problems.push(format!(
                "no outcome declared; end with one of: {}",
                list(&stage.config.outcomes.keys().map(|o| format!("<!-- WARD:OUTCOME {o} -->")).collect::<Vec<_>>())
            ));
            None
        }
        [(o, line)] if !stage.config.outcomes.contains_key(o) => {
            problems.push(format!(
                "line {line}: outcome `{o}` is not an outcome of stage `{}` ({})",
                stage.name,
                list(&stage.config.outcomes.keys().collect::<Vec<_>>())
            ));
            None
        }
        [(o, _)] => Some(o.clone()),
        many => {
            problems.push(format!(
                "{} outcomes declared (lines {}); declare exactly one",
                many.len(),
                list(&many.iter().map(|(_, l)| l).collect::<Vec<_>>())
            ));
            None
        }
    };
    let mut required: Vec<&String> = stage.config.requires.iter().collect();
    if let Some(o) = &outcome {
        required.extend(stage.config.requires_for.get(o).into_iter().flatten());
    }
    for kind in required {
        if !notes.kinds().any(|k| k == kind) {
            let why =
                outcome.as_deref().filter(|o| stage.config.requires_for.get(*o).is_some_and(|k| k.contains(kind)));
            problems.push(match why {
                Some(o) => format!("outcome `{o}` requires a `{kind}` note, and there is none"),
                None => format!("stage `{}` requires a `{kind}` note, and there is none", stage.name),
            });
        }
    }
    match (problems.is_empty(), outcome) {
        (true, Some(o)) => Ok(o),
        _ => Err(problems.join("; ")),
    }
}

fn precedent_lookup_body(found: &[crate::precedent::Match<'_>]) -> String {
    if found.is_empty() {
        return "No precedent in the log matches this patient.".into();
    }
    let mut body = String::from("Precedents given to the agent, best first:\n");
    for m in found {
        body.push_str(&format!("- {} (score {:.2}): {}\n", m.entry.id, m.score, m.entry.question.trim()));
    }
    body
}

/// How long [`try_lock_issue`] keeps trying a busy lock before it concludes
/// that another run holds it, and how often it tries.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

/// Takes the per-issue stage lock (`.ward/locks/stage-<n>.lock`), or `None`
/// when another run is working on the issue.
///
/// The lock is an `flock` on an open file description. The file is opened
/// close-on-exec, but a child forked by another thread of this process (an
/// agent, git, docker) holds a copy of every descriptor between `fork` and
/// `exec`, and with it the lock: a run that released the lock an instant
/// before can then find it still held, though no run is working. Std gives
/// no way to keep a descriptor out of a child before its `exec`, so a busy
/// lock is tried again for a short, bounded time ([`LOCK_GRACE`]): a child's
/// copy goes at its `exec`, within that time; a real run holds the lock for
/// the length of a stage and is still reported as working.
pub(crate) async fn try_lock_issue(root: &Path, number: IssueNumber) -> anyhow::Result<Option<File>> {
    let dir = root.join(".ward").join("locks");
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let path = dir.join(format!("stage-{}.lock", number.0));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("could not open {}", path.display()))?;
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() >= deadline => return Ok(None),
            Err(std::fs::TryLockError::WouldBlock) => tokio::time::sleep(LOCK_RETRY).await,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("could not lock {}", path.display()));
            }
        }
    }
}

fn write_run_json(dir: &Path, value: &serde_json::Value) {
    let path = dir.join("run.json");
    if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(value).unwrap_or_default()) {
        warn!("could not write {}: {e}", path.display());
    }
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
}

/// A budget limit was reached: the notes say why, the patient goes to the chiefs.
async fn send_over_budget(
    h: &Hospital,
    issue: u64,
    stage: Stage<'_>,
    run: &str,
    breach: &crate::budget::Breach,
    usage: Option<&crate::budget::Usage>,
    agent_stopped: bool,
) -> anyhow::Result<StageResult> {
    let number = IssueNumber(issue);
    crate::budget::send_to_chief(
        &*h.forge,
        &h.config,
        number,
        stage.name,
        run,
        breach,
        usage,
        agent_stopped,
        (h.clock)(),
    )
    .await?;
    let to = Some(crate::sweep::chief_label(&h.config).to_string());
    Ok(StageResult::Refused { issue, stage: stage.name.into(), reason: breach.to_string(), to })
}

/// An ungrounded run: the label stays and the stage runs once more, or,
/// when a rerun was already ungrounded, the patient goes to the chiefs.
#[allow(clippy::too_many_arguments)]
async fn ungrounded(
    h: &Hospital,
    issue: &Issue,
    stage: Stage<'_>,
    run: &str,
    stored: Option<crate::forge::StoredChart>,
    mut batch: Vec<Note>,
    score: &crate::groundedness::Score,
    decision: crate::groundedness::Decision,
    artifacts: &Path,
) -> anyhow::Result<StageResult> {
    let number = issue.number;
    let meta = NoteMeta { run: run.into(), stage: stage.name.into(), role: ENGINE_ROLE.into(), at: (h.clock)() };
    let chief = crate::sweep::chief_label(&h.config).to_string();
    let reason = format!("its notes are not grounded (score {score}; see the GROUNDEDNESS note)");
    if decision == crate::groundedness::Decision::Rerun {
        batch.push(Note {
            kind: "REFUSAL".into(),
            meta,
            body: format!(
                "The run of stage `{}` was invalid: {reason}. The stage runs once more; the label stays.",
                stage.name
            ),
        });
        chart::store_notes(&*h.forge, &h.sentinels, number, stored, &batch).await?;
        h.forge.dispatch_stage(number, &stage.config.label).await?;
        return Ok(StageResult::Invalid {
            issue: number.0,
            stage: stage.name.into(),
            run: run.into(),
            reason,
            artifacts: artifacts.to_path_buf(),
        });
    }
    batch.push(Note {
        kind: "ESCALATION".into(),
        meta,
        body: format!(
            "Stage `{}` ran twice and both runs were ungrounded ({reason}). Moved to `{chief}`.\n\n\
             What to do: read the GROUNDEDNESS notes, then put `{}` back or take over.",
            stage.name, stage.config.label
        ),
    });
    chart::store_notes(&*h.forge, &h.sentinels, number, stored, &batch).await?;
    let label_in = stage.config.label.as_str();
    h.forge.set_labels(number, &next_labels(issue, label_in, &chief)).await?;
    Ok(StageResult::Refused { issue: number.0, stage: stage.name.into(), reason, to: Some(chief) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(root: &Path, number: IssueNumber) -> File {
        let file = OpenOptions::new()
            .write(true)
            .open(root.join(".ward/locks").join(format!("stage-{}.lock", number.0)))
            .unwrap();
        file.try_lock().unwrap();
        file
    }

    #[tokio::test]
    async fn a_lock_held_an_instant_longer_is_taken_a_lock_held_by_a_run_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let n = IssueNumber(7);
        drop(try_lock_issue(dir.path(), n).await.unwrap().expect("free"));
        // Another descriptor holds it briefly, as a forked child does until its exec.
        let brief = holder(dir.path(), n);
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(brief);
        });
        assert!(try_lock_issue(dir.path(), n).await.unwrap().is_some(), "taken once the copy is gone");
        release.join().unwrap();
        // A run holds it for its whole stage: after the grace, another run is working.
        let _run = try_lock_issue(dir.path(), n).await.unwrap().expect("free again");
        let started = std::time::Instant::now();
        assert!(try_lock_issue(dir.path(), n).await.unwrap().is_none());
        assert!(started.elapsed() >= LOCK_GRACE && started.elapsed() < LOCK_GRACE * 4, "{:?}", started.elapsed());
    }
}
