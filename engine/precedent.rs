//! The precedent log (`precedents/log.yaml`): decisions the chiefs made, so
//! agents follow them instead of asking again. Only humans write it; the
//! engine parses it and ranks entries against a patient with BM25 over
//! question, decision and tags.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    index: Bm25,
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
        let index = Bm25::build(entries.iter().map(document_text));
        Ok(Self { entries, index })
    }

    pub fn get(&self, id: &str) -> Option<&Precedent> {
        self.entries.iter().find(|p| p.id == id)
    }

    /// The `top` entries that best match `text`, best first; only entries
    /// that share at least one term.
    pub fn search(&self, text: &str, top: usize) -> Vec<Match<'_>> {
        let mut scored: Vec<Match<'_>> = self
            .index
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

pub fn is_precedent_id(id: &str) -> bool {
    id.len() == 6 && id.starts_with("P-") && id[2..].chars().all(|c| c.is_ascii_digit())
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

    #[test]
    fn malformed_yaml_has_a_location() {
        let err = PrecedentLog::parse("- id: P-0001\n  date: [\n", Path::new("log.yaml")).unwrap_err();
        assert!(matches!(err, PrecedentError::Syntax { line: 2.., .. }), "{err}");
        let err = PrecedentLog::parse("- id: P-0001\n  colour: red\n", Path::new("log.yaml")).unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
    }
}
