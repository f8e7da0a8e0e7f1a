//! A small GitHub Actions runner for the tests: it reads the workflow
//! files of the fake GitHub's repository and, for each webhook delivery,
//! runs what GitHub would run, against the fake, on a simulated clock.
//!
//! What it does as GitHub does (each rule is what makes a test fail where
//! GitHub would fail):
//!
//! - **Which workflows a delivery starts.** The workflow files are read at
//!   the commit GitHub reads them at: the default branch's head for
//!   `issues`, `issue_comment`, `repository_dispatch`, `schedule`,
//!   `status`, `check_run`, `check_suite`, `workflow_run`; the pushed
//!   commit for `push`; the pull request's test merge
//!   (`refs/pull/<n>/merge`) for `pull_request` and `pull_request_review`
//!   (none on a merge conflict: GitHub runs nothing then); the chosen ref
//!   for `workflow_dispatch`. `on:` is matched with its `types:` (and
//!   `pull_request`'s default opened/synchronize/reopened), `branches`,
//!   `tags`, `paths` (and their `-ignore`), `workflows:` of
//!   `workflow_run`, the event type of `repository_dispatch`, and the file
//!   a `workflow_dispatch` names. `schedule` runs when the test fires it
//!   ([`Runner::schedule`]).
//! - **The workflow token starts nothing.** A delivery caused by a job's
//!   `GITHUB_TOKEN` (login `github-actions[bot]`) starts no workflow,
//!   except `workflow_dispatch` and `repository_dispatch`. Actions' own
//!   check runs and suites start nothing either; `workflow_run` does, at
//!   most three levels deep. An app token (a GitHub App's `...[bot]`)
//!   and people start workflows.
//! - **Tokens.** Each job gets its own token with the job's permissions:
//!   a job-level `permissions:` replaces the workflow's, and grants only
//!   what it lists (`{}`: metadata only); without either, the repository
//!   default (`contents: read`, `packages: read`). The fake refuses the
//!   rest with 403 "Resource not accessible by integration"; the token is
//!   revoked when the job ends.
//! - **Concurrency.** Per group, one run (or job) in progress and at most
//!   one pending: a newer pending one cancels the older pending one;
//!   `cancel-in-progress: true` cancels the one in progress. A job-level
//!   group is entered after the job's `if:`, so a skipped job never
//!   enters it. Cancelling cannot undo what a job already did: its steps
//!   ran when it started (see the clock), so a job cancelled while in
//!   progress keeps its effects and is concluded `cancelled`.
//! - **Jobs and steps.** `needs` (a failed or skipped need skips the
//!   job unless its `if:` uses a status function), job `outputs`, `env`
//!   at every level, `defaults.run`, step `id`, `if`, `env`, `shell`,
//!   `working-directory`, `continue-on-error`; `run:` executed like
//!   GitHub (`bash --noprofile --norc -eo pipefail <file>`, or `sh -e`)
//!   with `GITHUB_OUTPUT`, `GITHUB_ENV`, `GITHUB_PATH`,
//!   `GITHUB_STEP_SUMMARY`, `GITHUB_EVENT_PATH`, `GITHUB_EVENT_NAME`,
//!   `GITHUB_WORKSPACE`, `RUNNER_TEMP`, `GITHUB_RUN_ID`,
//!   `GITHUB_RUN_ATTEMPT`, `GITHUB_REPOSITORY`, `GITHUB_API_URL`,
//!   `GITHUB_SERVER_URL` (both the fake), `GITHUB_ACTIONS=true`, `CI=true`
//!   and `GITHUB_TOKEN` only where the workflow puts it. Workflow
//!   commands are read from the output as the runner reads them (`::error`,
//!   `::warning`, `::notice`, `::add-mask::`, `::stop-commands::`, the
//!   disabled `set-env`/`add-path` fail the step); secrets and masks are
//!   `***` in the recorded logs. Expressions: see [`expr`].
//! - **Actions.** `actions/checkout` (a real clone over smart HTTP at the
//!   run's sha and ref, with the job's token; `persist-credentials`,
//!   `fetch-depth`, `ref`, `path`), `actions/upload-artifact` and
//!   `actions/download-artifact` (a store per run; v4's name conflicts and
//!   hidden-file exclusion), `actions/cache` (always a miss). Any other
//!   `uses:` fails the step and the test ([`Runner::unsupported`]).
//! - **ward itself** is not built: the one step whose `run:` is exactly
//!   `cargo build --release --locked --bin ward` gets the test's prebuilt
//!   binary at `./target/release/ward` instead.
//! - **CI.** Every job is a check run (app `github-actions`) on the run's
//!   head commit (the pull request's head for `pull_request`), in a check
//!   suite per run, with GitHub's null output title and summary and its
//!   annotation count; the run ends with `workflow_run` completed. A
//!   CI that reports an output summary is an app: see
//!   [`State::report_check`].
//!
//! The clock. The fake's clock is simulated, and the runner drives it: a
//! job's steps run (for real) when it starts, then the job is in progress
//! for a simulated duration ([`Runner::job_takes`], default two minutes),
//! holding its concurrency group. [`Runner::run_until_idle`] delivers
//! events, starts what is ready, and otherwise moves the clock to the next
//! thing: a job's end, or something the test scheduled ([`Runner::at`]: a
//! review an hour later). What it cannot do: `strategy.matrix`, services,
//! containers, reusable workflows, composite actions and `hashFiles()` fail
//! loudly; `timeout-minutes` is not enforced (a step gets ten real minutes);
//! ward's own clock is the machine's, not the simulated one.

pub mod expr;
pub mod step;
pub mod workflow;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

pub use expr::{Contexts, Status};
pub use step::{Annotation, StepRecord};
pub use workflow::Workflow;

use super::fake_github::{Delivery, FakeGitHub, OWNER, Permissions, REPO, State, WorkflowRunFacts};

/// The login of every job's `GITHUB_TOKEN`.
pub const ACTIONS_BOT: &str = super::fake_github::ENGINE;
/// The one `run:` the runner replaces by the test's prebuilt ward.
pub const BUILD_WARD: &str = "cargo build --release --locked --bin ward";
/// Real time a step may take before the runner kills it.
const STEP_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Waiting for its concurrency group.
    Pending,
    Queued,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    /// Its needs are not done (or its run is pending).
    Waiting,
    /// Waiting for its concurrency group.
    Pending,
    /// Admitted: starts next.
    Ready,
    /// Its steps ran; it holds its group until `until`.
    InProgress {
        until: DateTime<Utc>,
        conclusion: String,
    },
    Completed,
}

#[derive(Debug, Clone)]
pub struct JobRun {
    pub key: String,
    pub name: String,
    pub state: JobState,
    /// success, failure, cancelled, skipped.
    pub conclusion: Option<String>,
    pub steps: Vec<StepRecord>,
    pub annotations: Vec<Annotation>,
    /// What the steps wrote to `GITHUB_STEP_SUMMARY`.
    pub summary: String,
    pub outputs: BTreeMap<String, String>,
    pub permissions: Permissions,
    pub group: Option<String>,
    cancel_in_progress: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    check_run: Option<u64>,
    token: Option<String>,
}

impl JobRun {
    /// Every step's log, one after the other.
    pub fn log(&self) -> String {
        self.steps.iter().map(|s| format!("## {}\n{}", s.name, s.log)).collect()
    }

