//! `paths:`: where ward's own files live in the repository. The defaults
//! are the top-level `roles/`, `skills/` and `precedents/` of every
//! installation before this section existed; `ward init --into DIR` writes
//! all three under DIR (a repository whose `roles/` is its own, Ansible's).

use schemars::JsonSchema;
use serde::Deserialize;

/// The folders ward's pipeline reads besides `.github/ward.yml`, relative to
/// the repository's top. Each is protected as `roles/` is by default (a
/// treatment changes it only through an approved plan and a person), and
/// hashed into the pipeline version.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathsConfig {
    /// The role templates' folder (`roles.<name>.prompt` names a file in it,
    /// from the repository's top). Default `roles/`.
    #[serde(default = "default_roles")]
    pub roles: String,
    /// The skills' folder: a role's `{% include "skills/x.md" %}` reads
    /// `x.md` from here, so the shipped roles work unchanged. Default `skills/`.
    #[serde(default = "default_skills")]
    pub skills: String,
    /// The precedent log's folder; `precedents.log` defaults to `log.yaml`
    /// in it. Default `precedents/`.
    #[serde(default = "default_precedents")]
    pub precedents: String,
}

fn default_roles() -> String {
    "roles/".into()
}
fn default_skills() -> String {
    "skills/".into()
}
fn default_precedents() -> String {
    "precedents/".into()
}

impl Default for PathsConfig {
    fn default() -> Self {
        Self { roles: default_roles(), skills: default_skills(), precedents: default_precedents() }
    }
}

/// Folders that hold ward's state, never its rules: the engine writes there.
const STATE_FOLDERS: &[&str] = &[".git", ".ward", "charts"];

impl PathsConfig {
    /// The three folders as (key, folder without a trailing `/`), in order.
    pub fn folders(&self) -> [(&'static str, String); 3] {
        [("roles", folder(&self.roles)), ("skills", folder(&self.skills)), ("precedents", folder(&self.precedents))]
    }

    /// The roles' folder, `roles` by default (no trailing `/`).
    pub fn roles_dir(&self) -> String {
        folder(&self.roles)
    }

    /// The skills' folder, `skills` by default (no trailing `/`).
    pub fn skills_dir(&self) -> String {
        folder(&self.skills)
    }

    /// The precedent log's folder, `precedents` by default (no trailing `/`).
    pub fn precedents_dir(&self) -> String {
        folder(&self.precedents)
    }

    /// The protected prefixes these folders make: `roles/`, `skills/`, `precedents/`.
    pub fn protected(&self) -> Vec<String> {
        self.folders().into_iter().map(|(_, f)| format!("{f}/")).collect()
    }

    /// The `paths` of `<root>/.github/ward.yml`, read leniently for what
    /// runs without the whole configuration (the pipeline version, the
    /// stand-in agent): the defaults when the file or the section is
    /// missing or does not parse ([`super::Config::load`] reports that).
    pub fn read(root: &std::path::Path) -> Self {
        let text = std::fs::read_to_string(root.join(super::CONFIG_PATH)).unwrap_or_default();
        let value: Option<serde_yaml::Value> = serde_yaml::from_str(&text).ok();
        value
            .as_ref()
            .and_then(|v| v.get("paths"))
            .and_then(|p| serde_yaml::from_value(p.clone()).ok())
            .unwrap_or_default()
    }

    /// What is wrong with `raw` as a folder for ward's files, if anything
    /// (`ward init --into` takes the same folders as `paths`).
    pub fn folder_problem(raw: &str) -> Option<String> {
        problem(raw)
    }

    /// Roles, skills and precedents under one folder: what `ward init --into DIR` writes.
    pub fn under(dir: &str) -> Self {
        let dir = folder(dir);
        Self {
            roles: format!("{dir}/roles/"),
            skills: format!("{dir}/skills/"),
            precedents: format!("{dir}/precedents/"),
        }
    }

    /// A role's template outside the roles' folder, as (`roles.<name>.prompt`,
    /// what to do): it would be neither protected as a folder nor counted in
    /// the pipeline version with the other roles.
    pub fn role_outside(&self, name: &str, prompt: &std::path::Path) -> Option<(String, String)> {
        let dir = self.roles_dir();
        let prompt = prompt.to_string_lossy().replace('\\', "/");
        let inside = prompt.strip_prefix("./").unwrap_or(&prompt).strip_prefix(&format!("{dir}/"));
        if inside.is_some_and(|rest| !rest.is_empty()) || problem(&self.roles).is_some() {
            return None;
        }
        Some((
            format!("roles.{name}.prompt"),
            format!(
                "`{prompt}` is outside `paths.roles` (`{dir}/`), where ward protects and versions the roles; move \
                 the template into `{dir}/`, or point `paths.roles` at its folder"
            ),
        ))
    }

    /// Every problem as (`paths.<key>`, what is wrong and what to do).
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        for (key, raw) in [("roles", &self.roles), ("skills", &self.skills), ("precedents", &self.precedents)] {
            if let Some(message) = problem(raw) {
                p.push((format!("paths.{key}"), message));
            }
        }
        p
    }
}

/// `raw` as a folder path: trimmed, `./` and trailing `/` taken off.
fn folder(raw: &str) -> String {
    let trimmed = raw.trim();
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    trimmed.trim_end_matches('/').to_string()
}

