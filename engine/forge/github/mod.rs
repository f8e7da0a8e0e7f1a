//! The GitHub forge through octocrab: REST for the writes, GraphQL for the
//! reads one query can combine (`graphql`, with REST as the fallback).
//!
//! The client is built in exactly one function, [`build_client`], from the
//! API base URL and a token; tests pass the URL of the fake GitHub. Every
//! request goes through [`GitHubForge::send`], the one place that retries
//! (see [`super::retry`]), and every answer is turned into the small types of
//! [`super`] at this boundary, with `TryFrom`, never by unwrapping API data.
//!
//! Calls per stage transition (see `docs/github.md`): one GraphQL read (the
//! issue, the lockdown check and the chart, `graphql`), write the chart
//! twice, set the labels, dispatch: five.
//!
//! `transport` sends (and retries) requests and names refusals; `wire`
//! holds the API's shapes and their conversions; `setup` is what
//! `ward doctor` reads and sets up (never on a stage's path).

mod graphql;
mod setup;
mod transport;
mod wire;

pub use graphql::{Document, documents as graphql_documents};
pub use setup::{Probe, WorkflowSettings};

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use futures_util::StreamExt as _;
use http::Method;
use octocrab::Octocrab;
use serde_json::{Value, json};

use self::transport::{Call, Reply, percent};
use self::wire::*;
use super::retry::RetryPolicy;
use super::{
    CiStatus, Comment, CommitInfo, Forge, ForgeError, ForgeQueue, ForgeResult, Issue, IssueNumber, LabelEvent,
    LabelSpec, Listed, MergeQueueRule, NewIssue, NewPullRequest, PatientLook, PatientRead, Permission, PullFacts,
    PullRequest, PullState, Reaction, Review, StoredChart,
};

/// The public API; `GITHUB_API_URL` overrides it (GitHub Enterprise, tests).
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// Where Actions says GraphQL is served (`https://api.github.com/graphql`,
/// on GitHub Enterprise Server `https://HOST/api/graphql`).
pub const GRAPHQL_URL_ENV: &str = "GITHUB_GRAPHQL_URL";

/// The GraphQL endpoint of the REST API at `api_url`, when nothing names
/// it: `{api}/graphql` on github.com (and GHE.com's `api.SUBDOMAIN.ghe.com`),
/// `https://HOST/api/graphql` on GitHub Enterprise Server, whose REST API is
/// `https://HOST/api/v3` (GraphQL is not below it).
pub fn graphql_url_for(api_url: &str) -> String {
    let base = api_url.trim_end_matches('/');
    match base.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{base}/graphql"),
    }
}
/// `repository_dispatch` event type that starts a stage.
pub const DISPATCH_EVENT: &str = "ward-stage";
/// `repository_dispatch` event type that starts a run of ward's merge
/// queue (ward-queue.yml).
pub const QUEUE_EVENT: &str = "ward-queue";
/// The git object id of the empty tree, the root of the charts branch.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
/// ward's own jobs are named `ward <what>` (`ward stage`): their check
/// runs are not the repository's CI.
pub const OWN_CHECK_PREFIX: &str = "ward ";
/// Longest pagination the engine follows (100 items a page).
const MAX_PAGES: usize = 50;

/// Builds the one octocrab client for the host of `api_url` (the REST base:
/// `https://api.github.com`, `https://HOST/api/v3`, or the fake GitHub's
/// loopback URL in tests). Its base is the host alone: each request names
/// its whole path ([`Endpoints`]), since octocrab would put a base's path
/// (`/api/v3`) before GHES's `/api/graphql` too. octocrab's retry layer is
/// not compiled in; [`GitHubForge`] retries.
pub fn build_client(api_url: &str, token: &str) -> ForgeResult<Octocrab> {
    let action = format!("set up the GitHub client for {api_url}");
    let origin = Endpoints::origin(api_url, &action)?;
    if token.trim().is_empty() {
        return Err(ForgeError::Forbidden {
            action,
            message: "no token".into(),
            help: "set WARD_TOKEN or GITHUB_TOKEN (in a workflow: `env: GITHUB_TOKEN: ${{ github.token }}`)".into(),
        });
    }
    Octocrab::builder()
        .base_uri(origin.as_str())
        .map_err(|e| ForgeError::io(&action, format!("`{api_url}` is not a URL ({e})")))?
        .personal_token(token.to_string())
        .set_connect_timeout(Some(Duration::from_secs(10)))
        .set_read_timeout(Some(Duration::from_secs(60)))
        .set_write_timeout(Some(Duration::from_secs(60)))
        .build()
        .map_err(|e| ForgeError::io(&action, e))
}

/// The paths requests go to on the API's host: REST's base (`/api/v3` on
/// GHES, nothing on api.github.com) and GraphQL's endpoint.
#[derive(Debug, Clone)]
pub(super) struct Endpoints {
    pub(super) rest: String,
    pub(super) graphql: String,
}

impl Endpoints {
    /// `scheme://authority` of `url`.
    fn origin(url: &str, action: &str) -> ForgeResult<String> {
        let uri: http::Uri =
            url.trim().parse().map_err(|e| ForgeError::io(action, format!("`{url}` is not a URL ({e})")))?;
        match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(authority)) => Ok(format!("{scheme}://{authority}")),
            _ => Err(ForgeError::io(action, format!("`{url}` is not an absolute URL (`https://HOST/...`)"))),
        }
    }

    /// The paths of `settings`' REST and GraphQL URLs, which must be on one
    /// host: the token is sent to the API's host only.
    fn of(settings: &GitHubSettings) -> ForgeResult<Self> {
        let action = format!("set up the GitHub client for {}", settings.api_url);
        let path = |url: &str| -> ForgeResult<String> {
            let uri: http::Uri =
                url.trim().parse().map_err(|e| ForgeError::io(&action, format!("`{url}` is not a URL ({e})")))?;
            Ok(uri.path().trim_end_matches('/').to_string())
        };
        let (api, graphql) = (Self::origin(&settings.api_url, &action)?, Self::origin(&settings.graphql_url, &action)?);
        if !api.eq_ignore_ascii_case(&graphql) {
            return Err(ForgeError::io(
                &action,
                format!(
                    "the GraphQL endpoint `{}` ({GRAPHQL_URL_ENV}) is not on the API's host `{api}`: ward sends its token \
                     to that host only; set {GRAPHQL_URL_ENV} to the API host's endpoint, or unset it",
                    settings.graphql_url
                ),
            ));
        }
        let graphql_path = path(&settings.graphql_url)?;
        Ok(Self {
            rest: path(&settings.api_url)?,
            graphql: if graphql_path.is_empty() { "/".into() } else { graphql_path },
        })
    }
}

