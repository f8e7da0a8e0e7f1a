//! The swarm proof inside ward: `ward demo --swarm`, through the binary.
//! Three patients treated at once on the local forge, one merge queue; two
//! add a line at the same place of `greet.sh` (a conflict), the third pins
//! greet's output in the check (which fails only combined with another).
//! Once without emulators, once with the `ward-docstore` test image on the
//! treating and reviewing stages (checkpoints) and on every queue check.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use support::workspace::docstore_image;
use support::{git, stderr, stdout, ward_bin};

/// `ward demo --swarm --dir DIR` and `extra` arguments, with only PATH,
/// HOME (the temporary folder) and WARD_HOME from outside: (stdout, how long).
fn swarm(tmp: &Path, dir: &Path, ward_home: &Path, extra: &[&str]) -> (String, std::time::Duration) {
    let started = Instant::now();
    let out = Command::new(ward_bin())
        .args(["demo", "--swarm", "--dir"])
        .arg(dir)
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", tmp)
        .env("WARD_HOME", ward_home)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    (text, started.elapsed())
}

/// What both swarms end with: all three on `main` by the routes the
/// proof asks for, no worktree or integration checkout left.
fn assert_all_three_reach_main(text: &str, dir: &Path) {
    assert!(text.contains("3 of 3 patients discharged. Worktrees left: 0; integration checkouts left: 0."), "{text}");
    // Where each went: #2 through the resolving stage, #3 back to treatment.
    assert!(text.contains("#2 conflicts with the base (combined with #1): to resolve"), "{text}");
    assert!(text.contains("resolve: resolved -> ward:code-review"), "{text}");
    assert!(text.contains("#3 failed the integration check combined with #1: back to treatment"), "{text}");
    for n in 1..=3 {
        assert!(text.contains(&format!("#{n} integrated and merged")), "#{n}:\n{text}");
    }
    // main holds all three changes, in a linear history, and passes its check.
    let greet = git(dir, &["show", "main:greet.sh"]);
    for line in ["echo \"Hello, $1!\"", "echo \"Nice to meet you, $1.\"", "echo \"Have a good day, $1.\""] {
        assert!(greet.contains(line), "{line} is on main:\n{greet}");
    }
    let check = Command::new("sh").arg("check.sh").current_dir(dir).output().unwrap();
    assert!(check.status.success(), "main's check passes: {}{}", stdout(&check), stderr(&check));
    assert_eq!(git(dir, &["show", "main:greeting.txt"]).lines().count(), 3, "the pin records all three lines");
    assert_eq!(git(dir, &["rev-list", "--merges", "main"]), "", "no merge commit on main");
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
    assert_eq!(git(dir, &["worktree", "list"]).lines().count(), 1, "only the repository's own checkout");
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
    let (text, took) = swarm(tmp.path(), &dir, &tmp.path().join("ward-home"), &[]);
    eprintln!("the swarm without emulators took {took:?}");
    assert_all_three_reach_main(&text, &dir);
    assert!(text.contains("No emulator is configured"), "{text}");
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { files_under(&e.path()) } else { vec![e.path()] }).collect()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Containers Docker knows with `ward.installation=<id>` (running or not).
fn containers_of_installation(id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", &format!("label=ward.installation={id}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "docker ps: {}", stderr(&out));
    stdout(&out).lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// Removes what a failing run left of this installation (the test asserts
/// ward removed everything first).
struct InstallationJanitor(String);

impl Drop for InstallationJanitor {
    fn drop(&mut self) {
        for id in containers_of_installation(&self.0) {
            let _ = Command::new("docker").args(["rm", "-f", "-v", &id]).output();
        }
    }
}

