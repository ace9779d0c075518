//! Linear framing without a clock (issue 35, finding 10): the bytes allocated to read a
//! streamed response grow with its size, not with its size times its number of lines. The
//! earlier framing (eventsource-stream) copied the rest of its buffer after every line: a
//! 0.5 MB body of 8 000 events cost it hundreds of MB of copies.
//!
//! One test in this binary, on a current-thread runtime: the allocator's counts are
//! process-wide, so nothing else may run meanwhile.
#![cfg(all(feature = "openai", feature = "test-util"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::{Message, request::ModelRequest};
use rein_models::conformance::{FixtureResponse, FixtureServer};
use rein_models::futures::StreamExt as _;
use rein_models::{Model as _, OpenAiModel};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

#[test]
fn many_events_cost_memory_linear_in_the_body() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = FixtureServer::start().await.unwrap();
        let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
        let mut body = event.repeat(8000);
        body.push_str(
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
             data: [DONE]\n\n",
        );
        let size = body.len();
        server.push(FixtureResponse::chunks(
            "text/event-stream",
            [body.into_bytes()],
        ));
        let model = OpenAiModel::builder("m")
            .base_url(format!("{}/v1", server.base_url()))
            .build()
            .unwrap();
        let region = Region::new(GLOBAL);
        let mut stream = model
            .stream(ModelRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap();
        let mut events = 0;
        while let Some(event) = stream.next().await {
            event.unwrap();
            events += 1;
        }
        let allocated = region.change().bytes_allocated;
        assert!(events > 8000, "{events}");
        // Per event: its JSON parsed, a text delta, the event queue; about 10 bytes of
        // allocation per byte of body here, never the body's size per line.
        assert!(
            allocated < 40 * size,
            "{allocated} bytes allocated to read a {size}-byte body"
        );
        println!("{allocated} bytes allocated for a {size}-byte body");
    });
}
