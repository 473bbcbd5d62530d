//! [`Mutex`]: a fair distributed lock, as etcd's `concurrency.Mutex`.
//!
//! Each contender puts the key `NAME/<lease in hex>` attached to its session's lease, in a txn
//! that creates it only if absent (so a retried or repeated lock reuses it). Keys under `NAME/`
//! queue in create-revision order: the contender whose key was created first holds the lock;
//! every other waits for the delete of the key created just before its own (not the holder's, so
//! a release wakes one waiter, not all). A holder releases by deleting its key, or by losing its
//! session: the lease's expiry deletes the key and the next contender in line takes the lock.

use std::time::Duration;

use super::session::Session;
use super::waiting::{first_created, wait_deletes};
use crate::error::ClientError;
use crate::txn::{Compare, Txn, TxnOp};
use crate::types::{TxnOpResponse, TxnResponse};
use crate::Client;

/// Attempts of a recipe's txn whose outcome was unknown or that found no member (each txn is
/// safe to repeat: it creates the key only if absent, or deletes only the key it created).
pub(super) const RECIPE_TXN_ATTEMPTS: u32 = 3;

/// A lock named `NAME` held through a [`Session`].
pub struct Mutex {
    session: Session,
    prefix: String,
    my_key: String,
    /// The create revision of `my_key` once locked or queued; 0 otherwise.
    my_revision: u64,
}

impl Mutex {
    /// The lock `name` for `session` (its key will be `name/<lease id in hex>`).
    pub fn new(session: &Session, name: &str) -> Mutex {
        let prefix = format!("{name}/");
        let my_key = format!("{prefix}{:x}", session.lease_id());
        Mutex {
            session: session.clone(),
            prefix,
            my_key,
            my_revision: 0,
        }
    }

    /// This contender's key.
    pub fn key(&self) -> &str {
        &self.my_key
    }

    /// The create revision of this contender's key (its place in the queue); 0 before `lock`.
    pub fn revision(&self) -> u64 {
        self.my_revision
    }

    /// Waits until this contender holds the lock. Fails with [`ClientError::SessionExpired`] if
    /// the session's lease is lost first; on any failure the contender leaves the queue.
    pub async fn lock(&mut self) -> Result<(), ClientError> {
        if self.session.is_done() {
            return Err(self.session_expired());
        }
        let owner_revision = self.enqueue().await?;
        if owner_revision == Some(self.my_revision) {
            return Ok(());
        }
        let client = self.session.client().clone();
        let waited = tokio::select! {
            waited = wait_deletes(&client, &self.prefix, self.my_revision - 1) => waited,
            _ = self.session.done() => Err(self.session_expired()),
        };
        if let Err(error) = waited {
            let _ = self.unlock().await;
            return Err(error);
        }
        // The key may have gone with the session's lease while this contender waited.
        match client.get(&self.my_key).await {
            Ok(found) if found.kv.create_revision == self.my_revision => Ok(()),
            Ok(_) | Err(ClientError::NotFound { .. }) => Err(self.session_expired()),
            Err(error) => Err(error),
        }
    }

    /// Releases the lock (or leaves the queue) by deleting this contender's key.
    pub async fn unlock(&mut self) -> Result<(), ClientError> {
        let release = Txn::new()
            .when(Compare::create_revision(&self.my_key).equals(self.my_revision))
            .and_then(TxnOp::delete(&self.my_key));
        run_recipe_txn(self.session.client(), &release).await?;
        self.my_revision = 0;
        Ok(())
    }

    /// Puts this contender's key if absent; answers the holder's create revision.
    async fn enqueue(&mut self) -> Result<Option<u64>, ClientError> {
        let lease = self.session.lease_id();
        let txn = Txn::new()
            .when(Compare::create_revision(&self.my_key).equals(0))
            .and_then(TxnOp::put_with_lease(&self.my_key, "", lease))
            .and_then(TxnOp::get_prefix(&self.prefix))
            .or_else(TxnOp::get(&self.my_key))
            .or_else(TxnOp::get_prefix(&self.prefix));
        let answer = run_recipe_txn(self.session.client(), &txn).await?;
        self.my_revision = match answer.succeeded {
            true => answer.header.revision,
            false => first_get(&answer, 0)?
                .first()
                .map(|kv| kv.create_revision)
                .ok_or_else(|| self.session_expired())?,
        };
        let queue = first_get(&answer, 1)?;
        Ok(first_created(queue).map(|kv| kv.create_revision))
    }

    fn session_expired(&self) -> ClientError {
        ClientError::SessionExpired {
            lease: self.session.lease_id(),
        }
    }
}

/// Runs a recipe's txn, repeating it (a bounded number of times) when the cluster may not have
/// carried it out.
pub(super) async fn run_recipe_txn(client: &Client, txn: &Txn) -> Result<TxnResponse, ClientError> {
    let mut attempt = 1;
    loop {
        match client.txn(txn).await {
            Err(
                ClientError::OutcomeUnknown { .. }
                | ClientError::Unavailable { .. }
                | ClientError::Timeout { .. },
            ) if attempt < RECIPE_TXN_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The key-values of the `index`-th op's answer, which must be a get.
pub(super) fn first_get(
    answer: &TxnResponse,
    index: usize,
) -> Result<&[crate::types::KeyValue], ClientError> {
    match answer.responses.get(index) {
        Some(TxnOpResponse::Get { kvs, .. }) => Ok(kvs),
        _ => Err(ClientError::UnreadableAnswer {
            message: format!("op {index} of the recipe's txn is not a get"),
        }),
    }
}
