//! How long a three-member cluster goes without a leader once it loses its leader, in simulated
//! time, for two ways of losing it: a power cut of the leader (a plain loss: it neither calls
//! nor answers) and a cut of only the calls the leader makes (it still answers what the others
//! ask, vote requests included, with a log that may run ahead of theirs). Issue 63 item 3 asks
//! that the second take at most twice as long as the first, over many seeds; `revkv-sim
//! --elections` measures both, and the simulator's tests check a fixed set of seeds.

use std::sync::Arc;
use std::time::{Duration, Instant as WallClock};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::KvBackend;
use revkv_storage::{PutRequest, Request};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::faults::CALM;
use crate::network::{LinkQuality, Network};
use crate::runtime::{SimulationRuntimeError, SimulationThread};
use crate::trace::Trace;

/// How the leader is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LeaderLoss {
    /// The leader's power is cut: nothing it sends or is sent arrives.
    PowerCut,
    /// Only the calls the leader makes are lost; it answers the calls the others make.
    OutgoingCallsCut,
}

/// One measurement: who led, who leads next, and the simulated time in between.
#[derive(Clone, Debug)]
pub struct Leaderless {
    pub seed: u64,
    pub loss: LeaderLoss,
    pub old_leader: u64,
    /// `None` when no other member led within `ELECTION_DEADLINE`.
    pub new_leader: Option<u64>,
    /// From the loss until a member other than the old leader calls itself leader (or the
    /// deadline, when none did).
    pub leaderless: Duration,
    pub wall: Duration,
}

/// How long a measurement waits for the first leader, and for the next one after the loss.
const ELECTION_DEADLINE: Duration = Duration::from_secs(60);

/// How often the members' statuses are read while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// The loss falls this long after the first leader is known, drawn by the seed, so that it lands
/// anywhere between two heartbeats and after a varying number of writes.
const LOSS_AFTER: std::ops::RangeInclusive<u64> = 300..=1_500;

/// The longest a call or an answer takes, drawn per seed (calls draw their time up to it).
const MAX_CALL_DELAY_MICROS: std::ops::RangeInclusive<u64> = 500..=20_000;

/// What the members run with during a measurement.
#[derive(Clone, Copy, Debug)]
pub struct ElectionSettings {
    /// Raft's Pre-Vote (`RaftTiming::pre_vote`, on by default); off shows the slow elections
    /// it ends.
    pub pre_vote: bool,
}

impl Default for ElectionSettings {
    fn default() -> Self {
        ElectionSettings { pre_vote: true }
    }
}

/// Measures `seed` on the calling thread.
pub fn measure_leader_loss(
    seed: u64,
    loss: LeaderLoss,
    settings: ElectionSettings,
) -> Result<Leaderless, SimulationRuntimeError> {
    let started = WallClock::now();
    let directory = tempfile::Builder::new()
        .prefix("revkv-sim-election-")
        .tempdir_in(crate::run::scratch_directory())?;
    let thread = SimulationThread::enter(seed)?;
    let mut measured = thread
        .runtime
        .block_on(measure(seed, loss, settings, directory.path()));
    drop(thread);
    measured.wall = started.elapsed();
    Ok(measured)
}

async fn measure(
    seed: u64,
    loss: LeaderLoss,
    settings: ElectionSettings,
    directory: &std::path::Path,
) -> Leaderless {
    let trace = Trace::start();
    let network = Network::new(seed, trace.clone());
    let mut random = StdRng::seed_from_u64(seed ^ 0xE1EC7);
    // Calls take a drawn time each, so the leader's appends reach its followers at different
    // moments and the loss may leave one follower's log longer than the other's, as on a real
    // network; a calm network delivers them in step.
    network.set_quality(LinkQuality {
        max_delay: Duration::from_micros(random.random_range(MAX_CALL_DELAY_MICROS)),
        ..CALM
    });
    let cluster = Arc::new(Cluster::new(3, directory, &network, trace.clone()));
    cluster.configure(|config| config.member.timing.pre_vote = settings.pre_vote);
    let starts = cluster.ids().into_iter().map(|id| {
        let cluster = cluster.clone();
        async move { cluster.start(id).await }
    });
    for started in futures::future::join_all(starts).await {
        started.unwrap_or_else(|error| panic!("seed {seed}: a member did not start: {error}"));
    }
    let old_leader = wait_for_leader(&cluster, None)
        .await
        .unwrap_or_else(|| panic!("seed {seed}: the cluster never elected a first leader"));
    let writer = tokio::spawn(write_through(cluster.clone(), old_leader, seed));
    tokio::time::sleep(Duration::from_millis(random.random_range(LOSS_AFTER))).await;
    let lost_at = Instant::now();
    match loss {
        LeaderLoss::PowerCut => network.set_power(old_leader, false),
        LeaderLoss::OutgoingCallsCut => {
            for other in cluster.ids().into_iter().filter(|id| *id != old_leader) {
                network.cut_calls(old_leader, other);
            }
        }
    }
    let new_leader = wait_for_leader(&cluster, Some(old_leader)).await;
    let leaderless = lost_at.elapsed();
    writer.abort();
    network.heal();
    network.set_power(old_leader, true);
    cluster.stop_all().await;
    Leaderless {
        seed,
        loss,
        old_leader,
        new_leader,
        leaderless,
        wall: Duration::ZERO,
    }
}

