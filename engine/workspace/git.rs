//! The git CLI, as ward runs it. Two kinds of command, never mixed:
//!
//! - [`local`]: work in the repository's own folders (checkouts, resets,
//!   the leftovers commit). Git reads the repository's and the user's
//!   configuration, as it would for a person, so `.gitattributes`, LFS and
//!   `safe.directory` behave as the repository is configured. The
//!   environment is rebuilt from scratch: no variable of ward's own (its
//!   tokens included) reaches git or anything git starts, and the settings
//!   that would run code planted in `.git/config` or stop for a person
//!   (hooks, fsmonitor, signing, auto-gc) are turned off on the command line.
//! - [`remote`]: the only commands that carry a token (push, fetch). They
//!   run in a fresh bare repository ward made in a private temporary
//!   folder, with no system or global configuration and no hooks, so
//!   nothing the agent wrote (`.git/config`, hooks, `url.*.insteadOf`,
//!   `core.fsmonitor`) is ever read while the token is in git's environment.
//!
//! Why the CLI and not git2 here: libgit2 runs no external filters (LFS
//! clean and smudge, `.gitattributes` filters), and ward builds git2
//! without its `https` feature (OpenSSL as a C build dependency, a second
//! TLS stack next to rustls); every runner has `git`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use super::errors::{Result, WorktreeError, git as git_err, io_err};
use super::snapshot::{Snapshot, names_git};

/// Who commits what an agent left behind. Default: `ward <ward@users.noreply.github.com>`, now.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitIdentity {
    pub name: String,
    pub email: String,
    /// Seconds since the epoch (UTC); `None` is now. Tests fix it.
    pub time: Option<i64>,
}

impl Default for CommitIdentity {
    fn default() -> Self {
        Self { name: "ward".into(), email: "ward@users.noreply.github.com".into(), time: None }
    }
}

/// Variables of ward's environment that a local git command keeps: what
/// finds programs and the user's own git configuration and credentials.
const LOCAL_PASS: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "SSH_AUTH_SOCK",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Command-line settings of every local command: planted configuration
/// runs nothing and nothing waits for a person.
const LOCAL_SETTINGS: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "commit.gpgSign=false",
    "advice.detachedHead=false",
];

/// `git-lfs`' own filter settings (what `git lfs install` writes), given
/// on the command line so a rewritten `filter.lfs.*` in `.git/config`
/// cannot replace them.
const LFS_SETTINGS: &[&str] = &[
    "filter.lfs.clean=git-lfs clean -- %f",
    "filter.lfs.smudge=git-lfs smudge -- %f",
    "filter.lfs.process=git-lfs filter-process",
    "filter.lfs.required=true",
    // Content the local LFS store lacks and the LFS server will not give
    // (ward passes no credentials) stays a pointer instead of failing the checkout.
    "lfs.skipdownloaderrors=true",
];

/// Whether `git-lfs` is installed: an executable `git-lfs` on `PATH`
/// (looked up once per process, without running it: `git-lfs version`
/// costs a Go program's start and a `git version` of its own, about 45 ms
/// of every stage run).
pub fn lfs_installed() -> bool {
    use std::os::unix::fs::PermissionsExt;
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join("git-lfs")).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// A git command run in `dir` (see the module comment). Checkouts take LFS
/// content from the local LFS store, or from the LFS server without
/// credentials; what neither gives stays a pointer.
pub fn local(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).env_clear();
    for name in LOCAL_PASS {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.env("LC_ALL", "C").env("GIT_TERMINAL_PROMPT", "0");
    for setting in LOCAL_SETTINGS {
        cmd.args(["-c", setting]);
    }
    if lfs_installed() {
        for setting in LFS_SETTINGS {
            cmd.args(["-c", setting]);
        }
    }
    cmd
}

/// A checkout ward runs git on: its git folder and its work tree, both
/// given to every command (`--git-dir`, `--work-tree`), so that neither a
/// rewritten `.git` file nor a planted `core.worktree` (in `.git/config`,
/// or per worktree) can send ward's reset, clean or commit elsewhere.
#[derive(Debug, Clone)]
pub struct Checkout {
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
}

impl Checkout {
    pub fn new(git_dir: &Path, work_tree: &Path) -> Self {
        Self { git_dir: git_dir.to_path_buf(), work_tree: work_tree.to_path_buf() }
    }

