//! The watch workload over etcd's native gRPC API (`revkv bench watch --target etcd-grpc`),
//! arranged as etcd's own `benchmark watch` arranges it and as clientv3 multiplexes a process's
//! watches: the watches ride gRPC Watch streams of `--watches-per-stream` watches each (etcd's
//! benchmark default, 100), and the streams share `--conns` connections (default 1). Stream s
//! uses connection s mod conns; connection j goes to endpoint j mod n. The writer puts through a
//! connection of its own to the first endpoint, as the HTTP targets' writer does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::options::WatchLatencyPlan;
use super::watch_arrivals::{stale, Arrivals};
use crate::etcd_api::pb::{PutRequest, WatchCreateRequest};
use crate::etcd_api::{prefix_range, EtcdClient, EtcdError, KvClient, WatchStream};

/// How often a stream with nothing to read looks whether the run is over.
const END_CHECK_PERIOD: Duration = Duration::from_millis(200);

/// The plan's shared connections, connection j to endpoint j mod n.
pub async fn connect(plan: &WatchLatencyPlan) -> Result<Vec<EtcdClient>, String> {
    EtcdClient::connect_numbered(&plan.endpoints, 0, plan.grpc_connections.max(1)).await
}

/// The number of Watch streams the plan's watches need.
pub fn stream_count(plan: &WatchLatencyPlan) -> usize {
    plan.watchers.div_ceil(plan.watches_per_stream.max(1))
}

/// Starts the plan's streams on `prefix`. Each adds a permit to `created` per watch created, and
/// ends once every watch it carries has seen the revision `last_revision` names after the writes;
/// it answers one `Arrivals` per watch.
pub fn spawn_streams(
    plan: &WatchLatencyPlan,
    clients: &[EtcdClient],
    prefix: &str,
    created: &Arc<tokio::sync::Semaphore>,
    last_revision: &watch::Receiver<Option<u64>>,
) -> Vec<JoinHandle<Result<Vec<Arrivals>, String>>> {
    let streams = stream_count(plan);
    (0..streams)
        .map(|stream_index| {
            // The first streams carry one more watch when the watches do not divide evenly.
            let watches =
                plan.watchers / streams + usize::from(stream_index < plan.watchers % streams);
            tokio::spawn(follow_stream(
                clients[stream_index % clients.len()].clone(),
                watches,
                prefix.to_string(),
                created.clone(),
                last_revision.clone(),
            ))
        })
        .collect()
}

/// Opens one Watch stream with `watches` watches on `prefix` and records each event's arrival,
/// per watch, until every watch has seen the last written revision.
async fn follow_stream(
    client: EtcdClient,
    watches: usize,
    prefix: String,
    created: Arc<tokio::sync::Semaphore>,
    last_revision: watch::Receiver<Option<u64>>,
) -> Result<Vec<Arrivals>, String> {
    let (key, range_end) = prefix_range(prefix.as_bytes());
    let on_prefix = || WatchCreateRequest {
        key: key.clone(),
        range_end: range_end.clone(),
        ..WatchCreateRequest::default()
    };
    let mut stream = WatchStream::open(&mut client.watch(), on_prefix())
        .await
        .map_err(|error| error.to_string())?;
    for _ in 1..watches {
        stream
            .watch(on_prefix())
            .await
            .map_err(|error| error.to_string())?;
    }
    let mut arrivals: HashMap<i64, Arrivals> = HashMap::with_capacity(watches);
    loop {
        if arrivals.len() == watches && every_watch_saw_the_last(&arrivals, &last_revision) {
            break;
        }
        let response = match tokio::time::timeout(END_CHECK_PERIOD, stream.message()).await {
            Ok(Ok(Some(response))) => response,
            Ok(Ok(None)) => return Err("the stream ended".into()),
            Ok(Err(error)) => return Err(error.to_string()),
            Err(_) if last_revision.borrow().is_some() && arrivals.values().all(stale) => break,
            Err(_) => continue,
        };
        if response.canceled {
            let reason = &response.cancel_reason;
            return Err(format!("watch {} canceled: {reason}", response.watch_id));
        }
        if response.created {
            arrivals.entry(response.watch_id).or_default();
            created.add_permits(1);
            continue;
        }
        let revision = response.events.first().and_then(|event| event.kv.as_ref());
        if let Some(kv) = revision {
            let revision = u64::try_from(kv.mod_revision).unwrap_or_default();
            let watch = arrivals.entry(response.watch_id).or_default();
            watch.push((revision, Instant::now()));
        }
    }
    Ok(arrivals.into_values().collect())
}

/// True once the writes are over and every watch's last event is at the last written revision.
fn every_watch_saw_the_last(
    arrivals: &HashMap<i64, Arrivals>,
    last_revision: &watch::Receiver<Option<u64>>,
) -> bool {
    let Some(last) = *last_revision.borrow() else {
        return false;
    };
    arrivals
        .values()
        .all(|watch| watch.last().is_some_and(|(revision, _)| *revision >= last))
}

/// One put through etcd's gRPC API; answers the revision it created.
pub async fn put(kv: &mut KvClient, key: &str, value: &str) -> Result<u64, String> {
    let request = PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        ..PutRequest::default()
    };
    let answer = kv
        .put(request)
        .await
        .map_err(|status| EtcdError::from(status).to_string())?
        .into_inner();
    let revision = answer.header.map(|header| header.revision);
    revision
        .and_then(|revision| u64::try_from(revision).ok())
        .ok_or_else(|| "no revision in the put's answer".to_string())
}
