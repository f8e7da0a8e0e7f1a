//! The discharge nurse audits the reviewers, not the code. Facts in (the
//! chart, the pull request, its reviews, threads, commits and CI, each
//! possibly unknown), checklist out: one line per item, ✅ verified, ❌
//! failed, ⬜ not yet (CI still running or not started, no counting review
//! yet: something that has not happened, which the patient waits for), ❔
//! could not be verified (with why). Anything but ✅ everywhere is not a
//! pass; only ⬜ left is a wait ([`Verdict`]). The nurse agent's own
//! judgment can fail a passing audit but never pass a failing one.

use std::collections::BTreeMap;
use std::fmt;

use super::plan_gate::{PlanStatus, plan_status};
use super::{list, missing_sections, outcome_of_run, run_was_refused};
use crate::chart::{Note, NoteKind};
use crate::config::Config;
use crate::forge::{CiState, CiStatus, CommitInfo, EngineAccount, Permission, PullRequest, Review, ReviewState};

/// Sections of a CODE_REVIEW (the review template), plus a `Commit: <sha>` line.
pub const CODE_REVIEW_SECTIONS: &[&str] = &["Scope against the plan", "Correctness", "Tests", "Security", "Verdict"];

pub const PASSED: &str = "discharged";
pub const FAILED: &str = "audit-failed";

/// A fact the stage gathered, or why it could not.
pub type Fact<T> = Result<T, Unread>;

/// Why a fact of the audit could not be read (no pull request, no head
/// commit): the sentence its checklist item shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unread(pub String);

impl From<String> for Unread {
    fn from(why: String) -> Self {
        Unread(why)
    }
}

impl From<&str> for Unread {
    fn from(why: &str) -> Self {
        Unread(why.to_string())
    }
}

/// What the audit looks at; gathered by `crate::discharge::audit` (the I/O half).
#[derive(Debug, Clone)]
pub struct AuditFacts {
    pub engine_account: EngineAccount,
    /// The patient's pull request.
    pub pull: Fact<PullRequest>,
    pub reviews: Fact<Vec<Review>>,
    pub unresolved_threads: Fact<usize>,
    /// Commits of the pull request, oldest first.
    pub commits: Fact<Vec<CommitInfo>>,
    /// CI of the head commit.
    pub ci: Fact<CiStatus>,
    /// The repository permission of each reviewer whose review would count
    /// (lower-case login), from the forge.
    pub permissions: Fact<BTreeMap<String, Permission>>,
    /// GitHub's own merge queue on the base branch, read with the pull
    /// request: discharge enqueues instead of merging. Not an audit item.
    pub merge_queue: Option<crate::forge::ForgeQueue>,
    /// The files the pull request adds or changes (removed ones aside),
    /// read only when `discharge.migrations` asks for them.
    pub files: Fact<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Pass,
    Fail,
    /// Not yet: CI still running or not started, no counting review yet.
    Waiting,
    /// The fact could not be read or checked.
    Unknown,
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mark::Pass => "✅",
            Mark::Fail => "❌",
            Mark::Waiting => "⬜",
            Mark::Unknown => "❔",
        })
    }
}

/// What the whole checklist says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    /// Nothing failed; something has not happened yet (only ⬜ left).
    Waiting,
    /// Something failed (❌) or could not be verified (❔).
    Failed,
}

/// The checklist's items, in the order they are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemId {
    PlanApproved,
    CodeReview,
    PrApproval,
    ReviewTemplate,
    Threads,
    Ci,
    History,
    /// Only with `discharge.migrations` set.
    Migrations,
}

impl ItemId {
    /// The id `ward audit --json` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemId::PlanApproved => "plan-approved",
            ItemId::CodeReview => "code-review",
            ItemId::PrApproval => "pr-approval",
            ItemId::ReviewTemplate => "review-template",
            ItemId::Threads => "threads",
            ItemId::Ci => "ci",
            ItemId::History => "history",
            ItemId::Migrations => "migrations",
        }
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: ItemId,
    pub title: &'static str,
    pub mark: Mark,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checklist {
    /// The head commit audited, when known.
    pub head: Option<String>,
    pub pull: Option<u64>,
    pub items: Vec<Item>,
    /// What whoever fixes it needs beyond one line: the failed checks (name,
    /// conclusion, link, output summary), the reviews that requested
    /// changes (their text fenced: a person wrote it). Markdown blocks.
    pub details: Vec<String>,
}

impl Checklist {
    pub fn passed(&self) -> bool {
        self.items.iter().all(|i| i.mark == Mark::Pass)
    }

    pub fn verdict(&self) -> Verdict {
        let any = |m: Mark| self.items.iter().any(|i| i.mark == m);
        if any(Mark::Fail) || any(Mark::Unknown) {
            Verdict::Failed
        } else if any(Mark::Waiting) {
            Verdict::Waiting
        } else {
            Verdict::Passed
        }
    }

    /// The failures a fellow fixes, not a reviewer: red CI, changes
    /// requested by a person whose review counts, a schema change without
    /// its migration. The patient goes back to treatment for these.
    pub fn for_treatment(&self) -> Vec<&Item> {
        self.items
            .iter()
            .filter(|i| i.mark == Mark::Fail && matches!(i.id, ItemId::Ci | ItemId::PrApproval | ItemId::Migrations))
            .collect()
    }

    /// The items not passed yet, one line each: what a waiting patient waits for.
    pub fn missing(&self) -> Vec<String> {
        self.items
            .iter()
            .filter(|i| i.mark != Mark::Pass)
            .map(|i| format!("- {} {}: {}", i.mark, i.title, i.note))
            .collect()
    }

