//! A sweep over 10,000 open patients: API calls and wall time.
//!
//! Target (issue 6): API calls at most the listing pages (100 issues per
//! page, per stage label) plus one per stalled patient; wall time under 5 s.
//! The forge is wrapped in a counter that charges the listing one call per
//! page of 100, as GitHub would. `cargo bench --bench sweep`.
//!
//! Set-up: 9,900 healthy patients spread over five stage labels, put on
//! recently, and 100 stalled patients at `ward:admit` whose label is two
//! hours old (or more). A first sweep sees everyone (the cold sweep): the
//! listing's `updated_at` proves the stalled patients' labels are old, so
//! it revives them at once (issue 13; before, they were due only 25 minutes
//! after the sweep first saw them). A steady sweep 5 minutes later finds
//! nobody due.

#[path = "../tests/support/departments.rs"]
#[allow(dead_code)]
mod departments;
#[path = "../tests/support/fake_github/mod.rs"]
#[allow(dead_code)]
mod fake_github;

use std::time::{Duration, Instant};

use departments::{Counting, Shared, Ward, config_with};
use ward::forge::local::{IssueRecord, write_atomic};
use ward::forge::{Issue, IssueNumber, IssueState, LabelAction, LabelEvent};
use ward::sweep::{self, Facilities};

const PATIENTS: u64 = 10_000;
const STALLED: u64 = 100;
const HEALTHY_LABELS: &[&str] =
    &["ward:diagnose", "ward:plan-review", "ward:treat", "ward:consult", "ward:code-review"];

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run());
    rt.block_on(on_fake_github());
}

/// The same ward on the fake GitHub (HTTP on loopback): every request counted
/// by the fake itself.
async fn on_fake_github() {
    let gh = fake_github::FakeGitHub::start().await;
    let config = config_with(|t| t.replace("    max_actions: 50 ", "    max_actions: 100 "));
    {
        let mut s = gh.state();
        for i in 1..=STALLED {
            s.add_issue(&format!("patient {i}"), "", "chief-ana", &["ward:admit"]);
        }
        // The healthy are labeled just before the cold sweep.
        s.clock += chrono::Duration::minutes(175);
        for i in STALLED + 1..=PATIENTS {
            let label = HEALTHY_LABELS[(i % HEALTHY_LABELS.len() as u64) as usize];
            s.add_issue(&format!("patient {i}"), "", "chief-ana", &[label]);
        }
    }
    // The fake's label events are at 2026-11-29T12:00:00Z plus a second per event.
    let noon = chrono::DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z").unwrap().with_timezone(&chrono::Utc);
    let forge = gh.forge();
    let requests = |gh: &fake_github::FakeGitHub| gh.state().counts().values().sum::<usize>();

    let t = Instant::now();
    let cold =
        sweep::sweep(&forge, &config, noon + chrono::Duration::hours(3), &Facilities::default(), None).await.unwrap();
    let cold_time = t.elapsed();
    let cold_calls = requests(&gh);

    // 5 minutes on: the revived are next due after `stall_after`, the
    // healthy 30m or more after their labels.
    let t = Instant::now();
    let now = noon + chrono::Duration::hours(3) + chrono::Duration::minutes(5);
    let steady = sweep::sweep(&forge, &config, now, &Facilities::default(), None).await.unwrap();
    let steady_time = t.elapsed();
    let calls = requests(&gh) - cold_calls;
    let counts = gh.state().counts();
    println!("\nsweep over {PATIENTS} open patients (fake GitHub over HTTP on loopback; every request counted)");
    println!(
        "  cold sweep:   {} listed, {} due, {} revived, {cold_calls} requests, {:.2?}",
        cold.listed,
        cold.due,
        cold.actions.len(),
        cold_time
    );
    println!(
        "  steady sweep: {} listed, {} due, {} revived, {calls} requests, {:.2?}",
        steady.listed,
        steady.due,
        steady.actions.len(),
        steady_time
    );
    println!("  requests by route (both sweeps): {counts:#?}");
    assert_eq!(cold.actions.len() as u64, STALLED, "{cold}");
    assert_eq!(steady.due, 0, "{steady}");
}

/// Writes the issue files directly (creating 10,000 issues one by one
/// through the forge would measure the set-up, not the sweep).
fn populate(w: &Ward) {
    let now = w.now();
    for i in 1..=PATIENTS {
        let stalled = i <= STALLED;
        let label = if stalled { "ward:admit" } else { HEALTHY_LABELS[(i % HEALTHY_LABELS.len() as u64) as usize] };
        let at = if stalled { now - chrono::Duration::hours(2) } else { now - chrono::Duration::minutes(5) };
        let rec = IssueRecord {
            issue: Issue {
                number: IssueNumber(i),
                title: format!("patient {i}"),
                body: String::new(),
                author: "chief-ana".into(),
                state: IssueState::Open,
                labels: vec![label.into()],
            },
            created_at: at,
            label_events: vec![LabelEvent {
                label: label.into(),
                action: LabelAction::Added,
                actor: "chief-ana".into(),
                at,
            }],
            comments: Vec::new(),
        };
        let path = w.local.forge_dir().join("issues").join(format!("{i}.json"));
        write_atomic(&path, serde_json::to_string(&rec).unwrap().as_bytes()).unwrap();
    }
}

async fn run() {
    let w = Ward::new(config_with(|t| t.replace("    max_actions: 50 ", "    max_actions: 100 ")));
    assert_eq!(w.config.departments.sweep.max_actions, 100);
    populate(&w);
    let forge = Counting::new(Shared(w.local.clone()));

    let t = Instant::now();
    let cold = sweep::sweep(&forge, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    let cold_time = t.elapsed();
    let cold_calls = forge.total();
    let pages = forge.of("open_issues_with_label (pages)");
    let stalled = cold.actions.len();
    let by_method = format!("{:?}", forge.calls.lock().unwrap());

    // 5 minutes on: nobody is due (the revived after `stall_after`, the
    // healthy 30m or more after their labels).
    w.clock.advance(Duration::from_secs(5 * 60));
    forge.reset();
    let t = Instant::now();
    let steady = sweep::sweep(&forge, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
    let steady_time = t.elapsed();
    let calls = forge.total();

    println!("sweep over {PATIENTS} open patients (local forge; listing charged per page of 100)");
    println!(
        "  cold sweep:   {} listed, {} due, {stalled} revived, {cold_calls} API calls ({pages} pages), {:.2?}",
        cold.listed, cold.due, cold_time
    );
    println!("    pages: {pages} (8 labels incl. `ward:lockdown`, and `ward:blocked`, `ward:waiting`)");
    println!("    per stalled patient: {:.2} calls", (cold_calls - pages - 5) as f64 / stalled.max(1) as f64);
    println!("    by method: {by_method}");
    println!(
        "  steady sweep: {} listed, {} due, {} revived, {calls} API calls, {:.2?}",
        steady.listed,
        steady.due,
        steady.actions.len(),
        steady_time
    );
    println!("  target: calls <= pages + 1 per stalled = {}; wall time < 5 s", pages + stalled);
    assert_eq!(stalled as u64, STALLED, "every stalled patient is revived in the first sweep: {cold}");
    assert_eq!(steady.due, 0, "{steady}");
}
