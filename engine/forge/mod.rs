//! Where issues live, behind one trait. `local` keeps them in JSON files (the
//! embedded default); `github` talks to GitHub's API (REST for writes,
//! GraphQL for the reads one query can combine: [`Forge::patient`],
//! [`Forge::look`], [`Forge::pull_facts`], whose default implementations
//! make the separate calls). The engine above this line never knows which
//! one it has.

pub mod account;
pub mod github;
pub mod local;
pub mod merge;
pub mod retry;

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use account::{EngineAccount, rest_login};

/// An issue number, printed the way people write it: `#42`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IssueNumber(pub u64);

impl fmt::Display for IssueNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IssueState {
    Open,
    Closed,
}

/// The part of an issue the engine reads. Title, body and comments are
/// untrusted text written by anyone who can open an issue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Issue {
    pub number: IssueNumber,
    pub title: String,
    pub body: String,
    pub author: String,
    pub state: IssueState,
    pub labels: Vec<String>,
}

/// An issue as a listing shows it. Applying a label changes an issue, so
/// every label on it was applied at or before `updated_at`: the label is at
/// least `now - updated_at` old.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub issue: Issue,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub struct NewIssue {
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LabelAction {
    Added,
    Removed,
}

/// One entry of an issue's label history: who put which label on when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelEvent {
    pub label: String,
    pub action: LabelAction,
    pub actor: String,
    pub at: DateTime<Utc>,
}

/// A closed issue and who closed it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedIssue {
    pub number: IssueNumber,
    pub closed_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub at: DateTime<Utc>,
}

/// A repository permission, ordered from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

/// A word that names no repository permission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a repository permission (read, triage, write, maintain, admin)")]
pub struct UnknownPermission(pub String);

impl std::str::FromStr for Permission {
    type Err = UnknownPermission;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "none" => Self::None,
            "read" | "pull" => Self::Read,
            "triage" => Self::Triage,
            "write" | "push" => Self::Write,
            "maintain" => Self::Maintain,
            "admin" => Self::Admin,
            other => return Err(UnknownPermission(other.to_string())),
        })
    }
}

/// A label the engine may need to create, with how people see it.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelSpec {
    pub name: String,
    pub color: String,
    pub description: String,
}

/// A chart file as stored, with the version needed to replace it
/// (the blob sha on GitHub, a content hash locally).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChart {
    pub text: String,
    pub version: String,
}

/// A pull request, as the discharge audit and the treat stage see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub head_branch: String,
    pub head_sha: String,
    pub base_branch: String,
    pub state: PullState,
    pub url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullState {
    Open,
    Closed,
    Merged,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewPullRequest {
    pub head_branch: String,
    pub base_branch: String,
    pub title: String,
    pub body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    Pending,
}

/// A pull request review by a person (or an app).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    pub author: String,
    pub state: ReviewState,
    /// The commit the review was made on.
    pub commit_sha: String,
    pub body: String,
}

/// One commit of a pull request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitInfo {
    pub sha: String,
    pub message: String,
    pub parent_count: usize,
}

/// One commit of a branch's history, as the safety department reads it
/// (reverts of discharged changes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BranchCommit {
    pub sha: String,
    pub message: String,
    /// The committer's time.
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CiState {
    Success,
    Failure,
    Pending,
    /// No check run and no status was reported for the commit.
    #[default]
    Missing,
}

/// CI for one commit: check runs and commit statuses folded together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CiStatus {
    pub state: CiState,
    /// `name: conclusion` per check, for the checklist's note.
    pub checks: Vec<String>,
    /// The checks that failed, with what the API says of each: the fellow
    /// who fixes them reads this.
    #[serde(default)]
    pub failures: Vec<CiFailure>,
    /// How many commit statuses (not check runs) were reported.
    #[serde(default)]
    pub statuses: usize,
}

impl CiStatus {
    pub fn new(state: CiState, checks: Vec<String>) -> Self {
        Self { state, checks, failures: Vec::new(), statuses: 0 }
    }
}

/// One failed check run or commit status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CiFailure {
    pub name: String,
    /// `failure`, `timed_out`, `cancelled`, `action_required`, `error`, ...
    pub conclusion: String,
    /// Where a person sees it (the check run's or the status's page).
    pub url: String,
    /// The check run's output title and summary, when the API gives one
    /// (Actions jobs report none).
    pub summary: Option<String>,
}

