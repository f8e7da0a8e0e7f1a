//! Helpers for the departments' tests: a hospital on the local forge with
//! a clock the test moves, a forge wrapper that counts API calls and can
//! make a patient move on at the worst moment, and chart shortcuts.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use ward::chart::{ENGINE_ROLE, Note, NoteMeta, Seen, Sentinels, append};
use ward::clock::Clock;
use ward::config::Config;
use ward::forge::local::LocalForge;
use ward::forge::{
    CiStatus, Comment, CommentWrite, CommitInfo, Forge, ForgeResult, Found, Issue, IssueNumber, IssueSearch,
    LOOKS_PER_REQUEST, LabelEvent, LabelSpec, Listed, NewIssue, NewPullRequest, PatientLook, Permission, PullRequest,
    Reaction, Relabel, RelabelError, Review, StoredChart,
};

pub const START: &str = "2026-11-29T08:00:00Z";

/// A clock the test moves by hand.
#[derive(Clone)]
pub struct TestClock(Arc<Mutex<DateTime<Utc>>>);

impl TestClock {
    pub fn at(rfc3339: &str) -> Self {
        Self(Arc::new(Mutex::new(DateTime::parse_from_rfc3339(rfc3339).unwrap().with_timezone(&Utc))))
    }
    pub fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
    pub fn advance(&self, by: Duration) -> DateTime<Utc> {
        let mut t = self.0.lock().unwrap();
        *t += chrono::Duration::from_std(by).unwrap();
        *t
    }
    pub fn as_clock(&self) -> Clock {
        let me = self.clone();
        Arc::new(move || me.now())
    }
}

pub fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

/// The shipped pipeline, with `edit` applied to its text first.
pub fn config_with(edit: impl Fn(String) -> String) -> Config {
    let text = edit(include_str!("../../.github/ward.yml").to_string());
    Config::parse(&text, Path::new(".github/ward.yml"), None).unwrap_or_else(|e| panic!("test config: {e}"))
}

/// A hospital on the local forge in a temporary folder.
pub struct Ward {
    pub dir: tempfile::TempDir,
    pub clock: TestClock,
    pub local: Arc<LocalForge>,
    pub config: Config,
    pub sentinels: Sentinels,
}

impl Ward {
    pub fn new(config: Config) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = TestClock::at(START);
        let local = Arc::new(
            LocalForge::new(dir.path(), &config.engine_account).with_clock(clock.as_clock()).with_actor("chief-ana"),
        );
        let sentinels = Sentinels::new(&config.sentinel_prefix);
        Self { dir, clock, local, config, sentinels }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// A person opens an issue carrying `labels` (now, on the test clock).
    pub fn admit(&self, title: &str, labels: &[&str]) -> IssueNumber {
        self.local
            .admit(NewIssue {
                title: title.into(),
                body: format!("{title}: body"),
                labels: labels.iter().map(|l| l.to_string()).collect(),
            })
            .unwrap()
            .number
    }

    pub async fn labels(&self, n: IssueNumber) -> Vec<String> {
        self.local.issue(n).await.unwrap().labels
    }

    pub async fn notes(&self, n: IssueNumber) -> Vec<Note> {
        match self.local.read_chart(n).await.unwrap() {
            None => Vec::new(),
            Some(c) => self.sentinels.parse_chart(&c.text).unwrap(),
        }
    }

    pub async fn kinds(&self, n: IssueNumber, kind: &str) -> Vec<Note> {
        self.notes(n).await.into_iter().filter(|x| x.kind == kind).collect()
    }

    pub async fn write(&self, n: IssueNumber, notes: &[Note]) {
        append(&*self.local, &self.sentinels, n, Seen::NotRead, notes).await.unwrap();
    }

    pub fn note(&self, kind: &str, stage: &str, run: &str, role: &str, body: &str) -> Note {
        Note {
            kind: kind.parse().expect("a known note kind"),
            meta: NoteMeta { run: run.into(), stage: stage.into(), role: role.into(), at: self.now() },
            body: body.into(),
        }
    }

    /// What a stage run writes when it starts.
    pub async fn start_run(&self, n: IssueNumber, stage: &str, run: &str) {
        self.write(n, &[self.note("ADMISSION", stage, run, ENGINE_ROLE, "started")]).await;
    }

