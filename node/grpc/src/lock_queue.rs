//! What etcd's Lock and Election services share, as etcd's `concurrency` package does them (its
//! v3lock and v3election servers run that package in-process, as the caller): every contender for
//! a name puts a key `name/<lease id in hex>` attached to its lease, and the contender whose key
//! has the lowest create revision holds the lock or leads. A contender waits for every older key
//! to be deleted (unlocked, resigned, or its lease lapsed), one at a time, newest first.
//!
//! Every read and write here goes through this member's own KV service with the outer call's
//! caller, so auth, validation, limits and etcd's status codes are exactly those of a client
//! doing the same calls; waits are watches on the member's watch hub, checked the same way.

use std::sync::Arc;

use revkv_node::auth::Caller;
use revkv_node::watch::{EventFilter, WatchMessage, WatchRequest};
use revkv_node::KvBackend;
use revkv_storage::{prefix_end, EventKind, KeyRange};
use tonic::{Request as GrpcRequest, Status};

use crate::error::status;
use crate::kv::KvService;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::kv_server::Kv;

/// The TTL of the lease etcd's session grants when a Lock or Campaign names none (lease 0):
/// `concurrency`'s default session TTL, 60 seconds. The session is orphaned at once, as etcd's
/// servers orphan theirs, so nothing keeps it alive.
pub(crate) const SESSION_TTL_SECONDS: i64 = 60;

/// The KV calls of the Lock and Election services, made as the outer call's caller.
pub(crate) struct Contenders<B> {
    pub(crate) backend: Arc<B>,
    pub(crate) kv: KvService<B>,
}

impl<B: KvBackend> Clone for Contenders<B> {
    fn clone(&self) -> Self {
        Contenders::new(self.backend.clone())
    }
}

impl<B: KvBackend> Contenders<B> {
    pub(crate) fn new(backend: Arc<B>) -> Self {
        let kv = KvService {
            backend: backend.clone(),
            metrics: None,
            target_chunk_bytes: usize::MAX,
        };
        Contenders { backend, kv }
    }

    /// A request for the inner call `message`, carrying `caller` as the gate put it on the outer
    /// call.
    fn as_caller<T>(caller: Option<&Caller>, message: T) -> GrpcRequest<T> {
        let mut request = GrpcRequest::new(message);
        if let Some(caller) = caller {
            request.extensions_mut().insert(caller.clone());
        }
        request
    }

    pub(crate) async fn txn(
        &self,
        caller: Option<&Caller>,
        txn: pb::TxnRequest,
    ) -> Result<pb::TxnResponse, Status> {
        let request = Self::as_caller(caller, txn);
        let answer = self.kv.txn(request).await.map_err(as_etcd_recipe_answers)?;
        Ok(answer.into_inner())
    }

    pub(crate) async fn range(
        &self,
        caller: Option<&Caller>,
        range: pb::RangeRequest,
    ) -> Result<pb::RangeResponse, Status> {
        let request = Self::as_caller(caller, range);
        let answer = self
            .kv
            .range(request)
            .await
            .map_err(as_etcd_recipe_answers)?;
        Ok(answer.into_inner())
    }

    pub(crate) async fn delete(
        &self,
        caller: Option<&Caller>,
        key: Vec<u8>,
    ) -> Result<pb::DeleteRangeResponse, Status> {
        let delete = pb::DeleteRangeRequest {
            key,
            ..Default::default()
        };
        let request = Self::as_caller(caller, delete);
        let answer = self.kv.delete_range(request).await;
        Ok(answer.map_err(as_etcd_recipe_answers)?.into_inner())
    }

    /// The lease a contender's key is attached to: `lease`, or for 0 a new one of
    /// `SESSION_TTL_SECONDS`, as etcd's session grants one.
    pub(crate) async fn session_lease(&self, lease: i64) -> Result<i64, Status> {
        if lease != 0 {
            return Ok(lease);
        }
        let granted = self.backend.lease_grant(None, SESSION_TTL_SECONDS).await;
        let granted = granted.map_err(|error| as_etcd_recipe_answers(status(error)))?;
        Ok(granted.id)
    }