/// What a stage run reads before its guards: the issue with its labels,
/// the lockdown in force (the oldest open issue with the lockdown label),
/// and the chart. One GraphQL query on GitHub.
#[derive(Debug, Clone, PartialEq)]
pub struct PatientRead {
    pub issue: Issue,
    pub lockdown: Option<Issue>,
    pub chart: Option<StoredChart>,
    /// The repository's label names, when the read gave them whole (an
    /// admission creates ward's missing labels without listing them again).
    pub repository_labels: Option<Vec<String>>,
    /// The patient's comment, where the read looks for it (GitHub's GraphQL
    /// read): the newest comment the token's own account wrote that starts
    /// with [`PATIENT_COMMENT_MARKER`] (a marker in anyone else's comment is
    /// never trusted). `None` elsewhere: the chart's PATIENT_COMMENT note says.
    pub patient_comment: Option<u64>,
}

/// The line the patient's comment starts with: how a read finds it among
/// the issue's comments (only in one the engine's account wrote).
pub const PATIENT_COMMENT_MARKER: &str = "**ward** · the patient's comment";

/// A move's label write: the labels the patient carried and those it
/// carries after (the whole set).
#[derive(Debug, Clone, Copy)]
pub struct Relabel<'a> {
    pub from: &'a [String],
    pub to: &'a [String],
}

/// The patient's comment, written with a move.
#[derive(Debug, Clone, Copy)]
pub enum CommentWrite<'a> {
    /// Replace the body of the comment with this id.
    Edit { id: u64, body: &'a str },
    /// No comment yet: create it (once: a retry looks for it first).
    Create { body: &'a str },
}

/// Which part of [`Forge::relabel_and_comment`] failed. In one request
/// (GitHub's GraphQL mutation) any error fails the whole: the labels.
#[derive(Debug, thiserror::Error)]
pub enum RelabelError {
    #[error(transparent)]
    Labels(ForgeError),
    /// The labels moved; only the comment failed.
    #[error(transparent)]
    Comment(ForgeError),
}

/// What the charge nurse reads of a due patient: the issue as it is now
/// (after the listing: has it moved on?), its chart and its label history.
/// One GraphQL query on GitHub.
#[derive(Debug, Clone, PartialEq)]
pub struct PatientLook {
    pub issue: Issue,
    pub chart: Option<StoredChart>,
    pub label_events: Vec<LabelEvent>,
}

/// One search the sweep asks for ([`Forge::search_issues`]): issues
/// carrying `label` (open ones when `open`), last changed before or since
/// a time.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueSearch {
    pub label: String,
    pub open: bool,
    pub updated: Updated,
}

/// The `updated:` bound of an [`IssueSearch`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Updated {
    /// Last changed strictly before this time (`updated:<T`).
    Before(DateTime<Utc>),
    /// Last changed at or after this time (`updated:>=T`).
    Since(DateTime<Utc>),
}

/// What one [`IssueSearch`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// Every issue that matched, as the listing shows them.
    Issues(Vec<Listed>),
    /// More matched than the search API gives ([`SEARCH_CAP`]): list instead.
    TooMany(usize),
}

/// The most results GitHub's search gives for one query, over all pages.
pub const SEARCH_CAP: usize = 1000;

/// How many patients [`Forge::looks`] reads in one request on GitHub.
pub const LOOKS_PER_REQUEST: usize = 50;

/// The facts of a pull request the discharge audit reads (one GraphQL query
/// on GitHub). A fact the forge could not read is no field here but the
/// read's error ([`Forge::pull_facts`] fails).
#[derive(Debug, Clone, PartialEq)]
pub struct PullFacts {
    pub pull: PullRequest,
    pub reviews: Vec<Review>,
    pub unresolved_threads: usize,
    pub commits: Vec<CommitInfo>,
    /// CI of the head commit: check runs (but ward's own) and statuses;
    /// `None` when the pull request reports no head commit (a fact that was
    /// read and cannot pass: the audit says so).
    pub ci: Option<CiStatus>,
    /// Whether a reviewer (lower-case login) can push to the repository,
    /// where the forge says it with the reviews (GitHub's
    /// `authorCanPushToRepository`); empty when it does not.
    pub can_push: std::collections::BTreeMap<String, bool>,
    /// The forge's own merge queue on the pull request's base branch
    /// (GitHub's, read with the same query); `None` when it has none.
    pub merge_queue: Option<ForgeQueue>,
}