    pub fn step(&self, name: &str) -> &StepRecord {
        self.steps.iter().find(|s| s.name == name || s.id.as_deref() == Some(name)).unwrap_or_else(|| {
            panic!(
                "job `{}` has no step `{name}`: {:?}",
                self.key,
                self.steps.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    }
}

#[derive(Debug, Clone)]
pub struct WorkflowRun {
    pub id: u64,
    pub number: u64,
    /// The workflow's file name (`ward-stage.yml`).
    pub workflow: String,
    pub name: String,
    pub event: String,
    pub action: Option<String>,
    /// Who caused the event (`github.actor`).
    pub actor: String,
    /// `GITHUB_SHA` and `GITHUB_REF`.
    pub sha: String,
    pub git_ref: String,
    /// The commit the run's checks attach to.
    pub head_sha: String,
    pub head_branch: Option<String>,
    pub status: RunStatus,
    pub conclusion: Option<String>,
    pub jobs: Vec<JobRun>,
    pub created_at: DateTime<Utc>,
    pub payload: Value,
    pub group: Option<String>,
    cancel_in_progress: bool,
    wf: Workflow,
    check_suite: u64,
    depth: u8,
    pull_requests: Vec<u64>,
    pub artifacts: BTreeMap<String, PathBuf>,
}

impl WorkflowRun {
    pub fn job(&self, key: &str) -> &JobRun {
        self.jobs.iter().find(|j| j.key == key).unwrap_or_else(|| panic!("run {} has no job `{key}`", self.id))
    }

    /// `issues labeled ward:admit by alice -> success`, for messages.
    pub fn describe(&self) -> String {
        let what = match (self.event.as_str(), self.action.as_deref()) {
            ("issues", Some(a)) => format!("issues {a} {}", self.payload["label"]["name"].as_str().unwrap_or("")),
            ("repository_dispatch", _) => format!("repository_dispatch {}", self.payload["client_payload"]),
            (e, Some(a)) => format!("{e} {a}"),
            (e, None) => e.to_string(),
        };
        let jobs: Vec<String> =
            self.jobs.iter().map(|j| format!("{}={}", j.key, j.conclusion.as_deref().unwrap_or("-"))).collect();
        format!(
            "#{} {} ({what} by {}) -> {} [{}]",
            self.id,
            self.workflow,
            self.actor,
            self.conclusion.as_deref().unwrap_or("not finished"),
            jobs.join(", ")
        )
    }
}

/// What a delivery means for runs: the commit and ref GitHub gives them.
#[derive(Debug, Clone)]
struct EventTarget {
    sha: String,
    git_ref: String,
    head_sha: String,
    head_branch: Option<String>,
    pull_requests: Vec<u64>,
}

type Action = Box<dyn FnOnce(&mut State) + Send>;

struct Scheduled {
    at: DateTime<Utc>,
    what: String,
    action: Action,
}

pub struct Runner<'a> {
    gh: &'a FakeGitHub,
    /// Repository secrets (`secrets.*`); `GITHUB_TOKEN` is each job's own.
    pub secrets: BTreeMap<String, String>,
    /// Repository variables (`vars.*`).
    pub vars: BTreeMap<String, String>,
    /// Permissions of a job whose workflow names none ("Read repository
    /// contents and packages permissions", GitHub's default).
    pub default_permissions: Permissions,
    /// Simulated time a job takes unless [`Runner::job_takes`] says otherwise.
    pub job_duration: Duration,
    durations: Vec<(String, String, Duration)>,
    pub runs: Vec<WorkflowRun>,
    /// Deliveries that started nothing and why (for assertions).
    pub ignored: Vec<(u64, String)>,
    /// Actions (and features) the runner does not implement that a
    /// workflow used: the test fails on drop while this is not empty.
    pub unsupported: Vec<String>,
    /// Things that happened at simulated times, in order (for messages).
    pub timeline: Vec<(DateTime<Utc>, String)>,
    cursor: usize,
    next_run: u64,
    numbers: BTreeMap<String, u64>,
    scheduled: Vec<Scheduled>,
    work: tempfile::TempDir,
    ward: PathBuf,
}

impl Drop for Runner<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() && !self.unsupported.is_empty() {
            panic!("workflows used what the test runner does not implement: {:#?}", self.unsupported);
        }
    }
}

impl<'a> Runner<'a> {
    /// A runner over `gh`'s repository, from now on: deliveries made before
    /// are history.
    pub fn new(gh: &'a FakeGitHub) -> Self {
        let cursor = gh.state().deliveries.len();
        Self {
            gh,
            secrets: BTreeMap::new(),
            vars: BTreeMap::new(),
            default_permissions: Permissions::of(&[("contents", "read"), ("packages", "read")]),
            job_duration: Duration::from_secs(120),
            durations: Vec::new(),
            runs: Vec::new(),
            ignored: Vec::new(),
            unsupported: Vec::new(),
            timeline: Vec::new(),
            cursor,
            next_run: 7_000_000_001,
            numbers: BTreeMap::new(),
            scheduled: Vec::new(),
            work: tempfile::tempdir().expect("the runner's work folder"),
            ward: super::ward_bin(),
        }
    }

    /// Jobs `job` of `workflow` (a file name) take `d` of simulated time.
    pub fn job_takes(&mut self, workflow: &str, job: &str, d: Duration) {
        self.durations.push((workflow.into(), job.into(), d));
    }

    /// Does `action` to the fake `after` the current simulated time (a
    /// person reviews, labels, comments...).
    pub fn at(&mut self, after: Duration, what: &str, action: impl FnOnce(&mut State) + Send + 'static) {
        let at = self.gh.state().time() + chrono::Duration::from_std(after).unwrap();
        self.scheduled.push(Scheduled { at, what: what.into(), action: Box::new(action) });
    }

    /// Fires the `schedule` trigger of `workflow` now.
    pub fn schedule(&mut self, workflow: &str) {
        let (main, wfs) = {
            let s = self.gh.state();
            let main = s.branch_head("main").expect("a default branch");
            (main.clone(), self.workflows_at(&s, &main))
        };
        let wf =
            wfs.into_iter().find(|w| w.file == workflow).unwrap_or_else(|| panic!("no workflow {workflow} on main"));
        let cron = wf.trigger("schedule").and_then(|s| s[0]["cron"].as_str()).map(String::from);
        let Some(cron) = cron else { panic!("{workflow} has no schedule trigger") };
        let repository = self.gh.state().repository_webhook_json();
        let delivery = Delivery {
            id: 0,
            event: "schedule".into(),
            payload: json!({ "schedule": cron, "repository": repository, "workflow": wf.path }),
            sender: OWNER.into(),
            by_workflow_token: false,
            at: self.gh.state().time(),
        };
        let target = EventTarget {
            sha: main,
            git_ref: "refs/heads/main".into(),
            head_sha: String::new(),
            head_branch: Some("main".into()),
            pull_requests: Vec::new(),
        };
        let target = EventTarget { head_sha: target.sha.clone(), ..target };
        self.create_run(wf, &delivery, target, 0);
    }

    /// Runs of `workflow` (a file name), oldest first.
    pub fn runs_of(&self, workflow: &str) -> Vec<&WorkflowRun> {
        self.runs.iter().filter(|r| r.workflow == workflow).collect()
    }

    /// One line per run, for assertion messages.
    pub fn summary(&self) -> String {
        self.runs.iter().map(|r| r.describe() + "\n").collect()
    }

    // -- the loop -----------------------------------------------------------------

    /// Delivers events, runs what is ready and moves the simulated clock to
    /// the next job end or scheduled action, until nothing is left. Panics
    /// when more than `max_runs` runs started a job (a loop).
    pub async fn run_until_idle(&mut self, max_runs: usize) {
        self.run_until(max_runs, |_| false).await;
    }

    /// [`Runner::run_until_idle`], stopping early once `done` holds after
    /// a job ended.
    pub async fn run_until(&mut self, max_runs: usize, done: impl Fn(&State) -> bool) {
        loop {
            self.ingest();
            self.admit_waiting_jobs();
            if let Some((r, j)) = self.ready_job() {
                let started = self.runs.iter().filter(|r| r.jobs.iter().any(|j| j.started_at.is_some())).count();
                let new_run = self.runs[r].jobs.iter().all(|j| j.started_at.is_none());
                if new_run && started >= max_runs {
                    panic!("more than {max_runs} workflow runs: the flow does not settle.\n{}", self.summary());
                }
                self.start_job(r, j).await;
                continue;
            }
            let next_end = self
                .runs
                .iter()
                .enumerate()
                .flat_map(|(r, run)| {
                    run.jobs.iter().enumerate().filter_map(move |(j, job)| match &job.state {
                        JobState::InProgress { until, .. } => Some((*until, r, j)),
                        _ => None,
                    })
                })
                .min_by_key(|(t, _, _)| *t);
            let next_action = self.scheduled.iter().enumerate().min_by_key(|(_, s)| s.at).map(|(i, s)| (s.at, i));
            match (next_end, next_action) {
                (Some((t, r, j)), a) if a.is_none_or(|(ta, _)| t <= ta) => {
                    self.gh.state().advance_to(t);
                    self.finish_job(r, j);
                    if done(&self.gh.state()) {
                        self.ingest();
                        return;
                    }
                }
                (_, Some((t, i))) => {
                    let s = self.scheduled.remove(i);
                    let mut state = self.gh.state();
                    state.advance_to(t);
                    self.timeline.push((state.time(), s.what.clone()));
                    (s.action)(&mut state);
                }
                _ => return,
            }
        }
    }

    /// The workflow files at a commit, parsed (an invalid one is reported
    /// as GitHub does: a failed run would show it; here the test fails).
    fn workflows_at(&self, s: &State, sha: &str) -> Vec<Workflow> {
        let mut out = Vec::new();
        for (path, _) in s.git.files(sha) {
            let Some(file) = path.strip_prefix(".github/workflows/") else { continue };
            if file.contains('/') || !(file.ends_with(".yml") || file.ends_with(".yaml")) {
                continue;
            }
            let text = s.file(sha, &path).unwrap_or_default();
            match Workflow::parse(file, &text) {
                Ok(w) => out.push(w),
                Err(e) => panic!("invalid workflow file at {sha}: {e}"),
            }
        }
        out
    }

    fn ingest(&mut self) {
        let new: Vec<Delivery> = {
            let s = self.gh.state();
            s.deliveries[self.cursor..].to_vec()
        };
        self.cursor += new.len();
        for d in new {
            self.on_delivery(&d);
        }
    }

