//! Checkpoints: a patient's emulator data saved at the end of a treatment,
//! tied to the branch's head commit, so that the patient's next stage
//! starts from it instead of the seed (and the code reviewer sees what the
//! change did to the data).
//!
//! They live in a folder ward owns, `<home>/checkpoints/<repo>/issue-<n>/`
//! (never in the agent's worktree, never named in its environment). Each
//! is two files: `<name>.data`, the export as the emulator's `export`
//! command printed it, and `<name>.json`, its [`Marker`]: who made it
//! (installation, repository, issue, run, stage), the commit, when it
//! expires, and the data's size and SHA-256, checked before it is used.
//! The data is written first, the marker last, each through a rename: a
//! checkpoint without a marker is half-made and never used. `seed.*` is the
//! export taken right after the seed (the data diff's left side).
//!
//! A stage starts from the newest checkpoint whose commit is the branch's
//! head or one of its ancestors: after a `restart` (the branch back at the
//! base) the treatment's checkpoints are dropped, and one of a commit the
//! branch no longer has would never be chosen anyway (a treatment that
//! rebases saves its data again for the new head). The reaper removes
//! expired checkpoints and those of closed patients; discharge, and the
//! merge queue's merge in `ward run`, remove the patient's. Only files with
//! a marker of this installation and repository, and the half-made files
//! ward's own names leave, are ever removed.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::errors::{Result, io_err};
use super::worktree::GitRepo;

/// What a marker says; `kind` is always `ward-checkpoint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub kind: String,
    pub issue: u64,
    /// The branch head the data belongs to; `None` for the seed's export.
    pub commit: Option<String>,
    pub run: String,
    pub stage: String,
    pub created_at: DateTime<Utc>,
    pub expires: DateTime<Utc>,
    pub repository: String,
    pub installation: String,
    pub bytes: u64,
    pub sha256: String,
}

pub(super) const KIND: &str = "ward-checkpoint";
const SEED: &str = "seed";

/// One checkpoint read back whole, its data verified against its marker.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub marker: Marker,
    pub data: Vec<u8>,
    /// The `.data` file.
    pub path: PathBuf,
}

/// Whose checkpoints these are: only markers that say so are read or removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    pub repository: String,
    pub installation: String,
}

/// One repository's checkpoints under the ward home
/// ([`super::worktree::Layout::checkpoints`]).
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    owner: Owner,
}

