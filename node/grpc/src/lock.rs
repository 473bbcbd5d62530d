//! etcd's Lock service (`v3lockpb`), as etcd's v3lock server runs `concurrency.Mutex` for the
//! caller (`lock_queue.rs` has the queue both recipes share):
//!
//! - `Lock { name, lease }` puts `name/<lease hex>` with the lease (or finds the caller's key
//!   there already: locking twice with one lease is one acquisition), then waits until every key
//!   under `name/` created before it is gone, and answers the key. A lease of 0 gets a new 60 s
//!   lease nobody renews. If the wait fails or the client goes away during it, the key is
//!   withdrawn, so a waiter that left holds nothing; if the key is gone when the wait ends (its
//!   lease lapsed meanwhile), the answer is etcd's `mutex: session is expired`.
//! - `Unlock { key }` deletes the key.
//!
//! The lock holds exactly as long as its key exists: it ends with the lease, as on etcd.

use std::sync::Arc;

use revkv_node::auth::Caller;
use revkv_node::KvBackend;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::lock_queue::{
    contender_key, contenders_prefix, create_revision_is, first_created_op, get_op, put_op,
    range_answer, Contenders, WithdrawnUnlessKept,
};
use crate::proto::etcdserverpb as pb;
use crate::proto::v3lockpb as lockpb;

/// etcd's answer when the lock's key is gone by the time the wait ends.
pub const SESSION_EXPIRED: &str = "mutex: session is expired";

pub struct LockService<B> {
    contenders: Contenders<B>,
}

impl<B: KvBackend> LockService<B> {
    pub fn new(backend: Arc<B>) -> Self {
        LockService {
            contenders: Contenders::new(backend),
        }
    }
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

#[tonic::async_trait]
impl<B: KvBackend> lockpb::lock_server::Lock for LockService<B> {
    async fn lock(
        &self,
        request: GrpcRequest<lockpb::LockRequest>,
    ) -> Answer<lockpb::LockResponse> {
        let caller = request.extensions().get::<Caller>().cloned();
        let caller = caller.as_ref();
        let request = request.into_inner();
        let lease = self.contenders.session_lease(request.lease).await?;
        let prefix = contenders_prefix(&request.name);
        let key = contender_key(&prefix, lease);
        let (my_revision, holder_revision, header) =
            self.try_acquire(caller, &prefix, &key, lease).await?;
        if holder_revision.is_none_or(|holder| holder == my_revision) {
            return Ok(GrpcResponse::new(lockpb::LockResponse { header, key }));
        }
        // Every older contender must go first. A wait that fails, or that the client leaves,
        // withdraws the key (the guard), so a waiter that gave up holds nothing.
        let withdrawn = WithdrawnUnlessKept::new(&self.contenders, caller, &key, my_revision);
        self.contenders
            .wait_deletes(caller, &prefix, my_revision - 1)
            .await?;
        // The key must still be there: a lease that lapsed during the wait took it.
        let mine = pb::RangeRequest {
            key: key.clone(),
            ..Default::default()
        };
        let held = self.contenders.range(caller, mine).await?;
        withdrawn.keep();
        if held.kvs.is_empty() {
            return Err(Status::unknown(SESSION_EXPIRED));
        }
        Ok(GrpcResponse::new(lockpb::LockResponse {
            header: held.header,
            key,
        }))
    }

    async fn unlock(
        &self,
        request: GrpcRequest<lockpb::UnlockRequest>,
    ) -> Answer<lockpb::UnlockResponse> {
        let caller = request.extensions().get::<Caller>().cloned();
        let key = request.into_inner().key;
        let deleted = self.contenders.delete(caller.as_ref(), key).await?;
        Ok(GrpcResponse::new(lockpb::UnlockResponse {
            header: deleted.header,
        }))
    }
}

impl<B: KvBackend> LockService<B> {
    /// etcd's `tryAcquire`: puts the caller's key unless it exists (then reuses its create
    /// revision), and reads the oldest key in the same txn. Answers the caller's create revision,
    /// the holder's, and the txn's header.
    async fn try_acquire(
        &self,
        caller: Option<&Caller>,
        prefix: &[u8],
        key: &[u8],
        lease: i64,
    ) -> Result<(i64, Option<i64>, Option<pb::ResponseHeader>), Status> {
        let txn = pb::TxnRequest {
            compare: vec![create_revision_is(key, 0)],
            success: vec![put_op(key, Vec::new(), lease), first_created_op(prefix)],
            failure: vec![get_op(key), first_created_op(prefix)],
        };
        let answer = self.contenders.txn(caller, txn).await?;
        let revision = answer.header.as_ref().map_or(0, |header| header.revision);
        let my_revision = if answer.succeeded {
            revision
        } else {
            let existing = range_answer(&answer, 0).first();
            existing.map_or(revision, |kv| kv.create_revision)
        };
        let holder = range_answer(&answer, 1)
            .first()
            .map(|kv| kv.create_revision);
        Ok((my_revision, holder, answer.header))
    }
}
