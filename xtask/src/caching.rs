//! The `caching_*` rows: input tokens billed for a 20-turn tool loop through the Anthropic
//! provider, without cache points and with `CachePoints::AUTO`.
//!
//! No Anthropic server is reachable from a test machine, so a local one bills each request the
//! way Anthropic documents prompt caching: the cache key of a breakpoint (`cache_control`) is the
//! whole prefix up to it, in the order tools → system → messages; a request reads the longest
//! prefix written earlier that ends at a breakpoint or up to 20 blocks before one; it writes the
//! prefix up to its last breakpoint when that is at least 1 024 tokens long (the smallest cached
//! prefix of Sonnet-class models); the rest is uncached input. Tokens are estimated as a block's
//! JSON bytes / 4. Billed-equivalent tokens weigh a cache write 1.25× and a read 0.1× (the
//! five-minute cache's prices relative to input). What the row measures is where Rein puts its
//! breakpoints — whether each request finds the previous one's prefix — not Anthropic itself.

use std::collections::HashSet;
use std::convert::Infallible;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use rein::core::request::{CachePoints, InferenceConfig};
use rein::core::{ToolHandle, tool::ToolOutput};
use rein::models::AnthropicModel;
use serde_json::{Value, json};

use crate::measure::Recorder;

/// Model calls per invocation: 19 tool turns, then the answer.
const TURNS: usize = 20;
/// Anthropic's lookback from a breakpoint for an earlier cache entry, in blocks.
const LOOKBACK: usize = 20;
/// The smallest prefix Anthropic caches (Sonnet-class models), in tokens.
const MIN_CACHED: u64 = 1024;

/// What the billing server has seen.
#[derive(Default)]
struct Billing {
    /// Prefix hashes written to the cache.
    cache: HashSet<u64>,
    requests: u64,
    /// Requests that read something from the cache.
    hits: u64,
    input: u64,
    read: u64,
    write: u64,
}

impl Billing {
    /// Bills one request body; returns (uncached input, cache read, cache write) tokens.
    fn bill(&mut self, body: &Value) -> (u64, u64, u64) {
        let blocks = blocks(body);
        let mut hasher = DefaultHasher::new();
        let mut prefix = Vec::with_capacity(blocks.len());
        let mut total = 0u64;
        for (text, _) in &blocks {
            text.hash(&mut hasher);
            total += (text.len() as u64).div_ceil(4);
            prefix.push((hasher.finish(), total));
        }
        let breakpoints: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].1).collect();
        let read = breakpoints
            .iter()
            .flat_map(|&b| (b.saturating_sub(LOOKBACK)..=b).rev())
            .filter(|&j| self.cache.contains(&prefix[j].0))
            .map(|j| prefix[j].1)
            .max()
            .unwrap_or(0);
        let mut write = 0;
        if let Some(&last) = breakpoints.last()
            && prefix[last].1 >= MIN_CACHED
        {
            write = prefix[last].1.saturating_sub(read);
            for &b in &breakpoints {
                if prefix[b].1 >= MIN_CACHED {
                    self.cache.insert(prefix[b].0);
                }
            }
        }
        let input = total - read - write;
        self.requests += 1;
        self.hits += u64::from(read > 0);
        self.input += input;
        self.read += read;
        self.write += write;
        (input, read, write)
    }

    /// Input tokens at their price: a write costs 1.25 inputs, a read 0.1.
    fn billed(&self) -> f64 {
        self.input as f64 + 1.25 * self.write as f64 + 0.1 * self.read as f64
    }
}

/// The request's blocks in cache order (tools, system, messages), each as its JSON without
/// `cache_control`, and whether it carries a breakpoint.
fn blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |v: &Value| {
        let mut v = v.clone();
        let marked = v
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"))
            .is_some();
        out.push((v.to_string(), marked));
    };
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .for_each(&mut push);
    match &body["system"] {
        Value::Array(parts) => parts.iter().for_each(&mut push),
        Value::Null => {}
        text => push(text),
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        match &m["content"] {
            Value::Array(parts) => parts.iter().for_each(&mut push),
            text => push(&json!({"type": "text", "text": text})),
        }
    }
    out
}

