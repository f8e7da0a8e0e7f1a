//! The API's shapes, only the fields ward reads, and their conversion to
//! the forge's small types with `TryFrom`: API data is never unwrapped.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use crate::forge::{
    CiFailure, CiState, CiStatus, Comment, CommitInfo, ForgeError, ForgeResult, Issue, IssueNumber, IssueState,
    LabelAction, LabelEvent, Listed, Permission, PullRequest, PullState, Review, ReviewState, StoredChart,
    UnknownPermission,
};

/// What in an API answer is not what the API documents, found converting
/// it to the forge's types (said after "the answer is not what the API
/// documents", [`bad_shape`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Unexpected {
    #[error("{what} #{number} has state `{state}`")]
    State { what: &'static str, number: u64, state: String },
    #[error("a label event without its label")]
    LabelWithoutName,
    #[error(transparent)]
    Permission(#[from] UnknownPermission),
    #[error("the chart path holds a {0}, not a file")]
    ChartNotAFile(String),
    #[error("the chart comes in encoding `{0}`")]
    ChartEncoding(String),
    #[error("the chart's content is not base64 ({0})")]
    ChartNotBase64(base64::DecodeError),
    #[error("the chart is not UTF-8 text")]
    ChartNotUtf8,
    #[error("review state `{0}` is unknown")]
    ReviewState(String),
    #[error("check run `{0}` is completed without a conclusion")]
    NoConclusion(String),
    #[error("commit status `{context}` has state `{state}`")]
    StatusState { context: String, state: String },
}

#[derive(Deserialize)]
pub(super) struct WireUser {
    pub(super) login: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum WireLabelRef {
    Name(String),
    Object { name: String },
}

#[derive(Deserialize)]
pub(super) struct WireIssue {
    pub(super) number: u64,
    pub(super) title: String,
    pub(super) body: Option<String>,
    pub(super) user: Option<WireUser>,
    pub(super) state: String,
    #[serde(default)]
    pub(super) labels: Vec<WireLabelRef>,
}

impl TryFrom<WireIssue> for Issue {
    type Error = Unexpected;
    fn try_from(w: WireIssue) -> Result<Self, Unexpected> {
        let state = match w.state.as_str() {
            "open" => IssueState::Open,
            "closed" => IssueState::Closed,
            other => return Err(Unexpected::State { what: "issue", number: w.number, state: other.into() }),
        };
        Ok(Issue {
            number: IssueNumber(w.number),
            title: w.title,
            body: w.body.unwrap_or_default(),
            author: w.user.map(|u| u.login).unwrap_or_else(|| "ghost".into()),
            state,
            labels: w
                .labels
                .into_iter()
                .map(|l| match l {
                    WireLabelRef::Name(n) | WireLabelRef::Object { name: n } => n,
                })
                .collect(),
        })
    }
}

/// An issue in a listing, with when it last changed, read straight from
/// the page (no `#[serde(flatten)]` of [`WireIssue`], which would keep
/// every field of GitHub's 7 KB issue on the way). `pull_request` marks a
/// pull request: the issues listing holds both.
#[derive(Deserialize)]
pub(super) struct WireListed {
    pub(super) number: u64,
    pub(super) title: String,
    pub(super) body: Option<String>,
    pub(super) user: Option<WireUser>,
    pub(super) state: String,
    #[serde(default)]
    pub(super) labels: Vec<WireLabelRef>,
    #[serde(default)]
    pub(super) updated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(super) pull_request: Option<serde::de::IgnoredAny>,
}

impl TryFrom<WireListed> for Listed {
    type Error = Unexpected;
    fn try_from(w: WireListed) -> Result<Self, Unexpected> {
        let WireListed { number, title, body, user, state, labels, updated_at, pull_request: _ } = w;
        let issue = Issue::try_from(WireIssue { number, title, body, user, state, labels })?;
        Ok(Listed { issue, updated_at })
    }
}

#[derive(Deserialize)]
pub(super) struct WireLabel {
    pub(super) name: String,
}

#[derive(Deserialize)]
pub(super) struct WireIssueEvent {
    pub(super) event: String,
    pub(super) actor: Option<WireUser>,
    pub(super) created_at: DateTime<Utc>,
    pub(super) label: Option<WireLabel>,
}

/// Issue events that are not label changes convert to `None`.
pub(super) struct MaybeLabelEvent(pub(super) Option<LabelEvent>);

impl TryFrom<WireIssueEvent> for MaybeLabelEvent {
    type Error = Unexpected;
    fn try_from(w: WireIssueEvent) -> Result<Self, Unexpected> {
        let action = match w.event.as_str() {
            "labeled" => LabelAction::Added,
            "unlabeled" => LabelAction::Removed,
            _ => return Ok(Self(None)),
        };
        let label = w.label.ok_or(Unexpected::LabelWithoutName)?.name;
        let actor = w.actor.map(|a| a.login).unwrap_or_else(|| "ghost".into());
        Ok(Self(Some(LabelEvent { label, action, actor, at: w.created_at })))
    }
}

#[derive(Deserialize)]
pub(super) struct WireComment {
    pub(super) id: u64,
    pub(super) user: Option<WireUser>,
    pub(super) body: Option<String>,
    pub(super) created_at: DateTime<Utc>,
}

impl TryFrom<WireComment> for Comment {
    type Error = Unexpected;
    fn try_from(w: WireComment) -> Result<Self, Unexpected> {
        Ok(Comment {
            id: w.id,
            author: w.user.map(|u| u.login).unwrap_or_else(|| "ghost".into()),
            body: w.body.unwrap_or_default(),
            at: w.created_at,
        })
    }
}

#[derive(Deserialize)]
pub(super) struct WirePermission {
    pub(super) permission: String,
    #[serde(default)]
    pub(super) role_name: Option<String>,
}

impl TryFrom<WirePermission> for Permission {
    type Error = Unexpected;
    fn try_from(w: WirePermission) -> Result<Self, Unexpected> {
        // `permission` only knows admin/write/read/none; `role_name` also
        // knows triage and maintain. Custom roles fall back to `permission`.
        let role = w.role_name.as_deref().and_then(|r| r.parse().ok());
        Ok(role.map_or_else(|| w.permission.parse::<Permission>(), Ok)?)
    }
}

#[derive(Deserialize)]
pub(super) struct WireContent {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) sha: String,
    #[serde(default)]
    pub(super) content: Option<String>,
    #[serde(default)]
    pub(super) encoding: Option<String>,
}

impl TryFrom<WireContent> for StoredChart {
    type Error = Unexpected;
    fn try_from(w: WireContent) -> Result<Self, Unexpected> {
        if w.kind != "file" {
            return Err(Unexpected::ChartNotAFile(w.kind));
        }
        if w.encoding.as_deref().is_some_and(|e| e != "base64") {
            return Err(Unexpected::ChartEncoding(w.encoding.unwrap_or_default()));
        }
        let packed: String = w.content.unwrap_or_default().chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let bytes = base64::engine::general_purpose::STANDARD.decode(packed).map_err(Unexpected::ChartNotBase64)?;
        let text = String::from_utf8(bytes).map_err(|_| Unexpected::ChartNotUtf8)?;
        Ok(StoredChart { text, version: w.sha })
    }
}

/// `GET /git/blobs/{sha}`: the whole blob, base64.
#[derive(Deserialize)]
pub(super) struct WireBlob {
    pub(super) content: String,
    pub(super) encoding: String,
}

#[derive(Deserialize)]
pub(super) struct WireFileCommit {
    pub(super) content: Option<WireSha>,
}

#[derive(Deserialize)]
pub(super) struct WireSha {
    pub(super) sha: String,
}

#[derive(Deserialize)]
pub(super) struct WireRef {
    #[serde(rename = "ref")]
    pub(super) name: String,
    pub(super) sha: String,
}

#[derive(Deserialize)]
pub(super) struct WirePull {
    pub(super) number: u64,
    pub(super) title: String,
    pub(super) body: Option<String>,
    pub(super) user: Option<WireUser>,
    pub(super) state: String,
    #[serde(default)]
    pub(super) merged_at: Option<String>,
    pub(super) html_url: String,
    pub(super) head: WireRef,
    pub(super) base: WireRef,
}

impl TryFrom<WirePull> for PullRequest {
    type Error = Unexpected;
    fn try_from(w: WirePull) -> Result<Self, Unexpected> {
        let state = match (w.state.as_str(), w.merged_at.is_some()) {
            ("open", _) => PullState::Open,
            ("closed", true) => PullState::Merged,
            ("closed", false) => PullState::Closed,
            (other, _) => {
                return Err(Unexpected::State { what: "pull request", number: w.number, state: other.into() });
            }
        };
        Ok(PullRequest {
            number: w.number,
            title: w.title,
            body: w.body.unwrap_or_default(),
            author: w.user.map(|u| u.login).unwrap_or_else(|| "ghost".into()),
            head_branch: w.head.name,
            head_sha: w.head.sha,
            base_branch: w.base.name,
            state,
            url: w.html_url,
        })
    }
}

#[derive(Deserialize)]
pub(super) struct WireReview {
    pub(super) user: Option<WireUser>,
    pub(super) state: String,
    #[serde(default)]
    pub(super) commit_id: Option<String>,
    #[serde(default)]
    pub(super) body: Option<String>,
}

impl TryFrom<WireReview> for Review {
    type Error = Unexpected;
    fn try_from(w: WireReview) -> Result<Self, Unexpected> {
        let state = match w.state.as_str() {
            "APPROVED" => ReviewState::Approved,
            "CHANGES_REQUESTED" => ReviewState::ChangesRequested,
            "COMMENTED" => ReviewState::Commented,
            "DISMISSED" => ReviewState::Dismissed,
            "PENDING" => ReviewState::Pending,
            other => return Err(Unexpected::ReviewState(other.into())),
        };
        Ok(Review {
            author: w.user.map(|u| u.login).unwrap_or_else(|| "ghost".into()),
            state,
            commit_sha: w.commit_id.unwrap_or_default(),
            body: w.body.unwrap_or_default(),
        })
    }
}

#[derive(Deserialize)]
pub(super) struct WireCommitItem {
    pub(super) sha: String,
    pub(super) commit: WireCommitDetail,
    #[serde(default)]
    pub(super) parents: Vec<Value>,
}

#[derive(Deserialize)]
pub(super) struct WireCommitDetail {
    pub(super) message: String,
}

impl TryFrom<WireCommitItem> for CommitInfo {
    type Error = Unexpected;
    fn try_from(w: WireCommitItem) -> Result<Self, Unexpected> {
        Ok(CommitInfo { sha: w.sha, message: w.commit.message, parent_count: w.parents.len() })
    }
}

/// One check run or one commit status, reduced to a verdict.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Check {
    pub(super) name: String,
    pub(super) state: CiState,
    pub(super) detail: String,
    pub(super) url: String,
    pub(super) summary: Option<String>,
    pub(super) is_status: bool,
}

