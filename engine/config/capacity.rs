//! The `capacity` section of `ward.yml`: how many agents run at once, and
//! where a patient beyond the cap rests until a slot frees.

use schemars::JsonSchema;
use serde::Deserialize;

use super::Config;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityConfig {
    /// The most agent runs at once across every stage (a stage's own
    /// `max_concurrent` bounds it further). Default: no limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_concurrent: Option<u32>,
    /// Where a patient beyond a cap rests, with a note, until the run that
    /// frees a slot starts it (oldest first). Default `ward:queued`; it must
    /// be declared under `labels` when a cap is set.
    #[serde(default = "default_queued_label")]
    pub queued_label: String,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        Self { max_concurrent: None, queued_label: default_queued_label() }
    }
}

fn default_queued_label() -> String {
    "ward:queued".into()
}

impl CapacityConfig {
    /// Whether any cap is set: without one, ward keeps no count at all.
    pub fn capped(&self, config: &Config) -> bool {
        self.max_concurrent.is_some() || config.stages().any(|s| s.config.max_concurrent.is_some())
    }

    pub(super) fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.max_concurrent == Some(0) {
            p.push(("capacity.max_concurrent".into(), "must be 1 or more (leave it out for no limit)".into()));
        }
        for s in config.stages().filter(|s| s.config.max_concurrent == Some(0)) {
            p.push((
                format!("stages.{}.max_concurrent", s.name),
                "must be 1 or more (leave it out for no limit)".into(),
            ));
        }
        if !self.capped(config) {
            return p;
        }
        let label = &self.queued_label;
        if !config.labels.contains_key(label) {
            p.push((
                "capacity.queued_label".into(),
                format!("label `{label}` is not declared under `labels` (a cap is set, so patients may rest there)"),
            ));
        } else if config.stage_by_label(label).is_some() {
            p.push((
                "capacity.queued_label".into(),
                format!("label `{label}` starts a stage; use a label where patients rest"),
            ));
        }
        p
    }
}
