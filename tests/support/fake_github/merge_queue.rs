//! GitHub's merge queue, where it hurts: a branch whose rules hold a
//! `merge_queue` rule ([`State::require_merge_queue`]) refuses a direct
//! merge (405 "Changes must be made through the merge queue"), answers
//! `GET /rules/branches/{branch}` with the rule, and takes pull requests
//! through the GraphQL mutation `enqueuePullRequest`, only at the
//! `expectedHeadOid` that is the head. An enqueued pull request becomes a
//! merge group: a squash commit of its head onto the base's tip on a
//! branch `gh-readonly-queue/<base>/pr-<n>-<base sha>`. The group's
//! required checks (the rule's list) are reported by the test on the
//! group's head, as CI would; when all pass the base moves to the group's
//! commit and the pull request is merged (`pull_request` closed, by the
//! merge queue); a failed one, or a conflict, takes it out of the queue
//! (`pull_request` dequeued with a reason), as does a push to its head. A base that moved meanwhile
//! gets the group built again. GitHub also sends `merge_group`
//! checks_requested to workflows (none when a workflow's `GITHUB_TOKEN`
//! enqueued it); the fake sends none: no workflow of ward's listens to it,
//! and the tests play the group's CI themselves.

use serde_json::{Value, json};

use super::handlers::Answer;
use super::state::State;

/// Who merges and dequeues for the queue.
pub const MERGE_QUEUE_BOT: &str = "github-merge-queue[bot]";

/// One pull request in the queue, as its merge group.
#[derive(Debug, Clone)]
pub struct FakeMergeGroup {
    pub pull: u64,
    /// `gh-readonly-queue/<base>/pr-<n>-<base sha>`.
    pub branch: String,
    /// The group's commit: the pull request squashed onto `base_sha`.
    pub head_sha: String,
    pub base_sha: String,
}

impl State {
    /// Gives `branch` a ruleset with a merge queue whose groups need
    /// `checks` (check run names or status contexts) to pass.
    pub fn require_merge_queue(&mut self, branch: &str, checks: &[&str]) {
        self.merge_queues.insert(branch.into(), checks.iter().map(|c| c.to_string()).collect());
    }

    /// The merge group of pull request `n`, while it is queued.
    pub fn merge_group_of(&self, n: u64) -> Option<&FakeMergeGroup> {
        self.merge_groups.iter().find(|g| g.pull == n)
    }

    /// `GET /rules/branches/{branch}`: the rules that apply to it.
    pub(super) fn branch_rules(&self, branch: &str) -> Answer {
        let rules: Vec<Value> = match self.merge_queues.get(branch) {
            None => Vec::new(),
            Some(_) => vec![json!({
                "type": "merge_queue",
                "ruleset_source_type": "Repository",
                "ruleset_source": format!("{}/{}", self.owner, self.repo),
                "ruleset_id": 42,
                "parameters": {
                    "check_response_timeout_minutes": 60,
                    "grouping_strategy": "ALLGREEN",
                    "max_entries_to_build": 5,
                    "max_entries_to_merge": 5,
                    "merge_method": "SQUASH",
                    "min_entries_to_merge": 1,
                    "min_entries_to_merge_wait_minutes": 5
                }
            })],
        };
        Answer { status: 200, headers: Vec::new(), body: Some(Value::Array(rules)) }
    }

    /// Whether `pull`'s base requires the merge queue (a direct merge is refused).
    pub(super) fn base_has_merge_queue(&self, n: u64) -> bool {
        self.pulls.get(&n).is_some_and(|p| self.merge_queues.contains_key(&p.base))
    }

    /// `enqueuePullRequest`: `Err((type, message))` as GitHub refuses.
    pub(super) fn enqueue(&mut self, n: u64, expected_head: &str) -> Result<(), (&'static str, String)> {
        let p = self.pull(n).clone();
        if !p.open {
            return Err(("UNPROCESSABLE", format!("Pull request #{n} is closed")));
        }
        if !self.merge_queues.contains_key(&p.base) {
            return Err(("UNPROCESSABLE", format!("The base branch `{}` does not have a merge queue", p.base)));
        }
        if self.merge_group_of(n).is_some() {
            return Err(("UNPROCESSABLE", "Pull request is already in the merge queue".into()));
        }
        if !expected_head.eq_ignore_ascii_case(&p.head_sha) {
            return Err((
                "UNPROCESSABLE",
                format!("Expected head oid {expected_head} does not match the head of the pull request {}", p.head_sha),
            ));
        }
        let actor = self.actor.clone();
        let payload = self.pull_payload("enqueued", n);
        self.deliver("pull_request", payload, &actor);
        self.build_group(n);
        Ok(())
    }

