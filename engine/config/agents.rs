//! Agent presets: the non-interactive command line of each known coding
//! agent, the variables it needs, and how its usage is read. Data only, in
//! one table; [`resolve`] applies the one ward.yml (or `WARD_AGENT_PRESET`)
//! names, and docs/agents.md says where each line comes from.
//!
//! Every command reads the prompt from `{prompt_file}`: as the agent's
//! standard input through `sh -c '... < "$1"' sh {prompt_file}` (the path
//! is an argument of the shell, never part of its script), or as a file
//! argument. The prompt text is never put on a command line.

use super::{Config, UsageFormat};

/// A known agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    /// The agent's program, looked up on `PATH` (`ward doctor`).
    pub program: &'static str,
    /// The argument vector, as `agent.command` writes it.
    pub command: &'static [&'static str],
    /// What it needs passed from ward's environment: its API keys, and the
    /// variables a job sets to steer it (a gateway, a model).
    pub pass_env: &'static [&'static str],
    /// Set in its environment whatever ward's holds: the CLI's telemetry,
    /// updates and other traffic a stage does not need, off; `{home}` is
    /// the run's private HOME.
    pub env: &'static [(&'static str, &'static str)],
    /// Set only when ward runs as root, where the CLI needs it to run at all.
    pub as_root: &'static [(&'static str, &'static str)],
    /// How a gateway (`agent.base_url`) reaches it.
    pub gateway: Gateway,
    /// Files under the user's HOME it reads its configuration from, copied
    /// into the run's private HOME when they exist (never a credential).
    pub home_files: &'static [&'static str],
    /// Where it keeps its session log under HOME: a folder and the ending of
    /// the files in it (searched below the folder).
    pub transcripts: &'static [(&'static str, &'static str)],
    /// Paths it writes into the worktree for itself (caches), which git is
    /// told to ignore so they are never taken for a change.
    pub scratch: &'static [&'static str],
    /// Folders under `/tmp` it writes by name, whatever `TMPDIR` says
    /// (`{uid}` is the user's id): behind the walls, where the rest of the
    /// system is read-only, ward makes each (mode 0700) and leaves it writable.
    pub tmp_dirs: &'static [&'static str],
    /// How its standard output reports a failure.
    pub output: Output,
    /// Whether it has a shell tool (aider has none: it edits files).
    pub shell: bool,
    /// How its output reports usage.
    pub usage: UsageFormat,
    /// The workflow step's command that installs its CLI on a runner, pinned.
    pub install: &'static str,
    /// The repository secret to set (passed to the job's `env:`).
    pub secret: &'static str,
    /// The model APIs it talks to, whose key ward keeps and adds itself
    /// (engine/agent/gate.rs): the agent gets a placeholder and a loopback URL.
    pub apis: &'static [ModelApi],
    /// The version ward's end-to-end tests run (tests/real_agents.rs), as
    /// its `--version` prints it; `None`: nothing here proves the preset.
    pub proven: Option<&'static str>,
}

/// How the gateway's URL (ward.yml's `agent.base_url`, else the variable a
/// job sets for it) is handed to an agent, the way its CLI reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gateway {
    /// The job's variable (the first) carries it; ward sets every one of them.
    Env(&'static [&'static str]),
    /// codex ignores `OPENAI_BASE_URL`: `openai_base_url` in the private
    /// `$CODEX_HOME/config.toml`, from the job's `OPENAI_BASE_URL` or ward.yml.
    CodexConfig,
}

impl Gateway {
    /// The job's variable that names a gateway for this agent.
    pub fn variable(self) -> &'static str {
        match self {
            Gateway::Env(names) => names.first().copied().unwrap_or("OPENAI_BASE_URL"),
            Gateway::CodexConfig => "OPENAI_BASE_URL",
        }
    }
}

/// How a model API carries its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStyle {
    /// Anthropic's `x-api-key`.
    XApiKey,
    /// OpenAI's `Authorization: Bearer`.
    Bearer,
    /// Gemini's `x-goog-api-key`.
    GoogApiKey,
}

/// A model API a preset talks to: how its key goes, the variables that
/// hold the key (the first set one is used; every one of them gets the
/// placeholder) and the endpoint (a gateway the job names; the agent gets
/// ward's loopback URL in each), and the API's own endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelApi {
    pub style: KeyStyle,
    pub keys: &'static [&'static str],
    pub base: &'static [&'static str],
    pub default_url: &'static str,
}

