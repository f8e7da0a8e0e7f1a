//! The Docker boundary of a workspace: one emulator container per stage run.
//!
//! Every bollard call is in [`Docker`], a narrow wrapper whose errors name
//! the operation and the container (after testcontainers-rs' client). The
//! lifecycle around it:
//!
//! - create with labels that say who owns the container (`ward.run`,
//!   `ward.issue`, `ward.stage`, `ward.expires`, and whose it is:
//!   `ward.repository` and `ward.installation`) and a name with the run id;
//! - publish every port on 127.0.0.1 with a host port Docker picks, read the
//!   ports back from inspect (two runs never race for one host port);
//! - wait for readiness, run the seed command, render the agent's variables;
//! - on the way down, diagnostics first (logs, inspect, exit code), then
//!   remove by id (never by name: a look-alike container is not ours), then
//!   inspect again until Docker says the container does not exist.
//!
//! Any failure after the container exists tears it down before returning.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, ContainerInspectResponse, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, StartContainerOptions,
};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Cancel;
use crate::config::{EmulatorConfig, Probe, Seed, render_expose};

/// The most an exec's stdout may hold (an emulator's export).
pub const MAX_EXEC_OUTPUT: usize = 64 << 20;

/// Where bollard looks when `DOCKER_HOST` is not set.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

pub const LABEL_RUN: &str = "ward.run";
pub const LABEL_ISSUE: &str = "ward.issue";
pub const LABEL_STAGE: &str = "ward.stage";
pub const LABEL_EXPIRES: &str = "ward.expires";
pub const LABEL_REPOSITORY: &str = "ward.repository";
pub const LABEL_INSTALLATION: &str = "ward.installation";

#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error(
        "Docker is not reachable at {socket} ({reason}); start Docker, or set DOCKER_HOST to the socket it listens on"
    )]
    Unavailable { socket: String, reason: String },
    #[error(
        "image `{image}` is not present on the Docker host and ward never pulls; \
         build or load it first (e.g. `docker build -t {image} .`)"
    )]
    ImageMissing { image: String },
    #[error("Docker could not {op} {object}: {message}")]
    Api { op: &'static str, object: String, message: String },
    #[error(
        "a container named `{name}` already exists and is not this run's; ward leaves it alone (remove it by hand)"
    )]
    NameTaken { name: String },
    #[error("emulator `{name}` did not become ready ({probe}) within {}; diagnostics in {}", humantime::format_duration(*waited), diagnostics.display())]
    NotReady { name: String, probe: String, waited: Duration, diagnostics: PathBuf },
    #[error("emulator `{name}` exited with code {} before it was ready; diagnostics in {}", code.map_or("unknown".into(), |c| c.to_string()), diagnostics.display())]
    Exited { name: String, code: Option<i64>, diagnostics: PathBuf },
    #[error("Docker published no host port for container port {port} of `{name}`")]
    PortMissing { name: String, port: u16 },
    #[error("variable `{var}` for the agent does not render: {message}")]
    Template { var: String, message: String },
    #[error("seed command `{command}` of emulator `{name}` failed ({status}); its output is in {}", log.display())]
    SeedFailed { name: String, command: String, status: String, log: PathBuf },
    #[error("emulator `{name}` ({id}) is still there after removal; remove it with `docker rm -f {id}`")]
    NotRemoved { name: String, id: String },
    #[error("emulator `{name}` was cancelled by a signal; diagnostics in {}", diagnostics.display())]
    Cancelled { name: String, diagnostics: PathBuf },
    #[error("could not {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{first}; then the cleanup failed too: {cleanup}")]
    CleanupAfter { first: Box<EmulatorError>, cleanup: Box<EmulatorError> },
}

type Result<T> = std::result::Result<T, EmulatorError>;

/// Docker's own message, without bollard's wrapping.
fn message(e: &BollardError) -> String {
    match e {
        BollardError::DockerResponseServerError { status_code, message } => format!("{message} (HTTP {status_code})"),
        other => other.to_string(),
    }
}

