//! The patient's comment: one comment per patient on its issue, created
//! the first time a stage runs (at admission) and edited in place after
//! every stage and every command. It says where the patient is, the last
//! outcome, links to the run, the pull request and the chart, the spend so
//! far, what ward waits for, and the answer to the last command.
//!
//! Its id is kept in the chart (a PATIENT_COMMENT note), so an update costs
//! one call (the edit) when the caller has the chart in hand. A failed edit
//! is a warning: the transition it describes has happened already.

use tracing::warn;

use crate::chart::control::{ControlLine, comment_id, held_at};
use crate::chart::{self, ENGINE_ROLE, Note, NoteKind, NoteMeta, Seen, Sentinels};
use crate::config::Config;
use crate::forge::{Forge, IssueNumber};
use crate::untrusted;

/// The line every patient's comment starts with (people and tests find it by it).
pub const HEADING: &str = crate::forge::PATIENT_COMMENT_MARKER;

/// Where this run happens, for links: `GITHUB_SERVER_URL`,
/// `GITHUB_REPOSITORY`, `GITHUB_RUN_ID` in a workflow run; nothing locally.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    /// `https://github.com/owner/name`
    pub repository: Option<String>,
    /// The Actions run's page.
    pub run: Option<String>,
}

impl Links {
    /// Read from the Actions environment (absent outside a workflow run).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let repository = match (var("GITHUB_SERVER_URL"), var("GITHUB_REPOSITORY")) {
            (Some(server), Some(repo)) => Some(format!("{}/{repo}", server.trim_end_matches('/'))),
            _ => None,
        };
        let run = match (&repository, var("GITHUB_RUN_ID")) {
            (Some(repo), Some(id)) => Some(format!("{repo}/actions/runs/{id}")),
            _ => None,
        };
        Self { repository, run }
    }
}

/// The PATIENT_COMMENT note that charts comment `id`.
fn charted(meta: NoteMeta, id: u64) -> Note {
    let meta = NoteMeta { role: ENGINE_ROLE.into(), ..meta };
    Note { kind: NoteKind::PatientComment, meta, body: format!("The patient's comment.\n{}", ControlLine::Comment(id)) }
}

/// How a NETWORK note's line of refused connections starts.
pub const BLOCKED_LINE: &str = "blocked: ";

/// The comment's text (pure). `place` is the patient's ward label now;
/// `answer` a line about what caused this update (a command's answer, a
/// refused run), ward's own text.
pub fn render(
    config: &Config,
    number: IssueNumber,
    place: Option<&str>,
    notes: &[Note],
    links: &Links,
    answer: Option<&str>,
) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    let held = held_at(notes.iter());
    let at = match (place, &held) {
        (Some(p), Some(back)) if *p == config.commands.hold_label => {
            format!("`{p}` (held; `/ward resume` takes it to `{back}`)")
        }
        (Some(p), _) => format!("`{p}`"),
        (None, _) => "no ward label".into(),
    };
    rows.push(("Where", at));
    if let Some(o) = notes.iter().rfind(|n| n.kind == NoteKind::Outcome) {
        rows.push(("Last outcome", format!("`{}` in stage `{}` (run `{}`)", o.body.trim(), o.meta.stage, o.meta.run)));
    }
    if let Some(run) = &links.run {
        rows.push(("Run", format!("[this stage's run]({run})")));
    }
    if let Some((cost, path)) =
        notes.iter().rev().filter(|n| n.kind == NoteKind::Cost).find_map(|n| {
            n.body.lines().find_map(|l| l.strip_prefix(crate::budget::TRANSCRIPT_LINE)).map(|path| (n, path))
        })
    {
        let path = untrusted::excerpt(path).replace(['|', '`'], "");
        let place = match &links.run {
            Some(run) => format!("[the `ward-visit` artifact]({run})"),
            None => format!("the run's folder (`{}/<issue>/{}`)", "WARD_ARTIFACTS", cost.meta.run),
        };
        rows.push(("Transcript", format!("`{path}` of stage `{}`, in {place}", cost.meta.stage)));
    }
    // What the network wall refused the agent in the latest run it refused anything.
    if let Some((n, line)) = notes
        .iter()
        .rev()
        .filter(|n| n.kind == NoteKind::Network)
        .find_map(|n| n.body.lines().find(|l| l.starts_with(BLOCKED_LINE)).map(|line| (n, line)))
    {
        let line = untrusted::excerpt(line).replace(['|', '`'], "");
        rows.push(("Network", format!("{line} (stage `{}`, run `{}`)", n.meta.stage, n.meta.run)));
    }
    let branch = format!("{}{}", crate::event::BRANCH_PREFIX, number.0);
    if let Some(repo) = &links.repository {
        let pulls = format!("{repo}/pulls?q=is%3Apr+head%3A{}", branch.replace('/', "%2F"));
        rows.push(("Pull request", format!("[`{branch}`]({pulls})")));
        let chart = format!("{repo}/blob/{}/charts/{}.md", config.charts_branch, number.0);
        rows.push(("Chart", format!("[charts/{}.md]({chart})", number.0)));
    } else {
        rows.push(("Chart", format!("`ward chart show {}`", number.0)));
    }
    let spend = crate::budget::patient_spend(notes, &config.departments.budget.send_back_set(config));
    rows.push((
        "Spent so far",
        format!("${:.2} over {} stage runs, {} send-backs", spend.dollars, spend.stage_visits, spend.send_backs),
    ));
    if place == Some(config.discharge.pending_label.as_str())
        && let Some(w) = notes.iter().rfind(|n| n.kind == NoteKind::Waiting)
    {
        let missing: Vec<String> =
            w.body.lines().filter(|l| l.contains('⬜')).map(|l| untrusted::excerpt(l.trim())).take(6).collect();
        if !missing.is_empty() {
            rows.push(("Waiting for", missing.join("<br>").replace('|', "\\|")));
        }
    }
    let mut out = format!("{HEADING} (#{})\n\n| | |\n|---|---|\n", number.0);
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    if let Some(a) = answer {
        out.push_str(&format!("\n{a}\n"));
    }
    out.push_str(
        "\nCommands (write permission): `/ward retry`, `/ward hold`, `/ward resume`, `/ward chief <reason>`; ",
    );
    out.push_str("`/ward approve` (maintain).\n");
    out
}

