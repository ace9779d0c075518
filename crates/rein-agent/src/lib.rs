//! Rein's agent: the model ↔ tools event loop with hooks, interventions, interrupts, retries,
//! limits, cancellation, streaming and conversation management.
//!
//! ```
//! use rein_agent::{Agent, AgentEvent};
//! use rein_core::ToolHandle;
//! use rein_models::{ScriptedModel, ScriptedResponse};
//! use futures_util::StreamExt;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein_core::Error> {
//! let model = ScriptedModel::builder()
//!     .tool_use("t1", "clock", json!({}))
//!     .text("It is noon.")
//!     .build();
//! let clock = ToolHandle::from_fn("clock", "The time.", json!({"type": "object"}),
//!     |_, _| async { Ok("12:00".into()) });
//! let mut agent = Agent::builder().model(model).tool(clock).build()?;
//! let mut events = agent.stream("What time is it?");
//! while let Some(event) = events.next().await {
//!     if let AgentEvent::Finished(result) = event? {
//!         assert_eq!(result.text(), "It is noon.");
//!     }
//! }
//! # Ok(()) }
//! ```

mod agent;
mod agent_tool;
mod builder;
mod cancel;
mod checkpoint;
mod conversation;
mod handoff;
mod history;
mod inject;
pub mod journal;
pub mod judge;
mod persist;
mod retry;
mod run;
mod schema_cache;
mod session;
mod simple_schema;
mod stream;
mod structured;
pub mod telemetry;
mod tokens;
mod tools;

pub use agent::{Agent, CANCELLED_BY_USER, DEFAULT_STREAM_HOLD_BACK, Input, Limits, OnRetryLimit};
pub use agent_tool::AgentTool;
pub use builder::{AgentBuilder, ConversationBuilder};
pub use cancel::CancelHandle;
pub use checkpoint::{
    CHECKPOINT_VERSION, Checkpoint, ParkedInjection, Pause, PausedRun, PendingHandoff,
    PendingInterrupt, QueuedInjection, ResponsePause, ToolsPause,
};
pub use conversation::{
    ConversationManager, HistoryEdit, NoConversationManager, SUMMARY_INSTRUCTIONS, SlidingWindow,
    SummarizingWindow, SummaryRequest, TRUNCATED_TOOL_RESULT, TokenWindow,
};
pub use handoff::Handoff;
pub use history::{TOOL_CANCELLED, TOOL_INTERRUPTED};
pub use inject::{InjectError, PendingInjection, TurnInterceptor};
pub use rein_core::{Error, result::AgentResult};
pub use retry::RetryStrategy;
pub use session::SessionBinding;
pub use stream::{AgentEvent, AgentStream};
pub use structured::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_OUTPUT_RETRIES, FINAL_ANSWER_TOOL, OutputStrategy,
};
pub use tokens::{TOKEN_CALIBRATION_KEY, TokenEstimator};
pub use tools::ToolExecutor;
