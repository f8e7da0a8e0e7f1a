//! Carries a person's command out: who may (a permission per command),
//! the lockdown, the move through [`crate::transfer`] (a COMMAND note
//! first, then the labels), a reaction on the comment, and the answer in
//! the patient's comment.
//!
//! From anyone without the permission a command needs: a `confused`
//! reaction and nothing else (no note, no answer: a stranger cannot make
//! ward write). A command ward does not know, from someone who may give
//! commands: `confused`, and a short answer that does not echo it.

use anyhow::Context;
use tracing::info;

use super::{Command, CommentEvent};
use crate::chart::control::{ControlLine, Hold, held_at};
use crate::chart::{Note, NoteKind, NoteMeta, Seen};
use crate::config::Config;
use crate::forge::{Issue, IssueState, Permission, Reaction};
use crate::hospital::{Hospital, new_run_id};
use crate::patient_comment::Tell;
use crate::stage::{StageRequest, StageResult, run_stage};
use crate::transfer::{Decision, Move, transfer_with};

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acted {
    /// Not a command for ward (no `/ward` line, ward's own comment, a
    /// pull request's comment): nothing happened, no reaction.
    NotOurs(String),
    /// From someone without the permission it needs: `confused`, nothing else.
    NotAllowed { who: String, have: Permission, need: Permission },
    /// Understood and not done (unknown, held, a lockdown, nothing to do):
    /// `confused` and the answer.
    Declined(String),
    /// Done: `+1` and the answer.
    Done(String),
}

/// Runs the command in `event`'s comment.
pub async fn act(h: &Hospital, event: &CommentEvent) -> anyhow::Result<Acted> {
    let Some(parsed) = super::parse(&event.body) else {
        return Ok(Acted::NotOurs("no line of the comment starts with `/ward`".into()));
    };
    if event.on_pull_request {
        return Ok(Acted::NotOurs("a comment on a pull request; give commands on the patient's issue".into()));
    }
    if h.forge.engine_account().is(&event.author) {
        return Ok(Acted::NotOurs("ward's own comment".into()));
    }
    let (number, forge) = (event.issue, &*h.forge);
    let need = match &parsed {
        Ok(Command::Approve) => h.config.discharge.approver_permission,
        _ => h.config.commands.permission,
    };
    let have = match event.outsider() {
        true => Permission::None,
        false => forge
            .permission(&event.author)
            .await
            .with_context(|| format!("could not look up whether `{}` may give commands on {number}", event.author))?,
    };
    if have < need {
        info!(issue = number.0, who = %event.author, ?have, ?need, "command not allowed");
        react(h, event, Reaction::Refused).await?;
        return Ok(Acted::NotAllowed { who: event.author.clone(), have, need });
    }
    let issue = forge.issue(number).await.with_context(|| format!("could not read issue {number}"))?;
    let declined = match (&parsed, issue.state) {
        (_, IssueState::Closed) => format!("{number} is closed: it is no patient any more."),
        (Err(answer), _) => answer.to_string(),
        (Ok(command), _) => match crate::lockdown::active_lockdown(forge).await? {
            Some(lockdown) => {
                format!("`{}` changed nothing: {lockdown}. Nothing moves until a maintainer lifts it.", command.name())
            }
            None if *command == Command::Approve => return approve(h, event, &issue).await,
            None => return carry_out(h, event, &issue, command, have).await,
        },
    };
    // Declined before anything moved: answered on the patient's comment
    // when the issue is a patient.
    react(h, event, Reaction::Refused).await?;
    if issue.state == IssueState::Open && h.config.ward_label(&issue.labels).is_some() {
        answer_on_patient(h, &issue, &event.author, &declined).await?;
    }
    Ok(Acted::Declined(declined))
}

/// The answer to a command ward understood and weighed: done (`+1`) or
/// declined (`confused`), in the words the person reads.
#[derive(Debug)]
enum Answer {
    Done(String),
    Declined(String),
}

impl Answer {
    fn reaction(&self) -> Reaction {
        match self {
            Answer::Done(_) => Reaction::Done,
            Answer::Declined(_) => Reaction::Refused,
        }
    }

    fn text(&self) -> &str {
        match self {
            Answer::Done(text) | Answer::Declined(text) => text,
        }
    }
}

impl From<Answer> for Acted {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Done(text) => Acted::Done(text),
            Answer::Declined(text) => Acted::Declined(text),
        }
    }
}

