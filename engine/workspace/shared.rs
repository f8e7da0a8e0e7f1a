//! A patient's checkpoint between GitHub's jobs. Each job has a ward home
//! of its own, so the local store ([`super::checkpoint`]) is gone when the
//! job ends. The checkpoint travels instead:
//!
//! ```text
//! visit job (read-only token)   treating run: export ─► sealed visit (checkpoint.*, seed.*)
//! record job (write token)      accepted treatment: checked ─► refs/ward/checkpoints/issue-N (forced, leased)
//! next visit job                fetch the ref ─► the local store ─► the usual choice (head or an ancestor)
//! ```
//!
//! The ref is a commit with no parent whose tree holds the checkpoint's
//! data and marker (`checkpoint.data`, `checkpoint.json`) and the seed's
//! export the code reviewer's data diff compares it with (`seed.*`). One
//! ref per patient holds its latest checkpoint: an older one would only be
//! chosen after the branch lost the newer one's commit, which happens
//! only by a restart (which drops them all) or a rebase (whose commits are
//! new, so no older checkpoint is on it either). The ref namespace
//! `refs/ward/checkpoints/` is ward's: a restart and a discharge delete the
//! patient's ref, the reaper those of closed issues and those past their
//! expiry, and nothing else is ever deleted. The commit's message says the
//! expiry (`Expires:`), so the reaper reads it from the commits alone (one
//! partial fetch, `--filter=tree:0`, for every ref), never the data; an
//! expired ref is never taken by a visit either (its marker says so too).
//! A ref is not a branch: it opens no pull request, starts no
//! workflow and needs no artifact API; any token that reads the repository
//! can fetch it, and only the record job's can push it.
//!
//! Everything here was in the agent's reach (it ran in the visit job, as
//! the job's user), so it is read as data with bounds, its size and
//! SHA-256 checked against its marker, its commit the head the record job
//! records; the data goes to the emulator's `import` and nowhere else.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::checkpoint::{Checkpoint, KIND, Marker, sha256_hex};
use super::errors::{Result, WorktreeError, io_err};
use super::git::{self, Scratch};

/// Where a patient's checkpoint lives on the forge.
pub const REF_PREFIX: &str = "refs/ward/checkpoints/";
/// The files, in the sealed visit and in the ref's tree.
pub const DATA_FILE: &str = "checkpoint.data";
pub const MARKER_FILE: &str = "checkpoint.json";
pub const SEED_DATA_FILE: &str = "seed.data";
pub const SEED_MARKER_FILE: &str = "seed.json";
/// The largest export that travels (each of the checkpoint and the seed).
pub const MAX_DATA_BYTES: u64 = 32 * 1024 * 1024;
const MAX_MARKER_BYTES: u64 = 64 * 1024;

pub fn ref_name(issue: u64) -> String {
    format!("{REF_PREFIX}issue-{issue}")
}

/// One export and its marker, checked against each other.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub marker: Marker,
    pub data: Vec<u8>,
}

/// A checkpoint as it travels: the data of a commit, and the seed's export.
#[derive(Debug, Clone, PartialEq)]
pub struct Sealed {
    pub checkpoint: Part,
    pub seed: Option<Part>,
}

impl Sealed {
    /// The commit the checkpoint belongs to.
    pub fn commit(&self) -> &str {
        self.checkpoint.marker.commit.as_deref().unwrap_or_default()
    }

    /// The expiries capped at `keep` from `now`: the visit job wrote them,
    /// within the agent's reach, and an agent must not keep its data (and
    /// the ref) alive longer than ward.yml keeps a checkpoint.
    pub fn capped(mut self, keep: std::time::Duration, now: DateTime<Utc>) -> Self {
        let cap = now + chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::days(7));
        for part in std::iter::once(&mut self.checkpoint).chain(self.seed.as_mut()) {
            part.marker.expires = part.marker.expires.min(cap);
        }
        self
    }
}

