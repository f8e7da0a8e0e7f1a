//! The departments outside the patient flow, with a moving clock: the
//! charge nurse's sweep, infection control, budgets, groundedness, the
//! safety report and the research department's role (its policy change as
//! a pull request, on the local forge).

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::departments::{Counting, Shared, Ward, config_with, minutes};
use ward::budget::{self, Limit};
use ward::chart::ENGINE_ROLE;
use ward::config::agents::Output;
use ward::config::{BudgetConfig, Prices};
use ward::forge::{CiState, CiStatus, Forge, IssueNumber, IssueState, Permission};
use ward::groundedness::{self, Decision, Facts};
use ward::lockdown::{self, LockdownError};
use ward::report;
use ward::stage::{self, StageRequest, StageResult};
use ward::state::AgentRun;
use ward::sweep::{self, Facilities, SweepOutcome};

async fn sweep_once(w: &Ward) -> sweep::SweepReport {
    sweep::sweep(&*w.local, &w.config, w.now(), &Facilities::default(), None).await.unwrap()
}

// ---------------------------------------------------------------------------
// Charge nurse
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_stalled_stage_is_revived_once() {
    let w = Ward::new(config_with(|t| t));
    let n = w.admit("login fails", &["ward:diagnose", "bug"]); // stall_after 2h, time_limit 45m
    let first = sweep_once(&w).await;
    assert_eq!((first.listed, first.due, first.actions.len()), (1, 0, 0), "first sight: nothing due yet");

    w.clock.advance(minutes(60));
    let r = sweep_once(&w).await;
    assert_eq!((r.due, r.actions.len()), (1, 0), "looked at after 55m; the label is only 1h old: {r}");

    w.clock.advance(minutes(61));
    let r = sweep_once(&w).await;
    assert_eq!(r.actions.len(), 1, "{r}");
    assert!(matches!(&r.actions[0], sweep::Action::Retriggered { issue, attempt: 1, .. } if *issue == n));
    assert_eq!(w.dispatched(), vec![n]);
    let sweeps = w.kinds(n, "SWEEP").await;
    assert_eq!(sweeps.len(), 1);
    assert_eq!(sweeps[0].meta.role, ENGINE_ROLE);
    assert_eq!(sweeps[0].meta.stage, "diagnose");
    assert!(sweeps[0].body.contains("no run started since 2026-11-29T08:00:00Z"), "{}", sweeps[0].body);
    assert_eq!(w.labels(n).await, vec!["ward:diagnose", "bug"], "a re-trigger moves no label");

    // The revived run starts and finishes; the sweep leaves the patient alone.
    w.clock.advance(minutes(5));
    w.start_run(n, "diagnose", "run-2").await;
    for _ in 0..6 {
        w.clock.advance(minutes(30));
        assert!(sweep_once(&w).await.actions.is_empty(), "a live run is not stalled");
        if w.now() > support::departments::TestClock::at("2026-11-29T11:00:00Z").now() {
            break;
        }
    }
    w.finish_run(n, "diagnose", "run-2", "plan-posted").await;
    let r = sweep_once(&w).await;
    assert!(r.actions.is_empty(), "{r}");
    assert_eq!(w.kinds(n, "SWEEP").await.len(), 1, "revived exactly once");
    assert_eq!(w.dispatched(), vec![n]);
}

#[tokio::test]
async fn a_stage_that_keeps_stalling_is_revived_up_to_the_limit_then_escalated() {
    let w = Ward::new(config_with(|t| t));
    let n = w.admit("flaky", &["ward:plan-review", "area:db"]); // stall_after 1h, time_limit 20m
    sweep_once(&w).await;
    let mut retriggers = 0;
    let mut escalated = false;
    for _ in 0..12 {
        w.clock.advance(minutes(65));
        let r = sweep_once(&w).await;
        for a in &r.actions {
            match a {
                sweep::Action::Retriggered { attempt, .. } => {
                    retriggers += 1;
                    assert_eq!(*attempt, retriggers);
                }
                sweep::Action::Escalated { .. } => escalated = true,
                other => panic!("unexpected {other}"),
            }
        }
        if escalated {
            break;
        }
    }
    assert_eq!(retriggers, 2, "max_retries is 2");
    assert!(escalated);
    assert_eq!(w.labels(n).await, vec!["area:db", "ward:chief"], "ward label replaced, others kept");
    let esc = w.kinds(n, "ESCALATION").await;
    assert_eq!(esc.len(), 1);
    assert_eq!(esc[0].meta.role, ENGINE_ROLE);
    assert!(esc[0].body.contains("after 2 re-triggers"), "{}", esc[0].body);
    assert_eq!(esc[0].body.matches("Re-triggered the stage").count(), 2, "says what was tried: {}", esc[0].body);
    assert_eq!(w.dispatched().len(), 2);
    // At ward:chief the sweep has nothing more to do.
    w.clock.advance(minutes(600));
    let r = sweep_once(&w).await;
    assert_eq!((r.listed, r.actions.len()), (0, 0));
}

#[tokio::test]
async fn a_crashed_run_is_noticed_after_its_time_limit_not_its_stall_time() {
    let w = Ward::new(config_with(|t| t));
    let n = w.admit("crash", &["ward:treat"]); // time_limit 60m, stall_after 2h, grace 10m
    sweep_once(&w).await;
    w.clock.advance(minutes(5));
    w.start_run(n, "treat", "run-crashed").await; // ADMISSION, then the runner died
    w.clock.advance(minutes(65)); // 70m after the label: first look is due
    let r = sweep_once(&w).await;
    assert!(r.actions.is_empty(), "run started 65m ago; limit + grace is 70m: {r}");
    w.clock.advance(minutes(5));
    let r = sweep_once(&w).await;
    assert_eq!(r.actions.len(), 1, "{r}");
    let body = &w.kinds(n, "SWEEP").await[0].body;
    assert!(body.contains("run `run-crashed`") && body.contains("crashed"), "{body}");
    assert_eq!(w.dispatched(), vec![n]);
}

