//! Tests of the registry as a whole: every contract metric is exposed, two members do not share
//! metrics, and the HTTP layer labels requests by route template.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::Router;
use tower::ServiceExt;

use super::*;

fn metrics() -> Metrics {
    Metrics::new(PrefixLabelConfig::default()).expect("metrics register")
}

/// Touches every labelled metric once, so it shows up in the exposition.
fn record_one_of_each(metrics: &Metrics) {
    metrics
        .kv
        .record_conflict(KvOp::Put, ConflictResolution::Rejected, b"app/config");
    metrics
        .kv
        .record_update_attempts(KvOp::Patch, UpdateOutcome::Success, 2);
    metrics
        .kv
        .record_client_retry(KvOp::Put, Some(b"app/config"), 1);
    metrics.store.observe(&StoreObservation::default());
    metrics.http.record_request(
        &axum::http::Method::GET,
        "/v1/status",
        StatusCode::OK,
        0.001,
    );
}

#[test]
fn every_contract_metric_is_exposed_with_help_text() {
    let metrics = metrics();
    record_one_of_each(&metrics);
    let text = metrics.render().unwrap();
    for name in [
        "revkv_conflicts_total",
        "revkv_update_attempts",
        "revkv_client_retries_total",
        "revkv_client_retry_attempt",
        "revkv_raft_term",
        "revkv_raft_is_leader",
        "revkv_raft_leader_changes_total",
        "revkv_raft_commit_index",
        "revkv_raft_applied_index",
        "revkv_raft_proposals_failed_total",
        "revkv_raft_append_duration_seconds",
        "revkv_raft_apply_duration_seconds",
        "revkv_store_revision",
        "revkv_store_compact_revision",
        "revkv_store_keys",
        "revkv_store_db_size_bytes",
        "revkv_alarms",
        "revkv_watch_watchers",
        "revkv_watch_events_sent_total",
        "revkv_watch_bookmarks_sent_total",
        "revkv_watch_slow_consumer_cancels_total",
        "revkv_watch_buffered_bytes",
        "revkv_learner_auto_promotions_total",
        "revkv_http_requests_total",
        "revkv_http_request_duration_seconds",
        "revkv_leases_active",
        "revkv_lease_granted_total",
        "revkv_lease_revoked_total",
        "revkv_lease_expired_total",
        "revkv_lease_keepalives_total",
        "revkv_lease_expiry_lag_seconds",
        "revkv_auth_authenticated_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no help"
        );
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} has no type"
        );
    }
}

#[test]
fn two_members_in_one_process_keep_separate_counts() {
    let first = metrics();
    let second = metrics();
    first
        .kv
        .record_conflict(KvOp::Txn, ConflictResolution::Rejected, b"hot/key");
    assert!(first
        .render()
        .unwrap()
        .contains("revkv_conflicts_total{op=\"txn\",prefix=\"hot\",resolution=\"rejected\"} 1"));
    assert!(!second.render().unwrap().contains("prefix=\"hot\""));
}

#[test]
fn conflicts_are_counted_by_resolution_and_a_zero_count_adds_no_series() {
    let metrics = metrics();
    let kv = &metrics.kv;
    kv.record_conflict(KvOp::Put, ConflictResolution::Merged, b"doc/a");
    kv.record_conflicts(KvOp::Patch, ConflictResolution::Retried, b"doc/a", 3);
    kv.record_conflicts(KvOp::Patch, ConflictResolution::Rejected, b"doc/a", 0);
    let text = metrics.render().unwrap();
    assert!(
        text.contains("revkv_conflicts_total{op=\"put\",prefix=\"doc\",resolution=\"merged\"} 1")
    );
    assert!(text
        .contains("revkv_conflicts_total{op=\"patch\",prefix=\"doc\",resolution=\"retried\"} 3"));
    assert!(!text.contains("resolution=\"rejected\""));
}

#[test]
fn a_first_attempt_is_not_a_client_retry() {
    let metrics = metrics();
    metrics.kv.record_client_retry(KvOp::Put, Some(b"a/b"), 0);
    metrics.kv.record_client_retry(KvOp::Get, None, 3);
    let text = metrics.render().unwrap();
    assert!(!text.contains("revkv_client_retries_total{op=\"put\""));
    assert!(text.contains("revkv_client_retries_total{op=\"get\",prefix=\"none\"} 1"));
    assert!(text.contains("revkv_client_retry_attempt_sum{op=\"get\"} 3"));
}

