//! Arbitrary bytes as the body of an AG-UI run request (`POST /agent`): the server's decoder and
//! checks (JSON, thread id, run id, the new user message), then — for a resume — the resume
//! rules against fixed pending interrupts. Never panics: a refusal is a 4xx with a code, an
//! accepted resume answers every pending interrupt once with a valid answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_agui::fuzzing;

fuzz_target!(|data: &[u8]| {
    let _ = fuzzing::run_input(data);
});
