//! Treat: the agent runs, with the environment, time limit and budget the
//! engine enforces, and what it produced is sealed into the run's folder as
//! a [`Visit`]. What comes after reads the visit back, never the agent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};

use super::patient::Patient;
use super::prepare::Prepared;
use super::visit::{NOTES_FILE, STDOUT_FILE, Visit};
use super::watch::{POLL, Stop};
use crate::agent::gate::{Gate, ModelRoute};
use crate::agent::home::{Area, Setup};
use crate::agent::report::ModelTrouble;
use crate::agent::{self, AgentEnd, AgentSpec};
use crate::config::agents::{Gateway, ModelApi, Output, Preset};
use crate::config::network::Network;
use crate::hospital::Hospital;
use crate::workspace::{Cancel, Workspace};

/// Runs the agent and seals its visit. `command` replaces `agent.command`
/// for this run (scripted scenarios).
pub async fn treat(
    h: &Hospital,
    patient: &Patient<'_>,
    prepared: &Prepared,
    command: Option<Vec<String>>,
    slot: Option<&Workspace>,
) -> anyhow::Result<Visit> {
    let stage = patient.stage;
    let preset = h.config.agent.applied.as_ref().map(|a| a.preset);
    let frame = Frame {
        who: format!("issue {}, stage `{}`", patient.issue.number, stage.name),
        folder: &patient.folder,
        workdir: &prepared.workdir,
        prompt_file: &prepared.prompt_file,
        network: network(h, patient),
        time_limit: stage.config.time_limit,
        env: agent_env(h, patient, prepared).into_iter().chain(prepared.emulator_env.iter().cloned()).collect(),
        emulator_ports: &prepared.emulator_ports,
    };
    // The walls: the model key stays with ward (its proxy), and the agent
    // runs in a network of its own unless ward.yml says `network: open`.
    let routes = preset.map(|p| model_routes(h, p)).unwrap_or_default();
    let gate = open_gate(h, &frame, &routes).await?;
    let spec = agent_spec(h, &frame, command, gate.as_ref(), &routes)?;
    info!(command = ?spec.command.first(), "agent starts");
    // The engine enforces the run's dollars while it goes and stops a run
    // the model refuses (the wall clock is crate::agent's); dropping the
    // agent's future kills its process group.
    let budget = &h.config.departments.budget;
    let output = preset.map_or(Output::Opaque, |p| p.output);
    let stdout = patient.folder.join(STDOUT_FILE);
    let watch = super::watch::watch(&stdout, budget, output, stage.config.time_limit + Duration::from_secs(60), POLL);
    let in_workspace = slot.is_some();
    let run_agent = async {
        if !in_workspace {
            return agent::run(&spec).await.map_err(anyhow::Error::from);
        }
        // A signal (a cancelled Actions job) ends the agent; the caller still tears the workspace down.
        Cancel::process()?
            .guard(agent::run(&spec))
            .await
            .with_context(|| {
                format!(
                    "stage `{}` of issue {} was cancelled by a signal while the agent ran; no label moved",
                    stage.name, patient.issue.number
                )
            })?
            .map_err(anyhow::Error::from)
    };
    let started = std::time::Instant::now();
    let (end, stop) = tokio::select! {
        exit = run_agent => (exit?.end, None),
        stop = watch => (AgentEnd::Signalled(libc::SIGKILL), Some(stop)),
    };
    let agent_ms = started.elapsed().as_millis() as u64;
    let blocked = gate.as_ref().map(|g| g.blocked()).unwrap_or_default();
    drop(gate);
    if !blocked.is_empty() {
        warn!(blocked = %agent::gate::describe(&blocked), "the network wall refused the agent's connections");
    }
    info!(agent_ms, ?end, "agent ended");
    let (stopped, refused) = match stop {
        Some(Stop::Budget(breach, _)) => {
            warn!(%breach, "budget reached; the agent was stopped");
            (Some(breach), None)
        }
        Some(Stop::Refused(error)) => {
            warn!(error = %error.describe(), "the model refused the agent's requests; the agent was stopped");
            (None, Some(error))
        }
        None => (None, None),
    };
    let transcript = leave_area(&spec.area, &patient.folder, preset)?;
    let report = crate::agent::report::read(output, &Visit::stdout_tail(&patient.folder));
    let model = ModelTrouble::after(&end, refused, &report);
    // What the run changed is read now, by ward; nothing of it is committed
    // before it is judged (record commits a treating stage's accepted run,
    // and discards everything else).
    let changed = match slot {
        Some(ws) => ws.changed_paths().await.with_context(|| {
            format!(
                "could not read what the agent changed in the worktree of issue {}, stage `{}`",
                patient.issue.number, stage.name
            )
        })?,
        None => Vec::new(),
    };
    let diff_lines = match slot {
        Some(ws) if stage.mode().treats() && !changed.is_empty() => ws.diff_lines().await.with_context(|| {
            format!(
                "could not count the lines the agent changed in the worktree of issue {}, stage `{}`",
                patient.issue.number, stage.name
            )
        })?,
        _ => 0,
    };
    let visit = Visit {
        issue: patient.issue.number,
        stage: stage.name.into(),
        run: patient.run.clone(),
        label_in: patient.label_in.clone(),
        end,
        agent_ms,
        stopped,
        usage: usage(&stdout, budget),
        commit: None,
        changed,
        start: slot.map(|ws| ws.start().to_string()),
        diff_lines,
        model,
        gave_up: report.gave_up,
        transcript,
        unwalled: network(h, patient).is_open(),
        blocked: blocked
            .into_iter()
            .map(|((host, port), count)| super::visit::BlockedConnection { host, port, count })
            .collect(),
        notes: Default::default(),
        stderr_tail: String::new(),
    };
    visit.seal(&patient.folder)?;
    Ok(Visit::open(&patient.folder)?)
}

