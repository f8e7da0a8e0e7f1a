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

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use crate::forge::{LabelSpec, Permission};

pub mod agents;
mod capacity;
mod departments;
mod emulator;
mod integration;
mod locate;
pub mod network;
mod paths;
mod pipeline;
pub mod schema;

pub use capacity::CapacityConfig;
pub use departments::*;
pub use emulator::{
    CheckpointConfig, EmulatorConfig, EmulatorSection, HttpProbe, POSTGRES_DATABASE, POSTGRES_PORT, POSTGRES_USER,
    Preset, Probe, ReadinessConfig, Seed, SeedConfig, render_expose, validate as emulator_validate,
};
pub use integration::IntegrationConfig;
pub use locate::locate;
pub use paths::PathsConfig;
pub use pipeline::*;

/// Where the pipeline lives, relative to the repository root.
pub const CONFIG_PATH: &str = ".github/ward.yml";

/// The label of the issue that declares a lockdown (infection control).
pub const LOCKDOWN_LABEL: &str = "ward:lockdown";

/// The whole pipeline. Every field documents its default.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Schema version; must be 1.
    pub version: u32,
    /// The login the engine acts as. Labels it applies are trusted; it may
    /// never author a precedent. Default `github-actions[bot]`.
    #[serde(default = "default_engine_account")]
    #[schemars(with = "String")]
    pub engine_account: crate::forge::EngineAccount,
    /// Sentinel prefix in charts and notes. Default `WARD`.
    #[serde(default = "default_prefix")]
    pub sentinel_prefix: String,
    /// The label a person applies to admit a patient.
    pub admission: String,
    /// Minimum permission of a person who applies the admission label.
    /// Default `triage`.
    #[serde(default = "default_admit_permission", deserialize_with = "de_permission")]
    #[schemars(schema_with = "schema::permission")]
    pub admit_permission: Permission,
    /// Least permission of a person whose pull request review counts in the
    /// discharge audit: their approval passes it, their "changes requested"
    /// sends the patient back to treatment. Reviews by others are listed and
    /// neither pass nor block. Default `write`.
    #[serde(default = "default_approve_permission", deserialize_with = "de_permission")]
    #[schemars(schema_with = "schema::permission")]
    pub approve_permission: Permission,
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
    /// Paths (relative to the repository's top; a folder ends with `/`)
    /// a treatment may not change without a chief, beyond the built-in
    /// `.github/`, the folders of `paths` (`roles/`, `skills/`,
    /// `precedents/`), the role templates and the precedent log: the rules
    /// the agents are judged by. Default: none.
    #[serde(default)]
    pub protected_paths: Vec<String>,
    /// The coding agent: a preset, a command, or both. See [`AgentConfig`].
    pub agent: AgentConfig,
    /// Every label the engine owns, with how people see it.
    pub labels: BTreeMap<String, LabelConfig>,
    /// Stages by name, in pipeline order.
    pub stages: IndexedStages,
    /// Roles by name.
    pub roles: BTreeMap<String, RoleConfig>,
    /// Where ward's own files live, relative to the repository's top:
    /// the roles, the skills and the precedent log's folders. Default the
    /// top-level `roles/`, `skills/`, `precedents/`; `ward init --into DIR`
    /// writes DIR's. See [`PathsConfig`].
    #[serde(default)]
    pub paths: PathsConfig,
    /// Precedent lookup. Default: top 3 from `log.yaml` in `paths.precedents`
    /// (`precedents/log.yaml`).
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
    /// (`max_retries` 2, `max_actions` 50, ...), budgets, groundedness and the
    /// safety department's regression label.
    /// Every field has a default; see [`Departments`].
    #[serde(default)]
    pub departments: Departments,
    /// The emulator every stage run gets (a stage's own `emulator` replaces
    /// it). Default: none. See [`EmulatorConfig`].
    #[serde(default)]
    pub emulator: Option<EmulatorConfig>,
    /// The repository's CI workflows, started with `workflow_dispatch` on a
    /// treatment branch. Default: none. See [`CiConfig`].
    #[serde(default)]
    pub ci: CiConfig,
    /// Follow-ups the agents find, filed as issues. Default: filed, labelled
    /// `ward:follow-up`, at most 10 per patient. See [`FollowUpConfig`].
    #[serde(default)]
    pub follow_ups: FollowUpConfig,
    /// Who is asked to review a treatment's pull request: logins (`rob`)
    /// and teams (`org/team`). Default: none, and the owners of the changed
    /// files in CODEOWNERS (`.github/`, the top, or `docs/`) are asked.
    #[serde(default)]
    pub reviewers: Vec<String>,
    /// Commands in issue comments: the hold label, and who may give them.
    /// Default: `ward:hold`, write permission. See [`CommandsConfig`].
    #[serde(default)]
    pub commands: CommandsConfig,
    /// How many agents run at once (`max_concurrent`, with a stage's own
    /// cap besides) and where a patient beyond it waits. Default: no cap.
    /// See [`CapacityConfig`].
    #[serde(default)]
    pub capacity: CapacityConfig,
    /// The merge queue's integration check. With it, discharge enqueues
    /// instead of merging, and `ward run` (local forge) runs the queue.
    /// Default: none (discharge merges). See [`IntegrationConfig`].
    #[serde(default)]
    pub integration: Option<IntegrationConfig>,
}

