//! The shipped workflows, run by the test runner (`tests/support/actions/`)
//! on the fake GitHub (`tests/support/fake_github/`), which behaves like
//! GitHub where it hurts: what a workflow token causes starts nothing,
//! tokens carry their job's permissions, a pull request's head is the
//! commit pushed over git's smart HTTP protocol, concurrency keeps one
//! pending run, CI and reviews arrive later on a simulated clock.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::actions::{ACTIONS_BOT, Runner};
use support::fake_github::*;
use ward::forge::Forge as _;

const MINUTE: Duration = Duration::from_secs(60);

/// git with fixed dates (the commits' ids do not change between runs).
fn git(dir: &Path, args: &[&str]) -> String {
    support::git_at(dir, "2026-11-01T00:00:00Z", args)
}

/// A repository holding `files` on `main`, as the fake's repository before
/// the test (nothing delivered).
fn repository(gh: &FakeGitHub, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "the repository before the test"]);
    gh.seed(dir.path());
    dir
}

/// The text of a file of this repository (ward's own).
fn ours(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// A repository with ward installed the way docs/github.md says: ward's
/// own `.github/ward.yml`, roles, skills and precedent log (the stand-in
/// agent), the shipped workflows, plus `extra` files; `config` edits
/// ward.yml.
fn hospital(gh: &FakeGitHub, extra: &[(&str, &str)], config: impl Fn(String) -> String) -> tempfile::TempDir {
    let mut files: Vec<(String, String)> = vec![
        (".github/ward.yml".into(), config(ours(".github/ward.yml"))),
        ("precedents/log.yaml".into(), ours("precedents/log.yaml")),
        // As in ward's own repository: the workflow builds ward into `target/`.
        (".gitignore".into(), ".ward/\n/target\n".into()),
        ("CHANGELOG.md".into(), "# Changelog\n".into()),
    ];
    for dir in ["roles", "skills"] {
        for e in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            files.push((format!("{dir}/{name}"), ours(&format!("{dir}/{name}"))));
        }
    }
    for w in [
        "ward-stage.yml",
        "ward-sweep.yml",
        "ward-pipeline.yml",
        "ward-report.yml",
        "ward-commands.yml",
        "ward-queue.yml",
    ] {
        files.push((format!(".github/workflows/{w}"), ours(&format!(".github/workflows/{w}"))));
    }
    for (p, t) in extra {
        files.push((p.to_string(), t.to_string()));
    }
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let repo = repository(gh, &refs);
    // Step 3 of docs/github.md: "Allow GitHub Actions to create and approve pull requests".
    gh.state().actions_can_create_pull_requests = true;
    repo
}

/// One REST call with `token`, the way any client makes it: (status, body).
async fn call(gh: &FakeGitHub, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = octocrab::Octocrab::builder()
        .base_uri(gh.url.as_str())
        .unwrap()
        .personal_token(token.to_string())
        .build()
        .unwrap();
    let url = format!("{}{path}", gh.url);
    let resp = match method {
        "GET" => client._get(url).await,
        "POST" => client._post(url, body.as_ref()).await,
        "PUT" => client._put(url, body.as_ref()).await,
        other => panic!("no {other} here"),
    }
    .unwrap();
    let status = resp.status().as_u16();
    let text = client.body_to_string(resp).await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A clone of the fake's repository over smart HTTP, authenticated with
/// `token` the way actions/checkout does (an `http.extraheader`).
fn clone_with(gh: &FakeGitHub, token: &str) -> tempfile::TempDir {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
    let header = format!("AUTHORIZATION: basic {basic}");
    let key = format!("http.{}/.extraheader", gh.url);
    git(dir.path(), &["-c", &format!("{key}={header}"), "clone", "-q", &gh.git_url(), "."]);
    git(dir.path(), &["config", "--local", &key, &header]);
    dir
}

/// `git push` from `dir`; Ok(stderr) or Err(stderr).
fn push(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("git")
        .arg("push")
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() { Ok(stderr) } else { Err(stderr) }
}

fn write(dir: &Path, path: &str, text: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

// ---------------------------------------------------------------------------
// Which deliveries start workflows

const ON_LABEL: &str = r#"
name: on label
on:
  issues:
    types: [labeled]
permissions: {}
jobs:
  echo:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "label $LABEL by $ACTOR"
        env:
          LABEL: ${{ github.event.label.name }}
          ACTOR: ${{ github.actor }}
"#;

const ON_DISPATCH: &str = r#"
name: on dispatch
on:
  repository_dispatch:
    types: [poke]
  workflow_dispatch:
    inputs:
      why:
        required: true
        type: string
permissions: {}
jobs:
  echo:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "$EVENT by $ACTOR because '$WHY'"
        env:
          EVENT: ${{ github.event_name }}
          ACTOR: ${{ github.actor }}
          WHY: ${{ inputs.why }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_workflow_token_causes_starts_nothing_except_dispatches_and_an_app_token_starts_workflows() {
    let gh = FakeGitHub::start().await;
    repository(
        &gh,
        &[(".github/workflows/on-label.yml", ON_LABEL), (".github/workflows/on-dispatch.yml", ON_DISPATCH)],
    );
    let (n, workflow_token, app) = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        let n = s.add_issue("x", "", "maya", &[]);
        let workflow_token = s.mint_token(ACTIONS_BOT, Permissions::write_all(), true);
        let app = s.app_token("ward-app[bot]", Permissions::of(&[("issues", "write")]));
        (n, workflow_token, app)
    };
    let mut runner = Runner::new(&gh);
    let labels = format!("/repos/{OWNER}/{REPO}/issues/{n}/labels");

    // A label set with a workflow's GITHUB_TOKEN starts nothing.
    let (status, _) = call(&gh, &workflow_token, "PUT", &labels, Some(json!({ "labels": ["by-workflow"] }))).await;
    assert_eq!(status, 200);
    runner.run_until_idle(5).await;
    assert!(runner.runs.is_empty(), "{}", runner.summary());
    assert!(
        runner.ignored.iter().any(|(_, why)| why == "issues by github-actions[bot]: caused by a workflow token"),
        "{:?}",
        runner.ignored
    );

    // Its repository_dispatch and workflow_dispatch do start workflows.
    let dispatches = format!("/repos/{OWNER}/{REPO}/dispatches");
    let (status, _) = call(&gh, &workflow_token, "POST", &dispatches, Some(json!({ "event_type": "poke" }))).await;
    assert_eq!(status, 204);
    let by_hand = format!("/repos/{OWNER}/{REPO}/actions/workflows/on-dispatch.yml/dispatches");
    let body = json!({ "ref": "main", "inputs": { "why": "a test" } });
    assert_eq!(call(&gh, &workflow_token, "POST", &by_hand, Some(body)).await.0, 204);
    // GitHub's refusals: no such trigger, a required input missing, an unknown input.
    let not_dispatchable = format!("/repos/{OWNER}/{REPO}/actions/workflows/on-label.yml/dispatches");
    let (status, answer) = call(&gh, &workflow_token, "POST", &not_dispatchable, Some(json!({ "ref": "main" }))).await;
    assert_eq!((status, answer["message"].as_str()), (422, Some("Workflow does not have 'workflow_dispatch' trigger")));
    let (status, answer) = call(&gh, &workflow_token, "POST", &by_hand, Some(json!({ "ref": "main" }))).await;
    assert_eq!((status, answer["message"].as_str()), (422, Some("Required input 'why' not provided")));
    let (status, _) = call(
        &gh,
        &workflow_token,
        "POST",
        &by_hand,
        Some(json!({ "ref": "main", "inputs": { "why": "x", "who": "y" } })),
    )
    .await;
    assert_eq!(status, 422);
    runner.run_until_idle(5).await;
    let dispatched: Vec<(&str, &str)> =
        runner.runs_of("on-dispatch.yml").iter().map(|r| (r.event.as_str(), r.actor.as_str())).collect();
    assert_eq!(dispatched, [("repository_dispatch", ACTIONS_BOT), ("workflow_dispatch", ACTIONS_BOT)]);
    let manual = runner.runs_of("on-dispatch.yml")[1];
    assert!(manual.job("echo").log().contains("workflow_dispatch by github-actions[bot] because 'a test'"));

    // An app token's label starts workflows, as a person's does.
    let (status, _) = call(&gh, &app, "PUT", &labels, Some(json!({ "labels": ["by-workflow", "by-app"] }))).await;
    assert_eq!(status, 200);
    gh.state().label(n, "by-maya", "maya");
    runner.run_until_idle(5).await;
    let logs: Vec<String> = runner.runs_of("on-label.yml").iter().map(|r| r.job("echo").log()).collect();
    assert_eq!(logs.len(), 2, "{}", runner.summary());
    assert!(logs[0].contains("label by-app by ward-app[bot]"), "{}", logs[0]);
    assert!(logs[1].contains("label by-maya by maya"), "{}", logs[1]);
    assert!(runner.runs.iter().all(|r| r.conclusion.as_deref() == Some("success")), "{}", runner.summary());
}

// ---------------------------------------------------------------------------
// Tokens with the job's permissions

const LABELER: &str = r#"
name: labeler
on:
  issues:
    types: [opened]
permissions: {}
jobs:
  read-only:
    runs-on: ubuntu-24.04
    permissions:
      issues: read
    steps:
      - name: Label
        env:
          GH_TOKEN: ${{ github.token }}
          NUMBER: ${{ github.event.issue.number }}
        run: |
          status=$(curl -s -o answer.json -w '%{http_code}' -X PUT -H "Authorization: Bearer $GH_TOKEN" \
            "$GITHUB_API_URL/repos/$GITHUB_REPOSITORY/issues/$NUMBER/labels" -d '{"labels":["triaged"]}')
          cat answer.json
          test "$status" = 200
  writer:
    needs: read-only
    if: always()
    runs-on: ubuntu-24.04
    permissions:
      issues: write
    steps:
      - name: Label
        env:
          GH_TOKEN: ${{ github.token }}
          NUMBER: ${{ github.event.issue.number }}
        run: |
          status=$(curl -s -o answer.json -w '%{http_code}' -X PUT -H "Authorization: Bearer $GH_TOKEN" \
            "$GITHUB_API_URL/repos/$GITHUB_REPOSITORY/issues/$NUMBER/labels" -d '{"labels":["triaged"]}')
          test "$status" = 200
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_job_token_gets_403_on_a_label_write_and_the_token_dies_with_its_job() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[(".github/workflows/labeler.yml", LABELER)]);
    let mut runner = Runner::new(&gh);
    let n = gh.state().add_issue("Please label me", "", "someone", &[]);
    runner.run_until_idle(5).await;
    let run = runner.runs_of("labeler.yml")[0];
    let read_only = run.job("read-only");
    assert_eq!(read_only.conclusion.as_deref(), Some("failure"), "{}", read_only.log());
    assert!(read_only.log().contains("Resource not accessible by integration"), "{}", read_only.log());
    assert_eq!(read_only.annotations.last().unwrap().message, "Process completed with exit code 1.");
    assert_eq!(run.job("writer").conclusion.as_deref(), Some("success"), "{}", run.job("writer").log());
    assert_eq!(gh.state().labels_of(n), ["triaged"]);
    // The label was set by the workflow token: it started nothing.
    assert_eq!(runner.runs.len(), 1, "{}", runner.summary());
    // Every job token was revoked at the end of its job.
    let s = gh.state();
    let job_tokens: Vec<&Grant> =
        s.tokens.iter().filter(|(t, g)| **t != s.token && g.workflow_token).map(|(_, g)| g).collect();
    assert!(job_tokens.iter().all(|g| g.revoked && g.login == ACTIONS_BOT));
    assert_eq!(
        job_tokens.iter().map(|g| (g.permissions.level("issues"), g.permissions.level("contents"))).collect::<Vec<_>>(),
        [(Level::Read, Level::None), (Level::Write, Level::None)]
    );
}

// ---------------------------------------------------------------------------
// Concurrency

const QUEUE: &str = r#"
name: queue
on:
  repository_dispatch:
    types: [work]
permissions: {}
concurrency:
  group: queue-${{ github.event.client_payload.group }}
  cancel-in-progress: ${{ github.event.client_payload.cancel }}
jobs:
  work:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "work $N"
        env:
          N: ${{ github.event.client_payload.n }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_pending_run_cancels_the_older_one_and_cancel_in_progress_cancels_the_running_one() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[(".github/workflows/queue.yml", QUEUE)]);
    gh.state().add_collaborator("maya", "write");
    let mut runner = Runner::new(&gh);
    runner.job_takes("queue.yml", "work", 10 * MINUTE);
    let work = |n: u64, group: &str, cancel: bool| {
        let group = group.to_string();
        move |s: &mut State| s.repository_dispatch("work", json!({ "n": n, "group": group, "cancel": cancel }), "maya")
    };
    // Group a: one runs, the second waits, the third replaces the second.
    work(1, "a", false)(&mut gh.state());
    runner.at(MINUTE, "second dispatch", work(2, "a", false));
    runner.at(2 * MINUTE, "third dispatch", work(3, "a", false));
    runner.run_until_idle(5).await;
    let a = runner.runs_of("queue.yml");
    let conclusions: Vec<&str> = a.iter().map(|r| r.conclusion.as_deref().unwrap()).collect();
    assert_eq!(conclusions, ["success", "cancelled", "success"], "{}", runner.summary());
    assert!(a[1].job("work").steps.is_empty(), "the cancelled pending run never started");
    assert_eq!(a[2].job("work").started_at, a[0].job("work").completed_at, "the third waited for the first");
    assert_eq!(
        a[2].job("work").started_at.unwrap() - a[0].job("work").started_at.unwrap(),
        chrono::Duration::minutes(10)
    );
    {
        let s = gh.state();
        let cancelled = s.check_runs.iter().filter(|c| c.conclusion.as_deref() == Some("cancelled")).count();
        assert_eq!(cancelled, 1, "the cancelled run's job is a cancelled check");
    }

    // Group b, cancel-in-progress: the newer run cancels the one running.
    work(4, "b", true)(&mut gh.state());
    runner.at(MINUTE, "fifth dispatch", work(5, "b", true));
    runner.run_until_idle(5).await;
    let b: Vec<&str> = runner.runs_of("queue.yml")[3..].iter().map(|r| r.conclusion.as_deref().unwrap()).collect();
    assert_eq!(b, ["cancelled", "success"], "{}", runner.summary());
}

// ---------------------------------------------------------------------------
// Git over smart HTTP

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_over_smart_http_moves_the_pull_requests_head() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[("README.md", "# hospital\n")]);
    let (maya, reader) = {
        let mut s = gh.state();
        s.add_collaborator("maya", "write");
        s.add_collaborator("rita", "read");
        let maya = s.mint_token("maya", Permissions::of(&[("contents", "write"), ("pull-requests", "write")]), false);
        (maya, s.mint_token("rita", Permissions::of(&[("contents", "read")]), false))
    };
    let work = clone_with(&gh, &maya);
    git(work.path(), &["checkout", "-q", "-b", "feature"]);
    write(work.path(), "fix.txt", "one\n");
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-q", "-m", "First"]);
    push(work.path(), &["-q", "origin", "feature"]).unwrap();
    let first = git(work.path(), &["rev-parse", "HEAD"]);
    let pr = gh.state().open_pull("feature", "main", "A fix", "", "maya");
    assert_eq!(gh.state().pull(pr).head_sha, first);

    let mark = gh.state().deliveries.len();
    write(work.path(), "fix.txt", "two\n");
    git(work.path(), &["commit", "-q", "-am", "Second"]);
    push(work.path(), &["-q", "origin", "feature"]).unwrap();
    let second = git(work.path(), &["rev-parse", "HEAD"]);
    {
        let s = gh.state();
        assert_eq!(s.pull(pr).head_sha, second, "the pull request's head is the commit pushed");
        let d: Vec<(&str, Option<&str>, &str, bool)> = s.deliveries[mark..]
            .iter()
            .map(|d| (d.event.as_str(), d.action(), d.sender.as_str(), d.by_workflow_token))
            .collect();
        assert_eq!(d, [("push", None, "maya", false), ("pull_request", Some("synchronize"), "maya", false)]);
        let sync = &s.deliveries[mark + 1].payload;
        assert_eq!((sync["before"].as_str(), sync["after"].as_str()), (Some(first.as_str()), Some(second.as_str())));
        assert_eq!(sync["pull_request"]["head"]["sha"], json!(second));
        assert_eq!(s.deliveries[mark].payload["commits"][0]["id"], json!(second));
    }
    // The API reads the same repository.
    let commits = gh.forge().pull_request_commits(pr).await.unwrap();
    assert_eq!(commits.iter().map(|c| c.sha.as_str()).collect::<Vec<_>>(), [first.as_str(), second.as_str()]);
    let (_, head) = call(&gh, TOKEN, "GET", &format!("/repos/{OWNER}/{REPO}/git/ref/heads/feature"), None).await;
    assert_eq!(head["object"]["sha"], json!(second));

    // A read-only token may fetch, not push; no token may do neither.
    let read_only = clone_with(&gh, &reader);
    git(read_only.path(), &["checkout", "-q", "-b", "rita"]);
    git(read_only.path(), &["commit", "-q", "--allow-empty", "-m", "mine"]);
    let err = push(read_only.path(), &["origin", "rita"]).unwrap_err();
    assert!(err.contains("Permission to octo/hospital.git denied to rita"), "{err}");
    assert!(err.contains("403"), "{err}");
    let anonymous = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("git")
        .args(["clone", "-q", &gh.git_url(), "."])
        .current_dir(anonymous.path())
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(!out.status.success(), "a private repository needs a token");
    assert!(gh.state().branch_head("rita").is_none());

    // A token without `workflows: write` may not touch a workflow file.
    write(work.path(), ".github/workflows/sneaky.yml", "on: push\njobs: {}\n");
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-q", "-m", "Add a workflow"]);
    let err = push(work.path(), &["origin", "feature"]).unwrap_err();
    assert!(
        err.contains("refusing to allow a GitHub App to create or update workflow `.github/workflows/sneaky.yml` without `workflows` permission"),
        "{err}"
    );
    assert_eq!(gh.state().pull(pr).head_sha, second, "the refused push moved nothing");
}

