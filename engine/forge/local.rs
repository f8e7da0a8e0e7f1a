//! The embedded forge: issues as JSON files under `<root>/.ward/forge/`,
//! charts as `<root>/charts/<n>.md`. Every write is a write to a temporary
//! file and a rename, under an exclusive file lock, so two `ward` processes
//! working on one issue cannot corrupt it.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::{Clock, system_clock};

use super::{
    CiState, CiStatus, Comment, CommentWrite, CommitInfo, Forge, ForgeError, ForgeResult, Issue, IssueNumber,
    IssueState, LabelAction, LabelEvent, LabelSpec, Listed, NewIssue, NewPullRequest, Permission, PullRequest,
    PullState, Reaction, Relabel, RelabelError, Review, StoredChart,
};

/// An issue as stored on disk, with its history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IssueRecord {
    #[serde(flatten)]
    pub issue: Issue,
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub label_events: Vec<LabelEvent>,
    #[serde(default)]
    pub comments: Vec<Comment>,
}

/// A pull request as stored locally, with what reviewers and CI said. The
/// local forge has no reviewers or CI of its own: people (or `ward demo`
/// playing them) record reviews, threads, commits and CI results here.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PullRecord {
    pub pull: Option<PullRequest>,
    #[serde(default)]
    pub reviews: Vec<Review>,
    #[serde(default)]
    pub unresolved_threads: usize,
    #[serde(default)]
    pub commits: Vec<CommitInfo>,
    /// The files the branch adds or changes since it left the base, as of
    /// its last push (removed ones aside).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// The commit the base branch was at after the merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_as: Option<String>,
    /// Who ward asked to review (logins; teams as `team:<slug>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_reviewers: Vec<String>,
    /// Its labels (a research proposal's `ward:proposal`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

/// One `repository_dispatch` the local forge received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dispatch {
    pub issue: IssueNumber,
    /// The label the dispatched stage starts on (absent in older queues).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub at: DateTime<Utc>,
}

pub struct LocalForge {
    root: PathBuf,
    engine_account: super::EngineAccount,
    /// Who acts when the engine is not acting: the person at the keyboard.
    actor: String,
    clock: Clock,
    /// The git repository a merge merges into: the forge's own folder when
    /// it is one (`ward init`, `ward demo`). Without one (scenarios run in
    /// scratch folders) a merge is recorded and moves no branch.
    repository: Option<PathBuf>,
    /// Issue records as last parsed, with the text they were parsed from:
    /// a listing reads every file again (another process may have written
    /// it) but parses only those whose text changed.
    parsed: std::sync::Mutex<std::collections::HashMap<u64, (String, IssueRecord)>>,
}

impl LocalForge {
    pub fn new(root: &Path, engine_account: impl AsRef<str>) -> Self {
        let actor = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(git_user_name)
            .unwrap_or_else(|| "local-user".into());
        let repository = root.join(".git").exists().then(|| root.to_path_buf());
        Self {
            root: root.to_path_buf(),
            engine_account: super::EngineAccount::new(engine_account.as_ref()),
            actor,
            clock: system_clock(),
            repository,
            parsed: Default::default(),
        }
    }

    /// The repository merges go into, when it is not the forge's folder.
    pub fn with_repository(mut self, repository: Option<&Path>) -> Self {
        self.repository = repository.map(Path::to_path_buf);
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The login recorded for writes made outside the engine (`ward admit`).
    pub fn with_actor(mut self, actor: &str) -> Self {
        self.actor = actor.into();
        self
    }

    /// Whether merges land in a git repository (and branches can be read).
    pub fn has_repository(&self) -> bool {
        self.repository.is_some()
    }

    pub fn forge_dir(&self) -> PathBuf {
        self.root.join(".ward").join("forge")
    }

    fn issue_path(&self, n: IssueNumber) -> PathBuf {
        self.forge_dir().join("issues").join(format!("{}.json", n.0))
    }

    pub fn chart_path(&self, n: IssueNumber) -> PathBuf {
        self.root.join("charts").join(format!("{}.md", n.0))
    }

    fn lock(&self, name: &str) -> ForgeResult<File> {
        let dir = self.forge_dir().join("locks");
        fs::create_dir_all(&dir).map_err(|e| ForgeError::io(format!("create {}", dir.display()), e))?;
        let path = dir.join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| ForgeError::io(format!("open lock {}", path.display()), e))?;
        file.lock().map_err(|e| ForgeError::io(format!("lock {}", path.display()), e))?;
        Ok(file)
    }

    /// Records the login as acting `as_engine` or as the local person.
    fn actor(&self, as_engine: bool) -> String {
        if as_engine { self.engine_account.to_string() } else { self.actor.clone() }
    }

