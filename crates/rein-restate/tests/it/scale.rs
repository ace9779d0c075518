//! Scale: 1 000 concurrent durable sessions across two worker processes on a model that takes
//! 100 ms per call — all complete — and the journaling cost per step against the in-process
//! driver (printed; the numbers go to docs/performance.md). SKIPPED without
//! `REIN_RESTATE_SERVER`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use rein_core::{ToolHandle, stream::StopReason, tool::ToolOutput};
use rein_models::ScriptedModel;
use rein_restate::{Client, wire::InvokeRequest};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_across_two_workers_all_complete() {
    let Some(restate) = Restate::start("scale").await else {
        return;
    };
    let port = free_port();
    let options = |register, delay| WorkerOptions {
        port,
        reuse_port: true,
        register,
        model_delay_ms: delay,
        ..Default::default()
    };
    let _a = Worker::start(&restate, options(true, 100)).await;
    let _b = Worker::start(&restate, options(false, 100)).await;
    let client = Client::new(&restate.ingress).unwrap();
    let sessions = 1_000;
    let started = Instant::now();
    // All sessions start at once inside Restate; the test holds at most 100 HTTP requests open
    // (a thousand sockets would hit the process's file limit, not Restate's).
    let http = Arc::new(tokio::sync::Semaphore::new(100));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let (client, http) = (client.clone(), http.clone());
        tasks.spawn(async move {
            let _slot = http.acquire().await.unwrap();
            client
                .start(&format!("scale-{i}"), InvokeRequest::text("steps 1"))
                .await
        });
    }
    let mut started_ids = Vec::new();
    while let Some(id) = tasks.join_next().await {
        started_ids.push(id.unwrap().unwrap());
    }
    let mut tasks = tokio::task::JoinSet::new();
    for id in started_ids {
        let (client, http) = (client.clone(), http.clone());
        tasks.spawn(async move {
            let _slot = http.acquire().await.unwrap();
            client.attach(&id).await
        });
    }
    let mut finished = 0;
    while let Some(report) = tasks.join_next().await {
        let report = report.unwrap().unwrap();
        assert_eq!(report.stop_reason, StopReason::EndTurn);
        assert_eq!(report.text, "Finished 1 steps.");
        finished += 1;
    }
    assert_eq!(finished, sessions);
    let wall = started.elapsed();
    println!(
        "scale: {sessions} sessions x (2 model calls of 100 ms + 1 tool) across 2 workers: {:.2} s",
        wall.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaling_cost_per_step() {
    let Some(restate) = Restate::start("per-step").await else {
        return;
    };
    let _worker = Worker::start(&restate, WorkerOptions::default()).await;
    let client = Client::new(&restate.ingress).unwrap();
    let steps = 50;
    // Warm up the connections.
    client
        .invoke("warm", InvokeRequest::text("say hi"))
        .await
        .unwrap();
    let started = Instant::now();
    let report = client
        .invoke("steps", InvokeRequest::text(format!("steps {steps}")))
        .await
        .unwrap();
    let durable = started.elapsed();
    assert_eq!(report.text, format!("Finished {steps} steps."));

    // The same run in-process: the same number of model calls and tool calls.
    let mut script = ScriptedModel::builder();
    for i in 0..steps {
        script = script.tool_use(format!("step-{i}"), "ledger", json!({"step": i}));
    }
    let ledger =
        ToolHandle::from_sync_fn("ledger", "Records.", json!({"type": "object"}), |_, _| {
            Ok(ToolOutput::text("recorded"))
        });
    let mut agent = rein_agent::Agent::builder()
        .model(script.text("done").build())
        .tool(ledger)
        .build()
        .unwrap();
    let started = Instant::now();
    agent.invoke("go").await.unwrap();
    let local = started.elapsed();
    // Journaled steps: a model call per turn, a tool call per step, an inbox call per boundary.
    let journaled = 2 * steps + 1 + steps;
    let per_step = durable.saturating_sub(local) / u32::try_from(journaled).unwrap();
    println!(
        "per step: durable run {:.1} ms, in-process {:.3} ms, {journaled} journaled steps: {:.0} µs each",
        durable.as_secs_f64() * 1e3,
        local.as_secs_f64() * 1e3,
        per_step.as_secs_f64() * 1e6
    );
}
