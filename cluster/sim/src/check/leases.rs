//! The lease check. Two promises, as etcd makes them:
//!
//! - **never early**: a lease whose grant or keep-alive sent at `s` was acknowledged with TTL `T`
//!   lives at least until `s + T`. The leader renews from a moment after the request was sent, so
//!   the deadline it sets is no earlier, and no later leader may shorten it. A lease client that
//!   sees its lease gone (a keep-alive answered not found, or a linearizable read of an attached
//!   key found nothing) before that moment caught an early expiry. The run's clock is the one
//!   clients read and every member keeps, unless a clock fault moved one ahead: the TTL is
//!   measured on the leader's clock (as etcd measures it), so a jump ahead of `J` while the
//!   lease lived may end it `J` early. The check allows the sum of every member's jumps between
//!   the renewal's send and the answer that saw the lease gone, and nothing else: a slow clock
//!   only ends leases late.
//! - **gone for good**: once the lease was seen gone, no read sent afterwards finds one of its
//!   keys. A keep-alive answers "not found" only once the revoke is applied, as etcd's does.
//! - **all at once**: a lease's end deletes every key attached to it in one revision. In the
//!   store's history (cut at the run's final revision, so an expiry during the final reads does
//!   not count), the attached keys of a lease are either all still there or all deleted at the
//!   same revision, and all deleted when the lease was revoked or seen gone.
//!
//! Only acknowledged grants, renewals and attachments count: an unanswered one may or may not
//! have happened, and leaving it out only makes the bounds looser, never wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::check::linearizability::Histories;
use crate::check::{Violation, Violations};
use crate::history::{ClockJump, LeaseEvent};

/// What the events say about one lease.
#[derive(Default)]
struct LeaseStory {
    /// The latest `sent_at + ttl` of an acknowledged grant or keep-alive, and that renewal's
    /// send time.
    promised_until: Option<(Duration, Duration)>,
    revoke_sent_at: Option<Duration>,
    /// When the lease was seen gone (answer times), and how.
    seen_gone: Vec<(Duration, String)>,
    /// Reads that found an attached key: (invoked at, key, revision).
    seen_present: Vec<(Duration, String, u64)>,
    attached: Vec<String>,
    revoked: bool,
}

impl LeaseStory {
    fn take(&mut self, event: &LeaseEvent) {
        match event {
            LeaseEvent::Renewed { sent_at, ttl, .. } => {
                let until = *sent_at + *ttl;
                if self.promised_until.is_none_or(|(latest, _)| until > latest) {
                    self.promised_until = Some((until, *sent_at));
                }
            }
            LeaseEvent::Attached { key, .. } => self.attached.push(key.clone()),
            LeaseEvent::NotFound {
                sent_at,
                answered_at,
                ..
            } => {
                let how = format!("a keep-alive sent at {sent_at:?} answered not found");
                self.seen_gone.push((*answered_at, how));
            }
            LeaseEvent::KeyRead {
                key,
                invoked_at,
                answered_at,
                revision,
                present,
                ..
            } => {
                if *present {
                    self.seen_present
                        .push((*invoked_at, key.clone(), *revision));
                } else {
                    let how = format!("a read of {key} at revision {revision} found nothing");
                    self.seen_gone.push((*answered_at, how));
                }
            }
            LeaseEvent::RevokeSent { sent_at, .. } => {
                self.revoke_sent_at.get_or_insert(*sent_at);
            }
            LeaseEvent::Revoked { .. } => self.revoked = true,
        }
    }
}

fn lease_of(event: &LeaseEvent) -> i64 {
    match event {
        LeaseEvent::Renewed { lease, .. }
        | LeaseEvent::Attached { lease, .. }
        | LeaseEvent::NotFound { lease, .. }
        | LeaseEvent::KeyRead { lease, .. }
        | LeaseEvent::RevokeSent { lease, .. }
        | LeaseEvent::Revoked { lease } => *lease,
    }
}

fn stories(events: &[LeaseEvent]) -> BTreeMap<i64, LeaseStory> {
    let mut stories: BTreeMap<i64, LeaseStory> = BTreeMap::new();
    for event in events {
        stories.entry(lease_of(event)).or_default().take(event);
    }
    stories
}

