//! Auth through the HTTP API on a real store: while auth is enabled, a request without a valid
//! token is refused (401), a user reaches only the keys its roles grant (403 otherwise, with
//! nothing applied and no key named), administration needs root, refusals are counted, and
//! disabling auth opens everything again.

use crate::support;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use support::{assert_error, Answer, Api};

const ROOT_PASSWORD: &str = "root-secret";
const APP_PASSWORD: &str = "app-secret";

/// Root, an `app` user with read-write on `app/` and read on `shared/`, and auth enabled.
async fn enable_auth(api: &Api) {
    for (path, body) in [
        ("/v1/auth/users/root", json!({ "password": ROOT_PASSWORD })),
        ("/v1/auth/users/root/roles/root", Value::Null),
        ("/v1/auth/users/app", json!({ "password": APP_PASSWORD })),
        ("/v1/auth/roles/app-rw", Value::Null),
        ("/v1/auth/users/app/roles/app-rw", Value::Null),
    ] {
        let answer = send(api, Method::PUT, path, None, body).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {:?}", answer.json);
    }
    for (permission, key) in [("readwrite", "app/"), ("read", "shared/")] {
        let body = json!({ "permission": permission, "key": key, "prefix": true });
        let path = "/v1/auth/roles/app-rw/permissions";
        let answer = send(api, Method::POST, path, None, body).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json);
    }
    let enabled = send(api, Method::POST, "/v1/auth/enable", None, Value::Null).await;
    assert_eq!(enabled.status, StatusCode::OK, "{:?}", enabled.json);
}

async fn send(api: &Api, method: Method, path: &str, token: Option<&str>, body: Value) -> Answer {
    let authorization = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = authorization
        .iter()
        .map(|value| ("authorization", value.as_str()))
        .collect();
    let body = match body {
        Value::Null => Body::empty(),
        body => Body::from(body.to_string()),
    };
    api.send(method, path, &headers, body).await
}

