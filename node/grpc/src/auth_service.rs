//! etcd's Auth service over the replicated auth records, so `etcdctl --user`, `etcdctl user|role|
//! auth ...` and clientv3's token handling work against revkv. Every change is a
//! `Request::Auth` through raft, as the HTTP API's; passwords are hashed (argon2) here, on a
//! blocking thread and at most `AuthOptions::max_concurrent_password_checks` at once, before the
//! change is proposed. Who may call what is decided by `auth::gate` before a method runs.

use std::sync::Arc;

use revkv_node::auth::authenticate::{fill_random, issue_token, records_with_token_key, unix_now};
use revkv_node::auth::password::{hash_password, run_password_work};
use revkv_node::auth::AuthOptions;
use revkv_node::{KvBackend, NodeError};
use revkv_storage::auth::{AuthRequest, Permission, PermissionKind};
use revkv_storage::{KeyRange, RangeEnd, Request, Response};
use tokio::sync::Semaphore;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use crate::convert;
use crate::error::status;
use crate::proto::authpb;
use crate::proto::etcdserverpb as pb;

pub struct AuthService<B> {
    pub backend: Arc<B>,
    pub options: AuthOptions,
    pub password_checks: Arc<Semaphore>,
}

type Answer<T> = Result<GrpcResponse<T>, Status>;

/// etcd's answer to a wrong user name or password.
const AUTH_FAILED: &str = "etcdserver: authentication failed, invalid user ID or password";

impl<B: KvBackend> AuthService<B> {
    fn header(&self) -> Result<Option<pb::ResponseHeader>, Status> {
        Ok(convert::header(
            self.backend.header().map_err(status)?,
            self.backend.cluster_id(),
        ))
    }

    /// Replicates one change; answers the header of its answer.
    async fn change(&self, change: AuthRequest) -> Result<Option<pb::ResponseHeader>, Status> {
        let written = self
            .backend
            .write(Request::Auth(change))
            .await
            .map_err(status)?;
        let Response::Auth { .. } = written.response else {
            return Err(status(revkv_node::writes::unexpected_response("auth")));
        };
        Ok(convert::header(written.header, self.backend.cluster_id()))
    }

    /// Runs argon2 work off the async threads, at most the configured number at once, waiting
    /// at most the request timeout for a turn (as the HTTP API does).
    async fn password_work<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, NodeError> + Send + 'static,
    ) -> Result<T, Status> {
        let wait = self.backend.request_timeout();
        run_password_work(&self.password_checks, wait, work)
            .await
            .map_err(status)
    }

    async fn hashed(&self, password: String) -> Result<String, Status> {
        if password.is_empty() {
            return Err(Status::invalid_argument("etcdserver: password is empty"));
        }
        let scheme = self.options.password_hash;
        self.password_work(move || {
            hash_password(&password, scheme).map_err(|error| NodeError::Invalid(error.to_string()))
        })
        .await
    }
}

/// A permission from etcd's message: no range end is one key, `"\0"` every key from `key` on.
fn permission_keys(key: Vec<u8>, range_end: Vec<u8>) -> Result<KeyRange, Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument(
            "etcdserver: permission key is empty",
        ));
    }
    let end = match range_end.as_slice() {
        [] => RangeEnd::Single,
        [0] => RangeEnd::Unbounded,
        end if end > key.as_slice() => RangeEnd::Until(range_end),
        _ => return Err(Status::invalid_argument("etcdserver: invalid range end")),
    };
    Ok(KeyRange { start: key, end })
}

fn permission_message(permission: &Permission) -> authpb::Permission {
    let perm_type = match permission.kind {
        PermissionKind::Read => authpb::permission::Type::Read,
        PermissionKind::Write => authpb::permission::Type::Write,
        PermissionKind::ReadWrite => authpb::permission::Type::Readwrite,
    };
    let range_end = match &permission.keys.end {
        RangeEnd::Single => Vec::new(),
        RangeEnd::Until(end) => end.clone(),
        RangeEnd::Unbounded => vec![0],
    };
    authpb::Permission {
        perm_type: perm_type as i32,
        key: permission.keys.start.clone(),
        range_end,
    }
}