/// An Anthropic Messages server that bills as above and answers the loop: a tool call while the
/// conversation holds fewer than `TURNS - 1` tool results, then text.
async fn answer(
    req: Request<Incoming>,
    billing: Arc<Mutex<Billing>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match req.into_body().collect().await {
        Ok(b) => serde_json::from_slice::<Value>(&b.to_bytes()).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let (input, read, write) = billing
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .bill(&body);
    let results = blocks(&body)
        .iter()
        .filter(|(b, _)| b.contains("\"tool_result\""))
        .count();
    let start = json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message",
        "role": "assistant", "model": "bench", "content": [], "stop_reason": null,
        "usage": {"input_tokens": input, "cache_read_input_tokens": read,
                  "cache_creation_input_tokens": write, "output_tokens": 1}}});
    let (block, delta, stop) = if results < TURNS - 1 {
        (
            json!({"type": "tool_use", "id": format!("toolu_{results}"),
                   "name": format!("lookup_{}", results % 10), "input": {}}),
            json!({"type": "input_json_delta", "partial_json": format!("{{\"page\": {results}}}")}),
            "tool_use",
        )
    } else {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": "Done: every page read."}),
            "end_turn",
        )
    };
    let events = [
        ("message_start", start),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop},
                   "usage": {"output_tokens": 12}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let mut sse = String::new();
    for (name, data) in events {
        sse.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    let mut r = Response::new(Full::new(Bytes::from(sse)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    Ok(r)
}

/// Ten lookup tools with realistic descriptions and results of ≈1.2 KB.
fn tools() -> Vec<ToolHandle> {
    (0..10)
        .map(|i| {
            ToolHandle::from_sync_fn(
                format!("lookup_{i}"),
                format!(
                    "Looks up page N of knowledge base {i} and returns its text. Use it when the \
                     user's question needs facts from that base; pages are numbered from 0. {}",
                    "Results are plain text, at most one page per call. ".repeat(4)
                ),
                json!({"type": "object", "properties": {"page": {"type": "integer",
                       "description": "the page number"}}, "required": ["page"]}),
                |_, _| {
                    Ok(ToolOutput::text(
                        "A page of reference text about the subject at hand. ".repeat(24),
                    ))
                },
            )
        })
        .collect()
}

/// Runs the loop once with `cache` and returns what the server billed.
async fn run_loop(cache: CachePoints) -> Result<Billing, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let billing = Arc::new(Mutex::new(Billing::default()));
    let server = {
        let billing = billing.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let billing = billing.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(req, billing.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        })
    };
    let model = AnthropicModel::builder("claude-sonnet-4-5")
        .base_url(format!("http://127.0.0.1:{port}"))
        .api_key("bench")
        .build()
        .map_err(|e| e.to_string())?;
    let mut config = InferenceConfig::default();
    config.cache = cache;
    let mut builder = rein::Agent::builder()
        .model(model)
        .system_prompt(
            "You are a research assistant for an operations team. Answer from the knowledge \
             bases only, cite the pages you used, and say so when the bases do not hold the \
             answer. "
                .repeat(12),
        )
        .inference_config(config)
        .max_turns(TURNS as u32 + 2);
    for t in tools() {
        builder = builder.tool(t);
    }
    let mut agent = builder.build().map_err(|e| e.to_string())?;
    let result = agent
        .invoke("Read every page you need and summarize them.")
        .await;
    server.abort();
    result.map_err(|e| e.to_string())?;
    let billing = std::mem::take(&mut *billing.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(billing)
}

/// The `caching_*` rows.
pub(crate) fn rows(rec: &Recorder, rt: &tokio::runtime::Runtime) {
    for (variant, cache) in [("none", CachePoints::NONE), ("auto", CachePoints::AUTO)] {
        let billing = match rt.block_on(run_loop(cache)) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("caching_{variant}: {e}");
                continue;
            }
        };
        let meta = json!({"requests": billing.requests, "requests_with_a_cache_read": billing.hits,
            "input": billing.input, "cache_read": billing.read, "cache_write": billing.write,
            "note": "a 20-turn tool loop through the Anthropic provider, billed by Anthropic's documented caching rules (tokens ≈ JSON bytes / 4; write 1.25×, read 0.1×)"});
        rec.record(
            "caching_tool_loop",
            &format!("billed_input_tokens_{variant}"),
            billing.billed(),
            "tokens",
            meta,
        );
    }
}