const ANTHROPIC: ModelApi = ModelApi {
    style: KeyStyle::XApiKey,
    keys: &["ANTHROPIC_API_KEY"],
    base: &["ANTHROPIC_BASE_URL"],
    default_url: "https://api.anthropic.com",
};

/// What an agent's standard output is, for reading its own account of a
/// failure (a rejected key, an overloaded service) as it comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Claude Code's `--output-format stream-json` events: `api_retry`, and
    /// the `result` object.
    ClaudeStream,
    /// codex's `exec --json` events: `error` and `turn.failed`.
    CodexEvents,
    /// aider's text for people: litellm's exception lines.
    AiderText,
    /// Nothing read but its stderr.
    Opaque,
}

const CLAUDE_HOME: &[&str] = &[".claude/settings.json", ".claude/CLAUDE.md"];

/// Every preset. `proven` names the versions tests/real_agents.rs runs.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "claude-code",
        program: "claude",
        command: &[
            "sh",
            "-c",
            r#"exec claude -p --output-format stream-json --verbose --dangerously-skip-permissions < "$1""#,
            "claude-code",
            "{prompt_file}",
        ],
        pass_env: &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "ANTHROPIC_SMALL_FAST_MODEL",
            "ANTHROPIC_CUSTOM_HEADERS",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
            "AWS_REGION",
            "CLOUD_ML_REGION",
            "ANTHROPIC_VERTEX_PROJECT_ID",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "NO_PROXY",
        ],
        env: &[
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY", "1"),
        ],
        // It refuses `--dangerously-skip-permissions` as root unless told it
        // runs in a sandbox: the patient's worktree is the agent's own, and
        // ward judges everything it leaves.
        as_root: &[("IS_SANDBOX", "1")],
        gateway: Gateway::Env(&["ANTHROPIC_BASE_URL"]),
        home_files: CLAUDE_HOME,
        transcripts: &[(".claude/projects", ".jsonl")],
        scratch: &[],
        tmp_dirs: &[],
        output: Output::ClaudeStream,
        shell: true,
        usage: UsageFormat::ClaudeJson,
        install: "npm install -g @anthropic-ai/claude-code@2.1.328",
        secret: "ANTHROPIC_API_KEY",
        apis: &[ANTHROPIC],
        proven: Some("2.1.328"),
    },
    Preset {
        name: "codex",
        program: "codex",
        command: &[
            "sh",
            "-c",
            r#"exec codex exec --json --sandbox workspace-write - < "$1""#,
            "codex",
            "{prompt_file}",
        ],
        pass_env: &["CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"],
        env: &[],
        as_root: &[],
        gateway: Gateway::CodexConfig,
        home_files: &[".codex/config.toml", ".codex/AGENTS.md"],
        transcripts: &[(".codex/sessions", ".jsonl")],
        scratch: &[],
        tmp_dirs: &["/tmp/codex-daemon-{uid}"],
        output: Output::CodexEvents,
        shell: true,
        usage: UsageFormat::CodexJson,
        install: "npm install -g @openai/codex@0.163.0",
        secret: "CODEX_API_KEY",
        apis: &[ModelApi {
            style: KeyStyle::Bearer,
            keys: &["CODEX_API_KEY", "OPENAI_API_KEY"],
            base: &["OPENAI_BASE_URL"],
            default_url: "https://api.openai.com/v1",
        }],
        proven: Some("0.163.0"),
    },
    Preset {
        name: "gemini",
        program: "gemini",
        command: &[
            "sh",
            "-c",
            r#"exec gemini --output-format json --approval-mode yolo < "$1""#,
            "gemini",
            "{prompt_file}",
        ],
        pass_env: &["GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"],
        env: &[("GEMINI_TELEMETRY_ENABLED", "false")],
        as_root: &[],
        gateway: Gateway::Env(&["GOOGLE_GEMINI_BASE_URL"]),
        home_files: &[".gemini/settings.json"],
        transcripts: &[(".gemini/tmp", ".json")],
        scratch: &[],
        tmp_dirs: &[],
        output: Output::Opaque,
        shell: true,
        usage: UsageFormat::GeminiJson,
        install: "npm install -g @google/gemini-cli@0.61.0",
        secret: "GEMINI_API_KEY",
        apis: &[ModelApi {
            style: KeyStyle::GoogApiKey,
            keys: &["GEMINI_API_KEY"],
            base: &["GOOGLE_GEMINI_BASE_URL"],
            default_url: "https://generativelanguage.googleapis.com",
        }],
        proven: None,
    },
    Preset {
        name: "aider",
        program: "aider",
        // aider has no shell tool: the notes file is one more file in its
        // chat, edited like the others.
        command: &[
            "aider",
            "--message-file",
            "{prompt_file}",
            "--file",
            "{notes_file}",
            // The notes file is in the worktree, ignored by git (ward says so).
            "--add-gitignore-files",
            "--yes-always",
            "--no-auto-commits",
            "--no-gitignore",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
        ],
        pass_env: &[
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "OPENAI_API_BASE",
            "ANTHROPIC_BASE_URL",
            "AIDER_MODEL",
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "NO_PROXY",
        ],
        env: &[
            // Its chat and input histories in the private HOME, not the worktree.
            ("AIDER_CHAT_HISTORY_FILE", "{home}/.aider.chat.history.md"),
            ("AIDER_INPUT_HISTORY_FILE", "{home}/.aider.input.history"),
            // litellm fetches its price table from GitHub at every start otherwise.
            ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ],
        as_root: &[],
        gateway: Gateway::Env(&["OPENAI_API_BASE", "ANTHROPIC_BASE_URL"]),
        home_files: &[".aider.conf.yml", ".aider.model.settings.yml", ".aider.model.metadata.json"],
        transcripts: &[("", ".aider.chat.history.md")],
        // Its repository map's cache lives in the repository's top folder.
        scratch: &[".aider.tags.cache.v4/"],
        tmp_dirs: &[],
        output: Output::AiderText,
        shell: false,
        usage: UsageFormat::AiderText,
        install: "pipx install aider-chat==0.86.2",
        secret: "ANTHROPIC_API_KEY",
        apis: &[
            ModelApi {
                style: KeyStyle::Bearer,
                keys: &["OPENAI_API_KEY"],
                base: &["OPENAI_API_BASE"],
                default_url: "https://api.openai.com/v1",
            },
            ANTHROPIC,
        ],
        proven: Some("0.86.2"),
    },
    Preset {
        name: "opencode",
        program: "opencode",
        command: &["sh", "-c", r#"exec opencode run --format json --auto < "$1""#, "opencode", "{prompt_file}"],
        pass_env: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"],
        env: &[("OPENCODE_DISABLE_AUTOUPDATE", "1")],
        as_root: &[],
        gateway: Gateway::Env(&["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"]),
        home_files: &[".config/opencode/opencode.json"],
        transcripts: &[(".local/share/opencode", ".json")],
        scratch: &[],
        tmp_dirs: &[],
        output: Output::Opaque,
        shell: true,
        usage: UsageFormat::OpencodeJson,
        install: "npm install -g opencode-ai@1.18.33",
        secret: "ANTHROPIC_API_KEY",
        apis: &[
            ANTHROPIC,
            ModelApi {
                style: KeyStyle::Bearer,
                keys: &["OPENAI_API_KEY"],
                base: &["OPENAI_BASE_URL"],
                default_url: "https://api.openai.com/v1",
            },
        ],
        proven: None,
    },
];

