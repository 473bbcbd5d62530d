//! Who is asking, once authenticated, and the checks every front-end asks of it. A `Caller` is
//! resolved once per request (HTTP: by the `http::auth_gate` middleware; gRPC: not yet, so the
//! gRPC port refuses every request while auth is enabled) and answers `forbidden` without naming
//! a key, so a refusal reveals nothing about what exists.

use std::sync::Arc;

use revkv_storage::auth::{Access, AccessRules};
use revkv_storage::required_access::Requirement;
use revkv_storage::KeyRange;

use crate::error::NodeError;

/// The caller of one request.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Auth is disabled: every request is allowed, as in etcd.
    Unrestricted,
    /// An authenticated user and what it may do (looked up from the records at this request).
    User(Arc<AuthenticatedUser>),
}

/// A user proven by its token, with the rules its roles grant now.
#[derive(Debug)]
pub struct AuthenticatedUser {
    pub name: String,
    pub rules: AccessRules,
}

impl Caller {
    /// Refuses with `forbidden` unless the caller meets `requirement`.
    pub fn require(&self, requirement: &Requirement) -> Result<(), NodeError> {
        match self {
            Caller::Unrestricted => Ok(()),
            Caller::User(user) if requirement.is_met_by(&user.rules) => Ok(()),
            Caller::User(_) => Err(forbidden()),
        }
    }

    /// Refuses with `forbidden` unless the caller may `access` every key of `keys`.
    pub fn require_keys(&self, access: Access, keys: &KeyRange) -> Result<(), NodeError> {
        self.require(&Requirement::Keys(vec![(access, keys.clone())]))
    }

    /// Refuses with `forbidden` unless the caller holds the root role.
    pub fn require_root(&self) -> Result<(), NodeError> {
        self.require(&Requirement::Root)
    }

    /// True when nothing is refused to this caller (auth disabled, or a root user).
    pub fn is_unrestricted(&self) -> bool {
        match self {
            Caller::Unrestricted => true,
            Caller::User(user) => user.rules.is_root(),
        }
    }
}

/// The one refusal of an authenticated caller: it names no key and no permission.
pub fn forbidden() -> NodeError {
    NodeError::Forbidden("the user lacks the permission this request needs".into())
}
