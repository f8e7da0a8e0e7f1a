//! The sweep's verdicts, pure: whether a patient stalled (and how), and
//! which of contradictory labels is right. Time is a parameter.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::chart::{Note, NoteKind};
use crate::config::{Config, Stage};
use crate::forge::{LabelAction, LabelEvent};

/// Why a patient counts as stalled.
#[derive(Debug, Clone, PartialEq)]
pub enum Stall {
    /// No run of the stage started since its label was applied (or since the
    /// last re-trigger), and that was longer ago than `stall_after`.
    NoRun { since: DateTime<Utc> },
    /// A run wrote its ADMISSION but no OUTCOME, and is past its limit.
    Crashed { run: String, started: DateTime<Utc> },
    /// A run finished but the label stayed, for longer than `stall_after`.
    LabelStayed { run: String, finished: DateTime<Utc> },
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |d: &DateTime<Utc>| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        match self {
            Stall::NoRun { since } => write!(f, "no run started since {}", t(since)),
            Stall::Crashed { run, started } => {
                write!(f, "run `{run}` started at {} and never wrote an outcome (crashed)", t(started))
            }
            Stall::LabelStayed { run, finished } => {
                write!(f, "run `{run}` finished at {} but the label did not move", t(finished))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing to do; look again at `next_check`.
    Healthy {
        next_check: DateTime<Utc>,
    },
    Stalled {
        why: Stall,
        retries: u32,
    },
}

pub(crate) fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// When the label now on the patient was last applied, from its events.
pub fn label_applied_at(events: &[LabelEvent], label: &str) -> Option<DateTime<Utc>> {
    events.iter().filter(|e| e.label == label && e.action == LabelAction::Added).map(|e| e.at).max()
}

/// Decides whether a patient in `stage` is stalled, from when its label was
/// applied and its chart. Pure: time is `now`.
pub fn assess(
    stage: Stage<'_>,
    label_since: DateTime<Utc>,
    notes: &[Note],
    now: DateTime<Utc>,
    grace: Duration,
) -> Verdict {
    let in_visit = |n: &&Note| n.meta.stage == stage.name && n.meta.at >= label_since;
    let retries = notes.iter().filter(in_visit).filter(|n| n.kind == NoteKind::Sweep).count() as u32;
    let last_retrigger = notes.iter().filter(in_visit).filter(|n| n.kind == NoteKind::Sweep).map(|n| n.meta.at).max();
    let since = last_retrigger.map_or(label_since, |t| t.max(label_since));
    let stall_at = since + chrono_of(stage.config.stall_after);
    let limit = chrono_of(stage.config.time_limit) + chrono_of(grace);
    let latest_run = notes.iter().filter(in_visit).rfind(|n| n.kind == NoteKind::Admission);
    let Some(run) = latest_run else {
        return if now >= stall_at {
            Verdict::Stalled { why: Stall::NoRun { since }, retries }
        } else {
            Verdict::Healthy { next_check: stall_at }
        };
    };
    let run_id = run.meta.run.clone();
    let started = run.meta.at;
    if last_retrigger.is_some_and(|t| t >= started) {
        // The sweep already re-triggered after this run; what counts now is
        // whether a new run started since, which it did not.
        return if now >= stall_at {
            Verdict::Stalled { why: Stall::NoRun { since }, retries }
        } else {
            Verdict::Healthy { next_check: stall_at }
        };
    }
    // A run ends with its OUTCOME, or with a REFUSAL when the engine found it invalid.
    let outcome =
        notes.iter().find(|n| (n.kind == NoteKind::Outcome || n.kind == NoteKind::Refusal) && n.meta.run == run_id);
    let ends = started + limit;
    match outcome {
        None if now >= ends => Verdict::Stalled { why: Stall::Crashed { run: run_id, started }, retries },
        None => Verdict::Healthy { next_check: ends },
        Some(out) => {
            let stall_at = stall_at.max(started + chrono_of(stage.config.stall_after)).max(ends);
            if now >= stall_at {
                Verdict::Stalled { why: Stall::LabelStayed { run: run_id, finished: out.meta.at }, retries }
            } else {
                Verdict::Healthy { next_check: stall_at }
            }
        }
    }
}

/// What a repair should do with a patient whose labels contradict each other.
#[derive(Debug, Clone, PartialEq)]
pub enum Repair {
    /// Keep this ward label, remove the other ward labels.
    Keep { label: String, because: String },
    /// The right state cannot be known: send to the chiefs.
    Escalate { because: String },
}

/// Pure: decides which of `found` (the patient's ward labels) is its state.
/// The chart's latest OUTCOME names the label the engine meant to set; it
/// wins unless another of the labels was put on after that outcome.
pub fn decide_repair(config: &Config, found: &[String], events: &[LabelEvent], notes: &[Note]) -> Repair {
    let state_labels: Vec<&String> = found.iter().filter(|l| config.is_ward_label(l)).collect();
    let orphans: Vec<&String> = found.iter().filter(|l| !config.is_ward_label(l)).collect();
    let last_outcome = notes.iter().rfind(|n| n.kind == NoteKind::Outcome);
    let intended = last_outcome.and_then(|o| {
        let stage = config.stage(&o.meta.stage)?;
        let target = stage.config.outcomes.get(o.body.trim())?;
        Some((target.clone(), o))
    });
    if let Some((target, outcome)) = &intended
        && state_labels.contains(&target)
    {
        let later: Vec<&&String> = state_labels
            .iter()
            .filter(|l| **l != target)
            .filter(|l| label_applied_at(events, l).is_some_and(|t| t > outcome.meta.at))
            .collect();
        if later.is_empty() {
            return Repair::Keep {
                label: target.clone(),
                because: format!(
                    "the chart's last outcome (`{}` of stage `{}`, run `{}`) leads to `{target}`",
                    outcome.body.trim(),
                    outcome.meta.stage,
                    outcome.meta.run
                ),
            };
        }
        return Repair::Escalate {
            because: format!(
                "the chart's last outcome leads to `{target}`, but {} was put on after it",
                later.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
            ),
        };
    }
    if state_labels.len() == 1 {
        return Repair::Keep {
            label: state_labels[0].clone(),
            because: format!(
                "{} start no stage in `.github/ward.yml`; `{}` is the only label ward knows",
                orphans.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", "),
                state_labels[0]
            ),
        };
    }
    Repair::Escalate {
        because: format!(
            "the patient carries {} and the chart does not say which is right",
            found.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::chart::NoteMeta;
    use crate::sweep::parse_now;

    fn config() -> Config {
        let text = include_str!("../../.github/ward.yml");
        Config::parse(text, Path::new(".github/ward.yml"), None).unwrap()
    }

    fn t(s: &str) -> DateTime<Utc> {
        parse_now(s).unwrap()
    }

    fn note(kind: &str, run: &str, stage: &str, at: &str, body: &str) -> Note {
        Note {
            kind: kind.parse().expect("a known note kind"),
            meta: NoteMeta { run: run.into(), stage: stage.into(), role: "engine".into(), at: t(at) },
            body: body.into(),
        }
    }

    #[test]
    fn a_young_label_is_healthy_until_stall_after() {
        let c = config();
        let stage = c.stage("diagnose").unwrap(); // stall_after 2h
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &[], t("2026-11-29T11:00:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T12:00:00Z") });
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &[], t("2026-11-29T12:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::NoRun { .. }, retries: 0 }), "{v:?}");
    }

    #[test]
    fn a_live_run_is_left_alone_and_a_crashed_one_is_not() {
        let c = config();
        let stage = c.stage("diagnose").unwrap(); // time_limit 45m
        let notes = [note("ADMISSION", "r1", "diagnose", "2026-11-29T10:10:00Z", "")];
        let grace = Duration::from_secs(600);
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &notes, t("2026-11-29T10:50:00Z"), grace);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T11:05:00Z") });
        let v = assess(stage, t("2026-11-29T10:00:00Z"), &notes, t("2026-11-29T11:05:00Z"), grace);
        assert!(matches!(v, Verdict::Stalled { why: Stall::Crashed { .. }, .. }), "{v:?}");
    }

    #[test]
    fn runs_before_the_label_and_of_other_stages_do_not_count() {
        let c = config();
        let stage = c.stage("diagnose").unwrap();
        let notes = [
            note("ADMISSION", "old", "diagnose", "2026-11-29T08:00:00Z", ""),
            note("ADMISSION", "other", "treat", "2026-11-29T11:30:00Z", ""),
        ];
        let v = assess(stage, t("2026-11-29T09:00:00Z"), &notes, t("2026-11-29T11:30:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::NoRun { .. }, .. }), "{v:?}");
    }

    #[test]
    fn a_retrigger_restarts_the_stall_clock_and_counts() {
        let c = config();
        let stage = c.stage("diagnose").unwrap();
        let notes = [note("SWEEP", "s1", "diagnose", "2026-11-29T11:00:00Z", "")];
        let v = assess(stage, t("2026-11-29T09:00:00Z"), &notes, t("2026-11-29T12:00:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T13:00:00Z") });
        let v = assess(stage, t("2026-11-29T09:00:00Z"), &notes, t("2026-11-29T13:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { retries: 1, .. }), "{v:?}");
    }

    #[test]
    fn a_crashed_run_already_retriggered_waits_for_the_retrigger_to_take() {
        let c = config();
        let stage = c.stage("diagnose").unwrap(); // 45m, stall 2h
        let notes = [
            note("ADMISSION", "r1", "diagnose", "2026-11-29T10:00:00Z", ""),
            note("SWEEP", "s1", "diagnose", "2026-11-29T11:00:00Z", ""),
        ];
        let since = t("2026-11-29T09:00:00Z");
        let v = assess(stage, since, &notes, t("2026-11-29T11:05:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T13:00:00Z") });
        let v = assess(stage, since, &notes, t("2026-11-29T13:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::NoRun { .. }, retries: 1 }), "{v:?}");
    }

    #[test]
    fn a_finished_run_whose_label_stayed_is_stalled_after_stall_after() {
        let c = config();
        let stage = c.stage("plan-review").unwrap(); // 20m, stall 1h
        let notes = [
            note("ADMISSION", "r1", "plan-review", "2026-11-29T10:00:00Z", ""),
            note("OUTCOME", "r1", "plan-review", "2026-11-29T10:05:00Z", "approve"),
        ];
        let since = t("2026-11-29T09:59:00Z");
        let v = assess(stage, since, &notes, t("2026-11-29T10:30:00Z"), Duration::ZERO);
        assert_eq!(v, Verdict::Healthy { next_check: t("2026-11-29T11:00:00Z") });
        let v = assess(stage, since, &notes, t("2026-11-29T11:00:00Z"), Duration::ZERO);
        assert!(matches!(v, Verdict::Stalled { why: Stall::LabelStayed { .. }, .. }), "{v:?}");
    }

    fn ev(label: &str, at: &str) -> LabelEvent {
        LabelEvent { label: label.into(), action: LabelAction::Added, actor: "x".into(), at: t(at) }
    }

    #[test]
    fn repair_follows_the_last_outcome_unless_a_label_came_later() {
        let c = config();
        let found = vec!["ward:diagnose".to_string(), "ward:plan-review".to_string()];
        let notes = [note("OUTCOME", "r1", "diagnose", "2026-11-29T10:00:00Z", "plan-posted")];
        let events = [ev("ward:diagnose", "2026-11-29T09:00:00Z"), ev("ward:plan-review", "2026-11-29T10:00:00Z")];
        assert!(
            matches!(decide_repair(&c, &found, &events, &notes), Repair::Keep { label, .. } if label == "ward:plan-review")
        );
        let events = [ev("ward:diagnose", "2026-11-29T10:30:00Z"), ev("ward:plan-review", "2026-11-29T10:00:00Z")];
        assert!(matches!(decide_repair(&c, &found, &events, &notes), Repair::Escalate { .. }));
        assert!(matches!(decide_repair(&c, &found, &events, &[]), Repair::Escalate { .. }));
        let found = vec!["ward:treat".to_string(), "ward:triage".to_string()];
        assert!(matches!(decide_repair(&c, &found, &[], &[]), Repair::Keep { label, .. } if label == "ward:treat"));
    }
}
