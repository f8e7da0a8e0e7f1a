//! Patients side by side: the cap on agents at once (`capacity` in
//! ward.yml) on the local forge, through the `ward` binary.

mod support;

use std::process::{Command, Stdio};

use support::{Sandbox, stderr, stdout, ward_bin};

/// Each agent run writes when it starts and ends (nanoseconds), then is
/// the stand-in; the triage holds its slot a while.
const TIMED_AGENT: &str = r#"ward=$1
log=$2
echo "start $WARD_ISSUE $WARD_STAGE $(date +%s%N)" >> "$log"
[ "$WARD_STAGE" = admit ] && sleep 1
echo "end $WARD_ISSUE $WARD_STAGE $(date +%s%N)" >> "$log"
exec "$ward" stand-in
"#;

fn capped(s: &Sandbox, max: u32) -> std::path::PathBuf {
    s.write("agent.sh", TIMED_AGENT);
    let (script, log) = (s.root().join("agent.sh"), s.root().join("agents.log"));
    s.edit_config(
        r#"command: ["{ward}", "stand-in"]"#,
        &format!(r#"command: ["sh", "{}", "{{ward}}", "{}"]"#, script.display(), log.display()),
    );
    s.edit_config(
        "  ward:lockdown:",
        "  ward:queued:         { color: \"ededed\", description: \"Waiting for an agent slot\" }\n  ward:lockdown:",
    );
    s.edit_config("\ndecomposition:\n", &format!("\ncapacity:\n  max_concurrent: {max}\n\ndecomposition:\n"));
    log
}

/// (issue, stage, start, end) of every agent run in the log.
fn runs(log: &str) -> Vec<(String, String, u128, u128)> {
    let mut open = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, issue, stage, at] = parts[..] else { panic!("bad log line {line}") };
        let at: u128 = at.parse().unwrap();
        match what {
            "start" => assert!(open.insert(issue.to_string(), (stage.to_string(), at)).is_none(), "{log}"),
            _ => {
                let (stage, start) = open.remove(issue).unwrap();
                out.push((issue.to_string(), stage, start, at));
            }
        }
    }
    out
}

