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
//!
//! A `preset` fills in what an engine needs and leaves the rest to the
//! section (anything given replaces the preset's; `expose` is merged):
//!
//! ```yaml
//! emulator:
//!   preset: postgres                   # ports, readiness, expose, checkpoint
//!   image: ward-postgres:15.20-0-deb12u1   # built by images/postgres/build
//!   seed: { file: db/seed.sql }        # fed to the checkpoint's import
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::de_duration;

/// The `emulator` section as written: [`EmulatorConfig`] once its preset
/// (if any) is applied.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmulatorSection {
    /// An engine ward knows (`postgres`, `mariadb`): its ports, readiness, `expose`
    /// variables and checkpoint commands, each replaced by this section's
    /// own when given (`expose` is merged, this section's names winning).
    /// Default: none (`ports` and `ready` are then required).
    #[serde(default)]
    pub preset: Option<Preset>,
    /// Image reference. It must be present on the Docker host: ward never
    /// pulls (build or load it in an earlier workflow step).
    pub image: String,
    /// Container ports to publish. Each is published on 127.0.0.1 only, on a
    /// host port Docker picks; templates read it as `ports[<container port>]`.
    /// Required without a `preset`.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Environment of the emulator process. Default: none.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Replaces the image's CMD. Default: the image's own.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// When the emulator counts as ready. Required without a `preset`.
    #[serde(default)]
    pub ready: Option<ReadinessConfig>,
    /// Fixtures to load once it is ready. Default: none.
    #[serde(default)]
    pub seed: Option<SeedConfig>,
    /// Variables handed to the agent's environment, as minijinja templates
    /// over `ports` (container port -> host port) and `host` (`127.0.0.1`).
    #[serde(default)]
    pub expose: BTreeMap<String, String>,
    /// How ward saves the emulator's data at the end of a treatment and
    /// loads it into the patient's next stage instead of the seed. Default:
    /// the preset's; none without one (every stage starts from the seed),
    /// except the built-in one of the `ward-docstore` test image.
    #[serde(default)]
    pub checkpoint: Option<CheckpointConfig>,
}

/// The engines ward has a preset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// PostgreSQL 15 or later, as `images/postgres/build` makes it: port
    /// 5432, user `postgres` without a password, database `app`. Ready when
    /// `psql -c 'select 1'` succeeds inside the container. Exposes
    /// `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE` and `DATABASE_URL`.
    /// Checkpoints: `pg_dump` (schema and data, no owners or grants, a
    /// fixed `\restrict` key: pg_dump 15.14 or later) and `psql` in one
    /// transaction that stops at the first error.
    Postgres,
    /// MariaDB (the other SQL server people run in containers, built here
    /// from Debian's packages as well: `images/mariadb/build`): port 3306,
    /// user `app` without a password on the published port, database
    /// `app`. Ready when `mariadb -e 'select 1'` succeeds inside the
    /// container. Exposes `DB_HOST`, `DB_PORT`, `DB_USER`, `DB_NAME` and
    /// `DATABASE_URL` (`mysql://`). Checkpoints: `mariadb-dump` (schema and
    /// data, rows in primary-key order, one `INSERT` a row, no dates or
    /// comments) and `mariadb`, which stops at the first error (DDL commits
    /// as it goes in MariaDB, so not one transaction).
    Mariadb,
}

/// The `emulator` section, its `preset` (if any) applied as it is read:
/// what the engine runs.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(from = "EmulatorSection")]
pub struct EmulatorConfig {
    /// The preset it came from, if any.
    pub preset: Option<Preset>,
    pub image: String,
    pub ports: Vec<u16>,
    pub env: BTreeMap<String, String>,
    pub command: Option<Vec<String>>,
    pub ready: ReadinessConfig,
    pub seed: Option<SeedConfig>,
    pub expose: BTreeMap<String, String>,
    pub checkpoint: Option<CheckpointConfig>,
}

