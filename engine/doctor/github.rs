//! The checks of the repository on GitHub. Reads only, except what `--fix`
//! sets up: the labels and the charts branch. The workflows are checked
//! against what `ward init --forge github` writes for this repository
//! (`install::adapt`: the action pinned by a full sha, the stage woken by
//! the CI workflows ward.yml names), and the CI against what the discharge
//! audit needs: something that starts it on a treatment branch.

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
    report.0.push(graphql(forge).await);
    report.0.push(token(forge, &branch).await);
    let ci_names = ci_names(forge, config).await;
    report.0.extend(installed_workflows(forge, config, &ci_names).await);
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

/// GraphQL answers where ward sends it (`GITHUB_GRAPHQL_URL`, else derived
/// from the API's URL: `/api/graphql` on GitHub Enterprise Server).
async fn graphql(forge: &GitHubForge) -> Check {
    const NAME: &str = "graphql";
    let url = forge.graphql_url();
    if !forge.graphql_on() {
        return Check::ok(NAME, "off (WARD_GITHUB_GRAPHQL=false): every read goes over REST");
    }
    match forge.graphql_answers().await {
        Ok(repo) => Check::ok(NAME, format!("{url} answers for {repo}")),
        Err(e) => Check::fail(
            NAME,
            format!("{url}: {e}"),
            "set GITHUB_GRAPHQL_URL to the GraphQL endpoint (GitHub Enterprise Server: https://HOST/api/graphql), \
             or WARD_GITHUB_GRAPHQL=false to read over REST alone",
        ),
    }
}

/// The `name:` of each CI workflow ward.yml lists, as the default branch
/// has it (what ward-stage.yml's `workflow_run` wake-up must name).
async fn ci_names(forge: &GitHubForge, config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for file in &config.ci.workflows {
        if let Ok(Some(text)) = forge.file_on_default_branch(&format!(".github/workflows/{file}")).await {
            out.push(crate::install::ci::name_of(file, &text));
        }
    }
    out
}

/// Each workflow ward ships: present, not outdated, its jobs' permissions;
/// the pipeline's check started by changes to ward's files where they are;
/// the action pinned; the stage woken by the CI.
async fn installed_workflows(forge: &GitHubForge, config: &Config, ci_names: &[String]) -> Vec<Check> {
    let mut out = Vec::new();
    // Which commit of the action a file pins is its own business (checked
    // below); the rest is what `ward init` writes.
    let any = crate::install::ActionRef { repository: "ward/ward".into(), sha: "0".repeat(40) };
    for (name, shipped_text) in shipped() {
        let adapted = crate::install::adapt(shipped_text, &any, ci_names);
        let text = adapted.as_str();
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
        if let Some(check) = pinned(name, &installed) {
            out.push(check);
        }
        if name == STAGE_WORKFLOW {
            out.push(wake_ups(&path, &installed, ci_names));
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

/// The workflow of the stages, woken by CI.
const STAGE_WORKFLOW: &str = "ward-stage.yml";

/// Each use of the ward action in a workflow is pinned by a full commit sha
/// (a tag or a branch can be moved under the workflow). `None` when the
/// workflow builds ward instead (ward's own repository).
fn pinned(name: &str, installed: &str) -> Option<Check> {
    let check = format!("action in {name}");
    let uses: Vec<String> = installed
        .lines()
        .filter_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix("uses: "))
        .map(|u| u.split('#').next().unwrap_or(u).trim().to_string())
        .filter(|u| u.split('@').next().is_some_and(|repo| repo.ends_with("/ward")))
        .collect();
    if uses.is_empty() {
        return None;
    }
    let loose: Vec<String> =
        uses.iter().filter(|u| crate::install::ActionRef::parse(u).is_err()).map(|u| format!("`{u}`")).collect();
    Some(if loose.is_empty() {
        Check::ok(check, format!("pinned by a full commit sha ({})", uses[0]))
    } else {
        Check::fail(
            check,
            format!("{} is not pinned by a full commit sha", loose.join(", ")),
            "pin the action by the 40-hex commit of its release tag, as `ward init --forge github` writes it",
        )
    })
}

/// ward-stage.yml's `workflow_run` wakes a waiting patient when a CI
/// workflow of `ci.workflows` completes: it must name each of them.
fn wake_ups(path: &str, installed: &str, ci_names: &[String]) -> Check {
    const NAME: &str = "wake-ups";
    let workflow: serde_yaml::Value = serde_yaml::from_str(installed).unwrap_or_default();
    let on = workflow.get("on").or_else(|| workflow.get(serde_yaml::Value::Bool(true)));
    let listed: Vec<String> = on
        .and_then(|o| o.get("workflow_run"))
        .and_then(|w| w.get("workflows"))
        .and_then(serde_yaml::Value::as_sequence)
        .map(|l| l.iter().filter_map(|n| n.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let missing: Vec<String> = ci_names.iter().filter(|n| !listed.contains(n)).map(|n| format!("`{n}`")).collect();
    if missing.is_empty() {
        let woken = if listed.is_empty() { "no workflow run".to_string() } else { listed.join(", ") };
        return Check::ok(NAME, format!("`{path}` wakes a patient waiting for CI when {woken} completes"));
    }
    Check::fail(
        NAME,
        format!(
            "`{path}` wakes no waiting patient when {} completes (a CI workflow of `ci.workflows`)",
            missing.join(", ")
        ),
        format!("list them under `on.workflow_run.workflows` in `{path}` (each by its `name:`)"),
    )
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

/// Each CI workflow ward.yml lists must be startable by `workflow_dispatch`,
/// and something must start CI on a treatment branch: the discharge audit
/// waits for it, and the workflow token's pushes start no workflow.
async fn ci(forge: &GitHubForge, config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    if config.dispatch == DispatchMode::Label {
        out.push(Check::ok("ci", "`dispatch: label`: the app token's pushes start the repository's CI by themselves"));
    } else if config.ci.workflows.is_empty() {
        out.push(Check::fail(
            "ci",
            "nothing starts CI on a treatment branch: ward.yml's `ci.workflows` names no workflow, and the workflow \
             token's pushes start none, so every patient would wait at the discharge audit for CI that never runs",
            "name the repository's CI workflows under `ci.workflows` in .github/ward.yml (`ward init --forge github` \
             finds them), each with `workflow_dispatch` in its `on:`; or use an app token (`dispatch: label`)",
        ));
    }
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
