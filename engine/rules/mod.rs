//! The hospital's rules, enforced by the engine. The prompts ask agents to
//! follow them; these functions check that they did.
//!
//! Every rule is a pure function over data the stage runner gathered (the
//! chart, the notes the agent wrote, the pipeline, the precedent log, facts
//! from the forge) and answers with a [`Verdict`]: `Ok(())`, or a
//! [`Refusal`] that says which rule, what was wrong, what to do, and where
//! the patient goes ([`Route`]). A rule never does I/O and never panics on
//! bad input; the stage runner (`stage/record.rs`) turns a refusal into a
//! REFUSAL note and a label.
//!
//! Two moments, one signature each (as zizmor's audits and triagebot's
//! commit checks do it):
//!
//! - before the agent: `fn(&GuardInput) -> Verdict`, listed in [`BEFORE_AGENT`];
//! - after the agent: `fn(&RunInput) -> Verdict`, listed in [`AFTER_AGENT`].
//!
//! The discharge audit works on its own facts ([`discharge_audit::AuditFacts`])
//! and answers with a checklist rather than a single verdict; the
//! decomposition planner answers with the children to create and the labels
//! to set.

pub mod admitted;
pub mod approval;
pub mod changes;
pub mod decomposition;
pub mod discharge_audit;
pub mod escalation;
pub mod handoff;
pub mod note_permissions;
pub mod plan_gate;

use std::fmt;

use crate::chart::{AgentNotes, Note, NoteKind};
use crate::config::{Config, Stage};
use crate::forge::IssueNumber;
use crate::precedent::PrecedentLog;

/// Where a refused patient goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The run is invalid: nothing the agent declared counts, the label
    /// stays where it is and the run exits non-zero, so a person or the
    /// charge nurse runs the stage again.
    Stay,
    /// The run is turned back: the label stays and the stage runs again;
    /// the REFUSAL note tells the next run what to do differently.
    Rerun,
    /// The patient moves to this label.
    To(String),
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Stay => f.write_str("the label stays; the run is invalid"),
            Route::Rerun => f.write_str("the label stays; the stage runs again"),
            Route::To(label) => write!(f, "the patient moves to `{label}`"),
        }
    }
}

/// A rule said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule's name, e.g. `plan-gate`.
    pub rule: &'static str,
    /// What was wrong, as full sentences.
    pub reason: String,
    /// What to do about it.
    pub help: String,
    pub route: Route,
}

impl Refusal {
    pub fn new(rule: &'static str, reason: impl Into<String>, help: impl Into<String>, route: Route) -> Self {
        Self { rule, reason: reason.into(), help: help.into(), route }
    }

    /// Body of the REFUSAL note the engine writes to the chart.
    pub fn note_body(&self) -> String {
        format!(
            "Rule: {}\n\nRefused: {}\n\nWhat to do: {}\n\nRoute: {}.",
            self.rule, self.reason, self.help, self.route
        )
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule `{}` refused: {} What to do: {}", self.rule, self.reason, self.help)
    }
}

impl std::error::Error for Refusal {}

/// `Ok(())` or the refusal.
pub type Verdict = Result<(), Refusal>;

/// One dependency of a child issue, as the forge reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyFact {
    pub key: String,
    pub issue: Option<IssueNumber>,
    pub discharged: bool,
}

/// What the rules see before the agent runs.
#[derive(Debug, Clone, Copy)]
pub struct GuardInput<'a> {
    pub config: &'a Config,
    pub stage: Stage<'a>,
    /// The chart as it stands.
    pub chart: &'a [Note],
    /// When this patient is a decomposition child: its sibling
    /// dependencies (from the parent's DECOMPOSITION note). Empty otherwise.
    pub dependencies: &'a [DependencyFact],
}

