//! `revkv_client::Client`: a Rust client for revkv's HTTP API (`docs/API.md`).
//!
//! ```no_run
//! # async fn example() -> Result<(), revkv_client::ClientError> {
//! use revkv_client::{retry_on_conflict, Client, PutRequest, DEFAULT_RETRY};
//!
//! let client = Client::new(["http://127.0.0.1:7001", "http://127.0.0.1:7002"])?;
//! client.put("counter", "0").await?;
//! // Read, modify, write with the revision read; on a conflict, read again and retry.
//! retry_on_conflict(DEFAULT_RETRY, || async {
//!     let current = client.get("counter").await?.kv;
//!     let next = current.value.parse::<u64>().unwrap_or(0) + 1;
//!     let request = PutRequest::new("counter", next.to_string()).if_mod_revision(current.mod_revision);
//!     client.put_with(&request).await
//! })
//! .await?;
//! # Ok(())
//! # }
//! ```
//!
//! The parts:
//! - [`transport`]: failover between members, per-call timeouts, and the rule that a write whose
//!   outcome is unknown is reported ([`ClientError::OutcomeUnknown`]) and never repeated silently.
//! - [`backoff`]: `wait.Backoff` delays and client-go's [`DEFAULT_RETRY`] / [`DEFAULT_BACKOFF`].
//! - [`retry`]: `retry_on_conflict` with client-go semantics.
//! - [`kv`], [`txn`], [`admin`]: the typed calls, one group per file; [`types`] the answers.
//! - [`watch`]: watches that resume on another member; [`informer`]: a local copy of a prefix kept
//!   current by list-then-watch.
//! - [`leases`]: grant, revoke, time-to-live, list, one keep-alive; [`lease_keeper`]: a task that
//!   keeps many leases alive over one streaming keep-alive ([`keepalive_stream`]) and reports
//!   their loss.
//! - [`concurrency`]: etcd's recipes on leases: `Session`, `Mutex`, `Election`.
//! - [`controller`]: the controller runtime, after client-go's informers, `util/workqueue` and
//!   controller-runtime: a bounded, indexed cache, a rate-limited work queue, reconcile workers,
//!   the generation / observedGeneration convention and convergence metrics.
//! - [`credentials`]: calling as a user when the cluster has auth enabled (token bought and
//!   renewed by the transport); [`auth_admin`]: users, roles and permissions.

pub mod adaptive_backoff;
pub mod admin;
pub mod auth_admin;
pub mod backoff;
pub mod concurrency;
pub mod controller;
pub mod credentials;
pub mod error;
pub mod informer;
pub mod keepalive_stream;
pub mod kv;
pub mod lease_keeper;
pub mod leases;
pub mod maintenance;
pub mod merge;
pub mod retry;
pub mod tls;
pub mod transport;
pub mod txn;
pub mod types;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

pub use adaptive_backoff::{AdaptiveBackoff, ConflictHistory, DEFAULT_ADAPTIVE_BACKOFF};
pub use auth_admin::{
    AuthChangeResponse, AuthStatusResponse, NamesResponse, PermissionEntry, PermissionKeys,
    RoleResponse, UserResponse,
};
pub use backoff::{Backoff, Sleeper, TokioSleeper, DEFAULT_BACKOFF, DEFAULT_RETRY};
pub use credentials::Credentials;
pub use error::ClientError;
pub use informer::{CacheCheck, CacheReader, Informer, InformerChange, InformerSettings};
pub use kv::{
    Consistency, DeleteRequest, Precondition, PutRequest, RangePages, RangeRequest, ReadOptions,
};
pub use lease_keeper::{KeptLease, LeaseKeeper, LeaseKeeperSettings, LeaseLoss, LeaseState};
pub use maintenance::{AlarmMember, AlarmsResponse, DefragmentResponse, DisarmResponse};
pub use retry::{
    retry_on_conflict, retry_on_conflict_adaptive, retry_on_conflict_counted,
    retry_on_conflict_scheduled, AdaptiveRetry, RetrySchedule, RetryTally,
};
pub use tls::ClientTls;
pub use transport::RETRY_ATTEMPT_HEADER;
use transport::{Answer, Call, Transport};
pub use txn::{Compare, CompareOp, CompareTarget, Txn, TxnOp};
pub use types::*;
pub use watch::{EventKind, WatchEvent, WatchMessage, WatchRequest, WatchUpdate, Watcher};

/// The quick-start cluster's members (`scripts/cluster.sh up`), comma-separated: where `revkv ctl`
/// and the examples go when told nothing else.
pub const LOCAL_CLUSTER_ENDPOINTS: &str =
    "http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003";

/// The members named by `REVKV_ENDPOINTS` (comma-separated), else the quick-start cluster's.
pub fn endpoints_from_environment() -> Vec<String> {
    let listed =
        std::env::var("REVKV_ENDPOINTS").unwrap_or_else(|_| LOCAL_CLUSTER_ENDPOINTS.into());
    listed
        .split(',')
        .map(str::trim)
        .filter(|endpoint| !endpoint.is_empty())
        .map(str::to_string)
        .collect()
}

/// How long one call may take by default, failover included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long making one connection may take before the member counts as unreachable.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Delays between failover attempts: 25 ms doubling to at most 1 s, jittered by up to 50 %.
pub const DEFAULT_FAILOVER_BACKOFF: Backoff = Backoff {
    duration: Duration::from_millis(25),
    factor: 2.0,
    jitter: 0.5,
    steps: 16,
    cap: Duration::from_secs(1),
};

