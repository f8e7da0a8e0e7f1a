//! Credentials, kept where the agent can't read them.
//!
//! The agent runs as ward's own user, and ward is its parent: whatever
//! ward's process holds, a process of the same user can read through
//! `/proc/<pid>/environ` (the environment ward started with, however it was
//! changed since), `/proc/<pid>/mem`, or `ptrace`. So [`seal`] runs first in
//! `main`, before any thread or child exists:
//!
//! 1. It takes every credential variable ([`CREDENTIAL_VARS`]) out of the
//!    environment. When one was set, it writes the ones ward uses
//!    (`WARD_TOKEN`, `GITHUB_TOKEN`) into a sealed anonymous file (memfd)
//!    and re-executes `/proc/self/exe` with the same arguments, an
//!    environment without them and `WARD_SECRETS_FD` naming the memfd: the
//!    initial environment of the new image, which `/proc/<pid>/environ`
//!    shows, never held them, and nothing is left on the command line or in
//!    a file. The others (the runner's `ACTIONS_*`, `GH_TOKEN`) are dropped.
//! 2. The re-executed ward reads the memfd once, closes it and forgets the
//!    variable.
//! 3. Every ward process marks itself non-dumpable (`PR_SET_DUMPABLE` 0):
//!    another process of the same user can then read neither its
//!    `environ`, `mem`, `maps` nor its open files, nor `ptrace` it.
//!
//! Until the re-executed ward runs step 3 (a kernel makes every new image
//! dumpable), the first image's environment and then the memfd are readable
//! by the same user: only a process already running when ward starts could
//! use that window of a few milliseconds.
//!
//! The rest of ward asks [`Secrets::global`] for a token, never the
//! environment. What this defends and what it can't (a same-user agent with
//! Docker access is root; the runner's own processes hold the token too):
//! the README's security section.

pub mod scan;

use std::sync::OnceLock;

/// Every variable that grants access, as a GitHub workflow step may hold
/// them: ward's own token, the workflow token and the GitHub CLI's, and
/// what the runner gives a step (the runtime token and service URLs, the
/// OIDC request token and URL; see actions/runner's `ScriptHandler` and
/// `NodeScriptActionHandler`).
pub const CREDENTIAL_VARS: &[&str] = &[
    "WARD_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_RUNTIME_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_CACHE_URL",
    "ACTIONS_RESULTS_URL",
];

/// The credentials ward itself uses, handed over to the re-executed ward.
const KEPT: &[&str] = &["WARD_TOKEN", "GITHUB_TOKEN"];

/// Names the memfd of the handover, in the re-executed ward only.
pub const HANDOVER_VAR: &str = "WARD_SECRETS_FD";

/// The memfd's name, as `/proc/self/fd/N` shows it (`/memfd:ward-secrets`).
#[cfg(target_os = "linux")]
const MEMFD_NAME: &std::ffi::CStr = c"ward-secrets";

/// Whether `name` is a credential variable (never passed to an agent).
pub fn is_credential(name: &str) -> bool {
    CREDENTIAL_VARS.contains(&name)
}

/// The credentials a run must never publish, by the name they are known
/// by: ward's own tokens, and the values of the agent's variables ward
/// passes (`pass_env`) whose names say they are keys or tokens.
pub fn held(pass_env: &[String]) -> Vec<(String, String)> {
    let secret_name = |n: &str| {
        let n = n.to_ascii_uppercase();
        ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH"].iter().any(|w| n.contains(w))
    };
    let mut held: Vec<(String, String)> =
        [("WARD_TOKEN", &Secrets::global().ward_token), ("GITHUB_TOKEN", &Secrets::global().github_token)]
            .into_iter()
            .filter_map(|(n, v)| v.clone().map(|v| (n.to_string(), v)))
            .collect();
    for name in pass_env.iter().filter(|n| secret_name(n)) {
        if let Ok(value) = std::env::var(name) {
            held.push((name.clone(), value));
        }
    }
    held
}

/// The credentials this process holds. `Debug` never shows them.
#[derive(Clone, Default, PartialEq)]
pub struct Secrets {
    ward_token: Option<String>,
    github_token: Option<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |v: &Option<String>| v.as_ref().map(|_| "***");
        f.debug_struct("Secrets")
            .field("ward_token", &shown(&self.ward_token))
            .field("github_token", &shown(&self.github_token))
            .finish()
    }
}

static SEALED: OnceLock<Secrets> = OnceLock::new();