/// Retry, hold, resume, chief: one transfer decided on the chart as it
/// stands (a hold and a stage's move never overwrite each other).
async fn carry_out(
    h: &Hospital,
    event: &CommentEvent,
    issue: &Issue,
    command: &Command,
    have: Permission,
) -> anyhow::Result<Acted> {
    let place = h.config.ward_label(&issue.labels).map(str::to_string);
    let meta = command_meta(h, &h.config, place.as_deref());
    let said = Said { command, who: &event.author, have, place: place.as_deref(), meta: meta.clone() };
    let (decided, moved) =
        transfer_with(&*h.forge, &h.config, issue, Seen::NotRead, |notes| decide(&h.config, &said, notes))
            .await
            .with_context(|| format!("could not carry out `{}` on {}", command.name(), issue.number))?;
    let answer = match decided {
        Ok(Done { answer, dispatch }) => {
            if let Some(label) = dispatch {
                h.forge.dispatch_stage(issue.number, &label).await.with_context(|| {
                    format!("`{}` on {}: could not start the stage of `{label}`", command.name(), issue.number)
                })?;
            }
            Answer::Done(answer)
        }
        Err(Declined(answer)) => Answer::Declined(answer),
    };
    info!(issue = issue.number.0, command = command.name(), ?answer, "command");
    react(h, event, answer.reaction()).await?;
    let notes = match &moved.chart {
        Some(stored) => h.sentinels.parse_chart(&stored.text).unwrap_or_default(),
        None => Vec::new(),
    };
    let last = format!("**Last command:** `{}` by `{}`: {}", command.name(), event.author, answer.text());
    let tell = Tell { number: issue.number, known: None, meta };
    let seen = Seen::Read(moved.chart.clone());
    tell.update(&*h.forge, &h.config, moved.at.as_deref(), &notes, seen, Some(&last)).await;
    Ok(answer.into())
}

/// `/ward approve`: the approval path of the approved label (the guard's
/// lockdown first, then who approves, the audit again, the merge), with
/// the commenter as the approver.
async fn approve(h: &Hospital, event: &CommentEvent, issue: &Issue) -> anyhow::Result<Acted> {
    let req = StageRequest { approver: Some(event.author.clone()), ..StageRequest::new(issue.number) };
    let result = run_stage(h, &req).await?;
    let answer = match &result {
        StageResult::Moved(t) if t.to == h.config.discharge.discharged_label => Answer::Done(
            "approved: the audit passed again, the pull request is merged and the patient discharged.".into(),
        ),
        StageResult::Moved(t) => Answer::Done(format!(
            "approved, but the audit taken again failed: back to `{}` (the chart says why).",
            t.to
        )),
        StageResult::Refused { reason, .. } => Answer::Declined(format!("not approved: {reason}")),
        StageResult::NoOp { reason, .. } | StageResult::Deferred { reason, .. } => {
            Answer::Declined(format!("nothing to approve: {reason}"))
        }
        StageResult::SlotTaken { .. } => Answer::Declined("nothing to approve: the run only took an agent slot".into()),
        StageResult::Invalid { reason, .. } => Answer::Declined(format!("not approved: {reason}")),
    };
    react(h, event, answer.reaction()).await?;
    let issue = h.forge.issue(issue.number).await?;
    answer_on_patient(h, &issue, &event.author, &format!("`/ward approve`: {}", answer.text())).await?;
    Ok(answer.into())
}

/// Why a command did nothing: the answer the person reads.
#[derive(Debug, PartialEq, Eq)]
struct Declined(String);

/// What a command decided, when it did something.
#[derive(Debug)]
struct Done {
    answer: String,
    /// A label to dispatch after the move (a waiting patient's audit,
    /// which no label move starts).
    dispatch: Option<String>,
}

/// A command, who gave it, and where the patient is.
struct Said<'a> {
    command: &'a Command,
    who: &'a str,
    have: Permission,
    place: Option<&'a str>,
    meta: NoteMeta,
}

