//! The built-in stand-in agent (`ward stand-in`): deterministic notes for
//! every role and mode of the default pipeline, so the demo needs no model;
//! with `--script` it writes exactly what a scenario says. When the issue
//! names a file of the worktree (the demo's `greet.sh`), its notes cite that
//! file's real paths and lines, so the groundedness check has something to
//! check. Its fellow fixes a shell entry point test first (the check fails
//! before the fix, passes after) and its code review runs the check on the
//! head, as a real agent would run the repository's tests. An issue that
//! spells out its steps (`side_by_side`: "Add `L` to `P` after `A`.",
//! "Record the output of `C` in `P`.") is treated by them; in the resolving
//! stage, or sent back by the merge queue, its fellow rebases onto the base
//! with a real `git rebase`, keeping both sides' additions.
//!
//! In the research department's role (`WARD_MODE=research`) it appends a
//! short paragraph to the role or skill the strongest finding points at
//! (the prompt's `Points at:` line) and writes its account as plain text.
//! A script's `edits` append to files of the worktree (a scenario's, or a
//! test's role that strays outside the skills and roles).
//!
//! It runs as any agent does: a subprocess of `crate::agent`, reading only
//! its environment and its worktree.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Deserialize;

use crate::chart::NoteKind;

mod side_by_side;

/// One scripted visit: the outcome and the notes a scenario wants written.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedVisit {
    pub outcome: String,
    #[serde(default)]
    pub notes: Vec<ScriptedNote>,
    /// Text appended to files of the worktree (made when missing), before
    /// the notes are written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<ScriptedEdit>,
}

/// One file a script changes: `append` added at its end.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedEdit {
    /// Relative to the worktree's top; never leaves it.
    pub path: String,
    pub append: String,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedNote {
    pub kind: NoteKind,
    pub body: String,
}

/// What stops the stand-in agent: printed as `stand-in: ...`, its run
/// failing as an agent's would.
#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    #[error("the stand-in agent needs ${0}; run it through `ward stage`")]
    NoVariable(&'static str),
    #[error("could not read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("could not write {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Script { path: PathBuf, source: serde_yaml::Error },
    #[error(
        "the stand-in agent knows the modes of the default pipeline (triage, diagnose, plan, treat, resolve, \
         consult, code, discharge), not `{mode}` of stage `{stage}`; script this stage in a scenario"
    )]
    UnknownMode { mode: String, stage: String },
    /// An issue's recipe ([`side_by_side`]) that cannot be followed.
    #[error("the issue asks to add a line to `{path}`, which cannot be read: {source}")]
    NoFile { path: String, source: std::io::Error },
    #[error("`{0}` has no line containing the anchor the issue names")]
    NoAnchor(String),
    #[error("could not run the command the issue names: {0}")]
    Run(std::io::Error),
    #[error("the command the issue asks to run failed ({status}): {said}")]
    Failed { status: std::process::ExitStatus, said: String },
    /// A scripted edit ([`append_inside`]).
    #[error("a scripted edit stays inside the worktree: `{0}` does not")]
    Outside(String),
    #[error("a scripted edit writes regular files: `{0}` is not one")]
    NotAFile(String),
    #[error("could not make the folder of {path}: {source}")]
    Folder { path: String, source: std::io::Error },
}