    pub fn read_record(&self, n: IssueNumber) -> ForgeResult<IssueRecord> {
        let path = self.issue_path(n);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ForgeError::IssueNotFound(n, self.describe()));
            }
            Err(e) => return Err(ForgeError::io(format!("read {}", path.display()), e)),
        };
        serde_json::from_str(&text).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e))
    }

    fn write_record(&self, rec: &IssueRecord) -> ForgeResult<()> {
        let text = serde_json::to_string_pretty(rec).expect("issue records serialise");
        write_atomic(&self.issue_path(rec.issue.number), text.as_bytes())
    }

    /// Read-modify-write of one issue under its lock.
    fn update<T>(&self, n: IssueNumber, f: impl FnOnce(&mut IssueRecord) -> T) -> ForgeResult<T> {
        let _guard = self.lock(&format!("issue-{}", n.0))?;
        let mut rec = self.read_record(n)?;
        let out = f(&mut rec);
        self.write_record(&rec)?;
        Ok(out)
    }

    /// The numbers of every issue, in order, from the file names alone.
    fn numbers(&self) -> ForgeResult<Vec<u64>> {
        let dir = self.forge_dir().join("issues");
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ForgeError::io(format!("list {}", dir.display()), e)),
        };
        let mut numbers: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// `pick` of every issue record, in number order, skipping `None`:
    /// each file is read, and parsed again only when its text changed.
    fn records_where<T>(&self, mut pick: impl FnMut(&IssueRecord) -> Option<T>) -> ForgeResult<Vec<T>> {
        let mut out = Vec::new();
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        for n in self.numbers()? {
            let path = self.issue_path(IssueNumber(n));
            let text = match fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // removed meanwhile
                Err(e) => return Err(ForgeError::io(format!("read {}", path.display()), e)),
            };
            let fresh = parsed.get(&n).is_some_and(|(seen, _)| *seen == text);
            if !fresh {
                let rec: IssueRecord =
                    serde_json::from_str(&text).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e))?;
                parsed.insert(n, (text, rec));
            }
            if let Some(v) = pick(&parsed[&n].1) {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Creates an issue as the local person (`ward admit`), with the labels
    /// applied by that person.
    pub fn admit(&self, new: NewIssue) -> ForgeResult<Issue> {
        self.create(new, false)
    }

    fn create(&self, new: NewIssue, as_engine: bool) -> ForgeResult<Issue> {
        let _guard = self.lock("numbers")?;
        let next = self.numbers()?.last().copied().unwrap_or(0) + 1;
        let now = (self.clock)();
        let author = self.actor(as_engine);
        let issue = Issue {
            number: IssueNumber(next),
            title: new.title,
            body: new.body,
            author: author.clone(),
            state: IssueState::Open,
            labels: new.labels.clone(),
        };
        let rec = IssueRecord {
            issue: issue.clone(),
            created_at: now,
            label_events: new
                .labels
                .iter()
                .map(|l| LabelEvent { label: l.clone(), action: LabelAction::Added, actor: author.clone(), at: now })
                .collect(),
            comments: Vec::new(),
        };
        self.write_record(&rec)?;
        Ok(issue)
    }

    /// Labels set by a person rather than the engine (tests, `ward lockdown off`).
    pub fn set_labels_as_person(&self, n: IssueNumber, labels: &[String]) -> ForgeResult<()> {
        self.replace_labels(n, labels, false)
    }

    fn replace_labels(&self, n: IssueNumber, labels: &[String], as_engine: bool) -> ForgeResult<()> {
        let now = (self.clock)();
        let actor = self.actor(as_engine);
        self.update(n, |rec| relabel(rec, labels, &actor, now))
    }

    /// Every dispatch received so far, oldest first.
    pub fn dispatches(&self) -> ForgeResult<Vec<Dispatch>> {
        let path = self.forge_dir().join("dispatches.jsonl");
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ForgeError::io(format!("read {}", path.display()), e)),
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e)))
            .collect()
    }

    /// How many entries of the dispatch queue `ward run` has finished (the
    /// queue is append-only, so a count marks them).
    pub fn consumed(&self) -> ForgeResult<usize> {
        let path = self.forge_dir().join("dispatches.consumed");
        match fs::read_to_string(&path) {
            Ok(t) => t.trim().parse().map_err(|e| ForgeError::io(format!("parse {}", path.display()), e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(ForgeError::io(format!("read {}", path.display()), e)),
        }
    }

    /// Marks the first `count` entries of the queue finished.
    pub fn mark_consumed(&self, count: usize) -> ForgeResult<()> {
        write_atomic(&self.forge_dir().join("dispatches.consumed"), format!("{count}\n").as_bytes())
    }

    /// The lock of the one process draining the queue; `None` while another holds it.
    pub fn try_lock_runner(&self) -> ForgeResult<Option<File>> {
        let dir = self.forge_dir().join("locks");
        fs::create_dir_all(&dir).map_err(|e| ForgeError::io(format!("create {}", dir.display()), e))?;
        let path = dir.join("runner.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| ForgeError::io(format!("open lock {}", path.display()), e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(ForgeError::io(format!("lock {}", path.display()), e)),
        }
    }

    /// Sets who holds which permission; without this file, the local person
    /// and the engine are admins and nobody else has access.
    pub fn set_collaborators(&self, perms: &BTreeMap<String, Permission>) -> ForgeResult<()> {
        let text = serde_json::to_string_pretty(perms).expect("permissions serialise");
        write_atomic(&self.forge_dir().join("collaborators.json"), text.as_bytes())
    }

    /// Gives `login` `permission`, keeping everyone else's (the local
    /// person and the engine are admins when nobody was set yet).
    pub fn grant(&self, login: &str, permission: Permission) -> ForgeResult<()> {
        let path = self.forge_dir().join("collaborators.json");
        let mut perms: BTreeMap<String, Permission> = match fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e))?,
            Err(_) => BTreeMap::from([
                (self.actor.clone(), Permission::Admin),
                (self.engine_account.to_string(), Permission::Admin),
            ]),
        };
        perms.insert(login.to_string(), permission);
        self.set_collaborators(&perms)
    }
}

