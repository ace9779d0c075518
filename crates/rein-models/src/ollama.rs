//! Ollama native provider (feature `ollama`): `POST {base}/api/chat` with NDJSON streaming.

use std::collections::VecDeque;
use std::fmt;

use base64::Engine as _;
use rein_core::{
    ContentBlock, Error, ModelError, Role,
    message::ToolResultContent,
    request::{ModelRequest, ToolChoice},
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, Usage},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::http::{self, BodyDecoder, Flow, HttpEndpoint, HttpSettings, KeyHeader, WireDecoder};
use crate::model::{Model, ModelInfo, ModelStream};

const PROVIDER: &str = "ollama";
/// Ollama's default base URL, used when neither the builder nor `OLLAMA_HOST` sets one.
pub const OLLAMA_DEFAULT_BASE_URL: &str = "http://localhost:11434";

/// A model served by Ollama's native chat API (`POST {base}/api/chat`, NDJSON streaming).
///
/// Build it with [`OllamaModel::builder`] or [`OllamaModel::from_env`] (`OLLAMA_HOST`).
/// Cloning is cheap.
///
/// ```
/// use rein_models::{Model, OllamaModel};
///
/// let model = OllamaModel::builder("qwen3:8b")
///     .option("num_ctx", 8192)
///     .think(true)
///     .build()?;
/// assert_eq!(model.info().model_id, "qwen3:8b");
/// assert_eq!(model.base_url(), "http://localhost:11434");
/// assert_eq!(model.info().server, Some(("localhost".to_owned(), 11434)));
/// # Ok::<(), rein_core::Error>(())
/// ```
#[derive(Clone)]
pub struct OllamaModel {
    http: HttpEndpoint,
    model_id: String,
    options: Map<String, Value>,
    think: Option<bool>,
    keep_alive: Option<String>,
}

impl fmt::Debug for OllamaModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaModel")
            .field("model_id", &self.model_id)
            .field("options", &self.options)
            .field("think", &self.think)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Builder of an [`OllamaModel`].
#[derive(Clone)]
#[must_use]
pub struct OllamaModelBuilder {
    http: HttpSettings,
    model_id: String,
    options: Map<String, Value>,
    think: Option<bool>,
    keep_alive: Option<String>,
}

impl fmt::Debug for OllamaModelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaModelBuilder")
            .field("model_id", &self.model_id)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// `OLLAMA_HOST` as Ollama's own CLI reads it: `host` or `host:port` (http, port 11434 when
/// none), or a URL with a scheme (then the scheme's default port applies, as in Ollama).
fn host_to_url(host: &str) -> String {
    let host = host.trim();
    if host.contains("://") {
        return host.to_owned();
    }
    let authority = host.split('/').next().unwrap_or_default();
    if authority.contains(':') && !authority.ends_with(']') {
        format!("http://{host}")
    } else {
        format!("http://{authority}:11434")
    }
}

impl OllamaModel {
    /// A builder for `model_id` with base URL `http://localhost:11434`, no options, connect
    /// timeout 10 s and stream idle timeout 120 s. Reads no environment variable.
    pub fn builder(model_id: impl Into<String>) -> OllamaModelBuilder {
        OllamaModelBuilder {
            http: HttpSettings::new(OLLAMA_DEFAULT_BASE_URL),
            model_id: model_id.into(),
            options: Map::new(),
            think: None,
            keep_alive: None,
        }
    }

    /// A builder pre-filled from `OLLAMA_HOST` (`host` or `host:port`, port 11434 when none;
    /// or a URL, used as is) and `OLLAMA_API_KEY` (a bearer token, for a proxy or hosted Ollama).
    pub fn from_env(model_id: impl Into<String>) -> OllamaModelBuilder {
        let mut b = Self::builder(model_id);
        if let Some(host) = http::env_var("OLLAMA_HOST") {
            b.http.base_url = host_to_url(&host);
        }
        b.http.key_from_env("OLLAMA_API_KEY");
        b
    }

