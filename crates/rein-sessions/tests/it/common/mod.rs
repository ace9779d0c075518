//! Helpers shared by the session tests.
#![allow(unreachable_pub)]

use std::path::PathBuf;

use rein_core::{
    ContentBlock, Message, Role, ToolResult, ToolUse,
    message::{
        Bytes, DocumentBlock, ImageBlock, InterruptResponse, MediaSource, ReasoningContent,
        ReasoningText, ToolResultContent, ToolResultStatus,
    },
};
use rein_sessions::{FileSessionStore, MemorySessionStore, SharedSessionStore};
use serde_json::json;

/// A fresh directory under the system temp dir (removed on drop).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "rein-sessions-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The PostgreSQL test database: `REIN_TEST_POSTGRES`. Unset outside CI: the test is skipped
/// with a loud message; unset in CI (`CI` set): the test fails.
pub fn postgres_url() -> Option<String> {
    match std::env::var("REIN_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "REIN_TEST_POSTGRES is unset in CI: .ci/peers-postgres.sh must start PostgreSQL"
            );
            eprintln!(
                "\n*** SKIPPED: REIN_TEST_POSTGRES is unset, PostgreSQL session-store test not run \
                 (run `bash .ci/peers-postgres.sh target/peers && source target/peers/env`) ***\n"
            );
            None
        }
    }
}

/// A unique session id.
pub fn session_id(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::new_v4().simple())
}

/// The stores to test, by name, with the spec the worker process understands.
pub async fn stores(dir: &TempDir) -> Vec<(&'static str, SharedSessionStore, Option<String>)> {
    #[allow(unused_mut)]
    let mut out = vec![
        (
            "memory",
            SharedSessionStore::new(MemorySessionStore::new()),
            None,
        ),
        (
            "file",
            SharedSessionStore::new(FileSessionStore::new(dir.path().join("files"))),
            Some(format!("file:{}", dir.path().join("files").display())),
        ),
    ];
    #[cfg(feature = "sqlite")]
    {
        let path = dir.path().join("sessions.db");
        out.push((
            "sqlite",
            SharedSessionStore::new(
                rein_sessions::SqliteSessionStore::open(&path)
                    .await
                    .unwrap(),
            ),
            Some(format!("sqlite:{}", path.display())),
        ));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = postgres_url() {
        out.push((
            "postgres",
            SharedSessionStore::new(
                rein_sessions::PostgresSessionStore::connect(&url, 2)
                    .await
                    .unwrap(),
            ),
            Some(format!("postgres:{url}")),
        ));
    }
    out
}

/// Messages holding every content-block kind.
pub fn every_block_kind() -> Vec<Message> {
    let png = Bytes(vec![0x89, b'P', b'N', b'G', 0, 1, 2, 255]);
    let pdf = Bytes(b"%PDF-1.7 \x00\xff".to_vec());
    let image = ImageBlock {
        format: "png".into(),
        source: MediaSource::Bytes(png),
    };
    let document = DocumentBlock {
        format: "pdf".into(),
        name: "report".into(),
        source: MediaSource::Bytes(pdf),
    };
    vec![
        Message::new(
            Role::User,
            vec![
                ContentBlock::Text("look at these — ünïcödé ✓".into()),
                ContentBlock::Image(Box::new(image.clone())),
                ContentBlock::Document(Box::new(document.clone())),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                    ReasoningText::new("thinking...", Some("sig-abc".into())),
                ))),
                ContentBlock::ReasoningContent(Box::new(ReasoningContent::RedactedContent(Bytes(
                    vec![1, 2, 3, 250],
                )))),
                ContentBlock::Text("I will call tools.".into()),
                ContentBlock::ToolUse(Box::new(ToolUse::new(
                    "t1",
                    "search",
                    json!({"q": "x", "n": 3, "nested": {"a": [1, null, true]}}),
                ))),
                ContentBlock::ToolUse(Box::new(ToolUse::new("t2", "render", json!({})))),
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
                        ToolResultContent::Json(json!({"hits": [1, 2]})),
                    ],
                })),
                ContentBlock::ToolResult(Box::new(ToolResult {
                    tool_use_id: "t2".into(),
                    status: ToolResultStatus::Error,
                    content: vec![
                        ToolResultContent::Image(image),
                        ToolResultContent::Document(document),
                    ],
                })),
            ],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::InterruptResponse(Box::new(
                InterruptResponse::new("v1:before_tool_call:t1:abc", json!({"approved": true})),
            ))],
        ),
    ]
}

/// A tool (`note`) that injects "also check the backups" through the interceptor in `slot`.
pub fn noting_tool(
    slot: std::sync::Arc<std::sync::Mutex<Option<rein_agent::TurnInterceptor>>>,
) -> rein_core::ToolHandle {
    rein_core::ToolHandle::from_sync_fn(
        "note",
        "Takes a note.",
        json!({"type": "object"}),
        move |_, _| {
            let i = slot.lock().unwrap().clone().unwrap();
            i.inject(Message::user("also check the backups")).unwrap();
            Ok(rein_core::tool::ToolOutput::text("noted"))
        },
    )
}
