//! The combined reads over GitHub's GraphQL API: what a stage run reads
//! before its guards ([`PATIENT_QUERY`]: the issue and its labels, the
//! lockdown check, the chart's text and blob sha) and what the discharge
//! audit reads ([`PULL_QUERY`]: the pull request of the branch, reviews with
//! whether their authors can push, review threads, commits, and the head's
//! check runs and statuses), one request each. Where an answer is cut (more
//! than a page of labels, reviews, threads, commits or checks; a chart
//! beyond what `Blob.text` gives) that part is read over REST, so the
//! answer is whole or an error, never silently short.
//!
//! GraphQL has its own rate limit, in points: a query costs the number of
//! page requests its connections could need, divided by 100 (at least 1).
//! The stage's read and the sweep's look cost 1 point; the audit's about
//! 5 (five pull requests at most, each with its pages, and the parents of
//! up to 100 commits), which is why it asks for five pull requests, not
//! more. Points come from their own budget: these reads leave the REST
//! budget to the writes.

use std::collections::BTreeMap;

use base64::Engine as _;
use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::transport::{Call, percent};
use super::wire::*;
use super::{Access, GitHubForge, OWN_CHECK_PREFIX};
use crate::forge::{
    CommitInfo, Forge, ForgeError, ForgeQueue, ForgeResult, Issue, IssueNumber, IssueState, LabelAction, LabelEvent,
    PatientLook, PatientRead, PullFacts, PullRequest, PullState, Review, StoredChart,
};

pub(super) const PATIENT_QUERY: &str = "query($owner: String!, $name: String!, $number: Int!, \
$lockdown: [String!], $chart: String!) { repository(owner: $owner, name: $name) { \
issue(number: $number) { id number title body state author { __typename login } labels(first: 100) { nodes { id name } \
pageInfo { hasNextPage } } comments(first: 100) { nodes { id databaseId viewerDidAuthor body } \
pageInfo { hasNextPage } } } \
lockdown: issues(first: 1, states: [OPEN], labels: $lockdown, orderBy: {field: CREATED_AT, direction: ASC}) { \
nodes { number title body state author { __typename login } } } \
chart: object(expression: $chart) { __typename ... on Blob { oid text isBinary isTruncated } } \
repositoryLabels: labels(first: 100) { nodes { id name } pageInfo { hasNextPage } } } }";

/// The issue's comments, to find the patient's comment (before a retry of
/// a mutation that creates it: did the failed attempt land?).
const COMMENTS_QUERY: &str = "query($owner: String!, $name: String!, $number: Int!) { \
repository(owner: $owner, name: $name) { issue(number: $number) { \
comments(last: 100) { nodes { id databaseId viewerDidAuthor body } } } } }";

/// Node ids the reads gave, for the mutation of a move: the issue's
/// (`labelableId`, `subjectId`), labels' by lower-case name, and the
/// patient's comment's by its number. What is missing makes the move go
/// over REST.
#[derive(Debug, Default)]
pub(super) struct NodeIds {
    issues: BTreeMap<u64, String>,
    labels: BTreeMap<String, String>,
    comments: BTreeMap<u64, String>,
}

/// A move's mutation, ready to send, and what a retry that finds the
/// comment created needs to edit it instead.
pub(super) struct Mutation {
    call: Call,
    /// It creates the patient's comment: not safe to repeat blindly.
    creates: bool,
    issue: String,
    remove: Vec<String>,
    add: Vec<String>,
    body: String,
}

pub(super) const LOOK_QUERY: &str = "query($owner: String!, $name: String!, $number: Int!, $chart: String!) { \
repository(owner: $owner, name: $name) { \
issue(number: $number) { number title body state author { __typename login } labels(first: 100) { nodes { name } \
pageInfo { hasNextPage } } \
timelineItems(last: 100, itemTypes: [LABELED_EVENT, UNLABELED_EVENT]) { nodes { __typename \
... on LabeledEvent { createdAt actor { __typename login } label { name } } \
... on UnlabeledEvent { createdAt actor { __typename login } label { name } } } pageInfo { hasPreviousPage } } } \
chart: object(expression: $chart) { __typename ... on Blob { oid text isBinary isTruncated } } } }";

pub(super) const PULL_QUERY: &str = "query($owner: String!, $name: String!, $branch: String!) { \
repository(owner: $owner, name: $name) { \
pullRequests(headRefName: $branch, states: [OPEN, MERGED], first: 5) { pageInfo { hasNextPage } nodes { \
id number title body url state headRefName headRefOid baseRefName isCrossRepository author { __typename login } \
isMergeQueueEnabled isInMergeQueue reviews(first: 100) { nodes { author { __typename login } state body commit { oid } authorCanPushToRepository } \
pageInfo { hasNextPage } } \
reviewThreads(first: 100) { nodes { isResolved } pageInfo { hasNextPage } } \
commits(first: 100) { nodes { commit { oid message parents(first: 2) { totalCount } } } pageInfo { hasNextPage } } \
head: commits(last: 1) { nodes { commit { oid statusCheckRollup { contexts(first: 100) { nodes { __typename \
... on CheckRun { name status conclusion url title summary } \
... on StatusContext { context state targetUrl description } } pageInfo { hasNextPage } } } } } } } } } }";

/// `ward doctor`'s look at the GraphQL endpoint: the repository's name.
pub(super) const PROBE_QUERY: &str =
    "query($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { nameWithOwner } }";

/// GitHub's merge queue takes the pull request only while its head is the audited commit.
const ENQUEUE_MUTATION: &str = "mutation($pull: ID!, $head: GitObjectID!) { \
enqueuePullRequest(input: { pullRequestId: $pull, expectedHeadOid: $head }) { clientMutationId } }";

