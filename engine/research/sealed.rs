//! The research role on GitHub, in two jobs as a stage runs: the visit job
//! (`ward research --out DIR`, a read-only token, no write secret) runs the
//! role and seals what it came to into DIR: [`RESEARCH_FILE`] (the run,
//! the finding's key, the base commit it started at, the outcome), the
//! role's notes, and ward's commit of its change as a git bundle
//! ([`BUNDLE_FILE`]). It decides nothing that needs trust.
//!
//! The record job (`ward research --visit DIR`, the write token, nothing of
//! the agent's run) takes the folder in as hostile input: everything in it
//! was in reach of the agent. [`Sealed::open`] reads the file with bounds
//! and a strict schema; [`take_in`] reads the bundle only with git in a
//! fresh bare repository with a clean environment, after its size is
//! checked, and accepts exactly one commit on exactly one ref
//! (`refs/heads/ward/research-<key>`) whose only parent is the base's tip
//! as this job fetched it. What it changed is read from that commit,
//! never from the visit: the record job judges it again
//! ([`super::policy::refusal`], the credential scan) before it pushes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::workspace::bundle::{self, BundleError};
use crate::workspace::git::{self, Scratch};

/// The visit's own account, in the sealed folder.
pub const RESEARCH_FILE: &str = "research.json";
/// ward's commit of the role's change.
pub const BUNDLE_FILE: &str = "research.bundle";
/// The role's notes, for the people reading the artifact.
pub const NOTES_FILE: &str = "notes.md";
/// The largest [`RESEARCH_FILE`] the record job reads.
pub const MAX_RESEARCH_BYTES: u64 = 64 * 1024;
/// The most of a commit message the record job reads.
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What the visit job sealed (all of it the agent could have rewritten).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    /// The visit's run id (its artifacts' folder).
    pub run: String,
    /// The finding the role addressed (16 hex), when it ran.
    pub key: Option<String>,
    /// The base branch's commit the role's worktree started at.
    pub start: Option<String>,
    pub outcome: Outcome,
}

/// What the role's run came to, as the visit job saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// ward committed what the role changed: the bundle holds the commit.
    Proposed,
    /// The role changed nothing.
    Unchanged,
    /// The visit job refused the change already.
    Refused { reason: String },
    /// The role's run could not be made or finished.
    Failed { error: String },
    /// No role ran (why: the role is off, no finding for it, its branch
    /// is there already).
    NoRole { why: String },
}

/// A sealed visit the record job cannot use: a sentence naming the file
/// and what to do. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum SealedError {
    #[error(
        "{0} does not exist: the visit job sealed no research visit there (it failed, or the artifact was not \
         downloaded to that folder); nothing was filed. Re-run the workflow, or give `--visit` the folder `ward \
         research --out` wrote"
    )]
    Missing(PathBuf),
    #[error(
        "{path} is {len} bytes, over the limit of {MAX_RESEARCH_BYTES} for a sealed research visit; nothing was \
         filed. It is not what `ward research --out` writes: re-run the workflow"
    )]
    TooLarge { path: PathBuf, len: u64 },
    #[error(
        "{path} is not a sealed research visit ({why}); nothing was filed. It is not what `ward research --out` \
         writes: re-run the workflow"
    )]
    Garbled { path: PathBuf, why: String },
    #[error("could not read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl Sealed {
    /// Writes the visit's account into `out` (made if missing).
    pub fn write(&self, out: &Path) -> anyhow::Result<()> {
        use anyhow::Context;
        std::fs::create_dir_all(out).with_context(|| format!("could not make {}", out.display()))?;
        let file = out.join(RESEARCH_FILE);
        let text = serde_json::to_string_pretty(self).context("could not write the sealed research visit")?;
        std::fs::write(&file, text + "\n").with_context(|| format!("could not write {}", file.display()))
    }

    /// Reads the sealed visit in `dir` with bounds: at most
    /// [`MAX_RESEARCH_BYTES`], strict JSON, a key of 16 hex digits and a
    /// start of a full commit id.
    pub fn open(dir: &Path) -> Result<Self, SealedError> {
        use std::io::Read;
        let path = dir.join(RESEARCH_FILE);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SealedError::Missing(path)),
            Err(source) => return Err(SealedError::Io { path, source }),
        };
        let mut bytes = Vec::new();
        file.take(MAX_RESEARCH_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| SealedError::Io { path: path.clone(), source })?;
        if bytes.len() as u64 > MAX_RESEARCH_BYTES {
            let len = std::fs::metadata(&path).map_or(bytes.len() as u64, |m| m.len());
            return Err(SealedError::TooLarge { path, len });
        }
        let garbled = |why: String| SealedError::Garbled { path: path.clone(), why };
        let sealed: Sealed = serde_json::from_slice(&bytes).map_err(|e| garbled(e.to_string()))?;
        let hex =
            |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if let Some(key) = sealed.key.as_deref().filter(|k| !hex(k, 16)) {
            return Err(garbled(format!("its key `{}` is not 16 hex digits", key.escape_debug())));
        }
        if let Some(start) = sealed.start.as_deref().filter(|s| !hex(s, 40) && !hex(s, 64)) {
            return Err(garbled(format!("its start `{}` is not a commit id", start.escape_debug())));
        }
        if sealed.outcome == Outcome::Proposed && (sealed.key.is_none() || sealed.start.is_none()) {
            return Err(garbled("it proposes a change but names no key or no start".into()));
        }
        Ok(sealed)
    }
}

