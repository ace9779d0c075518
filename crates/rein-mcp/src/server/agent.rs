//! A Rein agent served as an MCP tool (feature `server-agent`): its input a prompt, its output
//! the answer's text, or the agent's typed answer as `structuredContent` under an
//! `outputSchema`; a Confirm inside its run asked of the MCP client.

use std::fmt;
use std::sync::Arc;

use rein_agent::{Agent, Input};
use rein_core::{
    Error, Tool, ToolHandle,
    message::ToolResultContent,
    stream::StopReason,
    tool::{ToolContext, ToolError, ToolOutput, ToolSpec},
};
use serde_json::{Value, json};

use super::{Approver, MAX_APPROVAL_ROUNDS};

type Factory = dyn Fn() -> Result<Agent, Error> + Send + Sync;

/// The output schema of a served tool whose result carries structured content (read by the
/// server through [`Tool::capability`]).
pub(crate) struct StructuredOutput {
    pub(crate) schema: Value,
}

/// A Rein agent as a tool of an [`McpServer`](super::McpServer): each call builds a fresh
/// agent from the factory and runs it on the call's `prompt`. The tool's result is the
/// answer's text; with [`output_schema`](Self::output_schema) (the schema of the agent's typed
/// answer, `AgentBuilder::output`), the typed answer is also the result's `structuredContent`.
///
/// A Confirm inside the run (the agent's own interventions) pauses it; the server asks the MCP
/// client (an elicitation, as for the server's own Confirms) and resumes it with the answer. A
/// client that cannot be asked gets the call refused, the agent stopped where it paused.
#[derive(Clone)]
pub struct ServedAgent {
    spec: ToolSpec,
    factory: Arc<Factory>,
    structured: Option<Arc<StructuredOutput>>,
}

impl fmt::Debug for ServedAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServedAgent")
            .field("name", &self.spec.name)
            .field("structured", &self.structured.is_some())
            .finish_non_exhaustive()
    }
}

impl ServedAgent {
    /// The tool `name`, input `{"prompt": string}`, running a fresh agent from `factory`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        factory: impl Fn() -> Result<Agent, Error> + Send + Sync + 'static,
    ) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "What to ask the agent."}},
            "required": ["prompt"],
        });
        Self {
            spec: ToolSpec::new(name, description, schema),
            factory: Arc::new(factory),
            structured: None,
        }
    }

    /// The JSON schema of the agent's typed answer (an object schema, as MCP requires): listed
    /// as the tool's `outputSchema`; the typed answer is the result's `structuredContent`. A
    /// run that ends without a typed answer is an error result.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.structured = Some(Arc::new(StructuredOutput { schema }));
        self
    }
}

impl From<ServedAgent> for ToolHandle {
    fn from(agent: ServedAgent) -> Self {
        Self::new(agent)
    }
}

impl Tool for ServedAgent {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn capability(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.structured
            .as_deref()
            .map(|s| s as &(dyn std::any::Any + Send + Sync))
    }

    async fn call(&self, input: Value, cx: ToolContext) -> Result<ToolOutput, ToolError> {
        let prompt = match input.get("prompt") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(ToolError::msg("`prompt` (a string) is required")),
        };
        let mut agent = (self.factory)()
            .map_err(|e| ToolError::msg(format!("the agent cannot be built: {e}")))?;
        let name = agent.name().to_owned();
        let failed = |e: Error| ToolError::msg(format!("agent '{name}' failed: {e}"));
        let mut result = agent.invoke(Input::text(prompt)).await.map_err(failed)?;
        let mut rounds = 0;
        while result.stop_reason == StopReason::Interrupt {
            let Some(approver) = cx.extension::<Approver>() else {
                return Err(ToolError::msg(format!(
                    "agent '{name}' waits for a human, and no MCP client is there to ask"
                )));
            };
            let mut responses = Vec::with_capacity(result.interrupts.len());
            for interrupt in &result.interrupts {
                rounds += 1;
                if rounds > MAX_APPROVAL_ROUNDS {
                    return Err(ToolError::msg(format!(
                        "agent '{name}' asked for more than {MAX_APPROVAL_ROUNDS} approvals"
                    )));
                }
                let approved = approver
                    .ask(interrupt)
                    .await
                    .map_err(|no| ToolError::msg(no.refusal(interrupt)))?;
                // Bound to exactly this pause and the fingerprint asked about.
                responses.push(interrupt.answer(json!({ "approved": approved })));
            }
            result = agent
                .invoke(Input::resume(responses))
                .await
                .map_err(failed)?;
        }
        let text = result.text();
        match (&self.structured, result.output) {
            (Some(_), Some(output)) => Ok(ToolOutput::new(
                rein_core::message::ToolResultStatus::Success,
                vec![ToolResultContent::Json(output)],
            )),
            (Some(_), None) => Err(ToolError::msg(format!(
                "agent '{name}' ended without its typed answer ({:?})",
                result.stop_reason
            ))),
            (None, _) => Ok(ToolOutput::text(text)),
        }
    }
}
