//! Infection control: `ward lockdown on --reason R | off | status`.
//!
//! A lockdown is an open issue labeled [`LOCKDOWN_LABEL`] whose body holds
//! the reason, so people see it where they already look and no admin token
//! is needed. Every stage run calls [`active_lockdown`] first and, while one
//! is open, records a LOCKDOWN note ([`lockdown_note`]) and stops without
//! moving the label. The sweep declares one itself when a facility fails.
//! Only a person lifts it: `ward lockdown off` by someone with maintain
//! permission, or closing the issue.
//!
//! Who can do what, and why that is acceptable: anyone who may label issues
//! (triage) can open a lockdown, since a false alarm only stops work. Lifting
//! through ward needs maintain; closing the issue in GitHub's interface needs
//! only triage, which ward cannot prevent: the charge nurse's sweep reopens
//! a lockdown closed by someone below maintain, with a comment saying so
//! ([`reopen_closed_below_maintain`]).

use std::fmt;

use chrono::{DateTime, Utc};

use crate::chart::{Note, NoteKind, NoteMeta};
use crate::forge::{Forge, ForgeError, Issue, IssueNumber, LabelSpec, NewIssue, Permission};

pub use crate::config::LOCKDOWN_LABEL;

/// Separates the reason from ward's footer in the issue body.
const FOOTER: &str = "\n\n---\n";

/// A lockdown in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Lockdown {
    pub issue: IssueNumber,
    pub reason: String,
    /// Who opened the issue.
    pub declared_by: String,
}

impl fmt::Display for Lockdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lockdown {} (declared by {}): {}", self.issue, self.declared_by, self.reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockdownError {
    #[error("could not {action}: {cause}")]
    Forge { action: String, cause: ForgeError },
    #[error(
        "`{login}` may not lift the lockdown: that needs maintain permission and `{login}` has `{has:?}`; ask a \
         maintainer to run `ward lockdown off` or to close {issue}"
    )]
    LiftNotAllowed { login: String, has: Permission, issue: IssueNumber },
    #[error("`{login}` may not declare a lockdown: that needs triage permission and `{login}` has `{has:?}`")]
    DeclareNotAllowed { login: String, has: Permission },
    #[error("a lockdown needs a reason people can act on, e.g. `ward lockdown on --reason \"Docker host down\"`")]
    NoReason,
}

fn forge_err(action: impl Into<String>) -> impl FnOnce(ForgeError) -> LockdownError {
    let action = action.into();
    move |cause| LockdownError::Forge { action, cause }
}

/// The reason part of a lockdown issue's body (people may edit it).
fn reason_of(body: &str) -> String {
    body.split(FOOTER).next().unwrap_or_default().trim().to_string()
}

/// Who declared it, from ward's footer (the issue's author is the engine's
/// account when the engine opened it on someone's behalf).
fn declarer_of(body: &str) -> Option<String> {
    let footer = body.split(FOOTER).nth(1)?;
    let rest = footer.strip_prefix("Declared by @")?;
    rest.split_whitespace().next().map(str::to_string)
}

/// The lockdown in force, if any (the oldest when several are open). The
/// stage runner calls this before anything else.
pub async fn active_lockdown(forge: &dyn Forge) -> Result<Option<Lockdown>, LockdownError> {
    let open = forge
        .open_issues_with_label(LOCKDOWN_LABEL)
        .await
        .map_err(forge_err(format!("list the open issues labeled `{LOCKDOWN_LABEL}`")))?;
    Ok(open.into_iter().min_by_key(|i| i.number).map(lockdown_of))
}

/// The lockdown an open lockdown issue declares (the stage's guard gets
/// the issue from [`Forge::patient`]).
pub fn lockdown_of(i: Issue) -> Lockdown {
    Lockdown { issue: i.number, reason: reason_of(&i.body), declared_by: declarer_of(&i.body).unwrap_or(i.author) }
}

/// Declares a lockdown as `actor` (the engine account when the sweep
/// declares it). Returns the lockdown in force and whether it is new; a
/// second declaration while one is open changes nothing.
pub async fn declare(
    forge: &dyn Forge,
    reason: &str,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<(Lockdown, bool), LockdownError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(LockdownError::NoReason);
    }
    if !forge.engine_account().is(actor) {
        let has = forge.permission(actor).await.map_err(forge_err(format!("read the permission of `{actor}`")))?;
        if has < Permission::Triage {
            return Err(LockdownError::DeclareNotAllowed { login: actor.into(), has });
        }
    }
    if let Some(existing) = active_lockdown(forge).await? {
        return Ok((existing, false));
    }
    forge
        .ensure_labels(&[LabelSpec {
            name: LOCKDOWN_LABEL.into(),
            color: "000000".into(),
            description: "Infection control: every stage is locked".into(),
        }])
        .await
        .map_err(forge_err(format!("create the label `{LOCKDOWN_LABEL}`")))?;
    let headline: String = reason.lines().next().unwrap_or(reason).chars().take(80).collect();
    let body = format!(
        "{reason}{FOOTER}Declared by @{actor} at {} with `ward lockdown on`. While this issue is open, every ward \
         stage refuses to run and records a LOCKDOWN note; no label moves. Lift it with `ward lockdown off` \
         (maintain permission) or by closing this issue once the cause is fixed.",
        now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let issue = forge
        .create_issue(NewIssue {
            title: format!("ward lockdown: {headline}"),
            body,
            labels: vec![LOCKDOWN_LABEL.into()],
        })
        .await
        .map_err(forge_err("open the lockdown issue"))?;
    Ok((Lockdown { issue: issue.number, reason: reason.into(), declared_by: issue.author }, true))
}

