//! `cargo bench --bench postgres`: the `postgres` preset against the same
//! done by hand with the Docker CLI (issue 29), on the image
//! `images/postgres/build` makes (`WARD_POSTGRES_IMAGE`, else the newest
//! local `ward-postgres:*`; without one the bench says so and stops).
//!
//! - create→ready: ward's `emulator::start` (create, start, the exec probe
//!   `psql -c 'select 1'` every 20 ms) against `docker run -d -p
//!   127.0.0.1::5432` then `docker exec … psql -c 'select 1'` until it
//!   succeeds (the same readiness, every 20 ms).
//! - checkpoint of 10,000 rows: export from a loaded server, import into a
//!   fresh ready one, export again and compare (the read-back). ward: its
//!   bollard execs with the preset's commands; by hand: `docker exec
//!   pg_dump > file`, `docker exec -i psql < file`, `docker exec pg_dump`
//!   and `cmp`-like comparison of the bytes in the bench.
//!
//! Rounds alternate who goes first. Medians and p95 over the rounds; the
//! ratio is the median of the per-round ratios ward / by hand.
//! `WARD_BENCH_ROUNDS` sets the rounds (default 7).

#[path = "support/mod.rs"]
mod bench_report;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use ward::config::EmulatorConfig;
use ward::workspace::emulator::{self, Docker, Emulator, Owner};
use ward::workspace::{Cancel, inside_env};

const ROWS: usize = 10_000;

fn image() -> Option<String> {
    if let Some(i) = std::env::var("WARD_POSTGRES_IMAGE").ok().filter(|v| !v.is_empty()) {
        return Some(i);
    }
    let out = Command::new("docker")
        .args(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=ward-postgres:*"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().next().map(str::to_string)
}

fn config(image: &str) -> EmulatorConfig {
    serde_yaml::from_str(&format!("preset: postgres\nimage: {image}\n")).unwrap()
}

fn owner(tag: &str) -> Owner {
    Owner {
        run: format!("pgbench{}-{tag}", std::process::id()),
        issue: 1,
        stage: "bench".into(),
        expires: Utc::now() + chrono::Duration::minutes(10),
        repository: "bench".into(),
        installation: "bench".into(),
    }
}

fn docker_cli(args: &[&str], stdin: Option<&[u8]>) -> (bool, Vec<u8>) {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker runs");
    if let Some(data) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(data).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), out.stdout)
}

