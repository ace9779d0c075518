//! OpenAI-compatible Chat Completions provider (feature `openai`).
//!
//! Works with OpenAI and the servers that speak its `/v1/chat/completions` streaming dialect:
//! vLLM, llama.cpp's `llama-server`, LM Studio, LiteLLM and Ollama's `/v1`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;

use base64::Engine as _;
use rein_core::{
    ContentBlock, Error, ModelError, ProviderState, Role, ToolResult,
    message::{DocumentBlock, ImageBlock, ReasoningContent, ToolResultContent},
    request::{ModelRequest, ToolChoice},
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, Usage},
    tool::ToolSpec,
};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::http::{self, Flow, HttpEndpoint, HttpSettings, KeyHeader, SseDecoder, WireDecoder};
use crate::model::{Model, ModelInfo, ModelStream};

const PROVIDER: &str = "openai";
/// OpenAI's API base URL, used when none is configured.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A model behind an OpenAI-compatible Chat Completions endpoint.
///
/// Build it with [`OpenAiModel::builder`] (explicit settings) or [`OpenAiModel::from_env`]
/// (`OPENAI_BASE_URL`, `OPENAI_API_KEY`). Cloning is cheap (the HTTP client is shared).
///
/// ```
/// use std::time::Duration;
/// use rein_models::{Model, OpenAiModel};
///
/// let model = OpenAiModel::builder("smollm2")
///     .base_url("http://127.0.0.1:8080/v1") // llama.cpp, vLLM, LM Studio, Ollama /v1 ...
///     .api_key("sk-local")
///     .idle_timeout(Duration::from_secs(60))
///     .build()?;
/// assert_eq!(model.info().provider, "openai");
/// assert_eq!(model.info().server, Some(("127.0.0.1".to_owned(), 8080)));
/// assert!(!format!("{model:?}").contains("sk-local"));
/// # Ok::<(), rein_core::Error>(())
/// ```
#[derive(Clone)]
pub struct OpenAiModel {
    http: HttpEndpoint,
    model_id: String,
    extra_body: Map<String, Value>,
    include_usage: bool,
    max_completion_tokens: bool,
    send_reasoning_back: bool,
    /// The [`ProviderState::source`] of what this server writes.
    source: String,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Builder of an [`OpenAiModel`].
#[derive(Clone)]
#[must_use]
pub struct OpenAiModelBuilder {
    http: HttpSettings,
    model_id: String,
    extra_body: Map<String, Value>,
    include_usage: bool,
    max_completion_tokens: bool,
    send_reasoning_back: bool,
}

impl fmt::Debug for OpenAiModelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModelBuilder")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// A builder for `model_id` with OpenAI's base URL, no API key, connect timeout 10 s and
    /// stream idle timeout 120 s. Reads no environment variable.
    pub fn builder(model_id: impl Into<String>) -> OpenAiModelBuilder {
        OpenAiModelBuilder {
            http: HttpSettings::new(OPENAI_DEFAULT_BASE_URL),
            model_id: model_id.into(),
            extra_body: Map::new(),
            include_usage: true,
            max_completion_tokens: false,
            send_reasoning_back: true,
        }
    }

    /// A builder pre-filled from the environment: `OPENAI_BASE_URL` (else OpenAI's URL) and
    /// `OPENAI_API_KEY` (else none). Builder calls made afterwards override these.
    pub fn from_env(model_id: impl Into<String>) -> OpenAiModelBuilder {
        let mut b = Self::builder(model_id);
        b.http.base_url_from_env("OPENAI_BASE_URL");
        b.http.key_from_env("OPENAI_API_KEY");
        b
    }

    /// The base URL requests go to (`.../v1`).
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }
}

impl OpenAiModelBuilder {
    http::http_builder_methods!(
        base_url: "The API base URL, up to and including `/v1` (e.g. `http://127.0.0.1:11434/v1`).",
        api_key: "The API key, sent as `Authorization: Bearer <key>`. Never shown by `Debug` or errors.",
    );

    /// Extra top-level request fields merged into every request body (e.g.
    /// `{"reasoning_effort": "low"}`, or server-specific sampling options). They override the
    /// fields Rein sets.
    pub fn extra_body(mut self, fields: Map<String, Value>) -> Self {
        self.extra_body.extend(fields);
        self
    }

