//! What every handler receives (`ApiState`: the backend, the limits and the member's metrics) and
//! the limits the HTTP layer enforces. Its own file so that the handlers and the router in `mod.rs`
//! do not import each other.

use std::sync::Arc;
use std::time::Duration;

use revkv_metrics::Metrics;

use crate::auth::{AuthOptions, Caller, CheckedBackend};
use crate::backend::KvBackend;
use crate::conflict_rates::{ConflictRateLimits, ConflictRates};
use crate::hot_keys::{HotKeyLimits, HotKeys};
use tokio::sync::Semaphore;

/// Default request body limit: the contract's 1.5 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1536 * 1024;

/// Limits the HTTP layer enforces before a request reaches the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body accepted; a larger one is answered `413 too_large`.
    pub max_body_bytes: usize,
    /// Bounds on streaming keep-alives (`revkv serve --max-lease-keepalive-streams`,
    /// `--lease-keepalive-idle-timeout-ms`).
    pub lease_stream: LeaseStreamLimits,
    /// Backups (`GET /v1/snapshot`) streaming from this member at once; one more is answered
    /// `503 unavailable` (`revkv serve --max-snapshot-streams`). Each holds a read transaction
    /// (which keeps the pages of its revision from being reused) and a blocking thread.
    pub max_snapshot_streams: usize,
    /// The hot-key top-k behind `GET /v1/conflicts` (`revkv serve --hot-keys-capacity`,
    /// `--hot-keys-window-seconds`).
    pub hot_keys: HotKeyLimits,
    /// The conflicts-per-interval history behind `GET /v1/conflicts/rates` (embedders set it;
    /// the default keeps ten minutes in five-second steps).
    pub conflict_rates: ConflictRateLimits,
    /// Token lifetime and concurrent password checks (`revkv serve --auth-token-ttl-seconds`,
    /// `--max-concurrent-password-checks`).
    pub auth: AuthOptions,
}

/// Default `HttpLimits::max_snapshot_streams`: backups are rare, and each pins its revision's
/// pages in the state file for as long as it runs.
pub const DEFAULT_MAX_SNAPSHOT_STREAMS: usize = 2;

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            lease_stream: LeaseStreamLimits::default(),
            max_snapshot_streams: DEFAULT_MAX_SNAPSHOT_STREAMS,
            hot_keys: HotKeyLimits::default(),
            conflict_rates: ConflictRateLimits::default(),
            auth: AuthOptions::default(),
        }
    }
}

/// Bounds on one member's streaming keep-alives: what one stream may hold, and how many streams
/// may be open at once. Part of `HttpLimits`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseStreamLimits {
    /// Longest request line (`{"id": N}` needs about 30 bytes); a longer one ends the stream
    /// with an `invalid` line.
    pub max_line_bytes: usize,
    /// Renewals of one stream running at once; the member reads no further request line until
    /// one finishes, so a client that sends faster than the leader renews is slowed, not queued.
    pub max_renewals_in_flight: usize,
    /// A stream with no request line for this long ends with a `timeout` line, so an abandoned
    /// connection does not hold a stream forever. A client with long TTLs opens a new stream when
    /// it next has a renewal to send.
    pub idle_timeout: Duration,
    /// Streams open on this member at once; one more is answered `503 unavailable`.
    pub max_streams: usize,
}

impl Default for LeaseStreamLimits {
    fn default() -> Self {
        LeaseStreamLimits {
            max_line_bytes: 1024,
            max_renewals_in_flight: 64,
            idle_timeout: Duration::from_secs(60),
            max_streams: 10_000,
        }
    }
}

/// What every handler receives: the backend, the limits and the member's metrics.
///
/// axum clones the state for every layer and handler a request passes through, so everything but
/// the backend sits behind one `Arc` ([`ApiShared`], reached through `Deref`): a clone is two
/// reference-count increments, not a copy of the limits and one increment per shared part.
pub(crate) struct ApiState<B> {
    pub backend: Arc<B>,
    shared: Arc<ApiShared>,
}

/// The parts of [`ApiState`] every backend view shares.
pub(crate) struct ApiShared {
    pub limits: HttpLimits,
    pub lease_stream: LeaseStreamLimits,
    pub metrics: Arc<Metrics>,
    /// One permit per open streaming keep-alive (`LeaseStreamLimits::max_streams`).
    pub lease_streams: Arc<Semaphore>,
    /// One permit per backup streaming now (`HttpLimits::max_snapshot_streams`).
    pub snapshot_streams: Arc<Semaphore>,
    /// The member's hottest conflicting keys.
    pub hot_keys: Arc<HotKeys>,
    /// The member's conflicts and retries per interval over the last minutes.
    pub conflict_rates: Arc<ConflictRates>,
    /// One permit per password check running now (`AuthOptions::max_concurrent_password_checks`).
    pub password_checks: Arc<Semaphore>,
}

impl<B> ApiState<B> {
    pub fn new(backend: Arc<B>, shared: ApiShared) -> Self {
        ApiState {
            backend,
            shared: Arc::new(shared),
        }
    }
}

impl<B> std::ops::Deref for ApiState<B> {
    type Target = ApiShared;

    fn deref(&self) -> &ApiShared {
        &self.shared
    }
}

impl<B: KvBackend> ApiState<B> {
    /// The same state with a backend that acts for `caller` and checks every request.
    pub fn acting_for(&self, caller: Caller) -> ApiState<CheckedBackend<B>> {
        self.with_backend(Arc::new(CheckedBackend::new(
            Arc::clone(&self.backend),
            caller,
        )))
    }
}

impl<B> ApiState<B> {
    /// The same state (limits, metrics, bounds) over another backend.
    fn with_backend<C>(&self, backend: Arc<C>) -> ApiState<C> {
        ApiState {
            backend,
            shared: Arc::clone(&self.shared),
        }
    }
}

// A derived `Clone` would demand `B: Clone`; only the `Arc` is cloned.
impl<B> Clone for ApiState<B> {
    fn clone(&self) -> Self {
        self.with_backend(Arc::clone(&self.backend))
    }
}
