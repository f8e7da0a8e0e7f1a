//! GitHub's published GraphQL schema (`tests/fixtures/github/graphql/`,
//! octokit/graphql-schema, MIT), and every document checked against it
//! the way GitHub checks a request before it runs anything: parsed,
//! validated (fields, arguments, their types, fragments' types, variables
//! defined and used), and its variables' values coerced to the types the
//! operation declares. A document that fails any of it is GitHub's answer
//! without `data`: HTTP 200, `errors` only ([`refusal`]).
//!
//! GitHub's SDL breaks one rule of the schema language itself (two fields
//! of `EnterpriseOwnerInfo` are defined twice), so the schema is used as
//! parsed ([`schema_problems`] lists what the parser found, and
//! `tests/graphql.rs` checks it is only that); documents are validated
//! against it in full.

use std::sync::OnceLock;

use apollo_compiler::executable::ExecutableDocument;
use apollo_compiler::validation::Valid;
use apollo_compiler::{Schema, request};
use serde_json::{Value, json};

const SCHEMA: &str = include_str!("../../fixtures/github/graphql/schema.graphql");

struct Loaded {
    schema: Valid<Schema>,
    problems: Vec<String>,
}

fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| match Schema::parse(SCHEMA, "schema.graphql") {
        Ok(schema) => Loaded { schema: Valid::assume_valid(schema), problems: Vec::new() },
        Err(with) => Loaded {
            problems: with.errors.iter().map(|d| d.error.to_string()).collect(),
            schema: Valid::assume_valid(with.partial),
        },
    })
}

/// GitHub's schema, parsed once per test process.
pub fn schema() -> &'static Valid<Schema> {
    &loaded().schema
}

/// What the parser found wrong with GitHub's SDL itself (not with any document).
pub fn schema_problems() -> &'static [String] {
    &loaded().problems
}

/// `document` with `variables`, checked as GitHub checks a request: the
/// valid document, or GitHub's `errors` (each with `message` and, where
/// the document says where, `locations`).
pub fn check(document: &str, variables: &Value) -> Result<Valid<ExecutableDocument>, Vec<Value>> {
    let schema = schema();
    let doc = ExecutableDocument::parse_and_validate(schema, document, "query.graphql")
        .map_err(|with| with.errors.iter().map(|d| error_json(d.to_json())).collect::<Vec<_>>())?;
    let operation = doc.operations.get(None).map_err(|e| vec![json!({ "message": e.message().to_string() })])?;
    let values: apollo_compiler::response::JsonMap = match variables {
        Value::Null => Default::default(),
        Value::Object(_) => serde_json::from_value(variables.clone())
            .map_err(|e| vec![json!({ "message": format!("variables are not a JSON object ({e})") })])?,
        _ => return Err(vec![json!({ "message": "Variables are invalid JSON." })]),
    };
    request::coerce_variable_values(schema, operation, &values)
        .map_err(|e| vec![json!({ "message": e.message().to_string() })])?;
    Ok(doc)
}

/// Whether a value of the object type `object` matches a fragment `... on
/// on`: the type itself, or an interface it implements, or a union it is in.
pub fn matches(on: &str, object: &str) -> bool {
    on == object || schema().is_subtype(on, object)
}

fn error_json(e: apollo_compiler::response::GraphQLError) -> Value {
    let mut out = json!({ "message": e.message });
    if !e.locations.is_empty() {
        out["locations"] =
            json!(e.locations.iter().map(|l| json!({ "line": l.line, "column": l.column })).collect::<Vec<_>>());
    }
    out
}

/// GitHub's answer to a request it refused before running it: `errors`
/// and no `data`.
pub fn refusal(errors: Vec<Value>) -> Value {
    json!({ "errors": errors })
}
