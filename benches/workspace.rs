//! `cargo bench --bench workspace`: what a workspace costs.
//!
//! - The engine's time per stage on a synthetic 30,000-file repository:
//!   workspace up, commit what the agent left (one new file), down. A
//!   patient's first stage is measured against the git CLI's own
//!   `git worktree add` + `git worktree remove` of the same branch in the
//!   same round, alternating who goes first (target: ratio <= 1.2); its
//!   later stages in absolute time (target: <= 1 s). The first stage plus
//!   the worktree's removal at discharge is reported against the same
//!   baseline, for the whole life of a patient's worktree, and against the
//!   CLI doing the same work (`git worktree add`, `git add -A`, `git
//!   commit`, `git worktree remove`), which pays the same commit.
//! - A patient's worktree created and removed by ward (`Workspace::up`,
//!   then `release`, no agent, nothing committed) against the same CLI
//!   pair, alternating (target: ratio <= 1.2): the engine's worktree
//!   lifecycle alone, without the leftovers commit the CLI never makes.
//! - Emulator create-to-ready and remove-to-verified for the docstore test
//!   image, one at a time and three in parallel (target: ready < 1 s).
//!   `WARD_BENCH_SKIP_DOCKER=1` leaves them out.
//!
//! Prints one JSON object per figure beside the human lines (benches/support):
//! for the pairs, the peer's median and the median of the rounds' ratios.
//!
//! Every measured operation starts after a `sync`, so that one's write-back
//! does not land on the next. Prints medians. `WARD_BENCH_ROUNDS` sets the
//! rounds (default 9), `WARD_BENCH_FILES` the files (default 30,000);
//! `WARD_BENCH_VERBOSE=1` prints each stage's own setup, commit and
//! teardown times.

#[allow(dead_code)]
#[path = "../tests/support/workspace.rs"]
mod support;

#[path = "support/mod.rs"]
mod bench_report;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use ward::workspace::emulator::{self, Docker, Owner};
use ward::workspace::worktree::{GitRepo, Layout, remove_patient};
use ward::workspace::{Cancel, Workspace};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median of per-round ratios.
fn median_ratio(mut ratios: Vec<f64>) -> f64 {
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// What a ratio says against the issue's 1.2x.
fn against_target(ratio: f64) -> &'static str {
    if ratio <= 1.2 { "meets <= 1.2x" } else { "MISSES <= 1.2x" }
}

