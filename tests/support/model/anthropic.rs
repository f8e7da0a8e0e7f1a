//! The Anthropic Messages API as Claude Code 2.1.328 uses it:
//! `POST /v1/messages?beta=true` with `stream: true` (server-sent events),
//! its tools `Bash`, `Write` and `Edit`, and side requests without tools.

use serde_json::{Value, json};

use super::script::{Identity, Step, Turn, Usage};
use super::{Answer, Desk, Reply, Request, Served, event};

pub(super) fn answer(desk: &mut Desk, req: &Request) -> Answer {
    if req.body["tools"].as_array().is_none_or(Vec::is_empty) {
        return reply(desk, req, Served::Side, vec![text("Scripted side answer.")], "end_turn", Usage::default());
    }
    let identity = identity(req);
    let key = desk.book.key(&identity);
    match desk.book.step(&key, &identity.user_text, |_| 1) {
        Step::Unmatched => {
            reply(desk, req, Served::Unmatched, vec![text("no scene matches")], "end_turn", Usage::default())
        }
        Step::Done { scene, usage } => reply(desk, req, Served::Done { scene }, vec![text("Done.")], "end_turn", usage),
        Step::Turns { scene, first, turns, usage } => {
            let served = Served::Turn { scene, turn: first };
            let (name, input) = match &turns[0] {
                Turn::Fault(fault) => return Answer { served, reply: Reply::Fault(fault.clone()) },
                Turn::Text(t) => return reply(desk, req, served, vec![text(t)], "end_turn", usage),
                Turn::Shell(command) => {
                    ("Bash", json!({"command": command, "description": "Run the scripted command"}))
                }
                Turn::Write { path, content } => match absolute(req, path) {
                    Ok(path) => ("Write", json!({"file_path": path, "content": content})),
                    Err(e) => return Answer::script_error(e),
                },
                Turn::Edit { path, old, new } => match absolute(req, path) {
                    Ok(path) => ("Edit", json!({"file_path": path, "old_string": old, "new_string": new})),
                    Err(e) => return Answer::script_error(e),
                },
            };
            if !offers(req, name) {
                return Answer::script_error(format!("Claude Code offered no `{name}` tool in this request"));
            }
            let id = desk.id("toolu");
            desk.book.remember(id.clone(), &key);
            let call = json!({"type": "tool_use", "id": id, "name": name, "input": input});
            reply(desk, req, served, vec![call], "tool_use", usage)
        }
    }
}

/// `count_tokens`: a rough count (four bytes a token) of the request.
pub(super) fn count_tokens(req: &Request) -> Answer {
    let tokens = req.body.to_string().len() / 4;
    Answer { served: Served::CountTokens, reply: Reply::Json(json!({"input_tokens": tokens})) }
}

/// Anthropic's error body: `{"type":"error","error":{"type","message"}}`.
pub(super) fn error_body(code: u16, message: &str) -> Value {
    let kind = match code {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn identity(req: &Request) -> Identity {
    let messages = req.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let blocks = |role: &'static str| {
        messages.iter().filter(move |m| m["role"] == role).flat_map(|m| match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(blocks) => blocks.clone(),
            _ => Vec::new(),
        })
    };
    let user_text: Vec<String> =
        blocks("user").filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str().map(String::from)).collect();
    let replies =
        blocks("assistant").filter(|b| b["type"] == "tool_use").filter_map(|b| b["id"].as_str().map(String::from));
    Identity {
        session: req.header("x-claude-code-session-id").map(String::from),
        replies: replies.collect(),
        user_text: user_text.join("\n"),
    }
}

fn offers(req: &Request, tool: &str) -> bool {
    req.body["tools"].as_array().is_some_and(|tools| tools.iter().any(|t| t["name"] == tool))
}

/// `path` made absolute against the working directory Claude Code states
/// in its context ("Primary working directory: /…", in the system prompt
/// or, as 2.1.328 sends it, in a `system` message).
fn absolute(req: &Request, path: &str) -> Result<String, String> {
    if path.starts_with('/') {
        return Ok(path.into());
    }
    let marker = "Primary working directory: ";
    let cwd = strings(&req.body)
        .into_iter()
        .find_map(|s| s.split_once(marker).and_then(|(_, rest)| rest.lines().next()).map(str::trim));
    match cwd {
        Some(cwd) if cwd.starts_with('/') => Ok(format!("{}/{path}", cwd.trim_end_matches('/'))),
        _ => Err(format!("`{path}` is relative and the request states no \"{marker}\"; give an absolute path")),
    }
}

/// Every string in `v`, depth first.
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s],
        Value::Array(items) => items.iter().flat_map(strings).collect(),
        Value::Object(fields) => fields.values().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn usage_json(usage: Usage, output: u64) -> Value {
    json!({
        "input_tokens": usage.input,
        "cache_creation_input_tokens": usage.cache_creation,
        "cache_read_input_tokens": usage.cache_read,
        "output_tokens": output,
    })
}

/// One assistant message, streamed when the request asks so.
fn reply(desk: &mut Desk, req: &Request, served: Served, content: Vec<Value>, stop: &str, usage: Usage) -> Answer {
    let id = desk.id("msg");
    let model = req.body["model"].clone();
    if !req.streams() {
        let message = json!({
            "id": id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": null, "usage": usage_json(usage, usage.output),
        });
        return Answer { served, reply: Reply::Json(message) };
    }
    let start = json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage_json(usage, 1),
    });
    let mut events = event("message_start", &json!({"type": "message_start", "message": start}));
    for (index, block) in content.iter().enumerate() {
        let (empty, delta) = if block["type"] == "tool_use" {
            let empty = json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
            (empty, json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}))
        } else {
            (json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": block["text"]}))
        };
        events += &event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": empty}),
        );
        events +=
            &event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}));
        events += &event("content_block_stop", &json!({"type": "content_block_stop", "index": index}));
    }
    let delta = json!({
        "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": usage_json(usage, usage.output),
    });
    events += &event("message_delta", &delta);
    events += &event("message_stop", &json!({"type": "message_stop"}));
    Answer { served, reply: Reply::Events(events) }
}
