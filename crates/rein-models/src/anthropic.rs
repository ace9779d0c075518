//! Anthropic Messages provider (feature `anthropic`).

use std::collections::VecDeque;
use std::fmt;

use base64::Engine as _;
use rein_core::{
    ContentBlock, Error, ModelError, Role,
    message::{DocumentBlock, ImageBlock, ReasoningContent, ToolResultContent},
    request::{ModelRequest, ToolChoice},
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, Usage},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{self, Flow, HttpEndpoint, HttpSettings, KeyHeader, SseDecoder, WireDecoder};
use crate::model::{Model, ModelInfo, ModelStream};

const PROVIDER: &str = "anthropic";
/// Anthropic's API base URL, used when none is configured.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent by default.
pub const ANTHROPIC_API_VERSION: &str = "2023-06-01";
/// `max_tokens` sent when the request's [`InferenceConfig`](rein_core::request::InferenceConfig) sets
/// none (the Messages API requires it).
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

/// A model behind the Anthropic Messages API (`POST {base}/v1/messages`, streaming).
///
/// Build it with [`AnthropicModel::builder`] or [`AnthropicModel::from_env`]
/// (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`). Cloning is cheap.
///
/// ```
/// use rein_models::{AnthropicModel, Model};
///
/// let model = AnthropicModel::builder("claude-sonnet-4-5")
///     .api_key("sk-ant-example")
///     .max_tokens(2048)
///     .thinking_budget(1024)
///     .build()?;
/// assert_eq!(model.info().model_id, "claude-sonnet-4-5");
/// // The port is the scheme's when the URL has none.
/// assert_eq!(model.info().server, Some(("api.anthropic.com".to_owned(), 443)));
/// assert!(!format!("{model:?}").contains("sk-ant-example"));
/// # Ok::<(), rein_core::Error>(())
/// ```
#[derive(Clone)]
pub struct AnthropicModel {
    http: HttpEndpoint,
    model_id: String,
    version: String,
    extra_body: Map<String, Value>,
    max_tokens: u32,
    thinking_budget: Option<u32>,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("model_id", &self.model_id)
            .field("version", &self.version)
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget", &self.thinking_budget)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Builder of an [`AnthropicModel`].
#[derive(Clone)]
#[must_use]
pub struct AnthropicModelBuilder {
    http: HttpSettings,
    model_id: String,
    version: String,
    extra_body: Map<String, Value>,
    max_tokens: u32,
    thinking_budget: Option<u32>,
}

impl fmt::Debug for AnthropicModelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModelBuilder")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// A builder for `model_id` with Anthropic's base URL, no API key, `max_tokens` 4096,
    /// connect timeout 10 s and stream idle timeout 120 s. Reads no environment variable.
    pub fn builder(model_id: impl Into<String>) -> AnthropicModelBuilder {
        AnthropicModelBuilder {
            http: HttpSettings::new(ANTHROPIC_DEFAULT_BASE_URL),
            model_id: model_id.into(),
            version: ANTHROPIC_API_VERSION.to_owned(),
            extra_body: Map::new(),
            max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
            thinking_budget: None,
        }
    }

    /// A builder pre-filled from `ANTHROPIC_BASE_URL` (else Anthropic's URL) and
    /// `ANTHROPIC_API_KEY` (else none). Builder calls made afterwards override these.
    pub fn from_env(model_id: impl Into<String>) -> AnthropicModelBuilder {
        let mut b = Self::builder(model_id);
        b.http.base_url_from_env("ANTHROPIC_BASE_URL");
        b.http.key_from_env("ANTHROPIC_API_KEY");
        b
    }

    /// The base URL (requests go to `{base}/v1/messages`).
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }
}