// ---------------------------------------------------------------------------
// CI arrives later, as its own events

const CI: &str = r#"
name: ci
on:
  pull_request:
  push:
    branches: [main]
permissions: {}
concurrency:
  group: ci-${{ github.ref }}
  cancel-in-progress: true
jobs:
  test:
    name: cargo test
    runs-on: ubuntu-24.04
    permissions:
      contents: read
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          persist-credentials: false
      - name: Tests
        run: |
          if grep -q broken status.txt; then
            echo "::error file=status.txt,line=1::the build is broken"
            exit 1
          fi
          echo "all green" >> "$GITHUB_STEP_SUMMARY"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_is_a_workflow_whose_check_runs_attach_to_the_head_later_and_leave_the_combined_status_pending() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[(".github/workflows/ci.yml", CI), ("status.txt", "fine\n")]);
    gh.state().add_collaborator("maya", "write");
    let mut runner = Runner::new(&gh);
    runner.job_takes("ci.yml", "test", 10 * MINUTE);
    let (pr, red) = {
        let mut s = gh.state();
        let red = s.commit_files("feature", &[("status.txt", "broken\n")], "Break it", "maya");
        (s.open_pull("feature", "main", "A change", "", "maya"), red)
    };
    // Halfway: the check is in progress on the head, the combined status
    // pending with no status at all.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let midway = seen.clone();
    let head = red.clone();
    runner.at(5 * MINUTE, "look at the checks", move |s| {
        let runs: Vec<(String, String)> =
            s.check_runs.iter().filter(|c| c.head_sha == head).map(|c| (c.name.clone(), c.status.clone())).collect();
        midway.lock().unwrap().push(runs);
    });
    let t0 = gh.state().time();
    runner.run_until_idle(5).await;
    assert_eq!(*seen.lock().unwrap(), [vec![("cargo test".to_string(), "in_progress".to_string())]]);
    let ci = runner.runs_of("ci.yml");
    assert_eq!(
        ci.len(),
        1,
        "the push of `feature` runs nothing (push: main only); the pull request does\n{}",
        runner.summary()
    );
    assert_eq!(
        (ci[0].event.as_str(), ci[0].git_ref.as_str()),
        ("pull_request", format!("refs/pull/{pr}/merge").as_str())
    );
    assert_ne!(ci[0].sha, red, "it ran on the test merge");
    assert_eq!(ci[0].head_sha, red, "its checks attach to the head");
    let (_, checks) = call(&gh, TOKEN, "GET", &format!("/repos/{OWNER}/{REPO}/commits/{red}/check-runs"), None).await;
    let check = &checks["check_runs"][0];
    assert_eq!(checks["total_count"], json!(1));
    assert_eq!((check["name"].as_str(), check["conclusion"].as_str()), (Some("cargo test"), Some("failure")));
    assert!(check["html_url"].as_str().unwrap().contains(&format!("/actions/runs/{}/job/", ci[0].id)), "{check}");
    assert_eq!(check["output"]["summary"], Value::Null, "Actions jobs report no output summary");
    assert_eq!(check["output"]["annotations_count"], json!(2), "the ::error and the exit code");
    let started = chrono::DateTime::parse_from_rfc3339(check["started_at"].as_str().unwrap()).unwrap();
    let completed = chrono::DateTime::parse_from_rfc3339(check["completed_at"].as_str().unwrap()).unwrap();
    assert_eq!(completed - started, chrono::Duration::minutes(10), "CI took ten simulated minutes");
    assert!(started.with_timezone(&chrono::Utc) - t0 < chrono::Duration::minutes(1));
    let (_, status) = call(&gh, TOKEN, "GET", &format!("/repos/{OWNER}/{REPO}/commits/{red}/status"), None).await;
    assert_eq!((status["state"].as_str(), status["total_count"].as_u64()), (Some("pending"), Some(0)));
    assert_eq!(ci[0].job("test").annotations[0].message, "the build is broken");

    // Fixed: a new head, a new run, green; the old head stays red.
    let green = gh.state().commit_files("feature", &[("status.txt", "fixed\n")], "Fix it", "maya");
    runner.run_until_idle(5).await;
    let ci = runner.runs_of("ci.yml");
    assert_eq!((ci.len(), ci[1].action.as_deref()), (2, Some("synchronize")));
    assert_eq!(ci[1].job("test").summary, "all green\n");
    let forge = gh.forge();
    assert_eq!(forge.ci_status(&green).await.unwrap().checks, ["cargo test: success"]);
    assert_eq!(forge.ci_status(&red).await.unwrap().checks, ["cargo test: failure"]);
    let (_, status) = call(&gh, TOKEN, "GET", &format!("/repos/{OWNER}/{REPO}/commits/{green}/status"), None).await;
    assert_eq!((status["state"].as_str(), status["total_count"].as_u64()), (Some("pending"), Some(0)));
    // The run told its end: check_suite and workflow_run completed.
    let s = gh.state();
    let ends: Vec<(&str, &str)> = s
        .deliveries
        .iter()
        .filter(|d| d.action() == Some("completed") && d.event != "check_run")
        .map(|d| (d.event.as_str(), d.sender.as_str()))
        .collect();
    assert_eq!(
        ends,
        [
            ("check_suite", ACTIONS_BOT),
            ("workflow_run", "maya"),
            ("check_suite", ACTIONS_BOT),
            ("workflow_run", "maya")
        ]
    );
}

// ---------------------------------------------------------------------------
// Reviews arrive later, from people with and without write access

const ON_REVIEW: &str = r#"
name: on review
on:
  pull_request_review:
    types: [submitted]
permissions: {}
jobs:
  echo:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "$STATE by $WHO"
        env:
          STATE: ${{ github.event.review.state }}
          WHO: ${{ github.event.review.user.login }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_come_later_from_people_with_and_without_write_access() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[(".github/workflows/on-review.yml", ON_REVIEW)]);
    let pr = {
        let mut s = gh.state();
        s.add_collaborator("maya", "write");
        s.add_collaborator("tia", "triage");
        s.add_collaborator("rob", "maintain");
        s.commit_files("feature", &[("fix.txt", "fixed\n")], "Fix", "maya");
        s.open_pull("feature", "main", "A fix", "", "maya")
    };
    let mut runner = Runner::new(&gh);
    let t0 = gh.state().time();
    runner.at(10 * MINUTE, "a triager approves", move |s| {
        s.review(pr, "tia", "APPROVE", "", &[]);
    });
    runner.at(60 * MINUTE, "a maintainer requests changes", move |s| {
        s.review(pr, "rob", "REQUEST_CHANGES", "Please handle the empty case.", &[("fix.txt", 1, "And test it.")]);
    });
    runner.run_until_idle(5).await;

    let forge = gh.forge();
    let reviews = forge.reviews(pr).await.unwrap();
    let seen: Vec<(&str, ward::forge::ReviewState)> = reviews.iter().map(|r| (r.author.as_str(), r.state)).collect();
    assert_eq!(
        seen,
        [("tia", ward::forge::ReviewState::Approved), ("rob", ward::forge::ReviewState::ChangesRequested)]
    );
    // The approval exists, from someone the permission endpoint reports as a triager.
    assert_eq!(forge.permission("tia").await.unwrap(), ward::forge::Permission::Triage);
    let (_, p) = call(&gh, TOKEN, "GET", &format!("/repos/{OWNER}/{REPO}/collaborators/tia/permission"), None).await;
    assert_eq!((p["permission"].as_str(), p["role_name"].as_str()), (Some("read"), Some("triage")));
    assert!(!gh.state().can_write("tia") && gh.state().can_write("rob"));
    // At the simulated times, with the maintainer's comment as an open thread.
    let (_, list) = call(&gh, TOKEN, "GET", &format!("/repos/{OWNER}/{REPO}/pulls/{pr}/reviews"), None).await;
    let at = |i: usize| chrono::DateTime::parse_from_rfc3339(list[i]["submitted_at"].as_str().unwrap()).unwrap();
    assert_eq!((at(0).with_timezone(&chrono::Utc) - t0).num_minutes(), 10);
    assert_eq!((at(1).with_timezone(&chrono::Utc) - t0).num_minutes(), 60);
    assert_eq!(forge.unresolved_review_threads(pr).await.unwrap(), 1);
    // Each review was its own event, and started the workflow.
    let logs: Vec<String> = runner.runs_of("on-review.yml").iter().map(|r| r.job("echo").log()).collect();
    assert!(logs[0].contains("approved by tia") && logs[1].contains("changes_requested by rob"), "{logs:?}");
    // GitHub's rule: nobody approves their own pull request.
    let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gh.state().review(pr, "maya", "APPROVE", "", &[]);
    }));
    assert!(own.is_err());
}

// ---------------------------------------------------------------------------
// Steps: workflow commands, outputs, env, status functions

const COMMANDS: &str = r#"
name: commands
on: workflow_dispatch
permissions: {}
jobs:
  first:
    runs-on: ubuntu-24.04
    outputs:
      greeting: ${{ steps.say.outputs.greeting }}
      leaked: ${{ steps.say.outputs.secret }}
    steps:
      - id: say
        env:
          KEY: ${{ secrets.DEPLOY_KEY }}
        run: |
          echo "::notice title=Hello::first notice"
          echo "::stop-commands::pause-42"
          echo "::error::not an annotation while stopped"
          echo "::pause-42::"
          echo "::warning file=src/a.rs,line=3::a real warning"
          echo "::add-mask::hunter2"
          echo "the password is hunter2"
          echo "the key is $KEY"
          echo "greeting=hello" >> "$GITHUB_OUTPUT"
          echo "secret=$KEY" >> "$GITHUB_OUTPUT"
          echo "FROM_ENV=carried" >> "$GITHUB_ENV"
      - name: Env carried, compared without case
        if: env.FROM_ENV == 'CARRIED' && steps.say.outputs.greeting == 'hello'
        run: echo "seen $FROM_ENV"
      - name: Fails but may
        run: exit 3
        continue-on-error: true
      - name: Only after a failure
        if: failure()
        run: echo never
  second:
    needs: first
    runs-on: ubuntu-24.04
    steps:
      - run: echo "got $G"
        env:
          G: ${{ needs.first.outputs.greeting }}
  no-secrets-in-if:
    needs: [first]
    if: ${{ secrets.DEPLOY_KEY != '' }}
    runs-on: ubuntu-24.04
    steps:
      - run: echo never
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_commands_suppress_annotations_until_their_token_and_secrets_stay_masked() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[(".github/workflows/commands.yml", COMMANDS)]);
    gh.state().add_collaborator("maya", "write");
    let mut runner = Runner::new(&gh);
    runner.secrets.insert("DEPLOY_KEY".into(), "s3cr3t-value".into());
    gh.state().dispatch_workflow("commands.yml", "main", &serde_json::Map::new(), "maya").unwrap();
    runner.run_until_idle(5).await;
    let run = runner.runs_of("commands.yml")[0];
    let first = run.job("first");
    let annotations: Vec<(&str, &str, Option<&str>)> =
        first.annotations.iter().map(|a| (a.level.as_str(), a.message.as_str(), a.title.as_deref())).collect();
    assert_eq!(
        annotations,
        [
            ("notice", "first notice", Some("Hello")),
            ("warning", "a real warning", None),
            ("error", "Process completed with exit code 3.", None),
            ("warning", "Skip output 'leaked' since it may contain secret.", None),
        ]
    );
    assert_eq!(first.annotations[1].file.as_deref(), Some("src/a.rs"));
    assert_eq!(first.annotations[1].line, Some(3));
    let log = first.step("say").log.clone();
    assert!(log.contains("::error::not an annotation while stopped"), "printed as text while stopped: {log}");
    assert!(log.contains("the password is ***") && log.contains("the key is ***"), "{log}");
    assert!(!log.contains("hunter2") && !log.contains("s3cr3t-value"), "{log}");
    assert_eq!(first.step("say").outputs["greeting"], "hello");
    assert!(first.step("Env carried, compared without case").log.contains("seen carried"));
    let may = first.step("Fails but may");
    assert_eq!((may.outcome.as_str(), may.conclusion.as_str()), ("failure", "success"));
    assert_eq!(first.step("Only after a failure").outcome, "skipped");
    assert_eq!(first.conclusion.as_deref(), Some("success"));
    assert_eq!(first.outputs, [("greeting".to_string(), "hello".to_string())].into_iter().collect());
    assert!(run.job("second").log().contains("got hello"));
    let refused = run.job("no-secrets-in-if");
    assert_eq!(refused.conclusion.as_deref(), Some("failure"));
    assert_eq!(refused.annotations[0].message, "Unrecognized named-value: 'secrets'");
}

/// The hostile agent `tests/hostile/commands.sh` in the shipped stage
/// workflow: it fails and prints workflow commands on stderr, which ward
/// quotes. Before the escaping the runner obeyed them: `ward` was masked,
/// the forged warning and notice were annotations, and `::stop-commands::`
/// silenced ward's own `::error`. Now the job shows exactly ward's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_workflow_commands_are_shown_as_text_and_wards_own_error_stands() {
    let gh = FakeGitHub::start().await;
    let agent = r#"command: ["{ward}", "stand-in"]"#;
    let _repo = hospital(
        &gh,
        &[
            ("hostile/commands.sh", &ours("tests/hostile/commands.sh")),
            ("hostile/common.sh", &ours("tests/hostile/common.sh")),
        ],
        |c| {
            assert!(c.contains(agent));
            c.replace(agent, r#"command: ["sh", "hostile/commands.sh", "{ward}", "/dev/null"]"#)
        },
    );
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(5).await;

    let run = runner.runs_of("ward-stage.yml")[0];
    // The agent ran in the visit job; the record job judged it and speaks.
    let job = run.job("record");
    let annotations: Vec<(&str, &str)> =
        job.annotations.iter().map(|a| (a.level.as_str(), a.title.as_deref().unwrap_or(""))).collect();
    assert_eq!(
        annotations,
        [("error", format!("ward: admit of #{n}").as_str()), ("error", "")],
        "ward's error, then the failed step's; nothing forged:\n{}",
        job.log()
    );
    assert!(job.annotations[0].message.contains("the agent exited with code 1"), "{:?}", job.annotations[0]);
    let log = job.step("stage").log.clone();
    assert!(log.contains("\\::stop-commands::hostile-token") && log.contains("\\::add-mask::ward"), "{log}");
    assert!(log.contains("ward"), "nothing was masked: {log}");
    assert!(job.step("stage").outputs.get("stage").is_none_or(|s| s != "discharge"), "no output forged");
    assert_eq!(gh.state().labels_of(n), ["ward:admit"], "an invalid run moves nothing");
}

// ---------------------------------------------------------------------------
// Artifacts, caches, and what the runner does not do

const ARTIFACTS: &str = r#"
name: artifacts
on: workflow_dispatch
permissions: {}
jobs:
  make:
    runs-on: ubuntu-24.04
    steps:
      - run: mkdir -p out/.hidden && echo report > out/report.txt && echo hidden > out/.hidden/x
      - uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2
        with:
          name: report
          path: out
      - name: The same name again
        uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2
        continue-on-error: true
        with:
          name: report
          path: out
      - id: cache
        uses: actions/cache@v4
        with:
          path: ~/.cargo
          key: cargo-1
      - run: test "${{ steps.cache.outputs.cache-hit }}" = false
  use:
    needs: make
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/download-artifact@v4
        with:
          name: report
          path: got
      - run: test "$(cat got/report.txt)" = report && test ! -e got/.hidden/x
      - uses: someone/unknown-action@v1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_pass_between_jobs_and_an_unknown_action_fails_loudly() {
    let gh = FakeGitHub::start().await;
    repository(&gh, &[(".github/workflows/artifacts.yml", ARTIFACTS)]);
    gh.state().add_collaborator("maya", "write");
    let mut runner = Runner::new(&gh);
    gh.state().dispatch_workflow("artifacts.yml", "main", &serde_json::Map::new(), "maya").unwrap();
    runner.run_until_idle(5).await;
    let run = runner.runs_of("artifacts.yml")[0].clone();
    let make = run.job("make");
    assert_eq!(make.conclusion.as_deref(), Some("success"), "{}", make.log());
    assert!(make.step("The same name again").log.contains("(409) Conflict: an artifact with this name already exists"));
    assert_eq!(run.artifacts.keys().collect::<Vec<_>>(), ["report"]);
    let using = run.job("use");
    assert_eq!(using.steps[1].outcome, "success", "{}", using.log());
    assert_eq!(using.conclusion.as_deref(), Some("failure"));
    assert_eq!(runner.unsupported, ["artifacts.yml: `uses: someone/unknown-action@v1`"]);
    runner.unsupported.clear(); // this test wanted it; let the drop pass
}