    /// What a stage run does when it ends with `outcome`: the OUTCOME note,
    /// then the label moves to the outcome's target.
    pub async fn finish_run(&self, n: IssueNumber, stage: &str, run: &str, outcome: &str) {
        let st = self.config.stage(stage).unwrap();
        self.write(n, &[self.note("OUTCOME", stage, run, &st.config.role, outcome)]).await;
        let issue = self.local.issue(n).await.unwrap();
        let target = st.config.outcomes[outcome].clone();
        let mut labels: Vec<String> = issue.labels.into_iter().filter(|l| *l != st.config.label).collect();
        labels.push(target.clone());
        self.local.set_labels(n, &labels).await.unwrap();
        if target == "ward:discharged" {
            self.local.close_issue(n).await.unwrap(); // as the stage runner does
        }
    }

    /// The stage runner over this ward's forge and clock: the default
    /// installation in the ward's folder, with `edit` applied to ward.yml,
    /// and the real `ward` binary as the stand-in agent.
    pub fn hospital(&self, edit: impl Fn(String) -> String) -> ward::hospital::Hospital {
        let root = self.dir.path();
        if !root.join(".github/ward.yml").exists() {
            ward::defaults::install(root).unwrap();
        }
        let pipeline = include_str!("../../.github/ward.yml");
        std::fs::write(root.join(".github/ward.yml"), edit(pipeline.to_string())).unwrap();
        let forge: Arc<dyn Forge> = self.local.clone();
        let mut h = ward::hospital::Hospital::load(root, forge).unwrap();
        h.ward_exe = env!("CARGO_BIN_EXE_ward").into();
        h.clock = self.clock.as_clock();
        home_in_repository(&mut h);
        h
    }

    pub fn dispatched(&self) -> Vec<IssueNumber> {
        self.local.dispatches().unwrap().into_iter().map(|d| d.issue).collect()
    }

    pub fn set_permissions(&self, perms: &[(&str, Permission)]) {
        let map: BTreeMap<String, Permission> = perms.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        self.local.set_collaborators(&map).unwrap();
    }
}

/// Something a test wants to happen inside a forge call.
pub type Hook = Box<dyn Fn(IssueNumber) + Send + Sync>;

/// Wraps a forge: counts every call by method, and can run a hook when the
/// engine re-reads an issue (to make a patient move on mid-sweep).
pub struct Counting<F: Forge> {
    pub inner: F,
    pub calls: Mutex<BTreeMap<&'static str, usize>>,
    pub total: AtomicUsize,
    pub on_issue: Mutex<Option<Hook>>,
}

impl<F: Forge> Counting<F> {
    pub fn new(inner: F) -> Self {
        Self { inner, calls: Mutex::new(BTreeMap::new()), total: AtomicUsize::new(0), on_issue: Mutex::new(None) }
    }
    fn count(&self, what: &'static str) {
        *self.calls.lock().unwrap().entry(what).or_insert(0) += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
    }
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }
    pub fn reset(&self) {
        self.calls.lock().unwrap().clear();
        self.total.store(0, Ordering::Relaxed);
    }
    pub fn of(&self, what: &str) -> usize {
        self.calls.lock().unwrap().get(what).copied().unwrap_or(0)
    }
}

