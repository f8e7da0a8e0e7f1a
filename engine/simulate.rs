//! Scenarios: the stage loop over the local forge with a *scripted*
//! stand-in, so a change to roles, skills or `ward.yml` can be tried before
//! it reaches real patients. `ward demo` is the same loop with the default
//! stand-in.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::chart::Sentinels;
use crate::forge::local::LocalForge;
use crate::forge::{
    CiState, CiStatus, CommitInfo, Forge, IssueNumber, NewIssue, NewPullRequest, Permission, Review, ReviewState,
};
use crate::hospital::Hospital;
use crate::stage::{self, StageRequest, StageResult};
use crate::stand_in::ScriptedVisit;

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub issue: ScenarioIssue,
    /// Stage name -> visits, in order. A stage without (more) visits uses
    /// the default stand-in.
    #[serde(default)]
    pub script: BTreeMap<String, Vec<ScriptedVisit>>,
    pub expect: Expectations,
    /// What people and CI did on the patient's pull request, one entry per
    /// discharge audit in order (the last one repeats): the simulation
    /// records it on the local forge before the audit. Default: an approving
    /// review by `chief`, CI green, the worktree's head commit.
    #[serde(default = "default_people")]
    pub pull_request: Vec<PullRequestScript>,
    /// Stage runs before the scenario counts as not settling. Default 40.
    #[serde(default = "default_max_runs")]
    pub max_runs: usize,
}

fn default_max_runs() -> usize {
    40
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioIssue {
    pub title: String,
    #[serde(default)]
    pub body: String,
    #[serde(default = "default_author")]
    pub author: String,
    /// Default: the admission label.
    #[serde(default)]
    pub labels: Option<Vec<String>>,
}

fn default_author() -> String {
    "reporter".into()
}

/// The people and CI around a patient's pull request, played by the
/// simulation (the local forge has neither).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullRequestScript {
    /// `false`: no pull request is ever opened. Default `true`.
    #[serde(default = "default_true")]
    pub exists: bool,
    /// Pull request reviews. Default: `chief` approves the head.
    #[serde(default = "default_reviews")]
    pub reviews: Vec<ScriptedReview>,
    #[serde(default)]
    pub unresolved_threads: usize,
    /// The pull request's commits, oldest first; the last one is the head.
    /// Default: the worktree's head commit.
    #[serde(default)]
    pub commits: Option<Vec<ScriptedCommit>>,
    /// CI of the head commit. Default `success`.
    #[serde(default = "default_ci")]
    pub ci: CiState,
    /// The head commit. Default: the worktree's HEAD.
    #[serde(default)]
    pub head: Option<String>,
}

