//! The research department: `ward research` reads the hospital's own
//! record and files proposals, each an issue at [`PROPOSAL_LABEL`] that no
//! stage runs on: a person admits it (applies the admission label) or
//! closes it.
//!
//! What it looks for, over the patients of the period (their charts and
//! label events, as `ward report` reads them):
//! - a gate that sent work back again and again (`stage.outcome`, at least
//!   [`RECURRING`] times): the role or skill upstream of it is the place to
//!   tighten;
//! - escalations that recur from one stage: a precedent the chiefs could
//!   write (drafted for a person; the precedent log stays human-only, and
//!   research never appends to it);
//! - precedents the agents cite most: a decision that could be written into
//!   a skill;
//! - follow-ups the hospital filed that no one admitted or closed;
//! - checks that failed and then passed on the same head (flaky), read from
//!   the CI line of the discharge audit's checklists the engine wrote, on
//!   [`RECURRING_FLAKES`] heads or more.
//!
//! With `departments.research.agent`, the research role
//! (`researcher.md` in `paths.roles`) runs first, on the strongest finding
//! that points at a role or skill (a gate that keeps sending work back
//! points at the role of the stage it sends work back to) and has no
//! proposal yet: it may edit files under `paths.skills` and `paths.roles`
//! only, and ward opens what it changed as a pull request at
//! [`PROPOSAL_LABEL`] ([`policy`]). That pull request is the finding's
//! proposal; a change refused (a file elsewhere, the precedent log among
//! them) or no change files the finding as an issue, as without the role.
//!
//! On GitHub the role runs in the two jobs of ward-report.yml, as a stage
//! does: `ward research --out` (a read-only token) runs it and seals what
//! it came to ([`visit`], [`sealed`]); `ward research --visit` (the write
//! token) judges the sealed change again, opens it, and files the issues
//! ([`file_with_role`] with [`RoleStep::Record`]).
//!
//! Bounded and idempotent: at most `max` proposals per run (issues and the
//! pull request together), highest count first; each has a stable key (its
//! kind and subject), in a marker on the first line of the issue's or the
//! pull request's body and in the pull request's branch
//! (`ward/research-<key>`), trusted only on issues the engine wrote, open
//! or closed: a proposal filed once is never filed again, and a run killed
//! after filing (fault points `after-proposal-filed`,
//! `after-policy-filed`) is completed by the next.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use anyhow::Context;
use regex::Regex;
use sha2::{Digest, Sha256};

use crate::chart::NoteKind;
use crate::config::Config;
use crate::forge::{EngineAccount, Forge, Issue, IssueNumber, IssueState, LabelSpec, NewIssue};
use crate::outcomes::{FOLLOW_UP_MARKER, PatientRecord, RESEARCH_MARKER};

pub mod policy;
pub mod sealed;

/// Where a proposal waits for a person.
pub const PROPOSAL_LABEL: &str = "ward:proposal";
/// How often a thing must happen in the period to be a pattern.
pub const RECURRING: usize = 3;

/// Heads a check must have failed and then passed on to be called flaky.
pub const RECURRING_FLAKES: usize = 2;

/// The discharge audit's CI line (rules/discharge_audit.rs `ci_item`):
/// failed at a head, naming the failing checks, or passed at one.
static CI_FAILED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^- \S+ CI green for the head commit: CI failed for `([0-9a-f]{7,40})`: (.*)$")
        .expect("ci failed regex")
});
static CI_PASSED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^- \S+ CI green for the head commit: CI passed for `([0-9a-f]{7,40})`").expect("ci passed regex")
});
static FAILED_CHECK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"`([^`\n]{1,100})` \([a-z_]+\)").expect("failed check regex"));

static CITATION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bP-\d{3,}\b").expect("citation regex"));
static MARKER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^<!-- ward-research key=([0-9a-f]{16}) -->$").expect("research marker regex"));

