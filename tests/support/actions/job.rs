//! A job: its token, contexts and environment, its steps run like the
//! Actions runner runs them (`run:` scripts, workflow commands, file
//! commands), its outputs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::expr::{self, Contexts, Status};
use super::step::{self, Annotation, StepRecord};
use super::{ACTIONS_BOT, BUILD_WARD, JobState, RunStatus, Runner, STEP_LIMIT, WorkflowRun, workflow};
use crate::support::fake_github::{OWNER, REPO};

impl Runner<'_> {
    // -- contexts ---------------------------------------------------------------------

    /// The named values a place offers, from `names`.
    pub(super) fn base_contexts(
        &self,
        run: &WorkflowRun,
        job: Option<usize>,
        status: Status,
        names: &[&str],
    ) -> Contexts {
        let mut ctx = Contexts::new(status);
        let token = job.and_then(|j| run.jobs[j].token.clone()).unwrap_or_default();
        let job_key = job.map(|j| run.jobs[j].key.clone()).unwrap_or_default();
        for name in names {
            let v = match *name {
                "github" => self.github_context(run, &job_key, &token),
                "inputs" => inputs_context(run),
                "vars" => json!(self.vars),
                "secrets" => {
                    let mut m: Map<String, Value> = self.secrets.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                    m.insert("GITHUB_TOKEN".into(), json!(token));
                    Value::Object(m)
                }
                "needs" => {
                    let def = job.map(|j| run.wf.jobs[j].1.clone()).unwrap_or(Value::Null);
                    let mut m = Map::new();
                    for need in workflow::needs(&def) {
                        if let Some(x) = run.jobs.iter().find(|x| x.key == need) {
                            m.insert(need, json!({ "result": x.conclusion, "outputs": x.outputs }));
                        }
                    }
                    Value::Object(m)
                }
                "strategy" => json!({ "fail-fast": true, "job-index": 0, "job-total": 1, "max-parallel": 1 }),
                "matrix" => json!({}),
                _ => continue,
            };
            ctx.set(name, v);
        }
        ctx
    }

    pub(super) fn github_context(&self, run: &WorkflowRun, job: &str, token: &str) -> Value {
        let url = self.gh.url.clone();
        let ref_name = run.git_ref.rsplit_once("refs/heads/").map(|(_, b)| b.to_string()).unwrap_or_else(|| {
            run.git_ref
                .strip_prefix("refs/tags/")
                .map(String::from)
                .unwrap_or_else(|| run.git_ref.trim_start_matches("refs/pull/").to_string())
        });
        let (head_ref, base_ref) = match run.event.as_str() {
            "pull_request" | "pull_request_review" => (
                run.payload["pull_request"]["head"]["ref"].as_str().unwrap_or("").to_string(),
                run.payload["pull_request"]["base"]["ref"].as_str().unwrap_or("").to_string(),
            ),
            _ => (String::new(), String::new()),
        };
        json!({
            "event": run.payload,
            "event_name": run.event,
            "sha": run.sha,
            "ref": run.git_ref,
            "ref_name": ref_name,
            "ref_type": if run.git_ref.starts_with("refs/tags/") { "tag" } else { "branch" },
            "ref_protected": false,
            "head_ref": head_ref,
            "base_ref": base_ref,
            "repository": format!("{OWNER}/{REPO}"),
            "repository_owner": OWNER,
            "repository_id": "4242",
            "repositoryUrl": format!("git://{}/{OWNER}/{REPO}.git", url.trim_start_matches("http://")),
            "run_id": run.id.to_string(),
            "run_number": run.number.to_string(),
            "run_attempt": "1",
            "retention_days": "90",
            "actor": run.actor,
            "triggering_actor": run.actor,
            "workflow": run.name,
            "workflow_ref": format!("{OWNER}/{REPO}/{}@{}", run.wf.path, run.git_ref),
            "job": job,
            "server_url": url,
            "api_url": url,
            "graphql_url": format!("{url}/graphql"),
            "token": token,
            "workspace": "",
            "action": "",
            "secret_source": "Actions",
        })
    }

    pub(super) fn duration_of(&self, workflow: &str, job: &str) -> Duration {
        self.durations
            .iter()
            .rev()
            .find(|(w, j, _)| w == workflow && j == job)
            .map(|(_, _, d)| *d)
            .unwrap_or(self.job_duration)
    }

    // -- a job ------------------------------------------------------------------------

    pub(super) async fn start_job(&mut self, r: usize, j: usize) {
        let start = self.gh.state().time();
        let def = self.runs[r].wf.jobs[j].1.clone();
        // The job's token: its permissions, GitHub's rules.
        let permissions = match def.get("permissions").or(self.runs[r].wf.permissions.as_ref()) {
            Some(block) => workflow::permissions(block),
            None => Ok(self.default_permissions.clone()),
        };
        let permissions = match permissions {
            Ok(p) => p,
            Err(e) => return self.fail_job_at_start(r, j, &e),
        };
        let (token, check) = {
            let mut s = self.gh.state();
            let token = s.mint_token(ACTIONS_BOT, permissions.clone(), true);
            let html = format!("{}/{OWNER}/{REPO}/actions/runs/{}/job/{}", self.gh.url, self.runs[r].id, j + 1);
            let name = self.runs[r].jobs[j].name.clone();
            let check = s.start_check_run(self.runs[r].check_suite, &name, Some(&html));
            (token, check)
        };
        if self.runs[r].status == RunStatus::Queued {
            self.runs[r].status = RunStatus::InProgress;
            self.deliver_run("in_progress", r);
        }
        {
            let job = &mut self.runs[r].jobs[j];
            job.permissions = permissions;
            job.token = Some(token.clone());
            job.check_run = Some(check);
            job.started_at = Some(start);
            job.state = JobState::InProgress { until: start, conclusion: "success".into() };
        }
        self.timeline.push((start, format!("run {} job {} starts", self.runs[r].id, self.runs[r].jobs[j].key)));
        let conclusion = self.execute(r, j, &def, &token).await;
        let now = self.gh.state().time();
        let d = self.duration_of(&self.runs[r].workflow.clone(), &self.runs[r].jobs[j].key.clone());
        let until = (start + chrono::Duration::from_std(d).unwrap()).max(now);
        self.runs[r].jobs[j].state = JobState::InProgress { until, conclusion };
    }

    /// Runs the steps of job `j`; returns its conclusion.
    pub(super) async fn execute(&mut self, r: usize, j: usize, def: &Value, token: &str) -> String {
        let dir = self.work.path().join(format!("{}-{}", self.runs[r].id, self.runs[r].jobs[j].key));
        let (workspace, temp, home, files) =
            (dir.join("workspace"), dir.join("temp"), dir.join("home"), dir.join("files"));
        for d in [&workspace, &temp, &home, &files] {
            std::fs::create_dir_all(d).unwrap();
        }
        let event_path = temp.join("_github_workflow").join("event.json");
        std::fs::create_dir_all(event_path.parent().unwrap()).unwrap();
        std::fs::write(&event_path, serde_json::to_vec_pretty(&self.runs[r].payload).unwrap()).unwrap();

        let mut job = JobExec {
            workspace: workspace.clone(),
            temp: temp.clone(),
            files,
            env: BTreeMap::new(),
            file_env: BTreeMap::new(),
            paths: Vec::new(),
            commands: step::Commands::default(),
            steps_ctx: Map::new(),
            failed: false,
        };
        job.commands.masks.push(token.to_string());
        job.commands.masks.extend(self.secrets.values().filter(|v| !v.is_empty()).cloned());
        let run = &self.runs[r];
        let job_key = run.jobs[j].key.clone();
        let base = [
            ("CI", "true".to_string()),
            ("GITHUB_ACTIONS", "true".into()),
            ("GITHUB_ACTION_REPOSITORY", String::new()),
            ("GITHUB_ACTOR", run.actor.clone()),
            ("GITHUB_TRIGGERING_ACTOR", run.actor.clone()),
            ("GITHUB_API_URL", self.gh.url.clone()),
            ("GITHUB_SERVER_URL", self.gh.url.clone()),
            ("GITHUB_GRAPHQL_URL", format!("{}/graphql", self.gh.url)),
            ("GITHUB_EVENT_NAME", run.event.clone()),
            ("GITHUB_EVENT_PATH", event_path.display().to_string()),
            ("GITHUB_JOB", job_key.clone()),
            ("GITHUB_REF", run.git_ref.clone()),
            ("GITHUB_SHA", run.sha.clone()),
            ("GITHUB_REPOSITORY", format!("{OWNER}/{REPO}")),
            ("GITHUB_REPOSITORY_OWNER", OWNER.into()),
            ("GITHUB_RUN_ID", run.id.to_string()),
            ("GITHUB_RUN_NUMBER", run.number.to_string()),
            ("GITHUB_RUN_ATTEMPT", "1".into()),
            ("GITHUB_WORKFLOW", run.name.clone()),
            ("GITHUB_WORKFLOW_REF", format!("{OWNER}/{REPO}/{}@{}", run.wf.path, run.git_ref)),
            ("GITHUB_WORKSPACE", workspace.display().to_string()),
            ("RUNNER_TEMP", temp.display().to_string()),
            ("RUNNER_TOOL_CACHE", dir.join("tool-cache").display().to_string()),
            ("RUNNER_OS", "Linux".into()),
            ("RUNNER_ARCH", "X64".into()),
            ("RUNNER_NAME", "fake-runner".into()),
            ("RUNNER_ENVIRONMENT", "github-hosted".into()),
            ("HOME", home.display().to_string()),
            // Not GitHub's: the simulated clock, for ward's commands that
            // take `--now` (`ward sweep`, `ward report`).
            ("WARD_NOW", crate::support::fake_github::stamp(self.gh.state().time())),
            ("PATH", std::env::var("PATH").unwrap_or_default()),
        ];
        job.env = base.into_iter().map(|(k, v)| (k.to_string(), v)).collect();

        // env: the workflow's, then the job's (which may read the workflow's).
        let mut env_ctx = Map::new();
        let status = Status::Success;
        let mut ctx = self.base_contexts(
            run,
            Some(j),
            status,
            &["github", "inputs", "vars", "secrets", "needs", "strategy", "matrix"],
        );
        let mut env_error = None;
        for (source, entries) in [
            ("workflow", run.wf.env.clone()),
            ("job", def.get("env").and_then(Value::as_object).cloned().unwrap_or_default()),
        ] {
            ctx.set("env", Value::Object(env_ctx.clone()));
            for (k, v) in entries {
                match expr::interpolate_value(&v, &ctx) {
                    Ok(v) => {
                        env_ctx.insert(k, json!(expr::to_string(&v)));
                    }
                    Err(e) => env_error = Some(format!("{source} env `{k}`: {e}")),
                }
            }
        }
        let defaults = def.get("defaults").cloned().filter(|d| !d.is_null()).unwrap_or(run.wf.defaults.clone());
        let steps: Vec<Value> = def.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
        let runner_ctx = json!({
            "os": "Linux", "arch": "X64", "name": "fake-runner", "environment": "github-hosted",
            "temp": temp.display().to_string(), "tool_cache": dir.join("tool-cache").display().to_string(),
            "debug": "",
        });
        if let Some(e) = env_error {
            self.runs[r].jobs[j].annotations.push(Annotation {
                level: "error".into(),
                message: e,
                title: None,
                file: None,
                line: None,
            });
            return "failure".into();
        }

        for (index, step_def) in steps.iter().enumerate() {
            let status = if job.failed { Status::Failure } else { Status::Success };
            let run = &self.runs[r];
            let mut ctx =
                self.base_contexts(run, Some(j), status, &["github", "inputs", "vars", "needs", "strategy", "matrix"]);
            let mut github = ctx.values["github"].clone();
            github["workspace"] = json!(workspace.display().to_string());
            github["event_path"] = json!(event_path.display().to_string());
            ctx.set("github", github);
            let mut env_now = env_ctx.clone();
            for (k, v) in &job.file_env {
                env_now.insert(k.clone(), json!(v));
            }
            ctx.set("env", Value::Object(env_now.clone()));
            ctx.set("steps", Value::Object(job.steps_ctx.clone()));
            ctx.set("runner", runner_ctx.clone());
            ctx.set("job", json!({ "status": if job.failed { "failure" } else { "success" } }));
            let id = step_def.get("id").and_then(Value::as_str).map(String::from);
            let uses = step_def.get("uses").and_then(Value::as_str).map(String::from);
            let run_text = step_def.get("run").and_then(Value::as_str).map(String::from);
            let default_name = match (&uses, &run_text) {
                (Some(u), _) => format!("Run {u}"),
                (None, Some(t)) => format!("Run {}", t.lines().next().unwrap_or_default()),
                _ => format!("step {index}"),
            };
            // `if:` sees no secrets.
            let cond = match step_def.get("if") {
                Some(Value::Bool(b)) => Ok(*b && status == Status::Success),
                Some(v) => expr::condition(&expr::to_string(v), &ctx),
                None => expr::condition("success()", &ctx),
            };
            ctx.set("secrets", self.base_contexts(run, Some(j), status, &["secrets"]).values["secrets"].clone());
            let name = step_def
                .get("name")
                .and_then(Value::as_str)
                .map(|n| expr::interpolate(n, &ctx).unwrap_or_else(|_| n.to_string()))
                .unwrap_or(default_name);
            let mut record = StepRecord {
                name,
                id: id.clone(),
                outcome: "skipped".into(),
                conclusion: "skipped".into(),
                log: String::new(),
                outputs: BTreeMap::new(),
            };
            match cond {
                Err(e) => {
                    self.annotate(r, j, "error", &e);
                    record.outcome = "failure".into();
                    record.conclusion = "failure".into();
                    job.failed = true;
                }
                Ok(false) => {}
                Ok(true) => {
                    let mut step_env = env_now.clone();
                    let mut error = None;
                    for (k, v) in step_def.get("env").and_then(Value::as_object).cloned().unwrap_or_default() {
                        match expr::interpolate_value(&v, &ctx) {
                            Ok(v) => {
                                step_env.insert(k, json!(expr::to_string(&v)));
                            }
                            Err(e) => error = Some(format!("step env `{k}`: {e}")),
                        }
                    }
                    // The step's own `with:` and `run:` see its `env:`.
                    ctx.set("env", Value::Object(step_env.clone()));
                    let with = match step_def.get("with").map(|w| expr::interpolate_value(w, &ctx)) {
                        Some(Ok(w)) => w,
                        Some(Err(e)) => {
                            error = Some(format!("`with`: {e}"));
                            Value::Null
                        }
                        None => Value::Null,
                    };
                    let outcome = if let Some(e) = error {
                        self.annotate(r, j, "error", &e);
                        Err(e)
                    } else if let Some(text) = &run_text {
                        match expr::interpolate(text, &ctx) {
                            Ok(script) => {
                                self.run_script(&mut job, r, j, &script, step_def, &defaults, &step_env, &mut record)
                                    .await
                            }
                            Err(e) => {
                                self.annotate(r, j, "error", &e);
                                Err(e)
                            }
                        }
                    } else if let Some(uses) = &uses {
                        self.use_action(&mut job, r, j, uses, &with, token, &mut record).await
                    } else {
                        Err("a step needs `run` or `uses`".into())
                    };
                    record.outcome = if outcome.is_ok() { "success" } else { "failure" }.into();
                    let continue_on_error = step_def.get("continue-on-error").is_some_and(expr::truthy);
                    record.conclusion = if outcome.is_ok() || continue_on_error { "success" } else { "failure" }.into();
                    if record.conclusion == "failure" {
                        job.failed = true;
                    }
                }
            }
            if let Some(id) = &id {
                job.steps_ctx.insert(
                    id.clone(),
                    json!({ "outputs": record.outputs, "outcome": record.outcome, "conclusion": record.conclusion }),
                );
            }
            self.runs[r].jobs[j].steps.push(record);
        }

        // Job outputs, masked values refused as GitHub does.
        let run = &self.runs[r];
        let mut ctx = self.base_contexts(
            run,
            Some(j),
            Status::Success,
            &["github", "inputs", "vars", "secrets", "needs", "strategy", "matrix"],
        );
        ctx.set("steps", Value::Object(job.steps_ctx.clone()));
        ctx.set("env", Value::Object(env_ctx));
        ctx.set("runner", runner_ctx);
        ctx.set("job", json!({ "status": if job.failed { "failure" } else { "success" } }));
        let mut outputs = BTreeMap::new();
        for (k, v) in def.get("outputs").and_then(Value::as_object).cloned().unwrap_or_default() {
            match expr::interpolate(&expr::to_string(&v), &ctx) {
                Ok(value) if job.commands.mask(&value) != value => {
                    self.annotate(r, j, "warning", &format!("Skip output '{k}' since it may contain secret."));
                }
                Ok(value) => {
                    outputs.insert(k, value);
                }
                Err(e) => self.annotate(r, j, "error", &e),
            }
        }
        let annotations = std::mem::take(&mut job.commands.annotations);
        let jr = &mut self.runs[r].jobs[j];
        jr.outputs = outputs;
        jr.annotations.extend(annotations);
        if job.failed { "failure".into() } else { "success".into() }
    }

    pub(super) fn annotate(&mut self, r: usize, j: usize, level: &str, message: &str) {
        self.runs[r].jobs[j].annotations.push(Annotation {
            level: level.into(),
            message: message.into(),
            title: None,
            file: None,
            line: None,
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_script(
        &mut self,
        job: &mut JobExec,
        r: usize,
        j: usize,
        script: &str,
        step_def: &Value,
        defaults: &Value,
        step_env: &Map<String, Value>,
        record: &mut StepRecord,
    ) -> Result<(), String> {
        let n = self.runs[r].jobs[j].steps.len();
        let workdir = step_def
            .get("working-directory")
            .or(defaults.get("run").and_then(|d| d.get("working-directory")))
            .and_then(Value::as_str)
            .map(|d| job.workspace.join(d))
            .unwrap_or(job.workspace.clone());
        if script.trim() == BUILD_WARD {
            // The one build ward's workflows make: the test's binary instead.
            let target = workdir.join("target").join("release");
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            let dest = target.join("ward");
            if std::fs::hard_link(&self.ward, &dest).is_err() {
                std::fs::copy(&self.ward, &dest).map_err(|e| format!("copy ward: {e}"))?;
            }
            record.log =
                format!("the test runner placed its prebuilt ward at {} instead of building it\n", dest.display());
            return Ok(());
        }
        let shell = step_def
            .get("shell")
            .or(defaults.get("run").and_then(|d| d.get("shell")))
            .and_then(Value::as_str)
            .unwrap_or("bash")
            .to_string();
        let file = job.temp.join(format!("step-{n}.sh"));
        std::fs::write(&file, script).map_err(|e| e.to_string())?;
        let mut cmd = match shell.as_str() {
            "bash" => {
                let mut c = std::process::Command::new("bash");
                c.args(["--noprofile", "--norc", "-eo", "pipefail"]).arg(&file);
                c
            }
            "sh" => {
                let mut c = std::process::Command::new("sh");
                c.arg("-e").arg(&file);
                c
            }
            other => {
                self.unsupported.push(format!("`shell: {other}`"));
                return Err(format!("the test runner does not implement `shell: {other}`"));
            }
        };
        let files = job.step_files(n);
        cmd.current_dir(&workdir).env_clear();
        let mut env = job.env.clone();
        let path = job.paths.iter().rev().cloned().chain([env["PATH"].clone()]).collect::<Vec<_>>().join(":");
        env.insert("PATH".into(), path);
        for (k, v) in &job.file_env {
            env.insert(k.clone(), v.clone());
        }
        for (k, v) in step_env {
            env.insert(k.clone(), expr::to_string(v));
        }
        for (k, p) in &files {
            env.insert(k.to_string(), p.display().to_string());
        }
        cmd.envs(&env);
        let (code, raw) = tokio::task::spawn_blocking(move || step::run_process(cmd, STEP_LIMIT)).await.unwrap();
        let before = job.commands.annotations.len();
        record.log = job.commands.process(&raw);
        let new_annotations: Vec<Annotation> = job.commands.annotations.drain(before..).collect();
        self.runs[r].jobs[j].annotations.extend(new_annotations);
        record.outputs.extend(std::mem::take(&mut job.commands.outputs));
        let read = |k: &str| std::fs::read_to_string(&files[k]).unwrap_or_default();
        match step::parse_file_commands(&read("GITHUB_OUTPUT")) {
            Ok(pairs) => record.outputs.extend(pairs),
            Err(e) => return Err(format!("GITHUB_OUTPUT: {e}")),
        }
        match step::parse_file_commands(&read("GITHUB_ENV")) {
            Ok(pairs) => {
                for (k, v) in pairs {
                    if k == "NODE_OPTIONS" || k.starts_with("GITHUB_") && k != "GITHUB_TOKEN" {
                        self.annotate(
                            r,
                            j,
                            "warning",
                            &format!("Can't store {k} output parameter using '$GITHUB_ENV' command."),
                        );
                        continue;
                    }
                    job.file_env.insert(k, v);
                }
            }
            Err(e) => return Err(format!("GITHUB_ENV: {e}")),
        }
        job.paths.extend(read("GITHUB_PATH").lines().filter(|l| !l.trim().is_empty()).map(String::from));
        let summary = read("GITHUB_STEP_SUMMARY");
        if !summary.is_empty() {
            let masked = job.commands.mask(&summary);
            self.runs[r].jobs[j].summary.push_str(&masked);
        }
        if let Some(why) = job.commands.failed.take() {
            return Err(why);
        }
        if code != 0 {
            self.annotate(r, j, "error", &format!("Process completed with exit code {code}."));
            return Err(format!("exit code {code}"));
        }
        Ok(())
    }
}

/// `inputs` of a `workflow_dispatch` run, typed by their declaration.
fn inputs_context(run: &WorkflowRun) -> Value {
    if run.event != "workflow_dispatch" {
        return json!({});
    }
    let declared = run
        .wf
        .trigger("workflow_dispatch")
        .and_then(|c| c.get("inputs"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let given = run.payload["inputs"].as_object().cloned().unwrap_or_default();
    let mut m = Map::new();
    for (name, decl) in declared {
        let text = given.get(&name).map(expr::to_string).unwrap_or_default();
        let v = match decl.get("type").and_then(Value::as_str) {
            Some("boolean") => json!(text == "true"),
            Some("number") => text.parse::<f64>().map(|n| json!(n)).unwrap_or(Value::Null),
            _ => json!(text),
        };
        m.insert(name, v);
    }
    Value::Object(m)
}

/// A job while its steps run.
pub(super) struct JobExec {
    pub(super) workspace: PathBuf,
    pub(super) temp: PathBuf,
    pub(super) files: PathBuf,
    /// The runner's variables.
    pub(super) env: BTreeMap<String, String>,
    /// What steps wrote to `GITHUB_ENV`.
    pub(super) file_env: BTreeMap<String, String>,
    /// What steps wrote to `GITHUB_PATH`.
    pub(super) paths: Vec<String>,
    pub(super) commands: step::Commands,
    pub(super) steps_ctx: Map<String, Value>,
    pub(super) failed: bool,
}

impl JobExec {
    /// Fresh file-command files of step `n`.
    pub(super) fn step_files(&self, n: usize) -> BTreeMap<&'static str, PathBuf> {
        let mut m = BTreeMap::new();
        for (k, f) in [
            ("GITHUB_OUTPUT", "set_output"),
            ("GITHUB_ENV", "set_env"),
            ("GITHUB_PATH", "add_path"),
            ("GITHUB_STEP_SUMMARY", "step_summary"),
            ("GITHUB_STATE", "save_state"),
        ] {
            let p = self.files.join(format!("{f}_{n}"));
            let _ = std::fs::write(&p, "");
            m.insert(k, p);
        }
        m
    }
}
