//! An agent at rest (SPEC §8.1): its [`Checkpoint`], and when a run waits for answers the
//! [`PausedRun`] saying where it stopped ([`Pause`]). Serializable and versioned, so a store
//! can persist it and another process resume; what earlier releases stored loads into it
//! (`legacy`), and a checkpoint of a newer release is refused with a typed error.

use std::collections::BTreeMap;
use std::sync::Arc;

use rein_core::{
    Error, Map, Message, ToolResult,
    id::{InjectionId, MessageId},
    interrupt::{Interrupt, InterruptAnswer, InterruptEvent, InterruptPoint},
    message::InterruptResponse,
    state::InvocationState,
    stream::{StopReason, Usage},
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

mod legacy;

/// The checkpoint version written by this release. Version 1 is release 0.1's records (the
/// pending interrupts of a session, a sub-agent's saved run, rein-restate's session state):
/// they load into this one. A newer version is refused ([`Error::CheckpointTooNew`]).
pub const CHECKPOINT_VERSION: u32 = 2;

/// An agent at rest: everything a process needs to go on with it.
///
/// [`Agent::checkpoint`](crate::Agent::checkpoint) takes one, [`Agent::restore`](crate::Agent::restore)
/// puts it back (in this process or another); session stores persist it.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The history, with the messages' stable ids.
    pub messages: Vec<(MessageId, Message)>,
    /// The agent's key-value state (with it the agent in control after a handoff).
    pub agent_state: Map,
    /// The conversation manager's state (`null` when there is none).
    pub conversation_manager_state: Value,
    /// The run waiting for answers, if one is.
    pub paused: Option<PausedRun>,
}

impl Checkpoint {
    /// A checkpoint of these parts.
    pub fn new(
        messages: Vec<(MessageId, Message)>,
        agent_state: Map,
        conversation_manager_state: Value,
        paused: Option<PausedRun>,
    ) -> Self {
        Self {
            messages,
            agent_state,
            conversation_manager_state,
            paused,
        }
    }

    /// Reads a checkpoint from its JSON: this release's, or one an earlier release stored
    /// (rein-restate's session state of release 0.1). A newer version is
    /// [`Error::CheckpointTooNew`]; anything else that is not a checkpoint
    /// [`Error::InvalidCheckpoint`].
    pub fn from_json(value: Value) -> Result<Self, Error> {
        match version_of(&value)? {
            1 => legacy::checkpoint(value),
            CHECKPOINT_VERSION => {
                let c: CheckpointV2 = serde_json::from_value(value).map_err(invalid)?;
                Ok(Self {
                    messages: c.messages,
                    agent_state: c.agent_state,
                    conversation_manager_state: c.conversation_manager_state,
                    paused: c.paused,
                })
            }
            found => Err(too_new(found)),
        }
    }
}

/// A run waiting for answers: where it stopped, what it asks, and what it keeps until it goes
/// on.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PausedRun {
    pub(crate) at: Pause,
    pub(crate) interrupts: Vec<PendingInterrupt>,
    /// Answers given so far (by interrupt id), bound to what they answered.
    pub(crate) answers: BTreeMap<String, InterruptAnswer>,
    pub(crate) invocation_state: InvocationState,
    /// The run's state (hooks' and handlers' `RunState`), restored on resume.
    pub(crate) run_state: Map,
    /// Injected and not yet delivered: delivered at the first turn boundary after the resume.
    pub(crate) queued_injections: Vec<QueuedInjection>,
    /// Injected and parked on a `Confirm` (SPEC §5), with their interrupts and answers.
    pub(crate) parked_injections: Vec<ParkedInjection>,
}

/// Where a paused run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "at", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Pause {
    /// BeforeInvocation holds the input: nothing of it is stored. On resume it goes through
    /// BeforeInvocation again with the answers.
    Input {
        /// The input.
        messages: Vec<Message>,
    },
    /// BeforeModelCall holds a model call: nothing was sent. On resume its BeforeModelCall
    /// pass runs again with the answers, then the call is made.
    Request {
        /// The call's index in the invocation.
        model_call_index: u32,
        /// The last stored message when it paused (the request is the history up to it).
        last_message_id: MessageId,
    },
    /// AfterModelCall holds a response: not stored, its tool uses not run. On resume it goes
    /// through AfterModelCall again; the model is not called again.
    Response(Box<ResponsePause>),
    /// The tool phase of a stored assistant message waits.
    Tools(Box<ToolsPause>),
}

