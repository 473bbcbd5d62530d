//! Between etcd's protobuf messages and revkv's own request and answer types. Parsing only:
//! every rule of what a request means lives below, in revkv-node and revkv-storage. A message
//! that revkv cannot express is refused here with `InvalidArgument` and a message naming what is
//! not supported, never half-applied.

use revkv_node::range_view::{RangeView, SortOrder, SortTarget};
use revkv_node::ResponseHeader;
use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeepCurrent, KeyRange, KeyValue,
    PutRequest, RangeEnd, RangeRequest, RangeResponse, TxnOp, TxnOpResponse, TxnRequest,
};
use tonic::Status;

use crate::error;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

/// etcd's response header for revkv's, with the member's cluster id (`KvBackend::cluster_id`).
pub fn header(header: ResponseHeader, cluster_id: u64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader {
        cluster_id,
        member_id: header.member_id,
        revision: to_i64(header.revision),
        raft_term: header.raft_term,
    })
}

/// Revisions and counts are u64 in revkv and i64 on etcd's wire; they never come near 2^63.
pub fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub fn key_value(kv: KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: to_i64(kv.create_revision),
        mod_revision: to_i64(kv.mod_revision),
        version: to_i64(kv.version),
        value: kv.value,
        lease: kv.lease,
    }
}

/// etcd's key and range_end: an empty range_end is the key alone, `"\0"` is every key from the
/// key on, anything else is `[key, range_end)`.
pub fn key_range(key: Vec<u8>, range_end: Vec<u8>) -> Result<KeyRange, Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument(error::EMPTY_KEY));
    }
    let end = match range_end.as_slice() {
        [] => RangeEnd::Single,
        [0] => RangeEnd::Unbounded,
        _ => RangeEnd::Until(range_end),
    };
    Ok(KeyRange { start: key, end })
}

/// A positive revision, or `None` for etcd's 0 ("the current one"); negative revisions read the
/// current one too, as in etcd.
fn revision(value: i64) -> Option<u64> {
    u64::try_from(value).ok().filter(|revision| *revision > 0)
}

