//! OpenAI Responses API provider (feature `openai-responses`): `POST /v1/responses`, streamed.
//!
//! Stateless by default (`store: false`): every request carries the whole conversation, and
//! reasoning models' reasoning comes back as encrypted items (`include:
//! ["reasoning.encrypted_content"]`), kept on the reasoning blocks as [`ProviderState`] and sent
//! back on the next request to the same server, so a tool loop keeps its reasoning.

use std::collections::VecDeque;
use std::fmt;

use rein_core::{
    ContentBlock, Error, ModelError, ProviderState, Role,
    message::{ReasoningContent, ToolResultContent},
    request::{ModelRequest, ToolChoice},
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, Usage},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{self, Flow, HttpEndpoint, HttpSettings, KeyHeader, SseDecoder, WireDecoder};
use crate::model::{Model, ModelInfo, ModelStream};
use crate::openai::{
    DocumentPart, OPENAI_DEFAULT_BASE_URL, document_part_of, image_data_url, stream_error,
    tool_result_text,
};

const PROVIDER: &str = "openai";
/// The name its [`ProviderState`] is written under (with the server): not the Chat
/// Completions provider's, whose state means something else.
const STATE_PROVIDER: &str = "openai-responses";

/// A model behind OpenAI's Responses API (`/v1/responses`) — OpenAI, Azure OpenAI, and servers
/// that speak it (llama.cpp's `llama-server`, vLLM).
///
/// ```
/// use rein_models::{Model, OpenAiResponsesModel};
///
/// let model = OpenAiResponsesModel::builder("gpt-5-mini")
///     .api_key("sk-test")
///     .build()?;
/// assert_eq!(model.info().provider, "openai");
/// assert!(!format!("{model:?}").contains("sk-test"));
/// # Ok::<(), rein_core::Error>(())
/// ```
#[derive(Clone)]
pub struct OpenAiResponsesModel {
    http: HttpEndpoint,
    model_id: String,
    extra_body: Map<String, Value>,
    store: bool,
    encrypted_reasoning: bool,
    source: String,
}

impl fmt::Debug for OpenAiResponsesModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiResponsesModel")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Builder of an [`OpenAiResponsesModel`].
#[derive(Clone)]
#[must_use]
pub struct OpenAiResponsesModelBuilder {
    http: HttpSettings,
    model_id: String,
    extra_body: Map<String, Value>,
    store: bool,
    encrypted_reasoning: bool,
}

impl fmt::Debug for OpenAiResponsesModelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiResponsesModelBuilder")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl OpenAiResponsesModel {
    /// A builder for `model_id` with OpenAI's base URL, no API key, `store: false`, encrypted
    /// reasoning asked for, connect timeout 10 s and stream idle timeout 120 s. Reads no
    /// environment variable.
    pub fn builder(model_id: impl Into<String>) -> OpenAiResponsesModelBuilder {
        OpenAiResponsesModelBuilder {
            http: HttpSettings::new(OPENAI_DEFAULT_BASE_URL),
            model_id: model_id.into(),
            extra_body: Map::new(),
            store: false,
            encrypted_reasoning: true,
        }
    }

    /// A builder pre-filled from the environment: `OPENAI_BASE_URL` (else OpenAI's URL) and
    /// `OPENAI_API_KEY` (else none).
    pub fn from_env(model_id: impl Into<String>) -> OpenAiResponsesModelBuilder {
        let mut b = Self::builder(model_id);
        b.http.base_url_from_env("OPENAI_BASE_URL");
        b.http.key_from_env("OPENAI_API_KEY");
        b
    }
}

impl OpenAiResponsesModelBuilder {
    http::http_builder_methods!(
        base_url: "The API base URL, up to and including `/v1`; requests go to `{base}/responses`.",
        api_key: "The API key, sent as `Authorization: Bearer <key>`. Never shown by `Debug` or errors.",
    );

    /// Extra top-level request fields merged into every request body (e.g. `{"reasoning":
    /// {"effort": "low"}}`, `{"prompt_cache_key": "…"}`). They override the fields Rein sets.
    pub fn extra_body(mut self, fields: Map<String, Value>) -> Self {
        self.extra_body.extend(fields);
        self
    }

    /// Whether the server may store responses (`store`, default false: nothing is kept
    /// server-side, the conversation travels with each request, as in every Rein provider).
    pub fn store(mut self, on: bool) -> Self {
        self.store = on;
        self
    }

    /// Whether to ask for reasoning as encrypted items (`include:
    /// ["reasoning.encrypted_content"]`, default true), so that a reasoning model keeps its
    /// reasoning across a tool loop without `store`. Turn it off for a server that rejects it.
    pub fn encrypted_reasoning(mut self, on: bool) -> Self {
        self.encrypted_reasoning = on;
        self
    }

