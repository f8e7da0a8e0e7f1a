//! What a run may change in the repository.
//!
//! - Only a treating stage changes code. A run of any other stage (triage,
//!   diagnosis, reviews, consult, discharge) that changed files is invalid:
//!   its changes are discarded and nothing of it is committed.
//! - A treatment never changes the rules it is judged by on its own: the
//!   workflows and ward.yml (`.github/`), `roles/`, `skills/`,
//!   `precedents/` (or wherever ward.yml's `paths` puts them), the role
//!   templates, the precedent log and the paths ward.yml lists under
//!   `protected_paths`. A change there goes to the chiefs, unless the
//!   approved plan lists the paths under `## Files to change`; then the run
//!   counts, and the patient's merge waits for a person (human approval
//!   mode for that patient, [`super::approval::human_approval`]).
//!
//! - A treatment stays small enough to review with confidence: a stage's
//!   `max_diff_lines` bounds the lines one run changes (added plus removed,
//!   counted by ward against the commit the run started at). A larger change
//!   is discarded and the patient goes back to the diagnosing stage, where
//!   the plan is split.
//!
//! - No run commits ward's own files: its locks, runs and state (`.ward/`,
//!   and the local forge's `charts/`). An agent that commits everything
//!   (`git add -A` in a checkout that does not ignore them) is refused,
//!   the paths named, and nothing of the run is pushed: a lock on the
//!   treatment branch would break the next stage's checkout of it.
//!
//! The paths are what ward read from the worktree after the agent ended
//! (`Workspace::changed_paths`), never what the agent says it changed.

use super::plan_gate::{PlanStatus, plan_status};
use super::{Refusal, Route, Verdict, sections};
use crate::chart::Note;
use crate::config::{Config, Stage};

pub const READ_ONLY: &str = "no-change-outside-treatment";
pub const PROTECTED: &str = "protected-paths";
pub const TOO_LARGE: &str = "max-diff-lines";
pub const WARD_FILES: &str = "no-ward-files-in-commits";
pub const CREDENTIALS: &str = "no-credentials";

/// How many paths a refusal names before it says how many more.
const NAMED: usize = 20;

/// A stage that doesn't treat leaves no change.
pub fn read_only(stage: Stage<'_>, changed: &[String]) -> Verdict {
    if stage.mode().treats() || changed.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        READ_ONLY,
        format!(
            "stage `{}` ({} mode) does not change code, and this run changed {}: {}. Its changes were \
             discarded; nothing of this run is committed.",
            stage.name,
            stage.mode(),
            count(changed.len(), "file"),
            named(changed)
        ),
        "Read the code and write notes only; changes to the code belong to the treating stage, after an approved \
         plan.",
        Route::Stay,
    ))
}

/// The run's commits hold none of ward's own files (`committed`: the paths
/// under ward's folders the commits changed, as ward read them).
pub fn no_ward_files(committed: &[String]) -> Verdict {
    if committed.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        WARD_FILES,
        format!(
            "this run's commits hold ward's own {}: {}. They are ward's locks, runs and state, not the patient's, \
             and a treatment branch that carries them breaks the next stage's checkout; the run is refused and \
             nothing of it was pushed.",
            count(committed.len(), "file"),
            named(committed)
        ),
        "Commit only the files the treatment changes (not `git add -A` over ward's `.ward/`), or leave the \
         changes uncommitted: ward commits what the agent leaves, without its own files.",
        Route::Stay,
    ))
}

/// Nothing the run would put on the branch or in the chart holds a
/// credential (`found`: what the scan found, by file and line). The value
/// is never quoted: the refusal is posted where the agent's readers are.
pub fn no_credentials(found: &[crate::secrets::scan::Finding]) -> Verdict {
    if found.is_empty() {
        return Ok(());
    }
    let mut places: Vec<String> =
        found.iter().take(NAMED).map(|f| format!("`{}` line {} ({})", f.path, f.line, f.kind)).collect();
    if found.len() > NAMED {
        places.push(format!("and {} more", found.len() - NAMED));
    }
    Err(Refusal::new(
        CREDENTIALS,
        format!(
            "this run would have published what looks like a credential in {}: {}. The value is not quoted here; \
             the run is refused and nothing of it was committed, pushed or charted.",
            count(found.len(), "place"),
            places.join("; ")
        ),
        "Read credentials from the environment or a secret store at run time, never write them into files or \
         notes. If a credential was really exposed to the agent, revoke it.",
        Route::Stay,
    ))
}

