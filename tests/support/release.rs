//! ward's release as its release workflow makes it, over the ward under
//! test: `release.yml`'s own "Package" and "SHA256SUMS" steps, run here, and
//! the release published on the fake GitHub, for the action's installer
//! (`action/install.sh`) to download, check and install: tests/action.rs,
//! and the workflows `ward init` writes, whose action installs it
//! (tests/workflows.rs).

use std::path::Path;
use std::sync::OnceLock;

use sha2::Digest as _;

use super::fake_github::FakeGitHub;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `RUNNER_ARCH` and the release target of this machine, and the other target.
pub fn platform() -> (&'static str, &'static str, &'static str) {
    match std::env::consts::ARCH {
        "x86_64" => ("X64", "x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"),
        "aarch64" => ("ARM64", "aarch64-unknown-linux-musl", "x86_64-unknown-linux-musl"),
        other => panic!("releases have no binary for {other}"),
    }
}

pub fn tarball(target: &str) -> String {
    format!("ward-{VERSION}-{target}.tar.gz")
}

pub fn sha256(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The `run:` script of the step named `name` in `.github/workflows/release.yml`.
pub fn release_step(name: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(".github/workflows/release.yml")).unwrap();
    let workflow: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let jobs = workflow["jobs"].as_mapping().unwrap();
    let step = jobs
        .values()
        .flat_map(|job| job["steps"].as_sequence().unwrap())
        .find(|step| step["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("release.yml has no step named `{name}`"));
    step["run"].as_str().unwrap().to_string()
}

/// Runs a workflow step's script the way the runner does (`bash -e`), in
/// `dir`, with only PATH, HOME and `env`.
pub fn run_step(script: &str, dir: &Path, env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new("bash")
        .args(["--noprofile", "--norc", "-e", "-c", script])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .envs(env.iter().copied())
        .output()
        .expect("bash runs")
}

/// What the release workflow attaches to a release.
pub struct Release {
    /// This platform's tarball, holding the ward under test, and its SHA-256.
    pub bytes: Vec<u8>,
    pub sha256: String,
    /// The other platform's tarball (a stand-in binary: it never runs here).
    pub other: Vec<u8>,
    pub sums: Vec<u8>,
}

/// Runs release.yml's own "Package" step for both targets (over the ward
/// under test for this platform) and its "SHA256SUMS" step. Built once.
pub fn release() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(|| {
        let (_, target, other) = platform();
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(repo_root().join("README.md"), dir.path().join("README.md")).unwrap();
        for (t, bin) in [(target, Path::new(env!("CARGO_BIN_EXE_ward"))), (other, &dir.path().join("README.md"))] {
            let built = dir.path().join(format!("target/{t}/release"));
            std::fs::create_dir_all(&built).unwrap();
            std::fs::copy(bin, built.join("ward")).unwrap();
            let out = run_step(&release_step("Package"), dir.path(), &[("TARGET", t), ("VERSION", VERSION)]);
            assert!(out.status.success(), "Package ({t}): {}", String::from_utf8_lossy(&out.stderr));
        }
        let dist = dir.path().join("dist");
        let out = run_step(&release_step("SHA256SUMS"), &dist, &[("VERSION", VERSION)]);
        assert!(out.status.success(), "SHA256SUMS: {}", String::from_utf8_lossy(&out.stderr));
        let bytes = std::fs::read(dist.join(tarball(target))).unwrap();
        Release {
            sha256: sha256(&bytes),
            bytes,
            other: std::fs::read(dist.join(tarball(other))).unwrap(),
            sums: std::fs::read(dist.join("SHA256SUMS")).unwrap(),
        }
    })
}

/// Publishes `v<version>` of `repository` (the action's) on the fake, as
/// the release workflow attaches it: both platforms' tarballs and SHA256SUMS.
pub fn publish_this_ward(gh: &FakeGitHub, repository: &str) {
    let (_, target, other) = platform();
    let r = release();
    gh.state().publish_release(
        repository,
        &format!("v{VERSION}"),
        &[(&tarball(other), r.other.clone()), (&tarball(target), r.bytes.clone()), ("SHA256SUMS", r.sums.clone())],
    );
}