/// One proposal: what the record shows, and what a person might do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub key: String,
    /// How strong the pattern is (the count behind it): proposals are filed
    /// strongest first.
    pub weight: usize,
    pub title: String,
    pub body: String,
    /// The role or skill file (from the repository's top) a policy change
    /// would edit, when the finding points at one: what the research role
    /// is asked to change.
    pub points_at: Option<String>,
}

/// The template of the role the outcome `stage.outcome` sends work back
/// to: where work that keeps being sent back should arrive right.
fn upstream_role(config: &Config, stage: &str, outcome: &str) -> Option<String> {
    let label = config.stage(stage)?.config.outcomes.get(outcome)?;
    let to = config.stages().find(|s| &s.config.label == label)?;
    let role = config.role(&to.config.role)?;
    Some(role.prompt.to_string_lossy().replace('\\', "/"))
}

fn key(kind: &str, subject: &str) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    h.update([0]);
    h.update(subject.as_bytes());
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn patients_list(numbers: &BTreeSet<u64>) -> String {
    numbers.iter().take(20).map(|n| format!("#{n}")).collect::<Vec<_>>().join(", ")
}

/// Pure: the proposals the record calls for, strongest first. `issues` is
/// every issue (for the follow-ups no one admitted).
pub fn proposals(
    config: &Config,
    patients: &[PatientRecord],
    issues: &[Issue],
    engine: &EngineAccount,
) -> Vec<Proposal> {
    let send_back_set = config.departments.budget.send_back_set(config);
    let mut send_backs: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut send_back_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut escalations: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut citations: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    // Check name -> the (patient, head) pairs it failed and then passed on.
    let mut flaky: BTreeMap<String, BTreeSet<(u64, String)>> = BTreeMap::new();
    for p in patients {
        let n = p.issue.number.0;
        for (check, head) in flaky_checks(&p.notes) {
            flaky.entry(check).or_default().insert((n, head));
        }
        for note in &p.notes {
            match note.kind {
                NoteKind::Outcome => {
                    let k = (note.meta.stage.clone(), note.body.trim().to_string());
                    if send_back_set.contains(&k) {
                        let gate = format!("{}.{}", k.0, k.1);
                        send_backs.entry(gate.clone()).or_default().insert(n);
                        *send_back_counts.entry(gate).or_insert(0) += 1;
                    }
                }
                NoteKind::Escalation => {
                    escalations.entry(note.meta.stage.clone()).or_default().insert(n);
                }
                k if !k.engine_only() => {
                    for id in CITATION.find_iter(&note.body) {
                        citations.entry(id.as_str().to_string()).or_default().insert(n);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    let gates = send_back_counts.into_iter().map(|(gate, count)| {
        let points_at = gate.split_once('.').and_then(|(stage, outcome)| upstream_role(config, stage, outcome));
        let patients = send_backs.remove(&gate).unwrap_or_default();
        Found { subject: gate, count, patients, points_at }
    });
    out.extend(recurring("send-backs", gates, RECURRING, |gate, count, who| {
        (
            format!("Research: `{gate}` sent work back {count} times"),
            format!(
                "The gate `{gate}` sent work back {count} times in the period ({who}). Read the reasons in those \
                 charts; if they repeat, tighten what comes before the gate (the role or skill of the stage it \
                 sends back to), so the work arrives right the first time. A change to `roles/` or `skills/` is a \
                 pull request: it goes through the protected-paths rule (a chief approves) and the pipeline's \
                 simulation."
            ),
        )
    }));
    out.extend(recurring("escalations", by_patients(escalations), 2, |stage, count, who| {
        (
            format!("Research: {count} patients escalated from `{stage}`"),
            format!(
                "{count} patients escalated to the chiefs from the `{stage}` stage ({who}). If the chiefs' answers \
                 share a rule, a chief could write it as a precedent, so the next agent cites it instead of \
                 escalating. A draft, for a person to write: the question the escalations asked, and the \
                 decision the chiefs gave. ward never appends to the precedent log."
            ),
        )
    }));
    out.extend(recurring("precedent", by_patients(citations), RECURRING, |id, count, who| {
        (
            format!("Research: precedent {id} was cited by {count} patients"),
            format!(
                "Precedent {id} was cited by {count} patients in the period ({who}). A decision applied this often \
                 may belong in a skill, where every agent reads it before it plans; that is a pull request to \
                 `skills/` a chief approves. The precedent itself stays as it is."
            ),
        )
    }));
    let flaky = flaky.into_iter().map(|(check, heads)| Found {
        count: heads.len(),
        patients: heads.iter().map(|(n, _)| *n).collect(),
        subject: check,
        points_at: None,
    });
    out.extend(recurring("flaky", flaky, RECURRING_FLAKES, |check, count, who| {
        (
            format!("Research: the check `{check}` failed and then passed on the same head {count} times"),
            format!(
                "The check `{check}` failed the discharge audit and then passed on the very same commit {count} \
                 times ({who}): it fails for reasons other than the change. Each failure sent a patient back to \
                 treatment for nothing. Find why it is flaky (timing, order, the network, shared state) and fix or \
                 quarantine it; a change to the CI workflow is a pull request a chief approves."
            ),
        )
    }));
    let waiting: BTreeSet<u64> = issues
        .iter()
        .filter(|i| i.state == IssueState::Open && engine.is(&i.author))
        .filter(|i| i.body.lines().next().is_some_and(|l| l.starts_with(FOLLOW_UP_MARKER)))
        .filter(|i| !i.labels.iter().any(|l| config.is_ward_label(l)))
        .map(|i| i.number.0)
        .collect();
    if !waiting.is_empty() {
        let subject = waiting.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        out.push(Proposal {
            key: key("follow-ups", &subject),
            points_at: None,
            weight: waiting.len(),
            title: format!("Research: {} follow-ups wait for a decision", waiting.len()),
            body: format!(
                "The hospital filed these follow-ups and no one has admitted or closed them: {}. Admit the ones \
                 worth doing (apply `{}`), close the rest.",
                patients_list(&waiting),
                config.admission
            ),
        });
    }
    out.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.key.cmp(&b.key)));
    out
}

/// One recurring subject of the record: a gate, a stage, a precedent, a
/// check; how often it recurred, and in which patients.
struct Found {
    subject: String,
    count: usize,
    patients: BTreeSet<u64>,
    points_at: Option<String>,
}

/// Subjects counted by the patients they were seen in.
fn by_patients(seen: BTreeMap<String, BTreeSet<u64>>) -> impl Iterator<Item = Found> {
    seen.into_iter().map(|(subject, patients)| Found { count: patients.len(), subject, patients, points_at: None })
}

/// A proposal of `kind` for each subject seen at least `min` times; `write`
/// gives its title and text from the subject, the count and the patients.
fn recurring(
    kind: &str,
    found: impl Iterator<Item = Found>,
    min: usize,
    write: impl Fn(&str, usize, &str) -> (String, String),
) -> Vec<Proposal> {
    found
        .filter(|f| f.count >= min)
        .map(|f| {
            let (title, body) = write(&f.subject, f.count, &patients_list(&f.patients));
            Proposal { key: key(kind, &f.subject), points_at: f.points_at, weight: f.count, title, body }
        })
        .collect()
}

/// Pure: the checks that failed and then passed on the same head in one
/// patient's notes, as (check, head), from the checklists the engine wrote
/// (an agent's note of that kind, or of any role but the engine's, counts
/// for nothing).
pub fn flaky_checks(notes: &[crate::chart::Note]) -> BTreeSet<(String, String)> {
    let mut failed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let checklists =
        notes.iter().filter(|n| n.kind == NoteKind::DischargeChecklist && n.meta.role == crate::chart::ENGINE_ROLE);
    for note in checklists {
        // Only the checklist's items: the details after its result quote
        // the checks' own output, which anyone's CI writes.
        let items = note.body.split("\nResult: ").next().unwrap_or_default();
        for c in CI_FAILED.captures_iter(items) {
            let names = FAILED_CHECK.captures_iter(&c[2]).map(|m| m[1].to_string());
            failed.entry(c[1].to_string()).or_default().extend(names);
        }
        for c in CI_PASSED.captures_iter(items) {
            for check in failed.remove(&c[1]).unwrap_or_default() {
                out.insert((check, c[1].to_string()));
            }
        }
    }
    out
}

/// The key of a proposal the engine filed, if `issue` is one.
pub fn trusted_key(issue: &Issue, engine: &EngineAccount) -> Option<String> {
    if !engine.is(&issue.author) {
        return None;
    }
    MARKER.captures(issue.body.lines().next()?).map(|c| c[1].to_string())
}

/// The issue a proposal becomes.
pub fn new_issue(config: &Config, p: &Proposal) -> NewIssue {
    let body = format!(
        "{RESEARCH_MARKER}key={} -->\n{}\n\nward's research department filed this proposal and did not admit it: \
         nothing runs until a person with the admission permission applies `{}`. If it is not worth doing, close it.",
        p.key, p.body, config.admission
    );
    NewIssue { title: p.title.clone(), body, labels: vec![PROPOSAL_LABEL.to_string()] }
}

/// What one run filed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResearchRun {
    pub found: usize,
    pub filed: Vec<IssueNumber>,
    /// Found, and filed by an earlier run (as an issue or a pull request).
    pub known: usize,
    /// What the research role's run came to, when it ran.
    pub policy: Option<policy::Attempt>,
}

impl std::fmt::Display for ResearchRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "research: {} proposal(s) found, {} filed before", self.found, self.known)?;
        if let Some(policy) = &self.policy {
            write!(f, "; {policy}")?;
        }
        if !self.filed.is_empty() {
            let list = self.filed.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ");
            write!(f, "; filed {list} at `{PROPOSAL_LABEL}`, waiting for a person")?;
        }
        Ok(())
    }
}

