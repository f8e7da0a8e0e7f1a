//! `ward review N`: a person's review on the local forge, where nobody else
//! can review. It is recorded on the patient's pull request at its head
//! commit, by the local person (the forge's acting user, never a name typed
//! on the command line) with the permission the forge gives them; a patient
//! waiting for it is woken as GitHub's review event wakes it: its auditing
//! stage is queued for `ward run`.

use crate::config::Config;
use crate::forge::local::LocalForge;
use crate::forge::{Forge, IssueNumber, Permission, PullState, Review, ReviewState};

/// What the person decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    /// The text the treatment reads.
    RequestChanges(String),
}

/// What `review` recorded.
#[derive(Debug, Clone)]
pub struct Reviewed {
    pub pull: u64,
    pub head: String,
    pub reviewer: String,
    pub permission: Permission,
    /// Whether the review passes or blocks the audit (`approve_permission`).
    pub counts: bool,
    /// Whether the waiting patient's auditing stage was queued.
    pub woke: bool,
}

/// Why a review could not be recorded (bad input: nothing changed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewRefused(pub String);

/// Records `verdict` on the pull request of `issue`'s branch at its head,
/// and wakes the patient when it waits at `discharge.pending_label`.
pub async fn review(
    forge: &LocalForge,
    config: &Config,
    issue: IssueNumber,
    verdict: Verdict,
) -> anyhow::Result<Reviewed> {
    let patient = match forge.issue(issue).await {
        Err(crate::forge::ForgeError::IssueNotFound(..)) => {
            return Err(ReviewRefused(format!(
                "issue {issue} does not exist in {}; nothing to review",
                forge.describe()
            ))
            .into());
        }
        found => found?,
    };
    let branch = super::audit::patient_branch(issue);
    let Some(pull) = forge.pull_request_for_branch(&branch).await? else {
        return Err(ReviewRefused(format!(
            "{issue} has no pull request on {} yet (no treatment committed on `{branch}`); `ward chart notes {}` \
             says where the patient is",
            forge.describe(),
            issue.0
        ))
        .into());
    };
    if pull.state != PullState::Open || pull.head_sha.trim().is_empty() {
        return Err(ReviewRefused(format!(
            "pull request #{} of {issue} is {} with no head to review",
            pull.number,
            format!("{:?}", pull.state).to_lowercase()
        ))
        .into());
    }
    let (state, body) = match verdict {
        Verdict::Approve => (ReviewState::Approved, String::new()),
        Verdict::RequestChanges(text) if text.trim().is_empty() => {
            return Err(ReviewRefused(
                "--request-changes needs the change you ask for, e.g. --request-changes \"also handle spaces\"".into(),
            )
            .into());
        }
        Verdict::RequestChanges(text) => (ReviewState::ChangesRequested, text),
    };
    let reviewer = forge.acting_user().await?;
    let permission = forge.permission(&reviewer).await?;
    let review = Review { author: reviewer.clone(), state, commit_sha: pull.head_sha.clone(), body };
    forge.record_review(pull.number, review)?;
    let pending = &config.discharge.pending_label;
    let woke = patient.labels.contains(pending);
    if woke {
        forge.dispatch_stage(issue, pending).await?;
    }
    Ok(Reviewed {
        pull: pull.number,
        head: pull.head_sha,
        reviewer,
        permission,
        counts: permission >= config.approve_permission,
        woke,
    })
}

/// What `ward review` prints.
pub fn describe(issue: IssueNumber, config: &Config, r: &Reviewed) -> String {
    let permission = format!("{:?}", r.permission).to_lowercase();
    let mut out = format!(
        "review by `{}` ({permission}) recorded on pull request #{} of {issue} at {}\n",
        r.reviewer,
        r.pull,
        &r.head[..r.head.len().min(12)]
    );
    if !r.counts {
        out.push_str(&format!(
            "it does not count: ward.yml's `approve_permission` asks for {} or more\n",
            format!("{:?}", config.approve_permission).to_lowercase()
        ));
    }
    if r.woke {
        out.push_str("the waiting patient is queued: `ward run` audits it again\n");
    } else {
        out.push_str("the patient is not waiting yet: its discharge audit reads this review when it gets there\n");
    }
    out
}
