//! The reaper over what crashed runs left in the workspace: containers past
//! their `ward.expires`, worktrees older than any run can live, and
//! `ward/issue-<n>` branches of closed issues. Only what carries ward's
//! labels or markers is touched (the emulator and worktree modules check).

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::WorkspacePlan;
use super::emulator::{Docker, reap_expired};
use super::worktree::GitRepo;

pub struct WorkspaceReaper {
    /// The repository whose worktrees and branches are reaped.
    pub root: PathBuf,
    pub plan: WorkspacePlan,
    /// Worktrees created longer ago than this are left over from crashed runs.
    pub worktree_ttl: Duration,
    /// Where container diagnostics go before removal.
    pub artifacts: PathBuf,
}

impl WorkspaceReaper {
    /// `None` when `root` is not a git repository with a branch checked out.
    /// `worktree_ttl` is how long the longest run may live.
    pub fn detect(root: &Path, worktree_ttl: Duration) -> Option<Self> {
        let plan = WorkspacePlan::detect(root, |k| std::env::var(k).ok())?;
        Some(Self { root: root.to_path_buf(), artifacts: plan.home.join("reaped"), plan, worktree_ttl })
    }

    /// Removes what is expired; `closed` are the issues whose branches may
    /// go. One line per thing removed (or left, with why), or an error
    /// sentence.
    pub async fn reap(&self, closed: &[u64], now: DateTime<Utc>) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        match Docker::connect(self.plan.docker_socket.as_deref()).await {
            Ok(docker) => {
                let gone = reap_expired(&docker, now, &self.artifacts)
                    .await
                    .map_err(|e| format!("could not reap expired containers: {e}"))?;
                lines.extend(gone.into_iter().map(|name| format!("container `{name}` (past its `ward.expires`)")));
            }
            Err(e) => lines.push(format!("containers not checked: Docker is not reachable ({e})")),
        }
        let repo = GitRepo::open(&self.root).map_err(|e| e.to_string())?;
        let report = repo.reap(self.worktree_ttl, now, closed).map_err(|e| format!("could not reap worktrees: {e}"))?;
        lines.extend(report.removed_worktrees.into_iter().map(|w| format!("worktree `{w}` (older than its TTL)")));
        lines.extend(report.deleted_branches.into_iter().map(|b| format!("branch `{b}` (its issue is closed)")));
        Ok(lines)
    }
}