impl LocalForge {
    fn pull_path(&self, number: u64) -> PathBuf {
        self.forge_dir().join("pulls").join(format!("{number}.json"))
    }

    pub fn read_pull(&self, number: u64) -> ForgeResult<PullRecord> {
        let path = self.pull_path(number);
        let text = fs::read_to_string(&path)
            .map_err(|e| ForgeError::io(format!("read pull request {number} at {}", path.display()), e))?;
        serde_json::from_str(&text).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e))
    }

    /// Read-modify-write of one pull request record under its lock.
    pub fn update_pull<T>(&self, number: u64, f: impl FnOnce(&mut PullRecord) -> T) -> ForgeResult<T> {
        let _guard = self.lock(&format!("pull-{number}"))?;
        let mut rec = self.read_pull(number)?;
        let out = f(&mut rec);
        let text = serde_json::to_string_pretty(&rec).expect("pull records serialise");
        write_atomic(&self.pull_path(number), text.as_bytes())?;
        Ok(out)
    }

    fn all_pulls(&self) -> ForgeResult<Vec<PullRecord>> {
        let dir = self.forge_dir().join("pulls");
        let Ok(entries) = fs::read_dir(&dir) else { return Ok(Vec::new()) };
        let mut numbers: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect();
        numbers.sort_unstable();
        numbers.into_iter().map(|n| self.read_pull(n)).collect()
    }

    /// Records the CI result for a commit (what a CI system would report).
    pub fn set_ci_status(&self, sha: &str, status: &CiStatus) -> ForgeResult<()> {
        let text = serde_json::to_string_pretty(status).expect("ci status serialises");
        write_atomic(&self.forge_dir().join("ci").join(format!("{sha}.json")), text.as_bytes())
    }
}

/// Replaces the record's labels with `labels`, with a label event for each
/// one removed or added.
fn relabel(rec: &mut IssueRecord, labels: &[String], actor: &str, at: DateTime<Utc>) {
    let before = std::mem::take(&mut rec.issue.labels);
    let event = |label: &String, action| LabelEvent { label: label.clone(), action, actor: actor.to_string(), at };
    let removed = before.iter().filter(|l| !labels.contains(l)).map(|l| event(l, LabelAction::Removed));
    let added = labels.iter().filter(|l| !before.contains(l)).map(|l| event(l, LabelAction::Added));
    let events: Vec<LabelEvent> = removed.chain(added).collect();
    rec.label_events.extend(events);
    for l in labels {
        if !rec.issue.labels.contains(l) {
            rec.issue.labels.push(l.clone());
        }
    }
}

/// Appends a comment to the record; its id is one past the largest.
fn add_comment(rec: &mut IssueRecord, author: &str, body: &str, at: DateTime<Utc>) -> u64 {
    let id = rec.comments.iter().map(|c| c.id).max().unwrap_or(0) + 1;
    rec.comments.push(Comment { id, author: author.to_string(), body: body.to_string(), at });
    id
}

