//! End-to-end tests against real third-party servers started by `.ci/peers-llm.sh`:
//! llama.cpp's `llama-server` with SmolLM2 (a real model) and llmock (protocol mock with fault
//! injection). Without the `REIN_E2E_*` variables they print `SKIPPED` and pass — except under
//! CI (`CI` set), where a missing peer is a failure.
#![cfg(all(feature = "openai", feature = "anthropic"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures_util::StreamExt as _;
use rein_core::{
    ContentBlock, Message, ModelError, Role, ToolResult,
    error::ModelErrorKind,
    request::{InferenceConfig, ModelRequest, ToolChoice},
    stream::{BlockDelta, ModelResponse, StopReason, StreamAssembler, StreamEvent},
    tool::ToolSpec,
};
use rein_models::{AnthropicModel, Model, OpenAiModel};
use serde_json::json;

/// The peer's URL, or `None` (after a loud message) when the peers are not running.
fn peer(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI: .ci/peers-llm.sh must start the LLM peers")
        }
        _ => {
            eprintln!(
                "SKIPPED: {var} not set; these end-to-end tests need the peers started by \
                 `bash .ci/peers-llm.sh DIR && source DIR/env`"
            );
            None
        }
    }
}

fn config(max_tokens: u32) -> InferenceConfig {
    let mut c = InferenceConfig::default();
    c.max_tokens = Some(max_tokens);
    c.temperature = Some(0.0);
    c.seed = Some(42);
    c
}

fn openai(base: &str, model: &str) -> OpenAiModel {
    OpenAiModel::builder(model)
        .base_url(base)
        .api_key("rein-e2e-key")
        .idle_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[cfg(feature = "openai-responses")]
fn responses(base: &str, model: &str) -> rein_models::OpenAiResponsesModel {
    rein_models::OpenAiResponsesModel::builder(model)
        .base_url(base)
        .api_key("rein-e2e-key")
        .idle_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn anthropic(base: &str, model: &str) -> AnthropicModel {
    AnthropicModel::builder(model)
        .base_url(base)
        .api_key("rein-e2e-key")
        .idle_timeout(Duration::from_secs(60))
        // llama.cpp honours a seed on /v1/messages too.
        .extra_body(json!({"seed": 42}).as_object().unwrap().clone())
        .build()
        .unwrap()
}

/// Streams one call; returns the assembled response and the events.
async fn run<M: Model>(
    model: &M,
    req: ModelRequest,
) -> Result<(ModelResponse, Vec<StreamEvent>), ModelError> {
    let mut stream = model.stream(req).await?;
    let mut events = Vec::new();
    let mut asm = StreamAssembler::new();
    while let Some(item) = stream.next().await {
        let ev = item?;
        asm.push(ev.clone()).unwrap();
        events.push(ev);
    }
    Ok((asm.finish().unwrap(), events))
}

fn text_deltas(events: &[StreamEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, StreamEvent::BlockDelta(BlockDelta::Text(_))))
        .count()
}

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Get the current weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

async fn check_real_text<M: Model>(model: &M) {
    let req = ModelRequest::new(vec![Message::user("Name three colors.")])
        .with_system_prompt("You are a helpful assistant.")
        .with_config(config(48));
    let (r, events) = run(model, req).await.unwrap();
    println!("{:?}: {:?}", model.info(), r.message.text());
    assert!(!r.message.text().trim().is_empty());
    assert!(text_deltas(&events) >= 2, "the answer is streamed");
    assert!(matches!(
        r.stop_reason,
        StopReason::EndTurn | StopReason::MaxTokens
    ));
    assert!(r.usage.output_tokens > 0, "usage reported: {:?}", r.usage);
    assert!(
        r.usage.input_tokens + r.usage.cache_read_input_tokens > 0,
        "{:?}",
        r.usage
    );
    assert!(r.metrics.time_to_first_byte.is_some());
}

#[tokio::test]
async fn real_model_streams_text_through_openai() {
    let Some(base) = peer("REIN_E2E_LLM_OPENAI") else {
        return;
    };
    check_real_text(&openai(&base, "smollm2")).await;
}

#[cfg(feature = "openai-responses")]
#[tokio::test]
async fn real_model_streams_text_through_responses() {
    let Some(base) = peer("REIN_E2E_LLM_OPENAI") else {
        return;
    };
    check_real_text(&responses(&base, "smollm2")).await;
}

#[tokio::test]
async fn real_model_streams_text_through_anthropic() {
    let Some(base) = peer("REIN_E2E_LLM_ANTHROPIC") else {
        return;
    };
    check_real_text(&anthropic(&base, "smollm2")).await;
}

/// Forces a tool call on the tools instance, then sends the tool result to the plain instance
/// (the tools template answers plain chat with HTTP 500) and expects a text answer. `streamed`:
/// the wire format streams a call's arguments in fragments (Gemini sends a call whole).
async fn check_real_tool_call<M: Model>(tools_model: &M, chat_model: &M, streamed: bool) {
    let question = Message::user("What is the weather in Paris?");
    let req = ModelRequest::new(vec![question.clone()])
        .with_tools(vec![weather_tool()])
        .with_tool_choice(ToolChoice::Any)
        .with_config(config(64));
    let (r, events) = run(tools_model, req).await.unwrap();
    println!("{:?}: {:?}", tools_model.info(), r.message.content);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let uses: Vec<_> = r.message.tool_uses().cloned().collect();
    assert!(!uses.is_empty(), "a forced tool call");
    assert_eq!(uses[0].name, "get_weather");
    assert!(
        uses[0].input.get("city").is_some_and(|c| c.is_string()),
        "{:?}",
        uses[0].input
    );
    assert!(
        r.invalid_tool_inputs.is_empty(),
        "{:?}",
        r.invalid_tool_inputs
    );
    let fragments = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::BlockDelta(BlockDelta::ToolInput(_))))
        .count();
    assert!(
        !streamed || fragments >= 2,
        "arguments streamed in fragments"
    );

    // The tool result goes back in the provider's shape and the model answers.
    let results: Vec<ContentBlock> = uses
        .iter()
        .map(|u| {
            ContentBlock::ToolResult(Box::new(ToolResult::success(
                &u.tool_use_id,
                "Sunny, 21 °C",
            )))
        })
        .collect();
    let follow_up = ModelRequest::new(vec![
        question,
        r.message.clone(),
        Message::new(Role::User, results),
    ])
    .with_tools(vec![weather_tool()])
    .with_tool_choice(ToolChoice::None)
    .with_config(config(48));
    let (r2, _) = run(chat_model, follow_up).await.unwrap();
    println!("follow-up: {:?}", r2.message.text());
    assert!(!r2.message.text().trim().is_empty());
}

