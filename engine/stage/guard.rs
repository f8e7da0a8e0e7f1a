//! The guard: whether this run may go ahead, decided by the guards in one
//! order ([`Gate::guards`]) before anything is prepared. The first two
//! guards only find that there is nothing to do, and write nothing. From
//! the lockdown on, a guard that stops the run writes a note saying why
//! and what to do, and moves the patient where its rule says (through
//! [`crate::transfer`]). The lockdown comes before everything that could
//! move a patient or start an agent, on both paths: a stage run, and a
//! chief's approval. What gets past them is typed ([`Run`]): the trigger's
//! ask narrowed, guard by guard, to what can be admitted.

use std::fs::File;
use std::time::Instant;

use anyhow::Context;
use tracing::warn;

use super::patient::Patient;
use super::result::{StageRequest, StageResult};
use crate::chart::{Note, NoteKind, NoteMeta, Seen};
use crate::config::Stage;
use crate::forge::{Issue, IssueNumber, IssueState, StoredChart};
use crate::hospital::{Hospital, new_run_id, try_lock_issue};
use crate::rules::{self, GuardInput, Refusal, Route};
use crate::transfer::{Move, transfer};

/// What the guard decided.
pub enum Admitted<'h> {
    /// The run ends here.
    Stop(StageResult),
    /// A chief applied the approved label: audit again and merge.
    Approval(Patient<'h>),
    /// Run the stage.
    Stage(Patient<'h>),
    /// A patient in GitHub's merge queue: look whether it was merged or
    /// let go (`Some(reason)` when a dequeued event woke it).
    Settle(Patient<'h>, Option<String>),
}

/// What the trigger asks of this issue, read from its labels alone.
enum Asked<'h> {
    /// Something the guards may admit.
    Run(Run<'h>),
    /// A patient waiting at the pending label was woken: it looks whether
    /// anything changed, then runs the auditing stage.
    Wake { stage: Stage<'h>, label_in: String },
    /// Nothing to do: the label moved on, or the patient rests.
    Nothing(String),
    /// The labels contradict what a patient can be: a person must fix them.
    Problem(Refusal),
}

/// What the guards admit: only these get past them.
enum Run<'h> {
    Stage {
        stage: Stage<'h>,
        label_in: String,
    },
    Approval {
        stage: Stage<'h>,
    },
    /// A patient resting in GitHub's merge queue: the auditing stage's to settle.
    Settle {
        stage: Stage<'h>,
        label_in: String,
    },
}

/// What the guards that find nothing to do (open, current) leave: a run,
/// or labels a person must fix (refused after the lockdown, which comes
/// first).
enum Placed<'h> {
    Run(Run<'h>),
    Problem(Refusal),
}

impl Placed<'_> {
    /// The stage name on the notes of a run stopped here.
    fn stage_name(&self) -> String {
        match self {
            Placed::Run(Run::Stage { stage, .. } | Run::Approval { stage } | Run::Settle { stage, .. }) => {
                stage.name.into()
            }
            Placed::Problem(_) => NO_STAGE.into(),
        }
    }
}

/// The state the guards work on.
struct Gate<'h> {
    h: &'h Hospital,
    issue: Issue,
    run: String,
    lock: Option<File>,
    /// The chart as read with the issue, parsed when a guard needs it.
    stored: Option<StoredChart>,
    chart: Option<Vec<Note>>,
    lockdown: Option<Issue>,
    wake: Option<crate::event::Wake>,
    /// `false` in the visit job: a guard that would write stops the visit
    /// instead, and the record job, which runs the guards again, writes.
    writes: bool,
}

