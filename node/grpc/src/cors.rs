//! CORS on the gRPC port's plain-HTTP paths (the JSON gateway, `/version`, `/health`,
//! `/metrics`), answered as etcd's client port answers it (`--cors`), so a page in a browser can
//! call the gateway directly.
//!
//! What etcd 3.4 and 3.5 do, and revkv with them: with every origin allowed (etcd's default,
//! `*`), each answer carries `Access-Control-Allow-Origin: *` and the allowed methods and
//! headers, whether or not the request named an origin. With a list of origins, only a request
//! whose `Origin` is in the list gets them, naming that origin. A preflight (`OPTIONS`) is
//! answered 200 with no body, and with the headers as above. revkv adds `none`, which sends no
//! CORS header at all (etcd has no way to turn them off).

use axum::extract::Request;
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN, ORIGIN,
};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Which origins may call from a browser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CorsOrigins {
    /// Every origin (`*`, etcd's default).
    #[default]
    Any,
    /// Only these origins (`scheme://host[:port]`, compared with `Origin` exactly).
    Only(Vec<String>),
    /// No CORS headers at all.
    None,
}

/// The most origins a list may name; each answer compares against all of them.
pub const MAX_CORS_ORIGINS: usize = 64;

impl CorsOrigins {
    /// `*` or an empty text (every origin, as in etcd), `none`, or a comma-separated list of
    /// origins such as `https://console.example:8443`.
    pub fn parse(text: &str) -> Result<CorsOrigins, String> {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            return Ok(CorsOrigins::Any);
        }
        if text == "none" {
            return Ok(CorsOrigins::None);
        }
        let origins: Vec<String> = text
            .split(',')
            .map(|origin| origin.trim().to_owned())
            .collect();
        if origins.len() > MAX_CORS_ORIGINS {
            return Err(format!(
                "at most {MAX_CORS_ORIGINS} CORS origins, not {}",
                origins.len()
            ));
        }
        for origin in &origins {
            check_origin(origin)?;
        }
        Ok(CorsOrigins::Only(origins))
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if it gets one.
    fn allowed(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        match self {
            CorsOrigins::Any => Some(HeaderValue::from_static("*")),
            CorsOrigins::None => None,
            CorsOrigins::Only(allowed) => {
                let origin = origin?;
                let text = origin.to_str().ok()?;
                allowed
                    .iter()
                    .any(|one| one == text)
                    .then(|| origin.clone())
            }
        }
    }
}

/// An origin is a scheme and a host, with a port or not, and nothing after them.
fn check_origin(origin: &str) -> Result<(), String> {
    let refusal = || format!("`{origin}` is not an origin such as https://console.example:8443");
    let uri: Uri = origin.parse().map_err(|_| refusal())?;
    let has_path = uri
        .path_and_query()
        .is_some_and(|path| path.as_str() != "/");
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) if !has_path && !origin.ends_with('/') => Ok(()),
        _ => Err(refusal()),
    }
}

/// The middleware: answers a preflight itself and adds the headers to every other answer.
pub async fn answer(
    origins: std::sync::Arc<CorsOrigins>,
    request: Request,
    next: Next,
) -> Response {
    let allowed = origins.allowed(request.headers().get(ORIGIN));
    let mut response = if request.method() == Method::OPTIONS {
        StatusCode::OK.into_response()
    } else {
        next.run(request).await
    };
    if let Some(origin) = allowed {
        let headers = response.headers_mut();
        headers.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
        );
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("accept, content-type, authorization"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_or_nothing_allows_every_origin_and_none_turns_cors_off() {
        assert_eq!(CorsOrigins::parse("*"), Ok(CorsOrigins::Any));
        assert_eq!(CorsOrigins::parse(" "), Ok(CorsOrigins::Any));
        assert_eq!(CorsOrigins::parse("none"), Ok(CorsOrigins::None));
        assert_eq!(CorsOrigins::None.allowed(None), None);
        assert_eq!(
            CorsOrigins::Any.allowed(None),
            Some(HeaderValue::from_static("*"))
        );
    }

    #[test]
    fn a_list_allows_exactly_its_origins() {
        let origins = CorsOrigins::parse("http://a.example:80, https://b.example").unwrap();
        let a = HeaderValue::from_static("http://a.example:80");
        assert_eq!(origins.allowed(Some(&a)), Some(a.clone()));
        let b = HeaderValue::from_static("https://b.example");
        assert_eq!(origins.allowed(Some(&b)), Some(b));
        for other in ["http://a.example", "http://c.example:80", "null"] {
            let other = HeaderValue::from_static(other);
            assert_eq!(origins.allowed(Some(&other)), None, "{other:?}");
        }
        assert_eq!(origins.allowed(None), None);
    }

    #[test]
    fn what_is_not_an_origin_is_refused() {
        for bad in [
            "a.example",
            "ftp://a.example",
            "http://a.example/path",
            "http://a.example/",
            "http://",
        ] {
            assert!(CorsOrigins::parse(bad).is_err(), "{bad}");
        }
        let too_many = vec!["http://a.example"; MAX_CORS_ORIGINS + 1].join(",");
        assert!(CorsOrigins::parse(&too_many).is_err());
    }
}
