//! Record: what a judgment does to the patient. The run's COST note always
//! goes first, then the judgment's notes, then the patient moves, all
//! through [`crate::transfer`]: notes durable before any label moves.

use anyhow::Context;
use tracing::{info, warn};

use super::judge::{Accepted, Judgment};
use super::patient::Patient;
use super::prepare::Prepared;
use super::result::{StageResult, Transition};
use super::visit::Visit;
use crate::agent::AgentEnd;
use crate::chart::{Note, NoteKind, Seen};
use crate::forge::StoredChart;
use crate::groundedness as g;
use crate::hospital::Hospital;
use crate::rules::approval::{self, AfterAudit};
use crate::rules::discharge_audit::{self, SchemaRecord};
use crate::transfer::{Move, transfer, transfer_telling};
use crate::workspace::bundle::Intake;
use crate::workspace::checkpoint::SchemaReading;
use crate::workspace::shared;
use crate::workspace::{TreatedSchema, Workspace};

pub async fn record(
    h: &Hospital,
    patient: &Patient<'_>,
    prepared: &Prepared,
    visit: &Visit,
    judgment: Judgment,
    mut workspace: Option<&mut Workspace>,
    committed: Option<&Intake>,
) -> anyhow::Result<StageResult> {
    let stage = patient.stage;
    let judgment = keep_or_discard(h, patient, visit, judgment, workspace.as_deref_mut()).await?;
    note_agent_health(h, patient, visit).await;
    let mut cost = crate::budget::cost_note(visit.usage.as_ref(), stage.name, &patient.run, h.now());
    if let Some(first) = visit.transcript.first() {
        // The agent's session log, which the patient's comment links.
        cost.body.push_str(&format!("\n{}{first} ({} files)", crate::budget::TRANSCRIPT_LINE, visit.transcript.len()));
    }
    // The run's bookkeeping: its COST, and a NETWORK note when the wall
    // refused the agent anything.
    let cost: Vec<Note> = std::iter::once(cost).chain(network_note(h, patient, visit)).collect();
    let seen = Seen::Read(prepared.stored.clone());
    match judgment {
        Judgment::OverBudget { breach, when } => {
            let mut notes = crate::budget::over_budget_notes(
                &h.config,
                stage.name,
                &patient.run,
                &breach,
                visit.usage.as_ref(),
                when,
                h.now(),
            );
            // Its COST note is among them.
            notes.retain(|n| n.kind != NoteKind::Cost);
            notes.splice(0..0, cost);
            let chief = h.config.chief_label().to_string();
            transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::To(chief.clone())).await?;
            Ok(refused(patient, breach.to_string(), Some(chief)))
        }
        Judgment::Invalid { reason } => {
            warn!(%reason, "invalid run");
            let body = format!(
                "The run of stage `{}` was invalid and the label stays at `{}`: {reason}\n\n\
                 What the agent wrote is kept in the run's artifacts (`notes.md`, `agent.stderr.log`).",
                stage.name, patient.label_in
            );
            let notes = then(cost, patient.engine_note(h, NoteKind::Refusal, body));
            transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::Stay).await?;
            write_run_json(
                patient,
                &serde_json::json!({"issue": patient.issue.number, "stage": stage.name, "run": patient.run,
                    "result": "invalid", "reason": reason}),
            );
            Ok(invalid(patient, reason))
        }
        Judgment::ServiceDown { reason } => {
            warn!(%reason, "the model service failed the run");
            let body = format!("{}: {reason}", crate::budget::SERVICE_DOWN);
            let notes = then(cost, patient.engine_note(h, NoteKind::Refusal, body));
            transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::Stay).await?;
            write_run_json(
                patient,
                &serde_json::json!({"issue": patient.issue.number, "stage": stage.name, "run": patient.run,
                    "result": "service-unavailable", "reason": reason}),
            );
            Ok(invalid(patient, reason))
        }
        Judgment::TurnedBack(refusal) => {
            warn!(%refusal, "run turned back");
            let notes = then(cost, patient.engine_note(h, NoteKind::Refusal, refusal.note_body()));
            let to = Move::from(&refusal.route);
            let moved = transfer(&*h.forge, &h.config, &patient.issue, seen, notes, to.clone()).await?;
            Ok(refused(patient, refusal.to_string(), (to != Move::Stay).then_some(moved.at).flatten()))
        }
        Judgment::Ungrounded { note, score, decision } => {
            ungrounded(h, patient, seen, then(cost, note), &score, decision).await
        }
        Judgment::Accepted(accepted) => {
            accept(h, patient, prepared, visit, *accepted, cost, Change { workspace, committed }).await
        }
    }
}

