//! Stream decoding: the `application/vnd.amazon.eventstream` body of `ConverseStream`, framed
//! by `aws-smithy-eventstream`, mapped to normalized [`StreamEvent`]s.

use std::collections::VecDeque;

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message;
use base64::Engine as _;
use rein_core::{
    ModelError, Role,
    error::ModelErrorKind,
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, Usage},
};
use serde::Deserialize;
use serde_json::Value;

use super::{PROVIDER, error_for_type};
use crate::http::{BodyDecoder, Flow, StreamLimits, WireDecoder};

/// The largest event-stream frame accepted: the provider's `stream_limits().max_event`
/// (default 16 MiB, the event-stream format's own limit). A prelude announcing more fails at
/// once, before anything of the frame is buffered.
#[derive(Clone, Copy)]
struct MaxFrame(usize);

impl Default for MaxFrame {
    fn default() -> Self {
        Self(StreamLimits::DEFAULT_MAX_EVENT)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockIndex {
    #[serde(default)]
    content_block_index: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStartEvent {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default)]
    start: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDeltaEvent {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default)]
    delta: WireDelta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireDelta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_use: Option<ToolUseDelta>,
    #[serde(default)]
    reasoning_content: Option<ReasoningDelta>,
}

#[derive(Deserialize, Default)]
struct ToolUseDelta {
    #[serde(default)]
    input: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStopEvent {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct MetadataEvent {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    cache_write_input_tokens: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Text,
    Reasoning,
    Tool,
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "guardrail_intervened" => StopReason::GuardrailIntervened,
        "content_filtered" => StopReason::ContentFiltered,
        // end_turn, malformed_model_output, malformed_tool_use and reasons added later.
        _ => StopReason::EndTurn,
    }
}

fn malformed(what: impl std::fmt::Display) -> ModelError {
    ModelError::malformed_stream(format!("{PROVIDER}: {what}"))
}

fn parse<T: serde::de::DeserializeOwned>(event: &str, payload: &[u8]) -> Result<T, ModelError> {
    serde_json::from_slice(payload).map_err(|e| {
        let shown: String = String::from_utf8_lossy(payload).chars().take(200).collect();
        malformed(format_args!(
            "{event} event payload is not valid JSON ({e}): {shown}"
        ))
    })
}

/// A string header of an event-stream message.
fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map(|s| s.as_str())
}

/// An `exception` message: `:exception-type` and a JSON payload `{"message": ...}`.
fn exception(message: &Message) -> ModelError {
    let ty = header(message, ":exception-type").unwrap_or("exception");
    let payload = String::from_utf8_lossy(message.payload()).into_owned();
    let text = serde_json::from_str::<Value>(&payload)
        .ok()
        .and_then(|v| {
            ["message", "Message"]
                .iter()
                .find_map(|k| v.get(k).and_then(Value::as_str).map(str::to_owned))
        })
        .unwrap_or_default();
    stream_error(ty, &text).with_body(payload)
}

/// A typed error for an exception or error message inside the stream: by its AWS type, else a
/// server error.
fn stream_error(ty: &str, text: &str) -> ModelError {
    error_for_type(ty, text).unwrap_or_else(|| {
        ModelError::new(ModelErrorKind::Server, format!("{PROVIDER}: {ty}: {text}"))
    })
}

/// Decodes the ConverseStream event stream: frames (bounded size, CRC-checked by
/// `aws-smithy-eventstream`) → events → normalized [`StreamEvent`]s.
///
/// Text and reasoning blocks have no `contentBlockStart`: they open on their first delta and
/// close on `contentBlockStop` (or when another block opens). `messageStop` carries the stop
/// reason; the `metadata` event after it the usage.
#[derive(Default)]
pub(crate) struct EventStreamDecoder {
    buf: Vec<u8>,
    max_frame: MaxFrame,
    frames: MessageFrameDecoder,
    started: bool,
    open: Option<(u64, Kind)>,
    /// A block of a kind Rein does not model (its deltas are skipped).
    skipped: Option<u64>,
    stop: Option<StopReason>,
    usage: Option<WireUsage>,
    done: bool,
}

