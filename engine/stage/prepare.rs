//! Prepare: what must be true before an agent starts. The admission notes
//! are durable first (so a crash is visible to the charge nurse), then the
//! workspace is up, then the prompt is written.

use std::path::PathBuf;

use anyhow::Context;
use tracing::warn;

use super::patient::Patient;
use super::result::Phase;
use super::visit::{CHART_FILE, PROMPT_FILE};
use crate::chart::{Note, NoteKind, Seen};
use crate::forge::StoredChart;
use crate::hospital::Hospital;
use crate::precedent::Match;
use crate::prompt::{PromptContext, WorkspaceContext};
use crate::rules::admitted::{self, AtAdmission};
use crate::rules::discharge_audit::{AuditFacts, Checklist};
use crate::workspace::{Cancel, Workspace};

/// What the agent starts from.
pub struct Prepared {
    /// The chart as the agent's rules see it: as read, and the notes the
    /// engine wrote before the agent.
    pub chart: Vec<Note>,
    pub stored: Option<StoredChart>,
    /// The engine's discharge audit taken before the nurse, in the auditing stage.
    pub audit: Option<(AuditFacts, Checklist)>,
    /// Where the agent runs.
    pub workdir: PathBuf,
    /// The emulator's variables, for the agent's environment only.
    pub emulator_env: Vec<(String, String)>,
    /// The emulator's ports on 127.0.0.1, relayed into the agent's wall.
    pub emulator_ports: Vec<u16>,
    pub prompt_file: PathBuf,
}

/// In the visit job (`phase` [`Phase::Visit`]) the notes before the agent
/// are in its chart but written nowhere (the record job writes them); in
/// the record job ([`Phase::Record`]) no workspace comes up: nothing of the
/// agent's tree is checked out where the token is.
pub async fn prepare(
    h: &Hospital,
    patient: &Patient<'_>,
    audit: Option<(AuditFacts, Checklist)>,
    slot: &mut Option<Workspace>,
    phase: &Phase,
) -> anyhow::Result<Prepared> {
    let (number, stage) = (patient.issue.number, patient.stage);
    std::fs::create_dir_all(&patient.folder)
        .with_context(|| format!("could not create the run's folder {}", patient.folder.display()))?;

    // The patient's text as admitted (the admission stage keeps it), the
    // admission to the stage, the precedents looked up (precedent first),
    // and in the auditing stage the engine's own audit, which the nurse reads.
    let kept = keep_text(h, patient).await?;
    let about = match (admitted::admitted(&patient.chart), &kept) {
        (Some(a), _) => format!("{} {}", a.text.title, a.text.body),
        (None, Some(note)) => note.body.clone(),
        (None, None) => format!("{} {}", patient.issue.title, patient.issue.body),
    };
    let found = h.precedents.search(&about, h.config.precedents.top);
    let admission = format!(
        "Stage `{}` ({} in {} mode) started for `{}`; time limit {}.\n{}",
        stage.name,
        stage.config.role,
        stage.mode(),
        patient.label_in,
        humantime::format_duration(stage.config.time_limit),
        crate::governance::admission_line(&h.pipeline_version)
    );
    let mut before_agent: Vec<Note> = kept.into_iter().collect();
    before_agent.extend([
        patient.engine_note(h, NoteKind::Admission, admission),
        patient.engine_note(h, NoteKind::PrecedentLookup, precedent_lookup_body(&found)),
    ]);
    if let Some((_, checklist)) = &audit {
        before_agent.push(patient.engine_note(h, NoteKind::DischargeChecklist, checklist.render()));
    }
    let stored = match phase.writes() {
        true => {
            crate::chart::append(&*h.forge, &h.sentinels, number, Seen::Read(patient.stored.clone()), &before_agent)
                .await?
        }
        false => patient.stored.clone(),
    };
    let mut chart = patient.chart.clone();
    chart.extend(before_agent);

    // The task's worktree, and the stage's emulator if it has one.
    if let Some(plan) = h.workspace_plan()?.filter(|_| !matches!(phase, Phase::Record { .. })) {
        let mut wreq = plan.request(&h.root, number.0, stage.name, &patient.run, &patient.folder);
        wreq.emulator = h.config.emulator_for(stage.name).cloned();
        wreq.expires_after = stage.config.time_limit + stage.config.stall_after;
        wreq.restart = chart.iter().rfind(|n| n.kind == NoteKind::Outcome).is_some_and(|n| n.body.trim() == "restart");
        wreq.checkpoints = true;
        let ws = match Workspace::up(wreq, &Cancel::process()?).await {
            Ok(ws) => ws,
            Err(e) => {
                // Data that did not load, or did not read back, stops the
                // stage before its agent: the patient is never judged on
                // the wrong data, and the chart says why.
                if phase.writes()
                    && matches!(
                        e,
                        crate::workspace::WorkspaceError::ReadBack { .. }
                            | crate::workspace::WorkspaceError::Checkpoint { .. }
                    )
                {
                    let body = format!("The stage stopped before its agent ran: {e}");
                    let note = patient.engine_note(h, NoteKind::Refusal, body);
                    if let Err(write) =
                        crate::chart::append(&*h.forge, &h.sentinels, number, Seen::Read(stored.clone()), &[note]).await
                    {
                        warn!(issue = number.0, "could not chart the stop: {write}");
                    }
                }
                return Err(anyhow::Error::new(e)
                    .context(format!("could not bring up the workspace of issue {number}, stage `{}`", stage.name)));
            }
        };
        *slot = Some(ws);
    }
    let workdir = slot.as_ref().map_or_else(|| h.workdir.clone(), |w| w.worktree.path.clone());
    let emulator_env: Vec<(String, String)> = slot
        .as_ref()
        .and_then(|w| w.emulator.as_ref())
        .map(|e| e.vars.clone().into_iter().collect())
        .unwrap_or_default();
    let emulator_ports: Vec<u16> = slot
        .as_ref()
        .and_then(|w| w.emulator.as_ref())
        .map(|e| e.ports.values().copied().collect())
        .unwrap_or_default();

    let workspace = WorkspaceContext {
        path: workdir.display().to_string(),
        branch: crate::workspace::worktree::branch_name(number.0),
        base: h.workspace_plan()?.map_or_else(|| "main".into(), |p| p.base.clone()),
        head: slot.as_ref().map_or_else(|| "HEAD".into(), |w| w.start().to_string()),
        env: emulator_env.iter().map(|(k, _)| k.clone()).collect(),
    };
    let mut ctx = PromptContext::new(&h.config, &h.sentinels, stage, &patient.issue, &chart, &found, workspace);
    // An agent without a shell (aider) cannot expand `$WARD_NOTES`: it is
    // told the file's path, which is in its chat.
    if let Some(preset) = h.config.agent.applied.as_ref().map(|a| a.preset).filter(|p| !p.shell) {
        ctx.shell = false;
        let area = crate::agent::home::Area::for_agent(&patient.folder, &workdir, Some(preset));
        ctx.notes_file = area.notes.display().to_string();
    }
    // The prompt carries the notes this role needs; the whole chart is a
    // file beside it for the agent to read when it needs an older note.
    let chart_file = patient.folder.join(CHART_FILE);
    let whole: String = chart.iter().map(|n| h.sentinels.render_note(n)).collect();
    std::fs::write(&chart_file, whole).with_context(|| format!("could not write {}", chart_file.display()))?;
    ctx.chart_file = Some(chart_file.display().to_string());
    // The code reviewer sees what the change did to the data.
    if stage.mode() == crate::config::Mode::Code
        && let Some(view) = slot.as_ref().and_then(|w| w.data_view(crate::prompt::DATA_DIFF_BUDGET))
    {
        ctx.data = Some(crate::prompt::DataContext::new(&h.sentinels, &view));
    }
    let role = h.config.role(&stage.config.role).context("a validated config names a known role")?;
    let prompt = h.prompts.render(&role.prompt, &ctx)?;
    let prompt_file = patient.folder.join(PROMPT_FILE);
    std::fs::write(&prompt_file, &prompt).with_context(|| format!("could not write {}", prompt_file.display()))?;
    Ok(Prepared { chart, stored, audit, workdir, emulator_env, emulator_ports, prompt_file })
}

