//! Arbitrary bytes through the Bedrock event-stream decoder, then the `StreamAssembler`: never
//! panics; a stream the decoder accepts assembles. The first byte picks the chunk size (% 64)
//! and, by its top bit, the input form: raw body bytes (frame lengths, CRCs, headers), or text
//! lines `<event-type> <payload>` / `!<exception-type> <payload>` / `?<error-code> <message>`
//! encoded to valid frames, which reach the event decoding behind the CRC checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_models::fuzzing;

fuzz_target!(|data: &[u8]| {
    let lines = data.first().is_some_and(|b| b & 0x80 != 0);
    let (events, err) = if lines {
        fuzzing::bedrock_event_lines(data)
    } else {
        fuzzing::bedrock_eventstream(data)
    };
    let assembled = fuzzing::assemble(&events);
    assert!(
        err.is_some() || assembled,
        "accepted stream did not assemble"
    );
});