#[derive(Deserialize)]
pub(super) struct WireCheckRun {
    pub(super) name: String,
    pub(super) status: String,
    pub(super) conclusion: Option<String>,
    #[serde(default)]
    pub(super) html_url: Option<String>,
    #[serde(default)]
    pub(super) output: Option<WireCheckOutput>,
}

#[derive(Deserialize)]
pub(super) struct WireCheckOutput {
    pub(super) title: Option<String>,
    pub(super) summary: Option<String>,
}

impl TryFrom<WireCheckRun> for Check {
    type Error = Unexpected;
    fn try_from(w: WireCheckRun) -> Result<Self, Unexpected> {
        let (state, detail) = match (w.status.as_str(), w.conclusion.as_deref()) {
            ("completed", Some(c @ ("success" | "neutral" | "skipped"))) => (CiState::Success, c.to_string()),
            ("completed", Some(c)) => (CiState::Failure, c.to_string()),
            ("completed", None) => return Err(Unexpected::NoConclusion(w.name)),
            (status, _) => (CiState::Pending, status.to_string()),
        };
        // The output's title and summary, as the API gives them (null for Actions jobs).
        let summary = w.output.and_then(|o| {
            let parts: Vec<String> =
                [o.title, o.summary].into_iter().flatten().filter(|t| !t.trim().is_empty()).collect();
            (!parts.is_empty()).then(|| parts.join(": "))
        });
        Ok(Check { name: w.name, state, detail, url: w.html_url.unwrap_or_default(), summary, is_status: false })
    }
}

