//! The charge nurse: `ward sweep`, every 30 minutes.
//!
//! One sweep lists the open patients of every stage label (cost grows with
//! pages, not with patients), looks closer only at the patients that are due
//! for a look, re-triggers the stages that stalled, escalates the patients
//! that stalled too often, repairs patients with contradictory labels, and
//! declares a lockdown when a facility fails.
//!
//! ## Where the sweep keeps its state, and why there
//!
//! Both forges offer exactly one compare-and-swap store: the charts. The
//! sweep keeps one small state file in that store under the reserved number
//! [`STATE_SLOT`] (`charts/0.md`; no issue is ever numbered 0, on GitHub or
//! locally). Compare-and-swap gives the lock (a lease with an expiry, so a
//! crashed sweep cannot wedge the ward), the resume cursor, the "watch" list
//! (when each patient is next due for a closer look) and the facility
//! counters, without an admin token and without an issue that people would
//! see in their lists. An issue or comment would work on both forges too,
//! but neither has compare-and-swap, so two sweeps could both believe they
//! hold the lock.
//!
//! ## Cost
//!
//! A patient is looked at closely (label events + chart) only when it is
//! due: `min(stall_after, time_limit + grace)` after the sweep first saw it
//! with its label, or when a previous look said so. Healthy patients
//! therefore cost nothing beyond the listing pages; a stalled patient costs
//! five calls (label events, chart, re-read, note, dispatch).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize};

use crate::chart::{ENGINE_ROLE, Note, NoteMeta, SentinelError, Sentinels};
use crate::config::{Config, Stage};
use crate::forge::{CiState, Forge, ForgeError, Issue, IssueNumber, IssueState, LabelAction, LabelEvent, StoredChart};
use crate::lockdown::{self, LOCKDOWN_LABEL};

/// The chart slot that holds the sweep's state (see the module docs).
pub const STATE_SLOT: IssueNumber = IssueNumber(0);

/// How many times a state write is retried after a compare-and-swap conflict.
const CAS_ATTEMPTS: usize = 8;

/// `sweep:` in `.github/ward.yml`. Every field has a default; the section
/// may be left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// Re-triggers of one stage (per visit of its label) before the patient
    /// goes to the chiefs. Default 2.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Actions (re-triggers, escalations, repairs) per sweep; the next sweep
    /// resumes after the last patient handled. Default 50.
    #[serde(default = "default_max_actions")]
    pub max_actions: usize,
    /// Patients looked at closely per sweep (two API calls each). Default 200.
    #[serde(default = "default_max_inspections")]
    pub max_inspections: usize,
    /// Added to a stage's `time_limit` before a run without an outcome counts
    /// as crashed (workspace set-up and clean-up run outside the agent's
    /// limit). Default 10m.
    #[serde(default = "default_grace", deserialize_with = "de_duration")]
    pub grace: Duration,
    /// How long a sweep holds its lock before another may take it. Default 15m.
    #[serde(default = "default_lock_ttl", deserialize_with = "de_duration")]
    pub lock_ttl: Duration,
    /// When the sweep declares a lockdown itself.
    #[serde(default)]
    pub facilities: FacilityConfig,
}

/// `sweep.facilities`: failures that lock the building.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilityConfig {
    /// Lock down when the agent command failed on this many consecutive runs,
    /// across patients; 0 turns the check off. Default 5.
    #[serde(default = "default_agent_failures")]
    pub agent_failures: u32,
    /// The branch whose CI is watched. Default `main`.
    #[serde(default = "default_base_branch")]
    pub base_branch: String,
    /// Lock down when the base branch's CI has been red this long. Default 6h.
    #[serde(default = "default_ci_red_for", deserialize_with = "de_duration")]
    pub ci_red_for: Duration,
    /// Lock down when the Docker probe fails. Default true.
    #[serde(default = "default_true")]
    pub docker: bool,
}

fn default_max_retries() -> u32 {
    2
}
fn default_max_actions() -> usize {
    50
}
fn default_max_inspections() -> usize {
    200
}
fn default_grace() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_lock_ttl() -> Duration {
    Duration::from_secs(15 * 60)
}
fn default_agent_failures() -> u32 {
    5
}
fn default_base_branch() -> String {
    "main".into()
}
fn default_ci_red_for() -> Duration {
    Duration::from_secs(6 * 3600)
}
fn default_true() -> bool {
    true
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            max_retries: default_max_retries(),
            max_actions: default_max_actions(),
            max_inspections: default_max_inspections(),
            grace: default_grace(),
            lock_ttl: default_lock_ttl(),
            facilities: FacilityConfig::default(),
        }
    }
}

impl Default for FacilityConfig {
    fn default() -> Self {
        Self {
            agent_failures: default_agent_failures(),
            base_branch: default_base_branch(),
            ci_red_for: default_ci_red_for(),
            docker: default_true(),
        }
    }
}

/// A duration written like `15m` or `1h 30m`.
pub(crate) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map_err(|e| serde::de::Error::custom(format!("`{s}` is not a duration like `15m` or `1h 30m`: {e}")))
}

impl SweepConfig {
    /// The semantic pass: (path, message) for every problem.
    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.max_actions == 0 {
            p.push(("departments.sweep.max_actions".into(), "must be at least 1, or the sweep could never act".into()));
        }
        if self.max_inspections < self.max_actions {
            p.push((
                "departments.sweep.max_inspections".into(),
                format!("must be at least `max_actions` ({}), since every action follows a look", self.max_actions),
            ));
        }
        if self.lock_ttl < Duration::from_secs(60) {
            p.push((
                "departments.sweep.lock_ttl".into(),
                "must be at least 1m so a sweep can finish under its lock".into(),
            ));
        }
        if self.facilities.base_branch.trim().is_empty() {
            p.push(("departments.sweep.facilities.base_branch".into(), "must name a branch, e.g. `main`".into()));
        }
        if !config.is_ward_label(chief_label(config)) {
            p.push((
                "sweep".into(),
                format!("the sweep escalates to `{}`, which is not declared under `labels`", chief_label(config)),
            ));
        }
        if !config.is_ward_label(LOCKDOWN_LABEL) {
            p.push(("labels".into(), format!("`{LOCKDOWN_LABEL}` must be declared: infection control uses it")));
        }
        p
    }
}

