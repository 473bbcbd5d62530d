//! [`Election`]: leader election, as etcd's `concurrency.Election`.
//!
//! A candidate campaigns by putting `NAME/<lease in hex>` with its proposal, attached to its
//! session's lease; the key created first is the leader's, and a candidate becomes leader once
//! every key created before its own is deleted (waiting on the one just before it, as the
//! [`Mutex`](super::Mutex) does). The leader may change its value (`proclaim`) and step down
//! (`resign`); losing its session deletes its key, and the next candidate in line leads.
//! [`Election::leader`] reads the current leader; [`LeaderObserver`] follows it as it changes.

use super::mutex::{first_get, run_recipe_txn};
use super::session::Session;
use super::waiting::{first_created, read_prefix, wait_deletes};
use crate::error::ClientError;
use crate::txn::{Compare, Txn, TxnOp};
use crate::types::KeyValue;
use crate::watch::{EventKind, WatchRequest, WatchUpdate, Watcher};
use crate::Client;

/// One candidate in the election `NAME`, through a [`Session`].
pub struct Election {
    session: Session,
    prefix: String,
    /// The candidate's key and its create revision, while campaigning or leading.
    leader_key: Option<(String, u64)>,
}

impl Election {
    pub fn new(session: &Session, name: &str) -> Election {
        Election {
            session: session.clone(),
            prefix: format!("{name}/"),
            leader_key: None,
        }
    }

    /// Waits until this candidate leads with `value` as its proposal. Fails with
    /// [`ClientError::SessionExpired`] if the session is lost first (the candidacy then ends).
    pub async fn campaign(&mut self, value: &str) -> Result<(), ClientError> {
        let key = format!("{}{:x}", self.prefix, self.session.lease_id());
        let txn = Txn::new()
            .when(Compare::create_revision(&key).equals(0))
            .and_then(TxnOp::put_with_lease(&key, value, self.session.lease_id()))
            .or_else(TxnOp::get(&key));
        let answer = run_recipe_txn(self.session.client(), &txn).await?;
        let revision =
            match answer.succeeded {
                true => answer.header.revision,
                false => {
                    let existing = first_get(&answer, 0)?.first().cloned().ok_or(
                        ClientError::SessionExpired {
                            lease: self.session.lease_id(),
                        },
                    )?;
                    self.leader_key = Some((key.clone(), existing.create_revision));
                    if existing.value != value {
                        self.proclaim(value).await?;
                    }
                    existing.create_revision
                }
            };
        self.leader_key = Some((key, revision));
        let client = self.session.client().clone();
        let waited = tokio::select! {
            waited = wait_deletes(&client, &self.prefix, revision - 1) => waited,
            _ = self.session.done() => Err(ClientError::SessionExpired {
                lease: self.session.lease_id(),
            }),
        };
        if let Err(error) = waited {
            let _ = self.resign().await;
            return Err(error);
        }
        Ok(())
    }

    /// Changes the leader's value without a new election. [`ClientError::NotLeader`] when this
    /// candidate does not hold its key any more.
    pub async fn proclaim(&mut self, value: &str) -> Result<(), ClientError> {
        let Some((key, revision)) = self.leader_key.clone() else {
            return Err(not_leader("this candidate has not campaigned"));
        };
        let txn = Txn::new()
            .when(Compare::create_revision(&key).equals(revision))
            .and_then(TxnOp::put_with_lease(&key, value, self.session.lease_id()));
        if !run_recipe_txn(self.session.client(), &txn).await?.succeeded {
            self.leader_key = None;
            return Err(not_leader("the candidate's key is gone"));
        }
        Ok(())
    }

    /// Steps down (or leaves the queue): deletes this candidate's key.
    pub async fn resign(&mut self) -> Result<(), ClientError> {
        let Some((key, revision)) = self.leader_key.take() else {
            return Ok(());
        };
        let txn = Txn::new()
            .when(Compare::create_revision(&key).equals(revision))
            .and_then(TxnOp::delete(&key));
        run_recipe_txn(self.session.client(), &txn).await?;
        Ok(())
    }

