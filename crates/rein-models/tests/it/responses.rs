//! The OpenAI Responses provider: the conformance suite on recorded-shape fixtures, what it
//! sends, and encrypted reasoning kept across a tool loop (issue 40, item 3).
#![cfg(all(feature = "test-util", feature = "openai-responses"))]

use std::time::Duration;

use rein_core::{
    ContentBlock, Message, Role, ToolResult,
    message::ReasoningContent,
    request::{ModelRequest, ToolChoice},
    tool::ToolSpec,
};
use rein_models::OpenAiResponsesModel;
use rein_models::conformance::{
    Conformance, FIXTURE_API_KEY, FixtureResponse, FixtureServer, ProviderFixtures,
};
use serde_json::json;

macro_rules! fixture {
    ($p:literal) => {
        include_str!(concat!("../fixtures/openai-responses/", $p))
    };
}

fn model(base: &str, idle: Duration) -> OpenAiResponsesModel {
    OpenAiResponsesModel::builder("fixture-model")
        .base_url(format!("{base}/v1"))
        .api_key(FIXTURE_API_KEY)
        .idle_timeout(idle)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_passes_the_conformance_suite() {
    let fixtures = ProviderFixtures::new()
        .text(fixture!("text.sse"))
        .tool_call(fixture!("tool_call.sse"))
        .parallel_tool_calls(fixture!("parallel_tool_calls.sse"))
        .reasoning(fixture!("reasoning.sse"), None)
        .max_tokens(fixture!("max_tokens.sse"))
        .cache_usage(fixture!("cache_usage.sse"), 1024, 0)
        .malformed(fixture!("malformed.sse"))
        .context_overflow_body(fixture!("context_overflow.json"));
    let report = Conformance::new(fixtures, |t| model(&t.base_url, t.idle_timeout))
        .run()
        .await;
    report.assert_passed();
    assert!(report.failures().is_empty());
}

async fn turn(model: &OpenAiResponsesModel, request: ModelRequest) -> Message {
    crate::common::stored_reply(model, request).await.unwrap()
}

#[tokio::test]
async fn the_request_is_stateless_and_reasoning_comes_back_encrypted_to_its_server_only() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("reasoning.sse")));
    server.push(FixtureResponse::sse(fixture!("tool_call.sse")));
    let m = model(&server.base_url(), Duration::from_secs(5));
    let tools = vec![ToolSpec::new(
        "get_weather",
        "The weather",
        json!({"type": "object"}),
    )];
    let mut history = vec![Message::user("Hello?")];
    let reply = turn(
        &m,
        ModelRequest::new(history.clone())
            .with_system_prompt("Be brief.")
            .with_tools(tools.clone())
            .with_tool_choice(ToolChoice::Any),
    )
    .await;
    let ContentBlock::ReasoningContent(r) = &reply.content[0] else {
        panic!("{reply:?}");
    };
    let ReasoningContent::ReasoningText(r) = &**r else {
        panic!("{r:?}");
    };
    assert_eq!(r.text, "The user greets me.");
    let first = server.requests()[0].json().unwrap();
    assert_eq!(server.requests()[0].path, "/v1/responses");
    assert_eq!(first["store"], false);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(first["instructions"], "Be brief.");
    assert_eq!(
        first["input"],
        json!([{"role": "user", "content": [{"type": "input_text", "text": "Hello?"}]}])
    );
    assert_eq!(first["tools"][0]["name"], "get_weather");
    assert_eq!(first["tool_choice"], "required");

    history.push(reply);
    history.push(Message::new(
        Role::User,
        vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
            "call_0", "Sunny",
        )))],
    ));
    turn(&m, ModelRequest::new(history.clone())).await;
    let second = server.requests()[1].json().unwrap();
    assert_eq!(
        second["input"][1],
        json!({"type": "reasoning", "id": "rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7",
               "encrypted_content": "gAAAAABoIPOD3vyyRWJW0CFoqj3nrpUZo1Il7BTSwS",
               "summary": [{"type": "summary_text", "text": "The user greets me."}]})
    );
    assert_eq!(
        second["input"][2],
        json!({"role": "assistant", "content": "Hi!"})
    );
    assert_eq!(
        second["input"][3],
        json!({"type": "function_call_output", "call_id": "call_0", "output": "Sunny"})
    );

    // Another server is sent none of it.
    let other = FixtureServer::start().await.unwrap();
    other.push(FixtureResponse::sse(fixture!("text.sse")));
    turn(
        &model(&other.base_url(), Duration::from_secs(5)),
        ModelRequest::new(history),
    )
    .await;
    let elsewhere = other.requests()[0].json().unwrap();
    assert_eq!(
        elsewhere["input"][1],
        json!({"role": "assistant", "content": "Hi!"})
    );
}

#[tokio::test]
async fn a_tool_call_goes_back_as_a_function_call_item() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("tool_call.sse")));
    server.push(FixtureResponse::sse(fixture!("text.sse")));
    let m = model(&server.base_url(), Duration::from_secs(5));
    let mut history = vec![Message::user("Weather?")];
    let reply = turn(&m, ModelRequest::new(history.clone())).await;
    history.push(reply);
    history.push(Message::new(
        Role::User,
        vec![ContentBlock::ToolResult(Box::new(ToolResult::error(
            "call_1",
            "no network",
        )))],
    ));
    turn(&m, ModelRequest::new(history)).await;
    let second = server.requests()[1].json().unwrap();
    assert_eq!(
        second["input"][1],
        json!({"type": "function_call", "call_id": "call_1", "name": "get_weather",
               "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"})
    );
    assert_eq!(second["input"][2]["output"], "Error: no network");
}

/// llama.cpp's server names output items by id only (no `output_index`): recorded from
/// `llama-server` (the build `.ci/peers-llm.sh` makes) answering a forced tool call.
#[tokio::test]
async fn items_named_by_id_only_stream_as_llama_cpp_sends_them() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("llamacpp_tool_call.sse")));
    let m = model(&server.base_url(), Duration::from_secs(5));
    let reply = turn(&m, ModelRequest::new(vec![Message::user("Weather?")])).await;
    let [ContentBlock::ToolUse(call)] = reply.content.as_slice() else {
        panic!("{reply:?}");
    };
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.input, json!({"city": "Paris"}));
    assert!(call.tool_use_id.starts_with("call_"));
}
