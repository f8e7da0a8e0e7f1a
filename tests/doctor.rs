//! `ward doctor`, run as a person runs it: the binary, against a folder
//! made by `ward init` and (with `--forge github`) the fake GitHub. A sound
//! installation passes; each misconfiguration fails its own check, with
//! what to do; doctor changes nothing unless `--fix`, which sets up the
//! labels and the charts branch and then passes.

mod support;

use std::process::Output;

use support::fake_github::{FakeGitHub, OWNER, REPO, TOKEN};
use support::openapi::OpenApi;
use support::{Sandbox, stdout};
use ward::config::Config;

/// A repository installed as docs/github.md says, on the fake GitHub.
async fn sound() -> (Sandbox, FakeGitHub) {
    let s = Sandbox::new();
    s.write(".gitignore", "/target\n/.ward/\n");
    s.edit_config("agent:\n", "ci:\n  workflows: [ci.yml]\n\nagent:\n");
    let fake = FakeGitHub::start().await;
    let config = Config::load(s.root()).unwrap();
    {
        let mut st = fake.state();
        for (name, text) in ward::doctor::workflows::shipped() {
            st.put_file("main", &format!(".github/workflows/{name}"), text);
        }
        // Named as ward-stage.yml's `workflow_run` wake-up names it.
        st.put_file(
            "main",
            ".github/workflows/ci.yml",
            "name: ci\non:\n  push: {}\n  workflow_dispatch: {}\njobs: {}\n",
        );
        for spec in config.label_specs() {
            st.label_named(&spec.name);
        }
        st.create_branch("ward-charts");
        st.actions_can_create_pull_requests = true;
    }
    (s, fake)
}

fn doctor(s: &Sandbox, fake: &FakeGitHub, extra: &[&str]) -> Output {
    let mut args = vec!["--forge", "github", "doctor"];
    args.extend_from_slice(extra);
    let repo = format!("{OWNER}/{REPO}");
    s.ward_env(&args, &[("GITHUB_API_URL", &fake.url), ("GITHUB_TOKEN", TOKEN), ("GITHUB_REPOSITORY", &repo)])
}

