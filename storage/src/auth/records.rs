//! The replicated auth records (issue 15): users with their password hashes and roles, roles
//! with their permissions, whether auth is enabled, and the key that signs tokens. They change
//! only through `Request::Auth`, applied by every member in log order, so every member holds the
//! same records and reaches the same decision on every request.
//!
//! The rules follow etcd's auth store: auth can be enabled only once a `root` user holding the
//! `root` role exists; while it is enabled, neither that user nor that role nor that grant can be
//! removed (no one could administer the cluster again); deleting a role takes it from every user.
//! Every change bumps the auth revision. Everything is bounded (`MAX_USERS`, `MAX_ROLES`, ...),
//! because the records are one meta-table value read on every auth change.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::access::{AccessRules, Permission, ROOT_ROLE};
use crate::error::Rejection;
use crate::key_range::KeyRange;
use crate::limits::Limits;

/// The user that may enable auth and administer the cluster, as in etcd.
pub const ROOT_USER: &str = "root";

/// Most users; one more is refused.
pub const MAX_USERS: usize = 1024;
/// Most roles; one more is refused.
pub const MAX_ROLES: usize = 1024;
/// Most roles one user holds.
pub const MAX_ROLES_PER_USER: usize = 64;
/// Most permissions one role holds.
pub const MAX_PERMISSIONS_PER_ROLE: usize = 1024;
/// Longest user or role name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest stored password hash (an argon2id PHC string is about 100 bytes).
pub const MAX_PASSWORD_HASH_BYTES: usize = 512;
/// Largest encoded size of all the records together (the other limits alone would allow
/// gigabytes of permission keys); a change that would pass it is refused (by the store, which
/// measures the encoding: `mvcc/auth_record.rs`). It keeps the record one bounded meta-table value
/// and one snapshot frame.
pub const MAX_AUTH_RECORD_BYTES: usize = 16 * 1024 * 1024;
/// The token signing key's length range, in bytes.
pub const TOKEN_KEY_BYTES: std::ops::RangeInclusive<usize> = 32..=64;

/// One user: the argon2 hash of its password (never the password) and the roles it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub password_hash: String,
    pub roles: BTreeSet<String>,
}

/// Every auth record of the store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthState {
    pub enabled: bool,
    /// Bumped by every applied change (etcd's auth revision).
    pub revision: u64,
    pub users: BTreeMap<String, User>,
    pub roles: BTreeMap<String, Vec<Permission>>,
    /// The HS256 key tokens are signed with, chosen by the member that proposed the enable, so
    /// that any member checks any member's token without a round trip. A new key on every enable
    /// ends every token handed out before.
    #[serde(with = "serde_bytes")]
    pub token_key: Vec<u8>,
}

/// A change to the auth records, replicated like any other request. Passwords arrive already
/// hashed (by the member that proposed the change), so applying is cheap and deterministic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthRequest {
    Enable {
        #[serde(with = "serde_bytes")]
        token_key: Vec<u8>,
    },
    Disable,
    UserAdd {
        name: String,
        password_hash: String,
    },
    UserDelete {
        name: String,
    },
    UserChangePassword {
        name: String,
        password_hash: String,
    },
    UserGrantRole {
        user: String,
        role: String,
    },
    UserRevokeRole {
        user: String,
        role: String,
    },
    RoleAdd {
        name: String,
    },
    RoleDelete {
        name: String,
    },
    /// Grants `permission`; a permission on exactly the same keys is replaced (as in etcd).
    RoleGrantPermission {
        role: String,
        permission: Permission,
    },
    /// Revokes the permission on exactly `keys`.
    RoleRevokePermission {
        role: String,
        keys: KeyRange,
    },
}

impl AuthRequest {
    /// The change's name as etcd's API names it, for logs and metrics; never a name or a secret.
    pub fn kind_name(&self) -> &'static str {
        match self {
            AuthRequest::Enable { .. } => "enable",
            AuthRequest::Disable => "disable",
            AuthRequest::UserAdd { .. } => "user add",
            AuthRequest::UserDelete { .. } => "user delete",
            AuthRequest::UserChangePassword { .. } => "user change password",
            AuthRequest::UserGrantRole { .. } => "user grant role",
            AuthRequest::UserRevokeRole { .. } => "user revoke role",
            AuthRequest::RoleAdd { .. } => "role add",
            AuthRequest::RoleDelete { .. } => "role delete",
            AuthRequest::RoleGrantPermission { .. } => "role grant permission",
            AuthRequest::RoleRevokePermission { .. } => "role revoke permission",
        }
    }
}

impl AuthState {
    /// What `user` may do, or None when there is no such user. A role the user holds but that no
    /// longer exists grants nothing; the `root` role grants everything.
    pub fn access_rules_of(&self, user: &str) -> Option<AccessRules> {
        let held = &self.users.get(user)?.roles;
        let no_permissions: &[Permission] = &[];
        let roles = held.iter().map(|role| {
            let permissions = self.roles.get(role).map_or(no_permissions, Vec::as_slice);
            (role.as_str(), permissions)
        });
        Some(AccessRules::of_roles(roles))
    }