/// `owner/name`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoName {
    pub owner: String,
    pub name: String,
}

/// A text that names no repository like `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a repository like `owner/name` (set --repo or GITHUB_REPOSITORY)")]
pub struct NotARepo(pub String);

impl std::str::FromStr for RepoName {
    type Err = NotARepo;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        match s.split_once('/') {
            Some((owner, name)) if ok(owner) && ok(name) => Ok(Self { owner: owner.into(), name: name.into() }),
            _ => Err(NotARepo(s.to_string())),
        }
    }
}

impl std::fmt::Display for RepoName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The permission a request needs, named the way a workflow grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Metadata,
    IssuesRead,
    IssuesWrite,
    ContentsRead,
    ContentsWrite,
    PullsRead,
    PullsWrite,
    ChecksRead,
    StatusesRead,
    ActionsWrite,
}

impl Access {
    /// What to do when GitHub refuses: one small function for all help text.
    pub fn help(self) -> String {
        let (what, grant) = match self {
            Access::Metadata => ("see the repository", "metadata: read"),
            Access::IssuesRead => ("read issues", "issues: read"),
            Access::IssuesWrite => ("write issues", "issues: write"),
            Access::ContentsRead => ("read contents", "contents: read"),
            Access::ContentsWrite => ("write contents (the charts branch, dispatches)", "contents: write"),
            Access::PullsRead => ("read pull requests", "pull-requests: read"),
            Access::PullsWrite => ("write pull requests", "pull-requests: write"),
            Access::ChecksRead => ("read check runs", "checks: read"),
            Access::StatusesRead => ("read commit statuses", "statuses: read"),
            Access::ActionsWrite => ("start workflows", "actions: write"),
        };
        format!("the token cannot {what}: give the workflow `{grant}` (or the app token that permission)")
    }
}

/// Settings of one [`GitHubForge`].
#[derive(Clone)]
pub struct GitHubSettings {
    /// The REST API's base: `GITHUB_API_URL`.
    pub api_url: String,
    /// GraphQL's endpoint: `GITHUB_GRAPHQL_URL`, else [`graphql_url_for`]
    /// the API.
    pub graphql_url: String,
    pub repo: RepoName,
    pub charts_branch: String,
    pub engine_account: super::EngineAccount,
}

pub struct GitHubForge {
    client: Octocrab,
    settings: GitHubSettings,
    /// Where REST's paths start and GraphQL is, on the API's host.
    endpoints: Endpoints,
    retry: RetryPolicy,
    /// Combined reads over GraphQL (see `graphql`); off: REST alone.
    graphql: bool,
    /// Node ids the GraphQL reads gave (the issue, its labels and the
    /// repository's, the patient's comment): what a move's one mutation
    /// needs (see `graphql::NodeIds`).
    ids: std::sync::Mutex<graphql::NodeIds>,
    /// One slot per request in flight (see `transport::CONCURRENT_REQUESTS`).
    in_flight: tokio::sync::Semaphore,
}

/// `WARD_GITHUB_GRAPHQL=false` (or `0`, `off`, `no`) turns the GraphQL
/// reads off: every read goes over REST, as on a GitHub Enterprise Server
/// whose GraphQL API is not reachable.
pub const GRAPHQL_ENV: &str = "WARD_GITHUB_GRAPHQL";

/// Whether `value` (of [`GRAPHQL_ENV`]) leaves GraphQL on.
pub fn graphql_enabled(value: Option<&str>) -> bool {
    !value.is_some_and(|v| ["false", "0", "off", "no"].contains(&v.trim().to_lowercase().as_str()))
}

impl std::fmt::Debug for GitHubForge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No token in here: octocrab keeps it, and it is never printed.
        f.debug_struct("GitHubForge").field("repo", &self.settings.repo.to_string()).finish_non_exhaustive()
    }
}