    /// Whether to ask for usage in the stream (`stream_options.include_usage`, default true).
    /// Turn it off for old servers that reject `stream_options`.
    pub fn include_usage(mut self, on: bool) -> Self {
        self.include_usage = on;
        self
    }

    /// Send the output limit as `max_completion_tokens` (required by OpenAI's reasoning
    /// models) instead of `max_tokens` (default, understood by every compatible server).
    pub fn max_completion_tokens(mut self, on: bool) -> Self {
        self.max_completion_tokens = on;
        self
    }

    /// Whether an assistant message that called tools goes back with the reasoning this same
    /// server streamed for it, in the field it used (`reasoning_content` or `reasoning`) —
    /// default true. DeepSeek's thinking mode requires it within a tool loop (HTTP 400
    /// otherwise); servers that stream no reasoning are sent none, and reasoning another
    /// provider wrote is never sent. Turn it off for a server that streams reasoning but
    /// rejects it in requests.
    pub fn send_reasoning_back(mut self, on: bool) -> Self {
        self.send_reasoning_back = on;
        self
    }

    /// Builds the model. Fails on an invalid base URL or header.
    pub fn build(self) -> Result<OpenAiModel, Error> {
        let http = self.http.connect("/chat/completions")?;
        let server = http.server();
        let source =
            ProviderState::source_of(PROVIDER, server.as_ref().map(|(h, p)| (h.as_str(), *p)));
        Ok(OpenAiModel {
            http,
            model_id: self.model_id,
            extra_body: self.extra_body,
            include_usage: self.include_usage,
            max_completion_tokens: self.max_completion_tokens,
            send_reasoning_back: self.send_reasoning_back,
            source,
        })
    }
}

impl Model for OpenAiModel {
    fn info(&self) -> ModelInfo {
        self.http.info(PROVIDER, &self.model_id)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = encode_request(
            &self.model_id,
            &request,
            &Options {
                include_usage: self.include_usage,
                max_completion_tokens: self.max_completion_tokens,
                send_reasoning_back: self.send_reasoning_back,
                source: &self.source,
            },
            &self.extra_body,
        )?;
        let rb = self
            .http
            .post("text/event-stream", KeyHeader::Bearer, body)
            .await?;
        self.http
            .stream_sse(PROVIDER, rb, ChatDecoder::new(self.source.clone()))
            .await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding

/// How a request is encoded for this server.
pub(crate) struct Options<'a> {
    pub(crate) include_usage: bool,
    pub(crate) max_completion_tokens: bool,
    pub(crate) send_reasoning_back: bool,
    /// Whose [`ProviderState`] goes back to this server.
    pub(crate) source: &'a str,
}

/// Encodes a Rein request as a Chat Completions request body, serialized straight from the
/// borrowed request: no `Value` tree is built, copied and dropped per model call.
pub(crate) fn encode_request(
    model_id: &str,
    request: &ModelRequest,
    options: &Options<'_>,
    extra: &Map<String, Value>,
) -> Result<Vec<u8>, ModelError> {
    let mut body = Vec::with_capacity(1024);
    let wire = Body {
        model_id,
        request,
        options,
        extra,
    };
    serde_json::to_writer(&mut body, &wire).map_err(|e| {
        ModelError::bad_request(format!("{PROVIDER}: the request cannot be encoded: {e}"))
    })?;
    Ok(body)
}

/// The request body: Rein's fields, then `extra`'s, which override Rein's of the same name.
struct Body<'a> {
    model_id: &'a str,
    request: &'a ModelRequest,
    options: &'a Options<'a>,
    extra: &'a Map<String, Value>,
}

