//! AG-UI wire types: the run request and the events, in the JSON shape of AG-UI protocol 1.0
//! (`@ag-ui/core` 1.0.0's zod schemas). Only what this server reads or writes is modelled; the
//! request side is loose (unknown keys are ignored, as the protocol's schemas allow).
//!
//! Own types rather than the `ag-ui-core` crate: its latest release (0.1.0) predates protocol
//! 1.0 — no `RUN_FINISHED` outcome, no interrupts, no `resume` — so it cannot speak to the
//! current `@ag-ui/client`. The tests check these types against that client.

use rein_core::Role;
use rein_sessions::StoredMessage;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The AG-UI protocol version this crate speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// A run request (`RunAgentInput`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunAgentInput {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    pub(crate) messages: Vec<InputMessage>,
    #[serde(default)]
    pub(crate) resume: Option<Vec<ResumeEntry>>,
}

/// One message of the request's conversation. Only user messages are read.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct InputMessage {
    #[serde(default)]
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) content: Value,
}

impl InputMessage {
    /// The text of a user message: a string, or the text parts of a part array.
    pub(crate) fn text(&self) -> Option<String> {
        match &self.content {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                (!texts.is_empty()).then(|| texts.join("\n"))
            }
            _ => None,
        }
    }
}

/// An answer to one interrupt (`ResumeEntry`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) status: ResumeStatus,
    #[serde(default)]
    pub(crate) payload: Option<Value>,
    #[serde(default)]
    pub(crate) metadata: Option<Value>,
}

/// `resolved` (answered with a payload) or `cancelled` (declined).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// Something the run needs before it can continue (`Interrupt`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireInterrupt {
    pub(crate) id: String,
    pub(crate) reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<String>,
    pub(crate) response_schema: Value,
    pub(crate) metadata: Value,
}

/// An event, serialized with its `type` discriminator.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum WireEvent {
    #[serde(rename_all = "camelCase")]
    RunStarted { thread_id: String, run_id: String },
    #[serde(rename_all = "camelCase")]
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        outcome: Value,
    },
    #[serde(rename_all = "camelCase")]
    RunError { message: String, code: String },
    #[serde(rename_all = "camelCase")]
    TextMessageStart { message_id: String, role: String },
    #[serde(rename_all = "camelCase")]
    TextMessageContent { message_id: String, delta: String },
    #[serde(rename_all = "camelCase")]
    TextMessageEnd { message_id: String },
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallArgs { tool_call_id: String, delta: String },
    #[serde(rename_all = "camelCase")]
    ToolCallEnd { tool_call_id: String },
    #[serde(rename_all = "camelCase")]
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: String,
    },
    #[serde(rename_all = "camelCase")]
    StateSnapshot { snapshot: Value },
    #[serde(rename_all = "camelCase")]
    Custom { name: String, value: Value },
}

impl WireEvent {
    /// A CUSTOM event.
    pub(crate) fn custom(name: &str, value: Value) -> Self {
        Self::Custom {
            name: name.to_owned(),
            value,
        }
    }
}

/// A stored conversation as AG-UI messages (the `messages` of a `MESSAGES_SNAPSHOT` event):
/// a user message's text; an assistant message's text and its tool calls (`toolCalls`,
/// arguments as a JSON string); each tool result as a `tool` message of its own. Blocks AG-UI
/// has no message for (reasoning, interrupt answers, images) are left out; a message left with
/// nothing is too.
pub(crate) fn snapshot_messages(stored: &[StoredMessage]) -> Vec<Value> {
    let mut out = Vec::with_capacity(stored.len());
    for StoredMessage { id, message, .. } in stored {
        let text = message.text();
        match message.role {
            Role::Assistant => {
                let calls: Vec<Value> = message
                    .tool_uses()
                    .map(|t| {
                        json!({"id": t.tool_use_id, "type": "function",
                            "function": {"name": t.name, "arguments": t.input.to_string()}})
                    })
                    .collect();
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut m = json!({"id": id.to_string(), "role": "assistant"});
                if !text.is_empty() {
                    m["content"] = Value::String(text);
                }
                if !calls.is_empty() {
                    m["toolCalls"] = Value::Array(calls);
                }
                out.push(m);
            }
            Role::User => {
                for r in message.tool_results() {
                    let mut m = json!({"id": format!("{id}:{}", r.tool_use_id), "role": "tool",
                        "toolCallId": r.tool_use_id, "content": r.text()});
                    if r.is_error() {
                        m["error"] = Value::String(r.text());
                    }
                    out.push(m);
                }
                if !text.is_empty() {
                    out.push(json!({"id": id.to_string(), "role": "user", "content": text}));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn events_have_the_protocol_shape() {
        let e = WireEvent::ToolCallStart {
            tool_call_id: "t1".into(),
            tool_call_name: "delete".into(),
            parent_message_id: None,
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "TOOL_CALL_START", "toolCallId": "t1", "toolCallName": "delete"})
        );
        let e = WireEvent::RunError {
            message: "m".into(),
            code: "C".into(),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "RUN_ERROR", "message": "m", "code": "C"})
        );
    }

    #[test]
    fn a_user_message_of_parts_gives_its_text() {
        let m: InputMessage = serde_json::from_value(
            json!({"id": "1", "role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {}}, {"type": "text", "text": "b"}]}),
        )
        .unwrap();
        assert_eq!(m.text().as_deref(), Some("a\nb"));
    }

    #[test]
    fn a_stored_conversation_becomes_agui_messages() {
        use rein_core::id::MessageId;
        use rein_core::message::{ContentBlock, Message, ToolResult, ToolUse};
        let call = ToolUse::new("d1", "delete_file", json!({"path": "a.txt"}));
        let stored: Vec<StoredMessage> = [
            Message::user("Please delete a.txt"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::text("On it."), ContentBlock::from(call)],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::from(ToolResult::success(
                    "d1",
                    "deleted a.txt",
                ))],
            ),
            Message::assistant("Done."),
        ]
        .into_iter()
        .map(|m| StoredMessage::new(MessageId::new(), m))
        .collect();
        let m = snapshot_messages(&stored);
        let shape: Vec<(&str, &str)> = m
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("user", "Please delete a.txt"),
                ("assistant", "On it."),
                ("tool", "deleted a.txt"),
                ("assistant", "Done.")
            ]
        );
        assert_eq!(
            m[1]["toolCalls"],
            json!([{"id": "d1", "type": "function",
                "function": {"name": "delete_file", "arguments": r#"{"path":"a.txt"}"#}}])
        );
        assert_eq!(m[2]["toolCallId"], "d1");
    }
}
