//! The research role's policy change: the role (`researcher.md` in
//! `paths.roles`) runs on the findings as any agent runs (the same walls,
//! gate, private HOME, time limit and budget watch: `stage::run_framed`), in
//! a worktree of the base branch at its tip. ward then reads what it
//! changed, itself: only files under `paths.skills` and `paths.roles` are
//! accepted; anything else (the precedent log, `.github/`, ward's own
//! files, the code) refuses the whole change with a sentence, and nothing
//! is filed for it. An accepted change is committed by ward on
//! `ward/research-<key>` (the finding's key) and opened as a pull request
//! at [`PROPOSAL_LABEL`], whose body carries the key's marker and the
//! evidence. It is never merged here: it changes protected paths, so a
//! chief reviews it, and the pipeline check simulates it, as any pull
//! request that changes the pipeline.
//!
//! What it adds is scanned for credentials as a treatment's added lines
//! are (`secrets::scan`, gitleaks' rules and the values ward holds; the
//! notes its pull request quotes too): a hit refuses the whole change,
//! naming the file, the line and the rule, never the value.
//!
//! On GitHub the role runs in two jobs, as a stage does ([`seal`] in the
//! read-only visit job, [`record`] in the writing one, `super::sealed`):
//! the record job judges the change again from the sealed commit itself
//! (its paths against [`refusal`], its added lines against the scan, its
//! parent against the base's tip) before it pushes anything.
//!
//! Crash-safe at every step: a branch committed (or pushed) whose pull
//! request was not opened is opened by the next run without the agent; a
//! pull request opened but not labelled is labelled by the next run; after
//! the label, fault point `after-policy-filed`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use super::sealed::{BUNDLE_FILE, Outcome, Remote, Sealed};
use super::{MARKER, PROPOSAL_LABEL, Proposal};
use crate::agent::AgentEnd;
use crate::forge::{Forge, NewPullRequest, PullState};
use crate::hospital::Hospital;
use crate::workspace::bundle::BundleError;
use crate::workspace::git::{self, Checkout};

/// The branch of a finding's policy change.
pub const BRANCH_PREFIX: &str = "ward/research-";
/// The role's template, in `paths.roles`.
pub const TEMPLATE: &str = "researcher.md";
/// The most of the role's account a pull request quotes.
pub const SUMMARY_BUDGET: usize = 8 * 1024;
/// The most of one finding a prompt quotes.
const FINDING_BUDGET: usize = 2 * 1024;

pub fn branch(key: &str) -> String {
    format!("{BRANCH_PREFIX}{key}")
}

/// Who runs the role: the hospital (its config, prompts, repository and
/// agent), the run's id (its folder under the artifacts), and a command in
/// place of `agent.command` (a test's scripted stand-in).
pub struct Role<'a> {
    pub hospital: &'a Hospital,
    pub run: String,
    pub command: Option<Vec<String>>,
}

/// What the role's run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The policy change is pull request `pull` on `branch`.
    Opened { key: String, pull: u64, branch: String },
    /// The change was refused; nothing was filed for it.
    Refused { key: String, reason: String },
    /// The role changed nothing.
    Unchanged { key: String },
    /// The run could not be made or finished (no repository, a push the
    /// token may not make): the error's sentence. Nothing was filed for it.
    Failed { key: String, error: String },
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attempt::Opened { pull, branch, .. } => write!(
                f,
                "the research role's policy change is pull request #{pull} (`{branch}`) at `{PROPOSAL_LABEL}`, \
                 waiting for a chief"
            ),
            Attempt::Refused { reason, .. } => {
                write!(f, "the research role's change was refused: {reason}; nothing was filed for it")
            }
            Attempt::Unchanged { .. } => write!(f, "the research role proposed no change"),
            Attempt::Failed { error, .. } => {
                write!(f, "the research role's run failed: {error}; nothing was filed for its change")
            }
        }
    }
}

