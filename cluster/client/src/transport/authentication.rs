//! How the transport calls as a user (`credentials.rs` holds the user and the token cache): it
//! authenticates before its first call when it holds no token, sends the token on every call, and
//! authenticates once more and repeats the call when a member answers `401`. A child of
//! `transport.rs` so that the transport depends on the credentials and not the other way round.

use std::sync::atomic::Ordering;

use reqwest::Method;
use serde::Deserialize;
use tokio::time::Instant;

use super::{Call, Transport};
use crate::error::ClientError;

/// What a member answers when auth is off, so credentials are no error.
const AUTH_NOT_ENABLED: &str = "auth is not enabled";

#[derive(Deserialize)]
struct TokenAnswer {
    token: String,
}

impl Transport {
    /// Runs `attempt` with a token when the client has credentials: authenticates first if no
    /// token is held, and once more (then repeats `attempt`) if the member answers `401`.
    pub(crate) async fn with_token<T, F, Fut>(
        &self,
        deadline: Instant,
        attempt: F,
    ) -> Result<T, ClientError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        if self.tokens.credentials.is_none() {
            return attempt().await;
        }
        let auth_off = self.tokens.auth_off.load(Ordering::Relaxed);
        if self.tokens.current().is_none() && !auth_off {
            self.authenticate(deadline).await?;
        }
        match attempt().await {
            Err(ClientError::Unauthenticated { .. }) => {
                self.authenticate(deadline).await?;
                attempt().await
            }
            other => other,
        }
    }

    async fn authenticate(&self, deadline: Instant) -> Result<(), ClientError> {
        let Some(credentials) = &self.tokens.credentials else {
            return Ok(());
        };
        self.tokens.replace(None);
        let body = serde_json::json!({
            "name": credentials.user,
            "password": credentials.password,
        });
        let mut call = Call::write(Method::POST, "/v1/auth/authenticate".into(), Some(body));
        // Authenticating changes nothing, so it may be repeated on another member.
        call.idempotent = true;
        let answer = match self.execute_without_token(&call, deadline).await {
            Err(ClientError::Invalid { message }) if message == AUTH_NOT_ENABLED => {
                self.tokens.auth_off.store(true, Ordering::Relaxed);
                return Ok(());
            }
            other => other?,
        };
        self.tokens.auth_off.store(false, Ordering::Relaxed);
        let parsed: TokenAnswer = serde_json::from_slice(&answer.body).map_err(|error| {
            ClientError::UnreadableAnswer {
                message: error.to_string(),
            }
        })?;
        self.tokens.replace(Some(parsed.token));
        Ok(())
    }
}