/// The variable that names a preset when ward.yml names none (the action's
/// `agent-preset` input).
pub const PRESET_VAR: &str = "WARD_AGENT_PRESET";

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The preset names, for the schema's `enum` (and `null`, which serde
/// reads as no preset).
pub fn preset_names() -> Vec<serde_json::Value> {
    PRESETS.iter().map(|p| p.name.into()).chain([serde_json::Value::Null]).collect()
}

/// The preset names, joined for messages.
pub fn known() -> String {
    PRESETS.iter().map(|p| format!("`{}`", p.name)).collect::<Vec<_>>().join(", ")
}

/// Where the preset that applied was named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    WardYml,
    Environment,
}

/// The preset that applied, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub preset: &'static Preset,
    pub source: Source,
    /// ward.yml's `command` replaced the preset's.
    pub own_command: bool,
    /// `WARD_AGENT_PRESET` named another preset, and ward.yml won.
    pub overruled: Option<String>,
}

impl Applied {
    /// One line for `ward config check`.
    pub fn describe(&self) -> String {
        let name = self.preset.name;
        let mut line = match self.source {
            Source::WardYml => format!("agent: preset `{name}` (from ward.yml)"),
            Source::Environment => format!("agent: preset `{name}` (from {PRESET_VAR}; ward.yml names none)"),
        };
        if let Some(other) = &self.overruled {
            line.push_str(&format!("; {PRESET_VAR}=`{other}` is set, and ward.yml wins"));
        }
        if self.own_command {
            line.push_str("; ward.yml's `command` replaces the preset's");
        }
        line
    }
}

