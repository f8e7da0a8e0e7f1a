//! The precedent log (`precedents/log.yaml`): decisions the chiefs made, so
//! agents follow them instead of asking again. Only humans write it; the
//! engine parses it and ranks entries against a patient with BM25 over
//! question, decision and tags.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Precedent {
    /// `P-0001`, sequential.
    pub id: String,
    /// `YYYY-MM-DD`.
    pub date: String,
    /// The human who decided.
    pub chief: String,
    pub tags: Vec<String>,
    pub question: String,
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PrecedentError {
    #[error("cannot read the precedent log {file}: {message}")]
    Read { file: PathBuf, message: String },
    #[error("cannot read the precedent log {file} at revision `{rev}`: {message}")]
    Revision { file: PathBuf, rev: String, message: String },
    #[error("{file}:{line}:{column}: {message}")]
    Syntax { file: PathBuf, line: usize, column: usize, message: String },
    #[error("{file}: entry {index} ({id}): {message}")]
    Entry { file: PathBuf, index: usize, id: String, message: String },
}

/// A ranked match.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Match<'a> {
    #[serde(flatten)]
    pub entry: &'a Precedent,
    pub score: f64,
}

/// The parsed log with its search index.
#[derive(Debug, Clone, Default)]
pub struct PrecedentLog {
    pub entries: Vec<Precedent>,
    /// Built on the first search: a run that only needs the entries (the
    /// record job, a guard that stops, a check of cited ids) never pays for
    /// indexing a large log.
    index: OnceLock<Bm25>,
}

impl PrecedentLog {
    /// Reads and checks `file`. A missing file is an empty log.
    pub fn load(file: &Path) -> Result<Self, PrecedentError> {
        match std::fs::read_to_string(file) {
            Ok(text) => Self::parse(&text, file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(PrecedentError::Read { file: file.into(), message: e.to_string() }),
        }
    }

    pub fn parse(text: &str, file: &Path) -> Result<Self, PrecedentError> {
        let entries: Vec<Precedent> = if text.trim().is_empty() {
            Vec::new()
        } else {
            serde_yaml::from_str::<Option<Vec<Precedent>>>(text)
                .map_err(|e| {
                    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
                    PrecedentError::Syntax {
                        file: file.into(),
                        line,
                        column,
                        message: e.to_string().split(" at line ").next().unwrap_or_default().to_string(),
                    }
                })?
                .unwrap_or_default()
        };
        for (i, p) in entries.iter().enumerate() {
            let err =
                |message: String| PrecedentError::Entry { file: file.into(), index: i + 1, id: p.id.clone(), message };
            if let Some(message) = entry_problem(p, i) {
                return Err(err(message));
            }
        }
        Ok(Self { entries, index: OnceLock::new() })
    }

    pub fn get(&self, id: &str) -> Option<&Precedent> {
        self.entries.iter().find(|p| p.id == id)
    }

    /// The `top` entries that best match `text`, best first; only entries
    /// that share at least one term.
    pub fn search(&self, text: &str, top: usize) -> Vec<Match<'_>> {
        let index = self.index.get_or_init(|| Bm25::build(self.entries.iter().map(document_text)));
        let mut scored: Vec<Match<'_>> = index
            .scores(text)
            .into_iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(i, score)| Match { entry: &self.entries[i], score })
            .collect();
        scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.entry.id.cmp(&b.entry.id)));
        scored.truncate(top);
        scored
    }
}

/// What is wrong with entry `i` on its own (format, sequence), if anything.
pub fn entry_problem(p: &Precedent, i: usize) -> Option<String> {
    let expected = format!("P-{:04}", i + 1);
    if !is_precedent_id(&p.id) {
        return Some(format!("id `{}` must look like `P-0001`", p.id));
    }
    if p.id != expected {
        return Some(format!("id `{}` is out of sequence; entry {} must be `{expected}`", p.id, i + 1));
    }
    if chrono::NaiveDate::parse_from_str(&p.date, "%Y-%m-%d").is_err() {
        return Some(format!("date `{}` is not a date like 2026-03-01", p.date));
    }
    for (field, value) in [("chief", &p.chief), ("question", &p.question), ("decision", &p.decision)] {
        if value.trim().is_empty() {
            return Some(format!("`{field}` is empty"));
        }
    }
    None
}

