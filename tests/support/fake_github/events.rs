//! Webhook deliveries: every change in the fake is told the way GitHub
//! tells Actions, with a payload built from octokit's real example payloads
//! (`tests/fixtures/github/webhooks/`), changing only the fields the state
//! owns. Also: what a push changes (pull request heads, `synchronize`),
//! and the two dispatch events.

use serde_json::{Value, json};

use super::git::{CommitInfo, ZERO};
use super::state::*;

/// A real example payload from octokit/webhooks (parsed once per process).
pub fn webhook(name: &str) -> Value {
    static PARSED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Value>>> =
        std::sync::OnceLock::new();
    let cache = PARSED.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
        return v.clone();
    }
    let v = parse_webhook(name);
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), v.clone());
    v
}

fn parse_webhook(name: &str) -> Value {
    let text = match name {
        "issues/labeled" => include_str!("../../fixtures/github/webhooks/issues/labeled.payload.json"),
        "issues/opened" => include_str!("../../fixtures/github/webhooks/issues/opened.payload.json"),
        "issue_comment/created" => include_str!("../../fixtures/github/webhooks/issue_comment/created.payload.json"),
        "pull_request/opened" => include_str!("../../fixtures/github/webhooks/pull_request/opened.payload.json"),
        "pull_request/closed" => include_str!("../../fixtures/github/webhooks/pull_request/closed.payload.json"),
        "pull_request_review/submitted" => {
            include_str!("../../fixtures/github/webhooks/pull_request_review/submitted.payload.json")
        }
        "push" => include_str!("../../fixtures/github/webhooks/push/payload.json"),
        "check_run/completed" => include_str!("../../fixtures/github/webhooks/check_run/completed.payload.json"),
        "check_suite/completed" => include_str!("../../fixtures/github/webhooks/check_suite/completed.payload.json"),
        "status" => include_str!("../../fixtures/github/webhooks/status/payload.json"),
        "workflow_run/completed" => include_str!("../../fixtures/github/webhooks/workflow_run/completed.payload.json"),
        "repository_dispatch" => include_str!("../../fixtures/github/webhooks/repository_dispatch/payload.json"),
        "workflow_dispatch" => include_str!("../../fixtures/github/webhooks/workflow_dispatch/payload.json"),
        other => panic!("no example payload named {other}"),
    };
    let mut v: Value = serde_json::from_str(text).expect("example payloads are JSON");
    // The repository belongs to a user, not an organisation; an app's
    // installation is in the payload only where GitHub's schema requires
    // it (repository_dispatch).
    if let Some(o) = v.as_object_mut() {
        o.remove("organization");
        if name != "repository_dispatch" {
            o.remove("installation");
        }
    }
    v
}

/// What the runner knows of a workflow run, for `workflow_run` deliveries.
#[derive(Debug, Clone)]
pub struct WorkflowRunFacts {
    pub id: u64,
    pub name: String,
    /// `.github/workflows/<file>`.
    pub path: String,
    pub event: String,
    pub head_sha: String,
    pub head_branch: Option<String>,
    /// requested, in_progress, completed.
    pub status: String,
    pub conclusion: Option<String>,
    pub actor: String,
    pub run_number: u64,
    pub check_suite: u64,
    pub created_at: String,
    pub pull_requests: Vec<u64>,
}

impl State {
    /// Sets the repository's fields a template has (shapes differ: a
    /// workflow run's repository is a "lite" one).
    fn set_repo_urls(&self, r: &mut Value) {
        let fields = [
            ("id", json!(4242)),
            ("name", json!(self.repo)),
            ("full_name", json!(format!("{}/{}", self.owner, self.repo))),
            ("private", json!(true)),
            ("visibility", json!("private")),
            ("html_url", json!(self.html_url())),
            ("url", json!(self.repo_url())),
            ("clone_url", json!(format!("{}.git", self.html_url()))),
            ("default_branch", json!("main")),
            ("master_branch", json!("main")),
        ];
        for (k, v) in fields {
            if r.get(k).is_some() {
                r[k] = v;
            }
        }
        r["owner"]["login"] = json!(self.owner);
        r["owner"]["html_url"] = json!(format!("{}/{}", self.base_url, self.owner));
        if r["owner"].get("name").is_some() {
            r["owner"]["name"] = json!(self.owner);
        }
    }

