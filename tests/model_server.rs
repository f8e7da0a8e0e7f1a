//! The scripted model server (tests/support/model/) against the real agent
//! CLIs: Claude Code 2.1.328, codex 0.163.0 and aider 0.86.2, each in a
//! temporary git repository with a private HOME and nothing else of this
//! machine's environment. A test whose CLI is missing is skipped with a
//! notice, and fails when `WARD_REQUIRE_REAL_AGENTS=1`.
//!
//! The server's own contract (faults, scene choice, the log) is tested
//! first, over a plain socket.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::model::clis::real_cli;
use support::model::{Fault, ModelServer, Scene, Script, Served, Turn, Usage};
use support::workspace::TestRepo;

/// Longer than any of these runs takes; reaching it fails the test.
const LIMIT: Duration = Duration::from_secs(120);

// ---- the server's own contract, over a plain socket ----

/// Sends one HTTP/1.1 request and reads until the server closes or
/// `wait` passes; returns what arrived.
fn exchange(base: &str, method: &str, path: &str, body: &Value, wait: Duration) -> String {
    let addr = base.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let mut stream = TcpStream::connect(&addr).expect("the server accepts");
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn claude_like(prompt: &str, session: &str) -> Value {
    json!({
        "model": "claude-test", "stream": false, "tools": [{"name": "Bash"}, {"name": "Write"}, {"name": "Edit"}],
        "system": [{"type": "text", "text": format!("x\n - Primary working directory: /work/{session}\n")}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
    })
}

fn body_of(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {response}"))
}

#[tokio::test]
async fn scenes_are_taken_once_in_order_and_cursors_live_on_the_server() {
    let usage = Usage { input: 7, output: 3, cache_read: 2, cache_creation: 1 };
    let server = ModelServer::start(Script::new(vec![
        Scene::new("fix", vec![Turn::shell("true"), Turn::write("a.txt", "A\n")]).with_usage(usage),
        Scene::new("fix", vec![Turn::text("second scene")]),
    ]))
    .await;
    let base = server.anthropic_base_url();
    let post = |body: &Value| body_of(&exchange(&base, "POST", "/v1/messages", body, LIMIT));
    // Without a session header a conversation is its prompt; with one, the header.
    let first = post(&claude_like("please fix it", "one"));
    assert_eq!(first["content"][0]["name"], "Bash", "{first}");
    assert_eq!(first["usage"]["input_tokens"], 7);
    assert_eq!(first["usage"]["cache_read_input_tokens"], 2);
    let again = post(&claude_like("please fix it", "one"));
    assert_eq!(again["content"][0]["input"], json!({"file_path": "/work/one/a.txt", "content": "A\n"}), "{again}");
    let done = post(&claude_like("please fix it", "one"));
    assert_eq!(done["content"][0]["text"], "Done.");
    let other = post(&claude_like("fix that too", "two"));
    assert_eq!(other["content"][0]["text"], "second scene");
    let stray = post(&claude_like("fix a third", "three"));
    assert_eq!(stray["content"][0]["text"], "no scene matches");
    let side = post(&json!({"model": "m", "messages": [{"role": "user", "content": "a title please"}]}));
    assert_eq!(side["content"][0]["type"], "text");

    let served: Vec<Served> = server.requests().into_iter().map(|r| r.served).collect();
    assert_eq!(
        served,
        [
            Served::Turn { scene: 0, turn: 0 },
            Served::Turn { scene: 0, turn: 1 },
            Served::Done { scene: 0 },
            Served::Turn { scene: 1, turn: 0 },
            Served::Unmatched,
            Served::Side,
        ]
    );
    assert_eq!(server.unmatched().len(), 1);
    let counted = body_of(&exchange(&base, "POST", "/v1/messages/count_tokens", &claude_like("fix", "one"), LIMIT));
    assert!(counted["input_tokens"].as_u64().is_some_and(|n| n > 0), "{counted}");
    assert_eq!(server.requests().last().unwrap().served, Served::CountTokens);

    // A new script starts afresh: the first scene is free again.
    server.set_script(Script::new(vec![Scene::new("fix", vec![Turn::text("fresh")])]));
    assert_eq!(post(&claude_like("please fix it", "one"))["content"][0]["text"], "fresh");
}

#[tokio::test]
async fn faults_come_in_each_apis_own_shape() {
    let server = ModelServer::start(Script::new(vec![
        Scene::new("limit", vec![Turn::Fault(Fault::retry_after(429, "slow down", 7)), Turn::text("after")]),
        Scene::new("hang", vec![Turn::Fault(Fault::Hang)]),
        Scene::new("garbage", vec![Turn::Fault(Fault::Garbage)]),
    ]))
    .await;
    let base = server.anthropic_base_url();
    let limited = exchange(&base, "POST", "/v1/messages", &claude_like("limit", "a"), LIMIT);
    assert!(limited.starts_with("HTTP/1.1 429"), "{limited}");
    assert!(limited.to_lowercase().contains("retry-after: 7\r\n"), "{limited}");
    assert_eq!(body_of(&limited)["error"], json!({"type": "rate_limit_error", "message": "slow down"}));
    // The fault consumed its step.
    assert_eq!(
        body_of(&exchange(&base, "POST", "/v1/messages", &claude_like("limit", "a"), LIMIT))["content"][0]["text"],
        "after"
    );

    let hung = exchange(&base, "POST", "/v1/messages", &claude_like("hang", "b"), Duration::from_millis(500));
    assert!(hung.starts_with("HTTP/1.1 200"), "a hang still sends its headers: {hung}");
    let (_, body) = hung.split_once("\r\n\r\n").expect("the headers end");
    assert_eq!(body, "", "and then nothing");

    let garbage = exchange(&base, "POST", "/v1/messages", &claude_like("garbage", "c"), LIMIT);
    assert!(garbage.starts_with("HTTP/1.1 200"), "{garbage}");
    let body = garbage.split_once("\r\n\r\n").unwrap().1;
    assert!(serde_json::from_str::<Value>(body).is_err(), "garbage is not JSON: {body}");

    // OpenAI's shape on its routes, and `always` before any scene.
    server.set_script(Script::always(Fault::status(401, "Incorrect API key provided")));
    let rejected = exchange(&server.openai_base_url(), "POST", "/v1/chat/completions", &json!({"messages": []}), LIMIT);
    assert!(rejected.starts_with("HTTP/1.1 401"), "{rejected}");
    assert_eq!(body_of(&rejected)["error"]["code"], "invalid_api_key");
    assert_eq!(server.requests().last().unwrap().served, Served::Always);
}

#[tokio::test]
async fn streams_end_as_each_api_ends_them() {
    let usage = Usage { input: 10, output: 4, cache_read: 6, cache_creation: 0 };
    let server = ModelServer::start(Script::new(vec![
        Scene::new("chat", vec![Turn::edit("a.txt", "old", "new"), Turn::text("Edited.")]).with_usage(usage),
        Scene::new("responses", vec![Turn::text("Answered.")]).with_usage(usage),
    ]))
    .await;
    let system = json!({"role": "system", "content": "Reply with *SEARCH/REPLACE block* edits."});
    let chat = json!({"model": "m", "stream": true, "messages": [system, {"role": "user", "content": "chat"}]});
    let streamed = exchange(&server.openai_base_url(), "POST", "/v1/chat/completions", &chat, LIMIT);
    let chunks: Vec<&str> = streamed.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(chunks.last(), Some(&"[DONE]"), "{streamed}");
    let first: Value = serde_json::from_str(chunks[0]).unwrap();
    assert_eq!(
        first["choices"][0]["delta"]["content"],
        "a.txt\n```\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\n\nEdited."
    );
    let last: Value = serde_json::from_str(chunks[chunks.len() - 2]).unwrap();
    assert_eq!(last["usage"]["prompt_tokens"], 16, "cached tokens count in the prompt: {last}");
    assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], 6);

    let input = json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "responses"}]}]);
    let plain = body_of(&exchange(
        &server.openai_base_url(),
        "POST",
        "/v1/responses",
        &json!({"model": "m", "input": input}),
        LIMIT,
    ));
    assert_eq!(plain["status"], "completed", "{plain}");
    assert_eq!(plain["output"][0]["content"][0]["text"], "Answered.");
    assert_eq!(plain["usage"]["input_tokens_details"]["cached_tokens"], 6);
}

