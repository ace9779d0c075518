//! Agents as tools (SPEC §9): an agent runs as a tool of another, its stream, usage and
//! decisions reaching the parent tagged with its path, and its interrupts — at any depth —
//! stopping the parent, answered at the top and resumed exactly where the child stopped.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use rein_core::{
    Error, Map, Message, Tool,
    audit::DecisionRecord,
    interrupt::Interrupt,
    message::InterruptResponse,
    result::AgentResult,
    stream::{StopReason, Usage},
    tool::{ToolContext, ToolError, ToolOutput, ToolSpec},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::{Agent, Input};
use crate::journal::SharedJournal;
use crate::pending::PendingInterrupts;
use crate::stream::{AgentEvent, Sink};

type Factory = dyn Fn() -> Result<Agent, Error> + Send + Sync;

/// An agent that another agent calls as a tool.
///
/// Each call builds a fresh agent from the factory and runs it on the call's input (its
/// `input` field, or the input as JSON text): the sub-agent has its own model, tools, hooks
/// and interventions, and the parent's interventions see the call as any tool call. Its final
/// text is the tool's result. Its stream events reach the parent's stream as
/// [`AgentEvent::SubAgent`], its decisions the parent's audit (with `agent` set to its path),
/// its usage the parent's `sub_agent_usage`. An interrupt inside it — a `Confirm`, at any
/// depth — stops the parent with the interrupt `v1:agent:<toolUseId>:<child interrupt id>`
/// (named `<agent>/<child name>`); the child's history and pending state are kept with the
/// parent's pending interrupts, so the resume — in another process too — continues the child
/// where it stopped.
///
/// ```
/// use rein_agent::{Agent, AgentTool};
/// use rein_models::ScriptedModel;
/// let researcher = AgentTool::new("researcher", "Researches a topic.", || {
///     Agent::builder()
///         .name("researcher")
///         .model(ScriptedModel::builder().text("three sources agree").build())
///         .build()
/// });
/// let lead = Agent::builder()
///     .model(ScriptedModel::builder().build())
///     .tool(researcher)
///     .build()
///     .unwrap();
/// assert_eq!(lead.tool_names(), ["researcher"]);
/// ```
#[derive(Clone)]
pub struct AgentTool {
    spec: ToolSpec,
    factory: Arc<Factory>,
}

impl fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl AgentTool {
    /// A tool `name` that runs a fresh agent from `factory` on its `input` (a string).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        factory: impl Fn() -> Result<Agent, Error> + Send + Sync + 'static,
    ) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
            "required": ["input"],
        });
        Self {
            spec: ToolSpec::new(name, description, schema),
            factory: Arc::new(factory),
        }
    }

    /// Another input schema; the sub-agent's prompt is then the input's `input` string field
    /// if it has one, else the whole input as JSON text.
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.spec.input_schema = schema;
        self
    }
}

impl From<AgentTool> for rein_core::ToolHandle {
    fn from(tool: AgentTool) -> Self {
        Self::new(tool)
    }
}

/// What a paused sub-agent keeps to be resumed: its history, its pending interrupts and its
/// state (saved with the parent's pending interrupts, `tool_states`).
#[derive(Serialize, Deserialize)]
struct SavedRun {
    messages: Vec<Message>,
    pending: PendingInterrupts,
    #[serde(default)]
    agent_state: Map,
}

/// The id at the parent of a child's interrupt.
fn parent_interrupt_id(tool_use_id: &str, child_id: &str) -> String {
    format!("v1:agent:{tool_use_id}:{child_id}")
}

impl Tool for AgentTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, input: Value, cx: ToolContext) -> Result<ToolOutput, ToolError> {
        let link = cx.extension::<ParentLink>();
        let mut agent = (self.factory)()
            .map_err(|e| ToolError::msg(format!("the sub-agent cannot be built: {e}")))?;
        let path = agent.name().to_owned();
        let request = match link.and_then(ParentLink::resume_state) {
            Some(state) => {
                let saved: SavedRun = serde_json::from_value(state)
                    .map_err(|e| ToolError::msg(format!("the sub-agent's saved run: {e}")))?;
                // The answers given at the top for this child's interrupts go down to it — an
                // answer bound to a fingerprint only to the interrupt asked about that very
                // fingerprint (an answer kept from an earlier pause approves nothing new).
                let responses: Vec<InterruptResponse> = saved
                    .pending
                    .interrupts
                    .iter()
                    .filter_map(|i| {
                        let id = parent_interrupt_id(cx.tool_use_id(), &i.id);
                        let answer = match &i.fingerprint {
                            Some(f) => cx.answer_bound(&id, f),
                            None => cx.answer(&id),
                        }?;
                        Some(i.answer(answer.clone()))
                    })
                    .collect();
                agent.set_messages(saved.messages, None);
                agent.state().replace(saved.agent_state);
                agent.set_pending_interrupts(Some(saved.pending));
                if responses.is_empty() {
                    // Nothing answered for it yet: it keeps waiting, as it was.
                    return Err(pause(&agent, &path, &cx, link));
                }
                Input::resume(responses)
            }
            None => {
                let prompt = match input.get("input") {
                    Some(Value::String(s)) => s.clone(),
                    _ => input.to_string(),
                };
                Input::text(prompt)
            }
        }
        .with_state(cx.invocation_state().clone());
        let request = match link.and_then(|l| l.journal.clone()) {
            Some(journal) => request.journaled_by(journal),
            None => request,
        };
        let result = match link.filter(|l| l.sink.is_enabled()) {
            Some(link) => run_streaming(&mut agent, request, &path, &link.sink).await,
            None => agent.invoke(request).await,
        }
        .map_err(|e| ToolError::msg(format!("sub-agent '{path}' failed: {e}")))?;
        if let Some(link) = link {
            link.report(&path, &result);
        }
        if result.stop_reason == StopReason::Interrupt {
            return Err(pause(&agent, &path, &cx, link));
        }
        Ok(ToolOutput::text(result.text()))
    }
}