/// "could not write {path}: {the system's reason}".
fn write_failed(path: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> StandInError {
    move |source| StandInError::Write { path: path.to_string(), source }
}

/// What the stand-in reads from its environment.
#[derive(Debug, Clone)]
pub struct StandInEnv {
    pub issue: String,
    pub stage: String,
    pub mode: String,
    pub notes_file: PathBuf,
    pub worktree: PathBuf,
    pub sentinel: String,
    /// The prompt (`$WARD_PROMPT`), where the issue's text is.
    pub prompt: Option<PathBuf>,
}

impl StandInEnv {
    pub fn from_env() -> Result<Self, StandInError> {
        let get = |k: &'static str| std::env::var(k).map_err(|_| StandInError::NoVariable(k));
        Ok(Self {
            // A department's role (research) has no patient.
            issue: std::env::var("WARD_ISSUE").unwrap_or_default(),
            stage: get("WARD_STAGE")?,
            mode: get("WARD_MODE")?,
            notes_file: get("WARD_NOTES")?.into(),
            worktree: get("WARD_WORKTREE")?.into(),
            sentinel: std::env::var("WARD_SENTINEL").unwrap_or_else(|_| "WARD".into()),
            prompt: std::env::var_os("WARD_PROMPT").map(PathBuf::from),
        })
    }
}

/// Renders notes and an outcome in the agent notes format.
pub fn render_notes(sentinel: &str, notes: &[ScriptedNote], outcome: &str) -> String {
    let mut out = String::new();
    for n in notes {
        out.push_str(&format!(
            "<!-- {sentinel}:{k} -->\n{b}\n<!-- /{sentinel}:{k} -->\n\n",
            k = n.kind,
            b = n.body.trim_end()
        ));
    }
    out.push_str(&format!("<!-- {sentinel}:OUTCOME {outcome} -->\n"));
    out
}

/// What the stand-in talks about: the first file the issue names that the
/// worktree has (the entry point), and the sample app's check script.
struct Sample {
    /// Path, text and the 1-based line of its first line of code.
    entry: Option<(String, String, usize)>,
    check: Option<String>,
}

/// The guard the stand-in's treatment adds to a shell entry point.
const GUARD_TEST: &str = r#"[ -z "$1" ]"#;
/// The check it adds to the check script.
const CHECK_NAME: &str = "refuses_empty_name";
/// The skill a plan review holds a plan to, in the skills' folder.
const PLAN_FORMAT: &str = "plan-format.md";

/// Where the worktree's pipeline keeps [`PLAN_FORMAT`] (ward.yml's `paths.skills`).
fn plan_format(worktree: &Path) -> String {
    format!("{}/{PLAN_FORMAT}", crate::config::PathsConfig::read(worktree).skills_dir())
}

impl Sample {
    fn find(env: &StandInEnv) -> Self {
        let issue = env.prompt.as_deref().and_then(|p| std::fs::read_to_string(p).ok()).map(|p| untrusted_text(&p));
        let entry = issue.and_then(|text| {
            crate::groundedness::extract_claims(&text).into_iter().find_map(|c| {
                let path = c.path.filter(|p| c.kind != crate::groundedness::ClaimKind::Test && !p.ends_with('/'))?;
                let body = read_inside(&env.worktree, &path)?;
                let first = body.lines().position(is_code).map_or(1, |i| i + 1);
                Some((path, body, first))
            })
        });
        let check = read_inside(&env.worktree, "check.sh").map(|_| "check.sh".to_string());
        Sample { entry, check }
    }

    fn shell_entry(&self) -> Option<&(String, String, usize)> {
        self.entry.as_ref().filter(|(p, body, _)| p.ends_with(".sh") || body.starts_with("#!/bin/sh"))
    }
}

/// The issue's text in a prompt: what its `untrusted` fence holds.
fn untrusted_text(prompt: &str) -> String {
    let mut lines = prompt.lines();
    let Some(open) = lines.find(|l| l.trim_start_matches('`').starts_with("untrusted") && l.starts_with("```")) else {
        return String::new();
    };
    let marks: String = open.chars().take_while(|c| *c == '`').collect();
    lines.take_while(|l| l.trim_end() != marks).collect::<Vec<_>>().join("\n")
}

/// A relative path's text when it is a regular file inside `root`.
fn read_inside(root: &Path, path: &str) -> Option<String> {
    let rel = Path::new(path.trim_start_matches("./"));
    if !rel.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
        return None;
    }
    let full = root.join(rel);
    full.symlink_metadata().ok().filter(|m| m.is_file())?;
    std::fs::read_to_string(full).ok()
}

