//! `departments:` in `.github/ward.yml`: the parts of the hospital outside
//! the patient flow (the charge nurse's sweep, budgets, groundedness).
//!
//! ```yaml
//! departments:
//!   sweep: { max_retries: 2, max_actions: 50 }
//!   budget: { run_usd: 10, patient_usd: 150 }
//!   groundedness: { threshold: 0.8 }
//!   safety: { regression_label: regression }
//!   research: { max_proposals: 3, agent: false, time_limit: 30m }
//! ```

use std::collections::HashSet;
use std::time::Duration;

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Config, LOCKDOWN_LABEL, de_duration};

/// Every section has defaults; `departments:` may be left out entirely.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Departments {
    /// The charge nurse (`ward sweep`). Defaults: see [`SweepConfig`].
    #[serde(default)]
    pub sweep: SweepConfig,
    /// Spend limits per stage run and per patient. Defaults: see [`BudgetConfig`].
    #[serde(default)]
    pub budget: BudgetConfig,
    /// How far a run's notes must match reality. Defaults: see [`GroundednessConfig`].
    #[serde(default)]
    pub groundedness: GroundednessConfig,
    /// The safety department's post-incident review. Defaults: see [`SafetyConfig`].
    #[serde(default)]
    pub safety: SafetyConfig,
    /// The research department (`ward research`). Defaults: see [`ResearchConfig`].
    #[serde(default)]
    pub research: ResearchConfig,
}

impl Departments {
    /// The semantic pass: (path, message) for every problem.
    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = self.sweep.validate(config);
        p.extend(self.budget.validate(config));
        p.extend(self.groundedness.validate());
        p.extend(self.safety.validate(config));
        p.extend(self.research.validate());
        p
    }
}

/// `sweep:` in `.github/ward.yml`. Every field has a default; the section
/// may be left out.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// Re-triggers of one stage (per visit of its label) before the patient
    /// goes to the chiefs. Default 2.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Actions (re-triggers, escalations, repairs) per sweep; the next sweep
    /// resumes after the last patient handled. Default 50.
    #[serde(default = "default_max_actions")]
    pub max_actions: usize,
    /// Patients looked at closely per sweep (two API calls each). Default 200.
    #[serde(default = "default_max_inspections")]
    pub max_inspections: usize,
    /// Added to a stage's `time_limit` before a run without an outcome counts
    /// as crashed (workspace set-up and clean-up run outside the agent's
    /// limit). Default 10m.
    #[serde(default = "default_grace", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub grace: Duration,
    /// How long a sweep holds its lock before another may take it. Default 15m.
    #[serde(default = "default_lock_ttl", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub lock_ttl: Duration,
    /// When the sweep declares a lockdown itself.
    #[serde(default)]
    pub facilities: FacilityConfig,
}

/// `sweep.facilities`: failures that lock the building.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FacilityConfig {
    /// Lock down when the agent command failed on this many consecutive runs,
    /// across patients; 0 turns the check off. Default 5.
    #[serde(default = "default_agent_failures")]
    pub agent_failures: u32,
    /// The branch whose CI is watched. Default `main`.
    #[serde(default = "default_base_branch")]
    pub base_branch: String,
    /// Lock down when the base branch's CI has been red this long. Default 6h.
    #[serde(default = "default_ci_red_for", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub ci_red_for: Duration,
    /// Lock down when the Docker probe fails. Default true.
    #[serde(default = "default_true")]
    pub docker: bool,
}

fn default_max_retries() -> u32 {
    2
}
fn default_max_actions() -> usize {
    50
}
fn default_max_inspections() -> usize {
    200
}
fn default_grace() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_lock_ttl() -> Duration {
    Duration::from_secs(15 * 60)
}
fn default_agent_failures() -> u32 {
    5
}
fn default_base_branch() -> String {
    "main".into()
}
fn default_ci_red_for() -> Duration {
    Duration::from_secs(6 * 3600)
}
fn default_true() -> bool {
    true
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            max_retries: default_max_retries(),
            max_actions: default_max_actions(),
            max_inspections: default_max_inspections(),
            grace: default_grace(),
            lock_ttl: default_lock_ttl(),
            facilities: FacilityConfig::default(),
        }
    }
}

impl Default for FacilityConfig {
    fn default() -> Self {
        Self {
            agent_failures: default_agent_failures(),
            base_branch: default_base_branch(),
            ci_red_for: default_ci_red_for(),
            docker: default_true(),
        }
    }
}