    /// The group's commit on a branch of its own; a conflict dequeues.
    fn build_group(&mut self, n: u64) {
        let p = self.pull(n).clone();
        let Some(base_sha) = self.git.branch_head(&p.base) else { return };
        let branch = format!("gh-readonly-queue/{}/pr-{n}-{base_sha}", p.base);
        let at = self.now_secs();
        let _ = self.git.set_ref(&format!("refs/heads/{branch}"), &base_sha, None);
        let message = format!("{} (#{n})", p.title);
        match self.git.merge_into(&branch, &p.head_sha, true, &message, MERGE_QUEUE_BOT, at) {
            Ok(head_sha) => {
                self.merge_groups.push(super::merge_queue::FakeMergeGroup { pull: n, branch, head_sha, base_sha });
                self.sync_refs(MERGE_QUEUE_BOT);
            }
            Err(_) => {
                self.git.delete_ref(&format!("refs/heads/{branch}"));
                self.dequeue(n, "MERGE_CONFLICT");
            }
        }
    }

    /// Out of the queue, with GitHub's `dequeued` delivery. (GitHub's
    /// webhook schema says only "the reason"; its reasons are upper-case
    /// words, `MERGE_CONFLICT` and `CI_FAILURE` among them. ward quotes the
    /// reason, and decides on it only whether a conflict goes to the
    /// resolving stage.)
    pub(super) fn dequeue(&mut self, n: u64, reason: &str) {
        if let Some(at) = self.merge_groups.iter().position(|g| g.pull == n) {
            let group = self.merge_groups.remove(at);
            self.git.delete_ref(&format!("refs/heads/{}", group.branch));
            self.sync_refs(MERGE_QUEUE_BOT);
        }
        let mut payload = self.pull_payload("dequeued", n);
        payload["reason"] = json!(reason);
        self.deliver("pull_request", payload, MERGE_QUEUE_BOT);
    }

    /// After a check or a status: each group whose required checks all
    /// passed is merged; one with a failed check is dequeued.
    pub(super) fn settle_merge_groups(&mut self) {
        for group in self.merge_groups.clone() {
            let Some(base) = self.pulls.get(&group.pull).map(|p| p.base.clone()) else { continue };
            let required = self.merge_queues.get(&base).cloned().unwrap_or_default();
            let verdicts: Vec<Option<bool>> = required.iter().map(|name| self.verdict(&group.head_sha, name)).collect();
            if verdicts.contains(&Some(false)) {
                self.dequeue(group.pull, "CI_FAILURE");
            } else if verdicts.iter().all(|v| *v == Some(true)) {
                self.merge_group(&group, &base);
            }
        }
    }

    /// A required check on `sha`: passed, failed, or not reported yet.
    fn verdict(&self, sha: &str, name: &str) -> Option<bool> {
        let run = self.check_runs.iter().rev().find(|r| r.head_sha == sha && r.name == name);
        if let Some(r) = run {
            return r.conclusion.as_deref().map(|c| matches!(c, "success" | "neutral" | "skipped"));
        }
        let status = self.statuses.get(sha)?.iter().find(|(c, _)| c == name)?;
        match status.1.as_str() {
            "pending" => None,
            state => Some(state == "success"),
        }
    }

    /// The base moves to the group's commit (fast-forward) and the pull
    /// request is merged; a base that moved meanwhile gets a new group.
    fn merge_group(&mut self, group: &FakeMergeGroup, base: &str) {
        self.merge_groups.retain(|g| g.pull != group.pull);
        self.git.delete_ref(&format!("refs/heads/{}", group.branch));
        if self.git.set_ref(&format!("refs/heads/{base}"), &group.head_sha, Some(&group.base_sha)).is_err() {
            self.sync_refs(MERGE_QUEUE_BOT);
            self.build_group(group.pull);
            return;
        }
        let closed_at = self.now();
        {
            let pull = self.pulls.get_mut(&group.pull).expect("a queued pull request");
            pull.open = false;
            pull.merged = true;
            pull.merge_method = Some("squash".into());
            pull.merge_commit = Some(group.head_sha.clone());
            pull.merged_by = Some(MERGE_QUEUE_BOT.into());
            pull.closed_at = Some(closed_at);
        }
        self.sync_refs(MERGE_QUEUE_BOT);
        let payload = self.pull_payload("closed", group.pull);
        self.deliver("pull_request", payload, MERGE_QUEUE_BOT);
    }
}
