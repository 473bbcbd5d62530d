//! Auth on the gRPC port (issues 15 and 16), as etcd does it: clients authenticate with the
//! `Auth` service and send the token as `token` metadata on every call. The `gate` middleware in
//! front of every service resolves it into a `Caller` (refusing a missing token with
//! `InvalidArgument`, "etcdserver: user name is empty", and an invalid one with `Unauthenticated`,
//! "etcdserver: invalid auth token", which makes clientv3 authenticate again, both as etcd does)
//! and refuses a non-root caller on administration methods (`PermissionDenied`); services that
//! touch keys act through `revkv_node::auth::CheckedBackend` for that caller, the same checks as
//! the HTTP API's.

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use revkv_node::auth::{authenticate_bearer, AuthOptions, Caller, CheckedBackend};
use revkv_node::KvBackend;
use tonic::Status;

use crate::error::{self, status};

/// Who may call a method while auth is enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodAccess {
    /// Anyone: authenticating, and asking whether auth is enabled.
    Open,
    /// Any authenticated user; the service checks each key it touches.
    Authenticated,
    /// Only a user holding the root role.
    Root,
}

/// The access of the gRPC method at `path` (`/etcdserverpb.KV/Range`); a method missing here
/// needs root, so a new one is closed until someone decides otherwise.
pub fn access_of_method(path: &str) -> MethodAccess {
    use MethodAccess::{Authenticated, Open, Root};
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else {
        return Root;
    };
    match (service, method) {
        ("etcdserverpb.Auth", "Authenticate" | "AuthStatus") => Open,
        ("etcdserverpb.KV", "Range" | "RangeStream" | "Put" | "DeleteRange" | "Txn") => {
            Authenticated
        }
        ("etcdserverpb.Watch", "Watch") => Authenticated,
        // The recipes' own KV calls are checked key by key, as the caller's (`lock_queue.rs`).
        ("v3lockpb.Lock", "Lock" | "Unlock") => Authenticated,
        ("v3electionpb.Election", "Campaign" | "Proclaim" | "Leader" | "Observe" | "Resign") => {
            Authenticated
        }
        ("etcdserverpb.Lease", _) => Authenticated,
        ("etcdserverpb.Cluster", "MemberList") => Authenticated,
        ("etcdserverpb.Maintenance", "Status") => Authenticated,
        // Listing alarms needs a user only, as from etcd 3.6 on; raising or clearing one needs
        // root, which the service checks, since the action is in the request (`require_root`).
        ("etcdserverpb.Maintenance", "Alarm") => Authenticated,
        // Compaction, membership changes, hashes, snapshots, defragmentation, leader moves and
        // every auth change.
        _ => Root,
    }
}

/// The middleware: resolves the caller from the `token` metadata and refuses what the method
/// table refuses; the caller rides in the request's extensions to the service.
pub async fn gate<B: KvBackend>(
    backend: Arc<B>,
    options: AuthOptions,
    mut request: Request,
    next: Next,
) -> Response {
    let records = backend.auth_records();
    let access = access_of_method(request.uri().path());
    let caller = if !records.enabled || access == MethodAccess::Open {
        Ok(Caller::Unrestricted)
    } else {
        let token = request
            .headers()
            .get("token")
            .and_then(|value| value.to_str().ok());
        if token.is_none() {
            // etcd tells a call without any token apart from one with a bad token: it has no
            // user at all. Clients match on the text.
            return Status::invalid_argument(error::USER_EMPTY).into_http::<axum::body::Body>();
        }
        let now = revkv_node::auth::authenticate::unix_now();
        authenticate_bearer(&records, token, &options, now).and_then(|caller| match access {
            MethodAccess::Root => caller.require_root().map(|()| caller),
            _ => Ok(caller),
        })
    };
    match caller {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => status(refusal).into_http::<axum::body::Body>(),
    }
}

/// The backend acting for the request's caller. The gate puts a caller on every request it
/// passes; one without (a route the gate did not cover) is refused while auth is enabled.
pub fn acting_for<B: KvBackend, T>(
    backend: &Arc<B>,
    request: &tonic::Request<T>,
) -> Result<CheckedBackend<B>, Status> {
    let caller = match request.extensions().get::<Caller>() {
        Some(caller) => caller.clone(),
        None if backend.auth_records().enabled => {
            return Err(Status::unauthenticated(error::INVALID_AUTH_TOKEN))
        }
        None => Caller::Unrestricted,
    };
    Ok(CheckedBackend::new(Arc::clone(backend), caller))
}

/// Refuses the request's caller unless it holds the root role (or auth is disabled): for a
/// method the gate lets any user call whose request decides whether it administers.
pub fn require_root<B: KvBackend, T>(
    backend: &Arc<B>,
    request: &tonic::Request<T>,
) -> Result<(), Status> {
    match request.extensions().get::<Caller>() {
        Some(caller) => caller.require_root().map_err(status),
        None if backend.auth_records().enabled => {
            Err(Status::unauthenticated(error::INVALID_AUTH_TOKEN))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_methods_need_a_user_administration_root_and_unknown_methods_are_closed() {
        assert_eq!(
            access_of_method("/etcdserverpb.Auth/Authenticate"),
            MethodAccess::Open
        );
        assert_eq!(
            access_of_method("/etcdserverpb.KV/Range"),
            MethodAccess::Authenticated
        );
        assert_eq!(
            access_of_method("/etcdserverpb.Lease/LeaseGrant"),
            MethodAccess::Authenticated
        );
        assert_eq!(
            access_of_method("/etcdserverpb.KV/RangeStream"),
            MethodAccess::Authenticated
        );
        assert_eq!(
            access_of_method("/etcdserverpb.Maintenance/Alarm"),
            MethodAccess::Authenticated
        );
        assert_eq!(
            access_of_method("/v3lockpb.Lock/Lock"),
            MethodAccess::Authenticated
        );
        assert_eq!(
            access_of_method("/v3electionpb.Election/Observe"),
            MethodAccess::Authenticated
        );
        assert_eq!(
            access_of_method("/etcdserverpb.KV/Compact"),
            MethodAccess::Root
        );
        assert_eq!(
            access_of_method("/etcdserverpb.Maintenance/Snapshot"),
            MethodAccess::Root
        );
        assert_eq!(
            access_of_method("/etcdserverpb.Auth/UserAdd"),
            MethodAccess::Root
        );
        assert_eq!(
            access_of_method("/etcdserverpb.New/Method"),
            MethodAccess::Root
        );
        assert_eq!(access_of_method("garbage"), MethodAccess::Root);
    }
}
