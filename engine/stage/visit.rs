//! The sealed visit: what an agent's run produced, as a plain value written
//! to the run's folder and read back. The treat step seals it; the judge
//! and record steps consume it and nothing else of the agent's run. The
//! folder is the seam between running an agent and recording its result:
//! one process does both locally, and on GitHub the folder can travel as an
//! artifact from a job that runs the agent to a job that records it.
//!
//! ```text
//! <run folder>/visit.json        the facts below (written by ward)
//!              notes.md          what the agent wrote to $WARD_NOTES
//!              agent.stdout.log  its standard output (usage is read from it)
//!              agent.stderr.log  its standard error (a failed run quotes the end)
//!              prompt.md         the prompt it was given
//! ```
//!
//! Everything in the folder except `visit.json` was written by the agent,
//! and the agent could have rewritten `visit.json` too: [`Visit::open`]
//! bounds what it reads and checks what it can.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::AgentEnd;
use crate::agent::report::ModelTrouble;
use crate::budget::{Breach, Usage};
use crate::forge::IssueNumber;

pub const VISIT_FILE: &str = "visit.json";
pub const NOTES_FILE: &str = "notes.md";
pub const STDOUT_FILE: &str = "agent.stdout.log";
pub const STDERR_FILE: &str = "agent.stderr.log";
pub const PROMPT_FILE: &str = "prompt.md";
/// The whole chart as the run started, for the agent to read (the prompt
/// carries only the notes its role needs).
pub const CHART_FILE: &str = "chart.md";

/// The most of an agent's notes that is read back; a longer file is an
/// invalid run, never a truncated one.
pub const MAX_NOTES_BYTES: u64 = 512 * 1024;
/// How much of the end of the agent's stderr a refusal quotes.
const STDERR_TAIL_BYTES: u64 = 4 * 1024;
const MAX_VISIT_BYTES: u64 = 64 * 1024;
/// How much of the end of the agent's stdout a sealed visit carries (its
/// usage is read from it).
pub const STDOUT_TAIL_BYTES: u64 = 1024 * 1024;

/// What one agent run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Visit {
    pub issue: IssueNumber,
    pub stage: String,
    pub run: String,
    /// The label the patient carried when the agent started.
    pub label_in: String,
    /// How the agent ended.
    pub end: AgentEnd,
    pub agent_ms: u64,
    /// A budget limit the engine stopped the agent at.
    pub stopped: Option<Breach>,
    /// What it spent, as its output says.
    pub usage: Option<Usage>,
    /// The commit of what it left in its worktree. Always `None` when the
    /// visit is sealed: leftovers are committed only when a treating stage's
    /// run is accepted (stage/record.rs), after the visit was judged.
    pub commit: Option<String>,
    /// The files the run changed against the commit it started at (what
    /// the agent committed, staged or left), as ward saw them after the
    /// agent ended. A stage that doesn't treat must leave this empty.
    #[serde(default)]
    pub changed: Vec<String>,
    /// The commit the run started at (the visit job's checkout); a claim
    /// the record job accepts only when it is what it expects.
    #[serde(default)]
    pub start: Option<String>,
    /// How many lines a treating run changed (added plus removed) against
    /// the commit it started at, as ward counted them; what the stage's
    /// `max_diff_lines` is checked against. 0 for the other stages.
    #[serde(default)]
    pub diff_lines: u64,
    /// What the model service did to the run, from the agent's own report.
    #[serde(default)]
    pub model: Option<ModelTrouble>,
    /// The reason the agent gave when it gave up, in its own output.
    #[serde(default)]
    pub gave_up: Option<String>,
    /// Its session logs kept in the run's folder (`transcript/...`).
    #[serde(default)]
    pub transcript: Vec<String>,
    /// The connections the network wall refused (engine/agent/gate.rs).
    #[serde(default)]
    pub blocked: Vec<BlockedConnection>,
    /// The agent ran on the host's network (`agent.network: open`).
    #[serde(default)]
    pub unwalled: bool,
    /// What it wrote to `$WARD_NOTES`, read back from the folder.
    #[serde(skip)]
    pub notes: AgentText,
    /// The end of its standard error, read back from the folder.
    #[serde(skip)]
    pub stderr_tail: String,
}

/// A host and port the agent tried to reach and the wall refused, and how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockedConnection {
    pub host: String,
    pub port: u16,
    pub count: u32,
}

/// The agent's notes file, as found.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum AgentText {
    #[default]
    Missing,
    TooLarge(u64),
    Text(String),
}