/// The same swarm with the `ward-docstore` image as the emulator of treat,
/// resolve and code-review (checkpoints built in for it) and of every
/// integration check. Each treatment writes its patient's document to the
/// emulator (the stand-in runs the step the issue spells out); code review
/// starts from the checkpoint and its prompt shows the document as the
/// data diff, after the resolving stage's rebase too. At the end nothing of
/// the run is left: no container of this installation, no checkpoint file,
/// no worktree; and the run folders prove each of those existed.
#[test]
fn the_swarm_with_emulators_and_checkpoints_reaps_every_container_checkpoint_and_worktree() {
    let image = docstore_image();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, ward_home) = (tmp.path().join("swarm"), tmp.path().join("ward-home"));
    // The installation's id, set before the run (ward keeps an existing
    // one), so that even a failing run leaves nothing of it behind.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let installation = format!("swarm-test-{}-{nanos}", std::process::id());
    std::fs::create_dir_all(&ward_home).unwrap();
    std::fs::write(ward_home.join("installation-id"), &installation).unwrap();
    let _janitor = InstallationJanitor(installation.clone());
    let (text, took) = swarm(tmp.path(), &dir, &ward_home, &["--emulator", image]);
    eprintln!("the swarm with emulators took {took:?}");
    assert_all_three_reach_main(&text, &dir);
    assert!(text.contains(&format!("Emulator `{image}` on treat, resolve, code-review")), "{text}");

    // Nothing left: containers (asked of Docker by ward's label), checkpoint
    // files, worktrees (git's list above, and the folders), checkouts.
    assert_eq!(containers_of_installation(&installation), Vec::<String>::new(), "containers left");
    assert_eq!(files_under(&ward_home.join("checkpoints")), Vec::<std::path::PathBuf>::new(), "checkpoints left");
    assert!(text.contains("checkpoints left: 0."), "{text}");
    let worktrees: Vec<_> = std::fs::read_dir(ward_home.join("worktrees"))
        .unwrap()
        .flatten()
        .flat_map(|repo| std::fs::read_dir(repo.path()).unwrap().flatten().map(|e| e.path()).collect::<Vec<_>>())
        .collect();
    assert_eq!(worktrees, Vec::<std::path::PathBuf>::new(), "worktree folders left");
    assert_eq!(files_under(&dir.join(".ward/integration")), Vec::<std::path::PathBuf>::new());

    // They existed. Each stage run's report: its container removed and
    // verified, and what it did with checkpoints.
    let mut by_stage: std::collections::BTreeMap<String, Vec<serde_json::Value>> = Default::default();
    for report in files_under(&dir.join(".ward/runs")).into_iter().filter(|p| p.ends_with("report.json")) {
        let r = json(&report);
        let stage = r["stage"].as_str().unwrap_or_default().to_string();
        let containers = r["containers"].as_array().cloned().unwrap_or_default();
        if ["treat", "resolve", "code-review"].contains(&stage.as_str()) {
            assert_eq!(containers.len(), 1, "{stage} ran with its emulator: {r}");
            assert_eq!(containers[0]["removed_verified"], true, "{r}");
            assert_eq!(containers[0]["image"], image, "{r}");
        } else {
            assert_eq!(containers, Vec::<serde_json::Value>::new(), "{stage} has no emulator: {r}");
        }
        by_stage.entry(stage).or_default().push(r);
    }
    // A treatment each, and again for each send-back; one resolution; each
    // saved a checkpoint (the resolution's data unchanged, on its new head).
    let queue: Vec<&str> = text.lines().filter(|l| l.starts_with("   #")).collect();
    let sent_back = queue.iter().filter(|l| l.ends_with("back to treatment")).count();
    assert!(sent_back >= 1, "{text}");
    assert_eq!((by_stage["treat"].len(), by_stage["resolve"].len()), (3 + sent_back, 1), "{:?}", by_stage.keys());
    let savers = [&by_stage["treat"][..], &by_stage["resolve"][..]].concat();
    for r in &savers {
        let saved = r["data"]["saved"].as_str().unwrap_or_else(|| panic!("a checkpoint was saved: {r}"));
        assert!(saved.starts_with(&ward_home.join("checkpoints").display().to_string()), "{saved}");
    }
    // Every code review started from a checkpoint, and its prompt carried
    // the patient's document as the data diff.
    let reviews = &by_stage["code-review"];
    assert_eq!(reviews.len(), savers.len(), "one per treatment and one after the resolution");
    for r in reviews {
        assert!(r["data"]["loaded"].is_string(), "code review started from a checkpoint: {r}");
    }
    let documents = [(1, "nice-to-meet"), (2, "good-day"), (3, "pinned-greeting")];
    let mut prompts_with_data = 0;
    for prompt in files_under(&dir.join(".ward/runs")).into_iter().filter(|p| p.ends_with("prompt.md")) {
        let text = std::fs::read_to_string(&prompt).unwrap();
        let Some(section) = text.split("## What the change did to the data").nth(1) else { continue };
        let issue: u64 =
            prompt.parent().unwrap().parent().unwrap().file_name().unwrap().to_str().unwrap().parse().unwrap();
        let document = documents.iter().find(|(n, _)| *n == issue).unwrap().1;
        let fence = section.find("```diff\n").expect("fenced as a diff");
        let line = section[fence..].lines().nth(1).unwrap();
        assert!(line.starts_with(&format!("+ greet\tchanges\t{document}\tgreet\t")), "#{issue}: {line}");
        prompts_with_data += 1;
    }
    assert_eq!(prompts_with_data, reviews.len(), "every code review's prompt shows the data");

    // Each integration check had a fresh container of its own: one run
    // folder with its diagnostics per check the queue ran, all this
    // installation's, none left.
    let checks =
        queue.iter().filter(|l| l.contains("integrated and merged") || l.contains("failed the integration check"));
    let checks = checks.count();
    let inspected: Vec<_> = files_under(&ward_home.join("runs"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".inspect.json"))
        .collect();
    assert!(checks >= 4, "three merges and a failure at least: {queue:?}");
    assert_eq!(inspected.len(), checks, "{inspected:?}");
    for file in &inspected {
        let labels = &json(file)["Config"]["Labels"];
        assert_eq!(labels["ward.stage"], "merge-queue", "{labels}");
        assert_eq!(labels["ward.installation"], installation.as_str(), "{labels}");
    }
}
