//! The crate's error type, and the protocol errors a request gets as HTTP 4xx JSON.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What can go wrong setting up or running the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AguiError {
    /// The listening address could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped on an I/O error.
    #[error("the server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// A setting that cannot work (a CORS origin that is not a valid header value ...).
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// A request the protocol rules refuse: answered before any run starts, so nothing changed.
#[derive(Debug)]
pub(crate) struct ProtocolError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) details: Option<Value>,
}

impl ProtocolError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

impl IntoResponse for ProtocolError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let (Some(d), Some(obj)) = (self.details, body.as_object_mut()) {
            obj.insert("details".into(), d);
        }
        (self.status, axum::Json(body)).into_response()
    }
}
