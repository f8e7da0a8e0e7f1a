//! What `ward sweep`, `ward lockdown` and `ward report` do, behind the
//! CLI's argument parsing (kept here so `cli/mod.rs` stays a thin table).

use std::path::Path;
use std::process::ExitCode;

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

pub async fn sweep(
    forge: &dyn Forge,
    config: &Config,
    root: &Path,
    now: Option<&str>,
    docker: bool,
    reap: bool,
) -> anyhow::Result<ExitCode> {
    let now = now_from(now)?;
    let facilities =
        sweep::Facilities { docker_reachable: if docker { Some(crate::doctor::probe_docker().await) } else { None } };
    let reaper = if reap { sweep::reap::for_workspace(root, config)? } else { None };
    if reap && reaper.is_none() {
        eprintln!("--reap: {} is not in a git repository; nothing to reap", root.display());
    }
    let reaper = reaper.as_ref().map(|r| r as &dyn sweep::Reaper);
    let report = sweep::sweep(forge, config, now, &facilities, reaper).await?;
    print!("{}", crate::untrusted::shown(&report.to_string()));
    // The safety department walks with the charge nurse: reverts of
    // discharged changes become incidents. A forge without branches (a
    // scratch local forge) has nothing to read.
    let base = &config.departments.sweep.facilities.base_branch;
    match crate::safety::incidents(forge, config, base, now).await {
        Ok(run) => println!("{}", crate::untrusted::shown(&run.to_string())),
        Err(e) if forge.as_local().is_some_and(|l| !l.has_repository()) => {
            tracing::debug!("no safety walk: {e:#}");
        }
        Err(e) => return Err(e),
    }
    Ok(ExitCode::SUCCESS)
}

/// Which part of a research run this command is.
pub enum ResearchStep {
    /// One process: the role (when on) runs, its change and the issues filed.
    Whole,
    /// GitHub's read-only job: the role run and sealed into `out`.
    Visit { out: std::path::PathBuf },
    /// GitHub's writing job: the sealed visit in `visit` taken in.
    Record { visit: std::path::PathBuf },
}

impl ResearchStep {
    /// From `--out` and `--visit` (which clap keeps apart), as absolute paths.
    pub fn of(out: Option<&Path>, visit: Option<&Path>) -> anyhow::Result<Self> {
        let absolute = |p: &Path| std::path::absolute(p).with_context(|| format!("could not resolve {}", p.display()));
        Ok(match (out, visit) {
            (Some(out), _) => ResearchStep::Visit { out: absolute(out)? },
            (None, Some(visit)) => ResearchStep::Record { visit: absolute(visit)? },
            (None, None) => ResearchStep::Whole,
        })
    }
}

