//! The network wall, inside: the agent runs under `ward __wall`, which
//! makes a new user, network and mount namespace (unprivileged users may on
//! most Linux systems; root always may), so the agent's only network is a
//! loopback of its own. There ward listens on the 127.0.0.1 ports it hands
//! the agent (the model proxy, the egress proxy, each emulator port) and
//! relays every connection to a Unix socket that ward serves outside
//! ([`super::gate`]): a path on the file system crosses network namespaces,
//! nothing else does. No other route exists: no DNS, no raw socket reaches
//! anything but this loopback.
//!
//! ```text
//! ward (outside, holds the key) ── gate: model.sock, egress.sock, port-N.sock
//!   └─ ward __wall (new user+net+mount namespace, lo up, relays 127.0.0.1:P -> sock)
//!        └─ the agent (no capability, no new privileges, the Docker socket hidden)
//! ```
//!
//! The user namespace maps ward's own uid and gid to themselves, so the
//! agent is the same user it was. The agent gets a second user and mount
//! namespace inside the first ([`InnerMaps`]): root stays uid 0 there, with
//! capabilities over nothing but its own namespaces; the mounts the wall
//! made (the Docker socket hidden) are locked for it; the wall's process is
//! non-dumpable. It cannot enter the host's network namespace, unmount what
//! hides the Docker socket, or read ward's memory.

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// ward's hidden subcommand that runs an agent behind the wall.
pub const SUBCOMMAND: &str = "__wall";

/// The Docker sockets hidden from the agent (a file bound over each that
/// exists) unless ward.yml says `agent.docker: true`.
pub const DOCKER_SOCKETS: &[&str] = &["/var/run/docker.sock", "/run/docker.sock"];

/// A port inside the wall and the socket outside it relays to.
#[derive(Debug, Clone, PartialEq)]
pub struct Relay {
    pub port: u16,
    pub socket: PathBuf,
}

/// How ward starts an agent behind the wall: the argument vector that
/// replaces the agent's own.
pub fn command(ward: &Path, relays: &[Relay], hide: &[PathBuf], agent: &[String]) -> Vec<String> {
    let mut args = vec![ward.to_string_lossy().into_owned(), SUBCOMMAND.to_string()];
    for r in relays {
        args.push("--relay".into());
        args.push(format!("{}={}", r.port, r.socket.display()));
    }
    for h in hide {
        args.push("--hide".into());
        args.push(h.to_string_lossy().into_owned());
    }
    args.push("--".into());
    args.extend(agent.iter().cloned());
    args
}

