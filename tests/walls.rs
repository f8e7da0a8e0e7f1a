//! The walls around the agent (engine/agent/wall.rs, engine/agent/gate.rs),
//! attacked through real stages: `tests/hostile/walls.sh` runs as the agent
//! of `ward stage` and tries every way out it knows to listeners this test
//! holds on the host (HTTP through the proxy to a host outside the
//! allowlist, HTTPS CONNECT, TCP straight past the proxy to loopback and to
//! the host's address, UDP, ICMP over a raw socket, a DNS lookup), asks the
//! Docker socket for its version, and looks for the model key in its
//! environment, in every `/proc/*/environ`, in its HOME, temp folder and
//! worktree. Each attack is run with ward as root and as an unprivileged
//! user (tests/hostile/harness.rs). The control: `localhost` is in the
//! allowlist, and the test's control listener answers through the proxy;
//! with `agent.docker: true` the root agent reaches the Docker socket.
//! `tests/hostile/readonly.sh` tries to write outside what it was given
//! (ward's run folder, the main repository's `.git/config` and hooks, the
//! real HOME, `/usr`, `/etc`, another folder of its user), with its
//! worktree, a commit, its private folders and `agent.writable` the control.
//!
//! Before the walls, every exfiltration reached its listener, the key was
//! in the agent's environment, and the Docker socket answered root; before
//! the read-only system, every write outside succeeded (as root).

mod support;

// The hostile suite's harness; its decoys are that suite's.
#[allow(dead_code)]
#[path = "hostile/harness.rs"]
mod harness;

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::Sandbox;

/// The model key ward holds: a canary the harness looks for in every file.
const MODEL_KEY: &str = "sk-ant-CANARYmodelkey0000000000000000";