impl SweepConfig {
    /// The semantic pass: (path, message) for every problem.
    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.max_actions == 0 {
            p.push(("departments.sweep.max_actions".into(), "must be at least 1, or the sweep could never act".into()));
        }
        if self.max_inspections < self.max_actions {
            p.push((
                "departments.sweep.max_inspections".into(),
                format!("must be at least `max_actions` ({}), since every action follows a look", self.max_actions),
            ));
        }
        if self.lock_ttl < Duration::from_secs(60) {
            p.push((
                "departments.sweep.lock_ttl".into(),
                "must be at least 1m so a sweep can finish under its lock".into(),
            ));
        }
        if self.facilities.base_branch.trim().is_empty() {
            p.push(("departments.sweep.facilities.base_branch".into(), "must name a branch, e.g. `main`".into()));
        }
        if !config.is_ward_label(config.chief_label()) {
            p.push((
                "sweep".into(),
                format!("the sweep escalates to `{}`, which is not declared under `labels`", config.chief_label()),
            ));
        }
        if !config.is_ward_label(LOCKDOWN_LABEL) {
            p.push(("labels".into(), format!("`{LOCKDOWN_LABEL}` must be declared: infection control uses it")));
        }
        p
    }
}

/// How the agent reports what it spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UsageFormat {
    /// Claude Code's JSON or stream-JSON result (the default without a preset).
    #[default]
    ClaudeJson,
    /// Codex's `exec --json` events: tokens of each `turn.completed`, no dollars.
    CodexJson,
    /// Gemini CLI's `--output-format json` object: tokens per model, no dollars.
    GeminiJson,
    /// opencode's `run --format json` events: tokens and dollars of each `step_finish`.
    OpencodeJson,
    /// aider's sentences for people (`Tokens: 2.3k sent, 345 received.
    /// Cost: $0.01 message, $0.05 session.`), read across its line breaks:
    /// the session's dollars, the tokens as it rounds them.
    AiderText,
    /// `usage_regex` with named groups `cost`, `input_tokens`, `output_tokens`.
    Regex,
    /// The agent reports nothing; dollar limits cannot be enforced.
    None,
}

impl UsageFormat {
    pub const fn as_str(self) -> &'static str {
        match self {
            UsageFormat::ClaudeJson => "claude-json",
            UsageFormat::CodexJson => "codex-json",
            UsageFormat::GeminiJson => "gemini-json",
            UsageFormat::OpencodeJson => "opencode-json",
            UsageFormat::AiderText => "aider-text",
            UsageFormat::Regex => "regex",
            UsageFormat::None => "none",
        }
    }
}

/// Dollars per million tokens, to estimate spend while a run is going.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    /// Default: the input price.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Default: a tenth of the input price.
    #[serde(default)]
    pub cache_read: Option<f64>,
}

/// `departments.budget`. A limit of 0 turns that limit off.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// How usage is read from the agent's stdout. Default: the agent
    /// preset's parser, else `claude-json`. Read it with [`Self::usage`].
    #[serde(default)]
    pub usage: Option<UsageFormat>,
    /// With `usage: regex`: e.g. `cost: \$(?P<cost>[0-9.]+)`; the last match wins.
    #[serde(default)]
    pub usage_regex: Option<String>,
    /// Dollars one stage run may spend. Default 10.
    #[serde(default = "default_run_usd")]
    pub run_usd: f64,
    /// Dollars one patient may spend over all its runs. Default 150.
    #[serde(default = "default_patient_usd")]
    pub patient_usd: f64,
    /// Stage runs one patient may have. Default 40.
    #[serde(default = "default_stage_visits")]
    pub patient_stage_visits: u32,
    /// Times one patient may be sent back. Default 10.
    #[serde(default = "default_send_backs")]
    pub patient_send_backs: u32,
    /// Outcomes that send a patient back, as `stage.outcome`. Default
    /// [`DEFAULT_SEND_BACKS`] (those of them the pipeline has).
    #[serde(default)]
    pub send_backs: Option<Vec<String>>,
    /// Token prices for estimates while a run is going. Default: none.
    #[serde(default)]
    pub prices: Option<Prices>,
}