/// GitHub's own merge queue on a pull request's base branch, as the
/// audit's read saw it (`isMergeQueueEnabled`, `isInMergeQueue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeQueue {
    /// The pull request's node id, for `enqueuePullRequest`.
    pub pull_id: String,
    /// Whether the pull request is in the queue now.
    pub queued: bool,
}

/// The `merge_queue` rule of a branch (`GET /rules/branches/{branch}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeQueueRule {
    /// `MERGE`, `SQUASH` or `REBASE`.
    pub merge_method: String,
    /// Minutes a required check may take before the group fails.
    pub check_response_timeout_minutes: Option<u64>,
    /// Where the rule comes from: `Repository owner/name`, `Organization org`.
    pub source: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("issue {0} does not exist in {1}")]
    IssueNotFound(IssueNumber, String),
    #[error("the chart of {0} changed while it was being written (someone else wrote it first)")]
    ChartConflict(IssueNumber),
    #[error("pull request #{pull} moved on from the audited head {audited}; audit the new head before merging")]
    HeadMoved { pull: u64, audited: String },
    /// The pull request does not merge into its base: both changed the
    /// same lines. `files` when the forge names them (the local forge; GitHub
    /// does not).
    #[error("{message}")]
    MergeConflict { pull: u64, files: Vec<String>, message: String },
    #[error("could not {action}: {message}")]
    Io { action: String, message: String },
    #[error("could not {action}: access denied ({message}); {help}")]
    Forbidden { action: String, message: String, help: String },
    #[error("could not {action}: GitHub answered {status}: {message}")]
    Api { action: String, status: u16, message: String },
}

impl ForgeError {
    pub fn io(action: impl Into<String>, err: impl fmt::Display) -> Self {
        Self::Io { action: action.into(), message: err.to_string() }
    }
}

pub type ForgeResult<T> = Result<T, ForgeError>;

/// Everything the engine asks of the place issues live. Implementations turn
/// their own models into these small types at the boundary.
#[async_trait]
pub trait Forge: Send + Sync {
    /// `owner/name` on GitHub, the folder locally; used in messages.
    fn describe(&self) -> String;

    /// The account the engine acts as (labels it applies are trusted):
    /// compare a login with it by [`EngineAccount::is`], nothing else.
    fn engine_account(&self) -> &EngineAccount;

    /// The local forge, when this is it: what only it does (record a
    /// treatment's commits as its pull request's head, the local CI's check
    /// runs, a person's review from the command line).
    fn as_local(&self) -> Option<&local::LocalForge> {
        None
    }

    async fn issue(&self, number: IssueNumber) -> ForgeResult<Issue>;
    /// The issue, the lockdown in force (open issues labeled
    /// `lockdown_label`, the oldest) and the chart, in one read where the
    /// forge can (GitHub: one GraphQL query); by default three reads.
    async fn patient(&self, number: IssueNumber, lockdown_label: &str) -> ForgeResult<PatientRead> {
        patient_by_parts(self, number, lockdown_label).await
    }
    /// The issue, its chart and its label history, in one read where the
    /// forge can (GitHub: one GraphQL query); by default three reads.
    async fn look(&self, number: IssueNumber) -> ForgeResult<PatientLook> {
        let issue = self.issue(number).await?;
        let chart = self.read_chart(number).await?;
        let label_events = self.label_events(number).await?;
        Ok(PatientLook { issue, chart, label_events })
    }
    async fn create_issue(&self, new: NewIssue) -> ForgeResult<Issue>;
    /// [`Self::look`] of several patients, each answer in the order asked
    /// (GitHub: one GraphQL query per [`LOOKS_PER_REQUEST`]); by default
    /// one look each.
    async fn looks(&self, numbers: &[IssueNumber]) -> Vec<ForgeResult<PatientLook>> {
        let mut out = Vec::with_capacity(numbers.len());
        for n in numbers {
            out.push(self.look(*n).await);
        }
        out
    }
    /// The search API (GitHub: one GraphQL query for every search, 100
    /// issues a page each), one answer per search in the order asked. The
    /// index lags behind writes: what it finds is a candidate to read, never
    /// a fact to act on. `Ok(None)`: the forge has no search; list instead.
    async fn search_issues(&self, searches: &[IssueSearch]) -> ForgeResult<Option<Vec<Found>>> {
        let _ = searches;
        Ok(None)
    }
    /// Open issues carrying `label`, every page.
    async fn open_issues_with_label(&self, label: &str) -> ForgeResult<Vec<Issue>>;
    /// The same listing, each issue with when it last changed (the sweep
    /// reads label ages from it). A forge that cannot say gives `None`.
    async fn open_issues_listed(&self, label: &str) -> ForgeResult<Vec<Listed>> {
        let issues = self.open_issues_with_label(label).await?;
        Ok(issues.into_iter().map(|issue| Listed { issue, updated_at: None }).collect())
    }
    /// Every issue, open or closed, for reports.
    async fn all_issues(&self) -> ForgeResult<Vec<Issue>>;
    async fn close_issue(&self, number: IssueNumber) -> ForgeResult<()>;
    async fn reopen_issue(&self, number: IssueNumber) -> ForgeResult<()>;
    /// Closed issues carrying `label`, closed (or otherwise updated) since
    /// `since`, with who closed them (infection control checks who closed a
    /// lockdown). `closed_by` is `None` where the forge does not say.
    async fn closed_issues_with_label(&self, label: &str, since: DateTime<Utc>) -> ForgeResult<Vec<ClosedIssue>>;

