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
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
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
    use ward::sweep::slots::{self, GRACE, Take};
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