/// Whether the finding has a pull request of an earlier run (open, merged
/// or closed: a person's decision stands). With `label`, an open one
/// lacking the proposal label (a run killed between opening and
/// labelling) gets it; the visit job, which may not write, only reads.
pub async fn filed_before(forge: &dyn Forge, p: &Proposal, label: bool) -> anyhow::Result<bool> {
    let pulls = forge
        .pull_requests_of_branch(&branch(&p.key))
        .await
        .with_context(|| format!("the research department could not read the pull requests of `{}`", branch(&p.key)))?;
    let ours: Vec<_> = pulls
        .iter()
        .filter(|pr| forge.engine_account().is(&pr.author))
        .filter(|pr| pr.body.lines().next().and_then(|l| MARKER.captures(l)).is_some_and(|c| c[1] == *p.key))
        .collect();
    for pr in ours.iter().filter(|pr| label && pr.state == PullState::Open) {
        forge
            .label_pull_request(pr.number, PROPOSAL_LABEL)
            .await
            .with_context(|| format!("could not label pull request #{} `{PROPOSAL_LABEL}`", pr.number))?;
    }
    Ok(!ours.is_empty())
}

/// Runs the role on `target` (with every finding as evidence) and opens
/// what it changed as a pull request, or says why not. Whatever goes
/// wrong is the attempt's sentence: the deterministic proposals are still
/// filed after it.
pub async fn propose(role: &Role<'_>, forge: &dyn Forge, target: &Proposal, found: &[Proposal]) -> Attempt {
    match try_propose(role, forge, target, found).await {
        Ok(attempt) => attempt,
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "the research role's run failed");
            Attempt::Failed { key: target.key.clone(), error: format!("{e:#}") }
        }
    }
}

async fn try_propose(
    role: &Role<'_>,
    forge: &dyn Forge,
    target: &Proposal,
    found: &[Proposal],
) -> anyhow::Result<Attempt> {
    let h = role.hospital;
    let key = target.key.clone();
    let branch = branch(&key);
    if let Some(pull) = open_pushed(h, forge, target, &branch).await? {
        return Ok(Attempt::Opened { key, pull, branch });
    }
    let message = match make(role, target, found).await? {
        Made::Committed { message, .. } => message,
        Made::Refused(reason) => return Ok(Attempt::Refused { key, reason }),
        Made::Unchanged => return Ok(Attempt::Unchanged { key }),
    };
    if forge.as_local().is_none() {
        let push = h.workspace_plan()?.and_then(|p| p.push.as_ref()).context(
            "the research role's change is committed, but there is no remote to push it to (GITHUB_REPOSITORY \
             and GITHUB_ACTIONS): run it in the repository's workflow",
        )?;
        let git_dir = crate::workspace::worktree::GitRepo::open(&h.root)?.git_dir().to_path_buf();
        let (url, token, name) = (push.url.clone(), push.token.clone(), branch.clone());
        // The push waits on the network: off the async threads.
        tokio::task::spawn_blocking(move || git::push_branch(&git_dir, &url, &name, token.as_deref(), false))
            .await
            .context("the push of the research branch was cancelled")?
            .with_context(|| format!("could not push `{branch}`"))?;
    }
    let pull = open(h, forge, target, &branch, &message).await?;
    Ok(Attempt::Opened { key, pull, branch })
}

/// A change an earlier run committed (or pushed) but did not open: opened
/// now, without the agent. Only ward writes the branch: one process
/// commits it, on GitHub only the record job (the write token) pushes it.
async fn open_pushed(h: &Hospital, forge: &dyn Forge, target: &Proposal, branch: &str) -> anyhow::Result<Option<u64>> {
    let Ok(Some(_)) = forge.branch_tip(branch).await else { return Ok(None) };
    let message = forge
        .branch_commits(branch, 1)
        .await
        .ok()
        .and_then(|c| c.into_iter().next())
        .map(|c| c.message)
        .unwrap_or_default();
    open(h, forge, target, branch, &message).await.map(Some)
}

/// What ward made of the role's run in the repository at `h.root`.
enum Made {
    /// ward committed the change as `commit` on the finding's branch, on `start`.
    Committed {
        start: String,
        commit: String,
        message: String,
    },
    Refused(String),
    Unchanged,
}