/// One JSON line: ward's samples against the peer's, with the rounds' ratio
/// (or against `target` when there is no peer).
fn emit(bench: &str, ours: &[Duration], peer: Option<(&[Duration], f64)>, target: Option<Duration>) {
    let mut sorted = ours.to_vec();
    sorted.sort();
    let (mid, p95) = (bench_report::percentile(&sorted, 0.5), bench_report::percentile(&sorted, 0.95));
    let (peer_median, ratio) = match (peer, target) {
        (Some((peer, ratio)), _) => (Some(bench_report::ms(median(peer.to_vec()))), Some(ratio)),
        (None, Some(target)) => (None, Some(mid.as_secs_f64() / target.as_secs_f64())),
        (None, None) => (None, None),
    };
    bench_report::emit(bench, "ms", bench_report::ms(mid), bench_report::ms(p95), peer_median, ratio);
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

/// A patient's worktree created and removed by ward, with nothing in
/// between: its lifecycle without an agent or a commit.
async fn lifecycle(repo: &support::TestRepo, issue: u64, run: &str) -> Duration {
    settle();
    let t = Instant::now();
    let ws = Workspace::up(repo.request(issue, "bench", run), &Cancel::new()).await.expect("up");
    let path = ws.worktree.path.clone();
    ws.release().await.expect("release");
    let took = t.elapsed();
    assert!(!path.exists());
    took
}

/// The git CLI's own worktree of the same commit (on a branch of its own:
/// the patient's stays checked out in its worktree): add, then `work` in
/// it, then remove. `work` returns the part of its time not to count.
fn cli_worktree(repo: &support::TestRepo, name: &str, work: impl FnOnce(&Path) -> Duration) -> Duration {
    let branch = format!("bench/{name}");
    support::run(repo.git().args(["branch", &branch, "main"]));
    let path = repo.tmp.path().join(name);
    settle();
    let t = Instant::now();
    support::run(repo.git().args(["worktree", "add", "--quiet"]).arg(&path).arg(&branch));
    let untimed = work(&path);
    support::run(repo.git().args(["worktree", "remove", "--force"]).arg(&path));
    let took = t.elapsed() - untimed;
    assert!(!path.exists());
    took
}

/// `git worktree add` + `git worktree remove`, nothing in between.
fn cli(repo: &support::TestRepo, round: &str) -> Duration {
    cli_worktree(repo, &format!("cli-{round}"), |_| Duration::ZERO)
}

/// The same first stage done with the git CLI, as a user would script it:
/// `git worktree add`, the agent's file, `git add -A`, `git commit`, then
/// `git worktree remove` (the discharge). The agent's write is not timed,
/// as in [`stage`].
fn cli_stage(repo: &support::TestRepo, round: usize) -> Duration {
    cli_worktree(repo, &format!("cli-stage-{round}"), |path| {
        let agent = Instant::now();
        std::fs::write(path.join("left.txt"), "left by the agent\n").unwrap();
        let agent = agent.elapsed();
        support::run(repo.git().arg("-C").arg(path).args(["add", "-A"]));
        support::run(repo.git().arg("-C").arg(path).args(["commit", "--quiet", "--no-verify", "-m", "leftovers"]));
        agent
    })
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("WARD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(9);
    println!("ward workspace benchmark, {rounds} rounds, medians\n");

    let files: usize = std::env::var("WARD_BENCH_FILES").ok().and_then(|f| f.parse().ok()).unwrap_or(30_000);
    let t = Instant::now();
    let repo = big_repo(files);
    println!("repository of {files} files built in {}", ms(t.elapsed()));
    let (mut first, mut later, mut baseline, mut ratios) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut removal, mut life_ratios) = (Vec::new(), Vec::new());
    let (mut script_baseline, mut script_ratios) = (Vec::new(), Vec::new());
    let (mut alone, mut alone_baseline, mut alone_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let layout = Layout::new(&repo.home, &GitRepo::open(&repo.path).unwrap()).unwrap();
    for round in 0..rounds {
        // A new patient each round: its first stage creates its workspace.
        let issue = 1000 + round as u64;
        // The CLI doing the same stage goes before ward in even rounds, after in odd ones.
        let script_first = (round % 2 == 0).then(|| cli_stage(&repo, round));
        let (ours, theirs) = if round % 2 == 0 {
            let ours = stage(&repo, issue, &format!("r{round}-1")).await;
            (ours, cli(&repo, &round.to_string()))
        } else {
            let theirs = cli(&repo, &round.to_string());
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
        let script = script_first.unwrap_or_else(|| cli_stage(&repo, round));
        script_baseline.push(script);
        script_ratios.push((ours + took).as_secs_f64() / script.as_secs_f64());
        // The worktree's lifecycle alone, against the CLI pair again.
        let (issue, run) = (5000 + round as u64, format!("life{round}"));
        let (ours, theirs) = if round % 2 == 1 {
            let ours = lifecycle(&repo, issue, &run).await;
            (ours, cli(&repo, &run))
        } else {
            let theirs = cli(&repo, &run);
            (lifecycle(&repo, issue, &run).await, theirs)
        };
        alone.push(ours);
        alone_baseline.push(theirs);
        alone_ratios.push(ours.as_secs_f64() / theirs.as_secs_f64());
    }
    let ratio = median_ratio(ratios);
    let verdict = against_target(ratio);
    println!(
        "first stage of a patient, {files} files: ward {}, git worktree add+remove {}, ratio {ratio:.2}x ({verdict})",
        ms(median(first.clone())),
        ms(median(baseline.clone()))
    );
    let life_ratio = median_ratio(life_ratios);
    let verdict = against_target(life_ratio);
    println!(
        "  plus its removal at discharge ({}): ratio {life_ratio:.2}x to git worktree add+remove ({verdict})",
        ms(median(removal.clone()))
    );
    let script_ratio = median_ratio(script_ratios);
    let verdict = against_target(script_ratio);
    println!(
        "  the same against the CLI doing the same work (add, add -A, commit, remove: {}): ratio {script_ratio:.2}x ({verdict})",
        ms(median(script_baseline.clone()))
    );
    let alone_ratio = median_ratio(alone_ratios);
    let verdict = against_target(alone_ratio);
    println!(
        "worktree create+remove, {files} files: ward {}, git worktree add+remove {}, ratio {alone_ratio:.2}x ({verdict})",
        ms(median(alone.clone())),
        ms(median(alone_baseline.clone()))
    );
    let l = median(later.clone());
    let verdict = if l <= Duration::from_secs(1) { "meets <= 1 s" } else { "MISSES <= 1 s" };
    println!("later stages of a patient, {files} files: ward {} ({verdict})", ms(l));
    let life: Vec<Duration> = first.iter().zip(&removal).map(|(a, b)| *a + *b).collect();
    emit("workspace/first-stage vs git-worktree-add+remove", &first, Some((&baseline, ratio)), None);
    emit("workspace/first-stage+removal vs git-worktree-add+remove", &life, Some((&baseline, life_ratio)), None);
    emit("workspace/first-stage+removal vs git-cli-same-stage", &life, Some((&script_baseline, script_ratio)), None);
    emit("workspace/create+remove vs git-worktree-add+remove", &alone, Some((&alone_baseline, alone_ratio)), None);
    emit("workspace/later-stage (ratio to the 1 s target)", &later, None, Some(Duration::from_secs(1)));

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
        let (r, d) = (median(ready.clone()), median(removed.clone()));
        let verdict = if r < Duration::from_secs(1) { "meets < 1 s" } else { "MISSES < 1 s" };
        println!("emulator x{n}: create-to-ready {} ({verdict}), remove-to-verified {}", ms(r), ms(d));
        emit(
            &format!("workspace/emulator-x{n}/create-to-ready (ratio to 1 s)"),
            &ready,
            None,
            Some(Duration::from_secs(1)),
        );
        emit(&format!("workspace/emulator-x{n}/remove-to-verified"), &removed, None, None);
    }
}