pub(super) fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `data` at `path` through a temporary file and a rename.
fn write_whole(path: &Path, data: &[u8]) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".tmp-{}-{name}", std::process::id()));
    std::fs::write(&tmp, data).map_err(io_err("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err("write", path))
}

impl Store {
    pub fn new(dir: &Path, owner: Owner) -> Self {
        Self { dir: dir.to_path_buf(), owner }
    }

    /// The patient's folder.
    pub fn patient(&self, issue: u64) -> PathBuf {
        self.dir.join(format!("issue-{issue}"))
    }

    /// Saves `data` for `issue` at `commit` (`None`: the seed's export,
    /// replacing the last one). Returns the `.data` file.
    pub fn save(
        &self,
        issue: u64,
        commit: Option<&str>,
        run: &str,
        stage: &str,
        keep: std::time::Duration,
        data: &[u8],
    ) -> Result<PathBuf> {
        let now = Utc::now();
        let marker = Marker {
            kind: KIND.into(),
            issue,
            commit: commit.map(str::to_string),
            run: run.into(),
            stage: stage.into(),
            created_at: now,
            expires: now + chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::days(7)),
            repository: self.owner.repository.clone(),
            installation: self.owner.installation.clone(),
            bytes: data.len() as u64,
            sha256: sha256_hex(data),
        };
        self.write(marker, data)
    }

    /// Takes in a checkpoint made elsewhere (another job's home: see
    /// [`super::shared`]), already checked against its marker: saved as
    /// ours, with its commit, run, stage, time and expiry.
    pub fn adopt(&self, theirs: &Marker, data: &[u8]) -> Result<PathBuf> {
        let marker = Marker {
            kind: KIND.into(),
            repository: self.owner.repository.clone(),
            installation: self.owner.installation.clone(),
            bytes: data.len() as u64,
            sha256: sha256_hex(data),
            ..theirs.clone()
        };
        self.write(marker, data)
    }

    fn write(&self, marker: Marker, data: &[u8]) -> Result<PathBuf> {
        let dir = self.patient(marker.issue);
        std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        let name = match &marker.commit {
            None => SEED.to_string(),
            Some(c) => format!("{}-{}", marker.created_at.timestamp_millis(), &c[..c.len().min(12)]),
        };
        let path = dir.join(format!("{name}.data"));
        write_whole(&path, data)?;
        let text = serde_json::to_string_pretty(&marker).unwrap_or_default() + "\n";
        write_whole(&dir.join(format!("{name}.json")), text.as_bytes())?;
        Ok(path)
    }

    /// The patient's markers that are ours, with their `.data` paths.
    fn markers(&self, issue: u64) -> Vec<(Marker, PathBuf, PathBuf)> {
        let dir = self.patient(issue);
        let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| {
                let path = e.path();
                let name = path.file_name()?.to_str()?.strip_suffix(".json")?.to_string();
                if name.starts_with('.') {
                    return None;
                }
                let marker: Marker = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
                let ours = marker.kind == KIND
                    && marker.issue == issue
                    && marker.repository == self.owner.repository
                    && marker.installation == self.owner.installation;
                ours.then(|| (marker, dir.join(format!("{name}.data")), path))
            })
            .collect()
    }

    fn read(marker: Marker, path: PathBuf) -> Option<Checkpoint> {
        let data = std::fs::read(&path).ok()?;
        let intact = data.len() as u64 == marker.bytes && sha256_hex(&data) == marker.sha256;
        if !intact {
            tracing::warn!("checkpoint {} does not match its marker; it is not used", path.display());
            return None;
        }
        Some(Checkpoint { marker, data, path })
    }

    /// The newest unexpired checkpoint of `issue` whose commit is `head` or
    /// an ancestor of it, read and verified.
    pub fn latest(&self, git: &GitRepo, issue: u64, head: &str, now: DateTime<Utc>) -> Option<Checkpoint> {
        let mut found: Vec<_> = self
            .markers(issue)
            .into_iter()
            .filter(|(m, _, _)| m.expires > now)
            .filter(|(m, _, _)| m.commit.as_deref().is_some_and(|c| git.is_ancestor(c, head)))
            .collect();
        found.sort_by_key(|(m, _, _)| std::cmp::Reverse(m.created_at));
        found.into_iter().find_map(|(m, data, _)| Self::read(m, data))
    }

    /// The checkpoint whose `.data` file is `data`, when it is ours and intact.
    pub fn at(&self, data: &Path) -> Option<Checkpoint> {
        let issue = data.parent()?.file_name()?.to_str()?.strip_prefix("issue-")?.parse().ok()?;
        self.markers(issue).into_iter().find(|(_, d, _)| d == data).and_then(|(m, d, _)| Self::read(m, d))
    }

    /// The seed's export, if one is kept and intact.
    pub fn seed(&self, issue: u64) -> Option<Checkpoint> {
        self.markers(issue)
            .into_iter()
            .find(|(m, _, _)| m.commit.is_none())
            .and_then(|(m, data, _)| Self::read(m, data))
    }

    /// Removes every checkpoint of `issue` (a restart, a discharge): the
    /// names of the `.data` files removed.
    pub fn drop_patient(&self, issue: u64) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for (_, data, marker) in self.markers(issue) {
            removed.push(remove_pair(&data, &marker)?);
        }
        remove_half_made(&self.patient(issue), None)?;
        let _ = std::fs::remove_dir(self.patient(issue));
        Ok(removed)
    }

    /// The reaper's part: checkpoints past their `expires`, and every
    /// checkpoint of the `closed` issues. One line each.
    pub fn reap(&self, now: DateTime<Utc>, closed: &[u64]) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Ok(lines) };
        let mut issues: Vec<u64> =
            entries.flatten().filter_map(|e| e.file_name().to_str()?.strip_prefix("issue-")?.parse().ok()).collect();
        issues.sort_unstable();
        for issue in issues {
            if closed.contains(&issue) {
                for name in self.drop_patient(issue)? {
                    lines.push(format!("checkpoint `{name}` of #{issue} (its issue is closed)"));
                }
                continue;
            }
            for (m, data, marker) in self.markers(issue) {
                if m.expires <= now {
                    let name = remove_pair(&data, &marker)?;
                    lines.push(format!("checkpoint `{name}` of #{issue} (past its expiry)"));
                }
            }
            // A run killed mid-write leaves a temporary file; an hour on, nobody writes it.
            remove_half_made(&self.patient(issue), Some(now - chrono::Duration::hours(1)))?;
        }
        Ok(lines)
    }
}

