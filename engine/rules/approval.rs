//! Human approval mode and what follows a passed audit.
//!
//! Without `human_approval`, the engine merges (squash) after a passed
//! audit and discharges. With it, a passed audit waits at the awaiting
//! label; a person with at least `discharge.approver_permission` (maintain
//! by default) applying the approved label lets the engine merge. Who
//! applied the label comes from the label history, never from the
//! issue text.

use super::{Refusal, Route};
use crate::chart::{Note, NoteKind};
use crate::config::Config;
use crate::forge::{LabelAction, LabelEvent, Permission};

pub const NAME: &str = "human-approval";

/// What the engine does after the discharge audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterAudit {
    /// Merge now, then label discharged and close.
    Merge,
    /// Wait for a chief at this label.
    AwaitChief(String),
    /// The audit failed: the stage's `audit-failed` outcome decides the label.
    SendBack,
}

/// Whether a person approves this patient's merge: the whole hospital in
/// human approval mode, or this patient because a treatment of it changed
/// protected paths its approved plan listed (the engine's PROTECTED_CHANGE
/// note, [`super::changes`]). Once on for a patient, it stays on: the
/// change is on its branch.
pub fn human_approval(config: &Config, chart: &[Note]) -> bool {
    config.human_approval
        || chart.iter().any(|n| n.kind == NoteKind::ProtectedChange && n.meta.role == crate::chart::ENGINE_ROLE)
}

pub fn after_audit(config: &Config, chart: &[Note], passed: bool) -> AfterAudit {
    match (passed, human_approval(config, chart)) {
        (false, _) => AfterAudit::SendBack,
        (true, false) => AfterAudit::Merge,
        (true, true) => AfterAudit::AwaitChief(config.discharge.awaiting_label.clone()),
    }
}

/// Who applied `label` last, if it is on the issue by a recorded addition.
pub fn applied_by<'a>(events: &'a [LabelEvent], label: &str) -> Option<&'a LabelEvent> {
    events.iter().rev().find(|e| e.label == label).filter(|e| e.action == LabelAction::Added)
}

/// May the engine merge because a chief approved? `approver` is who
/// applied the approved label and the permission the forge reports for
/// them; a yes is that chief. A refusal takes the approved label off and
/// leaves the patient waiting.
pub fn may_merge<'a>(
    config: &Config,
    chart: &[Note],
    labels: &[String],
    approver: Option<(&'a str, Permission)>,
) -> Result<(&'a str, Permission), Refusal> {
    let d = &config.discharge;
    let back = Route::To(d.awaiting_label.clone());
    if !human_approval(config, chart) {
        return Err(Refusal::new(
            NAME,
            format!("`{}` was applied, but human approval mode is off (`human_approval: false`).", d.approved_label),
            "Nothing to approve: the engine merges after a passed audit by itself.",
            Route::Stay,
        ));
    }
    if !labels.contains(&d.awaiting_label) {
        return Err(Refusal::new(
            NAME,
            format!("`{}` was applied to a patient that is not at `{}`.", d.approved_label, d.awaiting_label),
            format!("Approve only patients whose audit passed and who wait at `{}`.", d.awaiting_label),
            Route::Stay,
        ));
    }
    let Some((who, permission)) = approver else {
        return Err(Refusal::new(
            NAME,
            format!("Nobody is recorded as having applied `{}`.", d.approved_label),
            format!(
                "A chief with {} permission applies `{}` again.",
                format!("{:?}", d.approver_permission).to_lowercase(),
                d.approved_label
            ),
            back,
        ));
    };
    if config.engine_account.is(who) {
        return Err(Refusal::new(
            NAME,
            format!(
                "`{}` was applied by the engine's own account `{who}`; the engine cannot approve itself.",
                d.approved_label
            ),
            "A person with maintain or admin permission approves.",
            back,
        ));
    }
    if permission < d.approver_permission {
        return Err(Refusal::new(
            NAME,
            format!(
                "`{who}` applied `{}` with {} permission; approving a merge needs {}.",
                d.approved_label,
                format!("{permission:?}").to_lowercase(),
                format!("{:?}", d.approver_permission).to_lowercase()
            ),
            "Ask a maintainer or an admin to approve.",
            back,
        ));
    }
    Ok((who, permission))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn human() -> Config {
        let mut c = config();
        c.human_approval = true;
        c
    }

    #[test]
    fn a_passed_audit_merges_or_waits_for_a_chief() {
        assert_eq!(after_audit(&config(), &[], true), AfterAudit::Merge);
        assert_eq!(after_audit(&human(), &[], true), AfterAudit::AwaitChief("ward:awaiting-chief".into()));
        assert_eq!(after_audit(&human(), &[], false), AfterAudit::SendBack);
    }

    #[test]
    fn a_planned_change_to_protected_paths_puts_its_patient_in_human_approval_mode() {
        let marked = [note("PROTECTED_CHANGE", "r5", "treat", "engine", "`.github/workflows/ci.yml`")];
        assert_eq!(after_audit(&config(), &marked, true), AfterAudit::AwaitChief("ward:awaiting-chief".into()));
        let labels = vec!["ward:awaiting-chief".to_string(), "ward:approved".to_string()];
        may_merge(&config(), &marked, &labels, Some(("maria", Permission::Maintain))).unwrap();
        // Only the engine's note switches it.
        let forged = [note("PROTECTED_CHANGE", "r5", "treat", "fellow", "x")];
        assert_eq!(after_audit(&config(), &forged, true), AfterAudit::Merge);
    }

    #[test]
    fn only_a_maintainer_or_admin_approves() {
        let c = human();
        let labels = vec!["ward:awaiting-chief".to_string(), "ward:approved".to_string()];
        may_merge(&c, &[], &labels, Some(("maria", Permission::Maintain))).unwrap();
        may_merge(&c, &[], &labels, Some(("maria", Permission::Admin))).unwrap();
        let err = may_merge(&c, &[], &labels, Some(("tom", Permission::Write))).unwrap_err();
        assert_eq!(err.route, Route::To("ward:awaiting-chief".into()));
        assert!(
            err.reason
                .contains("`tom` applied `ward:approved` with write permission; approving a merge needs maintain")
        );
        assert!(may_merge(&c, &[], &labels, Some(("github-actions[bot]", Permission::Admin))).is_err());
        assert!(may_merge(&c, &[], &labels, None).is_err());
        assert!(may_merge(&c, &[], &["ward:approved".to_string()], Some(("maria", Permission::Admin))).is_err());
        assert!(may_merge(&config(), &[], &labels, Some(("maria", Permission::Admin))).is_err(), "mode off");
    }

    #[test]
    fn the_last_addition_names_the_approver() {
        let ev = |label: &str, action, actor: &str| LabelEvent {
            label: label.into(),
            action,
            actor: actor.into(),
            at: at(0),
        };
        let events = vec![
            ev("ward:approved", LabelAction::Added, "tom"),
            ev("ward:approved", LabelAction::Removed, "ward-bot"),
            ev("ward:approved", LabelAction::Added, "maria"),
        ];
        assert_eq!(applied_by(&events, "ward:approved").unwrap().actor, "maria");
        assert!(applied_by(&events[..2], "ward:approved").is_none(), "removed since");
    }
}
