//! Workflow files, compared with the ones this ward ships (pure).
//!
//! An installed workflow may differ from the shipped one where the user
//! is meant to choose (how ward is installed: built from a checkout, or
//! the action; the schedule's times; names). What it may not lack is what
//! ward relies on: the events that start it (and their types and inputs),
//! its jobs, each job's permissions, and the ward commands each job runs
//! with their flags. A ward step is a `run:` line that calls a `ward`
//! binary, or a step that `uses:` the ward action (its `command` input
//! read through `action/run.sh`'s table, as the action reads it).

use std::collections::BTreeMap;

use serde_yaml::Value;

pub use crate::install::shipped;

const ACTION_RUN: &str = include_str!("../../action/run.sh");

/// A workflow file that is not YAML, said after its path: "`PATH` is not YAML (...)".
#[derive(Debug, thiserror::Error)]
#[error("is not YAML ({0})")]
pub struct NotYaml(serde_yaml::Error);

fn parse(text: &str) -> Result<Value, NotYaml> {
    serde_yaml::from_str(text).map_err(NotYaml)
}

fn key<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.as_mapping()?.get(k)
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Sequence(items)) => items.iter().filter_map(|i| i.as_str().map(String::from)).collect(),
        _ => Vec::new(),
    }
}

/// `on:` as event -> its settings (a string or list of events has none).
fn triggers(workflow: &Value) -> BTreeMap<String, Value> {
    match key(workflow, "on") {
        Some(Value::Mapping(m)) => m.iter().filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.clone()))).collect(),
        other => str_list(other).into_iter().map(|e| (e, Value::Null)).collect(),
    }
}

/// Whether a workflow can be started by `workflow_dispatch`.
pub fn dispatchable(text: &str) -> Result<bool, NotYaml> {
    Ok(triggers(&parse(text)?).contains_key("workflow_dispatch"))
}

