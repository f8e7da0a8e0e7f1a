//! The fake's state, what it logs, the faults it can inject, the simulated
//! clock, the tokens and their permissions, and the helpers through which
//! people (and CI apps) act in a test.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::git::{self, BareRepo};
use super::{ENGINE, OWNER, REPO, TOKEN};

#[derive(Debug, Clone)]
pub struct FakeIssue {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub open: bool,
    pub labels: Vec<String>,
    pub created_at: String,
    pub closed_at: Option<String>,
    /// Who closed it (GitHub's `closed_by`), while it is closed.
    pub closed_by: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FakeLabel {
    pub id: u64,
    pub name: String,
    pub color: String,
    pub description: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FakeLabelEvent {
    pub id: u64,
    pub issue: u64,
    pub labeled: bool,
    pub label: String,
    pub actor: String,
    pub at: String,
}

#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: u64,
    pub issue: u64,
    pub author: String,
    pub body: String,
    pub at: String,
}

/// A review comment: it opens a review thread.
#[derive(Debug, Clone)]
pub struct FakeReviewComment {
    pub id: u64,
    pub path: String,
    pub line: u32,
    pub body: String,
}

#[derive(Debug, Clone)]
pub struct FakeReview {
    pub id: u64,
    pub author: String,
    /// APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED.
    pub state: String,
    pub commit: String,
    pub body: String,
    pub submitted_at: String,
    pub comments: Vec<FakeReviewComment>,
}

#[derive(Debug, Clone)]
pub struct FakePull {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub head: String,
    /// The head branch's commit, as last pushed (it stays after a merge).
    pub head_sha: String,
    pub base: String,
    pub open: bool,
    pub merged: bool,
    pub merge_method: Option<String>,
    pub merge_commit: Option<String>,
    pub merged_by: Option<String>,
    pub created_at: String,
    pub closed_at: Option<String>,
    pub reviews: Vec<FakeReview>,
    /// One entry per review thread: resolved or not.
    pub threads: Vec<bool>,
    /// Its labels: a pull request is an issue too (`/issues/{n}/labels`).
    pub labels: Vec<String>,
}

/// A check run: a job of an Actions workflow run (app `github-actions`) or
/// a check an app reported (a CI service).
#[derive(Debug, Clone)]
pub struct FakeCheckRun {
    pub id: u64,
    pub suite: u64,
    pub app: String,
    pub name: String,
    pub head_sha: String,
    /// queued, in_progress, completed.
    pub status: String,
    pub conclusion: Option<String>,
    pub html_url: String,
    /// Actions jobs have no output title or summary (GitHub answers null);
    /// an app may set them.
    pub title: Option<String>,
    pub summary: Option<String>,
    pub annotations: usize,
    pub started_at: String,
    pub completed_at: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FakeCheckSuite {
    pub id: u64,
    pub app: String,
    pub head_sha: String,
    pub head_branch: Option<String>,
    pub status: String,
    pub conclusion: Option<String>,
}

/// One webhook delivery: what GitHub tells Actions (and apps) happened.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: u64,
    /// `issues`, `push`, `pull_request`, ... (`$GITHUB_EVENT_NAME`).
    pub event: String,
    /// Shaped like GitHub's (`$GITHUB_EVENT_PATH`).
    pub payload: Value,
    /// The login that caused it (`sender.login`).
    pub sender: String,
    /// Caused by a workflow's `GITHUB_TOKEN` (or by Actions' own check
    /// runs): such a delivery starts no workflow, except
    /// `workflow_dispatch` and `repository_dispatch`.
    pub by_workflow_token: bool,
    pub at: DateTime<Utc>,
}

impl Delivery {
    pub fn action(&self) -> Option<&str> {
        self.payload.get("action").and_then(Value::as_str)
    }
}

/// A permission level of a token scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    None,
    Read,
    Write,
}

/// What a token may do, per scope, named the way a workflow's
/// `permissions:` names them (`contents`, `issues`, `pull-requests`, ...).
/// `metadata: read` is always granted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Permissions(pub BTreeMap<String, Level>);

