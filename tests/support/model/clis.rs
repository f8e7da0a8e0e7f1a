//! Where the real agent CLIs are installed, for the tests that run them.
//!
//! `.ci/agents` installs all three from PyPI, pinned there (Claude Code from
//! the claude-agent-sdk wheel, codex from openai-codex-cli-bin, aider in a
//! venv), and links them in one `bin/` folder; `.ci/run` runs it and sets
//! `WARD_REQUIRE_REAL_AGENTS=1`. `WARD_AGENTS_BIN` names the folder;
//! without it, `.ci/agents --where` says where it installed them.
//!
//! A test whose CLI is missing is skipped with a notice, unless
//! `WARD_REQUIRE_REAL_AGENTS=1`, where it fails.

use std::path::PathBuf;

/// The programs, and the preset each one's proven version is kept in.
pub const CLIS: &[(&str, &str)] = &[("claude", "claude-code"), ("codex", "codex"), ("aider", "aider")];

/// The folder the three programs are linked in, when they are installed.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WARD_AGENTS_BIN") {
        return Some(PathBuf::from(dir));
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/agents");
    let out = std::process::Command::new("bash").arg(script).arg("--where").output().ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir))
}

/// The version of `name` the tests prove: its preset's.
pub fn proven(name: &str) -> &'static str {
    let preset = CLIS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p);
    let preset = preset.and_then(ward::config::agents::preset).unwrap_or_else(|| panic!("no preset for `{name}`"));
    preset.proven.unwrap_or_else(|| panic!("preset `{}` proves no version", preset.name))
}

/// The installed CLI `name` (`claude`, `codex`, `aider`), or `None` with
/// a notice on stderr when it is missing; panics when it is missing and
/// `WARD_REQUIRE_REAL_AGENTS=1`.
pub fn real_cli(name: &str) -> Option<PathBuf> {
    let version = proven(name);
    if let Some(path) = bin_dir().map(|d| d.join(name)).filter(|p| p.is_file()) {
        return Some(path);
    }
    let notice = format!("{name} {version} is not installed (run .ci/agents, or set WARD_AGENTS_BIN)");
    if std::env::var("WARD_REQUIRE_REAL_AGENTS").as_deref() == Ok("1") {
        panic!("{notice}, and WARD_REQUIRE_REAL_AGENTS=1 requires it");
    }
    eprintln!("skipped: {notice}");
    None
}