#[derive(Deserialize)]
pub(super) struct WireCombinedStatus {
    pub(super) statuses: Vec<WireStatus>,
}

#[derive(Deserialize)]
pub(super) struct WireStatus {
    pub(super) context: String,
    pub(super) state: String,
    #[serde(default)]
    pub(super) target_url: Option<String>,
    #[serde(default)]
    pub(super) description: Option<String>,
}

impl TryFrom<WireStatus> for Check {
    type Error = Unexpected;
    fn try_from(w: WireStatus) -> Result<Self, Unexpected> {
        let state = match w.state.as_str() {
            "success" => CiState::Success,
            "pending" => CiState::Pending,
            "failure" | "error" => CiState::Failure,
            other => {
                let state = other.to_string();
                return Err(Unexpected::StatusState { context: w.context, state });
            }
        };
        let summary = w.description.filter(|d| !d.trim().is_empty());
        Ok(Check {
            name: w.context,
            state,
            detail: w.state,
            url: w.target_url.unwrap_or_default(),
            summary,
            is_status: true,
        })
    }
}

/// Folds check runs and statuses: any failure fails, then any pending is
/// pending, nothing at all is missing, else success. A combined status of
/// `pending` with no statuses (GitHub's answer when only check runs exist)
/// adds nothing: only the statuses themselves count.
pub(super) fn fold_ci(checks: &[Check]) -> CiStatus {
    let state = if checks.is_empty() {
        CiState::Missing
    } else if checks.iter().any(|c| c.state == CiState::Failure) {
        CiState::Failure
    } else if checks.iter().any(|c| c.state == CiState::Pending) {
        CiState::Pending
    } else {
        CiState::Success
    };
    let failures = checks
        .iter()
        .filter(|c| c.state == CiState::Failure)
        .map(|c| CiFailure {
            name: c.name.clone(),
            conclusion: c.detail.clone(),
            url: c.url.clone(),
            summary: c.summary.clone(),
        })
        .collect();
    CiStatus {
        state,
        checks: checks.iter().map(|c| format!("{}: {}", c.name, c.detail)).collect(),
        failures,
        statuses: checks.iter().filter(|c| c.is_status).count(),
    }
}