/// Removes a checkpoint's data (when there) and then its marker, and checks
/// both are gone; returns the data file's name.
fn remove_pair(data: &Path, marker: &Path) -> Result<String> {
    for path in [data, marker] {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", path)(e)),
        }
        if path.exists() {
            return Err(io_err("remove", path)(std::io::Error::other("still there after removal")));
        }
    }
    Ok(data.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
}

/// The temporary files [`write_whole`] leaves when killed (`.tmp-*`), older
/// than `before` (all of them when `None`).
fn remove_half_made(dir: &Path, before: Option<DateTime<Utc>>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(".tmp-") {
            continue;
        }
        let old = match (before, e.metadata().and_then(|m| m.modified())) {
            (None, _) => true,
            (Some(before), Ok(t)) => DateTime::<Utc>::from(t) < before,
            (Some(_), Err(_)) => false,
        };
        if old {
            let path = e.path();
            std::fs::remove_file(&path).map_err(io_err("remove", &path))?;
        }
    }
    Ok(())
}

/// What changed between two exports, line by line: the lines only in
/// `before` (`-`) and only in `after` (`+`), each as many times as it is
/// missing from the other side, sorted by their text so a changed record's
/// two lines stand together (exports are sorted by key).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataDiff {
    pub removed: usize,
    pub added: usize,
    /// `- line` and `+ line`, at most `max` bytes of them; `truncated` says
    /// whether more were left out.
    pub text: String,
    pub truncated: bool,
}

pub fn diff(before: &[u8], after: &[u8], max: usize) -> DataDiff {
    use std::collections::BTreeMap;
    let (before, after) = (String::from_utf8_lossy(before), String::from_utf8_lossy(after));
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for l in before.lines() {
        *count.entry(l).or_default() -= 1;
    }
    for l in after.lines() {
        *count.entry(l).or_default() += 1;
    }
    let (mut removed, mut added, mut text, mut truncated) = (0, 0, String::new(), false);
    for (line, n) in count {
        let (sign, times) = if n < 0 { ('-', -n) } else { ('+', n) };
        for _ in 0..times {
            if sign == '-' {
                removed += 1;
            } else {
                added += 1;
            }
            let entry = format!("{sign} {line}\n");
            if text.len() + entry.len() > max {
                truncated = true;
            } else if !truncated {
                text.push_str(&entry);
            }
        }
    }
    DataDiff { removed, added, text, truncated }
}

/// A PostgreSQL plain-text dump (`pg_dump`, the `postgres` preset's export)
/// split in two: its schema (every statement line outside the `COPY`
/// blocks, without comments, blank lines and the `\restrict` lines) and
/// each table's rows (the lines of its `COPY` block).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SqlDump {
    pub schema: Vec<String>,
    /// Table (as the dump names it, `"public"."t"`) -> its rows.
    pub tables: std::collections::BTreeMap<String, Vec<String>>,
}

/// The first line every plain-text `pg_dump` writes after its `--` line.
const PG_DUMP_HEADER: &str = "-- PostgreSQL database dump";