fn is_code(line: &str) -> bool {
    let t = line.trim();
    !(t.is_empty() || t.starts_with('#') || t.starts_with("//"))
}

/// 1-based number of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

/// The treatment, test first: the check that the empty name is refused is
/// added to the check script and run (it fails), then the guard goes into
/// the shell entry point and the check runs again (it passes); a changelog
/// line. Returns what changed, as `path:lines` with what each does, and the
/// tests run, for the TREATMENT_NOTE.
fn treat(env: &StandInEnv, sample: &Sample) -> Result<(Vec<String>, Vec<String>), StandInError> {
    let write = |path: &str, text: &str| std::fs::write(env.worktree.join(path), text).map_err(write_failed(path));
    let (mut changes, mut tests) = (Vec::new(), Vec::new());
    if let Some((path, body, first)) = sample.shell_entry() {
        if let Some(check) = &sample.check {
            let text = read_inside(&env.worktree, check).unwrap_or_default();
            if !text.contains(CHECK_NAME) {
                let mut lines: Vec<String> = text.lines().map(String::from).collect();
                let at = lines.iter().position(|l| l.trim() == "echo ok").unwrap_or(lines.len());
                lines.insert(
                    at,
                    format!(
                        "# {CHECK_NAME}: the empty name is refused with exit code 2.\n\
                         status=0; ./{path} \"\" 2>/dev/null || status=$?; [ \"$status\" = 2 ]"
                    ),
                );
                write(check, &(lines.join("\n") + "\n"))?;
            }
            tests.push(format!("`sh {check}` before the fix: {}", run_check(&env.worktree, check).1));
        }
        let name = path.rsplit('/').next().unwrap_or(path);
        if !body.contains(GUARD_TEST) {
            let mut lines: Vec<String> = body.lines().map(String::from).collect();
            let guard =
                format!("if {GUARD_TEST}; then\n  echo \"{name}: a non-empty argument is required\" >&2\n  exit 2\nfi");
            lines.insert(first - 1, guard);
            write(path, &(lines.join("\n") + "\n"))?;
        }
        let text = read_inside(&env.worktree, path).unwrap_or_default();
        let at = line_of(&text, GUARD_TEST).unwrap_or(*first);
        changes.push(format!("`{path}:{at}-{}`: refuses the empty name on stderr with exit code 2", at + 3));
        if let Some(check) = &sample.check {
            let text = read_inside(&env.worktree, check).unwrap_or_default();
            let at = line_of(&text, CHECK_NAME).unwrap_or(1);
            changes.push(format!("`{check}:{at}-{}`: `{CHECK_NAME}` checks it", at + 1));
            tests.push(format!("`sh {check}` after the fix: {}", run_check(&env.worktree, check).1));
        }
    }
    // A changelog the repository keeps is written and cited; without an
    // entry point to fix, a new CHANGELOG.md is the treatment's one change.
    let log = changelog(&env.worktree).or(sample.entry.is_none().then_some("CHANGELOG.md"));
    if let Some(log) = log {
        let mut text = read_inside(&env.worktree, log).unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("- Treated #{}: the entry point validates its input.\n", env.issue));
        write(log, &text)?;
        changes.push(match sample.entry {
            Some(_) => format!("`{log}:{}`: records the change", text.lines().count()),
            None => format!("{log}: recorded the change, as planned"),
        });
    }
    Ok((changes, tests))
}

/// The changelog the repository keeps, by the names projects give it.
pub(crate) fn changelog(worktree: &Path) -> Option<&'static str> {
    const NAMES: &[&str] = &["CHANGELOG.md", "CHANGES.md", "HISTORY.md", "NEWS.md", "CHANGES.rst", "CHANGELOG"];
    NAMES.iter().copied().find(|name| read_inside(worktree, name).is_some())
}

