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
//! The rest of the system is read-only for the agent: after the Docker
//! sockets are hidden, the wall makes every mount it sees read-only
//! (`mount_setattr(2)`, Linux 5.12 or later; where it is missing the wall
//! is refused, like a missing namespace), then binds back read-write only
//! the `--write` paths (its worktree and the parts of git it commits to,
//! its private HOME and temp folder, `agent.writable`), and `/proc` (which
//! the agent's own namespace needs), with a fresh `/dev/shm`. `--read-only`
//! paths inside a writable one (a checkout's `.git/config` and
//! `.git/hooks`) are bound back read-only. Being the wall's mounts, the
//! agent's namespace cannot change them.
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

/// What the wall covers and what it leaves the agent to write: each path
/// absolute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mounts {
    /// Covered by an empty file (the Docker sockets).
    pub hide: Vec<PathBuf>,
    /// Writable; everything else is read-only.
    pub write: Vec<PathBuf>,
    /// Read-only again inside a writable path.
    pub read_only: Vec<PathBuf>,
}

/// How ward starts an agent behind the wall: the argument vector that
/// replaces the agent's own.
pub fn command(ward: &Path, relays: &[Relay], mounts: &Mounts, agent: &[String]) -> Vec<String> {
    let mut args = vec![ward.to_string_lossy().into_owned(), SUBCOMMAND.to_string()];
    for r in relays {
        args.push("--relay".into());
        args.push(format!("{}={}", r.port, r.socket.display()));
    }
    for (flag, paths) in [("--hide", &mounts.hide), ("--write", &mounts.write), ("--read-only", &mounts.read_only)] {
        for p in paths {
            args.push(flag.into());
            args.push(p.to_string_lossy().into_owned());
        }
    }
    args.push("--".into());
    args.extend(agent.iter().cloned());
    args
}

/// Why this system does not let ward wall an agent ([`probe`]): the
/// system's own reason, for a sentence.
#[derive(Debug, thiserror::Error)]
pub enum Unwalled {
    #[error("could not start {}: {source}", ward.display())]
    Start { ward: PathBuf, source: std::io::Error },
    /// What the wall said on its stderr.
    #[error("{0}")]
    Said(String),
    #[error("`ward {SUBCOMMAND} --probe` ended with {0}")]
    Ended(std::process::ExitStatus),
}

/// Whether this system lets ward wall an agent: `ward __wall --probe`
/// makes the namespaces and brings their loopback up, then exits.
pub async fn probe(ward: &Path) -> Result<(), Unwalled> {
    let out = tokio::process::Command::new(ward)
        .args([SUBCOMMAND, "--probe"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|source| Unwalled::Start { ward: ward.to_path_buf(), source })?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(if said.is_empty() { Unwalled::Ended(out.status) } else { Unwalled::Said(said) })
}

/// What stops `ward __wall` before the agent starts: its arguments (which
/// ward writes), or the system refusing a namespace, a mount or a socket.
/// Printed on its stderr, the reason [`probe`] gives.
#[derive(Debug, thiserror::Error)]
enum WallError {
    #[error("--relay needs PORT=SOCKET")]
    Relay,
    #[error("`{0}` is not a port")]
    Port(String),
    #[error("{0} needs a path")]
    NoPath(String),
    #[error("{flag} needs an absolute path, not {}", path.display())]
    Relative { flag: String, path: PathBuf },
    #[error("unknown argument {0:?}")]
    Unknown(OsString),
    #[error("no agent command after `--`")]
    NoAgent,
    #[error("{} holds a NUL", .0.display())]
    Nul(PathBuf),
    #[error(
        "could not create the agent's user and network namespaces (unshare: {0}); this system does not let ward wall \
         the agent"
    )]
    Namespaces(std::io::Error),
    #[error(
        "this kernel has no mount_setattr(2) (Linux 5.12 or later has it), so ward cannot make the rest of the system \
         read-only for the agent"
    )]
    NoMountSetattr,
    #[error("could not make the system read-only for the agent (mount_setattr: {0})")]
    ReadOnlySystem(std::io::Error),
    /// A step that failed, with the system's reason: "could not {what}: {source}".
    #[error("could not {what}: {source}")]
    Failed { what: String, source: std::io::Error },
}