/// `P-` and a number of at least four digits, zero-padded to four and no
/// further (`P-0001`, `P-9999`, `P-10000`), so the log can outgrow 9,999.
pub fn is_precedent_id(id: &str) -> bool {
    let Some(digits) = id.strip_prefix("P-") else { return false };
    digits.len() >= 4
        && digits.chars().all(|c| c.is_ascii_digit())
        && digits.parse::<u64>().is_ok_and(|n| n >= 1 && format!("{n:04}") == digits)
}

fn document_text(p: &Precedent) -> String {
    // Tags count twice: a chief chose them on purpose.
    let tags = p.tags.join(" ");
    format!("{} {} {tags} {tags}", p.question, p.decision)
}

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "has", "have", "how", "if", "in",
    "is", "it", "its", "of", "on", "or", "should", "that", "the", "this", "to", "was", "we", "what", "when", "which",
    "with", "without", "not", "no", "can", "may", "must", "our", "us",
];

pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
}

/// Okapi BM25 (k1 = 1.2, b = 0.75) over a fixed set of documents.
#[derive(Debug, Clone, Default)]
struct Bm25 {
    /// term -> (document, term frequency)
    postings: HashMap<String, Vec<(usize, u32)>>,
    lengths: Vec<u32>,
    average: f64,
}

impl Bm25 {
    fn build(docs: impl Iterator<Item = String>) -> Self {
        let mut postings: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let mut lengths = Vec::new();
        for (d, text) in docs.enumerate() {
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut len = 0;
            for t in tokens(&text) {
                *tf.entry(t).or_default() += 1;
                len += 1;
            }
            lengths.push(len);
            for (t, f) in tf {
                postings.entry(t).or_default().push((d, f));
            }
        }
        let average = if lengths.is_empty() { 0.0 } else { lengths.iter().sum::<u32>() as f64 / lengths.len() as f64 };
        Self { postings, lengths, average }
    }

    fn scores(&self, query: &str) -> Vec<(usize, f64)> {
        let (k1, b) = (1.2, 0.75);
        let n = self.lengths.len() as f64;
        let mut terms: Vec<String> = tokens(query).collect();
        terms.sort();
        terms.dedup();
        let mut acc: HashMap<usize, f64> = HashMap::new();
        for t in &terms {
            let Some(list) = self.postings.get(t) else { continue };
            let df = list.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(d, f) in list {
                let f = f as f64;
                let norm = 1.0 - b + b * self.lengths[d] as f64 / self.average.max(1.0);
                *acc.entry(d).or_default() += idf * f * (k1 + 1.0) / (f + k1 * norm);
            }
        }
        acc.into_iter().collect()
    }
}

/// One problem `ward precedents check` found, naming the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogProblem {
    /// 1-based line in the current log (of the entry, or where it was).
    pub line: usize,
    /// `entry 3 (P-0003)`, or empty for the whole file.
    pub entry: String,
    pub message: String,
}

impl LogProblem {
    /// `file:line: entry 3 (P-0003): message`, the way compilers point.
    pub fn in_file(&self, file: &Path) -> String {
        match self.entry.as_str() {
            "" => format!("{}:{}: {}", file.display(), self.line, self.message),
            entry => format!("{}:{}: {entry}: {}", file.display(), self.line, self.message),
        }
    }
}

impl std::fmt::Display for LogProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.entry.is_empty() {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            write!(f, "line {}: {}: {}", self.line, self.entry, self.message)
        }
    }
}

/// One entry as it stands in the file: its lines from the `- ` that opens
/// it through its last line that is neither blank nor a comment at column
/// 0 (those sit between entries and belong to none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEntry<'a> {
    pub text: &'a str,
    /// 1-based line of the opening `- `.
    pub line: usize,
}

