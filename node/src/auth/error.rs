//! The auth layer's one error enum, and how it becomes a node error. Its own module so that the
//! parts of auth (`authenticate.rs`, `password.rs`, `token.rs`) and the module that re-exports
//! them share it without importing each other.

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
