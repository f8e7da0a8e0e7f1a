//! The agent watched while it runs: its output file read as it grows, for
//! what it spent (`budget::Meter`) and for the model API's answers it
//! reports (`agent::report`). The stage runner races this against the
//! agent and stops the agent (its whole process group) when this returns.

use std::path::Path;
use std::time::Duration;

use crate::agent::report::{ModelError, Reader};
use crate::budget::{Breach, Meter, Usage, check_run};
use crate::config::BudgetConfig;
use crate::config::agents::Output;

/// Why the watch stopped the agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// A run limit was reached; the usage seen then.
    Budget(Breach, Option<Usage>),
    /// The model API refused a request in a way asking again cannot change
    /// (a rejected key, a forbidden model): the run cannot succeed.
    Refused(ModelError),
}

/// How often the output is read: often enough that a rejected key ends a
/// run within a second of the agent saying so.
pub const POLL: Duration = Duration::from_millis(200);

/// Reads `stdout` every `poll` until the run must stop. Never returns while
/// the run stays within its limits and the model answers. Only the bytes
/// added since the last read are read.
pub async fn watch(stdout: &Path, budget: &BudgetConfig, output: Output, time_limit: Duration, poll: Duration) -> Stop {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let started = tokio::time::Instant::now();
    let mut meter = Meter::new(budget);
    let mut reader = Reader::new(output);
    let mut offset = 0u64;
    loop {
        if let Ok(mut file) = tokio::fs::File::open(stdout).await
            && file.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
        {
            let mut fresh = Vec::new();
            if let Ok(n) = file.read_to_end(&mut fresh).await {
                offset += n as u64;
                meter.feed(&fresh);
                reader.feed(&fresh);
            }
        }
        if let Some(refused) = &reader.report().refused {
            return Stop::Refused(refused.clone());
        }
        let usage = meter.usage();
        if let Some(breach) = check_run(budget, time_limit, started.elapsed(), usage.as_ref()) {
            return Stop::Budget(breach, usage);
        }
        tokio::time::sleep(poll).await;
    }
}