#[test]
fn leader_changes_count_terms_that_had_a_leader() {
    let metrics = metrics();
    let observe = |term, leader_id| {
        metrics.raft.observe(&RaftObservation {
            term,
            leader_id,
            ..RaftObservation::default()
        })
    };
    observe(1, None);
    observe(1, Some(1));
    observe(1, Some(1));
    observe(2, None);
    observe(3, Some(2));
    observe(3, Some(2));
    let text = metrics.render().unwrap();
    assert!(text.contains("revkv_raft_leader_changes_total 2"), "{text}");
    assert!(text.contains("revkv_raft_term 3"));
}

#[test]
fn the_before_scrape_callback_refreshes_gauges() {
    let metrics = Arc::new(metrics());
    let store = metrics.store.clone();
    metrics
        .add_before_scrape(move || {
            store.observe(&StoreObservation {
                revision: 42,
                state_file_bytes: 4096,
                state_bytes_in_use: 1500,
                no_space_alarms: 2,
                corrupt_alarms: 1,
                ..StoreObservation::default()
            })
        })
        .unwrap();
    let text = metrics.render().unwrap();
    assert!(text.contains("revkv_store_revision 42"));
    assert!(text.contains("revkv_store_db_size_bytes{file=\"state\"} 4096"));
    assert!(text.contains("revkv_store_state_bytes_in_use 1500"));
    assert!(text.contains("revkv_alarms{kind=\"NOSPACE\"} 2"));
    assert!(text.contains("revkv_alarms{kind=\"CORRUPT\"} 1"));
}

#[test]
fn consistency_checks_are_counted_by_result_from_zero() {
    let metrics = metrics();
    let text = metrics.render().unwrap();
    for result in ["ok", "mismatch", "skipped"] {
        let series = format!("revkv_corruption_checks_total{{result=\"{result}\"}} 0");
        assert!(text.contains(&series), "{text}");
    }
    metrics.consistency.record_check(CorruptionCheckResult::Ok);
    metrics.consistency.record_check(CorruptionCheckResult::Ok);
    metrics
        .consistency
        .record_check(CorruptionCheckResult::Mismatch);
    let text = metrics.render().unwrap();
    assert!(text.contains("revkv_corruption_checks_total{result=\"ok\"} 2"));
    assert!(text.contains("revkv_corruption_checks_total{result=\"mismatch\"} 1"));
    assert!(text.contains("revkv_corruption_checks_total{result=\"skipped\"} 0"));
}

#[test]
fn a_watcher_guard_counts_until_dropped() {
    let metrics = metrics();
    let guard = metrics.watch.track_watcher();
    assert!(metrics.render().unwrap().contains("revkv_watch_watchers 1"));
    drop(guard);
    assert!(metrics.render().unwrap().contains("revkv_watch_watchers 0"));
}

#[test]
fn durations_are_recorded_in_seconds() {
    let metrics = metrics();
    metrics.raft.record_append(Duration::from_millis(3));
    metrics.raft.record_apply(Duration::from_millis(1));
    let text = metrics.render().unwrap();
    assert!(text.contains("revkv_raft_append_duration_seconds_sum 0.003"));
    assert!(text.contains("revkv_raft_apply_duration_seconds_count 1"));
}

#[test]
fn each_peers_append_timeout_and_timed_out_appends_are_labelled_by_peer() {
    let metrics = metrics();
    metrics
        .raft
        .record_append_timeout(2, Duration::from_millis(1500));
    metrics.raft.record_append_timed_out(2);
    metrics.raft.record_append_timed_out(2);
    metrics
        .raft
        .record_append_timeout(3, Duration::from_secs(1));
    let text = metrics.render().unwrap();
    assert!(text.contains("revkv_raft_append_timeout_seconds{peer=\"2\"} 1.5"));
    assert!(text.contains("revkv_raft_append_timeout_seconds{peer=\"3\"} 1"));
    assert!(text.contains("revkv_raft_append_timeouts_total{peer=\"2\"} 2"));
    assert!(!text.contains("revkv_raft_append_timeouts_total{peer=\"3\"}"));
}