/// A treatment within its stage's `max_diff_lines`; a larger one goes back
/// to diagnosis to split the plan.
pub fn small_enough(config: &Config, stage: Stage<'_>, diff_lines: u64) -> Verdict {
    let Some(max) = stage.config.max_diff_lines.filter(|_| stage.mode() == crate::config::Mode::Treat) else {
        return Ok(());
    };
    if diff_lines <= max {
        return Ok(());
    }
    // Config validation makes sure a stage diagnoses; the chiefs otherwise.
    let (to, help) = match config.diagnosing_stage() {
        Some(d) => (
            d.config.label.clone(),
            format!(
                "Stage `{}` splits the plan: a revised plan whose first part changes at most {max} lines, the rest \
                 named as later steps (follow-up issues, or children of this patient); the plan is reviewed again \
                 before treatment.",
                d.name
            ),
        ),
        None => (config.chief_label().to_string(), "A chief splits this patient by hand.".to_string()),
    };
    Err(Refusal::new(
        TOO_LARGE,
        format!(
            "the treatment changed {} against the commit the run started at, over the limit of {max} lines \
             (`stages.{}.max_diff_lines`) for a change reviewed with confidence. Its changes were discarded; \
             nothing of this run is committed.",
            count(diff_lines as usize, "line"),
            stage.name
        ),
        help,
        Route::To(to),
    ))
}

/// What a treatment's changes to protected paths mean for the patient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protection {
    /// No protected path changed.
    Clear,
    /// Protected paths changed, each listed in the approved plan: the run
    /// counts, and a person approves the merge.
    NeedsApproval(Vec<String>),
}

/// True when `path` (relative to the repository's top) is one of the rules
/// the agents are judged by. Case is ignored: on a case-insensitive checkout
/// `.GitHub/` is `.github/`.
pub fn is_protected(config: &Config, path: &str) -> bool {
    config.built_in_protected().iter().chain(config.protected_paths.iter()).any(|entry| covers(entry, path))
}

/// A treatment's changes against the protected paths.
pub fn protected(config: &Config, stage: Stage<'_>, chart: &[Note], changed: &[String]) -> Result<Protection, Refusal> {
    if !stage.mode().treats() {
        return Ok(Protection::Clear);
    }
    let touched: Vec<String> = changed.iter().filter(|p| is_protected(config, p)).cloned().collect();
    if touched.is_empty() {
        return Ok(Protection::Clear);
    }
    let planned = match plan_status(config, chart) {
        PlanStatus::Approved { plan, .. } => planned_files(&plan.body),
        _ => Vec::new(),
    };
    let unplanned: Vec<String> =
        touched.iter().filter(|p| !planned.iter().any(|entry| covers(entry, p))).cloned().collect();
    if unplanned.is_empty() {
        return Ok(Protection::NeedsApproval(touched));
    }
    let chief = config.chief_label();
    Err(Refusal::new(
        PROTECTED,
        format!(
            "the treatment changed {} the agents are judged by, which the approved plan does not list under \
             `## Files to change`: {}. Its changes were discarded; nothing of this run is committed.",
            count(unplanned.len(), "protected path"),
            named(&unplanned)
        ),
        format!(
            "A chief looks at `{chief}`: change the rules by hand, or revise the plan to list these paths (the \
             merge then waits for a person's approval), and put the patient back."
        ),
        Route::To(chief.to_string()),
    ))
}

