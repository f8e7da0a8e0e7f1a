//! What `ward doctor` reads about an installation on GitHub (and the two
//! things `--fix` sets up: labels through [`Forge::ensure_labels`], the
//! charts branch here). None of it is on a stage's path.
//!
//! What the token may do is found without changing anything: a write
//! endpoint is sent an empty body that GitHub must refuse. GitHub checks
//! the token's permission before the body, so 403 means the permission is
//! missing and 422 (the body is invalid) means it is there; nothing can be
//! created from an empty body.
//!
//! [`Forge::ensure_labels`]: crate::forge::Forge::ensure_labels

use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::transport::percent;
use super::wire::{WireContent, WireLabel, array, bad_shape, convert};
use super::{Access, GitHubForge};
use crate::forge::{ForgeError, ForgeResult, MergeQueueRule, StoredChart};

/// A permission a stage needs, checked without using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    IssuesWrite,
    ContentsWrite,
    PullsWrite,
    ChecksRead,
    StatusesRead,
    ActionsRead,
}

impl Probe {
    pub const ALL: &'static [Probe] = &[
        Probe::IssuesWrite,
        Probe::ContentsWrite,
        Probe::PullsWrite,
        Probe::ChecksRead,
        Probe::StatusesRead,
        Probe::ActionsRead,
    ];

    /// As a workflow's `permissions:` names it.
    pub const fn grant(self) -> &'static str {
        match self {
            Probe::IssuesWrite => "issues: write",
            Probe::ContentsWrite => "contents: write",
            Probe::PullsWrite => "pull-requests: write",
            Probe::ChecksRead => "checks: read",
            Probe::StatusesRead => "statuses: read",
            Probe::ActionsRead => "actions: read",
        }
    }
}

/// `GET /repos/{owner}/{repo}/actions/permissions/workflow`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WorkflowSettings {
    /// `read` or `write`: what a job that names no `permissions:` gets.
    pub default_workflow_permissions: String,
    /// "Allow GitHub Actions to create and approve pull requests".
    pub can_approve_pull_request_reviews: bool,
}

#[derive(Deserialize)]
struct WireRepository {
    default_branch: String,
}

impl GitHubForge {
    /// The repository's default branch (and that the token sees it).
    pub async fn default_branch(&self) -> ForgeResult<String> {
        let action = format!("read {}", self.settings.repo);
        let call = self.call(Method::GET, "", action.clone(), Access::Metadata);
        let wire: WireRepository = self.send_ok(&call).await?.json(&action)?;
        Ok(wire.default_branch)
    }

