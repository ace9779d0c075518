//! Normalized model stream events, stop reasons, usage, and stream assembly (SPEC §1).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Map;
use crate::error::{Error, ModelErrorKind};
use crate::message::{
    ContentBlock, Message, ProviderState, ReasoningContent, ReasoningText, Role, ToolUse,
};

/// Why a model (or the agent) stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The output token limit of the model call was hit.
    MaxTokens,
    /// A stop sequence was produced.
    StopSequence,
    /// The provider filtered the content.
    ContentFiltered,
    /// A provider guardrail intervened.
    GuardrailIntervened,
    /// The invocation stopped for human input (interrupts pending).
    Interrupt,
    /// The invocation was cancelled.
    Cancelled,
    /// The agent's turn limit was reached.
    LimitTurns,
    /// The agent's total-token limit was reached.
    LimitTotalTokens,
    /// The agent's output-token limit was reached.
    LimitOutputTokens,
}

impl StopReason {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::ContentFiltered => "content_filtered",
            Self::GuardrailIntervened => "guardrail_intervened",
            Self::Interrupt => "interrupt",
            Self::Cancelled => "cancelled",
            Self::LimitTurns => "limit_turns",
            Self::LimitTotalTokens => "limit_total_tokens",
            Self::LimitOutputTokens => "limit_output_tokens",
        }
    }
}

/// Token usage of one model call, or summed over an invocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Total tokens.
    pub total_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_input_tokens: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Usage {
    /// Usage with input and output tokens; total is their sum (saturating: counts come from
    /// the provider, which may report anything).
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens.saturating_add(output_tokens),
            ..Self::default()
        }
    }

    /// Sets the total (when the provider counts it otherwise than input + output).
    pub fn with_total_tokens(mut self, total_tokens: u64) -> Self {
        self.total_tokens = total_tokens;
        self
    }

    /// Sets the input tokens read from and written to the provider's prompt cache.
    pub fn with_cache_tokens(mut self, read: u64, write: u64) -> Self {
        self.cache_read_input_tokens = read;
        self.cache_write_input_tokens = write;
        self
    }

    /// Adds another usage to this one, saturating at `u64::MAX`: a provider reporting huge
    /// counts neither panics the run nor wraps a token budget's count back to a small number.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
        self.cache_write_input_tokens = self
            .cache_write_input_tokens
            .saturating_add(other.cache_write_input_tokens);
    }
}

/// Timing a provider reports for one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StreamMetrics {
    /// End-to-end latency of the call.
    #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
    pub latency: Option<Duration>,
    /// Time to the first byte of the response.
    #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
    pub time_to_first_byte: Option<Duration>,
}

impl StreamMetrics {
    /// Metrics with this latency and time to first byte.
    pub fn new(latency: Option<Duration>, time_to_first_byte: Option<Duration>) -> Self {
        Self {
            latency,
            time_to_first_byte,
        }
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// The kind of a content block being opened in a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BlockStart {
    /// A text block.
    Text,
    /// A tool use; its input arrives as JSON fragments.
    ToolUse {
        /// The tool use id.
        tool_use_id: String,
        /// The tool name.
        name: String,
    },
    /// A reasoning block.
    Reasoning,
}

/// A piece of content for the open block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BlockDelta {
    /// More text.
    Text(String),
    /// A fragment of a tool use's input JSON.
    ToolInput(String),
    /// More reasoning text.
    ReasoningText(String),
    /// The reasoning block's signature (or a part of it).
    ReasoningSignature(String),
    /// Opaque (encrypted) reasoning bytes.
    RedactedReasoning(Vec<u8>),
    /// What the provider attached to the open tool-use or reasoning block for its next request
    /// (a later one replaces it). A text block keeps none: no provider requires one back.
    ProviderState(Box<ProviderState>),
}

/// One normalized event of a model stream. Every provider maps its wire format to these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// The response message starts.
    MessageStart {
        /// Its role (always assistant in practice).
        role: Role,
    },
    /// A content block opens.
    BlockStart(BlockStart),
    /// Content for the open block.
    BlockDelta(BlockDelta),
    /// The open block closes.
    BlockStop,
    /// The message ends.
    MessageStop {
        /// Why the model stopped.
        stop_reason: StopReason,
    },
    /// Usage and timing, usually last.
    Metadata {
        /// Token usage.
        usage: Usage,
        /// Timing.
        metrics: StreamMetrics,
    },
    /// Which model of a fallback chain answers, and the ones it skipped: sent first by a
    /// fallback chain (`rein_models::FallbackModel`), never by a provider.
    Fallback(Box<FallbackRoute>),
}

