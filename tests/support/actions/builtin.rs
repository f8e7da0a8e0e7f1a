//! The actions the runner implements itself: `actions/checkout` (a real
//! clone over smart HTTP), `actions/upload-artifact` and
//! `actions/download-artifact` (a store per run), `actions/cache` (a
//! miss), and the ward action (composite.rs). Any other `uses:` fails the
//! step and, on drop, the test.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::expr;
use super::job::JobExec;
use super::step::{self, StepRecord};
use super::{JobState, Runner, STEP_LIMIT};
use crate::support::fake_github::{OWNER, REPO};

impl Runner<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn use_action(
        &mut self,
        job: &mut JobExec,
        r: usize,
        j: usize,
        uses: &str,
        with: &Value,
        token: &str,
        record: &mut StepRecord,
    ) -> Result<(), String> {
        let name = uses.split('@').next().unwrap_or(uses).to_lowercase();
        let input = |k: &str| with.get(k).map(expr::to_string);
        let result = match name.as_str() {
            "actions/checkout" => self.checkout(job, r, &input, token).await,
            "actions/upload-artifact" => self.upload_artifact(job, r, &input),
            "actions/download-artifact" => self.download_artifact(job, r, &input),
            "actions/cache" | "actions/cache/restore" => {
                record.outputs.insert("cache-hit".into(), "false".into());
                Ok(format!("Cache not found for input keys: {}\n", input("key").unwrap_or_default()))
            }
            n if n == super::composite::WARD_ACTION_REPO => self.ward_action(job, r, j, with, token, record).await,
            _ => {
                self.unsupported.push(format!("{}: `uses: {uses}`", self.runs[r].workflow));
                Err(format!("the test runner does not implement the action `{uses}`"))
            }
        };
        match result {
            Ok(log) => {
                record.log = job.commands.mask(&log);
                Ok(())
            }
            Err(e) => {
                record.log = job.commands.mask(&e);
                self.annotate(r, j, "error", &job.commands.mask(&e));
                Err(e)
            }
        }
    }

    /// actions/checkout: a real clone over smart HTTP with the job's token.
    pub(super) async fn checkout(
        &mut self,
        job: &JobExec,
        r: usize,
        input: &dyn Fn(&str) -> Option<String>,
        token: &str,
    ) -> Result<String, String> {
        if let Some(repo) = input("repository").filter(|x| !x.is_empty() && *x != format!("{OWNER}/{REPO}")) {
            self.unsupported.push(format!("actions/checkout of another repository ({repo})"));
            return Err(format!("the test runner checks out {OWNER}/{REPO} only, not {repo}"));
        }
        for unsupported in ["sparse-checkout", "lfs", "submodules"] {
            if input(unsupported).is_some_and(|v| !v.is_empty() && v != "false") {
                self.unsupported.push(format!("actions/checkout with `{unsupported}`"));
                return Err(format!("the test runner does not implement checkout's `{unsupported}`"));
            }
        }
        let token = input("token").filter(|t| !t.is_empty()).unwrap_or_else(|| token.to_string());
        let persist = input("persist-credentials").is_none_or(|p| p != "false");
        let depth: u32 = input("fetch-depth").and_then(|d| d.parse().ok()).unwrap_or(1);
        let dest = job.workspace.join(input("path").unwrap_or_default());
        let run = &self.runs[r];
        let (sha, git_ref) = match input("ref").filter(|x| !x.is_empty()) {
            Some(x) => {
                let resolved = self
                    .gh
                    .state()
                    .git
                    .resolve(&x)
                    .ok_or_else(|| format!("A branch or tag with the name '{x}' could not be found"))?;
                let full = if x.starts_with("refs/") || resolved == x { x } else { format!("refs/heads/{x}") };
                (resolved, full)
            }
            None => (run.sha.clone(), run.git_ref.clone()),
        };
        let (target, branch) = if let Some(b) = git_ref.strip_prefix("refs/heads/") {
            (format!("refs/remotes/origin/{b}"), Some(b.to_string()))
        } else if let Some(p) = git_ref.strip_prefix("refs/pull/") {
            (format!("refs/remotes/pull/{p}"), None)
        } else if git_ref.starts_with("refs/tags/") {
            (git_ref.clone(), None)
        } else {
            (format!("refs/remotes/origin/{sha}"), None)
        };
        let server = format!("{}/", self.gh.url);
        let remote = self.gh.git_url();
        let basic = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"))
        };
        let header_key = format!("http.{server}.extraheader");
        let header = format!("AUTHORIZATION: basic {basic}");
        let fetch_refs = if depth > 0 {
            vec![format!("--depth={depth}"), "origin".into(), format!("+{sha}:{target}")]
        } else {
            // As checkout's `getRefSpecForAllHistory`: every branch and tag,
            // and the commit itself only for a pull request's ref (a
            // branch's would name `refs/remotes/origin/<b>` twice, which git refuses).
            let all = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"].map(String::from);
            let pull = target.starts_with("refs/remotes/pull/").then(|| format!("+{sha}:{target}"));
            ["origin".to_string()].into_iter().chain(all).chain(pull).collect()
        };
        let checkout = match &branch {
            Some(b) => vec!["-B".to_string(), b.clone(), target.clone()],
            None => vec![target.clone()],
        };
        // What actions/checkout runs, in the order it runs it.
        let words = |list: &[&str]| -> Vec<String> { list.iter().map(|w| w.to_string()).collect() };
        let mut cmds: Vec<Vec<String>> = vec![
            words(&["init", "-q", "."]),
            words(&["remote", "add", "origin", &remote]),
            words(&["config", "--local", &header_key, &header]),
            [
                words(&["-c", "protocol.version=2", "fetch", "--no-tags", "--prune", "--no-recurse-submodules"]),
                fetch_refs,
            ]
            .concat(),
            [words(&["checkout", "-q", "--force"]), checkout].concat(),
        ];
        if !persist {
            cmds.push(words(&["config", "--local", "--unset-all", &header_key]));
        }
        std::fs::create_dir_all(&dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
        let env = job.env.clone();
        let mut log = String::new();
        for args in cmds {
            let mut cmd = std::process::Command::new("git");
            cmd.current_dir(&dest).args(&args).env_clear().envs(&env).env("GIT_TERMINAL_PROMPT", "0");
            let shown = format!(
                "git {}\n",
                args.iter().filter(|a| !a.starts_with("AUTHORIZATION")).cloned().collect::<Vec<_>>().join(" ")
            );
            let (code, out) = tokio::task::spawn_blocking(move || step::run_process(cmd, STEP_LIMIT)).await.unwrap();
            log.push_str(&shown);
            log.push_str(&out);
            if code != 0 {
                return Err(format!("{log}The process 'git' failed with exit code {code}"));
            }
        }
        Ok(log)
    }

    pub(super) fn upload_artifact(
        &mut self,
        job: &JobExec,
        r: usize,
        input: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let name = input("name").filter(|n| !n.is_empty()).unwrap_or_else(|| "artifact".into());
        if let Some(bad) = name.chars().find(|c| "\":<>|*?\r\n\\/".contains(*c)) {
            return Err(format!("The artifact name is not valid: {name}. Contains the following character: {bad:?}"));
        }
        let hidden = input("include-hidden-files").is_some_and(|v| v == "true");
        let overwrite = input("overwrite").is_some_and(|v| v == "true");
        let missing = input("if-no-files-found").unwrap_or_else(|| "warn".into());
        let paths: Vec<String> =
            input("path").unwrap_or_default().lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
        if paths.iter().any(|p| p.contains(['*', '?', '[']) || p.starts_with('!')) {
            self.unsupported.push("actions/upload-artifact with patterns".into());
            return Err("the test runner uploads plain paths only".into());
        }
        let mut found: Vec<(PathBuf, PathBuf)> = Vec::new();
        for p in &paths {
            let abs = if Path::new(p).is_absolute() { PathBuf::from(p) } else { job.workspace.join(p) };
            if abs.is_file() {
                found.push((abs.clone(), PathBuf::from(abs.file_name().unwrap())));
            } else if abs.is_dir() {
                collect_files(&abs, &abs, hidden, &mut found);
            }
        }
        if found.is_empty() {
            let text = format!(
                "No files were found with the provided path: {}. No artifacts will be uploaded.",
                paths.join(", ")
            );
            return match missing.as_str() {
                "error" => Err(text),
                "ignore" => Ok(format!("{text}\n")),
                _ => {
                    let n = self.runs[r]
                        .jobs
                        .iter()
                        .position(|x| x.state != JobState::Completed && x.started_at.is_some())
                        .unwrap_or(0);
                    self.annotate(r, n, "warning", &text);
                    Ok(format!("{text}\n"))
                }
            };
        }
        if self.runs[r].artifacts.contains_key(&name) && !overwrite {
            return Err("Failed to CreateArtifact: Received non-retryable error: Failed request: (409) Conflict: an artifact with this name already exists on the workflow run".into());
        }
        let store = self.work.path().join("artifacts").join(self.runs[r].id.to_string()).join(&name);
        let _ = std::fs::remove_dir_all(&store);
        for (from, rel) in &found {
            let to = store.join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).map_err(|e| format!("upload {}: {e}", from.display()))?;
        }
        self.runs[r].artifacts.insert(name.clone(), store);
        Ok(format!("Artifact {name} has been successfully uploaded! ({} files)\n", found.len()))
    }

    pub(super) fn download_artifact(
        &mut self,
        job: &JobExec,
        r: usize,
        input: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let run = match input("run-id").filter(|x| !x.is_empty()) {
            Some(id) => {
                let id: u64 = id.parse().map_err(|_| format!("run-id `{id}` is not a number"))?;
                self.runs
                    .iter()
                    .position(|x| x.id == id)
                    .ok_or_else(|| format!("Unable to download artifact(s): run {id} not found"))?
            }
            None => r,
        };
        let dest = job.workspace.join(input("path").unwrap_or_default());
        let wanted: Vec<(String, PathBuf)> = match input("name").filter(|n| !n.is_empty()) {
            Some(name) => {
                let from = self.runs[run]
                    .artifacts
                    .get(&name)
                    .ok_or_else(|| format!("Unable to download artifact(s): Artifact not found for name: {name}"))?;
                vec![(String::new(), from.clone())]
            }
            None => self.runs[run].artifacts.iter().map(|(n, p)| (n.clone(), p.clone())).collect(),
        };
        for (sub, from) in wanted {
            let mut files = Vec::new();
            collect_files(&from, &from, true, &mut files);
            for (file, rel) in files {
                let to = dest.join(&sub).join(rel);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(&file, &to).map_err(|e| e.to_string())?;
            }
        }
        Ok(format!("Downloaded to {}\n", dest.display()))
    }
}

fn collect_files(root: &Path, dir: &Path, hidden: bool, out: &mut Vec<(PathBuf, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if !hidden && e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            collect_files(root, &p, hidden, out);
        } else {
            out.push((p.clone(), p.strip_prefix(root).unwrap().to_path_buf()));
        }
    }
}
