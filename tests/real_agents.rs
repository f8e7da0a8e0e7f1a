//! The agents people use, for real: each proven preset's CLI (Claude Code,
//! codex, aider, installed by `.ci/agents`) takes `ward demo`'s sample
//! patient from admission to a merged `main` through `ward run`, against
//! the scripted model server (tests/support/model/) on loopback. The
//! repository is what `ward init --agent PRESET` writes; the test adds the
//! model's endpoint and key in ward's environment, as a job would, and
//! nothing else of the preset's. Everything lives outside the temp folder
//! (a runner's layout: `$RUNNER_TEMP` is not `/tmp`), and the runner's HOME
//! is checked for anything the agent left there.
//!
//! The model's part in each stage: Claude and codex run the stand-in with
//! their own shell tool (it writes notes that cite real lines) and treat
//! with their own edit tool; aider, which has no shell, writes the notes as
//! a file of its chat. Then the faults: a rejected key ends a run in
//! seconds with the model's words in the chart; an overloaded service is
//! reported as the service's failure. A test whose CLI is missing is
//! skipped with a notice, and fails when `WARD_REQUIRE_REAL_AGENTS=1`
//! (`.ci/run`).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::model::clis::{proven, real_cli};
use support::model::{Fault, ModelServer, Scene, Script, Turn, Usage};
use support::{git, stderr, stdout, ward_bin};

const GREET: &str = "#!/bin/sh\n# Greets.\necho \"Hello, $1!\"\n";
const CHECK: &str = "#!/bin/sh\nset -e\n[ \"$(./greet.sh Ada)\" = \"Hello, Ada!\" ]\necho ok\n";
const ISSUE_TITLE: &str = "greet prints \"Hello, !\" when the name is empty";
const ISSUE_BODY: &str = "Running `./greet.sh \"\"` prints `Hello, !`; it should refuse the empty name.";
/// The fix, as the model's edit tool makes it.
const FIXED: &str = "if [ -z \"$1\" ]; then\n  echo \"greet.sh: a non-empty argument is required\" >&2\n  exit 2\nfi\necho \"Hello, $1!\"";
/// The tokens every response of the scripted model reports.
const USAGE: Usage = Usage { input: 1200, output: 80, cache_read: 300, cache_creation: 0 };

/// The agents proven here: their CLI, its key and endpoint variables.
#[derive(Clone, Copy, PartialEq)]
enum Agent {
    Claude,
    Codex,
    Aider,
}

