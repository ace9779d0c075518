//! The decision audit (SPEC §3.6): records of intervention decisions and handler errors.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in an invocation's lifecycle where hooks and handlers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// Before the loop starts (or before an injected message is admitted).
    BeforeInvocation,
    /// Before each model call.
    BeforeModelCall,
    /// After each model call.
    AfterModelCall,
    /// On the text of a streamed response, before it reaches the caller.
    ModelOutput,
    /// Before each tool call.
    BeforeToolCall,
    /// After each tool call.
    AfterToolCall,
    /// A message was added to history.
    MessageAdded,
    /// A stored message was rewritten.
    MessageUpdated,
    /// After the invocation ends.
    AfterInvocation,
}

impl EventKind {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BeforeInvocation => "before_invocation",
            Self::BeforeModelCall => "before_model_call",
            Self::AfterModelCall => "after_model_call",
            Self::ModelOutput => "model_output",
            Self::BeforeToolCall => "before_tool_call",
            Self::AfterToolCall => "after_tool_call",
            Self::MessageAdded => "message_added",
            Self::MessageUpdated => "message_updated",
            Self::AfterInvocation => "after_invocation",
        }
    }

    /// The deterministic id of an interrupt raised on this event about `subject` (a tool use
    /// id, say) by `name` (a handler, a hook): `v1:<event>:<subject>:<uuid5(NAMESPACE_OID,
    /// name)>` (SPEC §3.3), so a re-run finds its answer.
    ///
    /// ```
    /// use rein_core::audit::EventKind;
    /// let id = EventKind::BeforeToolCall.interrupt_id("t1", "delete-approval");
    /// assert!(id.starts_with("v1:before_tool_call:t1:"));
    /// ```
    pub fn interrupt_id(self, subject: &str, name: &str) -> String {
        format!(
            "v1:{}:{subject}:{}",
            self.as_str(),
            crate::id::name_uuid(name)
        )
    }

    /// Whether this is an After* event (hooks of equal order run in reverse registration order).
    pub fn is_after(self) -> bool {
        matches!(
            self,
            Self::AfterModelCall | Self::AfterToolCall | Self::AfterInvocation
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a handler's error does (SPEC §3.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnError {
    /// The invocation fails with a typed error naming the handler and the event.
    #[default]
    Throw,
    /// Logged; the handler is skipped (fail open).
    Proceed,
    /// Logged; applied as a deny (fail closed).
    Deny,
}

/// The decision recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionAction {
    /// A deny.
    Deny,
    /// Guidance.
    Guide,
    /// A confirmation (asked, approved or rejected).
    Confirm,
    /// A transform.
    Transform,
    /// A handler error.
    Error,
    /// No decision: the handler did not run to a decision that was applied (a member of a
    /// parallel group after the one that stopped the pass; its outcome is `NotRun`).
    None,
    /// Control passed to another agent (recorded by `rein:handoff`; the text says who to whom).
    Handoff,
    /// A proceed, recorded only when the handler attached a
    /// [`detail`](DecisionRecord::detail) to it (an LLM judge's verdict, say).
    Proceed,
    /// A fallback chain moved on from a failed model to the next (recorded by `rein:fallback`;
    /// the text says from which model to which and why).
    Fallback,
}