/// What is wrong with one folder of `paths:`, if anything.
fn problem(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    let f = folder(raw);
    if f.is_empty() || f == "." {
        return Some(format!(
            "`{raw}` is the repository's top; name a folder inside it, e.g. `.github/ward/roles/` (ward protects \
             the whole folder from agents)"
        ));
    }
    if let Some(relative) = trimmed.strip_prefix('/') {
        return Some(format!(
            "`{raw}` is absolute; write it relative to the repository's top, e.g. `{}`",
            relative.trim_start_matches('/')
        ));
    }
    if trimmed.contains('\\') || trimmed.contains(['*', '?', '[']) {
        return Some(format!(
            "`{raw}` is not a plain folder path; write it with `/` and no pattern, e.g. `.github/ward/roles/`"
        ));
    }
    if f.split('/').any(|c| c == "..") {
        return Some(format!("`{raw}` leaves the repository (`..`); name a folder inside it"));
    }
    if f.split('/').any(|c| c.is_empty() || c == ".") {
        return Some(format!("`{raw}` has an empty or `.` part; write it as `a/b/`"));
    }
    let first = f.split('/').next().unwrap_or_default();
    if STATE_FOLDERS.iter().any(|s| s.eq_ignore_ascii_case(first)) {
        return Some(format!(
            "`{raw}` is under `{first}/`, where ward or git keeps its state and writes as it runs; put the \
             pipeline's files elsewhere, e.g. `.github/ward/`"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CONFIG_PATH, Config};
    use std::path::Path;

    fn with(paths: &str) -> Vec<String> {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(CONFIG_PATH)).unwrap();
        let text = format!("{text}\npaths:\n{paths}");
        match Config::parse(&text, Path::new(CONFIG_PATH), None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn the_defaults_are_the_top_level_folders() {
        let p = PathsConfig::default();
        assert_eq!(p.protected(), vec!["roles/", "skills/", "precedents/"]);
        assert_eq!(
            (p.roles_dir(), p.skills_dir(), p.precedents_dir()),
            ("roles".into(), "skills".into(), "precedents".into())
        );
        assert!(p.validate().is_empty());
        let into = PathsConfig {
            roles: "./.github/ward/roles".into(),
            skills: ".github/ward/skills/".into(),
            precedents: "ward/precedents//".into(),
        };
        assert!(into.validate().is_empty(), "{:?}", into.validate());
        assert_eq!(into.protected(), vec![".github/ward/roles/", ".github/ward/skills/", "ward/precedents/"]);
    }

    #[test]
    fn the_precedent_log_is_in_its_folder_unless_ward_yml_places_it() {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(CONFIG_PATH)).unwrap();
        let unplaced = text.replace("  log: precedents/log.yaml\n", "");
        assert_ne!(unplaced, text, "the shipped ward.yml places its log");
        let parse = |t: &str| Config::parse(t, Path::new(CONFIG_PATH), None).unwrap();
        assert_eq!(parse(&unplaced).precedents.log, Path::new("precedents/log.yaml"));
        let moved = format!("{unplaced}\npaths:\n  precedents: ward/decisions/\n");
        assert_eq!(parse(&moved).precedents.log, Path::new("ward/decisions/log.yaml"));
        let placed = format!("{text}\npaths:\n  precedents: ward/decisions/\n");
        assert_eq!(parse(&placed).precedents.log, Path::new("precedents/log.yaml"), "ward.yml's own `log` wins");
    }

    #[test]
    fn a_bad_folder_is_an_error_with_its_line_and_what_to_do() {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(CONFIG_PATH)).unwrap();
        let line = text.lines().count() + 4;
        for (value, says) in [
            ("/etc/ward/roles/", "is absolute; write it relative to the repository's top, e.g. `etc/ward/roles/`"),
            ("../elsewhere/roles", "leaves the repository (`..`)"),
            ("ward/../../roles", "leaves the repository (`..`)"),
            (".ward/roles/", "is under `.ward/`, where ward or git keeps its state"),
            ("charts/roles", "is under `charts/`"),
            (".git/hooks", "is under `.git/`"),
            ("./", "is the repository's top"),
            ("roles/*", "is not a plain folder path"),
            ("a//b", "has an empty or `.` part"),
        ] {
            let errors = with(&format!("  skills: .github/ward/skills/\n  roles: \"{value}\"\n"));
            assert_eq!(errors.len(), 1, "{value}: {errors:?}");
            let want = format!(".github/ward.yml:{line}:3: paths.roles: `{value}` ");
            assert!(errors[0].starts_with(&want), "{value}: {} does not start with {want}", errors[0]);
            assert!(errors[0].contains(says), "{value}: {}", errors[0]);
        }
        let outside = with("  roles: .github/ward/roles/\n");
        assert_eq!(outside.len(), 4, "every role's template is still in roles/: {outside:?}");
        assert!(
            outside[0].contains(
                "roles.planner.prompt: `roles/planner.md` is outside `paths.roles` (`.github/ward/roles/`), where ward \
                 protects and versions the roles; move the template into `.github/ward/roles/`"
            ),
            "{outside:?}"
        );
        let unknown = with("  templates: x/\n");
        assert!(unknown[0].contains("unknown field `templates`"), "{unknown:?}");
    }
}