/// Writes Rein's field `key` unless `extra` sets it (written after).
fn field<M: SerializeMap, V: Serialize + ?Sized>(
    map: &mut M,
    extra: &Map<String, Value>,
    key: &str,
    value: &V,
) -> Result<(), M::Error> {
    if extra.contains_key(key) {
        return Ok(());
    }
    map.serialize_entry(key, value)
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Self {
            model_id,
            request,
            options,
            extra,
        } = *self;
        let mut map = s.serialize_map(None)?;
        field(&mut map, extra, "model", model_id)?;
        field(&mut map, extra, "messages", &Messages { request, options })?;
        field(&mut map, extra, "stream", &true)?;
        if options.include_usage {
            field(
                &mut map,
                extra,
                "stream_options",
                &StreamOptions {
                    include_usage: true,
                },
            )?;
        }
        if !request.tools.is_empty() {
            field(&mut map, extra, "tools", &Tools(&request.tools))?;
            let choice = match &request.tool_choice {
                ToolChoice::Any => WireToolChoice::Mode("required"),
                ToolChoice::Tool(name) => WireToolChoice::Named(NamedTool::Function {
                    function: Name { name },
                }),
                ToolChoice::None => WireToolChoice::Mode("none"),
                _ => WireToolChoice::Mode("auto"),
            };
            field(&mut map, extra, "tool_choice", &choice)?;
        }
        let c = &request.config;
        if let Some(n) = c.max_tokens {
            let key = if options.max_completion_tokens {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            field(&mut map, extra, key, &n)?;
        }
        // Widened to f64 as serde_json's `Value` holds them: the same numbers as ever.
        if let Some(t) = c.temperature {
            field(&mut map, extra, "temperature", &f64::from(t))?;
        }
        if let Some(p) = c.top_p {
            field(&mut map, extra, "top_p", &f64::from(p))?;
        }
        if !c.stop_sequences.is_empty() {
            field(&mut map, extra, "stop", &c.stop_sequences)?;
        }
        if let Some(seed) = c.seed {
            field(&mut map, extra, "seed", &seed)?;
        }
        // The typed answer (SPEC §13): OpenAI applies it to the answer, not to tool calls, so it
        // goes with tools too (llama.cpp's server honours the same field).
        if let Some(f) = &request.output_format {
            let format = ResponseFormat::JsonSchema {
                json_schema: JsonSchema {
                    name: &f.name,
                    schema: &f.schema,
                    strict: f.strict,
                },
            };
            field(&mut map, extra, "response_format", &format)?;
        }
        for (k, v) in extra {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The request's tools as functions.
struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| WireTool::Function {
            function: FunctionSpec {
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
            },
        }))
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireTool<'a> {
    Function { function: FunctionSpec<'a> },
}

#[derive(Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    /// `auto`, `required` or `none`.
    Mode(&'static str),
    Named(NamedTool<'a>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum NamedTool<'a> {
    Function { function: Name<'a> },
}

#[derive(Serialize)]
struct Name<'a> {
    name: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseFormat<'a> {
    JsonSchema { json_schema: JsonSchema<'a> },
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

/// The conversation as Chat Completions messages: the system prompt first; a Rein message may
/// become several (a user message's tool results are `tool` messages of their own).
struct Messages<'a> {
    request: &'a ModelRequest,
    options: &'a Options<'a>,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        if let Some(system) = &self.request.system_prompt {
            seq.serialize_element(&WireMessage::System { content: system })?;
        }
        for m in self.request.messages.iter() {
            match m.role {
                Role::User => encode_user(&m.content, &mut seq)?,
                Role::Assistant => seq.serialize_element(&WireMessage::Assistant(
                    assistant_message(&m.content, self.options),
                ))?,
            }
        }
        seq.end()
    }
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
    Assistant(AssistantMessage<'a>),
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    /// The reasoning of a turn that called tools, in the field this server streamed it in.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<String>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireToolCall<'a> {
    Function {
        id: &'a str,
        function: FunctionCall<'a>,
        /// Gemini's thought signature, as its OpenAI-compatible endpoint sent it.
        #[serde(skip_serializing_if = "Option::is_none")]
        extra_content: Option<&'a Value>,
    },
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: JsonText<'a>,
}

/// A JSON value sent as its compact JSON text (a tool call's `arguments` is a string).
struct JsonText<'a>(&'a Value);

impl Serialize for JsonText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

/// A part of a user message's content.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl },
    File { file: FileData<'a> },
}

#[derive(Serialize)]
struct ImageUrl {
    /// A `data:` URL.
    url: String,
}

#[derive(Serialize)]
struct FileData<'a> {
    filename: &'a str,
    /// A `data:` URL.
    file_data: String,
}

impl<'a> Part<'a> {
    fn image(img: &ImageBlock) -> Self {
        Part::ImageUrl {
            image_url: ImageUrl {
                url: image_data_url(img),
            },
        }
    }

    fn document(doc: &'a DocumentBlock) -> Self {
        match document_part_of(doc) {
            DocumentPart::Text(text) => Part::Text { text: text.into() },
            DocumentPart::File(file_data) => Part::File {
                file: FileData {
                    filename: &doc.name,
                    file_data,
                },
            },
        }
    }
}

/// A user message's content: a plain string when every part is text (understood by every
/// server), else the array of parts.
struct UserContent<'a>(Vec<Part<'a>>);

impl Serialize for UserContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.iter().all(|p| matches!(p, Part::Text { .. })) {
            s.collect_str(&JoinedText(&self.0))
        } else {
            self.0.serialize(s)
        }
    }
}

