//! Discharge: the audit's I/O half ([`audit`]), the merge of an audited
//! pull request, and the discharge itself (labelled, closed, its family
//! released). The discharge stage and a chief's approval both end here.

pub mod audit;
pub mod queue;
pub mod review;

use crate::chart::Note;
use crate::config::Config;
use crate::forge::{Forge, ForgeError, Issue, PullRequest, PullState};
use crate::transfer::{Move, Moved};

/// What became of a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Merged now, or already (a rerun).
    Merged,
    /// The head moved on from the audited commit: nothing was merged.
    HeadMoved,
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
    if let Ok(Some(now)) = forge.pull_request_for_branch(&pull.head_branch).await
        && now.number == pull.number
        && now.state == PullState::Merged
        && now.head_sha == pull.head_sha
    {
        tracing::info!(pull = pull.number, "the merge had landed; its answer was lost");
        return Ok(Merge::Merged);
    }
    match refused {
        ForgeError::HeadMoved { .. } => Ok(Merge::HeadMoved),
        e => Err(anyhow::Error::new(e)
            .context(format!("could not merge pull request #{} at the audited head {}", pull.number, pull.head_sha))),
    }
}

/// Writes `notes`, labels the patient discharged (keeping labels that are
/// not ward's), closes it, and releases its family. Returns the move and
/// what else moved.
#[allow(clippy::too_many_arguments)] // the move's inputs, and the patient's comment written with it
pub async fn discharge(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: crate::chart::Seen,
    notes: Vec<Note>,
    run: &str,
    now: chrono::DateTime<chrono::Utc>,
    tell: Option<&crate::transfer::Tell<'_>>,
) -> anyhow::Result<(Moved, Vec<String>)> {
    let to = Move::To(config.discharge.discharged_label.clone());
    let moved = crate::transfer::transfer_telling(forge, config, patient, seen, notes, to, tell).await?;
    let after =
        Issue { labels: config.labels_at(&patient.labels, &config.discharge.discharged_label), ..patient.clone() };
    let family = crate::family::release(forge, config, &after, run, now).await?;
    Ok((moved, family))
}
