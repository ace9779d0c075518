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
    /// Boxed, like the error id: most refusals have neither, and a small error keeps every
    /// `Result` of the request path small.
    pub(crate) details: Option<Box<Value>>,
    /// The id of a failure whose details went to the log only.
    pub(crate) error_id: Option<Box<str>>,
    /// `Retry-After` (seconds) of a 429.
    pub(crate) retry_after: Option<u64>,
}

impl ProtocolError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
            error_id: None,
            retry_after: None,
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// 429 `code`: a cap was reached; try again in `retry_after` seconds.
    pub(crate) fn too_many(
        code: &'static str,
        message: impl Into<String>,
        retry_after: u64,
    ) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, code, message);
        e.retry_after = Some(retry_after);
        e
    }

    /// 500 `INTERNAL`: the server failed (the store, building the agent). The client gets an
    /// error id to quote; what failed, which may hold a store's address or a provider's answer,
    /// goes to the log under that id only.
    pub(crate) fn internal(what: &str, error: &dyn std::fmt::Display) -> Self {
        let id = error_id();
        tracing::error!(error_id = %id, error = %error, "AG-UI request failed: {what}");
        let mut e = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            format!("{what} (error id {id}; the details are in the server's log)"),
        );
        e.error_id = Some(id.into());
        e
    }
}

/// A new id to find a failure by in the log.
pub(crate) fn error_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl IntoResponse for ProtocolError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(obj) = body.as_object_mut() {
            if let Some(d) = self.details {
                obj.insert("details".into(), *d);
            }
            if let Some(id) = self.error_id {
                obj.insert("errorId".into(), Value::String(id.into()));
            }
        }
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}
