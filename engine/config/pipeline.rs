//! The pipeline sections of `ward.yml`: labels, stages and their modes,
//! roles, the agent, decomposition, discharge, precedents.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::{EmulatorConfig, de_duration, de_permission};
use crate::chart::NoteKind;
use crate::forge::Permission;

/// What a stage does. The role's template branches on it, and the engine
/// acts on it: only a treating stage may leave code behind, and exactly one
/// stage audits the reviews and merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The planner reads a new patient (and may decompose it).
    Triage,
    /// The fellow reproduces, diagnoses and plans.
    Diagnose,
    /// The review attending reviews a plan.
    Plan,
    /// The fellow implements the approved plan: its commits are pushed and
    /// a pull request is opened.
    Treat,
    /// The fellow resolves a merge conflict the queue found: the branch
    /// rebased onto the current base, keeping what both plans intend. Its
    /// commits are pushed like a treatment's and go through code review.
    Resolve,
    /// The review attending takes over a stuck fellow's handoff.
    Consult,
    /// The review attending reviews the change.
    Code,
    /// The discharge nurse audits the reviews; the engine merges.
    Discharge,
}

impl Mode {
    pub const ALL: &'static [Mode] = &[
        Mode::Triage,
        Mode::Diagnose,
        Mode::Plan,
        Mode::Treat,
        Mode::Resolve,
        Mode::Consult,
        Mode::Code,
        Mode::Discharge,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Triage => "triage",
            Mode::Diagnose => "diagnose",
            Mode::Plan => "plan",
            Mode::Treat => "treat",
            Mode::Resolve => "resolve",
            Mode::Consult => "consult",
            Mode::Code => "code",
            Mode::Discharge => "discharge",
        }
    }

    /// A treating stage's changes are committed, pushed and proposed (a
    /// conflict's resolution too).
    pub const fn treats(self) -> bool {
        matches!(self, Mode::Treat | Mode::Resolve)
    }

    /// The stage that audits the reviews and merges.
    pub const fn audits(self) -> bool {
        matches!(self, Mode::Discharge)
    }

    /// Every mode's name, joined for error messages.
    pub fn known() -> String {
        Self::ALL.iter().map(|m| format!("`{}`", m.as_str())).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is none of the modes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a mode (modes: {known})", known = Mode::known())]
pub struct NotAMode(pub String);

impl FromStr for Mode {
    type Err = NotAMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.iter().copied().find(|m| m.as_str() == s).ok_or_else(|| NotAMode(s.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DischargeConfig {
    /// A merged and closed patient. Default `ward:discharged`.
    #[serde(default = "default_discharged_label")]
    pub discharged_label: String,
    /// Human approval mode: where a passed audit waits. Default `ward:awaiting-chief`.
    #[serde(default = "default_awaiting_label")]
    pub awaiting_label: String,
    /// Where a patient rests while its audit waits for something that has
    /// not happened yet (CI still running or not started, no review by a
    /// person yet); events about its pull request wake it. Default
    /// `ward:awaiting-review`.
    #[serde(default = "default_pending_label")]
    pub pending_label: String,
    /// Human approval mode: the label a chief applies to let the engine
    /// merge. Default `ward:approved`.
    #[serde(default = "default_approved_label")]
    pub approved_label: String,
    /// Least permission of the person who applies `approved_label`: `maintain`
    /// (default) or `admin`.
    #[serde(default = "default_approver_permission", deserialize_with = "de_permission")]
    #[schemars(schema_with = "super::schema::permission")]
    pub approver_permission: Permission,
    /// Where the repository's database migrations live, as a path pattern
    /// (`db/migrations/**`, `migrations/*.sql`: `*` within a folder, `**`
    /// across folders, `?` one character). When set, the discharge audit
    /// checks that a pull request whose treatment changed the emulator's
    /// database schema (as ward read it from the checkpoints: the seed's
    /// export against the treatment's) adds or changes a file matching it.
    /// Needs a treating stage whose emulator has a `checkpoint`. Off by
    /// default.
    #[serde(default)]
    pub migrations: Option<PathPattern>,
}

impl Default for DischargeConfig {
    fn default() -> Self {
        Self {
            discharged_label: default_discharged_label(),
            awaiting_label: default_awaiting_label(),
            pending_label: default_pending_label(),
            approved_label: default_approved_label(),
            approver_permission: default_approver_permission(),
            migrations: None,
        }
    }
}

/// A path pattern of ward.yml, as written (`db/migrations/**`): relative
/// to the repository's top, `/` between folders; `*` matches within one
/// folder's or file's name, `**` any number of folders, `?` one character,
/// anything else itself; a trailing `/` is everything under that folder.
/// Checked when ward.yml is read ([`PathPattern::problem`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PathPattern(pub String);

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PathPattern {
    /// Why the pattern cannot be used, as a sentence; `None` when it can.
    pub fn problem(&self) -> Option<String> {
        let p = self.0.trim();
        if p.is_empty() || p == "." || p == "./" {
            return Some("is empty; name the migrations' files, e.g. `db/migrations/**`".into());
        }
        if let Some(relative) = p.strip_prefix('/') {
            return Some(format!("`{p}` is absolute; write it relative to the repository's top, e.g. `{relative}`"));
        }
        if p.split('/').any(|c| c == "..") {
            return Some(format!("`{p}` leaves the repository (`..`); name a path inside it"));
        }
        if p.contains(['[', ']', '{', '}', '\\']) {
            return Some(format!(
                "`{p}` uses `[`, `{{` or `\\`, which ward's patterns do not have; use `*` (within a folder), `**` \
                 (any folders) and `?` (one character)"
            ));
        }
        if let Some(c) = p.split('/').find(|c| c.contains("**") && *c != "**") {
            return Some(format!(
                "`{p}`: `**` stands alone between slashes (`{c}` mixes it with a name), e.g. `db/**/*.sql`"
            ));
        }
        if p != self.0 {
            return Some(format!("`{}` has spaces around it; write `{p}`", self.0));
        }
        None
    }

    /// Whether `path` (relative, `/` between folders) matches.
    pub fn matches(&self, path: &str) -> bool {
        let mut pattern: Vec<&str> = self.0.split('/').filter(|c| !c.is_empty()).collect();
        if self.0.ends_with('/') {
            pattern.push("**");
        }
        let path: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        match_parts(&pattern, &path)
    }
}

/// Folder by folder; `**` takes none or more of them.
fn match_parts(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| match_parts(rest, &path[skip..])),
        Some((first, rest)) => {
            path.split_first().is_some_and(|(name, tail)| match_name(first, name) && match_parts(rest, tail))
        }
    }
}

/// One folder's or file's name against `*` and `?`.
fn match_name(pattern: &str, name: &str) -> bool {
    let (pattern, name): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    match_chars(&pattern, &name)
}

fn match_chars(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| match_chars(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && match_chars(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && match_chars(rest, &name[1..]),
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DispatchMode {
    /// ward sends `repository_dispatch` after a label moved (labels set with
    /// the workflow token start no workflow).
    #[default]
    RepositoryDispatch,
    /// An app token is configured: the labeled event starts the next stage.
    Label,
}

/// The coding agent every stage runs: a preset (`preset: claude-code`), a
/// command of your own, or a preset whose command you replace.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// A known agent (see `docs/agents.md`): `claude-code`, `codex`,
    /// `gemini`, `aider` or `opencode`. It gives the command, the variables
    /// passed to the agent and how its usage is read. Without it,
    /// `WARD_AGENT_PRESET` (the action's `agent-preset` input) may name one.
    #[serde(default)]
    #[schemars(extend("enum" = super::agents::preset_names()))]
    pub preset: Option<String>,
    /// Argument vector; replaces the preset's when both are given.
    /// `{prompt_file}` becomes the prompt's path, `{ward}` this ward binary
    /// (the built-in stand-in is `["{ward}", "stand-in"]`); `{prompt}`, the
    /// prompt text, belongs in an argument of its own, never inside a shell
    /// string. Default: the preset's.
    #[serde(default)]
    pub command: Vec<String>,
    /// Names of engine environment variables passed to the agent, added to
    /// the preset's. Nothing else is (tokens included). Default: none.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// The model API's base URL, for a gateway or a proxy in front of the
    /// model: handed to the preset's CLI the way it reads it (Claude Code's
    /// `ANTHROPIC_BASE_URL`, codex's `openai_base_url`, aider's
    /// `OPENAI_API_BASE`; docs/agents.md). Default: the job's own variable
    /// for it, else the CLI's default endpoint.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The agent's network (engine/agent/wall.rs): walled by default, its
    /// only ways out ward's model proxy and the hosts `allow` names; `open`
    /// runs it on the host's network. Where this system cannot wall an
    /// agent, ward refuses to run one unless this says `open`.
    #[serde(default)]
    pub network: super::network::Network,
    /// Whether the agent may reach the Docker socket. Default false: it is
    /// hidden from the agent behind the wall.
    #[serde(default)]
    pub docker: bool,
    /// Folders (or files) the agent may write besides its worktree, its
    /// private HOME and temp folder: behind the walls the rest of the
    /// system is read-only. Absolute, or relative to the repository's top;
    /// one that does not exist when the agent starts is left out. Default: none.
    #[serde(default)]
    pub writable: Vec<String>,
    /// The preset that applied, and why (set by [`super::Config::parse`]).
    #[serde(skip)]
    pub applied: Option<super::agents::Applied>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelConfig {
    /// Six hex digits, no `#`.
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{6}$"))]
    pub color: String,
    pub description: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The label in that starts this stage.
    pub label: String,
    /// The role that runs it (a key of `roles`).
    pub role: String,
    /// What the stage does, which the engine acts on and the role's
    /// template branches on: one of [`Mode`]. Default: the stage's name,
    /// when that is a mode.
    // As written; [`Stage::mode`] is the one to read.
    #[serde(default)]
    mode: Option<Mode>,
    /// Wall-clock limit of one agent run. Default 30m.
    #[serde(default = "default_time_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
    /// A patient whose label is older than this with no live run is
    /// stalled (the charge nurse revives it). Default 1h.
    #[serde(default = "default_stall_after", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub stall_after: Duration,
    /// Note kinds every run of this stage must write.
    #[serde(default)]
    pub requires: Vec<NoteKind>,
    /// Note kinds a run must write when it declares a given outcome.
    #[serde(default)]
    pub requires_for: BTreeMap<String, Vec<NoteKind>>,
    /// Outcome name -> label out.
    pub outcomes: BTreeMap<String, String>,
    /// This stage's emulator, replacing the top-level one. Default: the top-level one.
    #[serde(default)]
    pub emulator: Option<EmulatorConfig>,
    /// A treating stage only: the most lines one run may change (added plus
    /// removed, counted by ward against the commit the run started at). A
    /// larger change is refused and the patient goes back to the diagnosing
    /// stage to split its plan. Default: no limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_diff_lines: Option<u64>,
    /// The most runs of this stage at once (within `capacity.max_concurrent`);
    /// a patient beyond it rests at `capacity.queued_label`. Default: no limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_concurrent: Option<u32>,
    /// This stage's allowlist, replacing `agent.network.allow` (a planner
    /// needs only the model; a treatment may need the package registries).
    /// Default: the agent's.
    #[serde(default)]
    pub network: Option<super::network::NetworkAllow>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// Template path relative to the repository root.
    pub prompt: PathBuf,
    /// Note kinds this role may write (OUTCOME is always allowed).
    pub writes: Vec<NoteKind>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrecedentConfig {
    /// The log's file, relative to the repository's top. Default `log.yaml`
    /// in `paths.precedents` (`precedents/log.yaml`).
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

/// What a treatment never changes without a chief, whatever ward.yml says:
/// the workflows and ward.yml. The roles, skills and precedents are
/// protected where `paths` puts them ([`super::Config::built_in_protected`]).
pub const BUILT_IN_PROTECTED: &[&str] = &[".github/"];

/// `protected_paths`: each a plain relative path inside the repository (a
/// prefix, not a pattern), so that what it covers is obvious.
pub fn validate_protected_paths(paths: &[String]) -> Vec<(String, String)> {
    let mut p = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let at = format!("protected_paths.{i}");
        let trimmed = path.trim();
        let problem = if trimmed.is_empty() || trimmed == "/" || trimmed == "." || trimmed == "./" {
            Some("is empty; name a file or a folder (ending with `/`) inside the repository".to_string())
        } else if let Some(relative) = trimmed.strip_prefix('/') {
            Some(format!("`{path}` is absolute; write it relative to the repository's top, e.g. `{relative}`"))
        } else if trimmed.split('/').any(|c| c == "..") {
            Some(format!("`{path}` leaves the repository (`..`); name a path inside it"))
        } else if trimmed.contains(['*', '?', '[', '\\']) {
            Some(format!("`{path}` is a pattern; name a file or a folder prefix (e.g. `deploy/`), not a glob"))
        } else {
            None
        };
        if let Some(message) = problem {
            p.push((at, message));
        }
    }
    p
}

/// `ci:`: the repository's CI, which ward starts on a treatment branch
/// (issue 11) and `ward doctor` checks; locally, the command ward runs as
/// the local forge's CI (issue 15).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CiConfig {
    /// File names under `.github/workflows/` of the CI workflows to start
    /// with `workflow_dispatch` on a treatment branch, e.g. `[ci.yml]`.
    /// Each must list `workflow_dispatch` in its `on:`. Default: none.
    #[serde(default)]
    #[schemars(inner(regex(pattern = r"^[A-Za-z0-9._-]+\.ya?ml$")))]
    pub workflows: Vec<String>,
    /// The local CI: a shell command (`sh -c`) run on the local forge after
    /// a treatment commits, in a fresh checkout of the branch's head, e.g.
    /// `cargo test`. Exit 0 is green. Its result is the head's check run,
    /// which the discharge audit reads as it reads GitHub's. Not used on
    /// GitHub (there the repository's own CI runs). Default: none, and the
    /// audit waits for a CI that never reports.
    #[serde(default)]
    pub command: Option<String>,
    /// The local CI's wall-clock limit; a command still running is stopped
    /// and its check run is `timed_out`. Default 10m.
    #[serde(default = "default_ci_time_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
}

impl Default for CiConfig {
    fn default() -> Self {
        Self { workflows: Vec::new(), command: None, time_limit: default_ci_time_limit() }
    }
}

fn default_ci_time_limit() -> Duration {
    Duration::from_secs(10 * 60)
}

impl CiConfig {
    pub(super) fn validate(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.command.as_ref().is_some_and(|c| c.trim().is_empty()) {
            p.push(("ci.command".into(), "is empty; give the command that tests the repository, or remove it".into()));
        }
        if self.time_limit.is_zero() {
            p.push(("ci.time_limit".into(), "must be longer than 0s".into()));
        }
        for (i, name) in self.workflows.iter().enumerate() {
            let file_name = !name.contains('/') && !name.starts_with('.') && !name.trim().is_empty();
            if !file_name || !(name.ends_with(".yml") || name.ends_with(".yaml")) {
                p.push((
                    format!("ci.workflows.{i}"),
                    format!("`{name}` is not a workflow file name like `ci.yml` (a file in .github/workflows/)"),
                ));
            } else if self.workflows[..i].contains(name) {
                p.push((format!("ci.workflows.{i}"), format!("`{name}` is listed twice")));
            }
        }
        p
    }
}

/// `commands:`: what people may say to ward in an issue comment
/// (`/ward retry`, `/ward hold`, `/ward resume`, `/ward chief <reason>`,
/// `/ward approve`; docs/github.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandsConfig {
    /// Where a held patient rests until `/ward resume` (its stages do
    /// nothing meanwhile). Declared under `labels`. Default `ward:hold`.
    #[serde(default = "default_hold_label")]
    pub hold_label: String,
    /// Least permission of a person whose `/ward retry`, `hold`, `resume`
    /// or `chief` counts. Default `write`. (`/ward approve` needs
    /// `discharge.approver_permission`, as the approved label does.)
    #[serde(default = "default_command_permission", deserialize_with = "super::de_permission")]
    #[schemars(schema_with = "super::schema::permission")]
    pub permission: Permission,
}

impl Default for CommandsConfig {
    fn default() -> Self {
        Self { hold_label: default_hold_label(), permission: default_command_permission() }
    }
}

fn default_hold_label() -> String {
    "ward:hold".into()
}
fn default_command_permission() -> Permission {
    Permission::Write
}

/// Stages keep the order of the file (it is the order people read them in),
/// each with its mode resolved as it is read: its `mode:`, else its name
/// when that is a mode.
#[derive(Debug, Clone, Default)]
pub struct IndexedStages {
    stages: Vec<(String, Mode, StageConfig)>,
    /// The stages with neither, which [`super::Config::parse`] refuses by name.
    without_mode: Vec<String>,
}

impl IndexedStages {
    pub fn iter(&self) -> impl Iterator<Item = Stage<'_>> {
        self.stages.iter().map(|(name, mode, config)| Stage { name, mode: *mode, config })
    }

    pub fn len(&self) -> usize {
        self.stages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// (path, message) for each stage whose mode could not be told.
    pub(super) fn without_mode(&self) -> Vec<(String, String)> {
        let known = Mode::known();
        let problem = |name: &String| {
            let message =
                format!("stage `{name}` has no `mode`, and its name is not one; add `mode:` with one of {known}");
            (format!("stages.{name}"), message)
        };
        self.without_mode.iter().map(problem).collect()
    }
}

impl<'de> Deserialize<'de> for IndexedStages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = IndexedStages;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of stage name to stage")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = IndexedStages::default();
                let mut names = BTreeSet::new();
                while let Some((name, stage)) = map.next_entry::<String, StageConfig>()? {
                    if !names.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!("stage `{name}` is defined twice")));
                    }
                    match stage.mode.or_else(|| name.parse().ok()) {
                        Some(mode) => out.stages.push((name, mode, stage)),
                        None => out.without_mode.push(name),
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
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
fn default_pending_label() -> String {
    "ward:awaiting-review".into()
}
fn default_approved_label() -> String {
    "ward:approved".into()
}
fn default_approver_permission() -> Permission {
    Permission::Maintain
}

/// A stage, looked up, with the mode it runs in.
#[derive(Debug, Clone, Copy)]
pub struct Stage<'a> {
    pub name: &'a str,
    mode: Mode,
    pub config: &'a StageConfig,
}

impl Stage<'_> {
    /// What the stage does: its `mode:`, else its name (a stage with
    /// neither never reaches the stage list: [`IndexedStages`]).
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

/// What the discharge stage's nurse declares when the audit passed, and
/// the outcome a failed audit takes whatever the nurse declared.
pub const AUDIT_PASSED: &str = "discharged";
pub const AUDIT_FAILED: &str = "audit-failed";

fn is_slug(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub(super) fn validate_agent(agent: &AgentConfig) -> Vec<(String, String)> {
    let mut p = Vec::new();
    if agent.command.is_empty() && agent.applied.is_none() {
        p.push((
            "agent".into(),
            format!(
                "names no agent: add `preset:` (one of {}) or `command:`, e.g. [\"{{ward}}\", \"stand-in\"]",
                super::agents::known()
            ),
        ));
    } else if agent.command.first().is_none_or(|program| program.trim().is_empty()) {
        p.push(("agent.command".into(), "must name a program, e.g. [\"{ward}\", \"stand-in\"]".into()));
    }
    for (i, arg) in agent.command.iter().enumerate() {
        if let Some(why) = prompt_as_code(&agent.command, i, arg) {
            p.push((format!("agent.command.{i}"), why));
        }
    }
    if let Some(url) = &agent.base_url {
        let scheme = url.split_once("://").map(|(s, rest)| (s, rest.trim()));
        if !matches!(scheme, Some(("http" | "https", host)) if !host.is_empty() && !host.contains(char::is_whitespace))
        {
            p.push((
                "agent.base_url".into(),
                format!(
                    "`{url}` is not an http(s) URL; write the gateway's base, e.g. `https://gateway.example.com/v1`"
                ),
            ));
        }
    }
    for (i, name) in agent.pass_env.iter().enumerate() {
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
    for (i, rule) in agent.network.allow().iter().enumerate() {
        if let Some(why) = super::network::check_rule(rule) {
            p.push((format!("agent.network.allow.{i}"), why));
        }
    }
    for (i, path) in agent.writable.iter().enumerate() {
        if let Some(why) = check_writable(path) {
            p.push((format!("agent.writable.{i}"), why));
        }
    }
    p
}

/// Why one `agent.writable` entry is refused: empty, the whole system, or
/// a character no path holds.
fn check_writable(path: &str) -> Option<String> {
    let trimmed = path.trim();
    if trimmed.is_empty() {
        return Some("is empty; name a folder the agent's tools write, e.g. `/var/cache/my-tool` or `../build`".into());
    }
    if trimmed != path {
        return Some(format!("`{path}` starts or ends with spaces; write the path alone"));
    }
    if path.contains(['\0', '\n']) {
        return Some("holds a NUL or a newline, which no path does".into());
    }
    if Path::new(path).components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::CurDir)) {
        return Some(format!(
            "`{path}` would make the whole system or the whole repository writable; name the folder the tool needs"
        ));
    }
    None
}

/// Why argument `i` of the agent's command would run the prompt's words as
/// code: `{prompt}` inside a longer argument (a shell string, `--x "{prompt}"`
/// in a script), or as the script of `sh -c`, `python -c`, `node -e`.
/// `{prompt}` alone, or as the value of a flag (`--message={prompt}`), is
/// data. The prompt holds issue text: its words must never be a program.
fn prompt_as_code(command: &[String], i: usize, arg: &str) -> Option<String> {
    if !arg.contains("{prompt}") {
        return None;
    }
    let script = i > 0 && {
        let flag = &command[i - 1];
        flag.starts_with('-') && !flag.starts_with("--") && flag.contains(['c', 'e'])
    };
    let flag_value =
        arg.starts_with('-') && arg.ends_with("={prompt}") && !arg[..arg.len() - 9].contains([' ', '$', '`']);
    if !script && (arg == "{prompt}" || flag_value) {
        return None;
    }
    Some(
        "`{prompt}` here puts the prompt's words into a script, where issue text would run as code; \
         pass `{prompt_file}` instead and read the prompt from it, e.g. \
         [\"sh\", \"-c\", \"exec my-agent < \\\"$1\\\"\", \"sh\", \"{prompt_file}\"], \
         or give `{prompt}` an argument of its own"
            .into(),
    )
}

/// One stage: its name, label, role, outcomes, required notes, limits.
pub(super) fn validate_stage(config: &super::Config, stage: Stage<'_>) -> Vec<(String, String)> {
    let (name, s) = (stage.name, stage.config);
    let path = format!("stages.{name}");
    let mut p = Vec::new();
    if !is_slug(name) {
        p.push((path.clone(), format!("stage name `{name}` must be lower-case letters, digits and `-`")));
    }
    if !config.labels.contains_key(&s.label) {
        p.push((format!("{path}.label"), format!("label `{}` is not declared under `labels`", s.label)));
    }
    let role = config.roles.get(&s.role);
    if role.is_none() {
        p.push((format!("{path}.role"), format!("role `{}` is not defined under `roles`", s.role)));
    }
    if s.outcomes.is_empty() {
        p.push((format!("{path}.outcomes"), "a stage needs at least one outcome".into()));
    }
    for (outcome, target) in &s.outcomes {
        let opath = format!("{path}.outcomes.{outcome}");
        if !is_slug(outcome) {
            p.push((opath.clone(), format!("outcome `{outcome}` must be lower-case letters, digits and `-`")));
        }
        if !config.labels.contains_key(target) {
            p.push((opath, format!("target label `{target}` is not declared under `labels`")));
        }
    }
    for outcome in s.requires_for.keys().filter(|o| !s.outcomes.contains_key(*o)) {
        p.push((format!("{path}.requires_for.{outcome}"), format!("`{outcome}` is not an outcome of this stage")));
    }
    let per_outcome = s.requires_for.iter().flat_map(|(outcome, kinds)| {
        kinds.iter().enumerate().map(move |(i, k)| (format!("requires_for.{outcome}.{i}"), k))
    });
    let all = s.requires.iter().enumerate().map(|(i, k)| (format!("requires.{i}"), k)).chain(per_outcome);
    for (sub, kind) in all {
        if role.is_some_and(|r| !r.writes.contains(kind)) {
            p.push((
                format!("{path}.{sub}"),
                format!("role `{}` may not write `{kind}`, so no run could pass", s.role),
            ));
        }
    }
    if s.time_limit.is_zero() {
        p.push((format!("{path}.time_limit"), "must be longer than zero".into()));
    }
    if let Some(e) = &s.emulator {
        p.extend(super::emulator::validate(e, &format!("{path}.emulator")));
    }
    p.extend(validate_max_diff_lines(config, stage));
    p
}

/// `max_diff_lines` limits a treatment, and a refused one goes back to the
/// stage that diagnoses, so the pipeline must have one.
fn validate_max_diff_lines(config: &super::Config, stage: Stage<'_>) -> Vec<(String, String)> {
    let Some(max) = stage.config.max_diff_lines else { return Vec::new() };
    let path = format!("stages.{}.max_diff_lines", stage.name);
    let mut p = Vec::new();
    if max == 0 {
        p.push((path.clone(), "must be 1 or more (leave it out for no limit)".into()));
    }
    if stage.mode() != Mode::Treat {
        p.push((
            path.clone(),
            format!("only a `mode: treat` stage's diff is limited; stage `{}` is {} mode", stage.name, stage.mode()),
        ));
    }
    if config.diagnosing_stage().is_none() {
        p.push((
            path,
            "a change over the limit goes back to the stage that diagnoses, and no stage has `mode: diagnose`".into(),
        ));
    }
    p
}

/// One role: not the engine's name, no engine kinds, a template that exists.
pub(super) fn validate_role(name: &str, role: &RoleConfig, root: Option<&std::path::Path>) -> Vec<(String, String)> {
    use crate::chart::ENGINE_ROLE;
    let path = format!("roles.{name}");
    let mut p = Vec::new();
    if name == ENGINE_ROLE {
        p.push((path.clone(), format!("`{ENGINE_ROLE}` is reserved for notes the engine writes")));
    }
    for (i, kind) in role.writes.iter().enumerate() {
        if kind.engine_only() {
            p.push((format!("{path}.writes.{i}"), format!("`{kind}` is written by the engine only")));
        }
    }
    if let Some(root) = root
        && !root.join(&role.prompt).is_file()
    {
        p.push((format!("{path}.prompt"), format!("template `{}` does not exist", role.prompt.display())));
    }
    p
}

/// What the engine does by mode: exactly one stage audits and merges (and
/// can both pass and fail), and some stage treats.
pub(super) fn validate_modes(config: &super::Config) -> Vec<(String, String)> {
    let mut p = Vec::new();
    let audits: Vec<Stage<'_>> = config.stages().filter(|s| s.mode().audits()).collect();
    match audits.as_slice() {
        [] => p.push((
            "stages".into(),
            "no stage has `mode: discharge`: exactly one stage audits the reviews before the engine merges".into(),
        )),
        [first, others @ ..] => {
            for other in others {
                p.push((
                    format!("stages.{}.mode", other.name),
                    format!(
                        "stage `{}` already has `mode: discharge`; exactly one stage audits and merges",
                        first.name
                    ),
                ));
            }
        }
    }
    if let Some(stage) = audits.first() {
        let path = format!("stages.{}.outcomes", stage.name);
        let discharged = &config.discharge.discharged_label;
        if stage.config.outcomes.get(AUDIT_PASSED) != Some(discharged) {
            p.push((
                path.clone(),
                format!(
                    "the auditing stage needs the outcome `{AUDIT_PASSED}: {discharged}`: where a passed audit goes"
                ),
            ));
        }
        if !stage.config.outcomes.contains_key(AUDIT_FAILED) {
            p.push((path, format!("the auditing stage needs an `{AUDIT_FAILED}` outcome: where a failed audit goes")));
        }
    }
    if config.treating_stage().is_none() {
        p.push(("stages".into(), "no stage has `mode: treat`: no stage could change the code".into()));
    }
    p
}

/// `follow_ups:`: work the agents found out of scope (`Follow-up: ...`
/// lines in their notes), filed as issues a person may admit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FollowUpConfig {
    /// File follow-ups as issues. Default `true`.
    #[serde(default = "default_true")]
    pub file: bool,
    /// The label on a filed follow-up. It is not a place: the issue is no
    /// patient until a person admits it. Default `ward:follow-up`.
    #[serde(default = "default_follow_up_label")]
    pub label: String,
    /// At most this many follow-ups are filed per patient, so an agent
    /// cannot flood the tracker. Default 10.
    #[serde(default = "default_follow_up_max")]
    #[schemars(range(min = 1, max = 50))]
    pub max_per_patient: usize,
}

impl Default for FollowUpConfig {
    fn default() -> Self {
        Self { file: true, label: default_follow_up_label(), max_per_patient: default_follow_up_max() }
    }
}

fn default_true() -> bool {
    true
}
fn default_follow_up_label() -> String {
    "ward:follow-up".into()
}
fn default_follow_up_max() -> usize {
    10
}

impl FollowUpConfig {
    pub(super) fn validate(&self, config: &super::Config) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if !(1..=50).contains(&self.max_per_patient) {
            p.push((
                "follow_ups.max_per_patient".into(),
                format!("{} is out of range; use 1 to 50", self.max_per_patient),
            ));
        }
        if self.label.trim().is_empty() {
            p.push(("follow_ups.label".into(), "must not be empty".into()));
        } else if config.labels.contains_key(&self.label) || self.label == config.admission {
            p.push((
                "follow_ups.label".into(),
                format!(
                    "`{}` is one of ward's places or the admission label; a follow-up is not a patient until a \
                     person admits it, so give it a label of its own",
                    self.label
                ),
            ));
        }
        p
    }
}
