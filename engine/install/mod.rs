//! `ward init` on GitHub: the workflows the installation needs, written
//! into `.github/workflows/` already adapted to this repository, and the
//! repository's CI found and named in ward.yml (`ci.rs`).
//!
//! The shipped workflows ([`shipped`], every `ward-*.yml` of this ward,
//! whatever the set holds) build ward from ward's own
//! checkout. Adapted ([`adapt`]), each "Build ward" step becomes the action
//! pinned by the full commit sha of the release this ward belongs to
//! (`command: install`: the released binary, checksum verified, on `PATH`;
//! never a build from source), the steps then run `ward`, ward-stage.yml's
//! `workflow_run` wake-up lists the repository's CI workflows by name, and
//! ward-queue.yml is written only when ward.yml sets `integration:`.
//! Writing is idempotent ([`write_workflows`]): a file as this ward writes
//! it is left, a missing one written, and one that differs (the user's
//! edit, or another ward's) is never overwritten: it is named, with the
//! difference. `ward doctor --forge github` checks what this wrote.

pub mod ci;

use std::path::Path;

use include_dir::{Dir, include_dir};

static WORKFLOWS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/.github/workflows");

/// The workflows this ward ships for an installation (`ward-*.yml`, as
/// ward's own repository runs them: built from its checkout), by file name.
pub fn shipped() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = WORKFLOWS
        .files()
        .filter_map(|f| Some((f.path().file_name()?.to_str()?, f.contents_utf8()?)))
        .filter(|(name, _)| name.starts_with("ward-") && name.ends_with(".yml"))
        .collect();
    out.sort();
    out
}

/// The action of the release this binary belongs to, `owner/name@sha`:
/// set by the release workflow when it builds the release (`release.yml`).
const RELEASE_ACTION: Option<&str> = option_env!("WARD_RELEASE_ACTION");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The one `run:` of the shipped workflows that builds ward from its checkout.
pub const BUILD_WARD: &str = "cargo build --release --locked --bin ward";
/// How the shipped workflows call the ward they built.
const BUILT_WARD: &str = "./target/release/ward";

/// The ward action, pinned: `owner/name` and the full commit sha of a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRef {
    pub repository: String,
    pub sha: String,
}

