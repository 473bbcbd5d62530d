//! HTTP metrics and the tower layer that records them: requests by method, route and status, and
//! request durations by method and route.
//!
//! The `route` label is the matched path template (`/v1/kv/{*key}`), never the raw URI, so the
//! label set is bounded by the router's routes; a request no route matched is `unmatched`. Methods
//! outside the standard set are `other`. The duration runs until the response head is ready, so
//! for a streaming answer (a watch) it measures the time to open the stream, not its lifetime.
//!
//! The layer must be added with `Router::layer` (not `route_layer` on a sub-router and not around
//! the whole router from outside), so it runs after routing and can read axum's `MatchedPath`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::MatchedPath;
use axum::http::{Method, Request, Response, StatusCode};
use prometheus::{HistogramVec, IntCounterVec, Registry};
use tower_layer::Layer;
use tower_service::Service;

use crate::registration::{counter_vec, histogram_vec, request_latency_buckets};

/// The `route` label of a request no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The HTTP metrics of one member's client listener.
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    requests_total: IntCounterVec,
    request_duration_seconds: HistogramVec,
}

impl HttpMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(HttpMetrics {
            requests_total: counter_vec(
                registry,
                "revkv_http_requests_total",
                "Client API requests answered, by method, route template and status code.",
                &["method", "route", "status"],
            )?,
            request_duration_seconds: histogram_vec(
                registry,
                "revkv_http_request_duration_seconds",
                "Time from receiving a client API request to its response head, by method and \
                 route template.",
                &["method", "route"],
                request_latency_buckets(),
            )?,
        })
    }

    /// Records one answered request.
    /// The status label is the three-digit code, a bounded set.
    pub fn record_request(&self, method: &Method, route: &str, status: StatusCode, seconds: f64) {
        let method = method_label(method);
        self.requests_total
            .with_label_values(&[method, route, status.as_str()])
            .inc();
        self.request_duration_seconds
            .with_label_values(&[method, route])
            .observe(seconds);
    }

    /// The layer that records every request passing through it.
    pub fn layer(&self) -> HttpMetricsLayer {
        HttpMetricsLayer {
            metrics: self.clone(),
        }
    }
}

/// The standard methods by name, anything else as `other`, so clients cannot grow the label set.
fn method_label(method: &Method) -> &'static str {
    const KNOWN: [Method; 9] = [
        Method::GET,
        Method::PUT,
        Method::POST,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ];
    KNOWN
        .iter()
        .find(|known| *known == method)
        .map_or("other", |known| known.as_str())
}

/// A tower layer recording [`HttpMetrics`] for every request.
#[derive(Clone, Debug)]
pub struct HttpMetricsLayer {
    metrics: HttpMetrics,
}

impl<S> Layer<S> for HttpMetricsLayer {
    type Service = HttpMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HttpMetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`HttpMetricsLayer`] wraps around each route.
#[derive(Clone, Debug)]
pub struct HttpMetricsService<S> {
    inner: S,
    metrics: HttpMetrics,
}

impl<S, RequestBody, ResponseBody> Service<Request<RequestBody>> for HttpMetricsService<S>
where
    S: Service<Request<RequestBody>, Response = Response<ResponseBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    RequestBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
        let started = Instant::now();
        let method = request.method().clone();
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or(UNMATCHED_ROUTE.to_string(), |matched| {
                matched.as_str().to_string()
            });
        let metrics = self.metrics.clone();
        // The clone that was polled ready must serve this request; keep a fresh clone for the next.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            let response = ready.call(request).await?;
            let seconds = started.elapsed().as_secs_f64();
            metrics.record_request(&method, &route, response.status(), seconds);
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusual_methods_fold_into_other() {
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        let custom = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&custom), "other");
    }
}
