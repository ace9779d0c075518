//! The provider kit's example provider (`examples/kit_provider.rs`) passes the conformance
//! suite, every check run, nothing skipped.
#![cfg(all(feature = "http-kit", feature = "test-util"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../examples/kit_provider.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

use std::time::Duration;

use example::KitModel;
use rein_models::conformance::{Conformance, ProviderFixtures};
use rein_models::http::{Blocks, Flow, LineDecoder, OpenBlock};
use rein_models::{BlockDelta, BlockStart, ModelErrorKind, StreamEvent};

fn sse(events: &[(&str, &str)]) -> String {
    events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect()
}

fn fixtures() -> ProviderFixtures {
    let done = |stop: &str, usage: &str| format!(r#"{{"stop":"{stop}","usage":{usage}}}"#);
    ProviderFixtures::new()
        .text(sse(&[
            ("text", r#"{"text":"Hello"}"#),
            ("text", r#"{"text":", "}"#),
            ("text", r#"{"text":"world!"}"#),
            ("done", &done("end_turn", r#"{"input":11,"output":5}"#)),
        ]))
        .tool_call(sse(&[
            ("tool_call", r#"{"id":"call_1","name":"get_weather"}"#),
            ("tool_args", r#"{"json":"{\"city\": \"Paris\", "}"#),
            ("tool_args", r#"{"json":"\"unit\": \"celsius\"}"}"#),
            ("done", &done("tool_use", r#"{"input":20,"output":9}"#)),
        ]))
        .parallel_tool_calls(sse(&[
            ("tool_call", r#"{"id":"call_1","name":"get_weather"}"#),
            ("tool_args", r#"{"json":"{\"city\": "}"#),
            ("tool_args", r#"{"json":"\"Paris\"}"}"#),
            ("tool_call", r#"{"id":"call_2","name":"get_time"}"#),
            ("tool_args", r#"{"json":"{\"timezone\": "}"#),
            ("tool_args", r#"{"json":"\"Europe/Paris\"}"}"#),
            ("done", &done("tool_use", r#"{"input":20,"output":18}"#)),
        ]))
        .reasoning(
            sse(&[
                ("reasoning", r#"{"text":"The user "}"#),
                ("reasoning", r#"{"text":"greets me."}"#),
                ("reasoning", r#"{"signature":"sig-kit-1"}"#),
                ("text", r#"{"text":"Hi!"}"#),
                ("done", &done("end_turn", r#"{"input":8,"output":6}"#)),
            ]),
            Some("sig-kit-1"),
        )
        .max_tokens(sse(&[
            ("text", r#"{"text":"Hello"}"#),
            ("done", &done("max_tokens", r#"{"input":8,"output":1}"#)),
        ]))
        .cache_usage(
            sse(&[
                ("text", r#"{"text":"Cached."}"#),
                (
                    "done",
                    &done(
                        "end_turn",
                        r#"{"input":5,"output":2,"cache_read":100,"cache_write":20}"#,
                    ),
                ),
            ]),
            100,
            20,
        )
        .malformed(sse(&[
            ("text", r#"{"text":"Hel"}"#),
            ("text", r#"{"text": not json"#),
        ]))
        .context_overflow_body(
            r#"{"error":{"type":"invalid_request","message":"prompt is too long: 9000 tokens > 8192 maximum"}}"#,
        )
}

fn kit(base_url: &str, api_key: &str, idle: Duration) -> KitModel {
    KitModel::new(base_url, "kit-1", api_key)
        .unwrap()
        .idle_timeout(idle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_example_provider_passes_the_conformance_suite() {
    let report = Conformance::new(fixtures(), |t| kit(&t.base_url, &t.api_key, t.idle_timeout))
        .run()
        .await;
    println!("{report}");
    report.assert_passed();
    assert_eq!(
        report.passed().len(),
        report.results.len(),
        "nothing skipped: {report}"
    );
    assert_eq!(report.results.len(), 22);
}

#[tokio::test]
async fn a_stream_error_event_is_typed_like_an_http_error() {
    use rein_models::Model as _;
    use rein_models::conformance::{FixtureResponse, FixtureServer};
    use rein_models::futures::StreamExt as _;
    let server = FixtureServer::start().await.unwrap();
    server.push(FixtureResponse::sse(&sse(&[
        ("text", r#"{"text":"Hel"}"#),
        (
            "error",
            r#"{"error":{"type":"rate_limit","message":"slow down"}}"#,
        ),
    ])));
    let model = kit(&server.base_url(), "k", Duration::from_secs(5));
    let mut stream = model
        .stream(rein_models::ModelRequest::new(vec![
            rein_models::Message::user("hi"),
        ]))
        .await
        .unwrap();
    let mut err = None;
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            err = Some(e);
        }
    }
    let e = err.expect("an error");
    assert_eq!(e.kind(), ModelErrorKind::Throttled);
    assert!(e.message().contains("slow down"), "{e}");
}

#[test]
fn blocks_open_and_close_blocks_by_kind() {
    let mut out = std::collections::VecDeque::new();
    let mut b = Blocks::new();
    b.reasoning("think", &mut out);
    b.text("", &mut out); // skipped: opens nothing
    b.text("a", &mut out);
    b.text("b", &mut out);
    assert_eq!(b.open(), Some(OpenBlock::Text));
    assert!(
        b.tool_input("p", "{}", &mut out).is_err(),
        "no tool use open"
    );
    b.tool_use("id", "f", &mut out);
    b.tool_input("p", "{}", &mut out).unwrap();
    b.close(&mut out);
    b.close(&mut out);
    let expected = vec![
        StreamEvent::BlockStart(BlockStart::Reasoning),
        StreamEvent::BlockDelta(BlockDelta::ReasoningText("think".into())),
        StreamEvent::BlockStop,
        StreamEvent::BlockStart(BlockStart::Text),
        StreamEvent::BlockDelta(BlockDelta::Text("a".into())),
        StreamEvent::BlockDelta(BlockDelta::Text("b".into())),
        StreamEvent::BlockStop,
        StreamEvent::BlockStart(BlockStart::ToolUse {
            tool_use_id: "id".into(),
            name: "f".into(),
        }),
        StreamEvent::BlockDelta(BlockDelta::ToolInput("{}".into())),
        StreamEvent::BlockStop,
    ];
    assert_eq!(Vec::from(out), expected);
}

#[test]
fn line_decoder_splits_anywhere_and_bounds_a_line() {
    let mut d = LineDecoder::new("p", 8);
    let mut lines = Vec::new();
    for chunk in [&b"ab"[..], b"c\nde", b"f\n\ng", b"h"] {
        d.feed(chunk, |l| {
            lines.push(String::from_utf8(l.to_vec()).unwrap());
            Ok(Flow::Continue)
        })
        .unwrap();
    }
    assert_eq!(lines, ["abc", "def", ""]);
    assert_eq!(d.take_rest(), b"gh");
    let flow = d.feed(b"x\ny\n", |l| {
        Ok(if l == b"x" {
            Flow::Done
        } else {
            Flow::Continue
        })
    });
    assert_eq!(flow.unwrap(), Flow::Done, "stops at Done");
    let e = d.feed(b"0123456789", |_| Ok(Flow::Continue)).unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::ResponseTooLarge);
    assert!(e.message().contains("larger than 8 bytes"), "{e}");
}

#[test]
fn retry_after_and_status_mapping_are_public() {
    use rein_models::http::{parse_retry_after, reqwest, retry_after, status_error};
    assert_eq!(parse_retry_after("1.5"), Some(Duration::from_millis(1500)));
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(Duration::ZERO)
    );
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("retry-after-ms", "250".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
    let k = |s| status_error("p", s, None, String::new(), |_| false).kind();
    assert_eq!(k(408), ModelErrorKind::Timeout);
    assert_eq!(k(529), ModelErrorKind::Throttled);
    let overflow = status_error(
        "p",
        413,
        None,
        r#"{"error":{"message":"maximum context length exceeded"}}"#.into(),
        rein_models::http::is_context_overflow,
    );
    assert_eq!(overflow.kind(), ModelErrorKind::ContextWindowOverflow);
}
