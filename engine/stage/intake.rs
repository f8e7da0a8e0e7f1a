//! Intake: the record job takes in a visit the visit job sealed, as hostile
//! input. Everything in the folder was in reach of the agent (it ran as the
//! same user in that job), so:
//!
//! - files are read with the bounds of [`Visit::open`], the agent's stdout
//!   only as its tail (the usage is read from it here, again);
//! - the visit's issue, stage, run and label must be this run's: the record
//!   job takes them from its own trigger and guard, and a visit that names
//!   others (a label that moved meanwhile, a stale artifact) is dropped
//!   with one line, nothing written;
//! - its commits are taken in by [`crate::workspace::bundle::take_in`]:
//!   git in a fresh bare repository with a clean environment, one ref,
//!   descending from where this job says the run started, bounded in
//!   size; what they changed is read from the commits, never from the
//!   visit's own list; nothing is checked out, no hook or config of the
//!   agent's is read.
//!
//! - a treatment's emulator data ([`crate::workspace::shared`]) is read
//!   with bounds, checked against its marker, and kept only when its
//!   commit is the head this job records; otherwise it is left out with a
//!   line (the run stands: its next stage starts from the checkpoint
//!   before, or the seed, as after a failed export).
//!
//! What intake returns goes through judge and record like any visit.

use std::path::Path;

use anyhow::Context;
use tracing::warn;

use super::patient::Patient;
use super::result::StageResult;
use super::visit::{VISIT_FILE, Visit};
use crate::chart::NoteKind;
use crate::chart::control::Opening;
use crate::hospital::Hospital;
use crate::workspace::bundle::{self, BUNDLE_FILE, BundleError, Expected, Intake};
use crate::workspace::shared;

/// What the record job makes of the visit folder.
pub enum Taken {
    /// A visit of this run, with its commits taken in (`None`: no git here).
    Visit(Box<Visit>, Option<Intake>),
    /// Nothing to record: the run ends here, nothing written.
    Dropped(StageResult),
    /// The visit is this run's but broke a bound: an invalid run (a REFUSAL).
    Refused(Box<Visit>, String),
}

pub fn take_in(h: &Hospital, patient: &Patient<'_>, from: &Path) -> anyhow::Result<Taken> {
    let number = patient.issue.number;
    let drop = |reason: String| Ok(Taken::Dropped(StageResult::NoOp { issue: number, reason }));
    if !from.join(VISIT_FILE).exists() {
        return drop(format!(
            "the visit job sealed no visit of {number} (it ran no agent: its guard stopped, or it failed); nothing \
             to record"
        ));
    }
    let mut visit = Visit::open(from).map_err(|e| anyhow::anyhow!("{e}; nothing was recorded"))?;
    let ours = [
        ("issue", visit.issue.to_string(), number.to_string()),
        ("stage", visit.stage.clone(), patient.stage.name.to_string()),
        ("run", visit.run.clone(), patient.run.clone()),
        ("label", visit.label_in.clone(), patient.label_in.clone()),
    ];
    for (what, theirs, mine) in ours {
        if theirs != mine {
            return drop(format!(
                "the visit was sealed for {what} `{}`, and this run is at `{}`: the patient moved while the agent ran \
                 (or the visit is another run's); the visit is dropped, nothing written",
                theirs.escape_debug(),
                mine
            ));
        }
    }
    // What the agent spent: read here again, from the tail of its output.
    visit.usage = crate::budget::parse_usage(&Visit::stdout_tail(from), &h.config.departments.budget);
    visit.commit = None;
    let Some(plan) = h.workspace_plan()? else { return Ok(Taken::Visit(Box::new(visit), None)) };
    let target = plan.push.as_ref().context(
        "`ward record` fetches and pushes the patient's branch: it runs in GitHub Actions (GITHUB_REPOSITORY and \
         GITHUB_SERVER_URL set)",
    )?;
    let branch = crate::workspace::worktree::branch_name(number.0);
    let restart =
        patient.chart.iter().rfind(|n| n.kind == NoteKind::Outcome).is_some_and(|n| n.body.trim() == "restart");
    let expect = Expected {
        remote_url: &target.url,
        token: target.token.as_deref(),
        base: &plan.base,
        branch: &branch,
        restart,
        resolve: patient.stage.mode() == crate::config::Mode::Resolve || sent_back_by_the_queue(patient),
    };
    let file = from.join(BUNDLE_FILE);
    let bundle_file = file.exists().then_some(file.as_path());
    let Some(start) = visit.start.clone() else {
        let reason = "the visit names no commit it started at".to_string();
        return Ok(Taken::Refused(Box::new(visit), reason));
    };
    match bundle::take_in(bundle_file, &start, &expect) {
        Ok(mut intake) => {
            // ward's own files in the agent's commits: refused, nothing pushed.
            if let Err(refusal) =
                crate::rules::changes::no_ward_files(&crate::workspace::ward_files(&intake.changed, &plan.state_paths))
            {
                return Ok(Taken::Refused(Box::new(visit), refusal.to_string()));
            }
            // A credential in the agent's commits: refused, nothing pushed.
            let added = crate::workspace::added::between(&intake.bare, &intake.start, &intake.head, &plan.state_paths)
                .with_context(|| format!("could not read the visit's commits of {number}"))?;
            if let Err(refusal) = super::record::no_credentials(h, &visit, &added)? {
                return Ok(Taken::Refused(Box::new(visit), refusal.to_string()));
            }
            intake.checkpoint = sealed_checkpoint(patient, from, &intake);
            if intake.checkpoint.is_none() {
                intake.schema = sealed_schema(patient, from, &intake);
            }
            visit.changed = intake.changed.clone();
            visit.diff_lines = intake.diff_lines;
            visit.commit = (intake.head != intake.start).then(|| intake.head.clone());
            Ok(Taken::Visit(Box::new(visit), Some(intake)))
        }
        Err(BundleError::Refused(reason)) => Ok(Taken::Refused(Box::new(visit), reason)),
        Err(BundleError::Git(e)) => {
            Err(anyhow::Error::new(e).context(format!("could not take in the visit's commits of {number}")))
        }
    }
}