/// A listener on the host that records what reaches it, answering 200.
struct Listener {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Listener {
    fn start(addr: &str) -> Listener {
        let l = TcpListener::bind(addr).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                // The whole head read before answering: a server closing on
                // unread bytes resets the connection under its own answer.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                log.lock().unwrap().push(String::from_utf8_lossy(&request).into_owned());
                let body = "{\"type\":\"message\",\"content\":[]}";
                let _ =
                    write!(c, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            }
        });
        Listener { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// This machine's address toward the outside (no packet is sent).
fn host_ip() -> String {
    let s = UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.1:9").unwrap();
    s.local_addr().unwrap().ip().to_string()
}

struct Attack {
    s: Sandbox,
    out: std::process::Output,
    exfil: Listener,
    control: Listener,
    model: Listener,
    udp: UdpSocket,
}

fn attack(as_root: bool, docker: bool) -> Attack {
    if as_root {
        if !harness::is_root() {
            eprintln!("skipped: the tests do not run as root");
        }
        harness::as_root_here();
    }
    let s = Sandbox::new();
    let (exfil, control, model) =
        (Listener::start("0.0.0.0:0"), Listener::start("127.0.0.1:0"), Listener::start("127.0.0.1:0"));
    let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let ip = host_ip();
    let ports = [exfil.port.to_string(), control.port.to_string(), udp.local_addr().unwrap().port().to_string()];
    s.agent("walls", &[&ip, &ports[0], &ports[1], &ports[2]], &[]);
    // The claude-code preset's model API (its key kept by ward), with the
    // hostile command in place of Claude's; `localhost` allowed, the control.
    s.edit_config(|text| {
        let agent = format!("agent:\n  preset: claude-code\n  docker: {docker}\n  network:\n    allow: [localhost]\n");
        text.replacen("agent:\n", &agent, 1)
    });
    let base = format!("http://127.0.0.1:{}", model.port);
    let out = s.stage(&[("ANTHROPIC_API_KEY", MODEL_KEY), ("ANTHROPIC_BASE_URL", &base)]);
    Attack { s, out, exfil, control, model, udp }
}

fn walled(as_root: bool) {
    let a = attack(as_root, false);
    let loot = a.s.loot();
    let printed = format!("{}\n{}", String::from_utf8_lossy(&a.out.stdout), String::from_utf8_lossy(&a.out.stderr));
    // It ran, and what the proxy allows works.
    assert!(loot.contains("control: {\"type\""), "the control through the proxy:\n{loot}\n{printed}");
    assert_eq!(a.control.seen().len(), 1, "{loot}");
    // Nothing reached the host's listeners.
    assert!(a.exfil.seen().is_empty(), "exfiltrated: {:?}\n{loot}", a.exfil.seen());
    let mut buf = [0u8; 512];
    assert!(a.udp.recv_from(&mut buf).is_err(), "a UDP datagram left the wall:\n{loot}");
    assert!(loot.contains("proxy-http: blocked by ward's network wall: 127.0.0.1:"), "{loot}");
    assert!(loot.contains("proxy-connect: curl: (56)"), "CONNECT refused: {loot}");
    for way in ["direct-loopback: curl: (7)", "direct-host: curl: (7)", "tcp 127.0.0.1 failed", "dns failed"] {
        assert!(loot.contains(way), "{way}:\n{loot}");
    }
    assert!(!loot.contains(" sent"), "a socket sent something out:\n{loot}");
    // The Docker socket is hidden.
    assert!(!loot.contains("ApiVersion"), "the agent reached Docker:\n{loot}");
    // The model key: only the placeholder in reach; ward's proxy put the real one on the request.
    assert!(loot.contains("ANTHROPIC_API_KEY=ward-placeholder"), "{loot}");
    a.s.assert_no_canary(&a.out);
    let model = a.model.seen();
    assert_eq!(model.len(), 1, "the model was called once, through ward: {model:?}\n{loot}");
    assert!(
        model[0].to_ascii_lowercase().contains(&format!("x-api-key: {}", MODEL_KEY.to_ascii_lowercase())),
        "{model:?}"
    );
    assert!(!model[0].contains("placeholder"), "the agent's key reached the model: {model:?}");
    // Reported: logged, in the chart, in the patient's comment, and the stage ends as usual.
    assert!(printed.contains("the agent's connection was refused"), "{printed}");
    let chart = a.s.chart(1);
    let network = chart.split("<!-- WARD:NETWORK").nth(1).unwrap_or_default();
    assert!(network.contains(&format!("127.0.0.1:{} ×1", a.exfil.port)), "{chart}");
    assert!(network.contains("exfil.example.com:443 ×1"), "{network}");
    let issue = std::fs::read_to_string(a.s.repo.join(".ward/forge/issues/1.json")).unwrap();
    assert!(issue.contains("| Network | blocked: "), "{issue}");
    a.s.assert_normal_outcome(&a.out);
}

#[test]
fn an_unprivileged_wards_agent_cannot_leave_its_walls() {
    walled(false);
}

#[test]
fn a_root_wards_agent_cannot_leave_its_walls() {
    walled(true);
}

/// The control of the Docker attack: with `agent.docker: true`, ward as
/// root lets its agent reach the socket (where this machine has Docker).
#[test]
fn agent_docker_true_lets_a_root_wards_agent_reach_the_docker_socket() {
    if !std::path::Path::new("/var/run/docker.sock").exists() || !harness::is_root() {
        eprintln!("skipped: no Docker socket, or not root");
        return;
    }
    let a = attack(true, true);
    let loot = a.s.loot();
    assert!(loot.contains("ApiVersion"), "the control reached Docker:\n{loot}");
    a.s.assert_normal_outcome(&a.out);
}

/// Where no wall can be made, ward refuses to run the agent unless
/// ward.yml says `agent.network: open`, and says so; with `open`, the run goes on.
#[test]
fn without_a_wall_ward_refuses_unless_the_network_is_open() {
    // ward runs in a user namespace of its own (as root there), which owns
    // the sandbox only when the sandbox is the test's own user's.
    harness::as_root_here();
    let s = Sandbox::new();
    s.agent("env", &[], &[]);
    // A system that allows no user namespace: inside one of its own, ward
    // finds `user.max_user_namespaces` at 0 (as AppArmor's restriction on
    // Ubuntu 24.04 refuses them).
    let probe = std::process::Command::new("unshare").args(["-U", "--map-current-user", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: this system makes no user namespace at all");
        return;
    }
    // Inside a user namespace of its own, the limit can be set to 0 for what runs there.
    let wrapped = |args: &[&str]| {
        let mut cmd = std::process::Command::new("unshare");
        cmd.args([
            "-U",
            "--map-current-user",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"",
            "sh",
        ]);
        cmd.arg(&s.ward).args(["--root"]).arg(&s.repo).args(args).current_dir(&s.repo);
        cmd.env_clear().env("PATH", std::env::var("PATH").unwrap()).env("HOME", &s.home);
        cmd.output().unwrap()
    };
    let out = wrapped(&["stage", "--issue", "1"]);
    let printed = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if printed.contains("Permission denied") && printed.contains("max_user_namespaces") {
        eprintln!("skipped: this system does not let a namespace lower its own limit: {printed}");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{printed}");
    assert!(printed.contains("ward cannot wall the agent"), "{printed}");
    assert!(printed.contains("agent.network: open"), "it says what to do: {printed}");
    s.edit_config(|text| text.replacen("agent:\n", "agent:\n  network: open\n", 1));
    let out = wrapped(&["stage", "--issue", "1"]);
    let printed = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("unwalled"), "never silently: {printed}");
    let chart = s.chart(1);
    assert!(chart.contains("The agent ran on the host's network, unwalled"), "nor in the chart: {chart}");
}

/// Behind the walls the rest of the system is read-only: each write
/// outside the agent's worktree, private folders and `agent.writable` is
/// refused by the kernel (EROFS), and the controls succeed.
fn read_only(as_root: bool) {
    if as_root {
        if !harness::is_root() {
            eprintln!("skipped: the tests do not run as root");
        }
        harness::as_root_here();
    }
    let s = Sandbox::new();
    let writable = s.path().join("tool-cache");
    std::fs::create_dir_all(&writable).unwrap();
    let other = s.path().join("other-work");
    std::fs::create_dir_all(&other).unwrap();
    s.give_to_user(&writable);
    s.give_to_user(&other);
    let args = [s.repo.join(".git"), s.home.clone(), other.clone(), writable.clone()].map(|p| p.display().to_string());
    s.agent("readonly", &args.each_ref().map(String::as_str), &[]);
    s.edit_config(|text| {
        let line = format!("  writable: [{:?}, {:?}]\n", s.loot.display().to_string(), writable.display().to_string());
        let (before, after) = text.split_once("  writable: [").expect("the agent's writable line");
        let rest = after.split_once('\n').expect("a whole line").1;
        format!("{before}{line}{rest}")
    });
    let out = s.stage(&[]);
    let loot = s.loot();
    let printed = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    for name in ["ward's run folder", ".git/config", ".git/hooks", "HOME outside", "/usr", "/etc", "another folder"] {
        let line = loot.lines().find(|l| l.starts_with(&format!("write {name}: "))).unwrap_or_default();
        assert!(
            line.contains("Read-only file system"),
            "`{name}` was not refused as read-only: {line:?}\n{loot}\n{printed}"
        );
    }
    for name in
        ["control worktree", "control HOME", "control TMPDIR", "control /dev/shm", "control writable", "control commit"]
    {
        assert!(loot.contains(&format!("{name}: ok\n")), "{name}:\n{loot}\n{printed}");
    }
    assert!(!other.join("attack").exists() && !s.home.join(".gitconfig").exists(), "{loot}");
    let config = std::fs::read_to_string(s.repo.join(".git/config")).unwrap();
    assert!(!config.contains("attack"), "{config}");
    s.assert_normal_outcome(&out);
}

#[test]
fn an_unprivileged_wards_agent_writes_only_what_it_was_given() {
    read_only(false);
}

#[test]
fn a_root_wards_agent_writes_only_what_it_was_given() {
    read_only(true);
}