/// With `max_concurrent: 1`, two admissions started at the same moment
/// never run agents at the same time: the second rests at `ward:queued`
/// with a note, the first's end starts it, and `ward run` takes both to
/// rest. No slot is held afterwards.
#[test]
fn with_one_slot_two_admissions_never_run_agents_at_once_and_both_finish() {
    let s = Sandbox::new();
    let log = capped(&s, 1);
    for title in ["first", "second"] {
        let out = s.ward(&["admit", "--title", title, "--body", "b"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // Two stage runs at once, as two workflow jobs would be.
    let spawn = |issue: &str| {
        Command::new(ward_bin())
            .args(["stage", "--issue", issue, "--label", "ward:admit"])
            .current_dir(s.root())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", s.root())
            .env("USER", "tester")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (one, two) = (spawn("1"), spawn("2"));
    let outs = [one.wait_with_output().unwrap(), two.wait_with_output().unwrap()];
    let said: String = outs.iter().map(|o| format!("{}{}", stdout(o), stderr(o))).collect();
    assert!(outs.iter().all(|o| o.status.success()), "{said}");
    assert!(said.contains("-> ward:queued"), "one of them was queued:\n{said}");
    let out = s.ward(&["run"]);
    let text = stdout(&out);
    // Exit 4: the send-back limit refused both (a bare local forge has no
    // review and no CI, so the audit never passes).
    assert_eq!(out.status.code(), Some(4), "{text}\n{}", stderr(&out));
    for n in [1, 2] {
        assert_eq!(s.labels(n), ["ward:chief"], "#{n} rests where a bare local forge's patients rest:\n{text}");
    }
    let runs = runs(&std::fs::read_to_string(&log).unwrap());
    let admits = runs.iter().filter(|r| r.1 == "admit").count();
    assert_eq!(admits, 2, "both patients were triaged once: {runs:?}");
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            assert!(a.3 <= b.2 || b.3 <= a.2, "two agents ran at once: {a:?} and {b:?}");
        }
    }
    let charts = format!("{}{}", s.read("charts/1.md"), s.read("charts/2.md"));
    assert!(charts.contains("Queued at `ward:queued` before stage `admit`: 1 agents run now"), "{charts}");
    assert!(charts.contains("An agent slot is free: the patient leaves `ward:queued` for `ward:admit`"), "{charts}");
    let state = s.read("charts/0.md");
    assert!(!state.contains("\"running\""), "no slot is held after the runs:\n{state}");
}

/// A slot held by a run that crashed (it never freed it) counts for
/// nobody once its stage's time limit and the grace are over: the queued
/// patient is then started by whoever looks next (the sweep), and a new
/// run gets the slot.
#[tokio::test]
async fn a_crashed_runs_slot_expires_and_the_queue_moves_on() {
    use ward::forge::{Forge, IssueNumber, NewIssue};
    use ward::state::slots::{self, GRACE, Take};
    let s = Sandbox::new();
    capped(&s, 1);
    let config = ward::config::Config::load(s.root()).unwrap();
    let forge = ward::forge::local::LocalForge::new(s.root(), &config.engine_account);
    for title in ["first", "second"] {
        forge.admit(NewIssue { title: title.into(), body: "b".into(), labels: vec!["ward:queued".into()] }).unwrap();
    }
    let admit = config.stage("admit").unwrap();
    let now = chrono::Utc::now();
    let take = |issue: u64, run: &'static str, at| {
        let (forge, config) = (&forge, &config);
        async move { slots::take(forge, config, IssueNumber(issue), admit, run, at).await.unwrap() }
    };
    assert_eq!(take(1, "crashed", now).await, Take::Granted);
    assert!(matches!(take(2, "r2", now).await, Take::Full(why) if why.contains("1 agents run now")));
    // Nothing frees the slot before it expires: the queue waits.
    assert_eq!(slots::free(&forge, &config, None, now).await.unwrap(), None);
    let expired = now + chrono::Duration::from_std(admit.config.time_limit + GRACE).unwrap();
    assert_eq!(slots::free(&forge, &config, None, expired).await.unwrap(), Some(IssueNumber(2)));
    let issue = forge.issue(IssueNumber(2)).await.unwrap();
    assert_eq!(issue.labels, ["ward:admit"], "the queued patient went back to its stage");
    assert_eq!(take(2, "r2", expired).await, Take::Granted);
}

/// A sandbox whose agent is the shell script `agent` (given `{ward}`), with
/// the merge queue's label declared.
fn queue_sandbox(agent: &str) -> Sandbox {
    let s = Sandbox::new();
    s.write("agent.sh", agent);
    let script = s.root().join("agent.sh").display().to_string();
    s.edit_config(r#"command: ["{ward}", "stand-in"]"#, &format!(r#"command: ["sh", "{script}", "{{ward}}"]"#));
    s.edit_config(
        "  ward:lockdown:",
        "  ward:merge-queue:    { color: \"ededed\", description: \"Audited; waiting for the merge queue\" }\n  ward:lockdown:",
    );
    s
}

/// In treatment each patient adds `file-<issue>.txt`; the stand-in otherwise.
const FILE_AGENT: &str = r#"ward=$1
if [ "$WARD_MODE" = treat ]; then echo "patient $WARD_ISSUE" > "file-$WARD_ISSUE.txt"; fi
exec "$ward" stand-in
"#;

/// The merge queue: discharge enqueues; `ward run`'s drain integrates the
/// first patient (its check passes alone) and merges it, then the second,
/// whose check fails only combined with the first: it goes back to
/// treatment with the output and the first patient named, unmerged.
#[tokio::test]
async fn the_merge_queue_merges_what_passes_and_sends_back_what_breaks_only_combined() {
    use support::rules::{git_init, hospital, label_of, settle};
    use ward::forge::{IssueNumber, NewIssue, PullState};
    let s = queue_sandbox(FILE_AGENT);
    let check = "if [ -e file-1.txt ] && [ -e file-2.txt ]; then echo 'file-1 and file-2 together break the build' >&2; exit 1; fi";
    s.edit_config(
        "\ndecomposition:\n",
        &format!(
            "\nintegration:\n  command: [\"sh\", \"-c\", {}]\n\ndecomposition:\n",
            serde_json::to_string(check).unwrap()
        ),
    );
    git_init(s.root());
    let (h, forge) = hospital(&s, "reporter");
    for n in [1, 2] {
        forge
            .admit(NewIssue {
                title: format!("Patient {n}"),
                body: "Add a file.".into(),
                labels: vec!["ward:admit".into()],
            })
            .unwrap();
        let results = settle(&h, &forge, IssueNumber(n), 30).await;
        assert_eq!(label_of(&forge, n), "ward:merge-queue", "#{n} is enqueued, not merged: {results:#?}");
        assert_eq!(forge.read_pull(n).unwrap().pull.unwrap().state, PullState::Open);
    }
    // A checkout a crashed run left is cleared before the next is made.
    s.write(".ward/integration/crashed/leftover.txt", "x");
    let drained = ward::runner::drain(&h, &forge, 40, &mut |_, _| {}).await.unwrap();
    assert_eq!(drained.integrated.len(), 2, "{:#?}", drained.integrated);
    assert!(drained.integrated[0].starts_with("#1 integrated and merged"), "{:#?}", drained.integrated);
    assert!(
        drained.integrated[1].contains("#2 failed the integration check combined with #1"),
        "{:#?}",
        drained.integrated
    );
    assert_eq!(label_of(&forge, 1), "ward:discharged");
    assert_eq!(forge.read_pull(1).unwrap().pull.unwrap().state, PullState::Merged);
    assert_ne!(forge.read_pull(2).unwrap().pull.unwrap().state, PullState::Merged, "#2 is not merged");
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(2))).unwrap();
    assert!(chart.contains("Integration failed") && chart.contains("combined with: #1"), "{chart}");
    assert!(chart.contains("file-1 and file-2 together break the build"), "the output is quoted:\n{chart}");
    let files = std::process::Command::new("git")
        .args(["-C", s.root().to_str().unwrap(), "ls-tree", "-r", "--name-only", "HEAD"])
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&files.stdout);
    assert!(files.contains("file-1.txt") && !files.contains("file-2.txt"), "{files}");
    assert!(!s.root().join(".ward/integration").read_dir().is_ok_and(|mut d| d.next().is_some()), "worktrees reaped");
}

