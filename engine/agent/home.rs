//! The agent's own corner of the run: a private HOME (with the XDG folders
//! under it), a temp folder, and the notes file, made fresh for each run
//! under the run's folder and removed when it ends. The CLIs write their
//! state, caches, telemetry queues and session logs under HOME; none of it
//! reaches the runner's HOME, and none of it outlives the run except the
//! session log, which ward keeps with the run's artifacts.
//!
//! ```text
//! <run folder>/agent/home/   HOME, XDG_CONFIG_HOME=home/.config, ...: the
//!                            preset's configuration files copied from the
//!                            user's HOME (never a credential)
//!                 tmp/       TMPDIR (writable under every CLI's own sandbox,
//!                 tmp/ward-notes.md  so $WARD_NOTES is written there)
//! <run folder>/transcript/   the session logs found under home/, bounded
//! ```

use std::path::{Path, PathBuf};

use super::AgentError;
use crate::config::agents::{Gateway, Preset};

/// Folder names under the run's folder.
const AREA: &str = "agent";
/// Where an agent without a shell (aider) finds its notes file: in the
/// worktree, as a file of its repository (git is told to ignore it), since
/// aider takes its repository from the files it is given.
pub const NOTES_IN_WORKTREE: &str = ".ward-notes.md";
/// Its line in git's `info/exclude`.
pub const NOTES_IN_WORKTREE_IGNORED: &str = "/.ward-notes.md";
pub const TRANSCRIPT_DIR: &str = "transcript";
/// The most of one configuration file that is copied.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The most of the session logs kept with a run.
pub const MAX_TRANSCRIPT_BYTES: u64 = 8 << 20;

/// What a run's area is made from.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The user's HOME (ward's own), where configuration files are copied from.
    pub user_home: Option<PathBuf>,
    /// Files under it to copy (the preset's).
    pub home_files: Vec<String>,
    /// Written into the private HOME for a CLI configured by file (codex).
    pub codex: Option<CodexSettings>,
}

/// codex's `config.toml` in the private `$CODEX_HOME`: the user's, with
/// its telemetry off and the gateway set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CodexSettings {
    pub base_url: Option<String>,
}

impl Setup {
    /// The setup a preset asks for, with the gateway's URL when there is one.
    pub fn for_preset(preset: &Preset, user_home: Option<PathBuf>, gateway: Option<&str>) -> Self {
        Setup {
            user_home,
            home_files: preset.home_files.iter().map(|f| f.to_string()).collect(),
            codex: (preset.gateway == Gateway::CodexConfig)
                .then(|| CodexSettings { base_url: gateway.map(str::to_string) }),
        }
    }
}

/// One run's private HOME, temp folder and notes file.
#[derive(Debug, Clone, PartialEq)]
pub struct Area {
    pub root: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    /// `$WARD_NOTES`.
    pub notes: PathBuf,
}

fn io(action: String) -> impl FnOnce(std::io::Error) -> AgentError {
    move |e| AgentError::Io { action, message: e.to_string() }
}

impl Area {
    /// Where a run folder's area is.
    pub fn at(run_folder: &Path) -> Area {
        let root = run_folder.join(AREA);
        let tmp = root.join("tmp");
        Area { home: root.join("home"), notes: tmp.join("ward-notes.md"), tmp, root }
    }

    /// Where the area of an agent running `preset` is: the notes file in the
    /// worktree for an agent without a shell.
    pub fn for_agent(run_folder: &Path, worktree: &Path, preset: Option<&Preset>) -> Area {
        match preset {
            Some(p) if !p.shell => Area { notes: worktree.join(NOTES_IN_WORKTREE), ..Area::at(run_folder) },
            _ => Area::at(run_folder),
        }
    }

    /// Makes the area at its usual place.
    pub fn make(run_folder: &Path, setup: &Setup) -> Result<Area, AgentError> {
        Area::make_at(Area::at(run_folder), setup)
    }

    /// Makes `area` afresh (what an earlier attempt of this run left is
    /// removed first), puts the setup's files in, and an empty notes file
    /// (aider adds only a file that exists to its chat).
    pub fn make_at(area: Area, setup: &Setup) -> Result<Area, AgentError> {
        remove_tree(&area.root);
        for dir in [&area.home, &area.tmp] {
            std::fs::create_dir_all(dir).map_err(io(format!("create the agent's folder {}", dir.display())))?;
        }
        std::fs::write(&area.notes, "").map_err(io(format!("create the notes file {}", area.notes.display())))?;
        if let Some(user_home) = &setup.user_home {
            for rel in &setup.home_files {
                copy_config(user_home, &area.home, rel)?;
            }
        }
        if let Some(codex) = &setup.codex {
            write_codex_config(&area.home, codex)?;
        }
        Ok(area)
    }