/// Replaces the body of comment `id`; false when the record has no such comment.
fn edit_comment(rec: &mut IssueRecord, id: u64, body: &str) -> bool {
    rec.comments.iter_mut().find(|c| c.id == id).map(|c| c.body = body.to_string()).is_some()
}

fn no_such_comment(number: IssueNumber, id: u64) -> ForgeError {
    ForgeError::io(format!("edit comment {id} on {number}"), "no such comment")
}

/// Writes `bytes` to `path` through a temporary file in the same folder and
/// a rename, so readers see the old file or the new one, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> ForgeResult<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| ForgeError::io(format!("create {}", dir.display()), e))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut file = File::create(&tmp).map_err(|e| ForgeError::io(format!("create {}", tmp.display()), e))?;
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .map_err(|e| ForgeError::io(format!("write {}", tmp.display()), e))?;
    fs::rename(&tmp, path).map_err(|e| ForgeError::io(format!("rename {} to {}", tmp.display(), path.display()), e))
}

fn content_version(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(10).map(|b| format!("{b:02x}")).collect()
}

#[async_trait]
impl Forge for LocalForge {
    fn describe(&self) -> String {
        format!("the local forge at {}", self.forge_dir().display())
    }

    fn engine_account(&self) -> &super::EngineAccount {
        &self.engine_account
    }

    fn as_local(&self) -> Option<&LocalForge> {
        Some(self)
    }

    async fn issue(&self, number: IssueNumber) -> ForgeResult<Issue> {
        Ok(self.read_record(number)?.issue)
    }

    /// One read of the issue's record (the issue and its label events) and the chart.
    async fn look(&self, number: IssueNumber) -> ForgeResult<super::PatientLook> {
        let rec = self.read_record(number)?;
        let chart = self.read_chart(number).await?;
        Ok(super::PatientLook { issue: rec.issue, chart, label_events: rec.label_events })
    }

    async fn create_issue(&self, new: NewIssue) -> ForgeResult<Issue> {
        self.create(new, true)
    }

    async fn open_issues_with_label(&self, label: &str) -> ForgeResult<Vec<Issue>> {
        Ok(self.open_issues_listed(label).await?.into_iter().map(|l| l.issue).collect())
    }

    async fn open_issues_listed(&self, label: &str) -> ForgeResult<Vec<Listed>> {
        self.records_where(|r| {
            if r.issue.state != IssueState::Open || !r.issue.labels.iter().any(|l| l == label) {
                return None;
            }
            // The latest change the record holds: creation, a label, a comment.
            let changes = r.label_events.iter().map(|e| e.at).chain(r.comments.iter().map(|c| c.at));
            let updated_at = changes.fold(r.created_at, DateTime::max);
            Some(Listed { issue: r.issue.clone(), updated_at: Some(updated_at) })
        })
    }

    async fn all_issues(&self) -> ForgeResult<Vec<Issue>> {
        self.records_where(|r| Some(r.issue.clone()))
    }

    async fn close_issue(&self, number: IssueNumber) -> ForgeResult<()> {
        self.update(number, |rec| rec.issue.state = IssueState::Closed)
    }

    async fn reopen_issue(&self, number: IssueNumber) -> ForgeResult<()> {
        self.update(number, |rec| rec.issue.state = IssueState::Open)
    }

    /// Locally only ward closes issues (nobody else has a hand on the
    /// folder's records), so who closed them is not kept: `None`.
    async fn closed_issues_with_label(
        &self,
        label: &str,
        _since: chrono::DateTime<chrono::Utc>,
    ) -> ForgeResult<Vec<super::ClosedIssue>> {
        self.records_where(|r| {
            let i = &r.issue;
            (i.state == IssueState::Closed && i.labels.iter().any(|l| l == label))
                .then_some(super::ClosedIssue { number: i.number, closed_by: None })
        })
    }

    async fn set_labels(&self, number: IssueNumber, labels: &[String]) -> ForgeResult<()> {
        self.replace_labels(number, labels, true)
    }

