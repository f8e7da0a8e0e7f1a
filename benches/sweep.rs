//! A sweep over 10,000 open patients: API calls and wall time, on both
//! forges, printed as text and as one JSON object per line (bench, unit,
//! median, p95, peer, ratio).
//!
//! Target (issue 13): at most the pages (searches, listings, reads of the
//! due) plus two calls per stalled patient; under 5 s on loopback; the
//! next sweep costs no more than the first. `cargo bench --bench sweep`
//! (release); `cargo test --bench sweep` runs it in a debug build.
//!
//! Set-up: 9,900 healthy patients spread over five stage labels, put on
//! recently, and 100 stalled patients at `ward:admit` whose label is two
//! hours old (or more). A first sweep (the cold sweep) revives the stalled;
//! then five steady sweeps a minute apart find nobody due.
//!
//! - The local forge (files on disk): the wrapper charges the listing one
//!   call per page of 100 and the read of the due one per 50, as GitHub
//!   would; it has no search, so it lists every stage label.
//! - The fake GitHub over HTTP on loopback, every request counted by the
//!   fake: with GraphQL (the search finds the quiet patients, the due are
//!   read 50 to a query) against its peer, the same sweep over REST alone
//!   (every stage label listed, three reads per due patient; the pages
//!   after a listing's first and the due patients' reads four at a time).
//! - Both again with 25 ms added to every answer, as a server that is not
//!   on loopback adds: the time that added to each sweep against what it
//!   adds to the same requests one after another (what the client's
//!   concurrency saves; the writes stay one at a time, as GitHub asks of
//!   requests that create content), and the most requests the fake
//!   answered at once.

#[path = "../tests/support/departments.rs"]
#[allow(dead_code)]
mod departments;
#[path = "../tests/support/fake_github/mod.rs"]
#[allow(dead_code)]
mod fake_github;

#[path = "support/mod.rs"]
mod report;

use std::time::{Duration, Instant};

use departments::{Counting, Shared, Ward, config_with};
use ward::forge::local::{IssueRecord, write_atomic};
use ward::forge::{Issue, IssueNumber, IssueState, LabelAction, LabelEvent};
use ward::sweep::{self, Facilities};

const PATIENTS: u64 = 10_000;
const STALLED: u64 = 100;
const STEADY_ROUNDS: usize = 5;
const HEALTHY_LABELS: &[&str] =
    &["ward:diagnose", "ward:plan-review", "ward:treat", "ward:consult", "ward:code-review"];

/// Every answer's delay in the latency runs: a round trip to a nearby
/// server (GitHub's API answers in 50–300 ms; loopback in well under 1).
const LATENCY: Duration = Duration::from_millis(25);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let local = rt.block_on(on_the_local_forge());
    let search = rt.block_on(on_fake_github(true, Duration::ZERO));
    let listing = rt.block_on(on_fake_github(false, Duration::ZERO));
    let search_late = rt.block_on(on_fake_github(true, LATENCY));
    let listing_late = rt.block_on(on_fake_github(false, LATENCY));
    println!();
    local.json("sweep/local", "calls", None);
    search.json("sweep/github", "requests", Some(&listing));
    listing.json("sweep/github-rest", "requests", None);
    search_late.latency_cost(&search, "sweep/github-latency");
    listing_late.latency_cost(&listing, "sweep/github-rest-latency");
}

/// What one set-up measured: the cold sweep, then the steady ones.
struct Figures {
    cold_calls: usize,
    cold_time: Duration,
    steady_calls: Vec<usize>,
    steady_time: Vec<Duration>,
    /// The delay of every answer (zero: loopback as it is).
    latency: Duration,
    /// The most requests the fake answered at once.
    peak_in_flight: usize,
}

