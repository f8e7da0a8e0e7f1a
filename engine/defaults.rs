//! The embedded default installation: the pipeline (and its JSON Schema),
//! roles, skills and an example precedent log, as shipped in this repository. `ward demo` and
//! `ward init` write them into a repository.

use std::path::Path;

use include_dir::{Dir, include_dir};

static ROLES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/roles");
static SKILLS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/skills");
const PIPELINE: &str = include_str!("../.github/ward.yml");
/// The schema `.github/ward.yml`'s first line points editors at
/// (`tests/schema.rs` keeps it equal to `ward config schema`).
const SCHEMA: &str = include_str!("../.github/ward.schema.json");
const PRECEDENTS: &str = include_str!("../precedents/log.yaml");
const CHART_README: &str = include_str!("../charts/README.md");

/// Every default file as (path relative to the repository root, contents).
pub fn files() -> Vec<(String, &'static str)> {
    let mut out = vec![
        (".github/ward.yml".to_string(), PIPELINE),
        (crate::config::schema::SCHEMA_PATH.to_string(), SCHEMA),
        ("precedents/log.yaml".to_string(), PRECEDENTS),
        ("charts/README.md".to_string(), CHART_README),
    ];
    for (dir, prefix) in [(&ROLES, "roles"), (&SKILLS, "skills")] {
        for file in dir.files() {
            if let Some(text) = file.contents_utf8() {
                out.push((format!("{prefix}/{}", file.path().display()), text));
            }
        }
    }
    out.sort();
    out
}

/// Writes the defaults under `root`, refusing to overwrite a file that
/// already exists (nothing is lost).
pub fn install(root: &Path) -> anyhow::Result<Vec<String>> {
    let files = files();
    if let Some((path, _)) = files.iter().find(|(p, _)| root.join(p).exists()) {
        anyhow::bail!("{} already exists; ward will not overwrite an installation", root.join(path).display());
    }
    for (path, text) in &files {
        let dest = root.join(path);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&dest, text).map_err(|e| anyhow::anyhow!("could not write {}: {e}", dest.display()))?;
    }
    let mut written: Vec<String> = files.into_iter().map(|(p, _)| p).collect();
    if ignore_ward_state(root)? {
        written.push(".gitignore".into());
    }
    Ok(written)
}

/// Adds `/.ward/` (ward's worktree records, run artifacts, local forge) to
/// the repository's `.gitignore` unless it is ignored already. `true` when
/// the file changed.
pub fn ignore_ward_state(root: &Path) -> anyhow::Result<bool> {
    let file = root.join(".gitignore");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => anyhow::bail!("could not read {}: {e}", file.display()),
    };
    if text.lines().map(str::trim).any(|l| matches!(l, ".ward" | ".ward/" | "/.ward" | "/.ward/")) {
        return Ok(false);
    }
    let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
    std::fs::write(&file, format!("{text}{sep}/.ward/\n"))
        .map_err(|e| anyhow::anyhow!("could not add `/.ward/` to {}: {e}", file.display()))?;
    Ok(true)
}