#[tonic::async_trait]
impl<B: KvBackend> pb::auth_server::Auth for AuthService<B> {
    async fn auth_enable(
        &self,
        _request: GrpcRequest<pb::AuthEnableRequest>,
    ) -> Answer<pb::AuthEnableResponse> {
        let mut token_key = vec![0u8; 32];
        fill_random(&mut token_key);
        let header = self.change(AuthRequest::Enable { token_key }).await?;
        Ok(GrpcResponse::new(pb::AuthEnableResponse { header }))
    }

    async fn auth_disable(
        &self,
        _request: GrpcRequest<pb::AuthDisableRequest>,
    ) -> Answer<pb::AuthDisableResponse> {
        let header = self.change(AuthRequest::Disable).await?;
        Ok(GrpcResponse::new(pb::AuthDisableResponse { header }))
    }

    async fn auth_status(
        &self,
        _request: GrpcRequest<pb::AuthStatusRequest>,
    ) -> Answer<pb::AuthStatusResponse> {
        let records = self.backend.auth_records();
        Ok(GrpcResponse::new(pb::AuthStatusResponse {
            header: self.header()?,
            enabled: records.enabled,
            auth_revision: records.revision,
        }))
    }

    async fn authenticate(
        &self,
        request: GrpcRequest<pb::AuthenticateRequest>,
    ) -> Answer<pb::AuthenticateResponse> {
        let request = request.into_inner();
        let records = records_with_token_key(self.backend.as_ref())
            .await
            .map_err(status)?;
        if !records.enabled {
            return Err(Status::failed_precondition(
                "etcdserver: authentication is not enabled",
            ));
        }
        let options = self.options.clone();
        let token = self
            .password_work(move || {
                issue_token(
                    &records,
                    &request.name,
                    &request.password,
                    &options,
                    unix_now(),
                )
            })
            .await
            .map_err(|refusal| match refusal.code() {
                tonic::Code::Unauthenticated => Status::invalid_argument(AUTH_FAILED),
                _ => refusal,
            })?;
        Ok(GrpcResponse::new(pb::AuthenticateResponse {
            header: self.header()?,
            token,
        }))
    }

    async fn user_add(
        &self,
        request: GrpcRequest<pb::AuthUserAddRequest>,
    ) -> Answer<pb::AuthUserAddResponse> {
        let request = request.into_inner();
        if request.options.is_some_and(|options| options.no_password) {
            return Err(Status::unimplemented(
                "revkv: users without a password are not supported yet",
            ));
        }
        let password_hash = self.hashed(request.password).await?;
        let change = AuthRequest::UserAdd {
            name: request.name,
            password_hash,
        };
        let header = self.change(change).await?;
        Ok(GrpcResponse::new(pb::AuthUserAddResponse { header }))
    }

    async fn user_get(
        &self,
        request: GrpcRequest<pb::AuthUserGetRequest>,
    ) -> Answer<pb::AuthUserGetResponse> {
        let name = request.into_inner().name;
        let records = self.backend.auth_records();
        let user = records
            .users
            .get(&name)
            .ok_or_else(|| Status::failed_precondition("etcdserver: user name not found"))?;
        Ok(GrpcResponse::new(pb::AuthUserGetResponse {
            header: self.header()?,
            roles: user.roles.iter().cloned().collect(),
        }))
    }

    async fn user_list(
        &self,
        _request: GrpcRequest<pb::AuthUserListRequest>,
    ) -> Answer<pb::AuthUserListResponse> {
        let records = self.backend.auth_records();
        Ok(GrpcResponse::new(pb::AuthUserListResponse {
            header: self.header()?,
            users: records.users.keys().cloned().collect(),
        }))
    }

    async fn user_delete(
        &self,
        request: GrpcRequest<pb::AuthUserDeleteRequest>,
    ) -> Answer<pb::AuthUserDeleteResponse> {
        let name = request.into_inner().name;
        let header = self.change(AuthRequest::UserDelete { name }).await?;
        Ok(GrpcResponse::new(pb::AuthUserDeleteResponse { header }))
    }

    async fn user_change_password(
        &self,
        request: GrpcRequest<pb::AuthUserChangePasswordRequest>,
    ) -> Answer<pb::AuthUserChangePasswordResponse> {
        let request = request.into_inner();
        let password_hash = self.hashed(request.password).await?;
        let change = AuthRequest::UserChangePassword {
            name: request.name,
            password_hash,
        };
        let header = self.change(change).await?;
        Ok(GrpcResponse::new(pb::AuthUserChangePasswordResponse {
            header,
        }))
    }