/// `notes` and then `note`.
fn then(mut notes: Vec<Note>, note: Note) -> Vec<Note> {
    notes.push(note);
    notes
}

/// The NETWORK note: the connections the wall refused, by host and port,
/// with how often (`blocked: example.org:443 ×3`).
fn network_note(h: &Hospital, patient: &Patient<'_>, visit: &Visit) -> Option<Note> {
    if visit.unwalled {
        let body = "The agent ran on the host's network, unwalled: .github/ward.yml says `agent.network: open` \
                    (the model key still stayed with ward)."
            .to_string();
        return Some(patient.engine_note(h, NoteKind::Network, body));
    }
    if visit.blocked.is_empty() {
        return None;
    }
    let line =
        visit.blocked.iter().map(|b| format!("{}:{} ×{}", b.host, b.port, b.count)).collect::<Vec<_>>().join(", ");
    let body = format!(
        "{}{line}\n\nThe network wall refused these connections of the agent: the hosts are not in \
         `agent.network.allow` (or the stage's `network.allow`) in .github/ward.yml.",
        crate::patient_comment::BLOCKED_LINE
    );
    Some(patient.engine_note(h, NoteKind::Network, body))
}

/// What a CHECKPOINT note says of a treatment whose data ward read: its
/// commit and the schema against the seed's export. `None` without a
/// commit to name.
pub(super) fn schema_record(treated: &TreatedSchema) -> Option<(String, SchemaRecord)> {
    const SHOWN: usize = 20;
    let commit = treated.commit.clone()?;
    let schema = match &treated.reading {
        SchemaReading::Unchanged => SchemaRecord::Unchanged,
        SchemaReading::Unknown(why) => SchemaRecord::Unknown(why.clone()),
        SchemaReading::Changed(changes) => {
            // The names come from a database the agent wrote: escaped, cut, a bounded few.
            let name = |o: &str| crate::untrusted::shown(&o.chars().take(120).collect::<String>().replace('`', "'"));
            let mut shown: Vec<String> =
                changes.iter().take(SHOWN).map(|c| format!("`{}` ({})", name(&c.object), c.how)).collect();
            if changes.len() > SHOWN {
                shown.push(format!("and {} more", changes.len() - SHOWN));
            }
            SchemaRecord::Changed(shown.join(", "))
        }
    };
    Some((commit, schema))
}

/// The CHECKPOINT note, which the discharge audit's migration check reads.
fn checkpoint_note(h: &Hospital, patient: &Patient<'_>, (commit, schema): &(String, SchemaRecord)) -> Note {
    patient.engine_note(h, NoteKind::Checkpoint, discharge_audit::checkpoint_body(commit, schema))
}

