//! Budgets and cost: what a run spent, read from the agent's own output,
//! and the limits per stage run and per patient that the engine enforces
//! (agent flags do not count).
//!
//! Claude Code's result is built in: `--output-format json` prints one
//! object (or, with `--verbose`, an array whose last element is it),
//! `stream-json` prints one object per line and ends with it:
//!
//! ```json
//! {"type":"result","subtype":"success","is_error":false,"total_cost_usd":0.0123,
//!  "usage":{"input_tokens":12,"output_tokens":345,"cache_creation_input_tokens":0,"cache_read_input_tokens":678}}
//! ```
//!
//! While a stream-json run is going, `assistant` messages carry token
//! usage but no dollars; with `prices` configured the engine estimates the
//! spend so far and can stop a run before it ends. Other agents report
//! through a configured regex with named groups.
//!
//! Everything here is pure, except [`send_to_chief`] (writes the notes and
//! moves the label); `stage::watch` feeds the [`Meter`] while the agent runs.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use regex::Regex;
use serde_json::Value;

use crate::chart::{Note, NoteKind, NoteMeta};
use crate::config::{BudgetConfig, Config, Prices, UsageFormat};

/// What a run spent, as far as its output says.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub cost_usd: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    /// Where the figures came from: `claude-result`, `claude-stream`
    /// (estimated from prices mid-run), `codex-json`, `gemini-json`,
    /// `opencode-json`, `regex`.
    pub source: String,
}

impl Usage {
    /// Adds another step's figures (dollars too, when both have them).
    fn add(&mut self, other: &Usage) {
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
    }

    fn add_tokens(&mut self, usage: &Value) {
        let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        self.input_tokens += get("input_tokens");
        self.output_tokens += get("output_tokens");
        self.cache_creation_input_tokens += get("cache_creation_input_tokens");
        self.cache_read_input_tokens += get("cache_read_input_tokens");
    }

    fn estimate(&self, p: &Prices) -> f64 {
        let m = 1_000_000.0;
        (self.input_tokens as f64 * p.input
            + self.output_tokens as f64 * p.output
            + self.cache_creation_input_tokens as f64 * p.cache_write.unwrap_or(p.input)
            + self.cache_read_input_tokens as f64 * p.cache_read.unwrap_or(p.input / 10.0))
            / m
    }
}

fn from_result(obj: &Value) -> Usage {
    let mut u = Usage {
        cost_usd: obj.get("total_cost_usd").and_then(Value::as_f64),
        source: "claude-result".into(),
        ..Usage::default()
    };
    if let Some(usage) = obj.get("usage") {
        u.add_tokens(usage);
    }
    u
}

fn is_result(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("result")
}

/// Claude Code's output: a result object (possibly pretty-printed), an
/// array holding one, or a stream of lines. Mid-stream, token usage of the
/// assistant messages so far (each message counted once), priced when
/// `prices` is given.
pub fn parse_claude(stdout: &str, prices: Option<&Prices>) -> Option<Usage> {
    if let Ok(v) = serde_json::from_str::<Value>(stdout.trim())
        && let Some(u) = result_in(&v)
    {
        return Some(u);
    }
    let config =
        BudgetConfig { usage: Some(UsageFormat::ClaudeJson), prices: prices.cloned(), ..BudgetConfig::default() };
    let mut meter = Meter::new(&config);
    meter.feed(stdout.as_bytes());
    meter.finish();
    meter.usage()
}

/// The result object in a parsed value: the value itself or the last
/// result in an array.
fn result_in(v: &Value) -> Option<Usage> {
    if is_result(v) {
        return Some(from_result(v));
    }
    v.as_array().and_then(|a| a.iter().rev().find(|m| is_result(m))).map(from_result)
}

/// Reads usage from the agent's output as it grows, line by line, so a
/// long run costs the watcher only its new bytes.
pub struct Meter {
    format: UsageFormat,
    regex: Option<Regex>,
    prices: Option<Prices>,
    /// The last line, until its newline arrives.
    carry: Vec<u8>,
    stream: Usage,
    seen_messages: HashSet<String>,
    any_stream: bool,
    result: Option<Usage>,
    last_match: Option<Usage>,
    /// Codex's and opencode's events, added up.
    events: Option<Usage>,
    /// Gemini's output, read whole at the end (it is one pretty-printed object).
    whole: String,
    /// aider's sentences, added up as they come.
    aider: AiderLines,
}