impl BodyDecoder for EventStreamDecoder {
    /// Feeds raw body bytes; every complete frame is decoded.
    fn feed(&mut self, bytes: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<Flow, ModelError> {
        if self.done {
            return Ok(Flow::Done);
        }
        self.buf.extend_from_slice(bytes);
        let mut pos = 0;
        let result = self.frames_from(&mut pos, out);
        if result.is_err() {
            self.buf.clear();
        } else {
            self.buf.drain(..pos);
        }
        result
    }
}

impl EventStreamDecoder {
    /// A decoder taking frames of at most `max_frame` bytes.
    pub(crate) fn with_max_frame(max_frame: usize) -> Self {
        Self {
            max_frame: MaxFrame(max_frame),
            ..Self::default()
        }
    }

    fn frames_from(
        &mut self,
        pos: &mut usize,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        loop {
            let rest = self.buf.get(*pos..).unwrap_or_default();
            let Some(prelude) = rest.first_chunk::<4>() else {
                return Ok(Flow::Continue);
            };
            // The prelude's total length, checked before the frame is buffered whole: the
            // frame decoder itself would wait for up to 4 GiB.
            let total = u32::from_be_bytes(*prelude) as usize;
            if total > self.max_frame.0 {
                return Err(crate::http::too_large(
                    PROVIDER,
                    &format!("an event-stream frame announcing {total} bytes is"),
                    self.max_frame.0,
                ));
            }
            let Some(mut frame) = rest.get(..total) else {
                return Ok(Flow::Continue);
            };
            let message = match self.frames.decode_frame(&mut frame) {
                Ok(DecodedFrame::Complete(m)) => m,
                Ok(DecodedFrame::Incomplete) => {
                    self.frames = MessageFrameDecoder::new();
                    return Err(malformed(format_args!(
                        "event-stream frame of {total} bytes is shorter than its prelude"
                    )));
                }
                Err(e) => return Err(malformed(format_args!("invalid event-stream frame: {e}"))),
            };
            *pos += total;
            if let Flow::Done = self.message(&message, out)? {
                self.done = true;
                return Ok(Flow::Done);
            }
        }
    }

    /// Handles one event-stream message.
    fn message(
        &mut self,
        message: &Message,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        match header(message, ":message-type") {
            Some("event") => {
                let Some(event) = header(message, ":event-type") else {
                    return Err(malformed("event message without :event-type"));
                };
                self.event(event, message.payload(), out)
            }
            Some("exception") => Err(exception(message)),
            Some("error") => {
                let code = header(message, ":error-code").unwrap_or("error");
                let text = header(message, ":error-message").unwrap_or_default();
                Err(stream_error(code, text))
            }
            Some(other) => Err(malformed(format_args!(
                "unknown :message-type '{}'",
                other.chars().take(64).collect::<String>()
            ))),
            None => Err(malformed("event-stream message without :message-type")),
        }
    }

    fn event(
        &mut self,
        event: &str,
        payload: &[u8],
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        if self.stop.is_some() {
            // After messageStop only the usage matters.
            if event == "metadata" {
                self.metadata(parse(event, payload)?);
                return Ok(Flow::Done);
            }
            return Ok(Flow::Continue);
        }
        match event {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                let ev: BlockStartEvent = parse(event, payload)?;
                self.block_start(ev, out)?;
            }
            "contentBlockDelta" => {
                let ev: BlockDeltaEvent = parse(event, payload)?;
                self.block_delta(ev, out)?;
            }
            "contentBlockStop" => {
                let ev: BlockIndex = parse(event, payload)?;
                if self.open.is_some_and(|(i, _)| i == ev.content_block_index) {
                    self.close(out);
                }
                if self.skipped == Some(ev.content_block_index) {
                    self.skipped = None;
                }
            }
            "messageStop" => {
                let ev: MessageStopEvent = parse(event, payload)?;
                self.start(out);
                self.close(out);
                self.stop = Some(stop_reason(ev.stop_reason.as_deref().unwrap_or("end_turn")));
            }
            "metadata" => self.metadata(parse(event, payload)?),
            // Events added to the API later.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn metadata(&mut self, ev: MetadataEvent) {
        if let Some(u) = ev.usage {
            self.usage = Some(u);
        }
    }