// ---------------------------------------------------------------------------
// Expressions

#[test]
fn expressions_follow_githubs_rules() {
    use support::actions::expr::{Contexts, Status, condition, eval, interpolate};
    let ctx = Contexts::new(Status::Success)
        .with("github", json!({ "event_name": "issues", "event": { "label": { "name": "Ward:Admit" }, "issue": { "labels": [{ "name": "bug" }, { "name": "ward:admit" }] } } }))
        .with("inputs", json!({ "issue": 7 }))
        .with("steps", json!({ "stage": { "outputs": { "issue": "7" } } }));
    let e = |s: &str| eval(s, &ctx).unwrap();
    // Loose equality: types coerce to numbers; strings ignore case.
    assert_eq!(e("'7' == 7"), json!(true));
    assert_eq!(e("null == 0 && true == 1 && '' == 0"), json!(true));
    assert_eq!(e("github.event.label.name == 'ward:admit'"), json!(true));
    assert_eq!(e("startsWith(github.event.label.name, 'WARD:')"), json!(true));
    // && and || give an operand, as in the ward-stage group expression.
    assert_eq!(e("github.event.issue.number || github.event.client_payload.issue || inputs.issue"), json!(7));
    assert_eq!(e("steps.stage.outputs.missing || 'unknown'"), json!("unknown"));
    assert_eq!(e("contains(github.event.issue.labels.*.name, 'BUG')"), json!(true));
    assert_eq!(e("format('{0}-{1}{{x}}', 'a', 1)"), json!("a-1{x}"));
    assert_eq!(e("fromJSON('{\"a\": [1, 2]}').a[1]"), json!(2));
    assert_eq!(e("toJSON(inputs)"), json!("{\n  \"issue\": 7\n}"));
    assert_eq!(e("!(1 < 2) || 'b' > 'A'"), json!(true));
    assert_eq!(e("github.nothing.deeper"), Value::Null);
    assert_eq!(
        interpolate("ward-issue-${{ inputs.issue }}-${{ steps.stage.outputs.stage || 'none' }}", &ctx).unwrap(),
        "ward-issue-7-none"
    );
    // An if: without a status function means success() && (...).
    let failed = Contexts::new(Status::Failure).with("github", json!({ "event_name": "push" }));
    assert!(!condition("github.event_name == 'push'", &failed).unwrap());
    assert!(condition("always() && github.event_name == 'push'", &failed).unwrap());
    assert!(condition("failure()", &failed).unwrap());
    // Text around ${{ }} makes the whole a non-empty string: true.
    assert!(condition("${{ false }} == true", &ctx).unwrap());
    // A named value the place does not offer is an error, as GitHub's.
    assert_eq!(eval("secrets.TOKEN", &ctx).unwrap_err(), "Unrecognized named-value: 'secrets'");
    assert_eq!(eval("nope(1)", &ctx).unwrap_err(), "Unrecognized function: 'nope'");
}

// ---------------------------------------------------------------------------
// End to end: the shipped ward-stage.yml, from admission to a merged pull request

/// The test repository's own CI: the change log names every treated issue.
const CHANGELOG_CI: &str = r#"
name: ci
on:
  pull_request:
  push:
    branches: [main]
  workflow_dispatch:
permissions: {}
jobs:
  test:
    name: changelog
    runs-on: ubuntu-24.04
    permissions:
      contents: read
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          persist-credentials: false
      - name: Every change is in the change log
        run: |
          grep -q "Treated #" CHANGELOG.md
"#;

/// The label each `ward-stage` run started on (its dispatch's, or the
/// labeled event's).
fn stage_labels(runner: &Runner<'_>) -> Vec<String> {
    runner
        .runs_of("ward-stage.yml")
        .iter()
        .map(|r| {
            let label =
                if r.event == "issues" { &r.payload["label"]["name"] } else { &r.payload["client_payload"]["label"] };
            label.as_str().unwrap_or_default().to_string()
        })
        .collect()
}

/// The discharge checklists the engine wrote on the chart, in order.
fn checklists(gh: &FakeGitHub, n: u64) -> Vec<String> {
    let chart = gh.state().file("ward-charts", &format!("charts/{n}.md")).unwrap();
    chart
        .split("<!-- WARD:DISCHARGE_CHECKLIST ")
        .skip(1)
        .map(|c| c.split("<!-- /WARD:DISCHARGE_CHECKLIST -->").next().unwrap().to_string())
        .filter(|c| c.contains("Discharge audit of"))
        .collect()
}

/// Every file under `dir`, read as text.
fn texts(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            out.push((p.clone(), String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()));
        }
    }
    out
}

/// The runs summary, and the logs of the runs that failed.
fn failures(runner: &Runner<'_>) -> String {
    let logs: Vec<String> = runner
        .runs_of("ward-stage.yml")
        .iter()
        .filter(|r| r.conclusion.as_deref() == Some("failure"))
        .map(|r| format!("{}\n{}\n{}", r.describe(), r.job("visit").log(), r.job("record").log()))
        .chain(
            runner
                .runs_of("ward-queue.yml")
                .iter()
                .filter(|r| r.conclusion.as_deref() == Some("failure"))
                .map(|r| format!("{}\n{}\n{}", r.describe(), r.job("check").log(), r.job("record").log())),
        )
        .collect();
    format!("{}\n{}", runner.summary(), logs.join("\n"))
}

/// The notes of `kind` the engine wrote on the chart of `n`, in order.
fn notes_of(gh: &FakeGitHub, n: u64, kind: &str) -> Vec<String> {
    let chart = gh.state().file("ward-charts", &format!("charts/{n}.md")).unwrap_or_default();
    chart
        .split(&format!("<!-- WARD:{kind} "))
        .skip(1)
        .map(|c| c.split(&format!("<!-- /WARD:{kind} -->")).next().unwrap().to_string())
        .collect()
}

/// The stages an agent ran in, in order: every agent run is preceded by
/// the engine's ADMISSION note, and a patient that waits gets none.
fn agent_stages(gh: &FakeGitHub, n: u64) -> Vec<String> {
    notes_of(gh, n, "ADMISSION")
        .iter()
        .map(|a| a.split("stage=").nth(1).unwrap().split_whitespace().next().unwrap().to_string())
        .collect()
}

/// Each job token's permissions, as the shipped ward-stage.yml grants them:
/// the visit job (the agent's) reads only, the record job writes.
fn assert_stage_permissions(run: &support::actions::WorkflowRun) {
    let scopes = ["contents", "issues", "pull-requests", "checks", "statuses", "actions"];
    let p = &run.job("visit").permissions;
    assert_eq!(
        scopes.map(|scope| p.level(scope)),
        [Level::Read, Level::Read, Level::Read, Level::Read, Level::Read, Level::None]
    );
    let p = &run.job("record").permissions;
    assert_eq!(
        scopes.map(|scope| p.level(scope)),
        [Level::Write, Level::Write, Level::Write, Level::Read, Level::Read, Level::Write]
    );
}

/// A maintainer admits a patient on a repository that installed ward as
/// docs/github.md says (the default `GITHUB_TOKEN`, `dispatch:
/// repository_dispatch`), without naming its CI under `ci.workflows`.
/// Each stage's labels are set with the job's token and start nothing;
/// its `repository_dispatch` starts the next stage, through the shipped
/// ward-stage.yml, up to treatment, which pushes `ward/issue-1` over smart
/// HTTP and opens the pull request.
///
/// That push and that pull request were made with the workflow token, so
/// the repository's CI never runs on the treatment branch (nothing asked
/// ward to start it), and no person has reviewed. The discharge audit
/// tells "not yet" from "failed": the patient rests at
/// `ward:awaiting-review` with one WAITING note that says both are
/// missing, and no agent runs (before issue 11 it looped between code
/// review and discharge, two agent runs a loop, until the send-back limit
/// sent it to the chiefs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_stage_workflow_moves_a_patient_by_dispatches_and_without_a_ci_setting_it_waits_for_ci() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[(".github/workflows/ci.yml", CHANGELOG_CI)], |c| c);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let main = gh.state().branch_head("main").unwrap();
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(30).await;

    // The stages, one run each: the maintainer's label, then dispatches.
    let expected =
        ["ward:admit", "ward:diagnose", "ward:plan-review", "ward:treat", "ward:code-review", "ward:discharge"];
    assert_eq!(stage_labels(&runner), expected, "{}", failures(&runner));
    let stage_runs = runner.runs_of("ward-stage.yml");
    assert_eq!((stage_runs[0].event.as_str(), stage_runs[0].actor.as_str()), ("issues", "maya"));
    assert!(stage_runs[1..].iter().all(|r| r.event == "repository_dispatch" && r.actor == ACTIONS_BOT));
    assert!(stage_runs.iter().all(|r| r.conclusion.as_deref() == Some("success")), "{}", runner.summary());
    assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"]);

    // Treatment pushed over smart HTTP with its job's token, and the pull
    // request's head is that push; what the workflow token did started no
    // workflow: the repository's CI never ran.
    {
        let s = gh.state();
        let pushes: Vec<(&str, u16)> = s
            .git_log
            .iter()
            .filter(|g| g.method == "POST" && g.path.contains("git-receive-pack"))
            .map(|g| (g.login.as_deref().unwrap_or(""), g.status))
            .collect();
        assert_eq!(pushes, [(ACTIONS_BOT, 200)]);
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).unwrap();
        assert_eq!(
            (pr.author.as_str(), Some(pr.head_sha.clone())),
            (ACTIONS_BOT, s.branch_head(&format!("ward/issue-{n}")))
        );
        assert!(s.file(&pr.head_sha, "CHANGELOG.md").unwrap().contains(&format!("Treated #{n}")));
    }
    assert!(runner.runs_of("ci.yml").is_empty(), "{}", runner.summary());
    for event in ["push", "pull_request", "issues"] {
        let why = format!("{event} by github-actions[bot]: caused by a workflow token");
        assert!(runner.ignored.iter().any(|(_, w)| *w == why), "{why}: {:?}", runner.ignored);
    }

    // Why it rests: one WAITING note naming what has not happened yet; no
    // agent ran in discharge, and no checklist failed.
    let waiting = notes_of(&gh, n, "WAITING");
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(waiting[0].contains("⬜ CI green for the head commit: not yet: no check run or status was reported"));
    assert!(
        waiting[0].contains("⬜ Approving pull request review by a person with write permission"),
        "{}",
        waiting[0]
    );
    assert!(!waiting[0].contains('❌'), "{}", waiting[0]);
    assert_eq!(agent_stages(&gh, n), ["admit", "diagnose", "plan-review", "treat", "code-review"]);
    assert!(checklists(&gh, n).is_empty(), "no audit failed");

    // Each job had the workflow's permissions and nothing more; its check
    // run is on the default branch's head (issues and dispatches run there).
    for run in &stage_runs {
        assert_stage_permissions(run);
        assert_eq!(run.head_sha, main);
        assert!(run.job("record").summary.starts_with("### ward: "), "{}", run.job("record").summary);
    }
    for job in ["ward visit", "ward record"] {
        let on_main = gh.state().check_runs.iter().filter(|c| c.head_sha == main && c.name == job).count();
        assert_eq!(on_main, stage_runs.len(), "{job}");
    }

    // The artifacts of every run, and no job token in any of them.
    let tokens: Vec<String> = gh.state().tokens.keys().cloned().collect();
    let (last, agent_runs) = stage_runs.split_last().unwrap();
    // The discharge waited before any agent: why no visit, and the reports.
    assert_eq!(texts(&last.artifacts["ward-visit"]).len(), 1, "only no-visit.txt");
    let kept: Vec<String> = last
        .artifacts
        .values()
        .flat_map(|dir| texts(dir))
        .map(|(path, _)| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        kept.iter().all(|f| f == "report.json" || f == "no-visit.txt"),
        "the discharge waited before any agent: {kept:?}"
    );
    for run in agent_runs {
        // The sealed visit the record job took: the agent's notes and logs,
        // and visit.json (a treatment's commits as a bundle besides).
        let visit = &run.artifacts["ward-visit"];
        for file in ["visit.json", "notes.md", "agent.stdout.log", "agent.stderr.log"] {
            assert!(visit.join(file).is_file(), "{file} in the sealed visit");
        }
        for (path, text) in texts(visit) {
            assert!(!tokens.iter().any(|t| text.contains(t.as_str())), "a token in {}", path.display());
        }
        let stage = run.job("record").step("stage").outputs["stage"].clone();
        assert_eq!(visit.join("visit.bundle").is_file(), stage == "treat", "only the treatment committed: {stage}");
        let name = format!("ward-issue-{n}-{stage}-attempt-1");
        let dir = run.artifacts.get(&name).unwrap_or_else(|| panic!("{name} in {:?}", run.artifacts.keys()));
        for (path, text) in texts(dir) {
            assert!(!tokens.iter().any(|t| text.contains(t.as_str())), "a token in {}", path.display());
        }
    }

    // The charge nurse's cron, fired now (WARD_NOW is the simulated time).
    runner.schedule("ward-sweep.yml");
    runner.run_until_idle(3).await;
    let sweep = runner.runs_of("ward-sweep.yml")[0];
    assert_eq!(
        (sweep.event.as_str(), sweep.conclusion.as_deref()),
        ("schedule", Some("success")),
        "{}",
        sweep.job("sweep").log()
    );
    assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"]);
    assert_eq!(notes_of(&gh, n, "WAITING").len(), 1, "nothing changed, nothing written");
}

/// Scenario (a) of issue 11, with the default token: the repository names
/// its CI under `ci.workflows`, so ward starts it with `workflow_dispatch`
/// on the treatment branch after the push; CI takes ten simulated minutes;
/// a triager approves (which counts for nothing, and costs two calls to
/// find out); a maintainer approves an hour after admission. The patient
/// waits at `ward:awaiting-review` without an agent, wakes on CI's
/// `workflow_run` and on the reviews, and is merged after the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ward_starts_ci_on_the_treatment_branch_waits_for_it_and_a_maintainers_review_and_merges() {
    let gh = FakeGitHub::start().await;
    let config = |c: String| c.replace("\nagent:\n", "\nci:\n  workflows: [ci.yml]\n\nagent:\n");
    let _repo = hospital(&gh, &[(".github/workflows/ci.yml", CHANGELOG_CI)], config);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("tia", "triage");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.job_takes("ci.yml", "test", 10 * MINUTE);
    // Without a cap the slot job only reads ward.yml: seconds.
    runner.job_takes("ward-stage.yml", "slot", Duration::from_secs(10));
    let marks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (m1, m2) = (marks.clone(), marks.clone());
    runner.at(29 * MINUTE, "mark the log", move |s| m1.lock().unwrap().push(s.log.len()));
    runner.at(30 * MINUTE, "a triager approves", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "tia", "APPROVE", "", &[]);
    });
    runner.at(35 * MINUTE, "mark the log", move |s| m2.lock().unwrap().push(s.log.len()));
    runner.at(60 * MINUTE, "the maintainer approves the pull request", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "maya", "APPROVE", "Looks right.", &[]);
    });
    let t0 = gh.state().time();
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(40).await;

    // Merged and discharged after the maintainer's approval.
    assert_eq!(gh.state().labels_of(n), ["ward:discharged"], "{}", failures(&runner));
    let pr = gh.state().pulls.values().find(|p| p.head == format!("ward/issue-{n}")).unwrap().clone();
    assert!(pr.merged, "{}", runner.summary());
    // CI ran once, started by ward's dispatch on the branch, green on the head.
    let ci = runner.runs_of("ci.yml");
    assert_eq!(ci.len(), 1, "{}", runner.summary());
    assert_eq!(
        (ci[0].event.as_str(), ci[0].actor.as_str(), ci[0].git_ref.as_str(), ci[0].conclusion.as_deref()),
        ("workflow_dispatch", ACTIONS_BOT, format!("refs/heads/ward/issue-{n}").as_str(), Some("success"))
    );
    assert_eq!(ci[0].head_sha, pr.head_sha);

    // What woke the patient: CI's workflow_run, then each review.
    let stage_runs = runner.runs_of("ward-stage.yml");
    let events: Vec<&str> = stage_runs.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        events,
        [
            "issues",
            "repository_dispatch",
            "repository_dispatch",
            "repository_dispatch",
            "repository_dispatch",
            "repository_dispatch",
            "workflow_run",
            "pull_request_review",
            "pull_request_review"
        ],
        "{}",
        runner.summary()
    );
    assert!(stage_runs.iter().all(|r| r.conclusion.as_deref() == Some("success")), "{}", runner.summary());
    // No agent ran while it waited: the nurse ran once, after the approval.
    assert_eq!(agent_stages(&gh, n), ["admit", "diagnose", "plan-review", "treat", "code-review", "discharge"]);
    let waiting = notes_of(&gh, n, "WAITING");
    assert_eq!(waiting.len(), 2, "CI running, then CI green: {waiting:#?}");
    assert!(waiting[0].contains("not yet: CI is still running"), "{}", waiting[0]);
    assert!(!waiting[1].contains("CI green for the head"), "CI passed: only the review is missing\n{}", waiting[1]);
    let nurse = stage_runs.last().unwrap().job("visit").started_at.unwrap();
    assert!(nurse - t0 >= chrono::Duration::minutes(60), "{}", nurse - t0);
    // The triager's approval woke the patient for two calls and nothing
    // else: one GraphQL read (issue, lockdown, chart) and the reviewer's
    // permission (the floor: the review event names the reviewer, not
    // whether their review counts).
    let marks = marks.lock().unwrap().clone();
    let calls: std::collections::BTreeMap<String, usize> =
        gh.state().log[marks[0]..marks[1]].iter().fold(Default::default(), |mut m, e| {
            *m.entry(e.key()).or_default() += 1;
            m
        });
    assert_eq!(
        calls,
        ["GET /repos/{owner}/{repo}/collaborators/{username}/permission", "POST /graphql"]
            .into_iter()
            .map(|k| (k.to_string(), 1))
            .collect(),
        "a wake-up that finds nothing new: two calls, in the visit job; its record job is skipped"
    );
    let triage_wake = &stage_runs[7];
    let look = triage_wake.job("visit").step("visit").log.clone();
    assert!(look.contains("neither passes nor blocks"), "{look}");
    assert_eq!(triage_wake.job("record").conclusion.as_deref(), Some("skipped"), "nothing to record");
    let final_audit = checklists(&gh, n).pop().unwrap();
    assert!(final_audit.contains("`tia` approved (triage)"), "listed, not counted: {final_audit}");
}

