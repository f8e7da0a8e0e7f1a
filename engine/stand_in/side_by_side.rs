//! The stand-in's part when patients are treated side by side: the steps
//! an issue may spell out (recipes), a treatment by them, and a branch
//! brought up to the base by a real `git rebase`, its conflicts resolved
//! where both sides' intent can be kept. Deterministic: what it does follows
//! from the issue, the prompt and the worktree, nothing else.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{ScriptedNote, ScriptedVisit, StandInEnv, StandInError, write_failed};
use crate::chart::NoteKind;
use crate::chart::control::Opening;

/// A step the issue spells out, one per line of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipe {
    /// ``Add `LINE` to `PATH` after `ANCHOR`.``: `line` inserted after the
    /// first line of `path` that contains `anchor` (once).
    Add { line: String, path: String, anchor: String },
    /// ``Record the output of `COMMAND` in `PATH`.``: what `sh -c COMMAND`
    /// prints in the worktree, written to `path` (again at every treatment).
    Record { command: String, path: String },
    /// ``Run `COMMAND`.``: `sh -c COMMAND` in the worktree, with the
    /// agent's environment (the emulator's variables among it), for a step
    /// that changes data rather than files; it must exit 0.
    Run { command: String },
}

impl Recipe {
    /// The file the step writes; `None` for a command run for its effect.
    pub fn path(&self) -> Option<&str> {
        match self {
            Recipe::Add { path, .. } | Recipe::Record { path, .. } => Some(path),
            Recipe::Run { .. } => None,
        }
    }
}

/// The recipes in an issue's text, in order. A line is one when its prose
/// around the code spans is exactly one of the three forms.
pub fn recipes(issue: &str) -> Vec<Recipe> {
    issue
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.trim().split('`').collect();
            let prose: Vec<&str> = parts.iter().step_by(2).map(|p| p.trim()).collect();
            let code: Vec<String> = parts.iter().skip(1).step_by(2).map(|c| c.to_string()).collect();
            let recipe = match (prose.as_slice(), code.as_slice()) {
                (["Add", "to", "after", "."], [line, path, anchor]) => {
                    Recipe::Add { line: line.clone(), path: path.clone(), anchor: anchor.clone() }
                }
                (["Record the output of", "in", "."], [command, path]) => {
                    Recipe::Record { command: command.clone(), path: path.clone() }
                }
                (["Run", "."], [command]) => Recipe::Run { command: command.clone() },
                _ => return None,
            };
            recipe.path().is_none_or(plain_relative).then_some(recipe)
        })
        .collect()
}

/// A relative path of plain components (no `..`, no root, not `.git`).
fn plain_relative(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty() && p.components().all(|c| matches!(c, std::path::Component::Normal(n) if n != ".git"))
}

/// Applies `recipes` in `worktree`; what changed, one line each, for the
/// TREATMENT_NOTE (paths with the line they changed where there is one).
pub fn apply(worktree: &Path, recipes: &[Recipe]) -> Result<Vec<String>, StandInError> {
    let mut changes = Vec::new();
    for r in recipes {
        match r {
            Recipe::Add { line, path, anchor } => {
                let file = worktree.join(path);
                let text = std::fs::read_to_string(&file)
                    .map_err(|source| StandInError::NoFile { path: path.clone(), source })?;
                let mut lines: Vec<&str> = text.lines().collect();
                if let Some(at) = lines.iter().position(|l| *l == line.as_str()) {
                    changes.push(format!("`{path}:{}`: the line the issue asks for, already there", at + 1));
                    continue;
                }
                let after = lines
                    .iter()
                    .position(|l| l.contains(anchor.as_str()))
                    .ok_or_else(|| StandInError::NoAnchor(path.clone()))?;
                lines.insert(after + 1, line);
                std::fs::write(&file, lines.join("\n") + "\n").map_err(write_failed(path))?;
                changes.push(format!("`{path}:{}`: the line the issue asks for, after its anchor", after + 2));
            }
            Recipe::Record { command, path } => {
                let out = run_in(worktree, command)?;
                std::fs::write(worktree.join(path), &out.stdout).map_err(write_failed(path))?;
                let lines = String::from_utf8_lossy(&out.stdout).lines().count();
                changes.push(format!("`{path}`: recorded what the command the issue names prints ({lines} lines)"));
            }
            Recipe::Run { command } => {
                let out = run_in(worktree, command)?;
                if !out.status.success() {
                    let said = String::from_utf8_lossy(&out.stderr);
                    let tail: Vec<&str> = said.lines().rev().take(3).collect();
                    let said = tail.into_iter().rev().collect::<Vec<_>>().join(" / ");
                    return Err(StandInError::Failed { status: out.status, said });
                }
                changes.push("ran the command the issue names (it exited 0; it changes data, not files)".into());
            }
        }
    }
    Ok(changes)
}