fn proposal_label() -> LabelSpec {
    LabelSpec {
        name: PROPOSAL_LABEL.into(),
        color: "c5def5".into(),
        description: "Proposed by ward's research or safety department; a person admits it or closes it".into(),
    }
}

/// The record job's reading of the visit's sealed role run: the finding it
/// addressed must be one this job finds itself (its text is this job's,
/// never the visit's), and not filed before.
async fn recorded(
    h: &crate::hospital::Hospital,
    forge: &dyn Forge,
    found: &[Proposal],
    filed: &BTreeSet<String>,
    sealed: &sealed::Sealed,
    dir: &std::path::Path,
) -> Option<policy::Attempt> {
    let key = sealed.key.as_deref()?;
    if filed.contains(key) {
        return None;
    }
    match found.iter().find(|p| p.points_at.is_some() && p.key == key) {
        Some(target) => Some(policy::record(h, forge, target, sealed, dir).await),
        None if sealed.outcome == sealed::Outcome::Proposed => Some(policy::Attempt::Refused {
            key: key.to_string(),
            reason: format!(
                "the visit addressed the finding `{key}`, which this job does not find in the record (it changed \
                 since the visit, or the visit is not this run's), so nothing of it is opened"
            ),
        }),
        None => policy::unopened(sealed, key),
    }
}

