//! Discharge: the audit's I/O half ([`audit`]), the merge of an audited
//! pull request, and the discharge itself (labelled, closed, its family
//! released). The discharge stage and a chief's approval both end here.

pub mod audit;
pub mod queue;
pub mod review;

use crate::chart::Note;
use crate::chart::control::{ControlLine, Opening};
use crate::config::Config;
use crate::forge::{Forge, ForgeError, ForgeQueue, Issue, IssueNumber, PullRequest, PullState};
use crate::transfer::{Move, Moved};

/// What became of a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Merged now, or already (a rerun).
    Merged,
    /// The head moved on from the audited commit: nothing was merged.
    HeadMoved,
    /// The pull request conflicts with its base: nothing was merged.
    /// `files` when the forge names them.
    Conflict { files: Vec<String>, message: String },
}

/// Squash-merges the pull request at its audited head unless it is merged
/// already (a rerun). A head that moved since the audit is no error: the
/// caller lets the patient wait for the next audit.
pub async fn merge(forge: &dyn Forge, pull: &PullRequest) -> anyhow::Result<Merge> {
    if pull.state == PullState::Merged {
        return Ok(Merge::Merged);
    }
    let refused = match forge.merge_pull_request(pull.number, &pull.head_sha).await {
        Ok(()) => {
            crate::fault::point("after-merge");
            return Ok(Merge::Merged);
        }
        Err(e) => e,
    };
    // A merge whose answer was lost (a reset, a 502 after it landed) is
    // refused when retried: the pull request is merged already. Merged at
    // the audited head, it is this merge.
    let now = forge.pull_request_for_branch(&pull.head_branch).await.ok().flatten().filter(|p| p.number == pull.number);
    if let Some(now) = &now
        && now.state == PullState::Merged
        && now.head_sha == pull.head_sha
    {
        tracing::info!(pull = pull.number, "the merge had landed; its answer was lost");
        return Ok(Merge::Merged);
    }
    // GitHub's "not mergeable" is a conflict only for a pull request still open.
    let open = now.as_ref().is_some_and(|p| p.state == PullState::Open);
    match refused {
        ForgeError::HeadMoved { .. } => Ok(Merge::HeadMoved),
        ForgeError::MergeConflict { files, message, .. } if open => Ok(Merge::Conflict { files, message }),
        e => Err(anyhow::Error::new(e)
            .context(format!("could not merge pull request #{} at the audited head {}", pull.number, pull.head_sha))),
    }
}

/// Where an audited pull request went ([`land`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landing {
    /// Merged now, or already (a rerun): the patient is discharged.
    Merged,
    /// The head moved on from the audited commit: nothing changed.
    HeadMoved,
    /// The pull request conflicts with its base (no merge queue took it):
    /// nothing changed; the branch is brought up to date first.
    Conflict { files: Vec<String>, message: String },
    /// In a merge queue (ward's or GitHub's): the patient rests at `label`,
    /// with `note` written with the move (which queue, at which head). In
    /// ward's queue (`wards`), the caller starts a turn of it after the move
    /// ([`queue::start`]).
    Queued { label: String, note: String, wards: bool },
}

/// Lands an audited pull request: into GitHub's merge queue when the base
/// branch has one (`forge_queue`, read with the audit's facts), into
/// ward's queue when this forge runs it, else merged directly. Each is
/// pinned to the audited head.
pub async fn land(
    forge: &dyn Forge,
    config: &Config,
    issue: IssueNumber,
    pull: &PullRequest,
    forge_queue: Option<&ForgeQueue>,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Landing> {
    if let Some(queue) = forge_queue {
        return enqueue_on_forge(forge, config, pull, queue).await;
    }
    if let Some(integration) = queue::active(forge, config) {
        let ahead = queue::enqueue(forge, issue, pull, now).await?;
        let note = queue::queued_note(integration, pull, ahead);
        return Ok(Landing::Queued { label: integration.queued_label.clone(), note, wards: true });
    }
    Ok(match merge(forge, pull).await? {
        Merge::Merged => Landing::Merged,
        Merge::HeadMoved => Landing::HeadMoved,
        Merge::Conflict { files, message } => Landing::Conflict { files, message },
    })
}

/// GitHub's merge queue: `enqueuePullRequest` at the audited head. A
/// refusal is told apart by reading the pull request again: a head that
/// moved is [`Landing::HeadMoved`]; queued (or merged) at the audited head
/// is an answer that was lost.
async fn enqueue_on_forge(
    forge: &dyn Forge,
    config: &Config,
    pull: &PullRequest,
    queue: &ForgeQueue,
) -> anyhow::Result<Landing> {
    let label = config.merge_queue_label().to_string();
    if !config.labels.contains_key(&label) {
        anyhow::bail!(
            "pull request #{} targets `{}`, which has GitHub's merge queue, and a patient rests at `{label}` while \
             GitHub holds it, but .github/ward.yml does not declare that label; add `{label}` under `labels` \
             (nothing was enqueued)",
            pull.number,
            pull.base_branch
        );
    }
    if pull.state == PullState::Merged {
        return Ok(Landing::Merged);
    }
    if !queue.queued
        && let Err(refused) = forge.enqueue_pull_request(pull.number, queue, &pull.head_sha).await
    {
        let again = forge.pull_facts(&pull.head_branch).await?.filter(|f| f.pull.number == pull.number);
        match again {
            Some(f) if f.pull.head_sha != pull.head_sha => return Ok(Landing::HeadMoved),
            Some(f) if f.pull.state == PullState::Merged => return Ok(Landing::Merged),
            Some(f) if f.merge_queue.as_ref().is_some_and(|q| q.queued) => {
                tracing::info!(pull = pull.number, "the enqueue had landed; its answer was lost");
            }
            _ => {
                return Err(anyhow::Error::new(refused).context(format!(
                    "could not put pull request #{} into GitHub's merge queue at the audited head {}",
                    pull.number, pull.head_sha
                )));
            }
        }
    }
    let note = format!(
        "{} pull request #{} at the audited head {} into `{}`. GitHub merges it once the merge group's \
         required checks pass; if GitHub takes it out of the queue, the patient goes back to treatment with the \
         reason.\n{}",
        Opening::InForgeQueue,
        pull.number,
        pull.head_sha,
        pull.base_branch,
        ControlLine::Head(&pull.head_sha)
    );
    Ok(Landing::Queued { label, note, wards: false })
}

/// Writes `notes`, labels the patient discharged (keeping labels that are
/// not ward's), closes it, and releases its family. Returns the move and
/// what else moved. With `tell`, the move writes the patient's comment.
#[allow(clippy::too_many_arguments)] // the move's inputs, and the patient's comment written with it
pub async fn discharge(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: crate::chart::Seen,
    notes: Vec<Note>,
    run: &str,
    now: chrono::DateTime<chrono::Utc>,
    tell: Option<&crate::patient_comment::Tell>,
) -> anyhow::Result<(Moved, Vec<String>)> {
    let to = Move::To(config.discharge.discharged_label.clone());
    let moved = match tell {
        Some(tell) => crate::transfer::transfer_telling(forge, config, patient, seen, notes, to, tell).await?,
        None => crate::transfer::transfer(forge, config, patient, seen, notes, to).await?,
    };
    let after =
        Issue { labels: config.labels_at(&patient.labels, &config.discharge.discharged_label), ..patient.clone() };
    let family = crate::family::release(forge, config, &after, run, now).await?;
    Ok((moved, family))
}
