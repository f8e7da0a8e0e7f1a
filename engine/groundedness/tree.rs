//! The tree claims are checked against: git's own view of one commit (or
//! of what a worktree is about to commit), never a capped walk of folders.
//!
//! - [`Tree::commit`]: a repository and a commit or tree id, read from the
//!   object database alone. This is what a job that only has the visit's
//!   commits (a git bundle fetched into a repository) can check.
//! - [`Tree::worktree`]: HEAD's tree as `git add -A && git commit` would
//!   change it: files the agent left (untracked, not ignored) are in it at
//!   their content on disk, files it changed are at their new content,
//!   files it deleted are gone. Once ward has committed the leftovers, this
//!   is exactly HEAD.
//!
//! Submodules are listed inside their own repository at the commit the
//! superproject records, found in the worktree's checkout of the submodule
//! or in `<git dir>/modules/<name>`; one found nowhere is "not initialised
//! here", and claims inside it are not checkable rather than false. A file
//! stored in Git LFS is read at its real content, from the smudged file in
//! the checkout or from the repository's LFS object store; a pointer is
//! never read as the file.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, ObjectType, Oid, Repository, StatusOptions, TreeWalkMode, TreeWalkResult};

/// Why a tree could not be read: a sentence naming the repository.
#[derive(Debug, thiserror::Error)]
#[error("could not read {what} of {place}: {message}")]
pub struct TreeError {
    what: String,
    place: String,
    message: String,
}

fn fail(what: &str, place: &Path) -> impl FnOnce(git2::Error) -> TreeError {
    let (what, place) = (what.to_string(), place.display().to_string());
    move |e| TreeError { what, place, message: e.message().to_string() }
}

/// Folders that hold installed or built files, never the repository's own
/// (unless the repository tracks something in them).
#[rustfmt::skip]
const GENERATED: &[&str] = &[
    "node_modules", "target", ".venv", "venv", "__pycache__", ".tox", ".nox", ".gradle", ".next", ".nuxt",
    ".svelte-kit", ".cache", ".parcel-cache", ".turbo", "bazel-out", "bazel-bin", "bazel-testlogs", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", "dist", "build", "out", "coverage", ".git",
];

/// Extensions of files a test could be written in: an LFS file with one of
/// them whose content is not here leaves a test search incomplete.
#[rustfmt::skip]
const CODE: &[&str] = &[
    "rs", "py", "js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx", "go", "java", "kt", "kts", "swift", "c", "h",
    "cc", "cpp", "hpp", "cs", "rb", "php", "scala", "sh", "m", "mm", "ex", "exs", "erl", "hs", "ml", "dart", "lua",
    "pl", "t", "clj", "groovy", "zig", "nim",
];

/// What the checks read: every file of the tree (with the files of the
/// submodules found), the submodules, and where to read contents from.
pub struct Tree {
    describe: String,
    files: BTreeMap<String, Entry>,
    submodules: BTreeMap<String, Submodule>,
    repos: Vec<RepoRef>,
    /// The worktree, for absolute paths and ignored files.
    workdir: Option<PathBuf>,
    /// The files here are all the agent had (its own worktree): a test it
    /// ran is among them, so a submodule not initialised or LFS code whose
    /// content is not here cannot hide one. Not so for a commit read
    /// elsewhere, which may lack what the agent had.
    agent_view: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    source: Source,
    pub(crate) symlink: bool,
}