/// Gemini's output is one object; more than this is not its result.
const GEMINI_OUTPUT_MAX: usize = 8 << 20;

impl Meter {
    pub fn new(budget: &BudgetConfig) -> Self {
        Self {
            format: budget.usage(),
            regex: budget.usage_regex.as_deref().and_then(|r| Regex::new(r).ok()),
            prices: budget.prices.clone(),
            carry: Vec::new(),
            stream: Usage { source: "claude-stream".into(), ..Usage::default() },
            seen_messages: HashSet::new(),
            any_stream: false,
            result: None,
            last_match: None,
            events: None,
            whole: String::new(),
            aider: AiderLines::default(),
        }
    }

    /// New bytes of the output.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.carry.extend_from_slice(bytes);
        while let Some(end) = self.carry.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.carry.drain(..=end).collect();
            self.line(&String::from_utf8_lossy(&line));
        }
    }

    /// The output ended: its last line counts even without a newline.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.carry);
        if !rest.is_empty() {
            self.line(&String::from_utf8_lossy(&rest));
        }
        self.aider.finish();
    }

    fn line(&mut self, line: &str) {
        match self.format {
            UsageFormat::None => {}
            UsageFormat::CodexJson | UsageFormat::OpencodeJson => {
                let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
                let read = if self.format == UsageFormat::CodexJson { codex_turn(&v) } else { opencode_step(&v) };
                if let Some(step) = read {
                    let total =
                        self.events.get_or_insert_with(|| Usage { source: step.source.clone(), ..Usage::default() });
                    total.add(&step);
                }
            }
            UsageFormat::AiderText => self.aider.line(line),
            UsageFormat::GeminiJson => {
                if self.whole.len() + line.len() <= GEMINI_OUTPUT_MAX {
                    self.whole.push_str(line);
                }
            }
            UsageFormat::Regex => {
                if let Some(u) = self.regex.as_ref().and_then(|re| parse_regex(line, re)) {
                    self.last_match = Some(u);
                }
            }
            UsageFormat::ClaudeJson => {
                let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { return };
                if let Some(u) = result_in(&v) {
                    self.result = Some(u);
                    return;
                }
                if v.get("type").and_then(Value::as_str) != Some("assistant") {
                    return;
                }
                let Some(message) = v.get("message") else { return };
                if let Some(id) = message.get("id").and_then(Value::as_str)
                    && !self.seen_messages.insert(id.to_string())
                {
                    return;
                }
                if let Some(usage) = message.get("usage") {
                    self.stream.add_tokens(usage);
                    self.any_stream = true;
                }
            }
        }
    }

    /// What the output says so far: the final result when there is one.
    pub fn usage(&self) -> Option<Usage> {
        let priced = |mut u: Usage| {
            if u.cost_usd.is_none() {
                u.cost_usd = self.prices.as_ref().map(|p| u.estimate(p));
            }
            u
        };
        match self.format {
            UsageFormat::None => None,
            UsageFormat::Regex => self.last_match.clone(),
            UsageFormat::CodexJson | UsageFormat::OpencodeJson => self.events.clone().map(priced),
            UsageFormat::GeminiJson => parse_gemini(&self.whole).map(priced),
            UsageFormat::AiderText => self.aider.usage.clone().map(priced),
            UsageFormat::ClaudeJson => {
                if let Some(r) = &self.result {
                    return Some(r.clone());
                }
                self.any_stream.then(|| {
                    let mut u = self.stream.clone();
                    u.cost_usd = self.prices.as_ref().map(|p| u.estimate(p));
                    u
                })
            }
        }
    }
}

