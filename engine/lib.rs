//! ward: a teaching-hospital pipeline for coding agents on GitHub issues.
//! See `ARCHITECTURE.md` for the picture; `stage` is where one run is sequenced.

pub mod budget;
pub mod chart;
pub mod config;
pub mod departments;
pub mod forge;
pub mod groundedness;
pub mod lockdown;
pub mod precedent;
pub mod report;
pub mod sweep;