    /// HOME and the folders programs derive from it, and the temp folder.
    pub fn env(&self) -> Vec<(String, String)> {
        let at = |p: PathBuf| p.to_string_lossy().into_owned();
        let tmp = at(self.tmp.clone());
        vec![
            ("HOME".into(), at(self.home.clone())),
            ("XDG_CONFIG_HOME".into(), at(self.home.join(".config"))),
            ("XDG_CACHE_HOME".into(), at(self.home.join(".cache"))),
            ("XDG_DATA_HOME".into(), at(self.home.join(".local/share"))),
            ("XDG_STATE_HOME".into(), at(self.home.join(".local/state"))),
            ("TMPDIR".into(), tmp.clone()),
            ("TMP".into(), tmp.clone()),
            ("TEMP".into(), tmp),
        ]
    }

    /// Copies the session logs the preset names from the private HOME into
    /// `<run folder>/transcript/`, newest first, at most
    /// [`MAX_TRANSCRIPT_BYTES`] in all (a log that does not fit whole keeps
    /// its beginning). Returns the files kept, relative to the run folder.
    pub fn keep_transcripts(&self, run_folder: &Path, transcripts: &[(&str, &str)]) -> Vec<String> {
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for (dir, ending) in transcripts {
            let top = self.home.join(dir);
            let depth = if dir.is_empty() { 0 } else { 8 };
            find_files(&top, ending, depth, &mut found);
        }
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        let out = run_folder.join(TRANSCRIPT_DIR);
        let mut room = MAX_TRANSCRIPT_BYTES;
        let mut kept = Vec::new();
        for (_, path) in found {
            if room == 0 {
                break;
            }
            let Ok(rel) = path.strip_prefix(&self.home) else { continue };
            let to = out.join(rel);
            let Some(parent) = to.parent() else { continue };
            if std::fs::create_dir_all(parent).is_err() {
                continue;
            }
            let Ok(file) = std::fs::File::open(&path) else { continue };
            let Ok(mut dest) = std::fs::File::create(&to) else { continue };
            use std::io::Read;
            let copied = std::io::copy(&mut file.take(room), &mut dest).unwrap_or(0);
            room -= copied;
            kept.push(format!("{TRANSCRIPT_DIR}/{}", rel.to_string_lossy()));
        }
        kept
    }

    /// Removes the area, whatever the agent left in it (read-only folders
    /// included; links are removed, never followed).
    pub fn remove(&self) {
        remove_tree(&self.root);
    }
}

/// Copies `rel` from the user's HOME when it is a plain file of a sane size:
/// a link is not followed (it could point at a credential).
fn copy_config(user_home: &Path, home: &Path, rel: &str) -> Result<(), AgentError> {
    let from = user_home.join(rel);
    let Ok(meta) = from.symlink_metadata() else { return Ok(()) };
    if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
        return Ok(());
    }
    let to = home.join(rel);
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(io(format!("create {}", parent.display())))?;
    }
    std::fs::copy(&from, &to).map_err(io(format!("copy {} into the agent's HOME", from.display())))?;
    Ok(())
}

/// `$HOME/.codex/config.toml`: the user's settings kept, codex's analytics
/// and update check off, and `openai_base_url` set when a gateway is named
/// (codex ignores `OPENAI_BASE_URL`).
fn write_codex_config(home: &Path, codex: &CodexSettings) -> Result<(), AgentError> {
    let path = home.join(".codex/config.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| AgentError::Io {
        action: "read the codex configuration copied from your HOME (~/.codex/config.toml)".into(),
        message: format!("{e}; fix the file, or remove it"),
    })?;
    doc["analytics"]["enabled"] = toml_edit::value(false);
    doc["check_for_update_on_startup"] = toml_edit::value(false);
    // Behind the walls /tmp is read-only (its TMPDIR is the private temp
    // folder): codex's sandbox, told /tmp is writable, makes a mount point
    // in it (`/tmp/.git`, kept read-only) and fails with EROFS.
    doc["sandbox_workspace_write"]["exclude_slash_tmp"] = toml_edit::value(true);
    if let Some(url) = &codex.base_url {
        doc["openai_base_url"] = toml_edit::value(url.as_str());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(format!("create {}", parent.display())))?;
    }
    std::fs::write(&path, doc.to_string()).map_err(io(format!("write {}", path.display())))
}

