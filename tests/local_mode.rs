//! Local mode end to end through the `ward` binary, on a git repository the
//! test builds: the treatment's head is the local pull request, the local CI
//! (`ci.command`) runs on it, a person reviews with `ward review`, and a
//! passed audit merges into `main`. Red CI and changes requested go back to
//! treatment with what failed in the prompt.

mod support;

use support::{Sandbox, git, stderr, stdout};

/// `ward init` in a git repository on `main` whose CI is `ci_command`.
fn repository(ci_command: &str) -> Sandbox {
    let s = Sandbox::new();
    s.write("app.sh", "#!/bin/sh\necho hi\n");
    s.write(".github/ward.yml", &format!("{}\nci:\n  command: {ci_command:?}\n", s.read(".github/ward.yml")));
    git(s.root(), &["init", "-q", "-b", "main"]);
    git(s.root(), &["add", "-A"]);
    git(s.root(), &["commit", "-qm", "the app and ward"]);
    s
}

fn ward_ok(s: &Sandbox, args: &[&str]) -> String {
    let out = s.ward(args);
    assert!(out.status.success(), "ward {args:?}: {}\n{}", stdout(&out), stderr(&out));
    stdout(&out)
}

fn chart(s: &Sandbox) -> String {
    s.read("charts/1.md")
}

/// The prompts of issue 1's runs of `stage`, oldest first.
fn prompts(s: &Sandbox, stage: &str) -> Vec<String> {
    let dir = s.root().join(".ward/runs/1");
    let mut runs: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    runs.sort();
    runs.iter()
        .filter(|run| {
            let visit = std::fs::read_to_string(run.join("visit.json")).unwrap_or_default();
            visit.contains(&format!("\"stage\": \"{stage}\""))
        })
        .map(|run| std::fs::read_to_string(run.join("prompt.md")).unwrap())
        .collect()
}

#[test]
fn a_local_patient_waits_for_a_review_then_merges_into_main() {
    let s = repository("echo checking; test -f app.sh");
    let base = git(s.root(), &["rev-parse", "main"]);
    ward_ok(&s, &["admit", "--title", "app prints hi", "--body", "it should print hello"]);
    let out = ward_ok(&s, &["run"]);
    assert!(
        out.contains("waiting -> ward:awaiting-review") && out.contains("rests at `ward:awaiting-review`"),
        "{out}"
    );
    // The local pull request is the branch's head, and the local CI ran on it.
    let head = git(s.root(), &["rev-parse", "ward/issue-1"]);
    let pull: serde_json::Value = serde_json::from_str(&s.read(".ward/forge/pulls/1.json")).unwrap();
    assert_eq!(pull["pull"]["head_sha"], head.as_str());
    assert_eq!(pull["commits"].as_array().unwrap().len(), 1, "the branch's one commit over main");
    let ci: serde_json::Value = serde_json::from_str(&s.read(&format!(".ward/forge/ci/{head}.json"))).unwrap();
    assert_eq!(ci["state"], "success");
    let audit = stdout(&s.ward(&["audit", "1"]));
    assert!(audit.contains("CI passed for") && audit.contains("local-ci: success"), "{audit}");
    assert!(audit.contains("not yet: no approving review"), "{audit}");

    // A person approves; the waiting patient is queued and `ward run` merges.
    let said = ward_ok(&s, &["review", "1", "--approve"]);
    assert!(said.contains("review by `tester` (admin) recorded on pull request #1"), "{said}");
    assert!(said.contains("queued: `ward run` audits it again"), "{said}");
    let out = ward_ok(&s, &["run"]);
    assert!(out.contains("discharged -> ward:discharged"), "{out}");
    assert_eq!(git(s.root(), &["rev-parse", "main"]), head, "main fast-forwarded to the treated head");
    assert_ne!(head, base);
    assert!(s.issue_json(1)["state"] == "closed");
}

#[test]
fn changes_requested_go_back_to_treatment_with_the_text() {
    let s = repository("true");
    ward_ok(&s, &["admit", "--title", "app prints hi", "--body", "it should print hello"]);
    ward_ok(&s, &["run"]);
    let said = ward_ok(&s, &["review", "1", "--request-changes", "Also print the name the user gave."]);
    assert!(said.contains("queued"), "{said}");
    let out = s.ward(&["run"]);
    let out = stdout(&out);
    assert!(out.contains("audit-failed -> ward:treat"), "{out}");
    let chart = chart(&s);
    assert!(chart.contains("Also print the name the user gave."), "the checklist quotes the review: {chart}");
    let treats = prompts(&s, "treat");
    assert_eq!(treats.len(), 2, "treated twice");
    assert!(treats[1].contains("Also print the name the user gave."), "the second treatment reads it");
    assert!(!treats[0].contains("Also print the name the user gave."));
}

#[test]
fn red_local_ci_goes_back_to_treatment_with_the_failing_output() {
    let s = repository("echo 'boom: 3 tests failed' >&2; exit 1");
    ward_ok(&s, &["admit", "--title", "app prints hi", "--body", "it should print hello"]);
    let out = stdout(&s.ward(&["run"]));
    assert!(out.contains("audit-failed -> ward:treat"), "{out}");
    let head = git(s.root(), &["rev-parse", "ward/issue-1"]);
    let ci: serde_json::Value = serde_json::from_str(&s.read(&format!(".ward/forge/ci/{head}.json"))).unwrap();
    assert_eq!(ci["state"], "failure");
    assert_eq!(ci["failures"][0]["name"], "local-ci");
    let log = ci["failures"][0]["url"].as_str().unwrap();
    assert!(log.ends_with("ci.log") && std::fs::read_to_string(log).unwrap().contains("boom"), "{log}");
    let chart = chart(&s);
    assert!(chart.contains("`local-ci`: failure") && chart.contains("boom: 3 tests failed"), "{chart}");
    let treats = prompts(&s, "treat");
    assert!(treats.len() >= 2 && treats[1].contains("boom: 3 tests failed"), "the next treatment reads the output");
    // The pipeline's send-back limit, not a loop, ends it: the patient is the chiefs'.
    assert!(s.labels(1).iter().any(|l| l == "ward:chief"), "{:?}", s.labels(1));
}

#[test]
fn a_review_without_a_pull_request_is_refused_and_changes_nothing() {
    let s = repository("true");
    ward_ok(&s, &["admit", "--title", "app prints hi", "--body", "it should print hello"]);
    let out = s.ward(&["review", "1", "--approve"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("#1 has no pull request on the local forge"), "{}", stderr(&out));
    assert!(!s.root().join(".ward/forge/pulls").exists());
    let empty = s.ward(&["review", "1", "--request-changes", " "]);
    assert_eq!(empty.status.code(), Some(2));
    let unknown = s.ward(&["review", "7", "--approve"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("issue #7 does not exist"), "{}", stderr(&unknown));
}
