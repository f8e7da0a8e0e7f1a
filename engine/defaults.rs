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
    Ok(files.into_iter().map(|(p, _)| p).collect())
}
