//! `ward init` on repositories people have: the default branch is read,
//! not assumed, and a folder of the repository's own is never written into.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{stderr, stdout};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
}

fn init(dir: &Path) -> Output {
    Command::new(support::ward_bin())
        .args(["init"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .output()
        .unwrap()
}

fn base_branch(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join(".github/ward.yml")).unwrap();
    let line = text.lines().find(|l| l.trim_start().starts_with("base_branch:")).unwrap();
    line.trim().trim_start_matches("base_branch:").trim().to_string()
}

#[test]
fn init_writes_the_branch_the_repository_has() {
    // A `master` repository: the branch checked out.
    let master = tempfile::tempdir().unwrap();
    git(master.path(), &["init", "-q", "-b", "master"]);
    let out = init(master.path());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("base branch: `master` (from the branch checked out)"), "{}", stdout(&out));
    assert_eq!(base_branch(master.path()), "master");
    let check =
        Command::new(support::ward_bin()).args(["config", "check"]).current_dir(master.path()).output().unwrap();
    assert!(check.status.success(), "{}", stderr(&check));

    // A clone whose origin's default branch is `trunk`, checked out elsewhere.
    let origin = tempfile::tempdir().unwrap();
    git(origin.path(), &["init", "-q", "-b", "trunk"]);
    git(origin.path(), &["commit", "-q", "--allow-empty", "-m", "one"]);
    let clone = tempfile::tempdir().unwrap();
    git(clone.path(), &["clone", "-q", origin.path().to_str().unwrap(), "."]);
    git(clone.path(), &["checkout", "-q", "-b", "feature"]);
    let out = init(clone.path());
    assert!(stdout(&out).contains("base branch: `trunk` (from origin/HEAD)"), "{}", stdout(&out));
    assert_eq!(base_branch(clone.path()), "trunk");
}

#[test]
fn init_refuses_a_folder_of_the_repositorys_own_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(dir.path().join("roles/webserver/tasks")).unwrap();
    std::fs::write(dir.path().join("roles/webserver/tasks/main.yml"), "- name: nginx\n").unwrap();
    let out = init(dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("roles already exists and is not ward's (it holds `webserver`)"), "{err}");
    assert!(err.contains("Rename or move your folder"), "{err}");
    assert!(!dir.path().join(".github").exists() && !dir.path().join("skills").exists(), "nothing written");
    assert_eq!(std::fs::read_dir(dir.path().join("roles")).unwrap().count(), 1);
}