#[derive(Deserialize)]
pub(super) struct WireGraphql {
    pub(super) data: Option<Value>,
    #[serde(default)]
    pub(super) errors: Vec<WireGraphqlError>,
}

#[derive(Deserialize)]
pub(super) struct WireGraphqlError {
    pub(super) message: String,
}

#[derive(Deserialize)]
pub(super) struct WireThreads {
    pub(super) nodes: Vec<WireThread>,
    #[serde(rename = "pageInfo")]
    pub(super) page_info: WirePageInfo,
}

#[derive(Deserialize)]
pub(super) struct WireThread {
    #[serde(rename = "isResolved")]
    pub(super) is_resolved: bool,
}

#[derive(Deserialize)]
pub(super) struct WirePageInfo {
    #[serde(rename = "hasNextPage")]
    pub(super) has_next_page: bool,
    #[serde(rename = "endCursor")]
    pub(super) end_cursor: Option<String>,
}

pub(super) const THREADS_QUERY: &str = "query($owner: String!, $name: String!, $number: Int!, $after: String) { \
repository(owner: $owner, name: $name) { pullRequest(number: $number) { \
reviewThreads(first: 100, after: $after) { nodes { isResolved } pageInfo { hasNextPage endCursor } } } } }";

pub(super) struct LabelName(pub(super) String);

impl TryFrom<WireLabel> for LabelName {
    type Error = Unexpected;
    fn try_from(w: WireLabel) -> Result<Self, Unexpected> {
        Ok(Self(w.name))
    }
}

pub(super) fn array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

pub(super) fn check_runs(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Object(mut m) => array(m.remove("check_runs")?),
        _ => None,
    }
}

/// Converts each API item with `TryFrom`, naming the action on failure.
pub(super) fn convert<W, T>(items: Vec<Value>, action: &str) -> ForgeResult<Vec<T>>
where
    W: for<'de> Deserialize<'de>,
    T: TryFrom<W, Error = Unexpected>,
{
    items
        .into_iter()
        .map(|v| {
            let wire: W = serde_json::from_value(v).map_err(|e| bad_shape(action, e))?;
            T::try_from(wire).map_err(|e| bad_shape(action, e))
        })
        .collect()
}

pub(super) fn bad_shape(action: &str, e: impl std::fmt::Display) -> ForgeError {
    ForgeError::Api {
        action: action.into(),
        status: 200,
        message: format!("the answer is not what the API documents ({e})"),
    }
}
