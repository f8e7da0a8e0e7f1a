//! The agent's own account of a failure, read from its standard output as
//! it comes: the model API's errors it met (a rejected key, a quota, an
//! overloaded service) and the reason it gave up. A CLI says this in its
//! event stream, not on stderr: Claude Code's `api_retry` events and its
//! `result` object, codex's `error` and `turn.failed` events, aider's
//! litellm exception lines.
//!
//! An error the model API will answer the same way however often it is
//! asked (400, 401, 403, 404, 422) is a [`ModelError`] that is not
//! [retryable](ModelError::retryable): the stage runner stops the agent at
//! once instead of waiting minutes of the CLI's own retries. Anything else
//! (429, 500, 529, a lost connection) the CLI retries within the stage's
//! time limit; a run that still fails on one is the service's failure.

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::agents::Output;

/// One error of the model API, as the agent's output reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelError {
    /// The HTTP status, when the output gives it.
    pub status: Option<u16>,
    /// The agent's words for it (bounded).
    pub message: String,
}

impl ModelError {
    /// Whether asking again could change the answer. An error without a
    /// status (a connection that broke) could.
    pub fn retryable(&self) -> bool {
        !matches!(self.status, Some(400 | 401 | 403 | 404 | 422))
    }

    /// `HTTP 401: authentication_failed`, for people.
    pub fn describe(&self) -> String {
        match self.status {
            Some(s) => format!("HTTP {s}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

/// What went wrong with the model service in a run, as ward decided it
/// from the agent's own report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ModelTrouble {
    /// The model API refused in a way asking again cannot change; ward
    /// stopped the agent at once.
    Refused { error: ModelError },
    /// The run failed while the latest answer of the model service was one
    /// to retry (429, 5xx, 529): the service's failure, not the patient's.
    Unavailable { error: ModelError, errors: u32 },
}

impl ModelTrouble {
    /// The trouble of a run that ended with `end`: the refusal ward
    /// stopped it for, else, for a run that failed, the retryable error
    /// its agent last met.
    pub fn after(end: &super::AgentEnd, refused: Option<ModelError>, report: &Report) -> Option<ModelTrouble> {
        if let Some(error) = refused.or_else(|| report.refused.clone()) {
            return Some(ModelTrouble::Refused { error });
        }
        let failed = *end != super::AgentEnd::Exited(0);
        report
            .last
            .clone()
            .filter(|e| failed && e.retryable())
            .map(|error| ModelTrouble::Unavailable { error, errors: report.errors })
    }
}

/// The most of one message that is kept.
const MESSAGE_CHARS: usize = 300;

/// What the output said so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The first error that asking again cannot change.
    pub refused: Option<ModelError>,
    /// The latest error the model API answered.
    pub last: Option<ModelError>,
    /// How many model errors it reported (each retry is one).
    pub errors: u32,
    /// The reason it gave when it gave up (Claude's failed `result`,
    /// codex's `turn.failed`).
    pub gave_up: Option<String>,
}

/// Reads one agent's output line by line.
pub struct Reader {
    output: Output,
    carry: Vec<u8>,
    report: Report,
}

impl Reader {
    pub fn new(output: Output) -> Self {
        Self { output, carry: Vec::new(), report: Report::default() }
    }

    /// New bytes of the output.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.output == Output::Opaque {
            return;
        }
        self.carry.extend_from_slice(bytes);
        while let Some(end) = self.carry.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.carry.drain(..=end).collect();
            self.line(&String::from_utf8_lossy(&line));
        }
        // A line longer than any event ward reads is nobody's report.
        if self.carry.len() > 1 << 20 {
            self.carry.clear();
        }
    }

    /// The output ended: its last line counts even without a newline.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.carry);
        if !rest.is_empty() {
            self.line(&String::from_utf8_lossy(&rest));
        }
    }

    pub fn report(&self) -> &Report {
        &self.report
    }

    fn line(&mut self, line: &str) {
        let line = line.trim();
        let (error, gave_up) = match self.output {
            Output::ClaudeStream => claude(line),
            Output::CodexEvents => codex(line),
            Output::AiderText => (aider(line), None),
            Output::Opaque => (None, None),
        };
        if let Some(e) = error {
            self.report.errors += 1;
            if !e.retryable() && self.report.refused.is_none() {
                self.report.refused = Some(e.clone());
            }
            self.report.last = Some(e);
        }
        if let Some(why) = gave_up {
            self.report.gave_up = Some(bounded(&why));
        }
    }
}