/// Splits a block-style YAML list into its entries' raw text.
pub fn raw_entries(text: &str) -> Vec<RawEntry<'_>> {
    let mut starts: Vec<(usize, usize)> = Vec::new(); // (byte offset, line)
    let mut offset = 0;
    let mut line_ends: Vec<(usize, usize, bool)> = Vec::new(); // (start, end without newline, blank-or-col0-comment)
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let content = line.trim_end_matches(['\n', '\r']);
        if (content == "-" || content.starts_with("- ")) && !content.starts_with("---") {
            starts.push((offset, i + 1));
        }
        let filler = content.trim().is_empty() || content.starts_with('#');
        line_ends.push((offset, offset + content.len(), filler));
        offset += line.len();
    }
    let mut out = Vec::with_capacity(starts.len());
    for (k, &(start, line)) in starts.iter().enumerate() {
        let limit = starts.get(k + 1).map_or(text.len(), |s| s.0);
        let end = line_ends
            .iter()
            .filter(|(s, _, filler)| *s >= start && *s < limit && !*filler)
            .map(|(_, e, _)| *e)
            .next_back()
            .unwrap_or(start);
        out.push(RawEntry { text: &text[start..end], line });
    }
    out
}

fn id_of(raw: &str) -> Option<String> {
    raw.lines().find_map(|l| {
        let rest = l.trim_start_matches(['-', ' ']).strip_prefix("id:")?;
        Some(rest.trim().trim_matches(['"', '\'']).to_string()).filter(|id| !id.is_empty())
    })
}

fn describe(index: usize, raw: &str) -> String {
    match id_of(raw) {
        Some(id) => format!("entry {index} ({id})"),
        None => format!("entry {index}"),
    }
}

/// The first line where two entries differ, for the message.
fn first_difference(old: &str, new: &str) -> String {
    let (mut a, mut b) = (old.lines(), new.lines());
    for n in 1.. {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (Some(x), Some(y)) => return format!("its line {n} was `{x}` and is now `{y}`"),
            (Some(x), None) => return format!("its line {n} `{x}` was removed"),
            (None, Some(y)) => return format!("its line {n} `{y}` was added"),
            (None, None) => break,
        }
    }
    "its line endings or trailing spaces changed".to_string()
}

/// Checks the log `current` (the text of `file` now) on its own and, given
/// the text at a base revision, as an append-only log: every earlier entry
/// must be byte for byte where it was. Returns every problem, each naming
/// its entry; empty means the log passes.
pub fn check_log(current: &str, base: Option<&str>, today: chrono::NaiveDate, engine_account: &str) -> Vec<LogProblem> {
    let mut problems = Vec::new();
    let entries = raw_entries(current);
    match serde_yaml::from_str::<Option<Vec<serde_yaml::Value>>>(current) {
        Err(e) => {
            let line = e.location().map_or(0, |l| l.line());
            let message = e.to_string().split(" at line ").next().unwrap_or_default().to_string();
            problems.push(LogProblem { line, entry: String::new(), message: format!("not valid YAML: {message}") });
            return problems;
        }
        Ok(values) => {
            let n = values.map_or(0, |v| v.len());
            if n != entries.len() {
                problems.push(LogProblem {
                    line: 1,
                    entry: String::new(),
                    message: format!(
                        "the log holds {n} entries but {} start with `- ` at column 0; write it as a block list, \
                         one `- id: P-0001` per entry",
                        entries.len()
                    ),
                });
                return problems;
            }
        }
    }

    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw) in entries.iter().enumerate() {
        let index = i + 1;
        let mut push = |message: String| {
            problems.push(LogProblem { line: raw.line, entry: describe(index, raw.text), message });
        };
        let entry = match serde_yaml::from_str::<Vec<Precedent>>(raw.text) {
            Ok(mut one) if one.len() == 1 => one.remove(0),
            Ok(_) => {
                push("is not a single entry".into());
                continue;
            }
            Err(e) => {
                push(format!(
                    "is malformed: {}",
                    e.to_string()
                        .split(" at line ")
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches(".[0]: ")
                        .trim_start_matches("[0]: ")
                ));
                continue;
            }
        };
        if let Some(&earlier) = seen.get(&entry.id) {
            push(format!("id `{}` is duplicated (entry {earlier} has it too)", entry.id));
        } else if let Some(message) = entry_problem(&entry, i) {
            push(message);
        }
        seen.entry(entry.id.clone()).or_insert(index);
        if let Ok(date) = chrono::NaiveDate::parse_from_str(&entry.date, "%Y-%m-%d")
            && date > today
        {
            push(format!("date {} is in the future (today is {today})", entry.date));
        }
        if entry.chief.trim().eq_ignore_ascii_case(engine_account) || entry.chief.trim().ends_with("[bot]") {
            push(format!(
                "chief `{}` is the engine's own account or a bot; only humans decide precedents",
                entry.chief.trim()
            ));
        }
        if entry.tags.is_empty() || entry.tags.iter().any(|t| t.trim().is_empty()) {
            push("`tags` must list at least one non-empty tag".into());
        }
    }

    let Some(base) = base else { return problems };
    let before = raw_entries(base);
    for (i, old) in before.iter().enumerate() {
        let index = i + 1;
        let name = describe(index, old.text);
        if entries.get(i).is_some_and(|now| now.text == old.text) {
            continue;
        }
        let (line, message) = match entries.iter().position(|now| now.text == old.text) {
            Some(j) => {
                (entries[j].line, format!("moved from position {index} to {}; entries are never reordered", j + 1))
            }
            None => match entries.get(i) {
                Some(now) if before.iter().any(|b| b.text == now.text) => {
                    (now.line, "vanished; earlier entries are never removed".to_string())
                }
                Some(now) => (
                    now.line,
                    format!(
                        "changed since the base revision ({}); earlier entries are never edited, add a new one",
                        first_difference(old.text, now.text)
                    ),
                ),
                None => (current.lines().count().max(1), "vanished; earlier entries are never removed".to_string()),
            },
        };
        problems.push(LogProblem { line, entry: name, message });
    }
    problems
}

