//! The hostile-agent suite: one small agent per attack (`tests/hostile/*.sh`),
//! each run through a real stage by the real `ward` binary, with ward
//! running as an ordinary user (a dedicated unprivileged account when the
//! tests run as root) and holding the credentials a workflow step holds, as
//! canaries. Each test asserts the attack is inert (no canary in what the
//! agent found or wrote, nor anywhere under the sandbox), that the attack
//! really ran (it finds its control: a decoy of the same shape it can reach),
//! and that the stage still ends as it would with a harmless agent.
//!
//! A new attack is one agent file in `tests/hostile/` (sourcing
//! `common.sh`) plus one test function here. The attacks of issue 10:
//!
//! | attack                                              | covered by                                   |
//! |-----------------------------------------------------|----------------------------------------------|
//! | tokens from `/proc/*/environ` (the parent's first)  | `environ.sh`: local forge, GitHub forge      |
//! | tokens from `/proc/*/cmdline`                       | `cmdline.sh`: local forge, GitHub forge      |
//! | tokens from `/proc/<ppid>/mem` (via `maps`)         | `mem.sh`: local forge, GitHub forge          |
//! | tokens in `.git/config`, `$HOME`, `$RUNNER_TEMP`    | `files.sh`: local forge, GitHub forge        |
//! | tokens in the agent's environment                   | `env.sh`: local forge, GitHub forge          |
//! | a ward.yml whose `agent.pass_env` names a token     | refused by the config check (no agent runs)  |
//! | edits in every stage that doesn't treat             | not yet (needs "stages that don't treat")    |
//! | edits to every protected path                       | not yet (needs protected paths)              |
//! | a precedent appended under ward's identity          | not yet (needs protected paths)              |
//! | fsmonitor / insteadOf planted before a fetch        | not yet (needs the bare-repository fetch)    |
//! | `::stop-commands::` and fake annotations            | `commands.sh`: local forge; the Actions runner (tests/workflows.rs) |
//! | a forged worktree marker; a foreign container       | not yet (needs the reapers' ownership)       |
//! | a 5 MB note; a note over the per-note limit         | `notes.sh big`: local forge                  |
//! | a 100k-deep YAML note                               | unit tests (rules/decomposition.rs, untrusted.rs) |
//! | control characters in notes                         | `notes.sh controls`: local forge             |
//! | a child that daemonises and rewrites the visit      | not yet (needs the visit/record jobs)        |
//! | a child that daemonises and reads the push's env    | not yet (needs a reaper of agent leftovers)  |
//! | all of the above through the visit and record jobs | not yet (needs the two-job split)            |
//!
//! `hold.sh` is not an attack: it holds a stage open while the test looks
//! at ward from outside.
//!
//! Before `engine/secrets.rs`, the environ, mem and GitHub-forge tests, the
//! `pass_env` refusal and the outside look failed (each found the token).
//! The cmdline, files and env tests passed then too: they hold ward to not
//! handing a token over on a command line, in a file, or to the agent.
//!
//! What the token attacks prove, and what they can't: see the README's
//! security section. An agent with the Docker socket, or one that reads the
//! runner's own processes, is outside what one process can defend.

mod support;

#[path = "hostile/harness.rs"]
mod harness;

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use harness::{CANARIES, DECOY_ARGV, DECOY_ENV, DECOY_FILE, DECOY_MEM, Sandbox};

fn assert_found(loot: &str, decoy: &str, what: &str) {
    assert!(loot.contains(decoy), "the attack did not find its control ({what}), so it proves nothing:\n{loot}");
}

#[test]
fn environ_of_every_process_holds_no_credential() {
    let s = Sandbox::new();
    let decoy = s.decoy();
    s.agent("environ", &[], &[]);
    let out = s.stage(&[]);
    let loot = s.loot();
    assert_found(&loot, DECOY_ENV, &format!("the environment of process {}", decoy.pid()));
    s.assert_no_canary(&out);
    s.assert_normal_outcome(&out);
}

#[test]
fn command_lines_hold_no_credential() {
    let s = Sandbox::new();
    let decoy = s.decoy();
    s.agent("cmdline", &[], &[]);
    let out = s.stage(&[]);
    let loot = s.loot();
    assert_found(&loot, DECOY_ARGV, &format!("the command line of process {}", decoy.pid()));
    s.assert_no_canary(&out);
    s.assert_normal_outcome(&out);
}

