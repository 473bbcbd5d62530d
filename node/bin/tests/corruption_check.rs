//! The consistency check end to end, on real members started with `--initial-corrupt-check`: a
//! member stopped and restarted unchanged compares equal with the others and raises nothing; the
//! same member restarted after one value in its state file was changed (the file still opens and
//! reads cleanly, only its data differs) is named by the CORRUPT alarm, which every member then
//! shows (`GET /v1/alarms`, `revkv ctl alarm list`, `revkv_alarms{kind="CORRUPT"}`) and which
//! refuses writes on every member (500 `corrupt`) while reads go on, until `revkv ctl alarm
//! disarm` clears it. The periodic check (`--corrupt-check-time`) runs on the leader of a healthy
//! cluster with leases and compactions going on, and raises nothing.

use crate::process_cluster;

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use process_cluster::{cluster_options, ctl_async, wait_until, MemberClient, ProcessCluster};

/// The member whose state file the test changes.
const PLANTED_MEMBER: u64 = 3;

/// Keys written before the member is stopped; one of their values is changed in its file.
const KEYS: usize = 20;

/// The key prefix of the data the test writes.
const DATA_PREFIX: &str = "data/";

const TIMEOUT: Duration = Duration::from_secs(60);

/// The state file's history table, as `revkv-storage` defines it (`mvcc/tables.rs`): the test
/// changes the file the way a disk or a bug would, below the store's API.
const HISTORY: redb::TableDefinition<(u64, u32), &[u8]> = redb::TableDefinition::new("history");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initial_check_names_a_member_whose_data_differs_and_nothing_else() {
    let options = cluster_options().with_flags(&["--initial-corrupt-check"]);
    let mut cluster = ProcessCluster::start(3, options).await;
    let endpoints = cluster.client_urls().join(",");
    for index in 0..KEYS {
        let key = format!("{DATA_PREFIX}{index:03}");
        cluster
            .client(1)
            .put_ok(&key, &format!("value {index}"))
            .await;
    }

    // A healthy restart: the check runs, finds every member equal, and raises nothing.
    restart(&mut cluster, PLANTED_MEMBER, |_| {}).await;
    let planted = cluster.client(PLANTED_MEMBER);
    let result = wait_for_a_check(&planted).await;
    assert_eq!(result, "ok", "a healthy member compares equal");
    let alarms = cluster.client(1).get("/v1/alarms").await;
    assert_eq!(alarms.json["alarms"], json!([]), "{alarms:?}");
    cluster.client(1).put_ok("after/healthy-restart", "1").await;

    // The same restart after one stored value was changed under the stopped member.
    restart(&mut cluster, PLANTED_MEMBER, change_one_stored_value).await;
    let planted = cluster.client(PLANTED_MEMBER);
    let result = wait_for_a_check(&planted).await;
    assert_eq!(result, "mismatch", "the changed member is caught");
    let expected = json!([{ "member_id": PLANTED_MEMBER, "alarm": "CORRUPT" }]);
    for id in cluster.ids() {
        let client = cluster.client(id);
        wait_until(
            format!("member {id} shows the alarm"),
            TIMEOUT,
            async || {
                let alarms = client.get("/v1/alarms").await;
                (alarms.json["alarms"] == expected).then_some(())
            },
        )
        .await;
        let refused = client.put("after/corruption", "1").await;
        refused.expect_error(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", &[]);
        let read = client.get(&format!("/v1/kv/{DATA_PREFIX}000")).await;
        assert_eq!(read.status, StatusCode::OK, "reads go on: {read:?}");
        assert_eq!(corrupt_alarms_metric(&client).await, 1);
    }
    let listed = ctl_async(&endpoints, &["alarm", "list"], None)
        .await
        .expect_success();
    let line = format!("memberID:{PLANTED_MEMBER} alarm:CORRUPT");
    assert!(listed.stdout.contains(&line), "{}", listed.stdout);

    // The operator's way out: disarm, and writes are accepted again.
    ctl_async(&endpoints, &["alarm", "disarm"], None)
        .await
        .expect_success();
    cluster.client(1).put_ok("after/disarm", "1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_check_finds_a_healthy_cluster_equal_under_leases_and_compaction() {
    let options = cluster_options().with_flags(&["--corrupt-check-time", "1s"]);
    let cluster = ProcessCluster::start(3, options).await;
    let client = cluster.client(1);
    for round in 0..3u64 {
        // Lease grants take no revision: members at one revision may hold different leases for a
        // moment, which must not look like corruption.
        let lease_id = 1000 + round;
        let grant = json!({ "ttl": 60, "id": lease_id });
        client.post("/v1/leases", grant).await.expect_ok("grant");
        let revision = client.put_ok(&format!("{DATA_PREFIX}{round}"), "v").await;
        client
            .post("/v1/compact", json!({ "revision": revision }))
            .await
            .expect_ok("compact");
        let leader = cluster.client(cluster.leader().await);
        let counted_before = checks_counted(&leader.metrics_text().await, "ok");
        wait_until("the leader's next check counts ok", TIMEOUT, async || {
            let text = leader.metrics_text().await;
            assert_eq!(checks_counted(&text, "mismatch"), 0, "no mismatch: {text}");
            (checks_counted(&text, "ok") > counted_before).then_some(())
        })
        .await;
    }
    for id in cluster.ids() {
        let member = cluster.client(id);
        let text = member.metrics_text().await;
        assert_eq!(checks_counted(&text, "mismatch"), 0, "member {id}");
        let alarms = member.get("/v1/alarms").await;
        assert_eq!(alarms.json["alarms"], json!([]), "member {id}: {alarms:?}");
    }
}

/// Stops member `id`, lets `change` work on its data directory, restarts it and waits until it
/// serves again.
async fn restart(cluster: &mut ProcessCluster, id: u64, change: impl FnOnce(&Path)) {
    cluster.stop(id);
    change(&cluster.member(id).data_dir);
    cluster.restart(id).await;
    let client = cluster.client(id);
    wait_until(format!("member {id} is ready again"), TIMEOUT, async || {
        client.is_ready().await.then_some(())
    })
    .await;
}

/// Replaces the value of the first stored version of a data key with other bytes, keeping the
/// record well-formed: the state file opens and reads as before, only its data differs.
fn change_one_stored_value(data_dir: &Path) {
    let database = redb::Database::open(data_dir.join("state.redb")).expect("open the state file");
    let write = database.begin_write().expect("a write transaction");
    {
        let mut history = write.open_table(HISTORY).expect("the history table");
        let (position, mut record) = first_data_version(&history);
        record.value = b"planted by the test".to_vec();
        let bytes = revkv_storage::codec::encode(&record).expect("the record encodes");
        history
            .insert(position, bytes.as_slice())
            .expect("overwrite the record");
    }
    write.commit().expect("commit the change");
}

/// The first history entry of a key under `DATA_PREFIX`, and its position.
fn first_data_version(
    history: &redb::Table<(u64, u32), &'static [u8]>,
) -> ((u64, u32), revkv_storage::codec::VersionRecord) {
    use redb::ReadableTable;
    for entry in history.iter().expect("iterate the history") {
        let (position, bytes) = entry.expect("a history entry");
        let record: revkv_storage::codec::VersionRecord =
            revkv_storage::codec::decode(bytes.value()).expect("a version record");
        if record.key.starts_with(DATA_PREFIX.as_bytes()) && !record.tombstone {
            return (position.value(), record);
        }
    }
    panic!("no version of a data key in the history");
}

/// Waits until the member has counted a consistency check, and answers its result.
async fn wait_for_a_check(client: &MemberClient) -> &'static str {
    wait_until("the initial consistency check ran", TIMEOUT, async || {
        let text = client.metrics_text().await;
        ["ok", "mismatch", "skipped"]
            .into_iter()
            .find(|result| checks_counted(&text, result) > 0)
    })
    .await
}

/// `revkv_corruption_checks_total{result}` in a metrics text.
fn checks_counted(text: &str, result: &str) -> u64 {
    let series = format!("revkv_corruption_checks_total{{result=\"{result}\"}} ");
    metric_value(text, &series)
}

/// The value of `revkv_alarms{kind="CORRUPT"}` in the member's metrics.
async fn corrupt_alarms_metric(client: &MemberClient) -> u64 {
    metric_value(
        &client.metrics_text().await,
        "revkv_alarms{kind=\"CORRUPT\"} ",
    )
}

fn metric_value(text: &str, series: &str) -> u64 {
    let line = text
        .lines()
        .find(|line| line.starts_with(series))
        .unwrap_or_else(|| panic!("no {series} line in:\n{text}"));
    line[series.len()..]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {line}"))
}
