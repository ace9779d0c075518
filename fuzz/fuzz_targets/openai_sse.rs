//! Arbitrary body bytes (first byte: chunk size) through the openai_sse decoder, then the
//! `StreamAssembler`: never panics. (An accepted body may still fail assembly with a typed
//! error: the SSE decoders pass on a delta whose kind does not match the open block, see
//! `hostile_streams.rs`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_models::fuzzing;

fuzz_target!(|data: &[u8]| {
    let (events, _err) = fuzzing::openai_sse(data);
    let _ = fuzzing::assemble(&events);
});