#[derive(Debug, thiserror::Error)]
pub enum VisitError {
    #[error("could not write the sealed visit to {path}: {cause}")]
    Write { path: PathBuf, cause: std::io::Error },
    #[error("the sealed visit {path} cannot be read: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

impl Visit {
    /// Writes `visit.json` into the run's folder (the agent's own files are
    /// already there).
    pub fn seal(&self, dir: &Path) -> Result<(), VisitError> {
        let path = dir.join(VISIT_FILE);
        let json = serde_json::to_vec_pretty(self).expect("a visit serialises");
        std::fs::write(&path, json).map_err(|cause| VisitError::Write { path, cause })
    }

    /// Writes the visit as the visit job hands it on (`out` emptied first:
    /// anything a process of the agent's put there is gone): `visit.json`,
    /// the notes as read (an oversized file cut one byte past the limit, so
    /// it stays oversized), the end of stdout and of stderr, all from
    /// what ward read once, after the agent and its leftovers were killed.
    pub fn write_out(&self, from: &Path, out: &Path) -> Result<(), VisitError> {
        let write = |path: PathBuf, bytes: &[u8]| {
            std::fs::write(&path, bytes).map_err(|cause| VisitError::Write { path, cause })
        };
        let notes: Option<Vec<u8>> = match &self.notes {
            AgentText::Text(t) => Some(t.as_bytes().to_vec()),
            AgentText::TooLarge(_) => match read_bounded(&from.join(NOTES_FILE), MAX_NOTES_BYTES) {
                Bounded::Read(b) => Some(b),
                Bounded::TooLarge(_) | Bounded::Missing(_) => Some(vec![b'x'; MAX_NOTES_BYTES as usize + 1]),
            },
            AgentText::Missing => None,
        };
        let stdout = tail(&from.join(STDOUT_FILE), STDOUT_TAIL_BYTES);
        if out.exists() {
            std::fs::remove_dir_all(out).map_err(|cause| VisitError::Write { path: out.into(), cause })?;
        }
        std::fs::create_dir_all(out).map_err(|cause| VisitError::Write { path: out.into(), cause })?;
        self.seal(out)?;
        if let Some(notes) = notes {
            write(out.join(NOTES_FILE), &notes)?;
        }
        write(out.join(STDOUT_FILE), stdout.as_bytes())?;
        write(out.join(STDERR_FILE), self.stderr_tail.as_bytes())?;
        self.copy_transcript(from, out)
    }

    /// The session logs the visit names, copied with the visit (bounded in
    /// all; a name that is not a plain relative path under `transcript/`,
    /// or not a plain file, is skipped).
    fn copy_transcript(&self, from: &Path, out: &Path) -> Result<(), VisitError> {
        use std::io::Read;
        let mut room = crate::agent::home::MAX_TRANSCRIPT_BYTES;
        for rel in &self.transcript {
            let path = Path::new(rel);
            let plain = path.components().all(|c| matches!(c, std::path::Component::Normal(_)));
            if !plain || !path.starts_with(crate::agent::home::TRANSCRIPT_DIR) || room == 0 {
                continue;
            }
            let source = from.join(path);
            if !source.symlink_metadata().is_ok_and(|m| m.is_file()) {
                continue;
            }
            let to = out.join(path);
            let write_err = |cause| VisitError::Write { path: to.clone(), cause };
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(write_err)?;
            }
            let file = std::fs::File::open(&source).map_err(write_err)?;
            let mut dest = std::fs::File::create(&to).map_err(write_err)?;
            room -= std::io::copy(&mut file.take(room), &mut dest).map_err(write_err)?;
        }
        Ok(())
    }

    /// The end of the agent's stdout in `dir`, bounded.
    pub fn stdout_tail(dir: &Path) -> String {
        tail(&dir.join(STDOUT_FILE), STDOUT_TAIL_BYTES)
    }

    /// Reads a sealed visit back, with bounds on everything it reads.
    pub fn open(dir: &Path) -> Result<Visit, VisitError> {
        let path = dir.join(VISIT_FILE);
        let unreadable = |reason: String| VisitError::Unreadable { path: path.clone(), reason };
        let bytes = match read_bounded(&path, MAX_VISIT_BYTES) {
            Bounded::Read(b) => b,
            Bounded::TooLarge(n) => return Err(unreadable(format!("it is {n} bytes, over {MAX_VISIT_BYTES}"))),
            Bounded::Missing(e) => return Err(unreadable(e)),
        };
        let mut visit: Visit = serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
        visit.notes = match read_bounded(&dir.join(NOTES_FILE), MAX_NOTES_BYTES) {
            Bounded::Read(b) => AgentText::Text(String::from_utf8_lossy(&b).into_owned()),
            Bounded::TooLarge(n) => AgentText::TooLarge(n),
            Bounded::Missing(_) => AgentText::Missing,
        };
        visit.stderr_tail = tail(&dir.join(STDERR_FILE), STDERR_TAIL_BYTES);
        Ok(visit)
    }
}

