//! The example controller (`cluster/client/examples/replica_controller.rs`) against a real
//! three-member cluster while writers change the replica sets' specs concurrently and the leader
//! is killed mid-run and later restarted: every set converges (status at its generation, replica
//! keys as the spec says, read linearizably from the store), no acknowledged spec write is lost
//! (each write counts itself in the spec), the controller's cache ends equal to the store, and the
//! cache check found no divergence (the resuming watch lost no event across the failover).
//!
//! Also on real members: every reconcile outcome (a panic, a conflict, a requeue, a requeue after
//! a delay) brings the key back until it is done, and a status write after a spec change
//! conflicts, or merges through the three-way merge when asked to.

use crate::client_examples::cas_counter;
use crate::client_examples::replica_controller as example;
use crate::process_cluster::{cluster_options, wait_until, ProcessCluster, CONVERGENCE_TIMEOUT};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use revkv_client::controller::prometheus::{Registry, TextEncoder};
use revkv_client::controller::{update_spec, ControllerMetricFamilies, ControllerSettings};
use revkv_client::{Backoff, Client, ClientError, InformerSettings, RangeRequest};

const SETS: usize = 12;
const WRITERS: usize = 4;
const UPDATES_PER_WRITER: u64 = 30;

/// Writers contend with each other and with the controller's status writes on twelve keys: the
/// many short, spread-out attempts of the counter example's contended increments.
const CONTENDED: Backoff = cas_counter::CONTENDED;

/// Per set: spec writes acknowledged, and those whose outcome is unknown (the leader died).
#[derive(Default)]
struct WriteTally {
    acknowledged: BTreeMap<String, u64>,
    unknown: BTreeMap<String, u64>,
}

