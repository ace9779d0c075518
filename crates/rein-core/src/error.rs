//! Errors: the core error enum and the model error type.

use std::fmt;
use std::time::Duration;

/// A boxed error from user code (a hook, a tool, a handler).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Rein's error: what an invocation, a build or a hook dispatch fails with.
///
/// Each layer keeps its own detail behind one variant: a model call's [`ModelError`], a build's
/// [`BuildError`], a session store's own error (`rein_sessions::SessionError` for Rein's stores)
/// behind [`Error::Session`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Message JSON that does not match the message model (unknown block kind, missing field ...).
    #[error("invalid message JSON: {0}")]
    InvalidMessage(String),
    /// A model stream that breaks the event grammar (a delta without a start, no message stop ...).
    #[error("malformed model stream: {0}")]
    MalformedStream(String),
    /// The model call failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A hook callback failed.
    #[error("hook failed on {event}: {source}")]
    Hook {
        /// The lifecycle event.
        event: &'static str,
        /// What the hook returned.
        #[source]
        source: BoxError,
    },
    /// An intervention handler failed and its error policy is `Throw`.
    #[error("intervention handler '{handler}' failed on {event}: {message}")]
    Handler {
        /// The handler name.
        handler: String,
        /// The lifecycle event.
        event: &'static str,
        /// The error (or panic) message.
        message: String,
    },
    /// An agent, registry, model or store could not be built from its configuration.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Interrupt responses were given while no interrupt is pending.
    #[error("no interrupts are pending: nothing to resume")]
    NoPendingInterrupts,
    /// An interrupt response names an interrupt that is not pending.
    #[error("unknown interrupt id: '{0}'")]
    UnknownInterrupt(String),
    /// A handoff names an agent the agent cannot hand off to.
    #[error("no agent named '{0}' to hand off to")]
    UnknownAgent(String),
    /// A new prompt was given while interrupts are pending (resume or discard them first).
    #[error("interrupts are pending: resume with interrupt responses or discard them first")]
    InterruptsPending,
    /// An answer that cannot be applied — an object shaped like an
    /// [`Approval`](crate::interrupt::Approval) that is not one, an edit that fails the tool's
    /// schema, an edit of something that cannot be edited. Nothing changed: the interrupts stay
    /// pending.
    #[error("invalid answer to interrupt '{interrupt_id}': {reason}")]
    InvalidAnswer {
        /// The interrupt answered.
        interrupt_id: String,
        /// What is wrong with the answer.
        reason: String,
    },
    /// An answer that does not name the fingerprint of what its interrupt asks about: none for
    /// an interrupt bound to one, or another one — the answer was given for another call (an
    /// earlier pause, a replay), or for this one before it changed. Nothing changed: the
    /// interrupts stay pending.
    #[error("the answer to interrupt '{interrupt_id}' {}", match given {
        None => "names no fingerprint: answer the interrupt itself (`Interrupt::answer`) or \
                 echo the fingerprint it carries".to_owned(),
        Some(f) => format!("approves another action (fingerprint '{f}') than the one asked about"),
    })]
    FingerprintMismatch {
        /// The interrupt answered (as the answer named it).
        interrupt_id: String,
        /// The fingerprint the answer named.
        given: Option<String>,
    },
    /// The assistant message the pending interrupts belong to is no longer in history (the
    /// history was replaced under them). The interrupts stay pending.
    #[error("the assistant message of the pending interrupts is not in history")]
    PendingMessageMissing,
    /// A checkpoint (an agent at rest, SPEC §8.1) written by a newer release: this one does not
    /// know its shape and reads nothing of it rather than misread it.
    #[error("checkpoint version {found} is newer than this release reads ({supported})")]
    CheckpointTooNew {
        /// The version found.
        found: u32,
        /// The newest version this release reads.
        supported: u32,
    },
    /// A checkpoint that is not one: malformed JSON, a field of the wrong type.
    #[error("invalid checkpoint: {0}")]
    InvalidCheckpoint(String),
    /// A session store failed. The source is the store's own error; for Rein's stores a
    /// `rein_sessions::SessionError` (its `of` finds it), e.g. a conflict with another writer.
    #[error("session store: {0}")]
    Session(#[source] BoxError),
    /// No typed answer: the model never gave a valid one within the budget, the run ended
    /// without one, or it does not fit the type asked for.
    #[error(transparent)]
    Output(Box<crate::result::OutputError>),
    /// A broken invariant inside Rein: a bug, not something the caller did.
    #[error("internal error (a bug in Rein; please report it): {0}")]
    Internal(&'static str),
}

/// Why something could not be built from its configuration: an agent, an intervention
/// registry, a model provider, a store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An agent needs a model.
    #[error("an agent needs a model")]
    MissingModel,
    /// Two tools share a name.
    #[error("duplicate tool name: '{0}'")]
    DuplicateTool(String),
    /// A tool's input schema is not a valid JSON Schema.
    #[error("tool '{tool}' has an invalid input schema: {reason}")]
    InvalidToolSchema {
        /// The tool.
        tool: String,
        /// What is wrong with the schema.
        reason: String,
    },
    /// Two plugins share a name.
    #[error("duplicate plugin name: '{0}'")]
    DuplicatePlugin(String),
    /// Two intervention handlers share a name.
    #[error("duplicate intervention handler name: '{0}'")]
    DuplicateHandler(String),
    /// Two agents an agent can hand off to (itself included) share a name.
    #[error("duplicate agent name among handoffs: '{0}'")]
    DuplicateAgent(String),
    /// A required setting is missing (`hint` says how to give it).
    #[error("{component}: no {setting}: {hint}")]
    MissingSetting {
        /// What was being built (`bedrock`, `postgres session store`, ...).
        component: &'static str,
        /// The setting.
        setting: &'static str,
        /// How to give it.
        hint: &'static str,
    },
    /// A setting has a value that cannot work. Secrets are never included.
    #[error("{component}: invalid {setting}: {reason}")]
    InvalidSetting {
        /// What was being built.
        component: &'static str,
        /// The setting (`base URL`, `header`, `region`, `API key`, ...).
        setting: &'static str,
        /// Why (the value, when it is not a secret).
        reason: String,
    },
}

