//! `cargo bench --bench rules`: precedent lookup over a 10,000-entry log
//! and chart parsing of a 10,000-note chart. Prints medians; exits non-zero
//! when a median misses its target (lookup < 20 ms, parse < 50 ms).
//!
//! The data is generated deterministically (a fixed linear congruential
//! generator over a fixed vocabulary with a Zipf-like skew), so runs compare.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use ward::chart::{Note, NoteMeta, Sentinels};
use ward::forge::IssueNumber;
use ward::precedent::PrecedentLog;

#[path = "support/mod.rs"]
mod support;
use support::{Lcg, emit, emit_ms, log_text, percentile, vocabulary};

const ENTRIES: usize = 10_000;
const NOTES: usize = 10_000;

fn chart_text(rng: &mut Lcg, vocab: &[String]) -> String {
    let kinds = ["TRIAGE", "TREATMENT_PLAN", "PLAN_REVIEW", "TREATMENT_NOTE", "CODE_REVIEW", "OUTCOME"];
    let notes: Vec<Note> = (0..NOTES)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            let body = if kind == "OUTCOME" {
                "approve".to_string()
            } else {
                (0..6).map(|_| rng.sentence(vocab, 12)).collect::<Vec<_>>().join("\n")
            };
            Note {
                kind: kind.parse().expect("a known note kind"),
                meta: NoteMeta {
                    run: format!("run-{}", i / kinds.len()),
                    stage: "treat".into(),
                    role: "fellow".into(),
                    at: Utc.with_ymd_and_hms(2026, 11, 29, 10, 0, 0).unwrap() + chrono::Duration::seconds(i as i64),
                },
                body,
            }
        })
        .collect();
    Sentinels::default().append(IssueNumber(1), None, &notes).expect("chart renders").expect("notes added")
}

/// Sorted samples of `runs` timed calls.
fn time<T>(runs: usize, mut f: impl FnMut(usize) -> T) -> Vec<Duration> {
    let mut samples: Vec<Duration> = (0..runs)
        .map(|i| {
            let start = Instant::now();
            std::hint::black_box(f(i));
            start.elapsed()
        })
        .collect();
    samples.sort();
    samples
}

fn main() -> ExitCode {
    let vocab = vocabulary();
    let mut rng = Lcg(42);

    let log = log_text(&mut rng, &vocab, ENTRIES);
    let parse_log = time(5, |_| PrecedentLog::parse(&log, Path::new("log.yaml")).expect("log parses"));
    let parsed = PrecedentLog::parse(&log, Path::new("log.yaml")).expect("log parses");
    let queries: Vec<String> = (0..101).map(|_| rng.sentence(&vocab, 40)).collect();
    let lookup = time(queries.len(), |i| parsed.search(&queries[i], 3).len());

    let chart = chart_text(&mut rng, &vocab);
    let sentinels = Sentinels::default();
    let parse_chart = time(21, |_| sentinels.parse_chart(&chart).expect("chart parses").len());
    assert_eq!(sentinels.parse_chart(&chart).unwrap().len(), NOTES);

    let ms = support::ms;
    emit_ms("rules/precedent-log-parse-10k", &parse_log, None);
    let target = |bench: &str, sorted: &[Duration], target_ms: f64| {
        let median = ms(percentile(sorted, 0.5));
        emit(bench, "ms", median, ms(percentile(sorted, 0.95)), None, Some(median / target_ms));
    };
    target("rules/precedent-lookup-10k", &lookup, 20.0);
    target("rules/chart-parse-10k-notes", &parse_chart, 50.0);
    let (parse_log, lookup, parse_chart) =
        (percentile(&parse_log, 0.5), percentile(&lookup, 0.5), percentile(&parse_chart, 0.5));
    println!("precedent log parse, {ENTRIES} entries ({} KB): median {:.2} ms", log.len() / 1024, ms(parse_log));
    println!("precedent lookup, {ENTRIES} entries, 40-word query, top 3: median {:.3} ms (target < 20 ms)", ms(lookup));
    println!(
        "chart parse, {NOTES} notes ({} KB): median {:.2} ms (target < 50 ms)",
        chart.len() / 1024,
        ms(parse_chart)
    );

    let mut ok = true;
    if lookup >= Duration::from_millis(20) {
        eprintln!("precedent lookup misses its target of 20 ms");
        ok = false;
    }
    if parse_chart >= Duration::from_millis(50) {
        eprintln!("chart parse misses its target of 50 ms");
        ok = false;
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
