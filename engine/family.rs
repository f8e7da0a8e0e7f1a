//! Decomposed patients: the I/O half of [`crate::rules::decomposition`].
//! Creates a parent's children (idempotently, by the marker in each child's
//! body), tells a child which of its dependencies are still open, and moves
//! labels when a child is discharged: dependents whose dependencies are all
//! discharged go to admission, and a parent whose children are all
//! discharged is discharged itself (and so on up the tree).

use std::collections::BTreeMap;

use anyhow::Context;
use tracing::info;

use crate::chart::{Note, NoteKind, NoteMeta, Seen, Sentinels};
use crate::config::{AUDIT_PASSED, Config};
use crate::forge::{Forge, Issue, IssueNumber, IssueState, LabelAction, PullState};
use crate::rules::DependencyFact;
use crate::rules::decomposition::{self, Child, Sibling};
use crate::transfer::{Move, transfer};

/// How deep the engine follows parent links (a bound against loops in
/// hand-edited data; config allows at most 5).
const MAX_ANCESTRY: usize = 16;

/// The children a parent's chart declares: its latest accepted
/// DECOMPOSITION, parsed. `None` when it has none.
pub fn declared_children(sentinels: &Sentinels, chart: Option<&str>) -> anyhow::Result<Option<Vec<Child>>> {
    let Some(text) = chart else { return Ok(None) };
    let notes = sentinels.parse_chart(text)?;
    let Some(note) = decomposition::latest_decomposition(&notes) else { return Ok(None) };
    decomposition::parse_children(&note.body)
        .map(Some)
        .map_err(|p| anyhow::anyhow!("the DECOMPOSITION in the chart cannot be read: {}", p.join("; ")))
}

async fn chart_text(forge: &dyn Forge, n: IssueNumber) -> anyhow::Result<Option<String>> {
    Ok(forge.read_chart(n).await.with_context(|| format!("could not read the chart of {n}"))?.map(|c| c.text))
}

/// The children of `parent` that exist. A child counts as discharged (it
/// keeps the discharged label here) only on the forge's facts: its issue
/// is closed, and its pull request was merged or the engine itself applied
/// the label. The label alone is a claim anyone with triage can make.
async fn siblings(
    forge: &dyn Forge,
    config: &Config,
    parent: IssueNumber,
) -> anyhow::Result<BTreeMap<String, Sibling>> {
    let issues = forge.all_issues().await.context("could not list issues to find a parent's children")?;
    let mut existing = decomposition::existing_children(parent, &issues, forge.engine_account());
    let label = &config.discharge.discharged_label;
    for sibling in existing.values_mut().filter(|s| s.labels.contains(label)) {
        let issue = issues.iter().find(|i| i.number == sibling.number);
        let closed = issue.is_some_and(|i| i.state == IssueState::Closed);
        if !(closed && discharged_in_fact(forge, label, sibling.number).await?) {
            info!(child = sibling.number.0, "carries the discharged label without being discharged; not counted");
            sibling.labels.retain(|l| l != label);
        }
    }
    Ok(existing)
}

/// Whether the forge shows `n` discharged: its branch's pull request
/// merged, or the last time `label` was applied it was by the engine.
async fn discharged_in_fact(forge: &dyn Forge, label: &str, n: IssueNumber) -> anyhow::Result<bool> {
    let branch = crate::workspace::worktree::branch_name(n.0);
    let pull = forge
        .pull_request_for_branch(&branch)
        .await
        .with_context(|| format!("could not read the pull request of {n}"))?;
    if pull.is_some_and(|p| p.state == PullState::Merged) {
        return Ok(true);
    }
    let events = forge.label_events(n).await.with_context(|| format!("could not read the label events of {n}"))?;
    let applied = events.iter().rev().find(|e| e.label == label && e.action == LabelAction::Added);
    Ok(applied.is_some_and(|e| forge.engine_account().is(&e.actor)))
}

/// How many trusted parent links lead up from `issue` (0: admitted by a person).
pub async fn depth(forge: &dyn Forge, issue: &Issue) -> anyhow::Result<usize> {
    let mut depth = 0;
    let mut current = issue.clone();
    while let Some(marker) = decomposition::trusted_marker(&current, forge.engine_account()) {
        depth += 1;
        if depth >= MAX_ANCESTRY {
            break;
        }
        current =
            forge.issue(marker.parent).await.with_context(|| format!("could not read parent {}", marker.parent))?;
    }
    Ok(depth)
}

/// The dependencies of `issue` when it is a child (empty otherwise).
pub async fn dependencies(
    forge: &dyn Forge,
    config: &Config,
    sentinels: &Sentinels,
    issue: &Issue,
) -> anyhow::Result<Vec<DependencyFact>> {
    let Some(marker) = decomposition::trusted_marker(issue, forge.engine_account()) else { return Ok(Vec::new()) };
    let Some(children) = declared_children(sentinels, chart_text(forge, marker.parent).await?.as_deref())? else {
        return Ok(Vec::new());
    };
    let existing = siblings(forge, config, marker.parent).await?;
    Ok(decomposition::dependency_facts(config, &children, &marker.key, &existing))
}

