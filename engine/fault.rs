//! Named fault points for the crash tests. With `WARD_FAULT=<point>` in its
//! environment, ward exits at once when it reaches that point: no
//! destructor runs, nothing more is written, as when a runner is killed.
//! Inert unless the variable names a point. It is ward's own environment:
//! an agent's is built from scratch and never flows back into ward's, so
//! an agent cannot set it (and one that could run code as ward's user can
//! kill ward anyway).

use std::sync::OnceLock;

/// The exit code of a fault point, distinct from ward's own codes.
pub const EXIT_CODE: i32 = 86;

/// Every point, in the order a stage run reaches them. The transfer's
/// points are the sweep's too (its re-trigger notes go through transfer).
pub const POINTS: &[&str] = &[
    "after-guard",          // admitted: the lock is held, nothing written yet
    "after-prepare",        // ADMISSION notes durable, workspace up, prompt written
    "after-treat",          // the agent ran; its visit is sealed, nothing recorded
    "after-judge",          // judged; nothing recorded
    "after-chart-write",    // transfer: the notes are in the chart, the labels not moved
    "after-labels",         // transfer: the labels moved, the next stage not dispatched
    "after-merge",          // discharge: the pull request merged, the patient not yet moved
    "after-incident-filed", // safety: an incident issue opened, the run not finished
    "after-proposal-filed", // research: a proposal filed, the run not finished
    "after-policy-filed",   // research: the role's pull request opened and labelled, the run not finished
];

/// Exits the process when `WARD_FAULT` names `point`.
pub fn point(point: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var("WARD_FAULT").ok().filter(|p| !p.is_empty()));
    if armed.as_deref() == Some(point) {
        eprintln!("ward: fault point `{point}` reached (WARD_FAULT): exiting at once, as a killed run would");
        std::process::exit(EXIT_CODE);
    }
}
