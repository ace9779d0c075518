//! Rein's model layer: the [`Model`] trait that every provider implements, its type-erased
//! twin [`SharedModel`], and [`ScriptedModel`] for tests, demos and benchmarks.
//!
//! Providers live behind cargo features of this crate.

mod model;
mod scripted;

pub use model::{Model, ModelInfo, ModelStream, SharedModel};
pub use rein_core::{
    InferenceConfig, ModelError, ModelErrorKind, ModelRequest, ModelResponse, StopReason,
    StreamAssembler, StreamEvent, ToolChoice, Usage,
};
pub use scripted::{ScriptedModel, ScriptedModelBuilder, ScriptedResponse};