    /// The base URL (requests go to `{base}/api/chat`).
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }
}

impl OllamaModelBuilder {
    http::http_builder_methods!(
        base_url: "The server's base URL, without `/api` (default `http://localhost:11434`).",
        api_key: "A bearer token sent as `Authorization` (Ollama itself needs none; proxies and \
                  hosted Ollama do). Never shown by `Debug` or errors.",
    );

    /// One model option (`options` of the request, e.g. `num_ctx`, `top_k`, `repeat_penalty`).
    /// The request's own config (temperature, top_p, max tokens, stop, seed) overrides these.
    pub fn option(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options.insert(name.into(), value.into());
        self
    }

    /// Several model options at once.
    pub fn options(mut self, options: Map<String, Value>) -> Self {
        self.options.extend(options);
        self
    }

    /// Sends `think: true|false` (thinking models; default: not sent, the model decides).
    pub fn think(mut self, think: bool) -> Self {
        self.think = Some(think);
        self
    }

    /// Sends `keep_alive` (how long the model stays loaded, e.g. `"10m"`).
    pub fn keep_alive(mut self, keep_alive: impl Into<String>) -> Self {
        self.keep_alive = Some(keep_alive.into());
        self
    }

    /// Builds the model. Fails on an invalid base URL, token or header.
    pub fn build(self) -> Result<OllamaModel, Error> {
        Ok(OllamaModel {
            http: self.http.connect("/api/chat")?,
            model_id: self.model_id,
            options: self.options,
            think: self.think,
            keep_alive: self.keep_alive,
        })
    }
}