impl Secrets {
    /// From `get` (the environment, or a test's map); empty values count as unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Self {
        let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        Self { ward_token: set("WARD_TOKEN"), github_token: set("GITHUB_TOKEN") }
    }

    /// The process's credentials: what [`seal`] took over in the `ward`
    /// binary; elsewhere (tests, benches, ward as a library) read from the
    /// environment as it is, the first time they are asked for.
    pub fn global() -> &'static Secrets {
        SEALED.get_or_init(|| Self::from_vars(|k| std::env::var(k).ok()))
    }

    /// The token ward talks to GitHub and pushes with: `WARD_TOKEN` (an app
    /// or personal token), else `GITHUB_TOKEN` (the workflow's).
    pub fn github_token(&self) -> Option<&str> {
        self.ward_token.as_deref().or(self.github_token.as_deref())
    }

    /// The handover format: `NAME=value` records ended by NUL (which no
    /// environment value can hold).
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in [("WARD_TOKEN", &self.ward_token), ("GITHUB_TOKEN", &self.github_token)] {
            if let Some(v) = value {
                out.extend_from_slice(format!("{name}={v}\0").as_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, SealError> {
        let text = std::str::from_utf8(bytes).map_err(|_| SealError::Handover("it is not UTF-8".into()))?;
        let mut pairs = Vec::new();
        for record in text.split_terminator('\0') {
            let (name, value) = record
                .split_once('=')
                .filter(|(n, _)| KEPT.contains(n))
                .ok_or_else(|| SealError::Handover("it holds a record ward did not write".into()))?;
            pairs.push((name.to_string(), value.to_string()));
        }
        Ok(Self::from_vars(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(
        "ward must seal its credentials before any thread starts, and this process already has {0} threads \
         (call ward::secrets::seal first in main)"
    )]
    Threads(usize),
    #[error(
        "could not {0}: {1}; ward keeps its credentials from the agent by re-executing itself \
         (it needs /proc, as every Linux runner has) and stops rather than run without that"
    )]
    Os(&'static str, std::io::Error),
    #[error(
        "{HANDOVER_VAR} is set, but it does not name the credentials ward handed to itself ({0}); \
         unset {HANDOVER_VAR}: it is ward's own"
    )]
    Handover(String),
}

/// What [`seal`] found, for the caller's information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    /// No credential in the environment: nothing to move.
    Nothing,
    /// This is the re-executed ward; the credentials came through the memfd.
    HandedOver,
}

/// Moves the credentials out of the environment, re-executing ward when
/// there were any (then it does not return), and marks the process
/// non-dumpable. Call it first in `main`, before any thread exists (it
/// refuses otherwise: changing the environment is only sound then).
#[cfg(target_os = "linux")]
pub fn seal() -> Result<Sealed, SealError> {
    let threads = std::fs::read_dir("/proc/self/task").map_err(|e| SealError::Os("read /proc/self/task", e))?.count();
    if threads != 1 {
        return Err(SealError::Threads(threads));
    }
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes this process's flag.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(SealError::Os("mark ward non-dumpable", std::io::Error::last_os_error()));
    }
    if let Some(fd) = std::env::var_os(HANDOVER_VAR) {
        // SAFETY: one thread (checked above), so nothing reads the environment meanwhile.
        unsafe { std::env::remove_var(HANDOVER_VAR) };
        let secrets = receive(&fd.to_string_lossy())?;
        forget_credential_vars();
        let _ = SEALED.set(secrets);
        return Ok(Sealed::HandedOver);
    }
    let present: Vec<&str> = CREDENTIAL_VARS
        .iter()
        .copied()
        .filter(|k| std::env::var_os(k).is_some_and(|v| !v.to_string_lossy().trim().is_empty()))
        .collect();
    if present.is_empty() {
        // Empty ones (an unset secret in a workflow) hold nothing; drop them all the same.
        forget_credential_vars();
        return Ok(Sealed::Nothing);
    }
    let secrets = Secrets::from_vars(|k| std::env::var(k).ok());
    let fd = handover(&secrets)?;
    let mut cmd = std::process::Command::new("/proc/self/exe");
    let mut args = std::env::args_os();
    if let Some(arg0) = args.next() {
        std::os::unix::process::CommandExt::arg0(&mut cmd, arg0);
    }
    cmd.args(args);
    for name in CREDENTIAL_VARS {
        cmd.env_remove(name);
    }
    cmd.env(HANDOVER_VAR, fd.to_string());
    // Only returns when the exec failed.
    let err = std::os::unix::process::CommandExt::exec(&mut cmd);
    Err(SealError::Os("re-execute /proc/self/exe", err))
}

/// Elsewhere ward reads its credentials from the environment as it is:
/// the defence is Linux's (`/proc`, memfd, `PR_SET_DUMPABLE`).
#[cfg(not(target_os = "linux"))]
pub fn seal() -> Result<Sealed, SealError> {
    Ok(Sealed::Nothing)
}

#[cfg(target_os = "linux")]
fn forget_credential_vars() {
    for name in CREDENTIAL_VARS {
        // SAFETY: called from `seal` only, while the process has one thread.
        unsafe { std::env::remove_var(name) };
    }
}