#[derive(Debug, Clone)]
enum Source {
    Blob {
        repo: usize,
        oid: Oid,
    },
    /// A file the agent left or changed, read from the worktree.
    Disk(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
enum Submodule {
    Listed,
    /// Why its files are not here.
    Missing(String),
}

/// A repository whose objects the tree reads.
struct RepoRef {
    git_dir: PathBuf,
    /// Where its files sit in the tree (`vendor/lib/`; empty at the top).
    prefix: String,
    /// A checkout of exactly the listed commit, for smudged LFS files.
    checkout: Option<PathBuf>,
    /// LFS object stores (`<common dir>/lfs/objects`, `lfs.storage`).
    lfs: Vec<PathBuf>,
}

/// What a path names in the tree.
pub(crate) enum Lookup<'t> {
    /// The file, or the files whose path ends with it.
    Files(Vec<(&'t str, &'t Entry)>),
    Folder,
    /// The root folder of a submodule.
    Submodule,
    /// Absent; `Some(why)` when that cannot be told from here.
    Missing(Option<String>),
    /// An absolute path outside the worktree: not a claim about the tree.
    Outside,
}

impl Tree {
    /// A commit (or tree) of the repository at `repo` (its worktree or git
    /// directory, bare or not): `rev` is an id or any revision git reads.
    pub fn commit(repo: &Path, rev: &str) -> Result<Tree, TreeError> {
        let git = Repository::open(repo).map_err(fail("the repository", repo))?;
        let object = git.revparse_single(rev).map_err(fail(&format!("`{rev}`"), repo))?;
        let tree = object.peel_to_tree().map_err(fail(&format!("the tree of `{rev}`"), repo))?;
        let describe = match object.peel_to_commit() {
            Ok(c) => format!("commit {}", short(c.id())),
            Err(_) => format!("tree {}", short(tree.id())),
        };
        let mut t = Tree::empty(describe, None);
        t.add_repo(&git, Some(&tree), String::new(), None)?;
        Ok(t)
    }

    /// What the worktree at `dir` commits: HEAD with the agent's leftovers
    /// (see the module notes). A folder that is not a git repository is
    /// read as it is, every file in it untracked.
    ///
    /// The `.git` link in an agent's worktree is the agent's to rewrite:
    /// read it after ward has checked that link (committing the leftovers
    /// does), or read the commit ward made with [`Tree::commit`].
    pub fn worktree(dir: &Path) -> Result<Tree, TreeError> {
        let git = match Repository::open(dir) {
            Ok(git) => git,
            Err(e) if e.code() == ErrorCode::NotFound => return Tree::folder(dir),
            Err(e) => return Err(fail("the repository", dir)(e)),
        };
        let Some(workdir) = git.workdir().map(Path::to_path_buf) else {
            return Tree::commit(dir, "HEAD");
        };
        let head = match git.head() {
            Ok(head) => Some(head.peel_to_tree().map_err(fail("HEAD", dir))?),
            Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => None,
            Err(e) => return Err(fail("HEAD", dir)(e)),
        };
        let mut t = Tree::empty("the worktree".into(), Some(workdir.clone()));
        t.add_repo(&git, head.as_ref(), String::new(), Some(workdir.clone()))?;
        t.overlay(&git, &workdir)?;
        Ok(t)
    }

    /// A folder outside any repository: every file in it, `.git` aside.
    fn folder(dir: &Path) -> Result<Tree, TreeError> {
        let mut t = Tree::empty("the worktree".into(), Some(dir.to_path_buf()));
        let mut stack = vec![dir.to_path_buf()];
        while let Some(folder) = stack.pop() {
            let entries = std::fs::read_dir(&folder).map_err(|e| TreeError {
                what: "the folder".into(),
                place: folder.display().to_string(),
                message: e.to_string(),
            })?;
            for e in entries.flatten() {
                let Ok(kind) = e.file_type() else { continue };
                if e.file_name() == ".git" {
                    continue;
                }
                if kind.is_dir() {
                    stack.push(e.path());
                } else if let Some(key) = e.path().strip_prefix(dir).ok().and_then(|p| p.to_str()) {
                    let key = key.replace(std::path::MAIN_SEPARATOR, "/");
                    t.files.insert(key, Entry { source: Source::Disk(e.path()), symlink: kind.is_symlink() });
                }
            }
        }
        Ok(t)
    }

    fn empty(describe: String, workdir: Option<PathBuf>) -> Tree {
        let agent_view = workdir.is_some();
        Tree { describe, files: BTreeMap::new(), submodules: BTreeMap::new(), repos: Vec::new(), workdir, agent_view }
    }

