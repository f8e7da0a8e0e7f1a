//! What a stage run was asked, and how it ended.

use std::path::PathBuf;

use serde::Serialize;

use crate::forge::IssueNumber;

/// Which run to make.
#[derive(Debug, Clone)]
pub struct StageRequest {
    pub issue: IssueNumber,
    /// The label in the trigger saw; `None` takes the issue's ward label.
    pub label: Option<String>,
    /// Replaces `agent.command` for this run (scripted scenarios).
    pub agent_command: Option<Vec<String>>,
    pub run_id: Option<String>,
    /// A review or CI event woke the patient: only a waiting patient looks,
    /// and only a change it finds runs the audit again.
    pub wake: Option<crate::event::Wake>,
    /// The whole run in this process, or one of its two halves on GitHub.
    pub phase: Phase,
    /// `/ward approve` from this person: the approval path, with them as
    /// the approver (instead of whoever applied the approved label).
    pub approver: Option<String>,
}

impl StageRequest {
    pub fn new(issue: IssueNumber) -> Self {
        Self { issue, label: None, agent_command: None, run_id: None, wake: None, phase: Phase::Whole, approver: None }
    }
}

/// Which part of a stage run this process makes.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Phase {
    /// Guard, prepare, treat, judge, record: one process (`ward stage`).
    #[default]
    Whole,
    /// The read-only half (`ward visit`): guard and prepare without a write,
    /// the agent, and the sealed visit written to `out` (notes, logs, the
    /// new commits as a git bundle). A guard that would write stops the
    /// visit without an agent: the record job writes it.
    Visit { out: PathBuf },
    /// The writing half (`ward record`): guard and prepare again (writing
    /// now), the visit in `from` taken in as hostile input, judge, record.
    Record { from: PathBuf },
    /// The job before the visit when `capacity` caps agents (`ward slot`):
    /// guard and the audit before the nurse without a write, then an agent
    /// slot for this run (the sweep's state), or the patient queued. It
    /// writes only that: the slot, or the queue with its note and label.
    Slot,
}

impl Phase {
    /// Whether this process may write to the forge (the slot job writes
    /// only its slot or the queue: see [`Phase::Slot`]).
    pub fn writes(&self) -> bool {
        !matches!(self, Phase::Visit { .. } | Phase::Slot)
    }
}

/// A label that moved.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    pub issue: IssueNumber,
    pub stage: String,
    pub role: String,
    pub run: String,
    pub outcome: String,
    pub from: String,
    pub to: String,
    pub dispatched: bool,
    /// The move wrote the patient's comment ([`crate::transfer::Moved::told`]):
    /// the run's end does not write it again.
    #[serde(skip)]
    pub told: bool,
    pub total_ms: u128,
    pub agent_ms: u128,
    /// The engine's own time: the whole run less the agent's.
    pub engine_us: u128,
    pub artifacts: PathBuf,
}

/// Exit codes, the same for every command: moved, rested or nothing to do.
pub const EXIT_OK: u8 = 0;
/// An invalid run, or an error (the run could not be made).
pub const EXIT_FAILED: u8 = 1;
/// Bad input: ward.yml, an event, a scenario, the precedent log, a flag.
pub const EXIT_BAD_INPUT: u8 = 2;
/// A lockdown is in force: nothing moved.
pub const EXIT_LOCKED: u8 = 3;
/// A guard or a rule refused the run; a note says why, and the patient
/// stayed or went where the rule sends it (the chiefs, for an escalation).
pub const EXIT_REFUSED: u8 = 4;

/// How a stage run ended.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum StageResult {
    /// The run was valid and the label moved.
    Moved(Transition),
    /// Nothing to do (label already gone, issue closed, resting label,
    /// another run in progress). Exit 0.
    NoOp { issue: IssueNumber, reason: String },
    /// The visit job stopped without an agent because what comes next
    /// writes (a refusal, a lockdown note, the audit before the nurse, an
    /// approval, a resumed move), or it sealed an agent's visit: the record
    /// job decides and writes. Exit 0. Only `Phase::Visit` gives it (and
    /// `Phase::Slot`, whose visit job then stops the same way).
    Deferred { issue: IssueNumber, reason: String },
    /// The slot job took an agent slot for `run`: the visit job runs the
    /// agent holding it, and the record job (or, after a failed or
    /// cancelled visit, the release job) frees it. Exit 0. Only
    /// `Phase::Slot` gives it.
    SlotTaken { issue: IssueNumber, stage: String, run: String },
    /// A guard or a rule refused the run; a note in the chart says why and
    /// what to do, and the label went where the rule sends it (or stayed).
    /// `locked`: the refusal is a lockdown's (nothing moves until it lifts).
    Refused {
        issue: IssueNumber,
        stage: String,
        reason: String,
        to: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        locked: bool,
    },
    /// The agent's run was invalid; a REFUSAL note says why, the label did
    /// not move, the raw notes are kept in the artifacts. Exit 1.
    Invalid { issue: IssueNumber, stage: String, run: String, reason: String, artifacts: PathBuf },
}

impl StageResult {
    pub fn is_failure(&self) -> bool {
        matches!(self, StageResult::Invalid { .. })
    }

    /// The exit code every command gives this result (README, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            StageResult::Moved(_)
            | StageResult::NoOp { .. }
            | StageResult::Deferred { .. }
            | StageResult::SlotTaken { .. } => EXIT_OK,
            StageResult::Invalid { .. } => EXIT_FAILED,
            StageResult::Refused { locked: true, .. } => EXIT_LOCKED,
            StageResult::Refused { .. } => EXIT_REFUSED,
        }
    }

    pub fn issue(&self) -> IssueNumber {
        match self {
            StageResult::Moved(t) => t.issue,
            StageResult::NoOp { issue, .. }
            | StageResult::Deferred { issue, .. }
            | StageResult::SlotTaken { issue, .. }
            | StageResult::Refused { issue, .. }
            | StageResult::Invalid { issue, .. } => *issue,
        }
    }
}