/// What the run changed is committed only for a treating stage's accepted
/// run; everything else is thrown away before any note is written. The
/// worktree is read again here, not taken from the visit: a change made
/// after the run was judged (a child the agent left behind) is never kept.
async fn keep_or_discard(
    h: &Hospital,
    patient: &Patient<'_>,
    visit: &Visit,
    judgment: Judgment,
    workspace: Option<&mut Workspace>,
) -> anyhow::Result<Judgment> {
    let (number, stage) = (patient.issue.number, patient.stage.name);
    let context = || format!("could not read or reset the worktree of issue {number}, stage `{stage}`");
    let treats = patient.stage.mode().treats();
    // What an accepted run would publish, scanned for credentials: its
    // notes (and the follow-ups in them), and a treatment's change.
    let judgment = match judgment {
        Judgment::Accepted(accepted) => {
            let added = match (&workspace, treats) {
                (Some(ws), true) => ws.added_lines().await.with_context(context)?,
                _ => Vec::new(),
            };
            match no_credentials(h, visit, &added)? {
                Ok(()) => Judgment::Accepted(accepted),
                Err(refusal) => Judgment::Invalid { reason: refusal.to_string() },
            }
        }
        judgment => judgment,
    };
    let Some(ws) = workspace else { return Ok(judgment) };
    let now = ws.changed_paths().await.with_context(context)?;
    // An agent that committed ward's own files (its lock, its runs): refused, nothing of it kept.
    let own = ws.ward_files_committed().await.with_context(context)?;
    let judgment = match (crate::rules::changes::no_ward_files(&own), judgment) {
        (Err(refusal), Judgment::Accepted(_)) => Judgment::Invalid { reason: refusal.to_string() },
        (_, judgment) => judgment,
    };
    let keeps = treats && matches!(judgment, Judgment::Accepted(_));
    if keeps && now == visit.changed {
        return Ok(judgment);
    }
    if !now.is_empty() || !own.is_empty() {
        ws.discard().await.with_context(context)?;
        info!(files = now.len(), "the run's changes were discarded");
    }
    if keeps {
        let reason = format!(
            "the worktree changed after the run was judged (it was judged on {} changed files, and {} are \
             changed now); a process the agent left behind may still be writing. Its changes were discarded.",
            visit.changed.len(),
            now.len()
        );
        return Ok(Judgment::Invalid { reason });
    }
    Ok(judgment)
}

/// The credentials in a run's notes and in the lines it `added` (see
/// [`crate::secrets::scan`]), as the refusal to post: file and line, never
/// the value.
pub(super) fn no_credentials(
    h: &Hospital,
    visit: &Visit,
    added: &[crate::workspace::added::Added],
) -> anyhow::Result<crate::rules::Verdict> {
    let notes = match &visit.notes {
        crate::stage::visit::AgentText::Text(notes) => Some(("the run's notes", notes.as_str())),
        _ => None,
    };
    let found = h.credentials_in(added, notes.as_slice())?;
    if !found.is_empty() {
        warn!(places = found.len(), "credentials found in what the run would publish; refused");
    }
    Ok(crate::rules::changes::no_credentials(&found))
}

/// Where an accepted run's change is: the worktree (one process), or the
/// visit's commits taken in by the record job.
struct Change<'a> {
    workspace: Option<&'a mut Workspace>,
    committed: Option<&'a Intake>,
}