/// The base branch the prompt says to rebase onto (`git rebase BASE`), else
/// the one the workspace is `based on`.
pub fn prompt_base(prompt: &str) -> Option<String> {
    let token = |rest: &str| {
        let t: String = rest.chars().take_while(|c| !c.is_whitespace() && !"`()".contains(*c)).collect();
        (!t.is_empty() && !t.starts_with('-')).then_some(t)
    };
    prompt
        .match_indices("git rebase ")
        .find_map(|(i, m)| token(&prompt[i + m.len()..]))
        .or_else(|| prompt.split("based on `").nth(1).and_then(token))
}

/// How bringing the branch up to the base went.
#[derive(Debug, PartialEq, Eq)]
pub enum Rebased {
    /// The base was already in the branch's history.
    UpToDate,
    /// Rebased; the files whose conflicts were resolved (none: it applied cleanly).
    Done(Vec<String>),
    /// Not rebased (aborted): why, one sentence.
    Stuck(String),
}

fn git(worktree: &Path, args: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new("git")
        .args(["-c", "user.name=ward stand-in", "-c", "user.email=stand-in@ward.invalid"])
        .args(["-c", "merge.conflictStyle=diff3", "-c", "core.editor=true"])
        .args(args)
        .current_dir(worktree)
        .env("GIT_EDITOR", "true")
        .stdin(Stdio::null())
        .output()
}

/// Rebases the worktree's branch onto `base`, resolving each conflict with
/// [`resolve_markers`]; a conflict it cannot resolve aborts the rebase.
pub fn rebase(worktree: &Path, base: &str) -> Rebased {
    let said = |o: &std::process::Output| {
        let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
        t.push_str(&String::from_utf8_lossy(&o.stderr));
        t.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
    };
    match git(worktree, &["merge-base", "--is-ancestor", base, "HEAD"]) {
        Ok(o) if o.status.success() => return Rebased::UpToDate,
        Ok(o) if o.status.code() == Some(1) => {}
        Ok(o) => return Rebased::Stuck(format!("`{base}` is not a commit git can read here: {}", said(&o))),
        Err(e) => return Rebased::Stuck(format!("git could not run: {e}")),
    }
    let mut resolved = Vec::new();
    let mut step = git(worktree, &["rebase", base]);
    for _ in 0..100 {
        let out = match step {
            Ok(o) if o.status.success() => {
                resolved.dedup();
                return Rebased::Done(resolved);
            }
            Ok(o) => o,
            Err(e) => return Rebased::Stuck(format!("git could not run: {e}")),
        };
        let files = git(worktree, &["diff", "--name-only", "--diff-filter=U"])
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect::<Vec<_>>())
            .unwrap_or_default();
        if files.is_empty() {
            let _ = git(worktree, &["rebase", "--abort"]);
            return Rebased::Stuck(format!("`git rebase {base}` stopped without a conflict: {}", said(&out)));
        }
        for file in &files {
            let text = std::fs::read_to_string(worktree.join(file)).unwrap_or_default();
            let Some(merged) = resolve_markers(&text) else {
                let _ = git(worktree, &["rebase", "--abort"]);
                return Rebased::Stuck(format!(
                    "both sides changed the same lines of `{file}` differently: which to keep is a decision, not a merge"
                ));
            };
            if std::fs::write(worktree.join(file), merged).is_err() || git(worktree, &["add", "--", file]).is_err() {
                let _ = git(worktree, &["rebase", "--abort"]);
                return Rebased::Stuck(format!("could not write the resolution of `{file}`"));
            }
            resolved.push(file.clone());
        }
        step = git(worktree, &["rebase", "--continue"]);
    }
    let _ = git(worktree, &["rebase", "--abort"]);
    Rebased::Stuck(format!("`git rebase {base}` did not finish after 100 steps"))
}

