//! Both HTTP providers run the shared conformance suite against their recorded fixtures.
#![cfg(all(feature = "test-util", feature = "openai", feature = "anthropic"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures_util::StreamExt as _;
use rein_core::{Message, error::ModelErrorKind, request::ModelRequest, stream::StreamEvent};
use rein_models::conformance::{
    Conformance, FIXTURE_API_KEY, FixtureResponse, FixtureServer, ProviderFixtures,
};
use rein_models::{AnthropicModel, Model, OpenAiModel};

macro_rules! fixture {
    ($p:literal) => {
        include_str!(concat!("../fixtures/", $p))
    };
}

fn openai_fixtures() -> ProviderFixtures {
    ProviderFixtures::new()
        .text(fixture!("openai/text.sse"))
        .tool_call(fixture!("openai/tool_call.sse"))
        .parallel_tool_calls(fixture!("openai/parallel_tool_calls.sse"))
        .reasoning(fixture!("openai/reasoning.sse"), None)
        .max_tokens(fixture!("openai/max_tokens.sse"))
        .cache_usage(fixture!("openai/cache_usage.sse"), 1024, 0)
        .malformed(fixture!("openai/malformed.sse"))
        .context_overflow_body(fixture!("openai/context_overflow.json"))
}

fn anthropic_fixtures() -> ProviderFixtures {
    ProviderFixtures::new()
        .text(fixture!("anthropic/text.sse"))
        .tool_call(fixture!("anthropic/tool_call.sse"))
        .parallel_tool_calls(fixture!("anthropic/parallel_tool_calls.sse"))
        .reasoning(
            fixture!("anthropic/reasoning.sse"),
            Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"),
        )
        .max_tokens(fixture!("anthropic/max_tokens.sse"))
        .cache_usage(fixture!("anthropic/cache_usage.sse"), 1800, 248)
        .malformed(fixture!("anthropic/malformed.sse"))
        .context_overflow_body(fixture!("anthropic/context_overflow.json"))
        .error_body(fixture!("anthropic/error.json"))
}

fn openai(base: &str, idle: Duration) -> OpenAiModel {
    OpenAiModel::builder("fixture-model")
        .base_url(format!("{base}/v1"))
        .api_key(FIXTURE_API_KEY)
        .idle_timeout(idle)
        .build()
        .unwrap()
}

fn anthropic(base: &str, idle: Duration) -> AnthropicModel {
    AnthropicModel::builder("fixture-model")
        .base_url(base)
        .api_key(FIXTURE_API_KEY)
        .idle_timeout(idle)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_passes_the_conformance_suite() {
    let report = Conformance::new(openai_fixtures(), |t| openai(&t.base_url, t.idle_timeout))
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert!(report.failures().is_empty());
    assert_eq!(
        report.passed().len(),
        report.results.len(),
        "nothing skipped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_passes_the_conformance_suite() {
    let report = Conformance::new(anthropic_fixtures(), |t| {
        anthropic(&t.base_url, t.idle_timeout)
    })
    .run()
    .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(
        report.passed().len(),
        report.results.len(),
        "nothing skipped"
    );
}

#[tokio::test]
async fn openai_request_on_the_wire() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("openai/text.sse")));
    let model = openai(&server.base_url(), Duration::from_secs(5));
    let mut s = model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    while s.next().await.is_some() {}
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {FIXTURE_API_KEY}").as_str())
    );
    let body = req.json().unwrap();
    assert_eq!(body["model"], "fixture-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert!(body.get("tools").is_none(), "no tools, no tools field");
}

#[tokio::test]
async fn anthropic_request_on_the_wire() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(fixture!("anthropic/text.sse")));
    let model = anthropic(&server.base_url(), Duration::from_secs(5));
    let mut s = model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    while s.next().await.is_some() {}
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(FIXTURE_API_KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    let body = req.json().unwrap();
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["messages"][0]["content"][0]["text"], "hi");
}

