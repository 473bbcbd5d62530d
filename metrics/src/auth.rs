//! Auth metrics (issue 15): requests refused by auth, by reason, and authentications that
//! succeeded, so an operator sees a misconfigured client (a burst of `unauthenticated`) apart
//! from a client probing where it does not belong (`forbidden`) or guessing passwords
//! (`bad_credentials`).

use prometheus::{IntCounter, IntCounterVec, Registry};

use crate::registration::{counter, counter_vec};

/// Why auth refused a request: the bounded label set of `revkv_auth_denied_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthDenial {
    /// No token, or an invalid or expired one, on a request that needs one.
    Unauthenticated,
    /// A wrong user name or password at `POST /v1/auth/authenticate`.
    BadCredentials,
    /// An authenticated user without the permission the request needs.
    Forbidden,
}

impl AuthDenial {
    fn label(self) -> &'static str {
        match self {
            AuthDenial::Unauthenticated => "unauthenticated",
            AuthDenial::BadCredentials => "bad_credentials",
            AuthDenial::Forbidden => "forbidden",
        }
    }
}

/// The auth metrics of one member.
#[derive(Clone, Debug)]
pub struct AuthMetrics {
    denied_total: IntCounterVec,
    authenticated_total: IntCounter,
}

impl AuthMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        Ok(AuthMetrics {
            denied_total: counter_vec(
                registry,
                "revkv_auth_denied_total",
                "Requests this member refused because of auth, by reason: unauthenticated, \
                 bad_credentials or forbidden.",
                &["reason"],
            )?,
            authenticated_total: counter(
                registry,
                "revkv_auth_authenticated_total",
                "Successful authentications (tokens handed out) by this member.",
            )?,
        })
    }

    /// Counts one refusal.
    pub fn record_denied(&self, reason: AuthDenial) {
        self.denied_total.with_label_values(&[reason.label()]).inc();
    }

    /// Counts one token handed out.
    pub fn record_authenticated(&self) {
        self.authenticated_total.inc();
    }
}