/// Reads a whole output at once.
pub fn read(output: Output, text: &str) -> Report {
    let mut r = Reader::new(output);
    r.feed(text.as_bytes());
    r.finish();
    r.report
}

fn bounded(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

fn status(v: &Value) -> Option<u16> {
    v.as_u64().and_then(|s| u16::try_from(s).ok())
}

/// Claude Code's stream-json: `{"type":"system","subtype":"api_retry",
/// "error_status":401,"error":"authentication_failed",...}` for each failed
/// request it retries, and `{"type":"result","is_error":true,
/// "api_error_status":401,"result":"Invalid API key · ..."}` at the end.
fn claude(line: &str) -> (Option<ModelError>, Option<String>) {
    let Ok(v) = serde_json::from_str::<Value>(line) else { return (None, None) };
    match (v.get("type").and_then(Value::as_str), v.get("subtype").and_then(Value::as_str)) {
        (Some("system"), Some("api_retry")) => {
            let message = v.get("error").and_then(Value::as_str).unwrap_or("the request failed");
            (Some(ModelError { status: v.get("error_status").and_then(status), message: bounded(message) }), None)
        }
        (Some("result"), _) if v.get("is_error").and_then(Value::as_bool) == Some(true) => {
            let said = v.get("result").and_then(Value::as_str).filter(|r| !r.trim().is_empty());
            let said = said.map(str::to_string).unwrap_or_else(|| {
                let subtype = v.get("subtype").and_then(Value::as_str).unwrap_or("error");
                format!("it ended with `{subtype}`")
            });
            let error = v
                .get("api_error_status")
                .and_then(status)
                .map(|s| ModelError { status: Some(s), message: bounded(&said) });
            (error, Some(said))
        }
        _ => (None, None),
    }
}

static CODEX_STATUS: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
    Regex::new(r"(?:unexpected status|last status:) (?P<status>[1-5][0-9]{2})\b")
        .expect("the codex status pattern is valid")
});

/// codex's `exec --json` events: `{"type":"error","message":"Reconnecting...
/// 2/5 (unexpected status 401 Unauthorized: ..., url: http://...)"}` for
/// each failed attempt, `{"type":"turn.failed","error":{"message":...}}`
/// when it gives up. Its first attempts go to a WebSocket and fall back to
/// HTTPS on any answer there: those (`url: ws://`) are no error of the API.
fn codex(line: &str) -> (Option<ModelError>, Option<String>) {
    let Ok(v) = serde_json::from_str::<Value>(line) else { return (None, None) };
    let message = match v.get("type").and_then(Value::as_str) {
        Some("error") => v.get("message").and_then(Value::as_str),
        Some("turn.failed") => v.get("error").and_then(|e| e.get("message")).and_then(Value::as_str),
        _ => None,
    };
    let Some(message) = message else { return (None, None) };
    if message.contains("url: ws://") || message.contains("url: wss://") {
        return (None, None);
    }
    let status = CODEX_STATUS.captures(message).and_then(|c| c["status"].parse().ok());
    let error = Some(ModelError { status, message: bounded(message) });
    let gave_up = (v.get("type").and_then(Value::as_str) == Some("turn.failed")).then(|| message.to_string());
    (error, gave_up)
}

static AIDER_ERROR: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
    Regex::new(r"^litellm\.(?P<kind>[A-Za-z]+Error):").expect("the aider error pattern is valid")
});
static AIDER_CODE: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
    Regex::new(r"(?:Error code|status(?: code)?):? (?P<status>[1-5][0-9]{2})\b")
        .expect("the aider code pattern is valid")
});

