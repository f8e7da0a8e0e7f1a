//! ward's share of a stage run with a real agent: `ward stage` with the
//! claude-code preset (as `ward init --agent claude-code` writes it) against
//! the same `claude -p` run directly, on the same prompt (the one ward
//! rendered), the same scripted model (tests/support/model/, on loopback)
//! and the same work (the model runs the stand-in with Claude's shell tool,
//! which writes the notes, and ends the turn). The pairs alternate which
//! goes first; every run starts from a fresh copy of the same repository.
//! Target (issue 26): ward's share of the stage's wall time <= 5%.
//!
//! `cargo bench --bench agents`; needs the CLI (`.ci/agents`, or
//! `WARD_AGENTS_BIN`), and says so and stops without it.
//! `WARD_BENCH_PAIRS` (default 12) sets the number of pairs; `WARD_KEEP=1`
//! keeps the repositories and run folders.

#[path = "support/mod.rs"]
mod bench_report;
#[allow(dead_code)] // the bench uses the Anthropic side of the model server only
#[path = "../tests/support/model/mod.rs"]
mod model;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use model::{ModelServer, Scene, Script, Turn, Usage};

const GREET: &str = "#!/bin/sh\n# Greets.\necho \"Hello, $1!\"\n";
const CHECK: &str = "#!/bin/sh\nset -e\n[ \"$(./greet.sh Ada)\" = \"Hello, Ada!\" ]\necho ok\n";
const USAGE: Usage = Usage { input: 1200, output: 80, cache_read: 300, cache_creation: 0 };
const KEY: &str = "sk-ant-bench-key";

fn main() -> anyhow::Result<()> {
    let Some(bin) = model::clis::bin_dir().filter(|d| d.join("claude").is_file()) else {
        eprintln!("agents bench skipped: claude is not installed (run .ci/agents, or set WARD_AGENTS_BIN)");
        return Ok(());
    };
    let pairs: usize = std::env::var("WARD_BENCH_PAIRS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    tokio::runtime::Runtime::new()?.block_on(bench(&bin, pairs))
}

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let out = cmd.stdin(Stdio::null()).output()?;
    let took = started.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(took)
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    run(
        Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@example.invalid"])
            .args(args)
            .current_dir(dir),
        "git",
    )
    .map(drop)
}

/// The patient's repository as `ward init --agent claude-code` leaves it,
/// with the sample issue admitted; copied afresh for every run.
struct Bench {
    dir: tempfile::TempDir,
    ward: PathBuf,
    path: String,
    server: ModelServer,
}

impl Bench {
    fn template(&self) -> PathBuf {
        self.dir.path().join("template")
    }

    /// A fresh copy of the template for run `name`, and a HOME of its own.
    fn fresh(&self, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let root = self.dir.path().join(name);
        let repo = root.join("repo");
        std::fs::create_dir_all(&root)?;
        run(Command::new("cp").arg("-a").arg(self.template()).arg(&repo), "cp")?;
        let home = root.join("home");
        std::fs::create_dir_all(&home)?;
        Ok((repo, home))
    }

    /// ward with a job's environment: the CLI on PATH, the model's endpoint
    /// and key.
    fn ward(&self, repo: &Path, home: &Path, runs: &Path) -> Command {
        let mut cmd = Command::new(&self.ward);
        cmd.current_dir(repo)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", home)
            .env("WARD_ARTIFACTS", runs)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("ANTHROPIC_BASE_URL", self.server.anthropic_base_url());
        cmd
    }

    /// `claude -p` as the preset runs it, directly: the same program and
    /// flags, the preset's environment, a fresh HOME, and the variables the
    /// stand-in reads (what ward hands any agent).
    fn claude(&self, repo: &Path, home: &Path, prompt: &Path, notes: &Path) -> Command {
        let preset = ward::config::agents::preset("claude-code").expect("the claude-code preset");
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            r#"exec claude -p --output-format stream-json --verbose --dangerously-skip-permissions < "$1""#,
        ])
        .arg("claude")
        .arg(prompt)
        .current_dir(repo)
        .env_clear()
        .env("PATH", &self.path)
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", self.server.anthropic_base_url())
        .envs(preset.env.iter().copied())
        .env("WARD_ISSUE", "1")
        .env("WARD_STAGE", "triage")
        .env("WARD_MODE", "triage")
        .env("WARD_NOTES", notes)
        .env("WARD_WORKTREE", repo)
        .env("WARD_PROMPT", prompt);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.envs(preset.as_root.iter().copied());
        }
        cmd
    }
}

