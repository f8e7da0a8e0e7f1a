//! The walls' cost (engine/agent/wall.rs, gate.rs), measured in one run:
//!
//! - **added start time** of an agent run: `ward __wall --probe` (ward's
//!   check before each run) plus an agent started behind the wall
//!   (`ward __wall --relay ... -- true`: the namespaces, the relays, the
//!   nested namespace) against the same agent started directly;
//! - **added latency per streamed event**: server-sent events from an
//!   upstream on loopback, each stamped when written, read straight and
//!   through ward's model proxy (hyper, the real key added), the
//!   difference of the medians;
//! - **the proxy's memory**: this process's resident memory before the
//!   gate starts and after 20 streams of 500 events through it.
//!
//! `cargo bench --bench walls`. Figures into BENCHMARKS.md.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use ward::agent::gate::{Gate, ModelRoute};
use ward::config::agents::KeyStyle;

const RUNS: usize = 30;
const EVENTS: usize = 500;
const STREAMS: usize = 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().split(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// An upstream that answers each request with EVENTS events, one every
/// millisecond, each carrying the microseconds since `epoch` it was written at.
fn upstream(epoch: Instant) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = c.set_nodelay(true);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n");
                for _ in 0..EVENTS {
                    let ev = format!("event: tick\ndata: {}\n\n", epoch.elapsed().as_micros());
                    let _ = c.write_all(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = c.write_all(b"0\r\n\r\n");
            });
        }
    });
    port
}

/// Reads one stream from `port`; the latency of each event, in ms.
fn stream(port: u16, epoch: Instant) -> Vec<f64> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(true).unwrap();
    c.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: placeholder\r\ncontent-length: 0\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    while out.len() < EVENTS {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(sent) = line.strip_prefix("data: ").and_then(|v| v.trim().parse::<u128>().ok()) {
            out.push((epoch.elapsed().as_micros() - sent) as f64 / 1000.0);
        }
    }
    let _ = r.read(&mut [0u8; 64]);
    out
}

fn start_times(ward: &str) -> (f64, f64, f64) {
    let time = |f: &dyn Fn()| {
        let v: Vec<f64> = (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        median(v)
    };
    let direct = time(&|| assert!(Command::new("true").status().unwrap().success()));
    let probe = time(&|| assert!(Command::new(ward).args(["__wall", "--probe"]).status().unwrap().success()));
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let relay = format!("39410={}", sock.display());
    let walled = time(&|| {
        let mut cmd = Command::new(ward);
        cmd.args(["__wall", "--relay", &relay, "--hide", "/var/run/docker.sock", "--", "true"]);
        assert!(cmd.status().unwrap().success());
    });
    (direct, probe, walled)
}

fn main() {
    let ward = env!("CARGO_BIN_EXE_ward");
    let (direct, probe, walled) = start_times(ward);
    println!("agent start: direct {direct:.2} ms, probe {probe:.2} ms, behind the wall {walled:.2} ms");
    println!("added per agent run: {:.2} ms (probe + wall - direct)", probe + walled - direct);

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let epoch = Instant::now();
    let up = upstream(epoch);
    let before = rss_kb();
    let gate = rt
        .block_on(Gate::open(vec![ModelRoute {
            style: KeyStyle::XApiKey,
            upstream: format!("http://127.0.0.1:{up}"),
            key: "sk-bench".into(),
        }]))
        .unwrap();
    let proxy: u16 = gate.model_urls[0].rsplit(':').next().unwrap().parse().unwrap();
    let (mut straight, mut proxied) = (Vec::new(), Vec::new());
    for _ in 0..STREAMS {
        straight.extend(stream(up, epoch));
        proxied.extend(stream(proxy, epoch));
    }
    let after = rss_kb();
    let (s, p) = (median(straight.clone()), median(proxied.clone()));
    println!(
        "per event: straight median {s:.3} ms, through the model proxy {p:.3} ms: added {:.3} ms ({} events each)",
        p - s,
        proxied.len()
    );
    println!(
        "resident memory: {before} kB before the gate, {after} kB after {STREAMS} streams: +{} kB",
        after.saturating_sub(before)
    );
    drop(gate);
}
