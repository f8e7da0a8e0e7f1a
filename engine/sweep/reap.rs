//! The reaper the sweep runs with `--reap`: what crashed runs left.

use std::path::Path;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::forge::{Forge, ForgeError, IssueState};
use crate::workspace::WorkspaceError;
use crate::workspace::reaper::WorkspaceReaper;

/// Why the reaper stopped (the sweep reports it and goes on).
#[derive(Debug, thiserror::Error)]
pub enum ReapError {
    #[error("could not list issues to find closed ones: {0}")]
    Issues(ForgeError),
    #[error("could not reap workspaces: {0}")]
    Workspaces(WorkspaceError),
}

/// Cleans up what crashed runs left (containers, worktrees, `ward/`
/// branches of closed issues).
#[async_trait]
pub trait Reaper: Send + Sync {
    /// One line per thing removed.
    async fn reap(&self, forge: &dyn Forge, now: DateTime<Utc>) -> Result<Vec<String>, ReapError>;
}

/// The workspace's reaper for the repository at `root`; `Ok(None)` when it
/// is in no git repository.
pub fn for_workspace(root: &Path, config: &Config) -> Result<Option<WorkspaceReaper>, crate::workspace::PlanError> {
    let longest = config.stages().map(|s| s.config.time_limit).max().unwrap_or_default();
    WorkspaceReaper::detect(root, longest + config.departments.sweep.grace)
}

#[async_trait]
impl Reaper for WorkspaceReaper {
    async fn reap(&self, forge: &dyn Forge, now: DateTime<Utc>) -> Result<Vec<String>, ReapError> {
        // Branches and worktrees of closed issues: one listing of every issue (paginated).
        let closed: Vec<u64> = forge
            .all_issues()
            .await
            .map_err(ReapError::Issues)?
            .into_iter()
            .filter(|i| i.state == IssueState::Closed)
            .map(|i| i.number.0)
            .collect();
        self.reap_closed(&closed, now).await.map_err(ReapError::Workspaces)
    }
}
