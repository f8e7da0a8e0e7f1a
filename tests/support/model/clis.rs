//! Where the real agent CLIs are installed, for the tests that run them.
//!
//! All three come from PyPI into one folder, `$WARD_AGENTS_DIR` (default
//! `/tmp/clis`):
//!
//! ```text
//! pip install --target "$WARD_AGENTS_DIR/x" claude-agent-sdk==0.2.185 openai-codex-cli-bin==0.163.0
//! python3 -m venv "$WARD_AGENTS_DIR/aider" && "$WARD_AGENTS_DIR/aider/bin/pip" install aider-chat==0.86.2
//! ```
//!
//! A test whose CLI is missing is skipped with a notice, unless
//! `WARD_REQUIRE_REAL_AGENTS=1`, where it fails.

use std::path::PathBuf;

/// The CLIs the tests prove, with their versions and where each lies
/// under `$WARD_AGENTS_DIR`.
pub const CLIS: &[(&str, &str, &str)] = &[
    ("claude", "2.1.328", "x/claude_agent_sdk/_bundled/claude"),
    ("codex", "0.163.0", "x/codex_cli_bin/bin/codex"),
    ("aider", "0.86.2", "aider/bin/aider"),
];

/// The installed CLI `name` (`claude`, `codex`, `aider`), or `None` with
/// a notice on stderr when it is missing; panics when it is missing and
/// `WARD_REQUIRE_REAL_AGENTS=1`.
pub fn real_cli(name: &str) -> Option<PathBuf> {
    let (_, version, place) =
        CLIS.iter().find(|(n, ..)| *n == name).unwrap_or_else(|| panic!("no CLI named `{name}` in CLIS"));
    let root = std::env::var_os("WARD_AGENTS_DIR").map_or_else(|| PathBuf::from("/tmp/clis"), PathBuf::from);
    let path = root.join(place);
    if path.is_file() {
        return Some(path);
    }
    let notice = format!("{name} {version} is not installed at {} (set WARD_AGENTS_DIR)", path.display());
    if std::env::var("WARD_REQUIRE_REAL_AGENTS").as_deref() == Ok("1") {
        panic!("{notice}, and WARD_REQUIRE_REAL_AGENTS=1 requires it");
    }
    eprintln!("skipped: {notice}");
    None
}
