//! `ward init` on repositories people have: the default branch is read,
//! not assumed, and a folder of the repository's own is never written into.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{git, stderr, stdout};

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
    assert!(
        err.contains("Rename or move your folder, or give ward a place of its own with `ward init --into"),
        "{err}"
    );
    assert!(!dir.path().join(".github").exists() && !dir.path().join("skills").exists(), "nothing written");
    assert_eq!(std::fs::read_dir(dir.path().join("roles")).unwrap().count(), 1);
}

fn ward(dir: &Path, args: &[&str]) -> Output {
    Command::new(support::ward_bin())
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("USER", "tester")
        .output()
        .unwrap()
}

fn ward_ok(dir: &Path, args: &[&str]) -> String {
    let out = ward(dir, args);
    assert!(out.status.success(), "ward {args:?}: {}\n{}", stdout(&out), stderr(&out));
    stdout(&out)
}

/// Every file under `dir` (outside `.git`) with its contents, sorted.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A repository whose `roles/` is Ansible's: `ward init --into .github/ward/`
/// puts ward's roles, skills and precedent log there, leaves `roles/` alone,
/// and a patient goes through every stage on the local forge with the
/// stand-in, its prompts carrying the skills included from the new place,
/// to a merged `main`. A second `--into` run writes nothing.
#[test]
fn init_into_a_folder_of_wards_own_runs_a_patient_to_discharge() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(root.join("roles/webserver/tasks")).unwrap();
    std::fs::write(root.join("roles/webserver/tasks/main.yml"), "- name: nginx\n").unwrap();
    std::fs::write(root.join("app.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::write(root.join("CHANGELOG.md"), "# Changes\n").unwrap();

    let said = ward_ok(root, &["init", "--into", ".github/ward/"]);
    assert!(said.contains("base branch: `main`"), "{said}");
    for file in
        [".github/ward/roles/fellow.md", ".github/ward/skills/plan-format.md", ".github/ward/precedents/log.yaml"]
    {
        assert!(root.join(file).is_file(), "{file} was not written");
    }
    for top in ["skills", "precedents"] {
        assert!(!root.join(top).exists(), "{top}/ was written at the top");
    }
    assert_eq!(std::fs::read_dir(root.join("roles")).unwrap().count(), 1, "roles/ is the repository's alone");
    assert_eq!(std::fs::read_to_string(root.join("roles/webserver/tasks/main.yml")).unwrap(), "- name: nginx\n");
    let text = std::fs::read_to_string(root.join(".github/ward.yml")).unwrap();
    assert!(
        text.contains(
            "\npaths:\n  roles: .github/ward/roles/\n  skills: .github/ward/skills/\n  precedents: .github/ward/precedents/\n"
        ),
        "{text}"
    );
    assert!(text.contains("    prompt: .github/ward/roles/fellow.md\n"), "{text}");
    assert!(text.contains("  log: .github/ward/precedents/log.yaml\n"), "{text}");
    let check = ward_ok(root, &["config", "check"]);
    assert!(check.contains("every role renders"), "{check}");
    let doctor = stdout(&ward(root, &["doctor"]));
    assert!(doctor.contains("11 skills in .github/ward/skills/"), "{doctor}");
    assert!(doctor.contains("entries in .github/ward/precedents/log.yaml"), "{doctor}");

    // A second run with the same folder refuses and changes nothing.
    let before = tree(root);
    let again = ward(root, &["init", "--into", ".github/ward/"]);
    assert_eq!(again.status.code(), Some(1), "{}", stdout(&again));
    assert!(stderr(&again).contains("already exists; ward will not overwrite an installation"), "{}", stderr(&again));
    assert!(tree(root) == before, "a second `ward init --into` changed files");

    // A patient through every stage, with a local CI and a person's review.
    std::fs::write(root.join(".github/ward.yml"), format!("{text}\nci:\n  command: \"test -f app.sh\"\n")).unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "the app and ward"]);
    ward_ok(root, &["admit", "--title", "app.sh prints hi", "--body", "`app.sh` should greet by name"]);
    let out = ward_ok(root, &["run"]);
    assert!(out.contains("rests at `ward:awaiting-review`"), "{out}");
    ward_ok(root, &["review", "1", "--approve"]);
    let out = ward_ok(root, &["run"]);
    assert!(out.contains("discharged -> ward:discharged"), "{out}");

    // The prompts carried the skills, included from .github/ward/skills/.
    let plan_format = std::fs::read_to_string(root.join(".github/ward/skills/plan-format.md")).unwrap();
    let skill_line = plan_format.lines().find(|l| l.len() > 30).expect("the skill has a line to look for");
    let runs = root.join(".ward/runs/1");
    let prompts: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .filter_map(|run| std::fs::read_to_string(run.path().join("prompt.md")).ok())
        .collect();
    assert!(prompts.len() >= 5, "{} prompts", prompts.len());
    assert!(prompts.iter().any(|p| p.contains(skill_line)), "no prompt carried `{skill_line}`");
    let chart = std::fs::read_to_string(root.join("charts/1.md")).unwrap();
    assert!(chart.contains("`.github/ward/skills/plan-format.md` asks for is there"), "{chart}");
    assert_eq!(std::fs::read_to_string(root.join("roles/webserver/tasks/main.yml")).unwrap(), "- name: nginx\n");
}

