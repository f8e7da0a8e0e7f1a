//! The safety department's post-incident review: a discharged patient's
//! change reverted on the base branch opens an incident.
//!
//! `ward safety` (and every `ward sweep`) reads the base branch's newest
//! commits for git's revert line, `This reverts commit <sha>.`, and matches
//! the reverted commit to a merge ward made: the pull request of a
//! discharged patient's branch (`ward/issue-<n>`) merged as that commit
//! (its number in the commit's message, as GitHub's squash and merge
//! commits and the local forge's merge commits write it), or whose head is
//! that commit (a fast-forward). Each such revert becomes one incident: an
//! issue at [`INCIDENT_LABEL`] linking the patient, its chart, its pull
//! request and the revert, and not admitted: nothing runs until a person
//! applies the admission label. Admitted, the planner's incident mode writes
//! the post-incident review.
//!
//! Idempotent: the incident's first line is a marker naming the revert, and
//! is trusted only on issues the engine wrote; a revert that already has
//! one opens nothing. The issue is the only write, so a run killed at any
//! point (fault point `after-incident-filed`) is completed by the next.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use anyhow::Context;
use chrono::{DateTime, Utc};
use regex::Regex;

use crate::config::Config;
use crate::forge::{BranchCommit, EngineAccount, Forge, Issue, IssueNumber, LabelSpec, NewIssue, PullState};
use crate::outcomes::Revert;

/// Where an incident waits for a person.
pub const INCIDENT_LABEL: &str = "ward:incident";
/// How many of the base branch's newest commits one run reads.
pub const HISTORY: usize = 200;
/// Reverts older than this are not looked at (their incidents were opened
/// when they were new, or they predate ward): every sweep stays cheap.
pub const HORIZON_DAYS: i64 = 30;
/// Discharged patients whose pull request one run reads, newest first.
pub const MAX_LOOKUPS: usize = 100;

static REVERTS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^This reverts commit ([0-9a-f]{40})\b").expect("revert regex"));
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^<!-- ward-incident patient=([1-9][0-9]{0,11}) revert=([0-9a-f]{40}) reverted=([0-9]{1,12}) -->$")
        .expect("incident marker regex")
});
/// `Title (#12)` (GitHub's squash) or `Merge pull request #12 from ...`.
static PULL_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:\(#([1-9][0-9]{0,9})\)\s*$|^Merge pull request #([1-9][0-9]{0,9}) )").expect("pull number regex")
});

/// One revert commit of the base branch: which commit it reverts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertCommit {
    pub sha: String,
    pub reverts: String,
    pub title: String,
    pub at: DateTime<Utc>,
}

/// The reverts among `commits` (each commit once; a commit that reverts
/// several names each).
pub fn revert_commits(commits: &[BranchCommit]) -> Vec<RevertCommit> {
    commits
        .iter()
        .flat_map(|c| {
            let title = c.message.lines().next().unwrap_or("").to_string();
            REVERTS.captures_iter(&c.message).map(move |m| RevertCommit {
                sha: c.sha.clone(),
                reverts: m[1].to_string(),
                title: title.clone(),
                at: c.at,
            })
        })
        .collect()
}

/// The pull request number a merge commit's first line names.
pub fn pull_number_of(message: &str) -> Option<u64> {
    let first = message.lines().next()?;
    let caps = PULL_NUMBER.captures(first)?;
    caps.get(1).or(caps.get(2))?.as_str().parse().ok()
}

/// An incident the engine filed: (patient, revert sha, revert time).
pub fn trusted_incident(issue: &Issue, engine: &EngineAccount) -> Option<(IssueNumber, String, DateTime<Utc>)> {
    if !engine.is(&issue.author) {
        return None;
    }
    let caps = MARKER.captures(issue.body.lines().next()?)?;
    let at = DateTime::from_timestamp(caps[3].parse().ok()?, 0)?;
    Some((IssueNumber(caps[1].parse().ok()?), caps[2].to_string(), at))
}

/// The reverts the incidents among `issues` record (for acceptance).
pub fn reverts(issues: &[Issue], engine: &EngineAccount) -> Vec<Revert> {
    issues.iter().filter_map(|i| trusted_incident(i, engine)).map(|(patient, _, at)| Revert { patient, at }).collect()
}

/// A merge ward made, matched to the commit a revert names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    pub patient: IssueNumber,
    pub pull: u64,
    pub pull_url: String,
}

/// What one run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncidentRun {
    /// Revert commits read on the base branch.
    pub reverts: usize,
    /// Incidents opened now: (incident, patient).
    pub opened: Vec<(IssueNumber, IssueNumber)>,
    /// Reverts whose incident was open already.
    pub known: usize,
    /// Reverts of commits ward did not merge.
    pub unmatched: usize,
}