/// "could not {what}: {the system's reason}".
fn failed(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WallError {
    move |source| WallError::Failed { what: what.into(), source }
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

fn jail(args: &[OsString]) -> Result<i32, WallError> {
    let mut relays = Vec::new();
    let mut mounts = Mounts::default();
    let mut probe = false;
    let mut it = args.iter();
    let mut agent: Vec<OsString> = Vec::new();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--probe") => probe = true,
            Some("--relay") => {
                let v = it.next().and_then(|v| v.to_str()).ok_or(WallError::Relay)?;
                let (port, socket) = v.split_once('=').ok_or(WallError::Relay)?;
                let port: u16 = port.parse().map_err(|_| WallError::Port(port.into()))?;
                relays.push(Relay { port, socket: PathBuf::from(socket) });
            }
            Some(flag @ ("--hide" | "--write" | "--read-only")) => {
                let path = PathBuf::from(it.next().ok_or_else(|| WallError::NoPath(flag.into()))?);
                if !path.is_absolute() {
                    return Err(WallError::Relative { flag: flag.into(), path });
                }
                match flag {
                    "--hide" => mounts.hide.push(path),
                    "--write" => mounts.write.push(path),
                    _ => mounts.read_only.push(path),
                }
            }
            Some("--") => {
                agent = it.cloned().collect();
                break;
            }
            _ => return Err(WallError::Unknown(a.clone())),
        }
    }
    // This process holds nothing secret (its environment is the agent's),
    // and a non-dumpable process may not write its own uid_map.
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    enter_namespaces(&mounts)?;
    if probe {
        return Ok(0);
    }
    for relay in relays {
        let listener = TcpListener::bind(("127.0.0.1", relay.port))
            .map_err(failed(format!("listen on 127.0.0.1:{} inside the wall", relay.port)))?;
        std::thread::spawn(move || serve(listener, relay.socket));
    }
    // Nothing of this process is the agent's to read or to drive: its
    // mounts (what hides the Docker socket) are changed only from here.
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let (program, rest) = agent.split_first().ok_or(WallError::NoAgent)?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    let inner = InnerMaps::new();
    // SAFETY: between fork and exec only unshare(2), prctl(2), open(2),
    // write(2) and close(2), on buffers made before the fork.
    unsafe {
        cmd.pre_exec(move || inner.enter());
    }
    let mut child = cmd.spawn().map_err(failed(format!("start the agent {program:?}")))?;
    let status = child.wait().map_err(failed("wait for the agent"))?;
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
/// the hidden paths covered; the system read-only but for the writable
/// paths; the loopback up.
fn enter_namespaces(mounts: &Mounts) -> Result<(), WallError> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare(2) with flags; this process has one thread.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWNS) } != 0 {
        return Err(WallError::Namespaces(std::io::Error::last_os_error()));
    }
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(failed(format!("write {file} for the agent's namespace")))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    // Mounts made here stay here.
    let root = c"/";
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
        return Err(failed("make the agent's mounts private")(std::io::Error::last_os_error()));
    }
    let null = c"/dev/null";
    for path in mounts.hide.iter().filter(|p| p.symlink_metadata().is_ok()) {
        let target = c_path(path)?;
        // SAFETY: as above.
        if unsafe { libc::mount(null.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) }
            != 0
        {
            return Err(failed(format!("hide {} from the agent", path.display()))(std::io::Error::last_os_error()));
        }
    }
    read_only_system(mounts)?;
    loopback_up()
}

/// `mount_setattr(2)`'s argument (linux/mount.h).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

fn c_path(path: &Path) -> Result<CString, WallError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| WallError::Nul(path.to_path_buf()))
}

