//! Rein's contract: what hooks, intervention handlers, models, tools and the agent share. No
//! async runtime, no HTTP client.
//!
//! A module a concept: [`message`] (messages and content blocks, Bedrock-Converse JSON),
//! [`stream`] (normalized model stream events and their assembly), [`request`] (what a model
//! call sends), [`event`] (the lifecycle events hooks and handlers see, and the verdicts the loop
//! acts on), [`tool`] (the [`Tool`] trait and its context), [`interrupt`] (pauses for human
//! input), [`audit`] (decision records), [`result`] (an invocation's result and metrics),
//! [`state`], [`id`], [`error`]. The root re-exports the few names nearly every user needs.
//!
//! ```
//! use rein_core::{ContentBlock, Message};
//! let m = Message::from_json(r#"{"role":"user","content":[{"text":"hi"}]}"#).unwrap();
//! assert_eq!(m.content, vec![ContentBlock::Text("hi".into())]);
//! assert!(Message::from_json(r#"{"role":"user","content":[{"video":{}}]}"#).is_err());
//! ```

pub mod audit;
pub mod error;
pub mod event;
pub mod id;
pub mod interrupt;
pub mod message;
pub mod request;
pub mod result;
pub mod state;
pub mod stream;
pub mod tool;

/// A JSON object.
pub type Map = serde_json::Map<String, serde_json::Value>;

// The names nearly every user of the contract needs; everything else is in its module.
pub use error::{Error, ModelError};
pub use message::{ContentBlock, Message, ProviderState, Role, ToolResult, ToolUse};
pub use tool::{Tool, ToolHandle};
