//! The engine's own cost per stage run, with an agent that does nothing but
//! copy prepared notes, on the local forge; the peak resident memory of one
//! `ward stage` process; the same stage with a precedent log of 10,000
//! entries; and the wall time of the whole demo. Targets (release, issue
//! 13): overhead per stage <= 30 ms, peak memory <= 50 MB, demo < 2 s.
//!
//! `cargo bench --bench overhead`; `WARD_BENCH_IN_PROCESS_ONLY=1` stops
//! after the in-process figures.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ward::forge::NewIssue;
use ward::forge::local::LocalForge;
use ward::hospital::Hospital;
use ward::stand_in::{StandInEnv, default_visit, render_notes};

const PATIENTS: usize = 40;

use support::{emit, emit_ms, percentile};

fn main() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    // SAFETY: set before the runtime starts any thread. Worktrees go under
    // this temporary WARD_HOME, not the user's cache.
    unsafe { std::env::set_var("WARD_HOME", home.path()) };
    tokio::runtime::Runtime::new()?.block_on(bench())
}

/// A repository with the default pipeline whose agent does nothing but copy
/// the notes prepared for its mode (the stand-in's, rendered once).
fn noop_repository(root: &Path) -> anyhow::Result<()> {
    ward::defaults::install(root)?;
    // A real repository, as the demo has: every stage run gets its own
    // worktree, and the discharge audit reads the task branch.
    std::fs::write(root.join(".gitignore"), "/.ward\n/prepared\n/scratch\n")?;
    ward::demo::init_repository(root)?;

    let notes_dir = root.join("prepared");
    std::fs::create_dir_all(&notes_dir)?;
    for mode in ["triage", "diagnose", "plan", "treat", "code", "discharge"] {
        let env = StandInEnv {
            issue: "1".into(),
            stage: mode.into(),
            mode: mode.into(),
            notes_file: notes_dir.join("unused"),
            worktree: root.join("scratch"),
            sentinel: "WARD".into(),
            prompt: None,
        };
        std::fs::create_dir_all(&env.worktree)?;
        let visit = default_visit(&env).map_err(anyhow::Error::msg)?;
        std::fs::write(notes_dir.join(format!("{mode}.md")), render_notes("WARD", &visit.notes, &visit.outcome))?;
    }
    let config = root.join(".github/ward.yml");
    let text = std::fs::read_to_string(&config)?.replace(
        r#"command: ["{ward}", "stand-in"]"#,
        &format!(r#"command: ["/bin/sh", "-c", "cp {}/$WARD_MODE.md \"$WARD_NOTES\""]"#, notes_dir.display()),
    );
    std::fs::write(&config, text)?;
    Ok(())
}

async fn bench() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    noop_repository(root)?;

    let forge = Arc::new(LocalForge::new(root, "ward-engine"));
    let mut h = Hospital::load(root, forge.clone())?;
    h.workdir = root.join("scratch");
    // The network wall runs the agent under `ward __wall`: the ward binary, not this bench's.
    h.ward_exe = env!("CARGO_BIN_EXE_ward").into();
    let mut overheads = Vec::new();
    let mut totals = Vec::new();
    for i in 0..PATIENTS {
        let issue = forge.admit(NewIssue {
            title: format!("patient {i}"),
            body: "bench".into(),
            labels: vec![h.config.admission.clone()],
        })?;
        let trace = ward::simulate::drive(&h, &forge, issue.number, BTreeMap::new(), root, 20).await?;
        assert_eq!(trace.final_label.as_deref(), Some("ward:discharged"), "patient {i} was not discharged");
        for step in &trace.steps {
            totals.push(Duration::from_millis(step.ms as u64));
            overheads.push(Duration::from_micros(step.engine_us as u64));
        }
    }
    overheads.sort();
    totals.sort();
    println!("stage runs:               {}", overheads.len());
    println!(
        "engine overhead per stage: median {:?}, p95 {:?} (target <= 30 ms; in one process, the hospital loaded once)",
        percentile(&overheads, 0.5),
        percentile(&overheads, 0.95)
    );
    println!("whole stage run:           median {:?}, p95 {:?}", percentile(&totals, 0.5), percentile(&totals, 0.95));
    emit_target("overhead/stage-in-process", &overheads, 30.0);
    emit_ms("overhead/stage-run-in-process", &totals, None);
    // For tracing and profiling the in-process stages alone (strace, perf).
    if std::env::var_os("WARD_BENCH_IN_PROCESS_ONLY").is_some() {
        return Ok(());
    }

    // As Actions runs it: one `ward stage` process per stage, which loads
    // ward.yml, the roles and the precedent log before it does anything.
    let processes = stage_processes(root, PROCESS_PATIENTS)?;
    report_processes("default precedent log", &processes);
    emit_target("overhead/stage-process", &processes.walls, 30.0);
    let rss: Vec<f64> = processes.peak_kib.iter().map(|k| *k as f64 / 1024.0).collect();
    emit(
        "overhead/stage-process-peak-rss",
        "MiB",
        quantile(&rss, 0.5),
        quantile(&rss, 0.95),
        None,
        Some(quantile(&rss, 0.5) / 50.0),
    );

    // The same with a precedent log of 10,000 entries: every stage pays its load.
    let big = tempfile::tempdir()?;
    noop_repository(big.path())?;
    let log = support::precedent_log(PRECEDENTS);
    std::fs::write(big.path().join("precedents/log.yaml"), &log)?;
    let with_log = stage_processes(big.path(), PROCESS_PATIENTS)?;
    report_processes(&format!("{PRECEDENTS} precedents ({} KB)", log.len() / 1024), &with_log);
    emit_ms("overhead/stage-process-10k-precedents", &with_log.walls, Some(&processes.walls));
    let rss: Vec<f64> = with_log.peak_kib.iter().map(|k| *k as f64 / 1024.0).collect();
    emit(
        "overhead/stage-process-10k-precedents-peak-rss",
        "MiB",
        quantile(&rss, 0.5),
        quantile(&rss, 0.95),
        None,
        Some(quantile(&rss, 0.5) / 50.0),
    );

    // The whole demo, as a newcomer runs it.
    let mut demos = Vec::new();
    for _ in 0..5 {
        let d = tempfile::tempdir()?;
        let started = Instant::now();
        let run = ward::demo::run(&d.path().join("demo"), std::path::Path::new(env!("CARGO_BIN_EXE_ward"))).await?;
        demos.push(started.elapsed());
        assert!(run.discharged);
    }
    demos.sort();
    println!(
        "whole demo wall time:      median {:?} over {} runs (target < 2 s)",
        percentile(&demos, 0.5),
        demos.len()
    );
    emit_ms("overhead/demo", &demos, None);
    Ok(())
}

