//! The `emulator` section of `.github/ward.yml`, per repository (top level)
//! or per stage (`stages.<name>.emulator`, which replaces the top-level one).
//!
//! ```yaml
//! emulator:
//!   image: ward-docstore:test          # present locally; ward never pulls
//!   ports: [8081, 8082]                # published on 127.0.0.1, Docker picks host ports
//!   env: { DOCSTORE_READY_DELAY_MS: "0" }
//!   ready:
//!     http: { port: 8082, path: /ready }   # or `tcp: 8081`, or `log: "docstore ready"`
//!     time_limit: 30s
//!   seed:                              # optional; runs on the host, in the worktree,
//!     command: ["./seed.sh"]           # with the exposed variables in its environment
//!     time_limit: 2m
//!   expose:                            # what the agent (and only the agent) receives
//!     COSMOS_ENDPOINT: "http://127.0.0.1:{{ ports[8081] }}"
//!   checkpoint:                        # optional; run inside the container
//!     export: ["/docstore", "export"]  # prints the data on stdout
//!     import: ["/docstore", "import"]  # reads it back on stdin
//!     time_limit: 1m
//!     keep: 7d
//! ```
//!
//! An image named `ward-docstore:<tag>` (the test document store) has a
//! built-in `checkpoint` section: [`EmulatorConfig::checkpoint`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::de_duration;

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmulatorConfig {
    /// Image reference. It must be present on the Docker host: ward never
    /// pulls (build or load it in an earlier workflow step).
    pub image: String,
    /// Container ports to publish. Each is published on 127.0.0.1 only, on a
    /// host port Docker picks; templates read it as `ports[<container port>]`.
    pub ports: Vec<u16>,
    /// Environment of the emulator process. Default: none.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Replaces the image's CMD. Default: the image's own.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// When the emulator counts as ready.
    pub ready: ReadinessConfig,
    /// Fixtures to load once it is ready. Default: none.
    #[serde(default)]
    pub seed: Option<SeedConfig>,
    /// Variables handed to the agent's environment, as minijinja templates
    /// over `ports` (container port -> host port) and `host` (`127.0.0.1`).
    #[serde(default)]
    pub expose: BTreeMap<String, String>,
    /// How ward saves the emulator's data at the end of a treatment and
    /// loads it into the patient's next stage instead of the seed. Default:
    /// none (every stage starts from the seed), except the built-in one of
    /// the `ward-docstore` test image.
    #[serde(default)]
    pub checkpoint: Option<CheckpointConfig>,
}

/// Checkpoints of the emulator's data. Both commands run inside the
/// emulator's container (the tool that reads the data lives with it, and
/// nothing of the agent's worktree runs), with the container's `env` and
/// the `expose` variables rendered as seen from inside it (a container
/// port is itself, the host `127.0.0.1`).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Prints the whole data on stdout, the same data the same way each
    /// time (sorted): the code reviewer's data diff compares two exports
    /// line by line.
    pub export: Vec<String>,
    /// Reads an export on stdin into the fresh, ready emulator.
    pub import: Vec<String>,
    /// Wall-clock limit of one export or import. Default 1m.
    #[serde(default = "default_checkpoint_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
    /// A checkpoint the patient has not replaced is reaped after this
    /// (and all of them when the patient is discharged). Default 7d.
    #[serde(default = "default_checkpoint_keep", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub keep: Duration,
}

/// The image whose checkpoint section is built in.
pub const DOCSTORE_IMAGE: &str = "ward-docstore";

impl EmulatorConfig {
    /// The `checkpoint` section, or the built-in one of the `ward-docstore`
    /// test image (its `/docstore export` and `/docstore import`).
    pub fn checkpoint(&self) -> Option<CheckpointConfig> {
        if let Some(c) = &self.checkpoint {
            return Some(c.clone());
        }
        let name = self.image.rsplit('/').next().unwrap_or_default();
        (name.split(':').next() == Some(DOCSTORE_IMAGE)).then(|| CheckpointConfig {
            export: vec!["/docstore".into(), "export".into()],
            import: vec!["/docstore".into(), "import".into()],
            time_limit: default_checkpoint_limit(),
            keep: default_checkpoint_keep(),
        })
    }
}

/// Exactly one of `http`, `tcp`, `log`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadinessConfig {
    /// Ready when `GET http://127.0.0.1:<host port>/<path>` answers 2xx.
    #[serde(default)]
    pub http: Option<HttpProbe>,
    /// Ready when a TCP connection to this container port's host port opens.
    #[serde(default)]
    pub tcp: Option<u16>,
    /// Ready when this text appears in the container's output.
    #[serde(default)]
    pub log: Option<String>,
    /// How long to wait. Default 30s.
    #[serde(default = "default_ready_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
}

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpProbe {
    /// A container port listed in `ports`.
    pub port: u16,
    /// Default `/`.
    #[serde(default = "default_probe_path")]
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SeedConfig {
    /// Argument vector, run in the worktree with PATH, HOME, LANG and the
    /// exposed variables as its whole environment.
    pub command: Vec<String>,
    /// Default 2m.
    #[serde(default = "default_seed_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
}

/// The probe, resolved from [`ReadinessConfig`] once it has been validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    Http { port: u16, path: String },
    Tcp { port: u16 },
    Log { text: String },
}

