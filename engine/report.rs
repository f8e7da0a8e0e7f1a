//! The safety department: `ward report [--since 7d] [--html FILE]`.
//!
//! Built from what GitHub keeps (label events and charts), read through
//! the forge: patients admitted, discharged and escalated; time in each
//! stage (median, p90); send-backs per stage; stalls and sweeps; cost per
//! patient and per stage; the patients that cost most. Markdown for an
//! issue or a job summary, or one self-contained HTML page whose charts are
//! hand-written inline SVG (no script, no external resource).
//!
//! [`gather`] does the I/O; [`compute`] and the renderers are pure.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::budget::parse_cost_note;
use crate::chart::Sentinels;
use crate::config::Config;
use crate::forge::{Forge, ForgeError, LabelAction};
use crate::lockdown::LOCKDOWN_LABEL;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("could not {action} for the safety report: {cause}")]
    Forge { action: String, cause: ForgeError },
    #[error("`{0}` is not a period like `7d`, `24h` or `30d` (for `--since`)")]
    Since(String),
}

/// Parses `--since`: `7d`, `24h`, `2w`.
pub fn parse_since(text: &str) -> Result<Duration, ReportError> {
    humantime::parse_duration(text).map_err(|_| ReportError::Since(text.into()))
}

pub use crate::outcomes::PatientRecord;
use crate::outcomes::{Outcomes, Revert};

/// Reads every patient (an issue that ever carried a ward label): its label
/// events, and its chart unless the patient is closed and nothing happened
/// to its labels since `since` (a closed chart gets no new notes). A chart
/// that cannot be parsed is reported in the second value and its patient
/// counted without notes.
pub async fn gather(
    forge: &dyn Forge,
    config: &Config,
    since: Option<DateTime<Utc>>,
) -> Result<(Vec<PatientRecord>, Vec<String>), ReportError> {
    let (out, problems, _) = gather_with_reverts(forge, config, since).await?;
    Ok((out, problems))
}

/// [`gather`], and the reverts the safety department's incident issues
/// record (for acceptance).
pub async fn gather_with_reverts(
    forge: &dyn Forge,
    config: &Config,
    since: Option<DateTime<Utc>>,
) -> Result<(Vec<PatientRecord>, Vec<String>, Vec<Revert>), ReportError> {
    let err = |action: String| move |cause| ReportError::Forge { action, cause };
    let sentinels = Sentinels::new(&config.sentinel_prefix);
    let issues = forge.all_issues().await.map_err(err("list the issues".into()))?;
    let reverts = crate::safety::reverts(&issues, &config.engine_account);
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for issue in issues {
        if issue.labels.iter().any(|l| l == LOCKDOWN_LABEL) {
            continue;
        }
        let n = issue.number;
        let events = forge.label_events(n).await.map_err(err(format!("read the label events of {n}")))?;
        if !events.iter().any(|e| config.is_ward_label(&e.label)) {
            continue;
        }
        let quiet = since.is_some_and(|from| events.iter().all(|e| e.at < from));
        if quiet && issue.state == crate::forge::IssueState::Closed {
            out.push(PatientRecord { issue, events, notes: Vec::new() });
            continue;
        }
        let notes = match forge.read_chart(n).await.map_err(err(format!("read the chart of {n}")))? {
            None => Vec::new(),
            Some(c) => sentinels.parse_chart(&c.text).unwrap_or_else(|e| {
                problems.push(format!("the chart of {n} is unreadable ({e}); counted without its notes"));
                Vec::new()
            }),
        };
        out.push(PatientRecord { issue, events, notes });
    }
    Ok((out, problems, reverts))
}

/// Time in one stage, and what happened there, within the window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StageStats {
    pub name: String,
    pub label: String,
    /// Times the stage label was put on.
    pub entered: usize,
    /// Finished stays (label on, then off), in seconds.
    pub stays: Vec<f64>,
    /// Send-backs out of this stage, by outcome.
    pub send_backs: BTreeMap<String, usize>,
    /// Re-triggers by the charge nurse.
    pub sweeps: usize,
    pub cost: f64,
    /// COST notes that gave a figure, and those that said `unknown`.
    pub costs_known: usize,
    pub costs_unknown: usize,
    pub runs: usize,
}

impl StageStats {
    pub fn median(&self) -> Option<f64> {
        percentile(&self.stays, 50.0)
    }
    pub fn p90(&self) -> Option<f64> {
        percentile(&self.stays, 90.0)
    }
}

/// Nearest-rank percentile.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

#[derive(Debug, Clone, PartialEq)]
pub struct PatientCost {
    pub issue: u64,
    pub title: String,
    pub cost: f64,
    pub runs: usize,
}

