//! Scale benchmarks (plain harness; prints its numbers):
//! - 10 000 concurrent invocations against a model that waits 100 ms per call: wall time
//!   against the 100 ms floor, and peak RSS;
//! - 1 000 idle agents holding 20-message histories: heap bytes per agent, counted by a
//!   counting global allocator.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::time::{Duration, Instant};

use rein_agent::Agent;
use rein_core::Message;
use rein_models::ScriptedModel;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn history_20() -> Vec<Message> {
    (0..10)
        .flat_map(|i| {
            [
                Message::user(format!(
                    "Question number {i}: what is the weather like today?"
                )),
                Message::assistant(format!(
                    "Answer number {i}: it is sunny with a light breeze and 21 degrees."
                )),
            ]
        })
        .collect()
}

fn idle_agents(n: usize) {
    let region = Region::new(GLOBAL);
    let agents: Vec<Agent> = (0..n)
        .map(|_| {
            Agent::builder()
                .model(ScriptedModel::repeating_text("ok"))
                .messages(history_20())
                .build()
                .unwrap()
        })
        .collect();
    let stats = region.change();
    let live =
        stats.bytes_allocated as isize - stats.bytes_deallocated as isize + stats.bytes_reallocated;
    let per_agent = live as f64 / n as f64;
    println!(
        "idle_agents_20msg: {n} agents, {:.0} bytes per agent ({:.2} MiB per 1000)",
        per_agent,
        per_agent * 1000.0 / (1024.0 * 1024.0)
    );
    drop(agents);
}

fn concurrent(n: usize, rt: &tokio::runtime::Runtime) {
    let model = ScriptedModel::builder()
        .text("ok")
        .cycle()
        .record_requests(false)
        .call_delay(Duration::from_millis(100))
        .build();
    let agents: Vec<Agent> = (0..n)
        .map(|_| Agent::builder().model(model.clone()).build().unwrap())
        .collect();
    let start = Instant::now();
    rt.block_on(async {
        let handles: Vec<_> = agents
            .into_iter()
            .map(|mut a| tokio::spawn(async move { a.invoke("hi").await.map(|r| r.stop_reason) }))
            .collect();
        for h in handles {
            h.await.unwrap().unwrap();
        }
    });
    let wall = start.elapsed();
    println!(
        "inflight: {n} concurrent invocations on a 100 ms model: {:.1} ms wall ({:.3}x the model time), peak RSS {} MiB",
        wall.as_secs_f64() * 1000.0,
        wall.as_secs_f64() / 0.1,
        peak_rss_kib() / 1024
    );
}

fn main() {
    // `cargo test --benches` runs bench targets with `--test`-like flags; keep that quick.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if quick {
        idle_agents(10);
        concurrent(100, &rt);
        return;
    }
    idle_agents(1000);
    concurrent(10_000, &rt);
}