/// One agent run, whoever starts it: a patient's visit, or a department's
/// run of its role (the research department's, `crate::research::policy`).
/// What the walls, the private HOME and the environment are made from.
pub(crate) struct Frame<'a> {
    /// Whose run, for sentences: "issue 3, stage `treat`".
    pub who: String,
    /// The run's folder: the agent's area and logs.
    pub folder: &'a Path,
    pub workdir: &'a Path,
    pub prompt_file: &'a Path,
    pub network: Network,
    pub time_limit: Duration,
    /// ward's own variables (`WARD_*`) and the emulator's: the agent's environment only.
    pub env: Vec<(String, String)>,
    /// The emulator's ports on 127.0.0.1, relayed into the wall.
    pub emulator_ports: &'a [u16],
}

/// What a department's run of its role ended with (a patient's is sealed
/// as a [`Visit`] instead).
#[derive(Debug)]
pub(crate) struct Ran {
    pub end: AgentEnd,
    /// The budget stopped it mid-run.
    pub stopped: Option<crate::budget::Breach>,
}

/// Runs an agent in `frame` as a stage runs one: the same walls, gate,
/// private HOME, time limit and budget watch, for a department's role
/// (no patient, no visit). Its notes are left at `<folder>/notes.md`.
pub(crate) async fn run_framed(h: &Hospital, frame: &Frame<'_>, command: Option<Vec<String>>) -> anyhow::Result<Ran> {
    let preset = h.config.agent.applied.as_ref().map(|a| a.preset);
    let routes = preset.map(|p| model_routes(h, p)).unwrap_or_default();
    let gate = open_gate(h, frame, &routes).await?;
    let spec = agent_spec(h, frame, command, gate.as_ref(), &routes)?;
    info!(who = %frame.who, command = ?spec.command.first(), "agent starts");
    let budget = &h.config.departments.budget;
    let output = preset.map_or(Output::Opaque, |p| p.output);
    let stdout = frame.folder.join(STDOUT_FILE);
    let watch = super::watch::watch(&stdout, budget, output, frame.time_limit + Duration::from_secs(60), POLL);
    let started = std::time::Instant::now();
    let (end, stop) = tokio::select! {
        exit = agent::run(&spec) => (exit?.end, None),
        stop = watch => (AgentEnd::Signalled(libc::SIGKILL), Some(stop)),
    };
    let agent_ms = started.elapsed().as_millis() as u64;
    drop(gate);
    leave_area(&spec.area, frame.folder, preset)?;
    let stopped = match stop {
        Some(Stop::Budget(breach, _)) => Some(breach),
        _ => None,
    };
    info!(who = %frame.who, agent_ms, ?end, "agent ended");
    Ok(Ran { end, stopped })
}

