//! Authentication and authorization for the front-ends (issue 15): password hashes (`password`),
//! the signed tokens `POST /v1/auth/authenticate` hands out (`token`), proving who is asking from
//! a bearer token and the replicated records (`authenticate`), who that is (`caller`), and a
//! backend wrapper that checks every request a handler makes on the caller's behalf
//! (`checked_backend`). What each request needs is decided by the store's access model
//! (`revkv_storage::auth`); this module proves who is asking and enforces it.

pub mod authenticate;
pub mod caller;
pub mod checked_backend;
pub mod password;
pub mod token;

pub use authenticate::{authenticate_bearer, AuthOptions};
pub use caller::{AuthenticatedUser, Caller};
pub use checked_backend::CheckedBackend;

/// Why a caller could not be authenticated. Messages never name a user that does not exist or
/// say which part of a credential was wrong, so a refusal reveals nothing.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("authentication failed: invalid user name or password")]
    BadCredentials,
    #[error("authentication failed: the token is invalid")]
    InvalidToken,
    #[error("authentication failed: the token has expired")]
    ExpiredToken,
    #[error("internal error in authentication: {0}")]
    Internal(String),
}

impl From<AuthError> for crate::error::NodeError {
    fn from(error: AuthError) -> Self {
        match error {
            AuthError::Internal(message) => crate::error::NodeError::Internal(message),
            refusal => crate::error::NodeError::Unauthenticated(refusal.to_string()),
        }
    }
}