    async fn ensure_labels(&self, specs: &[LabelSpec]) -> ForgeResult<()> {
        let _guard = self.lock("labels")?;
        let path = self.forge_dir().join("labels.json");
        let mut known: BTreeMap<String, (String, String)> = match fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e))?,
            Err(_) => BTreeMap::new(),
        };
        let before = known.len();
        for s in specs {
            known.entry(s.name.clone()).or_insert_with(|| (s.color.clone(), s.description.clone()));
        }
        if known.len() != before {
            let text = serde_json::to_string_pretty(&known).expect("labels serialise");
            write_atomic(&path, text.as_bytes())?;
        }
        Ok(())
    }

    async fn label_events(&self, number: IssueNumber) -> ForgeResult<Vec<LabelEvent>> {
        Ok(self.read_record(number)?.label_events)
    }

    async fn comments(&self, number: IssueNumber) -> ForgeResult<Vec<Comment>> {
        Ok(self.read_record(number)?.comments)
    }

    async fn add_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<()> {
        let now = (self.clock)();
        let author = self.engine_account.to_string();
        self.update(number, |rec| {
            let id = rec.comments.iter().map(|c| c.id).max().unwrap_or(0) + 1;
            rec.comments.push(Comment { id, author, body: body.to_string(), at: now });
        })
    }

    async fn permission(&self, login: &str) -> ForgeResult<Permission> {
        let path = self.forge_dir().join("collaborators.json");
        match fs::read_to_string(&path) {
            Ok(t) => {
                let perms: BTreeMap<String, Permission> =
                    serde_json::from_str(&t).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e))?;
                // Logins are case-insensitive, as on GitHub.
                let found = perms.iter().find(|(who, _)| who.eq_ignore_ascii_case(login));
                Ok(found.map_or(Permission::None, |(_, p)| *p))
            }
            Err(_) if login.eq_ignore_ascii_case(&self.actor) || self.engine_account.is(login) => Ok(Permission::Admin),
            Err(_) => Ok(Permission::None),
        }
    }

    async fn acting_user(&self) -> ForgeResult<String> {
        Ok(self.actor.clone())
    }

    async fn read_chart(&self, number: IssueNumber) -> ForgeResult<Option<StoredChart>> {
        let path = self.chart_path(number);
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Some(StoredChart { version: content_version(&text), text })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ForgeError::io(format!("read {}", path.display()), e)),
        }
    }

    async fn write_chart(&self, number: IssueNumber, text: &str, expected: Option<&str>) -> ForgeResult<StoredChart> {
        let _guard = self.lock(&format!("chart-{}", number.0))?;
        let current = self.read_chart(number).await?;
        if current.as_ref().map(|c| c.version.as_str()) != expected {
            return Err(ForgeError::ChartConflict(number));
        }
        write_atomic(&self.chart_path(number), text.as_bytes())?;
        Ok(StoredChart { text: text.to_string(), version: content_version(text) })
    }

    async fn dispatch_stage(&self, number: IssueNumber, label: &str) -> ForgeResult<()> {
        let _guard = self.lock("dispatches")?;
        let path = self.forge_dir().join("dispatches.jsonl");
        let line =
            serde_json::to_string(&Dispatch { issue: number, label: Some(label.to_string()), at: (self.clock)() })
                .expect("dispatch serialises");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| ForgeError::io(format!("open {}", path.display()), e))?;
        writeln!(file, "{line}").map_err(|e| ForgeError::io(format!("append to {}", path.display()), e))
    }

    async fn pull_request_for_branch(&self, branch: &str) -> ForgeResult<Option<PullRequest>> {
        Ok(self
            .all_pulls()?
            .into_iter()
            .filter_map(|r| r.pull)
            .rfind(|p| p.head_branch == branch && p.state != PullState::Closed))
    }

    async fn pull_requests_of_branch(&self, branch: &str) -> ForgeResult<Vec<PullRequest>> {
        Ok(self.all_pulls()?.into_iter().filter_map(|r| r.pull).filter(|p| p.head_branch == branch).collect())
    }

    async fn label_pull_request(&self, pull: u64, label: &str) -> ForgeResult<()> {
        self.update_pull(pull, |rec| {
            if !rec.labels.iter().any(|l| l == label) {
                rec.labels.push(label.to_string());
            }
        })
    }

    async fn open_pull_request(&self, new: NewPullRequest) -> ForgeResult<PullRequest> {
        let _guard = self.lock("pull-numbers")?;
        if let Some(existing) = self.pull_request_for_branch(&new.head_branch).await? {
            return Ok(existing);
        }
        let number = self.all_pulls()?.len() as u64 + 1;
        let pull = PullRequest {
            number,
            title: new.title,
            body: new.body,
            author: self.engine_account.to_string(),
            head_branch: new.head_branch,
            head_sha: String::new(),
            base_branch: new.base_branch,
            state: PullState::Open,
            url: format!("{}#pull-{number}", self.forge_dir().join("pulls").display()),
        };
        let rec = PullRecord { pull: Some(pull.clone()), ..PullRecord::default() };
        let text = serde_json::to_string_pretty(&rec).expect("pull records serialise");
        write_atomic(&self.pull_path(number), text.as_bytes())?;
        Ok(pull)
    }

    async fn reviews(&self, pull: u64) -> ForgeResult<Vec<Review>> {
        Ok(self.read_pull(pull)?.reviews)
    }

    async fn unresolved_review_threads(&self, pull: u64) -> ForgeResult<usize> {
        Ok(self.read_pull(pull)?.unresolved_threads)
    }

    async fn pull_request_commits(&self, pull: u64) -> ForgeResult<Vec<CommitInfo>> {
        Ok(self.read_pull(pull)?.commits)
    }

    async fn pull_request_files(&self, pull: u64) -> ForgeResult<Vec<String>> {
        Ok(self.read_pull(pull)?.files)
    }

    async fn ci_status(&self, sha: &str) -> ForgeResult<CiStatus> {
        let path = self.forge_dir().join("ci").join(format!("{sha}.json"));
        match fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| ForgeError::io(format!("parse {}", path.display()), e)),
            Err(_) => Ok(CiStatus::new(CiState::Missing, Vec::new())),
        }
    }

    fn runs_merge_queue(&self) -> bool {
        self.repository.is_some()
    }

    async fn branch_tip(&self, branch: &str) -> ForgeResult<Option<String>> {
        let action = || format!("read the tip of branch `{branch}` in {}", self.describe());
        let Some(path) = &self.repository else { return Err(ForgeError::io(action(), "no git repository")) };
        let repo = git2::Repository::open(path).map_err(|e| ForgeError::io(action(), e))?;
        match repo.refname_to_id(&format!("refs/heads/{branch}")) {
            Ok(oid) => Ok(Some(oid.to_string())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(ForgeError::io(action(), e)),
        }
    }

    async fn branch_commits(&self, branch: &str, limit: usize) -> ForgeResult<Vec<super::BranchCommit>> {
        let action = || format!("read the history of branch `{branch}` in {}", self.describe());
        let Some(path) = &self.repository else { return Err(ForgeError::io(action(), "no git repository")) };
        let repo = git2::Repository::open(path).map_err(|e| ForgeError::io(action(), e))?;
        let tip = match repo.refname_to_id(&format!("refs/heads/{branch}")) {
            Ok(oid) => oid,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ForgeError::io(action(), e)),
        };
        let mut walk = repo.revwalk().map_err(|e| ForgeError::io(action(), e))?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME).map_err(|e| ForgeError::io(action(), e))?;
        walk.push(tip).map_err(|e| ForgeError::io(action(), e))?;
        let mut out = Vec::new();
        for oid in walk.take(limit) {
            let commit = oid.and_then(|o| repo.find_commit(o)).map_err(|e| ForgeError::io(action(), e))?;
            let at = DateTime::from_timestamp(commit.committer().when().seconds(), 0).unwrap_or_default();
            let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
            out.push(super::BranchCommit { sha: commit.id().to_string(), message, at });
        }
        Ok(out)
    }

    async fn merge_pull_request(&self, pull: u64, head_sha: &str) -> ForgeResult<()> {
        let action = || format!("merge pull request {pull} at {head_sha}");
        let record = self.read_pull(pull)?;
        let Some(p) = record.pull else { return Err(ForgeError::io(action(), "its record holds no pull request")) };
        if p.head_sha != head_sha {
            return Err(ForgeError::HeadMoved { pull, audited: head_sha.to_string() });
        }
        let merged_as = match &self.repository {
            Some(repository) => {
                let who = git2::Signature::new(
                    self.engine_account.as_str(),
                    "engine@ward.invalid",
                    &git_time((self.clock)()),
                )
                .map_err(|e| ForgeError::io(action(), e))?;
                let message = format!("Merge pull request #{pull} from {}\n\n{}", p.head_branch, p.title);
                let req = super::merge::MergeRequest {
                    repository,
                    branch: &p.head_branch,
                    head: head_sha,
                    base: &p.base_branch,
                    message: &message,
                    who: &who,
                };
                let merged = super::merge::merge_into_base(&req).map_err(|e| match e {
                    super::merge::MergeRefusal::Conflict { ref files, .. } => ForgeError::MergeConflict {
                        pull,
                        files: files.clone(),
                        message: format!("could not {}: {e}", action()),
                    },
                    other => ForgeError::io(action(), other),
                })?;
                Some(merged.commit().to_string())
            }
            None => None,
        };
        self.update_pull(pull, |rec| {
            if let Some(p) = rec.pull.as_mut() {
                p.state = PullState::Merged;
            }
            rec.merged_as = merged_as;
        })
    }

    /// The labels and the patient's comment in one write of the issue's
    /// record, as GitHub's one mutation: one durable write, not two. A
    /// comment that cannot be edited (gone) leaves the labels written.
    async fn relabel_and_comment(
        &self,
        number: IssueNumber,
        labels: Option<Relabel<'_>>,
        comment: CommentWrite<'_>,
    ) -> Result<Option<u64>, RelabelError> {
        let now = (self.clock)();
        let actor = self.actor(true);
        let commented = self
            .update(number, |rec| {
                if let Some(labels) = labels {
                    relabel(rec, labels.to, &actor, now);
                }
                match comment {
                    CommentWrite::Create { body } => Ok(Some(add_comment(rec, &actor, body, now))),
                    CommentWrite::Edit { id, body } if edit_comment(rec, id, body) => Ok(None),
                    CommentWrite::Edit { id, .. } => Err(no_such_comment(number, id)),
                }
            })
            .map_err(RelabelError::Labels)?;
        commented.map_err(RelabelError::Comment)
    }

    async fn post_comment(&self, number: IssueNumber, body: &str) -> ForgeResult<u64> {
        let now = (self.clock)();
        let author = self.engine_account.to_string();
        self.update(number, |rec| add_comment(rec, &author, body, now))
    }

    async fn edit_comment(&self, number: IssueNumber, id: u64, body: &str) -> ForgeResult<()> {
        let found = self.update(number, |rec| edit_comment(rec, id, body))?;
        if found { Ok(()) } else { Err(no_such_comment(number, id)) }
    }

    async fn request_reviewers(&self, pull: u64, users: &[String], teams: &[String]) -> ForgeResult<()> {
        let asked: Vec<String> = users.iter().cloned().chain(teams.iter().map(|t| format!("team:{t}"))).collect();
        self.update_pull(pull, |rec| {
            for who in asked {
                if !rec.requested_reviewers.contains(&who) {
                    rec.requested_reviewers.push(who);
                }
            }
        })
    }

    async fn react(&self, number: IssueNumber, id: u64, reaction: Reaction) -> ForgeResult<()> {
        let action = format!("react to comment {id} on {number}");
        if !self.read_record(number)?.comments.iter().any(|c| c.id == id) {
            return Err(ForgeError::io(action, "no such comment"));
        }
        // One line per reaction beside the issues: `reactions.jsonl`.
        let path = self.forge_dir().join("reactions.jsonl");
        let line = serde_json::json!({ "issue": number.0, "comment": id, "content": reaction.content() });
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| ForgeError::io(format!("{action} ({})", path.display()), e))?;
        writeln!(file, "{line}").map_err(|e| ForgeError::io(format!("{action} ({})", path.display()), e))
    }
}