/// The way a fallback chain took to the model that answered (see [`StreamEvent::Fallback`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FallbackRoute {
    /// The provider of the model that answered.
    pub provider: String,
    /// The id of the model that answered.
    pub model_id: String,
    /// The models tried before it, in order, each with the failure that moved the chain on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedModel>,
}

impl FallbackRoute {
    /// The model that answered, after skipping `skipped`.
    pub fn new(
        provider: impl Into<String>,
        model_id: impl Into<String>,
        skipped: Vec<SkippedModel>,
    ) -> Self {
        Self {
            provider: provider.into(),
            model_id: model_id.into(),
            skipped,
        }
    }
}

/// A model a fallback chain moved on from, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SkippedModel {
    /// Its provider.
    pub provider: String,
    /// Its model id.
    pub model_id: String,
    /// The kind of its failure.
    pub kind: ModelErrorKind,
    /// The HTTP status of its failure, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Its error's message, at most 500 characters (the provider's body left out).
    pub message: String,
}

impl SkippedModel {
    /// The model `provider`/`model_id`, skipped for `error`.
    pub fn new(
        provider: impl Into<String>,
        model_id: impl Into<String>,
        error: &crate::ModelError,
    ) -> Self {
        Self {
            provider: provider.into(),
            model_id: model_id.into(),
            kind: error.kind(),
            status: error.status(),
            // Bounded: it is kept in every audit that records the hop.
            message: error.message().chars().take(500).collect(),
        }
    }
}

/// A complete model response assembled from a stream.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelResponse {
    /// The assistant message.
    pub message: Message,
    /// Why the model stopped (`EndTurn` with tool uses present is reported as `ToolUse`).
    pub stop_reason: StopReason,
    /// Usage of the call.
    pub usage: Usage,
    /// Timing of the call.
    pub metrics: StreamMetrics,
    /// Tool uses whose input JSON did not parse: tool-use id → parser error. Their stored input
    /// is `{}`; the agent answers them with an error result instead of running the tool.
    pub invalid_tool_inputs: Vec<(String, String)>,
    /// When a fallback chain answered: which of its models did, and the ones it skipped.
    /// Boxed: most responses have none, and a response lives in every in-flight invocation.
    pub fallback: Option<Box<FallbackRoute>>,
}

impl ModelResponse {
    /// A response holding `message`, with the given stop reason and no usage.
    pub fn new(message: Message, stop_reason: StopReason) -> Self {
        Self {
            message,
            stop_reason,
            usage: Usage::default(),
            metrics: StreamMetrics::default(),
            invalid_tool_inputs: Vec::new(),
            fallback: None,
        }
    }

    /// The parser error for a tool use whose input JSON did not parse.
    pub fn invalid_input(&self, tool_use_id: &str) -> Option<&str> {
        self.invalid_tool_inputs
            .iter()
            .find(|(id, _)| id == tool_use_id)
            .map(|(_, e)| e.as_str())
    }
}

enum OpenBlock {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
        state: Option<Box<ProviderState>>,
    },
    Reasoning {
        text: String,
        signature: Option<String>,
        redacted: Option<Vec<u8>>,
        state: Option<Box<ProviderState>>,
    },
}

/// Assembles [`StreamEvent`]s into a [`ModelResponse`]. Malformed sequences are typed errors,
/// never panics.
///
/// ```
/// use rein_core::{stream::{BlockDelta, BlockStart, StreamAssembler, StreamEvent, StopReason}};
/// let mut a = StreamAssembler::new();
/// a.push(StreamEvent::BlockStart(BlockStart::Text)).unwrap();
/// a.push(StreamEvent::BlockDelta(BlockDelta::Text("hi".into()))).unwrap();
/// a.push(StreamEvent::BlockStop).unwrap();
/// a.push(StreamEvent::MessageStop { stop_reason: StopReason::EndTurn }).unwrap();
/// let r = a.finish().unwrap();
/// assert_eq!(r.message.text(), "hi");
/// ```
#[derive(Default)]
pub struct StreamAssembler {
    content: Vec<ContentBlock>,
    open: Option<OpenBlock>,
    stop_reason: Option<StopReason>,
    usage: Usage,
    metrics: StreamMetrics,
    invalid: Vec<(String, String)>,
    fallback: Option<Box<FallbackRoute>>,
}