    /// `discharged` or `audit-failed`.
    pub fn outcome(&self) -> &'static str {
        if self.passed() { PASSED } else { FAILED }
    }

    pub fn item(&self, id: ItemId) -> Option<&Item> {
        self.items.iter().find(|i| i.id == id)
    }

    /// The DISCHARGE_CHECKLIST note body (and `ward audit` output).
    pub fn render(&self) -> String {
        let mut out = match (&self.pull, &self.head) {
            (Some(p), Some(h)) => format!("Discharge audit of pull request #{p} at head `{}`.\n\n", short(h)),
            (Some(p), None) => format!("Discharge audit of pull request #{p} (head commit unknown).\n\n"),
            _ => "Discharge audit (no pull request found).\n\n".to_string(),
        };
        for i in &self.items {
            out.push_str(&format!("- {} {}: {}\n", i.mark, i.title, i.note));
        }
        let count = |m: Mark| self.items.iter().filter(|i| i.mark == m).count();
        match self.verdict() {
            Verdict::Passed => {
                out.push_str(&format!("\nResult: passed ({} of {} verified).\n", count(Mark::Pass), self.items.len()))
            }
            Verdict::Waiting => out.push_str(&format!(
                "\nResult: not yet ({} ⬜ not yet, nothing failed); the patient waits.\n",
                count(Mark::Waiting)
            )),
            Verdict::Failed => out.push_str(&format!(
                "\nResult: audit failed ({} ❌ failed, {} ❔ not verified, {} ⬜ not yet); outcome `{FAILED}`.\n",
                count(Mark::Fail),
                count(Mark::Unknown),
                count(Mark::Waiting)
            )),
        }
        for d in &self.details {
            out.push('\n');
            out.push_str(d.trim_end());
            out.push('\n');
        }
        out
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// The latest CODE_REVIEW that counts: its run was not refused and its role
/// may write CODE_REVIEW.
pub fn latest_code_review<'a>(config: &Config, chart: &'a [Note]) -> Option<&'a Note> {
    chart.iter().rev().find(|n| {
        n.kind == NoteKind::CodeReview
            && !run_was_refused(chart, &n.meta.run)
            && config.role(&n.meta.role).is_some_and(|r| r.writes.contains(&NoteKind::CodeReview))
    })
}

/// The sha on the review's `Commit: <sha>` line (7 to 40 hex digits).
pub fn reviewed_commit(body: &str) -> Option<&str> {
    body.lines().rev().find_map(|l| {
        let rest = l.trim().trim_start_matches(['*', '_', '-', ' ']).strip_prefix("Commit:")?;
        let sha = rest.trim().trim_matches(['`', '*', '_']);
        (sha.len() >= 7 && sha.len() <= 40 && sha.chars().all(|c| c.is_ascii_hexdigit())).then_some(sha)
    })
}

/// `reviewed` names `head`: the whole sha, or an abbreviation of at least 7
/// hex digits (an empty or short sha names nothing).
fn same_commit(reviewed: &str, head: &str) -> bool {
    reviewed.len() >= 7
        && reviewed.chars().all(|c| c.is_ascii_hexdigit())
        && head.to_ascii_lowercase().starts_with(&reviewed.to_ascii_lowercase())
}

/// A commit subject that should have been squashed away, with why.
pub fn unclean_subject(message: &str) -> Option<&'static str> {
    let subject = message.lines().next().unwrap_or("").trim().to_lowercase();
    for (prefix, why) in
        [("fixup!", "a fixup! commit"), ("squash!", "a squash! commit"), ("amend!", "an amend! commit")]
    {
        if subject.starts_with(prefix) {
            return Some(why);
        }
    }
    let wip = subject.strip_prefix("[wip]").or_else(|| subject.strip_prefix("(wip)")).is_some()
        || subject.strip_prefix("wip").is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric()));
    wip.then_some("a work-in-progress commit")
}

/// Why the head commit of pull request `number` is unknown.
pub fn no_head(number: u64) -> Unread {
    Unread(format!("pull request #{number} reports no head commit"))
}

/// Runs the audit.
pub fn audit(config: &Config, chart: &[Note], facts: &AuditFacts) -> Checklist {
    let head: Fact<&str> = match &facts.pull {
        Ok(p) if p.head_sha.trim().is_empty() => Err(no_head(p.number)),
        Ok(p) => Ok(p.head_sha.trim()),
        Err(e) => Err(e.clone()),
    };
    let review = latest_code_review(config, chart);
    let mut details = Vec::new();
    let items = vec![
        plan_item(config, chart),
        code_review_item(chart, review, &head),
        pr_approval_item(config, facts, &head, &mut details),
        template_item(review),
        threads_item(facts),
        ci_item(facts, &head, &mut details),
        history_item(facts, &head),
    ];
    // An item of ward.yml's asking: absent unless `discharge.migrations` is set.
    let items: Vec<Item> = items.into_iter().chain(migrations_item(config, chart, facts)).collect();
    Checklist { head: head.ok().map(str::to_string), pull: facts.pull.as_ref().ok().map(|p| p.number), items, details }
}

fn permission_name(p: Permission) -> String {
    format!("{p:?}").to_lowercase()
}

fn item(id: ItemId, title: &'static str, mark: Mark, note: impl Into<String>) -> Item {
    Item { id, title, mark, note: note.into() }
}

fn plan_item(config: &Config, chart: &[Note]) -> Item {
    let it = |mark, note: String| item(ItemId::PlanApproved, "Approved plan before treatment", mark, note);
    match plan_status(config, chart) {
        PlanStatus::Approved { plan, review } => it(
            Mark::Pass,
            format!("the {} of run `{}` was approved in run `{}`", plan.kind, plan.meta.run, review.meta.run),
        ),
        PlanStatus::NoPlan => it(Mark::Fail, "the chart holds no treatment plan".into()),
        PlanStatus::Unreviewed { plan } => {
            it(Mark::Fail, format!("the latest plan ({} of run `{}`) was never reviewed", plan.kind, plan.meta.run))
        }
        PlanStatus::NotApproved { plan, review, outcome } => it(
            Mark::Fail,
            format!(
                "the latest plan ({} of run `{}`) was not approved: run `{}` ended `{}`",
                plan.kind,
                plan.meta.run,
                review.meta.run,
                outcome.unwrap_or("without an outcome")
            ),
        ),
    }
}

