//! The seam a durable execution engine plugs into: a run's non-deterministic steps — each model
//! call and each tool call — go through a [`Journal`], which runs a step once and records its
//! result, or, when the engine replays a run after a crash, returns the recorded result without
//! running the step again.
//!
//! The agent decides everything else (hooks, interventions, the audit) from those results, so a
//! replay that is fed the same results reaches the same point. `rein-restate` implements the
//! trait on Restate; the agent's own crates know no engine.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use rein_agent::{Agent, journal::{Journal, JournalStep}};
//! use rein_core::{Error, tool::BoxFuture};
//! use rein_models::ScriptedModel;
//! use serde_json::Value;
//!
//! /// Records every step's result in memory (a real engine writes them durably).
//! #[derive(Default)]
//! struct Recorder(Arc<Mutex<Vec<Value>>>);
//!
//! impl Journal for Recorder {
//!     fn step(&self, _step: JournalStep, run: BoxFuture<'static, Value>)
//!         -> BoxFuture<'static, Result<Value, Error>> {
//!         let log = self.0.clone();
//!         Box::pin(async move {
//!             let value = run.await;
//!             log.lock().unwrap().push(value.clone());
//!             Ok(value)
//!         })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Error> {
//! let recorder = Recorder::default();
//! let log = recorder.0.clone();
//! let mut agent = Agent::builder()
//!     .model(ScriptedModel::builder().text("Hello.").build())
//!     .journal(recorder)
//!     .build()?;
//! agent.invoke("Hi").await?;
//! assert_eq!(log.lock().unwrap().len(), 1); // one model call
//! # Ok(()) }
//! ```

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::{FutureExt as _, StreamExt as _};
use rein_core::{
    Error, Map, Message, ModelError, ToolHandle,
    error::ModelErrorKind,
    id::InjectionId,
    interrupt::Interrupt,
    message::{ToolResultContent, ToolResultStatus},
    state::AgentState,
    stream::StreamEvent,
    tool::{BoxFuture, ToolContext, ToolError, ToolOutput},
};
use rein_models::{ModelRequest, ModelStream, SharedModel};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a run's non-deterministic steps are recorded (see the [module docs](self)).
///
/// The agent calls [`step`](Journal::step) for every model call and every tool call, in a
/// deterministic order: a journaled agent runs its tools one after another, whatever its
/// [`ToolExecutor`](crate::ToolExecutor). The recorded values are JSON the agent encodes and
/// decodes itself; a journal stores them as they are.
pub trait Journal: Send + Sync + 'static {
    /// Runs `run` and records its value — or returns the value recorded for this step by an
    /// earlier execution of the run, without polling `run`. An error (the engine cannot record,
    /// or it is cancelling the run) fails the step: the model call fails with a non-retryable
    /// error, the tool call with an error result.
    fn step(
        &self,
        step: JournalStep,
        run: BoxFuture<'static, Value>,
    ) -> BoxFuture<'static, Result<Value, Error>>;

    /// Messages injected into the run from outside the process, taken at a turn boundary
    /// (SPEC §5), each with the id it was given when it was accepted. Taking them is itself a
    /// journaled step: a replay gets the same messages. The default takes none.
    fn injections(&self) -> BoxFuture<'static, Result<Vec<(InjectionId, Message)>, Error>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

/// What a journaled step is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalStep {
    /// Model call or tool call.
    pub kind: StepKind,
    /// The model id, or the tool's name and tool-use id (`name:tool_use_id`): for the engine's
    /// logs and UI.
    pub name: String,
}

/// The kinds of journaled steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepKind {
    /// A model call: its whole stream of events, or the error that ended it.
    ModelCall,
    /// A tool call: its output or error, the interrupts it raised and the agent state it left.
    ToolCall,
}

/// A journal shared by an agent's runs (and the agents running as its tools).
#[derive(Clone)]
pub(crate) struct SharedJournal(Arc<dyn Journal>);

impl SharedJournal {
    pub(crate) fn new(journal: impl Journal) -> Self {
        Self(Arc::new(journal))
    }
}