/// A `--action` (or a `uses:`) that is not the ward action pinned by a full commit sha.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not the ward action pinned by a full commit sha: write `OWNER/NAME@<the 40-hex commit of the release \
     tag v{VERSION}>`"
)]
pub struct NotPinned(pub String);

impl ActionRef {
    /// `owner/name@<40 hex>`, or why not.
    pub fn parse(text: &str) -> Result<Self, NotPinned> {
        let bad = || NotPinned(text.to_string());
        let (repository, sha) = text.trim().split_once('@').ok_or_else(bad)?;
        let repo_ok = repository.parse::<crate::forge::github::RepoName>().is_ok();
        let sha_ok = sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
        if !repo_ok || !sha_ok {
            return Err(bad());
        }
        Ok(Self { repository: repository.into(), sha: sha.into() })
    }

    /// The action this binary was released with (`--action` names another).
    pub fn of_this_release() -> Option<Self> {
        RELEASE_ACTION.and_then(|a| Self::parse(a).ok())
    }

    /// The `uses:` value, with the version as GitHub's pinning convention writes it.
    pub fn uses(&self) -> String {
        format!("{}@{} # v{VERSION}", self.repository, self.sha)
    }
}

/// What a workflow of the installation should say in this repository:
/// `text` (a shipped workflow) with the action instead of the build, and,
/// for the stage's workflow, `ci_names` (the repository's CI workflows'
/// `name:`) as the workflows whose runs wake a waiting patient (none: no
/// `workflow_run` wake-up; reviews, check suites and statuses still wake).
pub fn adapt(text: &str, action: &ActionRef, ci_names: &[String]) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(step) = step_start(line)
            && let Some(end) = build_step_end(&lines, i, step)
        {
            let pad = " ".repeat(step);
            out.push(format!("{pad}- name: Install ward (the release's binary, checksum verified)"));
            if let Some(cond) = lines[i..end].iter().find_map(|l| l.trim_start().strip_prefix("if: ")) {
                out.push(format!("{pad}  if: {cond}"));
            }
            out.push(format!("{pad}  uses: {}", action.uses()));
            out.push(format!("{pad}  with:"));
            out.push(format!("{pad}    command: install"));
            i = end;
            continue;
        }
        out.push(line.replace(BUILT_WARD, "ward"));
        i += 1;
    }
    let mut text = out.join("\n") + "\n";
    if text.contains("\n  workflow_run:") {
        text = wake_ups(&text, ci_names);
    }
    text
}

/// The indentation of a step that starts on `line` (`- name: ...` or `- uses:`).
fn step_start(line: &str) -> Option<usize> {
    let trimmed = line.trim_start();
    trimmed.starts_with("- ").then(|| line.len() - trimmed.len())
}

/// Where the step starting at `lines[at]` (indented `indent`) ends, when it
/// is the one that builds ward.
fn build_step_end(lines: &[&str], at: usize, indent: usize) -> Option<usize> {
    let mut end = at + 1;
    while end < lines.len() {
        let l = lines[end];
        let depth = l.len() - l.trim_start().len();
        if !l.trim().is_empty() && depth <= indent {
            break;
        }
        end += 1;
    }
    // Trailing blank lines stay with what follows.
    while end > at + 1 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    let runs = |l: &&str| l.trim_start().trim_start_matches("- ").strip_prefix("run: ") == Some(BUILD_WARD);
    lines[at..end].iter().any(runs).then_some(end)
}

/// ward-stage.yml's `workflow_run: workflows: [...]` set to `ci_names`; the
/// trigger dropped when there are none (GitHub needs a name to match).
fn wake_ups(text: &str, ci_names: &[String]) -> String {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.starts_with("  workflow_run:") {
            out.push(line.to_string());
            continue;
        }
        let mut block = vec![line.to_string()];
        while let Some(next) = lines.peek() {
            if next.starts_with("    ")
                || next.trim().is_empty() && lines.clone().nth(1).is_some_and(|l| l.starts_with("    "))
            {
                block.push(lines.next().unwrap_or_default().to_string());
            } else {
                break;
            }
        }
        if ci_names.is_empty() {
            // The comment lines just above belong to the trigger too.
            while out.last().is_some_and(|l: &String| l.trim_start().starts_with('#') && l.starts_with("  ")) {
                out.pop();
            }
            continue;
        }
        let names: Vec<String> = ci_names.iter().map(|n| serde_json::to_string(n).unwrap_or_default()).collect();
        for l in block {
            if l.trim_start().starts_with("workflows:") {
                let pad = &l[..l.len() - l.trim_start().len()];
                out.push(format!("{pad}workflows: [{}]", names.join(", ")));
            } else {
                out.push(l);
            }
        }
    }
    out.join("\n") + "\n"
}

/// Every workflow file of the installation, adapted: (file name, text).
pub fn workflows(action: &ActionRef, ci_names: &[String], integration: bool) -> Vec<(String, String)> {
    shipped()
        .into_iter()
        .filter(|(name, _)| integration || *name != QUEUE_WORKFLOW)
        .map(|(name, text)| (name.to_string(), adapt(text, action, ci_names)))
        .collect()
}

/// The workflow that runs ward's own merge queue: only with `integration:`.
pub const QUEUE_WORKFLOW: &str = "ward-queue.yml";

/// What writing one workflow did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// It was missing: written.
    New,
    /// It says what this ward writes already: left.
    Same,
    /// It differs (edited, or another ward's): left as it is; the difference.
    Kept { difference: String },
}

/// Writes each of `files` under `root/.github/workflows/` where it is
/// missing; never overwrites one that exists.
pub fn write_workflows(root: &Path, files: &[(String, String)]) -> anyhow::Result<Vec<(String, Written)>> {
    let dir = root.join(".github/workflows");
    std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("could not create {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        let written = match std::fs::read_to_string(&path) {
            Ok(have) if have == *text => Written::Same,
            Ok(have) => Written::Kept { difference: difference(text, &have) },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("could not write {}: {e}", path.display()))?;
                Written::New
            }
            Err(e) => anyhow::bail!("could not read {}: {e}", path.display()),
        };
        out.push((name.clone(), written));
    }
    Ok(out)
}

/// The lines `have` differs from `want` by, as a diff reads (`-` this ward
/// writes, `+` the file has), at most 40 lines.
pub fn difference(want: &str, have: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), have.lines().collect());
    // The longest common subsequence of lines, from the end.
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("+ {}", b[j]));
            j += 1;
        } else {
            out.push(format!("- {}", a[i]));
            i += 1;
        }
    }
    let more = out.len().saturating_sub(40);
    out.truncate(40);
    if more > 0 {
        out.push(format!("... and {more} more lines"));
    }
    out.join("\n")
}

/// ward.yml's `ci:` section naming `found`, as `ward init` appends it.
pub fn ci_section(found: &[ci::CiWorkflow]) -> String {
    let files: Vec<String> = found.iter().map(|c| c.file.clone()).collect();
    format!(
        "\n# The repository's CI (found by `ward init`: its workflows that run on push or\n\
         # pull_request). ward starts each on a treatment branch with workflow_dispatch:\n\
         # the workflow token's pushes start no workflow, and the discharge audit waits\n\
         # for CI. Each needs `workflow_dispatch` in its `on:`.\n\
         ci:\n  workflows: [{}]\n",
        files.join(", ")
    )
}

/// `owner/name` of the repository's GitHub remote (`origin`, else the
/// first that is GitHub's), when it has one on github.com.
pub fn github_remote(root: &Path) -> Option<String> {
    let repo = git2::Repository::discover(root).ok()?;
    let names = repo.remotes().ok()?;
    let mut names: Vec<String> = names.iter().flatten().map(str::to_string).collect();
    names.sort_by_key(|n| n != "origin");
    names.into_iter().find_map(|n| repo.find_remote(&n).ok()?.url().and_then(github_repository))
}

/// `owner/name` of a github.com remote URL (https, ssh or scp-like).
pub fn github_repository(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://github.com/")
        .or_else(|| url.strip_prefix("http://github.com/"))
        .or_else(|| url.strip_prefix("git@github.com:"))
        .or_else(|| url.strip_prefix("ssh://git@github.com/"))?;
    let repo = rest.trim_end_matches('/').trim_end_matches(".git");
    repo.parse::<crate::forge::github::RepoName>().ok().map(|r| r.to_string())
}

/// What `ward init` needs to install for GitHub.
pub struct GitHubInit<'a> {
    pub root: &'a Path,
    /// `--into`: where the roles, skills and precedent log go.
    pub into: Option<&'a str>,
    /// `--agent`: the agent preset ward.yml names.
    pub agent: Option<&'a str>,
    /// `--action`: the action to pin, when not this release's own.
    pub action: Option<&'a str>,
    /// `owner/name` (`--repo`, `GITHUB_REPOSITORY` or the GitHub remote),
    /// for the labels and the charts branch, when a token can reach it.
    pub repo: Option<String>,
}

/// `ward init` for GitHub: the pipeline (when the repository has none yet;
/// then ward.yml names the CI found), the workflows adapted, the CI that
/// needs a `workflow_dispatch:` line named, and the labels and the charts
/// branch created when a token is at hand. The lines to print.
pub async fn init_github(init: &GitHubInit<'_>) -> anyhow::Result<Vec<String>> {
    let action = match init.action {
        Some(text) => ActionRef::parse(text)?,
        None => ActionRef::of_this_release().ok_or_else(|| {
            anyhow::anyhow!(
                "this ward {VERSION} was not built by a release, so it cannot pin the action by its release's \
                 commit: pass `--action OWNER/NAME@<the 40-hex commit of the tag v{VERSION}>` (ward never writes \
                 a workflow that builds ward from source); nothing was written"
            )
        })?,
    };
    let root = init.root;
    let mut lines = Vec::new();
    let found = ci::find(root);
    if root.join(crate::config::CONFIG_PATH).exists() {
        lines.push(format!(
            "{} is there: ward.yml, roles, skills and precedents left as they are",
            crate::config::CONFIG_PATH
        ));
    } else {
        let written = crate::defaults::install_into(root, init.into, init.agent)?;
        let config = root.join(crate::config::CONFIG_PATH);
        let text = std::fs::read_to_string(&config)?;
        std::fs::write(&config, format!("{text}{}", ci_section(&found)))?;
        lines.push(format!("wrote {} files: ward.yml, roles, skills, the precedent log, the schema", written.len()));
    }
    let config = crate::config::Config::load(root)?;
    let ci_names: Vec<String> = config
        .ci
        .workflows
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(root.join(".github/workflows").join(file)).unwrap_or_default();
            ci::name_of(file, &text)
        })
        .collect();
    let files = workflows(&action, &ci_names, config.integration.is_some());
    for (name, written) in write_workflows(root, &files)? {
        let path = format!(".github/workflows/{name}");
        lines.push(match written {
            Written::New => format!("wrote {path} (the action {})", action.uses()),
            Written::Same => format!("{path} is as this ward writes it"),
            Written::Kept { difference } => format!(
                "{path} differs from what this ward writes, so it was left as it is (yours); `-` is this ward's, \
                 `+` the file's:\n{}",
                difference.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
            ),
        });
    }
    lines.extend(ci_lines(&config, &found));
    lines.push(labels_line(init, &config).await);
    Ok(lines)
}

/// What init says of the repository's CI: what ward.yml names, what ward
/// cannot start yet and the one line that lets it.
fn ci_lines(config: &crate::config::Config, found: &[ci::CiWorkflow]) -> Vec<String> {
    if found.is_empty() {
        return vec![
            "ci: no workflow of the repository runs on push or pull_request; the discharge audit waits for CI, so \
             add one (and `workflow_dispatch:` in its `on:`), name it under `ci.workflows` in ward.yml"
                .into(),
        ];
    }
    let mut out = Vec::new();
    for c in found {
        let named = config.ci.workflows.contains(&c.file);
        out.push(format!(
            "ci: `{}` ({}, on {}){}",
            c.file,
            c.name,
            c.on.join(", "),
            if named {
                ": ward starts it on each treatment branch (ci.workflows)"
            } else {
                ": not in ward.yml's ci.workflows"
            }
        ));
        if named && !c.dispatchable {
            out.push(format!("ci: `{}` cannot be started by ward yet: {}", c.file, ci::how_to_dispatch(c)));
        }
    }
    out
}

/// The labels and the charts branch, created with the token at hand.
async fn labels_line(init: &GitHubInit<'_>, config: &crate::config::Config) -> String {
    let later = "run `ward doctor --forge github --fix` with a token that may write issues and contents \
                 (GITHUB_TOKEN=$(gh auth token)) to create them before the first admission";
    if crate::secrets::Secrets::global().github_token().is_none() {
        return format!("labels: not created (no WARD_TOKEN or GITHUB_TOKEN): {later}");
    }
    let forge = match crate::forge::github::GitHubForge::from_env(
        init.repo.as_deref(),
        &config.charts_branch,
        &config.engine_account,
    ) {
        Ok(f) => f,
        Err(e) => return format!("labels: not created ({e}): {later}"),
    };
    let made = async {
        crate::forge::Forge::ensure_labels(&forge, &config.label_specs()).await?;
        if !forge.has_charts_branch().await? {
            forge.set_up_charts_branch().await?;
        }
        Ok::<_, crate::forge::ForgeError>(())
    };
    match made.await {
        Ok(()) => format!(
            "labels: the {} of ward.yml exist in {}, and the charts branch `{}`",
            config.label_specs().len(),
            crate::forge::Forge::describe(&forge),
            config.charts_branch
        ),
        Err(e) => format!("labels: not created ({e}): {later}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action() -> ActionRef {
        ActionRef::parse("wardhq/ward@0123456789abcdef0123456789abcdef01234567").unwrap()
    }

    fn stage() -> &'static str {
        crate::doctor::workflows::shipped().into_iter().find(|(n, _)| *n == "ward-stage.yml").unwrap().1
    }

    #[test]
    fn every_build_becomes_the_pinned_action_and_every_call_the_installed_ward() {
        for (name, text) in crate::doctor::workflows::shipped() {
            let adapted = adapt(text, &action(), &["Tests".into()]);
            assert!(!adapted.contains(BUILD_WARD) && !adapted.contains(BUILT_WARD), "{name}:\n{adapted}");
            let builds = text.matches(BUILD_WARD).count();
            let installs = adapted.matches("uses: wardhq/ward@0123456789abcdef0123456789abcdef01234567 # v").count();
            assert_eq!(builds, installs, "{name}");
            let yaml: serde_yaml::Value = serde_yaml::from_str(&adapted).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(yaml.get("jobs").is_some(), "{name}");
            // Doctor finds every ward command of the shipped one in it.
            assert_eq!(crate::doctor::workflows::differences(text, &adapted).unwrap(), Vec::<String>::new(), "{name}");
        }
        let slot = adapt(stage(), &action(), &[]);
        assert!(slot.contains("        if: steps.cap.outputs.capped == 'true'\n        uses: wardhq/ward@"), "{slot}");
    }

    #[test]
    fn the_stage_wakes_after_the_repositorys_ci_and_without_ci_on_nothing_of_it() {
        let adapted = adapt(stage(), &action(), &["Tests".into(), "lint: \"all\"".into()]);
        assert!(adapted.contains("    workflows: [\"Tests\", \"lint: \\\"all\\\"\"]\n"), "{adapted}");
        let yaml: serde_yaml::Value = serde_yaml::from_str(&adapted).unwrap();
        assert_eq!(yaml["on"]["workflow_run"]["types"][0], "completed");
        let none = adapt(stage(), &action(), &[]);
        let yaml: serde_yaml::Value = serde_yaml::from_str(&none).unwrap();
        assert!(yaml["on"].get("workflow_run").is_none() && yaml["on"].get("status").is_some(), "{none}");
    }

    #[test]
    fn the_action_is_pinned_by_a_full_sha_or_refused() {
        assert!(ActionRef::parse("wardhq/ward@v0.1.0").is_err());
        assert!(ActionRef::parse("wardhq/ward@0123456").is_err());
        assert!(ActionRef::parse("ward@0123456789abcdef0123456789abcdef01234567").is_err());
        assert_eq!(action().uses(), format!("wardhq/ward@0123456789abcdef0123456789abcdef01234567 # v{VERSION}"));
    }

    #[test]
    fn a_file_that_differs_is_kept_and_its_difference_named() {
        let dir = tempfile::tempdir().unwrap();
        let files = vec![("ward-x.yml".to_string(), "a\nb\nc\n".to_string())];
        assert_eq!(write_workflows(dir.path(), &files).unwrap(), vec![("ward-x.yml".into(), Written::New)]);
        assert_eq!(write_workflows(dir.path(), &files).unwrap(), vec![("ward-x.yml".into(), Written::Same)]);
        let path = dir.path().join(".github/workflows/ward-x.yml");
        std::fs::write(&path, "a\nB\nc\n").unwrap();
        let again = write_workflows(dir.path(), &files).unwrap();
        assert_eq!(again, vec![("ward-x.yml".into(), Written::Kept { difference: "+ B\n- b".into() })]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nB\nc\n", "never overwritten");
    }

    #[test]
    fn a_github_remote_names_the_repository() {
        for url in [
            "https://github.com/pallets/click.git",
            "git@github.com:pallets/click.git",
            "ssh://git@github.com/pallets/click",
        ] {
            assert_eq!(github_repository(url).as_deref(), Some("pallets/click"), "{url}");
        }
        assert_eq!(github_repository("https://gitlab.com/a/b.git"), None);
    }
}