impl SqlDump {
    /// `None` unless `data` is a plain-text pg_dump (an empty export is an
    /// empty dump: no seed kept).
    pub fn parse(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        if text.is_empty() {
            return Some(Self::default());
        }
        if !text.lines().take(3).any(|l| l == PG_DUMP_HEADER) {
            return None;
        }
        let mut dump = Self::default();
        // The rows of the table whose COPY is being read.
        let mut copying: Option<&mut Vec<String>> = None;
        for line in text.lines() {
            if let Some(rows) = &mut copying {
                if line == "\\." {
                    copying = None;
                } else {
                    rows.push(line.to_string());
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("COPY ")
                && line.ends_with(" FROM stdin;")
            {
                let table = rest.split(" (").next().unwrap_or(rest).trim_end_matches(" FROM stdin;").to_string();
                copying = Some(dump.tables.entry(table).or_default());
                continue;
            }
            let skip = line.trim().is_empty()
                || line.starts_with("--")
                || line.starts_with("\\restrict ")
                || line.starts_with("\\unrestrict ");
            if !skip {
                dump.schema.push(line.to_string());
            }
        }
        Some(dump)
    }

    /// Every row, prefixed with its table: the row diff's lines.
    pub fn rows(&self) -> String {
        let mut out = String::new();
        for (table, rows) in &self.tables {
            for r in rows {
                out.push_str(&format!("{table}: {r}\n"));
            }
        }
        out
    }
}

/// One table's rows before (the seed) and after (the checkpoint): counts,
/// and a checksum of its sorted rows (the first 16 hex digits of their
/// SHA-256), the way Neon advises comparing a branch's data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableSummary {
    pub table: String,
    /// `None`: the table was not there.
    pub rows_before: Option<usize>,
    pub rows_after: Option<usize>,
    pub checksum_before: Option<String>,
    pub checksum_after: Option<String>,
}

impl TableSummary {
    pub fn changed(&self) -> bool {
        self.rows_before != self.rows_after || self.checksum_before != self.checksum_after
    }
}

fn rows_checksum(rows: &[String]) -> String {
    let mut sorted: Vec<&str> = rows.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sha256_hex(sorted.join("\n").as_bytes())[..16].to_string()
}

/// Per table, before and after, in the tables' order.
pub fn table_summaries(before: &SqlDump, after: &SqlDump) -> Vec<TableSummary> {
    let names: std::collections::BTreeSet<&String> = before.tables.keys().chain(after.tables.keys()).collect();
    names
        .into_iter()
        .map(|t| TableSummary {
            table: t.clone(),
            rows_before: before.tables.get(t).map(Vec::len),
            rows_after: after.tables.get(t).map(Vec::len),
            checksum_before: before.tables.get(t).map(|r| rows_checksum(r)),
            checksum_after: after.tables.get(t).map(|r| rows_checksum(r)),
        })
        .collect()
}

/// What a treatment's data did to the database's schema against the
/// seed's export, as ward read both exports (never as an agent said).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaReading {
    Unchanged,
    /// The objects whose statements differ, by name, in order.
    Changed(Vec<SchemaChange>),
    /// Why the schema could not be compared.
    Unknown(String),
}

/// One object of the schema (a table with its indexes, constraints and
/// comments; a sequence, view, function or type) that is new, gone or
/// different.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// As the dump names it: `"public"."orders"`.
    pub object: String,
    /// `new`, `gone` or `changed`.
    pub how: &'static str,
}

/// The schema of `after` against the seed's export `seed` (`None`: no seed
/// export was kept, so there is nothing to compare with).
pub fn read_schema(seed: Option<&[u8]>, after: &[u8]) -> SchemaReading {
    let Some(seed) = seed else {
        return SchemaReading::Unknown(
            "the seed's export was not kept, so the schema has nothing to be compared with".into(),
        );
    };
    let (Some(before), Some(after)) = (SqlDump::parse(seed), SqlDump::parse(after)) else {
        return SchemaReading::Unknown(
            "the emulator's export is not a PostgreSQL plain dump (`pg_dump`), the one whose schema ward reads".into(),
        );
    };
    let changes = schema_changes(&before, &after);
    if changes.is_empty() { SchemaReading::Unchanged } else { SchemaReading::Changed(changes) }
}

/// The objects whose statements differ between two dumps' schemas.
pub fn schema_changes(before: &SqlDump, after: &SqlDump) -> Vec<SchemaChange> {
    let (b, a) = (objects(&before.schema), objects(&after.schema));
    let names: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let how = match (b.get(name), a.get(name)) {
                (None, Some(_)) => "new",
                (Some(_), None) => "gone",
                (Some(x), Some(y)) if x != y => "changed",
                _ => return None,
            };
            Some(SchemaChange { object: name.clone(), how })
        })
        .collect()
}