/// aider's usage sentence, once its line breaks are spaces:
/// `Tokens: 2.3k sent, 1.1k cache write, 12k cache hit, 345 received.
/// Cost: $0.0038 message, $0.05 session.` (aider/coders/base_coder.py,
/// `calculate_and_show_tokens_and_cost`; the cost part only when it knows
/// the model's prices). It wraps at its terminal's width, so a sentence
/// may span lines.
static AIDER_USAGE: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
    Regex::new(
        r"Tokens: (?P<sent>[0-9.]+k?) sent(?:, (?P<write>[0-9.]+k?) cache write)?(?:, (?P<hit>[0-9.]+k?) cache hit)?, (?P<received>[0-9.]+k?) received\.(?: Cost: \$(?P<message>[0-9.]+) message, \$(?P<session>[0-9.]+) session\.)?",
    )
    .expect("the aider usage pattern is valid")
});

/// aider's output as it comes: a window of the latest lines, joined by
/// spaces, in which each complete sentence is read once.
#[derive(Default)]
struct AiderLines {
    window: String,
    usage: Option<Usage>,
}

impl AiderLines {
    /// The longest a sentence gets, wrapped over a few lines.
    const WINDOW: usize = 1024;

    fn line(&mut self, line: &str) {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if !self.window.is_empty() {
            self.window.push(' ');
        }
        self.window.push_str(&line);
        self.read(false);
    }

    /// The output ended: a sentence without its cost part counts now.
    fn finish(&mut self) {
        self.read(true);
    }

    fn read(&mut self, ended: bool) {
        let mut read_to = 0;
        for caps in AIDER_USAGE.captures_iter(&self.window) {
            // A cost part may still be on the next line: wait for it while
            // the sentence ends the window.
            let whole = caps.get(0).map_or(0..0, |m| m.range());
            if !ended && caps.name("session").is_none() && whole.end + " Cost:".len() > self.window.len() {
                break;
            }
            read_to = whole.end;
            let tokens = |k: &str| caps.name(k).map_or(0, |m| aider_tokens(m.as_str()));
            let u = self.usage.get_or_insert_with(|| Usage { source: "aider-text".into(), ..Usage::default() });
            u.input_tokens += tokens("sent");
            u.cache_creation_input_tokens += tokens("write");
            u.cache_read_input_tokens += tokens("hit");
            u.output_tokens += tokens("received");
            if let Some(session) = caps.name("session").and_then(|m| m.as_str().parse::<f64>().ok()) {
                u.cost_usd = Some(session);
            }
        }
        self.window.drain(..read_to);
        if self.window.len() > Self::WINDOW {
            let cut = self.window.len() - Self::WINDOW;
            let cut = (cut..self.window.len()).find(|i| self.window.is_char_boundary(*i)).unwrap_or(0);
            self.window.drain(..cut);
        }
    }
}

/// `2.3k`, `12k` or `345`, as aider's `format_tokens` wrote them.
fn aider_tokens(s: &str) -> u64 {
    match s.strip_suffix('k') {
        Some(k) => (k.parse::<f64>().unwrap_or(0.0) * 1000.0).round() as u64,
        None => s.parse().unwrap_or(0),
    }
}

/// One `turn.completed` event of `codex exec --json`: its `input_tokens`
/// count the cached ones too.
fn codex_turn(v: &Value) -> Option<Usage> {
    if v.get("type").and_then(Value::as_str) != Some("turn.completed") {
        return None;
    }
    let usage = v.get("usage")?;
    let get = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cached = get("cached_input_tokens");
    Some(Usage {
        input_tokens: get("input_tokens").saturating_sub(cached),
        cache_read_input_tokens: cached,
        output_tokens: get("output_tokens"),
        source: "codex-json".into(),
        ..Usage::default()
    })
}

/// One `step_finish` event of `opencode run --format json`: the step's
/// tokens (reasoning counts as output) and its dollars.
fn opencode_step(v: &Value) -> Option<Usage> {
    if v.get("type").and_then(Value::as_str) != Some("step_finish") {
        return None;
    }
    let part = v.get("part")?;
    let tokens = part.get("tokens").unwrap_or(&Value::Null);
    let get = |path: &[&str]| path.iter().try_fold(tokens, |at, k| at.get(*k)).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        cost_usd: part.get("cost").and_then(Value::as_f64),
        input_tokens: get(&["input"]),
        output_tokens: get(&["output"]) + get(&["reasoning"]),
        cache_creation_input_tokens: get(&["cache", "write"]),
        cache_read_input_tokens: get(&["cache", "read"]),
        source: "opencode-json".into(),
    })
}

