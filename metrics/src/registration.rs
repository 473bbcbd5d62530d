//! Small helpers that build a metric and register it on a member's registry in one step, so every
//! metric module reads as a list of names, help texts and label sets.

use prometheus::core::Collector;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Registers a clone of `collector` and hands the original back.
fn registered<C: Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> prometheus::Result<C> {
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

pub fn counter(registry: &Registry, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    registered(registry, IntCounter::with_opts(Opts::new(name, help))?)
}

pub fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    registered(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
}

pub fn gauge(registry: &Registry, name: &str, help: &str) -> prometheus::Result<IntGauge> {
    registered(registry, IntGauge::with_opts(Opts::new(name, help))?)
}

pub fn gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntGaugeVec> {
    registered(registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

/// A gauge vector of fractional values (seconds).
pub fn float_gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<GaugeVec> {
    registered(registry, GaugeVec::new(Opts::new(name, help), labels)?)
}

pub fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: Vec<f64>,
) -> prometheus::Result<Histogram> {
    let options = HistogramOpts::new(name, help).buckets(buckets);
    registered(registry, Histogram::with_opts(options)?)
}

pub fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> prometheus::Result<HistogramVec> {
    let options = HistogramOpts::new(name, help).buckets(buckets);
    registered(registry, HistogramVec::new(options, labels)?)
}

/// Latency buckets from 100 µs doubling to about 3.3 s: fsyncs and applies on fast disks land in
/// the low buckets, stalls in the high ones.
pub fn storage_latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0001, 2.0, 16).expect("constant bucket layout is valid")
}

/// Latency buckets from 0.5 ms doubling to about 16 s, for whole HTTP requests.
pub fn request_latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0005, 2.0, 16).expect("constant bucket layout is valid")
}

/// Buckets for small counts of attempts: every count up to 6 has its own bucket.
pub fn attempt_buckets() -> Vec<f64> {
    vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0]
}