impl Default for PullRequestScript {
    fn default() -> Self {
        Self {
            exists: true,
            reviews: default_reviews(),
            unresolved_threads: 0,
            commits: None,
            ci: default_ci(),
            head: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedReview {
    pub author: String,
    pub state: ReviewState,
    /// The commit reviewed. Default: the head.
    #[serde(default)]
    pub commit: Option<String>,
    /// The reviewer's permission on the repository. Default `write`.
    #[serde(default = "write_permission", deserialize_with = "crate::config::de_permission")]
    pub permission: Permission,
}

fn write_permission() -> Permission {
    Permission::Write
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCommit {
    pub message: String,
    /// A merge commit (two parents). Default `false`.
    #[serde(default)]
    pub merge: bool,
}

fn default_people() -> Vec<PullRequestScript> {
    vec![PullRequestScript::default()]
}

fn default_true() -> bool {
    true
}

fn default_reviews() -> Vec<ScriptedReview> {
    vec![ScriptedReview {
        author: "chief".into(),
        state: ReviewState::Approved,
        commit: None,
        permission: Permission::Write,
    }]
}

fn default_ci() -> CiState {
    CiState::Success
}

/// Records `people` on the local forge for `issue`'s branch: opens the pull
/// request if needed and sets its head, reviews, threads, commits and CI.
pub async fn play_people(
    forge: &LocalForge,
    issue: IssueNumber,
    workdir: &Path,
    people: &PullRequestScript,
) -> anyhow::Result<()> {
    if !people.exists {
        return Ok(());
    }
    // The patient's branch when the stage runs had worktrees, else the
    // folder the agent worked in.
    let branch = crate::discharge::audit::patient_branch(issue);
    let repo = git2::Repository::discover(workdir).ok();
    let head_commit = repo.as_ref().and_then(|r| {
        let tip = r.find_branch(&branch, git2::BranchType::Local).ok().and_then(|b| b.get().peel_to_commit().ok());
        tip.or_else(|| r.head().ok()?.peel_to_commit().ok())
    });
    let head = match (&people.head, &head_commit) {
        (Some(h), _) => h.clone(),
        (None, Some(c)) => c.id().to_string(),
        (None, None) => String::new(),
    };
    // The base is the branch checked out where ward runs, as a treating
    // stage's pull request has it (`main` when that cannot be read).
    let base = repo.as_ref().and_then(|r| r.head().ok()?.shorthand().map(str::to_string)).unwrap_or("main".into());
    let pull = forge
        .open_pull_request(NewPullRequest {
            head_branch: branch.clone(),
            base_branch: base,
            title: format!("Treat {issue}"),
            body: format!("Closes {issue}."),
        })
        .await?;
    let commits: Vec<CommitInfo> = match &people.commits {
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, c)| CommitInfo {
                sha: if i + 1 == list.len() { head.clone() } else { format!("{:040x}", 0xc0ffee_u64 + i as u64) },
                message: c.message.clone(),
                parent_count: if c.merge { 2 } else { 1 },
            })
            .collect(),
        None => head_commit
            .iter()
            .map(|c| CommitInfo {
                sha: head.clone(),
                message: c.message().unwrap_or_default().to_string(),
                parent_count: c.parent_count().min(1),
            })
            .collect(),
    };
    let reviews: Vec<Review> = people
        .reviews
        .iter()
        .map(|r| Review {
            author: r.author.clone(),
            state: r.state,
            commit_sha: r.commit.clone().unwrap_or_else(|| head.clone()),
            body: String::new(),
        })
        .collect();
    for r in &people.reviews {
        forge.grant(&r.author, r.permission)?;
    }
    let threads = people.unresolved_threads;
    forge.update_pull(pull.number, |rec| {
        if let Some(p) = rec.pull.as_mut() {
            p.head_sha = head.clone();
        }
        rec.reviews = reviews;
        rec.unresolved_threads = threads;
        rec.commits = commits;
    })?;
    if !head.is_empty() && people.ci != CiState::Missing {
        forge.set_ci_status(&head, &CiStatus::new(people.ci, vec![format!("test: {:?}", people.ci).to_lowercase()]))?;
    }
    Ok(())
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// Stage names in the order they ran.
    #[serde(default)]
    pub path: Option<Vec<String>>,
    #[serde(default)]
    pub final_label: Option<String>,
    /// Note kinds that must be in the chart.
    #[serde(default)]
    pub chart_contains: Vec<String>,
    /// Note kinds that must not be in the chart.
    #[serde(default)]
    pub chart_lacks: Vec<String>,
    /// Text that must appear in the chart (e.g. a rule's name in a REFUSAL).
    #[serde(default)]
    pub chart_mentions: Vec<String>,
    /// Children of a decomposition, by key, with the ward label each must carry.
    #[serde(default)]
    pub children: BTreeMap<String, String>,
}

/// One stage run of a trace.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub stage: String,
    pub role: String,
    pub result: String,
    pub outcome: Option<String>,
    pub label_out: Option<String>,
    pub ms: u128,
    /// The engine's own time in the run (the agent's excluded).
    pub engine_us: u128,
    pub scripted: bool,
    pub detail: Option<String>,
}

/// What happened to one patient.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    pub issue: u64,
    pub steps: Vec<Step>,
    pub final_label: Option<String>,
    pub chart: PathBuf,
    pub artifacts: PathBuf,
}