/// The agent's command, environment and area for this run, with the gate's
/// side of the walls (its loopback URLs, the placeholder key, the proxy).
fn agent_spec(
    h: &Hospital,
    frame: &Frame<'_>,
    command: Option<Vec<String>>,
    gate: Option<&Gate>,
    routes: &[(ModelRoute, ModelApi)],
) -> anyhow::Result<AgentSpec> {
    let preset = h.config.agent.applied.as_ref().map(|a| a.preset);
    let gateway = match (gate, preset) {
        (Some(g), Some(p)) if p.gateway == Gateway::CodexConfig && !routes.is_empty() => g.model_urls.first().cloned(),
        _ if !routes.is_empty() => None,
        _ => gateway_url(h, preset),
    };
    let setup = match preset {
        Some(p) => Setup::for_preset(p, std::env::var_os("HOME").map(PathBuf::from), gateway.as_deref()),
        None => Setup::default(),
    };
    let area = Area::make_at(Area::for_agent(frame.folder, frame.workdir, preset), &setup)?;
    git_identity(h, &area)?;
    if let Some(p) = preset {
        let notes = (!p.shell).then_some(crate::agent::home::NOTES_IN_WORKTREE_IGNORED);
        exclude_scratch(frame.workdir, p.scratch.iter().copied().chain(notes));
    }
    let wall = gate
        .filter(|_| !frame.network.is_open())
        .map(|g| agent::Walled { relays: g.relays.clone(), mounts: wall_mounts(h, frame.workdir, &area) });
    Ok(AgentSpec {
        command: command.unwrap_or_else(|| h.config.agent.command.clone()),
        workdir: frame.workdir.to_path_buf(),
        // The emulator's variables go to the agent's environment and nowhere else.
        env: frame.env.clone(),
        // The keys ward keeps never pass, whatever `pass_env` says.
        pass_env: h
            .config
            .agent
            .pass_env
            .iter()
            .filter(|v| !routes.iter().any(|(_, api)| api.keys.contains(&v.as_str())))
            .cloned()
            .collect(),
        fixed_env: preset
            .map(|p| preset_env(p, &area, gateway.as_deref()))
            .unwrap_or_default()
            .into_iter()
            .chain(gate.map(|g| wall_env(g, routes)).unwrap_or_default())
            .collect(),
        area,
        prompt_file: frame.prompt_file.to_path_buf(),
        artifacts: frame.folder.to_path_buf(),
        time_limit: frame.time_limit,
        ward_exe: h.ward_exe.clone(),
        wall,
    })
}

/// A git identity in the agent's private HOME (`.gitconfig`), ward's
/// commit identity, for what the repository does not set: a CLI that finds
/// none writes one into the repository's shared `.git/config` (aider's
/// "Your Name"), which the walls keep read-only.
fn git_identity(h: &Hospital, area: &Area) -> anyhow::Result<()> {
    let file = area.home.join(".gitconfig");
    if file.symlink_metadata().is_ok() {
        return Ok(());
    }
    let who = h.workspace.as_ref().ok().and_then(|p| p.as_ref()).map(|p| p.identity.clone()).unwrap_or_default();
    let quoted = |v: &str| v.replace(['\\', '"', '\n'], " ");
    let text = format!("[user]\n\tname = \"{}\"\n\temail = \"{}\"\n", quoted(&who.name), quoted(&who.email));
    std::fs::write(&file, text)
        .with_context(|| format!("could not write the agent's git identity into {}", file.display()))
}

