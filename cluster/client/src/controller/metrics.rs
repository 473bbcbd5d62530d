//! A controller's Prometheus metrics, registered in the embedding process's registry: the work
//! queue (depth, adds, retries), reconciles (latency by outcome), conflicts per key prefix, the
//! informer's cache (objects, counted bytes, relists, divergences found by the cache check) and the
//! time from a desired-state change to its observation (`revkv_controller_convergence_seconds`).
//!
//! The families are registered once per registry ([`ControllerMetricFamilies::register`]); each
//! controller takes its labelled handles with [`ControllerMetricFamilies::for_controller`]. The
//! `prefix` label of conflicts is the first [`CONFLICT_PREFIX_SEGMENTS`] segments of the key, and
//! at most [`MOST_CONFLICT_PREFIXES`] distinct values per controller (later ones count as
//! `other`), so the label cannot grow with the number of keys.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Key segments (split at `/`) that make a conflict's `prefix` label.
pub const CONFLICT_PREFIX_SEGMENTS: usize = 2;

/// Distinct `prefix` label values per controller.
pub const MOST_CONFLICT_PREFIXES: usize = 64;

/// Seconds, from a millisecond to about seventeen minutes.
fn latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 21).expect("valid buckets")
}

/// The metric families of every controller of one registry.
#[derive(Clone)]
pub struct ControllerMetricFamilies {
    queue_depth: IntGaugeVec,
    queue_adds: IntCounterVec,
    queue_retries: IntCounterVec,
    reconcile_seconds: HistogramVec,
    convergence_seconds: HistogramVec,
    conflicts: IntCounterVec,
    cache_objects: IntGaugeVec,
    cache_bytes: IntGaugeVec,
    relists: IntCounterVec,
    cache_checks: IntCounterVec,
    cache_divergences: IntCounterVec,
    informer_errors: IntCounterVec,
}

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let family = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(family.clone()))?;
    Ok(family)
}

fn gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGaugeVec, prometheus::Error> {
    let family = IntGaugeVec::new(Opts::new(name, help), &["controller"])?;
    registry.register(Box::new(family.clone()))?;
    Ok(family)
}

fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<HistogramVec, prometheus::Error> {
    let options = HistogramOpts::new(name, help).buckets(latency_buckets());
    let family = HistogramVec::new(options, labels)?;
    registry.register(Box::new(family.clone()))?;
    Ok(family)
}

impl ControllerMetricFamilies {
    /// Registers the families in `registry`; a second registration in one registry fails.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let controller = &["controller"];
        Ok(ControllerMetricFamilies {
            queue_depth: gauge(registry, "revkv_controller_queue_depth", "Keys waiting in the work queue.")?,
            queue_adds: counter(registry, "revkv_controller_queue_adds_total", "Keys added to the work queue.", controller)?,
            queue_retries: counter(registry, "revkv_controller_queue_retries_total", "Keys requeued with backoff after a conflict, an error or a requeue asked for.", controller)?,
            reconcile_seconds: histogram(registry, "revkv_controller_reconcile_seconds", "Time per reconcile, by outcome (done, requeue, conflict, error).", &["controller", "result"])?,
            convergence_seconds: histogram(registry, "revkv_controller_convergence_seconds", "Time from the informer's first sight of a generation to the sight of its observation.", controller)?,
            conflicts: counter(registry, "revkv_controller_conflicts_total", "Reconciles that ended in a write conflict, by key prefix.", &["controller", "prefix"])?,
            cache_objects: gauge(registry, "revkv_controller_cache_objects", "Objects in the informer's cache.")?,
            cache_bytes: gauge(registry, "revkv_controller_cache_bytes", "Bytes the informer's cache counts against its limit.")?,
            relists: counter(registry, "revkv_controller_relists_total", "Lists after the first, by reason (compacted, divergence, error).", &["controller", "reason"])?,
            cache_checks: counter(registry, "revkv_controller_cache_checks_total", "Comparisons of the informer's cache with the store.", controller)?,
            cache_divergences: counter(registry, "revkv_controller_cache_divergences_total", "Keys the cache check found differing from the store (an event the watch lost).", controller)?,
            informer_errors: counter(registry, "revkv_controller_informer_errors_total", "Errors of the informer's list or watch, each followed by a wait and a relist.", controller)?,
        })
    }

    /// The handles of the controller called `name`.
    pub fn for_controller(&self, name: &str) -> ControllerMetrics {
        ControllerMetrics {
            name: name.to_string(),
            families: self.clone(),
            conflict_prefixes: Arc::new(Mutex::new(HashSet::new())),
        }
    }
}

