//! The JSON shapes of the ingress operations: what a `curl`, a web UI or [`Client`](crate::Client)
//! sends and gets back (documented in `docs/durable-execution.md`).

use rein_core::{
    ContentBlock, Message, Role,
    id::{InjectionId, MessageId},
    interrupt::Interrupt,
    message::InterruptResponse,
    result::AgentResult,
    stream::{StopReason, Usage},
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /ReinAgent/{session}/invoke`: new input for the session's agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InvokeRequest {
    /// The user's text (joined to `messages`, after them, when both are given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Messages, in Rein's (Bedrock Converse) JSON: user messages of text, images and
    /// documents only (the history is the session's: a caller cannot add assistant turns, tool
    /// uses or tool results to it).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "user_messages"
    )]
    pub messages: Vec<Message>,
    /// Invocation state from the caller: only the keys the worker allows
    /// (`Worker::caller_state_keys`); the principal comes from the worker's authenticator,
    /// never from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// Run after the run going on, if any, instead of being refused (409 `RunInProgress`):
    /// the request then waits in Restate's queue for that run to end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue: bool,
    /// Restate's `idempotency-key` header, not part of the body: [`Client`](crate::Client)
    /// sends it, and the same key again (within Restate's retention, 24 h by default) gets the
    /// first call's answer instead of running again. A raw HTTP caller sets the header itself.
    #[serde(skip)]
    pub idempotency_key: Option<String>,
}

impl InvokeRequest {
    /// A request with the user's text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// The same request, run after the run going on instead of refused (`"queue": true`).
    pub fn queued(mut self) -> Self {
        self.queue = true;
        self
    }

    /// The same request with an invocation state.
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// The same request with an idempotency key (sent as Restate's `idempotency-key` header):
    /// sent again with the same key, it gets the first run's report, and runs once.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// `POST /ReinAgent/{session}/resume`: answers to the session's pending interrupts. On the
/// wire (camelCase: the Rust field `interrupt_id` is `interruptId`):
///
/// ```json
/// {"answers": [{"interruptId": "v1:before_tool_call:del-1:…#5f1c",
///               "fingerprint": "…", "response": {"approved": true}}]}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResumeRequest {
    /// One answer per interrupt: `interruptId` is the id a resume names
    /// (`Interrupt::resume_id`: the interrupt's `id`, then `#` and its `nonce` when it has
    /// one); `fingerprint`, for an interrupt bound to an action, the one it carries (answered
    /// without it, or with another, it is refused with 409; `Interrupt::answer` makes such an
    /// answer). An approval is `true`, `false`, `{"approved": true|false}` or
    /// `{"approved": true, "edit": ..., "note": ...}` (SPEC §3.10) and nothing else (400).
    pub answers: Vec<InterruptResponse>,
    /// Restate's `idempotency-key` header, not part of the body (as
    /// [`InvokeRequest::idempotency_key`](InvokeRequest#structfield.idempotency_key)).
    #[serde(skip)]
    pub idempotency_key: Option<String>,
}

impl ResumeRequest {
    /// Answers.
    pub fn new(answers: Vec<InterruptResponse>) -> Self {
        Self {
            answers,
            idempotency_key: None,
        }
    }

    /// The same request with an idempotency key (sent as Restate's `idempotency-key` header):
    /// sent again with the same key — a retry after a timeout — it gets the first resume's
    /// report instead of a 409 (nothing pending any more), and the run resumes once.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// How a run ended, as the ingress reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunReport {
    /// The session.
    pub session: String,
    /// Why the run stopped; `interrupt` means it waits for [`ResumeRequest`] answers.
    pub stop_reason: StopReason,
    /// The final message's text.
    pub text: String,
    /// The typed answer (SPEC §13), checked, when the agent has an output type and gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The interrupts waiting for answers (empty unless `stop_reason` is `interrupt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupts: Vec<Interrupt>,
    /// Token usage of the run.
    pub usage: Usage,
    /// What became of each message injected into the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injections: Vec<InjectionReport>,
    /// The decision audit (Rein's `DecisionRecord` JSON).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<Value>,
    /// The run failed with this error; the history was kept valid and saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunReport {
    /// A report of nothing but the session and the last message's text.
    pub(crate) fn empty(session: &str, last: Option<&Message>) -> Self {
        Self {
            session: session.to_owned(),
            stop_reason: StopReason::EndTurn,
            text: last.map(Message::text).unwrap_or_default(),
            output: None,
            interrupts: Vec::new(),
            usage: Usage::default(),
            injections: Vec::new(),
            decisions: Vec::new(),
            error: None,
        }
    }