impl Model for OllamaModel {
    fn info(&self) -> ModelInfo {
        self.http.info(PROVIDER, &self.model_id)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let mut body = encode_request(&self.model_id, &request, &self.options);
        if let Some(t) = self.think {
            body["think"] = json!(t);
        }
        if let Some(k) = &self.keep_alive {
            body["keep_alive"] = json!(k);
        }
        let rb = self
            .http
            .post("application/x-ndjson", KeyHeader::Bearer, body.to_string())
            .await?;
        let decoder = NdjsonDecoder::with_max_line(self.http.limits().max_line);
        self.http
            .stream_body(PROVIDER, rb, decoder, http::default_error)
            .await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding

fn result_text(content: &[ToolResultContent]) -> String {
    let mut parts = Vec::new();
    for c in content {
        match c {
            ToolResultContent::Text(t) => parts.push(t.clone()),
            ToolResultContent::Json(v) => parts.push(v.to_string()),
            _ => {}
        }
    }
    parts.join("\n")
}

/// Encodes a Rein request as an `/api/chat` request body.
pub(crate) fn encode_request(
    model_id: &str,
    request: &ModelRequest,
    options: &Map<String, Value>,
) -> Value {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system_prompt {
        messages.push(json!({"role": "system", "content": &**system}));
    }
    // Tool results name their tool: remember the names of the tool uses seen so far.
    let mut names: Vec<(String, String)> = Vec::new();
    for m in request.messages.iter() {
        match m.role {
            Role::User => {
                for b in &m.content {
                    if let ContentBlock::ToolResult(r) = b {
                        let name = names
                            .iter()
                            .rev()
                            .find(|(id, _)| *id == r.tool_use_id)
                            .map(|(_, n)| n.clone())
                            .unwrap_or_default();
                        messages.push(json!({"role": "tool", "content": result_text(&r.content),
                            "tool_name": name}));
                    }
                }
                let mut text: Vec<std::borrow::Cow<'_, str>> = Vec::new();
                let mut images = Vec::new();
                for b in &m.content {
                    match b {
                        ContentBlock::Text(t) if !t.is_empty() => text.push(t.as_str().into()),
                        ContentBlock::Summary(s) => text.push(s.as_prompt_text().into()),
                        ContentBlock::Image(img) => {
                            images.push(b64(http::media_bytes(&img.source)))
                        }
                        _ => {}
                    }
                }
                if !text.is_empty() || !images.is_empty() {
                    let mut msg = json!({"role": "user", "content": text.join("\n")});
                    if !images.is_empty() {
                        msg["images"] = json!(images);
                    }
                    messages.push(msg);
                }
            }
            Role::Assistant => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for b in &m.content {
                    match b {
                        ContentBlock::Text(t) => text.push_str(t),
                        ContentBlock::ToolUse(u) => {
                            names.push((u.tool_use_id.clone(), u.name.clone()));
                            let args = if u.input.is_object() {
                                u.input.clone()
                            } else {
                                json!({})
                            };
                            calls.push(json!({"function": {"name": u.name, "arguments": args}}));
                        }
                        _ => {}
                    }
                }
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut msg = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
        }
    }
    let c = &request.config;
    let mut opts = options.clone();
    if let Some(t) = c.temperature {
        opts.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        opts.insert("top_p".into(), json!(p));
    }
    if let Some(n) = c.max_tokens {
        opts.insert("num_predict".into(), json!(n));
    }
    if !c.stop_sequences.is_empty() {
        opts.insert("stop".into(), json!(c.stop_sequences));
    }
    if let Some(s) = c.seed {
        opts.insert("seed".into(), json!(s));
    }
    let mut body = json!({"model": model_id, "messages": messages, "stream": true});
    if !opts.is_empty() {
        body["options"] = Value::Object(opts);
    }
    // Ollama has no tool choice: `None` sends no tools, the rest lets the model choose.
    let offers_tools =
        !request.tools.is_empty() && !matches!(request.tool_choice, ToolChoice::None);
    // The typed answer (SPEC §13) as `format`, only on calls without tools: Ollama's format
    // constrains the whole output, which would rule tool calls out.
    if let Some(f) = request.output_format.as_ref().filter(|_| !offers_tools) {
        body["format"] = (*f.schema).clone();
    }
    if offers_tools {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name,
                    "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

// ---------------------------------------------------------------------------------------------
// Stream decoding

#[derive(Deserialize, Default)]
struct WireLine {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize, Default)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: WireFunction,
}

#[derive(Deserialize, Default)]
struct WireFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Reasoning,
}

/// Decodes Ollama's NDJSON chat stream: splits lines (bounded length) and maps each line to
/// normalized events.
pub(crate) struct NdjsonDecoder {
    lines: http::LineDecoder,
    started: bool,
    open: Option<Open>,
    tool_calls: usize,
    stop: Option<StopReason>,
    input: u64,
    output: u64,
    done: bool,
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "length" => StopReason::MaxTokens,
        _ => StopReason::EndTurn,
    }
}

/// An `{"error": ...}` line mid-stream.
fn stream_error(err: &Value) -> ModelError {
    let msg = err
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            err.get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| err.to_string());
    let text = format!("{PROVIDER}: {msg}");
    let lower = msg.to_ascii_lowercase();
    let e = if http::is_context_overflow(&msg) {
        ModelError::context_window_overflow(text)
    } else if lower.contains("rate limit") || lower.contains("too many requests") {
        ModelError::throttled(text)
    } else if lower.contains("unauthorized") {
        ModelError::auth(text)
    } else {
        ModelError::server(text)
    };
    e.with_body(json!({"error": err}).to_string())
}

impl Default for NdjsonDecoder {
    fn default() -> Self {
        Self {
            lines: http::LineDecoder::new(PROVIDER, http::StreamLimits::DEFAULT_MAX_LINE),
            started: false,
            open: None,
            tool_calls: 0,
            stop: None,
            input: 0,
            output: 0,
            done: false,
        }
    }
}

