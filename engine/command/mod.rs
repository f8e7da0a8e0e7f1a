//! Commands people give ward in an issue comment: `/ward retry`, `/ward
//! hold`, `/ward resume`, `/ward chief <reason>`, `/ward approve`.
//!
//! This file reads them (pure): the `issue_comment` event, and the command
//! in a comment's body. Only the first line that starts with `/ward`
//! counts; the body is untrusted and never echoed (a chief's reason is
//! kept in the chart, quoted). [`act`] carries a command out.

pub mod act;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::forge::IssueNumber;
use crate::untrusted;

/// What a command asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the patient's current stage again.
    Retry,
    /// Stop the patient where it is: its stages do nothing until resumed.
    Hold,
    /// Put a held patient back where it was, and start its stage.
    Resume,
    /// Send the patient to the chiefs, with the person's reason.
    Chief(String),
    /// Approve the merge (human approval mode), as the approved label does.
    Approve,
}

impl Command {
    /// The command as people type it, without arguments: `/ward chief`.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Retry => "/ward retry",
            Command::Hold => "/ward hold",
            Command::Resume => "/ward resume",
            Command::Chief(_) => "/ward chief",
            Command::Approve => "/ward approve",
        }
    }
}

/// The longest reason `/ward chief` keeps, in bytes.
pub const MAX_REASON_BYTES: usize = 500;

/// The commands ward knows, as an answer lists them.
const KNOWN: &str = "`/ward retry`, `/ward hold`, `/ward resume`, `/ward chief <reason>`, `/ward approve`";

/// A `/ward` line that is no command ward knows: the answer the person
/// reads (it never echoes what they wrote).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotACommand {
    #[error("`{0}` takes nothing after it")]
    TakesNothing(&'static str),
    #[error("`/ward chief` needs a reason: `/ward chief <why a person must look>`")]
    NoReason,
    #[error("`/ward` alone asks nothing; ward knows {KNOWN}")]
    Alone,
    #[error("ward knows no such command; it knows {KNOWN}")]
    Unknown,
}

/// The command in a comment's body: `None` when no line starts with
/// `/ward` (the comment is not for ward), `Some(Err(answer))` when the
/// first such line is not a command ward knows.
pub fn parse(body: &str) -> Option<Result<Command, NotACommand>> {
    let line = body.lines().map(str::trim).find(|l| {
        l.strip_prefix("/ward").is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
    })?;
    let rest = line["/ward".len()..].trim();
    let (word, args) = match rest.split_once(char::is_whitespace) {
        Some((w, a)) => (w, a.trim()),
        None => (rest, ""),
    };
    let bare = |c: Command| if args.is_empty() { Ok(c) } else { Err(NotACommand::TakesNothing(c.name())) };
    Some(match word.to_ascii_lowercase().as_str() {
        "retry" => bare(Command::Retry),
        "hold" => bare(Command::Hold),
        "resume" => bare(Command::Resume),
        "approve" => bare(Command::Approve),
        "chief" if args.is_empty() => Err(NotACommand::NoReason),
        "chief" => Ok(Command::Chief(untrusted::cut(args, MAX_REASON_BYTES, "the reason was longer"))),
        "" => Err(NotACommand::Alone),
        _ => Err(NotACommand::Unknown),
    })
}

/// An `issue_comment` event, as far as a command needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentEvent {
    pub issue: IssueNumber,
    pub comment: u64,
    /// Who wrote the comment (`comment.user.login`).
    pub author: String,
    /// GitHub's `author_association` (`OWNER`, `MEMBER`, `COLLABORATOR`,
    /// `CONTRIBUTOR`, `NONE`, ...): a cheap first look before the
    /// permission call.
    pub association: String,
    pub body: String,
    /// The comment is on a pull request (GitHub sends those as issues).
    pub on_pull_request: bool,
}

impl CommentEvent {
    /// Whether GitHub already says the author has no role in the
    /// repository (no permission lookup needed to refuse them).
    pub fn outsider(&self) -> bool {
        matches!(
            self.association.as_str(),
            "NONE" | "CONTRIBUTOR" | "FIRST_TIMER" | "FIRST_TIME_CONTRIBUTOR" | "MANNEQUIN"
        )
    }
}

