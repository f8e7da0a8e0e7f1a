//! What a patient's worktree holds, as the kernel reports it: the `lstat`
//! of every file and folder, and a digest of its git index and HEAD. Two
//! snapshots of the same worktree tell ward, without starting git, which
//! paths may have changed between them; nothing in between is trusted
//! (the agent owns the folder and its git metadata).
//!
//! The proof is the change time (`ctime`): the kernel sets it on every
//! write, rename, chmod or link of an entry, and no process can set it
//! back. An entry whose change time is older than the first snapshot (by
//! more than [`RACY`]) and identical in the second was not touched in
//! between. An entry touched too close to the first snapshot cannot be
//! told apart from one touched right after it, so it is always a suspect,
//! as git treats "racily clean" index entries.
//!
//! Ward uses it in three places (see [`super::worktree`] and
//! [`super::git`]): a later stage skips `git reset --hard` and `git clean`
//! when the worktree is exactly its branch head; a run that changed
//! nothing reads its changed paths and its leftovers without git; and the
//! leftovers commit stages only the suspects instead of re-reading every
//! file. Whenever anything is uncertain, the caller runs git as before.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::Digest;

/// How recent a change must be to be indistinguishable from a later one:
/// file times come from the kernel's coarse clock, at most one tick (10 ms
/// at the slowest common setting) behind the clock ward reads; five ticks.
const RACY: Duration = Duration::from_millis(50);

/// What kind of entry a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A fifo, socket or device: never in a commit.
    Other,
}

/// One entry's `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub kind: Kind,
    pub mode: u32,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        Self {
            kind,
            mode: meta.mode(),
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A worktree at one moment (see the module comment).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// [`RACY`] before the walk started, as (seconds, nanoseconds) since
    /// the epoch: an entry changed since then may change again unseen.
    racy_from: (i64, i64),
    /// Every entry under the top (its `.git` file aside), by the bytes of
    /// its relative path (`/`-separated; bytes compare and hash fast).
    entries: HashMap<Vec<u8>, Stamp>,
    /// SHA-256 of the checkout's index and HEAD files (`None`: missing).
    git: Vec<Option<[u8; 32]>>,
}

fn since_epoch(t: SystemTime) -> (i64, i64) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

impl Snapshot {
    /// Walks the work tree of the checkout whose git folder is `git_dir`
    /// (symbolic links are not followed).
    pub fn take(work_tree: &Path, git_dir: &Path) -> std::io::Result<Self> {
        let racy_from = since_epoch(SystemTime::now() - RACY);
        let mut entries = HashMap::new();
        walk(work_tree, b"", &mut entries)?;
        let git = ["index", "HEAD"].iter().map(|f| digest(&git_dir.join(f))).collect::<std::io::Result<_>>()?;
        Ok(Self { racy_from, entries, git })
    }

    /// Whether an entry changed too close to this snapshot to prove it
    /// unchanged later.
    fn racy(&self, stamp: &Stamp) -> bool {
        stamp.ctime >= self.racy_from
    }

    /// The paths (files, links and anything else but folders) that may
    /// differ in `now`: changed, added, removed, or racy here. `None` when
    /// the index or HEAD changed: then anything may be staged or moved,
    /// and only git can say.
    pub fn suspects(&self, now: &Snapshot) -> Option<BTreeSet<PathBuf>> {
        if self.git != now.git {
            return None;
        }
        let mut out = BTreeSet::new();
        let not_dir = |s: Option<&Stamp>| s.is_some_and(|s| s.kind != Kind::Dir);
        let paths: HashSet<&Vec<u8>> = self.entries.keys().chain(now.entries.keys()).collect();
        for path in paths {
            let (before, after) = (self.entries.get(path), now.entries.get(path));
            if !not_dir(before) && !not_dir(after) {
                continue;
            }
            let same = matches!((before, after), (Some(b), Some(a)) if b == a && !self.racy(b));
            if !same {
                out.insert(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
            }
        }
        Some(out)
    }
}

/// Whether `path` has a component named `.git` (a repository inside the
/// worktree: only git may say what adding it means).
pub fn names_git(path: &Path) -> bool {
    path.components().any(|c| c == Component::Normal(".git".as_ref()))
}

fn walk(dir: &Path, rel: &[u8], out: &mut HashMap<Vec<u8>, Stamp>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if rel.is_empty() && name == ".git" {
            continue;
        }
        let meta = match std::fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            // Removed while we walked: not there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mut path = rel.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name.as_bytes());
        let stamp = Stamp::of(&meta);
        if stamp.kind == Kind::Dir {
            walk(&entry.path(), &path, out)?;
        }
        out.insert(path, stamp);
    }
    Ok(())
}