/// Where escalated patients go: the target of the first `escalate` outcome,
/// else `ward:chief`.
pub fn chief_label(config: &Config) -> &str {
    config.stages().find_map(|s| s.config.outcomes.get("escalate")).map(String::as_str).unwrap_or("ward:chief")
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

/// What the sweep remembers between runs (stored at [`STATE_SLOT`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepState {
    #[serde(default)]
    pub lock: Option<SweepLock>,
    /// The last patient handled; the next sweep starts after it.
    #[serde(default)]
    pub cursor: u64,
    /// Patient -> (the stage label it had, unix second it is next due).
    #[serde(default)]
    pub watch: BTreeMap<u64, (String, i64)>,
    /// When the base branch's CI was first seen red (cleared when green).
    #[serde(default)]
    pub base_red_since: Option<DateTime<Utc>>,
    #[serde(default)]
    pub agent: AgentHealth,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepLock {
    pub holder: String,
    pub expires: DateTime<Utc>,
}

/// The agent command's recent record across patients, written by stage runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentHealth {
    pub consecutive_failures: u32,
    /// The failed runs of the current streak, newest last (at most
    /// [`AgentHealth::KEEP`]), named in the lockdown's reason.
    #[serde(default)]
    pub recent: Vec<AgentRun>,
}

impl AgentHealth {
    pub const KEEP: usize = 20;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRun {
    pub issue: IssueNumber,
    pub stage: String,
    pub run: String,
    pub ok: bool,
    pub at: DateTime<Utc>,
}

const STATE_MARK: &str = "<!-- ward-sweep-state v1 -->";

impl SweepState {
    pub fn render(&self) -> String {
        let json = serde_json::to_string(self).expect("sweep state serialises");
        format!(
            "# ward sweep state\n\n{STATE_MARK}\n\nWritten by `ward sweep` and by stage runs, always through \
             compare-and-swap. Do not edit by hand; delete the file to make the next sweep start afresh.\n\n\
             ```json\n{json}\n```\n"
        )
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.contains(STATE_MARK) {
            return Err(format!("it lacks the line `{STATE_MARK}`"));
        }
        let start = text.find("```json\n").ok_or("it has no ```json block")? + "```json\n".len();
        let end = text[start..].find("\n```").ok_or("its ```json block is not closed")? + start;
        serde_json::from_str(&text[start..end]).map_err(|e| format!("its JSON is invalid: {e}"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("could not {action}: {source}")]
    Forge {
        action: String,
        #[source]
        source: ForgeError,
    },
    #[error(
        "the sweep state (chart slot {STATE_SLOT}, `charts/0.md`) is unreadable: {0}; delete that file and the \
         next sweep rebuilds it"
    )]
    State(String),
    #[error(
        "the sweep state kept changing under this sweep ({CAS_ATTEMPTS} compare-and-swap conflicts in a row); \
         run the sweep again"
    )]
    Contended,
    #[error(transparent)]
    Lockdown(#[from] lockdown::LockdownError),
    #[error(
        "the sweep lock was taken by `{holder}` while this sweep ran (it outlived its lease of `sweep.lock_ttl`); \
         its cursor was not saved; raise `sweep.lock_ttl` or lower `sweep.max_actions`"
    )]
    LockLost { holder: String },
}

fn forge_err(action: impl Into<String>) -> impl FnOnce(ForgeError) -> SweepError {
    let action = action.into();
    move |source| SweepError::Forge { action, source }
}

/// Reads the state; `None` version when it was never written.
pub async fn load_state(forge: &dyn Forge) -> Result<(SweepState, Option<String>), SweepError> {
    match forge.read_chart(STATE_SLOT).await.map_err(forge_err("read the sweep state"))? {
        None => Ok((SweepState::default(), None)),
        Some(StoredChart { text, version }) => {
            Ok((SweepState::parse(&text).map_err(SweepError::State)?, Some(version)))
        }
    }
}

/// Read-modify-write of the state with compare-and-swap, re-applying `f` on
/// a fresh copy after every conflict. `f` returns `Err` to abort unchanged.
pub async fn update_state<T, E>(
    forge: &dyn Forge,
    mut f: impl FnMut(&mut SweepState) -> Result<T, E>,
) -> Result<Result<T, E>, SweepError> {
    for _ in 0..CAS_ATTEMPTS {
        let (mut state, version) = load_state(forge).await?;
        let out = match f(&mut state) {
            Ok(out) => out,
            Err(e) => return Ok(Err(e)),
        };
        match forge.write_chart(STATE_SLOT, &state.render(), version.as_deref()).await {
            Ok(_) => return Ok(Ok(out)),
            Err(ForgeError::ChartConflict(_)) => continue,
            Err(e) => return Err(forge_err("write the sweep state")(e)),
        }
    }
    Err(SweepError::Contended)
}

/// Called by the stage runner when an agent run fails (a success may be
/// recorded too, and resets the streak): keeps the failure streak that lets
/// the sweep lock the building when the agent is broken. Successful runs
/// need not call it: the sweep counts patients moving between two sweeps as
/// progress, which ends the streak. Returns the streak.
pub async fn record_agent_run(forge: &dyn Forge, run: AgentRun) -> Result<u32, SweepError> {
    let out = update_state(forge, |s| {
        let streak = s.agent.consecutive_failures;
        if (run.ok && streak == 0) || s.agent.recent.iter().any(|r| r.run == run.run) {
            return Err(streak); // nothing changes: no write
        }
        if run.ok {
            s.agent.consecutive_failures = 0;
            s.agent.recent.clear();
        } else {
            s.agent.consecutive_failures += 1;
            s.agent.recent.push(run.clone());
            let excess = s.agent.recent.len().saturating_sub(AgentHealth::KEEP);
            s.agent.recent.drain(..excess);
        }
        Ok(s.agent.consecutive_failures)
    })
    .await?;
    Ok(out.unwrap_or_else(|unchanged| unchanged))
}

// ---------------------------------------------------------------------------
// Verdicts (pure)
// ---------------------------------------------------------------------------

