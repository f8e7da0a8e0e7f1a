//! The network wall, outside: what ward serves for one agent run, in its
//! own (non-dumpable) process, on Unix sockets the wall relays to
//! ([`super::wall`]), or on 127.0.0.1 when ward.yml says `agent.network: open`.
//!
//! - **The model proxy**: one per model API the preset talks to (Anthropic,
//!   OpenAI, Gemini). The agent gets a loopback base URL and a placeholder
//!   key; ward forwards each request to the real endpoint (the gateway, or
//!   the API's own) with the real credential put in (`x-api-key`,
//!   `Authorization: Bearer`, `x-goog-api-key`) and whatever key the agent
//!   sent taken out, and streams the answer back as it comes (server-sent
//!   events frame by frame, never buffered). The key is in ward's memory
//!   only.
//! - **The egress proxy**: HTTP `CONNECT` and plain HTTP (absolute-form),
//!   to the hosts `agent.network.allow` names (`host` or `*.suffix`), the
//!   name resolved here, by ward; an allowed name that resolves to this
//!   machine or a link-local address (a cloud's metadata service) is
//!   refused unless the allowlist names `localhost` itself. Anything else
//!   is refused with 403, logged with its host and port, and counted
//!   ([`Gate::blocked`]).
//! - **Each emulator port**, relayed to the container's port on 127.0.0.1.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tracing::warn;

use super::wall::Relay;
use crate::config::agents::KeyStyle;

/// The key the agent holds instead of the real one.
pub const PLACEHOLDER_KEY: &str = "ward-placeholder-key-the-real-one-stays-with-ward";

/// One model route: where ward forwards, and the key it adds. `Debug`
/// never shows the key.
#[derive(Clone)]
pub struct ModelRoute {
    pub style: KeyStyle,
    /// The real endpoint's base URL (`https://api.anthropic.com`, a gateway's `.../v1`).
    pub upstream: String,
    pub key: String,
}

impl std::fmt::Debug for ModelRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRoute").field("style", &self.style).field("upstream", &self.upstream).finish()
    }
}

/// Whether `host` is allowed by `allow` (`example.org`, `*.example.org`:
/// the suffix's subdomains, not the bare name). Case does not matter.
pub fn allowed(allow: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allow.iter().any(|rule| {
        let rule = rule.trim().to_ascii_lowercase();
        match rule.strip_prefix("*.") {
            Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
            None => host == rule,
        }
    })
}

/// Refused connections: (host, port) -> how many times.
pub type Blocked = BTreeMap<(String, u16), u32>;

/// What one run's gate serves, and where.
pub struct Gate {
    /// The folder of its sockets (removed when the gate is dropped).
    dir: Option<PathBuf>,
    tasks: Vec<JoinHandle<()>>,
    blocked: Arc<Mutex<Blocked>>,
    /// Inside the wall: which port relays to which socket.
    pub relays: Vec<Relay>,
    /// The agent's base URL of each model route, in the order given.
    pub model_urls: Vec<String>,
    /// The egress proxy's URL for the agent (`http://127.0.0.1:P`).
    pub proxy_url: String,
}

/// The ports ward uses inside the wall, above any emulator's.
const FIRST_PORT: u16 = 39_410;