/// One writer: `UPDATES_PER_WRITER` spec changes to sets picked in turn from its offset.
async fn write_specs(
    client: Client,
    writer: usize,
    tally: Arc<Mutex<WriteTally>>,
    done: Arc<AtomicU64>,
) {
    for update in 0..UPDATES_PER_WRITER {
        let name = format!("set{:02}", (writer * 7 + update as usize * 5) % SETS);
        let replicas = ((writer as u64 + update) % 5) as u32;
        let change = |spec: &mut example::SetSpec| {
            spec.replicas = replicas;
            spec.writes += 1;
        };
        let key = example::set_key(&name);
        let written =
            update_spec::<example::SetSpec, example::SetStatus>(&client, &key, CONTENDED, change)
                .await;
        let mut tally = tally.lock().unwrap();
        match written {
            Ok(_) => *tally.acknowledged.entry(name).or_default() += 1,
            Err(ClientError::OutcomeUnknown { .. }) => *tally.unknown.entry(name).or_default() += 1,
            // Refused before it was written (no member, out of attempts): nothing happened.
            Err(_) => {}
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_controller_converges_and_loses_no_update_when_the_leader_is_killed() {
    let mut cluster = ProcessCluster::start(3, cluster_options()).await;
    cluster.wait_for_published_client_urls().await;
    let client = Client::new(cluster.client_urls()).expect("a client of the cluster");
    let names: Vec<String> = (0..SETS).map(|index| format!("set{index:02}")).collect();
    for name in &names {
        example::want_replicas(&client, name, 1)
            .await
            .expect("the set is created");
    }

    let registry = Registry::new();
    let families = ControllerMetricFamilies::register(&registry).unwrap();
    let settings = ControllerSettings {
        informer: InformerSettings {
            progress_interval: Some(Duration::from_millis(200)),
            ..InformerSettings::default()
        },
        cache_check_interval: Some(Duration::from_millis(500)),
        ..ControllerSettings::default()
    };
    let metrics = families.for_controller("replica-sets");
    let controller = example::start(&client, settings, Some(metrics))
        .await
        .unwrap();

    let tally = Arc::new(Mutex::new(WriteTally::default()));
    let done = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let writing = write_specs(client.clone(), writer, tally.clone(), done.clone());
            tokio::spawn(writing)
        })
        .collect();
    let total = WRITERS as u64 * UPDATES_PER_WRITER;
    let reached = |count: u64| {
        let done = done.clone();
        async move || (done.load(Ordering::Relaxed) >= count).then_some(())
    };
    wait_until(
        "a third of the writes",
        CONVERGENCE_TIMEOUT,
        reached(total / 3),
    )
    .await;
    let leader = cluster.leader().await;
    cluster.kill(leader);
    wait_until(
        "two thirds of the writes",
        CONVERGENCE_TIMEOUT,
        reached(2 * total / 3),
    )
    .await;
    cluster.restart(leader).await;
    for writer in writers {
        writer.await.expect("a writer panicked");
    }

    let converged = example::wait_until_converged(&client, &names, Duration::from_secs(120));
    assert!(converged.await.unwrap(), "every set converges");
    let tally = std::mem::take(&mut *tally.lock().unwrap());
    for name in &names {
        let set =
            example::ReplicaSet::parse(&client.get(&example::set_key(name)).await.unwrap().kv)
                .unwrap();
        let acknowledged = tally.acknowledged.get(name).copied().unwrap_or(0);
        let unknown = tally.unknown.get(name).copied().unwrap_or(0);
        let updates = set.spec.writes - 1;
        assert!(
            acknowledged <= updates && updates <= acknowledged + unknown,
            "{name}: {updates} updates in the spec, {acknowledged} acknowledged, {unknown} unknown"
        );
    }
    assert_cache_equals_store(&client, &controller.cache()).await;

    let text = TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    let sample = |name: &str| {
        let prefix = format!(r#"{name}{{controller="replica-sets"}} "#);
        (text.lines())
            .find_map(|line| line.strip_prefix(&prefix)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        sample("revkv_controller_cache_checks_total") > 0,
        "the cache was checked: {text}"
    );
    assert_eq!(
        sample("revkv_controller_cache_divergences_total"),
        0,
        "the cache check found a lost event: {text}"
    );
    let converged_count = sample("revkv_controller_convergence_seconds_count");
    assert!(
        converged_count >= SETS as u64,
        "each set's convergence was timed: {text}"
    );
    controller
        .shut_down()
        .await
        .expect("the controller stops cleanly");
}

/// Waits until the cache has caught up with the store's revision, then compares every key and
/// mod revision under the prefix.
async fn assert_cache_equals_store(client: &Client, cache: &revkv_client::CacheReader) {
    let stored = client
        .range(&RangeRequest::prefix(example::PREFIX))
        .await
        .unwrap();
    let revision = stored.header.revision;
    let caught_up = async || (cache.revision() >= revision).then_some(());
    wait_until(
        "the cache reaches the store's revision",
        CONVERGENCE_TIMEOUT,
        caught_up,
    )
    .await;
    let at_revision =
        RangeRequest::prefix(example::PREFIX).read_options(revkv_client::ReadOptions {
            revision: Some(cache.revision()),
            ..Default::default()
        });
    let stored = client.range(&at_revision).await.unwrap();
    let stored: Vec<(String, u64)> = stored
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.mod_revision))
        .collect();
    let cached: Vec<(String, u64)> = cache.with_objects(|objects| {
        objects
            .values()
            .map(|kv| (kv.key.clone(), kv.mod_revision))
            .collect()
    });
    assert_eq!(
        cached, stored,
        "the controller's cache equals the store at its revision"
    );
}

/// What the workers do with each outcome, on a real cluster: a reconcile that panics, one that
/// meets a write conflict, one that asks to be requeued and one that asks to come back later are
/// each reconciled again (the worker survives the panic), until `Done`; each outcome is counted
/// under its label, the conflict under its key's prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reconcile_outcome_brings_the_key_back_until_it_is_done() {
    use revkv_client::controller::{Action, Controller};
    use revkv_client::PutRequest;

    let cluster = ProcessCluster::start(1, cluster_options()).await;
    let client = Client::new(cluster.client_urls()).expect("a client of the cluster");
    client.put("outcomes/one", "v").await.unwrap();
    let registry = Registry::new();
    let families = ControllerMetricFamilies::register(&registry).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let controller = Controller::new("outcomes", client.clone(), "outcomes/")
        .metrics(families.for_controller("outcomes"))
        .start(move |request| {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match call {
                    0 => panic!("a reconcile that panics"),
                    1 => {
                        // A write with a revision that is not the key's: a conflict.
                        let stale = PutRequest::new(&request.key, "w").if_mod_revision(1);
                        request.client.put_with(&stale).await?;
                        unreachable!("the stale write conflicts")
                    }
                    2 => Ok(Action::Requeue),
                    3 => Ok(Action::RequeueAfter(Duration::from_millis(20))),
                    _ => Ok(Action::Done),
                }
            }
        })
        .await
        .unwrap();
    let done = async || (calls.load(Ordering::SeqCst) >= 5).then_some(());
    wait_until("five reconciles of the key", CONVERGENCE_TIMEOUT, done).await;
    controller
        .shut_down()
        .await
        .expect("the controller stops cleanly");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "nothing requeues a key that is done"
    );

    let text = TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    for (result, count) in [("error", 1), ("conflict", 1), ("requeue", 2), ("done", 1)] {
        let line = format!(
            r#"revkv_controller_reconcile_seconds_count{{controller="outcomes",result="{result}"}} {count}"#
        );
        assert!(text.contains(&line), "{line} in {text}");
    }
    let conflict =
        r#"revkv_controller_conflicts_total{controller="outcomes",prefix="outcomes/one"} 1"#;
    assert!(text.contains(conflict), "{text}");
}