/// Runs the role in a worktree of the base's tip, judges what it changed,
/// and commits an accepted change as ward on the finding's branch.
async fn make(role: &Role<'_>, target: &Proposal, found: &[Proposal]) -> anyhow::Result<Made> {
    let h = role.hospital;
    let Some(plan) = h.workspace_plan()? else {
        anyhow::bail!(
            "the research role needs the repository's git checkout at {} (its worktree starts from the base \
             branch); run `ward research` at the top of the repository, or set `departments.research.agent: false`",
            h.root.display()
        );
    };
    let folder = h.artifacts.join("research").join(&role.run);
    std::fs::create_dir_all(&folder).with_context(|| format!("could not make {}", folder.display()))?;
    let tree = Tree::add(&h.root, &plan.home.join("research").join(&target.key), &plan.base)?;
    let judged = run_role(role, &tree, &folder, target, found, &plan.base, &plan.state_paths).await;
    let made = match judged {
        Ok(Judged::Accepted { summary }) => {
            let message = format!("{}\n\n{}\n\nward-research key={}", target.title, summary.trim(), target.key);
            tree.commit(&branch(&target.key), &message, &plan.identity).map(|commit| Made::Committed {
                start: tree.start.clone(),
                commit,
                message,
            })
        }
        Ok(Judged::Refused(reason)) => Ok(Made::Refused(reason)),
        Ok(Judged::Unchanged) => Ok(Made::Unchanged),
        Err(e) => Err(e),
    };
    tree.remove();
    made
}

/// The visit job's half (no write, no write token): runs the role on
/// `target` and seals what it came to into `out`: the outcome, the role's
/// notes, and ward's commit as a git bundle. The branch made for the
/// commit is removed again: only the record job's push makes it.
pub async fn seal(
    role: &Role<'_>,
    forge: &dyn Forge,
    target: &Proposal,
    found: &[Proposal],
    out: &Path,
) -> anyhow::Result<Sealed> {
    let h = role.hospital;
    let branch = branch(&target.key);
    let mut sealed =
        Sealed { run: role.run.clone(), key: Some(target.key.clone()), start: None, outcome: Outcome::Unchanged };
    if let Ok(Some(_)) = forge.branch_tip(&branch).await {
        let why = format!("`{branch}` is on the remote already: the record job opens its pull request");
        sealed.outcome = Outcome::NoRole { why };
        return Ok(sealed);
    }
    std::fs::create_dir_all(out).with_context(|| format!("could not make {}", out.display()))?;
    sealed.outcome = match make(role, target, found).await {
        Ok(Made::Committed { start, commit, .. }) => {
            let bundled = bundle_commit(&h.root, &branch, &start, &out.join(BUNDLE_FILE));
            let mut unmake = git::local(&h.root);
            unmake.args(["update-ref", "-d", &format!("refs/heads/{branch}"), &commit]);
            let dropped = git::run(unmake, "remove the research branch from", None);
            bundled?;
            dropped?;
            sealed.start = Some(start);
            Outcome::Proposed
        }
        Ok(Made::Refused(reason)) => Outcome::Refused { reason },
        Ok(Made::Unchanged) => Outcome::Unchanged,
        Err(e) => Outcome::Failed { error: format!("{e:#}") },
    };
    // The role's account, for the people reading the artifact.
    let notes = h.artifacts.join("research").join(&role.run).join(crate::stage::visit::NOTES_FILE);
    if let Ok(bytes) = std::fs::read(&notes) {
        let text =
            crate::untrusted::cut(&String::from_utf8_lossy(&bytes), 512 * 1024, "the rest is in the run's notes");
        let file = out.join(super::sealed::NOTES_FILE);
        std::fs::write(&file, text).with_context(|| format!("could not write {}", file.display()))?;
    }
    Ok(sealed)
}

/// `branch` of the repository at `root`, on top of `start`, as a bundle at `out`.
fn bundle_commit(root: &Path, branch: &str, start: &str, out: &Path) -> anyhow::Result<()> {
    let mut cmd = git::local(root);
    cmd.args(["bundle", "create", "--quiet"]).arg(out).args([format!("refs/heads/{branch}"), format!("^{start}")]);
    git::run(cmd, "bundle the research role's commit in", None)?;
    Ok(())
}

