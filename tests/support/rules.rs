//! Helpers for `tests/rules.rs`: a hospital over the local forge in a
//! sandbox, and a driver that follows every dispatch (children included)
//! the way GitHub would, playing reviewers and CI before each audit.

use std::path::Path;
use std::sync::Arc;

use ward::forge::IssueNumber;
use ward::forge::local::LocalForge;
use ward::hospital::Hospital;
use ward::simulate::{PullRequestScript, play_people};
use ward::stage::{StageRequest, StageResult, run_stage};

use super::{Sandbox, ward_bin};

/// The engine account of the shipped pipeline.
pub const ENGINE: &str = "github-actions[bot]";

/// Makes `dir` a git repository with one commit at a fixed time by a fixed
/// author, so the stand-in's treatment has a head to commit on.
pub fn git_init(dir: &Path) {
    // Siblings of a decomposition each add a CHANGELOG line: a union merge
    // keeps both, as many projects configure it (the local merge is real).
    std::fs::write(dir.join(".gitattributes"), "CHANGELOG.md merge=union\n").unwrap();
    let repo = git2::Repository::init(dir).expect("git init");
    let mut index = repo.index().unwrap();
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let who = git2::Signature::new("ward tests", "tests@ward.invalid", &git2::Time::new(1_767_225_600, 0)).unwrap();
    repo.commit(Some("HEAD"), &who, &who, "Start", &tree, &[]).unwrap();
}

/// A hospital in `sandbox` whose forge acts for people as `person`.
pub fn hospital(sandbox: &Sandbox, person: &str) -> (Hospital, Arc<LocalForge>) {
    let forge = Arc::new(LocalForge::new(sandbox.root(), ENGINE).with_actor(person));
    let mut h = Hospital::load(sandbox.root(), forge.clone()).expect("the sandbox's pipeline loads");
    h.ward_exe = ward_bin();
    super::departments::home_in_repository(&mut h);
    (h, forge)
}

/// Runs stages for every dispatched issue until nothing more is dispatched;
/// returns (issue, result) in order.
pub async fn settle(h: &Hospital, forge: &LocalForge, first: IssueNumber, max_runs: usize) -> Vec<(u64, StageResult)> {
    let mut queue = vec![first];
    let mut seen = forge.dispatches().unwrap().len();
    let mut results = Vec::new();
    while let Some(issue) = (!queue.is_empty()).then(|| queue.remove(0)) {
        assert!(results.len() < max_runs, "did not settle after {max_runs} runs: {results:#?}");
        let current = forge.read_record(issue).unwrap().issue;
        let audits = current.labels.iter().any(|l| l == "ward:discharge");
        if audits {
            play_people(forge, issue, &h.workdir, &PullRequestScript::default()).await.unwrap();
        }
        let result = run(h, &StageRequest::new(issue)).await;
        results.push((issue.0, result));
        let dispatches = forge.dispatches().unwrap();
        queue.extend(dispatches[seen..].iter().map(|d| d.issue));
        seen = dispatches.len();
    }
    results
}

/// One stage run. The per-issue run lock is a file lock; an agent process
/// spawned by a test running in parallel in this process can hold a copy of
/// its descriptor for the instant between fork and exec, so a "busy" no-op
/// is tried again.
pub async fn run(h: &Hospital, req: &StageRequest) -> StageResult {
    let mut result = run_stage(h, req).await.unwrap();
    for _ in 0..20 {
        match &result {
            StageResult::NoOp { reason, .. } if reason.starts_with("another run is already working") => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                result = run_stage(h, req).await.unwrap();
            }
            _ => break,
        }
    }
    result
}

/// The ward label of an issue.
pub fn label_of(forge: &LocalForge, n: u64) -> String {
    let issue = forge.read_record(IssueNumber(n)).unwrap().issue;
    issue.labels.iter().find(|l| l.starts_with("ward:")).cloned().unwrap_or_default()
}
