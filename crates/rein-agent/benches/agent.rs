//! Criterion benchmarks of the hot paths: one text invocation, a 10-tool-round invocation,
//! hook dispatch with 0 / 1 / 5 / 20 callbacks per event, and a streamed response of 200
//! one-character deltas through a stream guard of 0 / 1 / 5 proceeding `model_output` handlers
//! (whole stream, and time to the first delta).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{Criterion, criterion_group, criterion_main};
use std::time::{Duration, Instant};

use rein_agent::{Agent, AgentEvent, ToolExecutor};
use rein_core::{
    ToolHandle, ToolUse,
    event::{BeforeToolCallEvent, InvocationContext},
    tool::ToolOutput,
};
use rein_hooks::HookRegistry;
use rein_interventions::{Intervention, ModelOutputAction};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::json;

/// Polls a future that never waits on I/O to completion on this thread.
fn run_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn echo() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "echo",
        "Echo.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        |input, _| {
            Ok(ToolOutput::text(
                input["text"].as_str().unwrap_or("").to_owned(),
            ))
        },
    )
}

fn bench_invoke(c: &mut Criterion) {
    let mut agent = Agent::builder()
        .model(ScriptedModel::repeating_text("Hello there."))
        .build()
        .unwrap();
    c.bench_function("invoke_text", |b| {
        b.iter(|| {
            agent.clear_history();
            black_box(run_ready(agent.invoke("Hi")).unwrap());
        })
    });

    let mut script = ScriptedModel::builder().cycle().record_requests(false);
    for i in 0..10 {
        script = script.response(ScriptedResponse::new().tool_use(
            format!("t{i}"),
            "echo",
            json!({"text": "x"}),
        ));
    }
    let model = script.text("done").build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(echo())
        .tool_executor(ToolExecutor::Sequential)
        .build()
        .unwrap();
    c.bench_function("tools10_seq (11 model calls)", |b| {
        b.iter(|| {
            agent.clear_history();
            black_box(run_ready(agent.invoke("Go")).unwrap());
        })
    });
}

fn bench_hooks(c: &mut Criterion) {
    let mut group = c.benchmark_group("hook_dispatch_before_tool_call");
    for n in [0usize, 1, 5, 20] {
        let mut hooks = HookRegistry::new();
        for _ in 0..n {
            hooks.add(|ev: &mut BeforeToolCallEvent| {
                black_box(ev.tool_use());
            });
        }
        let cx = InvocationContext::default();
        let tool_use = ToolUse::new("t1", "echo", json!({"text": "x"}));
        group.bench_function(format!("{n} callbacks"), |b| {
            b.iter_batched_ref(
                || BeforeToolCallEvent::new(cx.clone(), tool_use.clone()),
                |ev| run_ready(hooks.dispatch(ev)).unwrap(),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// A streamed response of `DELTAS` one-character text deltas, guarded by `n` handlers that
/// proceed (hold-back 0, so each delta is released after its pass).
fn guarded_agent(n: usize) -> Agent {
    let model = ScriptedModel::builder()
        .cycle()
        .record_requests(false)
        .text("x".repeat(DELTAS))
        .chunk_chars(1)
        .build();
    let mut b = Agent::builder().model(model).stream_hold_back(0);
    for i in 0..n {
        b = b.intervention(
            Intervention::named(format!("guard-{i}")).model_output(|ev, _| {
                black_box(ev.pending.len());
                ModelOutputAction::Proceed
            }),
        );
    }
    b.build().unwrap()
}

const DELTAS: usize = 200;

fn bench_stream_guard(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream_guard");
    for n in [0usize, 1, 5] {
        let mut agent = guarded_agent(n);
        group.bench_function(format!("{DELTAS} deltas, {n} handlers"), |b| {
            b.iter(|| {
                agent.clear_history();
                run_ready(async {
                    let mut s = agent.stream("Hi");
                    while let Some(ev) = s.next().await {
                        black_box(ev.unwrap());
                    }
                });
            })
        });
        group.bench_function(format!("first delta, {n} handlers"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    agent.clear_history();
                    run_ready(async {
                        let started = Instant::now();
                        let mut s = agent.stream("Hi");
                        while let Some(ev) = s.next().await {
                            if let Ok(AgentEvent::TextDelta(_)) = ev {
                                total += started.elapsed();
                                break;
                            }
                        }
                        while s.next().await.is_some() {}
                    });
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_invoke, bench_hooks, bench_stream_guard);
criterion_main!(benches);
