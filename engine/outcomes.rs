//! The outcomes the hospital is judged by (`ward report`'s table, and
//! `--json`'s `outcomes`): patients; the share of them the hospital filed
//! itself, by source; pull requests merged; send-backs by gate;
//! escalations; cost per patient and per merged change; acceptance (merged
//! and not reverted within a set number of days); merges no person had to
//! touch; time by state (in a stage against waiting for a person).
//!
//! Pure: computed from the patients' label events and charts, and from the
//! reverts the safety department recorded in the incident issues it filed
//! ([`crate::safety`] writes them; [`Revert`] is what they say). Each figure
//! is defined once, here, so the report, the JSON and the weekly review
//! read the same numbers.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::chart::{Note, NoteKind};
use crate::config::Config;
use crate::forge::{EngineAccount, Issue, IssueNumber, LabelAction, LabelEvent};

/// One patient as read from the forge.
#[derive(Debug, Clone)]
pub struct PatientRecord {
    pub issue: Issue,
    pub events: Vec<LabelEvent>,
    pub notes: Vec<Note>,
}

/// A discharged patient's change reverted on the base branch, as the
/// incident issue the engine filed records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revert {
    pub patient: IssueNumber,
    /// When the revert was committed.
    pub at: DateTime<Utc>,
}

/// Who filed a patient: a person, or the hospital itself (and which part).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Person,
    Decomposition,
    FollowUp,
    Research,
    Safety,
}

impl Source {
    pub const HOSPITAL: [Source; 4] = [Source::Decomposition, Source::FollowUp, Source::Research, Source::Safety];

    pub fn name(self) -> &'static str {
        match self {
            Source::Person => "person",
            Source::Decomposition => "decomposition",
            Source::FollowUp => "follow-up",
            Source::Research => "research",
            Source::Safety => "safety",
        }
    }
}

/// The first line of an issue the follow-ups department files.
pub const FOLLOW_UP_MARKER: &str = "<!-- ward-follow-up ";
/// The first line of an incident the safety department files.
pub const INCIDENT_MARKER: &str = "<!-- ward-incident ";
/// The first line of a proposal the research department files.
pub const RESEARCH_MARKER: &str = "<!-- ward-research ";

/// Who filed `issue`: a marker counts only on an issue the engine wrote.
pub fn source(issue: &Issue, engine: &EngineAccount) -> Source {
    if !engine.is(&issue.author) {
        return Source::Person;
    }
    if crate::rules::decomposition::trusted_marker(issue, engine).is_some() {
        return Source::Decomposition;
    }
    let first = issue.body.lines().next().unwrap_or("");
    [(FOLLOW_UP_MARKER, Source::FollowUp), (INCIDENT_MARKER, Source::Safety), (RESEARCH_MARKER, Source::Research)]
        .into_iter()
        .find(|(m, _)| first.starts_with(m))
        .map_or(Source::Person, |(_, s)| s)
}

/// Acceptance: of the changes merged in the period, those not reverted
/// within `days` of their merge.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Acceptance {
    pub days: u32,
    pub merged: usize,
    /// Reverted within `days` of the merge.
    pub reverted: usize,
    pub accepted: usize,
    /// Merges younger than `days` at the period's end, not reverted yet:
    /// counted as accepted, but not settled.
    pub unsettled: usize,
    /// accepted / merged; `None` without a merge.
    pub rate: Option<f64>,
}

/// Seconds spent at labels, by what the patient waited for.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct TimeByState {
    /// At a stage's label: an agent's run, or its queue.
    pub agent_seconds: f64,
    /// At a label only a person moves on: the chiefs, needs-info, a person's
    /// review or CI (the pending label), a chief's approval, a hold.
    pub waiting_for_people_seconds: f64,
    /// Resting for the hospital itself: children, dependencies, the merge queue.
    pub waiting_other_seconds: f64,
}

