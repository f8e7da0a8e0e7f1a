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
//!   hidden-file exclusion), `actions/cache` (always a miss), and the ward
//!   action (`wardhq/ward@<sha>`, composite.rs: this repository's
//!   `action.yml`, its installer downloading the release published on the
//!   fake). Any other `uses:` fails the step and the test
//!   ([`Runner::unsupported`]).
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
//! containers, reusable workflows, composite actions other than ward's and
//! `hashFiles()` fail loudly; `timeout-minutes` is not enforced (a step gets ten real minutes).
//! ward reads the machine's clock; the runner gives every step one variable
//! GitHub does not, `WARD_NOW` (the simulated time), which `ward sweep` and
//! `ward report` read, so the charge nurse ages labels by the simulation.

mod builtin;
pub mod composite;
pub mod expr;
mod job;
mod lifecycle;
pub mod step;
pub mod workflow;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use expr::Status;
pub use step::{Annotation, StepRecord};
pub use workflow::Workflow;

use super::fake_github::{Delivery, FakeGitHub, OWNER, Permissions, State};

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
            let wfs = self.workflows_at(&s, &main);
            (main, wfs)
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
            sha: main.clone(),
            git_ref: "refs/heads/main".into(),
            head_sha: main,
            head_branch: Some("main".into()),
            pull_requests: Vec::new(),
        };
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
    /// when more than `max_runs` runs start a job during the call (a loop).
    pub async fn run_until_idle(&mut self, max_runs: usize) {
        self.run_until(max_runs, |_| false).await;
    }

    /// [`Runner::run_until_idle`], stopping early once `done` holds after
    /// a job ended.
    pub async fn run_until(&mut self, max_runs: usize, done: impl Fn(&State) -> bool) {
        let started_runs =
            |runs: &[WorkflowRun]| runs.iter().filter(|r| r.jobs.iter().any(|j| j.started_at.is_some())).count();
        let before = started_runs(&self.runs);
        loop {
            self.ingest();
            self.admit_waiting_jobs();
            if let Some((r, j)) = self.ready_job() {
                let new_run = self.runs[r].jobs.iter().all(|j| j.started_at.is_none());
                if new_run && started_runs(&self.runs) - before >= max_runs {
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
}

/// Who holds or waits for a concurrency group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Run(usize),
    Job(usize, usize),
}
