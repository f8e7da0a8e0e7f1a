//! Judge: the hospital's rules over a sealed visit. What the agent spent,
//! whether its run and notes meet the contract, the rules on what it wrote,
//! the discharge audit (taken once, before the nurse) over her outcome, and
//! whether its claims are grounded.
//! The judgment says what record does; nothing here writes.

use std::collections::HashSet;

use anyhow::Context;

use super::patient::Patient;
use super::prepare::Prepared;
use super::visit::{AgentText, Visit};
use crate::agent::AgentEnd;
use crate::agent::report::{ModelError, ModelTrouble};
use crate::budget::{Breach, Stopped};
use crate::chart::{AgentNotes, Note};
use crate::groundedness as g;
use crate::hospital::Hospital;
use crate::rules::changes::Protection;
use crate::rules::discharge_audit::{self, AuditFacts, Checklist};
use crate::rules::{self, Refusal, Route, RunInput};
use crate::workspace::bundle::Intake;

/// What the rules decided about a visit.
pub enum Judgment {
    /// A spending limit was reached; the patient goes to the chiefs.
    OverBudget {
        breach: Breach,
        when: Stopped,
    },
    /// The run does not count: a REFUSAL, the label stays, exit 1.
    Invalid {
        reason: String,
    },
    /// The model service failed the run (429, 5xx, 529 until the agent
    /// gave up): a REFUSAL that blames the service, the label stays, exit
    /// 1; the run is not counted against the patient's stage visits.
    ServiceDown {
        reason: String,
    },
    /// A rule turned the run back: a REFUSAL, and the rule's route.
    TurnedBack(Refusal),
    /// The notes' claims do not hold: the stage runs once more, then the
    /// patient goes to the chiefs.
    Ungrounded {
        note: Note,
        score: g::Score,
        decision: g::Decision,
    },
    Accepted(Box<Accepted>),
}

/// How a run broke the contract every run meets: the reason of an invalid
/// run, as its REFUSAL says it.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// The model refused the agent's request ([`model_refused`]'s sentence).
    #[error("{0}")]
    ModelRefused(String),
    #[error(
        "the agent was stopped at its time limit of {} (stage `{stage}`); its whole process group was killed",
        duration(.limit)
    )]
    TimedOut { limit: std::time::Duration, stage: String },
    #[error(
        "the agent exited with code {code}{}; last lines of its stderr (each cut to {} characters):\n\n```\n{}\n```",
        it_said(.gave_up.as_deref()),
        crate::untrusted::EXCERPT_LINE_CHARS,
        crate::untrusted::excerpt(.stderr_tail)
    )]
    Exited { code: i32, gave_up: Option<String>, stderr_tail: String },
    #[error("the agent was killed by signal {0}")]
    Signalled(i32),
    #[error(
        "the agent's notes are {0} bytes, over the limit of {max} bytes; write shorter notes",
        max = super::visit::MAX_NOTES_BYTES
    )]
    NotesTooLarge(u64),
    #[error("the agent wrote no notes to $WARD_NOTES")]
    NoNotes,
    #[error("$WARD_NOTES {0}")]
    Unreadable(crate::chart::SentinelError),
    /// What is wrong with the notes, one sentence each (their line first
    /// where there is one).
    #[error("{}", .0.join("; "))]
    Notes(Vec<String>),
}

fn duration(limit: &std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(*limit)
}

/// What the agent said as it gave up, after its exit code.
fn it_said(gave_up: Option<&str>) -> String {
    gave_up.map(|why| format!("; it said: `{}`", crate::untrusted::excerpt(why).replace('`', "'"))).unwrap_or_default()
}

/// A valid run: what goes into the chart and where the patient goes.
pub struct Accepted {
    pub notes: AgentNotes,
    /// The outcome that decides the label (the audit's, in the auditing stage).
    pub outcome: String,
    /// Why the engine's audit overruled the nurse's outcome.
    pub overruled: Option<String>,
    pub groundedness: Option<Note>,
    /// The audit taken before the nurse ran, in the auditing stage.
    pub audit: Option<(AuditFacts, Checklist)>,
    /// Protected paths the treatment changed as its approved plan listed:
    /// the patient's merge waits for a person.
    pub protected: Vec<String>,
}

