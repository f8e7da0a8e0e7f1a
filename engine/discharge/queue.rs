//! The merge queue. With `integration` in ward.yml, a passed audit does not
//! merge: the patient is enqueued (its audited head pinned) and rests at
//! `integration.queued_label`. The queue takes patients in order; for each
//! it merges the branch into the current base in a fresh checkout, runs the
//! integration check there, and merges the pull request only when the
//! check passed and the base is still the one it checked. A failed check
//! sends the patient back to treatment with the output and the patients it
//! was combined with: those the queue merged that the branch had not seen.
//! A conflict goes to the resolving stage (`mode: resolve`; treatment when
//! the pipeline has none) with the conflicting hunks and the plans of the
//! patients merged before it; the fellow rebases the branch, and the
//! resolution goes through code review, the audit and the queue again.
//!
//! The queue's state lives in the sweep's state slot (compare-and-swap on
//! both forges). An entry leaves the queue only after its outcome was
//! recorded, so a crash repeats the check, never skips it. The local forge
//! runs the queue through `ward run`; on GitHub nothing runs it yet (see
//! docs/architecture.md), so discharge merges directly there.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use chrono::{DateTime, Utc};
use git2::{Oid, Repository};

use crate::chart::{ENGINE_ROLE, Note, NoteKind, NoteMeta, Seen};
use crate::config::{AUDIT_FAILED, Config, IntegrationConfig, Mode};
use crate::forge::{Forge, Issue, IssueNumber, PullRequest};
use crate::sweep::{MergedEntry, QueueEntry, load_state, update_state};
use crate::transfer::{Move, transfer};

/// How much of the check's output a note quotes.
const OUTPUT_TAIL_BYTES: usize = 3000;

/// The integration the queue runs, when this forge runs ward's queue.
pub fn active<'c>(forge: &dyn Forge, config: &'c Config) -> Option<&'c IntegrationConfig> {
    config.integration.as_ref().filter(|_| forge.runs_merge_queue())
}

/// Puts an audited patient in the queue (once, at the end; again at the
/// end with a new head). Returns how many wait ahead of it. The caller
/// moves it to the queued label.
pub async fn enqueue(
    forge: &dyn Forge,
    issue: IssueNumber,
    pull: &PullRequest,
    now: DateTime<Utc>,
) -> anyhow::Result<usize> {
    let entry = QueueEntry { issue, pull: pull.number, head: pull.head_sha.clone(), since: now };
    let ahead = update_state(forge, |s| {
        let q = &mut s.merge_queue.waiting;
        if let Some(at) = q.iter().position(|e| *e == entry || (e.issue == issue && e.head == entry.head)) {
            return Ok::<_, ()>(at);
        }
        q.retain(|e| e.issue != issue);
        q.push(entry.clone());
        Ok(q.len() - 1)
    })
    .await?;
    Ok(ahead.unwrap_or(0))
}

/// What the queue did with one patient, one sentence.
pub struct Processed {
    pub issue: IssueNumber,
    pub line: String,
    /// The patient was merged and discharged: its worktree can go.
    pub merged: bool,
}

