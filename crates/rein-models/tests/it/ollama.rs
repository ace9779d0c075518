//! The Ollama native provider runs the shared conformance suite against recorded NDJSON
//! fixtures, plus Ollama-specific checks.
#![cfg(all(feature = "test-util", feature = "ollama"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{assemble, collect};
use rein_core::{
    ContentBlock, Message, ToolResult, ToolUse,
    error::ModelErrorKind,
    request::ModelRequest,
    stream::{BlockDelta, StopReason, StreamEvent},
};
use rein_models::OllamaModel;
use rein_models::conformance::{
    Conformance, FIXTURE_API_KEY, FixtureResponse, FixtureServer, Outcome, ProviderFixtures,
};
use serde_json::json;

macro_rules! fixture {
    ($p:literal) => {
        include_str!(concat!("../fixtures/ollama/", $p))
    };
}

/// The fixture server sends one chunk per blank-line separated block: a blank line after each
/// NDJSON line makes it send one line per chunk, as Ollama does. The decoder skips blank lines.
fn chunked(ndjson: &str) -> String {
    ndjson.replace('\n', "\n\n")
}

fn fixtures() -> ProviderFixtures {
    ProviderFixtures::new()
        .text(chunked(fixture!("text.ndjson")))
        .tool_call(chunked(fixture!("tool_call.ndjson")))
        .parallel_tool_calls(chunked(fixture!("parallel_tool_calls.ndjson")))
        .reasoning(chunked(fixture!("reasoning.ndjson")), None)
        .max_tokens(chunked(fixture!("max_tokens.ndjson")))
        .malformed(chunked(fixture!("malformed.ndjson")))
        .context_overflow_body(fixture!("context_overflow.json"))
        .error_body(fixture!("not_found.json"))
}

fn ollama(base: &str, idle: Duration) -> OllamaModel {
    OllamaModel::builder("qwen3:8b")
        .base_url(base)
        .api_key(FIXTURE_API_KEY)
        .idle_timeout(idle)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_passes_the_conformance_suite() {
    let report = Conformance::new(fixtures(), |t| ollama(&t.base_url, t.idle_timeout))
        .run()
        .await;
    println!("{report}");
    for r in &report.results {
        match (r.name, &r.outcome) {
            // Ollama has no prompt cache counters.
            ("cache_usage", Outcome::Skipped(_)) => {}
            // Ollama sends each tool call whole, in one line: one input fragment, not ≥ 2.
            // The content checks of the same fixture run in `tool_call_is_whole` below.
            ("tool_call", Outcome::Failed(m)) if m.contains("fragment") => {}
            (_, Outcome::Passed) => {}
            (name, other) => panic!("{name}: {other:?}\n{report}"),
        }
    }
}

#[tokio::test]
async fn tool_call_is_whole_and_usage_is_counted() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(&chunked(fixture!("tool_call.ndjson"))));
    let model = ollama(&server.base_url(), Duration::from_secs(5));
    let (events, err) = collect(&model, ModelRequest::new(vec![Message::user("hi")])).await;
    assert!(err.is_none(), "{err:?}");
    let r = assemble(&events);
    let uses: Vec<_> = r.message.tool_uses().cloned().collect();
    assert_eq!(
        uses,
        vec![ToolUse::new(
            "call_1",
            "get_weather",
            json!({"city": "Paris", "unit": "celsius"})
        )]
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.usage.total_tokens
        ),
        (130, 24, 154)
    );
}

#[tokio::test]
async fn request_on_the_wire() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(&chunked(fixture!("text.ndjson"))));
    let model = OllamaModel::builder("qwen3:8b")
        .base_url(server.base_url())
        .option("num_ctx", 8192)
        .think(true)
        .build()
        .unwrap();
    let mut req = ModelRequest::new(vec![
        Message::user("weather?"),
        Message::new(
            rein_core::Role::Assistant,
            vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
                "c1",
                "get_weather",
                json!({"city": "Paris"}),
            )))],
        ),
        Message::new(
            rein_core::Role::User,
            vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                "c1", "sunny",
            )))],
        ),
    ])
    .with_system_prompt("sys");
    req.config.max_tokens = Some(100);
    let (events, err) = collect(&model, req).await;
    assert!(err.is_none(), "{err:?}");
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::BlockDelta(BlockDelta::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello, world!");
    let r = &server.requests()[0];
    assert_eq!(r.path, "/api/chat");
    assert_eq!(r.header("authorization"), None, "no key, no header");
    let body = r.json().unwrap();
    assert_eq!(body["model"], "qwen3:8b");
    assert_eq!(body["stream"], true);
    assert_eq!(body["think"], true);
    assert_eq!(
        body["options"],
        json!({"num_ctx": 8192, "num_predict": 100})
    );
    let m = &body["messages"];
    assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
    assert_eq!(
        m[2]["tool_calls"][0]["function"],
        json!({"name": "get_weather", "arguments": {"city": "Paris"}})
    );
    assert_eq!(
        m[3],
        json!({"role": "tool", "content": "sunny", "tool_name": "get_weather"})
    );
}

#[tokio::test]
async fn error_line_mid_stream_and_missing_model_are_typed() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(&chunked(fixture!(
        "error_midstream.ndjson"
    ))));
    server.push(FixtureResponse::status(404, fixture!("not_found.json")));
    let model = ollama(&server.base_url(), Duration::from_secs(5));
    let (events, err) = collect(&model, ModelRequest::new(vec![Message::user("hi")])).await;
    assert!(matches!(events[0], StreamEvent::MessageStart { .. }));
    let e = err.expect("an error line");
    assert_eq!(e.kind(), ModelErrorKind::Server);
    assert!(e.message().contains("unexpected EOF"), "{e}");
    let (_, err) = collect(&model, ModelRequest::new(vec![Message::user("hi")])).await;
    let e = err.expect("404");
    assert_eq!(e.kind(), ModelErrorKind::BadRequest);
    assert!(e.message().contains("not found"), "{e}");
}

#[tokio::test]
async fn one_chunk_body_and_lines_split_mid_json() {
    // The whole body in one chunk, and the body cut every 5 bytes: same result.
    let body = fixture!("reasoning.ndjson");
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(body));
    let model = ollama(&server.base_url(), Duration::from_secs(5));
    let (events, err) = collect(&model, ModelRequest::new(vec![Message::user("hi")])).await;
    assert!(err.is_none(), "{err:?}");
    let r = assemble(&events);
    assert_eq!(r.message.content.len(), 2);
    assert_eq!(r.usage.output_tokens, 9);
}

#[test]
fn debug_hides_the_key_and_env_host_is_read() {
    let b = OllamaModel::builder("m").api_key("very-secret");
    assert!(!format!("{b:?}").contains("very-secret"));
    let m = b.build().unwrap();
    assert!(!format!("{m:?} {m:#?}").contains("very-secret"));
    assert!(
        OllamaModel::builder("m")
            .base_url("ftp://x")
            .build()
            .is_err()
    );
}