    /// "the worktree", "commit 1a2b3c4d": where a missing path is missing.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Files listed, submodules' included.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Lists `tree` of `git` under `prefix`, then its submodules.
    fn add_repo(
        &mut self,
        git: &Repository,
        tree: Option<&git2::Tree<'_>>,
        prefix: String,
        checkout: Option<PathBuf>,
    ) -> Result<(), TreeError> {
        let index = self.repos.len();
        self.repos.push(RepoRef {
            git_dir: git.path().to_path_buf(),
            prefix: prefix.clone(),
            checkout: checkout.clone(),
            lfs: lfs_stores(git),
        });
        let Some(tree) = tree else { return Ok(()) };
        let mut links = Vec::new();
        tree.walk(TreeWalkMode::PreOrder, |root, entry| {
            let Some(name) = entry.name() else { return TreeWalkResult::Skip };
            match entry.kind() {
                Some(ObjectType::Blob) => {
                    let source = Source::Blob { repo: index, oid: entry.id() };
                    let symlink = entry.filemode() == 0o120000;
                    self.files.insert(format!("{prefix}{root}{name}"), Entry { source, symlink });
                }
                Some(ObjectType::Commit) => links.push((format!("{root}{name}"), entry.id())),
                _ => {}
            }
            TreeWalkResult::Ok
        })
        .map_err(fail("the tree", git.path()))?;
        if links.is_empty() {
            return Ok(());
        }
        let names = tree
            .get_path(Path::new(".gitmodules"))
            .ok()
            .and_then(|e| git.find_blob(e.id()).ok())
            .map(|b| parse_gitmodules(&String::from_utf8_lossy(b.content())))
            .unwrap_or_default();
        for (path, commit) in links {
            let name = names.iter().find(|(_, p)| *p == path).map_or(path.as_str(), |(n, _)| n.as_str());
            let full = format!("{prefix}{path}");
            match find_submodule(git, checkout.as_deref(), &path, name, commit) {
                Some((sub, sub_checkout)) => {
                    let sub_tree =
                        sub.find_commit(commit).and_then(|c| c.tree()).map_err(fail("the tree", sub.path()))?;
                    self.submodules.insert(full.clone(), Submodule::Listed);
                    self.add_repo(&sub, Some(&sub_tree), format!("{full}/"), sub_checkout)?;
                }
                None => {
                    let why = format!(
                        "the submodule `{full}` is not initialised here (no repository holding its commit {})",
                        short(commit)
                    );
                    self.submodules.insert(full, Submodule::Missing(why));
                }
            }
        }
        Ok(())
    }