impl ReadinessConfig {
    pub fn probe(&self) -> Option<Probe> {
        match (&self.http, self.tcp, &self.log) {
            (Some(h), None, None) => Some(Probe::Http { port: h.port, path: h.path.clone() }),
            (None, Some(port), None) => Some(Probe::Tcp { port }),
            (None, None, Some(text)) => Some(Probe::Log { text: text.clone() }),
            _ => None,
        }
    }
}

fn default_ready_limit() -> Duration {
    Duration::from_secs(30)
}
fn default_seed_limit() -> Duration {
    Duration::from_secs(120)
}
fn default_checkpoint_limit() -> Duration {
    Duration::from_secs(60)
}
fn default_checkpoint_keep() -> Duration {
    Duration::from_secs(7 * 24 * 60 * 60)
}
fn default_probe_path() -> String {
    "/".into()
}

/// Names the engine sets for the agent itself or that an emulator must not replace.
const RESERVED: &[&str] = &["PATH", "HOME", "LANG"];

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Renders the `expose` templates with the host ports read back from Docker.
pub fn render_expose(
    expose: &BTreeMap<String, String>,
    ports: &BTreeMap<u16, u16>,
) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let ctx = minijinja::context! { ports => ports, host => "127.0.0.1" };
    expose
        .iter()
        .map(|(name, template)| {
            env.render_str(template, &ctx).map(|v| (name.clone(), v)).map_err(|e| (name.clone(), e.to_string()))
        })
        .collect()
}