/// The record job's half (the write token, nothing of the agent's run):
/// the sealed visit in `dir` of the role's run on `target`, its commit
/// judged again here (the paths it changed, the credentials it adds), then
/// pushed and opened. Whatever goes wrong is the attempt's sentence.
pub async fn record(h: &Hospital, forge: &dyn Forge, target: &Proposal, sealed: &Sealed, dir: &Path) -> Attempt {
    match try_record(h, forge, target, sealed, dir).await {
        Ok(attempt) => attempt,
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "the research role's change could not be recorded");
            Attempt::Failed { key: target.key.clone(), error: format!("{e:#}") }
        }
    }
}

/// What a sealed visit that proposes no change comes to (`None`: it
/// proposes one).
pub fn unopened(sealed: &Sealed, key: &str) -> Option<Attempt> {
    let key = key.to_string();
    match &sealed.outcome {
        Outcome::Proposed => None,
        Outcome::Unchanged | Outcome::NoRole { .. } => Some(Attempt::Unchanged { key }),
        Outcome::Refused { reason } => Some(Attempt::Refused { key, reason: format!("in the visit job, {reason}") }),
        Outcome::Failed { error } => Some(Attempt::Failed { key, error: format!("in the visit job, {error}") }),
    }
}

async fn try_record(
    h: &Hospital,
    forge: &dyn Forge,
    target: &Proposal,
    sealed: &Sealed,
    dir: &Path,
) -> anyhow::Result<Attempt> {
    let key = target.key.clone();
    let branch = branch(&key);
    // A change an earlier record pushed but did not open.
    if let Some(pull) = open_pushed(h, forge, target, &branch).await? {
        return Ok(Attempt::Opened { key, pull, branch });
    }
    if let Some(attempt) = unopened(sealed, &key) {
        return Ok(attempt);
    }
    let Some(plan) = h.workspace_plan()? else {
        anyhow::bail!(
            "the record of the research role's change needs the repository's git checkout at {}; run `ward \
             research --visit` at the top of the repository",
            h.root.display()
        );
    };
    let (url, token) = match forge.as_local() {
        Some(_) => (std::path::absolute(&h.root)?.display().to_string(), None),
        None => {
            let push = plan.push.as_ref().context(
                "the research role's change has no remote to push to (GITHUB_REPOSITORY and GITHUB_ACTIONS): \
                 run `ward research --visit` in the repository's workflow",
            )?;
            (push.url.clone(), push.token.clone())
        }
    };
    let start = sealed.start.clone().unwrap_or_default();
    let (folder, name, base, at, with) =
        (dir.to_path_buf(), branch.clone(), plan.base.clone(), url.clone(), token.clone());
    // The fetches wait on the network: off the async threads.
    let taken = tokio::task::spawn_blocking(move || {
        let remote = Remote { url: &at, token: with.as_deref(), base: &base };
        super::sealed::take_in(&folder, &name, &start, &remote)
    })
    .await
    .context("the intake of the research visit was cancelled")?;
    let commit = match taken {
        Ok(commit) => commit,
        Err(BundleError::Refused(reason)) => return Ok(Attempt::Refused { key, reason }),
        Err(BundleError::Git(e)) => {
            return Err(anyhow::Error::new(e).context("could not take in the research visit's commit"));
        }
    };
    // Judged here again, from the commit: never the visit's own verdict.
    if commit.changed.is_empty() {
        return Ok(Attempt::Unchanged { key });
    }
    if let Some(reason) = refusal(&h.config, &commit.changed) {
        return Ok(Attempt::Refused { key, reason });
    }
    let added = crate::workspace::added::between(&commit.bare, &commit.base_tip, &commit.head, &plan.state_paths)
        .context("could not read the lines the research visit's commit adds")?;
    if let Some(reason) = credentials(h, &added, &[("the commit's message", &commit.message)])? {
        return Ok(Attempt::Refused { key, reason });
    }
    // Only while the branch does not exist: a second record pushes nothing.
    let target_ref = format!("refs/heads/{branch}");
    let message = commit.message.clone();
    tokio::task::spawn_blocking(move || {
        git::push_lease(&commit.bare, Some(commit.source), &url, &target_ref, token.as_deref(), Some(None))
    })
    .await
    .context("the push of the research branch was cancelled")?
    .with_context(|| format!("could not push `{branch}`"))?;
    let pull = open(h, forge, target, &branch, &message).await?;
    Ok(Attempt::Opened { key, pull, branch })
}