fn is_not_found(e: &BollardError) -> bool {
    matches!(e, BollardError::DockerResponseServerError { status_code: 404, .. })
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EmulatorError {
    let path = path.to_path_buf();
    move |source| EmulatorError::Io { op, path, source }
}

/// A connection to the Docker engine; the only holder of a bollard client.
#[derive(Clone)]
pub struct Docker {
    api: bollard::Docker,
    socket: String,
}

impl Docker {
    /// Connects to `socket` (a path or `unix://` URL), else `DOCKER_HOST`,
    /// else [`DEFAULT_SOCKET`], and agrees on an API version with the engine.
    pub async fn connect(socket: Option<&str>) -> Result<Self> {
        let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        if socket.is_none()
            && let Some(h) = host.as_ref().filter(|h| !(h.starts_with("unix://") || h.starts_with('/')))
        {
            let reason = "ward talks to Docker over a unix socket only".to_string();
            return Err(EmulatorError::Unavailable { socket: format!("DOCKER_HOST={h}"), reason });
        }
        let socket = socket.map(str::to_string).or(host).unwrap_or_else(|| DEFAULT_SOCKET.to_string());
        let path = socket.trim_start_matches("unix://").to_string();
        let unavailable = |reason: String| EmulatorError::Unavailable { socket: path.clone(), reason };
        let api = bollard::Docker::connect_with_socket(&path, 120, bollard::API_DEFAULT_VERSION).map_err(|e| {
            unavailable(match e {
                BollardError::SocketNotFoundError(_) => "no such socket".into(),
                other => message(&other),
            })
        })?;
        let api = api.negotiate_version().await.map_err(|e| unavailable(message(&e)))?;
        Ok(Self { api, socket: path })
    }

    pub fn socket(&self) -> &str {
        &self.socket
    }

    pub async fn image_present(&self, image: &str) -> Result<bool> {
        match self.api.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => {
                Err(EmulatorError::Api { op: "inspect image", object: format!("`{image}`"), message: message(&e) })
            }
        }
    }

    /// Creates the container. The engine answers 404 when the image is not
    /// there (it never pulls on a create), so no look at the image first:
    /// that would be one more round trip on every stage's path.
    async fn create(&self, name: &str, body: ContainerCreateBody) -> Result<String> {
        let opts = CreateContainerOptionsBuilder::default().name(name).build();
        let image = body.image.clone().unwrap_or_default();
        match self.api.create_container(Some(opts), body).await {
            Ok(r) => Ok(r.id),
            Err(BollardError::DockerResponseServerError { status_code: 409, .. }) => {
                Err(EmulatorError::NameTaken { name: name.into() })
            }
            Err(BollardError::DockerResponseServerError { status_code: 404, message })
                if message.to_ascii_lowercase().contains("no such image") =>
            {
                Err(EmulatorError::ImageMissing { image })
            }
            Err(e) => {
                Err(EmulatorError::Api { op: "create container", object: format!("`{name}`"), message: message(&e) })
            }
        }
    }

    async fn start(&self, id: &str, name: &str) -> Result<()> {
        self.api.start_container(id, None::<StartContainerOptions>).await.map_err(|e| EmulatorError::Api {
            op: "start container",
            object: format!("`{name}`"),
            message: message(&e),
        })
    }

    /// `None` when Docker does not know the container.
    pub async fn inspect(&self, id: &str) -> Result<Option<ContainerInspectResponse>> {
        match self.api.inspect_container(id, None::<InspectContainerOptions>).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(EmulatorError::Api { op: "inspect container", object: id.into(), message: message(&e) }),
        }
    }

    /// Everything the container printed so far, stdout and stderr interleaved.
    pub async fn logs(&self, id: &str) -> Result<String> {
        let opts = LogsOptionsBuilder::default().stdout(true).stderr(true).timestamps(false).build();
        let mut stream = self.api.logs(id, Some(opts));
        let mut out = String::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| EmulatorError::Api {
                op: "read the logs of",
                object: id.into(),
                message: message(&e),
            })?;
            out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
        Ok(out)
    }

    /// Removes one container by id (killing it if it runs). Already gone is fine.
    async fn remove(&self, id: &str) -> Result<()> {
        let opts = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.api.remove_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(EmulatorError::Api { op: "remove container", object: id.into(), message: message(&e) }),
        }
    }

    /// Runs `cmd` inside the running container `id` with `env`, `stdin`
    /// written to it (then closed), within `limit`. Its stdout is kept up
    /// to [`MAX_EXEC_OUTPUT`] (more is an error), the end of its stderr for
    /// the message. A non-zero exit is an error naming the command.
    pub async fn exec(
        &self,
        id: &str,
        cmd: &[String],
        env: &[String],
        stdin: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Vec<u8>> {
        use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
        let shown = cmd.join(" ");
        let api = |op: &'static str| {
            let object = format!("`{shown}` in container {id}");
            move |e: BollardError| EmulatorError::Api { op, object, message: message(&e) }
        };
        let opts = CreateExecOptions {
            cmd: Some(cmd.to_vec()),
            env: Some(env.to_vec()),
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let exec = self.api.create_exec(id, opts).await.map_err(api("create an exec of"))?.id;
        let run = async {
            let start = StartExecOptions { detach: false, tty: false, output_capacity: None };
            let StartExecResults::Attached { mut output, mut input } =
                self.api.start_exec(&exec, Some(start)).await.map_err(api("start"))?
            else {
                return Err(EmulatorError::Api {
                    op: "attach to",
                    object: format!("`{shown}`"),
                    message: "detached".into(),
                });
            };
            let feed = async move {
                match stdin {
                    Some(data) => {
                        input.write_all(data).await?;
                        input.shutdown().await
                    }
                    None => Ok(()),
                }
            };
            let read = async {
                let (mut out, mut err) = (Vec::new(), Vec::new());
                while let Some(chunk) = output.next().await {
                    match chunk.map_err(api("read the output of"))? {
                        bollard::container::LogOutput::StdOut { message } => out.extend_from_slice(&message),
                        bollard::container::LogOutput::StdErr { message } => err.extend_from_slice(&message),
                        _ => {}
                    }
                    if out.len() > MAX_EXEC_OUTPUT {
                        return Err(EmulatorError::Api {
                            op: "read the output of",
                            object: format!("`{shown}`"),
                            message: format!("it printed more than {} MiB", MAX_EXEC_OUTPUT >> 20),
                        });
                    }
                }
                Ok((out, err))
            };
            let (fed, read) = tokio::join!(feed, read);
            let (out, err) = read?;
            fed.map_err(|e| EmulatorError::Api {
                op: "write the input of",
                object: format!("`{shown}`"),
                message: e.to_string(),
            })?;
            Ok::<_, EmulatorError>((out, err))
        };
        let (out, err) = tokio::time::timeout(limit, run).await.map_err(|_| EmulatorError::Api {
            op: "finish",
            object: format!("`{shown}` in container {id}"),
            message: format!("killed after {}", humantime::format_duration(limit)),
        })??;
        let code = self.api.inspect_exec(&exec).await.map_err(api("inspect the exec of"))?.exit_code;
        if code != Some(0) {
            let err = String::from_utf8_lossy(&err);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(EmulatorError::Api {
                op: "run",
                object: format!("`{shown}` in container {id}"),
                message: format!(
                    "exit code {}: {}",
                    code.map_or("unknown".into(), |c| c.to_string()),
                    crate::untrusted::shown(&tail.join(" / "))
                ),
            });
        }
        Ok(out)
    }

    /// Containers (running or not) carrying `label=value`: (id, name, labels).
    pub async fn labelled(
        &self,
        label: &str,
        value: Option<&str>,
    ) -> Result<Vec<(String, String, HashMap<String, String>)>> {
        let filter = match value {
            Some(v) => format!("{label}={v}"),
            None => label.to_string(),
        };
        let filters = HashMap::from([("label".to_string(), vec![filter.clone()])]);
        let opts = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let list = self.api.list_containers(Some(opts)).await.map_err(|e| EmulatorError::Api {
            op: "list containers labelled",
            object: filter,
            message: message(&e),
        })?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let name = c.names.and_then(|n| n.first().cloned()).unwrap_or_default();
                Some((c.id?, name.trim_start_matches('/').to_string(), c.labels.unwrap_or_default()))
            })
            .collect())
    }
}