#[test]
fn init_into_refuses_a_folder_that_is_not_wards_and_a_place_outside_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(root.join("ops/skills")).unwrap();
    std::fs::write(root.join("ops/skills/deploy.md"), "ours\n").unwrap();
    let out = ward(root, &["init", "--into", "ops"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("ops/skills already exists and is not ward's (it holds `deploy.md`)"), "{err}");
    assert!(err.contains("give `--into` a folder of ward's own"), "{err}");
    assert!(!root.join(".github").exists() && !root.join("ops/roles").exists(), "nothing written");
    for (into, says) in [
        ("../elsewhere", "leaves the repository (`..`)"),
        ("/etc/ward", "is absolute"),
        (".ward/pipeline", "is under `.ward/`"),
        (".", "is the repository's top"),
    ] {
        let out = ward(root, &["init", "--into", into]);
        assert_eq!(out.status.code(), Some(1), "{into}");
        let err = stderr(&out);
        assert!(err.contains(&format!("--into: `{into}` {says}")), "{into}: {err}");
        assert!(!root.join(".github").exists(), "{into}: nothing written");
    }
}

// ---------------------------------------------------------------------------
// `ward init` on GitHub

const ACTION: &str = "wardhq/ward@0123456789abcdef0123456789abcdef01234567";

/// A clone of a GitHub repository with CI of its own, as pallets/click has
/// (`tests.yaml`, named `Tests`, on push and pull_request, no dispatch), and
/// a publishing workflow that is no CI.
fn click_like() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["remote", "add", "origin", "https://github.com/pallets/click.git"]);
    let workflows = root.join(".github/workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    std::fs::write(
        workflows.join("tests.yaml"),
        "name: Tests\non:\n  push:\n    branches: [main]\n  pull_request:\njobs:\n  tests:\n    runs-on: ubuntu-latest\n    \
         steps:\n      - run: echo tests\n",
    )
    .unwrap();
    std::fs::write(
        workflows.join("publish.yaml"),
        "name: Publish\non:\n  release:\n    types: [published]\njobs: {}\n",
    )
    .unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "the repository"]);
    dir
}

