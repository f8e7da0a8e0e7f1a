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

const ENTRIES: usize = 10_000;
const NOTES: usize = 10_000;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    /// Skewed towards low indices, like word frequencies.
    fn word<'a>(&mut self, vocab: &'a [String]) -> &'a str {
        let a = self.next() as usize % vocab.len();
        let b = self.next() as usize % vocab.len();
        &vocab[a.min(b)]
    }
    fn sentence(&mut self, vocab: &[String], words: usize) -> String {
        (0..words).map(|_| self.word(vocab)).collect::<Vec<_>>().join(" ")
    }
}

fn vocabulary() -> Vec<String> {
    let syllables = ["ca", "che", "ten", "ant", "mi", "gra", "tion", "test", "flak", "y", "api", "lo", "gin", "dep"];
    let mut out = Vec::new();
    for a in syllables {
        for b in syllables {
            for c in ["", "s", "er", "ing"] {
                out.push(format!("{a}{b}{c}"));
            }
        }
    }
    out
}

fn log_text(rng: &mut Lcg, vocab: &[String]) -> String {
    let mut text = String::with_capacity(ENTRIES * 300);
    for i in 1..=ENTRIES {
        let tags = format!("[{}, {}]", rng.word(vocab), rng.word(vocab));
        text.push_str(&format!(
            "- id: P-{i:04}\n  date: 2026-01-{:02}\n  chief: chief{}\n  tags: {tags}\n  question: {}?\n  decision: {}.\n",
            i % 28 + 1,
            i % 7,
            rng.sentence(vocab, 14),
            rng.sentence(vocab, 20),
        ));
    }
    text
}

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

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut(usize) -> T) -> Duration {
    let samples = (0..runs)
        .map(|i| {
            let start = Instant::now();
            std::hint::black_box(f(i));
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn main() -> ExitCode {
    let vocab = vocabulary();
    let mut rng = Lcg(42);

    let log = log_text(&mut rng, &vocab);
    let parse_log = time(5, |_| PrecedentLog::parse(&log, Path::new("log.yaml")).expect("log parses"));
    let parsed = PrecedentLog::parse(&log, Path::new("log.yaml")).expect("log parses");
    let queries: Vec<String> = (0..101).map(|_| rng.sentence(&vocab, 40)).collect();
    let lookup = time(queries.len(), |i| parsed.search(&queries[i], 3).len());

    let chart = chart_text(&mut rng, &vocab);
    let sentinels = Sentinels::default();
    let parse_chart = time(21, |_| sentinels.parse_chart(&chart).expect("chart parses").len());
    assert_eq!(sentinels.parse_chart(&chart).unwrap().len(), NOTES);

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
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
