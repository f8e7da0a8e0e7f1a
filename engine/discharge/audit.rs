//! The I/O half of the discharge audit: gathers the facts from the forge
//! (the pull request of the patient's branch, its reviews, unresolved
//! threads, commits and the CI of its head commit) and hands them to the
//! pure [`crate::rules::discharge_audit::audit`]. A fact the forge could not
//! read (its retries exhausted, a refusal) is an error of the run, never a
//! verdict: the audit is not taken, nothing is written, and the next
//! trigger or the charge nurse's sweep audits again. A fact that was read
//! and is bad (no pull request for the branch, no head commit) is the
//! checklist's. Used by `ward audit N` (dry run) and the discharge stage.

use crate::chart::{Note, Sentinels};
use crate::config::Config;
use std::collections::BTreeMap;

use crate::forge::{Forge, ForgeError, IssueNumber, Permission, PullFacts};
use crate::rules::discharge_audit::{self, AuditFacts, Checklist};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("could not audit {issue}: {cause}")]
    Forge { issue: IssueNumber, cause: ForgeError },
    #[error("could not audit {issue}: its chart is not readable: {message}")]
    Chart { issue: IssueNumber, message: String },
}

/// The branch a patient is treated on.
pub fn patient_branch(issue: IssueNumber) -> String {
    crate::workspace::worktree::branch_name(issue.0)
}

/// Asks the forge for every fact of the audit of `branch`'s pull request
/// (one read on GitHub: [`Forge::pull_facts`]): the pull request, its
/// reviews, threads, commits, the CI of its head, and the permission of
/// each person whose review would count; with `discharge.migrations`, the
/// files it adds or changes. A reviewer the forge already said
/// can push meets a `needed` of write or less without another call; the
/// others are looked up one call each. A read that fails (after the
/// forge's retries) is the error: a transient failure of GitHub never
/// becomes a ❔ that sends the patient back.
pub async fn gather(forge: &dyn Forge, branch: &str, config: &Config) -> Result<AuditFacts, ForgeError> {
    let needed = config.approve_permission;
    let engine_account = forge.engine_account().clone();
    let Some(read) = forge.pull_facts(branch).await? else {
        return Ok(no_pull(engine_account, format!("no open pull request has head branch `{branch}`")));
    };
    let PullFacts { pull, reviews, unresolved_threads, commits, ci, can_push, merge_queue } = read;
    let logins = discharge_audit::reviewers_to_check(&pull, &engine_account, &reviews);
    let permissions = permissions(forge, &logins, &can_push, needed).await?;
    // The files cost a listing of their own (a call per 100 on GitHub),
    // made only for the migration check that reads them.
    let files = match &config.discharge.migrations {
        Some(_) => Ok(forge.pull_request_files(pull.number).await?),
        None => Err("not read: `discharge.migrations` is not set".into()),
    };
    Ok(AuditFacts {
        files,
        engine_account,
        ci: ci.ok_or_else(|| discharge_audit::no_head(pull.number)),
        pull: Ok(pull),
        reviews: Ok(reviews),
        unresolved_threads: Ok(unresolved_threads),
        commits: Ok(commits),
        permissions: Ok(permissions),
        merge_queue,
    })
}

/// The facts when the forge says the branch has no pull request: each says why.
fn no_pull(engine_account: crate::forge::EngineAccount, why: String) -> AuditFacts {
    let why = discharge_audit::Unread(why);
    AuditFacts {
        engine_account,
        merge_queue: None,
        files: Err(why.clone()),
        reviews: Err(why.clone()),
        unresolved_threads: Err(why.clone()),
        commits: Err(why.clone()),
        ci: Err(why.clone()),
        permissions: Err(why.clone()),
        pull: Err(why),
    }
}

/// The permission of each of `logins`: write for one who can push when
/// that is all the audit needs, else one call each.
async fn permissions(
    forge: &dyn Forge,
    logins: &[String],
    can_push: &BTreeMap<String, bool>,
    needed: Permission,
) -> Result<BTreeMap<String, Permission>, ForgeError> {
    let mut out = BTreeMap::new();
    for login in logins {
        let permission = match can_push.get(login) {
            Some(true) if needed <= Permission::Write => Permission::Write,
            _ => forge.permission(login).await?,
        };
        out.insert(login.clone(), permission);
    }
    Ok(out)
}

