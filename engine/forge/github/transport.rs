//! Sending a request to GitHub: the one retry loop (policy in
//! [`crate::forge::retry`]), pagination that never leaves the API host, and
//! refusals turned into errors that name the action and what to do.

use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::{StreamExt as _, TryStreamExt as _};
use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::{Access, GitHubForge, MAX_PAGES};
use crate::forge::retry::{Attempt, Decision};
use crate::forge::{ForgeError, ForgeResult};

/// The most requests one forge has in flight at once. GitHub's secondary
/// rate limits punish bursts of concurrent requests ("make requests
/// serially", its best practices say; a 403 or 429 with `Retry-After`
/// follows): a few at a time hides a listing's round trips without looking
/// like a burst. Every request waits for one of these slots
/// ([`GitHubForge::send`]), so readers that run side by side (a listing's
/// pages, the due patients' reads) share this bound rather than multiply it.
pub(super) const CONCURRENT_REQUESTS: usize = 4;

/// The path of a [`Call`] to GraphQL: sent to the GraphQL endpoint
/// (`GITHUB_GRAPHQL_URL`, `/api/graphql` on GHES), not below REST's base.
pub(super) const GRAPHQL: &str = "/graphql";

/// One request, described for the retry helper and for error messages.
pub(super) struct Call {
    pub(super) method: Method,
    /// Path and query below the API base, e.g. `/repos/o/r/issues/1`, or
    /// [`GRAPHQL`].
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

impl Call {
    /// A GraphQL request: `query` with its `variables`.
    pub(super) fn graphql(query: &str, variables: Value, action: String, access: Access) -> Self {
        let body = serde_json::json!({ "query": query, "variables": variables });
        Call { method: Method::POST, path: GRAPHQL.into(), body: Some(body), action, access }
    }
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
        let path = if call.path == GRAPHQL {
            self.endpoints.graphql.clone()
        } else {
            format!("{}{}", self.endpoints.rest, call.path)
        };
        let builder = http::Request::builder()
            .method(call.method.clone())
            .uri(path.as_str())
            .header(http::header::ACCEPT, "application/vnd.github+json")
            .header("x-github-api-version", "2022-11-28");
        let request =
            self.client.build_request(builder, call.body.as_ref()).map_err(|e| ForgeError::io(&call.action, e))?;
        // Held for the exchange only, not for a retry's wait.
        let _slot = self.in_flight.acquire().await.map_err(|e| ForgeError::io(&call.action, e))?;
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

    /// Every page of a list endpoint, in order, following `Link:
    /// rel="next"` (only to the same API host: the token never goes
    /// anywhere else). When the first page names the last one (`rel="last"`,
    /// numbered pages, as GitHub's REST listings give), the pages between
    /// are read [`CONCURRENT_REQUESTS`] at a time instead of one after
    /// another; each page is still one request with its own retries, and
    /// the last page's own `next` (the list grew meanwhile) is followed on.
    pub(super) async fn get_all(&self, first: Call, items: fn(Value) -> Option<Vec<Value>>) -> ForgeResult<Vec<Value>> {
        self.get_pages(first, move |reply: &Reply, action: &str| {
            let page: Value = reply.json(action)?;
            items(page).ok_or_else(|| ForgeError::Api {
                action: action.into(),
                status: reply.status.as_u16(),
                message: "the answer is not the list the API documents".into(),
            })
        })
        .await
    }

    /// [`Self::get_all`] of a listing whose pages are arrays of `W`, read
    /// straight into `W` (the fields ward reads): a page of 100 issues is
    /// some 700 KB of JSON, most of it fields nobody reads.
    pub(super) async fn get_all_as<W: for<'de> Deserialize<'de> + Send>(&self, first: Call) -> ForgeResult<Vec<W>> {
        self.get_pages(first, |reply: &Reply, action: &str| reply.json::<Vec<W>>(action)).await
    }

