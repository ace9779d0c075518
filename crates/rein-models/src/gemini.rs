//! Native Gemini API provider (feature `gemini`): `streamGenerateContent` over SSE.
//!
//! Function calls carry thought signatures that Gemini 3 requires back on the next request
//! ("Function call is missing a thought_signature"): they are kept on the tool use as
//! [`ProviderState`] and sent back to the same server only.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use base64::Engine as _;
use rein_core::{
    ContentBlock, Error, ModelError, ProviderState, Role, ToolUse,
    message::{DocumentBlock, ImageBlock, ToolResultContent},
    request::{ModelRequest, ToolChoice},
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, Usage},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{self, Flow, HttpEndpoint, HttpSettings, KeyHeader, SseDecoder, WireDecoder};
use crate::model::{Model, ModelInfo, ModelStream};

const PROVIDER: &str = "gemini";
/// The Gemini API's base URL, used when none is configured.
pub const GEMINI_DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// A model behind the Gemini API (`POST {base}/models/{model}:streamGenerateContent?alt=sse`).
///
/// ```
/// use rein_models::{GeminiModel, Model};
///
/// let model = GeminiModel::builder("gemini-2.5-flash")
///     .api_key("AIza-example")
///     .build()?;
/// assert_eq!(model.info().provider, "gemini");
/// assert!(!format!("{model:?}").contains("AIza-example"));
/// // The model id goes into the URL's path: anything but a model name is refused.
/// assert!(GeminiModel::builder("x/../../admin?").build().is_err());
/// # Ok::<(), rein_core::Error>(())
/// ```
#[derive(Clone)]
pub struct GeminiModel {
    http: HttpEndpoint,
    model_id: String,
    extra_body: Map<String, Value>,
    include_thoughts: bool,
    source: String,
}

impl fmt::Debug for GeminiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeminiModel")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Builder of a [`GeminiModel`].
#[derive(Clone)]
#[must_use]
pub struct GeminiModelBuilder {
    http: HttpSettings,
    model_id: String,
    extra_body: Map<String, Value>,
    include_thoughts: bool,
    /// Why `vertex(..)`'s project or location cannot go into a URL, reported by `build`.
    invalid_vertex: Option<String>,
}

impl fmt::Debug for GeminiModelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeminiModelBuilder")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl GeminiModel {
    /// A builder for `model_id` (`gemini-2.5-flash`, `models/…` or `tunedModels/…`) with the
    /// Gemini API's base URL, no API key, connect timeout 10 s and stream idle timeout 120 s.
    pub fn builder(model_id: impl Into<String>) -> GeminiModelBuilder {
        GeminiModelBuilder {
            http: HttpSettings::new(GEMINI_DEFAULT_BASE_URL),
            model_id: model_id.into(),
            extra_body: Map::new(),
            include_thoughts: false,
            invalid_vertex: None,
        }
    }

    /// A builder for `model_id` on Vertex AI in `project` and `location` (`us-central1`,
    /// `europe-west4`, `global`…): the same wire format at
    /// `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/publishers/google`.
    /// Vertex AI takes an OAuth access token, not an API key: set a
    /// [`token_provider`](GeminiModelBuilder::token_provider) that keeps one fresh.
    ///
    /// ```
    /// use rein_models::{GeminiModel, ModelError, http::TokenProvider};
    ///
    /// struct Adc; // e.g. Application Default Credentials, refreshed before they expire
    /// impl TokenProvider for Adc {
    ///     async fn token(&self) -> Result<String, ModelError> {
    ///         Ok("ya29.example".into())
    ///     }
    /// }
    ///
    /// let model = GeminiModel::vertex("my-project", "europe-west4", "gemini-2.5-flash")
    ///     .token_provider(Adc)
    ///     .build()?;
    /// # let _ = model;
    /// assert!(GeminiModel::vertex("p/../x", "us-central1", "gemini-2.5-flash").build().is_err());
    /// # Ok::<(), rein_models::Error>(())
    /// ```
    pub fn vertex(
        project: impl AsRef<str>,
        location: impl AsRef<str>,
        model_id: impl Into<String>,
    ) -> GeminiModelBuilder {
        let (project, location) = (project.as_ref(), location.as_ref());
        let mut b = Self::builder(model_id);
        // Both go into the URL (the location into its host): letters, digits, `-` and `_` only.
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        };
        if !valid(project) || !valid(location) {
            b.invalid_vertex = Some(format!(
                "`{project}` / `{location}` is not a Vertex AI project and location (letters, digits, `-`, `_`)"
            ));
            return b;
        }
        let host = match location {
            "global" => "aiplatform.googleapis.com".to_owned(),
            _ => format!("{location}-aiplatform.googleapis.com"),
        };
        b.http.base_url =
            format!("https://{host}/v1/projects/{project}/locations/{location}/publishers/google");
        b
    }

    /// A builder pre-filled from the environment: `GEMINI_BASE_URL` (else the Gemini API's URL)
    /// and `GEMINI_API_KEY` (else none).
    pub fn from_env(model_id: impl Into<String>) -> GeminiModelBuilder {
        let mut b = Self::builder(model_id);
        b.http.base_url_from_env("GEMINI_BASE_URL");
        b.http.key_from_env("GEMINI_API_KEY");
        b
    }
}