/// A valid run: the change is proposed (treating stages), the notes are
/// charted, children are created, the audit merges, the patient moves.
async fn accept(
    h: &Hospital,
    patient: &Patient<'_>,
    prepared: &Prepared,
    visit: &Visit,
    accepted: Accepted,
    cost: Vec<Note>,
    change: Change<'_>,
) -> anyhow::Result<StageResult> {
    let Change { workspace, committed } = change;
    let (stage, number) = (patient.stage, patient.issue.number);
    let role = stage.config.role.as_str();
    // What the treatment's data did to the schema, as ward read it.
    let mut treated = None;
    if stage.mode().treats()
        && let Some(ws) = workspace
    {
        // The one place ward commits what an agent left: a treating
        // stage's accepted run (keep_or_discard threw away the rest).
        ws.commit_leftovers().await?;
        // The data the treatment left, for the patient's next stages. A
        // failed export keeps the change: the next stage starts from the
        // checkpoint before (or the seed), and the report says why.
        match ws.checkpoint().await {
            Ok(Some(saved)) => info!(checkpoint = %saved.display(), "the emulator's data was checkpointed"),
            Ok(None) => {}
            Err(e) => warn!("{e}"),
        }
        treated = ws.treated_schema().and_then(schema_record);
        propose(h, patient, ws).await?;
        super::local::propose(h, patient, ws).await?;
    }
    // The record job: the visit's commits (what the visit job committed)
    // are pushed from the record repository, for a treating stage's
    // accepted run only; any other run's commits are never pushed.
    if stage.mode().treats()
        && let Some(intake) = committed.filter(|i| i.head != i.start)
    {
        propose_visit(h, patient, intake).await?;
    }
    // ... and the emulator data it left, for the patient's next stages.
    if stage.mode().treats()
        && let Some(intake) = committed
        && let Some(sealed) = &intake.checkpoint
    {
        share_checkpoint(h, patient, intake, sealed)?;
        // The data the record job checked: the seed's export and the checkpoint.
        let seed = sealed.seed.as_ref().map(|s| s.data.as_slice());
        let reading = crate::workspace::checkpoint::read_schema(seed, &sealed.checkpoint.data);
        treated = schema_record(&TreatedSchema { commit: Some(sealed.commit().to_string()), reading });
    }
    // No data sealed: the visit job's reading, which intake checked names the head.
    if stage.mode().treats()
        && treated.is_none()
        && let Some(body) = committed.and_then(|i| i.schema.as_deref())
    {
        treated = discharge_audit::read_checkpoint(body).map(|(commit, schema)| (commit.to_string(), schema));
    }
    let Accepted { notes, outcome, overruled, groundedness, audit, protected } = accepted;
    let mut batch = cost;
    if h.config.discharge.migrations.is_some() {
        batch.extend(treated.as_ref().map(|t| checkpoint_note(h, patient, t)));
    }
    batch.extend(groundedness);
    if !protected.is_empty() {
        batch.push(patient.engine_note(h, NoteKind::ProtectedChange, protected_body(h, &protected)));
    }
    batch.extend(notes.notes.iter().map(|d| patient.note(h, d.kind, role, d.body.clone())));
    batch.extend(overruled.map(|why| patient.engine_note(h, NoteKind::DischargeChecklist, why)));
    batch.push(patient.note(h, NoteKind::Outcome, role, outcome.clone()));
    let mut stored =
        crate::chart::append(&*h.forge, &h.sentinels, number, Seen::Read(prepared.stored.clone()), &batch).await?;
    stored = file_follow_ups(h, patient, stored).await;

    // A decomposition: its children exist before the parent starts waiting.
    let mut label_out = stage.config.outcomes[&outcome].clone();
    if label_out == h.config.decomposition.waiting_label
        && let Some(note) = notes.notes.iter().rfind(|n| n.kind == NoteKind::Decomposition)
    {
        let children = crate::rules::decomposition::parse_children(&note.body)
            .map_err(|p| anyhow::anyhow!("a validated decomposition became unreadable: {}", p.join("; ")))?;
        let created = crate::family::create_children(&*h.forge, &h.config, number, &children).await?;
        info!(children = created.len(), "decomposition");
    }
    // A passed audit lands, or waits for a chief in human approval mode.
    let discharged = &h.config.discharge.discharged_label;
    let mut audited = None;
    if let Some((facts, checklist)) = &audit
        && label_out == *discharged
    {
        match approval::after_audit(&h.config, &prepared.chart, checklist.passed()) {
            AfterAudit::Merge => audited = Some(facts),
            AfterAudit::AwaitChief(label) => label_out = label,
            AfterAudit::SendBack => anyhow::bail!("the audit failed but the outcome is `{outcome}`"),
        }
    }
    let seen = Seen::Read(stored);
    let moved = match audited {
        Some(facts) => {
            let landed = super::landing::land(h, patient, seen, Vec::new(), facts).await?;
            label_out = landed.label;
            landed.moved
        }
        None if label_out == *discharged => super::landing::discharge(h, patient, seen, Vec::new()).await?.moved,
        None => {
            let to = Move::To(label_out.clone());
            transfer_telling(&*h.forge, &h.config, &patient.issue, seen, Vec::new(), to, &patient.tell(h)).await?
        }
    };
    let total = patient.started.elapsed();
    let agent = std::time::Duration::from_millis(visit.agent_ms);
    let t = Transition {
        issue: number,
        stage: stage.name.into(),
        role: role.into(),
        run: patient.run.clone(),
        outcome,
        from: patient.label_in.clone(),
        // Where the patient is: a held patient's move waits at the hold label.
        to: moved.at.clone().unwrap_or(label_out),
        dispatched: moved.dispatched,
        told: moved.told,
        total_ms: total.as_millis(),
        agent_ms: agent.as_millis(),
        engine_us: total.saturating_sub(agent).as_micros(),
        artifacts: patient.folder.clone(),
    };
    info!(outcome = %t.outcome, to = %t.to, total_ms = t.total_ms, "label moved");
    write_run_json(patient, &serde_json::to_value(&t).unwrap_or_default());
    Ok(StageResult::Moved(t))
}