/// A status write from a value read before a spec change: with `StatusConflict::Fail` it is a
/// conflict (the controller requeues and reconciles the new spec); with `StatusConflict::Merge`
/// the three-way merge carries the status onto the new value, keeping the newer spec and
/// generation and recording only the generation the controller actually acted on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_after_a_spec_change_conflicts_or_merges_as_asked() {
    use revkv_client::controller::{create_object, write_status, StatusConflict};
    use revkv_client::DEFAULT_BACKOFF;

    let cluster = ProcessCluster::start(1, cluster_options()).await;
    let client = Client::new(cluster.client_urls()).expect("a client of the cluster");
    let key = example::set_key("merged");
    let spec = example::SetSpec {
        replicas: 1,
        writes: 1,
    };
    create_object(&client, &key, spec).await.unwrap();
    let read = client.get(&key).await.unwrap().kv;
    let change = |spec: &mut example::SetSpec| spec.replicas = 3;
    update_spec::<example::SetSpec, example::SetStatus>(&client, &key, DEFAULT_BACKOFF, change)
        .await
        .unwrap();

    let status = example::SetStatus { ready: 1 };
    let refused =
        write_status::<example::SetSpec, _>(&client, &read, status.clone(), StatusConflict::Fail)
            .await;
    assert!(
        matches!(refused, Err(ClientError::Conflict { .. })),
        "{refused:?}"
    );
    write_status::<example::SetSpec, _>(&client, &read, status, StatusConflict::Merge)
        .await
        .expect("the merge carries the status onto the newer spec");
    let merged = example::ReplicaSet::parse(&client.get(&key).await.unwrap().kv).unwrap();
    assert_eq!(
        merged.metadata.generation, 2,
        "the newer spec's generation is kept"
    );
    assert_eq!(merged.spec.replicas, 3, "the newer spec is kept");
    assert_eq!(
        merged.observed_generation(),
        1,
        "the status says what it acted on"
    );
    assert!(!merged.is_converged(), "so the object is not converged yet");
}
