//! The engine's own cost per stage run, with an agent that does nothing but
//! copy prepared notes, on the local forge; and the wall time of the whole
//! demo. Targets (release): overhead per stage < 30 ms, demo < 2 s.
//!
//! `cargo bench --bench overhead`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ward::agent::{StandInEnv, default_visit, render_notes};
use ward::forge::NewIssue;
use ward::forge::local::LocalForge;
use ward::hospital::Hospital;

const PATIENTS: usize = 40;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    // SAFETY: set before the runtime starts any thread. Worktrees go under
    // this temporary WARD_HOME, not the user's cache.
    unsafe { std::env::set_var("WARD_HOME", home.path()) };
    tokio::runtime::Runtime::new()?.block_on(bench())
}

async fn bench() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    ward::defaults::install(root)?;
    // A real repository, as the demo has: every stage run gets its own
    // worktree, and the discharge audit reads the task branch.
    std::fs::write(root.join(".gitignore"), "/.ward\n/prepared\n/scratch\n")?;
    ward::demo::init_repository(root)?;

    // The no-op agent: copy the prepared notes for its mode.
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

    let forge = Arc::new(LocalForge::new(root, "ward-engine"));
    let mut h = Hospital::load(root, forge.clone())?;
    h.workdir = root.join("scratch");
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
        "engine overhead per stage: median {:?}, p95 {:?} (target < 30 ms)",
        percentile(&overheads, 0.5),
        percentile(&overheads, 0.95)
    );
    println!("whole stage run:           median {:?}, p95 {:?}", percentile(&totals, 0.5), percentile(&totals, 0.95));

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
    Ok(())
}
