//! Fault schedules: a whole patient's run, admission to discharge, through
//! ward's real GitHub forge (octocrab, its retry policy) against the fake
//! GitHub, while a seeded schedule (tests/support/fake_github/schedule.rs)
//! answers some requests with 5xx, 403 secondary rate limits and 429s with
//! `Retry-After`, connection resets (before and after the request took
//! effect), 409/422 sha conflicts and slow answers.
//!
//! The stages run in this process, as `ward stage` runs them
//! (`actions::stage_from_event`), with the stand-in agent (the real `ward`
//! binary) and a real git repository pushed to the fake. A run that fails
//! (its retries exhausted) is recovered the way production recovers it:
//! the charge nurse's sweep, hours later, re-triggers the patient. The
//! retry policy is the production one; only its sleeper records the waits
//! instead of sleeping them (`FakeGitHub::retry_policy`).
//!
//! Every schedule must end with the patient discharged, or resting with a
//! note that says why; every note once (none lost, none doubled); and the
//! total retry wait within the bound of the faults that fired. A failing
//! schedule names its seed: `WARD_FAULT_SEED=<seed> cargo test --test
//! faults` replays it alone. `WARD_FAULT_SCHEDULES=<n>` sets how many run
//! (the default is in [`DEFAULT_SCHEDULES`]; `.ci/faults` runs 1,000),
//! from seed `WARD_FAULT_FROM` (1).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use support::fake_github::*;
use ward::actions;
use ward::chart::{Note, Sentinels};
use ward::event::{Trigger, TriggerKind, Wake};
use ward::forge::IssueNumber;

/// Schedules the test runs by default; `.ci/faults` runs 1,000.
const DEFAULT_SCHEDULES: u64 = 40;
/// Schedules running at once (each has its own fake and repository).
const PARALLEL: usize = 4;
/// Triggers (deliveries and sweeps) one patient may take before the test
/// calls it stuck.
const MAX_TRIGGERS: usize = 60;

const CHARTS: &str = "ward-charts";
const RESTING: &[&str] = &["ward:chief", "ward:needs-info", "ward:awaiting-chief"];

/// git with fixed dates (the commits' ids do not change between runs).
fn git(dir: &Path, args: &[&str]) -> String {
    support::git_at(dir, "2026-01-01T00:00:00Z", args)
}

/// A repository with ward installed and committed, copied for each schedule.
fn template() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ward"))
        .arg("--root")
        .arg(dir.path())
        .arg("init")
        .output()
        .unwrap();
    assert!(out.status.success(), "ward init: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(dir.path().join(".gitignore"), ".ward/\n").unwrap();
    for args in [&["init", "-q", "-b", "main"][..], &["add", "-A"], &["commit", "-q", "-m", "install ward"]] {
        git(dir.path(), args);
    }
    dir
}

fn trigger(kind: TriggerKind, issue: u64, label: Option<&str>, actor: &str) -> Trigger {
    Trigger {
        kind,
        issue: Some(IssueNumber(issue)),
        label: label.map(str::to_string),
        stage: None,
        actor: actor.into(),
        repository: Some(format!("{OWNER}/{REPO}")),
        wake: None,
    }
}

/// A reviewer with write access approves the pull request's head, and CI
/// reports green on it, once per head (a re-run treatment pushes a new one).
fn review_and_ci(gh: &FakeGitHub, n: u64, reviewed: &mut Option<String>) -> Option<String> {
    let mut s = gh.state();
    let pr = s.open_pull_for(&format!("ward/issue-{n}"))?.clone();
    if reviewed.as_deref() != Some(pr.head_sha.as_str()) {
        s.review(pr.number, "maria", "APPROVE", "Looks good.", &[]);
        s.report_check("ci-app", &pr.head_sha, "test", "success", None);
        *reviewed = Some(pr.head_sha.clone());
    }
    Some(pr.head_sha)
}

/// How one schedule went.
struct Ran {
    seed: u64,
    faults: usize,
    triggers: usize,
    sweeps: usize,
    failed_runs: usize,
    waited: Duration,
    bound: Duration,
    end: String,
    wall: Duration,
}

/// A fake GitHub holding a copy of `template` and one admitted patient
/// (alice, with triage, filed it; maria may review): its number.
async fn admitted(template: &Path) -> (FakeGitHub, tempfile::TempDir, u64) {
    let gh = FakeGitHub::start().await;
    let repo = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp").arg("-a").arg(template.join(".")).arg(repo.path()).status();
    assert!(copied.unwrap().success(), "copying the template repository");
    gh.seed(repo.path());
    let n = {
        let mut s = gh.state();
        s.actions_can_create_pull_requests = true;
        s.add_collaborator("alice", "triage");
        s.add_collaborator("maria", "write");
        s.add_issue("Login fails on empty password", "Steps: submit the empty form.", "alice", &["bug", "ward:admit"])
    };
    (gh, repo, n)
}

