//! The JSON Schema of `ward.yml`, generated from the config types (their
//! serde renames, defaults and `deny_unknown_fields`, their doc comments as
//! descriptions). `ward config schema` prints it; the repository ships it
//! as `.github/ward.schema.json`, beside the pipeline it describes, and
//! `ward init` writes it there too (`tests/schema.rs` keeps the shipped copy
//! equal to this one).
//!
//! What serde reads through a function of ours (durations, permissions,
//! note kinds, the ordered stage map) gets its schema here, so the schema
//! refuses what the parser refuses wherever a schema can say it.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use super::{Config, IndexedStages, StageConfig};
use crate::chart::NoteKind;

/// Where the schema lives, relative to the repository root; the first line
/// of `.github/ward.yml` points editors at it (a path relative to the file).
pub const SCHEMA_PATH: &str = ".github/ward.schema.json";

/// The line that tells editors (yaml-language-server) which schema
/// `.github/ward.yml` follows.
pub const SCHEMA_MODELINE: &str = "# yaml-language-server: $schema=ward.schema.json";

/// The schema of the whole file (JSON Schema draft 2020-12).
pub fn schema() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<Config>();
    schema.insert("title".into(), "ward.yml: the pipeline of a ward hospital".into());
    let mut value = schema.to_value();
    drop_serialized_defaults(&mut value);
    value
}

/// The schema as the repository ships it: pretty JSON and a final newline.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    text.push('\n');
    text
}

/// schemars writes a field's `default` by serializing it; a duration comes
/// out as `{secs, nanos}`, which is not what ward.yml says (`30m`). The
/// doc comments name every default in ward.yml's own words, so defaults
/// that are not plain values of their own schema's type are dropped. And
/// rustdoc's links (`` [`Mode`] ``) read as plain code in an editor.
fn drop_serialized_defaults(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("default").is_some_and(Value::is_object) && map.get("type") == Some(&"string".into()) {
                map.remove("default");
            }
            if let Some(Value::String(text)) = map.get_mut("description") {
                *text = text.replace("[`", "`").replace("`]", "`");
            }
            map.values_mut().for_each(drop_serialized_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_serialized_defaults),
        _ => {}
    }
}

/// A duration as ward.yml writes it (humantime): `15m`, `1h 30m`, `90s`.
pub(crate) fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": r"^\s*([0-9]+\s*(nsec|ns|usec|us|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|w|months|month|M|years|year|y)\s*)+$",
        "description": "A duration like `15m`, `90s` or `1h 30m`.",
    })
}

/// A repository permission, as GitHub names it (and its old names).
pub(crate) fn permission(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["none", "read", "pull", "triage", "write", "push", "maintain", "admin"],
    })
}

impl JsonSchema for NoteKind {
    fn schema_name() -> Cow<'static, str> {
        "NoteKind".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = NoteKind::ALL.iter().map(|k| k.as_str()).collect();
        json_schema!({
            "type": "string",
            "enum": names,
            "description": "A note kind of the chart protocol (docs/architecture.md, Chart).",
        })
    }
}

impl JsonSchema for IndexedStages {
    fn schema_name() -> Cow<'static, str> {
        "Stages".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "description": "Stages by name, in pipeline order. A name is lower-case letters, digits and `-`.",
            "propertyNames": { "pattern": "^[a-z0-9-]+$" },
            "additionalProperties": generator.subschema_for::<StageConfig>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_names_the_sections_and_refuses_unknown_keys() {
        let s = schema();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(s["additionalProperties"], false);
        for key in ["version", "agent", "labels", "stages", "roles", "departments", "emulator", "ci"] {
            assert!(s["properties"].get(key).is_some(), "no `{key}` in {:#}", s["properties"]);
        }
        assert!(!schema_text().contains("\"secs\""), "durations are strings, not serde's struct");
    }
}
