//! Release 0.1's records, read into today's checkpoint: the pending interrupts a session
//! stored (`PendingInterrupts`, `schema_version` 1: flags saying where the run paused), the
//! run a paused sub-agent saved in its parent's `tool_states` (`messages` without ids,
//! `pending`, `agent_state`), and rein-restate's session state (`messages` with ids, `pending`).
//!
//! Those records kept where an interrupt was raised only in its id
//! (`v1:<event>:<subject>:<uuid5(name)>`, `v1:agent:<tool use id>:<child id>`): reading them is
//! the one place an id is taken apart, once, on load.

use std::collections::BTreeMap;

use rein_core::{
    Error, Map, Message, ToolResult,
    id::MessageId,
    interrupt::{Interrupt, InterruptAnswer, InterruptEvent, InterruptPoint},
    state::InvocationState,
    stream::{StopReason, Usage},
};
use serde::Deserialize;
use serde_json::Value;

use super::{
    Checkpoint, ParkedInjection, Pause, PausedRun, PendingHandoff, PendingInterrupt,
    QueuedInjection, ResponsePause, ToolsPause, invalid,
};

/// `PendingInterrupts` as release 0.1 stored it.
#[derive(Deserialize)]
struct PendingV1 {
    interrupts: Vec<Interrupt>,
    #[serde(default)]
    answers: BTreeMap<String, InterruptAnswer>,
    assistant_message_id: MessageId,
    assistant_message: Message,
    #[serde(default)]
    completed_results: Vec<ToolResult>,
    #[serde(default)]
    held_results: Vec<ToolResult>,
    #[serde(default)]
    invocation_state: InvocationState,
    #[serde(default)]
    model_call_index: u32,
    #[serde(default)]
    run_state: Map,
    #[serde(default)]
    held_response: Option<HeldResponseV1>,
    #[serde(default)]
    held_request: bool,
    #[serde(default)]
    held_input: Vec<Message>,
    #[serde(default)]
    tool_states: BTreeMap<String, Value>,
    #[serde(default)]
    queued_injections: Vec<QueuedInjection>,
    #[serde(default)]
    parked_injections: Vec<ParkedInjection>,
    #[serde(default)]
    handoff: Option<PendingHandoff>,
}

#[derive(Deserialize)]
struct HeldResponseV1 {
    stop_reason: StopReason,
    #[serde(default)]
    usage: Usage,
    #[serde(default)]
    hook_retries: u32,
}

/// What a paused sub-agent saved in its parent's `tool_states`.
#[derive(Deserialize)]
struct SavedRunV1 {
    messages: Vec<Message>,
    pending: Value,
    #[serde(default)]
    agent_state: Map,
}

/// rein-restate's session state.
#[derive(Deserialize)]
struct StoredSessionV1 {
    messages: Vec<(MessageId, Message)>,
    #[serde(default)]
    agent_state: Map,
    #[serde(default)]
    conversation_manager_state: Value,
    #[serde(default)]
    pending: Option<Value>,
}

/// A version-1 checkpoint: rein-restate's session state.
pub(super) fn checkpoint(value: Value) -> Result<Checkpoint, Error> {
    let s: StoredSessionV1 = serde_json::from_value(value).map_err(invalid)?;
    Ok(Checkpoint {
        messages: s.messages,
        agent_state: s.agent_state,
        conversation_manager_state: s.conversation_manager_state,
        paused: s.pending.map(PausedRun::from_json).transpose()?,
    })
}

