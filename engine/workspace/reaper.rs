//! The reaper over what crashed or finished runs left in the workspace:
//! this installation's containers past their `ward.expires`, patient
//! worktrees that are half-made, of closed issues or idle too long, and
//! `ward/issue-<n>` branches of closed issues. Only what ward can prove it
//! made is touched ([`super::reap`] and the modules below it check).

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{PlanError, WorkspaceError, WorkspacePlan};

pub struct WorkspaceReaper {
    /// The repository whose worktrees and branches are reaped.
    pub root: PathBuf,
    pub plan: WorkspacePlan,
    /// Patient worktrees unused for longer than this are removed (the next
    /// stage of the patient makes a new one).
    pub worktree_ttl: Duration,
    /// Where container diagnostics go before removal.
    pub artifacts: PathBuf,
}

impl WorkspaceReaper {
    /// `Ok(None)` when `root` is in no git repository.
    pub fn detect(root: &Path, worktree_ttl: Duration) -> Result<Option<Self>, PlanError> {
        let Some(plan) = WorkspacePlan::detect_for_reaping(root, |k| std::env::var(k).ok())? else {
            return Ok(None);
        };
        Ok(Some(Self { root: root.to_path_buf(), artifacts: plan.home.join("reaped"), plan, worktree_ttl }))
    }

    /// Removes what is expired; `closed` are the issues whose worktrees and
    /// branches may go. One line per thing removed.
    pub async fn reap_closed(&self, closed: &[u64], now: DateTime<Utc>) -> Result<Vec<String>, WorkspaceError> {
        super::reap(&self.plan, &self.root, now, self.worktree_ttl, closed, &self.artifacts).await
    }
}
