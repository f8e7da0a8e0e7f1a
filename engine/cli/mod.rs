//! Subcommands and flags. Every global flag can also come from the
//! environment (`WARD_ROOT`, `WARD_FORGE`, `GITHUB_REPOSITORY`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

mod departments;
mod read;

use crate::config::{CONFIG_PATH, Config, ConfigErrors};
use crate::forge::local::LocalForge;
use crate::forge::{Forge, IssueNumber, NewIssue};
use crate::hospital::Hospital;
use crate::precedent::{PrecedentError, PrecedentLog};
use crate::prompt::Prompts;
use crate::simulate::ScenarioError;
use crate::stage::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_REFUSED, StageRequest, StageResult};
use crate::untrusted::shown;

#[derive(Debug, Parser)]
#[command(name = "ward", version, about = "Runs coding agents through a teaching-hospital pipeline on GitHub issues")]
pub struct Cli {
    /// Repository root: .github/ward.yml, and roles/, skills/, precedents/ where its `paths:` puts them.
    #[arg(long, global = true, env = "WARD_ROOT", default_value = ".")]
    pub root: PathBuf,
    /// Where issues live. Default: github inside GitHub Actions, else local.
    #[arg(long, global = true, env = "WARD_FORGE", value_enum)]
    pub forge: Option<ForgeKind>,
    /// OWNER/NAME on GitHub.
    #[arg(long, global = true, env = "GITHUB_REPOSITORY")]
    pub repo: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ForgeKind {
    Local,
    Github,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole hospital on a sample issue: local forge, stand-in agent.
    Demo {
        /// Folder for the demo repository (new or empty). Default: a fresh temporary folder.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Three patients at once through `ward run` and the merge queue: a conflict resolved and
        /// reviewed, a failure only in combination sent back and fixed.
        #[arg(long)]
        swarm: bool,
        /// With --swarm: give the treating and reviewing stages and each integration check a
        /// container of IMAGE, a `ward-docstore` image present locally (built from tests/docstore;
        /// ward never pulls). Each treatment writes a document with curl; checkpoints carry it.
        #[arg(long, value_name = "IMAGE", requires = "swarm")]
        emulator: Option<String>,
    },
    /// Run scripted scenarios over the local forge; exit 1 when expectations fail.
    Simulate {
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Print the traces as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the stage named by an issue's ward label (`--issue`), or the one
    /// an Actions event asks for (`--event "$GITHUB_EVENT_PATH"`).
    Stage {
        #[arg(long, required_unless_present = "event", conflicts_with = "event")]
        issue: Option<u64>,
        /// The label in the trigger saw; the run is a no-op if it is gone.
        #[arg(long, conflicts_with = "event")]
        label: Option<String>,
        /// The event payload file of a workflow run.
        #[arg(long)]
        event: Option<PathBuf>,
        /// The event's name (`issues`, `repository_dispatch`, ...); without
        /// it the payload's shape decides.
        #[arg(long, env = "GITHUB_EVENT_NAME")]
        event_name: Option<String>,
    },
    /// GitHub's read-only job: run the agent of the stage an Actions event
    /// asks for and seal its visit into `--out` (notes, logs, its commits as
    /// a git bundle). Writes nothing to GitHub: `ward record` does.
    Visit {
        /// The event payload file of the workflow run.
        #[arg(long, env = "GITHUB_EVENT_PATH")]
        event: PathBuf,
        #[arg(long, env = "GITHUB_EVENT_NAME")]
        event_name: Option<String>,
        /// The folder to seal the visit into (emptied first); the workflow uploads it.
        #[arg(long)]
        out: PathBuf,
    },
    /// GitHub's writing job: take in the visit `ward visit` sealed (as
    /// hostile input), judge it and record it, for the same event. Runs no agent.
    Record {
        /// The sealed visit, as the workflow downloaded it (may be empty: no agent ran).
        #[arg(long)]
        visit: PathBuf,
        #[arg(long, env = "GITHUB_EVENT_PATH")]
        event: PathBuf,
        #[arg(long, env = "GITHUB_EVENT_NAME")]
        event_name: Option<String>,
    },
    /// GitHub's first job when ward.yml caps agents (`capacity`): for the
    /// stage an Actions event asks for, the guards without a write, then an
    /// agent slot for this run, or the patient queued (the step outputs
    /// `visit` and `slot` say which). Without a cap: nothing read or written.
    /// With `--free RUN`: free that run's slot and start the oldest queued
    /// patient that fits (after the record, or a failed or cancelled visit).
    Slot {
        /// The event payload file of the workflow run.
        #[arg(long, required_unless_present = "free", conflicts_with = "free")]
        event: Option<PathBuf>,
        #[arg(long, env = "GITHUB_EVENT_NAME")]
        event_name: Option<String>,
        /// The run whose slot to free (the slot job's `slot` output).
        #[arg(long, value_name = "RUN")]
        free: Option<String>,
    },
    /// ward's merge queue on GitHub, as ward-queue.yml's two jobs run it:
    /// `check` (a read-only token; it runs the patients' code) and `record`
    /// (the write token; runs nothing of theirs). The local forge's queue
    /// runs in `ward run`.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Carry out a person's command in an issue comment (`/ward retry`,
    /// `hold`, `resume`, `chief <reason>`, `approve`) from an
    /// `issue_comment` event (`--event "$GITHUB_EVENT_PATH"`).
    Command {
        #[arg(long)]
        event: PathBuf,
    },
    /// Print the trigger an Actions event file holds, as JSON (exit 0 with a
    /// one-line reason when it is not a ward event).
    Event {
        #[arg(long, env = "GITHUB_EVENT_PATH")]
        event: PathBuf,
        #[arg(long, env = "GITHUB_EVENT_NAME")]
        event_name: Option<String>,
    },
    /// Admit a patient on the local forge (its first stage is queued for `ward run`).
    Admit {
        #[arg(long)]
        title: String,
        #[arg(long, default_value = "")]
        body: String,
        /// Then drive it (and anything else queued) to rest, as `ward run` does.
        #[arg(long)]
        run: bool,
    },
    /// The local hospital runs itself: run every queued stage (the engine's
    /// dispatches, the sweep's re-triggers, admissions) in order, as Actions
    /// would on GitHub, until every patient rests. Exit 1 when a run failed,
    /// was invalid, or a patient looped past the pipeline's limits.
    Run {
        /// Stage runs one patient may take in this run before the runner
        /// stops (default: the budget's stage visits plus one per stage).
        #[arg(long)]
        max_runs: Option<usize>,
    },
    /// Review a patient's pull request on the local forge, as the local
    /// person (`$USER`, else git's user.name): the discharge audit reads it
    /// as it reads a GitHub review; a patient waiting for it is queued for
    /// `ward run`.
    Review {
        issue: u64,
        /// Approve the pull request at its head.
        #[arg(long, required_unless_present = "request_changes", conflicts_with = "request_changes")]
        approve: bool,
        /// Ask for changes: the text goes back to treatment with the patient.
        #[arg(long, value_name = "TEXT")]
        request_changes: Option<String>,
    },
    /// Validate .github/ward.yml, role templates, skills and the precedent log.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Read a patient's chart.
    Chart {
        #[command(subcommand)]
        command: ChartCommand,
    },
    /// The precedent log.
    Precedents {
        #[command(subcommand)]
        command: PrecedentCommand,
    },
    /// The discharge checklist of a patient, as the discharge stage would
    /// see it now. Changes nothing; exit 1 when the audit fails.
    Audit {
        issue: u64,
        #[arg(long)]
        json: bool,
    },
    /// The charge nurse: revive stalled patients, repair labels, declare a
    /// lockdown when a facility fails.
    Sweep {
        /// Sweep as if it were this time (RFC 3339 or unix seconds).
        #[arg(long, env = "WARD_NOW")]
        now: Option<String>,
        /// Ping the Docker daemon and lock down when it does not answer.
        #[arg(long)]
        probe_docker: bool,
        /// Also remove what crashed runs left: expired containers, old
        /// worktrees, `ward/` branches of closed issues.
        #[arg(long)]
        reap: bool,
    },
    /// Infection control: lock every stage, or lift the lock.
    Lockdown {
        #[command(subcommand)]
        command: LockdownCommand,
    },
    /// The safety department's report: Markdown on stdout.
    Report {
        /// The period covered, ending now: `7d`, `24h`, `30d`.
        #[arg(long, default_value = "7d")]
        since: String,
        /// Also write a self-contained HTML page with charts.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Also post the report as a new issue.
        #[arg(long)]
        post: bool,
        /// Print the figures as JSON instead of Markdown, for other tools.
        #[arg(long)]
        json: bool,
        /// Also break the outcomes down by periods of this length (`1d`, `7d`).
        #[arg(long)]
        period: Option<String>,
        /// A merge not reverted within this many days counts as accepted.
        #[arg(long, default_value_t = crate::report::DEFAULT_ACCEPT_DAYS)]
        accept_days: u32,
        /// The safety department's weekly process review: with --post, the
        /// issue is titled as the review and proposes corrective actions.
        #[arg(long)]
        review: bool,
        #[arg(long, env = "WARD_NOW")]
        now: Option<String>,
    },
    /// The research department: file proposals (not admitted) from the
    /// hospital's record, at most --max, never one filed before. On GitHub
    /// in two jobs, as a stage: `--out` (read-only) and `--visit` (writes).
    Research {
        /// The period read, ending now: `30d`, `7d`.
        #[arg(long, default_value = "30d")]
        since: String,
        /// Proposals filed per run, at most (issues and the research role's
        /// pull request together). Default: `departments.research.max_proposals`.
        #[arg(long)]
        max: Option<usize>,
        /// GitHub's read-only job: run the research role and seal what it
        /// came to into this folder (its commit as a git bundle). Writes
        /// nothing to GitHub: `--visit` does.
        #[arg(long, value_name = "DIR", conflicts_with = "visit")]
        out: Option<PathBuf>,
        /// GitHub's writing job: take in the visit `--out` sealed (as
        /// hostile input), judge its change again, open it, and file the
        /// proposals. Runs nothing of the role's.
        #[arg(long, value_name = "DIR")]
        visit: Option<PathBuf>,
    },
    /// The safety department: open an incident (not admitted) for each
    /// revert on the base branch of a change ward merged, and for each open
    /// issue at `departments.safety.regression_label` that names one (its
    /// pull request or a commit). `ward sweep` runs it too.
    Safety {
        /// The base branch (default: `departments.sweep.facilities.base_branch`).
        #[arg(long)]
        base: Option<String>,
    },
    /// Write the default pipeline, roles, skills and precedent log into --root.
    Init {
        /// Put roles, skills and the precedent log under this folder
        /// (relative to the repository's top, e.g. `.github/ward/`) instead
        /// of the top-level `roles/`, `skills/`, `precedents/`; ward.yml's
        /// `paths:` says where they are.
        #[arg(long, value_name = "DIR")]
        into: Option<String>,
        /// With `--forge github` (or a GitHub remote): the ward action the
        /// workflows use, `OWNER/NAME@<full commit sha of a release tag>`.
        /// Default: the release this ward was built from.
        #[arg(long, value_name = "OWNER/NAME@SHA", env = "WARD_ACTION")]
        action: Option<String>,
        /// The agent preset every stage runs (`claude-code`, `codex`, `aider`,
        /// `gemini`, `opencode`; docs/agents.md) instead of the built-in
        /// stand-in.
        #[arg(long, value_name = "PRESET")]
        agent: Option<String>,
    },
    /// Check the installation: ward.yml, roles, the agent, Docker; with
    /// `--forge github` also the workflows, their permissions, the token,
    /// labels, the charts branch and the repository's settings. One line
    /// per check; exit 0 only when every check passes.
    Doctor {
        /// Set up what ward owns and finds missing: labels, the charts
        /// branch, `.ward/` in .gitignore, the schema beside ward.yml.
        #[arg(long)]
        fix: bool,
    },
    /// The built-in deterministic agent (run by the engine, not by people).
    #[command(hide = true)]
    StandIn {
        #[arg(long)]
        script: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Combine the queue's first patient with the base's tip in this
    /// checkout, run the integration check there, and seal the verdict into
    /// `--out`. Writes nothing to GitHub. Step output `record`: `true` when
    /// there is a verdict to record.
    Check {
        #[arg(long)]
        out: PathBuf,
    },
    /// Take in the verdict `ward queue check` sealed (as hostile input),
    /// read the facts again, record it (merge, send back, or check again)
    /// and start the next turn while patients wait.
    Record {
        #[arg(long)]
        verdict: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum LockdownCommand {
    /// Declare a lockdown (triage permission).
    /// Who declares it is who the forge says is acting (the token's user,
    /// or the event's sender in a workflow run; locally, you): never a name
    /// given on the command line.
    On {
        #[arg(long)]
        reason: String,
    },
    /// Lift every lockdown (maintain permission; the actor as for `on`).
    Off,
    /// Print the lockdown in force; exit 3 while there is one.
    Status,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Parse and validate everything; exit 2 on any problem.
    Check,
    /// Print the JSON Schema of .github/ward.yml (what `.github/ward.schema.json` holds).
    Schema,
}

#[derive(Debug, Subcommand)]
pub enum ChartCommand {
    /// Print the chart as stored.
    Show { issue: u64 },
    /// Print the notes, optionally of one kind.
    Notes {
        issue: u64,
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PrecedentCommand {
    /// Rank precedents against TEXT.
    Search {
        text: String,
        #[arg(long, default_value_t = 5)]
        top: usize,
    },
    /// Check the log: every entry well-formed and in sequence, no date in
    /// the future, no engine-written entry; with --base, also that every
    /// entry at REV is still there byte for byte (append-only).
    Check {
        /// A git revision (branch, tag, sha) to compare against, e.g. `origin/main`.
        #[arg(long, env = "WARD_PRECEDENTS_BASE")]
        base: Option<String>,
        /// Today's date for the future-date check (default: today, UTC).
        #[arg(long)]
        today: Option<chrono::NaiveDate>,
    },
}

/// Errors that mean "your input is wrong" (exit 2) rather than "the run failed" (exit 1).
fn is_bad_input(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|e| e.is::<ConfigErrors>() || e.is::<ScenarioError>() || e.is::<PrecedentError>() || e.is::<BadInput>())
        || err.chain().any(|e| e.is::<crate::discharge::review::ReviewRefused>())
}

/// The reader of ward's output went away (`ward report | head`): not an
/// error, ward ends quietly as `cat` does.
#[derive(Debug, thiserror::Error)]
#[error("stdout was closed by its reader")]
pub struct ClosedPipe;

/// Writes `text` to stdout; a closed pipe is [`ClosedPipe`].
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => anyhow::Error::new(ClosedPipe),
        _ => anyhow::Error::new(e).context("could not write to stdout"),
    })
}

/// A user-input problem with a message of its own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

pub async fn run(cli: Cli) -> ExitCode {
    match dispatch(cli).await {
        Ok(code) => code,
        Err(err) if err.is::<ClosedPipe>() => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", shown(&err.to_string()));
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {}", shown(&cause.to_string()));
            }
            ExitCode::from(if is_bad_input(&err) { EXIT_BAD_INPUT } else { EXIT_FAILED })
        }
    }
}

/// `ward init`: the pipeline, and on GitHub (`--forge github`, in Actions,
/// or a GitHub remote) the workflows, the CI named, the labels.
async fn init(cli: &Cli, into: Option<&str>, action: Option<&str>, agent: Option<&str>) -> anyhow::Result<ExitCode> {
    if init_for_github(cli) {
        let repo = cli
            .repo
            .clone()
            .or_else(|| std::env::var("GITHUB_REPOSITORY").ok().filter(|r| !r.is_empty()))
            .or_else(|| crate::install::github_remote(&cli.root));
        let init = crate::install::GitHubInit { root: &cli.root, into, agent, action, repo };
        for line in crate::install::init_github(&init).await? {
            println!("{line}");
        }
        println!("next: commit and push; then `ward doctor --forge github` (docs/github.md)");
        return Ok(ExitCode::SUCCESS);
    }
    let written = crate::defaults::install_into(&cli.root, into, agent)?;
    println!("wrote {} files under {}; next: `ward config check`", written.len(), cli.root.display());
    match crate::defaults::default_branch(&cli.root) {
        Some((branch, from)) => println!("base branch: `{branch}` (from {from})"),
        None => println!("base branch: `main` (no git repository or setting names one; edit ward.yml)"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `ward init` installs for GitHub with `--forge github`, in Actions, or
/// when the repository has a GitHub remote (`--forge local` says no).
fn init_for_github(cli: &Cli) -> bool {
    match cli.forge {
        Some(kind) => kind == ForgeKind::Github,
        None => forge_kind(cli) == ForgeKind::Github || crate::install::github_remote(&cli.root).is_some(),
    }
}

fn forge_kind(cli: &Cli) -> ForgeKind {
    cli.forge.unwrap_or_else(|| {
        if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") { ForgeKind::Github } else { ForgeKind::Local }
    })
}

/// The forge the command works on.
pub async fn open_forge(cli: &Cli, config: &Config) -> anyhow::Result<Arc<dyn Forge>> {
    match forge_kind(cli) {
        ForgeKind::Local => Ok(Arc::new(LocalForge::new(&cli.root, &config.engine_account))),
        ForgeKind::Github => Ok(Arc::new(crate::forge::github::GitHubForge::from_env(
            cli.repo.as_deref(),
            &config.charts_branch,
            &config.engine_account,
        )?)),
    }
}

fn load_config(root: &Path) -> anyhow::Result<Config> {
    Ok(Config::load(root)?)
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Demo { dir, swarm, emulator } => demo(dir.as_deref(), *swarm, emulator.as_deref()).await,
        Command::Simulate { scenarios, json } => simulate(&cli.root, scenarios, *json).await,
        Command::Event { event, event_name } => {
            let parsed = crate::event::read_event(event, event_name.as_deref()).map_err(|e| BadInput(e.to_string()))?;
            if let crate::event::Parsed::NotOurs { reason } = &parsed {
                eprintln!("not a ward event: {reason}");
            }
            println!("{}", serde_json::to_string(&parsed)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Stage { event: Some(event), event_name, .. } => {
            crate::agent::become_subreaper().context("could not make ward the subreaper of its agent")?;
            event_command(&cli, event, event_name.as_deref(), crate::stage::Phase::Whole).await
        }
        Command::Visit { event, event_name, out } => {
            crate::agent::become_subreaper().context("could not make ward the subreaper of its agent")?;
            let out = absolute(out)?;
            let phase = crate::stage::Phase::Visit { out: out.clone() };
            let code = event_command(&cli, event, event_name.as_deref(), phase).await?;
            // The folder always says something, for the artifact: a visit
            // job that ran no agent hands on only why.
            if !out.join(crate::stage::visit::VISIT_FILE).exists() {
                std::fs::create_dir_all(&out).with_context(|| format!("could not create {}", out.display()))?;
                let why = out.join("no-visit.txt");
                std::fs::write(&why, "No agent ran in this visit job; the record job decides alone.\n")
                    .with_context(|| format!("could not write {}", why.display()))?;
            }
            Ok(code)
        }
        Command::Slot { event, event_name, free } => slot(&cli, event, event_name, free).await,
        Command::Queue { command } => merge_queue(&cli, command).await,
        Command::Record { visit, event, event_name } => {
            let phase = crate::stage::Phase::Record { from: absolute(visit)? };
            event_command(&cli, event, event_name.as_deref(), phase).await
        }
        Command::Stage { issue, label, .. } => {
            let issue = issue.context("--issue or --event is required")?;
            crate::agent::become_subreaper().context("could not make ward the subreaper of its agent")?;
            let config = load_config(&cli.root)?;
            let forge = open_forge(&cli, &config).await?;
            let h = Hospital::load(&cli.root, forge)?;
            let req = StageRequest { label: label.clone(), ..StageRequest::new(IssueNumber(issue)) };
            let result = crate::stage::run_stage(&h, &req).await?;
            println!("{}", shown(&describe_result(&result)));
            Ok(ExitCode::from(result.exit_code()))
        }
        Command::Command { event } => command_from_event(&cli, event).await,
        Command::Admit { title, body, run } => {
            let config = load_config(&cli.root)?;
            let forge = LocalForge::new(&cli.root, &config.engine_account);
            let issue = forge.admit(NewIssue {
                title: title.clone(),
                body: body.clone(),
                labels: vec![config.admission.clone()],
            })?;
            // On GitHub the person's label starts the first stage; here the queue holds that event.
            forge.dispatch_stage(issue.number, &config.admission).await?;
            println!("admitted {} with `{}`", issue.number, config.admission);
            if *run {
                return run_queue(&cli, forge, None).await;
            }
            println!("next: `ward run` drives it (and anything else queued) to rest");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { max_runs } => {
            if forge_kind(&cli) == ForgeKind::Github {
                return Err(
                    BadInput("`ward run` drives the local forge; on GitHub, Actions runs each stage".into()).into()
                );
            }
            let config = load_config(&cli.root)?;
            run_queue(&cli, LocalForge::new(&cli.root, &config.engine_account), *max_runs).await
        }
        Command::Review { issue, approve, request_changes } => {
            review(&cli, IssueNumber(*issue), *approve, request_changes.clone()).await
        }
        Command::Config { command: ConfigCommand::Check } => config_check(&cli.root),
        Command::Config { command: ConfigCommand::Schema } => {
            print!("{}", crate::config::schema::schema_text());
            Ok(ExitCode::SUCCESS)
        }
        Command::Chart { command } => read::chart(&cli, command).await,
        Command::Precedents { command: PrecedentCommand::Check { base, today } } => {
            read::precedents_check(&cli.root, base.as_deref(), *today)
        }
        Command::Audit { issue, json } => read::audit(&cli, IssueNumber(*issue), *json).await,
        Command::Precedents { command: PrecedentCommand::Search { text, top } } => {
            read::precedents_search(&cli.root, text, *top)
        }
        Command::Sweep { now, probe_docker, reap } => {
            let config = load_config(&cli.root)?;
            let forge = open_forge(&cli, &config).await?;
            let now = now.as_deref();
            departments::sweep(&*forge, &config, &cli.root, now, *probe_docker, *reap).await
        }
        Command::Lockdown { command } => {
            use departments as dept;
            let config = load_config(&cli.root)?;
            let forge = open_forge(&cli, &config).await?;
            // Who acts is the forge's answer, never a flag: a name anyone
            // could type would lift a lockdown with someone else's permission.
            let actor =
                || async { forge.acting_user().await.context("could not tell who is acting, so nothing was changed") };
            match command {
                LockdownCommand::On { reason } => dept::lockdown_on(&*forge, reason, &actor().await?, None).await,
                LockdownCommand::Off => dept::lockdown_off(&*forge, &config, &actor().await?, None).await,
                LockdownCommand::Status => dept::lockdown_status(&*forge).await,
            }
        }
        Command::Report { since, html, post, json, period, accept_days, review, now } => {
            let config = load_config(&cli.root)?;
            let forge = open_forge(&cli, &config).await?;
            let (html, now) = (html.as_deref(), now.as_deref());
            let out = departments::ReportOutput {
                html,
                post: *post,
                json: *json,
                period: period.as_deref(),
                accept_days: *accept_days,
                review: *review,
            };
            departments::report(&*forge, &config, since, out, now).await
        }
        Command::Research { since, max, out, visit } => {
            let config = load_config(&cli.root)?;
            let forge = open_forge(&cli, &config).await?;
            let step = departments::ResearchStep::of(out.as_deref(), visit.as_deref())?;
            departments::research(forge, &config, &cli.root, since, *max, step).await
        }
        Command::Safety { base } => {
            let config = load_config(&cli.root)?;
            let forge = open_forge(&cli, &config).await?;
            departments::safety(&*forge, &config, base.as_deref()).await
        }
        Command::Init { into, action, agent } => init(&cli, into.as_deref(), action.as_deref(), agent.as_deref()).await,
        Command::Doctor { fix } => doctor(&cli, *fix).await,
        Command::StandIn { script } => match crate::stand_in::stand_in(script.as_deref()) {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(message) => {
                eprintln!("stand-in: {message}");
                Ok(ExitCode::FAILURE)
            }
        },
    }
}

/// `ward stage|visit|record --event FILE`: the event first (a foreign
/// event costs no config, no forge, no call), then the run.
async fn event_command(
    cli: &Cli,
    event: &Path,
    event_name: Option<&str>,
    phase: crate::stage::Phase,
) -> anyhow::Result<ExitCode> {
    let trigger = match crate::event::read_event(event, event_name).map_err(|e| BadInput(e.to_string()))? {
        crate::event::Parsed::NotOurs { reason } => {
            println!("not a ward event: {reason}");
            return Ok(ExitCode::SUCCESS);
        }
        crate::event::Parsed::Ours(trigger) => trigger,
    };
    let config = load_config(&cli.root)?;
    let forge = open_forge(cli, &config).await?;
    let repository = forge.describe();
    let h = Hospital::load(&cli.root, forge)?;
    stage_from_event(&h, &trigger, &repository, phase).await
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("could not resolve {}", path.display()))
}

/// `ward stage --event FILE` after the event parsed: prints one line,
/// reports to Actions, exits 0 unless the run failed (1) or the input is bad (2).
async fn stage_from_event(
    h: &Hospital,
    trigger: &crate::event::Trigger,
    repository: &str,
    phase: crate::stage::Phase,
) -> anyhow::Result<ExitCode> {
    use crate::actions::EventRun;
    // The visit job decides nothing: the record job, which `needs:` it to
    // succeed, gives the run's exit code. Only an error fails the visit.
    let visit = matches!(phase, crate::stage::Phase::Visit { .. });
    let code = |code: u8| if visit { ExitCode::SUCCESS } else { ExitCode::from(code) };
    let run = crate::actions::stage_from_event(h, trigger, phase).await.map_err(|e| {
        if e.is::<crate::actions::GuardError>() { anyhow::Error::new(BadInput(e.to_string())) } else { e }
    })?;
    // The visit job tells its record job whether there is anything to
    // record: nothing when the event was not for a stage, or when the look
    // found nothing to do (the record job would find the same, and a
    // wake-up that finds nothing new costs only the visit job's reads).
    let record = match &run {
        EventRun::Ignored(_) | EventRun::Sweep => false,
        EventRun::Refused { .. } => true,
        EventRun::Ran(result) => !matches!(**result, crate::stage::StageResult::NoOp { .. }),
    };
    if visit {
        crate::actions::visit_output(record)?;
    }
    let result = match run {
        EventRun::Ignored(reason) => {
            println!("nothing to do: {}", shown(&reason));
            return Ok(ExitCode::SUCCESS);
        }
        EventRun::Refused { issue, reason } => {
            println!("{issue} refused: {}", shown(&reason));
            crate::actions::report_refusal(issue, trigger.label.as_deref(), &reason, repository)?;
            return Ok(code(EXIT_REFUSED));
        }
        EventRun::Sweep => {
            return Err(BadInput("a `schedule` event runs `ward sweep`, not `ward stage`".into()).into());
        }
        EventRun::Ran(result) => *result,
    };
    // Reasons quote what agents wrote: shown escaped. The annotation is
    // ward's own line, and the one workflow command ward prints.
    println!("{}", shown(&describe_result(&result)));
    if let Some(annotation) = crate::actions::report_to_actions(&result, &h.config, repository)? {
        println!("{annotation}");
    }
    Ok(code(result.exit_code()))
}

/// `ward demo [--swarm [--emulator IMAGE]]`: exit 0 when every patient was discharged.
async fn demo(dir: Option<&Path>, swarm: bool, emulator: Option<&str>) -> anyhow::Result<ExitCode> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => tempdir_path("ward-demo")?,
    };
    let exe = std::env::current_exe().context("could not find the ward binary itself")?;
    if swarm {
        let run = crate::demo::swarm::run(&dir, &exe, emulator).await?;
        print!("{}", crate::demo::swarm::render(&run));
        return Ok(if run.all_discharged { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let run = crate::demo::run(&dir, &exe).await?;
    print!("{}", crate::demo::render(&run));
    Ok(if run.discharged { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `ward queue check|record`: one half of a turn of ward's merge queue on
/// GitHub. Exit 0 unless something failed; a refused verdict is bad input.
async fn merge_queue(cli: &Cli, command: &QueueCommand) -> anyhow::Result<ExitCode> {
    use crate::discharge::queue::{Source, Verdict, check_next, record_verdict};
    let config = load_config(&cli.root)?;
    if forge_kind(cli) != ForgeKind::Github {
        return Err(BadInput(
            "`ward queue` is the two jobs of ward's merge queue on GitHub (ward-queue.yml); on the local forge \
             `ward run` runs the queue"
                .into(),
        )
        .into());
    }
    if config.integration.is_none() {
        println!("no `integration` in .github/ward.yml: ward's merge queue does not run");
        crate::actions::set_outputs(&[("record", "false")])?;
        return Ok(ExitCode::SUCCESS);
    }
    let forge = open_forge(cli, &config).await?;
    let now = chrono::Utc::now();
    match command {
        QueueCommand::Check { out } => {
            // The check runs the patients' code: what it leaves running is
            // ward's to kill before the verdict is sealed.
            crate::agent::become_subreaper().context("could not make ward the subreaper of the check")?;
            let remote = crate::workspace::PushTarget::detect(
                |k| std::env::var(k).ok(),
                crate::secrets::Secrets::global().github_token(),
            )
            .ok_or_else(|| {
                BadInput(
                    "`ward queue check` fetches what it checks from the workflow's repository: run it in GitHub \
                     Actions (GITHUB_ACTIONS=true, GITHUB_REPOSITORY)"
                        .into(),
                )
            })?;
            let root = absolute(&cli.root)?;
            let plan = crate::workspace::WorkspacePlan::detect_for_reaping(&root, |k| std::env::var(k).ok())?;
            match check_next(&*forge, &config, &root, plan.as_ref(), &Source::Remote(&remote), now).await? {
                None => {
                    println!("ward's merge queue is empty: nothing to check");
                    crate::actions::set_outputs(&[("record", "false")])?;
                }
                Some(verdict) => {
                    verdict.write(&absolute(out)?)?;
                    println!("{}", shown(&verdict.summary()));
                    crate::actions::set_outputs(&[("record", "true")])?;
                }
            }
        }
        QueueCommand::Record { verdict } => {
            let verdict = Verdict::read(verdict).map_err(|e| BadInput(format!("{e:#}")))?;
            let done = record_verdict(&*forge, &config, verdict, now).await?;
            println!("{}", shown(&done.line));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `ward slot`: `--free RUN`, else `--event FILE`.
async fn slot(
    cli: &Cli,
    event: &Option<PathBuf>,
    event_name: &Option<String>,
    free: &Option<String>,
) -> anyhow::Result<ExitCode> {
    match free {
        Some(run) => free_slot(cli, run).await,
        None => slot_from_event(cli, event.as_deref(), event_name.as_deref()).await,
    }
}

/// `ward slot --event FILE`: without a cap, the visit runs and nothing is
/// read or written; with one, the guards (no write) and a slot for this
/// run, or the patient queued. The step outputs `visit` (`false` only
/// when the patient was queued) and `slot` (the run id holding a slot, or
/// empty). Exit 0 unless something failed.
async fn slot_from_event(cli: &Cli, event: Option<&Path>, event_name: Option<&str>) -> anyhow::Result<ExitCode> {
    use crate::actions::{EventRun, set_outputs};
    let event = event.ok_or_else(|| BadInput("`ward slot` needs --event FILE or --free RUN".into()))?;
    let config = load_config(&cli.root)?;
    if !config.capacity.capped(&config) {
        println!("no cap on agents in .github/ward.yml: the visit runs without a slot");
        set_outputs(&[("visit", "true"), ("slot", "")])?;
        return Ok(ExitCode::SUCCESS);
    }
    let trigger = match crate::event::read_event(event, event_name).map_err(|e| BadInput(e.to_string()))? {
        crate::event::Parsed::NotOurs { reason } => {
            println!("not a ward event: {reason}");
            set_outputs(&[("visit", "true"), ("slot", "")])?;
            return Ok(ExitCode::SUCCESS);
        }
        crate::event::Parsed::Ours(trigger) => trigger,
    };
    let forge = open_forge(cli, &config).await?;
    let h = Hospital::load(&cli.root, forge)?;
    let run = crate::actions::stage_from_event(&h, &trigger, crate::stage::Phase::Slot).await.map_err(|e| {
        if e.is::<crate::actions::GuardError>() { anyhow::Error::new(BadInput(e.to_string())) } else { e }
    })?;
    // Only a queued patient skips the visit; anything else the visit job
    // looks at as before (and stops without an agent where this did).
    let (line, visit, slot) = match &run {
        EventRun::Ignored(reason) => (format!("nothing to do: {reason}"), true, None),
        EventRun::Refused { issue, reason } => (format!("{issue} refused: {reason}"), true, None),
        EventRun::Sweep => {
            return Err(BadInput("a `schedule` event runs `ward sweep`, not `ward slot`".into()).into());
        }
        EventRun::Ran(result) => {
            let slot = match &**result {
                StageResult::SlotTaken { run, .. } => Some(run.clone()),
                _ => None,
            };
            let queued = matches!(&**result, StageResult::Moved(t) if t.to == h.config.capacity.queued_label);
            (describe_result(result), !queued, slot)
        }
    };
    println!("{}", shown(&line));
    set_outputs(&[("visit", if visit { "true" } else { "false" }), ("slot", slot.as_deref().unwrap_or(""))])?;
    Ok(ExitCode::SUCCESS)
}

/// `ward slot --free RUN`: frees the run's agent slot (if it still holds
/// one) and starts the oldest queued patient that fits; the step output
/// `freed=true` tells the release job it has nothing left to do.
async fn free_slot(cli: &Cli, run: &str) -> anyhow::Result<ExitCode> {
    let config = load_config(&cli.root)?;
    if config.capacity.capped(&config) {
        let forge = open_forge(cli, &config).await?;
        let now = chrono::Utc::now();
        let next = crate::state::slots::free(&*forge, &config, Some(run), now)
            .await
            .with_context(|| format!("could not free the agent slot of run {run}; it expires by itself"))?;
        match next {
            Some(issue) => println!("the agent slot of run {run} is free; {issue} leaves the queue for its stage"),
            None => println!("the agent slot of run {run} is free; no queued patient fits"),
        }
    } else {
        println!("no cap on agents in .github/ward.yml: run {run} holds no slot");
    }
    crate::actions::set_outputs(&[("freed", "true")])?;
    Ok(ExitCode::SUCCESS)
}

/// `ward command --event FILE`: the comment first (a comment that is not
/// a command costs no config, no forge, no call), then the command; one
/// line printed, exit 0 unless something failed.
async fn command_from_event(cli: &Cli, event: &Path) -> anyhow::Result<ExitCode> {
    use crate::command::act::Acted;
    let text = std::fs::read_to_string(event).map_err(|e| {
        BadInput(format!(
            "cannot read the event file {}: {e} (in a workflow, pass \"$GITHUB_EVENT_PATH\")",
            event.display()
        ))
    })?;
    let comment = match crate::command::read_comment_event(&text, event).map_err(|e| BadInput(e.to_string()))? {
        Some(c) if crate::command::parse(&c.body).is_some() => c,
        _ => {
            println!("nothing to do: not a created comment with a `/ward` line");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let config = load_config(&cli.root)?;
    let forge = open_forge(cli, &config).await?;
    let h = Hospital::load(&cli.root, forge)?;
    let line = match crate::command::act::act(&h, &comment).await? {
        Acted::NotOurs(why) => format!("nothing to do: {why}"),
        Acted::NotAllowed { who, have, need } => format!(
            "{} command by `{who}` ignored: {} permission, commands need {}",
            comment.issue,
            format!("{have:?}").to_lowercase(),
            format!("{need:?}").to_lowercase()
        ),
        Acted::Declined(answer) => format!("{} command not carried out: {answer}", comment.issue),
        Acted::Done(answer) => format!("{} command done: {answer}", comment.issue),
    };
    println!("{}", shown(&line));
    Ok(ExitCode::SUCCESS)
}

/// `ward run`: drains the local queue, one line per stage run, then where
/// every patient is.
async fn run_queue(cli: &Cli, forge: LocalForge, max_runs: Option<usize>) -> anyhow::Result<ExitCode> {
    let forge = Arc::new(forge);
    let h = Hospital::load(&cli.root, forge.clone())?;
    let limit = max_runs.unwrap_or_else(|| crate::runner::default_run_limit(&h));
    // The exit code says the most serious thing any run did: failed, then
    // locked, then refused.
    let mut codes = Vec::new();
    let drained = crate::runner::drain(&h, &forge, limit, &mut |issue, result| match result {
        Ok(r) => {
            codes.push(r.exit_code());
            println!("{}", describe_result(r))
        }
        Err(e) => println!("{issue} failed: {e:#}"),
    })
    .await?;
    for line in &drained.integrated {
        println!("merge queue: {line}");
    }
    if drained.runs == 0 && drained.integrated.is_empty() {
        println!("nothing queued");
    }
    for line in &drained.patients {
        println!("{line}");
    }
    if let Some(why) = &drained.stopped {
        eprintln!("{why}");
    }
    if drained.failed > 0 || drained.stopped.is_some() {
        return Ok(ExitCode::from(EXIT_FAILED));
    }
    let worst = [crate::stage::EXIT_LOCKED, EXIT_REFUSED].into_iter().find(|c| codes.contains(c));
    Ok(ExitCode::from(worst.unwrap_or(crate::stage::EXIT_OK)))
}

/// `ward review N`: a person's review on the local forge.
async fn review(cli: &Cli, issue: IssueNumber, approve: bool, changes: Option<String>) -> anyhow::Result<ExitCode> {
    use crate::discharge::review::{self, Verdict};
    if forge_kind(cli) == ForgeKind::Github {
        return Err(BadInput(
            "`ward review` reviews on the local forge; on GitHub, review the pull request there".into(),
        )
        .into());
    }
    let config = load_config(&cli.root)?;
    let forge = LocalForge::new(&cli.root, &config.engine_account);
    let verdict = match (approve, changes) {
        (_, Some(text)) => Verdict::RequestChanges(text),
        (true, None) => Verdict::Approve,
        (false, None) => return Err(BadInput("give --approve or --request-changes \"TEXT\"".into()).into()),
    };
    let reviewed = review::review(&forge, &config, issue, verdict).await?;
    emit(&review::describe(issue, &config, &reviewed))?;
    Ok(ExitCode::SUCCESS)
}

/// One line per result, for people and for workflow logs.
pub fn describe_result(result: &StageResult) -> String {
    match result {
        StageResult::Moved(t) => format!(
            "{} {} ({}): {} -> {} in {} ms (agent {} ms), run {}",
            t.issue, t.stage, t.role, t.outcome, t.to, t.total_ms, t.agent_ms, t.run
        ),
        StageResult::NoOp { reason, .. } => format!("nothing to do: {reason}"),
        StageResult::Deferred { reason, .. } => format!("for the record job: {reason}"),
        StageResult::SlotTaken { issue, stage, run } => {
            format!("{issue} {stage}: run {run} took an agent slot; the visit job runs the agent")
        }
        StageResult::Refused { issue, stage, reason, to, .. } => format!(
            "{issue} {stage} refused: {reason}{}",
            to.as_ref().map(|t| format!(" (sent to {t})")).unwrap_or_default()
        ),
        StageResult::Invalid { issue, stage, run, reason, artifacts } => format!(
            "{issue} {stage} run {run} was invalid, label unchanged: {reason}\nartifacts: {}",
            artifacts.display()
        ),
    }
}

/// `ward doctor`: the local checks, then (with `--forge github`) GitHub's.
async fn doctor(cli: &Cli, fix: bool) -> anyhow::Result<ExitCode> {
    let path = std::env::var("PATH").unwrap_or_default();
    let (mut report, config) = crate::doctor::local(&cli.root, &path, fix).await;
    if forge_kind(cli) == ForgeKind::Github {
        match &config {
            Some(config) => {
                let forge = crate::forge::github::GitHubForge::from_env(
                    cli.repo.as_deref(),
                    &config.charts_branch,
                    &config.engine_account,
                )?;
                report.0.extend(crate::doctor::github(&forge, config, fix).await.0);
            }
            None => report.0.push(crate::doctor::Check::fail(
                "github",
                "not checked: ward.yml must load first (it names the labels and the charts branch)",
                "fix ward.yml, then run doctor again",
            )),
        }
    }
    print!("{report}");
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn config_check(root: &Path) -> anyhow::Result<ExitCode> {
    let config = load_config(root)?;
    let prompts = Prompts::for_config(root, &config);
    let mut problems: Vec<String> = prompts.check(&config).iter().map(|e| e.to_string()).collect();
    // The research role renders too, when it runs.
    if config.departments.research.agent {
        let template = PathBuf::from(config.paths.roles_dir()).join(crate::research::policy::TEMPLATE);
        if let Err(e) = prompts.render(&template, &crate::research::policy::ResearchContext::sample()) {
            problems.push(e.to_string());
        }
    }
    if let Err(e) = PrecedentLog::load(&root.join(&config.precedents.log)) {
        problems.push(e.to_string());
    }
    if problems.is_empty() {
        println!(
            "{CONFIG_PATH}: ok ({} stages, {} roles, {} labels; every role renders)",
            config.stages.len(),
            config.roles.len(),
            config.labels.len()
        );
        match &config.agent.applied {
            Some(applied) => println!("{}", applied.describe()),
            None => println!("agent: ward.yml's `command` (no preset)"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("error: {p}");
    }
    Ok(ExitCode::from(EXIT_BAD_INPUT))
}

async fn simulate(root: &Path, files: &[PathBuf], json: bool) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("could not find the ward binary itself")?;
    // Scenario files are all checked before any runs (exit 2 on a malformed one).
    for f in files {
        crate::simulate::load_scenario(f)?;
    }
    let mut reports = Vec::new();
    for f in files {
        let scratch = tempfile_dir("ward-simulate")?;
        let report = crate::simulate::run_scenario(root, f, scratch.path(), &exe).await?;
        if !json {
            let status = if report.failures.is_empty() { "ok" } else { "FAILED" };
            println!("{status}  {} ({})", report.scenario, f.display());
            if !report.failures.is_empty() {
                print!("{}", crate::simulate::render_timeline(&report.trace));
                for failure in &report.failures {
                    println!("  {failure}");
                }
            }
        }
        reports.push(report);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    let failed = reports.iter().filter(|r| !r.failures.is_empty()).count();
    if !json {
        println!("{} passed, {failed} failed", reports.len() - failed);
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn tempfile_dir(prefix: &str) -> anyhow::Result<TempDir> {
    let path = tempdir_path(prefix)?;
    std::fs::create_dir_all(&path)?;
    Ok(TempDir(path))
}

/// A fresh path under the system temporary folder (not created).
fn tempdir_path(prefix: &str) -> anyhow::Result<PathBuf> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    Ok(std::env::temp_dir().join(format!("{prefix}-{}-{:x}", std::process::id(), now.as_nanos() & 0xff_ffff)))
}

/// A scratch folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