/// Text parts joined by newlines, written without building the joined string.
struct JoinedText<'p, 'a>(&'p [Part<'a>]);

impl fmt::Display for JoinedText<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            if let Part::Text { text } = part {
                f.write_str(text)?;
            }
        }
        Ok(())
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An image as a `data:` URL.
pub(crate) fn image_data_url(img: &ImageBlock) -> String {
    let bytes = http::media_bytes(&img.source);
    let mime = http::image_mime(&img.format);
    format!("data:{mime};base64,{}", b64(bytes))
}

/// A document as the model reads it: text-like formats inlined as text, the rest a file.
pub(crate) enum DocumentPart {
    Text(String),
    /// A `data:` URL.
    File(String),
}

pub(crate) fn document_part_of(doc: &DocumentBlock) -> DocumentPart {
    let bytes = http::media_bytes(&doc.source);
    match doc.format.as_str() {
        "txt" | "md" | "csv" | "html" => {
            let text = String::from_utf8_lossy(bytes);
            DocumentPart::Text(format!(
                "<document name=\"{}\">\n{text}\n</document>",
                doc.name
            ))
        }
        other => {
            let mime = match other {
                "pdf" => "application/pdf",
                "doc" => "application/msword",
                "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                "xls" => "application/vnd.ms-excel",
                "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                _ => "application/octet-stream",
            };
            DocumentPart::File(format!("data:{mime};base64,{}", b64(bytes)))
        }
    }
}

/// A tool result's text; its images and documents, which a tool message cannot hold, are put
/// in `media` to follow as user content.
pub(crate) fn tool_result_text<'a>(
    r: &'a ToolResult,
    media: &mut Vec<&'a ToolResultContent>,
) -> String {
    let mut out = Vec::new();
    for c in &r.content {
        match c {
            ToolResultContent::Text(t) => out.push(t.clone()),
            ToolResultContent::Json(v) => out.push(v.to_string()),
            ToolResultContent::Image(_) => {
                out.push("[image attached below]".to_owned());
                media.push(c);
            }
            ToolResultContent::Document(d) => {
                out.push(format!("[document '{}' attached below]", d.name));
                media.push(c);
            }
            _ => {}
        }
    }
    let mut text = out.join("\n");
    if r.is_error() && !text.starts_with("Error") {
        text = format!("Error: {text}");
    }
    text
}

fn encode_user<Q: SerializeSeq>(content: &[ContentBlock], seq: &mut Q) -> Result<(), Q::Error> {
    // Tool results become `role: tool` messages, which must directly follow the assistant's
    // tool calls; the rest of the message follows as one user message.
    let mut media = Vec::new();
    for b in content {
        if let ContentBlock::ToolResult(r) = b {
            let content = tool_result_text(r, &mut media);
            seq.serialize_element(&WireMessage::Tool {
                tool_call_id: &r.tool_use_id,
                content,
            })?;
        }
    }
    let mut parts = Vec::new();
    for b in content {
        match b {
            ContentBlock::Text(t) => parts.push(Part::Text { text: t.into() }),
            ContentBlock::Summary(s) => parts.push(Part::Text {
                text: s.as_prompt_text().into(),
            }),
            ContentBlock::Image(img) => parts.push(Part::image(img)),
            ContentBlock::Document(d) => parts.push(Part::document(d)),
            _ => {}
        }
    }
    // Images from tool results cannot go into `tool` messages: they follow as user content.
    parts.extend(media.into_iter().filter_map(|c| match c {
        ToolResultContent::Image(img) => Some(Part::image(img)),
        ToolResultContent::Document(d) => Some(Part::document(d)),
        _ => None,
    }));
    if parts.is_empty() {
        return Ok(());
    }
    seq.serialize_element(&WireMessage::User {
        content: UserContent(parts),
    })
}

