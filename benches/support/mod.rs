//! What every bench prints: one JSON object per line, so runs can be
//! collected and compared by a script (`cargo bench 2>/dev/null | grep '^{'`).
//! The human-readable lines stay beside them.

#![allow(dead_code)] // each bench uses part of it

use std::time::Duration;

/// One figure: `median` and `p95` in `unit`; `peer` is the same figure for
/// the tool ward is compared with, and `ratio` is ward's over the peer's
/// (or over the target, when there is no peer), `null` where neither applies.
pub fn emit(bench: &str, unit: &str, median: f64, p95: f64, peer: Option<f64>, ratio: Option<f64>) {
    let line = serde_json::json!({
        "bench": bench,
        "unit": unit,
        "median": round(median),
        "p95": round(p95),
        "peer": peer.map(round),
        "ratio": ratio.map(round),
    });
    println!("{line}");
}

/// A time figure in milliseconds from sorted samples.
pub fn emit_ms(bench: &str, sorted: &[Duration], peer: Option<&[Duration]>) {
    let median = ms(percentile(sorted, 0.5));
    let peer_median = peer.map(|p| ms(percentile(p, 0.5)));
    let ratio = peer_median.filter(|p| *p > 0.0).map(|p| median / p);
    emit(bench, "ms", median, ms(percentile(sorted, 0.95)), peer_median, ratio);
}

/// The sample at quantile `p` of sorted samples (nearest rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A deterministic generator (a fixed linear congruential generator over a
/// fixed vocabulary with a Zipf-like skew), so runs compare.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    /// Skewed towards low indices, like word frequencies.
    pub fn word<'a>(&mut self, vocab: &'a [String]) -> &'a str {
        let a = self.next() as usize % vocab.len();
        let b = self.next() as usize % vocab.len();
        &vocab[a.min(b)]
    }
    pub fn sentence(&mut self, vocab: &[String], words: usize) -> String {
        (0..words).map(|_| self.word(vocab)).collect::<Vec<_>>().join(" ")
    }
}

pub fn vocabulary() -> Vec<String> {
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

pub fn log_text(rng: &mut Lcg, vocab: &[String], entries: usize) -> String {
    let mut text = String::with_capacity(entries * 300);
    for i in 1..=entries {
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

/// A precedent log of `entries` generated entries (the rules bench's).
pub fn precedent_log(entries: usize) -> String {
    log_text(&mut Lcg(42), &vocabulary(), entries)
}
