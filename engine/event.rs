//! The Actions event that started a run: `$GITHUB_EVENT_PATH` (the webhook
//! payload) and `$GITHUB_EVENT_NAME`, turned into a [`Trigger`].
//!
//! Four events are ward's: `issues` labeled, `repository_dispatch` of type
//! `ward-stage`, `workflow_dispatch` (inputs `issue`, optional `stage`) and
//! `schedule` (the sweep). Five more wake a waiting patient when they are
//! about its treatment branch (`ward/issue-N`): `pull_request_review`
//! submitted, `check_suite`, `check_run` and `workflow_run` completed, and
//! `status`; and `pull_request` closed or dequeued wakes a patient resting
//! in GitHub's merge queue. Anything else is [`Parsed::NotOurs`] with a one-line reason,
//! so a workflow can exit 0 cheaply. A payload that claims to be one of
//! ours but lacks what we need is an [`EventError`].
//!
//! This module knows no configuration: whether a label starts a stage, and
//! whether its actor may apply it, is decided in [`crate::actions`].

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::forge::IssueNumber;
use crate::forge::github::DISPATCH_EVENT;

/// What kind of event started the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    /// A label landed on an issue.
    Labeled,
    /// The engine (or someone with write access) dispatched `ward-stage`.
    RepositoryDispatch,
    /// A person started the workflow by hand.
    WorkflowDispatch,
    /// The cron: the charge nurse's sweep.
    Schedule,
    /// A review or CI result on a treatment branch: a waiting patient looks again.
    Wake,
}

/// What a wake-up event says, for the cheap look before a re-audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wake {
    /// The event's name (`check_suite`, `status`, ...).
    pub event: String,
    /// The commit the event is about.
    pub head: Option<String>,
    /// Who submitted the review (`pull_request_review` only).
    pub reviewer: Option<String>,
    /// Why GitHub's merge queue let the pull request go (`pull_request`
    /// `dequeued` only: the payload's `reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dequeued: Option<String>,
}

/// A parsed ward event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trigger {
    pub kind: TriggerKind,
    /// The patient; `None` only for the sweep.
    pub issue: Option<IssueNumber>,
    /// The label that landed (labeled events), or the one a dispatch was
    /// sent for (`client_payload.label`).
    pub label: Option<String>,
    /// The stage asked for by name (`workflow_dispatch` input `stage`).
    pub stage: Option<String>,
    /// Who caused the event (`sender.login`).
    pub actor: String,
    /// `owner/name` (`repository.full_name`), when the payload has it.
    pub repository: Option<String>,
    /// A wake-up's details ([`TriggerKind::Wake`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wake: Option<Wake>,
}

/// The result of reading an event file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "ward", rename_all = "snake_case")]
pub enum Parsed {
    Ours(Trigger),
    /// Not a ward event; the reason is one line for the log.
    NotOurs {
        reason: String,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    #[error("cannot read the event file {}: {message} (in a workflow, pass \"$GITHUB_EVENT_PATH\")", path.display())]
    Unreadable { path: PathBuf, message: String },
    #[error("the event file {} is not JSON: {message} at line {line}, column {column}", path.display())]
    NotJson { path: PathBuf, line: usize, column: usize, message: String },
    #[error("the `{event}` event in {} has no usable `{field}`: {why}", path.display())]
    Malformed { path: PathBuf, event: String, field: String, why: String },
    #[error(
        "cannot tell which event {} holds: set GITHUB_EVENT_NAME (issues, repository_dispatch, workflow_dispatch, schedule)",
        path.display()
    )]
    UnknownShape { path: PathBuf },
}

/// Reads and parses the event file. `event_name` is `$GITHUB_EVENT_NAME`;
/// without it the shape of the payload decides.
pub fn read_event(path: &Path, event_name: Option<&str>) -> Result<Parsed, EventError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| EventError::Unreadable { path: path.to_path_buf(), message: e.to_string() })?;
    parse_event(&text, event_name, path)
}