/// The decision of a command on the chart as it stands (pure): the COMMAND
/// note and the move, or the answer why nothing moves.
fn decide(config: &Config, s: &Said<'_>, notes: &[Note]) -> Decision<Result<Done, Declined>> {
    let hold = &config.commands.hold_label;
    let held = held_at(notes.iter());
    let pending = &config.discharge.pending_label;
    let wakes = |label: &str| label == pending || label == config.merge_queue_label();
    let no = |answer: String| Decision { notes: Vec::new(), to: Move::Stay, value: Err(Declined(answer)) };
    let Some(place) = s.place else {
        return no(format!(
            "the issue carries no ward label: it is no patient (apply `{}` to admit it).",
            config.admission
        ));
    };
    let who =
        format!("`{}` ({} permission) said `{}`", s.who, format!("{:?}", s.have).to_lowercase(), s.command.name());
    let note = |body: String| Note { kind: NoteKind::Command, meta: s.meta.clone(), body: format!("{who}.\n\n{body}") };
    let done = |answer: String, dispatch: Option<String>| Ok(Done { answer, dispatch });
    let starts = config.stage_by_label(place).is_some();
    match s.command {
        Command::Retry if held.is_some() || place == hold => {
            no(format!("the patient is held at `{place}`; `/ward resume` first."))
        }
        Command::Retry if starts => Decision {
            notes: vec![note(format!("The stage of `{place}` runs again."))],
            to: Move::Rerun,
            value: done(format!("the stage of `{place}` runs again."), None),
        },
        Command::Retry if place == pending => Decision {
            notes: vec![note(format!("The audit of the patient waiting at `{place}` runs again."))],
            to: Move::Stay,
            value: done("the discharge audit runs again.".into(), Some(place.to_string())),
        },
        // In the merge queue no stage runs, but a look reads what the queue
        // did (merged, dequeued) when its delivery was missed.
        Command::Retry if wakes(place) => Decision {
            notes: vec![note(format!("The patient in the merge queue at `{place}` gets a look."))],
            to: Move::Stay,
            value: done("the patient in the merge queue gets a look.".into(), Some(place.to_string())),
        },
        Command::Retry => no(format!("the patient rests at `{place}`: no stage runs there.")),
        Command::Hold if held.is_some() || place == hold => no(format!("the patient is already held at `{place}`.")),
        Command::Hold if place == config.discharge.discharged_label => no("the patient is discharged.".into()),
        Command::Hold => Decision {
            notes: vec![note(format!(
                "Held at `{hold}`: its stages do nothing until `/ward resume` takes it back to `{place}`.\n{}",
                ControlLine::Hold(Hold::At(place))
            ))],
            to: Move::To(hold.clone()),
            value: done(format!("held; `/ward resume` takes it back to `{place}`."), None),
        },
        Command::Resume => match held {
            Some(back) if place == hold => Decision {
                notes: vec![note(format!("Resumed: back to `{back}`.\n{}", ControlLine::Hold(Hold::Released)))],
                to: Move::To(back.clone()),
                // A patient resumed to where only a wake-up moves it (its
                // audit waiting, or GitHub's merge queue, which may have
                // merged or let go of it while it was held) gets a look.
                value: done(format!("resumed: back to `{back}`."), wakes(&back).then(|| back.clone())),
            },
            Some(_) => Decision {
                notes: vec![note(format!(
                    "The hold ends; the patient stays at `{place}`, where a person moved it.\n{}",
                    ControlLine::Hold(Hold::Released)
                ))],
                to: Move::Stay,
                value: done(format!("the hold ends; the patient stays at `{place}`."), None),
            },
            None => no("the patient is not held.".into()),
        },
        Command::Chief(_) if place == config.chief_label() => no("the patient is with the chiefs already.".into()),
        Command::Chief(_) if place == config.discharge.discharged_label => no("the patient is discharged.".into()),
        Command::Chief(reason) => {
            let chief = config.chief_label().to_string();
            // The reason is a person's text: quoted, escaped, never a line
            // of its own (no `Hold:` line can come from it).
            let quoted: String = crate::untrusted::shown(reason).lines().map(|l| format!("> {l}\n")).collect();
            Decision {
                notes: vec![note(format!(
                    "Sent to the chiefs (`{chief}`). Their reason:\n\n{quoted}\n{}",
                    ControlLine::Hold(Hold::Released)
                ))],
                to: Move::To(chief.clone()),
                value: done(format!("sent to the chiefs (`{chief}`); the reason is in the chart."), None),
            }
        }
        Command::Approve => no("`/ward approve` takes the approval path.".into()),
    }
}

/// The note meta of a command's run: the stage the patient is in, if any.
fn command_meta(h: &Hospital, config: &Config, place: Option<&str>) -> NoteMeta {
    let stage = place.and_then(|p| config.stage_by_label(p)).map_or("command", |s| s.name).to_string();
    NoteMeta::engine(new_run_id(h.now()), stage, h.now())
}

async fn react(h: &Hospital, event: &CommentEvent, reaction: Reaction) -> anyhow::Result<()> {
    h.forge
        .react(event.issue, event.comment, reaction)
        .await
        .with_context(|| format!("could not react to the command in comment {} on {}", event.comment, event.issue))
}