/// Why a checkpoint that travels is not taken (the run goes on without
/// it): a sentence naming the file or the ref and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("the {what}'s marker is not a ward marker: {source}")]
    NotAMarker { what: String, source: serde_json::Error },
    #[error("the {what}'s marker is of kind `{}` for #{found}, not ward's for #{issue}", .kind.escape_debug())]
    NotOurs { what: String, kind: String, found: u64, issue: u64 },
    #[error("the {what}'s marker names no commit it may name")]
    Commit { what: String },
    #[error(
        "the {what}'s data ({bytes} bytes) does not match its marker ({marked} bytes, SHA-256 {})",
        .sha256.escape_debug()
    )]
    Mismatch { what: String, bytes: usize, marked: u64, sha256: String },
    #[error("the {what} {} cannot be read: {source}", path.display())]
    Unreadable { what: String, path: PathBuf, source: std::io::Error },
    #[error("the {what} {} is over the limit of {max} bytes", path.display())]
    TooBig { what: String, path: PathBuf, max: u64 },
    #[error("the {what} is half there: `{data}` and `{marker}` come together")]
    Half { what: &'static str, data: &'static str, marker: &'static str },
    /// In a ref's tree.
    #[error("`{data}` and `{marker}` come together")]
    Apart { data: &'static str, marker: &'static str },
    #[error("`{name}` is no file of at most {max} bytes")]
    NoFile { name: &'static str, max: u64 },
    #[error("the tree holds no `checkpoint.data`")]
    NoCheckpoint,
    #[error("the {what} is not UTF-8 text")]
    NotText { what: &'static str },
    #[error(transparent)]
    Git(#[from] git2::Error),
    #[error("could not fetch `{name}`: {source}")]
    Fetch { name: String, source: WorktreeError },
    #[error("`{name}` is not usable: {source}")]
    Ref { name: String, source: Box<Unusable> },
}

/// Checks one export against its marker: ward's kind, this issue, a commit
/// (40 hex digits) for a checkpoint and none for the seed, the size and
/// the SHA-256 the marker says, within [`MAX_DATA_BYTES`].
fn check(marker: &[u8], data: Vec<u8>, issue: u64, seed: bool, what: &str) -> std::result::Result<Part, Unusable> {
    let marker: Marker =
        serde_json::from_slice(marker).map_err(|source| Unusable::NotAMarker { what: what.into(), source })?;
    if marker.kind != KIND || marker.issue != issue {
        return Err(Unusable::NotOurs { what: what.into(), kind: marker.kind, found: marker.issue, issue });
    }
    let commit_ok = match &marker.commit {
        None => seed,
        Some(c) => !seed && c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()),
    };
    if !commit_ok {
        return Err(Unusable::Commit { what: what.into() });
    }
    if data.len() as u64 != marker.bytes || sha256_hex(&data) != marker.sha256 {
        return Err(Unusable::Mismatch {
            what: what.into(),
            bytes: data.len(),
            marked: marker.bytes,
            sha256: marker.sha256,
        });
    }
    Ok(Part { marker, data })
}

/// The visit job's reading of the schema when it sealed no data (the data
/// did not change since the run started): a CHECKPOINT note's body, for the
/// record job to check and chart.
pub const SCHEMA_FILE: &str = "schema.txt";
const MAX_SCHEMA_BYTES: u64 = 16 * 1024;

/// Writes the schema's reading beside the sealed visit.
pub fn seal_schema(out: &Path, body: &str) -> std::io::Result<()> {
    std::fs::write(out.join(SCHEMA_FILE), body)
}

/// The schema's reading the visit sealed, bounded; `Ok(None)` when none.
pub fn open_schema(dir: &Path) -> std::result::Result<Option<String>, Unusable> {
    let Some(bytes) = read_bounded(&dir.join(SCHEMA_FILE), MAX_SCHEMA_BYTES, "sealed schema")? else {
        return Ok(None);
    };
    String::from_utf8(bytes).map(Some).map_err(|_| Unusable::NotText { what: "sealed schema" })
}

/// Reads `path`, at most `max` bytes; `Ok(None)` when there is no file.
fn read_bounded(path: &Path, max: u64, what: &str) -> std::result::Result<Option<Vec<u8>>, Unusable> {
    use std::io::Read;
    let unreadable = |source| Unusable::Unreadable { what: what.into(), path: path.to_path_buf(), source };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(unreadable)?;
    if bytes.len() as u64 > max {
        return Err(Unusable::TooBig { what: what.into(), path: path.to_path_buf(), max });
    }
    Ok(Some(bytes))
}

/// The visit job: the checkpoint its treatment saved, and the seed's
/// export, written into the sealed visit `out`.
pub fn seal(out: &Path, checkpoint: &Checkpoint, seed: Option<&Checkpoint>) -> Result<()> {
    let mut files = vec![(DATA_FILE, MARKER_FILE, checkpoint)];
    files.extend(seed.map(|s| (SEED_DATA_FILE, SEED_MARKER_FILE, s)));
    for (data, marker, cp) in files {
        let text = serde_json::to_vec_pretty(&cp.marker).unwrap_or_default();
        std::fs::write(out.join(data), &cp.data).map_err(io_err("write", &out.join(data)))?;
        std::fs::write(out.join(marker), text).map_err(io_err("write", &out.join(marker)))?;
    }
    Ok(())
}

/// The record job: the checkpoint the visit in `dir` sealed, read with
/// bounds and checked; `Ok(None)` when the visit sealed none.
pub fn open_sealed(dir: &Path, issue: u64) -> std::result::Result<Option<Sealed>, Unusable> {
    let part = |data: &'static str, marker: &'static str, seed: bool, what: &'static str| {
        let marker_bytes = read_bounded(&dir.join(marker), MAX_MARKER_BYTES, &format!("{what}'s marker"))?;
        let data_bytes = read_bounded(&dir.join(data), MAX_DATA_BYTES, &format!("{what}'s data"))?;
        match (marker_bytes, data_bytes) {
            (None, None) => Ok(None),
            (Some(m), Some(d)) => check(&m, d, issue, seed, what).map(Some),
            _ => Err(Unusable::Half { what, data, marker }),
        }
    };
    let Some(checkpoint) = part(DATA_FILE, MARKER_FILE, false, "sealed checkpoint")? else { return Ok(None) };
    let seed = part(SEED_DATA_FILE, SEED_MARKER_FILE, true, "sealed seed export")?;
    Ok(Some(Sealed { checkpoint, seed }))
}

/// What a ref's tree holds, read from the bare repository `bare`.
fn read_tree(bare: &Path, commit: &str, issue: u64) -> std::result::Result<Sealed, Unusable> {
    let repo = git2::Repository::open_bare(bare)?;
    let tree = repo.revparse_single(commit).and_then(|o| o.peel_to_tree())?;
    let odb = repo.odb()?;
    let blob = |name: &'static str, max: u64| -> std::result::Result<Option<Vec<u8>>, Unusable> {
        let Some(entry) = tree.get_name(name) else { return Ok(None) };
        let (size, kind) = odb.read_header(entry.id())?;
        if kind != git2::ObjectType::Blob || size as u64 > max {
            return Err(Unusable::NoFile { name, max });
        }
        Ok(Some(repo.find_blob(entry.id())?.content().to_vec()))
    };
    let part = |data: &'static str, marker: &'static str, seed: bool| -> std::result::Result<Option<Part>, Unusable> {
        match (blob(marker, MAX_MARKER_BYTES)?, blob(data, MAX_DATA_BYTES)?) {
            (Some(m), Some(d)) => check(&m, d, issue, seed, "shared checkpoint").map(Some),
            (None, None) => Ok(None),
            _ => Err(Unusable::Apart { data, marker }),
        }
    };
    let checkpoint = part(DATA_FILE, MARKER_FILE, false)?.ok_or(Unusable::NoCheckpoint)?;
    Ok(Sealed { checkpoint, seed: part(SEED_DATA_FILE, SEED_MARKER_FILE, true)? })
}