/// The document of a move's mutation (see [`GitHubForge::move_mutation`]):
/// the labels out, the labels in, the comment edited or created; only the
/// parts the move has.
fn move_document(issue: &str, remove: &[String], add: &[String], edit: Option<&str>, body: &str) -> (String, Value) {
    let (mut decls, mut fields) = (vec!["$body: String!"], Vec::new());
    let mut variables = json!({ "body": body });
    if !remove.is_empty() {
        fields.push(
            "remove: removeLabelsFromLabelable(input: {labelableId: $issue, labelIds: $remove}) { \
             clientMutationId }",
        );
        decls.push("$remove: [ID!]!");
        variables["remove"] = json!(remove);
    }
    if !add.is_empty() {
        fields.push("add: addLabelsToLabelable(input: {labelableId: $issue, labelIds: $add}) { clientMutationId }");
        decls.push("$add: [ID!]!");
        variables["add"] = json!(add);
    }
    match edit {
        Some(comment) => {
            fields.push(
                "comment: updateIssueComment(input: {id: $comment, body: $body}) { issueComment { databaseId } }",
            );
            decls.push("$comment: ID!");
            variables["comment"] = json!(comment);
        }
        None => fields.push(
            "comment: addComment(input: {subjectId: $issue, body: $body}) { commentEdge { node { id databaseId } } }",
        ),
    }
    if !remove.is_empty() || !add.is_empty() || edit.is_none() {
        decls.push("$issue: ID!");
        variables["issue"] = json!(issue);
    }
    (format!("mutation({}) {{ {} }}", decls.join(", "), fields.join(" ")), variables)
}

/// GraphQL's answer: `data`, and `errors` each with a `type` and `path`.
#[derive(Deserialize)]
struct Answer {
    data: Option<Value>,
    #[serde(default)]
    errors: Vec<AnswerError>,
}

#[derive(Deserialize)]
struct AnswerError {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    message: String,
    /// Where in the answer: `["repository", "i3"]`.
    #[serde(default)]
    path: Vec<Value>,
}

/// An actor as GraphQL names it: a `User`, or a `Bot` whose `login` has no
/// `[bot]` (`github-actions`, where REST says `github-actions[bot]`).
#[derive(Deserialize)]
struct Login {
    #[serde(rename = "__typename", default)]
    typename: Option<String>,
    login: String,
}

impl Login {
    /// The login as REST spells it, the one spelling ward compares
    /// (`crate::forge::EngineAccount`): a bot's gets its `[bot]` back.
    fn rest(self) -> String {
        crate::forge::rest_login(self.typename.as_deref(), self.login)
    }
}

