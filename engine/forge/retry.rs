//! When to try a GitHub request again, and how long to wait first.
//!
//! One policy for every call the GitHub forge makes (octocrab's own retry is
//! compiled out). The decision is a pure function of the attempt number, the
//! answer's status and headers, and the current time, so it is tested without
//! a server; the wait itself goes through an injectable [`Sleeper`] so tests
//! see the durations without sleeping them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

/// Waits for a duration. Production uses `tokio::time::sleep`; tests record.
pub type Sleeper = Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The retry policy: how many attempts, the backoff curve, and the longest
/// wait a rate limit may impose before we give up and say so.
#[derive(Clone)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. Default 5.
    pub attempts: u32,
    /// Wait before the second attempt; doubles each time. Default 1s.
    pub base_delay: Duration,
    /// Cap of one backoff wait. Default 30s.
    pub max_delay: Duration,
    /// Longest wait a `Retry-After` or rate-limit reset may ask for; a
    /// longer one fails now with the time to retry. Default 120s.
    pub max_rate_limit_wait: Duration,
    pub sleeper: Sleeper,
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("attempts", &self.attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("max_rate_limit_wait", &self.max_rate_limit_wait)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(120),
            sleeper: tokio_sleeper(),
        }
    }
}

pub fn tokio_sleeper() -> Sleeper {
    Arc::new(|d| Box::pin(tokio::time::sleep(d)))
}

/// GitHub's advice for a secondary rate limit without `Retry-After`.
pub const SECONDARY_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// What came back from one attempt, as far as retrying is concerned.
#[derive(Debug, Clone, Copy)]
pub enum Attempt<'a> {
    /// GitHub answered with this status and these headers.
    Answered(u16, &'a HeaderMap),
    /// GitHub answered 403 or 429 saying a secondary rate limit was hit
    /// (in the body). Its docs: honour `Retry-After`, else wait a minute.
    SecondaryLimit(&'a HeaderMap),
    /// No answer: connection refused or reset, or a timeout.
    Transport,
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The answer is final (success, or an error that will not change).
    Final,
    /// Try again after this long.
    RetryAfter(Duration),
    /// A rate limit asks for a longer wait than the policy allows.
    RateLimitedTooLong(Duration),
    /// Retryable, but the attempts are used up.
    Exhausted,
}

impl RetryPolicy {
    /// Exponential backoff before attempt `attempt + 1` (`attempt` >= 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The decision after attempt number `attempt` (1-based), at `now`
    /// (seconds since the epoch, for `x-ratelimit-reset`).
    pub fn decide(&self, attempt: u32, outcome: Attempt<'_>, now: u64) -> Decision {
        let wait = match outcome {
            Attempt::Transport => Some(self.backoff(attempt)),
            Attempt::SecondaryLimit(headers) => Some(rate_limit_wait(headers, now).unwrap_or(SECONDARY_LIMIT_WAIT)),
            Attempt::Answered(status, headers) => match status {
                429 => Some(rate_limit_wait(headers, now).unwrap_or_else(|| self.backoff(attempt))),
                // A 403 is a rate limit only when GitHub says so; otherwise
                // it is a permission that will not change by waiting.
                403 => rate_limit_wait(headers, now),
                500 | 502 | 503 | 504 => Some(self.backoff(attempt)),
                _ => None,
            },
        };
        match wait {
            None => Decision::Final,
            Some(_) if attempt >= self.attempts => Decision::Exhausted,
            Some(w) if w > self.max_rate_limit_wait => Decision::RateLimitedTooLong(w),
            Some(w) => Decision::RetryAfter(w),
        }
    }
}

/// The wait a rate-limited answer asks for: `Retry-After` (seconds) first,
/// then `x-ratelimit-reset` when `x-ratelimit-remaining` is 0.
fn rate_limit_wait(headers: &HeaderMap, now: u64) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<u64>().ok();
    if let Some(secs) = number("retry-after") {
        return Some(Duration::from_secs(secs));
    }
    if number("x-ratelimit-remaining") == Some(0) {
        let reset = number("x-ratelimit-reset")?;
        // One second of margin: the reset is a whole second, our clock is not.
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy { attempts: 4, ..RetryPolicy::default() }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn server_errors_and_timeouts_back_off_exponentially_up_to_the_cap() {
        let p = RetryPolicy { attempts: 10, max_delay: Duration::from_secs(5), ..policy() };
        let none = HeaderMap::new();
        assert_eq!(p.decide(1, Attempt::Answered(502, &none), 0), Decision::RetryAfter(Duration::from_secs(1)));
        assert_eq!(p.decide(2, Attempt::Answered(500, &none), 0), Decision::RetryAfter(Duration::from_secs(2)));
        assert_eq!(p.decide(3, Attempt::Transport, 0), Decision::RetryAfter(Duration::from_secs(4)));
        assert_eq!(p.decide(4, Attempt::Transport, 0), Decision::RetryAfter(Duration::from_secs(5)));
        assert_eq!(p.backoff(40), Duration::from_secs(5), "no overflow on long runs");
    }

    #[test]
    fn attempts_are_bounded() {
        let none = HeaderMap::new();
        assert_eq!(policy().decide(4, Attempt::Answered(503, &none), 0), Decision::Exhausted);
    }

    #[test]
    fn client_errors_that_will_not_change_are_final() {
        let none = HeaderMap::new();
        for status in [400, 401, 403, 404, 409, 410, 422] {
            assert_eq!(policy().decide(1, Attempt::Answered(status, &none), 0), Decision::Final, "{status}");
        }
        assert_eq!(policy().decide(1, Attempt::Answered(200, &none), 0), Decision::Final);
    }

    #[test]
    fn rate_limits_wait_as_github_says() {
        let p = policy();
        let after = headers(&[("retry-after", "7")]);
        assert_eq!(p.decide(1, Attempt::Answered(403, &after), 0), Decision::RetryAfter(Duration::from_secs(7)));
        assert_eq!(p.decide(1, Attempt::Answered(429, &after), 0), Decision::RetryAfter(Duration::from_secs(7)));
        let reset = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1010")]);
        assert_eq!(p.decide(1, Attempt::Answered(403, &reset), 1000), Decision::RetryAfter(Duration::from_secs(11)));
        let left = headers(&[("x-ratelimit-remaining", "12"), ("x-ratelimit-reset", "1010")]);
        assert_eq!(p.decide(1, Attempt::Answered(403, &left), 1000), Decision::Final, "a real 403");
        let plain_429 = HeaderMap::new();
        assert_eq!(p.decide(2, Attempt::Answered(429, &plain_429), 0), Decision::RetryAfter(Duration::from_secs(2)));
        let none = HeaderMap::new();
        assert_eq!(p.decide(1, Attempt::SecondaryLimit(&none), 0), Decision::RetryAfter(SECONDARY_LIMIT_WAIT));
        assert_eq!(p.decide(1, Attempt::SecondaryLimit(&after), 0), Decision::RetryAfter(Duration::from_secs(7)));
        let far = headers(&[("retry-after", "3600")]);
        assert_eq!(
            p.decide(1, Attempt::Answered(429, &far), 0),
            Decision::RateLimitedTooLong(Duration::from_secs(3600))
        );
    }
}
