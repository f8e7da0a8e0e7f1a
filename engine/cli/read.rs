//! The commands that read and change nothing: a patient's chart, the
//! discharge audit as it would run now, and the precedent log.

use std::path::Path;
use std::process::ExitCode;

use super::{BadInput, ChartCommand, Cli, emit, load_config, open_forge};
use crate::chart::Sentinels;
use crate::forge::IssueNumber;
use crate::precedent::PrecedentLog;
use crate::untrusted::{escape_controls_json, no_workflow_commands, shown};

/// `ward chart show N` and `ward chart notes N [--kind K] [--json]`.
pub async fn chart(cli: &Cli, command: &ChartCommand) -> anyhow::Result<ExitCode> {
    let config = load_config(&cli.root)?;
    let forge = open_forge(cli, &config).await?;
    let sentinels = Sentinels::new(&config.sentinel_prefix);
    let (ChartCommand::Show { issue } | ChartCommand::Notes { issue, .. }) = command;
    let number = IssueNumber(*issue);
    // A kind that does not exist is bad input, not an empty answer.
    if let ChartCommand::Notes { kind: Some(kind), .. } = command {
        kind.parse::<crate::chart::NoteKind>().map_err(|e| BadInput(format!("--kind: {e}")))?;
    }
    let Some(chart) = forge.read_chart(number).await? else {
        return Err(BadInput(format!("issue {number} has no chart yet in {}", forge.describe())).into());
    };
    match command {
        // Notes are what agents and people wrote: control characters and
        // workflow commands shown escaped, never played.
        ChartCommand::Show { .. } => emit(&shown(&chart.text))?,
        ChartCommand::Notes { kind, json, .. } => {
            let notes = sentinels
                .parse_chart(&chart.text)
                .map_err(|e| BadInput(format!("the chart of issue {number} is not readable: {e}")))?;
            let picked: Vec<_> = notes.iter().filter(|n| kind.as_ref().is_none_or(|k| n.kind.as_str() == k)).collect();
            if *json {
                emit(&format!(
                    "{}\n",
                    no_workflow_commands(&escape_controls_json(&serde_json::to_string_pretty(&picked)?))
                ))?;
            } else {
                for n in picked {
                    let head = format!(
                        "## {} ({} by {}, run {}, {})",
                        n.kind, n.meta.stage, n.meta.role, n.meta.run, n.meta.at
                    );
                    emit(&format!("{}\n\n{}\n\n", shown(&head), shown(&n.body)))?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `ward precedents check [--base REV]`.
pub fn precedents_check(root: &Path, base: Option<&str>, today: Option<chrono::NaiveDate>) -> anyhow::Result<ExitCode> {
    let config = load_config(root)?;
    let today = today.unwrap_or_else(|| chrono::Utc::now().date_naive());
    let log = &config.precedents.log;
    // ward's commit identity is the engine's too: a treatment's change is
    // committed under it.
    let ward = crate::workspace::git::CommitIdentity::default();
    let engine = crate::precedent::EngineIdentity {
        account: config.engine_account.as_str(),
        commit_name: &ward.name,
        commit_email: &ward.email,
    };
    let problems = crate::precedent::check_against(root, log, base, today, &engine)?;
    let against = base.as_ref().map(|b| format!(", append-only against `{b}`")).unwrap_or_default();
    if problems.is_empty() {
        let n = crate::precedent::raw_entries(&std::fs::read_to_string(root.join(log)).unwrap_or_default()).len();
        println!("{}: ok ({n} entries{against})", log.display());
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("error: {}", p.in_file(log));
    }
    eprintln!(
        "{}: {} problem(s){against}; the log is append-only and written by chiefs: add new entries at the end",
        log.display(),
        problems.len()
    );
    Ok(ExitCode::from(1))
}

/// `ward audit N [--json]`: the discharge checklist as the stage would see it now.
pub async fn audit(cli: &Cli, issue: IssueNumber, json: bool) -> anyhow::Result<ExitCode> {
    let config = load_config(&cli.root)?;
    let forge = open_forge(cli, &config).await?;
    // An issue that does not exist has no checklist to print.
    if let Err(crate::forge::ForgeError::IssueNotFound(..)) = forge.issue(issue).await {
        return Err(BadInput(format!("issue {issue} does not exist in {}; nothing to audit", forge.describe())).into());
    }
    let checklist = crate::discharge::audit::audit_issue(&*forge, &config, issue).await?;
    if json {
        let items: Vec<serde_json::Value> = checklist
            .items
            .iter()
            .map(|i| serde_json::json!({"id": i.id.as_str(), "title": i.title, "mark": i.mark.to_string(), "note": i.note}))
            .collect();
        let out = serde_json::json!({"issue": issue.0, "pull": checklist.pull, "head": checklist.head,
            "passed": checklist.passed(), "outcome": checklist.outcome(), "items": items});
        emit(&format!("{}\n", no_workflow_commands(&escape_controls_json(&serde_json::to_string_pretty(&out)?))))?;
    } else {
        // The checklist names reviewers and quotes CI: shown escaped.
        emit(&shown(&checklist.render()))?;
    }
    Ok(if checklist.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `ward precedents search TEXT [--top N]`.
pub fn precedents_search(root: &Path, text: &str, top: usize) -> anyhow::Result<ExitCode> {
    let config = load_config(root)?;
    let log = PrecedentLog::load(&root.join(&config.precedents.log))?;
    let found = log.search(text, top);
    if found.is_empty() {
        println!("no precedent matches");
    }
    for m in found {
        println!(
            "{}  {:>5.2}  {}\n          -> {}",
            m.entry.id,
            m.score,
            m.entry.question.trim(),
            m.entry.decision.trim()
        );
    }
    Ok(ExitCode::SUCCESS)
}
