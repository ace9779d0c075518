//! The state kept while interrupts wait for answers (SPEC §4). Serializable and versioned so a
//! session store can persist it and another process can resume.

use std::collections::BTreeMap;

use rein_core::{
    Error, Map, Message, ToolResult,
    id::{InjectionId, MessageId},
    interrupt::{Interrupt, InterruptAnswer},
    message::InterruptResponse,
    state::InvocationState,
    stream::{StopReason, Usage},
};
use serde::{Deserialize, Serialize};

/// The schema version written by this release.
pub const PENDING_SCHEMA_VERSION: u32 = 1;

/// Interrupts waiting for answers, and what a resume needs to finish the tool cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingInterrupts {
    /// Schema version of this record.
    pub schema_version: u32,
    /// The interrupts waiting for answers.
    pub interrupts: Vec<Interrupt>,
    /// Answers given so far (by interrupt id), kept until the tool cycle completes.
    #[serde(default)]
    pub answers: BTreeMap<String, InterruptAnswer>,
    /// The id of the stored assistant message holding the tool uses.
    pub assistant_message_id: MessageId,
    /// That message.
    pub assistant_message: Message,
    /// Results of the tool uses that already finished.
    #[serde(default)]
    pub completed_results: Vec<ToolResult>,
    /// Results of tools that ran and wait for an answer before the model sees them
    /// (AfterToolCall interrupts); on resume they go through AfterToolCall again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_results: Vec<ToolResult>,
    /// The invocation state to resume with when the resume gives none.
    #[serde(default)]
    pub invocation_state: InvocationState,
    /// The model call index at which the tools were requested.
    #[serde(default)]
    pub model_call_index: u32,
    /// The run's state (hooks' and handlers' [`RunState`](rein_core::state::RunState)), restored
    /// on resume.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub run_state: Map,
    /// A model response held for answers (AfterModelCall interrupts): not stored, its tool uses
    /// not run; `assistant_message` is its message (not in history). On resume it goes through
    /// AfterModelCall again; the model is not called again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_response: Option<HeldResponse>,
    /// A model call waiting for answers before it is sent (BeforeModelCall interrupts): on
    /// resume its BeforeModelCall pass runs again with the answers, then the call is made.
    /// `assistant_message` is the last stored message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held_request: bool,
    /// An input waiting for answers before it is stored (BeforeInvocation interrupts): on
    /// resume it goes through BeforeInvocation again with the answers. `assistant_message` is
    /// its last message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_input: Vec<Message>,
    /// What interrupted tools saved to resume from, by tool use id — for an agent running as
    /// a tool, its own pending state and history (so nested interrupts resume durably).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_states: BTreeMap<String, serde_json::Value>,
    /// Messages injected into the run and not yet delivered when it paused: a paused run has not
    /// ended, so they are delivered at the first turn boundary after the resume (SPEC §5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_injections: Vec<QueuedInjection>,
    /// Messages injected into the run and parked on a `Confirm` (SPEC §5) when it paused, with
    /// their interrupts and the answers given so far: restored into the interceptor, they are
    /// delivered at the first turn boundary after their approval, also in another process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parked_injections: Vec<ParkedInjection>,
    /// A handoff the paused tool phase asked for (its transfer tool ran): carried out when the
    /// resumed phase completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<PendingHandoff>,
}

/// A handoff asked for by a transfer tool, not yet carried out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingHandoff {
    /// The agent to hand off to.
    pub to: String,
    /// The transfer tool's use.
    pub tool_use_id: String,
}

impl PendingHandoff {
    /// A handoff to `to`, asked for by the tool use `tool_use_id`.
    pub fn new(to: impl Into<String>, tool_use_id: impl Into<String>) -> Self {
        Self {
            to: to.into(),
            tool_use_id: tool_use_id.into(),
        }
    }
}

/// A message injected into a paused run, waiting for the resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueuedInjection {
    /// Its id (the one `inject` returned).
    pub id: InjectionId,
    /// The message.
    pub message: Message,
}

impl QueuedInjection {
    /// A queued message.
    pub fn new(id: InjectionId, message: Message) -> Self {
        Self { id, message }
    }
}

/// A message injected into the run and parked until a human answers its interrupts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParkedInjection {
    /// Its id (the one `inject` returned).
    pub id: InjectionId,
    /// The message (as edited by an answer, if one carried an edit).
    pub message: Message,
    /// What is asked (ids `v1:before_invocation:<injection id>:<uuid5(OID, handler)>`).
    pub interrupts: Vec<Interrupt>,
    /// Answers given so far, by interrupt id, with the fingerprint of what they answered.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answers: BTreeMap<String, InterruptAnswer>,
}

impl ParkedInjection {
    /// A parked message waiting for answers to `interrupts`.
    pub fn new(id: InjectionId, message: Message, interrupts: Vec<Interrupt>) -> Self {
        Self {
            id,
            message,
            interrupts,
            answers: BTreeMap::new(),
        }
    }

    /// With the answers given so far.
    pub fn with_answers(mut self, answers: BTreeMap<String, InterruptAnswer>) -> Self {
        self.answers = answers;
        self
    }
}

/// A model response waiting for a human's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HeldResponse {
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// What the call used (counted in the invocation that paused).
    #[serde(default)]
    pub usage: Usage,
    /// How many times the turn's model call had been retried at a hook's request (the resume
    /// goes on counting towards `max_hook_retries` from there).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hook_retries: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl PendingInterrupts {
    /// The pending interrupt a resume names with `resume_id` (its
    /// [`Interrupt::resume_id`]: the id with this pause's nonce).
    pub fn interrupt(&self, resume_id: &str) -> Option<&Interrupt> {
        self.interrupts.iter().find(|i| i.resume_id() == resume_id)
    }

    /// The pending interrupt `response` answers, if the answer is bound to what it asks about:
    /// `UnknownInterrupt` when no pending interrupt has its resume id (an answer to another
    /// pause), `FingerprintMismatch` when it names another fingerprint or none.
    pub(crate) fn answered_by(&self, response: &InterruptResponse) -> Result<&Interrupt, Error> {
        let interrupt = self
            .interrupt(&response.interrupt_id)
            .ok_or_else(|| Error::UnknownInterrupt(response.interrupt_id.clone()))?;
        interrupt.check_bound(response)?;
        Ok(interrupt)
    }

    /// Whether the pause is in a tool phase: `assistant_message` is stored and its tool uses
    /// wait (not a held input, request or response).
    pub fn holds_tool_uses(&self) -> bool {
        self.held_response.is_none() && !self.held_request && self.held_input.is_empty()
    }
}