fn default_run_usd() -> f64 {
    10.0
}
fn default_patient_usd() -> f64 {
    150.0
}
fn default_stage_visits() -> u32 {
    40
}
fn default_send_backs() -> u32 {
    10
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            usage: None,
            usage_regex: None,
            run_usd: default_run_usd(),
            patient_usd: default_patient_usd(),
            patient_stage_visits: default_stage_visits(),
            patient_send_backs: default_send_backs(),
            send_backs: None,
            prices: None,
        }
    }
}

impl BudgetConfig {
    /// The parser that reads the agent's output.
    pub fn usage(&self) -> UsageFormat {
        self.usage.unwrap_or_default()
    }

    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = Vec::new();
        let base = "departments.budget";
        for (name, v) in [("run_usd", self.run_usd), ("patient_usd", self.patient_usd)] {
            if !v.is_finite() || v < 0.0 {
                p.push((format!("{base}.{name}"), format!("`{v}` must be a number of dollars, 0 or more")));
            }
        }
        match (&self.usage(), &self.usage_regex) {
            (UsageFormat::Regex, None) => {
                p.push((format!("{base}.usage_regex"), "`usage: regex` needs `usage_regex`".into()));
            }
            (UsageFormat::Regex, Some(re)) => match Regex::new(re) {
                Ok(r) if r.capture_names().flatten().any(|n| n == "cost") => {}
                Ok(_) => p.push((format!("{base}.usage_regex"), "needs a named group `(?P<cost>...)`".into())),
                Err(e) => p.push((format!("{base}.usage_regex"), format!("is not a valid regex: {e}"))),
            },
            (_, Some(_)) => {
                p.push((format!("{base}.usage_regex"), "is only read with `usage: regex`".into()));
            }
            _ => {}
        }
        if let Some(list) = &self.send_backs {
            for (i, item) in list.iter().enumerate() {
                let ok = item
                    .split_once('.')
                    .and_then(|(stage, outcome)| config.stage(stage).map(|s| s.config.outcomes.contains_key(outcome)))
                    .unwrap_or(false);
                if !ok {
                    p.push((
                        format!("{base}.send_backs.{i}"),
                        format!("`{item}` is not `stage.outcome` of a stage in this pipeline"),
                    ));
                }
            }
        }
        p
    }

    /// The (stage, outcome) pairs that count as send-backs.
    pub fn send_back_set(&self, config: &Config) -> HashSet<(String, String)> {
        if let Some(list) = &self.send_backs {
            return list
                .iter()
                .filter_map(|i| i.split_once('.'))
                .map(|(s, o)| (s.to_string(), o.to_string()))
                .collect();
        }
        DEFAULT_SEND_BACKS
            .iter()
            .filter_map(|i| i.split_once('.'))
            .filter(|(s, o)| config.stage(s).is_some_and(|st| st.config.outcomes.contains_key(*o)))
            .map(|(s, o)| (s.to_string(), o.to_string()))
            .collect()
    }
}

/// Send-backs of the shipped pipeline: plan rejects, change requests, audit
/// failures. Entries naming outcomes a pipeline lacks are ignored.
pub const DEFAULT_SEND_BACKS: &[&str] =
    &["plan-review.reject", "code-review.changes-requested", "discharge.audit-failed"];

/// `departments.groundedness`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroundednessConfig {
    /// Minimum score (0 to 1) of a valid run; 0 turns the rule off. Default 0.8.
    #[serde(default = "default_threshold")]
    pub threshold: f64,
}

fn default_threshold() -> f64 {
    0.8
}

impl Default for GroundednessConfig {
    fn default() -> Self {
        Self { threshold: default_threshold() }
    }
}

impl GroundednessConfig {
    pub fn validate(&self) -> Vec<(String, String)> {
        if (0.0..=1.0).contains(&self.threshold) {
            Vec::new()
        } else {
            vec![("departments.groundedness.threshold".into(), format!("`{}` must be between 0 and 1", self.threshold))]
        }
    }
}

/// `departments.safety`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SafetyConfig {
    /// The label a person puts on an issue that reports a regression of a
    /// change ward merged (naming its pull request or commit): the safety
    /// department opens an incident for it. Default `regression`.
    #[serde(default = "default_regression_label")]
    pub regression_label: String,
}

fn default_regression_label() -> String {
    "regression".into()
}

impl Default for SafetyConfig {
    fn default() -> Self {
        Self { regression_label: default_regression_label() }
    }
}

