//! `Message` from arbitrary bytes: never panics; what parses round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = serde_json::from_slice::<rein_core::Message>(data) {
        let json = serde_json::to_vec(&m).expect("a parsed message serializes");
        let back: rein_core::Message =
            serde_json::from_slice(&json).expect("a serialized message parses");
        assert_eq!(back.content, m.content);
    }
});