/// The text of `log` (relative to the repository root) at revision `rev`
/// of the repository that holds `root`; `None` when the file did not exist
/// there.
pub fn read_at_revision(root: &Path, rev: &str, log: &Path) -> Result<Option<String>, PrecedentError> {
    let fail = |message: String| PrecedentError::Revision { file: log.into(), rev: rev.into(), message };
    let repo = git2::Repository::discover(root)
        .map_err(|e| fail(format!("no git repository at {}: {}", root.display(), e.message())))?;
    let object = repo.revparse_single(rev).map_err(|e| {
        fail(format!("the revision does not exist ({}); fetch it first, e.g. `git fetch origin main`", e.message()))
    })?;
    let tree =
        object.peel_to_tree().map_err(|e| fail(format!("it does not name a commit or tree ({})", e.message())))?;
    let entry = match tree.get_path(log) {
        Ok(entry) => entry,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(fail(e.message().to_string())),
    };
    let blob = entry
        .to_object(&repo)
        .and_then(|o| o.peel_to_blob())
        .map_err(|e| fail(format!("it is not a file ({})", e.message())))?;
    let text = std::str::from_utf8(blob.content()).map_err(|e| fail(format!("it is not UTF-8 ({e})")))?;
    Ok(Some(text.to_string()))
}

/// Who the engine is in git history: the account it acts as on the forge,
/// and the name and email ward commits a treatment's leftovers under (the
/// workspace's `CommitIdentity`). A commit by either is the engine's.
#[derive(Debug, Clone, Copy)]
pub struct EngineIdentity<'a> {
    pub account: &'a str,
    pub commit_name: &'a str,
    pub commit_email: &'a str,
}

impl<'a> EngineIdentity<'a> {
    /// The forge account alone (no commit identity).
    pub fn account(account: &'a str) -> Self {
        Self { account, commit_name: "", commit_email: "" }
    }

    fn is(&self, sig: &git2::Signature<'_>) -> bool {
        let name = sig.name().unwrap_or_default().trim();
        let email = sig.email().unwrap_or_default().trim().to_lowercase();
        let login = self.account.to_lowercase();
        let by_account = name.eq_ignore_ascii_case(self.account)
            || email.split('@').next().is_some_and(|local| local == login || local.ends_with(&format!("+{login}")));
        let by_commit_identity = (!self.commit_name.is_empty() && name.eq_ignore_ascii_case(self.commit_name))
            || (!self.commit_email.is_empty() && email == self.commit_email.to_lowercase());
        by_account || by_commit_identity
    }
}