    /// A [`local`] command on this checkout.
    pub fn git(&self) -> Command {
        let mut cmd = local(&self.work_tree);
        let mut git_dir = std::ffi::OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        let mut work_tree = std::ffi::OsString::from("--work-tree=");
        work_tree.push(&self.work_tree);
        cmd.arg(git_dir).arg(work_tree);
        cmd
    }
}

/// A token-carrying git command: no system or global configuration, no
/// hooks, `HOME` in ward's private scratch folder; proxies pass through.
pub fn remote(scratch: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(scratch)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", scratch)
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
    for proxy in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"] {
        if let Some(v) = std::env::var_os(proxy) {
            cmd.env(proxy, v);
        }
    }
    cmd.args(["-c", "core.hooksPath=/dev/null"]);
    cmd
}

/// Runs git; its stdout on success, else an error with git's own words
/// (`secret` scrubbed from them).
pub fn run(mut cmd: Command, op: &'static str, secret: Option<&str>) -> Result<Vec<u8>> {
    let shown = describe(&cmd);
    let out: Output = cmd.output().map_err(|source| WorktreeError::Io {
        op: "start git for",
        path: PathBuf::from(&shown),
        source,
    })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if let Some(secret) = secret.filter(|t| !t.is_empty()) {
        stderr = stderr.replace(secret, "***");
    }
    Err(WorktreeError::Cli {
        op,
        dir: cmd.get_current_dir().map(Path::to_path_buf),
        status: out.status.to_string(),
        stderr,
    })
}

/// Runs git and returns its trimmed stdout as text.
pub fn text(cmd: Command, op: &'static str) -> Result<String> {
    run(cmd, op, None).map(|o| String::from_utf8_lossy(&o).trim().to_string())
}

/// `git <subcommand>` for messages (never the `-c` settings).
fn describe(cmd: &Command) -> String {
    let mut words = vec!["git".to_string()];
    let mut args = cmd.get_args().map(OsStr::to_string_lossy);
    while let Some(a) = args.next() {
        if a == "-c" {
            args.next();
            continue;
        }
        words.push(a.into_owned());
        break;
    }
    words.join(" ")
}

/// A private temporary folder, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let dir = std::env::temp_dir().join(format!("ward-git-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io_err("create", &dir))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The token as an `http.<remote_url>.extraheader`, through the environment
/// (never argv, which other users can read in `/proc`).
fn authorize(cmd: &mut Command, remote_url: &str, token: Option<&str>) {
    use base64::Engine as _;
    if let Some(token) = token {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", format!("http.{remote_url}.extraheader"))
            .env("GIT_CONFIG_VALUE_0", format!("AUTHORIZATION: basic {basic}"));
    }
}

/// Pushes `branch` of the repository whose common git folder is
/// `git_dir` to `remote_url`. The push runs from a throwaway bare clone
/// that shares the repository's objects (`--shared`): the repository's own
/// configuration and hooks are never read while the token is in git's
/// environment.
pub fn push_branch(git_dir: &Path, remote_url: &str, branch: &str, token: Option<&str>, force: bool) -> Result<()> {
    let scratch = Scratch::new()?;
    let bare = scratch.0.join("push.git");
    let mut clone = remote(&scratch.0);
    clone.args(["clone", "--quiet", "--bare", "--shared", "--no-tags", "--single-branch", "--branch", branch]);
    clone.arg(git_dir).arg(&bare);
    run(clone, "make the push clone of", None).map_err(|e| e.for_branch(branch))?;
    let refspec = format!("{}refs/heads/{branch}:refs/heads/{branch}", if force { "+" } else { "" });
    let mut cmd = remote(&scratch.0);
    cmd.arg("--git-dir").arg(&bare).args(["push", "--no-verify", "--porcelain", remote_url, &refspec]);
    authorize(&mut cmd, remote_url, token);
    run(cmd, "push", token).map(drop).map_err(|e| e.for_branch(branch))
}

