//! What a stage run needs from GitHub Actions around the forge: who may
//! start a stage, and what the run tells people (the job summary and
//! `::error::` annotations). The chart's compare-and-swap append is
//! [`crate::chart::append`]; the label arithmetic is
//! [`crate::stage::next_labels`].
//!
//! The decisions are pure functions over (trigger, configuration, facts);
//! the few functions that do I/O take a `&dyn Forge` and are thin.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use crate::config::{Config, DispatchMode};
use crate::event::{Trigger, TriggerKind};
use crate::forge::{Forge, IssueNumber, Permission};
use crate::hospital::Hospital;
use crate::stage::{Phase, StageRequest, StageResult, run_stage};

/// What to do with a trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Admission {
    /// Run a stage on `issue`. `label` is the label in when the event names
    /// it; `None` means "the stage whose label the issue carries now".
    Run { issue: IssueNumber, label: Option<String> },
    /// Run the charge nurse's sweep.
    Sweep,
    /// Not for ward: exit 0, change nothing.
    Ignore { reason: String },
    /// Someone may not do this: say so on the issue, move nothing.
    Refuse { issue: IssueNumber, reason: String },
}

/// The first look at a trigger: decided, or a permission lookup is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Decided(Admission),
    /// A person applied the admission label: look up their permission
    /// and call [`decide_with_permission`].
    NeedsPermission {
        login: String,
        needed: Permission,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuardError {
    #[error(
        "stage `{stage}` asked for by the workflow_dispatch of {issue} is not in .github/ward.yml (stages: {known})"
    )]
    UnknownStage { issue: IssueNumber, stage: String, known: String },
}

/// Who may start a stage, before any lookup. Pure.
///
/// - `schedule` runs the sweep.
/// - A label that starts no stage is ignored, whoever applied it.
/// - A stage label applied by the engine account starts the stage only
///   with `dispatch: label`; with repository_dispatch the engine's own
///   dispatch starts it, and the labeled event (if an app token makes one)
///   is ignored, so a transition never runs twice.
/// - The admission label applied by a person needs `admit_permission`.
/// - Any other stage label applied by a person is refused: only the
///   engine moves a patient between stages.
/// - repository_dispatch and workflow_dispatch need write access on GitHub
///   to send at all, so they are accepted.
/// - A wake-up (a review or CI result on a treatment branch) is accepted
///   from anyone: it only makes a waiting patient look again.
pub fn check_trigger(trigger: &Trigger, config: &Config) -> Result<Check, GuardError> {
    let decided = |a| Ok(Check::Decided(a));
    let Some(issue) = trigger.issue else {
        return decided(match trigger.kind {
            TriggerKind::Schedule => Admission::Sweep,
            _ => Admission::Ignore { reason: "the event names no issue".into() },
        });
    };
    match trigger.kind {
        TriggerKind::Schedule => decided(Admission::Sweep),
        TriggerKind::RepositoryDispatch => decided(Admission::Run { issue, label: trigger.label.clone() }),
        // A wake-up asks nothing of anyone: the stage run reads everything
        // again and only a patient waiting at the pending label looks.
        TriggerKind::Wake => decided(Admission::Run { issue, label: None }),
        TriggerKind::WorkflowDispatch => match &trigger.stage {
            None => decided(Admission::Run { issue, label: None }),
            Some(name) => match config.stage(name) {
                Some(stage) => decided(Admission::Run { issue, label: Some(stage.config.label.clone()) }),
                None => Err(GuardError::UnknownStage {
                    issue,
                    stage: name.clone(),
                    known: config.stages().map(|s| s.name).collect::<Vec<_>>().join(", "),
                }),
            },
        },
        TriggerKind::Labeled => {
            let label = trigger.label.clone().unwrap_or_default();
            // A chief's approval (human approval mode): who applied it is
            // looked up; the approval path checks the lockdown first.
            if label == config.discharge.approved_label && !config.engine_account.is(&trigger.actor) {
                return Ok(Check::NeedsPermission {
                    login: trigger.actor.clone(),
                    needed: config.discharge.approver_permission,
                });
            }
            if config.stage_by_label(&label).is_none() {
                return decided(Admission::Ignore { reason: format!("label `{label}` starts no ward stage") });
            }
            if config.engine_account.is(&trigger.actor) {
                return decided(match config.dispatch {
                    DispatchMode::Label => Admission::Run { issue, label: Some(label) },
                    DispatchMode::RepositoryDispatch => Admission::Ignore {
                        reason: format!(
                            "`{label}` was set by the engine; with `dispatch: repository_dispatch` its dispatch starts the stage"
                        ),
                    },
                });
            }
            if label == config.admission {
                return Ok(Check::NeedsPermission { login: trigger.actor.clone(), needed: config.admit_permission });
            }
            decided(Admission::Refuse {
                issue,
                reason: format!(
                    "@{actor} applied `{label}`, but only ward moves a patient between stages, so ward takes the \
                     label off; a person admits a patient with `{admission}`. To re-run a stage, run the ward-stage workflow by hand with the \
                     inputs `issue` and `stage`.",
                    actor = trigger.actor,
                    admission = config.admission,
                ),
            })
        }
    }
}