/// What the walls hide from the agent and what alone it may write: its
/// worktree and the parts of git it commits through, its private HOME and
/// temp folder, the folders in /tmp its CLI writes by name (the preset's
/// `tmp_dirs`), and ward.yml's `agent.writable` (relative to the
/// repository's top); each canonical, a missing one left out (the rest of
/// the system is read-only behind the wall).
fn wall_mounts(h: &Hospital, workdir: &Path, area: &Area) -> agent::wall::Mounts {
    let hide = if h.config.agent.docker {
        Vec::new()
    } else {
        agent::wall::DOCKER_SOCKETS.iter().map(PathBuf::from).collect()
    };
    let canonical = |p: &Path| p.canonicalize().ok();
    let workdir = canonical(workdir).unwrap_or_else(|| workdir.to_path_buf());
    let (git_write, read_only) = agent::wall::git_paths(&workdir);
    let mut write = vec![workdir];
    write.extend(git_write);
    write.extend(canonical(&area.root));
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() }.to_string();
    let preset = h.config.agent.applied.as_ref().map(|a| a.preset);
    for dir in preset.map(|p| p.tmp_dirs).unwrap_or_default() {
        let dir = PathBuf::from(dir.replace("{uid}", &uid));
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => warn!(dir = %dir.display(), error = %e, "could not make the agent's folder in /tmp"),
        }
        // Only a folder of this user's own (another user's, or a link put
        // there, would make what it leads to writable for the agent).
        use std::os::unix::fs::MetadataExt;
        match dir.symlink_metadata() {
            Ok(m) if m.is_dir() && m.uid().to_string() == uid => write.push(dir),
            Ok(_) => warn!(dir = %dir.display(), "not a folder of ward's own user; the agent cannot write it"),
            Err(_) => {}
        }
    }
    for path in &h.config.agent.writable {
        match canonical(&h.root.join(path)) {
            Some(p) => write.push(p),
            None => info!(path, "agent.writable names a path that does not exist; the agent cannot write it"),
        }
    }
    let read_only = read_only.iter().filter_map(|p| canonical(p)).collect();
    agent::wall::Mounts { hide, write, read_only }
}

/// After the agent: its notes moved to where the visit reads them, its
/// session logs kept with the run, and its private HOME and temp folder
/// removed (whatever it left running was killed already). Returns the
/// session logs kept.
fn leave_area(area: &Area, folder: &Path, preset: Option<&Preset>) -> anyhow::Result<Vec<String>> {
    let notes = folder.join(NOTES_FILE);
    let _ = std::fs::remove_file(&notes);
    // A link would make ward read what it points at: only a plain file moves
    // (copied when it lies on another file system, the worktree's).
    if area.notes.symlink_metadata().is_ok_and(|m| m.is_file()) {
        let moved = std::fs::rename(&area.notes, &notes)
            .or_else(|_| std::fs::copy(&area.notes, &notes).and_then(|_| std::fs::remove_file(&area.notes)));
        moved.with_context(|| format!("could not move the agent's notes from {}", area.notes.display()))?;
    }
    let kept = preset.map(|p| area.keep_transcripts(folder, p.transcripts)).unwrap_or_default();
    area.remove();
    Ok(kept)
}

/// The stage's network: the agent's, with the stage's allowlist in its place.
fn network(h: &Hospital, patient: &Patient<'_>) -> Network {
    match (&h.config.agent.network, &patient.stage.config.network) {
        (Network::Walled(_), Some(allow)) => Network::Walled(allow.clone()),
        (n, _) => n.clone(),
    }
}

/// The preset's model APIs whose key ward's environment holds: where ward
/// forwards (ward.yml's `agent.base_url`, else the job's variable, else
/// the API's own endpoint) and the key it adds.
fn model_routes(h: &Hospital, preset: &Preset) -> Vec<(ModelRoute, ModelApi)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let mut gateway = h.config.agent.base_url.clone();
    preset
        .apis
        .iter()
        .filter_map(|api| {
            let key = api.keys.iter().find_map(|k| var(k))?;
            let upstream = gateway
                .take()
                .or_else(|| api.base.iter().find_map(|b| var(b)))
                .unwrap_or_else(|| api.default_url.to_string());
            Some((ModelRoute { style: api.style, upstream, key }, *api))
        })
        .collect()
}

/// The gate for this run: behind the wall (probed first: where this system
/// cannot make one, the run is refused unless ward.yml says
/// `agent.network: open`), or only the model proxy on the host's loopback.
async fn open_gate(h: &Hospital, frame: &Frame<'_>, routes: &[(ModelRoute, ModelApi)]) -> anyhow::Result<Option<Gate>> {
    let network = &frame.network;
    let models: Vec<ModelRoute> = routes.iter().map(|(r, _)| r.clone()).collect();
    if network.is_open() {
        warn!("agent.network is `open`: the agent runs on the host's network, unwalled");
        if models.is_empty() {
            return Ok(None);
        }
        let gate = Gate::open(models).await.context("could not start ward's model proxy on 127.0.0.1")?;
        return Ok(Some(gate));
    }
    if let Err(why) = agent::wall::probe(&h.ward_exe).await {
        anyhow::bail!(
            "ward cannot wall the agent of {}, on this system: {why}. Run ward where it may \
             create user and network namespaces (on Ubuntu 24.04, AppArmor restricts them: run ward with sudo, or \
             allow them with `sysctl kernel.apparmor_restrict_unprivileged_userns=0`), or set `agent.network: open` \
             in .github/ward.yml to run the agent unwalled",
            frame.who
        );
    }
    let gate = Gate::walled(&std::env::temp_dir(), models, network.allow().to_vec(), frame.emulator_ports)
        .await
        .context("could not start the network wall's proxies (their sockets go in ward's temp folder)")?;
    Ok(Some(gate))
}

