//! Seeded fault schedules: which API request (by its number, counted from
//! when the schedule is set) gets which fault, drawn from a seed so that a
//! failing schedule is replayed by its seed alone.
//!
//! The faults are GitHub's own ways to hurt: a 5xx, a 403 secondary rate
//! limit with `Retry-After`, a 429 with `Retry-After`, a connection reset
//! (before the request took effect, or after it, so the answer is lost),
//! a 409 or 422 sha conflict on a contents write (another writer won), and
//! a slow answer (a real delay, below the client's read timeout). Every
//! fault that fires is recorded with the longest wait ward's retry policy
//! may spend on it ([`Injected::wait_bound`]), so a test can bound the
//! total wait.
//!
//! Some schedules come with a burst (the same fault on several requests in
//! a row), long enough to exhaust ward's retries: then a stage run fails
//! and the next trigger has to recover it.
//!
//! Only the REST and GraphQL API is faulted; git's smart HTTP is not.

use std::time::Duration;

use http::Method;

use super::{Fault, FaultKind, State};

/// One fault, as the schedule drew it.
#[derive(Debug, Clone, PartialEq)]
pub enum Injected {
    /// 500, 502, 503 or 504, GitHub's body.
    ServerError(u16),
    /// 403 "secondary rate limit" with `Retry-After: secs`.
    SecondaryLimit(u64),
    /// 429 with `Retry-After: secs`.
    TooMany(u64),
    /// The connection closes without an answer; `after_effect`: the
    /// request was handled first (a write landed, its answer is lost).
    Reset { after_effect: bool },
    /// A contents write meets a conflict: 409 (the sha moved) or 422 (a
    /// sha was needed), as when another writer won the race.
    ShaConflict(u16),
    /// The answer comes this late (below the client's read timeout).
    Slow(Duration),
}

impl Injected {
    /// The longest wait ward's policy may take before retrying after this
    /// fault (`max_delay` bounds a backoff; a rate limit asks for its own).
    pub fn wait_bound(&self, max_delay: Duration) -> Duration {
        match self {
            Injected::ServerError(_) | Injected::Reset { .. } => max_delay,
            Injected::SecondaryLimit(secs) | Injected::TooMany(secs) => Duration::from_secs(*secs),
            Injected::ShaConflict(_) | Injected::Slow(_) => Duration::ZERO,
        }
    }
}

/// A schedule: the seed, the rate of single faults, and an optional burst.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub seed: u64,
    /// Chance of a fault per request, in thousandths.
    per_mille: u64,
    /// `(first request, length, fault)`: the same fault on consecutive requests.
    burst: Option<(usize, usize, Injected)>,
    /// Requests seen since the schedule was set.
    seen: usize,
    /// Every fault that fired: (request number, route key, fault).
    pub fired: Vec<(usize, String, Injected)>,
}

/// splitmix64: a tiny, well-mixed generator; enough to draw schedules.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Schedule {
    /// The schedule of `seed`: a rate between 2% and 25%, and a burst of
    /// 2 to 7 faults in one schedule out of four.
    pub fn new(seed: u64) -> Self {
        let r = mix(seed);
        let per_mille = 20 + r % 231;
        let burst = mix(r).is_multiple_of(4).then(|| {
            let at = (mix(r ^ 1) % 120) as usize;
            let len = 2 + (mix(r ^ 2) % 6) as usize;
            let fault = match draw(mix(r ^ 3), false) {
                // A burst of conflicts outside a contents write would be a 5xx anyway.
                Injected::ShaConflict(_) | Injected::Slow(_) => Injected::ServerError(502),
                f => f,
            };
            (at, len, fault)
        });
        Self { seed, per_mille, burst, seen: 0, fired: Vec::new() }
    }

    /// The fault for the next request to `method path`, if any.
    pub(super) fn next(&mut self, method: &Method, path: &str) -> Option<Injected> {
        let n = self.seen;
        self.seen += 1;
        let contents_write = method == Method::PUT && path.contains("/contents/");
        let drawn = match &self.burst {
            Some((at, len, fault)) if (*at..at + len).contains(&n) => Some(fault.clone()),
            _ => {
                let r = mix(self.seed ^ mix(n as u64 + 1));
                (r % 1000 < self.per_mille).then(|| draw(mix(r), contents_write))
            }
        };
        let fault = match drawn? {
            Injected::ShaConflict(_) if !contents_write => Injected::ServerError(503),
            f => f,
        };
        self.fired.push((n, format!("{method} {path}"), fault.clone()));
        Some(fault)
    }

    /// The longest total wait the faults that fired allow.
    pub fn wait_bound(&self, max_delay: Duration) -> Duration {
        self.fired.iter().map(|(_, _, f)| f.wait_bound(max_delay)).sum()
    }
}

/// One fault from `r`; sha conflicts are likelier on a contents write.
fn draw(r: u64, contents_write: bool) -> Injected {
    let pick = if contents_write { r % 8 } else { r % 7 };
    let r2 = mix(r);
    match pick {
        0 => Injected::ServerError([500, 502, 503, 504][(r2 % 4) as usize]),
        1 => Injected::SecondaryLimit(1 + r2 % 90),
        2 => Injected::TooMany(1 + r2 % 60),
        3 => Injected::Reset { after_effect: false },
        4 => Injected::Reset { after_effect: true },
        5 => Injected::Slow(Duration::from_millis(5 + r2 % 40)),
        _ => Injected::ShaConflict(if r2.is_multiple_of(2) { 409 } else { 422 }),
    }
}

/// What the server does with a request under a schedule.
pub(super) enum Plan {
    /// Answer it normally (perhaps late, perhaps with an injected answer
    /// queued as a one-shot route fault).
    Answer { delay: Duration },
    /// Close the connection without an answer, handling the request first
    /// when `handle` is set.
    Reset { handle: bool },
}

/// Draws the next fault of the state's schedule (if one is set) and turns
/// it into a plan; answers GitHub would send are queued as one-shot faults
/// on the request's route, so the fake's usual fault path answers them.
pub(super) fn plan(state: &mut State, method: &Method, path: &str) -> Plan {
    let Some(schedule) = state.schedule.as_mut() else { return Plan::Answer { delay: Duration::ZERO } };
    let Some(fault) = schedule.next(method, path) else { return Plan::Answer { delay: Duration::ZERO } };
    let kind = match fault {
        Injected::Reset { after_effect } => return Plan::Reset { handle: after_effect },
        Injected::Slow(delay) => return Plan::Answer { delay },
        Injected::ServerError(status) => FaultKind::Status(status),
        Injected::SecondaryLimit(secs) => FaultKind::RetryAfter403(secs),
        Injected::TooMany(secs) => FaultKind::TooMany(secs),
        Injected::ShaConflict(409) => FaultKind::Status(409),
        Injected::ShaConflict(_) => FaultKind::ShaMissing422,
    };
    if let Some(key) = super::handlers::route_key(method, path) {
        state.inject(Fault::new(&key, 0, 1, kind));
    }
    Plan::Answer { delay: Duration::ZERO }
}
