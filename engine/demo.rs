//! `ward demo`: the whole hospital on one sample patient, on the embedded
//! default (local forge, built-in stand-in agent), in a fresh folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::discharge::review;
use crate::forge::NewIssue;
use crate::forge::local::LocalForge;
use crate::hospital::Hospital;
use crate::simulate::{self, Trace};

pub mod swarm;

const SAMPLE_TITLE: &str = "greet prints \"Hello, !\" when the name is empty";
const SAMPLE_BODY: &str = "Running `./greet.sh \"\"` prints `Hello, !`.\n\n\
Expected: a clear error on stderr and exit code 2, like other bad input.\n";

/// The sample app: a greeting script and its check.
const SAMPLE_FILES: &[(&str, &str)] = &[
    ("README.md", "# greet\n\nA tiny sample app for `ward demo`: `./greet.sh NAME` greets NAME.\n"),
    ("greet.sh", "#!/bin/sh\n# Greets the person named by the first argument.\necho \"Hello, $1!\"\n"),
    ("check.sh", "#!/bin/sh\n# The sample app's test.\nset -e\n[ \"$(./greet.sh Ada)\" = \"Hello, Ada!\" ]\necho ok\n"),
    ("CHANGELOG.md", "# Changelog\n\n"),
    (".gitignore", "/.ward\n"),
];

pub struct DemoRun {
    pub dir: PathBuf,
    pub trace: Trace,
    pub discharged: bool,
    /// `main` after the run: its commit and that commit's summary.
    pub main: Option<(String, String)>,
    /// What `./greet.sh ""` does on `main` after the run.
    pub after: Option<String>,
    /// Who the demo approved the pull request as, when the patient waited.
    pub reviewed: Option<String>,
}

/// The demo's local CI (ward.yml's `ci.command`).
const DEMO_CI: &str =
    "\n# The demo's local CI: run on each treated head, read by the discharge audit.\nci:\n  command: sh check.sh\n";

/// A demo's repository in `dir` (new or empty; `flag` names the option that
/// chooses it): the sample's files, a git repository on `main` (created
/// first, so that the installation reads its branch) and the default
/// installation. Nothing is committed yet.
fn new_repository(dir: &Path, files: &[(&str, &str)], flag: &str) -> anyhow::Result<()> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        anyhow::bail!("{} is not empty; give `{flag}` a new or empty folder", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    for (path, text) in files {
        std::fs::write(dir.join(path), text)?;
        if path.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.join(path), std::fs::Permissions::from_mode(0o755))?;
        }
    }
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head("main");
    git2::Repository::init_opts(dir, &opts).context("could not create the demo git repository")?;
    crate::defaults::install(dir)?;
    Ok(())
}

/// Creates the demo repository in `dir` (which must be empty or absent),
/// admits the sample issue and runs stage after stage.
pub async fn run(dir: &Path, ward_exe: &Path) -> anyhow::Result<DemoRun> {
    new_repository(dir, SAMPLE_FILES, "ward demo --dir")?;
    // The demo's sample decisions (`ward init` starts with none).
    std::fs::write(dir.join("precedents/log.yaml"), crate::defaults::SAMPLE_PRECEDENTS)?;
    // The local CI: the sample's own check, run on every treated head.
    let config_path = dir.join(crate::config::CONFIG_PATH);
    let mut config_text = std::fs::read_to_string(&config_path)?;
    config_text.push_str(DEMO_CI);
    std::fs::write(&config_path, config_text)?;
    init_repository(dir)?;

    let forge = Arc::new(LocalForge::new(dir, "ward-engine").with_actor("demo-chief"));
    let mut h = Hospital::load(dir, forge.clone())?;
    h.ward_exe = ward_exe.to_path_buf();
    let issue = forge.admit(NewIssue {
        title: SAMPLE_TITLE.into(),
        body: SAMPLE_BODY.into(),
        labels: vec![h.config.admission.clone()],
    })?;
    // Nobody plays the people: the patient waits for a review.
    let mut trace = simulate::drive_with(&h, &forge, issue.number, BTreeMap::new(), dir, 40, &[]).await?;
    let waiting = trace.final_label.as_deref() == Some(h.config.discharge.pending_label.as_str());
    let mut reviewed = None;
    if waiting {
        // The demo plays the person: `ward review 1 --approve`.
        let r = review::review(&forge, &h.config, issue.number, review::Verdict::Approve).await?;
        reviewed = Some(r.reviewer);
        let rest = simulate::drive_with(&h, &forge, issue.number, BTreeMap::new(), dir, 40, &[]).await?;
        trace.steps.extend(rest.steps);
        trace.final_label = rest.final_label;
    }
    let discharged = trace.final_label.as_deref() == Some(h.config.discharge.discharged_label.as_str());
    let main = git2::Repository::open(dir).ok().and_then(|repo| {
        let commit = repo.find_branch("main", git2::BranchType::Local).ok()?.get().peel_to_commit().ok()?;
        Some((commit.id().to_string(), commit.summary().unwrap_or_default().to_string()))
    });
    Ok(DemoRun { dir: dir.to_path_buf(), trace, discharged, main, after: greet_with_no_name(dir), reviewed })
}