/// One patient, admission to discharge, under the schedule of `seed`.
async fn patient(seed: u64, template: &Path) -> Result<Ran, String> {
    let started = Instant::now();
    let (gh, repo, n) = admitted(template).await;
    let h = gh.hospital(repo.path());
    gh.state().schedule = Some(Schedule::new(seed));

    let mut next = Some(trigger(TriggerKind::Labeled, n, Some("ward:admit"), "alice"));
    let (mut handled, mut triggers, mut sweeps, mut failed_runs) = (0, 0, 0, 0);
    let mut reviewed = None;
    let sweep_start = Utc::now();
    loop {
        if triggers >= MAX_TRIGGERS {
            return Err(format!("not settled after {MAX_TRIGGERS} triggers; labels {:?}", gh.state().labels_of(n)));
        }
        let labels = gh.state().labels_of(n);
        let trigger = match next.take() {
            Some(t) => t,
            None if handled < gh.state().dispatches.len() => {
                let payload = gh.state().dispatches[handled]["client_payload"].clone();
                handled += 1;
                let label = payload["label"].as_str().unwrap_or_default().to_string();
                trigger(TriggerKind::RepositoryDispatch, n, Some(&label), ENGINE)
            }
            // Discharged means closed too: a discharged patient left open
            // (its close failed) waits for the sweep, as it would on GitHub.
            None if labels.iter().any(|l| l == "ward:discharged") && !gh.state().issue(n).open => break,
            None if labels.iter().any(|l| RESTING.contains(&&**l)) => break,
            None if labels.iter().any(|l| l == "ward:awaiting-review") => {
                // CI and the review arrive: their events wake the patient.
                let head = review_and_ci(&gh, n, &mut reviewed);
                let mut t = trigger(TriggerKind::Wake, n, None, "ci-app");
                t.wake = Some(Wake { event: "check_suite".into(), head, reviewer: None, dequeued: None });
                t
            }
            None => {
                // Nothing is coming: the charge nurse's sweep, six hours on.
                sweeps += 1;
                triggers += 1;
                let now = sweep_start + chrono::Duration::hours(6 * sweeps as i64);
                let facilities = ward::sweep::Facilities::default();
                let _ = ward::sweep::sweep(&*h.forge, &h.config, now, &facilities, None).await;
                continue;
            }
        };
        triggers += 1;
        if trigger.label.as_deref() == Some("ward:discharge") {
            review_and_ci(&gh, n, &mut reviewed);
        }
        match actions::stage_from_event(&h, &trigger, ward::stage::Phase::Whole).await {
            Ok(actions::EventRun::Ran(result)) if result.is_failure() => failed_runs += 1,
            Ok(_) => {}
            Err(_) => failed_runs += 1,
        }
    }
    let schedule = gh.state().schedule.take().expect("the schedule was set");
    check(&gh, n, seed, &schedule, started, (triggers, sweeps, failed_runs))
        .map_err(|why| explain(&gh, n, &schedule, why))
}

/// A failure with what a replay needs to look at: the faults that fired,
/// and the chart's notes in order.
fn explain(gh: &FakeGitHub, n: u64, schedule: &Schedule, why: String) -> String {
    let s = gh.state();
    let chart = s.file(CHARTS, &format!("charts/{n}.md")).unwrap_or_default();
    let notes = Sentinels::default().parse_chart(&chart).unwrap_or_default();
    // The engine's verdicts say why a patient went where it went: shown whole.
    let verdict =
        |n: &Note| n.meta.role == "engine" && ["DISCHARGE_CHECKLIST", "REFUSAL"].contains(&&*n.kind.to_string());
    let notes: Vec<String> = notes
        .iter()
        .map(|n| {
            let body = if verdict(n) { format!("\n{}", n.body.trim()) } else { String::new() };
            format!("  {} {} {} {}{body}", n.meta.run, n.meta.stage, n.meta.role, n.kind)
        })
        .collect();
    let fired: Vec<String> = schedule.fired.iter().map(|(i, route, f)| format!("  #{i} {route}: {f:?}")).collect();
    format!("{why}\n faults:\n{}\n chart:\n{}", fired.join("\n"), notes.join("\n"))
}