/// A model response held for answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResponsePause {
    /// The response's message.
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// What the call used (counted in the invocation that paused).
    #[serde(default)]
    pub usage: Usage,
    /// How many times the turn's model call had been retried at a hook's request (the resume
    /// goes on counting towards `max_hook_retries` from there).
    #[serde(default)]
    pub hook_retries: u32,
    /// How many typed answers of the invocation had been refused (the resume goes on counting
    /// towards `max_output_retries` from there; SPEC §13).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_retries: u32,
    /// The call's index in the invocation.
    #[serde(default)]
    pub model_call_index: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A tool phase waiting for answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolsPause {
    /// The id of the stored assistant message holding the tool uses.
    pub message_id: MessageId,
    /// That message.
    pub message: Message,
    /// The model call that asked for the tools.
    #[serde(default)]
    pub model_call_index: u32,
    /// Results of the tool uses that finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completed: Vec<ToolResult>,
    /// Results of tools that ran and wait for an answer before the model sees them
    /// (AfterToolCall): on resume they go through AfterToolCall again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<ToolResult>,
    /// Agents running as tools that paused, by tool use id: each resumes from its checkpoint.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub children: BTreeMap<String, Checkpoint>,
    /// A handoff the phase asked for (its transfer tool ran), carried out when it completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<PendingHandoff>,
}

/// An interrupt waiting for its answer, with where it was raised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingInterrupt {
    /// Where it was raised.
    pub point: InterruptPoint,
    /// The interrupt as it went out (its id, resume id and fingerprint are what an answer
    /// names).
    #[serde(flatten)]
    pub interrupt: Interrupt,
}

impl PendingInterrupt {
    /// `interrupt`, raised at `point`.
    pub fn new(point: InterruptPoint, interrupt: Interrupt) -> Self {
        Self { point, interrupt }
    }

    /// `interrupt` raised at `event`, by the handler it names, about `subject`.
    pub(crate) fn at(event: InterruptEvent, subject: &str, interrupt: Interrupt) -> Self {
        let point = InterruptPoint::new(event, subject, interrupt.name.clone());
        Self { point, interrupt }
    }
}

impl PausedRun {
    pub(crate) fn new(
        at: Pause,
        interrupts: Vec<PendingInterrupt>,
        invocation_state: InvocationState,
    ) -> Self {
        Self {
            at,
            interrupts,
            answers: BTreeMap::new(),
            invocation_state,
            run_state: Map::new(),
            queued_injections: Vec::new(),
            parked_injections: Vec::new(),
        }
    }

    /// Where the run stopped.
    pub fn pause(&self) -> &Pause {
        &self.at
    }

    /// The interrupts waiting for answers, as they went out (answer each with
    /// [`Interrupt::answer`]).
    pub fn interrupts(&self) -> Vec<Interrupt> {
        self.interrupts
            .iter()
            .map(|p| p.interrupt.clone())
            .collect()
    }

    /// The interrupts waiting for answers, with where each was raised.
    pub fn pending(&self) -> &[PendingInterrupt] {
        &self.interrupts
    }

    /// Answers given so far, by interrupt id.
    pub fn answers(&self) -> &BTreeMap<String, InterruptAnswer> {
        &self.answers
    }

    /// The invocation state a resume without one goes on with.
    pub fn invocation_state(&self) -> &InvocationState {
        &self.invocation_state
    }

    /// The run's state when it paused.
    pub fn run_state(&self) -> &Map {
        &self.run_state
    }

    /// Messages injected and not yet delivered.
    pub fn queued_injections(&self) -> &[QueuedInjection] {
        &self.queued_injections
    }

    /// Messages injected and parked until a human answers their interrupts.
    pub fn parked_injections(&self) -> &[ParkedInjection] {
        &self.parked_injections
    }

    /// The pending interrupt a resume names with `resume_id` (its
    /// [`Interrupt::resume_id`]: the id with this pause's nonce).
    pub fn interrupt(&self, resume_id: &str) -> Option<&Interrupt> {
        self.find(resume_id).map(|p| &p.interrupt)
    }

    fn find(&self, resume_id: &str) -> Option<&PendingInterrupt> {
        self.interrupts
            .iter()
            .find(|p| p.interrupt.resume_id() == resume_id)
    }

    /// The pending interrupt `response` answers, if the answer is bound to what it asks about:
    /// `UnknownInterrupt` when no pending interrupt has its resume id (an answer to another
    /// pause), `FingerprintMismatch` when it names another fingerprint or none,
    /// `InvalidAnswer` when it does not match the interrupt's declared
    /// [`response_schema`](Interrupt::response_schema) (or that schema is not a valid JSON
    /// schema: closed, never any answer).
    pub(crate) fn answered_by(
        &self,
        response: &InterruptResponse,
    ) -> Result<&PendingInterrupt, Error> {
        let pending = self
            .find(&response.interrupt_id)
            .ok_or_else(|| Error::UnknownInterrupt(response.interrupt_id.clone()))?;
        pending.interrupt.check_bound(response)?;
        if let Some(schema) = &pending.interrupt.response_schema {
            check_response(schema, &response.response).map_err(|reason| Error::InvalidAnswer {
                interrupt_id: pending.interrupt.id.clone(),
                reason,
            })?;
        }
        Ok(pending)
    }

