//! Test support (`test` and feature `test-util`): Bedrock stream messages written as JSON,
//! encoded to binary event-stream frames with `aws-smithy-eventstream`'s writer, for recorded
//! fixtures, property tests and fuzz seeds.
//!
//! The JSON is a list of messages:
//!
//! - `{"event": "contentBlockDelta", "payload": {...}}`: an event (`:message-type: event`,
//!   `:event-type`, `:content-type: application/json`, the payload as JSON);
//! - `{"exception": "throttlingException", "payload": {"message": "..."}}`: an exception;
//! - `{"error": "InternalFailure", "message": "..."}`: an error message (`:error-code`,
//!   `:error-message`, no payload);
//!
//! `"payload_raw": "..."` sends a payload that is not JSON, and `"headers": {name: value}`
//! replaces the headers (string values) of any of them.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use serde_json::Value;

fn string_header(name: &str, value: &str) -> Header {
    Header::new(
        name.to_owned(),
        HeaderValue::String(value.to_owned().into()),
    )
}

/// Encodes one message as a frame.
pub(crate) fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Result<Vec<u8>, String> {
    let mut message = Message::new(payload.to_vec());
    for (name, value) in headers {
        message = message.add_header(string_header(name, value));
    }
    let mut out = Vec::new();
    write_message_to(&message, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Encodes a JSON list of stream messages (see the module docs), one frame each.
pub(crate) fn encode_json(events: &str) -> Result<Vec<Vec<u8>>, String> {
    let list: Vec<Value> = serde_json::from_str(events).map_err(|e| e.to_string())?;
    list.iter().map(encode_entry).collect()
}

fn encode_entry(entry: &Value) -> Result<Vec<u8>, String> {
    let s = |k: &str| entry.get(k).and_then(Value::as_str);
    let payload = match (s("payload_raw"), entry.get("payload")) {
        (Some(raw), _) => raw.as_bytes().to_vec(),
        (None, Some(p)) => p.to_string().into_bytes(),
        (None, None) if s("error").is_some() => Vec::new(),
        (None, None) => b"{}".to_vec(),
    };
    if let Some(map) = entry.get("headers").and_then(Value::as_object) {
        let headers: Vec<(&str, &str)> = map
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
            .collect();
        return frame(&headers, &payload);
    }
    let json = "application/json";
    if let Some(ty) = s("event") {
        frame(
            &[
                (":message-type", "event"),
                (":event-type", ty),
                (":content-type", json),
            ],
            &payload,
        )
    } else if let Some(ty) = s("exception") {
        frame(
            &[
                (":message-type", "exception"),
                (":exception-type", ty),
                (":content-type", json),
            ],
            &payload,
        )
    } else if let Some(code) = s("error") {
        let text = s("message").unwrap_or_default();
        frame(
            &[
                (":message-type", "error"),
                (":error-code", code),
                (":error-message", text),
            ],
            &payload,
        )
    } else {
        Err(format!("not a stream message: {entry}"))
    }
}

/// Turns text lines into valid frames, for fuzzing the event decoding behind the framing: each
/// line is `<event-type> <payload>`, `!<exception-type> <payload>` or `?<error-code> <message>`.
pub(crate) fn encode_lines(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let (head, payload) = match line.iter().position(|&b| b == b' ') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        let head: String = String::from_utf8_lossy(head).chars().take(64).collect();
        let frame = if let Some(ty) = head.strip_prefix('!') {
            frame(
                &[(":message-type", "exception"), (":exception-type", ty)],
                payload,
            )
        } else if let Some(code) = head.strip_prefix('?') {
            let text: String = String::from_utf8_lossy(payload).chars().take(256).collect();
            frame(
                &[
                    (":message-type", "error"),
                    (":error-code", code),
                    (":error-message", &text),
                ],
                &[],
            )
        } else {
            frame(
                &[(":message-type", "event"), (":event-type", &head)],
                payload,
            )
        };
        if let Ok(f) = frame {
            out.extend_from_slice(&f);
        }
    }
    out
}