/// What the installed workflow lacks of the shipped one, one sentence each.
pub fn differences(shipped: &str, installed: &str) -> Result<Vec<String>, NotYaml> {
    let (want, have) = (parse(shipped)?, parse(installed)?);
    let mut out = Vec::new();
    let have_on = triggers(&have);
    for (event, settings) in triggers(&want) {
        let Some(theirs) = have_on.get(&event) else {
            out.push(format!("it is not started by `{event}`"));
            continue;
        };
        for t in str_list(key(&settings, "types")) {
            if !str_list(key(theirs, "types")).contains(&t) {
                out.push(format!("`{event}` lacks the type `{t}`"));
            }
        }
        let inputs = |v: &Value| -> Vec<String> {
            key(v, "inputs")
                .and_then(Value::as_mapping)
                .map_or(Vec::new(), |m| m.keys().filter_map(|k| k.as_str().map(String::from)).collect())
        };
        for input in inputs(&settings).into_iter().filter(|i| !inputs(theirs).contains(i)) {
            out.push(format!("`{event}` lacks the input `{input}`"));
        }
    }
    let have_jobs = jobs(&have);
    for (id, job) in jobs(&want) {
        let Some(theirs) = have_jobs.get(&id) else {
            out.push(format!("it has no job `{id}`"));
            continue;
        };
        let installed_calls = ward_calls(theirs);
        for (command, flags) in ward_calls(&job) {
            match installed_calls.iter().find(|(c, _)| *c == command) {
                None => out.push(format!("job `{id}` does not run `ward {command}`")),
                Some((_, theirs)) => {
                    let missing: Vec<String> =
                        flags.iter().filter(|f| !theirs.contains(f)).map(|f| format!("`{f}`")).collect();
                    if !missing.is_empty() {
                        out.push(format!("job `{id}` runs `ward {command}` without {}", missing.join(", ")));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What each shipped job needs that the installed job's `permissions:` do
/// not grant: (job, missing grants like `issues: write`). A job that names
/// none (nor does its workflow) gets the repository's default, which ward
/// does not rely on.
pub fn missing_permissions(shipped: &str, installed: &str) -> Result<Vec<(String, Vec<String>)>, NotYaml> {
    let (want, have) = (parse(shipped)?, parse(installed)?);
    let have_jobs = jobs(&have);
    let mut out = Vec::new();
    for (id, job) in jobs(&want) {
        let Some(theirs) = have_jobs.get(&id) else { continue };
        let granted = permissions(theirs).or_else(|| permissions(&have));
        let missing: Vec<String> = permissions(&job)
            .unwrap_or_default()
            .into_iter()
            .filter(|(scope, level)| {
                granted.as_ref().is_none_or(|g| g.get(scope).is_none_or(|have| rank(have) < rank(level)))
            })
            .map(|(scope, level)| format!("{scope}: {level}"))
            .collect();
        out.push((id, missing));
    }
    Ok(out)
}

/// What the installed copy of a read-only shipped job (one that grants no
/// write: the visit job, where the agent runs) grants beyond reading:
/// (job, grants like `contents: write`). A job that names no `permissions:`
/// (nor does its workflow) gets the repository's default, which may be
/// write: that is named too.
pub fn excess_permissions(shipped: &str, installed: &str) -> Result<Vec<(String, Vec<String>)>, NotYaml> {
    let (want, have) = (parse(shipped)?, parse(installed)?);
    let have_jobs = jobs(&have);
    let mut out = Vec::new();
    for (id, job) in jobs(&want) {
        let wanted = permissions(&job).unwrap_or_default();
        if wanted.is_empty() || wanted.values().any(|l| rank(l) > 1) {
            continue;
        }
        let Some(theirs) = have_jobs.get(&id) else { continue };
        let excess: Vec<String> = match permissions(theirs).or_else(|| permissions(&have)) {
            None => vec!["the repository's default (no `permissions:`)".into()],
            Some(granted) => {
                granted.into_iter().filter(|(_, l)| rank(l) > 1).map(|(scope, l)| format!("{scope}: {l}")).collect()
            }
        };
        out.push((id, excess));
    }
    Ok(out)
}

fn rank(level: &str) -> u8 {
    match level {
        "write" => 2,
        "read" => 1,
        _ => 0,
    }
}

fn jobs(workflow: &Value) -> BTreeMap<String, Value> {
    key(workflow, "jobs")
        .and_then(Value::as_mapping)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.clone()))).collect())
        .unwrap_or_default()
}

/// `permissions:` of a job or workflow, as scope -> level.
fn permissions(v: &Value) -> Option<BTreeMap<String, String>> {
    const SCOPES: &[&str] = &["actions", "checks", "contents", "issues", "pull-requests", "statuses"];
    match key(v, "permissions")? {
        Value::String(all) if all == "write-all" || all == "read-all" => {
            let level = all.trim_end_matches("-all").to_string();
            Some(SCOPES.iter().map(|s| (s.to_string(), level.clone())).collect())
        }
        Value::Mapping(m) => {
            Some(m.iter().filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string()))).collect())
        }
        _ => Some(BTreeMap::new()),
    }
}

/// The ward commands a job runs: (`stage`, `precedents check`, ...) with
/// the flags given, from `run:` lines and from steps that use the action.
fn ward_calls(job: &Value) -> Vec<(String, Vec<String>)> {
    let steps = key(job, "steps").and_then(Value::as_sequence).cloned().unwrap_or_default();
    let mut calls = Vec::new();
    for step in &steps {
        if let Some(run) = key(step, "run").and_then(Value::as_str) {
            for line in run.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                // `ward` the program, not the `--bin ward` of the build.
                let is_ward = |i: usize| {
                    words[i].trim_matches('"').rsplit('/').next() == Some("ward") && (i == 0 || words[i - 1] != "--bin")
                };
                if let Some(at) = (0..words.len()).find(|&i| is_ward(i)) {
                    let end = words[at + 1..].iter().position(|w| ["&&", "||", "|", ";"].contains(w));
                    let args = &words[at + 1..end.map_or(words.len(), |e| at + 1 + e)];
                    calls.push(normalize(args));
                }
            }
        }
        let uses = key(step, "uses").and_then(Value::as_str).unwrap_or_default();
        if uses.split('@').next().is_some_and(|repo| repo.ends_with("/ward") || repo == "./") {
            let with = key(step, "with");
            let command = with.and_then(|w| key(w, "command")).and_then(Value::as_str).unwrap_or("stage");
            if command == "install" {
                // ward put on PATH: the `run:` lines after it are its calls.
                continue;
            }
            let mut args = action_args(command);
            let extra = with.and_then(|w| key(w, "args")).and_then(Value::as_str).unwrap_or_default();
            args.extend(extra.split_whitespace().map(String::from));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            calls.push(normalize(&args));
        }
    }
    calls
}

