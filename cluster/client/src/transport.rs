//! Sending one call to the cluster: which member to try, when to move to another, and when an
//! answer can no longer be waited for.
//!
//! Rules, per call:
//! - The call starts at the member that last answered, and moves to the next member in the list
//!   after each failed attempt, waiting a jittered, growing delay (the failover [`Backoff`]) in
//!   between. Attempts are bounded in number (`max_attempts`) and in time (the call's timeout).
//! - A connection that could not be made, and a `503 unavailable` answer, mean the request was not
//!   carried out: every call, write or read, moves on to another member. A 503's `Retry-After` is
//!   not waited for: another member may answer at once, and the delays grow to a second anyway.
//! - A `504 timeout`, a connection lost after the request was sent, or the time budget running out
//!   while waiting: the request may have been carried out. A read moves on (reading twice is
//!   harmless); a write stops at once with [`ClientError::OutcomeUnknown`], never retried silently.
//! - Every other answer, success or error, is final and goes back to the caller.
//!
//! Inside [`retry_on_conflict`](super::retry_on_conflict), every request carries
//! `X-Retry-Attempt: n` for the n-th retry.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::Method;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::backoff::{Backoff, Sleeper};
use super::credentials::{Credentials, TokenCache};
use super::error::{error_from_answer, ClientError};
use super::retry::current_retry_attempt;

mod authentication;

/// The header that tells a member this request is the n-th retry after a conflict.
pub const RETRY_ATTEMPT_HEADER: &str = "X-Retry-Attempt";

/// One request, independent of the member it goes to.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
    pub body: Option<CallBody>,
    /// `(name, value)` pairs, such as `If-Match`.
    pub headers: Vec<(&'static str, String)>,
    /// Whether carrying the request out twice is harmless (reads). Decides what happens when the
    /// outcome of an attempt is unknown.
    pub idempotent: bool,
}

/// A request body and its content type.
#[derive(Debug, Clone)]
pub struct CallBody {
    pub bytes: Vec<u8>,
    pub content_type: &'static str,
}

impl Call {
    /// A read: safe to repeat on another member whatever happened.
    pub fn read(path_and_query: String) -> Call {
        Call {
            method: Method::GET,
            path_and_query,
            body: None,
            headers: Vec::new(),
            idempotent: true,
        }
    }

    /// A change with a JSON body (or none): never repeated once it may have been carried out.
    pub fn write(method: Method, path_and_query: String, json: Option<serde_json::Value>) -> Call {
        Call {
            method,
            path_and_query,
            body: json.map(|document| CallBody {
                bytes: serde_json::to_vec(&document).expect("a JSON value always serialises"),
                content_type: "application/json",
            }),
            headers: Vec::new(),
            idempotent: false,
        }
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> Call {
        self.headers.push((name, value));
        self
    }
}

/// A final answer: its status, headers, and (for [`Transport::execute`]) its whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub endpoint: String,
}

/// An open two-way stream: the answer (its body unread), the member that answered, and the
/// sender that feeds the request body (dropping it ends the request).
pub struct DuplexStream {
    pub response: reqwest::Response,
    pub endpoint: String,
    pub sender: mpsc::Sender<Bytes>,
}

/// A request body whose chunks come from a bounded channel; it ends when the sender is dropped.
struct ChannelBody {
    receiver: mpsc::Receiver<Bytes>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.receiver
            .poll_recv(context)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// How the cluster is reached: the member list, the HTTP client and the failover policy.
pub struct Transport {
    pub endpoints: Vec<String>,
    pub http: reqwest::Client,
    pub failover_backoff: Backoff,
    pub max_attempts: u32,
    pub max_answer_bytes: usize,
    pub sleeper: Box<dyn Sleeper>,
    /// The member the next call starts at: the one that answered last.
    preferred: AtomicUsize,
    /// The user this client calls as, and its token (none: the cluster has auth disabled).
    pub(crate) tokens: TokenCache,
}

/// What one attempt on one member came to.
enum Attempt {
    /// A final answer (any status but 503 and 504).
    Answered(reqwest::Response),
    /// The request was not carried out (no connection, 503): any call may move on.
    NotCarriedOut(String),
    /// The request may have been carried out (504, connection lost, time ran out).
    MaybeCarriedOut(String),
}

impl Transport {
    pub fn new(
        endpoints: Vec<String>,
        http: reqwest::Client,
        failover_backoff: Backoff,
        max_attempts: u32,
        max_answer_bytes: usize,
        sleeper: Box<dyn Sleeper>,
    ) -> Transport {
        Transport {
            endpoints,
            http,
            failover_backoff,
            max_attempts,
            max_answer_bytes,
            sleeper,
            preferred: AtomicUsize::new(0),
            tokens: TokenCache::default(),
        }
    }