impl Trace {
    pub fn path(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.stage.as_str()).collect()
    }
}

/// Runs stage after stage for `issue`, following the forge's dispatches
/// the way GitHub would, until nothing more is dispatched.
pub async fn drive(
    h: &Hospital,
    forge: &LocalForge,
    issue: IssueNumber,
    script: BTreeMap<String, VecDeque<ScriptedVisit>>,
    scratch: &Path,
    max_runs: usize,
) -> anyhow::Result<Trace> {
    drive_with(h, forge, issue, script, scratch, max_runs, &default_people()).await
}

/// [`drive`], with what people and CI do on the pull request.
pub async fn drive_with(
    h: &Hospital,
    forge: &LocalForge,
    issue: IssueNumber,
    mut script: BTreeMap<String, VecDeque<ScriptedVisit>>,
    scratch: &Path,
    max_runs: usize,
    people: &[PullRequestScript],
) -> anyhow::Result<Trace> {
    let mut steps = Vec::new();
    let mut seen_dispatches = forge.dispatches()?.len();
    let mut audits_done = 0;
    // The first run is what the admission label's event would start.
    let mut pending = 1usize;
    while pending > 0 {
        pending -= 1;
        if steps.len() >= max_runs {
            anyhow::bail!("issue {issue} did not settle after {max_runs} stage runs; is the pipeline looping?");
        }
        let current = forge.issue(issue).await?;
        // A patient waiting for CI or reviews is the auditing stage's when woken.
        let pending_label = &h.config.discharge.pending_label;
        let stage_name = h
            .config
            .places(&current.labels)
            .first()
            .and_then(|l| {
                h.config.stage_by_label(l).or_else(|| (l == pending_label).then(|| h.config.audit_stage())?)
            })
            .map(|s| s.name.to_string());
        let audits = stage_name.as_deref().and_then(|s| h.config.stage(s)).is_some_and(|s| s.mode().audits());
        if audits && let Some(now) = people.get(audits_done).or(people.last()) {
            play_people(forge, issue, &h.workdir, now).await?;
            audits_done += 1;
        }
        let visit = stage_name.as_ref().and_then(|s| script.get_mut(s)).and_then(VecDeque::pop_front);
        let agent_command = match &visit {
            Some(v) => {
                let file = scratch.join(format!("visit-{}.yaml", steps.len() + 1));
                std::fs::write(&file, serde_yaml::to_string(v)?)
                    .with_context(|| format!("could not write {}", file.display()))?;
                Some(vec!["{ward}".into(), "stand-in".into(), "--script".into(), file.display().to_string()])
            }
            None => None,
        };
        let result = stage::run_stage(h, &StageRequest { agent_command, ..StageRequest::new(issue) }).await?;
        let scripted = visit.is_some();
        let role =
            stage_name.as_deref().and_then(|s| h.config.stage(s)).map(|s| s.config.role.clone()).unwrap_or_default();
        match result {
            StageResult::Moved(t) => steps.push(Step {
                stage: t.stage,
                role: t.role,
                result: "moved".into(),
                outcome: Some(t.outcome),
                label_out: Some(t.to),
                ms: t.total_ms,
                engine_us: t.engine_us,
                scripted,
                detail: None,
            }),
            StageResult::NoOp { .. } | StageResult::Deferred { .. } | StageResult::SlotTaken { .. } => break,
            StageResult::Refused { stage, reason, to, .. } => steps.push(Step {
                stage,
                role,
                result: "refused".into(),
                outcome: None,
                label_out: to,
                ms: 0,
                engine_us: 0,
                scripted,
                detail: Some(reason),
            }),
            StageResult::Invalid { stage, reason, .. } => {
                steps.push(Step {
                    stage,
                    role,
                    result: "invalid".into(),
                    outcome: None,
                    label_out: None,
                    ms: 0,
                    engine_us: 0,
                    scripted,
                    detail: Some(reason),
                });
                break;
            }
        }
        let dispatches = forge.dispatches()?;
        pending += dispatches[seen_dispatches..].iter().filter(|d| d.issue == issue).count();
        seen_dispatches = dispatches.len();
        // Waiting, and the script has people act again: their review or
        // CI result wakes the patient.
        let waiting = forge.issue(issue).await?.labels.contains(&h.config.discharge.pending_label);
        if pending == 0 && waiting && audits_done < people.len() {
            pending = 1;
        }
    }
    // What was dispatched has run: a later `ward run` here does not redo it.
    forge.mark_consumed(forge.dispatches()?.len())?;
    let last = forge.issue(issue).await?;
    let final_label = h.config.places(&last.labels).first().map(|l| l.to_string());
    Ok(Trace {
        issue: issue.0,
        steps,
        final_label,
        chart: forge.chart_path(issue),
        artifacts: h.artifacts.join(issue.0.to_string()),
    })
}

