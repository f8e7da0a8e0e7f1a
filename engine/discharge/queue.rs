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
//! One turn of the queue has two halves. [`check_next`] reads, combines
//! and runs the check, and writes nothing: its result is a [`Verdict`].
//! [`record_verdict`] reads the facts again, records the outcome and
//! merges. The local forge runs both in `ward run`; on GitHub,
//! ward-queue.yml runs the check in a job with a read-only token (the
//! check runs the patients' code) and hands the verdict, sealed, to a job
//! with the write token that runs nothing of theirs ([`Verdict::read`]).
//!
//! The queue's state lives in the sweep's state slot (compare-and-swap on
//! both forges). An entry leaves the queue only after its outcome was
//! recorded, so a crash repeats the check, never skips it.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use chrono::{DateTime, Utc};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::chart::control::{ControlLine, Opening};
use crate::chart::{Note, NoteKind, NoteMeta, Seen};
use crate::config::{AUDIT_FAILED, Config, IntegrationConfig};
use crate::forge::{Forge, Issue, IssueNumber, PullRequest};
use crate::state::{self, MergedEntry, QueueEntry};
use crate::transfer::{Move, transfer};
use crate::workspace::{CheckEmulator, WorkspacePlan};

/// How much of the check's output a note quotes.
const OUTPUT_TAIL_BYTES: usize = 3000;

/// The integration the queue runs, when this forge runs ward's queue.
pub fn active<'c>(forge: &dyn Forge, config: &'c Config) -> Option<&'c IntegrationConfig> {
    config.integration.as_ref().filter(|_| forge.runs_merge_queue())
}