/// Why a patient counts as stalled.
#[derive(Debug, Clone, PartialEq)]
pub enum Stall {
    /// No run of the stage started since its label was applied (or since the
    /// last re-trigger), and that was longer ago than `stall_after`.
    NoRun { since: DateTime<Utc> },
    /// A run wrote its ADMISSION but no OUTCOME, and is past its limit.
    Crashed { run: String, started: DateTime<Utc> },
    /// A run finished but the label stayed, for longer than `stall_after`.
    LabelStayed { run: String, finished: DateTime<Utc> },
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |d: &DateTime<Utc>| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        match self {
            Stall::NoRun { since } => write!(f, "no run started since {}", t(since)),
            Stall::Crashed { run, started } => {
                write!(f, "run `{run}` started at {} and never wrote an outcome (crashed)", t(started))
            }
            Stall::LabelStayed { run, finished } => {
                write!(f, "run `{run}` finished at {} but the label did not move", t(finished))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing to do; look again at `next_check`.
    Healthy {
        next_check: DateTime<Utc>,
    },
    Stalled {
        why: Stall,
        retries: u32,
    },
}

fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// When the label now on the patient was last applied, from its events.
pub fn label_applied_at(events: &[LabelEvent], label: &str) -> Option<DateTime<Utc>> {
    events.iter().filter(|e| e.label == label && e.action == LabelAction::Added).map(|e| e.at).max()
}

/// Decides whether a patient in `stage` is stalled, from when its label was
/// applied and its chart. Pure: time is `now`.
pub fn assess(
    stage: Stage<'_>,
    label_since: DateTime<Utc>,
    notes: &[Note],
    now: DateTime<Utc>,
    grace: Duration,
) -> Verdict {
    let in_visit = |n: &&Note| n.meta.stage == stage.name && n.meta.at >= label_since;
    let retries = notes.iter().filter(in_visit).filter(|n| n.kind == "SWEEP").count() as u32;
    let last_retrigger = notes.iter().filter(in_visit).filter(|n| n.kind == "SWEEP").map(|n| n.meta.at).max();
    let since = last_retrigger.map_or(label_since, |t| t.max(label_since));
    let stall_at = since + chrono_of(stage.config.stall_after);
    let limit = chrono_of(stage.config.time_limit) + chrono_of(grace);
    let latest_run = notes.iter().filter(in_visit).rfind(|n| n.kind == "ADMISSION");
    let Some(run) = latest_run else {
        return if now >= stall_at {
            Verdict::Stalled { why: Stall::NoRun { since }, retries }
        } else {
            Verdict::Healthy { next_check: stall_at }
        };
    };
    let run_id = run.meta.run.clone();
    let started = run.meta.at;
    if last_retrigger.is_some_and(|t| t >= started) {
        // The sweep already re-triggered after this run; what counts now is
        // whether a new run started since, which it did not.
        return if now >= stall_at {
            Verdict::Stalled { why: Stall::NoRun { since }, retries }
        } else {
            Verdict::Healthy { next_check: stall_at }
        };
    }
    // A run ends with its OUTCOME, or with a REFUSAL when the engine found it invalid.
    let outcome = notes.iter().find(|n| (n.kind == "OUTCOME" || n.kind == "REFUSAL") && n.meta.run == run_id);
    let ends = started + limit;
    match outcome {
        None if now >= ends => Verdict::Stalled { why: Stall::Crashed { run: run_id, started }, retries },
        None => Verdict::Healthy { next_check: ends },
        Some(out) => {
            let stall_at = stall_at.max(started + chrono_of(stage.config.stall_after)).max(ends);
            if now >= stall_at {
                Verdict::Stalled { why: Stall::LabelStayed { run: run_id, finished: out.meta.at }, retries }
            } else {
                Verdict::Healthy { next_check: stall_at }
            }
        }
    }
}

/// What a repair should do with a patient whose labels contradict each other.
#[derive(Debug, Clone, PartialEq)]
pub enum Repair {
    /// Keep this ward label, remove the other ward labels.
    Keep { label: String, because: String },
    /// The right state cannot be known: send to the chiefs.
    Escalate { because: String },
}

/// Pure: decides which of `found` (the patient's ward labels) is its state.
/// The chart's latest OUTCOME names the label the engine meant to set; it
/// wins unless another of the labels was put on after that outcome.
pub fn decide_repair(config: &Config, found: &[String], events: &[LabelEvent], notes: &[Note]) -> Repair {
    let state_labels: Vec<&String> = found.iter().filter(|l| config.is_ward_label(l)).collect();
    let orphans: Vec<&String> = found.iter().filter(|l| !config.is_ward_label(l)).collect();
    let last_outcome = notes.iter().rfind(|n| n.kind == "OUTCOME");
    let intended = last_outcome.and_then(|o| {
        let stage = config.stage(&o.meta.stage)?;
        let target = stage.config.outcomes.get(o.body.trim())?;
        Some((target.clone(), o))
    });
    if let Some((target, outcome)) = &intended
        && state_labels.contains(&target)
    {
        let later: Vec<&&String> = state_labels
            .iter()
            .filter(|l| **l != target)
            .filter(|l| label_applied_at(events, l).is_some_and(|t| t > outcome.meta.at))
            .collect();
        if later.is_empty() {
            return Repair::Keep {
                label: target.clone(),
                because: format!(
                    "the chart's last outcome (`{}` of stage `{}`, run `{}`) leads to `{target}`",
                    outcome.body.trim(),
                    outcome.meta.stage,
                    outcome.meta.run
                ),
            };
        }
        return Repair::Escalate {
            because: format!(
                "the chart's last outcome leads to `{target}`, but {} was put on after it",
                later.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
            ),
        };
    }
    if state_labels.len() == 1 {
        return Repair::Keep {
            label: state_labels[0].clone(),
            because: format!(
                "{} start no stage in `.github/ward.yml`; `{}` is the only label ward knows",
                orphans.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", "),
                state_labels[0]
            ),
        };
    }
    Repair::Escalate {
        because: format!(
            "the patient carries {} and the chart does not say which is right",
            found.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
        ),
    }
}

// ---------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------

/// What the sweep could not probe through the forge: passed in by the caller.
#[derive(Debug, Clone, Default)]
pub struct Facilities {
    /// Result of the Docker probe; `None` when not probed.
    pub docker_reachable: Option<Result<(), String>>,
}

/// Cleans up what crashed runs left (containers, worktrees, `ward/`
/// branches of closed issues). The workspace module provides it.
#[async_trait]
pub trait Reaper: Send + Sync {
    /// One line per thing removed, or an error sentence.
    async fn reap(&self, forge: &dyn Forge, now: DateTime<Utc>) -> Result<Vec<String>, String>;
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Retriggered { issue: IssueNumber, stage: String, attempt: u32, why: String },
    Escalated { issue: IssueNumber, stage: String, why: String },
    Repaired { issue: IssueNumber, kept: String, removed: Vec<String>, why: String },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Retriggered { issue, stage, attempt, why } => {
                write!(f, "{issue}: re-triggered stage `{stage}` (attempt {attempt}): {why}")
            }
            Action::Escalated { issue, stage, why } => write!(f, "{issue}: escalated from stage `{stage}`: {why}"),
            Action::Repaired { issue, kept, removed, why } => {
                write!(f, "{issue}: kept `{kept}`, removed {}: {why}", removed.join(", "))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum SweepOutcome {
    /// The sweep walked the wards.
    Done,
    /// Another sweep holds the lock; nothing was done.
    Busy { holder: String, expires: DateTime<Utc> },
    /// A lockdown is in force (or was just declared); no stage was touched.
    Lockdown { issue: IssueNumber, reason: String, declared_now: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SweepReport {
    pub outcome: SweepOutcome,
    /// Patients found under stage labels.
    pub listed: usize,
    /// Patients due for a closer look.
    pub due: usize,
    pub inspected: usize,
    pub actions: Vec<Action>,
    /// Patients that moved on between the listing and the action.
    pub moved_on: Vec<IssueNumber>,
    /// Per-patient failures that did not stop the sweep.
    pub problems: Vec<String>,
    /// Reaper output.
    pub reaped: Vec<String>,
    /// True when a cap stopped the sweep before every due patient was seen.
    pub capped: bool,
    pub cursor: u64,
}

impl SweepReport {
    fn new(outcome: SweepOutcome) -> Self {
        Self {
            outcome,
            listed: 0,
            due: 0,
            inspected: 0,
            actions: Vec::new(),
            moved_on: Vec::new(),
            problems: Vec::new(),
            reaped: Vec::new(),
            capped: false,
            cursor: 0,
        }
    }
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            SweepOutcome::Busy { holder, expires } => {
                return writeln!(f, "another sweep (`{holder}`) holds the lock until {expires}; nothing done");
            }
            SweepOutcome::Lockdown { issue, reason, declared_now } => {
                let how = if *declared_now { "declared now" } else { "in force" };
                writeln!(f, "lockdown {how} ({issue}): {reason}; no stage was re-triggered")?;
            }
            SweepOutcome::Done => {}
        }
        writeln!(
            f,
            "listed {} patients, {} due, {} looked at, {} actions{}",
            self.listed,
            self.due,
            self.inspected,
            self.actions.len(),
            if self.capped { " (cap reached; the next sweep resumes after the cursor)" } else { "" }
        )?;
        for a in &self.actions {
            writeln!(f, "- {a}")?;
        }
        for n in &self.moved_on {
            writeln!(f, "- {n}: moved on while the sweep looked; left alone")?;
        }
        for p in &self.problems {
            writeln!(f, "- problem: {p}")?;
        }
        for r in &self.reaped {
            writeln!(f, "- reaped: {r}")?;
        }
        Ok(())
    }
}

static SWEEP_SEQ: AtomicU64 = AtomicU64::new(0);

fn sweep_run_id(now: DateTime<Utc>) -> String {
    format!(
        "sweep-{}-{}-{}",
        now.format("%Y%m%dT%H%M%SZ"),
        std::process::id(),
        SWEEP_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// One sweep. Errors are for the sweep as a whole (state, lock); a failure
/// on one patient is recorded in [`SweepReport::problems`] and the sweep
/// moves on.
pub async fn sweep(
    forge: &dyn Forge,
    config: &Config,
    now: DateTime<Utc>,
    facilities: &Facilities,
    reaper: Option<&dyn Reaper>,
) -> Result<SweepReport, SweepError> {
    let run = sweep_run_id(now);
    let ttl = chrono_of(config.departments.sweep.lock_ttl);
    let acquired = update_state(forge, |s| match &s.lock {
        Some(l) if l.expires > now && l.holder != run => Err((l.holder.clone(), l.expires)),
        _ => {
            s.lock = Some(SweepLock { holder: run.clone(), expires: now + ttl });
            Ok(s.clone())
        }
    })
    .await?;
    let state = match acquired {
        Ok(state) => state,
        Err((holder, expires)) => return Ok(SweepReport::new(SweepOutcome::Busy { holder, expires })),
    };
    let mut walk = Walk {
        forge,
        config,
        now,
        run: run.clone(),
        sentinels: Sentinels::new(&config.sentinel_prefix),
        consumed: None,
    };
    let result = walk.run(state, facilities, reaper).await;
    // Release the lock (and save what was learnt) even when the walk failed.
    let (report, new_state) = match result {
        Ok(pair) => pair,
        Err(e) => {
            let _ = update_state(forge, |s| {
                if s.lock.as_ref().is_some_and(|l| l.holder == run) {
                    s.lock = None;
                }
                Ok::<_, ()>(())
            })
            .await;
            return Err(e);
        }
    };
    let consumed = walk.consumed.take();
    let saved = update_state(forge, |s| {
        match &s.lock {
            Some(l) if l.holder != run => return Err(l.holder.clone()),
            _ => {}
        }
        s.lock = None;
        s.cursor = new_state.cursor;
        s.watch = new_state.watch.clone();
        s.base_red_since = new_state.base_red_since;
        if let Some((streak, runs)) = &consumed {
            s.agent.consecutive_failures = s.agent.consecutive_failures.saturating_sub(*streak);
            s.agent.recent.retain(|r| !runs.contains(&r.run));
        }
        Ok(())
    })
    .await?;
    if let Err(holder) = saved {
        return Err(SweepError::LockLost { holder });
    }
    Ok(report)
}

/// What happened to one patient looked at closely.
enum Looked {
    Acted(Action, Option<(String, i64)>),
    Healthy(String, DateTime<Utc>),
    MovedOn,
}

struct Walk<'a> {
    forge: &'a dyn Forge,
    config: &'a Config,
    now: DateTime<Utc>,
    run: String,
    sentinels: Sentinels,
    /// Agent failures this sweep accounted for (the streak as read, and its
    /// runs): progress seen, or a lockdown declared. Failures stage runs
    /// record while the sweep runs are kept.
    consumed: Option<(u32, Vec<String>)>,
}

impl Walk<'_> {
    async fn run(
        &mut self,
        mut state: SweepState,
        facilities: &Facilities,
        reaper: Option<&dyn Reaper>,
    ) -> Result<(SweepReport, SweepState), SweepError> {
        let mut report = SweepReport::new(SweepOutcome::Done);
        report.cursor = state.cursor;
        if let Some(reaper) = reaper {
            match reaper.reap(self.forge, self.now).await {
                Ok(lines) => report.reaped = lines,
                Err(e) => report.problems.push(format!("reaping failed: {e}")),
            }
        }

        // The listing: one paginated query per stage label.
        let mut listed: BTreeMap<u64, Issue> = BTreeMap::new();
        for stage in self.config.stages() {
            let issues = self
                .forge
                .open_issues_with_label(&stage.config.label)
                .await
                .map_err(forge_err(format!("list the open issues labeled `{}`", stage.config.label)))?;
            for issue in issues {
                listed.entry(issue.number.0).or_insert(issue);
            }
        }
        report.listed = listed.len();

        // Progress since the last sweep (a watched patient changed label or
        // left the stages, not by the sweep's hand) means agent runs
        // succeeded: the failures recorded so far were not consecutive.
        let progressed =
            state.watch.iter().any(|(n, (key, _))| listed.get(n).is_none_or(|i| self.state_key(i) != *key));
        if progressed && state.agent.consecutive_failures > 0 {
            self.consume_streak(&mut state);
        }
        let locked = self.check_facilities(&mut state, facilities, &mut report).await?;

        // Who is due for a closer look.
        let mut watch: BTreeMap<u64, (String, i64)> = BTreeMap::new();
        let mut due: Vec<u64> = Vec::new();
        for (n, issue) in &listed {
            let key = self.state_key(issue);
            let entry = match state.watch.get(n) {
                Some((label, at)) if *label == key => (key, *at),
                _ if self.needs_repair(issue) => (key, self.now.timestamp()),
                _ => {
                    let first = self.first_look_after(issue);
                    (key, (self.now + first).timestamp())
                }
            };
            if entry.1 <= self.now.timestamp() {
                due.push(*n);
            }
            watch.insert(*n, entry);
        }
        report.due = due.len();
        if let Some(outcome) = locked {
            // Keep watching (so stalled patients are revived as soon as the
            // lockdown is lifted), but touch nobody.
            report.outcome = outcome;
            state.watch = watch;
            return Ok((report, state));
        }

        // Resume after the cursor, wrapping round.
        let split = due.partition_point(|n| *n <= state.cursor);
        due.rotate_left(split);
        let cap = &self.config.departments.sweep;
        for n in due {
            if report.actions.len() >= cap.max_actions || report.inspected >= cap.max_inspections {
                report.capped = true;
                break;
            }
            report.inspected += 1;
            state.cursor = n;
            let issue = &listed[&n];
            match self.look(issue).await {
                Ok(Looked::Acted(action, next)) => {
                    report.actions.push(action);
                    match next {
                        Some(entry) => watch.insert(n, entry),
                        None => watch.remove(&n),
                    };
                }
                Ok(Looked::Healthy(key, next)) => {
                    watch.insert(n, (key, next.timestamp()));
                }
                Ok(Looked::MovedOn) => {
                    report.moved_on.push(issue.number);
                    watch.remove(&n);
                }
                Err(e) => {
                    report.problems.push(format!("{}: {e:#}", issue.number));
                    let key = self.state_key(issue);
                    let retry = self.now + chrono_of(self.config.departments.sweep.lock_ttl);
                    watch.insert(n, (key, retry.timestamp()));
                }
            }
        }
        report.cursor = state.cursor;
        state.watch = watch;
        Ok((report, state))
    }

    /// Docker, the agent's failure streak, the base branch's CI: any failure
    /// declares a lockdown (or finds one in force).
    async fn check_facilities(
        &mut self,
        state: &mut SweepState,
        facilities: &Facilities,
        report: &mut SweepReport,
    ) -> Result<Option<SweepOutcome>, SweepError> {
        let fc = &self.config.departments.sweep.facilities;
        // A CI status that cannot be read is a problem to report, not a reason
        // to stop walking the wards.
        let checks = match self.forge.ci_status(&fc.base_branch).await {
            Ok(ci) => {
                match ci.state {
                    CiState::Failure => {
                        state.base_red_since.get_or_insert(self.now);
                    }
                    CiState::Success => state.base_red_since = None,
                    CiState::Pending | CiState::Missing => {}
                }
                ci.checks
            }
            Err(e) => {
                report.problems.push(format!("could not read the CI status of branch `{}`: {e}", fc.base_branch));
                Vec::new()
            }
        };
        let active = lockdown::active_lockdown(self.forge).await?;
        if let Some(l) = active {
            return Ok(Some(SweepOutcome::Lockdown { issue: l.issue, reason: l.reason, declared_now: false }));
        }
        let mut failures = Vec::new();
        if fc.docker
            && let Some(Err(e)) = &facilities.docker_reachable
        {
            failures.push(format!("Docker is not reachable: {e}"));
        }
        if fc.agent_failures > 0 && state.agent.consecutive_failures >= fc.agent_failures {
            let last: Vec<String> = state
                .agent
                .recent
                .iter()
                .rev()
                .take(state.agent.consecutive_failures as usize)
                .map(|r| format!("{} `{}` run `{}`", r.issue, r.stage, r.run))
                .collect();
            failures.push(format!(
                "the agent command failed on {} consecutive runs across patients ({})",
                state.agent.consecutive_failures,
                last.join("; ")
            ));
        }
        if let Some(since) = state.base_red_since
            && self.now - since >= chrono_of(fc.ci_red_for)
        {
            failures.push(format!(
                "CI on `{}` has been red since {} ({})",
                fc.base_branch,
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                checks.join(", ")
            ));
        }
        if failures.is_empty() {
            return Ok(None);
        }
        let reason = failures.join("; ");
        let (declared, _) = lockdown::declare(self.forge, &reason, self.forge.engine_account(), self.now).await?;
        // The declaration consumed these signals; a lifted lockdown starts afresh.
        self.consume_streak(state);
        state.base_red_since = None;
        report.problems.push(format!("declared lockdown {}: {reason}", declared.issue));
        Ok(Some(SweepOutcome::Lockdown { issue: declared.issue, reason, declared_now: true }))
    }

    fn consume_streak(&mut self, state: &mut SweepState) {
        let (streak, runs) = self.consumed.get_or_insert_with(|| (0, Vec::new()));
        *streak += state.agent.consecutive_failures;
        runs.extend(state.agent.recent.iter().map(|r| r.run.clone()));
        state.agent.consecutive_failures = 0;
        state.agent.recent.clear();
    }

    /// The ward labels of a patient, sorted and joined: its "where".
    fn state_key(&self, issue: &Issue) -> String {
        let mut labels: Vec<&str> = issue.labels.iter().map(String::as_str).filter(|l| self.is_wardish(l)).collect();
        labels.sort_unstable();
        labels.join(",")
    }

    /// Declared ward labels, and undeclared labels in ward's namespace
    /// (`ward:` when the admission label is `ward:admit`). Not the lockdown label.
    fn is_wardish(&self, label: &str) -> bool {
        if label == LOCKDOWN_LABEL {
            return false;
        }
        self.config.is_ward_label(label) || self.namespace().is_some_and(|ns| label.starts_with(ns))
    }

    fn namespace(&self) -> Option<&str> {
        let admission = self.config.admission.as_str();
        admission.find(':').map(|i| &admission[..=i])
    }

    fn wardish_labels(&self, issue: &Issue) -> Vec<String> {
        issue.labels.iter().filter(|l| self.is_wardish(l)).cloned().collect()
    }

    fn needs_repair(&self, issue: &Issue) -> bool {
        let labels = self.wardish_labels(issue);
        labels.len() > 1 || labels.iter().any(|l| !self.config.is_ward_label(l))
    }

    /// How long after first seeing a patient in a stage the sweep looks closer.
    fn first_look_after(&self, issue: &Issue) -> chrono::Duration {
        let stage = issue.labels.iter().find_map(|l| self.config.stage_by_label(l));
        stage.map_or(chrono::Duration::zero(), |s| {
            chrono_of(s.config.stall_after)
                .min(chrono_of(s.config.time_limit) + chrono_of(self.config.departments.sweep.grace))
        })
    }

    async fn look(&self, listed: &Issue) -> anyhow::Result<Looked> {
        use anyhow::Context as _;
        let n = listed.number;
        let events =
            self.forge.label_events(n).await.with_context(|| format!("could not read the label events of {n}"))?;
        let mut chart = self.forge.read_chart(n).await.with_context(|| format!("could not read the chart of {n}"))?;
        if self.needs_repair(listed) {
            return self.repair(listed, &events, chart).await;
        }
        let Some(stage) = listed.labels.iter().find_map(|l| self.config.stage_by_label(l)) else {
            return Ok(Looked::MovedOn);
        };
        let label_since = label_applied_at(&events, &stage.config.label).unwrap_or(DateTime::<Utc>::MIN_UTC);
        for _ in 0..CAS_ATTEMPTS {
            let notes = self.parse(n, chart.as_ref())?;
            let (why, retries) = match assess(stage, label_since, &notes, self.now, self.config.departments.sweep.grace)
            {
                Verdict::Healthy { next_check } => return Ok(Looked::Healthy(self.state_key(listed), next_check)),
                Verdict::Stalled { why, retries } => (why, retries),
            };
            // Re-read before acting: a restart must never redo work that moved on.
            let fresh = self.forge.issue(n).await.with_context(|| format!("could not re-read {n}"))?;
            if fresh.state != IssueState::Open || self.state_key(&fresh) != self.state_key(listed) {
                return Ok(Looked::MovedOn);
            }
            let escalate = retries >= self.config.departments.sweep.max_retries;
            let note = if escalate {
                self.escalation_note(stage, &why, retries, label_since, &notes)
            } else {
                self.sweep_note(stage, &why, retries + 1)
            };
            match self.write_note(n, chart.as_ref(), note).await? {
                Written::Conflict(now_stored) => {
                    chart = now_stored;
                    continue;
                }
                Written::Done => {}
            }
            if escalate {
                let chief = chief_label(self.config).to_string();
                // Re-read once more right before the label write: set_labels replaces the set.
                let fresh = self.forge.issue(n).await.with_context(|| format!("could not re-read {n}"))?;
                if fresh.state != IssueState::Open || self.state_key(&fresh) != self.state_key(listed) {
                    return Ok(Looked::MovedOn);
                }
                let labels = self.replace_ward_labels(&fresh, &chief);
                self.forge
                    .set_labels(n, &labels)
                    .await
                    .with_context(|| format!("could not move {n} to `{chief}` after writing its ESCALATION note"))?;
                return Ok(Looked::Acted(
                    Action::Escalated {
                        issue: n,
                        stage: stage.name.into(),
                        why: format!("{why}; {retries} re-triggers did not help"),
                    },
                    None,
                ));
            }
            self.forge
                .dispatch_stage(n, &stage.config.label)
                .await
                .with_context(|| format!("could not dispatch stage `{}` for {n}", stage.name))?;
            let next = self.now + chrono_of(stage.config.stall_after);
            return Ok(Looked::Acted(
                Action::Retriggered { issue: n, stage: stage.name.into(), attempt: retries + 1, why: why.to_string() },
                Some((self.state_key(listed), next.timestamp())),
            ));
        }
        anyhow::bail!("the chart of {n} kept changing while the sweep wrote to it; the next sweep will look again")
    }

    async fn repair(
        &self,
        listed: &Issue,
        events: &[LabelEvent],
        mut chart: Option<StoredChart>,
    ) -> anyhow::Result<Looked> {
        use anyhow::Context as _;
        let n = listed.number;
        let found = self.wardish_labels(listed);
        for _ in 0..CAS_ATTEMPTS {
            let notes = self.parse(n, chart.as_ref())?;
            let decision = decide_repair(self.config, &found, events, &notes);
            let fresh = self.forge.issue(n).await.with_context(|| format!("could not re-read {n}"))?;
            if fresh.state != IssueState::Open || self.state_key(&fresh) != self.state_key(listed) {
                return Ok(Looked::MovedOn);
            }
            let (keep, why, kind) = match &decision {
                Repair::Keep { label, because } => (label.clone(), because.clone(), "SWEEP"),
                Repair::Escalate { because } => (chief_label(self.config).to_string(), because.clone(), "ESCALATION"),
            };
            let removed: Vec<String> = found.iter().filter(|l| **l != keep).cloned().collect();
            let stage_name = found.iter().find_map(|l| self.config.stage_by_label(l)).map_or("sweep", |s| s.name);
            let body = match &decision {
                Repair::Keep { .. } => format!(
                    "Repaired labels: the patient carried {}. Kept `{keep}`, removed {}, because {why}.",
                    list(&found),
                    list(&removed)
                ),
                Repair::Escalate { .. } => format!(
                    "Escalated by the charge nurse: the patient carried {}, and {why}. Moved to `{keep}`.\n\n\
                     What to do: read the chart, decide where the patient belongs, and apply that label.",
                    list(&found)
                ),
            };
            let note = self.note(kind, stage_name, body);
            match self.write_note(n, chart.as_ref(), note).await? {
                Written::Conflict(now_stored) => {
                    chart = now_stored;
                    continue;
                }
                Written::Done => {}
            }
            let labels = self.replace_ward_labels(&fresh, &keep);
            self.forge.set_labels(n, &labels).await.with_context(|| format!("could not repair the labels of {n}"))?;
            let action = match decision {
                Repair::Keep { .. } => Action::Repaired { issue: n, kept: keep, removed, why },
                Repair::Escalate { .. } => Action::Escalated { issue: n, stage: stage_name.into(), why },
            };
            return Ok(Looked::Acted(action, None));
        }
        anyhow::bail!("the chart of {n} kept changing while the sweep wrote to it; the next sweep will look again")
    }

    fn parse(&self, n: IssueNumber, chart: Option<&StoredChart>) -> anyhow::Result<Vec<Note>> {
        match chart {
            None => Ok(Vec::new()),
            Some(c) => self.sentinels.parse_chart(&c.text).map_err(|e: SentinelError| {
                anyhow::anyhow!("the chart of {n} is not readable ({e}); repair it by hand, the sweep left {n} alone")
            }),
        }
    }

    /// The issue's labels with every ward label replaced by `keep`.
    fn replace_ward_labels(&self, issue: &Issue, keep: &str) -> Vec<String> {
        let mut labels: Vec<String> = issue.labels.iter().filter(|l| !self.is_wardish(l)).cloned().collect();
        labels.push(keep.to_string());
        labels
    }

    fn note(&self, kind: &str, stage: &str, body: String) -> Note {
        Note {
            kind: kind.into(),
            meta: NoteMeta { run: self.run.clone(), stage: stage.into(), role: ENGINE_ROLE.into(), at: self.now },
            body,
        }
    }

    fn sweep_note(&self, stage: Stage<'_>, why: &Stall, attempt: u32) -> Note {
        self.note(
            "SWEEP",
            stage.name,
            format!(
                "Stalled in `{}`: {why}. Re-triggered the stage (attempt {attempt} of {}).",
                stage.config.label, self.config.departments.sweep.max_retries
            ),
        )
    }

    fn escalation_note(
        &self,
        stage: Stage<'_>,
        why: &Stall,
        retries: u32,
        label_since: DateTime<Utc>,
        notes: &[Note],
    ) -> Note {
        let tried: Vec<String> = notes
            .iter()
            .filter(|n| n.kind == "SWEEP" && n.meta.stage == stage.name && n.meta.at >= label_since)
            .map(|n| format!("- {} (`{}`): {}", fmt_time(n.meta.at), n.meta.run, n.body.lines().next().unwrap_or("")))
            .collect();
        self.note(
            "ESCALATION",
            stage.name,
            format!(
                "Escalated by the charge nurse: stage `{}` stalled again ({why}) after {retries} re-triggers \
                 since `{}` was applied at {}.\n\nWhat was tried:\n{}\n\nWhat to do: look at this patient's \
                 workflow runs for the failure, fix it, then put `{}` back to restart the stage.",
                stage.name,
                stage.config.label,
                fmt_time(label_since),
                if tried.is_empty() { "- nothing (`sweep.max_retries` is 0)".to_string() } else { tried.join("\n") },
                stage.config.label
            ),
        )
    }

    async fn write_note(&self, n: IssueNumber, chart: Option<&StoredChart>, note: Note) -> anyhow::Result<Written> {
        use anyhow::Context as _;
        let text = self
            .sentinels
            .append(n, chart.map(|c| c.text.as_str()), &[note])
            .with_context(|| format!("could not append to the chart of {n}"))?;
        let Some(text) = text else { return Ok(Written::Done) };
        match self.forge.write_chart(n, &text, chart.map(|c| c.version.as_str())).await {
            Ok(_) => Ok(Written::Done),
            Err(ForgeError::ChartConflict(_)) => {
                let fresh =
                    self.forge.read_chart(n).await.with_context(|| format!("could not re-read the chart of {n}"))?;
                Ok(Written::Conflict(fresh))
            }
            Err(e) => Err(e).with_context(|| format!("could not write the sweep's note to the chart of {n}")),
        }
    }
}

enum Written {
    Done,
    Conflict(Option<StoredChart>),
}

fn list(labels: &[String]) -> String {
    if labels.is_empty() {
        return "nothing".into();
    }
    labels.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
}

fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Parses `--now`: RFC 3339 (`2026-11-29T12:00:00Z`) or unix seconds.
pub fn parse_now(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    text.parse::<i64>()
        .ok()
        .and_then(|s| Utc.timestamp_opt(s, 0).single())
        .ok_or_else(|| format!("`{text}` is not a time like `2026-11-29T12:00:00Z` (RFC 3339) or unix seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config() -> Config {
        let text = include_str!("../.github/ward.yml");
        Config::parse(text, Path::new(".github/ward.yml"), None).unwrap()
    }

    fn t(s: &str) -> DateTime<Utc> {
        parse_now(s).unwrap()
    }

    fn note(kind: &str, run: &str, stage: &str, at: &str, body: &str) -> Note {
        Note {
            kind: kind.into(),
            meta: NoteMeta { run: run.into(), stage: stage.into(), role: "engine".into(), at: t(at) },
            body: body.into(),
        }
    }

    #[test]
    fn a_young_label_is_healthy_until_stall_after() {
        let c = config();
        let stage = c.stage("diagnose").unwrap(); // stall_after 2h
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &[], t("2026-11-29T11:00:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T12:00:00Z") });
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &[], t("2026-11-29T12:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::NoRun { .. }, retries: 0 }), "{v:?}");
    }

    #[test]
    fn a_live_run_is_left_alone_and_a_crashed_one_is_not() {
        let c = config();
        let stage = c.stage("diagnose").unwrap(); // time_limit 45m
        let notes = [note("ADMISSION", "r1", "diagnose", "2026-11-29T10:10:00Z", "")];
        let grace = Duration::from_secs(600);
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &notes, t("2026-11-29T10:50:00Z"), grace);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T11:05:00Z") });
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &notes, t("2026-11-29T11:05:00Z"), grace);
        assert!(matches!(v, Verdict::Stalled { why: Stall::Crashed { .. }, .. }), "{v:?}");
    }

