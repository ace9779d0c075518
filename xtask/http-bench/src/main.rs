//! The child process of Rein's `http_*` rows (`xtask bench http`, `xtask bench-all`): a binary
//! that links only what the rows use — the facade with its `openai` feature — as rig's rows run
//! in rig's small peer binary (`xtask/rig-peer`). Peak RSS at one conversation is mostly the
//! executable's resident code pages, so the rows compare like with like. xtask runs it and
//! records its output (`measure.rs`'s `http_children`), as rig's peer runs its own children.
//!
//! `http-bench child http N ROUNDS` with `REIN_BENCH_MOCK_URL` set (`xtask mock-openai`'s URL):
//! N conversations at once for ROUNDS rounds after a warm-up round; prints the JSON that
//! `measure.rs`'s `http_conversations` records.

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
        _ => {
            eprintln!("usage: http-bench child http N ROUNDS (with REIN_BENCH_MOCK_URL set)");
            ExitCode::from(2)
        }
    }
}

/// The `http_N` child: N agents on Rein's OpenAI provider (one shared client, as a server
/// would hold one), each running the mock's three-turn tool conversation once per round.
fn child(args: &[String]) -> ExitCode {
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let Ok(url) = std::env::var("REIN_BENCH_MOCK_URL") else {
        eprintln!("http: REIN_BENCH_MOCK_URL is not set");
        return ExitCode::FAILURE;
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return ExitCode::FAILURE,
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