/// The admission of a person whose permission is now known. Pure.
pub fn decide_with_permission(trigger: &Trigger, config: &Config, have: Permission) -> Admission {
    let issue = trigger.issue.unwrap_or(IssueNumber(0));
    let label = trigger.label.clone().unwrap_or_default();
    let needed = config.discharge.approver_permission;
    if label == config.discharge.approved_label && have < needed {
        return Admission::Refuse {
            issue,
            reason: format!(
                "@{actor} has `{have}` access to this repository; approving a merge with `{label}` needs at least \
                 `{needed}`, so ward took the label off. Ask a maintainer to apply it.",
                actor = trigger.actor,
                have = permission_name(have),
                needed = permission_name(needed),
            ),
        };
    }
    if label == config.discharge.approved_label || have >= config.admit_permission {
        Admission::Run { issue, label: Some(label) }
    } else {
        Admission::Refuse {
            issue,
            reason: format!(
                "@{actor} has `{have}` access to this repository; admitting a patient with `{label}` needs at least \
                 `{needed}`, so ward takes the label off. Ask a maintainer to apply it.",
                actor = trigger.actor,
                have = permission_name(have),
                needed = permission_name(config.admit_permission),
            ),
        }
    }
}

fn permission_name(p: Permission) -> &'static str {
    match p {
        Permission::None => "no",
        Permission::Read => "read",
        Permission::Triage => "triage",
        Permission::Write => "write",
        Permission::Maintain => "maintain",
        Permission::Admin => "admin",
    }
}

/// [`check_trigger`], the permission lookup when it is needed, and the
/// refusal comment when it is refused. Returns the final admission.
/// `writes` is `false` in the visit job: a refusal is decided but neither
/// commented nor taken back there (the record job does both).
pub async fn admit(forge: &dyn Forge, trigger: &Trigger, config: &Config, writes: bool) -> anyhow::Result<Admission> {
    let admission = match check_trigger(trigger, config)? {
        Check::Decided(a) => a,
        Check::NeedsPermission { login, .. } => {
            let have = forge.permission(&login).await.with_context(|| {
                format!("could not decide whether @{login} may admit a patient in {}", forge.describe())
            })?;
            decide_with_permission(trigger, config, have)
        }
    };
    if let Admission::Refuse { issue, reason } = &admission
        && writes
    {
        forge
            .add_comment(*issue, &refusal_comment(reason))
            .await
            .with_context(|| format!("could not tell {issue} why its stage was refused"))?;
        if let Some(label) = &trigger.label {
            take_back(forge, *issue, label, &trigger.actor).await?;
        }
    }
    Ok(admission)
}

