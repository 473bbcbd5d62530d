//! Proving who is asking: a bearer token checked against the replicated records (any member
//! checks any member's token, with the key auth enable put in the records), and a user name and
//! password checked against the stored hash (argon2, or bcrypt as etcd writes them) before a
//! token is handed out.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use revkv_storage::auth::AuthState;

use super::caller::{AuthenticatedUser, Caller};
use super::password::{hash_password, verify_password, PasswordHashScheme};
use super::token::TokenSigner;
use super::AuthError;
use crate::error::NodeError;

/// How a member hands out and checks tokens (`revkv serve --auth-token-ttl-seconds`,
/// `--max-concurrent-password-checks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthOptions {
    /// How long a token is valid (etcd's default for its tokens is 5 minutes).
    pub token_ttl: Duration,
    /// Password checks running at once on this member; each costs an argon2 hash (tens of
    /// milliseconds of one core), so a burst of logins waits rather than starving the member.
    pub max_concurrent_password_checks: usize,
    /// How this member hashes new passwords (`--password-hash`).
    pub password_hash: PasswordHashScheme,
}

impl Default for AuthOptions {
    fn default() -> Self {
        AuthOptions {
            token_ttl: Duration::from_secs(300),
            max_concurrent_password_checks: 2,
            password_hash: PasswordHashScheme::default(),
        }
    }
}

/// Seconds since the Unix epoch, the clock tokens are issued and checked against.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// The caller an `Authorization` header value proves under `records`: `Unrestricted` while auth
/// is disabled; otherwise the header must carry a valid token (`Bearer TOKEN`, or the bare token
/// as etcd's gateway sends it) of a user that still exists.
pub fn authenticate_bearer(
    records: &AuthState,
    authorization: Option<&str>,
    options: &AuthOptions,
    now: u64,
) -> Result<Caller, NodeError> {
    if !records.enabled {
        return Ok(Caller::Unrestricted);
    }
    let token = authorization.map(strip_bearer).ok_or_else(|| {
        NodeError::Unauthenticated(
            "auth is enabled: authenticate at POST /v1/auth/authenticate and send the token as \
             Authorization: Bearer TOKEN"
                .into(),
        )
    })?;
    let name = signer(records, options)?.verify(token, now)?;
    let rules = records
        .access_rules_of(&name)
        .ok_or(AuthError::InvalidToken)?;
    Ok(Caller::User(Arc::new(AuthenticatedUser { name, rules })))
}

fn strip_bearer(value: &str) -> &str {
    let trimmed = value.trim();
    match trimmed.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => trimmed,
    }
}

fn signer(records: &AuthState, options: &AuthOptions) -> Result<TokenSigner, AuthError> {
    // No key is chosen yet (a store restored from etcd, before its first sign-in): no token
    // was ever handed out, so every token offered is invalid.
    if records.token_key.is_empty() {
        return Err(AuthError::InvalidToken);
    }
    TokenSigner::new(&records.token_key, options.token_ttl.as_secs().max(1))
}

/// The records with a token key: a store restored from an etcd snapshot has auth enabled but
/// no key (etcd's simple tokens need none, and every member restored from the file must end up
/// with the same secret one), so the first sign-in proposes a fresh key through the log. An
/// enable on an enabled store keeps the key it has, so when sign-ins race, the first key applied
/// is every member's.
pub async fn records_with_token_key<B: crate::backend::KvBackend>(
    backend: &B,
) -> Result<Arc<AuthState>, NodeError> {
    let records = backend.auth_records();
    if !records.enabled || !records.token_key.is_empty() {
        return Ok(records);
    }
    let mut token_key = vec![0u8; *revkv_storage::auth::TOKEN_KEY_BYTES.start()];
    fill_random(&mut token_key);
    let change =
        revkv_storage::Request::Auth(revkv_storage::auth::AuthRequest::Enable { token_key });
    backend.write(change).await?;
    Ok(backend.auth_records())
}

