//! OpenAI chat completions as aider 0.86.2 uses them through litellm
//! (`--model openai/<name>`): `POST /v1/chat/completions`, JSON with
//! `--no-stream`, else `data:` chunks ending `data: [DONE]`.
//!
//! aider has no tools: it reads edits out of the reply's text, in its
//! `diff` edit format (SEARCH/REPLACE blocks). So one reply plays every
//! write and edit turn in a row, and the text turn after them; a shell
//! turn is a script error (aider only suggests commands, and
//! `--yes-always` declines to run them).

use serde_json::{Value, json};

use super::script::{Identity, Step, Turn, Usage};
use super::{Answer, Desk, Reply, Request, Served};

pub(super) fn answer(desk: &mut Desk, req: &Request) -> Answer {
    let identity = identity(req);
    let key = desk.book.key(&identity);
    let (served, content, usage) = match desk.book.step(&key, &identity.user_text, one_reply) {
        Step::Unmatched => (Served::Unmatched, "no scene matches".to_string(), Usage::default()),
        Step::Done { scene, usage } => (Served::Done { scene }, "Done.".to_string(), usage),
        Step::Turns { scene, first, turns, usage } => {
            let served = Served::Turn { scene, turn: first };
            if let Turn::Fault(fault) = &turns[0] {
                return Answer { served, reply: Reply::Fault(fault.clone()) };
            }
            let edits = turns.iter().any(|t| matches!(t, Turn::Write { .. } | Turn::Edit { .. }));
            if edits && !in_diff_format(req) {
                return Answer::script_error(
                    "aider is not in its `diff` edit format (it picks `whole` for a model it does not know): \
                     run it with `--edit-format diff`"
                        .into(),
                );
            }
            match reply_text(&turns) {
                Ok(content) => (served, content, usage),
                Err(e) => return Answer::script_error(e),
            }
        }
    };
    desk.book.remember(content.trim().to_string(), &key);
    completion(desk, req, served, &content, usage)
}

/// How many turns one reply plays: the writes and edits in a row and the
/// text after them, else the one turn.
fn one_reply(turns: &[Turn]) -> usize {
    let edits = turns.iter().take_while(|t| matches!(t, Turn::Write { .. } | Turn::Edit { .. })).count();
    match turns.get(edits) {
        _ if edits == 0 => 1,
        Some(Turn::Text(_)) => edits + 1,
        _ => edits,
    }
}

fn reply_text(turns: &[Turn]) -> Result<String, String> {
    let mut out = String::new();
    for turn in turns {
        match turn {
            Turn::Write { path, content } => out += &block(path, "", content),
            Turn::Edit { path, old, new } => out += &block(path, old, new),
            Turn::Text(t) => out += t,
            Turn::Shell(cmd) => {
                return Err(format!("aider has no shell tool: the scene cannot run `{cmd}` through it"));
            }
            Turn::Fault(_) => unreachable!("a fault is a reply of its own"),
        }
    }
    Ok(out)
}

/// Whether aider's system prompt asks for SEARCH/REPLACE blocks.
fn in_diff_format(req: &Request) -> bool {
    let messages = req.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    messages
        .iter()
        .any(|m| m["role"] == "system" && m["content"].as_str().is_some_and(|c| c.contains("SEARCH/REPLACE block")))
}

/// One SEARCH/REPLACE block of aider's `diff` format.
fn block(path: &str, search: &str, replace: &str) -> String {
    let lines = |t: &str| t.lines().map(|l| format!("{l}\n")).collect::<String>();
    format!("{path}\n```\n<<<<<<< SEARCH\n{}=======\n{}>>>>>>> REPLACE\n```\n\n", lines(search), lines(replace))
}

fn identity(req: &Request) -> Identity {
    let messages = req.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let text = |m: &Value| match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    };
    let user: Vec<String> = messages.iter().filter(|m| m["role"] == "user").map(text).collect();
    let replies = messages.iter().filter(|m| m["role"] == "assistant").map(|m| text(m).trim().to_string());
    Identity { session: None, replies: replies.collect(), user_text: user.join("\n") }
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.openai_input(),
        "completion_tokens": usage.output,
        "total_tokens": usage.openai_input() + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    })
}

fn completion(desk: &mut Desk, req: &Request, served: Served, content: &str, usage: Usage) -> Answer {
    let id = desk.id("chatcmpl");
    let model = &req.body["model"];
    if !req.streams() {
        let body = json!({
            "id": id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage_json(usage),
        });
        return Answer { served, reply: Reply::Json(body) };
    }
    let chunk = |choice: Value, usage: Option<Value>| {
        let mut c =
            json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [choice]});
        if let Some(u) = usage {
            c["usage"] = u;
        }
        format!("data: {c}\n\n")
    };
    let mut events =
        chunk(json!({"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": null}), None);
    events += &chunk(json!({"index": 0, "delta": {}, "finish_reason": "stop"}), Some(usage_json(usage)));
    events += "data: [DONE]\n\n";
    Answer { served, reply: Reply::Events(events) }
}
