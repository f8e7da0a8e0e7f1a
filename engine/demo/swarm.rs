//! `ward demo --swarm`: three patients treated at once on the local forge,
//! through `ward run` and the merge queue. Two of them add a line at the
//! same place of the same file (a conflict: the resolving stage rebases one
//! onto the other, and its resolution is reviewed); the third pins the
//! greeting's output in the check, which fails only once another's line is
//! on `main` (sent back, treated again on top of it, queued again). The
//! demo plays the person who approves each pull request waiting for review
//! (`ward review N --approve`); everything else is ward's.
//!
//! With an emulator image (`--emulator`, a `ward-docstore` image built from
//! `tests/docstore`; ward never pulls), the treating and reviewing stages
//! and every integration check get a container of it: each treatment
//! writes a document with `curl`, a checkpoint carries it to code review
//! (whose prompt shows the data diff), and every container and checkpoint
//! goes with the run. Without one, no container is started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::discharge::review;
use crate::forge::local::LocalForge;
use crate::forge::{Forge, IssueNumber, IssueState, NewIssue};
use crate::hospital::Hospital;
use crate::stage::StageResult;

/// The swarm's sample app: the check accepts extra greeting lines.
const FILES: &[(&str, &str)] = &[
    ("README.md", "# greet\n\nA tiny sample app for `ward demo --swarm`: `./greet.sh NAME` greets NAME.\n"),
    ("greet.sh", "#!/bin/sh\n# Greets the person named by the first argument.\necho \"Hello, $1!\"\n"),
    ("check.sh", "#!/bin/sh\n# The sample app's test.\nset -e\n./greet.sh Ada | grep -qx 'Hello, Ada!'\necho ok\n"),
    ("CHANGELOG.md", "# Changelog\n\n"),
    // Every patient adds a changelog line: a union merge keeps them all.
    (".gitattributes", "CHANGELOG.md merge=union\n"),
    (".gitignore", "/.ward\n"),
];

/// The three patients: (title, body). The stand-in treats an issue that
/// spells out its steps by those steps.
pub const PATIENTS: &[(&str, &str)] = &[
    (
        "greet: say it is nice to meet them",
        "After the greeting, say it is nice to meet them.\n\n\
         Add `echo \"Nice to meet you, $1.\"` to `greet.sh` after `echo \"Hello, $1!\"`.\n",
    ),
    (
        "greet: wish them a good day",
        "After the greeting, wish them a good day.\n\n\
         Add `echo \"Have a good day, $1.\"` to `greet.sh` after `echo \"Hello, $1!\"`.\n",
    ),
    (
        "check: pin what greet prints",
        "The check should notice any change to what greet prints.\n\n\
         Record the output of `./greet.sh Ada` in `greeting.txt`.\n\
         Add `./greet.sh Ada | diff greeting.txt -` to `check.sh` after `set -e`.\n",
    ),
];

/// What the demo adds to the default ward.yml: the local CI, the merge
/// queue's integration check and its label.
const CONFIG: &str = "\n# The demo's local CI and the merge queue's integration check.\nci:\n  command: sh check.sh\n\n\
integration:\n  command: [\"sh\", \"check.sh\"]\n";
/// The stages that get the emulator when there is one: those that change
/// the branch and the one that reviews the change.
const EMULATED_STAGES: &[&str] = &["treat", "resolve", "code-review"];
/// Each patient's document, by the patient's place in [`PATIENTS`].
const DOCUMENTS: &[&str] = &["nice-to-meet", "good-day", "pinned-greeting"];

const QUEUE_LABEL: &str =
    "  ward:merge-queue:    { color: \"ededed\", description: \"Audited; waiting for the merge queue\" }\n";

