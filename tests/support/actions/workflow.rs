//! A workflow file, read the way GitHub reads it: its triggers (`on:` with
//! `types:`, branch, tag and path filters, `workflows:` of `workflow_run`,
//! dispatch types), its permissions, concurrency, env and jobs.

use serde_json::{Map, Value};

use super::super::fake_github::{Level, Permissions, normalize_scope, parse_level};

#[derive(Debug, Clone)]
pub struct Workflow {
    /// The file name, `ward-stage.yml`.
    pub file: String,
    /// `.github/workflows/ward-stage.yml`.
    pub path: String,
    /// `name:`, else the path (what `workflow_run` and `github.workflow` use).
    pub name: String,
    /// Event name -> its configuration (null when it has none).
    pub on: Map<String, Value>,
    pub permissions: Option<Value>,
    pub concurrency: Option<Value>,
    pub env: Map<String, Value>,
    pub defaults: Value,
    /// In file order.
    pub jobs: Vec<(String, Value)>,
}

impl Workflow {
    pub fn parse(file: &str, text: &str) -> Result<Self, String> {
        let doc: Value = serde_yaml::from_str(text).map_err(|e| format!("{file}: invalid YAML: {e}"))?;
        let path = format!(".github/workflows/{file}");
        let name = doc.get("name").and_then(Value::as_str).map(String::from).unwrap_or_else(|| path.clone());
        let on = match doc.get("on") {
            Some(Value::String(event)) => [(event.clone(), Value::Null)].into_iter().collect(),
            Some(Value::Array(events)) => {
                events.iter().filter_map(Value::as_str).map(|e| (e.to_string(), Value::Null)).collect()
            }
            Some(Value::Object(m)) => m.clone(),
            _ => return Err(format!("{file}: no `on:` triggers")),
        };
        let jobs = match doc.get("jobs") {
            Some(Value::Object(m)) if !m.is_empty() => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => return Err(format!("{file}: no jobs")),
        };
        Ok(Self {
            file: file.into(),
            path,
            name,
            on,
            permissions: doc.get("permissions").cloned(),
            concurrency: doc.get("concurrency").cloned(),
            env: doc.get("env").and_then(Value::as_object).cloned().unwrap_or_default(),
            defaults: doc.get("defaults").cloned().unwrap_or(Value::Null),
            jobs,
        })
    }

    /// The configuration of `event` if the workflow has that trigger.
    pub fn trigger(&self, event: &str) -> Option<&Value> {
        self.on.get(event)
    }
}

/// The activity types an event triggers on when `types:` is not given.
fn default_types(event: &str) -> Option<&'static [&'static str]> {
    match event {
        "pull_request" | "pull_request_target" => Some(&["opened", "synchronize", "reopened"]),
        _ => None,
    }
}

/// Whether `action` passes the `types:` of a trigger.
pub fn types_match(event: &str, config: &Value, action: Option<&str>) -> bool {
    let listed: Option<Vec<String>> = match config.get("types") {
        Some(Value::String(s)) => Some(vec![s.clone()]),
        Some(Value::Array(a)) => Some(a.iter().filter_map(Value::as_str).map(String::from).collect()),
        _ => None,
    };
    match (listed, action) {
        (Some(types), Some(a)) => types.iter().any(|t| t == a),
        (Some(_), None) => false,
        (None, Some(a)) => default_types(event).is_none_or(|d| d.contains(&a)),
        (None, None) => true,
    }
}

/// A list of filter patterns (`branches:`, `paths:`), if given.
pub fn patterns(config: &Value, key: &str) -> Option<Vec<String>> {
    match config.get(key) {
        Some(Value::String(s)) => Some(vec![s.clone()]),
        Some(Value::Array(a)) => Some(a.iter().filter_map(Value::as_str).map(String::from).collect()),
        _ => None,
    }
}

/// GitHub's filter patterns: `*` (no `/`), `**` (anything), `?` and `+`
/// (zero-or-one and one-or-more of the preceding character), `[...]`,
/// and `!` to exclude; the last pattern that matches decides.
pub fn filter_matches(patterns: &[String], value: &str) -> bool {
    let mut matched = false;
    for p in patterns {
        let (negate, p) = match p.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, p.as_str()),
        };
        if glob(p).is_match(value) {
            matched = !negate;
        }
    }
    matched
}

fn glob(pattern: &str) -> regex::Regex {
    let chars: Vec<char> = pattern.chars().collect();
    let mut re = String::from("^");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                re.push_str(".*");
                i += 2;
                continue;
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push('?'),
            '+' => re.push('+'),
            '[' => {
                let end = chars[i..].iter().position(|c| *c == ']').map(|e| e + i).unwrap_or(i);
                re.push_str(&chars[i..=end].iter().collect::<String>());
                i = end;
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    re.push('$');
    regex::Regex::new(&re).unwrap_or_else(|e| panic!("filter pattern `{pattern}`: {e}"))
}

/// The filters of `include`/`ignore` pairs (`branches`/`branches-ignore`).
pub fn passes(config: &Value, key: &str, value: &str) -> bool {
    let ignore = format!("{key}-ignore");
    match (patterns(config, key), patterns(config, &ignore)) {
        (Some(p), _) => filter_matches(&p, value),
        (None, Some(p)) => !filter_matches(&p, value),
        (None, None) => true,
    }
}

/// Path filters over the files a change touched.
pub fn paths_pass(config: &Value, files: &[String]) -> bool {
    match (patterns(config, "paths"), patterns(config, "paths-ignore")) {
        (Some(p), _) => files.iter().any(|f| filter_matches(&p, f)),
        (None, Some(p)) => files.iter().any(|f| !filter_matches(&p, f)),
        (None, None) => true,
    }
}

/// A `permissions:` block as GitHub grants it: `read-all`, `write-all`,
/// `{}` (metadata only) or the listed scopes only (the rest: none).
pub fn permissions(block: &Value) -> Result<Permissions, String> {
    match block {
        Value::String(s) if s == "read-all" => Ok(Permissions::read_all()),
        Value::String(s) if s == "write-all" => Ok(Permissions::write_all()),
        Value::Object(m) => {
            let mut p = Permissions::none();
            for (scope, level) in m {
                let scope = normalize_scope(scope);
                if !Permissions::SCOPES.contains(&scope.as_str()) {
                    return Err(format!("Unexpected value '{scope}' in permissions"));
                }
                let level = level.as_str().and_then(parse_level).ok_or_else(|| {
                    format!("Unexpected value '{level}' for permission `{scope}` (read, write or none)")
                })?;
                if level != Level::None {
                    p.0.insert(scope, level);
                }
            }
            Ok(p)
        }
        Value::Null => Ok(Permissions::none()),
        other => Err(format!("Unexpected value '{other}' for permissions")),
    }
}

/// `needs:` as a list.
pub fn needs(job: &Value) -> Vec<String> {
    match job.get("needs") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(String::from).collect(),
        _ => Vec::new(),
    }
}

/// `concurrency:` as (group expression, cancel-in-progress).
pub fn concurrency(v: &Value) -> Option<(String, Value)> {
    match v {
        Value::String(group) => Some((group.clone(), Value::Bool(false))),
        Value::Object(m) => Some((
            m.get("group").and_then(Value::as_str).unwrap_or_default().to_string(),
            m.get("cancel-in-progress").cloned().unwrap_or(Value::Bool(false)),
        )),
        _ => None,
    }
}
