//! The faults of a run, one after another, each chosen and timed by the seed: links cut (one
//! member isolated, one direction of one link, or the cluster split in two), the network made
//! lossy, slow and duplicating, a member stopped and started again, leadership handed to
//! another member, members added and removed (`membership.rs`), members crashed or their
//! disks failed (`crashes.rs`). A member's clock slowed or moved ahead (`clocks.rs`) runs on a
//! schedule of its own, so a clock fault can overlap any other (a leader slowed while it is cut
//! off is what a lease-trusting read needs to go wrong). Each fault lasts a drawn
//! time and is undone before the next, and at most one member is down at a time.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::KvBackend;

use crate::cluster::Cluster;
use crate::membership::change_membership;
use crate::network::{LinkQuality, Network};
use crate::trace::Trace;
use crate::{clocks, crashes};

/// The kinds of fault a run may inject (`revkv-sim --faults`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum FaultKind {
    /// Links cut: a member isolated, one direction of a link, or a split.
    Partition,
    /// Calls and answers lost, delayed (so reordered) and duplicated.
    Network,
    /// A member stopped and started again on its files.
    Restart,
    /// The leader asked to hand leadership to another member.
    Transfer,
    /// Members added (up to five) and removed (down to three), the leader too.
    Membership,
    /// A member crashed, or every member at once (a power loss): writes not yet synced are lost
    /// or torn.
    Crash,
    /// A member's state file or raft log fails its fsyncs or writes or fills up; the member is
    /// then power cycled on mended disks.
    Disk,
    /// A member's clock runs slow for a while, or jumps ahead; on a schedule of its own, so it
    /// overlaps the other faults.
    Clock,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Partition,
        FaultKind::Network,
        FaultKind::Restart,
        FaultKind::Transfer,
        FaultKind::Membership,
        FaultKind::Crash,
        FaultKind::Disk,
        FaultKind::Clock,
    ];
}

/// The network between faults: no loss, up to a millisecond of delay, which still reorders
/// calls that are close together.
pub const CALM: LinkQuality = LinkQuality {
    loss: 0.0,
    duplication: 0.0,
    max_delay: Duration::from_millis(1),
};

/// The longest pause between two faults, and the longest a fault lasts.
const MAX_PAUSE: Duration = Duration::from_secs(3);
const MAX_FAULT: Duration = Duration::from_secs(5);

/// Injects faults of `kinds` until the trace's clock reaches `until`; answers how many.
pub async fn run_faults(
    seed: u64,
    kinds: Vec<FaultKind>,
    cluster: Arc<Cluster>,
    network: Arc<Network>,
    trace: Trace,
    until: Duration,
) -> u64 {
    let skew_clocks = kinds.contains(&FaultKind::Clock);
    let one_at_a_time: Vec<FaultKind> = kinds
        .into_iter()
        .filter(|kind| *kind != FaultKind::Clock)
        .collect();
    let clock_faults = async {
        match skew_clocks {
            true => clocks::skew_clocks(seed, &cluster, &trace, until).await,
            false => 0,
        }
    };
    let others = one_fault_at_a_time(seed, one_at_a_time, &cluster, &network, &trace, until);
    let (clock_faults, others) = tokio::join!(clock_faults, others);
    clock_faults + others
}

/// The faults other than clocks, one after another.
async fn one_fault_at_a_time(
    seed: u64,
    kinds: Vec<FaultKind>,
    cluster: &Cluster,
    network: &Network,
    trace: &Trace,
    until: Duration,
) -> u64 {
    let mut random = StdRng::seed_from_u64(seed ^ 0xFA17);
    let mut injected = 0;
    if kinds.is_empty() {
        return 0;
    }
    while trace.elapsed() < until {
        tokio::time::sleep(drawn(&mut random, MAX_PAUSE)).await;
        let kind = kinds[random.random_range(0..kinds.len())];
        let lasting = drawn(&mut random, MAX_FAULT);
        injected += 1;
        match kind {
            FaultKind::Partition => partition(&mut random, cluster, network, trace, lasting).await,
            FaultKind::Network => degrade(&mut random, network, trace, lasting).await,
            FaultKind::Restart => restart(&mut random, cluster, trace, lasting).await,
            FaultKind::Transfer => transfer(&mut random, cluster, trace).await,
            FaultKind::Membership => change_membership(&mut random, cluster, trace).await,
            FaultKind::Crash => crashes::crash(&mut random, cluster, trace, lasting).await,
            FaultKind::Disk => crashes::fail_disk(&mut random, cluster, trace, lasting).await,
            FaultKind::Clock => unreachable!("clock faults run on their own schedule"),
        }
    }
    injected
}