/// The same installation with a GitHub App's token (`WARD_TOKEN`,
/// `dispatch: label`): the app's labels start each stage, and its push
/// and pull request start the repository's CI by themselves (ward starts
/// none), which takes ten simulated minutes; a maintainer approves an hour
/// after admission. The audit runs while CI is still running and nobody
/// has reviewed: the patient waits without an agent (before issue 11 it
/// looped between code review and discharge until the chiefs got it),
/// wakes when CI's run completes and when the review comes, and is merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_app_token_the_apps_labels_start_each_stage_its_push_starts_ci_and_the_audit_waits() {
    let gh = FakeGitHub::start().await;
    let config = |c: String| {
        c.replace("engine_account: github-actions[bot]", "engine_account: ward-app[bot]")
            .replace("\ndispatch: repository_dispatch\n", "\ndispatch: label\n")
            .replace("\nagent:\n", "\nci:\n  workflows: [ci.yml]\n\nagent:\n")
    };
    let _repo = hospital(&gh, &[(".github/workflows/ci.yml", CHANGELOG_CI)], config);
    let (n, app) = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        let n = s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[]);
        let grants = [
            ("contents", "write"),
            ("issues", "write"),
            ("pull-requests", "write"),
            ("checks", "read"),
            ("statuses", "read"),
        ];
        (n, s.app_token("ward-app[bot]", Permissions::of(&grants)))
    };
    let mut runner = Runner::new(&gh);
    runner.secrets.insert("WARD_TOKEN".into(), app);
    runner.job_takes("ci.yml", "test", 10 * MINUTE);
    let t0 = gh.state().time();
    runner.at(60 * MINUTE, "the maintainer approves the pull request", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "maya", "APPROVE", "Looks right.", &[]);
    });
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(40).await;

    // The app's labeled events started every stage; nothing was dispatched.
    let stage_runs = runner.runs_of("ward-stage.yml");
    let started: Vec<(&str, &str)> = stage_runs.iter().map(|r| (r.event.as_str(), r.actor.as_str())).collect();
    assert!(started[1..6].iter().all(|s| *s == ("issues", "ward-app[bot]")), "{}", runner.summary());
    assert!(gh.state().dispatches.is_empty());
    // Its pull request started CI (ward started none: `dispatch: label`),
    // whose check run is on the head, green; its merge pushed to `main`,
    // which started CI there too.
    let ci = runner.runs_of("ci.yml");
    let started: Vec<(&str, &str)> = ci.iter().map(|r| (r.event.as_str(), r.actor.as_str())).collect();
    assert_eq!(started, [("pull_request", "ward-app[bot]"), ("push", "ward-app[bot]")], "{}", runner.summary());
    assert_eq!(ci[0].conclusion.as_deref(), Some("success"), "{}", ci[0].job("test").log());
    let pr = gh.state().pulls.values().find(|p| p.head == format!("ward/issue-{n}")).unwrap().clone();
    assert_eq!(ci[0].head_sha, pr.head_sha);

    // It waited (CI running, then only the review missing), with no agent,
    // and the nurse ran once, after the approval; merged.
    let waiting = notes_of(&gh, n, "WAITING");
    assert_eq!(waiting.len(), 2, "{waiting:#?}\n{}", runner.summary());
    assert!(waiting[0].contains("⬜ CI green for the head commit: not yet: CI is still running"), "{}", waiting[0]);
    assert!(!waiting[1].contains("CI green"), "{}", waiting[1]);
    assert_eq!(agent_stages(&gh, n), ["admit", "diagnose", "plan-review", "treat", "code-review", "discharge"]);
    assert!(checklists(&gh, n).len() == 1 && checklists(&gh, n)[0].contains("Result: passed"));
    assert!(pr.merged, "{}", runner.summary());
    assert_eq!(gh.state().labels_of(n), ["ward:discharged"]);
    // After discharge: the app's own `ward:awaiting-review` label (it starts
    // nothing), CI's end, the review, the app's merge closing the pull request
    // (`pull_request` closed wakes a patient in GitHub's merge queue; this one
    // is not, and the visit finds nothing to do), the app's `ward:discharged`,
    // and the end of CI on `main` (skipped by the job's `if:`: not a treatment branch).
    let wakes: Vec<&str> = stage_runs[6..].iter().map(|r| r.event.as_str()).collect();
    assert_eq!(
        wakes,
        ["issues", "workflow_run", "pull_request_review", "pull_request", "issues", "workflow_run"],
        "{}",
        runner.summary()
    );
    assert_eq!(stage_runs[11].conclusion.as_deref(), Some("skipped"), "{}", runner.summary());
    assert!(stage_runs[6].job("visit").step("visit").log.contains("starts no ward stage"));
    let nurse = stage_runs[8].job("visit").started_at.unwrap();
    assert!(nurse - t0 >= chrono::Duration::minutes(60));
}

/// Scenario (e) of issue 11: an unrelated label applied while the engine's
/// dispatch is pending does not lose the stage. The shipped workflow's
/// job-level `if:` skips the `bug` label before the job would enter the
/// issue's concurrency group, so GitHub's one-pending-run rule never
/// cancels the queued dispatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrelated_label_applied_while_a_dispatch_is_pending_does_not_lose_the_stage() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], |c| c);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("tia", "triage");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.job_takes("ward-stage.yml", "visit", 5 * MINUTE);
    // Without a cap the slot job only reads ward.yml: seconds. The record
    // ends before the next stage's slot job, which the stop below waits for.
    runner.job_takes("ward-stage.yml", "slot", Duration::from_secs(10));
    runner.job_takes("ward-stage.yml", "record", Duration::from_secs(5));
    gh.state().label(n, "ward:admit", "maya");
    // Each visit takes five minutes; the label comes while diagnosis's runs.
    runner.at(6 * MINUTE, "a triager labels the issue `bug`", move |s| s.label(n, "bug", "tia"));
    runner.run_until(10, |s| s.labels_of(n).contains(&"ward:plan-review".to_string())).await;

    // Stopped once plan review was dispatched: admission, diagnosis, `bug`, plan review (queued).
    let runs = runner.runs_of("ward-stage.yml");
    let described: Vec<String> = runs.iter().map(|r| r.describe()).collect();
    assert_eq!(runs.len(), 4, "{described:#?}\n{}", runs[0].job("visit").log());
    let (admit, diagnose, bug) = (runs[0], runs[1], runs[2]);
    assert_eq!(runs[3].payload["client_payload"]["label"], json!("ward:plan-review"));
    assert_eq!(bug.payload["label"]["name"], json!("bug"));
    assert_eq!(bug.job("visit").conclusion.as_deref(), Some("skipped"), "the `if:` skips it");
    assert_eq!(bug.job("record").conclusion.as_deref(), Some("skipped"), "its need was skipped");
    assert_eq!(bug.conclusion.as_deref(), Some("skipped"));
    assert_eq!(bug.job("visit").group, None, "a skipped job never enters the group");
    assert_eq!(diagnose.payload["client_payload"]["label"], json!("ward:diagnose"));
    assert_eq!(diagnose.job("record").conclusion.as_deref(), Some("success"));
    assert!(Some(diagnose.created_at) >= admit.job("visit").completed_at, "admission's record dispatched it");
    assert!(diagnose.created_at < bug.created_at, "the dispatch was queued first");
    assert!(bug.created_at < diagnose.job("visit").completed_at.unwrap(), "the label came while it ran");
    assert_eq!(admit.job("visit").group.as_deref(), Some(format!("ward-issue-{n}").as_str()));
    assert_eq!(admit.job("record").group.as_deref(), Some(format!("ward-record-{n}").as_str()));
    assert_eq!(gh.state().labels_of(n), ["bug", "ward:plan-review"]);
}

// ---------------------------------------------------------------------------
// Deliveries are shaped like GitHub's: octokit's JSON schemas say so

/// octokit/webhooks' payload schemas (`tests/fixtures/github/webhooks/
/// payload-schemas/`), their relative `$ref`s made absolute so one
/// validator resolves them all.
struct WebhookSchemas {
    root: std::path::PathBuf,
    resources: Vec<(String, Value)>,
}

impl WebhookSchemas {
    const BASE: &'static str = "https://octokit.invalid/";

    fn load() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/github/webhooks/payload-schemas");
        let mut resources = Vec::new();
        for (path, text) in texts(&root) {
            let rel = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let mut v: Value = serde_json::from_str(&text).unwrap();
            Self::absolute(&mut v);
            resources.push((format!("{}{rel}", Self::BASE), v));
        }
        Self { root, resources }
    }

    /// `common/x.schema.json` (from an event) and `x.schema.json` (from
    /// common/) both name `<BASE>common/x.schema.json`.
    fn absolute(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("$id");
                if let Some(Value::String(r)) = m.get_mut("$ref")
                    && !r.starts_with('#')
                {
                    let name = r.trim_start_matches("common/");
                    *r = format!("{}common/{name}", Self::BASE);
                }
                m.values_mut().for_each(Self::absolute);
            }
            Value::Array(a) => a.iter_mut().for_each(Self::absolute),
            _ => {}
        }
    }

    /// The schema of a delivery, if octokit publishes one here.
    fn file_for(&self, d: &Delivery) -> Option<String> {
        let single = format!("{}/event.schema.json", d.event);
        let per_action = format!("{}/{}.schema.json", d.event, d.action().unwrap_or(""));
        [per_action, single].into_iter().find(|f| self.root.join(f).exists())
    }

    fn check(&self, file: &str, payload: &Value) -> Result<(), String> {
        let main = self.resources.iter().find(|(u, _)| u.ends_with(file)).unwrap().1.clone();
        let mut options = jsonschema::options().with_draft(jsonschema::Draft::Draft7);
        for (uri, v) in &self.resources {
            options = options.with_resource(uri.clone(), jsonschema::Resource::from_contents(v.clone()).unwrap());
        }
        let validator = options.build(&main).map_err(|e| format!("{file} does not compile: {e}"))?;
        let errors: Vec<String> =
            validator.iter_errors(payload).take(5).map(|e| format!("{e} at {}", e.instance_path)).collect();
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_delivery_validates_against_octokits_webhook_schema() {
    let gh = FakeGitHub::start().await;
    repository(
        &gh,
        &[
            (".github/workflows/ci.yml", CI),
            (".github/workflows/on-dispatch.yml", ON_DISPATCH),
            ("status.txt", "fine\n"),
        ],
    );
    let mut runner = Runner::new(&gh);
    {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        let n = s.add_issue("An issue", "with a body", "maya", &["bug"]);
        s.label(n, "ward:admit", "maya");
        s.unlabel(n, "bug", "maya");
        s.comment(n, "A comment", "rob");
        let head = s.commit_files("feature", &[("fix.txt", "fixed\n")], "Fix", "rob");
        let pr = s.open_pull("feature", "main", "A fix", "Closes #1", "rob");
        s.comment(pr, "A comment on the pull request", "maya");
        s.review(pr, "maya", "APPROVE", "Good.", &[("fix.txt", 1, "nit")]);
        s.set_status(&head, "lint", "success", "maya");
        s.report_check("ci-app", &head, "external", "success", Some("all good"));
        s.repository_dispatch("poke", json!({ "why": "a test" }), "maya");
        s.dispatch_workflow(
            "on-dispatch.yml",
            "main",
            &[("why".to_string(), json!("a test"))].into_iter().collect(),
            "maya",
        )
        .unwrap();
    }
    runner.run_until_idle(10).await;
    let pr = gh.state().open_pull_for("feature").unwrap().number;
    let merge = format!("/repos/{OWNER}/{REPO}/pulls/{pr}/merge");
    assert_eq!(call(&gh, TOKEN, "PUT", &merge, Some(json!({ "merge_method": "squash" }))).await.0, 200);
    gh.state().close(1, "maya");

    let schemas = WebhookSchemas::load();
    let deliveries = gh.state().deliveries.clone();
    let mut checked = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for d in &deliveries {
        let Some(file) = schemas.file_for(d) else { continue };
        if let Err(why) = schemas.check(&file, &d.payload) {
            problems.push(format!("{} {:?}: {why}", d.event, d.action()));
        }
        checked.insert(file);
    }
    assert!(problems.is_empty(), "{} deliveries GitHub would not send:\n{}", problems.len(), problems.join("\n"));
    let expected = [
        "check_run/completed.schema.json",
        "check_suite/completed.schema.json",
        "issue_comment/created.schema.json",
        "issues/labeled.schema.json",
        "issues/opened.schema.json",
        "issues/unlabeled.schema.json",
        "pull_request/closed.schema.json",
        "pull_request/opened.schema.json",
        "pull_request_review/submitted.schema.json",
        "push/event.schema.json",
        "repository_dispatch/event.schema.json",
        "status/event.schema.json",
        "workflow_dispatch/event.schema.json",
        "workflow_run/completed.schema.json",
    ];
    assert_eq!(checked.iter().map(String::as_str).collect::<Vec<_>>(), expected);
}

// ---------------------------------------------------------------------------
// The other triggers and their filters

/// A workflow named `name` on `on` that echoes what started it.
fn echo_workflow(name: &str, on: &str) -> String {
    format!(
        "name: {name}\non:\n{on}\npermissions: {{}}\njobs:\n  echo:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo \"$EVENT $ACTION\"\n        env:\n          EVENT: ${{{{ github.event_name }}}}\n          ACTION: ${{{{ github.event.action }}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_trigger_starts_what_its_types_branches_paths_and_workflows_allow() {
    let gh = FakeGitHub::start().await;
    let files = [
        ("comment", "  issue_comment:\n    types: [created]"),
        ("status", "  status:"),
        ("checks", "  check_run:\n    types: [completed]\n  check_suite:\n    types: [completed]"),
        ("after-ci", "  workflow_run:\n    workflows: [ci]\n    types: [completed]"),
        ("docs", "  push:\n    branches: [main]\n    paths: ['docs/**']"),
        ("tags", "  push:\n    tags: ['v*']"),
        ("pr-default", "  pull_request:"),
    ];
    let mut repo: Vec<(String, String)> =
        files.iter().map(|(name, on)| (format!(".github/workflows/{name}.yml"), echo_workflow(name, on))).collect();
    repo.push((".github/workflows/ci.yml".into(), CI.into()));
    repo.push(("status.txt".into(), "fine\n".into()));
    let refs: Vec<(&str, &str)> = repo.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    repository(&gh, &refs);
    let mut runner = Runner::new(&gh);
    let ran = |runner: &Runner<'_>| -> Vec<String> {
        runner.runs.iter().map(|r| format!("{} {}", r.workflow, r.action.as_deref().unwrap_or(&r.event))).collect()
    };
    {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        let n = s.add_issue("x", "", "maya", &[]);
        s.comment(n, "hello", "maya");
        let main = s.branch_head("main").unwrap();
        s.set_status(&main, "deploy", "success", "deployer[bot]");
        s.report_check("linter", &main, "lint", "success", Some("clean"));
        // A push to main outside docs/, then one inside.
        s.commit_files("main", &[("src.txt", "code\n")], "Code", "maya");
        s.commit_files("main", &[("docs/guide.md", "# Guide\n")], "Docs", "maya");
    }
    runner.run_until_idle(20).await;
    assert_eq!(
        ran(&runner),
        [
            "comment.yml created",
            "status.yml status",
            "checks.yml completed",
            "checks.yml completed",
            "ci.yml push",
            "ci.yml push",
            "docs.yml push",
            "after-ci.yml completed",
            "after-ci.yml completed",
        ],
        "{}",
        runner.summary()
    );
    // CI's own check runs and suites (Actions') started no `checks` run;
    // its workflow_run did start `after-ci`.
    assert!(
        runner.ignored.iter().any(|(_, why)| why == "check_suite by github-actions[bot]: caused by a workflow token")
    );

    // A tag starts the tag workflow; a labeled pull request starts nothing
    // (`pull_request:` defaults to opened, synchronize, reopened); a pull
    // request in conflict with its base starts nothing at all.
    let mark = runner.runs.len();
    {
        let mut s = gh.state();
        let main = s.branch_head("main").unwrap();
        s.git.set_ref("refs/tags/v1.0", &main, None).unwrap();
        s.sync_tags("maya");
        s.commit_files("clash", &[("status.txt", "theirs\n")], "Theirs", "maya");
        s.commit_files("main", &[("status.txt", "ours\n")], "Ours", "maya");
        s.commit_files("calm", &[("calm.txt", "calm\n")], "Calm", "maya");
        let calm = s.open_pull("calm", "main", "Calm", "", "maya");
        s.open_pull("clash", "main", "Clash", "", "maya");
        let labeled = json!({ "action": "labeled", "number": calm, "pull_request": s.pull_webhook_json(calm), "label": { "name": "x" } });
        s.deliver_webhook("pull_request", labeled, "maya");
    }
    runner.run_until_idle(20).await;
    let new: Vec<String> = ran(&runner)[mark..].to_vec();
    assert_eq!(
        new,
        [
            "tags.yml push",
            "ci.yml push",
            "ci.yml opened",
            "pr-default.yml opened",
            "after-ci.yml completed",
            "after-ci.yml completed"
        ],
        "{}",
        runner.summary()
    );
    assert!(
        runner.ignored.iter().any(|(_, why)| why == "pull_request: no commit to run on"),
        "the clash has no test merge: {:?}",
        runner.ignored
    );
}

// ---------------------------------------------------------------------------
// The shipped ward-pipeline.yml

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_pipeline_workflow_checks_every_pull_request_that_touches_the_pipeline() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], |c| c);
    let log = ours("precedents/log.yaml");
    let appended = format!(
        "{log}\n- id: P-0010\n  date: 2026-11-01\n  chief: maya\n  tags: [docs]\n  question: >-\n    May a fix skip the \
         changelog?\n  decision: >-\n    No; every fix names itself in the changelog.\n"
    );
    let edited = log.replacen("chief: mara-okafor", "chief: somebody-else", 1);
    assert_ne!(edited, log);
    let broken = ours(".github/ward.yml").replacen("mode: treat", "mode: treet", 1);
    assert_ne!(broken, ours(".github/ward.yml"));
    let role = format!("{}\nBe brief.\n", ours("roles/planner.md"));
    let mut runner = Runner::new(&gh);
    {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        s.commit_files("append", &[("precedents/log.yaml", &appended)], "P-0010: changelogs", "maya");
        s.open_pull("append", "main", "A precedent", "", "maya");
        s.commit_files("edit", &[("precedents/log.yaml", &edited)], "Rewrite history", "rob");
        s.open_pull("edit", "main", "An edit", "", "rob");
        s.commit_files("code", &[("src.txt", "code\n")], "Code", "rob");
        s.open_pull("code", "main", "Code only", "", "rob");
        s.commit_files("mode", &[(".github/ward.yml", &broken)], "Rename a mode", "rob");
        s.open_pull("mode", "main", "A typo in ward.yml", "", "rob");
        s.commit_files("role", &[("roles/planner.md", &role)], "A shorter planner", "rob");
        s.open_pull("role", "main", "Prompt change", "", "rob");
    }
    runner.run_until_idle(5).await;
    let runs = runner.runs_of("ward-pipeline.yml");
    assert_eq!(runs.len(), 4, "`paths:` skips the code-only pull request\n{}", runner.summary());
    let check = |i: usize| runs[i].job("check");
    assert_eq!(check(0).conclusion.as_deref(), Some("success"), "{}", check(0).log());
    assert_eq!(check(1).conclusion.as_deref(), Some("failure"), "{}", check(1).log());
    assert!(check(1).log().contains("P-0001"), "the edited entry is named: {}", check(1).log());
    assert_eq!(check(2).conclusion.as_deref(), Some("failure"), "{}", check(2).log());
    assert!(check(2).step("Check ward.yml, roles and skills").log.contains("treet"), "{}", check(2).log());
    assert_eq!(check(3).conclusion.as_deref(), Some("success"), "{}", check(3).log());
    assert!(check(3).log().contains("nothing to simulate"), "{}", check(3).log());
    // fetch-depth: 0 fetched the history the check compares against.
    assert!(
        check(0)
            .step("Check out the pull request with its history")
            .log
            .contains("+refs/heads/*:refs/remotes/origin/*")
    );
}