#[tokio::test]
async fn the_layer_labels_requests_by_route_template_not_by_uri() {
    let metrics = metrics();
    let router = Router::new()
        .route("/v1/kv/{*key}", get(|| async { "value" }))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(metrics.http.layer());
    for uri in ["/v1/kv/a/b", "/v1/kv/c", "/nowhere"] {
        let request = Request::get(uri).body(Body::empty()).unwrap();
        router.clone().oneshot(request).await.unwrap();
    }
    let text = metrics.render().unwrap();
    assert!(
        text.contains(
            "revkv_http_requests_total{method=\"GET\",route=\"/v1/kv/{*key}\",status=\"200\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains(
        "revkv_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1"
    ));
    assert!(!text.contains("/v1/kv/a/b"));
    assert!(text.contains(
        "revkv_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/kv/{*key}\"} 2"
    ));
}

#[test]
fn lease_events_are_counted_and_the_expiry_lag_is_in_seconds() {
    let metrics = metrics();
    metrics.lease.observe_active(3);
    metrics.lease.record_granted();
    metrics.lease.record_granted();
    metrics.lease.record_revoked();
    metrics.lease.record_keepalive();
    metrics.lease.record_expired(Duration::from_millis(300));
    let text = metrics.render().unwrap();
    assert!(text.contains("revkv_leases_active 3"), "{text}");
    assert!(text.contains("revkv_lease_granted_total 2"));
    assert!(text.contains("revkv_lease_revoked_total 1"));
    assert!(text.contains("revkv_lease_keepalives_total 1"));
    assert!(text.contains("revkv_lease_expired_total 1"));
    assert!(text.contains("revkv_lease_expiry_lag_seconds_sum 0.3"));
    assert!(text.contains("revkv_lease_expiry_lag_seconds_bucket{le=\"0.32\"} 1"));
    assert!(text.contains("revkv_lease_expiry_lag_seconds_bucket{le=\"0.16\"} 0"));
}

#[test]
fn auth_refusals_are_counted_by_reason() {
    let metrics = metrics();
    metrics.auth.record_denied(crate::AuthDenial::Forbidden);
    metrics.auth.record_denied(crate::AuthDenial::Forbidden);
    metrics
        .auth
        .record_denied(crate::AuthDenial::Unauthenticated);
    metrics.auth.record_authenticated();
    let text = metrics.render().unwrap();
    assert!(
        text.contains("revkv_auth_denied_total{reason=\"forbidden\"} 2"),
        "{text}"
    );
    assert!(text.contains("revkv_auth_denied_total{reason=\"unauthenticated\"} 1"));
    assert!(!text.contains("reason=\"bad_credentials\"} 1"));
    assert!(text.contains("revkv_auth_authenticated_total 1"));
}

#[test]
fn memory_parts_and_allocator_figures_are_exposed_by_label() {
    let metrics = metrics();
    metrics.memory.observe(&MemoryObservation {
        key_index_bytes: 1000,
        state_cache_bytes: 2000,
        state_cache_limit_bytes: 4000,
        raft_log_tail_bytes: 300,
        raft_log_tail_limit_bytes: 600,
    });
    metrics.memory.observe_allocator(&AllocatorObservation {
        allocated: 10,
        active: 20,
        resident: 30,
        retained: 40,
    });
    let text = metrics.render().unwrap();
    for series in [
        "revkv_memory_bytes{part=\"key_index\"} 1000",
        "revkv_memory_bytes{part=\"state_cache\"} 2000",
        "revkv_memory_bytes{part=\"raft_log_tail\"} 300",
        "revkv_memory_limit_bytes{part=\"state_cache\"} 4000",
        "revkv_memory_limit_bytes{part=\"raft_log_tail\"} 600",
        "revkv_allocator_bytes{stat=\"allocated\"} 10",
        "revkv_allocator_bytes{stat=\"active\"} 20",
        "revkv_allocator_bytes{stat=\"resident\"} 30",
        "revkv_allocator_bytes{stat=\"retained\"} 40",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
}

#[test]
fn before_scrape_callbacks_all_run_in_order_and_are_bounded() {
    let metrics = Arc::new(metrics());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for number in 0..MOST_BEFORE_SCRAPE_CALLBACKS {
        let order = order.clone();
        metrics
            .add_before_scrape(move || order.lock().unwrap().push(number))
            .unwrap();
    }
    assert!(
        metrics.add_before_scrape(|| {}).is_err(),
        "one callback beyond the limit is refused"
    );
    metrics.render().unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        (0..MOST_BEFORE_SCRAPE_CALLBACKS).collect::<Vec<_>>()
    );
}