/// The whole report, computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub admitted: usize,
    pub discharged: usize,
    pub escalated: usize,
    pub stages: Vec<StageStats>,
    /// (from stage, to label) -> outcomes recorded.
    pub flows: BTreeMap<(String, String), usize>,
    pub stalled_patients: usize,
    pub sweep_escalations: usize,
    /// Patients with spend in the window, costliest first.
    pub costs: Vec<PatientCost>,
    pub total_cost: f64,
    /// Runs, outcomes, send-backs, stalls and cost by pipeline version.
    pub versions: Vec<crate::governance::VersionStats>,
    /// COST notes that gave a figure, and those that said `unknown`.
    pub costs_known: usize,
    pub costs_unknown: usize,
    /// The outcomes of the whole window ([`crate::outcomes`]).
    pub outcomes: Outcomes,
    /// The window cut into periods (`--period`); one entry without.
    pub outcome_periods: Vec<Outcomes>,
    /// The window's outcomes by pipeline version.
    pub outcome_versions: BTreeMap<String, Outcomes>,
    pub problems: Vec<String>,
}

/// What the outcomes need besides the patients.
#[derive(Debug, Clone)]
pub struct OutcomeInputs {
    pub reverts: Vec<Revert>,
    /// A merge not reverted within this many days is accepted.
    pub accept_days: u32,
    /// The length of one period; `None`: the whole window is one.
    pub period: Option<chrono::Duration>,
}

impl Default for OutcomeInputs {
    fn default() -> Self {
        Self { reverts: Vec::new(), accept_days: DEFAULT_ACCEPT_DAYS, period: None }
    }
}

/// A merge not reverted within this many days counts as accepted.
pub const DEFAULT_ACCEPT_DAYS: u32 = 14;

/// A cost as people should read it: `unknown` when no COST note gave a
/// figure, a lower bound when only some did.
fn cost_cell(cost: f64, known: usize, unknown: usize) -> String {
    match (known, unknown) {
        (0, u) if u > 0 => "unknown".into(),
        (_, 0) => format!("${cost:.2}"),
        _ => format!("≥ ${cost:.2}"),
    }
}

fn target_of<'a>(config: &'a Config, outcome: &str, fallback: &'a str) -> &'a str {
    config.stages().find_map(|s| s.config.outcomes.get(outcome)).map(String::as_str).unwrap_or(fallback)
}

/// Pure: the report for the window `[from, to]`, without reverts.
pub fn compute(config: &Config, patients: &[PatientRecord], from: DateTime<Utc>, to: DateTime<Utc>) -> Report {
    compute_with(config, patients, &OutcomeInputs::default(), from, to)
}