pub async fn judge(
    h: &Hospital,
    patient: &Patient<'_>,
    prepared: &Prepared,
    visit: &Visit,
    committed: Option<&Intake>,
) -> anyhow::Result<Judgment> {
    let budget = &h.config.departments.budget;
    if let Some(breach) = &visit.stopped {
        return Ok(Judgment::OverBudget { breach: breach.clone(), when: Stopped::DuringRun });
    }
    if let Some(breach) =
        crate::budget::check_run(budget, std::time::Duration::MAX, std::time::Duration::ZERO, visit.usage.as_ref())
    {
        return Ok(Judgment::OverBudget { breach, when: Stopped::AfterRun });
    }
    if let Some(ModelTrouble::Unavailable { error, errors }) = &visit.model {
        return Ok(Judgment::ServiceDown { reason: service_down(error, *errors, visit) });
    }
    // Only a treating stage changes code: ward's own reading of the worktree.
    if let Err(refusal) = rules::changes::read_only(patient.stage, &visit.changed) {
        return Ok(Judgment::Invalid { reason: refusal.to_string() });
    }
    let (notes, outcome) = match contract(h, patient, visit) {
        Ok(pair) => pair,
        Err(broken) => return Ok(Judgment::Invalid { reason: broken.to_string() }),
    };
    let depth = crate::family::depth(&*h.forge, &patient.issue).await?;
    let input = RunInput {
        config: &h.config,
        stage: patient.stage,
        run: &patient.run,
        chart: &prepared.chart,
        notes: &notes,
        precedents: &h.precedents,
        depth,
    };
    match rules::validate(&input) {
        Ok(()) => {}
        Err(refusal) if refusal.route == Route::Stay => return Ok(Judgment::Invalid { reason: refusal.to_string() }),
        Err(refusal) => return Ok(Judgment::TurnedBack(refusal)),
    }
    // A change too large to review goes back to diagnosis to split the plan.
    if let Err(refusal) = rules::changes::small_enough(&h.config, patient.stage, visit.diff_lines) {
        return Ok(Judgment::TurnedBack(refusal));
    }
    // A treatment that changed the rules the agents are judged by goes to
    // the chiefs, unless the approved plan listed the paths.
    let protected = match rules::changes::protected(&h.config, patient.stage, &prepared.chart, &visit.changed) {
        Ok(Protection::Clear) => Vec::new(),
        Ok(Protection::NeedsApproval(paths)) => paths,
        Err(refusal) => return Ok(Judgment::TurnedBack(refusal)),
    };
    // The audit is taken once, before the nurse. A commit pushed while she
    // worked is not merged unaudited all the same: the merge names the
    // audited head, and GitHub refuses it when the head moved (the patient
    // then waits, and the next audit reads the new head).
    let audit = prepared.audit.clone();
    // The nurse adds judgment but cannot pass a failing audit.
    let (outcome, overruled) = match &audit {
        Some((_, checklist)) => {
            let (o, why) = discharge_audit::final_outcome(checklist, &outcome);
            (o.to_string(), why)
        }
        None => (outcome, None),
    };
    let groundedness = match grounded(h, patient, prepared, &notes, committed)? {
        Grounded::Off => None,
        Grounded::Yes(note) => Some(note),
        Grounded::No { note, score, decision } => return Ok(Judgment::Ungrounded { note, score, decision }),
    };
    Ok(Judgment::Accepted(Box::new(Accepted { notes, outcome, overruled, groundedness, audit, protected })))
}

