//! The checks of the repository on GitHub. Reads only, except what `--fix`
//! sets up: the labels and the charts branch.

use super::workflows::{differences, dispatchable, excess_permissions, missing_permissions, shipped, unfiltered};
use super::{Check, Report};
use crate::config::{Config, DispatchMode};
use crate::forge::Forge;
use crate::forge::github::{GitHubForge, Probe};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every GitHub check, in the order a person sets things up.
pub async fn github(forge: &GitHubForge, config: &Config, fix: bool) -> Report {
    let mut report = Report::default();
    let repo = forge.describe();
    let branch = match forge.default_branch().await {
        Ok(b) => {
            report.0.push(Check::ok("repository", format!("{repo} (default branch `{b}`)")));
            b
        }
        Err(e) => {
            let fix = "check --repo / GITHUB_REPOSITORY, and that the token (WARD_TOKEN or GITHUB_TOKEN) can see it";
            report.0.push(Check::fail("repository", e.to_string(), fix));
            return report;
        }
    };
    report.0.push(token(forge, &branch).await);
    report.0.extend(installed_workflows(forge, config).await);
    report.0.push(labels(forge, config, fix).await);
    report.0.push(charts_branch(forge, fix).await);
    report.0.push(pull_requests(forge, config).await);
    report.0.push(merge_queue(forge, config, &branch).await);
    report.0.extend(ci(forge, config).await);
    report
}

async fn token(forge: &GitHubForge, branch: &str) -> Check {
    let mut missing = Vec::new();
    for probe in Probe::ALL {
        match forge.token_may(*probe, branch).await {
            Ok(true) => {}
            Ok(false) => missing.push(format!("`{}`", probe.grant())),
            Err(e) => return Check::fail("token", e.to_string(), "run again; if it stays, check the token"),
        }
    }
    if missing.is_empty() {
        let all: Vec<&str> = Probe::ALL.iter().map(|p| p.grant()).collect();
        return Check::ok("token", format!("may {} (nothing was changed to find out)", all.join(", ")));
    }
    Check::fail(
        "token",
        format!("lacks {} (nothing was changed to find out)", missing.join(", ")),
        "run doctor with the token the stages use: in a workflow, give the job those permissions; \
         an app token (WARD_TOKEN) needs them as installation permissions",
    )
}

/// Each workflow ward ships: present, not outdated, its jobs' permissions;
/// the pipeline's check started by changes to ward's files where they are.
async fn installed_workflows(forge: &GitHubForge, config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    for (name, text) in shipped() {
        if name == QUEUE_WORKFLOW && config.integration.is_none() {
            let why = "not needed: .github/ward.yml sets no `integration:`, so ward's merge queue does not run";
            out.push(Check::ok(format!("workflow {name}"), why));
            continue;
        }
        let path = format!(".github/workflows/{name}");
        let copy = format!("copy `{path}` of ward {VERSION} into the repository's default branch (docs/github.md)");
        let installed = match forge.file_on_default_branch(&path).await {
            Ok(Some(t)) => t,
            Ok(None) => {
                out.push(Check::fail(format!("workflow {name}"), "missing", copy));
                continue;
            }
            Err(e) => {
                out.push(Check::fail(format!("workflow {name}"), e.to_string(), "give the token `contents: read`"));
                continue;
            }
        };
        out.push(match differences(text, &installed) {
            Ok(d) if d.is_empty() => Check::ok(format!("workflow {name}"), format!("matches ward {VERSION}'s")),
            Ok(d) => Check::fail(
                format!("workflow {name}"),
                format!("differs from ward {VERSION}'s: {}", d.join("; ")),
                format!("update it: {copy}"),
            ),
            Err(e) => Check::fail(format!("workflow {name}"), format!("`{path}` {e}"), copy),
        });
        if name == PIPELINE_WORKFLOW {
            out.push(pipeline_paths(&path, &installed, config));
        }
        // The job that runs the agent holds no write permission.
        for (job, excess) in excess_permissions(text, &installed).unwrap_or_default() {
            let name = format!("read-only {name}/{job}");
            out.push(if excess.is_empty() {
                Check::ok(name, "grants no write: the agent that runs there can change nothing on GitHub")
            } else {
                let grants = excess.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
                Check::fail(
                    name,
                    format!("grants {grants}, and the agent runs in this job"),
                    "give the job only `read` permissions, as the shipped workflow does",
                )
            });
        }
        for (job, missing) in missing_permissions(text, &installed).unwrap_or_default() {
            let name = format!("permissions {name}/{job}");
            out.push(if missing.is_empty() {
                Check::ok(name, "grants what the job needs")
            } else {
                let grants = missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
                Check::fail(name, format!("lacks {grants}"), format!("add {grants} to the job's `permissions:`"))
            });
        }
    }
    out
}

