//! Agent presets: each resolves to a command `ward config check` accepts,
//! its usage parser reads a real sample of the agent's output
//! (`tests/fixtures/agents/`, sources in its README), and a wrong preset or
//! one that conflicts with another setting is refused with its place.

mod support;

use std::path::Path;

use support::{Sandbox, stderr, stdout};
use ward::budget::parse_usage;
use ward::config::agents::{PRESET_VAR, PRESETS, preset};
use ward::config::{BudgetConfig, CONFIG_PATH, Config, UsageFormat};

const STAND_IN: &str = "  command: [\"{ward}\", \"stand-in\"]\n";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents").join(name)).unwrap()
}

fn budget(usage: UsageFormat) -> BudgetConfig {
    BudgetConfig { usage: Some(usage), ..BudgetConfig::default() }
}

#[test]
fn every_preset_resolves_to_a_command_config_check_accepts() {
    let s = Sandbox::new();
    for p in PRESETS {
        let text = s.read(CONFIG_PATH);
        let start = text.find("agent:\n").unwrap();
        let end = start + text[start..].find("\n\n").unwrap();
        let edited = format!("{}agent:\n  preset: {}\n{}", &text[..start], p.name, &text[end..]);
        s.write(CONFIG_PATH, &edited);
        let out = s.ward(&["config", "check"]);
        assert!(out.status.success(), "{}: {}", p.name, stderr(&out));
        assert!(stdout(&out).contains(&format!("agent: preset `{}` (from ward.yml)", p.name)), "{}", stdout(&out));
        let config = Config::load(s.root()).unwrap();
        let command: Vec<&str> = config.agent.command.iter().map(String::as_str).collect();
        assert_eq!(command, p.command, "{}", p.name);
        assert_eq!(config.agent.pass_env[..p.pass_env.len()], *p.pass_env, "{}", p.name);
        assert_eq!(config.departments.budget.usage(), p.usage, "{}", p.name);
        s.write(CONFIG_PATH, &text);
    }
}

#[test]
fn each_parser_reads_what_its_agent_prints() {
    let claude = parse_usage(&fixture("claude-code-result.json"), &budget(preset("claude-code").unwrap().usage));
    let claude = claude.expect("Claude Code's result is read");
    assert_eq!((claude.cost_usd, claude.input_tokens, claude.output_tokens), (Some(0.01), 10, 5));

    let codex = parse_usage(&fixture("codex-exec.jsonl"), &budget(preset("codex").unwrap().usage)).expect("codex");
    assert_eq!(codex.cost_usd, None, "codex reports no dollars");
    assert_eq!((codex.input_tokens, codex.cache_read_input_tokens, codex.output_tokens), (24763 - 24448, 24448, 122));
    let priced = BudgetConfig {
        prices: Some(ward::config::Prices { input: 1.25, output: 10.0, cache_write: None, cache_read: Some(0.125) }),
        ..budget(UsageFormat::CodexJson)
    };
    let estimate = parse_usage(&fixture("codex-exec.jsonl"), &priced).unwrap().cost_usd.unwrap();
    assert!((estimate - (315.0 * 1.25 + 24448.0 * 0.125 + 122.0 * 10.0) / 1e6).abs() < 1e-12, "{estimate}");

    let gemini = parse_usage(&fixture("gemini-output.json"), &budget(preset("gemini").unwrap().usage)).expect("gemini");
    assert_eq!(gemini.cost_usd, None);
    assert_eq!(gemini.input_tokens, 13745 + 20803);
    assert_eq!(gemini.cache_read_input_tokens, 10656);
    assert_eq!(gemini.output_tokens, 215 + 103 + 716 + 138);

    let opencode = parse_usage(&fixture("opencode-run.jsonl"), &budget(preset("opencode").unwrap().usage));
    let opencode = opencode.expect("opencode");
    assert!((opencode.cost_usd.unwrap() - (0.030399 + 0.00258306)).abs() < 1e-12);
    assert_eq!((opencode.input_tokens, opencode.output_tokens), (3 + 1662, 7 + 8 + 15));
    assert_eq!((opencode.cache_creation_input_tokens, opencode.cache_read_input_tokens), (8076, 5380));

    // Aider prints a sentence for people, and its preset reads it: the
    // session's dollars, the tokens of every message as aider rounds them.
    let aider = preset("aider").unwrap();
    assert_eq!(aider.usage, UsageFormat::AiderText);
    let read = parse_usage(&fixture("aider-output.txt"), &budget(aider.usage)).expect("aider");
    assert_eq!((read.cost_usd, read.input_tokens, read.output_tokens), (Some(0.02), 2300 + 4100, 345 + 120));

    // Output of another shape is not misread.
    assert_eq!(parse_usage(&fixture("codex-exec.jsonl"), &budget(UsageFormat::OpencodeJson)), None);
    assert_eq!(parse_usage("plain text", &budget(UsageFormat::GeminiJson)), None);
}