impl Agent {
    fn preset(self) -> &'static str {
        match self {
            Agent::Claude => "claude-code",
            Agent::Codex => "codex",
            Agent::Aider => "aider",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Aider => "aider",
        }
    }

    /// What a job sets for the agent: its key (a placeholder the scripted
    /// model accepts) and its model's endpoint, in the variables its CLI
    /// is known by; aider also names the model it talks to.
    fn job_env(self, server: &ModelServer) -> Vec<(String, String)> {
        let pairs: Vec<(&str, String)> = match self {
            Agent::Claude => vec![
                ("ANTHROPIC_API_KEY", "sk-ant-test-key".into()),
                ("ANTHROPIC_BASE_URL", server.anthropic_base_url()),
            ],
            Agent::Codex => {
                vec![("CODEX_API_KEY", "sk-test-key".into()), ("OPENAI_BASE_URL", server.openai_base_url())]
            }
            Agent::Aider => vec![
                ("OPENAI_API_KEY", "sk-test-key".into()),
                ("OPENAI_API_BASE", server.openai_base_url()),
                ("AIDER_MODEL", "openai/gpt-4o".into()),
            ],
        };
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

/// A repository with ward installed for one agent, a runner's HOME, a run
/// folder and the scripted model, all under the build's own temp folder.
struct Clinic {
    dir: tempfile::TempDir,
    repo: PathBuf,
    home: PathBuf,
    runs: PathBuf,
    server: ModelServer,
    agent: Agent,
    bin: PathBuf,
}

impl Clinic {
    /// `None` (skipped) when the agent's CLI is not installed.
    async fn new(agent: Agent, script: Script) -> Option<Clinic> {
        let cli = real_cli(agent.program())?;
        let bin = cli.parent().unwrap().to_path_buf();
        // Not under /tmp: a runner's temp folder is elsewhere, and codex's
        // sandbox lets it write /tmp whatever ward does.
        let mut dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        dir.disable_cleanup(std::env::var_os("WARD_KEEP").is_some());
        let (repo, home, runs) =
            (dir.path().join("repo"), dir.path().join("home"), dir.path().join("runner-temp/runs"));
        for d in [&repo, &home, &runs] {
            std::fs::create_dir_all(d).unwrap();
        }
        for (name, text) in [("greet.sh", GREET), ("check.sh", CHECK), ("CHANGELOG.md", "# Changelog\n\n")] {
            std::fs::write(repo.join(name), text).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        for f in ["greet.sh", "check.sh"] {
            std::fs::set_permissions(repo.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        git(&repo, &["init", "-q", "-b", "main"]);
        let server = ModelServer::start(script).await;
        let clinic = Clinic { dir, repo, home, runs, server, agent, bin };
        let init = clinic.ward(&["init", "--agent", agent.preset()]);
        assert!(init.status.success(), "ward init: {}", stderr(&init));
        // The local forge's CI is the sample's check.
        let config = clinic.repo.join(".github/ward.yml");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains(&format!("  preset: {}\n", agent.preset())), "init wrote the preset");
        std::fs::write(&config, format!("{text}\nci:\n  command: sh check.sh\n")).unwrap();
        git(&clinic.repo, &["add", "-A"]);
        git(&clinic.repo, &["commit", "-qm", "the sample app and ward"]);
        Some(clinic)
    }

    /// ward with a job's environment: PATH (the CLIs' folder first), a
    /// HOME of the runner's, the run folder, the agent's key and endpoint.
    fn ward(&self, args: &[&str]) -> Output {
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin.display());
        Command::new(ward_bin())
            .args(args)
            .current_dir(&self.repo)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("USER", "tester")
            .env("WARD_ARTIFACTS", &self.runs)
            .envs(self.agent.job_env(&self.server))
            .output()
            .expect("ward runs")
    }

    fn ward_ok(&self, args: &[&str]) -> String {
        let out = self.ward(args);
        assert!(out.status.success(), "ward {args:?} failed:\n{}\n{}", stdout(&out), stderr(&out));
        stdout(&out)
    }

    fn chart(&self) -> String {
        std::fs::read_to_string(self.repo.join("charts/1.md")).unwrap_or_default()
    }

    /// Every file under the runner's HOME but ward's own state (its
    /// worktrees live under `~/.cache/ward`).
    fn home_files(&self) -> BTreeSet<String> {
        fn walk(dir: &Path, top: &Path, out: &mut BTreeSet<String>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let rel = e.path().strip_prefix(top).unwrap().to_string_lossy().into_owned();
                if rel == ".cache" || rel.starts_with(".cache/ward") {
                    continue;
                }
                if e.path().is_dir() {
                    walk(&e.path(), top, out);
                }
                out.insert(rel);
            }
        }
        let mut out = BTreeSet::new();
        walk(&self.home, &self.home, &mut out);
        out
    }

    /// The folders of every run of issue 1, oldest first.
    fn run_folders(&self) -> Vec<PathBuf> {
        let mut runs: Vec<PathBuf> =
            std::fs::read_dir(self.runs.join("1")).into_iter().flatten().flatten().map(|e| e.path()).collect();
        runs.sort();
        runs
    }
}

/// The scripted model for a whole patient. With a shell, every stage runs
/// the stand-in (its notes cite the worktree's real lines), and the fellow
/// first fixes `greet.sh` with the CLI's own edit tool; aider writes each
/// stage's notes as a file of its chat and fixes `greet.sh` by its edit.
fn whole_patient(agent: Agent) -> Script {
    let ward = ward_bin().display().to_string();
    let stand_in = Turn::shell(&format!("'{ward}' stand-in"));
    let stage = |matches: &str, mut turns: Vec<Turn>| {
        turns.push(Turn::text("Done: the notes are written."));
        Scene::new(matches, turns).with_usage(USAGE)
    };
    let scenes = if agent == Agent::Aider {
        // aider adds the repository's files a reply names to its chat and
        // asks again before applying any edit, as it does with a real model:
        // the reply is given a second time.
        let twice = |matches: &str, turns: Vec<Turn>| {
            let mut all = turns.clone();
            all.push(Turn::text("Done: the notes are written."));
            all.extend(turns);
            stage(matches, all)
        };
        aider_scenes(twice)
    } else {
        vec![
            stage("# Planner: triage", vec![stand_in.clone()]),
            stage("# Fellow: diagnosis", vec![stand_in.clone()]),
            stage("# Review attending: plan review", vec![stand_in.clone()]),
            stage("# Fellow: treatment", vec![Turn::edit("greet.sh", "echo \"Hello, $1!\"", FIXED), stand_in.clone()]),
            stage("# Review attending: code review", vec![stand_in.clone()]),
            stage("# Discharge nurse", vec![stand_in]),
        ]
    };
    Script::new(scenes)
}

/// aider's notes, one file per stage, the way its role's template asks.
fn aider_scenes(stage: impl Fn(&str, Vec<Turn>) -> Scene) -> Vec<Scene> {
    let notes = |kind: &str, body: &str, outcome: &str| {
        Turn::write(
            "{{notes}}",
            &format!("<!-- WARD:{kind} -->\n{body}\n<!-- /WARD:{kind} -->\n<!-- WARD:OUTCOME {outcome} -->\n"),
        )
    };
    let path = r"`(/[^`\s]+/\.ward-notes\.md)`";
    let plan = "## Reproduction\nRan `./greet.sh \"\"`: it prints `Hello, !`.\n\n## Differential diagnosis\n\
                1. Input not validated (confirmed by reading the script).\n2. A wrong default (ruled out: none is set).\n\n\
                ## Diagnosis\nThe script does not validate its argument.\n\n## Files to change\n- greet.sh: refuse the \
                empty name on stderr with exit code 2.\n- CHANGELOG.md: record the fix.\n\n## Tests to add\n- The check \
                script still passes.\n\n## Risks\nCallers that relied on the lenient behaviour now get an error.\n\n\
                ## Open questions\nNone.";
    let review = "## Scope against the plan\nOnly the planned files changed.\n\n## Correctness\nThe guard refuses the \
                  empty name before anything runs.\n\n## Tests\nThe check passes on the head.\n\n## Security\nNo new input \
                  reaches a shell, a query or a path.\n\n## Verdict\napprove\n\nCommit: {{head}}";
    vec![
        stage(
            "# Planner: triage",
            vec![notes("TRIAGE", "## Assessment\nOne defect in one place.\n\n## Decision\nready: no decomposition needed.", "ready")],
        ),
        stage("# Fellow: diagnosis", vec![notes("TREATMENT_PLAN", plan, "plan-posted")]),
        stage(
            "# Review attending: plan review",
            vec![notes("PLAN_REVIEW", "## Findings\nThe diagnosis follows from the reproduction; files and tests are named; the risk is stated.\n\n## Verdict\napprove", "approve")],
        ),
        stage(
            "# Fellow: treatment",
            vec![
                Turn::edit("greet.sh", "echo \"Hello, $1!\"", FIXED),
                Turn::write("CHANGELOG.md", "- Treated #1: the entry point validates its input.\n"),
                notes(
                    "TREATMENT_NOTE",
                    "## Changes against the plan\n- greet.sh refuses the empty name with exit code 2.\n- CHANGELOG.md records it.\n\n\
                     ## Tests run\n- The check script, as CI runs it.\n\n## Review findings addressed\nNone yet.\n\n\
                     ## Notes for the reviewer\nNothing outside the plan was touched.",
                    "treated",
                ),
            ],
        ),
        stage("# Review attending: code review", vec![notes("CODE_REVIEW", review, "approve")])
            .capture("head", r"this run started at `([0-9a-f]{40})`"),
        stage(
            "# Discharge nurse",
            vec![notes("DISCHARGE_CHECKLIST", "The engine's checklist above is what counts; nothing on it is left blank.", "discharged")],
        ),
    ]
    .into_iter()
    .map(|s| s.capture("notes", path))
    .collect()
}

/// Admission to a merged `main`: `ward run` takes the patient to the
/// pending label (the local CI ran on the treated head), a person approves,
/// `ward run` merges. What the agent left is checked on the way.
async fn a_patient_reaches_main(agent: Agent) {
    let Some(c) = Clinic::new(agent, whole_patient(agent)).await else { return };
    let version = Command::new(c.bin.join(agent.program())).arg("--version").output().unwrap();
    assert!(stdout(&version).contains(proven(agent.program())), "the proven version: {}", stdout(&version));
    let home_before = c.home_files();
    let base = git(&c.repo, &["rev-parse", "main"]);
    c.ward_ok(&["admit", "--title", ISSUE_TITLE, "--body", ISSUE_BODY]);
    let out = c.ward_ok(&["run"]);
    assert!(out.contains("rests at `ward:awaiting-review`"), "{out}\nchart:\n{}", c.chart());
    c.ward_ok(&["review", "1", "--approve"]);
    let out = c.ward_ok(&["run"]);
    assert!(out.contains("discharged -> ward:discharged"), "{out}\nchart:\n{}", c.chart());

    // main has the fix, made by the agent's own edit tool.
    let head = git(&c.repo, &["rev-parse", "main"]);
    assert_ne!(head, base);
    let greet = git(&c.repo, &["show", "main:greet.sh"]);
    assert!(greet.contains("[ -z \"$1\" ]") && greet.contains("exit 2"), "{greet}");
    let files = git(&c.repo, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(!files.lines().any(|f| f.starts_with(".aider") || f.starts_with(".ward")), "{files}");
    assert!(c.server.unmatched().is_empty(), "requests no scene matched: {:?}", c.server.unmatched().len());

    // Every stage run with an agent kept its transcript and read its usage.
    let chart = c.chart();
    let costs = chart.matches("<!-- WARD:COST").count();
    assert!(chart.matches("transcript: transcript/").count() >= 6, "each agent run links its transcript:\n{chart}");
    let with_agent: Vec<PathBuf> = c.run_folders().into_iter().filter(|r| r.join("transcript").is_dir()).collect();
    assert!(with_agent.len() >= 6, "{} runs kept a transcript of {costs}", with_agent.len());
    for run in &with_agent {
        assert!(!run.join("agent").exists(), "the private HOME of {} is gone", run.display());
    }
    let expected_tokens = match agent {
        // Claude reports Anthropic's split; codex counts cached tokens inside
        // its input; aider rounds.
        Agent::Claude => format!("input_tokens: {}", USAGE.input * 3),
        Agent::Codex => format!("input_tokens: {}", USAGE.input * 3 + USAGE.cache_creation * 3),
        Agent::Aider => "source: aider-text".into(),
    };
    assert!(chart.contains(&expected_tokens), "the usage the CLI reported:\n{chart}");
    // Nothing of the agent's in the runner's HOME.
    let added: Vec<String> = c.home_files().difference(&home_before).cloned().collect();
    assert!(added.is_empty(), "the agent left files in the runner's HOME: {added:?}");
    let comment = std::fs::read_to_string(c.repo.join(".ward/forge/issues/1.json")).unwrap();
    assert!(comment.contains("Transcript"), "the patient's comment links the transcript");
    drop(c.dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_takes_a_patient_to_main() {
    a_patient_reaches_main(Agent::Claude).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_takes_a_patient_to_main() {
    a_patient_reaches_main(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn aider_takes_a_patient_to_main() {
    a_patient_reaches_main(Agent::Aider).await;
}

/// A rejected key: the run ends in seconds (not the CLI's minutes of
/// retries), the REFUSAL says what the model said and what to check, and
/// the patient stays where it was.
async fn a_rejected_key_ends_the_run_in_seconds(agent: Agent) {
    let script = Script::always(Fault::status(401, "invalid x-api-key"));
    let Some(c) = Clinic::new(agent, script).await else { return };
    c.ward_ok(&["admit", "--title", ISSUE_TITLE, "--body", ISSUE_BODY]);
    let started = Instant::now();
    let out = c.ward(&["stage", "--issue", "1"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "an invalid run: {}\n{}", stdout(&out), stderr(&out));
    eprintln!("{}: a rejected key ended the stage run in {:.1}s", agent.preset(), took.as_secs_f64());
    // Alone each CLI gives up in 1 to 6 s (docs/agents.md); the bound is
    // loose for a loaded machine and still far below the CLIs' own minutes
    // of retries, which is what it tells apart.
    assert!(took < Duration::from_secs(60), "{} took {took:?} to give up on a rejected key", agent.preset());
    let chart = c.chart();
    let refusal = chart.split("<!-- WARD:REFUSAL").nth(1).unwrap_or_default();
    // Claude Code and codex print the status; aider's litellm names a
    // rejected key a bad request, and says why.
    let said = if agent == Agent::Aider { "invalid x-api-key" } else { "HTTP 401" };
    assert!(refusal.contains(said), "what the model said: {refusal}");
    assert!(refusal.contains("stopped the agent"), "{refusal}");
    let secret = ward::config::agents::preset(agent.preset()).unwrap().secret;
    assert!(refusal.contains(secret), "what to check: {refusal}");
    let issue = std::fs::read_to_string(c.repo.join(".ward/forge/issues/1.json")).unwrap();
    assert!(issue.contains("ward:admit"), "the label stays: {issue}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_key_ends_a_claude_code_run_in_seconds() {
    a_rejected_key_ends_the_run_in_seconds(Agent::Claude).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_key_ends_a_codex_run_in_seconds() {
    a_rejected_key_ends_the_run_in_seconds(Agent::Codex).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_key_ends_an_aider_run_in_seconds() {
    a_rejected_key_ends_the_run_in_seconds(Agent::Aider).await;
}

/// An overloaded model service: Claude Code retries within the stage's
/// time limit, and the run is the service's failure, not the patient's: a
/// REFUSAL that says so, the label kept, and no stage visit counted.
#[tokio::test(flavor = "multi_thread")]
async fn an_overloaded_service_is_the_services_failure_not_the_patients() {
    let script = Script::always(Fault::status(529, "Overloaded"));
    let Some(c) = Clinic::new(Agent::Claude, script).await else { return };
    let config = c.repo.join(".github/ward.yml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen("    mode: triage\n    time_limit: 15m\n", "    mode: triage\n    time_limit: 12s\n", 1);
    assert!(text.contains("time_limit: 12s"), "the admit stage's limit");
    std::fs::write(&config, text).unwrap();
    c.ward_ok(&["admit", "--title", ISSUE_TITLE, "--body", ISSUE_BODY]);
    let out = c.ward(&["stage", "--issue", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    let chart = c.chart();
    let refusal = chart.split("<!-- WARD:REFUSAL").nth(1).unwrap_or_default();
    assert!(refusal.contains("The model service failed this run"), "{refusal}");
    assert!(refusal.contains("HTTP 529") && refusal.contains("not the patient's"), "{refusal}");
    assert!(!chart.contains("WARD:ESCALATION"), "nothing goes to the chiefs");
    let notes = ward::chart::Sentinels::new("WARD").parse_chart(&chart).unwrap();
    let report = ward::budget::patient_spend(&notes, &Default::default());
    assert_eq!(report.stage_visits, 0, "the service's failure is not counted against the patient");
    assert!(c.server.requests().len() >= 2, "the CLI retried within the time limit");
}

/// The model key stays with ward (engine/agent/gate.rs): the agent, looking
/// in its environment, every process's `/proc/*/environ` it can read and
/// its HOME, finds only the placeholder; the model server sees the real key
/// on every request, put in by ward's proxy; and the agent reaches nothing
/// but the model: a host outside the allowlist is refused, and the stage
/// still ends as it would.
async fn the_model_key_stays_with_ward(agent: Agent) {
    let ward = ward_bin().display().to_string();
    // What it finds is printed, so it goes back to the model in the tool's result.
    let look = "env | grep -E 'KEY|TOKEN'; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\"; done \
                | grep -E 'KEY|TOKEN' | sort -u; grep -rhos 'sk-[A-Za-z0-9-]*' \"$HOME\" /proc/[0-9]*/environ; \
                curl -sS -m 5 https://example.org/ || echo curl-failed";
    let scene = Scene::new(
        "# Planner: triage",
        vec![Turn::shell(look), Turn::shell(&format!("'{ward}' stand-in")), Turn::text("Done.")],
    );
    let Some(c) = Clinic::new(agent, Script::new(vec![scene])).await else { return };
    let (key_var, real) = c.agent.job_env(&c.server).into_iter().next().unwrap();
    c.ward_ok(&["admit", "--title", ISSUE_TITLE, "--body", ISSUE_BODY]);
    let out = c.ward_ok(&["stage", "--issue", "1"]);
    assert!(out.contains("ward:diagnose"), "{out}\nchart:\n{}", c.chart());
    let bodies: String = c.server.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(bodies.contains(&format!("{key_var}=ward-placeholder")), "the agent looked: {bodies}");
    assert!(!bodies.contains(&real), "the agent found the real key {key_var}");
    assert!(bodies.contains("curl-failed") || bodies.contains("403"), "example.org was refused");
    let requests = c.server.requests();
    let model: Vec<_> = requests.iter().filter(|r| r.method == "POST").collect();
    assert!(!model.is_empty(), "the agent talked to the model");
    for r in &model {
        let sent = r.header("x-api-key").map(str::to_string).or_else(|| r.header("authorization").map(str::to_string));
        assert_eq!(
            sent.as_deref().map(|s| s.trim_start_matches("Bearer ")),
            Some(real.as_str()),
            "ward's proxy put the real key on {} {}",
            r.method,
            r.path
        );
        assert!(!format!("{:?}", r.headers).contains("placeholder"), "the placeholder reached the model");
    }
    let chart = c.chart();
    let network = chart.split("<!-- WARD:NETWORK").nth(1).unwrap_or_default();
    assert!(network.contains("blocked: "), "the refused connections are in the chart:\n{chart}");
    // codex's own sandbox keeps its commands off the network before the wall does.
    if agent == Agent::Claude {
        assert!(network.contains("example.org:443 ×1"), "{network}");
    }
    let comment = std::fs::read_to_string(c.repo.join(".ward/forge/issues/1.json")).unwrap();
    assert!(comment.contains("| Network | blocked: "), "the patient's comment says what was blocked: {comment}");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_codes_model_key_stays_with_ward() {
    the_model_key_stays_with_ward(Agent::Claude).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn codexs_model_key_stays_with_ward() {
    the_model_key_stays_with_ward(Agent::Codex).await;
}