/// Commits between `base` and `HEAD` that changed `log` as the engine
/// (author or committer, by the account's name or the login in a GitHub
/// no-reply address, or by ward's commit identity): only people write
/// precedents, and a treatment's change is committed under ward's identity.
pub fn engine_commits(
    root: &Path,
    base: &str,
    log: &Path,
    engine: &EngineIdentity<'_>,
) -> Result<Vec<LogProblem>, PrecedentError> {
    let fail = |message: String| PrecedentError::Revision { file: log.into(), rev: base.into(), message };
    let git = |e: git2::Error| fail(e.message().to_string());
    let repo = git2::Repository::discover(root).map_err(git)?;
    let base_id = repo.revparse_single(base).and_then(|o| o.peel_to_commit()).map_err(git)?.id();
    let mut walk = repo.revwalk().map_err(git)?;
    if walk.push_head().is_err() {
        return Ok(Vec::new()); // no commits yet: nothing was written by anyone
    }
    walk.hide(base_id).map_err(git)?;
    let blob_at = |commit: &git2::Commit<'_>| commit.tree().ok()?.get_path(log).ok().map(|e| e.id());
    let mut problems = Vec::new();
    for id in walk {
        let commit = repo.find_commit(id.map_err(git)?).map_err(git)?;
        let now = blob_at(&commit);
        let changed = match commit.parent_count() {
            0 => now.is_some(),
            _ => commit.parents().all(|p| blob_at(&p) != now),
        };
        if changed && (engine.is(&commit.author()) || engine.is(&commit.committer())) {
            let sha = commit.id().to_string();
            problems.push(LogProblem {
                line: 1,
                entry: format!("commit {}", &sha[..12]),
                message: format!(
                    "changed the log as the engine (author `{} <{}>`, committer `{} <{}>`; the engine is the \
                     account `{}` and ward's commit identity `{} <{}>`); only people write precedents",
                    commit.author().name().unwrap_or_default(),
                    commit.author().email().unwrap_or_default(),
                    commit.committer().name().unwrap_or_default(),
                    commit.committer().email().unwrap_or_default(),
                    engine.account,
                    engine.commit_name,
                    engine.commit_email
                ),
            });
        }
    }
    Ok(problems)
}