/// git's `user.name`, when `$USER` names nobody.
fn git_user_name() -> Option<String> {
    git2::Config::open_default().ok()?.get_string("user.name").ok().filter(|n| !n.trim().is_empty())
}

/// What only the local forge does: a treatment's commit becomes its pull
/// request's head (the push GitHub would see), the local CI reports on it,
/// and a person reviews it from the command line (`ward review`).
impl LocalForge {
    /// Opens the pull request of `new.head_branch`, or updates it, at the
    /// branch's tip in the forge's repository, with the commits the branch
    /// has that `new.base_branch` lacks. `None` when the forge has no
    /// repository (scenarios in scratch folders record their own).
    pub async fn record_push(&self, new: NewPullRequest) -> ForgeResult<Option<PullRequest>> {
        let Some(repository) = &self.repository else { return Ok(None) };
        let action = || format!("record `{}` as a pull request on {}", new.head_branch, self.describe());
        let (head, commits) =
            branch_commits(repository, &new.head_branch, &new.base_branch).map_err(|e| ForgeError::io(action(), e))?;
        let files = branch_files(repository, &head, &new.base_branch).map_err(|e| ForgeError::io(action(), e))?;
        let pull = self.open_pull_request(new).await?;
        self.update_pull(pull.number, |rec| {
            if let Some(p) = rec.pull.as_mut() {
                p.head_sha = head.clone();
            }
            rec.commits = commits;
            rec.files = files;
            rec.pull.clone()
        })
    }

