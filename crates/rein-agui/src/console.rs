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

pub(crate) async fn page() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE)
}

pub(crate) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}
