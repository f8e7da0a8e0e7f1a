//! The repository behind the fake: a real bare git repository in a
//! temporary folder. git2 writes what GitHub's API writes (the contents
//! API, the git data API, merges, people's commits in tests), and
//! `git http-backend` (CGI, from the machine's git) serves it over the
//! smart HTTP protocol, so a push is a real push and a pull request's head
//! is the commit actually pushed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use git2::{BranchType, FileMode, ObjectType, Oid, Repository, RepositoryInitOptions, Signature, Sort, Time};

/// The all-zero object id git and GitHub use for "no commit".
pub const ZERO: &str = "0000000000000000000000000000000000000000";

/// GitHub refuses a push that adds or changes a workflow file unless the
/// token may write workflows, which `GITHUB_TOKEN` never may. The fake
/// says so from a real `pre-receive` hook; `FAKE_GITHUB_WORKFLOWS=write`
/// is set only for tokens that hold `workflows: write`.
const PRE_RECEIVE: &str = r#"#!/bin/sh
[ "$FAKE_GITHUB_WORKFLOWS" = write ] && exit 0
zero=0000000000000000000000000000000000000000
refused=0
while read -r old new ref; do
  [ "$new" = "$zero" ] && continue
  for f in $(git log --format= --name-only "$new" --not --all -- .github/workflows | sort -u); do
    echo "refusing to allow a GitHub App to create or update workflow \`$f\` without \`workflows\` permission" >&2
    refused=1
  done
done
exit $refused
"#;

/// One commit, as the API and the webhooks describe it.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    pub sha: String,
    pub tree: String,
    pub message: String,
    pub parents: Vec<String>,
    pub author_name: String,
    pub author_email: String,
    /// Unix seconds.
    pub at: i64,
}

/// Who a commit is by: GitHub's no-reply address of a login.
pub fn identity(login: &str, at: i64) -> Signature<'static> {
    let name = login.to_string();
    let email = format!("{}@users.noreply.github.com", login.replace(['[', ']'], ""));
    Signature::new(&name, &email, &Time::new(at, 0)).expect("a valid signature")
}

pub struct BareRepo {
    root: tempfile::TempDir,
    pub path: PathBuf,
}

impl std::fmt::Debug for BareRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BareRepo({})", self.path.display())
    }
}

