//! The simulated network between members: every peer call goes through it, and the seed decides
//! what happens to it. A call can be lost (on the way there or on the way back), delayed (so
//! calls overtake each other), or delivered twice; a cut link loses everything sent across it,
//! one way or both. A member's calls can also be cut alone (`cut_calls`): what it asks of
//! another is lost, but it still answers what the other asks, as when only the connections it
//! opens are refused (the chaos harness's cut of a leader's outgoing links). It plugs into the seam revkv-raft gives simulations
//! (`revkv_raft::peer::simulated::SimulatedNetwork`): the members run their real peer clients and
//! servers, only without sockets.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::Router;
use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_raft::clock::{on_member_clock, MemberClock};
use revkv_raft::peer::client::CallError;
use revkv_raft::peer::paths;
use revkv_raft::peer::simulated::{
    address_and_path, call_router, SimulatedAnswer, SimulatedNetwork,
};

use crate::trace::Trace;

/// The largest answer body the network carries back (a snapshot is sent as one body).
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// The calls the network may deliver twice: raft's own messages, which raft accepts more than
/// once and revkv itself sends again after a stale connection. Calls made for a client (a
/// forwarded write, an admin change, a lease grant or keep-alive, a leader transfer) are sent
/// once and never resent by revkv, and TCP carries a request at most once, so a duplicate of
/// one would be a fault no real network makes; a client's own retry is a new request, which the
/// workload sends.
const REPEATABLE_PATHS: [&str; 7] = [
    paths::APPEND,
    paths::VOTE,
    paths::PRE_VOTE,
    paths::SNAPSHOT,
    paths::READ_INDEX,
    paths::KEY_SPACE_HASH,
    paths::IDENTITY,
];

/// How badly the network behaves at the moment; the fault schedule changes it during a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkQuality {
    /// The chance that a call, or separately its answer, is lost.
    pub loss: f64,
    /// The chance that a call is delivered a second time.
    pub duplication: f64,
    /// Each call and each answer waits a uniformly drawn time up to this.
    pub max_delay: Duration,
}

/// What the network decided for one call, drawn all at once so that the draws happen in the
/// order calls are made.
struct CallPlan {
    request_lost: bool,
    request_delay: Duration,
    duplicate_delay: Option<Duration>,
    answer_lost: bool,
    answer_delay: Duration,
}

/// The network of one run.
pub struct Network {
    routers: Mutex<BTreeMap<SocketAddr, Router>>,
    members: Mutex<BTreeMap<SocketAddr, u64>>,
    /// (from, to): what `from` sends to `to` is lost.
    cut: Mutex<BTreeSet<(u64, u64)>>,
    /// (from, to): the calls `from` makes to `to` are lost; its answers to `to`'s calls are not.
    calls_cut: Mutex<BTreeSet<(u64, u64)>>,
    /// Members whose power is off: whatever they send, and whatever is sent to them, is lost.
    powered_off: Mutex<BTreeSet<u64>>,
    quality: Mutex<LinkQuality>,
    random: Mutex<StdRng>,
    /// Each member's clock (the clock faults change them); a member's peer handlers run on it.
    clocks: Mutex<BTreeMap<u64, MemberClock>>,
    trace: Trace,
}

impl Network {
    pub fn new(seed: u64, trace: Trace) -> Arc<Self> {
        Arc::new(Network {
            routers: Mutex::default(),
            members: Mutex::default(),
            cut: Mutex::default(),
            calls_cut: Mutex::default(),
            powered_off: Mutex::default(),
            quality: Mutex::default(),
            random: Mutex::new(StdRng::seed_from_u64(seed)),
            clocks: Mutex::default(),
            trace,
        })
    }

    /// Member `member`'s handle, for its config; it serves at `address`.
    pub fn link(self: &Arc<Self>, member: u64, address: SocketAddr) -> Arc<dyn SimulatedNetwork> {
        lock(&self.members).insert(address, member);
        Arc::new(MemberLink {
            network: self.clone(),
            member,
        })
    }

    /// Member `member`'s clock, made in step with the runtime's the first time it is asked for.
    /// A member keeps its clock across restarts, as a machine does.
    pub fn clock_of(&self, member: u64) -> MemberClock {
        lock(&self.clocks).entry(member).or_default().clone()
    }

    /// From now on, what `from` sends to `to` is lost.
    pub fn cut(&self, from: u64, to: u64) {
        lock(&self.cut).insert((from, to));
    }

    /// From now on, the calls `from` makes to `to` are lost, while `to`'s calls to `from` and
    /// `from`'s answers to them still get through: a link that refuses only the connections
    /// `from` opens.
    pub fn cut_calls(&self, from: u64, to: u64) {
        lock(&self.calls_cut).insert((from, to));
    }