/// Gemini CLI's `--output-format json` object: `stats.models.<model>.tokens`
/// per model (`input` not cached, `cached`, `candidates` and `thoughts` out).
/// It reports no dollars.
pub fn parse_gemini(stdout: &str) -> Option<Usage> {
    let v: Value = serde_json::from_str(stdout.trim()).ok()?;
    let models = v.get("stats")?.get("models")?.as_object()?;
    let mut u = Usage { source: "gemini-json".into(), ..Usage::default() };
    for model in models.values() {
        let Some(t) = model.get("tokens") else { continue };
        let get = |k: &str| t.get(k).and_then(Value::as_u64).unwrap_or(0);
        let cached = get("cached");
        let input = t.get("input").and_then(Value::as_u64).unwrap_or_else(|| get("prompt").saturating_sub(cached));
        u.input_tokens += input;
        u.cache_read_input_tokens += cached;
        u.output_tokens += get("candidates") + get("thoughts");
    }
    Some(u)
}

/// The last match of `re` in `stdout`: groups `cost`, `input_tokens`, `output_tokens`.
pub fn parse_regex(stdout: &str, re: &Regex) -> Option<Usage> {
    let caps = re.captures_iter(stdout).last()?;
    let num = |k: &str| caps.name(k).and_then(|m| m.as_str().replace(',', "").parse::<u64>().ok()).unwrap_or(0);
    Some(Usage {
        cost_usd: caps.name("cost").and_then(|m| m.as_str().replace(',', "").parse().ok()),
        input_tokens: num("input_tokens"),
        output_tokens: num("output_tokens"),
        source: "regex".into(),
        ..Usage::default()
    })
}

/// Usage from the agent's stdout as configured; `None` when it says nothing.
pub fn parse_usage(stdout: &str, budget: &BudgetConfig) -> Option<Usage> {
    match budget.usage() {
        UsageFormat::ClaudeJson => parse_claude(stdout, budget.prices.as_ref()),
        UsageFormat::Regex => {
            let re = Regex::new(budget.usage_regex.as_deref()?).ok()?;
            parse_regex(stdout, &re)
        }
        UsageFormat::None => None,
        UsageFormat::CodexJson | UsageFormat::GeminiJson | UsageFormat::OpencodeJson | UsageFormat::AiderText => {
            let mut meter = Meter::new(budget);
            meter.feed(stdout.as_bytes());
            meter.finish();
            meter.usage()
        }
    }
}

/// A limit that was reached.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Breach {
    pub limit: Limit,
    /// What was measured, in the limit's unit.
    pub actual: f64,
    pub allowed: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    RunWallClock,
    RunDollars,
    PatientDollars,
    PatientStageVisits,
    PatientSendBacks,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, l) = (self.actual, self.allowed);
        match self.limit {
            Limit::RunWallClock => {
                write!(f, "the run took {a:.0}s, over the stage's `time_limit` of {l:.0}s")
            }
            Limit::RunDollars => {
                write!(f, "the run spent ${a:.2}, over the per-run limit of ${l:.2} (`departments.budget.run_usd`)")
            }
            Limit::PatientDollars => write!(
                f,
                "the patient has cost ${a:.2}, over the per-patient limit of ${l:.2} (`departments.budget.patient_usd`)"
            ),
            Limit::PatientStageVisits => write!(
                f,
                "the patient has had {a:.0} stage runs, the per-patient limit is {l:.0} \
                 (`departments.budget.patient_stage_visits`)"
            ),
            Limit::PatientSendBacks => write!(
                f,
                "the patient was sent back {a:.0} times, the per-patient limit is {l:.0} \
                 (`departments.budget.patient_send_backs`)"
            ),
        }
    }
}