    /// Builds the model. Fails on an invalid base URL or header.
    pub fn build(self) -> Result<OpenAiResponsesModel, Error> {
        let http = self.http.connect("/responses")?;
        let server = http.server();
        let source = ProviderState::source_of(
            STATE_PROVIDER,
            server.as_ref().map(|(h, p)| (h.as_str(), *p)),
        );
        Ok(OpenAiResponsesModel {
            http,
            model_id: self.model_id,
            extra_body: self.extra_body,
            store: self.store,
            encrypted_reasoning: self.encrypted_reasoning,
            source,
        })
    }
}

impl Model for OpenAiResponsesModel {
    fn info(&self) -> ModelInfo {
        self.http.info(PROVIDER, &self.model_id)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = encode_request(self, &request);
        let rb = self
            .http
            .post("text/event-stream", KeyHeader::Bearer, body.to_string())
            .await?;
        let decoder = ResponsesDecoder::new(self.source.clone());
        self.http.stream_sse(PROVIDER, rb, decoder).await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding

fn encode_request(model: &OpenAiResponsesModel, request: &ModelRequest) -> Value {
    let mut input = Vec::with_capacity(request.messages.len());
    for m in request.messages.iter() {
        match m.role {
            Role::User => encode_user(&m.content, &mut input),
            Role::Assistant => encode_assistant(&m.content, &model.source, &mut input),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model.model_id));
    if let Some(system) = &request.system_prompt {
        body.insert("instructions".into(), json!(&**system));
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(model.store));
    if model.encrypted_reasoning {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.input_schema})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Any => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
            ToolChoice::None => json!("none"),
            _ => json!("auto"),
        };
        body.insert("tool_choice".into(), choice);
    }
    let c = &request.config;
    if let Some(n) = c.max_tokens {
        body.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        body.insert("top_p".into(), json!(p));
    }
    // The Responses API has no stop sequences and no seed: they are not sent.
    // The typed answer (SPEC §13), which tools coexist with.
    if let Some(f) = &request.output_format {
        body.insert(
            "text".into(),
            json!({"format": {
                "type": "json_schema", "name": f.name, "schema": *f.schema, "strict": f.strict,
            }}),
        );
    }
    for (k, v) in &model.extra_body {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

fn input_part(c: &ToolResultContent) -> Option<Value> {
    match c {
        ToolResultContent::Image(img) => {
            Some(json!({"type": "input_image", "image_url": image_data_url(img)}))
        }
        ToolResultContent::Document(d) => Some(document_input(d)),
        _ => None,
    }
}

fn document_input(d: &rein_core::message::DocumentBlock) -> Value {
    match document_part_of(d) {
        DocumentPart::Text(text) => json!({"type": "input_text", "text": text}),
        DocumentPart::File(data) => {
            json!({"type": "input_file", "filename": d.name, "file_data": data})
        }
    }
}

fn encode_user(content: &[ContentBlock], input: &mut Vec<Value>) {
    // Tool results are items of their own, answering their calls; the rest of the message
    // follows as one user message.
    let mut media = Vec::new();
    for b in content {
        if let ContentBlock::ToolResult(r) = b {
            let output = tool_result_text(r, &mut media);
            input.push(
                json!({"type": "function_call_output", "call_id": r.tool_use_id,
                              "output": output}),
            );
        }
    }
    let mut parts = Vec::new();
    for b in content {
        match b {
            ContentBlock::Text(t) => parts.push(json!({"type": "input_text", "text": t})),
            ContentBlock::Summary(s) => {
                parts.push(json!({"type": "input_text", "text": s.as_prompt_text()}));
            }
            ContentBlock::Image(img) => {
                parts.push(json!({"type": "input_image", "image_url": image_data_url(img)}))
            }
            ContentBlock::Document(d) => parts.push(document_input(d)),
            _ => {}
        }
    }
    parts.extend(media.into_iter().filter_map(input_part));
    if !parts.is_empty() {
        input.push(json!({"role": "user", "content": parts}));
    }
}

fn encode_assistant(content: &[ContentBlock], source: &str, input: &mut Vec<Value>) {
    let mut text = String::new();
    let flush = |text: &mut String, input: &mut Vec<Value>| {
        if !text.is_empty() {
            input.push(json!({"role": "assistant", "content": std::mem::take(text)}));
        }
    };
    for b in content {
        match b {
            ContentBlock::Text(t) => text.push_str(t),
            ContentBlock::ToolUse(u) => {
                flush(&mut text, input);
                input.push(json!({"type": "function_call", "call_id": u.tool_use_id,
                                  "name": u.name, "arguments": u.input.to_string()}));
            }
            ContentBlock::ReasoningContent(r) => {
                // Only this server's reasoning items go back, whole: another provider's
                // reasoning means nothing to it.
                let ReasoningContent::ReasoningText(r) = &**r else {
                    continue;
                };
                let Some(item) = r.provider_state.as_deref().and_then(|s| s.data_for(source))
                else {
                    continue;
                };
                flush(&mut text, input);
                let mut item = item.clone();
                if let Value::Object(fields) = &mut item {
                    fields.insert("type".into(), json!("reasoning"));
                    let summary = if r.text.is_empty() {
                        json!([])
                    } else {
                        json!([{"type": "summary_text", "text": r.text}])
                    };
                    fields.insert("summary".into(), summary);
                }
                input.push(item);
            }
            _ => {}
        }
    }
    flush(&mut text, input);
}

// ---------------------------------------------------------------------------------------------
// Stream decoding

/// One streamed event: its `type` and the fields Rein reads.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    output_index: Option<u32>,
    /// The item a delta belongs to (llama.cpp names items by id only, without an index).
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    item: Option<Item>,
    #[serde(default)]
    response: Option<Response>,
    /// `error` events: the error itself is the event.
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    encrypted_content: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// Which output item an event is about: its index, its id, or both.
struct ItemRef {
    index: Option<u32>,
    id: Option<String>,
}

impl ItemRef {
    /// Whether `self` and `other` name the same item, as far as they can tell.
    fn same(&self, other: &ItemRef) -> bool {
        match (self.index, other.index, &self.id, &other.id) {
            (Some(a), Some(b), ..) => a == b,
            (_, _, Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
}

/// The kind of the open output item.
enum Open {
    Text,
    Reasoning,
    /// Whether its arguments came as deltas (else they come whole with the item).
    Tool {
        streamed: bool,
    },
}

/// Decodes Responses API events into normalized events: each output item (message, function
/// call, reasoning) is a block, opened when the item is added and closed when it is done.
#[derive(Default)]
pub(crate) struct ResponsesDecoder {
    source: String,
    started: bool,
    open: Option<(ItemRef, Open)>,
    called_tools: bool,
    finish: Option<StopReason>,
    usage: Usage,
}

impl ResponsesDecoder {
    pub(crate) fn new(source: String) -> Self {
        Self {
            source,
            ..Self::default()
        }
    }

    fn close(&mut self, out: &mut VecDeque<StreamEvent>) {
        if self.open.take().is_some() {
            out.push_back(StreamEvent::BlockStop);
        }
    }

    /// Opens the block of output item `item`, closing another one left open.
    fn open(
        &mut self,
        item: ItemRef,
        kind: Open,
        start: BlockStart,
        out: &mut VecDeque<StreamEvent>,
    ) {
        self.close(out);
        out.push_back(StreamEvent::BlockStart(start));
        self.open = Some((item, kind));
    }

    fn is_open(&self, item: &ItemRef, want: fn(&Open) -> bool) -> bool {
        matches!(&self.open, Some((open, kind)) if open.same(item) && want(kind))
    }

    fn item_added(&mut self, item: Item, index: Option<u32>, out: &mut VecDeque<StreamEvent>) {
        let at = ItemRef {
            index,
            id: item.id.clone(),
        };
        match item.kind.as_str() {
            "message" => self.open(at, Open::Text, BlockStart::Text, out),
            "reasoning" => self.open(at, Open::Reasoning, BlockStart::Reasoning, out),
            "function_call" => {
                self.called_tools = true;
                let tool_use_id = item
                    .call_id
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| format!("call_{}", rein_core::id::unguessable()));
                let start = BlockStart::ToolUse {
                    tool_use_id,
                    name: item.name.unwrap_or_default(),
                };
                self.open(at, Open::Tool { streamed: false }, start, out);
            }
            // Items Rein does not model (web search calls, ...) open nothing.
            _ => self.close(out),
        }
    }

    fn item_done(&mut self, item: Item, index: Option<u32>, out: &mut VecDeque<StreamEvent>) {
        let at = ItemRef {
            index,
            id: item.id.clone(),
        };
        if !self.is_open(&at, |_| true) {
            return;
        }
        if item.kind == "reasoning" && self.is_open(&at, |k| matches!(k, Open::Reasoning)) {
            let mut data = Map::new();
            if let Some(id) = item.id {
                data.insert("id".into(), json!(id));
            }
            if let Some(encrypted) = item.encrypted_content {
                data.insert("encrypted_content".into(), json!(encrypted));
            }
            let state = ProviderState::new(self.source.clone(), Value::Object(data));
            out.push_back(StreamEvent::BlockDelta(BlockDelta::ProviderState(
                Box::new(state),
            )));
        }
        if let Some((_, Open::Tool { streamed: false })) = &self.open
            && let Some(arguments) = item.arguments.filter(|a| !a.is_empty())
        {
            // A server that sends the arguments only with the finished item.
            out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(arguments)));
        }
        self.close(out);
    }

    fn delta(
        &mut self,
        item: &ItemRef,
        kind: fn(&Open) -> bool,
        delta: BlockDelta,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        if !self.is_open(item, kind) {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: a delta for an output item that is not open ({:?}, {:?})",
                item.index, item.id
            )));
        }
        out.push_back(StreamEvent::BlockDelta(delta));
        Ok(())
    }

    fn ended(&mut self, response: Option<Response>, out: &mut VecDeque<StreamEvent>) {
        self.close(out);
        let Some(r) = response else {
            self.finish = Some(StopReason::EndTurn);
            return;
        };
        if let Some(u) = r.usage {
            let cached = u
                .input_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            let total = u
                .total_tokens
                .unwrap_or(u.input_tokens.saturating_add(u.output_tokens));
            self.usage = Usage::new(u.input_tokens, u.output_tokens)
                .with_total_tokens(total)
                .with_cache_tokens(cached, 0);
        }
        let reason = r.incomplete_details.and_then(|d| d.reason);
        self.finish = Some(match (r.status.as_deref(), reason.as_deref()) {
            (Some("incomplete"), Some("content_filter")) => StopReason::ContentFiltered,
            (Some("incomplete"), _) => StopReason::MaxTokens,
            _ if self.called_tools => StopReason::ToolUse,
            _ => StopReason::EndTurn,
        });
    }
}

