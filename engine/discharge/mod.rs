//! Discharge: the audit's I/O half ([`audit`]), the merge of an audited
//! pull request, and the discharge itself (labelled, closed, its family
//! released). The discharge stage and a chief's approval both end here.

pub mod audit;

use crate::chart::Note;
use crate::config::Config;
use crate::forge::{Forge, Issue, PullRequest, PullState};
use crate::transfer::{Move, Moved, transfer};

/// Squash-merges the pull request unless it is merged already (a rerun).
pub async fn merge(forge: &dyn Forge, pull: &PullRequest) -> anyhow::Result<()> {
    if pull.state == PullState::Merged {
        return Ok(());
    }
    let Err(refused) = forge.merge_pull_request(pull.number, &pull.head_sha).await else {
        crate::fault::point("after-merge");
        return Ok(());
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
        return Ok(());
    }
    Err(anyhow::Error::new(refused)
        .context(format!("could not merge pull request #{} at the audited head {}", pull.number, pull.head_sha)))
}

/// Writes `notes`, labels the patient discharged (keeping labels that are
/// not ward's), closes it, and releases its family. Returns the move and
/// what else moved.
pub async fn discharge(
    forge: &dyn Forge,
    config: &Config,
    patient: &Issue,
    seen: crate::chart::Seen,
    notes: Vec<Note>,
    run: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<(Moved, Vec<String>)> {
    let to = Move::To(config.discharge.discharged_label.clone());
    let moved = transfer(forge, config, patient, seen, notes, to).await?;
    let after =
        Issue { labels: config.labels_at(&patient.labels, &config.discharge.discharged_label), ..patient.clone() };
    let family = crate::family::release(forge, config, &after, run, now).await?;
    Ok((moved, family))
}