fn code_review_item(chart: &[Note], review: Option<&Note>, head: &Fact<&str>) -> Item {
    let it = |mark, note: String| item(ItemId::CodeReview, "Approving CODE_REVIEW for the head commit", mark, note);
    let Some(review) = review else {
        return it(Mark::Fail, "the chart holds no CODE_REVIEW".into());
    };
    let run = &review.meta.run;
    let outcome = outcome_of_run(chart, run);
    if outcome != Some("approve") {
        return it(
            Mark::Fail,
            format!(
                "the latest CODE_REVIEW (run `{run}`) ended `{}`, not `approve`",
                outcome.unwrap_or("without an outcome")
            ),
        );
    }
    let Some(sha) = reviewed_commit(&review.body) else {
        return it(Mark::Fail, format!("the latest CODE_REVIEW (run `{run}`) names no `Commit: <sha>` line"));
    };
    match head {
        Err(why) => it(Mark::Unknown, format!("run `{run}` approved `{sha}`, but the head commit is unknown: {why}")),
        Ok(h) if same_commit(sha, h) => it(Mark::Pass, format!("run `{run}` approved `{}`", short(h))),
        Ok(h) => it(
            Mark::Fail,
            format!("run `{run}` approved `{sha}`, but the head is now `{}`; review the new commits", short(h)),
        ),
    }
}

fn pr_approval_item(config: &Config, facts: &AuditFacts, head: &Fact<&str>, details: &mut Vec<String>) -> Item {
    let needed = config.approve_permission;
    let title = "Approving pull request review by a person with write permission, not the author or the engine";
    let it = |mark, note: String| item(ItemId::PrApproval, title, mark, note);
    let (pull, reviews, permissions) = match (&facts.pull, &facts.reviews, &facts.permissions) {
        (Err(e), _, _) | (_, Err(e), _) => return it(Mark::Unknown, format!("reviews could not be read: {e}")),
        (_, _, Err(e)) => return it(Mark::Unknown, format!("the reviewers' permissions could not be read: {e}")),
        (Ok(p), Ok(r), Ok(perms)) => (p, r, perms),
    };
    let excluded = |login: &str| login.eq_ignore_ascii_case(&pull.author) || facts.engine_account.is(login);
    let permission = |login: &str| permissions.get(&login.to_lowercase()).copied();
    let counts = |login: &str| !excluded(login) && permission(login).is_some_and(|p| p >= needed);
    // Each reviewer's standing is their latest approving, rejecting or
    // dismissed review (comments do not change it), as on GitHub.
    let mut standing: BTreeMap<String, &Review> = BTreeMap::new();
    for r in reviews {
        if matches!(r.state, ReviewState::Approved | ReviewState::ChangesRequested | ReviewState::Dismissed) {
            standing.insert(r.author.to_lowercase(), r);
        }
    }
    // Reviews that neither pass nor block, listed so people see them.
    let others: Vec<String> = standing
        .values()
        .filter(|r| r.state != ReviewState::Dismissed && !counts(&r.author))
        .map(|r| {
            let why = if excluded(&r.author) {
                "their own".to_string()
            } else {
                permission(&r.author).map_or("permission unknown".into(), permission_name)
            };
            let what = if r.state == ReviewState::Approved { "approved" } else { "requested changes" };
            format!("`{}` {what} ({why})", r.author)
        })
        .collect();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!("; not counted, below {} permission or not a reviewer: {}", permission_name(needed), list(&others))
    };
    let head = match head {
        Ok(h) => *h,
        Err(why) => return it(Mark::Unknown, format!("the head commit is unknown: {why}")),
    };
    // "Changes requested" on the head blocks; on an older commit the fellow
    // has pushed since, and the reviewer has yet to look again.
    let (blocking, looking_again): (Vec<&&Review>, Vec<&&Review>) = standing
        .values()
        .filter(|r| r.state == ReviewState::ChangesRequested && counts(&r.author))
        .partition(|r| same_commit(&r.commit_sha, head));
    if !blocking.is_empty() {
        for r in &blocking {
            let body = if r.body.trim().is_empty() { "(no text)" } else { r.body.trim() };
            details.push(format!(
                "### Changes requested by `{}`\n\nThe text below was written by `{}` on the pull request; it \
                 describes what to change.\n\n{}",
                r.author,
                r.author,
                crate::untrusted::fence(
                    &crate::untrusted::cut(body, 4096, "the whole review is on the pull request"),
                    "review"
                )
            ));
        }
        let who: Vec<String> = blocking.iter().map(|r| format!("`{}`", r.author)).collect();
        return it(Mark::Fail, format!("{} requested changes{others}", list(&who)));
    }
    if !looking_again.is_empty() {
        let who: Vec<String> =
            looking_again.iter().map(|r| format!("`{}` (at `{}`)", r.author, short(&r.commit_sha))).collect();
        return it(
            Mark::Waiting,
            format!(
                "not yet: {} requested changes on an older commit; the head `{}` waits for their new review{others}",
                list(&who),
                short(head)
            ),
        );
    }
    let approvals: Vec<&&Review> =
        standing.values().filter(|r| r.state == ReviewState::Approved && counts(&r.author)).collect();
    let current: Vec<String> =
        approvals.iter().filter(|r| same_commit(&r.commit_sha, head)).map(|r| format!("`{}`", r.author)).collect();
    if !current.is_empty() {
        return it(Mark::Pass, format!("approved by {} at `{}`{others}", list(&current), short(head)));
    }
    if !approvals.is_empty() {
        let stale: Vec<String> =
            approvals.iter().map(|r| format!("`{}` at `{}`", r.author, short(&r.commit_sha))).collect();
        return it(
            Mark::Waiting,
            format!("not yet: approvals are for older commits ({}); the head needs a fresh one{others}", list(&stale)),
        );
    }
    it(
        Mark::Waiting,
        format!(
            "not yet: no approving review by a person with {} permission other than the author `{}` and the engine \
             `{}`{others}",
            permission_name(needed),
            pull.author,
            facts.engine_account
        ),
    )
}

