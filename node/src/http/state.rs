//! What every handler receives (`ApiState`: the backend, the limits and the member's metrics) and
//! the limits the HTTP layer enforces. Its own file so that the handlers and the router in `mod.rs`
//! do not import each other.

use std::sync::Arc;

use revkv_metrics::Metrics;

/// Default request body limit: the contract's 1.5 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1536 * 1024;

/// Limits the HTTP layer enforces before a request reaches the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body accepted; a larger one is answered `413 too_large`.
    pub max_body_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// What every handler receives: the backend, the limits and the member's metrics.
pub(crate) struct ApiState<B> {
    pub backend: Arc<B>,
    pub limits: HttpLimits,
    pub metrics: Arc<Metrics>,
}

// A derived `Clone` would demand `B: Clone`; only the `Arc` is cloned.
impl<B> Clone for ApiState<B> {
    fn clone(&self) -> Self {
        ApiState {
            backend: Arc::clone(&self.backend),
            limits: self.limits.clone(),
            metrics: Arc::clone(&self.metrics),
        }
    }
}
