//! `ward demo --swarm`: three patients treated at once on the local forge,
//! through `ward run` and the merge queue. Two of them add a line at the
//! same place of the same file (a conflict: the resolving stage rebases one
//! onto the other, and its resolution is reviewed); the third pins the
//! greeting's output in the check, which fails only once another's line is
//! on `main` (sent back, treated again on top of it, queued again). The
//! demo plays the person who approves each pull request waiting for review
//! (`ward review N --approve`); everything else is ward's.

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
}

/// Creates the swarm's repository in `dir` (new or empty), admits the
/// three patients and runs the hospital until every one rests.
pub async fn run(dir: &Path, ward_exe: &Path) -> anyhow::Result<SwarmRun> {
    super::new_repository(dir, FILES, "ward demo --swarm --dir")?;
    let config_path = dir.join(crate::config::CONFIG_PATH);
    let text = std::fs::read_to_string(&config_path)?;
    let text = text.replacen("  ward:lockdown:", &format!("{QUEUE_LABEL}  ward:lockdown:"), 1) + CONFIG;
    std::fs::write(&config_path, text)?;
    super::init_repository(dir)?;

    let forge = Arc::new(LocalForge::new(dir, "ward-engine").with_actor("demo-chief"));
    let mut h = Hospital::load(dir, forge.clone())?;
    h.ward_exe = ward_exe.to_path_buf();
    let mut numbers = Vec::new();
    for (title, body) in PATIENTS {
        let labels = vec![h.config.admission.clone()];
        let issue = forge.admit(NewIssue { title: (*title).into(), body: (*body).into(), labels })?;
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
                Err(e) => format!("failed: {e}"),
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
    })
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
    out.push_str(&format!(
        "(The local forge has no people: the demo approved {} pull requests waiting for review, as `ward review N \
         --approve` does. No emulator is configured in this demo.)\nRepository: {}\n",
        run.reviews.len(),
        run.dir.display()
    ));
    out
}