/// Runs the sample's check script in the worktree, as a fellow runs the
/// repository's tests: whether it passed, and a few words saying so.
fn run_check(worktree: &Path, check: &str) -> (bool, String) {
    let out = std::process::Command::new("sh").arg(check).current_dir(worktree).stdin(Stdio::null()).output();
    match out {
        Ok(out) if out.status.success() => (true, "passed (exit 0)".into()),
        Ok(out) => {
            (false, format!("failed (exit {})", out.status.code().map_or("by a signal".into(), |c| c.to_string())))
        }
        Err(e) => (false, format!("could not run ({e})")),
    }
}

/// The stand-in's treatment plan: what the sample's entry point does wrong,
/// cited by path and line when the issue names it.
fn diagnosis_plan(cited: Option<&(&str, String)>, sample: &Sample, log: Option<&str>) -> ScriptedNote {
    let log_line = log.map(|l| format!("\n- `{l}`: record the fix.")).unwrap_or_default();
    let (reading, diagnosis, files, tests) = match (cited, &sample.check) {
        (Some((path, line)), check) => (
            format!("Read {line}: it runs whatever it is given, the empty input included."),
            format!("{line} does not validate its input."),
            format!(
                "- `{path}`: refuse the empty input on stderr with exit code 2.{}{log_line}",
                check
                    .as_ref()
                    .map(|c| format!("\n- `{c}`: check that the empty input is refused."))
                    .unwrap_or_default()
            ),
            match check {
                Some(c) => format!("- `{CHECK_NAME}` in `{c}`: the empty input exits 2."),
                None => "- A check that the empty input is refused.".into(),
            },
        ),
        (None, _) => (
            "Ran the sample app's check; the behaviour described in the issue reproduces.".into(),
            "The entry point does not validate its input.".into(),
            format!("- {}", log.unwrap_or("CHANGELOG.md")),
            "- A check that the empty input is refused.".into(),
        ),
    };
    ScriptedNote {
        kind: NoteKind::TreatmentPlan,
        body: format!(
            "## Reproduction\n{reading}\n\n\
             ## Differential diagnosis\n1. Input not validated (confirmed by reading the entry point).\n\
             2. Wrong default value (ruled out: no default is set).\n\n\
             ## Diagnosis\n{diagnosis}\n\n\
             ## Files to change\n{files}\n\n\
             ## Tests to add\n{tests}\n\n\
             ## Risks\nCallers that relied on the lenient behaviour now get an error.\n\n\
             ## Open questions\nNone."
        ),
    }
}

/// The stand-in's code review: the guard and the check, cited where they
/// are, and the check run on the head; a failing check requests changes.
fn code_review(env: &StandInEnv, sample: &Sample) -> (&'static str, ScriptedNote) {
    let head = git_head(&env.worktree).unwrap_or_else(|| "unknown".into());
    let guard = sample.entry.as_ref().and_then(|(p, body, _)| Some((p, line_of(body, GUARD_TEST)?)));
    let correctness = match guard {
        Some((path, at)) => format!("The guard at `{path}:{at}` refuses the empty input before anything runs."),
        None => "The change does what the plan says.".into(),
    };
    let check = sample.check.as_ref().and_then(|c| {
        let at = line_of(&read_inside(&env.worktree, c)?, CHECK_NAME)?;
        Some((c, at))
    });
    let (passed, tests) = match check {
        Some((c, at)) => {
            let (passed, said) = run_check(&env.worktree, c);
            (passed, format!("The planned check `{CHECK_NAME}` is at `{c}:{at}`. Ran `sh {c}` on the head: {said}."))
        }
        None => (true, "The planned check is present.".into()),
    };
    let (outcome, verdict) =
        if passed { ("approve", "approve") } else { ("changes-requested", "changes requested: the check fails") };
    let note = ScriptedNote {
        kind: NoteKind::CodeReview,
        body: format!(
            "## Scope against the plan\nOnly the planned files changed.\n\n\
             ## Correctness\n{correctness}\n\n## Tests\n{tests}\n\n\
             ## Security\nNo new input reaches a shell, a query or a path.\n\n## Verdict\n{verdict}\n\n\
             Commit: {head}"
        ),
    };
    (outcome, note)
}