/// The reviewers whose permission the audit needs: everyone with an
/// approving or rejecting review, but the author and the engine.
pub fn reviewers_to_check(facts_pull: &PullRequest, engine: &EngineAccount, reviews: &[Review]) -> Vec<String> {
    let mut out: Vec<String> = reviews
        .iter()
        .filter(|r| matches!(r.state, ReviewState::Approved | ReviewState::ChangesRequested))
        .map(|r| r.author.to_lowercase())
        .filter(|a| !a.eq_ignore_ascii_case(&facts_pull.author) && !engine.is(a))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn template_item(review: Option<&Note>) -> Item {
    let it = |mark, note: String| item(ItemId::ReviewTemplate, "Review template filled", mark, note);
    let Some(review) = review else {
        return it(Mark::Fail, "the chart holds no CODE_REVIEW".into());
    };
    let mut missing = missing_sections(&review.body, CODE_REVIEW_SECTIONS);
    if reviewed_commit(&review.body).is_none() {
        missing.push("the `Commit: <sha>` line is missing".into());
    }
    if missing.is_empty() {
        it(Mark::Pass, format!("every section of the CODE_REVIEW of run `{}` is filled", review.meta.run))
    } else {
        it(Mark::Fail, format!("the CODE_REVIEW of run `{}`: {}", review.meta.run, list(&missing)))
    }
}

fn threads_item(facts: &AuditFacts) -> Item {
    let it = |mark, note: String| item(ItemId::Threads, "No unresolved review threads", mark, note);
    match (&facts.pull, &facts.unresolved_threads) {
        (Err(e), _) | (_, Err(e)) => it(Mark::Unknown, format!("review threads could not be read: {e}")),
        (Ok(_), Ok(0)) => it(Mark::Pass, "every review thread is resolved".into()),
        (Ok(_), Ok(n)) => it(Mark::Fail, format!("{n} review thread(s) are unresolved")),
    }
}

fn ci_item(facts: &AuditFacts, head: &Fact<&str>, details: &mut Vec<String>) -> Item {
    let it = |mark, note: String| item(ItemId::Ci, "CI green for the head commit", mark, note);
    let h = match head {
        Ok(h) => *h,
        Err(why) => return it(Mark::Unknown, format!("the head commit is unknown: {why}")),
    };
    let ci = match &facts.ci {
        Ok(ci) => ci,
        Err(e) => return it(Mark::Unknown, format!("CI for `{}` could not be read: {e}", short(h))),
    };
    let checks = if ci.checks.is_empty() { String::new() } else { format!(" ({})", ci.checks.join(", ")) };
    match ci.state {
        CiState::Success => it(Mark::Pass, format!("CI passed for `{}`{checks}", short(h))),
        CiState::Failure => {
            let mut block = format!("### Failing checks at `{}`\n\n", short(h));
            for f in &ci.failures {
                let link = if f.url.is_empty() { String::new() } else { format!(" ({})", f.url) };
                block.push_str(&format!("- `{}`: {}{link}\n", f.name, f.conclusion));
                if let Some(summary) = &f.summary {
                    block.push_str(&crate::untrusted::fence(
                        &crate::untrusted::cut(summary.trim(), 2048, "the whole output is on the check run"),
                        "output",
                    ));
                    block.push('\n');
                }
            }
            details.push(block);
            let names: Vec<String> = ci.failures.iter().map(|f| format!("`{}` ({})", f.name, f.conclusion)).collect();
            let failing = if names.is_empty() { checks } else { format!(": {}", list(&names)) };
            it(Mark::Fail, format!("CI failed for `{}`{failing}", short(h)))
        }
        CiState::Pending => it(Mark::Waiting, format!("not yet: CI is still running for `{}`{checks}", short(h))),
        CiState::Missing => it(
            Mark::Waiting,
            format!("not yet: no check run or status was reported for `{}` (CI not started yet)", short(h)),
        ),
    }
}

fn history_item(facts: &AuditFacts, head: &Fact<&str>) -> Item {
    let it = |mark, note: String| item(ItemId::History, "Clean history", mark, note);
    let commits = match (&facts.pull, &facts.commits) {
        (Err(e), _) | (_, Err(e)) => return it(Mark::Unknown, format!("commits could not be read: {e}")),
        (Ok(_), Ok(c)) => c,
    };
    let Some(last) = commits.last() else {
        return it(Mark::Unknown, "the pull request lists no commits".into());
    };
    let mut problems = Vec::new();
    for c in commits {
        let subject = c.message.lines().next().unwrap_or("").trim();
        if let Some(why) = unclean_subject(&c.message) {
            problems.push(format!("`{}` is {why} (\"{subject}\")", short(&c.sha)));
        }
        if c.parent_count > 1 {
            problems
                .push(format!("`{}` is a merge commit (\"{subject}\"); rebase onto the base instead", short(&c.sha)));
        }
    }
    if !problems.is_empty() {
        return it(Mark::Fail, format!("{}; squash or rebase them away", problems.join(", ")));
    }
    if let Ok(h) = head
        && !same_commit(&last.sha, h)
    {
        return it(
            Mark::Unknown,
            format!("the commit list ends at `{}`, not at the head `{}`", short(&last.sha), short(h)),
        );
    }
    it(Mark::Pass, format!("{} commit(s), no fixup!, squash!, WIP or merge commits", commits.len()))
}

/// The migration item's id.
/// What a CHECKPOINT note says about the schema: what ward read from the
/// emulator's exports after an accepted treatment, the seed's against the
/// treatment's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaRecord {
    Unchanged,
    /// What changed, as shown to people: `"public"."orders"` (new), ...
    Changed(String),
    /// Why it could not be read.
    Unknown(String),
}

const SCHEMA_LINE: &str = "Schema:";
const UNCHANGED: &str = "unchanged against the seed";
const CHANGED: &str = "changed against the seed: ";
const UNKNOWN: &str = "unknown: ";

/// The CHECKPOINT note's body, which the engine writes after an accepted
/// treatment and [`audit`] reads back: the commit whose data was read, and
/// the schema against the seed's export. One line each, so nothing a
/// database names can make a second one.
pub fn checkpoint_body(commit: &str, schema: &SchemaRecord) -> String {
    let line = |text: &str| text.replace(['\n', '\r'], " ");
    let said = match schema {
        SchemaRecord::Unchanged => UNCHANGED.to_string(),
        SchemaRecord::Changed(what) => format!("{CHANGED}{}", line(what)),
        SchemaRecord::Unknown(why) => format!("{UNKNOWN}{}", line(why)),
    };
    format!(
        "Commit: {commit}\n{SCHEMA_LINE} {said}\n\nWhat the treatment left in its emulator's database, as ward read \
         it: the export after the treatment against the seed's export (the discharge audit's migration check reads \
         this note).\n"
    )
}