impl StreamAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event.
    pub fn push(&mut self, event: StreamEvent) -> Result<(), Error> {
        match event {
            StreamEvent::MessageStart { .. } => Ok(()),
            StreamEvent::BlockStart(start) => {
                if self.open.is_some() {
                    // A provider that omits stops between blocks: close the previous one.
                    self.close_block();
                }
                self.open = Some(match start {
                    BlockStart::Text => OpenBlock::Text(String::new()),
                    BlockStart::ToolUse { tool_use_id, name } => OpenBlock::ToolUse {
                        id: tool_use_id,
                        name,
                        json: String::new(),
                        state: None,
                    },
                    BlockStart::Reasoning => OpenBlock::Reasoning {
                        text: String::new(),
                        signature: None,
                        redacted: None,
                        state: None,
                    },
                });
                Ok(())
            }
            StreamEvent::BlockDelta(delta) => self.delta(delta),
            StreamEvent::BlockStop => {
                if self.open.is_none() {
                    return Err(Error::MalformedStream(
                        "content block stop without a block start".into(),
                    ));
                }
                self.close_block();
                Ok(())
            }
            StreamEvent::MessageStop { stop_reason } => {
                self.close_block();
                self.stop_reason = Some(stop_reason);
                Ok(())
            }
            StreamEvent::Metadata { usage, metrics } => {
                self.usage = usage;
                self.metrics = metrics;
                Ok(())
            }
            StreamEvent::Fallback(route) => {
                self.fallback = Some(route);
                Ok(())
            }
        }
    }

    fn delta(&mut self, delta: BlockDelta) -> Result<(), Error> {
        let mismatch = |what: &str| {
            Err(Error::MalformedStream(format!(
                "{what} delta does not match the open content block"
            )))
        };
        match (&mut self.open, delta) {
            (None, _) => Err(Error::MalformedStream(
                "content block delta without a block start".into(),
            )),
            (Some(OpenBlock::Text(t)), BlockDelta::Text(s)) => {
                // The first delta is taken whole: most text arrives in one piece from a
                // non-streaming provider, and its string is already exactly sized.
                if t.is_empty() {
                    *t = s;
                } else {
                    t.push_str(&s);
                }
                Ok(())
            }
            (Some(OpenBlock::ToolUse { json, .. }), BlockDelta::ToolInput(s)) => {
                // As text: a whole input in one piece is taken as it is, not copied.
                if json.is_empty() {
                    *json = s;
                } else {
                    json.push_str(&s);
                }
                Ok(())
            }
            (Some(OpenBlock::Reasoning { text, .. }), BlockDelta::ReasoningText(s)) => {
                text.push_str(&s);
                Ok(())
            }
            (Some(OpenBlock::Reasoning { signature, .. }), BlockDelta::ReasoningSignature(s)) => {
                signature.get_or_insert_with(String::new).push_str(&s);
                Ok(())
            }
            (Some(OpenBlock::Reasoning { redacted, .. }), BlockDelta::RedactedReasoning(b)) => {
                redacted.get_or_insert_with(Vec::new).extend_from_slice(&b);
                Ok(())
            }
            (
                Some(OpenBlock::ToolUse { state, .. } | OpenBlock::Reasoning { state, .. }),
                BlockDelta::ProviderState(new),
            ) => {
                *state = Some(new);
                Ok(())
            }
            (Some(OpenBlock::Text(_)), BlockDelta::ProviderState(_)) => Ok(()),
            (_, BlockDelta::Text(_)) => mismatch("text"),
            (_, BlockDelta::ToolInput(_)) => mismatch("tool input"),
            (_, _) => mismatch("reasoning"),
        }
    }

    fn close_block(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        // Most messages hold one block: room for exactly one, not the four a first push
        // reserves (a stored message's spare capacity is kept for the conversation's life).
        if self.content.capacity() == 0 {
            self.content.reserve_exact(1);
        }
        match open {
            OpenBlock::Text(mut t) => {
                t.shrink_to_fit();
                self.content.push(ContentBlock::Text(t))
            }
            OpenBlock::ToolUse {
                id,
                name,
                json,
                state,
            } => {
                let input = if json.trim().is_empty() {
                    Value::Object(Map::new())
                } else {
                    match serde_json::from_str::<Value>(&json) {
                        Ok(v) => v,
                        Err(e) => {
                            self.invalid.push((id.clone(), e.to_string()));
                            Value::Object(Map::new())
                        }
                    }
                };
                self.content.push(ContentBlock::ToolUse(Box::new(ToolUse {
                    tool_use_id: id,
                    name,
                    input,
                    provider_state: state,
                })));
            }
            OpenBlock::Reasoning {
                text,
                signature,
                redacted,
                state,
            } => {
                if let Some(bytes) = redacted {
                    self.content.push(ContentBlock::ReasoningContent(Box::new(
                        ReasoningContent::RedactedContent(bytes.into()),
                    )));
                }
                if !text.is_empty() || signature.is_some() || state.is_some() {
                    self.content.push(ContentBlock::ReasoningContent(Box::new(
                        ReasoningContent::ReasoningText(ReasoningText {
                            text,
                            signature,
                            provider_state: state,
                        }),
                    )));
                }
            }
        }
    }

    /// Takes the fallback route fed so far: a response cut short (withheld by a stream guard)
    /// still says which model answered and which were skipped.
    pub fn take_fallback(&mut self) -> Option<Box<FallbackRoute>> {
        self.fallback.take()
    }

    /// Finishes the message. A stream that ended without a message stop is a typed error.
    pub fn finish(mut self) -> Result<ModelResponse, Error> {
        let Some(mut stop_reason) = self.stop_reason else {
            return Err(Error::MalformedStream(
                "stream ended without a message stop".into(),
            ));
        };
        self.close_block();
        self.content.shrink_to_fit();
        let message = Message::new(Role::Assistant, self.content);
        if stop_reason == StopReason::EndTurn && message.has_tool_use() {
            stop_reason = StopReason::ToolUse;
        }
        Ok(ModelResponse {
            message,
            stop_reason,
            usage: self.usage,
            metrics: self.metrics,
            invalid_tool_inputs: self.invalid,
            fallback: self.fallback,
        })
    }
}

