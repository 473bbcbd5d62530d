//! Signed tokens (JWT, HS256): any member checks one without a round trip, with the cluster's
//! token key, which auth enable will create and keep in the replicated store. A token names its
//! user and expires; what the user may do is looked up at each request, so a revoked role takes
//! effect at once and a deleted user's token stops working.
//!
//! Expiry is checked here against a caller-given time rather than by the JWT library's clock, so
//! it can be tested without waiting.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::AuthError;

/// The shortest key accepted: HS256's own output size.
pub const MIN_KEY_BYTES: usize = 32;

/// What a token says.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Claims {
    /// The user name.
    sub: String,
    /// Issued at, seconds since the Unix epoch.
    iat: u64,
    /// Expires at, seconds since the Unix epoch.
    exp: u64,
}

/// Issues and checks tokens with one key.
pub struct TokenSigner {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl_seconds: u64,
}

impl TokenSigner {
    /// A signer with `key` (at least [`MIN_KEY_BYTES`]) whose tokens live `ttl_seconds`.
    pub fn new(key: &[u8], ttl_seconds: u64) -> Result<TokenSigner, AuthError> {
        if key.len() < MIN_KEY_BYTES || ttl_seconds == 0 {
            return Err(AuthError::Internal(format!(
                "a token key is at least {MIN_KEY_BYTES} bytes and a token lives at least 1 s"
            )));
        }
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked by `verify` against the time it is given.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        Ok(TokenSigner {
            encoding: EncodingKey::from_secret(key),
            decoding: DecodingKey::from_secret(key),
            validation,
            ttl_seconds,
        })
    }

    /// A token for `user`, issued at `now` (seconds since the Unix epoch).
    pub fn issue(&self, user: &str, now: u64) -> Result<String, AuthError> {
        let claims = Claims {
            sub: user.to_owned(),
            iat: now,
            exp: now.saturating_add(self.ttl_seconds),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|error| AuthError::Internal(format!("signing a token failed: {error}")))
    }

    /// The user a token names, if its signature is this key's and it has not expired at `now`.
    pub fn verify(&self, token: &str, now: u64) -> Result<String, AuthError> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|_| AuthError::InvalidToken)?
            .claims;
        if now >= claims.exp {
            return Err(AuthError::ExpiredToken);
        }
        Ok(claims.sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_names_its_user_until_it_expires() {
        let signer = TokenSigner::new(KEY, 300).unwrap();
        let token = signer.issue("alice", 1_000).unwrap();
        assert_eq!(signer.verify(&token, 1_000), Ok("alice".to_owned()));
        assert_eq!(signer.verify(&token, 1_299), Ok("alice".to_owned()));
        assert_eq!(signer.verify(&token, 1_300), Err(AuthError::ExpiredToken));
    }

    #[test]
    fn a_token_signed_with_another_key_or_altered_is_invalid() {
        let signer = TokenSigner::new(KEY, 300).unwrap();
        let other = TokenSigner::new(b"another key of thirty-two bytes!", 300).unwrap();
        let token = other.issue("alice", 1_000).unwrap();
        assert_eq!(signer.verify(&token, 1_000), Err(AuthError::InvalidToken));
        // Swap the claims for ones naming root, keeping the signature.
        let genuine = signer.issue("alice", 1_000).unwrap();
        let forged_claims = signer.issue("root", 1_000).unwrap();
        let parts: Vec<&str> = genuine.split('.').collect();
        let forged_parts: Vec<&str> = forged_claims.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], forged_parts[1], parts[2]);
        assert_eq!(signer.verify(&forged, 1_000), Err(AuthError::InvalidToken));
        assert_eq!(
            signer.verify("not a token", 1_000),
            Err(AuthError::InvalidToken)
        );
    }

    #[test]
    fn a_token_of_another_algorithm_is_refused() {
        // An unsigned token ("alg": "none") claiming to be root.
        let unsigned = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.\
                        eyJzdWIiOiJyb290IiwiaWF0IjoxMDAwLCJleHAiOjk5OTk5OTk5OTl9.";
        let signer = TokenSigner::new(KEY, 300).unwrap();
        assert_eq!(signer.verify(unsigned, 1_000), Err(AuthError::InvalidToken));
    }

    #[test]
    fn a_short_key_or_a_zero_lifetime_is_refused() {
        assert!(TokenSigner::new(b"short", 300).is_err());
        assert!(TokenSigner::new(KEY, 0).is_err());
    }
}