#[tokio::test]
async fn anthropic_overloaded_is_throttled_both_as_status_and_mid_stream() {
    let server = FixtureServer::start().await.unwrap();
    server.push(
        FixtureResponse::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .header("retry-after", "3"),
    );
    server.push(FixtureResponse::sse(fixture!(
        "anthropic/overloaded_midstream.sse"
    )));
    let model = anthropic(&server.base_url(), Duration::from_secs(5));
    let e = match model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
    {
        Err(e) => e,
        Ok(_) => panic!("529 must fail"),
    };
    assert_eq!(e.kind(), ModelErrorKind::Throttled);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
    let mut s = model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut last = None;
    while let Some(item) = s.next().await {
        if let Err(e) = item {
            last = Some(e);
        }
    }
    let e = last.expect("an error event");
    assert_eq!(e.kind(), ModelErrorKind::Throttled);
    assert!(e.message().contains("Overloaded"));
}

#[tokio::test]
async fn openai_error_inside_the_stream_is_typed() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\
         data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"rate_limit_error\",\"code\":\"rate_limit_exceeded\"}}\n\n",
    ));
    let model = openai(&server.base_url(), Duration::from_secs(5));
    let mut s = model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut err = None;
    while let Some(item) = s.next().await {
        match item {
            Ok(e) => events.push(e),
            Err(e) => err = Some(e),
        }
    }
    assert!(matches!(events[0], StreamEvent::MessageStart { .. }));
    assert_eq!(err.unwrap().kind(), ModelErrorKind::Throttled);
}

#[test]
fn debug_never_shows_the_key() {
    let o = OpenAiModel::builder("m")
        .api_key("sk-very-secret")
        .build()
        .unwrap();
    let a = AnthropicModel::builder("m")
        .api_key("sk-ant-very-secret")
        .build()
        .unwrap();
    for shown in [
        format!("{o:?}"),
        format!("{o:#?}"),
        format!("{a:?}"),
        format!("{a:#?}"),
        format!("{:?}", OpenAiModel::builder("m").api_key("sk-very-secret")),
        format!(
            "{:?}",
            AnthropicModel::builder("m").api_key("sk-ant-very-secret")
        ),
    ] {
        assert!(!shown.contains("very-secret"), "{shown}");
    }
}

#[test]
fn invalid_base_url_is_a_config_error() {
    assert!(
        OpenAiModel::builder("m")
            .base_url("ftp://x")
            .build()
            .is_err()
    );
    assert!(
        AnthropicModel::builder("m")
            .base_url("not a url")
            .build()
            .is_err()
    );
}

#[tokio::test]
async fn the_suite_catches_a_provider_that_misreads_its_wire_format() {
    // The OpenAI provider fed Anthropic's wire bodies must fail the content checks.
    let report = Conformance::new(anthropic_fixtures(), |t| {
        openai(&t.base_url, t.idle_timeout)
    })
    .run()
    .await;
    let failed: Vec<_> = report.failures().iter().map(|r| r.name).collect();
    for name in ["text_streaming", "tool_call", "reasoning"] {
        assert!(failed.contains(&name), "{name} should fail: {report}");
    }
}

#[tokio::test]
async fn a_json_body_instead_of_an_event_stream_is_a_typed_error() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::status(
        200,
        r#"{"error":{"message":"upstream said no"}}"#,
    ));
    let model = openai(&server.base_url(), Duration::from_secs(5));
    let e = match model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
    {
        Err(e) => e,
        Ok(_) => panic!("must fail"),
    };
    assert_eq!(e.kind(), ModelErrorKind::MalformedStream);
    assert!(e.message().contains("upstream said no"), "{e}");
}

#[test]
fn a_key_that_cannot_be_a_header_is_a_config_error_that_does_not_show_it() {
    let e = OpenAiModel::builder("m")
        .api_key("sk-line\nbreak")
        .build()
        .unwrap_err();
    assert!(!e.to_string().contains("sk-line"), "{e}");
    assert!(
        AnthropicModel::builder("m")
            .api_key("a\rb")
            .build()
            .is_err()
    );
}