/// Regular files under `dir` whose name ends with `ending`, `depth` folders deep.
fn find_files(dir: &Path, ending: &str, depth: usize, found: &mut Vec<(std::time::SystemTime, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten().take(10_000) {
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        let path = entry.path();
        if meta.is_dir() && depth > 0 {
            find_files(&path, ending, depth - 1, found);
        } else if meta.is_file() && path.to_string_lossy().ends_with(ending) {
            found.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), path));
        }
    }
}

/// Removes a tree the agent wrote: folders it made read-only are opened
/// first, so nothing of the run is left behind.
fn remove_tree(root: &Path) {
    if std::fs::remove_dir_all(root).is_ok() || root.symlink_metadata().is_err() {
        return;
    }
    open_up(root);
    let _ = std::fs::remove_dir_all(root);
}

fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = dir.symlink_metadata() else { return };
    if !meta.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            open_up(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::agents::preset;

    #[test]
    fn the_area_holds_the_presets_configuration_and_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user");
        std::fs::create_dir_all(user.join(".claude")).unwrap();
        std::fs::write(user.join(".claude/settings.json"), "{\"model\":\"sonnet\"}").unwrap();
        std::fs::write(user.join("secret"), "CANARY").unwrap();
        std::os::unix::fs::symlink(user.join("secret"), user.join(".claude/CLAUDE.md")).unwrap();
        let run = dir.path().join("run");
        let setup = Setup::for_preset(preset("claude-code").unwrap(), Some(user.clone()), None);
        let area = Area::make(&run, &setup).unwrap();
        assert_eq!(std::fs::read_to_string(area.home.join(".claude/settings.json")).unwrap(), "{\"model\":\"sonnet\"}");
        assert!(!area.home.join(".claude/CLAUDE.md").exists(), "a link is not followed");
        let env = area.env();
        assert!(env.contains(&("HOME".into(), area.home.display().to_string())));
        assert!(env.contains(&("TMPDIR".into(), area.tmp.display().to_string())));
        assert!(area.notes.starts_with(&area.tmp), "the notes are where every CLI's sandbox lets it write");
    }

    #[test]
    fn codex_gets_its_gateway_in_its_configuration_with_the_users_settings_kept() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user");
        std::fs::create_dir_all(user.join(".codex")).unwrap();
        std::fs::write(user.join(".codex/config.toml"), "model = \"o9\"\n[analytics]\nenabled = true\n").unwrap();
        let setup = Setup::for_preset(preset("codex").unwrap(), Some(user), Some("https://gw.example/v1"));
        let area = Area::make(&dir.path().join("run"), &setup).unwrap();
        let text = std::fs::read_to_string(area.home.join(".codex/config.toml")).unwrap();
        let doc: toml_edit::DocumentMut = text.parse().unwrap();
        assert_eq!(doc["model"].as_str(), Some("o9"));
        assert_eq!(doc["openai_base_url"].as_str(), Some("https://gw.example/v1"));
        assert_eq!(doc["analytics"]["enabled"].as_bool(), Some(false));
        assert_eq!(doc["sandbox_workspace_write"]["exclude_slash_tmp"].as_bool(), Some(true), "{text}");
        assert_eq!(doc["check_for_update_on_startup"].as_bool(), Some(false));
    }

    #[test]
    fn transcripts_are_kept_bounded_and_the_area_goes_even_read_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let area = Area::make(&run, &Setup::default()).unwrap();
        let session = area.home.join(".claude/projects/-w/abc.jsonl");
        std::fs::create_dir_all(session.parent().unwrap()).unwrap();
        std::fs::write(&session, "{\"type\":\"user\"}\n").unwrap();
        std::fs::write(area.home.join(".claude/projects/-w/other.txt"), "no").unwrap();
        let locked = area.home.join(".cache/go/mod");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("f"), "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let kept = area.keep_transcripts(&run, &[(".claude/projects", ".jsonl")]);
        assert_eq!(kept, ["transcript/.claude/projects/-w/abc.jsonl"]);
        assert_eq!(std::fs::read_to_string(run.join(&kept[0])).unwrap(), "{\"type\":\"user\"}\n");
        area.remove();
        assert!(!area.root.exists(), "the area is gone");
        assert!(run.join(&kept[0]).exists(), "the transcript stays");
    }
}
