//! Routing and the handlers that answer (and change the state) like GitHub.

use std::collections::BTreeMap;

use base64::Engine as _;
use http::{HeaderMap, Method, Uri};
use serde_json::{Value, json};

use super::state::*;

const DOCS: &str = "https://docs.github.com/rest";

/// The contents API gives a file's content inline up to 1 MB; above, the
/// content is empty and the encoding `none` (the blob API gives it).
pub const INLINE_CONTENT_LIMIT: usize = 1024 * 1024;

/// The fake's answer to one request.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
}

fn answer(status: u16, body: Value) -> Answer {
    Answer { status, headers: Vec::new(), body: Some(body) }
}

fn no_content() -> Answer {
    Answer { status: 204, headers: Vec::new(), body: None }
}

fn error(status: u16, message: &str) -> Answer {
    answer(status, json!({ "message": message, "documentation_url": DOCS, "status": status.to_string() }))
}

fn not_found() -> Answer {
    error(404, "Not Found")
}

fn validation(message: &str, errors: Value) -> Answer {
    answer(422, json!({ "message": message, "documentation_url": DOCS, "errors": errors }))
}

/// Routes the fake knows, as OpenAPI path templates. A last segment named
/// `{path}` or `{ref}` takes the rest of the path, slashes included.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/repos/{owner}/{repo}"),
    ("GET", "/repos/{owner}/{repo}/issues"),
    ("POST", "/repos/{owner}/{repo}/issues"),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("PUT", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
    ("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/events"),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("GET", "/repos/{owner}/{repo}/labels"),
    ("POST", "/repos/{owner}/{repo}/labels"),
    ("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission"),
    ("GET", "/repos/{owner}/{repo}/contents/{path}"),
    ("PUT", "/repos/{owner}/{repo}/contents/{path}"),
    ("GET", "/repos/{owner}/{repo}/git/ref/{ref}"),
    ("GET", "/repos/{owner}/{repo}/git/blobs/{file_sha}"),
    ("POST", "/repos/{owner}/{repo}/git/refs"),
    ("POST", "/repos/{owner}/{repo}/git/commits"),
    ("POST", "/repos/{owner}/{repo}/dispatches"),
    ("GET", "/repos/{owner}/{repo}/pulls"),
    ("POST", "/repos/{owner}/{repo}/pulls"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/commits"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/files"),
    ("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("GET", "/repos/{owner}/{repo}/rules/branches/{branch}"),
    ("GET", "/repos/{owner}/{repo}/commits"),
    ("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs"),
    ("GET", "/repos/{owner}/{repo}/commits/{ref}/status"),
    ("POST", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"),
    // Commands and the patient's comment (issue 11).
    ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers"),
    ("POST", "/graphql"),
    ("GET", "/user"),
];

/// The permission a route needs: (scope, write). `metadata` is always granted.
fn needs(method: &str, rest: &str) -> (&'static str, bool) {
    let write = method != "GET";
    let scope = match rest {
        "" | "/collaborators/{username}/permission" | "/rules/branches/{branch}" => "metadata",
        r if r.starts_with("/issues") || r.starts_with("/labels") => "issues",
        r if r.starts_with("/contents") || r.starts_with("/git/") || r == "/dispatches" => "contents",
        "/pulls/{pull_number}/merge" | "/commits" => "contents",
        r if r.starts_with("/pulls") => "pull-requests",
        r if r.ends_with("/check-runs") => "checks",
        r if r.ends_with("/status") => "statuses",
        r if r.starts_with("/actions") => "actions",
        other => unreachable!("every route has a permission: {other}"),
    };
    (scope, write)
}

/// `METHOD /template` of a request, as faults and call counts key it.
pub(super) fn route_key(method: &Method, path: &str) -> Option<String> {
    route(method, path).map(|(template, _)| format!("{method} {template}"))
}

fn route(method: &Method, path: &str) -> Option<(&'static str, BTreeMap<&'static str, String>)> {
    let got: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    'routes: for (m, template) in ROUTES {
        if *m != method.as_str() {
            continue;
        }
        let want: Vec<&'static str> = template.trim_start_matches('/').split('/').collect();
        let mut params = BTreeMap::new();
        for (i, w) in want.iter().enumerate() {
            let greedy = i == want.len() - 1 && (*w == "{path}" || *w == "{ref}");
            if greedy {
                if got.len() <= i || got[i..].iter().any(|s| s.is_empty()) {
                    continue 'routes;
                }
                params.insert(&w[1..w.len() - 1], decode(&got[i..].join("/")));
                return Some((template, params));
            }
            let Some(g) = got.get(i) else { continue 'routes };
            if w.starts_with('{') {
                if g.is_empty() {
                    continue 'routes;
                }
                params.insert(&w[1..w.len() - 1], decode(g));
            } else if w != g {
                continue 'routes;
            }
        }
        if got.len() == want.len() {
            return Some((template, params));
        }
    }
    None
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(&bytes[i..i + 3]),
                }
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

impl State {
    /// Answers one request: authentication, routing, faults, the handler;
    /// then logs the exchange.
    pub fn handle(&mut self, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Answer {
        let path = uri.path().to_string();
        self.current_path = path.clone();
        let request: Option<Value> = if body.is_empty() { None } else { serde_json::from_slice(body).ok() };
        let Some((template, params)) = route(method, &path) else {
            self.unknown.push(format!("{method} {uri}"));
            return error(404, "the fake GitHub does not know this route (recorded; the test will fail)");
        };
        let key = format!("{method} {template}");
        let mut fault = false;
        let grant = self.grant(headers);
        self.current_grant = grant.clone();
        if let Some(g) = &grant {
            self.actor = g.login.clone();
            self.workflow_actor = g.workflow_token.then(|| g.login.clone());
        }
        let refusal = match &grant {
            None => Some(error(401, "Bad credentials")),
            Some(g) => self.refuse(method, template, g),
        };
        let answer = if let Some(refusal) = refusal {
            refusal
        } else if let Some(kind) = self.fault_for(&key) {
            match (self.fault(kind.clone(), &params), kind) {
                (Some(a), _) => {
                    fault = true;
                    a
                }
                (None, FaultKind::LostAnswer(status)) => {
                    self.dispatch(method, template, &params, &query(uri), request.as_ref());
                    fault = true;
                    error(status, "injected fault: the request took effect, the answer was lost")
                }
                (None, _) => self.dispatch(method, template, &params, &query(uri), request.as_ref()),
            }
        } else {
            self.dispatch(method, template, &params, &query(uri), request.as_ref())
        };
        self.workflow_actor = None;
        self.actor = self.token_login.clone();
        self.log.push(Exchange {
            method: method.to_string(),
            route: template.to_string(),
            path: uri.to_string(),
            status: answer.status,
            request,
            response: answer.body.clone(),
            fault,
        });
        answer
    }

    /// Every fault sees every request (each counts its own); the first
    /// one that fires wins.
    fn fault_for(&mut self, key: &str) -> Option<FaultKind> {
        let mut fired = None;
        for f in &mut self.faults {
            if f.fires(key) && fired.is_none() {
                fired = Some(f.kind.clone());
            }
        }
        fired
    }

    /// The token of `Authorization: Bearer <token>` (or `token <token>`),
    /// if the fake issued it and it is not revoked.
    pub(super) fn grant(&self, headers: &HeaderMap) -> Option<Grant> {
        let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") && !scheme.eq_ignore_ascii_case("token") {
            return None;
        }
        self.tokens.get(token.trim()).filter(|g| !g.revoked).cloned()
    }

    /// GitHub's 403 for a token without the permission the route needs
    /// (a workflow job's `permissions:`, an app's installation permissions).
    fn refuse(&self, method: &Method, template: &str, grant: &Grant) -> Option<Answer> {
        if template == "/user" {
            // Anyone authenticated may ask who they are.
            return None;
        }
        if template == "/graphql" {
            // Each field needs its own permission (graphql.rs).
            return None;
        }
        let (scope, write) = needs(method.as_str(), template.trim_start_matches("/repos/{owner}/{repo}"));
        if write && !self.token_can_write {
            return Some(error(403, "Resource not accessible by integration"));
        }
        (!grant.permissions.allows(scope, write)).then(|| error(403, "Resource not accessible by integration"))
    }

    /// The answer of a fault, or `None` when the fault changes state and
    /// lets the request through (a concurrent writer).
    fn fault(&mut self, kind: FaultKind, params: &BTreeMap<&str, String>) -> Option<Answer> {
        let with = |mut a: Answer, h: Vec<(&str, String)>| {
            a.headers.extend(h.into_iter().map(|(k, v)| (k.to_string(), v)));
            a
        };
        let reset = |secs: u64| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
            (now + secs).to_string()
        };
        Some(match kind {
            FaultKind::Status(s) => error(s, "injected fault"),
            FaultKind::RetryAfter403(secs) => with(
                error(403, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."),
                vec![("retry-after", secs.to_string())],
            ),
            FaultKind::SecondaryLimit403 => {
                error(403, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
            }
            FaultKind::TooMany(secs) => with(error(429, "Too Many Requests"), vec![("retry-after", secs.to_string())]),
            FaultKind::RateLimitExhausted(secs) => with(
                error(403, "API rate limit exceeded for installation."),
                vec![
                    ("x-ratelimit-limit", "5000".into()),
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", reset(secs)),
                ],
            ),
            FaultKind::ShaMissing422 => error(422, "Invalid request.\n\n\"sha\" wasn't supplied."),
            FaultKind::LostAnswer(_) => return None,
            FaultKind::ConcurrentWrite { branch, text } => {
                // A route without a file (a merge): a file of its own, so the branch moves.
                let path = params.get("path").cloned().unwrap_or_else(|| "pushed-meanwhile.txt".into());
                let actor = self.workflow_actor.take();
                self.put_file(&branch, &path, &text);
                self.workflow_actor = actor;
                return None;
            }
        })
    }

    fn dispatch(
        &mut self,
        method: &Method,
        template: &str,
        p: &BTreeMap<&str, String>,
        q: &BTreeMap<String, String>,
        body: Option<&Value>,
    ) -> Answer {
        if template == "/graphql" {
            let grant = self.current_grant.clone().expect("an authenticated request");
            return self.graphql(body, &grant);
        }
        if template == "/user" {
            // As GitHub: a user's token says whose it is; an installation
            // token (a job's, an app's) is no user.
            if self.actor.ends_with("[bot]") {
                return error(403, "Resource not accessible by integration");
            }
            return answer(200, json!({ "login": self.actor, "id": 1, "type": "User" }));
        }
        if !self.repo_exists || p.get("owner") != Some(&self.owner) || p.get("repo") != Some(&self.repo) {
            return not_found();
        }
        let num = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let empty = json!({});
        let body = body.unwrap_or(&empty);
        let rest = template.trim_start_matches("/repos/{owner}/{repo}");
        match (method.as_str(), rest) {
            ("GET", "") => self.get_repo(),
            ("GET", "/issues") => self.list_issues(q),
            ("POST", "/issues") => self.create_issue(body),
            ("GET", "/issues/{issue_number}") => self.get_issue(num("issue_number")),
            ("PATCH", "/issues/{issue_number}") => self.update_issue(num("issue_number"), body),
            ("PUT", "/issues/{issue_number}/labels") => self.set_labels(num("issue_number"), body),
            ("DELETE", "/issues/{issue_number}/labels") => self.remove_labels(num("issue_number")),
            ("GET", "/issues/{issue_number}/events") => self.list_events(num("issue_number"), q),
            ("GET", "/issues/{issue_number}/comments") => self.list_comments(num("issue_number"), q),
            ("POST", "/issues/{issue_number}/comments") => self.create_comment(num("issue_number"), body),
            ("GET", "/labels") => {
                let all: Vec<Value> = self.labels.values().map(|l| self.label_json(l)).collect();
                self.page(all, q)
            }
            ("POST", "/labels") => self.create_label(body),
            ("GET", "/collaborators/{username}/permission") => self.permission(&p["username"]),
            ("GET", "/contents/{path}") => self.get_contents(&p["path"], q),
            ("PUT", "/contents/{path}") => self.put_contents(&p["path"], body),
            ("GET", "/git/ref/{ref}") => self.get_ref(&p["ref"]),
            ("GET", "/git/blobs/{file_sha}") => self.get_blob(&p["file_sha"]),
            ("POST", "/git/refs") => self.create_ref(body),
            ("POST", "/git/commits") => self.create_commit(body),
            ("POST", "/dispatches") => self.create_dispatch(body),
            ("GET", "/pulls") => self.list_pulls(q),
            ("POST", "/pulls") => self.create_pull(body),
            ("GET", "/pulls/{pull_number}/reviews") => self.list_reviews(num("pull_number"), q),
            ("GET", "/pulls/{pull_number}/commits") => self.list_commits(num("pull_number"), q),
            ("GET", "/pulls/{pull_number}/files") => self.list_files(num("pull_number"), q),
            ("PUT", "/pulls/{pull_number}/merge") => self.merge(num("pull_number"), body),
            ("GET", "/rules/branches/{branch}") => self.branch_rules(&p["branch"]),
            ("GET", "/commits") => self.list_branch_commits(q),
            ("GET", "/commits/{ref}/check-runs") => self.check_runs_for(&p["ref"]),
            ("GET", "/commits/{ref}/status") => self.combined_status(&p["ref"]),
            ("POST", "/actions/workflows/{workflow_id}/dispatches") => {
                self.create_workflow_dispatch(&p["workflow_id"], body)
            }
            // Commands and the patient's comment (issue 11).
            ("PATCH", "/issues/comments/{comment_id}") => self.edit_comment(num("comment_id"), body),
            ("POST", "/issues/comments/{comment_id}/reactions") => self.react(num("comment_id"), body),
            ("POST", "/pulls/{pull_number}/requested_reviewers") => self.request_reviewers(num("pull_number"), body),
            _ => unreachable!("every route in ROUTES has a handler: {method} {template}"),
        }
    }

    pub(super) fn repo_url(&self) -> String {
        format!("{}/repos/{}/{}", self.base_url, self.owner, self.repo)
    }

    /// The fake is its own github.com: pages and git live at its URL.
    pub(super) fn html_url(&self) -> String {
        format!("{}/{}/{}", self.base_url, self.owner, self.repo)
    }

    /// `per_page`/`page` pagination with a `Link` header, as GitHub does.
    fn page(&self, items: Vec<Value>, q: &BTreeMap<String, String>) -> Answer {
        self.page_by(items.len(), q, |start, end| items[start..end].to_vec())
    }

    /// Pagination over `total` items of which only the requested page is
    /// built (`slice(start, end)`), so listing thousands of issues page by
    /// page costs the fake per page, not per issue per page.
    fn page_by(
        &self,
        total: usize,
        q: &BTreeMap<String, String>,
        slice: impl FnOnce(usize, usize) -> Vec<Value>,
    ) -> Answer {
        let per_page = q.get("per_page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(30).clamp(1, 100);
        let page = q.get("page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1).max(1);
        let start = ((page - 1) * per_page).min(total);
        let end = (start + per_page).min(total);
        let mut a = answer(200, Value::Array(slice(start, end)));
        // As GitHub: `next` and `last` while pages follow, `prev` and
        // `first` after the first page.
        let last = total.div_ceil(per_page).max(1);
        let url = |n: usize| {
            let mut other = q.clone();
            other.insert("page".into(), n.to_string());
            let qs: Vec<String> = other.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
            format!("{}{}?{}", self.base_url, self.current_path, qs.join("&"))
        };
        let mut links = Vec::new();
        if page > 1 {
            links.push(format!("<{}>; rel=\"prev\"", url((page - 1).min(last))));
        }
        if start + per_page < total {
            links.push(format!("<{}>; rel=\"next\"", url(page + 1)));
            links.push(format!("<{}>; rel=\"last\"", url(last)));
        }
        if page > 1 {
            links.push(format!("<{}>; rel=\"first\"", url(1)));
        }
        if !links.is_empty() {
            a.headers.push(("link".into(), links.join(", ")));
        }
        a
    }

    // -- repository ---------------------------------------------------------

    fn get_repo(&self) -> Answer {
        let mut r = template("full-repository-default-response");
        // Upstream's example breaks its own schema in `parent`/`source`
        // (no `language`); a repository that is no fork has neither.
        if let Some(o) = r.as_object_mut() {
            o.remove("parent");
            o.remove("source");
            // ... and it has no top-level `language` either.
            o.entry("language").or_insert(json!("Rust"));
        }
        r["name"] = json!(self.repo);
        r["full_name"] = json!(format!("{}/{}", self.owner, self.repo));
        r["default_branch"] = json!("main");
        r["url"] = json!(self.repo_url());
        answer(200, r)
    }

    // -- issues -------------------------------------------------------------

    pub(super) fn user_json(&self, login: &str) -> Value {
        // The example's user alone (cloning the whole example issue for it
        // was most of what a listing of thousands of issues cost the fake).
        static USER: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        let mut u = USER.get_or_init(|| template("issue")["user"].clone()).clone();
        u["login"] = json!(login);
        u["type"] = json!(if login.ends_with("[bot]") { "Bot" } else { "User" });
        u
    }

    pub(super) fn label_json(&self, l: &FakeLabel) -> Value {
        json!({
            "id": l.id, "node_id": format!("LA_{}", l.id),
            "url": format!("{}/labels/{}", self.repo_url(), encode(&l.name)),
            "name": l.name, "description": l.description, "color": l.color, "default": false,
        })
    }

    pub(super) fn issue_json(&self, i: &FakeIssue) -> Value {
        let mut v = template("issue");
        if let Some(o) = v.as_object_mut() {
            o.remove("pull_request");
            o.remove("pinned_comment");
        }
        let url = format!("{}/issues/{}", self.repo_url(), i.number);
        v["number"] = json!(i.number);
        v["id"] = json!(100_000 + i.number);
        v["url"] = json!(url);
        v["repository_url"] = json!(self.repo_url());
        v["labels_url"] = json!(format!("{url}/labels{{/name}}"));
        v["comments_url"] = json!(format!("{url}/comments"));
        v["events_url"] = json!(format!("{url}/events"));
        v["html_url"] = json!(format!("{}/issues/{}", self.html_url(), i.number));
        v["title"] = json!(i.title);
        v["body"] = json!(i.body);
        v["user"] = self.user_json(&i.author);
        v["state"] = json!(if i.open { "open" } else { "closed" });
        v["state_reason"] = if i.open { Value::Null } else { json!("completed") };
        v["created_at"] = json!(i.created_at);
        v["updated_at"] = json!(i.closed_at.as_ref().unwrap_or(&i.created_at));
        v["closed_at"] = json!(i.closed_at);
        v["closed_by"] = match &i.closed_by {
            Some(who) if !i.open => self.user_json(who),
            _ => Value::Null,
        };
        v["comments"] = json!(self.comments.iter().filter(|c| c.issue == i.number).count());
        v["labels"] = Value::Array(
            i.labels.iter().filter_map(|n| self.labels.get(&n.to_lowercase())).map(|l| self.label_json(l)).collect(),
        );
        v
    }

    fn list_issues(&self, q: &BTreeMap<String, String>) -> Answer {
        let state = q.get("state").map(String::as_str).unwrap_or("open");
        let wanted: Vec<String> =
            q.get("labels").map(|l| l.split(',').map(|s| s.trim().to_lowercase()).collect()).unwrap_or_default();
        let items = self
            .issues
            .values()
            .filter(|i| match state {
                "open" => i.open,
                "closed" => !i.open,
                _ => true,
            })
            .filter(|i| wanted.iter().all(|w| w.is_empty() || i.labels.iter().any(|l| same_label(l, w))))
            // `since`: only issues updated at or after it (here: closed or created).
            .filter(|i| match q.get("since") {
                Some(since) => i.closed_at.as_ref().unwrap_or(&i.created_at).as_str() >= since.as_str(),
                None => true,
            })
            .collect::<Vec<_>>();
        self.page_by(items.len(), q, |start, end| items[start..end].iter().map(|i| self.issue_json(i)).collect())
    }

    /// A pull request as GitHub's issues API shows it: an issue with a
    /// `pull_request` key.
    fn pull_as_issue_json(&self, p: &FakePull) -> Value {
        let issue = FakeIssue {
            number: p.number,
            title: p.title.clone(),
            body: p.body.clone(),
            author: p.author.clone(),
            open: p.open,
            labels: p.labels.clone(),
            created_at: p.created_at.clone(),
            closed_at: p.closed_at.clone(),
            closed_by: None,
        };
        let mut v = self.issue_json(&issue);
        v["pull_request"] = json!({ "url": format!("{}/pulls/{}", self.repo_url(), p.number) });
        v
    }

    fn get_issue(&self, n: u64) -> Answer {
        if let Some(p) = self.pulls.get(&n) {
            return answer(200, self.pull_as_issue_json(p));
        }
        match self.issues.get(&n) {
            Some(i) => answer(200, self.issue_json(i)),
            None => not_found(),
        }
    }

    fn create_issue(&mut self, body: &Value) -> Answer {
        let Some(title) = body.get("title").and_then(Value::as_str) else {
            return validation(
                "Validation Failed",
                json!([{ "resource": "Issue", "code": "missing_field", "field": "title" }]),
            );
        };
        let labels: Vec<String> = body
            .get("labels")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| l.as_str().map(String::from))
            .collect();
        let login = self.actor.clone();
        let text = body.get("body").and_then(Value::as_str).unwrap_or("").to_string();
        let label_refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        let n = self.add_issue(title, &text, &login, &label_refs);
        answer(201, self.issue_json(&self.issues[&n]))
    }

    fn update_issue(&mut self, n: u64, body: &Value) -> Answer {
        let Some(issue) = self.issues.get(&n) else { return not_found() };
        let was_open = issue.open;
        let close = match body.get("state").and_then(Value::as_str) {
            Some("closed") => Some(true),
            Some("open") => Some(false),
            Some(other) => {
                return validation(
                    "Validation Failed",
                    json!([{ "resource": "Issue", "code": "invalid", "field": "state", "message": other }]),
                );
            }
            None => None,
        };
        if let Some(t) = body.get("title").and_then(Value::as_str) {
            self.issues.get_mut(&n).unwrap().title = t.into();
        }
        let actor = self.actor.clone();
        match close {
            Some(true) if was_open => self.close(n, &actor),
            Some(false) if !was_open => {
                let i = self.issues.get_mut(&n).unwrap();
                i.open = true;
                i.closed_at = None;
                i.closed_by = None;
                let payload = self.issue_payload("reopened", n, None);
                self.deliver("issues", payload, &actor);
            }
            _ => {}
        }
        answer(200, self.issue_json(&self.issues[&n]))
    }

    fn set_labels(&mut self, n: u64, body: &Value) -> Answer {
        if !self.issues.contains_key(&n) && !self.pulls.contains_key(&n) {
            return not_found();
        }
        let Some(labels) = body.get("labels").and_then(Value::as_array) else {
            return validation(
                "Invalid request.\n\n\"labels\" wasn't supplied.",
                json!([{ "code": "missing_field", "field": "labels" }]),
            );
        };
        if labels.is_empty() {
            return validation(
                "Invalid request.\n\nlabels: minItems 1",
                json!([{ "code": "invalid", "field": "labels" }]),
            );
        }
        let names: Vec<String> = labels
            .iter()
            .filter_map(|l| l.as_str().map(String::from).or_else(|| l.get("name")?.as_str().map(String::from)))
            .collect();
        if let Some(p) = self.pulls.get_mut(&n) {
            // A pull request's labels; GitHub makes a label it does not know.
            p.labels = names.clone();
            for name in &names {
                self.label_named(name);
            }
            let out = names.iter().filter_map(|l| self.labels.get(&l.to_lowercase())).map(|l| self.label_json(l));
            return answer(200, Value::Array(out.collect()));
        }
        let actor = self.actor.clone();
        self.apply_labels(n, &names, &actor);
        let out = self.issues[&n]
            .labels
            .iter()
            .filter_map(|l| self.labels.get(&l.to_lowercase()))
            .map(|l| self.label_json(l))
            .collect();
        answer(200, Value::Array(out))
    }

    fn remove_labels(&mut self, n: u64) -> Answer {
        if !self.issues.contains_key(&n) {
            return not_found();
        }
        let actor = self.actor.clone();
        self.apply_labels(n, &[], &actor);
        no_content()
    }

    fn list_events(&self, n: u64, q: &BTreeMap<String, String>) -> Answer {
        if !self.issues.contains_key(&n) {
            return not_found();
        }
        let t = template("issue-event-for-issue-items")[0].clone();
        let items = self
            .label_events
            .iter()
            .filter(|e| e.issue == n)
            .map(|e| {
                let mut v = t.clone();
                v["id"] = json!(e.id);
                v["url"] = json!(format!("{}/issues/events/{}", self.repo_url(), e.id));
                v["actor"] = self.user_json(&e.actor);
                v["event"] = json!(if e.labeled { "labeled" } else { "unlabeled" });
                v["created_at"] = json!(e.at);
                v["commit_id"] = Value::Null;
                v["commit_url"] = Value::Null;
                let color = self.labels.get(&e.label.to_lowercase()).map(|l| l.color.clone()).unwrap_or_default();
                v["label"] = json!({ "name": e.label, "color": color });
                v
            })
            .collect();
        self.page(items, q)
    }

    pub(super) fn comment_json(&self, c: &FakeComment) -> Value {
        let mut v = template("issue-comment");
        v["id"] = json!(c.id);
        v["url"] = json!(format!("{}/issues/comments/{}", self.repo_url(), c.id));
        v["html_url"] = json!(format!("{}/issues/{}#issuecomment-{}", self.html_url(), c.issue, c.id));
        v["issue_url"] = json!(format!("{}/issues/{}", self.repo_url(), c.issue));
        v["body"] = json!(c.body);
        v["user"] = self.user_json(&c.author);
        v["created_at"] = json!(c.at);
        v["updated_at"] = json!(c.at);
        v
    }

    fn list_comments(&self, n: u64, q: &BTreeMap<String, String>) -> Answer {
        if !self.issues.contains_key(&n) {
            return not_found();
        }
        let items = self.comments.iter().filter(|c| c.issue == n).map(|c| self.comment_json(c)).collect();
        self.page(items, q)
    }

    fn create_comment(&mut self, n: u64, body: &Value) -> Answer {
        if !self.issues.contains_key(&n) {
            return not_found();
        }
        let Some(text) = body.get("body").and_then(Value::as_str) else {
            return validation(
                "Validation Failed",
                json!([{ "resource": "IssueComment", "code": "missing_field", "field": "body" }]),
            );
        };
        let actor = self.actor.clone();
        let id = self.add_comment(n, text, &actor);
        let c = self.comments.iter().find(|c| c.id == id).unwrap().clone();
        answer(201, self.comment_json(&c))
    }

    // --- Commands and the patient's comment (issue 11) ---

    /// PATCH a comment's body: only its author (or someone who may write
    /// issues; the token's scope was checked) edits it; GitHub delivers
    /// `issue_comment` edited.
    pub(super) fn edit_comment(&mut self, id: u64, body: &Value) -> Answer {
        let Some(text) = body.get("body").and_then(Value::as_str) else {
            return validation(
                "Validation Failed",
                json!([{ "resource": "IssueComment", "code": "missing_field", "field": "body" }]),
            );
        };
        let Some(c) = self.comments.iter_mut().find(|c| c.id == id) else { return not_found() };
        let before = std::mem::replace(&mut c.body, text.to_string());
        let c = c.clone();
        let mut payload = self.comment_payload(id);
        payload["action"] = json!("edited");
        payload["changes"] = json!({ "body": { "from": before } });
        let actor = self.actor.clone();
        self.deliver("issue_comment", payload, &actor);
        let mut v = self.comment_json(&c);
        v["updated_at"] = json!(self.now());
        answer(200, v)
    }

    /// A reaction: 201 when new, 200 when this user already reacted so,
    /// 422 for a content GitHub does not know.
    fn react(&mut self, id: u64, body: &Value) -> Answer {
        const CONTENTS: [&str; 8] = ["+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"];
        let content = body.get("content").and_then(Value::as_str).unwrap_or_default().to_string();
        if !CONTENTS.contains(&content.as_str()) {
            return validation(
                "Validation Failed",
                json!([{ "resource": "Reaction", "code": "invalid", "field": "content" }]),
            );
        }
        if !self.comments.iter().any(|c| c.id == id) {
            return not_found();
        }
        let actor = self.actor.clone();
        let exists = self.reactions.iter().any(|(c, who, what)| *c == id && *who == actor && *what == content);
        if !exists {
            self.reactions.push((id, actor.clone(), content.clone()));
        }
        let mut v = template("reaction");
        v["id"] = json!(self.id());
        v["user"] = self.user_json(&actor);
        v["content"] = json!(content);
        v["created_at"] = json!(self.now());
        answer(if exists { 200 } else { 201 }, v)
    }

    /// Review requests, refused as GitHub refuses them: the pull
    /// request's author (422), and anyone who is not a collaborator (422).
    fn request_reviewers(&mut self, n: u64, body: &Value) -> Answer {
        let Some(pull) = self.pulls.get(&n).cloned() else { return not_found() };
        let list = |k: &str| -> Vec<String> {
            body.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        };
        let (users, teams) = (list("reviewers"), list("team_reviewers"));
        if users.iter().any(|u| u.eq_ignore_ascii_case(&pull.author)) {
            return validation("Review cannot be requested from pull request author.", json!([]));
        }
        if users.iter().any(|u| !self.collaborators.contains_key(u)) {
            let message = format!(
                "Reviews may only be requested from collaborators. One or more of the users or teams you specified is \
                 not a collaborator of the {}/{} repository.",
                self.owner, self.repo
            );
            return validation(&message, json!([]));
        }
        for who in users.into_iter().chain(teams.into_iter().map(|t| format!("team:{t}"))) {
            if !self.review_requests.contains(&(n, who.clone())) {
                self.review_requests.push((n, who));
            }
        }
        let pull = self.pulls.get(&n).cloned().expect("read above");
        answer(201, self.pull_json(&pull, false))
    }

    fn create_label(&mut self, body: &Value) -> Answer {
        let Some(name) = body.get("name").and_then(Value::as_str) else {
            return validation(
                "Validation Failed",
                json!([{ "resource": "Label", "code": "missing_field", "field": "name" }]),
            );
        };
        if self.labels.contains_key(&name.to_lowercase()) {
            return validation(
                "Validation Failed",
                json!([{ "resource": "Label", "code": "already_exists", "field": "name" }]),
            );
        }
        let color = body.get("color").and_then(Value::as_str).unwrap_or("ededed");
        if color.len() != 6 || !color.chars().all(|c| c.is_ascii_hexdigit()) {
            return validation(
                "Validation Failed",
                json!([{ "resource": "Label", "code": "invalid", "field": "color" }]),
            );
        }
        let id = self.id();
        let l = FakeLabel {
            id,
            name: name.into(),
            color: color.into(),
            description: body.get("description").and_then(Value::as_str).map(String::from),
        };
        let v = self.label_json(&l);
        self.labels.insert(name.to_lowercase(), l);
        answer(201, v)
    }

    fn permission(&self, login: &str) -> Answer {
        if !self.users.contains(login) {
            return error(404, &format!("{login} is not a user"));
        }
        let role = self.collaborators.get(login).map(String::as_str).unwrap_or("none");
        // The legacy field knows four values only.
        let legacy = match role {
            "admin" => "admin",
            "maintain" | "write" => "write",
            "triage" | "read" => "read",
            _ => "none",
        };
        let mut v = template("repository-collaborator-permission-response-if-user-has-admin-permissions");
        v["permission"] = json!(legacy);
        v["role_name"] = json!(role);
        v["user"]["login"] = json!(login);
        // The schema wants the user's role too; upstream's example omits it.
        v["user"]["role_name"] = json!(role);
        answer(200, v)
    }

    // -- contents and git ---------------------------------------------------

    fn content_json(&self, git_ref: &str, path: &str, content: &[u8], sha: &str) -> Value {
        let mut v = template("content-file-response-if-content-is-a-file");
        let encoded = base64::engine::general_purpose::STANDARD.encode(content);
        // GitHub wraps the base64 at 60 characters.
        let wrapped: Vec<String> =
            encoded.as_bytes().chunks(60).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        let name = path.rsplit('/').next().unwrap_or(path);
        let url = format!("{}/contents/{path}?ref={git_ref}", self.repo_url());
        let git = format!("{}/git/blobs/{sha}", self.repo_url());
        let html = format!("{}/blob/{git_ref}/{path}", self.html_url());
        v["name"] = json!(name);
        v["path"] = json!(path);
        v["sha"] = json!(sha);
        v["size"] = json!(content.len());
        v["content"] = json!(wrapped.join("\n") + "\n");
        v["url"] = json!(url);
        v["git_url"] = json!(git);
        v["html_url"] = json!(html);
        v["download_url"] =
            json!(format!("https://raw.githubusercontent.com/{}/{}/{git_ref}/{path}", self.owner, self.repo));
        v["_links"] = json!({ "self": url, "git": git, "html": html });
        v
    }

    fn get_contents(&mut self, path: &str, q: &BTreeMap<String, String>) -> Answer {
        let git_ref = q.get("ref").cloned().unwrap_or_else(|| "main".into());
        if self.git.resolve(&git_ref).is_none() {
            return error(404, &format!("No commit found for the ref {git_ref}"));
        }
        if self.git.files(&git_ref).keys().any(|f| f.starts_with(&format!("{path}/"))) {
            self.unknown.push(format!("GET contents of the directory `{path}` (the fake answers files only)"));
            return not_found();
        }
        match self.git.read_file(&git_ref, path) {
            // As GitHub: over 1 MB the object comes without its content.
            Some((content, sha)) if content.len() > INLINE_CONTENT_LIMIT => {
                let mut v = self.content_json(&git_ref, path, b"", &sha);
                v["size"] = json!(content.len());
                v["encoding"] = json!("none");
                v["content"] = json!("");
                answer(200, v)
            }
            Some((content, sha)) => answer(200, self.content_json(&git_ref, path, &content, &sha)),
            None => not_found(),
        }
    }

    /// `GET /git/blobs/{sha}`: any blob up to 100 MB, base64.
    fn get_blob(&self, sha: &str) -> Answer {
        match self.git.blob(sha) {
            Some(bytes) if bytes.len() > 100 * 1024 * 1024 => {
                error(403, "This API returns blobs up to 100 MB in size.")
            }
            Some(bytes) => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
                let wrapped: Vec<String> =
                    encoded.as_bytes().chunks(60).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
                answer(
                    200,
                    json!({
                        "sha": sha, "node_id": format!("B_{sha}"), "size": bytes.len(),
                        "url": format!("{}/git/blobs/{sha}", self.repo_url()),
                        "content": wrapped.join("\n") + "\n", "encoding": "base64",
                    }),
                )
            }
            None => not_found(),
        }
    }

    fn put_contents(&mut self, path: &str, body: &Value) -> Answer {
        let (Some(message), Some(content)) =
            (body.get("message").and_then(Value::as_str), body.get("content").and_then(Value::as_str))
        else {
            return validation(
                "Invalid request.\n\n\"message\" and \"content\" are required.",
                json!([{ "code": "missing_field" }]),
            );
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(content) else {
            return validation("content is not valid Base64", json!([{ "code": "invalid", "field": "content" }]));
        };
        let branch = body.get("branch").and_then(Value::as_str).unwrap_or("main").to_string();
        let Some(head) = self.git.branch_head(&branch) else {
            return error(404, &format!("Branch {branch} not found"));
        };
        let current = self.git.read_file(&branch, path).map(|(_, sha)| sha);
        let given = body.get("sha").and_then(Value::as_str);
        match (&current, given) {
            (Some(_), None) => {
                return validation(
                    "Invalid request.\n\n\"sha\" wasn't supplied.",
                    json!([{ "code": "missing_field", "field": "sha" }]),
                );
            }
            (Some(cur), Some(g)) if cur != g => {
                return error(409, &format!("{path} does not match {g}"));
            }
            (None, Some(g)) => return error(409, &format!("{path} does not match {g}")),
            _ => {}
        }
        let created = current.is_none();
        let (actor, at) = (self.actor.clone(), self.now_secs());
        let (commit, blob) = match self.git.write_file(&branch, path, &bytes, message, &actor, at, Some(&head)) {
            Ok(written) => written,
            Err(_) => return error(409, &format!("{path} does not match {}", given.unwrap_or_default())),
        };
        self.sync_refs(&actor);
        let mut v = template(if created {
            "file-commit-example-for-creating-a-file"
        } else {
            "file-commit-example-for-updating-a-file"
        });
        let content = self.content_json(&branch, path, &bytes, &blob);
        for k in ["name", "path", "sha", "size", "url", "html_url", "git_url", "download_url", "_links"] {
            v["content"][k] = content[k].clone();
        }
        v["commit"]["sha"] = json!(commit);
        v["commit"]["message"] = json!(message);
        answer(if created { 201 } else { 200 }, v)
    }

    fn ref_json(&self, name: &str, sha: &str) -> Value {
        let mut v = template("git-ref");
        v["ref"] = json!(name);
        v["url"] = json!(format!("{}/git/{name}", self.repo_url()));
        v["object"]["sha"] = json!(sha);
        v["object"]["url"] = json!(format!("{}/git/commits/{sha}", self.repo_url()));
        v
    }

    fn get_ref(&self, r: &str) -> Answer {
        let full = format!("refs/{r}");
        match self.git.refs().get(&full) {
            Some(sha) if r.starts_with("heads/") || r.starts_with("tags/") => answer(200, self.ref_json(&full, sha)),
            _ => not_found(),
        }
    }

    fn create_commit(&mut self, body: &Value) -> Answer {
        let tree = body.get("tree").and_then(Value::as_str).unwrap_or_default().to_string();
        let message = body.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
        let parents: Vec<String> = body
            .get("parents")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(String::from))
            .collect();
        let (actor, at) = (self.actor.clone(), self.now_secs());
        let sha = match self.git.commit_tree(&tree, &parents, &message, &actor, at) {
            Ok(sha) => sha,
            Err(why) if why.starts_with("Tree") => {
                return validation("Tree SHA does not exist", json!([{ "code": "invalid", "field": "tree" }]));
            }
            Err(_) => {
                return validation(
                    "Parent SHA does not exist or is not a commit object",
                    json!([{ "code": "invalid", "field": "parents" }]),
                );
            }
        };
        answer(
            201,
            json!({
                "sha": sha, "node_id": "C_x", "url": format!("{}/git/commits/{sha}", self.repo_url()),
                "html_url": format!("{}/commit/{sha}", self.html_url()),
                "message": message,
                "tree": { "sha": tree, "url": format!("{}/git/trees/{tree}", self.repo_url()) },
                "parents": parents.iter().map(|p| json!({ "sha": p, "url": format!("{}/git/commits/{p}", self.repo_url()) })).collect::<Vec<_>>(),
            }),
        )
    }

    fn create_ref(&mut self, body: &Value) -> Answer {
        let (Some(name), Some(sha)) =
            (body.get("ref").and_then(Value::as_str), body.get("sha").and_then(Value::as_str))
        else {
            return validation("Invalid request.", json!([{ "code": "missing_field" }]));
        };
        if !(name.starts_with("refs/heads/") || name.starts_with("refs/tags/")) || name.matches('/').count() < 2 {
            return validation("Reference name must start with refs/", json!([{ "code": "invalid", "field": "ref" }]));
        }
        if self.git.refs().contains_key(name) {
            return validation("Reference already exists", json!([{ "code": "already_exists", "field": "ref" }]));
        }
        if self.git.commit(sha).is_none() {
            return validation("Object does not exist", json!([{ "code": "invalid", "field": "sha" }]));
        }
        if let Err(why) = self.git.set_ref(name, sha, None) {
            return validation(&why, json!([{ "code": "invalid", "field": "ref" }]));
        }
        let actor = self.actor.clone();
        self.sync_refs(&actor);
        let mut a = answer(201, self.ref_json(name, sha));
        a.headers.push(("location".into(), format!("{}/git/{name}", self.repo_url())));
        a
    }

    fn create_dispatch(&mut self, body: &Value) -> Answer {
        match body.get("event_type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() && t.len() <= 100 => {
                self.dispatches.push(body.clone());
                let actor = self.actor.clone();
                let client_payload = body.get("client_payload").cloned().unwrap_or(json!({}));
                self.repository_dispatch(t, client_payload, &actor);
                no_content()
            }
            _ => validation(
                "Invalid request.\n\n\"event_type\" wasn't supplied.",
                json!([{ "code": "missing_field", "field": "event_type" }]),
            ),
        }
    }

    fn create_workflow_dispatch(&mut self, workflow: &str, body: &Value) -> Answer {
        let Some(git_ref) = body.get("ref").and_then(Value::as_str) else {
            return validation(
                "Invalid request.\n\n\"ref\" wasn't supplied.",
                json!([{ "code": "missing_field", "field": "ref" }]),
            );
        };
        let inputs = body.get("inputs").and_then(Value::as_object).cloned().unwrap_or_default();
        let actor = self.actor.clone();
        match self.dispatch_workflow(workflow, git_ref, &inputs, &actor) {
            Ok(()) => no_content(),
            Err((404, m)) => error(404, &m),
            Err((status, m)) => error(status, &m),
        }
    }

    // -- pull requests ------------------------------------------------------

    pub(super) fn pull_json(&self, p: &FakePull, full: bool) -> Value {
        let mut v = if full { template("pull-request") } else { template("pull-request-simple-items")[0].clone() };
        let url = format!("{}/pulls/{}", self.repo_url(), p.number);
        v["url"] = json!(url);
        v["id"] = json!(200_000 + p.number);
        v["number"] = json!(p.number);
        v["html_url"] = json!(format!("{}/pull/{}", self.html_url(), p.number));
        v["state"] = json!(if p.open { "open" } else { "closed" });
        v["title"] = json!(p.title);
        v["body"] = json!(p.body);
        v["user"] = self.user_json(&p.author);
        v["created_at"] = json!(p.created_at);
        v["updated_at"] = json!(p.closed_at.as_ref().unwrap_or(&p.created_at));
        v["merged_at"] = if p.merged { json!(p.closed_at) } else { Value::Null };
        v["closed_at"] = json!(p.closed_at);
        v["merge_commit_sha"] = json!(p.merge_commit);
        v["head"]["ref"] = json!(p.head);
        v["head"]["sha"] = json!(p.head_sha);
        v["head"]["label"] = json!(format!("{}:{}", self.owner, p.head));
        v["base"]["ref"] = json!(p.base);
        v["base"]["sha"] = json!(self.git.branch_head(&p.base).unwrap_or_default());
        v["base"]["label"] = json!(format!("{}:{}", self.owner, p.base));
        v["labels"] = json!([]);
        // Upstream's example teams lack the `type` their schema requires;
        // ward requests no reviewers, so there are none.
        v["requested_teams"] = json!([]);
        v["requested_reviewers"] = json!([]);
        if full {
            v["merged"] = json!(p.merged);
            v["merged_by"] = p.merged_by.as_ref().map(|m| self.user_json(m)).unwrap_or(Value::Null);
        }
        v
    }

    fn list_pulls(&self, q: &BTreeMap<String, String>) -> Answer {
        let state = q.get("state").map(String::as_str).unwrap_or("open");
        let head = q.get("head").cloned();
        let items = self
            .pulls
            .values()
            .filter(|p| match state {
                "open" => p.open,
                "closed" => !p.open,
                _ => true,
            })
            .filter(|p| head.as_ref().is_none_or(|h| *h == format!("{}:{}", self.owner, p.head)))
            .map(|p| self.pull_json(p, false))
            .collect();
        self.page(items, q)
    }

    fn create_pull(&mut self, body: &Value) -> Answer {
        let s = |k: &str| body.get(k).and_then(Value::as_str).map(String::from);
        let (Some(title), Some(head), Some(base)) = (s("title"), s("head"), s("base")) else {
            return validation("Validation Failed", json!([{ "resource": "PullRequest", "code": "missing_field" }]));
        };
        // Off by default on GitHub (Settings → Actions → "Allow GitHub
        // Actions to create and approve pull requests").
        if self.workflow_actor.is_some() && !self.actions_can_create_pull_requests {
            return error(403, "GitHub Actions is not permitted to create or approve pull requests.");
        }
        let actor = self.actor.clone();
        match self.create_pull_as(&head, &base, &title, &s("body").unwrap_or_default(), &actor) {
            Ok(n) => answer(201, self.pull_json(&self.pulls[&n], true)),
            Err(errors) => validation("Validation Failed", errors),
        }
    }

    /// Opens a pull request as `by`, with GitHub's validation: the head and
    /// base branches exist, commits differ, no other open one for the head.
    pub(super) fn create_pull_as(
        &mut self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
        by: &str,
    ) -> Result<u64, Value> {
        let head = head.strip_prefix(&format!("{}:", self.owner)).unwrap_or(head).to_string();
        if self.pulls.values().any(|p| p.open && p.head == head) {
            return Err(
                json!([{ "resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for {}:{head}.", self.owner) }]),
            );
        }
        let Some(head_sha) = self.git.branch_head(&head) else {
            return Err(json!([{ "resource": "PullRequest", "field": "head", "code": "invalid" }]));
        };
        let Some(base_sha) = self.git.branch_head(base) else {
            return Err(json!([{ "resource": "PullRequest", "field": "base", "code": "invalid" }]));
        };
        if self.git.is_ancestor(&head_sha, &base_sha) {
            return Err(
                json!([{ "resource": "PullRequest", "code": "custom", "message": format!("No commits between {base} and {head}") }]),
            );
        }
        let number = self.issues.keys().chain(self.pulls.keys()).max().copied().unwrap_or(0) + 1;
        let created_at = self.now();
        self.pulls.insert(
            number,
            FakePull {
                number,
                title: title.into(),
                body: body.into(),
                author: by.into(),
                head,
                head_sha,
                base: base.into(),
                open: true,
                merged: false,
                merge_method: None,
                merge_commit: None,
                merged_by: None,
                created_at,
                closed_at: None,
                reviews: Vec::new(),
                threads: Vec::new(),
                labels: Vec::new(),
            },
        );
        self.update_pull_refs(number);
        let payload = self.pull_payload("opened", number);
        self.deliver("pull_request", payload, by);
        Ok(number)
    }

    fn list_reviews(&self, n: u64, q: &BTreeMap<String, String>) -> Answer {
        let Some(p) = self.pulls.get(&n) else { return not_found() };
        let t = template("pull-request-review-items")[0].clone();
        let items = p
            .reviews
            .iter()
            .map(|r| {
                let mut v = t.clone();
                v["id"] = json!(r.id);
                v["user"] = self.user_json(&r.author);
                v["state"] = json!(r.state);
                v["commit_id"] = json!(r.commit);
                v["body"] = json!(r.body);
                v["submitted_at"] = json!(r.submitted_at);
                v["html_url"] = json!(format!("{}/pull/{n}#pullrequestreview-{}", self.html_url(), r.id));
                v["pull_request_url"] = json!(format!("{}/pulls/{n}", self.repo_url()));
                v
            })
            .collect();
        self.page(items, q)
    }

    /// `GET /commits?sha=<branch>`: the branch's history, newest first
    /// (the safety department reads reverts there).
    fn list_branch_commits(&self, q: &BTreeMap<String, String>) -> Answer {
        let branch = q.get("sha").cloned().unwrap_or_else(|| "main".into());
        let Some(head) = self.git.branch_head(&branch).or_else(|| self.git.resolve(&branch)) else {
            return error(404, &format!("No commit found for SHA: {branch}"));
        };
        let t = template("commit-items")[0].clone();
        let mut commits = self.git.commits_between(None, &head);
        commits.reverse();
        let items = commits
            .into_iter()
            .map(|c| {
                let mut v = t.clone();
                v["sha"] = json!(c.sha);
                v["url"] = json!(format!("{}/commits/{}", self.repo_url(), c.sha));
                v["html_url"] = json!(format!("{}/commit/{}", self.html_url(), c.sha));
                v["commit"]["message"] = json!(c.message.trim_end());
                v["commit"]["tree"]["sha"] = json!(c.tree);
                let date = chrono::DateTime::from_timestamp(c.at, 0)
                    .unwrap_or_default()
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string();
                v["commit"]["committer"]["date"] = json!(date);
                v["commit"]["author"]["date"] = json!(date);
                v
            })
            .collect();
        self.page(items, q)
    }

    fn list_commits(&self, n: u64, q: &BTreeMap<String, String>) -> Answer {
        let Some(p) = self.pulls.get(&n) else { return not_found() };
        let t = template("commit-items")[0].clone();
        let base = self.git.branch_head(&p.base);
        let base = match (&p.merge_commit, &base) {
            // After the merge the base holds the change: list what the pull request brought.
            (Some(merge), _) => self.git.commit(merge).and_then(|c| c.parents.first().cloned()),
            _ => base,
        };
        let items = self
            .git
            .commits_between(base.as_deref(), &p.head_sha)
            .into_iter()
            .map(|c| {
                let mut v = t.clone();
                v["sha"] = json!(c.sha);
                v["url"] = json!(format!("{}/commits/{}", self.repo_url(), c.sha));
                v["html_url"] = json!(format!("{}/commit/{}", self.html_url(), c.sha));
                v["commit"]["message"] = json!(c.message.trim_end());
                v["commit"]["tree"]["sha"] = json!(c.tree);
                v["commit"]["author"]["name"] = json!(c.author_name);
                v["commit"]["author"]["email"] = json!(c.author_email);
                let parent = v["parents"][0].clone();
                v["parents"] = Value::Array(
                    c.parents
                        .iter()
                        .map(|sha| {
                            let mut p = parent.clone();
                            p["sha"] = json!(sha);
                            p
                        })
                        .collect(),
                );
                v
            })
            .collect();
        self.page(items, q)
    }

    /// The files of a pull request's diff against where it left the base,
    /// as GitHub's diff entries (`filename`, `status`).
    fn list_files(&self, n: u64, q: &BTreeMap<String, String>) -> Answer {
        let Some(p) = self.pulls.get(&n) else { return not_found() };
        let base = match &p.merge_commit {
            Some(merge) => self.git.commit(merge).and_then(|c| c.parents.first().cloned()),
            None => self.git.branch_head(&p.base),
        };
        let from = base.and_then(|b| self.git.merge_base(&b, &p.head_sha));
        let items = self
            .git
            .diff_entries(from.as_deref(), &p.head_sha)
            .into_iter()
            .map(|(filename, status)| {
                json!({ "sha": null, "filename": filename, "status": status, "additions": 0,
                "deletions": 0, "changes": 0, "blob_url": "", "raw_url": "", "contents_url": "" })
            })
            .collect();
        self.page(items, q)
    }

    fn merge(&mut self, n: u64, body: &Value) -> Answer {
        let Some(p) = self.pulls.get(&n).cloned() else { return not_found() };
        if !p.open {
            return error(405, "Pull Request is not mergeable");
        }
        if self.base_has_merge_queue(n) {
            // GitHub's answer when the base branch's rules ask for the merge queue.
            return error(405, "Repository rule violations found\n\nChanges must be made through the merge queue\n\n");
        }
        if let Some(sha) = body.get("sha").and_then(Value::as_str)
            && sha != p.head_sha
        {
            return error(409, "Head branch was modified. Review and try the merge again.");
        }
        let method = body.get("merge_method").and_then(Value::as_str).unwrap_or("merge").to_string();
        let (title, message) = match method.as_str() {
            "squash" => {
                let commits = self.git.commits_between(self.git.branch_head(&p.base).as_deref(), &p.head_sha);
                let list: Vec<String> = commits.iter().map(|c| format!("* {}", c.message.trim())).collect();
                (format!("{} (#{n})", p.title), list.join("\n\n"))
            }
            "merge" => (format!("Merge pull request #{n} from {}/{}", self.owner, p.head), p.title.clone()),
            other => {
                self.unknown
                    .push(format!("PUT /pulls/{n}/merge with merge_method `{other}` (the fake merges and squashes)"));
                return error(422, "the fake GitHub does not implement this merge method");
            }
        };
        let title = body.get("commit_title").and_then(Value::as_str).map(String::from).unwrap_or(title);
        let message = body.get("commit_message").and_then(Value::as_str).map(String::from).unwrap_or(message);
        let (actor, at) = (self.actor.clone(), self.now_secs());
        let sha = match self.git.merge_into(
            &p.base,
            &p.head_sha,
            method == "squash",
            &format!("{title}\n\n{message}"),
            &actor,
            at,
        ) {
            Ok(sha) => sha,
            Err(_) => return error(405, "Pull Request is not mergeable"),
        };
        let closed_at = self.now();
        {
            let pull = self.pulls.get_mut(&n).unwrap();
            pull.open = false;
            pull.merged = true;
            pull.merge_method = Some(method);
            pull.merge_commit = Some(sha.clone());
            pull.merged_by = Some(actor.clone());
            pull.closed_at = Some(closed_at);
        }
        self.sync_refs(&actor);
        let payload = self.pull_payload("closed", n);
        self.deliver("pull_request", payload, &actor);
        answer(200, json!({ "sha": sha, "merged": true, "message": "Pull Request successfully merged" }))
    }

    /// GitHub lists, per check name, the latest run (`filter=latest`).
    fn check_runs_for(&self, r: &str) -> Answer {
        let Some(sha) = self.git.resolve(r) else {
            return validation(&format!("No commit found for SHA: {r}"), json!([]));
        };
        let page = template("check-run-paginated");
        let t = page["check_runs"][0].clone();
        let mut latest: BTreeMap<(String, String), &FakeCheckRun> = BTreeMap::new();
        for run in self.check_runs.iter().filter(|c| c.head_sha == sha) {
            latest.insert((run.app.clone(), run.name.clone()), run);
        }
        let mut runs: Vec<&FakeCheckRun> = latest.into_values().collect();
        runs.sort_by_key(|r| std::cmp::Reverse(r.id));
        let runs: Vec<Value> = runs
            .into_iter()
            .map(|run| {
                let mut v = t.clone();
                let w = self.check_run_json(run);
                for k in [
                    "id",
                    "name",
                    "head_sha",
                    "status",
                    "conclusion",
                    "url",
                    "html_url",
                    "details_url",
                    "started_at",
                    "completed_at",
                    "output",
                ] {
                    v[k] = w[k].clone();
                }
                v["app"]["slug"] = json!(run.app);
                v["check_suite"] = json!({ "id": run.suite });
                v["pull_requests"] = json!([]);
                v
            })
            .collect();
        answer(200, json!({ "total_count": runs.len(), "check_runs": runs }))
    }

    fn combined_status(&self, r: &str) -> Answer {
        let Some(sha) = self.git.resolve(r) else {
            return error(404, &format!("No commit found for SHA: {r}"));
        };
        let mut v = template("combined-commit-status");
        let t = v["statuses"][0].clone();
        let statuses: Vec<Value> = self
            .statuses
            .get(&sha)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, (context, state))| {
                let mut s = t.clone();
                s["id"] = json!(i + 1);
                s["context"] = json!(context);
                s["state"] = json!(state);
                s
            })
            .collect();
        let states: Vec<&str> = statuses.iter().filter_map(|s| s["state"].as_str()).collect();
        // GitHub's answer with no status at all (only check runs, or
        // nothing) is `pending` with `total_count: 0`.
        let combined = if states.iter().any(|s| *s == "failure" || *s == "error") {
            "failure"
        } else if states.iter().all(|s| *s == "success") && !states.is_empty() {
            "success"
        } else {
            "pending"
        };
        v["state"] = json!(combined);
        v["sha"] = json!(sha);
        v["total_count"] = json!(statuses.len());
        v["statuses"] = Value::Array(statuses);
        v["commit_url"] = json!(format!("{}/commits/{sha}", self.repo_url()));
        v["url"] = json!(format!("{}/commits/{sha}/status", self.repo_url()));
        answer(200, v)
    }
}

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether label `name` is `lowercased` (a name already lowercased), as
/// GitHub matches label names: case aside. Without a copy for ASCII names.
fn same_label(name: &str, lowercased: &str) -> bool {
    if name.is_ascii() { name.eq_ignore_ascii_case(lowercased) } else { name.to_lowercase() == lowercased }
}

