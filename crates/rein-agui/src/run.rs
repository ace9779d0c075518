//! One run: the agent's stream translated into AG-UI events.

use rein_agent::{Agent, AgentEvent, Input};
use rein_core::{Error, Role, result::AgentResult, stream::StopReason};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::interrupts::to_wire;
use crate::wire::WireEvent;

/// The agent-state key where the server keeps the ids of the last resume's interrupts (so a
/// repeated resume is recognised as already applied). Hidden from STATE_SNAPSHOT.
pub(crate) const ANSWERED_KEY: &str = "rein_agui.answered";

/// Who answered, by interrupt id (a resume entry's `metadata.answeredBy`, else the
/// authenticated principal).
pub(crate) type AnsweredBy = Vec<(String, String)>;

/// Translates agent events into AG-UI events and sends them; a closed receiver (the client
/// went away) is ignored: the run finishes, so the session stays consistent.
struct Translator {
    tx: mpsc::UnboundedSender<WireEvent>,
    open_text: Option<String>,
    /// The text message of the current model response, the parent of its tool calls.
    response_text_id: Option<String>,
    answered_by: AnsweredBy,
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
                            .find(|(id, _)| id.split(':').nth(2) == Some(t.as_str()))
                    });
                    let who = who.or_else(|| self.answered_by.first());
                    if let Some((_, who)) = who {
                        obj.insert("answeredBy".into(), Value::String(who.clone()));
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
                let asks: Vec<_> = interrupts.iter().map(to_wire).collect();
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

/// The RUN_ERROR code of an agent error.
fn error_code(e: &Error) -> &'static str {
    match e {
        Error::InvalidAnswer { .. } => "INVALID_ANSWER",
        Error::InterruptsPending => "INTERRUPTS_PENDING",
        Error::UnknownInterrupt(_) => "UNKNOWN_INTERRUPT",
        Error::NoPendingInterrupts => "NO_PENDING_INTERRUPTS",
        Error::Model(_) => "MODEL_ERROR",
        Error::Session(_) => "SESSION_ERROR",
        _ => "AGENT_ERROR",
    }
}

/// The agent state shown in STATE_SNAPSHOT (the server's own key removed).
pub(crate) fn visible_state(agent: &Agent) -> Value {
    let mut map: Map<String, Value> = agent.state().snapshot().into_iter().collect();
    map.remove(ANSWERED_KEY);
    Value::Object(map)
}

/// Runs `input` on `agent`, sending the run's AG-UI events (RUN_STARTED first, RUN_FINISHED
/// or RUN_ERROR last).
pub(crate) async fn drive(
    mut agent: Agent,
    input: Input,
    thread_id: String,
    run_id: String,
    answered_by: AnsweredBy,
    tx: mpsc::UnboundedSender<WireEvent>,
) {
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
    {
        let mut stream = agent.stream(input);
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => {
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
    t.close_text();
    let result = match (result, failure) {
        (_, Some(e)) => {
            tracing::warn!(thread_id, run_id, error = %e, "AG-UI run failed");
            t.send(WireEvent::RunError {
                message: e.to_string(),
                code: error_code(&e).to_owned(),
            });
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
    t.send(WireEvent::StateSnapshot {
        snapshot: visible_state(&agent),
    });
    let outcome = match result.stop_reason {
        StopReason::Interrupt => {
            let interrupts: Vec<_> = result.interrupts.iter().map(to_wire).collect();
            json!({"type": "interrupt", "interrupts": interrupts})
        }
        StopReason::Cancelled => json!({"type": "cancelled"}),
        _ => json!({"type": "success"}),
    };
    let finished = if result.stop_reason == StopReason::Interrupt {
        None
    } else {
        Some(json!({"text": result.text(), "stopReason": result.stop_reason}))
    };
    t.send(WireEvent::RunFinished {
        thread_id,
        run_id,
        result: finished,
        outcome,
    });
}
