//! Agents as tools (SPEC §9): an agent runs as a tool of another, its stream, usage and
//! decisions reaching the parent tagged with its path, and its interrupts — at any depth —
//! stopping the parent, answered at the top and resumed exactly where the child stopped.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use rein_core::{
    Error, Tool,
    audit::DecisionRecord,
    interrupt::Interrupt,
    message::InterruptResponse,
    result::AgentResult,
    stream::{StopReason, Usage},
    tool::{ToolContext, ToolError, ToolOutput, ToolSpec},
};
use serde_json::{Value, json};

use crate::agent::{Agent, Input};
use crate::checkpoint::{Checkpoint, PausedRun, PendingInterrupt};
use crate::journal::SharedJournal;
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
    pub fn with_input_schema(mut self, schema: impl Into<Arc<Value>>) -> Self {
        self.spec.input_schema = schema.into();
        self
    }
}

impl From<AgentTool> for rein_core::ToolHandle {
    fn from(tool: AgentTool) -> Self {
        Self::new(tool)
    }
}

/// The id at the parent of a child's interrupt.
fn parent_interrupt_id(tool_use_id: &str, child_id: &str) -> String {
    format!("v1:agent:{tool_use_id}:{child_id}")
}

/// The capability of a tool that runs an agent ([`Tool::capability`]): the driver gives its
/// call the parent link (the checkpoint to resume from, the stream, the journal, where usage
/// and decisions go) and does not journal the call as one step: the agent journals its own.
pub(crate) struct RunsAgent;

impl Tool for AgentTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn capability(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        Some(&RunsAgent)
    }

    async fn call(&self, input: Value, cx: ToolContext) -> Result<ToolOutput, ToolError> {
        let link = cx.extension::<ParentLink>();
        let mut agent = (self.factory)()
            .map_err(|e| ToolError::msg(format!("the sub-agent cannot be built: {e}")))?;
        let path = agent.name().to_owned();
        let request = match link.and_then(ParentLink::resume) {
            Some(checkpoint) => {
                agent.restore(checkpoint);
                // The answers given at the top for this child's interrupts go down to it — an
                // answer bound to a fingerprint only to the interrupt asked about that very
                // fingerprint (an answer kept from an earlier pause approves nothing new).
                let responses: Vec<InterruptResponse> = agent
                    .pending_interrupts()
                    .into_iter()
                    .flat_map(PausedRun::pending)
                    .map(|p| &p.interrupt)
                    .filter_map(|i| {
                        let id = parent_interrupt_id(cx.tool_use_id(), &i.id);
                        let answer = match &i.fingerprint {
                            Some(f) => cx.answer_bound(&id, f),
                            None => cx.answer(&id),
                        }?;
                        Some(i.answer(answer.clone()))
                    })
                    .collect();
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

/// Hands the paused child's checkpoint to the parent, with its interrupts as the parent
/// raises them: namespaced ids and names, placed where the child raised them, under this tool
/// use.
fn pause(agent: &Agent, path: &str, cx: &ToolContext, link: Option<&ParentLink>) -> ToolError {
    let Some(paused) = agent.pending_interrupts() else {
        return ToolError::msg(format!("sub-agent '{path}' stopped without its interrupts"));
    };
    let Some(link) = link else {
        return ToolError::msg(format!(
            "sub-agent '{path}' waits for a human, but runs outside an agent that can keep it"
        ));
    };
    let tool_use_id = cx.tool_use_id();
    let interrupts = paused
        .pending()
        .iter()
        .map(|p| {
            let i = &p.interrupt;
            let mut raised = Interrupt::new(
                parent_interrupt_id(tool_use_id, &i.id),
                format!("{path}/{}", i.name),
                i.reason.clone(),
            )
            .with_tool_use_id(tool_use_id);
            if let Some(f) = &i.fingerprint {
                raised = raised.with_fingerprint(f.clone());
            }
            PendingInterrupt::new(p.point.clone().under(tool_use_id), raised)
        })
        .collect();
    link.save(PausedChild {
        checkpoint: agent.checkpoint(),
        interrupts,
    });
    ToolError::from(SubAgentPaused {
        path: path.to_owned(),
    })
}

/// What an [`AgentTool`] returns when its sub-agent waits for a human: the parent pauses on
/// the sub-agent's interrupts, its checkpoint taken from the link (a typed outcome, not a
/// message the parent would have to recognize).
#[derive(Debug)]
pub(crate) struct SubAgentPaused {
    path: String,
}

impl fmt::Display for SubAgentPaused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sub-agent '{}' waits for a human", self.path)
    }
}

impl std::error::Error for SubAgentPaused {}

impl SubAgentPaused {
    /// Whether a tool's error says its sub-agent paused.
    pub(crate) fn is(e: &ToolError) -> bool {
        e.source().is_some_and(|s| s.is::<Self>())
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
            AgentEvent::SubAgent { agent, event } => forward(
                parent,
                AgentEvent::SubAgent {
                    agent: format!("{path}/{agent}"),
                    event,
                },
            ),
            event => forward(
                parent,
                AgentEvent::SubAgent {
                    agent: path.to_owned(),
                    event: Box::new(event),
                },
            ),
        }
    }
    result.ok_or(Error::Internal("the sub-agent ended without a result"))
}

/// Queues a sub-agent's event on its parent's stream; progress reports coalesced there as in
/// the sub-agent's own stream (a flood stays one event per tool use).
fn forward(parent: &Sink, event: AgentEvent) {
    if Sink::is_progress(&event) {
        parent.progress(None, event);
    } else {
        parent.push(event);
    }
}

/// A sub-agent that paused: its checkpoint, and its interrupts as its parent raises them.
pub(crate) struct PausedChild {
    pub(crate) checkpoint: Checkpoint,
    pub(crate) interrupts: Vec<PendingInterrupt>,
}

/// What the agent running a tool offers an [`AgentTool`] (through the tool context): the
/// checkpoint it left when it paused, a way to leave it again, the parent's stream, and where
/// its usage and decisions go.
pub(crate) struct ParentLink {
    resume: Option<Checkpoint>,
    sink: Sink,
    /// The parent run's journal: the child's model and tool calls are steps of the same run.
    journal: Option<SharedJournal>,
    reports: Mutex<Reports>,
}

#[derive(Default)]
struct Reports {
    paused: Option<PausedChild>,
    usage: Vec<(String, Usage)>,
    decisions: Vec<DecisionRecord>,
}

impl ParentLink {
    pub(crate) fn new(
        resume: Option<Checkpoint>,
        sink: Sink,
        journal: Option<SharedJournal>,
    ) -> Self {
        Self {
            resume,
            sink,
            journal,
            reports: Mutex::default(),
        }
    }

    fn resume(&self) -> Option<Checkpoint> {
        self.resume.clone()
    }

    fn reports(&self) -> std::sync::MutexGuard<'_, Reports> {
        self.reports.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn save(&self, child: PausedChild) {
        self.reports().paused = Some(child);
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

    /// The sub-agent, if it paused, and the usage and decisions it reported.
    pub(crate) fn take(
        &self,
    ) -> (
        Option<PausedChild>,
        Vec<(String, Usage)>,
        Vec<DecisionRecord>,
    ) {
        let mut r = self.reports();
        (
            r.paused.take(),
            std::mem::take(&mut r.usage),
            std::mem::take(&mut r.decisions),
        )
    }
}
