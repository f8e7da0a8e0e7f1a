//! One way to move a patient. Every caller (a stage run, the sweep,
//! discharge and approval, a decomposition family, the budget, the
//! lockdown) moves patients through [`transfer`], which always does the
//! same three things in the same order:
//!
//! 1. the notes, appended to the chart with compare-and-swap: durable
//!    before any label moves;
//! 2. the labels, through one calculation ([`Config::labels_at`]): every
//!    ward label replaced by the destination, every other label kept; a
//!    patient sent to the discharged label is also closed;
//! 3. the next stage, through one rule ([`Config::dispatches`]).
//!
//! [`transfer_telling`] also writes the patient's comment ([`Tell`])
//! between 2 and 3: with the labels in one request where the forge can
//! (GitHub: one GraphQL mutation), so the comment costs no call of its
//! own; the move says whether it did ([`Moved::told`]).

use crate::chart::control::{self, ControlLine, Hold, held_at};
use crate::chart::{self, ChartStoreError, ENGINE_ROLE, Note, NoteKind, NoteMeta, Seen, Sentinels};
use crate::config::Config;
use crate::forge::{CommentWrite, Forge, ForgeError, Issue, IssueNumber, Relabel, RelabelError, StoredChart};
use crate::patient_comment::Tell;

/// Where a patient goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Move {
    /// To this ward label: a stage's label, or one where patients rest.
    To(String),
    /// The label stays and its stage runs again.
    Rerun,
    /// The label stays and nothing starts: a person or the charge nurse
    /// decides what happens next.
    Stay,
}

/// What a move did.
#[derive(Debug, Clone)]
pub struct Moved {
    /// The ward label the patient is at afterwards (its old one for a rerun
    /// or a stay).
    pub at: Option<String>,
    /// Whether the next stage was started explicitly.
    pub dispatched: bool,
    /// The chart as stored after the notes were written.
    pub chart: Option<StoredChart>,
    /// Whether the move wrote the patient's comment (only
    /// [`transfer_telling`] does; a comment that failed alone did not).
    pub told: bool,
}

impl From<&crate::rules::Route> for Move {
    fn from(route: &crate::rules::Route) -> Self {
        match route {
            crate::rules::Route::To(label) => Move::To(label.clone()),
            crate::rules::Route::Rerun => Move::Rerun,
            crate::rules::Route::Stay => Move::Stay,
        }
    }
}