    /// Applies `change`, or refuses it and changes nothing.
    pub fn apply(&mut self, change: &AuthRequest, limits: &Limits) -> Result<(), Rejection> {
        let mut changed = self.clone();
        changed.apply_in_place(change, limits)?;
        if !self.repeats_enable_or_disable(change) {
            changed.revision += 1;
        }
        debug_assert!(changed.holds_invariants());
        *self = changed;
        Ok(())
    }

    fn apply_in_place(&mut self, change: &AuthRequest, limits: &Limits) -> Result<(), Rejection> {
        match change {
            AuthRequest::Enable { token_key } => self.enable(token_key),
            AuthRequest::Disable => {
                self.enabled = false;
                self.token_key.clear();
                Ok(())
            }
            AuthRequest::UserAdd {
                name,
                password_hash,
            } => self.add_user(name, password_hash),
            AuthRequest::UserDelete { name } => {
                self.refuse_if_locking_out(name == ROOT_USER, "delete the root user")?;
                self.users
                    .remove(name)
                    .ok_or_else(|| user_not_found(name))?;
                Ok(())
            }
            AuthRequest::UserChangePassword {
                name,
                password_hash,
            } => {
                check_password_hash(password_hash)?;
                self.user_mut(name)?.password_hash = password_hash.clone();
                Ok(())
            }
            AuthRequest::UserGrantRole { user, role } => self.grant_role(user, role),
            AuthRequest::UserRevokeRole { user, role } => self.revoke_role(user, role),
            AuthRequest::RoleAdd { name } => self.add_role(name),
            AuthRequest::RoleDelete { name } => self.delete_role(name),
            AuthRequest::RoleGrantPermission { role, permission } => {
                self.grant_permission(role, permission, limits)
            }
            AuthRequest::RoleRevokePermission { role, keys } => {
                let permissions = self.role_mut(role)?;
                let before = permissions.len();
                permissions.retain(|permission| permission.keys != *keys);
                if permissions.len() == before {
                    return Err(Rejection::AuthRecord(format!(
                        "role {role} has no permission on exactly that key range"
                    )));
                }
                Ok(())
            }
        }
    }

    /// An enable of an enabled store or a disable of a disabled one: etcd ignores those and
    /// leaves its auth revision alone, and so does revkv (filling in a missing token key included).
    fn repeats_enable_or_disable(&self, change: &AuthRequest) -> bool {
        match change {
            AuthRequest::Enable { .. } => self.enabled,
            AuthRequest::Disable => !self.enabled,
            _ => false,
        }
    }

    fn enable(&mut self, token_key: &[u8]) -> Result<(), Rejection> {
        if !TOKEN_KEY_BYTES.contains(&token_key.len()) {
            return Err(Rejection::Invalid(format!(
                "a token key is {TOKEN_KEY_BYTES:?} bytes long"
            )));
        }
        let root_holds_root = self
            .users
            .get(ROOT_USER)
            .is_some_and(|root| root.roles.contains(ROOT_ROLE));
        if !root_holds_root {
            return Err(Rejection::AuthRecord(
                "auth can be enabled only once a root user holding the root role exists".into(),
            ));
        }
        // Enabling twice keeps the first key, so tokens handed out since stay valid (etcd's
        // enable is idempotent too). A store restored from etcd is enabled without a key; the
        // first enable applied after the restore gives it one.
        if !self.enabled || self.token_key.is_empty() {
            self.enabled = true;
            self.token_key = token_key.to_vec();
        }
        Ok(())
    }

    fn add_user(&mut self, name: &str, password_hash: &str) -> Result<(), Rejection> {
        check_name("user", name)?;
        check_password_hash(password_hash)?;
        if self.users.contains_key(name) {
            return Err(Rejection::AuthRecord(format!("user {name} already exists")));
        }
        if self.users.len() >= MAX_USERS {
            return Err(Rejection::Invalid(format!(
                "{MAX_USERS} users exist, the limit"
            )));
        }
        let user = User {
            password_hash: password_hash.to_string(),
            roles: BTreeSet::new(),
        };
        self.users.insert(name.to_string(), user);
        Ok(())
    }

    fn grant_role(&mut self, user: &str, role: &str) -> Result<(), Rejection> {
        // The root role need not be added first: it is built in (etcd lets it be granted too).
        if role != ROOT_ROLE && !self.roles.contains_key(role) {
            return Err(role_not_found(role));
        }
        let roles = &mut self.user_mut(user)?.roles;
        if !roles.contains(role) && roles.len() >= MAX_ROLES_PER_USER {
            return Err(Rejection::Invalid(format!(
                "user {user} holds {MAX_ROLES_PER_USER} roles, the limit"
            )));
        }
        roles.insert(role.to_string());
        Ok(())
    }