/// A file's conflicts (diff3 style: ours, `|||||||` the ancestor, theirs)
/// resolved where both intents can be kept: both sides added lines at the
/// same place (the base's first, then the branch's, a line both added once),
/// or one side left the ancestor as it was (the other's change wins).
/// `None` when both changed the same lines differently.
pub fn resolve_markers(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        if !line.starts_with("<<<<<<<") {
            out.push_str(line);
            continue;
        }
        let (mut ours, mut ancestor, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        let mut part = 0;
        for l in lines.by_ref() {
            match () {
                _ if l.starts_with("|||||||") && part == 0 => part = 1,
                _ if l.starts_with("=======") && part < 2 => part = 2,
                _ if l.starts_with(">>>>>>>") && part == 2 => break,
                _ => [&mut ours, &mut ancestor, &mut theirs][part].push(l),
            }
        }
        let chosen: Vec<&str> = if ours == theirs || theirs == ancestor {
            ours
        } else if ours == ancestor {
            theirs
        } else if ancestor.is_empty() {
            let mut both = ours.clone();
            both.extend(theirs.into_iter().filter(|l| !ours.contains(l)));
            both
        } else {
            return None;
        };
        for l in chosen {
            out.push_str(l);
            if !l.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    Some(out)
}

/// The prompt's text ("" when there is none).
fn prompt_text(env: &StandInEnv) -> String {
    env.prompt.as_deref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default()
}

/// The issue's recipes, from the prompt's untrusted fence.
pub fn issue_recipes(env: &StandInEnv) -> Vec<Recipe> {
    recipes(&super::untrusted_text(&prompt_text(env)))
}

fn note(kind: NoteKind, body: String) -> ScriptedNote {
    ScriptedNote { kind, body }
}

fn visit(outcome: &str, notes: Vec<ScriptedNote>) -> ScriptedVisit {
    ScriptedVisit { outcome: outcome.into(), notes, edits: Vec::new() }
}

/// A fellow who cannot keep both intents hands over instead of guessing.
fn stuck(env: &StandInEnv, why: &str) -> ScriptedVisit {
    visit(
        "stuck",
        vec![note(
            NoteKind::IpassHandoff,
            format!(
                "## Illness severity\nWatcher: the change is reviewed but cannot reach the base as it is.\n\n\
                 ## Patient summary\nIssue #{} was treated and audited; bringing its branch up to the base failed: \
                 {why}.\n\n## Action list\n- Decide how both changes combine, then rebase the branch onto the base.\n\n\
                 ## Situation awareness and contingency\nThe branch is as the last review left it; nothing was \
                 pushed. If both plans contradict each other, the chiefs choose.\n\n\
                 ## Synthesis by receiver\nThe receiver restates the conflict before acting.",
                env.issue
            ),
        )],
    )
}

/// The sample's check, run as the fellow's and the reviewer's test.
fn check(env: &StandInEnv) -> Option<(bool, String)> {
    super::read_inside(&env.worktree, "check.sh")?;
    let (passed, said) = super::run_check(&env.worktree, "check.sh");
    Some((passed, format!("`sh check.sh`: {said}")))
}

/// The plan of an issue that spells out its steps.
pub fn plan(recipes: &[Recipe]) -> ScriptedNote {
    let files: String = recipes
        .iter()
        .map(|r| match r {
            Recipe::Add { path, .. } => format!("- `{path}`: add the line the issue gives, after its anchor.\n"),
            Recipe::Record { path, .. } => {
                format!("- `{path}`: create it with what the command the issue names prints (new file).\n")
            }
            Recipe::Run { .. } => "- No file: run the command the issue names, which changes data.\n".into(),
        })
        .collect();
    note(
        NoteKind::TreatmentPlan,
        format!(
            "## Reproduction\nRead the files the issue names: the steps it asks for are not there yet.\n\n\
             ## Differential diagnosis\n1. The steps are missing (confirmed by reading the files).\n\
             2. The steps exist elsewhere (ruled out: nothing else holds them).\n\n\
             ## Diagnosis\nThe issue spells out its change step by step; none is done yet.\n\n\
             ## Files to change\n{files}\n## Tests to add\n- None beyond the project's check, which must stay green.\n\n\
             ## Risks\nAnother change to the same lines would conflict.\n\n## Open questions\nNone."
        ),
    )
}

/// A treatment by the issue's recipes. Sent back by the merge queue
/// because the integration check failed combined with others, the fellow
/// first rebases onto the base (where those others are), then does the
/// steps again on top of them.
pub fn treat(env: &StandInEnv, recipes: &[Recipe]) -> Result<ScriptedVisit, StandInError> {
    let prompt = prompt_text(env);
    let mut changes = Vec::new();
    if prompt.contains(Opening::IntegrationFailed.text())
        && let Some(base) = prompt_base(&prompt)
    {
        match rebase(&env.worktree, &base) {
            Rebased::Stuck(why) => return Ok(stuck(env, &why)),
            Rebased::UpToDate => {}
            Rebased::Done(files) => changes.push(rebased_line(&base, &files)),
        }
    }
    changes.extend(apply(&env.worktree, recipes)?);
    if let Some(name) = super::changelog(&env.worktree) {
        let log = env.worktree.join(name);
        let mut text = std::fs::read_to_string(&log).unwrap_or_default();
        let entry = format!("- Treated #{}: as the issue asks.", env.issue);
        if !text.lines().any(|l| l == entry) {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&entry);
            text.push('\n');
            std::fs::write(&log, &text).map_err(write_failed(name))?;
        }
        changes.push(format!("`{name}`: records the change"));
    }
    let tests = check(env).map_or("- None: the project has no check script.".into(), |(_, said)| format!("- {said}."));
    let head = super::commit_all(&env.worktree, &format!("Treat #{}: as the issue asks", env.issue))
        .or_else(|| super::git_head(&env.worktree))
        .unwrap_or_else(|| "not a git repository".into());
    let changes: String = changes.iter().map(|c| format!("- {c}.\n")).collect();
    Ok(visit(
        "treated",
        vec![note(
            NoteKind::TreatmentNote,
            format!(
                "## Changes against the plan\n{changes}\n## Tests run\n{tests}\n\n\
                 ## Review findings addressed\nNone yet.\n\n## Notes for the reviewer\nNone.\n\nCommit: {head}"
            ),
        )],
    ))
}

fn rebased_line(base: &str, files: &[String]) -> String {
    match files {
        [] => format!("rebased onto `{base}`: it applied cleanly"),
        f => format!(
            "rebased onto `{base}`; conflicts resolved in {}, both sides' lines kept",
            f.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The resolving stage: the branch rebased onto the base the prompt names,
/// each conflict resolved keeping both sides where both can hold.
pub fn resolve(env: &StandInEnv) -> ScriptedVisit {
    let prompt = prompt_text(env);
    let Some(base) = prompt_base(&prompt) else {
        return stuck(env, "the prompt names no base branch to rebase onto");
    };
    let done = match rebase(&env.worktree, &base) {
        Rebased::Stuck(why) => return stuck(env, &why),
        Rebased::UpToDate => format!("the branch already had `{base}` in its history: nothing to resolve"),
        Rebased::Done(files) => rebased_line(&base, &files),
    };
    let tests = check(env).map_or("- None: the project has no check script.".into(), |(_, said)| format!("- {said}."));
    let head = super::git_head(&env.worktree).unwrap_or_else(|| "unknown".into());
    visit(
        "resolved",
        vec![note(
            NoteKind::TreatmentNote,
            format!(
                "## Changes against the plan\n- {done}.\n\n## Tests run\n{tests}\n\n\
                 ## Review findings addressed\n- The merge queue's conflict: the branch now rebases cleanly.\n\n\
                 ## Notes for the reviewer\nWhere both sides added lines at the same place, the base's come \
                 first.\n\nCommit: {head}"
            ),
        )],
    )
}

/// The review of a change by recipes: the project's check on the head.
pub fn review(env: &StandInEnv) -> (&'static str, ScriptedNote) {
    let head = super::git_head(&env.worktree).unwrap_or_else(|| "unknown".into());
    let (passed, tests) = match check(env) {
        Some((passed, said)) => (passed, format!("Ran {said} on the head.")),
        None => (true, "The project has no check script; nothing to run.".into()),
    };
    let (outcome, verdict) =
        if passed { ("approve", "approve") } else { ("changes-requested", "changes requested: the check fails") };
    let body = format!(
        "## Scope against the plan\nOnly the planned files changed.\n\n\
         ## Correctness\nThe change does what the plan says.\n\n## Tests\n{tests}\n\n\
         ## Security\nNo new input reaches a shell, a query or a path.\n\n## Verdict\n{verdict}\n\nCommit: {head}"
    );
    (outcome, note(NoteKind::CodeReview, body))
}

/// Runs the command an issue names with `sh -c` in the worktree, no input.
fn run_in(worktree: &Path, command: &str) -> Result<std::process::Output, StandInError> {
    Command::new("sh")
        .args(["-c", command])
        .current_dir(worktree)
        .stdin(Stdio::null())
        .output()
        .map_err(StandInError::Run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_recipe_forms_are_read_and_nothing_else() {
        let issue = "Please:\nAdd `echo \"Hi, $1.\"` to `greet.sh` after `echo \"Hello`.\n\
                     Record the output of `./greet.sh Ada` in `greeting.txt`.\n\
                     Run `echo hi > /dev/null`.\n\
                     Add `x` to `../etc/passwd` after `root`.\nAdd `x` to `a` after `b` today.\nRun `a` and `b`.";
        assert_eq!(
            recipes(issue),
            [
                Recipe::Add { line: "echo \"Hi, $1.\"".into(), path: "greet.sh".into(), anchor: "echo \"Hello".into() },
                Recipe::Record { command: "./greet.sh Ada".into(), path: "greeting.txt".into() },
                Recipe::Run { command: "echo hi > /dev/null".into() },
            ]
        );
    }

    #[test]
    fn a_run_step_runs_in_the_worktree_and_its_failure_is_one_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let done = apply(dir.path(), &[Recipe::Run { command: "echo data > ran.txt".into() }]).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("ran.txt")).unwrap(), "data\n");
        assert!(done[0].starts_with("ran the command the issue names"), "{done:?}");
        let failing = Recipe::Run { command: "echo no such collection >&2; exit 3".into() };
        let err = apply(dir.path(), &[failing]).unwrap_err().to_string();
        assert!(err.contains("failed (exit status: 3)") && err.contains("no such collection"), "{err}");
    }

    #[test]
    fn additions_on_both_sides_are_both_kept_and_a_real_clash_is_not_resolved() {
        let both = "a\n<<<<<<< HEAD\nbase adds\n||||||| parent\n=======\nbranch adds\n>>>>>>> 1234 (x)\nz\n";
        assert_eq!(resolve_markers(both).unwrap(), "a\nbase adds\nbranch adds\nz\n");
        let one_side = "<<<<<<< HEAD\nold\n||||||| parent\nold\n=======\nnew\n>>>>>>> x\n";
        assert_eq!(resolve_markers(one_side).unwrap(), "new\n");
        let clash = "<<<<<<< HEAD\nred\n||||||| parent\nold\n=======\nblue\n>>>>>>> x\n";
        assert_eq!(resolve_markers(clash), None);
    }

    #[test]
    fn the_base_is_read_from_the_prompt() {
        assert_eq!(prompt_base("do this:\n\n       git rebase main\n").as_deref(), Some("main"));
        assert_eq!(prompt_base("(`git rebase trunk`)").as_deref(), Some("trunk"));
        assert_eq!(prompt_base("branch `ward/issue-1`, based on `dev`. It").as_deref(), Some("dev"));
        assert_eq!(prompt_base("nothing"), None);
    }
}