/// `ward init` in a clone of a GitHub repository (its remote says so):
/// ward.yml names the CI it found, the workflows are written adapted (the
/// action pinned by the full sha, never a build from source; the stage
/// woken after `Tests`; no merge queue workflow without `integration:`),
/// and init says the one line the CI lacks and where. The labels wait for
/// a token. A second run changes nothing; a workflow a person edited is
/// never overwritten, and is named with the difference.
#[test]
fn init_on_a_github_clone_installs_the_workflows_adapted_and_names_the_ci() {
    let dir = click_like();
    let root = dir.path();
    let said = ward_ok(root, &["init", "--action", ACTION]);
    for file in ["ward-stage.yml", "ward-sweep.yml", "ward-pipeline.yml", "ward-report.yml", "ward-commands.yml"] {
        let text = std::fs::read_to_string(root.join(".github/workflows").join(file)).unwrap();
        assert!(!text.contains("cargo build") && !text.contains("target/release"), "{file} builds ward:\n{text}");
        assert!(text.contains(&format!("uses: {ACTION} # v{}\n", env!("CARGO_PKG_VERSION"))), "{file}:\n{text}");
        assert!(said.contains(&format!("wrote .github/workflows/{file}")), "{said}");
    }
    assert!(!root.join(".github/workflows/ward-queue.yml").exists(), "no merge queue without `integration:`");
    let stage = std::fs::read_to_string(root.join(".github/workflows/ward-stage.yml")).unwrap();
    assert!(stage.contains("    workflows: [\"Tests\"]\n"), "{stage}");
    let config = std::fs::read_to_string(root.join(".github/ward.yml")).unwrap();
    assert!(config.contains("\nci:\n  workflows: [tests.yaml]\n"), "{config}");
    assert!(said.contains("ci: `tests.yaml` (Tests, on push, pull_request): ward starts it"), "{said}");
    assert!(
        said.contains(
            "ci: `tests.yaml` cannot be started by ward yet: add `workflow_dispatch:` under the `on:` of \
                       `.github/workflows/tests.yaml`"
        ),
        "{said}"
    );
    assert!(!said.contains("publish.yaml"), "a release workflow is no CI: {said}");
    assert!(said.contains("labels: not created (no WARD_TOKEN or GITHUB_TOKEN)"), "{said}");
    assert!(ward(root, &["config", "check"]).status.success());

    // Again: nothing changes, and it says so.
    let before = tree(root);
    let again = ward_ok(root, &["init", "--action", ACTION]);
    assert!(tree(root) == before, "a second `ward init` changed files");
    assert!(again.contains(".github/workflows/ward-stage.yml is as this ward writes it"), "{again}");

    // A person's edit is theirs: kept, named, the difference shown.
    let sweep = root.join(".github/workflows/ward-sweep.yml");
    let edited = std::fs::read_to_string(&sweep).unwrap().replace("*/30 * * * *", "*/10 * * * *");
    std::fs::write(&sweep, &edited).unwrap();
    let third = ward_ok(root, &["init", "--action", ACTION]);
    assert_eq!(std::fs::read_to_string(&sweep).unwrap(), edited, "an edited workflow was overwritten");
    assert!(third.contains(".github/workflows/ward-sweep.yml differs from what this ward writes"), "{third}");
    assert!(third.contains("*/10 * * * *") && third.contains("*/30 * * * *"), "the difference is shown: {third}");

    // With `integration:`, the merge queue's workflow too.
    let with = config.replace("\nci:\n", "\nintegration:\n  command: [\"true\"]\n\nci:\n");
    std::fs::write(root.join(".github/ward.yml"), with).unwrap();
    let fourth = ward_ok(root, &["init", "--action", ACTION]);
    assert!(fourth.contains("wrote .github/workflows/ward-queue.yml"), "{fourth}");
}

/// Without a release to pin (a ward built from source, no `--action`),
/// init writes no workflow that would build ward: it says what to pass,
/// and writes nothing at all.
#[test]
fn init_for_github_without_a_release_to_pin_writes_nothing() {
    let dir = click_like();
    let before = tree(dir.path());
    let out = ward(dir.path(), &["init", "--forge", "github"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stderr(&out).contains("pass `--action OWNER/NAME@<the 40-hex commit of the tag v"), "{}", stderr(&out));
    assert!(tree(dir.path()) == before, "something was written");
    let loose = ward(dir.path(), &["init", "--action", "wardhq/ward@v0.1.0"]);
    assert!(stderr(&loose).contains("is not the ward action pinned by a full commit sha"), "{}", stderr(&loose));
    // `--forge local` keeps the local installation, remote or not.
    let local = ward(dir.path(), &["--forge", "local", "init"]);
    assert!(local.status.success(), "{}", stderr(&local));
    assert!(!dir.path().join(".github/workflows/ward-stage.yml").exists());
}