    /// The agent's leftovers: what `git add -A` would stage, at its content
    /// on disk (git's status finds them; ignored files stay out).
    fn overlay(&mut self, git: &Repository, workdir: &Path) -> Result<(), TreeError> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false)
            .exclude_submodules(true)
            .renames_head_to_index(false)
            .renames_index_to_workdir(false);
        let statuses = git.statuses(Some(&mut opts)).map_err(fail("the status", workdir))?;
        for s in statuses.iter() {
            let Some(path) = s.path() else { continue };
            if path.ends_with('/') {
                continue; // a repository nested in the worktree: not its files
            }
            match disk_entry(workdir, path) {
                Some(entry) => self.files.insert(path.to_string(), entry),
                None => self.files.remove(path),
            };
        }
        Ok(())
    }

    /// What `path` (as a claim writes it) names.
    pub(crate) fn lookup(&self, path: &str) -> Lookup<'_> {
        let mut p = path;
        if p.starts_with('/') {
            match self.relative_to_workdir(p) {
                Some(rel) => p = rel,
                None => return Lookup::Outside,
            }
        }
        let climbs = p.starts_with("../");
        while let Some(rest) = p.strip_prefix("../") {
            p = rest;
        }
        let folder = p.ends_with('/');
        let p = p.trim_end_matches('/');
        if p.is_empty() {
            return Lookup::Folder;
        }
        if let Some(why) = self.missing_submodule_above(p) {
            return Lookup::Missing(Some(why));
        }
        if !folder && let Some((key, entry)) = self.files.get_key_value(p) {
            return Lookup::Files(vec![(key.as_str(), entry)]);
        }
        if self.submodules.contains_key(p) {
            return Lookup::Submodule;
        }
        if self.has_under(&format!("{p}/")) {
            return Lookup::Folder;
        }
        // Not from the root: as the tail of a path (`lib.rs`, `src/lib.rs`
        // of a package, `../util.mjs` of an import).
        let tail = format!("/{p}");
        if folder {
            let inner = format!("/{p}/");
            if self.files.keys().any(|k| k.contains(&inner)) {
                return Lookup::Folder;
            }
        } else {
            let found: Vec<(&str, &Entry)> =
                self.files.iter().filter(|(k, _)| k.ends_with(&tail)).map(|(k, e)| (k.as_str(), e)).collect();
            if !found.is_empty() {
                return Lookup::Files(found);
            }
        }
        Lookup::Missing(self.why_unknowable(p, climbs || !p.contains('/')))
    }

    fn relative_to_workdir<'p>(&self, path: &'p str) -> Option<&'p str> {
        let workdir = self.workdir.as_ref()?;
        let real = workdir.canonicalize().ok();
        [Some(workdir.clone()), real].into_iter().flatten().find_map(|w| {
            let w = w.to_str()?.trim_end_matches('/').to_string();
            path.strip_prefix(&w)?.strip_prefix('/')
        })
    }

    fn has_under(&self, prefix: &str) -> bool {
        let first = self.files.range::<str, _>((Bound::Included(prefix), Bound::Unbounded)).next();
        first.is_some_and(|(k, _)| k.starts_with(prefix)) || self.submodules.keys().any(|s| s.starts_with(prefix))
    }

    fn missing_submodule_above(&self, path: &str) -> Option<String> {
        self.submodules.iter().find_map(|(s, state)| match state {
            Submodule::Missing(why) if path.strip_prefix(s.as_str()).is_some_and(|r| r.starts_with('/')) => {
                Some(why.clone())
            }
            _ => None,
        })
    }

    /// Why a path that is not in the tree may still be real: ignored on
    /// disk, under a folder of installed or built files, or (for a name
    /// whose folder the note did not give) in a submodule not here.
    fn why_unknowable(&self, path: &str, anywhere: bool) -> Option<String> {
        if let Some(workdir) = &self.workdir
            && disk_entry(workdir, path).is_some()
        {
            return Some("is on disk but ignored by git, so no commit holds it".into());
        }
        let parts: Vec<&str> = path.split('/').collect();
        for (i, part) in parts[..parts.len() - 1].iter().enumerate() {
            if GENERATED.contains(part) && !self.has_under(&format!("{}/", parts[..=i].join("/"))) {
                return Some(format!(
                    "is under `{part}/`, a folder of installed, built or git's own files that the repository does not track"
                ));
            }
        }
        if anywhere {
            return self.missing_submodules().first().map(|why| format!("is not in the files here; {why}"));
        }
        None
    }

    fn missing_submodules(&self) -> Vec<&str> {
        self.submodules
            .values()
            .filter_map(|s| match s {
                Submodule::Missing(why) => Some(why.as_str()),
                Submodule::Listed => None,
            })
            .collect()
    }

    pub(crate) fn reader(&self) -> Reader<'_> {
        Reader { tree: self, open: (0..self.repos.len()).map(|_| None).collect() }
    }
}

fn short(id: Oid) -> String {
    id.to_string()[..10].to_string()
}

/// A file in the worktree, not reached through a symbolic link.
fn disk_entry(workdir: &Path, path: &str) -> Option<Entry> {
    let mut at = workdir.to_path_buf();
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() || *part == "." || *part == ".." {
            return None;
        }
        at.push(part);
        let meta = at.symlink_metadata().ok()?;
        let last = i + 1 == parts.len();
        if !last && !meta.is_dir() {
            return None;
        }
        if last {
            return (meta.is_file() || meta.file_type().is_symlink())
                .then(|| Entry { source: Source::Disk(at.clone()), symlink: meta.file_type().is_symlink() });
        }
    }
    None
}

/// `[submodule "name"]` / `path = p` pairs of a `.gitmodules` file.
fn parse_gitmodules(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("[submodule") {
            name = rest.trim().trim_end_matches(']').trim().trim_matches('"').to_string().into();
        } else if let Some((key, value)) = line.split_once('=')
            && key.trim() == "path"
            && let Some(n) = &name
        {
            out.push((n.clone(), value.trim().trim_matches('"').trim_end_matches('/').to_string()));
        }
    }
    out
}