/// Opens the pull request of `branch` (the local forge records it at the
/// branch's tip), labels it, and passes the fault point.
async fn open(h: &Hospital, forge: &dyn Forge, target: &Proposal, branch: &str, message: &str) -> anyhow::Result<u64> {
    let base = h.workspace_plan().ok().flatten().map(|p| p.base.clone()).unwrap_or_else(|| "main".into());
    let new = NewPullRequest {
        head_branch: branch.to_string(),
        base_branch: base,
        title: target.title.clone(),
        body: body(h, target, message),
    };
    let pull = match forge.as_local() {
        Some(local) => local.record_push(new).await?.context("the local forge has no git repository")?,
        None => forge.open_pull_request(new).await?,
    };
    forge
        .label_pull_request(pull.number, PROPOSAL_LABEL)
        .await
        .with_context(|| format!("could not label pull request #{} `{PROPOSAL_LABEL}`", pull.number))?;
    crate::fault::point("after-policy-filed");
    Ok(pull.number)
}

/// The pull request's body: the key's marker, the evidence, the role's
/// own account (from the commit's message, fenced: an agent wrote it), and
/// what happens next.
pub fn body(h: &Hospital, target: &Proposal, message: &str) -> String {
    let account = message.split_once("\n\n").map(|(_, rest)| rest).unwrap_or_default();
    let account = account.rsplit_once("\n\nward-research key=").map_or(account, |(a, _)| a).trim();
    let account = h.sentinels.escape(account);
    let account = crate::untrusted::escape_controls(&account).into_owned();
    let account = crate::untrusted::cut(&account, SUMMARY_BUDGET, "the rest is in the commit message");
    let paths = &h.config.paths;
    format!(
        "{marker}key={key} -->\nward's research department proposes this change to `{points}`: its role read the \
         hospital's record and edited `{skills}/` or `{roles}/` only. ward did not merge it and no stage runs on \
         it.\n\n## The evidence\n\n{evidence}\n\n## The research role's account\n\nWritten by the agent: data, not \
         instructions.\n\n{account}\n\n## What happens next\n\nThe change touches protected paths: a chief \
         reviews it and merges it, or closes it (research never opens it again). The pipeline check simulates \
         the changed pipeline on this pull request before anyone merges it. A precedent the role drafted is for a \
         person to write; the precedent log is never part of this change.\n",
        marker = crate::outcomes::RESEARCH_MARKER,
        key = target.key,
        points = target.points_at.as_deref().unwrap_or("the pipeline"),
        skills = paths.skills_dir(),
        roles = paths.roles_dir(),
        evidence = target.body,
        account = crate::untrusted::fence(&account, "text"),
    )
}

/// What ward made of the role's run.
enum Judged {
    Accepted { summary: String },
    Refused(String),
    Unchanged,
}

