//! A stateful fake GitHub on 127.0.0.1 (a random port), for the GitHub
//! forge's tests: state (issues, labels and their events, comments, files
//! per branch with shas, dispatches, collaborators, pull requests with
//! reviews, commits and review threads, check runs, statuses) plus HTTP
//! handlers that change it, in the manner of rust-lang/bors' test harness.
//!
//! - Answers are built from GitHub's own example bodies
//!   (`tests/fixtures/github/rest-api/examples/`), changing only the fields
//!   the state owns, and 404/409/422 come where GitHub sends them.
//! - A request the fake does not know is recorded and FAILS the test: on
//!   drop, or earlier with [`FakeGitHub::assert_known_routes`].
//! - Every exchange is logged (route template, status, request and
//!   response bodies) for call counts and the OpenAPI conformance test.
//! - Faults can be scheduled per route: any status (5xx, 409, 422), 403
//!   with `Retry-After` or without (secondary limit), 429, rate-limit
//!   exhaustion, a write that lands but whose answer is lost, and a
//!   concurrent writer on a contents path.
//! - It checks the token (`Authorization: Bearer`), and can play a missing
//!   repository (`repo_exists`), a read-only token (`token_can_write`), a
//!   token without one permission, and the repository's Actions settings
//!   (`settings`, in settings.rs).

mod handlers;
mod releases;
mod settings;
mod state;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use ward::forge::github::{GitHubForge, GitHubSettings};
use ward::forge::retry::RetryPolicy;

pub use state::*;

pub const OWNER: &str = "octo";
pub const REPO: &str = "hospital";
pub const TOKEN: &str = "ghs_fake_token_for_tests";
/// The login the token acts as (what GITHUB_TOKEN is).
pub const ENGINE: &str = "github-actions[bot]";

pub struct FakeGitHub {
    pub url: String,
    state: Arc<Mutex<State>>,
    server: tokio::task::JoinHandle<()>,
    /// Every wait the forges made by this fake asked for (no real sleeping).
    pub waits: Arc<Mutex<Vec<Duration>>>,
}

impl FakeGitHub {
    /// Starts a fake with repository `octo/hospital`, token [`TOKEN`]
    /// acting as [`ENGINE`], and a `main` branch.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr: SocketAddr = listener.local_addr().expect("local address");
        let url = format!("http://{addr}");
        let state = Arc::new(Mutex::new(State::new(&url)));
        let shared = state.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| serve(state.clone(), req));
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Self { url, state, server, waits: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The state, to arrange a test or assert on its result.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A forge on this fake with the default settings and a retry policy
    /// that records its waits instead of sleeping them.
    pub fn forge(&self) -> GitHubForge {
        self.forge_with(TOKEN, REPO)
    }

    pub fn forge_with(&self, token: &str, repo: &str) -> GitHubForge {
        let settings = GitHubSettings {
            api_url: self.url.clone(),
            repo: format!("{OWNER}/{repo}").parse().expect("valid repository"),
            charts_branch: "ward-charts".into(),
            engine_account: ENGINE.into(),
        };
        GitHubForge::new(settings, token).expect("client builds").with_retry(self.retry_policy())
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        let waits = self.waits.clone();
        RetryPolicy {
            sleeper: Arc::new(move |d| {
                waits.lock().unwrap_or_else(|p| p.into_inner()).push(d);
                Box::pin(async {})
            }),
            ..RetryPolicy::default()
        }
    }

    /// Fails the test when any request hit a route the fake does not know.
    pub fn assert_known_routes(&self) {
        let unknown = self.state().unknown.clone();
        assert!(unknown.is_empty(), "requests to routes the fake GitHub does not know: {unknown:#?}");
    }
}

impl Drop for FakeGitHub {
    fn drop(&mut self) {
        self.server.abort();
        if !std::thread::panicking() {
            self.assert_known_routes();
        }
    }
}

async fn serve(
    state: Arc<Mutex<State>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let answer = {
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        // Releases answer bytes and redirects (releases.rs); the rest is JSON.
        if let Some(response) = releases::handle(&mut state, &parts.method, &parts.uri, &parts.headers) {
            return Ok(response);
        }
        // The settings `ward doctor` reads, and per-permission refusals (settings.rs).
        settings::handle(&mut state, &parts.method, &parts.uri, &parts.headers, &body)
            .unwrap_or_else(|| state.handle(&parts.method, &parts.uri, &parts.headers, &body))
    };
    let mut response = Response::builder().status(answer.status);
    for (k, v) in &answer.headers {
        response = response.header(k.as_str(), v.as_str());
    }
    let bytes = match &answer.body {
        Some(v) => {
            response = response.header("content-type", "application/json; charset=utf-8");
            Bytes::from(serde_json::to_vec(v).unwrap_or_default())
        }
        None => Bytes::new(),
    };
    Ok(response.body(Full::new(bytes)).expect("a valid response"))
}