/// Who a container belongs to; becomes its labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Owner {
    pub run: String,
    pub issue: u64,
    pub stage: String,
    /// After this the charge nurse may reap it ([`reap_expired`]).
    pub expires: DateTime<Utc>,
    /// The repository it works for (see [`super::WorkspacePlan::repository`]).
    pub repository: String,
    /// The ward installation that made it ([`super::installation_id`]).
    pub installation: String,
}

impl Owner {
    /// `ward-<run>-issue-<n>-<stage>`, in the characters Docker allows.
    pub fn container_name(&self) -> String {
        let raw = format!("ward-{}-issue-{}-{}", self.run, self.issue, self.stage);
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '-' }).collect()
    }

    fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_RUN.into(), self.run.clone()),
            (LABEL_ISSUE.into(), self.issue.to_string()),
            (LABEL_STAGE.into(), self.stage.clone()),
            (LABEL_EXPIRES.into(), self.expires.to_rfc3339()),
            (LABEL_REPOSITORY.into(), self.repository.clone()),
            (LABEL_INSTALLATION.into(), self.installation.clone()),
        ])
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedResult {
    pub command: Vec<String>,
    pub exit_code: Option<i32>,
    pub log: PathBuf,
    pub took_ms: u64,
}

/// A running, ready, seeded emulator this run owns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Emulator {
    pub id: String,
    pub name: String,
    pub image: String,
    /// Container port -> host port on 127.0.0.1.
    pub ports: BTreeMap<u16, u16>,
    /// The rendered `expose` variables: for the agent's environment only.
    #[serde(skip)]
    pub vars: BTreeMap<String, String>,
    pub ready_ms: u64,
    pub seed: Option<SeedResult>,
    /// The checkpoint export of the empty emulator, taken just before the
    /// seed (when both are configured): a seed must change it.
    #[serde(skip)]
    pub before_seed: Option<Vec<u8>>,
}