#[tokio::test]
async fn a_patient_that_moves_on_while_the_sweep_decides_is_left_alone() {
    let w = Ward::new(config_with(|t| t));
    let n = w.admit("racy", &["ward:code-review"]); // stall 1h, limit 30m
    let counting = Counting::new(Shared(w.local.clone()));
    sweep::sweep(&counting, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    w.clock.advance(minutes(90));
    // Between the sweep's look and its action, a stage run moves the label.
    let local = w.local.clone();
    *counting.on_issue.lock().unwrap() = Some(Box::new(move |_| {
        local.set_labels_as_person(n, &["ward:discharge".to_string()]).unwrap();
    }));
    let r = sweep::sweep(&counting, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    assert_eq!(r.moved_on, vec![n], "{r}");
    assert!(r.actions.is_empty());
    assert!(w.kinds(n, "SWEEP").await.is_empty(), "no note for a patient that moved on");
    assert!(w.dispatched().is_empty(), "no re-trigger");
    assert_eq!(w.labels(n).await, vec!["ward:discharge"]);
}

#[tokio::test]
async fn a_thousand_stalled_patients_with_a_cap_of_fifty_are_all_seen_none_starves() {
    let w = Ward::new(config_with(|t| t));
    assert_eq!(w.config.departments.sweep.max_actions, 50);
    let patients: Vec<IssueNumber> = (0..1000).map(|i| w.admit(&format!("p{i}"), &["ward:admit"])).collect();
    let r = sweep_once(&w).await;
    assert_eq!((r.listed, r.actions.len()), (1000, 0));
    w.clock.advance(minutes(65)); // admit: stall_after 1h
    let mut order: Vec<IssueNumber> = Vec::new();
    let mut sweeps = 0;
    while order.len() < 1000 {
        sweeps += 1;
        assert!(sweeps <= 20, "1000 patients at 50 per sweep need 20 sweeps; starved: {}", 1000 - order.len());
        let r = sweep_once(&w).await;
        assert!(r.actions.len() <= 50, "the cap holds: {}", r.actions.len());
        order.extend(r.actions.iter().map(|a| match a {
            sweep::Action::Retriggered { issue, .. } => *issue,
            other => panic!("unexpected {other}"),
        }));
        w.clock.advance(minutes(1));
        // New patients arrive meanwhile; they must not push old ones back.
        if sweeps == 3 {
            w.admit("late arrival", &["ward:admit"]);
        }
    }
    assert_eq!(order.len(), 1000);
    let unique: HashSet<IssueNumber> = order.iter().copied().collect();
    assert_eq!(unique.len(), 1000, "no patient revived twice before every patient was revived once");
    assert_eq!(order, patients, "round-robin in issue order, resuming at the cursor");
    let d = w.dispatched();
    assert_eq!(d.len(), 1000);
}

#[tokio::test]
async fn contradictory_labels_are_repaired_or_escalated() {
    let w = Ward::new(config_with(|t| t));
    // Diagnose finished (plan-posted -> plan-review) but the old label stayed.
    let a = w.admit("two labels, chart knows", &["ward:diagnose"]);
    w.start_run(a, "diagnose", "r1").await;
    w.finish_run(a, "diagnose", "r1", "plan-posted").await;
    w.local.set_labels_as_person(a, &["ward:plan-review".into(), "ward:diagnose".into()]).unwrap();
    // Nobody knows which is right.
    let b = w.admit("two labels, no chart", &["ward:treat", "ward:code-review", "p1"]);
    // A label from an old pipeline next to a real one.
    let c = w.admit("orphan", &["ward:triage", "ward:admit"]);
    let r = sweep_once(&w).await;
    assert_eq!(r.actions.len(), 3, "{r}");
    // Hmm: a's extra `ward:diagnose` was put on after the outcome by a person -> ambiguous.
    assert_eq!(w.labels(b).await, vec!["p1", "ward:chief"]);
    assert_eq!(w.labels(c).await, vec!["ward:admit"]);
    assert!(w.kinds(c, "SWEEP").await[0].body.contains("`ward:triage`"));
    assert_eq!(w.kinds(b, "ESCALATION").await.len(), 1);
    let a_labels = w.labels(a).await;
    assert_eq!(a_labels.len(), 1, "one defined state: {a_labels:?}");
}

/// Records that it was asked to reap, and reports one thing removed.
struct FakeReaper(std::sync::Mutex<Vec<chrono::DateTime<chrono::Utc>>>);

#[async_trait::async_trait]
impl sweep::Reaper for FakeReaper {
    async fn reap(
        &self,
        _forge: &dyn Forge,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>, sweep::ReapError> {
        self.0.lock().unwrap().push(now);
        Ok(vec!["container `ward-7-x` (past its `ward.expires`)".into()])
    }
}

#[tokio::test]
async fn the_sweep_calls_the_reaper_and_reports_what_it_removed() {
    let w = Ward::new(config_with(|t| t));
    let reaper = FakeReaper(Default::default());
    let r = sweep::sweep(&*w.local, &w.config, w.now(), &Facilities::default(), Some(&reaper)).await.unwrap();
    assert_eq!(reaper.0.lock().unwrap().as_slice(), &[w.now()]);
    assert_eq!(r.reaped, vec!["container `ward-7-x` (past its `ward.expires`)".to_string()]);
    assert!(r.to_string().contains("- reaped: container `ward-7-x`"), "{r}");
}

#[tokio::test]
async fn two_sweeps_never_act_at_once() {
    let w = Ward::new(config_with(|t| t));
    // A sweep that holds the lock (it crashed, or is running).
    ward::state::update(&*w.local, |s| {
        s.lock =
            Some(ward::state::SweepLock { holder: "other".into(), expires: w.now() + chrono::Duration::minutes(15) });
        Ok::<_, ()>(())
    })
    .await
    .unwrap()
    .unwrap();
    let r = sweep_once(&w).await;
    assert!(matches!(r.outcome, SweepOutcome::Busy { ref holder, .. } if holder == "other"), "{r}");
    // Its lease runs out: the next sweep takes over.
    w.clock.advance(minutes(16));
    let r = sweep_once(&w).await;
    assert_eq!(r.outcome, SweepOutcome::Done);
    let state = ward::state::load(&*w.local).await.unwrap();
    assert_eq!(state.lock, None, "released");
}

#[tokio::test]
async fn sweep_api_calls_are_pages_plus_a_few_per_stalled_patient() {
    let w = Ward::new(config_with(|t| t));
    for i in 0..250 {
        w.admit(&format!("healthy {i}"), &["ward:treat"]);
    }
    let stalled: Vec<IssueNumber> = (0..3).map(|i| w.admit(&format!("stalled {i}"), &["ward:admit"])).collect();
    let counting = Counting::new(Shared(w.local.clone()));
    sweep::sweep(&counting, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    w.clock.advance(minutes(65)); // admit stalls after 1h; treat's first look is at 70m
    counting.reset();
    let r = sweep::sweep(&counting, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    assert_eq!(r.actions.len(), 3, "{r}");
    let pages = counting.of("open_issues_with_label (pages)");
    assert_eq!(
        pages,
        3 + 7 + 1 + 2 + 1 + 1,
        "3 pages of treat, one page for each other stage label, one for `ward:lockdown`, one each for \
         `ward:blocked` and `ward:waiting` (families left half released), one for `ward:awaiting-review` \
         (patients waiting for CI or a review), one for `ward:discharged` (a close that failed)"
    );
    let others = counting.total() - pages;
    // state: read+write to lock, read+write to release; ci_status; the
    // lockdowns closed lately (who closed them: one reopened if that person
    // may not lift it); the due patients read together (one call per 50:
    // each one's issue, label events and chart, read after the listing);
    // per stalled patient: the note and the dispatch.
    assert_eq!(others, 4 + 1 + 1 + 1 + 2 * stalled.len(), "{:?}", counting.calls.lock().unwrap());
}

/// Issue 13: a patient whose label is already older than its first look
/// (the listing's `updated_at` proves it) is due in the first sweep that
/// sees it, not `stall_after` later. One sweep then costs the listing
/// pages, six calls for the sweep's state and facilities, one to read the
/// due (up to 50) and two per stalled patient; the next sweep costs the
/// pages and the six.
#[tokio::test]
async fn a_patient_whose_label_is_already_old_is_due_in_the_first_sweep() {
    let w = Ward::new(config_with(|t| t));
    let stalled: Vec<IssueNumber> = (0..3).map(|i| w.admit(&format!("stalled {i}"), &["ward:admit"])).collect();
    w.clock.advance(minutes(65)); // admit stalls after 1h
    for i in 0..250 {
        w.admit(&format!("healthy {i}"), &["ward:treat"]); // labeled now: due in 70m
    }
    let counting = Counting::new(Shared(w.local.clone()));
    let r = sweep::sweep(&counting, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    assert_eq!(r.actions.len(), 3, "the first sweep revives the stalled: {r}");
    assert_eq!(r.due, 3, "and looks at nobody else: {r}");
    let pages = counting.of("open_issues_with_label (pages)");
    // Treat's 3 pages, one per other stage label, `ward:lockdown`, the two
    // family labels, `ward:awaiting-review` and `ward:discharged` (open
    // discharged patients whose close failed).
    assert_eq!(pages, 3 + 7 + 1 + 2 + 1 + 1, "{:?}", counting.calls.lock().unwrap());
    // The floor: the state's lock and release (read + write each) and the
    // base branch's CI, the lockdowns closed lately (infection control
    // reopens one closed by someone who may not lift it), the due read
    // together, one call for every 50 (each one's label events and chart
    // to judge, and the issue re-read: it may have moved on since the
    // listing), then per stalled patient the SWEEP note (compare-and-swap)
    // and the dispatch.
    assert_eq!(counting.total() - pages, 4 + 1 + 1 + 1 + 2 * stalled.len(), "{:?}", counting.calls.lock().unwrap());
    counting.reset();
    w.clock.advance(minutes(5));
    let r = sweep::sweep(&counting, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    assert_eq!((r.actions.len(), r.due), (0, 0), "{r}");
    assert_eq!(counting.total(), pages + 4 + 1 + 1, "{:?}", counting.calls.lock().unwrap());
}

// ---------------------------------------------------------------------------
// Infection control
// ---------------------------------------------------------------------------

#[tokio::test]
async fn lockdown_on_and_off_with_stages_refused_meanwhile() {
    let w = Ward::new(config_with(|t| t));
    w.set_permissions(&[
        ("chief-ana", Permission::Maintain),
        ("dev-bo", Permission::Write),
        ("rando", Permission::Read),
    ]);
    let n = w.admit("patient", &["ward:diagnose"]);
    assert_eq!(lockdown::active_lockdown(&*w.local).await.unwrap(), None);

    let err = lockdown::declare(&*w.local, "db down", "rando", w.now()).await.unwrap_err();
    assert!(matches!(err, LockdownError::DeclareNotAllowed { .. }), "{err}");
    assert!(matches!(lockdown::declare(&*w.local, "  ", "dev-bo", w.now()).await, Err(LockdownError::NoReason)));
    let (l, new) = lockdown::declare(&*w.local, "Emulator image is poisoned", "dev-bo", w.now()).await.unwrap();
    assert!(new);
    let (again, new) = lockdown::declare(&*w.local, "second", "dev-bo", w.now()).await.unwrap();
    assert!(!new, "one lockdown at a time");
    assert_eq!(again.issue, l.issue);
    let active = lockdown::active_lockdown(&*w.local).await.unwrap().unwrap();
    assert_eq!(active.reason, "Emulator image is poisoned");
    assert_eq!(w.labels(l.issue).await, vec!["ward:lockdown"]);

    // A stage run meanwhile: the guard records a LOCKDOWN note and moves nothing.
    let h = w.hospital(|t| t);
    let req = StageRequest { label: Some("ward:diagnose".into()), ..StageRequest::new(n) };
    let result = stage::run_stage(&h, &req).await.unwrap();
    assert!(
        matches!(&result, StageResult::Refused { to: None, reason, .. } if reason.contains("poisoned")),
        "{result:?}"
    );
    assert_eq!(w.labels(n).await, vec!["ward:diagnose"]);
    assert!(w.kinds(n, "LOCKDOWN").await[0].body.contains("Emulator image is poisoned"));
    assert!(w.kinds(n, "ADMISSION").await.is_empty(), "no run started");

    // The sweep does not re-trigger anything during a lockdown.
    sweep_once(&w).await;
    w.clock.advance(minutes(180));
    let r = sweep_once(&w).await;
    assert!(matches!(r.outcome, SweepOutcome::Lockdown { declared_now: false, .. }), "{r}");
    assert!(w.dispatched().is_empty());

    let err = lockdown::lift(&*w.local, "dev-bo", w.now()).await.unwrap_err();
    assert!(matches!(err, LockdownError::LiftNotAllowed { .. }));
    assert!(err.to_string().contains("maintain permission"), "{err}");
    assert_eq!(lockdown::lift(&*w.local, "chief-ana", w.now()).await.unwrap(), vec![l.issue]);
    assert_eq!(lockdown::active_lockdown(&*w.local).await.unwrap(), None);
    assert_eq!(w.local.issue(l.issue).await.unwrap().state, IssueState::Closed);
    assert!(w.local.comments(l.issue).await.unwrap()[0].body.contains("Lifted by @chief-ana"));

    // Lifted: the refused patient is revived by the next sweep, and its stage runs.
    let r = sweep_once(&w).await;
    assert_eq!(r.actions.len(), 1, "{r}");
    assert_eq!(w.dispatched(), vec![n]);
    let result = stage::run_stage(&h, &req).await.unwrap();
    assert!(matches!(&result, StageResult::Moved(t) if t.to == "ward:plan-review"), "{result:?}");
}

#[tokio::test]
async fn the_sweep_declares_a_lockdown_when_a_facility_fails() {
    // Docker.
    let w = Ward::new(config_with(|t| t));
    let refused = ward::doctor::DockerUnreachable::Said("connection refused at /var/run/docker.sock".into());
    let f = Facilities { docker_reachable: Some(Err(refused)) };
    let r = sweep::sweep(&*w.local, &w.config, w.now(), &f, None).await.unwrap();
    let SweepOutcome::Lockdown { issue, reason, declared_now: true } = r.outcome else { panic!("{r}") };
    assert!(reason.contains("Docker is not reachable"), "{reason}");
    let l = lockdown::active_lockdown(&*w.local).await.unwrap().unwrap();
    assert_eq!((l.issue, l.declared_by.as_str()), (issue, w.config.engine_account.as_str()));

    // The agent failing on consecutive runs across patients.
    let w = Ward::new(config_with(|t| t));
    for i in 0..4 {
        let run =
            AgentRun { issue: IssueNumber(i), stage: "treat".into(), run: format!("r{i}"), ok: false, at: w.now() };
        ward::state::record_agent_run(&*w.local, run).await.unwrap();
    }
    let ok = AgentRun { issue: IssueNumber(9), stage: "treat".into(), run: "ok".into(), ok: true, at: w.now() };
    assert_eq!(ward::state::record_agent_run(&*w.local, ok).await.unwrap(), 0, "a success resets the streak");
    for i in 10..15 {
        let run =
            AgentRun { issue: IssueNumber(i), stage: "diagnose".into(), run: format!("r{i}"), ok: false, at: w.now() };
        ward::state::record_agent_run(&*w.local, run).await.unwrap();
    }
    let r = sweep_once(&w).await;
    let SweepOutcome::Lockdown { reason, declared_now: true, .. } = r.outcome else { panic!("{r}") };
    assert!(reason.contains("failed on 5 consecutive runs"), "{reason}");
    let state = ward::state::load(&*w.local).await.unwrap();
    assert_eq!(state.agent.consecutive_failures, 0, "the declaration consumed the streak");

    // Failures with progress in between (a patient moved on) are not consecutive.
    let w = Ward::new(config_with(|t| t));
    let moving = w.admit("moving", &["ward:admit"]);
    sweep_once(&w).await;
    for i in 0..5 {
        let run =
            AgentRun { issue: IssueNumber(i), stage: "treat".into(), run: format!("f{i}"), ok: false, at: w.now() };
        ward::state::record_agent_run(&*w.local, run).await.unwrap();
    }
    w.start_run(moving, "admit", "ok-run").await;
    w.finish_run(moving, "admit", "ok-run", "ready").await;
    let r = sweep_once(&w).await;
    assert_eq!(r.outcome, SweepOutcome::Done, "a patient moved: the agent works: {r}");
    assert_eq!(ward::state::load(&*w.local).await.unwrap().agent.consecutive_failures, 0);
    let run = AgentRun { issue: IssueNumber(9), stage: "treat".into(), run: "f9".into(), ok: false, at: w.now() };
    assert_eq!(ward::state::record_agent_run(&*w.local, run).await.unwrap(), 1, "a new streak starts");

    // The base branch red for longer than configured (6h).
    let w = Ward::new(config_with(|t| t));
    let red = CiStatus::new(CiState::Failure, vec!["test: failure".into()]);
    w.local.set_ci_status("main", &red).unwrap();
    assert_eq!(sweep_once(&w).await.outcome, SweepOutcome::Done);
    w.clock.advance(minutes(300));
    assert_eq!(sweep_once(&w).await.outcome, SweepOutcome::Done, "red for 5h");
    w.clock.advance(minutes(61));
    let r = sweep_once(&w).await;
    let SweepOutcome::Lockdown { reason, .. } = r.outcome else { panic!("{r}") };
    assert!(reason.contains("CI on `main` has been red since 2026-11-29T08:00:00Z (test: failure)"), "{reason}");
}

// ---------------------------------------------------------------------------
// Budgets
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_budget_exceeded_mid_run_stops_the_agent_and_sends_the_patient_to_the_chiefs() {
    let w = Ward::new(config_with(|t| t));
    let n = w.admit("expensive", &["ward:treat", "bug"]);
    w.start_run(n, "treat", "run-1").await;
    let budget = BudgetConfig {
        run_usd: 1.0,
        prices: Some(Prices { input: 3.0, output: 15.0, cache_write: None, cache_read: None }),
        ..BudgetConfig::default()
    };
    // A stream-json agent that never stops spending: each message costs $0.30.
    let out = w.dir.path().join("agent.stdout.log");
    let script = r#"i=0; while true; do i=$((i+1)); printf '{"type":"assistant","message":{"id":"m%s","usage":{"input_tokens":0,"output_tokens":20000}}}\n' "$i"; sleep 0.05; done"#;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdout(std::fs::File::create(&out).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let stop = tokio::select! {
        stop = ward::stage::watch::watch(&out, &budget, Output::ClaudeStream, Duration::from_secs(60), Duration::from_millis(20)) => stop,
        status = child.wait() => panic!("the agent ended by itself: {status:?}"),
    };
    let ward::stage::watch::Stop::Budget(breach, usage) = stop else { panic!("stopped for another reason: {stop:?}") };
    child.kill().await.unwrap();
    assert!(child.try_wait().unwrap().is_some(), "the agent is stopped");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(breach.limit, Limit::RunDollars);
    let usage = usage.unwrap();
    assert!(usage.cost_usd.unwrap() >= 1.0 && usage.cost_usd.unwrap() < 1.5, "{usage:?}");

    let config = {
        let mut c = w.config.clone();
        c.departments.budget = budget.clone();
        c
    };
    let notes = budget::over_budget_notes(
        &config,
        "treat",
        "run-1",
        &breach,
        Some(&usage),
        budget::Stopped::DuringRun,
        w.now(),
    );
    let patient = w.local.issue(n).await.unwrap();
    let chief = ward::transfer::Move::To(config.chief_label().to_string());
    ward::transfer::transfer(&*w.local, &config, &patient, ward::chart::Seen::NotRead, notes, chief).await.unwrap();
    assert_eq!(w.labels(n).await, vec!["bug", "ward:chief"]);
    let cost = &w.kinds(n, "COST").await[0];
    let recorded = budget::parse_cost_note(&cost.body).unwrap();
    assert_eq!(recorded.cost_usd.map(|c| (c * 100.0).round()), usage.cost_usd.map(|c| (c * 100.0).round()));
    assert_eq!(recorded.source, "claude-stream");
    let esc = &w.kinds(n, "ESCALATION").await[0];
    assert!(
        esc.body.contains("over the per-run limit of $1.00") && esc.body.contains("stopped the agent"),
        "{}",
        esc.body
    );

    // The patient's totals now trip its own limit before the next run.
    let notes = w.notes(n).await;
    let spend = budget::patient_spend(&notes, &config.departments.budget.send_back_set(&config));
    assert_eq!(spend.stage_visits, 1);
    let strict = BudgetConfig { patient_usd: 1.0, ..budget };
    assert_eq!(budget::check_patient(&strict, &spend).unwrap().limit, Limit::PatientDollars);
}

#[tokio::test]
async fn the_stage_runner_stops_an_agent_that_overspends_while_it_runs() {
    let w = Ward::new(config_with(|t| t));
    let h = w.hospital(|t| {
        t.replace("    run_usd: 10\n", "    run_usd: 1\n")
            .replace("    # prices: { input: 3, output: 15 }", "    prices: { input: 3, output: 15 }")
    });
    assert_eq!(h.config.departments.budget.run_usd, 1.0);
    assert!(h.config.departments.budget.prices.is_some());
    let n = w.admit("expensive", &["ward:treat"]);
    // Treatment starts only after an approved plan (the plan gate).
    support::seed_approved_plan(&h, n).await;
    let pid_file = w.dir.path().join("agent.pid");
    let script = format!(
        r#"echo $$ > {}; i=0; while true; do i=$((i+1)); printf '{{"type":"assistant","message":{{"id":"m%s","usage":{{"output_tokens":20000}}}}}}\n' "$i"; sleep 0.2; done"#,
        pid_file.display()
    );
    let req = StageRequest {
        label: Some("ward:treat".into()),
        agent_command: Some(vec!["sh".into(), "-c".into(), script]),
        ..StageRequest::new(n)
    };
    let result = stage::run_stage(&h, &req).await.unwrap();
    assert!(
        matches!(&result, StageResult::Refused { to: Some(to), reason, .. } if to == "ward:chief" && reason.contains("per-run limit")),
        "{result:?}"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    // Killed: gone, or a zombie waiting to be reaped (state `Z` in /proc).
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while running() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let alive = running();
    assert!(!alive, "the agent (pid {pid}) was killed");
    assert_eq!(w.labels(n).await, vec!["ward:chief"]);
    let cost = budget::parse_cost_note(&w.kinds(n, "COST").await[0].body).unwrap();
    assert!(cost.cost_usd.unwrap() >= 1.0, "{cost:?}");
    assert!(w.kinds(n, "ESCALATION").await[0].body.contains("The engine stopped the agent"));
}

// ---------------------------------------------------------------------------
// Groundedness
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_stage_runner_reruns_an_ungrounded_run_once_then_escalates() {
    let w = Ward::new(config_with(|t| t));
    let h = w.hospital(|t| t);
    let n = w.admit("invented facts", &["ward:diagnose"]);
    // A plan complete in form (the plan gate wants all five sections) whose
    // only fact, a file and line, is invented: groundedness alone rejects it.
    let notes = "<!-- WARD:TREATMENT_PLAN -->\n## Diagnosis\nThe bug is in `engine/ghost.rs:12`.\n\
                 ## Files to change\n- the file above\n## Tests to add\n- a regression test\n\
                 ## Risks\nNone known.\n## Open questions\nNone.\n\
                 <!-- /WARD:TREATMENT_PLAN -->\n<!-- WARD:OUTCOME plan-posted -->\n";
    let script = format!("cat > \"$WARD_NOTES\" <<'EOF'\n{notes}EOF\n");
    let req = StageRequest {
        label: Some("ward:diagnose".into()),
        agent_command: Some(vec!["sh".into(), "-c".into(), script]),
        ..StageRequest::new(n)
    };
    let first = stage::run_stage(&h, &req).await.unwrap();
    assert!(matches!(&first, StageResult::Invalid { reason, .. } if reason.contains("not grounded")), "{first:?}");
    assert_eq!(w.labels(n).await, vec!["ward:diagnose"], "the label stays for the rerun");
    assert_eq!(w.dispatched(), vec![n], "the stage is run once more");
    let g = w.kinds(n, "GROUNDEDNESS").await;
    assert!(
        g[0].body.contains("score: 0.00") && g[0].body.contains("`engine/ghost.rs:12` does not exist"),
        "{}",
        g[0].body
    );
    assert!(w.kinds(n, "TREATMENT_PLAN").await.is_empty(), "an invalid run's notes stay out of the chart");

    w.clock.advance(minutes(5));
    let second = stage::run_stage(&h, &req).await.unwrap();
    assert!(matches!(&second, StageResult::Refused { to: Some(to), .. } if to == "ward:chief"), "{second:?}");
    assert_eq!(w.labels(n).await, vec!["ward:chief"]);
    assert!(w.kinds(n, "ESCALATION").await[0].body.contains("both runs were ungrounded"));
}

#[tokio::test]
async fn an_ungrounded_note_is_invalid_reruns_once_then_escalates() {
    let w = Ward::new(config_with(|t| t));
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("engine")).unwrap();
    std::fs::write(tree.path().join("engine/chart.rs"), "fn a() {}\nfn b() {}\n#[test]\nfn appends_once() {}\n")
        .unwrap();
    let precedents: HashSet<String> = ["P-0001".to_string()].into();
    // Not a git repository: the folder is read as it is.
    let tree = groundedness::Tree::worktree(tree.path()).unwrap();
    let facts = Facts { tree: &tree, precedents: &precedents, after_treatment: true };

    let grounded = "## Treatment\nChanged `engine/chart.rs:2`, per P-0001.\n## Tests\n- `appends_once`\n";
    let s = groundedness::score([grounded], &facts);
    assert_eq!((s.checked.len(), s.grounded()), (3, 3), "{s:?}");
    assert_eq!(groundedness::decide(s.value(), 0.8, 0), Decision::Accept);

    let invented = "## Treatment\nFixed `engine/charts.rs` and engine/chart.rs:40, per P-0099.\n\
                    Kept engine/chart.rs intact.\n## Tests\n- `appends_twice`\n";
    let s = groundedness::score([invented], &facts);
    assert_eq!((s.checked.len(), s.grounded()), (5, 1), "{s:?}");
    let n = w.admit("p", &["ward:treat"]);
    let since = w.now();
    let threshold = w.config.departments.groundedness.threshold;
    let earlier = groundedness::earlier_invalid(&w.notes(n).await, "treat", since);
    assert_eq!(groundedness::decide(s.value(), threshold, earlier), Decision::Rerun);
    w.write(n, &[groundedness::groundedness_note(&s, threshold, "treat", "run-1", w.now())]).await;
    let note = &w.kinds(n, "GROUNDEDNESS").await[0];
    assert!(note.body.contains("score: 0.20") && note.body.contains("verdict: invalid"), "{}", note.body);
    assert!(note.body.contains("`engine/chart.rs:40` is out of range: the file has 4 lines"), "{}", note.body);
    assert!(note.body.contains("`P-0099` is not in the precedent log"), "{}", note.body);
    assert!(note.body.contains("`appends_twice` is not found"), "{}", note.body);

    // The rerun is no better: escalate.
    w.clock.advance(minutes(30));
    let earlier = groundedness::earlier_invalid(&w.notes(n).await, "treat", since);
    assert_eq!(earlier, 1);
    assert_eq!(groundedness::decide(s.value(), threshold, earlier), Decision::Escalate);

    // Before treatment, a plan may name a file it will create.
    let plan = "## Files\n- create `engine/new_module.rs`\n- change `engine/chart.rs`\n## Tests\n- `not_written_yet`\n";
    let before = Facts { after_treatment: false, ..facts };
    let s = groundedness::score([plan], &before);
    assert_eq!((s.checked.len(), s.grounded()), (2, 2), "{s:?}");
    let escape = groundedness::score(["see `../../etc/passwd.txt`"], &before);
    assert_eq!(escape.grounded(), 0, "{escape:?}");
}

// ---------------------------------------------------------------------------
// Safety report
// ---------------------------------------------------------------------------

/// Three patients through part of the pipeline, with costs and a stall.
async fn busy_week(w: &Ward) {
    let a = w.admit("cache invalidation", &["ward:admit"]);
    let b = w.admit("flaky login", &["ward:admit"]);
    let c = w.admit("slow query", &["ward:admit"]);
    let cost = |w: &Ward, stage: &str, run: &str, usd: f64| {
        let u = budget::Usage { cost_usd: Some(usd), source: "claude-result".into(), ..Default::default() };
        budget::cost_note(Some(&u), stage, run, w.now())
    };
    for (n, costs) in [(a, 1.0), (b, 2.5), (c, 0.5)] {
        w.clock.advance(minutes(10));
        w.start_run(n, "admit", &format!("a{}", n.0)).await;
        w.clock.advance(minutes(5));
        w.write(n, &[cost(w, "admit", &format!("a{}", n.0), costs)]).await;
        w.finish_run(n, "admit", &format!("a{}", n.0), "ready").await;
        w.clock.advance(minutes(40));
        w.start_run(n, "diagnose", &format!("d{}", n.0)).await;
        w.clock.advance(minutes(20));
        w.write(n, &[cost(w, "diagnose", &format!("d{}", n.0), costs * 3.0)]).await;
        w.finish_run(n, "diagnose", &format!("d{}", n.0), "plan-posted").await;
    }
    // a: plan rejected once, then approved, treated, reviewed, discharged.
    w.clock.advance(minutes(15));
    w.start_run(a, "plan-review", "pr1").await;
    w.finish_run(a, "plan-review", "pr1", "reject").await;
    w.clock.advance(minutes(30));
    w.start_run(a, "diagnose", "d2").await;
    w.finish_run(a, "diagnose", "d2", "plan-posted").await;
    w.clock.advance(minutes(20));
    w.start_run(a, "plan-review", "pr2").await;
    w.finish_run(a, "plan-review", "pr2", "approve").await;
    w.clock.advance(minutes(120));
    w.start_run(a, "treat", "t1").await;
    w.write(a, &[cost(w, "treat", "t1", 12.0)]).await;
    w.finish_run(a, "treat", "t1", "treated").await;
    w.clock.advance(minutes(25));
    w.start_run(a, "code-review", "cr1").await;
    w.finish_run(a, "code-review", "cr1", "changes-requested").await;
    w.clock.advance(minutes(50));
    w.start_run(a, "treat", "t2").await;
    w.finish_run(a, "treat", "t2", "treated").await;
    w.clock.advance(minutes(25));
    w.start_run(a, "code-review", "cr2").await;
    w.finish_run(a, "code-review", "cr2", "approve").await;
    w.clock.advance(minutes(10));
    w.start_run(a, "discharge", "dc1").await;
    w.finish_run(a, "discharge", "dc1", "discharged").await;
    // b and c stall in plan review; the sweep revives them, then escalates b.
    for _ in 0..4 {
        w.clock.advance(minutes(65));
        sweep_once(w).await;
    }
}

#[tokio::test]
async fn the_safety_report_counts_what_happened() {
    let w = Ward::new(config_with(|t| t));
    busy_week(&w).await;
    let (patients, problems) = report::gather(&*w.local, &w.config, None).await.unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let from = w.now() - chrono::Duration::days(7);
    let r = report::compute(&w.config, &patients, from, w.now());
    assert_eq!((r.admitted, r.discharged), (3, 1));
    assert_eq!(r.escalated, 2, "b and c stalled past two re-triggers");
    assert_eq!(r.stalled_patients, 2);
    assert_eq!(r.sweep_escalations, 2);
    let stage = |name: &str| r.stages.iter().find(|s| s.name == name).unwrap().clone();
    assert_eq!(stage("plan-review").send_backs.get("reject"), Some(&1));
    assert_eq!(stage("code-review").send_backs.get("changes-requested"), Some(&1));
    assert_eq!(stage("plan-review").sweeps, 4);
    assert_eq!(stage("diagnose").entered, 4);
    // Admitted together, triaged one after the other: stays of 15m, 90m, 165m.
    assert_eq!(stage("admit").median(), Some(90.0 * 60.0));
    assert_eq!(stage("admit").p90(), Some(165.0 * 60.0));
    assert!((r.total_cost - (4.0 * 4.0 + 12.0)).abs() < 1e-9, "{}", r.total_cost);
    assert_eq!(r.costs[0].issue, 1, "a cost most");
    assert!((stage("treat").cost - 12.0).abs() < 1e-9);
    let md = report::render_markdown(&r);
    assert!(md.contains("| 3 | 1 | 2 | 2 | 2 | $28.00 |"), "{md}");
    assert!(md.contains("| plan-review |") && md.contains("1 reject"), "{md}");

    // A week later, nothing of this is in the window.
    let later = w.now() + chrono::Duration::days(30);
    let r = report::compute(&w.config, &patients, later - chrono::Duration::days(7), later);
    assert_eq!((r.admitted, r.total_cost), (0, 0.0));
    // And its charts are not even read for the closed patient (a): only b's and c's.
    let counting = Counting::new(Shared(w.local.clone()));
    let (quiet, _) = report::gather(&counting, &w.config, Some(later - chrono::Duration::days(7))).await.unwrap();
    assert_eq!(quiet.len(), 3);
    assert_eq!(counting.of("read_chart"), 2, "{:?}", counting.calls.lock().unwrap());
}

#[tokio::test]
async fn the_html_report_renders_its_charts_in_headless_chromium() {
    let w = Ward::new(config_with(|t| t));
    busy_week(&w).await;
    let (patients, _) = report::gather(&*w.local, &w.config, None).await.unwrap();
    let r = report::compute(&w.config, &patients, w.now() - chrono::Duration::days(7), w.now());
    let html = report::render_html(&r);
    assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"), "self-contained");
    let page = w.dir.path().join("report.html");
    std::fs::write(&page, &html).unwrap();
    if std::env::var_os("WARD_SKIP_BROWSER").is_some() {
        eprintln!("WARD_SKIP_BROWSER is set: not opening the page in Chromium");
        return;
    }
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("this test needs Chromium: `apt-get install -y chromium` (or set WARD_SKIP_BROWSER=1)");
    let shot = w.dir.path().join("report.png");
    let profile = w.dir.path().join("chromium-profile");
    let out = std::process::Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1800"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    if let Some(keep) = std::env::var_os("WARD_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let px = |x: usize, y: usize| {
        let i = (y * info.width as usize + x) * channels;
        (buf[i], buf[i + 1], buf[i + 2])
    };
    // Count the chart colours: stage boxes (blue #1d76db) and cost bars (#d93f0b).
    let (mut blue, mut orange, mut ink) = (0usize, 0usize, 0usize);
    for y in 0..info.height as usize {
        for x in 0..info.width as usize {
            let (r, g, b) = px(x, y);
            if r.abs_diff(0x1d) < 12 && g.abs_diff(0x76) < 12 && b.abs_diff(0xdb) < 12 {
                blue += 1;
            }
            if r.abs_diff(0xd9) < 12 && g.abs_diff(0x3f) < 12 && b.abs_diff(0x0b) < 12 {
                orange += 1;
            }
            if r < 250 || g < 250 || b < 250 {
                ink += 1;
            }
        }
    }
    let total = (info.width * info.height) as usize;
    assert!(ink > total / 50, "the page is blank: {ink} non-white pixels of {total}");
    assert!(blue > 3_000, "the flow chart's stage boxes did not render ({blue} blue pixels)");
    assert!(orange > 3_000, "the cost chart's bars did not render ({orange} orange pixels)");
}

// ---------------------------------------------------------------------------
// Against the fake GitHub
// ---------------------------------------------------------------------------

mod on_github {
    use super::support::fake_github::{ENGINE, FakeGitHub};
    use super::*;

    fn at(minutes_after_noon: i64) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z").unwrap().with_timezone(&chrono::Utc)
            + chrono::Duration::minutes(minutes_after_noon)
    }

    #[tokio::test]
    async fn the_sweep_revives_repairs_and_keeps_its_state_on_github() {
        let gh = FakeGitHub::start().await;
        let config = config_with(|t| t);
        let (stalled, healthy, twice) = {
            let mut s = gh.state();
            (
                s.add_issue("stalled", "b", "alice", &["ward:admit", "bug"]),
                s.add_issue("healthy", "b", "alice", &["ward:treat"]),
                s.add_issue("two labels", "b", "alice", &["ward:treat", "ward:code-review"]),
            )
        };
        let forge = gh.forge();
        // On GitHub the search finds the candidates: patients quiet for
        // their stage's window. A minute after admission, nobody is.
        let first = sweep::sweep(&forge, &config, at(1), &Facilities::default(), None).await.unwrap();
        assert!(first.searched, "{first}");
        assert_eq!((first.listed, first.actions.len()), (0, 0), "{first}");
        assert!(gh.state().file("ward-charts", "charts/0.md").unwrap().contains("ward-sweep-state v1"));

        // 65 minutes on: the stalled patient (admit: 1h) and the one with
        // two labels (code review's window is 40m) are found quiet; the
        // healthy one (treat: 70m) is not.
        let r = sweep::sweep(&forge, &config, at(65), &Facilities::default(), None).await.unwrap();
        assert_eq!((r.listed, r.actions.len()), (2, 2), "{r}");
        assert!(matches!(&r.actions[0], sweep::Action::Retriggered { issue, .. } if issue.0 == stalled));
        assert!(matches!(&r.actions[1], sweep::Action::Escalated { issue, .. } if issue.0 == twice));
        assert_eq!(gh.state().labels_of(twice), vec!["ward:chief".to_string()]);
        assert_eq!(gh.state().dispatches.len(), 1);
        let chart = gh.state().file("ward-charts", &format!("charts/{stalled}.md")).unwrap();
        assert!(chart.contains("<!-- WARD:SWEEP run=sweep-") && chart.contains("role=engine"), "{chart}");
        assert_eq!(gh.state().labels_of(stalled), vec!["ward:admit".to_string(), "bug".to_string()]);
        assert_eq!(gh.state().labels_of(healthy), vec!["ward:treat".to_string()]);
        let state = ward::state::load(&forge).await.unwrap();
        assert_eq!(state.lock, None);
        gh.assert_known_routes();
    }

    #[tokio::test]
    async fn lockdown_and_the_report_work_on_github() {
        let gh = FakeGitHub::start().await;
        gh.state().add_collaborator("chief-ana", "maintain");
        gh.state().add_collaborator("dev-bo", "write");
        let config = config_with(|t| t);
        let forge = gh.forge();
        let (l, new) = lockdown::declare(&forge, "Docker host down", "dev-bo", at(0)).await.unwrap();
        assert!(new);
        assert_eq!(gh.state().labels_of(l.issue.0), vec!["ward:lockdown".to_string()]);
        let active = lockdown::active_lockdown(&forge).await.unwrap().unwrap();
        assert_eq!((active.reason.as_str(), active.declared_by.as_str()), ("Docker host down", "dev-bo"));
        assert!(matches!(lockdown::lift(&forge, "dev-bo", at(1)).await, Err(LockdownError::LiftNotAllowed { .. })));
        assert_eq!(lockdown::lift(&forge, "chief-ana", at(2)).await.unwrap(), vec![l.issue]);
        assert!(!gh.state().issue(l.issue.0).open);
        assert_eq!(lockdown::active_lockdown(&forge).await.unwrap(), None);

        let n = gh.state().add_issue("patient", "b", "alice", &["ward:admit"]);
        sweep::sweep(&forge, &config, at(1), &Facilities::default(), None).await.unwrap();
        sweep::sweep(&forge, &config, at(70), &Facilities::default(), None).await.unwrap();
        let (patients, problems) = report::gather(&forge, &config, None).await.unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let r = report::compute(&config, &patients, at(-60 * 24 * 7), at(80));
        assert_eq!((r.admitted, r.stalled_patients), (1, 1), "{}", report::render_markdown(&r));
        assert_eq!(patients.len(), 1, "the lockdown issue is no patient");
        assert_eq!(patients[0].issue.number.0, n);
        let _ = ENGINE;
    }
}

// ---------------------------------------------------------------------------
// The commands
// ---------------------------------------------------------------------------

#[test]
fn the_department_commands_work_from_the_command_line() {
    use support::{Sandbox, stderr, stdout};
    let sb = Sandbox::new();
    let out = sb.ward(&["admit", "--title", "stuck patient"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let admitted_at = sb.issue_json(1)["created_at"].as_str().unwrap().to_string();
    let t0 = sweep::parse_now(&admitted_at).unwrap();
    let at = |minutes: i64| (t0 + chrono::Duration::minutes(minutes)).to_rfc3339();

    let out = sb.ward(&["sweep", "--now", &at(1)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("listed 1 patients, 0 due"), "{}", stdout(&out));
    let out = sb.ward(&["sweep", "--now", &at(90)]);
    assert!(stdout(&out).contains("#1: re-triggered stage `admit` (attempt 1)"), "{}", stdout(&out));
    let out = sb.ward(&["sweep", "--now", "yesterday"]);
    assert_eq!(out.status.code(), Some(2), "bad input: {}", stderr(&out));
    assert!(stderr(&out).contains("--now: `yesterday` is not a time"), "{}", stderr(&out));

    let out = sb.ward(&["lockdown", "on", "--reason", "Docker host down"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb.ward(&["lockdown", "status"]);
    assert_eq!(out.status.code(), Some(3), "a lockdown is in force");
    assert!(
        stdout(&out).contains("Docker host down") && stdout(&out).contains("declared by tester"),
        "{}",
        stdout(&out)
    );
    let out = sb.ward(&["stage", "--issue", "1"]);
    assert_eq!(out.status.code(), Some(3), "locked: {}", stderr(&out));
    assert!(stdout(&out).contains("refused") && stdout(&out).contains("Docker host down"), "{}", stdout(&out));
    assert_eq!(sb.labels(1), vec!["ward:admit"]);
    // Who lifts it is who the forge says acts (here the local person,
    // `tester`), never a name on the command line.
    let out = sb.ward(&["lockdown", "off", "--actor", "chief-ana"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("unexpected argument '--actor'"), "{}", stderr(&out));
    assert_eq!(sb.ward(&["lockdown", "status"]).status.code(), Some(3), "still in force");
    let out = sb.ward(&["lockdown", "off"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // What it says is what happened: the patient that waited is dispatched again.
    assert!(stdout(&out).contains("re-triggered the patients that waited: #1"), "{}", stdout(&out));
    let queue = sb.read(".ward/forge/dispatches.jsonl");
    assert!(queue.lines().last().unwrap().contains(r#""issue":1,"label":"ward:admit""#), "{queue}");
    assert_eq!(sb.ward(&["lockdown", "status"]).status.code(), Some(0));
    let out = sb.ward(&["stage", "--issue", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sb.labels(1), vec!["ward:diagnose"]);

    let html = sb.root().join("report.html");
    let out = sb.ward(&["report", "--since", "30d", "--html", html.to_str().unwrap(), "--post"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("# ward safety report"), "{}", stdout(&out));
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg id=\"chart-flow\""));
    assert!(stderr(&out).contains("posted the report as #3"), "{}", stderr(&out));
    let out = sb.ward(&["report", "--since", "a while"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// Research department: the role's policy change (issue 31)
// ---------------------------------------------------------------------------

mod research {
    use std::path::Path;

    use ward::chart::{Note, NoteKind, NoteMeta, Seen, Sentinels, append};
    use ward::forge::local::LocalForge;
    use ward::forge::{Forge, Issue, NewIssue, PullState};

    use super::support::{Sandbox, git, stderr, stdout};

    const BOT: &str = "github-actions[bot]";

    /// `ward init` in a git repository on `main` (ward.yml's research
    /// section as `research`, committed), and a month's record on its local
    /// forge: plan review sent #1, #2 and #3 back to diagnosis (a gate that
    /// points at the fellow's role), and with `escalations` two of them
    /// escalated from diagnosis too (a finding that points at no file).
    async fn hospital(research: &str, escalations: bool) -> (Sandbox, LocalForge) {
        let s = Sandbox::new();
        s.edit_config(
            "    max_proposals: 3        # issues and the policy pull request per run (--max overrides)\n    agent: false",
            research,
        );
        s.write(".gitignore", ".ward/\ncharts/*.md\n");
        git(s.root(), &["init", "--quiet", "--initial-branch", "main"]);
        git(s.root(), &["add", "--all"]);
        git(s.root(), &["commit", "--quiet", "-m", "ward init"]);
        let forge = LocalForge::new(s.root(), BOT);
        let sentinels = Sentinels::new("WARD");
        let note = |kind: NoteKind, stage: &str, body: &str| Note {
            kind,
            meta: NoteMeta { run: "r1".into(), stage: stage.into(), role: "x".into(), at: chrono::Utc::now() },
            body: body.into(),
        };
        for n in 1..=3 {
            let title = format!("patient {n}");
            let new = NewIssue { title, body: "work".into(), labels: vec!["ward:diagnose".into()] };
            let issue = forge.admit(new).unwrap();
            let mut notes = vec![note(NoteKind::Outcome, "plan-review", "reject")];
            if escalations && n < 3 {
                notes.push(note(NoteKind::Escalation, "diagnose", "Which behaviour is wanted?"));
            }
            append(&forge, &sentinels, issue.number, Seen::NotRead, &notes).await.unwrap();
        }
        (s, forge)
    }

    const ROLE_ON: &str = "    max_proposals: 3        # per run\n    agent: true";

    async fn proposals(forge: &LocalForge) -> Vec<Issue> {
        let issues = forge.all_issues().await.unwrap();
        issues.into_iter().filter(|i| i.labels.iter().any(|l| l == "ward:proposal")).collect()
    }

    fn research_branches(s: &Sandbox) -> String {
        git(s.root(), &["branch", "--list", "ward/research-*"])
    }

    #[tokio::test]
    async fn the_role_opens_one_policy_pull_request_that_touches_the_roles_only_and_waits_for_a_chief() {
        let (s, forge) = hospital(ROLE_ON, false).await;
        let main = git(s.root(), &["rev-parse", "main"]);
        let out = s.ward(&["research", "--since", "30d"]);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("is pull request #1 (`ward/research-"), "{}", stdout(&out));
        assert!(stdout(&out).contains("waiting for a chief"), "{}", stdout(&out));

        let branch = research_branches(&s).trim().to_string();
        assert!(branch.starts_with("ward/research-"), "{branch}");
        let pulls = forge.pull_requests_of_branch(&branch).await.unwrap();
        assert_eq!(pulls.len(), 1, "{pulls:#?}");
        let pull = &pulls[0];
        assert_eq!((pull.state, pull.base_branch.as_str(), pull.author.as_str()), (PullState::Open, "main", BOT));
        assert_eq!(forge.read_pull(pull.number).unwrap().labels, ["ward:proposal"], "at the proposal label only");
        assert_eq!(git(s.root(), &["rev-parse", "main"]), main, "not merged: main did not move");
        assert_eq!(pull.head_sha, git(s.root(), &["rev-parse", &branch]));
        // What it changed: the fellow's role (plan review sends work back to
        // diagnosis), and nothing else; committed by ward on main's tip.
        let files = git(s.root(), &["diff", "--name-only", &format!("main...{branch}")]);
        assert_eq!(files, "roles/fellow.md");
        let added = git(s.root(), &["diff", &format!("main...{branch}")]);
        assert!(added.contains("+## From the research department"), "{added}");
        assert_eq!(git(s.root(), &["log", "-1", "--format=%an", &branch]), "ward");
        // Its body: the key's marker, the evidence, the role's account fenced.
        let key = branch.trim_start_matches("ward/research-");
        assert!(pull.body.starts_with(&format!("<!-- ward-research key={key} -->\n")), "{}", pull.body);
        assert!(pull.body.contains("sent work back 3 times in the period (#1, #2, #3)"), "{}", pull.body);
        assert!(pull.body.contains("```text\nFiles: `roles/fellow.md`."), "{}", pull.body);
        assert!(pull.body.contains("a chief reviews it"), "{}", pull.body);
        // The pull request is the finding's proposal: no issue for it, no
        // stage started, the worktree gone.
        assert!(proposals(&forge).await.is_empty(), "{:#?}", proposals(&forge).await);
        assert!(forge.dispatches().unwrap().is_empty());
        assert!(!s.root().join(".ward/home/research").join(key).exists(), "the worktree is removed");
        assert_eq!(git(s.root(), &["worktree", "list"]).lines().count(), 1);

        // Again: nothing new, no agent.
        let again = s.ward(&["research", "--since", "30d"]);
        assert!(again.status.success(), "{}", stderr(&again));
        assert!(stdout(&again).contains("1 proposal(s) found, 1 filed before"), "{}", stdout(&again));
        assert!(!stdout(&again).contains("pull request #"), "{}", stdout(&again));
        assert_eq!(forge.pull_requests_of_branch(&branch).await.unwrap().len(), 1);
        assert!(proposals(&forge).await.is_empty());

        // A person closes it: it stays declined.
        forge.update_pull(pull.number, |r| r.pull.as_mut().unwrap().state = PullState::Closed).unwrap();
        let closed = s.ward(&["research", "--since", "30d"]);
        assert!(stdout(&closed).contains("1 filed before"), "{}", stdout(&closed));
        assert_eq!(forge.pull_requests_of_branch(&branch).await.unwrap().len(), 1, "never opened twice");
    }

    #[tokio::test]
    async fn a_run_killed_after_the_pull_request_is_not_repeated() {
        let (s, forge) = hospital(ROLE_ON, true).await;
        let out = s.ward_env(&["research", "--since", "30d"], &[("WARD_FAULT", "after-policy-filed")]);
        assert_eq!(out.status.code(), Some(86), "{}", stderr(&out));
        assert!(proposals(&forge).await.is_empty(), "killed before the issues");
        let out = s.ward(&["research", "--since", "30d"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("2 proposal(s) found, 1 filed before"), "{}", stdout(&out));
        let branch = research_branches(&s).trim().to_string();
        assert_eq!(forge.pull_requests_of_branch(&branch).await.unwrap().len(), 1);
        let filed = proposals(&forge).await;
        assert_eq!(filed.len(), 1, "the escalations' finding, as an issue: {filed:#?}");
        assert!(filed[0].title.contains("escalated from `diagnose`"), "{}", filed[0].title);
    }

    /// A role that strays: the change is refused with a sentence, no branch
    /// and no pull request; its finding goes to a person as an issue.
    async fn strays(edits: &str) -> (Sandbox, LocalForge, String) {
        let (s, forge) = hospital(ROLE_ON, false).await;
        let script = s.root().join(".ward/research-script.yaml");
        let body = format!(
            "outcome: proposed\nnotes:\n  - kind: TRIAGE\n    body: \"## Summary\\nA change.\"\nedits:\n{edits}"
        );
        std::fs::create_dir_all(script.parent().unwrap()).unwrap();
        std::fs::write(&script, body).unwrap();
        s.edit_config(
            r#"command: ["{ward}", "stand-in"]"#,
            &format!(r#"command: ["{{ward}}", "stand-in", "--script", "{}"]"#, script.display()),
        );
        let out = s.ward(&["research", "--since", "30d"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(research_branches(&s).is_empty(), "no branch: {}", research_branches(&s));
        assert!(!s.root().join(".ward/forge/pulls").exists(), "no pull request");
        let filed = proposals(&forge).await;
        assert_eq!(filed.len(), 1, "the finding as an issue instead: {filed:#?}");
        assert_eq!(git(s.root(), &["worktree", "list"]).lines().count(), 1, "the worktree is removed");
        (s, forge, stdout(&out))
    }

    #[tokio::test]
    async fn a_role_that_appends_to_the_precedent_log_is_refused_and_nothing_is_filed_for_its_change() {
        let edits = "  - path: skills/plan-format.md\n    append: \"More.\\n\"\n  - path: precedents/log.yaml\n    \
                     append: \"- id: P-0001\\n\"\n";
        let (_s, _forge, said) = strays(edits).await;
        assert!(
            said.contains("the research role's change was refused: the role changed `precedents/log.yaml`"),
            "{said}"
        );
        assert!(said.contains("the precedent log is human-only"), "{said}");
        assert!(said.contains("nothing was filed for it"), "{said}");
    }

    #[tokio::test]
    async fn a_role_that_edits_ward_yml_is_refused() {
        let edits = "  - path: roles/fellow.md\n    append: \"More.\\n\"\n  - path: .github/ward.yml\n    \
                     append: \"# more\\n\"\n";
        let (_s, _forge, said) = strays(edits).await;
        assert!(said.contains("the role changed `.github/ward.yml`, outside `skills/` and `roles/`"), "{said}");
        assert!(said.contains("skills and roles, nothing else"), "{said}");
    }

    /// A hospital on the fake GitHub with the role on, loaded as an Actions
    /// job loads it (the push target with the token), and a record of
    /// three send-backs of plan review.
    async fn on_github()
    -> (super::support::fake_github::FakeGitHub, Sandbox, ward::hospital::Hospital, Vec<ward::report::PatientRecord>)
    {
        use ward::report::PatientRecord;

        use super::support::departments::plan_review_rejected;
        use super::support::fake_github::FakeGitHub;

        let gh = FakeGitHub::start().await;
        let s = Sandbox::new();
        s.edit_config(
            "    max_proposals: 3        # issues and the policy pull request per run (--max overrides)\n    agent: false",
            ROLE_ON,
        );
        s.write(".gitignore", ".ward/\n");
        git(s.root(), &["init", "--quiet", "--initial-branch", "main"]);
        git(s.root(), &["add", "--all"]);
        git(s.root(), &["commit", "--quiet", "-m", "ward init"]);
        gh.seed(s.root());
        // docs/github.md, step 3: "Allow GitHub Actions to create and approve pull requests".
        gh.state().actions_can_create_pull_requests = true;
        let h = gh.hospital(s.root());

        let records: Vec<PatientRecord> = (1..=3)
            .map(|n| {
                let number = gh.state().add_issue(&format!("patient {n}"), "work", "maria", &["ward:diagnose"]);
                let issue = Issue {
                    number: ward::forge::IssueNumber(number),
                    title: format!("patient {n}"),
                    body: "work".into(),
                    author: "maria".into(),
                    state: ward::forge::IssueState::Open,
                    labels: vec!["ward:diagnose".into()],
                };
                PatientRecord { issue, events: Vec::new(), notes: vec![plan_review_rejected(number)] }
            })
            .collect();
        (gh, s, h, records)
    }

    /// The one pull request the role opened on the fake GitHub: what it
    /// changed is the fellow's role only, labelled, main untouched.
    fn assert_one_policy_pull(gh: &super::support::fake_github::FakeGitHub, s: &Sandbox) {
        let (files, pull) = {
            let st = gh.state();
            let pull = st.pulls.values().find(|p| p.head.starts_with("ward/research-")).expect("opened").clone();
            (st.branch_files(&pull.head), pull)
        };
        assert!(pull.open && !pull.merged, "not merged");
        assert_eq!(pull.labels, ["ward:proposal"], "labelled through the issues API");
        assert_eq!(pull.author, "github-actions[bot]");
        let main_files = gh.state().branch_files("main");
        let changed: Vec<&String> = files.keys().filter(|f| main_files.get(*f) != files.get(*f)).collect();
        assert_eq!(changed, ["roles/fellow.md"], "pushed with the change, and only it");
        let main = git(s.root(), &["rev-parse", "main"]);
        assert_eq!(gh.state().branch_head("main"), Some(main), "main untouched");
        assert_eq!(gh.state().pulls.values().filter(|p| p.head.starts_with("ward/research-")).count(), 1);
    }

    /// On the fake GitHub: the branch pushed with the token, the pull
    /// request opened and labelled through the issues API, once.
    #[tokio::test]
    async fn on_the_fake_github_the_role_pushes_its_branch_and_opens_one_labelled_pull_request() {
        use ward::research::RoleStep;
        use ward::research::policy::Role;

        let (gh, s, h, records) = on_github().await;
        let role = Role { hospital: &h, run: "r1".into(), command: None };
        let first = ward::research::file_with_role(&*h.forge, &h.config, &records, 3, Some(RoleStep::Run(&role)))
            .await
            .unwrap();
        assert!(first.to_string().contains("is pull request #4 (`ward/research-"), "{first}");
        assert_one_policy_pull(&gh, &s);
        assert!(first.filed.is_empty(), "the pull request is the finding's proposal: {first}");

        let again = ward::research::file_with_role(&*h.forge, &h.config, &records, 3, Some(RoleStep::Run(&role)))
            .await
            .unwrap();
        assert_eq!((again.known, again.filed.len(), again.policy.is_none()), (1, 0, true), "{again}");
        assert_one_policy_pull(&gh, &s);
        gh.assert_known_routes();
    }

    /// On the fake GitHub in two jobs: the visit with a read-only token
    /// (any write it tried would be refused) seals the role's commit; the
    /// record with the write token pushes it and opens one labelled pull
    /// request; the same visit recorded again opens nothing.
    #[tokio::test]
    async fn on_the_fake_github_a_visit_with_a_read_only_token_then_its_record_opens_one_pull_request() {
        use ward::research::RoleStep;
        use ward::research::policy::Role;

        use super::support::fake_github::{ENGINE, Permissions, REPO};

        let (gh, s, h, records) = on_github().await;
        let read_only = Permissions::of(&[("contents", "read"), ("issues", "read"), ("pull-requests", "read")]);
        let token = gh.state().mint_token(ENGINE, read_only, true);
        let visit_forge = gh.forge_with(&token, REPO);
        let role = Role { hospital: &h, run: "r1".into(), command: None };
        let dir = s.root().join(".ward/research-visit");
        let sealed = ward::research::visit(&visit_forge, &h.config, &records, 3, Some(&role), &dir).await.unwrap();
        assert_eq!(sealed.outcome, ward::research::sealed::Outcome::Proposed, "{sealed:?}");
        assert!(dir.join("research.bundle").is_file());
        assert!(gh.state().pulls.is_empty(), "the visit opens nothing");
        assert!(gh.state().branch_head(&format!("ward/research-{}", sealed.key.clone().unwrap())).is_none());

        let sealed = ward::research::sealed::Sealed::open(&dir).unwrap();
        let step = || RoleStep::Record { hospital: &h, sealed: &sealed, dir: &dir };
        let first = ward::research::file_with_role(&*h.forge, &h.config, &records, 3, Some(step())).await.unwrap();
        assert!(first.to_string().contains("is pull request #4 (`ward/research-"), "{first}");
        assert_one_policy_pull(&gh, &s);
        let again = ward::research::file_with_role(&*h.forge, &h.config, &records, 3, Some(step())).await.unwrap();
        assert_eq!((again.known, again.filed.len(), again.policy.is_none()), (1, 0, true), "{again}");
        assert_one_policy_pull(&gh, &s);
        gh.assert_known_routes();
    }

    // -----------------------------------------------------------------
    // The two jobs: `ward research --out` (read-only) and `--visit` (writes)
    // -----------------------------------------------------------------

    /// The key the sealed visit in `dir` names.
    fn sealed_key(dir: &Path) -> String {
        let sealed: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("research.json")).unwrap()).unwrap();
        sealed["key"].as_str().expect("a key").to_string()
    }

    /// A visit sealed by `ward research --out` in a fresh hospital, its
    /// folder, and the finding's key.
    async fn sealed_visit() -> (Sandbox, LocalForge, std::path::PathBuf, String) {
        let (s, forge) = hospital(ROLE_ON, false).await;
        let dir = s.root().join(".ward/research-visit");
        let out = s.ward(&["research", "--since", "30d", "--out", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("ward committed the research role's change"), "{}", stdout(&out));
        let key = sealed_key(&dir);
        (s, forge, dir, key)
    }

    #[tokio::test]
    async fn a_visit_sealed_apart_then_recorded_opens_one_labelled_pull_request_and_a_second_record_nothing() {
        let (s, forge, dir, key) = sealed_visit().await;
        // The visit wrote nothing: no branch, no pull request, no issue.
        assert!(research_branches(&s).is_empty(), "the visit leaves no branch: {}", research_branches(&s));
        assert!(!s.root().join(".ward/forge/pulls").exists(), "no pull request");
        assert!(proposals(&forge).await.is_empty());
        assert!(dir.join("research.bundle").is_file() && dir.join("notes.md").is_file());

        let out = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("is pull request #1 (`ward/research-"), "{}", stdout(&out));
        let branch = format!("ward/research-{key}");
        assert_eq!(research_branches(&s).trim(), branch);
        let pulls = forge.pull_requests_of_branch(&branch).await.unwrap();
        assert_eq!(pulls.len(), 1, "{pulls:#?}");
        assert_eq!(forge.read_pull(pulls[0].number).unwrap().labels, ["ward:proposal"]);
        assert_eq!(git(s.root(), &["diff", "--name-only", &format!("main...{branch}")]), "roles/fellow.md");
        assert_eq!(git(s.root(), &["log", "-1", "--format=%an", &branch]), "ward");
        assert!(proposals(&forge).await.is_empty(), "the pull request is the finding's proposal");

        // The same sealed visit recorded again, and a whole run: nothing new.
        let again = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
        assert!(again.status.success(), "{}", stderr(&again));
        assert!(stdout(&again).contains("1 proposal(s) found, 1 filed before"), "{}", stdout(&again));
        assert!(!stdout(&again).contains("pull request #"), "{}", stdout(&again));
        let whole = s.ward(&["research", "--since", "30d"]);
        assert!(stdout(&whole).contains("1 filed before"), "{}", stdout(&whole));
        assert_eq!(forge.pull_requests_of_branch(&branch).await.unwrap().len(), 1, "one pull request");
    }

    /// Replaces the sealed visit's bundle with one of a commit of `edits`
    /// (path, line appended) on main's tip, on the finding's branch, made
    /// by hand: what a visit job the agent took over could seal.
    fn forge_bundle(s: &Sandbox, dir: &Path, key: &str, edits: &[(&str, &str)]) {
        let clone = tempfile::tempdir().unwrap();
        let work = clone.path().join("w");
        git(s.root(), &["clone", "--quiet", s.root().to_str().unwrap(), work.to_str().unwrap()]);
        let branch = format!("ward/research-{key}");
        git(&work, &["checkout", "--quiet", "-b", &branch]);
        for (path, line) in edits {
            let file = work.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            let mut text = std::fs::read_to_string(&file).unwrap_or_default();
            text.push_str(line);
            text.push('\n');
            std::fs::write(&file, text).unwrap();
        }
        git(&work, &["add", "--all"]);
        git(&work, &["commit", "--quiet", "-m", "Research: a forged change"]);
        let bundle = dir.join("research.bundle");
        std::fs::remove_file(&bundle).unwrap();
        git(
            &work,
            &["bundle", "create", "--quiet", bundle.to_str().unwrap(), &format!("refs/heads/{branch}"), "^main"],
        );
    }

    #[tokio::test]
    async fn a_forged_visit_that_changes_github_or_the_precedent_log_is_refused_by_the_record_step() {
        for (path, said) in [
            (".github/ward.yml", "the role changed `.github/ward.yml`, outside `skills/` and `roles/`"),
            ("precedents/log.yaml", "the precedent log is human-only"),
        ] {
            let (s, forge, dir, key) = sealed_visit().await;
            // The sealed account still says "proposed": only the commit lies.
            forge_bundle(&s, &dir, &key, &[("roles/fellow.md", "More."), (path, "# more")]);
            let out = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
            assert!(out.status.success(), "{}", stderr(&out));
            assert!(stdout(&out).contains("the research role's change was refused"), "{}", stdout(&out));
            assert!(stdout(&out).contains(said), "{path}: {}", stdout(&out));
            assert!(research_branches(&s).is_empty(), "nothing pushed: {}", research_branches(&s));
            assert!(!s.root().join(".ward/forge/pulls").exists(), "no pull request");
            let filed = proposals(&forge).await;
            assert_eq!(filed.len(), 1, "the finding goes to a person as an issue: {filed:#?}");
        }
    }

    #[tokio::test]
    async fn a_stale_or_garbled_visit_is_a_sentence_and_changes_nothing() {
        let (s, forge, dir, _key) = sealed_visit().await;
        // main moved since the visit: the change is stale.
        s.write("README.md", "moved\n");
        git(s.root(), &["add", "README.md"]);
        git(s.root(), &["commit", "--quiet", "-m", "moved"]);
        let stale = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
        assert!(stale.status.success(), "{}", stderr(&stale));
        assert!(stdout(&stale).contains("the base moved since the visit"), "{}", stdout(&stale));
        assert!(research_branches(&s).is_empty());

        let (s, forge2, dir, _key) = sealed_visit().await;
        drop(forge);
        std::fs::write(dir.join("research.json"), "{\"run\": \"r\", \"outcome\": ").unwrap();
        let garbled = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
        assert_eq!(garbled.status.code(), Some(2), "{}", stderr(&garbled));
        assert!(stderr(&garbled).contains("research.json is not a sealed research visit"), "{}", stderr(&garbled));
        let missing = s.ward(&["research", "--since", "30d", "--visit", s.root().join("nowhere").to_str().unwrap()]);
        assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
        assert!(stderr(&missing).contains("does not exist"), "{}", stderr(&missing));
        assert!(proposals(&forge2).await.is_empty(), "nothing filed");
        assert!(research_branches(&s).is_empty() && !s.root().join(".ward/forge/pulls").exists());
    }

    /// `AKIA` and 16 more of A-Z2-7: gitleaks' AWS access key rule, built
    /// here so that this file holds none.
    fn aws_key() -> String {
        format!("AKIA{}", "Z7VRSQ5TL3KXWMPE")
    }

    #[tokio::test]
    async fn a_credential_the_role_adds_is_refused_in_one_process_and_by_the_record_step() {
        let key = aws_key();
        let edits = format!("  - path: skills/plan-format.md\n    append: \"aws_access_key_id = {key}\\n\"\n");
        let (s, _forge, said) = strays(&edits).await;
        assert!(said.contains("the research role's change was refused"), "{said}");
        assert!(said.contains("`skills/plan-format.md` line "), "file and line: {said}");
        assert!(!said.contains(&key), "never quoted: {said}");
        assert!(!std::fs::read_to_string(s.root().join("skills/plan-format.md")).unwrap().contains(&key));

        let (s, forge, dir, research) = sealed_visit().await;
        forge_bundle(&s, &dir, &research, &[("roles/fellow.md", &format!("key: {key}"))]);
        let out = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let said = stdout(&out);
        assert!(said.contains("`roles/fellow.md` line ") && said.contains("AWS"), "file, line, rule: {said}");
        assert!(!said.contains(&key) && !stderr(&out).contains(&key), "never quoted: {said}");
        assert!(research_branches(&s).is_empty(), "nothing pushed");
        assert_eq!(proposals(&forge).await.len(), 1, "the finding as an issue");
    }

    #[tokio::test]
    async fn with_the_role_off_the_visit_seals_no_role_and_the_record_files_the_issues() {
        let (s, forge) = hospital("    max_proposals: 3        # per run\n    agent: false", true).await;
        let dir = s.root().join(".ward/research-visit");
        let out = s.ward(&["research", "--since", "30d", "--out", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("no research role ran"), "{}", stdout(&out));
        assert!(proposals(&forge).await.is_empty(), "the visit files nothing");
        let out = s.ward(&["research", "--since", "30d", "--visit", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("2 proposal(s) found, 0 filed before; filed #4, #5"), "{}", stdout(&out));
        assert!(research_branches(&s).is_empty());
    }

    #[tokio::test]
    async fn the_limit_in_ward_yml_holds_and_the_flag_overrides_it() {
        let (s, forge) = hospital("    max_proposals: 1        # per run\n    agent: false", true).await;
        let out = s.ward(&["research", "--since", "30d"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("2 proposal(s) found, 0 filed before; filed #4"), "{}", stdout(&out));
        assert_eq!(proposals(&forge).await.len(), 1, "ward.yml's max_proposals: 1");
        assert!(research_branches(&s).is_empty(), "without the role, no pull request");
        let out = s.ward(&["research", "--since", "30d", "--max", "5"]);
        assert!(stdout(&out).contains("1 filed before; filed #5"), "{}", stdout(&out));
        assert_eq!(proposals(&forge).await.len(), 2);
    }
}
