//! The hospital's shared state, owned by no department: the charge
//! nurse's cursor and lock, the agent's failure streak, the agent slots
//! ([`slots`]) and ward's merge queue. One small file in the chart store's
//! slot 0 ([`STATE_SLOT`], `charts/0.md`), read with [`load`] and written
//! only through compare-and-swap ([`update`]), by the sweep, by stage runs
//! and by discharge alike.
//!
//! ## Why there
//!
//! Both forges offer exactly one compare-and-swap store: the charts. ward
//! keeps one small state file in that store under the reserved number
//! [`STATE_SLOT`] (`charts/0.md`; no issue is ever numbered 0, on GitHub or
//! locally). Compare-and-swap gives the lock (a lease with an expiry, so a
//! crashed sweep cannot wedge the ward), the resume cursor, the "watch" list
//! (when each patient is next due for a closer look) and the facility
//! counters, without an admin token and without an issue that people would
//! see in their lists. An issue or comment would work on both forges too,
//! but neither has compare-and-swap, so two sweeps could both believe they
//! hold the lock.

pub mod slots;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::chart::{ChartStoreError, Edit, Seen, modify_slot};
use crate::forge::{Forge, IssueNumber};

/// The chart slot that holds the hospital's state.
pub const STATE_SLOT: IssueNumber = IssueNumber(0);

/// What the hospital remembers between runs (stored at [`STATE_SLOT`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HospitalState {
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
    /// The agent slots and the patients queued for one (`capacity` in
    /// ward.yml; see [`slots`]). Left out of the file when empty.
    #[serde(default, skip_serializing_if = "Capacity::is_empty")]
    pub capacity: Capacity,
    /// Audited patients waiting to be integrated and merged, in order
    /// (`integration` in ward.yml; see `discharge/queue.rs`).
    #[serde(default, skip_serializing_if = "MergeQueue::is_empty")]
    pub merge_queue: MergeQueue,
}

/// The merge queue: who waits, and whom it merged lately (named when a
/// later patient fails combined with them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeQueue {
    #[serde(default)]
    pub waiting: Vec<QueueEntry>,
    /// Newest last, at most [`MergeQueue::KEEP`].
    #[serde(default)]
    pub merged: Vec<MergedEntry>,
}

