//! `departments:` in `.github/ward.yml`: the parts of the hospital outside
//! the patient flow (the charge nurse's sweep, budgets, groundedness), and
//! the one chart-writing helper they share.
//!
//! ```yaml
//! departments:
//!   sweep: { max_retries: 2, max_actions: 50 }
//!   budget: { run_usd: 10, patient_usd: 150 }
//!   groundedness: { threshold: 0.8 }
//! ```

use serde::Deserialize;

use crate::budget::BudgetConfig;
use crate::chart::{Note, SentinelError, Sentinels};
use crate::config::Config;
use crate::forge::{Forge, ForgeError, IssueNumber};
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

#[derive(Debug, thiserror::Error)]
pub enum ChartWriteError {
    #[error("could not {action} the chart of {issue}: {source}")]
    Forge {
        action: &'static str,
        issue: IssueNumber,
        #[source]
        source: ForgeError,
    },
    #[error("the chart of {issue} is not readable ({source}); repair it by hand before ward writes to it again")]
    Unreadable {
        issue: IssueNumber,
        #[source]
        source: SentinelError,
    },
    #[error("the chart of {issue} kept changing while ward wrote to it ({attempts} conflicts); try again")]
    Contended { issue: IssueNumber, attempts: usize },
}

/// Appends engine notes to a chart with compare-and-swap, re-reading and
/// re-appending after a conflict. Idempotent by run (see
/// [`Sentinels::append`]): a retried write never doubles a note.
pub async fn append_notes(
    forge: &dyn Forge,
    sentinels: &Sentinels,
    issue: IssueNumber,
    notes: &[Note],
) -> Result<(), ChartWriteError> {
    const ATTEMPTS: usize = 8;
    for _ in 0..ATTEMPTS {
        let stored =
            forge.read_chart(issue).await.map_err(|source| ChartWriteError::Forge { action: "read", issue, source })?;
        let text = sentinels
            .append(issue, stored.as_ref().map(|c| c.text.as_str()), notes)
            .map_err(|source| ChartWriteError::Unreadable { issue, source })?;
        let Some(text) = text else { return Ok(()) };
        match forge.write_chart(issue, &text, stored.as_ref().map(|c| c.version.as_str())).await {
            Ok(_) => return Ok(()),
            Err(ForgeError::ChartConflict(_)) => continue,
            Err(source) => return Err(ChartWriteError::Forge { action: "write", issue, source }),
        }
    }
    Err(ChartWriteError::Contended { issue, attempts: ATTEMPTS })
}
