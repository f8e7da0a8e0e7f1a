//! The `mariadb` emulator preset against a real MariaDB, the image
//! `images/mariadb/build` makes from Debian's packages (no registry): two
//! patients with the same database, table and keys, each reading back its
//! own write through a client of its own (a separate client container on
//! the host's network, over the published loopback port); a checkpoint
//! carried into the next stage and read back; every container removed.
//!
//! The image comes from `WARD_MARIADB_IMAGE` (`.ci/run` builds it and sets
//! it), else the newest local `ward-mariadb:*`. Without one the tests skip
//! with a notice, and fail when `WARD_REQUIRE_MARIADB=1` (`.ci/run`).

mod support;

use std::process::Command;

use support::workspace::*;
use ward::config::EmulatorConfig;
use ward::workspace::{Cancel, Workspace, WorkspaceRequest};

const SEED: &str = "\
create table dispatch_updates (
    id varchar(64) not null,
    partition_key varchar(64) not null,
    pickup_bay varchar(64) not null,
    primary key (id, partition_key)
);
insert into dispatch_updates values ('current-dispatch', 'SEA-01', 'BAY-2'), ('control-dispatch', 'PDX-02', 'BAY-99');
";

fn image() -> Option<String> {
    support::database_image("mariadb")
}

fn mariadb(image: &str) -> EmulatorConfig {
    let text =
        format!("preset: mariadb\nimage: {image}\nready: {{ time_limit: 60s }}\nseed: {{ file: db/seed.sql }}\n");
    let config: EmulatorConfig = serde_yaml::from_str(&text).unwrap();
    let problems = ward::config::emulator_validate(&config, "emulator");
    assert!(problems.is_empty(), "{problems:?}");
    config
}

fn request(repo: &TestRepo, issue: u64, stage: &str, run: &str, image: &str) -> WorkspaceRequest {
    let mut req = repo.request(issue, stage, run);
    req.emulator = Some(mariadb(image));
    req.checkpoints = true;
    req
}

/// `sql` through a client container of its own on the host's network,
/// with only the variables the agent gets (`DB_HOST`, `DB_PORT`, `DB_USER`,
/// `DB_NAME`): its output, tab-separated, without column names.
fn client(ws: &Workspace, image: &str, sql: &str) -> String {
    let env: std::collections::BTreeMap<String, String> = ws.agent_env().into_iter().collect();
    assert_eq!(env["DB_HOST"], "127.0.0.1");
    assert!(env["DATABASE_URL"].starts_with("mysql://app@127.0.0.1:"), "{env:?}");
    run(Command::new("docker").args([
        "run",
        "--rm",
        "--network",
        "host",
        "--entrypoint",
        "mariadb",
        image,
        "-h",
        &env["DB_HOST"],
        "-P",
        &env["DB_PORT"],
        "-u",
        &env["DB_USER"],
        &env["DB_NAME"],
        "-N",
        "-B",
        "-e",
        sql,
    ]))
}

const SELECT: &str = "select id, partition_key, pickup_bay from dispatch_updates order by 1, 2";
const MOVE: &str =
    "update dispatch_updates set pickup_bay = '{bay}' where id = 'current-dispatch' and partition_key = 'SEA-01'";

#[tokio::test]
async fn two_patients_each_read_back_their_own_write_and_a_checkpoint_reaches_code_review() {
    let Some(image) = image() else { return };
    let repo = TestRepo::new(&[("README.md", "dispatch\n"), ("db/seed.sql", SEED)]);
    let runs = vec![run_id("mdb-1"), run_id("mdb-2"), run_id("mdb-3")];
    let _janitor = DockerJanitor(runs.clone());
    let cancel = Cancel::new();
    let (a, b) = tokio::join!(
        Workspace::up(request(&repo, 1, "treat", &runs[0], &image), &cancel),
        Workspace::up(request(&repo, 2, "treat", &runs[1], &image), &cancel),
    );
    let (mut a, b) = (a.unwrap(), b.unwrap());
    client(&a, &image, &MOVE.replace("{bay}", "BAY-7"));
    client(&b, &image, &MOVE.replace("{bay}", "BAY-8"));
    assert_eq!(client(&a, &image, SELECT), "control-dispatch\tPDX-02\tBAY-99\ncurrent-dispatch\tSEA-01\tBAY-7\n");
    assert_eq!(client(&b, &image, SELECT), "control-dispatch\tPDX-02\tBAY-99\ncurrent-dispatch\tSEA-01\tBAY-8\n");
    std::fs::write(a.worktree.path.join("CHANGELOG.md"), "moved\n").unwrap();
    a.commit_leftovers().await.unwrap();
    let saved = a.checkpoint().await.unwrap().expect("the data changed");
    let dump = std::fs::read_to_string(&saved).unwrap();
    assert!(dump.contains("INSERT INTO `dispatch_updates` VALUES ('current-dispatch','SEA-01','BAY-7');"), "{dump}");
    for ws in [a, b] {
        let report = ws.down().await.unwrap();
        assert!(report.emulator_cleanup_verified && report.data.read_back, "{report:?}");
    }
    let ws = Workspace::up(request(&repo, 1, "code-review", &runs[2], &image), &cancel).await.unwrap();
    assert_eq!(client(&ws, &image, SELECT), "control-dispatch\tPDX-02\tBAY-99\ncurrent-dispatch\tSEA-01\tBAY-7\n");
    let view = ws.data_view(4096).expect("from the checkpoint");
    assert_eq!((view.diff.removed, view.diff.added), (1, 1), "{}", view.diff.text);
    let report = ws.down().await.unwrap();
    assert_eq!(report.data.loaded.as_deref(), Some(saved.as_path()));
    assert!(report.data.read_back && report.emulator_cleanup_verified, "{report:?}");
    for r in &runs {
        assert!(containers_of_run(r).is_empty(), "containers of {r} left");
    }
}
