//! The Bedrock provider runs the shared conformance suite against recorded event-stream
//! fixtures (JSON message lists encoded to binary frames with `aws-smithy-eventstream`), with a
//! bearer token and with SigV4, plus Bedrock-specific checks: signatures re-derived from what
//! went over the wire, credential providers, mid-stream exceptions, framing, error types and
//! configuration from the environment.
#![cfg(all(feature = "test-util", feature = "bedrock"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{assemble, collect};
use hmac::{Hmac, Mac};
use rein_core::{
    ContentBlock, Message, ModelError, Role, ToolResult, ToolUse,
    error::ModelErrorKind,
    request::ModelRequest,
    stream::{BlockDelta, StreamAssembler, StreamEvent},
    tool::ToolSpec,
};
use rein_models::conformance::{
    Conformance, FIXTURE_API_KEY, FixtureResponse, FixtureServer, Outcome, ProviderFixtures,
    RecordedRequest,
};
use rein_models::{AwsCredentials, AwsCredentialsProvider, BedrockModel, fuzzing};
use serde_json::json;
use sha2::{Digest, Sha256};

const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";
const MODEL: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

macro_rules! fixture {
    ($p:literal) => {
        include_str!(concat!("../fixtures/bedrock/", $p))
    };
}

/// A fixture's frames, one HTTP chunk each.
fn frames(json: &str) -> FixtureResponse {
    FixtureResponse::chunks(EVENT_STREAM, fuzzing::bedrock_frames(json).unwrap())
}

fn fixtures() -> ProviderFixtures {
    ProviderFixtures::new()
        .text(frames(fixture!("text.json")))
        .tool_call(frames(fixture!("tool_call.json")))
        .parallel_tool_calls(frames(fixture!("parallel_tool_calls.json")))
        .reasoning(
            frames(fixture!("reasoning.json")),
            Some("ErUBCkYIBRgCIkD3sRc7Wq1bxFh2hR0mbY3EXAMPLEsig=="),
        )
        .max_tokens(frames(fixture!("max_tokens.json")))
        .cache_usage(frames(fixture!("cache_usage.json")), 1800, 248)
        .malformed(frames(fixture!("malformed.json")))
        .context_overflow_body(fixture!("context_overflow.json"))
        .error_body(fixture!("error.json"))
}

fn builder(endpoint: &str, idle: Duration) -> rein_models::BedrockModelBuilder {
    BedrockModel::builder(MODEL)
        .region("us-east-1")
        .endpoint_url(endpoint)
        .idle_timeout(idle)
}

fn with_bearer(endpoint: &str, idle: Duration) -> BedrockModel {
    builder(endpoint, idle)
        .bearer_token(FIXTURE_API_KEY)
        .build()
        .unwrap()
}

/// SigV4 with the suite's secret as both the secret key and the session token: the token goes
/// over the wire (`x-amz-security-token`), the key never does, and neither may show anywhere
/// else.
fn with_sigv4(endpoint: &str, idle: Duration) -> BedrockModel {
    builder(endpoint, idle)
        .credentials(
            AwsCredentials::new("AKIDEXAMPLE", FIXTURE_API_KEY).with_session_token(FIXTURE_API_KEY),
        )
        .build()
        .unwrap()
}

