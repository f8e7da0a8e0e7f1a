//! Sending a request to GitHub: the one retry loop (policy in
//! [`crate::forge::retry`]), pagination that never leaves the API host, and
//! refusals turned into errors that name the action and what to do.

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::{Access, GitHubForge, MAX_PAGES};
use crate::forge::retry::{Attempt, Decision};
use crate::forge::{ForgeError, ForgeResult};

/// One request, described for the retry helper and for error messages.
pub(super) struct Call {
    pub(super) method: Method,
    /// Path and query below the API base, e.g. `/repos/o/r/issues/1`.
    pub(super) path: String,
    pub(super) body: Option<Value>,
    /// What we were doing, for messages: "read issue #4 of o/r".
    pub(super) action: String,
    pub(super) access: Access,
}

/// A final answer (after retries).
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: String,
}

impl Reply {
    pub(super) fn json<T: for<'de> Deserialize<'de>>(&self, action: &str) -> ForgeResult<T> {
        serde_json::from_str(&self.body).map_err(|e| ForgeError::Api {
            action: action.into(),
            status: self.status.as_u16(),
            message: format!("the answer is not what the API documents ({e})"),
        })
    }

    pub(super) fn message(&self) -> String {
        #[derive(Deserialize)]
        struct Body {
            message: Option<String>,
        }
        serde_json::from_str::<Body>(&self.body)
            .ok()
            .and_then(|b| b.message)
            .unwrap_or_else(|| self.body.chars().take(200).collect())
    }
}