/// The repository of the submodule at `path` holding `commit`: its
/// checkout in the worktree, else `modules/<name>` of the git directory
/// (a linked worktree's, then the common one). The checkout is returned
/// when it is at `commit`, for LFS files.
fn find_submodule(
    git: &Repository,
    checkout: Option<&Path>,
    path: &str,
    name: &str,
    commit: Oid,
) -> Option<(Repository, Option<PathBuf>)> {
    let has = |r: &Repository| r.find_commit(commit).is_ok();
    if let Some(dir) = checkout.map(|c| c.join(path))
        && dir.join(".git").symlink_metadata().is_ok()
        && let Ok(sub) = Repository::open(&dir)
        && has(&sub)
    {
        let at_commit = sub.head().ok().and_then(|h| h.target()) == Some(commit);
        return Some((sub, at_commit.then_some(dir)));
    }
    let mut dirs = vec![git.path().join("modules").join(name), git.commondir().join("modules").join(name)];
    dirs.dedup();
    dirs.into_iter().filter(|d| d.is_dir()).filter_map(|d| Repository::open(d).ok()).find(has).map(|r| (r, None))
}

fn lfs_stores(git: &Repository) -> Vec<PathBuf> {
    let common = git.commondir().to_path_buf();
    let mut out = vec![common.join("lfs").join("objects")];
    if let Ok(storage) = git.config().and_then(|c| c.get_path("lfs.storage")) {
        let storage = if storage.is_absolute() { storage } else { common.join(storage) };
        out.insert(0, storage.join("objects"));
    }
    out
}

/// `(sha256 hex, size)` of a Git LFS pointer; `None` for any other content.
fn lfs_pointer(bytes: &[u8]) -> Option<(String, u64)> {
    if bytes.len() > 1024 {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let first = text.lines().next()?;
    if !(first.starts_with("version https://git-lfs.github.com/spec/")
        || first.starts_with("version https://hawser.github.com/spec/"))
    {
        return None;
    }
    let oid = text.lines().find_map(|l| l.strip_prefix("oid sha256:"))?.trim();
    let size = text.lines().find_map(|l| l.strip_prefix("size "))?.trim().parse().ok()?;
    (oid.len() == 64 && oid.bytes().all(|b| b.is_ascii_hexdigit())).then(|| (oid.to_ascii_lowercase(), size))
}

/// Reads file contents for one scoring, opening each repository once.
pub(crate) struct Reader<'t> {
    tree: &'t Tree,
    open: Vec<Option<Repository>>,
}

/// What a search for words found.
pub(crate) struct Found {
    pub(crate) words: HashSet<String>,
    /// Why the search could not read everything (submodules not here,
    /// code kept in LFS whose content is not here).
    pub(crate) unread: Vec<String>,
}

/// Why a file of the tree cannot be read, said after its path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unreadable {
    #[error("could not open {}: {}", .dir.display(), .error.message())]
    Open { dir: PathBuf, error: git2::Error },
    #[error("could not be read: {0}")]
    Disk(std::io::Error),
    #[error("could not be read: {}", .0.message())]
    Blob(git2::Error),
    /// In Git LFS, the object (its first 12 digits) not here.
    #[error("is stored in Git LFS and its content is not here (`git lfs pull` fetches object {0})")]
    Lfs(String),
}

