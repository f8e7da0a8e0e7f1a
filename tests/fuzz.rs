//! Issue 13: bounded mutation fuzzing of the parsers, on the stable
//! toolchain. cargo-fuzz needs nightly and libFuzzer; this machine's CI has
//! one stable toolchain, so this is not coverage-guided: a seeded mutator
//! (byte flips, inserted parser tokens, splices, cuts, repeats) works over a
//! corpus of the repository's own files (GitHub's webhook payloads in
//! tests/fixtures, the scenarios, ward.yml, the precedent log, agents'
//! outputs, charts the engine writes) for a time budget per target.
//!
//! For every input each parser answers a value or an error: a panic fails
//! with the target, the seed and the case (`WARD_FUZZ_SEED` replays); an
//! input that takes longer than [`HANG`] fails as a hang. A last check per
//! target parses an input 4 and 64 times a unit (a chart of 50 notes, a
//! payload with a 4 KiB issue body, a corpus file repeated): 16 times the input
//! may take at most [`GROWTH`] times as long, measured twice (quadratic
//! would be 256; a shared machine's noise and cache misses reach ~150 once).
//! `WARD_FUZZ_SECS` sets the budget per target (default 3 s).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ward::chart::Sentinels;
use ward::forge::IssueNumber;

/// Longest a single input may take.
const HANG: Duration = Duration::from_secs(2);
/// Largest time ratio allowed for 16 times the input.
const GROWTH: f64 = 96.0;

