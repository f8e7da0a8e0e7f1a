//! The hospital's rules end to end: every scenario under
//! `tests/scenarios/rules/` through `ward simulate`, decompositions carried
//! to discharge and rerun, human approval mode, `ward audit` and
//! `ward precedents check` against real git histories.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::rules::{ENGINE, git_init, hospital, label_of, run, settle};
use support::{Sandbox, stderr, stdout};
use ward::forge::local::LocalForge;
use ward::forge::{Forge, IssueNumber, IssueState, NewIssue, Permission};
use ward::rules::decomposition;
use ward::stage::{StageRequest, StageResult};

fn scenarios() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/rules");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    files
}

#[test]
fn every_rule_scenario_passes_in_simulation() {
    let files = scenarios();
    assert!(files.len() >= 20, "expected a scenario per rule, found {}", files.len());
    let root = env!("CARGO_MANIFEST_DIR");
    let mut args = vec!["--root", root, "simulate"];
    args.extend(files.iter().map(String::as_str));
    let sandbox = Sandbox::new();
    let out = sandbox.ward(&args);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains(&format!("{} passed, 0 failed", files.len())), "{text}");
}

#[test]
fn a_wrong_expectation_fails_the_simulation() {
    // The scenarios above could pass vacuously if expectations were not checked.
    let sandbox = Sandbox::new();
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/rules/treat-without-plan.yaml"),
    )
    .unwrap();
    sandbox.write("wrong.yaml", &original.replace("Rule: plan-gate", "Rule: no-such-rule"));
    let root = env!("CARGO_MANIFEST_DIR");
    let file = sandbox.root().join("wrong.yaml");
    let out = sandbox.ward(&["--root", root, "simulate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("chart_mentions: the chart never says `Rule: no-such-rule`"), "{}", stdout(&out));
}

const DIAMOND: &str = "<!-- WARD:TRIAGE -->
## Assessment
Too big for one plan.
<!-- /WARD:TRIAGE -->
<!-- WARD:DECOMPOSITION -->
```yaml
- {key: schema, title: Tenant column, body: Migration.}
- {key: api, title: Tenant API, body: Filter by tenant., depends_on: [schema]}
- {key: cli, title: Tenant flag, body: Add --tenant., depends_on: [schema]}
- {key: docs, title: Tenant docs, body: Guide., depends_on: [api, cli]}
```
<!-- /WARD:DECOMPOSITION -->
<!-- WARD:OUTCOME decomposed -->
";

/// The parent's admission is scripted (the stand-in never decomposes);
/// everything after it is the default stand-in.
fn script_admission(sandbox: &Sandbox) -> Vec<String> {
    sandbox.write("decompose.sh", &format!("cat > \"$WARD_NOTES\" <<'NOTES'\n{DIAMOND}NOTES\n"));
    vec!["sh".into(), sandbox.root().join("decompose.sh").display().to_string()]
}

#[tokio::test]
async fn a_diamond_is_treated_child_by_child_and_discharges_its_parent() {
    let sandbox = Sandbox::new();
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    let parent = forge
        .admit(NewIssue {
            title: "Multi-tenant".into(),
            body: "Everything tenant aware.".into(),
            labels: vec!["ward:admit".into()],
        })
        .unwrap();
    let first = run(
        &h,
        &StageRequest {
            agent_command: Some(script_admission(&sandbox)),
            ..StageRequest::new(ward::forge::IssueNumber(1))
        },
    )
    .await;
    assert!(matches!(first, StageResult::Moved(ref t) if t.to == "ward:waiting"), "{first:?}");
    let issues = forge.all_issues().await.unwrap();
    let children = decomposition::existing_children(parent.number, &issues, &ENGINE.into());
    let labels: BTreeMap<&str, String> =
        children.iter().map(|(k, c)| (k.as_str(), label_of(&forge, c.number.0))).collect();
    assert_eq!(
        labels,
        BTreeMap::from([
            ("api", "ward:blocked".into()),
            ("cli", "ward:blocked".into()),
            ("docs", "ward:blocked".into()),
            ("schema", "ward:admit".into())
        ])
    );

    // Only `schema` was dispatched; follow every dispatch until all is quiet.
    let schema = children["schema"].number;
    let results = settle(&h, &forge, schema, 60).await;
    let order: Vec<u64> = results
        .iter()
        .filter(|(_, r)| matches!(r, StageResult::Moved(t) if t.to == "ward:discharged"))
        .map(|(n, _)| *n)
        .collect();
    let n = |k: &str| children[k].number.0;
    assert_eq!(order.first(), Some(&n("schema")), "the foundation is discharged first: {order:?}");
    assert_eq!(order.last(), Some(&n("docs")), "docs waits for api and cli: {order:?}");
    for key in ["schema", "api", "cli", "docs"] {
        assert_eq!(label_of(&forge, n(key)), "ward:discharged", "{key}");
    }
    let parent_now = forge.read_record(parent.number).unwrap().issue;
    assert_eq!(label_of(&forge, 1), "ward:discharged");
    assert_eq!(parent_now.state, IssueState::Closed);
    let chart = std::fs::read_to_string(forge.chart_path(parent.number)).unwrap();
    assert!(chart.contains("role=engine") && chart.trim_end().ends_with("<!-- /WARD:OUTCOME -->"), "{chart}");
}

#[tokio::test]
async fn rerunning_a_decomposition_twice_creates_nothing_new() {
    let sandbox = Sandbox::new();
    let (h, forge) = hospital(&sandbox, "reporter");
    forge
        .admit(NewIssue { title: "Multi-tenant".into(), body: "x".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    let script = script_admission(&sandbox);
    for round in 0..3 {
        if round > 0 {
            // A person (or the charge nurse) puts the parent back into admission.
            forge.set_labels_as_person(IssueNumber(1), &["ward:admit".into()]).unwrap();
        }
        let r = run(
            &h,
            &StageRequest { agent_command: Some(script.clone()), ..StageRequest::new(ward::forge::IssueNumber(1)) },
        )
        .await;
        assert!(matches!(r, StageResult::Moved(_)), "round {round}: {r:?}");
        assert_eq!(forge.all_issues().await.unwrap().len(), 5, "round {round}: one parent and four children");
    }
    assert_eq!(label_of(&forge, 1), "ward:waiting");
}

#[tokio::test]
async fn a_marker_in_a_persons_issue_is_not_a_parent_link() {
    let sandbox = Sandbox::new();
    let (h, forge) = hospital(&sandbox, "mallory");
    forge.admit(NewIssue { title: "Parent".into(), body: "x".into(), labels: vec!["ward:admit".into()] }).unwrap();
    run(
        &h,
        &StageRequest {
            agent_command: Some(script_admission(&sandbox)),
            ..StageRequest::new(ward::forge::IssueNumber(1))
        },
    )
    .await;
    // mallory files an issue that claims to be child `docs` of #1.
    let forged = forge
        .admit(NewIssue {
            title: "docs".into(),
            body: "<!-- ward-child parent=1 key=docs -->\nme".into(),
            labels: vec!["ward:admit".into()],
        })
        .unwrap();
    let issues = forge.all_issues().await.unwrap();
    let children = decomposition::existing_children(IssueNumber(1), &issues, &ENGINE.into());
    assert_ne!(children["docs"].number, forged.number);
    // And its admission is not held back by `docs`'s dependencies.
    let deps = ward::family::dependencies(&*forge, &h.config, &h.sentinels, &forged).await.unwrap();
    assert!(deps.is_empty());
}

/// A diagnose run whose ESCALATION cites a precedent that applies: the
/// escalation rule turns it back to run again (Route::Rerun).
const CITES_P0001: &str = "<!-- WARD:ESCALATION -->
## Question for the chiefs
May the fix skip test_login_redirect until someone looks at it?

## Precedents considered
- P-0001 is about exactly this: flaky tests in unrelated changes.

## What was tried
Ran the test 20 times: 2 failures, both timeouts.
<!-- /WARD:ESCALATION -->
<!-- WARD:OUTCOME escalate -->
";

#[tokio::test]
async fn a_rerun_starts_the_stage_again_whatever_the_dispatch_mode() {
    for mode in ["repository_dispatch", "label"] {
        let sandbox = Sandbox::new();
        sandbox.write("precedents/log.yaml", ward::defaults::SAMPLE_PRECEDENTS);
        sandbox.edit_config("dispatch: repository_dispatch", &format!("dispatch: {mode}"));
        let (h, forge) = hospital(&sandbox, "reporter");
        forge
            .admit(NewIssue {
                title: "Flaky login test blocks the release branch".into(),
                body: "test_login_redirect fails one run in ten on CI; the fix is blocked by it.".into(),
                labels: vec!["ward:diagnose".into()],
            })
            .unwrap();
        sandbox.write("escalate.sh", &format!("cat > \"$WARD_NOTES\" <<'NOTES'\n{CITES_P0001}NOTES\n"));
        let script = vec!["sh".to_string(), sandbox.root().join("escalate.sh").display().to_string()];
        let r = run(&h, &StageRequest { agent_command: Some(script), ..StageRequest::new(IssueNumber(1)) }).await;
        let StageResult::Refused { reason, to, .. } = r else { panic!("{mode}: {r:?}") };
        assert!(reason.contains("rule `escalation` refused"), "{mode}: {reason}");
        assert_eq!(to.as_deref(), Some("ward:diagnose"), "{mode}");
        assert_eq!(label_of(&forge, 1), "ward:diagnose", "{mode}: the label stays");
        // The label did not change, so no labeled event can start the stage:
        // ward starts it itself in both modes.
        let dispatches = forge.dispatches().unwrap();
        assert_eq!(dispatches.len(), 1, "{mode}: {dispatches:?}");
        assert_eq!(
            (dispatches[0].issue, dispatches[0].label.as_deref()),
            (IssueNumber(1), Some("ward:diagnose")),
            "{mode}"
        );
    }
}

#[tokio::test]
async fn an_approval_during_a_lockdown_merges_nothing() {
    let sandbox = Sandbox::new();
    let (h, forge) = to_awaiting_chief(&sandbox).await;
    let (lockdown, _) =
        ward::lockdown::declare(&*forge, "Docker host down", "maria", chrono::Utc::now()).await.unwrap();
    approve_as(&sandbox, "maria");
    let r = run(&h, &StageRequest::new(IssueNumber(1))).await;
    let StageResult::Refused { reason, to, .. } = r else { panic!("{r:?}") };
    assert!(reason.contains("Docker host down"), "{reason}");
    assert_eq!(to, None);
    assert_eq!(forge.read_pull(1).unwrap().pull.unwrap().state, ward::forge::PullState::Open, "nothing merged");
    let issue = forge.read_record(IssueNumber(1)).unwrap().issue;
    assert_eq!(issue.state, IssueState::Open);
    assert_eq!(issue.labels, vec!["ward:awaiting-chief".to_string(), "ward:approved".to_string()], "no label moved");
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap();
    assert!(chart.contains(&format!("lockdown {} is in force", lockdown.issue)), "{chart}");
    // Lifted, the same approval goes through.
    ward::lockdown::lift(&*forge, "maria", chrono::Utc::now()).await.unwrap();
    let r = run(&h, &StageRequest::new(IssueNumber(1))).await;
    assert!(matches!(r, StageResult::Moved(ref t) if t.to == "ward:discharged"), "{r:?}");
}

async fn to_awaiting_chief(sandbox: &Sandbox) -> (ward::hospital::Hospital, std::sync::Arc<LocalForge>) {
    sandbox.edit_config("human_approval: false", "human_approval: true");
    git_init(sandbox.root());
    let (h, forge) = hospital(sandbox, "reporter");
    forge.admit(NewIssue { title: "Typo".into(), body: "Welcom".into(), labels: vec!["ward:admit".into()] }).unwrap();
    let results = settle(&h, &forge, IssueNumber(1), 20).await;
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap_or_default();
    assert_eq!(label_of(&forge, 1), "ward:awaiting-chief", "{results:#?}\n{chart}");
    let pull = forge.read_pull(1).unwrap().pull.unwrap();
    assert_eq!(pull.state, ward::forge::PullState::Open, "nothing is merged before a chief approves");
    forge
        .set_collaborators(&BTreeMap::from([
            ("maria".to_string(), Permission::Maintain),
            ("tom".to_string(), Permission::Write),
            // The reviewer the simulation plays: their approval counts.
            ("chief".to_string(), Permission::Write),
            (ENGINE.to_string(), Permission::Admin),
        ]))
        .unwrap();
    (h, forge)
}

fn approve_as(sandbox: &Sandbox, who: &str) -> LocalForge {
    let person = LocalForge::new(sandbox.root(), ENGINE).with_actor(who);
    person.set_labels_as_person(IssueNumber(1), &["ward:awaiting-chief".into(), "ward:approved".into()]).unwrap();
    person
}

#[tokio::test]
async fn human_approval_mode_waits_for_a_maintainer() {
    let sandbox = Sandbox::new();
    let (h, forge) = to_awaiting_chief(&sandbox).await;

    approve_as(&sandbox, "tom");
    let r = run(&h, &StageRequest::new(ward::forge::IssueNumber(1))).await;
    let StageResult::Refused { reason, to, .. } = r else { panic!("{r:?}") };
    assert!(reason.contains("`tom` applied `ward:approved` with write permission"), "{reason}");
    assert_eq!(to.as_deref(), Some("ward:awaiting-chief"));
    assert_eq!(forge.read_record(IssueNumber(1)).unwrap().issue.labels, vec!["ward:awaiting-chief".to_string()]);

    approve_as(&sandbox, "maria");
    let r = run(&h, &StageRequest::new(ward::forge::IssueNumber(1))).await;
    assert!(matches!(r, StageResult::Moved(ref t) if t.to == "ward:discharged"), "{r:?}");
    let issue = forge.read_record(IssueNumber(1)).unwrap().issue;
    assert_eq!(issue.labels, vec!["ward:discharged".to_string()]);
    assert_eq!(issue.state, IssueState::Closed);
    assert_eq!(forge.read_pull(1).unwrap().pull.unwrap().state, ward::forge::PullState::Merged);
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap();
    assert!(chart.contains("`maria` (maintain permission) applied `ward:approved`."), "{chart}");
}

/// The plan the fellow posts: it lists a protected path under `## Files to change`.
const PROTECTED_PLAN: &str = "outcome: plan-posted
notes:
  - kind: TREATMENT_PLAN
    body: |
      ## Reproduction
      Read `.github/ward.yml`: nothing says who owns the pipeline.

      ## Diagnosis
      The pipeline names no owner.

      ## Files to change
      - `.github/ward.yml`

      ## Tests to add
      - None: a comment changes no behaviour.

      ## Risks
      None.

      ## Open questions
      None.
";

/// In diagnosis the plan above; in treatment a comment appended to
/// `.github/ward.yml`; the stand-in otherwise.
const PROTECTED_AGENT: &str = r#"ward=$1
here=$(dirname "$0")
case "$WARD_MODE" in
  diagnose) exec "$ward" stand-in --script "$here/plan.yaml" ;;
  treat) printf '# Owner: the platform team.\n' >> .github/ward.yml ;;
esac
exec "$ward" stand-in
"#;

/// A treatment that changes a protected path its approved plan lists
/// counts, and the patient's merge then waits for a person although the
/// hospital is not in human approval mode.
#[tokio::test]
async fn a_planned_change_to_a_protected_path_waits_for_a_person() {
    let sandbox = Sandbox::new();
    sandbox.write("plan.yaml", PROTECTED_PLAN);
    sandbox.write("agent.sh", PROTECTED_AGENT);
    let script = sandbox.root().join("agent.sh").display().to_string();
    sandbox.edit_config(r#"command: ["{ward}", "stand-in"]"#, &format!(r#"command: ["sh", "{script}", "{{ward}}"]"#));
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    forge
        .admit(NewIssue { title: "Owner".into(), body: "Name the owner.".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    let results = settle(&h, &forge, IssueNumber(1), 20).await;
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap_or_default();
    assert_eq!(label_of(&forge, 1), "ward:awaiting-chief", "{results:#?}\n{chart}");
    assert!(chart.contains("<!-- WARD:PROTECTED_CHANGE") && chart.contains("- `.github/ward.yml`"), "{chart}");
    let pull = forge.read_pull(1).unwrap().pull.unwrap();
    assert_eq!(pull.state, ward::forge::PullState::Open, "nothing is merged before a person approves");
}

#[tokio::test]
async fn an_approval_after_new_commits_is_audited_again() {
    let sandbox = Sandbox::new();
    let (h, forge) = to_awaiting_chief(&sandbox).await;
    // A commit lands after the audit passed: the approval must not merge it unreviewed.
    forge
        .update_pull(1, |rec| {
            if let Some(p) = rec.pull.as_mut() {
                p.head_sha = "9999999999999999999999999999999999999999".into();
            }
        })
        .unwrap();
    approve_as(&sandbox, "maria");
    let r = run(&h, &StageRequest::new(ward::forge::IssueNumber(1))).await;
    assert!(
        matches!(r, StageResult::Moved(ref t) if t.to == "ward:code-review" && t.outcome == "audit-failed"),
        "{r:?}"
    );
    assert_eq!(forge.read_pull(1).unwrap().pull.unwrap().state, ward::forge::PullState::Open);
}

#[tokio::test]
async fn ward_audit_is_a_dry_run() {
    let sandbox = Sandbox::new();
    sandbox.edit_config("human_approval: false", "human_approval: true");
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    forge.admit(NewIssue { title: "Typo".into(), body: "Welcom".into(), labels: vec!["ward:admit".into()] }).unwrap();
    settle(&h, &forge, IssueNumber(1), 20).await;
    forge.update_pull(1, |rec| rec.unresolved_threads = 1).unwrap();
    let chart_before = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap();
    let issue_before = sandbox.read(".ward/forge/issues/1.json");

    let out = sandbox.ward(&["audit", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("- ❌ No unresolved review threads: 1 review thread(s) are unresolved"), "{text}");
    assert!(text.contains("- ✅ CI green for the head commit"), "{text}");
    assert!(text.contains("Result: audit failed (1 ❌ failed, 0 ❔ not verified, 0 ⬜ not yet)"), "{text}");
    assert_eq!(std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap(), chart_before);
    assert_eq!(sandbox.read(".ward/forge/issues/1.json"), issue_before);

    let out = sandbox.ward(&["audit", "1", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["outcome"], "audit-failed");
    assert_eq!(json["items"].as_array().unwrap().len(), 7);
}

/// Commits the sandbox's precedent log as it is now, at a fixed time.
fn commit_log(dir: &Path, message: &str) {
    let repo = git2::Repository::open(dir).unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new("precedents/log.yaml")).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let who = git2::Signature::new("Chief", "chief@example.com", &git2::Time::new(1_767_312_000, 0)).unwrap();
    let parent = repo.head().unwrap().peel_to_commit().unwrap();
    repo.commit(Some("HEAD"), &who, &who, message, &tree, &[&parent]).unwrap();
}

#[test]
fn precedents_check_names_an_edited_or_reordered_entry() {
    let sandbox = Sandbox::new();
    // `ward init` starts with no decision: the demo's nine samples.
    sandbox.write("precedents/log.yaml", ward::defaults::SAMPLE_PRECEDENTS);
    git_init(sandbox.root());
    let log = sandbox.read("precedents/log.yaml");
    let ok = sandbox.ward(&["precedents", "check", "--base", "HEAD"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("ok (9 entries, append-only against `HEAD`)"), "{}", stdout(&ok));

    // One character of an old entry.
    sandbox.write("precedents/log.yaml", &log.replacen("chief: mara-okafor", "chief: mara-okafer", 1));
    let out = sandbox.ward(&["precedents", "check", "--base", "HEAD"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("precedents/log.yaml:15: entry 1 (P-0001): changed since the base revision (its line 3 was `  chief: mara-okafor` and is now `  chief: mara-okafer`)"),
        "{}",
        stderr(&out)
    );

    // Two entries swapped, after a commit that appended a third entry.
    sandbox.write("precedents/log.yaml", &log);
    commit_log(sandbox.root(), "Unchanged");
    let entries = ward::precedent::raw_entries(&log);
    let (a, b) = (entries[0].text, entries[1].text);
    let swapped = log.replacen(a, "\u{0}", 1).replacen(b, a, 1).replacen('\u{0}', b, 1);
    sandbox.write("precedents/log.yaml", &swapped);
    let out = sandbox.ward(&["precedents", "check", "--base", "HEAD~1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("entry 1 (P-0001): moved from position 1 to 2"), "{err}");
    assert!(err.contains("entry 2 (P-0002): moved from position 2 to 1"), "{err}");
    assert!(err.contains("id `P-0002` is out of sequence; entry 1 must be `P-0001`"), "{err}");

    // An unknown revision is bad input (exit 2), not a failed check.
    let out = sandbox.ward(&["precedents", "check", "--base", "no-such-branch"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn precedents_check_refuses_an_engine_written_or_future_entry() {
    let sandbox = Sandbox::new();
    // `ward init` starts with no decision: the demo's nine samples.
    sandbox.write("precedents/log.yaml", ward::defaults::SAMPLE_PRECEDENTS);
    git_init(sandbox.root());
    let log = sandbox.read("precedents/log.yaml");
    let next = format!(
        "{log}\n- id: P-0010\n  date: 2026-12-01\n  chief: {ENGINE}\n  tags: [x]\n  question: Q?\n  decision: D.\n"
    );
    sandbox.write("precedents/log.yaml", &next);
    let out = sandbox.ward(&["precedents", "check", "--base", "HEAD", "--today", "2026-11-29"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("entry 10 (P-0010): date 2026-12-01 is in the future (today is 2026-11-29)"), "{err}");
    assert!(
        err.contains("entry 10 (P-0010): chief `github-actions[bot]` is the engine's own account or a bot"),
        "{err}"
    );
}

/// Scripted planner notes that decompose into the given YAML children.
fn decompose_script(sandbox: &Sandbox, name: &str, yaml: &str) -> Vec<String> {
    let notes = format!(
        "<!-- WARD:TRIAGE -->\n## Assessment\nSplit.\n<!-- /WARD:TRIAGE -->\n<!-- WARD:DECOMPOSITION -->\n```yaml\n{yaml}```\n<!-- /WARD:DECOMPOSITION -->\n<!-- WARD:OUTCOME decomposed -->\n"
    );
    sandbox.write(name, &format!("cat > \"$WARD_NOTES\" <<'NOTES'\n{notes}NOTES\n"));
    vec!["sh".into(), sandbox.root().join(name).display().to_string()]
}

#[tokio::test]
async fn grandchildren_discharge_their_parent_and_grandparent_and_depth_is_bounded() {
    let sandbox = Sandbox::new();
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    forge.admit(NewIssue { title: "Epic".into(), body: "Big.".into(), labels: vec!["ward:admit".into()] }).unwrap();
    let one = decompose_script(&sandbox, "one.sh", "- {key: a, title: Part A, body: The A part.}\n");
    let r =
        run(&h, &StageRequest { agent_command: Some(one.clone()), ..StageRequest::new(ward::forge::IssueNumber(1)) })
            .await;
    assert!(matches!(r, StageResult::Moved(ref t) if t.to == "ward:waiting"), "{r:?}");
    // Child #2 (depth 1) decomposes again: its child sits at depth 2, the limit.
    let r =
        run(&h, &StageRequest { agent_command: Some(one.clone()), ..StageRequest::new(ward::forge::IssueNumber(2)) })
            .await;
    assert!(matches!(r, StageResult::Moved(ref t) if t.to == "ward:waiting"), "{r:?}");
    assert_eq!(label_of(&forge, 3), "ward:admit");
    // Grandchild #3 may not decompose further.
    let r = run(&h, &StageRequest { agent_command: Some(one), ..StageRequest::new(ward::forge::IssueNumber(3)) }).await;
    let StageResult::Invalid { reason, .. } = r else { panic!("{r:?}") };
    assert!(reason.contains("already at depth 2; children would exceed `decomposition.max_depth` (2)"), "{reason}");
    assert_eq!(forge.all_issues().await.unwrap().len(), 3, "nothing was created");

    // Treated normally, #3's discharge discharges #2, and #2's discharges #1.
    settle(&h, &forge, IssueNumber(3), 20).await;
    for n in [3, 2, 1] {
        assert_eq!(label_of(&forge, n), "ward:discharged", "#{n}");
        assert_eq!(forge.read_record(IssueNumber(n)).unwrap().issue.state, IssueState::Closed, "#{n}");
    }
}

#[tokio::test]
async fn an_interrupted_release_is_repaired() {
    let sandbox = Sandbox::new();
    let (h, forge) = hospital(&sandbox, "reporter");
    forge
        .admit(NewIssue { title: "Multi-tenant".into(), body: "x".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    run(
        &h,
        &StageRequest {
            agent_command: Some(script_admission(&sandbox)),
            ..StageRequest::new(ward::forge::IssueNumber(1))
        },
    )
    .await;
    let children = decomposition::existing_children(IssueNumber(1), &forge.all_issues().await.unwrap(), &ENGINE.into());
    // `schema` was discharged, but the run died before releasing anyone.
    let schema = children["schema"].number;
    forge.set_labels(schema, &["ward:discharged".into()]).await.unwrap();
    forge.close_issue(schema).await.unwrap();
    let now = chrono::Utc::now();
    // The charge nurse's sweep repairs it.
    let facilities = ward::sweep::Facilities::default();
    let report = ward::sweep::sweep(&*forge, &h.config, now, &facilities, None).await.unwrap();
    assert_eq!(report.released.len(), 2, "{report}");
    assert_eq!(label_of(&forge, children["api"].number.0), "ward:admit");
    assert_eq!(label_of(&forge, children["cli"].number.0), "ward:admit");
    assert_eq!(label_of(&forge, children["docs"].number.0), "ward:blocked");
    // Repair is idempotent.
    assert!(ward::family::repair(&*forge, &h.config, "sweep-2", now).await.unwrap().is_empty());
    // Every child discharged, the parent still waiting: the sweep discharges it.
    for key in ["api", "cli", "docs"] {
        forge.set_labels(children[key].number, &["ward:discharged".into()]).await.unwrap();
        forge.close_issue(children[key].number).await.unwrap();
    }
    let moved = ward::family::repair(&*forge, &h.config, "sweep-3", now).await.unwrap();
    assert!(moved.iter().any(|m| m.contains("every child discharged")), "{moved:?}");
    assert_eq!(label_of(&forge, 1), "ward:discharged");
}

/// Before, the label alone counted: a person with triage labelled `schema`
/// discharged and its dependents started, unfinished foundation or not.
#[tokio::test]
async fn a_discharged_label_a_person_applied_releases_nobody() {
    let sandbox = Sandbox::new();
    let (h, forge) = hospital(&sandbox, "reporter");
    forge
        .admit(NewIssue { title: "Multi-tenant".into(), body: "x".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    run(
        &h,
        &StageRequest {
            agent_command: Some(script_admission(&sandbox)),
            ..StageRequest::new(ward::forge::IssueNumber(1))
        },
    )
    .await;
    let children = decomposition::existing_children(IssueNumber(1), &forge.all_issues().await.unwrap(), &ENGINE.into());
    let schema = children["schema"].number;
    let now = chrono::Utc::now();
    // A person's label, on an open issue and then on a closed one: no pull
    // request was merged and the engine never applied it.
    forge.set_labels_as_person(schema, &["ward:discharged".into()]).unwrap();
    assert!(ward::family::repair(&*forge, &h.config, "sweep-1", now).await.unwrap().is_empty());
    forge.close_issue(schema).await.unwrap();
    assert!(ward::family::repair(&*forge, &h.config, "sweep-2", now).await.unwrap().is_empty());
    let deps = ward::family::dependencies(
        &*forge,
        &h.config,
        &h.sentinels,
        &forge.issue(children["api"].number).await.unwrap(),
    )
    .await
    .unwrap();
    assert!(deps.iter().all(|d| !d.discharged), "{deps:?}");
    assert_eq!(label_of(&forge, children["api"].number.0), "ward:blocked");
    // The engine's own discharge counts.
    forge.set_labels(schema, &[]).await.unwrap();
    forge.set_labels(schema, &["ward:discharged".into()]).await.unwrap();
    let moved = ward::family::repair(&*forge, &h.config, "sweep-3", now).await.unwrap();
    assert_eq!(moved.len(), 2, "{moved:?}");
    assert_eq!(label_of(&forge, children["api"].number.0), "ward:admit");
}

mod over_github {
    //! The discharge audit over the GitHub forge (the fake GitHub serves
    //! pulls, reviews, commits, check runs, statuses and GraphQL threads).
    use super::support::fake_github::{ENGINE, FakeGitHub};
    use ward::chart::{Note, NoteMeta, Sentinels};
    use ward::config::{CONFIG_PATH, Config};
    use ward::forge::IssueNumber;
    use ward::rules::discharge_audit::{ItemId, Mark};

    /// Breaks one fact of a seeded fake (the pull request's number given).
    type Breaker = Box<dyn Fn(&FakeGitHub, u64)>;

    fn note(kind: &str, run: &str, stage: &str, role: &str, body: &str) -> Note {
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z").unwrap().into();
        Note {
            kind: kind.parse().expect("a known note kind"),
            meta: NoteMeta { run: run.into(), stage: stage.into(), role: role.into(), at },
            body: body.into(),
        }
    }

    /// A patient at discharge whose every audited fact holds: the treatment
    /// branch pushed (one commit), its pull request opened by the engine,
    /// the code review of that commit on the chart, a person with write
    /// access approving it, green CI, every review thread resolved.
    /// Returns (issue, pull request).
    fn seed(gh: &FakeGitHub) -> (u64, u64) {
        let mut s = gh.state();
        s.add_collaborator("bob", "write");
        let n = s.add_issue("Login fails", "x", "alice", &["ward:discharge"]);
        let branch = format!("ward/issue-{n}");
        let head = s.commit_files(&branch, &[("login.rs", "fixed\n")], "Fix the login check", ENGINE);
        let plan = "## Diagnosis\nd\n## Files to change\nf\n## Tests to add\nt\n## Risks\nr\n## Open questions\nNone.";
        let review = format!(
            "## Scope against the plan\ns\n## Correctness\nc\n## Tests\nt\n## Security\nn\n## Verdict\napprove\n\nCommit: {head}"
        );
        let notes = [
            note("TREATMENT_PLAN", "r1", "diagnose", "fellow", plan),
            note("PLAN_REVIEW", "r2", "plan-review", "review-attending", "## Findings\nok\n## Verdict\napprove"),
            note("OUTCOME", "r2", "plan-review", "review-attending", "approve"),
            note("CODE_REVIEW", "r3", "code-review", "review-attending", &review),
            note("OUTCOME", "r3", "code-review", "review-attending", "approve"),
        ];
        let chart = Sentinels::default().append(IssueNumber(n), None, &notes).unwrap().unwrap();
        s.put_file("ward-charts", &format!("charts/{n}.md"), &chart);
        let pr = s.open_pull(&branch, "main", "Fix login", "", ENGINE);
        s.review(pr, "bob", "APPROVE", "ok", &[]);
        s.pulls.get_mut(&pr).unwrap().threads = vec![true];
        s.report_check("ci-app", &head, "test", "success", None);
        s.set_status(&head, "lint", "success", "ci-app[bot]");
        (n, pr)
    }

    fn config() -> Config {
        let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CONFIG_PATH)).unwrap();
        Config::parse(&text, std::path::Path::new(CONFIG_PATH), None).unwrap()
    }

    #[tokio::test]
    async fn every_item_is_verified_over_github_and_each_can_fail() {
        let gh = FakeGitHub::start().await;
        let (n, _) = seed(&gh);
        let forge = gh.forge();
        let config = config();
        let list = ward::discharge::audit::audit_issue(&forge, &config, IssueNumber(n)).await.unwrap();
        assert!(list.passed(), "{}", list.render());

        let cases: Vec<(ItemId, Breaker)> = vec![
            (ItemId::Threads, Box::new(|gh, pr| gh.state().pulls.get_mut(&pr).unwrap().threads.push(false))),
            (
                ItemId::Ci,
                Box::new(|gh, pr| {
                    let mut s = gh.state();
                    let head = s.pull(pr).head_sha.clone();
                    s.report_check("ci-app", &head, "test", "failure", Some("1 test failed"));
                }),
            ),
            (
                ItemId::History,
                Box::new(|gh, pr| {
                    let mut s = gh.state();
                    let branch = s.pull(pr).head.clone();
                    s.commit_files(&branch, &[("login.rs", "fixed again\n")], "fixup! Fix the login check", ENGINE);
                }),
            ),
            (
                ItemId::PrApproval,
                Box::new(|gh, pr| {
                    gh.state().pulls.get_mut(&pr).unwrap().reviews[0].author = ENGINE.into();
                }),
            ),
            (
                ItemId::CodeReview,
                Box::new(|gh, pr| {
                    let mut s = gh.state();
                    let branch = s.pull(pr).head.clone();
                    s.commit_files(&branch, &[("login.rs", "changed after the review\n")], "Tweak", ENGINE);
                }),
            ),
        ];
        for (item, break_it) in cases {
            let gh = FakeGitHub::start().await;
            let (n, pr) = seed(&gh);
            break_it(&gh, pr);
            let list = ward::discharge::audit::audit_issue(&gh.forge(), &config, IssueNumber(n)).await.unwrap();
            assert_ne!(list.item(item).unwrap().mark, Mark::Pass, "{item}: {}", list.render());
            assert_eq!(list.outcome(), "audit-failed", "{item}");
        }
    }
}

const TRIAGE_WITH_FOLLOW_UPS: &str = "<!-- WARD:TRIAGE -->
## Assessment
A small bug in greet.sh.

## Open questions
Follow-up: the README's example is out of date.
- Follow-up: greet.sh has no test @octocat
- Follow-up: None.
<!-- /WARD:TRIAGE -->
<!-- WARD:OUTCOME ready -->
";

#[tokio::test]
async fn follow_ups_are_filed_once_as_issues_nobody_admitted_and_charted() {
    let sandbox = Sandbox::new();
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    let patient = forge
        .admit(NewIssue { title: "greet".into(), body: "Hello, !".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    sandbox.write("triage.sh", &format!("cat > \"$WARD_NOTES\" <<'NOTES'\n{TRIAGE_WITH_FOLLOW_UPS}NOTES\n"));
    let script = vec!["sh".into(), sandbox.root().join("triage.sh").display().to_string()];
    let req = StageRequest { agent_command: Some(script), ..StageRequest::new(patient.number) };
    let first = run(&h, &req).await;
    assert!(matches!(first, StageResult::Moved(ref t) if t.to == "ward:diagnose"), "{first:?}");

    let filed: Vec<_> = forge.all_issues().await.unwrap().into_iter().filter(|i| i.number != patient.number).collect();
    let titles: Vec<&str> = filed.iter().map(|i| i.title.as_str()).collect();
    assert_eq!(
        titles,
        ["Follow-up of #1: the README's example is out of date.", "Follow-up of #1: greet.sh has no test @octocat"]
    );
    for issue in &filed {
        assert_eq!(issue.labels, ["ward:follow-up"], "filed, not admitted");
        assert_eq!(issue.author, ENGINE);
        assert!(issue.body.starts_with("<!-- ward-follow-up patient=1 key="), "{}", issue.body);
    }
    let chart = std::fs::read_to_string(forge.chart_path(patient.number)).unwrap();
    assert_eq!(chart.matches("<!-- WARD:FOLLOW_UP").count(), 1, "{chart}");
    assert!(chart.contains("- #2: the README's example is out of date. (key `"), "{chart}");

    // The same notes again (the patient put back at admission by hand):
    // nothing is filed twice.
    forge.set_labels_as_person(patient.number, &["ward:admit".into()]).unwrap();
    let again = run(&h, &req).await;
    assert!(matches!(again, StageResult::Moved(_)), "{again:?}");
    assert_eq!(forge.all_issues().await.unwrap().len(), 3, "no follow-up filed twice");
    let chart = std::fs::read_to_string(forge.chart_path(patient.number)).unwrap();
    assert_eq!(chart.matches("<!-- WARD:FOLLOW_UP").count(), 1, "nothing new to chart: {chart}");
}

#[tokio::test]
async fn a_follow_up_filed_before_a_crash_is_found_by_its_marker_and_not_filed_again() {
    let sandbox = Sandbox::new();
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    let patient = forge
        .admit(NewIssue { title: "greet".into(), body: "Hello, !".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    // What a run that died after filing the first follow-up left behind.
    let notes = ward::chart::Sentinels::new("WARD").parse_agent_notes(TRIAGE_WITH_FOLLOW_UPS).unwrap();
    let charted: Vec<ward::chart::Note> = notes
        .notes
        .iter()
        .map(|d| ward::chart::Note {
            kind: d.kind,
            meta: ward::chart::NoteMeta {
                run: "r0".into(),
                stage: "admit".into(),
                role: "planner".into(),
                at: chrono::Utc::now(),
            },
            body: d.body.clone(),
        })
        .collect();
    let first = ward::followups::collect(patient.number, &charted).remove(0);
    let early = forge.create_issue(ward::followups::new_issue(&h.config, patient.number, &first)).await.unwrap();
    // A person's copy of the same marker is not the engine's and is ignored.
    forge
        .admit(NewIssue {
            title: "copy".into(),
            body: ward::followups::new_issue(&h.config, patient.number, &first).body,
            labels: vec!["ward:follow-up".into()],
        })
        .unwrap();

    sandbox.write("triage.sh", &format!("cat > \"$WARD_NOTES\" <<'NOTES'\n{TRIAGE_WITH_FOLLOW_UPS}NOTES\n"));
    let script = vec!["sh".into(), sandbox.root().join("triage.sh").display().to_string()];
    let req = StageRequest { agent_command: Some(script), ..StageRequest::new(patient.number) };
    assert!(matches!(run(&h, &req).await, StageResult::Moved(_)));
    assert_eq!(forge.all_issues().await.unwrap().len(), 4, "only the second follow-up is new");
    let chart = std::fs::read_to_string(forge.chart_path(patient.number)).unwrap();
    assert!(chart.contains(&format!("- {}: the README's example", early.number)), "{chart}");
    assert!(chart.contains("- #4: greet.sh has no test"), "{chart}");
}

/// The first treatment writes a 60-line file; after the refusal sent the
/// patient back to diagnosis, the second stays small. The stand-in
/// otherwise. It remembers in `$2`, a folder ward.yml makes writable behind
/// the walls (`agent.writable`).
const LARGE_THEN_SMALL_AGENT: &str = r#"ward=$1
marks=$2
if [ "$WARD_MODE" = treat ]; then
  if [ ! -e "$marks/treated-once" ]; then
    : > "$marks/treated-once"
    i=0
    while [ $i -lt 60 ]; do echo "line $i" >> big.txt; i=$((i + 1)); done
  else
    echo "one line" > small.txt
  fi
fi
exec "$ward" stand-in
"#;

/// `max_diff_lines`: a treatment that changed more lines than its stage
/// allows is refused with the count, nothing of it is kept, and the patient
/// goes back to diagnosis; a smaller treatment after a new plan is
/// discharged.
#[tokio::test]
async fn a_treatment_over_max_diff_lines_goes_back_to_diagnosis() {
    let sandbox = Sandbox::new();
    sandbox.write("agent.sh", LARGE_THEN_SMALL_AGENT);
    let script = sandbox.root().join("agent.sh").display().to_string();
    let marks_dir = tempfile::tempdir().unwrap();
    let marks = marks_dir.path().display().to_string();
    sandbox.edit_config(
        r#"command: ["{ward}", "stand-in"]"#,
        &format!("command: [\"sh\", \"{script}\", \"{{ward}}\", \"{marks}\"]\n  writable: [\"{marks}\"]"),
    );
    sandbox.edit_config("    mode: treat\n", "    mode: treat\n    max_diff_lines: 40\n");
    git_init(sandbox.root());
    let (h, forge) = hospital(&sandbox, "reporter");
    forge
        .admit(NewIssue { title: "Greet".into(), body: "Say hello.".into(), labels: vec!["ward:admit".into()] })
        .unwrap();
    let results = settle(&h, &forge, IssueNumber(1), 30).await;
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap_or_default();
    assert_eq!(label_of(&forge, 1), "ward:discharged", "{results:#?}\n{chart}");
    let refused = results
        .iter()
        .position(|(_, r)| matches!(r, StageResult::Refused { to: Some(to), .. } if to == "ward:diagnose"))
        .unwrap_or_else(|| panic!("no treatment was sent back to diagnosis: {results:#?}"));
    assert!(refused > 0, "{results:#?}");
    assert!(chart.contains("Rule: max-diff-lines"), "{chart}");
    assert!(chart.contains("the treatment changed 6"), "the count is in the REFUSAL:\n{chart}");
    assert!(chart.contains("over the limit of 40 lines"), "{chart}");
    let plans = chart.matches("<!-- WARD:TREATMENT_PLAN").count();
    assert!(plans >= 2, "diagnosis planned again after the refusal:\n{chart}");
    let merged = std::process::Command::new("git")
        .args(["-C", sandbox.root().to_str().unwrap(), "ls-tree", "-r", "--name-only", "HEAD"])
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&merged.stdout);
    assert!(files.contains("small.txt") && !files.contains("big.txt"), "only the small change merged:\n{files}");
}