    /// Records `review` on pull request `pull`.
    pub fn record_review(&self, pull: u64, review: Review) -> ForgeResult<()> {
        self.update_pull(pull, |rec| rec.reviews.push(review))
    }
}

/// The files `head` adds or changes since it left `base` (their merge
/// base), as GitHub lists a pull request's: removed files aside, a rename
/// by its new path.
fn branch_files(repository: &Path, head: &str, base: &str) -> Result<Vec<String>, git2::Error> {
    let repo = git2::Repository::open(repository)?;
    let head = repo.revparse_single(head)?.peel_to_commit()?;
    let from = match repo.find_branch(base, git2::BranchType::Local) {
        Ok(b) => Some(repo.find_commit(repo.merge_base(b.get().peel_to_commit()?.id(), head.id())?)?.tree()?),
        Err(_) => None,
    };
    let mut opts = git2::DiffOptions::new();
    let mut diff = repo.diff_tree_to_tree(from.as_ref(), Some(&head.tree()?), Some(&mut opts))?;
    diff.find_similar(None)?;
    Ok(diff
        .deltas()
        .filter(|d| d.status() != git2::Delta::Deleted)
        .filter_map(|d| d.new_file().path().map(|p| p.to_string_lossy().replace('\\', "/")))
        .collect())
}