/// One controller's metrics.
#[derive(Clone)]
pub struct ControllerMetrics {
    name: String,
    families: ControllerMetricFamilies,
    conflict_prefixes: Arc<Mutex<HashSet<String>>>,
}

/// The outcome label of a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileOutcome {
    Done,
    Requeue,
    Conflict,
    Error,
}

impl ReconcileOutcome {
    fn label(self) -> &'static str {
        match self {
            ReconcileOutcome::Done => "done",
            ReconcileOutcome::Requeue => "requeue",
            ReconcileOutcome::Conflict => "conflict",
            ReconcileOutcome::Error => "error",
        }
    }
}

impl ControllerMetrics {
    pub fn set_queue_depth(&self, depth: usize) {
        let depth = i64::try_from(depth).unwrap_or(i64::MAX);
        self.families
            .queue_depth
            .with_label_values(&[&self.name])
            .set(depth);
    }

    pub fn count_add(&self) {
        self.families
            .queue_adds
            .with_label_values(&[&self.name])
            .inc();
    }

    pub fn count_retry(&self) {
        self.families
            .queue_retries
            .with_label_values(&[&self.name])
            .inc();
    }

    pub fn observe_reconcile(&self, outcome: ReconcileOutcome, took: Duration) {
        let labels = [self.name.as_str(), outcome.label()];
        let family = &self.families.reconcile_seconds;
        family
            .with_label_values(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn observe_convergence(&self, took: Duration) {
        let family = &self.families.convergence_seconds;
        family
            .with_label_values(&[&self.name])
            .observe(took.as_secs_f64());
    }

    /// Counts a conflict on `key` under its bounded prefix label.
    pub fn count_conflict(&self, key: &str) {
        let prefix = conflict_prefix(key);
        let label = {
            let mut seen = self
                .conflict_prefixes
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if seen.contains(&prefix) || seen.len() < MOST_CONFLICT_PREFIXES {
                seen.insert(prefix.clone());
                prefix
            } else {
                "other".to_string()
            }
        };
        let family = &self.families.conflicts;
        family
            .with_label_values(&[self.name.as_str(), &label])
            .inc();
    }

    pub fn set_cache_size(&self, objects: usize, counted_bytes: usize) {
        let objects = i64::try_from(objects).unwrap_or(i64::MAX);
        let bytes = i64::try_from(counted_bytes).unwrap_or(i64::MAX);
        self.families
            .cache_objects
            .with_label_values(&[&self.name])
            .set(objects);
        self.families
            .cache_bytes
            .with_label_values(&[&self.name])
            .set(bytes);
    }

    /// Counts a relist; `reason` is `compacted`, `divergence` or `error`.
    pub fn count_relist(&self, reason: &'static str) {
        let family = &self.families.relists;
        family
            .with_label_values(&[self.name.as_str(), reason])
            .inc();
    }

    pub fn count_cache_check(&self) {
        self.families
            .cache_checks
            .with_label_values(&[&self.name])
            .inc();
    }

    pub fn count_divergences(&self, keys: usize) {
        let family = &self.families.cache_divergences;
        family.with_label_values(&[&self.name]).inc_by(keys as u64);
    }

    pub fn count_informer_error(&self) {
        self.families
            .informer_errors
            .with_label_values(&[&self.name])
            .inc();
    }
}

/// The first [`CONFLICT_PREFIX_SEGMENTS`] segments of `key`, with their trailing `/`.
pub fn conflict_prefix(key: &str) -> String {
    let mut end = 0;
    for (segment, _) in key.split_inclusive('/').zip(0..CONFLICT_PREFIX_SEGMENTS) {
        end += segment.len();
    }
    key[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_label_is_the_first_two_segments() {
        assert_eq!(conflict_prefix("apps/replicas/web/3"), "apps/replicas/");
        assert_eq!(conflict_prefix("apps/web"), "apps/web");
        assert_eq!(conflict_prefix("flat"), "flat");
    }

    #[test]
    fn conflict_prefixes_are_bounded_and_families_register_once() {
        let registry = Registry::new();
        let families = ControllerMetricFamilies::register(&registry).unwrap();
        assert!(ControllerMetricFamilies::register(&registry).is_err());
        let metrics = families.for_controller("c");
        for index in 0..(MOST_CONFLICT_PREFIXES + 5) {
            metrics.count_conflict(&format!("p{index}/x/y"));
        }
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        let series = text
            .lines()
            .filter(|line| line.starts_with("revkv_controller_conflicts_total{"))
            .count();
        assert_eq!(series, MOST_CONFLICT_PREFIXES + 1, "{text}");
        assert!(text.contains(r#"prefix="other"} 5"#), "{text}");
    }
}