impl AnthropicModelBuilder {
    /// The `anthropic-version` header (default `2023-06-01`).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    http::http_builder_methods!(
        base_url: "The API base URL, without `/v1` (e.g. `https://api.anthropic.com`).",
        api_key: "The API key, sent as `x-api-key`. Never shown by `Debug` or errors.",
    );

    /// Extra top-level request fields merged into every request body (e.g. `metadata`,
    /// `top_k`). They override the fields Rein sets.
    pub fn extra_body(mut self, fields: Map<String, Value>) -> Self {
        self.extra_body.extend(fields);
        self
    }

    /// `max_tokens` when the request's config sets none (default 4096).
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }

    /// Enables extended thinking with this token budget (`thinking: {type: enabled,
    /// budget_tokens}`); it must be below `max_tokens`.
    pub fn thinking_budget(mut self, tokens: u32) -> Self {
        self.thinking_budget = Some(tokens);
        self
    }

    /// Builds the model. Fails on an invalid base URL or header.
    pub fn build(self) -> Result<AnthropicModel, Error> {
        http::check_header("anthropic-version", &self.version)?;
        Ok(AnthropicModel {
            http: self.http.connect("/v1/messages")?,
            model_id: self.model_id,
            version: self.version,
            extra_body: self.extra_body,
            max_tokens: self.max_tokens,
            thinking_budget: self.thinking_budget,
        })
    }
}

