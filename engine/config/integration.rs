//! The `integration` section of `ward.yml`: with it, discharge enqueues an
//! audited patient instead of merging it, and the merge queue merges it
//! only after the integration check passed on the branch combined with the
//! current base.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Config, de_duration};

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IntegrationConfig {
    /// The integration check: an argument vector run in a fresh checkout of
    /// the patient's branch merged into the current base; exit 0 passes.
    pub command: Vec<String>,
    /// Wall-clock limit of one check. Default 30m.
    #[serde(default = "default_time_limit", deserialize_with = "de_duration")]
    #[schemars(schema_with = "super::schema::duration")]
    pub time_limit: Duration,
    /// Where an audited patient waits for the merge queue. Default
    /// `ward:merge-queue`; it must be declared under `labels`.
    #[serde(default = "default_queued_label")]
    pub queued_label: String,
    /// A fresh emulator for each check (the `emulator` section's shape):
    /// its exposed variables are in the check's environment, and it is
    /// removed, verified, after the check. Default: none.
    #[serde(default)]
    pub emulator: Option<super::EmulatorConfig>,
}

fn default_time_limit() -> Duration {
    Duration::from_secs(30 * 60)
}

fn default_queued_label() -> String {
    DEFAULT_QUEUED_LABEL.into()
}

/// Where a patient rests in a merge queue when ward.yml names no label.
pub const DEFAULT_QUEUED_LABEL: &str = "ward:merge-queue";

impl Config {
    /// Where a patient rests while a merge queue holds it, ward's or
    /// GitHub's: `integration.queued_label`, else `ward:merge-queue`.
    pub fn merge_queue_label(&self) -> &str {
        self.integration.as_ref().map_or(DEFAULT_QUEUED_LABEL, |i| &i.queued_label)
    }
}

impl IntegrationConfig {
    pub(super) fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.command.first().is_none_or(|c| c.trim().is_empty()) {
            p.push(("integration.command".into(), "must name a program, e.g. [\"make\", \"check\"]".into()));
        }
        if self.time_limit.is_zero() {
            p.push(("integration.time_limit".into(), "must be longer than zero".into()));
        }
        if let Some(e) = &self.emulator {
            p.extend(super::emulator::validate(e, "integration.emulator"));
        }
        let label = &self.queued_label;
        if !config.labels.contains_key(label) {
            p.push(("integration.queued_label".into(), format!("label `{label}` is not declared under `labels`")));
        } else if config.stage_by_label(label).is_some() {
            p.push((
                "integration.queued_label".into(),
                format!("label `{label}` starts a stage; use a label where patients rest"),
            ));
        }
        p
    }
}