fn assert_all_passed(report: &rein_models::conformance::ConformanceReport) {
    println!("{report}");
    report.assert_passed();
    for r in &report.results {
        assert_eq!(r.outcome, Outcome::Passed, "{}: {report}", r.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_passes_the_conformance_suite_with_a_bearer_token() {
    let report = Conformance::new(fixtures(), |t| with_bearer(&t.base_url, t.idle_timeout))
        .run()
        .await;
    assert_all_passed(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bedrock_passes_the_conformance_suite_with_sigv4() {
    let report = Conformance::new(fixtures(), |t| with_sigv4(&t.base_url, t.idle_timeout))
        .run()
        .await;
    assert_all_passed(&report);
}

fn hi() -> ModelRequest {
    ModelRequest::new(vec![Message::user("hi")])
}

#[tokio::test]
async fn request_on_the_wire() {
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(fixture!("text.json")));
    let mut fields = serde_json::Map::new();
    fields.insert("top_k".into(), json!(40));
    let model = builder(
        &format!("{}/proxy/", server.base_url()),
        Duration::from_secs(5),
    )
    .bearer_token("bedrock-api-key")
    .header("x-gateway-tenant", "t1")
    .additional_model_request_fields(fields)
    .build()
    .unwrap();
    let req = ModelRequest::new(vec![
        Message::user("weather?"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
                "c1",
                "get_weather",
                json!({"city": "Paris"}),
            )))],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                "c1", "sunny",
            )))],
        ),
    ])
    .with_system_prompt("sys")
    .with_tools(vec![ToolSpec::new(
        "get_weather",
        "w",
        json!({"type": "object"}),
    )]);
    let (events, err) = collect(&model, req).await;
    assert!(err.is_none(), "{err:?}");
    let r = assemble(&events);
    assert_eq!(r.message.text(), "Hello, world!");
    assert_eq!((r.usage.input_tokens, r.usage.total_tokens), (11, 16));
    let req = &server.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.path,
        "/proxy/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream"
    );
    assert_eq!(req.header("authorization"), Some("Bearer bedrock-api-key"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("accept"), Some(EVENT_STREAM));
    assert_eq!(req.header("x-gateway-tenant"), Some("t1"));
    assert!(
        req.header("x-amz-date").is_none(),
        "a bearer request is not signed"
    );
    let body = req.json().unwrap();
    assert_eq!(body["system"], json!([{"text": "sys"}]));
    assert_eq!(body["additionalModelRequestFields"], json!({"top_k": 40}));
    assert_eq!(
        body["messages"][2]["content"][0],
        json!({"toolResult": {"toolUseId": "c1", "content": [{"text": "sunny"}]}})
    );
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"],
        json!({"json": {"type": "object"}})
    );
}