fn digest(path: &Path) -> std::io::Result<Option<[u8; 32]>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(sha2::Sha256::digest(&bytes).into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the checkout is exactly the commit `head` with nothing else,
/// as `git reset --hard` and `git clean -ffdx` would leave it: HEAD at
/// `head`, the index the commit's tree with no entry git would skip, and
/// every file the index's, unchanged since the index recorded it. The
/// check is stricter than git's own (the change time is always compared);
/// any doubt is `false`, and the caller resets and cleans.
pub fn is_clean_at(work_tree: &Path, git_dir: &Path, head: &str, snapshot: &Snapshot) -> bool {
    clean_at(work_tree, git_dir, head, snapshot).unwrap_or(false)
}

fn clean_at(work_tree: &Path, git_dir: &Path, head: &str, snapshot: &Snapshot) -> Result<bool, git2::Error> {
    let repo = git2::Repository::open(git_dir)?;
    repo.set_workdir(work_tree, false)?;
    let commit = repo.head()?.peel_to_commit()?;
    if commit.id().to_string() != head {
        return Ok(false);
    }
    let index = repo.index()?;
    let Ok(written) = std::fs::metadata(git_dir.join("index")) else { return Ok(false) };
    let index_time = (written.mtime(), written.mtime_nsec());
    let mut files = 0;
    for entry in index.iter() {
        files += 1;
        match snapshot.entries.get(&entry.path) {
            Some(stamp) if matches_entry(&entry, stamp) => {
                // Racily clean (the index was written in the tick the file
                // last changed): its content decides, as in git.
                let mtime = (i64::from(entry.mtime.seconds()), i64::from(entry.mtime.nanoseconds()));
                if mtime >= index_time && !same_content(work_tree, &entry, stamp) {
                    return Ok(false);
                }
            }
            _ => return Ok(false),
        }
    }
    // Nothing on disk but the index's files, and no empty folder (git
    // clean removes both).
    let on_disk = snapshot.entries.values().filter(|s| s.kind != Kind::Dir).count();
    if on_disk != files || !no_empty_dir(snapshot) {
        return Ok(false);
    }
    // Nothing staged: the index is the commit's tree.
    let diff = repo.diff_tree_to_index(Some(&commit.tree()?), Some(&index), None)?;
    Ok(diff.deltas().len() == 0)
}

/// An index entry git would compare as unchanged, and stricter: same kind
/// and executable bit, size, inode, modification and change times, merged,
/// and with no flag that makes git skip the file.
fn matches_entry(entry: &git2::IndexEntry, stamp: &Stamp) -> bool {
    // Assume-valid (0x8000) and a merge stage (0x3000); skip-worktree and
    // intent-to-add are the extended flags.
    let plain = entry.flags & 0xB000 == 0 && entry.flags_extended == 0;
    let kind = match entry.mode {
        0o100644 => stamp.kind == Kind::File && stamp.mode & 0o100 == 0,
        0o100755 => stamp.kind == Kind::File && stamp.mode & 0o100 != 0,
        0o120000 => stamp.kind == Kind::Symlink,
        _ => false,
    };
    let mtime = (i64::from(entry.mtime.seconds()), i64::from(entry.mtime.nanoseconds()));
    let ctime = (i64::from(entry.ctime.seconds()), i64::from(entry.ctime.nanoseconds()));
    plain
        && kind
        && u64::from(entry.file_size) == stamp.size & 0xFFFF_FFFF
        && u64::from(entry.ino) == stamp.ino & 0xFFFF_FFFF
        && mtime == (stamp.mtime.0 & 0xFFFF_FFFF, stamp.mtime.1)
        && ctime == (stamp.ctime.0 & 0xFFFF_FFFF, stamp.ctime.1)
}

/// Whether the file's raw content is the entry's blob (a file that git
/// filters on the way in, LFS or line endings, never is: git decides).
fn same_content(work_tree: &Path, entry: &git2::IndexEntry, stamp: &Stamp) -> bool {
    let path = work_tree.join(std::ffi::OsStr::from_bytes(&entry.path));
    let oid = match stamp.kind {
        Kind::File => git2::Oid::hash_file(git2::ObjectType::Blob, &path),
        Kind::Symlink => match std::fs::read_link(&path) {
            Ok(target) => git2::Oid::hash_object(git2::ObjectType::Blob, target.as_os_str().as_bytes()),
            Err(_) => return false,
        },
        _ => return false,
    };
    oid.is_ok_and(|oid| oid == entry.id)
}

fn no_empty_dir(snapshot: &Snapshot) -> bool {
    let parent = |p: &[u8]| p.iter().rposition(|b| *b == b'/').map(|i| p[..i].to_vec());
    let parents: HashSet<Vec<u8>> = snapshot.entries.keys().filter_map(|p| parent(p)).collect();
    snapshot.entries.iter().all(|(path, stamp)| stamp.kind != Kind::Dir || parents.contains(path))
}