/// Removes the ward label a person applied and ward refused, so that
/// nothing (the charge nurse's sweep above all) later takes it for a place
/// the patient was moved to. Only while the label's last application is
/// still that person's: a label the engine applied since stays.
async fn take_back(forge: &dyn Forge, issue: IssueNumber, label: &str, actor: &str) -> anyhow::Result<()> {
    let events =
        forge.label_events(issue).await.with_context(|| format!("could not read the label events of {issue}"))?;
    let last = events.iter().rev().find(|e| e.label == label && e.action == crate::forge::LabelAction::Added);
    if last.is_none_or(|e| !e.actor.eq_ignore_ascii_case(actor)) {
        return Ok(());
    }
    let current = forge.issue(issue).await.with_context(|| format!("could not read {issue}"))?;
    if !current.labels.iter().any(|l| l == label) {
        return Ok(());
    }
    let kept: Vec<String> = current.labels.into_iter().filter(|l| l != label).collect();
    forge
        .set_labels(issue, &kept)
        .await
        .with_context(|| format!("could not remove the refused label `{label}` from {issue}"))?;
    tracing::info!(issue = issue.0, label, actor, "refused label removed");
    Ok(())
}

/// The comment posted on a refused issue.
pub fn refusal_comment(reason: &str) -> String {
    format!("**ward** did not start a stage.\n\n{reason}\n")
}

/// How a stage run started by an Actions event ended.
#[derive(Debug)]
pub enum EventRun {
    /// A ward event that asks for nothing (exit 0).
    Ignored(String),
    /// Refused, with a comment on the issue (exit 0: the guard did its job).
    Refused { issue: IssueNumber, reason: String },
    /// A `schedule` event: that is `ward sweep`'s.
    Sweep,
    /// The stage ran (or found nothing to do).
    Ran(Box<StageResult>),
}

/// `ward stage --event FILE` once the event is parsed: who may start what,
/// then the stage run (whose guard creates ward's missing labels on
/// admission, once, with colours and descriptions). Nothing changes on GitHub before the
/// guard passes, except the refusal comment.
/// `phase` says which half of a stage run this job makes (the whole run
/// with `ward stage`; on GitHub the visit job, then the record job).
pub async fn stage_from_event(h: &Hospital, trigger: &Trigger, phase: Phase) -> anyhow::Result<EventRun> {
    tracing::info!(kind = ?trigger.kind, issue = ?trigger.issue, label = ?trigger.label, actor = %trigger.actor, "event");
    let writes = phase.writes();
    let (issue, label) = match admit(&*h.forge, trigger, &h.config, writes).await? {
        Admission::Ignore { reason } => return Ok(EventRun::Ignored(reason)),
        Admission::Refuse { issue, reason } => return Ok(EventRun::Refused { issue, reason }),
        Admission::Sweep => return Ok(EventRun::Sweep),
        Admission::Run { issue, label } => (issue, label),
    };
    let req = StageRequest { label, wake: trigger.wake.clone(), phase, ..StageRequest::new(issue) };
    Ok(EventRun::Ran(Box::new(run_stage(h, &req).await?)))
}

/// The summary of a finished stage run (`repository` is `owner/name`,
/// `server` e.g. `https://github.com`, `run_url` the Actions run).
pub fn summary_for(
    result: &StageResult,
    config: &Config,
    repository: &str,
    server: &str,
    run_url: Option<&str>,
) -> RunSummary {
    let mut s = RunSummary { repository: repository.into(), next: "none".into(), ..RunSummary::default() };
    let role_of = |stage: &str| config.stage(stage).map(|st| st.config.role.clone()).unwrap_or_default();
    let label_of = |stage: &str| config.stage(stage).map(|st| st.config.label.clone()).unwrap_or_default();
    match result {
        StageResult::Moved(t) => {
            s.issue = t.issue;
            s.stage = t.stage.clone();
            s.role = t.role.clone();
            s.run_id = t.run.clone();
            s.label_in = t.from.clone();
            s.outcome = Some(t.outcome.clone());
            s.label_out = Some(t.to.clone());
            s.next = match (t.dispatched, config.stage_by_label(&t.to).is_some()) {
                (true, _) => "repository_dispatch".into(),
                (false, true) => "the labeled event (dispatch: label)".into(),
                (false, false) => "none (the patient rests here)".into(),
            };
            let engine = t.total_ms.saturating_sub(t.agent_ms);
            s.timings = vec![
                ("agent".into(), Duration::from_millis(t.agent_ms as u64)),
                ("engine".into(), Duration::from_millis(engine as u64)),
            ];
        }
        StageResult::NoOp { issue, reason } | StageResult::Deferred { issue, reason } => {
            s.issue = *issue;
            s.stage = "none".into();
            s.label_in = "—".into();
            s.next = format!("nothing to do: {reason}");
        }
        StageResult::SlotTaken { issue, stage, run } => {
            s.issue = *issue;
            s.stage = stage.clone();
            s.role = role_of(stage);
            s.run_id = run.clone();
            s.label_in = label_of(stage);
            s.next = "the visit job, which runs the agent holding this run's agent slot".into();
        }
        StageResult::Refused { issue, stage, reason, to, .. } => {
            s.issue = *issue;
            s.stage = stage.clone();
            s.role = role_of(stage);
            s.label_in = label_of(stage);
            s.label_out = to.clone();
            s.next = format!("refused: {reason}");
        }
        StageResult::Invalid { issue, stage, run, reason, .. } => {
            s.issue = *issue;
            s.stage = stage.clone();
            s.role = role_of(stage);
            s.run_id = run.clone();
            s.label_in = label_of(stage);
            s.error = Some(reason.clone());
        }
    }
    s.links.push(("issue".into(), format!("{server}/{repository}/issues/{}", s.issue.0)));
    if let Some(url) = run_url {
        s.links.push(("workflow run".into(), url.into()));
    }
    s
}

