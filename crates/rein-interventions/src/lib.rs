//! Rein's interventions: typed handlers that authorize, guide, confirm and transform what an
//! agent does.
//!
//! An [`InterventionHandler`] is a policy with a name, an error policy ([`OnError`]), a
//! [`Mode`] (enforce or shadow) and six lifecycle methods — `before_invocation`,
//! `before_model_call`, `after_model_call`, `model_output` (streamed text, opt-in),
//! `before_tool_call`, `after_tool_call` — each returning its own action type that admits only
//! the actions valid on that event:
//!
//! | action | before_invocation | before_tool_call | before_model_call | after_tool_call | after_model_call | model_output |
//! |---|---|---|---|---|---|---|
//! | `Proceed` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `Deny { reason }` | cancel | cancel | cancel | | | withhold |
//! | `Guide { feedback }` | cancel | cancel | inject | | inject + retry | |
//! | `Confirm(..)` | ask (input held) | ask | ask (request held) | ask (result held) | ask (response held) | |
//! | `Transform(edit)` | apply | apply | apply | apply | apply | apply (pending text) |
//!
//! An invalid pair (say, a deny after a tool ran) does not compile (a test checks this table,
//! the README's and the guides' against the action types). Small handlers are built
//! from closures with [`Intervention`]. An [`InterventionRegistry`] built from the handlers
//! installs one bridging callback per event into a [`rein_hooks::HookRegistry`]; the agent
//! builder does that for you. Every decision other than `Proceed`, and every handler error, is
//! recorded as a [`DecisionRecord`] on the event (and so in the invocation's audit).
//!
//! This crate re-exports what a handler author needs from `rein-core`, so a library of handlers
//! can depend on `rein-interventions` alone:
//!
//! ```
//! use rein_interventions::{
//!     AfterToolCallAction, AfterToolCallEvent, BeforeToolCallAction, BeforeToolCallEvent,
//!     Confirm, EventSet, HandlerError, InterventionContext, InterventionHandler, OnError,
//!     ToolResultContent, json,
//! };
//!
//! /// Asks a human before any `delete_*` tool runs, unless the caller's invocation state
//! /// says the user pre-approved deletions; redacts secrets from tool output.
//! pub struct DeleteGuard;
//!
//! impl InterventionHandler for DeleteGuard {
//!     fn name(&self) -> &str {
//!         "delete-guard"
//!     }
//!
//!     fn on_error(&self) -> OnError {
//!         OnError::Deny // fail closed
//!     }
//!
//!     fn subscriptions(&self) -> EventSet {
//!         EventSet::BEFORE_TOOL_CALL | EventSet::AFTER_TOOL_CALL
//!     }
//!
//!     async fn before_tool_call(
//!         &self,
//!         event: &BeforeToolCallEvent,
//!         cx: &InterventionContext,
//!     ) -> Result<BeforeToolCallAction, HandlerError> {
//!         let tool = &event.tool_use().name;
//!         if !tool.starts_with("delete_") {
//!             return Ok(BeforeToolCallAction::Proceed);
//!         }
//!         // A payload for the approval UI: the question, and the call's input as JSON.
//!         let mut confirm = Confirm::new(json!({
//!             "prompt": format!("Allow {tool}?"),
//!             "input": event.tool_use().input,
//!         }));
//!         if let Some(pre) = cx.invocation_state().get("approve_deletes") {
//!             confirm = confirm.with_response(pre.clone());
//!         }
//!         Ok(BeforeToolCallAction::Confirm(confirm))
//!     }
//!
//!     async fn after_tool_call(
//!         &self,
//!         event: &AfterToolCallEvent,
//!         _cx: &InterventionContext,
//!     ) -> Result<AfterToolCallAction, HandlerError> {
//!         if !event.result.text().contains("SECRET") {
//!             return Ok(AfterToolCallAction::Proceed);
//!         }
//!         Ok(AfterToolCallAction::transform(|result| {
//!             for item in &mut result.content {
//!                 if let ToolResultContent::Text(t) = item {
//!                     *t = t.replace("SECRET", "[redacted]");
//!                 }
//!             }
//!         }))
//!     }
//! }
//! ```
//!
//! The handler's types — the events and actions, [`ToolHandle`] (the selected tool),
//! [`ModelResponse`] and its [`Usage`], [`ModelError`] — are all re-exported here. The
//! [`testing`] module runs handlers over events without an agent.
//!
//! See `docs/interventions.md` in the repository for dispatch order, errors, the audit, testing
//! handlers, and how Rein differs from the Strands Agents SDK.

mod action;
pub mod approval;
#[cfg(feature = "cedar")]
pub mod cedar;
mod closure;
mod decision;
#[cfg(test)]
mod doc_tables;
mod error;
mod event;
mod handler;
mod list;
mod pass;
#[cfg(feature = "pii")]
pub mod pii;
#[cfg(feature = "policy")]
pub mod policy;
mod registry;
mod set;
mod shared;
pub mod testing;

pub use action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, Confirm, IntoHandlerResult, ModelOutputAction, ToolResultDraft,
    ToolUseDraft, Transform,
};
pub use closure::Intervention;
pub use error::HandlerError;
pub use handler::{InterventionContext, InterventionHandler, Mode, Recheck, RecheckAnswer};
pub use registry::{InterventionRegistry, InterventionRegistryBuilder};
pub use set::EventSet;
pub use shared::SharedHandler;

// What a handler author needs from rein-core, so depending on this crate alone is enough.
pub use rein_core::{
    ContentBlock, Error, Map, Message, ModelError, Role, ToolHandle, ToolResult, ToolUse,
    audit::{
        AnswerSource, Confirmation, ConfirmationStatus, DecisionAction, DecisionOutcome,
        DecisionRecord, EventKind, OnError,
    },
    error::{BuildError, ModelErrorKind},
    event::{
        AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent,
        BeforeModelCallEvent, BeforeToolCallEvent, Cancel, InvocationContext, ModelOutputEvent,
    },
    id::InvocationId,
    interrupt::{Approval, Interrupt, InterruptAnswer, InterruptAnswers},
    message::{ToolResultContent, ToolResultStatus},
    request::{InferenceConfig, ModelRequest, ToolChoice},
    state::{AgentState, InvocationState, RunState, RunStateError},
    stream::{ModelResponse, StopReason, StreamMetrics, Usage},
    tool::ToolSpec,
};
pub use serde_json::{self, Value, json};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../../docs/interventions.md")]
struct InterventionsGuide;

#[cfg(all(doctest, feature = "policy"))]
#[doc = include_str!("../../../docs/policies.md")]
struct PoliciesGuide;
