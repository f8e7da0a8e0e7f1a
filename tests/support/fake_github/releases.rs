//! Releases and their assets, for the action's installer (`action/install.sh`).
//!
//! A release belongs to any repository (`owner/name`), not only the fake's
//! hospital: the action downloads ward from its own repository. What it
//! answers, like GitHub:
//!
//! - `GET /repos/{owner}/{repo}/releases/tags/{tag}`: a *published* release
//!   (drafts answer 404, as GitHub's "get a published release").
//! - `GET /repos/{owner}/{repo}/releases/{release_id}/assets`: the assets, paginated.
//! - `GET /repos/{owner}/{repo}/releases/assets/{asset_id}`: the asset's
//!   metadata; with `Accept: application/octet-stream`, a 302 to a signed
//!   storage URL on *another host* (`localhost` instead of `127.0.0.1`),
//!   which serves the bytes and answers 400 to a request that carries an
//!   `Authorization` header, as object storage does: a client that forwards
//!   its GitHub token on the redirect fails here as it would on GitHub.
//!
//! Bodies are GitHub's own examples (`release`, `release-asset`) with the
//! fields the state owns replaced. Anything else under `/releases` is left
//! to the main router, which records it as unknown and fails the test.
//! Answers carry bytes and redirects, which the JSON-only [`super::handlers`]
//! does not, so the server asks this module first ([`handle`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use http_body_util::Full;
use hyper::Response;
use serde_json::{Value, json};

use super::state::{Exchange, State};

/// Where the storage host serves asset bytes (GitHub's bucket name).
const STORAGE: &str = "/github-production-release-asset";
const DOCS: &str = "https://docs.github.com/rest/releases";

#[derive(Debug, Clone)]
pub struct FakeAsset {
    pub id: u64,
    pub name: String,
    pub content_type: String,
    pub bytes: Vec<u8>,
    /// `sha256:<hex>`, computed once at upload as GitHub does (not on every
    /// listing: a release of ward is tens of megabytes).
    pub digest: String,
}

#[derive(Debug, Clone)]
pub struct FakeRelease {
    pub id: u64,
    /// `owner/name` of the repository the release belongs to.
    pub repository: String,
    pub tag: String,
    pub draft: bool,
    pub assets: Vec<FakeAsset>,
}

/// The releases of every repository, and the storage URLs handed out.
#[derive(Debug, Clone, Default)]
pub struct Releases {
    pub all: Vec<FakeRelease>,
    /// Signature of a storage URL -> the asset it serves.
    signed: BTreeMap<String, u64>,
}

impl State {
    /// Publishes a release of `repository` (`owner/name`) at `tag` with
    /// these assets (`name`, bytes). Returns the release id.
    pub fn publish_release(&mut self, repository: &str, tag: &str, assets: &[(&str, Vec<u8>)]) -> u64 {
        self.add_release(repository, tag, assets, false)
    }

    /// A draft release: visible to its authors, not to `releases/tags/{tag}`.
    pub fn draft_release(&mut self, repository: &str, tag: &str, assets: &[(&str, Vec<u8>)]) -> u64 {
        self.add_release(repository, tag, assets, true)
    }

    fn add_release(&mut self, repository: &str, tag: &str, assets: &[(&str, Vec<u8>)], draft: bool) -> u64 {
        let id = self.id();
        let assets = assets
            .iter()
            .map(|(name, bytes)| FakeAsset {
                id: self.id(),
                name: name.to_string(),
                content_type: content_type_of(name).into(),
                bytes: bytes.clone(),
                digest: digest(bytes),
            })
            .collect();
        self.releases.all.push(FakeRelease { id, repository: repository.into(), tag: tag.into(), draft, assets });
        id
    }
}

fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn content_type_of(name: &str) -> &'static str {
    if name.ends_with(".tar.gz") { "application/gzip" } else { "application/octet-stream" }
}