/// The emulator data a treatment's visit sealed, when it is usable: within
/// bounds, matching its marker, of the head this job records.
fn sealed_checkpoint(patient: &Patient<'_>, from: &Path, intake: &Intake) -> Option<Box<shared::Sealed>> {
    let number = patient.issue.number;
    let sealed = match shared::open_sealed(from, number.0) {
        Ok(sealed) => sealed?,
        Err(why) => {
            warn!("the emulator data of the visit of {number} is left out: {why}");
            return None;
        }
    };
    if !patient.stage.mode().treats() {
        warn!(
            "the visit of {number} sealed emulator data, but stage `{}` does not treat: left out",
            patient.stage.name
        );
        return None;
    }
    if sealed.commit() != intake.head {
        warn!(
            "the emulator data of the visit of {number} is of commit {}, not {}, the head this job records: left out",
            sealed.commit(),
            intake.head
        );
        return None;
    }
    Some(Box::new(sealed))
}

/// The schema's reading a treatment's visit sealed with no data: the body of
/// a CHECKPOINT note, kept only when it reads as one and names the head this
/// job records (the visit job read it from its own exports, as it made the
/// data it would otherwise have sealed).
fn sealed_schema(patient: &Patient<'_>, from: &Path, intake: &Intake) -> Option<String> {
    let number = patient.issue.number;
    let body = match shared::open_schema(from) {
        Ok(body) => body?,
        Err(why) => {
            warn!("the schema reading of the visit of {number} is left out: {why}");
            return None;
        }
    };
    let names_head = crate::rules::discharge_audit::read_checkpoint(&body).is_some_and(|(c, _)| c == intake.head);
    if !patient.stage.mode().treats() || !names_head {
        warn!("the schema reading of the visit of {number} is not of the head this job records: left out");
        return None;
    }
    Some(body)
}

/// A treatment the merge queue sent back because its check failed combined
/// with others: the fellow brings the branch up to the base (where those
/// others are) as a resolution does, so its rebase is taken in like one.
/// Only the engine writes the queue's note.
fn sent_back_by_the_queue(patient: &Patient<'_>) -> bool {
    patient.stage.mode() == crate::config::Mode::Treat
        && patient.chart.iter().rfind(|n| n.kind == NoteKind::DischargeChecklist).is_some_and(|n| {
            n.meta.role == crate::chart::ENGINE_ROLE
                && matches!(Opening::of(&n.body), Some(Opening::IntegrationFailed | Opening::MergeConflict))
        })
}