/// Files the follow-ups the chart's notes name and charts what was filed.
/// Filing is a service to people, not a step of the patient's treatment:
/// a failure is logged and the next valid run of the patient files them.
pub(super) async fn file_follow_ups(
    h: &Hospital,
    patient: &Patient<'_>,
    stored: Option<StoredChart>,
) -> Option<StoredChart> {
    let number = patient.issue.number;
    let filed = async {
        let Some(chart) = &stored else { return Ok(None) };
        let notes = h.sentinels.parse_chart(&chart.text)?;
        let Some(body) = crate::followups::file(&*h.forge, &h.config, number, &notes).await? else {
            return Ok(None);
        };
        let note = patient.engine_note(h, NoteKind::FollowUp, body);
        let seen = Seen::Read(stored.clone());
        anyhow::Ok(Some(crate::chart::append(&*h.forge, &h.sentinels, number, seen, &[note]).await?))
    };
    match filed.await {
        Ok(Some(newer)) => newer,
        Ok(None) => stored,
        Err(e) => {
            warn!("could not file the follow-ups of {number}; the next run files them: {e:#}");
            stored
        }
    }
}

/// The PROTECTED_CHANGE note: which protected paths changed, and that a
/// person approves this patient's merge.
fn protected_body(h: &Hospital, paths: &[String]) -> String {
    let listed: String = paths.iter().map(|p| format!("- `{}`\n", p.escape_debug())).collect();
    format!(
        "This treatment changed protected paths, as the approved plan lists them:\n\n{listed}\n\
         This patient is now in human approval mode: after a passed audit it waits at `{}` until a person with \
         {} permission applies `{}`.",
        h.config.discharge.awaiting_label,
        format!("{:?}", h.config.discharge.approver_permission).to_lowercase(),
        h.config.discharge.approved_label
    )
}

/// A treating stage proposes its change: the branch is pushed and a pull
/// request opened (or, by the push, updated). GitHub mode only.
async fn propose(h: &Hospital, patient: &Patient<'_>, ws: &Workspace) -> anyhow::Result<()> {
    let Some(plan) = h.workspace_plan()? else { return Ok(()) };
    let Some(target) = &plan.push else { return Ok(()) };
    if !ws.push(target).await? {
        return Ok(());
    }
    let changed = ws.changed_paths().await.unwrap_or_default();
    open_pull(h, patient, &ws.branch.name, &plan.base, &changed).await
}

/// The record job shares an accepted treatment's emulator data: the
/// patient's checkpoint ref, forced with a lease. A push that fails keeps
/// the change (the next stage starts from the checkpoint before, or the
/// seed), as a failed export does in one process.
fn share_checkpoint(
    h: &Hospital,
    patient: &Patient<'_>,
    intake: &Intake,
    sealed: &shared::Sealed,
) -> anyhow::Result<()> {
    let Some(target) = super::landing::shared_target(h)? else { return Ok(()) };
    let number = patient.issue.number;
    let stages = h.config.stages().filter_map(|s| s.config.emulator.as_ref());
    let keep = h.config.emulator.iter().chain(stages).filter_map(|e| e.checkpoint()).map(|c| c.keep).max();
    let sealed = sealed.clone().capped(keep.unwrap_or_default(), chrono::Utc::now());
    match shared::push(&intake.bare, &sealed, number.0, &target.url, target.token.as_deref()) {
        Ok(commit) => info!(%commit, data = %sealed.commit(), "the emulator's data was shared"),
        Err(e) => warn!(
            "could not share the emulator data of {number} as `{}`: {e}; its next stage starts from the checkpoint \
             before, or the seed",
            shared::ref_name(number.0)
        ),
    }
    Ok(())
}