    pub(crate) fn of(session: &str, result: &AgentResult) -> Self {
        Self {
            session: session.to_owned(),
            stop_reason: result.stop_reason,
            text: result.text(),
            output: result.output.clone(),
            interrupts: result.interrupts.clone(),
            usage: result.usage,
            injections: result
                .injections
                .iter()
                .map(|r| InjectionReport {
                    id: r.id,
                    status: match r.outcome {
                        rein_core::result::InjectionOutcome::Consumed => InjectionStatus::Consumed,
                        _ => InjectionStatus::Rejected,
                    },
                    reason: r.reason.clone(),
                })
                .collect(),
            decisions: result
                .decisions
                .iter()
                .filter_map(|d| serde_json::to_value(d).ok())
                .collect(),
            error: None,
        }
    }
}

/// `POST /ReinInbox/{session}/inject`: a message for the session's running (or paused) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InjectRequest {
    /// The message (a plain string is a user message): a user message of text, images and
    /// documents only.
    #[serde(deserialize_with = "message_or_text")]
    pub message: Message,
    /// A key of the sender's: the same key again is the same injection (its first id and
    /// status are returned; nothing is queued twice). [`Client`](crate::Client) sends it as
    /// Restate's `idempotency-key` header too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl InjectRequest {
    /// A user message.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            message: Message::user(text.into()),
            idempotency_key: None,
        }
    }

    /// The same request with an idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

fn message_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum MessageOrText {
        Text(String),
        Message(Message),
    }
    let message = match MessageOrText::deserialize(d)? {
        MessageOrText::Text(t) => Message::user(t),
        MessageOrText::Message(m) => m,
    };
    user_content(&message).map_err(serde::de::Error::custom)?;
    Ok(message)
}

fn user_messages<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Message>, D::Error> {
    let messages = Vec::<Message>::deserialize(d)?;
    for message in &messages {
        user_content(message).map_err(serde::de::Error::custom)?;
    }
    Ok(messages)
}

/// What a caller may put into a session's history: a user message of text, images and
/// documents. An assistant message, a tool use or result, reasoning or an interrupt answer
/// would let the caller write the agent's side of the conversation (a tool "result" it never
/// produced, an approval that went around `resume`).
pub(crate) fn user_content(message: &Message) -> Result<(), String> {
    if message.role != Role::User {
        return Err("only user messages are accepted from callers".into());
    }
    if message.content.is_empty() {
        return Err("a message needs content".into());
    }
    for block in &message.content {
        match block {
            ContentBlock::Text(_) | ContentBlock::Image(_) | ContentBlock::Document(_) => {}
            ContentBlock::ToolUse(_) => return Err("a caller cannot send a tool use".into()),
            ContentBlock::ToolResult(_) => return Err("a caller cannot send a tool result".into()),
            ContentBlock::ReasoningContent(_) => {
                return Err("a caller cannot send model reasoning".into());
            }
            ContentBlock::InterruptResponse(_) => {
                return Err("answers to interrupts go through `resume`".into());
            }
            _ => return Err("only text, images and documents are accepted from callers".into()),
        }
    }
    Ok(())
}

/// An injected message's id (given at acceptance) and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InjectionReport {
    /// Its id.
    pub id: InjectionId,
    /// Where it stands.
    pub status: InjectionStatus,
    /// Why it was rejected: `stale`, `run ended`, or a handler's deny / guidance text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where an injected message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InjectionStatus {
    /// Accepted, waiting for the run's next turn boundary.
    Queued,
    /// Taken by the run at a turn boundary; its outcome is on the way (settled once the run's
    /// report is back).
    Delivered,
    /// Admitted into the conversation.
    Consumed,
    /// Not delivered (see the reason).
    Rejected,
}

/// `GET`-like reads of a session (`/ReinAgent/{session}/session`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionView {
    /// The messages, with their ids.
    pub messages: Vec<(MessageId, Message)>,
    /// Interrupts waiting for answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Interrupt>,
    /// The report of the last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunReport>,
}