/// What to do with a patient, decided on its chart as it stands.
pub struct Decision<T> {
    pub notes: Vec<Note>,
    pub to: Move,
    pub value: T,
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Chart(#[from] ChartStoreError),
    #[error("could not move {issue} to `{label}` after writing its notes: {cause}")]
    Labels { issue: IssueNumber, label: String, cause: ForgeError },
    #[error("could not close {issue} after labelling it `{label}`: {cause}")]
    Close { issue: IssueNumber, label: String, cause: ForgeError },
    #[error("could not start the stage of `{label}` for {issue}; the sweep will start it: {cause}")]
    Dispatch { issue: IssueNumber, label: String, cause: ForgeError },
}

/// Writes `notes` to the patient's chart, then moves it as `to` says.
/// `seen` is the chart as this run last read it (a stale copy costs a
/// re-read, never a lost note).
pub async fn transfer(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: Seen,
    notes: Vec<Note>,
    to: Move,
) -> Result<Moved, TransferError> {
    let decide = move |_: &[Note]| Decision { notes: notes.clone(), to: to.clone(), value: () };
    Ok(moving(forge, config, patient, seen, decide, None).await?.1)
}

/// [`transfer`] that also writes the patient's comment, with the labels:
/// its text from the chart as written and the label the patient is at
/// after the move.
pub async fn transfer_telling(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: Seen,
    notes: Vec<Note>,
    to: Move,
    tell: &Tell,
) -> Result<Moved, TransferError> {
    let decide = move |_: &[Note]| Decision { notes: notes.clone(), to: to.clone(), value: () };
    Ok(moving(forge, config, patient, seen, decide, Some(tell)).await?.1)
}

/// [`transfer`] where the notes and the move are decided on the chart as
/// it stands: after a compare-and-swap conflict, `decide` runs again on
/// the fresh chart, so a decision never rests on notes it did not see.
pub async fn transfer_with<T>(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: Seen,
    decide: impl FnMut(&[Note]) -> Decision<T>,
) -> Result<(T, Moved), TransferError> {
    moving(forge, config, patient, seen, decide, None).await
}

async fn moving<T>(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: Seen,
    mut decide: impl FnMut(&[Note]) -> Decision<T>,
    tell: Option<&Tell>,
) -> Result<(T, Moved), TransferError> {
    let number = patient.number;
    let sentinels = Sentinels::new(&config.sentinel_prefix);
    let current = config.ward_label(&patient.labels).map(str::to_string);
    let ((to, value), chart) = chart::modify(forge, &sentinels, number, seen, |notes| {
        let mut d = decide(notes);
        // A person held the patient (`/ward hold`) while this run worked:
        // its move waits at the hold label, decided on the chart as it is.
        if let Some((note, to)) = hold_over(config, notes, &d.notes, &d.to, current.as_deref()) {
            d.notes.push(note);
            d.to = to;
        }
        (d.notes, (d.to, d.value))
    })
    .await?;
    crate::fault::point("after-chart-write");
    let (at, fresh_label) = match &to {
        Move::To(label) => (Some(label.clone()), !patient.labels.contains(label)),
        Move::Rerun | Move::Stay => (current, false),
    };
    let relabel = match &to {
        Move::To(label) => Some(config.labels_at(&patient.labels, label)).filter(|l| !same_set(l, &patient.labels)),
        Move::Rerun | Move::Stay => None,
    };
    let labels_error = |cause| TransferError::Labels { issue: number, label: at.clone().unwrap_or_default(), cause };
    let (chart, told) = match (tell, &relabel) {
        (Some(tell), _) => {
            let relabel = relabel.as_deref().map(|to| Relabel { from: &patient.labels, to });
            comment_with_labels(forge, config, &sentinels, chart, relabel, at.as_deref(), tell)
                .await
                .map_err(labels_error)?
        }
        (None, Some(labels)) => {
            forge.set_labels(number, labels).await.map_err(labels_error)?;
            (chart, false)
        }
        (None, None) => (chart, false),
    };
    if let Move::To(label) = &to
        && *label == config.discharge.discharged_label
    {
        forge.close_issue(number).await.map_err(|cause| TransferError::Close {
            issue: number,
            label: label.clone(),
            cause,
        })?;
    }
    crate::fault::point("after-labels");
    // A patient moved to where it already is starts nothing; a rerun does.
    let dispatched = match (&to, &at) {
        (Move::To(label), _) if fresh_label => config.dispatches(label, true),
        (Move::Rerun, Some(label)) => config.dispatches(label, false),
        _ => false,
    };
    if dispatched && let Some(label) = &at {
        forge.dispatch_stage(number, label).await.map_err(|cause| TransferError::Dispatch {
            issue: number,
            label: label.clone(),
            cause,
        })?;
    }
    Ok((value, Moved { at, dispatched, chart, told }))
}

/// The labels (when they change) and the patient's comment, in one
/// request where the forge can; a comment created where the forge does not
/// find it by its marker is charted (a PATIENT_COMMENT note). Only a
/// failed label write fails the move: a comment that fails alone is a
/// warning. Returns the chart as stored after, and whether the comment
/// was written.
async fn comment_with_labels(
    forge: &dyn Forge,
    config: &Config,
    sentinels: &Sentinels,
    chart: Option<StoredChart>,
    relabel: Option<Relabel<'_>>,
    at: Option<&str>,
    tell: &Tell,
) -> Result<(Option<StoredChart>, bool), ForgeError> {
    let number = tell.number;
    let notes = match &chart {
        Some(c) => sentinels.parse_chart(&c.text).unwrap_or_default(),
        None => Vec::new(),
    };
    let text = tell.render(config, at, &notes, None);
    let write = match tell.known {
        Some(id) => CommentWrite::Edit { id, body: &text },
        None => CommentWrite::Create { body: &text },
    };
    let created = match forge.relabel_and_comment(number, relabel, write).await {
        Ok(created) => created,
        Err(RelabelError::Labels(cause)) => return Err(cause),
        Err(RelabelError::Comment(e)) => {
            tracing::warn!(issue = number.0, error = %e, "could not update the patient's comment (the move is made)");
            return Ok((chart, false));
        }
    };
    let Some(id) = created.filter(|_| !forge.finds_patient_comment()) else { return Ok((chart, true)) };
    match chart::append(forge, sentinels, number, Seen::Read(chart.clone()), &[tell.charted(id)]).await {
        Ok(stored) => Ok((stored, true)),
        Err(e) => {
            tracing::warn!(issue = number.0, error = %e, "could not chart the patient's comment's id");
            Ok((chart, true))
        }
    }
}

/// A held patient's stages do nothing: a move decided while it is held
/// lands at the hold label, with a COMMAND note saying where `/ward resume`
/// takes it. A person's own command (its notes carry a `Hold:` line)
/// passes, a stay moves nothing, and a discharge (the merge is done)
/// passes and releases the hold.
fn hold_over(config: &Config, chart: &[Note], new: &[Note], to: &Move, current: Option<&str>) -> Option<(Note, Move)> {
    let commanded = new.iter().any(|n| n.kind == NoteKind::Command && control::hold(&n.body).is_some());
    if commanded || held_at(chart.iter()).is_none() {
        return None;
    }
    let destination = match to {
        Move::To(label) => label.clone(),
        Move::Rerun => current?.to_string(),
        Move::Stay => return None,
    };
    let hold = &config.commands.hold_label;
    if destination == *hold {
        return None;
    }
    // The note is the run's: its meta is that of the run's last note, here
    // or (a stage writes its notes before it moves) on the chart.
    let last = new.last().or_else(|| chart.iter().rfind(|n| n.kind != NoteKind::Command))?;
    let meta = NoteMeta { role: ENGINE_ROLE.into(), ..last.meta.clone() };
    if destination == config.discharge.discharged_label {
        let body = format!("Discharged while held: the hold ends.\n{}", ControlLine::Hold(Hold::Released));
        return Some((Note { kind: NoteKind::Command, meta, body }, to.clone()));
    }
    let body = format!(
        "The patient is held: this run's move to `{destination}` waits at `{hold}` until `/ward resume`.\n\
         {}",
        ControlLine::Hold(Hold::At(&destination))
    );
    Some((Note { kind: NoteKind::Command, meta, body }, Move::To(hold.clone())))
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|l| b.contains(l))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::NewIssue;
    use crate::forge::local::LocalForge;