impl Gate {
    /// Starts the gate behind a wall: its sockets in a fresh folder under
    /// `tmp` (short paths: a socket's path is at most 107 bytes), the ports
    /// inside chosen away from the emulator's.
    pub async fn walled(
        tmp: &Path,
        routes: Vec<ModelRoute>,
        allow: Vec<String>,
        emulator_ports: &[u16],
    ) -> std::io::Result<Gate> {
        non_dumpable();
        let dir = fresh_dir(tmp)?;
        let blocked = Arc::new(Mutex::new(Blocked::new()));
        let mut ports = (FIRST_PORT..).filter(|p| !emulator_ports.contains(p));
        let mut gate = Gate {
            dir: Some(dir.clone()),
            tasks: Vec::new(),
            blocked,
            relays: Vec::new(),
            model_urls: Vec::new(),
            proxy_url: String::new(),
        };
        let client = client();
        for (i, route) in routes.into_iter().enumerate() {
            let socket = dir.join(format!("model-{i}.sock"));
            let listener = tokio::net::UnixListener::bind(&socket)?;
            let port = ports.next().unwrap_or(FIRST_PORT);
            gate.model_urls.push(local_base(port, &route.upstream));
            gate.relays.push(Relay { port, socket });
            let (route, client) = (Arc::new(route), client.clone());
            gate.tasks.push(tokio::spawn(async move {
                while let Ok((conn, _)) = listener.accept().await {
                    tokio::spawn(serve_model(conn, route.clone(), client.clone()));
                }
            }));
        }
        let socket = dir.join("egress.sock");
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let port = ports.next().unwrap_or(FIRST_PORT);
        gate.proxy_url = format!("http://127.0.0.1:{port}");
        gate.relays.push(Relay { port, socket });
        let (allow, counts) = (Arc::new(allow), gate.blocked.clone());
        gate.tasks.push(tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(egress(conn, allow.clone(), counts.clone()));
            }
        }));
        for &port in emulator_ports {
            let socket = dir.join(format!("port-{port}.sock"));
            let listener = tokio::net::UnixListener::bind(&socket)?;
            gate.relays.push(Relay { port, socket });
            gate.tasks.push(tokio::spawn(async move {
                while let Ok((mut conn, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        if let Ok(mut tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                            let _ = tcp.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut conn, &mut tcp).await;
                        }
                    });
                }
            }));
        }
        Ok(gate)
    }

    /// Starts only the model proxy, on 127.0.0.1 of the host
    /// (`agent.network: open`: no wall, the key still stays with ward).
    pub async fn open(routes: Vec<ModelRoute>) -> std::io::Result<Gate> {
        non_dumpable();
        let mut gate = Gate {
            dir: None,
            tasks: Vec::new(),
            blocked: Default::default(),
            relays: Vec::new(),
            model_urls: Vec::new(),
            proxy_url: String::new(),
        };
        let client = client();
        for route in routes {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
            gate.model_urls.push(local_base(listener.local_addr()?.port(), &route.upstream));
            let (route, client) = (Arc::new(route), client.clone());
            gate.tasks.push(tokio::spawn(async move {
                while let Ok((conn, _)) = listener.accept().await {
                    let _ = conn.set_nodelay(true);
                    tokio::spawn(serve_model(conn, route.clone(), client.clone()));
                }
            }));
        }
        Ok(gate)
    }

    /// The connections refused so far.
    pub fn blocked(&self) -> Blocked {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One blocked line for people: `example.org:443 ×3, 10.0.0.1:80 ×1`.
pub fn describe(blocked: &Blocked) -> String {
    blocked.iter().map(|((h, p), n)| format!("{h}:{p} ×{n}")).collect::<Vec<_>>().join(", ")
}

fn non_dumpable() {
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

fn fresh_dir(tmp: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    loop {
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = tmp.join(format!("ward-wall-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The agent's base URL: the loopback port with the upstream's path
/// (`http://127.0.0.1:P/v1` for `https://api.openai.com/v1`), so a request
/// path goes upstream unchanged.
fn local_base(port: u16, upstream: &str) -> String {
    let path =
        upstream.parse::<hyper::Uri>().ok().map(|u| u.path().trim_end_matches('/').to_string()).unwrap_or_default();
    format!("http://127.0.0.1:{port}{path}")
}

type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Incoming,
>;

fn client() -> Client {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map(|b| b.https_or_http().enable_http1().build())
        .unwrap_or_else(|_| {
            hyper_rustls::HttpsConnectorBuilder::new().with_webpki_roots().https_or_http().enable_http1().build()
        });
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https)
}

type Body = BoxBody<Bytes, hyper::Error>;

async fn serve_model<S>(conn: S, route: Arc<ModelRoute>, client: Client)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| forward(req, route.clone(), client.clone()));
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(conn), service).await;
}

/// Headers that carry a key, or belong to one hop only.
const DROPPED: &[&str] = &[
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "proxy-authorization",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

async fn forward(req: Request<Incoming>, route: Arc<ModelRoute>, client: Client) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let Ok(upstream) = route.upstream.parse::<hyper::Uri>() else {
        return Ok(failure(StatusCode::BAD_GATEWAY, format!("ward's model proxy: `{}` is not a URL", route.upstream)));
    };
    let (Some(scheme), Some(authority)) = (upstream.scheme_str(), upstream.authority()) else {
        return Ok(failure(StatusCode::BAD_GATEWAY, format!("ward's model proxy: `{}` is not a URL", route.upstream)));
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{scheme}://{authority}{path}").parse::<hyper::Uri>() else {
        return Ok(failure(StatusCode::BAD_REQUEST, "ward's model proxy: the request's path is not valid".into()));
    };
    for name in DROPPED {
        parts.headers.remove(*name);
    }
    let (name, value) = match route.style {
        KeyStyle::XApiKey => ("x-api-key", route.key.clone()),
        KeyStyle::Bearer => ("authorization", format!("Bearer {}", route.key)),
        KeyStyle::GoogApiKey => ("x-goog-api-key", route.key.clone()),
    };
    let Ok(mut value) = HeaderValue::from_str(&value) else {
        return Ok(failure(
            StatusCode::BAD_GATEWAY,
            "ward's model proxy: the model key is not a valid header value".into(),
        ));
    };
    value.set_sensitive(true);
    parts.headers.insert(HeaderName::from_static(name), value);
    if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
        parts.headers.insert(hyper::header::HOST, host);
    }
    parts.uri = uri;
    match client.request(Request::from_parts(parts, body)).await {
        // The answer's body streams through frame by frame.
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(e) => {
            warn!(upstream = %route.upstream, error = %e, "the model proxy could not reach the model");
            Ok(failure(StatusCode::BAD_GATEWAY, format!("ward's model proxy could not reach {}: {e}", route.upstream)))
        }
    }
}

fn failure(status: StatusCode, message: String) -> Response<Body> {
    let body = Full::new(Bytes::from(message)).map_err(|never: Infallible| match never {}).boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp
}

/// The most of a proxy request's head ward reads.
const MAX_HEAD: usize = 16 * 1024;

/// One egress connection: `CONNECT host:port`, or a plain HTTP request in
/// absolute form, to an allowed host; anything else refused and counted.
async fn egress(mut conn: tokio::net::UnixStream, allow: Arc<Vec<String>>, blocked: Arc<Mutex<Blocked>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > MAX_HEAD {
            return;
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let first = text.lines().next().unwrap_or_default().to_string();
    let mut words = first.split_whitespace();
    let (method, target, version) =
        (words.next().unwrap_or(""), words.next().unwrap_or(""), words.next().unwrap_or("HTTP/1.1"));
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let Some((host, port, rest)) = target_of(connect, target) else {
        let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
        return;
    };
    if !allowed(&allow, &host) {
        warn!(host = %host, port, "the agent's connection was refused: the host is not in agent.network.allow");
        let why = format!("{host}:{port} is not in agent.network.allow");
        return refuse(&mut conn, &blocked, host, port, &why).await;
    }
    let addrs = match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(addrs) => addrs.collect::<Vec<_>>(),
        Err(_) => Vec::new(),
    };
    // An allowed name must not lead back to this machine or its cloud's
    // metadata service: a `*.suffix` whose owner points a name at
    // 127.0.0.1 or 169.254.169.254 would otherwise reach ward's host.
    if let Some(addr) = addrs.iter().find(|a| !reachable(&allow, &host, a.ip())) {
        warn!(host = %host, port, address = %addr.ip(), "the agent's connection was refused: an allowed name resolved to this machine or a link-local address");
        let why = format!("{host} resolved to {}, which only an allowlist entry naming it can reach", addr.ip());
        return refuse(&mut conn, &blocked, host, port, &why).await;
    }
    let Ok(mut upstream) = tokio::net::TcpStream::connect(&addrs[..]).await else {
        let _ = conn.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
        return;
    };
    let _ = upstream.set_nodelay(true);
    if connect {
        if conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        if upstream.write_all(&head[end..]).await.is_err() {
            return;
        }
    } else {
        // The request goes on in origin form, its other lines as they were,
        // in one write: a server that answers after one read and closes
        // would otherwise leave the rest unread, and its kernel would reset
        // the connection under the answer.
        let first_end = head.windows(2).position(|w| w == b"\r\n").unwrap_or(end);
        let mut request = format!("{method} {rest} {version}").into_bytes();
        request.extend_from_slice(&head[first_end..]);
        if upstream.write_all(&request).await.is_err() {
            return;
        }
    }
    let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
}

/// A refused connection: counted against (host, port) and answered 403
/// with why, for the agent's tool to print.
async fn refuse(conn: &mut tokio::net::UnixStream, blocked: &Mutex<Blocked>, host: String, port: u16, why: &str) {
    *blocked.lock().unwrap_or_else(|p| p.into_inner()).entry((host, port)).or_default() += 1;
    let body = format!("blocked by ward's network wall: {why}\n");
    let answer = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(answer.as_bytes()).await;
}

/// Whether an allowed host's resolved address may be reached: loopback,
/// unspecified and link-local addresses (this machine, a cloud's metadata
/// service) only when the allowlist names the host exactly as one of them
/// (`localhost`, `127.0.0.1`, `::1`), never through a `*.suffix`.
fn reachable(allow: &[String], host: &str, ip: std::net::IpAddr) -> bool {
    let local = match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        std::net::IpAddr::V6(v6) => {
            let mapped = v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback() || v4.is_link_local());
            v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local() || mapped
        }
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let named = matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1")
        && allow.iter().any(|rule| rule.trim().eq_ignore_ascii_case(&host));
    !local || named
}