    fn start(&mut self, out: &mut VecDeque<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                role: Role::Assistant,
            });
        }
    }

    fn close(&mut self, out: &mut VecDeque<StreamEvent>) {
        if self.open.take().is_some() {
            out.push_back(StreamEvent::BlockStop);
        }
    }

    /// Makes `(index, kind)` the open block: closes another one first; the same index holding
    /// another kind of block is a protocol error.
    fn open_block(
        &mut self,
        index: u64,
        kind: Kind,
        start: BlockStart,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        match self.open {
            Some((i, k)) if i == index && k == kind && kind != Kind::Tool => return Ok(()),
            Some((i, k)) if i == index => {
                return Err(malformed(format_args!(
                    "content block {index} is an open {k:?} block, got a new {kind:?} block"
                )));
            }
            _ => {}
        }
        self.start(out);
        self.close(out);
        self.skipped = None;
        out.push_back(StreamEvent::BlockStart(start));
        self.open = Some((index, kind));
        Ok(())
    }

    fn block_start(
        &mut self,
        ev: BlockStartEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        let index = ev.content_block_index;
        if let Some(tool) = ev.start.get("toolUse") {
            let s = |k: &str| tool.get(k).and_then(Value::as_str).unwrap_or_default();
            if s("toolUseId").is_empty() || s("name").is_empty() {
                return Err(malformed("toolUse block start without toolUseId or name"));
            }
            let start = BlockStart::ToolUse {
                tool_use_id: s("toolUseId").to_owned(),
                name: s("name").to_owned(),
            };
            return self.open_block(index, Kind::Tool, start, out);
        }
        // A block Rein does not model (a server tool's result, an image ...): skipped.
        self.start(out);
        self.close(out);
        self.skipped = Some(index);
        Ok(())
    }

    fn block_delta(
        &mut self,
        ev: BlockDeltaEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        let index = ev.content_block_index;
        if self.skipped == Some(index) {
            return Ok(());
        }
        let d = ev.delta;
        if let Some(text) = d.text {
            if !text.is_empty() {
                self.open_block(index, Kind::Text, BlockStart::Text, out)?;
                out.push_back(StreamEvent::BlockDelta(BlockDelta::Text(text)));
            }
        } else if let Some(tool) = d.tool_use {
            if self.open != Some((index, Kind::Tool)) {
                return Err(malformed(format_args!(
                    "toolUse delta for content block {index}, which is not an open tool use"
                )));
            }
            if !tool.input.is_empty() {
                out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(tool.input)));
            }
        } else if let Some(r) = d.reasoning_content {
            self.open_block(index, Kind::Reasoning, BlockStart::Reasoning, out)?;
            if let Some(t) = r.text.filter(|t| !t.is_empty()) {
                out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningText(t)));
            }
            if let Some(s) = r.signature.filter(|s| !s.is_empty()) {
                out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningSignature(s)));
            }
            if let Some(data) = r.redacted_content {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.as_bytes())
                    .map_err(|e| malformed(format_args!("redactedContent is not base64: {e}")))?;
                out.push_back(StreamEvent::BlockDelta(BlockDelta::RedactedReasoning(
                    bytes,
                )));
            }
        }
        // Other deltas (citations ...) are not modelled.
        Ok(())
    }
}

