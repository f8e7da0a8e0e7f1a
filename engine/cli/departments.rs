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
}

pub async fn report(
    forge: &dyn Forge,
    config: &Config,
    since: &str,
    ReportOutput { html, post, json }: ReportOutput<'_>,
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
    // A reader that stops early (`| head`) does not stop the post or the page.
    let printed = if json {
        crate::cli::emit(&format!("{}\n", serde_json::to_string_pretty(&report::render_json(&r)).unwrap_or_default()))
    } else {
        // Issue titles are people's text: shown escaped.
        crate::cli::emit(&crate::untrusted::shown(&markdown))
    };
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
    printed?;
    Ok(ExitCode::SUCCESS)
}