/// Runs the guards in order ([`Gate::guards`]).
pub async fn admit<'h>(h: &'h Hospital, req: &StageRequest) -> anyhow::Result<Admitted<'h>> {
    let started = Instant::now();
    let number = req.issue;
    // The lock before the read: a delivery that waited for another run of
    // this patient must see the issue as that run left it (a duplicate
    // delivery then finds the label gone), never as it was before.
    let lock = try_lock_issue(&h.root, number).await?;
    // One read for every guard: the issue, the lockdown, the chart.
    let read = h
        .forge
        .patient(number, crate::lockdown::LOCKDOWN_LABEL)
        .await
        .with_context(|| format!("could not read issue {number}, its chart and the lockdown"))?;
    let asked = asked(h, req, &read.issue);
    let found_comment = read.patient_comment;
    // A trigger that names the admission label (a person's label, a
    // re-triggered admission) makes sure ward's labels exist (the record
    // job's: the visit job's token writes nothing).
    let writes = req.phase.writes();
    if let Asked::Run(Run::Stage { label_in, .. }) = &asked
        && writes
        && *label_in == h.config.admission
        && req.label.as_ref() == Some(label_in)
    {
        admission_labels(h, read.repository_labels.as_deref()).await?;
    }
    let run = req.run_id.clone().unwrap_or_else(|| new_run_id(h.now()));
    let mut gate = Gate {
        h,
        issue: read.issue,
        run,
        lock,
        stored: read.chart,
        chart: None,
        lockdown: read.lockdown,
        wake: req.wake.clone(),
        writes,
    };
    let (admitted, lock) = match gate.guards(asked).await? {
        Ok(admitted) => admitted,
        Err(stop) => return Ok(Admitted::Stop(gate.unwritten(stop))),
    };
    // The visit job runs no approval: it is the record job's (no agent).
    if !writes && matches!(admitted, Run::Approval { .. }) {
        let reason = format!("a chief's approval of {number} runs no agent; the record job audits and merges");
        return Ok(Admitted::Stop(StageResult::Deferred { issue: number, reason }));
    }
    if !writes && matches!(admitted, Run::Settle { .. }) {
        let reason =
            format!("{number} in GitHub's merge queue needs no agent; the record job looks at its pull request");
        return Ok(Admitted::Stop(StageResult::Deferred { issue: number, reason }));
    }
    let chart = gate.take_chart()?;
    let (stage, label_in) = match &admitted {
        Run::Stage { stage, label_in } | Run::Settle { stage, label_in } => (*stage, label_in.clone()),
        Run::Approval { stage } => (*stage, h.config.discharge.approved_label.clone()),
    };
    let folder = h.run_folder(number, &gate.run);
    let comment = found_comment.or_else(|| crate::chart::control::comment_id(&chart));
    let patient = Patient {
        comment,
        issue: gate.issue,
        stage,
        label_in,
        folder,
        chart,
        stored: gate.stored,
        started,
        run: gate.run,
        _lock: lock,
    };
    Ok(match admitted {
        Run::Approval { .. } => Admitted::Approval(patient),
        Run::Settle { .. } => Admitted::Settle(patient, req.wake.as_ref().and_then(|w| w.dequeued.clone())),
        Run::Stage { .. } => Admitted::Stage(patient),
    })
}

impl<'h> Gate<'h> {
    /// The guards, in the order they run: the first two only find that
    /// there is nothing to do, and write nothing; from the lockdown on, a
    /// guard that stops the run writes why. What passes them all is the
    /// run, with the issue's lock; anything else stops here.
    async fn guards(&mut self, asked: Asked<'h>) -> anyhow::Result<Result<(Run<'h>, File), StageResult>> {
        let number = self.issue.number;
        let no_op = |reason: String| Ok(Err(StageResult::NoOp { issue: number, reason }));
        // 1. Open: a closed issue is no patient.
        if self.issue.state == IssueState::Closed {
            return no_op(format!("issue {number} is closed"));
        }
        // 2. Current: the label the trigger saw is still on, and starts a stage.
        let placed = match self.current(asked).await? {
            Ok(placed) => placed,
            Err(stop) => return Ok(Err(stop)),
        };
        // 3. Lockdown: while a lockdown is open, nothing moves.
        if let Some(stop) = self.lockdown(&placed).await? {
            return Ok(Err(stop));
        }
        // 4. One place: the patient is in exactly one place.
        let run = match placed {
            Placed::Run(run) => run,
            Placed::Problem(refusal) => return Ok(Err(self.refuse(NO_STAGE.into(), &refusal).await?)),
        };
        // 5. One run per patient at a time.
        let Some(lock) = self.lock.take() else {
            return no_op(format!("another run is already working on issue {number}"));
        };
        if let Run::Stage { stage, .. } = &run {
            // 6. The hospital's rules before an agent (plan gate, dependencies).
            if let Some(stop) = self.rules(*stage).await? {
                return Ok(Err(stop));
            }
            // 7. Budget left for this patient.
            if let Some(stop) = self.budget(*stage).await? {
                return Ok(Err(stop));
            }
        }
        Ok(Ok((run, lock)))
    }

    /// The visit job writes nothing: a guard's refusal there stops the
    /// visit, and the record job, running the guards again, writes why.
    fn unwritten(&self, stop: StageResult) -> StageResult {
        match stop {
            StageResult::Refused { reason, .. } if !self.writes => StageResult::Deferred {
                issue: self.issue.number,
                reason: format!("no agent runs: {reason}; the record job writes why"),
            },
            other => other,
        }
    }

