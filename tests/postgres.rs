//! The `postgres` emulator preset against a real PostgreSQL 15, the image
//! `images/postgres/build` makes from Debian's packages (no registry):
//! two patients with the same database, table and keys, each reading back
//! its own write through a client of its own; a checkpoint carried into
//! the next stage, read back after its import; a quiet import failure (and
//! a seed that loads nothing) caught before the agent runs; every container
//! removed, and the removal verified.
//!
//! The image comes from `WARD_POSTGRES_IMAGE` (`.ci/run` builds it and sets
//! it), else the newest local `ward-postgres:*`. Without one the tests skip
//! with a notice, and fail when `WARD_REQUIRE_POSTGRES=1` (`.ci/run`).

mod support;

use std::process::Command;

use support::workspace::*;
use ward::config::EmulatorConfig;
use ward::workspace::{Cancel, Workspace, WorkspaceError, WorkspaceRequest};

const SEED: &str = "\
create table dispatch_updates (
    id text not null,
    partition_key text not null,
    pickup_bay text not null,
    primary key (id, partition_key)
);
insert into dispatch_updates values ('current-dispatch', 'SEA-01', 'BAY-2'), ('control-dispatch', 'PDX-02', 'BAY-99');
";

fn image() -> Option<String> {
    support::database_image("postgres")
}

/// The preset's section, with `extra` YAML lines.
fn postgres(image: &str, extra: &str) -> EmulatorConfig {
    let text = format!("preset: postgres\nimage: {image}\nready: {{ time_limit: 60s }}\n{extra}");
    let config: EmulatorConfig = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let problems = ward::config::emulator_validate(&config, "emulator");
    assert!(problems.is_empty(), "{problems:?}");
    config
}

fn seeded(image: &str) -> EmulatorConfig {
    postgres(image, "seed: { file: db/seed.sql }\n")
}

fn request(repo: &TestRepo, issue: u64, stage: &str, run: &str, config: EmulatorConfig) -> WorkspaceRequest {
    let mut req = repo.request(issue, stage, run);
    req.emulator = Some(config);
    req
}

/// A fresh connection from the host, made from the variables the agent
/// gets: `DATABASE_URL`, or (`by_parts`) `PGHOST`, `PGPORT`, `PGUSER`,
/// `PGDATABASE`. Every call is a new client.
async fn connect(ws: &Workspace, by_parts: bool) -> tokio_postgres::Client {
    let env: std::collections::BTreeMap<String, String> = ws.agent_env().into_iter().collect();
    let config = if by_parts {
        format!("host={} port={} user={} dbname={}", env["PGHOST"], env["PGPORT"], env["PGUSER"], env["PGDATABASE"])
    } else {
        env["DATABASE_URL"].clone()
    };
    assert!(env["PGHOST"] == "127.0.0.1" && env["DATABASE_URL"].contains("@127.0.0.1:"), "loopback only: {env:?}");
    let (client, conn) =
        tokio_postgres::connect(&config, tokio_postgres::NoTls).await.unwrap_or_else(|e| panic!("{config}: {e}"));
    tokio::spawn(conn);
    client
}

