//! The safety department's report.