impl BareRepo {
    /// `<tmp>/<owner>/<repo>.git`, bare, default branch `main` with one
    /// commit (a README, as "Initialize this repository" makes).
    pub fn create(owner: &str, repo: &str, at: i64) -> Self {
        let root = tempfile::tempdir().expect("a temporary folder for the fake's repository");
        let path = root.path().join(owner).join(format!("{repo}.git"));
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).initial_head("main");
        let r = Repository::init_opts(&path, &opts).expect("git init --bare");
        {
            let mut config = r.config().expect("repository config");
            // What github.com allows: any reachable commit in a fetch (actions/checkout
            // fetches the event's sha), partial clones, pushes over HTTP.
            config.set_bool("uploadpack.allowAnySHA1InWant", true).unwrap();
            config.set_bool("uploadpack.allowFilter", true).unwrap();
            config.set_bool("http.receivepack", true).unwrap();
            config.set_bool("receive.denyDeleteCurrent", true).unwrap();
        }
        let hook = path.join("hooks").join("pre-receive");
        std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
        std::fs::write(&hook, PRE_RECEIVE).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let this = Self { root, path };
        this.empty_tree();
        this.write_file("main", "README.md", format!("# {repo}\n").as_bytes(), "Initial commit", owner, at, None)
            .expect("the first commit");
        this
    }

    /// The folder holding `<owner>/<repo>.git` (`GIT_PROJECT_ROOT`).
    pub fn project_root(&self) -> &Path {
        self.root.path()
    }

    pub fn open(&self) -> Repository {
        Repository::open_bare(&self.path).expect("the fake's repository opens")
    }

    /// Writes the empty tree (GitHub has it; the charts branch starts from it).
    pub fn empty_tree(&self) -> String {
        let r = self.open();
        r.treebuilder(None).and_then(|b| b.write()).expect("the empty tree").to_string()
    }

    /// Branches and tags: full ref name -> sha.
    pub fn refs(&self) -> BTreeMap<String, String> {
        let r = self.open();
        let mut out = BTreeMap::new();
        for reference in r.references().expect("refs").flatten() {
            let Some(name) = reference.name() else { continue };
            if !(name.starts_with("refs/heads/") || name.starts_with("refs/tags/")) {
                continue;
            }
            if let Ok(commit) = reference.peel_to_commit() {
                out.insert(name.to_string(), commit.id().to_string());
            }
        }
        out
    }

    pub fn branch_head(&self, branch: &str) -> Option<String> {
        let r = self.open();
        let b = r.find_branch(branch, BranchType::Local).ok()?;
        Some(b.get().peel_to_commit().ok()?.id().to_string())
    }

    /// A commit named by a branch, a tag, a full ref or a (full) sha.
    pub fn resolve(&self, rev: &str) -> Option<String> {
        let r = self.open();
        for name in [format!("refs/heads/{rev}"), format!("refs/tags/{rev}"), rev.to_string()] {
            if let Ok(reference) = r.find_reference(&name)
                && let Ok(c) = reference.peel_to_commit()
            {
                return Some(c.id().to_string());
            }
        }
        let oid = Oid::from_str(rev).ok().filter(|_| rev.len() == 40)?;
        r.find_commit(oid).ok().map(|c| c.id().to_string())
    }

    pub fn has_object(&self, sha: &str) -> bool {
        let r = self.open();
        Oid::from_str(sha).ok().and_then(|oid| r.find_object(oid, None).ok()).is_some()
    }

    pub fn commit(&self, sha: &str) -> Option<CommitInfo> {
        let r = self.open();
        let c = r.find_commit(Oid::from_str(sha).ok()?).ok()?;
        Some(info(&c))
    }

    /// The bytes and blob sha of `path` at `rev`.
    pub fn read_file(&self, rev: &str, path: &str) -> Option<(Vec<u8>, String)> {
        let sha = self.resolve(rev)?;
        let r = self.open();
        let tree = r.find_commit(Oid::from_str(&sha).ok()?).ok()?.tree().ok()?;
        let entry = tree.get_path(Path::new(path)).ok()?;
        let blob = r.find_blob(entry.id()).ok()?;
        Some((blob.content().to_vec(), blob.id().to_string()))
    }

    /// The bytes of the blob `sha`.
    pub fn blob(&self, sha: &str) -> Option<Vec<u8>> {
        let r = self.open();
        let blob = r.find_blob(Oid::from_str(sha).ok()?).ok()?;
        Some(blob.content().to_vec())
    }

    /// Every file at `rev`: path -> blob sha.
    pub fn files(&self, rev: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(sha) = self.resolve(rev) else { return out };
        let r = self.open();
        let tree = r.find_commit(Oid::from_str(&sha).unwrap()).unwrap().tree().unwrap();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(ObjectType::Blob) {
                out.insert(format!("{dir}{}", entry.name().unwrap_or_default()), entry.id().to_string());
            }
            git2::TreeWalkResult::Ok
        })
        .unwrap();
        out
    }

    /// Commits `bytes` at `path` on `branch` (created from nothing when it
    /// does not exist), by `login`. With `expected_head`, only while the
    /// branch still points there. Returns (commit sha, blob sha).
    #[allow(clippy::too_many_arguments)]
    pub fn write_file(
        &self,
        branch: &str,
        path: &str,
        bytes: &[u8],
        message: &str,
        login: &str,
        at: i64,
        expected_head: Option<&str>,
    ) -> Result<(String, String), String> {
        let r = self.open();
        let head = self.branch_head(branch);
        if let Some(expected) = expected_head
            && head.as_deref() != Some(expected)
        {
            return Err(format!("branch {branch} moved"));
        }
        let parent = head.as_ref().map(|h| r.find_commit(Oid::from_str(h).unwrap()).unwrap());
        let base_tree = match &parent {
            Some(p) => p.tree().unwrap(),
            None => r.find_tree(Oid::from_str(&self.empty_tree()).unwrap()).unwrap(),
        };
        let blob = r.blob(bytes).map_err(|e| e.to_string())?;
        let tree = git2::build::TreeUpdateBuilder::new()
            .upsert(path, blob, FileMode::Blob)
            .create_updated(&r, &base_tree)
            .map_err(|e| e.to_string())?;
        let tree = r.find_tree(tree).unwrap();
        let sig = identity(login, at);
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let commit = r.commit(None, &sig, &committer(at), message, &tree, &parents).map_err(|e| e.to_string())?;
        self.set_ref(&format!("refs/heads/{branch}"), &commit.to_string(), head.as_deref())?;
        Ok((commit.to_string(), blob.to_string()))
    }

    /// Commits the removal of `path` on `branch`, by `login`.
    pub fn remove_file(&self, branch: &str, path: &str, message: &str, login: &str, at: i64) -> Result<String, String> {
        let r = self.open();
        let head = self.branch_head(branch).ok_or_else(|| format!("no branch {branch}"))?;
        let parent = r.find_commit(Oid::from_str(&head).unwrap()).unwrap();
        let tree = git2::build::TreeUpdateBuilder::new()
            .remove(path)
            .create_updated(&r, &parent.tree().unwrap())
            .map_err(|e| e.to_string())?;
        let tree = r.find_tree(tree).unwrap();
        let commit = r
            .commit(None, &identity(login, at), &committer(at), message, &tree, &[&parent])
            .map_err(|e| e.to_string())?;
        self.set_ref(&format!("refs/heads/{branch}"), &commit.to_string(), Some(&head))?;
        Ok(commit.to_string())
    }

    /// A commit of `tree` with `parents` (the git data API), on no branch.
    pub fn commit_tree(
        &self,
        tree: &str,
        parents: &[String],
        message: &str,
        login: &str,
        at: i64,
    ) -> Result<String, String> {
        let r = self.open();
        let tree = Oid::from_str(tree).ok().and_then(|t| r.find_tree(t).ok()).ok_or("Tree SHA does not exist")?;
        let mut ps = Vec::new();
        for p in parents {
            let c = Oid::from_str(p).ok().and_then(|p| r.find_commit(p).ok()).ok_or("Parent SHA does not exist")?;
            ps.push(c);
        }
        let refs: Vec<&git2::Commit> = ps.iter().collect();
        r.commit(None, &identity(login, at), &committer(at), message, &tree, &refs)
            .map(|c| c.to_string())
            .map_err(|e| e.to_string())
    }

    /// Points `name` at `sha`; with `expected`, only while it still points
    /// there (`None` = the ref must not exist).
    pub fn set_ref(&self, name: &str, sha: &str, expected: Option<&str>) -> Result<(), String> {
        let r = self.open();
        let oid = Oid::from_str(sha).map_err(|e| e.to_string())?;
        match expected {
            Some(old) => r
                .reference_matching(name, oid, true, Oid::from_str(old).unwrap(), "fake github")
                .map(|_| ())
                .map_err(|e| e.to_string()),
            None => r.reference(name, oid, false, "fake github").map(|_| ()).map_err(|e| e.to_string()),
        }
    }

    pub fn delete_ref(&self, name: &str) {
        let r = self.open();
        if let Ok(mut reference) = r.find_reference(name) {
            let _ = reference.delete();
        }
    }

    /// Commits reachable from `head` and not from `base`, oldest first (a
    /// pull request's commits, a push's new commits).
    pub fn commits_between(&self, base: Option<&str>, head: &str) -> Vec<CommitInfo> {
        let r = self.open();
        let mut walk = r.revwalk().unwrap();
        walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE).unwrap();
        if walk.push(Oid::from_str(head).unwrap_or(Oid::zero())).is_err() {
            return Vec::new();
        }
        if let Some(base) = base.and_then(|b| Oid::from_str(b).ok()) {
            let _ = walk.hide(base);
        }
        walk.flatten().filter_map(|oid| r.find_commit(oid).ok()).map(|c| info(&c)).collect()
    }

    /// Commits of `head` that no ref other than `except` reaches (what a
    /// push of a new branch brings).
    pub fn new_commits(&self, head: &str, except: &str) -> Vec<CommitInfo> {
        let r = self.open();
        let mut walk = r.revwalk().unwrap();
        walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE).unwrap();
        if walk.push(Oid::from_str(head).unwrap_or(Oid::zero())).is_err() {
            return Vec::new();
        }
        for (name, sha) in self.refs() {
            if name != except {
                let _ = walk.hide(Oid::from_str(&sha).unwrap());
            }
        }
        walk.flatten().filter_map(|oid| r.find_commit(oid).ok()).map(|c| info(&c)).collect()
    }

    pub fn merge_base(&self, a: &str, b: &str) -> Option<String> {
        let r = self.open();
        r.merge_base(Oid::from_str(a).ok()?, Oid::from_str(b).ok()?).ok().map(|o| o.to_string())
    }

    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> bool {
        let r = self.open();
        match (Oid::from_str(ancestor), Oid::from_str(of)) {
            (Ok(a), Ok(b)) => a == b || r.graph_descendant_of(b, a).unwrap_or(false),
            _ => false,
        }
    }

    /// Files that differ between two commits (for `paths:` filters).
    pub fn changed_files(&self, from: Option<&str>, to: &str) -> Vec<String> {
        let r = self.open();
        let tree_of = |sha: &str| r.find_commit(Oid::from_str(sha).ok()?).ok()?.tree().ok();
        let new = tree_of(to);
        let old = from.and_then(tree_of);
        let diff = r.diff_tree_to_tree(old.as_ref(), new.as_ref(), None).unwrap();
        diff.deltas()
            .filter_map(|d| d.new_file().path().or(d.old_file().path()).map(|p| p.to_string_lossy().into_owned()))
            .collect()
    }

    /// A pull request's diff entries between two commits: each file's path
    /// (a removed file's old one) and GitHub's status for it.
    pub fn diff_entries(&self, from: Option<&str>, to: &str) -> Vec<(String, &'static str)> {
        let r = self.open();
        let tree_of = |sha: &str| r.find_commit(Oid::from_str(sha).ok()?).ok()?.tree().ok();
        let (new, old) = (tree_of(to), from.and_then(tree_of));
        let diff = r.diff_tree_to_tree(old.as_ref(), new.as_ref(), None).unwrap();
        diff.deltas()
            .filter_map(|d| {
                let status = match d.status() {
                    git2::Delta::Added => "added",
                    git2::Delta::Deleted => "removed",
                    _ => "modified",
                };
                let path = d.new_file().path().or(d.old_file().path())?;
                Some((path.to_string_lossy().into_owned(), status))
            })
            .collect()
    }

    /// The tree of merging `head` into `base`, or `None` on a conflict.
    fn merged_tree(&self, base: &str, head: &str) -> Option<String> {
        let r = self.open();
        let b = r.find_commit(Oid::from_str(base).ok()?).ok()?;
        let h = r.find_commit(Oid::from_str(head).ok()?).ok()?;
        let mut index = r.merge_commits(&b, &h, None).ok()?;
        if index.has_conflicts() {
            return None;
        }
        index.write_tree_to(&r).ok().map(|t| t.to_string())
    }

    /// GitHub's test merge of a pull request (`refs/pull/<n>/merge`): the
    /// head merged into the base, on no branch. `None` on a conflict.
    pub fn test_merge(&self, base: &str, head: &str, at: i64) -> Option<String> {
        let tree = self.merged_tree(base, head)?;
        let message = format!("Merge {head} into {base}");
        self.commit_tree(&tree, &[base.to_string(), head.to_string()], &message, "github", at).ok()
    }

    /// Merges `head` into branch `base`: `squash` (one commit, one parent)
    /// or `merge` (a merge commit). `Err` names a conflict.
    pub fn merge_into(
        &self,
        base: &str,
        head: &str,
        squash: bool,
        message: &str,
        login: &str,
        at: i64,
    ) -> Result<String, String> {
        let base_sha = self.branch_head(base).ok_or_else(|| format!("no branch {base}"))?;
        let tree = self.merged_tree(&base_sha, head).ok_or("Merge conflict")?;
        let parents = if squash { vec![base_sha.clone()] } else { vec![base_sha.clone(), head.to_string()] };
        let sha = self.commit_tree(&tree, &parents, message, login, at)?;
        self.set_ref(&format!("refs/heads/{base}"), &sha, Some(&base_sha))?;
        Ok(sha)
    }
}