/// A real example body from GitHub's API description (parsed once per process).
fn template(name: &str) -> Value {
    static PARSED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Value>>> =
        std::sync::OnceLock::new();
    let cache = PARSED.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
        return v.clone();
    }
    let v = parse_template(name);
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), v.clone());
    v
}

fn parse_template(name: &str) -> Value {
    let text = match name {
        "issue" => include_str!("../../fixtures/github/rest-api/examples/issue.json"),
        "issue-comment" => include_str!("../../fixtures/github/rest-api/examples/issue-comment.json"),
        "reaction" => include_str!("../../fixtures/github/rest-api/examples/reaction.json"),
        "issue-event-for-issue-items" => {
            include_str!("../../fixtures/github/rest-api/examples/issue-event-for-issue-items.json")
        }
        "pull-request-review-items" => {
            include_str!("../../fixtures/github/rest-api/examples/pull-request-review-items.json")
        }
        "commit-items" => include_str!("../../fixtures/github/rest-api/examples/commit-items.json"),
        "check-run-paginated" => include_str!("../../fixtures/github/rest-api/examples/check-run-paginated.json"),
        "combined-commit-status" => include_str!("../../fixtures/github/rest-api/examples/combined-commit-status.json"),
        "git-ref" => include_str!("../../fixtures/github/rest-api/examples/git-ref.json"),
        "pull-request" => include_str!("../../fixtures/github/rest-api/examples/pull-request.json"),
        "pull-request-simple-items" => {
            include_str!("../../fixtures/github/rest-api/examples/pull-request-simple-items.json")
        }
        "content-file-response-if-content-is-a-file" => {
            include_str!("../../fixtures/github/rest-api/examples/content-file-response-if-content-is-a-file.json")
        }
        "file-commit-example-for-creating-a-file" => {
            include_str!("../../fixtures/github/rest-api/examples/file-commit-example-for-creating-a-file.json")
        }
        "file-commit-example-for-updating-a-file" => {
            include_str!("../../fixtures/github/rest-api/examples/file-commit-example-for-updating-a-file.json")
        }
        "repository-collaborator-permission-response-if-user-has-admin-permissions" => include_str!(
            "../../fixtures/github/rest-api/examples/repository-collaborator-permission-response-if-user-has-admin-permissions.json"
        ),
        "full-repository-default-response" => {
            include_str!("../../fixtures/github/rest-api/examples/full-repository-default-response.json")
        }
        other => panic!("no example body named {other}"),
    };
    serde_json::from_str(text).expect("example bodies are JSON")
}