/// The ADMITTED_TEXT note the admission stage writes, if any: the issue's
/// text at the first admission, and at a re-admission by a person with the
/// admission permission after an edit (rules/admitted.rs). Other stages
/// write none.
async fn keep_text(h: &Hospital, patient: &Patient<'_>) -> anyhow::Result<Option<Note>> {
    let number = patient.issue.number;
    if patient.stage.config.label != h.config.admission {
        if admitted::admitted(&patient.chart).is_none() {
            warn!(
                issue = number.0,
                "the chart keeps no admitted text (it was admitted before ward kept it): the prompt shows the \
                 issue as it reads now; re-admit the patient to keep its text"
            );
        }
        return Ok(None);
    }
    let now = admitted::Text::from_issue(&h.sentinels, &patient.issue.title, &patient.issue.body);
    let mut decision = admitted::at_admission(&patient.chart, now.clone(), None);
    if decision == AtAdmission::EditedNotReadmitted {
        // Who applied the admission label, from the forge's label history.
        let events = h.forge.label_events(number).await?;
        if let Some(e) = admitted::last_admission(&h.config, &events)
            && h.forge.permission(&e.actor).await? >= h.config.admit_permission
        {
            decision = admitted::at_admission(&patient.chart, now, Some(e.at));
        }
    }
    Ok(match decision {
        AtAdmission::Admit(text) | AtAdmission::Readmit(text) => {
            Some(patient.engine_note(h, NoteKind::AdmittedText, text.note_body()))
        }
        AtAdmission::Unchanged => None,
        AtAdmission::EditedNotReadmitted => {
            warn!(
                issue = number.0,
                "the issue was edited since it was admitted, and no person with the admission permission applied \
                 the admission label after the edit: the agents see the text as admitted"
            );
            None
        }
    })
}

fn precedent_lookup_body(found: &[Match<'_>]) -> String {
    if found.is_empty() {
        return "No precedent in the log matches this patient.".into();
    }
    let mut body = String::from("Precedents given to the agent, best first:\n");
    for m in found {
        body.push_str(&format!("- {} (score {:.2}): {}\n", m.entry.id, m.score, m.entry.question.trim()));
    }
    body
}