#[async_trait]
impl<F: Forge> Forge for Counting<F> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn engine_account(&self) -> &ward::forge::EngineAccount {
        self.inner.engine_account()
    }
    async fn issue(&self, number: IssueNumber) -> ForgeResult<Issue> {
        self.count("issue");
        if let Some(hook) = self.on_issue.lock().unwrap().as_ref() {
            hook(number);
        }
        self.inner.issue(number).await
    }
    async fn create_issue(&self, new: NewIssue) -> ForgeResult<Issue> {
        self.count("create_issue");
        self.inner.create_issue(new).await
    }
    async fn looks(&self, numbers: &[IssueNumber]) -> Vec<ForgeResult<PatientLook>> {
        // One call per 50 patients, as on GitHub; the hook runs as each is read.
        for _ in 0..numbers.len().div_ceil(LOOKS_PER_REQUEST) {
            self.count("looks (pages)");
        }
        if let Some(hook) = self.on_issue.lock().unwrap().as_ref() {
            for n in numbers {
                hook(*n);
            }
        }
        self.inner.looks(numbers).await
    }
    async fn search_issues(&self, searches: &[IssueSearch]) -> ForgeResult<Option<Vec<Found>>> {
        let found = self.inner.search_issues(searches).await?;
        if found.is_some() {
            self.count("search_issues");
        }
        Ok(found)
    }
    async fn open_issues_with_label(&self, label: &str) -> ForgeResult<Vec<Issue>> {
        let issues = self.inner.open_issues_with_label(label).await?;
        // One call per page of 100, as on GitHub.
        for _ in 0..issues.len().div_ceil(100).max(1) {
            self.count("open_issues_with_label (pages)");
        }
        Ok(issues)
    }
    async fn open_issues_listed(&self, label: &str) -> ForgeResult<Vec<Listed>> {
        let issues = self.inner.open_issues_listed(label).await?;
        // The same pages: GitHub's listing carries `updated_at`.
        for _ in 0..issues.len().div_ceil(100).max(1) {
            self.count("open_issues_with_label (pages)");
        }
        Ok(issues)
    }
    async fn all_issues(&self) -> ForgeResult<Vec<Issue>> {
        self.count("all_issues");
        self.inner.all_issues().await
    }
    async fn close_issue(&self, number: IssueNumber) -> ForgeResult<()> {
        self.count("close_issue");
        self.inner.close_issue(number).await
    }
    async fn reopen_issue(&self, number: IssueNumber) -> ForgeResult<()> {
        self.count("reopen_issue");
        self.inner.reopen_issue(number).await
    }
    async fn closed_issues_with_label(
        &self,
        label: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> ForgeResult<Vec<ward::forge::ClosedIssue>> {
        self.count("closed_issues_with_label");
        self.inner.closed_issues_with_label(label, since).await
    }
    async fn set_labels(&self, number: IssueNumber, labels: &[String]) -> ForgeResult<()> {
        self.count("set_labels");
        self.inner.set_labels(number, labels).await
    }
    async fn ensure_labels(&self, specs: &[LabelSpec]) -> ForgeResult<()> {
        self.count("ensure_labels");
        self.inner.ensure_labels(specs).await
    }
    async fn label_events(&self, number: IssueNumber) -> ForgeResult<Vec<LabelEvent>> {
        self.count("label_events");
        self.inner.label_events(number).await
    }
    async fn comments(&self, number: IssueNumber) -> ForgeResult<Vec<Comment>> {
        self.count("comments");
        self.inner.comments(number).await
    }
    async fn add_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<()> {
        self.count("add_comment");
        self.inner.add_comment(number, body).await
    }
    async fn permission(&self, login: &str) -> ForgeResult<Permission> {
        self.count("permission");
        self.inner.permission(login).await
    }
    async fn acting_user(&self) -> ForgeResult<String> {
        self.count("acting_user");
        self.inner.acting_user().await
    }
    async fn read_chart(&self, number: IssueNumber) -> ForgeResult<Option<StoredChart>> {
        self.count("read_chart");
        self.inner.read_chart(number).await
    }
    async fn write_chart(&self, number: IssueNumber, text: &str, expected: Option<&str>) -> ForgeResult<StoredChart> {
        self.count("write_chart");
        self.inner.write_chart(number, text, expected).await
    }
    async fn dispatch_stage(&self, number: IssueNumber, label: &str) -> ForgeResult<()> {
        self.count("dispatch_stage");
        self.inner.dispatch_stage(number, label).await
    }
    async fn pull_request_for_branch(&self, branch: &str) -> ForgeResult<Option<PullRequest>> {
        self.count("pull_request_for_branch");
        self.inner.pull_request_for_branch(branch).await
    }
    async fn pull_requests_of_branch(&self, branch: &str) -> ForgeResult<Vec<PullRequest>> {
        self.count("pull_requests_of_branch");
        self.inner.pull_requests_of_branch(branch).await
    }
    async fn open_pull_request(&self, new: NewPullRequest) -> ForgeResult<PullRequest> {
        self.count("open_pull_request");
        self.inner.open_pull_request(new).await
    }
    async fn label_pull_request(&self, pull: u64, label: &str) -> ForgeResult<()> {
        self.count("label_pull_request");
        self.inner.label_pull_request(pull, label).await
    }
    async fn reviews(&self, pull: u64) -> ForgeResult<Vec<Review>> {
        self.count("reviews");
        self.inner.reviews(pull).await
    }
    async fn unresolved_review_threads(&self, pull: u64) -> ForgeResult<usize> {
        self.count("unresolved_review_threads");
        self.inner.unresolved_review_threads(pull).await
    }
    async fn pull_request_commits(&self, pull: u64) -> ForgeResult<Vec<CommitInfo>> {
        self.count("pull_request_commits");
        self.inner.pull_request_commits(pull).await
    }
    async fn pull_request_files(&self, pull: u64) -> ForgeResult<Vec<String>> {
        self.count("pull_request_files");
        self.inner.pull_request_files(pull).await
    }
    async fn ci_status(&self, sha: &str) -> ForgeResult<CiStatus> {
        self.count("ci_status");
        self.inner.ci_status(sha).await
    }
    async fn merge_pull_request(&self, pull: u64, head_sha: &str) -> ForgeResult<()> {
        self.count("merge_pull_request");
        self.inner.merge_pull_request(pull, head_sha).await
    }
    async fn post_comment(&self, n: IssueNumber, body: &str) -> ForgeResult<u64> {
        self.count("post_comment");
        self.inner.post_comment(n, body).await
    }
    async fn edit_comment(&self, n: IssueNumber, id: u64, body: &str) -> ForgeResult<()> {
        self.count("edit_comment");
        self.inner.edit_comment(n, id, body).await
    }
    async fn request_reviewers(&self, pull: u64, users: &[String], teams: &[String]) -> ForgeResult<()> {
        self.count("request_reviewers");
        self.inner.request_reviewers(pull, users, teams).await
    }
    async fn react(&self, n: IssueNumber, id: u64, reaction: Reaction) -> ForgeResult<()> {
        self.count("react");
        self.inner.react(n, id, reaction).await
    }
    // The move's labels and comment as separate calls, each counted.
    async fn relabel_and_comment(
        &self,
        n: IssueNumber,
        labels: Option<Relabel<'_>>,
        comment: CommentWrite<'_>,
    ) -> Result<Option<u64>, RelabelError> {
        ward::forge::relabel_and_comment_by_parts(self, n, labels, comment).await
    }
    fn finds_patient_comment(&self) -> bool {
        self.inner.finds_patient_comment()
    }
    async fn find_patient_comment(&self, n: IssueNumber) -> ForgeResult<Option<u64>> {
        self.count("find_patient_comment");
        self.inner.find_patient_comment(n).await
    }
}