/// What became of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionOutcome {
    /// It took effect.
    Applied,
    /// Shadow mode: recorded, not applied.
    Shadowed,
    /// Voided by a stronger outcome of the same pass.
    Overridden,
    /// The handler failed; `on_error` says what was done.
    Error,
    /// A parallel handler cancelled, or finished but not applied, because an earlier member of
    /// its group stopped the pass (SPEC §3.7).
    NotRun,
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DecisionRecord {
    /// The handler's name.
    pub handler: String,
    /// The lifecycle event.
    pub event: EventKind,
    /// The action.
    pub action: DecisionAction,
    /// Reason, feedback, prompt, or error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The tool use concerned, on tool events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// What became of it.
    pub outcome: DecisionOutcome,
    /// For errors: the policy that was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    /// How long the handler took (with the audit-timing option).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_nanos")]
    pub duration: Option<Duration>,
    /// For a `Confirm`: what the human decided — asked (no answer yet), approved or rejected —
    /// with the answer and where it came from. `None` for a confirm nobody was asked about (a
    /// deny or a guide of the same pass cancelled it first, or shadow mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    /// The path of the agent that decided, for an agent running as a tool of this one
    /// (`child`, `child/grandchild`); `None` for this agent's own decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Structured detail the handler attached to its decision (an LLM judge's verdict, reason
    /// and token usage). Boxed: most records have none, and records are moved often.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<serde_json::Value>>,
}

/// What became of a `Confirm`: the human was asked, or answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Confirmation {
    /// Asked, approved or rejected.
    pub status: ConfirmationStatus,
    /// The answer, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
    /// Where the answer came from, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<AnswerSource>,
}

impl Confirmation {
    /// The human was asked; the run stops for the answer.
    pub fn asked() -> Self {
        Self {
            status: ConfirmationStatus::Asked,
            answer: None,
            source: None,
        }
    }

    /// The human answered (`approved` or not) with `answer`, given from `source`.
    pub fn answered(approved: bool, answer: serde_json::Value, source: AnswerSource) -> Self {
        Self {
            status: if approved {
                ConfirmationStatus::Approved
            } else {
                ConfirmationStatus::Rejected
            },
            answer: Some(answer),
            source: Some(source),
        }
    }
}

/// What the human decided about a `Confirm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConfirmationStatus {
    /// Asked: the invocation stopped with the interrupt.
    Asked,
    /// Approved: the call went ahead.
    Approved,
    /// Rejected: the call was refused (`CONFIRMATION_FAILED: <prompt>`).
    Rejected,
}

impl ConfirmationStatus {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Asked => "asked",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
        }
    }
}

/// Where the answer to a `Confirm` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AnswerSource {
    /// Given before the question was asked (`Confirm::with_response`, e.g. from the invocation
    /// state).
    Preemptive,
    /// Given on resume, as an interrupt response.
    Resume,
}

impl DecisionRecord {
    /// A record.
    pub fn new(
        handler: impl Into<String>,
        event: EventKind,
        action: DecisionAction,
        outcome: DecisionOutcome,
    ) -> Self {
        Self {
            handler: handler.into(),
            event,
            action,
            text: None,
            tool_use_id: None,
            outcome,
            on_error: None,
            duration: None,
            confirmation: None,
            agent: None,
            detail: None,
        }
    }

    /// Sets the text.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Sets the tool use id.
    pub fn with_tool_use_id(mut self, id: Option<String>) -> Self {
        self.tool_use_id = id;
        self
    }
}

mod opt_nanos {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_nanos() as u64),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_nanos))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_not_run_record_serializes_as_not_run_with_action_none() {
        let r = DecisionRecord::new(
            "judge",
            EventKind::BeforeToolCall,
            DecisionAction::None,
            DecisionOutcome::NotRun,
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["action"], "none");
        assert_eq!(json["outcome"], "not_run");
        assert_eq!(serde_json::from_value::<DecisionRecord>(json).unwrap(), r);
    }

    #[test]
    fn a_detail_round_trips_and_is_left_out_when_absent() {
        let mut r = DecisionRecord::new(
            "judge",
            EventKind::BeforeToolCall,
            DecisionAction::Proceed,
            DecisionOutcome::Applied,
        );
        let without = serde_json::to_value(&r).unwrap();
        assert!(without.get("detail").is_none());
        r.detail = Some(Box::new(serde_json::json!({"verdict": "proceed"})));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["action"], "proceed");
        assert_eq!(json["detail"]["verdict"], "proceed");
        assert_eq!(serde_json::from_value::<DecisionRecord>(json).unwrap(), r);
    }
}
