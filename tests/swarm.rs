//! The swarm proof inside ward: `ward demo --swarm`, through the binary.
//! Three patients treated at once on the local forge, one merge queue; two
//! add a line at the same place of `greet.sh` (a conflict), the third pins
//! greet's output in the check (which fails only combined with another).

mod support;

use std::process::Command;

use support::{stderr, stdout, ward_bin};

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// `ward run` (the demo drains it, and approves as the person what waits
/// for review) ends with all three on `main`: the conflict resolved in the
/// resolving stage by a rebase and reviewed, the combination failure sent
/// back naming the patient it was combined with, treated again and
/// re-queued; no worktree or integration checkout left, no merge commit.
#[test]
fn three_patients_at_once_reach_main_through_the_resolve_stage_and_the_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("swarm");
    let out = Command::new(ward_bin())
        .args(["demo", "--swarm", "--dir"])
        .arg(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("3 of 3 patients discharged. Worktrees left: 0; integration checkouts left: 0."), "{text}");
    // Where each went: #2 through the resolving stage, #3 back to treatment.
    assert!(text.contains("#2 conflicts with the base (combined with #1): to resolve"), "{text}");
    assert!(text.contains("resolve: resolved -> ward:code-review"), "{text}");
    assert!(text.contains("#3 failed the integration check combined with #1: back to treatment"), "{text}");
    for n in 1..=3 {
        assert!(text.contains(&format!("#{n} integrated and merged")), "#{n}:\n{text}");
    }
    // main holds all three changes, in a linear history, and passes its check.
    let greet = git(&dir, &["show", "main:greet.sh"]);
    for line in ["echo \"Hello, $1!\"", "echo \"Nice to meet you, $1.\"", "echo \"Have a good day, $1.\""] {
        assert!(greet.contains(line), "{line} is on main:\n{greet}");
    }
    let check = Command::new("sh").arg("check.sh").current_dir(&dir).output().unwrap();
    assert!(check.status.success(), "main's check passes: {}{}", stdout(&check), stderr(&check));
    assert_eq!(git(&dir, &["show", "main:greeting.txt"]).lines().count(), 3, "the pin records all three lines");
    assert_eq!(git(&dir, &["rev-list", "--merges", "main"]), "", "no merge commit on main");
    // The resolution was a rebase onto main, reviewed at its head.
    let chart = std::fs::read_to_string(dir.join("charts/2.md")).unwrap();
    let conflict = chart.find("Integration conflict").expect("the queue's conflict note");
    assert!(chart[conflict..].contains("`greet.sh`") && chart[conflict..].contains("The plan of #1"), "{chart}");
    let resolved = chart.find("rebased onto `main`; conflicts resolved in `greet.sh`").expect("the resolution");
    assert!(resolved > conflict, "{chart}");
    let review = chart[resolved..].find("<!-- WARD:CODE_REVIEW").map(|i| &chart[resolved + i..]).expect("reviewed");
    assert!(review.contains("## Verdict\napprove"), "{review}");
    // The combination failure named its partner and quoted the check's output.
    let chart = std::fs::read_to_string(dir.join("charts/3.md")).unwrap();
    assert!(chart.contains("Integration failed") && chart.contains("combined with: #1"), "{chart}");
    assert!(chart.contains("> Nice to meet you, Ada."), "the diff the check printed:\n{chart}");
    // Every patient's worktree went with its discharge; the branches are merged.
    assert_eq!(git(&dir, &["worktree", "list"]).lines().count(), 1, "only the repository's own checkout");
}
