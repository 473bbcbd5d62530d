//! etcd's auth model in the store (issue 15): who may do what (`access`: permissions on key
//! ranges, merged per user) and the replicated records that say which users and roles exist
//! (`records`); what each request needs is `crate::required_access`, beside this module. Plain
//! data and pure functions: the MVCC store keeps the records in its meta table and applies
//! `Request::Auth`; the front-ends authenticate callers and ask whether a request is allowed.

mod access;
mod records;

pub use access::{Access, AccessRules, Permission, PermissionKind, ROOT_ROLE};
pub use records::{
    is_bcrypt_hash, AuthRequest, AuthState, User, MAX_AUTH_RECORD_BYTES, MAX_NAME_BYTES,
    MAX_PASSWORD_HASH_BYTES, MAX_PERMISSIONS_PER_ROLE, MAX_ROLES, MAX_ROLES_PER_USER, MAX_USERS,
    ROOT_USER, TOKEN_KEY_BYTES,
};