    /// Replace the issue's labels with `labels` in one write.
    async fn set_labels(&self, number: IssueNumber, labels: &[String]) -> ForgeResult<()>;
    /// The move's label write (when the labels change) and the patient's
    /// comment, in this order, in one request where the forge can (GitHub:
    /// one GraphQL mutation, when the read gave the node ids it needs); by
    /// default [`Self::set_labels`] then the comment's own call. Returns the
    /// id of a comment it created.
    async fn relabel_and_comment(
        &self,
        number: IssueNumber,
        labels: Option<Relabel<'_>>,
        comment: CommentWrite<'_>,
    ) -> Result<Option<u64>, RelabelError> {
        relabel_and_comment_by_parts(self, number, labels, comment).await
    }
    /// Whether [`Forge::patient`] finds the patient's comment by its marker
    /// ([`PatientRead::patient_comment`]): then a new comment's id needs no
    /// note in the chart.
    fn finds_patient_comment(&self) -> bool {
        false
    }
    /// The patient's comment as it is now, found by its marker where the
    /// forge finds it so (one read); `None` elsewhere.
    async fn find_patient_comment(&self, number: IssueNumber) -> ForgeResult<Option<u64>> {
        let _ = number;
        Ok(None)
    }
    /// Create the labels of `specs` that the repository does not have yet.
    async fn ensure_labels(&self, specs: &[LabelSpec]) -> ForgeResult<()>;
    /// The same, knowing the repository's label names already (`existing`,
    /// from [`PatientRead::repository_labels`]): no listing.
    async fn create_missing_labels(&self, specs: &[LabelSpec], existing: &[String]) -> ForgeResult<()> {
        let _ = existing;
        self.ensure_labels(specs).await
    }
    async fn label_events(&self, number: IssueNumber) -> ForgeResult<Vec<LabelEvent>>;

    async fn comments(&self, number: IssueNumber) -> ForgeResult<Vec<Comment>>;
    async fn add_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<()>;

    async fn permission(&self, login: &str) -> ForgeResult<Permission>;
    /// Who is acting through this forge, as the forge itself knows it
    /// (never a name someone typed): the login the token belongs to, or in
    /// a workflow run the event's sender; locally, the person whose name
    /// the local forge records.
    async fn acting_user(&self) -> ForgeResult<String>;

    async fn read_chart(&self, number: IssueNumber) -> ForgeResult<Option<StoredChart>>;
    /// Compare-and-swap: writes only when the stored version is still
    /// `expected` (`None` = the chart must not exist yet); otherwise
    /// [`ForgeError::ChartConflict`].
    async fn write_chart(&self, number: IssueNumber, text: &str, expected: Option<&str>) -> ForgeResult<StoredChart>;

    /// Start the next stage for `number` (repository_dispatch on GitHub, a
    /// queue entry locally). `label` is the label that stage starts on: a
    /// run of the dispatch finds it gone when the delivery is repeated, and
    /// does nothing (one event, one transition).
    async fn dispatch_stage(&self, number: IssueNumber, label: &str) -> ForgeResult<()>;