/// What the rules see after the agent ran.
#[derive(Debug, Clone, Copy)]
pub struct RunInput<'a> {
    pub config: &'a Config,
    pub stage: Stage<'a>,
    /// This run's id (`run=` on its notes).
    pub run: &'a str,
    /// The chart as it stood before this run's agent notes (engine notes of
    /// this run, such as PRECEDENT_LOOKUP, may already be in it).
    pub chart: &'a [Note],
    /// What the agent wrote to `$WARD_NOTES`.
    pub notes: &'a AgentNotes,
    pub precedents: &'a PrecedentLog,
    /// How deep this patient sits in a decomposition tree (0: admitted by a person).
    pub depth: usize,
}

impl RunInput<'_> {
    /// The declared outcome, when exactly one was declared.
    pub fn outcome(&self) -> Option<&str> {
        match self.notes.outcomes.as_slice() {
            [(name, _)] => Some(name.as_str()),
            _ => None,
        }
    }

    /// The role that ran this stage.
    pub fn role(&self) -> &str {
        &self.stage.config.role
    }
}

/// A rule checked before the agent starts.
pub type GuardRule = fn(&GuardInput<'_>) -> Verdict;

/// A rule checked on what the agent wrote.
pub type RunRule = fn(&RunInput<'_>) -> Verdict;

/// Rules checked before the agent starts, in order.
pub const BEFORE_AGENT: &[(&str, GuardRule)] =
    &[(plan_gate::NAME, plan_gate::before), (decomposition::NAME, decomposition::before)];

/// Rules checked on what the agent wrote, in order.
pub const AFTER_AGENT: &[(&str, RunRule)] = &[
    (note_permissions::NAME, note_permissions::after),
    (handoff::NAME, handoff::after),
    (plan_gate::NAME, plan_gate::after),
    (escalation::NAME, escalation::after),
    (decomposition::NAME, decomposition::after),
];

/// The first refusal of the guard rules, if any.
pub fn guard(input: &GuardInput<'_>) -> Verdict {
    BEFORE_AGENT.iter().try_for_each(|(_, rule)| rule(input))
}

/// Runs every after-agent rule. Invalid-run refusals ([`Route::Stay`]) win
/// and are merged, so the agent learns every problem in one go; otherwise
/// the first refusal decides.
pub fn validate(input: &RunInput<'_>) -> Verdict {
    let refusals: Vec<Refusal> = AFTER_AGENT.iter().filter_map(|(_, rule)| rule(input).err()).collect();
    let (invalid, other): (Vec<Refusal>, Vec<Refusal>) = refusals.into_iter().partition(|r| r.route == Route::Stay);
    match invalid.len() {
        0 | 1 => invalid.into_iter().chain(other).next().map_or(Ok(()), Err),
        _ => {
            let rule = invalid[0].rule;
            let reason = invalid.iter().map(|r| format!("[{}] {}", r.rule, r.reason)).collect::<Vec<_>>().join(" ");
            let help = invalid.iter().map(|r| format!("[{}] {}", r.rule, r.help)).collect::<Vec<_>>().join(" ");
            Err(Refusal { rule, reason, help, route: Route::Stay })
        }
    }
}

/// A `## ` section of a Markdown note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section<'a> {
    pub heading: &'a str,
    pub content: String,
}

/// A code fence opening or closing on `line` (CommonMark: up to three
/// spaces, then three or more backticks or tildes): its character and length.
fn fence_of(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let c = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = rest.len() - rest.trim_start_matches(c).len();
    (indent <= 3 && run >= 3).then_some((c, run))
}

/// The heading text of an ATX level-two heading (`## Title`, up to three
/// spaces before, optional closing `#`s).
fn level_two_heading(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = line[indent..].strip_prefix("##")?;
    if indent > 3 || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim_end())
}

/// The level-two sections of `body`, in order. Headings inside fenced code
/// blocks are not headings; a fence closes only with a run of its own
/// character at least as long as the one that opened it.
pub fn sections(body: &str) -> Vec<Section<'_>> {
    let mut out: Vec<Section<'_>> = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in body.lines() {
        match (fence, fence_of(line)) {
            (Some((c, n)), Some((d, m)))
                if c == d && m >= n && line.trim_start().trim_start_matches(c).trim().is_empty() =>
            {
                fence = None;
            }
            (Some(_), _) => {}
            (None, Some(open)) => fence = Some(open),
            (None, None) => {
                if let Some(heading) = level_two_heading(line) {
                    out.push(Section { heading, content: String::new() });
                    continue;
                }
            }
        }
        if let Some(current) = out.last_mut() {
            current.content.push_str(line);
            current.content.push('\n');
        }
    }
    out
}

