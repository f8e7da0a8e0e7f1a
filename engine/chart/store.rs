//! Writing charts through a forge: one compare-and-swap loop for every
//! slot of the chart store (a patient's chart, and the sweep's state in
//! slot 0). What a writer decides always rests on what it replaces: after a
//! conflict the decision is taken again on a fresh read.

use super::{Note, SentinelError, Sentinels};
use crate::forge::{Forge, ForgeError, IssueNumber, StoredChart};

/// How many times a write is retried after someone else wrote first.
pub const CHART_WRITE_ATTEMPTS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum ChartStoreError {
    #[error("the chart of {issue} is not readable: {cause}; fix or move the file, nothing was written")]
    Unreadable { issue: IssueNumber, cause: SentinelError },
    #[error(transparent)]
    Forge(#[from] ForgeError),
    #[error("the chart of {0} kept changing under us ({CHART_WRITE_ATTEMPTS} attempts); try the run again")]
    Contended(IssueNumber),
    #[error(
        "the chart of {issue} would be {size} bytes, over the limit of {limit} bytes; nothing was written \
         (a chief closes this patient and opens a new issue that links to it)",
        limit = crate::untrusted::MAX_CHART_BYTES
    )]
    Full { issue: IssueNumber, size: usize },
}

/// What this run knows of a slot before it writes.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Not read yet: the write reads first.
    NotRead,
    /// Read earlier in this run (`None`: there was nothing). A write that
    /// finds it stale re-reads and decides again.
    Read(Option<StoredChart>),
}

/// What a read-modify-write decided on the slot as it stands.
pub enum Edit<T> {
    /// Write nothing.
    Keep(T),
    /// Replace the slot's text.
    Write(String, T),
}

/// Read-modify-write of one slot with compare-and-swap. `decide` sees the
/// text stored now (`None`: nothing yet) and says what to write, or aborts
/// with its own error; after a conflict it runs again on a fresh read.
/// Returns its value and the slot as stored afterwards.
pub async fn modify_slot<T, E>(
    forge: &dyn Forge,
    slot: IssueNumber,
    seen: Seen,
    mut decide: impl FnMut(Option<&str>) -> Result<Edit<T>, E>,
) -> Result<Result<(T, Option<StoredChart>), E>, ChartStoreError> {
    let mut current = match seen {
        Seen::Read(stored) => stored,
        Seen::NotRead => forge.read_chart(slot).await?,
    };
    for _ in 0..CHART_WRITE_ATTEMPTS {
        let (text, value) = match decide(current.as_ref().map(|c| c.text.as_str())) {
            Err(e) => return Ok(Err(e)),
            Ok(Edit::Keep(value)) => return Ok(Ok((value, current))),
            Ok(Edit::Write(text, value)) => (text, value),
        };
        match forge.write_chart(slot, &text, current.as_ref().map(|c| c.version.as_str())).await {
            Ok(stored) => return Ok(Ok((value, Some(stored)))),
            Err(ForgeError::ChartConflict(_)) => current = forge.read_chart(slot).await?,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ChartStoreError::Contended(slot))
}

/// Read-modify-write of a patient's chart: `decide` sees its notes as they
/// stand and returns the notes to append (empty: nothing) with a value.
/// Appending is idempotent by run and author, so a retried write never
/// doubles a note.
pub async fn modify<T>(
    forge: &dyn Forge,
    sentinels: &Sentinels,
    issue: IssueNumber,
    seen: Seen,
    mut decide: impl FnMut(&[Note]) -> (Vec<Note>, T),
) -> Result<(T, Option<StoredChart>), ChartStoreError> {
    modify_slot(forge, issue, seen, |text| {
        let notes = match text {
            Some(t) => sentinels.parse_chart(t).map_err(|cause| ChartStoreError::Unreadable { issue, cause })?,
            None => Vec::new(),
        };
        let (new, value) = decide(&notes);
        Ok(match sentinels.append(issue, text, &new).map_err(|cause| ChartStoreError::Unreadable { issue, cause })? {
            // A chart past the limit could not be read back whole.
            Some(next) if next.len() > crate::untrusted::MAX_CHART_BYTES => {
                return Err(ChartStoreError::Full { issue, size: next.len() });
            }
            Some(next) => Edit::Write(next, value),
            None => Edit::Keep(value),
        })
    })
    .await?
}

/// Appends `notes` to the patient's chart (see [`modify`]); returns the
/// chart as stored afterwards.
pub async fn append(
    forge: &dyn Forge,
    sentinels: &Sentinels,
    issue: IssueNumber,
    seen: Seen,
    notes: &[Note],
) -> Result<Option<StoredChart>, ChartStoreError> {
    Ok(modify(forge, sentinels, issue, seen, |_| (notes.to_vec(), ())).await?.1)
}