/// The end state, the chart and the waits of one schedule.
fn check(
    gh: &FakeGitHub,
    n: u64,
    seed: u64,
    schedule: &Schedule,
    started: Instant,
    (triggers, sweeps, failed_runs): (usize, usize, usize),
) -> Result<Ran, String> {
    let s = gh.state();
    let labels = s.labels_of(n);
    let chart = s.file(CHARTS, &format!("charts/{n}.md")).ok_or("no chart")?;
    let notes = Sentinels::default().parse_chart(&chart).map_err(|e| format!("the chart does not parse: {e:?}"))?;
    let discharged = labels.iter().any(|l| l == "ward:discharged");
    let end = if discharged {
        if s.issue(n).open {
            return Err("discharged but still open".into());
        }
        if !s.pulls.values().all(|p| p.merged) {
            return Err("discharged but the pull request is not merged".into());
        }
        let stages: Vec<&str> = notes.iter().filter(|n| n.kind == "OUTCOME").map(|n| n.meta.stage.as_str()).collect();
        if stages != ["admit", "diagnose", "plan-review", "treat", "code-review", "discharge"] {
            return Err(format!("the outcomes are {stages:?}"));
        }
        for kind in ["TRIAGE", "TREATMENT_PLAN", "PLAN_REVIEW", "TREATMENT_NOTE", "CODE_REVIEW"] {
            let count = notes.iter().filter(|n| n.kind == kind).count();
            if count != 1 {
                return Err(format!("{kind} is in the chart {count} times"));
            }
        }
        "discharged".to_string()
    } else {
        let rest = labels.iter().find(|l| RESTING.contains(&l.as_str())).ok_or(format!("labels {labels:?}"))?;
        let last = notes.last().ok_or("an empty chart")?;
        if last.meta.role != "engine" || last.body.trim().len() < 20 {
            return Err(format!("resting at `{rest}` without a note saying why: {last:?}"));
        }
        rest.clone()
    };
    // No note twice: the same kind, author, run and text.
    let key = |n: &Note| (n.kind.to_string(), n.meta.role.clone(), n.meta.run.clone(), n.body.clone());
    let mut keys: Vec<_> = notes.iter().map(key).collect();
    keys.sort();
    if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("a note is in the chart twice: {:?} by {} in run {}", w[0].0, w[0].1, w[0].2));
    }
    let policy = gh.retry_policy();
    let waits = gh.waits.lock().unwrap().clone();
    let waited: Duration = waits.iter().sum();
    let bound = schedule.wait_bound(policy.max_delay);
    if let Some(w) = waits.iter().find(|w| **w > policy.max_rate_limit_wait) {
        return Err(format!("a wait of {w:?} passes the policy's longest ({:?})", policy.max_rate_limit_wait));
    }
    if waited > bound {
        return Err(format!("waited {waited:?} in all, more than the faults allow ({bound:?})"));
    }
    Ok(Ran {
        seed,
        faults: schedule.fired.len(),
        triggers,
        sweeps,
        failed_runs,
        waited,
        bound,
        end,
        wall: started.elapsed(),
    })
}

