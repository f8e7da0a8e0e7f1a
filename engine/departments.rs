//! `departments:` in `.github/ward.yml`: the parts of the hospital outside
//! the patient flow (the charge nurse's sweep, budgets, groundedness).
//!
//! ```yaml
//! departments:
//!   sweep: { max_retries: 2, max_actions: 50 }
//!   budget: { run_usd: 10, patient_usd: 150 }
//!   groundedness: { threshold: 0.8 }
//! ```

use serde::Deserialize;

use crate::budget::BudgetConfig;
use crate::config::Config;
use crate::groundedness::GroundednessConfig;
use crate::sweep::SweepConfig;

/// Every section has defaults; `departments:` may be left out entirely.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Departments {
    /// The charge nurse (`ward sweep`). Defaults: see [`SweepConfig`].
    #[serde(default)]
    pub sweep: SweepConfig,
    /// Spend limits per stage run and per patient. Defaults: see [`BudgetConfig`].
    #[serde(default)]
    pub budget: BudgetConfig,
    /// How far a run's notes must match reality. Defaults: see [`GroundednessConfig`].
    #[serde(default)]
    pub groundedness: GroundednessConfig,
}

impl Departments {
    /// The semantic pass: (path, message) for every problem.
    pub fn validate(&self, config: &Config) -> Vec<(String, String)> {
        let mut p = self.sweep.validate(config);
        p.extend(self.budget.validate(config));
        p.extend(self.groundedness.validate());
        p
    }
}