/// Where Yama's `ptrace_scope` is 1 (Ubuntu's default) the kernel already
/// refuses an agent its parent's memory; ward being non-dumpable refuses it
/// everywhere (this machine has no Yama, and there the test failed before).
#[test]
fn the_parents_memory_holds_no_credential_the_agent_can_read() {
    let s = Sandbox::new();
    s.agent("mem", &[DECOY_MEM], &[]);
    let out = s.stage(&[]);
    let loot = s.loot();
    assert_found(&loot, &format!("/mem: {DECOY_MEM}"), "the memory of a child of its own");
    s.assert_no_canary(&out);
    s.assert_normal_outcome(&out);
}

#[test]
fn files_the_agent_can_read_hold_no_credential() {
    let s = Sandbox::new();
    let (runner_temp, repo) = (s.runner_temp.display().to_string(), s.repo.display().to_string());
    s.agent("files", &[&runner_temp, &repo], &[]);
    let out = s.stage(&[]);
    let loot = s.loot();
    assert_found(&loot, DECOY_FILE, "~/.git-credentials");
    assert!(loot.contains(&format!("searched {runner_temp}")), "{loot}");
    s.assert_no_canary(&out);
    s.assert_normal_outcome(&out);
}

#[test]
fn the_agents_environment_holds_no_credential() {
    let s = Sandbox::new();
    s.agent("env", &[], &["DECOY_TOKEN"]);
    let out = s.stage(&[("DECOY_TOKEN", DECOY_ENV)]);
    let loot = s.loot();
    assert_found(&loot, &format!("DECOY_TOKEN={DECOY_ENV}"), "a variable agent.pass_env names");
    s.assert_no_canary(&out);
    s.assert_normal_outcome(&out);
}