impl Reader<'_> {
    fn repo(&mut self, i: usize) -> Result<&Repository, Unreadable> {
        Ok(match &mut self.open[i] {
            Some(git) => git,
            slot @ None => {
                let dir = &self.tree.repos[i].git_dir;
                slot.insert(Repository::open(dir).map_err(|error| Unreadable::Open { dir: dir.clone(), error })?)
            }
        })
    }

    /// The real content of `entry` (LFS resolved), or why it cannot be read.
    pub(crate) fn read(&mut self, key: &str, entry: &Entry) -> Result<Vec<u8>, Unreadable> {
        let (bytes, repo) = match &entry.source {
            Source::Disk(path) => {
                let bytes = std::fs::read(path).map_err(Unreadable::Disk)?;
                (bytes, 0)
            }
            Source::Blob { repo, oid } => {
                let blob = self.repo(*repo)?.find_blob(*oid).map_err(Unreadable::Blob)?;
                (blob.content().to_vec(), *repo)
            }
        };
        let Some((oid, size)) = lfs_pointer(&bytes) else { return Ok(bytes) };
        let r = &self.tree.repos[repo];
        // The smudged file of a checkout of this very commit.
        if let (Source::Blob { .. }, Some(checkout)) = (&entry.source, &r.checkout)
            && let Some(rel) = key.strip_prefix(r.prefix.as_str())
            && let Some(Entry { source: Source::Disk(path), symlink: false }) = disk_entry(checkout, rel)
            && let Ok(real) = std::fs::read(path)
            && lfs_pointer(&real).is_none()
        {
            return Ok(real);
        }
        for store in &r.lfs {
            let object = store.join(&oid[0..2]).join(&oid[2..4]).join(&oid);
            if object.metadata().is_ok_and(|m| m.len() == size)
                && let Ok(real) = std::fs::read(&object)
            {
                return Ok(real);
            }
        }
        Err(Unreadable::Lfs(oid[..12].to_string()))
    }

    /// Which of `words` (identifiers) occur as whole words in `files`, or
    /// in every file of the tree when `files` is `None`. Files the agent
    /// left or changed are read first, then paths that look like tests;
    /// the search stops when every word is found. No file is skipped for
    /// its size or count; binary files (a NUL in the first 8000 bytes, as
    /// git decides) are.
    pub(crate) fn search(&mut self, words: &[&str], files: Option<&[(&str, &Entry)]>) -> Found {
        let mut found = Found { words: HashSet::new(), unread: Vec::new() };
        if words.is_empty() {
            return found;
        }
        let alternation: Vec<String> = words.iter().map(|w| regex::escape(w)).collect();
        let pattern = format!(r"(?-u:\b)(?:{})(?-u:\b)", alternation.join("|"));
        let re = regex::bytes::Regex::new(&pattern).expect("escaped words make a regex");
        let all: Vec<(&str, &Entry)>;
        let files = match files {
            Some(f) => f,
            None => {
                let mut v: Vec<(&str, &Entry)> = self.tree.files.iter().map(|(k, e)| (k.as_str(), e)).collect();
                v.sort_by_key(|(k, e)| (!matches!(e.source, Source::Disk(_)), !looks_like_test(k)));
                if !self.tree.agent_view {
                    found.unread.extend(self.tree.missing_submodules().into_iter().map(String::from));
                }
                all = v;
                &all
            }
        };
        let mut seen: HashSet<Oid> = HashSet::new();
        for (key, entry) in files {
            if entry.symlink {
                continue;
            }
            if let Source::Blob { oid, .. } = entry.source
                && !seen.insert(oid)
            {
                continue;
            }
            let bytes = match self.read(key, entry) {
                Ok(b) => b,
                Err(why) => {
                    let ext = key.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
                    if CODE.contains(&ext.as_str()) && !self.tree.agent_view {
                        found.unread.push(format!("`{key}` {why}"));
                    }
                    continue;
                }
            };
            if bytes[..bytes.len().min(8000)].contains(&0) {
                continue;
            }
            for m in re.find_iter(&bytes) {
                found.words.insert(String::from_utf8_lossy(m.as_bytes()).into_owned());
            }
            if found.words.len() == words.len() {
                break;
            }
        }
        found
    }
}

fn looks_like_test(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.contains("test") || lower.contains("spec")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitmodules_pairs_names_and_paths() {
        let text =
            "[submodule \"panda\"]\n\tpath = panda\n\turl = ../panda.git\n[submodule \"x\"]\n  path = vendor/x/\n";
        assert_eq!(parse_gitmodules(text), vec![("panda".into(), "panda".into()), ("x".into(), "vendor/x".into())]);
    }

    #[test]
    fn an_lfs_pointer_is_recognised_and_other_text_is_not() {
        let oid = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";
        let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 12345\n");
        assert_eq!(lfs_pointer(pointer.as_bytes()), Some((oid.to_string(), 12345)));
        assert_eq!(lfs_pointer(b"version 1.2\n"), None);
        assert_eq!(lfs_pointer(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n"), None);
    }
}