/// The paths a plan's `## Files to change` names: every `code span` of the
/// section, or, on a line without one, its first word after a list marker.
pub fn planned_files(plan: &str) -> Vec<String> {
    let Some(section) = sections(plan).into_iter().find(|s| s.heading.eq_ignore_ascii_case("Files to change")) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for line in section.content.lines() {
        let spans: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        if spans.is_empty() {
            let item = line.trim_start().trim_start_matches(['-', '*', '+']).trim_start();
            let item = item.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start_matches(['.', ')']);
            if let Some(word) = item.split_whitespace().next() {
                files.push(word.trim_end_matches([',', ';', ':']).to_string());
            }
        } else {
            files.extend(spans.iter().map(|s| s.trim().to_string()));
        }
    }
    files.retain(|f| !f.is_empty());
    files
}

/// Whether `entry` (a file, or a folder ending with `/`) covers `path`.
fn covers(entry: &str, path: &str) -> bool {
    let norm = |p: &str| p.trim().trim_start_matches("./").trim_start_matches('/').to_lowercase();
    let (entry, path) = (norm(entry), norm(path));
    if entry.is_empty() {
        return false;
    }
    match entry.strip_suffix('/') {
        Some(folder) => path.starts_with(&entry) || path == folder,
        None => path == entry || path.starts_with(&format!("{entry}/")),
    }
}

fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