/// Inside GitHub Actions: appends the job summary, sets the step outputs
/// `issue` and `stage` (the artifact's name uses them) and returns the
/// `::error::` line to print when the run failed. Without the variables
/// (outside Actions) nothing is written; the annotation is still returned.
pub fn report_to_actions(result: &StageResult, config: &Config, repository: &str) -> anyhow::Result<Option<String>> {
    let (server, run_url) = actions_links(repository);
    report_summary(&summary_for(result, config, repository, &server, run_url.as_deref()))
}

/// A refused event, reported like a run: the summary says who was refused
/// and why (the same words as the comment on the issue).
pub fn report_refusal(issue: IssueNumber, label: Option<&str>, reason: &str, repository: &str) -> anyhow::Result<()> {
    let (server, run_url) = actions_links(repository);
    let mut summary = RunSummary {
        repository: repository.into(),
        issue,
        stage: "none".into(),
        label_in: label.unwrap_or("—").into(),
        next: format!("refused: {reason}"),
        ..RunSummary::default()
    };
    summary.links.push(("issue".into(), format!("{server}/{repository}/issues/{}", issue.0)));
    summary.links.extend(run_url.map(|u| ("workflow run".to_string(), u)));
    report_summary(&summary).map(drop)
}

/// `GITHUB_SERVER_URL` and the URL of this workflow run, if in one.
fn actions_links(repository: &str) -> (String, Option<String>) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let server = var("GITHUB_SERVER_URL").unwrap_or_else(|| "https://github.com".into());
    let run_url = var("GITHUB_RUN_ID").map(|id| format!("{server}/{repository}/actions/runs/{id}"));
    (server, run_url)
}

fn report_summary(summary: &RunSummary) -> anyhow::Result<Option<String>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(path) = var("GITHUB_STEP_SUMMARY") {
        append_step_summary(Path::new(&path), &render_summary(summary))
            .with_context(|| format!("could not append the job summary to {path}"))?;
    }
    if let Some(path) = var("GITHUB_OUTPUT") {
        append_step_summary(Path::new(&path), &step_outputs(summary))
            .with_context(|| format!("could not write the step outputs to {path}"))?;
    }
    Ok(summary.error.as_ref().map(|e| error_annotation(&format!("ward: {} of {}", summary.stage, summary.issue), e)))
}

/// The visit job's step output `record`: whether its record job has
/// anything to record (`ward-stage.yml` skips the record job otherwise).
pub fn visit_output(record: bool) -> anyhow::Result<()> {
    let Some(path) = std::env::var("GITHUB_OUTPUT").ok().filter(|v| !v.is_empty()) else { return Ok(()) };
    append_step_summary(Path::new(&path), &format!("record={record}\n"))
        .with_context(|| format!("could not write the step output `record` to {path}"))
}

