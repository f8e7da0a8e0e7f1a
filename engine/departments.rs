//! `departments:` in `.github/ward.yml`: the parts of the hospital outside
//! the patient flow (the charge nurse's sweep, budgets, groundedness).
//!
//! ```yaml
//! departments:
//!   sweep: { max_retries: 2, max_actions: 50 }
//!   budget: { run_usd: 10, patient_usd: 150 }
//!   groundedness: { threshold: 0.8 }
//! ```

use serde::Deserialize;

use crate::budget::BudgetConfig;
use crate::config::Config;
use crate::groundedness::GroundednessConfig;
use crate::sweep::SweepConfig;

/// Every section has defaults; `departments:` may be left out entirely.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Departments {
    /// The charge nurse (`ward sweep`). Defaults: see [`SweepConfig`].
    #[serde(default)]
    pub sweep: SweepConfig,
    /// Spend limits per stage run and per patient. Defaults: see [`BudgetConfig`].
    #[serde(default)]
    pub budget: BudgetConfig,
    /// How far a run's notes must match reality. Defaults: see [`GroundednessConfig`].
    #[serde(default)]
    pub groundedness: GroundednessConfig,
}

impl Departments {
    /// The semantic pass: (path, message) for every problem.
    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = self.sweep.validate(config);
        p.extend(self.budget.validate(config));
        p.extend(self.groundedness.validate());
        p
    }
}

/// The charge nurse's reaper over the workspace module: this installation's
/// containers past their `ward.expires`, patient worktrees that are
/// half-made, of closed issues or idle longer than `worktree_ttl`, and
/// `ward/issue-<n>` branches of closed issues. Only what ward can prove it
/// made is touched (the workspace module checks).
pub struct WorkspaceReaper {
    /// The repository whose worktrees and branches are reaped.
    pub root: std::path::PathBuf,
    pub plan: crate::workspace::WorkspacePlan,
    /// Patient worktrees unused for longer than this are removed (the next
    /// stage of the patient makes a new one).
    pub worktree_ttl: std::time::Duration,
    /// Where container diagnostics go before removal.
    pub artifacts: std::path::PathBuf,
}

impl WorkspaceReaper {
    /// `Ok(None)` when `root` is in no git repository.
    pub fn detect(root: &std::path::Path, config: &Config) -> Result<Option<Self>, crate::workspace::PlanError> {
        let Some(plan) = crate::workspace::WorkspacePlan::detect_for_reaping(root, |k| std::env::var(k).ok())? else {
            return Ok(None);
        };
        let longest = config.stages().map(|s| s.config.time_limit).max().unwrap_or_default();
        Ok(Some(Self {
            root: root.to_path_buf(),
            artifacts: plan.home.join("reaped"),
            plan,
            worktree_ttl: longest + config.departments.sweep.grace,
        }))
    }
}

#[async_trait::async_trait]
impl crate::sweep::Reaper for WorkspaceReaper {
    async fn reap(
        &self,
        forge: &dyn crate::forge::Forge,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>, String> {
        // Branches and worktrees of closed issues: one listing of every issue (paginated).
        let closed: Vec<u64> = forge
            .all_issues()
            .await
            .map_err(|e| format!("could not list issues to find closed ones: {e}"))?
            .into_iter()
            .filter(|i| i.state == crate::forge::IssueState::Closed)
            .map(|i| i.number.0)
            .collect();
        crate::workspace::reap(&self.plan, &self.root, now, self.worktree_ttl, &closed, &self.artifacts)
            .await
            .map_err(|e| format!("could not reap workspaces: {e}"))
    }
}

/// What `ward sweep`, `ward lockdown` and `ward report` do, behind the CLI's
/// argument parsing (kept here so `cli.rs` stays a thin table).
pub mod commands {
    use std::path::Path;
    use std::process::ExitCode;
    use std::time::Duration;

    use anyhow::Context;
    use chrono::{DateTime, Utc};

    use crate::config::Config;
    use crate::forge::Forge;
    use crate::{lockdown, report, sweep};