/// What teardown left: diagnostics, and the proof of removal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Teardown {
    pub id: String,
    pub name: String,
    /// `None` while it still ran when teardown began.
    pub exit_code: Option<i64>,
    pub log: PathBuf,
    pub inspect: PathBuf,
    pub removed_verified: bool,
    pub remove_ms: u64,
}

/// Creates, starts, readies and seeds the emulator of one stage run.
/// `workdir` is where the seed command runs (the worktree); `artifacts`
/// receives diagnostics and the seed log.
pub async fn start(
    docker: &Docker,
    config: &EmulatorConfig,
    owner: &Owner,
    workdir: &Path,
    artifacts: &Path,
    cancel: &Cancel,
) -> Result<Emulator> {
    let name = owner.container_name();
    std::fs::create_dir_all(artifacts).map_err(io_err("create the artifacts folder", artifacts))?;
    let started = Instant::now();
    let id = docker.create(&name, create_body(config, owner)).await?;
    match bring_up(docker, config, &id, &name, workdir, artifacts, cancel, started).await {
        Ok(em) => Ok(em),
        Err(first) => match stop(docker, &id, &name, artifacts).await {
            Ok(_) => Err(first),
            Err(cleanup) => Err(EmulatorError::CleanupAfter { first: Box::new(first), cleanup: Box::new(cleanup) }),
        },
    }
}