impl Sealed {
    /// The visit job's line: what it sealed, and where.
    pub fn summary(&self, out: &Path) -> String {
        let what = match &self.outcome {
            Outcome::Proposed => "ward committed the research role's change (research.bundle)".to_string(),
            Outcome::Unchanged => "the research role proposed no change".to_string(),
            Outcome::Refused { reason } => format!("the research role's change was refused: {reason}"),
            Outcome::Failed { error } => format!("the research role's run failed: {error}"),
            Outcome::NoRole { why } => format!("no research role ran: {why}"),
        };
        format!(
            "research: the visit is sealed in {}: {what}; the record job (`ward research --visit`) judges it again \
             and files the proposals",
            out.display()
        )
    }
}

/// The role's commit once taken in: in a fresh bare repository (removed on
/// drop) beside the base's tip as this job fetched it.
pub struct Commit {
    _scratch: Scratch,
    /// The bare repository (read with git2 or `git --git-dir`).
    pub bare: PathBuf,
    /// The ref of the commit in `bare`.
    pub source: &'static str,
    pub base_tip: String,
    pub head: String,
    /// Its message, at most 64 KiB (the pull request quotes it fenced).
    pub message: String,
    /// The paths it changed against the base's tip.
    pub changed: Vec<String>,
}

/// Where the record job reads the base from and pushes to.
pub struct Remote<'a> {
    pub url: &'a str,
    pub token: Option<&'a str>,
    pub base: &'a str,
}