// ---------------------------------------------------------------------------
// Failures go where the hospital sends them; a chief's approval by label

/// CI that passes from the second treatment on (each treatment of the
/// stand-in adds a line to the change log).
const SECOND_TIME_CI: &str = r#"
name: ci
on:
  workflow_dispatch:
permissions: {}
jobs:
  test:
    name: changelog
    runs-on: ubuntu-24.04
    permissions:
      contents: read
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          persist-credentials: false
      - name: The change log names two treatments
        run: |
          test "$(grep -c 'Treated #' CHANGELOG.md)" -ge 2
"#;

/// ward.yml with the repository's CI named.
fn with_ci(c: String) -> String {
    c.replace("\nagent:\n", "\nci:\n  workflows: [ci.yml]\n\nagent:\n")
}

/// The prompt each run of `stage` gave its agent, in order.
fn prompts_of(runner: &Runner<'_>, n: u64, stage: &str) -> Vec<String> {
    let name = format!("ward-issue-{n}-{stage}-attempt-1");
    runner
        .runs_of("ward-stage.yml")
        .iter()
        .filter_map(|r| r.artifacts.get(&name))
        .flat_map(|dir| texts(dir).into_iter().filter(|(p, _)| p.ends_with("prompt.md")).map(|(_, t)| t))
        .collect()
}

/// Scenario (b) of issue 11: CI is red on the first treatment. The audit
/// sends the patient back to treatment (not to code review) with the
/// failing check named, and no nurse runs; the fellow's next prompt has
/// it. The second treatment is green; a person approves; it merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn red_ci_returns_the_patient_to_treatment_with_the_failing_check_named_and_green_ci_merges() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[(".github/workflows/ci.yml", SECOND_TIME_CI)], with_ci);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.at(90 * MINUTE, "a writer approves the pull request", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "rob", "APPROVE", "", &[]);
    });
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(40).await;

    assert_eq!(gh.state().labels_of(n), ["ward:discharged"], "{}", failures(&runner));
    let ci: Vec<Option<&str>> = runner.runs_of("ci.yml").iter().map(|r| r.conclusion.as_deref()).collect();
    assert_eq!(ci, [Some("failure"), Some("success")], "{}", runner.summary());
    // Back to treatment, with the check named: its name, conclusion and link.
    let audits = checklists(&gh, n);
    let red = &audits[0];
    assert!(red.contains("Back to treatment (`ward:treat`), not code review"), "{red}");
    assert!(red.contains("❌ CI green for the head commit: CI failed for"), "{red}");
    assert!(red.contains("`changelog` (failure)"), "{red}");
    let run_link = format!("/actions/runs/{}/job/", runner.runs_of("ci.yml")[0].id);
    assert!(red.contains("- `changelog`: failure (") && red.contains(&run_link), "{red}");
    // The nurse ran only at the end; treatment twice, the second prompt
    // carrying the failing check.
    assert_eq!(
        agent_stages(&gh, n),
        ["admit", "diagnose", "plan-review", "treat", "code-review", "treat", "code-review", "discharge"],
        "{}",
        runner.summary()
    );
    let prompts = prompts_of(&runner, n, "treat");
    assert_eq!(prompts.len(), 2);
    assert!(!prompts[0].contains("Failing checks"));
    assert!(prompts[1].contains("### Failing checks at") && prompts[1].contains(&run_link), "{}", prompts[1]);
    let pr = gh.state().pulls.values().find(|p| p.head == format!("ward/issue-{n}")).unwrap().clone();
    assert!(pr.merged);
}

/// Scenario (c) of issue 11: a person with write access requests changes.
/// The patient goes back to treatment and the fellow's next prompt carries
/// the review's text, fenced as that person's; after the new push the
/// patient waits for the reviewer to look again, and their approval merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_requested_by_a_writer_return_to_treatment_with_the_review_in_the_fellows_prompt() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[(".github/workflows/ci.yml", CHANGELOG_CI)], with_ci);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.at(30 * MINUTE, "a writer requests changes", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "rob", "REQUEST_CHANGES", "Please also refuse a password of only spaces.", &[]);
    });
    runner.at(120 * MINUTE, "the writer approves the new head", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "rob", "APPROVE", "", &[]);
    });
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(40).await;

    assert_eq!(gh.state().labels_of(n), ["ward:discharged"], "{}", failures(&runner));
    let audits = checklists(&gh, n);
    assert!(audits[0].contains("❌ Approving pull request review") && audits[0].contains("`rob` requested changes"));
    let prompts = prompts_of(&runner, n, "treat");
    assert_eq!(prompts.len(), 2, "{}", runner.summary());
    assert!(prompts[1].contains("### Changes requested by `rob`"), "{}", prompts[1]);
    assert!(prompts[1].contains("Please also refuse a password of only spaces."), "{}", prompts[1]);
    // After the new push: waiting for rob to look again, not sent back again.
    let waiting = notes_of(&gh, n, "WAITING");
    assert!(waiting.last().unwrap().contains("`rob` (at `"), "{waiting:#?}");
    assert!(waiting.last().unwrap().contains("requested changes on an older commit"), "{waiting:#?}");
    assert_eq!(agent_stages(&gh, n).iter().filter(|s| *s == "discharge").count(), 1);
}

/// Scenario (d) of issue 11: human approval mode. The audit passes and the
/// patient waits for a chief at `ward:awaiting-chief`; a triager's
/// `ward:approved` is refused with a comment and taken off; a maintainer's
/// is the approval, and the engine merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_approval_waits_for_a_maintainers_label_and_refuses_a_triagers() {
    let gh = FakeGitHub::start().await;
    let config = |c: String| with_ci(c).replace("human_approval: false", "human_approval: true");
    let _repo = hospital(&gh, &[(".github/workflows/ci.yml", CHANGELOG_CI)], config);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        s.add_collaborator("tia", "triage");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.at(30 * MINUTE, "a writer approves the pull request", move |s| {
        let pr = s.open_pull_for(&format!("ward/issue-{n}")).expect("the treatment's pull request").number;
        s.review(pr, "rob", "APPROVE", "", &[]);
    });
    runner.at(60 * MINUTE, "a triager applies ward:approved", move |s| s.label(n, "ward:approved", "tia"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let at_80 = seen.clone();
    runner.at(80 * MINUTE, "look", move |s| at_80.lock().unwrap().push(s.labels_of(n)));
    runner.at(90 * MINUTE, "a maintainer applies ward:approved", move |s| s.label(n, "ward:approved", "maya"));
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(40).await;

    // Before the maintainer: waiting for a chief, the triager's label gone.
    assert_eq!(*seen.lock().unwrap(), [vec!["ward:awaiting-chief".to_string()]], "{}", runner.summary());
    let comments = gh.state().comments_on(n);
    assert!(
        comments.iter().any(|c| c.contains("@tia has `triage` access") && c.contains("took the label off")),
        "{comments:#?}"
    );
    // The maintainer's label merged it.
    assert_eq!(gh.state().labels_of(n), ["ward:discharged"], "{}", failures(&runner));
    let pr = gh.state().pulls.values().find(|p| p.head == format!("ward/issue-{n}")).unwrap().clone();
    assert!(pr.merged);
    let chart = gh.state().file("ward-charts", &format!("charts/{n}.md")).unwrap();
    assert!(chart.contains("`maya` (maintain permission) applied `ward:approved`"), "{chart}");
}

// ---------------------------------------------------------------------------
// Hostile agents through the visit and record jobs (issue 10)

/// A repository whose agent is `tests/hostile/<script>` with `args`, for
/// the shipped workflow (or `workflow`, a changed copy of it).
/// `script`'s only argument is its loot file, whose folder ward.yml makes
/// writable behind the walls (`agent.writable`).
fn hostile_hospital(gh: &FakeGitHub, script: &str, loot: &Path) -> tempfile::TempDir {
    let folder = loot.parent().expect("the loot file is in a folder");
    let writable = format!("\n  writable: [\"{}\"]", folder.display());
    hostile_hospital_with(gh, script, &format!("\"{}\"", loot.display()), None, &writable)
}

/// The same, with more of the `agent:` section (`agent_extra`, lines
/// indented as its fields are).
fn hostile_hospital_with(
    gh: &FakeGitHub,
    script: &str,
    args: &str,
    workflow: Option<String>,
    agent_extra: &str,
) -> tempfile::TempDir {
    let agent = r#"command: ["{ward}", "stand-in"]"#;
    let mut files = vec![
        (format!("hostile/{script}"), ours(&format!("tests/hostile/{script}"))),
        ("hostile/common.sh".to_string(), ours("tests/hostile/common.sh")),
    ];
    if let Some(w) = workflow {
        files.push((".github/workflows/ward-stage.yml".into(), w));
    }
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    hospital(gh, &refs, |c| {
        assert!(c.contains(agent));
        c.replace(agent, &format!(r#"command: ["sh", "hostile/{script}", "{{ward}}", {args}]{agent_extra}"#))
    })
}

/// An agent that holds the visit job's own token (leaked to it here by a
/// step of the job, as the runner's Docker socket could) still writes
/// nothing: the label and the push it tries are refused (403), because the
/// job that runs the agent has read permissions only. The record job, which
/// holds the write token, runs no agent, and the patient moves as usual.
/// The agent runs unwalled here (`agent.network: open`): behind the walls
/// it reaches no GitHub at all, and this proves the layer under them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_the_visit_jobs_token_can_write_nothing() {
    let gh = FakeGitHub::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let (leak, loot) = (scratch.path().join("leak"), scratch.path().join("loot.txt"));
    let shipped = ours(".github/workflows/ward-stage.yml");
    let run_agent = "      - name: Run the agent\n";
    assert!(shipped.contains(run_agent));
    let leaking = format!(
        "      - name: Leak the job's token to the agent\n        env:\n          T: ${{{{ github.token }}}}\n        \
         run: printf '%s %s %s\\n' \"$T\" \"$GITHUB_API_URL\" \"$GITHUB_SERVER_URL/$GITHUB_REPOSITORY.git\" > {}\n\n{run_agent}",
        leak.display()
    );
    let workflow = shipped.replacen(run_agent, &leaking, 1);
    let args = format!("\"{}\", \"{}\"", loot.display(), leak.display());
    let _repo = hostile_hospital_with(&gh, "steal.sh", &args, Some(workflow), "\n  network: open");
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until(5, |s| !s.labels_of(n).contains(&"ward:admit".to_string())).await;

    let loot = std::fs::read_to_string(&loot).unwrap_or_default();
    assert!(loot.lines().next().is_some_and(|l| l.starts_with("token ") && l != "token 0 characters"), "{loot}");
    assert!(loot.contains("label 403"), "the label write was refused: {loot}\n{}", failures(&runner));
    assert!(loot.contains("push refused"), "{loot}");
    let s = gh.state();
    assert!(!s.labels_of(n).contains(&"stolen".to_string()));
    assert_eq!(s.branch_head("stolen"), None);
    let refused = s.git_log.iter().filter(|g| g.path.contains("git-receive-pack") && g.status == 403).count();
    assert!(refused >= 1, "the fake refused the push: {:?}", s.git_log);
    // The run itself went on: admitted, moved to diagnosis by the record job.
    assert_eq!(s.labels_of(n), ["ward:diagnose"], "{}", failures(&runner));
    drop(s);
    let run = runner.runs_of("ward-stage.yml")[0];
    assert_stage_permissions(run);
}

/// A child the agent daemonised (its own session, out of the agent's
/// process group) outlives the agent and keeps rewriting the sealed visit
/// and the notes. ward is the subreaper of its agent: it kills the child
/// when the agent ends, before it reads and seals anything, so the visit
/// the record job takes is the agent's own and the patient moves as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonised_child_that_rewrites_the_visit_is_killed_before_the_seal() {
    let gh = FakeGitHub::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let loot = scratch.path().join("loot.txt");
    let _repo = hostile_hospital(&gh, "daemon.sh", &loot);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until(5, |s| !s.labels_of(n).contains(&"ward:admit".to_string())).await;
    // Long enough for a surviving daemon to say so.
    std::thread::sleep(Duration::from_secs(4));

    let loot = std::fs::read_to_string(&loot).unwrap_or_default();
    assert!(loot.contains("seals into /"), "the agent found where ward seals: {loot}");
    let daemon: i32 = loot
        .lines()
        .find_map(|l| l.strip_prefix("daemon ")?.parse().ok())
        .unwrap_or_else(|| panic!("the daemon started: {loot}"));
    assert!(!loot.contains("daemon survived"), "{loot}");
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    assert_ne!(unsafe { libc::kill(daemon, 0) }, 0, "the daemon {daemon} is gone");
    let run = runner.runs_of("ward-stage.yml")[0];
    let notes = std::fs::read_to_string(run.artifacts["ward-visit"].join("notes.md")).unwrap();
    assert!(!notes.contains("FORGED"), "{notes}");
    assert_eq!(gh.state().labels_of(n), ["ward:diagnose"], "{}", failures(&runner));
    assert!(notes_of(&gh, n, "TRIAGE").iter().all(|t| !t.contains("FORGED")));
}

/// The patient moves while its agent runs (a maintainer takes the label
/// off): the record job reads the patient again, finds the label the visit
/// was for gone, and drops the visit with one line; nothing is written,
/// not even the admission's notes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_whose_label_moved_meanwhile_is_dropped_and_nothing_is_written() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], |c| c);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.job_takes("ward-stage.yml", "visit", 5 * MINUTE);
    gh.state().label(n, "ward:admit", "maya");
    runner.at(2 * MINUTE, "the maintainer takes the patient off", move |s| s.unlabel(n, "ward:admit", "maya"));
    runner.run_until_idle(5).await;

    let run = runner.runs_of("ward-stage.yml")[0];
    assert_eq!(run.conclusion.as_deref(), Some("success"), "{}", failures(&runner));
    let visit = &run.artifacts["ward-visit"];
    assert!(visit.join("visit.json").is_file() && visit.join("notes.md").is_file(), "the agent ran");
    let record = run.job("record").step("stage").log.clone();
    assert!(record.contains(&format!("nothing to do: issue #{n} no longer carries `ward:admit`")), "{record}");
    assert_eq!(gh.state().labels_of(n), Vec::<String>::new());
    let chart = gh.state().file("ward-charts", &format!("charts/{n}.md"));
    assert_eq!(chart, None, "no note was written: {}", failures(&runner));
}