#[tokio::test]
#[should_panic(expected = "aider has no shell tool")]
async fn a_turn_the_cli_cannot_play_fails_the_test() {
    let server = ModelServer::start(Script::new(vec![Scene::new("go", vec![Turn::shell("make")])])).await;
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]});
    let answer = exchange(&server.openai_base_url(), "POST", "/v1/chat/completions", &chat, LIMIT);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    drop(server);
}

// ---- the real CLIs ----

/// A git repository with `files`, a private HOME and TMPDIR.
struct Workdir {
    repo: TestRepo,
    home: PathBuf,
    tmp: PathBuf,
}

impl Workdir {
    fn new(files: &[(&str, &str)]) -> Self {
        let repo = TestRepo::new(files);
        let home = repo.tmp.path().join("agent-home");
        let tmp = repo.tmp.path().join("agent-tmp");
        for d in [&home, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        Self { repo, home, tmp }
    }

    fn path(&self) -> &Path {
        &self.repo.path
    }

    /// Asserts file `name` holds `content` after the CLI's run `out`.
    fn expect(&self, name: &str, content: &str, out: &Output) {
        let got =
            std::fs::read_to_string(self.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}\n{}", show(out)));
        assert_eq!(got, content, "{name}\n{}", show(out));
    }

    /// `cli` in the repository with only HOME, TMPDIR and PATH (the
    /// system's and the CLI's own folder) from outside.
    fn command(&self, cli: &Path) -> Command {
        let mut cmd = Command::new(cli);
        let dir = cli.parent().unwrap().display().to_string();
        cmd.current_dir(self.path())
            .env_clear()
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .env("PATH", format!("/usr/bin:/bin:{dir}"));
        cmd
    }
}

fn spawn(mut cmd: Command, stdin: &str) -> Child {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} starts: {e}"));
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child
}