fn seeds() -> Vec<u64> {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u64>().ok());
    match var("WARD_FAULT_SEED") {
        Some(seed) => vec![seed],
        None => {
            let from = var("WARD_FAULT_FROM").unwrap_or(1);
            (from..from + var("WARD_FAULT_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES)).collect()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_fault_schedule_ends_discharged_or_resting_with_every_note_once() {
    let template = Arc::new(template());
    let seeds = seeds();
    let started = Instant::now();
    let mut ran = Vec::new();
    let mut failed = Vec::new();
    for chunk in seeds.chunks(PARALLEL) {
        let mut set = tokio::task::JoinSet::new();
        for &seed in chunk {
            let template = template.clone();
            set.spawn(async move { (seed, patient(seed, template.path()).await) });
        }
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((_, Ok(r))) => ran.push(r),
                Ok((seed, Err(why))) => failed.push(format!("seed {seed}: {why} (replay: WARD_FAULT_SEED={seed})")),
                Err(panic) => failed.push(format!("a schedule panicked: {panic}")),
            }
        }
    }
    let total = started.elapsed();
    let faults: usize = ran.iter().map(|r| r.faults).sum();
    let failed_runs: usize = ran.iter().map(|r| r.failed_runs).sum();
    let sweeps: usize = ran.iter().map(|r| r.sweeps).sum();
    let triggers: usize = ran.iter().map(|r| r.triggers).sum();
    let resting = ran.iter().filter(|r| r.end != "discharged").count();
    let waited: Duration = ran.iter().map(|r| r.waited).sum();
    let bound: Duration = ran.iter().map(|r| r.bound).sum();
    let slowest = ran.iter().map(|r| r.wall).max().unwrap_or_default();
    let most = ran.iter().max_by_key(|r| r.faults).map(|r| (r.seed, r.faults));
    eprintln!(
        "MEASURE schedules={} wall_s={:.1} per_schedule_ms={} slowest_ms={} faults={faults} most={most:?} \
         triggers={triggers} failed_runs={failed_runs} sweeps={sweeps} resting={resting} \
         retry_wait_recorded_s={} bound_s={}",
        seeds.len(),
        total.as_secs_f64(),
        total.as_millis() / seeds.len().max(1) as u128,
        slowest.as_millis(),
        waited.as_secs(),
        bound.as_secs()
    );
    assert!(failed.is_empty(), "{} of {} schedules failed:\n{}", failed.len(), seeds.len(), failed.join("\n"));
}

/// Seed 545's schedule, alone: the discharge audit's one read of the pull
/// request's facts meets five secondary rate limits in a row and the
/// retries give up. A fact not read is no verdict: the run fails with
/// nothing written (no checklist, no `audit-failed`, no nurse), the patient
/// stays at `ward:discharge`, and the next delivery audits again and
/// discharges it; the code review never runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_read_that_fails_after_its_retries_decides_nothing_and_the_next_run_audits_again() {
    let template = template();
    let (gh, repo, n) = admitted(template.path()).await;
    let h = gh.hospital(repo.path());
    let run = |t: Trigger| {
        let h = &h;
        async move { actions::stage_from_event(h, &t, ward::stage::Phase::Whole).await }
    };
    let ran = run(trigger(TriggerKind::Labeled, n, Some("ward:admit"), "alice")).await;
    assert!(matches!(ran, Ok(actions::EventRun::Ran(ref r)) if !r.is_failure()), "{ran:?}");
    let mut handled = 0;
    let discharge = loop {
        let payload = gh.state().dispatches[handled]["client_payload"].clone();
        handled += 1;
        let label = payload["label"].as_str().unwrap_or_default().to_string();
        let t = trigger(TriggerKind::RepositoryDispatch, n, Some(&label), ENGINE);
        if label == "ward:discharge" {
            break t;
        }
        let ran = run(t).await;
        assert!(matches!(ran, Ok(actions::EventRun::Ran(ref r)) if !r.is_failure()), "{label}: {ran:?}");
    };
    review_and_ci(&gh, n, &mut None);
    let chart_before = gh.state().file(CHARTS, &format!("charts/{n}.md")).unwrap();

    // The stage's read passes; the audit's read (the second GraphQL request)
    // meets a secondary rate limit on every attempt.
    let policy = gh.retry_policy();
    let limit = FaultKind::RetryAfter403(37);
    gh.state().inject(Fault::new("POST /graphql", 1, policy.attempts as usize, limit));
    let ran = run(discharge.clone()).await;
    let failed = match &ran {
        Err(e) => format!("{e:#}"),
        Ok(actions::EventRun::Ran(r)) if r.is_failure() => format!("{r:?}"),
        other => panic!("the run should fail when the audit cannot read its facts: {other:?}"),
    };
    assert!(failed.contains("could not read the pull request's facts"), "{failed}");
    {
        let s = gh.state();
        assert_eq!(s.labels_of(n), ["bug", "ward:discharge"], "the patient stays where it was");
        assert_eq!(s.file(CHARTS, &format!("charts/{n}.md")).unwrap(), chart_before, "nothing is written");
        assert!(s.pulls.values().all(|p| !p.merged));
    }

    // The next delivery (or the sweep's re-trigger) audits again.
    let ran = run(discharge).await;
    assert!(matches!(ran, Ok(actions::EventRun::Ran(ref r)) if !r.is_failure()), "{ran:?}");
    let s = gh.state();
    assert_eq!(s.labels_of(n), ["bug", "ward:discharged"]);
    let notes = Sentinels::default().parse_chart(&s.file(CHARTS, &format!("charts/{n}.md")).unwrap()).unwrap();
    let stages: Vec<&str> = notes.iter().filter(|n| n.kind == "OUTCOME").map(|n| n.meta.stage.as_str()).collect();
    assert_eq!(stages, ["admit", "diagnose", "plan-review", "treat", "code-review", "discharge"]);
    assert_eq!(notes.iter().filter(|n| n.kind == "CODE_REVIEW").count(), 1, "the code review ran once");
}