/// In treatment each patient writes its own line into the same new file.
const SAME_FILE_AGENT: &str = r#"ward=$1
if [ "$WARD_MODE" = treat ]; then echo "patient $WARD_ISSUE was here" > shared.txt; fi
exec "$ward" stand-in
"#;

/// Two patients change the same file: the first merges, the second's
/// conflict goes to the resolving stage with the conflicting versions and
/// the first patient's plan in its chart (which the fellow's prompt
/// carries), and is not merged by the queue.
#[tokio::test]
async fn a_conflict_in_the_merge_queue_goes_back_with_the_hunks_and_the_other_plan() {
    use support::rules::{git_init, hospital, label_of, settle};
    use ward::forge::{IssueNumber, NewIssue, PullState};
    let s = queue_sandbox(SAME_FILE_AGENT);
    s.edit_config("\ndecomposition:\n", "\nintegration:\n  command: [\"true\"]\n\ndecomposition:\n");
    git_init(s.root());
    let (h, forge) = hospital(&s, "reporter");
    for n in [1, 2] {
        let new = NewIssue { title: format!("Patient {n}"), body: "Sign.".into(), labels: vec!["ward:admit".into()] };
        forge.admit(new).unwrap();
        settle(&h, &forge, IssueNumber(n), 30).await;
        assert_eq!(label_of(&forge, n), "ward:merge-queue");
    }
    let drained = ward::runner::drain(&h, &forge, 40, &mut |_, _| {}).await.unwrap();
    assert!(drained.integrated[0].starts_with("#1 integrated and merged"), "{:#?}", drained.integrated);
    assert!(
        drained.integrated[1].contains("#2 conflicts with the base (combined with #1): to resolve"),
        "{:#?}",
        drained.integrated
    );
    assert_ne!(forge.read_pull(2).unwrap().pull.unwrap().state, PullState::Merged);
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(2))).unwrap();
    assert!(chart.contains("Integration conflict") && chart.contains("`shared.txt`"), "{chart}");
    assert!(chart.contains("patient 1 was here") && chart.contains("patient 2 was here"), "both sides:\n{chart}");
    assert!(chart.contains("The plan of #1, merged before this patient"), "{chart}");
}