    /// Nothing to do unless the trigger asks for something; a woken patient
    /// first looks whether anything the audit reads changed.
    async fn current(&mut self, asked: Asked<'h>) -> anyhow::Result<Result<Placed<'h>, StageResult>> {
        let (h, number) = (self.h, self.issue.number);
        match asked {
            Asked::Run(run) => Ok(Ok(Placed::Run(run))),
            Asked::Problem(refusal) => Ok(Ok(Placed::Problem(refusal))),
            Asked::Nothing(reason) => Ok(Err(StageResult::NoOp { issue: number, reason })),
            Asked::Wake { stage, label_in } => {
                if let Some(wake) = self.wake.clone() {
                    let (chart, _) = self.chart()?;
                    if let Some(why) = super::wake::nothing_new(h, chart, &wake).await? {
                        let reason = format!("{number} waits at `{label_in}` and nothing new came: {why}");
                        return Ok(Err(StageResult::NoOp { issue: number, reason }));
                    }
                }
                Ok(Ok(Placed::Run(Run::Stage { stage, label_in })))
            }
        }
    }

    /// Infection control: a LOCKDOWN note and nothing else.
    async fn lockdown(&mut self, placed: &Placed<'_>) -> anyhow::Result<Option<StageResult>> {
        let h = self.h;
        let Some(lockdown) = self.lockdown.clone().map(crate::lockdown::lockdown_of) else { return Ok(None) };
        let stage = placed.stage_name();
        let note = crate::lockdown::lockdown_note(&lockdown, &stage, &self.run, h.now());
        if self.writes {
            transfer(&*h.forge, &h.config, &self.issue, self.seen(), vec![note], Move::Stay).await?;
        }
        Ok(Some(StageResult::Refused {
            issue: self.issue.number,
            stage,
            reason: lockdown.to_string(),
            to: None,
            locked: true,
        }))
    }

    /// The hospital's rules before an agent: a REFUSAL and the rule's route.
    async fn rules(&mut self, stage: Stage<'_>) -> anyhow::Result<Option<StageResult>> {
        let h = self.h;
        let dependencies = crate::family::dependencies(&*h.forge, &h.config, &h.sentinels, &self.issue).await?;
        let (chart, _) = self.chart()?;
        let input = GuardInput { config: &h.config, stage, chart, dependencies: &dependencies };
        match rules::guard(&input) {
            Ok(()) => Ok(None),
            Err(refusal) => self.refuse(stage.name.into(), &refusal).await.map(Some),
        }
    }

    /// Over the patient's limits: the chiefs get it with an ESCALATION.
    async fn budget(&mut self, stage: Stage<'_>) -> anyhow::Result<Option<StageResult>> {
        let h = self.h;
        let budget = &h.config.departments.budget;
        let (chart, _) = self.chart()?;
        let spend = crate::budget::patient_spend(chart, &budget.send_back_set(&h.config));
        let Some(breach) = crate::budget::check_patient(budget, &spend) else { return Ok(None) };
        let notes = crate::budget::over_budget_notes(
            &h.config,
            stage.name,
            &self.run,
            &breach,
            None,
            crate::budget::Stopped::BeforeStart,
            h.now(),
        );
        let chief = h.config.chief_label().to_string();
        if self.writes {
            transfer(&*h.forge, &h.config, &self.issue, self.seen(), notes, Move::To(chief.clone())).await?;
        }
        Ok(Some(StageResult::Refused {
            issue: self.issue.number,
            stage: stage.name.into(),
            reason: breach.to_string(),
            to: Some(chief),
            locked: false,
        }))
    }

    /// The chart read with the issue, parsed once by the guards that need it.
    fn chart(&mut self) -> anyhow::Result<(&[Note], &Option<StoredChart>)> {
        let chart = match self.chart {
            Some(ref chart) => chart,
            None => self.chart.insert(parse_chart(self.h, self.issue.number, self.stored.as_ref())?),
        };
        Ok((chart, &self.stored))
    }

    /// The parsed chart, for the patient the guards admitted.
    fn take_chart(&mut self) -> anyhow::Result<Vec<Note>> {
        match self.chart.take() {
            Some(chart) => Ok(chart),
            None => parse_chart(self.h, self.issue.number, self.stored.as_ref()),
        }
    }

    fn seen(&self) -> Seen {
        Seen::Read(self.stored.clone())
    }

    /// A REFUSAL note, and the patient goes where the rule says.
    async fn refuse(&mut self, stage: String, refusal: &Refusal) -> anyhow::Result<StageResult> {
        let h = self.h;
        warn!(rule = refusal.rule, reason = %refusal.reason, "refused");
        let meta = NoteMeta::engine(self.run.clone(), stage.clone(), h.now());
        let note = Note { kind: NoteKind::Refusal, meta, body: refusal.note_body() };
        let to = Move::from(&refusal.route);
        if !self.writes {
            return Ok(StageResult::Refused {
                issue: self.issue.number,
                stage,
                reason: refusal.to_string(),
                to: None,
                locked: false,
            });
        }
        let seen = self.seen();
        let moved = transfer(&*h.forge, &h.config, &self.issue, seen, vec![note], to.clone()).await?;
        let to = (to != Move::Stay).then_some(moved.at).flatten();
        Ok(StageResult::Refused { issue: self.issue.number, stage, reason: refusal.to_string(), to, locked: false })
    }
}

/// The stage name on notes of a run that found no stage to run.
const NO_STAGE: &str = "none";

/// What the trigger asks, from the issue's labels alone (no I/O).
fn asked<'h>(h: &'h Hospital, req: &StageRequest, issue: &Issue) -> Asked<'h> {
    let config = &h.config;
    let number = issue.number;
    let approved = &config.discharge.approved_label;
    // Human approval mode: a chief's approval label is its own path.
    let by_label = issue.labels.contains(approved) && req.label.as_ref().is_none_or(|l| l == approved);
    if by_label || req.approver.is_some() {
        return match config.audit_stage() {
            Some(stage) => Asked::Run(Run::Approval { stage }),
            None => Asked::Problem(Refusal::new(
                "approval",
                format!("`{approved}` is on {number}, but no stage of .github/ward.yml audits discharge."),
                "Give one stage `mode: discharge` (see `ward config check`), then apply the label again.",
                Route::Stay,
            )),
        };
    }
    if let Some(label) = &req.label
        && !issue.labels.contains(label)
    {
        return Asked::Nothing(format!("issue {number} no longer carries `{label}`; another run already handled it"));
    }
    let places = config.places(&issue.labels);
    let label_in = match places.as_slice() {
        [] => {
            return Asked::Nothing(format!(
                "issue {number} carries no ward label, so it is not a patient; apply `{}` to admit it",
                config.admission
            ));
        }
        [one] => one.to_string(),
        many => {
            return Asked::Problem(Refusal::new(
                "one-place",
                format!(
                    "{number} carries {} ward labels ({}); a patient is in one place at a time, so no stage ran.",
                    many.len(),
                    many.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
                ),
                "Remove every ward label but the one where the patient is; the charge nurse's sweep repairs it \
                 too when the chart says which is right.",
                Route::Stay,
            ));
        }
    };
    // A patient in GitHub's merge queue is the auditing stage's to settle,
    // whatever woke it.
    if label_in == config.merge_queue_label()
        && h.forge.offers_merge_queue()
        && let Some(stage) = config.audit_stage()
    {
        return Asked::Run(Run::Settle { stage, label_in });
    }
    if req.wake.as_ref().is_some_and(|w| w.event == "pull_request") {
        return Asked::Nothing(format!(
            "issue {number} is at `{label_in}`, not in GitHub's merge queue at `{}`: its pull request's closing \
             or dequeueing wakes only a patient there",
            config.merge_queue_label()
        ));
    }
    // A patient waiting for CI or a review is the auditing stage's, when
    // something woke it (an event, the sweep, a person's dispatch).
    if label_in == config.discharge.pending_label
        && let Some(stage) = config.audit_stage()
    {
        return Asked::Wake { stage, label_in };
    }
    if req.wake.is_some() {
        return Asked::Nothing(format!(
            "issue {number} is at `{label_in}`, not waiting at `{}`: a review or CI result wakes only a waiting \
             patient",
            config.discharge.pending_label
        ));
    }
    match config.stage_by_label(&label_in) {
        Some(stage) => Asked::Run(Run::Stage { stage, label_in }),
        None => Asked::Nothing(format!("issue {number} rests at `{label_in}`; no stage starts there")),
    }
}

fn parse_chart(h: &Hospital, number: IssueNumber, stored: Option<&StoredChart>) -> anyhow::Result<Vec<Note>> {
    match stored {
        Some(c) => h.sentinels.parse_chart(&c.text).with_context(|| {
            format!("the chart of issue {number} is not readable; fix or move it, nothing was changed")
        }),
        None => Ok(Vec::new()),
    }
}

/// On admission, ward's missing labels are created (once, with colours and
/// descriptions), knowing the repository's labels from the patient's read
/// where it gave them (else listed first).
async fn admission_labels(h: &Hospital, existing: Option<&[String]>) -> anyhow::Result<()> {
    let specs = h.config.label_specs();
    let created = match existing {
        Some(names) => h.forge.create_missing_labels(&specs, names).await,
        None => h.forge.ensure_labels(&specs).await,
    };
    created.with_context(|| format!("could not create ward's labels in {}", h.forge.describe()))
}
