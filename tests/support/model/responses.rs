//! The OpenAI Responses API as codex 0.163.0 uses it: `POST /v1/responses`
//! with `stream: true`.
//!
//! codex offers its tools in one of two ways. With its default model it
//! runs in "code mode": the only tool is a custom tool `exec` taking
//! JavaScript, offered in an `additional_tools` input item, whose nested
//! tools (`tools.exec_command`, `tools.apply_patch`) do the work. With
//! another model (`-m`) the tools are plain functions (`exec_command`),
//! and there is no `apply_patch` tool: a patch goes through the shell as
//! `apply_patch <<'PATCH'`, which codex intercepts and applies itself.

use serde_json::{Value, json};

use super::script::{Identity, Step, Turn, Usage};
use super::{Answer, Desk, Reply, Request, Served, event};

pub(super) fn answer(desk: &mut Desk, req: &Request) -> Answer {
    let identity = identity(req);
    let key = desk.book.key(&identity);
    let (served, item, usage) = match desk.book.step(&key, &identity.user_text, |_| 1) {
        Step::Unmatched => (Served::Unmatched, message(desk, "no scene matches"), Usage::default()),
        Step::Done { scene, usage } => (Served::Done { scene }, message(desk, "Done."), usage),
        Step::Turns { scene, first, turns, usage } => {
            let served = Served::Turn { scene, turn: first };
            let item = match &turns[0] {
                Turn::Fault(fault) => return Answer { served, reply: Reply::Fault(fault.clone()) },
                Turn::Text(t) => message(desk, t),
                turn => match call(desk, &Tools::of(&req.body), turn) {
                    Ok(item) => item,
                    Err(e) => return Answer::script_error(e),
                },
            };
            if let Some(call_id) = item["call_id"].as_str() {
                desk.book.remember(call_id.to_string(), &key);
            }
            (served, item, usage)
        }
    };
    let id = desk.id("resp");
    let done = json!({
        "id": id, "object": "response", "status": "completed", "model": req.body["model"],
        "output": [item], "usage": usage_json(usage),
    });
    if !req.streams() {
        return Answer { served, reply: Reply::Json(done) };
    }
    let created =
        json!({"id": id, "object": "response", "status": "in_progress", "model": req.body["model"], "output": []});
    let mut events = event("response.created", &json!({"type": "response.created", "response": created}));
    for kind in ["response.output_item.added", "response.output_item.done"] {
        events += &event(kind, &json!({"type": kind, "output_index": 0, "item": item}));
    }
    events += &event("response.completed", &json!({"type": "response.completed", "response": done}));
    Answer { served, reply: Reply::Events(events) }
}

/// OpenAI's error body: `{"error":{"message","type","param","code"}}`.
pub(super) fn error_body(code: u16, message: &str) -> Value {
    let (kind, code_name) = match code {
        400 => ("invalid_request_error", Value::Null),
        401 => ("invalid_request_error", json!("invalid_api_key")),
        403 => ("permission_error", Value::Null),
        404 => ("invalid_request_error", json!("not_found")),
        429 => ("requests", json!("rate_limit_exceeded")),
        _ => ("server_error", Value::Null),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code_name}})
}

/// The usage codex reads: cached tokens inside `input_tokens`, cache
/// writes as `cache_write_tokens`.
fn usage_json(usage: Usage) -> Value {
    json!({
        "input_tokens": usage.openai_input(),
        "input_tokens_details": {"cached_tokens": usage.cache_read, "cache_write_tokens": usage.cache_creation},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.openai_input() + usage.output,
    })
}

fn identity(req: &Request) -> Identity {
    let input = req.body["input"].as_array().map(Vec::as_slice).unwrap_or_default();
    let user_text: Vec<&str> = input
        .iter()
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .flat_map(|i| i["content"].as_array().map(Vec::as_slice).unwrap_or_default())
        .filter_map(|c| c["text"].as_str())
        .collect();
    let replies = input
        .iter()
        .filter(|i| i["type"] == "custom_tool_call" || i["type"] == "function_call")
        .filter_map(|i| i["call_id"].as_str().map(String::from));
    Identity {
        session: req.header("session-id").map(String::from),
        replies: replies.collect(),
        user_text: user_text.join("\n"),
    }
}

