//! Helpers shared by the provider test files.
#![allow(clippy::unwrap_used)]

use futures_util::StreamExt as _;
use rein_core::{
    ModelError,
    request::ModelRequest,
    stream::{ModelResponse, StreamAssembler, StreamEvent},
};
use rein_models::Model;

/// Runs one call and collects its events, stopping at the first error (after which the stream
/// must end).
pub(crate) async fn collect<M: Model>(
    model: &M,
    req: ModelRequest,
) -> (Vec<StreamEvent>, Option<ModelError>) {
    drain(model.stream(req).await).await
}

/// [`collect`] from the call's result (a `SharedModel`'s, say).
pub(crate) async fn drain(
    call: Result<rein_models::ModelStream, ModelError>,
) -> (Vec<StreamEvent>, Option<ModelError>) {
    let mut s = match call {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut events = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(e) => events.push(e),
            Err(e) => {
                assert!(s.next().await.is_none(), "the stream ends after its error");
                return (events, Some(e));
            }
        }
    }
    (events, None)
}

/// Assembles events that must make a response.
pub(crate) fn assemble(events: &[StreamEvent]) -> ModelResponse {
    let mut a = StreamAssembler::new();
    for e in events {
        a.push(e.clone()).unwrap();
    }
    a.finish().unwrap()
}

/// One call's reply as the agent stores it, through JSON as every session store and the
/// journal keep it; `Err` when the call failed.
pub(crate) async fn stored_reply<M: Model>(
    model: &M,
    req: ModelRequest,
) -> Result<rein_core::Message, ModelError> {
    let (events, err) = collect(model, req).await;
    if let Some(e) = err {
        return Err(e);
    }
    let message = assemble(&events).message;
    Ok(serde_json::from_str(&serde_json::to_string(&message).unwrap()).unwrap())
}
