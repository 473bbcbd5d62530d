//! etcd's Lock and Election services on revkv, compared with real etcd 3.6.16 (built by
//! `scripts/go-tools.sh`) through the `etcd-client` crate, whose `lock()` and election calls are
//! these services (not a client-side recipe, as `etcdctl lock` is). One script runs against a
//! fresh three-member revkv and a fresh etcd: a lock taken, taken again with the same lease, a
//! second locker queued behind it and served at unlock, a holder whose lease lapses handing the
//! lock on, a waiter whose client gives up leaving no key behind, a lock with an unknown lease; a campaign, the leader read, a proclaim, an observer, a
//! second candidate queued and elected when the first resigns, a proclaim with a stale leader key
//! and a leader read of an election nobody entered. Each step is written down (keys, values,
//! revisions relative to the script's start, error codes and texts) and the two transcripts must
//! be equal. Leases are granted with fixed ids, so the contenders' keys (`name/<lease hex>`) are
//! the same on both.
//!
//! The same services through the JSON gateway (`/v3/lock/*`, `/v3/election/*`, the observer as
//! a stream of lines) answer as etcd's gateway does, JSON compared whole but for the member's
//! and cluster's ids, errors included.
//!
//! Without the Go tool set for etcd 3.6 the test passes with a note, except under `CI=true`.

use crate::etcd_history;
use crate::gateway_support;
use crate::process_cluster;

use std::time::Duration;

use etcd_client::{
    Client, GetOptions, LeaseGrantOptions, LockOptions, ProclaimOptions, ResignOptions,
};
use etcd_history::etcd_3_minor;
use gateway_support::{b64, normalized, stream_lines};
use process_cluster::{cluster_options, ProcessCluster};
use revkv_tools::harness::etcd::EtcdServer;
use serde_json::{json, Value};
use tokio::time::Instant;

/// The leases of the script: two that outlive it, and one that lapses during it.
const LEASE_A: i64 = 0xa1;
const LEASE_B: i64 = 0xb2;
const LEASE_C: i64 = 0xc3;
const LONG_TTL: i64 = 600;
const SHORT_TTL: i64 = 3;