/// The contract every run meets, whatever the role: it exited 0 within its
/// limit, and wrote a readable notes file with only its role's kinds, the
/// kinds the stage and the outcome require, and exactly one outcome.
fn contract(h: &Hospital, patient: &Patient<'_>, visit: &Visit) -> Result<(AgentNotes, String), Broken> {
    let stage = patient.stage;
    if let Some(ModelTrouble::Refused { error }) = &visit.model {
        return Err(Broken::ModelRefused(model_refused(h, error, visit)));
    }
    match visit.end {
        AgentEnd::Exited(0) => {}
        AgentEnd::TimedOut => {
            return Err(Broken::TimedOut { limit: stage.config.time_limit, stage: stage.name.to_string() });
        }
        AgentEnd::Exited(code) => {
            let (gave_up, stderr_tail) = (visit.gave_up.clone(), visit.stderr_tail.clone());
            return Err(Broken::Exited { code, gave_up, stderr_tail });
        }
        AgentEnd::Signalled(sig) => return Err(Broken::Signalled(sig)),
    }
    let text = match &visit.notes {
        AgentText::Text(t) if !t.trim().is_empty() => t,
        AgentText::TooLarge(n) => return Err(Broken::NotesTooLarge(*n)),
        _ => return Err(Broken::NoNotes),
    };
    let notes = h.sentinels.parse_agent_notes(text).map_err(Broken::Unreadable)?;
    within_limits(patient, &notes)?;
    validate_notes(&h.config, stage, &notes).map(|outcome| (notes, outcome))
}

/// A run ward stopped because the model refused it: what the model said,
/// and what to change.
fn model_refused(h: &Hospital, error: &ModelError, visit: &Visit) -> String {
    let secret = h.config.agent.applied.as_ref().map_or("the agent's API key", |a| a.preset.secret);
    let remedy = match error.status {
        Some(401) => format!("check the key the agent is given (`{secret}`, a repository secret) and `agent.base_url`"),
        Some(403) => {
            format!("the key (`{secret}`) may not use this model or endpoint: check its permissions and the model")
        }
        _ => format!("check the key the agent is given (`{secret}`), the model it asks for and `agent.base_url`"),
    };
    format!(
        "the model API refused the agent's request ({}{}), which asking again cannot change, so ward stopped \
         the agent after {:.1}s instead of waiting out its retries; {remedy}",
        crate::untrusted::excerpt(&error.describe()).replace('`', "'"),
        visit
            .gave_up
            .as_deref()
            .map(|g| format!("; the agent said: {}", crate::untrusted::excerpt(g)))
            .unwrap_or_default(),
        visit.agent_ms as f64 / 1000.0
    )
}

/// A run the model service failed: what it last answered, and that the
/// run can simply be started again.
fn service_down(error: &ModelError, errors: u32, visit: &Visit) -> String {
    format!(
        "the model service was unavailable: the agent's last of {errors} failed requests got {} and it {} after \
         {:.0}s; this is the service's failure, not the patient's. Nothing was judged; the stage runs again when \
         it is re-triggered (the charge nurse's sweep, or `/ward retry`)",
        crate::untrusted::excerpt(&error.describe()).replace('`', "'"),
        if visit.end == AgentEnd::TimedOut { "was stopped at its time limit" } else { "gave up" },
        visit.agent_ms as f64 / 1000.0
    )
}

/// The size limits: each note, and the chart it would grow (the engine's
/// reserve kept free, so the REFUSAL of an oversized run still fits).
fn within_limits(patient: &Patient<'_>, notes: &AgentNotes) -> Result<(), Broken> {
    use crate::untrusted::{ENGINE_RESERVE_BYTES, MAX_CHART_BYTES, MAX_NOTE_BYTES};
    let mut problems = Vec::new();
    for n in notes.notes.iter().filter(|n| n.body.len() > MAX_NOTE_BYTES) {
        problems.push(format!(
            "line {}: the `{}` note is {} bytes, over the limit of {MAX_NOTE_BYTES} bytes per note; write a shorter note",
            n.line,
            n.kind,
            n.body.len()
        ));
    }
    let chart = patient.stored.as_ref().map_or(0, |c| c.text.len());
    // Each note also gets two sentinel lines of about 120 bytes.
    let grown = chart + notes.notes.iter().map(|n| n.body.len() + 240).sum::<usize>();
    let room = MAX_CHART_BYTES - ENGINE_RESERVE_BYTES;
    if problems.is_empty() && grown > room {
        problems.push(format!(
            "the chart of {} would grow to about {grown} bytes, over the {room} bytes its notes may take \
             (the limit is {MAX_CHART_BYTES}); write shorter notes, or a chief closes this chart and opens a new issue",
            patient.issue.number
        ));
    }
    if problems.is_empty() { Ok(()) } else { Err(Broken::Notes(problems)) }
}

