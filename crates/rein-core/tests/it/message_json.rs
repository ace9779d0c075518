//! The message JSON is exactly the Bedrock-Converse shape (SPEC §1): every block kind
//! round-trips byte-for-byte against a checked-in snapshot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::{
    ContentBlock, Error, Message, Role, ToolResult, ToolUse,
    message::{
        DocumentBlock, ImageBlock, InterruptResponse, MediaSource, ReasoningContent, ReasoningText,
        ToolResultContent, ToolResultStatus,
    },
};
use serde_json::json;

fn all_blocks() -> Vec<Message> {
    vec![
        Message::new(
            Role::User,
            vec![
                ContentBlock::Text("Describe this.".into()),
                ContentBlock::Image(Box::new(ImageBlock {
                    format: "png".into(),
                    source: MediaSource::Bytes(vec![0x89, b'P', b'N', b'G'].into()),
                })),
                ContentBlock::Document(Box::new(DocumentBlock {
                    format: "txt".into(),
                    name: "notes".into(),
                    source: MediaSource::Bytes(b"hello".to_vec().into()),
                })),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                    ReasoningText::new("Need a tool.", Some("sig==".into())),
                ))),
                ContentBlock::ReasoningContent(Box::new(ReasoningContent::RedactedContent(
                    vec![1, 2, 3].into(),
                ))),
                ContentBlock::ToolUse(Box::new(ToolUse::new(
                    "t1",
                    "lookup",
                    json!({"n": 2, "q": "x"}),
                ))),
            ],
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::ToolResult(Box::new(ToolResult {
                    tool_use_id: "t1".into(),
                    status: ToolResultStatus::Success,
                    content: vec![
                        ToolResultContent::Text("found".into()),
                        ToolResultContent::Json(json!({"hits": 1})),
                    ],
                })),
                ContentBlock::InterruptResponse(Box::new(InterruptResponse::new("v1:x", "yes"))),
            ],
        ),
    ]
}

const SNAPSHOT: &str = r#"[{"role":"user","content":[{"text":"Describe this."},{"image":{"format":"png","source":{"bytes":"iVBORw=="}}},{"document":{"format":"txt","name":"notes","source":{"bytes":"aGVsbG8="}}}]},{"role":"assistant","content":[{"reasoningContent":{"reasoningText":{"text":"Need a tool.","signature":"sig=="}}},{"reasoningContent":{"redactedContent":"AQID"}},{"toolUse":{"toolUseId":"t1","name":"lookup","input":{"n":2,"q":"x"}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"t1","status":"success","content":[{"text":"found"},{"json":{"hits":1}}]}},{"interruptResponse":{"interruptId":"v1:x","response":"yes"}}]}]"#;

#[test]
fn every_block_kind_matches_the_snapshot_and_round_trips() {
    let msgs = all_blocks();
    let json = serde_json::to_string(&msgs).unwrap();
    assert_eq!(json, SNAPSHOT);
    let back: Vec<Message> = serde_json::from_str(SNAPSHOT).unwrap();
    assert_eq!(back, msgs);
}

#[test]
fn messages_carry_no_id_in_json() {
    let m = Message::user("hi");
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(v, json!({"role": "user", "content": [{"text": "hi"}]}));
}

#[test]
fn unknown_block_kinds_and_bad_shapes_are_typed_errors() {
    for bad in [
        r#"{"role":"user","content":[{"video":{"x":1}}]}"#,
        r#"{"role":"robot","content":[]}"#,
        r#"{"role":"user","content":[{"toolUse":{"name":"x"}}]}"#,
        r#"{"role":"user","content":[{"image":{"format":"png","source":{"bytes":"%%%"}}}]}"#,
        r#"not json"#,
    ] {
        assert!(
            matches!(Message::from_json(bad), Err(Error::InvalidMessage(_))),
            "{bad}"
        );
    }
}

#[test]
fn error_status_round_trips() {
    let r = ToolResult::error("t", "boom");
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(
        v,
        json!({"toolUseId": "t", "status": "error", "content": [{"text": "boom"}]})
    );
}