impl std::fmt::Display for IncidentRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "safety: {} revert(s) on the base branch", self.reverts)?;
        for (incident, patient) in &self.opened {
            write!(f, "; opened incident {incident} for {patient}")?;
        }
        if self.known > 0 {
            write!(f, "; {} already had an incident", self.known)?;
        }
        if self.unmatched > 0 {
            write!(f, "; {} revert(s) of commits ward did not merge", self.unmatched)?;
        }
        Ok(())
    }
}

/// Most chart lines an incident's timeline holds (the latest are kept).
pub const TIMELINE: usize = 80;

/// The timeline of a chart: one line per note (time, stage, role, run,
/// kind; an outcome's name), the latest [`TIMELINE`] of them.
pub fn timeline(notes: &[crate::chart::Note]) -> String {
    let lines: Vec<String> = notes
        .iter()
        .map(|n| {
            let what = match n.kind {
                crate::chart::NoteKind::Outcome => format!("OUTCOME {}", n.body.trim()),
                k => k.as_str().to_string(),
            };
            format!(
                "{} {} {} run {} {what}",
                n.meta.at.format("%Y-%m-%d %H:%M:%S"),
                n.meta.stage,
                n.meta.role,
                n.meta.run
            )
        })
        .collect();
    let skip = lines.len().saturating_sub(TIMELINE);
    let mut out = String::new();
    if skip > 0 {
        out.push_str(&format!("({skip} earlier notes left out)\n"));
    }
    out.push_str(&lines[skip..].join("\n"));
    out
}

/// The incident issue for `revert` of `matched`, with the patient's chart
/// as a timeline.
pub fn new_incident(config: &Config, base: &str, revert: &RevertCommit, matched: &Matched, timeline: &str) -> NewIssue {
    let patient = matched.patient;
    let title = format!("Incident: the change of {patient} was reverted on {base}");
    let body = format!(
        "<!-- ward-incident patient={} revert={} reverted={} -->\n\
         The change ward discharged for {patient} (pull request #{}, {}) was reverted on `{base}` by \
         commit `{}` (reverting `{}`):\n\n{}\n\n\
         - Patient: {patient}\n\
         - Its chart: `ward chart {}` (on GitHub, `charts/{}.md` on the `{}` branch)\n\
         - The revert: `{}`\n\n\
         The chart of {patient}, as ward read it when it opened this incident (UTC):\n\n{}\n\n\
         ward filed this incident and did not admit it: nothing runs until a person with the admission \
         permission applies `{}`. Admitted, the planner's incident mode writes the post-incident review \
         from the chart: the timeline, which gate should have caught it and why it did not, and the \
         corrective actions (each filed as a follow-up a person admits or closes). If the revert needs \
         no review, close this issue.",
        patient.0,
        revert.sha,
        revert.at.timestamp().max(0),
        matched.pull,
        matched.pull_url,
        revert.sha,
        revert.reverts,
        crate::untrusted::fence(&revert.title, "text"),
        patient.0,
        patient.0,
        config.charts_branch,
        revert.sha,
        crate::untrusted::fence(if timeline.is_empty() { "(no chart)" } else { timeline }, "text"),
        config.admission,
    );
    NewIssue { title, body, labels: vec![INCIDENT_LABEL.to_string()] }
}

/// The label's spec, made before the first incident.
pub fn label_spec() -> LabelSpec {
    LabelSpec {
        name: INCIDENT_LABEL.into(),
        color: "b60205".into(),
        description: "A discharged change was reverted; a person admits the post-incident review or closes it".into(),
    }
}