impl Permissions {
    /// The scopes a workflow's `permissions:` may name.
    pub const SCOPES: &'static [&'static str] = &[
        "actions",
        "attestations",
        "checks",
        "contents",
        "deployments",
        "discussions",
        "id-token",
        "issues",
        "models",
        "packages",
        "pages",
        "pull-requests",
        "repository-projects",
        "security-events",
        "statuses",
    ];

    /// Nothing but metadata (`permissions: {}`).
    pub fn none() -> Self {
        Self::default()
    }

    /// Every scope at `write` (`permissions: write-all`).
    pub fn write_all() -> Self {
        Self(Self::SCOPES.iter().map(|s| (s.to_string(), Level::Write)).collect())
    }

    /// Every scope at `read` (`permissions: read-all`).
    pub fn read_all() -> Self {
        Self(Self::SCOPES.iter().map(|s| (s.to_string(), Level::Read)).collect())
    }

    /// `[("contents", "write"), ("issues", "read")]`.
    pub fn of(pairs: &[(&str, &str)]) -> Self {
        let mut p = Self::none();
        for (scope, level) in pairs {
            p.0.insert(normalize_scope(scope), parse_level(level).unwrap_or_else(|| panic!("level `{level}`")));
        }
        p
    }

    pub fn level(&self, scope: &str) -> Level {
        let scope = normalize_scope(scope);
        if scope == "metadata" {
            return Level::Read;
        }
        self.0.get(&scope).copied().unwrap_or(Level::None)
    }

    pub fn allows(&self, scope: &str, write: bool) -> bool {
        self.level(scope) >= if write { Level::Write } else { Level::Read }
    }
}

/// `pull_requests` (app style) and `pull-requests` (workflow style) are one scope.
pub fn normalize_scope(scope: &str) -> String {
    scope.trim().to_lowercase().replace('_', "-")
}

pub fn parse_level(level: &str) -> Option<Level> {
    match level.trim() {
        "none" => Some(Level::None),
        "read" => Some(Level::Read),
        "write" => Some(Level::Write),
        _ => None,
    }
}

/// A token the fake accepts.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The login it acts as (`github-actions[bot]`, `ward-app[bot]`).
    pub login: String,
    pub permissions: Permissions,
    /// A workflow's `GITHUB_TOKEN`: what it causes starts no workflow.
    pub workflow_token: bool,
    /// GitHub revokes a job's token when the job ends.
    pub revoked: bool,
}

/// One request and its answer, for counts and conformance.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    /// The OpenAPI path template, e.g. `/repos/{owner}/{repo}/issues/{issue_number}`.
    pub route: String,
    pub path: String,
    pub status: u16,
    pub request: Option<Value>,
    pub response: Option<Value>,
    /// True when the answer came from an injected fault.
    pub fault: bool,
}

impl Exchange {
    /// `METHOD /template`, the key of call counts.
    pub fn key(&self) -> String {
        format!("{} {}", self.method, self.route)
    }
}

/// One request to the git server (smart HTTP), kept apart from the API's
/// log so API call counts stay API call counts.
#[derive(Debug, Clone)]
pub struct GitExchange {
    pub method: String,
    pub path: String,
    pub login: Option<String>,
    pub status: u16,
    /// What git printed on stderr (a refused push says why here).
    pub stderr: String,
}

#[derive(Debug, Clone)]
pub enum FaultKind {
    /// Answer with this status (a 5xx, 409, ...) and a GitHub-style body.
    Status(u16),
    /// 403 (secondary rate limit) with `Retry-After: secs`.
    RetryAfter403(u64),
    /// 403 "secondary rate limit" without any header saying how long.
    SecondaryLimit403,
    /// 429 with `Retry-After: secs`.
    TooMany(u64),
    /// 403 with `x-ratelimit-remaining: 0` and a reset `secs` from now.
    RateLimitExhausted(u64),
    /// The request takes effect, but its answer is lost: the client sees
    /// this status (a 502 from a proxy, say) instead.
    LostAnswer(u16),
    /// Before handling the request, another writer replaces the file at
    /// the request's path on `branch` with `text` (its sha changes), so the
    /// request meets a real conflict.
    ConcurrentWrite { branch: String, text: String },
    /// 422 "sha wasn't supplied": a contents write without a sha met a
    /// file another writer created first.
    ShaMissing422,
}

#[derive(Debug, Clone)]
pub struct Fault {
    /// `METHOD /template` the fault applies to.
    pub route: String,
    /// Let this many matching requests through first.
    pub after: usize,
    /// Then fault this many.
    pub times: usize,
    pub kind: FaultKind,
    seen: usize,
}

impl Fault {
    pub fn new(route: &str, after: usize, times: usize, kind: FaultKind) -> Self {
        Self { route: route.into(), after, times, kind, seen: 0 }
    }

    /// True when this request should get the fault.
    pub(super) fn fires(&mut self, key: &str) -> bool {
        if self.route != key {
            return false;
        }
        self.seen += 1;
        self.seen > self.after && self.seen <= self.after + self.times
    }
}