/// A treatment that leaves a file over the limit of a visit's commits: the
/// visit job bundles it as it bundles anything; the record job refuses the
/// bundle with a sentence (an invalid run: a REFUSAL, the label stays) and
/// pushes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_whose_commits_carry_a_huge_file_is_refused_and_nothing_is_pushed() {
    let gh = FakeGitHub::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let loot = scratch.path().join("loot.txt");
    let _repo = hostile_hospital(&gh, "huge.sh", &loot);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(10).await;

    assert!(std::fs::read_to_string(&loot).unwrap_or_default().contains("left huge.bin"));
    assert_eq!(gh.state().labels_of(n), ["ward:treat"], "{}", failures(&runner));
    let treat = runner.runs_of("ward-stage.yml").last().copied().unwrap();
    assert!(treat.artifacts["ward-visit"].join("visit.bundle").is_file(), "the visit job bundled it");
    assert_eq!(treat.job("record").conclusion.as_deref(), Some("failure"), "an invalid run");
    let refusal = notes_of(&gh, n, "REFUSAL").pop().unwrap_or_default();
    assert!(
        refusal.contains("the sealed visit was refused")
            && refusal.contains("`huge.bin`")
            && refusal.contains("over the limit"),
        "{refusal}"
    );
    assert_eq!(gh.state().branch_head(&format!("ward/issue-{n}")), None, "nothing was pushed");
}

/// An agent that commits everything in the visit job's checkout, ward's own
/// files included (its stage lock under `.ward/`, in a repository whose
/// `.gitignore` does not ignore it: installed by hand): `git add -A` leaves
/// them out (ward excluded them before the agent ran); forced in, the record
/// job refuses the visit, naming them, and pushes nothing. Before, the next
/// stage's checkout of such a branch failed ("Please move or remove them").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_whose_commits_carry_wards_own_files_is_refused_naming_them_and_nothing_is_pushed() {
    let gh = FakeGitHub::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let loot = scratch.path().join("loot.txt");
    let _repo = hostile_hospital(&gh, "wardfiles.sh", &loot);
    {
        let mut s = gh.state();
        // As installed by hand: the build's target/ ignored, ward's .ward/ not.
        s.put_file("main", ".gitignore", "/target\n");
        s.add_collaborator("maya", "maintain");
    }
    let n =
        gh.state().add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[]);
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(10).await;

    let loot = std::fs::read_to_string(&loot).unwrap_or_default();
    assert!(loot.contains("git add -A left .ward out"), "ward's files were not excluded: {loot}");
    assert!(loot.contains("committed .ward/"), "the attack did not run: {loot}");
    assert_eq!(gh.state().labels_of(n), ["ward:treat"], "{}", failures(&runner));
    let records: Vec<Option<&str>> =
        runner.runs_of("ward-stage.yml").iter().map(|r| r.job("record").conclusion.as_deref()).collect();
    assert!(records.contains(&Some("failure")), "an invalid run: {records:?}\n{}", failures(&runner));
    let refusal = notes_of(&gh, n, "REFUSAL").pop().unwrap_or_default();
    assert!(
        refusal.contains("this run's commits hold ward's own")
            && refusal.contains(&format!("`.ward/locks/stage-{n}.lock`")),
        "{refusal}"
    );
    assert_eq!(gh.state().branch_head(&format!("ward/issue-{n}")), None, "nothing was pushed");
}

// Commands in comments (issue 11, scenario (f))

/// How many agent runs the chart of `n` records (an ADMISSION note each).
fn agent_runs_in(s: &State, n: u64) -> usize {
    s.file("ward-charts", &format!("charts/{n}.md")).unwrap_or_default().matches("<!-- WARD:ADMISSION ").count()
}

/// The patient's comments on `n` (ward's, edited in place).
fn patient_comments(gh: &FakeGitHub, n: u64) -> Vec<String> {
    gh.state().comments_on(n).into_iter().filter(|c| c.starts_with(ward::patient_comment::HEADING)).collect()
}

/// Scenario (f) of issue 11: `/ward hold`, `/ward resume` and `/ward
/// retry` through the shipped ward-commands.yml. A writer's hold, given
/// while a stage runs, holds: the stage's move waits at `ward:hold` and no
/// agent runs until the writer's resume, which puts the patient back and
/// starts its stage. A reader's commands get a confused reaction and change
/// nothing. A writer's retry runs the waiting patient's audit again. Each
/// answer is on the patient's one comment, edited in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_from_a_writer_hold_resume_and_retry_and_from_a_reader_do_nothing() {
    let gh = FakeGitHub::start().await;
    // The last matching pattern wins: the change log is maya's (the
    // workflow's bot, the pull request's author, is never asked).
    let owners = "*            @rob\nCHANGELOG.md @maya @github-actions[bot]\n";
    let _repo = hospital(&gh, &[(".github/CODEOWNERS", owners)], |c| c);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        s.add_collaborator("rita", "read");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    runner.job_takes("ward-stage.yml", "visit", 5 * MINUTE);
    let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for (at, who, text) in
        [(7, "rita", "/ward hold"), (8, "rob", "Holding this.\n/ward hold\n/ward resume"), (70, "rita", "/ward resume")]
    {
        let ids = ids.clone();
        runner
            .at(at * MINUTE, &format!("{who} says {text}"), move |s| ids.lock().unwrap().push(s.comment(n, text, who)));
    }
    for at in [30, 69] {
        let seen = seen.clone();
        runner.at(at * MINUTE, "look", move |s| seen.lock().unwrap().push((s.labels_of(n), agent_runs_in(s, n))));
    }
    let resume = ids.clone();
    runner.at(75 * MINUTE, "rob says /ward resume", move |s| {
        resume.lock().unwrap().push(s.comment(n, "/ward resume", "rob"))
    });
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(40).await;

    let ids = ids.lock().unwrap().clone();
    let (rita_hold, rob_hold, rita_resume, rob_resume) = (ids[0], ids[1], ids[2], ids[3]);
    let reaction = |id: u64| gh.state().reactions_on(id);
    let confused = vec![(ACTIONS_BOT.to_string(), "confused".to_string())];
    let done = vec![(ACTIONS_BOT.to_string(), "+1".to_string())];
    assert_eq!(reaction(rita_hold), confused, "{}", runner.summary());
    assert_eq!(reaction(rita_resume), confused);
    assert_eq!(reaction(rob_hold), done, "{}", runner.summary());
    assert_eq!(reaction(rob_resume), done);

    // Held from minute 8 to 75: at 30 and at 69 the patient is at
    // `ward:hold` and no agent ran in between; the reader's resume at 70
    // changed nothing.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, ["ward:hold"], "{}", runner.summary());
    assert_eq!(seen[0], seen[1], "nothing moved while held");
    let held_runs = seen[0].1;
    assert!((1..=3).contains(&held_runs), "held early in the pipeline: {held_runs}");

    // Resumed, the patient went on to rest where an uninterrupted run does.
    assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"], "{}", failures(&runner));
    assert_eq!(agent_stages(&gh, n), ["admit", "diagnose", "plan-review", "treat", "code-review"]);
    let commands = notes_of(&gh, n, "COMMAND");
    assert!(commands.iter().any(|c| c.contains("`rob` (write permission) said `/ward hold`")), "{commands:#?}");
    assert!(commands.iter().any(|c| c.contains("said `/ward resume`") && c.contains("Hold: none")), "{commands:#?}");
    assert!(!commands.iter().any(|c| c.contains("rita")), "a reader's command writes nothing: {commands:#?}");

    // Every command ran the shipped workflow with its permissions; the
    // engine's own comments (the patient's) started none.
    let command_runs = runner.runs_of("ward-commands.yml");
    assert_eq!(command_runs.len(), 4, "{}", runner.summary());
    for run in &command_runs {
        assert_eq!(run.conclusion.as_deref(), Some("success"), "{}", run.job("command").log());
        let p = &run.job("command").permissions;
        assert_eq!(
            ["contents", "issues", "pull-requests", "checks", "statuses", "actions"].map(|scope| p.level(scope)),
            [Level::Write, Level::Write, Level::Write, Level::Read, Level::Read, Level::None]
        );
        assert_eq!(run.job("command").group.as_deref(), Some(format!("ward-command-{n}").as_str()));
    }

    // A reader's retry: confused. A writer's retry of the waiting patient:
    // its audit runs again (a dispatch of `ward:awaiting-review`).
    let before = stage_labels(&runner).len();
    let mark = gh.state().log.len();
    let rita_retry = gh.state().comment(n, "/ward retry", "rita");
    runner.run_until_idle(5).await;
    assert_eq!(reaction(rita_retry), confused);
    // A reader's command costs two calls: her permission, the reaction.
    let calls: Vec<String> = gh.state().log[mark..].iter().map(|e| e.key()).collect();
    assert_eq!(
        calls,
        [
            "GET /repos/{owner}/{repo}/collaborators/{username}/permission",
            "POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"
        ],
        "{}",
        runner.summary()
    );
    assert_eq!(stage_labels(&runner).len(), before, "a reader's retry starts nothing");
    let rob_retry = gh.state().comment(n, "/ward retry", "rob");
    runner.run_until_idle(5).await;
    assert_eq!(reaction(rob_retry), done, "{}", runner.summary());
    assert_eq!(stage_labels(&runner)[before..], ["ward:awaiting-review"], "{}", runner.summary());
    assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"]);

    // One patient's comment, edited in place: where it is, what it waits
    // for, and the last command's answer.
    let comments = patient_comments(&gh, n);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let c = &comments[0];
    assert!(c.contains("| Where | `ward:awaiting-review` |"), "{c}");
    assert!(c.contains("| Waiting for |") && c.contains("⬜"), "{c}");
    assert!(c.contains("**Last command:** `/ward retry` by `rob`: the discharge audit runs again."), "{c}");
    assert!(c.contains(&format!("/blob/ward-charts/charts/{n}.md")), "{c}");

    // The treatment's pull request carries the approved plan's summary,
    // fenced as an agent's text, and where the reviews are.
    let pr = gh.state().open_pull_for(&format!("ward/issue-{n}")).unwrap().body.clone();
    let plan = notes_of(&gh, n, "TREATMENT_PLAN");
    let first_line = plan[0].lines().nth(1).unwrap().trim();
    assert!(pr.starts_with(&format!("Closes #{n}.")), "{pr}");
    assert!(pr.contains("### The approved plan (TREATMENT_PLAN, run `"), "{pr}");
    assert!(pr.contains(&format!("```text\n{first_line}")), "{first_line}\n{pr}");
    assert!(pr.contains("Approved by the plan review of run `"), "{pr}");
    assert!(pr.contains(&format!("/blob/ward-charts/charts/{n}.md)")), "{pr}");
    let number = gh.state().open_pull_for(&format!("ward/issue-{n}")).unwrap().number;
    assert_eq!(gh.state().review_requests, [(number, "maya".to_string())], "CODEOWNERS of the changed file");
}

// Emulator checkpoints between GitHub's jobs (issue 14)

/// The docstore emulator on the stages that treat and review, as a stage's
/// own `emulator:` (its built-in checkpoint commands: it is the test image).
fn with_docstore(c: String) -> String {
    let emulator = format!(
        "    emulator: {{ image: \"{}\", ports: [8081, 8082], ready: {{ http: {{ port: 8082, path: /ready }}, \
         time_limit: 10s }}, expose: {{ DOCSTORE_ENDPOINT: \"http://127.0.0.1:{{{{ ports[8081] }}}}\" }} }}\n",
        support::workspace::docstore_image()
    );
    let mut c = c;
    for label in ["ward:treat", "ward:code-review"] {
        let at = format!("    label: {label}\n");
        assert!(c.contains(&at), "{at}");
        c = c.replacen(&at, &format!("{at}{emulator}"), 1);
    }
    c
}

/// The patient's shared checkpoint ref on the fake's repository.
fn checkpoint_ref(gh: &FakeGitHub, n: u64) -> Option<String> {
    gh.state().git.resolve(&format!("refs/ward/checkpoints/issue-{n}"))
}

/// Data a treatment wrote in the visit job of one workflow run is in code
/// review's emulator in the next run (another job, another ward home): the
/// treatment's visit seals the export with its commits, the record job
/// checks it and pushes `refs/ward/checkpoints/issue-N`, code review's
/// visit job fetches it with its read-only token and starts from it, and
/// the reviewer's prompt shows it as the data diff against the seed. A
/// consult's `restart` then drops it: the next treatment starts from the
/// seed, and its record job deletes the ref.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_treatments_data_reaches_code_review_across_githubs_jobs_and_a_restart_returns_to_the_seed() {
    let gh = FakeGitHub::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let seen = scratch.path();
    let docstore = support::workspace::docstore_bin().display().to_string();
    let consult = seen.join("consult.yaml");
    std::fs::write(
        &consult,
        "outcome: restart\nnotes:\n  - kind: IPASS_READBACK\n    body: |\n      ## Illness severity\n      Stable.\n\n      \
         ## Patient summary\n      The branch went wrong.\n\n      ## Action list\n      Start again from the base.\n\n      \
         ## Situation awareness and contingency\n      If it fails again, replan.\n\n      ## Synthesis by receiver\n      \
         Restart.\n\n      ## What I will do\n      Restart the treatment from the base.\n",
    )
    .unwrap();
    // The first treatment writes a document; every stage with the emulator
    // says what it finds; the consult restarts.
    let agent = format!(
        r#"ward="$1"
seen="{seen}"
n=$(ls "$seen" | grep -c "^$WARD_STAGE-" || true)
case "$WARD_STAGE" in
  treat)
    {docstore} get fleet vehicles fleet-1 SEA > "$seen/$WARD_STAGE-$n.doc" 2>&1; echo "exit $?" >> "$seen/$WARD_STAGE-$n.doc"
    [ "$n" = 0 ] && {docstore} put fleet vehicles fleet-1 SEA '{{"id":"fleet-1","by":"treatment"}}' >/dev/null ;;
  code-review)
    {docstore} get fleet vehicles fleet-1 SEA > "$seen/$WARD_STAGE-$n.doc" 2>&1; echo "exit $?" >> "$seen/$WARD_STAGE-$n.doc" ;;
  consult)
    exec "$ward" stand-in --script {consult} ;;