/// The answer to a releases request, or `None` when the request is not one
/// this module knows (the main router then answers, or records it unknown).
pub(super) fn handle(
    state: &mut State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<Response<Full<Bytes>>> {
    if *method != Method::GET {
        return None;
    }
    let path = uri.path();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (route, reply) = match segments.as_slice() {
        [bucket, id] if format!("/{bucket}") == STORAGE => {
            (format!("{STORAGE}/{{asset_id}}"), storage(state, id, uri.query().unwrap_or(""), headers))
        }
        ["repos", owner, repo, "releases", rest @ ..] => {
            let repository = format!("{owner}/{repo}");
            let (route, reply) = match rest {
                ["tags", tag] => ("/tags/{tag}", by_tag(state, &repository, tag)),
                [id, "assets"] => ("/{release_id}/assets", list_assets(state, &repository, id, uri)),
                ["assets", id] => ("/assets/{asset_id}", asset(state, &repository, id, headers)),
                _ => return None,
            };
            let reply = if authorized(state, headers) { reply } else { error(401, "Bad credentials") };
            (format!("/repos/{{owner}}/{{repo}}/releases{route}"), reply)
        }
        _ => return None,
    };
    state.log.push(Exchange {
        method: method.to_string(),
        route,
        path: uri.to_string(),
        status: reply.status,
        request: None,
        response: reply.json.clone(),
        fault: false,
    });
    Some(reply.into_response())
}

/// Public repositories answer without a token; a token that is sent must be
/// valid: one the fake knows and has not revoked (a job's, an app's, the test's).
fn authorized(state: &State, headers: &HeaderMap) -> bool {
    match headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(sent) => {
            sent.strip_prefix("Bearer ").and_then(|t| state.tokens.get(t.trim())).is_some_and(|grant| !grant.revoked)
        }
    }
}

struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    json: Option<Value>,
    bytes: Option<Vec<u8>>,
}

impl Reply {
    fn into_response(self) -> Response<Full<Bytes>> {
        let mut response = Response::builder().status(self.status);
        for (k, v) in &self.headers {
            response = response.header(*k, v.as_str());
        }
        let body = match (self.json, self.bytes) {
            (Some(v), _) => {
                response = response.header("content-type", "application/json; charset=utf-8");
                serde_json::to_vec(&v).unwrap_or_default()
            }
            (None, Some(b)) => b,
            (None, None) => Vec::new(),
        };
        response.body(Full::new(Bytes::from(body))).expect("a valid response")
    }
}

fn json_reply(status: u16, body: Value) -> Reply {
    Reply { status, headers: Vec::new(), json: Some(body), bytes: None }
}

fn error(status: u16, message: &str) -> Reply {
    json_reply(status, json!({ "message": message, "documentation_url": DOCS, "status": status.to_string() }))
}

fn published<'a>(state: &'a State, repository: &str) -> impl Iterator<Item = &'a FakeRelease> {
    let repository = repository.to_string();
    state.releases.all.iter().filter(move |r| r.repository.eq_ignore_ascii_case(&repository) && !r.draft)
}

fn by_tag(state: &State, repository: &str, tag: &str) -> Reply {
    match published(state, repository).find(|r| r.tag == tag) {
        Some(r) => json_reply(200, release_json(state, r)),
        None => error(404, "Not Found"),
    }
}