    fn note(kind: NoteKind, run: &str, body: &str) -> Note {
        let meta = NoteMeta::engine(run, "treat", chrono::Utc::now());
        Note { kind, meta, body: body.into() }
    }

    /// A hold that lands while a stage runs: the stage read the patient at
    /// `ward:treat`; a person held it (hold label, COMMAND note); the
    /// stage's move to code review then waits at the hold label, starts
    /// nothing, and the chart says where a resume takes it.
    #[tokio::test]
    async fn a_move_decided_while_the_patient_is_held_waits_at_the_hold_label() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::load(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
        let forge = LocalForge::new(dir.path(), &config.engine_account);
        let labels = vec!["ward:treat".to_string()];
        let read = forge.admit(NewIssue { title: "t".into(), body: String::new(), labels }).unwrap();
        let sentinels = Sentinels::new(&config.sentinel_prefix);
        let hold = note(NoteKind::Command, "cmd", "`rob` said `/ward hold`.\nHold: ward:treat");
        chart::append(&forge, &sentinels, read.number, Seen::NotRead, &[hold]).await.unwrap();
        forge.set_labels(read.number, &["ward:hold".to_string()]).await.unwrap();

        // As the record step does: the run's notes first, then the move alone.
        let outcome = note(NoteKind::Outcome, "stage", "treated");
        chart::append(&forge, &sentinels, read.number, Seen::NotRead, &[outcome]).await.unwrap();
        let to = Move::To("ward:code-review".into());
        let moved = transfer(&forge, &config, &read, Seen::NotRead, Vec::new(), to).await.unwrap();
        assert_eq!((moved.at.as_deref(), moved.dispatched), (Some("ward:hold"), false));
        assert_eq!(forge.issue(read.number).await.unwrap().labels, ["ward:hold"]);
        assert!(forge.dispatches().unwrap().is_empty(), "a held patient's stage starts nothing");
        let notes = sentinels.parse_chart(&moved.chart.unwrap().text).unwrap();
        assert_eq!(held_at(notes.iter()).as_deref(), Some("ward:code-review"), "resume goes where the run sent it");
        assert!(notes.iter().any(|n| n.kind == NoteKind::Outcome), "the run's notes are kept");
        let deferred = notes.iter().rfind(|n| n.kind == NoteKind::Command).unwrap();
        assert_eq!(deferred.meta.run, "stage", "the deferral is the stage run's note");

        // A person's command passes (its notes carry a `Hold:` line).
        let held = forge.issue(read.number).await.unwrap();
        let resume = note(NoteKind::Command, "cmd2", "`rob` said `/ward resume`.\nHold: none");
        let to = Move::To("ward:code-review".into());
        let moved = transfer(&forge, &config, &held, Seen::NotRead, vec![resume], to).await.unwrap();
        assert_eq!((moved.at.as_deref(), moved.dispatched), (Some("ward:code-review"), true));
        assert_eq!(forge.dispatches().unwrap().len(), 1);
    }
}