impl Model for AnthropicModel {
    fn info(&self) -> ModelInfo {
        self.http.info(PROVIDER, &self.model_id)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = encode_request(
            &self.model_id,
            &request,
            self.max_tokens,
            self.thinking_budget,
            &self.extra_body,
        );
        let rb = self
            .http
            .post(
                "text/event-stream",
                KeyHeader::Named("x-api-key"),
                body.to_string(),
            )
            .await?
            .header("anthropic-version", self.version.as_str());
        self.http
            .stream_sse(PROVIDER, rb, MessagesDecoder::default())
            .await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding

/// Encodes a Rein request as a Messages API request body.
pub(crate) fn encode_request(
    model_id: &str,
    request: &ModelRequest,
    default_max_tokens: u32,
    thinking_budget: Option<u32>,
    extra: &Map<String, Value>,
) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len());
    for m in request.messages.iter() {
        let blocks = match m.role {
            Role::User => user_blocks(&m.content),
            Role::Assistant => assistant_blocks(&m.content),
        };
        if blocks.is_empty() {
            continue;
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        messages.push(json!({"role": role, "content": blocks}));
    }
    let c = &request.config;
    if c.cache.history {
        mark_history(&mut messages);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model_id));
    body.insert(
        "max_tokens".into(),
        json!(c.max_tokens.unwrap_or(default_max_tokens)),
    );
    body.insert("stream".into(), json!(true));
    if let Some(system) = &request.system_prompt {
        let system = if c.cache.system {
            json!([{"type": "text", "text": &**system, "cache_control": cache_control()}])
        } else {
            json!(&**system)
        };
        body.insert("system".into(), system);
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description, "input_schema": t.input_schema})
            })
            .collect();
        if let (true, Some(Value::Object(last))) = (c.cache.tools, tools.last_mut()) {
            last.insert("cache_control".into(), cache_control());
        }
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Any => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            ToolChoice::None => json!({"type": "none"}),
            _ => json!({"type": "auto"}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if !c.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), json!(c.stop_sequences));
    }
    // The typed answer (SPEC §13) as `output_config.format`, which tools coexist with. Only a
    // closed schema (every object `additionalProperties: false`) is sent: Anthropic rejects
    // others; the agent states the schema in the system prompt then.
    if let Some(f) = request.output_format.as_ref().filter(|f| f.strict) {
        body.insert(
            "output_config".into(),
            json!({"format": {"type": "json_schema", "schema": *f.schema}}),
        );
    }
    if let Some(budget) = thinking_budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    for (k, v) in extra {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// A prompt-cache breakpoint (five minutes, Anthropic's default).
fn cache_control() -> Value {
    json!({"type": "ephemeral"})
}

/// The history's cache breakpoints (`CachePoints::history`, placed by
/// [`http::history_cache_points`]); with the tools' and the system prompt's, never more than
/// Anthropic's four.
fn mark_history(messages: &mut [Value]) {
    for i in http::history_cache_points(messages).into_iter().flatten() {
        // Thinking blocks cannot carry a breakpoint: the last block that can.
        let block = messages[i]["content"].as_array_mut().and_then(|blocks| {
            blocks
                .iter_mut()
                .rev()
                .find(|b| !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")))
        });
        if let Some(Value::Object(block)) = block {
            block.insert("cache_control".into(), cache_control());
        }
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image_block(img: &ImageBlock) -> Value {
    let bytes = http::media_bytes(&img.source);
    let mime = http::image_mime(&img.format);
    json!({"type": "image", "source": {"type": "base64", "media_type": mime, "data": b64(bytes)}})
}

fn document_block(doc: &DocumentBlock) -> Value {
    let bytes = http::media_bytes(&doc.source);
    match doc.format.as_str() {
        "pdf" => json!({"type": "document", "title": doc.name, "source": {
            "type": "base64", "media_type": "application/pdf", "data": b64(bytes)}}),
        _ => json!({"type": "document", "title": doc.name, "source": {
            "type": "text", "media_type": "text/plain",
            "data": String::from_utf8_lossy(bytes)}}),
    }
}

fn user_blocks(content: &[ContentBlock]) -> Vec<Value> {
    // Tool results must come first in a user message.
    let mut out = Vec::new();
    for b in content {
        if let ContentBlock::ToolResult(r) = b {
            let mut items = Vec::new();
            for c in &r.content {
                match c {
                    ToolResultContent::Text(t) if !t.is_empty() => {
                        items.push(json!({"type": "text", "text": t}));
                    }
                    ToolResultContent::Json(v) => {
                        items.push(json!({"type": "text", "text": v.to_string()}));
                    }
                    ToolResultContent::Image(img) => items.push(image_block(img)),
                    ToolResultContent::Document(d) => items.push(document_block(d)),
                    _ => {}
                }
            }
            let mut block =
                json!({"type": "tool_result", "tool_use_id": r.tool_use_id, "content": items});
            if r.is_error() {
                block["is_error"] = json!(true);
            }
            out.push(block);
        }
    }
    for b in content {
        match b {
            ContentBlock::Text(t) if !t.is_empty() => out.push(json!({"type": "text", "text": t})),
            ContentBlock::Summary(s) => {
                out.push(json!({"type": "text", "text": s.as_prompt_text()}));
            }
            ContentBlock::Image(img) => out.push(image_block(img)),
            ContentBlock::Document(d) => out.push(document_block(d)),
            _ => {}
        }
    }
    out
}

fn assistant_blocks(content: &[ContentBlock]) -> Vec<Value> {
    let mut out = Vec::new();
    for b in content {
        match b {
            ContentBlock::ReasoningContent(reasoning) => match &**reasoning {
                // Thinking goes back verbatim with its signature; unsigned reasoning (from
                // another provider) would be rejected, so it is left out.
                ReasoningContent::ReasoningText(r) => {
                    if let Some(sig) = &r.signature {
                        out.push(json!({"type": "thinking", "thinking": r.text, "signature": sig}));
                    }
                }
                ReasoningContent::RedactedContent(data) => {
                    out.push(json!({"type": "redacted_thinking",
                        "data": String::from_utf8_lossy(&data.0)}));
                }
                _ => {}
            },
            ContentBlock::Text(t) if !t.is_empty() => out.push(json!({"type": "text", "text": t})),
            ContentBlock::ToolUse(u) => {
                let input = if u.input.is_object() {
                    u.input.clone()
                } else {
                    json!({})
                };
                out.push(json!({"type": "tool_use", "id": u.tool_use_id, "name": u.name, "input": input}));
            }
            _ => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Stream decoding

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        #[serde(default)]
        index: u64,
        content_block: Value,
    },
    ContentBlockDelta {
        #[serde(default)]
        index: u64,
        delta: Value,
    },
    ContentBlockStop {
        #[serde(default)]
        index: u64,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// The kind of the forwarded open block: only deltas of that kind may follow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OpenBlock {
    Text,
    ToolUse,
    Reasoning,
}

/// Decodes Messages API events into normalized events.
#[derive(Default)]
pub(crate) struct MessagesDecoder {
    started: bool,
    /// Index and kind of the open content block that is forwarded; blocks of unknown kinds
    /// (server tools, citations ...) are skipped.
    open: Option<(u64, OpenBlock)>,
    stop: Option<StopReason>,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    done: bool,
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::ContentFiltered,
        _ => StopReason::EndTurn,
    }
}

/// Maps an `error` event (e.g. `overloaded_error` mid-stream).
fn stream_error(err: &Value) -> ModelError {
    let ty = err.get("type").and_then(Value::as_str).unwrap_or("error");
    let msg = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("error event in stream");
    let text = format!("{PROVIDER}: {ty}: {msg}");
    let body = json!({"type": "error", "error": err}).to_string();
    let e = match ty {
        "overloaded_error" | "rate_limit_error" => ModelError::throttled(text),
        "authentication_error" | "permission_error" => ModelError::auth(text),
        "invalid_request_error" if http::is_context_overflow(msg) => {
            ModelError::context_window_overflow(text)
        }
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            ModelError::bad_request(text)
        }
        _ => ModelError::server(text),
    };
    e.with_body(body)
}

impl MessagesDecoder {
    fn apply_usage(&mut self, u: &WireUsage) {
        if let Some(n) = u.input_tokens {
            self.input = n;
        }
        if let Some(n) = u.output_tokens {
            self.output = n;
        }
        if let Some(n) = u.cache_creation_input_tokens {
            self.cache_write = n;
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.cache_read = n;
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

    fn block_start(&mut self, index: u64, block: &Value, out: &mut VecDeque<StreamEvent>) {
        let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
        let kind = match s("type") {
            "text" => {
                out.push_back(StreamEvent::BlockStart(BlockStart::Text));
                if !s("text").is_empty() {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::Text(s("text").into())));
                }
                OpenBlock::Text
            }
            "tool_use" => {
                out.push_back(StreamEvent::BlockStart(BlockStart::ToolUse {
                    tool_use_id: s("id").into(),
                    name: s("name").into(),
                }));
                // The input arrives as `input_json_delta`s; a non-empty start input is kept.
                if let Some(input) = block
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(
                        input.to_string(),
                    )));
                }
                OpenBlock::ToolUse
            }
            "thinking" => {
                out.push_back(StreamEvent::BlockStart(BlockStart::Reasoning));
                if !s("thinking").is_empty() {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningText(
                        s("thinking").into(),
                    )));
                }
                if !s("signature").is_empty() {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningSignature(
                        s("signature").into(),
                    )));
                }
                OpenBlock::Reasoning
            }
            "redacted_thinking" => {
                out.push_back(StreamEvent::BlockStart(BlockStart::Reasoning));
                out.push_back(StreamEvent::BlockDelta(BlockDelta::RedactedReasoning(
                    s("data").as_bytes().to_vec(),
                )));
                OpenBlock::Reasoning
            }
            _ => return,
        };
        self.open = Some((index, kind));
    }

    /// Forwards a delta of the open block. A delta of another kind than its block (text inside
    /// a tool use, say) is a malformed stream: forwarding it would corrupt the block.
    fn block_delta(
        &mut self,
        index: u64,
        delta: &Value,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        let Some((open, kind)) = self.open else {
            return Ok(());
        };
        if open != index {
            return Ok(());
        }
        let s = |k: &str| {
            delta
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let ty = delta
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (ev, fits) = match ty {
            "text_delta" => (BlockDelta::Text(s("text")), OpenBlock::Text),
            "input_json_delta" => (BlockDelta::ToolInput(s("partial_json")), OpenBlock::ToolUse),
            "thinking_delta" => (
                BlockDelta::ReasoningText(s("thinking")),
                OpenBlock::Reasoning,
            ),
            "signature_delta" => (
                BlockDelta::ReasoningSignature(s("signature")),
                OpenBlock::Reasoning,
            ),
            // Deltas Rein does not model (citations, ...) are skipped.
            _ => return Ok(()),
        };
        if fits != kind {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: {ty} in content block {index} of another kind ({kind:?})"
            )));
        }
        out.push_back(StreamEvent::BlockDelta(ev));
        Ok(())
    }
}