    /// The oldest key (lowest create revision) under `prefix`: who holds the lock or leads.
    pub(crate) async fn first_created(
        &self,
        caller: Option<&Caller>,
        prefix: &[u8],
    ) -> Result<pb::RangeResponse, Status> {
        let range = by_create_revision(prefix, pb::range_request::SortOrder::Ascend, 0);
        self.range(caller, range).await
    }

    /// Waits until no key under `prefix` has a create revision at or below `max_create_revision`
    /// (etcd's `waitDeletes`): reads the newest such key, waits for its delete, and reads again.
    pub(crate) async fn wait_deletes(
        &self,
        caller: Option<&Caller>,
        prefix: &[u8],
        max_create_revision: i64,
    ) -> Result<(), Status> {
        loop {
            let newest = by_create_revision(
                prefix,
                pb::range_request::SortOrder::Descend,
                max_create_revision,
            );
            let answer = self.range(caller, newest).await?;
            let Some(older) = answer.kvs.into_iter().next() else {
                return Ok(());
            };
            let read_at = answer.header.map_or(0, |header| header.revision);
            self.wait_delete(caller, older.key, read_at).await?;
        }
    }

    /// Waits for `key`'s delete at `from_revision` or later (etcd's `waitDelete`).
    async fn wait_delete(
        &self,
        caller: Option<&Caller>,
        key: Vec<u8>,
        from_revision: i64,
    ) -> Result<(), Status> {
        let mut watch = self.watch(caller, KeyRange::single(key), from_revision)?;
        loop {
            match watch.next().await {
                Some(WatchMessage::Events(events)) => {
                    if events.events().any(|event| event.kind == EventKind::Delete) {
                        return Ok(());
                    }
                }
                Some(WatchMessage::Created { .. } | WatchMessage::Bookmark { .. }) => {}
                Some(WatchMessage::Canceled(cancellation)) => {
                    return Err(watch_ended(cancellation.reason.as_str()))
                }
                None => return Err(watch_ended("closed")),
            }
        }
    }

    /// A watch on `range` from `from_revision` (0: from the next revision), allowed for `caller`
    /// as a client's watch would be.
    pub(crate) fn watch(
        &self,
        caller: Option<&Caller>,
        range: KeyRange,
        from_revision: i64,
    ) -> Result<revkv_node::watch::Watch, Status> {
        let request = Self::as_caller(caller, ());
        let acting = crate::auth::acting_for(&self.backend, &request);
        let acting = acting.map_err(as_etcd_recipe_answers)?;
        let refused = |error| as_etcd_recipe_answers(status(error));
        acting.authorize_watch(&range).map_err(refused)?;
        let request = WatchRequest {
            filter: EventFilter::of(range),
            start_revision: u64::try_from(from_revision).ok().filter(|start| *start > 0),
            prev_kv: false,
            progress_interval: Some(std::time::Duration::ZERO),
        };
        acting.watch_hub().open(request).map_err(refused)
    }
}

/// A KV call's refusal as etcd's Lock and Election servers pass it on: their in-process client
/// turns the call's status into a plain error carrying only its text, which gRPC then answers
/// `Unknown` (etcd 3.6 answers a Lock with an unknown lease `Unknown: etcdserver: requested lease
/// not found`, where a Put answers `NotFound`). Clients match on the text, which is kept.
fn as_etcd_recipe_answers(refusal: Status) -> Status {
    Status::unknown(refusal.message().to_owned())
}

/// A contender's key that is withdrawn (deleted, if it is still the one created at
/// `create_revision`) when this guard is dropped armed: a Lock or Campaign whose wait failed, or
/// whose client went away mid-wait (tonic then drops the call), leaves no key behind, as etcd's
/// recipes unlock or resign on the same paths.
pub(crate) struct WithdrawnUnlessKept<B: KvBackend> {
    contenders: Contenders<B>,
    caller: Option<Caller>,
    key: Vec<u8>,
    create_revision: i64,
    armed: bool,
}

