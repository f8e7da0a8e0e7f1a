//! The repository's own CI, as `ward init` finds it (pure over the files):
//! the workflows under `.github/workflows/` that run on `push` or
//! `pull_request`, ward's own aside. Their `name:` is what ward-stage.yml's
//! `workflow_run` wake-up matches; their file is what `ci.workflows` in
//! ward.yml names, for ward to start them with `workflow_dispatch` on a
//! treatment branch (the workflow token's pushes start no workflow).

use std::path::Path;

use serde_yaml::Value;

/// One CI workflow of the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiWorkflow {
    /// Its file under `.github/workflows/` (`tests.yaml`).
    pub file: String,
    /// Its `name:`, or GitHub's name for a workflow without one: the path.
    pub name: String,
    /// The events of its `on:` that make it CI (`push`, `pull_request`).
    pub on: Vec<String>,
    /// It lists `workflow_dispatch`: ward can start it on a branch.
    pub dispatchable: bool,
}

/// The events that make a workflow the repository's CI.
const CI_EVENTS: &[&str] = &["push", "pull_request"];

/// The CI workflows of the repository at `root`, by file name; ward's own
/// (`ward-*.yml`) and files that are not YAML workflows are left out.
pub fn find(root: &Path) -> Vec<CiWorkflow> {
    let dir = root.join(".github/workflows");
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut out: Vec<CiWorkflow> = entries
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_str()?.to_string();
            let yaml = file.ends_with(".yml") || file.ends_with(".yaml");
            if !yaml || file.starts_with("ward-") {
                return None;
            }
            of(&file, &std::fs::read_to_string(e.path()).ok()?)
        })
        .collect();
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// The workflow in `text` (the file `file`), when it is CI.
pub fn of(file: &str, text: &str) -> Option<CiWorkflow> {
    let workflow: Value = serde_yaml::from_str(text).ok()?;
    let events = events(&workflow);
    let on: Vec<String> = CI_EVENTS.iter().filter(|e| events.iter().any(|x| x == *e)).map(|e| e.to_string()).collect();
    if on.is_empty() {
        return None;
    }
    let name = workflow
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!(".github/workflows/{file}"));
    Some(CiWorkflow { file: file.into(), name, on, dispatchable: events.iter().any(|e| e == "workflow_dispatch") })
}

/// The `name:` of the workflow in `text` as GitHub names it (`workflow_run`
/// matches it): its `name:`, else its path.
pub fn name_of(file: &str, text: &str) -> String {
    let workflow: Option<Value> = serde_yaml::from_str(text).ok();
    workflow
        .as_ref()
        .and_then(|w| w.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!(".github/workflows/{file}"))
}

/// The events of a workflow's `on:` (a string, a list, or a map).
fn events(workflow: &Value) -> Vec<String> {
    // YAML 1.1 reads a bare `on` key as `true`; serde_yaml reads it as "on".
    let on = workflow.get("on").or_else(|| workflow.get(Value::Bool(true)));
    match on {
        Some(Value::String(one)) => vec![one.clone()],
        Some(Value::Sequence(list)) => list.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
        Some(Value::Mapping(map)) => map.keys().filter_map(|k| k.as_str().map(String::from)).collect(),
        _ => Vec::new(),
    }
}

/// How to let ward start `ci` on a branch: the one line to add, and where.
pub fn how_to_dispatch(ci: &CiWorkflow) -> String {
    format!(
        "add `workflow_dispatch:` under the `on:` of `.github/workflows/{}` (a line of its own, beside `{}:`), so \
         that ward can start it on a treatment branch: the workflow token's pushes start no workflow",
        ci.file, ci.on[0]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_is_what_runs_on_push_or_pull_request_and_its_name_is_githubs() {
        let tests = of("tests.yaml", "name: Tests\non:\n  push:\n    branches: [main]\n  pull_request:\njobs: {}\n");
        let tests = tests.expect("CI");
        assert_eq!(
            (tests.name.as_str(), tests.on.clone(), tests.dispatchable),
            ("Tests", vec!["push".into(), "pull_request".into()], false)
        );
        assert!(how_to_dispatch(&tests).contains("`.github/workflows/tests.yaml`"));
        let lint = of("lint.yml", "on: [pull_request, workflow_dispatch]\njobs: {}\n").expect("CI");
        assert_eq!((lint.name.as_str(), lint.dispatchable), (".github/workflows/lint.yml", true));
        assert_eq!(of("publish.yml", "on:\n  release:\n    types: [published]\n"), None, "not CI");
        assert_eq!(of("broken.yml", "on: [push\n"), None, "not YAML");
        assert_eq!(name_of("x.yml", "name: ci\non: push\n"), "ci");
    }
}