/// Takes in the commit the visit sealed in `dir` for `branch`, started (it
/// says) at `claimed_start` (see the module comment). A refusal is a
/// sentence; nothing is pushed.
pub fn take_in(dir: &Path, branch: &str, claimed_start: &str, remote: &Remote<'_>) -> Result<Commit, BundleError> {
    let refuse = |s: String| Err(BundleError::Refused(s));
    let file = dir.join(BUNDLE_FILE);
    if !file.is_file() {
        return refuse(format!(
            "the visit says ward committed the role's change, but sealed no {} beside it",
            file.display()
        ));
    }
    let repo = bundle::RecordRepo::new("research.git")?;
    let (scratch, bare) = (&repo.scratch, &repo.bare);
    let git_in = |args: &[&str]| repo.git(args);
    let base_ref = "refs/ward/base";
    if !git::fetch_into(bare, &scratch.0, remote.url, remote.base, base_ref, remote.token)? {
        return refuse(format!("the base branch `{}` is not on the remote", remote.base));
    }
    let base_tip = git::text(git_in(&["rev-parse", base_ref]), "rev-parse")?;
    if claimed_start != base_tip {
        return refuse(format!(
            "the visit's role started at {claimed_start}, and `{}` is at {base_tip} now: the base moved since the \
             visit (or the visit is not this run's): the change is stale, and nothing of it is pushed",
            remote.base
        ));
    }
    let head = bundle::fetch_bundle(&file, bare, &scratch.0, branch)?;
    let parents = git::text(git_in(&["rev-list", "--parents", "--max-count=1", &head]), "rev-list")?;
    let parents: Vec<&str> = parents.split_whitespace().skip(1).collect();
    if parents != [base_tip.as_str()] {
        return refuse(format!(
            "the visit's `{branch}` must be one commit whose only parent is `{}`'s tip {base_tip}; its parents are {}",
            remote.base,
            if parents.is_empty() { "none".to_string() } else { parents.join(", ") }
        ));
    }
    let (changed, _) = bundle::too_large_or_changed(bare, &base_tip, &head)?;
    let message = git::text(git_in(&["log", "-1", "--format=%B", &head]), "log")?;
    let message = crate::untrusted::cut(&message, MAX_MESSAGE_BYTES, "the rest is in the commit");
    let bundle::RecordRepo { scratch, bare } = repo;
    Ok(Commit { _scratch: scratch, bare, source: "refs/ward/visit", base_tip, head, message, changed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed_in(text: &str) -> (tempfile::TempDir, Result<Sealed, SealedError>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RESEARCH_FILE), text).unwrap();
        let read = Sealed::open(dir.path());
        (dir, read)
    }

    #[test]
    fn a_sealed_visit_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let sealed = Sealed {
            run: "r1".into(),
            key: Some("0123456789abcdef".into()),
            start: Some("a".repeat(40)),
            outcome: Outcome::Proposed,
        };
        sealed.write(dir.path()).unwrap();
        assert_eq!(Sealed::open(dir.path()).unwrap(), sealed);
        let none = Sealed { run: "r2".into(), key: None, start: None, outcome: Outcome::NoRole { why: "off".into() } };
        none.write(dir.path()).unwrap();
        assert_eq!(Sealed::open(dir.path()).unwrap(), none);
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "ward")
            .env("GIT_AUTHOR_EMAIL", "ward@example.com")
            .env("GIT_COMMITTER_NAME", "ward")
            .env("GIT_COMMITTER_EMAIL", "ward@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn commit(dir: &Path, path: &str, text: &str) -> String {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
        git(dir, &["add", "--all"]);
        git(dir, &["commit", "--quiet", "-m", &format!("change {path}")]);
        git(dir, &["rev-parse", "HEAD"])
    }

    /// The commits `branch` has over `since`, as the visit folder's bundle.
    fn bundled(repo: &Path, dir: &Path, reference: &str, since: &str) {
        let file = dir.join(BUNDLE_FILE);
        let _ = std::fs::remove_file(&file);
        git(repo, &["bundle", "create", "--quiet", file.to_str().unwrap(), reference, &format!("^{since}")]);
    }

    #[test]
    fn the_record_takes_in_one_commit_on_the_base_tip_and_refuses_anything_else() {
        let remote = tempfile::tempdir().unwrap();
        let repo = remote.path();
        git(repo, &["init", "--quiet", "--initial-branch", "main"]);
        let base = commit(repo, "roles/fellow.md", "a role\n");
        let dir = tempfile::tempdir().unwrap();
        let url = repo.display().to_string();
        let at = Remote { url: &url, token: None, base: "main" };
        let branch = "ward/research-0123456789abcdef";

        git(repo, &["checkout", "--quiet", "-b", branch]);
        commit(repo, "skills/new.md", "a skill\n");
        bundled(repo, dir.path(), &format!("refs/heads/{branch}"), &base);
        let taken = take_in(dir.path(), branch, &base, &at).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(taken.base_tip, base);
        assert_eq!(taken.changed, ["skills/new.md"]);
        assert_eq!(taken.message, "change skills/new.md");

        let refused = |start: &str, why: &str| match take_in(dir.path(), branch, start, &at) {
            Err(BundleError::Refused(reason)) => assert!(reason.contains(why), "{reason}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("taken in, expected a refusal with {why}"),
        };
        // Two commits: the record takes one.
        commit(repo, "skills/more.md", "more\n");
        bundled(repo, dir.path(), &format!("refs/heads/{branch}"), &base);
        refused(&base, "must be one commit whose only parent is");
        // Another ref than the finding's branch.
        git(repo, &["branch", "other"]);
        bundled(repo, dir.path(), "refs/heads/other", &base);
        refused(&base, "must carry exactly one ref");
        // The base moved since the visit: stale.
        git(repo, &["checkout", "--quiet", "main"]);
        commit(repo, "README.md", "moved\n");
        refused(&base, "the base moved since the visit");
        // No bundle at all.
        std::fs::remove_file(dir.path().join(BUNDLE_FILE)).unwrap();
        refused(&base, "sealed no");
    }

    #[test]
    fn a_missing_garbled_or_oversized_visit_is_a_sentence_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Sealed::open(dir.path()).unwrap_err().to_string();
        assert!(missing.contains(RESEARCH_FILE) && missing.contains("nothing was filed"), "{missing}");

        let (_d, garbled) = sealed_in("{\"run\": 1");
        let garbled = garbled.unwrap_err().to_string();
        assert!(garbled.contains("is not a sealed research visit") && garbled.contains(RESEARCH_FILE), "{garbled}");

        let (_d, extra) = sealed_in(r#"{"run":"r","key":null,"start":null,"outcome":{"kind":"proposed"},"trust":1}"#);
        assert!(extra.unwrap_err().to_string().contains("unknown field `trust`"));

        let (_d, key) = sealed_in(r#"{"run":"r","key":"../x","start":null,"outcome":{"kind":"unchanged"}}"#);
        assert!(key.unwrap_err().to_string().contains("is not 16 hex digits"));

        let (_d, bare) = sealed_in(r#"{"run":"r","key":null,"start":null,"outcome":{"kind":"proposed"}}"#);
        assert!(bare.unwrap_err().to_string().contains("names no key or no start"));

        let (_d, big) = sealed_in(&" ".repeat(MAX_RESEARCH_BYTES as usize + 1));
        let big = big.unwrap_err().to_string();
        assert!(big.contains("over the limit") && big.contains(RESEARCH_FILE), "{big}");
    }
}