/// The tools a request offers, as far as the script needs them.
struct Tools {
    /// The custom tool `exec` (code mode) is offered.
    code_mode: bool,
    /// The function that runs a shell command: `exec_command` or `shell`.
    shell: Option<&'static str>,
    /// How `apply_patch` is offered: `custom`, `function`, or not at all.
    patch: Option<String>,
}

impl Tools {
    fn of(body: &Value) -> Tools {
        let mut all = Vec::new();
        let offered = body["tools"].as_array().into_iter().flatten();
        let extra = body["input"].as_array().into_iter().flatten().filter(|i| i["type"] == "additional_tools");
        flatten(offered.chain(extra.flat_map(|i| i["tools"].as_array().into_iter().flatten())), &mut all);
        let find =
            |name: &str| all.iter().find(|t| t["name"] == name).map(|t| t["type"].as_str().unwrap_or("").to_string());
        Tools {
            code_mode: find("exec").as_deref() == Some("custom"),
            shell: ["exec_command", "shell"].into_iter().find(|n| find(n).is_some()),
            patch: find("apply_patch"),
        }
    }
}

/// Tools with those inside namespaces.
fn flatten<'a>(tools: impl Iterator<Item = &'a Value>, out: &mut Vec<&'a Value>) {
    for tool in tools {
        if tool["type"] == "namespace" {
            flatten(tool["tools"].as_array().into_iter().flatten(), out);
        } else {
            out.push(tool);
        }
    }
}

/// The output item that plays a shell or edit turn with the tools offered.
fn call(desk: &mut Desk, tools: &Tools, turn: &Turn) -> Result<Value, String> {
    let patch = match turn {
        Turn::Write { path, content } => Some(add_file(path, content)),
        Turn::Edit { path, old, new } => Some(update_file(path, old, new)),
        _ => None,
    };
    if tools.code_mode {
        let js = match (turn, &patch) {
            (Turn::Shell(cmd), _) => {
                format!("const r = await tools.exec_command({{cmd: {}, login: false}});\ntext(r.output);", json!(cmd))
            }
            (_, Some(patch)) => format!("const r = await tools.apply_patch({});\ntext(r);", json!(patch)),
            _ => unreachable!("a shell or edit turn"),
        };
        return Ok(custom_call(desk, "exec", &js));
    }
    match (&patch, tools.patch.as_deref()) {
        (Some(patch), Some("custom")) => return Ok(custom_call(desk, "apply_patch", patch)),
        (Some(patch), Some("function")) => return Ok(function_call(desk, "apply_patch", json!({"input": patch}))),
        _ => {}
    }
    let command = match (turn, &patch) {
        (Turn::Shell(cmd), _) => cmd.clone(),
        (_, Some(patch)) => format!("apply_patch <<'PATCH'\n{patch}\nPATCH"),
        _ => unreachable!("a shell or edit turn"),
    };
    match tools.shell {
        Some("exec_command") => Ok(function_call(desk, "exec_command", json!({"cmd": command}))),
        Some(shell) => Ok(function_call(desk, shell, json!({"command": ["bash", "-lc", command]}))),
        None => Err("codex offered neither `exec` (code mode) nor a shell function in this request".into()),
    }
}

fn custom_call(desk: &mut Desk, name: &str, input: &str) -> Value {
    let n = desk.next();
    json!({"type": "custom_tool_call", "id": format!("ctc_{n}"), "call_id": format!("call_{n}"), "name": name, "input": input, "status": "completed"})
}

fn function_call(desk: &mut Desk, name: &str, arguments: Value) -> Value {
    let n = desk.next();
    json!({
        "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"), "name": name,
        "arguments": arguments.to_string(), "status": "completed",
    })
}

fn message(desk: &mut Desk, text: &str) -> Value {
    json!({
        "type": "message", "id": desk.id("msg"), "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// apply_patch's format: a file created (or replaced) with `content`.
fn add_file(path: &str, content: &str) -> String {
    format!("*** Begin Patch\n*** Add File: {path}\n{}*** End Patch", prefixed('+', content))
}

/// apply_patch's format: the lines `old` replaced by the lines `new`.
fn update_file(path: &str, old: &str, new: &str) -> String {
    format!("*** Begin Patch\n*** Update File: {path}\n@@\n{}{}*** End Patch", prefixed('-', old), prefixed('+', new))
}

/// Each line of `text` behind `mark`, one line each.
fn prefixed(mark: char, text: &str) -> String {
    text.lines().map(|l| format!("{mark}{l}\n")).collect()
}