impl SseDecoder for MessagesDecoder {
    fn event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        if data.trim().is_empty() {
            return Ok(Flow::Continue);
        }
        let ev: WireEvent = http::parse_json(PROVIDER, data)?;
        match ev {
            WireEvent::MessageStart { message } => {
                if let Some(u) = &message.usage {
                    self.apply_usage(u);
                }
                self.start(out);
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                self.start(out);
                if self.open.is_some() {
                    out.push_back(StreamEvent::BlockStop);
                    self.open = None;
                }
                self.block_start(index, &content_block, out);
            }
            WireEvent::ContentBlockDelta { index, delta } => {
                self.block_delta(index, &delta, out)?;
            }
            WireEvent::ContentBlockStop { index } => {
                if self.open.is_some_and(|(open, _)| open == index) {
                    self.open = None;
                    out.push_back(StreamEvent::BlockStop);
                }
            }
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(r) = delta.stop_reason {
                    self.stop = Some(stop_reason(&r));
                }
                if let Some(u) = &usage {
                    self.apply_usage(u);
                }
            }
            WireEvent::MessageStop => {
                self.done = true;
                return Ok(Flow::Done);
            }
            WireEvent::Ping | WireEvent::Unknown => {}
            WireEvent::Error { error } => return Err(stream_error(&error)),
        }
        Ok(Flow::Continue)
    }
}

