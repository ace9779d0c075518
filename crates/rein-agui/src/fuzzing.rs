//! The run-request decoder for the fuzz target (`fuzz/fuzz_targets/agui_run_input.rs`) and the
//! hostile-input property test: raw body bytes → the checks `POST /agent` runs before anything
//! else (JSON, thread id, run id, the new user message) → for a resume, the resume rules against
//! a fixed set of pending interrupts. No HTTP, no store. Not part of Rein's API.
//!
//! Panics when an invariant breaks (that is the finding): a refusal must be a 4xx with a code;
//! an accepted resume answers every pending interrupt once, in order, a Confirm with an
//! approval, an interrupt bound to an action with that action's fingerprint.

use rein_agent::PendingInterrupt;
use rein_core::interrupt::{Interrupt, InterruptEvent, InterruptPoint};
use serde_json::Value;

use crate::interrupts::answers;
use crate::server::parse_run_input;

/// What became of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Refused with this code (HTTP 4xx).
    Refused(&'static str),
    /// A run request with a new user message.
    Run,
    /// A run request that carries no new user message and no resume (refused later as
    /// `NO_USER_MESSAGE`).
    NoMessage,
    /// A resume whose answers the rules accept.
    Resume,
}

/// The interrupts a resume is checked against: two Confirms (a tool call bound to its action
/// and asked in a pause with the nonce `k1`, as the agent raises it; a tool result) and a hook's
/// own interrupt. Their resume ids and the fingerprint `f1` are in the seed corpus.
pub fn pending() -> Vec<PendingInterrupt> {
    let at = |event, subject: &str, i: Interrupt| {
        PendingInterrupt::new(InterruptPoint::new(event, subject, i.name.clone()), i)
    };
    let mut guard = Interrupt::new("v1:before_tool_call:t1:n1", "guard", "Delete a.txt?")
        .with_tool_use_id("t1")
        .with_fingerprint("f1");
    guard.nonce = Some("k1".into());
    let check =
        Interrupt::new("v1:after_tool_call:t2:n2", "check", "Show it?").with_tool_use_id("t2");
    let own = Interrupt::new(
        "v1:tool_call:t3:n3",
        "approval",
        serde_json::json!({"prompt": "Go?"}),
    );
    vec![
        at(InterruptEvent::BeforeToolCall, "t1", guard),
        at(InterruptEvent::AfterToolCall, "t2", check),
        at(InterruptEvent::ToolCall, "t3", own),
    ]
}

/// Runs `data` through the decoder and, for a resume, the resume rules.
pub fn run_input(data: &[u8]) -> Verdict {
    let input = match parse_run_input(data) {
        Ok(i) => i,
        Err(e) => return refused(&e),
    };
    let text = input
        .messages
        .last()
        .filter(|m| m.role == "user")
        .and_then(|m| m.text());
    let Some(resume) = &input.resume else {
        return if text.is_some() {
            Verdict::Run
        } else {
            Verdict::NoMessage
        };
    };
    let pending = pending();
    match answers(&pending, &crate::interrupts::Asking::default(), resume) {
        Err(e) => refused(&e),
        Ok(responses) => {
            assert_eq!(
                responses.len(),
                pending.len(),
                "not every interrupt answered"
            );
            for (r, p) in responses.iter().zip(&pending) {
                let i = &p.interrupt;
                assert_eq!(r.interrupt_id, i.resume_id(), "answers out of order");
                // Bound to what was asked: an approval of an action names it, and the name is
                // not part of the answer.
                assert_eq!(
                    r.fingerprint, i.fingerprint,
                    "an answer bound to another action"
                );
                assert!(
                    r.response.get("approvedActionFingerprint").is_none(),
                    "{}",
                    r.response
                );
                if p.point.event != InterruptEvent::ToolCall {
                    assert!(
                        r.response.get("approved").is_some_and(Value::is_boolean),
                        "a Confirm answered without an approval: {}",
                        r.response
                    );
                }
            }
            Verdict::Resume
        }
    }
}

fn refused(e: &crate::error::ProtocolError) -> Verdict {
    assert!(e.status.is_client_error(), "{} for {}", e.status, e.code);
    assert!(!e.code.is_empty() && !e.message.is_empty());
    Verdict::Refused(e.code)
}