/// The PostgreSQL preset's database and user (the image's).
pub const POSTGRES_DATABASE: &str = "app";
pub const POSTGRES_USER: &str = "postgres";
pub const POSTGRES_PORT: u16 = 5432;
pub const MARIADB_PORT: u16 = 3306;
pub const MARIADB_DATABASE: &str = "app";
pub const MARIADB_USER: &str = "app";
/// The fixed key pg_dump writes in `\restrict` / `\unrestrict` instead of
/// a random one, so two exports of the same data are the same bytes.
pub const POSTGRES_RESTRICT_KEY: &str = "ward";

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

impl From<EmulatorSection> for EmulatorConfig {
    fn from(s: EmulatorSection) -> Self {
        let mut c = EmulatorConfig {
            preset: s.preset,
            image: s.image,
            ports: s.ports,
            env: s.env,
            command: s.command,
            ready: s.ready.unwrap_or_default(),
            seed: s.seed,
            expose: s.expose,
            checkpoint: s.checkpoint,
        };
        match s.preset {
            None => {}
            Some(Preset::Postgres) => {
                if c.ports.is_empty() {
                    c.ports = vec![POSTGRES_PORT];
                }
                let r = &mut c.ready;
                if r.http.is_none() && r.tcp.is_none() && r.log.is_none() && r.exec.is_none() {
                    // A query answered, not an open port: the server is
                    // up and the database is there.
                    r.exec = Some(strings(&["psql", "-X", "-q", "-c", "select 1"]));
                }
                // The server's port: the first one listed (5432 unless given).
                let port = format!("{{{{ ports[{}] }}}}", c.ports[0]);
                let defaults = [
                    ("PGHOST", "{{ host }}".to_string()),
                    ("PGPORT", port.clone()),
                    ("PGUSER", POSTGRES_USER.to_string()),
                    ("PGDATABASE", POSTGRES_DATABASE.to_string()),
                    ("DATABASE_URL", format!("postgresql://{POSTGRES_USER}@{{{{ host }}}}:{port}/{POSTGRES_DATABASE}")),
                ];
                for (name, value) in defaults {
                    c.expose.entry(name.to_string()).or_insert(value);
                }
                if c.checkpoint.is_none() {
                    c.checkpoint = Some(CheckpointConfig {
                        export: strings(&[
                            "pg_dump",
                            "--no-owner",
                            "--no-privileges",
                            "--quote-all-identifiers",
                            &format!("--restrict-key={POSTGRES_RESTRICT_KEY}"),
                        ]),
                        import: strings(&[
                            "psql",
                            "-X",
                            "-q",
                            "-v",
                            "ON_ERROR_STOP=1",
                            "--single-transaction",
                            "-f",
                            "-",
                        ]),
                        time_limit: default_checkpoint_limit(),
                        keep: default_checkpoint_keep(),
                    });
                }
            }
            Some(Preset::Mariadb) => {
                if c.ports.is_empty() {
                    c.ports = vec![MARIADB_PORT];
                }
                let r = &mut c.ready;
                if r.http.is_none() && r.tcp.is_none() && r.log.is_none() && r.exec.is_none() {
                    r.exec = Some(strings(&["mariadb", "-e", "select 1"]));
                }
                let port = format!("{{{{ ports[{}] }}}}", c.ports[0]);
                let defaults = [
                    ("DB_HOST", "{{ host }}".to_string()),
                    ("DB_PORT", port.clone()),
                    ("DB_USER", MARIADB_USER.to_string()),
                    ("DB_NAME", MARIADB_DATABASE.to_string()),
                    ("DATABASE_URL", format!("mysql://{MARIADB_USER}@{{{{ host }}}}:{port}/{MARIADB_DATABASE}")),
                ];
                for (name, value) in defaults {
                    c.expose.entry(name.to_string()).or_insert(value);
                }
                if c.checkpoint.is_none() {
                    c.checkpoint = Some(CheckpointConfig {
                        export: strings(&[
                            "mariadb-dump",
                            "--skip-dump-date",
                            "--skip-comments",
                            "--order-by-primary",
                            "--skip-extended-insert",
                            "--single-transaction",
                            MARIADB_DATABASE,
                        ]),
                        import: strings(&["mariadb", MARIADB_DATABASE]),
                        time_limit: default_checkpoint_limit(),
                        keep: default_checkpoint_keep(),
                    });
                }
            }
        }
        c
    }
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

/// Exactly one of `http`, `tcp`, `log`, `exec`.
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
    /// Ready when this command, run inside the container (with its `env`
    /// and the `expose` variables as seen from inside), exits 0: e.g. a
    /// query, so ready means the server answers one.
    #[serde(default)]
    pub exec: Option<Vec<String>>,
    /// How long to wait. Default 30s.
    #[serde(default = "default_ready_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
}