impl GeminiModelBuilder {
    http::http_builder_methods!(
        base_url: "The API base URL, up to and including the version (`…/v1beta`).",
        api_key: "The API key, sent as `x-goog-api-key`. Never shown by `Debug` or errors.",
    );

    /// Extra top-level request fields merged into every request body (e.g. `{"safetySettings":
    /// […]}`, `{"cachedContent": "cachedContents/…"}`). They override the fields Rein sets.
    pub fn extra_body(mut self, fields: Map<String, Value>) -> Self {
        self.extra_body.extend(fields);
        self
    }

    /// Whether to ask for thought summaries (`thinkingConfig.includeThoughts`, default false):
    /// they arrive as reasoning blocks.
    pub fn include_thoughts(mut self, on: bool) -> Self {
        self.include_thoughts = on;
        self
    }

    /// Builds the model. Fails on an invalid base URL, header or model id.
    pub fn build(self) -> Result<GeminiModel, Error> {
        if let Some(reason) = self.invalid_vertex {
            return Err(rein_core::error::BuildError::InvalidSetting {
                component: "model provider",
                setting: "Vertex AI project and location",
                reason,
            }
            .into());
        }
        let name = self
            .model_id
            .strip_prefix("models/")
            .unwrap_or(&self.model_id);
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                && !s.starts_with('.')
        };
        let path = match name.split_once('/') {
            None if valid(name) => format!("/models/{name}:streamGenerateContent?alt=sse"),
            Some(("tunedModels", tuned)) if valid(tuned) => {
                format!("/tunedModels/{tuned}:streamGenerateContent?alt=sse")
            }
            _ => {
                return Err(rein_core::error::BuildError::InvalidSetting {
                    component: "model provider",
                    setting: "model id",
                    reason: format!(
                        "`{}` is not a Gemini model name (letters, digits, `-`, `.`, `_`)",
                        self.model_id
                    ),
                }
                .into());
            }
        };
        let http = self.http.connect(&path)?;
        let server = http.server();
        let source =
            ProviderState::source_of(PROVIDER, server.as_ref().map(|(h, p)| (h.as_str(), *p)));
        Ok(GeminiModel {
            http,
            model_id: self.model_id,
            extra_body: self.extra_body,
            include_thoughts: self.include_thoughts,
            source,
        })
    }
}

impl Model for GeminiModel {
    fn info(&self) -> ModelInfo {
        self.http.info(PROVIDER, &self.model_id)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = encode_request(self, &request);
        let rb = self
            .http
            .post(
                "text/event-stream",
                KeyHeader::Named("x-goog-api-key"),
                body.to_string(),
            )
            .await?;
        let decoder = GeminiDecoder::new(self.source.clone());
        self.http.stream_sse(PROVIDER, rb, decoder).await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding

/// What Gemini attached to a function call: its own call id and the thought signature.
const CALL_ID: &str = "id";
const SIGNATURE: &str = "thoughtSignature";

fn encode_request(model: &GeminiModel, request: &ModelRequest) -> Value {
    // A function response names its function; Rein's tool results name the call.
    let mut calls: HashMap<&str, &ToolUse> = HashMap::new();
    let mut contents = Vec::with_capacity(request.messages.len());
    for m in request.messages.iter() {
        let parts = match m.role {
            Role::User => user_parts(&m.content, &calls, &model.source),
            Role::Assistant => {
                for b in &m.content {
                    if let ContentBlock::ToolUse(u) = b {
                        calls.insert(&u.tool_use_id, u);
                    }
                }
                model_parts(&m.content, &model.source)
            }
        };
        if !parts.is_empty() {
            let role = if m.role == Role::User {
                "user"
            } else {
                "model"
            };
            contents.push(json!({"role": role, "parts": parts}));
        }
    }
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if let Some(system) = &request.system_prompt {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": &**system}]}),
        );
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                       "parametersJsonSchema": t.input_schema})
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
        let config = match &request.tool_choice {
            ToolChoice::Any => json!({"mode": "ANY"}),
            ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            ToolChoice::None => json!({"mode": "NONE"}),
            _ => json!({"mode": "AUTO"}),
        };
        body.insert(
            "toolConfig".into(),
            json!({ "functionCallingConfig": config }),
        );
    }
    let c = &request.config;
    let mut generation = Map::new();
    if let Some(n) = c.max_tokens {
        generation.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(t) = c.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        generation.insert("topP".into(), json!(p));
    }
    if !c.stop_sequences.is_empty() {
        generation.insert("stopSequences".into(), json!(c.stop_sequences));
    }
    if let Some(s) = c.seed {
        generation.insert("seed".into(), json!(s));
    }
    if model.include_thoughts {
        generation.insert("thinkingConfig".into(), json!({"includeThoughts": true}));
    }
    // The typed answer (SPEC §13), only on calls without tools: Gemini models before 3 reject
    // a response schema beside function calling.
    if let Some(f) = request
        .output_format
        .as_ref()
        .filter(|_| request.tools.is_empty())
    {
        generation.insert("responseMimeType".into(), json!("application/json"));
        generation.insert("responseJsonSchema".into(), (*f.schema).clone());
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    for (k, v) in &model.extra_body {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image_part(img: &ImageBlock) -> Value {
    let mime = http::image_mime(&img.format);
    json!({"inlineData": {"mimeType": mime, "data": b64(http::media_bytes(&img.source))}})
}

fn document_part(doc: &DocumentBlock) -> Value {
    let bytes = http::media_bytes(&doc.source);
    let mime = match doc.format.as_str() {
        "pdf" => "application/pdf",
        "html" => "text/html",
        "csv" => "text/csv",
        "md" => "text/md",
        _ => "text/plain",
    };
    json!({"inlineData": {"mimeType": mime, "data": b64(bytes)}})
}

/// The state Gemini attached to a call, when this server wrote it.
fn call_state<'a>(u: &'a ToolUse, source: &str) -> Option<&'a Value> {
    u.provider_state.as_deref()?.data_for(source)
}

