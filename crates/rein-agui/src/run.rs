//! One run: the agent's stream translated into AG-UI events.

use rein_agent::{Agent, AgentEvent, Input, PausedRun};
use rein_core::state::{APPROVER_KEY, InvocationState, PRINCIPAL_KEY};
use rein_core::{Error, Role, result::AgentResult, stream::StopReason};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::auth::Principal;
use crate::interrupts::{parked, to_wire};
use crate::wire::WireEvent;

/// The agent-state key where the server keeps the ids of the last resume's interrupts (so a
/// repeated resume is recognised as already applied). Hidden from STATE_SNAPSHOT.
pub(crate) const ANSWERED_KEY: &str = "rein_agui.answered";

/// Who answered an interrupt: the authenticated principal, and the name the client's resume
/// entry claims (`metadata.answeredBy`), kept beside it — never instead of it.
#[derive(Debug, Clone)]
pub(crate) struct Answerer {
    /// What the answered interrupt asked about (its point's subject: a tool use id; for a
    /// sub-agent's interrupt, the agent tool's use).
    pub(crate) about: Option<String>,
    pub(crate) principal: String,
    pub(crate) claimed: Option<String>,
}

/// The invocation state of a run started by `who`: who it is for, under `principal` — from the
/// server's authentication only; the request's `state` and `forwardedProps` never reach it.
pub(crate) fn requester_state(who: &Principal) -> InvocationState {
    let mut map = Map::new();
    map.insert(PRINCIPAL_KEY.into(), Value::String(who.id().to_owned()));
    InvocationState::from_map(map)
}

/// The invocation state of a resume answered by `who`: the paused run's (its requester kept
/// under `principal`) with `approver` set to `who`.
pub(crate) fn approver_state(paused: &InvocationState, who: &Principal) -> InvocationState {
    let mut map = paused.as_map().clone();
    map.insert(APPROVER_KEY.into(), Value::String(who.id().to_owned()));
    InvocationState::from_map(map)
}

/// What the server allows one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunBounds {
    /// Model calls: at this many, the run stops before the next one.
    pub(crate) max_turns: u32,
}

/// Translates agent events into AG-UI events and sends them; a closed receiver (the client
/// went away) is ignored: the run finishes, so the session stays consistent.
struct Translator {
    tx: mpsc::UnboundedSender<WireEvent>,
    open_text: Option<String>,
    /// The text message of the current model response, the parent of its tool calls.
    response_text_id: Option<String>,
    answered_by: Vec<Answerer>,
}

impl Translator {
    fn send(&self, e: WireEvent) {
        let _ = self.tx.send(e);
    }

    fn close_text(&mut self) {
        if let Some(id) = self.open_text.take() {
            self.send(WireEvent::TextMessageEnd { message_id: id });
        }
    }

    fn text(&mut self, delta: String) {
        if self.open_text.is_none() {
            let id = new_id();
            self.send(WireEvent::TextMessageStart {
                message_id: id.clone(),
                role: "assistant".into(),
            });
            self.response_text_id = Some(id.clone());
            self.open_text = Some(id);
        }
        if let Some(id) = &self.open_text {
            self.send(WireEvent::TextMessageContent {
                message_id: id.clone(),
                delta,
            });
        }
    }