pub struct SwarmRun {
    pub dir: PathBuf,
    /// Each patient: number, title, where it went (stage: outcome -> label, in order), where it rests.
    pub patients: Vec<(IssueNumber, String, Vec<String>, String)>,
    /// What the merge queue did, in order.
    pub integrated: Vec<String>,
    /// Approvals the demo gave as the person (`ward review N --approve`).
    pub reviews: Vec<IssueNumber>,
    /// `main`'s commit and `./greet.sh Ada` on it.
    pub main: Option<String>,
    pub greeting: String,
    /// Worktrees left besides the repository's own checkout, and integration checkouts left.
    pub worktrees_left: usize,
    pub integration_left: usize,
    pub all_discharged: bool,
    /// The emulator image the stages and checks ran with, if any.
    pub emulator: Option<String>,
    /// Checkpoint files (`.data`) left under the ward home.
    pub checkpoints_left: usize,
}

/// The emulator section for `image` (one line of YAML flow style): the
/// docstore's data port exposed to the agent as `DOCSTORE_ENDPOINT`.
fn emulator_section(image: &str) -> String {
    format!(
        "{{ image: {image:?}, ports: [8081, 8082], ready: {{ http: {{ port: 8082, path: /ready }}, time_limit: 30s }}, \
         expose: {{ DOCSTORE_ENDPOINT: \"http://127.0.0.1:{{{{ ports[8081] }}}}\" }} }}"
    )
}

/// `text` (ward.yml) with the emulator given to each of [`EMULATED_STAGES`].
fn with_stage_emulators(text: &str, image: &str) -> anyhow::Result<String> {
    let section = emulator_section(image);
    let mut out = String::new();
    let mut in_stages = false;
    let mut given = Vec::new();
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        if !line.starts_with(' ') && !line.trim().is_empty() && !line.starts_with('#') {
            in_stages = line.trim_end() == "stages:";
        }
        let name = line.trim_end().strip_prefix("  ").and_then(|l| l.strip_suffix(':'));
        if in_stages && let Some(name) = name.filter(|n| EMULATED_STAGES.contains(n)) {
            out.push_str(&format!("    emulator: {section}\n"));
            given.push(name);
        }
    }
    if given.len() != EMULATED_STAGES.len() {
        anyhow::bail!(
            "the demo's ward.yml lacks some of the stages {EMULATED_STAGES:?} (found {given:?}) to give the emulator to"
        );
    }
    Ok(out)
}

/// Each patient's step that writes its document to the emulator.
fn data_step(document: &str, title: &str) -> String {
    format!(
        "Run `curl -sSf -X PUT -H 'x-partition-key: greet' -d '{{\"change\":\"{title}\"}}' \
         \"$DOCSTORE_ENDPOINT/dbs/greet/colls/changes/docs/{document}\"`.\n"
    )
}

