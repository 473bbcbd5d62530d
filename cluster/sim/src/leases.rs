//! The lease clients of a run. Each holds one lease at a time, as a Kubernetes component holds
//! its leader-election lease or an etcd client its session: it grants a lease with a short TTL,
//! attaches a few keys to it, keeps it alive on a schedule the seed draws (sometimes late), reads
//! its keys linearizably in between (and once more after a keep-alive answers that the lease is
//! gone), and then either revokes it or lets it lapse. Every acknowledged grant, renewal and
//! attachment, every read and every "not found" is recorded for the lease check
//! (`check::leases`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use revkv_node::{KvBackend, MemberBackend, NodeError, ReadConsistency};
use revkv_storage::{KeyRange, PutRequest, RangeRequest, Request};

use crate::cluster::Cluster;
use crate::history::LeaseEvent;
use crate::trace::Trace;
use crate::workload::REQUEST_DEADLINE;

/// The prefix of every key attached to a lease, outside the key-value workload's prefix.
pub const LEASE_KEY_PREFIX: &str = "lease/";

/// The TTLs a lease client asks for, in seconds (the member raises them to its minimum TTL).
const TTL_SECONDS: std::ops::RangeInclusive<i64> = 2..=5;

/// The most keys attached to one lease, and the most keep-alives one lease gets.
const MAX_KEYS_PER_LEASE: u64 = 3;
const MAX_RENEWALS_PER_LEASE: u64 = 6;

/// The gap between two keep-alives, in per cent of the TTL: up to 90 %, so a renewal that moves
/// the deadline by less than the TTL lets the lease lapse while the client still holds it.
const RENEWAL_GAP_PERCENT: std::ops::RangeInclusive<u32> = 30..=90;

/// The gap between two reads of the lease's keys while the client waits to renew.
const READ_GAP_MILLIS: std::ops::RangeInclusive<u64> = 50..=400;

/// One lease client and its generator.
pub struct LeaseClient {
    id: u64,
    random: StdRng,
    cluster: Arc<Cluster>,
    trace: Trace,
    events: Arc<Mutex<Vec<LeaseEvent>>>,
    /// Every key a client may have written; a key goes in before its put is sent, so the
    /// compactor archives it before compacting past it.
    keys_written: Arc<Mutex<BTreeSet<String>>>,
}

/// Why one lease's life ended early, from the client's side.
enum LeaseEnded {
    /// The lease is gone (seen, and recorded).
    Gone,
    /// No member answered in time, or none runs.
    Unreachable,
}

impl LeaseClient {
    pub fn new(
        id: u64,
        seed: u64,
        cluster: Arc<Cluster>,
        trace: Trace,
        events: Arc<Mutex<Vec<LeaseEvent>>>,
        keys_written: Arc<Mutex<BTreeSet<String>>>,
    ) -> Self {
        LeaseClient {
            id,
            random: StdRng::seed_from_u64(seed ^ 0x1EA5E ^ id.wrapping_mul(0xA24B_AED4_963E_E407)),
            cluster,
            trace,
            events,
            keys_written,
        }
    }