fn default_engine_account() -> crate::forge::EngineAccount {
    "github-actions[bot]".into()
}
fn default_prefix() -> String {
    "WARD".into()
}
fn default_admit_permission() -> Permission {
    Permission::Triage
}
fn default_approve_permission() -> Permission {
    Permission::Write
}
fn default_charts_branch() -> String {
    "ward-charts".into()
}
pub(crate) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map_err(|e| serde::de::Error::custom(format!("`{s}` is not a duration like `15m` or `1h 30m`: {e}")))
}

pub(crate) fn de_permission<'de, D: Deserializer<'de>>(d: D) -> Result<Permission, D::Error> {
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
        // `./.github/ward.yml` reads as `.github/ward.yml`; a whole-file problem has no line.
        let file = self.file.strip_prefix(".").unwrap_or(&self.file).display();
        match self.line {
            0 => write!(f, "{file}: ")?,
            line => write!(f, "{file}:{line}:{}: ", self.column)?,
        }
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

impl Config {
    /// Reads, parses and validates `<root>/.github/ward.yml` (structure
    /// only; [`crate::prompt`] checks that role templates render).
    ///
    /// `WARD_AGENT_PRESET` names the agent preset when ward.yml names none
    /// (see [`agents::resolve`]).
    pub fn load(root: &Path) -> Result<Self, ConfigErrors> {
        let file = root.join(CONFIG_PATH);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.clone(),
                line: 0,
                column: 0,
                path: String::new(),
                message: match e.kind() {
                    std::io::ErrorKind::NotFound => "there is no such file, so ward is not installed in this folder: \
                                                     run `ward init` here, or give --root (WARD_ROOT) the repository \
                                                     where ward is installed"
                        .into(),
                    _ => format!("could not read the pipeline: {e}"),
                },
            }])
        })?;
        let preset = std::env::var(agents::PRESET_VAR).ok();
        Self::parse_with_preset(&text, &file, Some(root), preset.as_deref())
    }

    /// Parses and validates; `root` (when given) is where role files must exist.
    pub fn parse(text: &str, file: &Path, root: Option<&Path>) -> Result<Self, ConfigErrors> {
        Self::parse_with_preset(text, file, root, None)
    }

    /// [`Self::parse`], with the agent preset the environment names (used
    /// when ward.yml names none).
    pub fn parse_with_preset(
        text: &str,
        file: &Path,
        root: Option<&Path>,
        preset: Option<&str>,
    ) -> Result<Self, ConfigErrors> {
        if let Err(deep) = crate::untrusted::check_yaml_depth(text, crate::untrusted::MAX_YAML_DEPTH) {
            return Err(ConfigErrors(vec![ConfigError {
                file: file.to_path_buf(),
                line: deep.line,
                column: 1,
                path: String::new(),
                message: format!("the file nests deeper than {} levels; flatten it", deep.max),
            }]));
        }
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
        let mut config = config;
        config.place_precedent_log(text);
        let mut problems = config.stages.without_mode();
        problems.extend(agents::resolve(&mut config, preset));
        if problems.is_empty() {
            problems = config.validate(root);
        }
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
        let mut p = self.validate_top();
        p.extend(self.validate_labels());
        p.extend(self.stages().flat_map(|s| pipeline::validate_stage(self, s)));
        p.extend(self.roles.iter().flat_map(|(name, role)| pipeline::validate_role(name, role, root)));
        p.extend(self.roles.iter().filter_map(|(name, role)| self.paths.role_outside(name, &role.prompt)));
        p.extend(pipeline::validate_modes(self));
        p.extend(self.validate_resting_labels());
        p.extend(self.departments.validate(self));
        if let Some(e) = &self.emulator {
            p.extend(emulator::validate(e, "emulator"));
        }
        p.extend(self.ci.validate());
        p.extend(self.follow_ups.validate(self));
        p.extend(self.capacity.validate(self));
        if let Some(i) = &self.integration {
            p.extend(i.validate(self));
        }
        // Reachability: every stage must be reachable from admission.
        let reached = self.reachable_labels();
        for stage in self.stages() {
            if !reached.contains(stage.config.label.as_str()) {
                p.push((
                    format!("stages.{}", stage.name),
                    format!("no outcome leads to `{}`, so stage `{}` can never run", stage.config.label, stage.name),
                ));
            }
        }
        p
    }

    fn validate_top(&self) -> Vec<(String, String)> {
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
        p.extend(pipeline::validate_agent(&self.agent));
        p.extend(pipeline::validate_protected_paths(&self.protected_paths));
        p.extend(self.paths.validate());
        let d = &self.decomposition;
        if !(1..=5).contains(&d.max_depth) {
            p.push(("decomposition.max_depth".into(), format!("{} is out of range; use 1 to 5", d.max_depth)));
        }
        if !(1..=50).contains(&d.max_children) {
            p.push(("decomposition.max_children".into(), format!("{} is out of range; use 1 to 50", d.max_children)));
        }
        if self.approve_permission < Permission::Triage {
            p.push((
                "approve_permission".into(),
                "must be `triage` or more: a review by anyone who can read the repository cannot approve a merge"
                    .into(),
            ));
        }
        if self.discharge.approver_permission < Permission::Maintain {
            p.push((
                "discharge.approver_permission".into(),
                "must be `maintain` or `admin`: approving a merge is a chief's decision".into(),
            ));
        }
        p.extend(self.validate_migrations());
        p
    }

    /// `discharge.migrations`: a usable pattern, and a schema ward can read:
    /// the checkpoints of a treating stage's emulator are where it comes from.
    fn validate_migrations(&self) -> Option<(String, String)> {
        let pattern = self.discharge.migrations.as_ref()?;
        let at = "discharge.migrations".to_string();
        if let Some(problem) = pattern.problem() {
            return Some((at, problem));
        }
        let checkpointed = self
            .stages()
            .any(|s| s.mode().treats() && self.emulator_for(s.name).and_then(|e| e.checkpoint()).is_some());
        (!checkpointed).then(|| {
            (
                at,
                format!(
                    "`{pattern}` asks for a migration when a treatment changes the database's schema, but no treating \
                     stage's emulator has a `checkpoint`, so ward never reads the schema; use `emulator: {{ preset: \
                     postgres }}` (or give the emulator a `checkpoint` section), or remove `migrations`"
                ),
            )
        })
    }

    fn validate_labels(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
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
        for stage in self.stages() {
            if let Some(other) = seen_labels.insert(stage.config.label.as_str(), stage.name) {
                p.push((
                    format!("stages.{}.label", stage.name),
                    format!(
                        "label `{}` already starts stage `{other}`; each stage needs its own label",
                        stage.config.label
                    ),
                ));
            }
        }
        p
    }

    /// Labels where patients rest must be declared and start no stage.
    fn validate_resting_labels(&self) -> Vec<(String, String)> {
        let (d, c) = (&self.decomposition, &self.discharge);
        let mut p = Vec::new();
        for (path, label) in [
            ("decomposition.waiting_label", &d.waiting_label),
            ("decomposition.blocked_label", &d.blocked_label),
            ("discharge.discharged_label", &c.discharged_label),
            ("discharge.awaiting_label", &c.awaiting_label),
            ("discharge.pending_label", &c.pending_label),
            ("discharge.approved_label", &c.approved_label),
            ("commands.hold_label", &self.commands.hold_label),
        ] {
            if !self.labels.contains_key(label) {
                p.push((path.into(), format!("label `{label}` is not declared under `labels`")));
            } else if self.stage_by_label(label).is_some() {
                p.push((path.into(), format!("label `{label}` starts a stage; use a label where patients rest")));
            }
        }
        p
    }

    /// A precedent log ward.yml does not place is `log.yaml` in
    /// `paths.precedents` (`precedents/log.yaml` by default).
    fn place_precedent_log(&mut self, text: &str) {
        let value: Option<serde_yaml::Value> = serde_yaml::from_str(text).ok();
        let given = value.as_ref().and_then(|v| v.get("precedents")).and_then(|p| p.get("log")).is_some();
        if !given {
            self.precedents.log = std::path::Path::new(&self.paths.precedents_dir()).join("log.yaml");
        }
    }

    /// What a treatment never changes without a chief, whatever else
    /// ward.yml says: `.github/` (the workflows and ward.yml), the folders
    /// of `paths`, every role's template and the precedent log.
    pub fn built_in_protected(&self) -> Vec<String> {
        let mut out: Vec<String> = pipeline::BUILT_IN_PROTECTED.iter().map(|s| s.to_string()).collect();
        out.extend(self.paths.protected());
        out.extend(self.roles.values().map(|r| r.prompt.to_string_lossy().replace('\\', "/")));
        out.push(self.precedents.log.to_string_lossy().replace('\\', "/"));
        out
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
                // The merge queue, after the audit, sends a conflict to the resolving stage.
                if stage.mode().audits() {
                    queue.extend(self.resolving_stage().map(|s| s.config.label.as_str()));
                }
            }
        }
        seen
    }

    pub fn stage(&self, name: &str) -> Option<Stage<'_>> {
        self.stages.iter().find(|s| s.name == name)
    }

    pub fn stage_by_label(&self, label: &str) -> Option<Stage<'_>> {
        self.stages.iter().find(|s| s.config.label == label)
    }

    /// The stage that diagnoses and plans, where a treatment too large to
    /// review goes back to split its plan.
    pub fn diagnosing_stage(&self) -> Option<Stage<'_>> {
        self.stages().find(|s| s.mode() == Mode::Diagnose)
    }

    /// The stage that changes the code, where failed audits and failed
    /// integrations go back to (validation requires one).
    pub fn treating_stage(&self) -> Option<Stage<'_>> {
        self.stages().find(|s| s.mode() == Mode::Treat)
    }

    /// The stage where the merge queue sends a patient whose branch
    /// conflicts with the base (the treating stage when there is none).
    pub fn resolving_stage(&self) -> Option<Stage<'_>> {
        self.stages().find(|s| s.mode() == Mode::Resolve)
    }

    pub fn stages(&self) -> impl Iterator<Item = Stage<'_>> {
        self.stages.iter()
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

    /// A declared ward label that says where a patient is: every one but
    /// the lockdown label (it marks the lockdown issue) and the approved
    /// label (a chief's signal on a patient that waits).
    pub fn is_place(&self, label: &str) -> bool {
        self.is_ward_label(label) && label != LOCKDOWN_LABEL && *label != self.discharge.approved_label
    }

    /// The places among `labels`, in their order: a patient has one.
    pub fn places<'a>(&self, labels: &'a [String]) -> Vec<&'a str> {
        labels.iter().map(String::as_str).filter(|l| self.is_place(l)).collect()
    }

    /// The patient's place, when it has exactly one.
    pub fn ward_label<'a>(&self, labels: &'a [String]) -> Option<&'a str> {
        match self.places(labels).as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// ward's label namespace: `ward:` when the admission label is `ward:admit`.
    pub fn namespace(&self) -> Option<&str> {
        self.admission.find(':').map(|i| &self.admission[..=i])
    }

    /// A place, or an undeclared label in ward's namespace (a typo, a label
    /// of an older pipeline): anything that claims to say where a patient is.
    pub fn is_wardish(&self, label: &str) -> bool {
        label != LOCKDOWN_LABEL
            && (self.is_ward_label(label) || self.namespace().is_some_and(|ns| label.starts_with(ns)))
    }

    /// The one label calculation: `labels` with every ward label (see
    /// [`Self::is_wardish`]) replaced by `place`. The patient is in one
    /// place, and labels that are not ward's stay as they are.
    pub fn labels_at(&self, labels: &[String], place: &str) -> Vec<String> {
        let mut out: Vec<String> = labels.iter().filter(|l| !self.is_wardish(l) && *l != place).cloned().collect();
        out.push(place.to_string());
        out
    }

    /// The one dispatch rule: moving a patient to `label` needs ward to
    /// start its stage explicitly (repository_dispatch) when `label` starts
    /// a stage and no labeled event will: with `dispatch:
    /// repository_dispatch` (labels set with the workflow token start no
    /// workflow), or when the label was on the issue already (a rerun).
    pub fn dispatches(&self, label: &str, newly_applied: bool) -> bool {
        self.stage_by_label(label).is_some() && (!newly_applied || self.dispatch == DispatchMode::RepositoryDispatch)
    }

    /// Where escalated patients go: the target of the first `escalate`
    /// outcome, else `ward:chief` (which validation requires declared).
    pub fn chief_label(&self) -> &str {
        self.stages().find_map(|s| s.config.outcomes.get("escalate")).map(String::as_str).unwrap_or("ward:chief")
    }

    /// What a person does to send an escalated patient through the pipeline
    /// again: a person may apply only the admission label (a stage label
    /// from a person is refused), and ward moves the patient from there.
    pub fn readmit_hint(&self) -> String {
        format!(
            "remove `{}` and apply `{}`: the patient is admitted again and ward moves it from there (ward refuses \
             any other stage label from a person)",
            self.chief_label(),
            self.admission
        )
    }

    /// The stage that audits the reviews and merges (validation requires
    /// exactly one).
    pub fn audit_stage(&self) -> Option<Stage<'_>> {
        self.stages().find(|s| s.mode().audits())
    }

    /// Labels that start no stage: where a patient rests.
    pub fn is_resting_label(&self, label: &str) -> bool {
        self.is_ward_label(label) && self.stage_by_label(label).is_none()
    }

    pub fn label_specs(&self) -> Vec<LabelSpec> {
        let mut specs: Vec<LabelSpec> = self
            .labels
            .iter()
            .map(|(name, l)| LabelSpec {
                name: name.clone(),
                color: l.color.clone(),
                description: l.description.clone(),
            })
            .collect();
        if self.follow_ups.file {
            specs.push(LabelSpec {
                name: self.follow_ups.label.clone(),
                color: "c5def5".into(),
                description: "Found by ward's agents out of scope; a person admits it or closes it".into(),
            });
        }
        specs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: &str = include_str!("../../.github/ward.yml");

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
    fn protected_paths_are_plain_paths_inside_the_repository() {
        let text = SHIPPED.replace("\nagent:\n", "\nprotected_paths: [deploy/, Makefile]\n\nagent:\n");
        let config = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap();
        assert_eq!(config.protected_paths, ["deploy/", "Makefile"]);
        let text =
            SHIPPED.replace("\nagent:\n", "\nprotected_paths: [\"/etc/\", ../up, \"src/*.rs\", \"\"]\n\nagent:\n");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        let said = err.to_string();
        for (path, what) in [
            ("protected_paths.0", "is absolute"),
            ("protected_paths.1", "leaves the repository"),
            ("protected_paths.2", "is a pattern"),
            ("protected_paths.3", "is empty"),
        ] {
            assert!(err.0.iter().any(|e| e.path == path && e.message.contains(what)), "{path}: {said}");
        }
        assert!(err.0.iter().all(|e| e.line > 0), "{said}");
    }

    #[test]
    fn discharge_migrations_is_a_usable_pattern_over_a_schema_ward_reads() {
        let with = |pattern: &str, emulator: &str| {
            SHIPPED
                .replace(
                    "  approver_permission: maintain\n",
                    &format!("  approver_permission: maintain\n  migrations: {pattern}\n"),
                )
                .replace("\ndecomposition:\n", &format!("\n{emulator}decomposition:\n"))
        };
        let postgres = "emulator:\n  preset: postgres\n  image: ward-postgres:test\n";
        let config = Config::parse(&with("\"db/migrations/**\"", postgres), Path::new(CONFIG_PATH), None).unwrap();
        let pattern = config.discharge.migrations.clone().unwrap();
        assert!(pattern.matches("db/migrations/0003_orders.sql"));
        assert!(pattern.matches("db/migrations/2026/0003_orders.sql"));
        assert!(!pattern.matches("db/seed.sql") && !pattern.matches("app/db/migrations/x.sql"));
        let sql = PathPattern("**/migrations/*.sql".into());
        assert!(sql.matches("migrations/1.sql") && sql.matches("svc/a/migrations/1.sql"));
        assert!(!sql.matches("migrations/old/1.sql") && !sql.matches("migrations/1.sql.bak"));
        assert!(PathPattern("db/migrations/".into()).matches("db/migrations/x/1.sql"));
        assert!(PathPattern("db/V?__*.sql".into()).matches("db/V7__add_orders.sql"));
        assert_eq!(
            Config::parse(SHIPPED, Path::new(CONFIG_PATH), None).unwrap().discharge.migrations,
            None,
            "off by default"
        );
        for (pattern, emulator, what) in [
            ("\"/db/migrations/**\"", postgres, "is absolute"),
            ("\"../migrations/*\"", postgres, "leaves the repository"),
            ("\"db/{a,b}/*.sql\"", postgres, "which ward's patterns do not have"),
            ("\"db/migrations**\"", postgres, "stands alone between slashes"),
            ("\"\"", postgres, "is empty"),
            ("\"db/migrations/**\"", "", "no treating stage's emulator has a `checkpoint`"),
        ] {
            let err = Config::parse(&with(pattern, emulator), Path::new(CONFIG_PATH), None).unwrap_err();
            let e = err.0.iter().find(|e| e.path == "discharge.migrations").unwrap_or_else(|| panic!("{err}"));
            assert!(e.message.contains(what) && e.line > 0, "{pattern}: {err}");
        }
    }

    #[test]
    fn agent_writable_names_paths_and_refuses_the_whole_system() {
        let text = SHIPPED.replace("\nagent:\n", "\nagent:\n  writable: [/var/cache/tool, ../build]\n");
        let config = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap();
        assert_eq!(config.agent.writable, ["/var/cache/tool", "../build"]);
        let text = SHIPPED.replace("\nagent:\n", "\nagent:\n  writable: [\"/\", \"\", \" x\", ., \"/tmp\\u0000x\"]\n");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        let said = err.to_string();
        for (path, what) in [
            ("agent.writable.0", "the whole system"),
            ("agent.writable.1", "is empty"),
            ("agent.writable.2", "spaces"),
            ("agent.writable.3", "the whole repository"),
            ("agent.writable.4", "NUL"),
        ] {
            assert!(err.0.iter().any(|e| e.path == path && e.message.contains(what)), "{path}: {said}");
        }
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
    fn the_prompt_inside_a_script_is_refused_and_points_to_the_prompt_file() {
        let agent = r#"command: ["{ward}", "stand-in"]"#;
        assert!(SHIPPED.contains(agent));
        let with = |command: &str| SHIPPED.replace(agent, &format!("command: {command}"));
        for bad in [
            r#"["sh", "-c", "my-agent --task \"{prompt}\""]"#,
            r#"["bash", "-lc", "{prompt}"]"#,
            r#"["python3", "-c", "print('{prompt}')"]"#,
            r#"["my-agent", "--task", "fix: {prompt}"]"#,
        ] {
            let err = errors_of(&with(bad));
            assert_eq!(err.0[0].path, "agent.command.2", "{bad}: {err}");
            assert!(err.to_string().contains("pass `{prompt_file}` instead"), "{err}");
        }
        for good in [
            r#"["my-agent", "--task", "{prompt}"]"#,
            r#"["my-agent", "--task={prompt}"]"#,
            r#"["sh", "-c", "exec my-agent < \"$1\"", "sh", "{prompt_file}"]"#,
        ] {
            Config::parse(&with(good), Path::new(CONFIG_PATH), None).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn a_deeply_nested_ward_yml_is_refused_before_it_is_parsed() {
        let deep = format!("{SHIPPED}\nextra: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let err = errors_of(&deep);
        assert!(err.to_string().contains("nests deeper than 64 levels; flatten it"), "{err}");
        assert_eq!(err.0[0].line, SHIPPED.lines().count() + 2, "{err}");
    }

    fn errors_of(text: &str) -> ConfigErrors {
        Config::parse(text, Path::new(CONFIG_PATH), None).unwrap_err()
    }

    /// The line an error points at, for asserting that it is the right one.
    fn line_of<'a>(text: &'a str, e: &ConfigError) -> &'a str {
        text.lines().nth(e.line - 1).unwrap_or_default()
    }

    #[test]
    fn a_renamed_discharge_stage_is_refused_where_it_is() {
        let renamed = SHIPPED.replace(
            "  discharge:\n    label: ward:discharge\n    role: discharge-nurse\n    mode: discharge\n",
            "  final-check:\n    label: ward:discharge\n    role: discharge-nurse\n",
        );
        assert_ne!(renamed, SHIPPED);
        let err = errors_of(&renamed);
        let e = err.0.iter().find(|e| e.path == "stages.final-check").expect("the stage is named");
        assert!(e.message.contains("has no `mode`"), "{err}");
        assert!(line_of(&renamed, e).contains("final-check:"), "{err}");
        assert!(err.to_string().contains(".github/ward.yml:"), "file:line: {err}");
        // Renamed with its mode, it is the auditing stage still.
        let kept = SHIPPED
            .replace("  discharge:\n    label: ward:discharge", "  final-check:\n    label: ward:discharge")
            .replace("discharge.audit-failed]", "final-check.audit-failed]");
        let config = Config::parse(&kept, Path::new(CONFIG_PATH), None).unwrap();
        assert_eq!(config.audit_stage().unwrap().name, "final-check");
        // A mode that is not one fails at its line.
        let typo = SHIPPED.replace("mode: discharge", "mode: dischrge");
        let err = errors_of(&typo);
        assert!(line_of(&typo, &err.0[0]).contains("mode: dischrge"), "{err}");
    }

    #[test]
    fn the_auditing_stage_must_pass_and_fail_and_be_alone() {
        let no_fail = SHIPPED.replace("      audit-failed: ward:code-review\n", "");
        assert_ne!(no_fail, SHIPPED);
        let err = errors_of(&no_fail);
        let e = err.0.iter().find(|e| e.path == "stages.discharge.outcomes").expect("the outcomes are named");
        assert!(e.message.contains("`audit-failed`"), "{err}");
        assert!(line_of(&no_fail, e).contains("outcomes:"), "{err}");
        let two = SHIPPED.replace("    mode: code\n", "    mode: discharge\n");
        let err = errors_of(&two);
        assert!(err.0.iter().any(|e| e.path.ends_with(".mode") && e.message.contains("exactly one")), "{err}");
        let no_treat = SHIPPED.replace("    mode: treat\n", "    mode: diagnose\n");
        assert!(errors_of(&no_treat).0.iter().any(|e| e.message.contains("`mode: treat`")));
    }

    #[test]
    fn max_diff_lines_limits_a_treatment_only() {
        let ok = SHIPPED.replace("    mode: treat\n", "    mode: treat\n    max_diff_lines: 300\n");
        let config = Config::parse(&ok, Path::new(CONFIG_PATH), None).unwrap();
        assert_eq!(config.stage("treat").unwrap().config.max_diff_lines, Some(300));
        assert_eq!(config.diagnosing_stage().unwrap().name, "diagnose");
        let on_review = SHIPPED.replace("    mode: code\n", "    mode: code\n    max_diff_lines: 300\n");
        let err = errors_of(&on_review);
        assert!(
            err.0.iter().any(|e| e.path == "stages.code-review.max_diff_lines" && e.message.contains("code mode")),
            "{err}"
        );
        let zero = SHIPPED.replace("    mode: treat\n", "    mode: treat\n    max_diff_lines: 0\n");
        assert!(errors_of(&zero).to_string().contains("must be 1 or more"));
    }

    #[test]
    fn a_cap_or_a_merge_queue_needs_its_resting_label_declared() {
        let capped = format!("{SHIPPED}\ncapacity:\n  max_concurrent: 2\n");
        let err = errors_of(&capped);
        assert!(
            err.0.iter().any(|e| e.path == "capacity.queued_label" && e.message.contains("`ward:queued`")),
            "{err}"
        );
        let declared = capped
            .replace("  ward:lockdown:", "  ward:queued: { color: \"ededed\", description: \"q\" }\n  ward:lockdown:");
        let config = Config::parse(&declared, Path::new(CONFIG_PATH), None).unwrap();
        assert!(config.capacity.capped(&config));
        let shipped = Config::parse(SHIPPED, Path::new(CONFIG_PATH), None).unwrap();
        assert!(!shipped.capacity.capped(&shipped), "no cap by default");
        let zero = declared.replace("max_concurrent: 2", "max_concurrent: 0");
        assert!(errors_of(&zero).to_string().contains("must be 1 or more"));
        // The shipped file declares the default `ward:merge-queue` (GitHub's queue rests there too).
        let queue = format!("{SHIPPED}\nintegration:\n  command: []\n  queued_label: ward:nowhere\n");
        let err = errors_of(&queue);
        assert!(err.0.iter().any(|e| e.path == "integration.command"), "{err}");
        assert!(err.0.iter().any(|e| e.path == "integration.queued_label"), "{err}");
    }

    #[test]
    fn an_unknown_note_kind_is_refused_at_its_line() {
        let text = SHIPPED.replace("writes: [DISCHARGE_CHECKLIST]", "writes: [DISCHARGE_CHECKLST]");
        let err = errors_of(&text);
        assert!(err.to_string().contains("note kind `DISCHARGE_CHECKLST` is unknown"), "{err}");
        assert!(line_of(&text, &err.0[0]).contains("DISCHARGE_CHECKLST"), "{err}");
    }

    #[test]
    fn an_unreachable_stage_is_named() {
        let text = SHIPPED.replace("stuck: ward:consult", "stuck: ward:chief");
        let text = text.replace("      stuck: ward:consult\n", "      stuck: ward:chief\n");
        let err = Config::parse(&text, Path::new(CONFIG_PATH), None).unwrap_err();
        assert!(err.0.iter().any(|e| e.path == "stages.consult" && e.message.contains("can never run")), "{err}");
    }
}