/// Lifts every open lockdown, as `actor`, who needs maintain permission.
/// Returns the issues closed (empty: there was no lockdown).
pub async fn lift(forge: &dyn Forge, actor: &str, now: DateTime<Utc>) -> Result<Vec<IssueNumber>, LockdownError> {
    let open = forge
        .open_issues_with_label(LOCKDOWN_LABEL)
        .await
        .map_err(forge_err(format!("list the open issues labeled `{LOCKDOWN_LABEL}`")))?;
    let Some(first) = open.iter().map(|i| i.number).min() else { return Ok(Vec::new()) };
    let has = forge.permission(actor).await.map_err(forge_err(format!("read the permission of `{actor}`")))?;
    if has < Permission::Maintain {
        return Err(LockdownError::LiftNotAllowed { login: actor.into(), has, issue: first });
    }
    let mut closed = Vec::new();
    for issue in open {
        let n = issue.number;
        forge
            .add_comment(
                n,
                &format!(
                    "Lifted by @{actor} at {} with `ward lockdown off`. Stages run again; the patients \
                     refused meanwhile are re-triggered now.",
                    now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
            )
            .await
            .map_err(forge_err(format!("comment on the lockdown issue {n}")))?;
        forge.close_issue(n).await.map_err(forge_err(format!("close the lockdown issue {n}")))?;
        closed.push(n);
    }
    Ok(closed)
}

/// How far back the sweep looks for lockdowns closed by hand: a day, many
/// sweeps' worth, so a lockdown closed between two sweeps is always seen.
pub const CLOSED_LOOKBACK: chrono::Duration = chrono::Duration::hours(24);

/// Lockdown issues closed by someone below maintain (GitHub lets anyone
/// with triage close an issue; lifting a lockdown needs maintain): each
/// is reopened with a comment saying who closed it and who may lift it.
/// Closed by ward's own account (`ward lockdown off`, which checked the
/// permission) or by a maintainer: left closed. Returns those reopened.
pub async fn reopen_closed_below_maintain(
    forge: &dyn Forge,
    now: DateTime<Utc>,
) -> Result<Vec<IssueNumber>, LockdownError> {
    let closed = forge
        .closed_issues_with_label(LOCKDOWN_LABEL, now - CLOSED_LOOKBACK)
        .await
        .map_err(forge_err(format!("list the closed issues labeled `{LOCKDOWN_LABEL}`")))?;
    let mut reopened = Vec::new();
    for issue in closed {
        let Some(who) = issue.closed_by.filter(|w| !forge.engine_account().is(w)) else {
            continue;
        };
        let has = forge.permission(&who).await.map_err(forge_err(format!("read the permission of `{who}`")))?;
        if has >= Permission::Maintain {
            continue;
        }
        let n = issue.number;
        let body = format!(
            "Reopened by ward: @{who} closed this lockdown with {} permission, and lifting a lockdown needs \
             maintain. Stages stay stopped. A maintainer lifts it with `ward lockdown off` (or by closing this \
             issue).",
            format!("{has:?}").to_lowercase()
        );
        forge.reopen_issue(n).await.map_err(forge_err(format!("reopen the lockdown issue {n}")))?;
        forge.add_comment(n, &body).await.map_err(forge_err(format!("comment on the lockdown issue {n}")))?;
        reopened.push(n);
    }
    Ok(reopened)
}

/// After a lift: re-triggers every open patient that waited, that is whose
/// chart ends with a LOCKDOWN note and which still sits at that stage's
/// label. Returns them. The stage's guards make a repeat harmless.
pub async fn retrigger_waiting(
    forge: &dyn Forge,
    config: &crate::config::Config,
) -> Result<Vec<IssueNumber>, LockdownError> {
    let sentinels = crate::chart::Sentinels::new(&config.sentinel_prefix);
    let mut waited = Vec::new();
    for issue in forge.all_issues().await.map_err(forge_err("list the issues".to_string()))? {
        if issue.state != crate::forge::IssueState::Open {
            continue;
        }
        let Some(stage) = config.ward_label(&issue.labels).and_then(|l| config.stage_by_label(l)) else { continue };
        let n = issue.number;
        let chart = forge.read_chart(n).await.map_err(forge_err(format!("read the chart of {n}")))?;
        let last = chart.and_then(|c| sentinels.parse_chart(&c.text).ok()).and_then(|notes| notes.into_iter().last());
        if last.is_some_and(|note| note.kind == NoteKind::Lockdown && note.meta.stage == stage.name) {
            let label = stage.config.label.clone();
            forge.dispatch_stage(n, &label).await.map_err(forge_err(format!("re-trigger {n} at `{label}`")))?;
            waited.push(n);
        }
    }
    Ok(waited)
}

/// The LOCKDOWN note a refused stage run appends to the patient's chart.
pub fn lockdown_note(lockdown: &Lockdown, stage: &str, run: &str, now: DateTime<Utc>) -> Note {
    Note {
        kind: NoteKind::Lockdown,
        meta: NoteMeta::engine(run, stage, now),
        body: format!(
            "Infection control: lockdown {} is in force, so stage `{stage}` did not run and the label stays.\n\n\
             Reason: {}\n\nLifting the lockdown (`ward lockdown off`) re-triggers this stage.",
            lockdown.issue, lockdown.reason
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_survives_the_footer_and_human_edits() {
        assert_eq!(reason_of("Docker down\n\n---\nDeclared by @x"), "Docker down");
        assert_eq!(reason_of("  edited by a person  "), "edited by a person");
        assert_eq!(declarer_of("x\n\n---\nDeclared by @chief-ana at 2026"), Some("chief-ana".into()));
        assert_eq!(declarer_of("no footer"), None);
    }
}
