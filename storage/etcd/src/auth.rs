//! etcd's auth buckets and revkv's auth records, both ways. etcd keeps whether auth is enabled
//! and its auth revision in `auth`, one `authpb.User` per user in `authUsers` and one
//! `authpb.Role` per role in `authRoles`, each keyed by its name. revkv keeps the same things in
//! one `AuthState`, so the mapping is one to one except for two things:
//!
//! - Password hashes: etcd stores bcrypt, revkv argon2id unless a member runs with
//!   `--password-hash bcrypt`. revkv checks bcrypt hashes, so users come in with their
//!   passwords; etcd checks only bcrypt, so a store holding an argon2 hash is refused on the way
//!   out, naming the users, rather than written with passwords nobody could use.
//! - The token key: etcd's simple tokens need none, so a store comes in without one and its
//!   first sign-in proposes one (`revkv_node::auth::authenticate::records_with_token_key`); etcd
//!   does not take revkv's.
//!
//! A user without a password (etcd's `--no-password`) is an empty hash in revkv.

use std::collections::BTreeSet;

use prost::Message;
use revkv_storage::auth::{
    is_bcrypt_hash, AuthState, Permission, PermissionKind, User, MAX_AUTH_RECORD_BYTES,
    MAX_NAME_BYTES, MAX_PERMISSIONS_PER_ROLE, MAX_ROLES, MAX_ROLES_PER_USER, MAX_USERS,
};
use revkv_storage::{KeyRange, RangeEnd};

use crate::error::{EtcdSnapshotError, Result};
use crate::layout;
use crate::messages;

/// The raw entries of etcd's three auth buckets, as read from a file or to be written to one:
/// `(name, encoded message)` in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdAuthBuckets {
    /// `auth`: `authEnabled` and `authRevision`.
    pub auth: Vec<(Vec<u8>, Vec<u8>)>,
    pub users: Vec<(Vec<u8>, Vec<u8>)>,
    pub roles: Vec<(Vec<u8>, Vec<u8>)>,
}

/// revkv's auth records from etcd's buckets, or None when they hold nothing at all. Refuses
/// anything revkv could not enforce the same way: a malformed entry, a name or count past
/// revkv's limits, or auth enabled without a root user holding the root role.
pub fn auth_state_from_etcd(buckets: &EtcdAuthBuckets) -> Result<Option<AuthState>> {
    let mut state = AuthState::default();
    for (key, value) in &buckets.auth {
        match key.as_slice() {
            key if key == layout::AUTH_ENABLED.as_bytes() => state.enabled = value == &[1],
            key if key == layout::AUTH_REVISION.as_bytes() => {
                state.revision = <[u8; 8]>::try_from(value.as_slice())
                    .map(u64::from_be_bytes)
                    .map_err(|_| bad_entry(layout::AUTH_BUCKET, key, "not an 8-byte revision"))?;
            }
            // etcd 3.5 keeps nothing else here; anything more is not read.
            _ => {}
        }
    }
    refuse_more_than(layout::AUTH_USERS_BUCKET, buckets.users.len(), MAX_USERS)?;
    refuse_more_than(layout::AUTH_ROLES_BUCKET, buckets.roles.len(), MAX_ROLES)?;
    for (key, value) in &buckets.users {
        let (name, user) = user_from_etcd(key, value)?;
        state.users.insert(name, user);
    }
    for (key, value) in &buckets.roles {
        let (name, permissions) = role_from_etcd(key, value)?;
        state.roles.insert(name, permissions);
    }
    let encoded_bytes = revkv_storage::codec::encode(&state)
        .map_err(|error| EtcdSnapshotError::Unsupported(format!("auth does not encode: {error}")))?
        .len();
    if encoded_bytes > MAX_AUTH_RECORD_BYTES {
        return Err(EtcdSnapshotError::Unsupported(format!(
            "its users and roles take {encoded_bytes} bytes, past revkv's limit of \
             {MAX_AUTH_RECORD_BYTES}"
        )));
    }
    if !state.holds_invariants() {
        return Err(EtcdSnapshotError::Unsupported(
            "auth is enabled, but no root user holds the root role".into(),
        ));
    }
    Ok((state != AuthState::default()).then_some(state))
}

fn user_from_etcd(key: &[u8], value: &[u8]) -> Result<(String, User)> {
    let bucket = layout::AUTH_USERS_BUCKET;
    let user = messages::User::decode(value)
        .map_err(|error| bad_entry(bucket, key, &error.to_string()))?;
    let name = checked_name(bucket, key, &user.name)?;
    let no_password = user.options.is_some_and(|options| options.no_password);
    let password_hash = String::from_utf8(user.password)
        .ok()
        .filter(|hash| (no_password && hash.is_empty()) || is_bcrypt_hash(hash))
        .ok_or_else(|| bad_entry(bucket, key, "the password is not a bcrypt hash"))?;
    refuse_more_than(bucket, user.roles.len(), MAX_ROLES_PER_USER)?;
    let roles: BTreeSet<String> = user.roles.into_iter().collect();
    Ok((
        name,
        User {
            password_hash,
            roles,
        },
    ))
}