/// Integrates the first patient in the queue in `repository` and records
/// the outcome; `None` when the queue is empty.
pub async fn process_next(
    forge: &dyn Forge,
    config: &Config,
    repository: &Path,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<Processed>> {
    let Some(integration) = &config.integration else { return Ok(None) };
    let state = load_state(forge).await?;
    let Some(entry) = state.merge_queue.waiting.first().cloned() else { return Ok(None) };
    let issue = forge.issue(entry.issue).await?;
    let run = format!("merge-queue-{}", now.format("%Y%m%dT%H%M%S%3f"));
    let meta = |stage: &str| NoteMeta { run: run.clone(), stage: stage.into(), role: ENGINE_ROLE.into(), at: now };
    let pull = forge.pull_request_for_branch(&super::audit::patient_branch(entry.issue)).await?;
    let line = match pull.filter(|p| p.head_sha == entry.head && p.number == entry.pull) {
        _ if !issue.labels.contains(&integration.queued_label) => {
            format!("{} left the merge queue: it no longer rests at `{}`", entry.issue, integration.queued_label)
        }
        None => back_to_discharge(forge, config, &issue, &entry, meta("merge-queue")).await?,
        Some(pull) => {
            let checked = integrate(repository, &pull, integration, &run, entry.issue.0).await?;
            record(forge, config, &issue, &entry, &pull, checked, (repository, &state.merge_queue.merged), &run, now)
                .await?
        }
    };
    update_state(forge, |s| {
        s.merge_queue.waiting.retain(|e| e != &entry);
        Ok::<_, ()>(())
    })
    .await?
    .ok();
    let merged = forge.issue(entry.issue).await?.labels.contains(&config.discharge.discharged_label);
    Ok(Some(Processed { issue: entry.issue, line, merged }))
}

/// The head moved since the audit (or the pull request is gone): audited again.
async fn back_to_discharge(
    forge: &dyn Forge,
    config: &Config,
    issue: &Issue,
    entry: &QueueEntry,
    meta: NoteMeta,
) -> anyhow::Result<String> {
    let Some(stage) = config.audit_stage() else { anyhow::bail!("the pipeline has no auditing stage") };
    let body = format!(
        "Left the merge queue: pull request #{} is no longer at the audited head {}. The audit is taken again.",
        entry.pull, entry.head
    );
    let note = Note { kind: NoteKind::Waiting, meta, body };
    let to = stage.config.label.clone();
    transfer(forge, config, issue, Seen::NotRead, vec![note], Move::To(to.clone())).await?;
    Ok(format!("{} left the merge queue for `{to}`: its head moved since the audit", entry.issue))
}

/// What the integration found.
enum Checked {
    /// The check passed on `tested` (the base `base` and the head combined).
    Passed {
        base: String,
        tested: String,
    },
    Failed {
        base: String,
        output: String,
    },
    Conflict {
        base: String,
        files: Vec<String>,
        hunks: String,
    },
}

/// The branch merged into the current base as a commit of its own (no
/// branch moves), checked out in a fresh worktree, the check run there.
async fn integrate(
    repository: &Path,
    pull: &PullRequest,
    integration: &IntegrationConfig,
    run: &str,
    issue: u64,
) -> anyhow::Result<Checked> {
    let (repo_path, base_branch, head) = (repository.to_path_buf(), pull.base_branch.clone(), pull.head_sha.clone());
    let combined = tokio::task::spawn_blocking(move || combine(&repo_path, &base_branch, &head)).await??;
    let (base, tested) = match combined {
        Combined::Conflict { base, files, hunks } => return Ok(Checked::Conflict { base, files, hunks }),
        Combined::Commit { base, tested } => (base, tested),
    };
    let parent = repository.join(".ward/integration");
    // Checkouts a crashed `ward run` left (one runner at a time holds the
    // lock, so none is in use) go before a new one is made.
    for stale in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
        remove_worktree(repository, &stale.path());
    }
    let dir = parent.join(run);
    let add = crate::workspace::git::run(
        {
            let mut c = crate::workspace::git::local(repository);
            c.args(["worktree", "add", "--detach", "--quiet"]).arg(&dir).arg(&tested);
            c
        },
        "worktree add",
        None,
    );
    add.with_context(|| format!("could not check out the integration of {tested} in {}", dir.display()))?;
    // A fresh emulator for the check, when configured: removed after it.
    let emulator = match &integration.emulator {
        Some(config) => {
            let expires = integration.time_limit + std::time::Duration::from_secs(15 * 60);
            let started = crate::workspace::CheckEmulator::start(repository, config, issue, run, &dir, expires).await;
            match started {
                Ok(em) => Some(em),
                Err(e) => {
                    remove_worktree(repository, &dir);
                    return Err(anyhow::Error::new(e).context("could not start the integration check's emulator"));
                }
            }
        }
        None => None,
    };
    let vars = emulator.as_ref().map(|e| e.vars().clone()).unwrap_or_default();
    let result = run_check(&dir, integration, &vars).await;
    let stopped = match emulator {
        Some(em) => em.stop().await.map(|_| ()),
        None => Ok(()),
    };
    remove_worktree(repository, &dir);
    stopped.context("the integration check's emulator was not removed")?;
    let (ok, output) = result?;
    Ok(if ok { Checked::Passed { base, tested } } else { Checked::Failed { base, output } })
}

