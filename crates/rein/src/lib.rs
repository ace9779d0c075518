//! Rein: an agent SDK for Rust whose headline feature is **interventions** — typed handlers
//! that authorize, guide, confirm and transform what an agent does.
//!
//! This facade re-exports the Rein crates; most programs need only the [`prelude`].
//!
//! ```
//! use rein::prelude::*;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein::Error> {
//! let model = ScriptedModel::builder()
//!     .tool_use("t1", "add", json!({"a": 2, "b": 3}))
//!     .text("2 + 3 = 5")
//!     .build();
//! let add = ToolHandle::from_sync_fn("add", "Adds two numbers.",
//!     json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
//!     |input, _cx| Ok(ToolOutput::text((input["a"].as_f64().unwrap_or(0.0)
//!         + input["b"].as_f64().unwrap_or(0.0)).to_string())));
//! let mut agent = Agent::builder().model(model).tool(add).build()?;
//! let result = agent.invoke("What is 2 + 3?").await?;
//! assert_eq!(result.text(), "2 + 3 = 5");
//! # Ok(()) }
//! ```

pub use rein_agent as agent;
pub use rein_core as core;
pub use rein_hooks as hooks;
pub use rein_interventions as interventions;
pub use rein_models as models;
pub use rein_sessions as sessions;

pub use rein_agent::{
    Agent, AgentBuilder, AgentEvent, AgentStream, CancelHandle, Input, Limits, RetryStrategy,
    SlidingWindow, ToolExecutor,
};
pub use rein_core::{AgentResult, Error, Message, StopReason, ToolHandle};

/// The names most programs use.
pub mod prelude {
    pub use rein_agent::{Agent, AgentEvent, CancelHandle, Input, RetryStrategy, ToolExecutor};
    pub use rein_core::{
        AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, AgentResult,
        BeforeInvocationEvent, BeforeModelCallEvent, BeforeToolCallEvent, Cancel, ContentBlock,
        InterruptResponse, Message, MessageAddedEvent, Role, StopReason, Tool, ToolContext,
        ToolError, ToolHandle, ToolOutput, ToolSpec,
    };
    pub use rein_hooks::{HookOrder, HookRegistry, Plugin};
    pub use rein_interventions::{
        AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
        BeforeToolCallAction, Confirm, DecisionAction, DecisionOutcome, DecisionRecord, EventSet,
        HandlerError, Intervention, InterventionContext, InterventionHandler, Mode, OnError,
        Transform,
    };
    pub use rein_models::{Model, ScriptedModel, ScriptedResponse};
}

// The guides in docs/ are compiled and run as doc tests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/agent.md")]
struct AgentGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/hooks.md")]
struct HooksGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct Readme;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/steering-a-running-agent.md")]
struct SteeringGuide;