/// `ward research`: proposals from the record of the last `since`, at most
/// `max` (else ward.yml's `departments.research.max_proposals`); with
/// `departments.research.agent`, the research role first (in one process,
/// or in two jobs: `step`).
pub async fn research(
    forge: std::sync::Arc<dyn Forge>,
    config: &Config,
    root: &Path,
    since: &str,
    max: Option<usize>,
    step: ResearchStep,
) -> anyhow::Result<ExitCode> {
    use crate::research::{RoleStep, policy, sealed};
    let max = max.unwrap_or(config.departments.research.max_proposals);
    // A sealed visit that cannot be read changes nothing: read it first.
    let sealed = match &step {
        ResearchStep::Record { visit } => {
            Some(sealed::Sealed::open(visit).map_err(|e| crate::cli::BadInput(e.to_string()))?)
        }
        _ => None,
    };
    // The role runs as a stage's agent does: the whole hospital is loaded.
    // The record job runs no role, but reads the repository as it does.
    // A visit that names a finding: the role ran on it, or its branch is
    // there to be opened.
    let role_ran = sealed.as_ref().is_some_and(|s| s.key.is_some());
    let hospital = match config.departments.research.agent || role_ran {
        true => Some(crate::hospital::Hospital::load(root, forge.clone())?),
        false => None,
    };
    let forge = &*forge;
    let recent = research_record(forge, config, since).await?;
    let role = hospital.as_ref().filter(|_| config.departments.research.agent).map(|h| policy::Role {
        hospital: h,
        run: crate::hospital::new_run_id(h.now()),
        command: None,
    });
    let run = match (&step, &sealed, &hospital) {
        (ResearchStep::Visit { out }, _, _) => {
            let sealed = crate::research::visit(forge, config, &recent, max, role.as_ref(), out).await?;
            println!("{}", crate::untrusted::shown(&sealed.summary(out)));
            return Ok(ExitCode::SUCCESS);
        }
        (ResearchStep::Record { visit }, Some(sealed), Some(h)) if role_ran => {
            let step = RoleStep::Record { hospital: h, sealed, dir: visit };
            crate::research::file_with_role(forge, config, &recent, max, Some(step)).await?
        }
        (ResearchStep::Record { .. }, _, _) => crate::research::file(forge, config, &recent, max).await?,
        (ResearchStep::Whole, _, _) => {
            crate::research::file_with_role(forge, config, &recent, max, role.as_ref().map(RoleStep::Run)).await?
        }
    };
    println!("{}", crate::untrusted::shown(&run.to_string()));
    // The proposals are filed; a role's run that failed still fails the job.
    match run.policy {
        Some(policy::Attempt::Failed { .. }) => Ok(ExitCode::from(crate::stage::EXIT_FAILED)),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The patients of the last `since`, with the period's notes only (a
/// pattern of months ago is not this period's).
async fn research_record(
    forge: &dyn Forge,
    config: &Config,
    since: &str,
) -> anyhow::Result<Vec<report::PatientRecord>> {
    let since = report::parse_since(since).map_err(|e| crate::cli::BadInput(e.to_string()))?;
    let from = chrono::Duration::from_std(since)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let (patients, problems) = report::gather(forge, config, Some(from)).await?;
    for p in problems {
        eprintln!("{}", crate::untrusted::shown(&p));
    }
    Ok(patients
        .into_iter()
        .map(|mut p| {
            p.notes.retain(|n| n.meta.at >= from);
            p
        })
        .collect())
}

/// `ward safety`: the incidents of reverted discharges.
pub async fn safety(forge: &dyn Forge, config: &Config, base: Option<&str>) -> anyhow::Result<ExitCode> {
    let base = base.unwrap_or(&config.departments.sweep.facilities.base_branch);
    let run = crate::safety::incidents(forge, config, base, Utc::now()).await?;
    println!("{}", crate::untrusted::shown(&run.to_string()));
    Ok(ExitCode::SUCCESS)
}

pub async fn lockdown_on(forge: &dyn Forge, reason: &str, actor: &str, now: Option<&str>) -> anyhow::Result<ExitCode> {
    let (l, new) = lockdown::declare(forge, reason, actor, now_from(now)?).await?;
    if new {
        println!("lockdown declared: {} — every stage refuses to run until it is lifted", l.issue);
    } else {
        println!("a lockdown is already in force: {l}");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn lockdown_off(
    forge: &dyn Forge,
    config: &Config,
    actor: &str,
    now: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let closed = lockdown::lift(forge, actor, now_from(now)?).await?;
    if closed.is_empty() {
        println!("no lockdown in force");
        return Ok(ExitCode::SUCCESS);
    }
    let list = |ns: &[crate::forge::IssueNumber]| ns.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ");
    let waited = lockdown::retrigger_waiting(forge, config).await?;
    let retriggered = match waited.as_slice() {
        [] => "no patient was waiting".to_string(),
        w => format!("re-triggered the patients that waited: {}", list(w)),
    };
    println!("lockdown lifted (closed {}); {retriggered}", list(&closed));
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
            println!("{}", crate::untrusted::shown(&l.to_string()));
            Ok(ExitCode::from(crate::stage::EXIT_LOCKED))
        }
    }
}

/// Where `ward report` writes besides stdout, and in which form.
pub struct ReportOutput<'a> {
    pub html: Option<&'a Path>,
    pub post: bool,
    pub json: bool,
    /// `--period`: the outcomes also by periods of this length.
    pub period: Option<&'a str>,
    pub accept_days: u32,
    /// `--review`: the weekly process review (title, corrective actions).
    pub review: bool,
}

pub async fn report(
    forge: &dyn Forge,
    config: &Config,
    since: &str,
    ReportOutput { html, post, json, period, accept_days, review }: ReportOutput<'_>,
    now: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let to = now_from(now)?;
    let since = report::parse_since(since).map_err(|e| crate::cli::BadInput(e.to_string()))?;
    let from = chrono::Duration::from_std(since)
        .ok()
        .and_then(|d| to.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let period = match period {
        None => None,
        Some(text) => Some(
            report::parse_since(text)
                .ok()
                .and_then(|d| chrono::Duration::from_std(d).ok())
                .ok_or_else(|| crate::cli::BadInput(format!("--period: `{text}` is not a period like `1d` or `7d`")))?,
        ),
    };
    let (patients, problems, reverts) = report::gather_with_reverts(forge, config, Some(from)).await?;
    let inputs = report::OutcomeInputs { reverts, accept_days, period };
    let mut r = report::compute_with(config, &patients, &inputs, from, to);
    r.problems = problems;
    let mut markdown = report::render_markdown(&r);
    if review {
        markdown = report::render_review(&r, &markdown);
    }
    // A reader that stops early (`| head`) does not stop the post or the page.
    let printed = if json {
        crate::cli::emit(&format!("{}\n", serde_json::to_string_pretty(&report::render_json(&r)).unwrap_or_default()))
    } else {
        // Issue titles are people's text: shown escaped.
        crate::cli::emit(&crate::untrusted::shown(&markdown))
    };
    if post {
        let what = if review { "ward weekly process review" } else { "ward safety report" };
        let title = format!("{what}, {} to {}", from.format("%Y-%m-%d"), to.format("%Y-%m-%d"));
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
    printed?;
    Ok(ExitCode::SUCCESS)
}