fn create_body(config: &EmulatorConfig, owner: &Owner) -> ContainerCreateBody {
    let port_bindings = config
        .ports
        .iter()
        .map(|p| {
            // Loopback only; an empty host port lets Docker pick a free one.
            let binding = PortBinding { host_ip: Some("127.0.0.1".into()), host_port: Some(String::new()) };
            (format!("{p}/tcp"), Some(vec![binding]))
        })
        .collect();
    ContainerCreateBody {
        image: Some(config.image.clone()),
        cmd: config.command.clone(),
        env: Some(config.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        exposed_ports: Some(config.ports.iter().map(|p| format!("{p}/tcp")).collect()),
        labels: Some(owner.labels()),
        host_config: Some(HostConfig { port_bindings: Some(port_bindings), ..Default::default() }),
        ..Default::default()
    }
}

#[allow(clippy::too_many_arguments)]
async fn bring_up(
    docker: &Docker,
    config: &EmulatorConfig,
    id: &str,
    name: &str,
    workdir: &Path,
    artifacts: &Path,
    cancel: &Cancel,
    started: Instant,
) -> Result<Emulator> {
    docker.start(id, name).await?;
    let inspect = docker.inspect(id).await?.ok_or_else(|| EmulatorError::Api {
        op: "inspect container",
        object: format!("`{name}`"),
        message: "gone".into(),
    })?;
    let state = inspect.state.as_ref();
    if state.is_some_and(|s| s.running == Some(false)) {
        // Gone already: Docker no longer lists its ports, so say why.
        let code = state.and_then(|s| s.exit_code);
        return Err(EmulatorError::Exited {
            name: name.into(),
            code,
            diagnostics: artifacts.join(format!("{name}.log")),
        });
    }
    let ports = host_ports(&inspect, &config.ports, name)?;
    let probe = config.ready.probe().expect("validated: exactly one probe");
    let inside = super::inside_env(config);
    let ready = Ready { probe: &probe, ports: &ports, inside: &inside, limit: config.ready.time_limit };
    wait_ready(docker, id, name, &ready, artifacts, cancel).await?;
    let ready_ms = started.elapsed().as_millis() as u64;
    let vars =
        render_expose(&config.expose, &ports).map_err(|(var, message)| EmulatorError::Template { var, message })?;
    // The empty emulator's export, before the seed: the seed's read-back
    // compares with it (a seed that loaded nothing is caught).
    let checkpoint = config.checkpoint();
    let before_seed = match (&config.seed, &checkpoint) {
        (Some(_), Some(c)) => docker.exec(id, &c.export, &inside, None, c.time_limit).await.ok(),
        _ => None,
    };
    let seed = match config.seed.as_ref().map(|s| (s, s.kind())) {
        Some((seed, Some(Seed::Command(command)))) => {
            Some(run_seed(name, command, seed.time_limit, &vars, workdir, artifacts, cancel).await?)
        }
        Some((seed, Some(Seed::File(file)))) => {
            let import = checkpoint.as_ref().map(|c| c.import.clone()).unwrap_or_default();
            let load = SeedFile { file, import: &import, inside: &inside, limit: seed.time_limit };
            Some(load_seed_file(docker, id, name, &load, workdir, artifacts, cancel).await?)
        }
        Some((_, None)) | None => None,
    };
    Ok(Emulator {
        id: id.into(),
        name: name.into(),
        image: config.image.clone(),
        ports,
        vars,
        ready_ms,
        seed,
        before_seed,
    })
}

/// Container port -> host port, as Docker published them.
fn host_ports(inspect: &ContainerInspectResponse, wanted: &[u16], name: &str) -> Result<BTreeMap<u16, u16>> {
    let published = inspect.network_settings.as_ref().and_then(|n| n.ports.as_ref());
    wanted
        .iter()
        .map(|port| {
            let host = published
                .and_then(|m| m.get(&format!("{port}/tcp")))
                .and_then(|b| b.as_ref())
                .and_then(|b| b.iter().find(|b| b.host_ip.as_deref() == Some("127.0.0.1")))
                .and_then(|b| b.host_port.as_deref())
                .and_then(|p| p.parse::<u16>().ok());
            host.map(|h| (*port, h)).ok_or_else(|| EmulatorError::PortMissing { name: name.into(), port: *port })
        })
        .collect()
}

fn describe(probe: &Probe) -> String {
    match probe {
        Probe::Http { port, path } => format!("HTTP GET {path} on port {port}"),
        Probe::Tcp { port } => format!("TCP connect to port {port}"),
        Probe::Log { text } => format!("log line `{text}`"),
        Probe::Exec { command } => format!("`{}` exiting 0 in the container", command.join(" ")),
    }
}

/// What readiness waits for, and what it needs to ask.
struct Ready<'a> {
    probe: &'a Probe,
    ports: &'a BTreeMap<u16, u16>,
    /// The environment of commands run inside the container.
    inside: &'a [String],
    limit: Duration,
}

async fn wait_ready(
    docker: &Docker,
    id: &str,
    name: &str,
    r: &Ready<'_>,
    artifacts: &Path,
    cancel: &Cancel,
) -> Result<()> {
    let (probe, ports, limit) = (r.probe, r.ports, r.limit);
    let deadline = Instant::now() + limit;
    let diagnostics = artifacts.join(format!("{name}.log"));
    loop {
        let ready = match probe {
            Probe::Http { port, path } => http_ok(ports[port], path).await,
            Probe::Tcp { port } => tcp_open(ports[port]).await,
            Probe::Log { text } => docker.logs(id).await?.contains(text.as_str()),
            // Each try within what is left (at most 5 s): a command that
            // hangs does not hold the wait past its limit.
            Probe::Exec { command } => {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(200), Duration::from_secs(5));
                docker.exec(id, command, r.inside, None, left).await.is_ok()
            }
        };
        if ready {
            return Ok(());
        }
        let state = docker.inspect(id).await?.and_then(|i| i.state);
        if state.as_ref().is_some_and(|s| s.running == Some(false)) {
            return Err(EmulatorError::Exited {
                name: name.into(),
                code: state.and_then(|s| s.exit_code),
                diagnostics,
            });
        }
        if Instant::now() >= deadline {
            return Err(EmulatorError::NotReady {
                name: name.into(),
                probe: describe(probe),
                waited: limit,
                diagnostics,
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = cancel.cancelled() => return Err(EmulatorError::Cancelled { name: name.into(), diagnostics }),
        }
    }
}

/// One `GET` on loopback: a 2xx status line within a second.
async fn http_ok(port: u16, path: &str) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while got.len() < 12 {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&got).to_string();
        Some(line.split_whitespace().nth(1).is_some_and(|code| code.starts_with('2')))
    };
    tokio::time::timeout(Duration::from_secs(1), attempt).await.ok().flatten().unwrap_or(false)
}