/// Checks one run, while it goes or after: wall clock and dollars.
pub fn check_run(
    budget: &BudgetConfig,
    time_limit: Duration,
    elapsed: Duration,
    usage: Option<&Usage>,
) -> Option<Breach> {
    if elapsed >= time_limit {
        return Some(Breach {
            limit: Limit::RunWallClock,
            actual: elapsed.as_secs_f64(),
            allowed: time_limit.as_secs_f64(),
        });
    }
    let spent = usage.and_then(|u| u.cost_usd)?;
    (budget.run_usd > 0.0 && spent >= budget.run_usd).then_some(Breach {
        limit: Limit::RunDollars,
        actual: spent,
        allowed: budget.run_usd,
    })
}

/// What a patient has used so far, from its chart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatientSpend {
    pub dollars: f64,
    /// Stage runs (ADMISSION notes).
    pub stage_visits: u32,
    pub send_backs: u32,
}

/// How the REFUSAL of a run the model service failed begins: such a run
/// is not counted against the patient's stage visits.
pub const SERVICE_DOWN: &str = "The model service failed this run";

pub fn patient_spend(notes: &[Note], send_backs: &HashSet<(String, String)>) -> PatientSpend {
    let mut s = PatientSpend::default();
    let service_down: HashSet<&str> = notes
        .iter()
        .filter(|n| n.kind == NoteKind::Refusal && n.body.starts_with(SERVICE_DOWN))
        .map(|n| n.meta.run.as_str())
        .collect();
    for n in notes {
        match n.kind.as_str() {
            "COST" => s.dollars += parse_cost_note(&n.body).and_then(|u| u.cost_usd).unwrap_or(0.0),
            "ADMISSION" if !service_down.contains(n.meta.run.as_str()) => s.stage_visits += 1,
            "OUTCOME" if send_backs.contains(&(n.meta.stage.clone(), n.body.trim().to_string())) => {
                s.send_backs += 1;
            }
            _ => {}
        }
    }
    s
}

/// Checks a patient's totals; the stage runner calls it before a run
/// starts and again after the run's COST note.
pub fn check_patient(budget: &BudgetConfig, spend: &PatientSpend) -> Option<Breach> {
    let over = |actual: f64, allowed: f64| allowed > 0.0 && actual >= allowed;
    if over(spend.dollars, budget.patient_usd) {
        return Some(Breach { limit: Limit::PatientDollars, actual: spend.dollars, allowed: budget.patient_usd });
    }
    if over(spend.stage_visits as f64, budget.patient_stage_visits as f64) {
        return Some(Breach {
            limit: Limit::PatientStageVisits,
            actual: spend.stage_visits as f64,
            allowed: budget.patient_stage_visits as f64,
        });
    }
    if over(spend.send_backs as f64, budget.patient_send_backs as f64) {
        return Some(Breach {
            limit: Limit::PatientSendBacks,
            actual: spend.send_backs as f64,
            allowed: budget.patient_send_backs as f64,
        });
    }
    None
}

/// The COST note of one run. `None` usage: the agent reported nothing.
pub fn cost_note(usage: Option<&Usage>, stage: &str, run: &str, at: DateTime<Utc>) -> Note {
    let body = match usage {
        Some(u) => format!(
            "cost_usd: {}\ninput_tokens: {}\noutput_tokens: {}\ncache_creation_input_tokens: {}\n\
             cache_read_input_tokens: {}\nsource: {}",
            u.cost_usd.map_or("unknown".to_string(), |c| format!("{c:.6}")),
            u.input_tokens,
            u.output_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens,
            u.source
        ),
        None => "cost_usd: unknown\nsource: none (the agent's output reported no usage)".into(),
    };
    Note { kind: NoteKind::Cost, meta: NoteMeta::engine(run, stage, at), body }
}

/// The COST note's line naming the agent's session log kept with the run.
pub const TRANSCRIPT_LINE: &str = "transcript: ";

