//! The JSON Schema of ward.yml: the shipped copy is the generated one, every
//! shipped and documented example follows it, and it refuses what the
//! engine refuses at parse time (unknown keys, values outside an enum).
//!
//! Documented examples are the ```yaml fences of README.md and docs/*.md.
//! Each one carries a marker on the line before it:
//! `<!-- ward.yml -->` (a whole file), `<!-- ward.yml: fragment -->` (some
//! top-level keys of one, the rest left out) or `<!-- not ward.yml -->`
//! (a workflow step, say). An unmarked fence fails, so none is forgotten.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::Sandbox;
use ward::config::schema::{SCHEMA_MODELINE, SCHEMA_PATH, schema};
use ward::config::{CONFIG_PATH, Config};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).expect("the schema is a valid JSON Schema")
}

/// Every reason `yaml` does not follow `schema`, one per line.
fn violations(validator: &jsonschema::Validator, yaml: &str) -> Vec<String> {
    let instance: Value = match serde_yaml::from_str(yaml) {
        Ok(v) => v,
        Err(e) => return vec![format!("not YAML: {e}")],
    };
    validator.iter_errors(&instance).map(|e| format!("{} at `{}`", e, e.instance_path)).collect()
}

#[test]
fn the_shipped_schema_is_the_generated_one() {
    let shipped = std::fs::read_to_string(repo().join(SCHEMA_PATH)).expect("the repository ships the schema");
    let generated = ward::config::schema::schema_text();
    assert!(
        shipped == generated,
        "{SCHEMA_PATH} differs from the schema the config types give: regenerate it with\n\n    \
         cargo run -- config schema > {SCHEMA_PATH}\n\nand commit it"
    );
    let out = std::process::Command::new(support::ward_bin()).args(["config", "schema"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), generated, "`ward config schema` prints it");
}

#[test]
fn the_shipped_pipeline_and_the_embedded_default_follow_the_schema() {
    let v = validator(&schema());
    let shipped = std::fs::read_to_string(repo().join(CONFIG_PATH)).unwrap();
    assert_eq!(violations(&v, &shipped), Vec::<String>::new(), "{CONFIG_PATH}");
    assert_eq!(shipped.lines().next(), Some(SCHEMA_MODELINE), "its first line names the schema");
    let files = ward::defaults::files();
    let embedded = files.iter().find(|(p, _)| p == CONFIG_PATH).expect("the default pipeline").1;
    assert_eq!(violations(&v, embedded), Vec::<String>::new(), "the embedded default");
    let schema_file = files.iter().find(|(p, _)| p == SCHEMA_PATH).expect("init writes the schema").1;
    assert_eq!(schema_file, ward::config::schema::schema_text());
}

/// A ```yaml fence of a Markdown file: where it starts, its marker, its text.
struct Fence {
    place: String,
    marker: Option<String>,
    text: String,
}

fn yaml_fences(path: &Path) -> Vec<Fence> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut fences = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let open = lines[i].trim_start();
        let indent = lines[i].len() - open.len();
        if open == "```yaml" || open == "```yml" {
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim())
                .filter(|l| l.starts_with("<!--") && l.ends_with("-->"))
                .map(|l| l.trim_start_matches("<!--").trim_end_matches("-->").trim().to_string());
            let start = i + 1;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "```" {
                body.push(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
                i += 1;
            }
            fences.push(Fence { place: format!("{}:{start}", path.display()), marker, text: body.join("\n") });
        }
        i += 1;
    }
    fences
}

fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_documented_example_is_marked_and_follows_the_schema() {
    let whole = schema();
    let mut fragment_schema = whole.clone();
    fragment_schema.as_object_mut().unwrap().remove("required");
    let (whole, fragment) = (validator(&whole), validator(&fragment_schema));
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        for fence in yaml_fences(&doc) {
            let found = match fence.marker.as_deref() {
                Some("ward.yml") => violations(&whole, &fence.text),
                Some("ward.yml: fragment") => violations(&fragment, &fence.text),
                Some("not ward.yml") => continue,
                _ => vec![
                    "a yaml fence without a marker: put `<!-- ward.yml -->`, `<!-- ward.yml: fragment -->` or \
                     `<!-- not ward.yml -->` on the line before it"
                        .into(),
                ],
            };
            checked += 1;
            problems.extend(found.into_iter().map(|p| format!("{}: {p}", fence.place)));
        }
    }
    assert!(problems.is_empty(), "documented examples that do not follow the schema:\n{}", problems.join("\n"));
    assert!(checked >= 5, "README.md and docs/*.md show ward.yml examples; found {checked}");
}

/// Each change makes ward.yml wrong in a way a schema can say; the engine
/// refuses it too, so the editor and `ward config check` agree.
#[test]
fn the_schema_refuses_what_the_engine_refuses() {
    let v = validator(&schema());
    let shipped = std::fs::read_to_string(repo().join(CONFIG_PATH)).unwrap();
    let cases = [
        ("an unknown top-level key", "version: 1\n", "version: 1\nversoin: 1\n"),
        ("an unknown key in a stage", "    role: planner\n", "    role: planner\n    rol: planner\n"),
        ("a mode that is not one", "mode: discharge", "mode: dischrge"),
        ("a note kind that is not one", "writes: [DISCHARGE_CHECKLIST]", "writes: [DISCHARGE_CHECKLST]"),
        ("a permission that is not one", "approver_permission: maintain", "approver_permission: boss"),
        ("a dispatch mode that is not one", "dispatch: repository_dispatch", "dispatch: webhook"),
        ("an unknown agent preset", "agent:\n", "agent:\n  preset: copilot\n"),
        ("an unknown usage parser", "  budget:\n", "  budget:\n    usage: tokens\n"),
    ];
    for (what, from, to) in cases {
        assert!(shipped.contains(from), "{what}: ward.yml has no `{from}`");
        let text = shipped.replacen(from, to, 1);
        assert!(!violations(&v, &text).is_empty(), "the schema accepts {what}");
        assert!(Config::parse(&text, Path::new(CONFIG_PATH), None).is_err(), "the engine accepts {what}");
    }
    let bad_duration = shipped.replacen("time_limit: 30m", "time_limit: half an hour", 1);
    assert_ne!(bad_duration, shipped);
    assert!(!violations(&v, &bad_duration).is_empty(), "the schema accepts a bad duration");
    assert!(Config::parse(&bad_duration, Path::new(CONFIG_PATH), None).is_err());
    let ok_duration = shipped.replacen("time_limit: 30m", "time_limit: 1h 30m", 1);
    assert_eq!(violations(&v, &ok_duration), Vec::<String>::new());
}

#[test]
fn ward_init_writes_the_schema_line_and_the_schema_beside_the_pipeline() {
    let s = Sandbox::new();
    let pipeline = s.read(CONFIG_PATH);
    assert_eq!(pipeline.lines().next(), Some(SCHEMA_MODELINE));
    let beside = Path::new(CONFIG_PATH).parent().unwrap().join("ward.schema.json");
    assert_eq!(beside, Path::new(SCHEMA_PATH), "the line's relative path names the schema's place");
    assert_eq!(s.read(SCHEMA_PATH), ward::config::schema::schema_text());
    let out = s.ward(&["config", "check"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
}