/// The happy-path visit of the default pipeline for `mode`.
pub fn default_visit(env: &StandInEnv) -> Result<ScriptedVisit, StandInError> {
    let note = |kind: NoteKind, body: String| ScriptedNote { kind, body };
    let issue = &env.issue;
    let visit =
        |outcome: &str, notes: Vec<ScriptedNote>| ScriptedVisit { outcome: outcome.into(), notes, edits: Vec::new() };
    let sample = Sample::find(env);
    // `greet.sh:3`: the entry point's first line of code, before treatment.
    let cited = sample.entry.as_ref().map(|(p, _, first)| (p.as_str(), format!("`{p}:{first}`")));
    Ok(match env.mode.as_str() {
        "triage" => visit(
            "ready",
            vec![note(
                NoteKind::Triage,
                format!(
                    "## Assessment\nIssue #{issue} names one defect in one place{}; one fellow can diagnose and treat it.\n\n\
                     ## Decision\nready: no decomposition needed.",
                    cited.as_ref().map(|(p, _)| format!(" (`{p}`)")).unwrap_or_default()
                ),
            )],
        ),
        "diagnose" => match side_by_side::issue_recipes(env).as_slice() {
            [] => visit("plan-posted", vec![diagnosis_plan(cited.as_ref(), &sample, changelog(&env.worktree))]),
            recipes => visit("plan-posted", vec![side_by_side::plan(recipes)]),
        },
        "plan" => visit(
            "approve",
            vec![note(
                NoteKind::PlanReview,
                format!(
                    "## Findings\nThe diagnosis follows from the reproduction{}; files and tests are named; the risk is stated{}.\n\n\
                     ## Verdict\napprove",
                    cited.as_ref().map(|(_, line)| format!(" ({line} reads as the plan says)")).unwrap_or_default(),
                    Some(plan_format(&env.worktree))
                        .filter(|skill| read_inside(&env.worktree, skill).is_some())
                        .map(|skill| format!("; every section `{skill}` asks for is there"))
                        .unwrap_or_default()
                ),
            )],
        ),
        "treat" if !side_by_side::issue_recipes(env).is_empty() => {
            side_by_side::treat(env, &side_by_side::issue_recipes(env))?
        }
        "resolve" => side_by_side::resolve(env),
        "treat" => {
            let (changes, tests) = treat(env, &sample)?;
            let head = commit_all(&env.worktree, &format!("Treat #{issue}: validate the entry point's input"))
                .or_else(|| git_head(&env.worktree))
                .unwrap_or_else(|| "not a git repository".into());
            let tests = match tests.as_slice() {
                [] => "- None: the issue names no shell entry point with a check script to run.".into(),
                ran => ran.iter().map(|t| format!("- {t}.")).collect::<Vec<_>>().join("\n"),
            };
            let changes: String = changes.iter().map(|c| format!("- {c}.\n")).collect();
            visit(
                "treated",
                vec![note(
                    NoteKind::TreatmentNote,
                    format!(
                        "## Changes against the plan\n{changes}\n\
                         ## Tests run\n{tests}\n\n\
                         ## Review findings addressed\nNone yet.\n\n\
                         ## Notes for the reviewer\nNothing outside the plan was touched.\n\n\
                         Commit: {head}"
                    ),
                )],
            )
        }
        "consult" => visit(
            "resume",
            vec![note(
                NoteKind::IpassReadback,
                "## Illness severity\nStable: nothing is broken on the base branch.\n\n\
                 ## Patient summary\nThe fellow's approved plan stalled on one step.\n\n\
                 ## Action list\nClarify the step; resume treatment.\n\n\
                 ## Situation awareness and contingency\nIf it stalls again, replan.\n\n\
                 ## Synthesis by receiver\nI checked the plan against the branch; the handoff is accurate.\n\n\
                 ## What I will do\nSend the patient back to treatment."
                    .into(),
            )],
        ),
        "code" => {
            let recipes = !side_by_side::issue_recipes(env).is_empty();
            let (outcome, note) = if recipes { side_by_side::review(env) } else { code_review(env, &sample) };
            visit(outcome, vec![note])
        }
        "discharge" => visit(
            "discharged",
            vec![note(
                NoteKind::DischargeChecklist,
                "The engine's checklist above is what counts; nothing on it is left blank by this nurse.".into(),
            )],
        ),
        other => return Err(StandInError::UnknownMode { mode: other.into(), stage: env.stage.clone() }),
    })
}