/// The outcome figures of one period (and one pipeline version, in `by_version`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcomes {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Admitted in the period.
    pub patients: usize,
    /// Of those, filed by the hospital, by source (every source named, 0 included).
    pub hospital_generated: BTreeMap<String, usize>,
    /// hospital-generated / patients; `None` without patients.
    pub hospital_share: Option<f64>,
    /// Pull requests merged (patients discharged) in the period.
    pub merged: usize,
    /// `stage.outcome` -> times a gate sent work back.
    pub send_backs: BTreeMap<String, usize>,
    pub send_backs_total: usize,
    /// A stuck fellow's handoff to an attending (the consult stage).
    pub escalations_to_attending: usize,
    /// The chief label applied.
    pub escalations_to_chiefs: usize,
    /// A label only a person moves on applied as an escalation: the chiefs,
    /// or needs-info (the planner asks the reporter).
    pub escalations_to_people: usize,
    pub cost_usd: f64,
    /// Patients with a COST note that gave a figure in the period.
    pub patients_with_cost: usize,
    /// cost / patients with a cost.
    pub cost_per_patient_usd: Option<f64>,
    /// cost / merged; `None` without a merge or without any cost figure.
    pub cost_per_merge_usd: Option<f64>,
    pub acceptance: Acceptance,
    /// Merged with no person acting between admission and merge: every
    /// label change by the engine, no command, never at a person's label.
    pub untouched_merges: usize,
    pub time: TimeByState,
}

/// The labels where a patient waits for a person.
fn people_labels(config: &Config) -> Vec<String> {
    let mut labels = vec![
        config.chief_label().to_string(),
        config.discharge.awaiting_label.clone(),
        config.discharge.pending_label.clone(),
        config.commands.hold_label.clone(),
    ];
    labels.extend(needs_info_label(config));
    labels
}

fn needs_info_label(config: &Config) -> Option<String> {
    config.stages().find_map(|s| s.config.outcomes.get("needs-info")).cloned()
}

fn consult_label(config: &Config) -> Option<String> {
    config.stages().find_map(|s| s.config.outcomes.get("stuck")).cloned()
}

fn discharged_label(config: &Config) -> String {
    config
        .stages()
        .find_map(|s| s.config.outcomes.get("discharged"))
        .cloned()
        .unwrap_or_else(|| config.discharge.discharged_label.clone())
}

/// The version a patient counts under: that of its first run in the window.
pub fn version_of(p: &PatientRecord, in_window: impl Fn(DateTime<Utc>) -> bool) -> String {
    p.notes
        .iter()
        .find(|n| n.kind == NoteKind::Admission && in_window(n.meta.at))
        .and_then(|n| crate::governance::recorded_version(&n.body))
        .unwrap_or_else(|| crate::governance::UNKNOWN.to_string())
}

