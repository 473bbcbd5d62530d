//! The one place a node-layer error becomes a gRPC status, with etcd's codes and messages (etcd
//! 3.4's `api/v3rpc/rpctypes/error.go`), because clients match on them: clientv3 and client-go
//! turn `etcdserver: mvcc: required revision has been compacted` into `ErrCompacted`, retry on
//! `Unavailable`, and so on. Nothing else in this crate builds a `Status` from a `NodeError`.
//!
//! What etcd tells apart by message is carried as a value, never recognized by its words: the
//! malformations with etcd messages of their own (empty key, too many ops, duplicate key) as
//! storage's [`Malformed`], a missing lease, member or key as the node's [`Missing`]. Rewording a
//! message elsewhere can therefore not change a gRPC status.

use revkv_node::{Missing, NodeError};
use revkv_storage::{Error as StorageError, Malformed};
use tonic::Status;

pub const EMPTY_KEY: &str = "etcdserver: key is not provided";
pub const KEY_NOT_FOUND: &str = "etcdserver: key not found";
pub const VALUE_PROVIDED: &str = "etcdserver: value is provided";
pub const LEASE_PROVIDED: &str = "etcdserver: lease is provided";
pub const TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
pub const DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";
pub const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub const FUTURE_REVISION: &str = "etcdserver: mvcc: required revision is a future revision";
pub const LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
pub const LEASE_EXISTS: &str = "etcdserver: lease already exists";
pub const MEMBER_NOT_FOUND: &str = "etcdserver: member not found";
pub const REQUEST_TOO_LARGE: &str = "etcdserver: request is too large";
pub const NO_LEADER: &str = "etcdserver: no leader";
pub const TIMEOUT: &str = "etcdserver: request timed out";
pub const TOO_MANY_REQUESTS: &str = "etcdserver: too many requests";
pub const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";
pub const CORRUPT: &str = "etcdserver: corrupt cluster";
pub const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";
/// A call without a token while auth is enabled (etcd's `ErrGRPCUserEmpty`).
pub const USER_EMPTY: &str = "etcdserver: user name is empty";
pub const PERMISSION_DENIED: &str = "etcdserver: permission denied";
pub const LEARNER_NOT_READY: &str =
    "etcdserver: can only promote a learner member which is in sync with leader";

/// The status etcd would answer for `error`.
pub fn status(error: NodeError) -> Status {
    match error {
        NodeError::Storage(storage) => storage_status(storage),
        NodeError::Invalid(message) => invalid_status(&message),
        NodeError::TooLarge(_) => Status::invalid_argument(REQUEST_TOO_LARGE),
        NodeError::NotFound(missing) => not_found_status(missing),
        // A failed revision precondition inside a node-side loop (put with ignore_value under
        // contention): etcd has no such answer; a client may retry.
        NodeError::Conflict { message, .. } => Status::aborted(message),
        // No leader, a stopping member, a member not ready: `Unavailable`, which is what makes
        // clientv3 retry on another endpoint. etcd's own text for the usual cause.
        NodeError::Unavailable { .. } => Status::unavailable(NO_LEADER),
        NodeError::Timeout(_) => Status::unavailable(TIMEOUT),
        NodeError::LearnerNotReady(_) => Status::failed_precondition(LEARNER_NOT_READY),
        NodeError::Unauthenticated(_) => Status::unauthenticated(INVALID_AUTH_TOKEN),
        NodeError::Forbidden(_) => Status::permission_denied(PERMISSION_DENIED),
        NodeError::Internal(message) => Status::internal(message),
    }
}

fn storage_status(error: StorageError) -> Status {
    match error {
        StorageError::Invalid(message) => invalid_status(&message),
        StorageError::Malformed(malformed) => malformed_status(&malformed),
        StorageError::TooLarge(_) => Status::invalid_argument(REQUEST_TOO_LARGE),
        StorageError::FutureRevision { .. } => Status::out_of_range(FUTURE_REVISION),
        StorageError::Compacted { .. } => Status::out_of_range(COMPACTED),
        StorageError::LeaseNotFound { .. } => Status::not_found(LEASE_NOT_FOUND),
        StorageError::LeaseExists { .. } => Status::failed_precondition(LEASE_EXISTS),
        StorageError::NoSpace => Status::resource_exhausted(NO_SPACE),
        // etcd's ErrGRPCCorrupt: DataLoss.
        StorageError::CorruptCluster => Status::data_loss(CORRUPT),
        StorageError::Busy(_) => Status::unavailable(TOO_MANY_REQUESTS),
        // etcd answers its auth store's refusals ("role name already exists", "user name not
        // found") with FailedPrecondition.
        StorageError::AuthRecord(message) | StorageError::AuthRecordNotFound(message) => {
            Status::failed_precondition(format!("etcdserver: {message}"))
        }
        fault => Status::internal(fault.to_string()),
    }
}

/// A malformed request etcd has no message of its own for: its words, in etcd's form.
fn invalid_status(message: &str) -> Status {
    Status::invalid_argument(format!("etcdserver: {message}"))
}