/// Answers one smart-HTTP request with `git http-backend`, serving the
/// repositories under `project_root`.
pub fn http_backend(project_root: &Path, req: &CgiRequest<'_>) -> CgiAnswer {
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", project_root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", project_root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", req.method)
        .env("PATH_INFO", req.path_info)
        .env("QUERY_STRING", req.query)
        .env("CONTENT_TYPE", req.content_type)
        .env("CONTENT_LENGTH", req.body.len().to_string())
        .env("REMOTE_USER", req.remote_user)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !req.content_encoding.is_empty() {
        cmd.env("HTTP_CONTENT_ENCODING", req.content_encoding);
    }
    if !req.git_protocol.is_empty() {
        cmd.env("GIT_PROTOCOL", req.git_protocol);
    }
    if req.workflows_write {
        cmd.env("FAKE_GITHUB_WORKFLOWS", "write");
    }
    let mut child = cmd.spawn().expect("git http-backend starts");
    let mut stdin = child.stdin.take().unwrap();
    let body = req.body.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let out = child.wait_with_output().expect("git http-backend runs");
    let _ = writer.join();
    parse_cgi(&out.stdout, &out.stderr)
}

/// GitHub's committer for commits made through the API.
fn committer(at: i64) -> Signature<'static> {
    Signature::new("GitHub", "noreply@github.com", &Time::new(at, 0)).unwrap()
}

