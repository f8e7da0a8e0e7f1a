//! `ward doctor`: is this installation sound? One line per check, each
//! saying what to do when it fails; it passes only when every check does.
//!
//! Locally (`local`): ward.yml, the roles, skills and precedent log, the
//! agent's program, Docker when an emulator is configured, `.ward/` kept
//! out of git, the schema beside ward.yml. On GitHub (`github`): the
//! GraphQL endpoint, the workflows and their jobs' permissions against what
//! `ward init` writes (the action pinned, the stage woken by the CI), what
//! the token may do, the labels, the charts branch, the setting that lets
//! Actions open pull requests, the CI workflows ward starts (and that some
//! do). Doctor reads only; with `--fix` it sets up what ward owns
//! (labels, the charts branch, `.gitignore`, the schema), which is where
//! setup belongs rather than in a stage's run.

mod github;
mod local;
pub mod workflows;

use std::fmt;

pub use github::github;
pub use local::local;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// It failed, and `--fix` put it right.
    Fixed,
    Fail,
}

/// One check: what it looked at, what it found, what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub found: String,
    /// What to do when it failed.
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: impl Into<String>, found: impl Into<String>) -> Self {
        Self { name: name.into(), status: Status::Ok, found: found.into(), fix: None }
    }

    pub fn fail(name: impl Into<String>, found: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name: name.into(), status: Status::Fail, found: found.into(), fix: Some(fix.into()) }
    }

    pub fn fixed(name: impl Into<String>, found: impl Into<String>) -> Self {
        Self { name: name.into(), status: Status::Fixed, found: found.into(), fix: None }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = match self.status {
            Status::Ok => "ok   ",
            Status::Fixed => "fixed",
            Status::Fail => "FAIL ",
        };
        write!(f, "{mark} {}: {}", self.name, self.found)?;
        if let Some(fix) = &self.fix {
            write!(f, " -> {fix}")?;
        }
        Ok(())
    }
}

/// Every check of one run, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report(pub Vec<Check>);

impl Report {
    pub fn passed(&self) -> bool {
        self.0.iter().all(|c| c.status != Status::Fail)
    }

    pub fn failed(&self) -> impl Iterator<Item = &Check> {
        self.0.iter().filter(|c| c.status == Status::Fail)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.0 {
            writeln!(f, "{check}")?;
        }
        let failed = self.failed().count();
        if failed == 0 {
            writeln!(f, "doctor: all {} checks passed", self.0.len())
        } else {
            writeln!(f, "doctor: {failed} of {} checks failed", self.0.len())
        }
    }
}

/// Why the Docker daemon does not answer [`probe_docker`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerUnreachable {
    /// What the Docker client said, connecting or pinging.
    #[error("{0}")]
    Said(String),
    #[error("no answer within 10s")]
    Silent,
}

/// Pings the Docker daemon (the local socket or `DOCKER_HOST`); the
/// sweep's facility check uses it too.
pub async fn probe_docker() -> Result<(), DockerUnreachable> {
    let said = |e: bollard::errors::Error| DockerUnreachable::Said(e.to_string());
    let docker = bollard::Docker::connect_with_local_defaults().map_err(said)?;
    match tokio::time::timeout(std::time::Duration::from_secs(10), docker.ping()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(said(e)),
        Err(_) => Err(DockerUnreachable::Silent),
    }
}