    async fn user_grant_role(
        &self,
        request: GrpcRequest<pb::AuthUserGrantRoleRequest>,
    ) -> Answer<pb::AuthUserGrantRoleResponse> {
        let request = request.into_inner();
        let change = AuthRequest::UserGrantRole {
            user: request.user,
            role: request.role,
        };
        let header = self.change(change).await?;
        Ok(GrpcResponse::new(pb::AuthUserGrantRoleResponse { header }))
    }

    async fn user_revoke_role(
        &self,
        request: GrpcRequest<pb::AuthUserRevokeRoleRequest>,
    ) -> Answer<pb::AuthUserRevokeRoleResponse> {
        let request = request.into_inner();
        let change = AuthRequest::UserRevokeRole {
            user: request.name,
            role: request.role,
        };
        let header = self.change(change).await?;
        Ok(GrpcResponse::new(pb::AuthUserRevokeRoleResponse { header }))
    }

    async fn role_add(
        &self,
        request: GrpcRequest<pb::AuthRoleAddRequest>,
    ) -> Answer<pb::AuthRoleAddResponse> {
        let name = request.into_inner().name;
        let header = self.change(AuthRequest::RoleAdd { name }).await?;
        Ok(GrpcResponse::new(pb::AuthRoleAddResponse { header }))
    }

    async fn role_get(
        &self,
        request: GrpcRequest<pb::AuthRoleGetRequest>,
    ) -> Answer<pb::AuthRoleGetResponse> {
        let name = request.into_inner().role;
        let records = self.backend.auth_records();
        let permissions = records
            .roles
            .get(&name)
            .ok_or_else(|| Status::failed_precondition("etcdserver: role name not found"))?;
        Ok(GrpcResponse::new(pb::AuthRoleGetResponse {
            header: self.header()?,
            perm: permissions.iter().map(permission_message).collect(),
        }))
    }

    async fn role_list(
        &self,
        _request: GrpcRequest<pb::AuthRoleListRequest>,
    ) -> Answer<pb::AuthRoleListResponse> {
        let records = self.backend.auth_records();
        Ok(GrpcResponse::new(pb::AuthRoleListResponse {
            header: self.header()?,
            roles: records.roles.keys().cloned().collect(),
        }))
    }

    async fn role_delete(
        &self,
        request: GrpcRequest<pb::AuthRoleDeleteRequest>,
    ) -> Answer<pb::AuthRoleDeleteResponse> {
        let name = request.into_inner().role;
        let header = self.change(AuthRequest::RoleDelete { name }).await?;
        Ok(GrpcResponse::new(pb::AuthRoleDeleteResponse { header }))
    }

    async fn role_grant_permission(
        &self,
        request: GrpcRequest<pb::AuthRoleGrantPermissionRequest>,
    ) -> Answer<pb::AuthRoleGrantPermissionResponse> {
        let request = request.into_inner();
        let permission = request
            .perm
            .ok_or_else(|| Status::invalid_argument("etcdserver: permission not given"))?;
        let kind = match authpb::permission::Type::try_from(permission.perm_type) {
            Ok(authpb::permission::Type::Read) => PermissionKind::Read,
            Ok(authpb::permission::Type::Write) => PermissionKind::Write,
            Ok(authpb::permission::Type::Readwrite) => PermissionKind::ReadWrite,
            Err(_) => {
                return Err(Status::invalid_argument(
                    "etcdserver: invalid permission type",
                ))
            }
        };
        let keys = permission_keys(permission.key, permission.range_end)?;
        let change = AuthRequest::RoleGrantPermission {
            role: request.name,
            permission: Permission { kind, keys },
        };
        let header = self.change(change).await?;
        Ok(GrpcResponse::new(pb::AuthRoleGrantPermissionResponse {
            header,
        }))
    }

    async fn role_revoke_permission(
        &self,
        request: GrpcRequest<pb::AuthRoleRevokePermissionRequest>,
    ) -> Answer<pb::AuthRoleRevokePermissionResponse> {
        let request = request.into_inner();
        let keys = permission_keys(request.key, request.range_end)?;
        let change = AuthRequest::RoleRevokePermission {
            role: request.role,
            keys,
        };
        let header = self.change(change).await?;
        Ok(GrpcResponse::new(pb::AuthRoleRevokePermissionResponse {
            header,
        }))
    }
}