/// A TCP connection that stays open. Docker's userland proxy accepts on the
/// host port even when nothing listens in the container, then closes: an
/// immediate end of stream means "not yet".
async fn tcp_open(port: u16) -> bool {
    let Ok(Ok(mut s)) =
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(("127.0.0.1", port))).await
    else {
        return false;
    };
    let mut buf = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
        Err(_) => true,      // open and quiet: someone listens
        Ok(Ok(n)) => n > 0,  // a banner
        Ok(Err(_)) => false, // reset
    }
}

async fn run_seed(
    name: &str,
    command: &[String],
    limit: Duration,
    vars: &BTreeMap<String, String>,
    workdir: &Path,
    artifacts: &Path,
    cancel: &Cancel,
) -> Result<SeedResult> {
    let log = artifacts.join(format!("{name}.seed.log"));
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(&command[0]);
    // Its own process group: a time limit or a signal ends everything it started.
    cmd.args(&command[1..]).current_dir(workdir).env_clear().kill_on_drop(true).process_group(0);
    for key in ["PATH", "HOME", "LANG"] {
        if let Ok(v) = std::env::var(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(vars).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = command.join(" ");
    let failed = |status: String| EmulatorError::SeedFailed {
        name: name.into(),
        command: shown.clone(),
        status,
        log: log.clone(),
    };
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            std::fs::write(&log, format!("could not start `{shown}`: {e}\n")).map_err(io_err("write", &log))?;
            return Err(failed(format!("could not start: {e}")));
        }
    };
    let _group = ProcessGroup(child.id().map(|p| p as i32));
    let out = tokio::select! {
        r = tokio::time::timeout(limit, child.wait_with_output()) => r,
        _ = cancel.cancelled() => {
            return Err(EmulatorError::Cancelled { name: name.into(), diagnostics: log });
        }
    };
    let out = match out {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(failed(format!("could not wait for it: {e}"))),
        Err(_) => {
            std::fs::write(&log, "killed: time limit reached\n").map_err(io_err("write", &log))?;
            return Err(failed(format!("killed after {}", humantime::format_duration(limit))));
        }
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    std::fs::write(&log, &text).map_err(io_err("write", &log))?;
    if !out.status.success() {
        return Err(failed(out.status.to_string()));
    }
    Ok(SeedResult {
        command: command.to_vec(),
        exit_code: out.status.code(),
        log,
        took_ms: started.elapsed().as_millis() as u64,
    })
}

/// A seed file and the import command it is fed to.
struct SeedFile<'a> {
    file: &'a str,
    import: &'a [String],
    inside: &'a [String],
    limit: Duration,
}