/// A visit job: the patient's shared checkpoint, fetched with the job's
/// (read-only) token into a fresh bare repository and checked. `Ok(None)`
/// when there is none; an unusable one is an error (the run then starts
/// from the seed).
pub fn fetch(remote_url: &str, token: Option<&str>, issue: u64) -> std::result::Result<Option<Sealed>, Unusable> {
    let name = ref_name(issue);
    let fetched = || -> Result<Option<(Scratch, std::path::PathBuf)>> {
        let scratch = Scratch::new()?;
        let bare = scratch.0.join("checkpoint.git");
        let mut init = git::remote(&scratch.0);
        init.args(["init", "--quiet", "--bare"]).arg(&bare);
        git::run(init, "make the checkpoint repository in", None)?;
        match git::fetch_ref_into(&bare, &scratch.0, remote_url, &name, "refs/ward/checkpoint", token)? {
            true => Ok(Some((scratch, bare))),
            false => Ok(None),
        }
    };
    let Some((_scratch, bare)) = fetched().map_err(|source| Unusable::Fetch { name: name.clone(), source })? else {
        return Ok(None);
    };
    read_tree(&bare, "refs/ward/checkpoint", issue).map(Some).map_err(|e| Unusable::Ref { name, source: Box::new(e) })
}

/// The record job: `sealed` becomes the patient's ref, a commit made in
/// the bare repository `bare` (ward's), pushed forced with a lease on what
/// the ref was a moment before. Returns the commit.
pub fn push(bare: &Path, sealed: &Sealed, issue: u64, remote_url: &str, token: Option<&str>) -> Result<String> {
    let name = ref_name(issue);
    let gerr =
        |e: git2::Error| WorktreeError::Git { op: "write", object: format!("the checkpoint of #{issue}"), source: e };
    let commit = {
        let repo = git2::Repository::open_bare(bare).map_err(gerr)?;
        let mut tree = repo.treebuilder(None).map_err(gerr)?;
        let mut parts = vec![(DATA_FILE, MARKER_FILE, &sealed.checkpoint)];
        parts.extend(sealed.seed.as_ref().map(|s| (SEED_DATA_FILE, SEED_MARKER_FILE, s)));
        for (data, marker, part) in parts {
            let text = serde_json::to_vec_pretty(&part.marker).unwrap_or_default();
            tree.insert(data, repo.blob(&part.data).map_err(gerr)?, 0o100644).map_err(gerr)?;
            tree.insert(marker, repo.blob(&text).map_err(gerr)?, 0o100644).map_err(gerr)?;
        }
        let tree = repo.find_tree(tree.write().map_err(gerr)?).map_err(gerr)?;
        let who = git2::Signature::now("ward", "ward@users.noreply.github.com").map_err(gerr)?;
        let message = format!(
            "ward: the emulator's data of #{issue} at {}\n\nExpires: {}\n",
            sealed.commit(),
            sealed.checkpoint.marker.expires.to_rfc3339()
        );
        let oid = repo.commit(None, &who, &who, &message, &tree, &[]).map_err(gerr)?;
        repo.reference("refs/ward/shared-checkpoint", oid, true, "ward: checkpoint").map_err(gerr)?;
        oid.to_string()
    };
    let old = current(remote_url, token, issue)?;
    git::push_lease(bare, Some("refs/ward/shared-checkpoint"), remote_url, &name, token, Some(old.as_deref()))?;
    Ok(commit)
}