/// Runs `cmd` to its end, which must come within [`LIMIT`].
fn finish(cmd: Command, stdin: &str) -> (Output, Duration) {
    let started = Instant::now();
    let child = spawn(cmd, stdin);
    let (tx, rx) = mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(LIMIT) {
        Ok(out) => (out.expect("the CLI's output"), started.elapsed()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the CLI did not end within {LIMIT:?}");
        }
    }
}

/// Reads `cmd`'s stdout line by line until `wanted` matches one (within
/// [`LIMIT`]), then kills it; returns the lines so far.
fn until_line(cmd: Command, stdin: &str, wanted: impl Fn(&Value) -> bool) -> (Vec<Value>, Duration) {
    let started = Instant::now();
    let mut child = spawn(cmd, stdin);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let found = loop {
        let left = LIMIT.saturating_sub(started.elapsed());
        let Ok(line) = rx.recv_timeout(left) else { break false };
        let event: Value = serde_json::from_str(&line).unwrap_or(Value::String(line));
        let hit = wanted(&event);
        lines.push(event);
        if hit {
            break true;
        }
    };
    let elapsed = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(found, "no wanted line within {LIMIT:?}; stdout was:\n{lines:#?}");
    (lines, elapsed)
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn show(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The scene Claude Code and codex play: a shell command, a new file, a
/// file overwritten, an edit, a text.
fn fix_scene(usage: Usage) -> Scene {
    let turns = vec![
        Turn::shell("echo ran > shell.txt"),
        Turn::write("notes/new.txt", "written by the model\n"),
        Turn::write("README.md", "Rewritten by the model.\n"),
        Turn::edit("greeting.txt", "hello", "hello, world"),
        Turn::text("Fixed the greeting."),
    ];
    Scene::new("Fix the greeting", turns).with_usage(usage)
}

/// The files after [`fix_scene`].
fn assert_fixed(dir: &Workdir, out: &Output) {
    dir.expect("shell.txt", "ran\n", out);
    dir.expect("notes/new.txt", "written by the model\n", out);
    dir.expect("README.md", "Rewritten by the model.\n", out);
    dir.expect("greeting.txt", "hello, world\n", out);
}

const FILES: &[(&str, &str)] = &[("greeting.txt", "hello\n"), ("README.md", "A test repository.\n")];

/// The scene's turns were served in order, one request each.
fn assert_played(server: &ModelServer, turns: usize) {
    let served: Vec<Served> =
        server.requests().into_iter().map(|r| r.served).filter(|s| matches!(s, Served::Turn { .. })).collect();
    let wanted: Vec<Served> = (0..turns).map(|turn| Served::Turn { scene: 0, turn }).collect();
    assert_eq!(
        served,
        wanted,
        "{:#?}",
        server.requests().iter().map(|r| (&r.path, &r.served, r.status)).collect::<Vec<_>>()
    );
    assert!(server.unmatched().is_empty());
}

fn claude_command(claude: &Path, dir: &Workdir, server: &ModelServer) -> Command {
    let mut cmd = dir.command(claude);
    cmd.args(["-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"])
        .env("IS_SANDBOX", "1")
        .env("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    cmd
}

#[tokio::test]
async fn claude_code_runs_a_command_writes_edits_and_reports_the_servers_tokens() {
    let Some(claude) = real_cli("claude") else { return };
    let usage = Usage { input: 1000, output: 50, cache_read: 300, cache_creation: 200 };
    let server = ModelServer::start(Script::new(vec![fix_scene(usage)])).await;
    let dir = Workdir::new(FILES);
    let (out, took) = finish(claude_command(&claude, &dir, &server), "Fix the greeting in greeting.txt.\n");
    eprintln!("claude -p took {took:?}");
    assert!(out.status.success(), "{}", show(&out));

    assert_played(&server, 5);
    assert_fixed(&dir, &out);

    let events = json_lines(&out);
    let result =
        events.iter().find(|e| e["type"] == "result").unwrap_or_else(|| panic!("no result line: {}", show(&out)));
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], "Fixed the greeting.");
    assert_eq!(result["num_turns"], 5, "{result}");
    let responses = 5;
    assert_eq!(result["usage"]["input_tokens"], responses * usage.input, "{result}");
    assert_eq!(result["usage"]["output_tokens"], responses * usage.output, "{result}");
    assert_eq!(result["usage"]["cache_read_input_tokens"], responses * usage.cache_read, "{result}");
    assert_eq!(result["usage"]["cache_creation_input_tokens"], responses * usage.cache_creation, "{result}");

    let asked: Vec<_> = server.requests().into_iter().filter(|r| r.route() == "/v1/messages").collect();
    for r in &asked {
        assert_eq!(r.header("x-api-key"), Some("sk-ant-test-key"));
        assert_eq!(r.body["stream"], true);
    }
    let tools: Vec<&str> =
        asked[0].body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for tool in ["Bash", "Write", "Edit"] {
        assert!(tools.contains(&tool), "{tools:?}");
    }
}

#[tokio::test]
async fn claude_code_retries_a_rejected_key() {
    let Some(claude) = real_cli("claude") else { return };
    let server = ModelServer::start(Script::always(Fault::status(401, "invalid x-api-key"))).await;
    let dir = Workdir::new(FILES);
    let (lines, took) = until_line(claude_command(&claude, &dir, &server), "Fix the greeting.\n", |e| {
        e["type"] == "system" && e["subtype"] == "api_retry"
    });
    eprintln!("claude's first api_retry after {took:?}");
    let retry = lines.last().unwrap();
    assert_eq!(retry["error_status"], 401, "{retry}");
    assert_eq!(retry["error"], "authentication_failed", "{retry}");
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.served == Served::Always && r.status == 401), "{requests:#?}");
}