/// Fetches `branch` from `remote_url` into `refs/remotes/origin/<branch>`
/// of the repository whose common git folder is `git_dir`, so a run on a
/// fresh checkout continues the task where the last stage's push left it.
/// `false` when the remote has no such branch.
///
/// The token-carrying fetch runs in a fresh bare repository that borrows
/// the repository's objects (`objects/info/alternates`) and its shallow
/// boundary, with what the repository already has as the fetch's "haves".
/// Git never runs in the repository itself: the new pack is copied into
/// its object store and the ref written with git2, so a `core.fsmonitor`,
/// `url.*.insteadOf` or hook the agent planted there never runs, let alone
/// with the token.
pub fn fetch_branch(git_dir: &Path, remote_url: &str, branch: &str, token: Option<&str>) -> Result<bool> {
    let scratch = Scratch::new()?;
    let bare = scratch.0.join("fetch.git");
    let mut init = remote(&scratch.0);
    init.args(["init", "--quiet", "--bare"]).arg(&bare);
    run(init, "make the fetch repository in", None)?;
    let objects = git_dir.join("objects");
    let alternates = bare.join("objects/info/alternates");
    std::fs::write(&alternates, format!("{}\n", objects.display())).map_err(io_err("write", &alternates))?;
    let shallow = git_dir.join("shallow");
    if shallow.exists() {
        std::fs::copy(&shallow, bare.join("shallow")).map_err(io_err("copy", &shallow))?;
    }
    // What the repository has: the fetch asks only for the rest.
    let repo = git2::Repository::open_bare(git_dir).map_err(git_err("open", git_dir.display().to_string()))?;
    let mut haves = String::new();
    if let Ok(refs) = repo.references_glob("refs/*") {
        let branches = refs.flatten().filter(|r| r.is_branch() || r.is_remote()).filter_map(|r| r.target());
        for (i, oid) in branches.enumerate().take(256) {
            haves.push_str(&format!("{oid} refs/ward-have/{i}\n"));
        }
    }
    if !haves.is_empty() {
        std::fs::write(bare.join("packed-refs"), &haves).map_err(io_err("write", &bare))?;
    }
    let target = format!("refs/remotes/origin/{branch}");
    let refspec = format!("+refs/heads/{branch}:{target}");
    // Keep what arrives as one pack (to copy whole), and never ask the
    // borrowed repository for its refs (that would run git in it).
    let settings = ["fetch.unpackLimit=1", "transfer.unpackLimit=1", "core.alternateRefsCommand=true"];
    if !fetch_in_bare(&bare, &scratch.0, remote_url, branch, &refspec, &settings, token)? {
        return Ok(false);
    }
    let fetched = git2::Repository::open_bare(&bare).map_err(git_err("open", bare.display().to_string()))?;
    let head = fetched.find_reference(&target).ok().and_then(|r| r.target()).ok_or_else(|| WorktreeError::Cli {
        op: "fetch",
        dir: None,
        status: "done".into(),
        stderr: format!("the fetch of `{branch}` left no `{target}`"),
    })?;
    import_objects(&bare.join("objects"), &objects)?;
    let shallow_after = bare.join("shallow");
    if shallow_after.exists() {
        std::fs::copy(&shallow_after, &shallow).map_err(io_err("update", &shallow))?;
    }
    repo.reference(&target, head, true, "ward: fetch").map_err(git_err("update", target.clone()))?;
    Ok(true)
}

/// Fetches `branch` of `remote_url` into `target` of the bare repository
/// `bare` that ward made in `scratch` (the record job's; nothing of an
/// agent's is in it). `false` when the remote has no such branch.
pub fn fetch_into(
    bare: &Path,
    scratch: &Path,
    remote_url: &str,
    branch: &str,
    target: &str,
    token: Option<&str>,
) -> Result<bool> {
    let refspec = format!("+refs/heads/{branch}:{target}");
    fetch_in_bare(bare, scratch, remote_url, branch, &refspec, &[], token)
}

/// The one token-carrying fetch: `refspec` of `remote_url` into the bare
/// repository `bare` ward made in `scratch`, with a clean environment and
/// `settings` (`-c`); `false` when the remote has no `branch`.
fn fetch_in_bare(
    bare: &Path,
    scratch: &Path,
    remote_url: &str,
    branch: &str,
    refspec: &str,
    settings: &[&str],
    token: Option<&str>,
) -> Result<bool> {
    let mut cmd = remote(scratch);
    cmd.arg("--git-dir").arg(bare);
    for setting in settings {
        cmd.args(["-c", setting]);
    }
    cmd.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        remote_url,
        refspec,
    ]);
    authorize(&mut cmd, remote_url, token);
    match run(cmd, "fetch", token) {
        Ok(_) => Ok(true),
        Err(WorktreeError::Cli { stderr, .. }) if stderr.contains("couldn't find remote ref") => Ok(false),
        Err(e) => Err(e.for_branch(branch)),
    }
}