fn assistant_message<'a>(
    content: &'a [ContentBlock],
    options: &Options<'_>,
) -> AssistantMessage<'a> {
    let mut text = Cow::Borrowed("");
    let mut tool_calls = Vec::new();
    // Reasoning this server wrote, and the field it wrote it in.
    let mut reasoning: Option<(&str, String)> = None;
    for b in content {
        match b {
            ContentBlock::Text(t) if text.is_empty() => text = Cow::Borrowed(t.as_str()),
            ContentBlock::Text(t) => text.to_mut().push_str(t),
            ContentBlock::ToolUse(u) => {
                let extra_content = u
                    .provider_state
                    .as_deref()
                    .and_then(|s| s.data_for(options.source)?.get(EXTRA_CONTENT));
                tool_calls.push(WireToolCall::Function {
                    id: &u.tool_use_id,
                    function: FunctionCall {
                        name: &u.name,
                        arguments: JsonText(&u.input),
                    },
                    extra_content,
                });
            }
            ContentBlock::ReasoningContent(r) if options.send_reasoning_back => {
                let ReasoningContent::ReasoningText(r) = &**r else {
                    continue;
                };
                let field = r
                    .provider_state
                    .as_deref()
                    .and_then(|s| s.data_for(options.source)?.get(REASONING_FIELD)?.as_str());
                if let Some(field) = field.and_then(reasoning_field) {
                    reasoning
                        .get_or_insert_with(|| (field, String::new()))
                        .1
                        .push_str(&r.text);
                }
            }
            _ => {}
        }
    }
    let mut m = AssistantMessage {
        content: Some(text),
        tool_calls,
        reasoning_content: None,
        reasoning: None,
    };
    if !m.tool_calls.is_empty() {
        m.content = m.content.filter(|t| !t.is_empty());
        // DeepSeek's rule: the reasoning of a turn that called tools goes back with it.
        match reasoning {
            Some(("reasoning_content", r)) => m.reasoning_content = Some(r),
            Some((_, r)) => m.reasoning = Some(r),
            None => {}
        }
    }
    m
}
/// Where a tool call's `extra_content` is kept in its [`ProviderState`].
const EXTRA_CONTENT: &str = "extra_content";
/// Where the name of the field a server streamed reasoning in is kept.
const REASONING_FIELD: &str = "field";

/// The reasoning fields servers stream, and the only ones sent back.
fn reasoning_field(name: &str) -> Option<&'static str> {
    ["reasoning_content", "reasoning"]
        .into_iter()
        .find(|f| *f == name)
}

// ---------------------------------------------------------------------------------------------
// Stream decoding

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
    /// Gemini's OpenAI-compatible endpoint: `{"google": {"thought_signature": ...}}`.
    #[serde(default)]
    extra_content: Option<Value>,
}

#[derive(Deserialize, Default)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

enum Open {
    Text,
    Reasoning,
    /// A tool call whose block is open.
    Tool {
        index: u32,
        id: String,
    },
    /// A tool call seen but not started yet (no name so far): fragments are held back.
    PendingTool {
        index: u32,
        id: Option<String>,
        args: String,
        extra: Option<Value>,
    },
}

/// Decodes Chat Completions chunks into normalized events. Parallel tool calls are emitted one
/// after the other (start, argument fragments, stop), as servers send them in index order.
#[derive(Default)]
pub(crate) struct ChatDecoder {
    /// The [`ProviderState::source`] of the state this server attaches.
    source: String,
    started: bool,
    open: Option<Open>,
    /// Tool-call indices already closed (a late fragment for one is a protocol error).
    closed_tools: Vec<u32>,
    finish: Option<StopReason>,
    usage: Usage,
}

fn stop_reason(finish: &str) -> StopReason {
    match finish {
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFiltered,
        _ => StopReason::EndTurn,
    }
}

impl ChatDecoder {
    pub(crate) fn new(source: String) -> Self {
        Self {
            source,
            ..Self::default()
        }
    }

    fn state(&self, data: Value) -> StreamEvent {
        let state = ProviderState::new(self.source.clone(), data);
        StreamEvent::BlockDelta(BlockDelta::ProviderState(Box::new(state)))
    }