/// The prompt, the agent, and ward's reading of what it changed.
async fn run_role(
    role: &Role<'_>,
    tree: &Tree,
    folder: &Path,
    target: &Proposal,
    found: &[Proposal],
    base: &str,
    state_paths: &[String],
) -> anyhow::Result<Judged> {
    let h = role.hospital;
    let ctx = ResearchContext::new(h, target, found, tree, base);
    let template = PathBuf::from(h.config.paths.roles_dir()).join(TEMPLATE);
    let prompt = h.prompts.render(&template, &ctx).with_context(|| {
        format!("the research role's template {} does not render (`ward config check` says why)", template.display())
    })?;
    let prompt_file = folder.join("prompt.md");
    std::fs::write(&prompt_file, prompt).with_context(|| format!("could not write {}", prompt_file.display()))?;
    let env = [
        ("WARD_STAGE", "research".to_string()),
        ("WARD_MODE", "research".to_string()),
        ("WARD_ROLE", "researcher".to_string()),
        ("WARD_RUN", role.run.clone()),
        ("WARD_PROMPT", prompt_file.display().to_string()),
        ("WARD_WORKTREE", tree.checkout.work_tree.display().to_string()),
        ("WARD_SENTINEL", h.sentinels.prefix().to_string()),
    ];
    let frame = crate::stage::Frame {
        who: "the research department's role".into(),
        folder,
        workdir: &tree.checkout.work_tree,
        prompt_file: &prompt_file,
        network: h.config.agent.network.clone(),
        time_limit: h.config.departments.research.time_limit,
        env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        emulator_ports: &[],
    };
    let ran = crate::stage::run_framed(h, &frame, role.command.clone()).await?;
    if let Some(breach) = ran.stopped {
        return Ok(Judged::Refused(format!("the budget stopped the role mid-run ({breach})")));
    }
    if ran.end != AgentEnd::Exited(0) {
        return Ok(Judged::Refused(format!(
            "the role's agent did not finish ({}), so what it left is not trusted",
            match ran.end {
                AgentEnd::Exited(code) => format!("exit code {code}"),
                AgentEnd::Signalled(sig) => format!("signal {sig}"),
                AgentEnd::TimedOut => format!(
                    "its time limit of {} ran out",
                    humantime::format_duration(h.config.departments.research.time_limit)
                ),
            }
        )));
    }
    let changed = tree.changed()?;
    if changed.is_empty() {
        return Ok(Judged::Unchanged);
    }
    if let Some(reason) = refusal(&h.config, &changed) {
        return Ok(Judged::Refused(reason));
    }
    let notes = folder.join(crate::stage::visit::NOTES_FILE);
    let summary = std::fs::read(&notes).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    // What the pull request would publish: the added lines, and the notes
    // its body quotes.
    let added = crate::workspace::added::since(&tree.checkout, &tree.start, state_paths)
        .context("could not read the lines the research role added")?;
    if let Some(reason) = credentials(h, &added, &[("the role's notes", &summary)])? {
        return Ok(Judged::Refused(reason));
    }
    let summary = crate::untrusted::cut(&summary, SUMMARY_BUDGET, "the rest is in the run's notes.md");
    let files = changed.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ");
    Ok(Judged::Accepted { summary: format!("Files: {files}.\n\n{summary}") })
}

/// Why a change that adds `added` (and publishes `texts`, each named) is
/// refused, if it holds what looks like a credential (gitleaks' rules and
/// the values ward holds, as for a treatment, `secrets::scan`): the file
/// and line and the rule, never the value.
pub fn credentials(
    h: &Hospital,
    added: &[crate::workspace::added::Added],
    texts: &[(&str, &str)],
) -> anyhow::Result<Option<String>> {
    let found = h.credentials_in(added, texts)?;
    Ok(crate::rules::changes::no_credentials(&found).err().map(|refusal| {
        tracing::warn!(places = found.len(), "credentials found in the research role's change; refused");
        refusal.reason
    }))
}

/// Pure: why a change of `changed` (paths from the repository's top) is
/// refused, if it is: a policy change edits the skills and roles only,
/// never the precedent log (human-only), `.github/` (ward.yml, the
/// workflows), ward's state or the code.
pub fn refusal(config: &crate::config::Config, changed: &[String]) -> Option<String> {
    let paths = &config.paths;
    let allowed = [paths.skills_dir(), paths.roles_dir()];
    let precedents = paths.precedents_dir();
    let log = config.precedents.log.to_string_lossy().replace('\\', "/");
    let under = |path: &str, dir: &str| path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'));
    let log_touched = changed.iter().any(|p| *p == log || under(p, &precedents));
    let outside: Vec<&String> = changed
        .iter()
        .filter(|p| *p == &log || under(p, &precedents) || !allowed.iter().any(|dir| under(p, dir)))
        .collect();
    if outside.is_empty() {
        return None;
    }
    let list = outside.iter().take(10).map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ");
    let more = if outside.len() > 10 { format!(" and {} more", outside.len() - 10) } else { String::new() };
    let why = if log_touched {
        format!(
            "the precedent log is human-only: the role may draft a precedent in its notes for a person to write, \
             never append one (`{log}`)"
        )
    } else {
        "a policy change edits the hospital's skills and roles, nothing else".to_string()
    };
    Some(format!("the role changed {list}{more}, outside `{}/` and `{}/` ({why})", allowed[0], allowed[1]))
}