/// Puts an audited patient in the queue (once, at the end; again at the
/// end with a new head). Returns how many wait ahead of it. The caller
/// moves it to the queued label, then calls [`start`].
pub async fn enqueue(
    forge: &dyn Forge,
    issue: IssueNumber,
    pull: &PullRequest,
    now: DateTime<Utc>,
) -> anyhow::Result<usize> {
    let entry = QueueEntry { issue, pull: pull.number, head: pull.head_sha.clone(), since: now };
    let ahead = state::update(forge, |s| {
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

/// The WAITING note of a patient ward's queue took.
pub fn queued_note(integration: &IntegrationConfig, pull: &PullRequest, ahead: usize) -> String {
    format!(
        "{} pull request #{} at the audited head {} into `{}`, {ahead} ahead of it. The integration check `{}` \
         runs on it merged into the base's tip, and it is merged only if the check passes there.\n{}",
        Opening::InWardQueue,
        pull.number,
        pull.head_sha,
        pull.base_branch,
        integration.command.join(" ").escape_debug(),
        ControlLine::Head(&pull.head_sha)
    )
}

/// Starts a turn of the queue where a workflow runs it (after the patient
/// moved to the queued label, so the turn finds it there). A dispatch
/// that fails is logged: the sweep starts a queue that waits.
pub async fn start(forge: &dyn Forge) {
    if let Err(e) = forge.dispatch_merge_queue().await {
        tracing::warn!("could not start ward's merge queue ({e}); the sweep starts it");
    }
}

/// What one turn of the queue did with its first patient, one sentence.
pub struct Processed {
    pub issue: IssueNumber,
    pub line: String,
    /// The patient was merged and discharged: its worktree can go.
    pub merged: bool,
}

/// What the check half found for the queue's first entry: everything the
/// recording half needs, and nothing it must trust beyond the entry it
/// names (it reads the facts again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub entry: QueueEntry,
    /// The run id the notes carry (`merge-queue-<time>`).
    pub run: String,
    pub found: Found,
    /// The patients the queue merged that the branch had not seen.
    pub combined_with: Vec<IssueNumber>,
}

/// What the integration found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Found {
    /// Not checked: the patient left the queued label, or its pull request
    /// is no longer at the audited head (the recording half reads which).
    Stale {
        why: String,
    },
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

/// The file a verdict is sealed in, in the folder the workflow hands on.
pub const VERDICT_FILE: &str = "verdict.json";
/// The most a sealed verdict may weigh: its output and hunks are cut far below.
const VERDICT_MAX_BYTES: u64 = 256 * 1024;

impl Verdict {
    /// Seals the verdict into `dir` (made if missing).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
        let path = dir.join(VERDICT_FILE);
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&path, text).with_context(|| format!("could not write the verdict to {}", path.display()))
    }

    /// Reads a verdict the check job sealed in `dir`, as hostile input: the
    /// check ran the patients' code in that job, which could rewrite it.
    /// What it may claim is bounded here; what it names (the entry, the
    /// base) is read again from the forge before anything is recorded.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(VERDICT_FILE);
        let size = std::fs::symlink_metadata(&path)
            .with_context(|| format!("no verdict at {}: the check job sealed none", path.display()))?;
        if !size.is_file() || size.len() > VERDICT_MAX_BYTES {
            anyhow::bail!(
                "the verdict at {} is not a plain file of at most {VERDICT_MAX_BYTES} bytes; nothing was recorded",
                path.display()
            );
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))?;
        let verdict: Verdict = serde_json::from_str(&text)
            .with_context(|| format!("the verdict at {} is not one `ward queue check` writes", path.display()))?;
        verdict.check().map_err(|why| {
            anyhow::anyhow!("the verdict at {} is refused: {why}; nothing was recorded", path.display())
        })?;
        Ok(verdict)
    }

    /// One line for the check job's log.
    pub fn summary(&self) -> String {
        let (n, head) = (self.entry.issue, &self.entry.head);
        match &self.found {
            Found::Stale { why } => format!("{n} was not checked: {why}"),
            Found::Passed { base, tested } => {
                format!("{n}: the integration check passed on {tested} (base {base} with head {head})")
            }
            Found::Failed { base, .. } => format!("{n}: the integration check failed on base {base} with head {head}"),
            Found::Conflict { base, files, .. } => {
                format!("{n}: head {head} conflicts with base {base} in {} files", files.len())
            }
        }
    }

    /// The bounds of what the check half writes.
    fn check(&self) -> Result<(), OutOfBounds> {
        let commit = |what: &'static str, id: &str| {
            let hex = id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
            if hex && (id.len() == 40 || id.len() == 64) { Ok(()) } else { Err(OutOfBounds::NotACommit(what)) }
        };
        commit("the entry's head", &self.entry.head)?;
        let run_ok = self
            .run
            .strip_prefix("merge-queue-")
            .is_some_and(|t| !t.is_empty() && t.len() <= 32 && t.bytes().all(|b| b.is_ascii_alphanumeric()));
        if !run_ok {
            return Err(OutOfBounds::RunId);
        }
        if self.combined_with.len() > crate::state::MergeQueue::KEEP {
            return Err(OutOfBounds::Combined);
        }
        let bounded = |what: &'static str, text: &str, max: usize| {
            if text.len() <= max { Ok(()) } else { Err(OutOfBounds::TooLong { what, max }) }
        };
        match &self.found {
            Found::Stale { why } => bounded("the reason", why, 1000),
            Found::Passed { base, tested } => commit("the base", base).and(commit("the tested commit", tested)),
            Found::Failed { base, output } => commit("the base", base).and(bounded("the output", output, 8000)),
            Found::Conflict { base, files, hunks } => {
                commit("the base", base)?;
                if files.len() > 200 || files.iter().any(|f| f.len() > 1000) {
                    return Err(OutOfBounds::Files);
                }
                bounded("the hunks", hunks, 64 * 1024)
            }
        }
    }
}

