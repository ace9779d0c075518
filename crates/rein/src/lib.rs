//! Rein: an agent SDK for Rust whose headline feature is **interventions** — typed handlers
//! that authorize, guide, confirm and transform what an agent does.
//!
//! This facade re-exports the Rein crates; most programs need only the [`prelude`]. Its package
//! is `rein-agents` (`rein-agents = "0.1"` in `Cargo.toml`; `rein` on crates.io is an unrelated
//! crate), its library `rein`; the `rein` command is the package `rein-cli`.
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

/// Serve an agent to browsers over AG-UI, with human approvals on a web page (feature `agui`;
/// guide: docs/web.md).
#[cfg(feature = "agui")]
pub use rein_agui as agui;

/// Durable agents on Restate: a worker serving them, a typed client of Restate's ingress
/// (feature `restate`; guide: docs/durable-execution.md).
#[cfg(feature = "restate")]
pub use rein_restate as restate;

pub use rein_agent::{
    Agent, AgentBuilder, AgentEvent, AgentStream, AgentTool, CancelHandle, ConversationBuilder,
    Handoff, Input, Limits, OnRetryLimit, OutputStrategy, RetryStrategy, SlidingWindow,
    SummarizingWindow, TokenEstimator, TokenWindow, ToolExecutor,
};
pub use rein_core::{
    Error, Message, ToolHandle,
    result::{AgentResult, OutputError},
    stream::StopReason,
};

/// The names most programs use.
pub mod prelude {
    pub use rein_agent::{
        Agent, AgentEvent, AgentTool, CancelHandle, Handoff, Input, OutputStrategy, RetryStrategy,
        ToolExecutor,
    };
    pub use rein_core::{
        ContentBlock, Message, Role, Tool, ToolHandle,
        event::{
            AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent,
            BeforeModelCallEvent, BeforeToolCallEvent, Cancel, MessageAddedEvent, ModelOutputEvent,
        },
        interrupt::Approval,
        message::InterruptResponse,
        result::{AgentResult, OutputError},
        stream::StopReason,
        tool::{ToolContext, ToolError, ToolOutput, ToolProgress, ToolSpec},
    };
    pub use rein_hooks::{HookOrder, HookRegistry, Plugin};
    pub use rein_interventions::{
        AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
        BeforeToolCallAction, Confirm, DecisionAction, DecisionOutcome, DecisionRecord, EventSet,
        HandlerError, Intervention, InterventionContext, InterventionHandler, Mode,
        ModelOutputAction, OnError, Transform,
    };
    pub use rein_models::{
        ConversationModel, FallbackModel, LimitedModel, Model, RateLimiter, ScriptedModel,
        ScriptedResponse,
    };
    pub use rein_sessions::{FileSessionStore, SessionError, SessionManager, SessionStore};

    #[cfg(feature = "macros")]
    pub use rein_macros::{intervention, tool};
}

/// `#[tool]`: turns a function into a tool (feature `macros`, on by default).
///
/// ```
/// use rein::prelude::*;
/// use serde_json::json;
///
/// /// Adds two numbers.
/// #[tool]
/// fn add(a: f64, b: f64) -> f64 {
///     a + b
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), rein::Error> {
/// let model = ScriptedModel::builder()
///     .tool_use("t1", "add", json!({"a": 2, "b": 3}))
///     .text("2 + 3 = 5")
///     .build();
/// let mut agent = Agent::builder().model(model).tool(Add).build()?;
/// let result = agent.invoke("What is 2 + 3?").await?;
/// assert_eq!(result.text(), "2 + 3 = 5");
/// # Ok(()) }
/// ```
#[cfg(feature = "macros")]
pub use rein_macros::tool;

/// `#[intervention]`: an `impl` block of lifecycle methods becomes an intervention handler, the
/// shortest named handler (feature `macros`, on by default). See
/// [`rein_macros::intervention`] for its attributes.
///
/// ```
/// use rein::prelude::*;
///
/// pub struct ToolGuard {
///     blocked: Vec<String>,
/// }
///
/// #[intervention(name = "tool-guard")]
/// impl ToolGuard {
///     fn before_tool_call(&self, ev: &BeforeToolCallEvent) -> BeforeToolCallAction {
///         let name = &ev.tool_use().name;
///         if self.blocked.contains(name) {
///             BeforeToolCallAction::deny(format!("Tool '{name}' is not allowed"))
///         } else {
///             BeforeToolCallAction::Proceed
///         }
///     }
/// }
///
/// let agent = Agent::builder()
///     .model(ScriptedModel::builder().text("ok").build())
///     .intervention(ToolGuard { blocked: vec!["delete_file".into()] })
///     .build()?;
/// # Ok::<(), rein::Error>(())
/// ```
#[cfg(feature = "macros")]
pub use rein_macros::intervention;

/// MCP (Model Context Protocol): use an MCP server's tools as Rein tools (feature `mcp`;
/// `mcp-http` adds the Streamable-HTTP transport); serve Rein tools to MCP clients behind the
/// interventions (feature `mcp-server`; `mcp-server-http` adds Streamable HTTP,
/// `mcp-server-agent` serves an agent as a tool).
#[cfg(feature = "mcp")]
pub use rein_mcp as mcp;

/// What the code generated by [`tool`] refers to. Not public API: it may change in any release.
#[cfg(feature = "macros")]
#[doc(hidden)]
pub mod __private {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

// The guides in docs/ are compiled and run as doc tests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/agent.md")]
struct AgentGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/coming-from-strands.md")]
struct ComingFromStrandsGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/hooks.md")]
struct HooksGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct Readme;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/steering-a-running-agent.md")]
struct SteeringGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/context.md")]
struct ContextGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sessions.md")]
struct SessionsGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/human-in-the-loop.md")]
struct HumanInTheLoopGuide;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/multi-agent.md")]
struct MultiAgentGuide;
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../../../docs/structured-output.md")]
struct StructuredOutputGuide;
#[cfg(all(doctest, feature = "agui"))]
#[doc = include_str!("../../../docs/web.md")]
struct WebGuide;
#[cfg(all(doctest, feature = "restate"))]
#[doc = include_str!("../../../docs/durable-execution.md")]
struct DurableExecutionGuide;
// docs/providers.md runs as rein-models' doc tests (it needs rein-models alone).
#[cfg(all(doctest, feature = "macros", feature = "mcp-http"))]
#[doc = include_str!("../../../docs/tools.md")]
struct ToolsGuide;
#[cfg(all(
    doctest,
    feature = "mcp-server-http",
    feature = "mcp-server-agent",
    feature = "policy"
))]
#[doc = include_str!("../../../docs/mcp.md")]
struct McpGuide;