/// Sets (`rdonly`) or clears the read-only flag of the mount at `path`, and
/// of the mounts under it when `recursive`.
fn set_read_only(path: &Path, rdonly: bool, recursive: bool) -> std::io::Result<()> {
    let target = c_path(path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let attr = MountAttr {
        attr_set: if rdonly { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if rdonly { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 } as libc::c_uint;
    // SAFETY: mount_setattr(2) with a valid C string and a struct of the size given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Binds `path` onto itself (with what is mounted under it), so that its
/// flags can be changed apart from the mount it lies on.
fn bind_onto_itself(path: &Path) -> Result<(), WallError> {
    let target = c_path(path)?;
    // SAFETY: mount(2) with valid C strings and null pointers where allowed.
    let rc = unsafe {
        libc::mount(target.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null())
    };
    if rc != 0 {
        return Err(failed(format!("bind {} for the agent", path.display()))(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Makes `path` writable again: its mount, and the mounts under it where
/// they may be (a mount made read-only outside this namespace stays so).
fn make_writable(path: &Path) -> Result<(), WallError> {
    set_read_only(path, false, true)
        .or_else(|e| if e.raw_os_error() == Some(libc::EPERM) { set_read_only(path, false, false) } else { Err(e) })
        .map_err(failed(format!("make {} writable for the agent", path.display())))
}

/// Every mount read-only, then the agent's own paths writable again:
/// `/proc` (its namespace's maps are written there), a fresh `/dev/shm`,
/// each `--write` path bound onto itself (a parent before what lies under
/// it, which it then holds), then each `--read-only` path bound read-only.
fn read_only_system(mounts: &Mounts) -> Result<(), WallError> {
    if let Err(e) = set_read_only(Path::new("/"), true, true) {
        return Err(if e.raw_os_error() == Some(libc::ENOSYS) {
            WallError::NoMountSetattr
        } else {
            WallError::ReadOnlySystem(e)
        });
    }
    make_writable(Path::new("/proc"))?;
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let (tmpfs, target, options) = (c"tmpfs", c_path(shm)?, c"mode=1777");
        // SAFETY: mount(2) with valid C strings.
        let rc = unsafe {
            libc::mount(
                tmpfs.as_ptr(),
                target.as_ptr(),
                tmpfs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(failed("give the agent a /dev/shm of its own")(std::io::Error::last_os_error()));
        }
    }
    let mut write: Vec<&PathBuf> = mounts.write.iter().filter(|p| p.symlink_metadata().is_ok()).collect();
    write.sort();
    write.dedup();
    let mut bound: Vec<&PathBuf> = Vec::new();
    for path in write {
        if bound.iter().any(|b| path.starts_with(b)) {
            continue;
        }
        bind_onto_itself(path)?;
        make_writable(path)?;
        bound.push(path);
    }
    for path in mounts.read_only.iter().filter(|p| p.symlink_metadata().is_ok()) {
        bind_onto_itself(path)?;
        set_read_only(path, true, true).map_err(failed(format!("make {} read-only for the agent", path.display())))?;
    }
    // The working folder was entered before the binds: entered again, it
    // is the writable one bound over it.
    if let Ok(here) = std::env::current_dir() {
        std::env::set_current_dir(&here).map_err(failed(format!("enter {} again inside the wall", here.display())))?;
    }
    Ok(())
}

/// What of git's folders the agent commits through in `worktree`: for a
/// linked worktree (`.git` a file naming `.git/worktrees/<name>`), that
/// folder, the common `objects/`, and the folders of its branch's ref and
/// reflog (made when missing, as git would); for a checkout with its own
/// `.git`, nothing more than the checkout, but its `config` and `hooks`
/// read-only (what ward's own git would read or run). Returns
/// (writable, read-only), canonical.
pub fn git_paths(worktree: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let dot_git = worktree.join(".git");
    if dot_git.is_dir() {
        return (Vec::new(), vec![dot_git.join("config"), dot_git.join("hooks")]);
    }
    let Some(admin) = std::fs::read_to_string(&dot_git)
        .ok()
        .and_then(|t| t.strip_prefix("gitdir:").map(|p| worktree.join(p.trim())))
        .and_then(|p| p.canonicalize().ok())
    else {
        return (Vec::new(), Vec::new());
    };
    let common =
        std::fs::read_to_string(admin.join("commondir")).ok().and_then(|c| admin.join(c.trim()).canonicalize().ok());
    let mut write = vec![admin.clone()];
    let Some(common) = common else { return (write, Vec::new()) };
    write.push(common.join("objects"));
    let head = std::fs::read_to_string(admin.join("HEAD")).unwrap_or_default();
    if let Some(branch) = head.trim().strip_prefix("ref: refs/heads/") {
        let folder = Path::new(branch).parent().filter(|p| !p.as_os_str().is_empty());
        // A branch name from git's own HEAD file: no `..` leaves refs/.
        if !branch.split('/').any(|c| c == ".." || c.is_empty()) {
            for base in ["refs/heads", "logs/refs/heads"] {
                let dir = folder.map_or_else(|| common.join(base), |f| common.join(base).join(f));
                let _ = std::fs::create_dir_all(&dir);
                write.push(dir);
            }
        }
    }
    (write, Vec::new())
}

/// `ip link set lo up`, with ioctl(2): SIOCGIFFLAGS then SIOCSIFFLAGS.
fn loopback_up() -> Result<(), WallError> {
    // SAFETY: socket(2), ioctl(2) on a 40-byte ifreq (name, then flags), close(2).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(failed("open a socket inside the wall")(std::io::Error::last_os_error()));
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
            return Err(failed("bring the loopback up inside the wall")(err));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn a_linked_worktree_writes_its_admin_folder_the_objects_and_its_branchs_refs_only() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, wt) = (dir.path().join("repo"), dir.path().join("wt"));
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(
            &repo,
            &["-c", "user.name=a", "-c", "user.email=a@example.com", "commit", "-q", "--allow-empty", "-m", "a"],
        );
        git(&repo, &["worktree", "add", "-q", "-b", "ward/issue-3", wt.to_str().unwrap()]);
        let common = repo.join(".git").canonicalize().unwrap();
        let (write, read_only) = git_paths(&wt.canonicalize().unwrap());
        assert_eq!(
            write,
            [
                common.join("worktrees/wt"),
                common.join("objects"),
                common.join("refs/heads/ward"),
                common.join("logs/refs/heads/ward")
            ]
        );
        assert!(read_only.is_empty(), "{read_only:?}");
        // A checkout with its own .git: the checkout is writable, its config and hooks are not.
        let (write, read_only) = git_paths(&repo);
        assert!(write.is_empty(), "{write:?}");
        assert_eq!(read_only, [repo.join(".git/config"), repo.join(".git/hooks")]);
    }

    #[test]
    fn the_walls_arguments_carry_every_mount() {
        let mounts = Mounts {
            hide: vec!["/run/docker.sock".into()],
            write: vec!["/w".into()],
            read_only: vec!["/w/.git/config".into()],
        };
        let args = command(Path::new("/ward"), &[], &mounts, &["agent".into()]);
        assert_eq!(
            args,
            [
                "/ward",
                SUBCOMMAND,
                "--hide",
                "/run/docker.sock",
                "--write",
                "/w",
                "--read-only",
                "/w/.git/config",
                "--",
                "agent"
            ]
        );
    }
}