/// Why a scenario file could not be used (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ScenarioError {
    pub file: PathBuf,
    pub message: String,
}

pub fn load_scenario(file: &Path) -> Result<Scenario, ScenarioError> {
    let err = |message: String| ScenarioError { file: file.to_path_buf(), message };
    let text = std::fs::read_to_string(file).map_err(|e| err(format!("cannot read the scenario: {e}")))?;
    let s: Scenario = serde_yaml::from_str(&text).map_err(|e| err(e.to_string()))?;
    if s.expect.path.is_none() && s.expect.final_label.is_none() && s.expect.chart_contains.is_empty() {
        return Err(err("`expect` names nothing to check (give `path`, `final_label` or `chart_contains`)".into()));
    }
    Ok(s)
}

/// The outcome of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub scenario: String,
    pub file: PathBuf,
    pub trace: Trace,
    pub failures: Vec<String>,
}

/// Runs one scenario against the repository at `root` (its pipeline,
/// roles, skills and precedents) on a fresh local forge in `scratch`.
pub async fn run_scenario(root: &Path, file: &Path, scratch: &Path, ward_exe: &Path) -> anyhow::Result<ScenarioReport> {
    let scenario = load_scenario(file)?;
    let forge = Arc::new(LocalForge::new(scratch, "ward-engine").with_actor(&scenario.issue.author));
    let mut h = Hospital::load(root, forge.clone())?;
    h.artifacts = scratch.join("runs");
    h.workdir = scratch.join("work");
    h.workspace = Ok(None); // scenarios run in scratch, never in the repository's worktrees
    h.ward_exe = ward_exe.to_path_buf();
    std::fs::create_dir_all(&h.workdir)?;
    init_workdir(&h.workdir)?;
    for stage in scenario.script.keys() {
        if h.config.stage(stage).is_none() {
            return Err(ScenarioError {
                file: file.to_path_buf(),
                message: format!("script names stage `{stage}`, which .github/ward.yml does not have"),
            }
            .into());
        }
    }
    let labels = scenario.issue.labels.clone().unwrap_or_else(|| vec![h.config.admission.clone()]);
    let issue =
        forge.admit(NewIssue { title: scenario.issue.title.clone(), body: scenario.issue.body.clone(), labels })?;
    let script = scenario.script.iter().map(|(k, v)| (k.clone(), v.iter().cloned().collect())).collect();
    let trace =
        drive_with(&h, &forge, issue.number, script, scratch, scenario.max_runs, &scenario.pull_request).await?;
    let mut failures = check_expectations(&scenario.expect, &trace, &h.sentinels)?;
    failures.extend(check_children(&scenario.expect, &*forge, issue.number).await?);
    Ok(ScenarioReport { scenario: scenario.name, file: file.to_path_buf(), trace, failures })
}