// ---------------------------------------------------------------------------------------------
// SigV4, re-derived from the recorded request

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(data.as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// SigV4's URI encoding of a path: each segment encoded (again), `/` kept.
fn canonical_path(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            seg.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Checks the request's `Authorization` the way AWS does, from what was sent.
fn verify_sigv4(req: &RecordedRequest, akid: &str, secret: &str, region: &str) {
    let auth = req.header("authorization").expect("authorization");
    let date = req.header("x-amz-date").expect("x-amz-date");
    assert_eq!(date.len(), 16, "{date}");
    assert!(date.ends_with('Z') && date.as_bytes()[8] == b'T', "{date}");
    let day = &date[..8];
    let scope = format!("{day}/{region}/bedrock/aws4_request");
    let mut signed: Vec<&str> = vec!["content-type", "host", "x-amz-date"];
    if req.header("x-amz-security-token").is_some() {
        signed.push("x-amz-security-token");
    }
    let signed_headers = signed.join(";");
    let canonical_headers: String = signed
        .iter()
        .map(|h| format!("{h}:{}\n", req.header(h).unwrap().trim()))
        .collect();
    let creq = format!(
        "POST\n{}\n\n{canonical_headers}\n{signed_headers}\n{}",
        canonical_path(&req.path),
        hex(&Sha256::digest(&req.body))
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(creq.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), day);
    for part in [region, "bedrock", "aws4_request"] {
        key = hmac(&key, part);
    }
    let signature = hex(&hmac(&key, &to_sign));
    assert_eq!(
        auth,
        format!(
            "AWS4-HMAC-SHA256 Credential={akid}/{scope}, SignedHeaders={signed_headers}, \
             Signature={signature}"
        )
    );
}

#[tokio::test]
async fn sigv4_signature_verifies_against_the_sent_request() {
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(fixture!("text.json")));
    server.push(frames(fixture!("text.json")));
    // An inference profile ARN: `:` and `/` in the path, encoded once on the wire and twice in
    // the canonical request.
    let arn = "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/eu.amazon.nova-pro-v1:0";
    let long_term = BedrockModel::builder(arn)
        .region("eu-west-3")
        .endpoint_url(server.base_url())
        .credentials(AwsCredentials::new("AKIDLONGTERM", "secret/key+1"))
        .build()
        .unwrap();
    let (_, err) = collect(&long_term, hi()).await;
    assert!(err.is_none(), "{err:?}");
    let temporary = BedrockModel::builder(arn)
        .region("eu-west-3")
        .endpoint_url(server.base_url())
        .credentials(
            AwsCredentials::new("ASIATEMPORARY", "tmp-secret").with_session_token("tok/en=="),
        )
        .build()
        .unwrap();
    let (_, err) = collect(&temporary, hi()).await;
    assert!(err.is_none(), "{err:?}");
    let reqs = server.requests();
    assert!(
        reqs[0]
            .path
            .contains("inference-profile%2Feu.amazon.nova-pro-v1%3A0")
    );
    assert!(reqs[0].header("x-amz-security-token").is_none());
    verify_sigv4(&reqs[0], "AKIDLONGTERM", "secret/key+1", "eu-west-3");
    assert_eq!(reqs[1].header("x-amz-security-token"), Some("tok/en=="));
    verify_sigv4(&reqs[1], "ASIATEMPORARY", "tmp-secret", "eu-west-3");
    for r in &reqs {
        assert!(
            r.header("x-amz-content-sha256").is_none(),
            "not used by Bedrock"
        );
        assert!(
            r.header("authorization")
                .unwrap()
                .contains("/eu-west-3/bedrock/aws4_request")
        );
    }
}

/// Hands out new credentials on every call, as rotating credentials do.
struct Rotating {
    calls: Arc<AtomicUsize>,
}

impl AwsCredentialsProvider for Rotating {
    async fn credentials(&self) -> Result<AwsCredentials, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 3 {
            return Err(ModelError::auth("the vault is sealed"));
        }
        Ok(
            AwsCredentials::new(format!("AKIDROTATION{n}"), format!("secret-{n}"))
                .with_session_token(format!("token-{n}")),
        )
    }
}

#[tokio::test]
async fn a_credentials_provider_is_asked_per_request() {
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(fixture!("text.json")));
    server.push(frames(fixture!("text.json")));
    let calls = Arc::new(AtomicUsize::new(0));
    let model = builder(&server.base_url(), Duration::from_secs(5))
        .credentials_provider(Rotating {
            calls: calls.clone(),
        })
        .build()
        .unwrap();
    let shown = format!("{model:?}");
    assert!(shown.contains("credentials provider"), "{shown}");
    for _ in 0..2 {
        let (_, err) = collect(&model, hi()).await;
        assert!(err.is_none(), "{err:?}");
    }
    let (_, err) = collect(&model, hi()).await;
    let e = err.unwrap();
    assert_eq!(e.kind(), ModelErrorKind::Auth);
    assert!(e.message().contains("sealed"));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "nothing is sent without credentials");
    verify_sigv4(&reqs[0], "AKIDROTATION1", "secret-1", "us-east-1");
    verify_sigv4(&reqs[1], "AKIDROTATION2", "secret-2", "us-east-1");
    assert_eq!(reqs[1].header("x-amz-security-token"), Some("token-2"));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

// ---------------------------------------------------------------------------------------------
// Streams

#[tokio::test]
async fn exception_mid_stream_is_a_typed_error_that_ends_the_stream() {
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(fixture!("exception_midstream.json")));
    let model = with_sigv4(&server.base_url(), Duration::from_secs(5));
    let (events, err) = collect(&model, hi()).await;
    let e = err.expect("the exception");
    assert_eq!(e.kind(), ModelErrorKind::Throttled);
    assert!(e.is_retryable());
    assert!(e.message().contains("Too many tokens"), "{e}");
    assert!(!format!("{e} {e:?}").contains(FIXTURE_API_KEY));
    // What came before is a valid prefix, and no MessageStop or Metadata was made up.
    assert!(matches!(events[0], StreamEvent::MessageStart { .. }));
    assert!(events.iter().all(|ev| !matches!(
        ev,
        StreamEvent::MessageStop { .. } | StreamEvent::Metadata { .. }
    )));
    let mut a = StreamAssembler::new();
    for ev in events {
        a.push(ev).unwrap();
    }
    assert!(a.finish().is_err(), "a partial response never assembles");
}