impl BodyDecoder for NdjsonDecoder {
    /// Feeds raw body bytes; complete lines are decoded.
    fn feed(&mut self, bytes: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<Flow, ModelError> {
        // The line splitter is moved out while its callback borrows the decoder.
        let mut lines = std::mem::replace(&mut self.lines, http::LineDecoder::new(PROVIDER, 0));
        let flow = lines.feed(bytes, |line| self.line_bytes(line, out));
        self.lines = lines;
        flow
    }
}

impl NdjsonDecoder {
    /// A decoder taking lines of at most `max_line` bytes.
    fn with_max_line(max_line: usize) -> Self {
        Self {
            lines: http::LineDecoder::new(PROVIDER, max_line),
            ..Self::default()
        }
    }

    fn line_bytes(
        &mut self,
        line: &[u8],
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        let Ok(text) = std::str::from_utf8(line) else {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: stream line is not UTF-8"
            )));
        };
        self.line(text, out)
    }

    /// Decodes one NDJSON line.
    fn line(&mut self, line: &str, out: &mut VecDeque<StreamEvent>) -> Result<Flow, ModelError> {
        if line.trim().is_empty() {
            return Ok(Flow::Continue);
        }
        if self.done {
            return Ok(Flow::Done);
        }
        let wire: WireLine = http::parse_json(PROVIDER, line)?;
        if let Some(err) = &wire.error {
            return Err(stream_error(err));
        }
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                role: Role::Assistant,
            });
        }
        if let Some(m) = &wire.message {
            if let Some(t) = m.thinking.as_deref().filter(|t| !t.is_empty()) {
                self.open_block(Open::Reasoning, out);
                out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningText(
                    t.to_owned(),
                )));
            }
            if let Some(t) = m.content.as_deref().filter(|t| !t.is_empty()) {
                self.open_block(Open::Text, out);
                out.push_back(StreamEvent::BlockDelta(BlockDelta::Text(t.to_owned())));
            }
            for call in m.tool_calls.iter().flatten() {
                self.close_block(out);
                self.tool_calls += 1;
                // Ollama sends no ids before 0.12: one that never repeats and cannot be
                // guessed, since approvals are asked and answered by tool-use id.
                let id = call
                    .id
                    .clone()
                    .filter(|i| !i.is_empty())
                    .unwrap_or_else(|| format!("ollama_call_{}", rein_core::id::unguessable()));
                out.push_back(StreamEvent::BlockStart(BlockStart::ToolUse {
                    tool_use_id: id,
                    name: call.function.name.clone(),
                }));
                let input = match &call.function.arguments {
                    None | Some(Value::Null) => String::new(),
                    // Some servers send the arguments as a JSON string.
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                };
                if !input.is_empty() {
                    out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(input)));
                }
                out.push_back(StreamEvent::BlockStop);
            }
        }
        if let Some(n) = wire.prompt_eval_count {
            self.input = n;
        }
        if let Some(n) = wire.eval_count {
            self.output = n;
        }
        if wire.done {
            self.done = true;
            let mut stop = stop_reason(wire.done_reason.as_deref().unwrap_or("stop"));
            if stop == StopReason::EndTurn && self.tool_calls > 0 {
                stop = StopReason::ToolUse;
            }
            self.stop = Some(stop);
            return Ok(Flow::Done);
        }
        Ok(Flow::Continue)
    }

    fn open_block(&mut self, kind: Open, out: &mut VecDeque<StreamEvent>) {
        if self.open == Some(kind) {
            return;
        }
        self.close_block(out);
        out.push_back(StreamEvent::BlockStart(match kind {
            Open::Text => BlockStart::Text,
            Open::Reasoning => BlockStart::Reasoning,
        }));
        self.open = Some(kind);
    }

    fn close_block(&mut self, out: &mut VecDeque<StreamEvent>) {
        if self.open.take().is_some() {
            out.push_back(StreamEvent::BlockStop);
        }
    }
}