/// Attempts per call by default (each on the next member in the list).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// The largest answer body read into memory (a range page is bounded by the member too).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// A handle on a revkv cluster. Cheap to clone; clones share connections and the member preference.
#[derive(Clone)]
pub struct Client {
    transport: Arc<Transport>,
    timeout: Duration,
    /// Recent conflicts per key, shared by clones, for the adaptive backoff of
    /// [`Client::update_with_merge`].
    conflicts: Arc<ConflictHistory>,
}

/// Settings of a [`Client`]; [`ClientBuilder::build`] makes it.
pub struct ClientBuilder {
    endpoints: Vec<String>,
    request_timeout: Duration,
    connect_timeout: Duration,
    failover_backoff: Backoff,
    max_attempts: u32,
    max_answer_bytes: usize,
    sleeper: Box<dyn Sleeper>,
    tls: ClientTls,
    credentials: Option<Credentials>,
}

impl ClientBuilder {
    /// The CA to verify `https://` members against, and a client certificate for members that
    /// require one.
    pub fn tls(mut self, tls: ClientTls) -> Self {
        self.tls = tls;
        self
    }

    /// Calls as this user when the cluster has auth enabled (etcdctl's `--user`): the client
    /// authenticates before its first call and again when its token expires.
    pub fn credentials(mut self, credentials: Option<Credentials>) -> Self {
        self.credentials = credentials;
        self
    }

    /// The time limit of each call, failover included (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The time limit of making one connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The delays between failover attempts.
    pub fn failover_backoff(mut self, backoff: Backoff) -> Self {
        self.failover_backoff = backoff;
        self
    }

    /// Attempts per call (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How failover waits (tests pass one that does not sleep).
    pub fn sleeper(mut self, sleeper: Box<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Checks the endpoints (`http://host:port` or `https://host:port`) and the TLS files, and
    /// makes the client.
    pub fn build(self) -> Result<Client, ClientError> {
        if self.endpoints.is_empty() {
            return Err(invalid_setting("at least one endpoint is needed"));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|endpoint| normalised_endpoint(endpoint))
            .collect::<Result<Vec<_>, _>>()?;
        let any_https = endpoints.iter().any(|url| url.starts_with("https://"));
        if any_https && self.tls.ca_file.is_none() {
            return Err(invalid_setting(
                "https:// endpoints need the CA that signed the members' certificates (--cacert)",
            ));
        }
        let builder = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        let builder = self.tls.configure(builder)?;
        let http = builder
            .build()
            .map_err(|error| invalid_setting(&format!("cannot build the HTTP client: {error}")))?;
        let transport = Transport::new(
            endpoints,
            http,
            self.failover_backoff,
            self.max_attempts,
            self.max_answer_bytes,
            self.sleeper,
        )
        .with_credentials(self.credentials);
        Ok(Client {
            transport: Arc::new(transport),
            timeout: self.request_timeout,
            conflicts: Arc::new(ConflictHistory::default()),
        })
    }
}

impl Client {
    /// A client for the members at `endpoints` with the default settings.
    pub fn new<I, S>(endpoints: I) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder(endpoints).build()
    }

    /// Settings for a client of the members at `endpoints`.
    pub fn builder<I, S>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            failover_backoff: DEFAULT_FAILOVER_BACKOFF,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            sleeper: Box::new(TokioSleeper),
            tls: ClientTls::default(),
            credentials: None,
        }
    }

    /// The same client with another time limit per call.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            transport: Arc::clone(&self.transport),
            timeout,
            conflicts: Arc::clone(&self.conflicts),
        }
    }

    /// The record of recent conflicts per key this client (and its clones) keeps for adaptive
    /// backoff.
    pub fn conflict_history(&self) -> &ConflictHistory {
        &self.conflicts
    }

    /// The members this client talks to, in order.
    pub fn endpoints(&self) -> &[String] {
        &self.transport.endpoints
    }

    /// The time limit of each call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn execute(&self, call: &Call) -> Result<Answer, ClientError> {
        self.transport.execute(call, self.timeout).await
    }

    /// Sends `call` and parses its JSON answer.
    async fn call_json<T: DeserializeOwned>(&self, call: &Call) -> Result<T, ClientError> {
        let answer = self.execute(call).await?;
        parse_answer(&answer.body)
    }
}

fn parse_answer<T: DeserializeOwned>(body: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|error| ClientError::UnreadableAnswer {
        message: error.to_string(),
    })
}

fn invalid_setting(message: &str) -> ClientError {
    ClientError::Invalid {
        message: message.to_string(),
    }
}

/// `endpoint` checked to be `http://host:port` or `https://host:port` (no path), without a
/// trailing slash.
pub fn normalised_endpoint(endpoint: &str) -> Result<String, ClientError> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let host_and_port = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(|| {
            invalid_setting(&format!(
                "endpoint {endpoint:?} must start with http:// or https://"
            ))
        })?;
    if host_and_port.is_empty() || host_and_port.contains('/') {
        return Err(invalid_setting(&format!(
            "endpoint {endpoint:?} must be http(s)://host:port with no path"
        )));
    }
    Ok(trimmed.to_string())
}