fn user_parts(
    content: &[ContentBlock],
    calls: &HashMap<&str, &ToolUse>,
    source: &str,
) -> Vec<Value> {
    let mut parts = Vec::new();
    for b in content {
        match b {
            ContentBlock::Text(t) => parts.push(json!({"text": t})),
            ContentBlock::Summary(s) => parts.push(json!({"text": s.as_prompt_text()})),
            ContentBlock::Image(img) => parts.push(image_part(img)),
            ContentBlock::Document(d) => parts.push(document_part(d)),
            ContentBlock::ToolResult(r) => {
                let call = calls.get(r.tool_use_id.as_str());
                let mut text = Vec::new();
                let mut media = Vec::new();
                for c in &r.content {
                    match c {
                        ToolResultContent::Text(t) => text.push(t.clone()),
                        ToolResultContent::Json(v) => text.push(v.to_string()),
                        ToolResultContent::Image(img) => media.push(image_part(img)),
                        ToolResultContent::Document(d) => media.push(document_part(d)),
                        _ => {}
                    }
                }
                let key = if r.is_error() { "error" } else { "result" };
                let mut response = Map::new();
                response.insert(
                    "name".into(),
                    json!(call.map_or(r.tool_use_id.as_str(), |u| u.name.as_str())),
                );
                response.insert("response".into(), json!({ key: text.join("\n") }));
                if let Some(id) = call.and_then(|u| call_state(u, source)?.get(CALL_ID)) {
                    response.insert("id".into(), id.clone());
                }
                parts.push(json!({ "functionResponse": response }));
                parts.extend(media);
            }
            _ => {}
        }
    }
    parts
}

fn model_parts(content: &[ContentBlock], source: &str) -> Vec<Value> {
    let mut parts = Vec::new();
    for b in content {
        match b {
            ContentBlock::Text(t) if !t.is_empty() => parts.push(json!({"text": t})),
            ContentBlock::ToolUse(u) => {
                let state = call_state(u, source);
                let mut call = Map::new();
                call.insert("name".into(), json!(u.name));
                call.insert("args".into(), u.input.clone());
                if let Some(id) = state.and_then(|s| s.get(CALL_ID)) {
                    call.insert("id".into(), id.clone());
                }
                let mut part = Map::new();
                part.insert("functionCall".into(), Value::Object(call));
                if let Some(signature) = state.and_then(|s| s.get(SIGNATURE)) {
                    part.insert(SIGNATURE.into(), signature.clone());
                }
                parts.push(Value::Object(part));
            }
            // Thought summaries are not sent back: what Gemini needs of its thinking is the
            // signatures, which travel on the calls.
            _ => {}
        }
    }
    parts
}

// ---------------------------------------------------------------------------------------------
// Stream decoding

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
    #[serde(default)]
    total_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: u64,
}

#[derive(PartialEq)]
enum Open {
    Text,
    Thought,
}