enum Combined {
    Commit { base: String, tested: String },
    Conflict { base: String, files: Vec<String>, hunks: String },
}

/// The head merged into the base's tip: the head itself when the base is
/// behind it, else a merge commit written to the object store only.
fn combine(repository: &Path, base_branch: &str, head: &str) -> anyhow::Result<Combined> {
    let repo =
        Repository::open(repository).with_context(|| format!("{} is not a git repository", repository.display()))?;
    let base = repo
        .refname_to_id(&format!("refs/heads/{base_branch}"))
        .with_context(|| format!("the base branch `{base_branch}` does not exist"))?;
    let head = Oid::from_str(head).with_context(|| format!("`{head}` is not a commit id"))?;
    let head_commit =
        repo.find_commit(head).with_context(|| format!("the audited head {head} is not in the repository"))?;
    if base == head || repo.graph_descendant_of(head, base)? {
        return Ok(Combined::Commit { base: base.to_string(), tested: head.to_string() });
    }
    let base_commit = repo.find_commit(base)?;
    let mut index = repo.merge_commits(&base_commit, &head_commit, None)?;
    if index.has_conflicts() {
        let conflicts: Vec<git2::IndexConflict> = index.conflicts()?.filter_map(Result::ok).collect();
        let mut files: Vec<String> = conflicts
            .iter()
            .filter_map(|c| c.our.as_ref().or(c.their.as_ref()).or(c.ancestor.as_ref()))
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        files.dedup();
        let hunks = conflicts.iter().map(|c| conflict_hunks(&repo, c)).collect::<Vec<_>>().join("\n");
        return Ok(Combined::Conflict { base: base.to_string(), files, hunks });
    }
    let tree = repo.find_tree(index.write_tree_to(&repo)?)?;
    let who = git2::Signature::now("ward merge queue", "merge-queue@ward.invalid")?;
    let message = format!("ward: integration of {head} into {base_branch} at {base}");
    let tested = repo.commit(None, &who, &who, &message, &tree, &[&base_commit, &head_commit])?;
    Ok(Combined::Commit { base: base.to_string(), tested: tested.to_string() })
}

/// How many lines of one conflicting file the note quotes.
const HUNK_LINES: usize = 60;

/// One conflicting file as the fellow needs it: the conflicting hunks with
/// git's markers (the base's side first), or, when the file has no common
/// ancestor (both added it), both versions.
fn conflict_hunks(repo: &Repository, c: &git2::IndexConflict) -> String {
    let path = |e: &git2::IndexEntry| String::from_utf8_lossy(&e.path).into_owned();
    let blob = |e: &git2::IndexEntry| {
        repo.find_blob(e.id).map(|b| String::from_utf8_lossy(b.content()).into_owned()).unwrap_or_default()
    };
    let head = |text: &str| text.lines().take(HUNK_LINES).collect::<Vec<_>>().join("\n");
    match (&c.ancestor, &c.our, &c.their) {
        (Some(a), Some(o), Some(t)) => {
            let merged = repo
                .merge_file_from_index(a, o, t, None)
                .map(|m| String::from_utf8_lossy(m.content()).into_owned())
                .unwrap_or_default();
            let mut inside = false;
            let lines: Vec<&str> = merged
                .lines()
                .filter(|l| {
                    let keep = inside || l.starts_with("<<<<<<<");
                    inside = keep && !l.starts_with(">>>>>>>");
                    keep
                })
                .take(HUNK_LINES)
                .collect();
            format!("--- {} (<<<<<<< the base, >>>>>>> this branch)\n{}", path(o), lines.join("\n"))
        }
        (_, Some(o), Some(t)) => format!(
            "--- {} in the base:\n{}\n--- {} on this branch:\n{}",
            path(o),
            head(&blob(o)),
            path(t),
            head(&blob(t))
        ),
        (_, Some(e), None) | (_, None, Some(e)) => {
            format!("--- {}: changed on one side, deleted on the other", path(e))
        }
        _ => String::new(),
    }
}

