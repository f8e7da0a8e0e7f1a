//! A stateful fake GitHub on 127.0.0.1 (a random port) that behaves like
//! GitHub where it hurts, for the forge's tests and for the workflow runner
//! (`tests/support/actions/`): state (issues, labels and their events,
//! comments, dispatches, collaborators, pull requests with reviews and
//! threads, check suites and runs, statuses, tokens, webhook deliveries)
//! plus HTTP handlers that change it, in the manner of rust-lang/bors' test
//! harness, and a real git repository behind it.
//!
//! The harness:
//! - Answers are built from GitHub's own example bodies
//!   (`tests/fixtures/github/rest-api/examples/`), changing only the fields
//!   the state owns, and 403/404/409/422 come where GitHub sends them.
//! - A request the fake does not know is recorded and FAILS the test: on
//!   drop, or earlier with [`FakeGitHub::assert_known_routes`].
//! - Every API exchange is logged (route template, status, request and
//!   response bodies) for call counts and the OpenAPI conformance test;
//!   git's requests go to a log of their own (`git_log`).
//! - Faults can be scheduled per route: any status (5xx, 409, 422), 403
//!   with `Retry-After` or without (secondary limit), 429, rate-limit
//!   exhaustion, a write that lands but whose answer is lost, and a
//!   concurrent writer on a contents path.
//! - A seeded fault schedule ([`Schedule`], schedule.rs) decides per
//!   request number which API request gets a fault (5xx, 403/429 with
//!   `Retry-After`, a connection reset before or after the request took
//!   effect, a 409/422 sha conflict, a slow answer), for tests/faults.rs.
//!
//! GitHub's rules it keeps (each has a test in `tests/workflows.rs` or
//! `tests/github.rs` that would fail were the fake lenient):
//! - **Tokens carry permissions.** A token acts as a login with a scope
//!   map (`contents`, `issues`, `pull-requests`, `checks`, `statuses`,
//!   `actions`, ...; `metadata: read` always). A request without the
//!   scope its route needs answers 403 "Resource not accessible by
//!   integration"; an unknown or revoked token 401. [`TOKEN`] acts as
//!   [`ENGINE`] with every permission; [`State::mint_token`] makes a job's
//!   `GITHUB_TOKEN` (the runner mints one per job), [`State::app_token`]
//!   a GitHub App's. `token_can_write = false` refuses every write.
//! - **Every change is a webhook delivery** ([`State::deliveries`]): issues
//!   opened/labeled/unlabeled/closed, issue_comment created, pull_request
//!   opened/synchronize/closed, push, pull_request_review submitted,
//!   check_run created/completed, check_suite completed, status,
//!   workflow_run, repository_dispatch, workflow_dispatch; payloads from
//!   octokit's examples, validated against octokit's schemas in a test;
//!   `sender` is who caused it, and `by_workflow_token` marks what a
//!   workflow's `GITHUB_TOKEN` (or Actions' own checks) caused, which
//!   starts no workflow except workflow_dispatch and repository_dispatch.
//! - **The repository is real** ([`git::BareRepo`]): a bare repository
//!   served over git's smart HTTP protocol by `git http-backend` at
//!   [`FakeGitHub::git_url`], with Basic `x-access-token:<token>`
//!   (fetching needs `contents: read`, pushing `contents: write`, touching
//!   `.github/workflows/` `workflows: write`, which no `GITHUB_TOKEN` has).
//!   Branch heads, a pull request's head and commits, `refs/pull/<n>/head`
//!   and the test merge `refs/pull/<n>/merge`, the contents API (a real
//!   commit per write, git's blob shas for its compare-and-swap), the git
//!   data API and merges (squash or merge commit, refused on a conflict)
//!   all read and write that one repository. A push announces `push`, and
//!   `pull_request` synchronize for an open pull request's branch.
//! - **Pull requests**: the head branch must exist and differ from the
//!   base; the workflow token may open one only when
//!   `actions_can_create_pull_requests` is set (off, as on a new
//!   repository); no branch protection (any token with `contents: write`
//!   merges, reviews and CI or not).
//! - **CI and reviews arrive later, as their own events.** Check runs come
//!   from a workflow run (the runner) or an app ([`State::report_check`],
//!   with an output summary); Actions' own have none. A commit with only
//!   check runs has a combined status `pending` with no statuses, as on
//!   GitHub; an unknown commit is 422 (check runs) or 404 (status).
//!   Reviews ([`State::review`]) come from collaborators with any role
//!   (a triager's approval exists; it does not count for write access),
//!   never an approval by the author, with comments opening threads.
//! - **People act through helpers** with a login whose role
//!   [`State::add_collaborator`] set: `label`/`unlabel` (triage or more),
//!   `comment`, `review`, `commit_files`, `merge_branch`, `open_pull`,
//!   `set_status`, `repository_dispatch`, `dispatch_workflow`, `close`.
//!   The repository is private: people who are no collaborator cannot see
//!   it (`add_issue` alone takes any author, for the forge's tests).
//! - **A simulated clock** ([`State::clock`], from [`EPOCH`]): every
//!   timestamp the fake writes comes from it; it moves one second per
//!   recorded event and otherwise only when a test or the runner advances
//!   it, so "CI takes ten minutes, a person approves an hour later" takes
//!   no real time.
//! - **Repository settings** `ward doctor` reads (`settings`, in
//!   settings.rs): the workflow token's defaults, the Actions runs list,
//!   and a token refused one permission (`settings.denied`).
//! - **GraphQL** (`POST /graphql`, graphql.rs): the document is checked
//!   against GitHub's published schema first (schema.rs; an invalid one is
//!   HTTP 200 with `errors` and no `data`, and fails the test), then every
//!   field asked for is answered from the same state (issues and
//!   labels, the charts branch's blobs, pull requests with reviews, threads,
//!   commits and the head's check runs and statuses, label events), in
//!   GitHub's shapes (`data`, `errors` with `type` and `path`), one call per
//!   query; connections need `first`/`last`; a field the fake does not
//!   model fails the test. `Blob.text` is cut beyond 512 KB
//!   (`isTruncated`), `null` for binary content. A bot is a `Bot` whose
//!   `login` has no `[bot]` (`github-actions`), as GitHub answers; REST
//!   says `github-actions[bot]`.
//! - **GitHub Enterprise Server** (`State::enterprise`): REST under
//!   `/api/v3`, GraphQL at `/api/graphql`, nothing anywhere else.
//! - **Search** (GraphQL `search(type: ISSUE, ...)`, search.rs): the
//!   qualifiers ward sends, at most 1,000 results with `issueCount`, and
//!   an index that can lag behind writes (`search_lag`).
//! - **Pagination** as GitHub's: `Link` with `next` and `last` (and `prev`,
//!   `first`); every answer can come late (`latency`), and the most API
//!   requests answered at once is kept (`peak_in_flight`).
//! - **Contents over 1 MB** come without their content (`content: ""`,
//!   `encoding: "none"`), as on GitHub; `GET /git/blobs/{sha}` gives them.

