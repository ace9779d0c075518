//! Arbitrary body bytes (first byte: chunk size) through the gemini_sse decoder, then the
//! `StreamAssembler`: never panics; a body the decoder accepts assembles.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_models::fuzzing;

fuzz_target!(|data: &[u8]| {
    let (events, err) = fuzzing::gemini_sse(data);
    let assembled = fuzzing::assemble(&events);
    assert!(
        err.is_some() || assembled,
        "accepted stream did not assemble"
    );
});
