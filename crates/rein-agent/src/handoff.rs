//! Handoffs (SPEC §9.2): an agent transfers control of the conversation to another agent it
//! names. The model asks through a transfer tool (`transfer_to_<agent>`), which the agent's
//! interventions see as any tool call; the run goes on, from the next turn boundary, with the
//! other agent's model, system prompt, tools, hooks and interventions over the same history.

use std::collections::BTreeMap;
use std::sync::Arc;

use rein_core::{
    Tool,
    tool::{ToolContext, ToolError, ToolOutput, ToolSpec},
};
use serde_json::{Value, json};

use crate::agent::AgentCore;

/// The name under which a handoff is recorded in the audit.
pub(crate) const HANDOFF: &str = "rein:handoff";

/// The agent-state key naming the agent in control (persisted with the session, so a resume
/// in another process continues with it).
pub(crate) const ACTIVE_AGENT_KEY: &str = "rein:agent";

/// The agents of a team by name: the agent itself and every agent it can hand off to, at any
/// remove.
pub(crate) type Team = BTreeMap<Arc<str>, Arc<AgentCore>>;

/// The name of the tool that hands off to `agent`.
pub(crate) fn transfer_tool_name(agent: &str) -> String {
    format!("transfer_to_{agent}")
}

/// The transfer tool: its call is the model asking for the handoff; the driver carries it out
/// at the next turn boundary.
pub(crate) struct TransferTool {
    spec: ToolSpec,
    pub(crate) target: Arc<str>,
}

impl TransferTool {
    pub(crate) fn new(target: Arc<str>, description: Option<&str>) -> Self {
        let description = description.map_or_else(
            || format!("Transfer the conversation to the agent '{target}'."),
            str::to_owned,
        );
        let spec = ToolSpec::new(
            transfer_tool_name(&target),
            description,
            json!({"type": "object", "properties": {}}),
        );
        Self { spec, target }
    }
}

impl Tool for TransferTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, _input: Value, _cx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(transferred_text(&self.target)))
    }
}

/// The result of a transfer tool that goes through.
pub(crate) fn transferred_text(target: &str) -> String {
    format!("Transferred to {target}.")
}