/// Writes the kept credentials into a sealed memfd, rewound, that survives
/// the exec; returns its descriptor.
#[cfg(target_os = "linux")]
fn handover(secrets: &Secrets) -> Result<i32, SealError> {
    use std::io::{Seek, Write};
    use std::os::fd::{FromRawFd, IntoRawFd};
    let os = |what: &'static str| move |e: std::io::Error| SealError::Os(what, e);
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(MEMFD_NAME.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(SealError::Os("create the credentials' memfd", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and is owned here.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(&secrets.encode()).map_err(os("write the credentials' memfd"))?;
    file.rewind().map_err(os("rewind the credentials' memfd"))?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own; results are checked.
    unsafe {
        if libc::fcntl(fd, libc::F_ADD_SEALS, seals) != 0 {
            return Err(SealError::Os("seal the credentials' memfd", std::io::Error::last_os_error()));
        }
        // Inherited by the exec that follows, and by nothing else: no
        // thread or child exists, and the re-executed ward closes it first.
        if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
            return Err(SealError::Os("hand the credentials' memfd over", std::io::Error::last_os_error()));
        }
    }
    Ok(file.into_raw_fd())
}

/// Reads and closes the memfd named by `WARD_SECRETS_FD`, after checking it
/// is the one ward made.
#[cfg(target_os = "linux")]
fn receive(value: &str) -> Result<Secrets, SealError> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let fd: i32 = value
        .parse()
        .ok()
        .filter(|fd| *fd > 2)
        .ok_or_else(|| SealError::Handover(format!("`{value}` is not a descriptor ward opens")))?;
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_err(|e| SealError::Handover(format!("descriptor {fd}: {e}")))?;
    let expected = format!("/memfd:{}", MEMFD_NAME.to_string_lossy());
    if !target.to_string_lossy().starts_with(&expected) {
        return Err(SealError::Handover(format!("descriptor {fd} is {}", target.display())));
    }
    // SAFETY: `fd` is open (its /proc link resolved) and is ward's handover
    // memfd, which nothing else in this process uses; the File closes it.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| SealError::Os("read the credentials' memfd", e))?;
    drop(file);
    let secrets = Secrets::decode(&bytes);
    bytes.fill(0);
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn ward_token_wins_over_the_workflow_token_and_empty_counts_as_unset() {
        let both = Secrets::from_vars(vars(&[("WARD_TOKEN", "w"), ("GITHUB_TOKEN", "g")]));
        assert_eq!(both.github_token(), Some("w"));
        let empty_ward = Secrets::from_vars(vars(&[("WARD_TOKEN", " "), ("GITHUB_TOKEN", "g")]));
        assert_eq!(empty_ward.github_token(), Some("g"));
        assert_eq!(Secrets::from_vars(vars(&[("GH_TOKEN", "x")])).github_token(), None);
    }

    #[test]
    fn the_handover_round_trips_and_refuses_what_ward_did_not_write() {
        let s = Secrets::from_vars(vars(&[("WARD_TOKEN", "w=1"), ("GITHUB_TOKEN", "ghs_x")]));
        assert_eq!(Secrets::decode(&s.encode()).unwrap(), s);
        assert_eq!(Secrets::decode(b"").unwrap(), Secrets::default());
        let err = Secrets::decode(b"LD_PRELOAD=/tmp/x.so\0").unwrap_err();
        assert!(err.to_string().contains("a record ward did not write"), "{err}");
    }

    #[test]
    fn debug_never_shows_a_token() {
        let s = Secrets::from_vars(vars(&[("GITHUB_TOKEN", "ghs_secret")]));
        assert!(!format!("{s:?}").contains("ghs_secret"));
    }

    #[test]
    fn every_token_ward_reads_is_a_credential() {
        for name in KEPT {
            assert!(is_credential(name));
        }
        assert!(!is_credential("ANTHROPIC_API_KEY"), "the agent's own keys pass by name");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_descriptor_that_is_not_wards_memfd_is_refused() {
        let err = receive("1").unwrap_err();
        assert!(err.to_string().contains("not a descriptor ward opens"), "{err}");
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let err = receive(&fd.to_string()).unwrap_err();
        assert!(err.to_string().contains("/proc/"), "{err}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_sealed_memfd_hands_the_credentials_over_once() {
        let s = Secrets::from_vars(vars(&[("GITHUB_TOKEN", "ghs_handover")]));
        let fd = handover(&s).unwrap();
        assert_eq!(receive(&fd.to_string()).unwrap(), s);
        // Read once, then closed (the number may be reused by another test).
        let now = std::fs::read_link(format!("/proc/self/fd/{fd}")).map(|t| t.display().to_string());
        assert!(now.as_ref().map_or(true, |t| !t.starts_with("/memfd:ward-secrets")), "{now:?}");
    }
}