impl Default for ReadinessConfig {
    fn default() -> Self {
        Self { http: None, tcp: None, log: None, exec: None, time_limit: default_ready_limit() }
    }
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

/// Exactly one of `command`, `file`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SeedConfig {
    /// Argument vector, run in the worktree with PATH, HOME, LANG and the
    /// exposed variables as its whole environment.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// A file of the worktree (a relative path inside it) fed on stdin to
    /// the checkpoint's `import` command inside the container: for the
    /// `postgres` preset an SQL file, run in one transaction that stops at
    /// the first error. Needs a `checkpoint` section (or a preset's).
    #[serde(default)]
    pub file: Option<String>,
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
    Exec { command: Vec<String> },
}

impl ReadinessConfig {
    pub fn probe(&self) -> Option<Probe> {
        match (&self.http, self.tcp, &self.log, &self.exec) {
            (Some(h), None, None, None) => Some(Probe::Http { port: h.port, path: h.path.clone() }),
            (None, Some(port), None, None) => Some(Probe::Tcp { port }),
            (None, None, Some(text), None) => Some(Probe::Log { text: text.clone() }),
            (None, None, None, Some(command)) => Some(Probe::Exec { command: command.clone() }),
            _ => None,
        }
    }
}

/// What a seed is.
#[derive(Debug, Clone, PartialEq)]
pub enum Seed<'a> {
    Command(&'a [String]),
    File(&'a str),
}

impl SeedConfig {
    /// `None` when not exactly one of `command` and `file` is given.
    pub fn kind(&self) -> Option<Seed<'_>> {
        match (&self.command, &self.file) {
            (Some(c), None) => Some(Seed::Command(c)),
            (None, Some(f)) => Some(Seed::File(f)),
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
        None => p.push((rpath.clone(), "give exactly one of `http`, `tcp`, `log` or `exec`".into())),
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
        Some(Probe::Exec { command }) => {
            if command.first().is_none_or(|c| c.trim().is_empty()) {
                p.push((format!("{rpath}.exec"), "must name a program in the container".into()));
            }
        }
    }
    if e.ready.time_limit.is_zero() {
        p.push((format!("{rpath}.time_limit"), "must be longer than zero".into()));
    }
    if let Some(seed) = &e.seed {
        match seed.kind() {
            None => p.push((format!("{path}.seed"), "give exactly one of `command` or `file`".into())),
            Some(Seed::Command(command)) => {
                if command.first().is_none_or(|c| c.trim().is_empty()) {
                    p.push((format!("{path}.seed.command"), "must name a program, e.g. [\"./seed.sh\"]".into()));
                }
            }
            Some(Seed::File(file)) => {
                let rel = std::path::Path::new(file);
                let inside = !file.is_empty()
                    && rel.is_relative()
                    && rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
                if !inside {
                    p.push((
                        format!("{path}.seed.file"),
                        format!("`{file}` is not a relative path inside the repository, e.g. `db/seed.sql`"),
                    ));
                }
                if e.checkpoint().is_none() {
                    p.push((
                        format!("{path}.seed.file"),
                        "a seed file is fed to the checkpoint's `import` command: add a `checkpoint` section (or a \
                         `preset`), or seed with a `command`"
                            .into(),
                    ));
                }
            }
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
    fn the_postgres_preset_fills_in_port_readiness_expose_and_checkpoint() {
        let e = parse("preset: postgres\nimage: ward-postgres:15\nexpose: { PGUSER: reader }\n");
        assert_eq!(validate(&e, "emulator"), vec![]);
        assert_eq!(e.ports, vec![5432]);
        assert_eq!(e.ready.probe(), Some(Probe::Exec { command: strings(&["psql", "-X", "-q", "-c", "select 1"]) }));
        let vars = render_expose(&e.expose, &BTreeMap::from([(5432, 49160)])).unwrap();
        assert_eq!(vars["PGHOST"], "127.0.0.1");
        assert_eq!(vars["PGPORT"], "49160");
        assert_eq!(vars["PGUSER"], "reader", "the section's own variable wins over the preset's");
        assert_eq!(vars["PGDATABASE"], "app");
        assert_eq!(vars["DATABASE_URL"], "postgresql://postgres@127.0.0.1:49160/app");
        let c = e.checkpoint().unwrap();
        assert!(c.export.contains(&"--restrict-key=ward".to_string()), "{c:?}");
        assert!(c.import.contains(&"ON_ERROR_STOP=1".to_string()) && c.import.contains(&"--single-transaction".into()));
        // Given parts replace the preset's; a time limit alone keeps its probe.
        let mine = parse("preset: postgres\nimage: p:1\nports: [6543]\nready: { time_limit: 90s }\n");
        assert_eq!(mine.ports, vec![6543]);
        assert_eq!(mine.ready.time_limit, Duration::from_secs(90));
        assert!(matches!(mine.ready.probe(), Some(Probe::Exec { .. })));
        assert_eq!(validate(&mine, "emulator"), vec![]);
        let vars = render_expose(&mine.expose, &BTreeMap::from([(6543, 49161)])).unwrap();
        assert_eq!(vars["PGPORT"], "49161", "the preset's variables follow the first port listed");
    }

    #[test]
    fn the_mariadb_preset_fills_in_its_own() {
        let e = parse("preset: mariadb\nimage: ward-mariadb:1\nseed: { file: db/seed.sql }\n");
        assert_eq!(validate(&e, "emulator"), vec![]);
        assert_eq!(e.ports, vec![3306]);
        assert!(matches!(e.ready.probe(), Some(Probe::Exec { command }) if command[0] == "mariadb"));
        let vars = render_expose(&e.expose, &BTreeMap::from([(3306, 49170)])).unwrap();
        assert_eq!(vars["DATABASE_URL"], "mysql://app@127.0.0.1:49170/app");
        assert_eq!((vars["DB_PORT"].as_str(), vars["DB_NAME"].as_str()), ("49170", "app"));
        let c = e.checkpoint().unwrap();
        assert!(c.export.contains(&"--order-by-primary".to_string()) && c.export.contains(&"--skip-dump-date".into()));
        assert_eq!(c.import, vec!["mariadb", "app"], "no --force: it stops at the first error");
    }

    #[test]
    fn without_a_preset_ports_and_readiness_are_required() {
        let e = parse("image: x:1\n");
        let p = validate(&e, "emulator");
        assert!(p.iter().any(|(path, _)| path == "emulator.ports"), "{p:?}");
        assert!(p.iter().any(|(path, m)| path == "emulator.ready" && m.contains("exactly one")), "{p:?}");
        assert_eq!(e.checkpoint(), None);
    }

    #[test]
    fn a_seed_is_a_command_or_a_file_inside_the_repository_fed_to_the_import() {
        let both = parse(&format!("{GOOD}seed: {{ command: [./s], file: s.sql }}\n"));
        let p = validate(&both, "emulator");
        assert!(p.iter().any(|(path, m)| path == "emulator.seed" && m.contains("exactly one")), "{p:?}");
        let outside = parse("preset: postgres\nimage: p:1\nseed: { file: ../etc/passwd }\n");
        let p = validate(&outside, "emulator");
        assert!(p.iter().any(|(path, m)| path == "emulator.seed.file" && m.contains("relative path")), "{p:?}");
        let no_import =
            parse(&GOOD.replace("ward-docstore:test", "other:1").replace("expose:", "seed: { file: s.json }\nexpose:"));
        let p = validate(&no_import, "emulator");
        assert!(p.iter().any(|(path, m)| path == "emulator.seed.file" && m.contains("checkpoint")), "{p:?}");
        let good = parse("preset: postgres\nimage: p:1\nseed: { file: db/seed.sql }\n");
        assert_eq!(validate(&good, "emulator"), vec![]);
        assert_eq!(good.seed.unwrap().kind(), Some(Seed::File("db/seed.sql")));
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