/// The message of a caught panic (`panic!("...")` with a string or a formatted message), or
/// `unknown panic` for any other payload. Tools' and handlers' panics become errors with it.
///
/// ```
/// let caught = std::panic::catch_unwind(|| panic!("disk {} on fire", 2)).unwrap_err();
/// assert_eq!(rein_core::error::panic_message(&*caught), "disk 2 on fire");
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "unknown panic"
    }
}

/// What kind of failure a [`ModelError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The credentials were rejected (HTTP 401/403).
    Auth,
    /// The provider throttled the call (HTTP 429 or a throttling exception).
    Throttled,
    /// The input is larger than the model's context window.
    ContextWindowOverflow,
    /// The provider rejected the request (HTTP 400 and similar).
    BadRequest,
    /// The provider failed (HTTP 5xx).
    Server,
    /// The connection failed or dropped.
    Transport,
    /// A connect or idle timeout elapsed.
    Timeout,
    /// The stream did not follow its protocol.
    MalformedStream,
    /// The response broke a size limit of the provider (a line, an event or the whole
    /// response too large): a hostile or broken endpoint. Not retryable.
    ResponseTooLarge,
    /// The scripted model ran out of responses.
    ScriptExhausted,
    /// Anything else.
    Other,
}

/// A failed model call, classified so that retry strategies and callers can act on it.
///
/// ```
/// use std::time::Duration;
/// use rein_core::ModelError;
/// let e = ModelError::throttled("slow down").with_retry_after(Duration::from_secs(2));
/// assert!(e.is_retryable());
/// assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
/// assert!(!ModelError::context_window_overflow("too long").is_retryable());
/// ```
///
/// It serializes without its source (what a journal records of a failed call), and
/// deserializes to the same error, retryability included:
///
/// ```
/// # use rein_core::ModelError;
/// let e = ModelError::transport("reset").before_first_byte().with_status(503);
/// let back: ModelError = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
/// assert!(back.is_retryable());
/// assert_eq!((back.kind(), back.status()), (e.kind(), Some(503)));
/// ```
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ModelError {
    kind: ModelErrorKind,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after: Option<Duration>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    before_first_byte: bool,
    #[serde(skip)]
    source: Option<BoxError>,
}