/// Commits everything in `dir` (the stand-in's treatment) with git itself,
/// so the repository's `.gitattributes` apply (a file routed to LFS is
/// committed as its pointer), and never ward's own files; returns the new
/// head. `None` when there is nothing to commit or git refuses (a CLI's
/// sandbox that keeps `.git` read-only): ward commits what was left.
fn commit_all(dir: &Path, message: &str) -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args([
                "-c",
                "user.name=ward stand-in",
                "-c",
                "user.email=stand-in@ward.invalid",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    git(&["add", "--all", "--", ".", ":(exclude,top).ward"])?;
    git(&["commit", "--quiet", "--no-verify", "-m", message])?;
    git_head(dir)
}

fn git_head(dir: &Path) -> Option<String> {
    let repo = git2::Repository::discover(dir).ok()?;
    let head = repo.head().ok()?.peel_to_commit().ok()?;
    Some(head.id().to_string())
}

/// `ward stand-in [--script FILE]`: writes its notes and exits.
pub fn stand_in(script: Option<&Path>) -> Result<(), StandInError> {
    let env = StandInEnv::from_env()?;
    let research = env.mode == "research";
    let text = match script {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| StandInError::Read { path: path.to_path_buf(), source })?;
            let visit: ScriptedVisit = serde_yaml::from_str(&text)
                .map_err(|source| StandInError::Script { path: path.to_path_buf(), source })?;
            for edit in &visit.edits {
                append_inside(&env.worktree, &edit.path, &edit.append)?;
            }
            match research {
                // The research role's account is plain text, not chart notes.
                true => visit.notes.iter().map(|n| n.body.trim_end().to_string() + "\n").collect(),
                false => render_notes(&env.sentinel, &visit.notes, &visit.outcome),
            }
        }
        None if research => research_visit(&env)?,
        None => {
            let visit = default_visit(&env)?;
            render_notes(&env.sentinel, &visit.notes, &visit.outcome)
        }
    };
    std::fs::write(&env.notes_file, text).map_err(write_failed(env.notes_file.display()))
}

/// Appends `text` to the file at `path` (relative, inside `root`; made
/// with its folders when missing; a link is refused).
fn append_inside(root: &Path, path: &str, text: &str) -> Result<(), StandInError> {
    let rel = Path::new(path.trim_start_matches("./"));
    if !rel.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
        return Err(StandInError::Outside(path.to_string()));
    }
    let full = root.join(rel);
    if full.symlink_metadata().is_ok_and(|m| !m.is_file()) {
        return Err(StandInError::NotAFile(path.to_string()));
    }
    if let Some(dir) = full.parent() {
        std::fs::create_dir_all(dir).map_err(|source| StandInError::Folder { path: path.to_string(), source })?;
    }
    let mut body = std::fs::read_to_string(&full).unwrap_or_default();
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(text);
    std::fs::write(&full, body).map_err(write_failed(path))
}