/// Creates every child of `parent` that does not exist yet, in dependency
/// order; returns the numbers of the children created now (a rerun
/// returns none). Children that start at admission are started by the
/// dispatch rule.
pub async fn create_children(
    forge: &dyn Forge,
    config: &Config,
    parent: IssueNumber,
    children: &[Child],
) -> anyhow::Result<Vec<IssueNumber>> {
    let mut existing = siblings(forge, config, parent).await?;
    let mut created = Vec::new();
    while let Some((key, new)) = decomposition::next_to_create(config, parent, children, &existing) {
        let starts = new.labels.contains(&config.admission);
        let issue =
            forge.create_issue(new).await.with_context(|| format!("could not create child `{key}` of {parent}"))?;
        info!(parent = parent.0, child = issue.number.0, key, "child created");
        if starts && config.dispatches(&config.admission, true) {
            forge.dispatch_stage(issue.number, &config.admission).await?;
        }
        created.push(issue.number);
        existing.insert(key, Sibling { number: issue.number, labels: issue.labels });
    }
    Ok(created)
}

/// After `child` was labelled discharged: unblock the siblings that were
/// waiting for it, and discharge the parent (and its parent ...) when every
/// child is. Returns what moved, for the log and the report.
pub async fn release(
    forge: &dyn Forge,
    config: &Config,
    child: &Issue,
    run: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Vec<String>> {
    let sentinels = Sentinels::new(&config.sentinel_prefix);
    let mut moved = Vec::new();
    let mut current = child.clone();
    for _ in 0..MAX_ANCESTRY {
        let Some(marker) = decomposition::trusted_marker(&current, forge.engine_account()) else { break };
        let parent = marker.parent;
        let chart = chart_text(forge, parent).await?;
        let Some(children) = declared_children(&sentinels, chart.as_deref())? else { break };
        let existing = siblings(forge, config, parent).await?;
        let plan = decomposition::after_discharge(config, &children, &existing);
        for n in &plan.unblock {
            moved.push(unblock(forge, config, *n).await?);
        }
        if !plan.parent_done {
            break;
        }
        let parent_issue = forge.issue(parent).await?;
        if parent_issue.labels.contains(&config.discharge.discharged_label) {
            break;
        }
        let note = Note {
            kind: NoteKind::Outcome,
            meta: NoteMeta::engine(run, config.audit_stage().map_or("discharge", |s| s.name), now),
            body: AUDIT_PASSED.into(),
        };
        let to = Move::To(config.discharge.discharged_label.clone());
        transfer(forge, config, &parent_issue, Seen::NotRead, vec![note], to).await?;
        moved.push(format!("{parent}: every child discharged -> `{}`", config.discharge.discharged_label));
        current = parent_issue;
    }
    Ok(moved)
}

/// A blocked child whose dependencies are all discharged goes to admission.
async fn unblock(forge: &dyn Forge, config: &Config, n: IssueNumber) -> anyhow::Result<String> {
    let issue = forge.issue(n).await?;
    transfer(forge, config, &issue, Seen::NotRead, Vec::new(), Move::To(config.admission.clone())).await?;
    Ok(format!("{n}: `{}` -> `{}`", config.decomposition.blocked_label, config.admission))
}

/// Repairs what an interrupted [`release`] may have left: blocked children
/// whose dependencies are all discharged go to admission, and waiting
/// parents whose children are all discharged are discharged. Idempotent;
/// for the charge nurse's sweep. Returns what moved.
pub async fn repair(
    forge: &dyn Forge,
    config: &Config,
    run: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Vec<String>> {
    let sentinels = Sentinels::new(&config.sentinel_prefix);
    let mut moved = Vec::new();
    for child in forge.open_issues_with_label(&config.decomposition.blocked_label).await? {
        let deps = dependencies(forge, config, &sentinels, &child).await?;
        if deps.is_empty() || deps.iter().any(|d| !d.discharged) {
            continue;
        }
        moved.push(unblock(forge, config, child.number).await?);
    }
    for parent in forge.open_issues_with_label(&config.decomposition.waiting_label).await? {
        let Some(children) = declared_children(&sentinels, chart_text(forge, parent.number).await?.as_deref())? else {
            continue;
        };
        let existing = siblings(forge, config, parent.number).await?;
        if !decomposition::after_discharge(config, &children, &existing).parent_done {
            continue;
        }
        // Discharging the parent is what releasing its last child would have done.
        let Some((_, last)) = existing.iter().next() else { continue };
        let child = forge.issue(last.number).await?;
        moved.extend(release(forge, config, &child, run, now).await?);
    }
    Ok(moved)
}