/// Checks `name` and `password` against the records and hands out a token. Slow on purpose (an
/// argon2 verification): call it off the async threads. An unknown user costs the same as a
/// wrong password, so timing does not tell which users exist.
pub fn issue_token(
    records: &AuthState,
    name: &str,
    password: &str,
    options: &AuthOptions,
    now: u64,
) -> Result<String, NodeError> {
    if !records.enabled {
        return Err(NodeError::Invalid("auth is not enabled".into()));
    }
    match records.users.get(name) {
        Some(user) => verify_password(password, &user.password_hash)?,
        None => {
            // Spend an argon2 verification anyway; the result is a refusal either way.
            let _ = verify_password(password, decoy_hash());
            return Err(AuthError::BadCredentials.into());
        }
    }
    Ok(signer(records, options)?.issue(name, now)?)
}

/// A valid argon2 hash of a random password, made once, to verify against for unknown users.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let random_password = format!("{:032x}", rand_u128());
        hash_password(&random_password, PasswordHashScheme::Argon2id).unwrap_or_default()
    })
}

fn rand_u128() -> u128 {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes);
    u128::from_le_bytes(bytes)
}

/// Fills `bytes` from the operating system's random source (token keys, decoy passwords).
pub fn fill_random(bytes: &mut [u8]) {
    use argon2::password_hash::rand_core::{OsRng, RngCore};
    OsRng.fill_bytes(bytes);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use revkv_storage::auth::{User, ROOT_ROLE};

    use super::*;

    fn enabled_records() -> AuthState {
        let mut records = AuthState {
            enabled: true,
            token_key: vec![9; 32],
            ..AuthState::default()
        };
        let root = User {
            password_hash: hash_password("secret", PasswordHashScheme::Argon2id).unwrap(),
            roles: BTreeSet::from([ROOT_ROLE.to_string()]),
        };
        records.users.insert("root".into(), root);
        records
    }

    #[test]
    fn a_token_from_the_right_password_proves_the_user_and_nothing_else_does() {
        let records = enabled_records();
        let options = AuthOptions::default();
        let now = 1_000;
        let token = issue_token(&records, "root", "secret", &options, now).unwrap();
        let caller =
            authenticate_bearer(&records, Some(&format!("Bearer {token}")), &options, now).unwrap();
        assert!(caller.is_unrestricted(), "root may do everything");
        // The bare token (etcd's gateway) works too.
        authenticate_bearer(&records, Some(&token), &options, now).unwrap();

        let refusals = [
            issue_token(&records, "root", "wrong", &options, now).map(|_| ()),
            issue_token(&records, "nobody", "secret", &options, now).map(|_| ()),
            authenticate_bearer(&records, None, &options, now).map(|_| ()),
            authenticate_bearer(&records, Some("Bearer forged"), &options, now).map(|_| ()),
            authenticate_bearer(&records, Some(&token), &options, now + 301).map(|_| ()),
        ];
        for refusal in refusals {
            assert!(
                matches!(refusal, Err(NodeError::Unauthenticated(_))),
                "{refusal:?}"
            );
        }
    }

    #[test]
    fn a_deleted_user_or_a_new_key_ends_a_token_and_disabled_auth_lets_everyone_in() {
        let mut records = enabled_records();
        let options = AuthOptions::default();
        let token = issue_token(&records, "root", "secret", &options, 10).unwrap();
        let mut rekeyed = records.clone();
        rekeyed.token_key = vec![8; 32];
        assert!(authenticate_bearer(&rekeyed, Some(&token), &options, 10).is_err());
        records.users.clear();
        assert!(authenticate_bearer(&records, Some(&token), &options, 10).is_err());
        records.enabled = false;
        let caller = authenticate_bearer(&records, None, &options, 10).unwrap();
        assert!(matches!(caller, Caller::Unrestricted));
    }
}