/// The ref's commit now, if there is one.
fn current(remote_url: &str, token: Option<&str>, issue: u64) -> Result<Option<String>> {
    let name = ref_name(issue);
    Ok(git::list_remote(remote_url, &name, token)?.into_iter().find(|(n, _)| *n == name).map(|(_, sha)| sha))
}

/// Deletes the patient's ref (a restart, a discharge), with a lease on the
/// commit it was at; `false` when there was none.
pub fn drop_patient(remote_url: &str, token: Option<&str>, issue: u64) -> Result<bool> {
    let Some(old) = current(remote_url, token, issue)? else { return Ok(false) };
    delete(remote_url, token, &ref_name(issue), &old)?;
    Ok(true)
}

fn delete(remote_url: &str, token: Option<&str>, name: &str, old: &str) -> Result<()> {
    let scratch = Scratch::new()?;
    let bare = scratch.0.join("delete.git");
    let mut init = git::remote(&scratch.0);
    init.args(["init", "--quiet", "--bare"]).arg(&bare);
    git::run(init, "make the checkpoint repository in", None)?;
    git::push_lease(&bare, None, remote_url, name, token, Some(Some(old)))
}

/// A ref under [`REF_PREFIX`]: its name, its commit, and the expiry its
/// commit says (`None` when it says none that reads).
type RefExpiry = (String, String, Option<DateTime<Utc>>);