    fn on_delivery(&mut self, d: &Delivery) {
        if d.by_workflow_token && !matches!(d.event.as_str(), "workflow_dispatch" | "repository_dispatch") {
            self.ignored.push((d.id, format!("{} by {}: caused by a workflow token", d.event, d.sender)));
            return;
        }
        let depth = if d.event == "workflow_run" {
            let parent = d.payload["workflow_run"]["id"].as_u64().unwrap_or(0);
            self.runs.iter().find(|r| r.id == parent).map(|r| r.depth + 1).unwrap_or(1)
        } else {
            0
        };
        if depth > 3 {
            self.ignored.push((d.id, "workflow_run chains stop at three levels".into()));
            return;
        }
        let Some(target) = self.target(d) else {
            self.ignored.push((d.id, format!("{}: no commit to run on", d.event)));
            return;
        };
        let workflows = {
            let s = self.gh.state();
            self.workflows_at(&s, &target.sha.clone())
        };
        // pull_request runs read the workflows of the test merge; the rest
        // of GitHub's events read the default branch (as target.sha is).
        let mut started = false;
        for wf in workflows {
            if self.triggers(&wf, d, &target) {
                self.create_run(wf, d, target.clone(), depth);
                started = true;
            }
        }
        if !started {
            self.ignored.push((d.id, format!("{} {:?}: no workflow has this trigger", d.event, d.action())));
        }
    }

    fn target(&self, d: &Delivery) -> Option<EventTarget> {
        let s = self.gh.state();
        let main = s.branch_head("main")?;
        let default = EventTarget {
            sha: main.clone(),
            git_ref: "refs/heads/main".into(),
            head_sha: main.clone(),
            head_branch: Some("main".into()),
            pull_requests: Vec::new(),
        };
        let p = &d.payload;
        Some(match d.event.as_str() {
            "push" => {
                if p["deleted"] == json!(true) {
                    return None;
                }
                let after = p["after"].as_str()?.to_string();
                let r = p["ref"].as_str()?.to_string();
                let branch = r.strip_prefix("refs/heads/").or(r.strip_prefix("refs/tags/")).map(String::from);
                EventTarget {
                    sha: after.clone(),
                    git_ref: r,
                    head_sha: after,
                    head_branch: branch,
                    pull_requests: Vec::new(),
                }
            }
            "pull_request" | "pull_request_review" => {
                let n = p["pull_request"]["number"].as_u64()?;
                let head = p["pull_request"]["head"]["sha"].as_str()?.to_string();
                let merge = s.git.resolve(&format!("refs/pull/{n}/merge"));
                let sha = match (merge, d.action()) {
                    (Some(m), _) => m,
                    (None, Some("closed")) => head.clone(),
                    // A merge conflict: GitHub runs no pull_request workflow.
                    (None, _) => return None,
                };
                EventTarget {
                    sha,
                    git_ref: format!("refs/pull/{n}/merge"),
                    head_sha: head,
                    head_branch: p["pull_request"]["head"]["ref"].as_str().map(String::from),
                    pull_requests: vec![n],
                }
            }
            "workflow_dispatch" => {
                let r = p["ref"].as_str()?.to_string();
                let sha = s.git.resolve(&r)?;
                let branch = r.strip_prefix("refs/heads/").map(String::from);
                EventTarget {
                    sha: sha.clone(),
                    git_ref: r,
                    head_sha: sha,
                    head_branch: branch,
                    pull_requests: Vec::new(),
                }
            }
            _ => default,
        })
    }

    fn triggers(&self, wf: &Workflow, d: &Delivery, target: &EventTarget) -> bool {
        let Some(config) = wf.trigger(&d.event) else { return false };
        let config = if config.is_null() { &Value::Null } else { config };
        let p = &d.payload;
        match d.event.as_str() {
            "workflow_dispatch" => p["workflow"].as_str() == Some(wf.path.as_str()),
            "repository_dispatch" => workflow::types_match("repository_dispatch", config, d.action()),
            "push" => {
                let r = p["ref"].as_str().unwrap_or_default();
                let has = |k: &str| workflow::patterns(config, k).is_some();
                let refs_ok = if let Some(tag) = r.strip_prefix("refs/tags/") {
                    if has("tags") || has("tags-ignore") {
                        workflow::passes(config, "tags", tag)
                    } else {
                        !(has("branches") || has("branches-ignore"))
                    }
                } else {
                    let branch = r.trim_start_matches("refs/heads/");
                    if has("branches") || has("branches-ignore") {
                        workflow::passes(config, "branches", branch)
                    } else {
                        !(has("tags") || has("tags-ignore"))
                    }
                };
                refs_ok
                    && (!(has("paths") || has("paths-ignore")) || {
                        let s = self.gh.state();
                        let before = p["before"].as_str().unwrap_or_default();
                        let from = if before.chars().all(|c| c == '0') {
                            s.branch_head("main").and_then(|m| s.git.merge_base(&m, &target.sha))
                        } else {
                            Some(before.to_string())
                        };
                        workflow::paths_pass(config, &s.git.changed_files(from.as_deref(), &target.sha))
                    })
            }
            "pull_request" => {
                if !workflow::types_match("pull_request", config, d.action()) {
                    return false;
                }
                let base = p["pull_request"]["base"]["ref"].as_str().unwrap_or_default();
                if !workflow::passes(config, "branches", base) {
                    return false;
                }
                if workflow::patterns(config, "paths").is_none() && workflow::patterns(config, "paths-ignore").is_none()
                {
                    return true;
                }
                let s = self.gh.state();
                let base_sha = s.branch_head(base).unwrap_or_default();
                let from = s.git.merge_base(&base_sha, &target.head_sha);
                workflow::paths_pass(config, &s.git.changed_files(from.as_deref(), &target.head_sha))
            }
            "workflow_run" => {
                let name = p["workflow"]["name"].as_str().unwrap_or_default();
                let listed = workflow::patterns(config, "workflows").unwrap_or_default();
                listed.iter().any(|w| w == name)
                    && workflow::types_match("workflow_run", config, d.action())
                    && workflow::passes(config, "branches", p["workflow_run"]["head_branch"].as_str().unwrap_or(""))
            }
            other => workflow::types_match(other, config, d.action()),
        }
    }

    // -- runs -----------------------------------------------------------------------

    fn create_run(&mut self, wf: Workflow, d: &Delivery, target: EventTarget, depth: u8) {
        let id = self.next_run;
        self.next_run += 1;
        let number = {
            let n = self.numbers.entry(wf.file.clone()).or_default();
            *n += 1;
            *n
        };
        let (suite, now) = {
            let mut s = self.gh.state();
            let suite = s.create_check_suite("github-actions", &target.head_sha, target.head_branch.as_deref());
            (suite, s.time())
        };
        let jobs = wf
            .jobs
            .iter()
            .map(|(key, def)| JobRun {
                key: key.clone(),
                name: def.get("name").and_then(Value::as_str).unwrap_or(key).to_string(),
                state: JobState::Waiting,
                conclusion: None,
                steps: Vec::new(),
                annotations: Vec::new(),
                summary: String::new(),
                outputs: BTreeMap::new(),
                permissions: Permissions::none(),
                group: None,
                cancel_in_progress: false,
                started_at: None,
                completed_at: None,
                check_run: None,
                token: None,
            })
            .collect();
        let mut run = WorkflowRun {
            id,
            number,
            workflow: wf.file.clone(),
            name: wf.name.clone(),
            event: d.event.clone(),
            action: d.action().map(String::from),
            actor: d.sender.clone(),
            sha: target.sha.clone(),
            git_ref: target.git_ref.clone(),
            head_sha: target.head_sha.clone(),
            head_branch: target.head_branch.clone(),
            status: RunStatus::Queued,
            conclusion: None,
            jobs,
            created_at: now,
            payload: d.payload.clone(),
            group: None,
            cancel_in_progress: false,
            wf,
            check_suite: suite,
            depth,
            pull_requests: target.pull_requests,
            artifacts: BTreeMap::new(),
        };
        // Workflow-level concurrency, decided when the run is queued.
        let mut failed = None;
        if let Some((group, cancel)) = run.wf.concurrency.as_ref().and_then(workflow::concurrency) {
            let ctx = self.base_contexts(&run, None, Status::Success, &["github", "inputs", "vars"]);
            match (expr::interpolate(&group, &ctx), expr::interpolate_value(&cancel, &ctx)) {
                (Ok(g), Ok(c)) => {
                    run.group = Some(g);
                    run.cancel_in_progress = expr::truthy(&c);
                }
                (Err(e), _) | (_, Err(e)) => failed = Some(e),
            }
        }
        self.timeline.push((now, format!("run {} {} queued", run.id, run.workflow)));
        self.runs.push(run);
        let r = self.runs.len() - 1;
        self.deliver_run("requested", r);
        if let Some(why) = failed {
            self.fail_run_at_start(r, &why);
            return;
        }
        if let Some(group) = self.runs[r].group.clone() {
            let cancel = self.runs[r].cancel_in_progress;
            if !self.admit(&group, cancel, Holder::Run(r)) {
                self.runs[r].status = RunStatus::Pending;
            }
        }
    }