fn revision_bound(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A range request as the store's read plus the view applied to its answer.
pub fn range(request: pb::RangeRequest) -> Result<(RangeRequest, RangeView), Status> {
    let view = RangeView {
        sort_order: match pb::range_request::SortOrder::try_from(request.sort_order) {
            Ok(pb::range_request::SortOrder::None) => SortOrder::None,
            Ok(pb::range_request::SortOrder::Ascend) => SortOrder::Ascend,
            Ok(pb::range_request::SortOrder::Descend) => SortOrder::Descend,
            Err(_) => return Err(Status::invalid_argument("etcdserver: unknown sort order")),
        },
        sort_target: match pb::range_request::SortTarget::try_from(request.sort_target) {
            Ok(pb::range_request::SortTarget::Key) => SortTarget::Key,
            Ok(pb::range_request::SortTarget::Version) => SortTarget::Version,
            Ok(pb::range_request::SortTarget::Create) => SortTarget::CreateRevision,
            Ok(pb::range_request::SortTarget::Mod) => SortTarget::ModRevision,
            Ok(pb::range_request::SortTarget::Value) => SortTarget::Value,
            Err(_) => return Err(Status::invalid_argument("etcdserver: unknown sort target")),
        },
        min_mod_revision: revision_bound(request.min_mod_revision),
        max_mod_revision: revision_bound(request.max_mod_revision),
        min_create_revision: revision_bound(request.min_create_revision),
        max_create_revision: revision_bound(request.max_create_revision),
        limit: u64::try_from(request.limit).ok().filter(|limit| *limit > 0),
    };
    let read = RangeRequest {
        range: Some(key_range(request.key, request.range_end)?),
        revision: revision(request.revision),
        limit: view.store_limit(),
        keys_only: request.keys_only,
        count_only: request.count_only,
        continue_token: None,
    };
    Ok((read, view))
}

/// The store's answer through the view, as etcd's range response.
pub fn range_response(
    response: RangeResponse,
    view: &RangeView,
    header: Option<pb::ResponseHeader>,
) -> pb::RangeResponse {
    let shown = view.finish(response);
    pb::RangeResponse {
        header,
        count: to_i64(shown.count),
        more: shown.more,
        kvs: shown.kvs.into_iter().map(key_value).collect(),
    }
}

/// A put without etcd's `ignore_value` / `ignore_lease` (the caller handles those).
pub fn put(request: &pb::PutRequest) -> Result<PutRequest, Status> {
    if request.key.is_empty() {
        return Err(Status::invalid_argument(error::EMPTY_KEY));
    }
    if request.ignore_value && !request.value.is_empty() {
        return Err(Status::invalid_argument(error::VALUE_PROVIDED));
    }
    if request.ignore_lease && request.lease != 0 {
        return Err(Status::invalid_argument(error::LEASE_PROVIDED));
    }
    Ok(PutRequest {
        key: request.key.clone(),
        value: request.value.clone(),
        lease: request.lease,
        prev_kv: request.prev_kv,
    })
}

pub fn delete_range(request: pb::DeleteRangeRequest) -> Result<DeleteRangeRequest, Status> {
    Ok(DeleteRangeRequest {
        range: key_range(request.key, request.range_end)?,
        prev_kv: request.prev_kv,
    })
}

/// One compare, of a key or, with a `range_end`, of every key of the range (etcd's rules for the
/// range end: `"\0"` is every key from the key on).
pub fn compare(compare: pb::Compare) -> Result<Compare, Status> {
    use pb::compare::{CompareResult, TargetUnion};
    if compare.key.is_empty() {
        return Err(Status::invalid_argument(error::EMPTY_KEY));
    }
    let keys = key_range(compare.key, compare.range_end)?;
    let op = match CompareResult::try_from(compare.result) {
        Ok(CompareResult::Equal) => CompareOp::Equal,
        Ok(CompareResult::NotEqual) => CompareOp::NotEqual,
        Ok(CompareResult::Less) => CompareOp::Less,
        Ok(CompareResult::Greater) => CompareOp::Greater,
        Err(_) => {
            return Err(Status::invalid_argument(
                "etcdserver: unknown compare result",
            ))
        }
    };
    // etcd compares against the union's field named by `target`; a missing union compares with
    // the field's zero value, as proto3 would decode it.
    let target = match (
        pb::compare::CompareTarget::try_from(compare.target),
        compare.target_union,
    ) {
        (Ok(pb::compare::CompareTarget::Value), Some(TargetUnion::Value(value))) => {
            CompareTarget::Value(value)
        }
        (Ok(pb::compare::CompareTarget::Value), _) => CompareTarget::Value(Vec::new()),
        (Ok(pb::compare::CompareTarget::Version), union) => {
            CompareTarget::Version(revision_bound(union_number(union)))
        }
        (Ok(pb::compare::CompareTarget::Create), union) => {
            CompareTarget::CreateRevision(revision_bound(union_number(union)))
        }
        (Ok(pb::compare::CompareTarget::Mod), union) => {
            CompareTarget::ModRevision(revision_bound(union_number(union)))
        }
        (Ok(pb::compare::CompareTarget::Lease), union) => CompareTarget::Lease(union_number(union)),
        (Err(_), _) => {
            return Err(Status::invalid_argument(
                "etcdserver: unknown compare target",
            ))
        }
    };
    Ok(Compare {
        key: keys.start,
        range_end: keys.end,
        target,
        op,
    })
}

fn union_number(union: Option<pb::compare::TargetUnion>) -> i64 {
    use pb::compare::TargetUnion;
    match union {
        Some(TargetUnion::Version(number))
        | Some(TargetUnion::CreateRevision(number))
        | Some(TargetUnion::ModRevision(number))
        | Some(TargetUnion::Lease(number)) => number,
        Some(TargetUnion::Value(_)) | None => 0,
    }
}

/// How one op's answer is shown: a range through its view (sort, filters, limit), a nested txn
/// through the views of its branches' ops, anything else as it is.
#[derive(Clone, Debug, Default)]
pub enum OpView {
    #[default]
    AsIs,
    Range(RangeView),
    Txn {
        success: Vec<OpView>,
        failure: Vec<OpView>,
    },
}

/// A txn's compares and branches, with the view of every op.
pub struct ConvertedTxn {
    pub txn: TxnRequest,
    pub success_views: Vec<OpView>,
    pub failure_views: Vec<OpView>,
}

/// A txn as the store's request, nested txns included.
pub fn txn(request: pb::TxnRequest) -> Result<ConvertedTxn, Status> {
    let compare = request
        .compare
        .into_iter()
        .map(compare)
        .collect::<Result<Vec<_>, _>>()?;
    let (success, success_views) = branch(request.success)?;
    let (failure, failure_views) = branch(request.failure)?;
    Ok(ConvertedTxn {
        txn: TxnRequest {
            compare,
            success,
            failure,
        },
        success_views,
        failure_views,
    })
}

fn branch(ops: Vec<pb::RequestOp>) -> Result<(Vec<TxnOp>, Vec<OpView>), Status> {
    let mut converted = Vec::with_capacity(ops.len());
    let mut views = Vec::with_capacity(ops.len());
    for op in ops {
        let (op, view) = txn_op(op)?;
        converted.push(op);
        views.push(view);
    }
    Ok((converted, views))
}

/// One op of a txn branch, with the view its answer is shown through.
fn txn_op(op: pb::RequestOp) -> Result<(TxnOp, OpView), Status> {
    use pb::request_op::Request;
    match op.request {
        // A range at a revision reads that revision, not the txn's own writes; a revision past
        // the current one or below the compact revision refuses the whole txn, as in etcd.
        Some(Request::RequestRange(range_request)) => {
            let (read, view) = range(range_request)?;
            Ok((TxnOp::Get(read), OpView::Range(view)))
        }
        Some(Request::RequestPut(put_request)) => {
            let converted = put(&put_request)?;
            let keep = KeepCurrent {
                value: put_request.ignore_value,
                lease: put_request.ignore_lease,
            };
            let op = match keep.value || keep.lease {
                true => TxnOp::PutKeeping {
                    put: converted,
                    keep,
                },
                false => TxnOp::Put(converted),
            };
            Ok((op, OpView::AsIs))
        }
        Some(Request::RequestDeleteRange(delete)) => {
            Ok((TxnOp::DeleteRange(delete_range(delete)?), OpView::AsIs))
        }
        Some(Request::RequestTxn(nested)) => {
            let converted = txn(nested)?;
            let view = OpView::Txn {
                success: converted.success_views,
                failure: converted.failure_views,
            };
            Ok((TxnOp::Txn(converted.txn), view))
        }
        None => Err(Status::invalid_argument(
            "etcdserver: a txn op has no request",
        )),
    }
}

/// A txn's answers, each shown through its op's view; `views` are those of the branch that ran.
pub fn txn_op_responses(
    responses: Vec<TxnOpResponse>,
    views: &[OpView],
    header: Option<pb::ResponseHeader>,
) -> Vec<pb::ResponseOp> {
    responses
        .into_iter()
        .zip(views)
        .map(|(response, view)| txn_op_response(response, view, header))
        .collect()
}

/// One op's answer, shown through the op's view.
fn txn_op_response(
    response: TxnOpResponse,
    view: &OpView,
    header: Option<pb::ResponseHeader>,
) -> pb::ResponseOp {
    use pb::response_op::Response;
    let response = match response {
        TxnOpResponse::Get(range) => {
            let range_view = match view {
                OpView::Range(range_view) => *range_view,
                _ => RangeView::default(),
            };
            Response::ResponseRange(range_response(range, &range_view, header))
        }
        TxnOpResponse::Put(put) => Response::ResponsePut(pb::PutResponse {
            header,
            prev_kv: put.prev_kv.map(key_value),
        }),
        TxnOpResponse::DeleteRange(delete) => {
            Response::ResponseDeleteRange(pb::DeleteRangeResponse {
                header,
                deleted: to_i64(delete.deleted),
                prev_kvs: delete.prev_kvs.into_iter().map(key_value).collect(),
            })
        }
        TxnOpResponse::Txn(nested) => {
            let views = match view {
                OpView::Txn { success, failure } if nested.succeeded => success.as_slice(),
                OpView::Txn { failure, .. } => failure.as_slice(),
                _ => &[],
            };
            // etcd gives a nested txn's answer an empty header (`newTxnResp`), revision 0; the
            // answers inside it carry the revision as the outer txn's do.
            Response::ResponseTxn(pb::TxnResponse {
                header: Some(pb::ResponseHeader::default()),
                succeeded: nested.succeeded,
                responses: txn_op_responses(nested.responses, views, header),
            })
        }
    };
    pb::ResponseOp {
        response: Some(response),
    }
}
