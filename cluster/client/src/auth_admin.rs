//! Auth administration, etcdctl's `auth`, `user` and `role` verbs over `/v1/auth/...`: the
//! client must call as a root user once auth is enabled. Reads are repeated on another member
//! when a member fails; changes are writes, never repeated once their outcome is unknown (adding
//! a user twice would answer `invalid` the second time and hide the first success).

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ClientError;
use super::transport::Call;
use super::types::ResponseHeader;
use super::Client;

/// The answer of every auth change: the auth revision it produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthChangeResponse {
    pub header: ResponseHeader,
    pub auth_revision: u64,
}

/// `GET /v1/auth/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthStatusResponse {
    pub header: ResponseHeader,
    pub enabled: bool,
    pub auth_revision: u64,
}

/// `GET /v1/auth/users` and `GET /v1/auth/roles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamesResponse {
    pub header: ResponseHeader,
    pub names: Vec<String>,
}

/// `GET /v1/auth/users/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserResponse {
    pub header: ResponseHeader,
    pub name: String,
    pub roles: Vec<String>,
}

/// One permission of a role: `permission` is `read`, `write` or `readwrite`; no `range_end` is
/// `key` alone, `"\0"` every key from `key` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionEntry {
    pub permission: String,
    pub key: String,
    #[serde(default)]
    pub range_end: Option<String>,
}

/// `GET /v1/auth/roles/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleResponse {
    pub header: ResponseHeader,
    pub name: String,
    pub permissions: Vec<PermissionEntry>,
}

/// The keys a permission covers: one key, a prefix, or `[key, range_end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionKeys {
    Key(String),
    Prefix(String),
    Range { key: String, range_end: String },
}

impl PermissionKeys {
    fn json(&self) -> Value {
        match self {
            PermissionKeys::Key(key) => json!({ "key": key }),
            PermissionKeys::Prefix(key) => json!({ "key": key, "prefix": true }),
            PermissionKeys::Range { key, range_end } => {
                json!({ "key": key, "range_end": range_end })
            }
        }
    }
}

/// What a user or role name keeps unencoded in a path segment (a `/` in a name is encoded, so
/// it stays one segment).
const NAME_KEEP: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

fn segment(name: &str) -> String {
    utf8_percent_encode(name, NAME_KEEP).to_string()
}

impl Client {
    /// Whether auth is enabled (open to every caller).
    pub async fn auth_status(&self) -> Result<AuthStatusResponse, ClientError> {
        self.call_json(&Call::read("/v1/auth/status".into())).await
    }

    /// Enables auth; a `root` user holding the `root` role must exist.
    pub async fn auth_enable(&self) -> Result<AuthChangeResponse, ClientError> {
        self.auth_change(Method::POST, "/v1/auth/enable".into(), None)
            .await
    }

    pub async fn auth_disable(&self) -> Result<AuthChangeResponse, ClientError> {
        self.auth_change(Method::POST, "/v1/auth/disable".into(), None)
            .await
    }

    pub async fn user_add(
        &self,
        name: &str,
        password: &str,
    ) -> Result<AuthChangeResponse, ClientError> {
        let body = json!({ "password": password });
        let path = format!("/v1/auth/users/{}", segment(name));
        self.auth_change(Method::PUT, path, Some(body)).await
    }

    pub async fn user_delete(&self, name: &str) -> Result<AuthChangeResponse, ClientError> {
        let path = format!("/v1/auth/users/{}", segment(name));
        self.auth_change(Method::DELETE, path, None).await
    }

    pub async fn user_change_password(
        &self,
        name: &str,
        password: &str,
    ) -> Result<AuthChangeResponse, ClientError> {
        let body = json!({ "password": password });
        let path = format!("/v1/auth/users/{}/password", segment(name));
        self.auth_change(Method::POST, path, Some(body)).await
    }

    pub async fn user_list(&self) -> Result<NamesResponse, ClientError> {
        self.call_json(&Call::read("/v1/auth/users".into())).await
    }

    pub async fn user_get(&self, name: &str) -> Result<UserResponse, ClientError> {
        let path = format!("/v1/auth/users/{}", segment(name));
        self.call_json(&Call::read(path)).await
    }

    pub async fn user_grant_role(
        &self,
        user: &str,
        role: &str,
    ) -> Result<AuthChangeResponse, ClientError> {
        let path = format!("/v1/auth/users/{}/roles/{}", segment(user), segment(role));
        self.auth_change(Method::PUT, path, None).await
    }

    pub async fn user_revoke_role(
        &self,
        user: &str,
        role: &str,
    ) -> Result<AuthChangeResponse, ClientError> {
        let path = format!("/v1/auth/users/{}/roles/{}", segment(user), segment(role));
        self.auth_change(Method::DELETE, path, None).await
    }

    pub async fn role_add(&self, name: &str) -> Result<AuthChangeResponse, ClientError> {
        let path = format!("/v1/auth/roles/{}", segment(name));
        self.auth_change(Method::PUT, path, None).await
    }

    pub async fn role_delete(&self, name: &str) -> Result<AuthChangeResponse, ClientError> {
        let path = format!("/v1/auth/roles/{}", segment(name));
        self.auth_change(Method::DELETE, path, None).await
    }

    pub async fn role_list(&self) -> Result<NamesResponse, ClientError> {
        self.call_json(&Call::read("/v1/auth/roles".into())).await
    }

    pub async fn role_get(&self, name: &str) -> Result<RoleResponse, ClientError> {
        let path = format!("/v1/auth/roles/{}", segment(name));
        self.call_json(&Call::read(path)).await
    }

    /// Grants `permission` (`read`, `write` or `readwrite`) on `keys` to `role`.
    pub async fn role_grant_permission(
        &self,
        role: &str,
        permission: &str,
        keys: &PermissionKeys,
    ) -> Result<AuthChangeResponse, ClientError> {
        let mut body = keys.json();
        body["permission"] = json!(permission);
        let path = format!("/v1/auth/roles/{}/permissions", segment(role));
        self.auth_change(Method::POST, path, Some(body)).await
    }

    /// Revokes `role`'s permission on exactly `keys`.
    pub async fn role_revoke_permission(
        &self,
        role: &str,
        keys: &PermissionKeys,
    ) -> Result<AuthChangeResponse, ClientError> {
        let path = format!("/v1/auth/roles/{}/permissions", segment(role));
        self.auth_change(Method::DELETE, path, Some(keys.json()))
            .await
    }

    async fn auth_change(
        &self,
        method: Method,
        path: String,
        body: Option<Value>,
    ) -> Result<AuthChangeResponse, ClientError> {
        self.call_json(&Call::write(method, path, body)).await
    }
}
