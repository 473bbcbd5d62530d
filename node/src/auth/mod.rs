//! Authentication for the front-ends (issue 15): password hashes (`password`) and the signed
//! tokens `POST /v1/auth/authenticate` will hand out (`token`). Who may do what is decided by the
//! store's access model (`revkv_storage::auth`); this module only proves who is asking.
//!
//! Not wired yet: users, roles and the token key are not in the replicated store, and no route
//! checks a token. These are the pieces those steps will use, each tested on its own.

pub mod password;
pub mod token;

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