impl GitHubForge {
    /// The forge a workflow run uses: repository from `repo` (`--repo`) or
    /// `GITHUB_REPOSITORY`, API from `GITHUB_API_URL` (default
    /// api.github.com), token from [`Secrets::github_token`]: `WARD_TOKEN`,
    /// else `GITHUB_TOKEN` (an empty `WARD_TOKEN`, as an unset secret gives,
    /// counts as unset).
    ///
    /// [`Secrets::github_token`]: crate::secrets::Secrets::github_token
    pub fn from_env(
        repo: Option<&str>,
        charts_branch: &str,
        engine_account: &super::EngineAccount,
    ) -> ForgeResult<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let repo = repo.map(str::to_string).or_else(|| var("GITHUB_REPOSITORY")).ok_or_else(|| {
            ForgeError::io(
                "find the repository",
                "no repository named: pass --repo OWNER/NAME or set GITHUB_REPOSITORY",
            )
        })?;
        let repo: RepoName = repo.parse().map_err(|e: NotARepo| ForgeError::io("find the repository", e))?;
        let token = crate::secrets::Secrets::global().github_token().unwrap_or_default();
        let api_url = var("GITHUB_API_URL").unwrap_or_else(|| DEFAULT_API_URL.into());
        let settings = GitHubSettings {
            graphql_url: var(GRAPHQL_URL_ENV).unwrap_or_else(|| graphql_url_for(&api_url)),
            api_url,
            repo,
            charts_branch: charts_branch.into(),
            engine_account: engine_account.clone(),
        };
        Ok(Self::new(settings, token)?.with_graphql(graphql_enabled(var(GRAPHQL_ENV).as_deref())))
    }

    pub fn new(settings: GitHubSettings, token: &str) -> ForgeResult<Self> {
        let client = build_client(&settings.api_url, token)?;
        Ok(Self {
            client,
            endpoints: Endpoints::of(&settings)?,
            settings,
            retry: RetryPolicy::default(),
            graphql: true,
            ids: Default::default(),
            in_flight: tokio::sync::Semaphore::new(transport::CONCURRENT_REQUESTS),
        })
    }

    /// Reads over GraphQL where one query does the work of several (on by
    /// default), or REST alone.
    pub fn with_graphql(mut self, on: bool) -> Self {
        self.graphql = on;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Where GraphQL requests go (`ward doctor` says it).
    pub fn graphql_url(&self) -> &str {
        &self.settings.graphql_url
    }

    /// Whether the reads go over GraphQL ([`GRAPHQL_ENV`]).
    pub fn graphql_on(&self) -> bool {
        self.graphql
    }

    pub fn repo(&self) -> &RepoName {
        &self.settings.repo
    }

    fn repo_path(&self, rest: &str) -> String {
        format!("/repos/{}/{}{rest}", self.settings.repo.owner, self.settings.repo.name)
    }

    fn call(&self, method: Method, rest: &str, action: String, access: Access) -> Call {
        Call { method, path: self.repo_path(rest), body: None, action, access }
    }

    fn chart_path(number: IssueNumber) -> String {
        format!("charts/{}.md", number.0)
    }

    /// Creates the charts branch from an empty tree: one orphan commit, one ref.
    async fn create_charts_branch(&self) -> ForgeResult<()> {
        let branch = &self.settings.charts_branch;
        let action = format!("create the charts branch `{branch}` in {}", self.settings.repo);
        let mut commit = self.call(Method::POST, "/git/commits", action.clone(), Access::ContentsWrite);
        commit.body = Some(json!({
            "message": "ward: charts branch (patient charts live here, one file per issue)",
            "tree": EMPTY_TREE,
            "parents": [],
        }));
        let reply = self.send_ok(&commit).await?;
        let created: WireSha = reply.json(&action)?;
        let mut reference = self.call(Method::POST, "/git/refs", action.clone(), Access::ContentsWrite);
        reference.body = Some(json!({ "ref": format!("refs/heads/{branch}"), "sha": created.sha }));
        let reply = self.send(&reference).await?;
        match reply.status.as_u16() {
            201 => Ok(()),
            // Another run created it first: that is what we wanted.
            422 if reply.message().to_lowercase().contains("already exists") => Ok(()),
            _ => Err(self.refusal(&reference, &reply)),
        }
    }

    /// The check runs of `sha`, every page, but ward's own: a ward job
    /// started by a review of the pull request is a check run on its head,
    /// in progress while it audits, and is no CI.
    async fn check_run_list(&self, sha: &str) -> ForgeResult<Vec<Check>> {
        let action = format!("read the check runs of commit {sha}");
        let call = self.call(
            Method::GET,
            &format!("/commits/{}/check-runs?per_page=100", percent(sha)),
            action.clone(),
            Access::ChecksRead,
        );
        let checks = convert::<WireCheckRun, Check>(self.get_all(call, check_runs).await?, &action)?;
        Ok(checks.into_iter().filter(|c| !c.name.starts_with(OWN_CHECK_PREFIX)).collect())
    }

    async fn charts_branch_exists(&self) -> ForgeResult<bool> {
        let branch = &self.settings.charts_branch;
        let action = format!("look up the charts branch `{branch}` in {}", self.settings.repo);
        let call = self.call(Method::GET, &format!("/git/ref/heads/{branch}"), action, Access::ContentsRead);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    async fn put_chart(&self, number: IssueNumber, text: &str, expected: Option<&str>) -> ForgeResult<Reply> {
        let action = format!(
            "write the chart of {number} to `{}` on branch `{}` of {}",
            Self::chart_path(number),
            self.settings.charts_branch,
            self.settings.repo
        );
        let mut call =
            self.call(Method::PUT, &format!("/contents/{}", Self::chart_path(number)), action, Access::ContentsWrite);
        let mut body = json!({
            "message": format!("ward: chart of {number}"),
            "content": base64::engine::general_purpose::STANDARD.encode(text),
            "branch": self.settings.charts_branch,
        });
        if let Some(sha) = expected {
            body["sha"] = json!(sha);
        }
        call.body = Some(body);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 | 201 => Ok(reply),
            // The sha we hold is not the file's any more (409), or the file
            // exists and we held none (422 "sha wasn't supplied"): someone
            // else wrote first. Any other 422 is not a race.
            409 => Err(ForgeError::ChartConflict(number)),
            422 if reply.message().contains("sha") => Err(ForgeError::ChartConflict(number)),
            _ => Err(self.refusal(&call, &reply)),
        }
    }
}

#[async_trait]
impl Forge for GitHubForge {
    fn describe(&self) -> String {
        self.settings.repo.to_string()
    }

    fn engine_account(&self) -> &super::EngineAccount {
        &self.settings.engine_account
    }