    fn revoke_role(&mut self, user: &str, role: &str) -> Result<(), Rejection> {
        let locks_out = user == ROOT_USER && role == ROOT_ROLE;
        self.refuse_if_locking_out(locks_out, "take the root role from the root user")?;
        if !self.user_mut(user)?.roles.remove(role) {
            return Err(Rejection::AuthRecord(format!(
                "user {user} does not hold role {role}"
            )));
        }
        Ok(())
    }

    fn add_role(&mut self, name: &str) -> Result<(), Rejection> {
        check_name("role", name)?;
        if self.roles.contains_key(name) {
            return Err(Rejection::AuthRecord(format!("role {name} already exists")));
        }
        if self.roles.len() >= MAX_ROLES {
            return Err(Rejection::Invalid(format!(
                "{MAX_ROLES} roles exist, the limit"
            )));
        }
        self.roles.insert(name.to_string(), Vec::new());
        Ok(())
    }

    fn delete_role(&mut self, name: &str) -> Result<(), Rejection> {
        self.refuse_if_locking_out(name == ROOT_ROLE, "delete the root role")?;
        self.roles
            .remove(name)
            .ok_or_else(|| role_not_found(name))?;
        for user in self.users.values_mut() {
            user.roles.remove(name);
        }
        Ok(())
    }

    fn grant_permission(
        &mut self,
        role: &str,
        permission: &Permission,
        limits: &Limits,
    ) -> Result<(), Rejection> {
        limits.check_key(&permission.keys.start)?;
        let permissions = self.role_mut(role)?;
        if let Some(same_keys) = permissions
            .iter_mut()
            .find(|granted| granted.keys == permission.keys)
        {
            same_keys.kind = permission.kind;
            return Ok(());
        }
        if permissions.len() >= MAX_PERMISSIONS_PER_ROLE {
            return Err(Rejection::Invalid(format!(
                "role {role} holds {MAX_PERMISSIONS_PER_ROLE} permissions, the limit"
            )));
        }
        // Kept in key order, as etcd keeps a role's permissions, so a role reads back alike on
        // both and an etcd snapshot of it holds them in etcd's order.
        let position =
            permissions.partition_point(|granted| granted.keys.start <= permission.keys.start);
        permissions.insert(position, permission.clone());
        Ok(())
    }

    /// While auth is enabled, a change that would leave no root user holding the root role is
    /// refused, as etcd refuses it.
    fn refuse_if_locking_out(&self, locks_out: bool, what: &str) -> Result<(), Rejection> {
        if self.enabled && locks_out {
            return Err(Rejection::AuthRecord(format!(
                "cannot {what} while auth is enabled"
            )));
        }
        Ok(())
    }

    fn user_mut(&mut self, name: &str) -> Result<&mut User, Rejection> {
        self.users.get_mut(name).ok_or_else(|| user_not_found(name))
    }

    fn role_mut(&mut self, name: &str) -> Result<&mut Vec<Permission>, Rejection> {
        self.roles.get_mut(name).ok_or_else(|| role_not_found(name))
    }

    /// The records' invariants: within every limit, and enabled only with a root user holding the
    /// root role and a token key, or no key yet (a store restored from etcd, until its first
    /// sign-in proposes one).
    pub fn holds_invariants(&self) -> bool {
        let within_limits = self.users.len() <= MAX_USERS
            && self.roles.len() <= MAX_ROLES
            && self
                .users
                .values()
                .all(|user| user.roles.len() <= MAX_ROLES_PER_USER)
            && self
                .roles
                .values()
                .all(|permissions| permissions.len() <= MAX_PERMISSIONS_PER_ROLE);
        let root_in_place = self
            .users
            .get(ROOT_USER)
            .is_some_and(|root| root.roles.contains(ROOT_ROLE));
        let key_sound =
            self.token_key.is_empty() || TOKEN_KEY_BYTES.contains(&self.token_key.len());
        let enabled_soundly = !self.enabled || (root_in_place && key_sound);
        within_limits && enabled_soundly
    }
}

fn check_name(kind: &str, name: &str) -> Result<(), Rejection> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(Rejection::Invalid(format!(
            "a {kind} name is 1 to {MAX_NAME_BYTES} bytes long"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(Rejection::Invalid(format!(
            "a {kind} name must not hold control characters"
        )));
    }
    Ok(())
}

/// Whether a stored password hash is bcrypt (`$2a$` and its variants), the only kind etcd
/// checks; revkv's own are argon2id PHC strings unless a member hashes with bcrypt.
pub fn is_bcrypt_hash(password_hash: &str) -> bool {
    password_hash.starts_with("$2")
}

fn check_password_hash(password_hash: &str) -> Result<(), Rejection> {
    if password_hash.is_empty() || password_hash.len() > MAX_PASSWORD_HASH_BYTES {
        return Err(Rejection::Invalid("malformed password hash".into()));
    }
    Ok(())
}

fn user_not_found(name: &str) -> Rejection {
    Rejection::AuthRecordNotFound(format!("user {name} does not exist"))
}

fn role_not_found(name: &str) -> Rejection {
    Rejection::AuthRecordNotFound(format!("role {name} does not exist"))
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