    /// `--now`, or the system clock.
    pub fn now_from(flag: Option<&str>) -> anyhow::Result<DateTime<Utc>> {
        match flag {
            None => Ok(Utc::now()),
            Some(text) => sweep::parse_now(text).map_err(|e| crate::cli::BadInput(format!("--now: {e}")).into()),
        }
    }

    /// Pings the Docker daemon (the local socket or `DOCKER_HOST`), for the
    /// sweep's facility check.
    pub async fn probe_docker() -> Result<(), String> {
        let docker = bollard::Docker::connect_with_local_defaults().map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_secs(10), docker.ping()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within 10s".into()),
        }
    }

    pub async fn sweep(
        forge: &dyn Forge,
        config: &Config,
        root: &Path,
        now: Option<&str>,
        docker: bool,
        reap: bool,
    ) -> anyhow::Result<ExitCode> {
        let now = now_from(now)?;
        let facilities = sweep::Facilities { docker_reachable: if docker { Some(probe_docker().await) } else { None } };
        let reaper = if reap { super::WorkspaceReaper::detect(root, config)? } else { None };
        if reap && reaper.is_none() {
            eprintln!("--reap: {} is not in a git repository; nothing to reap", root.display());
        }
        let reaper = reaper.as_ref().map(|r| r as &dyn sweep::Reaper);
        let report = sweep::sweep(forge, config, now, &facilities, reaper).await?;
        print!("{report}");
        Ok(ExitCode::SUCCESS)
    }

    pub async fn lockdown_on(
        forge: &dyn Forge,
        reason: &str,
        actor: &str,
        now: Option<&str>,
    ) -> anyhow::Result<ExitCode> {
        let (l, new) = lockdown::declare(forge, reason, actor, now_from(now)?).await?;
        if new {
            println!("lockdown declared: {} — every stage refuses to run until it is lifted", l.issue);
        } else {
            println!("a lockdown is already in force: {l}");
        }
        Ok(ExitCode::SUCCESS)
    }

    pub async fn lockdown_off(forge: &dyn Forge, actor: &str, now: Option<&str>) -> anyhow::Result<ExitCode> {
        let closed = lockdown::lift(forge, actor, now_from(now)?).await?;
        if closed.is_empty() {
            println!("no lockdown in force");
        } else {
            let list: Vec<String> = closed.iter().map(|n| n.to_string()).collect();
            println!(
                "lockdown lifted (closed {}); the next sweep re-triggers the patients that waited",
                list.join(", ")
            );
        }
        Ok(ExitCode::SUCCESS)
    }

    /// Exit 0 when no lockdown is in force, 3 while one is (for scripts).
    pub async fn lockdown_status(forge: &dyn Forge) -> anyhow::Result<ExitCode> {
        match lockdown::active_lockdown(forge).await? {
            None => {
                println!("no lockdown in force");
                Ok(ExitCode::SUCCESS)
            }
            Some(l) => {
                println!("{l}");
                Ok(ExitCode::from(3))
            }
        }
    }

    pub async fn report(
        forge: &dyn Forge,
        config: &Config,
        since: &str,
        html: Option<&Path>,
        post: bool,
        now: Option<&str>,
    ) -> anyhow::Result<ExitCode> {
        let to = now_from(now)?;
        let since = report::parse_since(since).map_err(|e| crate::cli::BadInput(e.to_string()))?;
        let from = chrono::Duration::from_std(since)
            .ok()
            .and_then(|d| to.checked_sub_signed(d))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let (patients, problems) = report::gather(forge, config, Some(from)).await?;
        let mut r = report::compute(config, &patients, from, to);
        r.problems = problems;
        let markdown = report::render_markdown(&r);
        print!("{markdown}");
        if post {
            let title = format!("ward safety report, {} to {}", from.format("%Y-%m-%d"), to.format("%Y-%m-%d"));
            let issue = forge
                .create_issue(crate::forge::NewIssue { title, body: markdown, labels: Vec::new() })
                .await
                .context("could not post the safety report as an issue")?;
            eprintln!("posted the report as {}", issue.number);
        }
        if let Some(file) = html {
            std::fs::write(file, report::render_html(&r))
                .with_context(|| format!("could not write the HTML report to {}", file.display()))?;
            eprintln!("wrote {}", file.display());
        }
        Ok(ExitCode::SUCCESS)
    }
}