/// `ward precedents check [--base REV]`: the log file under `root` checked
/// on its own and, with `base`, against the log at that revision.
pub fn check_against(
    root: &Path,
    log: &Path,
    base: Option<&str>,
    today: chrono::NaiveDate,
    engine: &EngineIdentity<'_>,
) -> Result<Vec<LogProblem>, PrecedentError> {
    let file = root.join(log);
    let current = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(PrecedentError::Read { file, message: e.to_string() }),
    };
    let before = match base {
        Some(rev) => read_at_revision(root, rev, log)?,
        None => None,
    };
    let mut problems = check_log(&current, before.as_deref(), today, engine.account);
    if let Some(rev) = base {
        problems.extend(engine_commits(root, rev, log, engine)?);
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "
- id: P-0001
  date: 2026-01-10
  chief: maria
  tags: [tests, flaky]
  question: A test fails one run in twenty. May the fellow delete it?
  decision: Never delete a flaky test. Quarantine it with an issue that names the owner.
- id: P-0002
  date: 2026-02-03
  chief: tom
  tags: [api, compatibility]
  question: Can a public function be renamed in a patch release?
  decision: Public API renames keep the old name deprecated for one minor release.
";

    #[test]
    fn ranks_the_matching_precedent_first() {
        let log = PrecedentLog::parse(LOG, Path::new("log.yaml")).unwrap();
        let found = log.search("the login test is flaky, should I delete the test?", 3);
        assert_eq!(found[0].entry.id, "P-0001");
        assert!(found.iter().all(|m| m.entry.id != "P-0002"), "no shared term, no match");
        assert!(log.search("nothing in common here", 3).is_empty());
    }

    #[test]
    fn out_of_sequence_ids_name_the_entry() {
        let text = LOG.replace("P-0002", "P-0003");
        let err = PrecedentLog::parse(&text, Path::new("log.yaml")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "log.yaml: entry 2 (P-0003): id `P-0003` is out of sequence; entry 2 must be `P-0002`"
        );
    }

    mod history {
        //! `ward precedents check` against real repositories built with git2:
        //! fixed author and dates, no user or system git configuration.
        use super::super::*;
        use chrono::NaiveDate;
        use git2::{Repository, Signature, Time};

        const V1: &str = "# Decisions of the chiefs. Append only.
- id: P-0001
  date: 2026-01-10
  chief: maria
  tags: [tests, flaky]
  question: A test fails one run in twenty. May the fellow delete it?
  decision: Never delete a flaky test. Quarantine it with an issue that names the owner.

- id: P-0002
  date: 2026-02-03
  chief: tom
  tags: [api, compatibility]
  question: Can a public function be renamed in a patch release?
  decision: Public API renames keep the old name deprecated for one minor release.
";

        const P3: &str = "
- id: P-0003
  date: 2026-03-01
  chief: maria
  tags: [deps]
  question: May a fellow add a dependency?
  decision: Only with a plan that names why the standard library will not do.
";

        fn today() -> NaiveDate {
            NaiveDate::from_ymd_opt(2026, 11, 29).unwrap()
        }

        /// The engine as `ward precedents check` knows it: the account and
        /// ward's default commit identity.
        fn engine() -> EngineIdentity<'static> {
            EngineIdentity {
                account: "github-actions[bot]",
                commit_name: "ward",
                commit_email: "ward@users.noreply.github.com",
            }
        }

        #[test]
        fn an_append_committed_under_wards_commit_identity_is_the_engines() {
            let (dir, repo) = repo_with(V1);
            let base = repo.head().unwrap().target().unwrap().to_string();
            let root = repo.workdir().unwrap().to_path_buf();
            std::fs::write(root.join("precedents/log.yaml"), format!("{V1}{P3}")).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("precedents/log.yaml")).unwrap();
            index.write().unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            // What a treatment's leftovers are committed as (workspace::CommitIdentity).
            let ward = Signature::new("ward", "ward@users.noreply.github.com", &Time::new(1_767_398_400, 0)).unwrap();
            let parent = repo.head().unwrap().peel_to_commit().unwrap();
            repo.commit(Some("HEAD"), &ward, &ward, "ward: issue #4 stage treat run r1", &tree, &[&parent]).unwrap();
            let log = Path::new("precedents/log.yaml");
            let problems = check_against(dir.path(), log, Some(&base), today(), &engine()).unwrap();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].message.contains("author `ward <ward@users.noreply.github.com>`"), "{problems:?}");
            // Knowing the account alone, as before, let it through.
            let account_only = EngineIdentity::account("github-actions[bot]");
            assert!(check_against(dir.path(), log, Some(&base), today(), &account_only).unwrap().is_empty());
        }

        /// A repository whose `main` holds `V1` in one commit at a fixed time.
        fn repo_with(text: &str) -> (tempfile::TempDir, Repository) {
            let dir = tempfile::tempdir().unwrap();
            let repo = Repository::init(dir.path()).unwrap();
            commit(&repo, text, "Add the first precedents", 1_767_225_600);
            (dir, repo)
        }

        fn commit(repo: &Repository, text: &str, message: &str, when: i64) -> git2::Oid {
            let root = repo.workdir().unwrap();
            std::fs::create_dir_all(root.join("precedents")).unwrap();
            std::fs::write(root.join("precedents/log.yaml"), text).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("precedents/log.yaml")).unwrap();
            index.write().unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let sig = Signature::new("Maria Chief", "maria@example.com", &Time::new(when, 0)).unwrap();
            let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
            let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
            repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents).unwrap()
        }

        fn check_now(dir: &Path, now: &str, base: &str) -> Vec<String> {
            std::fs::write(dir.join("precedents/log.yaml"), now).unwrap();
            check_against(dir, Path::new("precedents/log.yaml"), Some(base), today(), &engine())
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect()
        }

        #[test]
        fn appending_an_entry_passes() {
            let (dir, _repo) = repo_with(V1);
            assert_eq!(check_now(dir.path(), &format!("{V1}{P3}"), "HEAD"), Vec::<String>::new());
        }

        #[test]
        fn a_one_character_change_to_an_old_entry_is_named() {
            let (dir, _repo) = repo_with(V1);
            let edited = format!("{}{P3}", V1.replace("chief: tom", "chief: tim"));
            assert_eq!(
                check_now(dir.path(), &edited, "HEAD"),
                vec![
                    "line 9: entry 2 (P-0002): changed since the base revision (its line 3 was `  chief: tom` and is \
                     now `  chief: tim`); earlier entries are never edited, add a new one"
                ]
            );
            // Even a trailing space counts.
            let spaced = V1.replace("release.\n", "release. \n");
            let problems = check_now(dir.path(), &spaced, "HEAD");
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].contains("entry 2 (P-0002): changed"), "{problems:?}");
        }

        #[test]
        fn a_reordering_is_named() {
            let (dir, _repo) = repo_with(V1);
            let entries = raw_entries(V1);
            let swapped = format!("{}\n\n{}\n", entries[1].text, entries[0].text);
            let problems = check_now(dir.path(), &swapped, "HEAD");
            assert!(
                problems.contains(
                    &"line 1: entry 1 (P-0002): id `P-0002` is out of sequence; entry 1 must be `P-0001`".to_string()
                ),
                "{problems:?}"
            );
            assert!(
                problems.contains(
                    &"line 8: entry 1 (P-0001): moved from position 1 to 2; entries are never reordered".to_string()
                ),
                "{problems:?}"
            );
            assert!(
                problems.contains(
                    &"line 1: entry 2 (P-0002): moved from position 2 to 1; entries are never reordered".to_string()
                ),
                "{problems:?}"
            );
        }

        #[test]
        fn a_vanished_entry_is_named() {
            let (dir, repo) = repo_with(V1);
            commit(&repo, &format!("{V1}{P3}"), "Add P-0003", 1_767_312_000);
            let all = format!("{V1}{P3}");
            let entries = raw_entries(&all);
            let without_second = format!("{}\n\n{}\n", entries[0].text, entries[2].text);
            let problems = check_now(dir.path(), &without_second, "HEAD");
            assert!(problems.iter().any(|p| p.contains("entry 2 (P-0002): vanished")), "{problems:?}");
            let truncated = format!("{}\n", entries[0].text);
            let problems = check_now(dir.path(), &truncated, "HEAD~0");
            assert!(problems.iter().any(|p| p.contains("entry 3 (P-0003): vanished")), "{problems:?}");
        }

        #[test]
        fn new_entries_are_checked_one_by_one() {
            let (dir, _repo) = repo_with(V1);
            let cases = [
                (P3.replace("P-0003", "P-0002"), "id `P-0002` is duplicated (entry 2 has it too)"),
                (P3.replace("P-0003", "P-0004"), "id `P-0004` is out of sequence; entry 3 must be `P-0003`"),
                (P3.replace("  tags: [deps]\n", ""), "is malformed: missing field `tags`"),
                (P3.replace("2026-03-01", "2026-13-01"), "date `2026-13-01` is not a date like 2026-03-01"),
                (P3.replace("2026-03-01", "2026-11-30"), "date 2026-11-30 is in the future (today is 2026-11-29)"),
                (
                    P3.replace("chief: maria", "chief: github-actions[bot]"),
                    "chief `github-actions[bot]` is the engine's own account",
                ),
                (P3.replace("tags: [deps]", "tags: []"), "`tags` must list at least one non-empty tag"),
                (P3.replace("  decision: Only", "  colour: red\n  decision: Only"), "unknown field `colour`"),
            ];
            for (entry, want) in cases {
                let problems = check_now(dir.path(), &format!("{V1}{entry}"), "HEAD");
                assert_eq!(problems.len(), 1, "{want}: {problems:?}");
                assert!(problems[0].starts_with("line 16: entry 3"), "{want}: {problems:?}");
                assert!(problems[0].contains(want), "{want}: {problems:?}");
            }
        }

        #[test]
        fn revisions_resolve_by_branch_sha_and_ancestry() {
            let (dir, repo) = repo_with(V1);
            let first = repo.head().unwrap().target().unwrap();
            commit(&repo, &format!("{V1}{P3}"), "Add P-0003", 1_767_312_000);
            let edited = format!("{}{P3}", V1.replace("maria", "mario"));
            for rev in ["HEAD~1", first.to_string().as_str(), "HEAD"] {
                let problems = check_now(dir.path(), &edited, rev);
                assert!(problems.iter().any(|p| p.contains("entry 1 (P-0001): changed")), "{rev}: {problems:?}");
            }
            let err = check_against(
                dir.path(),
                Path::new("precedents/log.yaml"),
                Some("nope"),
                today(),
                &EngineIdentity::account("x"),
            )
            .unwrap_err();
            assert!(err.to_string().contains("at revision `nope`: the revision does not exist"), "{err}");
        }

        #[test]
        fn a_commit_by_the_engine_that_touches_the_log_is_named() {
            let (dir, repo) = repo_with(V1);
            let base = repo.head().unwrap().target().unwrap().to_string();
            // A person appends P-0003; then the engine's account appends P-0004.
            commit(&repo, &format!("{V1}{P3}"), "Add P-0003", 1_767_312_000);
            let p4 = P3.replace("P-0003", "P-0004").replace("2026-03-01", "2026-03-02");
            let root = repo.workdir().unwrap().to_path_buf();
            std::fs::write(root.join("precedents/log.yaml"), format!("{V1}{P3}{p4}")).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("precedents/log.yaml")).unwrap();
            index.write().unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let bot = Signature::new(
                "github-actions[bot]",
                "41898282+github-actions[bot]@users.noreply.github.com",
                &Time::new(1_767_398_400, 0),
            )
            .unwrap();
            let parent = repo.head().unwrap().peel_to_commit().unwrap();
            let sha = repo.commit(Some("HEAD"), &bot, &bot, "Add P-0004", &tree, &[&parent]).unwrap().to_string();
            let problems =
                check_against(dir.path(), Path::new("precedents/log.yaml"), Some(&base), today(), &engine()).unwrap();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!(problems[0].entry, format!("commit {}", &sha[..12]));
            assert!(
                problems[0].message.contains("changed the log as the engine (author `github-actions[bot]"),
                "{problems:?}"
            );
            // The person's commit alone passes.
            let problems = engine_commits(dir.path(), "HEAD~1", Path::new("precedents/log.yaml"), &engine());
            assert_eq!(problems.unwrap().len(), 1, "HEAD~1..HEAD is the bot's commit");
            let problems = engine_commits(dir.path(), &base, Path::new("precedents/other.yaml"), &engine());
            assert!(problems.unwrap().is_empty(), "commits that do not touch the log are not the check's business");
        }

        #[test]
        fn a_log_absent_at_the_base_is_all_new() {
            let (dir, _repo) = repo_with(V1);
            let problems = check_against(
                dir.path(),
                Path::new("precedents/other.yaml"),
                Some("HEAD"),
                today(),
                &EngineIdentity::account("x"),
            )
            .unwrap();
            assert!(problems.is_empty());
            assert_eq!(read_at_revision(dir.path(), "HEAD", Path::new("precedents/other.yaml")).unwrap(), None);
        }

        #[test]
        fn a_flow_style_log_is_refused_rather_than_misread() {
            let problems = check_log("[{id: P-0001}]", None, today(), "x");
            assert!(problems[0].message.contains("write it as a block list"), "{problems:?}");
            let problems = check_log("- id: [\n", None, today(), "x");
            assert!(problems[0].message.starts_with("not valid YAML"), "{problems:?}");
        }

        #[test]
        fn comments_and_blank_lines_between_entries_belong_to_no_entry() {
            let with_comment = V1.replace("\n- id: P-0002", "\n# Second quarter\n\n- id: P-0002");
            let entries = raw_entries(&with_comment);
            assert_eq!(entries.len(), 2);
            assert!(entries[0].text.ends_with("names the owner."));
            assert!(check_log(&with_comment, Some(V1), today(), "x").is_empty());
        }
    }

    #[test]
    fn ids_are_four_digits_or_more_and_canonical() {
        for ok in ["P-0001", "P-9999", "P-10000"] {
            assert!(is_precedent_id(ok), "{ok}");
        }
        for bad in ["P-001", "P-0000", "P-01000", "P-00001", "p-0001", "P-12a4", "P-"] {
            assert!(!is_precedent_id(bad), "{bad}");
        }
    }

    #[test]
    fn malformed_yaml_has_a_location() {
        let err = PrecedentLog::parse("- id: P-0001\n  date: [\n", Path::new("log.yaml")).unwrap_err();
        assert!(matches!(err, PrecedentError::Syntax { line: 2.., .. }), "{err}");
        let err = PrecedentLog::parse("- id: P-0001\n  colour: red\n", Path::new("log.yaml")).unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
    }
}