#[test]
fn an_unknown_preset_is_refused_at_its_line_with_the_known_ones() {
    let s = Sandbox::new();
    s.edit_config(STAND_IN, "  preset: copilot\n");
    let out = s.ward(&["config", "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let line = s.read(CONFIG_PATH).lines().position(|l| l.contains("preset: copilot")).unwrap() + 1;
    assert!(err.contains(&format!(".github/ward.yml:{line}:")), "{err}");
    assert!(err.contains("`copilot` is not a known agent preset"), "{err}");
    for p in PRESETS {
        assert!(err.contains(&format!("`{}`", p.name)), "{err}");
    }
}

#[test]
fn a_preset_with_another_agents_usage_parser_is_refused() {
    let s = Sandbox::new();
    s.edit_config(STAND_IN, "  preset: codex\n");
    s.edit_config("  budget:\n", "  budget:\n    usage: claude-json\n");
    let out = s.ward(&["config", "check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("departments.budget.usage: `claude-json` reads another agent's output"), "{err}");
    assert!(err.contains("preset `codex` prints `codex-json`"), "{err}");
    // With a command of its own, the parser is ward.yml's to choose.
    s.edit_config("  preset: codex\n", "  preset: codex\n  command: [\"{ward}\", \"stand-in\"]\n");
    let out = s.ward(&["config", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("ward.yml's `command` replaces the preset's"), "{}", stdout(&out));
}

#[test]
fn the_environment_names_the_preset_when_ward_yml_names_none() {
    let s = Sandbox::new();
    // ward.yml's own command stays; the preset adds its variables and parser.
    let out = s.ward_env(&["config", "check"], &[(PRESET_VAR, "gemini")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("agent: preset `gemini` (from WARD_AGENT_PRESET; ward.yml names none)"), "{said}");
    assert!(said.contains("ward.yml's `command` replaces the preset's"), "{said}");

    // No command in ward.yml: the preset's.
    s.edit_config(STAND_IN, "");
    let out = s.ward(&["config", "check"]);
    assert_eq!(out.status.code(), Some(2), "no agent at all is refused");
    assert!(stderr(&out).contains("names no agent: add `preset:`"), "{}", stderr(&out));
    let text = s.read(CONFIG_PATH);
    let config = Config::parse_with_preset(&text, Path::new(CONFIG_PATH), None, Some("aider")).unwrap();
    assert_eq!(config.agent.command[0], "aider");

    // Both name one: ward.yml wins, and says so.
    s.edit_config("agent:\n", "agent:\n  preset: opencode\n");
    let out = s.ward_env(&["config", "check"], &[(PRESET_VAR, "codex")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("agent: preset `opencode` (from ward.yml); WARD_AGENT_PRESET=`codex` is set"), "{said}");

    // An unknown name in the environment is an error that names it.
    s.edit_config("  preset: opencode\n", "");
    let out = s.ward_env(&["config", "check"], &[(PRESET_VAR, "gpt-engineer")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("WARD_AGENT_PRESET=`gpt-engineer` is not a known agent preset"), "{}", stderr(&out));
}