/// The longest any step waits: a queued contender's key to show, a lapsed lease's hand-over.
const STEP_DEADLINE: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// One step's observation.
type Transcript = Vec<(&'static str, String)>;

/// The script, on the etcd API at `endpoint`.
async fn run_script(endpoint: &str) -> Transcript {
    let mut client = Client::connect([endpoint], None).await.expect("connect");
    let start = client
        .get("start", None)
        .await
        .expect("a read")
        .header()
        .unwrap()
        .revision();
    let mut script = Script {
        client,
        endpoint: endpoint.to_string(),
        start,
        seen: Transcript::new(),
    };
    for (id, ttl) in [
        (LEASE_A, LONG_TTL),
        (LEASE_B, LONG_TTL),
        (LEASE_C, SHORT_TTL),
    ] {
        let options = LeaseGrantOptions::new().with_id(id);
        script
            .client
            .lease_grant(ttl, Some(options))
            .await
            .expect("grant");
    }
    script.locks().await;
    script.elections().await;
    script.seen
}

struct Script {
    client: Client,
    endpoint: String,
    start: i64,
    seen: Transcript,
}

impl Script {
    fn note(&mut self, step: &'static str, what: String) {
        self.seen.push((step, what));
    }

    /// A revision as an offset from the script's start.
    fn moved(&self, revision: i64) -> String {
        format!("+{}", revision - self.start)
    }

    /// A second client on its own connection, for a call that waits.
    async fn second_client(&self) -> Client {
        Client::connect([self.endpoint.as_str()], None)
            .await
            .expect("connect")
    }

    /// The keys under `prefix`, oldest first.
    async fn contenders(&mut self, prefix: &str) -> Vec<String> {
        let options = GetOptions::new().with_prefix().with_sort(
            etcd_client::SortTarget::Create,
            etcd_client::SortOrder::Ascend,
        );
        let answer = self
            .client
            .get(prefix, Some(options))
            .await
            .expect("a read");
        answer
            .kvs()
            .iter()
            .map(|kv| kv.key_str().unwrap().to_string())
            .collect()
    }

    /// Waits until `prefix` holds `count` contenders.
    async fn wait_for_contenders(&mut self, prefix: &str, count: usize) -> Vec<String> {
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            let keys = self.contenders(prefix).await;
            if keys.len() == count {
                return keys;
            }
            assert!(Instant::now() < deadline, "{prefix}: {keys:?}");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    async fn locks(&mut self) {
        let held = self
            .client
            .lock("job", Some(LockOptions::new().with_lease(LEASE_A)))
            .await
            .expect("lock");
        let key = held.key().to_vec();
        let revision = self.moved(held.header().unwrap().revision());
        self.note("lock", format!("{} at {revision}", lossy(&key)));
        let again = self
            .client
            .lock("job", Some(LockOptions::new().with_lease(LEASE_A)))
            .await
            .expect("lock again");
        let revision = self.moved(again.header().unwrap().revision());
        self.note(
            "lock again, same lease",
            format!("{} at {revision}", lossy(again.key())),
        );

        let mut second = self.second_client().await;
        let queued = tokio::spawn(async move {
            let options = LockOptions::new().with_lease(LEASE_B);
            second.lock("job", Some(options)).await
        });
        let waiting = self.wait_for_contenders("job/", 2).await;
        self.note("queued", format!("{waiting:?}"));
        let unlocked = self.client.unlock(key).await.expect("unlock");
        let revision = self.moved(unlocked.header().unwrap().revision());
        self.note("unlock", revision);
        let next = queued.await.expect("the task").expect("the queued lock");
        let revision = self.moved(next.header().unwrap().revision());
        self.note(
            "served at unlock",
            format!("{} at {revision}", lossy(next.key())),
        );
        self.client.unlock(next.key()).await.expect("unlock");

        // A holder whose lease lapses hands the lock on without an unlock.
        let expiring = self
            .client
            .lock("expiring", Some(LockOptions::new().with_lease(LEASE_C)))
            .await
            .expect("lock with the short lease");
        self.note("lock, short lease", lossy(expiring.key()));
        let mut second = self.second_client().await;
        let queued = tokio::spawn(async move {
            let options = LockOptions::new().with_lease(LEASE_A);
            second.lock("expiring", Some(options)).await
        });
        self.wait_for_contenders("expiring/", 2).await;
        let next = tokio::time::timeout(STEP_DEADLINE, queued)
            .await
            .expect("the lease lapsed in time")
            .expect("the task")
            .expect("the queued lock");
        let revision = self.moved(next.header().unwrap().revision());
        self.note(
            "served when the lease lapsed",
            format!("{} at {revision}", lossy(next.key())),
        );
        self.client.unlock(next.key()).await.expect("unlock");

        // A waiter whose client gives up withdraws its key; the holder keeps the lock.
        let held = self
            .client
            .lock("job", Some(LockOptions::new().with_lease(LEASE_A)))
            .await
            .expect("lock");
        let mut second = self.second_client().await;
        let waiter = tokio::spawn(async move {
            let options = LockOptions::new().with_lease(LEASE_B);
            second.lock("job", Some(options)).await
        });
        self.wait_for_contenders("job/", 2).await;
        waiter.abort();
        let left = self.wait_for_contenders("job/", 1).await;
        self.note("a waiter that gave up", format!("{left:?}"));
        self.client.unlock(held.key()).await.expect("unlock");

        let unknown = LockOptions::new().with_lease(0x7777);
        let refused = self.client.lock("job", Some(unknown)).await;
        self.note("lock with an unknown lease", error_of(refused.map(|_| ())));
    }

    async fn elections(&mut self) {
        let campaign = self
            .client
            .campaign("vote", "a1", LEASE_A)
            .await
            .expect("campaign");
        let leader = campaign.leader().expect("a leader key").clone();
        let revision = self.moved(campaign.header().unwrap().revision());
        self.note(
            "campaign",
            format!("{} at {revision}", leader_key(&leader, self.start)),
        );
        let leader_now = self.leader_of("vote").await;
        self.note("leader", leader_now);
        let proclaim = ProclaimOptions::new().with_leader(leader.clone());
        let proclaimed = self
            .client
            .proclaim("a2", Some(proclaim))
            .await
            .expect("proclaim");
        let revision = self.moved(proclaimed.header().unwrap().revision());
        self.note("proclaim", revision);
        let leader_now = self.leader_of("vote").await;
        self.note("leader after proclaim", leader_now);

        let mut observer = self.client.observe("vote").await.expect("observe");
        let observed = observer
            .message()
            .await
            .expect("observe")
            .expect("an answer");
        self.note("observed", key_value(observed.kv(), self.start));

        let mut second = self.second_client().await;
        let queued = tokio::spawn(async move { second.campaign("vote", "b1", LEASE_B).await });
        let waiting = self.wait_for_contenders("vote/", 2).await;
        self.note("candidate queued", format!("{waiting:?}"));
        let resign = ResignOptions::new().with_leader(leader.clone());
        let resigned = self.client.resign(Some(resign)).await.expect("resign");
        self.note("resign", self.moved(resigned.header().unwrap().revision()));
        let elected = queued
            .await
            .expect("the task")
            .expect("the queued campaign");
        let next = elected.leader().expect("a leader key").clone();
        self.note("elected at resign", leader_key(&next, self.start));
        let observed = observer
            .message()
            .await
            .expect("observe")
            .expect("an answer");
        self.note(
            "observed the next leader",
            key_value(observed.kv(), self.start),
        );

        let stale = ProclaimOptions::new().with_leader(leader);
        let refused = self.client.proclaim("late", Some(stale)).await;
        self.note(
            "proclaim with a stale leader key",
            error_of(refused.map(|_| ())),
        );
        let nobody = self.client.leader("nobody").await;
        self.note("leader of an empty election", error_of(nobody.map(|_| ())));
        let resign = ResignOptions::new().with_leader(next);
        self.client.resign(Some(resign)).await.expect("resign");
        let left = self.contenders("vote/").await;
        self.note("after the last resign", format!("{left:?}"));
    }

    async fn leader_of(&mut self, name: &str) -> String {
        let answer = self.client.leader(name).await.expect("leader");
        key_value(answer.kv(), self.start)
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn leader_key(leader: &etcd_client::LeaderKey, start: i64) -> String {
    format!(
        "{{name {}, key {}, rev +{}, lease {:x}}}",
        lossy(leader.name()),
        lossy(leader.key()),
        leader.rev() - start,
        leader.lease()
    )
}

fn key_value(kv: Option<&etcd_client::KeyValue>, start: i64) -> String {
    let Some(kv) = kv else {
        return "no key-value".into();
    };
    format!(
        "{} = {} (created +{}, modified +{}, version {}, lease {:x})",
        lossy(kv.key()),
        lossy(kv.value()),
        kv.create_revision() - start,
        kv.mod_revision() - start,
        kv.version(),
        kv.lease()
    )
}

/// The gRPC code and text of a refusal, or "done".
fn error_of(result: Result<(), etcd_client::Error>) -> String {
    match result {
        Ok(()) => "done".into(),
        Err(etcd_client::Error::GRpcStatus(status)) => {
            format!("{:?}: {}", status.code(), status.message())
        }
        Err(other) => format!("{other}"),
    }
}

/// One gateway call: its path and JSON body, answered with the HTTP status and normalized JSON.
async fn gateway_call(base: &str, path: &str, body: &Value) -> (String, u16, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body.to_string())
        .send()
        .await
        .expect("the gateway answers");
    let status = answer.status().as_u16();
    let json: Value = answer.json().await.expect("a JSON answer");
    (format!("{path} {body}"), status, normalized(json))
}

/// The gateway script: a lock and its unlock, a campaign, the leader, a proclaim, the observer's
/// first line, a resign, then the refusals of an empty election and of a proclaim without a
/// leader key.
async fn run_gateway_script(base: &str) -> Vec<(String, u16, Value)> {
    let mut answers = Vec::new();
    let lease = LEASE_A.to_string();
    let grant = json!({ "TTL": LONG_TTL.to_string(), "ID": "212" });
    answers.push(gateway_call(base, "/v3/lease/grant", &grant).await);
    let lock = json!({ "name": b64("gateway-job"), "lease": lease });
    let locked = gateway_call(base, "/v3/lock/lock", &lock).await;
    let key = locked.2["key"].clone();
    answers.push(locked);
    answers.push(gateway_call(base, "/v3/lock/unlock", &json!({ "key": key })).await);
    let campaign = json!({ "name": b64("gateway-vote"), "lease": lease, "value": b64("x") });
    let campaigned = gateway_call(base, "/v3/election/campaign", &campaign).await;
    let leader = campaigned.2["leader"].clone();
    answers.push(campaigned);
    let name = json!({ "name": b64("gateway-vote") });
    answers.push(gateway_call(base, "/v3/election/leader", &name).await);
    let proclaim = json!({ "leader": leader, "value": b64("y") });
    answers.push(gateway_call(base, "/v3/election/proclaim", &proclaim).await);
    let observed = stream_lines(
        base,
        "/v3/election/observe",
        name.to_string(),
        |lines| !lines.is_empty(),
        async {},
    )
    .await;
    answers.push(("observe".into(), 200, json!(observed)));
    let resign = json!({ "leader": leader });
    answers.push(gateway_call(base, "/v3/election/resign", &resign).await);
    answers.push(gateway_call(base, "/v3/election/leader", &name).await);
    let no_leader = json!({ "value": b64("z") });
    answers.push(gateway_call(base, "/v3/election/proclaim", &no_leader).await);
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_election_answer_as_etcd_3_6s_do() {
    let Some(release) = etcd_3_minor(6) else {
        return;
    };
    let etcd = EtcdServer::start(&release.etcd).await;
    let from_etcd = run_script(&etcd.client_url).await;
    let revkv = ProcessCluster::start(3, cluster_options().with_grpc()).await;
    let from_revkv = run_script(&format!("http://{}", revkv.grpc_endpoints()[0])).await;
    // A guard against both answering alike by failing alike: the script reached every step.
    let step = |name: &str| from_etcd.iter().find(|(step, _)| *step == name).cloned();
    assert!(
        step("served at unlock").is_some_and(|(_, seen)| seen.starts_with("job/b2 at")),
        "{from_etcd:#?}"
    );
    assert!(
        step("proclaim with a stale leader key")
            .is_some_and(|(_, seen)| seen.contains("not leader")),
        "{from_etcd:#?}"
    );
    for (on_etcd, on_revkv) in from_etcd.iter().zip(&from_revkv) {
        assert_eq!(
            on_revkv, on_etcd,
            "etcd: {from_etcd:#?}\nrevkv: {from_revkv:#?}"
        );
    }
    assert_eq!(from_revkv.len(), from_etcd.len());

    // Through the gateway, on the same two after the same script.
    let from_etcd = run_gateway_script(&etcd.client_url).await;
    let from_revkv = run_gateway_script(&format!("http://{}", revkv.grpc_endpoints()[0])).await;
    let locked = &from_etcd[1];
    assert_eq!(
        (locked.1, &locked.2["key"]),
        (200, &json!(b64("gateway-job/a1"))),
        "{locked:?}"
    );
    for (on_etcd, on_revkv) in from_etcd.iter().zip(&from_revkv) {
        assert_eq!(
            on_revkv, on_etcd,
            "etcd: {from_etcd:#?}\nrevkv: {from_revkv:#?}"
        );
    }
    assert_eq!(from_revkv.len(), from_etcd.len());
}