/// Pushes `source` (a ref of the bare repository `bare`, which ward made)
/// to `branch` of `remote_url`; with `lease`, forced, but only while the
/// remote branch is still at that commit (`--force-with-lease`).
pub fn push_ref(
    bare: &Path,
    source: &str,
    remote_url: &str,
    branch: &str,
    token: Option<&str>,
    lease: Option<&str>,
) -> Result<()> {
    let target = format!("refs/heads/{branch}");
    push_lease(bare, Some(source), remote_url, &target, token, lease.map(Some)).map_err(|e| e.for_branch(branch))
}

/// Pushes `source` of the bare repository `bare` (ward's) to the ref
/// `target` of `remote_url`, or deletes `target` when `source` is `None`.
/// `lease`: `None`, a plain push; `Some(None)`, only while `target` does
/// not exist; `Some(Some(sha))`, forced, only while it is at `sha`.
pub fn push_lease(
    bare: &Path,
    source: Option<&str>,
    remote_url: &str,
    target: &str,
    token: Option<&str>,
    lease: Option<Option<&str>>,
) -> Result<()> {
    let scratch = bare.parent().unwrap_or(bare);
    let mut cmd = remote(scratch);
    cmd.arg("--git-dir").arg(bare).args(["push", "--no-verify"]);
    if let Some(expected) = lease {
        cmd.arg(format!("--force-with-lease={target}:{}", expected.unwrap_or("")));
    }
    cmd.arg(remote_url).arg(format!("{}:{target}", source.unwrap_or("")));
    authorize(&mut cmd, remote_url, token);
    run(cmd, "push", token).map(drop)
}

/// What `remote_url` has under `pattern` (`refs/ward/checkpoints/*`): full
/// ref name and commit, read with `git ls-remote` (no object fetched).
pub fn list_remote(remote_url: &str, pattern: &str, token: Option<&str>) -> Result<Vec<(String, String)>> {
    let scratch = Scratch::new()?;
    let mut cmd = remote(&scratch.0);
    cmd.args(["ls-remote", "--refs", remote_url, pattern]);
    authorize(&mut cmd, remote_url, token);
    let out = run(cmd, "ls-remote", token)?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(sha, name)| (name.to_string(), sha.to_string()))
        .collect())
}

/// Fetches the ref `source` of `remote_url` into `target` of the bare
/// repository `bare` ward made in `scratch`; `false` when there is no such
/// ref.
pub fn fetch_ref_into(
    bare: &Path,
    scratch: &Path,
    remote_url: &str,
    source: &str,
    target: &str,
    token: Option<&str>,
) -> Result<bool> {
    fetch_in_bare(bare, scratch, remote_url, source, &format!("+{source}:{target}"), &[], token)
}

/// Fetches the commits (and nothing they hold: `--filter=tree:0`, a
/// partial fetch GitHub serves) that the refs of `remote_url` matching
/// `refspec`'s source point at, into the bare repository `bare` ward made
/// in `scratch`. Reading a commit's message then costs one small read,
/// whatever the size of its files. The remote is named (git keeps a
/// partial fetch's source as a promisor remote, which a path cannot name).
pub fn fetch_commits_only(
    bare: &Path,
    scratch: &Path,
    remote_url: &str,
    refspec: &str,
    token: Option<&str>,
) -> Result<()> {
    let mut add = remote(scratch);
    add.arg("--git-dir").arg(bare).args(["remote", "add", "source", remote_url]);
    run(add, "name the remote of", None)?;
    let mut cmd = remote(scratch);
    cmd.arg("--git-dir").arg(bare).args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        "--filter=tree:0",
        "source",
        refspec,
    ]);
    authorize(&mut cmd, remote_url, token);
    run(cmd, "fetch", token).map(drop)
}

