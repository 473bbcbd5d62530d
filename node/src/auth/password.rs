//! Password hashes. New ones are argon2id by default (the `argon2` crate's defaults, OWASP's
//! recommendation), stored as PHC strings so each hash carries its own parameters and salt; a
//! member started with `--password-hash bcrypt` writes bcrypt hashes as etcd does, so that an
//! etcd-format snapshot of the store keeps every password etcd can check. A stored hash names its
//! own scheme, so a member checks both kinds: bcrypt hashes arrive from etcd snapshots too. An
//! empty stored hash is a user without a password (etcd's `--no-password`), whom no password
//! signs in.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use revkv_storage::auth::is_bcrypt_hash;

use super::AuthError;

/// The longest password accepted, in bytes: hashing is deliberately slow, and a bound keeps a
/// huge password from costing more than the hash's own work.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// bcrypt's cost when this member writes bcrypt hashes: etcd's default `--bcrypt-cost`.
pub const BCRYPT_COST: u32 = 10;
/// bcrypt reads only this many bytes of a password; a longer one is refused rather than cut.
pub const BCRYPT_MAX_PASSWORD_BYTES: usize = 72;

/// How this member hashes new passwords (`revkv serve --password-hash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PasswordHashScheme {
    /// argon2id: memory-hard, the better choice unless the store must go back to etcd.
    #[default]
    Argon2id,
    /// bcrypt at etcd's cost, in etcd's `$2a$` form: what etcd itself checks.
    Bcrypt,
}

/// Hashes `password` with a fresh random salt.
pub fn hash_password(password: &str, scheme: PasswordHashScheme) -> Result<String, AuthError> {
    check_length(password)?;
    match scheme {
        PasswordHashScheme::Argon2id => {
            let salt = SaltString::generate(&mut OsRng);
            Argon2::default()
                .hash_password(password.as_bytes(), &salt)
                .map(|hash| hash.to_string())
                .map_err(|error| AuthError::Internal(format!("hashing a password failed: {error}")))
        }
        PasswordHashScheme::Bcrypt => {
            if password.len() > BCRYPT_MAX_PASSWORD_BYTES {
                return Err(AuthError::Internal(format!(
                    "a password is at most {BCRYPT_MAX_PASSWORD_BYTES} bytes with bcrypt hashes"
                )));
            }
            bcrypt::non_truncating_hash_with_result(password, BCRYPT_COST)
                .map(|parts| parts.format_for_version(bcrypt::Version::TwoA))
                .map_err(|error| AuthError::Internal(format!("hashing a password failed: {error}")))
        }
    }
}

/// Checks `password` against a stored hash of either scheme; a malformed stored hash is an
/// internal error, a wrong password (or any password of a user without one) is
/// [`AuthError::BadCredentials`].
pub fn verify_password(password: &str, stored_hash: &str) -> Result<(), AuthError> {
    check_length(password).map_err(|_| AuthError::BadCredentials)?;
    if stored_hash.is_empty() {
        return Err(AuthError::BadCredentials);
    }
    if is_bcrypt_hash(stored_hash) {
        // The truncating check, as etcd's Go bcrypt made (and checks) the hashes it stored.
        return match bcrypt::verify(password, stored_hash) {
            Ok(true) => Ok(()),
            Ok(false) => Err(AuthError::BadCredentials),
            Err(error) => Err(AuthError::Internal(format!(
                "a stored password hash is malformed: {error}"
            ))),
        };
    }
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
    let permit = revkv_raft::clock::timeout(wait, permits.clone().acquire_owned())
        .await
        .map_err(|_| NodeError::Unavailable {
            reason: "too many password checks at once".into(),
            retry_after: std::time::Duration::from_secs(1),
        })?
        .map_err(|_| NodeError::Internal("the password-check semaphore closed".into()))?;
    revkv_raft::runtime::offload(move || {
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

    const ARGON2: PasswordHashScheme = PasswordHashScheme::Argon2id;

    #[test]
    fn the_right_password_verifies_and_a_wrong_one_does_not() {
        let hash = hash_password("correct horse", ARGON2).unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert_eq!(verify_password("correct horse", &hash), Ok(()));
        assert_eq!(
            verify_password("correct horsE", &hash),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn bcrypt_hashes_are_written_as_etcd_writes_them_and_checked() {
        let hash = hash_password("correct horse", PasswordHashScheme::Bcrypt).unwrap();
        assert!(hash.starts_with("$2a$10$"), "{hash}");
        assert!(is_bcrypt_hash(&hash));
        assert_eq!(verify_password("correct horse", &hash), Ok(()));
        assert_eq!(
            verify_password("correct horsE", &hash),
            Err(AuthError::BadCredentials)
        );
        let too_long = "x".repeat(BCRYPT_MAX_PASSWORD_BYTES + 1);
        assert!(hash_password(&too_long, PasswordHashScheme::Bcrypt).is_err());
    }

    #[test]
    fn a_hash_etcd_wrote_checks() {
        // Written by etcd 3.4's `user add alice:wonderland` (Go's bcrypt, cost 10).
        let from_etcd = "$2a$10$QR3YAb0LZE8/YqbeBVAo0.kP6LdHO8OGzOAziYL/f4T08xTZA0FXq";
        assert_eq!(verify_password("wonderland", from_etcd), Ok(()));
        assert_eq!(
            verify_password("Wonderland", from_etcd),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn no_password_signs_in_a_user_without_one() {
        assert_eq!(verify_password("", ""), Err(AuthError::BadCredentials));
        assert_eq!(
            verify_password("anything", ""),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn two_hashes_of_one_password_differ_by_their_salt() {
        assert_ne!(
            hash_password("same", ARGON2).unwrap(),
            hash_password("same", ARGON2).unwrap()
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
        assert!(hash_password(&huge, ARGON2).is_err());
        let hash = hash_password("short", ARGON2).unwrap();
        assert_eq!(
            verify_password(&huge, &hash),
            Err(AuthError::BadCredentials)
        );
    }
}