/// The semantic pass for one `emulator` section: (path, message) per problem,
/// `path` being where the section sits (`emulator`, `stages.treat.emulator`).
pub fn validate(e: &EmulatorConfig, path: &str) -> Vec<(String, String)> {
    let mut p = Vec::new();
    if e.image.trim().is_empty() || e.image.chars().any(char::is_whitespace) {
        p.push((format!("{path}.image"), format!("`{}` is not an image reference like `name:tag`", e.image)));
    }
    if e.ports.is_empty() {
        p.push((format!("{path}.ports"), "list at least one container port, e.g. [8081]".into()));
    }
    let mut seen = BTreeSet::new();
    for (i, port) in e.ports.iter().enumerate() {
        if *port == 0 {
            p.push((format!("{path}.ports.{i}"), "port 0 is not a container port; use 1 to 65535".into()));
        } else if !seen.insert(*port) {
            p.push((format!("{path}.ports.{i}"), format!("port {port} is listed twice")));
        }
    }
    for name in e.env.keys() {
        if !is_env_name(name) {
            p.push((format!("{path}.env.{name}"), format!("`{name}` is not an environment variable name")));
        }
    }
    if e.command.as_ref().is_some_and(|c| c.is_empty()) {
        p.push((format!("{path}.command"), "an empty command; leave it out to use the image's own".into()));
    }
    let rpath = format!("{path}.ready");
    match e.ready.probe() {
        None => p.push((rpath.clone(), "give exactly one of `http`, `tcp` or `log`".into())),
        Some(Probe::Http { port, path: probe_path }) => {
            if !e.ports.contains(&port) {
                p.push((format!("{rpath}.http.port"), format!("port {port} is not listed in `ports`")));
            }
            if !probe_path.starts_with('/') {
                p.push((format!("{rpath}.http.path"), format!("`{probe_path}` must start with `/`")));
            }
        }
        Some(Probe::Tcp { port }) => {
            if !e.ports.contains(&port) {
                p.push((format!("{rpath}.tcp"), format!("port {port} is not listed in `ports`")));
            }
        }
        Some(Probe::Log { text }) => {
            if text.is_empty() {
                p.push((format!("{rpath}.log"), "the log line to wait for is empty".into()));
            }
        }
    }
    if e.ready.time_limit.is_zero() {
        p.push((format!("{rpath}.time_limit"), "must be longer than zero".into()));
    }
    if let Some(seed) = &e.seed {
        if seed.command.is_empty() || seed.command[0].trim().is_empty() {
            p.push((format!("{path}.seed.command"), "must name a program, e.g. [\"./seed.sh\"]".into()));
        }
        if seed.time_limit.is_zero() {
            p.push((format!("{path}.seed.time_limit"), "must be longer than zero".into()));
        }
    }
    if let Some(c) = &e.checkpoint {
        for (field, command) in [("export", &c.export), ("import", &c.import)] {
            if command.first().is_none_or(|c| c.trim().is_empty()) {
                p.push((format!("{path}.checkpoint.{field}"), "must name a program in the container".into()));
            }
        }
        for (field, d) in [("time_limit", c.time_limit), ("keep", c.keep)] {
            if d.is_zero() {
                p.push((format!("{path}.checkpoint.{field}"), "must be longer than zero".into()));
            }
        }
    }
    for name in e.expose.keys() {
        if !is_env_name(name) {
            p.push((format!("{path}.expose.{name}"), format!("`{name}` is not an environment variable name")));
        } else if name.starts_with("WARD_") || RESERVED.contains(&name.as_str()) {
            p.push((format!("{path}.expose.{name}"), format!("`{name}` is set by the engine and cannot be exposed")));
        }
    }
    // Render with stand-in host ports: a template that names a port not in
    // `ports` (or does not parse) fails here, not in the middle of a run.
    let fake: BTreeMap<u16, u16> = e.ports.iter().map(|p| (*p, 1)).collect();
    if let Err((name, message)) = render_expose(&e.expose, &fake) {
        p.push((format!("{path}.expose.{name}"), format!("template does not render: {message}")));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> EmulatorConfig {
        serde_yaml::from_str(text).unwrap()
    }

    const GOOD: &str = r#"
image: ward-docstore:test
ports: [8081, 8082]
ready: { http: { port: 8082, path: /ready }, time_limit: 5s }
expose:
  COSMOS_ENDPOINT: "http://127.0.0.1:{{ ports[8081] }}"
"#;

    #[test]
    fn a_good_section_validates_and_renders_host_ports() {
        let e = parse(GOOD);
        assert_eq!(validate(&e, "emulator"), vec![]);
        let vars = render_expose(&e.expose, &BTreeMap::from([(8081, 49153), (8082, 49154)])).unwrap();
        assert_eq!(vars["COSMOS_ENDPOINT"], "http://127.0.0.1:49153");
    }

    #[test]
    fn empty_duplicate_and_unlisted_ports_are_named_by_path() {
        let mut e = parse(GOOD);
        e.ports = vec![];
        let p = validate(&e, "stages.treat.emulator");
        assert!(p.iter().any(|(path, m)| path == "stages.treat.emulator.ports" && m.contains("at least one")), "{p:?}");
        assert!(p.iter().any(|(path, _)| path == "stages.treat.emulator.ready.http.port"), "{p:?}");
        assert!(
            p.iter().any(|(path, m)| path == "stages.treat.emulator.expose.COSMOS_ENDPOINT" && m.contains("render"))
        );
        e.ports = vec![8082, 0, 8082];
        let p = validate(&e, "emulator");
        assert!(p.iter().any(|(path, m)| path == "emulator.ports.1" && m.contains("port 0")), "{p:?}");
        assert!(p.iter().any(|(path, m)| path == "emulator.ports.2" && m.contains("twice")), "{p:?}");
    }

    #[test]
    fn out_of_range_ports_fail_to_parse() {
        let err = serde_yaml::from_str::<EmulatorConfig>(&GOOD.replace("[8081, 8082]", "[8081, 70000]")).unwrap_err();
        assert!(err.to_string().contains("70000"), "{err}");
    }

    #[test]
    fn readiness_needs_exactly_one_probe() {
        let e = parse(&GOOD.replace("http: { port: 8082, path: /ready }", "tcp: 8081, log: ready"));
        let p = validate(&e, "emulator");
        assert!(p.iter().any(|(path, m)| path == "emulator.ready" && m.contains("exactly one")), "{p:?}");
    }

    #[test]
    fn the_docstore_image_has_a_built_in_checkpoint_and_others_none() {
        let e = parse(GOOD);
        let c = e.checkpoint().expect("ward-docstore has a built-in checkpoint");
        assert_eq!(c.export, vec!["/docstore", "export"]);
        let other = parse(&GOOD.replace("ward-docstore:test", "registry.local/cosmos:1"));
        assert_eq!(other.checkpoint(), None);
        let mut mine = parse(&format!("{GOOD}checkpoint: {{ export: [dump], import: [load], time_limit: 0s }}\n"));
        assert_eq!(mine.checkpoint().unwrap().export, vec!["dump"]);
        let p = validate(&mine, "emulator");
        assert!(p.iter().any(|(path, _)| path == "emulator.checkpoint.time_limit"), "{p:?}");
        mine.checkpoint.as_mut().unwrap().import.clear();
        let p = validate(&mine, "emulator");
        assert!(p.iter().any(|(path, _)| path == "emulator.checkpoint.import"), "{p:?}");
    }

    #[test]
    fn engine_variables_cannot_be_exposed() {
        let mut e = parse(GOOD);
        e.expose.insert("WARD_RUN".into(), "x".into());
        e.expose.insert("PATH".into(), "/evil".into());
        let p = validate(&e, "emulator");
        assert_eq!(p.iter().filter(|(_, m)| m.contains("set by the engine")).count(), 2, "{p:?}");
    }
}
