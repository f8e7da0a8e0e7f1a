//! The patient admitted to a run ([`Patient`]): what the guard read, the
//! run's identity, and how its moves write the patient's comment.

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use super::result::Transition;
use crate::chart::{ENGINE_ROLE, Note, NoteKind, NoteMeta, Seen};
use crate::config::Stage;
use crate::forge::{Issue, StoredChart};
use crate::hospital::Hospital;
use crate::transfer::{Move, Tell, transfer_telling};

/// A patient admitted to a run: everything the guard read, and the lock
/// that keeps other runs off it until this one ends.
pub struct Patient<'h> {
    pub issue: Issue,
    pub stage: Stage<'h>,
    /// The label the run started on.
    pub label_in: String,
    pub run: String,
    /// The chart as the guard read it.
    pub chart: Vec<Note>,
    pub stored: Option<StoredChart>,
    /// This run's folder: the prompt, the agent's files, the sealed visit.
    pub folder: PathBuf,
    pub started: Instant,
    /// The patient's comment: as the read found it, else as the chart says.
    pub comment: Option<u64>,
    /// Whether a move of this run wrote the patient's comment already.
    pub told: std::sync::atomic::AtomicBool,
    /// The issue's run lock, held as long as the patient is.
    pub(super) _lock: File,
}

/// The patient's comment's text from the chart and the ward label after a move.
type Render<'a> = Box<dyn Fn(&[Note], Option<&str>) -> String + Send + Sync + 'a>;

/// What a move needs to write the patient's comment with its labels.
pub struct Telling<'a> {
    comment: Option<u64>,
    render: Render<'a>,
    charted: Box<dyn Fn(u64) -> Note + Send + Sync + 'a>,
    told: &'a std::sync::atomic::AtomicBool,
}

impl Telling<'_> {
    pub fn tell(&self) -> Tell<'_> {
        Tell { comment: self.comment, render: &*self.render, charted: &*self.charted, told: self.told }
    }
}

impl Patient<'_> {
    /// What this run's move needs to write the patient's comment.
    pub fn telling<'a>(&'a self, h: &'a Hospital) -> Telling<'a> {
        let links = crate::patient_comment::Links::from_env();
        let number = self.issue.number;
        let meta = NoteMeta::engine(self.run.clone(), self.stage.name, h.now());
        Telling {
            comment: self.comment,
            render: Box::new(move |notes, place| {
                crate::patient_comment::render(&h.config, number, place, notes, &links, None)
            }),
            charted: Box::new(move |id| crate::patient_comment::charted(meta.clone(), id)),
            told: &self.told,
        }
    }

    /// Moves this patient ([`transfer_telling`]), its comment written with
    /// the labels.
    pub async fn transfer(
        &self,
        h: &Hospital,
        seen: Seen,
        notes: Vec<Note>,
        to: Move,
    ) -> Result<crate::transfer::Moved, crate::transfer::TransferError> {
        let telling = self.telling(h);
        transfer_telling(&*h.forge, &h.config, &self.issue, seen, notes, to, Some(&telling.tell())).await
    }

    /// A note by the engine in this run.
    pub fn engine_note(&self, h: &Hospital, kind: NoteKind, body: String) -> Note {
        self.note(h, kind, ENGINE_ROLE, body)
    }

    pub fn note(&self, h: &Hospital, kind: NoteKind, role: &str, body: String) -> Note {
        let meta = NoteMeta { run: self.run.clone(), stage: self.stage.name.into(), role: role.into(), at: h.now() };
        Note { kind, meta, body }
    }

    /// The engine moved this patient in this run, without an agent (a wait,
    /// a queue, a send-back, an approval): the run's transition.
    pub fn moved_by_engine(&self, outcome: &str, to: String, dispatched: bool) -> Transition {
        let total = self.started.elapsed();
        Transition {
            issue: self.issue.number,
            stage: self.stage.name.into(),
            role: ENGINE_ROLE.into(),
            run: self.run.clone(),
            outcome: outcome.into(),
            from: self.label_in.clone(),
            to,
            dispatched,
            total_ms: total.as_millis(),
            agent_ms: 0,
            engine_us: total.as_micros(),
            artifacts: self.folder.clone(),
        }
    }
}