fn drawn(random: &mut StdRng, most: Duration) -> Duration {
    Duration::from_millis(random.random_range(10..=most.as_millis() as u64))
}

async fn partition(
    random: &mut StdRng,
    cluster: &Cluster,
    network: &Network,
    trace: &Trace,
    lasting: Duration,
) {
    let ids = cluster.ids();
    if ids.len() < 2 {
        return;
    }
    let one = ids[random.random_range(0..ids.len())];
    match random.random_range(0..3) {
        0 => {
            for other in ids.iter().filter(|other| **other != one) {
                network.cut(one, *other);
                network.cut(*other, one);
            }
        }
        1 => {
            let others: Vec<u64> = ids.iter().copied().filter(|other| *other != one).collect();
            network.cut(one, others[random.random_range(0..others.len())]);
        }
        _ => {
            let minority: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|_| random.random_bool(0.4))
                .collect();
            for from in &ids {
                for to in &ids {
                    if minority.contains(from) != minority.contains(to) {
                        network.cut(*from, *to);
                    }
                }
            }
        }
    }
    trace.record(
        None,
        None,
        format!("fault: cut {:?} for {lasting:?}", network.cuts()),
    );
    tokio::time::sleep(lasting).await;
    network.heal();
    trace.record(None, None, "fault over: links healed".into());
}

async fn degrade(random: &mut StdRng, network: &Network, trace: &Trace, lasting: Duration) {
    let quality = LinkQuality {
        loss: random.random_range(0.0..0.3),
        duplication: random.random_range(0.0..0.2),
        max_delay: Duration::from_millis(random.random_range(1..=300)),
    };
    trace.record(
        None,
        None,
        format!("fault: network {quality:?} for {lasting:?}"),
    );
    network.set_quality(quality);
    tokio::time::sleep(lasting).await;
    network.set_quality(CALM);
    trace.record(None, None, "fault over: network calm".into());
}

async fn restart(random: &mut StdRng, cluster: &Cluster, trace: &Trace, lasting: Duration) {
    let running = cluster.running_ids();
    if running.len() < cluster.ids().len() {
        return;
    }
    let member = running[random.random_range(0..running.len())];
    trace.record(
        Some(member),
        None,
        format!("fault: restart after {lasting:?}"),
    );
    if let Err(error) = cluster.stop(member).await {
        trace.record(Some(member), None, format!("stop failed: {error}"));
    }
    tokio::time::sleep(lasting).await;
    if let Err(error) = cluster.start(member).await {
        trace.record(Some(member), None, format!("start failed: {error}"));
    }
}

/// The most a leader transfer may take before the fault gives up on it.
const TRANSFER_DEADLINE: Duration = Duration::from_secs(5);

async fn transfer(random: &mut StdRng, cluster: &Cluster, trace: &Trace) {
    let running = cluster.running_ids();
    let Some((asked_id, asked)) = running
        .first()
        .and_then(|id| Some((*id, cluster.backend(*id)?)))
    else {
        return;
    };
    let Ok(status) = cluster.on_member(asked_id, asked.status()).await else {
        return;
    };
    let Some(leader) = status
        .leader_id
        .and_then(|id| Some((id, cluster.backend(id)?)))
    else {
        return;
    };
    let others: Vec<u64> = running.into_iter().filter(|id| *id != leader.0).collect();
    if others.is_empty() {
        return;
    }
    let to = others[random.random_range(0..others.len())];
    trace.record(
        Some(leader.0),
        None,
        format!("fault: transfer leadership to m{to}"),
    );
    let handed = tokio::time::timeout(
        TRANSFER_DEADLINE,
        cluster.on_member(leader.0, leader.1.transfer_leader(to)),
    )
    .await;
    let outcome = match handed {
        Ok(Ok(())) => "done".to_owned(),
        Ok(Err(error)) => format!("refused: {error}"),
        Err(_) => "timed out".to_owned(),
    };
    trace.record(Some(leader.0), None, format!("transfer to m{to} {outcome}"));
}