/// Step outputs (`$GITHUB_OUTPUT` lines) of `ward slot`; nothing outside Actions.
pub fn set_outputs(pairs: &[(&str, &str)]) -> anyhow::Result<()> {
    let Some(path) = std::env::var("GITHUB_OUTPUT").ok().filter(|v| !v.is_empty()) else { return Ok(()) };
    let lines: String = pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    append_step_summary(Path::new(&path), &lines).with_context(|| format!("could not write the step outputs to {path}"))
}

/// The step outputs of a run (`$GITHUB_OUTPUT` lines): `issue`, `stage`
/// (`none` when no stage ran) and `outcome` (empty when the run recorded
/// none: nothing to do, refused, failed). The action passes them on.
pub fn step_outputs(summary: &RunSummary) -> String {
    let stage = if summary.stage.is_empty() { "none" } else { summary.stage.as_str() };
    let outcome = summary.outcome.as_deref().unwrap_or("");
    format!("issue={}\nstage={stage}\noutcome={outcome}\n", summary.issue.0)
}

/// One stage run, as the job summary shows it.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    pub repository: String,
    pub issue: IssueNumber,
    pub stage: String,
    pub role: String,
    pub run_id: String,
    pub label_in: String,
    pub outcome: Option<String>,
    pub label_out: Option<String>,
    /// How the next stage starts ("repository_dispatch", "labeled event", "none").
    pub next: String,
    /// Step name and its wall time, in order.
    pub timings: Vec<(String, Duration)>,
    /// Link text and URL.
    pub links: Vec<(String, String)>,
    /// What went wrong, when the run failed.
    pub error: Option<String>,
}