/// Pure: the outcomes of `[from, to]`.
pub fn compute(
    config: &Config,
    patients: &[PatientRecord],
    reverts: &[Revert],
    accept_days: u32,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Outcomes {
    compute_period(config, patients, reverts, accept_days, (from, to), true)
}

/// Pure: the outcomes of `(from, to]`, or `[from, to]` with `include_from`
/// (the first of [`periods`]): periods that meet count a moment once.
pub fn compute_period(
    config: &Config,
    patients: &[PatientRecord],
    reverts: &[Revert],
    accept_days: u32,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    include_from: bool,
) -> Outcomes {
    let in_window = |t: DateTime<Utc>| (t > from || (include_from && t == from)) && t <= to;
    let engine = &config.engine_account;
    let added_at = |p: &PatientRecord, label: &str| -> Vec<DateTime<Utc>> {
        p.events
            .iter()
            .filter(|e| e.label == label && e.action == LabelAction::Added && in_window(e.at))
            .map(|e| e.at)
            .collect()
    };
    let discharged = discharged_label(config);
    let send_back_set = config.departments.budget.send_back_set(config);
    let mut hospital: BTreeMap<String, usize> = Source::HOSPITAL.iter().map(|s| (s.name().to_string(), 0)).collect();
    let mut o = Outcomes {
        from,
        to,
        patients: 0,
        hospital_generated: BTreeMap::new(),
        hospital_share: None,
        merged: 0,
        send_backs: BTreeMap::new(),
        send_backs_total: 0,
        escalations_to_attending: 0,
        escalations_to_chiefs: 0,
        escalations_to_people: 0,
        cost_usd: 0.0,
        patients_with_cost: 0,
        cost_per_patient_usd: None,
        cost_per_merge_usd: None,
        acceptance: Acceptance { days: accept_days, ..Acceptance::default() },
        untouched_merges: 0,
        time: TimeByState::default(),
    };
    let people = people_labels(config);
    let needs_info = needs_info_label(config);
    let consult = consult_label(config);
    for p in patients {
        if !added_at(p, &config.admission).is_empty() {
            o.patients += 1;
            let s = source(&p.issue, engine);
            if s != Source::Person {
                *hospital.entry(s.name().to_string()).or_insert(0) += 1;
            }
        }
        o.escalations_to_chiefs += added_at(p, config.chief_label()).len();
        let to_needs_info = needs_info.as_deref().map_or(0, |l| added_at(p, l).len());
        o.escalations_to_people += added_at(p, config.chief_label()).len() + to_needs_info;
        o.escalations_to_attending += consult.as_deref().map_or(0, |l| added_at(p, l).len());
        for merged_at in added_at(p, &discharged) {
            o.merged += 1;
            acceptance(&mut o.acceptance, p.issue.number, merged_at, reverts, to);
            if untouched(config, p, &people, merged_at) {
                o.untouched_merges += 1;
            }
        }
        let mut cost = None::<f64>;
        for n in p.notes.iter().filter(|n| in_window(n.meta.at)) {
            match n.kind {
                NoteKind::Outcome => {
                    let key = (n.meta.stage.clone(), n.body.trim().to_string());
                    if send_back_set.contains(&key) {
                        *o.send_backs.entry(format!("{}.{}", key.0, key.1)).or_insert(0) += 1;
                        o.send_backs_total += 1;
                    }
                }
                NoteKind::Cost => {
                    // A COST note that says `unknown` adds no figure.
                    if let Some(c) = crate::budget::parse_cost_note(&n.body).and_then(|u| u.cost_usd) {
                        cost = Some(cost.unwrap_or(0.0) + c);
                    }
                }
                _ => {}
            }
        }
        if let Some(c) = cost {
            o.patients_with_cost += 1;
            o.cost_usd += c;
        }
        add_time(config, &mut o.time, &p.events, &people, from, to);
    }
    let hospital_total: usize = hospital.values().sum();
    o.hospital_share = (o.patients > 0).then(|| hospital_total as f64 / o.patients as f64);
    o.hospital_generated = hospital;
    o.cost_per_patient_usd = (o.patients_with_cost > 0).then(|| o.cost_usd / o.patients_with_cost as f64);
    // No figure at all is unknown, not free.
    o.cost_per_merge_usd = (o.merged > 0 && o.patients_with_cost > 0).then(|| o.cost_usd / o.merged as f64);
    let a = &mut o.acceptance;
    a.accepted = a.merged - a.reverted;
    a.rate = (a.merged > 0).then(|| a.accepted as f64 / a.merged as f64);
    o
}

fn acceptance(
    a: &mut Acceptance,
    patient: IssueNumber,
    merged_at: DateTime<Utc>,
    reverts: &[Revert],
    to: DateTime<Utc>,
) {
    a.merged += 1;
    let limit = merged_at + chrono::Duration::days(i64::from(a.days));
    // A commit's time has whole seconds, and clocks differ a little.
    let earliest = merged_at - chrono::Duration::minutes(1);
    if reverts.iter().any(|r| r.patient == patient && r.at >= earliest && r.at <= limit) {
        a.reverted += 1;
    } else if limit > to {
        a.unsettled += 1;
    }
}

/// No person acted on the patient between its admission and `merged_at`.
fn untouched(config: &Config, p: &PatientRecord, people: &[String], merged_at: DateTime<Utc>) -> bool {
    let engine = &config.engine_account;
    let admitted = p
        .events
        .iter()
        .filter(|e| e.label == config.admission && e.action == LabelAction::Added && e.at <= merged_at)
        .map(|e| e.at)
        .next_back();
    let Some(admitted) = admitted else { return false };
    let between = |t: DateTime<Utc>| t > admitted && t <= merged_at;
    let by_person = p.events.iter().any(|e| between(e.at) && !engine.is(&e.actor));
    let at_people =
        p.events.iter().any(|e| between(e.at) && e.action == LabelAction::Added && people.contains(&e.label));
    let approved = p.events.iter().any(|e| between(e.at) && e.label == config.discharge.approved_label);
    let command = p.notes.iter().any(|n| n.kind == NoteKind::Command && between(n.meta.at));
    !(by_person || at_people || approved || command)
}

/// Adds each label's stays, cut to `[from, to]`, to the state it belongs to.
fn add_time(
    config: &Config,
    time: &mut TimeByState,
    events: &[LabelEvent],
    people: &[String],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) {
    let discharged = discharged_label(config);
    let mut on: BTreeMap<&str, DateTime<Utc>> = BTreeMap::new();
    let mut stays: Vec<(&str, DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    for e in events {
        match e.action {
            LabelAction::Added => {
                on.entry(e.label.as_str()).or_insert(e.at);
            }
            LabelAction::Removed => {
                if let Some(start) = on.remove(e.label.as_str()) {
                    stays.push((e.label.as_str(), start, e.at));
                }
            }
        }
    }
    stays.extend(on.into_iter().map(|(label, start)| (label, start, to)));
    for (label, start, end) in stays {
        let seconds = (end.min(to) - start.max(from)).num_milliseconds().max(0) as f64 / 1000.0;
        if seconds == 0.0 || label == discharged || !config.is_ward_label(label) {
            continue;
        }
        if config.stage_by_label(label).is_some() {
            time.agent_seconds += seconds;
        } else if people.iter().any(|l| l == label) {
            time.waiting_for_people_seconds += seconds;
        } else if config.is_place(label) {
            time.waiting_other_seconds += seconds;
        }
    }
}

/// The outcomes of each pipeline version in `[from, to]`: a patient counts
/// under the version of its first run in the window.
pub fn by_version(
    config: &Config,
    patients: &[PatientRecord],
    reverts: &[Revert],
    accept_days: u32,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> BTreeMap<String, Outcomes> {
    let in_window = |t: DateTime<Utc>| t >= from && t <= to;
    let mut groups: BTreeMap<String, Vec<PatientRecord>> = BTreeMap::new();
    for p in patients {
        let touched = p.events.iter().any(|e| in_window(e.at)) || p.notes.iter().any(|n| in_window(n.meta.at));
        if touched {
            groups.entry(version_of(p, in_window)).or_default().push(p.clone());
        }
    }
    groups.into_iter().map(|(v, ps)| (v, compute(config, &ps, reverts, accept_days, from, to))).collect()
}

/// `[from, to]` cut into periods of `every`, oldest first (the last one
/// ends at `to`, the first may be shorter).
pub fn periods(from: DateTime<Utc>, to: DateTime<Utc>, every: chrono::Duration) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    if every <= chrono::Duration::zero() || from >= to {
        return vec![(from, to)];
    }
    let mut out = Vec::new();
    let mut end = to;
    while end > from && out.len() < 1_000 {
        let start = end.checked_sub_signed(every).map_or(from, |s| s.max(from));
        out.push((start, end));
        end = start;
    }
    out.reverse();
    out
}