/// Feeds a seed file of the worktree to the checkpoint's import command
/// inside the container; its output (or the error) goes to the seed log.
async fn load_seed_file(
    docker: &Docker,
    id: &str,
    name: &str,
    s: &SeedFile<'_>,
    workdir: &Path,
    artifacts: &Path,
    cancel: &Cancel,
) -> Result<SeedResult> {
    let log = artifacts.join(format!("{name}.seed.log"));
    let started = Instant::now();
    let shown = format!("{} < {}", s.import.join(" "), s.file);
    let failed = |status: String| EmulatorError::SeedFailed {
        name: name.into(),
        command: shown.clone(),
        status,
        log: log.clone(),
    };
    let path = workdir.join(s.file);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) => {
            let line = format!("could not read the seed file {}: {e}\n", path.display());
            std::fs::write(&log, &line).map_err(io_err("write", &log))?;
            return Err(failed(format!("could not read {}: {e}", path.display())));
        }
    };
    let loaded = tokio::select! {
        r = docker.exec(id, s.import, s.inside, Some(&data), s.limit) => r,
        _ = cancel.cancelled() => return Err(EmulatorError::Cancelled { name: name.into(), diagnostics: log }),
    };
    match loaded {
        Ok(out) => {
            std::fs::write(&log, &out).map_err(io_err("write", &log))?;
            Ok(SeedResult {
                command: vec![shown],
                exit_code: Some(0),
                log,
                took_ms: started.elapsed().as_millis() as u64,
            })
        }
        Err(e) => {
            std::fs::write(&log, format!("{e}\n")).map_err(io_err("write", &log))?;
            Err(failed(e.to_string()))
        }
    }
}

/// Kills a seed command's whole process group when dropped: nothing it
/// started outlives it (a finished seed included).
struct ProcessGroup(Option<i32>);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) with a negative pid signals the group we created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// Diagnostics, removal by id, verification. Writes `<name>.log` and
/// `<name>.inspect.json` into `artifacts` before anything is removed.
pub async fn stop(docker: &Docker, id: &str, name: &str, artifacts: &Path) -> Result<Teardown> {
    std::fs::create_dir_all(artifacts).map_err(io_err("create the artifacts folder", artifacts))?;
    let log = artifacts.join(format!("{name}.log"));
    let inspect_path = artifacts.join(format!("{name}.inspect.json"));
    // Diagnostics are best effort: a failure to read them is recorded in the
    // files and never stops the removal. Both are read at once: they are two
    // round trips to the engine on the path of every teardown.
    let (logs, inspect) = tokio::join!(docker.logs(id), docker.inspect(id));
    let logs = logs.unwrap_or_else(|e| format!("(logs unavailable: {e})\n"));
    std::fs::write(&log, logs).map_err(io_err("write", &log))?;
    let inspect = inspect.ok().flatten();
    let state = inspect.as_ref().and_then(|i| i.state.as_ref());
    let exit_code = state.filter(|s| s.running != Some(true)).and_then(|s| s.exit_code);
    let json = inspect.as_ref().and_then(|i| serde_json::to_string_pretty(i).ok()).unwrap_or_else(|| "null".into());
    std::fs::write(&inspect_path, json).map_err(io_err("write", &inspect_path))?;
    let started = Instant::now();
    docker.remove(id).await?;
    let mut gone = false;
    // A forced removal is usually done when it answers; poll briefly, then
    // back off (5 s in all), as the readiness probe does.
    for attempt in 0..60 {
        if docker.inspect(id).await?.is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(if attempt < 10 { 20 } else { 100 })).await;
    }
    if !gone {
        return Err(EmulatorError::NotRemoved { name: name.into(), id: id.into() });
    }
    Ok(Teardown {
        id: id.into(),
        name: name.into(),
        exit_code,
        log,
        inspect: inspect_path,
        removed_verified: true,
        remove_ms: started.elapsed().as_millis() as u64,
    })
}

/// The charge nurse's reaper for containers: removes (with diagnostics into
/// `artifacts`) every container of this installation and this repository
/// whose `ward.expires` is before `now`. A container is ward's to remove
/// only when both its `ward.installation` and its `ward.repository` match
/// (anyone can put ward's labels on a container; another installation's
/// or another repository's containers are theirs to reap).
pub async fn reap_expired(
    docker: &Docker,
    now: DateTime<Utc>,
    artifacts: &Path,
    repository: &str,
    installation: &str,
) -> Result<Vec<String>> {
    let mut reaped = Vec::new();
    for (id, name, labels) in docker.labelled(LABEL_INSTALLATION, Some(installation)).await? {
        let expired = labels
            .get(LABEL_EXPIRES)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t.with_timezone(&Utc) < now);
        let ours = labels.get(LABEL_INSTALLATION).is_some_and(|i| i == installation)
            && labels.get(LABEL_REPOSITORY).is_some_and(|r| r == repository)
            && labels.contains_key(LABEL_RUN);
        if expired && ours {
            stop(docker, &id, &name, artifacts).await?;
            reaped.push(name);
        }
    }
    Ok(reaped)
}
