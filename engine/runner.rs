//! `ward run`: the local hospital runs itself. The local forge appends every
//! dispatch to `.ward/forge/dispatches.jsonl`: the engine's after a label
//! moves, the sweep's re-triggers, and `ward admit`'s (the labeled event a
//! person's label sends on GitHub). The runner takes them in order and runs
//! each stage as its workflow would in Actions, until the queue is empty and
//! every patient rests.
//!
//! An entry is marked consumed only after its run ends, so a crash loses
//! nothing: the next `ward run` starts that entry again, and the stage's
//! guards (the label must still be on; one run per patient) make a repeat
//! harmless. The pipeline's own limits (stage visits, send-backs) send a
//! looping patient to the chiefs; the runner still stops on its own when a
//! patient runs more stages than those limits allow, and says so.

use std::collections::BTreeMap;

use anyhow::Context;

use crate::forge::local::LocalForge;
use crate::forge::{Forge, IssueNumber, IssueState};
use crate::hospital::Hospital;
use crate::stage::{self, StageRequest, StageResult};

/// What one `ward run` did.
#[derive(Debug, Default)]
pub struct Drained {
    /// Stage runs, in order.
    pub runs: usize,
    /// Runs that failed (an error) or were invalid.
    pub failed: usize,
    /// Why the runner stopped before the queue was empty.
    pub stopped: Option<String>,
    /// Where each open patient is afterwards, one sentence each.
    pub patients: Vec<String>,
    /// What the merge queue did, one sentence per patient it took.
    pub integrated: Vec<String>,
    /// For each of `integrated`, how many stage runs came before it.
    pub integrated_after: Vec<usize>,
}

/// The most stage runs one patient may take in one drain by default: the
/// stage visits the budget allows (40 when that limit is off), plus one
/// refusal per stage.
pub fn default_run_limit(h: &Hospital) -> usize {
    let visits = match h.config.departments.budget.patient_stage_visits {
        0 => 40,
        n => n as usize,
    };
    visits + h.config.stages().count() + 2
}

/// Drains the queue, at most `limit` stage runs per patient. `report`
/// hears about every run as it ends.
pub async fn drain(
    h: &Hospital,
    forge: &LocalForge,
    limit: usize,
    report: &mut dyn FnMut(IssueNumber, &anyhow::Result<StageResult>),
) -> anyhow::Result<Drained> {
    let Some(_lock) = forge.try_lock_runner()? else {
        anyhow::bail!(
            "another `ward run` is draining the queue of {} (it holds its lock); wait for it to finish",
            forge.describe()
        );
    };
    let mut out = Drained::default();
    let mut per_patient: BTreeMap<IssueNumber, usize> = BTreeMap::new();
    loop {
        let queue = forge.dispatches()?;
        let done = forge.consumed()?.min(queue.len());
        let Some(entry) = queue.get(done) else {
            // Nothing dispatched: the merge queue takes its next patient
            // (a patient it sends back is dispatched, and the loop goes on).
            let plan = h.workspace_plan()?;
            match crate::discharge::queue::process_next(&*h.forge, &h.config, &h.root, plan, h.now()).await? {
                Some(done) => {
                    // A merged patient takes its worktree along, as a
                    // discharge in a stage run does.
                    if done.merged
                        && let Some(plan) = h.workspace_plan()?
                    {
                        plan.release(&h.root, done.issue.0).await.with_context(|| {
                            format!(
                                "{} was merged, but its worktree or its checkpoints could not be removed",
                                done.issue
                            )
                        })?;
                    }
                    out.integrated.push(done.line);
                    out.integrated_after.push(out.runs);
                    continue;
                }
                None => break,
            }
        };
        let count = per_patient.entry(entry.issue).or_default();
        if *count >= limit {
            out.stopped = Some(format!(
                "stopped: patient {} ran {count} stages in this `ward run`, the most one run allows ({limit}; \
                 `--max-runs`); a patient that goes on is looping. Read its chart (`ward chart notes {}`); the \
                 rest of the queue ({} entries) waits for the next `ward run`",
                entry.issue,
                entry.issue.0,
                queue.len() - done
            ));
            break;
        }
        *count += 1;
        let req = StageRequest { label: entry.label.clone(), ..StageRequest::new(entry.issue) };
        let result = stage::run_stage(h, &req).await;
        out.runs += 1;
        match &result {
            Ok(r) if r.is_failure() => out.failed += 1,
            Err(_) => out.failed += 1,
            Ok(StageResult::Moved(t)) if !t.dispatched && h.config.stage_by_label(&t.to).is_some() => {
                // `dispatch: label`: on GitHub the label's own event starts
                // the next stage; here the runner queues that event.
                forge.dispatch_stage(t.issue, &t.to).await?;
            }
            Ok(_) => {}
        }
        report(entry.issue, &result);
        forge.mark_consumed(done + 1).context("could not mark the dispatch done")?;
    }
    let queue = forge.dispatches()?;
    let queued: Vec<IssueNumber> = queue[forge.consumed()?.min(queue.len())..].iter().map(|d| d.issue).collect();
    out.patients = whereabouts(h, forge, &queued).await?;
    Ok(out)
}

/// One sentence per open patient: where it rests, or why it waits.
async fn whereabouts(h: &Hospital, forge: &LocalForge, queued: &[IssueNumber]) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for issue in forge.all_issues().await?.into_iter().filter(|i| i.state == IssueState::Open) {
        let places = h.config.places(&issue.labels);
        let line = match places.as_slice() {
            [] => continue,
            [place] if h.config.stage_by_label(place).is_none() => format!("{} rests at `{place}`", issue.number),
            [place] if queued.contains(&issue.number) => {
                format!("{} waits at `{place}`, queued for the next `ward run`", issue.number)
            }
            [place] => format!(
                "{} waits at `{place}` with nothing queued (its last run failed or was invalid; its chart says \
                 why): `ward stage --issue {}` runs it again, `ward sweep` re-triggers it once it stalls",
                issue.number, issue.number.0
            ),
            many => format!("{} carries {} ward labels ({}): keep one", issue.number, many.len(), many.join(", ")),
        };
        lines.push(line);
    }
    Ok(lines)
}