    fn event(&mut self, event: AgentEvent) -> Option<AgentResult> {
        match event {
            AgentEvent::ModelCallStarted { .. } => {
                self.close_text();
                self.response_text_id = None;
            }
            AgentEvent::TextDelta(t) if !t.is_empty() => self.text(t),
            AgentEvent::ResponseDiscarded { reason, handler } => {
                self.close_text();
                self.response_text_id = None;
                // A handler's reason is the policy's own text; without a handler the reason is
                // a failed call's error (a provider's answer): that stays in the log.
                let reason = if handler.is_some() {
                    reason
                } else {
                    tracing::info!(reason, "AG-UI run: a model response was withdrawn");
                    "the model call failed or was cancelled".to_owned()
                };
                self.send(WireEvent::custom(
                    "rein.response_discarded",
                    json!({"reason": reason, "handler": handler}),
                ));
            }
            AgentEvent::ResponseReplaced { message } => {
                self.send(WireEvent::custom(
                    "rein.response_replaced",
                    json!({"text": message.text()}),
                ));
            }
            AgentEvent::MessageAdded { message, .. } if message.role == Role::Assistant => {
                // Text that was not streamed (held back until the verdict) is sent whole.
                if self.response_text_id.is_none() && !message.text().is_empty() {
                    self.text(message.text());
                }
                self.close_text();
                for tu in message.tool_uses() {
                    self.send(WireEvent::ToolCallStart {
                        tool_call_id: tu.tool_use_id.clone(),
                        tool_call_name: tu.name.clone(),
                        parent_message_id: self.response_text_id.clone(),
                    });
                    self.send(WireEvent::ToolCallArgs {
                        tool_call_id: tu.tool_use_id.clone(),
                        delta: tu.input.to_string(),
                    });
                    self.send(WireEvent::ToolCallEnd {
                        tool_call_id: tu.tool_use_id.clone(),
                    });
                }
            }
            AgentEvent::MessageUpdated { message, .. } if message.role == Role::Assistant => {
                let calls: Vec<Value> = message
                    .tool_uses()
                    .map(|t| json!({"toolCallId": t.tool_use_id, "name": t.name, "input": t.input}))
                    .collect();
                self.send(WireEvent::custom(
                    "rein.message_updated",
                    json!({"text": message.text(), "toolCalls": calls}),
                ));
            }
            AgentEvent::ToolResult(r) => {
                self.close_text();
                self.send(WireEvent::ToolCallResult {
                    message_id: new_id(),
                    tool_call_id: r.tool_use_id.clone(),
                    content: r.text(),
                    role: "tool".into(),
                });
            }
            AgentEvent::Decision(d) => {
                let mut value = serde_json::to_value(&d).unwrap_or(Value::Null);
                if let (Some(c), Some(obj)) = (&d.confirmation, value.as_object_mut())
                    && c.answer.is_some()
                {
                    let who = d.tool_use_id.as_ref().and_then(|t| {
                        self.answered_by
                            .iter()
                            .find(|a| a.about.as_ref() == Some(t))
                    });
                    if let Some(who) = who.or_else(|| self.answered_by.first()) {
                        obj.insert("answeredBy".into(), Value::String(who.principal.clone()));
                        if let Some(claimed) = &who.claimed {
                            obj.insert("claimedAnsweredBy".into(), Value::String(claimed.clone()));
                        }
                    }
                }
                self.send(WireEvent::custom("rein.decision", value));
            }
            AgentEvent::InjectionConsumed { id, message } => self.send(WireEvent::custom(
                "rein.injection_consumed",
                json!({"injectionId": id.to_string(), "text": message.text()}),
            )),
            AgentEvent::InjectionRejected { id, reason } => self.send(WireEvent::custom(
                "rein.injection_rejected",
                json!({"injectionId": id.to_string(), "reason": reason}),
            )),
            AgentEvent::InjectionAwaitingApproval { id, interrupts } => {
                let asks: Vec<_> = parked(id, &interrupts).iter().map(to_wire).collect();
                self.send(WireEvent::custom(
                    "rein.injection_awaiting_approval",
                    json!({"injectionId": id.to_string(), "interrupts": asks}),
                ));
            }
            AgentEvent::Handoff { from, to } => self.send(WireEvent::custom(
                "rein.handoff",
                json!({"from": from, "to": to}),
            )),
            AgentEvent::Finished(r) => {
                self.close_text();
                return Some(r);
            }
            _ => {}
        }
        None
    }
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The RUN_ERROR code of an agent error, and whether its text is Rein's own about the
/// client's request (shown) rather than a provider's, a store's or a tool's (kept in the log).
fn error_code(e: &Error) -> (&'static str, bool) {
    match e {
        Error::InvalidAnswer { .. } => ("INVALID_ANSWER", true),
        Error::InterruptsPending => ("INTERRUPTS_PENDING", true),
        Error::UnknownInterrupt(_) => ("UNKNOWN_INTERRUPT", true),
        Error::NoPendingInterrupts => ("NO_PENDING_INTERRUPTS", true),
        Error::Model(_) => ("MODEL_ERROR", false),
        Error::Session(_) => ("SESSION_ERROR", false),
        _ => ("AGENT_ERROR", false),
    }
}

/// The RUN_ERROR of a failed run: Rein's own message about the request, or a code and an error
/// id whose details are in the log.
fn run_error(e: &Error, thread_id: &str, run_id: &str) -> WireEvent {
    let (code, shown) = error_code(e);
    if shown {
        tracing::info!(thread_id, run_id, error = %e, "AG-UI run refused an answer");
        return WireEvent::RunError {
            message: e.to_string(),
            code: code.to_owned(),
        };
    }
    let id = crate::error::error_id();
    tracing::warn!(thread_id, run_id, error_id = %id, error = %e, "AG-UI run failed");
    let what = match code {
        "MODEL_ERROR" => "the model call failed",
        "SESSION_ERROR" => "the thread could not be stored (another process may have changed it)",
        _ => "the run failed",
    };
    WireEvent::RunError {
        message: format!("{what} (error id {id}; the details are in the server's log)"),
        code: code.to_owned(),
    }
}

/// The agent state shown in STATE_SNAPSHOT (the server's own key removed).
pub(crate) fn visible_state(agent: &Agent) -> Value {
    let mut map: Map<String, Value> = agent.state().snapshot().into_iter().collect();
    map.remove(ANSWERED_KEY);
    Value::Object(map)
}

/// Runs `input` on `agent`, sending the run's AG-UI events (RUN_STARTED first, RUN_FINISHED
/// or RUN_ERROR last). A client that goes away (its stream dropped) cancels the run; at the
/// turn budget the run stops before its next model call.
pub(crate) async fn drive(
    mut agent: Agent,
    input: Input,
    thread_id: String,
    run_id: String,
    answered_by: Vec<Answerer>,
    bounds: RunBounds,
    tx: mpsc::UnboundedSender<WireEvent>,
) {
    let cancel = agent.cancel_handle();
    let watcher = {
        let (tx, cancel) = (tx.clone(), cancel.clone());
        tokio::spawn(async move {
            tx.closed().await;
            cancel.cancel_with(CLIENT_GONE);
        })
    };
    let mut t = Translator {
        tx,
        open_text: None,
        response_text_id: None,
        answered_by,
    };
    t.send(WireEvent::RunStarted {
        thread_id: thread_id.clone(),
        run_id: run_id.clone(),
    });
    let mut result = None;
    let mut failure = None;
    let mut turns = 0u32;
    let mut budget_spent = false;
    {
        let mut stream = agent.stream(input);
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => {
                    if matches!(e, AgentEvent::ModelCallStarted { .. }) {
                        turns += 1;
                        if turns >= bounds.max_turns && !budget_spent {
                            budget_spent = true;
                            cancel.cancel_after_tools();
                        }
                    }
                    if t.tx.is_closed() {
                        // Gone before the watcher's cancel could reach a running run.
                        cancel.cancel_with(CLIENT_GONE);
                    }
                    if let Some(r) = t.event(e) {
                        result = Some(r);
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    watcher.abort();
    t.close_text();
    let result = match (result, failure) {
        (_, Some(e)) => {
            t.send(run_error(&e, &thread_id, &run_id));
            return;
        }
        (Some(r), None) => r,
        (None, None) => {
            t.send(WireEvent::RunError {
                message: "the run ended without a result".into(),
                code: "AGENT_ERROR".into(),
            });
            return;
        }
    };
    if t.tx.is_closed() {
        tracing::info!(thread_id, run_id, stop_reason = ?result.stop_reason, "AG-UI client went away; run ended");
        return;
    }
    t.send(WireEvent::StateSnapshot {
        snapshot: visible_state(&agent),
    });
    // The server's turn budget stopped it: reported as the agent's own turn limit would be.
    let stop_reason = if budget_spent && result.stop_reason == StopReason::Cancelled {
        StopReason::LimitTurns
    } else {
        result.stop_reason
    };
    let outcome = match stop_reason {
        StopReason::Interrupt => {
            let pending = agent.pending_interrupts().map(PausedRun::pending);
            let interrupts: Vec<_> = pending.unwrap_or_default().iter().map(to_wire).collect();
            json!({"type": "interrupt", "interrupts": interrupts})
        }
        StopReason::Cancelled => json!({"type": "cancelled"}),
        _ => json!({"type": "success"}),
    };
    let finished = match stop_reason {
        StopReason::Interrupt => None,
        StopReason::LimitTurns if budget_spent => Some(json!({
            "text": format!("(stopped: this server allows {} model calls per run)", bounds.max_turns),
            "stopReason": stop_reason,
        })),
        _ => Some(json!({"text": result.text(), "stopReason": stop_reason})),
    };
    t.send(WireEvent::RunFinished {
        thread_id,
        run_id,
        result: finished,
        outcome,
    });
}

/// The cancel message of a run whose client went away.
const CLIENT_GONE: &str = "the client disconnected";