/// Parses an event payload; `path` is used in messages only.
pub fn parse_event(text: &str, event_name: Option<&str>, path: &Path) -> Result<Parsed, EventError> {
    let payload: Value = serde_json::from_str(text).map_err(|e| EventError::NotJson {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string().split(" at line ").next().unwrap_or_default().to_string(),
    })?;
    if !payload.is_object() {
        return Err(EventError::Malformed {
            path: path.to_path_buf(),
            event: event_name.unwrap_or("unknown").into(),
            field: "(payload)".into(),
            why: "the payload is not a JSON object".into(),
        });
    }
    let name = match event_name.filter(|n| !n.trim().is_empty()) {
        Some(n) => n.to_string(),
        None => infer_name(&payload).ok_or_else(|| EventError::UnknownShape { path: path.to_path_buf() })?.into(),
    };
    let r = Reader { payload: &payload, path, event: &name };
    let actor = r.str_at("/sender/login").unwrap_or_default();
    let repository = r.str_at("/repository/full_name");
    let trigger = |kind, issue, label, stage| Trigger {
        kind,
        issue,
        label,
        stage,
        actor: actor.clone(),
        repository: repository.clone(),
        wake: None,
    };
    match name.as_str() {
        "issues" => {
            let action = r.str_at("/action").unwrap_or_default();
            if action != "labeled" {
                return Ok(not_ours(format!("an `issues` event with action `{action}`; ward starts on `labeled`")));
            }
            let issue = r.issue_at("/issue/number")?;
            let label =
                r.str_at("/label/name").ok_or_else(|| r.malformed("label.name", "a labeled event names its label"))?;
            Ok(Parsed::Ours(trigger(TriggerKind::Labeled, Some(issue), Some(label), None)))
        }
        "repository_dispatch" => {
            let action = r.str_at("/action").unwrap_or_default();
            if action != DISPATCH_EVENT {
                return Ok(not_ours(format!("a repository_dispatch of type `{action}`; ward's is `{DISPATCH_EVENT}`")));
            }
            let issue = r.issue_at("/client_payload/issue")?;
            // The label the dispatched stage starts on: gone means handled.
            let label = match r.payload.pointer("/client_payload/label") {
                None | Some(Value::Null) => None,
                Some(Value::String(l)) if !l.trim().is_empty() => Some(l.clone()),
                Some(other) => {
                    return Err(r.malformed("client_payload.label", &format!("`{other}` is not a label name")));
                }
            };
            Ok(Parsed::Ours(trigger(TriggerKind::RepositoryDispatch, Some(issue), label, None)))
        }
        "workflow_dispatch" => {
            let issue = r.issue_at("/inputs/issue")?;
            let stage = r.str_at("/inputs/stage").map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
            Ok(Parsed::Ours(trigger(TriggerKind::WorkflowDispatch, Some(issue), None, stage)))
        }
        "schedule" => Ok(Parsed::Ours(trigger(TriggerKind::Schedule, None, None, None))),
        "pull_request_review" | "check_suite" | "check_run" | "workflow_run" | "status" => {
            let (branches, head, reviewer) = match wake_facts(&r) {
                Ok(facts) => facts,
                Err(asleep) => return Ok(not_ours(asleep.to_string())),
            };
            let Some(issue) = branches.iter().find_map(|b| patient_of_branch(b)) else {
                return Ok(not_ours(format!(
                    "a `{name}` event about {}; ward wakes only on its treatment branches (`{BRANCH_PREFIX}N`)",
                    if branches.is_empty() { "no branch".to_string() } else { format!("`{}`", branches.join("`, `")) }
                )));
            };
            let mut t = trigger(TriggerKind::Wake, Some(issue), None, None);
            t.wake = Some(Wake { event: name.clone(), head, reviewer, dequeued: None });
            Ok(Parsed::Ours(t))
        }
        "pull_request" => {
            // GitHub's merge queue merged the pull request (closed) or let it go (dequeued).
            let action = r.str_at("/action").unwrap_or_default();
            if action != "closed" && action != "dequeued" {
                return Ok(not_ours(format!(
                    "a `pull_request` event with action `{action}`; ward wakes on `closed` and `dequeued`"
                )));
            }
            let branch = r.str_at("/pull_request/head/ref").unwrap_or_default();
            let Some(issue) = patient_of_branch(&branch) else {
                return Ok(not_ours(format!(
                    "a `pull_request` event about `{branch}`; ward wakes only on its treatment branches \
                     (`{BRANCH_PREFIX}N`)"
                )));
            };
            let mut t = trigger(TriggerKind::Wake, Some(issue), None, None);
            let dequeued = (action == "dequeued").then(|| r.str_at("/reason").unwrap_or_else(|| "not given".into()));
            let head = r.str_at("/pull_request/head/sha");
            t.wake = Some(Wake { event: name.clone(), head, reviewer: None, dequeued });
            Ok(Parsed::Ours(t))
        }
        other => Ok(not_ours(format!(
            "a `{other}` event; ward runs on issues labeled, repository_dispatch, workflow_dispatch and schedule"
        ))),
    }
}

/// The prefix of a treatment branch, `ward/issue-` (see `workspace::worktree`).
pub const BRANCH_PREFIX: &str = "ward/issue-";

/// The patient a treatment branch belongs to: `ward/issue-12` is #12.
pub fn patient_of_branch(branch: &str) -> Option<IssueNumber> {
    let n = branch.strip_prefix(BRANCH_PREFIX)?;
    (!n.starts_with('0') && n.chars().all(|c| c.is_ascii_digit())).then(|| n.parse().ok().map(IssueNumber)).flatten()
}

