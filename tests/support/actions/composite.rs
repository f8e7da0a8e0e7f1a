//! The ward action (`uses: wardhq/ward@<sha>`, as `ward init` writes the
//! workflows): the composite action of `action.yml` at the top of this
//! repository, the source the pinned commit stands for, run step by step
//! as the Actions runner runs a composite: its `inputs` (defaults, then the
//! step's `with:`), each step's `if:` and `env:` with `inputs`, `steps`,
//! `github` (`action_repository` the action's), `runner`; `run:` steps in
//! `shell: bash` with `GITHUB_ACTION_PATH`; its `outputs` from its steps'.
//! The release it installs must be on the fake (`support::release`): the
//! installer downloads and checks it; a build from source would need
//! `actions/cache`, which the runner answers as a miss.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::Runner;
use super::expr::{self, Status};
use super::job::JobExec;
use super::step::StepRecord;

/// The repository of the ward action the runner implements.
pub const WARD_ACTION_REPO: &str = "wardhq/ward";

impl Runner<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn ward_action(
        &mut self,
        job: &mut JobExec,
        r: usize,
        j: usize,
        with: &Value,
        token: &str,
        record: &mut StepRecord,
    ) -> Result<String, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(root.join("action.yml")).map_err(|e| e.to_string())?;
        let action: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
        let action: Value = serde_json::to_value(action).map_err(|e| e.to_string())?;
        let run = &self.runs[r];
        let mut ctx = self.base_contexts(run, Some(j), Status::Success, &["github", "vars", "secrets"]);
        let mut github = ctx.values["github"].clone();
        github["action_repository"] = json!(WARD_ACTION_REPO);
        // The job's token, as `${{ github.token }}` gives it to the action's input.
        github["token"] = json!(token);
        github["action_path"] = json!(root.display().to_string());
        ctx.set("github", github);
        ctx.set("runner", json!({ "os": "Linux", "arch": "X64", "temp": job.temp.display().to_string() }));
        // inputs: the defaults (expressions too), then what the step gave.
        let mut inputs = Map::new();
        for (name, spec) in action["inputs"].as_object().cloned().unwrap_or_default() {
            let given = with.get(&name).map(expr::to_string);
            let default = spec.get("default").map(|d| expr::interpolate_value(d, &ctx)).transpose()?;
            inputs
                .insert(name, json!(given.unwrap_or_else(|| default.map(|d| expr::to_string(&d)).unwrap_or_default())));
        }
        ctx.set("inputs", Value::Object(inputs));
        let mut steps_ctx = Map::new();
        let mut log = String::new();
        for step_def in action["runs"]["steps"].as_array().cloned().unwrap_or_default() {
            ctx.set("steps", Value::Object(steps_ctx.clone()));
            let cond = match step_def.get("if") {
                Some(v) => expr::condition(&expr::to_string(v), &ctx)?,
                None => true,
            };
            let name = step_def.get("name").map(expr::to_string).unwrap_or_default();
            let mut inner = StepRecord {
                name: name.clone(),
                id: None,
                outcome: "skipped".into(),
                conclusion: "skipped".into(),
                log: String::new(),
                outputs: BTreeMap::new(),
            };
            if cond {
                let mut env = Map::new();
                for (k, v) in step_def.get("env").and_then(Value::as_object).cloned().unwrap_or_default() {
                    env.insert(k, json!(expr::to_string(&expr::interpolate_value(&v, &ctx)?)));
                }
                env.insert("GITHUB_ACTION_PATH".into(), json!(root.display().to_string()));
                let done = match (step_def.get("run"), step_def.get("uses").and_then(Value::as_str)) {
                    (Some(script), _) => {
                        let script = expr::interpolate(&expr::to_string(script), &ctx)?;
                        self.run_script(job, r, j, &script, &step_def, &Value::Null, &env, &mut inner).await
                    }
                    (None, Some(uses)) if uses.starts_with("actions/cache") => {
                        inner.outputs.insert("cache-hit".into(), "false".into());
                        Ok(())
                    }
                    (None, other) => {
                        self.unsupported.push(format!("the ward action's step `{name}` (uses {other:?})"));
                        Err(format!("the test runner does not implement the ward action's step `{name}`"))
                    }
                };
                log.push_str(&format!("### {name}\n{}", inner.log));
                done.map_err(|e| format!("{log}{e}"))?;
                inner.outcome = "success".into();
            }
            if let Some(id) = step_def.get("id").and_then(Value::as_str) {
                steps_ctx.insert(id.into(), json!({ "outputs": inner.outputs, "outcome": inner.outcome }));
            }
        }
        ctx.set("steps", Value::Object(steps_ctx));
        for (name, spec) in action["outputs"].as_object().cloned().unwrap_or_default() {
            let value = spec.get("value").map(|v| expr::interpolate(&expr::to_string(v), &ctx)).transpose()?;
            record.outputs.insert(name, value.unwrap_or_default());
        }
        Ok(log)
    }
}