impl<B: KvBackend> WithdrawnUnlessKept<B> {
    pub(crate) fn new(
        contenders: &Contenders<B>,
        caller: Option<&Caller>,
        key: &[u8],
        create_revision: i64,
    ) -> Self {
        WithdrawnUnlessKept {
            contenders: contenders.clone(),
            caller: caller.cloned(),
            key: key.to_vec(),
            create_revision,
            armed: true,
        }
    }

    /// The key stays: the contender holds the lock or leads (or its key is gone already).
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }
}

impl<B: KvBackend> Drop for WithdrawnUnlessKept<B> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (contenders, caller) = (self.contenders.clone(), self.caller.take());
        let withdraw = withdraw_txn(&self.key, self.create_revision);
        // Dropped inside a call on the member's runtime; the delete outlives the call.
        tokio::spawn(async move {
            if let Err(error) = contenders.txn(caller.as_ref(), withdraw).await {
                tracing::info!(%error, "a contender's key was not withdrawn; its lease will end it");
            }
        });
    }
}

/// Deletes `key` if it is still the one created at `create_revision` (etcd's `Resign`).
pub(crate) fn withdraw_txn(key: &[u8], create_revision: i64) -> pb::TxnRequest {
    let delete = pb::RequestOp {
        request: Some(pb::request_op::Request::RequestDeleteRange(
            pb::DeleteRangeRequest {
                key: key.to_vec(),
                ..Default::default()
            },
        )),
    };
    pb::TxnRequest {
        compare: vec![create_revision_is(key, create_revision)],
        success: vec![delete],
        failure: Vec::new(),
    }
}

/// The text etcd's `waitDelete` ends with when its watch goes away before the delete: a plain
/// error, which gRPC answers `Unknown`.
fn watch_ended(why: &str) -> Status {
    Status::unknown(format!("lost watcher waiting for delete ({why})"))
}

/// One key under `prefix`, by create revision in `order`, limited to create revisions at or below
/// `max_create_revision` when it is not 0 (etcd's `WithFirstCreate` and `WithLastCreate` with
/// `WithMaxCreateRev`).
fn by_create_revision(
    prefix: &[u8],
    order: pb::range_request::SortOrder,
    max_create_revision: i64,
) -> pb::RangeRequest {
    pb::RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix).unwrap_or_else(|| vec![0]),
        limit: 1,
        sort_order: order as i32,
        sort_target: pb::range_request::SortTarget::Create as i32,
        max_create_revision,
        ..Default::default()
    }
}

/// The prefix of a name's contenders: the name and a slash.
pub(crate) fn contenders_prefix(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

/// A contender's key: the prefix and its lease id in lowercase hex, as etcd's `%x` writes it.
pub(crate) fn contender_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

/// A compare of `key`'s create revision with `revision`.
pub(crate) fn create_revision_is(key: &[u8], revision: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Create as i32,
        key: key.to_vec(),
        target_union: Some(pb::compare::TargetUnion::CreateRevision(revision)),
        ..Default::default()
    }
}

/// A put of `value` at `key` with `lease`, as a txn op.
pub(crate) fn put_op(key: &[u8], value: Vec<u8>, lease: i64) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: key.to_vec(),
            value,
            lease,
            ..Default::default()
        })),
    }
}

/// A read of `range` as a txn op.
pub(crate) fn range_op(range: pb::RangeRequest) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestRange(range)),
    }
}

/// A read of `key` alone as a txn op.
pub(crate) fn get_op(key: &[u8]) -> pb::RequestOp {
    range_op(pb::RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    })
}

/// A read of the oldest key under `prefix` as a txn op.
pub(crate) fn first_created_op(prefix: &[u8]) -> pb::RequestOp {
    range_op(by_create_revision(
        prefix,
        pb::range_request::SortOrder::Ascend,
        0,
    ))
}

/// The key-values of the txn answer's `index`th op, a range.
pub(crate) fn range_answer(
    answer: &pb::TxnResponse,
    index: usize,
) -> &[crate::proto::mvccpb::KeyValue] {
    match answer
        .responses
        .get(index)
        .and_then(|op| op.response.as_ref())
    {
        Some(pb::response_op::Response::ResponseRange(range)) => &range.kvs,
        _ => &[],
    }
}