/// Pure: the report for the window `[from, to]`, its outcomes with `inputs`.
pub fn compute_with(
    config: &Config,
    patients: &[PatientRecord],
    inputs: &OutcomeInputs,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Report {
    let outcomes_of = |window, first| {
        crate::outcomes::compute_period(config, patients, &inputs.reverts, inputs.accept_days, window, first)
    };
    let outcome_periods = crate::outcomes::periods(from, to, inputs.period.unwrap_or(chrono::Duration::zero()))
        .into_iter()
        .enumerate()
        .map(|(i, window)| outcomes_of(window, i == 0))
        .collect();
    let outcome_versions = crate::outcomes::by_version(config, patients, &inputs.reverts, inputs.accept_days, from, to);
    let mut report = compute_stages(config, patients, from, to, outcomes_of((from, to), true));
    report.outcome_periods = outcome_periods;
    report.outcome_versions = outcome_versions;
    report
}

fn compute_stages(
    config: &Config,
    patients: &[PatientRecord],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    outcomes: Outcomes,
) -> Report {
    let in_window = |t: DateTime<Utc>| t >= from && t <= to;
    let discharged_label = target_of(config, "discharged", "ward:discharged");
    let chief_label = config.chief_label();
    let send_backs = config.departments.budget.send_back_set(config);
    let added_in = |p: &PatientRecord, label: &str| {
        p.events.iter().any(|e| e.label == label && e.action == LabelAction::Added && in_window(e.at))
    };
    let mut stages: Vec<StageStats> = config
        .stages()
        .map(|s| StageStats { name: s.name.into(), label: s.config.label.clone(), ..StageStats::default() })
        .collect();
    let mut flows = BTreeMap::new();
    let mut stalled = HashSet::new();
    let mut sweep_escalations = 0;
    let mut costs = Vec::new();
    let mut report = Report {
        from,
        to,
        admitted: patients.iter().filter(|p| added_in(p, &config.admission)).count(),
        discharged: patients.iter().filter(|p| added_in(p, discharged_label)).count(),
        escalated: patients.iter().filter(|p| added_in(p, chief_label)).count(),
        stages: Vec::new(),
        flows: BTreeMap::new(),
        stalled_patients: 0,
        sweep_escalations: 0,
        costs: Vec::new(),
        total_cost: 0.0,
        versions: Vec::new(),
        costs_known: 0,
        costs_unknown: 0,
        outcomes,
        outcome_periods: Vec::new(),
        outcome_versions: BTreeMap::new(),
        problems: Vec::new(),
    };
    for p in patients {
        for st in stages.iter_mut() {
            let mut on_since: Option<DateTime<Utc>> = None;
            for e in p.events.iter().filter(|e| e.label == st.label) {
                match e.action {
                    LabelAction::Added => {
                        if in_window(e.at) {
                            st.entered += 1;
                        }
                        on_since.get_or_insert(e.at);
                    }
                    LabelAction::Removed => {
                        if let Some(start) = on_since.take()
                            && in_window(e.at)
                        {
                            st.stays.push((e.at - start).num_milliseconds() as f64 / 1000.0);
                        }
                    }
                }
            }
        }
        let mut patient_cost = 0.0;
        let mut patient_runs = 0;
        for n in p.notes.iter().filter(|n| in_window(n.meta.at)) {
            let stage = stages.iter_mut().find(|s| s.name == n.meta.stage);
            match n.kind.as_str() {
                "OUTCOME" => {
                    let outcome = n.body.trim();
                    if let Some(target) = config.stage(&n.meta.stage).and_then(|s| s.config.outcomes.get(outcome)) {
                        *flows.entry((n.meta.stage.clone(), target.clone())).or_insert(0) += 1;
                    }
                    if send_backs.contains(&(n.meta.stage.clone(), outcome.to_string()))
                        && let Some(st) = stage
                    {
                        *st.send_backs.entry(outcome.to_string()).or_insert(0) += 1;
                    }
                }
                "SWEEP" => {
                    stalled.insert(p.issue.number);
                    if let Some(st) = stage {
                        st.sweeps += 1;
                    }
                }
                "ESCALATION" if n.meta.run.starts_with("sweep-") => {
                    sweep_escalations += 1;
                    *flows.entry((n.meta.stage.clone(), chief_label.to_string())).or_insert(0) += 1;
                }
                "ADMISSION" => {
                    patient_runs += 1;
                    if let Some(st) = stage {
                        st.runs += 1;
                    }
                }
                "COST" => {
                    let figure = parse_cost_note(&n.body).and_then(|u| u.cost_usd);
                    let c = figure.unwrap_or(0.0);
                    patient_cost += c;
                    match figure {
                        Some(_) => report.costs_known += 1,
                        None => report.costs_unknown += 1,
                    }
                    if let Some(st) = stage {
                        st.cost += c;
                        match figure {
                            Some(_) => st.costs_known += 1,
                            None => st.costs_unknown += 1,
                        }
                    }
                }
                _ => {}
            }
        }
        if patient_cost > 0.0 {
            costs.push(PatientCost {
                issue: p.issue.number.0,
                title: p.issue.title.clone(),
                cost: patient_cost,
                runs: patient_runs,
            });
        }
    }
    costs.sort_by(|a, b| b.cost.total_cmp(&a.cost).then(a.issue.cmp(&b.issue)));
    report.total_cost = costs.iter().fold(0.0, |sum, c| sum + c.cost);
    report.stages = stages;
    report.flows = flows;
    report.stalled_patients = stalled.len();
    report.sweep_escalations = sweep_escalations;
    report.costs = costs;
    report.versions = crate::governance::by_version(
        patients.iter().map(|p| p.notes.as_slice()),
        |n| in_window(n.meta.at),
        |stage, outcome| send_backs.contains(&(stage.to_string(), outcome.to_string())),
        |n| parse_cost_note(&n.body).and_then(|u| u.cost_usd).unwrap_or(0.0),
    );
    report
}

/// The same figures as the Markdown, for other tools (`ward report --json`).
pub fn render_json(r: &Report) -> serde_json::Value {
    let stages: Vec<serde_json::Value> = r
        .stages
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name, "label": s.label, "entered": s.entered, "runs": s.runs,
                "median_stay_seconds": s.median(), "p90_stay_seconds": s.p90(),
                "send_backs": s.send_backs, "re_triggers": s.sweeps, "cost_usd": s.cost,
            })
        })
        .collect();
    let flows: Vec<serde_json::Value> = r
        .flows
        .iter()
        .map(|((from, to), n)| serde_json::json!({"from_stage": from, "to_label": to, "outcomes": n}))
        .collect();
    let costs: Vec<serde_json::Value> = r
        .costs
        .iter()
        .map(|c| serde_json::json!({"issue": c.issue, "title": c.title, "runs": c.runs, "cost_usd": c.cost}))
        .collect();
    serde_json::json!({
        "from": r.from, "to": r.to,
        "admitted": r.admitted, "discharged": r.discharged, "escalated": r.escalated,
        "stalled_patients": r.stalled_patients, "sweep_escalations": r.sweep_escalations,
        "total_cost_usd": r.total_cost,
        "stages": stages, "flows": flows, "costs": costs,
        "pipeline_versions": r.versions,
        "outcomes": r.outcomes,
        "outcomes_by_period": r.outcome_periods,
        "outcomes_by_version": r.outcome_versions,
        "problems": r.problems,
    })
}

/// `3h 05m`, `12m`, `40s`.
pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn opt_duration(v: Option<f64>) -> String {
    v.map_or("–".into(), human_duration)
}

/// Text that came from an issue, made safe for a Markdown table cell.
fn md_cell(text: &str) -> String {
    let t: String = text.chars().take(80).collect();
    t.replace('|', "\\|").replace(['\n', '\r'], " ").replace('<', "&lt;").replace('@', "@\u{200b}")
}