    /// The pages of [`Self::get_all`], each turned into items by `parse`.
    async fn get_pages<T: Send>(
        &self,
        first: Call,
        parse: impl Fn(&Reply, &str) -> ForgeResult<Vec<T>> + Sync,
    ) -> ForgeResult<Vec<T>> {
        let parse = &parse;
        let page = self.get_page(&first, parse).await?;
        let mut out = page.items;
        let mut next = page.next;
        let mut pages = 1;
        if let Some(numbered) = self.numbered_pages(&first, next.as_deref(), page.last.as_deref())? {
            pages += numbered.len();
            let read = futures_util::stream::iter(numbered)
                .map(|call| async move { self.get_page(&call, parse).await })
                .buffered(CONCURRENT_REQUESTS);
            let read: Vec<Page<T>> = read.try_collect().await?;
            next = read.last().and_then(|p| p.next.clone());
            out.extend(read.into_iter().flat_map(|p| p.items));
        }
        let mut call = first;
        while let Some(url) = next {
            if pages >= MAX_PAGES {
                return Err(too_many_pages(&call.action));
            }
            call.path = self.same_host_path(&url, &call.action)?;
            let page = self.get_page(&call, parse).await?;
            out.extend(page.items);
            next = page.next;
            pages += 1;
        }
        Ok(out)
    }

    /// One page of a list endpoint: its items and where the `Link` header
    /// says the next and the last pages are.
    async fn get_page<T>(
        &self,
        call: &Call,
        parse: &impl Fn(&Reply, &str) -> ForgeResult<Vec<T>>,
    ) -> ForgeResult<Page<T>> {
        let reply = self.send_ok(call).await?;
        let items = parse(&reply, &call.action)?;
        Ok(Page { items, next: link(&reply.headers, "next"), last: link(&reply.headers, "last") })
    }

    /// The requests for pages `n..=m` when the first page's `next` and
    /// `last` links are one URL (on our API host) but for `page=n` and
    /// `page=m`; `None` when they are not (a cursor, no `last`): then the
    /// pages are followed one by one.
    pub(super) fn numbered_pages(
        &self,
        first: &Call,
        next: Option<&str>,
        last: Option<&str>,
    ) -> ForgeResult<Option<Vec<Call>>> {
        let (Some(next), Some(last)) = (next, last) else { return Ok(None) };
        let next = self.same_host_path(next, &first.action)?;
        let last = self.same_host_path(last, &first.action)?;
        let (Some((from, before, after)), Some((to, last_before, last_after))) = (page_param(&next), page_param(&last))
        else {
            return Ok(None);
        };
        if (before, after) != (last_before, last_after) || from > to {
            return Ok(None);
        }
        // The first page and these: no more than one by one would follow.
        if to - from + 1 >= MAX_PAGES {
            return Err(too_many_pages(&first.action));
        }
        let calls = (from..=to)
            .map(|n| Call {
                method: first.method.clone(),
                path: format!("{before}{n}{after}"),
                body: first.body.clone(),
                action: first.action.clone(),
                access: first.access,
            })
            .collect();
        Ok(Some(calls))
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

/// One page of a listing, as [`GitHubForge::get_all`] reads it.
struct Page<T> {
    items: Vec<T>,
    /// The `rel="next"` and `rel="last"` URLs of its `Link` header.
    next: Option<String>,
    last: Option<String>,
}

fn too_many_pages(action: &str) -> ForgeError {
    ForgeError::io(action, format!("more than {MAX_PAGES} pages; narrow the query"))
}

/// The URL of a `Link` header whose relation is `rel` (`next`, `last`).
pub(super) fn link(headers: &HeaderMap, rel: &str) -> Option<String> {
    let link = headers.get(http::header::LINK)?.to_str().ok()?;
    let wanted = format!("rel=\"{rel}\"");
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == wanted)
            .then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

/// A path's `page=<n>` query parameter: `n`, and the path before and after
/// the number (to ask for another page of the same listing).
fn page_param(path: &str) -> Option<(usize, &str, &str)> {
    let (_, query) = path.split_once('?')?;
    let query_start = path.len() - query.len();
    let mut offset = query_start;
    for pair in query.split('&') {
        if let Some(value) = pair.strip_prefix("page=") {
            let start = offset + "page=".len();
            let end = start + value.len();
            return Some((value.parse().ok()?, &path[..start], &path[end..]));
        }
        offset += pair.len() + 1;
    }
    None
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
