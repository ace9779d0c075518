//! The result of one invocation.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::audit::DecisionRecord;
use crate::id::{InjectionId, InvocationId};
use crate::interrupt::Interrupt;
use crate::message::Message;
use crate::stream::{StopReason, Usage};

/// Metrics of one model call that happened (calls cancelled by a hook record nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CycleMetrics {
    /// The model call index.
    pub model_call_index: u32,
    /// Wall time of the call.
    pub duration: Duration,
    /// Time to the first stream event.
    pub time_to_first_event: Option<Duration>,
    /// Usage reported for the call.
    pub usage: Usage,
}

/// Metrics of one tool, summed over its calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolMetrics {
    /// Calls (each retry counts).
    pub calls: u32,
    /// Calls that ended in an error result.
    pub errors: u32,
    /// Total run time.
    pub total_time: Duration,
}

/// Metrics of one invocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InvocationMetrics {
    /// One entry per model call made.
    pub cycles: Vec<CycleMetrics>,
    /// Per tool name.
    pub tools: BTreeMap<String, ToolMetrics>,
    /// Wall time of the invocation.
    pub duration: Duration,
}

/// What an invocation produced.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentResult {
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The final message (for `Interrupt`: the assistant message holding the tool uses).
    pub message: Message,
    /// Usage summed over the invocation's model calls.
    pub usage: Usage,
    /// Per-cycle and per-tool metrics.
    pub metrics: InvocationMetrics,
    /// Interrupts pending (with `StopReason::Interrupt`).
    pub interrupts: Vec<Interrupt>,
    /// The decision audit.
    pub decisions: Vec<DecisionRecord>,
    /// The invocation id.
    pub invocation_id: InvocationId,
    /// What became of the messages injected during the invocation.
    pub injections: Vec<InjectionRecord>,
    /// Usage of the agents that ran as tools of this one (at any depth), by agent path
    /// (`child`, `child/grandchild`); not in `usage`, which is this agent's own.
    pub sub_agent_usage: BTreeMap<String, Usage>,
    /// Transfers of control to another agent during the invocation, in order.
    pub handoffs: Vec<HandoffRecord>,
    /// The typed answer, validated against the agent's output schema (when it asks for one
    /// and the run ended with an answer); [`AgentResult::output`] reads it as a type.
    pub output: Option<serde_json::Value>,
}

/// A transfer of control from one agent to another (a handoff).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HandoffRecord {
    /// The agent that had control.
    pub from: String,
    /// The agent that has it now.
    pub to: String,
    /// The transfer tool's use, when the model asked for it (`None`: the caller did).
    pub tool_use_id: Option<String>,
}

impl HandoffRecord {
    /// A handoff.
    pub fn new(
        from: impl Into<String>,
        to: impl Into<String>,
        tool_use_id: Option<String>,
    ) -> Self {
        Self {
            from: from.into(),
            to: to.into(),
            tool_use_id,
        }
    }
}

/// What became of an injected message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InjectionOutcome {
    /// Admitted and added to the conversation.
    Consumed,
    /// Not delivered; the record says why.
    Rejected,
}

/// One injected message's fate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InjectionRecord {
    /// Its id.
    pub id: InjectionId,
    /// Consumed or rejected.
    pub outcome: InjectionOutcome,
    /// Why it was rejected: `stale`, `run ended`, or a deny / guidance text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl InjectionRecord {
    /// A record.
    pub fn new(id: InjectionId, outcome: InjectionOutcome, reason: Option<String>) -> Self {
        Self {
            id,
            outcome,
            reason,
        }
    }
}

impl AgentResult {
    /// A result.
    // Inlined across crates: a caller that assigns the other fields then drops no empty
    // values it was given (the run builds one per invocation).
    #[inline]
    pub fn new(stop_reason: StopReason, message: Message, invocation_id: InvocationId) -> Self {
        Self {
            stop_reason,
            message,
            usage: Usage::default(),
            metrics: InvocationMetrics::default(),
            interrupts: Vec::new(),
            decisions: Vec::new(),
            invocation_id,
            injections: Vec::new(),
            sub_agent_usage: BTreeMap::new(),
            handoffs: Vec::new(),
            output: None,
        }
    }

    /// The final message's text.
    pub fn text(&self) -> String {
        self.message.text()
    }

    /// The typed answer as `T`: [`OutputError::Missing`] when the run ended without one (a
    /// pause, a limit, a cancel, an agent that asks for none), [`OutputError::Type`] when it
    /// does not deserialize into `T` (a `T` other than the agent's output type).
    ///
    /// ```
    /// use rein_core::{Message, id::InvocationId, result::AgentResult, stream::StopReason};
    /// let mut r = AgentResult::new(StopReason::EndTurn, Message::assistant("{}"), InvocationId::new());
    /// assert!(r.output::<serde_json::Value>().is_err());
    /// r.output = Some(serde_json::json!({"n": 1}));
    /// assert_eq!(r.output::<serde_json::Value>().unwrap()["n"], 1);
    /// ```
    pub fn output<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::Error> {
        let value = self.output.as_ref().ok_or(OutputError::Missing {
            stop_reason: self.stop_reason,
        })?;
        T::deserialize(value).map_err(|e| OutputError::Type(e.to_string()).into())
    }
}

/// Why there is no typed answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The model gave no valid answer within the agent's output retries: every attempt (the
    /// first answer and each retry) failed the schema, its type, the size bound or a handler's
    /// guidance. Never a placeholder: the raw text of the last attempt and its errors.
    #[error("no valid answer after {attempts} attempts: {}", errors.join("; "))]
    Exhausted {
        /// Answers the model gave (the first one and each retry).
        attempts: u32,
        /// What was wrong with the last one.
        errors: Vec<String>,
        /// The last answer as the model gave it (cut to the size bound).
        raw: String,
    },
    /// The run ended without an answer (why: its stop reason).
    #[error("the run ended without a typed answer (stop reason {stop_reason:?})")]
    Missing {
        /// Why the run stopped.
        stop_reason: StopReason,
    },
    /// The answer does not deserialize into the type asked for.
    #[error("the answer does not fit the type asked for: {0}")]
    Type(String),
}

impl From<OutputError> for crate::Error {
    fn from(e: OutputError) -> Self {
        crate::Error::Output(Box::new(e))
    }
}