/// Reads the base branch and opens an incident for each revert of a merge
/// ward made that has none yet (reverts of the last [`HORIZON_DAYS`] before
/// `now`).
pub async fn incidents(
    forge: &dyn Forge,
    config: &Config,
    base: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<IncidentRun> {
    let commits = forge
        .branch_commits(base, HISTORY)
        .await
        .with_context(|| format!("the safety department could not read the history of `{base}`"))?;
    let horizon = now - chrono::Duration::days(HORIZON_DAYS);
    let reverts: Vec<RevertCommit> = revert_commits(&commits).into_iter().filter(|r| r.at >= horizon).collect();
    let mut run = IncidentRun { reverts: reverts.len(), ..IncidentRun::default() };
    if reverts.is_empty() {
        return Ok(run);
    }
    let issues = forge.all_issues().await.context("the safety department could not list the issues")?;
    let filed: Vec<String> =
        issues.iter().filter_map(|i| trusted_incident(i, forge.engine_account())).map(|(_, sha, _)| sha).collect();
    let discharged_label = &config.discharge.discharged_label;
    let mut discharged: Vec<IssueNumber> =
        issues.iter().filter(|i| i.labels.iter().any(|l| l == discharged_label)).map(|i| i.number).collect();
    discharged.sort_by(|a, b| b.cmp(a));
    discharged.truncate(MAX_LOOKUPS);
    let by_sha: BTreeMap<&str, &BranchCommit> = commits.iter().map(|c| (c.sha.as_str(), c)).collect();
    let mut pulls = BTreeMap::new();
    let mut labelled = false;
    for revert in &reverts {
        if filed.contains(&revert.sha) {
            run.known += 1;
            continue;
        }
        let number = by_sha.get(revert.reverts.as_str()).and_then(|c| pull_number_of(&c.message));
        let Some(matched) = find_merge(forge, &discharged, &mut pulls, &revert.reverts, number).await? else {
            run.unmatched += 1;
            continue;
        };
        if !labelled {
            forge.ensure_labels(&[label_spec()]).await.context("could not make the incident label")?;
            labelled = true;
        }
        let timeline = chart_timeline(forge, config, matched.patient).await;
        let issue = forge
            .create_issue(new_incident(config, base, revert, &matched, &timeline))
            .await
            .with_context(|| format!("could not open the incident for the revert of {}", matched.patient))?;
        crate::fault::point("after-incident-filed");
        tracing::info!(incident = issue.number.0, patient = matched.patient.0, "incident opened");
        run.opened.push((issue.number, matched.patient));
    }
    Ok(run)
}

/// The patient's chart as a timeline; what went wrong reading it, in its place.
async fn chart_timeline(forge: &dyn Forge, config: &Config, patient: IssueNumber) -> String {
    let sentinels = crate::chart::Sentinels::new(&config.sentinel_prefix);
    match forge.read_chart(patient).await {
        Ok(None) => String::new(),
        Ok(Some(chart)) => match sentinels.parse_chart(&chart.text) {
            Ok(notes) => timeline(&notes),
            Err(e) => format!("the chart of {patient} could not be parsed: {e}"),
        },
        Err(e) => format!("the chart of {patient} could not be read: {e}"),
    }
}

/// The discharged patient whose merged pull request is `number`, or whose
/// head is `sha`. Pull requests are read once each, newest patients first.
async fn find_merge(
    forge: &dyn Forge,
    discharged: &[IssueNumber],
    pulls: &mut BTreeMap<IssueNumber, Option<crate::forge::PullRequest>>,
    sha: &str,
    number: Option<u64>,
) -> anyhow::Result<Option<Matched>> {
    for patient in discharged {
        if !pulls.contains_key(patient) {
            let branch = crate::workspace::worktree::branch_name(patient.0);
            let pull = forge
                .pull_request_for_branch(&branch)
                .await
                .with_context(|| format!("could not read the pull request of {patient}"))?;
            pulls.insert(*patient, pull);
        }
        let Some(Some(pull)) = pulls.get(patient) else { continue };
        if pull.state == PullState::Merged && (Some(pull.number) == number || pull.head_sha == sha) {
            return Ok(Some(Matched { patient: *patient, pull: pull.number, pull_url: pull.url.clone() }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(sha: char, message: &str) -> BranchCommit {
        BranchCommit { sha: sha.to_string().repeat(40), message: message.into(), at: DateTime::UNIX_EPOCH }
    }

    #[test]
    fn reverts_and_merge_numbers_are_read_as_git_and_github_write_them() {
        let a = "a".repeat(40);
        let commits = [
            commit('b', &format!("Revert \"Fix greet (#12)\"\n\nThis reverts commit {a}.\n")),
            commit('c', "Fix greet (#12)\n\n* first"),
            commit('d', "mentions This reverts commit aaaa in passing"),
        ];
        let found = revert_commits(&commits);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].sha.as_str(), found[0].reverts.as_str()), ("b".repeat(40).as_str(), a.as_str()));
        assert_eq!(pull_number_of("Fix greet (#12)\n\nbody (#3)"), Some(12));
        assert_eq!(pull_number_of("Merge pull request #7 from ward/issue-3\n\nx"), Some(7));
        assert_eq!(pull_number_of("Fix #12 properly"), None);
    }

    #[test]
    fn an_incident_marker_is_trusted_only_from_the_engine() {
        let config =
            Config::parse(include_str!("../.github/ward.yml"), std::path::Path::new(crate::config::CONFIG_PATH), None)
                .expect("shipped config is valid");
        let revert = RevertCommit {
            sha: "b".repeat(40),
            reverts: "a".repeat(40),
            title: "Revert `x` @team".into(),
            at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        };
        let matched = Matched { patient: IssueNumber(4), pull: 9, pull_url: "u".into() };
        let new = new_incident(&config, "main", &revert, &matched, "t");
        assert_eq!(new.labels, [INCIDENT_LABEL]);
        let issue = Issue {
            number: IssueNumber(10),
            title: new.title,
            body: new.body,
            author: "github-actions[bot]".into(),
            state: crate::forge::IssueState::Open,
            labels: new.labels,
        };
        let engine: EngineAccount = "github-actions[bot]".into();
        assert_eq!(trusted_incident(&issue, &engine), Some((IssueNumber(4), "b".repeat(40), revert.at)));
        let forged = Issue { author: "mallory".into(), ..issue };
        assert_eq!(trusted_incident(&forged, &engine), None);
        assert!(reverts(&[forged], &engine).is_empty());
    }
}
