//! Hostile-input property tests for the stream decoders: thousands of seeded random and
//! mutated bodies per decoder go through decoder → `StreamEvent`s → `StreamAssembler`. None may
//! panic, and a body the decoder accepts must assemble. Bedrock's binary event stream gets three
//! runs: raw mutated bytes (framing), mutated messages re-encoded with valid CRCs (event
//! decoding), and the fuzz target's line form. (The `fuzz/` crate runs the same entry points
//! under libFuzzer.)
//!
//! Then hostile endpoints over HTTP (127.0.0.1): an event that never ends, small events that
//! never end, a redirect to another origin. Each ends with a typed error, the connection
//! closed, and nothing sent to the other origin. (A line that never ends is a check of the
//! conformance suite, which every provider runs.)
#![cfg(all(
    feature = "test-util",
    feature = "openai",
    feature = "anthropic",
    feature = "ollama"
))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use rein_core::{ModelError, stream::StreamEvent};
use rein_models::fuzzing;

type Decode = fn(&[u8]) -> (Vec<StreamEvent>, Option<ModelError>);

/// Fuzzing finding (anthropic_sse, libFuzzer, ~35k runs): the Anthropic decoder forwarded a
/// delta whose kind does not match the open block (here a `text_delta` inside a `tool_use`
/// block), which only the assembler caught. The decoder now tracks the open block's kind and
/// fails such a stream itself with a typed malformed-stream error.
#[test]
fn mismatched_delta_kind_is_a_malformed_stream() {
    let body = concat!(
        "?event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":",
        "{\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":\"f\",\"input\":{}}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":",
        "{\"type\":\"text_delta\",\"te!xt\":\"x\"}}\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );
    let (_, err) = fuzzing::anthropic_sse(body.as_bytes());
    let err = err.expect("a text delta inside a tool use is rejected");
    assert_eq!(
        err.kind(),
        rein_core::error::ModelErrorKind::MalformedStream
    );
    assert!(err.message().contains("text_delta"), "{err}");
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u8] = b"\n\r:{}[]\",0\\ \x00\xff\xc3data: event: ";

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..=rng.below(8) {
        let at = rng.below(v.len() + 1);
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] = rng.next() as u8;
            }
            1 => v.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            2 => v.truncate(at),
            3 if at < v.len() => {
                let end = (at + rng.below(32)).min(v.len());
                v.drain(at..end);
            }
            _ => {
                let from = rng.below(v.len());
                let end = (from + rng.below(64)).min(v.len());
                let piece = v[from..end].to_vec();
                v.splice(at..at, piece);
            }
        }
    }
    v
}

/// Every body a decoder accepts must assemble: the decoders reject what the assembler would.
fn run<S: AsRef<[u8]>>(name: &str, decode: Decode, seeds: &[S], cases: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    let mut accepted = 0;
    for case in 0..cases {
        let mut input = vec![rng.next() as u8];
        if case % 4 == 0 {
            let n = rng.below(512);
            input.extend((0..n).map(|_| rng.next() as u8));
        } else {
            let seed = seeds[rng.below(seeds.len())].as_ref();
            input.extend(mutate(&mut rng, seed));
        }
        let (events, err) = decode(&input);
        let assembled = fuzzing::assemble(&events);
        if err.is_none() {
            accepted += 1;
            assert!(
                assembled,
                "{name} case {case}: accepted body did not assemble: {:?}",
                String::from_utf8_lossy(&input)
            );
        }
    }
    // The unmutated seeds decode.
    for s in seeds {
        let mut input = vec![63u8];
        input.extend_from_slice(s.as_ref());
        let (events, err) = decode(&input);
        let malformed = String::from_utf8_lossy(s.as_ref()).contains("malformed");
        assert!(err.is_none() || malformed, "{name}: {err:?}");
        let _ = fuzzing::assemble(&events);
    }
    println!("{name}: {cases} cases, {accepted} accepted");
}

macro_rules! fx {
    ($p:literal) => {
        include_str!(concat!("../fixtures/", $p))
    };
}

#[test]
fn ollama_ndjson_decoder_survives_hostile_bodies() {
    run(
        "ollama",
        fuzzing::ollama_ndjson,
        &[
            fx!("ollama/text.ndjson"),
            fx!("ollama/tool_call.ndjson"),
            fx!("ollama/parallel_tool_calls.ndjson"),
            fx!("ollama/reasoning.ndjson"),
            fx!("ollama/max_tokens.ndjson"),
        ],
        4000,
    );
}