/// The ref's expiry as its commit says it (the `Expires:` line the record
/// job wrote), read without the data: the commits of every ref under
/// [`REF_PREFIX`], fetched alone in one partial fetch. Each ref's name,
/// commit, and expiry (`None` when the commit says none that reads).
fn expiries(remote_url: &str, token: Option<&str>) -> Result<Vec<RefExpiry>> {
    let scratch = Scratch::new()?;
    let bare = scratch.0.join("expiries.git");
    let mut init = git::remote(&scratch.0);
    init.args(["init", "--quiet", "--bare"]).arg(&bare);
    git::run(init, "make the checkpoint repository in", None)?;
    const SEEN: &str = "refs/ward/seen/";
    git::fetch_commits_only(&bare, &scratch.0, remote_url, &format!("+{REF_PREFIX}*:{SEEN}*"), token)?;
    let mut list = git::remote(&scratch.0);
    list.arg("--git-dir").arg(&bare).args([
        "for-each-ref",
        "--format=%(refname)%09%(objectname)%09%(trailers:key=Expires,valueonly,separator=%x2C)",
        SEEN,
    ]);
    let out = git::run(list, "list the checkpoint refs in", None)?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, '\t');
            let name = format!("{REF_PREFIX}{}", fields.next()?.strip_prefix(SEEN)?);
            let sha = fields.next()?.to_string();
            let expires = fields.next().and_then(|e| DateTime::parse_from_rfc3339(e.trim()).ok());
            Some((name, sha, expires.map(|e| e.with_timezone(&Utc))))
        })
        .collect())
}