    /// The current leader's key-value; [`ClientError::NotFound`] when nobody campaigns.
    pub async fn leader(&self) -> Result<KeyValue, ClientError> {
        leader_of(self.session.client(), &self.prefix).await
    }

    /// Follows the leader of this election.
    pub fn observe(&self) -> LeaderObserver {
        LeaderObserver::new(self.session.client(), &self.prefix[..self.prefix.len() - 1])
    }
}

fn not_leader(message: &str) -> ClientError {
    ClientError::NotLeader {
        message: message.to_string(),
    }
}

async fn leader_of(client: &Client, prefix: &str) -> Result<KeyValue, ClientError> {
    let (_, kvs) = read_prefix(client, prefix).await?;
    first_created(&kvs)
        .cloned()
        .ok_or_else(|| ClientError::NotFound {
            message: format!("no leader in election {prefix}"),
        })
}

/// Follows an election's leader: each [`LeaderObserver::next`] answers the leader's key-value
/// when it changes (a new leader, or a proclaimed value). Needs no session.
pub struct LeaderObserver {
    client: Client,
    prefix: String,
    /// The key and mod revision last answered, so a leader is not answered twice.
    last: Option<(String, u64)>,
    /// The watch of the current leader's key.
    watching: Option<Watcher>,
}

impl LeaderObserver {
    /// Observes the election `name` (no session needed).
    pub fn new(client: &Client, name: &str) -> LeaderObserver {
        LeaderObserver {
            client: client.clone(),
            prefix: format!("{name}/"),
            last: None,
            watching: None,
        }
    }

    /// The leader, as soon as it differs from the one last answered. Waits while nobody leads.
    pub async fn next(&mut self) -> Result<KeyValue, ClientError> {
        loop {
            if let Some(watcher) = &mut self.watching {
                match follow_leader_key(watcher).await? {
                    Some(changed) => {
                        if self.is_new(&changed) {
                            return Ok(changed);
                        }
                    }
                    None => self.watching = None,
                }
                continue;
            }
            let (revision, kvs) = read_prefix(&self.client, &self.prefix).await?;
            let Some(leader) = first_created(&kvs).cloned() else {
                self.wait_for_a_candidate(revision).await?;
                continue;
            };
            let request = WatchRequest::key(&leader.key).from_revision(revision + 1);
            self.watching = Some(self.client.watch(request));
            if self.is_new(&leader) {
                return Ok(leader);
            }
        }
    }

    fn is_new(&mut self, kv: &KeyValue) -> bool {
        let seen = (kv.key.clone(), kv.mod_revision);
        if self.last.as_ref() == Some(&seen) {
            return false;
        }
        self.last = Some(seen);
        true
    }

    /// Waits for a put under the prefix after `revision`.
    async fn wait_for_a_candidate(&self, revision: u64) -> Result<(), ClientError> {
        let mut request = WatchRequest::prefix(&self.prefix).from_revision(revision + 1);
        request.no_delete = true;
        let mut watcher = self.client.watch(request);
        loop {
            match watcher.next().await {
                Some(Ok(WatchUpdate::Events { .. })) => return Ok(()),
                Some(Ok(WatchUpdate::Bookmark { .. })) => {}
                Some(Err(error)) => return Err(error),
                None => return Err(observe_ended()),
            }
        }
    }
}

/// The leader key's new value (a proclaim), or None once it is deleted.
async fn follow_leader_key(watcher: &mut Watcher) -> Result<Option<KeyValue>, ClientError> {
    loop {
        match watcher.next().await {
            Some(Ok(WatchUpdate::Events { events, .. })) => {
                if let Some(event) = events.last() {
                    return Ok(match event.kind {
                        EventKind::Put => Some(event.kv.clone()),
                        EventKind::Delete => None,
                    });
                }
            }
            Some(Ok(WatchUpdate::Bookmark { .. })) => {}
            Some(Err(error)) => return Err(error),
            None => return Err(observe_ended()),
        }
    }
}

fn observe_ended() -> ClientError {
    ClientError::WatchCanceled {
        reason: "the watch of the election ended".into(),
    }
}