/// Creates the swarm's repository in `dir` (new or empty), admits the
/// three patients and runs the hospital until every one rests; with
/// `emulator`, an image to give the stages and checks (see the module).
pub async fn run(dir: &Path, ward_exe: &Path, emulator: Option<&str>) -> anyhow::Result<SwarmRun> {
    // Checked before anything is made: bad input changes nothing.
    if let Some(image) = emulator {
        let section: crate::config::EmulatorConfig = serde_yaml::from_str(&emulator_section(image))?;
        if section.checkpoint().is_none() {
            anyhow::bail!(
                "`{image}` is not a `ward-docstore` image: the swarm's data steps speak the docstore's protocol and \
                 its checkpoints are built in for that image only; build one from tests/docstore (see \
                 tests/support/workspace.rs) and pass it as `--emulator ward-docstore:TAG`"
            );
        }
        let curl = std::process::Command::new("curl").arg("--version").output();
        if !curl.is_ok_and(|o| o.status.success()) {
            anyhow::bail!(
                "the swarm with an emulator writes its data with `curl`, which could not run here: install curl, \
                 or run the swarm without `--emulator`"
            );
        }
    }
    super::new_repository(dir, FILES, "ward demo --swarm --dir")?;
    let config_path = dir.join(crate::config::CONFIG_PATH);
    let text = std::fs::read_to_string(&config_path)?;
    let mut text = text.replacen("  ward:lockdown:", &format!("{QUEUE_LABEL}  ward:lockdown:"), 1) + CONFIG;
    if let Some(image) = emulator {
        text = with_stage_emulators(&text, image)?;
        // The integration check's own, under `integration:` (CONFIG's last section).
        text.push_str(&format!("  emulator: {}\n", emulator_section(image)));
    }
    std::fs::write(&config_path, text)?;
    super::init_repository(dir)?;

    let forge = Arc::new(LocalForge::new(dir, "ward-engine").with_actor("demo-chief"));
    let mut h = Hospital::load(dir, forge.clone())?;
    h.ward_exe = ward_exe.to_path_buf();
    let mut numbers = Vec::new();
    for ((title, body), document) in PATIENTS.iter().zip(DOCUMENTS) {
        let labels = vec![h.config.admission.clone()];
        let mut body = body.to_string();
        if emulator.is_some() {
            body.push_str(&data_step(document, title));
        }
        let issue = forge.admit(NewIssue { title: (*title).into(), body, labels })?;
        forge.dispatch_stage(issue.number, &h.config.admission).await?;
        numbers.push(issue.number);
    }
    // (order, issue, what happened): stage runs as they end, the queue's
    // work between them.
    let mut log: Vec<((usize, u8), IssueNumber, String)> = Vec::new();
    let (mut integrated, mut reviews) = (Vec::new(), Vec::new());
    let limit = crate::runner::default_run_limit(&h);
    let mut offset = 0;
    for _round in 0..10 {
        let mut run_index = offset;
        let mut report = |issue: IssueNumber, r: &anyhow::Result<StageResult>| {
            let line = match r {
                Ok(StageResult::Moved(t)) => format!("{}: {} -> {}", t.stage, t.outcome, t.to),
                Ok(other) => format!("{other:?}").chars().take(120).collect(),
                Err(e) => format!("failed: {e:#}"),
            };
            log.push(((run_index, 2), issue, line));
            run_index += 1;
        };
        let drained = crate::runner::drain(&h, &forge, limit, &mut report).await?;
        for (line, after) in drained.integrated.into_iter().zip(drained.integrated_after) {
            if let Some(n) = numbers.iter().find(|n| line.starts_with(&format!("{n} "))) {
                let what = line[n.to_string().len() + 1..].trim().to_string();
                log.push(((offset + after, 1), *n, format!("merge queue: {what}")));
            }
            integrated.push(line);
        }
        offset += drained.runs;
        if let Some(why) = drained.stopped {
            anyhow::bail!("`ward run` stopped: {why}");
        }
        // The person: approve each pull request that waits for a review.
        let mut approved = false;
        for issue in forge.all_issues().await? {
            if issue.state == IssueState::Open && issue.labels.contains(&h.config.discharge.pending_label) {
                review::review(&forge, &h.config, issue.number, review::Verdict::Approve).await?;
                log.push(((offset, 0), issue.number, "a person approved the pull request".into()));
                reviews.push(issue.number);
                approved = true;
            }
        }
        if !approved {
            break;
        }
    }
    log.sort_by_key(|(order, _, _)| *order);
    let mut went: BTreeMap<IssueNumber, Vec<String>> = BTreeMap::new();
    for (_, n, line) in log {
        went.entry(n).or_default().push(line);
    }
    let mut patients = Vec::new();
    let mut all_discharged = true;
    for n in &numbers {
        let issue = forge.issue(*n).await?;
        let rests = h.config.places(&issue.labels).first().map_or("no ward label".to_string(), |p| p.to_string());
        all_discharged &= rests == h.config.discharge.discharged_label;
        patients.push((*n, issue.title.clone(), went.remove(n).unwrap_or_default(), rests));
    }
    let repo = git2::Repository::open(dir)?;
    let main = repo.find_branch("main", git2::BranchType::Local).ok().and_then(|b| b.get().target());
    let worktrees_left = repo.worktrees()?.len();
    let integration_left = std::fs::read_dir(dir.join(".ward/integration")).map(|d| d.flatten().count()).unwrap_or(0);
    let checkpoints_left = match h.workspace_plan()? {
        Some(plan) => {
            let git = crate::workspace::worktree::GitRepo::open(dir)?;
            let folder = crate::workspace::worktree::Layout::new(&plan.home, &git)?.checkpoints;
            data_files(&folder)
        }
        None => 0,
    };
    let out = std::process::Command::new("sh").args(["greet.sh", "Ada"]).current_dir(dir).output()?;
    Ok(SwarmRun {
        dir: dir.to_path_buf(),
        patients,
        integrated,
        reviews,
        main: main.map(|m| m.to_string()),
        greeting: String::from_utf8_lossy(&out.stdout).into_owned(),
        worktrees_left,
        integration_left,
        all_discharged,
        emulator: emulator.map(str::to_string),
        checkpoints_left,
    })
}