/// Checks the lease events against the store's history of the attached keys, allowing for the
/// members' clock jumps.
pub fn check(
    events: &[LeaseEvent],
    clock_jumps: &[ClockJump],
    histories: &Histories,
    final_revision: u64,
) -> Vec<Violation> {
    let mut violations = Violations::default();
    for (lease, story) in stories(events) {
        check_never_early(lease, &story, clock_jumps, &mut violations);
        check_gone_for_good(lease, &story, &mut violations);
        check_all_at_once(lease, &story, histories, final_revision, &mut violations);
    }
    violations.into_vec()
}

/// How far ahead the members' clocks jumped, all together, from `from` to `to`.
fn jumped_between(clock_jumps: &[ClockJump], from: Duration, to: Duration) -> Duration {
    clock_jumps
        .iter()
        .filter(|jump| (from..=to).contains(&jump.at))
        .map(|jump| jump.by)
        .sum()
}

fn check_never_early(
    lease: i64,
    story: &LeaseStory,
    clock_jumps: &[ClockJump],
    violations: &mut Violations,
) {
    let Some((promised_until, renewal_sent_at)) = story.promised_until else {
        return;
    };
    for (answered_at, how) in &story.seen_gone {
        let before_revoke = story.revoke_sent_at.is_none_or(|sent| *answered_at < sent);
        let jumped = jumped_between(clock_jumps, renewal_sent_at, *answered_at);
        let allowed_from = promised_until.saturating_sub(jumped);
        if *answered_at < allowed_from && before_revoke {
            violations.add(
                "lease expired early",
                format!(
                    "lease {lease}: {how}, answered at {answered_at:?}, but a renewal sent at \
                     {renewal_sent_at:?} promised it until {promised_until:?} (clocks jumped \
                     {jumped:?} ahead meanwhile)"
                ),
            );
        }
    }
}

/// Once a lease was seen gone (its key found missing, or a keep-alive answered not found), no
/// read sent afterwards finds any of its keys: they all went in one revision, before that answer.
fn check_gone_for_good(lease: i64, story: &LeaseStory, violations: &mut Violations) {
    let Some((gone_at, how)) = story.seen_gone.iter().min_by_key(|(at, _)| *at) else {
        return;
    };
    for (invoked_at, key, revision) in &story.seen_present {
        if invoked_at > gone_at {
            violations.add(
                "key outlived its lease",
                format!(
                    "lease {lease}: {how}, answered at {gone_at:?}, but a read of {key} sent at \
                     {invoked_at:?} found it at revision {revision}"
                ),
            );
        }
    }
}

/// How an attached key stands at the final revision: deleted at a revision, or still there.
/// `None` when the history does not show the attachment at all.
fn deleted_at(versions: &[crate::history::Version], final_revision: u64) -> Option<Option<u64>> {
    let upto_final: Vec<_> = versions
        .iter()
        .filter(|version| version.revision <= final_revision)
        .collect();
    let attached = upto_final
        .iter()
        .position(|version| version.value.is_some())?;
    let deleted = upto_final[attached..]
        .iter()
        .find(|version| version.value.is_none());
    Some(deleted.map(|version| version.revision))
}

fn check_all_at_once(
    lease: i64,
    story: &LeaseStory,
    histories: &Histories,
    final_revision: u64,
    violations: &mut Violations,
) {
    let mut ends = BTreeMap::new();
    for key in &story.attached {
        // A history that could not be read is reported where it was read.
        let Some(versions) = histories.get(key) else {
            return;
        };
        match deleted_at(versions, final_revision) {
            Some(end) => {
                ends.insert(key.as_str(), end);
            }
            None => violations.add(
                "lost write",
                format!("lease {lease}: the acknowledged put of {key} is not in its history"),
            ),
        }
    }
    let distinct: std::collections::BTreeSet<Option<u64>> = ends.values().copied().collect();
    if distinct.len() > 1 {
        violations.add(
            "lease ended piecemeal",
            format!("lease {lease}: its keys were deleted at (key: revision) {ends:?}"),
        );
    }
    let ended = story.revoked || !story.seen_gone.is_empty();
    if ended && distinct.contains(&None) {
        violations.add(
            "key outlived its lease",
            format!(
                "lease {lease} ended, but at revision {final_revision} its keys stand {ends:?}"
            ),
        );
    }
}

#[cfg(test)]
mod tests;
