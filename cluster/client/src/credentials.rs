//! Calls as a user, when the cluster has auth enabled: the client trades its user name and
//! password for a token (`POST /v1/auth/authenticate`) before its first call, sends it on every
//! call as `Authorization: Bearer`, and, when a member answers `401` (the token expired, or auth
//! was re-enabled with a new key), authenticates once more and repeats the call. Repeating is
//! safe even for writes: a `401` means the member refused the request before doing anything.
//!
//! Credentials against a cluster whose auth is off are not an error, as with etcd's own client:
//! the member answers that auth is not enabled, and the client carries on without a token until a
//! member answers `401` (auth was enabled meanwhile, perhaps by this very client's `auth enable`).
//!
//! This file holds the user and the token cache; the calls that authenticate are the transport's
//! (`transport/authentication.rs`), so the transport depends on this file and not the reverse.

use std::sync::atomic::AtomicBool;
use std::sync::RwLock;

use super::error::ClientError;

/// A user name and password (etcdctl's `--user NAME:PASSWORD`).
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password never reaches a log.
        formatter
            .debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Parses etcdctl's `NAME:PASSWORD` (the password may hold colons; the name may not).
    pub fn parse(text: &str) -> Result<Credentials, ClientError> {
        match text.split_once(':') {
            Some((user, password)) if !user.is_empty() => Ok(Credentials {
                user: user.to_string(),
                password: password.to_string(),
            }),
            _ => Err(ClientError::Invalid {
                message: "credentials are NAME:PASSWORD".into(),
            }),
        }
    }
}

/// The message a member answers `authenticate` with while auth is off (`400 invalid`; the text is
/// `node/src/auth/authenticate.rs`'s, and `node/bin/tests/ctl.rs` checks the two still meet).
/// The credentials of a client and the token they last bought.
#[derive(Default)]
pub struct TokenCache {
    pub(crate) credentials: Option<Credentials>,
    token: RwLock<Option<String>>,
    /// A member said auth is off: calls go without a token until one answers `401`.
    pub(crate) auth_off: AtomicBool,
}

impl TokenCache {
    pub fn new(credentials: Option<Credentials>) -> TokenCache {
        TokenCache {
            credentials,
            token: RwLock::new(None),
            auth_off: AtomicBool::new(false),
        }
    }

    /// The token to send, if any.
    pub fn current(&self) -> Option<String> {
        self.token
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn replace(&self, token: Option<String>) {
        *self
            .token
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = token;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_name_colon_password_and_never_printed() {
        let credentials = Credentials::parse("app:pass:word").unwrap();
        assert_eq!(credentials.user, "app");
        assert_eq!(credentials.password, "pass:word");
        assert!(!format!("{credentials:?}").contains("pass:word"));
        assert!(Credentials::parse(":secret").is_err());
        assert!(Credentials::parse("nocolon").is_err());
    }
}
