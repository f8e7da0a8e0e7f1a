//! A wake-up: a review submitted, or CI completed, on a waiting patient's
//! branch. Before the discharge stage runs again, it looks cheaply whether
//! anything the audit reads changed: the issue and the chart the guard
//! reads anyway, and at most one more call. The WAITING note
//! (`stage/waiting.rs`) records the `Head:` and the `CI:` it saw.

use crate::chart::{Note, NoteKind};
use crate::event::Wake;
use crate::forge::CiStatus;
use crate::hospital::Hospital;

/// CI as the WAITING note records it: each check and its state, and the
/// number of commit statuses.
pub fn ci_fingerprint(ci: Option<&CiStatus>) -> String {
    match ci {
        None => "unknown".into(),
        Some(ci) => {
            let mut checks = ci.checks.clone();
            checks.sort();
            format!("{:?}; statuses {}; {}", ci.state, ci.statuses, checks.join(", ")).to_lowercase()
        }
    }
}

/// A line `Key: value` of the latest WAITING note.
fn recorded<'a>(note: &'a Note, key: &str) -> Option<&'a str> {
    note.body.lines().rev().find_map(|l| l.strip_prefix(key)).map(str::trim)
}

/// Whether a wake-up can stop here: `Some(why)` when nothing the audit
/// reads changed. Costs at most one call beyond the issue and the chart
/// the guard read: a review's author's permission, or the head's check
/// runs. Anything it cannot rule out is a change (the audit decides).
pub async fn nothing_new(h: &Hospital, chart: &[Note], wake: &Wake) -> anyhow::Result<Option<String>> {
    let Some(note) = chart.iter().rfind(|n| n.kind == NoteKind::Waiting) else { return Ok(None) };
    if let Some(reviewer) = &wake.reviewer {
        if h.config.engine_account.is(reviewer) {
            return Ok(Some(format!("the review by `{reviewer}` is the engine's own")));
        }
        let have = h.forge.permission(reviewer).await?;
        if have < h.config.approve_permission {
            return Ok(Some(format!(
                "the review by `{reviewer}` ({} permission) neither passes nor blocks the audit",
                format!("{have:?}").to_lowercase()
            )));
        }
        return Ok(None);
    }
    let (Some(head), Some(was)) = (&wake.head, recorded(note, "Head:")) else { return Ok(None) };
    // Another commit's CI (an older head's, or a new head's: the audit looks).
    if !head.eq_ignore_ascii_case(was) {
        return Ok(None);
    }
    let statuses_before = recorded(note, "CI:").is_some_and(|ci| !ci.contains("; statuses 0;"));
    if wake.event == "status" || statuses_before {
        return Ok(None);
    }
    let now = ci_fingerprint(Some(&h.forge.check_runs(head).await?));
    Ok((recorded(note, "CI:") == Some(now.as_str())).then(|| format!("CI of `{head}` is as it was ({now})")))
}
