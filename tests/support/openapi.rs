//! Checks the fake GitHub's answers, and ward's requests, against a subset
//! of GitHub's OpenAPI description
//! (`tests/fixtures/github/rest-api/*.subset.openapi.json`). OpenAPI 3.0
//! schemas are JSON Schema draft 4 plus `nullable`: `nullable: true`
//! becomes a `null` alternative, and `oneOf` is read as `anyOf` (GitHub
//! writes `oneOf` for alternatives that overlap: the 409 body is
//! `basic-error` or `repository-rule-violation-error`, and any object is
//! both).

use serde_json::{Value, json};

use super::fake_github::Exchange;

pub struct OpenApi {
    doc: Value,
    components: Value,
}

impl OpenApi {
    /// Loads `tests/fixtures/github/rest-api/<file>`.
    pub fn load(file: &str) -> Self {
        let path = format!("{}/tests/fixtures/github/rest-api/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"));
        let components = to_json_schema(&doc["components"]);
        Self { doc, components }
    }

    /// Whether the description has this operation (`GET`, `/repos/{owner}/...`).
    pub fn has(&self, method: &str, route: &str) -> bool {
        self.operation(method, route).is_some()
    }

    /// The operation (`GET`, `/repos/{owner}/...`), if the description has it.
    pub fn operation(&self, method: &str, route: &str) -> Option<&Value> {
        self.doc["paths"].get(route)?.get(method.to_lowercase())
    }

    /// The schema of a request body or a response (following a `$ref`).
    pub fn content_schema<'a>(&'a self, v: &'a Value) -> Option<&'a Value> {
        let content = self.resolve(v).get("content")?.as_object()?;
        content.values().next()?.get("schema")
    }

    /// The fake's answer in `e` against the response GitHub documents for
    /// its status: a documented status, and a body that fits its schema.
    pub fn check_answer(&self, e: &Exchange) -> Result<(), String> {
        let op = self.operation(&e.method, &e.route).ok_or_else(|| format!("{} is not described", e.key()))?;
        let declared = op["responses"]
            .get(e.status.to_string())
            .ok_or_else(|| format!("{} answered {}, which GitHub does not document", e.key(), e.status))?;
        match (self.content_schema(declared), &e.response) {
            (Some(schema), Some(body)) => {
                self.check(schema, body).map_err(|why| format!("{} {}: {why}", e.key(), e.status))
            }
            (None, None) => Ok(()),
            (None, Some(_)) if e.status == 404 => Ok(()),
            (None, Some(_)) => Err(format!("{} {} has a body GitHub does not send", e.key(), e.status)),
            (Some(_), None) => Err(format!("{} {} lacks the body GitHub sends", e.key(), e.status)),
        }
    }

    /// Follows a `$ref` inside the document (`#/components/responses/...`).
    fn resolve<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => self.doc.pointer(r.trim_start_matches('#')).unwrap_or(v),
            None => v,
        }
    }

    /// Validates `instance` against `schema` (an OpenAPI schema of the document).
    pub fn check(&self, schema: &Value, instance: &Value) -> Result<(), String> {
        let mut root = to_json_schema(schema);
        if let Value::Object(m) = &mut root {
            m.insert("components".into(), self.components.clone());
        }
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .build(&root)
            .map_err(|e| format!("the schema does not compile: {e}"))?;
        let errors: Vec<String> =
            validator.iter_errors(instance).take(5).map(|e| format!("{} at {}", e, e.instance_path)).collect();
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }

    /// A schema of `#/components/schemas/<name>`.
    pub fn schema(&self, name: &str) -> Value {
        json!({ "$ref": format!("#/components/schemas/{name}") })
    }
}

fn to_json_schema(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(to_json_schema).collect()),
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .filter(|(k, _)| *k != "nullable")
                .map(|(k, v)| (if k == "oneOf" { "anyOf".to_string() } else { k.clone() }, to_json_schema(v)))
                .collect();
            if map.get("nullable") != Some(&Value::Bool(true)) {
                return Value::Object(out);
            }
            match out.get("type").cloned() {
                Some(Value::String(t)) if !out.contains_key("$ref") => {
                    out.insert("type".into(), json!([t, "null"]));
                    if let Some(Value::Array(e)) = out.get_mut("enum") {
                        e.push(Value::Null);
                    }
                    Value::Object(out)
                }
                _ => json!({ "anyOf": [Value::Object(out), { "type": "null" }] }),
            }
        }
        other => other.clone(),
    }
}
