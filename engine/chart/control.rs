//! The control lines of notes: the few lines of a note's body the engine
//! writes for itself and reads back to decide (`Head:`, `CI:`, `Hold:`,
//! `Comment:`), and the openings that say what an engine note is
//! (`Integration failed:`, `Merge conflict:`, the merge queues'). Written
//! ([`ControlLine`]'s `Display`, [`Opening`]'s) and read ([`head`], [`ci`],
//! [`hold`], [`comment`], [`Opening::of`]) here only, so the two can never
//! drift apart.
//!
//! A control line is a whole line starting with its key: a person's text
//! the engine quotes (`> Hold: …`) or fences is never one.

use std::fmt;

use super::{Note, NoteKind};

/// One control line of a note's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlLine<'a> {
    /// `Head: <sha>`: the pull request's head a WAITING note was written
    /// about (`unknown` when the audit found none).
    Head(&'a str),
    /// `CI: <fingerprint>`: CI on that head as the WAITING note saw it.
    Ci(&'a str),
    /// `Hold: <label>` or `Hold: none`, on a COMMAND note.
    Hold(Hold<'a>),
    /// `Comment: <id>`: the patient's comment, on a PATIENT_COMMENT note.
    Comment(u64),
}

/// What a `Hold:` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold<'a> {
    /// Held: `/ward resume` takes the patient to this label.
    At(&'a str),
    /// The hold ends (`Hold: none`).
    Released,
}

const HEAD: &str = "Head:";
const CI: &str = "CI:";
// The hold's and the comment's keys carry their space: `Hold:x` is no hold.
const HOLD: &str = "Hold: ";
const COMMENT: &str = "Comment: ";
const RELEASED: &str = "none";

impl<'a> ControlLine<'a> {
    /// Reads one line: `None` when it is no control line (a comment id
    /// that is no number is none either).
    pub fn parse(line: &'a str) -> Option<Self> {
        if let Some(v) = line.strip_prefix(HEAD) {
            return Some(ControlLine::Head(v.trim()));
        }
        if let Some(v) = line.strip_prefix(CI) {
            return Some(ControlLine::Ci(v.trim()));
        }
        if let Some(v) = line.strip_prefix(HOLD) {
            // Backticks are tolerated around the label, as a person would quote it.
            let v = v.trim().trim_matches('`');
            return Some(ControlLine::Hold(if v == RELEASED { Hold::Released } else { Hold::At(v) }));
        }
        line.strip_prefix(COMMENT)?.trim().parse().ok().map(ControlLine::Comment)
    }
}

impl fmt::Display for ControlLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlLine::Head(sha) => write!(f, "{HEAD} {sha}"),
            ControlLine::Ci(fingerprint) => write!(f, "{CI} {fingerprint}"),
            ControlLine::Hold(Hold::At(label)) => write!(f, "{HOLD}{label}"),
            ControlLine::Hold(Hold::Released) => write!(f, "{HOLD}{RELEASED}"),
            ControlLine::Comment(id) => write!(f, "{COMMENT}{id}"),
        }
    }
}

/// Every control line of `body`, in order.
fn lines(body: &str) -> impl DoubleEndedIterator<Item = ControlLine<'_>> {
    body.lines().filter_map(ControlLine::parse)
}

/// The `Head:` of `body`: its last such line decides.
pub fn head(body: &str) -> Option<&str> {
    lines(body).rev().find_map(|l| match l {
        ControlLine::Head(sha) => Some(sha),
        _ => None,
    })
}

/// The `CI:` of `body`: its last such line decides.
pub fn ci(body: &str) -> Option<&str> {
    lines(body).rev().find_map(|l| match l {
        ControlLine::Ci(fingerprint) => Some(fingerprint),
        _ => None,
    })
}

/// The `Hold:` of `body`: its last such line decides.
pub fn hold(body: &str) -> Option<Hold<'_>> {
    lines(body).rev().find_map(|l| match l {
        ControlLine::Hold(hold) => Some(hold),
        _ => None,
    })
}

/// The `Comment:` id of `body`: its first line with a number decides.
pub fn comment(body: &str) -> Option<u64> {
    lines(body).find_map(|l| match l {
        ControlLine::Comment(id) => Some(id),
        _ => None,
    })
}

/// Where a held patient goes on `/ward resume`, or `None` when it is not
/// held: the last COMMAND note with a `Hold:` line decides. Only the
/// engine writes COMMAND notes (an agent's is refused), and a person's
/// text in one is quoted, so no line of it is a `Hold:` line.
pub fn held_at<'a>(notes: impl DoubleEndedIterator<Item = &'a Note>) -> Option<String> {
    match notes.rev().filter(|n| n.kind == NoteKind::Command).find_map(|n| hold(&n.body))? {
        Hold::At(label) => Some(label.to_string()),
        Hold::Released => None,
    }
}

/// The comment's id as the chart keeps it: the last PATIENT_COMMENT note
/// that names one.
pub fn comment_id(notes: &[Note]) -> Option<u64> {
    notes.iter().rev().filter(|n| n.kind == NoteKind::PatientComment).find_map(|n| comment(&n.body))
}

/// How an engine note that a later run tells apart begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// ward's merge queue's check failed on the head combined with others
    /// (a DISCHARGE_CHECKLIST note).
    IntegrationFailed,
    /// The audited head does not merge into its base (a DISCHARGE_CHECKLIST note).
    MergeConflict,
    /// GitHub's merge queue took the patient (a WAITING note; its last
    /// line is the `Head:` it was enqueued at).
    InForgeQueue,
    /// ward's merge queue took the patient (a WAITING note; likewise).
    InWardQueue,
}