impl GitHubForge {
    /// The one place a request is sent: retries per the policy and returns
    /// the final answer, whatever its status. Transport failures that outlive
    /// the retries become an error naming the action.
    pub(super) async fn send(&self, call: &Call) -> ForgeResult<Reply> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = self.send_once(call).await;
            match self.judge(attempt, &outcome) {
                Decision::RetryAfter(wait) => self.wait(call, attempt, wait, &outcome).await,
                decision => return conclude(call, attempt, decision, outcome),
            }
        }
    }

    /// [`Self::send`] for a write that is not safe to repeat (GitHub's
    /// `addComment`): before each retry `look` checks whether the failed
    /// attempt landed all the same, and gives the request to send instead
    /// (one safe to repeat, sent with the usual retries) when it did.
    pub(super) async fn send_looking<Fut>(&self, call: &Call, mut look: impl FnMut() -> Fut) -> ForgeResult<Reply>
    where
        Fut: std::future::Future<Output = ForgeResult<Option<Call>>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = self.send_once(call).await;
            match self.judge(attempt, &outcome) {
                Decision::RetryAfter(wait) => {
                    self.wait(call, attempt, wait, &outcome).await;
                    if let Some(instead) = look().await? {
                        return self.send(&instead).await;
                    }
                }
                decision => return conclude(call, attempt, decision, outcome),
            }
        }
    }

    /// What the retry policy says of attempt `attempt`'s outcome.
    fn judge(&self, attempt: u32, outcome: &ForgeResult<Reply>) -> Decision {
        match outcome {
            Ok(reply) => {
                let status = reply.status.as_u16();
                let secondary =
                    matches!(status, 403 | 429) && reply.message().to_lowercase().contains("secondary rate limit");
                let seen = if secondary {
                    Attempt::SecondaryLimit(&reply.headers)
                } else {
                    Attempt::Answered(status, &reply.headers)
                };
                self.retry.decide(attempt, seen, now())
            }
            Err(_) => self.retry.decide(attempt, Attempt::Transport, now()),
        }
    }

    async fn wait(&self, call: &Call, attempt: u32, wait: std::time::Duration, outcome: &ForgeResult<Reply>) {
        let why = match outcome {
            Ok(r) => format!("GitHub answered {}", r.status.as_u16()),
            Err(e) => e.to_string(),
        };
        tracing::warn!(action = %call.action, attempt, wait_ms = wait.as_millis() as u64, "{why}; retrying");
        (self.retry.sleeper)(wait).await;
    }

    async fn send_once(&self, call: &Call) -> ForgeResult<Reply> {
        let builder = http::Request::builder()
            .method(call.method.clone())
            .uri(call.path.as_str())
            .header(http::header::ACCEPT, "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28");
        let request =
            self.client.build_request(builder, call.body.as_ref()).map_err(|e| ForgeError::io(&call.action, e))?;
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| ForgeError::io(&call.action, format!("no answer from {} ({e})", self.settings.api_url)))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = self.client.body_to_string(response).await.map_err(|e| ForgeError::io(&call.action, e))?;
        Ok(Reply { status, headers, body })
    }

    /// Sends and requires a 2xx answer; anything else becomes an error that
    /// names the action and, for 401/403/404, what to do.
    pub(super) async fn send_ok(&self, call: &Call) -> ForgeResult<Reply> {
        let reply = self.send(call).await?;
        if reply.status.is_success() { Ok(reply) } else { Err(self.refusal(call, &reply)) }
    }

    pub(super) fn refusal(&self, call: &Call, reply: &Reply) -> ForgeError {
        let message = reply.message();
        match reply.status.as_u16() {
            401 => ForgeError::Forbidden {
                action: call.action.clone(),
                message,
                help: "the token is invalid or expired: check WARD_TOKEN / GITHUB_TOKEN".into(),
            },
            403 => ForgeError::Forbidden { action: call.action.clone(), message, help: call.access.help() },
            404 => ForgeError::Forbidden {
                action: call.action.clone(),
                message: format!("{message} (404)"),
                help: format!(
                    "{} does not exist or the token cannot see it; {}",
                    self.settings.repo,
                    call.access.help()
                ),
            },
            status => ForgeError::Api { action: call.action.clone(), status, message },
        }
    }

    /// Every page of a list endpoint, following `Link: rel="next"` (only to
    /// the same API host: the token never goes anywhere else).
    pub(super) async fn get_all(&self, first: Call, items: fn(Value) -> Option<Vec<Value>>) -> ForgeResult<Vec<Value>> {
        let mut out = Vec::new();
        let mut call = first;
        for _ in 0..MAX_PAGES {
            let reply = self.send_ok(&call).await?;
            let page: Value = reply.json(&call.action)?;
            let page = items(page).ok_or_else(|| ForgeError::Api {
                action: call.action.clone(),
                status: reply.status.as_u16(),
                message: "the answer is not the list the API documents".into(),
            })?;
            out.extend(page);
            match next_link(&reply.headers) {
                None => return Ok(out),
                Some(url) => call.path = self.same_host_path(&url, &call.action)?,
            }
        }
        Err(ForgeError::io(&call.action, format!("more than {MAX_PAGES} pages; narrow the query")))
    }

    /// The path and query of `url` below our API base, refusing other hosts.
    pub(super) fn same_host_path(&self, url: &str, action: &str) -> ForgeResult<String> {
        let base: http::Uri = self.settings.api_url.parse().map_err(|e| ForgeError::io(action, e))?;
        let next: http::Uri = url.parse().map_err(|e| ForgeError::io(action, format!("bad next link ({e})")))?;
        if next.scheme() != base.scheme() || next.authority() != base.authority() {
            return Err(ForgeError::io(action, format!("the next page `{url}` is on another host; not following")));
        }
        let pq = next.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let base_path = base.path().trim_end_matches('/');
        Ok(pq.strip_prefix(base_path).filter(|p| p.starts_with('/')).unwrap_or(pq).to_string())
    }
}

/// The answer, or the error, once the retry policy says no more.
fn conclude(call: &Call, attempt: u32, decision: Decision, outcome: ForgeResult<Reply>) -> ForgeResult<Reply> {
    match (decision, outcome) {
        (Decision::Final | Decision::RetryAfter(_), outcome) => outcome,
        (Decision::RateLimitedTooLong(wait), _) => Err(ForgeError::Api {
            action: call.action.clone(),
            status: 429,
            message: format!(
                "GitHub's rate limit asks to wait {}s, longer than ward waits; run again later",
                wait.as_secs()
            ),
        }),
        (Decision::Exhausted, Ok(reply)) => Err(ForgeError::Api {
            action: call.action.clone(),
            status: reply.status.as_u16(),
            message: format!("{} (still failing after {attempt} attempts)", reply.message()),
        }),
        (Decision::Exhausted, Err(ForgeError::Io { action, message })) => {
            Err(ForgeError::Io { action, message: format!("{message} (still failing after {attempt} attempts)") })
        }
        (Decision::Exhausted, Err(e)) => Err(e),
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The `rel="next"` URL of a `Link` header.
pub(super) fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(http::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

/// Percent-encodes a path segment or query value.
pub(super) fn percent(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