/// A pipeline without a resolving stage still gives a conflict an owner:
/// the treating stage, with the same note.
#[tokio::test]
async fn without_a_resolve_stage_a_conflict_goes_back_to_treatment() {
    use support::rules::{git_init, hospital, label_of, settle};
    use ward::forge::{IssueNumber, NewIssue};
    let s = queue_sandbox(SAME_FILE_AGENT);
    let text = s.read(".github/ward.yml");
    let start = text.find("  # The merge queue (`integration:`) sends").expect("the resolve stage");
    let end = text[start..].find("\nroles:").map(|e| start + e).unwrap();
    s.edit_config(&text[start..end], "");
    s.edit_config("\ndecomposition:\n", "\nintegration:\n  command: [\"true\"]\n\ndecomposition:\n");
    git_init(s.root());
    let (h, forge) = hospital(&s, "reporter");
    assert!(h.config.resolving_stage().is_none());
    for n in [1, 2] {
        let new = NewIssue { title: format!("Patient {n}"), body: "Sign.".into(), labels: vec!["ward:admit".into()] };
        forge.admit(new).unwrap();
        settle(&h, &forge, IssueNumber(n), 30).await;
        assert_eq!(label_of(&forge, n), "ward:merge-queue");
    }
    let drained = ward::runner::drain(&h, &forge, 40, &mut |_, _| {}).await.unwrap();
    assert!(
        drained.integrated[1].contains("#2 conflicts with the base (combined with #1): to treatment"),
        "{:#?}",
        drained.integrated
    );
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(2))).unwrap();
    let conflict = chart.find("Integration conflict").expect("the conflict note");
    // The treating stage ran on it after the conflict (the drain goes on).
    assert!(chart[conflict..].contains("<!-- WARD:TREATMENT_NOTE run="), "{chart}");
    assert!(chart[conflict..].contains("stage=treat role=fellow"), "{chart}");
}

/// In treatment each patient appends its own line to the same tracked file.
const APPEND_AGENT: &str = r#"ward=$1
if [ "$WARD_MODE" = treat ]; then echo "patient $WARD_ISSUE was here" >> shared.txt; fi
exec "$ward" stand-in
"#;

/// Without `integration:`, two patients treated side by side whose changes
/// meet in one file: the first merges; the second's direct merge conflicts,
/// so it goes to the resolving stage with the conflicting file named (not
/// an error that leaves it waiting for nobody), is rebased there, reviewed
/// again, and reaches main with both lines.
#[tokio::test]
async fn without_a_merge_queue_a_conflict_at_discharge_goes_to_the_resolving_stage_and_then_reaches_main() {
    use support::rules::{git_init, hospital, label_of, run, settle};
    use ward::forge::{IssueNumber, NewIssue, PullState};
    use ward::simulate::{PullRequestScript, play_people};
    use ward::stage::StageRequest;
    let s = queue_sandbox(APPEND_AGENT);
    s.write("shared.txt", "the first line\n");
    git_init(s.root());
    let (h, forge) = hospital(&s, "reporter");
    assert!(h.config.integration.is_none() && h.config.resolving_stage().is_some());
    // Both are treated and reviewed before either is merged.
    for n in [1, 2] {
        let new = NewIssue { title: format!("Patient {n}"), body: "Sign.".into(), labels: vec!["ward:admit".into()] };
        forge.admit(new).unwrap();
        for _ in 0..20 {
            if label_of(&forge, n) == "ward:discharge" {
                break;
            }
            run(&h, &StageRequest::new(IssueNumber(n))).await;
        }
        assert_eq!(label_of(&forge, n), "ward:discharge", "#{n} waits for its audit");
    }
    settle(&h, &forge, IssueNumber(1), 10).await;
    assert_eq!(label_of(&forge, 1), "ward:discharged");
    play_people(&forge, IssueNumber(2), &h.workdir, &PullRequestScript::default()).await.unwrap();
    let result = run(&h, &StageRequest::new(IssueNumber(2))).await;
    assert_eq!(label_of(&forge, 2), "ward:resolve", "the conflict has an owner: {result:#?}");
    assert_ne!(forge.read_pull(2).unwrap().pull.unwrap().state, PullState::Merged);
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(2))).unwrap();
    assert!(chart.contains("Merge conflict:") && chart.contains("Conflicting files: `shared.txt`"), "{chart}");
    // The resolving fellow rebases it; code review and discharge again; merged.
    let results = settle(&h, &forge, IssueNumber(2), 30).await;
    assert_eq!(label_of(&forge, 2), "ward:discharged", "{results:#?}");
    assert_eq!(forge.read_pull(2).unwrap().pull.unwrap().state, PullState::Merged);
    let shared = std::process::Command::new("git")
        .args(["-C", s.root().to_str().unwrap(), "show", "HEAD:shared.txt"])
        .output()
        .unwrap();
    let shared = String::from_utf8_lossy(&shared.stdout);
    assert!(shared.contains("patient 1 was here") && shared.contains("patient 2 was here"), "{shared}");
}

