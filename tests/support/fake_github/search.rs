//! GitHub's issue search as the fake answers it (GraphQL
//! `search(type: ISSUE, query: ...)`): the qualifiers ward sends
//! (`repo:`, `is:issue`, `is:open`/`is:closed`, `label:` (each one must
//! match), `updated:` with `<`, `<=`, `>`, `>=`), at most
//! [`SEARCH_RESULTS`] results however many match (`issueCount` says how
//! many did), newest first. A qualifier the fake does not model fails the
//! test.
//!
//! **The index lags behind writes** on GitHub (seconds, sometimes
//! minutes): [`State::search_lag`] makes the fake's index see the
//! repository as it was that long ago on the simulated clock (labels
//! replayed from the label events up to then, an issue closed since still
//! open, one opened since not there, `updated_at` as it was). The matched
//! issues' fields are read live, as GitHub resolves a search's nodes from
//! the database, not from the index. Zero (the default): no lag.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::state::State;

/// The most results GitHub's search gives for one query.
pub const SEARCH_RESULTS: usize = 1000;

/// An issue as the search index holds it.
struct Indexed {
    open: bool,
    labels: Vec<String>,
    updated: DateTime<Utc>,
}

fn time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    let day = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    Some(day.and_hms_opt(0, 0, 0)?.and_utc())
}

/// Splits a search string at spaces outside double quotes.
fn terms(query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut term = String::new();
    let mut quoted = false;
    for c in query.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !term.is_empty() {
                    out.push(std::mem::take(&mut term));
                }
            }
            c => term.push(c),
        }
    }
    if !term.is_empty() {
        out.push(term);
    }
    out
}

impl State {
    /// When issue `n` last changed: opened, labeled, commented on, closed.
    pub fn updated_at(&self, n: u64) -> DateTime<Utc> {
        let i = self.issue(n);
        let events = self.label_events.iter().filter(|e| e.issue == n).map(|e| e.at.as_str());
        let comments = self.comments.iter().filter(|c| c.issue == n).map(|c| c.at.as_str());
        let all = std::iter::once(i.created_at.as_str()).chain(i.closed_at.as_deref()).chain(events).chain(comments);
        all.filter_map(time).max().expect("an issue has its creation time")
    }

    /// The index as of `clock - search_lag` (see the module's comment).
    fn index(&self) -> BTreeMap<u64, Indexed> {
        let at = self.clock - self.search_lag;
        let mut index: BTreeMap<u64, Indexed> = BTreeMap::new();
        for i in self.issues.values() {
            if time(&i.created_at).is_some_and(|c| c > at) {
                continue; // opened after the index last caught up
            }
            let closed = i.closed_at.as_deref().and_then(time);
            let open = if self.search_lag.is_zero() { i.open } else { i.open || closed.is_some_and(|c| c > at) };
            let labels = if self.search_lag.is_zero() { i.labels.clone() } else { Vec::new() };
            let mut updated = time(&i.created_at).unwrap_or(at);
            if let Some(c) = closed.filter(|c| *c <= at) {
                updated = updated.max(c);
            }
            index.insert(i.number, Indexed { open, labels, updated });
        }
        for e in &self.label_events {
            let Some(when) = time(&e.at).filter(|t| *t <= at) else { continue };
            let Some(entry) = index.get_mut(&e.issue) else { continue };
            entry.updated = entry.updated.max(when);
            if !self.search_lag.is_zero() {
                entry.labels.retain(|l| !l.eq_ignore_ascii_case(&e.label));
                if e.labeled {
                    entry.labels.push(e.label.clone());
                }
            }
        }
        for c in &self.comments {
            let Some(when) = time(&c.at).filter(|t| *t <= at) else { continue };
            if let Some(entry) = index.get_mut(&c.issue) {
                entry.updated = entry.updated.max(when);
            }
        }
        index
    }

    /// The issues `query` matches, newest first, all of them (the caller
    /// gives at most [`SEARCH_RESULTS`]); an error names a qualifier the
    /// fake does not model.
    pub(super) fn search_issues(&self, query: &str) -> Result<Vec<u64>, String> {
        let mut labels: Vec<String> = Vec::new();
        let mut open: Option<bool> = None;
        let mut bounds: Vec<(String, DateTime<Utc>)> = Vec::new();
        let mut this_repo = true;
        for term in terms(query) {
            let (key, value) = term
                .split_once(':')
                .ok_or_else(|| format!("search text `{term}` (the fake searches by qualifiers only)"))?;
            match (key, value) {
                ("repo", r) => this_repo = r.eq_ignore_ascii_case(&format!("{}/{}", self.owner, self.repo)),
                ("is", "issue") => {}
                ("is" | "state", "open") => open = Some(true),
                ("is" | "state", "closed") => open = Some(false),
                ("label", l) => labels.push(l.to_lowercase()),
                ("updated", bound) => {
                    let op_len = bound.chars().take_while(|c| *c == '<' || *c == '>' || *c == '=').count();
                    let (op, at) = bound.split_at(op_len);
                    let at = time(at).ok_or_else(|| format!("`updated:{bound}`: not a date or time"))?;
                    if !["<", "<=", ">", ">="].contains(&op) {
                        return Err(format!("`updated:{bound}` (the fake compares with <, <=, >, >=)"));
                    }
                    bounds.push((op.to_string(), at));
                }
                _ => return Err(format!("search qualifier `{term}`")),
            }
        }
        if !this_repo {
            return Ok(Vec::new());
        }
        let index = self.index();
        let mut found: Vec<u64> = index
            .iter()
            .filter(|(_, i)| open.is_none_or(|o| i.open == o))
            .filter(|(_, i)| labels.iter().all(|w| i.labels.iter().any(|l| l.to_lowercase() == *w)))
            .filter(|(_, i)| {
                bounds.iter().all(|(op, at)| match op.as_str() {
                    "<" => i.updated < *at,
                    "<=" => i.updated <= *at,
                    ">" => i.updated > *at,
                    _ => i.updated >= *at,
                })
            })
            .map(|(n, _)| *n)
            .collect();
        found.reverse();
        Ok(found)
    }
}
