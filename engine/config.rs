//! `.github/ward.yml`: the pipeline as versioned configuration.
//!
//! Two phases, as zizmor does it: strict parsing (`deny_unknown_fields`,
//! serde_yaml reports line and column), then a semantic pass that reports the
//! path of the offending value (`stages.treat.outcomes.stuck`) and where it is
//! in the file.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::chart::{ENGINE_ROLE, KNOWN_KINDS};
use crate::forge::{LabelSpec, Permission};
use crate::workspace::config::EmulatorConfig;

/// Where the pipeline lives, relative to the repository root.
pub const CONFIG_PATH: &str = ".github/ward.yml";

/// The whole pipeline. Every field documents its default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Schema version; must be 1.
    pub version: u32,
    /// The login the engine acts as. Labels it applies are trusted; it may
    /// never author a precedent. Default `github-actions[bot]`.
    #[serde(default = "default_engine_account")]
    pub engine_account: String,
    /// Sentinel prefix in charts and notes. Default `WARD`.
    #[serde(default = "default_prefix")]
    pub sentinel_prefix: String,
    /// The label a person applies to admit a patient.
    pub admission: String,
    /// Minimum permission of a person who applies the admission label.
    /// Default `triage`.
    #[serde(default = "default_admit_permission", deserialize_with = "de_permission")]
    pub admit_permission: Permission,
    /// Branch that holds the charts in GitHub mode. Default `ward-charts`.
    #[serde(default = "default_charts_branch")]
    pub charts_branch: String,
    /// How the next stage starts after a label moves: `repository_dispatch`
    /// (default; labels set with GITHUB_TOKEN start no workflow) or `label`
    /// (an app token is configured and the labeled event starts it).
    #[serde(default)]
    pub dispatch: DispatchMode,
    /// With `true`, a passed discharge audit waits for a chief
    /// (`ward:awaiting-chief`). Default `false`.
    #[serde(default)]
    pub human_approval: bool,
    pub agent: AgentConfig,
    /// Every label the engine owns, with how people see it.
    pub labels: BTreeMap<String, LabelConfig>,
    /// Stages by name, in pipeline order.
    pub stages: IndexedStages,
    /// Roles by name.
    pub roles: BTreeMap<String, RoleConfig>,
    /// Precedent lookup. Default: top 3 from `precedents/log.yaml`.
    #[serde(default)]
    pub precedents: PrecedentConfig,
    /// Bounds and labels of the planner's decompositions. Default:
    /// depth 2, 12 children, `ward:waiting` / `ward:blocked`.
    #[serde(default)]
    pub decomposition: DecompositionConfig,
    /// Labels and permissions of discharge (merge) and human approval.
    #[serde(default)]
    pub discharge: DischargeConfig,
    /// The departments outside the patient flow: the charge nurse's sweep
    /// (`max_retries` 2, `max_actions` 50, ...), budgets and groundedness.
    /// Every field has a default; see [`crate::departments::Departments`].
    #[serde(default)]
    pub departments: crate::departments::Departments,
    /// The emulator every stage run gets (a stage's own `emulator` replaces
    /// it). Default: none. See [`crate::workspace::config`].
    #[serde(default)]
    pub emulator: Option<EmulatorConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecompositionConfig {
    /// How deep a tree of child issues may grow: 1 lets a patient have
    /// children, 2 grandchildren. Between 1 and 5; default 2.
    #[serde(default = "default_max_depth")]
    pub max_depth: usize,
    /// How many children one DECOMPOSITION may create. Between 1 and 50;
    /// default 12.
    #[serde(default = "default_max_children")]
    pub max_children: usize,
    /// Where a parent waits for its children. Default `ward:waiting`.
    #[serde(default = "default_waiting_label")]
    pub waiting_label: String,
    /// Where a child waits for the siblings it depends on. Default `ward:blocked`.
    #[serde(default = "default_blocked_label")]
    pub blocked_label: String,
}