/// Where the simulated clock starts: every timestamp the fake gives comes
/// from it, and only [`State::advance`] (and one second per recorded
/// event, so events stay ordered) moves it.
pub const EPOCH: &str = "2026-11-29T12:00:00Z";

pub struct State {
    pub base_url: String,
    pub owner: String,
    pub repo: String,
    /// False: every repository route answers 404, as for a missing repo.
    pub repo_exists: bool,
    /// Answer as GitHub Enterprise Server does: REST under `/api/v3`,
    /// GraphQL at `/api/graphql` and nowhere else (404 elsewhere).
    pub enterprise: bool,
    /// The test's default token: acts as [`ENGINE`] with every permission.
    pub token: String,
    /// The login the default token acts as.
    pub token_login: String,
    /// False: every write answers 403 "Resource not accessible by integration".
    pub token_can_write: bool,
    /// Every token the fake accepts, the default one included.
    pub tokens: BTreeMap<String, Grant>,
    /// The repository setting "Allow GitHub Actions to create and approve
    /// pull requests", off as on a new repository: a workflow token's
    /// `POST /pulls` answers 403.
    pub actions_can_create_pull_requests: bool,
    /// The simulated clock.
    pub clock: DateTime<Utc>,
    pub issues: BTreeMap<u64, FakeIssue>,
    pub labels: BTreeMap<String, FakeLabel>,
    pub label_events: Vec<FakeLabelEvent>,
    pub comments: Vec<FakeComment>,
    /// Reactions on issue comments: (comment id, login, content).
    pub reactions: Vec<(u64, String, String)>,
    /// Review requests: (pull request, login or `team:<slug>`).
    pub review_requests: Vec<(u64, String)>,
    /// The repository (branches, files, commits): a real bare repository.
    pub git: BareRepo,
    /// Bodies of POST /dispatches, in order.
    pub dispatches: Vec<Value>,
    /// Users GitHub knows; the rest get 404 on permission lookups.
    pub users: BTreeSet<String>,
    /// Collaborators: login -> role name (read, triage, write, maintain, admin).
    pub collaborators: BTreeMap<String, String>,
    pub pulls: BTreeMap<u64, FakePull>,
    pub check_suites: Vec<FakeCheckSuite>,
    pub check_runs: Vec<FakeCheckRun>,
    /// sha -> (context, state), the latest per context.
    pub statuses: BTreeMap<String, Vec<(String, String)>>,
    /// Releases of any repository (releases.rs).
    pub releases: super::releases::Releases,
    /// Every webhook delivery, in order (the runner reads them).
    pub deliveries: Vec<Delivery>,
    /// Actions settings and the token's missing permissions (settings.rs).
    pub settings: super::settings::Settings,
    pub log: Vec<Exchange>,
    pub git_log: Vec<GitExchange>,
    pub unknown: Vec<String>,
    pub faults: Vec<Fault>,
    /// A seeded fault schedule over every API request (schedule.rs).
    pub schedule: Option<super::schedule::Schedule>,
    /// How far the search index lags behind writes (search.rs); zero: none.
    pub search_lag: chrono::Duration,
    /// Every API answer comes this late (a real delay, as over a network).
    pub latency: std::time::Duration,
    /// API requests being answered now, and the most there ever were at once.
    pub in_flight: usize,
    pub peak_in_flight: usize,
    pub(super) next_id: u64,
    /// The path of the request being answered (for `Link` headers).
    pub(super) current_path: String,
    /// The login of the request being answered (who a write is by).
    pub(super) actor: String,
    /// Set while a workflow token's request is answered.
    pub(super) workflow_actor: Option<String>,
    /// The grant of the request being answered (GraphQL checks it per field).
    pub(super) current_grant: Option<Grant>,
    /// Branch and tag heads the fake has announced (push events).
    pub(super) known_refs: BTreeMap<String, String>,
    /// Branches with a merge queue rule: the checks a merge group needs (merge_queue.rs).
    pub merge_queues: BTreeMap<String, Vec<String>>,
    /// The pull requests in a merge queue, oldest first.
    pub merge_groups: Vec<super::merge_queue::FakeMergeGroup>,
}

