//! A controller on revkv, written with the client's controller runtime: each replica set
//! (`examples/controller/sets/NAME`, an object whose spec says how many replicas it wants) should
//! have exactly that many replica keys (`examples/controller/replicas/NAME/0000`, ...), and its
//! status says which generation of the spec it has acted on. The controller lists and watches the
//! whole `examples/controller/` prefix; a replica's change maps to its set's key, so deleting a
//! replica by hand brings it back; an index by owner finds a set's replicas in the cache.
//!
//! Writers change specs concurrently through `update_spec` (compare-and-swap, retried on
//! conflict); the controller's writes use the revisions it read, so a stale cache costs a conflict
//! and a requeue, never a wrong write. `run` changes three sets' specs and waits until every set
//! is converged: status at its generation, and the replica keys in the store what the spec says.
//!
//! `cargo run -p revkv-client --example replica_controller` against the quick-start cluster
//! (`scripts/cluster.sh up`); `REVKV_ENDPOINTS` names other members (comma-separated).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use revkv_client::controller::{
    create_object, update_spec, write_status, Action, Controller, ControllerMetrics,
    ControllerSettings, Object, ReconcileError, ReconcileRequest, RunningController,
    StatusConflict,
};
use revkv_client::{Client, ClientError, DeleteRequest, PutRequest, RangeRequest, DEFAULT_BACKOFF};
use serde::{Deserialize, Serialize};

pub const PREFIX: &str = "examples/controller/";
pub const SETS_PREFIX: &str = "examples/controller/sets/";
pub const REPLICAS_PREFIX: &str = "examples/controller/replicas/";

/// What a replica set wants. `writes` counts the spec writes, so a test can tell that none was lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetSpec {
    pub replicas: u32,
    #[serde(default)]
    pub writes: u64,
}

/// What the controller last did for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetStatus {
    pub ready: u32,
}

pub type ReplicaSet = Object<SetSpec, SetStatus>;

pub fn set_key(name: &str) -> String {
    format!("{SETS_PREFIX}{name}")
}

pub fn replica_key(name: &str, index: u32) -> String {
    format!("{REPLICAS_PREFIX}{name}/{index:04}")
}

/// The set a replica key belongs to: `replicas/NAME/INDEX` → NAME.
fn owner_of_replica(key: &str) -> Option<&str> {
    key.strip_prefix(REPLICAS_PREFIX)?
        .split_once('/')
        .map(|(name, _)| name)
}

/// The key to reconcile for a change of `key`: a set's own key, or its replicas' owner's.
fn set_key_for(key: &str) -> Option<String> {
    if key.starts_with(SETS_PREFIX) {
        return Some(key.to_string());
    }
    owner_of_replica(key).map(set_key)
}

/// Starts the controller; its cache is checked against the store every `settings`' interval.
pub async fn start(
    client: &Client,
    settings: ControllerSettings,
    metrics: Option<ControllerMetrics>,
) -> Result<RunningController, ClientError> {
    let owner_index = Arc::new(|kv: &revkv_client::KeyValue| {
        owner_of_replica(&kv.key)
            .map(str::to_string)
            .into_iter()
            .collect()
    });
    let mut controller = Controller::new("replica-sets", client.clone(), PREFIX)
        .settings(settings)
        .map_keys(set_key_for)
        .index("owner", owner_index);
    if let Some(metrics) = metrics {
        controller = controller.metrics(metrics);
    }
    controller.start(reconcile).await
}

/// Makes the replicas of one set what its spec says, then records the generation acted on.
async fn reconcile(request: ReconcileRequest) -> Result<Action, ReconcileError> {
    let Some(name) = request.key.strip_prefix(SETS_PREFIX) else {
        return Ok(Action::Done);
    };
    let client = &request.client;
    let replicas = request.cache.by_index("owner", name);
    let Some(stored_set) = request.cache.get(&request.key) else {
        // The set is gone: so are its replicas.
        for replica in replicas {
            delete_replica(client, &replica).await?;
        }
        return Ok(Action::Done);
    };
    let set = ReplicaSet::parse(&stored_set)?;
    let wanted = set.spec.replicas;
    let held: BTreeSet<u32> = (replicas.iter())
        .filter_map(|replica| replica.key.rsplit('/').next()?.parse().ok())
        .collect();
    for index in (0..wanted).filter(|index| !held.contains(index)) {
        // Absent in the cache; if it exists after all, the conflict requeues with a fresher cache.
        let create = PutRequest::new(replica_key(name, index), name).if_absent();
        client.put_with(&create).await?;
    }
    for replica in &replicas {
        let index: Option<u32> = replica.key.rsplit('/').next().and_then(|i| i.parse().ok());
        if index.is_none_or(|index| index >= wanted) {
            delete_replica(client, replica).await?;
        }
    }
    let ready = set.status.as_ref().map(|status| status.fields.ready);
    if !set.is_converged() || ready != Some(wanted) {
        let status = SetStatus { ready: wanted };
        write_status::<SetSpec, SetStatus>(client, &stored_set, status, StatusConflict::Fail)
            .await?;
    }
    Ok(Action::Done)
}