fn info(c: &git2::Commit<'_>) -> CommitInfo {
    CommitInfo {
        sha: c.id().to_string(),
        tree: c.tree_id().to_string(),
        message: c.message().unwrap_or_default().to_string(),
        parents: c.parent_ids().map(|p| p.to_string()).collect(),
        author_name: c.author().name().unwrap_or_default().to_string(),
        author_email: c.author().email().unwrap_or_default().to_string(),
        at: c.time().seconds(),
    }
}

/// The git object id of a blob with these bytes (what GitHub calls a file's sha).
pub fn blob_sha(bytes: &[u8]) -> String {
    Oid::hash_object(ObjectType::Blob, bytes).expect("hashing").to_string()
}

pub struct CgiRequest<'a> {
    pub method: &'a str,
    pub path_info: &'a str,
    pub query: &'a str,
    pub content_type: &'a str,
    pub content_encoding: &'a str,
    pub git_protocol: &'a str,
    pub body: &'a [u8],
    pub remote_user: &'a str,
    pub workflows_write: bool,
}

pub struct CgiAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub stderr: String,
}

fn parse_cgi(out: &[u8], stderr: &[u8]) -> CgiAnswer {
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, i + 2)));
    let Some((end, body_start)) = split else {
        return CgiAnswer {
            status: 500,
            headers: Vec::new(),
            body: out.to_vec(),
            stderr: String::from_utf8_lossy(stderr).into_owned(),
        };
    };
    let mut status = 200;
    let mut headers = Vec::new();
    for line in String::from_utf8_lossy(&out[..end]).lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("status") {
            status = v.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(500);
        } else {
            headers.push((k.to_string(), v.to_string()));
        }
    }
    CgiAnswer {
        status,
        headers,
        body: out[body_start..].to_vec(),
        stderr: String::from_utf8_lossy(stderr).into_owned(),
    }
}