/// An `issue_comment` event file ward cannot read a command from (bad input).
#[derive(Debug, thiserror::Error)]
pub enum CommentEventError {
    #[error("the event file {} is not JSON: {source}", path.display())]
    NotJson { path: PathBuf, source: serde_json::Error },
    #[error("the `issue_comment` event in {} has no usable `{field}`", path.display())]
    Missing { path: PathBuf, field: &'static str },
}

/// Reads an `issue_comment` event payload. `Ok(None)`: not a created
/// comment (an edit or a deletion never runs a command again).
pub fn read_comment_event(text: &str, path: &Path) -> Result<Option<CommentEvent>, CommentEventError> {
    let p: Value =
        serde_json::from_str(text).map_err(|source| CommentEventError::NotJson { path: path.to_path_buf(), source })?;
    let missing = |field: &'static str| CommentEventError::Missing { path: path.to_path_buf(), field };
    if p.pointer("/action").and_then(Value::as_str) != Some("created") {
        return Ok(None);
    }
    let str_at = |ptr: &str| p.pointer(ptr).and_then(Value::as_str).map(str::to_string);
    let number =
        p.pointer("/issue/number").and_then(Value::as_u64).filter(|n| *n > 0).ok_or_else(|| missing("issue.number"))?;
    Ok(Some(CommentEvent {
        issue: IssueNumber(number),
        comment: p.pointer("/comment/id").and_then(Value::as_u64).ok_or_else(|| missing("comment.id"))?,
        author: str_at("/comment/user/login").ok_or_else(|| missing("comment.user.login"))?,
        association: str_at("/comment/author_association").unwrap_or_else(|| "NONE".into()),
        body: str_at("/comment/body").unwrap_or_default(),
        on_pull_request: p.pointer("/issue/pull_request").is_some_and(|v| !v.is_null()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_starting_with_ward_is_the_command() {
        assert_eq!(parse("/ward retry"), Some(Ok(Command::Retry)));
        assert_eq!(parse("Thanks!\n  /ward HOLD  \n/ward resume"), Some(Ok(Command::Hold)));
        assert_eq!(parse("please /ward retry"), None, "only a line that starts with it");
        assert_eq!(parse("/wardrobe retry"), None);
        assert_eq!(parse("no command here"), None);
        assert_eq!(parse("/ward resume\r\n"), Some(Ok(Command::Resume)));
        assert_eq!(parse("/ward approve"), Some(Ok(Command::Approve)));
    }

    #[test]
    fn chief_keeps_a_bounded_reason_and_needs_one() {
        assert_eq!(
            parse("/ward chief the plan touches billing"),
            Some(Ok(Command::Chief("the plan touches billing".into())))
        );
        assert!(parse("/ward chief").unwrap().unwrap_err().to_string().contains("needs a reason"));
        let long = format!("/ward chief {}", "x".repeat(2000));
        let Some(Ok(Command::Chief(reason))) = parse(&long) else { panic!() };
        assert!(reason.len() < MAX_REASON_BYTES + 100, "{}", reason.len());
    }

    #[test]
    fn unknown_words_and_extra_arguments_are_answered_without_echoing_them() {
        let unknown = parse("/ward <img src=x onerror=alert(1)> @everyone").unwrap().unwrap_err().to_string();
        assert!(unknown.starts_with("ward knows no such command"), "{unknown}");
        assert!(!unknown.contains("img") && !unknown.contains("@everyone"), "{unknown}");
        let extra = parse("/ward retry now please").unwrap().unwrap_err().to_string();
        assert!(extra.contains("`/ward retry` takes nothing"), "{extra}");
        assert!(parse("/ward").unwrap().unwrap_err().to_string().contains("alone asks nothing"));
    }

    #[test]
    fn a_created_comment_event_is_read_and_others_are_not() {
        let fixture = include_str!("../../tests/fixtures/github/webhooks/issue_comment/created.payload.json");
        let e = read_comment_event(fixture, Path::new("e.json")).unwrap().unwrap();
        assert_eq!((e.issue, e.author.as_str(), e.on_pull_request), (IssueNumber(1), "Codertocat", false));
        assert!(!e.association.is_empty());
        let edited = fixture.replacen("\"action\": \"created\"", "\"action\": \"edited\"", 1);
        assert_eq!(read_comment_event(&edited, Path::new("e.json")).unwrap(), None);
        let mut broken: Value = serde_json::from_str(fixture).unwrap();
        broken["comment"]["user"] = Value::Null;
        let broken = broken.to_string();
        let err = read_comment_event(&broken, Path::new("e.json")).unwrap_err().to_string();
        assert!(err.contains("comment.user.login"), "{err}");
    }
}