/// The workflow that checks a pull request changing the pipeline.
const PIPELINE_WORKFLOW: &str = "ward-pipeline.yml";
/// The workflow that runs ward's own merge queue (with `integration:`).
const QUEUE_WORKFLOW: &str = "ward-queue.yml";

/// ward-pipeline.yml's `paths:` filter covers ward.yml, the roles, the
/// skills and the precedent log where ward.yml's `paths` puts them: else a
/// pull request that changes them is merged unchecked.
fn pipeline_paths(path: &str, installed: &str, config: &Config) -> Check {
    let name = "workflow paths";
    let folder = |dir: String, file: &str| format!("{dir}/{file}");
    let files = [
        crate::config::CONFIG_PATH.to_string(),
        folder(config.paths.roles_dir(), "x.md"),
        folder(config.paths.skills_dir(), "x.md"),
        config.precedents.log.to_string_lossy().replace('\\', "/"),
    ];
    match unfiltered(installed, &files) {
        Ok(missed) if missed.is_empty() => Check::ok(
            name,
            format!("`{path}` checks pull requests that change ward.yml, the roles, skills and precedents"),
        ),
        Ok(missed) => {
            let named = missed.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
            let globs = [config.paths.roles_dir(), config.paths.skills_dir(), config.paths.precedents_dir()]
                .map(|d| format!("\"{d}/**\""))
                .join(", ");
            Check::fail(
                name,
                format!("a pull request that changes {named} does not start `{path}`, so it is merged unchecked"),
                format!("add {globs} to `on.pull_request.paths` in `{path}` (ward.yml's `paths` puts them there)"),
            )
        }
        Err(e) => Check::fail(name, format!("`{path}` {e}"), "fix the workflow's YAML"),
    }
}

async fn labels(forge: &GitHubForge, config: &Config, fix: bool) -> Check {
    let have = match forge.label_names().await {
        Ok(h) => h,
        Err(e) => return Check::fail("labels", e.to_string(), "give the token `issues: read`"),
    };
    let specs = config.label_specs();
    let missing: Vec<&str> = specs
        .iter()
        .filter(|s| !have.iter().any(|h| h.eq_ignore_ascii_case(&s.name)))
        .map(|s| s.name.as_str())
        .collect();
    if missing.is_empty() {
        return Check::ok("labels", format!("all {} of ward.yml's labels exist", specs.len()));
    }
    let list = missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
    if fix {
        return match forge.ensure_labels(&specs).await {
            Ok(()) => Check::fixed("labels", format!("created {list}")),
            Err(e) => Check::fail("labels", e.to_string(), "create them with a token that has `issues: write`"),
        };
    }
    Check::fail("labels", format!("{} missing: {list}", missing.len()), "run `ward doctor --fix` to create them")
}

async fn charts_branch(forge: &GitHubForge, fix: bool) -> Check {
    let name = format!("charts branch `{}`", forge.charts_branch());
    match forge.has_charts_branch().await {
        Ok(true) => Check::ok("charts branch", format!("{name} exists")),
        Ok(false) if fix => match forge.set_up_charts_branch().await {
            Ok(()) => Check::fixed("charts branch", format!("created {name}")),
            Err(e) => Check::fail("charts branch", e.to_string(), "create it with a token that has `contents: write`"),
        },
        Ok(false) => Check::fail("charts branch", format!("{name} is missing"), "run `ward doctor --fix` to create it"),
        Err(e) => Check::fail("charts branch", e.to_string(), "give the token `contents: read`"),
    }
}