/// True when `text` says something: at least one letter or digit outside
/// HTML comments (a template's `<!-- fill in -->` placeholder says nothing).
pub fn has_substance(text: &str) -> bool {
    let mut rest = text;
    let mut visible = String::new();
    while let Some(start) = rest.find("<!--") {
        visible.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => {
                rest = "";
            }
        }
    }
    visible.push_str(rest);
    visible.chars().any(char::is_alphanumeric)
}

/// The required headings that `body` lacks or leaves empty, in the order
/// given. Headings compare case-insensitively.
pub fn missing_sections(body: &str, required: &[&str]) -> Vec<String> {
    let found = sections(body);
    required
        .iter()
        .filter_map(|want| {
            let matching: Vec<&Section<'_>> = found.iter().filter(|s| s.heading.eq_ignore_ascii_case(want)).collect();
            if matching.is_empty() {
                Some(format!("`## {want}` is missing"))
            } else if !matching.iter().any(|s| has_substance(&s.content)) {
                Some(format!("`## {want}` is empty"))
            } else {
                None
            }
        })
        .collect()
}

/// The OUTCOME a run declared, from the chart (the note body is the name).
pub fn outcome_of_run<'a>(chart: &'a [Note], run: &str) -> Option<&'a str> {
    chart.iter().rev().find(|n| n.kind == NoteKind::Outcome && n.meta.run == run).map(|n| n.body.trim())
}

/// True when the engine refused the run (a REFUSAL note carries its id):
/// what such a run declared does not count.
pub fn run_was_refused(chart: &[Note], run: &str) -> bool {
    chart.iter().any(|n| n.kind == NoteKind::Refusal && n.meta.run == run)
}

/// The latest accepted OUTCOME note: the last one whose run was not refused.
pub fn last_accepted_outcome(chart: &[Note]) -> Option<&Note> {
    chart.iter().rev().find(|n| n.kind == NoteKind::Outcome && !run_was_refused(chart, &n.meta.run))
}