/// Markdown for `$GITHUB_STEP_SUMMARY`. Pure.
pub fn render_summary(s: &RunSummary) -> String {
    let mut md = String::new();
    let verdict = match (&s.error, &s.outcome) {
        (Some(_), _) => "failed",
        (None, Some(_)) => "done",
        (None, None) => "no transition",
    };
    let _ = writeln!(md, "### ward: {} of {} — {verdict}\n", cell(&s.stage), s.issue);
    let _ = writeln!(md, "| | |\n|---|---|");
    let row = |md: &mut String, k: &str, v: &str| {
        let _ = writeln!(md, "| {k} | {} |", cell(v));
    };
    row(&mut md, "repository", &s.repository);
    row(&mut md, "issue", &s.issue.to_string());
    row(&mut md, "stage", &format!("{} (role {})", s.stage, s.role));
    row(&mut md, "run", &s.run_id);
    row(&mut md, "label in", &format!("`{}`", s.label_in));
    row(&mut md, "outcome", s.outcome.as_deref().unwrap_or("—"));
    row(&mut md, "label out", &s.label_out.as_deref().map(|l| format!("`{l}`")).unwrap_or_else(|| "—".into()));
    row(&mut md, "next", &s.next);
    if !s.timings.is_empty() {
        let total: Duration = s.timings.iter().map(|(_, d)| *d).sum();
        let steps: Vec<String> = s.timings.iter().map(|(n, d)| format!("{n} {}", seconds(*d))).collect();
        row(&mut md, "time", &format!("{} ({})", seconds(total), steps.join(", ")));
    }
    if let Some(e) = &s.error {
        let _ = writeln!(md, "\n**Error:** {}", cell(e));
    }
    if !s.links.is_empty() {
        let links: Vec<String> = s.links.iter().map(|(t, u)| format!("[{}]({u})", cell(t))).collect();
        let _ = writeln!(md, "\n{}", links.join(" · "));
    }
    md
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// A table cell: no pipes, no line breaks, no HTML (reasons can quote
/// what an agent wrote, and summaries render HTML).
fn cell(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A workflow command line that GitHub shows as an error annotation:
/// `::error title=T::message`, with `%`, CR and LF escaped as the runner
/// expects (and `:` `,` in properties), so a message cannot inject another
/// workflow command.
pub fn error_annotation(title: &str, message: &str) -> String {
    format!("::error title={}::{}", escape_property(title), escape_data(message))
}

fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Appends to `$GITHUB_STEP_SUMMARY` (the runner sets it to a file).
pub fn append_step_summary(path: &Path, markdown: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(markdown.as_bytes())?;
    if !markdown.ends_with('\n') {
        file.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.github/ward.yml")).unwrap();
        let text = format!("{text}\n{extra}");
        let text = if extra.contains("dispatch:") { text.replace("dispatch: repository_dispatch\n", "") } else { text };
        Config::parse(&text, Path::new(".github/ward.yml"), None).unwrap()
    }

    fn labeled(label: &str, actor: &str) -> Trigger {
        Trigger {
            kind: TriggerKind::Labeled,
            issue: Some(IssueNumber(4)),
            label: Some(label.into()),
            stage: None,
            actor: actor.into(),
            repository: Some("octo/hello".into()),
            wake: None,
        }
    }

    #[test]
    fn who_may_start_a_stage() {
        let c = config("");
        let run = |label: &str| Check::Decided(Admission::Run { issue: IssueNumber(4), label: Some(label.into()) });
        // A person with the admission label: look up the permission.
        assert_eq!(
            check_trigger(&labeled("ward:admit", "alice"), &c),
            Ok(Check::NeedsPermission { login: "alice".into(), needed: Permission::Triage })
        );
        // Non-ward labels are ignored, from people and from the engine.
        for actor in ["alice", "github-actions[bot]"] {
            assert!(matches!(check_trigger(&labeled("bug", actor), &c), Ok(Check::Decided(Admission::Ignore { .. }))));
        }
        // A chief's approval: look up the permission (maintain); a maintainer
        // runs the approval, a triager is refused; the engine's own is ignored.
        assert_eq!(
            check_trigger(&labeled("ward:approved", "maya"), &c),
            Ok(Check::NeedsPermission { login: "maya".into(), needed: Permission::Maintain })
        );
        let t = labeled("ward:approved", "maya");
        assert_eq!(
            decide_with_permission(&t, &c, Permission::Maintain),
            Admission::Run { issue: IssueNumber(4), label: Some("ward:approved".into()) }
        );
        let refused = decide_with_permission(&labeled("ward:approved", "tia"), &c, Permission::Triage);
        assert!(
            matches!(&refused, Admission::Refuse { reason, .. } if reason.contains("approving a merge with `ward:approved` needs at least `maintain`")),
            "{refused:?}"
        );
        assert!(matches!(
            check_trigger(&labeled("ward:approved", "github-actions[bot]"), &c),
            Ok(Check::Decided(Admission::Ignore { .. }))
        ));
        // Resting labels start nothing either.
        assert!(matches!(
            check_trigger(&labeled("ward:discharged", "github-actions[bot]"), &c),
            Ok(Check::Decided(Admission::Ignore { .. }))
        ));
        // The engine's own stage label: ignored in dispatch mode (its dispatch starts the stage) ...
        assert!(matches!(
            check_trigger(&labeled("ward:treat", "github-actions[bot]"), &c),
            Ok(Check::Decided(Admission::Ignore { .. }))
        ));
        // ... and the trigger in label mode.
        let label_mode = config("dispatch: label");
        assert_eq!(check_trigger(&labeled("ward:treat", "github-actions[bot]"), &label_mode), Ok(run("ward:treat")));
        // A person moving a patient between stages is refused.
        let Ok(Check::Decided(Admission::Refuse { reason, .. })) = check_trigger(&labeled("ward:treat", "mallory"), &c)
        else {
            panic!("a person's stage label must be refused");
        };
        insta::assert_snapshot!(refusal_comment(&reason), @r"
        **ward** did not start a stage.

        @mallory applied `ward:treat`, but only ward moves a patient between stages, so ward takes the label off; a person admits a patient with `ward:admit`. To re-run a stage, run the ward-stage workflow by hand with the inputs `issue` and `stage`.
        ");
    }

    #[test]
    fn admission_needs_the_configured_permission() {
        let c = config("");
        let t = labeled("ward:admit", "alice");
        for ok in [Permission::Triage, Permission::Write, Permission::Admin] {
            assert_eq!(
                decide_with_permission(&t, &c, ok),
                Admission::Run { issue: IssueNumber(4), label: Some("ward:admit".into()) }
            );
        }
        let Admission::Refuse { reason, .. } = decide_with_permission(&t, &c, Permission::Read) else {
            panic!("read is below triage");
        };
        insta::assert_snapshot!(reason, @"@alice has `read` access to this repository; admitting a patient with `ward:admit` needs at least `triage`, so ward takes the label off. Ask a maintainer to apply it.");
    }

    #[test]
    fn dispatches_and_schedules() {
        let c = config("");
        let mut t = labeled("x", "github-actions[bot]");
        t.kind = TriggerKind::RepositoryDispatch;
        t.label = None;
        assert_eq!(check_trigger(&t, &c), Ok(Check::Decided(Admission::Run { issue: IssueNumber(4), label: None })));
        t.kind = TriggerKind::WorkflowDispatch;
        t.stage = Some("treat".into());
        assert_eq!(
            check_trigger(&t, &c),
            Ok(Check::Decided(Admission::Run { issue: IssueNumber(4), label: Some("ward:treat".into()) }))
        );
        t.stage = Some("surgery".into());
        insta::assert_snapshot!(check_trigger(&t, &c).unwrap_err(), @"stage `surgery` asked for by the workflow_dispatch of #4 is not in .github/ward.yml (stages: admit, diagnose, plan-review, treat, consult, code-review, discharge, resolve)");
        let sweep = Trigger {
            kind: TriggerKind::Schedule,
            issue: None,
            label: None,
            stage: None,
            actor: String::new(),
            repository: None,
            wake: None,
        };
        assert_eq!(check_trigger(&sweep, &c), Ok(Check::Decided(Admission::Sweep)));
    }

    #[test]
    fn job_summary_and_annotations() {
        let s = RunSummary {
            repository: "octo/hello".into(),
            issue: IssueNumber(4),
            stage: "diagnose".into(),
            role: "fellow".into(),
            run_id: "r-12-1".into(),
            label_in: "ward:diagnose".into(),
            outcome: Some("plan-posted".into()),
            label_out: Some("ward:plan-review".into()),
            next: "repository_dispatch".into(),
            timings: vec![("agent".into(), Duration::from_millis(1500)), ("forge".into(), Duration::from_millis(250))],
            links: vec![("issue".into(), "https://github.com/octo/hello/issues/4".into())],
            error: None,
        };
        assert_eq!(step_outputs(&s), "issue=4\nstage=diagnose\noutcome=plan-posted\n");
        insta::assert_snapshot!(render_summary(&s), @r"
        ### ward: diagnose of #4 — done

        | | |
        |---|---|
        | repository | octo/hello |
        | issue | #4 |
        | stage | diagnose (role fellow) |
        | run | r-12-1 |
        | label in | `ward:diagnose` |
        | outcome | plan-posted |
        | label out | `ward:plan-review` |
        | next | repository_dispatch |
        | time | 1.8s (agent 1.5s, forge 0.2s) |

        [issue](https://github.com/octo/hello/issues/4)
        ");
        let failed = RunSummary {
            outcome: None,
            label_out: None,
            next: "none".into(),
            timings: vec![],
            links: vec![],
            error: Some("the agent wrote no OUTCOME | line 3\nsee <img src=x> notes".into()),
            ..s
        };
        insta::assert_snapshot!(render_summary(&failed), @r"
        ### ward: diagnose of #4 — failed

        | | |
        |---|---|
        | repository | octo/hello |
        | issue | #4 |
        | stage | diagnose (role fellow) |
        | run | r-12-1 |
        | label in | `ward:diagnose` |
        | outcome | — |
        | label out | — |
        | next | none |

        **Error:** the agent wrote no OUTCOME \| line 3 see &lt;img src=x> notes
        ");
        assert_eq!(step_outputs(&failed), "issue=4\nstage=diagnose\noutcome=\n");
        insta::assert_snapshot!(
            error_annotation("ward: stage diagnose, #4", "50% done\n::warning::injected"),
            @"::error title=ward%3A stage diagnose%2C #4::50%25 done%0A::warning::injected"
        );
    }
}