/// Copies the packs and loose objects of `from` into the object store
/// `to`: each file under a temporary name, then renamed, index files last
/// (git sees a pack once its index is there).
fn import_objects(from: &Path, to: &Path) -> Result<()> {
    let mut later = Vec::new();
    let entries = std::fs::read_dir(from).map_err(io_err("read", from))?;
    for dir in entries.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let loose = name.len() == 2 && name.chars().all(|c| c.is_ascii_hexdigit());
        if name != "pack" && !loose {
            continue;
        }
        let files = std::fs::read_dir(dir.path()).map_err(io_err("read", &dir.path()))?;
        for file in files.flatten() {
            let fname = file.file_name().to_string_lossy().into_owned();
            if fname.ends_with(".idx") {
                later.push((file.path(), to.join(&name).join(&fname)));
            } else if !fname.starts_with("tmp") {
                copy_into(&file.path(), &to.join(&name).join(&fname))?;
            }
        }
    }
    for (src, dst) in later {
        copy_into(&src, &dst)?;
    }
    Ok(())
}

fn copy_into(src: &Path, dst: &Path) -> Result<()> {
    if dst.exists() {
        return Ok(());
    }
    let parent = dst.parent().unwrap_or(dst);
    std::fs::create_dir_all(parent).map_err(io_err("create", parent))?;
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = parent.join(format!(".ward-import-{}-{name}", std::process::id()));
    std::fs::copy(src, &tmp).map_err(io_err("copy an object into", parent))?;
    std::fs::rename(&tmp, dst).map_err(io_err("place", dst))
}

/// How an LFS pointer file starts (<https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md>).
const LFS_POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1\n";

/// One staged change, from `git diff --cached --raw`.
struct Change {
    status: char,
    blob: String,
    path: String,
}

/// Staged changes against HEAD (`--raw -z`: `:<mode> <mode> <old> <new> <status>\0<path>\0`).
fn staged(co: &Checkout) -> Result<Vec<Change>> {
    let mut cmd = co.git();
    cmd.args(["diff", "--cached", "--raw", "-z", "--no-abbrev", "--no-renames", "--ignore-submodules=none", "HEAD"]);
    let out = run(cmd, "list the staged changes in", None)?;
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut changes = Vec::new();
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        let meta = String::from_utf8_lossy(meta);
        let words: Vec<&str> = meta.split_whitespace().collect();
        if let [_, _, _, blob, status] = words.as_slice() {
            let status = status.chars().next().unwrap_or('M');
            changes.push(Change { status, blob: blob.to_string(), path: String::from_utf8_lossy(path).into_owned() });
        }
    }
    Ok(changes)
}

/// Whether `path` is `state` or under it (both relative to the top).
pub(super) fn under(path: &str, state: &str) -> bool {
    let state = state.trim_matches('/');
    path == state || path.strip_prefix(state).is_some_and(|rest| rest.starts_with('/'))
}

