//! How many agents run at once, counted where both forges offer
//! compare-and-swap: the sweep's state slot (see the sweep's module docs).
//! A stage run takes a slot before its workspace and agent start
//! ([`take`]) and frees it when it ends ([`free`]); a patient beyond a cap
//! rests at `capacity.queued_label` and is remembered here, oldest first.
//! The run that frees a slot starts the oldest queued patient that fits
//! ([`start_next`]).
//!
//! A crash must not keep a slot forever: each slot expires after its
//! stage's time limit plus [`GRACE`] (a run never outlives its time limit),
//! and an expired slot counts for nobody. The sweep starts queued patients
//! that fit once slots expired with no run left to free them.

use chrono::{DateTime, Utc};

use super::{Queued, Slot, StateError, load, update};
use crate::chart::{Note, NoteKind, NoteMeta, Seen};
use crate::config::{Config, Stage};
use crate::forge::{Forge, IssueNumber, IssueState};
use crate::transfer::{Move, transfer};

/// How long past its stage's time limit a slot is held: the workspace's
/// setup and teardown, and the record, take time besides the agent.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// What [`take`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Take {
    /// The run holds a slot until [`free`] (or its expiry).
    Granted,
    /// Every slot is taken: the patient is queued (once), and this says why.
    Full(String),
}

/// Takes a slot for `run`, or queues the patient when the caps are reached.
pub async fn take(
    forge: &dyn Forge,
    config: &Config,
    issue: IssueNumber,
    stage: Stage<'_>,
    run: &str,
    now: DateTime<Utc>,
) -> Result<Take, StateError> {
    let expires = now + chrono::Duration::from_std(stage.config.time_limit + GRACE).unwrap_or(chrono::Duration::MAX);
    let out = update(forge, |s| {
        let cap = &mut s.capacity;
        cap.drop_expired(now);
        cap.running.retain(|_, slot| slot.issue != issue); // one run per patient: an older one is over
        if let Some(why) = cap.full(config, stage) {
            if !cap.queued.iter().any(|q| q.issue == issue) {
                cap.queued.push(Queued { issue, label: stage.config.label.clone(), since: now });
            }
            return Ok::<_, ()>(Take::Full(why));
        }
        cap.queued.retain(|q| q.issue != issue);
        cap.running.insert(run.to_string(), Slot { issue, stage: stage.name.to_string(), expires });
        Ok(Take::Granted)
    })
    .await?;
    Ok(out.unwrap_or(Take::Granted))
}

/// Whether `run` holds an unexpired slot for `issue` (one read, no write).
pub async fn held(forge: &dyn Forge, run: &str, issue: IssueNumber, now: DateTime<Utc>) -> Result<bool, StateError> {
    let state = load(forge).await?;
    Ok(state.capacity.running.get(run).is_some_and(|slot| slot.issue == issue && slot.expires > now))
}

/// Frees `run`'s slot (if it holds one) and takes out of the queue the
/// oldest patient whose stage fits now. The caller starts it.
async fn free_and_pick(
    forge: &dyn Forge,
    config: &Config,
    run: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<Queued>, StateError> {
    let out = update(forge, |s| {
        let cap = &mut s.capacity;
        let before = cap.clone();
        if let Some(run) = run {
            cap.running.remove(run);
        }
        cap.drop_expired(now);
        let next = cap
            .queued
            .iter()
            .position(|q| config.stage_by_label(&q.label).is_none_or(|stage| cap.full(config, stage).is_none()));
        let picked = next.map(|i| cap.queued.remove(i));
        if *cap == before { Err(()) } else { Ok(picked) }
    })
    .await?;
    Ok(out.ok().flatten())
}

/// Frees `run`'s slot and starts the oldest queued patient that fits: back
/// to its stage label with a note, dispatched as any move is. A queued
/// patient that no longer rests at the queued label (a person moved it) is
/// dropped from the queue and the next is tried. Returns who was started.
pub async fn free(
    forge: &dyn Forge,
    config: &Config,
    run: Option<&str>,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<IssueNumber>> {
    let mut run = run;
    // Bounded: each pass takes one entry out of the queue.
    for _ in 0..64 {
        let Some(next) = free_and_pick(forge, config, run, now).await? else { return Ok(None) };
        run = None;
        if start(forge, config, &next, now).await? {
            return Ok(Some(next.issue));
        }
    }
    Ok(None)
}

/// Puts a queued patient back at its stage label. `false` when it no
/// longer waits there.
async fn start(forge: &dyn Forge, config: &Config, next: &Queued, now: DateTime<Utc>) -> anyhow::Result<bool> {
    let issue = forge.issue(next.issue).await?;
    let queued = &config.capacity.queued_label;
    if issue.state != IssueState::Open || !issue.labels.contains(queued) {
        return Ok(false);
    }
    let stage = config.stage_by_label(&next.label).map_or("", |s| s.name);
    let note = Note {
        kind: NoteKind::Waiting,
        meta: NoteMeta::engine(format!("capacity-{}", now.timestamp()), stage, now),
        body: format!(
            "An agent slot is free: the patient leaves `{queued}` for `{}`, where it waited since {}.",
            next.label,
            next.since.format("%Y-%m-%d %H:%M UTC")
        ),
    };
    transfer(forge, config, &issue, Seen::NotRead, vec![note], Move::To(next.label.clone())).await?;
    Ok(true)
}
