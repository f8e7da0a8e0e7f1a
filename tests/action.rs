//! The GitHub Action (`action.yml`): its installer `action/install.sh`
//! against the fake GitHub's releases (the real script, curl, tar and
//! sha256sum; the real ward binary packaged as the release workflow packages
//! it), and its runner `action/run.sh` against a stand-in ward that prints
//! the arguments it got.
#![cfg(target_os = "linux")]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use support::fake_github::{FakeGitHub, TOKEN};
use support::openapi::OpenApi;
use support::release::{platform, release, release_step, repo_root, run_step, sha256, tarball};

/// The repository the action comes from (not the hospital's: `octo/hospital`).
const ACTION_REPO: &str = "wardhq/ward";
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// SHA256SUMS as `sha256sum` writes it.
fn sums(lines: &[(&str, &str)]) -> Vec<u8> {
    lines.iter().map(|(hash, name)| format!("{hash}  {name}\n")).collect::<String>().into_bytes()
}

/// Publishes `v<version>` of the action's repository: this platform's
/// tarball (`served`), the other platform's, and `sha256sums`.
fn publish(gh: &FakeGitHub, served: Vec<u8>, sha256sums: Vec<u8>) {
    let (_, target, other) = platform();
    gh.state().publish_release(
        ACTION_REPO,
        &format!("v{VERSION}"),
        &[(&tarball(other), release().other.clone()), (&tarball(target), served), ("SHA256SUMS", sha256sums)],
    );
}

/// The release exactly as the release workflow makes it.
fn publish_good(gh: &FakeGitHub) {
    publish(gh, release().bytes.clone(), release().sums.clone());
}

struct Install {
    code: i32,
    stdout: String,
    stderr: String,
    outputs: BTreeMap<String, String>,
    /// `RUNNER_TEMP`: the only place the script may install into.
    runner_temp: tempfile::TempDir,
}

impl Install {
    fn bin(&self) -> PathBuf {
        self.runner_temp.path().join("ward/bin/ward")
    }

