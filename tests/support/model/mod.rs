//! A scripted model service on 127.0.0.1 (a random port) that the real
//! agent CLIs talk to, each in its own API:
//!
//! - **Anthropic Messages** (anthropic.rs), for Claude Code:
//!   `POST /v1/messages` (server-sent events when `stream`, else JSON) and
//!   `POST /v1/messages/count_tokens`. Point `ANTHROPIC_BASE_URL` at
//!   [`ModelServer::anthropic_base_url`].
//! - **OpenAI Responses** (responses.rs), for codex: `POST /v1/responses`.
//!   Point `openai_base_url` (codex's config, or `-c`) at
//!   [`ModelServer::openai_base_url`]. codex's WebSocket attempt (`GET`)
//!   is answered 426, on which codex falls back to HTTP at once; a 404
//!   costs it five reconnects (about 7 s).
//! - **OpenAI chat completions** (chat.rs), for aider through litellm:
//!   `POST /v1/chat/completions`, with `OPENAI_API_BASE` at
//!   [`ModelServer::openai_base_url`] and `--model openai/<any name>`.
//!
//! What the model does is a [`Script`] (script.rs): scenes of turns (run a
//! shell command, write or edit a file with the CLI's own tools, end with a
//! text, fail), the tokens each response reports, and faults on demand.
//! Every request is logged with what it was answered ([`Logged`]), so a
//! test can assert what the CLI sent.
//!
//! The server runs on a thread and a runtime of its own, so a test may
//! block on the CLI (`std::process::Command::output`) from any runtime.
//! A script error (a turn the CLI cannot play, as a shell command for
//! aider) is answered 400 and FAILS the test when the server is dropped.

mod anthropic;
mod chat;
pub mod clis;
mod responses;
mod script;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use script::Book;
#[allow(unused_imports)]
pub use script::{Fault, Scene, Script, Turn, Usage};

/// One request as the server saw it, and what it answered.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: String,
    /// The path with its query (`/v1/messages?beta=true`).
    pub path: String,
    /// Header names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; a string when it is not JSON, null when empty.
    pub body: Value,
    pub served: Served,
    /// The status sent.
    pub status: u16,
}

impl Logged {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The path without its query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

/// What a request was answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// Scene `scene`'s turn `turn` (for aider, the first of the turns one
    /// reply plays).
    Turn { scene: usize, turn: usize },
    /// Past the scene's last turn: "Done.".
    Done { scene: usize },
    /// A request offering no tools (Claude Code's titles and the like): a
    /// short text, no scene step, no tokens.
    Side,
    /// `count_tokens`.
    CountTokens,
    /// No scene matches: the text "no scene matches", no tokens.
    Unmatched,
    /// [`Script::always`]'s fault.
    Always,
    /// codex's WebSocket attempt (`GET /v1/responses`): 426, after which
    /// codex uses HTTP at once (a 404 costs five reconnects, about 7 s).
    NoWebSocket,
    /// A route this server does not know: 404.
    NotFound,
    /// The script asked for something the CLI cannot do: 400 with this
    /// message, and the test fails when the server is dropped.
    ScriptError(String),
}

/// A request, parsed.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }

    fn streams(&self) -> bool {
        self.body["stream"].as_bool() == Some(true)
    }
}

/// What an API module makes of a request.
struct Answer {
    served: Served,
    reply: Reply,
}

enum Reply {
    /// 200, `application/json`.
    Json(Value),
    /// 200, `text/event-stream`.
    Events(String),
    Fault(Fault),
    /// A status with the API's own error body.
    Error(u16, String),
}

impl Answer {
    fn script_error(message: String) -> Self {
        Answer { served: Served::ScriptError(message.clone()), reply: Reply::Error(400, message) }
    }
}

/// The APIs, for their error bodies.
#[derive(Clone, Copy)]
enum Api {
    Anthropic,
    OpenAi,
}

/// The script's state and the ids handed out.
struct Desk {
    book: Book,
    ids: u64,
}

impl Desk {
    /// A fresh number, for ids.
    fn next(&mut self) -> u64 {
        self.ids += 1;
        self.ids
    }

    /// A fresh id such as `toolu_7`.
    fn id(&mut self, prefix: &str) -> String {
        format!("{prefix}_{}", self.next())
    }
}

struct Shared {
    desk: Desk,
    log: Vec<Logged>,
}

pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ModelServer {
    /// Binds 127.0.0.1:0 and serves `script`.
    pub async fn start(script: Script) -> ModelServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Mutex::new(Shared { desk: Desk { book: Book::new(script), ids: 0 }, log: Vec::new() }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("model-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                // Dropping the runtime when stopped ends every connection,
                // hung ones included.
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept(listener, state) => {}
                    }
                });
            })
            .expect("the model server's thread starts");
        ModelServer { addr, shared, stop: Some(stop), thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`: Claude Code appends `/v1/messages`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: codex and litellm append `/responses`
    /// or `/chat/completions`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }

    /// The requests no scene matched.
    pub fn unmatched(&self) -> Vec<Logged> {
        self.requests().into_iter().filter(|r| r.served == Served::Unmatched).collect()
    }

    /// Replaces the script; conversations and used scenes start afresh
    /// (the log stays).
    pub fn set_script(&self, script: Script) {
        self.lock().desk.book = Book::new(script);
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let errors: Vec<String> = self
            .lock()
            .log
            .iter()
            .filter_map(|r| match &r.served {
                Served::ScriptError(e) => Some(format!("{} {}: {e}", r.method, r.path)),
                _ => None,
            })
            .collect();
        if !errors.is_empty() && !std::thread::panicking() {
            panic!("the model server's script asked for what the CLI cannot do:\n{}", errors.join("\n"));
        }
    }
}

async fn accept(listener: tokio::net::TcpListener, shared: Arc<Mutex<Shared>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| serve(shared.clone(), req));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

type Body = BoxBody<Bytes, Infallible>;

async fn serve(shared: Arc<Mutex<Shared>>, req: hyper::Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let request = Request {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_string(), |p| p.to_string()),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: parse_body(&bytes),
    };
    let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
    let (api, answer) = route(&mut shared.desk, &request);
    let response = render(api, &request, answer.reply);
    shared.log.push(Logged {
        method: request.method,
        path: request.path,
        headers: request.headers,
        body: request.body,
        served: answer.served,
        status: response.status().as_u16(),
    });
    Ok(response)
}

fn parse_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn route(desk: &mut Desk, req: &Request) -> (Api, Answer) {
    let route = req.route();
    let api = if route.starts_with("/v1/messages") { Api::Anthropic } else { Api::OpenAi };
    let known = matches!(
        (req.method.as_str(), route),
        ("POST", "/v1/messages" | "/v1/messages/count_tokens" | "/v1/responses" | "/v1/chat/completions")
            | ("GET", "/v1/responses")
    );
    if !known {
        return (api, Answer { served: Served::NotFound, reply: Reply::Error(404, format!("no route {route}")) });
    }
    if let Some(fault) = desk.book.always() {
        return (api, Answer { served: Served::Always, reply: Reply::Fault(fault.clone()) });
    }
    let answer = match (req.method.as_str(), route) {
        ("GET", _) => Answer { served: Served::NoWebSocket, reply: Reply::Error(426, "no WebSocket here".into()) },
        (_, "/v1/messages") => anthropic::answer(desk, req),
        (_, "/v1/messages/count_tokens") => anthropic::count_tokens(req),
        (_, "/v1/responses") => responses::answer(desk, req),
        _ => chat::answer(desk, req),
    };
    (api, answer)
}

fn render(api: Api, req: &Request, reply: Reply) -> Response<Body> {
    match reply {
        Reply::Json(v) => respond(StatusCode::OK, "application/json", v.to_string()),
        Reply::Events(text) => respond(StatusCode::OK, "text/event-stream", text),
        Reply::Error(code, message) => error(api, code, &message, None),
        Reply::Fault(Fault::Status { code, message, retry_after }) => error(api, code, &message, retry_after),
        Reply::Fault(Fault::Garbage) => {
            let kind = if req.streams() { "text/event-stream" } else { "application/json" };
            respond(StatusCode::OK, kind, "<html>\u{1}garbage: {\"not json\n\n]]\n".into())
        }
        Reply::Fault(Fault::Hang) => {
            let kind = if req.streams() { "text/event-stream" } else { "application/json" };
            let silence = futures_util::stream::pending::<Result<Frame<Bytes>, Infallible>>();
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(silence)));
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kind));
            response
        }
    }
}

fn respond(status: StatusCode, kind: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

fn error(api: Api, code: u16, message: &str, retry_after: Option<u64>) -> Response<Body> {
    let body = match api {
        Api::Anthropic => anthropic::error_body(code, message),
        Api::OpenAi => responses::error_body(code, message),
    };
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = respond(status, "application/json", body.to_string());
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// One server-sent event.
fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}