    /// A tool call's `extra_content`, kept for this server.
    fn tool_state(&self, extra: Option<Value>, out: &mut VecDeque<StreamEvent>) {
        if let Some(extra) = extra {
            out.push_back(self.state(json!({ EXTRA_CONTENT: extra })));
        }
    }

    fn close(&mut self, out: &mut VecDeque<StreamEvent>) {
        match self.open.take() {
            None => {}
            Some(Open::Tool { index, .. }) => {
                self.closed_tools.push(index);
                out.push_back(StreamEvent::BlockStop);
            }
            Some(Open::PendingTool {
                index,
                id,
                args,
                extra,
            }) => {
                // A call that never got a name: still surface it so the agent can answer it.
                let id = id.unwrap_or_else(|| self.synth_id());
                out.push_back(StreamEvent::BlockStart(BlockStart::ToolUse {
                    tool_use_id: id,
                    name: String::new(),
                }));
                self.tool_state(extra, out);
                if !args.is_empty() {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(args)));
                }
                self.closed_tools.push(index);
                out.push_back(StreamEvent::BlockStop);
            }
            Some(_) => out.push_back(StreamEvent::BlockStop),
        }
    }

    /// An id for a call the server sent without one: unguessable and never repeated, since
    /// approvals are asked and answered by tool-use id (a counter would restart at `call_1`
    /// in every response).
    fn synth_id(&self) -> String {
        format!("call_{}", rein_core::id::unguessable())
    }

    fn text(&mut self, s: String, out: &mut VecDeque<StreamEvent>) {
        if s.is_empty() {
            return;
        }
        if !matches!(self.open, Some(Open::Text)) {
            self.close(out);
            self.open = Some(Open::Text);
            out.push_back(StreamEvent::BlockStart(BlockStart::Text));
        }
        out.push_back(StreamEvent::BlockDelta(BlockDelta::Text(s)));
    }

    /// Reasoning streamed in `field`, which is remembered so that it can go back in it.
    fn reasoning(&mut self, s: String, field: &str, out: &mut VecDeque<StreamEvent>) {
        if s.is_empty() {
            return;
        }
        if !matches!(self.open, Some(Open::Reasoning)) {
            self.close(out);
            self.open = Some(Open::Reasoning);
            out.push_back(StreamEvent::BlockStart(BlockStart::Reasoning));
            out.push_back(self.state(json!({ REASONING_FIELD: field })));
        }
        out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningText(s)));
    }

    fn tool(
        &mut self,
        d: ToolCallDelta,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        let index = d.index.unwrap_or(0);
        let f = d.function.unwrap_or_default();
        let new_id = d.id.filter(|s| !s.is_empty());
        let name = f.name.filter(|s| !s.is_empty());
        let args = f.arguments.unwrap_or_default();
        let mut extra = d.extra_content;
        // Same index as the open call, unless the server reuses the index with a new id (seen
        // with servers that send each complete call at index 0).
        let continues = match &self.open {
            Some(Open::Tool { index: i, id }) => {
                *i == index && new_id.as_ref().is_none_or(|n| n == id)
            }
            Some(Open::PendingTool { index: i, id, .. }) => {
                *i == index && (new_id.is_none() || id.is_none() || new_id == *id)
            }
            _ => false,
        };
        if !continues {
            if self.closed_tools.contains(&index) && new_id.is_none() {
                return Err(ModelError::malformed_stream(format!(
                    "{PROVIDER}: tool call {index} continued after the next call started \
                     (interleaved tool-call fragments are not supported)"
                )));
            }
            self.close(out);
            self.open = Some(Open::PendingTool {
                index,
                id: None,
                args: String::new(),
                extra: None,
            });
        }
        if let Some(Open::PendingTool {
            id,
            args: held,
            extra: held_extra,
            ..
        }) = &mut self.open
        {
            if id.is_none() {
                *id = new_id;
            }
            held.push_str(&args);
            if extra.is_some() {
                *held_extra = extra.take();
            }
            if let Some(name) = name {
                let id = match id.take() {
                    Some(id) => id,
                    None => format!("call_{}", rein_core::id::unguessable()),
                };
                let held = std::mem::take(held);
                let held_extra = held_extra.take();
                out.push_back(StreamEvent::BlockStart(BlockStart::ToolUse {
                    tool_use_id: id.clone(),
                    name,
                }));
                self.tool_state(held_extra, out);
                if !held.is_empty() {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(held)));
                }
                self.open = Some(Open::Tool { index, id });
            }
        } else {
            self.tool_state(extra, out);
            if !args.is_empty() {
                out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(args)));
            }
        }
        Ok(())
    }
}