/// Patients walked by `ward stage` processes, and stage processes per patient.
const PROCESS_PATIENTS: usize = 6;
const PRECEDENTS: usize = 10_000;

struct Processes {
    /// Wall time of each `ward stage` process (the agent's `cp` included).
    walls: Vec<Duration>,
    /// Peak resident memory of each, in KiB (`wait4`'s `ru_maxrss`: the
    /// largest of the process and the children it waited for, git included).
    peak_kib: Vec<i64>,
}

/// Walks `patients` new patients to discharge, one `ward stage --issue N`
/// process per stage, as the workflow does.
fn stage_processes(root: &Path, patients: usize) -> anyhow::Result<Processes> {
    let forge = LocalForge::new(root, "ward-engine");
    let mut out = Processes { walls: Vec::new(), peak_kib: Vec::new() };
    for i in 0..patients {
        let issue = forge.admit(NewIssue {
            title: format!("process patient {i}"),
            body: "bench".into(),
            labels: vec!["ward:admit".into()],
        })?;
        for _ in 0..20 {
            let started = Instant::now();
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ward"))
                .args(["--forge", "local", "stage", "--issue", &issue.number.0.to_string()])
                .current_dir(root)
                .env("WARD_ROOT", root)
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?;
            let (status, peak) = wait_with_peak(&mut child)?;
            out.walls.push(started.elapsed());
            out.peak_kib.push(peak);
            anyhow::ensure!(
                status == 0,
                "`ward stage --issue {}` exited {status} in {}",
                issue.number.0,
                root.display()
            );
            let labels = forge.read_record(issue.number)?.issue.labels;
            if labels.iter().any(|l| l == "ward:discharged") {
                break;
            }
        }
    }
    out.walls.sort();
    out.peak_kib.sort();
    Ok(out)
}

/// Waits for a child with `wait4`, for its exit code and peak memory.
fn wait_with_peak(child: &mut std::process::Child) -> anyhow::Result<(i32, i64)> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own unwaited child; both pointers are valid.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    anyhow::ensure!(pid > 0, "wait4 failed: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    Ok((code, usage.ru_maxrss))
}

fn report_processes(what: &str, p: &Processes) {
    println!(
        "`ward stage` process, {what}: {} runs, wall median {:?}, p95 {:?}; peak memory median {} KiB, max {} KiB",
        p.walls.len(),
        percentile(&p.walls, 0.5),
        percentile(&p.walls, 0.95),
        p.peak_kib[p.peak_kib.len() / 2],
        p.peak_kib.last().copied().unwrap_or(0),
    );
}

/// A time figure with its target as the ratio's denominator.
fn emit_target(bench: &str, sorted: &[Duration], target_ms: f64) {
    let median = support::ms(percentile(sorted, 0.5));
    emit(bench, "ms", median, support::ms(percentile(sorted, 0.95)), None, Some(median / target_ms));
}

fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
