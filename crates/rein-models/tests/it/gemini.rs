//! The native Gemini provider: the conformance suite on fixtures of the API's documented
//! shapes, what it sends, thought signatures kept across a tool loop, blocked prompts typed
//! (issue 40, item 4).
#![cfg(all(feature = "test-util", feature = "gemini"))]

use std::time::Duration;

use rein_core::{
    ContentBlock, Message, Role, ToolResult,
    error::ModelErrorKind,
    request::{ModelRequest, ToolChoice},
    tool::ToolSpec,
};
use rein_models::GeminiModel;
use rein_models::conformance::{
    Conformance, FIXTURE_API_KEY, FixtureResponse, FixtureServer, Outcome, ProviderFixtures,
};
use serde_json::json;

macro_rules! fixture {
    ($p:literal) => {
        include_str!(concat!("../fixtures/gemini/", $p))
    };
}

const SIGNATURE: &str = "CiQBjz1rX8s1Zy7Ugd0vOgTKyZsq3xqwZ1pUXf/eqG2J8tUQkJsSLwGPPWtf";

fn model(base: &str, idle: Duration) -> GeminiModel {
    GeminiModel::builder("gemini-2.5-flash")
        .base_url(format!("{base}/v1beta"))
        .api_key(FIXTURE_API_KEY)
        .idle_timeout(idle)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_passes_the_conformance_suite() {
    let fixtures = ProviderFixtures::new()
        .text(fixture!("text.sse"))
        .tool_call(fixture!("tool_call.sse"))
        .parallel_tool_calls(fixture!("parallel_tool_calls.sse"))
        .reasoning(fixture!("reasoning.sse"), None)
        .max_tokens(fixture!("max_tokens.sse"))
        .cache_usage(fixture!("cache_usage.sse"), 1024, 0)
        .malformed(fixture!("malformed.sse"))
        .context_overflow_body(fixture!("context_overflow.json"))
        .error_body(fixture!("error.json"));
    let report = Conformance::new(fixtures, |t| model(&t.base_url, t.idle_timeout))
        .run()
        .await;
    println!("{report}");
    for r in &report.results {
        match (r.name, &r.outcome) {
            // Gemini sends each function call whole: one input fragment, not ≥ 2. The content
            // of the same fixture is checked below.
            ("tool_call", Outcome::Failed(m)) if m.contains("fragment") => {}
            (_, Outcome::Passed) => {}
            (name, other) => panic!("{name}: {other:?}\n{report}"),
        }
    }
}

async fn turn(model: &GeminiModel, request: ModelRequest) -> Message {
    crate::common::stored_reply(model, request).await.unwrap()
}

#[tokio::test]
async fn thought_signatures_and_call_ids_go_back_to_gemini_only() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("tool_call.sse")));
    server.push(FixtureResponse::sse(fixture!("text.sse")));
    let m = model(&server.base_url(), Duration::from_secs(5));
    let tools = vec![ToolSpec::new(
        "get_weather",
        "The weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )];
    let mut history = vec![Message::user("Weather in Paris?")];
    let reply = turn(
        &m,
        ModelRequest::new(history.clone())
            .with_system_prompt("Be brief.")
            .with_tools(tools)
            .with_tool_choice(ToolChoice::Tool("get_weather".into())),
    )
    .await;
    let first = &server.requests()[0];
    assert_eq!(
        first.path,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(first.header("x-goog-api-key"), Some(FIXTURE_API_KEY));
    let body = first.json().unwrap();
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "Be brief."}]})
    );
    assert_eq!(
        body["contents"],
        json!([{"role": "user", "parts": [{"text": "Weather in Paris?"}]}])
    );
    assert_eq!(
        body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["properties"]["city"],
        json!({"type": "string"})
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}})
    );
    let ContentBlock::ToolUse(call) = &reply.content[0] else {
        panic!("{reply:?}");
    };
    assert_eq!(call.tool_use_id, "call_1");

    history.push(reply);
    history.push(Message::new(
        Role::User,
        vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
            "call_1", "Sunny",
        )))],
    ));
    turn(&m, ModelRequest::new(history.clone())).await;
    let second = server.requests()[1].json().unwrap();
    assert_eq!(
        second["contents"][1],
        json!({"role": "model", "parts": [{
            "functionCall": {"name": "get_weather", "args": {"city": "Paris", "unit": "celsius"},
                             "id": "call_1"},
            "thoughtSignature": SIGNATURE,
        }]})
    );
    assert_eq!(
        second["contents"][2],
        json!({"role": "user", "parts": [{"functionResponse": {
            "name": "get_weather", "response": {"result": "Sunny"}, "id": "call_1"}}]})
    );

    // A Gemini at another address gets the call without what this one attached.
    let other = FixtureServer::start().await.unwrap();
    other.push(FixtureResponse::sse(fixture!("text.sse")));
    turn(
        &model(&other.base_url(), Duration::from_secs(5)),
        ModelRequest::new(history),
    )
    .await;
    let elsewhere = other.requests()[0].json().unwrap();
    assert_eq!(
        elsewhere["contents"][1]["parts"][0],
        json!({"functionCall": {"name": "get_weather",
                                "args": {"city": "Paris", "unit": "celsius"}}})
    );
}

