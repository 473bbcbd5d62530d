//! etcd's recipes on a real three-member cluster of `revkv serve` processes (issue 13), and
//! the `LeaseKeeper` under them: renewals over the streaming keep-alive through a follower keep a
//! lease past its TTL, and its revoke is reported as `NotFound`; a `Mutex`
//! with several contenders grants the lock to one at a time, in the order they queued; a
//! `revkv ctl lock` holder that is SIGKILLed passes the lock to the next contender once its lease
//! expires; an `Election` whose leader's session is lost elects the next candidate, proclaims and
//! resignations reach observers (in-process and `revkv ctl elect --listen`), and a `revkv ctl
//! elect` leader that is SIGKILLed leaves the election without a leader after the TTL.
//!
//! Waits poll a condition with a deadline. TTLs are the harness's minimum (1 s) or 2 s.

use crate::process_cluster;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use process_cluster::{cluster_options, wait_until, ProcessCluster, REVKV_BINARY};
use revkv_client::concurrency::{Election, LeaderObserver, Mutex, Session};
use revkv_client::{
    Client, ClientError, LeaseKeeper, LeaseLoss, LeaseState, PutRequest, RangeRequest,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The slack past a lease's TTL within which its keys are deleted (docs/design/leases.md,
/// "The bound"), with room for a loaded machine, as `leases.rs` allows.
const EXPIRY_SLACK: Duration = Duration::from_secs(3);

/// The longest any single step may take before the test fails.
const STEP_LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_elections_pass_on_in_order_and_survive_a_killed_holder() {
    let cluster = ProcessCluster::start(3, cluster_options()).await;
    let client = Client::new(cluster.client_urls()).unwrap();
    a_keeper_on_a_follower_keeps_a_lease_past_its_ttl(&client, &cluster).await;
    mutex_contenders_take_turns_in_queue_order(&client).await;
    a_killed_lock_holder_passes_the_lock_after_its_ttl(&client, &cluster.client_urls()).await;
    an_election_follows_lost_sessions_proclaims_and_resignations(&client, &cluster.client_urls())
        .await;
}

/// How many keys are under `prefix` now.
async fn keys_under(client: &Client, prefix: &str) -> u64 {
    let request = RangeRequest::prefix(prefix).count_only();
    client.range(&request).await.expect("count keys").count
}

async fn wait_for_keys(client: &Client, prefix: &str, count: u64) {
    wait_until(
        format_args!("{count} keys under {prefix}"),
        STEP_LIMIT,
        async || (keys_under(client, prefix).await == count).then_some(()),
    )
    .await;
}

/// The streaming keep-alive through a follower only: every renewal is forwarded to the leader,
/// and a 1 s lease (with a key on it) outlives three TTLs. How often the keeper renews is not
/// asserted (a rate is a timing); that the lease and its key survive three TTLs is.
async fn a_keeper_on_a_follower_keeps_a_lease_past_its_ttl(
    client: &Client,
    cluster: &ProcessCluster,
) {
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    let follower_client = Client::new([cluster.member(follower).client_url()]).unwrap();
    let keeper = LeaseKeeper::start(&follower_client);
    let lease = keeper.grant(1).await.unwrap();
    let put = PutRequest::new("recipes/kept", "alive").with_lease(lease.id());
    client.put_with(&put).await.unwrap();
    let mut states = lease.watch();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        tokio::time::timeout(STEP_LIMIT, states.changed())
            .await
            .expect("a renewal in time")
            .expect("the keeper runs");
        let state = *states.borrow_and_update();
        assert!(matches!(state, LeaseState::Alive { .. }), "{state:?}");
    }
    assert_eq!(
        client.get("recipes/kept").await.unwrap().kv.lease,
        lease.id()
    );
    client.lease_revoke(lease.id()).await.unwrap();
    let loss = tokio::time::timeout(STEP_LIMIT, lease.lost())
        .await
        .expect("the revoke is reported");
    assert_eq!(loss, LeaseLoss::NotFound);
}

async fn mutex_contenders_take_turns_in_queue_order(client: &Client) {
    let first_session = Session::new(client, 2).await.unwrap();
    let mut first = Mutex::new(&first_session, "recipes/lock");
    first.lock().await.unwrap();

    let holding = Arc::new(AtomicBool::new(true));
    let order = Arc::new(StdMutex::new(vec![0]));
    let mut contenders = Vec::new();
    for number in 1..=3 {
        let session = Session::new(client, 2).await.unwrap();
        let (holding, order) = (Arc::clone(&holding), Arc::clone(&order));
        contenders.push(tokio::spawn(async move {
            let mut mutex = Mutex::new(&session, "recipes/lock");
            mutex.lock().await.unwrap();
            assert!(
                !holding.swap(true, Ordering::SeqCst),
                "contender {number} got the lock while another held it"
            );
            order.lock().unwrap().push(number);
            holding.store(false, Ordering::SeqCst);
            mutex.unlock().await.unwrap();
            session.close().await.unwrap();
        }));
        // Queue the contenders one after another, so their order is known.
        wait_for_keys(client, "recipes/lock/", number + 1).await;
    }
    assert_eq!(
        *order.lock().unwrap(),
        [0],
        "nobody else holds the lock while the first holder does"
    );
    holding.store(false, Ordering::SeqCst);
    first.unlock().await.unwrap();
    for contender in contenders {
        tokio::time::timeout(STEP_LIMIT, contender)
            .await
            .expect("every contender gets the lock in time")
            .expect("a contender did not panic");
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3], "fair: queue order");
    first_session.close().await.unwrap();
    assert_eq!(keys_under(client, "recipes/lock/").await, 0);
}