/// Deletes a replica at the revision the cache holds; one already gone is fine.
async fn delete_replica(
    client: &Client,
    replica: &revkv_client::KeyValue,
) -> Result<(), ClientError> {
    let delete = DeleteRequest::key(&replica.key).if_mod_revision(replica.mod_revision);
    match client.delete(&delete).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Whether set `name` is converged in the store (a linearizable read, not the cache): its status
/// reflects its generation, and its replica keys are exactly `0..replicas`.
pub async fn is_converged(client: &Client, name: &str) -> Result<bool, ClientError> {
    let set = ReplicaSet::parse(&client.get(&set_key(name)).await?.kv)?;
    let ready = set.status.as_ref().map(|status| status.fields.ready);
    if !set.is_converged() || ready != Some(set.spec.replicas) {
        return Ok(false);
    }
    let prefix = format!("{REPLICAS_PREFIX}{name}/");
    let held: Vec<String> = (client
        .range(&RangeRequest::prefix(prefix).keys_only())
        .await?
        .kvs)
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    let wanted: Vec<String> = (0..set.spec.replicas)
        .map(|i| replica_key(name, i))
        .collect();
    Ok(held == wanted)
}

/// Creates set `name` wanting `replicas`, or sets an existing one's spec to it.
pub async fn want_replicas(client: &Client, name: &str, replicas: u32) -> Result<(), ClientError> {
    let spec = SetSpec {
        replicas,
        writes: 1,
    };
    match create_object(client, &set_key(name), spec).await {
        Err(error) if error.is_conflict() => {}
        other => return other.map(|_| ()),
    }
    let change = |spec: &mut SetSpec| {
        spec.replicas = replicas;
        spec.writes += 1;
    };
    update_spec::<SetSpec, SetStatus>(client, &set_key(name), DEFAULT_BACKOFF, change).await?;
    Ok(())
}

/// Polls until every set in `names` is converged, for at most `deadline`.
pub async fn wait_until_converged(
    client: &Client,
    names: &[String],
    deadline: Duration,
) -> Result<bool, ClientError> {
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        let mut all = true;
        for name in names {
            all &= is_converged(client, name).await?;
        }
        if all {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= give_up {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the example against `client`; answers what it printed.
pub async fn run(client: &Client) -> Result<String, ClientError> {
    let settings = ControllerSettings {
        cache_check_interval: Some(Duration::from_secs(1)),
        ..ControllerSettings::default()
    };
    let controller = start(client, settings, None).await?;
    let names: Vec<String> = ["web", "queue", "batch"].map(String::from).to_vec();
    for (name, replicas) in names.iter().zip([3, 1, 2]) {
        want_replicas(client, name, replicas).await?;
    }
    // Change two of them again while the controller is at work.
    want_replicas(client, "web", 5).await?;
    want_replicas(client, "batch", 0).await?;
    let converged = wait_until_converged(client, &names, Duration::from_secs(60)).await?;
    controller.shut_down().await?;
    assert!(converged, "the replica sets did not converge");
    Ok("replica sets web=5, queue=1, batch=0 converged: replicas and status match".to_string())
}

/// `serve [--workers N]`: runs the controller until stdin ends or the process is signalled, for
/// `scripts/bench-controller.sh` (the same interface as its client-go twin,
/// `cluster/go/controller-bench`): prints `synced N` once the first list is applied, and at the
/// end one JSON line of the controller's counts, read from its metrics.
#[allow(dead_code)]
async fn serve(client: &Client, workers: usize) -> Result<(), Box<dyn std::error::Error>> {
    use revkv_client::controller::prometheus::{Registry, TextEncoder};
    use revkv_client::controller::ControllerMetricFamilies;
    use tokio::io::AsyncReadExt;

    let registry = Registry::new();
    let families = ControllerMetricFamilies::register(&registry)?;
    let settings = ControllerSettings {
        workers,
        ..ControllerSettings::default()
    };
    let metrics = families.for_controller("replica-sets");
    let controller = start(client, settings, Some(metrics)).await?;
    println!("synced {}", controller.cache().len());
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stdin = tokio::io::stdin();
    let mut stdin_bytes = Vec::new();
    tokio::select! {
        _ = stdin.read_to_end(&mut stdin_bytes) => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    let cached_keys = controller.cache().len();
    controller.shut_down().await?;
    // Read from the text exposition: the protobuf types' accessors change with the `prometheus`
    // crate's features, which another crate of the build may turn on.
    let text = TextEncoder::new().encode_to_string(&registry.gather())?;
    let count = |name: &str, label: Option<&str>| -> u64 {
        (text.lines())
            .filter(|line| line.starts_with(name) && label.is_none_or(|l| line.contains(l)))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let counts = serde_json::json!({
        "reconciles": count("revkv_controller_reconcile_seconds_count", None),
        "conflicts": count("revkv_controller_conflicts_total", None),
        "retries": count("revkv_controller_queue_retries_total", None),
        "errors": count("revkv_controller_reconcile_seconds_count", Some(r#"result="error""#)),
        "relists": count("revkv_controller_relists_total", None),
        "cached_keys": cached_keys,
    });
    println!("{counts}");
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(revkv_client::endpoints_from_environment())?;
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    match arguments.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => println!("{}", run(&client).await?),
        // Exits at once: a read of stdin still blocked in tokio's blocking pool would hold the
        // runtime's shutdown.
        ["serve"] => serve(&client, 4).await.map(|()| std::process::exit(0))?,
        ["serve", "--workers", workers] => serve(&client, workers.parse()?)
            .await
            .map(|()| std::process::exit(0))?,
        _ => return Err("usage: replica_controller [serve [--workers N]]".into()),
    }
    Ok(())
}