/// The host, port and (plain HTTP) origin-form path of a proxy request's target.
fn target_of(connect: bool, target: &str) -> Option<(String, u16, String)> {
    let (authority, rest, default_port) = if connect {
        (target, "/".to_string(), 443)
    } else {
        let after = target.strip_prefix("http://")?;
        let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
        (authority, if path.is_empty() { "/".into() } else { path.to_string() }, 80)
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || p.chars().all(|c| c.is_ascii_digit()) => {
            (h.trim_matches(['[', ']']).to_string(), p.parse().ok()?)
        }
        _ => (authority.trim_matches(['[', ']']).to_string(), default_port),
    };
    (!host.is_empty()).then_some((host, port, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_takes_hosts_and_suffixes() {
        let allow = vec!["pypi.org".to_string(), "*.pythonhosted.org".to_string()];
        assert!(allowed(&allow, "pypi.org"));
        assert!(allowed(&allow, "PyPI.org."));
        assert!(allowed(&allow, "files.pythonhosted.org"));
        assert!(!allowed(&allow, "pythonhosted.org"), "a suffix is its subdomains");
        assert!(!allowed(&allow, "evilpypi.org"));
        assert!(!allowed(&allow, "pypi.org.evil.example"));
        assert!(!allowed(&[], "example.org"));
    }

    #[test]
    fn an_allowed_name_reaches_this_machine_only_when_named_as_it() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let allow = vec!["localhost".to_string(), "*.example.org".to_string(), "registry.internal".to_string()];
        assert!(reachable(&allow, "localhost", ip("127.0.0.1")));
        assert!(reachable(&allow, "localhost", ip("::1")));
        assert!(!reachable(&allow, "evil.example.org", ip("127.0.0.1")));
        assert!(!reachable(&allow, "evil.example.org", ip("169.254.169.254")));
        assert!(!reachable(&allow, "evil.example.org", ip("0.0.0.0")));
        assert!(!reachable(&allow, "evil.example.org", ip("::ffff:127.0.0.1")));
        assert!(!reachable(&allow, "evil.example.org", ip("fe80::1")));
        // A registry on the runner's private network is its real address.
        assert!(reachable(&allow, "registry.internal", ip("10.0.0.7")));
        assert!(reachable(&allow, "pkg.example.org", ip("93.184.215.14")));
        // `localhost` reached only when the allowlist says so.
        assert!(!reachable(&["*.example.org".to_string()], "localhost", ip("127.0.0.1")));
    }

    /// One request through the egress proxy; its answer, and whether the
    /// listener at the target saw a connection.
    async fn through_egress(allow: &[&str], target: impl Fn(u16) -> String) -> (String, bool, Blocked) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (mut c, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf).await;
            c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await.unwrap();
        });
        let blocked = Arc::new(Mutex::new(Blocked::new()));
        let allow = Arc::new(allow.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let (mut agent, proxy) = tokio::net::UnixStream::pair().unwrap();
        let gate = tokio::spawn(egress(proxy, allow, blocked.clone()));
        let request = format!("GET {} HTTP/1.1\r\nhost: x\r\n\r\n", target(port));
        agent.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        agent.read_to_string(&mut answer).await.unwrap();
        // The proxy relays until both sides are done: the agent hangs up.
        drop(agent);
        gate.await.unwrap();
        let reached = served.is_finished();
        served.abort();
        let blocked = blocked.lock().unwrap().clone();
        (answer, reached, blocked)
    }

    #[tokio::test]
    async fn a_suffix_that_resolves_to_this_machine_is_refused_and_counted() {
        let (answer, reached, blocked) = through_egress(&["*.0.0.1"], |p| format!("http://127.0.0.1:{p}/")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("127.0.0.1 resolved to 127.0.0.1"), "{answer}");
        assert!(!reached, "the listener was reached");
        assert_eq!(blocked.values().sum::<u32>(), 1, "{blocked:?}");
        // Named as itself, it is the allowlist's own choice (the control).
        let (answer, _, blocked) = through_egress(&["127.0.0.1"], |p| format!("http://127.0.0.1:{p}/")).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        assert!(blocked.is_empty());
    }

    #[test]
    fn proxy_targets_are_read_in_both_forms() {
        assert_eq!(target_of(true, "example.org:443"), Some(("example.org".into(), 443, "/".into())));
        assert_eq!(target_of(false, "http://example.org/a?b"), Some(("example.org".into(), 80, "/a?b".into())));
        assert_eq!(target_of(false, "http://example.org:8080"), Some(("example.org".into(), 8080, "/".into())));
        assert_eq!(target_of(true, "[::1]:22"), Some(("::1".into(), 22, "/".into())));
        assert_eq!(target_of(false, "/relative"), None);
    }

    #[test]
    fn the_local_base_keeps_the_upstreams_path() {
        assert_eq!(local_base(5, "https://api.openai.com/v1"), "http://127.0.0.1:5/v1");
        assert_eq!(local_base(5, "https://api.anthropic.com"), "http://127.0.0.1:5");
        assert_eq!(describe(&[(("example.org".to_string(), 443), 3)].into()), "example.org:443 ×3");
    }
}