/// Commits what is left uncommitted in the checkout `dir` onto its branch,
/// with one scan of the tree: `git add -A` (through the repository's
/// filters: `.gitattributes`, LFS clean), then plumbing (`write-tree`,
/// `commit-tree`, `update-ref`), which runs no hook. Nothing under
/// `state_paths` (ward's own folders) is ever part of it. `None` when
/// nothing changed.
///
/// Every changed file that `.gitattributes` puts in LFS must be staged as
/// an LFS pointer: without `git-lfs`, or when a raw file slipped in, ward
/// commits nothing and says which file.
///
/// With `start` (the commit the run started at, and the snapshot of the
/// clean checkout there), only the paths the snapshots cannot prove
/// untouched are staged (see [`super::snapshot`]): git re-reads every file
/// of a fresh checkout otherwise ("racy git"), and nothing at all runs when
/// nothing changed. Any doubt stages everything, as without it.
pub fn commit_leftovers(
    co: &Checkout,
    state_paths: &[String],
    who: &CommitIdentity,
    message: &str,
    start: Option<(&str, &Snapshot)>,
) -> Result<Option<String>> {
    match start.and_then(|(commit, before)| suspects(co, commit, before, state_paths)) {
        Some(paths) if paths.is_empty() => return Ok(None),
        Some(paths) => {
            if let Err(e) = stage_paths(co, &paths) {
                tracing::debug!("staging the changed paths failed ({e}); staging everything");
                stage_all(co, state_paths)?;
            }
        }
        None => stage_all(co, state_paths)?,
    }
    let mut changes = staged(co)?;
    // Anything the agent staged itself under ward's folders leaves the index again.
    let (theirs, ours): (Vec<Change>, Vec<Change>) =
        changes.drain(..).partition(|c| state_paths.iter().any(|s| under(&c.path, s)));
    if !theirs.is_empty() {
        tracing::warn!(paths = ?theirs.iter().map(|c| &c.path).collect::<Vec<_>>(), "left out of the commit: ward's own folders");
        let mut reset = co.git();
        reset.args(["reset", "--quiet", "HEAD", "--"]).args(theirs.iter().map(|c| c.path.as_str()));
        run(reset, "unstage ward's own folders in", None)?;
    }
    if ours.is_empty() {
        return Ok(None);
    }
    check_lfs(co, &ours)?;
    let mut write = co.git();
    write.arg("write-tree");
    let tree = text(write, "write the tree of")?;
    let dir = co.git_dir.display().to_string();
    let repo = git2::Repository::open(&co.git_dir).map_err(git_err("open", dir.clone()))?;
    let parent = repo.head().and_then(|h| h.peel_to_commit()).map_err(git_err("read HEAD of", dir))?;
    let parent = parent.id().to_string();
    let mut commit = co.git();
    commit.args(["commit-tree", "--no-gpg-sign", &tree, "-p", &parent, "-m", message]);
    let date = who.time.map(|t| format!("@{t} +0000"));
    for role in ["AUTHOR", "COMMITTER"] {
        commit.env(format!("GIT_{role}_NAME"), &who.name).env(format!("GIT_{role}_EMAIL"), &who.email);
        if let Some(date) = &date {
            commit.env(format!("GIT_{role}_DATE"), date);
        }
    }
    let made = text(commit, "commit in")?;
    let mut update = co.git();
    update.args(["update-ref", "-m", "ward: the agent's leftovers", "HEAD", &made, &parent]);
    run(update, "move the branch of", None)?;
    Ok(Some(made))
}

/// `git add --all` of the whole checkout, ward's own folders left out.
fn stage_all(co: &Checkout, state_paths: &[String]) -> Result<()> {
    let mut add = co.git();
    add.args(["add", "--all", "--", "."]);
    for p in excludable(co, state_paths)? {
        add.arg(format!(":(top,exclude){p}"));
    }
    run(add, "stage the changes in", None).map(drop)
}

/// The paths that may have changed since the snapshot `before` of the clean
/// checkout at `commit`, ward's folders left out; `None` when only git can
/// say (the index or HEAD moved, a repository inside the worktree, a name
/// that is not UTF-8).
fn suspects(co: &Checkout, commit: &str, before: &Snapshot, state_paths: &[String]) -> Option<Vec<String>> {
    let now = Snapshot::take(&co.work_tree, &co.git_dir).ok()?;
    let suspects = before.suspects(&now)?;
    let repo = git2::Repository::open(&co.git_dir).ok()?;
    let head = repo.head().and_then(|h| h.peel_to_commit()).ok()?;
    if head.id().to_string() != commit {
        return None;
    }
    // Beyond a few hundred, git's matching of each index entry against
    // each path costs more than re-reading the files.
    if suspects.len() > MOST_SUSPECTS {
        return None;
    }
    let mut paths = Vec::new();
    for path in suspects {
        if names_git(&path) {
            return None;
        }
        let path = path.to_str()?;
        if !state_paths.iter().any(|s| under(path, s)) {
            paths.push(path.to_string());
        }
    }
    Some(paths)
}

/// The most paths [`commit_leftovers`] stages by name.
const MOST_SUSPECTS: usize = 200;