/// etcd's exact message for each malformation it tells apart.
fn malformed_status(malformed: &Malformed) -> Status {
    Status::invalid_argument(match malformed {
        Malformed::EmptyKey => EMPTY_KEY,
        Malformed::TooManyTxnOps { .. } => TOO_MANY_OPS,
        Malformed::DuplicateTxnKey { .. } => DUPLICATE_KEY,
        Malformed::KeyNotFound { .. } => KEY_NOT_FOUND,
    })
}

/// etcd's answer for each kind of missing thing; a key a write needed is `InvalidArgument` there.
fn not_found_status(missing: Missing) -> Status {
    match missing {
        Missing::Lease(_) => Status::not_found(LEASE_NOT_FOUND),
        Missing::Member(_) => Status::not_found(MEMBER_NOT_FOUND),
        Missing::Key(_) => Status::invalid_argument(KEY_NOT_FOUND),
        Missing::Other(what) => Status::not_found(format!("etcdserver: {what}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn code_and_message(error: NodeError) -> (Code, String) {
        let status = status(error);
        (status.code(), status.message().to_string())
    }

    #[test]
    fn storage_rejections_get_etcds_codes_and_messages() {
        let compacted = StorageError::Compacted {
            requested: 1,
            compact_revision: 5,
        };
        assert_eq!(
            code_and_message(NodeError::Storage(compacted)),
            (Code::OutOfRange, COMPACTED.to_string())
        );
        let future = StorageError::FutureRevision {
            requested: 9,
            current: 5,
        };
        assert_eq!(
            code_and_message(NodeError::Storage(future)),
            (Code::OutOfRange, FUTURE_REVISION.to_string())
        );
        assert_eq!(
            code_and_message(NodeError::Storage(StorageError::CorruptCluster)),
            (Code::DataLoss, CORRUPT.to_string())
        );
        let lease = StorageError::LeaseNotFound { id: 7 };
        assert_eq!(
            code_and_message(NodeError::Storage(lease)),
            (Code::NotFound, LEASE_NOT_FOUND.to_string())
        );
    }

    /// The refusals etcd answers with messages of their own, produced by the real validation code
    /// and mapped by kind; words that merely look like one of them are answered in etcd's general
    /// form.
    #[test]
    fn validation_refusals_get_etcds_messages_by_kind() {
        use revkv_storage::{validate_request, Limits, PutRequest, Request, TxnOp, TxnRequest};
        let limits = Limits::default();
        let put = |key: &str| {
            TxnOp::Put(PutRequest {
                key: key.into(),
                value: vec![],
                lease: 0,
                prev_kv: false,
            })
        };
        let check = |request: Request| {
            let error = validate_request(&request, &limits).expect_err("must be refused");
            status(NodeError::from(error)).message().to_string()
        };
        let duplicate = TxnRequest {
            success: vec![put("a"), put("a")],
            ..TxnRequest::default()
        };
        assert_eq!(check(Request::Txn(duplicate)), DUPLICATE_KEY);
        let too_many = TxnRequest {
            success: (0..=limits.max_txn_ops)
                .map(|n| put(&n.to_string()))
                .collect(),
            ..TxnRequest::default()
        };
        assert_eq!(check(Request::Txn(too_many)), TOO_MANY_OPS);
        let empty = PutRequest {
            key: vec![],
            value: vec![],
            lease: 0,
            prev_kv: false,
        };
        assert_eq!(check(Request::Put(empty)), EMPTY_KEY);
        let lookalike = StorageError::Invalid("txn has a bad compare".into());
        assert_eq!(
            code_and_message(NodeError::Storage(lookalike)),
            (
                Code::InvalidArgument,
                "etcdserver: txn has a bad compare".to_string()
            )
        );
    }

    #[test]
    fn missing_things_and_unavailability_map_like_etcd() {
        assert_eq!(
            code_and_message(NodeError::NotFound(Missing::Lease(5))),
            (Code::NotFound, LEASE_NOT_FOUND.to_string())
        );
        assert_eq!(
            code_and_message(NodeError::NotFound(Missing::Member(3))),
            (Code::NotFound, MEMBER_NOT_FOUND.to_string())
        );
        assert_eq!(
            code_and_message(NodeError::NotFound(Missing::Key("\"a\"".into()))),
            (Code::InvalidArgument, KEY_NOT_FOUND.to_string())
        );
        // The kind decides, not the words: something else whose description starts with
        // "lease" is not a missing lease.
        assert_eq!(
            code_and_message(NodeError::NotFound(Missing::Other(
                "lease-shaped watch 4".into()
            ))),
            (
                Code::NotFound,
                "etcdserver: lease-shaped watch 4".to_string()
            )
        );
        let no_leader = NodeError::Unavailable {
            reason: "no leader elected yet".into(),
            retry_after: std::time::Duration::from_secs(1),
        };
        assert_eq!(
            code_and_message(no_leader),
            (Code::Unavailable, NO_LEADER.to_string())
        );
        assert_eq!(
            code_and_message(NodeError::TooLarge("value".into())).0,
            Code::InvalidArgument
        );
        // clientv3 turns etcd's words into `ErrLearnerNotReady`; revkv's reason is not sent.
        let not_ready = NodeError::LearnerNotReady("learner 4 is 20 entries behind".into());
        assert_eq!(
            code_and_message(not_ready),
            (Code::FailedPrecondition, LEARNER_NOT_READY.to_string())
        );
    }
}