/// `integration.emulator`: each check gets a fresh emulator, its variables
/// in the check's environment; the check writes and reads back through it,
/// and the container is gone after.
#[tokio::test]
async fn the_integration_check_runs_with_a_fresh_emulator_removed_after() {
    use support::rules::{git_init, hospital, label_of, settle};
    use support::workspace::{docstore_bin, docstore_image, run_docker};
    use ward::forge::{IssueNumber, NewIssue, PullState};
    let s = queue_sandbox(FILE_AGENT);
    let docstore = docstore_bin().display().to_string();
    let check = format!(
        "{docstore} put itest runs r1 pk '{{\"ok\":true}}' >/dev/null && {docstore} get itest runs r1 pk && echo \"checked at $DOCSTORE_ENDPOINT\""
    );
    s.edit_config(
        "\ndecomposition:\n",
        &format!(
            "\nintegration:\n  command: [\"sh\", \"-c\", {}]\n  emulator:\n    image: {}\n    ports: [8081, 8082]\n    ready: {{ http: {{ port: 8082, path: /ready }}, time_limit: 10s }}\n    expose:\n      DOCSTORE_ENDPOINT: \"http://127.0.0.1:{{{{ ports[8081] }}}}\"\n\ndecomposition:\n",
            serde_json::to_string(&check).unwrap(),
            docstore_image()
        ),
    );
    git_init(s.root());
    let (h, forge) = hospital(&s, "reporter");
    forge
        .admit(NewIssue { title: "Patient 1".into(), body: "Add a file.".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    let results = settle(&h, &forge, IssueNumber(1), 30).await;
    assert_eq!(label_of(&forge, 1), "ward:merge-queue", "{results:#?}");
    let drained = ward::runner::drain(&h, &forge, 40, &mut |_, _| {}).await.unwrap();
    assert!(drained.integrated[0].starts_with("#1 integrated and merged"), "{:#?}", drained.integrated);
    assert_eq!(forge.read_pull(1).unwrap().pull.unwrap().state, PullState::Merged);
    let git_dir = s.root().join(".git").canonicalize().unwrap().display().to_string();
    let left = run_docker(&[
        "ps",
        "-aq",
        "--filter",
        "label=ward.stage=merge-queue",
        "--filter",
        &format!("label=ward.repository={git_dir}"),
    ]);
    assert!(left.trim().is_empty(), "the check's emulator is removed: {left}");
}

/// The GitHub half of the cap, on the local forge: `ward visit` runs its
/// agent only under the slot its run took (`ward slot`, the same run id).
/// Without one it stops before the agent with nothing to record; after
/// `ward slot` took it, the agent runs; `ward slot --free` frees it.
#[test]
fn a_visit_runs_its_agent_only_under_the_slot_its_run_took() {
    let s = Sandbox::new();
    let log = capped(&s, 1);
    let out = s.ward(&["admit", "--title", "first", "--body", "b"]);
    assert!(out.status.success(), "{}", stderr(&out));
    s.write("event.json", r#"{"action": "ward-stage", "client_payload": {"issue": 1, "label": "ward:admit"}}"#);
    let run = [("GITHUB_EVENT_NAME", "repository_dispatch"), ("GITHUB_RUN_ID", "77"), ("GITHUB_RUN_ATTEMPT", "1")];
    let visit = || s.ward_env(&["visit", "--event", "event.json", "--out", "visit"], &run);

    let out = visit();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("run gh77.1 holds no agent slot for #1"), "{}", stdout(&out));
    assert!(!log.exists(), "no agent ran");

    let out = s.ward_env(&["slot", "--event", "event.json"], &run);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("run gh77.1 took an agent slot"), "{}", stdout(&out));
    assert!(s.read("charts/0.md").contains("\"gh77.1\""), "{}", s.read("charts/0.md"));

    let out = visit();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("for the record job"), "the visit was sealed: {}", stdout(&out));
    let agents = std::fs::read_to_string(&log).unwrap();
    assert!(agents.starts_with("start 1 admit"), "{agents}");

    let out = s.ward_env(&["slot", "--free", "gh77.1"], &run);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("the agent slot of run gh77.1 is free"), "{}", stdout(&out));
    assert!(!s.read("charts/0.md").contains("gh77.1"), "{}", s.read("charts/0.md"));
}
