//! Handoffs (SPEC §9.2): an agent transfers control of the conversation to another agent it
//! names. The model asks through a transfer tool (`transfer_to_<agent>`), which the agent's
//! interventions see as any tool call; the run goes on, from the next turn boundary, with the
//! other agent's model, system prompt, tools, hooks and interventions over the same history.

use std::any::Any;
use std::sync::Arc;

use rein_core::{
    Message, Role, Tool,
    tool::{ToolContext, ToolError, ToolOutput, ToolSpec},
};
use serde_json::{Value, json};

use crate::agent::Agent;

/// What the agent taking over continues with, from the conversation so far.
pub(crate) type InputFilter = Arc<dyn Fn(&[Message]) -> Vec<Message> + Send + Sync>;

/// An agent another may hand the conversation to, with how (SPEC §9.2).
///
/// ```
/// use rein_agent::{Agent, Handoff};
/// use rein_models::ScriptedModel;
/// let refunds = Agent::builder()
///     .name("refunds")
///     .model(ScriptedModel::builder().build())
///     .build()
///     .unwrap();
/// let triage = Agent::builder()
///     .model(ScriptedModel::builder().build())
///     .handoff(
///         Handoff::to(refunds)
///             .description("Hand refund requests to the refunds team.")
///             // The refunds agent sees the user's words only.
///             .input_filter(|history| {
///                 history.iter().filter(|m| m.role == rein_core::Role::User && m.tool_results().next().is_none()).cloned().collect()
///             }),
///     )
///     .build()
///     .unwrap();
/// assert!(triage.tool_names().contains(&"transfer_to_refunds"));
/// ```
pub struct Handoff {
    pub(crate) agent: Agent,
    pub(crate) description: Option<String>,
    pub(crate) input_filter: Option<InputFilter>,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("to", &self.agent.name())
            .field("description", &self.description)
            .field("input_filter", &self.input_filter.is_some())
            .finish()
    }
}

impl Handoff {
    /// A handoff to `agent`.
    pub fn to(agent: Agent) -> Self {
        Self {
            agent,
            description: None,
            input_filter: None,
        }
    }

    /// The transfer tool's description: what the model reads to decide when to hand off
    /// (default `Transfer the conversation to the agent '<name>'.`).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Rewrites the conversation when control passes (the stored history becomes what the
    /// filter returns). A filter whose result is not a valid history — empty, two messages of
    /// one role in a row, a tool use without its results, not ending with the user's turn — is
    /// not applied (logged).
    pub fn input_filter(
        mut self,
        filter: impl Fn(&[Message]) -> Vec<Message> + Send + Sync + 'static,
    ) -> Self {
        self.input_filter = Some(Arc::new(filter));
        self
    }
}

impl From<Agent> for Handoff {
    fn from(agent: Agent) -> Self {
        Self::to(agent)
    }
}

/// Whether `messages` can go on as a conversation: not empty, roles alternating, every tool
/// use answered by the next message, the user's turn last.
pub(crate) fn is_valid_history(messages: &[Message]) -> bool {
    let alternates = messages.windows(2).all(|w| w[0].role != w[1].role);
    let answered = messages.iter().enumerate().all(|(i, m)| {
        m.tool_uses().all(|u| {
            messages
                .get(i + 1)
                .is_some_and(|next| next.tool_results().any(|r| r.tool_use_id == u.tool_use_id))
        })
    });
    let user_last = messages.last().is_some_and(|m| m.role == Role::User);
    alternates && answered && user_last
}

/// The name under which a handoff is recorded in the audit.
pub(crate) const HANDOFF: &str = "rein:handoff";

/// The name of the tool that hands off to `agent`.
pub(crate) fn transfer_tool_name(agent: &str) -> String {
    format!("transfer_to_{agent}")
}

/// The capability of a tool whose call asks for a handoff ([`Tool::capability`]): the driver
/// claims the handoff before the call (one per tool phase, within the limit; refused, the
/// tool does not run) and carries it out at the next turn boundary.
pub(crate) struct HandoffTo {
    pub(crate) target: Arc<str>,
    /// What the agent taking over continues with.
    pub(crate) input_filter: Option<InputFilter>,
}

/// The transfer tool: its call is the model asking for the handoff.
pub(crate) struct TransferTool {
    spec: ToolSpec,
    handoff: HandoffTo,
}

impl TransferTool {
    pub(crate) fn new(
        target: Arc<str>,
        description: Option<&str>,
        input_filter: Option<InputFilter>,
    ) -> Self {
        let description = description.map_or_else(
            || format!("Transfer the conversation to the agent '{target}'."),
            str::to_owned,
        );
        let spec = ToolSpec::new(
            transfer_tool_name(&target),
            description,
            json!({"type": "object", "properties": {}}),
        );
        Self {
            spec,
            handoff: HandoffTo {
                target,
                input_filter,
            },
        }
    }
}

impl Tool for TransferTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, _input: Value, _cx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(transferred_text(&self.handoff.target)))
    }

    fn capability(&self) -> Option<&(dyn Any + Send + Sync)> {
        Some(&self.handoff)
    }
}

/// The result of a transfer tool that goes through.
pub(crate) fn transferred_text(target: &str) -> String {
    format!("Transferred to {target}.")
}