fn role_from_etcd(key: &[u8], value: &[u8]) -> Result<(String, Vec<Permission>)> {
    let bucket = layout::AUTH_ROLES_BUCKET;
    let role = messages::Role::decode(value)
        .map_err(|error| bad_entry(bucket, key, &error.to_string()))?;
    let name = checked_name(bucket, key, &role.name)?;
    refuse_more_than(bucket, role.key_permission.len(), MAX_PERMISSIONS_PER_ROLE)?;
    let permissions = role
        .key_permission
        .into_iter()
        .map(|permission| {
            let kind = match permission.perm_type {
                0 => PermissionKind::Read,
                1 => PermissionKind::Write,
                2 => PermissionKind::ReadWrite,
                other => return Err(bad_entry(bucket, key, &format!("permission type {other}"))),
            };
            let end = match permission.range_end.as_slice() {
                [] => RangeEnd::Single,
                [0] => RangeEnd::Unbounded,
                end => RangeEnd::Until(end.to_vec()),
            };
            let keys = KeyRange {
                start: permission.key,
                end,
            };
            Ok(Permission { kind, keys })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((name, permissions))
}

/// A user or role name: the entry's key and the message's own name agree, and it is a name
/// revkv takes (1 to `MAX_NAME_BYTES` bytes of UTF-8 without control characters).
fn checked_name(bucket: &'static str, key: &[u8], name: &[u8]) -> Result<String> {
    let sound = key == name && !name.is_empty() && name.len() <= MAX_NAME_BYTES;
    std::str::from_utf8(name)
        .ok()
        .filter(|name| sound && !name.chars().any(char::is_control))
        .map(str::to_string)
        .ok_or_else(|| {
            bad_entry(
                bucket,
                key,
                "not a name revkv takes, or not the entry's key",
            )
        })
}

/// Why etcd could not take `auth` as it is, or None when it can: the users whose password
/// hashes etcd cannot check.
pub fn etcd_refusal(auth: &AuthState) -> Option<String> {
    let unchecked: Vec<&str> = auth
        .users
        .iter()
        .filter(|(_, user)| !user.password_hash.is_empty() && !is_bcrypt_hash(&user.password_hash))
        .map(|(name, _)| name.as_str())
        .collect();
    if unchecked.is_empty() {
        return None;
    }
    const NAMED: usize = 5;
    let mut names = unchecked[..unchecked.len().min(NAMED)].join(", ");
    if unchecked.len() > NAMED {
        names.push_str(&format!(" and {} more", unchecked.len() - NAMED));
    }
    Some(format!(
        "the passwords of {names} are argon2 hashes, which etcd cannot check; set them again \
         through a member started with --password-hash bcrypt (or delete those users), then save \
         again"
    ))
}

/// etcd's auth buckets for `auth`, or the refusal of `etcd_refusal`.
pub fn etcd_buckets_of(auth: &AuthState) -> Result<EtcdAuthBuckets> {
    if let Some(refusal) = etcd_refusal(auth) {
        return Err(EtcdSnapshotError::Unsupported(refusal));
    }
    let auth_bucket = vec![
        (
            layout::AUTH_ENABLED.as_bytes().to_vec(),
            vec![u8::from(auth.enabled)],
        ),
        (
            layout::AUTH_REVISION.as_bytes().to_vec(),
            auth.revision.to_be_bytes().to_vec(),
        ),
    ];
    let users = auth
        .users
        .iter()
        .map(|(name, user)| {
            let message = messages::User {
                name: name.as_bytes().to_vec(),
                password: user.password_hash.as_bytes().to_vec(),
                roles: user.roles.iter().cloned().collect(),
                options: user
                    .password_hash
                    .is_empty()
                    .then_some(messages::UserAddOptions { no_password: true }),
            };
            (name.as_bytes().to_vec(), message.encode_to_vec())
        })
        .collect();
    let roles = auth
        .roles
        .iter()
        .map(|(name, permissions)| {
            let message = messages::Role {
                name: name.as_bytes().to_vec(),
                key_permission: permissions.iter().map(etcd_permission).collect(),
            };
            (name.as_bytes().to_vec(), message.encode_to_vec())
        })
        .collect();
    let mut buckets = EtcdAuthBuckets {
        auth: auth_bucket,
        users,
        roles,
    };
    buckets.auth.sort();
    Ok(buckets)
}

fn etcd_permission(permission: &Permission) -> messages::Permission {
    let perm_type = match permission.kind {
        PermissionKind::Read => 0,
        PermissionKind::Write => 1,
        PermissionKind::ReadWrite => 2,
    };
    let range_end = match &permission.keys.end {
        RangeEnd::Single => Vec::new(),
        RangeEnd::Until(end) => end.clone(),
        RangeEnd::Unbounded => vec![0],
    };
    messages::Permission {
        perm_type,
        key: permission.keys.start.clone(),
        range_end,
    }
}

fn refuse_more_than(bucket: &'static str, count: usize, limit: usize) -> Result<()> {
    if count > limit {
        return Err(EtcdSnapshotError::Unsupported(format!(
            "{bucket} holds {count} entries in one place, past revkv's limit of {limit}"
        )));
    }
    Ok(())
}

fn bad_entry(bucket: &'static str, key: &[u8], what: &str) -> EtcdSnapshotError {
    EtcdSnapshotError::BadEntry {
        bucket,
        entry: String::from_utf8_lossy(key).into_owned(),
        what: what.to_string(),
    }
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