esac
exec "$ward" stand-in
"#,
        seen = seen.display(),
        consult = consult.display()
    );
    let command = r#"command: ["{ward}", "stand-in"]"#;
    let _repo = hospital(&gh, &[("agent.sh", &agent)], |c| {
        assert!(c.contains(command));
        // The agent writes what it saw beside the test: writable behind the walls.
        let writable = format!("command: [\"sh\", \"agent.sh\", \"{{ward}}\"]\n  writable: [\"{}\"]", seen.display());
        with_docstore(c.replace(command, &writable))
    });
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(30).await;
    assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"], "{}", failures(&runner));

    // The treatment's visit sealed its data with its commits; the record job shared it.
    let runs = runner.runs_of("ward-stage.yml");
    // A run's stage, from its record job's artifacts; its visit job's own beside them.
    let of = |stage: &str| {
        let name = format!("ward-issue-{n}-{stage}-attempt-1");
        let visit_job = |r: &&support::actions::WorkflowRun| {
            r.artifacts.iter().find(|(k, _)| k.ends_with("-visit-attempt-1")).map(|(_, dir)| dir.clone())
        };
        runs.iter()
            .filter(|r| r.artifacts.contains_key(&name))
            .filter_map(|r| Some((r.artifacts["ward-visit"].clone(), visit_job(r)?)))
            .collect::<Vec<_>>()
    };
    let (visit, _) = of("treat").remove(0);
    assert!(visit.join("checkpoint.data").is_file() && visit.join("seed.json").is_file(), "sealed with the visit");
    let head = gh.state().branch_head(&format!("ward/issue-{n}")).unwrap();
    let shared = checkpoint_ref(&gh, n).expect("the record job pushed the patient's checkpoint ref");
    let marker: Value = serde_json::from_str(&gh.state().file(&shared, "checkpoint.json").unwrap()).unwrap();
    assert_eq!(marker["commit"], json!(head), "the data of the head the record job pushed");
    assert!(gh.state().file(&shared, "checkpoint.data").unwrap().contains("\"by\":\"treatment\""));

    // Code review ran in the next workflow run: its emulator had the data,
    // and its prompt the diff against the seed.
    let read = |name: &str| std::fs::read_to_string(seen.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!read("treat-0.doc").contains("exit 0"), "the seed has no such document: {}", read("treat-0.doc"));
    assert!(read("code-review-0.doc").contains("\"by\":\"treatment\""), "{}", read("code-review-0.doc"));
    let (_, review) = of("code-review").remove(0);
    let find = |dir: &Path, file: &str| texts(dir).into_iter().find(|(p, _)| p.ends_with(file)).unwrap().1;
    let report: Value = serde_json::from_str(&find(&review, "report.json")).unwrap();
    assert_eq!(report["data"]["shared"], json!(head), "{report}");
    let prompt = find(&review, "prompt.md");
    let section = prompt.split("## What the change did to the data").nth(1).expect("the data diff section");
    assert!(section.contains("0 lines are gone (`-`) and 1 are new (`+`)"), "{section}");
    assert!(section.contains("+ fleet\tvehicles\tfleet-1\tSEA\t"), "{section}");

    // A consult restarts: the next treatment's emulator is the seed's, and
    // its record job deleted the ref (that treatment wrote no data).
    // (Moved there as the engine moves a patient: labels with the job's
    // token, which start nothing, then its dispatch.)
    {
        let mut s = gh.state();
        s.apply_labels(n, &["ward:consult".to_string()], ACTIONS_BOT);
        s.repository_dispatch("ward-stage", json!({"issue": n, "label": "ward:consult"}), ACTIONS_BOT);
    }
    runner.run_until_idle(30).await;
    assert_eq!(agent_stages(&gh, n).iter().filter(|s| *s == "treat").count(), 2, "{}", failures(&runner));
    assert!(!read("treat-1.doc").contains("exit 0"), "the seed's data: {}", read("treat-1.doc"));
    assert_eq!(checkpoint_ref(&gh, n), None, "the restart dropped the shared checkpoint");
    assert!(!read("code-review-1.doc").contains("exit 0"), "{}", read("code-review-1.doc"));
}

/// The resolving stage on GitHub's two jobs: the base moved on after the
/// treatment, the fellow (the stand-in) rebases the branch onto it in the
/// visit job, and the record job takes the rewritten history in (it
/// descends from the base's tip as the record job fetched it), pushes it
/// forced with a lease, and the patient goes to code review with the
/// rebased head as its pull request's head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolving_stages_rebase_is_recorded_through_the_record_job() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], |c| c);
    let n = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };
    let mut runner = Runner::new(&gh);
    gh.state().label(n, "ward:admit", "maya");
    runner.run_until_idle(30).await;
    assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"], "{}", failures(&runner));
    let branch = format!("ward/issue-{n}");
    let treated = gh.state().branch_head(&branch).unwrap();

    // Another patient's merge moves the base on; the patient is moved to
    // the resolving stage as the engine moves one (its token's labels,
    // then its dispatch).
    {
        let mut s = gh.state();
        let at = s.time().timestamp();
        s.git
            .write_file("main", "NEWS.md", b"Another patient's change.\n", "Merge another patient", "maya", at, None)
            .unwrap();
        s.apply_labels(n, &["ward:resolve".to_string()], ACTIONS_BOT);
        s.repository_dispatch("ward-stage", json!({"issue": n, "label": "ward:resolve"}), ACTIONS_BOT);
    }
    let main = gh.state().branch_head("main").unwrap();
    runner.run_until_idle(30).await;

    let refusals = notes_of(&gh, n, "REFUSAL");
    assert!(refusals.is_empty(), "{refusals:?}\n{}", failures(&runner));
    let s = gh.state();
    let head = s.branch_head(&branch).unwrap();
    assert!(s.git.is_ancestor(&main, &head), "rebased onto the base's tip");
    assert!(!s.git.is_ancestor(&treated, &head), "the history was rewritten, and the push forced");
    assert!(s.file(&head, "CHANGELOG.md").unwrap().contains(&format!("Treated #{n}")), "the treatment kept");
    assert_eq!(s.open_pull_for(&branch).unwrap().head_sha, head);
    assert_eq!(s.labels_of(n), ["ward:awaiting-review"], "resolved, reviewed, waiting for CI and a person");
    drop(s);
    assert_eq!(agent_stages(&gh, n).iter().filter(|s| *s == "resolve").count(), 1);
}

// ---------------------------------------------------------------------------
// The agent cap in the two-job workflow (issue 14)

/// ward.yml with one agent slot (`capacity.max_concurrent: 1`) and its queued label.
fn one_agent_slot(config: String) -> String {
    let queued = "  ward:queued:         { color: \"ededed\", description: \"Waiting for an agent slot\" }\n";
    let capped = config.replacen("  ward:lockdown:", &format!("{queued}  ward:lockdown:"), 1).replacen(
        "\ndecomposition:\n",
        "\ncapacity:\n  max_concurrent: 1\n\ndecomposition:\n",
        1,
    );
    assert!(capped.contains("max_concurrent: 1") && capped.contains("ward:queued:"), "ward.yml changed its shape");
    capped
}

/// The sweep's state on the charts branch (`charts/0.md`), as JSON (null when never written).
fn sweep_state(gh: &FakeGitHub) -> Value {
    let Some(text) = gh.state().file("ward-charts", "charts/0.md") else { return Value::Null };
    let json = text.split("```json\n").nth(1).and_then(|t| t.split("\n```").next()).expect("a ```json block");
    serde_json::from_str(json).unwrap()
}

/// The stage runs of issue `n`, oldest first (by the issue its event names).
fn runs_for<'r>(runner: &'r Runner<'_>, n: u64) -> Vec<&'r support::actions::WorkflowRun> {
    runner
        .runs_of("ward-stage.yml")
        .into_iter()
        .filter(|r| r.payload["issue"]["number"].as_u64().or(r.payload["client_payload"]["issue"].as_u64()) == Some(n))
        .collect()
}

/// (issue, simulated start, simulated end) of every visit job that ran an
/// agent (its sealed visit holds `visit.json`). The runner runs a job's
/// steps when it starts and holds the job for its simulated duration, so
/// that interval is when its agent ran, as far as GitHub could tell.
fn agent_visits(runner: &Runner<'_>) -> Vec<(u64, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> {
    let mut out = Vec::new();
    for run in runner.runs_of("ward-stage.yml") {
        let visit = run.job("visit");
        if !run.artifacts.get("ward-visit").is_some_and(|dir| dir.join("visit.json").is_file()) {
            continue;
        }
        let issue = run.payload["issue"]["number"].as_u64().or(run.payload["client_payload"]["issue"].as_u64());
        out.push((issue.unwrap(), visit.started_at.unwrap(), visit.completed_at.unwrap()));
    }
    out
}

/// Whether any two of `visits` were in progress at the same simulated time.
fn overlapping(visits: &[(u64, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)]) -> Option<String> {
    for (i, a) in visits.iter().enumerate() {
        for b in &visits[i + 1..] {
            if a.1 < b.2 && b.1 < a.2 {
                return Some(format!("#{} {}..{} and #{} {}..{}", a.0, a.1, a.2, b.0, b.1, b.2));
            }
        }
    }
    None
}

/// When `label` was put on and taken off issue `n` (the first time each).
fn label_span(gh: &FakeGitHub, n: u64, label: &str) -> (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) {
    let s = gh.state();
    let at = |labeled: bool| {
        let e = s.label_events.iter().find(|e| e.issue == n && e.label == label && e.labeled == labeled);
        let e = e.unwrap_or_else(|| panic!("#{n} was never {} `{label}`", if labeled { "given" } else { "rid of" }));
        chrono::DateTime::parse_from_rfc3339(&e.at).unwrap().with_timezone(&chrono::Utc)
    };
    (at(true), at(false))
}

/// The shipped ward-stage.yml with `capacity.max_concurrent: 1`: two
/// patients admitted at the same moment. The first run's slot job takes
/// the one agent slot; the second's finds it taken and moves its patient
/// to `ward:queued` with a WAITING note, and its visit, record and release
/// jobs are skipped. The second waits there while the first's agent runs;
/// the first's record job frees the slot and puts the second back at
/// `ward:admit` (dispatched), and both go through every stage to rest
/// (waiting for CI and a review, as without a cap). Each visit job was
/// ten simulated minutes: no two visit jobs that ran an agent were in
/// progress at once, and no slot is held at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_agent_slot_two_admissions_take_turns_and_no_two_visit_jobs_run_agents_together() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], one_agent_slot);
    let (first, second) = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        let first = s.add_issue("Login accepts an empty password", "Submit it empty.", "reporter", &[]);
        (first, s.add_issue("Logout keeps the session", "Log out, go back: still in.", "reporter", &[]))
    };
    let mut runner = Runner::new(&gh);
    runner.job_takes("ward-stage.yml", "slot", MINUTE);
    runner.job_takes("ward-stage.yml", "visit", 10 * MINUTE);
    runner.job_takes("ward-stage.yml", "release", MINUTE);
    {
        let mut s = gh.state();
        s.label(first, "ward:admit", "maya");
        s.label(second, "ward:admit", "maya");
    }
    runner.run_until_idle(60).await;

    let stages = ["admit", "diagnose", "plan-review", "treat", "code-review"];
    for n in [first, second] {
        assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"], "#{n}:\n{}", failures(&runner));
        assert_eq!(agent_stages(&gh, n), stages, "#{n}:\n{}", failures(&runner));
    }
    let stage_runs = runner.runs_of("ward-stage.yml");
    assert!(stage_runs.iter().all(|r| r.conclusion.as_deref() == Some("success")), "{}", failures(&runner));

    // The second's admission found the slot taken: queued, no visit.
    let queued = runs_for(&runner, second)[0];
    let slot = queued.job("slot");
    assert_eq!((slot.outputs["visit"].as_str(), slot.outputs["slot"].as_str()), ("false", ""), "{}", slot.log());
    for job in ["visit", "record", "release"] {
        assert_eq!(queued.job(job).conclusion.as_deref(), Some("skipped"), "{job}: {}", runner.summary());
    }
    let waiting = notes_of(&gh, second, "WAITING").join("\n");
    assert!(waiting.contains("Queued at `ward:queued` before stage `admit`: 1 agents run now"), "{waiting}");
    assert!(waiting.contains("An agent slot is free: the patient leaves `ward:queued` for `ward:admit`"), "{waiting}");

    // It waited at `ward:queued` all the while the first's triage agent
    // ran, and left when the first's record job freed the slot.
    let admitted = runs_for(&runner, first)[0];
    let (visit, record) = (admitted.job("visit"), admitted.job("record"));
    let (since, until) = label_span(&gh, second, "ward:queued");
    assert!(since <= visit.started_at.unwrap() && visit.completed_at.unwrap() <= until, "{:?}", runner.timeline);
    assert!(record.started_at.unwrap() <= until && until <= record.completed_at.unwrap(), "{:?}", runner.timeline);
    assert!(record.log().contains(&format!("{second} leaves the queue")), "{}", record.log());

    // Ten agent visits, never two at once, each under the slot its run took.
    let visits = agent_visits(&runner);
    assert_eq!(visits.len(), 2 * stages.len(), "{}", runner.summary());
    assert_eq!(overlapping(&visits), None, "two visit jobs ran agents at once:\n{:?}", runner.timeline);
    for run in &stage_runs {
        let took = &run.job("slot").outputs["slot"];
        if run.job("visit").conclusion.as_deref() == Some("success") && run.job("record").conclusion.is_some() {
            let record = run.job("record");
            if record.conclusion.as_deref() != Some("skipped") && !took.is_empty() {
                assert_eq!(record.outputs["freed"], "true", "{}", record.log());
                assert_eq!(run.job("release").conclusion.as_deref(), Some("skipped"), "the record freed it");
            }
        }
    }
    // Nothing held, nobody waiting.
    let state = sweep_state(&gh);
    assert!(state["capacity"].is_null(), "no slot or queue is left: {state}");
}

/// A visit job that dies after its agent ran (`WARD_FAULT=after-treat`:
/// ward exits at once, as a killed runner would) with one agent slot: its
/// record job is skipped, and the release job (`if: always()`) frees the
/// slot and starts the patient queued meanwhile, whose own failed visit's
/// release frees the slot again. No slot is held at the end, and nobody
/// is left queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visit_job_that_fails_frees_its_agent_slot_and_starts_the_queued_patient() {
    let gh = FakeGitHub::start().await;
    // The fault, for the visit job only (a job-level `env:`).
    let stage = ours(".github/workflows/ward-stage.yml");
    let dying = stage.replacen(
        "  visit:\n    name: ward visit\n",
        "  visit:\n    name: ward visit\n    env:\n      WARD_FAULT: after-treat\n",
        1,
    );
    assert_ne!(dying, stage, "the visit job's head changed its shape");
    let _repo = hospital(&gh, &[(".github/workflows/ward-stage.yml", &dying)], one_agent_slot);
    let (mut runner, first, second) = two_admitted_at_once(&gh);
    runner.run_until_idle(10).await;

    let (one, two) = (runs_for(&runner, first), runs_for(&runner, second));
    // #1: the slot, a visit that died, no record, the release.
    assert_eq!(one.len(), 1, "{}", runner.summary());
    let run = one[0];
    assert!(!run.job("slot").outputs["slot"].is_empty(), "{}", run.job("slot").log());
    assert_eq!(run.job("visit").conclusion.as_deref(), Some("failure"), "{}", run.job("visit").log());
    assert!(run.job("visit").log().contains("fault point `after-treat` reached"), "{}", run.job("visit").log());
    assert_eq!(run.job("record").conclusion.as_deref(), Some("skipped"));
    let release = run.job("release");
    assert_eq!(release.conclusion.as_deref(), Some("success"), "{}", release.log());
    assert!(release.log().contains(&format!("{second} leaves the queue")), "{}", release.log());
    // #2: queued first, then started by that release, and its own failed
    // visit's release freed the slot again.
    assert_eq!(two.len(), 2, "{}", runner.summary());
    assert_eq!(two[0].job("slot").outputs["visit"], "false");
    assert_eq!(two[1].event, "repository_dispatch");
    assert_eq!(two[1].job("visit").conclusion.as_deref(), Some("failure"));
    let release = two[1].job("release");
    assert_eq!(release.conclusion.as_deref(), Some("success"), "{}", release.log());
    assert!(release.log().contains("no queued patient fits"), "{}", release.log());
    // The agents of both ran one after the other, under the one slot.
    assert_eq!(overlapping(&visits_started(&runner)), None, "{:?}", runner.timeline);
    let state = sweep_state(&gh);
    assert!(state["capacity"].is_null(), "no slot or queue is left: {state}");
    for n in [first, second] {
        assert_eq!(gh.state().labels_of(n), ["ward:admit"], "#{n}: its visit died, nothing was recorded");
    }
}

/// (issue, simulated start, simulated end) of every visit job that
/// started, whatever became of it.
fn visits_started(runner: &Runner<'_>) -> Vec<(u64, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> {
    let mut out = Vec::new();
    for run in runner.runs_of("ward-stage.yml") {
        let visit = run.job("visit");
        let (Some(start), Some(end)) = (visit.started_at, visit.completed_at) else { continue };
        if visit.conclusion.as_deref() == Some("skipped") {
            continue;
        }
        let issue = run.payload["issue"]["number"].as_u64().or(run.payload["client_payload"]["issue"].as_u64());
        out.push((issue.unwrap(), start, end));
    }
    out
}

/// Without a cap, the slot job only looks for `max_concurrent` in
/// ward.yml: it builds no ward and runs none (so it reads and writes
/// nothing on GitHub), the visit runs, and no slot is freed or released.
/// The two admissions' agents run side by side (the measure of the capped
/// test sees them), and the sweep's state holds no slot and no queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cap_the_slot_job_builds_nothing_writes_nothing_and_agents_run_side_by_side() {
    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], |c| c);
    assert!(!ours(".github/ward.yml").contains("max_concurrent"), "ward's own ward.yml sets no cap");
    let (mut runner, first, second) = two_admitted_at_once(&gh);
    runner.run_until_idle(20).await;

    for n in [first, second] {
        assert_eq!(gh.state().labels_of(n), ["ward:awaiting-review"], "#{n}:\n{}", failures(&runner));
    }
    for run in runner.runs_of("ward-stage.yml") {
        let slot = run.job("slot");
        assert_eq!(slot.conclusion.as_deref(), Some("success"), "{}", slot.log());
        assert_eq!(slot.step("cap").outputs["capped"], "false");
        for step in ["Build ward", "slot"] {
            assert_eq!(slot.step(step).outcome, "skipped", "{step}: no ward, no call to GitHub");
        }
        assert_eq!((slot.outputs["visit"].as_str(), slot.outputs["slot"].as_str()), ("true", ""));
        assert_eq!(run.job("visit").conclusion.as_deref(), Some("success"), "{}", run.job("visit").log());
        assert_eq!(run.job("record").step("free").outcome, "skipped");
        assert_eq!(run.job("record").outputs.get("freed").map(String::as_str), Some(""));
        assert_eq!(run.job("release").conclusion.as_deref(), Some("skipped"));
    }
    let visits = agent_visits(&runner);
    assert_eq!(visits.len(), 10, "{}", runner.summary());
    assert!(overlapping(&visits).is_some(), "without a cap the two triages ran at once: {visits:?}");
    let state = sweep_state(&gh);
    assert!(state["capacity"].is_null(), "no slot or queue: {state}");
}