    fn fail_run_at_start(&mut self, r: usize, why: &str) {
        let path = self.runs[r].wf.path.clone();
        for j in &mut self.runs[r].jobs {
            j.state = JobState::Completed;
            j.conclusion = Some("failure".into());
            j.annotations.push(Annotation {
                level: "error".into(),
                message: why.into(),
                title: None,
                file: Some(path.clone()),
                line: None,
            });
        }
        self.complete_run(r);
    }

    fn deliver_run(&mut self, action: &str, r: usize) {
        let run = &self.runs[r];
        let facts = WorkflowRunFacts {
            id: run.id,
            name: run.name.clone(),
            path: run.wf.path.clone(),
            event: run.event.clone(),
            head_sha: run.head_sha.clone(),
            head_branch: run.head_branch.clone(),
            status: match run.status {
                RunStatus::Completed => "completed".into(),
                RunStatus::InProgress => "in_progress".into(),
                _ => "queued".into(),
            },
            conclusion: run.conclusion.clone(),
            actor: run.actor.clone(),
            run_number: run.number,
            check_suite: run.check_suite,
            created_at: super::fake_github::stamp(run.created_at),
            pull_requests: run.pull_requests.clone(),
        };
        self.gh.state().deliver_workflow_run(action, &facts);
    }

    /// Who holds `group`: a run in progress (workflow-level) or a job
    /// admitted or in progress (job-level).
    fn holder(&self, group: &str) -> Option<Holder> {
        for (r, run) in self.runs.iter().enumerate() {
            if run.group.as_deref() == Some(group) && matches!(run.status, RunStatus::Queued | RunStatus::InProgress) {
                return Some(Holder::Run(r));
            }
            for (j, job) in run.jobs.iter().enumerate() {
                if job.group.as_deref() == Some(group)
                    && matches!(job.state, JobState::Ready | JobState::InProgress { .. })
                {
                    return Some(Holder::Job(r, j));
                }
            }
        }
        None
    }

    fn pending(&self, group: &str) -> Option<Holder> {
        for (r, run) in self.runs.iter().enumerate() {
            if run.group.as_deref() == Some(group) && run.status == RunStatus::Pending {
                return Some(Holder::Run(r));
            }
            for (j, job) in run.jobs.iter().enumerate() {
                if job.group.as_deref() == Some(group) && job.state == JobState::Pending {
                    return Some(Holder::Job(r, j));
                }
            }
        }
        None
    }