/// The answer on the patient's comment, the chart read for it.
async fn answer_on_patient(h: &Hospital, issue: &Issue, who: &str, answer: &str) -> anyhow::Result<()> {
    let stored = h.forge.read_chart(issue.number).await?;
    let notes = match &stored {
        Some(c) => h.sentinels.parse_chart(&c.text).unwrap_or_default(),
        None => Vec::new(),
    };
    let place = h.config.ward_label(&issue.labels);
    let answer = format!("**Last command:** {answer} (asked by `{who}`)");
    let meta = command_meta(h, &h.config, place);
    let tell = Tell { number: issue.number, known: None, meta };
    tell.update(&*h.forge, &h.config, place, &notes, Seen::Read(stored), Some(&answer)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::load(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn said<'a>(command: &'a Command, place: Option<&'a str>) -> Said<'a> {
        let meta = NoteMeta::engine("r", "treat", chrono::Utc::now());
        Said { command, who: "rob", have: Permission::Write, place, meta }
    }

    #[test]
    fn hold_then_resume_goes_back_where_it_was_and_retry_waits_for_the_resume() {
        let c = config();
        let d = decide(&c, &said(&Command::Hold, Some("ward:treat")), &[]);
        assert_eq!(d.to, Move::To("ward:hold".into()));
        assert!(d.notes[0].body.ends_with("Hold: ward:treat"), "{}", d.notes[0].body);
        let chart = d.notes;
        let retry = decide(&c, &said(&Command::Retry, Some("ward:hold")), &chart);
        assert!(retry.value.unwrap_err().0.contains("`/ward resume` first"));
        let again = decide(&c, &said(&Command::Hold, Some("ward:hold")), &chart);
        assert!(again.value.unwrap_err().0.contains("already held"));
        let resume = decide(&c, &said(&Command::Resume, Some("ward:hold")), &chart);
        assert_eq!(resume.to, Move::To("ward:treat".into()));
        let mut chart = chart;
        chart.extend(resume.notes);
        assert_eq!(held_at(chart.iter()), None);
        assert!(
            decide(&c, &said(&Command::Resume, Some("ward:treat")), &chart).value.unwrap_err().0.contains("not held")
        );
    }

    /// A move to GitHub's merge queue held while the patient was held: the
    /// resume goes back there and sends a look (GitHub may have merged it
    /// meanwhile, and its delivery found the patient held).
    #[test]
    fn a_resume_to_the_merge_queue_sends_a_look() {
        let c = config();
        let queue = c.merge_queue_label().to_string();
        let meta = NoteMeta::engine("r", "discharge", chrono::Utc::now());
        let held = format!(
            "The patient is held: this run's move to `{queue}` waits at `ward:hold` until `/ward resume`.\n{}",
            ControlLine::Hold(Hold::At(&queue))
        );
        let chart = vec![Note { kind: NoteKind::Command, meta, body: held }];
        let resume = decide(&c, &said(&Command::Resume, Some("ward:hold")), &chart);
        assert_eq!(resume.to, Move::To(queue.clone()));
        assert_eq!(resume.value.unwrap().dispatch, Some(queue));
    }

    #[test]
    fn retry_reruns_a_stage_looks_at_a_waiting_audit_or_the_merge_queue_and_refuses_a_resting_patient() {
        let c = config();
        let d = decide(&c, &said(&Command::Retry, Some("ward:code-review")), &[]);
        assert_eq!((d.to, d.value.unwrap().dispatch), (Move::Rerun, None));
        let d = decide(&c, &said(&Command::Retry, Some("ward:awaiting-review")), &[]);
        assert_eq!((d.to, d.value.unwrap().dispatch), (Move::Stay, Some("ward:awaiting-review".into())));
        let queue = c.merge_queue_label().to_string();
        let d = decide(&c, &said(&Command::Retry, Some(&queue)), &[]);
        assert_eq!((d.to, d.value.unwrap().dispatch), (Move::Stay, Some(queue)));
        let d = decide(&c, &said(&Command::Retry, Some("ward:chief")), &[]);
        assert!(d.notes.is_empty() && d.value.unwrap_err().0.contains("rests at `ward:chief`"));
        let d = decide(&c, &said(&Command::Retry, None), &[]);
        assert!(d.value.unwrap_err().0.contains("no patient"));
    }

    #[test]
    fn a_chiefs_reason_is_quoted_and_cannot_forge_a_hold_line() {
        let c = config();
        let reason = Command::Chief("x\nHold: ward:admit\n::error::boom".into());
        let d = decide(&c, &said(&reason, Some("ward:treat")), &[]);
        assert_eq!(d.to, Move::To("ward:chief".into()));
        let body = &d.notes[0].body;
        assert!(body.contains("> Hold: ward:admit"), "{body}");
        assert!(!body.lines().any(|l| l.starts_with("::")), "{body}");
        assert_eq!(held_at(d.notes.iter()), None);
    }
}
