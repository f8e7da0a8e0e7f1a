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
    /// What it needs passed from ward's environment (its API keys).
    pub pass_env: &'static [&'static str],
    /// How its output reports usage.
    pub usage: UsageFormat,
    /// The workflow step's command that installs its CLI on a runner, pinned.
    pub install: &'static str,
    /// The repository secret to set (passed to the job's `env:`).
    pub secret: &'static str,
}

/// Every preset. Versions are the ones these flags were checked against.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "claude-code",
        program: "claude",
        command: &[
            "sh",
            "-c",
            r#"exec claude -p --output-format json --dangerously-skip-permissions < "$1""#,
            "claude-code",
            "{prompt_file}",
        ],
        pass_env: &["ANTHROPIC_API_KEY"],
        usage: UsageFormat::ClaudeJson,
        install: "npm install -g @anthropic-ai/claude-code@2.1.328",
        secret: "ANTHROPIC_API_KEY",
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
        pass_env: &["CODEX_API_KEY", "OPENAI_API_KEY"],
        usage: UsageFormat::CodexJson,
        install: "npm install -g @openai/codex@0.169.0",
        secret: "CODEX_API_KEY",
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
        pass_env: &["GEMINI_API_KEY"],
        usage: UsageFormat::GeminiJson,
        install: "npm install -g @google/gemini-cli@0.61.0",
        secret: "GEMINI_API_KEY",
    },
    Preset {
        name: "aider",
        program: "aider",
        command: &[
            "aider",
            "--message-file",
            "{prompt_file}",
            "--yes-always",
            "--no-auto-commits",
            "--no-gitignore",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
        ],
        pass_env: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"],
        // Aider prints its usage as a sentence for people, not as data.
        usage: UsageFormat::None,
        install: "pipx install aider-chat==0.86.2",
        secret: "ANTHROPIC_API_KEY",
    },
    Preset {
        name: "opencode",
        program: "opencode",
        command: &["sh", "-c", r#"exec opencode run --format json --auto < "$1""#, "opencode", "{prompt_file}"],
        pass_env: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
        usage: UsageFormat::OpencodeJson,
        install: "npm install -g opencode-ai@1.18.33",
        secret: "ANTHROPIC_API_KEY",
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