impl State {
    pub fn new(base_url: &str) -> Self {
        let clock = DateTime::parse_from_rfc3339(EPOCH).expect("valid time").with_timezone(&Utc);
        let git = BareRepo::create(OWNER, REPO, clock.timestamp());
        let known_refs = git.refs();
        let default =
            Grant { login: ENGINE.into(), permissions: Permissions::write_all(), workflow_token: true, revoked: false };
        Self {
            base_url: base_url.into(),
            owner: OWNER.into(),
            repo: REPO.into(),
            repo_exists: true,
            enterprise: false,
            token: TOKEN.into(),
            token_login: ENGINE.into(),
            token_can_write: true,
            tokens: [(TOKEN.to_string(), default)].into_iter().collect(),
            actions_can_create_pull_requests: false,
            clock,
            issues: BTreeMap::new(),
            labels: BTreeMap::new(),
            label_events: Vec::new(),
            comments: Vec::new(),
            reactions: Vec::new(),
            review_requests: Vec::new(),
            git,
            dispatches: Vec::new(),
            users: [ENGINE.to_string()].into_iter().collect(),
            collaborators: BTreeMap::new(),
            pulls: BTreeMap::new(),
            check_suites: Vec::new(),
            check_runs: Vec::new(),
            statuses: BTreeMap::new(),
            releases: Default::default(),
            deliveries: Vec::new(),
            settings: Default::default(),
            log: Vec::new(),
            git_log: Vec::new(),
            unknown: Vec::new(),
            faults: Vec::new(),
            schedule: None,
            search_lag: chrono::Duration::zero(),
            latency: std::time::Duration::ZERO,
            in_flight: 0,
            peak_in_flight: 0,
            next_id: 1000,
            current_path: String::new(),
            actor: ENGINE.into(),
            workflow_actor: None,
            known_refs,
            current_grant: None,
            merge_queues: BTreeMap::new(),
            merge_groups: Vec::new(),
        }
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // -- the simulated clock --------------------------------------------------

    /// The time of a recorded event: the clock, moved on one second so
    /// events stay in order.
    pub(super) fn now(&mut self) -> String {
        self.clock += chrono::Duration::seconds(1);
        stamp(self.clock)
    }

    /// The simulated time, unchanged.
    pub fn time(&self) -> DateTime<Utc> {
        self.clock
    }

    pub fn advance(&mut self, by: std::time::Duration) {
        self.clock += chrono::Duration::from_std(by).expect("a representable duration");
    }

    /// Moves the clock to `at` (never backwards).
    pub fn advance_to(&mut self, at: DateTime<Utc>) {
        self.clock = self.clock.max(at);
    }

    // -- tokens -----------------------------------------------------------------

    /// A new token acting as `login` with `permissions`. `workflow_token`:
    /// it is a workflow's `GITHUB_TOKEN` (what it causes starts no workflow).
    pub fn mint_token(&mut self, login: &str, permissions: Permissions, workflow_token: bool) -> String {
        let token = format!("ghs_{:036}", self.id());
        self.users.insert(login.into());
        self.tokens.insert(token.clone(), Grant { login: login.into(), permissions, workflow_token, revoked: false });
        token
    }

    /// An installation token of a GitHub App (`ward-app[bot]`): what it
    /// causes starts workflows like a person's actions do.
    pub fn app_token(&mut self, login: &str, permissions: Permissions) -> String {
        self.mint_token(login, permissions, false)
    }

    /// Makes `token` the test's default token (the old one no longer works).
    pub fn replace_default_token(&mut self, token: &str) {
        let grant = self.tokens.remove(&self.token).expect("the default token is issued");
        self.tokens.insert(token.into(), grant);
        self.token = token.into();
    }

    pub fn revoke(&mut self, token: &str) {
        if let Some(g) = self.tokens.get_mut(token) {
            g.revoked = true;
        }
    }

    // -- deliveries ---------------------------------------------------------------

    /// Records a webhook delivery caused by `sender`.
    pub(super) fn deliver(&mut self, event: &str, payload: Value, sender: &str) {
        let by_workflow_token = self.workflow_actor.as_deref() == Some(sender);
        self.deliver_as(event, payload, sender, by_workflow_token);
    }

    pub(super) fn deliver_as(&mut self, event: &str, mut payload: Value, sender: &str, by_workflow_token: bool) {
        payload["sender"] = self.user_json(sender);
        if payload.get("repository").is_none() {
            payload["repository"] = self.repository_webhook_json();
        }
        let id = self.id();
        let at = self.clock;
        self.deliveries.push(Delivery {
            id,
            event: event.into(),
            payload,
            sender: sender.into(),
            by_workflow_token,
            at,
        });
    }

    // -- issues and labels ------------------------------------------------------

    /// Opens an issue as `author`, with labels applied by `author`.
    pub fn add_issue(&mut self, title: &str, body: &str, author: &str, labels: &[&str]) -> u64 {
        let number = self.issues.keys().chain(self.pulls.keys()).max().copied().unwrap_or(0) + 1;
        self.users.insert(author.into());
        // Not a tick: label events alone move the clock, a second each.
        let created_at = stamp(self.clock);
        self.issues.insert(
            number,
            FakeIssue {
                number,
                title: title.into(),
                body: body.into(),
                author: author.into(),
                open: true,
                labels: Vec::new(),
                created_at,
                closed_at: None,
                closed_by: None,
            },
        );
        let payload = self.issue_payload("opened", number, None);
        self.deliver("issues", payload, author);
        let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        self.apply_labels(number, &labels, author);
        number
    }

    /// Replaces the labels of an issue as `actor`, recording label events
    /// (and their deliveries) and creating unknown labels the way GitHub
    /// does (grey, no description).
    pub fn apply_labels(&mut self, number: u64, labels: &[String], actor: &str) {
        let before = self.issues.get(&number).map(|i| i.labels.clone()).unwrap_or_default();
        let mut after: Vec<String> = Vec::new();
        for l in labels {
            if !after.iter().any(|a| a.eq_ignore_ascii_case(l)) {
                after.push(self.label_named(l));
            }
        }
        let removed: Vec<String> = before.iter().filter(|l| !after.contains(l)).cloned().collect();
        let added: Vec<String> = after.iter().filter(|l| !before.contains(l)).cloned().collect();
        if let Some(issue) = self.issues.get_mut(&number) {
            issue.labels = after;
        }
        for l in removed {
            self.record_label_event(number, false, &l, actor);
        }
        for l in added {
            self.record_label_event(number, true, &l, actor);
        }
    }

    /// A person adds one label, as the label menu does (GitHub lets only
    /// people with triage access or more apply labels).
    pub fn label(&mut self, number: u64, label: &str, by: &str) {
        self.assert_may_label(by);
        let mut labels = self.labels_of(number);
        labels.push(label.into());
        self.apply_labels(number, &labels, by);
    }

    /// A person removes one label.
    pub fn unlabel(&mut self, number: u64, label: &str, by: &str) {
        self.assert_may_label(by);
        let labels: Vec<String> =
            self.labels_of(number).into_iter().filter(|l| !l.eq_ignore_ascii_case(label)).collect();
        self.apply_labels(number, &labels, by);
    }

    fn assert_may_label(&self, by: &str) {
        let role = self.collaborators.get(by).map(String::as_str);
        assert!(
            matches!(role, Some("triage" | "write" | "maintain" | "admin")),
            "GitHub does not let @{by} ({}) apply labels: that needs triage access",
            role.unwrap_or("no access")
        );
    }

    fn record_label_event(&mut self, issue: u64, labeled: bool, label: &str, actor: &str) {
        let (id, at) = (self.id(), self.now());
        self.label_events.push(FakeLabelEvent { id, issue, labeled, label: label.into(), actor: actor.into(), at });
        let action = if labeled { "labeled" } else { "unlabeled" };
        let payload = self.issue_payload(action, issue, Some(label));
        self.deliver("issues", payload, actor);
    }

    /// The label's canonical name, creating it if GitHub would.
    pub fn label_named(&mut self, name: &str) -> String {
        if let Some(existing) = self.labels.values().find(|l| l.name.eq_ignore_ascii_case(name)) {
            return existing.name.clone();
        }
        let id = self.id();
        self.labels.insert(
            name.to_lowercase(),
            FakeLabel { id, name: name.into(), color: "ededed".into(), description: None },
        );
        name.into()
    }

    /// A person comments on an issue (or pull request); the repository is
    /// private, so only its collaborators can.
    pub fn comment(&mut self, number: u64, body: &str, by: &str) -> u64 {
        assert!(self.collaborators.contains_key(by), "@{by} cannot see the private repository to comment");
        self.add_comment(number, body, by)
    }

    /// A comment by `by`, whoever that is (the API's path).
    pub(super) fn add_comment(&mut self, number: u64, body: &str, by: &str) -> u64 {
        assert!(self.issues.contains_key(&number) || self.pulls.contains_key(&number), "no issue #{number}");
        self.users.insert(by.into());
        let (id, at) = (self.id(), self.now());
        let c = FakeComment { id, issue: number, author: by.into(), body: body.into(), at };
        self.comments.push(c);
        let payload = self.comment_payload(id);
        self.deliver("issue_comment", payload, by);
        id
    }

    /// The reactions on comment `id`: (login, content).
    pub fn reactions_on(&self, id: u64) -> Vec<(String, String)> {
        self.reactions.iter().filter(|(c, _, _)| *c == id).map(|(_, who, what)| (who.clone(), what.clone())).collect()
    }

    /// `by` closes the issue.
    pub fn close(&mut self, number: u64, by: &str) {
        let at = self.now();
        if let Some(i) = self.issues.get_mut(&number)
            && i.open
        {
            i.open = false;
            i.closed_at = Some(at);
            i.closed_by = Some(by.to_string());
            let payload = self.issue_payload("closed", number, None);
            self.deliver("issues", payload, by);
        }
    }

    pub fn add_collaborator(&mut self, login: &str, role: &str) {
        assert!(["read", "triage", "write", "maintain", "admin"].contains(&role), "`{role}` is not a repository role");
        self.users.insert(login.into());
        self.collaborators.insert(login.into(), role.into());
    }

    /// True when `login` may push (write, maintain, admin).
    pub fn can_write(&self, login: &str) -> bool {
        matches!(self.collaborators.get(login).map(String::as_str), Some("write" | "maintain" | "admin"))
    }

    pub fn issue(&self, number: u64) -> &FakeIssue {
        self.issues.get(&number).unwrap_or_else(|| panic!("the fake has no issue #{number}"))
    }

    pub fn labels_of(&self, number: u64) -> Vec<String> {
        self.issue(number).labels.clone()
    }

    pub fn comments_on(&self, number: u64) -> Vec<String> {
        self.comments.iter().filter(|c| c.issue == number).map(|c| c.body.clone()).collect()
    }

    // -- the repository -----------------------------------------------------------

    /// The text of a file on a branch (or at a commit), if there.
    pub fn file(&self, rev: &str, path: &str) -> Option<String> {
        let (bytes, _) = self.git.read_file(rev, path)?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A branch's files: path -> blob sha.
    pub fn branch_files(&self, branch: &str) -> BTreeMap<String, String> {
        self.git.files(branch)
    }

    pub fn branch_head(&self, branch: &str) -> Option<String> {
        self.git.branch_head(branch)
    }

    /// Another writer commits a file (its push is delivered, by the
    /// repository's owner).
    pub fn put_file(&mut self, branch: &str, path: &str, text: &str) {
        let owner = self.owner.clone();
        self.commit_files(branch, &[(path, text)], "Update from elsewhere", &owner);
    }

    /// Another writer removes a file (its push is delivered).
    pub fn remove_file(&mut self, branch: &str, path: &str) {
        let (owner, at) = (self.owner.clone(), self.now_secs());
        self.git.remove_file(branch, path, "Remove from elsewhere", &owner, at).expect("a commit");
        self.sync_refs(&owner);
    }

    /// A branch at the default branch's head, made elsewhere.
    pub fn create_branch(&mut self, name: &str) {
        let main = self.git.branch_head("main").expect("a default branch");
        self.git.set_ref(&format!("refs/heads/{name}"), &main, None).expect("a new branch");
    }

    pub fn delete_branch(&mut self, name: &str) {
        self.git.delete_ref(&format!("refs/heads/{name}"));
    }

    /// `by` commits `files` on `branch` (created from the default branch
    /// when new) and pushes: `push` (and `pull_request` synchronize for an
    /// open pull request of the branch) are delivered. Returns the commit.
    pub fn commit_files(&mut self, branch: &str, files: &[(&str, &str)], message: &str, by: &str) -> String {
        let at = self.now_secs();
        if self.git.branch_head(branch).is_none() {
            let main = self.git.branch_head("main").expect("a default branch");
            self.git.set_ref(&format!("refs/heads/{branch}"), &main, None).expect("a new branch");
        }
        let mut head = String::new();
        for (path, text) in files {
            head = self.git.write_file(branch, path, text.as_bytes(), message, by, at, None).expect("a commit").0;
        }
        self.sync_refs(by);
        head
    }

    /// `by` merges branch `from` into branch `into` (a merge commit with
    /// two parents, as `git merge --no-ff` makes) and pushes it.
    pub fn merge_branch(&mut self, into: &str, from: &str, message: &str, by: &str) -> String {
        let at = self.now_secs();
        let head = self.git.branch_head(from).unwrap_or_else(|| panic!("no branch {from}"));
        let sha = self.git.merge_into(into, &head, false, message, by, at).expect("a clean merge");
        self.sync_refs(by);
        sha
    }

    pub(super) fn now_secs(&mut self) -> i64 {
        self.clock += chrono::Duration::seconds(1);
        self.clock.timestamp()
    }

    // -- pull requests, reviews, checks ---------------------------------------------

    /// `by` opens a pull request from `head` into `base`.
    pub fn open_pull(&mut self, head: &str, base: &str, title: &str, body: &str, by: &str) -> u64 {
        self.users.insert(by.into());
        match self.create_pull_as(head, base, title, body, by) {
            Ok(n) => n,
            Err(e) => panic!("GitHub would refuse this pull request: {e}"),
        }
    }

    pub fn pull(&self, number: u64) -> &FakePull {
        self.pulls.get(&number).unwrap_or_else(|| panic!("the fake has no pull request #{number}"))
    }

    /// The open pull request whose head is `branch`.
    pub fn open_pull_for(&self, branch: &str) -> Option<&FakePull> {
        self.pulls.values().find(|p| p.open && p.head == branch)
    }

    /// `by` submits a review of the pull request's current head:
    /// `APPROVE`, `REQUEST_CHANGES` or `COMMENT`, with a body and review
    /// comments `(path, line, body)` (each opens an unresolved thread).
    /// GitHub's rules: the author may not approve or request changes on
    /// their own pull request; requesting changes or commenting needs a
    /// body or comments; the reviewer must see the (private) repository.
    /// People without write access may review: their reviews exist, they
    /// just don't count for branch protection.
    pub fn review(&mut self, pr: u64, by: &str, event: &str, body: &str, comments: &[(&str, u32, &str)]) -> u64 {
        assert!(self.collaborators.contains_key(by), "@{by} cannot see the private repository to review it");
        let p = self.pull(pr).clone();
        let state = match event {
            "APPROVE" => "APPROVED",
            "REQUEST_CHANGES" => "CHANGES_REQUESTED",
            "COMMENT" => "COMMENTED",
            other => panic!("`{other}` is not a review event (APPROVE, REQUEST_CHANGES, COMMENT)"),
        };
        if p.author == by && state != "COMMENTED" {
            panic!("GitHub answers 422: Can not {} your own pull request", event.to_lowercase().replace('_', " "));
        }
        if state != "APPROVED" && body.trim().is_empty() && comments.is_empty() {
            panic!("GitHub answers 422: a {event} review needs a body");
        }
        let id = self.id();
        let submitted_at = self.now();
        let comments: Vec<FakeReviewComment> = comments
            .iter()
            .map(|(path, line, text)| FakeReviewComment {
                id: self.id(),
                path: path.to_string(),
                line: *line,
                body: text.to_string(),
            })
            .collect();
        let threads = comments.len();
        let pull = self.pulls.get_mut(&pr).unwrap();
        pull.reviews.push(FakeReview {
            id,
            author: by.into(),
            state: state.into(),
            commit: p.head_sha.clone(),
            body: body.into(),
            submitted_at,
            comments,
        });
        pull.threads.extend(std::iter::repeat_n(false, threads));
        let payload = self.review_payload(pr, id);
        self.deliver("pull_request_review", payload, by);
        id
    }

    /// A check suite of `app` for a commit (one per workflow run for Actions).
    pub fn create_check_suite(&mut self, app: &str, head_sha: &str, head_branch: Option<&str>) -> u64 {
        let id = self.id();
        self.check_suites.push(FakeCheckSuite {
            id,
            app: app.into(),
            head_sha: head_sha.into(),
            head_branch: head_branch.map(String::from),
            status: "queued".into(),
            conclusion: None,
        });
        id
    }

    /// A check run starts in `suite`.
    pub fn start_check_run(&mut self, suite: u64, name: &str, html_url: Option<&str>) -> u64 {
        let s = self.check_suites.iter_mut().find(|s| s.id == suite).expect("a check suite").clone();
        let id = self.id();
        let started_at = stamp(self.clock);
        let html_url = html_url
            .map(String::from)
            .unwrap_or_else(|| format!("https://github.com/{}/{}/runs/{id}", self.owner, self.repo));
        self.check_runs.push(FakeCheckRun {
            id,
            suite,
            app: s.app.clone(),
            name: name.into(),
            head_sha: s.head_sha.clone(),
            status: "in_progress".into(),
            conclusion: None,
            html_url,
            title: None,
            summary: None,
            annotations: 0,
            started_at,
            completed_at: None,
        });
        if let Some(s) = self.check_suites.iter_mut().find(|s| s.id == suite) {
            s.status = "in_progress".into();
        }
        self.deliver_check_run("created", id);
        id
    }

    /// A check run completes with `conclusion` (success, failure,
    /// cancelled, skipped, neutral, timed_out, action_required).
    pub fn complete_check_run(
        &mut self,
        id: u64,
        conclusion: &str,
        title: Option<&str>,
        summary: Option<&str>,
        annotations: usize,
    ) {
        let at = stamp(self.clock);
        let run = self.check_runs.iter_mut().find(|r| r.id == id).expect("a check run");
        run.status = "completed".into();
        run.conclusion = Some(conclusion.into());
        run.title = title.map(String::from);
        run.summary = summary.map(String::from);
        run.annotations = annotations;
        run.completed_at = Some(at);
        self.deliver_check_run("completed", id);
        self.settle_merge_groups();
    }

    /// A check suite completes: its conclusion folds its runs', as GitHub's does.
    pub fn complete_check_suite(&mut self, suite: u64) {
        let conclusions: Vec<String> =
            self.check_runs.iter().filter(|r| r.suite == suite).filter_map(|r| r.conclusion.clone()).collect();
        let conclusion = ["action_required", "cancelled", "timed_out", "failure"]
            .iter()
            .find(|c| conclusions.iter().any(|x| x == *c))
            .map(|c| c.to_string())
            .unwrap_or_else(|| if conclusions.iter().all(|c| c == "skipped") { "skipped" } else { "success" }.into());
        let s = self.check_suites.iter_mut().find(|s| s.id == suite).expect("a check suite");
        s.status = "completed".into();
        s.conclusion = Some(conclusion);
        self.deliver_check_suite(suite);
    }

    /// A CI app reports a finished check on a commit, with the output
    /// summary it chose: the check run, its suite, and their deliveries
    /// (from the app, so they start workflows).
    pub fn report_check(&mut self, app: &str, sha: &str, name: &str, conclusion: &str, summary: Option<&str>) -> u64 {
        assert!(self.git.has_object(sha), "no commit {sha} in the repository");
        let branch = self.branch_of(sha);
        let suite = self.create_check_suite(app, sha, branch.as_deref());
        let id = self.start_check_run(suite, name, None);
        self.complete_check_run(id, conclusion, summary.map(|_| name), summary, 0);
        self.complete_check_suite(suite);
        id
    }

    /// A commit status (the statuses API) from `by`: `pending`, `success`,
    /// `failure` or `error`; the latest per context counts.
    pub fn set_status(&mut self, sha: &str, context: &str, state: &str, by: &str) {
        assert!(["pending", "success", "failure", "error"].contains(&state), "`{state}` is no status state");
        let list = self.statuses.entry(sha.into()).or_default();
        list.retain(|(c, _)| c != context);
        list.push((context.into(), state.into()));
        let payload = self.status_payload(sha, context, state);
        self.deliver("status", payload, by);
        self.settle_merge_groups();
    }

    /// A branch whose head is `sha`, if any (check suites name it).
    pub fn branch_of(&self, sha: &str) -> Option<String> {
        self.git
            .refs()
            .into_iter()
            .find(|(_, s)| s == sha)
            .and_then(|(r, _)| r.strip_prefix("refs/heads/").map(String::from))
    }

    // -- the log ----------------------------------------------------------------------

    pub fn inject(&mut self, fault: Fault) {
        self.faults.push(fault);
    }

    /// How many requests reached `METHOD /template`, faults included.
    pub fn count(&self, key: &str) -> usize {
        self.log.iter().filter(|e| e.key() == key).count()
    }

    /// Requests per `METHOD /template`.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in &self.log {
            *m.entry(e.key()).or_default() += 1;
        }
        m
    }

    /// Requests that changed something (not GET).
    pub fn writes(&self) -> usize {
        self.log.iter().filter(|e| e.method != "GET" && !(e.method == "POST" && e.route == "/graphql")).count()
    }

    /// A snapshot of everything observable, to prove "nothing changed".
    pub fn fingerprint(&self) -> String {
        format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.issues.values().map(|i| (&i.labels, i.open)).collect::<Vec<_>>(),
            self.labels.keys().collect::<Vec<_>>(),
            self.label_events.len(),
            self.comments.len(),
            self.git.refs(),
            self.dispatches,
            self.pulls.values().map(|p| (p.open, p.merged)).collect::<Vec<_>>(),
        )
    }
}

/// A time as GitHub writes it.
pub fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The git object id of a blob with these bytes (a file's sha on GitHub).
pub fn blob_sha(bytes: &[u8]) -> String {
    git::blob_sha(bytes)
}