fn codex_command(codex: &Path, dir: &Workdir, server: &ModelServer, extra: &[&str]) -> Command {
    let mut cmd = dir.command(codex);
    cmd.args(["exec", "--json", "--sandbox", "workspace-write", "-c"])
        .arg(format!("openai_base_url=\"{}\"", server.openai_base_url()))
        .args(extra)
        .arg("-")
        .env("CODEX_API_KEY", "sk-codex-test-key");
    cmd
}

async fn codex_fixes_the_greeting(codex: &Path, extra: &[&str]) -> (ModelServer, Workdir, Vec<Value>) {
    let usage = Usage { input: 1200, output: 60, cache_read: 200, cache_creation: 0 };
    let server = ModelServer::start(Script::new(vec![fix_scene(usage)])).await;
    let dir = Workdir::new(FILES);
    let (out, took) = finish(codex_command(codex, &dir, &server, extra), "Fix the greeting in greeting.txt.\n");
    eprintln!("codex exec {extra:?} took {took:?}");
    assert!(out.status.success(), "{}", show(&out));
    assert_played(&server, 5);
    assert_fixed(&dir, &out);
    let events = json_lines(&out);
    let done = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap_or_else(|| panic!("no turn.completed: {}", show(&out)));
    let responses = 5;
    assert_eq!(done["usage"]["input_tokens"], responses * usage.openai_input(), "{done}");
    assert_eq!(done["usage"]["cached_input_tokens"], responses * usage.cache_read, "{done}");
    assert_eq!(done["usage"]["output_tokens"], responses * usage.output, "{done}");
    let last = events.iter().rev().find(|e| e["item"]["type"] == "agent_message").expect("an agent message");
    assert_eq!(last["item"]["text"], "Fixed the greeting.");
    for r in server.requests().iter().filter(|r| r.method == "POST") {
        assert_eq!(r.header("authorization"), Some("Bearer sk-codex-test-key"));
    }
    (server, dir, events)
}

