//! `cargo bench --bench emulators`: ward's emulator lifecycle against
//! testcontainers-rs, the tool a user would otherwise pick (issue 13).
//!
//! Both start the same local image (`ward-docstore:test`, built from
//! tests/docstore as the workspace tests build it) with both its ports
//! published, and wait with the same readiness probe: an HTTP `GET /ready`
//! on container port 8082 that answers 2xx, polled every 20 ms (ward's
//! probe, engine/workspace/emulator.rs; testcontainers' `WaitFor::http`
//! with `with_poll_interval(20 ms)`, its default being 100 ms).
//!
//! - create→ready: from the call that creates the container until the
//!   probe passes (ward: `emulator::start` without a seed command, whose
//!   create is refused with a clear error when the image is missing;
//!   testcontainers: `AsyncRunner::start`).
//! - remove→verified: from the call that removes the container until
//!   Docker says it does not exist (ward: `emulator::stop`, which writes
//!   the container's logs and inspect output first; testcontainers:
//!   `ContainerAsync::rm`, then the same inspect-until-gone check).
//!
//! One and three containers in parallel. Each round runs both tools one
//! after the other (never at the same time), alternating who goes first;
//! a round's figure is the wall time of its whole batch (all `n` ready, all
//! `n` removed). Medians and p95 over the rounds; the ratio is the median
//! of the per-round ratios ward / testcontainers (target: <= 1.0).
//!
//! Nothing is pulled: testcontainers pulls only when Docker answers 404 to
//! the create (async_runner.rs in testcontainers 0.28), and the image is
//! built locally and checked present before every round, so a pull would
//! fail the bench rather than hide in its figures.
//!
//! Prints one JSON object per line (benches/support): bench (naming the
//! peer), unit, median, p95, the peer's median, and the median of the
//! rounds' ratios. `WARD_BENCH_ROUNDS` sets the rounds (default 9).

#[allow(dead_code)]
#[path = "../tests/support/workspace.rs"]
mod support;

#[path = "support/mod.rs"]
mod bench_report;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use testcontainers::core::wait::HttpWaitStrategy;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use ward::workspace::Cancel;
use ward::workspace::emulator::{self, Docker, Owner};

const PEER: &str = "testcontainers-rs 0.28";
const POLL: Duration = Duration::from_millis(20);

/// (create→ready, remove→verified) wall times of one batch.
type Batch = (Duration, Duration);

async fn ward_batch(docker: &Docker, n: usize, tag: &str, dir: &Path) -> Batch {
    let config = support::emulator_config("");
    let cancel = Cancel::new();
    let owners: Vec<Owner> = (0..n)
        .map(|i| Owner {
            run: format!("peers{}-{tag}-{i}", std::process::id()),
            issue: 1,
            stage: "bench".into(),
            expires: Utc::now() + chrono::Duration::minutes(10),
            repository: "bench".into(),
            installation: "bench".into(),
        })
        .collect();
    let t = Instant::now();
    let ups = owners.iter().map(|owner| emulator::start(docker, &config, owner, dir, dir, &cancel));
    let started: Vec<_> =
        futures_util::future::join_all(ups).await.into_iter().map(|r| r.expect("ward's emulator starts")).collect();
    let ready = t.elapsed();
    let t = Instant::now();
    let downs = started.iter().map(|em| emulator::stop(docker, &em.id, &em.name, dir));
    for teardown in futures_util::future::join_all(downs).await {
        assert!(teardown.expect("ward's emulator removed").removed_verified);
    }
    let removed = t.elapsed();
    for em in &started {
        assert!(docker.inspect(&em.id).await.unwrap().is_none(), "ward left {}", em.name);
    }
    (ready, removed)
}

fn peer_image(name: String) -> testcontainers::ContainerRequest<GenericImage> {
    let (repo, tag) = support::IMAGE.split_once(':').expect("name:tag");
    let probe = HttpWaitStrategy::new("/ready")
        .with_port(8082.tcp())
        .with_poll_interval(POLL)
        .with_response_matcher(|r| r.status().is_success());
    GenericImage::new(repo, tag)
        .with_exposed_port(8081.tcp())
        .with_exposed_port(8082.tcp())
        .with_wait_for(WaitFor::http(probe))
        .with_container_name(name)
        .with_startup_timeout(Duration::from_secs(10))
}

/// `rm`, then inspect until Docker no longer knows the container (ward's
/// own check: every 100 ms, 5 s at most).
async fn peer_remove(docker: &Docker, container: ContainerAsync<GenericImage>) {
    let id = container.id().to_string();
    container.rm().await.expect("testcontainers removes its container");
    for _ in 0..50 {
        if docker.inspect(&id).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("testcontainers left container {id}");
}

async fn peer_batch(docker: &Docker, n: usize, tag: &str) -> Batch {
    let requests: Vec<_> = (0..n).map(|i| peer_image(format!("peers{}-tc-{tag}-{i}", std::process::id()))).collect();
    let t = Instant::now();
    let ups = requests.into_iter().map(|r| r.start());
    let started: Vec<_> =
        futures_util::future::join_all(ups).await.into_iter().map(|r| r.expect("testcontainers starts")).collect();
    let ready = t.elapsed();
    let t = Instant::now();
    futures_util::future::join_all(started.into_iter().map(|c| peer_remove(docker, c))).await;
    (ready, t.elapsed())
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn report(bench: &str, ours: &[f64], theirs: &[f64]) {
    let ratios: Vec<f64> = ours.iter().zip(theirs).map(|(a, b)| a / b).collect();
    // The ratio is the median of the rounds' ratios (each round ran both).
    bench_report::emit(
        &format!("{bench} (peer: {PEER})"),
        "ms",
        percentile(ours, 0.5),
        percentile(ours, 0.95),
        Some(percentile(theirs, 0.5)),
        Some(percentile(&ratios, 0.5)),
    );
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("WARD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(9);
    let dir = tempfile::tempdir().unwrap();
    let docker = Docker::connect(None).await.expect("Docker");
    support::docstore_image();
    // Warm-up: the image's layers in the page cache, testcontainers' client.
    ward_batch(&docker, 1, "warm", dir.path()).await;
    peer_batch(&docker, 1, "warm").await;
    for n in [1, 3] {
        let (mut ready, mut removed, mut peer_ready, mut peer_removed) = (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            assert!(docker.image_present(support::IMAGE).await.unwrap(), "{} went missing", support::IMAGE);
            let tag = format!("{n}-{round}");
            let (ours, theirs) = if round % 2 == 0 {
                let ours = ward_batch(&docker, n, &tag, dir.path()).await;
                (ours, peer_batch(&docker, n, &tag).await)
            } else {
                let theirs = peer_batch(&docker, n, &tag).await;
                (ward_batch(&docker, n, &tag, dir.path()).await, theirs)
            };
            ready.push(ms(ours.0));
            removed.push(ms(ours.1));
            peer_ready.push(ms(theirs.0));
            peer_removed.push(ms(theirs.1));
        }
        report(&format!("emulator create→ready x{n}"), &ready, &peer_ready);
        report(&format!("emulator remove→verified x{n}"), &removed, &peer_removed);
    }
}