impl WireDecoder for NdjsonDecoder {
    /// The body ended (or `done` arrived): decode a last unterminated line, then push the
    /// final events, or fail when no `done` line arrived.
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        let line = self.lines.take_rest();
        if !self.done && !line.is_empty() {
            self.line_bytes(&line, out)?;
        }
        if !self.done {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: stream ended without a done line"
            )));
        }
        self.close_block(out);
        out.push_back(StreamEvent::MessageStop {
            stop_reason: self.stop.unwrap_or(StopReason::EndTurn),
        });
        Ok(())
    }

    /// Usage gathered so far.
    fn usage(&self) -> Usage {
        Usage::new(self.input, self.output)
            .with_total_tokens(self.input.saturating_add(self.output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_chunks<'a>(
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> (Vec<StreamEvent>, Option<ModelError>) {
        http::decode_body_chunks(NdjsonDecoder::default(), chunks)
    }

    #[test]
    fn host_forms() {
        assert_eq!(host_to_url("0.0.0.0"), "http://0.0.0.0:11434");
        assert_eq!(host_to_url("gpu:8080"), "http://gpu:8080");
        assert_eq!(host_to_url("https://o.example"), "https://o.example");
        assert_eq!(host_to_url("[::1]"), "http://[::1]:11434");
        assert_eq!(host_to_url("http://h:1"), "http://h:1");
    }

    #[test]
    fn lines_split_across_chunks_and_error_lines() {
        let body = b"{\"message\":{\"role\":\"assistant\",\"content\":\"He\"},\"done\":false}\n{\"message\":{\"content\":\"y\"},\"done\":true,\"done_reason\":\"length\",\"prompt_eval_count\":3,\"eval_count\":2}\n";
        let chunks: Vec<&[u8]> = body.chunks(7).collect();
        let (events, err) = decode_chunks(chunks);
        assert!(err.is_none(), "{err:?}");
        assert!(matches!(
            events.last(),
            Some(StreamEvent::MessageStop {
                stop_reason: StopReason::MaxTokens
            })
        ));
        let (_, err) = decode_chunks([&b"{\"error\":\"model 'x' not found\"}\n"[..]]);
        assert_eq!(
            err.map(|e| e.kind()),
            Some(rein_core::error::ModelErrorKind::Server)
        );
        let (_, err) = decode_chunks([&b"{\"message\":{\"content\":\"a\"}}"[..]]);
        assert_eq!(
            err.map(|e| e.kind()),
            Some(rein_core::error::ModelErrorKind::MalformedStream)
        );
    }

    /// Ids made up for calls that came without one are unguessable and never repeat across
    /// responses (an interrupt id built on them cannot match a call of another response).
    #[test]
    fn made_up_tool_ids_never_repeat_across_responses() {
        let body = b"{\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}},{\"function\":{\"name\":\"g\",\"arguments\":{}}}]},\"done\":false}\n{\"message\":{\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\"}\n";
        http::assert_made_up_tool_ids((0..2).flat_map(|_| decode_chunks([&body[..]]).0), 4);
    }

    #[test]
    fn overlong_line_is_too_large() {
        let big = vec![b'a'; http::StreamLimits::DEFAULT_MAX_LINE + 1];
        let (_, err) = decode_chunks(big.chunks(1 << 20));
        assert_eq!(
            err.map(|e| e.kind()),
            Some(rein_core::error::ModelErrorKind::ResponseTooLarge)
        );
    }
}

/// The typed answer's encoding (SPEC §13).
#[cfg(test)]
mod output_format_tests {
    use super::*;
    use crate::test_requests::typed;

    #[test]
    fn a_typed_answer_is_the_format_on_calls_without_tools_only() {
        let body = encode_request("m", &typed(false, false), &Map::new());
        assert_eq!(body["format"]["required"], json!(["total"]));
        // Ollama's format constrains the whole output: with tools it would rule calls out.
        let body = encode_request("m", &typed(true, false), &Map::new());
        assert!(body.get("format").is_none());
        assert_eq!(body["tools"][0]["function"]["name"], "lookup");
    }
}