/// Reads and parses the chart of `issue` (an absent chart is empty).
pub async fn read_chart(forge: &dyn Forge, config: &Config, issue: IssueNumber) -> Result<Vec<Note>, AuditError> {
    let stored = forge.read_chart(issue).await.map_err(|cause| AuditError::Forge { issue, cause })?;
    match stored {
        None => Ok(Vec::new()),
        Some(chart) => Sentinels::new(&config.sentinel_prefix)
            .parse_chart(&chart.text)
            .map_err(|e| AuditError::Chart { issue, message: e.to_string() }),
    }
}

/// The whole audit of one patient, changing nothing: `ward audit N`.
pub async fn audit_issue(forge: &dyn Forge, config: &Config, issue: IssueNumber) -> Result<Checklist, AuditError> {
    let chart = read_chart(forge, config, issue).await?;
    let facts =
        gather(forge, &patient_branch(issue), config).await.map_err(|cause| AuditError::Forge { issue, cause })?;
    Ok(discharge_audit::audit(config, &chart, &facts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::NoteMeta;
    use crate::forge::local::LocalForge;
    use crate::forge::{CiState, CiStatus, CommitInfo, NewPullRequest, Review, ReviewState};
    use crate::rules::discharge_audit::Mark;

    const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";

    fn config() -> Config {
        Config::parse(include_str!("../../.github/ward.yml"), std::path::Path::new(crate::config::CONFIG_PATH), None)
            .unwrap()
    }

    fn note(kind: &str, run: &str, role: &str, body: &str) -> Note {
        Note {
            kind: kind.parse().expect("a known note kind"),
            meta: NoteMeta {
                run: run.into(),
                stage: "code-review".into(),
                role: role.into(),
                at: chrono::DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z").unwrap().into(),
            },
            body: body.into(),
        }
    }

    #[tokio::test]
    async fn the_local_forge_answers_every_fact() {
        let dir = tempfile::tempdir().unwrap();
        let forge = LocalForge::new(dir.path(), "ward-bot");
        let config = config();
        let issue = IssueNumber(1);

        // No pull request yet: everything but the chart items is blank.
        let list = audit_issue(&forge, &config, issue).await.unwrap();
        assert_eq!(list.item(discharge_audit::ItemId::Ci).unwrap().mark, Mark::Unknown);
        assert!(
            list.item(discharge_audit::ItemId::Threads)
                .unwrap()
                .note
                .contains("no open pull request has head branch `ward/issue-1`")
        );

        let review = format!(
            "## Scope against the plan\nok\n## Correctness\nok\n## Tests\nok\n## Security\nok\n## Verdict\nok\n\nCommit: {HEAD}"
        );
        let plan = "## Diagnosis\nd\n## Files to change\nf\n## Tests to add\nt\n## Risks\nr\n## Open questions\nNone.";
        let notes = vec![
            note("TREATMENT_PLAN", "r1", "fellow", plan),
            note("PLAN_REVIEW", "r2", "review-attending", "## Findings\nok\n## Verdict\napprove"),
            note("OUTCOME", "r2", "engine", "approve"),
            note("CODE_REVIEW", "r7", "review-attending", &review),
            note("OUTCOME", "r7", "engine", "approve"),
        ];
        let text = Sentinels::default().append(issue, None, &notes).unwrap().unwrap();
        forge.write_chart(issue, &text, None).await.unwrap();
        let pull = forge
            .open_pull_request(NewPullRequest {
                head_branch: "ward/issue-1".into(),
                base_branch: "main".into(),
                title: "Fix".into(),
                body: String::new(),
            })
            .await
            .unwrap();
        forge
            .update_pull(pull.number, |rec| {
                if let Some(p) = rec.pull.as_mut() {
                    p.head_sha = HEAD.into();
                }
                rec.reviews.push(Review {
                    author: "maria".into(),
                    state: ReviewState::Approved,
                    commit_sha: HEAD.into(),
                    body: "LGTM".into(),
                });
                rec.commits.push(CommitInfo { sha: HEAD.into(), message: "Fix the cache key".into(), parent_count: 1 });
            })
            .unwrap();
        let list = audit_issue(&forge, &config, issue).await.unwrap();
        assert_eq!(list.item(discharge_audit::ItemId::Ci).unwrap().mark, Mark::Waiting, "{}", list.render());
        // maria is nobody on this repository: her approval does not count yet.
        assert_eq!(list.item(discharge_audit::ItemId::PrApproval).unwrap().mark, Mark::Waiting, "{}", list.render());
        assert_eq!(list.outcome(), "audit-failed");
        forge.grant("maria", crate::forge::Permission::Write).unwrap();

        forge.set_ci_status(HEAD, &CiStatus::new(CiState::Success, vec!["test: success".into()])).unwrap();
        let list = audit_issue(&forge, &config, issue).await.unwrap();
        assert!(list.passed(), "{}", list.render());
    }
}