fn list_assets(state: &State, repository: &str, id: &str, uri: &Uri) -> Reply {
    let Some(release) = published(state, repository).find(|r| r.id.to_string() == id) else {
        return error(404, "Not Found");
    };
    let query: BTreeMap<&str, &str> = uri.query().unwrap_or("").split('&').filter_map(|p| p.split_once('=')).collect();
    let per_page = query.get("per_page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(30).clamp(1, 100);
    let page = query.get("page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1).max(1);
    let items: Vec<Value> = release
        .assets
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .map(|a| asset_json(state, release, a))
        .collect();
    let mut reply = json_reply(200, Value::Array(items));
    if page * per_page < release.assets.len() {
        let next = format!("{}{}?per_page={per_page}&page={}", state.base_url, uri.path(), page + 1);
        reply.headers.push(("link", format!("<{next}>; rel=\"next\"")));
    }
    reply
}

fn asset(state: &mut State, repository: &str, id: &str, headers: &HeaderMap) -> Reply {
    let found = published(state, repository)
        .flat_map(|r| r.assets.iter().map(move |a| (r, a)))
        .find(|(_, a)| a.id.to_string() == id)
        .map(|(r, a)| (asset_json(state, r, a), a.id));
    let Some((metadata, asset_id)) = found else { return error(404, "Not Found") };
    let wants_bytes = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/octet-stream"));
    if !wants_bytes {
        return json_reply(200, metadata);
    }
    let signature = format!("{:016x}", state.id().wrapping_mul(0x9e37_79b9_7f4a_7c15));
    state.releases.signed.insert(signature.clone(), asset_id);
    let storage_host = state.base_url.replace("127.0.0.1", "localhost");
    let location = format!("{storage_host}{STORAGE}/{asset_id}?sp=r&sig={signature}");
    Reply { status: 302, headers: vec![("location", location)], json: None, bytes: None }
}

/// The storage host behind a signed URL: bytes for a valid signature and
/// no `Authorization` header; an XML error otherwise, as object storage does.
fn storage(state: &State, id: &str, query: &str, headers: &HeaderMap) -> Reply {
    let xml = |status: u16, code: &str, message: &str| {
        Reply {
        status,
        headers: vec![("content-type", "application/xml".into())],
        json: None,
        bytes: Some(format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>").into_bytes()),
    }
    };
    let host = headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !host.starts_with("localhost") {
        return xml(400, "InvalidUri", "the storage host is not the API host");
    }
    if headers.contains_key(http::header::AUTHORIZATION) {
        return xml(
            400,
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string \
             parameter or the Authorization header should be specified",
        );
    }
    let signature = query.split('&').find_map(|p| p.strip_prefix("sig=")).unwrap_or("");
    let asset = state
        .releases
        .signed
        .get(signature)
        .filter(|a| a.to_string() == id)
        .and_then(|a| state.releases.all.iter().flat_map(|r| &r.assets).find(|x| x.id == *a));
    match asset {
        Some(a) => Reply {
            status: 200,
            headers: vec![("content-type", "application/octet-stream".into())],
            json: None,
            bytes: Some(a.bytes.clone()),
        },
        None => xml(403, "AuthenticationFailed", "Server failed to authenticate the request."),
    }
}

fn release_json(state: &State, r: &FakeRelease) -> Value {
    let mut v = template(include_str!("../../fixtures/github/rest-api/examples/release.json"));
    let api = format!("{}/repos/{}/releases/{}", state.base_url, r.repository, r.id);
    let html = format!("https://github.com/{}/releases/tag/{}", r.repository, r.tag);
    v["id"] = json!(r.id);
    v["url"] = json!(api);
    v["assets_url"] = json!(format!("{api}/assets"));
    v["upload_url"] =
        json!(format!("https://uploads.github.com/repos/{}/releases/{}/assets{{?name,label}}", r.repository, r.id));
    v["html_url"] = json!(html);
    v["tarball_url"] = json!(format!("{}/repos/{}/tarball/{}", state.base_url, r.repository, r.tag));
    v["zipball_url"] = json!(format!("{}/repos/{}/zipball/{}", state.base_url, r.repository, r.tag));
    v["tag_name"] = json!(r.tag);
    v["name"] = json!(r.tag);
    v["draft"] = json!(r.draft);
    v["assets"] = Value::Array(r.assets.iter().map(|a| asset_json(state, r, a)).collect());
    v
}

fn asset_json(state: &State, r: &FakeRelease, a: &FakeAsset) -> Value {
    let mut v = template(include_str!("../../fixtures/github/rest-api/examples/release-asset.json"));
    v["id"] = json!(a.id);
    v["url"] = json!(format!("{}/repos/{}/releases/assets/{}", state.base_url, r.repository, a.id));
    v["browser_download_url"] =
        json!(format!("https://github.com/{}/releases/download/{}/{}", r.repository, r.tag, a.name));
    v["name"] = json!(a.name);
    v["label"] = json!("");
    v["content_type"] = json!(a.content_type);
    v["size"] = json!(a.bytes.len());
    v["digest"] = json!(a.digest);
    v
}

fn template(text: &str) -> Value {
    serde_json::from_str(text).expect("example bodies are JSON")
}