/// Reads a COST note back.
pub fn parse_cost_note(body: &str) -> Option<Usage> {
    let mut u = Usage::default();
    let mut any = false;
    for line in body.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let v = v.trim();
        let n = || v.parse::<u64>().unwrap_or(0);
        match k.trim() {
            "cost_usd" => {
                u.cost_usd = v.parse().ok();
                any = true;
            }
            "input_tokens" => u.input_tokens = n(),
            "output_tokens" => u.output_tokens = n(),
            "cache_creation_input_tokens" => u.cache_creation_input_tokens = n(),
            "cache_read_input_tokens" => u.cache_read_input_tokens = n(),
            "source" => u.source = v.to_string(),
            _ => {}
        }
    }
    any.then_some(u)
}

/// When a budget limit stopped a patient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The patient's limits were reached before the agent started.
    BeforeStart,
    /// The engine stopped the agent mid-run.
    DuringRun,
    /// The run ended over its limit.
    AfterRun,
}

/// A limit was reached: the notes that say so, the run's COST first so the
/// spend is never lost, then an ESCALATION saying why the patient goes to
/// the chiefs ([`Config::chief_label`]).
pub fn over_budget_notes(
    config: &Config,
    stage: &str,
    run: &str,
    breach: &Breach,
    usage: Option<&Usage>,
    when: Stopped,
    now: DateTime<Utc>,
) -> Vec<Note> {
    let chief = config.chief_label();
    let what = match when {
        Stopped::BeforeStart => "The stage did not start",
        Stopped::DuringRun => "The engine stopped the agent",
        Stopped::AfterRun => "The run ended over the limit",
    };
    let escalation = Note {
        kind: NoteKind::Escalation,
        meta: NoteMeta::engine(run, stage, now),
        body: format!(
            "Budget reached in stage `{stage}`: {breach}. {what} and moved the patient to `{chief}`.\n\n\
             What to do: decide whether this patient is worth more; raise the limit in \
             `.github/ward.yml` (`departments.budget`) or split the work, then {}.",
            config.readmit_hint()
        ),
    };
    let mut notes = Vec::new();
    if when != Stopped::BeforeStart || usage.is_some() {
        notes.push(cost_note(usage, stage, run, now));
    }
    notes.push(escalation);
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1234,"num_turns":3,"result":"done","session_id":"abc","total_cost_usd":0.4321,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":400,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"}}"#;

    #[test]
    fn claude_json_result_is_read() {
        let u = parse_claude(RESULT, None).unwrap();
        assert_eq!(u.cost_usd, Some(0.4321));
        assert_eq!((u.input_tokens, u.output_tokens, u.cache_read_input_tokens), (10, 400, 3000));
        let verbose = format!(r#"[{{"type":"system","subtype":"init"}},{RESULT}]"#);
        assert_eq!(parse_claude(&verbose, None).unwrap().cost_usd, Some(0.4321));
    }

    #[test]
    fn stream_json_counts_each_message_once_and_prices_it() {
        let a = r#"{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":1000000,"output_tokens":0}}}"#;
        let b = r#"{"type":"assistant","message":{"id":"m2","usage":{"input_tokens":0,"output_tokens":1000000}}}"#;
        let text = format!("{a}\n{a}\n{b}\nnot json\n");
        let prices = Prices { input: 3.0, output: 15.0, cache_write: None, cache_read: None };
        let u = parse_claude(&text, Some(&prices)).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (1_000_000, 1_000_000));
        assert_eq!(u.cost_usd, Some(18.0));
        assert_eq!(parse_claude(&text, None).unwrap().cost_usd, None);
        let done = format!("{text}{RESULT}\n");
        assert_eq!(parse_claude(&done, Some(&prices)).unwrap().cost_usd, Some(0.4321), "the result wins");
        assert_eq!(parse_claude("plain text output", None), None);
    }

    #[test]
    fn the_meter_reads_a_growing_output_in_pieces() {
        let budget = BudgetConfig {
            prices: Some(Prices { input: 3.0, output: 15.0, cache_write: None, cache_read: None }),
            ..BudgetConfig::default()
        };
        let line = r#"{"type":"assistant","message":{"id":"m1","usage":{"output_tokens":100000}}}"#;
        let mut meter = Meter::new(&budget);
        let (a, b) = line.split_at(30);
        meter.feed(a.as_bytes());
        assert_eq!(meter.usage(), None, "half a line is not read");
        meter.feed(format!("{b}\n").as_bytes());
        assert_eq!(meter.usage().unwrap().cost_usd, Some(1.5));
        meter.feed(format!("{line}\n{RESULT}").as_bytes());
        assert_eq!(meter.usage().unwrap().cost_usd, Some(1.5), "the same message counts once; no newline yet");
        meter.finish();
        assert_eq!(meter.usage().unwrap().cost_usd, Some(0.4321));
    }

    /// What aider 0.86.2 printed through ward (tests/fixtures/agents/aider-output.txt
    /// has the story): its sentence wrapped at 80 columns, a message without
    /// prices, then two messages whose session total is the run's.
    #[test]
    fn aider_text_is_read_across_its_line_breaks() {
        let out = "Applied edit to greet.sh\nTokens: 2.3k sent, 345 received. Cost: $0.0038 message, $0.0038 \nsession.\n\
                   Tokens: 12k sent, 1.1k cache write, 9.5k cache hit, 100 received.\n\
                   Tokens: 900 sent, 40 received. Cost: $0.01 message, $0.05 session.\n";
        let budget = BudgetConfig { usage: Some(UsageFormat::AiderText), ..BudgetConfig::default() };
        let u = parse_usage(out, &budget).unwrap();
        assert_eq!(u.cost_usd, Some(0.05), "the session's dollars: {u:?}");
        assert_eq!((u.input_tokens, u.output_tokens), (2300 + 12_000 + 900, 345 + 100 + 40), "{u:?}");
        assert_eq!((u.cache_creation_input_tokens, u.cache_read_input_tokens), (1100, 9500), "{u:?}");
        // A sentence with no cost part at the very end still counts.
        let u = parse_usage("Tokens: 900 sent, 40 received.", &budget).unwrap();
        assert_eq!((u.cost_usd, u.input_tokens, u.output_tokens), (None, 900, 40));
        // Fed a byte at a time, the same figures.
        let mut meter = Meter::new(&budget);
        for b in out.as_bytes() {
            meter.feed(std::slice::from_ref(b));
        }
        meter.finish();
        assert_eq!(meter.usage().unwrap().cost_usd, Some(0.05));
    }

    #[test]
    fn a_regex_reads_other_agents() {
        let re = Regex::new(r"Total cost: \$(?P<cost>[0-9.]+), tokens in (?P<input_tokens>[0-9,]+)").unwrap();
        let u = parse_regex("Total cost: $0.10, tokens in 5\nTotal cost: $1.25, tokens in 1,200\n", &re).unwrap();
        assert_eq!((u.cost_usd, u.input_tokens), (Some(1.25), 1200));
    }

    #[test]
    fn cost_notes_round_trip() {
        let u = parse_claude(RESULT, None).unwrap();
        let note = cost_note(Some(&u), "treat", "r1", Utc::now());
        assert_eq!(parse_cost_note(&note.body).unwrap(), u);
        let none = cost_note(None, "treat", "r1", Utc::now());
        assert_eq!(parse_cost_note(&none.body).unwrap().cost_usd, None);
    }

    #[test]
    fn limits_trip_at_the_line_and_zero_turns_them_off() {
        let b = BudgetConfig::default();
        let spent = Usage { cost_usd: Some(10.0), ..Usage::default() };
        let hour = Duration::from_secs(3600);
        assert_eq!(check_run(&b, hour, Duration::ZERO, Some(&spent)).unwrap().limit, Limit::RunDollars);
        assert_eq!(check_run(&b, hour, hour, None).unwrap().limit, Limit::RunWallClock);
        let off = BudgetConfig { run_usd: 0.0, ..BudgetConfig::default() };
        assert_eq!(check_run(&off, hour, Duration::ZERO, Some(&spent)), None);
        let spend = PatientSpend { dollars: 20.0, stage_visits: 40, send_backs: 0 };
        assert_eq!(check_patient(&b, &spend).unwrap().limit, Limit::PatientStageVisits);
    }
}
