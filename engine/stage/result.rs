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
    /// `/ward approve` from this person: the approval path, with them as
    /// the approver (instead of whoever applied the approved label).
    pub approver: Option<String>,
}

impl StageRequest {
    pub fn new(issue: IssueNumber) -> Self {
        Self { issue, label: None, agent_command: None, run_id: None, wake: None, approver: None }
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
    NoOp { issue: IssueNumber, reason: String },
    /// A guard or a rule refused the run; a note in the chart says why and
    /// what to do, and the label went where the rule sends it (or stayed).
    Refused { issue: IssueNumber, stage: String, reason: String, to: Option<String> },
    /// The agent's run was invalid; a REFUSAL note says why, the label did
    /// not move, the raw notes are kept in the artifacts. Exit 1.
    Invalid { issue: IssueNumber, stage: String, run: String, reason: String, artifacts: PathBuf },
}

impl StageResult {
    pub fn is_failure(&self) -> bool {
        matches!(self, StageResult::Invalid { .. })
    }

    pub fn issue(&self) -> IssueNumber {
        match self {
            StageResult::Moved(t) => t.issue,
            StageResult::NoOp { issue, .. }
            | StageResult::Refused { issue, .. }
            | StageResult::Invalid { issue, .. } => *issue,
        }
    }
}