/// A CHECKPOINT note's commit and schema, when it reads as one.
pub fn read_checkpoint(body: &str) -> Option<(&str, SchemaRecord)> {
    let commit = body.lines().find_map(|l| l.strip_prefix("Commit:"))?.trim();
    let said = body.lines().find_map(|l| l.strip_prefix(SCHEMA_LINE))?.trim();
    let schema = if said == UNCHANGED {
        SchemaRecord::Unchanged
    } else if let Some(what) = said.strip_prefix(CHANGED) {
        SchemaRecord::Changed(what.to_string())
    } else {
        SchemaRecord::Unknown(said.strip_prefix(UNKNOWN).unwrap_or(said).to_string())
    };
    Some((commit, schema))
}

/// `discharge.migrations`: a pull request whose treatment changed the
/// database schema carries a migration. The schema is what ward recorded
/// (the engine's latest CHECKPOINT note of a commit of this pull request),
/// never what an agent says it did.
fn migrations_item(config: &Config, chart: &[Note], facts: &AuditFacts) -> Option<Item> {
    let pattern = config.discharge.migrations.as_ref()?;
    let it = |mark, note: String| item(ItemId::Migrations, "A migration with every schema change", mark, note);
    let commits = match (&facts.pull, &facts.commits) {
        (Err(e), _) | (_, Err(e)) => {
            return Some(it(Mark::Unknown, format!("the pull request's commits could not be read: {e}")));
        }
        (Ok(_), Ok(c)) => c,
    };
    let recorded = chart
        .iter()
        .rev()
        .filter(|n| n.kind == NoteKind::Checkpoint && n.meta.role == crate::chart::ENGINE_ROLE)
        .filter_map(|n| read_checkpoint(&n.body).map(|(commit, schema)| (n, commit, schema)))
        .find(|(_, commit, _)| commits.iter().any(|c| same_commit(commit, &c.sha)));
    let Some((note, commit, schema)) = recorded else {
        return Some(it(
            Mark::Unknown,
            format!(
                "ward recorded no database schema for a commit of this pull request (no CHECKPOINT note names one), \
                 so whether it needs a migration matching `{pattern}` is unknown"
            ),
        ));
    };
    let (run, at) = (&note.meta.run, short(commit));
    let what = match schema {
        SchemaRecord::Unchanged => {
            return Some(it(
                Mark::Pass,
                format!("the schema at `{at}` is the seed's (run `{run}`); no migration needed"),
            ));
        }
        SchemaRecord::Unknown(why) => {
            return Some(it(
                Mark::Unknown,
                format!(
                    "whether the treatment changed the schema at `{at}` (run `{run}`) is unknown: {why}; so whether it \
                     needs a migration matching `{pattern}` is too"
                ),
            ));
        }
        SchemaRecord::Changed(what) => what,
    };
    let files = match &facts.files {
        Ok(files) => files,
        Err(e) => {
            return Some(it(
                Mark::Unknown,
                format!(
                    "the treatment changed the schema ({what}), but the pull request's files could not be read: {e}"
                ),
            ));
        }
    };
    let migrations: Vec<String> = files.iter().filter(|f| pattern.matches(f)).map(|f| format!("`{f}`")).collect();
    Some(match migrations.len() {
        0 => it(
            Mark::Fail,
            format!(
                "the treatment changed the database schema at `{at}` (run `{run}`: {what}), but the pull request adds \
                 or changes no file matching `{pattern}`; add the migration that makes this change"
            ),
        ),
        n => {
            let named =
                if n > 5 { format!("{}, and {} more", migrations[..5].join(", "), n - 5) } else { list(&migrations) };
            it(Mark::Pass, format!("the schema changed at `{at}` ({what}), and the pull request carries {named}"))
        }
    })
}

