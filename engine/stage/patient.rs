//! The patient admitted to a run ([`Patient`]): what the guard read, the
//! run's identity, and the patient's comment as its moves write it.

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use super::result::Transition;
use crate::chart::{ENGINE_ROLE, Note, NoteKind, NoteMeta};
use crate::config::Stage;
use crate::forge::{Issue, StoredChart};
use crate::hospital::Hospital;
use crate::patient_comment::Tell;
use crate::transfer::Moved;

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
    /// The issue's run lock, held as long as the patient is.
    pub(super) _lock: File,
}

impl Patient<'_> {
    /// The patient's comment as this run writes it: with a move
    /// ([`crate::transfer::transfer_telling`]), or after the run.
    pub fn tell(&self, h: &Hospital) -> Tell {
        let meta = NoteMeta::engine(self.run.clone(), self.stage.name, h.now());
        Tell { number: self.issue.number, known: self.comment, meta }
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
    pub fn moved_by_engine(&self, outcome: &str, to: String, moved: &Moved) -> Transition {
        let total = self.started.elapsed();
        Transition {
            issue: self.issue.number,
            stage: self.stage.name.into(),
            role: ENGINE_ROLE.into(),
            run: self.run.clone(),
            outcome: outcome.into(),
            from: self.label_in.clone(),
            to,
            dispatched: moved.dispatched,
            told: moved.told,
            total_ms: total.as_millis(),
            agent_ms: 0,
            engine_us: total.as_micros(),
            artifacts: self.folder.clone(),
        }
    }
}