#[tokio::test]
async fn codex_in_code_mode_runs_exec_command_and_apply_patch() {
    let Some(codex) = real_cli("codex") else { return };
    let (server, _dir, events) = codex_fixes_the_greeting(&codex, &[]).await;
    // The default model runs in code mode: one custom tool, `exec`.
    let first = server.requests().into_iter().find(|r| r.method == "POST").unwrap();
    let extra = first.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "additional_tools")
        .expect("additional tools");
    assert!(
        extra.to_string().contains(r#""name":"exec","type":"custom""#)
            || extra.to_string().contains(r#""type":"custom","name":"exec""#)
    );
    let kinds: Vec<&str> =
        events.iter().filter(|e| e["type"] == "item.completed").filter_map(|e| e["item"]["type"].as_str()).collect();
    assert!(kinds.contains(&"command_execution") && kinds.contains(&"file_change"), "{kinds:?}");
}

#[tokio::test]
async fn codex_with_plain_function_tools_runs_exec_command_and_its_patch_command() {
    let Some(codex) = real_cli("codex") else { return };
    let (server, _dir, _events) = codex_fixes_the_greeting(&codex, &["-m", "test-model"]).await;
    let first = server.requests().into_iter().find(|r| r.method == "POST").unwrap();
    let tools: Vec<&str> = first.body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(tools.contains(&"exec_command") && !tools.contains(&"exec"), "{tools:?}");
}

#[tokio::test]
async fn codex_reports_a_rejected_key_as_a_failed_turn() {
    let Some(codex) = real_cli("codex") else { return };
    let server = ModelServer::start(Script::always(Fault::status(401, "invalid x-api-key"))).await;
    let dir = Workdir::new(FILES);
    let (out, took) = finish(codex_command(&codex, &dir, &server, &[]), "Fix the greeting.\n");
    eprintln!("codex with a rejected key took {took:?}");
    assert!(!out.status.success(), "{}", show(&out));
    let events = json_lines(&out);
    let failed =
        events.iter().find(|e| e["type"] == "turn.failed").unwrap_or_else(|| panic!("no turn.failed: {}", show(&out)));
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("401") && message.contains("invalid x-api-key"), "{failed}");
}

fn aider_command(aider: &Path, dir: &Workdir, server: &ModelServer, message: &Path) -> Command {
    let mut cmd = dir.command(aider);
    // aider's model list does not know the name, so it would use its
    // `whole` edit format; the metadata spares it fetching litellm's price
    // table from GitHub to learn the same.
    let metadata = json!({"openai/test-model": {
        "max_input_tokens": 128000, "max_output_tokens": 4096, "litellm_provider": "openai", "mode": "chat",
        "input_cost_per_token": 0.000003, "output_cost_per_token": 0.000015,
    }});
    std::fs::write(dir.home.join(".aider.model.metadata.json"), metadata.to_string()).unwrap();
    cmd.args(["--model", "openai/test-model", "--edit-format", "diff", "--message-file"])
        .arg(message)
        .args([
            "--yes-always",
            "--no-auto-commits",
            "--no-gitignore",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
        ])
        .env("OPENAI_API_BASE", server.openai_base_url())
        .env("OPENAI_API_KEY", "sk-aider-test-key")
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    cmd
}

#[tokio::test]
async fn aider_applies_the_scenes_edits_as_search_replace_blocks() {
    let Some(aider) = real_cli("aider") else { return };
    let usage = Usage { input: 900, output: 40, cache_read: 0, cache_creation: 0 };
    // No shell turn (aider has no shell tool), and a write to a new file
    // only (aider appends to a file that exists).
    let turns = vec![
        Turn::write("notes/new.txt", "written by the model\n"),
        Turn::edit("greeting.txt", "hello", "hello, world"),
        Turn::text("Fixed the greeting."),
    ];
    let scene = Scene::new("Fix the greeting", turns).with_usage(usage);
    let server = ModelServer::start(Script::new(vec![scene])).await;
    let dir = Workdir::new(FILES);
    let message = dir.tmp.join("message.md");
    std::fs::write(&message, "Fix the greeting in greeting.txt.\n").unwrap();
    let (out, took) = finish(aider_command(&aider, &dir, &server, &message), "");
    eprintln!("aider took {took:?}");
    assert!(out.status.success(), "{}", show(&out));
    dir.expect("notes/new.txt", "written by the model\n", &out);
    dir.expect("greeting.txt", "hello, world\n", &out);
    // One reply played the write, the edit and the text.
    let served: Vec<Served> = server.requests().into_iter().map(|r| r.served).collect();
    assert_eq!(served, [Served::Turn { scene: 0, turn: 0 }], "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 900 × $3/M + 40 × $15/M = $0.0033.
    assert!(stdout.contains("Tokens: 900 sent, 40 received. Cost: $0.0033 message"), "{stdout}");
    let request = &server.requests()[0];
    assert_eq!(request.header("authorization"), Some("Bearer sk-aider-test-key"));
    assert_eq!(request.body["model"], "test-model");
}