/// The patient's comment, as every writer carries it: whose it is, its id
/// when known (GitHub's read finds it by its marker; elsewhere the chart's
/// PATIENT_COMMENT note says), and the metadata of the note that charts a
/// new one's id. A move writes it with its labels
/// ([`crate::transfer::transfer_telling`]); [`Tell::update`] writes it alone.
#[derive(Debug, Clone)]
pub struct Tell {
    pub number: IssueNumber,
    pub known: Option<u64>,
    pub meta: NoteMeta,
}

impl Tell {
    /// The comment's text at `place`, from the chart as the caller has it.
    pub fn render(&self, config: &Config, place: Option<&str>, notes: &[Note], answer: Option<&str>) -> String {
        render(config, self.number, place, notes, &Links::from_env(), answer)
    }

    /// The PATIENT_COMMENT note that charts comment `id`.
    pub fn charted(&self, id: u64) -> Note {
        charted(self.meta.clone(), id)
    }

    /// Creates or edits the comment, without a move: `notes` the chart as
    /// the caller has it (after its writes), `seen` the version it read (so
    /// a first comment's PATIENT_COMMENT note needs no second read). Never
    /// fails: a comment that could not be written is a warning.
    pub async fn update(
        &self,
        forge: &dyn Forge,
        config: &Config,
        place: Option<&str>,
        notes: &[Note],
        seen: Seen,
        answer: Option<&str>,
    ) {
        let text = self.render(config, place, notes, answer);
        if let Err(e) = self.write(forge, config, notes, seen, &text).await {
            warn!(issue = self.number.0, error = %e, "could not update the patient's comment (nothing else changes)");
        }
    }

    async fn write(
        &self,
        forge: &dyn Forge,
        config: &Config,
        notes: &[Note],
        seen: Seen,
        text: &str,
    ) -> anyhow::Result<()> {
        let number = self.number;
        let mut known = self.known.or_else(|| comment_id(notes));
        if known.is_none() && forge.finds_patient_comment() {
            known = forge.find_patient_comment(number).await?;
        }
        if let Some(id) = known {
            return Ok(forge.edit_comment(number, id, text).await?);
        }
        let id = forge.post_comment(number, text).await?;
        if forge.finds_patient_comment() {
            return Ok(());
        }
        chart::append(forge, &Sentinels::new(&config.sentinel_prefix), number, seen, &[self.charted(id)]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(kind: NoteKind, body: &str) -> Note {
        let meta = NoteMeta::engine("r1", "treat", chrono::Utc::now());
        Note { kind, meta, body: body.into() }
    }

    fn config() -> Config {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        Config::load(root).unwrap()
    }

    #[test]
    fn a_charted_comment_reads_back() {
        let meta = NoteMeta::engine("r1", "treat", chrono::Utc::now());
        let charted = charted(meta, 7);
        assert_eq!(charted.body, "The patient's comment.\nComment: 7");
        assert_eq!(comment_id(&[charted]), Some(7));
    }

    #[test]
    fn the_comment_says_where_what_links_spend_and_what_it_waits_for() {
        let c = config();
        let notes = [
            note(NoteKind::Outcome, "treated"),
            note(NoteKind::Waiting, "Waiting.\n- ⬜ CI green | for the head: not yet\n- ✅ Plan approved"),
        ];
        let links = Links {
            repository: Some("https://github.com/o/r".into()),
            run: Some("https://github.com/o/r/actions/runs/5".into()),
        };
        let text =
            render(&c, IssueNumber(3), Some("ward:awaiting-review"), &notes, &links, Some("**Last command:** done"));
        assert!(text.starts_with(HEADING), "{text}");
        assert!(text.contains("| Where | `ward:awaiting-review` |"), "{text}");
        assert!(text.contains("`treated` in stage `treat` (run `r1`)"), "{text}");
        assert!(text.contains("(https://github.com/o/r/actions/runs/5)"), "{text}");
        assert!(text.contains("https://github.com/o/r/blob/ward-charts/charts/3.md"), "{text}");
        assert!(text.contains("head%3Award%2Fissue-3"), "{text}");
        assert!(text.contains("| Spent so far | $0.00 over 0 stage runs"), "{text}");
        assert!(text.contains("⬜ CI green \\| for the head: not yet"), "a table cell cannot be broken: {text}");
        assert!(!text.contains("Plan approved"));
        assert!(text.contains("**Last command:** done"));
        let local = render(&c, IssueNumber(3), Some("ward:treat"), &notes, &Links::default(), None);
        assert!(!local.contains("Waiting for") && local.contains("`ward chart show 3`"), "{local}");
    }
}