/// The pull request of a pushed treatment (or, by the push, updated), and its CI.
/// `changed`: the files the treatment changed, whose CODEOWNERS review it.
async fn open_pull(
    h: &Hospital,
    patient: &Patient<'_>,
    branch: &str,
    base: &str,
    changed: &[String],
) -> anyhow::Result<()> {
    let number = patient.issue.number;
    let new = crate::forge::NewPullRequest {
        head_branch: branch.to_string(),
        base_branch: base.to_string(),
        title: format!("{} ({number})", patient.issue.title),
        body: pull_request_body(h, patient),
    };
    let pr =
        h.forge.open_pull_request(new).await.with_context(|| format!("could not open the pull request of {number}"))?;
    info!(pull = pr.number, "pull request open");
    ask_for_reviews(h, &pr, changed).await;
    start_ci(h, branch).await;
    Ok(())
}

/// The record job proposes the visit's commits: pushed to `ward/issue-N`
/// from the fresh repository they were taken into, then the pull request.
async fn propose_visit(h: &Hospital, patient: &Patient<'_>, intake: &Intake) -> anyhow::Result<()> {
    let Some(plan) = h.workspace_plan()? else { return Ok(()) };
    let Some(target) = &plan.push else { return Ok(()) };
    let number = patient.issue.number;
    let branch = crate::workspace::worktree::branch_name(number.0);
    crate::workspace::bundle::push(intake, &target.url, &branch, target.token.as_deref())
        .with_context(|| format!("could not push the visit's commits of {number} to `{branch}`"))?;
    open_pull(h, patient, &branch, &plan.base, &intake.changed).await
}

/// The treatment pull request's body: what it closes, the approved plan's
/// summary (its first paragraphs, at most [`PLAN_EXCERPT_BYTES`], fenced:
/// an agent wrote it), and where the plan review and the code review are.
fn pull_request_body(h: &Hospital, patient: &Patient<'_>) -> String {
    let number = patient.issue.number;
    let mut body =
        format!("Closes {number}.\n\nTreated by ward, stage `{}`, run `{}`.\n", patient.stage.name, patient.run);
    let chart = &patient.chart;
    if let Some((plan, review)) = crate::prompt::approved_plan(chart) {
        let (plan, review) = (&chart[plan], &chart[review]);
        let mut summary = String::new();
        for paragraph in plan.body.trim().split("\n\n") {
            if !summary.is_empty() && summary.len() + paragraph.len() > PLAN_EXCERPT_BYTES {
                break;
            }
            summary.push_str(paragraph);
            summary.push_str("\n\n");
        }
        let summary = crate::untrusted::cut(summary.trim(), PLAN_EXCERPT_BYTES, "the whole plan is in the chart");
        let fenced = crate::untrusted::fence(&crate::untrusted::escape_controls(&summary), "text");
        body.push_str(&format!(
            "\n### The approved plan ({}, run `{}`; written by an agent)\n\n{fenced}\n\nApproved by the plan \
             review of run `{}` (PLAN_REVIEW).\n",
            plan.kind, plan.meta.run, review.meta.run
        ));
    }
    let chart_link = match crate::patient_comment::Links::from_env().repository {
        Some(repo) => format!("[charts/{n}.md]({repo}/blob/{}/charts/{n}.md)", h.config.charts_branch, n = number.0),
        None => format!("`charts/{}.md` on `{}`", number.0, h.config.charts_branch),
    };
    body.push_str(&format!(
        "\nThe plan review, and the code review of this pull request once it is done (CODE_REVIEW), are in the \
         chart: {chart_link}.\n"
    ));
    body
}

/// Asks for reviews: `reviewers:` of ward.yml, else the CODEOWNERS owners
/// of the files this treatment changed (never the pull request's author:
/// GitHub refuses that). A request that fails is logged, not fatal.
async fn ask_for_reviews(h: &Hospital, pr: &crate::forge::PullRequest, changed: &[String]) {
    let (users, teams) = if h.config.reviewers.is_empty() {
        crate::codeowners::reviewers_for(&crate::codeowners::load(&h.root), changed, &pr.author)
    } else {
        let (teams, users): (Vec<&String>, Vec<&String>) =
            h.config.reviewers.iter().filter(|r| !r.eq_ignore_ascii_case(&pr.author)).partition(|r| r.contains('/'));
        let slug = |t: &String| t.split_once('/').map_or(t.clone(), |(_, s)| s.to_string());
        (users.into_iter().cloned().collect(), teams.into_iter().map(slug).collect())
    };
    if users.is_empty() && teams.is_empty() {
        return;
    }
    match h.forge.request_reviewers(pr.number, &users, &teams).await {
        Ok(()) => info!(?users, ?teams, "reviews requested"),
        Err(e) => tracing::warn!(error = %e, "could not request reviews (the pull request stands)"),
    }
}