/// aider prints litellm's exceptions as they come (`litellm.AuthenticationError:
/// AuthenticationError: OpenAIException - Error code: 401 - {...}`); the
/// status is in the text, else it follows from the exception's name.
fn aider(line: &str) -> Option<ModelError> {
    let caps = AIDER_ERROR.captures(line)?;
    let status = AIDER_CODE.captures(line).and_then(|c| c["status"].parse().ok()).or(match &caps["kind"] {
        "AuthenticationError" => Some(401),
        "PermissionDeniedError" => Some(403),
        "NotFoundError" => Some(404),
        "BadRequestError" | "ContextWindowExceededError" => Some(400),
        "UnprocessableEntityError" => Some(422),
        "RateLimitError" => Some(429),
        "InternalServerError" => Some(500),
        "ServiceUnavailableError" => Some(503),
        _ => None,
    });
    Some(ModelError { status, message: bounded(line) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Claude Code 2.1.328 printed against a model server answering 401.
    #[test]
    fn claudes_rejected_key_is_refused_at_the_first_retry() {
        let mut r = Reader::new(Output::ClaudeStream);
        r.feed(br#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s"}
{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":554,"error_status":401,"error":"authentication_failed","session_id":"s"}
"#);
        let refused = r.report().refused.clone().expect("refused");
        assert_eq!(refused, ModelError { status: Some(401), message: "authentication_failed".into() });
        r.feed(
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"Invalid API key · Fix external API key","total_cost_usd":0}"#
                .as_bytes(),
        );
        r.finish();
        let report = r.report();
        assert_eq!(report.gave_up.as_deref(), Some("Invalid API key · Fix external API key"));
        assert_eq!(report.errors, 2);
        assert_eq!(report.last.as_ref().and_then(|e| e.status), Some(401));
    }

    #[test]
    fn an_overloaded_service_is_retried_not_refused() {
        let r = read(
            Output::ClaudeStream,
            r#"{"type":"system","subtype":"api_retry","attempt":1,"error_status":529,"error":"overloaded_error"}
{"type":"system","subtype":"api_retry","attempt":2,"error_status":429,"error":"rate_limit"}"#,
        );
        assert_eq!(r.refused, None);
        assert_eq!(r.errors, 2);
        assert!(r.last.unwrap().retryable());
    }

    /// What codex 0.163.0 printed: the WebSocket attempts are not the API's
    /// answer; the HTTPS ones are.
    #[test]
    fn codex_errors_are_read_from_its_events_and_its_websocket_fallback_is_not_one() {
        let r = read(
            Output::CodexEvents,
            r#"{"type":"thread.started","thread_id":"t"}
{"type":"error","message":"Reconnecting... 2/5 (unexpected status 404 Not Found: Unknown error, url: ws://127.0.0.1:1/v1/responses)"}
{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:1/v1/responses)"}
{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:1/v1/responses"}}"#,
        );
        assert_eq!(r.refused.as_ref().and_then(|e| e.status), Some(401), "{r:?}");
        assert!(r.refused.unwrap().message.contains("invalid x-api-key"));
        assert_eq!(r.errors, 2);
        assert!(r.gave_up.unwrap().starts_with("unexpected status 401"));
        let r = read(
            Output::CodexEvents,
            r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#,
        );
        assert_eq!((r.refused, r.last.and_then(|e| e.status)), (None, Some(429)));
    }

    #[test]
    fn aiders_litellm_exceptions_name_their_status() {
        let r = read(
            Output::AiderText,
            "Aider v0.86.2\nlitellm.AuthenticationError: AuthenticationError: OpenAIException - Error code: 401 - invalid key\n",
        );
        assert_eq!(r.refused.and_then(|e| e.status), Some(401));
        let r = read(Output::AiderText, "litellm.RateLimitError: RateLimitError: OpenAIException - slow down\n");
        assert_eq!((r.refused, r.last.and_then(|e| e.status)), (None, Some(429)));
    }

    #[test]
    fn an_opaque_output_and_noise_report_nothing() {
        assert_eq!(read(Output::Opaque, r#"{"type":"result","is_error":true}"#), Report::default());
        assert_eq!(read(Output::ClaudeStream, "not json\n{\"type\":\"assistant\"}\n"), Report::default());
        let long = "x".repeat(2000);
        let r = read(Output::CodexEvents, &format!(r#"{{"type":"error","message":"{long}"}}"#));
        assert!(r.last.unwrap().message.chars().count() <= MESSAGE_CHARS + 1);
    }
}