/// The agent's side of the gate: a placeholder in every key variable, ward's
/// loopback URL in every endpoint variable, the egress proxy for every tool
/// that reads the proxy variables (loopback excepted).
fn wall_env(gate: &Gate, routes: &[(ModelRoute, ModelApi)]) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for ((_, api), url) in routes.iter().zip(&gate.model_urls) {
        env.extend(api.keys.iter().map(|k| (k.to_string(), agent::gate::PLACEHOLDER_KEY.to_string())));
        env.extend(api.base.iter().map(|b| (b.to_string(), url.clone())));
    }
    if !gate.proxy_url.is_empty() {
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy"] {
            env.push((name.to_string(), gate.proxy_url.clone()));
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.push((name.to_string(), "127.0.0.1,localhost,::1".to_string()));
        }
    }
    env
}

/// The gateway's URL: ward.yml's `agent.base_url`, else the variable the
/// job sets for the preset's CLI.
fn gateway_url(h: &Hospital, preset: Option<&Preset>) -> Option<String> {
    let from_job = || preset.and_then(|p| std::env::var(p.gateway.variable()).ok()).filter(|v| !v.trim().is_empty());
    h.config.agent.base_url.clone().or_else(from_job)
}

/// The preset's own variables: its settings (`{home}` the private HOME),
/// what it needs as root, and the gateway where its CLI reads one from the
/// environment.
fn preset_env(preset: &Preset, area: &Area, gateway: Option<&str>) -> Vec<(String, String)> {
    let home = area.home.to_string_lossy();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut env: Vec<(String, String)> =
        preset.env.iter().map(|(k, v)| (k.to_string(), v.replace("{home}", &home))).collect();
    if root {
        env.extend(preset.as_root.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    }
    if let (Gateway::Env(names), Some(url)) = (preset.gateway, gateway) {
        env.extend(names.iter().map(|n| (n.to_string(), url.to_string())));
    }
    env
}

/// Tells git to ignore what the agent's CLI writes into the worktree for
/// itself (aider's repository map cache), so it is never taken for a
/// change. The repository's `info/exclude` is shared by its worktrees.
fn exclude_scratch<'a>(worktree: &Path, scratch: impl Iterator<Item = &'a str>) {
    let scratch: Vec<&str> = scratch.collect();
    if scratch.is_empty() {
        return;
    }
    let Ok(repo) = git2::Repository::open(worktree) else { return };
    let file = repo.commondir().join("info/exclude");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let missing: Vec<&str> = scratch.iter().copied().filter(|p| !text.lines().any(|l| l.trim() == *p)).collect();
    if missing.is_empty() {
        return;
    }
    let mut text = text;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# what agents' CLIs write for themselves (ward)\n");
    for p in missing {
        text.push_str(p);
        text.push('\n');
    }
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&file, text) {
        warn!(file = %file.display(), error = %e, "could not tell git to ignore the agent's scratch files");
    }
}

/// What the agent's output says it spent.
fn usage(stdout: &Path, budget: &crate::config::BudgetConfig) -> Option<crate::budget::Usage> {
    let text = std::fs::read(stdout).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    crate::budget::parse_usage(&text, budget)
}

/// ward's own variables in the agent's environment.
fn agent_env(h: &Hospital, patient: &Patient<'_>, prepared: &Prepared) -> Vec<(String, String)> {
    let stage = patient.stage;
    [
        ("WARD_ISSUE", patient.issue.number.0.to_string()),
        ("WARD_STAGE", stage.name.to_string()),
        ("WARD_MODE", stage.mode().to_string()),
        ("WARD_ROLE", stage.config.role.clone()),
        ("WARD_RUN", patient.run.clone()),
        ("WARD_PROMPT", prepared.prompt_file.display().to_string()),
        ("WARD_WORKTREE", prepared.workdir.display().to_string()),
        ("WARD_SENTINEL", h.sentinels.prefix().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
