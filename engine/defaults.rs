//! The embedded default installation: the pipeline (and its JSON Schema),
//! roles, skills and an empty precedent log (a commented example), as
//! shipped in this repository. `ward demo` and `ward init` write them into a
//! repository; the demo adds this repository's sample precedents.

use std::path::Path;

use include_dir::{Dir, include_dir};

static ROLES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/roles");
static SKILLS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/skills");
const PIPELINE: &str = include_str!("../.github/ward.yml");
/// The schema `.github/ward.yml`'s first line points editors at
/// (`tests/schema.rs` keeps it equal to `ward config schema`).
const SCHEMA: &str = include_str!("../.github/ward.schema.json");
/// The sample decisions `ward demo` shows (this repository's own log):
/// for the demo only, never installed by `ward init`, where they would read
/// as decisions the repository's chiefs made.
pub const SAMPLE_PRECEDENTS: &str = include_str!("../precedents/log.yaml");
/// What `ward init` starts with: no decision yet, and how to write one.
const EMPTY_PRECEDENTS: &str = "\
# The precedent log: decisions of the chiefs that generalise beyond one issue.
#
# APPEND-ONLY, HUMAN-ONLY. Add an entry at the end, by pull request, with the
# next id. Never edit, reorder or delete an entry: to change a decision, append
# a new one that says which id it supersedes. The engine reads this file and
# never writes it; `ward precedents check --base <rev>` fails CI when an earlier
# entry changed, an id is out of sequence, a field is missing, a date is in the
# future, or the chief is the engine's own account.
#
# No decision yet. An entry looks like this (remove the `# ` to make it one):
#
# - id: P-0001
#   date: 2026-02-03
#   chief: your-github-login
#   tags: [tests, flaky, ci]
#   question: >-
#     A test fails intermittently and blocks an unrelated change. May the fix
#     skip or quarantine it?
#   decision: >-
#     Quarantine it with a linked issue; never delete it in the same change.
#   rationale: >-
#     A skipped test is forgotten; a quarantined one has an owner.
";
const CHART_README: &str = include_str!("../charts/README.md");

