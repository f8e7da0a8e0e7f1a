//! `cargo bench --bench workspace`: what a workspace costs.
//!
//! - The engine's time per stage on a synthetic 30,000-file repository:
//!   workspace up, commit what the agent left (one new file), down. A
//!   patient's first stage is measured against the git CLI's own
//!   `git worktree add` + `git worktree remove` of the same branch in the
//!   same round, alternating who goes first (target: ratio <= 1.2); its
//!   later stages in absolute time (target: <= 1 s). The first stage plus
//!   the worktree's removal at discharge is reported against the same
//!   baseline, for the whole life of a patient's worktree.
//! - Emulator create-to-ready and remove-to-verified for the docstore test
//!   image, one at a time and three in parallel (target: ready < 1 s).
//!   `WARD_BENCH_SKIP_DOCKER=1` leaves them out.
//!
//! Every measured operation starts after a `sync`, so that one's write-back
//! does not land on the next. Prints medians. `WARD_BENCH_ROUNDS` sets the
//! rounds (default 9); `WARD_BENCH_VERBOSE=1` prints each stage's own
//! setup, commit and teardown times.

#[allow(dead_code)]
#[path = "../tests/support/workspace.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use ward::workspace::emulator::{self, Docker, Owner};
use ward::workspace::worktree::{GitRepo, Layout, remove_patient};
use ward::workspace::{Cancel, Workspace};

const FILES: usize = 30_000;

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
            repository: "bench".into(),
            installation: "bench".into(),
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

/// A repository of `files` small files in 300 folders, one commit.
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
    support::run(repo.git().args(["commit", "--quiet", "-m", "30k files"]));
    repo
}

/// One stage as the engine runs it around a stand-in agent that leaves one
/// new file: up, commit leftovers, down. Returns the engine's time.
/// Each measured operation starts with the disk caught up: the kernel's
/// write-back of the previous one's 30,000 files would land on whichever
/// operation comes next.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

async fn stage(repo: &support::TestRepo, issue: u64, run: &str) -> Duration {
    settle();
    let t = Instant::now();
    let mut ws = Workspace::up(repo.request(issue, "bench", run), &Cancel::new()).await.expect("up");
    let agent = Instant::now();
    std::fs::write(ws.worktree.path.join(format!("{run}.txt")), "left by the agent\n").unwrap();
    let agent = agent.elapsed();
    assert!(ws.commit_leftovers().await.expect("commit").is_some());
    let checkout = ws.worktree.ready_ms;
    let report = ws.down().await.expect("down");
    if std::env::var_os("WARD_BENCH_VERBOSE").is_some() {
        let (up, commit, down) = (report.up_ms, report.commit_ms, report.down_ms);
        println!("  {run}: checkout {checkout} ms, up {up} ms, commit {commit} ms, down {down} ms");
    }
    t.elapsed() - agent
}

/// The git CLI's own worktree of the same commit (on a branch of its own:
/// the patient's stays checked out in its worktree): add, then remove.
fn cli(repo: &support::TestRepo, round: usize) -> Duration {
    let branch = format!("bench/cli-{round}");
    support::run(repo.git().args(["branch", &branch, "main"]));
    let path = repo.tmp.path().join(format!("cli-{round}"));
    settle();
    let t = Instant::now();
    support::run(repo.git().args(["worktree", "add", "--quiet"]).arg(&path).arg(&branch));
    support::run(repo.git().args(["worktree", "remove", "--force"]).arg(&path));
    let took = t.elapsed();
    assert!(!path.exists());
    took
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("WARD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(9);
    println!("ward workspace benchmark, {rounds} rounds, medians\n");

    let t = Instant::now();
    let repo = big_repo(FILES);
    println!("repository of {FILES} files built in {}", ms(t.elapsed()));
    let (mut first, mut later, mut baseline, mut ratios) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut removal, mut life_ratios) = (Vec::new(), Vec::new());
    let layout = Layout::new(&repo.home, &GitRepo::open(&repo.path).unwrap()).unwrap();
    for round in 0..rounds {
        // A new patient each round: its first stage creates its workspace.
        let issue = 1000 + round as u64;
        let (ours, theirs) = if round % 2 == 0 {
            let ours = stage(&repo, issue, &format!("r{round}-1")).await;
            (ours, cli(&repo, round))
        } else {
            let theirs = cli(&repo, round);
            (stage(&repo, issue, &format!("r{round}-1")).await, theirs)
        };
        first.push(ours);
        baseline.push(theirs);
        ratios.push(ours.as_secs_f64() / theirs.as_secs_f64());
        for s in 2..=3 {
            later.push(stage(&repo, issue, &format!("r{round}-{s}")).await);
        }
        // Discharge: the patient's worktree goes, verified.
        settle();
        let t = Instant::now();
        let git = GitRepo::open(&repo.path).unwrap();
        let cleanup = remove_patient(&git, &layout, issue, None).unwrap().expect("the patient's worktree");
        let took = t.elapsed();
        assert!(cleanup.verified());
        removal.push(took);
        life_ratios.push((ours + took).as_secs_f64() / theirs.as_secs_f64());
    }
    life_ratios.sort_by(f64::total_cmp);
    let life_ratio = life_ratios[life_ratios.len() / 2];
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    let verdict = if ratio <= 1.2 { "meets <= 1.2x" } else { "MISSES <= 1.2x" };
    println!(
        "first stage of a patient, {FILES} files: ward {}, git worktree add+remove {}, ratio {ratio:.2}x ({verdict})",
        ms(median(first)),
        ms(median(baseline))
    );
    let verdict = if life_ratio <= 1.2 { "meets <= 1.2x" } else { "MISSES <= 1.2x" };
    println!(
        "  plus its removal at discharge ({}): ratio {life_ratio:.2}x to git worktree add+remove ({verdict})",
        ms(median(removal))
    );
    let l = median(later);
    let verdict = if l <= Duration::from_secs(1) { "meets <= 1 s" } else { "MISSES <= 1 s" };
    println!("later stages of a patient, {FILES} files: ward {} ({verdict})", ms(l));

    if std::env::var("WARD_BENCH_SKIP_DOCKER").is_ok_and(|v| v == "1") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
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
}