#[cfg(test)]
mod tests {
    /// Finding 13 of issue 35: counts a provider reports are summed without overflow.
    #[test]
    fn usage_sums_saturate() {
        let huge = super::Usage::new(u64::MAX - 1, 5);
        assert_eq!(huge.total_tokens, u64::MAX);
        let mut sum = super::Usage::new(1, 1).with_cache_tokens(u64::MAX, 3);
        sum.add(&huge);
        sum.add(&huge);
        assert_eq!(
            (sum.input_tokens, sum.output_tokens, sum.total_tokens),
            (u64::MAX, 11, u64::MAX)
        );
        assert_eq!(sum.cache_read_input_tokens, u64::MAX);
    }

    use super::*;

    fn ev_text(s: &str) -> StreamEvent {
        StreamEvent::BlockDelta(BlockDelta::Text(s.into()))
    }

    /// A stored message keeps no spare room: history holds it for the conversation's life.
    #[test]
    fn assembled_message_is_exactly_sized() {
        let mut a = StreamAssembler::new();
        a.push(StreamEvent::BlockStart(BlockStart::Text)).unwrap();
        for piece in ["Hel", "lo, ", "world", "!"] {
            a.push(ev_text(piece)).unwrap();
        }
        a.push(StreamEvent::BlockStop).unwrap();
        a.push(StreamEvent::MessageStop {
            stop_reason: StopReason::EndTurn,
        })
        .unwrap();
        let m = a.finish().unwrap().message;
        assert_eq!(m.content.capacity(), 1);
        let ContentBlock::Text(t) = &m.content[0] else {
            panic!("not text: {m:?}");
        };
        assert_eq!((t.as_str(), t.capacity()), ("Hello, world!", t.len()));

        let mut a = StreamAssembler::new();
        for (id, name) in [("t1", "a"), ("t2", "b"), ("t3", "c")] {
            a.push(StreamEvent::BlockStart(BlockStart::ToolUse {
                tool_use_id: id.into(),
                name: name.into(),
            }))
            .unwrap();
            a.push(StreamEvent::BlockStop).unwrap();
        }
        a.push(StreamEvent::MessageStop {
            stop_reason: StopReason::ToolUse,
        })
        .unwrap();
        let m = a.finish().unwrap().message;
        assert_eq!((m.content.len(), m.content.capacity()), (3, 3));
    }

    #[test]
    fn delta_without_start_is_malformed() {
        let mut a = StreamAssembler::new();
        assert!(matches!(
            a.push(ev_text("x")),
            Err(Error::MalformedStream(_))
        ));
    }

    #[test]
    fn missing_message_stop_is_malformed() {
        let mut a = StreamAssembler::new();
        a.push(StreamEvent::BlockStart(BlockStart::Text)).unwrap();
        a.push(ev_text("x")).unwrap();
        assert!(matches!(a.finish(), Err(Error::MalformedStream(_))));
    }