    /// The open (or merged) pull request whose head is `branch`, if any.
    async fn pull_request_for_branch(&self, branch: &str) -> ForgeResult<Option<PullRequest>>;
    /// Every pull request whose head is `branch`, closed ones included (the
    /// research department never opens a policy change twice, even one a
    /// person closed).
    async fn pull_requests_of_branch(&self, branch: &str) -> ForgeResult<Vec<PullRequest>>;
    /// Opens a pull request, or returns the one already open for the head.
    async fn open_pull_request(&self, new: NewPullRequest) -> ForgeResult<PullRequest>;
    /// Adds `label` to pull request `pull` unless it has it, keeping the
    /// others. On GitHub a pull request is an issue: its labels are the
    /// issue's.
    async fn label_pull_request(&self, pull: u64, label: &str) -> ForgeResult<()> {
        let mut labels = self.issue(IssueNumber(pull)).await?.labels;
        if labels.iter().any(|l| l == label) {
            return Ok(());
        }
        labels.push(label.to_string());
        self.set_labels(IssueNumber(pull), &labels).await
    }
    async fn reviews(&self, pull: u64) -> ForgeResult<Vec<Review>>;
    /// How many review threads are unresolved (GraphQL `reviewThreads` on GitHub).
    async fn unresolved_review_threads(&self, pull: u64) -> ForgeResult<usize>;
    async fn pull_request_commits(&self, pull: u64) -> ForgeResult<Vec<CommitInfo>>;
    /// The files the pull request adds or changes against its base (a
    /// renamed file by its new path; removed files aside), as the forge
    /// lists them for its diff.
    async fn pull_request_files(&self, pull: u64) -> ForgeResult<Vec<String>>;
    async fn ci_status(&self, sha: &str) -> ForgeResult<CiStatus>;
    /// The pull request of `branch` ([`Self::pull_request_for_branch`])
    /// with every fact the discharge audit reads, in one read where the
    /// forge can (GitHub: one GraphQL query); by default one read each.
    async fn pull_facts(&self, branch: &str) -> ForgeResult<Option<PullFacts>> {
        pull_facts_by_parts(self, branch).await
    }
    /// CI of `sha` from its check runs alone (one call on GitHub): the
    /// wake-up's cheap look, when no commit status was reported.
    async fn check_runs(&self, sha: &str) -> ForgeResult<CiStatus> {
        self.ci_status(sha).await
    }
    /// Starts the workflow file `workflow` (`ci.yml`) with
    /// `workflow_dispatch` on `branch`.
    async fn start_workflow(&self, workflow: &str, branch: &str) -> ForgeResult<()> {
        Err(ForgeError::io(
            format!("start workflow `{workflow}` on `{branch}` in {}", self.describe()),
            "this forge runs no workflows",
        ))
    }
    /// Squash-merges the pull request, only while its head is still
    /// `head_sha` (the commit the audit checked): a commit pushed after the
    /// audit makes the merge fail ([`ForgeError::HeadMoved`]) instead of
    /// landing unaudited.
    async fn merge_pull_request(&self, pull: u64, head_sha: &str) -> ForgeResult<()>;
    /// Puts the pull request into the forge's own merge queue (GitHub's),
    /// only while its head is still `head_sha`: a head that moved is
    /// [`ForgeError::HeadMoved`]. The queue merges it after the merge
    /// group's required checks pass.
    async fn enqueue_pull_request(&self, pull: u64, queue: &ForgeQueue, head_sha: &str) -> ForgeResult<()> {
        let _ = (queue, head_sha);
        Err(ForgeError::io(
            format!("enqueue pull request #{pull} in {}", self.describe()),
            "this forge has no merge queue",
        ))
    }
    /// The forge's own merge queue rule on `branch`, if the branch has one.
    async fn branch_merge_queue(&self, branch: &str) -> ForgeResult<Option<MergeQueueRule>> {
        let _ = branch;
        Ok(None)
    }

    // Commands in comments and the patient's comment (issue 11).

    /// Comments on the issue and returns the new comment's id.
    async fn post_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<u64>;
    /// Replaces the body of comment `id` on the issue (the patient's
    /// comment, edited in place at every stage).
    async fn edit_comment(&self, number: IssueNumber, id: u64, body: &str) -> ForgeResult<()>;
    /// Reacts to comment `id` on the issue (a command acknowledged or refused).
    async fn react(&self, number: IssueNumber, id: u64, reaction: Reaction) -> ForgeResult<()>;
    /// Asks `users` (logins) and `teams` (slugs) to review pull request
    /// `pull`. Locally: recorded on the pull request.
    async fn request_reviewers(&self, pull: u64, users: &[String], teams: &[String]) -> ForgeResult<()>;