impl SseDecoder for ResponsesDecoder {
    fn event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(if data.is_empty() {
                Flow::Continue
            } else {
                Flow::Done
            });
        }
        let event: Event = http::parse_json(PROVIDER, data)?;
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                role: Role::Assistant,
            });
        }
        let index = event.output_index;
        let at = ItemRef {
            index,
            id: event.item_id,
        };
        match event.kind.as_str() {
            "response.output_item.added" => {
                if let Some(item) = event.item {
                    self.item_added(item, index, out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.item {
                    self.item_done(item, index, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let text = event.delta.unwrap_or_default();
                let is_text = |k: &Open| matches!(k, Open::Text);
                self.delta(&at, is_text, BlockDelta::Text(text), out)?;
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let text = event.delta.unwrap_or_default();
                let is_reasoning = |k: &Open| matches!(k, Open::Reasoning);
                self.delta(&at, is_reasoning, BlockDelta::ReasoningText(text), out)?;
            }
            "response.function_call_arguments.delta" => {
                let json = event.delta.unwrap_or_default();
                let is_tool = |k: &Open| matches!(k, Open::Tool { .. });
                self.delta(&at, is_tool, BlockDelta::ToolInput(json), out)?;
                if let Some((_, Open::Tool { streamed })) = &mut self.open {
                    *streamed = true;
                }
            }
            "response.completed" | "response.incomplete" => {
                self.ended(event.response, out);
                return Ok(Flow::Done);
            }
            "response.failed" => {
                let err = event
                    .response
                    .and_then(|r| r.error)
                    .unwrap_or_else(|| json!({"message": "the response failed"}));
                return Err(stream_error(&err));
            }
            "error" => {
                let err = json!({"code": event.code, "message": event.message});
                return Err(stream_error(&err));
            }
            // created, in_progress, content parts, the `.done` of deltas, ...: nothing new.
            _ => {}
        }
        Ok(Flow::Continue)
    }
}

impl WireDecoder for ResponsesDecoder {
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        let Some(stop_reason) = self.finish else {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: the stream ended before response.completed"
            )));
        };
        out.push_back(StreamEvent::MessageStop { stop_reason });
        Ok(())
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}

/// The typed answer's encoding (SPEC §13).
#[cfg(test)]
mod output_format_tests {
    use super::*;
    use crate::test_requests::typed;

    #[test]
    fn a_typed_answer_is_a_json_schema_text_format_beside_tools() {
        let model = OpenAiResponsesModel::builder("m")
            .api_key("k")
            .build()
            .unwrap();
        let body = encode_request(&model, &typed(true, true));
        let f = &body["text"]["format"];
        assert_eq!(f["type"], "json_schema");
        assert_eq!(f["name"], "invoice");
        assert_eq!(f["strict"], true);
        assert_eq!(f["schema"]["additionalProperties"], false);
        assert_eq!(body["tools"][0]["name"], "lookup");
    }
}