#[test]
fn a_ward_yml_that_passes_a_credential_to_the_agent_is_refused_before_any_agent_runs() {
    let s = Sandbox::new();
    // Every credential by name (WARD_* names were refused already), then a
    // harmless variable.
    let mut names: Vec<&str> = CANARIES.iter().map(|(k, _)| *k).filter(|k| !k.starts_with("WARD_")).collect();
    names.push("DECOY_TOKEN");
    s.agent("env", &[], &names);
    let out = s.stage(&[("DECOY_TOKEN", DECOY_ENV)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad input: {err}");
    assert!(
        err.contains("agent.pass_env.0: `GITHUB_TOKEN` is a credential; ward never hands credentials to the agent"),
        "{err}"
    );
    assert_eq!(s.loot(), "", "no agent ran");
    assert_eq!(s.labels(1), ["ward:admit"], "nothing changed");
    s.assert_no_canary(&out);
    let check = s.ward_cmd(&["config", "check"], &[]).output().unwrap();
    assert_eq!(check.status.code(), Some(2), "`ward config check` says so too");
}

/// Not an attack: what the attacks can't reach, seen by someone who can.
/// The stage is held open while the test looks at ward from outside: its
/// `/proc` files belong to root (it is non-dumpable), and, when the test
/// runs as root (which reads any process's environment, dumpable or not),
/// the environment and command line ward runs with hold no credential:
/// the re-exec left them out of the process image, not just out of reach.
#[test]
fn ward_is_non_dumpable_and_its_own_environment_never_held_a_credential() {
    let s = Sandbox::new();
    s.agent("hold", &[], &[]);
    let env = s.step_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let child =
        s.ward_cmd(&["stage", "--issue", "1"], &env).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    let pid = loop {
        if let Some(pid) = s.loot().lines().find_map(|l| l.strip_prefix("holding, parent ")) {
            break pid.trim().to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the agent never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let owner = std::fs::metadata(format!("/proc/{pid}/environ")).map(|m| m.uid());
    let environ = std::fs::read(format!("/proc/{pid}/environ"));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    std::fs::write(s.loot.with_extension("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();

    assert_eq!(owner.ok(), Some(0), "ward's /proc files belong to root only when it is non-dumpable");
    assert!(!String::from_utf8_lossy(&cmdline).contains("CANARY"), "a credential on ward's command line");
    if harness::is_root() {
        let environ = String::from_utf8_lossy(&environ.expect("root reads any environment")).into_owned();
        assert!(environ.contains("RUNNER_TEMP="), "this is ward's environment: {environ}");
        assert!(!environ.contains("CANARY"), "ward's process image holds a credential:\n{environ}");
    } else {
        assert!(environ.is_err(), "the current user read a non-dumpable process's environment");
    }
    s.assert_no_canary(&out);
    s.assert_normal_outcome(&out);
}

/// The lines a workflow runner would read as commands in `printed`: after
/// leading whitespace a `::`, or `##[` anywhere; lines end at LF or CR.
fn workflow_command_lines(printed: &str) -> Vec<&str> {
    printed.split(['\n', '\r']).filter(|l| l.trim_start().starts_with("::") || l.contains("##[")).collect()
}

/// Before the escaping, ward quoted the agent's stderr verbatim on stdout:
/// the runner masked `ward`, stopped reading commands and showed the
/// forged annotations (this test then failed on every assertion below).
#[test]
fn workflow_commands_the_agent_prints_are_shown_never_obeyed() {
    let s = Sandbox::new();
    s.agent("commands", &[], &[]);
    let out = s.stage(&[]);
    assert!(s.loot().contains("commands printed by"), "the attack did not run: {}", s.loot());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "an invalid run: {stdout}\n{stderr}");
    assert!(stdout.contains("\\::stop-commands::hostile-token"), "quoted, visibly: {stdout}");
    assert!(stdout.contains("#\\#[error]old form"), "{stdout}");
    let printed = format!("{stdout}{stderr}");
    assert_eq!(workflow_command_lines(&printed), Vec::<&str>::new(), "{printed}");
    let mut runner = support::actions::step::Commands::default();
    let log = runner.process(&printed);
    assert!(runner.annotations.is_empty() && runner.masks.is_empty() && runner.outputs.is_empty(), "{runner:?}");
    assert!(log.contains("ward"), "nothing masked");
    assert_eq!(s.labels(1), ["ward:admit"], "the label did not move");
    let chart = s.ward_cmd(&["chart", "show", "1"], &[]).output().unwrap();
    let chart = String::from_utf8_lossy(&chart.stdout).into_owned();
    assert!(chart.contains("<!-- WARD:REFUSAL "), "{chart}");
    assert_eq!(workflow_command_lines(&chart), Vec::<&str>::new(), "`ward chart show` escapes them too:\n{chart}");
    s.assert_no_canary(&out);
}

/// A note over the per-note limit is refused whole (nothing of it reaches
/// the chart); a 5 MB notes file too. Before the limits, a note of any
/// size under the file's 512 KiB went into the chart.
#[test]
fn an_oversized_note_is_refused_and_the_chart_stays_small() {
    for (bytes, said) in [
        ("100000", "over the limit of 65536 bytes per note; write a shorter note"),
        ("5000000", "over the limit of 524288 bytes; write shorter notes"),
    ] {
        let s = Sandbox::new();
        s.agent("notes", &["big", bytes], &[]);
        let out = s.stage(&[]);
        assert!(s.loot().contains("notes: "), "the attack did not run: {}", s.loot());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(said), "{stdout}");
        assert_eq!(s.labels(1), ["ward:admit"]);
        let chart = std::fs::read_to_string(s.repo.join("charts/1.md")).unwrap_or_default();
        assert!(chart.contains("<!-- WARD:REFUSAL ") && chart.contains(said), "{chart}");
        assert!(chart.len() < 64 * 1024, "{} bytes", chart.len());
        s.assert_no_canary(&out);
    }
}

/// Before, `ward chart show` and `chart notes` printed an agent's escape
/// sequences raw: a terminal cleared the screen, retitled its window and
/// showed `exe.png` for `gnp.exe`.
#[test]
fn control_characters_in_notes_are_shown_escaped() {
    let s = Sandbox::new();
    s.agent("notes", &["controls"], &[]);
    let out = s.stage(&[]);
    s.assert_normal_outcome(&out);
    let raw = std::fs::read_to_string(s.repo.join("charts/1.md")).unwrap();
    assert!(raw.contains('\u{1b}') && raw.contains('\u{202e}'), "the chart keeps what the agent wrote: {raw}");
    for args in [&["chart", "show", "1"][..], &["chart", "notes", "1"], &["chart", "notes", "1", "--json"]] {
        let shown = s.ward_cmd(args, &[]).output().unwrap();
        assert!(shown.status.success(), "{args:?}: {}", String::from_utf8_lossy(&shown.stderr));
        let text = String::from_utf8_lossy(&shown.stdout);
        for hidden in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
            assert!(!text.contains(hidden), "{args:?} printed {hidden:?} raw:\n{text}");
        }
        let escaped = if args.contains(&"--json") { "\\u202egnp.exe" } else { "\\u{202e}gnp.exe" };
        assert!(text.contains(escaped), "{args:?}:\n{text}");
    }
}

// ---------------------------------------------------------------------------
// The GitHub forge: `ward stage --event` as a workflow step runs it, against
// the fake GitHub, whose only accepted token is a canary.

mod github {
    use std::path::Path;

    use serde_json::json;

    use super::harness::{CANARIES, DECOY_ARGV, DECOY_ENV, DECOY_FILE, DECOY_MEM, Sandbox};
    use super::support::fake_github::{FakeGitHub, OWNER, REPO};

    fn canary(name: &str) -> &'static str {
        CANARIES.iter().find(|(k, _)| *k == name).map(|(_, v)| *v).unwrap()
    }

    /// The `issues` `labeled` event of a person with triage admitting #n.
    fn admission(dir: &Path, n: u64) -> std::path::PathBuf {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/github/webhooks/issues/labeled.payload.json");
        let mut e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        e["label"]["name"] = json!("ward:admit");
        e["issue"]["number"] = json!(n);
        e["sender"]["login"] = json!("alice");
        e["repository"]["full_name"] = json!(format!("{OWNER}/{REPO}"));
        let path = dir.join("event.json");
        std::fs::write(&path, e.to_string()).unwrap();
        path
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_attack_reads_the_token_ward_talks_to_github_with() {
        let gh = FakeGitHub::start().await;
        // ward authenticates with WARD_TOKEN; the fake accepts nothing else.
        gh.state().replace_default_token(canary("WARD_TOKEN"));
        let n = {
            let mut st = gh.state();
            st.add_collaborator("alice", "triage");
            st.add_issue("greet fails on empty names", "Steps: run it.", "alice", &["ward:admit"])
        };
        let s = Sandbox::new();
        let _decoy = s.decoy();
        let folders = [s.runner_temp.display().to_string(), s.repo.display().to_string()];
        s.agent("all", &[DECOY_MEM, &folders[0], &folders[1]], &[]);
        let event = admission(&s.runner_temp, n);
        let (summary, output) = (s.runner_temp.join("summary.md"), s.runner_temp.join("output"));
        let server_url = s.git_server(OWNER, REPO);
        let env = s.step_env();
        let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let repository = format!("{OWNER}/{REPO}");
        env.extend([
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_API_URL", gh.url.as_str()),
            ("GITHUB_SERVER_URL", server_url.as_str()),
            ("GITHUB_REPOSITORY", repository.as_str()),
            ("GITHUB_EVENT_NAME", "issues"),
            ("GITHUB_STEP_SUMMARY", summary.to_str().unwrap()),
            ("GITHUB_OUTPUT", output.to_str().unwrap()),
        ]);
        let mut cmd = s.ward_cmd(&["stage", "--event", event.to_str().unwrap()], &env);
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();

        let loot = s.loot();
        let controls = [(DECOY_ENV, "environ"), (DECOY_ARGV, "cmdline"), (DECOY_MEM, "mem"), (DECOY_FILE, "files")];
        for (decoy_value, what) in controls {
            assert!(
                loot.contains(decoy_value),
                "the {what} attack did not find its control:\n{loot}\nward said:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        s.assert_no_canary(&out);
        assert!(
            out.status.success(),
            "ward stage failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let st = gh.state();
        assert_eq!(st.labels_of(n), ["ward:diagnose"], "the stage ended as usual, talking to the fake with WARD_TOKEN");
    }
}
