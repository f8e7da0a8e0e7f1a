//! The repository settings `ward doctor` reads, and what the token may do
//! per permission, hooked in front of the other routes
//! ([`handle`] answers what is its own and lets the rest through).
//!
//! - `GET /repos/{owner}/{repo}/actions/permissions/workflow`: the workflow
//!   token's defaults, "Allow GitHub Actions to create and approve pull
//!   requests" (`can_approve_pull_request_reviews`, the state's
//!   `actions_can_create_pull_requests`) among them; off on a new
//!   repository, as on GitHub. Reading it needs `administration: read`,
//!   which a workflow token never has ([`Settings::admin_token`]).
//! - `GET /repos/{owner}/{repo}/actions/runs`: what a token with `actions:
//!   read` sees (no runs here).
//! - A token without a permission ([`Settings::denied`], e.g.
//!   `"issues: write"`) gets GitHub's 403 on every route that needs it,
//!   before its body is looked at; the routes below it never see it.

use std::collections::BTreeSet;

use http::{HeaderMap, Method, Uri};
use serde_json::{Value, json};

use super::handlers::Answer;
use super::state::{Exchange, State};

#[derive(Debug, Clone)]
pub struct Settings {
    /// `read` (GitHub's default for new repositories) or `write`.
    pub default_workflow_permissions: String,
    /// The token is a repository admin's (it may read the settings).
    pub admin_token: bool,
    /// Permissions the token lacks, as a workflow names them: `issues: write`.
    pub denied: BTreeSet<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self { default_workflow_permissions: "read".into(), admin_token: true, denied: BTreeSet::new() }
    }
}

fn error(status: u16, message: &str) -> Answer {
    let body = json!({ "message": message, "documentation_url": "https://docs.github.com/rest", "status": status.to_string() });
    Answer { status, headers: Vec::new(), body: Some(body) }
}

/// The permission a repository route needs, as a workflow grants it.
fn needs(method: &Method, rest: &str) -> String {
    let write = *method != Method::GET;
    let scope = if rest.starts_with("/rules/") {
        // GitHub: "Get rules for a branch" needs only `metadata: read`.
        "metadata"
    } else if rest.starts_with("/issues") || rest.starts_with("/labels") {
        "issues"
    } else if rest.starts_with("/pulls") && !rest.ends_with("/merge") {
        "pull-requests"
    } else if rest.contains("/check-runs") {
        "checks"
    } else if rest.ends_with("/status") {
        "statuses"
    } else if rest.starts_with("/actions") {
        "actions"
    } else {
        "contents"
    };
    format!("{scope}: {}", if write { "write" } else { "read" })
}

/// Answers this module's routes and refusals; `None` lets the request
/// through to the other handlers.
pub fn handle(state: &mut State, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Option<Answer> {
    let prefix = format!("/repos/{}/{}", state.owner, state.repo);
    let rest = uri.path().strip_prefix(&prefix)?.to_string();
    let authorized = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok())
        == Some(format!("Bearer {}", state.token).as_str());
    if !authorized || !state.repo_exists {
        return None;
    }
    let route = match (method.as_str(), rest.as_str()) {
        ("GET", "/actions/permissions/workflow") => "/repos/{owner}/{repo}/actions/permissions/workflow",
        ("GET", "/actions/runs") => "/repos/{owner}/{repo}/actions/runs",
        _ if state.settings.denied.contains(&needs(method, &rest)) => "",
        _ => return None,
    };
    let s = &state.settings;
    let answer = match route {
        "" => error(403, "Resource not accessible by integration"),
        _ if s.denied.contains(&needs(method, &rest)) => error(403, "Resource not accessible by integration"),
        "/repos/{owner}/{repo}/actions/permissions/workflow" if !s.admin_token => {
            error(403, "Resource not accessible by integration")
        }
        "/repos/{owner}/{repo}/actions/permissions/workflow" => {
            let mut v: Value = serde_json::from_str(include_str!(
                "../../fixtures/github/rest-api/examples/actions-default-workflow-permissions.json"
            ))
            .expect("the example is JSON");
            v["default_workflow_permissions"] = json!(s.default_workflow_permissions);
            v["can_approve_pull_request_reviews"] = json!(state.actions_can_create_pull_requests);
            Answer { status: 200, headers: Vec::new(), body: Some(v) }
        }
        _ => Answer { status: 200, headers: Vec::new(), body: Some(json!({ "total_count": 0, "workflow_runs": [] })) },
    };
    state.log.push(Exchange {
        method: method.to_string(),
        route: if route.is_empty() { format!("{prefix}{rest} (refused)") } else { route.to_string() },
        path: uri.to_string(),
        status: answer.status,
        request: (!body.is_empty()).then(|| serde_json::from_slice(body).ok()).flatten(),
        response: answer.body.clone(),
        fault: false,
    });
    Some(answer)
}