/// Runs the check in `dir` with a scrubbed environment (and `vars`, its
/// emulator's) and a time limit; (passed, the tail of its output).
async fn run_check(
    dir: &Path,
    integration: &IntegrationConfig,
    vars: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<(bool, String)> {
    let (program, args) = integration.command.split_first().context("the integration command is empty")?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).current_dir(dir).env_clear().kill_on_drop(true);
    for name in ["PATH", "HOME", "LANG", "TMPDIR"] {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.envs(vars).env("WARD_INTEGRATION", "1").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Ok((false, format!("could not start the integration check `{program}`: {e}"))),
    };
    let out = match tokio::time::timeout(integration.time_limit, child.wait_with_output()).await {
        Ok(out) => out.context("the integration check could not be waited for")?,
        Err(_) => {
            let limit = humantime::format_duration(integration.time_limit);
            return Ok((false, format!("the integration check was stopped at its time limit of {limit}")));
        }
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let start = text.len().saturating_sub(OUTPUT_TAIL_BYTES);
    let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    let tail = format!("exit status: {}\n{}", out.status, &text[start..]);
    Ok((out.status.success(), tail))
}

fn remove_worktree(repository: &Path, dir: &Path) {
    let mut c = crate::workspace::git::local(repository);
    c.args(["worktree", "remove", "--force"]).arg(dir);
    if crate::workspace::git::run(c, "worktree remove", None).is_err() {
        let _ = std::fs::remove_dir_all(dir);
        let mut prune = crate::workspace::git::local(repository);
        prune.args(["worktree", "prune"]);
        let _ = crate::workspace::git::run(prune, "worktree prune", None);
    }
}

/// The patients the queue merged that the branch had not seen: what it
/// was combined with.
fn combined_with(repository: &Path, head: &str, merged: &[MergedEntry]) -> Vec<IssueNumber> {
    let Ok(repo) = Repository::open(repository) else { return Vec::new() };
    let Ok(head) = Oid::from_str(head) else { return Vec::new() };
    merged
        .iter()
        .filter(|m| {
            Oid::from_str(&m.head).is_ok_and(|o| o != head && !repo.graph_descendant_of(head, o).unwrap_or(false))
        })
        .map(|m| m.issue)
        .collect()
}

/// Merges and discharges a patient whose check passed, or sends it back.
#[allow(clippy::too_many_arguments)] // one call site, every argument a different fact
async fn record(
    forge: &dyn Forge,
    config: &Config,
    issue: &Issue,
    entry: &QueueEntry,
    pull: &PullRequest,
    checked: Checked,
    (repository, merged): (&Path, &[MergedEntry]),
    run: &str,
    now: DateTime<Utc>,
) -> anyhow::Result<String> {
    let stage = config.audit_stage().map_or("discharge", |s| s.name).to_string();
    let meta = NoteMeta { run: run.into(), stage, role: ENGINE_ROLE.into(), at: now };
    let names = |list: Vec<IssueNumber>| match list.as_slice() {
        [] => "none (the base only)".to_string(),
        l => l.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
    };
    let with = names(combined_with(repository, &entry.head, merged));
    match checked {
        Checked::Passed { base, tested } => {
            let now_base = Repository::open(repository)?.refname_to_id(&format!("refs/heads/{}", pull.base_branch))?;
            if now_base.to_string() != base {
                // The base moved while the check ran: the entry stays, checked again.
                anyhow::bail!(
                    "the base moved from {base} to {now_base} while the integration check ran; run the queue again"
                );
            }
            super::merge(forge, pull).await?;
            update_state(forge, |s| {
                let m = &mut s.merge_queue.merged;
                m.push(MergedEntry { issue: entry.issue, head: entry.head.clone() });
                let excess = m.len().saturating_sub(crate::sweep::MergeQueue::KEEP);
                m.drain(..excess);
                Ok::<_, ()>(())
            })
            .await?
            .ok();
            let body = format!(
                "Integration passed: the check ran on {tested} (base {base} with the audited head {}), combined with: \
                 {with}. Pull request #{} is merged.",
                entry.head, pull.number
            );
            let notes = vec![Note { kind: NoteKind::DischargeChecklist, meta, body }];
            super::discharge(forge, config, issue, Seen::NotRead, notes, run, now, None).await?;
            Ok(format!("{} integrated and merged (checked {tested})", entry.issue))
        }
        Checked::Failed { base, output } => {
            let body = format!(
                "Integration failed: the check `{}` failed on the audited head {} merged into the base {base}, \
                 combined with: {with}. What it printed (the end):\n\n{}",
                config.integration.as_ref().map(|i| i.command.join(" ")).unwrap_or_default(),
                entry.head,
                crate::untrusted::fence(&output, "text")
            );
            send_back(forge, config, issue, meta, body, treating_label(config)?).await?;
            Ok(format!("{} failed the integration check combined with {with}: back to treatment", entry.issue))
        }
        Checked::Conflict { base, files, hunks } => {
            let plans = merged_plans(forge, config, &combined_with(repository, &entry.head, merged)).await;
            let body = format!(
                "Integration conflict: the audited head {} does not merge into the base {base}, combined with: \
                 {with}. Conflicting files: {}. Resolve the conflict on this branch: rebase it onto `{}`, keeping \
                 what both plans intend; the resolution goes through code review like any change.\n\n\
                 The conflicting hunks:\n\n{}{plans}",
                entry.head,
                files.iter().map(|f| format!("`{}`", f.escape_debug())).collect::<Vec<_>>().join(", "),
                pull.base_branch,
                crate::untrusted::fence(&crate::untrusted::cut(&hunks, 6000, "the hunks"), "text")
            );
            // The resolving stage owns a conflict; a pipeline without one
            // sends it back to treatment.
            let (to, stage) = match config.resolving_stage() {
                Some(r) => (r.config.label.clone(), r.name),
                None => (treating_label(config)?, "treatment"),
            };
            send_back(forge, config, issue, meta, body, to).await?;
            Ok(format!("{} conflicts with the base (combined with {with}): to {stage}", entry.issue))
        }
    }
}

/// The treatment plans of the merged patients a conflict was combined
/// with, each fenced (agent text), for the fellow who resolves it.
async fn merged_plans(forge: &dyn Forge, config: &Config, with: &[IssueNumber]) -> String {
    let sentinels = crate::chart::Sentinels::new(&config.sentinel_prefix);
    let mut out = String::new();
    for n in with {
        let Ok(Some(chart)) = forge.read_chart(*n).await else { continue };
        let Ok(notes) = sentinels.parse_chart(&chart.text) else { continue };
        let plan = notes.iter().rfind(|n| matches!(n.kind, NoteKind::TreatmentPlan | NoteKind::RevisedPlan));
        if let Some(plan) = plan {
            let text = crate::untrusted::cut(&plan.body, 3000, "the plan");
            let fenced = crate::untrusted::fence(&text, "markdown");
            out.push_str(&format!("\n\nThe plan of {n}, merged before this patient:\n\n{fenced}"));
        }
    }
    out
}

/// The treating stage's label, where a failed integration goes.
fn treating_label(config: &Config) -> anyhow::Result<String> {
    config
        .stages()
        .find(|s| s.mode() == Mode::Treat)
        .map(|s| s.config.label.clone())
        .context("the pipeline has no treating stage")
}

/// Back to `to` (the treating or the resolving stage) with what went
/// wrong; `audit-failed`, so the send-back limit counts it.
async fn send_back(
    forge: &dyn Forge,
    config: &Config,
    issue: &Issue,
    meta: NoteMeta,
    body: String,
    to: String,
) -> anyhow::Result<()> {
    let notes = vec![
        Note { kind: NoteKind::DischargeChecklist, meta: meta.clone(), body },
        Note { kind: NoteKind::Outcome, meta, body: AUDIT_FAILED.into() },
    ];
    transfer(forge, config, issue, Seen::NotRead, notes, Move::To(to)).await?;
    Ok(())
}