impl ModelError {
    /// An error of the given kind.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            body: None,
            retry_after: None,
            before_first_byte: false,
            source: None,
        }
    }

    /// Credentials rejected.
    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Auth, message)
    }
    /// Throttled by the provider.
    pub fn throttled(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Throttled, message)
    }
    /// Context window overflow.
    pub fn context_window_overflow(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::ContextWindowOverflow, message)
    }
    /// Request rejected.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::BadRequest, message)
    }
    /// Provider failure (5xx).
    pub fn server(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Server, message)
    }
    /// Connection failure.
    pub fn transport(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Transport, message)
    }
    /// Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Timeout, message)
    }
    /// Malformed stream.
    pub fn malformed_stream(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::MalformedStream, message)
    }
    /// A response over a size limit.
    pub fn response_too_large(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::ResponseTooLarge, message)
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
    /// Keeps the provider's response body (what it said went wrong).
    pub fn with_body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }
    /// Sets the provider's `retry-after`.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }
    /// Marks a transport error as happening before the first response byte (safe to retry).
    pub fn before_first_byte(mut self) -> Self {
        self.before_first_byte = true;
        self
    }
    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ModelErrorKind {
        self.kind
    }
    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The HTTP status, when there was one.
    pub fn status(&self) -> Option<u16> {
        self.status
    }
    /// The provider's response body, when there was one.
    pub fn body(&self) -> Option<&str> {
        self.body.as_deref()
    }
    /// How long the provider asked to wait.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether retrying the same call may succeed: throttling, server errors, and connection
    /// failures before the first byte.
    pub fn is_retryable(&self) -> bool {
        match self.kind {
            ModelErrorKind::Throttled | ModelErrorKind::Server => true,
            ModelErrorKind::Transport | ModelErrorKind::Timeout => self.before_first_byte,
            _ => false,
        }
    }
    /// Whether this is a throttling error.
    pub fn is_throttled(&self) -> bool {
        self.kind == ModelErrorKind::Throttled
    }
    /// Whether the input overflowed the context window.
    pub fn is_context_window_overflow(&self) -> bool {
        self.kind == ModelErrorKind::ContextWindowOverflow
    }
    /// Whether the credentials were rejected.
    pub fn is_auth(&self) -> bool {
        self.kind == ModelErrorKind::Auth
    }
}

impl fmt::Debug for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("status", &self.status)
            .field("body", &self.body)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ModelErrorKind::Auth => "authentication failed",
            ModelErrorKind::Throttled => "throttled",
            ModelErrorKind::ContextWindowOverflow => "context window overflow",
            ModelErrorKind::BadRequest => "bad request",
            ModelErrorKind::Server => "server error",
            ModelErrorKind::Transport => "transport error",
            ModelErrorKind::Timeout => "timeout",
            ModelErrorKind::MalformedStream => "malformed stream",
            ModelErrorKind::ResponseTooLarge => "response too large",
            ModelErrorKind::ScriptExhausted => "script exhausted",
            ModelErrorKind::Other => "model error",
        };
        write!(f, "model {kind}")?;
        if let Some(s) = self.status {
            write!(f, " (HTTP {s})")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(body) = &self.body {
            let b: String = body.chars().take(500).collect();
            write!(f, ": {b}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<Error> for ModelError {
    fn from(e: Error) -> Self {
        match e {
            Error::Model(m) => m,
            Error::MalformedStream(m) => ModelError::malformed_stream(m),
            other => ModelError::new(ModelErrorKind::Other, other.to_string()),
        }
    }
}