impl Default for DecompositionConfig {
    fn default() -> Self {
        Self {
            max_depth: default_max_depth(),
            max_children: default_max_children(),
            waiting_label: default_waiting_label(),
            blocked_label: default_blocked_label(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DischargeConfig {
    /// A merged and closed patient. Default `ward:discharged`.
    #[serde(default = "default_discharged_label")]
    pub discharged_label: String,
    /// Human approval mode: where a passed audit waits. Default `ward:awaiting-chief`.
    #[serde(default = "default_awaiting_label")]
    pub awaiting_label: String,
    /// Human approval mode: the label a chief applies to let the engine
    /// merge. Default `ward:approved`.
    #[serde(default = "default_approved_label")]
    pub approved_label: String,
    /// Least permission of the person who applies `approved_label`: `maintain`
    /// (default) or `admin`.
    #[serde(default = "default_approver_permission", deserialize_with = "de_permission")]
    pub approver_permission: Permission,
}

impl Default for DischargeConfig {
    fn default() -> Self {
        Self {
            discharged_label: default_discharged_label(),
            awaiting_label: default_awaiting_label(),
            approved_label: default_approved_label(),
            approver_permission: default_approver_permission(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchMode {
    #[default]
    RepositoryDispatch,
    Label,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Argument vector. `{prompt}` becomes the prompt text, `{prompt_file}`
    /// its path, `{ward}` this ward binary (the built-in stand-in is
    /// `["{ward}", "stand-in"]`).
    pub command: Vec<String>,
    /// Names of engine environment variables passed to the agent. Nothing
    /// else is (tokens included). Default: none.
    #[serde(default)]
    pub pass_env: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelConfig {
    /// Six hex digits, no `#`.
    pub color: String,
    pub description: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The label in that starts this stage.
    pub label: String,
    /// The role that runs it (a key of `roles`).
    pub role: String,
    /// Mode the role template may branch on (`diagnose`, `treat`, ...).
    /// Default: the stage name.
    #[serde(default)]
    pub mode: Option<String>,
    /// Wall-clock limit of one agent run. Default 30m.
    #[serde(default = "default_time_limit", deserialize_with = "de_duration")]
    pub time_limit: Duration,
    /// A patient whose label is older than this with no live run is
    /// stalled (the charge nurse revives it). Default 1h.
    #[serde(default = "default_stall_after", deserialize_with = "de_duration")]
    pub stall_after: Duration,
    /// Note kinds every run of this stage must write.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Note kinds a run must write when it declares a given outcome.
    #[serde(default)]
    pub requires_for: BTreeMap<String, Vec<String>>,
    /// Outcome name -> label out.
    pub outcomes: BTreeMap<String, String>,
    /// This stage's emulator, replacing the top-level one. Default: the top-level one.
    #[serde(default)]
    pub emulator: Option<EmulatorConfig>,
}

impl StageConfig {
    pub fn mode<'a>(&'a self, name: &'a str) -> &'a str {
        self.mode.as_deref().unwrap_or(name)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// Template path relative to the repository root.
    pub prompt: PathBuf,
    /// Note kinds this role may write (OUTCOME is always allowed).
    pub writes: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrecedentConfig {
    /// Default `precedents/log.yaml`.
    #[serde(default = "default_precedent_log")]
    pub log: PathBuf,
    /// How many ranked precedents go into a prompt. Default 3.
    #[serde(default = "default_top")]
    pub top: usize,
}

impl Default for PrecedentConfig {
    fn default() -> Self {
        Self { log: default_precedent_log(), top: default_top() }
    }
}

/// Stages keep the order of the file (it is the order people read them in).
#[derive(Debug, Clone, Default)]
pub struct IndexedStages(pub Vec<(String, StageConfig)>);

impl<'de> Deserialize<'de> for IndexedStages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = IndexedStages;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of stage name to stage")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, StageConfig)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, StageConfig>()? {
                    if out.iter().any(|(n, _)| *n == k) {
                        return Err(serde::de::Error::custom(format!("stage `{k}` is defined twice")));
                    }
                    out.push((k, v));
                }
                Ok(IndexedStages(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn default_engine_account() -> String {
    "github-actions[bot]".into()
}
fn default_prefix() -> String {
    "WARD".into()
}
fn default_admit_permission() -> Permission {
    Permission::Triage
}
fn default_charts_branch() -> String {
    "ward-charts".into()
}
fn default_time_limit() -> Duration {
    Duration::from_secs(30 * 60)
}
fn default_stall_after() -> Duration {
    Duration::from_secs(60 * 60)
}
fn default_precedent_log() -> PathBuf {
    "precedents/log.yaml".into()
}
fn default_top() -> usize {
    3
}
fn default_max_depth() -> usize {
    2
}
fn default_max_children() -> usize {
    12
}
fn default_waiting_label() -> String {
    "ward:waiting".into()
}
fn default_blocked_label() -> String {
    "ward:blocked".into()
}
fn default_discharged_label() -> String {
    "ward:discharged".into()
}
fn default_awaiting_label() -> String {
    "ward:awaiting-chief".into()
}
fn default_approved_label() -> String {
    "ward:approved".into()
}
fn default_approver_permission() -> Permission {
    Permission::Maintain
}

pub(crate) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map_err(|e| serde::de::Error::custom(format!("`{s}` is not a duration like `15m` or `1h 30m`: {e}")))
}

fn de_permission<'de, D: Deserializer<'de>>(d: D) -> Result<Permission, D::Error> {
    String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
}

/// A configuration error a person can act on: file, line, column, the path
/// of the value, what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in one file, so a person fixes them in one go.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A stage, looked up.
#[derive(Debug, Clone, Copy)]
pub struct Stage<'a> {
    pub name: &'a str,
    pub config: &'a StageConfig,
}

impl<'a> Stage<'a> {
    pub fn mode(&self) -> &'a str {
        self.config.mode(self.name)
    }
}

impl Config {
    /// Reads, parses and validates `<root>/.github/ward.yml` (structure
    /// only; [`crate::prompt`] checks that role templates render).
    pub fn load(root: &Path) -> Result<Self, ConfigErrors> {
        let file = root.join(CONFIG_PATH);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.clone(),
                line: 0,
                column: 0,
                path: String::new(),
                message: format!("cannot read the pipeline ({e}); is this a repository with ward installed?"),
            }])
        })?;
        Self::parse(&text, &file, Some(root))
    }

    /// Parses and validates; `root` (when given) is where role files must exist.
    pub fn parse(text: &str, file: &Path, root: Option<&Path>) -> Result<Self, ConfigErrors> {
        let config: Config = serde_yaml::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            ConfigErrors(vec![ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                path: String::new(),
                message: e.to_string().split(" at line ").next().unwrap_or_default().to_string(),
            }])
        })?;
        let problems = config.validate(root);
        if problems.is_empty() {
            return Ok(config);
        }
        let mut errors: Vec<ConfigError> = problems
            .into_iter()
            .map(|(path, message)| {
                let (line, column) = locate(text, &path);
                ConfigError { file: file.to_path_buf(), line, column, path, message }
            })
            .collect();
        errors.sort_by_key(|e| (e.line, e.column));
        Err(ConfigErrors(errors))
    }

    /// The semantic pass: (path, message) for every problem.
    fn validate(&self, root: Option<&Path>) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.version != 1 {
            p.push(("version".into(), format!("version {} is not supported; use 1", self.version)));
        }
        let prefix_ok = !self.sentinel_prefix.is_empty()
            && self.sentinel_prefix.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && self.sentinel_prefix.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !prefix_ok {
            p.push((
                "sentinel_prefix".into(),
                "must be upper-case letters, digits and `_`, starting with a letter".into(),
            ));
        }
        if self.agent.command.is_empty() || self.agent.command[0].trim().is_empty() {
            p.push(("agent.command".into(), "must name a program, e.g. [\"claude\", \"-p\", \"{prompt}\"]".into()));
        }
        for (i, name) in self.agent.pass_env.iter().enumerate() {
            if crate::secrets::is_credential(name) {
                let why = format!("`{name}` is a credential; ward never hands credentials to the agent");
                p.push((format!("agent.pass_env.{i}"), why));
            } else if name.starts_with("WARD_") {
                p.push((
                    format!("agent.pass_env.{i}"),
                    format!("`{name}` is set by the engine itself and cannot be passed through"),
                ));
            }
        }
        for (name, label) in &self.labels {
            let path = format!("labels.{name}");
            if !(label.color.len() == 6 && label.color.chars().all(|c| c.is_ascii_hexdigit())) {
                p.push((format!("{path}.color"), format!("`{}` is not six hex digits like `0e8a16`", label.color)));
            }
            if name.trim().is_empty() || name.len() > 50 {
                p.push((path, "a label name must be 1 to 50 characters".into()));
            }
        }
        if !self.labels.contains_key(&self.admission) {
            p.push(("admission".into(), format!("label `{}` is not declared under `labels`", self.admission)));
        }
        if self.stage_by_label(&self.admission).is_none() {
            p.push(("admission".into(), format!("no stage starts on `{}`", self.admission)));
        }
        let mut seen_labels = BTreeMap::new();
        for (name, stage) in &self.stages.0 {
            let path = format!("stages.{name}");
            if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') || name.is_empty() {
                p.push((path.clone(), format!("stage name `{name}` must be lower-case letters, digits and `-`")));
            }
            if let Some(other) = seen_labels.insert(stage.label.clone(), name.clone()) {
                p.push((
                    format!("{path}.label"),
                    format!("label `{}` already starts stage `{other}`; each stage needs its own label", stage.label),
                ));
            }
            if !self.labels.contains_key(&stage.label) {
                p.push((format!("{path}.label"), format!("label `{}` is not declared under `labels`", stage.label)));
            }
            let role = self.roles.get(&stage.role);
            if role.is_none() {
                p.push((format!("{path}.role"), format!("role `{}` is not defined under `roles`", stage.role)));
            }
            if stage.outcomes.is_empty() {
                p.push((format!("{path}.outcomes"), "a stage needs at least one outcome".into()));
            }
            for (outcome, target) in &stage.outcomes {
                let opath = format!("{path}.outcomes.{outcome}");
                if !outcome.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
                    p.push((opath.clone(), format!("outcome `{outcome}` must be lower-case letters, digits and `-`")));
                }
                if !self.labels.contains_key(target) {
                    p.push((opath, format!("target label `{target}` is not declared under `labels`")));
                }
            }
            let per_outcome = stage.requires_for.iter().flat_map(|(outcome, kinds)| {
                kinds.iter().enumerate().map(move |(i, k)| (format!("requires_for.{outcome}.{i}"), k))
            });
            for outcome in stage.requires_for.keys() {
                if !stage.outcomes.contains_key(outcome) {
                    p.push((
                        format!("{path}.requires_for.{outcome}"),
                        format!("`{outcome}` is not an outcome of this stage"),
                    ));
                }
            }
            let all = stage.requires.iter().enumerate().map(|(i, k)| (format!("requires.{i}"), k)).chain(per_outcome);
            for (sub, kind) in all {
                let rpath = format!("{path}.{sub}");
                if !KNOWN_KINDS.contains(&kind.as_str()) {
                    p.push((rpath, format!("note kind `{kind}` is unknown")));
                } else if role.is_some_and(|r| !r.writes.contains(kind)) {
                    p.push((rpath, format!("role `{}` may not write `{kind}`, so no run could pass", stage.role)));
                }
            }
            if stage.time_limit.is_zero() {
                p.push((format!("{path}.time_limit"), "must be longer than zero".into()));
            }
            if let Some(e) = &stage.emulator {
                p.extend(crate::workspace::config::validate(e, &format!("{path}.emulator")));
            }
        }
        for (name, role) in &self.roles {
            let path = format!("roles.{name}");
            if name == ENGINE_ROLE {
                p.push((path.clone(), format!("`{ENGINE_ROLE}` is reserved for notes the engine writes")));
            }
            for (i, kind) in role.writes.iter().enumerate() {
                if !KNOWN_KINDS.contains(&kind.as_str()) {
                    p.push((
                        format!("{path}.writes.{i}"),
                        format!("note kind `{kind}` is unknown (known: {})", KNOWN_KINDS.join(", ")),
                    ));
                }
                if ENGINE_KINDS.contains(&kind.as_str()) {
                    p.push((format!("{path}.writes.{i}"), format!("`{kind}` is written by the engine only")));
                }
            }
            if let Some(root) = root {
                let file = root.join(&role.prompt);
                if !file.is_file() {
                    p.push((format!("{path}.prompt"), format!("template `{}` does not exist", role.prompt.display())));
                }
            }
        }
        let d = &self.decomposition;
        if !(1..=5).contains(&d.max_depth) {
            p.push(("decomposition.max_depth".into(), format!("{} is out of range; use 1 to 5", d.max_depth)));
        }
        if !(1..=50).contains(&d.max_children) {
            p.push(("decomposition.max_children".into(), format!("{} is out of range; use 1 to 50", d.max_children)));
        }
        let c = &self.discharge;
        for (path, label) in [
            ("decomposition.waiting_label", &d.waiting_label),
            ("decomposition.blocked_label", &d.blocked_label),
            ("discharge.discharged_label", &c.discharged_label),
            ("discharge.awaiting_label", &c.awaiting_label),
            ("discharge.approved_label", &c.approved_label),
        ] {
            if !self.labels.contains_key(label) {
                p.push((path.into(), format!("label `{label}` is not declared under `labels`")));
            } else if self.stage_by_label(label).is_some() {
                p.push((path.into(), format!("label `{label}` starts a stage; use a label where patients rest")));
            }
        }
        if c.approver_permission < Permission::Maintain {
            p.push((
                "discharge.approver_permission".into(),
                "must be `maintain` or `admin`: approving a merge is a chief's decision".into(),
            ));
        }
        p.extend(self.departments.validate(self));
        if let Some(e) = &self.emulator {
            p.extend(crate::workspace::config::validate(e, "emulator"));
        }
        // Reachability: every stage must be reachable from admission.
        let reached = self.reachable_labels();
        for (name, stage) in &self.stages.0 {
            if !reached.contains(stage.label.as_str()) {
                p.push((
                    format!("stages.{name}"),
                    format!("no outcome leads to `{}`, so stage `{name}` can never run", stage.label),
                ));
            }
        }
        p
    }

    fn reachable_labels(&self) -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([self.admission.as_str()]);
        while let Some(label) = queue.pop_front() {
            if !seen.insert(label) {
                continue;
            }
            if let Some(stage) = self.stage_by_label(label) {
                queue.extend(stage.config.outcomes.values().map(String::as_str));
            }
        }
        seen
    }

    pub fn stage(&self, name: &str) -> Option<Stage<'_>> {
        self.stages.0.iter().find(|(n, _)| n == name).map(|(name, config)| Stage { name, config })
    }

    pub fn stage_by_label(&self, label: &str) -> Option<Stage<'_>> {
        self.stages.0.iter().find(|(_, s)| s.label == label).map(|(name, config)| Stage { name, config })
    }

    pub fn stages(&self) -> impl Iterator<Item = Stage<'_>> {
        self.stages.0.iter().map(|(name, config)| Stage { name, config })
    }

    /// The emulator a stage run gets: the stage's own, else the top-level one.
    pub fn emulator_for(&self, stage: &str) -> Option<&EmulatorConfig> {
        self.stage(stage).and_then(|s| s.config.emulator.as_ref()).or(self.emulator.as_ref())
    }

    pub fn role(&self, name: &str) -> Option<&RoleConfig> {
        self.roles.get(name)
    }

    /// Labels the engine owns (declared under `labels`).
    pub fn is_ward_label(&self, label: &str) -> bool {
        self.labels.contains_key(label)
    }

    /// `labels` with every ward label replaced by `place`: the patient is in
    /// one place, and labels that are not ward's stay as they are.
    pub fn labels_at(&self, labels: &[String], place: &str) -> Vec<String> {
        let mut out: Vec<String> = labels.iter().filter(|l| !self.is_ward_label(l)).cloned().collect();
        out.push(place.to_string());
        out
    }

    /// Labels that start no stage: where a patient rests.
    pub fn is_resting_label(&self, label: &str) -> bool {
        self.is_ward_label(label) && self.stage_by_label(label).is_none()
    }

    pub fn label_specs(&self) -> Vec<LabelSpec> {
        self.labels
            .iter()
            .map(|(name, l)| LabelSpec {
                name: name.clone(),
                color: l.color.clone(),
                description: l.description.clone(),
            })
            .collect()
    }
}