    #[test]
    fn runs_before_the_label_and_of_other_stages_do_not_count() {
        let c = config();
        let stage = c.stage("diagnose").unwrap();
        let notes = [
            note("ADMISSION", "old", "diagnose", "2026-11-29T08:00:00Z", ""),
            note("ADMISSION", "other", "treat", "2026-11-29T11:30:00Z", ""),
        ];
        let v = assess(stage, t("2026-11-29T09:00:00Z"), &notes, t("2026-11-29T11:30:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::NoRun { .. }, .. }), "{v:?}");
    }

    #[test]
    fn a_retrigger_restarts_the_stall_clock_and_counts() {
        let c = config();
        let stage = c.stage("diagnose").unwrap();
        let notes = [note("SWEEP", "s1", "diagnose", "2026-11-29T11:00:00Z", "")];
        let v = assess(stage, t("2026-11-29T09:00:00Z"), &notes, t("2026-11-29T12:00:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T13:00:00Z") });
        let v = assess(stage, t("2026-11-29T09:00:00Z"), &notes, t("2026-11-29T13:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { retries: 1, .. }), "{v:?}");
    }

    #[test]
    fn a_crashed_run_already_retriggered_waits_for_the_retrigger_to_take() {
        let c = config();
        let stage = c.stage("diagnose").unwrap(); // 45m, stall 2h
        let notes = [
            note("ADMISSION", "r1", "diagnose", "2026-11-29T10:00:00Z", ""),
            note("SWEEP", "s1", "diagnose", "2026-11-29T11:00:00Z", ""),
        ];
        let since = t("2026-11-29T09:00:00Z");
        let v = assess(stage, since, &notes, t("2026-11-29T11:05:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T13:00:00Z") });
        let v = assess(stage, since, &notes, t("2026-11-29T13:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::NoRun { .. }, retries: 1 }), "{v:?}");
    }

    #[test]
    fn a_finished_run_whose_label_stayed_is_stalled_after_stall_after() {
        let c = config();
        let stage = c.stage("plan-review").unwrap(); // 20m, stall 1h
        let notes = [
            note("ADMISSION", "r1", "plan-review", "2026-11-29T10:00:00Z", ""),
            note("OUTCOME", "r1", "plan-review", "2026-11-29T10:05:00Z", "approve"),
        ];
        let since = t("2026-11-29T09:59:00Z");
        let v = assess(stage, since, &notes, t("2026-11-29T10:30:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T11:00:00Z") });
        let v = assess(stage, since, &notes, t("2026-11-29T11:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::LabelStayed { .. }, .. }), "{v:?}");
    }

    fn ev(label: &str, at: &str) -> LabelEvent {
        LabelEvent { label: label.into(), action: LabelAction::Added, actor: "x".into(), at: t(at) }
    }

    #[test]
    fn repair_follows_the_last_outcome_unless_a_label_came_later() {
        let c = config();
        let found = vec!["ward:diagnose".to_string(), "ward:plan-review".to_string()];
        let notes = [note("OUTCOME", "r1", "diagnose", "2026-11-29T10:00:00Z", "plan-posted")];
        let events = [ev("ward:diagnose", "2026-11-29T09:00:00Z"), ev("ward:plan-review", "2026-11-29T10:00:00Z")];
        assert!(
            matches!(decide_repair(&c, &found, &events, &notes), Repair::Keep { label, .. } if label == "ward:plan-review")
        );
        let events = [ev("ward:diagnose", "2026-11-29T10:30:00Z"), ev("ward:plan-review", "2026-11-29T10:00:00Z")];
        assert!(matches!(decide_repair(&c, &found, &events, &notes), Repair::Escalate { .. }));
        assert!(matches!(decide_repair(&c, &found, &events, &[]), Repair::Escalate { .. }));
        let found = vec!["ward:treat".to_string(), "ward:triage".to_string()];
        assert!(matches!(decide_repair(&c, &found, &[], &[]), Repair::Keep { label, .. } if label == "ward:treat"));
    }

    #[test]
    fn state_round_trips_and_refuses_garbage() {
        let mut s = SweepState { cursor: 42, ..SweepState::default() };
        s.watch.insert(7, ("ward:treat".into(), 1_700_000_000));
        assert_eq!(SweepState::parse(&s.render()).unwrap(), s);
        assert!(SweepState::parse("# hello").unwrap_err().contains("lacks"));
    }

    #[test]
    fn the_default_section_validates_and_bad_values_are_named() {
        let c = config();
        assert!(c.departments.sweep.validate(&c).is_empty());
        let bad = SweepConfig { max_actions: 0, ..SweepConfig::default() };
        let p = bad.validate(&c);
        assert!(p.iter().any(|(path, _)| path == "departments.sweep.max_actions"), "{p:?}");
    }
}
