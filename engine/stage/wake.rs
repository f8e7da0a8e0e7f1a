//! A wake-up: a review submitted, or CI completed, on a waiting patient's
//! branch. Before the discharge stage runs again, it looks cheaply whether
//! anything the audit reads changed: the issue and the chart the guard
//! reads anyway, and at most one more call. The WAITING note
//! (`stage/waiting.rs`) records the `Head:` and the `CI:` it saw.

use crate::chart::{Note, NoteKind, control};
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
    let (Some(head), Some(was)) = (&wake.head, control::head(&note.body)) else { return Ok(None) };
    // Another commit's CI (an older head's, or a new head's: the audit looks).
    if !head.eq_ignore_ascii_case(was) {
        return Ok(None);
    }
    let statuses_before = control::ci(&note.body).is_some_and(|ci| !ci.contains("; statuses 0;"));
    if wake.event == "status" || statuses_before {
        return Ok(None);
    }
    let now = ci_fingerprint(Some(&h.forge.check_runs(head).await?));
    Ok((control::ci(&note.body) == Some(now.as_str())).then(|| format!("CI of `{head}` is as it was ({now})")))
}
