//! Decoder entry points for the fuzz targets (`fuzz/`) and the hostile-input property tests:
//! raw body bytes → the provider's wire decoder → [`StreamEvent`]s → [`StreamAssembler`], with
//! no HTTP. Not part of Rein's API.
//!
//! The first input byte picks the chunk size (1..=64) the rest is cut into, so the fuzzer also
//! explores chunk boundaries inside lines, events, frames and UTF-8 sequences.

#[cfg(any(
    feature = "openai",
    feature = "anthropic",
    feature = "gemini",
    feature = "ollama",
    feature = "bedrock"
))]
use rein_core::ModelError;
use rein_core::stream::{StreamAssembler, StreamEvent};

/// Splits fuzz input into (chunk size, body).
#[cfg(any(
    feature = "openai",
    feature = "anthropic",
    feature = "gemini",
    feature = "ollama",
    feature = "bedrock"
))]
fn split(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (usize::from(*first % 64) + 1, rest),
        None => (1, data),
    }
}

/// Feeds `events` to a [`StreamAssembler`] (stopping at its first error) and finishes it.
/// Returns whether a response was assembled.
pub fn assemble(events: &[StreamEvent]) -> bool {
    let mut a = StreamAssembler::new();
    for e in events {
        if a.push(e.clone()).is_err() {
            return false;
        }
    }
    a.finish().is_ok()
}

/// Runs the Ollama NDJSON decoder over `data` (see the module docs for the chunking).
#[cfg(feature = "ollama")]
pub fn ollama_ndjson(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    let (size, body) = split(data);
    crate::http::decode_body_chunks(crate::ollama::NdjsonDecoder::default(), body.chunks(size))
}

#[cfg(any(feature = "openai", feature = "anthropic", feature = "gemini"))]
fn sse<D: crate::http::SseDecoder>(
    decoder: D,
    data: &[u8],
) -> (Vec<StreamEvent>, Option<ModelError>) {
    let (size, body) = split(data);
    let (events, err, _) = crate::http::decode_sse_chunks(
        decoder,
        crate::http::StreamLimits::default(),
        body.chunks(size),
    );
    (events, err)
}

/// Runs the OpenAI Chat Completions SSE decoder over `data`.
#[cfg(feature = "openai")]
pub fn openai_sse(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    sse(crate::openai::ChatDecoder::default(), data)
}

/// Runs the OpenAI Responses SSE decoder over `data`.
#[cfg(feature = "openai-responses")]
pub fn openai_responses_sse(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    sse(
        crate::openai_responses::ResponsesDecoder::new("openai-responses@fuzz:1".into()),
        data,
    )
}

/// Runs the Gemini `streamGenerateContent` SSE decoder over `data`.
#[cfg(feature = "gemini")]
pub fn gemini_sse(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    sse(
        crate::gemini::GeminiDecoder::new("gemini@fuzz:1".into()),
        data,
    )
}

/// Runs the Anthropic Messages SSE decoder over `data`.
#[cfg(feature = "anthropic")]
pub fn anthropic_sse(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    sse(crate::anthropic::MessagesDecoder::default(), data)
}

/// Runs the Bedrock event-stream decoder over `data`: raw bytes, framing included (see the
/// module docs for the chunking).
#[cfg(feature = "bedrock")]
pub fn bedrock_eventstream(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    let (size, body) = split(data);
    crate::http::decode_body_chunks(
        crate::bedrock::EventStreamDecoder::default(),
        body.chunks(size),
    )
}

/// Runs the Bedrock decoder over valid frames made from text lines (`<event-type> <payload>`,
/// `!<exception-type> <payload>`, `?<error-code> <message>`): reaches the event decoding behind
/// the CRC checks, which random bytes seldom pass.
#[cfg(feature = "bedrock")]
pub fn bedrock_event_lines(data: &[u8]) -> (Vec<StreamEvent>, Option<ModelError>) {
    let (size, lines) = split(data);
    let body = crate::bedrock::frames::encode_lines(lines);
    crate::http::decode_body_chunks(
        crate::bedrock::EventStreamDecoder::default(),
        body.chunks(size),
    )
}

/// Encodes a JSON list of Bedrock stream messages to event-stream frames, one `Vec` per frame,
/// with `aws-smithy-eventstream`'s writer: `{"event": type, "payload": {..}}`,
/// `{"exception": type, "payload": {"message": ..}}`, `{"error": code, "message": ..}`;
/// `"payload_raw"` for a payload that is not JSON, `"headers"` to set the headers by hand.
#[cfg(feature = "bedrock")]
pub fn bedrock_frames(events_json: &str) -> Result<Vec<Vec<u8>>, String> {
    crate::bedrock::frames::encode_json(events_json)
}