/// Every default file as (path relative to the repository root, contents).
pub fn files() -> Vec<(String, &'static str)> {
    let mut out = vec![
        (".github/ward.yml".to_string(), PIPELINE),
        (crate::config::schema::SCHEMA_PATH.to_string(), SCHEMA),
        ("precedents/log.yaml".to_string(), EMPTY_PRECEDENTS),
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

/// Writes the defaults under `root` in the top-level layout; see [`install_into`].
pub fn install(root: &Path) -> anyhow::Result<Vec<String>> {
    install_into(root, None, None)
}

/// The commented example of `paths:` in the shipped ward.yml, which
/// `ward init --into DIR` replaces with DIR's section.
const PATHS_EXAMPLE: &str = "\
# paths:
#   roles: .github/ward/roles/
#   skills: .github/ward/skills/
#   precedents: .github/ward/precedents/
";

/// Writes the defaults under `root`, refusing to overwrite a file that
/// already exists (nothing is lost, and a second run with the same `into`
/// changes nothing) or to write into a folder of the repository's own (an
/// Ansible `roles/`). With `into` (a folder relative to `root`, as
/// `ward init --into` takes it), roles, skills and the precedent log go
/// under it and ward.yml's `paths` (and its role templates and log) say so;
/// ward.yml, its schema and the local forge's `charts/` stay where they
/// are. `base_branch` in ward.yml is the repository's default branch
/// ([`default_branch`]).
pub fn install_into(root: &Path, into: Option<&str>, agent: Option<&str>) -> anyhow::Result<Vec<String>> {
    if let Some(name) = agent
        && crate::config::agents::preset(name).is_none()
    {
        anyhow::bail!("--agent: `{name}` is not a known agent preset; known: {}", crate::config::agents::known());
    }
    let into = match into {
        None => None,
        Some(raw) => match crate::config::PathsConfig::folder_problem(raw) {
            Some(problem) => anyhow::bail!("--into: {problem}"),
            None => Some(crate::config::PathsConfig::under(raw)),
        },
    };
    let files = files_under(into.as_ref());
    if let Some((path, _)) = files.iter().find(|(p, _)| root.join(p).exists()) {
        anyhow::bail!("{} already exists; ward will not overwrite an installation", root.join(path).display());
    }
    let folders: Vec<String> = match &into {
        None => FOLDERS.iter().map(|f| f.to_string()).collect(),
        Some(paths) => paths.folders().into_iter().map(|(_, f)| f).chain(["charts".to_string()]).collect(),
    };
    refuse_foreign_folders(root, &files, &folders, into.is_some())?;
    let branch = default_branch(root).map_or("main".to_string(), |(b, _)| b);
    let mut pipeline = PIPELINE.replacen("      base_branch: main\n", &format!("      base_branch: {branch}\n"), 1);
    if let Some(paths) = &into {
        pipeline = place(&pipeline, paths)?;
    }
    if let Some(name) = agent {
        pipeline = with_preset(&pipeline, name)?;
    }
    for (path, text) in &files {
        let text = if path == crate::config::CONFIG_PATH { pipeline.as_str() } else { text };
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

/// The shipped pipeline with the agent preset `name` instead of the stand-in.
fn with_preset(pipeline: &str, name: &str) -> anyhow::Result<String> {
    const STAND_IN: &str = "  command: [\"{ward}\", \"stand-in\"]\n";
    anyhow::ensure!(pipeline.contains(STAND_IN), "the shipped ward.yml names no stand-in command to replace");
    Ok(pipeline.replacen(STAND_IN, &format!("  preset: {name}\n"), 1))
}

/// Every default file, with roles, skills and the precedent log where `paths` puts them.
fn files_under(paths: Option<&crate::config::PathsConfig>) -> Vec<(String, &'static str)> {
    let Some(paths) = paths else { return files() };
    let mut out: Vec<(String, &'static str)> = files()
        .into_iter()
        .map(|(path, text)| {
            let moved = paths
                .folders()
                .into_iter()
                .find_map(|(key, folder)| path.strip_prefix(&format!("{key}/")).map(|rest| format!("{folder}/{rest}")));
            (moved.unwrap_or(path), text)
        })
        .collect();
    out.sort();
    out
}

/// The shipped ward.yml with `paths:` written, and the role templates and
/// the precedent log named where `paths` puts them.
fn place(pipeline: &str, paths: &crate::config::PathsConfig) -> anyhow::Result<String> {
    let (roles, precedents) = (paths.roles_dir(), paths.precedents_dir());
    let section =
        format!("paths:\n  roles: {roles}/\n  skills: {}/\n  precedents: {precedents}/\n", paths.skills_dir());
    anyhow::ensure!(pipeline.contains(PATHS_EXAMPLE), "the shipped ward.yml has no `paths:` example to replace");
    let text = pipeline
        .replacen(PATHS_EXAMPLE, &section, 1)
        .replace("    prompt: roles/", &format!("    prompt: {roles}/"))
        .replace("  log: precedents/log.yaml\n", &format!("  log: {precedents}/log.yaml\n"));
    Ok(text)
}

/// The folders ward installs into at the top of the repository.
const FOLDERS: &[&str] = &["roles", "skills", "precedents", "charts"];

/// Refuses a folder ward would write into that exists and holds anything
/// that is not one of ward's own files: it is the repository's.
fn refuse_foreign_folders(root: &Path, files: &[(String, &str)], folders: &[String], into: bool) -> anyhow::Result<()> {
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else { continue };
        let ours = |name: &str| files.iter().any(|(p, _)| p.strip_prefix(&format!("{folder}/")) == Some(name));
        let mut foreign: Vec<String> =
            entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| !ours(n)).collect();
        foreign.sort();
        if let Some(first) = foreign.first() {
            let elsewhere = if folder == "charts" {
                " (the local forge keeps its charts in charts/ at the top, wherever the rest goes)"
            } else if into {
                ", or give `--into` a folder of ward's own"
            } else {
                ", or give ward a place of its own with `ward init --into .github/ward/`"
            };
            anyhow::bail!(
                "{} already exists and is not ward's (it holds `{first}`{}); ward will not mix its files into yours. \
                 Rename or move your folder{elsewhere}",
                root.join(folder).display(),
                if foreign.len() > 1 { format!(" and {} more", foreign.len() - 1) } else { String::new() }
            );
        }
    }
    Ok(())
}

/// The repository's default branch and where it was read: `origin/HEAD`,
/// else the branch checked out (unborn included), else git's
/// `init.defaultBranch`. `None` when none says (ward.yml keeps `main`).
pub fn default_branch(root: &Path) -> Option<(String, &'static str)> {
    let symbolic = |repo: &git2::Repository, name: &str, prefix: &str| {
        let reference = repo.find_reference(name).ok()?;
        reference.symbolic_target()?.strip_prefix(prefix).map(str::to_string)
    };
    let repo = git2::Repository::discover(root).ok();
    if let Some(repo) = &repo {
        if let Some(b) = symbolic(repo, "refs/remotes/origin/HEAD", "refs/remotes/origin/") {
            return Some((b, "origin/HEAD"));
        }
        if let Some(b) = symbolic(repo, "HEAD", "refs/heads/") {
            return Some((b, "the branch checked out"));
        }
    }
    let config = match &repo {
        Some(repo) => repo.config().ok()?,
        None => git2::Config::open_default().ok()?,
    };
    let branch = config.get_string("init.defaultBranch").ok().filter(|b| !b.trim().is_empty())?;
    Some((branch, "git's init.defaultBranch"))
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
