//! `cargo bench --bench workspace`: what a workspace costs.
//!
//! - emulator create-to-ready and remove-to-verified for the docstore test
//!   image, one at a time and three in parallel (target: ready < 1 s);
//! - worktree create + remove on a repository of 20,000 files, ward's git2
//!   path against `git worktree add` / `git worktree remove` in the same run
//!   (target: git2 no slower than 1.2x the CLI).
//!
//! Prints medians. `WARD_BENCH_ROUNDS` sets the rounds (default 7).

#[allow(dead_code)]
#[path = "../tests/support/workspace.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use ward::workspace::Cancel;
use ward::workspace::emulator::{self, Docker, Owner};
use ward::workspace::worktree::{GitRepo, Marker};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// (create-to-ready, remove-to-verified) of `n` emulators started together.
async fn emulators(docker: &Docker, n: usize, round: usize, dir: &Path) -> Vec<(Duration, Duration)> {
    let config = support::emulator_config("");
    let cancel = Cancel::new();
    let runs: Vec<Owner> = (0..n)
        .map(|i| Owner {
            run: format!("bench{}-{round}-{i}", std::process::id()),
            issue: 1,
            stage: "bench".into(),
            expires: Utc::now() + chrono::Duration::minutes(10),
        })
        .collect();
    let ups = runs.iter().map(|owner| {
        let (config, cancel) = (&config, &cancel);
        async move {
            let t = Instant::now();
            let em = emulator::start(docker, config, owner, dir, dir, cancel).await.expect("emulator starts");
            (em, t.elapsed())
        }
    });
    let started = futures_util::future::join_all(ups).await;
    let downs = started.iter().map(|(em, _)| async move {
        let t = Instant::now();
        emulator::stop(docker, &em.id, &em.name, dir).await.expect("emulator removed");
        assert!(docker.inspect(&em.id).await.unwrap().is_none());
        t.elapsed()
    });
    let removed = futures_util::future::join_all(downs).await;
    started.into_iter().map(|(_, up)| up).zip(removed).collect()
}

fn big_repo(files: usize) -> support::TestRepo {
    let repo = support::TestRepo::new(&[("README.md", "big\n")]);
    for i in 0..files {
        let dir = repo.path.join(format!("src/d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i:05}.txt")), format!("file {i}\n")).unwrap();
    }
    support::run(repo.git().args(["add", "-A"]));
    support::run(repo.git().args(["commit", "--quiet", "-m", "20k files"]));
    repo
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("WARD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let dir = tempfile::tempdir().unwrap();
    println!("ward workspace benchmark, {rounds} rounds, medians\n");

    let docker = Docker::connect(None).await.expect("Docker");
    support::docstore_image();
    emulators(&docker, 1, 999, dir.path()).await; // warm-up
    for n in [1, 3] {
        let mut ready = Vec::new();
        let mut removed = Vec::new();
        for round in 0..rounds {
            for (up, down) in emulators(&docker, n, round, dir.path()).await {
                ready.push(up);
                removed.push(down);
            }
        }
        let (r, d) = (median(ready), median(removed));
        let verdict = if r < Duration::from_secs(1) { "meets < 1 s" } else { "MISSES < 1 s" };
        println!("emulator x{n}: create-to-ready {} ({verdict}), remove-to-verified {}", ms(r), ms(d));
    }

    let files = 20_000;
    let t = Instant::now();
    let repo = big_repo(files);
    println!("\nrepository of {files} files built in {}", ms(t.elapsed()));
    let git = GitRepo::open(&repo.path).unwrap();
    let branch = git.task_branch(1, "main", false).unwrap().name;
    let (mut ours, mut cli) = (Vec::new(), Vec::new());
    let (mut ours_add, mut cli_add) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let git2_run = |ours: &mut Vec<Duration>, ours_add: &mut Vec<Duration>| {
            let marker = Marker { issue: 1, stage: "bench".into(), run: format!("r{round}"), created_at: Utc::now() };
            let t = Instant::now();
            let wt = git.add_worktree(&repo.home, &branch, &marker).unwrap();
            ours_add.push(t.elapsed());
            let cleanup = git.remove_worktree(&wt).unwrap();
            ours.push(t.elapsed());
            assert!(cleanup.verified());
        };
        let cli_run = |cli: &mut Vec<Duration>, cli_add: &mut Vec<Duration>| {
            let path = repo.home.join(format!("cli-{round}"));
            let t = Instant::now();
            support::run(repo.git().args(["worktree", "add", "--quiet"]).arg(&path).arg(&branch));
            cli_add.push(t.elapsed());
            support::run(repo.git().args(["worktree", "remove", "--force"]).arg(&path));
            cli.push(t.elapsed());
            assert!(!path.exists());
        };
        // Alternate who goes first: the machine's load drifts.
        if round % 2 == 0 {
            git2_run(&mut ours, &mut ours_add);
            cli_run(&mut cli, &mut cli_add);
        } else {
            cli_run(&mut cli, &mut cli_add);
            git2_run(&mut ours, &mut ours_add);
        }
    }
    println!("  of which create: git2 {}, git CLI {}", ms(median(ours_add)), ms(median(cli_add)));
    let (o, c) = (median(ours), median(cli));
    let ratio = o.as_secs_f64() / c.as_secs_f64();
    let verdict = if ratio <= 1.2 { "meets <= 1.2x" } else { "MISSES <= 1.2x" };
    println!("worktree create+remove, {files} files: git2 {}, git CLI {}, ratio {ratio:.2}x ({verdict})", ms(o), ms(c));
}