#[test]
fn openai_sse_decoder_survives_hostile_bodies() {
    run(
        "openai",
        fuzzing::openai_sse,
        &[
            fx!("openai/text.sse"),
            fx!("openai/tool_call.sse"),
            fx!("openai/parallel_tool_calls.sse"),
            fx!("openai/reasoning.sse"),
            fx!("openai/cache_usage.sse"),
            fx!("openai/deepseek_thinking_tool_call.sse"),
            fx!("openai/gemini_compat_tool_call.sse"),
        ],
        4000,
    );
}

#[cfg(feature = "gemini")]
#[test]
fn gemini_sse_decoder_survives_hostile_bodies() {
    run(
        "gemini",
        fuzzing::gemini_sse,
        &[
            fx!("gemini/text.sse"),
            fx!("gemini/tool_call.sse"),
            fx!("gemini/parallel_tool_calls.sse"),
            fx!("gemini/reasoning.sse"),
            fx!("gemini/max_tokens.sse"),
            fx!("gemini/cache_usage.sse"),
        ],
        4000,
    );
}

#[cfg(feature = "openai-responses")]
#[test]
fn openai_responses_sse_decoder_survives_hostile_bodies() {
    run(
        "openai-responses",
        fuzzing::openai_responses_sse,
        &[
            fx!("openai-responses/text.sse"),
            fx!("openai-responses/tool_call.sse"),
            fx!("openai-responses/parallel_tool_calls.sse"),
            fx!("openai-responses/reasoning.sse"),
            fx!("openai-responses/max_tokens.sse"),
            fx!("openai-responses/cache_usage.sse"),
        ],
        4000,
    );
}

#[test]
fn anthropic_sse_decoder_survives_hostile_bodies() {
    run(
        "anthropic",
        fuzzing::anthropic_sse,
        &[
            fx!("anthropic/text.sse"),
            fx!("anthropic/tool_call.sse"),
            fx!("anthropic/parallel_tool_calls.sse"),
            fx!("anthropic/reasoning.sse"),
            fx!("anthropic/cache_usage.sse"),
        ],
        4000,
    );
}

#[test]
fn message_json_survives_hostile_bytes() {
    let seed = r#"{"role":"assistant","content":[{"text":"hi"},{"toolUse":{"toolUseId":"t","name":"f","input":{"a":1}}},{"reasoningContent":{"reasoningText":{"text":"r","signature":"s"}}}]}"#;
    let mut rng = Rng(7);
    for _ in 0..4000 {
        let bytes = mutate(&mut rng, seed.as_bytes());
        if let Ok(m) = serde_json::from_slice::<rein_core::Message>(&bytes) {
            let again = serde_json::to_vec(&m).unwrap();
            let back: rein_core::Message = serde_json::from_slice(&again).unwrap();
            assert_eq!(back.content, m.content);
        }
    }
}

#[cfg(feature = "bedrock")]
const BEDROCK_SEEDS: [&str; 7] = [
    fx!("bedrock/text.json"),
    fx!("bedrock/tool_call.json"),
    fx!("bedrock/parallel_tool_calls.json"),
    fx!("bedrock/reasoning.json"),
    fx!("bedrock/max_tokens.json"),
    fx!("bedrock/cache_usage.json"),
    fx!("bedrock/redacted_reasoning.json"),
];

/// Raw bytes: mutated event-stream bodies (encoded with aws-smithy-eventstream) and random
/// bytes exercise the framing: lengths, CRCs, headers, frames cut by chunks.
#[cfg(feature = "bedrock")]
#[test]
fn bedrock_eventstream_decoder_survives_hostile_bodies() {
    let seeds: Vec<Vec<u8>> = BEDROCK_SEEDS
        .iter()
        .map(|j| fuzzing::bedrock_frames(j).unwrap().concat())
        .collect();
    run("bedrock", fuzzing::bedrock_eventstream, &seeds, 4000);
}