#[tokio::test]
async fn real_model_forced_tool_call_through_openai() {
    let (Some(tools), Some(chat)) = (
        peer("REIN_E2E_LLM_TOOLS_OPENAI"),
        peer("REIN_E2E_LLM_OPENAI"),
    ) else {
        return;
    };
    check_real_tool_call(&openai(&tools, "smollm2"), &openai(&chat, "smollm2"), true).await;
}

#[cfg(feature = "openai-responses")]
#[tokio::test]
async fn real_model_forced_tool_call_through_responses() {
    let (Some(tools), Some(chat)) = (
        peer("REIN_E2E_LLM_TOOLS_OPENAI"),
        peer("REIN_E2E_LLM_OPENAI"),
    ) else {
        return;
    };
    check_real_tool_call(
        &responses(&tools, "smollm2"),
        &responses(&chat, "smollm2"),
        true,
    )
    .await;
}

#[tokio::test]
async fn real_model_forced_tool_call_through_anthropic() {
    let (Some(tools), Some(chat)) = (
        peer("REIN_E2E_LLM_TOOLS_ANTHROPIC"),
        peer("REIN_E2E_LLM_ANTHROPIC"),
    ) else {
        return;
    };
    check_real_tool_call(
        &anthropic(&tools, "smollm2"),
        &anthropic(&chat, "smollm2"),
        true,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// llmock: scripted faults, isolated per test by a unique model name.

async fn llmock_scenario(openai_base: &str, behavior: serde_json::Value) {
    let root = openai_base.trim_end_matches("/v1");
    let resp = reqwest_free_post(
        &format!("{root}/_llmock/scenario"),
        &json!({"behaviors": [behavior]}).to_string(),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 201"), "llmock scenario: {resp}");
}

/// A minimal HTTP/1.1 POST on 127.0.0.1 (the test does not depend on an HTTP client crate).
async fn reqwest_free_post(url: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut sock = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!(
        "POST /{path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).await.unwrap();
    out
}

fn llmock_bases() -> Option<(String, String)> {
    Some((
        peer("REIN_E2E_LLMOCK_OPENAI")?,
        peer("REIN_E2E_LLMOCK_ANTHROPIC")?,
    ))
}

fn hello() -> ModelRequest {
    ModelRequest::new(vec![Message::user("hi")]).with_config(config(64))
}

async fn expect_error<M: Model>(model: &M) -> ModelError {
    match run(model, hello()).await {
        Err(e) => e,
        Ok((r, _)) => panic!("expected an error, got {:?}", r.message),
    }
}

#[tokio::test]
async fn llmock_plain_stream_through_both_providers() {
    let Some((oa, an)) = llmock_bases() else {
        return;
    };
    let (r, ev) = run(&openai(&oa, "rein-e2e-plain"), hello()).await.unwrap();
    assert!(!r.message.text().is_empty() && text_deltas(&ev) >= 2);
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    let (r, ev) = run(&anthropic(&an, "rein-e2e-plain"), hello())
        .await
        .unwrap();
    assert!(!r.message.text().is_empty() && text_deltas(&ev) >= 2);
    assert_eq!(r.stop_reason, StopReason::EndTurn);
}

#[tokio::test]
async fn llmock_429_with_retry_after() {
    let Some((oa, an)) = llmock_bases() else {
        return;
    };
    for (i, m) in ["openai", "anthropic"].iter().enumerate() {
        let model_id = format!("rein-e2e-429-{m}");
        llmock_scenario(
            &oa,
            json!({"type": "fail", "status": 429, "retry_after": 3, "match": {"model": model_id}}),
        )
        .await;
        let e = if i == 0 {
            expect_error(&openai(&oa, &model_id)).await
        } else {
            expect_error(&anthropic(&an, &model_id)).await
        };
        println!("{m}: {e}");
        assert_eq!(e.kind(), ModelErrorKind::Throttled, "{e}");
        assert_eq!(e.status(), Some(429));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        assert!(e.is_retryable());
        assert!(e.body().is_some_and(|b| !b.is_empty()));
        assert!(!format!("{e} {e:?}").contains("rein-e2e-key"));
    }
}

#[tokio::test]
async fn llmock_5xx_is_a_retryable_server_error() {
    let Some((oa, an)) = llmock_bases() else {
        return;
    };
    for (i, m) in ["openai", "anthropic"].iter().enumerate() {
        let model_id = format!("rein-e2e-503-{m}");
        llmock_scenario(
            &oa,
            json!({"type": "fail", "status": 503, "match": {"model": model_id}}),
        )
        .await;
        let e = if i == 0 {
            expect_error(&openai(&oa, &model_id)).await
        } else {
            expect_error(&anthropic(&an, &model_id)).await
        };
        println!("{m}: {e}");
        assert_eq!(e.kind(), ModelErrorKind::Server, "{e}");
        assert_eq!(e.status(), Some(503));
        assert!(e.is_retryable());
    }
    // A forced status through llmock's request header.
    let forced = OpenAiModel::builder("rein-e2e-forced")
        .base_url(&oa)
        .header("x-llmock-force-status", "500")
        .build()
        .unwrap();
    let e = expect_error(&forced).await;
    assert_eq!((e.kind(), e.status()), (ModelErrorKind::Server, Some(500)));
}

#[tokio::test]
async fn llmock_broken_streams_are_typed_errors() {
    let Some((oa, an)) = llmock_bases() else {
        return;
    };
    let cases = [
        ("disconnect", ModelErrorKind::Transport),
        ("truncate", ModelErrorKind::MalformedStream),
        ("malformed", ModelErrorKind::MalformedStream),
    ];
    for (fault, kind) in cases {
        for (i, m) in ["openai", "anthropic"].iter().enumerate() {
            let model_id = format!("rein-e2e-{fault}-{m}");
            llmock_scenario(
                &oa,
                json!({"type": "stream_fault", "kind": fault, "after_chunks": 2,
                       "match": {"model": model_id, "stream": true}}),
            )
            .await;
            let e = if i == 0 {
                expect_error(&openai(&oa, &model_id)).await
            } else {
                expect_error(&anthropic(&an, &model_id)).await
            };
            println!("{m} {fault}: {e}");
            // A connection dropped mid-stream may surface as a transport error or, when the
            // server ends the body cleanly, as a stream without its end.
            let ok = e.kind() == kind
                || (fault == "disconnect" && e.kind() == ModelErrorKind::MalformedStream);
            assert!(ok, "{m} {fault}: {:?} {e}", e.kind());
            assert!(!e.is_retryable(), "data was received: not retryable");
        }
    }
}

#[tokio::test]
async fn llmock_stall_hits_the_idle_timeout() {
    let Some((oa, _)) = llmock_bases() else {
        return;
    };
    let model_id = "rein-e2e-stall";
    llmock_scenario(
        &oa,
        json!({"type": "stream_fault", "kind": "stall", "after_chunks": 1, "stall_seconds": 10,
               "match": {"model": model_id, "stream": true}}),
    )
    .await;
    let model = OpenAiModel::builder(model_id)
        .base_url(&oa)
        .idle_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let e = expect_error(&model).await;
    assert_eq!(e.kind(), ModelErrorKind::Timeout, "{e}");
    assert!(started.elapsed() < Duration::from_secs(8));
}

// ---------------------------------------------------------------------------------------------
// Fallback through real servers: llmock fails the primary, the real model answers.

#[tokio::test]
async fn a_throttled_or_failing_primary_falls_back_to_the_real_model() {
    let (Some((oa, an)), Some(real)) = (llmock_bases(), peer("REIN_E2E_LLM_OPENAI")) else {
        return;
    };
    // llmock throttles one primary (429) and fails the other (503): both move on.
    for (primary_id, status) in [("rein-e2e-fb-429", 429), ("rein-e2e-fb-503", 503)] {
        llmock_scenario(
            &oa,
            json!({"type": "fail", "status": status, "retry_after": 1, "match": {"model": primary_id}}),
        )
        .await;
        let chain = rein_models::FallbackModel::new(anthropic(&an, primary_id))
            .with_fallback(openai(&real, "smollm2"));
        let (r, events) = run(&chain, hello()).await.unwrap();
        println!("{primary_id}: {:?}", r.message.text());
        assert!(
            !r.message.text().trim().is_empty(),
            "the real model answered"
        );
        let route = r.fallback.as_deref().expect("the route is on the response");
        assert_eq!(route.model_id, "smollm2");
        assert_eq!(route.skipped.len(), 1, "{route:?}");
        assert_eq!(route.skipped[0].model_id, primary_id);
        assert_eq!(route.skipped[0].status, Some(status));
        let kind = if status == 429 {
            ModelErrorKind::Throttled
        } else {
            ModelErrorKind::Server
        };
        assert_eq!(route.skipped[0].kind, kind);
        assert!(
            matches!(events.first(), Some(StreamEvent::Fallback(_))),
            "the hop comes first in the stream"
        );
    }
}

#[tokio::test]
async fn an_invalid_request_does_not_fall_back() {
    let (Some((oa, _)), Some(real)) = (llmock_bases(), peer("REIN_E2E_LLM_OPENAI")) else {
        return;
    };
    let primary_id = "rein-e2e-fb-400";
    llmock_scenario(
        &oa,
        json!({"type": "fail", "status": 400, "match": {"model": primary_id}}),
    )
    .await;
    let chain = rein_models::FallbackModel::new(openai(&oa, primary_id))
        .with_fallback(openai(&real, "smollm2"));
    let e = expect_error(&chain).await;
    println!("{e}");
    // The same request would fail the same way everywhere: the backup is never asked.
    assert_eq!(e.status(), Some(400), "{e}");
    assert!(!e.is_retryable());
}

// ---------------------------------------------------------------------------------------------
// Gemini's wire format through LiteLLM's proxy (`.ci/peers-litellm.sh`), which translates it to
// and from the llama.cpp servers above.

#[cfg(feature = "gemini")]
fn gemini(base: &str, model: &str) -> rein_models::GeminiModel {
    rein_models::GeminiModel::builder(model)
        .base_url(base)
        .api_key("rein-e2e-key")
        .idle_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[cfg(feature = "gemini")]
#[tokio::test]
async fn real_model_streams_text_through_gemini() {
    let Some(base) = peer("REIN_E2E_GEMINI") else {
        return;
    };
    let req = ModelRequest::new(vec![Message::user("Name three colors.")])
        .with_system_prompt("You are a helpful assistant.")
        .with_config(config(48));
    let (r, events) = run(&gemini(&base, "smollm2"), req).await.unwrap();
    println!("gemini: {:?} {:?}", r.message.text(), r.usage);
    assert!(!r.message.text().trim().is_empty());
    assert!(text_deltas(&events) >= 2, "the answer is streamed");
    assert!(matches!(
        r.stop_reason,
        StopReason::EndTurn | StopReason::MaxTokens
    ));
    assert!(r.metrics.time_to_first_byte.is_some());
}

#[cfg(feature = "gemini")]
#[tokio::test]
async fn real_model_tool_call_and_result_through_gemini() {
    let Some(base) = peer("REIN_E2E_GEMINI") else {
        return;
    };
    // The call and its result go back as `functionCall` and `functionResponse` parts.
    check_real_tool_call(
        &gemini(&base, "smollm2-tools"),
        &gemini(&base, "smollm2"),
        false,
    )
    .await;
}