/// Version-1 pending interrupts: the flags say where the run paused (a held input, request,
/// response, else the tool phase of the stored assistant message).
pub(super) fn paused_run(value: Value) -> Result<PausedRun, Error> {
    let p: PendingV1 = serde_json::from_value(value).map_err(invalid)?;
    // An interrupt whose id has another shape (a hook's own) is placed by the pause.
    let event = if !p.held_input.is_empty() {
        InterruptEvent::BeforeInvocation
    } else if p.held_request {
        InterruptEvent::BeforeModelCall
    } else if p.held_response.is_some() {
        InterruptEvent::AfterModelCall
    } else {
        InterruptEvent::BeforeToolCall
    };
    let interrupts = p
        .interrupts
        .into_iter()
        .map(|i| {
            let point = point_of(&i.id, &i.name).unwrap_or_else(|| {
                let subject = i.tool_use_id.clone().unwrap_or_default();
                InterruptPoint::new(event, subject, i.name.clone())
            });
            PendingInterrupt::new(point, i)
        })
        .collect();
    let at = if !p.held_input.is_empty() {
        Pause::Input {
            messages: p.held_input,
        }
    } else if p.held_request {
        Pause::Request {
            model_call_index: p.model_call_index,
            last_message_id: p.assistant_message_id,
        }
    } else if let Some(held) = p.held_response {
        Pause::Response(Box::new(ResponsePause {
            message: p.assistant_message,
            stop_reason: held.stop_reason,
            usage: held.usage,
            hook_retries: held.hook_retries,
            output_retries: 0,
            model_call_index: p.model_call_index,
        }))
    } else {
        let children = p
            .tool_states
            .into_iter()
            .map(|(id, saved)| Ok((id, child(saved)?)))
            .collect::<Result<_, Error>>()?;
        Pause::Tools(Box::new(ToolsPause {
            message_id: p.assistant_message_id,
            message: p.assistant_message,
            model_call_index: p.model_call_index,
            completed: p.completed_results,
            held: p.held_results,
            children,
            handoff: p.handoff,
        }))
    };
    Ok(PausedRun {
        at,
        interrupts,
        answers: p.answers,
        invocation_state: p.invocation_state,
        run_state: p.run_state,
        queued_injections: p.queued_injections,
        parked_injections: p.parked_injections,
    })
}

/// A sub-agent's saved run. Its messages were stored without ids: they get new ones, but the
/// message its pause is about keeps the id the pause names.
fn child(saved: Value) -> Result<Checkpoint, Error> {
    let saved: SavedRunV1 = serde_json::from_value(saved).map_err(invalid)?;
    let paused = PausedRun::from_json(saved.pending)?;
    let mut messages: Vec<(MessageId, Message)> = saved
        .messages
        .into_iter()
        .map(|m| (MessageId::new(), m))
        .collect();
    match &paused.at {
        Pause::Tools(t) => {
            if let Some(slot) = messages.iter_mut().rev().find(|(_, m)| *m == t.message) {
                slot.0 = t.message_id;
            }
        }
        Pause::Request {
            last_message_id, ..
        } => {
            if let Some(last) = messages.last_mut() {
                last.0 = *last_message_id;
            }
        }
        Pause::Input { .. } | Pause::Response(_) => {}
    }
    Ok(Checkpoint {
        messages,
        agent_state: saved.agent_state,
        conversation_manager_state: Value::Null,
        paused: Some(paused),
    })
}

/// Where an interrupt with a version-1 id was raised: `v1:<event>:<subject>:<uuid>`, or
/// `v1:agent:<tool use id>:<child's id>` for a sub-agent's (named `<agent>/<child's name>`).
/// `None` for an id of another shape (a hook's own), which the caller places by the pause.
fn point_of(id: &str, name: &str) -> Option<InterruptPoint> {
    let rest = id.strip_prefix("v1:")?;
    if let Some(nested) = rest.strip_prefix("agent:") {
        // The child's id starts with `v1:` too; a tool use id holds no `:v1:`.
        let at = nested.find(":v1:")?;
        let (tool_use_id, child_id) = (&nested[..at], &nested[at + 1..]);
        let child_name = name.split_once('/').map_or(name, |(_, n)| n);
        return Some(point_of(child_id, child_name)?.under(tool_use_id));
    }
    let (event, rest) = rest.split_once(':')?;
    let event = match event {
        "before_invocation" => InterruptEvent::BeforeInvocation,
        "before_model_call" => InterruptEvent::BeforeModelCall,
        "after_model_call" => InterruptEvent::AfterModelCall,
        "before_tool_call" => InterruptEvent::BeforeToolCall,
        "tool_call" => InterruptEvent::ToolCall,
        "after_tool_call" => InterruptEvent::AfterToolCall,
        _ => return None,
    };
    let (subject, _handler_uuid) = rest.rsplit_once(':')?;
    Some(InterruptPoint::new(event, subject, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_ids_give_their_point() {
        let p = point_of("v1:before_tool_call:t1:225d3982", "approval").unwrap();
        assert_eq!(
            p,
            InterruptPoint::new(InterruptEvent::BeforeToolCall, "t1", "approval")
        );
        let p = point_of("v1:agent:r1:v1:after_tool_call:d1:225d", "researcher/check").unwrap();
        assert_eq!(
            p,
            InterruptPoint::new(InterruptEvent::AfterToolCall, "d1", "check").under("r1")
        );
        assert_eq!(point_of("my-hook-id", "h"), None);
        assert_eq!(point_of("v1:somewhere:x:y", "h"), None);
    }
}