/// `git add --all` of exactly `paths` (literal, through the repository's
/// filters), those git ignores left out as `git add --all .` leaves them.
fn stage_paths(co: &Checkout, paths: &[String]) -> Result<()> {
    let nul = |paths: &[String]| -> Vec<u8> { paths.iter().flat_map(|p| p.bytes().chain([0])).collect() };
    let mut check = co.git();
    check.env("GIT_LITERAL_PATHSPECS", "1").args(["check-ignore", "-z", "--stdin"]);
    // Exit 1 means none is ignored.
    let ignored: Vec<String> = match run_with_input(check, &nul(paths), "check-ignore") {
        Ok(out) => {
            out.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into()).collect()
        }
        Err(WorktreeError::Cli { status, .. }) if status.contains("exit status: 1") => Vec::new(),
        Err(e) => return Err(e),
    };
    let kept: Vec<String> = paths.iter().filter(|p| !ignored.contains(p)).cloned().collect();
    if kept.is_empty() {
        return Ok(());
    }
    let mut add = co.git();
    add.env("GIT_LITERAL_PATHSPECS", "1").args(["add", "--all", "--pathspec-from-file=-", "--pathspec-file-nul"]);
    run_with_input(add, &nul(&kept), "stage the changes in").map(drop)
}

/// The state folders `git add` must be told to leave out: those that exist
/// and are not ignored already (git refuses an exclude that names an
/// ignored path).
fn excludable(co: &Checkout, state_paths: &[String]) -> Result<Vec<String>> {
    let present: Vec<String> = state_paths
        .iter()
        .map(|p| p.trim_matches('/').to_string())
        .filter(|p| co.work_tree.join(p).symlink_metadata().is_ok())
        .collect();
    if present.is_empty() {
        return Ok(present);
    }
    let mut check = co.git();
    // By the rules alone (`--no-index`): a folder git ignores is named in no
    // exclude even when an agent committed files under it (git refuses a
    // pathspec that names an ignored path).
    check.args(["check-ignore", "--no-index", "--"]).args(&present);
    // Exit 1 means none is ignored.
    let ignored = match run(check, "check-ignore", None) {
        Ok(out) => String::from_utf8_lossy(&out).lines().map(str::to_string).collect(),
        Err(WorktreeError::Cli { status, .. }) if status.contains("exit status: 1") => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(present.into_iter().filter(|p| !ignored.contains(p)).collect())
}

/// The LFS rule for staged changes (see [`commit_leftovers`]).
fn check_lfs(co: &Checkout, changes: &[Change]) -> Result<()> {
    let new: Vec<&Change> = changes.iter().filter(|c| matches!(c.status, 'A' | 'M' | 'T')).collect();
    if new.is_empty() {
        return Ok(());
    }
    let mut attr = co.git();
    attr.args(["check-attr", "--cached", "-z", "--stdin", "filter"]);
    let input: Vec<u8> = new.iter().flat_map(|c| c.path.bytes().chain([0])).collect();
    let out = run_with_input(attr, &input, "read the attributes in")?;
    let fields: Vec<&[u8]> = out.split(|b| *b == 0).collect();
    let lfs: Vec<&str> = fields
        .chunks(3)
        .filter(|f| f.len() == 3 && f[2] == b"lfs")
        .map(|f| std::str::from_utf8(f[0]).unwrap_or_default())
        .collect();
    if lfs.is_empty() {
        return Ok(());
    }
    if !lfs_installed() {
        return Err(WorktreeError::LfsMissing { path: co.work_tree.clone(), file: Some(lfs[0].to_string()) });
    }
    let dir = co.git_dir.display().to_string();
    let repo = git2::Repository::open(&co.git_dir).map_err(git_err("open", dir))?;
    for change in new.iter().filter(|c| lfs.contains(&c.path.as_str())) {
        let raw = git2::Oid::from_str(&change.blob)
            .ok()
            .and_then(|oid| repo.find_blob(oid).ok())
            .is_none_or(|blob| blob.size() > 1024 || !blob.content().starts_with(LFS_POINTER));
        if raw {
            return Err(WorktreeError::LfsRaw { file: change.path.clone() });
        }
    }
    Ok(())
}

fn run_with_input(mut cmd: Command, input: &[u8], op: &'static str) -> Result<Vec<u8>> {
    use std::io::Write;
    use std::process::Stdio;
    let dir = cmd.get_current_dir().map(Path::to_path_buf);
    let io = |source| WorktreeError::Io { op: "start git for", path: dir.clone().unwrap_or_default(), source };
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(io)?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(io)?;
    let _ = writer.join();
    if out.status.success() {
        return Ok(out.stdout);
    }
    Err(WorktreeError::Cli {
        op,
        dir,
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}