/// By hand: `docker run`, then `psql -c 'select 1'` until it answers.
fn hand_up(image: &str, name: &str) -> String {
    let (ok, id) = docker_cli(&["run", "-d", "--name", name, "-p", "127.0.0.1::5432", image], None);
    assert!(ok, "docker run");
    let id = String::from_utf8_lossy(&id).trim().to_string();
    loop {
        if docker_cli(&["exec", &id, "psql", "-X", "-q", "-c", "select 1"], None).0 {
            return id;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hand_rm(id: &str) {
    docker_cli(&["rm", "-f", "-v", id], None);
}

const EXPORT: &[&str] = &["pg_dump", "--no-owner", "--no-privileges", "--quote-all-identifiers", "--restrict-key=ward"];

fn load_sql() -> String {
    let mut sql =
        String::from("create table rows_t (id int primary key, body text not null);\ninsert into rows_t values\n");
    for i in 0..ROWS {
        let sep = if i + 1 == ROWS { ";\n" } else { ",\n" };
        sql.push_str(&format!("({i}, 'row {i} of the checkpoint bench, some text'){sep}"));
    }
    sql
}

async fn ward_up(docker: &Docker, c: &EmulatorConfig, tag: &str) -> (Emulator, Duration) {
    let dir = std::env::temp_dir().join(format!("pgbench-{}", std::process::id()));
    let t = Instant::now();
    let em = emulator::start(docker, c, &owner(tag), &dir, &dir, &Cancel::new()).await.expect("ward's emulator");
    (em, t.elapsed())
}

async fn ward_down(docker: &Docker, em: &Emulator) {
    let dir = std::env::temp_dir().join(format!("pgbench-{}", std::process::id()));
    emulator::stop(docker, &em.id, &em.name, &dir).await.expect("removed");
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let Some(image) = image() else {
        eprintln!("no ward-postgres image: build it with images/postgres/build (the bench did not run)");
        return;
    };
    let rounds: usize = std::env::var("WARD_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let docker = Docker::connect(None).await.expect("Docker");
    let c = config(&image);
    let cp = c.checkpoint().unwrap();
    let env = inside_env(&c);
    let import = cp.import.clone();
    let load = load_sql();
    // The loaded source, once: ward's server, read by both.
    let (source, _) = ward_up(&docker, &c, "source").await;
    docker.exec(&source.id, &import, &env, Some(load.as_bytes()), Duration::from_secs(120)).await.expect("load");
    let envs: Vec<String> = env.iter().flat_map(|e| ["-e".to_string(), e.clone()]).collect();

    let (mut up_w, mut up_h, mut up_r) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cp_w, mut cp_h, mut cp_r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let ward_round = || async {
            let (fresh, ready) = ward_up(&docker, &c, &format!("w{round}")).await;
            let t = Instant::now();
            let dump = docker.exec(&source.id, &cp.export, &env, None, cp.time_limit).await.unwrap();
            docker.exec(&fresh.id, &cp.import, &env, Some(&dump), cp.time_limit).await.unwrap();
            let back = docker.exec(&fresh.id, &cp.export, &env, None, cp.time_limit).await.unwrap();
            assert_eq!(back, dump, "ward's read-back");
            let took = t.elapsed();
            ward_down(&docker, &fresh).await;
            (ready, took)
        };
        let hand_round = || {
            let name = format!("pgbench{}-hand{round}", std::process::id());
            let t = Instant::now();
            let id = hand_up(&image, &name);
            let ready = t.elapsed();
            let t = Instant::now();
            let mut args: Vec<&str> = vec!["exec"];
            args.extend(envs.iter().map(String::as_str));
            let mut export = args.clone();
            export.push(&source.id);
            export.extend(EXPORT);
            let (ok, dump) = docker_cli(&export, None);
            assert!(ok);
            let mut imp: Vec<&str> = vec!["exec", "-i"];
            imp.extend(envs.iter().map(String::as_str));
            imp.push(&id);
            imp.extend(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-f", "-"]);
            assert!(docker_cli(&imp, Some(&dump)).0);
            let mut again = args.clone();
            again.push(&id);
            again.extend(EXPORT);
            let (ok, back) = docker_cli(&again, None);
            assert!(ok && back == dump, "by hand's read-back");
            let took = t.elapsed();
            hand_rm(&id);
            (ready, took)
        };
        let (w, h) = if round % 2 == 0 {
            let w = ward_round().await;
            (w, hand_round())
        } else {
            let h = hand_round();
            (ward_round().await, h)
        };
        up_w.push(bench_report::ms(w.0));
        up_h.push(bench_report::ms(h.0));
        up_r.push(w.0.as_secs_f64() / h.0.as_secs_f64());
        cp_w.push(bench_report::ms(w.1));
        cp_h.push(bench_report::ms(h.1));
        cp_r.push(w.1.as_secs_f64() / h.1.as_secs_f64());
    }
    ward_down(&docker, &source).await;
    for (name, w, h, r) in [
        ("postgres create->ready vs docker run + psql select 1", &up_w, &up_h, &up_r),
        ("postgres checkpoint 10000 rows export+import+read-back vs docker exec pg_dump/psql", &cp_w, &cp_h, &cp_r),
    ] {
        let (median, p95, peer) = (percentile(w, 0.5), percentile(w, 0.95), percentile(h, 0.5));
        eprintln!(
            "{name}: ward median {median:.1} ms (p95 {p95:.1}), by hand {peer:.1} ms, ratio {:.2}",
            percentile(r, 0.5)
        );
        bench_report::emit(name, "ms", median, p95, Some(peer), Some(percentile(r, 0.5)));
    }
}