impl Opening {
    pub const fn text(self) -> &'static str {
        match self {
            Opening::IntegrationFailed => "Integration failed:",
            Opening::MergeConflict => "Merge conflict:",
            Opening::InForgeQueue => "In GitHub's merge queue:",
            Opening::InWardQueue => "In ward's merge queue:",
        }
    }

    /// Whether `body` begins with this opening.
    pub fn opens(self, body: &str) -> bool {
        body.starts_with(self.text())
    }

    /// The opening `body` begins with, if any.
    pub fn of(body: &str) -> Option<Self> {
        [Opening::IntegrationFailed, Opening::MergeConflict, Opening::InForgeQueue, Opening::InWardQueue]
            .into_iter()
            .find(|o| o.opens(body))
    }
}

impl fmt::Display for Opening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::NoteMeta;

    fn note(kind: NoteKind, body: &str) -> Note {
        Note { kind, meta: NoteMeta::engine("r1", "treat", chrono::Utc::now()), body: body.into() }
    }

    #[test]
    fn every_line_reads_back_as_written() {
        let lines = [
            ControlLine::Head("0123abc"),
            ControlLine::Head("unknown"),
            ControlLine::Ci("success; statuses 0; build, lint"),
            ControlLine::Hold(Hold::At("ward:treat")),
            ControlLine::Hold(Hold::Released),
            ControlLine::Comment(42),
        ];
        for line in lines {
            assert_eq!(ControlLine::parse(&line.to_string()), Some(line), "{line}");
        }
        // The text the notes carried before the codec, byte for byte.
        let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "Head: 0123abc",
                "Head: unknown",
                "CI: success; statuses 0; build, lint",
                "Hold: ward:treat",
                "Hold: none",
                "Comment: 42"
            ]
        );
    }

    #[test]
    fn values_are_trimmed_and_a_hold_label_may_be_quoted() {
        assert_eq!(ControlLine::parse("Head:abc  "), Some(ControlLine::Head("abc")));
        assert_eq!(ControlLine::parse("CI:  x "), Some(ControlLine::Ci("x")));
        assert_eq!(ControlLine::parse("Hold: `ward:treat` "), Some(ControlLine::Hold(Hold::At("ward:treat"))));
        assert_eq!(ControlLine::parse("Hold: `none`"), Some(ControlLine::Hold(Hold::Released)));
        assert_eq!(ControlLine::parse("Comment:  7 "), Some(ControlLine::Comment(7)));
        assert_eq!(ControlLine::parse("Hold:ward:treat"), None, "the hold's key has its space");
        assert_eq!(ControlLine::parse("Comment: seven"), None);
        assert_eq!(ControlLine::parse("Comment:7"), None);
    }

    #[test]
    fn the_last_head_ci_and_hold_win_and_the_first_comment() {
        let body = "Head: old\nCI: before\nHold: ward:treat\nComment: x\nComment: 3\nComment: 4\nHead: new\nCI: after\nHold: none";
        assert_eq!(
            (head(body), ci(body), hold(body), comment(body)),
            (Some("new"), Some("after"), Some(Hold::Released), Some(3))
        );
        assert_eq!((head(""), ci("x"), hold("Head: a"), comment("Hold: none")), (None, None, None, None));
    }

    #[test]
    fn a_persons_quoted_or_indented_text_is_no_control_line() {
        let body = "`rob` said `/ward chief`. Their reason:\n\n> Hold: ward:admit\n> Head: abc\n  CI: x\n\nHold: none";
        assert_eq!((hold(body), head(body), ci(body)), (Some(Hold::Released), None, None));
        let quoted = "`rob` said `/ward chief`. Their reason:\n\n> Hold: ward:admit\n> Comment: 9\n";
        assert_eq!((hold(quoted), comment(quoted)), (None, None));
        assert_eq!(held_at([note(NoteKind::Command, quoted)].iter()), None);
    }

    #[test]
    fn the_last_command_note_with_a_hold_decides() {
        let notes = [
            note(NoteKind::Command, "held\nHold: `ward:treat`"),
            note(NoteKind::Outcome, "Hold: none"),
            note(NoteKind::Command, "`/ward retry`: no hold line"),
        ];
        assert_eq!(held_at(notes.iter()).as_deref(), Some("ward:treat"));
        let released = [note(NoteKind::Command, "Hold: ward:treat"), note(NoteKind::Command, "x\nHold: none")];
        assert_eq!(held_at(released.iter()), None);
    }

    #[test]
    fn the_comment_id_is_the_last_patient_comment_notes() {
        let notes = [note(NoteKind::PatientComment, "x\nComment: 7"), note(NoteKind::Outcome, "Comment: 9")];
        assert_eq!(comment_id(&notes), Some(7));
        assert_eq!(comment_id(&notes[1..]), None);
    }

    #[test]
    fn an_opening_is_the_start_of_the_body_only() {
        let body = format!("{} the check `x` failed", Opening::IntegrationFailed);
        assert_eq!(body, "Integration failed: the check `x` failed");
        assert_eq!(Opening::of(&body), Some(Opening::IntegrationFailed));
        assert_eq!(Opening::of("In GitHub's merge queue: #3"), Some(Opening::InForgeQueue));
        assert_eq!(Opening::of("In ward's merge queue: #3"), Some(Opening::InWardQueue));
        assert_eq!(Opening::of("Merge conflict: a.rs"), Some(Opening::MergeConflict));
        assert_eq!(Opening::of("Back to treatment.\nIntegration failed: x"), None);
    }
}
