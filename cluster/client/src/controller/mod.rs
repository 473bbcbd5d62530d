//! The controller runtime: what client-go's informers and work queue and controller-runtime give a
//! Kubernetes controller, on revkv. An [`Informer`](super::Informer) keeps a bounded, indexed
//! cache of a prefix and hands out changes; a [`WorkQueue`](work_queue::WorkQueue) de-duplicates
//! and rate-limits the keys to reconcile; a [`Controller`] runs workers that reconcile each key,
//! requeue on conflict with backoff, and record how long each object took to converge.

pub mod cache;
pub mod convergence;
pub mod metrics;
pub mod object;

pub use cache::{CacheLimits, IndexFunction, InformerEvent, ObjectCache};
pub use metrics::{ControllerMetricFamilies, ControllerMetrics};
pub use object::{
    create_object, update_spec, write_status, Object, ObjectMetadata, ObjectStatus, StatusConflict,
};