/// The reaper's part: the refs under [`REF_PREFIX`] of `closed` issues and
/// those past their expiry (an open patient's too: its next visit would
/// not take one anyway), deleted, each with a lease on the commit read
/// (a ref that moved since is kept, and said so).
/// The expiry is read from the refs' commits alone, never their data. One
/// line each. A ref whose name is not ward's `issue-<n>`, or whose expiry
/// cannot be read, is left alone.
pub fn reap(remote_url: &str, token: Option<&str>, closed: &[u64], now: DateTime<Utc>) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for (name, sha, expires) in expiries(remote_url, token)? {
        let issue = name.strip_prefix(REF_PREFIX).and_then(|n| n.strip_prefix("issue-")).and_then(|n| n.parse().ok());
        let Some(issue) = issue else { continue };
        let why = match expires {
            _ if closed.contains(&issue) => "its issue is closed".to_string(),
            Some(at) if at <= now => format!("it expired at {}", at.to_rfc3339()),
            _ => continue,
        };
        // A lease refused: the record job pushed a newer checkpoint since the read.
        match delete(remote_url, token, &name, &sha) {
            Ok(()) => lines.push(format!("checkpoint ref `{name}` of #{issue} ({why})")),
            Err(e) => lines
                .push(format!("kept checkpoint ref `{name}` of #{issue} ({why}, but it could not be deleted: {e})")),
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::super::checkpoint::{Owner, Store};
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    /// A store with the seed's export and a checkpoint of [`COMMIT`] for #1,
    /// sealed into `out`.
    fn sealed_in(dir: &Path) -> (Store, std::path::PathBuf) {
        let store = Store::new(&dir.join("store"), Owner { repository: "o/r".into(), installation: "visit".into() });
        let day = std::time::Duration::from_secs(86_400);
        store.save(1, None, "r1", "treat", day, b"seed\n").unwrap();
        let saved = store.save(1, Some(COMMIT), "r1", "treat", day, b"seed\ntreated\n").unwrap();
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        seal(&out, &store.at(&saved).unwrap(), store.seed(1).as_ref()).unwrap();
        (store, out)
    }

    #[test]
    fn a_sealed_checkpoint_is_read_with_bounds_and_checked_against_its_marker() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, out) = sealed_in(tmp.path());
        let sealed = open_sealed(&out, 1).unwrap().unwrap();
        assert_eq!((sealed.commit(), sealed.checkpoint.data.as_slice()), (COMMIT, &b"seed\ntreated\n"[..]));
        assert_eq!(sealed.seed.as_ref().unwrap().data, b"seed\n");

        let why = open_sealed(&out, 2).unwrap_err().to_string();
        assert!(why.contains("not ward's for #2"), "{why}");
        std::fs::write(out.join(DATA_FILE), b"seed\nforged\n").unwrap();
        let why = open_sealed(&out, 1).unwrap_err().to_string();
        assert!(why.contains("does not match its marker"), "{why}");
        std::fs::remove_file(out.join(MARKER_FILE)).unwrap();
        let why = open_sealed(&out, 1).unwrap_err().to_string();
        assert!(why.contains("half there"), "{why}");
        std::fs::remove_file(out.join(DATA_FILE)).unwrap();
        assert_eq!(open_sealed(&out, 1).unwrap(), None, "no checkpoint sealed");
    }

    #[test]
    fn the_schemas_reading_travels_beside_the_visit_within_its_bound() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(open_schema(tmp.path()).unwrap(), None, "no reading sealed");
        seal_schema(tmp.path(), "Commit: abc\nSchema: unchanged against the seed\n").unwrap();
        assert_eq!(
            open_schema(tmp.path()).unwrap().as_deref(),
            Some("Commit: abc\nSchema: unchanged against the seed\n")
        );
        std::fs::write(tmp.path().join(SCHEMA_FILE), vec![b'x'; MAX_SCHEMA_BYTES as usize + 1]).unwrap();
        assert!(open_schema(tmp.path()).unwrap_err().to_string().contains("over the limit"));
        std::fs::write(tmp.path().join(SCHEMA_FILE), [0xff, 0xfe]).unwrap();
        assert!(open_schema(tmp.path()).unwrap_err().to_string().contains("not UTF-8"));
    }

    #[test]
    fn an_expiry_the_visit_job_wrote_is_capped_at_what_ward_yml_keeps() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, out) = sealed_in(tmp.path());
        let mut sealed = open_sealed(&out, 1).unwrap().unwrap();
        let now = Utc::now();
        let far = now + chrono::Duration::days(3650);
        sealed.checkpoint.marker.expires = far;
        sealed.seed.as_mut().unwrap().marker.expires = far;
        let hour = std::time::Duration::from_secs(3600);
        let capped = sealed.clone().capped(hour, now);
        assert_eq!(capped.checkpoint.marker.expires, now + chrono::Duration::hours(1));
        assert_eq!(capped.seed.unwrap().marker.expires, now + chrono::Duration::hours(1));
        // A shorter expiry stays as it is.
        let soon = sealed.clone().capped(hour * 24 * 365 * 20, now);
        assert_eq!(soon.checkpoint.marker.expires, far);
    }

    #[test]
    fn the_ref_is_pushed_with_a_lease_fetched_dropped_and_only_closed_patients_are_reaped() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, out) = sealed_in(tmp.path());
        let sealed = open_sealed(&out, 1).unwrap().unwrap();
        let remote = tmp.path().join("remote.git");
        let record = tmp.path().join("record.git");
        for bare in [&remote, &record] {
            let mut init = git::remote(tmp.path());
            init.args(["init", "--quiet", "--bare"]).arg(bare);
            git::run(init, "init", None).unwrap();
        }
        let url = remote.to_str().unwrap();
        assert_eq!(fetch(url, None, 1).unwrap(), None, "no ref yet");
        push(&record, &sealed, 1, url, None).unwrap();
        assert_eq!(fetch(url, None, 1).unwrap(), Some(sealed.clone()), "fetched as it was pushed");
        // A second treatment's data replaces it (forced, leased on what was there).
        let mut newer = sealed.clone();
        newer.checkpoint.data = b"seed\ntreated twice\n".to_vec();
        newer.checkpoint.marker.bytes = newer.checkpoint.data.len() as u64;
        newer.checkpoint.marker.sha256 = sha256_hex(&newer.checkpoint.data);
        push(&record, &newer, 1, url, None).unwrap();
        assert_eq!(fetch(url, None, 1).unwrap().unwrap().checkpoint.data, b"seed\ntreated twice\n");
        assert!(drop_patient(url, None, 1).unwrap());
        assert!(!drop_patient(url, None, 1).unwrap(), "nothing left to drop");
        assert_eq!(fetch(url, None, 1).unwrap(), None);

        for issue in [2, 3] {
            let mut theirs = sealed.clone();
            theirs.checkpoint.marker.issue = issue;
            theirs.seed = None;
            push(&record, &theirs, issue, url, None).unwrap();
        }
        let lines = reap(url, None, &[2, 9], chrono::Utc::now()).unwrap();
        assert_eq!(lines, ["checkpoint ref `refs/ward/checkpoints/issue-2` of #2 (its issue is closed)"]);
        assert_eq!(fetch(url, None, 2).unwrap(), None);
        assert!(fetch(url, None, 3).unwrap().is_some(), "an open patient's checkpoint stays");
        // A ref whose data does not match its marker is not usable.
        let mut forged = sealed.clone();
        forged.checkpoint.data = b"forged\n".to_vec();
        push(&record, &forged, 1, url, None).unwrap();
        let why = fetch(url, None, 1).unwrap_err().to_string();
        assert!(why.contains("is not usable") && why.contains("does not match its marker"), "{why}");
    }

    /// The reaper reads each ref's expiry from its commit alone: with the
    /// data's objects gone from the remote it still reads them (a fetch of
    /// the data would fail), deletes the expired ref of an open patient and
    /// the closed one's, keeps the live one, and touches no other ref.
    #[test]
    fn expired_refs_of_open_patients_are_reaped_from_their_commits_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, out) = sealed_in(tmp.path());
        let sealed = open_sealed(&out, 1).unwrap().unwrap();
        let remote = tmp.path().join("remote.git");
        let record = tmp.path().join("record.git");
        for bare in [&remote, &record] {
            let mut init = git::remote(tmp.path());
            init.args(["init", "--quiet", "--bare"]).arg(bare);
            git::run(init, "init", None).unwrap();
        }
        // GitHub serves partial fetches; a bare repository does when told.
        git2::Repository::open_bare(&remote)
            .unwrap()
            .config()
            .unwrap()
            .set_bool("uploadpack.allowFilter", true)
            .unwrap();
        let url = remote.to_str().unwrap();
        let now = chrono::Utc::now();
        // #2 closed (live), #3 open and expired, #4 open and live.
        for (issue, expires) in [
            (2, now + chrono::Duration::days(1)),
            (3, now - chrono::Duration::hours(1)),
            (4, now + chrono::Duration::days(1)),
        ] {
            let mut theirs = sealed.clone();
            theirs.checkpoint.marker.issue = issue;
            theirs.checkpoint.marker.expires = expires;
            theirs.checkpoint.data = format!("data of #{issue}\n").into_bytes();
            theirs.checkpoint.marker.bytes = theirs.checkpoint.data.len() as u64;
            theirs.checkpoint.marker.sha256 = sha256_hex(&theirs.checkpoint.data);
            theirs.seed = None;
            push(&record, &theirs, issue, url, None).unwrap();
        }
        // A ref beside them that is not a patient's checkpoint.
        let (_, three) = list(url).into_iter().find(|(n, _)| n.ends_with("/issue-3")).unwrap();
        let mut other = git::remote(tmp.path());
        other.arg("--git-dir").arg(&remote).args(["update-ref", "refs/ward/checkpoints/notes", &three]);
        git::run(other, "update-ref", None).unwrap();
        // The data of #3 is gone from the remote (a loose object after a
        // small push): reading it now fails, reading the commit does not.
        let blob = git2::Oid::hash_object(git2::ObjectType::Blob, b"data of #3\n").unwrap().to_string();
        std::fs::remove_file(remote.join("objects").join(&blob[..2]).join(&blob[2..])).unwrap();
        assert!(fetch(url, None, 3).is_err(), "the data of #3 cannot be fetched");

        let lines = reap(url, None, &[2], now).unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], "checkpoint ref `refs/ward/checkpoints/issue-2` of #2 (its issue is closed)");
        assert!(
            lines[1].starts_with("checkpoint ref `refs/ward/checkpoints/issue-3` of #3 (it expired at "),
            "{lines:?}"
        );
        let left: Vec<String> = list(url).into_iter().map(|(n, _)| n).collect();
        assert_eq!(left, ["refs/ward/checkpoints/issue-4", "refs/ward/checkpoints/notes"]);
        assert!(fetch(url, None, 4).unwrap().is_some(), "the live checkpoint is whole");
        assert_eq!(reap(url, None, &[2], now).unwrap(), Vec::<String>::new(), "nothing more to reap");
    }

    fn list(url: &str) -> Vec<(String, String)> {
        git::list_remote(url, &format!("{REF_PREFIX}*"), None).unwrap()
    }
}