/// The stand-in agent's write, through `DATABASE_URL`: the row moves to `bay`.
async fn move_row(ws: &Workspace, bay: &str) {
    let client = connect(ws, false).await;
    let n = client
        .execute(
            "update dispatch_updates set pickup_bay = $1 where id = 'current-dispatch' and partition_key = 'SEA-01'",
            &[&bay],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// Every row, by key, read by a new client.
async fn rows(ws: &Workspace) -> Vec<(String, String, String)> {
    let client = connect(ws, true).await;
    let rows =
        client.query("select id, partition_key, pickup_bay from dispatch_updates order by 1, 2", &[]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

fn row(id: &str, pk: &str, bay: &str) -> (String, String, String) {
    (id.into(), pk.into(), bay.into())
}

fn assert_no_containers(runs: &[String]) {
    for run in runs {
        let left = containers_of_run(run);
        assert!(left.is_empty(), "containers of run {run} left behind: {left:?}");
    }
}

/// Each container's ports are on 127.0.0.1 only.
fn assert_loopback(ws: &Workspace) {
    let id = &ws.emulator.as_ref().unwrap().id;
    let ports = run_docker(&["port", id]);
    assert!(!ports.trim().is_empty() && ports.lines().all(|l| l.contains("127.0.0.1:")), "{ports}");
}

fn proof_repo() -> TestRepo {
    TestRepo::new(&[("README.md", "dispatch\n"), ("db/seed.sql", SEED), ("db/empty.sql", "-- nothing yet\n")])
}

/// Two patients at once, the same database, table and keys: each moves
/// `current-dispatch`/`SEA-01` to a bay of its own and reads back only its
/// own write through its own client; the control row is untouched in both.
#[tokio::test]
async fn two_patients_with_the_same_database_table_and_keys_each_read_back_their_own_write() {
    let Some(image) = image() else { return };
    let repo = proof_repo();
    let runs = vec![run_id("pg-isolation-1"), run_id("pg-isolation-2")];
    let _janitor = DockerJanitor(runs.clone());
    let cancel = Cancel::new();
    let (a, b) = tokio::join!(
        Workspace::up(request(&repo, 1, "treat", &runs[0], seeded(&image)), &cancel),
        Workspace::up(request(&repo, 2, "treat", &runs[1], seeded(&image)), &cancel),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.emulator.as_ref().unwrap().id, b.emulator.as_ref().unwrap().id);
    assert_loopback(&a);
    assert_loopback(&b);
    let seeded_rows = vec![row("control-dispatch", "PDX-02", "BAY-99"), row("current-dispatch", "SEA-01", "BAY-2")];
    assert_eq!(rows(&a).await, seeded_rows, "the seed file loaded");
    assert_eq!(rows(&b).await, seeded_rows);
    tokio::join!(move_row(&a, "BAY-7"), move_row(&b, "BAY-8"));
    assert_eq!(
        rows(&a).await,
        vec![row("control-dispatch", "PDX-02", "BAY-99"), row("current-dispatch", "SEA-01", "BAY-7")]
    );
    assert_eq!(
        rows(&b).await,
        vec![row("control-dispatch", "PDX-02", "BAY-99"), row("current-dispatch", "SEA-01", "BAY-8")]
    );
    for ws in [a, b] {
        let report = ws.down().await.unwrap();
        assert!(report.emulator_cleanup_verified, "{report:?}");
        assert_eq!(report.containers.len(), 1);
        let seed = report.seed.expect("seeded");
        assert!(seed.command[0].contains("ON_ERROR_STOP=1") && seed.command[0].ends_with("< db/seed.sql"), "{seed:?}");
    }
    assert_no_containers(&runs);
}

/// Data written in treatment is where code review's PostgreSQL starts: the
/// checkpoint (schema and data, `\restrict` with ward's fixed key, so two
/// exports of the same data are the same bytes) is imported and read back,
/// and the reviewer's data diff shows the one row that changed.
#[tokio::test]
async fn a_checkpoint_carries_the_treatments_rows_into_code_review_and_reads_back() {
    let Some(image) = image() else { return };
    let repo = proof_repo();
    let runs = vec![run_id("pg-checkpoint-1"), run_id("pg-checkpoint-2")];
    let _janitor = DockerJanitor(runs.clone());
    let cancel = Cancel::new();
    let mut req = request(&repo, 3, "treat", &runs[0], seeded(&image));
    req.checkpoints = true;
    let mut ws = Workspace::up(req, &cancel).await.unwrap();
    move_row(&ws, "BAY-7").await;
    let client = connect(&ws, false).await;
    client
        .batch_execute("create table bay_notes (bay text primary key); insert into bay_notes values ('BAY-7')")
        .await
        .unwrap();
    drop(client);
    std::fs::write(ws.worktree.path.join("CHANGELOG.md"), "moved the dispatch\n").unwrap();
    ws.commit_leftovers().await.unwrap().expect("the agent's edit");
    let saved = ws.checkpoint().await.unwrap().expect("the data changed");
    let report = ws.down().await.unwrap();
    assert!(report.data.read_back, "the seed was read back: {:?}", report.data);
    assert!(report.data.problems.is_empty(), "{:?}", report.data.problems);
    let dump = std::fs::read_to_string(&saved).unwrap();
    assert!(dump.contains("\\restrict ward\n") && dump.contains("\\unrestrict ward\n"), "{dump}");
    assert!(dump.contains("CREATE TABLE \"public\".\"dispatch_updates\""), "schema and data: {dump}");
    assert!(dump.contains("current-dispatch\tSEA-01\tBAY-7"), "{dump}");

    let mut req = request(&repo, 3, "code-review", &runs[1], seeded(&image));
    req.checkpoints = true;
    let ws = Workspace::up(req, &cancel).await.unwrap();
    assert_eq!(
        rows(&ws).await,
        vec![row("control-dispatch", "PDX-02", "BAY-99"), row("current-dispatch", "SEA-01", "BAY-7")]
    );
    let client = connect(&ws, true).await;
    let note: String = client.query_one("select bay from bay_notes", &[]).await.unwrap().get(0);
    assert_eq!(note, "BAY-7", "the new table came along");
    drop(client);
    // For the reviewer: the schema apart, each table's counts and
    // checksums, then the rows that changed.
    let view = ws.data_view(4096).expect("started from the checkpoint");
    let schema = view.schema.as_ref().expect("a pg_dump is read apart");
    assert_eq!(schema.removed, 0, "{}", schema.text);
    assert!(schema.text.contains("+ CREATE TABLE \"public\".\"bay_notes\" ("), "{}", schema.text);
    assert!(!schema.text.contains("dispatch_updates"), "the unchanged table is no schema change: {}", schema.text);
    let tables: Vec<_> =
        view.tables.iter().map(|t| (t.table.as_str(), t.rows_before, t.rows_after, t.changed())).collect();
    assert_eq!(
        tables,
        vec![
            ("\"public\".\"bay_notes\"", None, Some(1), true),
            ("\"public\".\"dispatch_updates\"", Some(2), Some(2), true)
        ]
    );
    assert_eq!((view.seed_kept, view.diff.removed, view.diff.added), (true, 1, 2), "{}", view.diff.text);
    assert_eq!(
        view.diff.text,
        "+ \"public\".\"bay_notes\": BAY-7\n\
         - \"public\".\"dispatch_updates\": current-dispatch\tSEA-01\tBAY-2\n\
         + \"public\".\"dispatch_updates\": current-dispatch\tSEA-01\tBAY-7\n"
    );
    assert!(!view.diff.text.contains("restrict") && !schema.text.contains("restrict"), "no restrict key in the diff");
    let report = ws.down().await.unwrap();
    assert_eq!(report.data.loaded.as_deref(), Some(saved.as_path()));
    assert!(report.data.read_back, "{:?}", report.data);
    assert!(report.emulator_cleanup_verified);
    assert_no_containers(&runs);
}

/// The issue's quiet failure: a data-only export and a plain `psql` import
/// (exit 0 on SQL errors) load nothing into the next stage's fresh server.
/// The read-back catches it: the stage stops before its agent, the
/// problem is in report.json, both exports are kept, and the container is
/// gone.
#[tokio::test]
async fn a_quiet_import_failure_stops_the_stage_before_the_agent_runs() {
    let Some(image) = image() else { return };
    let repo = proof_repo();
    let runs = vec![run_id("pg-quiet-1"), run_id("pg-quiet-2")];
    let _janitor = DockerJanitor(runs.clone());
    let cancel = Cancel::new();
    let quiet = || {
        postgres(
            &image,
            "seed: { file: db/seed.sql }\ncheckpoint:\n  export: [pg_dump, --data-only, --restrict-key=ward]\n  import: [psql, -q]\n",
        )
    };
    let mut req = request(&repo, 4, "treat", &runs[0], quiet());
    req.checkpoints = true;
    let mut ws = Workspace::up(req, &cancel).await.unwrap();
    move_row(&ws, "BAY-7").await;
    std::fs::write(ws.worktree.path.join("CHANGELOG.md"), "moved\n").unwrap();
    ws.commit_leftovers().await.unwrap();
    ws.checkpoint().await.unwrap().expect("the data changed");
    ws.down().await.unwrap();

    let mut req = request(&repo, 4, "code-review", &runs[1], quiet());
    req.checkpoints = true;
    let artifacts = req.artifacts.clone();
    let err = Workspace::up(req, &cancel).await.err().expect("the read-back fails");
    let WorkspaceError::ReadBack { what, detail, artifacts: kept } = &err else { panic!("{err:?}") };
    let message = err.to_string();
    assert!(what.starts_with("the checkpoint ") && detail.contains("differs from what was loaded"), "{message}");
    assert!(message.contains("stopped before its agent ran") && message.contains("ON_ERROR_STOP=1"), "{message}");
    let loaded = std::fs::read_to_string(kept.join("export.loaded")).unwrap();
    let back = std::fs::read_to_string(kept.join("export.read-back")).unwrap();
    assert!(loaded.contains("BAY-7") && !back.contains("BAY-7"), "loaded:\n{loaded}\nread back:\n{back}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(artifacts.join("report.json")).unwrap()).unwrap();
    let problems = report["data"]["problems"].as_array().unwrap();
    assert!(problems.iter().any(|p| p.as_str().unwrap().contains("did not read back")), "{report:#}");
    assert_eq!(report["emulator_cleanup_verified"], true, "{report:#}");
    assert_eq!(report["data"]["read_back"], false);
    assert_no_containers(&runs);
}

/// A seed that loads nothing is caught the same way (its export is the
/// empty server's), and a seed file with an error stops at it: the
/// preset's import runs in one transaction with `ON_ERROR_STOP`.
#[tokio::test]
async fn a_seed_that_loads_nothing_or_fails_stops_the_stage() {
    let Some(image) = image() else { return };
    let repo = proof_repo();
    std::fs::write(repo.path.join("db/broken.sql"), format!("{SEED}insert into no_such_table values (1);\n")).unwrap();
    run(repo.git().args(["add", "-A"]));
    run(repo.git().args(["commit", "--quiet", "-m", "broken seed"]));
    let runs = vec![run_id("pg-seed-1"), run_id("pg-seed-2")];
    let _janitor = DockerJanitor(runs.clone());
    let cancel = Cancel::new();

    let mut req = request(&repo, 5, "treat", &runs[0], postgres(&image, "seed: { file: db/empty.sql }\n"));
    req.checkpoints = true;
    let err = Workspace::up(req, &cancel).await.err().expect("an empty seed is caught");
    assert!(err.to_string().contains("the seed changed nothing"), "{err}");

    let req = request(&repo, 6, "treat", &runs[1], postgres(&image, "seed: { file: db/broken.sql }\n"));
    let err = Workspace::up(req, &cancel).await.err().expect("the seed fails");
    let WorkspaceError::Emulator(ward::workspace::emulator::EmulatorError::SeedFailed { log, .. }) = &err else {
        panic!("{err:?}")
    };
    let text = std::fs::read_to_string(log).unwrap();
    assert!(text.contains("no_such_table"), "{text}");
    assert_no_containers(&runs);
}

/// Readiness means the server answers a query: right after `up`, with no
/// retry, a new client's `select 1` succeeds.
#[tokio::test]
async fn ready_means_a_query_is_answered() {
    let Some(image) = image() else { return };
    let repo = proof_repo();
    let runs = vec![run_id("pg-ready")];
    let _janitor = DockerJanitor(runs.clone());
    let ws = Workspace::up(request(&repo, 8, "treat", &runs[0], postgres(&image, "")), &Cancel::new()).await.unwrap();
    let client = connect(&ws, false).await;
    let one: i32 = client.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    let version: String = client.query_one("show server_version", &[]).await.unwrap().get(0);
    assert!(version.starts_with("15."), "{version}");
    drop(client);
    let report = ws.down().await.unwrap();
    assert!(report.emulator_cleanup_verified);
    assert_no_containers(&runs);
}

/// In treatment the agent moves the row with `psql "$DATABASE_URL"` (the
/// host's client) and adds a file; the stand-in otherwise.
const PSQL_AGENT: &str = r#"ward=$1
if [ "$WARD_MODE" = treat ]; then
  psql -X -q "$DATABASE_URL" -v ON_ERROR_STOP=1 \
    -c "update dispatch_updates set pickup_bay = 'BAY-7' where id = 'current-dispatch' and partition_key = 'SEA-01'"
  echo "moved the dispatch" > CHANGELOG.md
fi
exec "$ward" stand-in
"#;

/// Through the stages with a checkpoint section that loses data quietly
/// (a data-only dump, plain `psql`): code review's workspace does not come
/// up, its agent never runs, and the chart's REFUSAL note and the run's
/// report.json say why.
#[tokio::test]
async fn through_the_stages_a_checkpoint_that_does_not_read_back_is_charted_and_code_review_never_runs() {
    use support::rules::label_of;
    use ward::forge::IssueNumber;
    let Some(image) = image() else { return };
    if !have_psql() {
        return;
    }
    let quiet = "  checkpoint:\n    export: [pg_dump, --data-only, --restrict-key=ward]\n    import: [psql, -q]\n";
    let s = psql_sandbox(&image, quiet);
    let (h, forge) = admitted(&s, &["Move the dispatch"]);
    let (at, error) =
        run_until(&h, &forge, 1, "ward:code-review").await.expect_err("code review ran on the wrong data");
    assert_eq!(at, "ward:code-review", "{error}");
    assert!(error.contains("did not read back") && error.contains("stopped before its agent ran"), "{error}");
    assert_eq!(label_of(&forge, 1), "ward:code-review", "the patient stays where it was");
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap();
    assert!(chart.contains("REFUSAL") && chart.contains("The stage stopped before its agent ran"), "{chart}");
    assert!(!chart.contains("CODE_REVIEW"), "no code review was written:\n{chart}");
    let reports: Vec<_> = walk(&h.artifacts, "report.json");
    let stopped: Vec<_> = reports
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter(|t| t.contains("did not read back"))
        .collect();
    assert!(!stopped.is_empty(), "a report.json records it: {reports:?}");
    let report: serde_json::Value = serde_json::from_str(&stopped[0]).unwrap();
    assert_eq!(report["emulator_cleanup_verified"], true, "{report:#}");
    assert_eq!(report["result"]["result"], "error", "{report:#}");
}

/// Whether the host's `psql` is there for the stand-in agent; `false`
/// (with the notice printed) to skip, a failure under `WARD_REQUIRE_POSTGRES=1`.
fn have_psql() -> bool {
    if Command::new("psql").arg("--version").output().is_ok() {
        return true;
    }
    let required = std::env::var("WARD_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    assert!(!required, "WARD_REQUIRE_POSTGRES=1 and psql is not installed: apt-get install postgresql-client");
    eprintln!("skipped: psql is not installed (apt-get install postgresql-client)");
    false
}

/// A sandbox whose agent is [`PSQL_AGENT`], with the preset's emulator
/// seeded from `db/seed.sql` (and `extra` lines in its section).
fn psql_sandbox(image: &str, extra: &str) -> support::Sandbox {
    psql_sandbox_with(image, extra, PSQL_AGENT)
}

/// [`psql_sandbox`] with `agent` as the agent's script.
fn psql_sandbox_with(image: &str, extra: &str, agent: &str) -> support::Sandbox {
    let s = support::Sandbox::new();
    s.write("agent.sh", agent);
    s.write("db/seed.sql", SEED);
    let script = s.root().join("agent.sh").display().to_string();
    s.edit_config(r#"command: ["{ward}", "stand-in"]"#, &format!(r#"command: ["sh", "{script}", "{{ward}}"]"#));
    s.edit_config(
        "\ndecomposition:\n",
        &format!(
            "\nemulator:\n  preset: postgres\n  image: {image}\n  ready: {{ time_limit: 60s }}\n  seed: {{ file: db/seed.sql }}\n{extra}\ndecomposition:\n"
        ),
    );
    s
}

/// The sandbox committed as a repository, its hospital on the local forge,
/// and an issue admitted for each of `titles` (#1, #2, ...).
fn admitted(
    s: &support::Sandbox,
    titles: &[&str],
) -> (ward::hospital::Hospital, std::sync::Arc<ward::forge::local::LocalForge>) {
    support::rules::git_init(s.root());
    let (h, forge) = support::rules::hospital(s, "reporter");
    for title in titles {
        let new = ward::forge::NewIssue {
            title: title.to_string(),
            body: "Through the stages.".into(),
            labels: vec!["ward:admit".into()],
        };
        forge.admit(new).unwrap();
    }
    (h, forge)
}

/// Runs issue `n`'s stages one after another until the stage at `label`
/// has run: `Err((the label it was at, the error))` at the first stage that
/// fails.
async fn run_until(
    h: &ward::hospital::Hospital,
    forge: &ward::forge::local::LocalForge,
    n: u64,
    label: &str,
) -> Result<(), (String, String)> {
    for _ in 0..12 {
        let before = support::rules::label_of(forge, n);
        let request = ward::stage::StageRequest::new(ward::forge::IssueNumber(n));
        if let Err(e) = ward::stage::run_stage(h, &request).await {
            return Err((before, format!("{e:#}")));
        }
        if before == label {
            return Ok(());
        }
    }
    panic!("#{n} did not reach `{label}` in 12 stages: it is at `{}`", support::rules::label_of(forge, n));
}

/// Through the stages with the preset as it is: the treatment's row is in
/// code review's database, and the reviewer's prompt has the tables'
/// counts and checksums, the schema unchanged, and the row that moved.
#[tokio::test]
async fn through_the_stages_the_code_reviewers_prompt_has_the_tables_the_schema_and_the_rows() {
    let Some(image) = image() else { return };
    if !have_psql() {
        return;
    }
    let s = psql_sandbox(&image, "");
    let (h, forge) = admitted(&s, &["Move the dispatch"]);
    if let Err((at, error)) = run_until(&h, &forge, 1, "ward:code-review").await {
        panic!("{at}: {error}");
    }
    let prompts: Vec<String> = walk(&h.artifacts, "prompt.md")
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter(|t| t.contains("## What the change did to the data"))
        .collect();
    assert_eq!(prompts.len(), 1, "code review's prompt, and only it, shows the data");
    let section = prompts[0].split("## What the change did to the data").nth(1).unwrap();
    assert!(
        section.contains("\"public\".\"dispatch_updates\": rows 2 -> 2, checksum ") && section.contains("  (changed)"),
        "{section}"
    );
    assert!(section.contains("The schema did not change."), "{section}");
    assert!(
        section.contains(
            "- \"public\".\"dispatch_updates\": current-dispatch\tSEA-01\tBAY-2\n+ \"public\".\"dispatch_updates\": current-dispatch\tSEA-01\tBAY-7"
        ),
        "{section}"
    );
}

/// The fellow adds a table through `DATABASE_URL`; for issue 2 it also
/// writes the migration that makes it.
const MIGRATING_AGENT: &str = r#"ward=$1
if [ "$WARD_MODE" = treat ]; then
  psql -X -q "$DATABASE_URL" -v ON_ERROR_STOP=1 -c "create table orders (id integer primary key)"
  echo "orders" > CHANGELOG.md
  if [ "$WARD_ISSUE" = 2 ]; then
    mkdir -p db/migrations
    echo "create table orders (id integer primary key);" > db/migrations/0001_orders.sql
  fi
fi
exec "$ward" stand-in
"#;

/// Through the stages with `discharge.migrations`: the treatment's new
/// table is recorded by the engine (a CHECKPOINT note of the head, read
/// from ward's own exports), and the audit fails the pull request that
/// carries no migration, naming the pattern and the table, and passes the
/// one that does.
#[tokio::test]
async fn through_the_stages_a_new_table_without_a_migration_fails_the_audit_and_one_with_it_passes() {
    use ward::forge::IssueNumber;
    use ward::rules::discharge_audit::{ItemId, Mark};
    let Some(image) = image() else { return };
    if !have_psql() {
        return;
    }
    let s = psql_sandbox_with(&image, "", MIGRATING_AGENT);
    s.edit_config(
        "  approver_permission: maintain\n",
        "  approver_permission: maintain\n  migrations: db/migrations/**\n",
    );
    let (h, forge) = admitted(&s, &["Add orders", "Add orders with its migration"]);
    for n in [1, 2] {
        if let Err((at, error)) = run_until(&h, &forge, n, "ward:treat").await {
            panic!("#{n} at {at}: {error}");
        }
    }
    let chart = std::fs::read_to_string(forge.chart_path(IssueNumber(1))).unwrap();
    let note = chart.split("<!-- WARD:CHECKPOINT").nth(1).expect("the engine's CHECKPOINT note");
    assert!(note.contains("Schema: changed against the seed: `\"public\".\"orders\"` (new)"), "{note}");
    let audit = |n| ward::discharge::audit::audit_issue(&*forge, &h.config, IssueNumber(n));
    let list = audit(1).await.unwrap();
    let item = list.item(ItemId::Migrations).expect("the migration item");
    assert_eq!(item.mark, Mark::Fail, "{}", list.render());
    assert!(
        item.note.contains("`\"public\".\"orders\"` (new)")
            && item.note.contains("no file matching `db/migrations/**`"),
        "{}",
        item.note
    );
    let list = audit(2).await.unwrap();
    let item = list.item(ItemId::Migrations).expect("the migration item");
    assert_eq!(item.mark, Mark::Pass, "{}", list.render());
    assert!(item.note.contains("`db/migrations/0001_orders.sql`"), "{}", item.note);
}

/// Every file named `name` under `dir`.
fn walk(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(walk(&p, name));
        } else if p.file_name().is_some_and(|n| n == name) {
            found.push(p);
        }
    }
    found
}