/// The sample's bug, tried on the demo repository's checkout of `main`:
/// what `./greet.sh ""` prints and its exit code.
fn greet_with_no_name(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("sh").arg("greet.sh").arg("").current_dir(dir).output().ok()?;
    let text = String::from_utf8_lossy(if out.stdout.is_empty() { &out.stderr } else { &out.stdout });
    Some(format!("`{}` (exit {})", text.trim(), out.status.code().unwrap_or(-1)))
}

/// What `ward demo` prints.
pub fn render(run: &DemoRun) -> String {
    let mut out = format!("ward demo: patient #{}: {SAMPLE_TITLE}\n\n", run.trace.issue);
    out.push_str(&simulate::render_timeline(&run.trace));
    if let Some((commit, summary)) = &run.main {
        out.push_str(&format!("     main is now at {} \"{summary}\"\n", &commit[..commit.len().min(12)]));
    }
    let total: u128 = run.trace.steps.iter().map(|s| s.ms).sum();
    out.push('\n');
    if run.discharged {
        out.push_str(&format!(
            "Patient #{} discharged after {} stage runs in {total} ms.\n",
            run.trace.issue,
            run.trace.steps.len()
        ));
    } else {
        out.push_str(&format!(
            "Patient #{} was NOT discharged: it rests at `{}`.\n",
            run.trace.issue,
            run.trace.final_label.as_deref().unwrap_or("no ward label")
        ));
    }
    if let Some(after) = &run.after {
        out.push_str(&format!("On main, `sh greet.sh \"\"` now prints {after}.\n"));
    }
    out.push_str(
        "(CI is the local CI: ward.yml's `ci.command: sh check.sh`, run on the treated head. The local forge has \
         no people: ",
    );
    match &run.reviewed {
        Some(who) => out.push_str(&format!(
            "when the audit waited for a review, the demo approved the pull request as `{who}`, as `ward review {} \
             --approve` does.)\n",
            run.trace.issue
        )),
        None => out.push_str("the patient never waited for a review, so the demo approved nothing.)\n"),
    }
    out.push_str(&format!("Repository: {}\n", run.dir.display()));
    out.push_str(&format!("Chart:      {}\n", run.trace.chart.display()));
    out.push_str(&format!("Artifacts:  {}\n", run.trace.artifacts.display()));
    out
}

/// `git init` and a first commit with a fixed identity and date, so the
/// demo repository is the same on every machine.
pub fn init_repository(dir: &Path) -> anyhow::Result<()> {
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head("main");
    let repo = git2::Repository::init_opts(dir, &opts).context("could not create the demo git repository")?;
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let when = git2::Time::new(1_767_225_600, 0); // 2026-01-01T00:00:00Z
    let who = git2::Signature::new("ward demo", "demo@ward.invalid", &when)?;
    repo.commit(Some("HEAD"), &who, &who, "Sample app for the ward demo", &tree, &[])?;
    Ok(())
}