mod events;
pub mod git;
mod graphql;
mod handlers;
pub mod merge_queue;
mod releases;
mod schedule;
pub mod schema;
mod search;
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

#[allow(unused_imports)]
pub use events::{WorkflowRunFacts, webhook};
#[allow(unused_imports)]
pub use schedule::{Injected, Schedule};
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
            graphql_url: format!("{}/graphql", self.url),
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

    /// The hospital of the repository at `root` on this fake, as a workflow
    /// step has it: the ward under test, checkout mode (`GITHUB_ACTIONS`),
    /// pushing to the fake's git server with the token.
    pub fn hospital(&self, root: &std::path::Path) -> ward::hospital::Hospital {
        let mut h = ward::hospital::Hospital::load(root, Arc::new(self.forge())).expect("the pipeline loads");
        h.ward_exe = env!("CARGO_BIN_EXE_ward").into();
        let url = self.url.clone();
        let env = move |k: &str| match k {
            "GITHUB_ACTIONS" => Some("true".to_string()),
            "GITHUB_REPOSITORY" => Some(format!("{OWNER}/{REPO}")),
            "GITHUB_SERVER_URL" => Some(url.clone()),
            _ => None,
        };
        let mut plan = ward::workspace::WorkspacePlan::detect(root, env).unwrap().expect("a git repository");
        plan.push = Some(ward::workspace::PushTarget { url: self.git_url(), token: Some(TOKEN.into()) });
        h.workspace = Ok(Some(plan));
        h
    }

    /// `{url}/{owner}/{repo}.git`: where git fetches and pushes.
    pub fn git_url(&self) -> String {
        format!("{}/{OWNER}/{REPO}.git", self.url)
    }

    /// Makes the fake's repository hold the branches of the local
    /// repository at `dir` (force-pushed, workflow files allowed), as it
    /// was before the test began: nothing is delivered.
    pub fn seed(&self, dir: &std::path::Path) {
        let bare = self.state().git.path.clone();
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["push", "--quiet", "--force"])
            .arg(&bare)
            .arg("refs/heads/*:refs/heads/*")
            .env("FAKE_GITHUB_WORKFLOWS", "write")
            .output()
            .expect("git push runs");
        assert!(out.status.success(), "seeding the fake's repository: {}", String::from_utf8_lossy(&out.stderr));
        let mut s = self.state();
        s.known_refs = s.git.refs();
        let open: Vec<u64> = s.pulls.values().filter(|p| p.open).map(|p| p.number).collect();
        for n in open {
            s.update_pull_refs(n);
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

/// An answer withheld: hyper closes the connection, as a reset would.
#[derive(Debug)]
struct ConnectionReset;

impl std::fmt::Display for ConnectionReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("injected fault: connection reset")
    }
}