#[tokio::test]
async fn keep_alive_comments_reset_the_idle_timeout() {
    // Events 1.2 s apart, but an SSE comment every 200 ms: a 500 ms idle timeout must not fire,
    // since the connection is not idle.
    let events: Vec<&str> = fixture!("anthropic/text.sse")
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .collect();
    let mut body = String::new();
    for (i, e) in events.iter().enumerate() {
        body.push_str(e);
        body.push_str("\n\n");
        if i == 1 {
            for _ in 0..6 {
                body.push_str(": keep-alive\n\n");
            }
        }
    }
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(&body).chunk_delay(Duration::from_millis(200)));
    // The same body without comments, stalled after two events, does time out.
    server.push(FixtureResponse::sse(fixture!("anthropic/text.sse")).stalled_after(2));
    let model = anthropic(&server.base_url(), Duration::from_millis(500));
    let mut s = model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut text = String::new();
    while let Some(item) = s.next().await {
        if let StreamEvent::BlockDelta(rein_core::stream::BlockDelta::Text(t)) = item.unwrap() {
            text.push_str(&t);
        }
    }
    assert_eq!(text, "Hello, world!");
    let mut s = model
        .stream(ModelRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut last = None;
    while let Some(item) = s.next().await {
        if let Err(e) = item {
            last = Some(e);
        }
    }
    let e = last.expect("a timeout");
    assert_eq!(e.kind(), ModelErrorKind::Timeout);
    assert!(!e.is_retryable(), "data had arrived");
}

/// A provider written without any timeout or read bound: it sends the request and reads the
/// whole response, however long it takes. It must fail the suite's hostile-server checks.
#[derive(Debug)]
struct NoTimeouts {
    addr: String,
}

impl Model for NoTimeouts {
    fn info(&self) -> rein_models::ModelInfo {
        rein_models::ModelInfo::new("no-timeouts", "naive")
    }

    async fn stream(
        &self,
        _request: ModelRequest,
    ) -> Result<rein_models::ModelStream, rein_models::ModelError> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let transport = |e: std::io::Error| rein_models::ModelError::transport(e.to_string());
        let mut sock = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(transport)?;
        sock.write_all(b"POST / HTTP/1.1\r\nhost: fixture\r\ncontent-length: 0\r\n\r\n")
            .await
            .map_err(transport)?;
        let mut response = Vec::new();
        sock.read_to_end(&mut response).await.map_err(transport)?;
        let status: u16 = String::from_utf8_lossy(&response)
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Err(rein_models::ModelError::server("naive provider").with_status(status))
    }
}

const HOSTILE_CHECKS: [&str; 4] = [
    "no_response_headers",
    "headers_then_stall",
    "error_body_stall",
    "endless_error_body",
];

fn outcome<'a>(
    report: &'a rein_models::conformance::ConformanceReport,
    name: &str,
) -> &'a rein_models::conformance::Outcome {
    &report
        .results
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
        .outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_catches_a_provider_without_timeouts_quickly() {
    use rein_models::conformance::Outcome;
    let started = std::time::Instant::now();
    let report = Conformance::new(openai_fixtures(), |t| NoTimeouts {
        addr: t.base_url.trim_start_matches("http://").to_owned(),
    })
    .idle_timeout(Duration::from_millis(100))
    .run()
    .await;
    println!("{report}");
    for name in HOSTILE_CHECKS.into_iter().chain(["idle_timeout"]) {
        let Outcome::Failed(msg) = outcome(&report, name) else {
            panic!("{name} should fail: {report}");
        };
        assert!(
            msg.starts_with("no error within") && msg.contains("idle timeout of 100ms"),
            "{name}: a clear message: {msg}"
        );
    }
    let Outcome::Failed(msg) = outcome(&report, "no_response_headers") else {
        unreachable!()
    };
    assert!(msg.contains("never sent the response headers"), "{msg}");
    let Outcome::Failed(msg) = outcome(&report, "endless_error_body") else {
        unreachable!()
    };
    assert!(msg.contains("never ends"), "{msg}");
    // Every wait is bounded by the suite's short idle timeout, not by its 20 s check limit.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_catches_a_provider_that_ignores_the_idle_timeout() {
    use rein_models::conformance::Outcome;
    // A correct decoder with hour-long timeouts: to the suite, a provider with none.
    let report = Conformance::new(openai_fixtures(), |t| {
        openai(&t.base_url, Duration::from_secs(3600))
    })
    .idle_timeout(Duration::from_millis(100))
    .run()
    .await;
    println!("{report}");
    for name in [
        "no_response_headers",
        "headers_then_stall",
        "error_body_stall",
        "idle_timeout",
    ] {
        assert!(
            matches!(outcome(&report, name), Outcome::Failed(m) if m.starts_with("no error within")),
            "{name} should fail: {report}"
        );
    }
    // Its error body read is bounded by size, so the endless body does not hang it; the
    // rest of the suite passes.
    let failed: Vec<_> = report.failures().iter().map(|r| r.name).collect();
    assert_eq!(failed.len(), 4, "{report}");
}