async fn bench(bin: &Path, pairs: usize) -> anyhow::Result<()> {
    let ward = PathBuf::from(env!("CARGO_BIN_EXE_ward"));
    // Every run is a new conversation (Claude's session id), which takes
    // the next of these identical triage scenes.
    let scene = Scene::new(
        "# Planner: triage",
        vec![Turn::shell(&format!("'{}' stand-in", ward.display())), Turn::text("Done: the notes are written.")],
    )
    .with_usage(USAGE);
    let script = Script::new(vec![scene; 2 * pairs + 1]);
    let mut dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    // WARD_KEEP=1 keeps the repositories and runs, to look at one.
    dir.disable_cleanup(std::env::var_os("WARD_KEEP").is_some());
    let server = ModelServer::start(script).await;
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let b = Bench { dir, ward, path, server };

    let template = b.template();
    std::fs::create_dir_all(&template)?;
    for (name, text) in [("greet.sh", GREET), ("check.sh", CHECK), ("CHANGELOG.md", "# Changelog\n\n")] {
        std::fs::write(template.join(name), text)?;
    }
    git(&template, &["init", "-q", "-b", "main"])?;
    let setup_home = b.dir.path().join("setup-home");
    std::fs::create_dir_all(&setup_home)?;
    let setup_runs = b.dir.path().join("setup-runs");
    run(b.ward(&template, &setup_home, &setup_runs).args(["init", "--agent", "claude-code"]), "ward init")?;
    git(&template, &["add", "-A"])?;
    git(&template, &["commit", "-qm", "the sample app and ward"])?;
    let admit =
        ["admit", "--title", "greet prints \"Hello, !\" when the name is empty", "--body", "It should refuse it."];
    run(b.ward(&template, &setup_home, &setup_runs).args(admit), "ward admit")?;

    // One stage through ward first, for the prompt it renders (the same
    // every time: the chart holds only the admission).
    let (repo, home) = b.fresh("first")?;
    let runs = b.dir.path().join("first/runs");
    run(b.ward(&repo, &home, &runs).args(["stage", "--issue", "1"]), "the first ward stage")?;
    let prompt = first_prompt(&runs.join("1"))?;

    let (mut through_ward, mut direct) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        let ward_first = i % 2 == 0;
        for ward_turn in [ward_first, !ward_first] {
            let name = format!("{}-{i}", if ward_turn { "ward" } else { "direct" });
            let (repo, home) = b.fresh(&name)?;
            if ward_turn {
                let runs = b.dir.path().join(&name).join("runs");
                through_ward.push(run(b.ward(&repo, &home, &runs).args(["stage", "--issue", "1"]), "ward stage")?);
                let chart = std::fs::read_to_string(repo.join("charts/1.md"))?;
                anyhow::ensure!(chart.contains("<!-- WARD:TRIAGE"), "ward's run wrote no triage note:\n{chart}");
            } else {
                let notes = b.dir.path().join(&name).join("notes.md");
                direct.push(run(&mut b.claude(&repo, &home, &prompt, &notes), "claude -p")?);
                let written = std::fs::read_to_string(&notes).unwrap_or_default();
                anyhow::ensure!(written.contains("<!-- WARD:TRIAGE"), "the direct run wrote no notes: {written:?}");
            }
        }
    }
    anyhow::ensure!(b.server.unmatched().is_empty(), "requests no scene matched: {}", b.server.unmatched().len());

    through_ward.sort();
    direct.sort();
    let (w, d) = (bench_report::percentile(&through_ward, 0.5), bench_report::percentile(&direct, 0.5));
    let share = (w.as_secs_f64() - d.as_secs_f64()) / w.as_secs_f64();
    println!(
        "a triage stage with Claude Code, {pairs} alternating pairs: through `ward stage` median {:.0} ms \
         (p95 {:.0} ms), `claude -p` directly median {:.0} ms (p95 {:.0} ms); ward's share of the stage {:.1}% \
         (target <= 5%)",
        bench_report::ms(w),
        bench_report::ms(bench_report::percentile(&through_ward, 0.95)),
        bench_report::ms(d),
        bench_report::ms(bench_report::percentile(&direct, 0.95)),
        share * 100.0
    );
    bench_report::emit_ms("agents/claude-code stage vs claude -p", &through_ward, Some(&direct));
    bench_report::emit("agents/ward share of a claude-code stage", "ratio", share, share, None, Some(share / 0.05));
    Ok(())
}

/// The prompt of the only run of issue 1 so far.
fn first_prompt(runs: &Path) -> anyhow::Result<PathBuf> {
    let run = std::fs::read_dir(runs)?.flatten().map(|e| e.path()).next();
    let prompt = run.map(|r| r.join(ward::stage::visit::PROMPT_FILE)).filter(|p| p.is_file());
    prompt.ok_or_else(|| anyhow::anyhow!("the first run under {} kept no prompt", runs.display()))
}