/// Applies the preset ward.yml names, else the one `from_env` names: its
/// command unless ward.yml has one, its variables before ward.yml's, its
/// usage parser unless `departments.budget.usage` says otherwise. Returns
/// the problems, as (path, message).
pub(super) fn resolve(config: &mut Config, from_env: Option<&str>) -> Vec<(String, String)> {
    let from_env = from_env.map(str::trim).filter(|v| !v.is_empty());
    let (name, source, path) = match (&config.agent.preset, from_env) {
        (Some(name), _) => (name.clone(), Source::WardYml, "agent.preset"),
        (None, Some(name)) => (name.to_string(), Source::Environment, "agent"),
        (None, None) => return Vec::new(),
    };
    let Some(preset) = preset(&name) else {
        let named = if source == Source::Environment { format!("{PRESET_VAR}=`{name}`") } else { format!("`{name}`") };
        return vec![(path.into(), format!("{named} is not a known agent preset; known: {}", known()))];
    };
    let agent = &mut config.agent;
    let own_command = !agent.command.is_empty();
    if !own_command {
        agent.command = preset.command.iter().map(|a| a.to_string()).collect();
    }
    let mut pass_env: Vec<String> = preset.pass_env.iter().map(|v| v.to_string()).collect();
    pass_env.extend(agent.pass_env.drain(..).filter(|v| !preset.pass_env.contains(&v.as_str())));
    agent.pass_env = pass_env;
    let overruled = from_env.filter(|e| source == Source::WardYml && *e != name).map(str::to_string);
    agent.applied = Some(Applied { preset, source, own_command, overruled });

    let budget = &mut config.departments.budget;
    match budget.usage {
        None => budget.usage = Some(preset.usage),
        // Its own parser, or one ward.yml chose (a regex, none) that reads anything.
        Some(u) if u == preset.usage || matches!(u, UsageFormat::Regex | UsageFormat::None) => {}
        // Another agent's parser reads nothing of what this preset's command prints.
        Some(u) if !own_command => {
            return vec![(
                "departments.budget.usage".into(),
                format!(
                    "`{}` reads another agent's output, and preset `{name}` prints `{}`: leave `usage` out, \
                     or set `agent.command` to a command whose output it reads",
                    u.as_str(),
                    preset.usage.as_str()
                ),
            )];
        }
        Some(_) => {}
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_reads_the_prompt_from_its_file_and_never_from_a_shell_string() {
        for p in PRESETS {
            assert!(p.command.contains(&"{prompt_file}"), "{}", p.name);
            assert!(!p.command.iter().any(|a| a.contains("{prompt}")), "{}", p.name);
            if p.command[0] == "sh" {
                assert_eq!(p.command[1], "-c", "{}", p.name);
                assert!(p.command[2].contains(r#"< "$1""#), "{}: the file is the shell's argument", p.name);
                assert!(p.command[2].starts_with(&format!("exec {} ", p.program)), "{}", p.name);
                assert_eq!(p.command.len(), 5, "{}", p.name);
            } else {
                assert_eq!(p.command[0], p.program, "{}", p.name);
            }
            assert!(p.pass_env.contains(&p.secret), "{}: its secret is passed", p.name);
            assert!(p.pass_env.iter().all(|v| !crate::secrets::is_credential(v)), "{}", p.name);
            assert!(p.install.contains(|c: char| c.is_ascii_digit()), "{}: the install is pinned", p.name);
        }
    }
}