    /// Nothing under `$RUNNER_TEMP` but the outputs file.
    fn installed_nothing(&self) -> bool {
        let entries: Vec<String> = std::fs::read_dir(self.runner_temp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        entries == ["outputs"] || entries.is_empty()
    }

    fn log(&self) -> String {
        format!("exit {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// Runs `action/install.sh` as the composite's first step does, with a
/// scrubbed environment: the action's repository, the token, the pin.
async fn install(gh: &FakeGitHub, env: &[(&str, &str)]) -> Install {
    let (arch, _, _) = platform();
    let runner_temp = tempfile::tempdir().unwrap();
    let outputs = runner_temp.path().join("outputs");
    std::fs::write(&outputs, "").unwrap();
    let out = tokio::process::Command::new("bash")
        .arg(repo_root().join("action/install.sh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", runner_temp.path())
        .env("RUNNER_TEMP", runner_temp.path())
        .env("RUNNER_OS", "Linux")
        .env("RUNNER_ARCH", arch)
        .env("GITHUB_OUTPUT", &outputs)
        .env("GITHUB_API_URL", &gh.url)
        .env("GITHUB_ACTION_PATH", repo_root())
        .env("WARD_REPOSITORY", ACTION_REPO)
        .env("WARD_INSTALL_TOKEN", TOKEN)
        .env("WARD_INSTALL_DIR", runner_temp.path().join("ward/bin"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("bash runs");
    let outputs = std::fs::read_to_string(&outputs)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Install {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        outputs,
        runner_temp,
    }
}

/// Every request that reached the fake, as `METHOD /template STATUS`.
fn calls(gh: &FakeGitHub) -> Vec<String> {
    gh.state().log.iter().map(|e| format!("{} {}", e.key(), e.status)).collect()
}

#[tokio::test]
async fn a_release_with_the_right_checksum_installs_a_binary_that_runs() {
    let gh = FakeGitHub::start().await;
    publish_good(&gh);
    let run = install(&gh, &[]).await;
    assert_eq!(run.code, 0, "{}", run.log());
    let (_, target, _) = platform();
    assert!(
        run.stdout.contains(&format!(
            "installed ward {VERSION} ({target}) from release v{VERSION} of {ACTION_REPO}, SHA-256 {}",
            release().sha256
        )),
        "{}",
        run.log()
    );
    assert_eq!(run.outputs["build"], "false");
    assert_eq!(run.outputs["version"], VERSION);
    assert_eq!(Path::new(&run.outputs["bin"]), run.bin());
    let lock = std::fs::read(repo_root().join("Cargo.lock")).unwrap();
    assert_eq!(run.outputs["lock-hash"], sha256(&lock), "the source build's cache key");

    // The installed binary is the packaged one, and it runs.
    let installed = std::fs::read(run.bin()).unwrap();
    assert_eq!(installed, std::fs::read(env!("CARGO_BIN_EXE_ward")).unwrap());
    let version = std::process::Command::new(run.bin()).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout), format!("ward {VERSION}\n"));

    // The API calls GitHub documents; the bytes come from the storage host,
    // which refuses a request carrying the token (so none was forwarded).
    let repo = "/repos/{owner}/{repo}/releases";
    assert_eq!(
        calls(&gh),
        [
            format!("GET {repo}/tags/{{tag}} 200"),
            format!("GET {repo}/{{release_id}}/assets 200"),
            format!("GET {repo}/assets/{{asset_id}} 302"),
            "GET /github-production-release-asset/{asset_id} 200".to_string(),
            format!("GET {repo}/assets/{{asset_id}} 302"),
            "GET /github-production-release-asset/{asset_id} 200".to_string(),
        ]
    );
    let api = OpenApi::load("releases.subset.openapi.json");
    for e in gh.state().log.iter().filter(|e| api.has(&e.method, &e.route)) {
        api.check_answer(e).unwrap_or_else(|why| panic!("the fake's answer is not GitHub's: {why}"));
    }
}

#[tokio::test]
async fn the_token_reaches_the_api_and_a_bad_one_is_named() {
    let gh = FakeGitHub::start().await;
    publish_good(&gh);
    let run = install(&gh, &[("WARD_INSTALL_TOKEN", "ghs_expired")]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(
        run.stdout.contains(&format!(
            "::error title=ward install::GitHub answered 401 to {}/repos/{ACTION_REPO}/releases/tags/v{VERSION}: Bad credentials",
            gh.url
        )),
        "{}",
        run.log()
    );
    assert!(run.installed_nothing());
    assert!(!run.outputs.contains_key("build"), "no fallback build after a failed install");
}

#[tokio::test]
async fn a_wrong_checksum_in_sha256sums_is_refused_and_nothing_is_installed() {
    let (_, target, other) = platform();
    let name = tarball(target);
    let wrong = sha256(b"what the release workflow built");
    let gh = FakeGitHub::start().await;
    publish(&gh, release().bytes.clone(), sums(&[(&sha256(b"x"), &tarball(other)), (&wrong, &name)]));
    let run = install(&gh, &[]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    let error = format!(
        "::error title=ward install::{name}: SHA-256 is {}, but SHA256SUMS of release v{VERSION} ({ACTION_REPO}) says \
         {wrong}. Refusing to install it: the download is corrupt or truncated, or the release was changed. Nothing \
         was installed.\n",
        release().sha256
    );
    assert!(run.stdout.contains(&error), "{}", run.log());
    assert!(run.installed_nothing(), "{}", run.log());
    assert!(!run.outputs.contains_key("build"), "a refused binary never falls back to a build");
}

#[tokio::test]
async fn a_truncated_download_is_refused() {
    let (_, target, other) = platform();
    let p = release();
    let truncated = p.bytes[..p.bytes.len() / 2].to_vec();
    let gh = FakeGitHub::start().await;
    publish(&gh, truncated.clone(), sums(&[(&sha256(b"x"), &tarball(other)), (&p.sha256, &tarball(target))]));
    let run = install(&gh, &[]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(
        run.stdout.contains(&format!(
            "{}: SHA-256 is {}, but SHA256SUMS of release v{VERSION} ({ACTION_REPO}) says {}",
            tarball(target),
            sha256(&truncated),
            p.sha256
        )),
        "{}",
        run.log()
    );
    assert!(run.installed_nothing());
}

#[tokio::test]
async fn a_release_without_sha256sums_or_without_a_line_for_the_tarball_is_refused() {
    let (_, target, other) = platform();
    let gh = FakeGitHub::start().await;
    gh.state().publish_release(ACTION_REPO, &format!("v{VERSION}"), &[(&tarball(target), release().bytes.clone())]);
    let run = install(&gh, &[]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(
        run.stdout.contains("but no SHA256SUMS to check it against; refusing an unverified binary"),
        "{}",
        run.log()
    );
    assert!(run.installed_nothing());

    let gh = FakeGitHub::start().await;
    publish(&gh, release().bytes.clone(), sums(&[(&sha256(b"x"), &tarball(other))]));
    let run = install(&gh, &[]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(run.stdout.contains(&format!("has no line for {}", tarball(target))), "{}", run.log());
    assert!(run.installed_nothing());
}

#[tokio::test]
async fn a_pinned_sha256_must_match_the_download() {
    let (_, target, _) = platform();
    let gh = FakeGitHub::start().await;
    publish_good(&gh);

    // Pinned to another binary (the release was replaced since, say): refused,
    // though SHA256SUMS (replaced with it) agrees with the download.
    let pin = sha256(b"the binary that was released first");
    let run = install(&gh, &[("WARD_SHA256", &pin)]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(
        run.stdout.contains(&format!(
            "::error title=ward install::{}: SHA-256 is {}, but input sha256 pins {pin}. Refusing to install it",
            tarball(target),
            release().sha256
        )),
        "{}",
        run.log()
    );
    assert!(run.installed_nothing());

    // Pinned to this binary (any case): installed.
    let run = install(&gh, &[("WARD_SHA256", &release().sha256.to_uppercase())]).await;
    assert_eq!(run.code, 0, "{}", run.log());
    assert!(run.bin().exists());

    // Not a SHA-256 at all.
    let run = install(&gh, &[("WARD_SHA256", "abc123")]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(run.stdout.contains("input sha256 must be the 64 hexadecimal digits of a SHA-256, not 'abc123'"));
    assert!(run.installed_nothing());
}

#[tokio::test]
async fn without_a_release_for_the_version_the_source_build_is_needed_and_nothing_is_installed() {
    let gh = FakeGitHub::start().await;
    // Another version is released, and this one is still a draft: neither counts.
    gh.state().publish_release(ACTION_REPO, "v0.0.1", &[("SHA256SUMS", b"".to_vec())]);
    gh.state().draft_release(ACTION_REPO, &format!("v{VERSION}"), &[("SHA256SUMS", b"".to_vec())]);
    let run = install(&gh, &[]).await;
    assert_eq!(run.code, 0, "{}", run.log());
    assert_eq!(run.outputs["build"], "true");
    assert_eq!(Path::new(&run.outputs["bin"]), run.bin(), "where the build installs it");
    assert!(
        run.stdout.contains(&format!(
            "::notice title=ward install::{ACTION_REPO} has no release v{VERSION}: building ward {VERSION} from the \
             action's source"
        )),
        "{}",
        run.log()
    );
    assert!(run.installed_nothing());
    assert_eq!(calls(&gh), ["GET /repos/{owner}/{repo}/releases/tags/{tag} 404"]);

    // With a pin, a missing release is an error: the user asked for one binary.
    let pin = release().sha256.clone();
    let run = install(&gh, &[("WARD_SHA256", &pin)]).await;
    assert_eq!(run.code, 1, "{}", run.log());
    assert!(
        run.stdout
            .contains(&format!("input sha256 pins a release binary, but {ACTION_REPO} has no release v{VERSION}"))
    );
    assert!(!run.outputs.contains_key("build"));
}

#[tokio::test]
async fn a_platform_or_a_local_action_without_a_binary_builds_from_source() {
    let (_, _, other) = platform();
    let gh = FakeGitHub::start().await;
    // The release exists, but only for the other platform.
    gh.state().publish_release(
        ACTION_REPO,
        &format!("v{VERSION}"),
        &[(&tarball(other), b"x".to_vec()), ("SHA256SUMS", sums(&[(&sha256(b"x"), &tarball(other))]))],
    );
    let run = install(&gh, &[]).await;
    assert_eq!((run.code, run.outputs["build"].as_str()), (0, "true"), "{}", run.log());
    assert!(run.stdout.contains(&format!("release v{VERSION} of {ACTION_REPO} has no {}", tarball(platform().1))));
    assert!(run.installed_nothing());

    let before = gh.state().log.len();
    let run = install(&gh, &[("RUNNER_OS", "macOS"), ("RUNNER_ARCH", "ARM64")]).await;
    assert_eq!((run.code, run.outputs["build"].as_str()), (0, "true"), "{}", run.log());
    assert!(run.stdout.contains("releases have binaries for Linux x86_64 and aarch64 only, not macOS ARM64"));
    let run = install(&gh, &[("WARD_REPOSITORY", "")]).await;
    assert_eq!((run.code, run.outputs["build"].as_str()), (0, "true"), "{}", run.log());
    assert!(run.stdout.contains("the action runs from a local path, which has no releases"));
    assert_eq!(gh.state().log.len(), before, "no request when there is nothing to download");
}

#[test]
fn a_release_needs_a_tag_equal_to_v_and_the_version_of_cargo_toml() {
    let script = release_step("Compare the tag with Cargo.toml");
    let dir = tempfile::tempdir().unwrap();
    let outputs = dir.path().join("outputs");
    let outputs_env = ("GITHUB_OUTPUT", outputs.to_str().unwrap());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let path = format!("{}:{}", Path::new(&cargo).parent().unwrap().display(), std::env::var("PATH").unwrap());

    let tag = format!("v{VERSION}");
    let out = run_step(&script, repo_root(), &[("TAG", &tag), outputs_env, ("PATH", &path)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&outputs).unwrap(), format!("version={VERSION}\n"));

    std::fs::write(&outputs, "").unwrap();
    let out = run_step(&script, repo_root(), &[("TAG", "v9.9.9"), outputs_env, ("PATH", &path)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "::error title=release::the tag v9.9.9 does not match Cargo.toml's version {VERSION}: release v{VERSION} by \
             pushing that tag, or set version = \"9.9.9\" in Cargo.toml, merge, and tag that commit\n"
        )
    );
    assert_eq!(std::fs::read_to_string(&outputs).unwrap(), "", "no version for the next jobs");
}

// ---------------------------------------------------------------------------
// action/run.sh: the command input to ward's arguments

struct Ran {
    code: i32,
    stdout: String,
    outputs: String,
    /// What the step added to `GITHUB_PATH`.
    path: String,
}

/// Runs `action/run.sh` with a stand-in ward that prints its arguments, one
/// per line in brackets, and the agent preset it saw.
fn run_action(command: &str, args: &str, preset: &str) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let ward = dir.path().join("ward");
    std::fs::write(
        &ward,
        "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\necho \"preset=${WARD_AGENT_PRESET-unset}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&ward, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let outputs = dir.path().join("outputs");
    let github_path = dir.path().join("path");
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("action/run.sh"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("WARD_BIN", &ward)
        .env("WARD_COMMAND", command)
        .env("WARD_ARGS", args)
        .env("WARD_AGENT_PRESET", preset)
        .env("WARD_ARTIFACTS", dir.path().join("ward-runs"))
        .env("GITHUB_EVENT_PATH", "/runner/event.json")
        .env("GITHUB_OUTPUT", &outputs)
        .env("GITHUB_PATH", &github_path)
        .output()
        .unwrap();
    assert!(!dir.path().join("pwned").exists(), "an argument was evaluated");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        outputs: std::fs::read_to_string(&outputs).unwrap_or_default().replace(dir.path().to_str().unwrap(), "[TMP]"),
        path: std::fs::read_to_string(&github_path).unwrap_or_default().replace(dir.path().to_str().unwrap(), "[TMP]"),
    }
}

/// The commands `action/run.sh` knows: the labels of its `case`.
fn run_sh_commands() -> Vec<String> {
    let script = std::fs::read_to_string(repo_root().join("action/run.sh")).unwrap();
    let label = regex::Regex::new(r"(?m)^    ([a-z-]+)\) args=").unwrap();
    label.captures_iter(&script).map(|c| c[1].to_string()).collect()
}

fn argv(ran: &Ran) -> String {
    ran.stdout.lines().filter(|l| l.starts_with('[')).collect::<Vec<_>>().join(" ")
}

#[test]
fn the_run_script_maps_each_command_to_ward_and_never_evaluates_args() {
    // `install`: ward on PATH for the job's later steps (as `ward init`
    // writes the workflows), and nothing run.
    let ran = run_action("install", "--reap", "");
    // (the one call is the version it names)
    assert_eq!((ran.code, argv(&ran).as_str(), ran.path.as_str()), (0, "[--version]", "[TMP]\n"), "{}", ran.stdout);
    assert!(ran.stdout.contains("is on PATH for the next steps"), "{}", ran.stdout);
    let table = [
        ("install", ""),
        ("stage", "[--forge] [github] [stage] [--event] [/runner/event.json]"),
        ("visit", "[--forge] [github] [visit] [--event] [/runner/event.json]"),
        ("record", "[--forge] [github] [record] [--event] [/runner/event.json]"),
        ("slot", "[--forge] [github] [slot] [--event] [/runner/event.json]"),
        ("release", "[--forge] [github] [slot]"),
        ("queue-check", "[--forge] [github] [queue] [check]"),
        ("queue-record", "[--forge] [github] [queue] [record]"),
        ("event", "[event] [--event] [/runner/event.json]"),
        ("sweep", "[--forge] [github] [sweep]"),
        ("report", "[--forge] [github] [report]"),
        ("precedents-check", "[precedents] [check]"),
        ("simulate", "[simulate]"),
        ("doctor", "[--forge] [github] [doctor]"),
    ];
    assert_eq!(run_sh_commands(), table.map(|(c, _)| c), "a command of run.sh is not tested here");
    for (command, expected) in table.into_iter().skip(1) {
        let ran = run_action(command, "", "");
        assert_eq!((ran.code, argv(&ran).as_str()), (0, expected), "{command}: {}", ran.stdout);
        assert!(ran.stdout.contains("preset=unset"), "an empty preset is no preset");
        assert_eq!(ran.outputs, "artifacts=[TMP]/ward-runs\n");
    }

    // Spaces and newlines separate arguments; nothing is expanded or run.
    let ran = run_action("sweep", "--probe-docker\n  --reap $(touch pwned) `touch pwned` * ;", "claude-code");
    assert_eq!(
        argv(&ran),
        "[--forge] [github] [sweep] [--probe-docker] [--reap] [$(touch] [pwned)] [`touch] [pwned`] [*] [;]"
    );
    assert!(ran.stdout.contains("preset=claude-code"));

    let ran = run_action("deploy; rm -rf /", "", "");
    assert_eq!(ran.code, 2);
    assert_eq!(
        ran.stdout,
        "::error title=ward::input command must be one of install, stage, visit, record, slot, release, queue-check, queue-record, event, sweep, report, precedents-check, simulate, doctor; \
         not 'deploy; rm -rf /'\n"
    );
}

#[test]
fn action_yml_wires_inputs_through_env_and_documents_every_command() {
    let text = std::fs::read_to_string(repo_root().join("action.yml")).unwrap();
    let action: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let steps = action["runs"]["steps"].as_sequence().unwrap();
    for step in steps {
        if let Some(run) = step.get("run").and_then(|r| r.as_str()) {
            assert!(!run.contains("${{"), "an expression in a script: {run}");
        }
    }
    // Every command run.sh knows is described in the `command` input.
    let description = action["inputs"]["command"]["description"].as_str().unwrap();
    for command in run_sh_commands() {
        assert!(description.contains(&format!("`{command}`")), "`{command}` is not described in action.yml");
    }
    // Each input reaches a step.
    for input in action["inputs"].as_mapping().unwrap().keys() {
        let input = input.as_str().unwrap();
        assert!(text.contains(&format!("inputs.{input} }}}}")), "input `{input}` is never used");
    }
    // The artifacts folder is the action's business, not the user's.
    assert!(text.contains("WARD_ARTIFACTS: ${{ runner.temp }}/ward-runs"));
}