/// A wake-up event whose action cannot change an audit: not ours, and why.
#[derive(Debug, thiserror::Error)]
#[error("a `{name}` event with action `{action}`; ward wakes on `{wanted}`")]
struct NoChange {
    name: String,
    action: String,
    wanted: &'static str,
}

/// Branches, head commit and reviewer of a wake-up event; `Err` when the
/// event is not one that can change an audit.
type WakeFacts = (Vec<String>, Option<String>, Option<String>);
fn wake_facts(r: &Reader<'_>) -> Result<WakeFacts, NoChange> {
    let action = r.str_at("/action").unwrap_or_default();
    let name = r.event;
    let wanted = if name == "pull_request_review" { "submitted" } else { "completed" };
    if name != "status" && action != wanted {
        return Err(NoChange { name: name.to_string(), action, wanted });
    }
    let (branch, head) = match name {
        "pull_request_review" => ("/pull_request/head/ref", "/pull_request/head/sha"),
        "check_suite" => ("/check_suite/head_branch", "/check_suite/head_sha"),
        "check_run" => ("/check_run/check_suite/head_branch", "/check_run/head_sha"),
        "workflow_run" => ("/workflow_run/head_branch", "/workflow_run/head_sha"),
        _ => ("", "/sha"),
    };
    let branches: Vec<String> = if name == "status" {
        let list = r.payload.pointer("/branches").and_then(|b| b.as_array()).cloned().unwrap_or_default();
        list.iter().filter_map(|b| b.pointer("/name")?.as_str().map(str::to_string)).collect()
    } else {
        r.str_at(branch).into_iter().collect()
    };
    let reviewer = (name == "pull_request_review").then(|| r.str_at("/review/user/login")).flatten();
    Ok((branches, r.str_at(head), reviewer))
}

fn not_ours(reason: String) -> Parsed {
    Parsed::NotOurs { reason }
}

/// Without `GITHUB_EVENT_NAME`: the keys that only one event has.
fn infer_name(p: &Value) -> Option<&'static str> {
    let has = |k: &str| p.get(k).is_some();
    if has("client_payload") {
        Some("repository_dispatch")
    } else if has("inputs") && has("workflow") {
        Some("workflow_dispatch")
    } else if has("schedule") {
        Some("schedule")
    } else if has("issue") && has("action") && !has("comment") {
        Some("issues")
    } else if has("pull_request") {
        Some("pull_request")
    } else if has("commits") && has("ref") {
        Some("push")
    } else {
        None
    }
}

struct Reader<'a> {
    payload: &'a Value,
    path: &'a Path,
    event: &'a str,
}

impl Reader<'_> {
    fn str_at(&self, pointer: &str) -> Option<String> {
        self.payload.pointer(pointer)?.as_str().map(str::to_string)
    }

    fn malformed(&self, field: &str, why: &str) -> EventError {
        EventError::Malformed {
            path: self.path.to_path_buf(),
            event: self.event.into(),
            field: field.into(),
            why: why.into(),
        }
    }

    /// An issue number: a positive integer, or (workflow inputs) a string of digits.
    fn issue_at(&self, pointer: &str) -> Result<IssueNumber, EventError> {
        let field = pointer.trim_start_matches('/').replace('/', ".");
        let value = self.payload.pointer(pointer).ok_or_else(|| self.malformed(&field, "it is missing"))?;
        let number = match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().trim_start_matches('#').parse::<u64>().ok(),
            _ => None,
        };
        match number {
            Some(n) if n > 0 => Ok(IssueNumber(n)),
            _ => Err(self.malformed(&field, &format!("`{value}` is not an issue number"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, name: Option<&str>) -> Result<Parsed, EventError> {
        parse_event(text, name, Path::new("event.json"))
    }

    #[test]
    fn issue_numbers_accept_numbers_and_digit_strings_only() {
        let wd = |issue: &str| {
            parse(&format!(r#"{{"inputs": {{"issue": {issue}}}, "workflow": "w", "sender": {{"login": "a"}}}}"#), None)
        };
        assert!(matches!(wd("7"), Ok(Parsed::Ours(Trigger { issue: Some(IssueNumber(7)), .. }))));
        assert!(matches!(wd("\"#8\""), Ok(Parsed::Ours(Trigger { issue: Some(IssueNumber(8)), .. }))));
        for bad in ["0", "-1", "\"x\"", "null", "1.5"] {
            let err = wd(bad).unwrap_err();
            assert!(matches!(&err, EventError::Malformed { field, .. } if field == "inputs.issue"), "{bad}: {err}");
        }
    }

    #[test]
    fn an_unknown_shape_without_a_name_asks_for_the_name() {
        assert!(matches!(parse("{}", None), Err(EventError::UnknownShape { .. })));
        assert!(matches!(parse("[]", Some("issues")), Err(EventError::Malformed { .. })));
    }
}
