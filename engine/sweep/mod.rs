//! The charge nurse: `ward sweep`, every 30 minutes.
//!
//! One sweep finds the patients worth a look (cost grows with pages, not
//! with patients), reads closer only the patients that are due for a
//! look, re-triggers the stages that stalled, escalates the patients that
//! stalled too often, repairs patients with contradictory labels, and
//! declares a lockdown when a facility fails.
//!
//! What it remembers between sweeps (its lock, its cursor, the watch list,
//! the facility counters) is the hospital's shared state, [`crate::state`].
//!
//! ## Cost
//!
//! The candidates come from the forge's search where it has one
//! ([`Forge::search_issues`]; GitHub: one GraphQL query): per stage label,
//! the open patients whose last change is older than the stage's window,
//! `min(stall_after, time_limit + grace)`. A label is at least as old as
//! the issue's last change, and no verdict is `Stalled` sooner than that
//! window after the label ([`assess`]), so a patient changed since cannot
//! be due for being stalled. The watched patients whose next look is due
//! (a previous look said when) are read too. A label with more quiet
//! patients than the search gives, or every label on a forge without
//! search (the local forge, GitHub without GraphQL), is listed whole, each
//! issue with its `updated_at`, as before.
//!
//! The search index lags behind writes: a candidate is only that. Every
//! due patient is read again ([`Forge::looks`]: the issue as it is now,
//! its chart and its label events; GitHub: one GraphQL query per 50), and
//! judged on that read alone. Healthy patients therefore cost nothing
//! beyond the search (or the listing pages); a stalled patient costs its
//! share of the read, the note and the dispatch.
//!
//! What the search cannot see: contradictory labels are repaired once the
//! patient has been quiet for its stage's window (a listing sees them at
//! once); and progress (a patient moving on, which ends the agent's failure
//! streak) is searched for separately, only while a streak runs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, TimeZone, Utc};

use crate::chart::{Note, NoteKind, NoteMeta, Seen};
use crate::config::{Config, Stage};
use crate::forge::{
    CiState, Forge, ForgeError, Found, Issue, IssueNumber, IssueSearch, IssueState, LOOKS_PER_REQUEST, LabelEvent,
    Listed, PatientLook, SEARCH_CAP, StoredChart, Updated,
};
use crate::lockdown;
use crate::state::{self, HospitalState, MergeQueue, StateError, SweepLock, slots};
use crate::transfer::{Decision, Move, transfer_with};

pub mod reap;
mod verdicts;

pub use reap::{ReapError, Reaper};
pub use verdicts::*;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("could not {action}: {cause}")]
    Forge { action: String, cause: ForgeError },
    #[error(transparent)]
    State(#[from] StateError),
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
    move |cause| SweepError::Forge { action, cause }
}

// ---------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------

/// What the sweep could not probe through the forge: passed in by the caller.
#[derive(Debug, Clone, Default)]
pub struct Facilities {
    /// Result of the Docker probe; `None` when not probed.
    pub docker_reachable: Option<Result<(), crate::doctor::DockerUnreachable>>,
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
    /// Patients found under stage labels: by the search (only those quiet
    /// for their stage's window, see `searched`), or by the listing.
    pub listed: usize,
    /// The candidates came from the search API, not the listing.
    pub searched: bool,
    /// Stage labels listed although the forge searches, and why.
    pub listings: Vec<String>,
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
    /// Decomposed families released by the repair.
    pub released: Vec<String>,
    /// Patients waiting for CI or a review, sent a look (the backstop for
    /// a lost wake-up event).
    pub woken: Vec<IssueNumber>,
    /// Discharged patients a failed close left open, closed now.
    pub closed: Vec<IssueNumber>,
    /// Lockdown issues closed by someone below maintain, reopened now.
    pub reopened: Vec<IssueNumber>,
    /// A turn of ward's merge queue was started for this many waiting
    /// patients (the backstop of the dispatch a turn or an enqueue sends).
    pub queue_started: Option<usize>,
    /// True when a cap stopped the sweep before every due patient was seen.
    pub capped: bool,
    pub cursor: u64,
}