fn percentile<T: Copy + Ord>(v: &[T], p: f64) -> T {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn line(bench: &str, unit: &str, median: f64, p95: f64, peer: Option<f64>) {
    let ratio = peer.map(|p| if p == 0.0 { 0.0 } else { median / p });
    report::emit(bench, unit, median, p95, peer, ratio);
}

impl Figures {
    fn per_stalled(&self) -> f64 {
        (self.cold_calls as f64 - percentile(&self.steady_calls, 0.5) as f64) / STALLED as f64
    }

    fn json(&self, name: &str, unit: &str, peer: Option<&Figures>) {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let c = self.cold_calls as f64;
        line(&format!("{name}/cold/{unit}"), unit, c, c, peer.map(|p| p.cold_calls as f64));
        let t = ms(self.cold_time);
        line(&format!("{name}/cold/time"), "ms", t, t, peer.map(|p| ms(p.cold_time)));
        let (m, p95) = (percentile(&self.steady_calls, 0.5) as f64, percentile(&self.steady_calls, 0.95) as f64);
        line(&format!("{name}/steady/{unit}"), unit, m, p95, peer.map(|p| percentile(&p.steady_calls, 0.5) as f64));
        let (m, p95) = (ms(percentile(&self.steady_time, 0.5)), ms(percentile(&self.steady_time, 0.95)));
        line(&format!("{name}/steady/time"), "ms", m, p95, peer.map(|p| ms(percentile(&p.steady_time, 0.5))));
        let per = self.per_stalled();
        line(&format!("{name}/per-stalled/{unit}"), unit, per, per, peer.map(Figures::per_stalled));
    }

    /// With latency, what it added to each sweep's wall time (over the same
    /// sweep without, `base`) against what it adds to the same requests
    /// one after another (requests x latency): the ratio is the share of
    /// the latency the client still waits for (1.0 = every request waited
    /// for in turn). The fake answers in the same process, so the time
    /// without latency is also the fake's own work, which latency overlaps.
    fn latency_cost(&self, base: &Figures, name: &str) {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let serial = |calls: usize| calls as f64 * ms(self.latency);
        let added = (ms(self.cold_time) - ms(base.cold_time)).max(0.0);
        line(&format!("{name}/cold/latency-added"), "ms", added, added, Some(serial(self.cold_calls)));
        let steady = |f: &Figures, q| ms(percentile(&f.steady_time, q));
        let (m, p95) =
            ((steady(self, 0.5) - steady(base, 0.5)).max(0.0), (steady(self, 0.95) - steady(base, 0.5)).max(0.0));
        line(&format!("{name}/steady/latency-added"), "ms", m, p95, Some(serial(percentile(&self.steady_calls, 0.5))));
        let peak = self.peak_in_flight as f64;
        report::emit(&format!("{name}/peak-in-flight"), "requests", peak, peak, None, None);
    }

    fn print(&self, what: &str, unit: &str) {
        println!(
            "  cold sweep:   {} {unit}, {:.2?}; per stalled patient beyond a steady sweep: {:.2}",
            self.cold_calls,
            self.cold_time,
            self.per_stalled()
        );
        println!(
            "  steady sweep: {} {unit} (median of {STEADY_ROUNDS}), {:.2?} median, {:.2?} p95 [{what}]",
            percentile(&self.steady_calls, 0.5),
            percentile(&self.steady_time, 0.5),
            percentile(&self.steady_time, 0.95)
        );
    }
}

/// The ward on the fake GitHub (HTTP on loopback), with GraphQL (the
/// search) or over REST alone (the listing), every answer delayed by
/// `latency`: every request counted by the fake itself.
async fn on_fake_github(graphql: bool, latency: Duration) -> Figures {
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
    let forge = gh.forge().with_graphql(graphql);
    // Installed: the charts branch is there.
    ward::state::update(&forge, |_| Ok::<(), ()>(())).await.unwrap().unwrap();
    gh.state().latency = latency;
    let requests = |gh: &fake_github::FakeGitHub| gh.state().log.len();

    let mark = requests(&gh);
    let t = Instant::now();
    let now = noon + chrono::Duration::hours(3);
    let cold = sweep::sweep(&forge, &config, now, &Facilities::default(), None).await.unwrap();
    let cold_time = t.elapsed();
    let cold_calls = requests(&gh) - mark;
    assert_eq!(cold.actions.len() as u64, STALLED, "{cold}");
    assert_eq!(cold.searched, graphql, "{cold}");

    // Minutes on: the revived are next due after `stall_after`, the
    // healthy 30m or more after their labels.
    let (mut steady_calls, mut steady_time) = (Vec::new(), Vec::new());
    for round in 1..=STEADY_ROUNDS {
        let mark = requests(&gh);
        let t = Instant::now();
        let now = now + chrono::Duration::minutes(round as i64);
        let steady = sweep::sweep(&forge, &config, now, &Facilities::default(), None).await.unwrap();
        steady_time.push(t.elapsed());
        steady_calls.push(requests(&gh) - mark);
        assert_eq!(steady.due, 0, "{steady}");
    }
    let peak_in_flight = gh.state().peak_in_flight;
    let figures = Figures { cold_calls, cold_time, steady_calls, steady_time, latency, peak_in_flight };
    let how = if graphql { "GraphQL: the search" } else { "REST alone: the listing" };
    println!(
        "\nsweep over {PATIENTS} open patients on the fake GitHub, {how} (HTTP on loopback, {latency:?} added to every \
         answer; every request counted)"
    );
    if !latency.is_zero() {
        let serial = |calls: usize| latency * calls as u32;
        println!(
            "  one request after another would take: cold {:.2?}, steady {:.2?}; at most {peak_in_flight} requests at once",
            serial(cold_calls),
            serial(percentile(&figures.steady_calls, 0.5))
        );
    }
    println!("  cold sweep: {} found, {} due, {} revived", cold.listed, cold.due, cold.actions.len());
    figures.print("fake GitHub", "requests");
    println!("  requests by route (all sweeps): {:#?}", gh.state().counts());
    assert!(
        percentile(&figures.steady_calls, 0.95) <= figures.cold_calls,
        "the next sweep costs no more than the first"
    );
    figures
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

async fn on_the_local_forge() -> Figures {
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
    assert_eq!(stalled as u64, STALLED, "every stalled patient is revived in the first sweep: {cold}");

    // Minutes on: nobody is due (the revived after `stall_after`, the
    // healthy 30m or more after their labels).
    let (mut steady_calls, mut steady_time) = (Vec::new(), Vec::new());
    for _ in 0..STEADY_ROUNDS {
        w.clock.advance(Duration::from_secs(60));
        forge.reset();
        let t = Instant::now();
        let steady = sweep::sweep(&forge, &w.config, w.now(), &Facilities::default(), None).await.unwrap();
        steady_time.push(t.elapsed());
        steady_calls.push(forge.total());
        assert_eq!(steady.due, 0, "{steady}");
    }
    let figures =
        Figures { cold_calls, cold_time, steady_calls, steady_time, latency: Duration::ZERO, peak_in_flight: 1 };
    println!("sweep over {PATIENTS} open patients on the local forge (listing charged per page of 100)");
    println!("  cold sweep: {} listed, {} due, {stalled} revived, {pages} listing pages", cold.listed, cold.due);
    println!("    by method: {by_method}");
    figures.print("local forge", "calls");
    figures
}