    async fn issue(&self, number: IssueNumber) -> ForgeResult<Issue> {
        let action = format!("read issue {number} of {}", self.settings.repo);
        let call = self.call(Method::GET, &format!("/issues/{}", number.0), action.clone(), Access::IssuesRead);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => {}
            // 404 is a missing issue only when the repository is there.
            404 | 410 => {
                let repo = self.call(Method::GET, "", format!("read {}", self.settings.repo), Access::Metadata);
                let answer = self.send(&repo).await?;
                return Err(if answer.status.is_success() {
                    ForgeError::IssueNotFound(number, self.describe())
                } else {
                    self.refusal(&repo, &answer)
                });
            }
            _ => return Err(self.refusal(&call, &reply)),
        }
        let wire: WireIssue = reply.json(&action)?;
        Issue::try_from(wire).map_err(|e| bad_shape(&action, e))
    }

    async fn patient(&self, number: IssueNumber, lockdown_label: &str) -> ForgeResult<PatientRead> {
        if self.graphql {
            self.patient_read(number, lockdown_label).await
        } else {
            super::patient_by_parts(self, number, lockdown_label).await
        }
    }

    async fn look(&self, number: IssueNumber) -> ForgeResult<PatientLook> {
        if self.graphql {
            self.look_read(number).await
        } else {
            let issue = self.issue(number).await?;
            let chart = self.read_chart(number).await?;
            let label_events = self.label_events(number).await?;
            Ok(PatientLook { issue, chart, label_events })
        }
    }

    async fn looks(&self, numbers: &[IssueNumber]) -> Vec<ForgeResult<PatientLook>> {
        if self.graphql {
            return self.looks_read(numbers).await;
        }
        // Over REST, three reads each: several patients read side by side
        // (within the forge's bound on requests in flight), answers in order.
        futures_util::stream::iter(numbers.iter().copied())
            .map(|n| self.look(n))
            .buffered(transport::CONCURRENT_REQUESTS)
            .collect()
            .await
    }

    /// Over GraphQL only: REST's search (`GET /search/issues`) has a budget
    /// of its own of 30 requests a minute, one request per search.
    async fn search_issues(&self, searches: &[super::IssueSearch]) -> ForgeResult<Option<Vec<super::Found>>> {
        if !self.graphql {
            return Ok(None);
        }
        self.search_read(searches).await.map(Some)
    }

    async fn create_issue(&self, new: NewIssue) -> ForgeResult<Issue> {
        let action = format!("open an issue `{}` in {}", new.title, self.settings.repo);
        let mut call = self.call(Method::POST, "/issues", action.clone(), Access::IssuesWrite);
        call.body = Some(json!({ "title": new.title, "body": new.body, "labels": new.labels }));
        let wire: WireIssue = self.send_ok(&call).await?.json(&action)?;
        Issue::try_from(wire).map_err(|e| bad_shape(&action, e))
    }

    async fn open_issues_with_label(&self, label: &str) -> ForgeResult<Vec<Issue>> {
        Ok(self.open_issues_listed(label).await?.into_iter().map(|l| l.issue).collect())
    }

    async fn open_issues_listed(&self, label: &str) -> ForgeResult<Vec<Listed>> {
        let action = format!("list open issues labeled `{label}` in {}", self.settings.repo);
        let rest = format!("/issues?state=open&labels={}&per_page=100", percent(label));
        let call = self.call(Method::GET, &rest, action.clone(), Access::IssuesRead);
        let wires: Vec<WireListed> = self.get_all_as(call).await?;
        wires
            .into_iter()
            .filter(|w| w.pull_request.is_none())
            .map(|w| Listed::try_from(w).map_err(|e| bad_shape(&action, e)))
            .collect()
    }

    async fn all_issues(&self) -> ForgeResult<Vec<Issue>> {
        let action = format!("list the issues of {}", self.settings.repo);
        let call = self.call(Method::GET, "/issues?state=all&per_page=100", action.clone(), Access::IssuesRead);
        let items = self.get_all(call, array).await?;
        let wires: Vec<Value> = items.into_iter().filter(|i| i.get("pull_request").is_none()).collect();
        convert::<WireIssue, Issue>(wires, &action)
    }

    async fn reopen_issue(&self, number: IssueNumber) -> ForgeResult<()> {
        let action = format!("reopen issue {number} of {}", self.settings.repo);
        let mut call = self.call(Method::PATCH, &format!("/issues/{}", number.0), action, Access::IssuesWrite);
        call.body = Some(json!({ "state": "open" }));
        self.send_ok(&call).await.map(drop)
    }

    /// The listing (one call) says nothing of who closed an issue; each
    /// issue's own read does (`closed_by`), one call per closed issue.
    async fn closed_issues_with_label(
        &self,
        label: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> ForgeResult<Vec<crate::forge::ClosedIssue>> {
        let action = format!("list closed issues labeled `{label}` in {}", self.settings.repo);
        let since = since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let rest = format!("/issues?state=closed&labels={}&since={since}&per_page=100", percent(label));
        let items = self.get_all(self.call(Method::GET, &rest, action.clone(), Access::IssuesRead), array).await?;
        let mut closed = Vec::new();
        for item in items.iter().filter(|i| i.get("pull_request").is_none()) {
            let Some(n) = item.get("number").and_then(Value::as_u64) else { continue };
            let read = format!("read who closed issue #{n}");
            let call = self.call(Method::GET, &format!("/issues/{n}"), read.clone(), Access::IssuesRead);
            let issue: Value = self.send_ok(&call).await?.json(&read)?;
            let closed_by = issue.pointer("/closed_by/login").and_then(Value::as_str).map(str::to_string);
            closed.push(crate::forge::ClosedIssue { number: IssueNumber(n), closed_by });
        }
        Ok(closed)
    }

    async fn close_issue(&self, number: IssueNumber) -> ForgeResult<()> {
        let action = format!("close issue {number} of {}", self.settings.repo);
        let mut call = self.call(Method::PATCH, &format!("/issues/{}", number.0), action, Access::IssuesWrite);
        call.body = Some(json!({ "state": "closed", "state_reason": "completed" }));
        self.send_ok(&call).await.map(drop)
    }

    async fn relabel_and_comment(
        &self,
        number: IssueNumber,
        labels: Option<super::Relabel<'_>>,
        comment: super::CommentWrite<'_>,
    ) -> Result<Option<u64>, super::RelabelError> {
        if self.graphql
            && let Some(mutation) = self.move_mutation(number, labels, comment)
        {
            return self.send_move(number, mutation, labels.is_some()).await;
        }
        super::relabel_and_comment_by_parts(self, number, labels, comment).await
    }

    fn finds_patient_comment(&self) -> bool {
        self.graphql
    }

    async fn find_patient_comment(&self, number: IssueNumber) -> ForgeResult<Option<u64>> {
        if !self.graphql {
            return Ok(None);
        }
        self.comment_by_marker(number).await
    }

    async fn set_labels(&self, number: IssueNumber, labels: &[String]) -> ForgeResult<()> {
        let action = format!("set the labels of {number} to [{}]", labels.join(", "));
        let rest = format!("/issues/{}/labels", number.0);
        let call = if labels.is_empty() {
            // PUT needs at least one label; removing all is its own call.
            self.call(Method::DELETE, &rest, action, Access::IssuesWrite)
        } else {
            let mut call = self.call(Method::PUT, &rest, action, Access::IssuesWrite);
            call.body = Some(json!({ "labels": labels }));
            call
        };
        self.send_ok(&call).await.map(drop)
    }

    async fn ensure_labels(&self, specs: &[LabelSpec]) -> ForgeResult<()> {
        let action = format!("list the labels of {}", self.settings.repo);
        let existing = self
            .get_all(self.call(Method::GET, "/labels?per_page=100", action.clone(), Access::IssuesRead), array)
            .await?;
        let names: Vec<String> = convert::<WireLabel, LabelName>(existing, &action)?.into_iter().map(|l| l.0).collect();
        self.create_missing_labels(specs, &names).await
    }

    async fn create_missing_labels(&self, specs: &[LabelSpec], names: &[String]) -> ForgeResult<()> {
        for spec in specs.iter().filter(|s| !names.iter().any(|n| n.eq_ignore_ascii_case(&s.name))) {
            let action = format!("create label `{}` in {}", spec.name, self.settings.repo);
            let mut call = self.call(Method::POST, "/labels", action, Access::IssuesWrite);
            call.body = Some(json!({ "name": spec.name, "color": spec.color, "description": spec.description }));
            let reply = self.send(&call).await?;
            // 422 "already_exists": a concurrent run created it.
            if !(reply.status.is_success() || reply.status.as_u16() == 422 && reply.body.contains("already_exists")) {
                return Err(self.refusal(&call, &reply));
            }
        }
        Ok(())
    }

    async fn label_events(&self, number: IssueNumber) -> ForgeResult<Vec<LabelEvent>> {
        let action = format!("read the label history of {number}");
        let call = self.call(
            Method::GET,
            &format!("/issues/{}/events?per_page=100", number.0),
            action.clone(),
            Access::IssuesRead,
        );
        let items = self.get_all(call, array).await?;
        Ok(convert::<WireIssueEvent, MaybeLabelEvent>(items, &action)?.into_iter().filter_map(|e| e.0).collect())
    }

    async fn comments(&self, number: IssueNumber) -> ForgeResult<Vec<Comment>> {
        let action = format!("read the comments of {number}");
        let call = self.call(
            Method::GET,
            &format!("/issues/{}/comments?per_page=100", number.0),
            action.clone(),
            Access::IssuesRead,
        );
        convert::<WireComment, Comment>(self.get_all(call, array).await?, &action)
    }

    async fn add_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<()> {
        let action = format!("comment on {number}");
        let mut call = self.call(Method::POST, &format!("/issues/{}/comments", number.0), action, Access::IssuesWrite);
        call.body = Some(json!({ "body": body }));
        self.send_ok(&call).await.map(drop)
    }

    async fn permission(&self, login: &str) -> ForgeResult<Permission> {
        let action = format!("look up the permission of `{login}` on {}", self.settings.repo);
        let rest = format!("/collaborators/{}/permission", percent(login));
        let call = self.call(Method::GET, &rest, action.clone(), Access::Metadata);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => {
                let wire: WirePermission = reply.json(&action)?;
                Permission::try_from(wire).map_err(|e| bad_shape(&action, e))
            }
            // Not a user GitHub knows: no permission at all.
            404 if reply.message().contains("not a user") => Ok(Permission::None),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    async fn acting_user(&self) -> ForgeResult<String> {
        // In a workflow run the token is the job's or an app's: the person
        // is the sender of the event the runner wrote (a step cannot set it).
        if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true")
            && let Some(sender) = event_sender()
        {
            return Ok(sender);
        }
        let action = "find out who the token belongs to (GET /user)".to_string();
        let call = Call {
            method: Method::GET,
            path: "/user".into(),
            body: None,
            action: action.clone(),
            access: Access::Metadata,
        };
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => {
                let user: WireUser = reply.json(&action)?;
                Ok(user.login)
            }
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    async fn read_chart(&self, number: IssueNumber) -> ForgeResult<Option<StoredChart>> {
        let path = Self::chart_path(number);
        let branch = &self.settings.charts_branch;
        let action = format!("read the chart of {number} (`{path}` on branch `{branch}` of {})", self.settings.repo);
        let rest = format!("/contents/{path}?ref={}", percent(branch));
        let call = self.call(Method::GET, &rest, action.clone(), Access::ContentsRead);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => {
                let wire: WireContent = reply.json(&action)?;
                // Over 1 MB the contents API gives the sha but no content
                // (encoding `none`): the blob of that sha gives the text.
                if wire.kind == "file" && wire.encoding.as_deref() == Some("none") {
                    let text = self.blob_text(&wire.sha, &action).await?;
                    return Ok(Some(StoredChart { text, version: wire.sha }));
                }
                StoredChart::try_from(wire).map(Some).map_err(|e| bad_shape(&action, e))
            }
            // No such file, or no charts branch yet: no chart.
            404 => Ok(None),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    async fn write_chart(&self, number: IssueNumber, text: &str, expected: Option<&str>) -> ForgeResult<StoredChart> {
        let reply = match self.put_chart(number, text, expected).await {
            // The branch is created on first use, then the write is tried once more.
            Err(ForgeError::Forbidden { .. } | ForgeError::Api { status: 422, .. })
                if !self.charts_branch_exists().await? =>
            {
                self.create_charts_branch().await?;
                self.put_chart(number, text, expected).await?
            }
            other => other?,
        };
        let action = format!("write the chart of {number}");
        let commit: WireFileCommit = reply.json(&action)?;
        let sha = commit.content.ok_or_else(|| bad_shape(&action, "no `content` in the answer"))?.sha;
        Ok(StoredChart { text: text.to_string(), version: sha })
    }

    async fn dispatch_stage(&self, number: IssueNumber, label: &str) -> ForgeResult<()> {
        let action = format!("dispatch `{DISPATCH_EVENT}` for {number} in {}", self.settings.repo);
        let mut call = self.call(Method::POST, "/dispatches", action, Access::ContentsWrite);
        call.body = Some(json!({
            "event_type": DISPATCH_EVENT,
            "client_payload": { "issue": number.0, "label": label },
        }));
        self.send_ok(&call).await.map(drop)
    }

    async fn pull_request_for_branch(&self, branch: &str) -> ForgeResult<Option<PullRequest>> {
        let pulls = self.pull_requests_of_branch(branch).await?;
        // As locally: the open one, else the merged one; closed ones do not count.
        let mut live: Vec<PullRequest> = pulls.into_iter().filter(|p| p.state != PullState::Closed).collect();
        live.sort_by_key(|p| (p.state == PullState::Open, p.number));
        Ok(live.pop())
    }

    async fn pull_requests_of_branch(&self, branch: &str) -> ForgeResult<Vec<PullRequest>> {
        let action = format!("find the pull requests of branch `{branch}` in {}", self.settings.repo);
        let head = percent(&format!("{}:{branch}", self.settings.repo.owner));
        let call = self.call(
            Method::GET,
            &format!("/pulls?state=all&head={head}&per_page=100"),
            action.clone(),
            Access::PullsRead,
        );
        convert::<WirePull, PullRequest>(self.get_all(call, array).await?, &action)
    }

    async fn open_pull_request(&self, new: NewPullRequest) -> ForgeResult<PullRequest> {
        let action = format!("open a pull request from `{}` in {}", new.head_branch, self.settings.repo);
        let mut call = self.call(Method::POST, "/pulls", action.clone(), Access::PullsWrite);
        call.body = Some(json!({
            "title": new.title, "body": new.body, "head": new.head_branch, "base": new.base_branch,
        }));
        let reply = self.send(&call).await?;
        if reply.status.is_success() {
            let wire: WirePull = reply.json(&action)?;
            return PullRequest::try_from(wire).map_err(|e| bad_shape(&action, e));
        }
        if reply.status.as_u16() == 422
            && reply.body.contains("already exists")
            && let Some(existing) = self.pull_request_for_branch(&new.head_branch).await?
        {
            return Ok(existing);
        }
        Err(self.refusal(&call, &reply))
    }

    async fn reviews(&self, pull: u64) -> ForgeResult<Vec<Review>> {
        let action = format!("read the reviews of pull request #{pull}");
        let call =
            self.call(Method::GET, &format!("/pulls/{pull}/reviews?per_page=100"), action.clone(), Access::PullsRead);
        convert::<WireReview, Review>(self.get_all(call, array).await?, &action)
    }

    async fn unresolved_review_threads(&self, pull: u64) -> ForgeResult<usize> {
        let action = format!("count the unresolved review threads of pull request #{pull}");
        let mut after: Option<String> = None;
        let mut unresolved = 0;
        for _ in 0..MAX_PAGES {
            let variables = json!({
                "owner": self.settings.repo.owner, "name": self.settings.repo.name, "number": pull, "after": after,
            });
            let call = Call::graphql(THREADS_QUERY, variables, action.clone(), Access::PullsRead);
            let answer: WireGraphql = self.send_ok(&call).await?.json(&action)?;
            if let Some(e) = answer.errors.first() {
                return Err(ForgeError::Api { action, status: 200, message: e.message.clone() });
            }
            let threads = answer
                .data
                .as_ref()
                .and_then(|d| d.pointer("/repository/pullRequest/reviewThreads"))
                .ok_or_else(|| bad_shape(&action, format!("pull request #{pull} has no review threads")))?;
            let threads: WireThreads = serde_json::from_value(threads.clone()).map_err(|e| bad_shape(&action, e))?;
            unresolved += threads.nodes.iter().filter(|t| !t.is_resolved).count();
            match (threads.page_info.has_next_page, threads.page_info.end_cursor) {
                (true, Some(cursor)) => after = Some(cursor),
                _ => return Ok(unresolved),
            }
        }
        Err(ForgeError::io(&action, format!("more than {MAX_PAGES} pages of review threads")))
    }

    async fn pull_request_commits(&self, pull: u64) -> ForgeResult<Vec<CommitInfo>> {
        let action = format!("read the commits of pull request #{pull}");
        let call =
            self.call(Method::GET, &format!("/pulls/{pull}/commits?per_page=100"), action.clone(), Access::PullsRead);
        convert::<WireCommitItem, CommitInfo>(self.get_all(call, array).await?, &action)
    }

    async fn pull_request_files(&self, pull: u64) -> ForgeResult<Vec<String>> {
        #[derive(serde::Deserialize)]
        struct WireFile {
            filename: String,
            status: String,
        }
        let action = format!("read the files of pull request #{pull}");
        let call = self.call(Method::GET, &format!("/pulls/{pull}/files?per_page=100"), action, Access::PullsRead);
        // GitHub lists at most 3,000 files of a pull request.
        let files: Vec<WireFile> = self.get_all_as(call).await?;
        Ok(files.into_iter().filter(|f| f.status != "removed").map(|f| f.filename).collect())
    }

    async fn pull_facts(&self, branch: &str) -> ForgeResult<Option<PullFacts>> {
        if self.graphql { self.pull_facts_read(branch).await } else { super::pull_facts_by_parts(self, branch).await }
    }

    async fn ci_status(&self, sha: &str) -> ForgeResult<CiStatus> {
        let mut checks = self.check_run_list(sha).await?;
        let action = format!("read the commit statuses of {sha}");
        let call = self.call(
            Method::GET,
            &format!("/commits/{}/status?per_page=100", percent(sha)),
            action.clone(),
            Access::StatusesRead,
        );
        let combined: WireCombinedStatus = self.send_ok(&call).await?.json(&action)?;
        for status in combined.statuses {
            checks.push(Check::try_from(status).map_err(|e| bad_shape(&action, e))?);
        }
        Ok(fold_ci(&checks))
    }

    async fn check_runs(&self, sha: &str) -> ForgeResult<CiStatus> {
        Ok(fold_ci(&self.check_run_list(sha).await?))
    }

    async fn start_workflow(&self, workflow: &str, branch: &str) -> ForgeResult<()> {
        let action = format!("start workflow `{workflow}` on `{branch}` in {}", self.settings.repo);
        let rest = format!("/actions/workflows/{}/dispatches", percent(workflow));
        let mut call = self.call(Method::POST, &rest, action, Access::ActionsWrite);
        call.body = Some(json!({ "ref": branch }));
        self.send_ok(&call).await.map(drop)
    }

    async fn merge_pull_request(&self, pull: u64, head_sha: &str) -> ForgeResult<()> {
        let action = format!("squash-merge pull request #{pull} of {} at {head_sha}", self.settings.repo);
        let mut call = self.call(Method::PUT, &format!("/pulls/{pull}/merge"), action, Access::ContentsWrite);
        // `sha`: GitHub refuses (409) when the head moved since the audit.
        call.body = Some(json!({ "merge_method": "squash", "sha": head_sha }));
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => Ok(()),
            // "Head branch was modified. Review and try the merge again."
            409 => Err(ForgeError::HeadMoved { pull, audited: head_sha.to_string() }),
            // A base branch whose rules ask for the merge queue takes no direct merge.
            405 if reply.message().contains("merge queue") => Err(ForgeError::Api {
                action: call.action.clone(),
                status: 405,
                message: format!(
                    "{}; the base branch has GitHub's merge queue, and this read did not see it (run again: \
                     discharge enqueues when the audit's read says so)",
                    reply.message()
                ),
            }),
            // What GitHub answers for a pull request that conflicts with its
            // base (and for one already closed, which the caller tells apart).
            405 if reply.message().contains("not mergeable") => Err(ForgeError::MergeConflict {
                pull,
                files: Vec::new(),
                message: format!("could not {}: GitHub answered 405: {}", call.action, reply.message()),
            }),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    fn offers_merge_queue(&self) -> bool {
        true
    }

    /// ward-queue.yml runs ward's queue where the base has no queue of GitHub's.
    fn runs_merge_queue(&self) -> bool {
        true
    }

    async fn dispatch_merge_queue(&self) -> ForgeResult<()> {
        let action = format!("dispatch `{QUEUE_EVENT}` (ward's merge queue) in {}", self.settings.repo);
        let mut call = self.call(Method::POST, "/dispatches", action, Access::ContentsWrite);
        call.body = Some(json!({ "event_type": QUEUE_EVENT }));
        self.send_ok(&call).await.map(drop)
    }

    async fn branch_tip(&self, branch: &str) -> ForgeResult<Option<String>> {
        #[derive(serde::Deserialize)]
        struct Ref {
            object: Object,
        }
        #[derive(serde::Deserialize)]
        struct Object {
            sha: String,
        }
        let action = format!("read the tip of branch `{branch}` in {}", self.settings.repo);
        let call = self.call(Method::GET, &format!("/git/ref/heads/{branch}"), action.clone(), Access::ContentsRead);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => Ok(Some(reply.json::<Ref>(&action)?.object.sha)),
            404 => Ok(None),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    async fn branch_commits(&self, branch: &str, limit: usize) -> ForgeResult<Vec<super::BranchCommit>> {
        #[derive(serde::Deserialize)]
        struct Item {
            sha: String,
            commit: Detail,
        }
        #[derive(serde::Deserialize)]
        struct Detail {
            message: String,
            committer: Option<Who>,
        }
        #[derive(serde::Deserialize)]
        struct Who {
            date: Option<chrono::DateTime<chrono::Utc>>,
        }
        let action = format!("read the history of branch `{branch}` in {}", self.settings.repo);
        let per_page = limit.clamp(1, 100);
        let rest = format!("/commits?sha={}&per_page={per_page}", percent(branch));
        let call = self.call(Method::GET, &rest, action.clone(), Access::ContentsRead);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => {}
            // No such branch (GitHub answers 404, or 409 for an empty repository).
            404 | 409 => return Ok(Vec::new()),
            _ => return Err(self.refusal(&call, &reply)),
        }
        let items: Vec<Item> = reply.json(&action)?;
        Ok(items
            .into_iter()
            .take(limit)
            .map(|i| super::BranchCommit {
                sha: i.sha,
                message: i.commit.message,
                at: i.commit.committer.and_then(|c| c.date).unwrap_or_default(),
            })
            .collect())
    }

    async fn enqueue_pull_request(&self, pull: u64, queue: &ForgeQueue, head_sha: &str) -> ForgeResult<()> {
        self.enqueue(pull, &queue.pull_id, head_sha).await
    }

    async fn branch_merge_queue(&self, branch: &str) -> ForgeResult<Option<MergeQueueRule>> {
        self.merge_queue_rule(branch).await
    }

    async fn post_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<u64> {
        let action = format!("comment on {number}");
        let mut call =
            self.call(Method::POST, &format!("/issues/{}/comments", number.0), action.clone(), Access::IssuesWrite);
        call.body = Some(json!({ "body": body }));
        #[derive(serde::Deserialize)]
        struct Created {
            id: u64,
        }
        Ok(self.send_ok(&call).await?.json::<Created>(&action)?.id)
    }

    async fn edit_comment(&self, number: IssueNumber, id: u64, body: &str) -> ForgeResult<()> {
        let action = format!("edit comment {id} on {number}");
        let mut call = self.call(Method::PATCH, &format!("/issues/comments/{id}"), action, Access::IssuesWrite);
        call.body = Some(json!({ "body": body }));
        self.send_ok(&call).await.map(drop)
    }

    async fn request_reviewers(&self, pull: u64, users: &[String], teams: &[String]) -> ForgeResult<()> {
        let action = format!("request reviews of pull request #{pull} in {}", self.settings.repo);
        let rest = format!("/pulls/{pull}/requested_reviewers");
        let mut call = self.call(Method::POST, &rest, action, Access::PullsWrite);
        call.body = Some(json!({ "reviewers": users, "team_reviewers": teams }));
        self.send_ok(&call).await.map(drop)
    }

    async fn react(&self, number: IssueNumber, id: u64, reaction: Reaction) -> ForgeResult<()> {
        let action = format!("react `{}` to comment {id} on {number}", reaction.content());
        let rest = format!("/issues/comments/{id}/reactions");
        let mut call = self.call(Method::POST, &rest, action, Access::IssuesWrite);
        call.body = Some(json!({ "content": reaction.content() }));
        self.send_ok(&call).await.map(drop)
    }
}

/// `sender.login` of the event file the runner wrote (`GITHUB_EVENT_PATH`).
fn event_sender() -> Option<String> {
    let path = std::env::var_os("GITHUB_EVENT_PATH")?;
    let text = std::fs::read_to_string(path).ok()?;
    let event: serde_json::Value = serde_json::from_str(&text).ok()?;
    event["sender"]["login"].as_str().filter(|l| !l.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::transport::link;
    use super::*;
    use crate::forge::CiState;

    #[test]
    fn repository_names_are_validated() {
        assert_eq!("octo/hello".parse::<RepoName>().unwrap().to_string(), "octo/hello");
        for bad in ["", "octo", "octo/", "/x", "a/b/c", "a b/c"] {
            assert!(bad.parse::<RepoName>().is_err(), "{bad}");
        }
    }

    #[test]
    fn next_links_are_found() {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::LINK,
            "<https://api.github.com/x?page=2>; rel=\"next\", <https://api.github.com/x?page=5>; rel=\"last\""
                .parse()
                .unwrap(),
        );
        assert_eq!(link(&h, "next").as_deref(), Some("https://api.github.com/x?page=2"));
        assert_eq!(link(&h, "last").as_deref(), Some("https://api.github.com/x?page=5"));
        h.insert(http::header::LINK, "<https://api.github.com/x?page=1>; rel=\"prev\"".parse().unwrap());
        assert_eq!(link(&h, "next"), None);
    }

    #[test]
    fn ci_folds_failures_over_pending_over_success() {
        let c = |state, name: &str| Check { name: name.into(), state, detail: "x".into(), ..Check::default() };
        assert_eq!(fold_ci(&[]).state, CiState::Missing);
        assert_eq!(fold_ci(&[c(CiState::Success, "a")]).state, CiState::Success);
        assert_eq!(fold_ci(&[c(CiState::Success, "a"), c(CiState::Pending, "b")]).state, CiState::Pending);
        assert_eq!(fold_ci(&[c(CiState::Pending, "a"), c(CiState::Failure, "b")]).state, CiState::Failure);
    }

    #[test]
    fn permissions_prefer_the_role_name() {
        let p = |permission: &str, role: Option<&str>| {
            Permission::try_from(WirePermission { permission: permission.into(), role_name: role.map(Into::into) })
        };
        assert_eq!(p("read", Some("triage")), Ok(Permission::Triage));
        assert_eq!(p("write", Some("maintain")), Ok(Permission::Maintain));
        assert_eq!(p("write", Some("custom-role")), Ok(Permission::Write));
        assert_eq!(p("none", None), Ok(Permission::None));
        assert!(p("weird", None).is_err());
    }

    #[test]
    fn chart_contents_decode_and_refuse_non_files() {
        let wire = |kind: &str, content: &str| WireContent {
            kind: kind.parse().expect("a known note kind"),
            sha: "abc".into(),
            content: Some(content.into()),
            encoding: Some("base64".into()),
        };
        let chart = StoredChart::try_from(wire("file", "aGVs\nbG8=\n")).unwrap();
        assert_eq!((chart.text.as_str(), chart.version.as_str()), ("hello", "abc"));
        assert!(StoredChart::try_from(wire("dir", "")).is_err());
        assert!(StoredChart::try_from(wire("file", "%%%")).is_err());
    }

    #[tokio::test]
    async fn next_pages_stay_on_the_api_host() {
        let settings = |api_url: &str| GitHubSettings {
            api_url: api_url.into(),
            graphql_url: graphql_url_for(api_url),
            repo: "o/r".parse().unwrap(),
            charts_branch: "ward-charts".into(),
            engine_account: "bot".into(),
        };
        let forge = GitHubForge::new(settings("https://api.github.com"), "t").unwrap();
        assert_eq!(forge.same_host_path("https://api.github.com/x?page=2", "a").unwrap(), "/x?page=2");
        assert!(forge.same_host_path("https://evil.example/x?page=2", "a").is_err(), "the token stays home");
        assert!(forge.same_host_path("http://api.github.com/x", "a").is_err(), "no downgrade to http");
        let ghes = GitHubForge::new(settings("https://ghe.example/api/v3"), "t").unwrap();
        assert_eq!(
            ghes.same_host_path("https://ghe.example/api/v3/repos/o/r?page=2", "a").unwrap(),
            "/repos/o/r?page=2"
        );
    }

    #[tokio::test]
    async fn the_pages_between_next_and_last_are_asked_for_by_number() {
        let forge = GitHubForge::new(
            GitHubSettings {
                api_url: "https://api.github.com".into(),
                graphql_url: "https://api.github.com/graphql".into(),
                repo: "o/r".parse().unwrap(),
                charts_branch: "ward-charts".into(),
                engine_account: "bot".into(),
            },
            "t",
        )
        .unwrap();
        let first = Call {
            method: Method::GET,
            path: "/repos/o/r/issues?per_page=100".into(),
            body: None,
            action: "list".into(),
            access: Access::IssuesRead,
        };
        let base = "https://api.github.com/repos/o/r/issues";
        let pages = |next: &str, last: &str| {
            let calls = forge.numbered_pages(&first, Some(next), Some(last));
            calls.map(|calls| calls.map(|calls| calls.into_iter().map(|c| c.path).collect::<Vec<_>>()))
        };
        assert_eq!(
            pages(&format!("{base}?labels=x&page=2&per_page=100"), &format!("{base}?labels=x&page=4&per_page=100"))
                .unwrap(),
            Some(vec![
                "/repos/o/r/issues?labels=x&page=2&per_page=100".to_string(),
                "/repos/o/r/issues?labels=x&page=3&per_page=100".to_string(),
                "/repos/o/r/issues?labels=x&page=4&per_page=100".to_string(),
            ])
        );
        let one_more = pages(&format!("{base}?per_page=100&page=2"), &format!("{base}?per_page=100&page=2"));
        assert_eq!(one_more.unwrap().unwrap().len(), 1);
        // A cursor, or links that differ beyond the page: one by one.
        assert_eq!(pages(&format!("{base}?after=Y3Vy"), &format!("{base}?before=Y3Vy")).unwrap(), None);
        assert_eq!(pages(&format!("{base}?page=2&labels=x"), &format!("{base}?page=9&labels=y")).unwrap(), None);
        assert!(forge.numbered_pages(&first, Some(&format!("{base}?page=2")), None).unwrap().is_none());
        // More pages than one by one would follow (50): refused up front.
        let err = pages(&format!("{base}?page=2"), &format!("{base}?page=51")).unwrap_err();
        assert!(err.to_string().contains("more than 50 pages; narrow the query"), "{err}");
        assert_eq!(pages(&format!("{base}?page=2"), &format!("{base}?page=50")).unwrap().unwrap().len(), 49);
        // The token stays home: a last page elsewhere is refused.
        let elsewhere = pages(&format!("{base}?page=2"), "https://evil.example/repos/o/r/issues?page=9");
        assert!(elsewhere.is_err(), "{elsewhere:?}");
    }

    #[test]
    fn help_names_the_permission() {
        assert_eq!(
            Access::IssuesWrite.help(),
            "the token cannot write issues: give the workflow `issues: write` (or the app token that permission)"
        );
    }
}
