//! Rein's core types: messages and content blocks (Bedrock-Converse JSON), tool specs and the
//! [`Tool`] trait, normalized model stream events, lifecycle event types, and errors.
//!
//! This crate has no async runtime and no HTTP client: it is the contract that hooks, handlers,
//! models and the agent share.
//!
//! ```
//! use rein_core::{ContentBlock, Message};
//! let m = Message::from_json(r#"{"role":"user","content":[{"text":"hi"}]}"#).unwrap();
//! assert_eq!(m.content, vec![ContentBlock::Text("hi".into())]);
//! assert!(Message::from_json(r#"{"role":"user","content":[{"video":{}}]}"#).is_err());
//! ```

mod audit;
mod error;
mod events;
mod ids;
mod interrupt;
mod message;
mod request;
mod result;
mod state;
mod stream;
mod tool;

/// A JSON object.
pub type Map = serde_json::Map<String, serde_json::Value>;

pub use audit::{DecisionAction, DecisionOutcome, DecisionRecord, EventKind, OnError};
pub use error::{BoxError, BuildError, Error, ModelError, ModelErrorKind};
pub use events::{
    AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent,
    BeforeModelCallEvent, BeforeToolCallEvent, Cancel, InvocationContext, MessageAddedEvent,
    MessageUpdatedEvent, ModelCallVerdict, ToolCallAction, ToolCallVerdict, ToolResultVerdict,
};
pub use ids::{
    InjectionId, InvocationId, MessageId, before_tool_call_interrupt_id, canonical_json, name_uuid,
    tool_call_fingerprint, tool_call_interrupt_id,
};
pub use interrupt::{Interrupt, InterruptAnswer, InterruptAnswers};
pub use message::{
    Bytes, ContentBlock, DocumentBlock, ImageBlock, InterruptResponse, MediaSource, Message,
    ReasoningContent, ReasoningText, Role, ToolResult, ToolResultContent, ToolResultStatus,
    ToolUse,
};
pub use request::{
    InferenceConfig, ModelRequest, ToolChoice, append_user_blocks, append_user_text,
};
pub use result::{
    AgentResult, CycleMetrics, InjectionOutcome, InjectionRecord, InvocationMetrics, ToolMetrics,
};
pub use state::{AgentState, InvocationState};
pub use stream::{
    BlockDelta, BlockStart, ModelResponse, StopReason, StreamAssembler, StreamEvent, StreamMetrics,
    Usage,
};
pub use tool::{
    BoxFuture, InterruptRaised, Tool, ToolContext, ToolError, ToolHandle, ToolOutput, ToolSpec,
};
