//! The child process of Rein's `http_*` rows (`xtask bench http`, `xtask bench-all`): a binary
//! that links only what the rows use — the facade with its `openai` feature — as rig's rows run
//! in rig's small peer binary (`xtask/rig-peer`). Peak RSS at one conversation is mostly the
//! executable's resident code pages, so the rows compare like with like. xtask runs it and
//! records its output (`measure.rs`'s `http_children`), as rig's peer runs its own children.
//!
//! `http-bench child http N ROUNDS` with `REIN_BENCH_MOCK_URL` set (`xtask mock-openai`'s URL):
//! N conversations at once for ROUNDS rounds after a warm-up round; prints the JSON that
//! `measure.rs`'s `http_conversations` records. `http-bench child http_floor N ROUNDS`: the
//! same three requests per conversation without an SDK — the rows' physical limit.

// Each binary including `measure.rs` uses its own part of it.
#[allow(dead_code)]
#[path = "../../src/measure.rs"]
mod measure;

use std::alloc::System;
use std::process::ExitCode;

use rein::Agent;
use rein::core::{ToolHandle, tool::ToolOutput};
use rein::models::OpenAiModel;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

use measure::{HTTP_CALLS, http_conversations};

// The allocator xtask's and rig's children count with, so the CPU per call pays the same.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["child", "http", ..] => child(&args[1..]),
        ["child", "http_floor", ..] => floor(&args[1..]),
        _ => {
            eprintln!(
                "usage: http-bench child http|http_floor N ROUNDS (with REIN_BENCH_MOCK_URL set)"
            );
            ExitCode::from(2)
        }
    }
}

/// What both children start from: `[variant, N, ROUNDS]`, the mock's URL, the runtime.
struct Setup {
    n: usize,
    rounds: usize,
    url: String,
    rt: tokio::runtime::Runtime,
}

impl Setup {
    fn from(args: &[String]) -> Option<Self> {
        let Ok(url) = std::env::var("REIN_BENCH_MOCK_URL") else {
            eprintln!("http-bench: REIN_BENCH_MOCK_URL is not set");
            return None;
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| eprintln!("http-bench: {e}"))
            .ok()?;
        Some(Self {
            n: args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1),
            rounds: args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5),
            url,
            rt,
        })
    }
}

/// The `http_N` child: N agents on Rein's OpenAI provider (one shared client, as a server
/// would hold one), each running the mock's three-turn tool conversation once per round.
fn child(args: &[String]) -> ExitCode {
    let Some(Setup { n, rounds, url, rt }) = Setup::from(args) else {
        return ExitCode::FAILURE;
    };
    let model = match OpenAiModel::builder("mock")
        .base_url(url)
        .api_key("sk-bench")
        .build()
    {
        Ok(m) => m,
        Err(e) => {
            eprintln!("http: {e}");
            return ExitCode::FAILURE;
        }
    };
    let noop = ToolHandle::from_sync_fn(
        "noop",
        "Trivial sync tool.",
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
        |_, _| Ok(ToolOutput::text("ok")),
    );
    let mut agents: Vec<Agent> = Vec::with_capacity(n);
    for _ in 0..n {
        let built = Agent::builder()
            .model(model.clone())
            .tool(noop.clone())
            .no_conversation_manager()
            .build();
        match built {
            Ok(a) => agents.push(a),
            Err(e) => {
                eprintln!("http: agent build failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut out = json!({"mode": "http", "n": n});
    http_conversations(&rt, &mut out, agents, rounds, |mut a| async move {
        a.clear_history();
        let ok = match a.invoke("hi").await {
            Ok(r) => r.metrics.cycles.len() == HTTP_CALLS,
            Err(e) => {
                eprintln!("http: {e}");
                false
            }
        };
        (a, ok)
    });
    println!("{out}");
    ExitCode::SUCCESS
}

/// The `http_floor_N` child: the rows' physical limit — each conversation's three requests made
/// by the HTTP client Rein's providers use (`rein::models::http::client`, one shared), without
/// an SDK: the bodies Rein would send (the user's message, then one more tool call and result
/// per turn) serialized once before the timing, each response's event stream read to its end
/// and not parsed. What is left per call is the HTTP exchange on this machine: at N = 1 it pays
/// the same cold start after the server's 20 ms as any SDK does.
fn floor(args: &[String]) -> ExitCode {
    let Some(Setup { n, rounds, url, rt }) = Setup::from(args) else {
        return ExitCode::FAILURE;
    };
    let client = match rein::models::http::client(std::time::Duration::from_secs(10)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("http_floor: {e}");
            return ExitCode::FAILURE;
        }
    };
    let endpoint = format!("{}/chat/completions", url.trim_end_matches('/'));
    // Turn k's body: the user's message and k tool calls with their results, as Rein sends it.
    let bodies: Vec<bytes::Bytes> = (0..HTTP_CALLS)
        .map(|k| {
            let mut messages = vec![json!({"role": "user", "content": "hi"})];
            for j in 0..k {
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": format!("call_{j}"), "type": "function",
                     "function": {"name": "noop", "arguments": "{\"x\":1}"}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": format!("call_{j}"),
                                     "content": "ok"}));
            }
            let body = json!({"model": "mock", "messages": messages, "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "noop",
                    "description": "Trivial sync tool.",
                    "parameters": {"type": "object", "properties": {"x": {"type": "integer"}},
                                   "required": ["x"]}}}]});
            bytes::Bytes::from(body.to_string())
        })
        .collect();
    let conversation = Floor {
        client,
        endpoint,
        bodies,
    };
    let convs: Vec<Floor> = (0..n).map(|_| conversation.clone()).collect();
    let mut out = json!({"mode": "http_floor", "n": n});
    http_conversations(&rt, &mut out, convs, rounds, |c| async move {
        let ok = c.converse().await;
        (c, ok)
    });
    println!("{out}");
    ExitCode::SUCCESS
}

/// One conversation of the floor: its client (shared), the endpoint, the three bodies.
#[derive(Clone)]
struct Floor {
    client: reqwest::Client,
    endpoint: String,
    bodies: Vec<bytes::Bytes>,
}

impl Floor {
    /// The three requests in turn, each response read to its end; whether all succeeded.
    async fn converse(&self) -> bool {
        for body in &self.bodies {
            let sent = self
                .client
                .post(&self.endpoint)
                .header("content-type", "application/json")
                .bearer_auth("sk-bench")
                .body(body.clone())
                .send()
                .await;
            let Ok(mut response) = sent else {
                return false;
            };
            if !response.status().is_success() {
                return false;
            }
            let mut read = 0;
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => read += chunk.len(),
                    Ok(None) => break,
                    Err(_) => return false,
                }
            }
            if read == 0 {
                return false;
            }
        }
        true
    }
}