/// A git repository for the scripted agent to work in, with one commit at a
/// fixed time by a fixed author (no user or system git configuration).
fn init_workdir(dir: &Path) -> anyhow::Result<()> {
    let repo = git2::Repository::init(dir).context("could not create the scenario's git repository")?;
    std::fs::write(dir.join("CHANGELOG.md"), "# Changelog\n\n")?;
    let mut index = repo.index()?;
    index.add_path(Path::new("CHANGELOG.md"))?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let who = git2::Signature::new("ward simulate", "simulate@ward.invalid", &git2::Time::new(1_767_225_600, 0))?;
    repo.commit(Some("HEAD"), &who, &who, "Scenario start", &tree, &[])?;
    Ok(())
}

async fn check_children(expect: &Expectations, forge: &dyn Forge, parent: IssueNumber) -> anyhow::Result<Vec<String>> {
    if expect.children.is_empty() {
        return Ok(Vec::new());
    }
    let issues = forge.all_issues().await?;
    let found = crate::rules::decomposition::existing_children(parent, &issues, forge.engine_account());
    let mut failures = Vec::new();
    let created = issues.iter().filter(|i| forge.engine_account().is(&i.author)).count();
    if created != expect.children.len() {
        failures
            .push(format!("children: expected {} issues created by the engine, got {created}", expect.children.len()));
    }
    for (key, label) in &expect.children {
        match found.get(key) {
            None => failures.push(format!("children: no child `{key}` of {parent}")),
            Some(c) if !c.labels.contains(label) => failures.push(format!(
                "children: `{key}` ({}) carries [{}], not `{label}`",
                c.number,
                c.labels.join(", ")
            )),
            Some(_) => {}
        }
    }
    Ok(failures)
}

fn check_expectations(expect: &Expectations, trace: &Trace, sentinels: &Sentinels) -> anyhow::Result<Vec<String>> {
    let mut failures = Vec::new();
    if let Some(path) = &expect.path {
        let got = trace.path();
        if *path != got {
            failures.push(format!("path: expected [{}]\n      got      [{}]", path.join(", "), got.join(", ")));
        }
    }
    if let Some(label) = &expect.final_label
        && trace.final_label.as_ref() != Some(label)
    {
        failures.push(format!(
            "final_label: expected `{label}`, got `{}`",
            trace.final_label.as_deref().unwrap_or("no ward label")
        ));
    }
    let kinds: Vec<String> = match std::fs::read_to_string(&trace.chart) {
        Ok(text) => sentinels.parse_chart(&text)?.into_iter().map(|n| n.kind.to_string()).collect(),
        Err(_) => Vec::new(),
    };
    for kind in &expect.chart_contains {
        if !kinds.contains(kind) {
            failures.push(format!("chart_contains: no `{kind}` note in the chart"));
        }
    }
    let text = std::fs::read_to_string(&trace.chart).unwrap_or_default();
    for needle in &expect.chart_mentions {
        if !text.contains(needle.as_str()) {
            failures.push(format!("chart_mentions: the chart never says `{needle}`"));
        }
    }
    for kind in &expect.chart_lacks {
        if kinds.contains(kind) {
            failures.push(format!("chart_lacks: the chart holds a `{kind}` note"));
        }
    }
    if let Some(step) = trace.steps.iter().find(|s| s.result == "invalid")
        && !failures.is_empty()
    {
        failures.push(format!(
            "(stage `{}` was invalid: {})",
            step.stage,
            step.detail.as_deref().unwrap_or("no detail")
        ));
    }
    Ok(failures)
}

/// A trace as a table for people.
pub fn render_timeline(trace: &Trace) -> String {
    let mut out =
        format!("{:>3}  {:<12} {:<17} {:<18} {:<20} {:>6}\n", "#", "stage", "role", "outcome", "label out", "ms");
    for (i, s) in trace.steps.iter().enumerate() {
        let outcome = match (s.result.as_str(), &s.outcome) {
            ("moved", Some(o)) => o.clone(),
            (other, _) => format!("({other})"),
        };
        out.push_str(&format!(
            "{:>3}  {:<12} {:<17} {:<18} {:<20} {:>6}\n",
            i + 1,
            s.stage,
            s.role,
            outcome,
            s.label_out.as_deref().unwrap_or("-"),
            s.ms
        ));
    }
    out
}
