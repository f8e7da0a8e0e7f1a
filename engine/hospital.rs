//! The hospital of one repository, loaded once per command: its pipeline
//! (`.github/ward.yml`), role prompts, precedents and forge, and where runs
//! keep their artifacts. Also the two things every run takes from it: a run
//! id, and the per-issue lock that makes one run per patient at a time.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::chart::Sentinels;
use crate::clock::{Clock, system_clock};
use crate::config::Config;
use crate::forge::{Forge, IssueNumber};
use crate::precedent::PrecedentLog;
use crate::prompt::Prompts;
use crate::workspace::WorkspacePlan;

/// What every stage run of one repository shares.
pub struct Hospital {
    /// The repository root: `.github/ward.yml`, and `roles/`, `skills/`,
    /// `precedents/` where ward.yml's `paths` puts them.
    pub root: PathBuf,
    pub config: Config,
    pub forge: Arc<dyn Forge>,
    pub prompts: Prompts,
    pub precedents: PrecedentLog,
    pub sentinels: Sentinels,
    /// Per-run folders (prompt, notes, agent logs, the sealed visit) go under here.
    pub artifacts: PathBuf,
    /// Where the agent runs when there is no workspace.
    pub workdir: PathBuf,
    /// This ward binary (the stand-in agent is `ward stand-in`).
    pub ward_exe: PathBuf,
    pub clock: Clock,
    /// The patient's workspace on `ward/issue-<n>` (and emulator, when the
    /// stage has one); `Ok(None)` runs the agent in `workdir` (`root` is in
    /// no git repository, or the caller chose scratch); an error (a detached
    /// HEAD without `WARD_BASE`) refuses every stage run with its sentence.
    pub workspace: Result<Option<WorkspacePlan>, crate::workspace::PlanError>,
    /// The pipeline's version ([`crate::governance::version`]), recorded in
    /// every run's ADMISSION note.
    pub pipeline_version: String,
}

impl Hospital {
    /// Loads and validates everything under `root`. Errors name the file.
    pub fn load(root: &Path, forge: Arc<dyn Forge>) -> anyhow::Result<Self> {
        let config = Config::load(root)?;
        let precedents = PrecedentLog::load(&root.join(&config.precedents.log))?;
        let pipeline_version = crate::governance::version_with(root, &config.paths);
        let ward_exe = std::env::current_exe().context("could not find the ward binary itself")?;
        Ok(Self {
            root: root.to_path_buf(),
            sentinels: Sentinels::new(&config.sentinel_prefix),
            prompts: Prompts::for_config(root, &config),
            config,
            forge,
            precedents,
            // Absolute: the agent runs in a worktree elsewhere, and reads
            // its prompt and writes its notes here (`--root .` included).
            artifacts: std::path::absolute(
                std::env::var_os("WARD_ARTIFACTS")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| root.join(".ward").join("runs")),
            )
            .context("could not resolve the artifacts folder")?,
            workdir: root.to_path_buf(),
            ward_exe,
            clock: system_clock(),
            workspace: WorkspacePlan::detect(root, |k| std::env::var(k).ok()),
            pipeline_version,
        })
    }

    /// The workspace plan, or the sentence that refuses every run.
    pub fn workspace_plan(&self) -> anyhow::Result<Option<&WorkspacePlan>> {
        Ok(self.workspace.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?.as_ref())
    }

    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// What an agent's change would publish, scanned for credentials: the
    /// lines it `added` and `texts` (each named, e.g. its notes), against
    /// gitleaks' rules, the secrets ward.yml passes to the agent and the
    /// placeholder key (an agent that writes it down was after the key).
    /// Each finding names file, line and rule, never the value.
    pub fn credentials_in(
        &self,
        added: &[crate::workspace::added::Added],
        texts: &[(&str, &str)],
    ) -> anyhow::Result<Vec<crate::secrets::scan::Finding>> {
        use crate::secrets::scan::{Scanner, Text};
        let placeholder = ("the agent's placeholder key".to_string(), crate::agent::gate::PLACEHOLDER_KEY.to_string());
        let held = crate::secrets::held(&self.config.agent.pass_env).into_iter().chain([placeholder]);
        let scanner = Scanner::new(held)?;
        let lines = added
            .iter()
            .map(|a| Text { path: &a.path, lines: a.lines.iter().map(|(n, l)| (*n, l.as_str())).collect() });
        Ok(scanner.scan(lines.chain(texts.iter().map(|(name, text)| Text::whole(name, text)))))
    }

    /// The folder of one run's artifacts.
    pub fn run_folder(&self, issue: IssueNumber, run: &str) -> PathBuf {
        self.artifacts.join(issue.0.to_string()).join(run)
    }
}

