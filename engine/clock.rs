//! Where "now" comes from: the system's clock, or one a test or `--now`
//! moves. Owned by no department: the hospital and the local forge both
//! read it.

use std::sync::Arc;

use chrono::{DateTime, Utc};

pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}