/// Raises the paused child's interrupts at the parent, namespaced, and saves its run.
fn pause(agent: &Agent, path: &str, cx: &ToolContext, link: Option<&ParentLink>) -> ToolError {
    let Some(pending) = agent.pending_interrupts() else {
        return ToolError::msg(format!("sub-agent '{path}' stopped without its interrupts"));
    };
    let Some(link) = link else {
        return ToolError::msg(format!(
            "sub-agent '{path}' waits for a human, but runs outside an agent that can keep it"
        ));
    };
    for i in &pending.interrupts {
        let mut raised = Interrupt::new(
            parent_interrupt_id(cx.tool_use_id(), &i.id),
            format!("{path}/{}", i.name),
            i.reason.clone(),
        )
        .with_tool_use_id(cx.tool_use_id());
        if let Some(f) = &i.fingerprint {
            raised = raised.with_fingerprint(f.clone());
        }
        cx.raise_interrupt(raised);
    }
    let saved = SavedRun {
        messages: agent.messages().to_vec(),
        pending: pending.clone(),
        agent_state: agent.state().snapshot(),
    };
    match serde_json::to_value(&saved) {
        Ok(state) => {
            link.save(state);
            ToolError::msg(format!("sub-agent '{path}' waits for a human"))
        }
        Err(e) => ToolError::msg(format!("sub-agent '{path}': its run cannot be saved: {e}")),
    }
}

/// Runs the child streaming, its events forwarded to the parent's stream under its path.
async fn run_streaming(
    agent: &mut Agent,
    input: Input,
    path: &str,
    parent: &Sink,
) -> Result<AgentResult, Error> {
    let mut stream = agent.stream(input);
    let mut result = None;
    while let Some(event) = stream.next().await {
        match event? {
            AgentEvent::Finished(r) => result = Some(r),
            AgentEvent::SubAgent { agent, event } => parent.emit(|| AgentEvent::SubAgent {
                agent: format!("{path}/{agent}"),
                event,
            }),
            event => parent.emit(|| AgentEvent::SubAgent {
                agent: path.to_owned(),
                event: Box::new(event),
            }),
        }
    }
    result.ok_or(Error::Internal("the sub-agent ended without a result"))
}

/// What the agent running a tool offers an [`AgentTool`] (through the tool context): the
/// state it saved when it paused, a way to save it again, the parent's stream, and where its
/// usage and decisions go.
pub(crate) struct ParentLink {
    resume_state: Option<Value>,
    sink: Sink,
    /// The parent run's journal: the child's model and tool calls are steps of the same run.
    journal: Option<SharedJournal>,
    reports: Mutex<Reports>,
}

#[derive(Default)]
struct Reports {
    saved: Option<Value>,
    usage: Vec<(String, Usage)>,
    decisions: Vec<DecisionRecord>,
}

impl ParentLink {
    pub(crate) fn new(
        resume_state: Option<Value>,
        sink: Sink,
        journal: Option<SharedJournal>,
    ) -> Self {
        Self {
            resume_state,
            sink,
            journal,
            reports: Mutex::default(),
        }
    }

    fn resume_state(&self) -> Option<Value> {
        self.resume_state.clone()
    }

    fn reports(&self) -> std::sync::MutexGuard<'_, Reports> {
        self.reports.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn save(&self, state: Value) {
        self.reports().saved = Some(state);
    }

    /// The child's usage and decisions, tagged with its path (and its own children's under
    /// theirs).
    fn report(&self, path: &str, result: &AgentResult) {
        let mut r = self.reports();
        r.usage.push((path.to_owned(), result.usage));
        for (sub, usage) in &result.sub_agent_usage {
            r.usage.push((format!("{path}/{sub}"), *usage));
        }
        r.decisions
            .extend(result.decisions.iter().cloned().map(|mut d| {
                d.agent = Some(match d.agent.take() {
                    Some(sub) => format!("{path}/{sub}"),
                    None => path.to_owned(),
                });
                d
            }));
    }

    /// What the tool saved (if it paused), and the usage and decisions it reported.
    pub(crate) fn take(&self) -> (Option<Value>, Vec<(String, Usage)>, Vec<DecisionRecord>) {
        let mut r = self.reports();
        (
            r.saved.take(),
            std::mem::take(&mut r.usage),
            std::mem::take(&mut r.decisions),
        )
    }
}
