//! revkv's Prometheus metrics: the one place that defines and registers every metric of the
//! contract's section 6 (`docs/API.md`), and the tower layer that counts and times HTTP
//! requests per route.
//!
//! Each member owns one [`Metrics`], holding its own `prometheus::Registry` (never the global
//! one, so several members can run in one process, as the tests do). The metrics are grouped by
//! subsystem, each a plain handle with recorder methods that take plain numbers and durations:
//!
//! - [`KvMetrics`]: conflicts, guaranteed-update attempts, client-reported retries.
//! - [`RaftMetrics`]: term, leadership, indexes, failed proposals, append and apply durations.
//! - [`StoreMetrics`]: revisions, keys, file sizes.
//! - [`WatchMetrics`]: watchers, events, bookmarks, slow-consumer cancels.
//! - [`LeaseMetrics`]: leases granted now, grants, revokes, expiries, keep-alives, expiry lag.
//! - [`HttpMetrics`]: requests and durations by route, with [`HttpMetricsLayer`].
//! - [`AuthMetrics`]: requests refused by auth, by reason, and tokens handed out.
//! - [`ConsistencyMetrics`]: consistency checks of the members' replica hashes, by result.
//! - [`MemoryMetrics`]: memory held by the key index, the page cache and the raft log's tail,
//!   their limits, and the allocator's totals.
//!
//! The crate knows nothing of raft, storage or the HTTP API's types: callers turn their state into
//! the plain observations defined here. Names carry their unit (`_seconds`, `_bytes`, `_total`),
//! and every label set is bounded (key prefixes are folded by [`PrefixFolder`]).

mod auth;
mod consistency;
mod http;
mod kv;
mod lease;
mod memory;
mod prefix;
mod raft;
mod registration;
mod store;
mod watch;

use std::sync::{Arc, RwLock};

use prometheus::{Encoder, Registry, TextEncoder};

pub use auth::{AuthDenial, AuthMetrics};
pub use consistency::{ConsistencyMetrics, CorruptionCheckResult};
pub use http::{HttpMetrics, HttpMetricsLayer, HttpMetricsService, UNMATCHED_ROUTE};
pub use kv::{ConflictResolution, KvMetrics, KvOp, UpdateOutcome};
pub use lease::LeaseMetrics;
pub use memory::{AllocatorObservation, MemoryMetrics, MemoryObservation};
pub use prefix::{
    key_prefix, PrefixFolder, PrefixLabelConfig, MAX_PREFIX_LABEL_BYTES, NO_KEY_PREFIX,
    OTHER_PREFIX,
};
pub use raft::{RaftMetrics, RaftObservation};
pub use store::{StoreMetrics, StoreObservation};
pub use watch::{WatchBufferBound, WatchMetrics, WatcherGuard};

/// The `Content-Type` of the text exposition format [`Metrics::render`] produces.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A callback run just before each scrape, to refresh gauges that are cheap to read on demand.
type BeforeScrape = Box<dyn Fn() + Send + Sync>;

/// Every metric of one member, registered on the member's own registry.
pub struct Metrics {
    registry: Registry,
    pub kv: KvMetrics,
    pub raft: RaftMetrics,
    pub store: StoreMetrics,
    pub watch: WatchMetrics,
    pub lease: LeaseMetrics,
    pub http: HttpMetrics,
    pub auth: AuthMetrics,
    pub consistency: ConsistencyMetrics,
    pub memory: MemoryMetrics,
    /// Run in order before each scrape; at most [`MOST_BEFORE_SCRAPE_CALLBACKS`].
    before_scrape: RwLock<Vec<BeforeScrape>>,
}

/// The most callbacks [`Metrics::add_before_scrape`] keeps: the node installs one and the program
/// embedding it a few; more would mean one is being added per request by mistake.
pub const MOST_BEFORE_SCRAPE_CALLBACKS: usize = 8;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Creates and registers every metric on a new registry.
    pub fn new(prefix_labels: PrefixLabelConfig) -> prometheus::Result<Self> {
        let registry = Registry::new();
        let prefixes = Arc::new(PrefixFolder::new(prefix_labels));
        Ok(Metrics {
            kv: KvMetrics::register(&registry, prefixes)?,
            raft: RaftMetrics::register(&registry)?,
            store: StoreMetrics::register(&registry)?,
            watch: WatchMetrics::register(&registry)?,
            lease: LeaseMetrics::register(&registry)?,
            http: HttpMetrics::register(&registry)?,
            auth: AuthMetrics::register(&registry)?,
            consistency: ConsistencyMetrics::register(&registry)?,
            memory: MemoryMetrics::register(&registry)?,
            registry,
            before_scrape: RwLock::new(Vec::new()),
        })
    }

    /// The member's registry, for callers that gather themselves.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Adds a callback [`Metrics::render`] runs first, after those added before it: the node's
    /// reads the store's revision and file sizes into [`StoreMetrics`], the `revkv` binary's its
    /// allocator's figures into [`MemoryMetrics`]. Fails beyond
    /// [`MOST_BEFORE_SCRAPE_CALLBACKS`].
    pub fn add_before_scrape(
        &self,
        refresh: impl Fn() + Send + Sync + 'static,
    ) -> prometheus::Result<()> {
        let mut callbacks = self
            .before_scrape
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if callbacks.len() >= MOST_BEFORE_SCRAPE_CALLBACKS {
            return Err(prometheus::Error::Msg(format!(
                "at most {MOST_BEFORE_SCRAPE_CALLBACKS} before-scrape callbacks"
            )));
        }
        callbacks.push(Box::new(refresh));
        Ok(())
    }

    /// Every metric in the Prometheus text exposition format (see [`TEXT_CONTENT_TYPE`]).
    pub fn render(&self) -> prometheus::Result<String> {
        for refresh in self
            .before_scrape
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
        {
            refresh();
        }
        let mut text = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut text)?;
        String::from_utf8(text).map_err(|error| prometheus::Error::Msg(error.to_string()))
    }
}

#[cfg(test)]
mod tests;
