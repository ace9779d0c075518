//! Hostile-input property tests for the stream decoders: thousands of seeded random and
//! mutated bodies per decoder go through decoder → `StreamEvent`s → `StreamAssembler`. None may
//! panic, and a body the decoder accepts must assemble. (The `fuzz/` crate runs the same entry
//! points under libFuzzer.)
#![cfg(all(
    feature = "test-util",
    feature = "openai",
    feature = "anthropic",
    feature = "ollama"
))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::{ModelError, StreamEvent};
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
    assert_eq!(err.kind(), rein_core::ModelErrorKind::MalformedStream);
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
fn run(name: &str, decode: Decode, seeds: &[&str], cases: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    let mut accepted = 0;
    for case in 0..cases {
        let mut input = vec![rng.next() as u8];
        if case % 4 == 0 {
            let n = rng.below(512);
            input.extend((0..n).map(|_| rng.next() as u8));
        } else {
            let seed = seeds[rng.below(seeds.len())];
            input.extend(mutate(&mut rng, seed.as_bytes()));
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
        input.extend_from_slice(s.as_bytes());
        let (events, err) = decode(&input);
        assert!(err.is_none() || s.contains("malformed"), "{name}: {err:?}");
        let _ = fuzzing::assemble(&events);
    }
    println!("{name}: {cases} cases, {accepted} accepted");
}

macro_rules! fx {
    ($p:literal) => {
        include_str!(concat!("fixtures/", $p))
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