/// Valid frames around hostile content: payloads mutated, frames dropped, repeated, swapped or
/// renamed, then encoded with correct CRCs so that the event decoding itself is exercised.
#[cfg(feature = "bedrock")]
#[test]
fn bedrock_event_decoding_survives_hostile_frames() {
    use serde_json::{Value, json};

    const EVENTS: [&str; 7] = [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "unknownEvent",
    ];
    let seeds: Vec<Vec<Value>> = BEDROCK_SEEDS
        .iter()
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    let mut rng = Rng(0x5eed_bed0_c0de);
    let (mut accepted, mut rejected) = (0, 0);
    for case in 0..4000 {
        let mut list = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(3) {
            if list.is_empty() {
                break;
            }
            let i = rng.below(list.len());
            match rng.below(6) {
                0 => {
                    list.remove(i);
                }
                1 => {
                    let e = list[i].clone();
                    list.insert(rng.below(list.len() + 1), e);
                }
                2 => {
                    let j = rng.below(list.len());
                    list.swap(i, j);
                }
                3 => list[i]["event"] = json!(EVENTS[rng.below(EVENTS.len())]),
                4 => {
                    let e = &mut list[i];
                    e.as_object_mut().unwrap().remove("event");
                    e["exception"] = json!("throttlingException");
                }
                _ => {
                    let payload = list[i]["payload"].to_string();
                    let bytes = mutate(&mut rng, payload.as_bytes());
                    list[i]["payload_raw"] = json!(String::from_utf8_lossy(&bytes));
                }
            }
        }
        let frames = fuzzing::bedrock_frames(&Value::Array(list).to_string()).unwrap();
        let mut input = vec![rng.next() as u8];
        input.extend(frames.concat());
        let (events, err) = fuzzing::bedrock_eventstream(&input);
        if err.is_none() {
            accepted += 1;
            assert!(
                fuzzing::assemble(&events),
                "case {case}: accepted stream did not assemble: {events:?}"
            );
        } else {
            rejected += 1;
        }
    }
    println!("bedrock frames: 4000 cases, {accepted} accepted, {rejected} typed errors");
}

/// The fuzz target's second entry: text lines made into valid frames.
#[cfg(feature = "bedrock")]
#[test]
fn bedrock_event_lines_survive_random_and_mutated_lines() {
    let seed = "messageStart {\"role\":\"assistant\"}\n\
        contentBlockDelta {\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"text\":\"r\"}}}\n\
        contentBlockStart {\"contentBlockIndex\":1,\"start\":{\"toolUse\":{\"toolUseId\":\"t\",\"name\":\"f\"}}}\n\
        contentBlockDelta {\"contentBlockIndex\":1,\"delta\":{\"toolUse\":{\"input\":\"{}\"}}}\n\
        contentBlockStop {\"contentBlockIndex\":1}\n\
        messageStop {\"stopReason\":\"tool_use\"}\n\
        metadata {\"usage\":{\"inputTokens\":1,\"outputTokens\":2}}\n\
        !validationException {\"message\":\"Input is too long\"}\n\
        ?InternalFailure broken";
    run("bedrock lines", fuzzing::bedrock_event_lines, &[seed], 4000);
}

