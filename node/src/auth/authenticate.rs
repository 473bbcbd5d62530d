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
/// argon2 or bcrypt verification): call it off the async threads. A refusal costs one password
/// check whether or not the user exists: an unknown user, or one without a password, is checked
/// against a decoy hash of the scheme a stored user would have (`decoy_for`), so timing does not
/// tell which users exist, whichever hashes the store holds (argon2 written here, bcrypt imported
/// from etcd, or both).
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
        Some(user) if !user.password_hash.is_empty() => {
            verify_password(password, &user.password_hash)?
        }
        _ => {
            // Spend a check anyway; the result is a refusal either way.
            let _ = verify_password(password, decoy_hash(decoy_for(records, name)));
            return Err(AuthError::BadCredentials.into());
        }
    }
    Ok(signer(records, options)?.issue(name, now)?)
}

/// The scheme of the decoy a sign-in as `name` (unknown, or without a password) is checked
/// against: that of a stored user picked by a keyed hash of the name, so the unknown names are
/// spread over the schemes in the proportion the stored users have them (a store imported from
/// etcd, all bcrypt, gets bcrypt decoys), and one name always gets the same one, as a real user
/// always has the same hash. The key is random per process, so nobody can tell in advance which
/// scheme a name draws. A store with no password at all gets argon2, the scheme written here.
pub(crate) fn decoy_for(records: &AuthState, name: &str) -> PasswordHashScheme {
    use std::hash::BuildHasher;
    static NAME_KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let with_password = || {
        records
            .users
            .values()
            .filter(|user| !user.password_hash.is_empty())
    };
    let users = with_password().count() as u64;
    if users == 0 {
        return PasswordHashScheme::Argon2id;
    }
    let bcrypt = with_password()
        .filter(|user| revkv_storage::auth::is_bcrypt_hash(&user.password_hash))
        .count() as u64;
    let drawn = NAME_KEY.get_or_init(Default::default).hash_one(name) % users;
    if drawn < bcrypt {
        PasswordHashScheme::Bcrypt
    } else {
        PasswordHashScheme::Argon2id
    }
}

/// A valid hash of a random password in `scheme`, made once per scheme, to verify against.
fn decoy_hash(scheme: PasswordHashScheme) -> &'static str {
    static ARGON2_DECOY: OnceLock<String> = OnceLock::new();
    static BCRYPT_DECOY: OnceLock<String> = OnceLock::new();
    let decoy = match scheme {
        PasswordHashScheme::Argon2id => &ARGON2_DECOY,
        PasswordHashScheme::Bcrypt => &BCRYPT_DECOY,
    };
    decoy.get_or_init(|| {
        let random_password = format!("{:032x}", rand_u128());
        hash_password(&random_password, scheme).unwrap_or_default()
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

    /// A store of `bcrypt` users with bcrypt hashes and `argon2` with argon2 ones (stand-in
    /// hashes: only their form counts here).
    fn store_of(bcrypt: usize, argon2: usize) -> AuthState {
        let mut records = AuthState::default();
        let user = |hash: &str| User {
            password_hash: hash.to_string(),
            roles: BTreeSet::new(),
        };
        for number in 0..bcrypt {
            let hash = "$2a$10$abcdefghijklmnopqrstuuJ0fF8bH2kq3cY5yQm1sS7wTqK9eLxGm";
            records.users.insert(format!("b{number}"), user(hash));
        }
        for number in 0..argon2 {
            records.users.insert(
                format!("a{number}"),
                user("$argon2id$v=19$m=19456,t=2,p=1$x$y"),
            );
        }
        records.users.insert("no-password".into(), user(""));
        records
    }

    #[test]
    fn unknown_names_draw_decoys_of_the_schemes_the_stored_users_have() {
        let names: Vec<String> = (0..1_000).map(|number| format!("guess-{number}")).collect();
        let drawn = |records: &AuthState, scheme| {
            let draws = names
                .iter()
                .filter(|name| decoy_for(records, name) == scheme);
            draws.count()
        };
        // Imported from etcd: every decoy is bcrypt, as every real check would be.
        assert_eq!(drawn(&store_of(5, 0), PasswordHashScheme::Bcrypt), 1_000);
        assert_eq!(drawn(&store_of(0, 5), PasswordHashScheme::Argon2id), 1_000);
        // No password at all: argon2, the scheme written here.
        assert_eq!(drawn(&store_of(0, 0), PasswordHashScheme::Argon2id), 1_000);
        // Half and half: both, about half each (a binomial draw; 350 is 9 deviations off).
        let mixed = store_of(4, 4);
        let bcrypt = drawn(&mixed, PasswordHashScheme::Bcrypt);
        assert!(
            (350..=650).contains(&bcrypt),
            "{bcrypt} of 1000 drew bcrypt"
        );
        // One name always draws the same, as one user always has the same hash.
        for name in &names[..20] {
            assert_eq!(decoy_for(&mixed, name), decoy_for(&mixed, name));
        }
    }

    #[test]
    fn a_user_without_a_password_is_refused_like_an_unknown_one() {
        let mut records = enabled_records();
        let nobody_hash = User {
            password_hash: String::new(),
            roles: BTreeSet::new(),
        };
        records.users.insert("no-password".into(), nobody_hash);
        let options = AuthOptions::default();
        for name in ["no-password", "unknown"] {
            let refused = issue_token(&records, name, "", &options, 1);
            assert!(
                matches!(refused, Err(NodeError::Unauthenticated(_))),
                "{name}: {refused:?}"
            );
        }
    }
}