    /// The same transport calling as the user of `credentials`.
    pub fn with_credentials(mut self, credentials: Option<Credentials>) -> Transport {
        self.tokens = TokenCache::new(credentials);
        self
    }

    /// Sends `call` within `timeout` and reads the whole answer. Error statuses become errors.
    pub async fn execute(&self, call: &Call, timeout: Duration) -> Result<Answer, ClientError> {
        let deadline = Instant::now() + timeout;
        self.with_token(deadline, || self.execute_without_token(call, deadline))
            .await
    }

    /// [`Transport::execute`] with whatever token is held, authenticating never.
    pub(crate) async fn execute_without_token(
        &self,
        call: &Call,
        deadline: Instant,
    ) -> Result<Answer, ClientError> {
        let (response, endpoint) = self.send_with_failover(call, deadline).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = self
            .read_body(response, deadline)
            .await
            .map_err(|reason| lost_answer(call, &endpoint, reason))?;
        if !(200..300).contains(&status) {
            return Err(error_from_answer(status, &body));
        }
        Ok(Answer {
            status,
            headers,
            body,
            endpoint,
        })
    }

    /// Sends `call` and returns the answer with its body unread (watch and snapshot streams), once
    /// its status is a success. `timeout` bounds getting the answer's head, not reading the body.
    pub async fn open_stream(
        &self,
        call: &Call,
        timeout: Duration,
    ) -> Result<(reqwest::Response, String), ClientError> {
        let deadline = Instant::now() + timeout;
        self.with_token(deadline, || async {
            let (response, endpoint) = self.send_with_failover(call, deadline).await?;
            let status = response.status().as_u16();
            if (200..300).contains(&status) {
                return Ok((response, endpoint));
            }
            let body = self.read_body(response, deadline).await.unwrap_or_default();
            Err(error_from_answer(status, &body))
        })
        .await
    }

    /// Moves the next call's first attempt away from the member at `endpoint` (a stream to it broke).
    pub fn avoid(&self, endpoint: &str) {
        if let Some(index) = self.endpoints.iter().position(|known| known == endpoint) {
            self.preferred
                .store((index + 1) % self.endpoints.len(), Ordering::Relaxed);
        }
    }

    async fn send_with_failover(
        &self,
        call: &Call,
        deadline: Instant,
    ) -> Result<(reqwest::Response, String), ClientError> {
        self.failover(call.idempotent, deadline, |endpoint| {
            self.build_request(call, endpoint)
        })
        .await
    }

    /// Sends `POST path_and_query` with a request body fed through the returned sender, and
    /// returns once the answer's head says success (the streaming keep-alive). Failover as for a
    /// read: nothing was sent in the body before the head came, so another member may be asked.
    /// `timeout` bounds getting the head.
    pub async fn open_duplex(
        &self,
        path_and_query: &str,
        buffered_chunks: usize,
        timeout: Duration,
    ) -> Result<DuplexStream, ClientError> {
        let deadline = Instant::now() + timeout;
        self.with_token(deadline, || {
            self.open_duplex_once(path_and_query, buffered_chunks, deadline)
        })
        .await
    }

    async fn open_duplex_once(
        &self,
        path_and_query: &str,
        buffered_chunks: usize,
        deadline: Instant,
    ) -> Result<DuplexStream, ClientError> {
        let mut feed = None;
        let build = |endpoint: &str| {
            let (sender, receiver) = mpsc::channel(buffered_chunks.max(1));
            feed = Some(sender);
            let mut builder = self
                .http
                .post(format!("{endpoint}{path_and_query}"))
                .header(CONTENT_TYPE, "application/x-ndjson");
            if let Some(token) = self.tokens.current() {
                builder = builder.bearer_auth(token);
            }
            builder
                .body(reqwest::Body::wrap(ChannelBody { receiver }))
                .build()
        };
        let (response, endpoint) = self.failover(true, deadline, build).await?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body = self.read_body(response, deadline).await.unwrap_or_default();
            return Err(error_from_answer(status, &body));
        }
        Ok(DuplexStream {
            response,
            endpoint,
            sender: feed.expect("an answered attempt built its request"),
        })
    }