/// A `revkv ctl` child whose standard output is read line by line.
struct CtlChild {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl CtlChild {
    fn start(endpoints: &[String], args: &[&str]) -> CtlChild {
        let mut child = Command::new(REVKV_BINARY)
            .arg("ctl")
            .args(args)
            .env("REVKV_ENDPOINTS", endpoints.join(","))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start revkv ctl");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (sender, lines) = mpsc::channel(64);
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if sender.blocking_send(line).is_err() {
                    return;
                }
            }
        });
        CtlChild { child, lines }
    }

    async fn next_line(&mut self) -> String {
        tokio::time::timeout(STEP_LIMIT, self.lines.recv())
            .await
            .expect("a line from revkv ctl in time")
            .expect("revkv ctl still printing")
    }

    /// SIGKILL: no chance to release anything.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL revkv ctl");
        self.child.wait().expect("reap revkv ctl");
    }
}

async fn a_killed_lock_holder_passes_the_lock_after_its_ttl(client: &Client, urls: &[String]) {
    let mut holder = CtlChild::start(urls, &["lock", "--ttl", "1", "recipes/killed"]);
    let holder_key = holder.next_line().await;
    assert!(holder_key.starts_with("recipes/killed/"), "{holder_key}");

    let session = Session::new(client, 2).await.unwrap();
    let waiter_session = session.clone();
    let waiter = tokio::spawn(async move {
        let mut mutex = Mutex::new(&waiter_session, "recipes/killed");
        mutex.lock().await.map(|()| (Instant::now(), mutex))
    });
    wait_for_keys(client, "recipes/killed/", 2).await;
    assert!(!waiter.is_finished(), "the lock is held by the ctl process");
    let killed_at = Instant::now();
    holder.kill();
    let (acquired_at, mut mutex) = tokio::time::timeout(STEP_LIMIT, waiter)
        .await
        .expect("the lock passes on")
        .unwrap()
        .unwrap();
    let waited = acquired_at - killed_at;
    assert!(
        waited <= Duration::from_secs(1) + EXPIRY_SLACK,
        "the lock passed {waited:?} after the kill, past the TTL plus the slack"
    );
    let holder_gone = client.get(&holder_key).await;
    assert!(matches!(holder_gone, Err(ClientError::NotFound { .. })));
    mutex.unlock().await.unwrap();
    session.close().await.unwrap();
}

async fn an_election_follows_lost_sessions_proclaims_and_resignations(
    client: &Client,
    urls: &[String],
) {
    let name = "recipes/election";
    let first_session = Session::new(client, 1).await.unwrap();
    let mut first = Election::new(&first_session, name);
    first.campaign("a").await.unwrap();
    let mut listener = CtlChild::start(urls, &["elect", name, "--listen", "--count", "4"]);
    let mut observer = LeaderObserver::new(client, name);
    assert_eq!(next_leader(&mut observer).await, "a");

    let second_session = Session::new(client, 2).await.unwrap();
    let mut second = Election::new(&second_session, name);
    let second_campaign = tokio::spawn(async move { second.campaign("b").await.map(|()| second) });
    wait_for_keys(client, &format!("{name}/"), 2).await;
    let mut third = CtlChild::start(urls, &["elect", "--ttl", "1", name, "c"]);
    wait_for_keys(client, &format!("{name}/"), 3).await;

    // The first leader's session is lost: nothing renews its lease any more.
    drop(first);
    drop(first_session);
    let mut second = tokio::time::timeout(STEP_LIMIT, second_campaign)
        .await
        .expect("the next candidate is elected")
        .unwrap()
        .unwrap();
    assert_eq!(next_leader(&mut observer).await, "b");
    second.proclaim("b2").await.unwrap();
    assert_eq!(next_leader(&mut observer).await, "b2");
    second.resign().await.unwrap();
    assert_eq!(next_leader(&mut observer).await, "c");
    let third_key = third.next_line().await;
    assert!(third_key.starts_with(name), "{third_key}");
    assert_eq!(third.next_line().await, "c", "the ctl candidate leads");

    let mut seen = Vec::new();
    for _ in 0..4 {
        let _key = listener.next_line().await;
        seen.push(listener.next_line().await);
    }
    assert_eq!(
        seen,
        ["a", "b", "b2", "c"],
        "ctl elect --listen saw every leader"
    );
    listener.kill();

    third.kill();
    wait_until(
        "no leader once the killed leader's lease expires",
        Duration::from_secs(1) + EXPIRY_SLACK + Duration::from_secs(2),
        async || match Election::new(&second_session, name).leader().await {
            Err(ClientError::NotFound { .. }) => Some(()),
            _ => None,
        },
    )
    .await;
    second_session.close().await.unwrap();
}

async fn next_leader(observer: &mut LeaderObserver) -> String {
    tokio::time::timeout(STEP_LIMIT, observer.next())
        .await
        .expect("a leader change in time")
        .expect("observing")
        .value
}