/// The most of the approved plan a pull request's body quotes, in bytes.
const PLAN_EXCERPT_BYTES: usize = 1500;

/// A push with the workflow token starts no workflow, so the repository's
/// CI (`ci.workflows`) is started on the branch with `workflow_dispatch`,
/// whose check runs attach to the pushed head. With an app token
/// (`dispatch: label`) the push started CI by itself. A CI that cannot be
/// started is logged, not fatal: the push and the pull request stand, and
/// the discharge audit waits for CI and says it never started.
async fn start_ci(h: &Hospital, branch: &str) {
    if h.config.dispatch != crate::config::DispatchMode::RepositoryDispatch {
        return;
    }
    for workflow in &h.config.ci.workflows {
        match h.forge.start_workflow(workflow, branch).await {
            Ok(()) => info!(%workflow, %branch, "CI started"),
            Err(e) => warn!(
                "could not start CI workflow `{workflow}` on `{branch}`: {e}; the discharge audit will wait for CI \
                 that never starts: check `ward doctor` and the job's `actions: write` permission"
            ),
        }
    }
}

/// An ungrounded run: the label stays and the stage runs once more, or,
/// when a rerun was already ungrounded, the patient goes to the chiefs.
async fn ungrounded(
    h: &Hospital,
    patient: &Patient<'_>,
    seen: Seen,
    mut notes: Vec<Note>,
    score: &g::Score,
    decision: g::Decision,
) -> anyhow::Result<StageResult> {
    let stage = patient.stage;
    let chief = h.config.chief_label().to_string();
    let reason = format!("its notes are not grounded (score {score}; see the GROUNDEDNESS note)");
    if decision == g::Decision::Rerun {
        let body = format!(
            "The run of stage `{}` was invalid: {reason}. The stage runs once more; the label stays.",
            stage.name
        );
        notes.push(patient.engine_note(h, NoteKind::Refusal, body));
        transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::Rerun).await?;
        return Ok(invalid(patient, reason));
    }
    let body = format!(
        "Stage `{}` ran twice and both runs were ungrounded ({reason}). Moved to `{chief}`.\n\n\
         What to do: read the GROUNDEDNESS notes, then take over, or {}.",
        stage.name,
        h.config.readmit_hint()
    );
    notes.push(patient.engine_note(h, NoteKind::Escalation, body));
    transfer(&*h.forge, &h.config, &patient.issue, seen, notes, Move::To(chief.clone())).await?;
    Ok(refused(patient, reason, Some(chief)))
}

/// Only failures cost calls; the sweep sees successes as patients moving.
async fn note_agent_health(h: &Hospital, patient: &Patient<'_>, visit: &Visit) {
    if visit.end == AgentEnd::Exited(0) {
        return;
    }
    let run = crate::state::AgentRun {
        issue: patient.issue.number,
        stage: patient.stage.name.into(),
        run: patient.run.clone(),
        ok: false,
        at: h.now(),
    };
    if let Err(e) = crate::state::record_agent_run(&*h.forge, run).await {
        warn!("could not record the agent's failure for the sweep: {e}");
    }
}

fn refused(patient: &Patient<'_>, reason: String, to: Option<String>) -> StageResult {
    StageResult::Refused { issue: patient.issue.number, stage: patient.stage.name.into(), reason, to, locked: false }
}

fn invalid(patient: &Patient<'_>, reason: String) -> StageResult {
    StageResult::Invalid {
        issue: patient.issue.number,
        stage: patient.stage.name.into(),
        run: patient.run.clone(),
        reason,
        artifacts: patient.folder.clone(),
    }
}

fn write_run_json(patient: &Patient<'_>, value: &serde_json::Value) {
    let path = patient.folder.join("run.json");
    if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(value).unwrap_or_default()) {
        warn!("could not write {}: {e}", path.display());
    }
}