/// What the role's template sees: the finding to address, every finding as
/// evidence (fenced: a check's name is CI's text, a title may quote a
/// person's), where the skills, roles and precedent log are, its worktree.
#[derive(Debug, Clone, Serialize)]
pub struct ResearchContext {
    pub target: FindingContext,
    pub findings: Vec<FindingContext>,
    pub skills: String,
    pub roles: String,
    pub precedent_log: String,
    pub workspace: TreeContext,
    pub time_limit: String,
    pub notes_file: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingContext {
    pub key: String,
    pub weight: usize,
    /// The role or skill file it points at (ward's own reading of ward.yml).
    pub points_at: Option<String>,
    /// The finding's title and text, fenced as untrusted data.
    pub fenced: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TreeContext {
    pub path: String,
    pub base: String,
    pub head: String,
}

impl FindingContext {
    fn new(h: &Hospital, p: &Proposal) -> Self {
        let text = h.sentinels.escape(&format!("{}\n\n{}", p.title, p.body));
        let text = crate::untrusted::escape_controls(&text).into_owned();
        let text = crate::untrusted::cut(&text, FINDING_BUDGET, "the rest is in the record");
        Self {
            key: p.key.clone(),
            weight: p.weight,
            points_at: p.points_at.clone(),
            fenced: crate::untrusted::fence(&text, "untrusted"),
        }
    }
}

impl ResearchContext {
    fn new(h: &Hospital, target: &Proposal, found: &[Proposal], tree: &Tree, base: &str) -> Self {
        let paths = &h.config.paths;
        Self {
            target: FindingContext::new(h, target),
            findings: found.iter().take(12).map(|p| FindingContext::new(h, p)).collect(),
            skills: format!("{}/", paths.skills_dir()),
            roles: format!("{}/", paths.roles_dir()),
            precedent_log: h.config.precedents.log.to_string_lossy().replace('\\', "/"),
            workspace: TreeContext {
                path: tree.checkout.work_tree.display().to_string(),
                base: base.to_string(),
                head: tree.start.clone(),
            },
            time_limit: humantime::format_duration(h.config.departments.research.time_limit).to_string(),
            notes_file: "$WARD_NOTES".into(),
        }
    }

    /// A context with sample values, for `ward config check`.
    pub fn sample() -> Self {
        let finding = FindingContext {
            key: "0123456789abcdef".into(),
            weight: 3,
            points_at: Some("roles/fellow.md".into()),
            fenced: crate::untrusted::fence("Research: `plan-review.reject` sent work back 3 times", "untrusted"),
        };
        Self {
            target: finding.clone(),
            findings: vec![finding],
            skills: "skills/".into(),
            roles: "roles/".into(),
            precedent_log: "precedents/log.yaml".into(),
            workspace: TreeContext { path: "/w".into(), base: "main".into(), head: "0".repeat(40) },
            time_limit: "30m".into(),
            notes_file: "$WARD_NOTES".into(),
        }
    }
}

/// The role's worktree: detached at the base branch's tip, under the ward
/// home, removed whatever happened. git runs on it with its git folder and
/// work tree named (a planted `core.worktree` cannot send ward elsewhere)
/// and the repository's planted settings off (`workspace::git::local`).
struct Tree {
    root: PathBuf,
    checkout: Checkout,
    start: String,
}

impl Tree {
    fn add(root: &Path, path: &Path, base: &str) -> anyhow::Result<Self> {
        // git runs in `root`: a relative path would be read from there.
        let path = &std::path::absolute(path).with_context(|| format!("could not resolve {}", path.display()))?;
        let t = Tree { root: root.to_path_buf(), checkout: Checkout::new(path, path), start: String::new() };
        t.remove();
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("could not make {}", parent.display()))?;
        }
        let mut rev = git::local(root);
        rev.args(["rev-parse", "--verify", "--end-of-options", &format!("refs/heads/{base}^{{commit}}")]);
        let start = git::text(rev, "read the base branch of")?;
        let mut add = git::local(root);
        add.args(["worktree", "add", "--detach", "--quiet"]).arg(path).arg(&start);
        git::run(add, "add the research worktree to", None)?;
        let mut dir = git::local(path);
        dir.args(["rev-parse", "--absolute-git-dir"]);
        let git_dir = PathBuf::from(git::text(dir, "read the git folder of")?);
        Ok(Tree { root: root.to_path_buf(), checkout: Checkout::new(&git_dir, path), start })
    }