/// Maps an error object sent inside the stream (vLLM, LiteLLM and OpenAI do this).
pub(crate) fn stream_error(err: &Value) -> ModelError {
    let body = json!({ "error": err }).to_string();
    let msg = http::error_message(&body).unwrap_or_else(|| "error event in stream".to_owned());
    let code = err
        .get("code")
        .map(|c| c.to_string().to_ascii_lowercase())
        .unwrap_or_default();
    let ty = err
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let text = format!("{PROVIDER}: {msg}");
    let e = if code.contains("rate_limit") || ty.contains("rate_limit") || code.contains("429") {
        ModelError::throttled(text)
    } else if http::is_context_overflow(&body) {
        ModelError::context_window_overflow(text)
    } else if ty.contains("invalid_request") || code.contains("400") {
        ModelError::bad_request(text)
    } else {
        ModelError::server(text)
    };
    e.with_body(body)
}

impl SseDecoder for ChatDecoder {
    fn event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: Chunk = http::parse_json(PROVIDER, data)?;
        if let Some(err) = &chunk.error {
            return Err(stream_error(err));
        }
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                role: Role::Assistant,
            });
        }
        if let Some(u) = chunk.usage {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            let total = u
                .total_tokens
                .unwrap_or(u.prompt_tokens.saturating_add(u.completion_tokens));
            self.usage = Usage::new(u.prompt_tokens, u.completion_tokens)
                .with_total_tokens(total)
                .with_cache_tokens(cached, 0);
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning_content {
                    self.reasoning(r, "reasoning_content", out);
                } else if let Some(r) = delta.reasoning {
                    self.reasoning(r, "reasoning", out);
                }
                if let Some(t) = delta.content {
                    self.text(t, out);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.tool(call, out)?;
                }
            }
            if let Some(f) = choice.finish_reason.filter(|f| !f.is_empty()) {
                self.close(out);
                self.finish = Some(stop_reason(&f));
            }
        }
        Ok(Flow::Continue)
    }
}

impl WireDecoder for ChatDecoder {
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        let Some(stop_reason) = self.finish else {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: stream ended without a finish_reason"
            )));
        };
        self.close(out);
        out.push_back(StreamEvent::MessageStop { stop_reason });
        Ok(())
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}

/// The request as a `Value` tree, as it was built before (the equivalence test's reference).
#[cfg(test)]
mod value_body;

