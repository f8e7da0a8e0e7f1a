//! The fake's state, what it logs, and the faults it can inject.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{ENGINE, OWNER, REPO, TOKEN};

#[derive(Debug, Clone)]
pub struct FakeIssue {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub open: bool,
    pub labels: Vec<String>,
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

#[derive(Debug, Clone)]
pub struct FakeFile {
    pub content: Vec<u8>,
    pub sha: String,
}

#[derive(Debug, Clone, Default)]
pub struct FakeBranch {
    pub head: String,
    pub files: BTreeMap<String, FakeFile>,
}

#[derive(Debug, Clone)]
pub struct FakeReview {
    pub id: u64,
    pub author: String,
    pub state: String,
    pub commit: String,
    pub body: String,
}

#[derive(Debug, Clone)]
pub struct FakeCommit {
    pub sha: String,
    pub message: String,
    pub parents: usize,
}

#[derive(Debug, Clone)]
pub struct FakePull {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub head: String,
    pub head_sha: String,
    pub base: String,
    pub open: bool,
    pub merged: bool,
    pub merge_method: Option<String>,
    pub reviews: Vec<FakeReview>,
    pub commits: Vec<FakeCommit>,
    /// One entry per review thread: resolved or not.
    pub threads: Vec<bool>,
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

pub struct State {
    pub base_url: String,
    pub owner: String,
    pub repo: String,
    /// False: every repository route answers 404, as for a missing repo.
    pub repo_exists: bool,
    pub token: String,
    /// The login the token acts as.
    pub token_login: String,
    /// False: writes answer 403 "Resource not accessible by integration".
    pub token_can_write: bool,
    pub issues: BTreeMap<u64, FakeIssue>,
    pub labels: BTreeMap<String, FakeLabel>,
    pub label_events: Vec<FakeLabelEvent>,
    pub comments: Vec<FakeComment>,
    pub branches: BTreeMap<String, FakeBranch>,
    /// Commits created through the git API: sha -> tree.
    pub git_commits: BTreeMap<String, String>,
    /// Bodies of POST /dispatches, in order.
    pub dispatches: Vec<Value>,
    /// Users GitHub knows; the rest get 404 on permission lookups.
    pub users: BTreeSet<String>,
    /// Collaborators: login -> role name (read, triage, write, maintain, admin).
    pub collaborators: BTreeMap<String, String>,
    pub pulls: BTreeMap<u64, FakePull>,
    /// sha -> (name, status, conclusion).
    pub check_runs: BTreeMap<String, Vec<(String, String, Option<String>)>>,
    /// sha -> (context, state).
    pub statuses: BTreeMap<String, Vec<(String, String)>>,
    /// Releases of any repository (releases.rs).
    pub releases: super::releases::Releases,
    /// Actions settings and the token's missing permissions (settings.rs).
    pub settings: super::settings::Settings,
    pub log: Vec<Exchange>,
    pub unknown: Vec<String>,
    pub faults: Vec<Fault>,
    pub(super) next_id: u64,
    pub(super) ticks: u64,
    /// The path of the request being answered (for `Link` headers).
    pub(super) current_path: String,
}

impl State {
    pub fn new(base_url: &str) -> Self {
        let mut branches = BTreeMap::new();
        branches.insert("main".to_string(), FakeBranch { head: "c0ffee".repeat(6) + "c0ff", files: BTreeMap::new() });
        Self {
            base_url: base_url.into(),
            owner: OWNER.into(),
            repo: REPO.into(),
            repo_exists: true,
            token: TOKEN.into(),
            token_login: ENGINE.into(),
            token_can_write: true,
            issues: BTreeMap::new(),
            labels: BTreeMap::new(),
            label_events: Vec::new(),
            comments: Vec::new(),
            branches,
            git_commits: BTreeMap::new(),
            dispatches: Vec::new(),
            users: [ENGINE.to_string()].into_iter().collect(),
            collaborators: BTreeMap::new(),
            pulls: BTreeMap::new(),
            check_runs: BTreeMap::new(),
            statuses: BTreeMap::new(),
            releases: Default::default(),
            settings: Default::default(),
            log: Vec::new(),
            unknown: Vec::new(),
            faults: Vec::new(),
            next_id: 1000,
            ticks: 0,
            current_path: String::new(),
        }
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A fixed, increasing clock: 2026-11-29T12:00:00Z plus one second a tick.
    pub(super) fn now(&mut self) -> String {
        self.ticks += 1;
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z").expect("valid time")
            + chrono::Duration::seconds(self.ticks as i64);
        at.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    /// Opens an issue as `author`, with labels applied by `author`.
    pub fn add_issue(&mut self, title: &str, body: &str, author: &str, labels: &[&str]) -> u64 {
        let number = self.issues.keys().chain(self.pulls.keys()).max().copied().unwrap_or(0) + 1;
        self.users.insert(author.into());
        self.issues.insert(
            number,
            FakeIssue {
                number,
                title: title.into(),
                body: body.into(),
                author: author.into(),
                open: true,
                labels: Vec::new(),
            },
        );
        let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        self.apply_labels(number, &labels, author);
        number
    }

    /// Replaces the labels of an issue as `actor`, recording label events
    /// and creating unknown labels the way GitHub does (grey, no description).
    pub fn apply_labels(&mut self, number: u64, labels: &[String], actor: &str) {
        let before = self.issues.get(&number).map(|i| i.labels.clone()).unwrap_or_default();
        let mut after: Vec<String> = Vec::new();
        for l in labels {
            if !after.iter().any(|a| a.eq_ignore_ascii_case(l)) {
                after.push(self.label_named(l));
            }
        }
        for l in before.iter().filter(|l| !after.contains(l)) {
            self.record_label_event(number, false, l, actor);
        }
        for l in after.iter().filter(|l| !before.contains(l)) {
            self.record_label_event(number, true, l, actor);
        }
        if let Some(issue) = self.issues.get_mut(&number) {
            issue.labels = after;
        }
    }

    fn record_label_event(&mut self, issue: u64, labeled: bool, label: &str, actor: &str) {
        let (id, at) = (self.id(), self.now());
        self.label_events.push(FakeLabelEvent { id, issue, labeled, label: label.into(), actor: actor.into(), at });
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

    pub fn add_collaborator(&mut self, login: &str, role: &str) {
        self.users.insert(login.into());
        self.collaborators.insert(login.into(), role.into());
    }

    /// What GitHub learns from a push of `branch` (its head now `head`,
    /// `commits` on top of the base, oldest first, as `(sha, subject)`),
    /// then what people and CI do with the open pull request of that branch:
    /// `reviewer`, a collaborator with write access, approves the head
    /// commit, and a `test` check run completes successfully on it.
    pub fn approve_and_pass_ci(&mut self, branch: &str, head: &str, commits: &[(String, String)], reviewer: &str) {
        self.add_collaborator(reviewer, "write");
        let id = self.id();
        let pull = self
            .pulls
            .values_mut()
            .find(|p| p.open && p.head == branch)
            .unwrap_or_else(|| panic!("an open pull request for `{branch}`"));
        pull.head_sha = head.to_string();
        pull.commits = commits
            .iter()
            .map(|(sha, message)| FakeCommit { sha: sha.clone(), message: message.clone(), parents: 1 })
            .collect();
        pull.reviews.push(FakeReview {
            id,
            author: reviewer.into(),
            state: "APPROVED".into(),
            commit: head.to_string(),
            body: "Looks good.".into(),
        });
        self.check_runs.insert(head.to_string(), vec![("test".into(), "completed".into(), Some("success".into()))]);
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

    /// The text of a file on a branch, if there.
    pub fn file(&self, branch: &str, path: &str) -> Option<String> {
        let f = self.branches.get(branch)?.files.get(path)?;
        Some(String::from_utf8_lossy(&f.content).into_owned())
    }

    /// Writes a file directly (another writer, or a person's commit).
    pub fn put_file(&mut self, branch: &str, path: &str, text: &str) {
        let sha = blob_sha(text.as_bytes());
        let head = blob_sha(format!("{branch}{path}{sha}").as_bytes());
        let b = self.branches.entry(branch.into()).or_default();
        b.head = head;
        b.files.insert(path.into(), FakeFile { content: text.as_bytes().to_vec(), sha });
    }

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
            self.branches
                .iter()
                .map(|(b, f)| (b, f.files.iter().map(|(p, f)| (p, &f.sha)).collect::<Vec<_>>()))
                .collect::<Vec<_>>(),
            self.dispatches,
            self.pulls.values().map(|p| (p.open, p.merged)).collect::<Vec<_>>(),
        )
    }
}

/// A content-addressed id for a blob. Real GitHub uses git's SHA-1; any
/// 40-hex digest that changes with the content serves the same purpose here.
pub fn blob_sha(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest([format!("blob {}\0", bytes.len()).as_bytes(), bytes].concat());
    d.iter().take(20).map(|b| format!("{b:02x}")).collect()
}
