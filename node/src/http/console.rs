//! The web console (issue 38): static pages served at `/ui/` on the client port, compiled into the
//! binary so a member needs nothing else installed and works offline. The pages are plain HTML,
//! CSS and JavaScript modules in `node/console/`, with no build step, so what is committed is what
//! is served. They talk to the member through the same client API as any other client (and the
//! same auth: the token lives in the page's memory), so the console can do nothing the API would
//! refuse.
//!
//! Any path under `/ui/` that is not an asset is answered with the console's page, which routes by
//! the path itself: `/ui/keys?prefix=a/` names a page and a key, can be shared, and the back button
//! works. Assets are served with an ETag (a hash of their bytes) and revalidated on every load, and
//! with a content security policy that lets them load nothing from elsewhere.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::state::ApiState;
use crate::backend::KvBackend;

/// One file of the console.
pub struct ConsoleAsset {
    /// Its path under `/ui/`.
    pub path: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        ConsoleAsset {
            path: $path,
            content_type: $content_type,
            bytes: include_bytes!(concat!("../../console/", $path)),
        }
    };
}

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// Every file of the console. `index.html` is the page every other path gets.
pub static CONSOLE_ASSETS: &[ConsoleAsset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("js/main.js", JAVASCRIPT),
    asset!("js/api.js", JAVASCRIPT),
    asset!("js/dom.js", JAVASCRIPT),
    asset!("js/bytes.js", JAVASCRIPT),
    asset!("js/values.js", JAVASCRIPT),
    asset!("js/diff.js", JAVASCRIPT),
    asset!("js/chart.js", JAVASCRIPT),
    asset!("js/signin.js", JAVASCRIPT),
    asset!("js/cluster.js", JAVASCRIPT),
    asset!("js/keys.js", JAVASCRIPT),
    asset!("js/history.js", JAVASCRIPT),
    asset!("js/conflicts.js", JAVASCRIPT),
    asset!("js/watch.js", JAVASCRIPT),
    asset!("js/leases.js", JAVASCRIPT),
];

/// The console loads its own files and talks to its own member, nothing else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'none'";

pub fn routes<B: KvBackend>() -> Router<ApiState<B>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(console_page))
        .route("/ui/{*path}", get(console_file))
}

async fn console_page(request_headers: HeaderMap) -> Response {
    serve_asset(index_page(), &request_headers)
}

async fn console_file(Path(path): Path<String>, request_headers: HeaderMap) -> Response {
    match CONSOLE_ASSETS.iter().find(|asset| asset.path == path) {
        Some(asset) => serve_asset(asset, &request_headers),
        // A file the console does not have is a 404; any other path is a page of the console.
        None if looks_like_a_file(&path) => StatusCode::NOT_FOUND.into_response(),
        None => serve_asset(index_page(), &request_headers),
    }
}

fn looks_like_a_file(path: &str) -> bool {
    path.starts_with("js/")
        || path
            .rsplit('/')
            .next()
            .is_some_and(|name| name.contains('.'))
}

fn index_page() -> &'static ConsoleAsset {
    CONSOLE_ASSETS
        .iter()
        .find(|asset| asset.path == "index.html")
        .expect("the console has an index page")
}

fn serve_asset(asset: &'static ConsoleAsset, request_headers: &HeaderMap) -> Response {
    let etag = etag_of(asset);
    let mut headers = HeaderMap::new();
    headers.insert(header::ETAG, etag.clone());
    // Revalidate every time: a member upgraded in place serves its new console at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    let unchanged = request_headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|seen| seen == etag);
    if unchanged {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    (StatusCode::OK, headers, asset.bytes).into_response()
}

/// The asset's ETag: a 64-bit FNV-1a hash of its bytes, computed once per asset.
fn etag_of(asset: &'static ConsoleAsset) -> HeaderValue {
    static ETAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    let etags = ETAGS.get_or_init(|| {
        CONSOLE_ASSETS
            .iter()
            .map(|asset| {
                let hash = asset
                    .bytes
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
                    });
                HeaderValue::from_str(&format!("\"{hash:016x}\"")).expect("hex is a header value")
            })
            .collect()
    });
    CONSOLE_ASSETS
        .iter()
        .zip(etags)
        .find(|(candidate, _)| candidate.path == asset.path)
        .map_or_else(
            || HeaderValue::from_static("\"\""),
            |(_, etag)| etag.clone(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget: the whole console under 300 KB compressed. This holds it uncompressed,
    /// which is stricter.
    const CONSOLE_BYTES_BUDGET: usize = 300 * 1024;

    #[test]
    fn the_whole_console_stays_within_its_size_budget() {
        let total: usize = CONSOLE_ASSETS.iter().map(|asset| asset.bytes.len()).sum();
        assert!(total < CONSOLE_BYTES_BUDGET, "the console is {total} bytes");
    }

    #[test]
    fn every_module_the_pages_import_is_served() {
        for asset in CONSOLE_ASSETS {
            let text = std::str::from_utf8(asset.bytes).expect("the console's files are text");
            for imported in text
                .split("from \"./")
                .skip(1)
                .chain(text.split("src=\"/ui/").skip(1))
                .chain(text.split("href=\"/ui/").skip(1))
            {
                let name = imported.split('"').next().unwrap_or_default();
                // Links to pages (`/ui/keys`) are routes, not files.
                if !looks_like_a_file(name) {
                    continue;
                }
                let path = if asset.path.starts_with("js/") && !name.contains('/') {
                    format!("js/{name}")
                } else {
                    name.to_string()
                };
                assert!(
                    CONSOLE_ASSETS.iter().any(|served| served.path == path),
                    "{} refers to {path}, which the console does not serve",
                    asset.path
                );
            }
        }
    }

    #[test]
    fn pages_and_files_are_told_apart() {
        assert!(looks_like_a_file("js/missing.js"));
        assert!(looks_like_a_file("logo.png"));
        assert!(!looks_like_a_file("keys"));
        assert!(!looks_like_a_file("history"));
    }
}