/// The notes contract: only the role's kinds, every required kind, one outcome.
pub fn validate_notes(
    config: &crate::config::Config,
    stage: crate::config::Stage<'_>,
    notes: &AgentNotes,
) -> Result<String, Broken> {
    let role = &stage.config.role;
    let writes = config.role(role).map(|r| r.writes.as_slice()).unwrap_or_default();
    let mut problems = Vec::new();
    for n in notes.notes.iter().filter(|n| !writes.contains(&n.kind)) {
        problems.push(format!(
            "line {}: role `{role}` may not write `{}` (it may write: {})",
            n.line,
            n.kind,
            list(writes)
        ));
    }
    let outcome = match notes.outcomes.as_slice() {
        [] => {
            let all: Vec<String> = stage.config.outcomes.keys().map(|o| format!("<!-- WARD:OUTCOME {o} -->")).collect();
            problems.push(format!("no outcome declared; end with one of: {}", list(&all)));
            None
        }
        [(o, line)] if !stage.config.outcomes.contains_key(o) => {
            let all: Vec<&String> = stage.config.outcomes.keys().collect();
            problems.push(format!(
                "line {line}: outcome `{o}` is not an outcome of stage `{}` ({})",
                stage.name,
                list(&all)
            ));
            None
        }
        [(o, _)] => Some(o.clone()),
        many => {
            let lines: Vec<&usize> = many.iter().map(|(_, l)| l).collect();
            problems.push(format!("{} outcomes declared (lines {}); declare exactly one", many.len(), list(&lines)));
            None
        }
    };
    let for_outcome = outcome.as_ref().and_then(|o| stage.config.requires_for.get(o));
    for kind in stage.config.requires.iter().chain(for_outcome.into_iter().flatten()) {
        if notes.kinds().any(|k| k == *kind) {
            continue;
        }
        problems.push(match outcome.as_deref().filter(|_| for_outcome.is_some_and(|k| k.contains(kind))) {
            Some(o) => format!("outcome `{o}` requires a `{kind}` note, and there is none"),
            None => format!("stage `{}` requires a `{kind}` note, and there is none", stage.name),
        });
    }
    match (problems.is_empty(), outcome) {
        (true, Some(o)) => Ok(o),
        _ => Err(Broken::Notes(problems)),
    }
}

enum Grounded {
    Off,
    Yes(Note),
    No { note: Note, score: g::Score, decision: g::Decision },
}

/// The notes' checkable claims against the worktree and the precedent log.
/// In the record job the tree is the visit's head, read from the objects
/// its bundle brought (nothing of it is checked out).
fn grounded(
    h: &Hospital,
    patient: &Patient<'_>,
    prepared: &Prepared,
    notes: &AgentNotes,
    committed: Option<&Intake>,
) -> anyhow::Result<Grounded> {
    let threshold = h.config.departments.groundedness.threshold;
    if threshold <= 0.0 {
        return Ok(Grounded::Off);
    }
    let ids: HashSet<String> = h.precedents.entries.iter().map(|p| p.id.clone()).collect();
    let after_treatment = notes.kinds().any(|k| k.after_treatment());
    let tree = match committed {
        Some(intake) => g::Tree::commit(&intake.bare, &intake.head),
        None => g::Tree::worktree(&prepared.workdir),
    };
    let tree = tree.with_context(|| {
        format!("could not check the notes of issue {}, stage `{}`", patient.issue.number, patient.stage.name)
    })?;
    let facts = g::Facts { tree: &tree, precedents: &ids, after_treatment };
    let score = g::score_notes(notes.notes.iter().map(|n| (n.kind.as_str(), n.body.as_str())), &facts);
    let stage = patient.stage.name;
    let note = g::groundedness_note(&score, threshold, stage, &patient.run, h.now());
    let earlier = g::earlier_invalid(&prepared.chart, stage, g::visit_start(&prepared.chart));
    Ok(match g::decide(score.value(), threshold, earlier) {
        g::Decision::Accept => Grounded::Yes(note),
        decision => Grounded::No { note, score, decision },
    })
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
}
