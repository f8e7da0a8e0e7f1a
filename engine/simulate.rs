//! Scenarios: the stage loop over the local forge with a *scripted*
//! stand-in, so a change to roles, skills or `ward.yml` can be tried before
//! it reaches real patients. `ward demo` is the same loop with the default
//! stand-in.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::agent::ScriptedVisit;
use crate::chart::Sentinels;
use crate::forge::local::LocalForge;
use crate::forge::{Forge, IssueNumber, NewIssue};
use crate::stage::{self, Hospital, StageRequest, StageResult};

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
    mut script: BTreeMap<String, VecDeque<ScriptedVisit>>,
    scratch: &Path,
    max_runs: usize,
) -> anyhow::Result<Trace> {
    let mut steps = Vec::new();
    let mut seen_dispatches = forge.dispatches()?.len();
    // The first run is what the admission label's event would start.
    let mut pending = 1usize;
    while pending > 0 {
        pending -= 1;
        if steps.len() >= max_runs {
            anyhow::bail!("issue {issue} did not settle after {max_runs} stage runs; is the pipeline looping?");
        }
        let current = forge.issue(issue).await?;
        let stage_name = stage::ward_labels(&h.config, &current)
            .first()
            .and_then(|l| h.config.stage_by_label(l))
            .map(|s| s.name.to_string());
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
        let result = stage::run_stage(h, &StageRequest { issue: issue.0, agent_command, ..Default::default() }).await?;
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
            StageResult::NoOp { .. } => break,
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
    }
    let last = forge.issue(issue).await?;
    let final_label = stage::ward_labels(&h.config, &last).first().map(|l| l.to_string());
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
    h.workspace = None; // scenarios run in scratch, never in the repository's worktrees
    h.ward_exe = ward_exe.to_path_buf();
    std::fs::create_dir_all(&h.workdir)?;
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
    let trace = drive(&h, &forge, issue.number, script, scratch, scenario.max_runs).await?;
    let failures = check_expectations(&scenario.expect, &trace, &h.sentinels)?;
    Ok(ScenarioReport { scenario: scenario.name, file: file.to_path_buf(), trace, failures })
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
        Ok(text) => sentinels.parse_chart(&text)?.into_iter().map(|n| n.kind).collect(),
        Err(_) => Vec::new(),
    };
    for kind in &expect.chart_contains {
        if !kinds.contains(kind) {
            failures.push(format!("chart_contains: no `{kind}` note in the chart"));
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