/// `ward`'s arguments as (subcommand words, flag names), global flags aside.
fn normalize(args: &[&str]) -> (String, Vec<String>) {
    const GLOBAL: &[&str] = &["--forge", "--root", "--repo"];
    let mut words = Vec::new();
    let mut flags = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        let name = a.split('=').next().unwrap_or(a);
        if GLOBAL.contains(&name) {
            i += if a.contains('=') { 1 } else { 2 };
            continue;
        }
        if a.starts_with("--") {
            flags.push(name.to_string());
        } else if flags.is_empty() {
            words.push(a.to_string());
        }
        i += 1;
    }
    (words.join(" "), flags)
}

/// The arguments `action/run.sh` gives ward for the action's `command`.
fn action_args(command: &str) -> Vec<String> {
    ACTION_RUN
        .lines()
        .filter_map(|l| l.trim().split_once(") args=("))
        .find(|(name, _)| *name == command)
        .map(|(_, rest)| rest.split(')').next().unwrap_or_default().split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// Which of `files` (paths from the repository's top) a change to would
/// not start the workflow `installed` on `pull_request`: its `paths:`
/// filter, as GitHub reads it (`*` within a folder, `**` across folders,
/// `?` one character, a `!pattern` excluding what earlier ones matched;
/// the last pattern that matches decides). A workflow without the event
/// misses them all; one without a filter misses none.
pub fn unfiltered(installed: &str, files: &[String]) -> Result<Vec<String>, NotYaml> {
    let workflow = parse(installed)?;
    let Some(settings) = triggers(&workflow).remove("pull_request") else { return Ok(files.to_vec()) };
    let patterns = str_list(key(&settings, "paths"));
    if patterns.is_empty() {
        return Ok(Vec::new());
    }
    let started = |file: &str| {
        patterns.iter().fold(false, |on, p| match p.strip_prefix('!') {
            Some(negated) if glob(negated, file) => false,
            None if glob(p, file) => true,
            _ => on,
        })
    };
    Ok(files.iter().filter(|f| !started(f)).cloned().collect())
}

/// Whether the path filter pattern `pattern` matches `path`.
fn glob(pattern: &str, path: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), path.chars().collect());
    // Positions in `path` the pattern's prefix can have reached.
    let mut at = vec![false; s.len() + 1];
    at[0] = true;
    let mut i = 0;
    while i < p.len() {
        let mut next = vec![false; s.len() + 1];
        let any_depth = p[i] == '*' && p.get(i + 1) == Some(&'*');
        for j in (0..=s.len()).filter(|&j| at[j]) {
            match p[i] {
                '*' => {
                    next[j] = true;
                    let mut k = j;
                    while k < s.len() && (any_depth || s[k] != '/') {
                        k += 1;
                        next[k] = true;
                    }
                }
                '?' => {
                    if j < s.len() && s[j] != '/' {
                        next[j + 1] = true;
                    }
                }
                c => {
                    if j < s.len() && s[j] == c {
                        next[j + 1] = true;
                    }
                }
            }
        }
        at = next;
        i += if any_depth { 2 } else { 1 };
    }
    at[s.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage() -> &'static str {
        shipped().into_iter().find(|(n, _)| *n == "ward-stage.yml").expect("ward-stage.yml is shipped").1
    }

    #[test]
    fn the_shipped_workflows_match_themselves_and_grant_what_they_need() {
        assert!(shipped().len() >= 4, "{:?}", shipped().iter().map(|s| s.0).collect::<Vec<_>>());
        for (name, text) in shipped() {
            assert_eq!(differences(text, text).unwrap(), Vec::<String>::new(), "{name}");
            assert!(missing_permissions(text, text).unwrap().iter().all(|(_, m)| m.is_empty()), "{name}");
        }
        assert!(ward_calls(&jobs(&parse(stage()).unwrap())["visit"]).iter().any(|(c, _)| c == "visit"));
        assert!(ward_calls(&jobs(&parse(stage()).unwrap())["record"]).iter().any(|(c, _)| c == "record"));
        assert_eq!(excess_permissions(stage(), stage()).unwrap(), vec![("visit".to_string(), Vec::new())]);
    }

    #[test]
    fn a_step_that_uses_the_action_runs_the_command_run_sh_names() {
        let installed = stage().replace(
            "run: ./target/release/ward record --forge github --event \"$GITHUB_EVENT_PATH\" --visit \"$RUNNER_TEMP/ward-visit\"",
            "uses: octo/ward@0123456789abcdef0123456789abcdef01234567\n        with:\n          command: record\n          args: --visit visit",
        );
        assert_ne!(installed, stage());
        assert_eq!(differences(stage(), &installed).unwrap(), Vec::<String>::new());
        let sweep = "jobs:\n  s:\n    steps:\n      - uses: o/ward@x\n        with: { command: sweep, args: --reap }\n";
        assert_eq!(ward_calls(&jobs(&parse(sweep).unwrap())["s"]), vec![("sweep".to_string(), vec!["--reap".into()])]);
    }

    #[test]
    fn what_is_missing_is_named() {
        let old = stage().replace("    types: [labeled]\n", "    types: [opened]\n").replace("--event", "--evnt");
        let found = differences(stage(), &old).unwrap();
        assert!(found.iter().any(|d| d == "`issues` lacks the type `labeled`"), "{found:?}");
        assert!(found.iter().any(|d| d == "job `record` runs `ward record` without `--event`"), "{found:?}");
        let weak = stage().replace("      issues: write # labels, comments\n", "      issues: read\n");
        let missing = missing_permissions(stage(), &weak).unwrap();
        assert!(missing.contains(&("record".into(), vec!["issues: write".into()])), "{missing:?}");
        let strong = stage().replace("      issues: read # the patient", "      issues: write # the patient");
        let excess = excess_permissions(stage(), &strong).unwrap();
        assert_eq!(excess, vec![("visit".into(), vec!["issues: write".into()])]);
        assert!(dispatchable("on: [push, workflow_dispatch]").unwrap());
        assert!(dispatchable("on:\n  workflow_dispatch: {}\n").unwrap());
        assert!(!dispatchable("on: push").unwrap());
    }

    #[test]
    fn a_path_filter_starts_the_pipeline_check_for_wards_files_where_they_are() {
        let shipped: &str = shipped().into_iter().find(|(n, _)| *n == "ward-pipeline.yml").unwrap().1;
        let files = |dir: &str| -> Vec<String> {
            [".github/ward.yml".to_string()]
                .into_iter()
                .chain(["roles/fellow.md", "skills/x.md", "precedents/log.yaml"].map(|f| format!("{dir}{f}")))
                .collect()
        };
        assert_eq!(unfiltered(shipped, &files("")).unwrap(), Vec::<String>::new());
        assert_eq!(unfiltered(shipped, &files(".github/ward/")).unwrap(), Vec::<String>::new());
        assert_eq!(unfiltered(shipped, &files("ops/ward/")).unwrap(), files("ops/ward/")[1..].to_vec());
        let own = "on:\n  pull_request:\n    paths: [\"ops/**\", \"!ops/ward/precedents/*\", \"*.yml\"]\n";
        assert_eq!(unfiltered(own, &files("ops/ward/")).unwrap(), [".github/ward.yml", "ops/ward/precedents/log.yaml"]);
        assert!(unfiltered("on: [pull_request]\n", &files("x/")).unwrap().is_empty(), "no filter: every change");
        assert_eq!(unfiltered("on: [push]\n", &files("")).unwrap().len(), 4, "not started by pull requests");
        assert!(glob("a/*/c?.md", "a/b/c1.md") && !glob("a/*/c.md", "a/b/d/c.md") && glob("**/c.md", "a/b/c.md"));
    }
}
