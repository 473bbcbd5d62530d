//! The controller runtime: the pieces a Kubernetes-style controller is built from, after
//! client-go's informers, its `util/workqueue` and controller-runtime. An informer
//! ([`crate::informer`]) keeps a bounded, indexed local copy of a prefix ([`cache`]) and hands the
//! keys that changed to a [`work_queue::WorkQueue`], which de-duplicates them, bounds how many it
//! holds and delays retries with a [`rate_limiter::ControllerRateLimiter`]; the workers of a
//! [`Controller`] ([`reconcile_loop`]) take keys one at a time and reconcile each key's desired
//! state with the cluster's. [`object`] is the generation / observedGeneration convention that
//! tells desired from observed state, [`convergence`] times each change from its write to its
//! observation, and [`metrics`] exports it all to Prometheus.

pub mod cache;
pub mod convergence;
pub mod metrics;
pub mod object;
pub mod rate_limiter;
pub mod reconcile_loop;
pub mod work_queue;

/// The `prometheus` crate the metrics are registered with, so an embedding process uses the same.
pub use prometheus;

pub use cache::{CacheLimits, IndexFunction, InformerEvent, ObjectCache};
pub use metrics::{ControllerMetricFamilies, ControllerMetrics};
pub use object::{
    create_object, update_spec, write_status, Object, ObjectMetadata, ObjectStatus, StatusConflict,
};
pub use rate_limiter::{ControllerRateLimiter, RateLimiterSettings};
pub use reconcile_loop::{
    Action, Controller, ControllerSettings, ReconcileError, ReconcileRequest, RunningController,
};
pub use work_queue::WorkQueue;