    /// The repository as webhooks describe it.
    pub fn repository_webhook_json(&self) -> Value {
        let mut r = webhook("issues/labeled")["repository"].clone();
        self.set_repo_urls(&mut r);
        r
    }

    fn issue_webhook_json(&self, number: u64, template: &Value) -> Value {
        let i = self.issue(number);
        let mut v = template.clone();
        let rest = self.issue_json(i);
        for k in [
            "url",
            "repository_url",
            "labels_url",
            "comments_url",
            "events_url",
            "html_url",
            "id",
            "number",
            "title",
            "user",
            "labels",
            "state",
            "comments",
            "body",
            "created_at",
            "updated_at",
            "closed_at",
        ] {
            v[k] = rest[k].clone();
        }
        v["assignee"] = Value::Null;
        v["assignees"] = json!([]);
        v["milestone"] = Value::Null;
        v["author_association"] = json!(self.association(&i.author));
        if let Some(o) = v.as_object_mut() {
            o.remove("pull_request");
        }
        v
    }

    /// How GitHub relates a login to the repository.
    fn association(&self, login: &str) -> &'static str {
        if login == self.owner {
            "OWNER"
        } else if self.collaborators.contains_key(login) {
            "COLLABORATOR"
        } else {
            "NONE"
        }
    }

    pub(super) fn issue_payload(&self, action: &str, number: u64, label: Option<&str>) -> Value {
        let mut p = webhook("issues/labeled");
        let template = p["issue"].clone();
        p["action"] = json!(action);
        p["issue"] = self.issue_webhook_json(number, &template);
        match label.and_then(|l| self.labels.get(&l.to_lowercase())) {
            Some(l) => p["label"] = self.label_json(l),
            None => {
                p.as_object_mut().unwrap().remove("label");
            }
        }
        p["repository"] = self.repository_webhook_json();
        p
    }

    pub(super) fn comment_payload(&self, comment: u64) -> Value {
        let c = self.comments.iter().find(|c| c.id == comment).expect("a comment").clone();
        let mut p = webhook("issue_comment/created");
        let template = p["issue"].clone();
        if self.issues.contains_key(&c.issue) {
            p["issue"] = self.issue_webhook_json(c.issue, &template);
        } else {
            // A comment on a pull request: GitHub sends the pull request as an issue.
            let pr = self.pull(c.issue);
            let mut v = template.clone();
            v["number"] = json!(pr.number);
            v["title"] = json!(pr.title);
            v["body"] = json!(pr.body);
            v["user"] = self.user_json(&pr.author);
            v["labels"] = json!([]);
            v["state"] = json!(if pr.open { "open" } else { "closed" });
            v["html_url"] = json!(format!("{}/pull/{}", self.html_url(), pr.number));
            v["pull_request"] = json!({ "url": format!("{}/pulls/{}", self.repo_url(), pr.number) });
            p["issue"] = v;
        }
        let mut comment_json = self.comment_json(&c);
        comment_json["author_association"] = json!(self.association(&c.author));
        p["comment"] = overlay(&p["comment"], &comment_json);
        p["action"] = json!("created");
        p["repository"] = self.repository_webhook_json();
        p
    }

    /// The pull request as webhooks describe it.
    pub fn pull_webhook_json(&self, number: u64) -> Value {
        let p = self.pull(number);
        let mut v = webhook("pull_request/opened")["pull_request"].clone();
        let rest = self.pull_json(p, true);
        for k in [
            "url",
            "id",
            "number",
            "html_url",
            "state",
            "title",
            "body",
            "user",
            "merged_at",
            "closed_at",
            "created_at",
            "updated_at",
            "merged",
            "merge_commit_sha",
            "labels",
            "requested_reviewers",
            "requested_teams",
        ] {
            v[k] = rest[k].clone();
        }
        for side in ["head", "base"] {
            v[side]["ref"] = rest[side]["ref"].clone();
            v[side]["sha"] = rest[side]["sha"].clone();
            v[side]["label"] = rest[side]["label"].clone();
            v[side]["user"] = self.user_json(&self.owner);
            let mut repo = v[side]["repo"].clone();
            self.set_repo_urls(&mut repo);
            v[side]["repo"] = repo;
        }
        v["merged_by"] = p.merged_by.as_ref().map(|m| self.user_json(m)).unwrap_or(Value::Null);
        v["author_association"] = json!(self.association(&p.author));
        v["assignee"] = Value::Null;
        v["assignees"] = json!([]);
        v["milestone"] = Value::Null;
        v["draft"] = json!(false);
        v["commits"] = json!(self.git.commits_between(self.git.branch_head(&p.base).as_deref(), &p.head_sha).len());
        v
    }

    pub(super) fn pull_payload(&self, action: &str, number: u64) -> Value {
        let mut p = webhook(if action == "closed" { "pull_request/closed" } else { "pull_request/opened" });
        p["action"] = json!(action);
        p["number"] = json!(number);
        p["pull_request"] = self.pull_webhook_json(number);
        p["repository"] = self.repository_webhook_json();
        p
    }

    pub(super) fn review_payload(&self, pr: u64, review: u64) -> Value {
        let p = self.pull(pr);
        let r = p.reviews.iter().find(|r| r.id == review).expect("a review");
        let mut v = webhook("pull_request_review/submitted");
        let mut rv = v["review"].clone();
        rv["id"] = json!(r.id);
        rv["user"] = self.user_json(&r.author);
        rv["body"] = if r.body.is_empty() { Value::Null } else { json!(r.body) };
        rv["commit_id"] = json!(r.commit);
        rv["submitted_at"] = json!(r.submitted_at);
        // Webhooks write the state in lower case; the REST API in upper case.
        rv["state"] = json!(r.state.to_lowercase());
        rv["html_url"] = json!(format!("{}/pull/{pr}#pullrequestreview-{}", self.html_url(), r.id));
        rv["pull_request_url"] = json!(format!("{}/pulls/{pr}", self.repo_url()));
        rv["author_association"] = json!(self.association(&r.author));
        rv["_links"]["html"]["href"] = rv["html_url"].clone();
        rv["_links"]["pull_request"]["href"] = rv["pull_request_url"].clone();
        v["review"] = rv;
        v["action"] = json!("submitted");
        // A review's pull request is the short form: only the fields it has.
        v["pull_request"] = overlay(&v["pull_request"], &self.pull_webhook_json(pr));
        v["repository"] = self.repository_webhook_json();
        v
    }

    pub(super) fn status_payload(&self, sha: &str, context: &str, state: &str) -> Value {
        let mut v = webhook("status");
        v["id"] = json!(700_000 + self.next_id);
        v["sha"] = json!(sha);
        v["name"] = json!(format!("{}/{}", self.owner, self.repo));
        v["context"] = json!(context);
        v["state"] = json!(state);
        v["commit"]["sha"] = json!(sha);
        v["commit"]["url"] = json!(format!("{}/commits/{sha}", self.repo_url()));
        v["commit"]["html_url"] = json!(format!("{}/commit/{sha}", self.html_url()));
        if let Some(c) = self.git.commit(sha) {
            v["commit"]["commit"]["message"] = json!(c.message);
            v["commit"]["commit"]["tree"]["sha"] = json!(c.tree);
        }
        v["branches"] = json!(
            self.git
                .refs()
                .into_iter()
                .filter(|(r, s)| s == sha && r.starts_with("refs/heads/"))
                .map(|(r, s)| json!({ "name": r.trim_start_matches("refs/heads/"), "commit": { "sha": s, "url": format!("{}/commits/{s}", self.repo_url()) }, "protected": false }))
                .collect::<Vec<_>>()
        );
        let at = stamp(self.clock);
        v["created_at"] = json!(at);
        v["updated_at"] = json!(at);
        v["repository"] = self.repository_webhook_json();
        v
    }

    fn app_json(&self, slug: &str) -> Value {
        let mut app = webhook("check_run/completed")["check_run"]["app"].clone();
        app["slug"] = json!(slug);
        app["name"] = json!(if slug == "github-actions" { "GitHub Actions" } else { slug });
        app
    }

    /// Open pull requests whose head is `sha`, as check payloads list them.
    fn pulls_at(&self, sha: &str) -> Vec<Value> {
        self.pulls
            .values()
            .filter(|p| p.open && p.head_sha == sha)
            .map(|p| {
                json!({
                    "url": format!("{}/pulls/{}", self.repo_url(), p.number),
                    "id": 200_000 + p.number,
                    "number": p.number,
                    "head": { "ref": p.head, "sha": p.head_sha, "repo": { "id": 4242, "url": self.repo_url(), "name": self.repo } },
                    "base": { "ref": p.base, "sha": self.git.branch_head(&p.base).unwrap_or_default(), "repo": { "id": 4242, "url": self.repo_url(), "name": self.repo } },
                })
            })
            .collect()
    }

    pub(super) fn check_suite_json(&self, suite: &FakeCheckSuite) -> Value {
        let mut s = webhook("check_suite/completed")["check_suite"].clone();
        s["id"] = json!(suite.id);
        s["head_branch"] = json!(suite.head_branch);
        s["head_sha"] = json!(suite.head_sha);
        s["status"] = json!(suite.status);
        s["conclusion"] = json!(suite.conclusion);
        s["url"] = json!(format!("{}/check-suites/{}", self.repo_url(), suite.id));
        s["check_runs_url"] = json!(format!("{}/check-suites/{}/check-runs", self.repo_url(), suite.id));
        s["before"] = json!(ZERO);
        s["after"] = json!(suite.head_sha);
        s["pull_requests"] = Value::Array(self.pulls_at(&suite.head_sha));
        s["app"] = self.app_json(&suite.app);
        s["latest_check_runs_count"] = json!(self.check_runs.iter().filter(|r| r.suite == suite.id).count());
        if let Some(c) = self.git.commit(&suite.head_sha) {
            s["head_commit"] = commit_webhook_json(&c);
        }
        s
    }

    pub(super) fn check_run_json(&self, run: &FakeCheckRun) -> Value {
        let mut v = webhook("check_run/completed")["check_run"].clone();
        v["id"] = json!(run.id);
        v["name"] = json!(run.name);
        v["head_sha"] = json!(run.head_sha);
        v["status"] = json!(run.status);
        v["conclusion"] = json!(run.conclusion);
        v["url"] = json!(format!("{}/check-runs/{}", self.repo_url(), run.id));
        v["html_url"] = json!(run.html_url);
        v["details_url"] = json!(run.html_url);
        v["started_at"] = json!(run.started_at);
        v["completed_at"] = json!(run.completed_at);
        v["output"] = json!({
            "title": run.title, "summary": run.summary, "text": null,
            "annotations_count": run.annotations,
            "annotations_url": format!("{}/check-runs/{}/annotations", self.repo_url(), run.id),
        });
        v["app"] = self.app_json(&run.app);
        v["pull_requests"] = Value::Array(self.pulls_at(&run.head_sha));
        if let Some(s) = self.check_suites.iter().find(|s| s.id == run.suite) {
            let mut suite = v["check_suite"].clone();
            let full = self.check_suite_json(s);
            for k in [
                "id",
                "head_branch",
                "head_sha",
                "status",
                "conclusion",
                "url",
                "before",
                "after",
                "pull_requests",
                "app",
            ] {
                suite[k] = full[k].clone();
            }
            v["check_suite"] = suite;
        }
        v
    }

    /// Actions' own check runs are told as caused by its workflow token
    /// (they start no workflow; `workflow_run` is the event for that).
    fn checks_sender(&self, app: &str) -> (String, bool) {
        if app == "github-actions" { (super::ENGINE.to_string(), true) } else { (format!("{app}[bot]"), false) }
    }

    pub(super) fn deliver_check_run(&mut self, action: &str, id: u64) {
        let run = self.check_runs.iter().find(|r| r.id == id).expect("a check run").clone();
        let mut p = webhook("check_run/completed");
        p["action"] = json!(action);
        p["check_run"] = self.check_run_json(&run);
        p["repository"] = self.repository_webhook_json();
        let (sender, by_token) = self.checks_sender(&run.app);
        self.deliver_as("check_run", p, &sender, by_token);
    }

    pub(super) fn deliver_check_suite(&mut self, id: u64) {
        let suite = self.check_suites.iter().find(|s| s.id == id).expect("a check suite").clone();
        let mut p = webhook("check_suite/completed");
        p["action"] = json!("completed");
        p["check_suite"] = self.check_suite_json(&suite);
        p["repository"] = self.repository_webhook_json();
        let (sender, by_token) = self.checks_sender(&suite.app);
        self.deliver_as("check_suite", p, &sender, by_token);
    }

    /// `workflow_run` (requested, in_progress, completed), from Actions.
    /// It starts workflows even when the run itself came from a workflow
    /// token (GitHub bounds those chains at three levels instead).
    pub fn deliver_workflow_run(&mut self, action: &str, run: &WorkflowRunFacts) {
        let mut p = webhook("workflow_run/completed");
        p["action"] = json!(action);
        let url = format!("{}/actions/runs/{}", self.repo_url(), run.id);
        let w = &mut p["workflow"];
        w["name"] = json!(run.name);
        w["path"] = json!(run.path);
        w["html_url"] = json!(format!("{}/blob/main/{}", self.html_url(), run.path));
        let wr = &mut p["workflow_run"];
        wr["id"] = json!(run.id);
        wr["name"] = json!(run.name);
        wr["path"] = json!(run.path);
        wr["event"] = json!(run.event);
        wr["head_sha"] = json!(run.head_sha);
        wr["head_branch"] = json!(run.head_branch);
        wr["status"] = json!(run.status);
        wr["conclusion"] = json!(run.conclusion);
        wr["run_number"] = json!(run.run_number);
        wr["run_attempt"] = json!(1);
        wr["check_suite_id"] = json!(run.check_suite);
        wr["check_suite_url"] = json!(format!("{}/check-suites/{}", self.repo_url(), run.check_suite));
        wr["url"] = json!(url);
        wr["html_url"] = json!(format!("{}/actions/runs/{}", self.html_url(), run.id));
        wr["jobs_url"] = json!(format!("{url}/jobs"));
        wr["logs_url"] = json!(format!("{url}/logs"));
        wr["artifacts_url"] = json!(format!("{url}/artifacts"));
        wr["cancel_url"] = json!(format!("{url}/cancel"));
        wr["rerun_url"] = json!(format!("{url}/rerun"));
        wr["created_at"] = json!(run.created_at);
        wr["run_started_at"] = json!(run.created_at);
        wr["updated_at"] = json!(stamp(self.clock));
        let pulls: Vec<Value> = run
            .pull_requests
            .iter()
            .filter_map(|n| self.pulls.get(n))
            .map(|p| {
                json!({
                    "url": format!("{}/pulls/{}", self.repo_url(), p.number), "id": 200_000 + p.number, "number": p.number,
                    "head": { "ref": p.head, "sha": p.head_sha, "repo": { "id": 4242, "url": self.repo_url(), "name": self.repo } },
                    "base": { "ref": p.base, "sha": self.git.branch_head(&p.base).unwrap_or_default(), "repo": { "id": 4242, "url": self.repo_url(), "name": self.repo } },
                })
            })
            .collect();
        p["workflow_run"]["pull_requests"] = Value::Array(pulls);
        if let Some(c) = self.git.commit(&run.head_sha) {
            p["workflow_run"]["head_commit"] = commit_webhook_json(&c);
        }
        for side in ["repository", "head_repository"] {
            let mut r = p["workflow_run"][side].clone();
            self.set_repo_urls(&mut r);
            p["workflow_run"][side] = r;
        }
        p["workflow_run"]["actor"] = self.user_json(&run.actor);
        p["workflow_run"]["triggering_actor"] = self.user_json(&run.actor);
        p["repository"] = self.repository_webhook_json();
        let sender = run.actor.clone();
        self.deliver_as("workflow_run", p, &sender, false);
    }

    /// `repository_dispatch` of `event_type` sent by `by` (the API needs
    /// write access to send one; the handler answers for the API).
    pub fn repository_dispatch(&mut self, event_type: &str, client_payload: Value, by: &str) {
        let mut p = webhook("repository_dispatch");
        p["action"] = json!(event_type);
        p["branch"] = json!("main");
        p["client_payload"] = client_payload;
        p["repository"] = self.repository_webhook_json();
        self.deliver("repository_dispatch", p, by);
    }

    /// `workflow_dispatch` of `workflow` (a file name under
    /// `.github/workflows/`) on `git_ref`, as the "Run workflow" button or
    /// the API sends it; GitHub's 404/422 when the workflow file is not on
    /// that ref, has no `workflow_dispatch` trigger, or the inputs do not
    /// fit.
    pub fn dispatch_workflow(
        &mut self,
        workflow: &str,
        git_ref: &str,
        inputs: &serde_json::Map<String, Value>,
        by: &str,
    ) -> Result<(), (u16, String)> {
        let file = workflow.rsplit('/').next().unwrap_or(workflow);
        let path = format!(".github/workflows/{file}");
        let branch = git_ref.trim_start_matches("refs/heads/").to_string();
        let Some(text) = self.file(&branch, &path) else {
            return Err((404, "Not Found".into()));
        };
        let doc: Value = serde_yaml::from_str(&text).map_err(|e| (422, format!("Invalid workflow file: {e}")))?;
        let on = doc.get("on").cloned().unwrap_or(Value::Null);
        let declared = match &on {
            Value::String(s) => (s == "workflow_dispatch").then_some(Value::Null),
            Value::Array(a) => a.iter().any(|e| e == "workflow_dispatch").then_some(Value::Null),
            Value::Object(m) => m.get("workflow_dispatch").cloned().map(|v| if v.is_null() { Value::Null } else { v }),
            _ => None,
        };
        let Some(spec) = declared else {
            return Err((422, "Workflow does not have 'workflow_dispatch' trigger".into()));
        };
        let declared_inputs = spec.get("inputs").and_then(Value::as_object).cloned().unwrap_or_default();
        let unexpected: Vec<&String> = inputs.keys().filter(|k| !declared_inputs.contains_key(*k)).collect();
        if !unexpected.is_empty() {
            return Err((422, format!("Unexpected inputs provided: {unexpected:?}")));
        }
        let mut given = serde_json::Map::new();
        for (name, decl) in &declared_inputs {
            match inputs.get(name) {
                Some(v) => {
                    given.insert(name.clone(), json!(value_text(v)));
                }
                None if decl.get("required").and_then(Value::as_bool) == Some(true)
                    && decl.get("default").is_none() =>
                {
                    return Err((422, format!("Required input '{name}' not provided")));
                }
                None => {
                    if let Some(d) = decl.get("default") {
                        given.insert(name.clone(), json!(value_text(d)));
                    }
                }
            }
        }
        let mut p = webhook("workflow_dispatch");
        p["inputs"] = Value::Object(given);
        p["ref"] = json!(format!("refs/heads/{branch}"));
        p["workflow"] = json!(path);
        p["repository"] = self.repository_webhook_json();
        self.deliver("workflow_dispatch", p, by);
        Ok(())
    }

    /// Announces refs a test moved itself (a tag it set), as pushed by `by`.
    pub fn sync_tags(&mut self, by: &str) {
        self.sync_refs(by);
    }

    /// A delivery a test composes itself (an event the fake has no helper
    /// for), from `by`, which starts workflows as a person's would.
    pub fn deliver_webhook(&mut self, event: &str, payload: Value, by: &str) {
        self.deliver_as(event, payload, by, false);
    }

    /// After a push over smart HTTP with `grant`'s token.
    pub(super) fn pushed(&mut self, grant: &Grant) {
        self.workflow_actor = grant.workflow_token.then(|| grant.login.clone());
        self.sync_refs(&grant.login);
        self.workflow_actor = None;
    }

    /// Announces every branch or tag that moved since the last call:
    /// `push` by `pusher`, and for a branch that is the head of an open
    /// pull request its new head and `pull_request` synchronize.
    pub(super) fn sync_refs(&mut self, pusher: &str) {
        let now = self.git.refs();
        let before = std::mem::replace(&mut self.known_refs, now.clone());
        let names: std::collections::BTreeSet<&String> = before.keys().chain(now.keys()).collect();
        for name in names {
            let old = before.get(name).cloned().unwrap_or_else(|| ZERO.into());
            let new = now.get(name).cloned().unwrap_or_else(|| ZERO.into());
            if old == new {
                continue;
            }
            let payload = self.push_payload(name, &old, &new, pusher);
            self.deliver("push", payload, pusher);
            let Some(branch) = name.strip_prefix("refs/heads/") else { continue };
            let heads: Vec<u64> =
                self.pulls.values().filter(|p| p.open && p.head == branch).map(|p| p.number).collect();
            for n in heads {
                if new == ZERO {
                    continue;
                }
                self.pulls.get_mut(&n).unwrap().head_sha = new.clone();
                self.update_pull_refs(n);
                let mut p = self.pull_payload("synchronize", n);
                p["before"] = json!(old);
                p["after"] = json!(new);
                self.deliver("pull_request", p, pusher);
                // GitHub takes a pull request whose head moved out of its merge queue.
                if self.merge_group_of(n).is_some() {
                    self.dequeue(n, "PULL_REQUEST_UPDATED");
                }
            }
            let bases: Vec<u64> =
                self.pulls.values().filter(|p| p.open && p.base == branch).map(|p| p.number).collect();
            for n in bases {
                self.update_pull_refs(n);
            }
        }
    }

    /// `refs/pull/<n>/head` and GitHub's test merge `refs/pull/<n>/merge`.
    pub(super) fn update_pull_refs(&mut self, n: u64) {
        let p = self.pull(n).clone();
        let at = self.clock.timestamp();
        let _ = self.git.set_ref(&format!("refs/pull/{n}/head"), &p.head_sha, None).or_else(|_| {
            self.git.delete_ref(&format!("refs/pull/{n}/head"));
            self.git.set_ref(&format!("refs/pull/{n}/head"), &p.head_sha, None)
        });
        self.git.delete_ref(&format!("refs/pull/{n}/merge"));
        if let Some(base) = self.git.branch_head(&p.base)
            && let Some(merge) = self.git.test_merge(&base, &p.head_sha, at)
        {
            let _ = self.git.set_ref(&format!("refs/pull/{n}/merge"), &merge, None);
        }
    }

    fn push_payload(&self, name: &str, old: &str, new: &str, pusher: &str) -> Value {
        let mut p = webhook("push");
        let commits: Vec<CommitInfo> = match (old == ZERO, new == ZERO) {
            (_, true) => Vec::new(),
            (true, false) => self.git.new_commits(new, name),
            (false, false) => self.git.commits_between(Some(old), new),
        };
        let forced = old != ZERO && new != ZERO && !self.git.is_ancestor(old, new);
        p["ref"] = json!(name);
        p["before"] = json!(old);
        p["after"] = json!(new);
        p["created"] = json!(old == ZERO);
        p["deleted"] = json!(new == ZERO);
        p["forced"] = json!(forced);
        p["compare"] = json!(format!("{}/compare/{}...{}", self.html_url(), &old[..12], &new[..12]));
        let shown: Vec<Value> = commits.iter().rev().take(20).rev().map(|c| self.push_commit_json(c)).collect();
        p["head_commit"] = commits.last().map(|c| self.push_commit_json(c)).unwrap_or_else(|| {
            if new == ZERO {
                Value::Null
            } else {
                self.git.commit(new).map(|c| self.push_commit_json(&c)).unwrap_or(Value::Null)
            }
        });
        p["commits"] = Value::Array(shown);
        let email = format!("{}@users.noreply.github.com", pusher.replace(['[', ']'], ""));
        p["pusher"] = json!({ "name": pusher, "email": email });
        let mut repo = p["repository"].clone();
        self.set_repo_urls(&mut repo);
        repo["pushed_at"] = json!(self.clock.timestamp());
        p["repository"] = repo;
        p
    }

    fn push_commit_json(&self, c: &CommitInfo) -> Value {
        let files = self.git.changed_files(c.parents.first().map(String::as_str), &c.sha);
        let mut v = commit_webhook_json(c);
        v["distinct"] = json!(true);
        v["url"] = json!(format!("{}/commit/{}", self.html_url(), c.sha));
        v["added"] = json!([]);
        v["removed"] = json!([]);
        v["modified"] = json!(files);
        v
    }
}

/// `template` with the values `source` has for the template's own keys.
fn overlay(template: &Value, source: &Value) -> Value {
    let mut out = template.clone();
    if let (Some(o), Some(src)) = (out.as_object_mut(), source.as_object()) {
        for (k, v) in o.iter_mut() {
            if let Some(x) = src.get(k) {
                *v = x.clone();
            }
        }
    }
    out
}

fn commit_webhook_json(c: &CommitInfo) -> Value {
    let at = chrono::DateTime::from_timestamp(c.at, 0).map(stamp).unwrap_or_default();
    let person = json!({ "name": c.author_name, "email": c.author_email, "username": c.author_name });
    json!({
        "id": c.sha, "tree_id": c.tree, "message": c.message, "timestamp": at,
        "author": person, "committer": person,
    })
}

/// A workflow input's text: inputs reach `github.event.inputs` as strings.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