#[tokio::test]
async fn frames_split_across_many_chunks_and_a_bad_crc() {
    let body = fuzzing::bedrock_frames(fixture!("reasoning.json"))
        .unwrap()
        .concat();
    let server = FixtureServer::start().await.unwrap();
    server.push(
        FixtureResponse::chunks(EVENT_STREAM, body.chunks(3).map(<[u8]>::to_vec))
            .chunk_delay(Duration::ZERO),
    );
    let mut corrupt = body.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0x01;
    server.push(FixtureResponse::chunks(EVENT_STREAM, [corrupt]));
    let model = with_bearer(&server.base_url(), Duration::from_secs(5));
    let (events, err) = collect(&model, hi()).await;
    assert!(err.is_none(), "{err:?}");
    let r = assemble(&events);
    assert_eq!(r.message.text(), "Hi!");
    assert!(matches!(
        &r.message.content[0],
        ContentBlock::ReasoningContent(_)
    ));
    let reasoning: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::BlockDelta(BlockDelta::ReasoningText(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "The user greets me.");
    let (_, err) = collect(&model, hi()).await;
    let e = err.unwrap();
    assert_eq!(e.kind(), ModelErrorKind::MalformedStream);
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn a_json_body_instead_of_an_event_stream_is_malformed() {
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::status(
        200,
        r#"{"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}}}"#,
    ));
    let model = with_bearer(&server.base_url(), Duration::from_secs(5));
    let (_, err) = collect(&model, hi()).await;
    assert_eq!(err.unwrap().kind(), ModelErrorKind::MalformedStream);
}

#[tokio::test]
async fn http_errors_follow_the_aws_error_type() {
    let server = FixtureServer::start().await.unwrap();
    let model = with_bearer(&server.base_url(), Duration::from_secs(5));
    let cases: [(u16, &str, &str, ModelErrorKind, bool); 7] = [
        (
            424,
            "ModelErrorException",
            "The model produced an error",
            ModelErrorKind::Server,
            true,
        ),
        (
            400,
            "ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "Your request exceeds the service quota",
            ModelErrorKind::Throttled,
            true,
        ),
        (
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
            ModelErrorKind::Throttled,
            true,
        ),
        (
            403,
            "ExpiredTokenException",
            "The security token included in the request is expired",
            ModelErrorKind::Auth,
            false,
        ),
        (
            400,
            "ValidationException",
            "The model returned the following errors: prompt is too long: 201000 tokens > \
             200000 maximum",
            ModelErrorKind::ContextWindowOverflow,
            false,
        ),
        (
            429,
            "ModelNotReadyException",
            "Model is not ready for inference",
            ModelErrorKind::Server,
            true,
        ),
        (
            408,
            "ModelTimeoutException",
            "Model has timed out in processing the request",
            ModelErrorKind::Timeout,
            true,
        ),
    ];
    for (status, ty, msg, kind, retryable) in cases {
        let body = json!({ "message": msg }).to_string();
        server.push(
            FixtureResponse::status(status, &body)
                .header("x-amzn-ErrorType", ty)
                .header("x-amzn-RequestId", "7a5e8b0c-0000-0000-0000-000000000000")
                .header("retry-after", "2"),
        );
        let (_, err) = collect(&model, hi()).await;
        let e = err.unwrap();
        assert_eq!(e.kind(), kind, "{ty}: {e}");
        assert_eq!(e.is_retryable(), retryable, "{ty}");
        assert_eq!(e.status(), Some(status));
        assert_eq!(e.body(), Some(body.as_str()));
        assert!(e.message().contains(msg), "{e}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration

fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    |name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn configuration_from_the_environment() {
    let m = BedrockModel::from_env_with(
        MODEL,
        env(&[
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_SESSION_TOKEN", "env-token"),
        ]),
    )
    .build()
    .unwrap();
    assert_eq!(m.region(), "eu-west-1");
    assert_eq!(
        m.endpoint(),
        "https://bedrock-runtime.eu-west-1.amazonaws.com"
    );
    assert!(!m.uses_bearer_token());
    let shown = format!("{m:?} {m:#?}");
    assert!(shown.contains("AKIDENV"));
    assert!(
        !shown.contains("env-secret") && !shown.contains("env-token"),
        "{shown}"
    );

    // AWS_REGION beats AWS_DEFAULT_REGION; the service endpoint beats the global one; the
    // bearer token beats the keys.
    let m = BedrockModel::from_env_with(
        MODEL,
        env(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1/global"),
            (
                "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
                "http://127.0.0.1:1/bedrock/",
            ),
            ("AWS_BEARER_TOKEN_BEDROCK", "env-api-key"),
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
        ]),
    )
    .build()
    .unwrap();
    assert_eq!(m.region(), "us-west-2");
    assert_eq!(m.endpoint(), "http://127.0.0.1:1/bedrock");
    assert!(m.uses_bearer_token());
    assert!(!format!("{m:?}").contains("env-api-key"));

    let m = BedrockModel::from_env_with(
        MODEL,
        env(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1/global"),
            ("AWS_BEARER_TOKEN_BEDROCK", "k"),
        ]),
    )
    .build()
    .unwrap();
    assert_eq!(m.endpoint(), "http://127.0.0.1:1/global");
    let m = BedrockModel::from_env_with(
        MODEL,
        env(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1/global"),
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
            ("AWS_BEARER_TOKEN_BEDROCK", "k"),
        ]),
    )
    // Builder calls override the environment.
    .region("ap-south-1")
    .build()
    .unwrap();
    assert_eq!(
        m.endpoint(),
        "https://bedrock-runtime.ap-south-1.amazonaws.com"
    );

    // Missing pieces are clear configuration errors; a key id without its secret is no
    // credential, and blank values count as unset.
    let err = |vars| {
        BedrockModel::from_env_with(MODEL, env(vars))
            .build()
            .unwrap_err()
            .to_string()
    };
    let e = err(&[("AWS_BEARER_TOKEN_BEDROCK", "k"), ("AWS_REGION", " ")]);
    assert!(e.contains("no AWS region"), "{e}");
    let e = err(&[("AWS_REGION", "us-east-1"), ("AWS_ACCESS_KEY_ID", "AKID")]);
    assert!(
        e.contains("no credentials") && e.contains("AWS_ACCESS_KEY_ID"),
        "{e}"
    );
}

#[tokio::test]
async fn secrets_stay_out_of_errors_debug_and_logs() {
    use std::io::Write;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    // This test runs on one thread (the default current-thread runtime), so every event of the
    // call lands here.
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::trace!("capture works");
    let server = FixtureServer::start().await.unwrap();
    server.push(frames(fixture!("exception_midstream.json")));
    server.push(
        FixtureResponse::status(403, r#"{"message":"The security token is invalid"}"#)
            .header("x-amzn-ErrorType", "UnrecognizedClientException"),
    );
    let model = builder(&server.base_url(), Duration::from_secs(5))
        .credentials(AwsCredentials::new("AKIDLOG", "log-secret").with_session_token("log-token"))
        .build()
        .unwrap();
    let (_, e1) = collect(&model, hi()).await;
    let (_, e2) = collect(&model, hi()).await;
    assert_eq!(
        e2.as_ref().map(ModelError::kind),
        Some(ModelErrorKind::Auth)
    );
    let logs = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("capture works"));
    let shown = format!(
        "{e1:?} {e2:?} {:?} {model:?}",
        e2.as_ref().map(ToString::to_string)
    );
    for secret in ["log-secret", "log-token"] {
        assert!(!logs.contains(secret), "{secret} in the logs:\n{logs}");
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
}
