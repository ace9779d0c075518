//! The approval console: a static page and its script, served from the crate (no build step).
//!
//! The script is a small hand-written client of the AG-UI wire protocol (POST a
//! `RunAgentInput`, read the SSE events, resume with `resume` entries) rather than a bundle of
//! `@ag-ui/client`: that bundle is 470 KB minified and brings rxjs, zod and protobuf code under
//! three licences, for a page that needs a few dozen lines of the protocol. The protocol itself
//! is checked against the official client by the crate's Node tests.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("../assets/console.html");
const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");

/// The page loads its own script and style and talks to its own origin; nothing inline, no
/// frames around it (an Approve button under another site's overlay is clickjacking).
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, PAGE_POLICY),
            // The page's URL may carry the token: it is never cached.
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
}

pub(crate) async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE)
}

pub(crate) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}