fn named(paths: &[String]) -> String {
    let mut shown: Vec<String> = paths.iter().take(NAMED).map(|p| format!("`{}`", p.escape_debug())).collect();
    if paths.len() > NAMED {
        shown.push(format!("and {} more", paths.len() - NAMED));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    fn approved_plan(files: &str) -> Vec<Note> {
        let plan = format!(
            "## Diagnosis\nx\n\n## Files to change\n{files}\n\n## Tests to add\nx\n\n## Risks\nx\n\n## Open questions\nx"
        );
        vec![
            note("TREATMENT_PLAN", "r1", "diagnose", "fellow", &plan),
            outcome("r1", "diagnose", "plan-posted"),
            note("PLAN_REVIEW", "r2", "plan-review", "review-attending", "## Findings\nok\n\n## Verdict\napprove"),
            outcome("r2", "plan-review", "approve"),
        ]
    }

    #[test]
    fn a_stage_that_does_not_treat_changes_nothing() {
        let c = config();
        for name in ["admit", "diagnose", "plan-review", "consult", "code-review", "discharge"] {
            let stage = c.stage(name).unwrap();
            read_only(stage, &[]).unwrap();
            let err = read_only(stage, &paths(&["src/lib.rs", "README.md"])).unwrap_err();
            assert_eq!(err.route, Route::Stay, "{name}");
            assert!(err.reason.contains("this run changed 2 files: `src/lib.rs`, `README.md`"), "{}", err.reason);
        }
        read_only(c.stage("treat").unwrap(), &paths(&["src/lib.rs"])).unwrap();
    }

    #[test]
    fn a_long_list_of_changes_is_named_in_part() {
        let many: Vec<String> = (0..25).map(|i| format!("f{i}")).collect();
        let err = read_only(config().stage("diagnose").unwrap(), &many).unwrap_err();
        assert!(err.reason.contains("`f19`, and 5 more"), "{}", err.reason);
    }

    #[test]
    fn the_rules_the_agents_are_judged_by_are_protected() {
        let mut c = config();
        for p in [".github/ward.yml", ".github/workflows/ward-stage.yml", "roles/fellow.md", "skills/x.md"] {
            assert!(is_protected(&c, p), "{p}");
        }
        assert!(is_protected(&c, "precedents/log.yaml"));
        assert!(is_protected(&c, ".GitHub/ward.yml"), "case is ignored");
        for p in ["src/roles/x.rs", "roles.md", ".githubx/y", "deploy/prod.yml"] {
            assert!(!is_protected(&c, p), "{p}");
        }
        c.protected_paths = paths(&["deploy/", "Makefile"]);
        assert!(is_protected(&c, "deploy/prod.yml"));
        assert!(is_protected(&c, "Makefile"));
        assert!(!is_protected(&c, "Makefile.old"));
        c.precedents.log = "docs/decisions.yaml".into();
        assert!(is_protected(&c, "docs/decisions.yaml"), "the precedent log wherever it lives");
        c.paths.roles = "ward/roles/".into();
        c.paths.skills = "ward/skills".into();
        c.paths.precedents = "ward/precedents/".into();
        for p in ["ward/roles/fellow.md", "ward/skills/x.md", "ward/precedents/log.yaml", "roles/fellow.md"] {
            assert!(is_protected(&c, p), "{p}: the folders where `paths` puts them, and the role templates named");
        }
        for p in ["roles/site.yml", "skills/x.md", "precedents/other.yaml", "ward/README.md"] {
            assert!(!is_protected(&c, p), "{p}: the repository's own folders once ward's live elsewhere");
        }
    }

    #[test]
    fn a_treatment_that_touches_a_protected_path_goes_to_the_chiefs() {
        let c = config();
        let treat = c.stage("treat").unwrap();
        let chart = approved_plan("- `src/greet.sh`");
        let changed = paths(&["src/greet.sh", ".github/workflows/ward-stage.yml", "precedents/log.yaml"]);
        let err = protected(&c, treat, &chart, &changed).unwrap_err();
        assert_eq!(err.route, Route::To("ward:chief".into()));
        assert!(
            err.reason.contains("2 protected paths")
                && err.reason.contains("`.github/workflows/ward-stage.yml`, `precedents/log.yaml`"),
            "{}",
            err.reason
        );
        assert_eq!(protected(&c, treat, &chart, &paths(&["src/greet.sh"])), Ok(Protection::Clear));
        // Other stages are the read-only rule's business.
        assert_eq!(protected(&c, c.stage("diagnose").unwrap(), &chart, &changed), Ok(Protection::Clear));
    }

    #[test]
    fn a_planned_protected_change_counts_and_needs_a_person() {
        let c = config();
        let treat = c.stage("treat").unwrap();
        let chart = approved_plan("- `src/greet.sh`\n- `.github/workflows/ci.yml`: run the new check\n- roles/");
        let changed = paths(&["src/greet.sh", ".github/workflows/ci.yml", "roles/fellow.md"]);
        assert_eq!(
            protected(&c, treat, &chart, &changed),
            Ok(Protection::NeedsApproval(paths(&[".github/workflows/ci.yml", "roles/fellow.md"])))
        );
        // Only an approved plan counts.
        let unreviewed = &chart[..2];
        assert!(protected(&c, treat, unreviewed, &changed).is_err());
        // A file the plan names does not cover its neighbours.
        assert!(protected(&c, treat, &chart, &paths(&[".github/workflows/ward-stage.yml"])).is_err());
    }

    #[test]
    fn a_treatment_over_its_line_limit_goes_back_to_diagnosis() {
        let c = config();
        let treat = c.stage("treat").unwrap();
        assert_eq!(small_enough(&c, treat, 10_000), Ok(()), "no limit by default");
        let limited = SHIPPED.replace("    mode: treat\n", "    mode: treat\n    max_diff_lines: 40\n");
        let c = parsed(&limited);
        let treat = c.stage("treat").unwrap();
        assert_eq!(small_enough(&c, treat, 40), Ok(()));
        let err = small_enough(&c, treat, 41).unwrap_err();
        assert_eq!(err.rule, TOO_LARGE);
        assert_eq!(err.route, Route::To("ward:diagnose".into()));
        assert!(err.reason.contains("changed 41 lines") && err.reason.contains("limit of 40 lines"), "{}", err.reason);
        assert!(err.help.contains("Stage `diagnose` splits the plan"), "{}", err.help);
        // Other stages are never measured.
        assert_eq!(small_enough(&c, c.stage("code-review").unwrap(), 10_000), Ok(()));
    }

    #[test]
    fn planned_files_are_code_spans_or_first_words() {
        let plan = "## Files to change\n- `a/b.rs` and `c.md`\n* d/e.txt: why\n1. f/\n\n## Tests to add\n- `t.rs`";
        assert_eq!(planned_files(plan), paths(&["a/b.rs", "c.md", "d/e.txt", "f/"]));
        assert!(planned_files("## Diagnosis\n`x`").is_empty());
    }
}