    /// Up to `max_attempts` attempts before `deadline`, each on the preferred member, with the
    /// request `build` makes for that member; see the module comment for when it moves on.
    async fn failover(
        &self,
        idempotent: bool,
        deadline: Instant,
        mut build: impl FnMut(&str) -> reqwest::Result<reqwest::Request>,
    ) -> Result<(reqwest::Response, String), ClientError> {
        let mut backoff = self.failover_backoff;
        let mut last_reason = String::from("no attempt was made");
        for attempt in 0..self.max_attempts {
            if attempt > 0 {
                let delay = backoff
                    .step()
                    .min(deadline.saturating_duration_since(Instant::now()));
                self.sleeper.sleep(delay).await;
            }
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout {
                    message: format!("no answer in time; last failure: {last_reason}"),
                });
            }
            let index = self.next_member();
            let endpoint = &self.endpoints[index];
            match self.attempt_once(build(endpoint), deadline).await {
                Attempt::Answered(response) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok((response, endpoint.clone()));
                }
                Attempt::NotCarriedOut(reason) => last_reason = format!("{endpoint}: {reason}"),
                Attempt::MaybeCarriedOut(reason) if idempotent => {
                    last_reason = format!("{endpoint}: {reason}");
                }
                Attempt::MaybeCarriedOut(reason) => {
                    self.avoid(endpoint);
                    return Err(ClientError::OutcomeUnknown {
                        endpoint: endpoint.clone(),
                        message: reason,
                    });
                }
            }
            self.avoid(endpoint);
        }
        Err(ClientError::Unavailable {
            attempts: self.max_attempts,
            message: last_reason,
        })
    }

    /// The member the next attempt goes to: the preferred one. A failed attempt calls
    /// [`Transport::avoid`], which moves the preference to the next member in the list.
    fn next_member(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.endpoints.len()
    }

    async fn attempt_once(
        &self,
        request: reqwest::Result<reqwest::Request>,
        deadline: Instant,
    ) -> Attempt {
        let request = match request {
            Ok(request) => request,
            Err(error) => return Attempt::NotCarriedOut(error.to_string()),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, self.http.execute(request)).await {
            Err(_) => Attempt::MaybeCarriedOut("no answer before the call's timeout".into()),
            Ok(Err(error)) if error.is_connect() => {
                Attempt::NotCarriedOut(format!("cannot connect: {error}"))
            }
            Ok(Err(error)) => Attempt::MaybeCarriedOut(format!("connection lost: {error}")),
            Ok(Ok(response)) => match response.status().as_u16() {
                503 => Attempt::NotCarriedOut("503 unavailable".into()),
                504 => Attempt::MaybeCarriedOut("504 timeout".into()),
                _ => Attempt::Answered(response),
            },
        }
    }

    fn build_request(&self, call: &Call, endpoint: &str) -> reqwest::Result<reqwest::Request> {
        let url = format!("{endpoint}{}", call.path_and_query);
        let mut builder = self.http.request(call.method.clone(), url);
        for (name, value) in &call.headers {
            builder = builder.header(*name, value);
        }
        if let Some(token) = self.tokens.current() {
            builder = builder.bearer_auth(token);
        }
        if let Some(attempt) = current_retry_attempt().filter(|attempt| *attempt >= 1) {
            builder = builder.header(RETRY_ATTEMPT_HEADER, attempt.to_string());
        }
        if let Some(body) = &call.body {
            builder = builder
                .header(CONTENT_TYPE, body.content_type)
                .body(body.bytes.clone());
        }
        builder.build()
    }

    /// The whole body, at most `max_answer_bytes`, before `deadline`.
    async fn read_body(
        &self,
        mut response: reqwest::Response,
        deadline: Instant,
    ) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(remaining, response.chunk())
                .await
                .map_err(|_| "the answer did not arrive before the call's timeout".to_string())?
                .map_err(|error| format!("connection lost while reading the answer: {error}"))?;
            let Some(chunk) = chunk else {
                return Ok(body);
            };
            if body.len() + chunk.len() > self.max_answer_bytes {
                return Err(format!(
                    "the answer is over the limit of {} bytes",
                    self.max_answer_bytes
                ));
            }
            body.extend_from_slice(&chunk);
        }
    }
}

/// The error of an answer whose body was lost: a write's outcome is unknown; a read timed out.
fn lost_answer(call: &Call, endpoint: &str, reason: String) -> ClientError {
    if call.idempotent {
        ClientError::Timeout { message: reason }
    } else {
        ClientError::OutcomeUnknown {
            endpoint: endpoint.to_string(),
            message: reason,
        }
    }
}