/// Files at most `max` of the proposals not filed before, strongest first
/// (the deterministic reader alone).
pub async fn file(
    forge: &dyn Forge,
    config: &Config,
    patients: &[PatientRecord],
    max: usize,
) -> anyhow::Result<ResearchRun> {
    file_with_role(forge, config, patients, max, None).await
}

/// The research role's part in a run.
pub enum RoleStep<'a> {
    /// One process: the role runs here, and its change is opened here.
    Run(&'a policy::Role<'a>),
    /// The record job: the visit job ran the role and sealed what it came
    /// to in `dir`; its change is judged again here and opened.
    Record { hospital: &'a crate::hospital::Hospital, sealed: &'a sealed::Sealed, dir: &'a std::path::Path },
}

/// The findings, and the keys filed before: as issues the engine wrote,
/// or as pull requests of the role (labelled, with `label`, when one lacks
/// it; the visit job only reads).
async fn findings(
    forge: &dyn Forge,
    config: &Config,
    patients: &[PatientRecord],
    label: bool,
) -> anyhow::Result<(Vec<Proposal>, BTreeSet<String>)> {
    let issues = forge.all_issues().await.context("the research department could not list the issues")?;
    let engine = forge.engine_account();
    let found = proposals(config, patients, &issues, engine);
    let mut filed: BTreeSet<String> = issues.iter().filter_map(|i| trusted_key(i, engine)).collect();
    // Findings that point at a role or skill may have a pull request of an
    // earlier run, open, merged or closed: each is that finding's proposal.
    let pointing: Vec<&Proposal> = found.iter().filter(|p| p.points_at.is_some() && !filed.contains(&p.key)).collect();
    for p in pointing {
        if policy::filed_before(forge, p, label).await? {
            filed.insert(p.key.clone());
        }
    }
    Ok((found, filed))
}