/// The workflow token may open the treatment's pull request only when the
/// repository allows it (off on a new repository).
async fn pull_requests(forge: &GitHubForge, config: &Config) -> Check {
    const NAME: &str = "Actions may create pull requests";
    if config.dispatch == DispatchMode::Label {
        return Check::ok(NAME, "not needed: `dispatch: label` means an app token (WARD_TOKEN) opens them");
    }
    match forge.workflow_settings().await {
        Ok(s) if s.can_approve_pull_request_reviews => Check::ok(NAME, "allowed"),
        Ok(_) => Check::fail(
            NAME,
            "not allowed: the treat stage cannot open its pull request with the workflow token",
            "Settings -> Actions -> General -> Workflow permissions: tick \"Allow GitHub Actions to create and \
             approve pull requests\" (or use an app token)",
        ),
        Err(e) => Check::fail(
            NAME,
            format!("could not tell: {e}"),
            "run `ward doctor --forge github` with an admin's token, or check the setting by hand \
             (Settings -> Actions -> General)",
        ),
    }
}

/// Whether the default branch (the base of ward's pull requests) has
/// GitHub's merge queue, and what discharge will do about it.
async fn merge_queue(forge: &GitHubForge, config: &Config, branch: &str) -> Check {
    const NAME: &str = "merge queue";
    let label = config.merge_queue_label();
    let turn_on = format!(
        "to have GitHub's merge queue check each patient against the others: Settings -> Rules -> Rulesets -> a \
         branch ruleset on `{branch}` with \"Require merge queue\" and the required status checks, and CI that \
         runs on `merge_group`"
    );
    match forge.merge_queue_rule(branch).await {
        Ok(Some(_)) if !config.labels.contains_key(label) => Check::fail(
            NAME,
            format!(
                "`{branch}` has GitHub's merge queue, but .github/ward.yml does not declare `{label}`, where a \
                 patient rests while GitHub holds it: discharge would refuse to enqueue"
            ),
            format!("declare `{label}` under `labels` in .github/ward.yml (`ward doctor --fix` then creates it)"),
        ),
        Ok(Some(rule)) => {
            let integration = if config.integration.is_some() {
                " ward.yml's `integration:` check does not run on GitHub: the merge group's required checks take \
                 its place."
            } else {
                ""
            };
            Check::ok(
                NAME,
                format!(
                    "`{branch}` has GitHub's merge queue ({}, merge method {}): discharge enqueues into GitHub's \
                     merge queue at the audited head, and the patient rests at `{label}` until GitHub merges it \
                     (discharged) or takes it out (back to treatment). The merge group's checks must come from \
                     CI that runs on `merge_group`; GitHub starts no workflow for a pull request a workflow's \
                     GITHUB_TOKEN enqueued, so with Actions CI ward's token must be an app's (WARD_TOKEN).{integration}",
                    rule.source, rule.merge_method
                ),
            )
        }
        Ok(None) if config.integration.is_some() => Check::ok(
            NAME,
            format!(
                "`{branch}` has no merge queue of GitHub's, and ward.yml sets `integration:`: ward's own merge \
                 queue runs in {QUEUE_WORKFLOW}. Discharge enqueues the audited patient at `{label}`; each turn \
                 merges the first one into `{branch}`'s tip and runs the integration check there with a \
                 read-only token, and merges it at the audited head only if the check passed and `{branch}` \
                 has not moved since"
            ),
        ),
        Ok(None) => Check::ok(
            NAME,
            format!("`{branch}` has no merge queue: discharge merges the audited pull request directly ({turn_on})"),
        ),
        Err(e) => {
            Check::fail(NAME, format!("could not tell: {e}"), "run doctor again; the token needs `metadata: read`")
        }
    }
}

/// Each CI workflow ward.yml lists must be startable by `workflow_dispatch`.
async fn ci(forge: &GitHubForge, config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    for name in &config.ci.workflows {
        let path = format!(".github/workflows/{name}");
        let check = format!("ci {name}");
        out.push(match forge.file_on_default_branch(&path).await {
            Ok(None) => Check::fail(check, format!("`{path}` is missing"), "fix `ci.workflows` in .github/ward.yml"),
            Ok(Some(text)) => match dispatchable(&text) {
                Ok(true) => Check::ok(check, "can be started by `workflow_dispatch`"),
                Ok(false) => Check::fail(
                    check,
                    "cannot be started by `workflow_dispatch`, so ward cannot run it on a treatment branch",
                    format!("add `workflow_dispatch:` to the `on:` of `{path}`"),
                ),
                Err(e) => Check::fail(check, format!("`{path}` {e}"), "fix the workflow file"),
            },
            Err(e) => Check::fail(check, e.to_string(), "give the token `contents: read`"),
        });
    }
    out
}
