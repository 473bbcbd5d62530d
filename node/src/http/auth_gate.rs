//! The auth gate in front of every route (issue 15): while auth is enabled, it proves who is
//! asking from the bearer token and refuses (401) a request without a valid one, refuses (403) a
//! non-root caller on an administration route, and hands the caller on to the handler. Routes
//! whose handlers touch keys take their backend through [`CheckedState`], which checks each
//! request those handlers make against the caller's permissions (`auth::CheckedBackend`).
//!
//! The route table (`access_of_route`) is the one list of who may call what; a route missing
//! from it needs root, so a new route is closed until someone decides otherwise.

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use revkv_metrics::AuthDenial;

use super::error::ApiError;
use super::state::ApiState;
use crate::auth::{authenticate::unix_now, authenticate_bearer, Caller};
use crate::backend::KvBackend;
use crate::error::NodeError;

/// Who may call a route while auth is enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteAccess {
    /// Anyone, with or without a token: health, readiness, metrics, the API document, status,
    /// and authenticating itself (etcd leaves the same ones open).
    Open,
    /// Any authenticated user; the handler's backend checks each key it touches.
    Authenticated,
    /// Only a user holding the root role.
    Root,
}

/// The access of `method` on the route template `route`.
pub fn access_of_route(method: &Method, route: &str) -> RouteAccess {
    use RouteAccess::{Authenticated, Open, Root};
    match (method.as_str(), route) {
        (_, "/healthz" | "/readyz" | "/metrics" | "/v1/openapi.json" | "/v1/status") => Open,
        // The web console's files: they hold no data, and carry the sign-in form.
        ("GET" | "HEAD", "/ui" | "/ui/" | "/ui/{*path}") => Open,
        ("POST", "/v1/auth/authenticate") | ("GET", "/v1/auth/status") => Open,
        (_, "/v1/kv" | "/v1/kv/" | "/v1/kv/{*key}" | "/v1/txn") => Authenticated,
        (_, "/v1/watch" | "/v1/watch/{watch_id}/progress") => Authenticated,
        (_, "/v1/leases" | "/v1/leases/{id}" | "/v1/leases/keepalive") => Authenticated,
        (_, "/v1/leases/{id}/keepalive") => Authenticated,
        ("GET", "/v1/members" | "/v1/alarms" | "/v1/cluster/status") => Authenticated,
        // Counts only, no key names (unlike the hot-key list).
        ("GET", "/v1/conflicts/rates") => Authenticated,
        // Membership changes, leader transfer, compaction, hashes, backups, defragmentation,
        // clearing alarms, the hot-key list (it names keys) and auth administration.
        _ => Root,
    }
}

/// The middleware: resolves the caller, refuses what the route table refuses, counts refusals.
pub async fn gate<B: KvBackend>(
    State(state): State<ApiState<B>>,
    matched_path: Option<MatchedPath>,
    mut request: Request,
    next: Next,
) -> Response {
    let route = matched_path.as_ref().map_or("", |path| path.as_str());
    let access = access_of_route(request.method(), route);
    let records = state.backend.auth_records();
    // None: an open route while auth is enabled, whose handler never acts for a caller (and a
    // checked handler there would refuse rather than act for no one).
    let caller = if !records.enabled {
        Ok(Some(Caller::Unrestricted))
    } else if access == RouteAccess::Open {
        Ok(None)
    } else {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        authenticate_bearer(&records, authorization, &state.limits.auth, unix_now()).and_then(
            |caller| match access {
                RouteAccess::Root => caller.require_root().map(|()| Some(caller)),
                _ => Ok(Some(caller)),
            },
        )
    };
    let response = match caller {
        Ok(caller) => {
            if let Some(caller) = caller {
                request.extensions_mut().insert(caller);
            }
            next.run(request).await
        }
        Err(refusal) => axum::response::IntoResponse::into_response(ApiError::from(refusal)),
    };
    count_refusal(&state, route, response.status());
    response
}

fn count_refusal<B>(state: &ApiState<B>, route: &str, status: StatusCode) {
    let denial = match status {
        StatusCode::UNAUTHORIZED if route == "/v1/auth/authenticate" => AuthDenial::BadCredentials,
        StatusCode::UNAUTHORIZED => AuthDenial::Unauthenticated,
        StatusCode::FORBIDDEN => AuthDenial::Forbidden,
        _ => return,
    };
    state.metrics.auth.record_denied(denial);
}

/// The state of a handler that touches keys: the member's state with a backend that acts for the
/// request's caller and checks everything asked of it.
pub struct CheckedState<B>(pub ApiState<crate::auth::CheckedBackend<B>>);

impl<B: KvBackend> FromRequestParts<ApiState<B>> for CheckedState<B> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ApiState<B>,
    ) -> Result<Self, Self::Rejection> {
        // Missing only if a checked handler sits on a route the gate treats as open: refuse
        // rather than act for no one.
        let caller = parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            NodeError::Unauthenticated("this route needs an authenticated caller".into())
        })?;
        Ok(CheckedState(state.acting_for(caller)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_routes_need_a_user_administration_needs_root_and_unknown_routes_are_closed() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(access_of_route(&get, "/healthz"), RouteAccess::Open);
        assert_eq!(
            access_of_route(&post, "/v1/auth/authenticate"),
            RouteAccess::Open
        );
        assert_eq!(
            access_of_route(&get, "/v1/kv/{*key}"),
            RouteAccess::Authenticated
        );
        assert_eq!(
            access_of_route(&post, "/v1/txn"),
            RouteAccess::Authenticated
        );
        assert_eq!(
            access_of_route(&get, "/v1/members"),
            RouteAccess::Authenticated
        );
        assert_eq!(access_of_route(&post, "/v1/members"), RouteAccess::Root);
        assert_eq!(access_of_route(&post, "/v1/compact"), RouteAccess::Root);
        assert_eq!(access_of_route(&get, "/v1/snapshot"), RouteAccess::Root);
        assert_eq!(access_of_route(&get, "/v1/conflicts"), RouteAccess::Root);
        // The console's rates are counts without key names; the cluster status names members,
        // as `GET /v1/members` does.
        assert_eq!(
            access_of_route(&get, "/v1/conflicts/rates"),
            RouteAccess::Authenticated
        );
        assert_eq!(
            access_of_route(&get, "/v1/cluster/status"),
            RouteAccess::Authenticated
        );
        // The console's files hold no data and carry the sign-in form.
        for console_route in ["/ui", "/ui/", "/ui/{*path}"] {
            assert_eq!(access_of_route(&get, console_route), RouteAccess::Open);
            assert_eq!(
                access_of_route(&Method::HEAD, console_route),
                RouteAccess::Open
            );
            assert_eq!(access_of_route(&post, console_route), RouteAccess::Root);
        }
        assert_eq!(access_of_route(&post, "/v1/auth/users"), RouteAccess::Root);
        assert_eq!(
            access_of_route(&get, "/v1/some/new/route"),
            RouteAccess::Root
        );
        assert_eq!(access_of_route(&get, ""), RouteAccess::Root);
    }
}