impl MergeQueue {
    pub const KEEP: usize = 50;

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.merged.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueEntry {
    pub issue: IssueNumber,
    pub pull: u64,
    /// The audited head: exactly this is integrated and merged.
    pub head: String,
    pub since: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergedEntry {
    pub issue: IssueNumber,
    /// The patient's head commit that was merged.
    pub head: String,
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

/// The agent slots in use (see [`slots`]) and the patients waiting for one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// Runs holding a slot, by run id.
    #[serde(default)]
    pub running: BTreeMap<String, Slot>,
    /// Patients resting at the queued label, oldest first.
    #[serde(default)]
    pub queued: Vec<Queued>,
}

impl Capacity {
    pub fn is_empty(&self) -> bool {
        self.running.is_empty() && self.queued.is_empty()
    }

    fn drop_expired(&mut self, now: DateTime<Utc>) {
        self.running.retain(|_, slot| slot.expires > now);
    }

    /// Why a run of `stage` would not fit now, or `None` when it fits.
    fn full(&self, config: &crate::config::Config, stage: crate::config::Stage<'_>) -> Option<String> {
        let all = self.running.len();
        if let Some(max) = config.capacity.max_concurrent
            && all >= max as usize
        {
            return Some(format!("{all} agents run now, the most `capacity.max_concurrent` allows ({max})"));
        }
        let max = stage.config.max_concurrent?;
        let here = self.running.values().filter(|s| s.stage == stage.name).count();
        (here >= max as usize).then(|| {
            format!("{here} agents run stage `{}` now, the most its `max_concurrent` allows ({max})", stage.name)
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slot {
    pub issue: IssueNumber,
    pub stage: String,
    pub expires: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queued {
    pub issue: IssueNumber,
    /// The stage label the patient goes back to when it starts.
    pub label: String,
    pub since: DateTime<Utc>,
}

const STATE_MARK: &str = "<!-- ward-sweep-state v1 -->";

impl HospitalState {
    pub fn render(&self) -> String {
        let json = serde_json::to_string(self).expect("the state serialises: plain data with string keys");
        format!(
            "# ward state\n\n{STATE_MARK}\n\nWritten by `ward sweep`, by stage runs and by discharge, always \
             through compare-and-swap. Do not edit by hand; delete the file to make the next sweep start afresh.\n\n\
             ```json\n{json}\n```\n"
        )
    }

    pub fn parse(text: &str) -> Result<Self, BadState> {
        if !text.contains(STATE_MARK) {
            return Err(BadState::NoMark);
        }
        let start = text.find("```json\n").ok_or(BadState::NoBlock)? + "```json\n".len();
        let end = text[start..].find("\n```").ok_or(BadState::Unclosed)? + start;
        serde_json::from_str(&text[start..end]).map_err(BadState::Json)
    }
}

/// Why the state's file is not the state ward writes.
#[derive(Debug, thiserror::Error)]
pub enum BadState {
    #[error("it lacks the line `{STATE_MARK}`")]
    NoMark,
    #[error("it has no ```json block")]
    NoBlock,
    #[error("its ```json block is not closed")]
    Unclosed,
    #[error("its JSON is invalid: {0}")]
    Json(serde_json::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Store(#[from] ChartStoreError),
    #[error(
        "the hospital's state (chart slot {STATE_SLOT}, `charts/0.md`) is unreadable: {0}; delete that file and \
         the next sweep rebuilds it"
    )]
    Unreadable(BadState),
}

/// Reads the state (the default when it was never written).
pub async fn load(forge: &dyn Forge) -> Result<HospitalState, StateError> {
    match forge.read_chart(STATE_SLOT).await.map_err(ChartStoreError::from)? {
        None => Ok(HospitalState::default()),
        Some(stored) => HospitalState::parse(&stored.text).map_err(StateError::Unreadable),
    }
}

/// Read-modify-write of the state with compare-and-swap: `f` changes a
/// fresh copy (again after every conflict), or returns `Err` to leave the
/// state unchanged.
pub async fn update<T, E>(
    forge: &dyn Forge,
    mut f: impl FnMut(&mut HospitalState) -> Result<T, E>,
) -> Result<Result<T, E>, StateError> {
    let outcome = modify_slot(forge, STATE_SLOT, Seen::NotRead, |text| {
        let mut state = match text {
            Some(t) => HospitalState::parse(t)?,
            None => HospitalState::default(),
        };
        Ok(match f(&mut state) {
            Ok(out) => Edit::Write(state.render(), Ok(out)),
            Err(e) => Edit::Keep(Err(e)),
        })
    })
    .await?;
    outcome.map(|(value, _)| value).map_err(StateError::Unreadable)
}

/// Called by the stage runner when an agent run fails (a success may be
/// recorded too, and resets the streak): keeps the failure streak that lets
/// the sweep lock the building when the agent is broken. Successful runs
/// need not call it: the sweep counts patients moving between two sweeps as
/// progress, which ends the streak. Returns the streak.
pub async fn record_agent_run(forge: &dyn Forge, run: AgentRun) -> Result<u32, StateError> {
    let out = update(forge, |s| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_refuses_garbage() {
        let mut s = HospitalState { cursor: 42, ..HospitalState::default() };
        s.watch.insert(7, ("ward:treat".into(), 1_700_000_000));
        assert_eq!(HospitalState::parse(&s.render()).unwrap(), s);
        assert!(HospitalState::parse("# hello").unwrap_err().to_string().contains("lacks"));
    }
}