/// A bound a sealed verdict breaks: why it is refused.
#[derive(Debug, thiserror::Error)]
enum OutOfBounds {
    #[error("{0} is not a commit id")]
    NotACommit(&'static str),
    #[error("its run id is not `merge-queue-<time>`")]
    RunId,
    #[error("it names more combined patients than the queue keeps")]
    Combined,
    #[error("{what} is longer than {max} bytes")]
    TooLong { what: &'static str, max: usize },
    #[error("its conflicting files are more than 200, or a name is longer than 1000 bytes")]
    Files,
}

/// Where the check finds the base and the patient's branch.
pub enum Source<'a> {
    /// In the repository itself (`refs/heads/`): the local forge.
    Local,
    /// Fetched from the forge first into `refs/remotes/origin/` (GitHub's
    /// check job, a fresh checkout, with its read-only token).
    Remote(&'a crate::workspace::PushTarget),
}

/// One whole turn: the check, then the record; `None` when the queue is
/// empty. The local forge's `ward run`.
pub async fn process_next(
    forge: &dyn Forge,
    config: &Config,
    repository: &Path,
    plan: Option<&WorkspacePlan>,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<Processed>> {
    let checked = check_next(forge, config, repository, plan, &Source::Local, now).await?;
    let Some(verdict) = checked else { return Ok(None) };
    record_verdict(forge, config, verdict, now).await.map(Some)
}

/// The check half: reads the queue's first entry, its patient and pull
/// request, combines the audited head with the base's tip in `repository`
/// and runs the integration check there, its emulator (if any) under the
/// hospital's workspace `plan`. Writes nothing to the forge. `None` when
/// the queue is empty (or ward.yml has no `integration`).
pub async fn check_next(
    forge: &dyn Forge,
    config: &Config,
    repository: &Path,
    plan: Option<&WorkspacePlan>,
    source: &Source<'_>,
    now: DateTime<Utc>,
) -> anyhow::Result<Option<Verdict>> {
    let Some(integration) = &config.integration else { return Ok(None) };
    let state = state::load(forge).await?;
    let Some(entry) = state.merge_queue.waiting.first().cloned() else { return Ok(None) };
    let run = format!("merge-queue-{}", now.format("%Y%m%dT%H%M%S%3f"));
    let verdict = |found| Verdict { entry: entry.clone(), run: run.clone(), found, combined_with: Vec::new() };
    let issue = forge.issue(entry.issue).await?;
    if !issue.labels.contains(&integration.queued_label) {
        let why = format!("{} no longer rests at `{}`", entry.issue, integration.queued_label);
        return Ok(Some(verdict(Found::Stale { why })));
    }
    let branch = super::audit::patient_branch(entry.issue);
    let pull = forge.pull_request_for_branch(&branch).await?;
    let Some(pull) = pull.filter(|p| p.head_sha == entry.head && p.number == entry.pull) else {
        let why = format!("pull request #{} is no longer at the audited head {}", entry.pull, entry.head);
        return Ok(Some(verdict(Found::Stale { why })));
    };
    let base_ref = match source {
        Source::Local => format!("refs/heads/{}", pull.base_branch),
        Source::Remote(remote) => {
            let git_dir = Repository::open(repository)
                .with_context(|| format!("{} is not a git checkout", repository.display()))?
                .commondir()
                .to_path_buf();
            let remote = (*remote).clone();
            let (base, head) = (pull.base_branch.clone(), branch.clone());
            let fetched = tokio::task::spawn_blocking(move || {
                let token = remote.token.as_deref();
                let base_found = crate::workspace::git::fetch_branch(&git_dir, &remote.url, &base, token)?;
                let head_found = crate::workspace::git::fetch_branch(&git_dir, &remote.url, &head, token)?;
                Ok::<_, crate::workspace::worktree::WorktreeError>((base_found, head_found))
            })
            .await?
            .with_context(|| format!("could not fetch `{}` and `{branch}` to check them", pull.base_branch))?;
            if !fetched.0 {
                anyhow::bail!("the base branch `{}` of pull request #{} does not exist", pull.base_branch, pull.number);
            }
            let fetched_head = Repository::open(repository)?
                .refname_to_id(&format!("refs/remotes/origin/{branch}"))
                .ok()
                .filter(|_| fetched.1)
                .map(|o| o.to_string());
            if fetched_head.as_deref() != Some(entry.head.as_str()) {
                let why = format!("`{branch}` is no longer at the audited head {}", entry.head);
                return Ok(Some(verdict(Found::Stale { why })));
            }
            format!("refs/remotes/origin/{}", pull.base_branch)
        }
    };
    let found = integrate(repository, plan, &base_ref, &pull, integration, &run, entry.issue.0).await?;
    let combined_with = combined_with(repository, &entry.head, &state.merge_queue.merged);
    Ok(Some(Verdict { combined_with, ..verdict(found) }))
}

/// The record half: the verdict of the queue's first entry recorded. The
/// facts are read again (the entry is still first, the patient still
/// queued, its pull request still at the audited head, and for a pass the
/// base still at the commit checked); only then does the verdict count.
/// The entry leaves the queue once its outcome is recorded; a turn that
/// left entries starts the next.
pub async fn record_verdict(
    forge: &dyn Forge,
    config: &Config,
    verdict: Verdict,
    now: DateTime<Utc>,
) -> anyhow::Result<Processed> {
    let integration = config.integration.as_ref().context("ward.yml has no `integration`: no merge queue runs")?;
    let Verdict { entry, run, found, combined_with } = verdict;
    let state = state::load(forge).await?;
    if state.merge_queue.waiting.first() != Some(&entry) {
        let line =
            format!("{} was checked, but it is no longer first in the merge queue: nothing recorded", entry.issue);
        return Ok(Processed { issue: entry.issue, line, merged: false });
    }
    // Named only if the queue did merge them (the check half's list is a claim).
    let merged = &state.merge_queue.merged;
    let combined_with: Vec<IssueNumber> =
        combined_with.into_iter().filter(|n| merged.iter().any(|m| m.issue == *n)).collect();
    let issue = forge.issue(entry.issue).await?;
    let meta = |stage: &str| NoteMeta::engine(run.clone(), stage, now);
    let pull = forge.pull_request_for_branch(&super::audit::patient_branch(entry.issue)).await?;
    let (line, done) = match pull.filter(|p| p.head_sha == entry.head && p.number == entry.pull) {
        _ if !issue.labels.contains(&integration.queued_label) => (
            format!("{} left the merge queue: it no longer rests at `{}`", entry.issue, integration.queued_label),
            true,
        ),
        None => (back_to_discharge(forge, config, &issue, &entry, meta("merge-queue")).await?, true),
        Some(pull) => {
            let facts = Combination { entry: &entry, pull: &pull, with: &combined_with, run: &run };
            record(forge, config, &issue, facts, found, now).await?
        }
    };
    if done {
        state::update(forge, |s| {
            s.merge_queue.waiting.retain(|e| e != &entry);
            Ok::<_, ()>(())
        })
        .await?
        .ok();
    }
    let merged = forge.issue(entry.issue).await?.labels.contains(&config.discharge.discharged_label);
    if !state::load(forge).await?.merge_queue.waiting.is_empty() {
        start(forge).await;
    }
    Ok(Processed { issue: entry.issue, line, merged })
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

/// The branch merged into the current base as a commit of its own (no
/// branch moves), checked out in a fresh worktree, the check run there.
async fn integrate(
    repository: &Path,
    plan: Option<&WorkspacePlan>,
    base_ref: &str,
    pull: &PullRequest,
    integration: &IntegrationConfig,
    run: &str,
    issue: u64,
) -> anyhow::Result<Found> {
    let (repo_path, base_ref, head) = (repository.to_path_buf(), base_ref.to_string(), pull.head_sha.clone());
    let (base_name, base_branch) = (base_ref.clone(), pull.base_branch.clone());
    let combined = tokio::task::spawn_blocking(move || combine(&repo_path, &base_name, &base_branch, &head)).await??;
    let (base, tested) = match combined {
        Combined::Conflict { base, files, hunks } => return Ok(Found::Conflict { base, files, hunks }),
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
            let started = match plan {
                Some(plan) => CheckEmulator::start(plan, config, issue, run, &dir, expires).await.map_err(Into::into),
                None => Err(anyhow::anyhow!("{} has no workspace (is it a git checkout?)", repository.display())),
            };
            match started {
                Ok(em) => Some(em),
                Err(e) => {
                    remove_worktree(repository, &dir);
                    return Err(e.context("could not start the integration check's emulator"));
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
    Ok(if ok { Found::Passed { base, tested } } else { Found::Failed { base, output } })
}

enum Combined {
    Commit { base: String, tested: String },
    Conflict { base: String, files: Vec<String>, hunks: String },
}

/// The head merged into the base's tip (`base_ref`, the branch
/// `base_branch` as this repository has it): the head itself when the base
/// is behind it, else a merge commit written to the object store only.
fn combine(repository: &Path, base_ref: &str, base_branch: &str, head: &str) -> anyhow::Result<Combined> {
    let repo =
        Repository::open(repository).with_context(|| format!("{} is not a git repository", repository.display()))?;
    let base = repo
        .refname_to_id(base_ref)
        .with_context(|| format!("the base branch `{base_branch}` does not exist (no `{base_ref}`)"))?;
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
    let waited = tokio::time::timeout(integration.time_limit, child.wait_with_output()).await;
    // What the check left running (a daemonised child) dies before the
    // verdict is written (`ward queue check` is the subreaper of the check).
    crate::agent::reap_orphans();
    let out = match waited {
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
    let tail = format!("{}\n{}", out.status, &text[start..]);
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

/// The entry being recorded, as the record half read it again.
struct Combination<'a> {
    entry: &'a QueueEntry,
    pull: &'a PullRequest,
    /// The merged patients it was combined with.
    with: &'a [IssueNumber],
    run: &'a str,
}

/// Merges and discharges a patient whose check passed, or sends it back;
/// one the check found moved, and which has not, is checked again. (the
/// line, whether the entry leaves the queue).
async fn record(
    forge: &dyn Forge,
    config: &Config,
    issue: &Issue,
    c: Combination<'_>,
    found: Found,
    now: DateTime<Utc>,
) -> anyhow::Result<(String, bool)> {
    let Combination { entry, pull, with: combined, run } = c;
    let stage = config.audit_stage().map_or("discharge", |s| s.name).to_string();
    let meta = NoteMeta::engine(run, stage, now);
    let with = match combined {
        [] => "none (the base only)".to_string(),
        l => l.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
    };
    let line = match found {
        Found::Stale { .. } => {
            let line = format!("{} is checked again: the check found it had moved, and it has not", entry.issue);
            return Ok((line, false));
        }
        Found::Passed { base, tested } => {
            let now_base = forge.branch_tip(&pull.base_branch).await?;
            if now_base.as_deref() != Some(base.as_str()) {
                // The base moved while the check ran: the entry stays, checked again.
                let now_base = now_base.unwrap_or_else(|| "nothing (the branch is gone)".into());
                let line = format!(
                    "{}: the base `{}` moved from {base} to {now_base} while the integration check ran; it is \
                     checked again",
                    entry.issue, pull.base_branch
                );
                return Ok((line, false));
            }
            super::merge(forge, pull).await?;
            state::update(forge, |s| {
                let m = &mut s.merge_queue.merged;
                m.push(MergedEntry { issue: entry.issue, head: entry.head.clone() });
                let excess = m.len().saturating_sub(crate::state::MergeQueue::KEEP);
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
            format!("{} integrated and merged (checked {tested})", entry.issue)
        }
        Found::Failed { base, output } => {
            let body = format!(
                "{} the check `{}` failed on the audited head {} merged into the base {base}, combined with: \
                 {with}. What it printed (the end):\n\n{}",
                Opening::IntegrationFailed,
                config.integration.as_ref().map(|i| i.command.join(" ")).unwrap_or_default(),
                entry.head,
                crate::untrusted::fence(&output, "text")
            );
            send_back(forge, config, issue, meta, body, treating_label(config)?).await?;
            format!("{} failed the integration check combined with {with}: back to treatment", entry.issue)
        }
        Found::Conflict { base, files, hunks } => {
            let plans = merged_plans(forge, config, combined).await;
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
            format!("{} conflicts with the base (combined with {with}): to {stage}", entry.issue)
        }
    };
    Ok((line, true))
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
    config.treating_stage().map(|s| s.config.label.clone()).context("the pipeline has no treating stage")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(found: Found) -> Verdict {
        let entry = QueueEntry {
            issue: IssueNumber(7),
            pull: 12,
            head: "a".repeat(40),
            since: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        };
        Verdict { entry, run: "merge-queue-20261201T010203004".into(), found, combined_with: vec![IssueNumber(3)] }
    }

    #[test]
    fn a_sealed_verdict_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let v = verdict(Found::Conflict {
            base: "b".repeat(40),
            files: vec!["src/a.rs".into()],
            hunks: "<<<<<<<\n=======\n>>>>>>>".into(),
        });
        v.write(dir.path()).unwrap();
        assert_eq!(Verdict::read(dir.path()).unwrap(), v);
    }

    #[test]
    fn a_verdict_the_check_job_could_have_rewritten_is_refused_beyond_its_bounds() {
        let refused = |v: Verdict| {
            let dir = tempfile::tempdir().unwrap();
            v.write(dir.path()).unwrap();
            format!("{:#}", Verdict::read(dir.path()).unwrap_err())
        };
        let not_a_commit = verdict(Found::Passed { base: "main".into(), tested: "c".repeat(40) });
        assert!(refused(not_a_commit).contains("the base is not a commit id"));
        let mut odd_run = verdict(Found::Stale { why: "moved".into() });
        odd_run.run = "merge-queue-x; rm -rf /".into();
        assert!(refused(odd_run).contains("run id"));
        let long = verdict(Found::Failed { base: "b".repeat(40), output: "x".repeat(9000) });
        assert!(refused(long).contains("the output is longer than 8000 bytes"));
        let files =
            verdict(Found::Conflict { base: "b".repeat(40), files: vec!["f".into(); 201], hunks: String::new() });
        assert!(refused(files).contains("more than 200"));
        // Unknown fields, and a file that is not plain, are refused too.
        let dir = tempfile::tempdir().unwrap();
        let mut text = serde_json::to_value(verdict(Found::Stale { why: "moved".into() })).unwrap();
        text["merge_now"] = serde_json::json!(true);
        std::fs::write(dir.path().join(VERDICT_FILE), text.to_string()).unwrap();
        assert!(format!("{:#}", Verdict::read(dir.path()).unwrap_err()).contains("not one `ward queue check` writes"));
        let elsewhere = tempfile::tempdir().unwrap();
        verdict(Found::Stale { why: "moved".into() }).write(elsewhere.path()).unwrap();
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join(VERDICT_FILE), linked.path().join(VERDICT_FILE)).unwrap();
        assert!(format!("{:#}", Verdict::read(linked.path()).unwrap_err()).contains("not a plain file"));
        let big = tempfile::tempdir().unwrap();
        std::fs::write(big.path().join(VERDICT_FILE), vec![b' '; 300 * 1024]).unwrap();
        assert!(format!("{:#}", Verdict::read(big.path()).unwrap_err()).contains("at most 262144 bytes"));
    }
}