/// An author or actor GitHub no longer knows (a deleted account) is `null`;
/// REST and GitHub's pages call it `ghost`.
fn login_of(actor: Option<Login>) -> String {
    actor.map_or_else(|| "ghost".into(), Login::rest)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    has_next_page: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conn<T> {
    nodes: Vec<T>,
    #[serde(default)]
    page_info: Option<Page>,
}

impl<T> Conn<T> {
    fn whole(&self) -> bool {
        !self.page_info.as_ref().is_some_and(|p| p.has_next_page)
    }
}

/// A connection read from its end (`last`): more before it?
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BackPage {
    has_previous_page: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Timeline {
    nodes: Vec<GqlLabelEvent>,
    page_info: BackPage,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlLabelEvent {
    #[serde(rename = "__typename")]
    typename: String,
    created_at: chrono::DateTime<chrono::Utc>,
    actor: Option<Login>,
    label: Name,
}

#[derive(Deserialize)]
struct Name {
    #[serde(default)]
    id: Option<String>,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlComment {
    id: String,
    database_id: Option<u64>,
    #[serde(default)]
    viewer_did_author: bool,
    #[serde(default)]
    body: String,
}

impl GqlComment {
    /// The patient's comment: the token's own account wrote it and it
    /// starts with the marker (a marker in anyone else's comment is text).
    fn is_patient_comment(&self) -> bool {
        self.viewer_did_author && self.body.starts_with(crate::forge::PATIENT_COMMENT_MARKER)
    }
}

#[derive(Deserialize)]
struct GqlIssue {
    #[serde(default)]
    id: Option<String>,
    number: u64,
    title: String,
    body: Option<String>,
    state: String,
    author: Option<Login>,
    #[serde(default)]
    labels: Option<Conn<Name>>,
    #[serde(default, rename = "timelineItems")]
    timeline: Option<Timeline>,
    #[serde(default)]
    comments: Option<Conn<GqlComment>>,
}

impl GqlIssue {
    fn into_issue(self, labels: Vec<String>) -> Result<Issue, Unexpected> {
        let state = match self.state.as_str() {
            "OPEN" => IssueState::Open,
            "CLOSED" => IssueState::Closed,
            other => return Err(Unexpected::State { what: "issue", number: self.number, state: other.into() }),
        };
        Ok(Issue {
            number: IssueNumber(self.number),
            title: self.title,
            body: self.body.unwrap_or_default(),
            author: login_of(self.author),
            state,
            labels,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlBlob {
    #[serde(rename = "__typename")]
    typename: String,
    oid: Option<String>,
    text: Option<String>,
    #[serde(default)]
    is_binary: bool,
    #[serde(default)]
    is_truncated: bool,
}

#[derive(Deserialize)]
struct LookData {
    issue: Option<GqlIssue>,
    chart: Option<GqlBlob>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PatientData {
    issue: Option<GqlIssue>,
    lockdown: Option<Conn<GqlIssue>>,
    chart: Option<GqlBlob>,
    repository_labels: Option<Conn<Name>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlPull {
    id: String,
    number: u64,
    title: String,
    body: Option<String>,
    url: String,
    state: String,
    head_ref_name: String,
    head_ref_oid: String,
    base_ref_name: String,
    is_cross_repository: bool,
    author: Option<Login>,
    /// The base branch has GitHub's merge queue.
    is_merge_queue_enabled: bool,
    is_in_merge_queue: bool,
    reviews: Conn<GqlReview>,
    review_threads: Conn<GqlThread>,
    commits: Conn<GqlPullCommit>,
    head: Conn<GqlPullCommit>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlReview {
    author: Option<Login>,
    state: String,
    body: Option<String>,
    commit: Option<GqlOid>,
    author_can_push_to_repository: bool,
}

#[derive(Deserialize)]
struct GqlOid {
    oid: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlThread {
    is_resolved: bool,
}

#[derive(Deserialize)]
struct GqlPullCommit {
    commit: GqlCommit,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GqlCommit {
    oid: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    parents: Option<Count>,
    #[serde(default)]
    status_check_rollup: Option<Rollup>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Count {
    total_count: usize,
}

#[derive(Deserialize)]
struct Rollup {
    contexts: Conn<GqlContext>,
}

/// A check run or a commit status in the head's rollup.
#[derive(Deserialize)]
#[serde(tag = "__typename")]
enum GqlContext {
    CheckRun {
        name: String,
        status: String,
        conclusion: Option<String>,
        url: Option<String>,
        title: Option<String>,
        summary: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    StatusContext { context: String, state: String, target_url: Option<String>, description: Option<String> },
}

impl GqlContext {
    /// The REST shape's verdict, so both APIs fold the same way.
    fn check(self) -> Result<Check, Unexpected> {
        match self {
            GqlContext::CheckRun { name, status, conclusion, url, title, summary } => Check::try_from(WireCheckRun {
                name,
                status: status.to_lowercase(),
                conclusion: conclusion.map(|c| c.to_lowercase()),
                html_url: url,
                output: Some(WireCheckOutput { title, summary }),
            }),
            GqlContext::StatusContext { context, state, target_url, description } => {
                // EXPECTED: a required status not reported yet.
                let state = if state == "EXPECTED" { "pending".into() } else { state.to_lowercase() };
                Check::try_from(WireStatus { context, state, target_url, description })
            }
        }
    }
}

impl GitHubForge {
    /// One GraphQL request; `data` when GitHub gave it. Errors GitHub sent
    /// are returned with it (a missing issue is `null` and a `NOT_FOUND`).
    async fn graphql(&self, query: &str, variables: Value, action: &str, access: Access) -> ForgeResult<Answer> {
        let call = Call::graphql(query, variables, action.to_string(), access);
        self.send_ok(&call).await?.json(action)
    }

    /// A GraphQL error as the forge's: what was refused and what to do.
    fn graphql_error(&self, action: &str, access: Access, e: &AnswerError) -> ForgeError {
        match e.kind.as_deref() {
            Some("FORBIDDEN") => {
                ForgeError::Forbidden { action: action.into(), message: e.message.clone(), help: access.help() }
            }
            Some("NOT_FOUND") if e.message.contains("Repository") => ForgeError::Forbidden {
                action: action.into(),
                message: e.message.clone(),
                help: format!("{} does not exist or the token cannot see it; {}", self.settings.repo, access.help()),
            },
            _ => ForgeError::Api { action: action.into(), status: 200, message: e.message.clone() },
        }
    }

    /// [`Forge::patient`] in one query.
    pub(super) async fn patient_read(&self, number: IssueNumber, lockdown_label: &str) -> ForgeResult<PatientRead> {
        let repo = &self.settings.repo;
        let action = format!("read issue {number}, the lockdown and the chart of {number} in {repo} (GraphQL)");
        let mut variables = self.issue_variables(number);
        variables["lockdown"] = json!([lockdown_label]);
        let answer = self.graphql(PATIENT_QUERY, variables, &action, Access::IssuesRead).await?;
        let data: PatientData = self.issue_data(number, &answer, &action)?;
        let Some(mut issue) = data.issue else { return Err(bad_shape(&action, "no `issue` in the answer")) };
        let comments = issue.comments.take();
        self.keep_ids(number, &issue, data.repository_labels.as_ref());
        let issue = self.issue_of(number, issue, &action).await?;
        let patient_comment = self.patient_comment_of(number, comments).await?;
        let lockdown = match data.lockdown {
            Some(open) => match open.nodes.into_iter().next() {
                Some(l) => Some(l.into_issue(vec![lockdown_label.into()]).map_err(|e| bad_shape(&action, e))?),
                None => None,
            },
            None => return Err(bad_shape(&action, "no `lockdown` in the answer")),
        };
        let chart = self.chart_of(data.chart, &action).await?;
        // More than a page of labels: the admission lists them over REST.
        let repository_labels =
            data.repository_labels.filter(|l| l.whole()).map(|l| l.nodes.into_iter().map(|n| n.name).collect());
        Ok(PatientRead { issue, lockdown, chart, repository_labels, patient_comment })
    }

    /// Keeps the node ids a read gave: the issue's, its labels' and the
    /// repository's labels'.
    fn keep_ids(&self, number: IssueNumber, issue: &GqlIssue, repository: Option<&Conn<Name>>) {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = &issue.id {
            ids.issues.insert(number.0, id.clone());
        }
        let labels = issue.labels.iter().chain(repository).flat_map(|c| c.nodes.iter());
        for label in labels {
            if let Some(id) = &label.id {
                ids.labels.insert(label.name.to_lowercase(), id.clone());
            }
        }
    }

    /// The patient's comment among a read's comments (the newest), its node
    /// id kept; more than a page and none in it: the REST listing decides.
    async fn patient_comment_of(
        &self,
        number: IssueNumber,
        comments: Option<Conn<GqlComment>>,
    ) -> ForgeResult<Option<u64>> {
        let Some(comments) = comments else { return Ok(None) };
        if let Some(c) = comments.nodes.iter().rev().find(|c| c.is_patient_comment())
            && let Some(db) = c.database_id
        {
            self.ids.lock().unwrap_or_else(|p| p.into_inner()).comments.insert(db, c.id.clone());
            return Ok(Some(db));
        }
        if comments.whole() {
            return Ok(None);
        }
        let engine = &self.settings.engine_account;
        let all = self.comments(number).await?;
        let mine =
            all.iter().rev().find(|c| engine.is(&c.author) && c.body.starts_with(crate::forge::PATIENT_COMMENT_MARKER));
        Ok(mine.map(|c| c.id))
    }

    /// The one mutation of a move: the labels out, the labels in (in this
    /// order: a run started by the new label never sees the old one), and
    /// the patient's comment. `None` when a node id it needs was not read.
    pub(super) fn move_mutation(
        &self,
        number: IssueNumber,
        labels: Option<crate::forge::Relabel<'_>>,
        comment: crate::forge::CommentWrite<'_>,
    ) -> Option<Mutation> {
        use crate::forge::CommentWrite;
        let ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        let issue = ids.issues.get(&number.0)?.clone();
        let has = |set: &[String], l: &String| set.iter().any(|x| x.eq_ignore_ascii_case(l));
        let id_of = |l: &String| ids.labels.get(&l.to_lowercase()).cloned();
        let (remove, add) = match labels {
            Some(r) => (
                r.from.iter().filter(|l| !has(r.to, l)).map(id_of).collect::<Option<Vec<_>>>()?,
                r.to.iter().filter(|l| !has(r.from, l)).map(id_of).collect::<Option<Vec<_>>>()?,
            ),
            None => (Vec::new(), Vec::new()),
        };
        let (edit, body) = match comment {
            CommentWrite::Edit { id, body } => (Some(ids.comments.get(&id)?.clone()), body),
            CommentWrite::Create { body } => (None, body),
        };
        let call = self.move_call(number, &issue, &remove, &add, edit.as_deref(), body);
        Some(Mutation { call, creates: edit.is_none(), issue, remove, add, body: body.to_string() })
    }

    /// The request of a move's mutation: node ids of the issue, the labels
    /// to remove and to add, and the comment to edit (`None`: create it).
    fn move_call(
        &self,
        number: IssueNumber,
        issue: &str,
        remove: &[String],
        add: &[String],
        edit: Option<&str>,
        body: &str,
    ) -> Call {
        let (query, variables) = move_document(issue, remove, add, edit, body);
        let action = format!("move {number} and write its patient's comment in {} (GraphQL)", self.settings.repo);
        Call::graphql(&query, variables, action, Access::IssuesWrite)
    }

    /// Sends a move's mutation. Any error in its answer fails the whole
    /// request (the labels, when it moves them: removing and adding a label
    /// again is harmless, so the next run repeats it whole); a creation is
    /// retried only after looking whether the failed attempt created the
    /// comment (then the retry edits it instead).
    pub(super) async fn send_move(
        &self,
        number: IssueNumber,
        m: Mutation,
        moves_labels: bool,
    ) -> Result<Option<u64>, crate::forge::RelabelError> {
        use crate::forge::RelabelError;
        let failed = |e: ForgeError| if moves_labels { RelabelError::Labels(e) } else { RelabelError::Comment(e) };
        let action = m.call.action.clone();
        let reply = if m.creates {
            let look = || async {
                let Some(found) = self.comment_by_marker(number).await? else { return Ok(None) };
                let edit = self.ids.lock().unwrap_or_else(|p| p.into_inner()).comments.get(&found).cloned();
                Ok(edit.map(|e| self.move_call(number, &m.issue, &m.remove, &m.add, Some(&e), &m.body)))
            };
            self.send_looking(&m.call, look).await
        } else {
            self.send(&m.call).await
        };
        let reply = match reply {
            Ok(r) if r.status.is_success() => r,
            Ok(r) => return Err(failed(self.refusal(&m.call, &r))),
            Err(e) => return Err(failed(e)),
        };
        let answer: Answer = reply.json(&action).map_err(failed)?;
        if let Some(e) = answer.errors.first() {
            return Err(failed(self.graphql_error(&action, Access::IssuesWrite, e)));
        }
        let node = answer.data.as_ref().and_then(|d| d.pointer("/comment/commentEdge/node"));
        let created = node.and_then(|n| Some((n.get("databaseId")?.as_u64()?, n.get("id")?.as_str()?.to_string())));
        if let Some((db, id)) = &created {
            self.ids.lock().unwrap_or_else(|p| p.into_inner()).comments.insert(*db, id.clone());
        }
        Ok(created.map(|(db, _)| db))
    }

    /// [`Forge::enqueue_pull_request`]: GitHub's `enqueuePullRequest`,
    /// pinned to the audited head by `expectedHeadOid`. Any refusal is the
    /// error here; the caller reads the pull request again to tell a head
    /// that moved from another refusal (GitHub's messages are no contract).
    pub(super) async fn enqueue(&self, pull: u64, pull_id: &str, head_sha: &str) -> ForgeResult<()> {
        let action =
            format!("put pull request #{pull} of {} into GitHub's merge queue at {head_sha}", self.settings.repo);
        let variables = json!({ "pull": pull_id, "head": head_sha });
        let answer = self.graphql(ENQUEUE_MUTATION, variables, &action, Access::ContentsWrite).await?;
        match answer.errors.first() {
            Some(e) => Err(self.graphql_error(&action, Access::ContentsWrite, e)),
            None => Ok(()),
        }
    }

    /// The patient's comment as it is now (a retry's look), its node id kept.
    pub(super) async fn comment_by_marker(&self, number: IssueNumber) -> ForgeResult<Option<u64>> {
        let action = format!("look for the patient's comment on {number} in {} (GraphQL)", self.settings.repo);
        let variables =
            json!({ "owner": self.settings.repo.owner, "name": self.settings.repo.name, "number": number.0 });
        let answer = self.graphql(COMMENTS_QUERY, variables, &action, Access::IssuesRead).await?;
        if let Some(e) = answer.errors.first() {
            return Err(self.graphql_error(&action, Access::IssuesRead, e));
        }
        let comments = answer.data.as_ref().and_then(|d| d.pointer("/repository/issue/comments")).cloned();
        let comments: Conn<GqlComment> =
            serde_json::from_value(comments.unwrap_or(Value::Null)).map_err(|e| bad_shape(&action, e))?;
        let Some(c) = comments.nodes.iter().rev().find(|c| c.is_patient_comment()) else { return Ok(None) };
        let Some(db) = c.database_id else { return Ok(None) };
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).comments.insert(db, c.id.clone());
        Ok(Some(db))
    }

    /// [`Forge::look`] in one query: the issue, its chart and its label
    /// history (the last 100 label events; REST lists a longer history).
    pub(super) async fn look_read(&self, number: IssueNumber) -> ForgeResult<PatientLook> {
        let repo = &self.settings.repo;
        let action = format!("read issue {number}, its chart and its label history in {repo} (GraphQL)");
        let answer = self.graphql(LOOK_QUERY, self.issue_variables(number), &action, Access::IssuesRead).await?;
        let data: LookData = self.issue_data(number, &answer, &action)?;
        let Some(issue) = data.issue else { return Err(bad_shape(&action, "no `issue` in the answer")) };
        self.look_whole(number, issue, data.chart, &action).await
    }

    /// A patient's look from what one query read, completed over REST where
    /// GraphQL cut it (more than 100 labels or label events, a long chart).
    async fn look_whole(
        &self,
        number: IssueNumber,
        mut issue: GqlIssue,
        chart: Option<GqlBlob>,
        action: &str,
    ) -> ForgeResult<PatientLook> {
        let label_events = match issue.timeline.take() {
            Some(t) if !t.page_info.has_previous_page => t
                .nodes
                .into_iter()
                .map(|e| LabelEvent {
                    action: if e.typename == "UnlabeledEvent" { LabelAction::Removed } else { LabelAction::Added },
                    label: e.label.name,
                    actor: login_of(e.actor),
                    at: e.created_at,
                })
                .collect(),
            _ => self.label_events(number).await?,
        };
        let issue = self.issue_of(number, issue, action).await?;
        let chart = self.chart_of(chart, action).await?;
        Ok(PatientLook { issue, chart, label_events })
    }

    fn issue_variables(&self, number: IssueNumber) -> Value {
        let chart = format!("{}:{}", self.settings.charts_branch, Self::chart_path(number));
        json!({ "owner": self.settings.repo.owner, "name": self.settings.repo.name, "number": number.0, "chart": chart })
    }

    /// The `repository` of an answer about issue `number`, or the error
    /// GitHub gave: a missing issue, a refusal, no repository.
    fn issue_data<T: for<'de> Deserialize<'de>>(
        &self,
        number: IssueNumber,
        answer: &Answer,
        action: &str,
    ) -> ForgeResult<T> {
        let data = answer.data.as_ref().and_then(|d| d.get("repository")).filter(|r| !r.is_null());
        let missing_issue = data.and_then(|d| d.get("issue")).is_none_or(Value::is_null);
        if let Some(e) = answer.errors.first() {
            let not_found = answer.errors.iter().any(|e| e.kind.as_deref() == Some("NOT_FOUND"));
            return Err(if data.is_some() && missing_issue && not_found {
                ForgeError::IssueNotFound(number, self.describe())
            } else {
                // The lockdown or the chart refused: no guess about either.
                let access = if e.message.contains("ccessible") && !missing_issue {
                    Access::ContentsRead
                } else {
                    Access::IssuesRead
                };
                self.graphql_error(action, access, e)
            });
        }
        let data = data.ok_or_else(|| bad_shape(action, "no `repository` in the answer"))?;
        serde_json::from_value(data.clone()).map_err(|e| bad_shape(action, e))
    }

    /// The issue of an answer, its labels whole (more than a page: REST).
    async fn issue_of(&self, number: IssueNumber, issue: GqlIssue, action: &str) -> ForgeResult<Issue> {
        match &issue.labels {
            Some(labels) if labels.whole() => {
                let names = labels.nodes.iter().map(|l| l.name.clone()).collect();
                issue.into_issue(names).map_err(|e| bad_shape(action, e))
            }
            _ => self.issue(number).await,
        }
    }

    /// The chart of an answer: its text and blob sha; cut or binary text is
    /// read from the blob of the sha just read (no race with a write).
    async fn chart_of(&self, blob: Option<GqlBlob>, action: &str) -> ForgeResult<Option<StoredChart>> {
        let Some(blob) = blob else { return Ok(None) };
        if blob.typename != "Blob" {
            return Err(bad_shape(action, format!("the chart path holds a {}, not a file", blob.typename)));
        }
        let oid = blob.oid.ok_or_else(|| bad_shape(action, "the chart's blob has no `oid`"))?;
        Ok(Some(match blob.text {
            Some(text) if !blob.is_truncated && !blob.is_binary => StoredChart { text, version: oid },
            _ => StoredChart { text: self.blob_text(&oid, action).await?, version: oid },
        }))
    }

    /// The text of a blob by its sha (`GET /git/blobs/{sha}`, up to 100 MB),
    /// for files the contents API and `Blob.text` give only in part.
    pub(super) async fn blob_text(&self, sha: &str, action: &str) -> ForgeResult<String> {
        let call = self.call(Method::GET, &format!("/git/blobs/{}", percent(sha)), action.into(), Access::ContentsRead);
        let blob: WireBlob = self.send_ok(&call).await?.json(action)?;
        if blob.encoding != "base64" {
            return Err(bad_shape(action, format!("the blob {sha} comes in encoding `{}`", blob.encoding)));
        }
        let packed: String = blob.content.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(packed)
            .map_err(|e| bad_shape(action, format!("the blob {sha} is not base64 ({e})")))?;
        String::from_utf8(bytes).map_err(|_| bad_shape(action, format!("the blob {sha} is not UTF-8 text")))
    }

    /// [`Forge::pull_facts`] in one query.
    pub(super) async fn pull_facts_read(&self, branch: &str) -> ForgeResult<Option<PullFacts>> {
        let repo = &self.settings.repo;
        let action = format!("read the pull request of branch `{branch}` in {repo} with its reviews and CI (GraphQL)");
        let variables = json!({ "owner": repo.owner, "name": repo.name, "branch": branch });
        let answer = self.graphql(PULL_QUERY, variables, &action, Access::PullsRead).await?;
        if let Some(e) = answer.errors.first() {
            let access = if e.message.contains("ccessible") { Access::ChecksRead } else { Access::PullsRead };
            return Err(self.graphql_error(&action, access, e));
        }
        let pulls = answer
            .data
            .as_ref()
            .and_then(|d| d.pointer("/repository/pullRequests"))
            .ok_or_else(|| bad_shape(&action, "no `pullRequests` in the answer"))?;
        let pulls: Conn<GqlPull> = serde_json::from_value(pulls.clone()).map_err(|e| bad_shape(&action, e))?;
        if !pulls.whole() {
            // More than five open or merged pull requests from one branch: REST lists them all.
            return crate::forge::pull_facts_by_parts(self, branch).await;
        }
        // As over REST: a branch of this repository (never a fork's of the
        // same name), the open pull request, else the newest merged one.
        let mut live: Vec<GqlPull> = pulls.nodes.into_iter().filter(|p| !p.is_cross_repository).collect();
        live.sort_by_key(|p| (p.state == "OPEN", p.number));
        let Some(p) = live.pop() else { return Ok(None) };
        self.facts_of(p, &action).await.map(Some)
    }

    /// The facts of one pull request; a part read over REST (a page cut)
    /// that fails fails the whole read: a fact not read is no verdict.
    async fn facts_of(&self, p: GqlPull, action: &str) -> ForgeResult<PullFacts> {
        let state = match p.state.as_str() {
            "OPEN" => PullState::Open,
            "MERGED" => PullState::Merged,
            "CLOSED" => PullState::Closed,
            other => return Err(bad_shape(action, format!("pull request #{} has state `{other}`", p.number))),
        };
        let pull = PullRequest {
            number: p.number,
            title: p.title,
            body: p.body.unwrap_or_default(),
            author: login_of(p.author),
            head_branch: p.head_ref_name,
            head_sha: p.head_ref_oid,
            base_branch: p.base_ref_name,
            state,
            url: p.url,
        };
        let number = pull.number;
        // Read with the audit's facts, so discharge knows at no extra call
        // whether the base branch has GitHub's merge queue.
        let merge_queue = p.is_merge_queue_enabled.then_some(ForgeQueue { pull_id: p.id, queued: p.is_in_merge_queue });
        let mut can_push = BTreeMap::new();
        let reviews = if p.reviews.whole() {
            let mut out = Vec::new();
            for r in p.reviews.nodes {
                let login = login_of(r.author);
                can_push.insert(login.to_lowercase(), r.author_can_push_to_repository);
                let wire = WireReview {
                    user: Some(WireUser { login }),
                    state: r.state,
                    commit_id: r.commit.map(|c| c.oid),
                    body: r.body,
                };
                out.push(Review::try_from(wire).map_err(|e| bad_shape(action, e))?);
            }
            out
        } else {
            self.reviews(number).await?
        };
        let unresolved_threads = if p.review_threads.whole() {
            p.review_threads.nodes.iter().filter(|t| !t.is_resolved).count()
        } else {
            self.unresolved_review_threads(number).await?
        };
        let commits = if p.commits.whole() {
            p.commits
                .nodes
                .into_iter()
                .map(|c| CommitInfo {
                    sha: c.commit.oid,
                    message: c.commit.message.unwrap_or_default(),
                    parent_count: c.commit.parents.map_or(0, |n| n.total_count),
                })
                .collect()
        } else {
            self.pull_request_commits(number).await?
        };
        let head = pull.head_sha.trim().to_string();
        let ci = match p.head.nodes.into_iter().next() {
            _ if head.is_empty() => None,
            Some(last) if last.commit.oid == head => match last.commit.status_check_rollup {
                None => Some(fold_ci(&[])),
                Some(rollup) if rollup.contexts.whole() => {
                    let mut checks = Vec::new();
                    for context in rollup.contexts.nodes {
                        checks.push(context.check().map_err(|e| bad_shape(action, e))?);
                    }
                    checks.retain(|c| c.is_status || !c.name.starts_with(OWN_CHECK_PREFIX));
                    Some(fold_ci(&checks))
                }
                Some(_) => Some(self.ci_status(&head).await?),
            },
            // The last commit listed is not the head (a push between): REST on the head.
            _ => Some(self.ci_status(&head).await?),
        };
        Ok(PullFacts { pull, reviews, unresolved_threads, commits, ci, can_push, merge_queue })
    }
}

// -- The sweep's reads: the search for candidates, several looks at once ------

/// The fields of an issue a search gives (the listing's, with `updatedAt`).
const SEARCH_NODE: &str = "__typename ... on Issue { number title body state updatedAt author { __typename login } \
labels(first: 100) { nodes { name } pageInfo { hasNextPage } } }";

/// The fields of one look (as [`LOOK_QUERY`]'s issue).
const LOOK_ISSUE: &str = "number title body state author { __typename login } labels(first: 100) { nodes { name } \
pageInfo { hasNextPage } } \
timelineItems(last: 100, itemTypes: [LABELED_EVENT, UNLABELED_EVENT]) { nodes { __typename \
... on LabeledEvent { createdAt actor { __typename login } label { name } } \
... on UnlabeledEvent { createdAt actor { __typename login } label { name } } } pageInfo { hasPreviousPage } }";

const LOOK_CHART: &str = "__typename ... on Blob { oid text isBinary isTruncated }";

/// GitHub's issue search string of one [`crate::forge::IssueSearch`] in
/// `repo`, times to the second in UTC.
fn search_string_of(repo: &super::RepoName, search: &crate::forge::IssueSearch) -> String {
    use crate::forge::Updated;
    let at = |t: &chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S+00:00").to_string();
    let updated = match &search.updated {
        Updated::Before(t) => format!("updated:<{}", at(t)),
        Updated::Since(t) => format!("updated:>={}", at(t)),
    };
    let label = search.label.replace('"', "");
    let open = if search.open { " is:open" } else { "" };
    format!("repo:{repo} is:issue{open} label:\"{label}\" {updated}")
}

/// The sweep's search: one `search` per `(alias index, search string, the
/// cursor after which its next page starts)`.
fn search_document(asked: &[(usize, String, Option<String>)]) -> (String, Value) {
    let mut defs = Vec::new();
    let mut fields = Vec::new();
    let mut variables = serde_json::Map::new();
    for (i, search, after) in asked {
        defs.push(format!("$q{i}: String!"));
        variables.insert(format!("q{i}"), json!(search));
        let after = match after {
            Some(c) => {
                defs.push(format!("$a{i}: String"));
                variables.insert(format!("a{i}"), json!(c));
                format!(", after: $a{i}")
            }
            None => String::new(),
        };
        fields.push(format!(
            "s{i}: search(type: ISSUE, first: 100, query: $q{i}{after}) {{ issueCount \
             pageInfo {{ hasNextPage endCursor }} nodes {{ {SEARCH_NODE} }} }}"
        ));
    }
    (format!("query({}) {{ {} }}", defs.join(", "), fields.join(" ")), Value::Object(variables))
}

/// The sweep's read of due patients: each one's issue (`i0`, ...) and its
/// chart by `object(expression:)` (`c0`, ...).
fn looks_document(repo: &super::RepoName, charts: &[(IssueNumber, String)]) -> (String, Value) {
    let mut defs = vec!["$owner: String!".to_string(), "$name: String!".to_string()];
    let mut variables = serde_json::Map::new();
    variables.insert("owner".into(), json!(repo.owner));
    variables.insert("name".into(), json!(repo.name));
    let mut fields = Vec::new();
    for (k, (n, chart)) in charts.iter().enumerate() {
        defs.push(format!("$c{k}: String!"));
        variables.insert(format!("c{k}"), json!(chart));
        fields.push(format!(
            "i{k}: issue(number: {}) {{ {LOOK_ISSUE} }} c{k}: object(expression: $c{k}) {{ {LOOK_CHART} }}",
            n.0
        ));
    }
    let query =
        format!("query({}) {{ repository(owner: $owner, name: $name) {{ {} }} }}", defs.join(", "), fields.join(" "));
    (query, Value::Object(variables))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchPage {
    issue_count: usize,
    page_info: SearchPageInfo,
    nodes: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchPageInfo {
    has_next_page: bool,
    end_cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchIssue {
    #[serde(flatten)]
    issue: GqlIssue,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl GitHubForge {
    /// The search string of one [`crate::forge::IssueSearch`]: GitHub's
    /// issue search syntax, times to the second in UTC.
    pub(super) fn search_string(&self, search: &crate::forge::IssueSearch) -> String {
        search_string_of(&self.settings.repo, search)
    }

    /// [`Forge::search_issues`]: one GraphQL query with a `search` per
    /// search (aliases `s0`, `s1`, ...), then one more per page for those
    /// with more than 100 results. A search whose count is over
    /// [`crate::forge::SEARCH_CAP`] is not paged: the caller lists instead.
    pub(super) async fn search_read(
        &self,
        searches: &[crate::forge::IssueSearch],
    ) -> ForgeResult<Vec<crate::forge::Found>> {
        use crate::forge::{Found, Listed, SEARCH_CAP};
        let action = format!("search the issues of {} (GraphQL)", self.settings.repo);
        let mut found: Vec<Option<Vec<Listed>>> = searches.iter().map(|_| Some(Vec::new())).collect();
        let mut counts = vec![0usize; searches.len()];
        // (search index, cursor): what the next request asks for.
        let mut pending: Vec<(usize, Option<String>)> = (0..searches.len()).map(|i| (i, None)).collect();
        // Bounded: 1,000 results are at most 10 pages of each search.
        for _ in 0..=SEARCH_CAP / 100 {
            if pending.is_empty() {
                break;
            }
            let asked: Vec<(usize, String, Option<String>)> =
                pending.iter().map(|(i, after)| (*i, self.search_string(&searches[*i]), after.clone())).collect();
            let (query, variables) = search_document(&asked);
            let answer = self.graphql(&query, variables, &action, Access::IssuesRead).await?;
            if let Some(e) = answer.errors.first() {
                return Err(self.graphql_error(&action, Access::IssuesRead, e));
            }
            let data = answer.data.ok_or_else(|| bad_shape(&action, "no `data` in the answer"))?;
            let mut next = Vec::new();
            for (i, _) in pending {
                let page = data.get(format!("s{i}")).cloned().unwrap_or(Value::Null);
                let page: SearchPage = serde_json::from_value(page).map_err(|e| bad_shape(&action, e))?;
                counts[i] = page.issue_count;
                if page.issue_count > SEARCH_CAP {
                    found[i] = None;
                    continue;
                }
                let Some(list) = found[i].as_mut() else { continue };
                for node in page.nodes {
                    // Pull requests match no `is:issue` search; anything else is skipped.
                    if node.get("__typename").and_then(Value::as_str) != Some("Issue") {
                        continue;
                    }
                    let hit: SearchIssue = serde_json::from_value(node).map_err(|e| bad_shape(&action, e))?;
                    let number = IssueNumber(hit.issue.number);
                    let issue = self.issue_of(number, hit.issue, &action).await?;
                    list.push(Listed { issue, updated_at: Some(hit.updated_at) });
                }
                if page.page_info.has_next_page {
                    let cursor =
                        page.page_info.end_cursor.ok_or_else(|| bad_shape(&action, "a page without a cursor"))?;
                    next.push((i, Some(cursor)));
                }
            }
            pending = next;
        }
        Ok(found
            .into_iter()
            .zip(counts)
            .map(|(list, count)| match list {
                Some(list) => Found::Issues(list),
                None => Found::TooMany(count),
            })
            .collect())
    }

    /// [`Forge::looks`]: one GraphQL query per
    /// [`crate::forge::LOOKS_PER_REQUEST`] patients, each an issue (`i0`,
    /// ...) and its chart (`c0`, ...). A patient GitHub does not find is an
    /// error of its own; a refused query is the error of each patient in it.
    pub(super) async fn looks_read(&self, numbers: &[IssueNumber]) -> Vec<ForgeResult<PatientLook>> {
        let mut out = Vec::with_capacity(numbers.len());
        for chunk in numbers.chunks(crate::forge::LOOKS_PER_REQUEST) {
            match self.looks_chunk(chunk).await {
                Ok(looks) => out.extend(looks),
                Err(e) => out.extend(chunk.iter().map(|_| Err(ForgeError::io("read the due patients", &e)))),
            }
        }
        out
    }

    async fn looks_chunk(&self, numbers: &[IssueNumber]) -> ForgeResult<Vec<ForgeResult<PatientLook>>> {
        let repo = &self.settings.repo;
        let list: Vec<String> = numbers.iter().map(ToString::to_string).collect();
        let action = format!("read {} with their charts and label histories in {repo} (GraphQL)", list.join(", "));
        let charts: Vec<(IssueNumber, String)> =
            numbers.iter().map(|n| (*n, format!("{}:{}", self.settings.charts_branch, Self::chart_path(*n)))).collect();
        let (query, variables) = looks_document(repo, &charts);
        let answer = self.graphql(&query, variables, &action, Access::IssuesRead).await?;
        let data = answer.data.as_ref().and_then(|d| d.get("repository")).filter(|r| !r.is_null());
        let Some(data) = data else {
            return Err(match answer.errors.first() {
                Some(e) => self.graphql_error(&action, Access::IssuesRead, e),
                None => bad_shape(&action, "no `repository` in the answer"),
            });
        };
        // An error on one patient's field: its path names the alias.
        let error_of =
            |alias: &str| answer.errors.iter().find(|e| e.path.get(1).and_then(Value::as_str) == Some(alias));
        let mut out = Vec::with_capacity(numbers.len());
        for (k, n) in numbers.iter().enumerate() {
            let (ia, ca) = (format!("i{k}"), format!("c{k}"));
            if let Some(e) = error_of(&ia).or_else(|| error_of(&ca)) {
                out.push(Err(if e.kind.as_deref() == Some("NOT_FOUND") && error_of(&ia).is_some() {
                    ForgeError::IssueNotFound(*n, self.describe())
                } else {
                    let access = if error_of(&ca).is_some() { Access::ContentsRead } else { Access::IssuesRead };
                    self.graphql_error(&action, access, e)
                }));
                continue;
            }
            out.push(self.look_of(*n, data.get(&ia), data.get(&ca), &action).await);
        }
        Ok(out)
    }

    /// One patient of a [`Self::looks_chunk`] answer, whole.
    async fn look_of(
        &self,
        number: IssueNumber,
        issue: Option<&Value>,
        chart: Option<&Value>,
        action: &str,
    ) -> ForgeResult<PatientLook> {
        let issue = issue.filter(|i| !i.is_null()).ok_or_else(|| bad_shape(action, format!("no issue {number}")))?;
        let issue: GqlIssue = serde_json::from_value(issue.clone()).map_err(|e| bad_shape(action, e))?;
        let chart: Option<GqlBlob> = match chart.filter(|c| !c.is_null()) {
            Some(c) => Some(serde_json::from_value(c.clone()).map_err(|e| bad_shape(action, e))?),
            None => None,
        };
        self.look_whole(number, issue, chart, action).await
    }
}

// -- Every document this module can send, for the test against GitHub's schema --

/// One GraphQL request ward can send: what it is for, its document and
/// variables as ward fills them.
#[derive(Debug, Clone)]
pub struct Document {
    pub name: String,
    pub query: String,
    pub variables: Value,
}

/// Every GraphQL document ward can send, assembled ones in each of their
/// shapes (a move's mutation with and without each of its parts, the
/// sweep's search and read of one patient and of many, with and without a
/// page's cursor), built by the same functions the forge sends them with,
/// with variables of the types it gives. `tests/graphql.rs` validates each
/// against GitHub's published schema.
pub fn documents() -> Vec<Document> {
    let doc =
        |name: &str, query: &str, variables: Value| Document { name: name.into(), query: query.into(), variables };
    let repo: super::RepoName = "octo/hospital".parse().expect("a valid repository name");
    let chart = "ward-charts:charts/7.md";
    let issue = json!({ "owner": "octo", "name": "hospital", "number": 7 });
    let mut out = vec![
        doc(
            "the stage's read",
            PATIENT_QUERY,
            json!({
                "owner": "octo", "name": "hospital", "number": 7, "lockdown": ["ward:lockdown"], "chart": chart,
            }),
        ),
        doc("the patient's comment, looked for", COMMENTS_QUERY, issue.clone()),
        doc(
            "one patient's look",
            LOOK_QUERY,
            json!({ "owner": "octo", "name": "hospital", "number": 7, "chart": chart }),
        ),
        doc(
            "the audit's pull request facts",
            PULL_QUERY,
            json!({ "owner": "octo", "name": "hospital", "branch": "ward/issue-7" }),
        ),
        doc("doctor's look at the endpoint", PROBE_QUERY, json!({ "owner": "octo", "name": "hospital" })),
        doc(
            "the merge queue's enqueue",
            ENQUEUE_MUTATION,
            json!({ "pull": "PR_x", "head": "0123456789abcdef0123456789abcdef01234567" }),
        ),
        doc(
            "review threads, first page",
            super::wire::THREADS_QUERY,
            json!({ "owner": "octo", "name": "hospital", "number": 3, "after": null }),
        ),
        doc(
            "review threads, a later page",
            super::wire::THREADS_QUERY,
            json!({ "owner": "octo", "name": "hospital", "number": 3, "after": "Y3Vyc29y" }),
        ),
    ];
    let labels = ["LA_out".to_string()];
    let added = ["LA_in".to_string(), "LA_too".to_string()];
    for remove in [&labels[..0], &labels[..]] {
        for add in [&added[..0], &added[..]] {
            for edit in [None, Some("IC_comment")] {
                let (query, variables) = move_document("I_issue", remove, add, edit, "where the patient is");
                let name = format!(
                    "a move's mutation: {} labels out, {} in, the comment {}",
                    remove.len(),
                    add.len(),
                    if edit.is_some() { "edited" } else { "created" }
                );
                out.push(Document { name, query, variables });
            }
        }
    }
    let at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").expect("a time").to_utc();
    let search = |i: usize, after: Option<&str>| {
        let updated =
            if i.is_multiple_of(2) { crate::forge::Updated::Before(at) } else { crate::forge::Updated::Since(at) };
        let asked = crate::forge::IssueSearch { label: "ward:treat".into(), open: i != 7, updated };
        (i, search_string_of(&repo, &asked), after.map(String::from))
    };
    for (name, asked) in [
        ("the sweep's search, one label", vec![search(0, None)]),
        (
            "the sweep's search, labels and a later page",
            vec![search(0, None), search(3, Some("Y3Vyc29y")), search(7, None)],
        ),
    ] {
        let (query, variables) = search_document(&asked);
        out.push(Document { name: name.into(), query, variables });
    }
    for count in [1, crate::forge::LOOKS_PER_REQUEST] {
        let charts: Vec<(IssueNumber, String)> =
            (1..=count as u64).map(|n| (IssueNumber(n), format!("ward-charts:charts/{n}.md"))).collect();
        let (query, variables) = looks_document(&repo, &charts);
        out.push(Document { name: format!("the sweep's read of {count} due patient(s)"), query, variables });
    }
    out
}