#[tokio::test]
async fn a_blocked_prompt_is_a_typed_error_and_a_bad_model_id_never_reaches_the_url() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("prompt_blocked.sse")));
    let m = model(&server.base_url(), Duration::from_secs(5));
    let (_, error) = crate::common::collect(&m, ModelRequest::new(vec![Message::user("…")])).await;
    let error = error.expect("a blocked prompt fails the call");
    assert_eq!(error.kind(), ModelErrorKind::BadRequest);
    assert!(error.to_string().contains("PROHIBITED_CONTENT"), "{error}");

    for bad in ["../admin", "gemini?key=x", "a b", "", "models/", ".hidden"] {
        assert!(GeminiModel::builder(bad).build().is_err(), "{bad:?}");
    }
    for good in [
        "gemini-2.5-flash",
        "models/gemini-3-pro-preview",
        "tunedModels/my-model-1",
    ] {
        assert!(GeminiModel::builder(good).build().is_ok(), "{good:?}");
    }
}

/// A token provider whose token changes on every call (as a rotating OAuth token does), or fails.
struct Rotating {
    calls: std::sync::atomic::AtomicUsize,
    fail: bool,
}

impl rein_models::http::TokenProvider for Rotating {
    async fn token(&self) -> Result<String, rein_core::ModelError> {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.fail {
            return Err(rein_core::ModelError::auth(
                "token endpoint refused the credentials",
            ));
        }
        Ok(format!("ya29.token-{n}"))
    }
}

fn rotating(fail: bool) -> Rotating {
    Rotating {
        calls: std::sync::atomic::AtomicUsize::new(0),
        fail,
    }
}

#[tokio::test]
async fn a_token_provider_gives_each_request_its_bearer_token_in_place_of_the_key() {
    let server = FixtureServer::start().await.unwrap();
    for _ in 0..2 {
        server.push(FixtureResponse::sse(fixture!("text.sse")));
    }
    let m = GeminiModel::builder("gemini-2.5-flash")
        .base_url(format!("{}/v1beta", server.base_url()))
        .token_provider(rotating(false))
        .build()
        .unwrap();
    assert!(!format!("{m:?}").contains("ya29"), "{m:?}");
    for _ in 0..2 {
        turn(&m, ModelRequest::new(vec![Message::user("hi")])).await;
    }
    let requests = server.requests();
    for (n, r) in requests.iter().enumerate() {
        // Fetched per request: a rotated token is used as soon as the provider has it.
        let expected = format!("Bearer ya29.token-{n}");
        assert_eq!(r.header("authorization"), Some(expected.as_str()));
        assert_eq!(r.header("x-goog-api-key"), None, "no key besides the token");
    }

    // The same hook on the OpenAI-compatible provider (Azure OpenAI with Entra ID).
    #[cfg(feature = "openai")]
    {
        let server = FixtureServer::start().await.unwrap();
        server.push(FixtureResponse::sse(include_str!(
            "../fixtures/openai/text.sse"
        )));
        let m = rein_models::OpenAiModel::builder("gpt-4.1")
            .base_url(format!("{}/v1", server.base_url()))
            .token_provider(rotating(false))
            .build()
            .unwrap();
        let _ = crate::common::stored_reply(&m, ModelRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap();
        assert_eq!(
            server.requests()[0].header("authorization"),
            Some("Bearer ya29.token-0")
        );
    }
}

#[tokio::test]
async fn a_failing_token_provider_ends_the_call_before_anything_is_sent() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("text.sse")));
    let m = GeminiModel::builder("gemini-2.5-flash")
        .base_url(format!("{}/v1beta", server.base_url()))
        .token_provider(rotating(true))
        .build()
        .unwrap();
    let e = crate::common::stored_reply(&m, ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Auth, "{e}");
    assert!(e.to_string().contains("refused the credentials"), "{e}");
    assert!(server.requests().is_empty(), "nothing sent without a token");

    // A key and a token provider together are a configuration mistake, said at build time.
    let both = GeminiModel::builder("gemini-2.5-flash")
        .api_key(FIXTURE_API_KEY)
        .token_provider(rotating(false))
        .build();
    assert!(both.unwrap_err().to_string().contains("not both"));
}