/// `.data` files anywhere under `folder`.
fn data_files(folder: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(folder) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => data_files(&e.path()),
            _ => usize::from(e.file_name().to_string_lossy().ends_with(".data")),
        })
        .sum()
}

/// What `ward demo --swarm` prints: where each patient went.
pub fn render(run: &SwarmRun) -> String {
    let mut out = String::from("ward demo --swarm: three patients treated at once, one merge queue\n");
    for (n, title, went, rests) in &run.patients {
        out.push_str(&format!("\n{n} {title}\n"));
        for step in went {
            out.push_str(&format!("   {step}\n"));
        }
        out.push_str(&format!("   rests at `{rests}`\n"));
    }
    out.push_str("\nThe merge queue, in order:\n");
    for line in &run.integrated {
        out.push_str(&format!("   {line}\n"));
    }
    if let Some(main) = &run.main {
        out.push_str(&format!("\nmain is now at {}; `./greet.sh Ada` prints:\n", &main[..main.len().min(12)]));
        for line in run.greeting.lines() {
            out.push_str(&format!("   {line}\n"));
        }
    }
    out.push_str(&format!(
        "\n{} of {} patients discharged. Worktrees left: {}; integration checkouts left: {}.\n",
        run.patients.iter().filter(|p| p.3.ends_with("discharged")).count(),
        run.patients.len(),
        run.worktrees_left,
        run.integration_left
    ));
    let emulator = match &run.emulator {
        Some(image) => format!(
            "Emulator `{image}` on {} and each integration check; checkpoints left: {}.",
            EMULATED_STAGES.join(", "),
            run.checkpoints_left
        ),
        None => "No emulator is configured in this demo (`--emulator IMAGE` gives it one).".into(),
    };
    out.push_str(&format!(
        "(The local forge has no people: the demo approved {} pull requests waiting for review, as `ward review N \
         --approve` does. {emulator})\nRepository: {}\n",
        run.reviews.len(),
        run.dir.display()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulator_goes_to_the_treating_and_reviewing_stages_and_the_check_only() {
        let shipped = include_str!("../../.github/ward.yml");
        let text = shipped.replacen("  ward:lockdown:", &format!("{QUEUE_LABEL}  ward:lockdown:"), 1) + CONFIG;
        let mut text = with_stage_emulators(&text, "ward-docstore:test").unwrap();
        text.push_str(&format!("  emulator: {}\n", emulator_section("ward-docstore:test")));
        let config = crate::config::Config::parse(&text, Path::new("ward.yml"), None).unwrap();
        for stage in ["admit", "diagnose", "plan-review", "treat", "consult", "code-review", "discharge", "resolve"] {
            let emulator = config.emulator_for(stage).map(|e| e.image.as_str());
            let expected = EMULATED_STAGES.contains(&stage).then_some("ward-docstore:test");
            assert_eq!(emulator, expected, "{stage}");
        }
        let check = config.integration.as_ref().and_then(|i| i.emulator.as_ref()).expect("the check's emulator");
        assert!(check.checkpoint().is_some(), "the docstore's checkpoint section is built in");
        assert_eq!(check.expose["DOCSTORE_ENDPOINT"], "http://127.0.0.1:{{ ports[8081] }}");
        let without_resolve = shipped.replace("  resolve:\n", "  resolving:\n");
        let err = with_stage_emulators(&without_resolve, "ward-docstore:test").unwrap_err().to_string();
        assert!(err.contains("lacks some of the stages"), "{err}");
    }
}