impl std::error::Error for ConnectionReset {}

async fn serve(
    state: Arc<Mutex<State>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, ConnectionReset> {
    let (mut parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if parts.uri.path().starts_with(&format!("/{OWNER}/{REPO}.git/")) {
        return Ok(serve_git(state, &parts, &body).await);
    }
    if state.lock().unwrap_or_else(|p| p.into_inner()).enterprise {
        match enterprise_route(&parts.uri) {
            Some(uri) => parts.uri = uri,
            None => {
                let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                s.unknown
                    .push(format!("{} {} (GitHub Enterprise Server serves nothing there)", parts.method, parts.uri));
                let body = Bytes::from_static(br#"{"message":"Not Found"}"#);
                return Ok(Response::builder().status(404).body(Full::new(body)).expect("a valid response"));
            }
        }
    }
    let _answering = Answering::start(&state);
    let latency = state.lock().unwrap_or_else(|p| p.into_inner()).latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    // A seeded schedule (schedule.rs) may slow the answer or reset the connection.
    let plan = schedule::plan(&mut state.lock().unwrap_or_else(|p| p.into_inner()), &parts.method, parts.uri.path());
    match plan {
        schedule::Plan::Answer { delay } if !delay.is_zero() => tokio::time::sleep(delay).await,
        schedule::Plan::Answer { .. } => {}
        schedule::Plan::Reset { handle: false } => return Err(ConnectionReset),
        schedule::Plan::Reset { handle: true } => {
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            // The request takes effect; its answer never leaves.
            if releases::handle(&mut state, &parts.method, &parts.uri, &parts.headers).is_none()
                && settings::handle(&mut state, &parts.method, &parts.uri, &parts.headers, &body).is_none()
            {
                state.handle(&parts.method, &parts.uri, &parts.headers, &body);
            }
            return Err(ConnectionReset);
        }
    }
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

/// What a GitHub Enterprise Server request is in the fake's routes: REST's
/// `/api/v3/...` without its prefix, GraphQL's `/api/graphql` as
/// `/graphql`; `None` for anything else (`/graphql`, `/api/v3/graphql`).
fn enterprise_route(uri: &http::Uri) -> Option<http::Uri> {
    let path = uri.path();
    let inner = if path == "/api/graphql" {
        "/graphql"
    } else {
        path.strip_prefix("/api/v3").filter(|p| p.starts_with('/') && *p != "/graphql")?
    };
    let rebuilt = match uri.query() {
        Some(q) => format!("{inner}?{q}"),
        None => inner.to_string(),
    };
    rebuilt.parse().ok()
}

/// Counts an API request in flight ([`State::in_flight`]) while it lives.
struct Answering(Arc<Mutex<State>>);

impl Answering {
    fn start(state: &Arc<Mutex<State>>) -> Self {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.in_flight += 1;
        s.peak_in_flight = s.peak_in_flight.max(s.in_flight);
        Self(state.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).in_flight -= 1;
    }
}

/// Git's smart HTTP protocol at `{url}/{owner}/{repo}.git`, through `git
/// http-backend`, with GitHub's authentication: Basic
/// `x-access-token:<token>`; fetching needs `contents: read`, pushing
/// `contents: write` (and `workflows: write` to touch
/// `.github/workflows/`). A push is announced like GitHub does (`push`,
/// and `pull_request` synchronize for an open pull request's branch).
async fn serve_git(state: Arc<Mutex<State>>, parts: &http::request::Parts, body: &Bytes) -> Response<Full<Bytes>> {
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let push = query.contains("service=git-receive-pack") || path.ends_with("/git-receive-pack");
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    // Git shows a `text/plain` error body as `remote: ...` lines, as it does GitHub's.
    let reply = |status: u16, mut headers: Vec<(String, String)>, text: Vec<u8>| {
        if status >= 400 && headers.is_empty() {
            headers.push(("content-type".into(), "text/plain; charset=utf-8".into()));
        }
        let mut r = Response::builder().status(status);
        for (k, v) in headers {
            r = r.header(k, v);
        }
        r.body(Full::new(Bytes::from(text))).expect("a valid response")
    };
    let (grant, root, can_write, exists) = {
        let s = state.lock().unwrap_or_else(|p| p.into_inner());
        let grant =
            basic_token(&header("authorization")).and_then(|t| s.tokens.get(&t).filter(|g| !g.revoked).cloned());
        (grant, s.git.project_root().to_path_buf(), s.token_can_write, s.repo_exists)
    };
    let log = |status: u16, login: Option<&str>, stderr: &str| {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.git_log.push(GitExchange {
            method: parts.method.to_string(),
            path: format!("{path}?{query}"),
            login: login.map(String::from),
            status,
            stderr: stderr.to_string(),
        });
    };
    let Some(grant) = grant else {
        log(401, None, "");
        let challenge = vec![
            ("www-authenticate".to_string(), "Basic realm=\"GitHub\"".to_string()),
            ("content-type".to_string(), "text/plain; charset=utf-8".to_string()),
        ];
        return reply(
            401,
            challenge,
            b"Invalid username or token. Password authentication is not supported for Git operations.\n".to_vec(),
        );
    };
    if !exists || !grant.permissions.allows("contents", false) {
        log(404, Some(&grant.login), "");
        return reply(404, Vec::new(), b"Repository not found.\n".to_vec());
    }
    if push && (!can_write || !grant.permissions.allows("contents", true)) {
        log(403, Some(&grant.login), "");
        let text = format!("Permission to {OWNER}/{REPO}.git denied to {}.\n", grant.login);
        return reply(403, Vec::new(), text.into_bytes());
    }
    let request = (
        parts.method.to_string(),
        path.clone(),
        query.clone(),
        header("content-type"),
        header("content-encoding"),
        header("git-protocol"),
        body.to_vec(),
        grant.login.clone(),
        grant.permissions.allows("workflows", true),
    );
    let answer = tokio::task::spawn_blocking(move || {
        let (method, path, query, content_type, content_encoding, git_protocol, body, login, workflows) = request;
        git::http_backend(
            &root,
            &git::CgiRequest {
                method: &method,
                path_info: &path,
                query: &query,
                content_type: &content_type,
                content_encoding: &content_encoding,
                git_protocol: &git_protocol,
                body: &body,
                remote_user: &login,
                workflows_write: workflows,
            },
        )
    })
    .await
    .expect("git http-backend answers");
    log(answer.status, Some(&grant.login), &answer.stderr);
    if push && parts.method == http::Method::POST {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.pushed(&grant);
    }
    reply(answer.status, answer.headers, answer.body)
}

/// The token of `Authorization: Basic base64(x-access-token:<token>)`.
fn basic_token(header: &str) -> Option<String> {
    use base64::Engine as _;
    let (scheme, value) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(value.trim()).ok()?;
    let (user, token) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    (user == "x-access-token").then(|| token.to_string())
}