    /// Whether this forge has a merge queue of its own that a base branch
    /// may turn on (GitHub's): a patient resting at the merge-queue label
    /// is then in it, and its pull request's fate wakes it.
    fn offers_merge_queue(&self) -> bool {
        false
    }

    /// Whether ward's own merge queue runs on this forge: `ward run` runs it
    /// on the local forge, ward-queue.yml on GitHub. Elsewhere discharge
    /// merges directly.
    fn runs_merge_queue(&self) -> bool {
        false
    }

    /// Starts a run of ward's merge queue where a workflow runs it
    /// (GitHub: `repository_dispatch` of type `ward-queue`). The local
    /// forge's `ward run` takes the queue whenever it is idle: nothing to send.
    async fn dispatch_merge_queue(&self) -> ForgeResult<()> {
        Ok(())
    }

    /// The commit `branch` points at now, `None` when there is no such
    /// branch: the merge queue merges only while the base is still the
    /// commit its check ran on.
    async fn branch_tip(&self, branch: &str) -> ForgeResult<Option<String>> {
        Err(ForgeError::io(format!("read branch `{branch}` in {}", self.describe()), "this forge keeps no branches"))
    }

    /// The newest commits of `branch` (at most `limit`), newest first; none
    /// when there is no such branch.
    async fn branch_commits(&self, branch: &str, limit: usize) -> ForgeResult<Vec<BranchCommit>> {
        let _ = limit;
        Err(ForgeError::io(
            format!("read the history of branch `{branch}` in {}", self.describe()),
            "this forge keeps no branches",
        ))
    }
}

/// A reaction ward puts on a person's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reaction {
    /// Done (`+1`).
    #[serde(rename = "+1")]
    Done,
    /// Seen, and working on it (`eyes`).
    #[serde(rename = "eyes")]
    Seen,
    /// Not from someone who may, or not a command ward knows (`confused`).
    #[serde(rename = "confused")]
    Refused,
}

impl Reaction {
    /// The `content` GitHub's reactions API takes.
    pub fn content(self) -> &'static str {
        match self {
            Reaction::Done => "+1",
            Reaction::Seen => "eyes",
            Reaction::Refused => "confused",
        }
    }
}

/// [`Forge::patient`] in three reads: the issue, the open lockdown issues,
/// the chart (the local forge, and GitHub without GraphQL).
pub async fn patient_by_parts<F: Forge + ?Sized>(
    forge: &F,
    number: IssueNumber,
    lockdown_label: &str,
) -> ForgeResult<PatientRead> {
    let issue = forge.issue(number).await?;
    let lockdown = forge.open_issues_with_label(lockdown_label).await?.into_iter().min_by_key(|i| i.number);
    let chart = forge.read_chart(number).await?;
    Ok(PatientRead { issue, lockdown, chart, repository_labels: None, patient_comment: None })
}

/// [`Forge::relabel_and_comment`] in two calls: the labels, then the
/// comment (a comment that fails leaves the move made).
pub async fn relabel_and_comment_by_parts<F: Forge + ?Sized>(
    forge: &F,
    number: IssueNumber,
    labels: Option<Relabel<'_>>,
    comment: CommentWrite<'_>,
) -> Result<Option<u64>, RelabelError> {
    if let Some(labels) = labels {
        forge.set_labels(number, labels.to).await.map_err(RelabelError::Labels)?;
    }
    match comment {
        CommentWrite::Edit { id, body } => forge.edit_comment(number, id, body).await.map(|()| None),
        CommentWrite::Create { body } => forge.post_comment(number, body).await.map(Some),
    }
    .map_err(RelabelError::Comment)
}

/// [`Forge::pull_facts`] one read per fact (the local forge, and GitHub
/// without GraphQL).
pub async fn pull_facts_by_parts<F: Forge + ?Sized>(forge: &F, branch: &str) -> ForgeResult<Option<PullFacts>> {
    let Some(pull) = forge.pull_request_for_branch(branch).await? else { return Ok(None) };
    let number = pull.number;
    let head = pull.head_sha.trim().to_string();
    let reviews = forge.reviews(number).await?;
    let unresolved_threads = forge.unresolved_review_threads(number).await?;
    let commits = forge.pull_request_commits(number).await?;
    let ci = if head.is_empty() { None } else { Some(forge.ci_status(&head).await?) };
    let facts =
        PullFacts { pull, reviews, unresolved_threads, commits, ci, can_push: Default::default(), merge_queue: None };
    Ok(Some(facts))
}
