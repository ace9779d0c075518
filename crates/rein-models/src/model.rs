//! The [`Model`] trait and its type-erased twin.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use rein_core::{ModelError, request::ModelRequest, stream::StreamEvent, tool::BoxFuture};

/// A stream of normalized events from one model call.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ModelError>> + Send>>;

/// What a model says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelInfo {
    /// Provider name (`openai`, `anthropic`, `bedrock`, `ollama`, `scripted`, ...).
    pub provider: String,
    /// Model id as the provider knows it.
    pub model_id: String,
    /// Host and port of the server the model calls, when it calls one (telemetry's
    /// `server.address` / `server.port`).
    pub server: Option<(String, u16)>,
}

impl ModelInfo {
    /// Model info.
    pub fn new(provider: impl Into<String>, model_id: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model_id: model_id.into(),
            server: None,
        }
    }

    /// With the host and port of the server the model calls.
    ///
    /// ```
    /// let info = rein_models::ModelInfo::new("openai", "gpt-4o").with_server("api.openai.com", 443);
    /// assert_eq!(info.server, Some(("api.openai.com".to_owned(), 443)));
    /// ```
    pub fn with_server(mut self, host: impl Into<String>, port: u16) -> Self {
        self.server = Some((host.into(), port));
        self
    }
}

/// A language model: given a request, a stream of [`StreamEvent`]s.
///
/// `stream` resolves once the call is under way (for HTTP providers: after the status line was
/// checked, so failures are typed errors before any event); the stream then yields events until
/// `MessageStop` and `Metadata`. Dropping the stream cancels the call.
///
/// ```
/// use futures_util::stream;
/// use rein_core::{ModelError, request::ModelRequest, stream::{BlockDelta, BlockStart, StopReason, StreamEvent}};
/// use rein_models::{Model, ModelInfo, ModelStream};
///
/// /// Answers every request with "pong".
/// struct Pong;
/// impl Model for Pong {
///     fn info(&self) -> ModelInfo {
///         ModelInfo::new("example", "pong-1")
///     }
///     async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ModelError> {
///         let events = vec![
///             Ok(StreamEvent::BlockStart(BlockStart::Text)),
///             Ok(StreamEvent::BlockDelta(BlockDelta::Text("pong".into()))),
///             Ok(StreamEvent::BlockStop),
///             Ok(StreamEvent::MessageStop { stop_reason: StopReason::EndTurn }),
///         ];
///         Ok(Box::pin(stream::iter(events)))
///     }
/// }
/// ```
pub trait Model: Send + Sync + 'static {
    /// Provider and model id.
    fn info(&self) -> ModelInfo;

    /// Starts one model call.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> impl Future<Output = Result<ModelStream, ModelError>> + Send;
}

/// The object-safe twin of [`Model`].
trait ErasedModel: Send + Sync {
    fn info_erased(&self) -> ModelInfo;
    fn stream_erased(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'_, Result<ModelStream, ModelError>>;
}

impl<M: Model> ErasedModel for M {
    fn info_erased(&self) -> ModelInfo {
        self.info()
    }

    fn stream_erased(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'_, Result<ModelStream, ModelError>> {
        Box::pin(self.stream(request))
    }
}

/// Any [`Model`], type-erased and shareable. Cloning is cheap.
#[derive(Clone)]
pub struct SharedModel(Arc<dyn ErasedModel>);

impl SharedModel {
    /// Wraps a model.
    pub fn new<M: Model>(model: M) -> Self {
        Self(Arc::new(model))
    }

    /// Provider and model id.
    pub fn info(&self) -> ModelInfo {
        self.0.info_erased()
    }

    /// Starts one model call.
    pub fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelStream, ModelError>> {
        self.0.stream_erased(request)
    }
}

impl fmt::Debug for SharedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.info();
        f.debug_struct("SharedModel")
            .field("provider", &info.provider)
            .field("model_id", &info.model_id)
            .finish()
    }
}

impl<M: Model> From<M> for SharedModel {
    fn from(m: M) -> Self {
        Self::new(m)
    }
}
