//! Password hashes with argon2id (the `argon2` crate's defaults, OWASP's recommendation), stored
//! as PHC strings so each hash carries its own parameters and salt: a later change of parameters
//! still verifies old hashes.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use super::AuthError;

/// The longest password accepted, in bytes: hashing is deliberately slow, and a bound keeps a
/// huge password from costing more than the hash's own work.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// Hashes `password` with a fresh random salt.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    check_length(password)?;
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| AuthError::Internal(format!("hashing a password failed: {error}")))
}

/// Checks `password` against a stored hash; a malformed stored hash is an internal error, a wrong
/// password is [`AuthError::BadCredentials`].
pub fn verify_password(password: &str, stored_hash: &str) -> Result<(), AuthError> {
    check_length(password).map_err(|_| AuthError::BadCredentials)?;
    let parsed = PasswordHash::new(stored_hash).map_err(|error| {
        AuthError::Internal(format!("a stored password hash is malformed: {error}"))
    })?;
    Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .map_err(|_| AuthError::BadCredentials)
}

/// Runs slow password work (an argon2 hash or check) on a blocking thread, at most as many at
/// once as `permits` holds; a caller waits at most `wait` for its turn, then gets `503
/// unavailable`. The HTTP and gRPC front-ends share it, so both bound the same way.
pub async fn run_password_work<T: Send + 'static>(
    permits: &std::sync::Arc<tokio::sync::Semaphore>,
    wait: std::time::Duration,
    work: impl FnOnce() -> Result<T, crate::error::NodeError> + Send + 'static,
) -> Result<T, crate::error::NodeError> {
    use crate::error::NodeError;
    let permit = tokio::time::timeout(wait, permits.clone().acquire_owned())
        .await
        .map_err(|_| NodeError::Unavailable {
            reason: "too many password checks at once".into(),
            retry_after: std::time::Duration::from_secs(1),
        })?
        .map_err(|_| NodeError::Internal("the password-check semaphore closed".into()))?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
    .map_err(|error| NodeError::Internal(format!("a password check failed: {error}")))?
}

fn check_length(password: &str) -> Result<(), AuthError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AuthError::Internal(format!(
            "a password is at most {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_right_password_verifies_and_a_wrong_one_does_not() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert_eq!(verify_password("correct horse", &hash), Ok(()));
        assert_eq!(
            verify_password("correct horsE", &hash),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn two_hashes_of_one_password_differ_by_their_salt() {
        assert_ne!(
            hash_password("same").unwrap(),
            hash_password("same").unwrap()
        );
    }

    #[test]
    fn a_malformed_stored_hash_is_an_internal_error_not_a_match() {
        assert!(matches!(
            verify_password("anything", "not a phc string"),
            Err(AuthError::Internal(_))
        ));
    }

    #[test]
    fn an_oversized_password_is_refused_before_hashing() {
        let huge = "x".repeat(MAX_PASSWORD_BYTES + 1);
        assert!(hash_password(&huge).is_err());
        let hash = hash_password("short").unwrap();
        assert_eq!(
            verify_password(&huge, &hash),
            Err(AuthError::BadCredentials)
        );
    }
}