/// Writes the seed corpus of the `bedrock_eventstream` fuzz target (real frames, encoded with
/// aws-smithy-eventstream from the recorded fixtures):
/// `REIN_FUZZ_CORPUS=fuzz/corpus/bedrock_eventstream cargo test -p rein-models --all-features
/// --test it -- --ignored hostile_streams::write_bedrock_fuzz_corpus`.
#[cfg(feature = "bedrock")]
#[test]
#[ignore = "writes files; run by hand to refresh the fuzz corpus"]
fn write_bedrock_fuzz_corpus() {
    let dir = std::path::PathBuf::from(std::env::var("REIN_FUZZ_CORPUS").unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let mut named: Vec<(&str, &str)> = vec![
        ("malformed", fx!("bedrock/malformed.json")),
        (
            "exception_midstream",
            fx!("bedrock/exception_midstream.json"),
        ),
    ];
    for (name, json) in [
        "text",
        "tool_call",
        "parallel_tool_calls",
        "reasoning",
        "max_tokens",
        "cache_usage",
        "redacted_reasoning",
    ]
    .into_iter()
    .zip(BEDROCK_SEEDS)
    {
        named.push((name, json));
    }
    for (name, json) in named {
        let frames = fuzzing::bedrock_frames(json).unwrap().concat();
        // First byte: chunk size (% 64); its top bit picks the line form.
        for (suffix, first) in [("", 63u8), ("_c5", 4)] {
            let mut data = vec![first];
            data.extend_from_slice(&frames);
            std::fs::write(dir.join(format!("{name}{suffix}")), data).unwrap();
        }
        let list: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
        let mut lines = vec![0x80 | 63u8];
        for (i, e) in list.iter().enumerate() {
            if i > 0 {
                lines.push(b'\n');
            }
            let head = match (e.get("event"), e.get("exception"), e.get("error")) {
                (Some(t), _, _) => t.as_str().unwrap().to_owned(),
                (_, Some(t), _) => format!("!{}", t.as_str().unwrap()),
                (_, _, Some(t)) => format!("?{}", t.as_str().unwrap()),
                _ => continue,
            };
            let payload = match e.get("payload_raw") {
                Some(raw) => raw.as_str().unwrap().to_owned(),
                None => e
                    .get("payload")
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            };
            lines.extend_from_slice(format!("{head} {payload}").as_bytes());
        }
        std::fs::write(dir.join(format!("{name}_lines")), lines).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile endpoints over HTTP

mod wire {
    use std::time::Duration;

    use rein_core::{
        Message, ModelError, error::ModelErrorKind, request::ModelRequest, stream::StreamEvent,
    };
    use rein_models::conformance::{FixtureResponse, FixtureServer};
    use rein_models::http::StreamLimits;
    use rein_models::{AnthropicModel, OllamaModel, OpenAiModel, SharedModel};

    const KEY: &str = "hostile-test-secret-key";
    const GATEWAY: &str = "hostile-test-gateway-secret";

    #[derive(Clone, Copy, Debug)]
    enum Provider {
        OpenAi,
        Anthropic,
        Ollama,
        #[cfg(feature = "bedrock")]
        Bedrock,
    }

    const PROVIDERS: &[Provider] = &[
        Provider::OpenAi,
        Provider::Anthropic,
        Provider::Ollama,
        #[cfg(feature = "bedrock")]
        Provider::Bedrock,
    ];

    /// The provider at `base`, with an API key, a gateway header and `limits`.
    fn model(p: Provider, base: &str, limits: StreamLimits) -> SharedModel {
        // Every provider builder has these methods (rein-models' shared builder methods).
        macro_rules! configured {
            ($builder:expr) => {
                $builder
                    .header("x-gateway-token", GATEWAY)
                    .idle_timeout(Duration::from_secs(5))
                    .stream_limits(limits)
                    .build()
                    .unwrap()
                    .into()
            };
        }
        match p {
            Provider::OpenAi => configured!(
                OpenAiModel::builder("m")
                    .base_url(format!("{base}/v1"))
                    .api_key(KEY)
            ),
            Provider::Anthropic => {
                configured!(AnthropicModel::builder("m").base_url(base).api_key(KEY))
            }
            Provider::Ollama => configured!(OllamaModel::builder("m").base_url(base).api_key(KEY)),
            #[cfg(feature = "bedrock")]
            Provider::Bedrock => configured!(
                rein_models::BedrockModel::builder("m")
                    .region("us-east-1")
                    .endpoint_url(base)
                    .bearer_token(KEY)
            ),
        }
    }

    /// A valid start of a streamed answer, and one text event to repeat after it.
    fn start_and_text_event(p: Provider) -> FixtureResponse {
        let (content_type, start, event): (&str, Vec<u8>, Vec<u8>) = match p {
            Provider::OpenAi => (
                "text/event-stream",
                Vec::new(),
                br#"data: {"choices":[{"index":0,"delta":{"content":"a"}}]}"#
                    .iter()
                    .chain(b"\n\n")
                    .copied()
                    .collect(),
            ),
            Provider::Anthropic => (
                "text/event-stream",
                concat!(
                    "event: message_start\n",
                    "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
                    "event: content_block_start\n",
                    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                )
                .into(),
                concat!(
                    "event: content_block_delta\n",
                    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n",
                )
                .into(),
            ),
            Provider::Ollama => (
                "application/x-ndjson",
                Vec::new(),
                b"{\"message\":{\"role\":\"assistant\",\"content\":\"a\"},\"done\":false}\n".to_vec(),
            ),
            #[cfg(feature = "bedrock")]
            Provider::Bedrock => {
                let frames = rein_models::fuzzing::bedrock_frames(
                    r#"[{"event": "messageStart", "payload": {"role": "assistant"}},
                        {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0, "delta": {"text": "a"}}}]"#,
                )
                .unwrap();
                (
                    "application/vnd.amazon.eventstream",
                    frames[0].clone(),
                    frames[1].clone(),
                )
            }
        };
        FixtureResponse::chunks(content_type, [start]).endless(&event.repeat(64))
    }

    async fn call(model: &SharedModel) -> (Vec<StreamEvent>, Option<ModelError>) {
        let request = ModelRequest::new(vec![Message::user("hi")]);
        super::common::drain(model.stream(request).await).await
    }

    /// Calls `model`, which must fail with `ResponseTooLarge` saying `says`, and the server
    /// must see the connection closed.
    async fn expect_too_large(
        p: Provider,
        model: &SharedModel,
        server: &FixtureServer,
        says: &str,
    ) {
        let (events, err) = tokio::time::timeout(Duration::from_secs(20), call(model))
            .await
            .unwrap_or_else(|_| panic!("{p:?}: still reading after 20 s"));
        let err = err.unwrap_or_else(|| panic!("{p:?}: no error after {} events", events.len()));
        assert_eq!(err.kind(), ModelErrorKind::ResponseTooLarge, "{p:?}: {err}");
        assert!(!err.is_retryable(), "{p:?}");
        assert!(err.message().contains(says), "{p:?}: {err}");
        assert!(
            server.wait_disconnect(Duration::from_secs(5)).await,
            "{p:?}: the connection stayed open"
        );
    }

    /// Finding 10 (issue 35): `data:` lines that never end their event.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_sse_event_that_never_ends_fails_at_the_event_limit() {
        let mut limits = StreamLimits::default();
        limits.max_event = 64 * 1024;
        for p in [Provider::OpenAi, Provider::Anthropic] {
            let server = FixtureServer::start().await.unwrap();
            server.push(
                FixtureResponse::chunks("text/event-stream", [b"data: {\n".to_vec()])
                    .endless(&b"data: 0123456789abcdef\n".repeat(256)),
            );
            let model = model(p, &server.base_url(), limits);
            expect_too_large(p, &model, &server, "event larger than 65536 bytes").await;
        }
    }

    /// Finding 10 (issue 35): valid small events without end: the response limit stops them,
    /// with the events so far bounded by it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_events_without_end_fail_at_the_response_limit() {
        let mut limits = StreamLimits::default();
        limits.max_response = 256 * 1024;
        for &p in PROVIDERS {
            let server = FixtureServer::start().await.unwrap();
            server.push(start_and_text_event(p));
            let model = model(p, &server.base_url(), limits);
            expect_too_large(p, &model, &server, "response larger than 262144 bytes").await;
        }
    }

    /// Finding 11 (issue 35): a redirect to another origin (another port of 127.0.0.1) is not
    /// followed: the other server gets no request, so neither the API key (`Authorization`,
    /// `x-api-key`) nor the gateway header nor the conversation; a redirect within the origin
    /// is followed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_provider_follows_a_redirect_to_another_origin() {
        for &p in PROVIDERS {
            let (first, other) = (
                FixtureServer::start().await.unwrap(),
                FixtureServer::start().await.unwrap(),
            );
            other.push(FixtureResponse::status(500, "{}"));
            first.push(
                FixtureResponse::status(307, "")
                    .header("location", &format!("{}/collect?k=v", other.base_url())),
            );
            let (_, err) = call(&model(p, &first.base_url(), StreamLimits::default())).await;
            let reached: Vec<_> = other.requests();
            assert!(
                reached.is_empty(),
                "{p:?}: the other origin got {reached:?}"
            );
            let err = err.unwrap();
            assert_eq!(err.kind(), ModelErrorKind::BadRequest, "{p:?}: {err}");
            assert!(!err.is_retryable());
            assert!(
                err.message().contains(&other.base_url()) && !err.message().contains("k=v"),
                "{p:?}: the error names the origin only: {err}"
            );
            let first_request = &first.requests()[0];
            assert!(
                first_request.header("x-gateway-token") == Some(GATEWAY),
                "{p:?}: the configured origin gets the gateway header"
            );

            // Within the origin: followed, credentials included.
            let server = FixtureServer::start().await.unwrap();
            server.push(
                FixtureResponse::status(307, "")
                    .header("location", &format!("{}/moved", server.base_url())),
            );
            server.push(FixtureResponse::status(500, "{}"));
            let (_, err) = call(&model(p, &server.base_url(), StreamLimits::default())).await;
            assert_eq!(err.unwrap().status(), Some(500), "{p:?}");
            let requests = server.requests();
            assert_eq!(requests.len(), 2, "{p:?}");
            assert_eq!(requests[1].header("x-gateway-token"), Some(GATEWAY));
        }
    }
}