const TOKENS: &[&str] = &[
    "<!-- WARD:TRIAGE -->",
    "<!-- /WARD:TRIAGE -->",
    "<!-- WARD:OUTCOME ready -->",
    "<!-- WARD:TREATMENT_PLAN run=r1 stage=s role=fellow at=2026-11-29T10:00:00Z -->",
    "<!-- ward-chart v1 -->",
    "```",
    "\n",
    "- id: P-0001\n",
    "stages:\n  admit:\n",
    "{\"action\":\"labeled\",\"issue\":{\"number\":1}}",
    "&a [*a, *a, *a]",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    "- ",
    "  ",
    "\u{0}",
    "\u{202e}",
    "\r\n",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` ending with one of `exts`, sorted.
fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn read_all(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect()
}

/// A chart as the engine writes it, of `runs` notes.
fn written_chart(runs: usize) -> String {
    let s = Sentinels::default();
    let meta = |run: &str| ward::chart::NoteMeta {
        run: run.into(),
        stage: "admit".into(),
        role: "planner".into(),
        at: chrono::DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z").unwrap().with_timezone(&chrono::Utc),
    };
    let notes: Vec<ward::chart::Note> = (0..runs)
        .map(|r| ward::chart::Note {
            kind: ward::chart::NoteKind::Triage,
            meta: meta(&format!("r{r}")),
            body: "ready: fine.".into(),
        })
        .collect();
    s.append(IssueNumber(1), None, &notes).unwrap().unwrap()
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of a corpus entry (bytes, made valid UTF-8 lossily).
fn mutate(rng: &mut Rng, corpus: &[String]) -> String {
    let mut bytes = corpus[rng.below(corpus.len())].clone().into_bytes();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(6) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                bytes.splice(at..at, t.iter().copied());
            }
            2 => {
                let other = corpus[rng.below(corpus.len())].as_bytes();
                let from = rng.below(other.len() + 1);
                let to = (from + rng.below(256)).min(other.len());
                bytes.splice(at..at, other[from..to].iter().copied());
            }
            3 => bytes.truncate(at),
            4 => {
                let end = (at + rng.below(64)).min(bytes.len());
                let part = bytes[at..end].to_vec();
                for _ in 0..rng.below(16) {
                    bytes.splice(at..at, part.iter().copied());
                }
            }
            _ => {
                let end = (at + rng.below(32)).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A target: its name, its corpus, the parser, and an input `n` times as
/// large as `grow(1)` for the growth check (a repeated file, unless
/// repeating it only makes the parser stop earlier).
struct Target {
    name: &'static str,
    corpus: Vec<String>,
    parse: Box<dyn Fn(&str)>,
    grow: Box<dyn Fn(usize) -> String>,
}

fn repeat(text: &str) -> Box<dyn Fn(usize) -> String> {
    let text = text.to_string();
    Box::new(move |n| text.repeat(n))
}

/// A payload whose issue body is `n` times 4 KiB.
fn long_payload(payload: &str) -> Box<dyn Fn(usize) -> String> {
    let v: serde_json::Value = serde_json::from_str(payload).unwrap();
    Box::new(move |n| {
        let mut v = v.clone();
        v["issue"]["body"] = serde_json::Value::from("line of an issue body\n".repeat(n * 200));
        v.to_string()
    })
}

fn targets(scratch: &Path) -> Vec<Target> {
    let s = Sentinels::default();
    let mut agent = read_all(&files(&root().join("tests/fixtures/agents"), &[".txt", ".json", ".jsonl"]));
    agent.push("<!-- WARD:TRIAGE -->\nready\n<!-- /WARD:TRIAGE -->\n<!-- WARD:OUTCOME ready -->\n".into());
    let events = read_all(&files(&root().join("tests/fixtures/github/webhooks"), &[".json"]));
    let yml = read_all(&[root().join(".github/ward.yml")]);
    let log = read_all(&[root().join("precedents/log.yaml")]);
    let scenarios = read_all(&files(&root().join("tests/scenarios"), &[".yaml"]));
    let file = scratch.join("scenario.yaml");
    let s2 = s.clone();
    let labeled = read_all(&[root().join("tests/fixtures/github/webhooks/issues/labeled.payload.json")]);
    let (agent_big, yml_big, log_big) = (agent[agent.len() - 1].clone(), yml[0].clone(), log[0].clone());
    let scenario_big = scenarios.iter().max_by_key(|t| t.len()).cloned().unwrap_or_default();
    vec![
        Target {
            name: "chart reader",
            corpus: vec![written_chart(3)],
            parse: Box::new(move |t: &str| drop(s.parse_chart(t))),
            grow: Box::new(|n| written_chart(n * 50)),
        },
        Target {
            name: "agent-notes reader",
            corpus: agent,
            parse: Box::new(move |t: &str| drop(s2.parse_agent_notes(t))),
            grow: repeat(&agent_big),
        },
        Target {
            name: "event payloads",
            corpus: events,
            parse: Box::new(|t: &str| drop(ward::event::parse_event(t, Some("issues"), Path::new("event.json")))),
            grow: long_payload(&labeled[0]),
        },
        Target {
            name: "ward.yml",
            corpus: yml,
            parse: Box::new(|t: &str| drop(ward::config::Config::parse(t, Path::new("ward.yml"), None))),
            grow: repeat(&yml_big),
        },
        Target {
            name: "precedent log",
            corpus: log,
            parse: Box::new(|t: &str| drop(ward::precedent::PrecedentLog::parse(t, Path::new("precedents/log.yaml")))),
            grow: repeat(&log_big),
        },
        Target {
            name: "scenarios",
            corpus: scenarios,
            parse: Box::new(move |t: &str| {
                std::fs::write(&file, t).unwrap();
                drop(ward::simulate::load_scenario(&file));
            }),
            grow: repeat(&scenario_big),
        },
    ]
}

fn var(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_parsers_survive_mutated_corpus_inputs_without_panic_hang_or_superlinear_time() {
    let scratch = tempfile::tempdir().unwrap();
    let budget = Duration::from_secs(var("WARD_FUZZ_SECS").unwrap_or(3));
    let seed = var("WARD_FUZZ_SEED").unwrap_or(13);
    let mut report = Vec::new();
    for Target { name, corpus, parse, grow } in targets(scratch.path()) {
        assert!(!corpus.is_empty(), "{name}: an empty corpus");
        let mut rng = Rng(seed);
        let (started, mut cases) = (Instant::now(), 0u64);
        while started.elapsed() < budget {
            let input = mutate(&mut rng, &corpus);
            let one = Instant::now();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(&input)));
            assert!(result.is_ok(), "{name} panicked on case {cases} of WARD_FUZZ_SEED={seed}: {input:?}");
            assert!(one.elapsed() < HANG, "{name} took {:?} on case {cases} of WARD_FUZZ_SEED={seed}", one.elapsed());
            cases += 1;
        }
        // Growth: an input 4 and 64 times the size of `grow(1)`.
        let time = |n: usize| {
            let text = grow(n);
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    parse(&text);
                    t.elapsed()
                })
                .min()
                .unwrap()
        };
        // The fewest of five runs each, and measured again before failing:
        // the machine is shared, and a large input leaves the caches.
        let ratio = || time(64).as_secs_f64() / time(4).as_secs_f64().max(1e-6);
        let ratio = [ratio(), ratio()].into_iter().fold(f64::INFINITY, f64::min);
        assert!(ratio <= GROWTH, "{name}: 16 times the input took {ratio:.0} times as long, twice");
        report.push(format!("{name}: {cases} cases, growth x16 -> x{ratio:.1}"));
    }
    eprintln!("MEASURE fuzz seed={seed} budget_per_target_s={} {}", budget.as_secs(), report.join("; "));
}