    /// Whether the token holds `probe`, found without changing anything.
    pub async fn token_may(&self, probe: Probe, default_branch: &str) -> ForgeResult<bool> {
        let action = format!("check that the token has `{}` on {}", probe.grant(), self.settings.repo);
        let branch = percent(default_branch);
        let (method, rest, access) = match probe {
            Probe::IssuesWrite => (Method::POST, "/labels".to_string(), Access::IssuesWrite),
            Probe::ContentsWrite => (Method::POST, "/git/refs".to_string(), Access::ContentsWrite),
            Probe::PullsWrite => (Method::POST, "/pulls".to_string(), Access::PullsWrite),
            Probe::ChecksRead => (Method::GET, format!("/commits/{branch}/check-runs?per_page=1"), Access::ChecksRead),
            Probe::StatusesRead => (Method::GET, format!("/commits/{branch}/status?per_page=1"), Access::StatusesRead),
            Probe::ActionsRead => (Method::GET, "/actions/runs?per_page=1".to_string(), Access::ContentsRead),
        };
        let write = method == Method::POST;
        let mut call = self.call(method, &rest, action, access);
        if write {
            // Invalid on purpose: refused for its body (422) once the permission is there.
            call.body = Some(json!({}));
        }
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            403 | 404 => Ok(false),
            422 if write => Ok(true),
            s if (200..300).contains(&s) && !write => Ok(true),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    /// The repository's Actions settings for the workflow token. Reading
    /// them needs `administration: read` (a repository admin's token); the
    /// workflow token never has it.
    pub async fn workflow_settings(&self) -> ForgeResult<WorkflowSettings> {
        let action = format!("read the Actions settings of {}", self.settings.repo);
        let call = self.call(Method::GET, "/actions/permissions/workflow", action.clone(), Access::Metadata);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => reply.json(&action),
            403 | 404 => Err(ForgeError::Forbidden {
                action,
                message: reply.message(),
                help: "reading them needs a repository admin's token (`administration: read`); \
                       the workflow's own token never has it"
                    .into(),
            }),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    /// The `merge_queue` rule among the rules that apply to `branch`
    /// (`GET /rules/branches/{branch}`: every active ruleset's rules, the
    /// repository's and the organization's), if one applies.
    pub async fn merge_queue_rule(&self, branch: &str) -> ForgeResult<Option<MergeQueueRule>> {
        let action = format!("read the rules of branch `{branch}` in {}", self.settings.repo);
        let first = self.call(
            Method::GET,
            &format!("/rules/branches/{}?per_page=100", percent(branch)),
            action.clone(),
            Access::Metadata,
        );
        let rules = self.get_all(first, |v| v.as_array().cloned()).await?;
        let Some(rule) = rules.iter().find(|r| r.get("type").and_then(Value::as_str) == Some("merge_queue")) else {
            return Ok(None);
        };
        let text = |k: &str| rule.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let parameters = rule.get("parameters").cloned().unwrap_or_default();
        Ok(Some(MergeQueueRule {
            merge_method: parameters.get("merge_method").and_then(Value::as_str).unwrap_or("MERGE").to_string(),
            check_response_timeout_minutes: parameters.get("check_response_timeout_minutes").and_then(Value::as_u64),
            source: format!("{} {}", text("ruleset_source_type"), text("ruleset_source")).trim().to_string(),
        }))
    }

    /// A file on the default branch, or `None` when there is none.
    pub async fn file_on_default_branch(&self, path: &str) -> ForgeResult<Option<String>> {
        let action = format!("read `{path}` of {}", self.settings.repo);
        let call = self.call(Method::GET, &format!("/contents/{path}"), action.clone(), Access::ContentsRead);
        let reply = self.send(&call).await?;
        match reply.status.as_u16() {
            200 => {
                let wire: WireContent = reply.json(&action)?;
                StoredChart::try_from(wire).map(|f| Some(f.text)).map_err(|e| bad_shape(&action, e))
            }
            404 => Ok(None),
            _ => Err(self.refusal(&call, &reply)),
        }
    }

    /// The names of the repository's labels.
    pub async fn label_names(&self) -> ForgeResult<Vec<String>> {
        let action = format!("list the labels of {}", self.settings.repo);
        let call = self.call(Method::GET, "/labels?per_page=100", action.clone(), Access::IssuesRead);
        let items = self.get_all(call, array).await?;
        Ok(convert::<WireLabel, super::wire::LabelName>(items, &action)?.into_iter().map(|l| l.0).collect())
    }

    /// Whether the charts branch exists.
    pub async fn has_charts_branch(&self) -> ForgeResult<bool> {
        self.charts_branch_exists().await
    }

    /// Creates the charts branch (an orphan commit of the empty tree).
    pub async fn set_up_charts_branch(&self) -> ForgeResult<()> {
        self.create_charts_branch().await
    }

    pub fn charts_branch(&self) -> &str {
        &self.settings.charts_branch
    }

    /// Whether GraphQL answers at [`GitHubForge::graphql_url`]: one small
    /// query ([`super::graphql::PROBE_QUERY`]) for the repository's name.
    pub async fn graphql_answers(&self) -> ForgeResult<String> {
        let action = format!("ask GraphQL at {} for {}", self.settings.graphql_url, self.settings.repo);
        let variables = json!({ "owner": self.settings.repo.owner, "name": self.settings.repo.name });
        let call =
            super::transport::Call::graphql(super::graphql::PROBE_QUERY, variables, action.clone(), Access::Metadata);
        let answer: Value = self.send_ok(&call).await?.json(&action)?;
        if let Some(e) = answer.pointer("/errors/0/message").and_then(Value::as_str) {
            return Err(ForgeError::Api { action, status: 200, message: e.to_string() });
        }
        answer
            .pointer("/data/repository/nameWithOwner")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad_shape(&action, "no `repository` in the answer"))
    }
}
