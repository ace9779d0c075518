//! What a provider attaches to a block for its next request goes back to it — and only to it:
//! DeepSeek's reasoning within a tool loop, Gemini's thought signatures on its OpenAI-compatible
//! endpoint (issue 40, items 1 and 2).
#![cfg(all(feature = "test-util", feature = "openai"))]

use rein_core::{
    ContentBlock, Message, Role, ToolResult, error::ModelErrorKind, request::ModelRequest,
};
use rein_models::OpenAiModel;
use rein_models::conformance::{FIXTURE_API_KEY, FixtureResponse, FixtureServer};
use serde_json::{Value, json};

macro_rules! fixture {
    ($p:literal) => {
        include_str!(concat!("../fixtures/", $p))
    };
}

fn model(server: &FixtureServer) -> rein_models::OpenAiModelBuilder {
    OpenAiModel::builder("fixture-model")
        .base_url(format!("{}/v1", server.base_url()))
        .api_key(FIXTURE_API_KEY)
}

/// One model call on `history`, stored the way the agent stores it.
async fn turn(model: &OpenAiModel, history: &[Message]) -> Result<Message, rein_core::ModelError> {
    crate::common::stored_reply(model, ModelRequest::new(history.to_vec())).await
}

/// DeepSeek's rule in thinking mode: an assistant message that called tools comes back with
/// its `reasoning_content`, or the request is refused with a 400.
fn deepseek_accepts(body: &Value) -> Result<(), String> {
    for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
        if m["role"] == "assistant"
            && m.get("tool_calls").is_some()
            && m.get("reasoning_content").is_none()
        {
            return Err(format!(
                "message {i} called tools without its reasoning_content"
            ));
        }
    }
    Ok(())
}

fn tool_result(reply: &Message) -> Message {
    let ContentBlock::ToolUse(call) = reply.content.last().unwrap() else {
        panic!("no tool call last in {reply:?}");
    };
    Message::new(
        Role::User,
        vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
            call.tool_use_id.clone(),
            "2026-11-29",
        )))],
    )
}

/// A server answering `fixture` (a tool call) and then text; the history after the first
/// turn: the question, the assembled reply, the tool's result.
async fn after_a_tool_turn(fixture: &str) -> (FixtureServer, OpenAiModel, Vec<Message>) {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture));
    server.push(FixtureResponse::sse(fixture!("openai/text.sse")));
    let model = model(&server).build().unwrap();
    let mut history = vec![Message::user("What is the weather tomorrow?")];
    let reply = turn(&model, &history).await.unwrap();
    history.push(reply.clone());
    history.push(tool_result(&reply));
    (server, model, history)
}

/// The assistant message of `history` as a request to another server shows it.
async fn sent_elsewhere(history: &[Message]) -> Value {
    let other = FixtureServer::start().await.unwrap();
    other.push(FixtureResponse::sse(fixture!("openai/text.sse")));
    turn(&model(&other).build().unwrap(), history)
        .await
        .unwrap();
    other.requests()[0].json().unwrap()["messages"][1].take()
}

#[tokio::test]
async fn deepseek_gets_the_reasoning_of_a_tool_turn_back_and_no_other_server_does() {
    let (deepseek, thinking, history) =
        after_a_tool_turn(fixture!("openai/deepseek_thinking_tool_call.sse")).await;

    turn(&thinking, &history).await.unwrap();
    let second = deepseek.requests()[1].json().unwrap();
    assert_eq!(deepseek_accepts(&second), Ok(()));
    assert_eq!(
        second["messages"][1]["reasoning_content"],
        "I need tomorrow's date before the weather."
    );
    assert_eq!(second["messages"][1]["tool_calls"][0]["id"], "call_00_dQ4");

    // The same history without the round trip: what DeepSeek answers, as a typed error.
    deepseek.push(FixtureResponse::status(
        400,
        fixture!("openai/deepseek_reasoning_missing.json"),
    ));
    let stripped = model(&deepseek).send_reasoning_back(false).build().unwrap();
    let err = turn(&stripped, &history).await.unwrap_err();
    let third = deepseek.requests()[2].json().unwrap();
    assert!(deepseek_accepts(&third).is_err());
    assert_eq!(err.kind(), ModelErrorKind::BadRequest);
    assert!(err.to_string().contains("reasoning_content"), "{err}");

    // A fallback to another server gets none of DeepSeek's reasoning.
    let elsewhere = sent_elsewhere(&history).await;
    assert!(elsewhere.get("reasoning_content").is_none());
    assert_eq!(elsewhere["tool_calls"][0]["id"], "call_00_dQ4");
}

#[tokio::test]
async fn gemini_thought_signatures_go_back_on_their_calls_and_only_to_gemini() {
    let signature = "CiQBjz1rX8s1Zy7Ugd0vOgTKyZsq3xqwZ1pUXf/eqG2J8tUQkJsSLwGPPWtf";
    let (gemini, model_at_gemini, history) =
        after_a_tool_turn(fixture!("openai/gemini_compat_tool_call.sse")).await;
    let ContentBlock::ToolUse(call) = &history[1].content[0] else {
        panic!("{history:?}");
    };
    assert_eq!(call.name, "get_weather");
    let state = call
        .provider_state
        .as_deref()
        .expect("the signature is kept");
    assert_eq!(
        state.data["extra_content"]["google"]["thought_signature"],
        signature
    );
    // Not part of what a human approves.
    assert_eq!(
        call.fingerprint(),
        rein_core::ToolUse::new("x", "get_weather", json!({"location": "Paris"})).fingerprint()
    );

    turn(&model_at_gemini, &history).await.unwrap();
    let second = gemini.requests()[1].json().unwrap();
    assert_eq!(
        second["messages"][1]["tool_calls"][0]["extra_content"]["google"]["thought_signature"],
        signature
    );

    let elsewhere = sent_elsewhere(&history).await;
    assert!(elsewhere["tool_calls"][0].get("extra_content").is_none());
}
