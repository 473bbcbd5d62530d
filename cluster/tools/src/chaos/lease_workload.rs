//! The lease workload: workers that grant short leases, attach keys to them with puts, keep some
//! alive, let others lapse, revoke the rest, and read the leased keys, one request at a time to a
//! random member. Every request goes into the same history as the key-value workload's (the
//! leased puts and reads are checked by the key-value checker too), for the lease checker.
//!
//! The harness picks lease ids, so a grant whose answer was lost still names the lease it may have
//! made; keys live under [`LEASE_KEY_PREFIX`], which nothing else writes or deletes.

use std::time::{Duration, Instant};

use super::history::{Consistency, Outcome, Request};
use super::workload::{record, WorkloadContext, LEASE_KEY_PREFIX};

/// How many leased keys the workers share: few, so puts move keys between leases.
pub const LEASE_KEYS: usize = 6;
/// The TTL every grant asks for: the harness's minimum. Members run with a 300-600 ms election
/// timeout, and the minimum TTL is 1.5 × the longest election timeout rounded up to whole
/// seconds, so 1 s (a grant below the minimum would get the minimum anyway).
pub const LEASE_TTL_SECONDS: i64 = 1;
/// How many leases one worker holds at a time.
const MAX_HELD_LEASES: usize = 3;
/// How often a kept lease is renewed: a third of its TTL, as etcd's clients do.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(330);
/// How soon a keep-alive that got no renewal is tried again (a member that fails fast would
/// otherwise take every request of the worker).
const KEEP_ALIVE_RETRY: Duration = Duration::from_millis(100);
/// How long a worker keeps using a lease it no longer renews (or revoked) before forgetting it:
/// long enough for puts that probe an expired lease.
const FORGET_AFTER: Duration = Duration::from_secs(3);
/// How many forgotten leases a worker remembers for probing puts.
const MAX_FORGOTTEN: usize = 8;

/// What a worker does with a lease it granted.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Renew it until then, then let it lapse.
    KeepAliveUntil(Instant),
    /// Never renew it.
    Lapse,
    /// Revoke it then.
    RevokeAt(Instant),
}

#[derive(Debug)]
struct HeldLease {
    id: i64,
    fate: Fate,
    /// When the last renewal (or the grant) was sent.
    renewed: Instant,
    /// When the last keep-alive was sent, renewed or not.
    tried: Instant,
    /// When the worker stops using it.
    forget_at: Instant,
}

/// One lease worker: runs until the workload's deadline.
pub async fn run_lease_worker(context: WorkloadContext, worker: usize, seed: u64) {
    let mut random = fastrand::Rng::with_seed(seed);
    let mut held: Vec<HeldLease> = Vec::new();
    let mut forgotten: Vec<i64> = Vec::new();
    while context.goes_on() {
        let now = Instant::now();
        held.retain(|lease| {
            let keep = now < lease.forget_at;
            if !keep {
                remember(&mut forgotten, lease.id);
            }
            keep
        });
        let request = next_request(&mut random, &context, &held, &forgotten, now);
        let (member, url) = context.random_member(&mut random);
        let sent = Instant::now();
        let outcome = record(&context, worker, member, &url, request.clone()).await;
        after_answer(
            &mut random,
            &mut held,
            &mut forgotten,
            &request,
            &outcome,
            sent,
        );
    }
}

fn remember(forgotten: &mut Vec<i64>, lease: i64) {
    if forgotten.len() == MAX_FORGOTTEN {
        forgotten.remove(0);
    }
    forgotten.push(lease);
}

/// The worker's next request: a due revoke, then a due keep-alive, then a grant while it holds
/// few leases, else a leased put or a read of a leased key.
fn next_request(
    random: &mut fastrand::Rng,
    context: &WorkloadContext,
    held: &[HeldLease],
    forgotten: &[i64],
    now: Instant,
) -> Request {
    let due_revoke = held
        .iter()
        .find(|lease| matches!(lease.fate, Fate::RevokeAt(at) if now >= at));
    if let Some(lease) = due_revoke {
        return Request::LeaseRevoke { lease: lease.id };
    }
    let due_keep_alive = held.iter().find(|lease| {
        matches!(lease.fate, Fate::KeepAliveUntil(until) if now < until)
            && now.duration_since(lease.renewed) >= KEEP_ALIVE_INTERVAL
            && now.duration_since(lease.tried) >= KEEP_ALIVE_RETRY
    });
    if let Some(lease) = due_keep_alive {
        return Request::LeaseKeepAlive { lease: lease.id };
    }
    if held.len() < MAX_HELD_LEASES && (held.is_empty() || random.u32(..4) == 0) {
        return Request::LeaseGrant {
            lease: context.new_lease_id(),
            ttl_seconds: LEASE_TTL_SECONDS,
        };
    }
    let key = format!("{LEASE_KEY_PREFIX}{}", random.usize(..LEASE_KEYS));
    match random.u32(..100) {
        // A put with a lease the worker stopped renewing a while ago: it must fail once the
        // lease expired, and an attachment that succeeds is evidence for the checker either way.
        0..=9 if !forgotten.is_empty() => Request::LeasedPut {
            key,
            lease: forgotten[random.usize(..forgotten.len())],
        },
        0..=54 if !held.is_empty() => Request::LeasedPut {
            key,
            lease: held[random.usize(..held.len())].id,
        },
        _ => Request::Get {
            key,
            consistency: Consistency::Linearizable,
        },
    }
}

/// Updates the worker's leases after an answer.
fn after_answer(
    random: &mut fastrand::Rng,
    held: &mut Vec<HeldLease>,
    forgotten: &mut Vec<i64>,
    request: &Request,
    outcome: &Outcome,
    sent: Instant,
) {
    match (request, outcome) {
        (Request::LeaseGrant { lease, .. }, Outcome::Ok { .. } | Outcome::Unknown { .. }) => {
            let fate = match (outcome, random.u32(..10)) {
                // A lease that may not exist is only used, not renewed or revoked.
                (Outcome::Unknown { .. }, _) => Fate::Lapse,
                (_, 0..=3) => {
                    Fate::KeepAliveUntil(sent + Duration::from_millis(random.u64(1_000..5_000)))
                }
                (_, 4..=6) => Fate::Lapse,
                _ => Fate::RevokeAt(sent + Duration::from_millis(random.u64(200..2_000))),
            };
            let last_use = match fate {
                Fate::KeepAliveUntil(until) | Fate::RevokeAt(until) => until,
                Fate::Lapse => sent,
            };
            held.push(HeldLease {
                id: *lease,
                fate,
                renewed: sent,
                tried: sent,
                forget_at: last_use + FORGET_AFTER,
            });
        }
        (Request::LeaseKeepAlive { lease }, Outcome::Ok { .. }) => {
            if let Some(held) = held.iter_mut().find(|held| held.id == *lease) {
                held.renewed = sent;
                held.tried = sent;
            }
        }
        (Request::LeaseKeepAlive { lease }, Outcome::Failed { .. } | Outcome::Unknown { .. }) => {
            if let Some(held) = held.iter_mut().find(|held| held.id == *lease) {
                held.tried = sent;
            }
        }
        // The lease is gone (a keep-alive too late), or the worker tried to revoke it: stop
        // using it (a revoke whose outcome is unknown or failed is left to expire).
        (Request::LeaseKeepAlive { lease }, Outcome::NotFound)
        | (Request::LeaseRevoke { lease }, _) => {
            held.retain(|held| held.id != *lease);
            remember(forgotten, *lease);
        }
        _ => {}
    }
}