/// A run id that is unique per run and has no spaces: the Actions run and
/// attempt when there is one, else time and process.
pub fn new_run_id(now: DateTime<Utc>) -> String {
    match (std::env::var("GITHUB_RUN_ID"), std::env::var("GITHUB_RUN_ATTEMPT")) {
        (Ok(id), Ok(attempt)) if !id.is_empty() => format!("gh{id}.{attempt}"),
        _ => format!("{}-{:x}{:04x}", now.format("%Y%m%dT%H%M%S%3f"), std::process::id(), rand_suffix()),
    }
}

fn rand_suffix() -> u16 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    (nanos ^ (nanos >> 16)) as u16
}

/// How long [`try_lock_issue`] keeps trying a busy lock before it concludes
/// that another run holds it, and how often it tries.
const LOCK_GRACE: Duration = Duration::from_millis(500);
const LOCK_RETRY: Duration = Duration::from_millis(10);

/// Takes the per-issue stage lock (`.ward/locks/stage-<n>.lock`), or `None`
/// when another run is working on the issue.
///
/// The lock is an `flock` on an open file description. The file is opened
/// close-on-exec, but a child forked by another thread of this process (an
/// agent, git, docker) holds a copy of every descriptor between `fork` and
/// `exec`, and with it the lock: a run that released the lock an instant
/// before can then find it still held, though no run is working. Std gives
/// no way to keep a descriptor out of a child before its `exec`, so a busy
/// lock is tried again for a short, bounded time ([`LOCK_GRACE`]): a child's
/// copy goes at its `exec`, within that time; a real run holds the lock for
/// the length of a stage and is still reported as working.
pub async fn try_lock_issue(root: &Path, number: IssueNumber) -> anyhow::Result<Option<File>> {
    let dir = root.join(".ward").join("locks");
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let path = dir.join(format!("stage-{}.lock", number.0));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("could not open {}", path.display()))?;
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() >= deadline => return Ok(None),
            Err(std::fs::TryLockError::WouldBlock) => tokio::time::sleep(LOCK_RETRY).await,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("could not lock {}", path.display()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(root: &Path, number: IssueNumber) -> File {
        let file = OpenOptions::new()
            .write(true)
            .open(root.join(".ward/locks").join(format!("stage-{}.lock", number.0)))
            .unwrap();
        file.try_lock().unwrap();
        file
    }

    #[tokio::test]
    async fn a_lock_held_an_instant_longer_is_taken_a_lock_held_by_a_run_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let n = IssueNumber(7);
        drop(try_lock_issue(dir.path(), n).await.unwrap().expect("free"));
        // Another descriptor holds it briefly, as a forked child does until its exec.
        let brief = holder(dir.path(), n);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(brief);
        });
        assert!(try_lock_issue(dir.path(), n).await.unwrap().is_some(), "taken once the copy is gone");
        release.join().unwrap();
        // A run holds it for its whole stage: after the grace, another run is working.
        let _run = try_lock_issue(dir.path(), n).await.unwrap().expect("free again");
        let started = std::time::Instant::now();
        assert!(try_lock_issue(dir.path(), n).await.unwrap().is_none());
        assert!(started.elapsed() >= LOCK_GRACE && started.elapsed() < LOCK_GRACE * 4, "{:?}", started.elapsed());
    }
}