/// Whether this system lets ward wall an agent: `ward __wall --probe`
/// makes the namespaces and brings their loopback up, then exits. `Err`
/// is the system's own reason, for a sentence.
pub async fn probe(ward: &Path) -> Result<(), String> {
    let out = tokio::process::Command::new(ward)
        .args([SUBCOMMAND, "--probe"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("could not start {}: {e}", ward.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(if said.is_empty() { format!("`ward {SUBCOMMAND} --probe` ended with {}", out.status) } else { said })
}

/// `ward __wall`: runs in a process of its own, with one thread (before
/// any runtime starts). Returns the exit code (or ends by the agent's signal).
pub fn main(args: &[OsString]) -> i32 {
    match jail(args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("ward's network wall: {message}");
            125
        }
    }
}

fn jail(args: &[OsString]) -> Result<i32, String> {
    let mut relays = Vec::new();
    let mut hide = Vec::new();
    let mut probe = false;
    let mut it = args.iter();
    let mut agent: Vec<OsString> = Vec::new();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--probe") => probe = true,
            Some("--relay") => {
                let v = it.next().and_then(|v| v.to_str()).ok_or("--relay needs PORT=SOCKET")?;
                let (port, socket) = v.split_once('=').ok_or("--relay needs PORT=SOCKET")?;
                let port: u16 = port.parse().map_err(|_| format!("`{port}` is not a port"))?;
                relays.push(Relay { port, socket: PathBuf::from(socket) });
            }
            Some("--hide") => hide.push(PathBuf::from(it.next().ok_or("--hide needs a path")?)),
            Some("--") => {
                agent = it.cloned().collect();
                break;
            }
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    // This process holds nothing secret (its environment is the agent's),
    // and a non-dumpable process may not write its own uid_map.
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    enter_namespaces(&hide)?;
    if probe {
        return Ok(0);
    }
    for relay in relays {
        let listener = TcpListener::bind(("127.0.0.1", relay.port))
            .map_err(|e| format!("could not listen on 127.0.0.1:{} inside the wall: {e}", relay.port))?;
        std::thread::spawn(move || serve(listener, relay.socket));
    }
    // Nothing of this process is the agent's to read or to drive: its
    // mounts (what hides the Docker socket) are changed only from here.
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let (program, rest) = agent.split_first().ok_or("no agent command after `--`")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    let inner = InnerMaps::new();
    // SAFETY: between fork and exec only unshare(2), prctl(2), open(2),
    // write(2) and close(2), on buffers made before the fork.
    unsafe {
        cmd.pre_exec(move || inner.enter());
    }
    let mut child = cmd.spawn().map_err(|e| format!("could not start the agent {program:?}: {e}"))?;
    let status = child.wait().map_err(|e| format!("could not wait for the agent: {e}"))?;
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        // SAFETY: signal(2) and raise(2) end this process as the agent ended.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    Ok(status.code().unwrap_or(1))
}

/// The agent's own user and mount namespaces, inside the wall's: the
/// mounts made by the wall (the Docker socket hidden) are locked there, so
/// not even root inside can take them away, and the agent's own sandbox
/// (codex's bubblewrap) can still make namespaces of its own. Its uid and
/// gid stay what they were.
#[derive(Clone)]
struct InnerMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl InnerMaps {
    fn new() -> Self {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        InnerMaps { uid_map: format!("{uid} {uid} 1").into_bytes(), gid_map: format!("{gid} {gid} 1").into_bytes() }
    }

    /// Between fork and exec: no allocation.
    fn enter(&self) -> std::io::Result<()> {
        // SAFETY: the calls named in the caller's comment, on valid buffers.
        unsafe {
            // A non-dumpable process may not write its own maps; this one
            // holds nothing (its exec makes it the agent).
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.gid_map)?;
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        }
        Ok(())
    }
}

/// open(2), write(2), close(2): safe between fork and exec.
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: a valid C string and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// New user, network and mount namespaces; the same uid and gid inside;
/// the hidden paths covered; the loopback up.
fn enter_namespaces(hide: &[PathBuf]) -> Result<(), String> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare(2) with flags; this process has one thread.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWNS) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "could not create the agent's user and network namespaces (unshare: {e}); this system does not let \
             ward wall the agent"
        ));
    }
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("could not write {file} for the agent's namespace: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    // Mounts made here stay here.
    let root = CString::new("/").map_err(|e| e.to_string())?;
    // SAFETY: mount(2) with valid C strings and null pointers where allowed.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(format!("could not make the agent's mounts private: {}", std::io::Error::last_os_error()));
    }
    let null = CString::new("/dev/null").map_err(|e| e.to_string())?;
    for path in hide.iter().filter(|p| p.symlink_metadata().is_ok()) {
        let target = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: as above.
        if unsafe { libc::mount(null.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) }
            != 0
        {
            return Err(format!(
                "could not hide {} from the agent: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    loopback_up()
}

/// `ip link set lo up`, with ioctl(2): SIOCGIFFLAGS then SIOCSIFFLAGS.
fn loopback_up() -> Result<(), String> {
    // SAFETY: socket(2), ioctl(2) on a 40-byte ifreq (name, then flags), close(2).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(format!("could not open a socket inside the wall: {}", std::io::Error::last_os_error()));
        }
        let mut req = [0u8; 40];
        req[..2].copy_from_slice(b"lo");
        let rc = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, req.as_mut_ptr());
        let flags = i16::from_ne_bytes([req[16], req[17]]) | (libc::IFF_UP | libc::IFF_RUNNING) as i16;
        req[16..18].copy_from_slice(&flags.to_ne_bytes());
        let rc = if rc == 0 { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, req.as_mut_ptr()) } else { rc };
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(format!("could not bring the loopback up inside the wall: {err}"));
        }
    }
    Ok(())
}

/// Accepts on a port inside the wall and relays each connection to the socket.
fn serve(listener: TcpListener, socket: PathBuf) {
    for conn in listener.incoming() {
        let Ok(tcp) = conn else { continue };
        let socket = socket.clone();
        std::thread::spawn(move || {
            let Ok(unix) = UnixStream::connect(&socket) else { return };
            let _ = tcp.set_nodelay(true);
            let (Ok(tcp2), Ok(unix2)) = (tcp.try_clone(), unix.try_clone()) else { return };
            let up = std::thread::spawn(move || pipe_tcp_to_unix(tcp, unix));
            pipe_unix_to_tcp(unix2, tcp2);
            let _ = up.join();
        });
    }
}

fn pipe_tcp_to_unix(mut from: TcpStream, mut to: UnixStream) {
    copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

fn pipe_unix_to_tcp(mut from: UnixStream, mut to: TcpStream) {
    copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Copies as bytes come: each read is written at once (a streamed event
/// is never held back for a fuller buffer).
fn copy(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
