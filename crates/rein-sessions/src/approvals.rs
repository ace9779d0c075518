//! Approval records: who answered what a handler asked a person, stored with the session.

use rein_agent::Checkpoint;
use rein_core::audit::DecisionRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::SessionSnapshot;

/// What keeps a session's approval record in the agent's own writes: given to
/// [`SessionManager::recording_approvals`](crate::SessionManager::recording_approvals), it is
/// asked, at each checkpoint write, which entries that write appends — so a question is
/// stored with the pause that asks it and an answer with the write that consumes the pause,
/// never in a write of their own that a crash could lose.
pub trait RecordApprovals: Send + Sync + 'static {
    /// The entries to append with the write that brings the session from `stored` (as last
    /// read or written) to the agent's `next` checkpoint. Called once per such write; a write
    /// that fails fails the agent's invocation, and the entries with it.
    fn records(&self, stored: &SessionSnapshot, next: &Checkpoint) -> Vec<ApprovalRecord>;

    /// The intervention decisions of an invocation that is ending, just before its last write
    /// (to record the proceeds a handler explained with that write). The default ignores
    /// them.
    fn invocation_decisions(&self, decisions: &[DecisionRecord]) {
        let _ = decisions;
    }
}

/// One entry of a session's approval record (issue 38): a question a handler asked a person
/// (`Asked`), the answer to it (`Approved`, `Rejected`), or a proceed a handler explained with
/// `record_detail` (`Proceeded`). Appended with [`SessionWrite::AppendApprovals`](crate::SessionWrite::AppendApprovals);
/// never rewritten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalRecord {
    /// What this entry records.
    pub outcome: ApprovalOutcome,
    /// The handler that asked (or explained its proceed).
    pub handler: String,
    /// The interrupt asked and answered (its resume id); `None` for a proceed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
    /// The tool call asked about, when the question is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// Its tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// What was asked about as it was asked: the tool call's original input, also when the
    /// answer approved it with an edit.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub asked: Value,
    /// The handler's prompt or reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who the run was for (the invocation state's `principal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// Who answered: the authenticated principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// The name the answering client claimed, kept beside the principal, never instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_approver: Option<String>,
    /// The edit an approval made (the tool call's new input, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<Value>,
    /// The answer's note (a reject reason, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Why the answer was refused (`Refused`): four-eyes, an answer that does not fit what
    /// was asked, another action's fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The detail a handler attached to its decision (`record_detail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// When it was asked, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_at: Option<u64>,
    /// When it was answered (or the proceed decided), in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<u64>,
}

/// What an [`ApprovalRecord`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalOutcome {
    /// A person was asked; the run waits.
    Asked,
    /// Approved (with [`edit`](ApprovalRecord::edit) when it changed what it approved).
    Approved,
    /// Rejected.
    Rejected,
    /// A handler let it proceed and said why ([`detail`](ApprovalRecord::detail)).
    Proceeded,
    /// An answer was refused and nothing applied: who tried ([`approver`](ApprovalRecord::approver)),
    /// when, what they answered and why it was refused ([`refusal`](ApprovalRecord::refusal)).
    /// The question still waits.
    Refused,
}

impl ApprovalRecord {
    /// A record of `outcome` by `handler`, everything else empty.
    pub fn new(outcome: ApprovalOutcome, handler: impl Into<String>) -> Self {
        Self {
            outcome,
            handler: handler.into(),
            interrupt_id: None,
            tool_use_id: None,
            tool_name: None,
            asked: Value::Null,
            reason: None,
            requester: None,
            approver: None,
            claimed_approver: None,
            edit: None,
            note: None,
            refusal: None,
            detail: None,
            asked_at: None,
            answered_at: None,
        }
    }
}