/// Two patients filed, then admitted by a maintainer at the same moment,
/// under a runner whose visit jobs take ten minutes each.
fn two_admitted_at_once(gh: &FakeGitHub) -> (Runner<'_>, u64, u64) {
    let (first, second) = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        (s.add_issue("first", "One.", "reporter", &[]), s.add_issue("second", "Two.", "reporter", &[]))
    };
    let mut runner = Runner::new(gh);
    runner.job_takes("ward-stage.yml", "visit", 10 * MINUTE);
    {
        let mut s = gh.state();
        s.label(first, "ward:admit", "maya");
        s.label(second, "ward:admit", "maya");
    }
    (runner, first, second)
}

// ---------------------------------------------------------------------------
// ward's own merge queue on GitHub (issue 14): ward-queue.yml

/// A tiny app beside ward: `check.sh` is both the CI's test and the merge
/// queue's integration check. Every treatment adds a change-log line (a
/// union merge keeps them all).
const GREET_APP: &[(&str, &str)] = &[
    ("greet.sh", "#!/bin/sh\n# Greets the person named by the first argument.\necho \"Hello, $1!\"\n"),
    ("check.sh", "#!/bin/sh\n# The app's test.\nset -e\nsh greet.sh Ada | grep -qx 'Hello, Ada!'\necho ok\n"),
    ("CHANGELOG.md", "# Changelog\n\n"),
    (".gitattributes", "CHANGELOG.md merge=union\n"),
];

/// Two patients, spelled out step by step for the stand-in: the second
/// pins greet's output in the check, which fails only once the first's
/// line is on `main`.
const GOOD_DAY: (&str, &str) = (
    "greet: wish them a good day",
    "After the greeting, wish them a good day.\n\n\
     Add `echo \"Have a good day, $1.\"` to `greet.sh` after `echo \"Hello, $1!\"`.\n",
);
const PIN: (&str, &str) = (
    "check: pin what greet prints",
    "The check should notice any change to what greet prints.\n\n\
     Record the output of `sh greet.sh Ada` in `greeting.txt`.\n\
     Add `sh greet.sh Ada | diff greeting.txt -` to `check.sh` after `set -e`.\n",
);

/// ward.yml with CI named and the merge queue's integration check.
fn with_integration(c: String) -> String {
    with_ci(c).replace("\nagent:\n", "\nintegration:\n  command: [\"sh\", \"check.sh\"]\n\nagent:\n")
}

/// A writer approves each treatment's pull request whose head no approval
/// of theirs covers (a push needs a fresh one).
fn approve_uncovered_heads(s: &mut State) {
    let due: Vec<u64> = s
        .pulls
        .values()
        .filter(|p| p.open && p.head.starts_with("ward/issue-"))
        .filter(|p| !p.reviews.iter().any(|r| r.author == "rob" && r.commit == p.head_sha))
        .map(|p| p.number)
        .collect();
    for pr in due {
        s.review(pr, "rob", "APPROVE", "", &[]);
    }
}

/// On GitHub without GitHub's merge queue, ward.yml's `integration:` runs
/// in ward-queue.yml. Two patients are treated side by side; the first is
/// audited, enqueued, checked combined with `main` and merged. The second
/// passes its own CI but fails the check combined with the first: the
/// queue sends it back to treatment naming the first, the fellow rebases
/// onto `main` and pins the new output, and the next turn merges it. Each
/// turn's check job holds a read-only token and writes nothing; its record
/// job merges only what was checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wards_merge_queue_on_github_checks_each_patient_combined_with_main_and_sends_a_combined_failure_back() {
    let gh = FakeGitHub::start().await;
    let mut files = vec![(".github/workflows/ci.yml", CHANGELOG_CI)];
    files.extend_from_slice(GREET_APP);
    let _repo = hospital(&gh, &files, with_integration);
    let (a, b) = {
        let mut s = gh.state();
        s.add_collaborator("maya", "maintain");
        s.add_collaborator("rob", "write");
        (s.add_issue(GOOD_DAY.0, GOOD_DAY.1, "reporter", &[]), s.add_issue(PIN.0, PIN.1, "reporter", &[]))
    };
    let mut runner = Runner::new(&gh);
    runner.job_takes("ward-stage.yml", "slot", Duration::from_secs(10));
    gh.state().label(a, "ward:admit", "maya");
    runner.at(5 * MINUTE, "the second patient is admitted", move |s| s.label(b, "ward:admit", "maya"));
    // Whenever the hospital is idle, the writer approves what waits, and
    // the sweep runs (ward-sweep.yml's schedule): it wakes a patient whose
    // review started nothing (GitHub starts no workflow for a pull request
    // that conflicts with `main`, as the second does once the first's
    // change-log line is there).
    for _ in 0..12 {
        runner.run_until_idle(200).await;
        if [a, b].iter().all(|n| gh.state().labels_of(*n) == ["ward:discharged"]) {
            break;
        }
        approve_uncovered_heads(&mut gh.state());
        runner.schedule("ward-sweep.yml");
    }

    let s = gh.state();
    assert_eq!(s.labels_of(a), ["ward:discharged"], "{}", failures(&runner));
    assert_eq!(s.labels_of(b), ["ward:discharged"], "{}", failures(&runner));
    let main = s.branch_head("main").unwrap();
    assert!(s.file(&main, "greet.sh").unwrap().contains("Have a good day"), "the first change is on main");
    assert_eq!(s.file(&main, "greeting.txt").unwrap(), "Hello, Ada!\nHave a good day, Ada.\n", "pinned on top of it");
    for n in [a, b] {
        let pr = s.pulls.values().find(|p| p.head == format!("ward/issue-{n}")).unwrap();
        assert!(pr.merged, "#{n}");
        assert_eq!(pr.merged_by.as_deref(), Some(ACTIONS_BOT), "merged by the queue's record job");
    }
    drop(s);

    // Three turns recorded something: the first passes, the second fails
    // combined with the first, the second's fix passes.
    let turns = runner.runs_of("ward-queue.yml");
    let recorded: Vec<&support::actions::WorkflowRun> =
        turns.iter().copied().filter(|r| r.job("record").conclusion.as_deref() == Some("success")).collect();
    assert_eq!(recorded.len(), 3, "{}", runner.summary());
    for turn in &turns {
        if turn.conclusion.as_deref() == Some("cancelled") {
            // Pending, replaced by a newer dispatch (one pending run per group).
            assert!(turn.job("check").started_at.is_none(), "{}", runner.summary());
            continue;
        }
        assert_eq!(turn.conclusion.as_deref(), Some("success"), "{}", runner.summary());
        let p = &turn.job("check").permissions;
        let scopes = ["contents", "issues", "pull-requests", "checks", "statuses", "actions"];
        assert_eq!(
            scopes.map(|scope| p.level(scope)),
            [Level::Read, Level::Read, Level::Read, Level::None, Level::None, Level::None],
            "the check job runs the patients' code: it can write nothing"
        );
    }
    let logs: Vec<String> = recorded.iter().map(|r| r.job("check").log()).collect();
    assert!(logs[0].contains(&format!("#{a}: the integration check passed")), "{}", logs[0]);
    assert!(logs[1].contains(&format!("#{b}: the integration check failed")), "{}", logs[1]);
    assert!(logs[2].contains(&format!("#{b}: the integration check passed")), "{}", logs[2]);

    // The charts say so, naming what each was combined with.
    let first = notes_of(&gh, a, "DISCHARGE_CHECKLIST").pop().unwrap();
    assert!(first.contains("Integration passed") && first.contains("combined with: none"), "{first}");
    let notes = notes_of(&gh, b, "DISCHARGE_CHECKLIST");
    let failed = notes.iter().find(|n| n.contains("Integration failed")).expect("a failed integration");
    assert!(failed.contains(&format!("combined with: #{a}")) && failed.contains("> Have a good day, Ada."), "{failed}");
    let passed = notes.last().unwrap();
    assert!(passed.contains("Integration passed") && passed.contains(&format!("combined with: #{a}")), "{passed}");
    let waiting = notes_of(&gh, b, "WAITING");
    assert!(waiting.iter().any(|w| w.contains("In ward's merge queue:")), "{waiting:#?}");
    assert_eq!(
        agent_stages(&gh, b).iter().filter(|s| *s == "treat").count(),
        2,
        "sent back once: {}",
        runner.summary()
    );
    let state = sweep_state(&gh);
    assert!(state["merge_queue"]["waiting"].as_array().is_none_or(Vec::is_empty), "{state}");
}

// ---------------------------------------------------------------------------
// From `ward init` to a merged pull request (issue 27)

/// A repository's own CI, as a project has it before ward: `Tests`, on push
/// and pull_request; it checks that every change is in the change log.
const OWN_CI: &str = "name: Tests
on:
  push:
    branches: [main]
  pull_request:
permissions: {}
jobs:
  tests:
    runs-on: ubuntu-24.04
    permissions:
      contents: read
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          persist-credentials: false
      - name: Every change is in the change log
        run: grep -q Treated CHANGELOG.md
";

/// The whole installation as a new user makes it: a repository with CI of
/// its own, `ward init` (with a token: it makes the labels and the charts
/// branch), the one `workflow_dispatch:` line init asks for, a push. Then a
/// patient goes from a triager's label to a merged pull request through the
/// workflows init wrote, each installing the release's binary through the
/// action pinned by its sha (nothing builds ward), on a fake that spells
/// bots as GraphQL does: CI started by ward on the treatment branch and
/// arriving ten minutes later, a sweep while the patient waits, the
/// maintainer's approval an hour after admission. None of ward's own label
/// moves is taken for a person's: no refusal, no label taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_ward_init_to_a_merged_pull_request_through_the_workflows_init_writes() {
    let gh = FakeGitHub::start().await;
    support::release::publish_this_ward(&gh, support::actions::composite::WARD_ACTION_REPO);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (path, text) in [(".github/workflows/tests.yml", OWN_CI), ("CHANGELOG.md", "# Changelog\n")] {
        std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
        std::fs::write(root.join(path), text).unwrap();
    }
    git(root, &["init", "-q", "-b", "main"]);
    let action = format!("{}@0123456789abcdef0123456789abcdef01234567", support::actions::composite::WARD_ACTION_REPO);
    let repo = format!("{OWNER}/{REPO}");
    let init = std::process::Command::new(support::ward_bin())
        .args(["init", "--forge", "github", "--action", &action])
        .current_dir(root)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root)
        .env("GITHUB_API_URL", &gh.url)
        .env("GITHUB_TOKEN", TOKEN)
        .env("GITHUB_REPOSITORY", &repo)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&init.stdout).into_owned();
    assert!(init.status.success(), "{said}\n{}", String::from_utf8_lossy(&init.stderr));
    assert!(said.contains("add `workflow_dispatch:` under the `on:` of `.github/workflows/tests.yml`"), "{said}");
    assert!(said.contains("labels: the "), "{said}");
    // The one line init asks for, by hand.
    let ci = root.join(".github/workflows/tests.yml");
    let text =
        std::fs::read_to_string(&ci).unwrap().replace("  pull_request:\n", "  pull_request:\n  workflow_dispatch:\n");
    std::fs::write(&ci, text).unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "Install ward"]);
    gh.seed(root);
    let n = {
        let mut s = gh.state();
        s.actions_can_create_pull_requests = true;
        s.add_collaborator("tia", "triage");
        s.add_collaborator("maya", "maintain");
        s.add_issue("Login accepts an empty password", "Submit the form empty: you are in.", "reporter", &[])
    };

    let mut runner = Runner::new(&gh);
    runner.job_takes("tests.yml", "tests", 10 * MINUTE);
    runner.at(60 * MINUTE, "the maintainer approves the pull request", move |s| {
        // No pull request by then: the assertions below say why.
        if let Some(pr) = s.open_pull_for(&format!("ward/issue-{n}")).map(|p| p.number) {
            s.review(pr, "maya", "APPROVE", "Looks right.", &[]);
        }
    });
    gh.state().label(n, "ward:admit", "tia");
    runner.run_until(40, |s| s.labels_of(n) == ["ward:awaiting-review"]).await;
    // The charge nurse's rounds while the patient waits (it looks at it again).
    runner.schedule("ward-sweep.yml");
    runner.run_until_idle(40).await;

    assert_eq!(gh.state().labels_of(n), ["ward:discharged"], "{}", failures(&runner));
    let pr = gh.state().pulls.values().find(|p| p.head == format!("ward/issue-{n}")).unwrap().clone();
    assert!(pr.merged, "{}", runner.summary());
    // CI was started by ward on the branch, and ran green on the merged head.
    let ci = runner.runs_of("tests.yml");
    assert!(
        ci.iter().any(|r| r.event == "workflow_dispatch"
            && r.git_ref == format!("refs/heads/ward/issue-{n}")
            && r.conclusion.as_deref() == Some("success")
            && r.head_sha == pr.head_sha),
        "{}",
        runner.summary()
    );
    // The sweep ran in between, and every run of ward's succeeded.
    let sweep = runner.runs_of("ward-sweep.yml");
    assert_eq!(sweep.len(), 1, "{}", runner.summary());
    for r in runner.runs.iter().filter(|r| r.workflow.starts_with("ward-")) {
        assert_eq!(r.conclusion.as_deref(), Some("success"), "{}\n{}", r.describe(), failures(&runner));
    }
    // ward was installed from the release, never built.
    let logs: String = runner.runs.iter().flat_map(|r| r.jobs.iter().map(|j| j.log())).collect();
    assert!(logs.contains(&format!("installed ward {} (", env!("CARGO_PKG_VERSION"))), "{logs}");
    assert!(!logs.contains("instead of building it"), "a workflow built ward");
    // The engine's own moves were the engine's: no refusal, no label taken back.
    assert!(notes_of(&gh, n, "REFUSAL").is_empty(), "{:#?}", notes_of(&gh, n, "REFUSAL"));
    let people: Vec<String> = gh
        .state()
        .label_events
        .iter()
        .filter(|e| e.issue == n && e.actor != ACTIONS_BOT)
        .map(|e| format!("{} {} {}", e.actor, if e.labeled { "+" } else { "-" }, e.label))
        .collect();
    assert_eq!(people, ["tia + ward:admit"], "only the triager's label is a person's");
    assert_eq!(agent_stages(&gh, n), ["admit", "diagnose", "plan-review", "treat", "code-review", "discharge"]);
}

// ---------------------------------------------------------------------------
// The research department's two jobs (ward-report.yml)

/// ward-report.yml as shipped, with the research role on, over a record
/// of three send-backs by plan review: the visit job (a read-only token)
/// runs the role and seals its commit; the record job (the write token)
/// pushes it and opens one pull request at `ward:proposal`; a second run
/// opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_report_workflow_runs_the_research_role_read_only_and_records_its_pull_request_apart() {
    use support::departments::plan_review_rejected;
    use ward::chart::{Seen, Sentinels, append};

    let gh = FakeGitHub::start().await;
    let _repo = hospital(&gh, &[], |c| c.replacen("    agent: false ", "    agent: true  ", 1));
    gh.state().add_collaborator("maya", "maintain");
    let forge = gh.forge();
    for n in 1..=3 {
        let number = gh.state().add_issue(&format!("patient {n}"), "work", "maya", &["ward:diagnose"]);
        let note = plan_review_rejected(n);
        append(&forge, &Sentinels::new("WARD"), ward::forge::IssueNumber(number), Seen::NotRead, &[note])
            .await
            .unwrap();
    }
    let mut runner = Runner::new(&gh);
    for round in 0..2 {
        gh.state().dispatch_workflow("ward-report.yml", "main", &serde_json::Map::new(), "maya").unwrap();
        runner.run_until_idle(5).await;
        let run = runner.runs_of("ward-report.yml")[round].clone();
        for job in ["research-visit", "research"] {
            assert_eq!(run.job(job).conclusion.as_deref(), Some("success"), "{job}: {}", run.job(job).log());
        }
        // The role's agent ran in the job whose token cannot write.
        let scopes = ["contents", "issues", "pull-requests"];
        let levels = |job: &str| scopes.map(|scope| run.job(job).permissions.level(scope));
        assert_eq!(levels("research-visit"), [Level::Read, Level::Read, Level::Read]);
        assert_eq!(levels("research"), [Level::Write, Level::Write, Level::Write]);
        let visit = run.job("research-visit").log();
        let said = if round == 0 { "ward committed the research role's change" } else { "no research role ran" };
        assert!(visit.contains(said), "round {round}: {visit}");
        let pulls: Vec<_> =
            gh.state().pulls.values().filter(|p| p.head.starts_with("ward/research-")).cloned().collect();
        assert_eq!(pulls.len(), 1, "round {round}: {}", run.job("research").log());
        assert_eq!(pulls[0].labels, ["ward:proposal"]);
    }
}