/// The tip of `branch` and its commits since `base`, oldest first.
fn branch_commits(repository: &Path, branch: &str, base: &str) -> Result<(String, Vec<CommitInfo>), git2::Error> {
    let repo = git2::Repository::open(repository)?;
    let tip = repo.find_branch(branch, git2::BranchType::Local)?.get().peel_to_commit()?.id();
    let mut walk = repo.revwalk()?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)?;
    walk.push(tip)?;
    if let Ok(base) = repo.find_branch(base, git2::BranchType::Local) {
        walk.hide(base.get().peel_to_commit()?.id())?;
    }
    let mut commits = Vec::new();
    for id in walk {
        let commit = repo.find_commit(id?)?;
        commits.push(CommitInfo {
            sha: commit.id().to_string(),
            message: commit.message().unwrap_or_default().to_string(),
            parent_count: commit.parent_count(),
        });
    }
    Ok((tip.to_string(), commits))
}

fn git_time(at: DateTime<Utc>) -> git2::Time {
    git2::Time::new(at.timestamp(), 0)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn concurrent_label_writes_keep_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let forge = Arc::new(LocalForge::new(dir.path(), "ward-bot"));
        let issue =
            forge.admit(NewIssue { title: "t".into(), body: "b".into(), labels: vec!["ward:admit".into()] }).unwrap();
        let mut handles = Vec::new();
        for i in 0..8 {
            let forge = forge.clone();
            handles.push(std::thread::spawn(move || {
                for j in 0..10 {
                    forge.update(issue.number, |r| r.issue.labels.push(format!("x{i}-{j}"))).unwrap();
                }
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        let rec = forge.read_record(issue.number).unwrap();
        assert_eq!(rec.issue.labels.len(), 81, "no write was lost");
    }

    /// The labels and the comment land in one record write; a comment
    /// that is gone fails alone, with the labels moved.
    #[tokio::test]
    async fn a_move_writes_its_labels_and_comment_together() {
        let dir = tempfile::tempdir().unwrap();
        let forge = LocalForge::new(dir.path(), "ward-bot");
        let issue =
            forge.admit(NewIssue { title: "t".into(), body: "b".into(), labels: vec!["ward:admit".into()] }).unwrap();
        let n = issue.number;
        let from = vec!["ward:admit".to_string()];
        let to = vec!["ward:diagnose".to_string()];
        let moved = forge.relabel_and_comment(
            n,
            Some(Relabel { from: &from, to: &to }),
            CommentWrite::Create { body: "hello" },
        );
        let id = moved.await.unwrap().expect("a created comment's id");
        let rec = forge.read_record(n).unwrap();
        assert_eq!(rec.issue.labels, to);
        let events: Vec<_> = rec.label_events.iter().skip(1).map(|e| (e.label.as_str(), e.action)).collect();
        assert_eq!(events, [("ward:admit", LabelAction::Removed), ("ward:diagnose", LabelAction::Added)]);
        assert_eq!((rec.comments.len(), rec.comments[0].id, rec.comments[0].author.as_str()), (1, id, "ward-bot"));

        let back = forge.relabel_and_comment(
            n,
            Some(Relabel { from: &to, to: &from }),
            CommentWrite::Edit { id: 99, body: "x" },
        );
        assert!(matches!(back.await, Err(RelabelError::Comment(_))));
        let rec = forge.read_record(n).unwrap();
        assert_eq!((rec.issue.labels, rec.comments[0].body.as_str()), (from, "hello"));
    }

    #[tokio::test]
    async fn chart_writes_are_compare_and_swap() {
        let dir = tempfile::tempdir().unwrap();
        let forge = LocalForge::new(dir.path(), "ward-bot");
        let n = IssueNumber(1);
        let first = forge.write_chart(n, "one", None).await.unwrap();
        assert!(matches!(forge.write_chart(n, "two", None).await, Err(ForgeError::ChartConflict(_))));
        forge.write_chart(n, "two", Some(&first.version)).await.unwrap();
        assert!(matches!(forge.write_chart(n, "three", Some(&first.version)).await, Err(ForgeError::ChartConflict(_))));
    }
}