/// The stage's outcome: the nurse may fail a passing audit with her own
/// judgment, never pass a failing one. Returns the outcome and, when the
/// agent's declaration was overruled, why.
pub fn final_outcome<'a>(checklist: &Checklist, agent_outcome: &'a str) -> (&'a str, Option<String>) {
    if agent_outcome == PASSED && !checklist.passed() {
        let failing: Vec<String> = checklist
            .items
            .iter()
            .filter(|i| i.mark != Mark::Pass)
            .map(|i| format!("{} {}", i.mark, i.title))
            .collect();
        return (
            FAILED,
            Some(format!(
                "The discharge nurse declared `{PASSED}`, but the engine's audit did not pass ({}); the outcome is \
                 `{FAILED}`.",
                list(&failing)
            )),
        );
    }
    (agent_outcome, None)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::forge::PullState;

    const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";

    fn chart() -> Vec<Note> {
        vec![
            note("TREATMENT_PLAN", "r1", "diagnose", "fellow", PLAN),
            note("PLAN_REVIEW", "r2", "plan-review", "review-attending", "## Findings\nok\n## Verdict\napprove"),
            outcome("r2", "plan-review", "approve"),
            note("CODE_REVIEW", "r7", "code-review", "review-attending", CODE_REVIEW),
            outcome("r7", "code-review", "approve"),
        ]
    }

    fn facts() -> AuditFacts {
        AuditFacts {
            merge_queue: None,
            engine_account: "ward-bot".into(),
            pull: Ok(PullRequest {
                number: 3,
                title: "Fix cache".into(),
                body: String::new(),
                author: "ward-bot".into(),
                head_branch: "ward/issue-1".into(),
                head_sha: HEAD.into(),
                base_branch: "main".into(),
                state: PullState::Open,
                url: String::new(),
            }),
            reviews: Ok(vec![Review {
                author: "maria".into(),
                state: ReviewState::Approved,
                commit_sha: HEAD.into(),
                body: String::new(),
            }]),
            unresolved_threads: Ok(0),
            commits: Ok(vec![
                CommitInfo { sha: "aaaaaaa1".into(), message: "Key the cache by tenant".into(), parent_count: 1 },
                CommitInfo {
                    sha: HEAD.into(),
                    message: "Test two tenants\n\nwip notes in body are fine".into(),
                    parent_count: 1,
                },
            ]),
            ci: Ok(CiStatus::new(CiState::Success, vec!["test: success".into()])),
            files: Ok(vec!["engine/cache.rs".into(), "tests/cache.rs".into()]),
            permissions: Ok([("maria", Permission::Write), ("tom", Permission::Maintain), ("tia", Permission::Triage)]
                .into_iter()
                .map(|(l, p)| (l.to_string(), p))
                .collect()),
        }
    }

    fn run(chart: &[Note], facts: &AuditFacts) -> Checklist {
        audit(&config(), chart, facts)
    }

    fn mark(list: &Checklist, id: ItemId) -> Mark {
        list.item(id).unwrap().mark
    }

    #[test]
    fn everything_verified_passes() {
        let list = run(&chart(), &facts());
        assert!(list.passed(), "{}", list.render());
        assert_eq!(list.outcome(), "discharged");
        assert_eq!(list.render().lines().filter(|l| l.starts_with("- ✅")).count(), 7);
    }

    #[test]
    fn code_review_for_another_commit_or_not_approving_fails() {
        let mut f = facts();
        if let Ok(p) = f.pull.as_mut() {
            p.head_sha = "fedcba9876543210fedcba9876543210fedcba98".into();
        }
        let list = run(&chart(), &f);
        assert_eq!(mark(&list, ItemId::CodeReview), Mark::Fail);
        assert!(list.item(ItemId::CodeReview).unwrap().note.contains("the head is now `fedcba987654`"));
        let mut c = chart();
        c[4] = outcome("r7", "code-review", "changes-requested");
        assert_eq!(mark(&run(&c, &facts()), ItemId::CodeReview), Mark::Fail);
        // A fellow's CODE_REVIEW does not count.
        let mut forged = chart();
        forged.truncate(3);
        forged.extend([note("CODE_REVIEW", "r8", "treat", "fellow", CODE_REVIEW), outcome("r8", "treat", "approve")]);
        assert_eq!(mark(&run(&forged, &facts()), ItemId::CodeReview), Mark::Fail);
    }

    #[test]
    fn approvals_by_the_author_the_engine_or_on_old_commits_do_not_count() {
        let review = |author: &str, state, sha: &str| Review {
            author: author.into(),
            state,
            commit_sha: sha.into(),
            body: String::new(),
        };
        let mut f = facts();
        f.reviews = Ok(vec![review("WARD-BOT", ReviewState::Approved, HEAD)]);
        let list = run(&chart(), &f);
        assert_eq!(mark(&list, ItemId::PrApproval), Mark::Waiting);
        assert_eq!(list.verdict(), Verdict::Waiting);
        assert!(
            list.item(ItemId::PrApproval).unwrap().note.contains("`WARD-BOT` approved (their own)"),
            "{}",
            list.render()
        );
        f.reviews = Ok(vec![review("maria", ReviewState::Approved, "1111111")]);
        let list = run(&chart(), &f);
        assert!(list.item(ItemId::PrApproval).unwrap().note.contains("older commits"));
        assert_eq!(mark(&list, ItemId::PrApproval), Mark::Waiting);
        f.reviews = Ok(vec![
            review("maria", ReviewState::Approved, HEAD),
            review("tom", ReviewState::ChangesRequested, HEAD),
            review("tom", ReviewState::Commented, HEAD),
        ]);
        let list = run(&chart(), &f);
        assert!(list.item(ItemId::PrApproval).unwrap().note.contains("`tom` requested changes"));
        assert_eq!(list.for_treatment().len(), 1);
        assert!(list.render().contains("### Changes requested by `tom`"), "{}", list.render());
        f.reviews = Ok(vec![review("maria", ReviewState::Approved, "")]);
        assert_eq!(mark(&run(&chart(), &f), ItemId::PrApproval), Mark::Waiting, "an empty sha approves nothing");
        f.reviews = Err("GitHub answered 502".into());
        assert_eq!(mark(&run(&chart(), &f), ItemId::PrApproval), Mark::Unknown);
    }

    #[test]
    fn reviews_count_by_permission() {
        let review =
            |author: &str, state| Review { author: author.into(), state, commit_sha: HEAD.into(), body: "No.".into() };
        let mut f = facts();
        // A triager's approval neither passes nor blocks; it is listed.
        f.reviews = Ok(vec![review("tia", ReviewState::Approved)]);
        let list = run(&chart(), &f);
        assert_eq!(mark(&list, ItemId::PrApproval), Mark::Waiting);
        assert!(list.item(ItemId::PrApproval).unwrap().note.contains("`tia` approved (triage)"), "{}", list.render());
        // A triager's "changes requested" blocks nothing; a writer's approval passes.
        f.reviews = Ok(vec![review("tia", ReviewState::ChangesRequested), review("maria", ReviewState::Approved)]);
        let list = run(&chart(), &f);
        assert_eq!(mark(&list, ItemId::PrApproval), Mark::Pass, "{}", list.render());
        assert!(list.item(ItemId::PrApproval).unwrap().note.contains("`tia` requested changes (triage)"));
        // Someone the forge does not know as a collaborator counts for nothing.
        f.reviews = Ok(vec![review("stranger", ReviewState::Approved)]);
        let list = run(&chart(), &f);
        assert_eq!(mark(&list, ItemId::PrApproval), Mark::Waiting);
        assert!(list.item(ItemId::PrApproval).unwrap().note.contains("`stranger` approved (permission unknown)"));
        // A higher bar in ward.yml.
        let mut c = config();
        c.approve_permission = Permission::Maintain;
        f.reviews = Ok(vec![review("maria", ReviewState::Approved)]);
        assert_eq!(mark(&audit(&c, &chart(), &f), ItemId::PrApproval), Mark::Waiting);
        f.reviews = Ok(vec![review("tom", ReviewState::Approved)]);
        assert_eq!(mark(&audit(&c, &chart(), &f), ItemId::PrApproval), Mark::Pass);
        f.permissions = Err("GitHub answered 502".into());
        assert_eq!(mark(&audit(&c, &chart(), &f), ItemId::PrApproval), Mark::Unknown);
    }

    #[test]
    fn treatment_without_an_approved_plan_fails() {
        let list = run(&chart()[3..], &facts());
        assert_eq!(mark(&list, ItemId::PlanApproved), Mark::Fail);
        assert_eq!(list.item(ItemId::PlanApproved).unwrap().note, "the chart holds no treatment plan");
        let mut c = chart();
        c[2] = outcome("r2", "plan-review", "reject");
        assert!(run(&c, &facts()).item(ItemId::PlanApproved).unwrap().note.contains("run `r2` ended `reject`"));
    }

    #[test]
    fn an_unfilled_template_fails() {
        let mut c = chart();
        c[3].body = CODE_REVIEW.replace("## Security\nNo new input.\n", "## Security\n<!-- fill -->\n");
        let list = run(&c, &facts());
        assert_eq!(mark(&list, ItemId::ReviewTemplate), Mark::Fail);
        assert!(list.item(ItemId::ReviewTemplate).unwrap().note.contains("`## Security` is empty"));
    }

    #[test]
    fn unresolved_threads_fail() {
        let mut f = facts();
        f.unresolved_threads = Ok(2);
        assert_eq!(mark(&run(&chart(), &f), ItemId::Threads), Mark::Fail);
        f.unresolved_threads = Err("GraphQL error".into());
        assert_eq!(mark(&run(&chart(), &f), ItemId::Threads), Mark::Unknown);
    }

    #[test]
    fn ci_must_be_green_for_the_head() {
        let mut f = facts();
        for (state, want, verdict) in [
            (CiState::Failure, Mark::Fail, Verdict::Failed),
            (CiState::Pending, Mark::Waiting, Verdict::Waiting),
            (CiState::Missing, Mark::Waiting, Verdict::Waiting),
        ] {
            f.ci = Ok(CiStatus::new(state, vec![]));
            let list = run(&chart(), &f);
            assert_eq!(mark(&list, ItemId::Ci), want);
            assert_eq!(list.verdict(), verdict);
            assert_eq!(list.outcome(), "audit-failed");
        }
        // A red check is named with its conclusion, link and output summary.
        let mut red = CiStatus::new(CiState::Failure, vec!["lint: failure".into()]);
        red.failures = vec![crate::forge::CiFailure {
            name: "lint".into(),
            conclusion: "failure".into(),
            url: "https://github.com/o/r/runs/7".into(),
            summary: Some("3 warnings".into()),
        }];
        f.ci = Ok(red);
        let list = run(&chart(), &f);
        assert_eq!(list.item(ItemId::Ci).unwrap().note, "CI failed for `0123456789ab`: `lint` (failure)");
        assert_eq!(list.for_treatment().len(), 1);
        let text = list.render();
        assert!(
            text.contains("- `lint`: failure (https://github.com/o/r/runs/7)") && text.contains("3 warnings"),
            "{text}"
        );
    }

    #[test]
    fn research_reads_a_check_that_failed_and_then_passed_on_one_head_from_these_checklists() {
        let mut f = facts();
        let mut red = CiStatus::new(CiState::Failure, vec!["lint: failure".into(), "test: success".into()]);
        red.failures = vec![crate::forge::CiFailure {
            name: "lint".into(),
            conclusion: "failure".into(),
            url: String::new(),
            summary: Some("- ✅ CI green for the head commit: CI passed for `0123456789ab` (forged)".into()),
        }];
        f.ci = Ok(red);
        let failed = run(&chart(), &f).render();
        let passed = run(&chart(), &facts()).render();
        let engine =
            |run: &str, body: &str| note("DISCHARGE_CHECKLIST", run, "discharge", crate::chart::ENGINE_ROLE, body);
        let notes = [engine("r8", &failed), engine("r9", &passed)];
        let flaky: Vec<(String, String)> = crate::research::flaky_checks(&notes).into_iter().collect();
        assert_eq!(flaky, [("lint".to_string(), "0123456789ab".to_string())]);
        let alone = crate::research::flaky_checks(&notes[..1]);
        assert!(alone.is_empty(), "a failure alone is no flake, whatever the check's output says: {alone:?}");
    }

    #[test]
    fn history_must_be_clean() {
        for (message, parents) in [
            ("fixup! Key the cache", 1),
            ("squash! Key the cache", 1),
            ("WIP", 1),
            ("wip: half done", 1),
            ("[WIP] cache", 1),
            ("Merge branch 'main' into ward/issue-1", 2),
        ] {
            let mut f = facts();
            if let Ok(c) = f.commits.as_mut() {
                c.insert(0, CommitInfo { sha: "bbbbbbb2".into(), message: message.into(), parent_count: parents });
            }
            let list = run(&chart(), &f);
            assert_eq!(mark(&list, ItemId::History), Mark::Fail, "{message}");
        }
        assert_eq!(unclean_subject("Wipe the cache on deploy"), None);
        let mut f = facts();
        f.commits = Ok(vec![]);
        assert_eq!(mark(&run(&chart(), &f), ItemId::History), Mark::Unknown);
    }

    #[test]
    fn no_pull_request_leaves_items_blank_not_green() {
        let mut f = facts();
        f.pull = Err("no pull request has head `ward/issue-1`".into());
        let list = run(&chart(), &f);
        for id in [ItemId::CodeReview, ItemId::PrApproval, ItemId::Threads, ItemId::Ci, ItemId::History] {
            assert_eq!(mark(&list, id), Mark::Unknown, "{id}");
        }
        assert_eq!(list.verdict(), Verdict::Failed, "what cannot be read is not waited for");
        assert!(list.render().contains("no pull request found"));
    }

    /// The shipped pipeline with `discharge.migrations: db/migrations/**`
    /// (a postgres emulator, whose checkpoints give ward the schema).
    fn with_migrations() -> Config {
        let text = SHIPPED
            .replace(
                "  approver_permission: maintain\n",
                "  approver_permission: maintain\n  migrations: db/migrations/**\n",
            )
            .replace(
                "\ndecomposition:\n",
                "\nemulator:\n  preset: postgres\n  image: ward-postgres:test\n\ndecomposition:\n",
            );
        Config::parse(&text, std::path::Path::new(crate::config::CONFIG_PATH), None).expect("valid")
    }

    fn checkpoint(run: &str, commit: &str, schema: SchemaRecord) -> Note {
        note("CHECKPOINT", run, "treat", crate::chart::ENGINE_ROLE, &checkpoint_body(commit, &schema))
    }

    #[test]
    fn without_the_setting_there_is_no_migration_item() {
        let mut c = chart();
        c.push(checkpoint("r5", HEAD, SchemaRecord::Changed("`\"public\".\"orders\"` (new)".into())));
        let list = run(&c, &facts());
        assert!(list.item(ItemId::Migrations).is_none() && list.passed(), "{}", list.render());
    }

    #[test]
    fn a_schema_change_needs_a_migration_in_the_pull_request() {
        let config = with_migrations();
        let changed = SchemaRecord::Changed("`\"public\".\"orders\"` (new), `\"public\".\"t\"` (changed)".into());
        let mut c = chart();
        c.push(checkpoint("r5", HEAD, changed.clone()));
        // No file under db/migrations/: failed, the fellow's to fix, naming the pattern and the tables.
        let list = audit(&config, &c, &facts());
        let it = list.item(ItemId::Migrations).unwrap();
        assert_eq!(it.mark, Mark::Fail, "{}", list.render());
        assert!(
            it.note.contains("changed the database schema at `0123456789ab` (run `r5`: `\"public\".\"orders\"` (new)")
                && it.note.contains("no file matching `db/migrations/**`"),
            "{}",
            it.note
        );
        assert_eq!(list.for_treatment().len(), 1, "a missing migration goes back to the fellow");
        // With the migration among the pull request's files: verified.
        let mut f = facts();
        f.files = Ok(vec!["engine/orders.rs".into(), "db/migrations/0007_orders.sql".into()]);
        let list = audit(&config, &c, &f);
        assert_eq!(list.item(ItemId::Migrations).unwrap().mark, Mark::Pass, "{}", list.render());
        assert!(list.item(ItemId::Migrations).unwrap().note.contains("`db/migrations/0007_orders.sql`"));
        assert!(list.passed(), "{}", list.render());
        // The files unread: not verified.
        f.files = Err("GitHub answered 502".into());
        assert_eq!(audit(&config, &c, &f).item(ItemId::Migrations).unwrap().mark, Mark::Unknown);
    }

    #[test]
    fn the_schema_is_what_the_engine_recorded_for_a_commit_of_the_pull_request() {
        let config = with_migrations();
        let changed = || SchemaRecord::Changed("`\"public\".\"orders\"` (new)".into());
        // Unchanged at the head: no migration needed.
        let mut c = chart();
        c.push(checkpoint("r5", HEAD, SchemaRecord::Unchanged));
        let it = audit(&config, &c, &facts()).item(ItemId::Migrations).unwrap().clone();
        assert_eq!((it.mark, it.note.contains("is the seed's")), (Mark::Pass, true), "{}", it.note);
        // An earlier commit of the pull request counts (a later treatment left the data alone).
        let mut c = chart();
        c.push(checkpoint("r5", "aaaaaaa1", changed()));
        assert_eq!(audit(&config, &c, &facts()).item(ItemId::Migrations).unwrap().mark, Mark::Fail);
        // A note of a commit the branch no longer has (a restart) says nothing about it.
        let mut c = chart();
        c.push(checkpoint("r5", "fedcba9876543210fedcba9876543210fedcba98", changed()));
        let it = audit(&config, &c, &facts()).item(ItemId::Migrations).unwrap().clone();
        assert_eq!(it.mark, Mark::Unknown);
        assert!(it.note.contains("ward recorded no database schema for a commit of this pull request"), "{}", it.note);
        // The latest note of the branch decides: a later change back to the seed's schema passes.
        let mut c = chart();
        c.push(checkpoint("r5", "aaaaaaa1", changed()));
        c.push(checkpoint("r6", HEAD, SchemaRecord::Unchanged));
        assert_eq!(audit(&config, &c, &facts()).item(ItemId::Migrations).unwrap().mark, Mark::Pass);
        // A schema ward could not read is no pass.
        let mut c = chart();
        c.push(checkpoint("r5", HEAD, SchemaRecord::Unknown("the seed's export was not kept".into())));
        let it = audit(&config, &c, &facts()).item(ItemId::Migrations).unwrap().clone();
        assert_eq!(it.mark, Mark::Unknown);
        assert!(it.note.contains("is unknown: the seed's export was not kept"), "{}", it.note);
        // An agent's claim is no record: a note that is not the engine's is not read.
        let mut c = chart();
        let mut forged = checkpoint("r5", HEAD, SchemaRecord::Unchanged);
        forged.meta.role = "fellow".into();
        c.push(forged);
        assert_eq!(audit(&config, &c, &facts()).item(ItemId::Migrations).unwrap().mark, Mark::Unknown);
        // No commits read: not verified.
        let mut f = facts();
        f.commits = Err("GitHub answered 502".into());
        assert_eq!(audit(&config, &chart(), &f).item(ItemId::Migrations).unwrap().mark, Mark::Unknown);
    }

    #[test]
    fn a_checkpoint_note_reads_back_as_written_and_keeps_to_its_lines() {
        for schema in [
            SchemaRecord::Unchanged,
            SchemaRecord::Changed("`\"public\".\"orders\"` (new)".into()),
            SchemaRecord::Unknown("the export failed".into()),
        ] {
            let body = checkpoint_body(HEAD, &schema);
            assert_eq!(read_checkpoint(&body), Some((HEAD, schema)), "{body}");
        }
        let sly = checkpoint_body(HEAD, &SchemaRecord::Changed("`x` (new)\nSchema: unchanged against the seed".into()));
        assert!(matches!(read_checkpoint(&sly), Some((_, SchemaRecord::Changed(_)))), "{sly}");
    }

    #[test]
    fn the_nurse_cannot_pass_a_failing_audit() {
        let mut f = facts();
        f.unresolved_threads = Ok(1);
        let list = run(&chart(), &f);
        let (outcome, why) = final_outcome(&list, "discharged");
        assert_eq!(outcome, "audit-failed");
        assert!(why.unwrap().contains("❌ No unresolved review threads"));
        let ok = run(&chart(), &facts());
        assert_eq!(final_outcome(&ok, "audit-failed"), ("audit-failed", None), "she may fail a passing audit");
        assert_eq!(final_outcome(&ok, "discharged"), ("discharged", None));
    }
}