/// The research role: a short paragraph appended to the file the
/// strongest finding points at (the prompt's first `Points at:` line),
/// and an account of it for the pull request.
fn research_visit(env: &StandInEnv) -> Result<String, StandInError> {
    let prompt = env.prompt.as_deref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
    let target = prompt.lines().find_map(|l| l.strip_prefix("Points at: `")?.strip_suffix('`').map(str::to_string));
    let Some(target) = target.filter(|t| read_inside(&env.worktree, t).is_some()) else {
        return Ok("## Summary\nNo finding points at a role or skill in this worktree; nothing changed.\n".into());
    };
    let paragraph = "\n## From the research department\n\nThe hospital's record shows work sent back from the \
                     next gate again and again. Before you hand work on, read the reasons those send-backs gave \
                     and check your work against each of them.\n";
    append_inside(&env.worktree, &target, paragraph)?;
    Ok(format!(
        "## Summary\nAppended a paragraph to `{target}`: check the work against the reasons the gate keeps \
         giving before handing it on.\n\n## Draft precedent\nNone: the change is to the role, not a decision \
         for the chiefs.\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's sample app, its issue in a prompt, and the stand-in's
    /// environment in that worktree.
    fn sample_app(mode: &str) -> (tempfile::TempDir, StandInEnv) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("greet.sh"), "#!/bin/sh\n# Greets.\necho \"Hello, $1!\"\n").unwrap();
        std::fs::write(
            root.join("check.sh"),
            "#!/bin/sh\nset -e\n[ \"$(./greet.sh Ada)\" = \"Hello, Ada!\" ]\necho ok\n",
        )
        .unwrap();
        std::fs::write(root.join("CHANGELOG.md"), "# Changelog\n\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        for f in ["greet.sh", "check.sh"] {
            std::fs::set_permissions(root.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        crate::demo::init_repository(&root).unwrap();
        let prompt = dir.path().join("prompt.md");
        std::fs::write(
            &prompt,
            "# Role\nSee `engine/x.rs`.\n\n```untrusted\nRunning `./greet.sh \"\"` prints `Hello, !`.\n```\n",
        )
        .unwrap();
        let env = StandInEnv {
            issue: "1".into(),
            stage: mode.into(),
            mode: mode.into(),
            notes_file: dir.path().join("notes.md"),
            worktree: root,
            sentinel: "WARD".into(),
            prompt: Some(prompt),
        };
        (dir, env)
    }

    #[test]
    fn the_stand_in_cites_real_lines_of_the_file_the_issue_names() {
        let (_dir, mut env) = sample_app("diagnose");
        let precedents = std::collections::HashSet::new();
        let mut claims = 0;
        for (mode, after) in [("diagnose", false), ("plan", false), ("treat", true), ("code", true)] {
            env.mode = mode.into();
            let visit = default_visit(&env).unwrap();
            let tree = crate::groundedness::Tree::worktree(&env.worktree).unwrap();
            let facts = crate::groundedness::Facts { tree: &tree, precedents: &precedents, after_treatment: after };
            let notes = visit.notes.iter().map(|n| (n.kind.as_str(), n.body.as_str()));
            let score = crate::groundedness::score_notes(notes, &facts);
            assert!(!score.checked.is_empty() && score.value() == 1.0, "{mode}: {score:#?}");
            claims += score.checked.len();
        }
        assert!(claims >= 10, "{claims} claims");
        // The treatment is real: the guard is in, and the check names it.
        let greet = std::fs::read_to_string(env.worktree.join("greet.sh")).unwrap();
        assert!(greet.lines().nth(2).unwrap().starts_with("if [ -z \"$1\" ]"), "{greet}");
        let check = std::fs::read_to_string(env.worktree.join("check.sh")).unwrap();
        assert!(check.contains(CHECK_NAME), "{check}");
    }

    #[test]
    fn the_fellow_fixes_test_first_and_the_review_runs_the_check() {
        let (_dir, mut env) = sample_app("treat");
        let visit = default_visit(&env).unwrap();
        let body = &visit.notes[0].body;
        assert!(body.contains("`sh check.sh` before the fix: failed (exit 1)"), "{body}");
        assert!(body.contains("`sh check.sh` after the fix: passed (exit 0)"), "{body}");
        let out = std::process::Command::new("sh").args(["greet.sh", ""]).current_dir(&env.worktree).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "the bug is fixed for real");
        assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
        env.mode = "code".into();
        let review = default_visit(&env).unwrap();
        assert_eq!(review.outcome, "approve");
        assert!(review.notes[0].body.contains("Ran `sh check.sh` on the head: passed (exit 0)"), "{review:?}");
        // A head where the check fails gets changes requested.
        std::fs::write(env.worktree.join("greet.sh"), "#!/bin/sh\necho \"Hello, $1!\"\n").unwrap();
        let review = default_visit(&env).unwrap();
        assert_eq!(review.outcome, "changes-requested", "{review:?}");
        assert!(review.notes[0].body.contains("failed (exit 1)"), "{review:?}");
    }

    /// git's own machinery commits the treatment: a file `.gitattributes`
    /// routes to LFS lands as its pointer (libgit2 committed the raw bytes),
    /// and ward's working files in the checkout (a lock, as GitHub's job
    /// makes one there) are never committed, ignored or not.
    #[test]
    fn the_stand_in_commits_through_git_with_lfs_and_never_wards_files() {
        let git = |dir: &Path, args: &[&str]| {
            let out = std::process::Command::new("git").args(args).current_dir(dir).output().unwrap();
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let (_dir, env) = sample_app("treat");
        let root = &env.worktree;
        git(root, &["lfs", "install", "--local"]);
        std::fs::write(root.join(".gitattributes"), "*.bin filter=lfs diff=lfs merge=lfs -text\n").unwrap();
        std::fs::write(root.join("logo.bin"), [0u8, 159, 146, 150, 7, 7, 7]).unwrap();
        std::fs::create_dir_all(root.join(".ward/locks")).unwrap();
        std::fs::write(root.join(".ward/locks/stage-1.lock"), "run r1").unwrap();
        let head = commit_all(root, "treat").expect("committed");
        let files = git(root, &["ls-tree", "-r", "--name-only", &head]);
        assert!(files.lines().any(|f| f == "logo.bin"), "{files}");
        assert!(!files.contains(".ward/"), "ward's own files were committed: {files}");
        let blob = git(root, &["cat-file", "-p", &format!("{head}:logo.bin")]);
        assert!(blob.starts_with("version https://git-lfs.github.com/spec/v1"), "not a pointer: {blob:?}");
        // Nothing left to commit: no commit, and the caller keeps the head.
        assert_eq!(commit_all(root, "again"), None);
    }

    /// A repository that keeps its changelog as CHANGES.md (pallets/click):
    /// the plan and the treatment name it, and never a CHANGELOG.md that
    /// is not there.
    #[test]
    fn the_stand_in_cites_the_changelog_the_repository_keeps_or_none() {
        let (_dir, mut env) = sample_app("diagnose");
        std::fs::rename(env.worktree.join("CHANGELOG.md"), env.worktree.join("CHANGES.md")).unwrap();
        let plan = default_visit(&env).unwrap().notes[0].body.clone();
        assert!(plan.contains("`CHANGES.md`") && !plan.contains("CHANGELOG"), "{plan}");
        std::fs::remove_file(env.worktree.join("CHANGES.md")).unwrap();
        let plan = default_visit(&env).unwrap().notes[0].body.clone();
        assert!(!plan.contains("CHANGELOG") && !plan.contains("CHANGES"), "{plan}");
        env.mode = "treat".into();
        let note = default_visit(&env).unwrap().notes[0].body.clone();
        assert!(!note.contains("CHANGELOG"), "{note}");
        assert!(!env.worktree.join("CHANGELOG.md").exists(), "no changelog was made up");
    }

    #[test]
    fn without_a_named_file_the_stand_in_makes_no_claims_it_cannot_back() {
        let (_dir, mut env) = sample_app("diagnose");
        env.prompt = None;
        let visit = default_visit(&env).unwrap();
        assert!(crate::groundedness::extract_claims(&visit.notes[0].body).is_empty(), "{}", visit.notes[0].body);
    }
}
