//! Helpers shared by the integration tests. Each test binary uses a part.
#![allow(dead_code)]

pub mod actions;
pub mod departments;
pub mod fake_github;
pub mod model;
pub mod openapi;
pub mod release;
pub mod rules;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The ward binary under test.
pub fn ward_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ward"))
}

/// The database image a test runs against, `images/<kind>/build`'s (no
/// registry): `WARD_<KIND>_IMAGE`, else the first local `ward-<kind>:*`.
/// `None`, with a notice printed, skips the test; with
/// `WARD_REQUIRE_<KIND>=1` (`.ci/run`) a missing image fails it instead.
pub fn database_image(kind: &str) -> Option<String> {
    let upper = kind.to_uppercase();
    let required = std::env::var(format!("WARD_REQUIRE_{upper}")).is_ok_and(|v| v == "1");
    let named = std::env::var(format!("WARD_{upper}_IMAGE")).ok().filter(|v| !v.is_empty());
    let found = match &named {
        Some(image) => {
            let present =
                Command::new("docker").args(["image", "inspect", image]).output().is_ok_and(|o| o.status.success());
            present.then(|| image.clone())
        }
        None => Command::new("docker")
            .args(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", &format!("reference=ward-{kind}:*")])
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
            .filter(|l| !l.is_empty()),
    };
    if found.is_none() {
        let why = match &named {
            Some(image) => format!("WARD_{upper}_IMAGE names `{image}`, which is not on the Docker host"),
            None => format!("no `ward-{kind}:*` image is on the Docker host"),
        };
        let what = format!("{why}; build it with `images/{kind}/build` (it prints the image name to set)");
        assert!(!required, "WARD_REQUIRE_{upper}=1 and {what}");
        eprintln!("skipped: {what}");
    }
    found
}

/// A repository with ward installed (`ward init`), in a temporary folder,
/// and a scrubbed environment for every command run in it.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        let s = Self { dir };
        let out = s.ward(&["init"]);
        assert!(out.status.success(), "ward init failed: {}", stderr(&out));
        s
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Runs ward with only PATH and HOME from the outside world.
    pub fn ward(&self, args: &[&str]) -> Output {
        self.ward_env(args, &[])
    }

    pub fn ward_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(ward_bin())
            .args(args)
            .current_dir(self.root())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.root())
            .env("USER", "tester")
            .envs(env.iter().copied())
            .output()
            .expect("ward runs")
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    pub fn write(&self, path: &str, text: &str) {
        let p = self.root().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Replaces `from` by `to` in the sandbox's `.github/ward.yml`.
    pub fn edit_config(&self, from: &str, to: &str) {
        let text = self.read(".github/ward.yml");
        assert!(text.contains(from), "ward.yml has no `{from}`");
        self.write(".github/ward.yml", &text.replacen(from, to, 1));
    }

    /// Makes the agent a shell script (run with `sh -c`).
    pub fn agent_script(&self, script: &str) {
        self.write("agent.sh", script);
        let path = self.root().join("agent.sh");
        self.edit_config(r#"command: ["{ward}", "stand-in"]"#, &format!(r#"command: ["sh", "{}"]"#, path.display()));
    }

    /// The issue as stored by the local forge.
    pub fn issue_json(&self, n: u64) -> serde_json::Value {
        serde_json::from_str(&self.read(&format!(".ward/forge/issues/{n}.json"))).unwrap()
    }

    pub fn labels(&self, n: u64) -> Vec<String> {
        self.issue_json(n)["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect()
    }
}

/// git in `dir` as the tests' person (`tester`), with the machine's git
/// settings and the outside environment left out; its trimmed standard
/// output. Panics with git's standard error when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_command(dir, None, args)
}

/// [`git`] with the author's and committer's date fixed (ISO 8601), for
/// commits whose ids must not change between runs.
pub fn git_at(dir: &Path, date: &str, args: &[&str]) -> String {
    git_command(dir, Some(date), args)
}

fn git_command(dir: &Path, date: Option<&str>, args: &[&str]) -> String {
    let mut git = Command::new("git");
    git.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    for role in ["AUTHOR", "COMMITTER"] {
        git.env(format!("GIT_{role}_NAME"), "tester").env(format!("GIT_{role}_EMAIL"), "tester@ward.invalid");
        if let Some(date) = date {
            git.env(format!("GIT_{role}_DATE"), date);
        }
    }
    let out = git.output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    stdout(&out).trim().to_string()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Seeds issue `n`'s chart with what diagnosis and plan review leave when a
/// plan is approved, for tests that start a patient directly at a treating
/// stage (the plan gate lets treatment start only after an approved plan):
/// a diagnose run's TREATMENT_PLAN with the five sections, then a later
/// plan-review run's PLAN_REVIEW whose OUTCOME is `approve`, each written by
/// the role its stage names in the hospital's pipeline.
pub async fn seed_approved_plan(h: &ward::hospital::Hospital, n: ward::forge::IssueNumber) {
    use ward::chart::{Note, NoteMeta, Seen, append};
    let at = (h.clock)();
    let note = |kind: &str, stage: &str, run: &str, body: &str| {
        let role = h.config.stage(stage).unwrap_or_else(|| panic!("stage `{stage}`")).config.role.clone();
        Note {
            kind: kind.parse().expect("a known note kind"),
            meta: NoteMeta { run: run.into(), stage: stage.into(), role, at },
            body: body.into(),
        }
    };
    let plan = "## Diagnosis\nThe fix is missing.\n\n## Files to change\n- fix.txt (new)\n\n## Tests to add\n- \
                the fix is present\n\n## Risks\nNone known.\n\n## Open questions\nNone.\n";
    let notes = [
        note("TREATMENT_PLAN", "diagnose", "seed-diagnose", plan),
        note("OUTCOME", "diagnose", "seed-diagnose", "plan-posted"),
        note(
            "PLAN_REVIEW",
            "plan-review",
            "seed-plan-review",
            "## Findings\nThe plan is sound.\n\n## Verdict\napprove\n",
        ),
        note("OUTCOME", "plan-review", "seed-plan-review", "approve"),
    ];
    append(&*h.forge, &h.sentinels, n, Seen::NotRead, &notes).await.expect("the approved plan is stored");
}