    /// Holds one lease after another until the trace's clock reaches `until`.
    pub async fn run(mut self, until: Duration) {
        while self.trace.elapsed() < until {
            if self.hold_one_lease().await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    async fn hold_one_lease(&mut self) -> Result<(), LeaseEnded> {
        let (lease, ttl) = self.grant().await?;
        let mut attached = Vec::new();
        for index in 0..self.random.random_range(1..=MAX_KEYS_PER_LEASE) {
            let key = format!("{LEASE_KEY_PREFIX}{lease}/{index}");
            if self.attach(lease, &key).await.is_ok() {
                attached.push(key);
            }
        }
        for _ in 0..self.random.random_range(0..=MAX_RENEWALS_PER_LEASE) {
            let gap = ttl * self.random.random_range(RENEWAL_GAP_PERCENT) / 100;
            self.read_keys_for(lease, &attached, gap).await?;
            match self.keep_alive(lease).await {
                Ok(()) => {}
                Err(LeaseEnded::Gone) => {
                    // Told the lease is gone: its keys must be too.
                    for key in &attached {
                        let _ = self.read_key(lease, key).await;
                    }
                    return Err(LeaseEnded::Gone);
                }
                Err(ended) => return Err(ended),
            }
        }
        if self.random.random_bool(0.5) {
            self.revoke(lease).await?;
        } else {
            self.trace
                .record(None, None, format!("lease {lease} left to lapse"));
        }
        Ok(())
    }

    /// A running member the seed picks, and its number.
    fn member(&mut self) -> Result<(u64, Arc<MemberBackend>), LeaseEnded> {
        let members = self.cluster.running_ids();
        if members.is_empty() {
            return Err(LeaseEnded::Unreachable);
        }
        let member = members[self.random.random_range(0..members.len())];
        let backend = self
            .cluster
            .backend(member)
            .ok_or(LeaseEnded::Unreachable)?;
        Ok((member, backend))
    }

    fn record(&self, event: LeaseEvent) {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event);
    }

    fn note(&self, member: u64, key: Option<&str>, what: String) {
        let client = self.id;
        self.trace
            .record(Some(member), key, format!("lease client {client} {what}"));
    }

    async fn grant(&mut self) -> Result<(i64, Duration), LeaseEnded> {
        let (member, backend) = self.member()?;
        let asked = self.random.random_range(TTL_SECONDS);
        let sent_at = self.trace.elapsed();
        let answer = tokio::time::timeout(
            REQUEST_DEADLINE,
            self.cluster
                .on_member(member, backend.lease_grant(None, asked)),
        )
        .await;
        let granted = match answer {
            Ok(Ok(granted)) => granted,
            other => {
                self.note(member, None, format!("grant failed: {}", failure(&other)));
                return Err(LeaseEnded::Unreachable);
            }
        };
        let ttl = Duration::from_secs(u64::try_from(granted.ttl_seconds).unwrap_or(0));
        let lease = granted.id;
        self.note(member, None, format!("granted lease {lease} for {ttl:?}"));
        self.record(LeaseEvent::Renewed {
            lease,
            sent_at,
            ttl,
        });
        Ok((lease, ttl))
    }

    async fn attach(&mut self, lease: i64, key: &str) -> Result<(), LeaseEnded> {
        let (member, backend) = self.member()?;
        self.keys_written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(key.to_owned());
        let put = PutRequest {
            key: key.as_bytes().to_vec(),
            value: format!("held by lease {lease}").into_bytes(),
            lease,
            prev_kv: false,
        };
        let answer = tokio::time::timeout(
            REQUEST_DEADLINE,
            self.cluster
                .on_member(member, backend.write(Request::Put(put))),
        )
        .await;
        match answer {
            Ok(Ok(written)) => {
                let revision = written.header.revision;
                self.note(
                    member,
                    Some(key),
                    format!("attached at revision {revision}"),
                );
                self.record(LeaseEvent::Attached {
                    lease,
                    key: key.to_owned(),
                });
                Ok(())
            }
            other => {
                self.note(
                    member,
                    Some(key),
                    format!("attach failed: {}", failure(&other)),
                );
                Err(LeaseEnded::Unreachable)
            }
        }
    }

    /// Reads the attached keys, one at a time, every few hundred milliseconds for `how_long`.
    async fn read_keys_for(
        &mut self,
        lease: i64,
        keys: &[String],
        how_long: Duration,
    ) -> Result<(), LeaseEnded> {
        let until = self.trace.elapsed() + how_long;
        loop {
            let gap = Duration::from_millis(self.random.random_range(READ_GAP_MILLIS));
            let now = self.trace.elapsed();
            if keys.is_empty() || now + gap >= until {
                tokio::time::sleep(until.saturating_sub(now)).await;
                return Ok(());
            }
            tokio::time::sleep(gap).await;
            let key = &keys[self.random.random_range(0..keys.len())];
            self.read_key(lease, key).await?;
        }
    }

    /// Reads `key` linearizably and records what it found; a key found missing ends the lease's
    /// life for the client.
    async fn read_key(&mut self, lease: i64, key: &str) -> Result<(), LeaseEnded> {
        let Ok((member, backend)) = self.member() else {
            return Ok(());
        };
        let invoked_at = self.trace.elapsed();
        let request = RangeRequest::of(KeyRange::single(key.as_bytes()));
        let read = self
            .cluster
            .on_member(member, backend.read(request, ReadConsistency::Linearizable));
        let Ok(Ok(answer)) = tokio::time::timeout(REQUEST_DEADLINE, read).await else {
            return Ok(());
        };
        let present = !answer.response.kvs.is_empty();
        let revision = answer.header.revision;
        self.record(LeaseEvent::KeyRead {
            lease,
            key: key.to_owned(),
            invoked_at,
            answered_at: self.trace.elapsed(),
            revision,
            present,
        });
        if present {
            return Ok(());
        }
        self.note(
            member,
            Some(key),
            format!("read found nothing at {revision}"),
        );
        Err(LeaseEnded::Gone)
    }

    async fn keep_alive(&mut self, lease: i64) -> Result<(), LeaseEnded> {
        let (member, backend) = self.member()?;
        let sent_at = self.trace.elapsed();
        let answer = tokio::time::timeout(
            REQUEST_DEADLINE,
            self.cluster
                .on_member(member, backend.lease_keep_alive(lease)),
        )
        .await;
        match answer {
            Ok(Ok((_, ttl_seconds))) => {
                let ttl = Duration::from_secs(u64::try_from(ttl_seconds).unwrap_or(0));
                self.note(
                    member,
                    None,
                    format!("kept lease {lease} alive for {ttl:?}"),
                );
                self.record(LeaseEvent::Renewed {
                    lease,
                    sent_at,
                    ttl,
                });
                Ok(())
            }
            Ok(Err(NodeError::NotFound(why))) => {
                self.note(member, None, format!("keep-alive of {lease}: {why}"));
                self.record(LeaseEvent::NotFound {
                    lease,
                    sent_at,
                    answered_at: self.trace.elapsed(),
                });
                Err(LeaseEnded::Gone)
            }
            // Unknown: the renewal may or may not have happened, and the next one will tell.
            other => {
                self.note(
                    member,
                    None,
                    format!("keep-alive of {lease}: {}", failure(&other)),
                );
                Ok(())
            }
        }
    }

    async fn revoke(&mut self, lease: i64) -> Result<(), LeaseEnded> {
        let (member, backend) = self.member()?;
        self.record(LeaseEvent::RevokeSent {
            lease,
            sent_at: self.trace.elapsed(),
        });
        let revoke = self
            .cluster
            .on_member(member, backend.write(Request::LeaseRevoke { id: lease }));
        let answer = tokio::time::timeout(REQUEST_DEADLINE, revoke).await;
        match answer {
            Ok(Ok(written)) => {
                let revision = written.header.revision;
                self.note(member, None, format!("revoked lease {lease} at {revision}"));
                self.record(LeaseEvent::Revoked { lease });
                Ok(())
            }
            // Expired first (or an earlier attempt of this revoke took effect): gone either way.
            Ok(Err(NodeError::NotFound(why))) => {
                self.note(member, None, format!("revoke of {lease}: {why}"));
                self.record(LeaseEvent::Revoked { lease });
                Ok(())
            }
            other => {
                self.note(
                    member,
                    None,
                    format!("revoke of {lease}: {}", failure(&other)),
                );
                Err(LeaseEnded::Unreachable)
            }
        }
    }
}

/// Words for a request that did not succeed: its error, or the deadline.
fn failure<T>(answer: &Result<Result<T, NodeError>, tokio::time::error::Elapsed>) -> String {
    match answer {
        Ok(Ok(_)) => "succeeded".to_owned(),
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer in {REQUEST_DEADLINE:?}"),
    }
}
