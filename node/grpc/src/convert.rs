//! Between etcd's protobuf messages and revkv's own request and answer types. Parsing only:
//! every rule of what a request means lives below, in revkv-node and revkv-storage. A message
//! that revkv cannot express is refused here with `InvalidArgument` and a message naming what is
//! not supported, never half-applied.

use revkv_node::range_view::{RangeView, SortOrder, SortTarget};
use revkv_node::ResponseHeader;
use revkv_storage::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyRange, KeyValue, PutRequest,
    RangeEnd, RangeRequest, RangeResponse, TxnOp, TxnOpResponse,
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

pub fn compare(compare: pb::Compare) -> Result<Compare, Status> {
    use pb::compare::{CompareResult, TargetUnion};
    if !compare.range_end.is_empty() {
        return Err(Status::invalid_argument(
            "revkv: a compare over a key range (range_end) is not supported; compare single keys",
        ));
    }
    if compare.key.is_empty() {
        return Err(Status::invalid_argument(error::EMPTY_KEY));
    }
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
        key: compare.key,
        range_end: revkv_storage::RangeEnd::Single,
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

/// One op of a txn branch, with the view its answer is shown through when it is a range.
pub fn txn_op(op: pb::RequestOp) -> Result<(TxnOp, Option<RangeView>), Status> {
    use pb::request_op::Request;
    match op.request {
        Some(Request::RequestRange(range_request)) => {
            if range_request.revision != 0 {
                return Err(Status::invalid_argument(
                    "revkv: a range inside a txn reads the txn's own state; revision is not supported there",
                ));
            }
            let (read, view) = range(range_request)?;
            Ok((TxnOp::Get(read), Some(view)))
        }
        Some(Request::RequestPut(put_request)) => {
            if put_request.ignore_value || put_request.ignore_lease {
                return Err(Status::invalid_argument(
                    "revkv: ignore_value and ignore_lease are not supported inside a txn",
                ));
            }
            Ok((TxnOp::Put(put(&put_request)?), None))
        }
        Some(Request::RequestDeleteRange(delete)) => {
            Ok((TxnOp::DeleteRange(delete_range(delete)?), None))
        }
        Some(Request::RequestTxn(_)) => Err(Status::invalid_argument(
            "revkv: nested txns are not supported; flatten the txn",
        )),
        None => Err(Status::invalid_argument(
            "etcdserver: a txn op has no request",
        )),
    }
}

/// One op's answer, its range shown through the op's view.
pub fn txn_op_response(
    response: TxnOpResponse,
    view: Option<&RangeView>,
    header: Option<pb::ResponseHeader>,
) -> pb::ResponseOp {
    use pb::response_op::Response;
    let response = match response {
        TxnOpResponse::Get(range) => Response::ResponseRange(range_response(
            range,
            &view.copied().unwrap_or_default(),
            header,
        )),
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
        // `txn_op` refuses nested txns until every member reads them (issue 63, item 8), so no
        // answer holds one yet; when it accepts them, each nested get needs its own view here.
        TxnOpResponse::Txn(nested) => Response::ResponseTxn(pb::TxnResponse {
            header,
            succeeded: nested.succeeded,
            responses: nested
                .responses
                .into_iter()
                .map(|op| txn_op_response(op, None, header))
                .collect(),
        }),
    };
    pb::ResponseOp {
        response: Some(response),
    }
}