    #[test]
    fn tool_input_is_parsed_at_stop_and_blank_is_empty_object() {
        let mut a = StreamAssembler::new();
        for (id, frags) in [
            ("a", vec!["{\"x\":", " 1}"]),
            ("b", vec!["  "]),
            ("c", vec!["{oops"]),
        ] {
            a.push(StreamEvent::BlockStart(BlockStart::ToolUse {
                tool_use_id: id.into(),
                name: "t".into(),
            }))
            .unwrap();
            for f in frags {
                a.push(StreamEvent::BlockDelta(BlockDelta::ToolInput(f.into())))
                    .unwrap();
            }
            a.push(StreamEvent::BlockStop).unwrap();
        }
        a.push(StreamEvent::MessageStop {
            stop_reason: StopReason::EndTurn,
        })
        .unwrap();
        let r = a.finish().unwrap();
        assert_eq!(
            r.stop_reason,
            StopReason::ToolUse,
            "end_turn with tools is tool_use"
        );
        let uses: Vec<_> = r.message.tool_uses().collect();
        assert_eq!(uses[0].input, serde_json::json!({"x": 1}));
        assert_eq!(uses[1].input, serde_json::json!({}));
        assert!(r.invalid_input("a").is_none());
        assert!(r.invalid_input("c").is_some());
    }

    #[test]
    fn mismatched_delta_is_malformed() {
        let mut a = StreamAssembler::new();
        a.push(StreamEvent::BlockStart(BlockStart::Text)).unwrap();
        let e = a.push(StreamEvent::BlockDelta(BlockDelta::ToolInput("{}".into())));
        assert!(matches!(e, Err(Error::MalformedStream(_))));
    }

    #[test]
    fn reasoning_with_signature() {
        let mut a = StreamAssembler::new();
        a.push(StreamEvent::BlockStart(BlockStart::Reasoning))
            .unwrap();
        a.push(StreamEvent::BlockDelta(BlockDelta::ReasoningText(
            "think".into(),
        )))
        .unwrap();
        a.push(StreamEvent::BlockDelta(BlockDelta::ReasoningSignature(
            "sig".into(),
        )))
        .unwrap();
        a.push(StreamEvent::BlockStop).unwrap();
        a.push(StreamEvent::MessageStop {
            stop_reason: StopReason::EndTurn,
        })
        .unwrap();
        let r = a.finish().unwrap();
        assert_eq!(
            r.message.content[0],
            ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                ReasoningText::new("think", Some("sig".into()))
            )))
        );
    }

    #[test]
    fn provider_state_lands_on_its_tool_use_and_reasoning_and_text_keeps_none() {
        let state = |n: u8| {
            StreamEvent::BlockDelta(BlockDelta::ProviderState(Box::new(ProviderState::new(
                "p@h:1",
                serde_json::json!({ "n": n }),
            ))))
        };
        let mut a = StreamAssembler::new();
        for event in [
            StreamEvent::BlockStart(BlockStart::Reasoning),
            state(1),
            StreamEvent::BlockStop,
            StreamEvent::BlockStart(BlockStart::Text),
            StreamEvent::BlockDelta(BlockDelta::Text("hi".into())),
            state(2),
            StreamEvent::BlockStop,
            StreamEvent::BlockStart(BlockStart::ToolUse {
                tool_use_id: "t".into(),
                name: "f".into(),
            }),
            state(3),
            state(4),
            StreamEvent::BlockStop,
            StreamEvent::MessageStop {
                stop_reason: StopReason::ToolUse,
            },
        ] {
            a.push(event).unwrap();
        }
        let content = a.finish().unwrap().message.content;
        let ContentBlock::ReasoningContent(r) = &content[0] else {
            panic!("{content:?}")
        };
        let ReasoningContent::ReasoningText(r) = &**r else {
            panic!("{r:?}")
        };
        // Reasoning with no text is kept when the provider attached state to it (an
        // encrypted reasoning item with an empty summary).
        assert_eq!(r.text, "");
        assert_eq!(r.provider_state.as_ref().unwrap().data["n"], 1);
        assert_eq!(content[1], ContentBlock::text("hi"));
        let ContentBlock::ToolUse(u) = &content[2] else {
            panic!("{content:?}")
        };
        assert_eq!(u.provider_state.as_ref().unwrap().data["n"], 4);
        // Without state, a tool use's JSON is what it always was (stored sessions, fingerprints).
        let plain = serde_json::to_value(ToolUse::new("t", "f", serde_json::json!({}))).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"toolUseId": "t", "name": "f", "input": {}})
        );
        let back: ToolUse = serde_json::from_value(serde_json::to_value(&**u).unwrap()).unwrap();
        assert_eq!(back, **u);
    }
}