/// The one failing line of `check`, after asserting it is the only failure.
fn only_failure(out: &Output, check: &str) -> String {
    let text = stdout(out);
    assert_eq!(out.status.code(), Some(1), "doctor fails:\n{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 1, "one check fails, `{check}`:\n{text}");
    assert!(failed[0].starts_with(&format!("FAIL  {check}: ")), "the failing check is `{check}`:\n{text}");
    assert!(failed[0].contains(" -> "), "it says what to do: {}", failed[0]);
    failed[0].to_string()
}

fn answers_conform(fake: &FakeGitHub) {
    let (main, doctor) = (OpenApi::load("rest-api.subset.openapi.json"), OpenApi::load("doctor.subset.openapi.json"));
    for e in fake.state().log.iter().filter(|e| e.status == 200) {
        let spec = if doctor.has(&e.method, &e.route) { &doctor } else { &main };
        if spec.has(&e.method, &e.route) {
            spec.check_answer(e).unwrap_or_else(|err| panic!("{} {}: {err}", e.method, e.route));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sound_installation_passes_and_doctor_changes_nothing() {
    let (s, fake) = sound().await;
    let before = fake.state().fingerprint();
    let out = doctor(&s, &fake, &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    for check in [
        "ward.yml",
        "agent",
        "token",
        "workflow ward-stage.yml",
        "permissions ward-stage.yml/record",
        "read-only ward-stage.yml/visit",
        "labels",
    ] {
        assert!(text.lines().any(|l| l.starts_with(&format!("ok    {check}: "))), "`{check}` passes:\n{text}");
    }
    assert!(text.contains("ok    ci ci.yml: can be started by `workflow_dispatch`"), "{text}");
    assert!(text.contains("ok    Actions may create pull requests: allowed"), "{text}");
    assert!(text.ends_with("checks passed\n"), "{text}");
    assert_eq!(fake.state().fingerprint(), before, "doctor wrote something");
    answers_conform(&fake);
}

/// ward's files in a place of their own (`paths:`), which the shipped
/// pipeline workflow's `paths:` filter does not cover: its pull requests
/// would merge unchecked, and doctor says which files and what to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_workflow_that_misses_where_wards_files_live_is_named() {
    let (s, fake) = sound().await;
    std::fs::create_dir_all(s.root().join("ops/ward")).unwrap();
    for dir in ["roles", "skills", "precedents"] {
        std::fs::rename(s.root().join(dir), s.root().join("ops/ward").join(dir)).unwrap();
    }
    let text = s
        .read(".github/ward.yml")
        .replace("prompt: roles/", "prompt: ops/ward/roles/")
        .replace("log: precedents/log.yaml", "log: ops/ward/precedents/log.yaml");
    let paths = "paths:\n  roles: ops/ward/roles/\n  skills: ops/ward/skills/\n  precedents: ops/ward/precedents/\n";
    s.write(".github/ward.yml", &format!("{text}\n{paths}"));
    let line = only_failure(&doctor(&s, &fake, &[]), "workflow paths");
    assert!(
        line.contains(
            "a pull request that changes `ops/ward/roles/x.md`, `ops/ward/skills/x.md`, `ops/ward/precedents/log.yaml` \
             does not start `.github/workflows/ward-pipeline.yml`"
        ),
        "{line}"
    );
    assert!(line.contains("add \"ops/ward/roles/**\", \"ops/ward/skills/**\", \"ops/ward/precedents/**\""), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_workflow_is_named() {
    let (s, fake) = sound().await;
    fake.state().remove_file("main", ".github/workflows/ward-sweep.yml");
    let line = only_failure(&doctor(&s, &fake, &[]), "workflow ward-sweep.yml");
    assert!(line.contains("missing -> copy `.github/workflows/ward-sweep.yml` of ward"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outdated_workflow_says_what_differs() {
    let (s, fake) = sound().await;
    let stage = fake.state().file("main", ".github/workflows/ward-stage.yml").unwrap();
    let old = stage.replace("    types: [labeled]\n", "    types: [opened]\n");
    assert_ne!(old, stage);
    fake.state().put_file("main", ".github/workflows/ward-stage.yml", &old);
    let line = only_failure(&doctor(&s, &fake, &[]), "workflow ward-stage.yml");
    assert!(line.contains("differs from ward"), "{line}");
    assert!(line.contains("`issues` lacks the type `labeled`"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_permission_is_named() {
    let (s, fake) = sound().await;
    let sweep = fake.state().file("main", ".github/workflows/ward-sweep.yml").unwrap();
    let weak: String =
        sweep.lines().filter(|l| !l.trim_start().starts_with("issues: write")).map(|l| format!("{l}\n")).collect();
    assert_ne!(weak, sweep);
    fake.state().put_file("main", ".github/workflows/ward-sweep.yml", &weak);
    let line = only_failure(&doctor(&s, &fake, &[]), "permissions ward-sweep.yml/sweep");
    assert!(line.contains("lacks `issues: write` -> add `issues: write` to the job's `permissions:`"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_issues_write_is_found_without_writing() {
    let (s, fake) = sound().await;
    fake.state().settings.denied.insert("issues: write".into());
    let before = fake.state().fingerprint();
    let out = doctor(&s, &fake, &[]);
    // The labels are read with issues: read, which the token has.
    let line = only_failure(&out, "token");
    assert!(line.contains("lacks `issues: write` (nothing was changed to find out)"), "{line}");
    assert_eq!(fake.state().fingerprint(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_requests_by_actions_not_allowed_is_named() {
    let (s, fake) = sound().await;
    fake.state().actions_can_create_pull_requests = false;
    let line = only_failure(&doctor(&s, &fake, &[]), "Actions may create pull requests");
    assert!(line.contains("Allow GitHub Actions to create and approve pull requests"), "{line}");
    // A token that may not read the setting cannot tell, and says so.
    fake.state().actions_can_create_pull_requests = true;
    fake.state().settings.admin_token = false;
    let line = only_failure(&doctor(&s, &fake, &[]), "Actions may create pull requests");
    assert!(line.contains("could not tell") && line.contains("admin's token"), "{line}");
}

/// Doctor says whether the default branch has GitHub's merge queue and
/// what discharge does: merges directly, or enqueues; with `integration:`
/// in ward.yml and no queue on GitHub, ward's own queue runs in
/// ward-queue.yml, which must then be installed (and only then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn githubs_merge_queue_is_reported_and_an_integration_without_it_is_named() {
    let (s, fake) = sound().await;
    let text = stdout(&doctor(&s, &fake, &[]));
    let line = text.lines().find(|l| l.starts_with("ok    merge queue: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("`main` has no merge queue: discharge merges the audited pull request directly"), "{line}");
    fake.state().require_merge_queue("main", &["test"]);
    let out = doctor(&s, &fake, &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    let line = text.lines().find(|l| l.starts_with("ok    merge queue: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("discharge enqueues into GitHub's merge queue"), "{line}");
    assert!(line.contains("Repository octo/hospital, merge method SQUASH") && line.contains("WARD_TOKEN"), "{line}");
    answers_conform(&fake);
    // ward's integration check is configured, GitHub has no queue: ward's own queue runs.
    fake.state().merge_queues.clear();
    s.edit_config("agent:\n", "integration:\n  command: [\"make\", \"check\"]\n\nagent:\n");
    let out = doctor(&s, &fake, &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    let line = text.lines().find(|l| l.starts_with("ok    merge queue: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("ward's own merge queue runs in ward-queue.yml"), "{line}");
    assert!(line.contains("read-only token") && line.contains("has not moved since"), "{line}");
    assert!(text.contains("ok    workflow ward-queue.yml: matches"), "{text}");
    // ... and then its workflow must be there.
    fake.state().remove_file("main", ".github/workflows/ward-queue.yml");
    let line = only_failure(&doctor(&s, &fake, &[]), "workflow ward-queue.yml");
    assert!(line.contains("missing -> copy `.github/workflows/ward-queue.yml`"), "{line}");
    // Without `integration:` nobody needs it.
    s.edit_config("integration:\n  command: [\"make\", \"check\"]\n\n", "");
    let out = doctor(&s, &fake, &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ok    workflow ward-queue.yml: not needed"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_label_is_named() {
    let (s, fake) = sound().await;
    fake.state().labels.remove("ward:consult");
    let line = only_failure(&doctor(&s, &fake, &[]), "labels");
    assert!(line.contains("1 missing: `ward:consult` -> run `ward doctor --fix`"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_charts_branch_is_named() {
    let (s, fake) = sound().await;
    fake.state().delete_branch("ward-charts");
    let line = only_failure(&doctor(&s, &fake, &[]), "charts branch");
    assert!(line.contains("`ward-charts` is missing"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_workflow_without_workflow_dispatch_is_named() {
    let (s, fake) = sound().await;
    fake.state().put_file("main", ".github/workflows/ci.yml", "name: ci\non: [push, pull_request]\njobs: {}\n");
    let line = only_failure(&doctor(&s, &fake, &[]), "ci ci.yml");
    assert!(line.contains("add `workflow_dispatch:` to the `on:` of `.github/workflows/ci.yml`"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fix_creates_the_labels_and_the_charts_branch_then_doctor_passes() {
    let (s, fake) = sound().await;
    {
        let mut st = fake.state();
        st.labels.clear();
        st.delete_branch("ward-charts");
    }
    let out = doctor(&s, &fake, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out).lines().filter(|l| l.starts_with("FAIL")).count(), 2, "{}", stdout(&out));
    let out = doctor(&s, &fake, &["--fix"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("fixed labels: created `"), "{text}");
    assert!(text.contains("fixed charts branch: created charts branch `ward-charts`"), "{text}");
    let config = Config::load(s.root()).unwrap();
    for spec in config.label_specs() {
        let label = fake.state().labels.get(&spec.name.to_lowercase()).cloned().expect("created");
        assert_eq!(label.color, spec.color, "with ward.yml's colour");
    }
    let again = doctor(&s, &fake, &[]);
    assert!(again.status.success(), "{}", stdout(&again));
    assert!(!stdout(&again).contains("fixed"), "nothing left to fix");
}

// ---------------------------------------------------------------------------
// Local checks.

fn local(s: &Sandbox, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["--forge", "local", "doctor"];
    args.extend_from_slice(extra);
    s.ward_env(&args, env)
}

#[test]
fn a_fresh_init_passes_a_lost_ignore_is_fixed_and_no_github_is_checked() {
    let s = Sandbox::new();
    let out = local(&s, &[], &[]);
    assert!(out.status.success(), "`ward init` ignores .ward/: {}", stdout(&out));
    s.write(".gitignore", "/target\n");
    let line = only_failure(&local(&s, &[], &[]), ".gitignore");
    assert!(line.contains("add `/.ward/` to .gitignore"), "{line}");
    let out = local(&s, &["--fix"], &[]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(s.read(".gitignore").lines().any(|l| l == "/.ward/"));
    let out = local(&s, &[], &[]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(!stdout(&out).contains("token"), "the local forge has no GitHub checks");
}

#[test]
fn an_agent_whose_program_is_not_on_path_is_named_with_its_install() {
    let s = Sandbox::new();
    s.write(".gitignore", "/.ward/\n");
    s.edit_config("  command: [\"{ward}\", \"stand-in\"]\n", "  preset: claude-code\n");
    let bin = s.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let line = only_failure(&local(&s, &[], &[("PATH", &path)]), "agent");
    assert!(
        line.contains("`claude` is not on PATH -> install it: `npm install -g @anthropic-ai/claude-code@"),
        "{line}"
    );
    let claude = bin.join("claude");
    let cli = |script: &str| {
        std::fs::write(&claude, script).unwrap();
        std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    // The agent's own version check, against what ward's tests prove.
    cli("#!/bin/sh\necho '2.1.328 (Claude Code)'\n");
    let out = local(&s, &[], &[("PATH", &path)]);
    assert!(out.status.success(), "{}", stdout(&out));
    let said = stdout(&out);
    assert!(
        said.contains("ok    agent: preset `claude-code`: `claude` prints `2.1.328 (Claude Code)`, the version ward's end-to-end tests prove"),
        "{said}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(said.contains("as root ward sets IS_SANDBOX=1 for it"), "{said}");
    }
    cli("#!/bin/sh\necho '2.2.0 (Claude Code)'\n");
    let said = stdout(&local(&s, &[], &[("PATH", &path)]));
    assert!(said.contains("prints `2.2.0 (Claude Code)`; ward's end-to-end tests prove 2.1.328"), "{said}");
    cli("#!/bin/sh\necho 'broken install' >&2; exit 3\n");
    let line = only_failure(&local(&s, &[], &[("PATH", &path)]), "agent");
    assert!(line.contains("`claude --version` failed (exit status: 3): broken install -> reinstall it"), "{line}");
    // A preset nothing here proves says so.
    s.edit_config("  preset: claude-code\n", "  preset: gemini\n");
    let gemini = bin.join("gemini");
    std::fs::write(&gemini, "#!/bin/sh\necho 0.61.0\n").unwrap();
    std::fs::set_permissions(&gemini, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let said = stdout(&local(&s, &[], &[("PATH", &path)]));
    assert!(said.contains("this preset is unproven"), "{said}");
}

#[test]
fn an_emulator_without_docker_and_a_broken_pipeline_are_named() {
    let s = Sandbox::new();
    s.write(".gitignore", "/.ward/\n");
    s.edit_config(
        "agent:\n",
        "emulator:\n  image: ward-docstore:test\n  ports: [8081]\n  ready: { tcp: 8081 }\n\nagent:\n",
    );
    let nowhere = format!("unix://{}/no-docker.sock", s.root().display());
    let line = only_failure(&local(&s, &[], &[("DOCKER_HOST", &nowhere)]), "docker");
    assert!(line.contains("an emulator is configured -> start Docker"), "{line}");

    s.edit_config("version: 1\n", "version: 1\nverison: 2\n");
    let out = local(&s, &[], &[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(text.contains("FAIL  ward.yml: ") && text.contains("unknown field `verison`"), "{text}");
}

#[test]
fn an_outdated_schema_is_named_and_fixed() {
    let s = Sandbox::new();
    s.write(".gitignore", "/.ward/\n");
    s.write(ward::config::schema::SCHEMA_PATH, "{}\n");
    let line = only_failure(&local(&s, &[], &[]), "schema");
    assert!(line.contains("is an older ward's"), "{line}");
    assert!(local(&s, &["--fix"], &[]).status.success());
    assert_eq!(s.read(ward::config::schema::SCHEMA_PATH), ward::config::schema::schema_text());
}

/// GraphQL goes where `GITHUB_GRAPHQL_URL` says, else where the API's URL
/// puts it: on GitHub Enterprise Server `https://HOST/api/graphql`, not
/// below REST's `/api/v3`. Doctor asks it and names the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_the_graphql_endpoint_and_fails_on_one_that_does_not_answer() {
    let (s, fake) = sound().await;
    fake.state().enterprise = true;
    let repo = format!("{OWNER}/{REPO}");
    let api = format!("{}/api/v3", fake.url);
    let env = [("GITHUB_API_URL", api.as_str()), ("GITHUB_TOKEN", TOKEN), ("GITHUB_REPOSITORY", repo.as_str())];
    let out = s.ward_env(&["--forge", "github", "doctor"], &env);
    let text = stdout(&out);
    assert!(text.contains(&format!("ok    graphql: {}/api/graphql answers for {repo}", fake.url)), "{text}");
    assert!(out.status.success(), "{text}");
    // GITHUB_GRAPHQL_URL decides when set: here one GHES does not serve.
    let wrong = format!("{api}/graphql");
    let mut env = env.to_vec();
    env.push(("GITHUB_GRAPHQL_URL", wrong.as_str()));
    let line = only_failure(&s.ward_env(&["--forge", "github", "doctor"], &env), "graphql");
    assert!(line.contains(&wrong) && line.contains("GITHUB_GRAPHQL_URL"), "{line}");
    fake.state().unknown.clear(); // the 404 this test asked for
}

/// The discharge audit waits for CI, and the workflow token's pushes start
/// none: with nothing in `ci.workflows`, doctor fails and says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_fails_when_nothing_would_start_ci_on_a_treatment_branch() {
    let (s, fake) = sound().await;
    s.edit_config("ci:\n  workflows: [ci.yml]\n\n", "");
    let line = only_failure(&doctor(&s, &fake, &[]), "ci");
    assert!(line.contains("nothing starts CI on a treatment branch"), "{line}");
    assert!(line.contains("`ci.workflows`") && line.contains("workflow_dispatch"), "{line}");
    // With an app token the push starts CI by itself.
    s.edit_config("dispatch: repository_dispatch", "dispatch: label");
    let text = stdout(&doctor(&s, &fake, &[]));
    assert!(text.contains("ok    ci: `dispatch: label`"), "{text}");
}

/// A CI workflow of `ci.workflows` whose completion wakes no waiting
/// patient (ward-stage.yml's `workflow_run` names another) is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_workflow_the_stage_does_not_wake_after_is_named() {
    let (s, fake) = sound().await;
    fake.state().put_file("main", ".github/workflows/ci.yml", "name: Tests\non: [push, workflow_dispatch]\njobs: {}\n");
    let line = only_failure(&doctor(&s, &fake, &[]), "wake-ups");
    assert!(line.contains("`Tests`") && line.contains("on.workflow_run.workflows"), "{line}");
}

/// What `ward init --forge github` writes passes doctor as it is, the
/// action pinned by its full sha; an action pinned by a tag is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_init_writes_for_github_passes_doctor_and_a_loose_pin_is_named() {
    let (s, fake) = sound().await;
    let action = "wardhq/ward@0123456789abcdef0123456789abcdef01234567";
    let files = ward::install::workflows(&ward::install::ActionRef::parse(action).unwrap(), &["ci".into()], false);
    {
        let mut st = fake.state();
        for (name, text) in &files {
            st.put_file("main", &format!(".github/workflows/{name}"), text);
        }
    }
    let out = doctor(&s, &fake, &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("ok    action in ward-stage.yml: pinned by a full commit sha ({action})")),
        "{text}"
    );
    let stage = &files.iter().find(|(n, _)| n == "ward-stage.yml").unwrap().1;
    fake.state().put_file("main", ".github/workflows/ward-stage.yml", &stage.replace(action, "wardhq/ward@v0.1.0"));
    let line = only_failure(&doctor(&s, &fake, &[]), "action in ward-stage.yml");
    assert!(line.contains("`wardhq/ward@v0.1.0` is not pinned by a full commit sha"), "{line}");
}