/// Decodes `streamGenerateContent` chunks into normalized events. Text and thoughts stream;
/// each function call arrives whole and is one tool-use block.
#[derive(Default)]
pub(crate) struct GeminiDecoder {
    source: String,
    started: bool,
    open: Option<Open>,
    called_tools: bool,
    finish: Option<StopReason>,
    usage: Usage,
}

impl GeminiDecoder {
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

    fn stream_text(&mut self, kind: Open, text: String, out: &mut VecDeque<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        if self.open.as_ref() != Some(&kind) {
            self.close(out);
            out.push_back(StreamEvent::BlockStart(match kind {
                Open::Text => BlockStart::Text,
                Open::Thought => BlockStart::Reasoning,
            }));
            self.open = Some(kind);
        }
        out.push_back(StreamEvent::BlockDelta(match self.open {
            Some(Open::Thought) => BlockDelta::ReasoningText(text),
            _ => BlockDelta::Text(text),
        }));
    }

    fn part(&mut self, part: Part, out: &mut VecDeque<StreamEvent>) {
        if let Some(call) = part.function_call {
            self.close(out);
            self.called_tools = true;
            let mut state = Map::new();
            let tool_use_id = match call.id.filter(|id| !id.is_empty()) {
                Some(id) => {
                    state.insert(CALL_ID.into(), json!(id));
                    id
                }
                // Older models give calls no id: one that is unguessable, since approvals are
                // asked and answered by tool-use id.
                None => format!("call_{}", rein_core::id::unguessable()),
            };
            if let Some(signature) = part.thought_signature {
                state.insert(SIGNATURE.into(), json!(signature));
            }
            out.push_back(StreamEvent::BlockStart(BlockStart::ToolUse {
                tool_use_id,
                name: call.name,
            }));
            if !state.is_empty() {
                let state = ProviderState::new(self.source.clone(), Value::Object(state));
                out.push_back(StreamEvent::BlockDelta(BlockDelta::ProviderState(
                    Box::new(state),
                )));
            }
            let args = call.args.unwrap_or_else(|| json!({}));
            out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(
                args.to_string(),
            )));
            out.push_back(StreamEvent::BlockStop);
        } else if let Some(text) = part.text {
            let kind = if part.thought {
                Open::Thought
            } else {
                Open::Text
            };
            self.stream_text(kind, text, out);
        }
    }
}

fn finish_reason(reason: &str, called_tools: bool) -> StopReason {
    match reason {
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            StopReason::ContentFiltered
        }
        _ if called_tools => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

impl SseDecoder for GeminiDecoder {
    fn event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: Chunk = http::parse_json(PROVIDER, data)?;
        if let Some(err) = &chunk.error {
            // Sent inside a 200 stream: typed by the status it names, as if it had been one.
            let status = err
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (400..600).contains(c))
                .unwrap_or(500);
            let body = json!({ "error": err }).to_string();
            return Err(http::status_error(
                PROVIDER,
                status,
                None,
                body,
                http::is_context_overflow,
            ));
        }
        if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
            return Err(ModelError::bad_request(format!(
                "{PROVIDER}: the prompt was blocked ({reason})"
            )));
        }
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                role: Role::Assistant,
            });
        }
        if let Some(u) = chunk.usage_metadata {
            let output = u
                .candidates_token_count
                .saturating_add(u.thoughts_token_count);
            let total = u
                .total_token_count
                .unwrap_or(u.prompt_token_count.saturating_add(output));
            // Like OpenAI's, the prompt's count includes the cached tokens.
            self.usage = Usage::new(u.prompt_token_count, output)
                .with_total_tokens(total)
                .with_cache_tokens(u.cached_content_token_count, 0);
        }
        if let Some(candidate) = chunk.candidates.into_iter().next() {
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                self.part(part, out);
            }
            if let Some(reason) = candidate.finish_reason.filter(|r| !r.is_empty()) {
                self.close(out);
                self.finish = Some(finish_reason(&reason, self.called_tools));
            }
        }
        Ok(Flow::Continue)
    }
}

impl WireDecoder for GeminiDecoder {
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        let Some(stop_reason) = self.finish else {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: the stream ended without a finishReason"
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

/// The typed answer's encoding (SPEC §13).
#[cfg(test)]
mod output_format_tests {
    use super::*;
    use crate::test_requests::typed;

    #[test]
    fn a_typed_answer_is_a_response_json_schema_on_calls_without_tools_only() {
        let model = GeminiModel::builder("m").api_key("k").build().unwrap();
        let body = encode_request(&model, &typed(false, false));
        let g = &body["generationConfig"];
        assert_eq!(g["responseMimeType"], "application/json");
        assert_eq!(g["responseJsonSchema"]["required"], json!(["total"]));
        let body = encode_request(&model, &typed(true, false));
        assert!(body.get("generationConfig").is_none());
        assert!(body.get("tools").is_some());
    }
}