/// The visit job's half of a research run on GitHub (`ward research
/// --out`): the record read, the finding picked, the role run on it, and
/// what it came to sealed into `out`. Writes nothing to the forge.
pub async fn visit(
    forge: &dyn Forge,
    config: &Config,
    patients: &[PatientRecord],
    max: usize,
    role: Option<&policy::Role<'_>>,
    out: &std::path::Path,
) -> anyhow::Result<sealed::Sealed> {
    let no_role = |run: String, why: &str| sealed::Sealed {
        run,
        key: None,
        start: None,
        outcome: sealed::Outcome::NoRole { why: why.to_string() },
    };
    let sealed = match role {
        None => no_role(String::new(), "`departments.research.agent` is off"),
        Some(_) if max == 0 => no_role(String::new(), "the run files no proposal (`--max 0`)"),
        Some(role) => {
            let (found, filed) = findings(forge, config, patients, false).await?;
            match found.iter().find(|p| p.points_at.is_some() && !filed.contains(&p.key)) {
                None => no_role(role.run.clone(), "no finding points at a role or skill without a proposal"),
                Some(target) => policy::seal(role, forge, target, &found, out).await?,
            }
        }
    };
    sealed.write(out)?;
    Ok(sealed)
}

/// [`file`], with the research role first when `role` is given: its
/// policy change, if accepted, is the strongest eligible finding's proposal
/// and counts toward `max`.
pub async fn file_with_role(
    forge: &dyn Forge,
    config: &Config,
    patients: &[PatientRecord],
    max: usize,
    role: Option<RoleStep<'_>>,
) -> anyhow::Result<ResearchRun> {
    let (found, mut filed) = findings(forge, config, patients, true).await?;
    let mut run = ResearchRun { found: found.len(), ..ResearchRun::default() };
    let mut labelled = false;
    let mut room = max;
    if let (Some(role), true) = (role, room > 0) {
        forge.ensure_labels(&[proposal_label()]).await.context("could not make the proposal label")?;
        labelled = true;
        let attempt = match role {
            RoleStep::Run(role) => match found.iter().find(|p| p.points_at.is_some() && !filed.contains(&p.key)) {
                Some(target) => Some(policy::propose(role, forge, target, &found).await),
                None => None,
            },
            RoleStep::Record { hospital, sealed, dir } => recorded(hospital, forge, &found, &filed, sealed, dir).await,
        };
        if let Some(policy::Attempt::Opened { key, .. }) = &attempt {
            filed.insert(key.clone());
            room -= 1;
        }
        run.policy = attempt;
    }
    for p in &found {
        if filed.contains(&p.key) {
            if !matches!(&run.policy, Some(policy::Attempt::Opened { key, .. }) if *key == p.key) {
                run.known += 1;
            }
            continue;
        }
        if run.filed.len() >= room {
            continue;
        }
        if !labelled {
            forge.ensure_labels(&[proposal_label()]).await.context("could not make the proposal label")?;
            labelled = true;
        }
        let issue = forge.create_issue(new_issue(config, p)).await.context("could not file a research proposal")?;
        crate::fault::point("after-proposal-filed");
        run.filed.push(issue.number);
    }
    Ok(run)
}
