//! Hot paths of rein-core: stream assembly (per event, with allocations per event counted) and
//! the message JSON round-trip.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::{
    ContentBlock, Message, Role, ToolResult, ToolUse,
    stream::{BlockDelta, BlockStart, StopReason, StreamAssembler, StreamEvent},
};
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn text_stream(deltas: usize) -> Vec<StreamEvent> {
    let mut v = vec![
        StreamEvent::MessageStart {
            role: Role::Assistant,
        },
        StreamEvent::BlockStart(BlockStart::Text),
    ];
    v.extend((0..deltas).map(|i| StreamEvent::BlockDelta(BlockDelta::Text(format!("tok{i} ")))));
    v.push(StreamEvent::BlockStop);
    v.push(StreamEvent::BlockStart(BlockStart::ToolUse {
        tool_use_id: "t1".into(),
        name: "search".into(),
    }));
    for frag in ["{\"query\": ", "\"rust agents\"", ", \"limit\": 5}"] {
        v.push(StreamEvent::BlockDelta(BlockDelta::ToolInput(frag.into())));
    }
    v.push(StreamEvent::BlockStop);
    v.push(StreamEvent::MessageStop {
        stop_reason: StopReason::ToolUse,
    });
    v
}

fn assemble(events: Vec<StreamEvent>) -> Message {
    let mut a = StreamAssembler::new();
    for e in events {
        a.push(e).unwrap();
    }
    a.finish().unwrap().message
}

fn history(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| match i % 4 {
            0 => Message::user(format!("question {i}: what about the weather?")),
            1 => Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
                    format!("t{i}"),
                    "weather",
                    json!({"city": "Lisbon"}),
                )))],
            ),
            2 => Message::new(
                Role::User,
                vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                    format!("t{}", i - 1),
                    "21C sunny",
                )))],
            ),
            _ => Message::assistant(format!("answer {i}: it is sunny.")),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let events = text_stream(200);
    let n_events = events.len();
    // Allocations per event (once, printed): the assembler should not allocate per delta beyond
    // amortized string growth.
    let template = events.clone();
    let region = Region::new(GLOBAL);
    black_box(assemble(template));
    let stats = region.change();
    println!(
        "stream assembly: {} allocations, {} reallocations for {n_events} events ({:.2} per event)",
        stats.allocations,
        stats.reallocations,
        (stats.allocations + stats.reallocations) as f64 / n_events as f64
    );
    c.bench_function("stream_assembly_206_events", |b| {
        b.iter_batched(
            || events.clone(),
            |e| black_box(assemble(e)),
            criterion::BatchSize::SmallInput,
        )
    });

    let msgs = history(20);
    let json = serde_json::to_string(&msgs).unwrap();
    c.bench_function("message_json_serialize_20", |b| {
        b.iter(|| black_box(serde_json::to_string(black_box(&msgs)).unwrap()))
    });
    c.bench_function("message_json_parse_20", |b| {
        b.iter(|| black_box(serde_json::from_str::<Vec<Message>>(black_box(&json)).unwrap()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