enum Bounded {
    Read(Vec<u8>),
    TooLarge(u64),
    Missing(String),
}

/// Reads at most `max` bytes; a longer file is reported, not truncated.
fn read_bounded(path: &Path, max: u64) -> Bounded {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return Bounded::Missing(e.to_string()),
    };
    let mut bytes = Vec::new();
    match file.take(max + 1).read_to_end(&mut bytes) {
        Ok(n) if n as u64 > max => Bounded::TooLarge(std::fs::metadata(path).map_or(n as u64, |m| m.len())),
        Ok(_) => Bounded::Read(bytes),
        Err(e) => Bounded::Missing(e.to_string()),
    }
}

/// The last `max` bytes of a file, from a line start, lossily decoded.
fn tail(path: &Path, max: u64) -> String {
    use std::io::{Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else { return String::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    if file.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.take(max).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    match (len > max, text.find('\n')) {
        (true, Some(i)) => text[i + 1..].to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visit() -> Visit {
        Visit {
            issue: IssueNumber(4),
            stage: "diagnose".into(),
            run: "r1".into(),
            label_in: "ward:diagnose".into(),
            end: AgentEnd::Exited(0),
            agent_ms: 1200,
            stopped: None,
            usage: Some(Usage { cost_usd: Some(0.25), input_tokens: 10, ..Usage::default() }),
            commit: Some("0123abc".into()),
            changed: vec!["src/lib.rs".into()],
            start: None,
            diff_lines: 3,
            model: Some(ModelTrouble::Unavailable {
                error: crate::agent::report::ModelError {
                    status: Some(529),
                    message: "overloaded".into(),
                    inferred: false,
                },
                errors: 3,
            }),
            gave_up: Some("overloaded".into()),
            transcript: vec!["transcript/.claude/projects/-w/s.jsonl".into(), "../escape".into()],
            blocked: vec![],
            unwalled: false,
            notes: AgentText::Missing,
            stderr_tail: String::new(),
        }
    }

    #[test]
    fn a_sealed_visit_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(NOTES_FILE), "<!-- WARD:OUTCOME plan-posted -->\n").unwrap();
        std::fs::write(dir.path().join(STDERR_FILE), "warming up\nall done\n").unwrap();
        let sealed = visit();
        sealed.seal(dir.path()).unwrap();
        let opened = Visit::open(dir.path()).unwrap();
        assert_eq!(opened.notes, AgentText::Text("<!-- WARD:OUTCOME plan-posted -->\n".into()));
        assert_eq!(opened.stderr_tail, "warming up\nall done\n");
        assert_eq!(Visit { notes: AgentText::Missing, stderr_tail: String::new(), ..opened }, sealed);
    }

    /// The visit job hands on the session log with the visit, and nothing a
    /// name outside `transcript/` could point at.
    #[test]
    fn the_transcript_travels_with_the_visit_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("run");
        let log = from.join("transcript/.claude/projects/-w/s.jsonl");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, "{\"type\":\"user\"}\n").unwrap();
        std::fs::write(dir.path().join("escape"), "outside").unwrap();
        let v = visit();
        v.seal(&from).unwrap();
        let out = dir.path().join("out");
        v.write_out(&from, &out).unwrap();
        let copied = std::fs::read_to_string(out.join("transcript/.claude/projects/-w/s.jsonl")).unwrap();
        assert_eq!(copied, "{\"type\":\"user\"}\n");
        assert!(!out.join("escape").exists(), "only what the visit names under transcript/ is copied");
        let opened = Visit::open(&out).unwrap();
        assert_eq!(opened.model, v.model, "the model's trouble is part of the sealed visit");
    }

    #[test]
    fn what_the_agent_could_bloat_or_break_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        visit().seal(dir.path()).unwrap();
        let huge = "x".repeat(MAX_NOTES_BYTES as usize + 1);
        std::fs::write(dir.path().join(NOTES_FILE), &huge).unwrap();
        std::fs::write(dir.path().join(STDERR_FILE), format!("{}\nlast line\n", "y".repeat(10_000))).unwrap();
        let opened = Visit::open(dir.path()).unwrap();
        assert_eq!(opened.notes, AgentText::TooLarge(huge.len() as u64));
        assert_eq!(opened.stderr_tail, "last line\n");
        std::fs::write(dir.path().join(VISIT_FILE), "{\"issue\": 4, \"extra\": true}").unwrap();
        assert!(matches!(Visit::open(dir.path()), Err(VisitError::Unreadable { .. })));
    }
}
