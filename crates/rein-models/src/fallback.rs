//! [`FallbackModel`]: a chain of models tried in order, moving on by error class.

use std::fmt::Write as _;

use futures_util::{StreamExt as _, stream};
use rein_core::{
    ModelError,
    error::ModelErrorKind,
    request::ModelRequest,
    stream::{FallbackRoute, SkippedModel, StreamEvent},
};

use crate::model::{Model, ModelInfo, ModelStream, SharedModel};

/// The error kinds a chain moves on by unless told otherwise: failures of this provider now
/// (throttling or quota, a server error, a timeout, an unreachable server) that another model
/// may not share. A bad request, rejected credentials or a context overflow would fail the same
/// way on the next model, or say something the caller must fix.
const DEFAULT_FALLBACK_ON: [ModelErrorKind; 4] = [
    ModelErrorKind::Throttled,
    ModelErrorKind::Server,
    ModelErrorKind::Timeout,
    ModelErrorKind::Transport,
];

/// Models tried in order: a call that fails with an error of a fallback kind, before the
/// first event of its response, is made again on the next model.
///
/// - It moves on only before any content of a response was produced: a call that fails
///   after its first content event is returned as it failed (two models' output are never
///   spliced).
/// - It moves on by [`ModelErrorKind`]: by default throttling (429, quota), server errors
///   (5xx), timeouts and unreachable servers ([`fallback_on`](Self::fallback_on) sets them);
///   any other error is returned as it is.
/// - Its stream starts with [`StreamEvent::Fallback`]: which model answered and the ones it
///   skipped, with why (the response's [`fallback`](rein_core::stream::ModelResponse::fallback);
///   the agent records each skip as a `rein:fallback` decision).
/// - When every model fails, the error names each model's failure; its kind, status and
///   retryability are the last model's, its `retry_after` the shortest any model asked for.
///   An agent's [retries](https://docs.rs/rein-agent) then retry the whole chain: each model
///   is called at most once per attempt.
///
/// Its [`info`](Model::info) is the first model's (telemetry's `gen_ai.request.model`).
///
/// ```
/// use rein_models::{FallbackModel, Model, ScriptedModel, StreamAssembler, futures::StreamExt};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let primary = ScriptedModel::builder().model_id("primary").throttled().build();
/// let backup = ScriptedModel::builder().model_id("backup").text("hello").build();
/// let chain = FallbackModel::new(primary).with_fallback(backup);
///
/// let mut stream = chain.stream(Default::default()).await.unwrap();
/// let mut assembler = StreamAssembler::new();
/// while let Some(event) = stream.next().await {
///     assembler.push(event.unwrap()).unwrap();
/// }
/// let response = assembler.finish().unwrap();
/// let route = response.fallback.unwrap();
/// assert_eq!(route.model_id, "backup");
/// assert_eq!(route.skipped[0].model_id, "primary");
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct FallbackModel {
    models: Vec<SharedModel>,
    fallback_on: Vec<ModelErrorKind>,
}

impl FallbackModel {
    /// A chain starting with `primary`.
    pub fn new(primary: impl Into<SharedModel>) -> Self {
        Self {
            models: vec![primary.into()],
            fallback_on: DEFAULT_FALLBACK_ON.to_vec(),
        }
    }

    /// Adds `model` at the end of the chain.
    pub fn with_fallback(mut self, model: impl Into<SharedModel>) -> Self {
        self.models.push(model.into());
        self
    }

    /// The error kinds the chain moves on by (replacing the default: throttled, server,
    /// timeout, transport). Add [`ModelErrorKind::ContextWindowOverflow`] to move on to a
    /// model with a larger window.
    pub fn fallback_on(mut self, kinds: impl IntoIterator<Item = ModelErrorKind>) -> Self {
        self.fallback_on = kinds.into_iter().collect();
        self
    }

    fn moves_on(&self, error: &ModelError) -> bool {
        self.fallback_on.contains(&error.kind())
    }
}

impl Model for FallbackModel {
    fn info(&self) -> ModelInfo {
        // `new` puts one model in; nothing takes one out.
        self.models
            .first()
            .map_or_else(|| ModelInfo::new("fallback", ""), SharedModel::info)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let mut skipped = Vec::new();
        let mut errors = Vec::new();
        for model in &self.models {
            let info = model.info();
            let error = match model.stream(request.clone()).await {
                Ok(mut stream) => {
                    // A message start says nothing to the caller yet, nor does the route of a
                    // chain nested in this one: held back until the first event with content
                    // (or a failure that moves on) decides.
                    let mut held = Vec::new();
                    let mut nested = None;
                    let first = loop {
                        match stream.next().await {
                            Some(Ok(ev @ StreamEvent::MessageStart { .. })) => held.push(ev),
                            Some(Ok(StreamEvent::Fallback(route))) => nested = Some(route),
                            first => break first,
                        }
                    };
                    match first {
                        Some(Err(error)) if self.moves_on(&error) => error,
                        first => {
                            let route = match nested {
                                // One route: this chain's skips, then the nested chain's.
                                Some(inner) => {
                                    skipped.extend(inner.skipped);
                                    FallbackRoute::new(inner.provider, inner.model_id, skipped)
                                }
                                None => FallbackRoute::new(info.provider, info.model_id, skipped),
                            };
                            let head = std::iter::once(StreamEvent::Fallback(Box::new(route)))
                                .chain(held)
                                .map(Ok)
                                .chain(first);
                            return Ok(Box::pin(stream::iter(head).chain(stream)));
                        }
                    }
                }
                Err(error) if self.moves_on(&error) => error,
                Err(error) => return Err(error),
            };
            skipped.push(SkippedModel::new(info.provider, info.model_id, &error));
            errors.push(error);
        }
        Err(all_failed(&skipped, errors))
    }
}

/// The error of a chain whose every model failed: each failure named, the last one's kind.
fn all_failed(skipped: &[SkippedModel], errors: Vec<ModelError>) -> ModelError {
    let mut message = String::from("every model of the fallback chain failed");
    for (model, error) in skipped.iter().zip(&errors) {
        let _ = write!(message, "; {}/{}: {error}", model.provider, model.model_id);
    }
    let retry_after = errors.iter().filter_map(ModelError::retry_after).min();
    let Some(last) = errors.into_iter().last() else {
        return ModelError::new(ModelErrorKind::Other, message);
    };
    let mut error = ModelError::new(last.kind(), message);
    if let Some(status) = last.status() {
        error = error.with_status(status);
    }
    if let Some(after) = retry_after {
        error = error.with_retry_after(after);
    }
    if last.is_retryable() {
        // A transport failure or timeout the last model may retry happened before its first
        // byte: so did the chain's.
        error = error.before_first_byte();
    }
    error.with_source(last)
}
