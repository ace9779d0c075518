//! What a handler's failure is.

use std::fmt;

use rein_core::error::BoxError;

/// A handler's failure: what its method returned as an error, a failing transform edit or
/// `evaluate`, or a panic. What happens next is the handler's [`OnError`](rein_core::audit::OnError) policy.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it, so `?` works in handler
/// bodies; [`HandlerError::new`] makes one from a message. (Like `anyhow::Error`, it does not
/// implement `std::error::Error` itself, which is what makes that blanket conversion possible.)
pub struct HandlerError {
    message: String,
    source: Option<BoxError>,
}

impl HandlerError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// The message (what `DENIED: Handler threw: <error>` and the audit show).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, when the handler returned one.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    pub(crate) fn from_panic(payload: Box<dyn std::any::Any + Send>) -> Self {
        let text = rein_core::error::panic_message(&*payload);
        Self::new(format!("handler panicked: {text}"))
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self {
            message: error.to_string(),
            source: Some(Box::new(error)),
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}
