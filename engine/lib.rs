//! ward: a teaching-hospital pipeline for coding agents on GitHub issues.
//! See `ARCHITECTURE.md` for the picture; `stage` is where one run is sequenced.

pub mod actions;
pub mod chart;
pub mod config;
pub mod event;
pub mod forge;