impl SweepReport {
    fn new(outcome: SweepOutcome) -> Self {
        Self {
            outcome,
            listed: 0,
            searched: false,
            listings: Vec::new(),
            due: 0,
            inspected: 0,
            actions: Vec::new(),
            moved_on: Vec::new(),
            problems: Vec::new(),
            reaped: Vec::new(),
            released: Vec::new(),
            woken: Vec::new(),
            closed: Vec::new(),
            reopened: Vec::new(),
            queue_started: None,
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
            "{} {} patients, {} due, {} looked at, {} actions{}",
            if self.searched { "searched: found" } else { "listed" },
            self.listed,
            self.due,
            self.inspected,
            self.actions.len(),
            if self.capped { " (cap reached; the next sweep resumes after the cursor)" } else { "" }
        )?;
        for l in &self.listings {
            writeln!(f, "- listed instead of searched: {l}")?;
        }
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
        for r in &self.released {
            writeln!(f, "- released: {r}")?;
        }
        for n in &self.woken {
            writeln!(f, "- {n}: waits for CI or a review; sent a look")?;
        }
        for n in &self.closed {
            writeln!(f, "- {n}: labeled discharged but still open (its close failed); closed")?;
        }
        for n in &self.reopened {
            writeln!(f, "- {n}: a lockdown closed by someone who may not lift it; reopened")?;
        }
        if let Some(n) = self.queue_started {
            writeln!(f, "- ward's merge queue holds {n} patients; a turn of it was started")?;
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
    let acquired = state::update(forge, |s| match &s.lock {
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
    let mut walk = Walk { forge, config, now, run: run.clone(), consumed: None };
    let result = walk.run(state, facilities, reaper).await;
    // Release the lock (and save what was learnt) even when the walk failed.
    let (report, new_state) = match result {
        Ok(pair) => pair,
        Err(e) => {
            let _ = state::update(forge, |s| {
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
    let saved = state::update(forge, |s| {
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

/// The patients a sweep found worth considering, as found.
#[derive(Default)]
struct Candidates {
    listed: BTreeMap<u64, Issue>,
    /// When each last changed, as the search or listing said.
    updated: BTreeMap<u64, DateTime<Utc>>,
    /// Every stage label was listed whole (no search): a watched patient
    /// not listed left the stages.
    whole: bool,
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
    /// Agent failures this sweep accounted for (the streak as read, and its
    /// runs): progress seen, or a lockdown declared. Failures stage runs
    /// record while the sweep runs are kept.
    consumed: Option<(u32, Vec<String>)>,
}

impl Walk<'_> {
    async fn run(
        &mut self,
        mut state: HospitalState,
        facilities: &Facilities,
        reaper: Option<&dyn Reaper>,
    ) -> Result<(SweepReport, HospitalState), SweepError> {
        let mut report = SweepReport::new(SweepOutcome::Done);
        report.cursor = state.cursor;
        if let Some(reaper) = reaper {
            match reaper.reap(self.forge, self.now).await {
                Ok(lines) => report.reaped = lines,
                Err(e) => report.problems.push(format!("reaping failed: {e}")),
            }
        }

        // The candidates: the patients the search finds quiet for their
        // stage's window, or (no search) the listing of every stage label.
        let Candidates { listed, updated, whole } = self.candidates(&mut report).await?;
        report.listed = listed.len();
        report.searched = !whole;

        // Progress since the last sweep (a watched patient changed label or
        // left the stages, not by the sweep's hand) means agent runs
        // succeeded: the failures recorded so far were not consecutive.
        // A search finds only quiet patients: then the patients changed
        // since the streak began are searched for (only while one runs).
        let progressed = if whole {
            state.watch.iter().any(|(n, (key, _))| listed.get(n).is_none_or(|i| self.state_key(i) != *key))
        } else {
            state.watch.iter().any(|(n, (key, _))| listed.get(n).is_some_and(|i| self.state_key(i) != *key))
                || (state.agent.consecutive_failures > 0 && self.progress_found(&state, &mut report).await)
        };
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
                    // First seen with this label: the label is at least as
                    // old as the issue's last change, so a patient whose
                    // last change is older than its first look is due now.
                    let since = updated.get(n).map_or(self.now, |at| (*at).min(self.now));
                    (key, (since + self.first_look_after(issue)).timestamp())
                }
            };
            if entry.1 <= self.now.timestamp() {
                due.push(*n);
            }
            watch.insert(*n, entry);
        }
        if !whole {
            // The search finds only quiet patients: the others watched stay
            // watched, and those due now are read with the candidates.
            for (n, entry) in &state.watch {
                if listed.contains_key(n) {
                    continue;
                }
                if entry.1 <= self.now.timestamp() {
                    due.push(*n);
                }
                watch.insert(*n, entry.clone());
            }
            due.sort_unstable();
        }
        report.due = due.len();
        if let Some(outcome) = locked {
            // Keep watching (so stalled patients are revived as soon as the
            // lockdown is lifted), but touch nobody.
            report.outcome = outcome;
            state.watch = watch;
            return Ok((report, state));
        }

        // Resume after the cursor, wrapping round; the due are read
        // together ([`Forge::looks`]: one request per 50 on GitHub).
        let split = due.partition_point(|n| *n <= state.cursor);
        due.rotate_left(split);
        let cap = &self.config.departments.sweep;
        let mut rest: &[u64] = &due;
        'walk: while !rest.is_empty() {
            let room = cap.max_inspections.saturating_sub(report.inspected);
            if report.actions.len() >= cap.max_actions || room == 0 {
                report.capped = true;
                break;
            }
            let (chunk, after) = rest.split_at(room.min(LOOKS_PER_REQUEST).min(rest.len()));
            rest = after;
            let numbers: Vec<IssueNumber> = chunk.iter().map(|n| IssueNumber(*n)).collect();
            let looks = self.forge.looks(&numbers).await;
            for (n, look) in chunk.iter().copied().zip(looks) {
                if report.actions.len() >= cap.max_actions {
                    report.capped = true;
                    break 'walk;
                }
                report.inspected += 1;
                state.cursor = n;
                let watched = watch.get(&n).map(|(key, _)| key.clone());
                let looked = match look {
                    Ok(look) => self.judge(listed.get(&n), watched.as_deref(), look).await,
                    Err(e) => Err(anyhow::Error::new(e).context(format!("could not read #{n}, its chart and history"))),
                };
                match looked {
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
                        report.moved_on.push(IssueNumber(n));
                        watch.remove(&n);
                    }
                    Err(e) => {
                        report.problems.push(format!("#{n}: {e:#}"));
                        let key = watched.unwrap_or_default();
                        let retry = self.now + chrono_of(self.config.departments.sweep.lock_ttl);
                        watch.insert(n, (key, retry.timestamp()));
                    }
                }
            }
        }
        report.cursor = state.cursor;
        state.watch = watch;
        self.wake_waiting(&mut report).await;
        self.settle_forge_queue(&state.merge_queue, &mut report).await;
        self.start_wards_queue(&state.merge_queue, &mut report).await;
        self.start_queued(&mut report).await;
        self.close_discharged(&mut report).await;
        // Families a crash left half released: blocked children whose
        // dependencies are all discharged, parents whose children all are.
        match crate::family::repair(self.forge, self.config, &self.run, self.now).await {
            Ok(moved) => report.released = moved,
            Err(e) => report.problems.push(format!("could not repair decomposed families: {e:#}")),
        }
        Ok((report, state))
    }

    /// The backstop of the wake-up events: each patient waiting at the
    /// pending label is dispatched a look (one listing page, one dispatch
    /// each, within `max_actions`). The look re-audits and writes nothing
    /// when nothing changed.
    async fn wake_waiting(&self, report: &mut SweepReport) {
        let pending = &self.config.discharge.pending_label;
        let waiting = match self.forge.open_issues_with_label(pending).await {
            Ok(list) => list,
            Err(e) => return report.problems.push(format!("could not list the patients waiting at `{pending}`: {e}")),
        };
        for issue in waiting {
            if report.actions.len() + report.woken.len() >= self.config.departments.sweep.max_actions {
                report.capped = true;
                return;
            }
            match self.forge.dispatch_stage(issue.number, pending).await {
                Ok(()) => report.woken.push(issue.number),
                Err(e) => report.problems.push(format!("{}: could not send a look: {e}", issue.number)),
            }
        }
    }

    /// The backstop of the merge-queue events: a patient resting in
    /// GitHub's merge queue is not stalled while GitHub holds it, but an
    /// event that never came (a failed run, a missed delivery) would leave
    /// it there. Each is read (one pull-request read each; one listing
    /// page), and only one GitHub no longer holds is dispatched a look,
    /// which discharges it when merged or sends it back when let go.
    /// Patients in ward's own queue (`queue`) rest at the same label and
    /// are the queue's: they are skipped here.
    async fn settle_forge_queue(&self, queue: &MergeQueue, report: &mut SweepReport) {
        let label = self.config.merge_queue_label();
        if !self.forge.offers_merge_queue() || !self.config.labels.contains_key(label) {
            return;
        }
        let resting = match self.forge.open_issues_with_label(label).await {
            Ok(list) => list,
            Err(e) => return report.problems.push(format!("could not list the patients resting at `{label}`: {e}")),
        };
        for issue in resting {
            if queue.waiting.iter().any(|e| e.issue == issue.number) {
                continue;
            }
            if report.actions.len() + report.woken.len() >= self.config.departments.sweep.max_actions {
                report.capped = true;
                return;
            }
            let branch = crate::workspace::worktree::branch_name(issue.number.0);
            match self.forge.pull_facts(&branch).await {
                Ok(Some(f))
                    if f.pull.state == crate::forge::PullState::Open
                        && f.merge_queue.as_ref().is_some_and(|q| q.queued) =>
                {
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    report
                        .problems
                        .push(format!("{}: could not read its pull request in the merge queue: {e}", issue.number));
                    continue;
                }
            }
            match self.forge.dispatch_stage(issue.number, label).await {
                Ok(()) => report.woken.push(issue.number),
                Err(e) => report.problems.push(format!("{}: could not send a look: {e}", issue.number)),
            }
        }
    }

    /// The backstop of ward's merge queue where a workflow runs it: a turn
    /// whose check job failed, or a dispatch that was lost, leaves patients
    /// waiting with no turn coming. One dispatch starts one; a turn already
    /// running keeps its place (ward-queue.yml's concurrency group holds one
    /// pending run at most), and each turn takes the queue's first entry.
    async fn start_wards_queue(&self, queue: &MergeQueue, report: &mut SweepReport) {
        // The local forge's `ward run` takes the queue whenever it is idle.
        let by_workflow = self.forge.as_local().is_none();
        let runs = self.config.integration.is_some() && self.forge.runs_merge_queue();
        if queue.waiting.is_empty() || !by_workflow || !runs {
            return;
        }
        match self.forge.dispatch_merge_queue().await {
            Ok(()) => report.queue_started = Some(queue.waiting.len()),
            Err(e) => report.problems.push(format!("could not start ward's merge queue: {e}")),
        }
    }

    /// The backstop of the agent cap: slots a crashed run held have expired
    /// with no run left to free them, so queued patients that fit start
    /// here (oldest first, within `max_actions`).
    async fn start_queued(&self, report: &mut SweepReport) {
        if !self.config.capacity.capped(self.config) {
            return;
        }
        while report.actions.len() + report.woken.len() < self.config.departments.sweep.max_actions {
            match slots::free(self.forge, self.config, None, self.now).await {
                Ok(Some(issue)) => report.woken.push(issue),
                Ok(None) => return,
                Err(e) => return report.problems.push(format!("could not start the queued patients: {e:#}")),
            }
        }
    }

    /// A discharge labels first, then closes: a close that failed after
    /// its retries leaves a discharged patient open, and no stage runs for
    /// a resting label. The sweep closes it (one listing page, one close each).
    async fn close_discharged(&self, report: &mut SweepReport) {
        let discharged = &self.config.discharge.discharged_label;
        let open = match self.forge.open_issues_with_label(discharged).await {
            Ok(list) => list,
            Err(e) => return report.problems.push(format!("could not list the open issues at `{discharged}`: {e}")),
        };
        for issue in open {
            match self.forge.close_issue(issue.number).await {
                Ok(()) => report.closed.push(issue.number),
                Err(e) => {
                    report.problems.push(format!("{}: could not close the discharged patient: {e}", issue.number))
                }
            }
        }
    }

    /// Docker, the agent's failure streak, the base branch's CI: any failure
    /// declares a lockdown (or finds one in force).
    async fn check_facilities(
        &mut self,
        state: &mut HospitalState,
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
        // A lockdown closed by someone who may not lift it is in force again.
        match lockdown::reopen_closed_below_maintain(self.forge, self.now).await {
            Ok(reopened) => report.reopened = reopened,
            Err(e) => report.problems.push(format!("could not check who closed the lockdowns: {e}")),
        }
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
        let (declared, _) =
            lockdown::declare(self.forge, &reason, self.forge.engine_account().as_str(), self.now).await?;
        // The declaration consumed these signals; a lifted lockdown starts afresh.
        self.consume_streak(state);
        state.base_red_since = None;
        report.problems.push(format!("declared lockdown {}: {reason}", declared.issue));
        Ok(Some(SweepOutcome::Lockdown { issue: declared.issue, reason, declared_now: true }))
    }

    fn consume_streak(&mut self, state: &mut HospitalState) {
        let (streak, runs) = self.consumed.get_or_insert_with(|| (0, Vec::new()));
        *streak += state.agent.consecutive_failures;
        runs.extend(state.agent.recent.iter().map(|r| r.run.clone()));
        state.agent.consecutive_failures = 0;
        state.agent.recent.clear();
    }

    /// The ward labels of a patient, sorted and joined: its "where".
    fn state_key(&self, issue: &Issue) -> String {
        let mut labels = self.wardish_labels(issue);
        labels.sort_unstable();
        labels.join(",")
    }

    fn wardish_labels(&self, issue: &Issue) -> Vec<String> {
        issue.labels.iter().filter(|l| self.config.is_wardish(l)).cloned().collect()
    }

    fn needs_repair(&self, issue: &Issue) -> bool {
        let labels = self.wardish_labels(issue);
        labels.len() > 1 || labels.iter().any(|l| !self.config.is_ward_label(l))
    }

    /// How long after first seeing a patient in a stage the sweep looks closer.
    fn first_look_after(&self, issue: &Issue) -> chrono::Duration {
        let stage = issue.labels.iter().find_map(|l| self.config.stage_by_label(l));
        stage.map_or(chrono::Duration::zero(), |s| self.window(s))
    }

    /// The soonest a patient of `stage` can stall after its last change:
    /// `min(stall_after, time_limit + grace)` (see [`assess`]).
    fn window(&self, stage: Stage<'_>) -> chrono::Duration {
        chrono_of(stage.config.stall_after)
            .min(chrono_of(stage.config.time_limit) + chrono_of(self.config.departments.sweep.grace))
    }

    /// The patients worth a look: per stage label, the open ones whose
    /// last change is older than the stage's [`Self::window`] (no patient
    /// changed since can be stalled), from the search API. A stage label
    /// whose search finds more than the search gives, or every label when
    /// the forge has no search (or it failed), is listed whole instead.
    async fn candidates(&self, report: &mut SweepReport) -> Result<Candidates, SweepError> {
        let stages: Vec<Stage<'_>> = self.config.stages().collect();
        let searches: Vec<IssueSearch> = stages
            .iter()
            .map(|s| IssueSearch {
                label: s.config.label.clone(),
                open: true,
                updated: Updated::Before(self.now - self.window(*s)),
            })
            .collect();
        let found = match self.forge.search_issues(&searches).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!("the sweep's search failed ({e}); listing every stage label instead");
                report.listings.push(format!("every stage label, the search failed ({e})"));
                None
            }
        };
        let mut out = Candidates { whole: true, ..Candidates::default() };
        for (i, stage) in stages.iter().enumerate() {
            let label = &stage.config.label;
            let issues = match found.as_ref().and_then(|f| f.get(i)) {
                Some(Found::Issues(list)) => {
                    out.whole = false;
                    list.clone()
                }
                Some(Found::TooMany(count)) => {
                    tracing::warn!(
                        "{count} quiet patients at `{label}`, more than the search gives ({SEARCH_CAP}); listing `{label}`"
                    );
                    report.listings.push(format!(
                        "`{label}`, {count} quiet patients are more than the search gives ({SEARCH_CAP})"
                    ));
                    self.list(label).await?
                }
                None => self.list(label).await?,
            };
            for Listed { issue, updated_at } in issues {
                if let Some(at) = updated_at {
                    out.updated.insert(issue.number.0, at);
                }
                out.listed.entry(issue.number.0).or_insert(issue);
            }
        }
        Ok(out)
    }

    async fn list(&self, label: &str) -> Result<Vec<Listed>, SweepError> {
        self.forge.open_issues_listed(label).await.map_err(forge_err(format!("list the open issues labeled `{label}`")))
    }

    /// Whether a patient other than the failing ones changed at a stage
    /// label since the agent's failure streak began (the search's way of
    /// seeing progress; a comment counts too). More than the search gives
    /// counts as progress.
    async fn progress_found(&self, state: &HospitalState, report: &mut SweepReport) -> bool {
        let Some(start) = state.agent.recent.iter().map(|r| r.at).min() else { return false };
        let failing: std::collections::BTreeSet<u64> = state.agent.recent.iter().map(|r| r.issue.0).collect();
        let searches: Vec<IssueSearch> = self
            .config
            .stages()
            .map(|s| IssueSearch { label: s.config.label.clone(), open: false, updated: Updated::Since(start) })
            .collect();
        match self.forge.search_issues(&searches).await {
            Ok(Some(found)) => found.iter().any(|f| match f {
                Found::Issues(list) => list.iter().any(|l| !failing.contains(&l.issue.number.0)),
                Found::TooMany(_) => true,
            }),
            Ok(None) => false,
            Err(e) => {
                report.problems.push(format!("could not search for progress since the agent's failures began: {e}"));
                false
            }
        }
    }

    /// Decides on one due patient from its look (read after the search or
    /// the listing that found it). `listed` is how the search or listing
    /// showed it; `None` for a watched patient neither found, whose ward
    /// labels must still be `watched`'s.
    async fn judge(&self, listed: Option<&Issue>, watched: Option<&str>, look: PatientLook) -> anyhow::Result<Looked> {
        use anyhow::Context as _;
        let read;
        let listed = match listed {
            Some(listed) => listed,
            None => {
                let same =
                    look.issue.state == IssueState::Open && watched == Some(self.state_key(&look.issue).as_str());
                if !same {
                    return Ok(Looked::MovedOn);
                }
                read = look.issue.clone();
                &read
            }
        };
        let n = listed.number;
        let (events, chart) = (look.label_events, look.chart);
        if self.needs_repair(listed) {
            return self.repair(listed, &look.issue, &events, chart).await;
        }
        let Some(stage) = listed.labels.iter().find_map(|l| self.config.stage_by_label(l)) else {
            return Ok(Looked::MovedOn);
        };
        let label_since = label_applied_at(&events, &stage.config.label).unwrap_or(DateTime::<Utc>::MIN_UTC);
        let grace = self.config.departments.sweep.grace;
        // A healthy patient costs nothing more than this look.
        if let Verdict::Healthy { next_check } = assess(stage, label_since, &self.parse(n, &chart)?, self.now, grace) {
            return Ok(Looked::Healthy(self.state_key(listed), next_check));
        }
        // Read after the listing: a restart must never redo work that moved on.
        let Some(fresh) = self.unmoved(listed, look.issue) else { return Ok(Looked::MovedOn) };
        let key = self.state_key(listed);
        let max_retries = self.config.departments.sweep.max_retries;
        // Decided again on the chart as it stands if it changes under the write.
        let (looked, _) = transfer_with(self.forge, self.config, &fresh, Seen::Read(chart), |notes| {
            match assess(stage, label_since, notes, self.now, grace) {
                Verdict::Healthy { next_check } => {
                    Decision { notes: Vec::new(), to: Move::Stay, value: Looked::Healthy(key.clone(), next_check) }
                }
                Verdict::Stalled { why, retries } if retries >= max_retries => Decision {
                    notes: vec![self.escalation_note(stage, &why, retries, label_since, notes)],
                    to: Move::To(self.config.chief_label().to_string()),
                    value: Looked::Acted(
                        Action::Escalated {
                            issue: n,
                            stage: stage.name.into(),
                            why: format!("{why}; {retries} re-triggers did not help"),
                        },
                        None,
                    ),
                },
                Verdict::Stalled { why, retries } => Decision {
                    notes: vec![self.sweep_note(stage, &why, retries + 1)],
                    to: Move::Rerun,
                    value: Looked::Acted(
                        Action::Retriggered {
                            issue: n,
                            stage: stage.name.into(),
                            attempt: retries + 1,
                            why: why.to_string(),
                        },
                        Some((key.clone(), (self.now + chrono_of(stage.config.stall_after)).timestamp())),
                    ),
                },
            }
        })
        .await
        .with_context(|| format!("the charge nurse could not act on {n} (stage `{}`)", stage.name))?;
        Ok(looked)
    }

    /// The patient as read after the listing, unless it moved on (closed,
    /// or its ward labels changed) since.
    fn unmoved(&self, listed: &Issue, fresh: Issue) -> Option<Issue> {
        let moved = fresh.state != IssueState::Open || self.state_key(&fresh) != self.state_key(listed);
        (!moved).then_some(fresh)
    }

    async fn repair(
        &self,
        listed: &Issue,
        now: &Issue,
        events: &[LabelEvent],
        chart: Option<StoredChart>,
    ) -> anyhow::Result<Looked> {
        use anyhow::Context as _;
        let n = listed.number;
        let found = self.wardish_labels(listed);
        let Some(fresh) = self.unmoved(listed, now.clone()) else { return Ok(Looked::MovedOn) };
        let (action, _) = transfer_with(self.forge, self.config, &fresh, Seen::Read(chart), |notes| {
            let decision = decide_repair(self.config, &found, events, notes);
            let (keep, why, kind) = match &decision {
                Repair::Keep { label, because } => (label.clone(), because.clone(), NoteKind::Sweep),
                Repair::Escalate { because } => {
                    (self.config.chief_label().to_string(), because.clone(), NoteKind::Escalation)
                }
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
            let action = match decision {
                Repair::Keep { .. } => Action::Repaired { issue: n, kept: keep.clone(), removed, why },
                Repair::Escalate { .. } => Action::Escalated { issue: n, stage: stage_name.into(), why },
            };
            Decision { notes: vec![self.note(kind, stage_name, body)], to: Move::To(keep), value: action }
        })
        .await
        .with_context(|| format!("the charge nurse could not repair the labels of {n}"))?;
        Ok(Looked::Acted(action, None))
    }

    fn parse(&self, n: IssueNumber, chart: &Option<StoredChart>) -> anyhow::Result<Vec<Note>> {
        let sentinels = crate::chart::Sentinels::new(&self.config.sentinel_prefix);
        match chart {
            None => Ok(Vec::new()),
            Some(c) => sentinels.parse_chart(&c.text).map_err(|e| {
                anyhow::anyhow!("the chart of {n} is not readable ({e}); repair it by hand, the sweep left {n} alone")
            }),
        }
    }

    fn note(&self, kind: NoteKind, stage: &str, body: String) -> Note {
        Note { kind, meta: NoteMeta::engine(self.run.clone(), stage, self.now), body }
    }

    fn sweep_note(&self, stage: Stage<'_>, why: &Stall, attempt: u32) -> Note {
        self.note(
            NoteKind::Sweep,
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
            .filter(|n| n.kind == NoteKind::Sweep && n.meta.stage == stage.name && n.meta.at >= label_since)
            .map(|n| format!("- {} (`{}`): {}", fmt_time(n.meta.at), n.meta.run, n.body.lines().next().unwrap_or("")))
            .collect();
        self.note(
            NoteKind::Escalation,
            stage.name,
            format!(
                "Escalated by the charge nurse: stage `{}` stalled again ({why}) after {retries} re-triggers \
                 since `{}` was applied at {}.\n\nWhat was tried:\n{}\n\nWhat to do: look at this patient's \
                 workflow runs for the failure, fix it, then {}.",
                stage.name,
                stage.config.label,
                fmt_time(label_since),
                if tried.is_empty() { "- nothing (`sweep.max_retries` is 0)".to_string() } else { tried.join("\n") },
                self.config.readmit_hint()
            ),
        )
    }
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

/// A `--now` that is no time ward reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a time like `2026-11-29T12:00:00Z` (RFC 3339) or unix seconds")]
pub struct NotATime(pub String);

/// Parses `--now`: RFC 3339 (`2026-11-29T12:00:00Z`) or unix seconds.
pub fn parse_now(text: &str) -> Result<DateTime<Utc>, NotATime> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    text.parse::<i64>().ok().and_then(|s| Utc.timestamp_opt(s, 0).single()).ok_or_else(|| NotATime(text.to_string()))
}