impl WireDecoder for MessagesDecoder {
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        if !self.done {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: stream ended without message_stop"
            )));
        }
        if self.open.take().is_some() {
            out.push_back(StreamEvent::BlockStop);
        }
        out.push_back(StreamEvent::MessageStop {
            stop_reason: self.stop.unwrap_or(StopReason::EndTurn),
        });
        Ok(())
    }

    fn usage(&self) -> Usage {
        let total = self
            .input
            .saturating_add(self.output)
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write);
        Usage::new(self.input, self.output)
            .with_total_tokens(total)
            .with_cache_tokens(self.cache_read, self.cache_write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::{Message, ToolResult, ToolUse, message::ReasoningText, request::CachePoints};

    /// Where the request's breakpoints are: `(message index or -1 for tools/system, block)`.
    fn breakpoints(body: &Value) -> Vec<String> {
        let mut at = Vec::new();
        if let Some(Value::Array(system)) = body.get("system") {
            for (i, b) in system.iter().enumerate() {
                if b.get("cache_control").is_some() {
                    at.push(format!("system[{i}]"));
                }
            }
        }
        for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
            if t.get("cache_control").is_some() {
                at.push(format!("tools[{i}]"));
            }
        }
        for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
            for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
                if b.get("cache_control").is_some() {
                    at.push(format!("messages[{i}][{j}] {}", b["type"]));
                }
            }
        }
        at
    }

    /// A conversation manager's summary (SPEC §6.1) goes out as ordinary user text.
    #[test]
    fn a_summary_block_is_sent_as_text() {
        use rein_core::{ContentBlock, Role, id::MessageId, message::Summary};
        let summary = Summary::new("They counted.", MessageId::new(), MessageId::new(), 4);
        let lead = summary.as_prompt_text();
        let message = Message::new(
            Role::User,
            vec![ContentBlock::from(summary), ContentBlock::text("next")],
        );
        let body = encode_request(
            "m",
            &ModelRequest::new(vec![message]),
            1024,
            None,
            &Map::new(),
        );
        assert_eq!(
            body["messages"][0]["content"],
            json!([{"type": "text", "text": lead}, {"type": "text", "text": "next"}])
        );
        assert!(lead.ends_with("They counted."));
    }

    #[test]
    fn cache_points_become_at_most_four_breakpoints_that_do_not_move() {
        let body = |cache| {
            encode_request(
                "m",
                &crate::test_requests::tool_loop(cache),
                1024,
                None,
                &Map::new(),
            )
        };
        assert!(breakpoints(&body(CachePoints::NONE)).is_empty());
        assert_eq!(body(CachePoints::NONE)["system"], "You are terse.");
        // The tools' last definition, the system prompt, the last message and the one the
        // previous request ended with: four, Anthropic's cap.
        assert_eq!(
            breakpoints(&body(CachePoints::AUTO)),
            [
                "system[0]",
                "tools[1]",
                "messages[2][0] \"tool_result\"",
                "messages[4][0] \"tool_result\"",
            ]
        );
        // The next turn's request keeps the breakpoint the previous one ended with.
        let mut next = crate::test_requests::tool_loop(CachePoints::AUTO);
        let messages = std::sync::Arc::make_mut(&mut next.messages);
        messages.push(Message::assistant("Sunny in both."));
        messages.push(Message::user("Thanks"));
        let next = encode_request("m", &next, 1024, None, &Map::new());
        assert!(breakpoints(&next).contains(&"messages[4][0] \"tool_result\"".to_owned()));
        assert!(breakpoints(&next).len() <= 4);
        // A thinking block never carries one.
        let mut only = CachePoints::NONE;
        only.history = true;
        let mut thinking_last = crate::test_requests::tool_loop(only);
        std::sync::Arc::make_mut(&mut thinking_last.messages).truncate(2);
        let b = encode_request("m", &thinking_last, 1024, None, &Map::new());
        assert_eq!(
            breakpoints(&b),
            ["messages[0][0] \"text\"", "messages[1][1] \"tool_use\""]
        );
    }

    #[test]
    fn thinking_round_trips_with_signature_and_tool_results_lead() {
        let req = ModelRequest::new(vec![
            Message::user("hi"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                        ReasoningText::new("hmm", Some("sig==".into())),
                    ))),
                    ContentBlock::ReasoningContent(Box::new(ReasoningContent::RedactedContent(
                        b"opaque".to_vec().into(),
                    ))),
                    ContentBlock::ToolUse(Box::new(ToolUse::new("tu1", "f", json!({"a": 1})))),
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("note"),
                    ContentBlock::ToolResult(Box::new(ToolResult::error("tu1", "boom"))),
                ],
            ),
        ])
        .with_system_prompt("sys");
        let body = encode_request("m", &req, 4096, None, &Map::new());
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["system"], "sys");
        let a = &body["messages"][1]["content"];
        assert_eq!(
            a[0],
            json!({"type": "thinking", "thinking": "hmm", "signature": "sig=="})
        );
        assert_eq!(a[1], json!({"type": "redacted_thinking", "data": "opaque"}));
        assert_eq!(a[2]["type"], "tool_use");
        let u = &body["messages"][2]["content"];
        assert_eq!(u[0]["type"], "tool_result");
        assert_eq!(u[0]["is_error"], true);
        assert_eq!(u[1], json!({"type": "text", "text": "note"}));
    }
}

/// The typed answer's encoding (SPEC §13).
#[cfg(test)]
mod output_format_tests {
    use super::*;
    use crate::test_requests::typed;

    #[test]
    fn a_closed_typed_answer_is_output_config_format_beside_tools() {
        let body = encode_request("m", &typed(true, true), 1024, None, &Map::new());
        let f = &body["output_config"]["format"];
        assert_eq!(f["type"], "json_schema");
        assert_eq!(f["schema"]["additionalProperties"], false);
        assert_eq!(body["tools"][0]["name"], "lookup");
        // An open schema is rejected by Anthropic: not sent (the agent states it instead).
        let body = encode_request("m", &typed(true, false), 1024, None, &Map::new());
        assert!(body.get("output_config").is_none());
    }
}
