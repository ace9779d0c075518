//! A complete custom provider built on the provider kit (`rein_models::http`, feature
//! `http-kit`), for a small fictional streaming API ("Kit API"):
//!
//! - `POST {base}/v1/generate` with `authorization: Bearer <key>` and a JSON body
//!   `{"model", "system", "messages": [{"role", "text"}], "tools": [{"name", "description",
//!   "schema"}], "stream": true}`;
//! - answered with server-sent events: `text` `{"text"}`, `reasoning` `{"text"}` or
//!   `{"signature"}`, `tool_call` `{"id", "name"}`, `tool_args` `{"json"}` (a fragment of the
//!   call's input), `error` `{"error": {"message", "type"}}`, and last `done` `{"stop":
//!   "end_turn" | "tool_use" | "max_tokens", "usage": {"input", "output", "cache_read",
//!   "cache_write"}}`.
//!
//! The kit does the HTTP half (timeouts, status → `ModelError`, `retry-after`, bounded error
//! bodies, SSE framing, the final `Metadata` event); the provider writes only the request
//! encoding and an `SseDecoder`. `tests/it/kit_provider.rs` runs the conformance suite on it.
//!
//! Run: `cargo run -p rein-models --example kit_provider --features http-kit,test-util`
//! (streams one answer from the suite's local fixture server).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use rein_models::futures::StreamExt as _;
use rein_models::http::{self, Blocks, Flow, SseDecoder, WireDecoder};
use rein_models::{
    Error, Model, ModelError, ModelInfo, ModelRequest, ModelStream, Role, StopReason, StreamEvent,
    Usage,
};
use serde_json::{Value, json};

const PROVIDER: &str = "kit";

/// A model of the Kit API.
#[derive(Clone)]
pub struct KitModel {
    client: http::reqwest::Client,
    url: String,
    model: String,
    api_key: String,
    idle_timeout: Duration,
}

// The key never shows in `Debug`.
impl fmt::Debug for KitModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KitModel")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &"<redacted>")
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

impl KitModel {
    /// A model at `base_url` (without `/v1`), with the kit's default timeouts.
    pub fn new(base_url: &str, model: &str, api_key: &str) -> Result<Self, Error> {
        Ok(Self {
            client: http::client(http::DEFAULT_CONNECT_TIMEOUT)?,
            url: format!("{}/v1/generate", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            api_key: api_key.to_owned(),
            idle_timeout: http::DEFAULT_IDLE_TIMEOUT,
        })
    }

    /// Longest wait for the response headers and between two chunks of the stream.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    fn body(&self, request: &ModelRequest) -> String {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| {
                let role = if m.role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                json!({"role": role, "text": m.text()})
            })
            .collect();
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(
                |t| json!({"name": t.name, "description": t.description, "schema": t.input_schema}),
            )
            .collect();
        json!({
            "model": self.model,
            "system": request.system_prompt.as_deref(),
            "messages": messages,
            "tools": tools,
            "stream": true,
        })
        .to_string()
    }
}

impl Model for KitModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new(PROVIDER, self.model.clone())
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let rb = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .header("accept", "text/event-stream")
            .header("content-type", "application/json")
            .body(self.body(&request));
        http::stream_sse(
            PROVIDER,
            rb,
            KitDecoder::default(),
            self.idle_timeout,
            http::StreamLimits::default(),
            http::default_error,
        )
        .await
    }
}

/// Kit API events → Rein's stream events.
#[derive(Default)]
struct KitDecoder {
    started: bool,
    blocks: Blocks,
    stop: Option<StopReason>,
    usage: Usage,
}

impl SseDecoder for KitDecoder {
    fn event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        let v: Value = http::parse_json(PROVIDER, data)?;
        if !self.started {
            self.started = true;
            out.push_back(StreamEvent::MessageStart {
                role: Role::Assistant,
            });
        }
        let str_of = |key: &str| v[key].as_str().unwrap_or_default().to_owned();
        match event {
            "text" => self.blocks.text(str_of("text"), out),
            "reasoning" if v.get("signature").is_some() => {
                self.blocks.reasoning_signature(str_of("signature"), out);
            }
            "reasoning" => self.blocks.reasoning(str_of("text"), out),
            "tool_call" => self.blocks.tool_use(str_of("id"), str_of("name"), out),
            "tool_args" => self.blocks.tool_input(PROVIDER, str_of("json"), out)?,
            "error" => {
                // The same mapping as an HTTP error body (rate limit, context overflow ...).
                let status = match v["error"]["type"].as_str() {
                    Some("rate_limit") => 429,
                    Some("invalid_request") => 400,
                    _ => 500,
                };
                return Err(http::status_error(
                    PROVIDER,
                    status,
                    None,
                    data.to_owned(),
                    http::is_context_overflow,
                ));
            }
            "done" => {
                self.stop = Some(match v["stop"].as_str() {
                    Some("tool_use") => StopReason::ToolUse,
                    Some("max_tokens") => StopReason::MaxTokens,
                    _ => StopReason::EndTurn,
                });
                let n = |key: &str| v["usage"][key].as_u64().unwrap_or(0);
                let (input, output) = (n("input"), n("output"));
                let (read, write) = (n("cache_read"), n("cache_write"));
                self.usage = Usage::new(input, output)
                    .with_total_tokens(input + output + read + write)
                    .with_cache_tokens(read, write);
                return Ok(Flow::Done);
            }
            _ => {} // events added later
        }
        Ok(Flow::Continue)
    }
}

impl WireDecoder for KitDecoder {
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        let Some(stop_reason) = self.stop else {
            return Err(ModelError::malformed_stream(format!(
                "{PROVIDER}: stream ended without a done event"
            )));
        };
        self.blocks.close(out);
        out.push_back(StreamEvent::MessageStop { stop_reason });
        Ok(())
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use rein_models::conformance::{FixtureResponse, FixtureServer};

    let server = FixtureServer::start().await?;
    server.push(FixtureResponse::sse(
        "event: text\ndata: {\"text\":\"Hello from \"}\n\n\
         event: text\ndata: {\"text\":\"the Kit API\"}\n\n\
         event: done\ndata: {\"stop\":\"end_turn\",\"usage\":{\"input\":3,\"output\":4}}\n\n",
    ));
    let model = KitModel::new(&server.base_url(), "kit-1", "sk-kit")?;
    let mut stream = model
        .stream(ModelRequest::new(vec![rein_models::Message::user("Hi")]))
        .await?;
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::BlockDelta(rein_models::BlockDelta::Text(t)) => print!("{t}"),
            StreamEvent::Metadata { usage, .. } => println!("\n{usage:?}"),
            _ => {}
        }
    }
    Ok(())
}