/// Lets `Arc<LocalForge>` sit inside [`Counting`].
pub struct Shared(pub Arc<LocalForge>);

#[async_trait]
impl Forge for Shared {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn engine_account(&self) -> &ward::forge::EngineAccount {
        self.0.engine_account()
    }
    async fn issue(&self, n: IssueNumber) -> ForgeResult<Issue> {
        self.0.issue(n).await
    }
    async fn create_issue(&self, new: NewIssue) -> ForgeResult<Issue> {
        self.0.create_issue(new).await
    }
    async fn looks(&self, numbers: &[IssueNumber]) -> Vec<ForgeResult<PatientLook>> {
        self.0.looks(numbers).await
    }
    async fn search_issues(&self, searches: &[IssueSearch]) -> ForgeResult<Option<Vec<Found>>> {
        self.0.search_issues(searches).await
    }
    async fn open_issues_with_label(&self, label: &str) -> ForgeResult<Vec<Issue>> {
        self.0.open_issues_with_label(label).await
    }
    async fn open_issues_listed(&self, label: &str) -> ForgeResult<Vec<Listed>> {
        self.0.open_issues_listed(label).await
    }
    async fn all_issues(&self) -> ForgeResult<Vec<Issue>> {
        self.0.all_issues().await
    }
    async fn close_issue(&self, n: IssueNumber) -> ForgeResult<()> {
        self.0.close_issue(n).await
    }
    async fn reopen_issue(&self, n: IssueNumber) -> ForgeResult<()> {
        self.0.reopen_issue(n).await
    }
    async fn closed_issues_with_label(
        &self,
        label: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> ForgeResult<Vec<ward::forge::ClosedIssue>> {
        self.0.closed_issues_with_label(label, since).await
    }
    async fn set_labels(&self, n: IssueNumber, labels: &[String]) -> ForgeResult<()> {
        self.0.set_labels(n, labels).await
    }
    async fn ensure_labels(&self, specs: &[LabelSpec]) -> ForgeResult<()> {
        self.0.ensure_labels(specs).await
    }
    async fn label_events(&self, n: IssueNumber) -> ForgeResult<Vec<LabelEvent>> {
        self.0.label_events(n).await
    }
    async fn comments(&self, n: IssueNumber) -> ForgeResult<Vec<Comment>> {
        self.0.comments(n).await
    }
    async fn add_comment(&self, n: IssueNumber, body: &str) -> ForgeResult<()> {
        self.0.add_comment(n, body).await
    }
    async fn permission(&self, login: &str) -> ForgeResult<Permission> {
        self.0.permission(login).await
    }
    async fn acting_user(&self) -> ForgeResult<String> {
        self.0.acting_user().await
    }
    async fn read_chart(&self, n: IssueNumber) -> ForgeResult<Option<StoredChart>> {
        self.0.read_chart(n).await
    }
    async fn write_chart(&self, n: IssueNumber, text: &str, expected: Option<&str>) -> ForgeResult<StoredChart> {
        self.0.write_chart(n, text, expected).await
    }
    async fn dispatch_stage(&self, n: IssueNumber, label: &str) -> ForgeResult<()> {
        self.0.dispatch_stage(n, label).await
    }
    async fn pull_request_for_branch(&self, branch: &str) -> ForgeResult<Option<PullRequest>> {
        self.0.pull_request_for_branch(branch).await
    }
    async fn pull_requests_of_branch(&self, branch: &str) -> ForgeResult<Vec<PullRequest>> {
        self.0.pull_requests_of_branch(branch).await
    }
    async fn open_pull_request(&self, new: NewPullRequest) -> ForgeResult<PullRequest> {
        self.0.open_pull_request(new).await
    }
    async fn label_pull_request(&self, pull: u64, label: &str) -> ForgeResult<()> {
        self.0.label_pull_request(pull, label).await
    }
    async fn reviews(&self, pull: u64) -> ForgeResult<Vec<Review>> {
        self.0.reviews(pull).await
    }
    async fn unresolved_review_threads(&self, pull: u64) -> ForgeResult<usize> {
        self.0.unresolved_review_threads(pull).await
    }
    async fn pull_request_commits(&self, pull: u64) -> ForgeResult<Vec<CommitInfo>> {
        self.0.pull_request_commits(pull).await
    }
    async fn pull_request_files(&self, pull: u64) -> ForgeResult<Vec<String>> {
        self.0.pull_request_files(pull).await
    }
    async fn ci_status(&self, sha: &str) -> ForgeResult<CiStatus> {
        self.0.ci_status(sha).await
    }
    async fn merge_pull_request(&self, pull: u64, head_sha: &str) -> ForgeResult<()> {
        self.0.merge_pull_request(pull, head_sha).await
    }
    async fn post_comment(&self, n: IssueNumber, body: &str) -> ForgeResult<u64> {
        self.0.post_comment(n, body).await
    }
    async fn edit_comment(&self, n: IssueNumber, id: u64, body: &str) -> ForgeResult<()> {
        self.0.edit_comment(n, id, body).await
    }
    async fn request_reviewers(&self, pull: u64, users: &[String], teams: &[String]) -> ForgeResult<()> {
        self.0.request_reviewers(pull, users, teams).await
    }
    async fn react(&self, n: IssueNumber, id: u64, reaction: Reaction) -> ForgeResult<()> {
        self.0.react(n, id, reaction).await
    }
    async fn relabel_and_comment(
        &self,
        n: IssueNumber,
        labels: Option<Relabel<'_>>,
        comment: CommentWrite<'_>,
    ) -> Result<Option<u64>, RelabelError> {
        self.0.relabel_and_comment(n, labels, comment).await
    }
    fn finds_patient_comment(&self) -> bool {
        self.0.finds_patient_comment()
    }
    async fn find_patient_comment(&self, n: IssueNumber) -> ForgeResult<Option<u64>> {
        self.0.find_patient_comment(n).await
    }
}

/// Keeps a hospital's worktrees and workspace state in its repository
/// (`.ward/home`, ward's own fallback), not in the `~/.cache/ward` that
/// `Hospital::load` reads from the test process's HOME: a test leaves
/// nothing in the home of whoever runs it.
pub fn home_in_repository(h: &mut ward::hospital::Hospital) {
    if let Ok(Some(plan)) = h.workspace.as_mut() {
        plan.home = h.root.join(".ward").join("home");
    }
}

/// Plan review's OUTCOME `reject` in run `r<run>`: one send-back, as the
/// research role's record counts them.
pub fn plan_review_rejected(run: u64) -> Note {
    let meta = NoteMeta { run: format!("r{run}"), stage: "plan-review".into(), role: "x".into(), at: Utc::now() };
    Note { kind: ward::chart::NoteKind::Outcome, meta, body: "reject".into() }
}