/// The schema's statements by the object each is about: the first
/// schema-qualified name in it (`pg_catalog`'s aside), so a table's
/// indexes, constraints, defaults and comments count as the table's; a
/// statement that names none (`SET`, `CREATE SCHEMA`) stands for itself.
fn objects(schema: &[String]) -> std::collections::BTreeMap<String, Vec<String>> {
    use std::sync::LazyLock;
    const PART: &str = r#"(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)"#;
    static QUALIFIED: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(&format!("{PART}\\.{PART}")).expect("a valid pattern"));
    static DOLLAR: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r"\$[A-Za-z_0-9]*\$").expect("a valid pattern"));
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let (mut statement, mut quoted) = (String::new(), false);
    for line in schema {
        statement.push_str(line);
        statement.push('\n');
        // A function's body ($$ ... $$) holds `;` that end no statement.
        if DOLLAR.find_iter(line).count() % 2 == 1 {
            quoted = !quoted;
        }
        if quoted || !line.trim_end().ends_with(';') {
            continue;
        }
        // The dump's session settings (`SET`, `SELECT pg_catalog.set_config`) are no schema.
        if statement.starts_with("SET ") || statement.starts_with("SELECT ") {
            statement.clear();
            continue;
        }
        let name = QUALIFIED
            .find_iter(&statement)
            .map(|m| m.as_str())
            .find(|m| !m.starts_with("pg_catalog.") && !m.starts_with("\"pg_catalog\"."))
            .map_or_else(|| statement.lines().next().unwrap_or_default().trim().to_string(), str::to_string);
        out.entry(name).or_default().push(std::mem::take(&mut statement));
    }
    if !statement.trim().is_empty() {
        out.entry(statement.lines().next().unwrap_or_default().trim().to_string()).or_default().push(statement);
    }
    for statements in out.values_mut() {
        statements.sort_unstable();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner { repository: "/r/.git".into(), installation: "i1".into() }
    }

    #[test]
    fn a_diff_pairs_changed_records_and_counts_what_it_leaves_out() {
        let before = b"db\tc\t1\tp\t{\"n\":1}\ndb\tc\t2\tp\t{\"n\":2}\n";
        let after = b"db\tc\t1\tp\t{\"n\":1}\ndb\tc\t2\tp\t{\"n\":3}\ndb\tc\t3\tp\t{}\n";
        let d = diff(before, after, 1024);
        assert_eq!((d.removed, d.added, d.truncated), (1, 2, false));
        assert_eq!(d.text, "- db\tc\t2\tp\t{\"n\":2}\n+ db\tc\t2\tp\t{\"n\":3}\n+ db\tc\t3\tp\t{}\n");
        let d = diff(before, after, 25);
        assert_eq!((d.removed, d.added, d.truncated, d.text.as_str()), (1, 2, true, "- db\tc\t2\tp\t{\"n\":2}\n"));
        assert_eq!(diff(before, before, 10).text, "");
    }

    const DUMP: &str = "--\n-- PostgreSQL database dump\n--\n\n\\restrict ward\n\nSET x = 0;\n\
        CREATE TABLE \"public\".\"t\" (\n    \"k\" \"text\"\n);\n\n\
        COPY \"public\".\"t\" (\"k\") FROM stdin;\nb\na\n\\.\n\n\\unrestrict ward\n";

    #[test]
    fn a_pg_dump_splits_into_schema_and_rows_and_tables_are_counted_and_checksummed() {
        let before = SqlDump::parse(DUMP.as_bytes()).unwrap();
        assert_eq!(before.schema, vec!["SET x = 0;", "CREATE TABLE \"public\".\"t\" (", "    \"k\" \"text\"", ");"]);
        assert_eq!(before.tables["\"public\".\"t\""], vec!["b", "a"]);
        assert_eq!(before.rows(), "\"public\".\"t\": b\n\"public\".\"t\": a\n");
        let reordered = SqlDump::parse(DUMP.replace("b\na\n", "a\nb\n").as_bytes()).unwrap();
        let grown =
            SqlDump::parse(DUMP.replace("b\na\n", "a\nb\nc\n").replace("\\restrict ward", "\\restrict Zx9").as_bytes())
                .unwrap();
        let same = table_summaries(&before, &reordered);
        assert!(!same[0].changed(), "row order is not a change: {same:?}");
        let t = &table_summaries(&before, &grown)[0];
        assert_eq!((t.rows_before, t.rows_after, t.changed()), (Some(2), Some(3), true));
        assert_eq!(before.schema, grown.schema, "a restrict key is not schema");
        let from_nothing = table_summaries(&SqlDump::parse(b"").unwrap(), &before);
        assert_eq!((from_nothing[0].rows_before, from_nothing[0].rows_after), (None, Some(2)));
        assert_eq!(SqlDump::parse(b"db\tc\t1\n"), None, "not a pg_dump");
    }

    #[test]
    fn the_schema_is_read_by_object_and_a_tables_index_is_the_tables() {
        let seed = DUMP.as_bytes();
        let rows_only = DUMP.replace("b\na\n", "a\nb\nc\n");
        assert_eq!(read_schema(Some(seed), rows_only.as_bytes()), SchemaReading::Unchanged, "rows are no schema");
        let grown = DUMP.replace(
            "\n\nCOPY",
            "\nCREATE TABLE \"public\".\"orders\" (\n    \"id\" integer\n);\n\
             CREATE INDEX \"t_k\" ON \"public\".\"t\" USING \"btree\" (\"k\");\n\
             CREATE FUNCTION \"public\".\"f\"() RETURNS integer\n    AS $$ select 1; $$;\n\nCOPY",
        );
        let changes = |r: SchemaReading| match r {
            SchemaReading::Changed(c) => c.into_iter().map(|c| format!("{} {}", c.object, c.how)).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            changes(read_schema(Some(seed), grown.as_bytes())),
            ["\"public\".\"f\" new", "\"public\".\"orders\" new", "\"public\".\"t\" changed"]
        );
        let altered = DUMP.replace("    \"k\" \"text\"\n", "    \"k\" \"text\",\n    \"n\" integer\n");
        assert_eq!(changes(read_schema(Some(altered.as_bytes()), seed)), ["\"public\".\"t\" changed"]);
        let unquoted = "--\n-- PostgreSQL database dump\n--\nCREATE TABLE public.t (\n    k text\n);\n";
        assert_eq!(changes(read_schema(Some(unquoted.as_bytes()), seed)), ["\"public\".\"t\" new", "public.t gone"]);
        assert!(
            matches!(read_schema(None, seed), SchemaReading::Unknown(why) if why.contains("seed's export was not kept"))
        );
        assert!(
            matches!(read_schema(Some(seed), b"db\tc\t1\n"), SchemaReading::Unknown(why) if why.contains("pg_dump"))
        );
    }

    #[test]
    fn markers_of_another_installation_and_tampered_data_are_never_used() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path(), owner());
        let seed = store.save(3, None, "r1", "treat", std::time::Duration::from_secs(60), b"a\n").unwrap();
        assert_eq!(store.seed(3).unwrap().data, b"a\n");
        let theirs = Store::new(tmp.path(), Owner { installation: "i2".into(), ..owner() });
        assert!(theirs.seed(3).is_none(), "another installation's checkpoint is not ours");
        assert!(theirs.drop_patient(3).unwrap().is_empty());
        assert!(seed.exists());
        std::fs::write(&seed, b"b\n").unwrap();
        assert!(store.seed(3).is_none(), "data that no longer matches its marker is not used");
        assert_eq!(store.drop_patient(3).unwrap(), vec!["seed.data".to_string()]);
        assert!(!store.patient(3).exists());
    }

    #[test]
    fn the_reaper_takes_expired_checkpoints_and_closed_patients() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path(), owner());
        let day = std::time::Duration::from_secs(86_400);
        store.save(1, Some("aaaa"), "r", "treat", day, b"x").unwrap();
        store.save(2, Some("bbbb"), "r", "treat", day, b"y").unwrap();
        store.save(2, None, "r", "treat", std::time::Duration::from_secs(1), b"s").unwrap();
        std::fs::write(store.patient(2).join(".tmp-9-half.data"), b"h").unwrap();
        let now = Utc::now() + chrono::Duration::hours(2);
        let lines = store.reap(now, &[1]).unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("#1 (its issue is closed)"), "{lines:?}");
        assert!(lines[1].contains("seed.data") && lines[1].contains("expiry"), "{lines:?}");
        assert!(!store.patient(1).exists());
        assert!(!store.patient(2).join(".tmp-9-half.data").exists(), "half-made files an hour old go too");
        assert_eq!(store.markers(2).len(), 1, "the unexpired checkpoint stays");
    }
}