impl std::ops::Deref for SharedJournal {
    type Target = dyn Journal;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for SharedJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

/// A model call as recorded: every event of its stream, then the error that ended it, if any.
#[derive(Serialize, Deserialize)]
struct ModelCallRecord {
    events: Vec<StreamEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ModelError>,
}

/// Starts a model call through the journal: the live call is read to its end inside the step,
/// and the recorded events are streamed to the agent as the model would have.
pub(crate) async fn model_call(
    journal: &dyn Journal,
    model: &SharedModel,
    model_id: &str,
    request: ModelRequest,
) -> Result<ModelStream, ModelError> {
    let model = model.clone();
    let run = async move {
        let mut record = ModelCallRecord {
            events: Vec::new(),
            error: None,
        };
        // A panicking model is recorded as a failed call: a panic inside the engine's step
        // would fail the step again on every retry.
        let panicked = |panic: Box<dyn std::any::Any + Send>| {
            let message = rein_core::error::panic_message(&*panic);
            ModelError::new(
                ModelErrorKind::Other,
                format!("the model panicked: {message}"),
            )
        };
        match AssertUnwindSafe(async { model.stream(request).await })
            .catch_unwind()
            .await
        {
            Ok(Ok(mut stream)) => loop {
                match AssertUnwindSafe(stream.next()).catch_unwind().await {
                    Ok(Some(Ok(ev))) => record.events.push(ev),
                    Ok(Some(Err(e))) => {
                        record.error = Some(e);
                        break;
                    }
                    Ok(None) => break,
                    Err(panic) => {
                        record.error = Some(panicked(panic));
                        break;
                    }
                }
            },
            Ok(Err(e)) => record.error = Some(e),
            Err(panic) => record.error = Some(panicked(panic)),
        }
        serde_json::to_value(&record).unwrap_or(Value::Null)
    };
    let step = JournalStep {
        kind: StepKind::ModelCall,
        name: model_id.to_owned(),
    };
    let value = journal
        .step(step, Box::pin(run))
        .await
        .map_err(|e| ModelError::new(ModelErrorKind::Other, format!("journal: {e}")))?;
    let record: ModelCallRecord = serde_json::from_value(value).map_err(|e| {
        ModelError::new(
            ModelErrorKind::Other,
            format!("journal: a recorded model call does not decode: {e}"),
        )
    })?;
    let tail = record.error.map(Err);
    let events = record.events.into_iter().map(Ok).chain(tail);
    Ok(Box::pin(futures_util::stream::iter(events)))
}

/// A tool call as recorded.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ToolCallRecord {
    Output {
        status: ToolResultStatus,
        content: Vec<ToolResultContent>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        interrupts: Vec<Interrupt>,
        /// The agent state after the call, when the call changed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_state: Option<Map>,
    },
    Error {
        message: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        interrupts: Vec<Interrupt>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_state: Option<Map>,
    },
    Panic {
        message: String,
    },
}

/// How a journaled tool call ended, as the tool phase sees it.
pub(crate) enum ToolCallEnd {
    Ran(Result<ToolOutput, ToolError>),
    Panicked(String),
}

/// Runs a tool call through the journal. On a replay the interrupts the tool raised and the
/// agent state it left are put back where the live call left them.
pub(crate) async fn tool_call(
    journal: &dyn Journal,
    tool: ToolHandle,
    input: Value,
    tcx: &ToolContext,
    agent_state: &AgentState,
) -> ToolCallEnd {
    let call_cx = tcx.clone();
    let state = agent_state.clone();
    let name = format!("{}:{}", tcx.tool_name(), tcx.tool_use_id());
    let run = async move {
        let before = state.snapshot();
        // The call is inside the future: a sync tool panicking while creating it is caught.
        let cx = call_cx.clone();
        let ran = AssertUnwindSafe(async move { tool.call(input, cx).await })
            .catch_unwind()
            .await;
        let after = state.snapshot();
        let agent_state = (after != before).then_some(after);
        let interrupts = call_cx.raised_interrupts();
        let record = match ran {
            Ok(Ok(out)) => ToolCallRecord::Output {
                status: out.status,
                content: out.content,
                interrupts,
                agent_state,
            },
            Ok(Err(e)) => ToolCallRecord::Error {
                message: e.message().to_owned(),
                interrupts,
                agent_state,
            },
            Err(panic) => ToolCallRecord::Panic {
                message: rein_core::error::panic_message(&*panic).to_owned(),
            },
        };
        serde_json::to_value(&record).unwrap_or(Value::Null)
    };
    let step = JournalStep {
        kind: StepKind::ToolCall,
        name,
    };
    let record = match journal.step(step, Box::pin(run)).await {
        Ok(value) => match serde_json::from_value::<ToolCallRecord>(value) {
            Ok(record) => record,
            Err(e) => {
                return ToolCallEnd::Ran(Err(ToolError::msg(format!(
                    "journal: a recorded tool call does not decode: {e}"
                ))));
            }
        },
        Err(e) => return ToolCallEnd::Ran(Err(ToolError::msg(format!("journal: {e}")))),
    };
    // Live, the tool raised its interrupts on this context and changed the state itself; on a
    // replay it did not run, so the record puts both back.
    let restore = |interrupts: Vec<Interrupt>, saved: Option<Map>| {
        if tcx.raised_interrupts().is_empty() {
            for i in interrupts {
                tcx.raise_interrupt(i);
            }
        }
        if let Some(saved) = saved {
            agent_state.replace(saved);
        }
    };
    match record {
        ToolCallRecord::Output {
            status,
            content,
            interrupts,
            agent_state,
        } => {
            restore(interrupts, agent_state);
            ToolCallEnd::Ran(Ok(ToolOutput::new(status, content)))
        }
        ToolCallRecord::Error {
            message,
            interrupts,
            agent_state,
        } => {
            restore(interrupts, agent_state);
            ToolCallEnd::Ran(Err(ToolError::msg(message)))
        }
        ToolCallRecord::Panic { message } => ToolCallEnd::Panicked(message),
    }
}