    /// GitHub's concurrency: `me` may go (true) or waits pending (false);
    /// an older pending one is cancelled, and with `cancel-in-progress`
    /// the one in progress too.
    fn admit(&mut self, group: &str, cancel_in_progress: bool, me: Holder) -> bool {
        if let Some(older) = self.pending(group).filter(|p| *p != me) {
            self.timeline
                .push((self.gh.state().time(), format!("a newer run in `{group}` cancels the pending {older:?}")));
            self.cancel(older);
        }
        match self.holder(group).filter(|h| *h != me) {
            Some(h) if cancel_in_progress => {
                self.cancel(h);
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    fn cancel(&mut self, h: Holder) {
        match h {
            Holder::Run(r) => {
                for j in 0..self.runs[r].jobs.len() {
                    if self.runs[r].jobs[j].state != JobState::Completed {
                        self.conclude_job(r, j, "cancelled");
                    }
                }
                self.runs[r].status = RunStatus::InProgress;
                self.complete_run(r);
            }
            Holder::Job(r, j) => {
                self.conclude_job(r, j, "cancelled");
                self.maybe_complete_run(r);
            }
        }
    }

    /// Jobs whose needs are done: their `if:`, then their group.
    fn admit_waiting_jobs(&mut self) {
        loop {
            let mut changed = false;
            for r in 0..self.runs.len() {
                if !matches!(self.runs[r].status, RunStatus::Queued | RunStatus::InProgress) {
                    continue;
                }
                for j in 0..self.runs[r].jobs.len() {
                    if self.runs[r].jobs[j].state != JobState::Waiting {
                        continue;
                    }
                    let def = self.runs[r].wf.jobs[j].1.clone();
                    let needs = workflow::needs(&def);
                    let done: Vec<&JobRun> = self.runs[r].jobs.iter().filter(|x| needs.contains(&x.key)).collect();
                    if done.len() < needs.len() || done.iter().any(|x| x.state != JobState::Completed) {
                        continue;
                    }
                    changed = true;
                    let status = if done.iter().all(|x| x.conclusion.as_deref() == Some("success")) {
                        Status::Success
                    } else {
                        Status::Failure
                    };
                    self.admit_job(r, j, &def, status);
                }
            }
            if !changed {
                return;
            }
        }
    }

    fn admit_job(&mut self, r: usize, j: usize, def: &Value, status: Status) {
        let key = self.runs[r].jobs[j].key.clone();
        for unsupported in ["strategy", "container", "services", "uses"] {
            if def.get(unsupported).is_some() {
                self.unsupported.push(format!("{}: job `{key}` uses `{unsupported}:`", self.runs[r].workflow));
                self.fail_job_at_start(r, j, &format!("the test runner does not implement `{unsupported}:`"));
                return;
            }
        }
        let ctx = self.base_contexts(&self.runs[r], Some(j), status, &["github", "needs", "vars", "inputs"]);
        let cond = match def.get("if") {
            Some(Value::Bool(b)) => Ok(*b && status == Status::Success),
            Some(v) => expr::condition(&expr::to_string(v), &ctx),
            None => expr::condition("success()", &ctx),
        };
        match cond {
            Err(e) => return self.fail_job_at_start(r, j, &e),
            Ok(false) => {
                self.conclude_job(r, j, "skipped");
                self.maybe_complete_run(r);
                return;
            }
            Ok(true) => {}
        }
        let ctx = self.base_contexts(
            &self.runs[r],
            Some(j),
            status,
            &["github", "needs", "vars", "inputs", "strategy", "matrix"],
        );
        if let Ok(name) = expr::interpolate(&self.runs[r].jobs[j].name, &ctx) {
            self.runs[r].jobs[j].name = name;
        }
        if let Some((group, cancel)) = def.get("concurrency").and_then(workflow::concurrency) {
            match (expr::interpolate(&group, &ctx), expr::interpolate_value(&cancel, &ctx)) {
                (Ok(g), Ok(c)) => {
                    self.runs[r].jobs[j].group = Some(g.clone());
                    self.runs[r].jobs[j].cancel_in_progress = expr::truthy(&c);
                    if !self.admit(&g, expr::truthy(&c), Holder::Job(r, j)) {
                        self.runs[r].jobs[j].state = JobState::Pending;
                        return;
                    }
                }
                (Err(e), _) | (_, Err(e)) => return self.fail_job_at_start(r, j, &e),
            }
        }
        self.runs[r].jobs[j].state = JobState::Ready;
    }

    fn fail_job_at_start(&mut self, r: usize, j: usize, why: &str) {
        let path = self.runs[r].wf.path.clone();
        self.runs[r].jobs[j].annotations.push(Annotation {
            level: "error".into(),
            message: why.into(),
            title: None,
            file: Some(path),
            line: None,
        });
        self.conclude_job(r, j, "failure");
        self.maybe_complete_run(r);
    }

    fn ready_job(&self) -> Option<(usize, usize)> {
        for (r, run) in self.runs.iter().enumerate() {
            for (j, job) in run.jobs.iter().enumerate() {
                if job.state == JobState::Ready {
                    return Some((r, j));
                }
            }
        }
        None
    }

    /// Ends a job that never ran (skipped, cancelled, failed at start) or
    /// one whose time is up; its check run says so.
    fn conclude_job(&mut self, r: usize, j: usize, conclusion: &str) {
        let now = self.gh.state().time();
        let suite = self.runs[r].check_suite;
        let job = &mut self.runs[r].jobs[j];
        job.state = JobState::Completed;
        job.conclusion = Some(conclusion.into());
        job.completed_at = Some(now);
        let (check, name, annotations) = (job.check_run, job.name.clone(), job.annotations.len());
        if let Some(token) = job.token.take() {
            self.gh.state().revoke(&token);
        }
        let mut s = self.gh.state();
        let check = check.unwrap_or_else(|| s.start_check_run(suite, &name, None));
        s.complete_check_run(check, conclusion, None, None, annotations);
        drop(s);
        self.release(r, Some(j));
    }

    fn finish_job(&mut self, r: usize, j: usize) {
        let JobState::InProgress { conclusion, .. } = self.runs[r].jobs[j].state.clone() else { return };
        let what = format!("run {} job {} ends: {conclusion}", self.runs[r].id, self.runs[r].jobs[j].key);
        self.timeline.push((self.gh.state().time(), what));
        self.conclude_job(r, j, &conclusion);
        self.maybe_complete_run(r);
    }

    /// A finished job (or run) frees its group: the pending one goes.
    fn release(&mut self, r: usize, j: Option<usize>) {
        let group = match j {
            Some(j) => self.runs[r].jobs[j].group.clone(),
            None => self.runs[r].group.clone(),
        };
        let Some(group) = group else { return };
        if self.holder(&group).is_some() {
            return;
        }
        match self.pending(&group) {
            Some(Holder::Run(p)) => self.runs[p].status = RunStatus::Queued,
            Some(Holder::Job(p, q)) => self.runs[p].jobs[q].state = JobState::Ready,
            None => {}
        }
    }

    fn maybe_complete_run(&mut self, r: usize) {
        if self.runs[r].status != RunStatus::Completed
            && self.runs[r].jobs.iter().all(|j| j.state == JobState::Completed)
        {
            self.complete_run(r);
        }
    }

    fn complete_run(&mut self, r: usize) {
        let conclusions: Vec<String> = self.runs[r].jobs.iter().filter_map(|j| j.conclusion.clone()).collect();
        let conclusion = if conclusions.iter().any(|c| c == "cancelled") {
            "cancelled"
        } else if conclusions.iter().any(|c| c == "failure") {
            "failure"
        } else {
            "success"
        };
        self.runs[r].status = RunStatus::Completed;
        self.runs[r].conclusion = Some(conclusion.into());
        let suite = self.runs[r].check_suite;
        self.gh.state().complete_check_suite(suite);
        let what = format!("run {} {} completed: {conclusion}", self.runs[r].id, self.runs[r].workflow);
        self.timeline.push((self.gh.state().time(), what));
        self.deliver_run("completed", r);
        self.release(r, None);
    }

    // -- contexts ---------------------------------------------------------------------

    /// The named values a place offers, from `names`.
    fn base_contexts(&self, run: &WorkflowRun, job: Option<usize>, status: Status, names: &[&str]) -> Contexts {
        let mut ctx = Contexts::new(status);
        let token = job.and_then(|j| run.jobs[j].token.clone()).unwrap_or_default();
        let job_key = job.map(|j| run.jobs[j].key.clone()).unwrap_or_default();
        for name in names {
            let v = match *name {
                "github" => self.github_context(run, &job_key, &token),
                "inputs" => inputs_context(run),
                "vars" => json!(self.vars),
                "secrets" => {
                    let mut m: Map<String, Value> = self.secrets.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                    m.insert("GITHUB_TOKEN".into(), json!(token));
                    Value::Object(m)
                }
                "needs" => {
                    let def = job.map(|j| run.wf.jobs[j].1.clone()).unwrap_or(Value::Null);
                    let mut m = Map::new();
                    for need in workflow::needs(&def) {
                        if let Some(x) = run.jobs.iter().find(|x| x.key == need) {
                            m.insert(need, json!({ "result": x.conclusion, "outputs": x.outputs }));
                        }
                    }
                    Value::Object(m)
                }
                "strategy" => json!({ "fail-fast": true, "job-index": 0, "job-total": 1, "max-parallel": 1 }),
                "matrix" => json!({}),
                _ => continue,
            };
            ctx.set(name, v);
        }
        ctx
    }

    fn github_context(&self, run: &WorkflowRun, job: &str, token: &str) -> Value {
        let (url, _) = (self.gh.url.clone(), ());
        let ref_name = run.git_ref.rsplit_once("refs/heads/").map(|(_, b)| b.to_string()).unwrap_or_else(|| {
            run.git_ref
                .strip_prefix("refs/tags/")
                .map(String::from)
                .unwrap_or_else(|| run.git_ref.trim_start_matches("refs/pull/").to_string())
        });
        let (head_ref, base_ref) = match run.event.as_str() {
            "pull_request" | "pull_request_review" => (
                run.payload["pull_request"]["head"]["ref"].as_str().unwrap_or("").to_string(),
                run.payload["pull_request"]["base"]["ref"].as_str().unwrap_or("").to_string(),
            ),
            _ => (String::new(), String::new()),
        };
        json!({
            "event": run.payload,
            "event_name": run.event,
            "sha": run.sha,
            "ref": run.git_ref,
            "ref_name": ref_name,
            "ref_type": if run.git_ref.starts_with("refs/tags/") { "tag" } else { "branch" },
            "ref_protected": false,
            "head_ref": head_ref,
            "base_ref": base_ref,
            "repository": format!("{OWNER}/{REPO}"),
            "repository_owner": OWNER,
            "repository_id": "4242",
            "repositoryUrl": format!("git://{}/{OWNER}/{REPO}.git", url.trim_start_matches("http://")),
            "run_id": run.id.to_string(),
            "run_number": run.number.to_string(),
            "run_attempt": "1",
            "retention_days": "90",
            "actor": run.actor,
            "triggering_actor": run.actor,
            "workflow": run.name,
            "workflow_ref": format!("{OWNER}/{REPO}/{}@{}", run.wf.path, run.git_ref),
            "job": job,
            "server_url": url,
            "api_url": url,
            "graphql_url": format!("{url}/graphql"),
            "token": token,
            "workspace": "",
            "action": "",
            "secret_source": "Actions",
        })
    }

    fn duration_of(&self, workflow: &str, job: &str) -> Duration {
        self.durations
            .iter()
            .rev()
            .find(|(w, j, _)| w == workflow && j == job)
            .map(|(_, _, d)| *d)
            .unwrap_or(self.job_duration)
    }

    // -- a job ------------------------------------------------------------------------

    async fn start_job(&mut self, r: usize, j: usize) {
        let start = self.gh.state().time();
        let def = self.runs[r].wf.jobs[j].1.clone();
        // The job's token: its permissions, GitHub's rules.
        let permissions = match def.get("permissions").or(self.runs[r].wf.permissions.as_ref()) {
            Some(block) => workflow::permissions(block),
            None => Ok(self.default_permissions.clone()),
        };
        let permissions = match permissions {
            Ok(p) => p,
            Err(e) => return self.fail_job_at_start(r, j, &e),
        };
        let (token, check) = {
            let mut s = self.gh.state();
            let token = s.mint_token(ACTIONS_BOT, permissions.clone(), true);
            let html = format!("{}/{OWNER}/{REPO}/actions/runs/{}/job/{}", self.gh.url, self.runs[r].id, j + 1);
            let name = self.runs[r].jobs[j].name.clone();
            let check = s.start_check_run(self.runs[r].check_suite, &name, Some(&html));
            (token, check)
        };
        if self.runs[r].status == RunStatus::Queued {
            self.runs[r].status = RunStatus::InProgress;
            self.deliver_run("in_progress", r);
        }
        {
            let job = &mut self.runs[r].jobs[j];
            job.permissions = permissions;
            job.token = Some(token.clone());
            job.check_run = Some(check);
            job.started_at = Some(start);
            job.state = JobState::InProgress { until: start, conclusion: "success".into() };
        }
        self.timeline.push((start, format!("run {} job {} starts", self.runs[r].id, self.runs[r].jobs[j].key)));
        let conclusion = self.execute(r, j, &def, &token).await;
        let now = self.gh.state().time();
        let d = self.duration_of(&self.runs[r].workflow.clone(), &self.runs[r].jobs[j].key.clone());
        let until = (start + chrono::Duration::from_std(d).unwrap()).max(now);
        self.runs[r].jobs[j].state = JobState::InProgress { until, conclusion };
    }

    /// Runs the steps of job `j`; returns its conclusion.
    async fn execute(&mut self, r: usize, j: usize, def: &Value, token: &str) -> String {
        let dir = self.work.path().join(format!("{}-{}", self.runs[r].id, self.runs[r].jobs[j].key));
        let (workspace, temp, home, files) =
            (dir.join("workspace"), dir.join("temp"), dir.join("home"), dir.join("files"));
        for d in [&workspace, &temp, &home, &files] {
            std::fs::create_dir_all(d).unwrap();
        }
        let event_path = temp.join("_github_workflow").join("event.json");
        std::fs::create_dir_all(event_path.parent().unwrap()).unwrap();
        std::fs::write(&event_path, serde_json::to_vec_pretty(&self.runs[r].payload).unwrap()).unwrap();

        let mut job = JobExec {
            workspace: workspace.clone(),
            temp: temp.clone(),
            files,
            env: BTreeMap::new(),
            file_env: BTreeMap::new(),
            paths: Vec::new(),
            commands: step::Commands::default(),
            steps_ctx: Map::new(),
            failed: false,
        };
        job.commands.masks.push(token.to_string());
        job.commands.masks.extend(self.secrets.values().filter(|v| !v.is_empty()).cloned());
        let run = &self.runs[r];
        let job_key = run.jobs[j].key.clone();
        let base = [
            ("CI", "true".to_string()),
            ("GITHUB_ACTIONS", "true".into()),
            ("GITHUB_ACTION_REPOSITORY", String::new()),
            ("GITHUB_ACTOR", run.actor.clone()),
            ("GITHUB_TRIGGERING_ACTOR", run.actor.clone()),
            ("GITHUB_API_URL", self.gh.url.clone()),
            ("GITHUB_SERVER_URL", self.gh.url.clone()),
            ("GITHUB_GRAPHQL_URL", format!("{}/graphql", self.gh.url)),
            ("GITHUB_EVENT_NAME", run.event.clone()),
            ("GITHUB_EVENT_PATH", event_path.display().to_string()),
            ("GITHUB_JOB", job_key.clone()),
            ("GITHUB_REF", run.git_ref.clone()),
            ("GITHUB_SHA", run.sha.clone()),
            ("GITHUB_REPOSITORY", format!("{OWNER}/{REPO}")),
            ("GITHUB_REPOSITORY_OWNER", OWNER.into()),
            ("GITHUB_RUN_ID", run.id.to_string()),
            ("GITHUB_RUN_NUMBER", run.number.to_string()),
            ("GITHUB_RUN_ATTEMPT", "1".into()),
            ("GITHUB_WORKFLOW", run.name.clone()),
            ("GITHUB_WORKFLOW_REF", format!("{OWNER}/{REPO}/{}@{}", run.wf.path, run.git_ref)),
            ("GITHUB_WORKSPACE", workspace.display().to_string()),
            ("RUNNER_TEMP", temp.display().to_string()),
            ("RUNNER_TOOL_CACHE", dir.join("tool-cache").display().to_string()),
            ("RUNNER_OS", "Linux".into()),
            ("RUNNER_ARCH", "X64".into()),
            ("RUNNER_NAME", "fake-runner".into()),
            ("RUNNER_ENVIRONMENT", "github-hosted".into()),
            ("HOME", home.display().to_string()),
            ("PATH", std::env::var("PATH").unwrap_or_default()),
        ];
        job.env = base.into_iter().map(|(k, v)| (k.to_string(), v)).collect();

        // env: the workflow's, then the job's (which may read the workflow's).
        let mut env_ctx = Map::new();
        let status = Status::Success;
        let mut ctx = self.base_contexts(
            run,
            Some(j),
            status,
            &["github", "inputs", "vars", "secrets", "needs", "strategy", "matrix"],
        );
        let mut env_error = None;
        for (source, entries) in [
            ("workflow", run.wf.env.clone()),
            ("job", def.get("env").and_then(Value::as_object).cloned().unwrap_or_default()),
        ] {
            ctx.set("env", Value::Object(env_ctx.clone()));
            for (k, v) in entries {
                match expr::interpolate_value(&v, &ctx) {
                    Ok(v) => {
                        env_ctx.insert(k, json!(expr::to_string(&v)));
                    }
                    Err(e) => env_error = Some(format!("{source} env `{k}`: {e}")),
                }
            }
        }
        let defaults = def.get("defaults").cloned().filter(|d| !d.is_null()).unwrap_or(run.wf.defaults.clone());
        let steps: Vec<Value> = def.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
        let workflow_file = run.workflow.clone();
        let runner_ctx = json!({
            "os": "Linux", "arch": "X64", "name": "fake-runner", "environment": "github-hosted",
            "temp": temp.display().to_string(), "tool_cache": dir.join("tool-cache").display().to_string(),
            "debug": "",
        });
        if let Some(e) = env_error {
            self.runs[r].jobs[j].annotations.push(Annotation {
                level: "error".into(),
                message: e,
                title: None,
                file: None,
                line: None,
            });
            return "failure".into();
        }

        for (index, step_def) in steps.iter().enumerate() {
            let status = if job.failed { Status::Failure } else { Status::Success };
            let run = &self.runs[r];
            let mut ctx =
                self.base_contexts(run, Some(j), status, &["github", "inputs", "vars", "needs", "strategy", "matrix"]);
            let mut github = ctx.values["github"].clone();
            github["workspace"] = json!(workspace.display().to_string());
            github["event_path"] = json!(event_path.display().to_string());
            ctx.set("github", github);
            let mut env_now = env_ctx.clone();
            for (k, v) in &job.file_env {
                env_now.insert(k.clone(), json!(v));
            }
            ctx.set("env", Value::Object(env_now.clone()));
            ctx.set("steps", Value::Object(job.steps_ctx.clone()));
            ctx.set("runner", runner_ctx.clone());
            ctx.set("job", json!({ "status": if job.failed { "failure" } else { "success" } }));
            let id = step_def.get("id").and_then(Value::as_str).map(String::from);
            let uses = step_def.get("uses").and_then(Value::as_str).map(String::from);
            let run_text = step_def.get("run").and_then(Value::as_str).map(String::from);
            let default_name = match (&uses, &run_text) {
                (Some(u), _) => format!("Run {u}"),
                (None, Some(t)) => format!("Run {}", t.lines().next().unwrap_or_default()),
                _ => format!("step {index}"),
            };
            // `if:` sees no secrets.
            let cond = match step_def.get("if") {
                Some(Value::Bool(b)) => Ok(*b && status == Status::Success),
                Some(v) => expr::condition(&expr::to_string(v), &ctx),
                None => expr::condition("success()", &ctx),
            };
            ctx.set("secrets", self.base_contexts(run, Some(j), status, &["secrets"]).values["secrets"].clone());
            let name = step_def
                .get("name")
                .and_then(Value::as_str)
                .map(|n| expr::interpolate(n, &ctx).unwrap_or_else(|_| n.to_string()))
                .unwrap_or(default_name);
            let mut record = StepRecord {
                name,
                id: id.clone(),
                outcome: "skipped".into(),
                conclusion: "skipped".into(),
                log: String::new(),
                outputs: BTreeMap::new(),
            };
            match cond {
                Err(e) => {
                    self.annotate(r, j, "error", &e);
                    record.outcome = "failure".into();
                    record.conclusion = "failure".into();
                    job.failed = true;
                }
                Ok(false) => {}
                Ok(true) => {
                    let mut step_env = env_now.clone();
                    let mut error = None;
                    for (k, v) in step_def.get("env").and_then(Value::as_object).cloned().unwrap_or_default() {
                        match expr::interpolate_value(&v, &ctx) {
                            Ok(v) => {
                                step_env.insert(k, json!(expr::to_string(&v)));
                            }
                            Err(e) => error = Some(format!("step env `{k}`: {e}")),
                        }
                    }
                    let with = match step_def.get("with").map(|w| expr::interpolate_value(w, &ctx)) {
                        Some(Ok(w)) => w,
                        Some(Err(e)) => {
                            error = Some(format!("`with`: {e}"));
                            Value::Null
                        }
                        None => Value::Null,
                    };
                    let outcome = if let Some(e) = error {
                        self.annotate(r, j, "error", &e);
                        Err(e)
                    } else if let Some(text) = &run_text {
                        match expr::interpolate(text, &ctx) {
                            Ok(script) => {
                                self.run_script(&mut job, r, j, &script, step_def, &defaults, &step_env, &mut record)
                                    .await
                            }
                            Err(e) => {
                                self.annotate(r, j, "error", &e);
                                Err(e)
                            }
                        }
                    } else if let Some(uses) = &uses {
                        self.use_action(&mut job, r, j, uses, &with, token, &mut record).await
                    } else {
                        Err("a step needs `run` or `uses`".into())
                    };
                    record.outcome = if outcome.is_ok() { "success" } else { "failure" }.into();
                    let continue_on_error = step_def.get("continue-on-error").is_some_and(expr::truthy);
                    record.conclusion = if outcome.is_ok() || continue_on_error { "success" } else { "failure" }.into();
                    if record.conclusion == "failure" {
                        job.failed = true;
                    }
                }
            }
            if let Some(id) = &id {
                job.steps_ctx.insert(
                    id.clone(),
                    json!({ "outputs": record.outputs, "outcome": record.outcome, "conclusion": record.conclusion }),
                );
            }
            self.runs[r].jobs[j].steps.push(record);
        }

        // Job outputs, masked values refused as GitHub does.
        let run = &self.runs[r];
        let mut ctx = self.base_contexts(
            run,
            Some(j),
            Status::Success,
            &["github", "inputs", "vars", "secrets", "needs", "strategy", "matrix"],
        );
        ctx.set("steps", Value::Object(job.steps_ctx.clone()));
        ctx.set("env", Value::Object(env_ctx));
        ctx.set("runner", runner_ctx);
        ctx.set("job", json!({ "status": if job.failed { "failure" } else { "success" } }));
        let mut outputs = BTreeMap::new();
        for (k, v) in def.get("outputs").and_then(Value::as_object).cloned().unwrap_or_default() {
            match expr::interpolate(&expr::to_string(&v), &ctx) {
                Ok(value) if job.commands.mask(&value) != value => {
                    self.annotate(r, j, "warning", &format!("Skip output '{k}' since it may contain secret."));
                }
                Ok(value) => {
                    outputs.insert(k, value);
                }
                Err(e) => self.annotate(r, j, "error", &e),
            }
        }
        let annotations = std::mem::take(&mut job.commands.annotations);
        let jr = &mut self.runs[r].jobs[j];
        jr.outputs = outputs;
        jr.annotations.extend(annotations);
        let _ = workflow_file;
        if job.failed { "failure".into() } else { "success".into() }
    }

    fn annotate(&mut self, r: usize, j: usize, level: &str, message: &str) {
        self.runs[r].jobs[j].annotations.push(Annotation {
            level: level.into(),
            message: message.into(),
            title: None,
            file: None,
            line: None,
        });
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_script(
        &mut self,
        job: &mut JobExec,
        r: usize,
        j: usize,
        script: &str,
        step_def: &Value,
        defaults: &Value,
        step_env: &Map<String, Value>,
        record: &mut StepRecord,
    ) -> Result<(), String> {
        let n = self.runs[r].jobs[j].steps.len();
        let workdir = step_def
            .get("working-directory")
            .or(defaults.get("run").and_then(|d| d.get("working-directory")))
            .and_then(Value::as_str)
            .map(|d| job.workspace.join(d))
            .unwrap_or(job.workspace.clone());
        if script.trim() == BUILD_WARD {
            // The one build ward's workflows make: the test's binary instead.
            let target = workdir.join("target").join("release");
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            let dest = target.join("ward");
            if std::fs::hard_link(&self.ward, &dest).is_err() {
                std::fs::copy(&self.ward, &dest).map_err(|e| format!("copy ward: {e}"))?;
            }
            record.log =
                format!("the test runner placed its prebuilt ward at {} instead of building it\n", dest.display());
            return Ok(());
        }
        let shell = step_def
            .get("shell")
            .or(defaults.get("run").and_then(|d| d.get("shell")))
            .and_then(Value::as_str)
            .unwrap_or("bash")
            .to_string();
        let file = job.temp.join(format!("step-{n}.sh"));
        std::fs::write(&file, script).map_err(|e| e.to_string())?;
        let mut cmd = match shell.as_str() {
            "bash" => {
                let mut c = std::process::Command::new("bash");
                c.args(["--noprofile", "--norc", "-eo", "pipefail"]).arg(&file);
                c
            }
            "sh" => {
                let mut c = std::process::Command::new("sh");
                c.arg("-e").arg(&file);
                c
            }
            other => {
                self.unsupported.push(format!("`shell: {other}`"));
                return Err(format!("the test runner does not implement `shell: {other}`"));
            }
        };
        let files = job.step_files(n);
        cmd.current_dir(&workdir).env_clear();
        let mut env = job.env.clone();
        let path = job.paths.iter().rev().cloned().chain([env["PATH"].clone()]).collect::<Vec<_>>().join(":");
        env.insert("PATH".into(), path);
        for (k, v) in &job.file_env {
            env.insert(k.clone(), v.clone());
        }
        for (k, v) in step_env {
            env.insert(k.clone(), expr::to_string(v));
        }
        for (k, p) in &files {
            env.insert(k.to_string(), p.display().to_string());
        }
        cmd.envs(&env);
        let (code, raw) = tokio::task::spawn_blocking(move || step::run_process(cmd, STEP_LIMIT)).await.unwrap();
        let before = job.commands.annotations.len();
        record.log = job.commands.process(&raw);
        let new_annotations: Vec<Annotation> = job.commands.annotations.drain(before..).collect();
        self.runs[r].jobs[j].annotations.extend(new_annotations);
        record.outputs.extend(std::mem::take(&mut job.commands.outputs));
        let read = |k: &str| std::fs::read_to_string(&files[k]).unwrap_or_default();
        match step::parse_file_commands(&read("GITHUB_OUTPUT")) {
            Ok(pairs) => record.outputs.extend(pairs),
            Err(e) => return Err(format!("GITHUB_OUTPUT: {e}")),
        }
        match step::parse_file_commands(&read("GITHUB_ENV")) {
            Ok(pairs) => {
                for (k, v) in pairs {
                    if k == "NODE_OPTIONS" || k.starts_with("GITHUB_") && k != "GITHUB_TOKEN" {
                        self.annotate(
                            r,
                            j,
                            "warning",
                            &format!("Can't store {k} output parameter using '$GITHUB_ENV' command."),
                        );
                        continue;
                    }
                    job.file_env.insert(k, v);
                }
            }
            Err(e) => return Err(format!("GITHUB_ENV: {e}")),
        }
        job.paths.extend(read("GITHUB_PATH").lines().filter(|l| !l.trim().is_empty()).map(String::from));
        let summary = read("GITHUB_STEP_SUMMARY");
        if !summary.is_empty() {
            let masked = job.commands.mask(&summary);
            self.runs[r].jobs[j].summary.push_str(&masked);
        }
        if let Some(why) = job.commands.failed.take() {
            return Err(why);
        }
        if code != 0 {
            self.annotate(r, j, "error", &format!("Process completed with exit code {code}."));
            return Err(format!("exit code {code}"));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn use_action(
        &mut self,
        job: &mut JobExec,
        r: usize,
        j: usize,
        uses: &str,
        with: &Value,
        token: &str,
        record: &mut StepRecord,
    ) -> Result<(), String> {
        let name = uses.split('@').next().unwrap_or(uses).to_lowercase();
        let input = |k: &str| with.get(k).map(expr::to_string);
        let result = match name.as_str() {
            "actions/checkout" => self.checkout(job, r, &input, token).await,
            "actions/upload-artifact" => self.upload_artifact(job, r, &input),
            "actions/download-artifact" => self.download_artifact(job, r, &input),
            "actions/cache" | "actions/cache/restore" => {
                record.outputs.insert("cache-hit".into(), "false".into());
                Ok(format!("Cache not found for input keys: {}\n", input("key").unwrap_or_default()))
            }
            _ => {
                self.unsupported.push(format!("{}: `uses: {uses}`", self.runs[r].workflow));
                Err(format!("the test runner does not implement the action `{uses}`"))
            }
        };
        match result {
            Ok(log) => {
                record.log = job.commands.mask(&log);
                Ok(())
            }
            Err(e) => {
                record.log = job.commands.mask(&e);
                self.annotate(r, j, "error", &job.commands.mask(&e));
                Err(e)
            }
        }
    }

    /// actions/checkout: a real clone over smart HTTP with the job's token.
    async fn checkout(
        &mut self,
        job: &JobExec,
        r: usize,
        input: &dyn Fn(&str) -> Option<String>,
        token: &str,
    ) -> Result<String, String> {
        if let Some(repo) = input("repository").filter(|x| !x.is_empty() && *x != format!("{OWNER}/{REPO}")) {
            self.unsupported.push(format!("actions/checkout of another repository ({repo})"));
            return Err(format!("the test runner checks out {OWNER}/{REPO} only, not {repo}"));
        }
        for unsupported in ["sparse-checkout", "lfs", "submodules"] {
            if input(unsupported).is_some_and(|v| !v.is_empty() && v != "false") {
                self.unsupported.push(format!("actions/checkout with `{unsupported}`"));
                return Err(format!("the test runner does not implement checkout's `{unsupported}`"));
            }
        }
        let token = input("token").filter(|t| !t.is_empty()).unwrap_or_else(|| token.to_string());
        let persist = input("persist-credentials").is_none_or(|p| p != "false");
        let depth: u32 = input("fetch-depth").and_then(|d| d.parse().ok()).unwrap_or(1);
        let dest = job.workspace.join(input("path").unwrap_or_default());
        let run = &self.runs[r];
        let (sha, git_ref) = match input("ref").filter(|x| !x.is_empty()) {
            Some(x) => {
                let resolved = self
                    .gh
                    .state()
                    .git
                    .resolve(&x)
                    .ok_or_else(|| format!("A branch or tag with the name '{x}' could not be found"))?;
                let full = if x.starts_with("refs/") || resolved == x { x } else { format!("refs/heads/{x}") };
                (resolved, full)
            }
            None => (run.sha.clone(), run.git_ref.clone()),
        };
        let (target, branch) = if let Some(b) = git_ref.strip_prefix("refs/heads/") {
            (format!("refs/remotes/origin/{b}"), Some(b.to_string()))
        } else if let Some(p) = git_ref.strip_prefix("refs/pull/") {
            (format!("refs/remotes/pull/{p}"), None)
        } else if git_ref.starts_with("refs/tags/") {
            (git_ref.clone(), None)
        } else {
            (format!("refs/remotes/origin/{sha}"), None)
        };
        let server = format!("{}/", self.gh.url);
        let remote = self.gh.git_url();
        let basic = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
        };
        let header_key = format!("http.{server}.extraheader");
        let mut cmds: Vec<Vec<String>> = vec![
            vec!["init".into(), "-q".into(), dest.display().to_string()],
            vec!["-C".into(), dest.display().to_string(), "remote".into(), "add".into(), "origin".into(), remote],
            vec![
                "-C".into(),
                dest.display().to_string(),
                "config".into(),
                "--local".into(),
                header_key.clone(),
                format!("AUTHORIZATION: basic {basic}"),
            ],
        ];
        let mut fetch = vec![
            "-C".to_string(),
            dest.display().to_string(),
            "-c".into(),
            "protocol.version=2".into(),
            "fetch".into(),
            "--no-tags".into(),
            "--prune".into(),
            "--no-recurse-submodules".into(),
        ];
        if depth > 0 {
            fetch.push(format!("--depth={depth}"));
            fetch.extend(["origin".to_string(), format!("+{sha}:{target}")]);
        } else {
            fetch.extend([
                "origin".to_string(),
                "+refs/heads/*:refs/remotes/origin/*".into(),
                "+refs/tags/*:refs/tags/*".into(),
                format!("+{sha}:{target}"),
            ]);
        }
        cmds.push(fetch);
        cmds.push(match &branch {
            Some(b) => vec![
                "-C".into(),
                dest.display().to_string(),
                "checkout".into(),
                "-q".into(),
                "--force".into(),
                "-B".into(),
                b.clone(),
                target.clone(),
            ],
            None => vec![
                "-C".into(),
                dest.display().to_string(),
                "checkout".into(),
                "-q".into(),
                "--force".into(),
                target.clone(),
            ],
        });
        if !persist {
            cmds.push(vec![
                "-C".into(),
                dest.display().to_string(),
                "config".into(),
                "--local".into(),
                "--unset-all".into(),
                header_key,
            ]);
        }
        let env = job.env.clone();
        let mut log = String::new();
        for args in cmds {
            let mut cmd = std::process::Command::new("git");
            cmd.args(&args).env_clear().envs(&env).env("GIT_TERMINAL_PROMPT", "0");
            let shown = format!(
                "git {}\n",
                args.iter().filter(|a| !a.starts_with("AUTHORIZATION")).cloned().collect::<Vec<_>>().join(" ")
            );
            let (code, out) = tokio::task::spawn_blocking(move || step::run_process(cmd, STEP_LIMIT)).await.unwrap();
            log.push_str(&shown);
            log.push_str(&out);
            if code != 0 {
                return Err(format!("{log}The process 'git' failed with exit code {code}"));
            }
        }
        Ok(log)
    }

    fn upload_artifact(
        &mut self,
        job: &JobExec,
        r: usize,
        input: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let name = input("name").filter(|n| !n.is_empty()).unwrap_or_else(|| "artifact".into());
        if let Some(bad) = name.chars().find(|c| "\":<>|*?\r\n\\/".contains(*c)) {
            return Err(format!("The artifact name is not valid: {name}. Contains the following character: {bad:?}"));
        }
        let hidden = input("include-hidden-files").is_some_and(|v| v == "true");
        let overwrite = input("overwrite").is_some_and(|v| v == "true");
        let missing = input("if-no-files-found").unwrap_or_else(|| "warn".into());
        let paths: Vec<String> =
            input("path").unwrap_or_default().lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
        if paths.iter().any(|p| p.contains(['*', '?', '[']) || p.starts_with('!')) {
            self.unsupported.push("actions/upload-artifact with patterns".into());
            return Err("the test runner uploads plain paths only".into());
        }
        let mut found: Vec<(PathBuf, PathBuf)> = Vec::new();
        for p in &paths {
            let abs = if Path::new(p).is_absolute() { PathBuf::from(p) } else { job.workspace.join(p) };
            if abs.is_file() {
                found.push((abs.clone(), PathBuf::from(abs.file_name().unwrap())));
            } else if abs.is_dir() {
                collect_files(&abs, &abs, hidden, &mut found);
            }
        }
        if found.is_empty() {
            let text = format!(
                "No files were found with the provided path: {}. No artifacts will be uploaded.",
                paths.join(", ")
            );
            return match missing.as_str() {
                "error" => Err(text),
                "ignore" => Ok(format!("{text}\n")),
                _ => {
                    let n = self.runs[r]
                        .jobs
                        .iter()
                        .position(|x| x.state != JobState::Completed && x.started_at.is_some())
                        .unwrap_or(0);
                    self.annotate(r, n, "warning", &text);
                    Ok(format!("{text}\n"))
                }
            };
        }
        if self.runs[r].artifacts.contains_key(&name) && !overwrite {
            return Err("Failed to CreateArtifact: Received non-retryable error: Failed request: (409) Conflict: an artifact with this name already exists on the workflow run".into());
        }
        let store = self.work.path().join("artifacts").join(self.runs[r].id.to_string()).join(&name);
        let _ = std::fs::remove_dir_all(&store);
        for (from, rel) in &found {
            let to = store.join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).map_err(|e| format!("upload {}: {e}", from.display()))?;
        }
        self.runs[r].artifacts.insert(name.clone(), store);
        Ok(format!("Artifact {name} has been successfully uploaded! ({} files)\n", found.len()))
    }

    fn download_artifact(
        &mut self,
        job: &JobExec,
        r: usize,
        input: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let run = match input("run-id").filter(|x| !x.is_empty()) {
            Some(id) => {
                let id: u64 = id.parse().map_err(|_| format!("run-id `{id}` is not a number"))?;
                self.runs
                    .iter()
                    .position(|x| x.id == id)
                    .ok_or_else(|| format!("Unable to download artifact(s): run {id} not found"))?
            }
            None => r,
        };
        let dest = job.workspace.join(input("path").unwrap_or_default());
        let wanted: Vec<(String, PathBuf)> = match input("name").filter(|n| !n.is_empty()) {
            Some(name) => {
                let from = self.runs[run]
                    .artifacts
                    .get(&name)
                    .ok_or_else(|| format!("Unable to download artifact(s): Artifact not found for name: {name}"))?;
                vec![(String::new(), from.clone())]
            }
            None => self.runs[run].artifacts.iter().map(|(n, p)| (n.clone(), p.clone())).collect(),
        };
        for (sub, from) in wanted {
            let mut files = Vec::new();
            collect_files(&from, &from, true, &mut files);
            for (file, rel) in files {
                let to = dest.join(&sub).join(rel);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(&file, &to).map_err(|e| e.to_string())?;
            }
        }
        Ok(format!("Downloaded to {}\n", dest.display()))
    }
}

fn collect_files(root: &Path, dir: &Path, hidden: bool, out: &mut Vec<(PathBuf, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if !hidden && e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            collect_files(root, &p, hidden, out);
        } else {
            out.push((p.clone(), p.strip_prefix(root).unwrap().to_path_buf()));
        }
    }
}

/// `inputs` of a `workflow_dispatch` run, typed by their declaration.
fn inputs_context(run: &WorkflowRun) -> Value {
    if run.event != "workflow_dispatch" {
        return json!({});
    }
    let declared = run
        .wf
        .trigger("workflow_dispatch")
        .and_then(|c| c.get("inputs"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let given = run.payload["inputs"].as_object().cloned().unwrap_or_default();
    let mut m = Map::new();
    for (name, decl) in declared {
        let text = given.get(&name).map(expr::to_string).unwrap_or_default();
        let v = match decl.get("type").and_then(Value::as_str) {
            Some("boolean") => json!(text == "true"),
            Some("number") => text.parse::<f64>().map(|n| json!(n)).unwrap_or(Value::Null),
            _ => json!(text),
        };
        m.insert(name, v);
    }
    Value::Object(m)
}

/// Who holds or waits for a concurrency group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Run(usize),
    Job(usize, usize),
}

/// A job while its steps run.
struct JobExec {
    workspace: PathBuf,
    temp: PathBuf,
    files: PathBuf,
    /// The runner's variables.
    env: BTreeMap<String, String>,
    /// What steps wrote to `GITHUB_ENV`.
    file_env: BTreeMap<String, String>,
    /// What steps wrote to `GITHUB_PATH`.
    paths: Vec<String>,
    commands: step::Commands,
    steps_ctx: Map<String, Value>,
    failed: bool,
}

impl JobExec {
    /// Fresh file-command files of step `n`.
    fn step_files(&self, n: usize) -> BTreeMap<&'static str, PathBuf> {
        let mut m = BTreeMap::new();
        for (k, f) in [
            ("GITHUB_OUTPUT", "set_output"),
            ("GITHUB_ENV", "set_env"),
            ("GITHUB_PATH", "add_path"),
            ("GITHUB_STEP_SUMMARY", "step_summary"),
            ("GITHUB_STATE", "save_state"),
        ] {
            let p = self.files.join(format!("{f}_{n}"));
            let _ = std::fs::write(&p, "");
            m.insert(k, p);
        }
        m
    }
}