/// Kinds only the engine writes.
pub const ENGINE_KINDS: &[&str] =
    &["ADMISSION", "REFUSAL", "SWEEP", "LOCKDOWN", "COST", "GROUNDEDNESS", "PRECEDENT_LOOKUP", "OUTCOME"];

/// Finds the line and column of a dotted path (`stages.treat.outcomes.stuck`)
/// in block-style YAML by following indentation. Good enough for the
/// hand-written files ward reads; falls back to the deepest key found.
pub fn locate(text: &str, path: &str) -> (usize, usize) {
    let mut best = (1, 1);
    let mut parent_indent: Option<usize> = None;
    let mut start = 0;
    let lines: Vec<&str> = text.lines().collect();
    'segments: for segment in path.split('.') {
        let mut i = start;
        while i < lines.len() {
            let line = lines[i];
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                i += 1;
                continue;
            }
            if parent_indent.is_some_and(|pi| indent <= pi) && i > start {
                break;
            }
            let key = trimmed.trim_start_matches("- ");
            let matches_key = key
                .strip_prefix(segment)
                .or_else(|| key.strip_prefix(&format!("\"{segment}\"")))
                .or_else(|| key.strip_prefix(&format!("'{segment}'")))
                .is_some_and(|rest| rest.trim_start().starts_with(':'));
            // A list index: the n-th `- ` item under the parent.
            let is_index = segment.parse::<usize>().ok();
            // A path starts at the top level: `discharge.x` is not `stages.discharge.x`.
            if matches_key && (parent_indent.is_some() || indent == 0) {
                best = (i + 1, indent + 1);
                parent_indent = Some(indent);
                start = i + 1;
                continue 'segments;
            }
            if let Some(n) = is_index {
                let mut count = 0;
                let mut j = start;
                while j < lines.len() {
                    let l = lines[j];
                    let t = l.trim_start();
                    let ind = l.len() - t.len();
                    if !t.is_empty() && parent_indent.is_some_and(|pi| ind <= pi) && !t.starts_with('-') {
                        break;
                    }
                    if t.starts_with("- ") || t == "-" {
                        if count == n {
                            best = (j + 1, ind + 1);
                            start = j + 1;
                            parent_indent = Some(ind);
                            continue 'segments;
                        }
                        count += 1;
                    }
                    // Flow list on the parent line: `[a, b]`.
                    j += 1;
                }
                break 'segments;
            }
            i += 1;
        }
        break;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = include_str!("../.github/ward.yml");

    #[test]
    fn the_shipped_pipeline_parses_and_validates() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let config = Config::parse(SHIPPED, Path::new(CONFIG_PATH), Some(root)).unwrap();
        assert_eq!(config.admission, "ward:admit");
        assert_eq!(config.stage_by_label("ward:treat").unwrap().name, "treat");
    }

    #[test]
    fn a_wrong_outcome_target_names_the_path_and_line() {
        let text = SHIPPED.replace("stuck: ward:consult", "stuck: ward:consul");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        let first = &err.0[0];
        assert_eq!(first.path, "stages.diagnose.outcomes.stuck");
        let line = text.lines().nth(first.line - 1).unwrap();
        assert!(line.contains("stuck: ward:consul"), "line {} is `{line}`", first.line);
        assert!(err.to_string().contains("target label `ward:consul` is not declared"));
    }

    #[test]
    fn unknown_fields_are_refused_with_a_location() {
        let text = SHIPPED.replace("  admit:\n    label: ward:admit\n", "  admit:\n    lable: ward:admit\n");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        assert!(err.0[0].line > 0, "{err}");
        assert!(err.to_string().contains("unknown field `lable`"), "{err}");
    }

    #[test]
    fn decomposition_and_discharge_settings_are_validated() {
        let config = Config::parse(SHIPPED, Path::new(CONFIG_PATH), None).unwrap();
        assert_eq!(config.decomposition, DecompositionConfig::default());
        assert_eq!(config.discharge, DischargeConfig::default());
        let text = SHIPPED
            .replace("max_depth: 2 ", "max_depth: 0 ")
            .replace("blocked_label: ward:blocked", "blocked_label: ward:treat")
            .replace("approver_permission: maintain", "approver_permission: write");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["decomposition.max_depth", "decomposition.blocked_label", "discharge.approver_permission"],
            "{err}"
        );
        assert!(err.to_string().contains("label `ward:treat` starts a stage"), "{err}");
        let line = text.lines().nth(err.0[0].line - 1).unwrap();
        assert!(line.contains("max_depth: 0"), "{line}");
    }

    #[test]
    fn an_unreachable_stage_is_named() {
        let text = SHIPPED.replace("stuck: ward:consult", "stuck: ward:chief");
        let text = text.replace("      stuck: ward:consult\n", "      stuck: ward:chief\n");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        assert!(err.0.iter().any(|e| e.path == "stages.consult" && e.message.contains("can never run")), "{err}");
    }
}