async fn token_of(api: &Api, name: &str, password: &str) -> String {
    let body = json!({ "name": name, "password": password });
    let answer = send(api, Method::POST, "/v1/auth/authenticate", None, body).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json);
    answer.json["token"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn with_auth_enabled_only_tokens_get_in_and_only_where_their_roles_reach() {
    let api = Api::new();
    api.put_value("shared/config", "1").await;
    api.put_value("secret/key", "s").await;
    enable_auth(&api).await;

    // No token, a forged token, a wrong password: 401.
    let anonymous = api.get("/v1/kv/app/a").await;
    assert_error(&anonymous, StatusCode::UNAUTHORIZED, "unauthenticated", &[]);
    let forged = send(
        &api,
        Method::GET,
        "/v1/kv/app/a",
        Some("forged"),
        Value::Null,
    )
    .await;
    assert_error(&forged, StatusCode::UNAUTHORIZED, "unauthenticated", &[]);
    let body = json!({ "name": "app", "password": "wrong" });
    let wrong = send(&api, Method::POST, "/v1/auth/authenticate", None, body).await;
    assert_error(&wrong, StatusCode::UNAUTHORIZED, "unauthenticated", &[]);
    // Open routes stay open.
    assert_eq!(api.get("/healthz").await.status, StatusCode::OK);
    assert_eq!(api.get("/v1/auth/status").await.json["enabled"], true);

    let app = token_of(&api, "app", APP_PASSWORD).await;
    let app = Some(app.as_str());
    let put = |key: &str| format!("/v1/kv/{key}");
    let value = json!({ "value": "v" });
    let allowed = send(&api, Method::PUT, &put("app/a"), app, value.clone()).await;
    assert_eq!(allowed.status, StatusCode::OK, "{:?}", allowed.json);
    let read = send(&api, Method::GET, "/v1/kv/shared/config", app, Value::Null).await;
    assert_eq!(read.status, StatusCode::OK);

    let revision = allowed.revision();
    let refusals = [
        (Method::PUT, put("secret/key"), value.clone()),
        (Method::PUT, put("shared/config"), value.clone()),
        (Method::GET, put("secret/key"), Value::Null),
        (Method::GET, "/v1/kv?prefix=".to_string(), Value::Null),
        (Method::GET, "/v1/kv?prefix=app".to_string(), Value::Null),
        (
            Method::DELETE,
            "/v1/kv/shared/?prefix=true".to_string(),
            Value::Null,
        ),
        (
            Method::GET,
            "/v1/watch?key=secret/&prefix=true".to_string(),
            Value::Null,
        ),
        (
            Method::POST,
            "/v1/compact".to_string(),
            json!({ "revision": 1 }),
        ),
        (Method::GET, "/v1/snapshot".to_string(), Value::Null),
        (Method::PUT, "/v1/auth/roles/mine".to_string(), Value::Null),
    ];
    for (method, path, body) in refusals {
        let answer = send(&api, method.clone(), &path, app, body).await;
        assert_error(&answer, StatusCode::FORBIDDEN, "forbidden", &[]);
        let message = answer.json["error"]["message"].as_str().unwrap();
        assert!(!message.contains("secret"), "{method} {path}: {message}");
    }

    // A txn whose failure branch writes outside the user's keys is refused whole, even though
    // its compare would take the success branch: nothing is applied.
    let txn = json!({
        "compare": [{ "key": "app/a", "target": "version", "op": ">", "value": 0 }],
        "success": [{ "put": { "key": "app/b", "value": "1" } }],
        "failure": [{ "put": { "key": "secret/key", "value": "stolen" } }],
    });
    let answer = send(&api, Method::POST, "/v1/txn", app, txn).await;
    assert_error(&answer, StatusCode::FORBIDDEN, "forbidden", &[]);
    let root = token_of(&api, "root", ROOT_PASSWORD).await;
    let root = Some(root.as_str());
    let after = send(&api, Method::GET, "/v1/kv?prefix=app/b", root, Value::Null).await;
    assert_eq!(after.status, StatusCode::OK, "{:?}", after.json);
    assert_eq!(after.json["count"], 0, "{:?}", after.json);
    assert_eq!(after.revision(), revision, "nothing was applied");

    // Root may do everything; the refusals were counted by reason.
    let compact = send(
        &api,
        Method::POST,
        "/v1/compact",
        root,
        json!({ "revision": 1 }),
    )
    .await;
    assert_eq!(compact.status, StatusCode::OK, "{:?}", compact.json);
    let text = metrics_text(&api).await;
    assert!(
        text.contains("revkv_auth_denied_total{reason=\"forbidden\"} 11"),
        "{text}"
    );
    assert!(text.contains("revkv_auth_denied_total{reason=\"unauthenticated\"} 2"));
    assert!(text.contains("revkv_auth_denied_total{reason=\"bad_credentials\"} 1"));

    // Disabled again, everything is open to everyone.
    let disabled = send(&api, Method::POST, "/v1/auth/disable", root, Value::Null).await;
    assert_eq!(disabled.status, StatusCode::OK, "{:?}", disabled.json);
    assert_eq!(api.get("/v1/kv/secret/key").await.status, StatusCode::OK);
}

async fn metrics_text(api: &Api) -> String {
    let response = api.open(Method::GET, "/metrics", Body::empty()).await;
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn auth_cannot_be_enabled_without_root_and_a_revoked_role_takes_effect_at_once() {
    let api = Api::new();
    let refused = send(&api, Method::POST, "/v1/auth/enable", None, Value::Null).await;
    assert_error(&refused, StatusCode::BAD_REQUEST, "invalid", &[]);
    enable_auth(&api).await;
    let app = token_of(&api, "app", APP_PASSWORD).await;
    let root = token_of(&api, "root", ROOT_PASSWORD).await;
    let value = json!({ "value": "v" });
    let path = "/v1/kv/app/x";
    let before = send(&api, Method::PUT, path, Some(&app), value.clone()).await;
    assert_eq!(before.status, StatusCode::OK);

    let revoke = "/v1/auth/users/app/roles/app-rw";
    let revoked = send(&api, Method::DELETE, revoke, Some(&root), Value::Null).await;
    assert_eq!(revoked.status, StatusCode::OK, "{:?}", revoked.json);
    let after = send(&api, Method::PUT, path, Some(&app), value).await;
    assert_error(&after, StatusCode::FORBIDDEN, "forbidden", &[]);

    // Root cannot be deleted while auth is enabled; a deleted user's token stops working.
    let root_delete = send(
        &api,
        Method::DELETE,
        "/v1/auth/users/root",
        Some(&root),
        Value::Null,
    );
    assert_error(&root_delete.await, StatusCode::BAD_REQUEST, "invalid", &[]);
    let deleted = send(
        &api,
        Method::DELETE,
        "/v1/auth/users/app",
        Some(&root),
        Value::Null,
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK);
    let gone = send(&api, Method::GET, path, Some(&app), Value::Null).await;
    assert_error(&gone, StatusCode::UNAUTHORIZED, "unauthenticated", &[]);
}

/// The user and role routes share their checks: each refuses a query before it reads the body
/// (the query is named, not the empty password), and a user or role that does not exist is
/// `not_found` for both kinds.
#[tokio::test]
async fn user_and_role_routes_refuse_queries_first_and_name_missing_records() {
    let api = Api::new();
    let empty_password = json!({ "password": "" });
    let with_query = "/v1/auth/users/alice?x=1";
    let refused = send(&api, Method::PUT, with_query, None, empty_password).await;
    assert_error(&refused, StatusCode::BAD_REQUEST, "invalid", &[]);
    let message = refused.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("query parameter"), "{message}");
    for path in ["/v1/auth/users/nobody", "/v1/auth/roles/nobody"] {
        let missing = send(&api, Method::GET, path, None, Value::Null).await;
        assert_error(&missing, StatusCode::NOT_FOUND, "not_found", &[]);
    }
    let listed = send(&api, Method::GET, "/v1/auth/roles?x=1", None, Value::Null).await;
    assert_error(&listed, StatusCode::BAD_REQUEST, "invalid", &[]);
}