    /// Every link works again (their quality stays as set).
    pub fn heal(&self) {
        lock(&self.cut).clear();
        lock(&self.calls_cut).clear();
    }

    pub fn set_quality(&self, quality: LinkQuality) {
        *lock(&self.quality) = quality;
    }

    /// The cut links, for the trace.
    pub fn cuts(&self) -> Vec<(u64, u64)> {
        lock(&self.cut).iter().copied().collect()
    }

    /// Cuts `member` off (or back on) at once, as a power cut does: calls and answers in flight
    /// to or from it are lost too.
    pub fn set_power(&self, member: u64, on: bool) {
        let mut powered_off = lock(&self.powered_off);
        if on {
            powered_off.remove(&member);
        } else {
            powered_off.insert(member);
        }
    }

    fn is_cut(&self, from: u64, to: u64) -> bool {
        let powered_off = lock(&self.powered_off);
        powered_off.contains(&from)
            || powered_off.contains(&to)
            || lock(&self.cut).contains(&(from, to))
    }

    fn plan(&self) -> CallPlan {
        let quality = *lock(&self.quality);
        let mut random = lock(&self.random);
        let delay = |random: &mut StdRng| {
            let most = quality.max_delay.as_micros() as u64;
            Duration::from_micros(if most == 0 {
                0
            } else {
                random.random_range(0..=most)
            })
        };
        CallPlan {
            request_lost: random.random_bool(quality.loss),
            request_delay: delay(&mut random),
            duplicate_delay: random
                .random_bool(quality.duplication)
                .then(|| delay(&mut random)),
            answer_lost: random.random_bool(quality.loss),
            answer_delay: delay(&mut random),
        }
    }

    /// Carries one call from member `from` and brings its answer back, or never answers.
    async fn carry(
        self: Arc<Self>,
        from: u64,
        url: String,
        body: Bytes,
    ) -> Result<SimulatedAnswer, CallError> {
        let (address, path) = address_and_path(&url)?;
        let to = lock(&self.members).get(&address).copied().unwrap_or(0);
        let plan = self.plan();
        let call = format!("m{from}->m{to} {path} {}B", body.len());
        let call_cut = lock(&self.calls_cut).contains(&(from, to));
        if plan.request_lost || call_cut || self.is_cut(from, to) {
            self.trace.record(Some(from), None, format!("{call} lost"));
            return std::future::pending().await;
        }
        tokio::time::sleep(plan.request_delay).await;
        let Some(router) = lock(&self.routers).get(&address).cloned() else {
            self.trace
                .record(Some(from), None, format!("{call} refused"));
            return Err(CallError::Unreachable(format!("{url}: nobody serves it")));
        };
        let repeatable = REPEATABLE_PATHS.contains(&path.as_str());
        if let Some(extra_delay) = plan.duplicate_delay.filter(|_| repeatable) {
            self.trace
                .record(Some(from), None, format!("{call} duplicated"));
            let copy = (router.clone(), path.clone(), body.clone());
            let receiver_clock = self.clock_of(to);
            tokio::spawn(async move {
                tokio::time::sleep(extra_delay).await;
                let handled = call_router(copy.0, &copy.1, copy.2, MAX_ANSWER_BYTES);
                let _ignored = on_member_clock(receiver_clock, handled).await;
            });
        }
        // The handler runs in the caller's task, but it is the receiver's code: its clock.
        let handled = call_router(router, &path, body, MAX_ANSWER_BYTES);
        let answer = on_member_clock(self.clock_of(to), handled).await?;
        if plan.answer_lost || self.is_cut(to, from) {
            self.trace
                .record(Some(from), None, format!("{call} answer lost"));
            return std::future::pending().await;
        }
        tokio::time::sleep(plan.answer_delay).await;
        let status = answer.status;
        self.trace
            .record(Some(from), None, format!("{call} answered {status}"));
        Ok(answer)
    }
}

/// One member's handle on the network.
struct MemberLink {
    network: Arc<Network>,
    member: u64,
}

impl SimulatedNetwork for MemberLink {
    fn post(
        &self,
        url: String,
        body: Bytes,
        _timeout: Duration,
    ) -> BoxFuture<'static, Result<SimulatedAnswer, CallError>> {
        Box::pin(self.network.clone().carry(self.member, url, body))
    }

    fn serve(&self, address: SocketAddr, router: Router) {
        lock(&self.network.routers).insert(address, router);
    }

    fn stop_serving(&self, address: SocketAddr) {
        lock(&self.network.routers).remove(&address);
    }
}

/// Each holder makes one change, so the maps stay whole whatever a panicking holder did.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