    /// Reads a paused run from its JSON: this release's, or release 0.1's pending interrupts.
    /// A newer version is [`Error::CheckpointTooNew`].
    pub fn from_json(value: Value) -> Result<Self, Error> {
        match version_of(&value)? {
            1 => legacy::paused_run(value),
            CHECKPOINT_VERSION => {
                let r: PausedRunV2 = serde_json::from_value(value).map_err(invalid)?;
                Ok(Self {
                    at: r.pause,
                    interrupts: r.interrupts,
                    answers: r.answers,
                    invocation_state: r.invocation_state,
                    run_state: r.run_state,
                    queued_injections: r.queued_injections,
                    parked_injections: r.parked_injections,
                })
            }
            found => Err(too_new(found)),
        }
    }
}

/// Checks an answer against the response schema its interrupt declares: the first error, with
/// where in the answer it is. Nothing is fetched: a schema referring elsewhere refuses. The
/// check is the process's cached one (by content), so a schema is compiled once, not per answer.
fn check_response(schema: &Value, answer: &Value) -> Result<(), String> {
    let invalid =
        |e: String| format!("the interrupt's response schema is not a valid JSON schema: {e}");
    let check = crate::schema_cache::check_for(&Arc::new(schema.clone())).map_err(invalid)?;
    let Some(validator) = check.validator_unless_accepted(answer).map_err(invalid)? else {
        return Ok(());
    };
    match validator.iter_errors(answer).next() {
        None => Ok(()),
        Some(e) => Err(format!(
            "the answer does not match the interrupt's response schema: {e} (at `{}`)",
            e.instance_path()
        )),
    }
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

// ---- The stored form (version 2) ----

/// The key of the version in every stored record (release 0.1's pending interrupts had it;
/// its other records none, and are version 1).
const VERSION_KEY: &str = "schema_version";

fn version_of(value: &Value) -> Result<u32, Error> {
    let Value::Object(map) = value else {
        return Err(Error::InvalidCheckpoint("not a JSON object".into()));
    };
    match map.get(VERSION_KEY) {
        None => Ok(1),
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| Error::InvalidCheckpoint(format!("{VERSION_KEY} is not a version"))),
    }
}

fn too_new(found: u32) -> Error {
    Error::CheckpointTooNew {
        found,
        supported: CHECKPOINT_VERSION,
    }
}

fn invalid(e: serde_json::Error) -> Error {
    Error::InvalidCheckpoint(e.to_string())
}

#[derive(Serialize)]
struct CheckpointOut<'a> {
    schema_version: u32,
    messages: &'a [(MessageId, Message)],
    #[serde(skip_serializing_if = "Map::is_empty")]
    agent_state: &'a Map,
    #[serde(skip_serializing_if = "Value::is_null")]
    conversation_manager_state: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<&'a PausedRun>,
}

#[derive(Deserialize)]
struct CheckpointV2 {
    #[serde(default)]
    messages: Vec<(MessageId, Message)>,
    #[serde(default)]
    agent_state: Map,
    #[serde(default)]
    conversation_manager_state: Value,
    #[serde(default)]
    paused: Option<PausedRun>,
}

#[derive(Serialize)]
struct PausedRunOut<'a> {
    schema_version: u32,
    pause: &'a Pause,
    interrupts: &'a [PendingInterrupt],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    answers: &'a BTreeMap<String, InterruptAnswer>,
    invocation_state: &'a InvocationState,
    #[serde(skip_serializing_if = "Map::is_empty")]
    run_state: &'a Map,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    queued_injections: &'a [QueuedInjection],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    parked_injections: &'a [ParkedInjection],
}

#[derive(Deserialize)]
struct PausedRunV2 {
    pause: Pause,
    interrupts: Vec<PendingInterrupt>,
    #[serde(default)]
    answers: BTreeMap<String, InterruptAnswer>,
    #[serde(default)]
    invocation_state: InvocationState,
    #[serde(default)]
    run_state: Map,
    #[serde(default)]
    queued_injections: Vec<QueuedInjection>,
    #[serde(default)]
    parked_injections: Vec<ParkedInjection>,
}

impl Serialize for Checkpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CheckpointOut {
            schema_version: CHECKPOINT_VERSION,
            messages: &self.messages,
            agent_state: &self.agent_state,
            conversation_manager_state: &self.conversation_manager_state,
            paused: self.paused.as_ref(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Checkpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_json(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for PausedRun {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        PausedRunOut {
            schema_version: CHECKPOINT_VERSION,
            pause: &self.at,
            interrupts: &self.interrupts,
            answers: &self.answers,
            invocation_state: &self.invocation_state,
            run_state: &self.run_state,
            queued_injections: &self.queued_injections,
            parked_injections: &self.parked_injections,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for PausedRun {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_json(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