impl SafetyConfig {
    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let path = "departments.safety.regression_label";
        let label = self.regression_label.trim();
        if label.is_empty() {
            return vec![(path.into(), "must name a label, e.g. `regression`".into())];
        }
        if label != self.regression_label {
            return vec![(path.into(), format!("`{}` has spaces around it; write `{label}`", self.regression_label))];
        }
        // A ward label is moved by the engine; the regression label must be
        // a person's act, so it cannot be one of them.
        if config.is_ward_label(label) {
            return vec![(
                path.into(),
                format!("`{label}` is one of ward's own labels (under `labels`); name a label only people apply"),
            )];
        }
        Vec::new()
    }
}

/// `departments.research`: what one `ward research` run may file.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResearchConfig {
    /// Proposals one run files at most, issues and the policy pull request
    /// together (`ward research --max N` overrides it). Default 3.
    #[serde(default = "default_max_proposals")]
    pub max_proposals: usize,
    /// Whether the research role (`researcher.md` in `paths.roles`) runs
    /// on the findings and may propose an edit to the skills or roles as a
    /// pull request; `false` keeps the deterministic reader alone, which
    /// files issues only. Default false.
    #[serde(default)]
    pub agent: bool,
    /// The research role's run limit. Default 30m.
    #[serde(default = "default_research_time_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
}

fn default_max_proposals() -> usize {
    3
}
fn default_research_time_limit() -> Duration {
    Duration::from_secs(30 * 60)
}

impl Default for ResearchConfig {
    fn default() -> Self {
        Self { max_proposals: default_max_proposals(), agent: false, time_limit: default_research_time_limit() }
    }
}

impl ResearchConfig {
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.max_proposals == 0 {
            p.push((
                "departments.research.max_proposals".into(),
                "must be at least 1: a run that may file nothing reads the record for no one (to stop the \
                 department, remove its workflow)"
                    .into(),
            ));
        }
        if self.time_limit < Duration::from_secs(60) {
            p.push((
                "departments.research.time_limit".into(),
                "must be at least 1m for the role to read anything".into(),
            ));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config() -> Config {
        let text = include_str!("../../.github/ward.yml");
        Config::parse(text, Path::new(".github/ward.yml"), None).unwrap()
    }

    #[test]
    fn the_default_section_validates_and_bad_values_are_named() {
        let c = config();
        assert!(c.departments.sweep.validate(&c).is_empty());
        let bad = SweepConfig { max_actions: 0, ..SweepConfig::default() };
        let p = bad.validate(&c);
        assert!(p.iter().any(|(path, _)| path == "departments.sweep.max_actions"), "{p:?}");
    }

    #[test]
    fn the_research_section_has_defaults_and_a_strict_shape() {
        let c = config();
        assert_eq!(c.departments.research, ResearchConfig::default());
        assert_eq!((c.departments.research.max_proposals, c.departments.research.agent), (3, false));
        let text = include_str!("../../.github/ward.yml")
            .replace("max_proposals: 3 ", "max_proposals: 1 ")
            .replace("agent: false ", "agent: true ")
            .replace("time_limit: 30m         # the role's", "time_limit: 10m         # the role's");
        let c = Config::parse(&text, Path::new(".github/ward.yml"), None).unwrap();
        let r = &c.departments.research;
        assert_eq!((r.max_proposals, r.agent, r.time_limit), (1, true, Duration::from_secs(600)));
        let unknown = include_str!("../../.github/ward.yml").replace("max_proposals: 3 ", "max: 3 ");
        let e = Config::parse(&unknown, Path::new(".github/ward.yml"), None).unwrap_err().to_string();
        assert!(e.contains("max"), "{e}");
        let zero = ResearchConfig { max_proposals: 0, ..ResearchConfig::default() };
        assert_eq!(zero.validate()[0].0, "departments.research.max_proposals");
    }

    #[test]
    fn the_regression_label_is_a_persons_label() {
        let c = config();
        assert_eq!(c.departments.safety.regression_label, "regression");
        assert!(c.departments.safety.validate(&c).is_empty());
        for bad in ["", " regression", "ward:chief"] {
            let s = SafetyConfig { regression_label: bad.into() };
            let p = s.validate(&c);
            assert_eq!(p.len(), 1, "{bad:?}: {p:?}");
            assert_eq!(p[0].0, "departments.safety.regression_label");
        }
    }
}
