//! A provider author depends on `rein-models` alone: the guide's Rust snippets (run as this
//! crate's doc tests) name only `rein_models::` paths, and every type a provider builds or
//! matches on is re-exported here.

use rein_models::{
    BlockDelta, BlockStart, BoxFuture, BuildError, ContentBlock, Error, MediaSource, Message,
    ModelError, ModelErrorKind, ModelRequest, ModelResponse, ModelStream, Role, StopReason,
    StreamEvent, StreamMetrics, ToolResultContent, ToolUse, Usage,
};

#[test]
fn the_providers_guide_names_no_other_rein_crate() {
    let guide = include_str!("../../../../docs/providers.md");
    let mut in_rust = false;
    for (n, line) in guide.lines().enumerate() {
        let fence = line.trim_start();
        if fence.starts_with("```") {
            in_rust = !in_rust && fence.starts_with("```rust");
            continue;
        }
        if in_rust {
            for other in ["rein_core", "futures_util", "futures_core", "rein::"] {
                assert!(
                    !line.contains(other),
                    "docs/providers.md:{}: a provider snippet names `{other}`: {line}",
                    n + 1
                );
            }
        }
    }
}

#[test]
fn provider_types_are_reexported() {
    // Each of these is named through `rein_models` only.
    let _: fn(Vec<Message>) -> ModelRequest = ModelRequest::new;
    let events: Vec<StreamEvent> = vec![
        StreamEvent::MessageStart {
            role: Role::Assistant,
        },
        StreamEvent::BlockStart(BlockStart::Text),
        StreamEvent::BlockDelta(BlockDelta::Text("hi".into())),
        StreamEvent::BlockStop,
        StreamEvent::MessageStop {
            stop_reason: StopReason::EndTurn,
        },
        StreamEvent::Metadata {
            usage: Usage::new(1, 1),
            metrics: StreamMetrics::default(),
        },
    ];
    let mut a = rein_models::StreamAssembler::new();
    for e in events {
        a.push(e).unwrap();
    }
    let response: ModelResponse = a.finish().unwrap();
    assert!(matches!(
        response.message.content.first(),
        Some(ContentBlock::Text(t)) if t == "hi"
    ));
    let e = ModelError::throttled("slow down");
    assert_eq!(e.kind(), ModelErrorKind::Throttled);
    let _: Option<&BuildError> = None;
    let _: Option<Error> = None;
    let _: Option<ToolResultContent> = None;
    let _: Option<ToolUse> = None;
    let _: Option<MediaSource> = None;
    let _: Option<BoxFuture<'static, ModelStream>> = None;
}