/// A request body parsed back into a `Value`, for tests to look into.
#[cfg(test)]
pub(crate) fn body(
    model_id: &str,
    request: &ModelRequest,
    options: &Options<'_>,
    extra: &Map<String, Value>,
) -> Value {
    let bytes = encode_request(model_id, request, options, extra).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::{Message, ToolUse, message::MediaSource, tool::ToolSpec};

    const SOURCE: &str = "openai@127.0.0.1:8080";

    const TEST_OPTIONS: Options<'static> = Options {
        include_usage: true,
        max_completion_tokens: false,
        send_reasoning_back: true,
        source: SOURCE,
    };

    fn decode(lines: &[&str]) -> Result<Vec<StreamEvent>, ModelError> {
        let mut d = ChatDecoder::new(SOURCE.into());
        let mut out = VecDeque::new();
        for l in lines {
            if let Flow::Done = d.event("", l, &mut out)? {
                break;
            }
        }
        d.finish(&mut out)?;
        Ok(out.into_iter().collect())
    }

    #[test]
    fn interleaved_tool_fragments_are_malformed_not_garbled() {
        let r = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}"#,
        ]);
        assert!(r.is_err_and(|e| e.kind() == rein_core::error::ModelErrorKind::MalformedStream));
    }

    #[test]
    fn reused_index_with_new_id_is_a_new_call() {
        let ev = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap();
        let starts = ev
            .iter()
            .filter(|e| matches!(e, StreamEvent::BlockStart(_)))
            .count();
        assert_eq!(starts, 2);
    }

    #[test]
    fn reasoning_field_and_missing_tool_ids() {
        // Ollama / OpenRouter name the field `reasoning`; some servers omit tool-call ids.
        let ev = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        let mut a = rein_core::stream::StreamAssembler::new();
        for e in ev {
            a.push(e).unwrap();
        }
        let r = a.finish().unwrap();
        assert!(matches!(
            r.message.content[0],
            ContentBlock::ReasoningContent(_)
        ));
        let u = r.message.tool_uses().next().unwrap();
        assert!(u.tool_use_id.starts_with("call_"), "{}", u.tool_use_id);
        assert_eq!(u.name, "f");
        assert_eq!(u.input, json!({"a": 1}));
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }

    /// Ids made up for calls that came without one are unguessable and never repeat: an
    /// interrupt id built on them cannot match a call of another response (SPEC §7).
    #[test]
    fn made_up_tool_ids_never_repeat_across_responses() {
        let idless = [
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"g","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ];
        http::assert_made_up_tool_ids((0..2).flat_map(|_| decode(&idless).unwrap()), 4);
    }

    #[test]
    fn missing_finish_reason_is_malformed() {
        let r = decode(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            "[DONE]",
        ]);
        assert!(r.is_err_and(|e| e.kind() == rein_core::error::ModelErrorKind::MalformedStream));
    }

    #[test]
    fn encodes_tool_round_trip() {
        let mut result_msg = Message::new(
            Role::User,
            vec![ContentBlock::ToolResult(Box::new(ToolResult::error(
                "t1", "boom",
            )))],
        );
        result_msg.content.push(ContentBlock::text("and now?"));
        let req = ModelRequest::new(vec![
            Message::user("hi"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("calling"),
                    ContentBlock::ToolUse(Box::new(ToolUse::new("t1", "f", json!({"a": 1})))),
                ],
            ),
            result_msg,
        ])
        .with_system_prompt("sys")
        .with_tools(vec![ToolSpec::new(
            "f",
            "does f",
            json!({"type": "object"}),
        )])
        .with_tool_choice(ToolChoice::Tool("f".into()));
        let body = body("m", &req, &TEST_OPTIONS, &Map::new());
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(msgs[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(
            msgs[2]["tool_calls"][0]["function"]["arguments"],
            json!("{\"a\":1}")
        );
        assert_eq!(
            msgs[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "Error: boom"})
        );
        assert_eq!(msgs[4], json!({"role": "user", "content": "and now?"}));
        assert_eq!(body["tool_choice"]["function"]["name"], "f");
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    #[test]
    fn encodes_images_as_data_urls() {
        let req = ModelRequest::new(vec![Message::new(
            Role::User,
            vec![
                ContentBlock::text("what is this?"),
                ContentBlock::Image(Box::new(ImageBlock {
                    format: "png".into(),
                    source: MediaSource::Bytes(vec![1, 2, 3].into()),
                })),
            ],
        )]);
        let body = body("m", &req, &TEST_OPTIONS, &Map::new());
        assert_eq!(
            body["messages"][0]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AQID"
        );
    }
}

/// The typed answer's encoding (SPEC §13).
#[cfg(test)]
mod output_format_tests {
    use super::*;
    use crate::test_requests::typed;

    const OPTIONS: Options<'static> = Options {
        include_usage: true,
        max_completion_tokens: false,
        send_reasoning_back: true,
        source: "openai@127.0.0.1:8080",
    };

    #[test]
    fn a_typed_answer_is_a_json_schema_response_format_beside_tools() {
        for strict in [true, false] {
            let body = body("m", &typed(true, strict), &OPTIONS, &Map::new());
            let f = &body["response_format"];
            assert_eq!(f["type"], "json_schema");
            assert_eq!(f["json_schema"]["name"], "invoice");
            assert_eq!(f["json_schema"]["strict"], strict);
            assert_eq!(f["json_schema"]["schema"]["required"], json!(["total"]));
            assert_eq!(body["tools"][0]["function"]["name"], "lookup");
        }
        let plain = body("m", &ModelRequest::new(Vec::new()), &OPTIONS, &Map::new());
        assert!(plain.get("response_format").is_none());
    }
}