    /// Every path the run changed against its start: committed, staged or
    /// left (all staged now, for the commit).
    fn changed(&self) -> anyhow::Result<Vec<String>> {
        let mut add = self.checkout.git();
        add.args(["add", "--all", "--", "."]);
        git::run(add, "stage the research role's changes in", None)?;
        let mut diff = self.checkout.git();
        diff.args(["diff", "--cached", "--name-only", "--no-renames", "-z", &self.start, "--"]);
        let out = git::run(diff, "read the research role's changes in", None)?;
        Ok(out.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect())
    }

    /// Commits the index on `start` as ward, as the new branch `branch`
    /// (never moving one that exists).
    fn commit(&self, branch: &str, message: &str, who: &git::CommitIdentity) -> anyhow::Result<String> {
        let mut write = self.checkout.git();
        write.arg("write-tree");
        let tree = git::text(write, "write the tree of")?;
        let mut commit = self.checkout.git();
        commit.args(["commit-tree", "--no-gpg-sign", &tree, "-p", &self.start, "-m", message]);
        let date = who.time.map(|t| format!("@{t} +0000"));
        for role in ["AUTHOR", "COMMITTER"] {
            commit.env(format!("GIT_{role}_NAME"), &who.name).env(format!("GIT_{role}_EMAIL"), &who.email);
            if let Some(date) = &date {
                commit.env(format!("GIT_{role}_DATE"), date);
            }
        }
        let made = git::text(commit, "commit in")?;
        let mut update = git::local(&self.root);
        update.args(["update-ref", "-m", "ward: a research proposal", &format!("refs/heads/{branch}"), &made]);
        update.arg("0".repeat(40));
        git::run(update, "make the research branch in", None)?;
        Ok(made)
    }

    /// Removes the worktree and what git knew of it.
    fn remove(&self) {
        let path = &self.checkout.work_tree;
        let mut rm = git::local(&self.root);
        rm.args(["worktree", "remove", "--force"]).arg(path);
        let _ = git::run(rm, "remove the research worktree from", None);
        if path.symlink_metadata().is_ok() {
            let _ = std::fs::remove_dir_all(path);
        }
        let mut prune = git::local(&self.root);
        prune.args(["worktree", "prune"]);
        let _ = git::run(prune, "prune the worktrees of", None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> crate::config::Config {
        let text = include_str!("../../.github/ward.yml");
        crate::config::Config::parse(text, Path::new(".github/ward.yml"), None).unwrap()
    }

    #[test]
    fn a_policy_change_edits_skills_and_roles_only_and_never_the_precedent_log() {
        let c = config();
        let ok = |paths: &[&str]| refusal(&c, &paths.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        assert_eq!(ok(&["skills/plan-format.md", "roles/fellow.md", "skills/new/x.md"]), None);
        let log = ok(&["skills/plan-format.md", "precedents/log.yaml"]).unwrap();
        assert!(log.contains("`precedents/log.yaml`") && log.contains("human-only"), "{log}");
        assert!(!log.contains("`skills/plan-format.md`"), "only what is outside is named: {log}");
        for outside in [".github/ward.yml", ".github/workflows/ward-stage.yml", "src/main.rs", "skillsx/a.md", "skills"]
        {
            let why = ok(&[outside]).unwrap_or_else(|| panic!("{outside} was accepted"));
            assert!(why.contains(&format!("`{outside}`")) && why.contains("skills and roles, nothing else"), "{why}");
        }
    }
}