/// Writes through `leader`, a few milliseconds apart, so that once only its calls are cut its
/// log runs ahead of the others' (entries it appends and can no longer send).
async fn write_through(cluster: Arc<Cluster>, leader: u64, seed: u64) {
    let mut random = StdRng::seed_from_u64(seed ^ 0x3217E);
    for number in 0u64.. {
        let Some(backend) = cluster.backend(leader) else {
            return;
        };
        let put = PutRequest {
            key: b"election/key".to_vec(),
            value: number.to_string().into_bytes(),
            lease: 0,
            prev_kv: false,
        };
        let write = cluster.on_member(
            leader,
            async move { backend.write(Request::Put(put)).await },
        );
        // A write the lost leader cannot commit waits for its timeout; the next one goes in
        // meanwhile, as other clients' writes would.
        tokio::spawn(write);
        tokio::time::sleep(Duration::from_millis(random.random_range(1..=20))).await;
    }
}

/// Waits for a member other than `except` that calls itself leader; `None` past the deadline.
async fn wait_for_leader(cluster: &Cluster, except: Option<u64>) -> Option<u64> {
    let deadline = Instant::now() + ELECTION_DEADLINE;
    while Instant::now() < deadline {
        for id in cluster.running_ids() {
            if Some(id) == except {
                continue;
            }
            let Some(backend) = cluster.backend(id) else {
                continue;
            };
            if let Ok(status) = cluster.on_member(id, backend.status()).await {
                if status.leader_id == Some(id) {
                    return Some(id);
                }
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    None
}

/// The spread of a set of measurements of one kind of loss.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub count: usize,
    pub median: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Measurements in which no new leader came within the deadline.
    pub never_elected: usize,
}

impl Spread {
    /// The spread of the measurements of `loss` among `measurements`; `None` when there are none.
    pub fn of(measurements: &[Leaderless], loss: LeaderLoss) -> Option<Spread> {
        let measurements: Vec<&Leaderless> =
            measurements.iter().filter(|m| m.loss == loss).collect();
        let mut times: Vec<Duration> = measurements.iter().map(|m| m.leaderless).collect();
        times.sort();
        let at = |quantile: f64| times[((times.len() - 1) as f64 * quantile).round() as usize];
        Some(Spread {
            count: times.len(),
            median: *times.get(times.len() / 2)?,
            p90: at(0.90),
            p99: at(0.99),
            max: *times.last()?,
            never_elected: measurements
                .iter()
                .filter(|m| m.new_leader.is_none())
                .count(),
        })
    }
}

/// Issue 63 item 3's bound: a cluster whose leader can only answer goes without a leader at most
/// twice as long as one whose leader is gone, at the median and at the worst of the seeds.
/// Answers why not.
pub fn within_twice_a_plain_loss(plain: &Spread, answering_only: &Spread) -> Result<(), String> {
    if plain.never_elected + answering_only.never_elected > 0 {
        return Err(format!(
            "no new leader within {ELECTION_DEADLINE:?} in {} plain losses and {} cut leaders",
            plain.never_elected, answering_only.never_elected
        ));
    }
    for (what, plain, answering_only) in [
        ("median", plain.median, answering_only.median),
        ("longest", plain.max, answering_only.max),
    ] {
        if answering_only > plain * 2 {
            return Err(format!(
                "the {what} time without a leader is {answering_only:?} when the leader's calls \
                 are cut, more than twice the {plain:?} of a plain loss"
            ));
        }
    }
    Ok(())
}