/// Joins names as `a`, `b` and `c`.
pub(crate) fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builders shared by the rules' unit tests.
    use chrono::{DateTime, TimeZone, Utc};

    use crate::chart::{AgentNotes, DraftNote, Note, NoteMeta};
    use crate::config::{CONFIG_PATH, Config};

    pub const SHIPPED: &str = include_str!("../../.github/ward.yml");

    pub fn config() -> Config {
        parsed(SHIPPED)
    }

    /// A ward.yml that must be valid, e.g. the shipped one with a line changed.
    pub fn parsed(text: &str) -> Config {
        Config::parse(text, std::path::Path::new(CONFIG_PATH), None).expect("the config is valid")
    }

    pub fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 10, minute, 0).unwrap()
    }

    /// A chart note; minutes order the chart.
    pub fn note(kind: &str, run: &str, stage: &str, role: &str, body: &str) -> Note {
        Note {
            kind: kind.parse().expect("a known note kind"),
            meta: NoteMeta { run: run.into(), stage: stage.into(), role: role.into(), at: at(0) },
            body: body.into(),
        }
    }

    pub fn outcome(run: &str, stage: &str, name: &str) -> Note {
        note("OUTCOME", run, stage, "engine", name)
    }

    /// Agent notes from `(kind, body)` pairs and outcomes.
    pub fn agent(notes: &[(&str, &str)], outcomes: &[&str]) -> AgentNotes {
        AgentNotes {
            notes: notes
                .iter()
                .enumerate()
                .map(|(i, (k, b))| DraftNote {
                    kind: k.parse().expect("a known note kind"),
                    body: b.to_string(),
                    line: i * 10 + 1,
                })
                .collect(),
            outcomes: outcomes.iter().enumerate().map(|(i, o)| (o.to_string(), 1000 + i)).collect(),
        }
    }

    pub const PLAN: &str = "## Diagnosis\nThe cache key ignores the tenant.\n\n## Files to change\n- engine/cache.rs\n\n## Tests to add\n- two tenants, one key\n\n## Risks\nCold cache after deploy.\n\n## Open questions\nNone.\n";

    pub const HANDOFF: &str = "## Illness severity\nWatcher: stable, no data at risk.\n\n## Patient summary\nCache test fails on CI only.\n\n## Action list\n- run with RUST_LOG=debug\n\n## Situation awareness and contingency\nIf the emulator is down, restart it.\n\n## Synthesis by receiver\nReceiver restates before acting.\n";

    pub const CODE_REVIEW: &str = "## Scope against the plan\nMatches the plan.\n\n## Correctness\nKey includes tenant.\n\n## Tests\nTwo-tenant test added.\n\n## Security\nNo new input.\n\n## Verdict\nApprove.\n\nCommit: 0123456789abcdef0123456789abcdef01234567\n";
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn sections_ignore_fenced_headings_and_find_empty_ones() {
        let body = "intro\n## Diagnosis\n```\n## Risks\n```\n## Risks\n<!-- fill in -->\n\n## Tests to add\n- one\n";
        let s = sections(body);
        assert_eq!(s.iter().map(|s| s.heading).collect::<Vec<_>>(), vec!["Diagnosis", "Risks", "Tests to add"]);
        assert!(s[0].content.contains("## Risks"), "fenced heading stays content");
        assert_eq!(
            missing_sections(body, &["Diagnosis", "Risks", "Tests to add", "Open questions"]),
            vec!["`## Risks` is empty", "`## Open questions` is missing"]
        );
    }

    #[test]
    fn fences_close_only_with_their_own_kind_and_headings_follow_commonmark() {
        let body = "## Diagnosis\n````\n```\n## Risks\n````\n   ## Tests to add\nt\n##Not a heading\n#### Deeper\n##\tOpen questions ##\nNone.";
        let s = sections(body);
        let headings: Vec<&str> = s.iter().map(|s| s.heading).collect();
        assert_eq!(headings, vec!["Diagnosis", "Tests to add", "Open questions"]);
        assert!(s[0].content.contains("## Risks"), "inside a four-backtick fence");
        assert!(s[1].content.contains("##Not a heading") && s[1].content.contains("#### Deeper"));
    }

    #[test]
    fn an_unclosed_comment_hides_the_rest() {
        assert!(!has_substance("<!-- open forever"));
        assert!(has_substance("<!-- c --> yes"));
        assert!(!has_substance("- \n* \n"));
    }

    #[test]
    fn refused_runs_do_not_count_as_outcomes() {
        let chart = vec![
            outcome("r1", "diagnose", "plan-posted"),
            outcome("r2", "plan-review", "approve"),
            note("REFUSAL", "r2", "plan-review", "engine", "Rule: x"),
        ];
        assert_eq!(last_accepted_outcome(&chart).unwrap().meta.run, "r1");
        assert_eq!(outcome_of_run(&chart, "r2"), Some("approve"));
    }

    #[test]
    fn validate_merges_invalid_run_refusals() {
        let config = config();
        let stage = config.stage("treat").unwrap();
        // A fellow writes a CODE_REVIEW and an unknown precedent citation.
        let notes = agent(&[("CODE_REVIEW", CODE_REVIEW), ("TREATMENT_NOTE", "Done, see P-0042.")], &["treated"]);
        let log = PrecedentLog::default();
        let input =
            RunInput { config: &config, stage, run: "r9", chart: &[], notes: &notes, precedents: &log, depth: 0 };
        let refusal = validate(&input).unwrap_err();
        assert_eq!(refusal.route, Route::Stay);
        assert!(refusal.reason.contains("[note-permissions]"), "{refusal}");
        assert!(refusal.reason.contains("[escalation]"), "{refusal}");
        assert!(refusal.reason.contains("P-0042"), "{refusal}");
    }
}