impl WireDecoder for EventStreamDecoder {
    /// The body ended (or the last event arrived): push the final events, or fail when the
    /// message is incomplete.
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        if !self.done && !self.buf.is_empty() {
            let n = self.buf.len();
            self.buf.clear();
            return Err(malformed(format_args!(
                "stream ended inside an event-stream frame ({n} bytes left)"
            )));
        }
        let Some(stop) = self.stop else {
            return Err(malformed("stream ended without messageStop"));
        };
        self.close(out);
        out.push_back(StreamEvent::MessageStop { stop_reason: stop });
        Ok(())
    }

    /// Usage from the `metadata` event (zero when none came).
    fn usage(&self) -> Usage {
        let Some(u) = &self.usage else {
            return Usage::default();
        };
        let sum = u
            .input_tokens
            .saturating_add(u.output_tokens)
            .saturating_add(u.cache_read_input_tokens)
            .saturating_add(u.cache_write_input_tokens);
        Usage::new(u.input_tokens, u.output_tokens)
            .with_total_tokens(u.total_tokens.unwrap_or(sum))
            .with_cache_tokens(u.cache_read_input_tokens, u.cache_write_input_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::super::frames::{encode_json, encode_lines, frame};
    use super::*;

    fn body(json: &str) -> Vec<u8> {
        encode_json(json).unwrap().concat()
    }

    fn decode(bytes: &[u8], chunk: usize) -> (Vec<StreamEvent>, Option<ModelError>) {
        crate::http::decode_body_chunks(EventStreamDecoder::default(), bytes.chunks(chunk))
    }

    fn kind(bytes: &[u8]) -> Option<ModelErrorKind> {
        decode(bytes, 64).1.map(|e| e.kind())
    }

    fn assemble(events: &[StreamEvent]) -> rein_core::stream::ModelResponse {
        let mut a = rein_core::stream::StreamAssembler::new();
        for e in events {
            a.push(e.clone()).unwrap();
        }
        a.finish().unwrap()
    }

    #[test]
    fn frames_split_anywhere_decode_the_same() {
        let bytes = body(include_str!("../../tests/fixtures/bedrock/text.json"));
        let (whole, err) = decode(&bytes, bytes.len());
        assert!(err.is_none(), "{err:?}");
        for size in [1, 2, 3, 5, 11, 12, 13, 64, 100] {
            let (events, err) = decode(&bytes, size);
            assert!(err.is_none(), "chunk {size}: {err:?}");
            assert_eq!(events, whole, "chunk {size}");
        }
        assert_eq!(
            whole,
            vec![
                StreamEvent::MessageStart {
                    role: Role::Assistant
                },
                StreamEvent::BlockStart(BlockStart::Text),
                StreamEvent::BlockDelta(BlockDelta::Text("Hello".into())),
                StreamEvent::BlockDelta(BlockDelta::Text(", world!".into())),
                StreamEvent::BlockStop,
                StreamEvent::MessageStop {
                    stop_reason: StopReason::EndTurn
                },
            ]
        );
    }

    #[test]
    fn bad_crc_short_and_oversized_frames_are_malformed() {
        let mut bytes = body(include_str!("../../tests/fixtures/bedrock/text.json"));
        let at = bytes.len() / 2;
        bytes[at] ^= 0x20;
        let (_, err) = decode(&bytes, 7);
        let e = err.unwrap();
        assert_eq!(e.kind(), ModelErrorKind::MalformedStream);
        assert!(e.message().contains("checksum"), "{e}");
        // A prelude announcing 4 GiB fails at once, without waiting for (or buffering) it.
        let mut d = EventStreamDecoder::default();
        let e = d
            .feed(&[0xff, 0xff, 0xff, 0xff, 0, 0], &mut VecDeque::new())
            .err()
            .unwrap();
        assert_eq!(e.kind(), ModelErrorKind::ResponseTooLarge, "{e}");
        assert!(e.message().contains("larger than"), "{e}");
        let over = u32::try_from(StreamLimits::DEFAULT_MAX_EVENT + 1)
            .unwrap()
            .to_be_bytes();
        assert_eq!(kind(&over), Some(ModelErrorKind::ResponseTooLarge));
        // The limit is the provider's setting.
        let mut small = EventStreamDecoder::with_max_frame(1000);
        let e = small
            .feed(&1001u32.to_be_bytes(), &mut VecDeque::new())
            .unwrap_err();
        assert_eq!(e.kind(), ModelErrorKind::ResponseTooLarge);
        for total in [0u32, 4, 11, 12, 15] {
            let mut f = total.to_be_bytes().to_vec();
            f.resize(32, 0);
            assert_eq!(kind(&f), Some(ModelErrorKind::MalformedStream), "{total}");
        }
        let full = body(include_str!("../../tests/fixtures/bedrock/text.json"));
        let (_, err) = decode(&full[..full.len() - 3], 50);
        assert!(
            err.unwrap()
                .message()
                .contains("inside an event-stream frame")
        );
        let no_stop = body(r#"[{"event": "messageStart", "payload": {"role": "assistant"}}]"#);
        let (_, err) = decode(&no_stop, 50);
        assert!(err.unwrap().message().contains("without messageStop"));
    }

    #[test]
    fn exceptions_and_error_messages_are_typed() {
        use ModelErrorKind as K;
        for (ty, msg, want) in [
            ("throttlingException", "slow down", K::Throttled),
            ("validationException", "bad field", K::BadRequest),
            (
                "validationException",
                "Input is too long for requested model.",
                K::ContextWindowOverflow,
            ),
            ("modelStreamErrorException", "model failed", K::Server),
            ("internalServerException", "oops", K::Server),
            ("serviceUnavailableException", "later", K::Server),
            ("modelTimeoutException", "too slow", K::Timeout),
            ("brandNewException", "what", K::Server),
        ] {
            let json = format!(
                r#"[{{"event": "messageStart", "payload": {{}}}},
                    {{"exception": "{ty}", "payload": {{"message": "{msg}"}}}}]"#
            );
            let (events, err) = decode(&body(&json), 9);
            let e = err.unwrap();
            assert_eq!(e.kind(), want, "{ty}");
            assert!(e.message().contains(ty) && e.message().contains(msg), "{e}");
            assert!(e.body().unwrap().contains(msg));
            assert_eq!(events.len(), 1);
        }
        let err = body(r#"[{"error": "InternalFailure", "message": "broke"}]"#);
        let e = decode(&err, 9).1.unwrap();
        assert_eq!(e.kind(), K::Server);
        assert!(e.message().contains("broke"));
        let err = body(r#"[{"error": "ThrottlingException", "message": "x"}]"#);
        assert_eq!(kind(&err), Some(K::Throttled));
    }

    #[test]
    fn protocol_violations_are_malformed() {
        let cases = [
            r#"[{"headers": {":event-type": "messageStart"}, "payload": {}}]"#,
            r#"[{"headers": {":message-type": "event"}, "payload": {}}]"#,
            r#"[{"headers": {":message-type": "surprise"}, "payload": {}}]"#,
            r#"[{"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0,
                "delta": {"toolUse": {"input": "{}"}}}}]"#,
            r#"[{"event": "contentBlockStart", "payload": {"contentBlockIndex": 0,
                 "start": {"toolUse": {"toolUseId": "t", "name": "f"}}}},
                {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0,
                 "delta": {"text": "x"}}}]"#,
            r#"[{"event": "contentBlockStart", "payload": {"contentBlockIndex": 0,
                 "start": {"toolUse": {"toolUseId": "", "name": "f"}}}}]"#,
            r#"[{"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0,
                 "delta": {"reasoningContent": {"redactedContent": "***"}}}}]"#,
            r#"[{"event": "messageStop", "payload_raw": "not json"}]"#,
        ];
        for c in cases {
            let e = decode(&body(c), 13).1;
            assert_eq!(
                e.as_ref().map(ModelError::kind),
                Some(ModelErrorKind::MalformedStream),
                "{c}: {e:?}"
            );
        }
    }

    #[test]
    fn unknown_events_and_blocks_are_skipped_and_usage_is_read() {
        let json = r#"[
            {"event": "messageStart", "payload": {"role": "assistant"}},
            {"event": "contentBlockStart", "payload": {"contentBlockIndex": 0,
                "start": {"toolResult": {"toolUseId": "srv"}}}},
            {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0,
                "delta": {"toolResult": [{"text": "server tool output"}]}}},
            {"event": "contentBlockStop", "payload": {"contentBlockIndex": 0}},
            {"event": "somethingNew", "payload_raw": "<not even json>"},
            {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 1,
                "delta": {"citation": {"title": "x"}}}},
            {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 1,
                "delta": {"text": "ok"}}},
            {"event": "messageStop", "payload": {"stopReason": "content_filtered"}},
            {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 2,
                "delta": {"text": "ignored after the stop"}}},
            {"event": "metadata", "payload": {"usage": {"inputTokens": 3, "outputTokens": 4,
                "cacheReadInputTokens": 5, "cacheWriteInputTokens": 6}}},
            {"event": "messageStart", "payload_raw": "nothing is read after the metadata"}
        ]"#;
        let mut d = EventStreamDecoder::default();
        let mut out = VecDeque::new();
        assert!(matches!(d.feed(&body(json), &mut out), Ok(Flow::Done)));
        d.finish(&mut out).unwrap();
        let events: Vec<_> = out.into();
        let r = assemble(&events);
        assert_eq!(r.message.text(), "ok");
        assert_eq!(r.message.content.len(), 1);
        assert_eq!(r.stop_reason, StopReason::ContentFiltered);
        let u = d.usage();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.total_tokens),
            (3, 4, 18),
            "total is the sum when Bedrock sends none"
        );
        assert_eq!(
            (u.cache_read_input_tokens, u.cache_write_input_tokens),
            (5, 6)
        );
    }

    #[test]
    fn reasoning_redacted_and_stop_reasons() {
        let bytes = body(include_str!(
            "../../tests/fixtures/bedrock/redacted_reasoning.json"
        ));
        let (events, err) = decode(&bytes, 5);
        assert!(err.is_none(), "{err:?}");
        let r = assemble(&events);
        assert_eq!(
            r.message.content[0],
            rein_core::ContentBlock::ReasoningContent(Box::new(
                rein_core::message::ReasoningContent::RedactedContent(
                    b"Encrypted thinking".to_vec().into()
                )
            ))
        );
        assert_eq!(r.stop_reason, StopReason::GuardrailIntervened);
        for (wire, want) in [
            ("end_turn", StopReason::EndTurn),
            ("tool_use", StopReason::ToolUse),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("guardrail_intervened", StopReason::GuardrailIntervened),
            ("content_filtered", StopReason::ContentFiltered),
            ("model_context_window_exceeded", StopReason::MaxTokens),
            ("malformed_tool_use", StopReason::EndTurn),
        ] {
            assert_eq!(stop_reason(wire), want, "{wire}");
        }
    }

    #[test]
    fn fuzz_lines_become_valid_frames() {
        let lines = b"messageStart {}\ncontentBlockDelta {\"delta\":{\"text\":\"a\"}}\n\
            messageStop {\"stopReason\":\"max_tokens\"}\n!throttlingException {}\n?Boom oops";
        let (events, err) = decode(&encode_lines(lines), 3);
        assert_eq!(err.map(|e| e.kind()), Some(ModelErrorKind::Throttled));
        // Start, text block start, delta, and the stop that messageStop closed it with.
        assert_eq!(events.len(), 4);
    }

    #[test]
    fn frame_writer_round_trips() {
        let f = frame(&[(":message-type", "event")], b"{}").unwrap();
        let mut d = MessageFrameDecoder::new();
        let Ok(DecodedFrame::Complete(m)) = d.decode_frame(&mut &f[..]) else {
            panic!("one frame");
        };
        assert_eq!(header(&m, ":message-type"), Some("event"));
    }
}
