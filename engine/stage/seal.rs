//! Seal: the visit job's last step. The agent has ended and every process
//! it left was killed ([`crate::agent::reap_orphans`]); what it produced
//! was read once into the [`Visit`]. The visit job writes that, and the
//! run's commits as a git bundle (what the agent left committed under
//! ward's identity first), and a treatment's emulator data
//! ([`crate::workspace::shared`]), to the folder the workflow uploads. It decides
//! nothing: the record job judges and records, or drops, the visit.

use std::path::Path;

use anyhow::Context;
use tracing::{info, warn};

use super::patient::Patient;
use super::result::StageResult;
use super::visit::Visit;
use crate::workspace::Workspace;
use crate::workspace::bundle::BUNDLE_FILE;

pub async fn seal(
    patient: &Patient<'_>,
    visit: &Visit,
    workspace: Option<&mut Workspace>,
    out: &Path,
) -> anyhow::Result<StageResult> {
    let number = patient.issue.number;
    visit.write_out(&patient.folder, out)?;
    let (mut bundled, mut data) = (false, false);
    if let Some(ws) = workspace {
        bundled = ws
            .bundle(&out.join(BUNDLE_FILE))
            .await
            .with_context(|| format!("could not write the commits of the visit of {number} as a bundle"))?;
        // A treatment's emulator data goes with its commits; the record job
        // shares it only if it accepts the run. A failed export keeps the
        // change (the report says why), as in one process.
        if patient.stage.mode().treats() {
            data = ws.seal_checkpoint(out).await.unwrap_or_else(|e| {
                warn!("{e}");
                false
            });
            // No data sealed (it did not change): the schema's reading still
            // goes, for the record job's CHECKPOINT note.
            if !data
                && let Some((commit, schema)) = ws.treated_schema().and_then(super::record::schema_record)
                && let Err(e) = crate::workspace::shared::seal_schema(
                    out,
                    &crate::rules::discharge_audit::checkpoint_body(&commit, &schema),
                )
            {
                warn!("could not seal the schema's reading of {number}: {e}");
            }
        }
    }
    info!(out = %out.display(), bundled, data, "visit sealed");
    Ok(StageResult::Deferred {
        issue: number,
        reason: format!(
            "the visit of stage `{}` (run {}) is sealed in {}{}; the record job judges and records it",
            patient.stage.name,
            patient.run,
            out.display(),
            if bundled { " with its commits" } else { ", no commit" }
        ),
    })
}