pub fn render_markdown(r: &Report) -> String {
    let mut m = String::new();
    let day = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    let _ = writeln!(m, "# ward safety report\n\n{} to {}\n", day(r.from), day(r.to));
    let _ =
        writeln!(m, "| admitted | discharged | escalated | stalled (re-triggered) | escalated by the sweep | cost |");
    let _ = writeln!(m, "|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        m,
        "| {} | {} | {} | {} | {} | {} |\n",
        r.admitted,
        r.discharged,
        r.escalated,
        r.stalled_patients,
        r.sweep_escalations,
        cost_cell(r.total_cost, r.costs_known, r.costs_unknown)
    );
    render_outcomes(&mut m, r);
    let _ = writeln!(m, "## Stages\n");
    let _ = writeln!(m, "| stage | entered | runs | median stay | p90 stay | send-backs | re-triggers | cost |");
    let _ = writeln!(m, "|---|---:|---:|---:|---:|---|---:|---:|");
    for s in &r.stages {
        let sb = if s.send_backs.is_empty() {
            "0".to_string()
        } else {
            s.send_backs.iter().map(|(o, n)| format!("{n} {o}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            s.name,
            s.entered,
            s.runs,
            opt_duration(s.median()),
            opt_duration(s.p90()),
            sb,
            s.sweeps,
            cost_cell(s.cost, s.costs_known, s.costs_unknown)
        );
    }
    let _ = writeln!(m, "\n## Flow\n");
    if r.flows.is_empty() {
        let _ = writeln!(m, "No stage recorded an outcome in this period.");
    } else {
        let _ = writeln!(m, "| from stage | to | outcomes |\n|---|---|---:|");
        for ((from, to), n) in &r.flows {
            let _ = writeln!(m, "| {from} | `{to}` | {n} |");
        }
    }
    let _ = writeln!(m, "\n## Costliest patients\n");
    if r.costs.is_empty() {
        let _ = match r.costs_unknown {
            0 => writeln!(m, "No COST notes in this period."),
            n => writeln!(
                m,
                "No run reported a cost: the {n} COST notes of this period say `unknown` (the agent's output \
                 carried no usage ward could read; see `departments.budget.usage`)."
            ),
        };
    } else {
        let _ = writeln!(m, "| patient | title | runs | cost |\n|---|---|---:|---:|");
        for c in r.costs.iter().take(10) {
            let _ = writeln!(m, "| #{} | {} | {} | ${:.2} |", c.issue, md_cell(&c.title), c.runs, c.cost);
        }
    }
    render_versions(&mut m, &r.versions);
    if !r.problems.is_empty() {
        let _ = writeln!(m, "\n## Problems\n");
        for p in &r.problems {
            let _ = writeln!(m, "- {}", md_cell(p));
        }
    }
    m
}

fn share(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{:.0}%", x * 100.0))
}

fn usd(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("${x:.2}"))
}

/// The outcome figures as table rows: (what, figure).
pub fn outcome_rows(o: &Outcomes) -> Vec<(String, String)> {
    let generated: usize = o.hospital_generated.values().sum();
    let by_source = o
        .hospital_generated
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ");
    let send_backs = o.send_backs.iter().map(|(g, n)| format!("{n} {g}")).collect::<Vec<_>>().join(", ");
    let a = &o.acceptance;
    let t = &o.time;
    vec![
        ("patients (admitted)".into(), o.patients.to_string()),
        (
            "filed by the hospital".into(),
            format!(
                "{generated} ({}){}",
                share(o.hospital_share),
                if by_source.is_empty() { String::new() } else { format!(": {by_source}") }
            ),
        ),
        ("pull requests merged".into(), o.merged.to_string()),
        (
            "send-backs".into(),
            format!(
                "{}{}",
                o.send_backs_total,
                if send_backs.is_empty() { String::new() } else { format!(" ({send_backs})") }
            ),
        ),
        (
            "escalations".into(),
            format!(
                "{} to an attending, {} to the chiefs, {} reached people",
                o.escalations_to_attending, o.escalations_to_chiefs, o.escalations_to_people
            ),
        ),
        ("cost per patient".into(), usd(o.cost_per_patient_usd)),
        ("cost per merged change".into(), usd(o.cost_per_merge_usd)),
        (
            format!("acceptance (not reverted within {} days)", a.days),
            format!(
                "{} ({} of {}; {} reverted, {} not settled yet)",
                share(a.rate),
                a.accepted,
                a.merged,
                a.reverted,
                a.unsettled
            ),
        ),
        ("merges no person touched".into(), format!("{} of {}", o.untouched_merges, o.merged)),
        (
            "time by state".into(),
            format!(
                "{} in stages (agents), {} waiting for people, {} waiting for the hospital",
                human_duration(t.agent_seconds),
                human_duration(t.waiting_for_people_seconds),
                human_duration(t.waiting_other_seconds)
            ),
        ),
    ]
}

fn render_outcomes(m: &mut String, r: &Report) {
    let _ = writeln!(m, "## Outcomes\n\n| outcome | figure |\n|---|---|");
    for (what, figure) in outcome_rows(&r.outcomes) {
        // ward's own figures (no issue text): escaped for the table, never cut.
        let _ = writeln!(m, "| {what} | {} |", figure.replace('|', "\\|"));
    }
    if r.outcome_periods.len() > 1 {
        let _ = writeln!(
            m,
            "\n| period | patients | merged | send-backs | escalated to chiefs | cost per patient | acceptance |"
        );
        let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|");
        for o in &r.outcome_periods {
            let _ = writeln!(
                m,
                "| {} to {} | {} | {} | {} | {} | {} | {} |",
                o.from.format("%Y-%m-%d %H:%M"),
                o.to.format("%Y-%m-%d %H:%M"),
                o.patients,
                o.merged,
                o.send_backs_total,
                o.escalations_to_chiefs,
                usd(o.cost_per_patient_usd),
                share(o.acceptance.rate)
            );
        }
    }
    if r.outcome_versions.len() > 1 {
        let _ = writeln!(
            m,
            "\n| pipeline version | patients | merged | send-backs | cost per merged change | acceptance |"
        );
        let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|");
        for (v, o) in &r.outcome_versions {
            let _ = writeln!(
                m,
                "| `{}` | {} | {} | {} | {} | {} |",
                md_cell(v),
                o.patients,
                o.merged,
                o.send_backs_total,
                usd(o.cost_per_merge_usd),
                share(o.acceptance.rate)
            );
        }
    }
    m.push('\n');
}

/// The corrective actions a period's outcomes call for: one sentence each,
/// from the figures alone (the research department looks deeper).
pub fn corrective_actions(r: &Report) -> Vec<String> {
    let o = &r.outcomes;
    let mut out = Vec::new();
    if o.acceptance.reverted > 0 {
        out.push(format!(
            "{} merged change(s) were reverted within {} days: admit their incidents (`ward:incident`) so the planner \
             writes the post-incident reviews, and act on which gate should have caught each.",
            o.acceptance.reverted, o.acceptance.days
        ));
    }
    if let Some((gate, n)) =
        o.send_backs.iter().max_by_key(|(g, n)| (**n, std::cmp::Reverse(g.as_str()))).filter(|(_, n)| **n >= 3)
    {
        out.push(format!(
            "`{gate}` sent work back {n} times: read its reasons in the charts and tighten the role or skill \
             upstream of it (a clearer plan template, a check the fellow runs first)."
        ));
    }
    if o.escalations_to_chiefs >= 2 {
        out.push(format!(
            "{} escalations reached the chiefs: where their decisions generalise, write precedents so the next \
             agent cites one instead of escalating.",
            o.escalations_to_chiefs
        ));
    }
    let t = &o.time;
    if t.waiting_for_people_seconds > t.agent_seconds && t.waiting_for_people_seconds > 0.0 {
        out.push(format!(
            "Patients waited {} for people against {} in stages: review and admission are the bottleneck; \
             consider more reviewers, or which waits a precedent could remove.",
            human_duration(t.waiting_for_people_seconds),
            human_duration(t.agent_seconds)
        ));
    }
    if r.stalled_patients > 0 {
        out.push(format!(
            "{} patient(s) stalled and were re-triggered by the charge nurse: look at the stages' time limits and \
             what the stalled runs were doing.",
            r.stalled_patients
        ));
    }
    out
}

/// The weekly process review: the report, then the corrective actions it
/// proposes (each a proposal a person admits or closes).
pub fn render_review(r: &Report, markdown: &str) -> String {
    let mut m = markdown.replacen("# ward safety report", "# ward weekly process review", 1);
    let _ = writeln!(m, "\n## Proposed corrective actions\n");
    let actions = corrective_actions(r);
    if actions.is_empty() {
        let _ = writeln!(m, "None: no figure of this period calls for one.");
    }
    for a in actions {
        let _ = writeln!(m, "- {a}");
    }
    let _ = writeln!(
        m,
        "\nThese are proposals: nothing runs on them. A person who agrees files or admits the work; the precedent \
         log stays the chiefs' to write."
    );
    m
}

/// The report by pipeline version: a prompt change that made things worse
/// stands beside the version before it.
fn render_versions(m: &mut String, versions: &[crate::governance::VersionStats]) {
    let _ = writeln!(m, "\n## By pipeline version\n");
    if versions.is_empty() {
        let _ = writeln!(m, "No run in this period.");
        return;
    }
    let _ = writeln!(m, "| version | first run | runs | outcomes | send-backs | re-triggers | cost |");
    let _ = writeln!(m, "|---|---|---:|---|---:|---:|---:|");
    for v in versions {
        let first = v.first_seen.map_or("-".to_string(), |t| t.format("%Y-%m-%d %H:%M").to_string());
        let outcomes = v.outcomes.iter().map(|(o, n)| format!("{n} {o}")).collect::<Vec<_>>().join(", ");
        let outcomes = if outcomes.is_empty() { "-".to_string() } else { md_cell(&outcomes) };
        let _ = writeln!(
            m,
            "| `{}` | {first} | {} | {outcomes} | {} | {} | ${:.2} |",
            v.version, v.runs, v.send_backs, v.stalls, v.cost
        );
    }
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

const PALETTE: &[&str] = &["#1d76db", "#5319e7", "#0e8a16", "#d93f0b", "#b60205", "#9a6700", "#006b75"];

/// Flow through stages: one box per stage, arcs for outcomes between them
/// (forward above, backward below), width by count.
pub fn svg_flow(r: &Report) -> String {
    let n = r.stages.len().max(1);
    let (bw, bh, gap) = (110.0, 44.0, 40.0);
    let width = n as f64 * (bw + gap) + gap + 120.0;
    let height = 360.0;
    let y = height / 2.0 - bh / 2.0;
    let x_of = |i: usize| gap + i as f64 * (bw + gap);
    let max = r.flows.values().copied().max().unwrap_or(1) as f64;
    let mut s = format!(
        r##"<svg id="chart-flow" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img"><title>Flow through stages</title>"##
    );
    let index = |name: &str| r.stages.iter().position(|st| st.name == name);
    let label_index = |label: &str| r.stages.iter().position(|st| st.label == label);
    for ((from, to), count) in &r.flows {
        let Some(i) = index(from) else { continue };
        let w = 1.5 + 10.0 * (*count as f64 / max);
        let (x1, colour) = (x_of(i) + bw / 2.0, PALETTE[i % PALETTE.len()]);
        match label_index(to) {
            Some(j) if j != i => {
                let x2 = x_of(j) + bw / 2.0;
                let forward = j > i;
                let (ys, lift) = if forward { (y, -1.0) } else { (y + bh, 1.0) };
                let h = 30.0 + 22.0 * (j as f64 - i as f64).abs();
                let (cx, cy) = ((x1 + x2) / 2.0, ys + lift * h);
                let _ = write!(
                    s,
                    r##"<path class="flow" d="M{x1:.1},{ys:.1} Q{cx:.1},{cy:.1} {x2:.1},{ys:.1}" fill="none" stroke="{colour}" stroke-opacity="0.6" stroke-width="{w:.1}"/><text x="{cx:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#333">{count}</text>"##,
                    ys + lift * h / 2.0 + if forward { -2.0 } else { 10.0 },
                );
            }
            _ => {
                // Out of the pipeline (a resting label): a short arrow down-right with the label.
                let (x2, y2) = (x1 + 25.0, y + bh + 70.0 + 14.0 * (i % 2) as f64);
                let _ = write!(
                    s,
                    r##"<path class="flow" d="M{x1:.1},{:.1} L{x2:.1},{y2:.1}" stroke="{colour}" stroke-opacity="0.6" stroke-width="{w:.1}"/><text x="{x2:.1}" y="{:.1}" font-size="10" fill="#333">{} ({count})</text>"##,
                    y + bh,
                    y2 + 12.0,
                    esc(to)
                );
            }
        }
    }
    for (i, st) in r.stages.iter().enumerate() {
        let x = x_of(i);
        let _ = write!(
            s,
            r##"<rect class="stage" x="{x:.1}" y="{y:.1}" width="{bw}" height="{bh}" rx="6" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#fff" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" font-size="10" fill="#fff" text-anchor="middle">{} entered</text>"##,
            PALETTE[i % PALETTE.len()],
            x + bw / 2.0,
            y + 18.0,
            esc(&st.name),
            x + bw / 2.0,
            y + 34.0,
            st.entered
        );
    }
    s.push_str("</svg>");
    s
}

/// Time in stage: a bar to the median and a lighter bar to p90 per stage.
pub fn svg_time(r: &Report) -> String {
    let row = 30.0;
    let (left, plot) = (120.0, 520.0);
    let height = 40.0 + row * r.stages.len() as f64;
    let width = left + plot + 120.0;
    let max = r.stages.iter().filter_map(StageStats::p90).fold(1.0_f64, f64::max);
    let mut s = format!(
        r##"<svg id="chart-time" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img"><title>Time in stage (median and p90)</title>"##
    );
    for (i, st) in r.stages.iter().enumerate() {
        let y = 20.0 + i as f64 * row;
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"##,
            left - 8.0,
            y + 15.0,
            esc(&st.name)
        );
        if let (Some(med), Some(p90)) = (st.median(), st.p90()) {
            let colour = PALETTE[i % PALETTE.len()];
            let _ = write!(
                s,
                r##"<rect class="p90" x="{left}" y="{y:.1}" width="{:.1}" height="20" fill="{colour}" fill-opacity="0.3"/><rect class="median" x="{left}" y="{y:.1}" width="{:.1}" height="20" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="11">{} / {}</text>"##,
                (p90 / max * plot).max(2.0),
                (med / max * plot).max(2.0),
                left + (p90 / max * plot).max(2.0) + 6.0,
                y + 15.0,
                human_duration(med),
                human_duration(p90)
            );
        } else {
            let _ = write!(
                s,
                r##"<text x="{left}" y="{:.1}" font-size="11" fill="#888">no finished stay</text>"##,
                y + 15.0
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// Time by state: one bar split into agents, people and the hospital.
pub fn svg_time_by_state(o: &Outcomes) -> String {
    let t = &o.time;
    let parts = [
        ("in stages (agents)", t.agent_seconds, "#1d76db"),
        ("waiting for people", t.waiting_for_people_seconds, "#d93f0b"),
        ("waiting for the hospital", t.waiting_other_seconds, "#9a6700"),
    ];
    let total: f64 = parts.iter().map(|p| p.1).sum();
    let (width, plot) = (640.0, 600.0);
    let mut s = format!(
        r##"<svg id="chart-state" width="{width:.0}" height="90" viewBox="0 0 {width:.0} 90" role="img"><title>Time by state</title>"##
    );
    if total <= 0.0 {
        s.push_str(r##"<text x="10" y="30" font-size="12" fill="#888">no time recorded</text></svg>"##);
        return s;
    }
    let mut x = 10.0;
    for (i, (name, secs, colour)) in parts.iter().enumerate() {
        let w = secs / total * plot;
        let _ = write!(
            s,
            r##"<rect class="state" x="{x:.1}" y="10" width="{w:.1}" height="24" fill="{colour}"><title>{name}: {}</title></rect><rect x="{:.1}" y="{:.1}" width="10" height="10" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="11">{name}: {}</text>"##,
            human_duration(*secs),
            10.0 + i as f64 * 210.0,
            50.0,
            24.0 + i as f64 * 210.0,
            59.0,
            human_duration(*secs)
        );
        x += w;
    }
    s.push_str("</svg>");
    s
}

/// The smallest of 1, 2, 4 or 10 times a power of ten that is at least
/// `v`, so that quarters of it are round figures.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 4.0, 10.0].into_iter().map(|m| m * power).find(|c| *c >= v * (1.0 - 1e-9)).unwrap_or(10.0 * power)
}

/// Decimals that print every multiple of `step` exactly (two at least).
fn tick_decimals(step: f64) -> usize {
    (2..=8)
        .find(|d| {
            let scaled = step * 10f64.powi(*d as i32);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(8)
}

/// Cost per patient: one bar per patient, costliest first (at most 30).
pub fn svg_cost(r: &Report) -> String {
    let shown: Vec<&PatientCost> = r.costs.iter().take(30).collect();
    let (left, bottom, plot_h) = (60.0, 50.0, 220.0);
    let bar = 24.0;
    let width = left + 20.0 + bar * 1.4 * shown.len().max(1) as f64;
    let height = plot_h + bottom + 20.0;
    let max = nice_ceiling(shown.iter().map(|c| c.cost).fold(0.0_f64, f64::max));
    let decimals = tick_decimals(max / 4.0);
    let mut s = format!(
        r##"<svg id="chart-cost" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img"><title>Cost per patient (USD)</title>"##
    );
    let base = 20.0 + plot_h;
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="20" x2="{left}" y2="{base}" stroke="#333"/><line x1="{left}" y1="{base}" x2="{:.1}" y2="{base}" stroke="#333"/>"##,
        width - 10.0
    );
    // No axis figures without costs: `$0.00 $0.00 $0.01` says nothing.
    for k in (0..=4).filter(|_| !shown.is_empty()) {
        let v = max * k as f64 / 4.0;
        let yy = base - plot_h * k as f64 / 4.0;
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">${v:.decimals$}</text>"##,
            left - 4.0,
            yy + 3.0
        );
    }
    if shown.is_empty() {
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" fill="#888">no cost recorded</text>"##,
            left + 10.0,
            base - 10.0
        );
    }
    for (i, c) in shown.iter().enumerate() {
        let h = (c.cost / max * plot_h).max(1.0);
        let x = left + 10.0 + i as f64 * bar * 1.4;
        let _ = write!(
            s,
            r##"<rect class="cost" x="{x:.1}" y="{:.1}" width="{bar}" height="{h:.1}" fill="#d93f0b"><title>#{} {}: ${:.2}</title></rect><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">#{}</text>"##,
            base - h,
            c.issue,
            esc(&c.title),
            c.cost,
            x + bar / 2.0,
            base + 14.0,
            c.issue
        );
    }
    s.push_str("</svg>");
    s
}

/// One self-contained page: inline CSS and SVG, no script, no external resource.
pub fn render_html(r: &Report) -> String {
    let day = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ward safety report</title>\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <style>body{{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fff}}\
         table{{border-collapse:collapse;margin:8px 0 20px}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         td:first-child,th:first-child,td.text{{text-align:left}}h2{{margin-top:28px}}svg{{display:block;margin:8px 0}}</style></head><body>\
         <h1>ward safety report</h1><p>{} to {}</p>",
        day(r.from),
        day(r.to)
    );
    let _ = write!(
        h,
        "<table><tr><th>admitted</th><th>discharged</th><th>escalated</th><th>stalled</th><th>escalated by the sweep</th><th>cost</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr></table>",
        r.admitted,
        r.discharged,
        r.escalated,
        r.stalled_patients,
        r.sweep_escalations,
        esc(&cost_cell(r.total_cost, r.costs_known, r.costs_unknown))
    );
    h.push_str("<h2>Outcomes</h2><table><tr><th>outcome</th><th>figure</th></tr>");
    for (what, figure) in outcome_rows(&r.outcomes) {
        let _ = write!(h, "<tr><td>{}</td><td class=\"text\">{}</td></tr>", esc(&what), esc(&figure));
    }
    h.push_str("</table>");
    let _ = write!(h, "<h2>Time by state</h2>{}", svg_time_by_state(&r.outcomes));
    let _ = write!(h, "<h2>Flow through stages</h2>{}", svg_flow(r));
    let _ = write!(h, "<h2>Time in stage</h2><p>Median (solid) and p90 (light) of finished stays.</p>{}", svg_time(r));
    let _ = write!(h, "<h2>Cost per patient</h2>{}", svg_cost(r));
    let _ = write!(
        h,
        "<h2>Stages</h2><table><tr><th>stage</th><th>entered</th><th>runs</th><th>median</th><th>p90</th><th>send-backs</th><th>re-triggers</th><th>cost</th></tr>"
    );
    for s in &r.stages {
        let sb: usize = s.send_backs.values().sum();
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            s.entered,
            s.runs,
            opt_duration(s.median()),
            opt_duration(s.p90()),
            sb,
            s.sweeps,
            esc(&cost_cell(s.cost, s.costs_known, s.costs_unknown))
        );
    }
    h.push_str(
        "</table><h2>Costliest patients</h2><table><tr><th>patient</th><th>title</th><th>runs</th><th>cost</th></tr>",
    );
    for c in r.costs.iter().take(10) {
        let _ = write!(
            h,
            "<tr><td>#{}</td><td class=\"text\">{}</td><td>{}</td><td>${:.2}</td></tr>",
            c.issue,
            esc(&c.title),
            c.runs,
            c.cost
        );
    }
    h.push_str("</table>");
    for p in &r.problems {
        let _ = write!(h, "<p>Problem: {}</p>", esc(p));
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_config() -> Config {
        Config::parse(include_str!("../.github/ward.yml"), std::path::Path::new(crate::config::CONFIG_PATH), None)
            .expect("shipped config is valid")
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(5.0));
        assert_eq!(percentile(&v, 90.0), Some(9.0));
        assert_eq!(percentile(&[7.0], 90.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn unknown_costs_read_unknown_and_the_cost_axis_has_distinct_round_ticks() {
        assert_eq!(cost_cell(0.0, 0, 3), "unknown");
        assert_eq!(cost_cell(0.0, 0, 0), "$0.00");
        assert_eq!(cost_cell(1.5, 2, 1), "≥ $1.50");
        let mut r = Report {
            from: Utc::now(),
            to: Utc::now(),
            admitted: 1,
            discharged: 0,
            escalated: 0,
            stages: Vec::new(),
            flows: BTreeMap::new(),
            stalled_patients: 0,
            sweep_escalations: 0,
            costs: Vec::new(),
            total_cost: 0.0,
            costs_known: 0,
            costs_unknown: 4,
            versions: Vec::new(),
            outcomes: crate::outcomes::compute(&test_config(), &[], &[], 14, Utc::now(), Utc::now()),
            outcome_periods: Vec::new(),
            outcome_versions: BTreeMap::new(),
            problems: Vec::new(),
        };
        let md = render_markdown(&r);
        assert!(md.contains("| 1 | 0 | 0 | 0 | 0 | unknown |"), "{md}");
        assert!(md.contains("the 4 COST notes of this period say `unknown`") && !md.contains("$0.00"), "{md}");
        assert!(!svg_cost(&r).contains('$'), "no axis figures without costs");
        r.costs = vec![PatientCost { issue: 1, title: "t".into(), cost: 0.013, runs: 2 }];
        let svg = svg_cost(&r);
        let ticks: Vec<&str> = svg.match_indices('$').map(|(i, _)| svg[i..].split('<').next().unwrap()).collect();
        assert_eq!(ticks[..5], ["$0.000", "$0.005", "$0.010", "$0.015", "$0.020"], "{svg}");
        assert_eq!((nice_ceiling(3.2), nice_ceiling(0.7), nice_ceiling(10.0)), (4.0, 1.0, 10.0));
    }

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(human_duration(42.0), "42s");
        assert_eq!(human_duration(125.0), "2m");
        assert_eq!(human_duration(3.0 * 3600.0 + 300.0), "3h 05m");
        assert_eq!(human_duration(90_000.0), "1d 1h");
    }

    #[test]
    fn issue_text_cannot_break_out_of_the_page_or_the_table() {
        assert_eq!(esc("<script>x</script>"), "&lt;script&gt;x&lt;/script&gt;");
        assert_eq!(md_cell("a|b\n@team <b>"), "a\\|b @\u{200b}team &lt;b>");
    }
}
