//! Every store keeps a session's approval record with it and lists the sessions with pending
//! interrupts from an index, a page at a time (issue 38, items 3 and 5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_agent::PausedRun;
use rein_core::{Message, id::MessageId, interrupt::Interrupt};
use rein_sessions::{
    ApprovalOutcome, ApprovalRecord, FileSessionStore, SessionStore, SessionWrite, StoredMessage,
};
use serde_json::json;

fn paused(assistant: &StoredMessage) -> PausedRun {
    serde_json::from_value(json!({
        "schema_version": 1,
        "interrupts": [Interrupt::new("v1:before_tool_call:t1:x", "approval", "Refund 250?")
            .with_fingerprint("fp-1").with_tool_use_id("t1")],
        "assistant_message_id": assistant.id,
        "assistant_message": assistant.message,
        "invocation_state": {"principal": "bob"},
    }))
    .unwrap()
}

fn pause() -> Vec<SessionWrite> {
    let assistant = StoredMessage::new(MessageId::new(), Message::assistant("refunding"));
    vec![
        SessionWrite::AppendMessage(assistant.clone()),
        SessionWrite::SetPendingInterrupts(Some(Box::new(paused(&assistant)))),
    ]
}

fn record(outcome: ApprovalOutcome) -> ApprovalRecord {
    let mut r = ApprovalRecord::new(outcome, "refund-approval");
    r.interrupt_id = Some("v1:before_tool_call:t1:x".into());
    r.tool_name = Some("refund".into());
    r.asked = json!({"amount": 250});
    r.requester = Some("bob".into());
    r.asked_at = Some(1_000);
    if outcome == ApprovalOutcome::Approved {
        r.approver = Some("alice".into());
        r.claimed_approver = Some("ceo".into());
        r.edit = Some(json!({"amount": 90}));
        r.answered_at = Some(2_000);
    }
    r
}

#[tokio::test]
async fn approval_records_are_stored_with_the_session_in_every_store() {
    let dir = TempDir::new("approvals");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("records");
        let mut writes = pause();
        writes.push(SessionWrite::AppendApprovals(vec![record(
            ApprovalOutcome::Asked,
        )]));
        store.write(&id, 0, writes).await.unwrap();
        let answer = vec![
            SessionWrite::SetPendingInterrupts(None),
            SessionWrite::AppendApprovals(vec![record(ApprovalOutcome::Approved)]),
        ];
        store.write(&id, 1, answer).await.unwrap();
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(
            s.approvals,
            vec![
                record(ApprovalOutcome::Asked),
                record(ApprovalOutcome::Approved)
            ],
            "{name}"
        );
        // The original input stays beside the edit.
        assert_eq!(s.approvals[1].asked, json!({"amount": 250}), "{name}");
        store.delete(&id).await.unwrap();
    }
}

#[tokio::test]
async fn every_store_lists_paused_sessions_a_page_at_a_time() {
    let dir = TempDir::new("pending");
    for (name, store, _) in stores(&dir).await {
        let prefix = session_id("inbox");
        let id = |s: &str| format!("{prefix}-{s}");
        for s in ["a", "b", "c"] {
            store.write(&id(s), 0, pause()).await.unwrap();
        }
        let plain = vec![SessionWrite::AppendMessage(StoredMessage::new(
            MessageId::new(),
            Message::user("hi"),
        ))];
        store.write(&id("ab"), 0, plain).await.unwrap();
        // Other tests share the PostgreSQL database: only this test's ids are looked at.
        let mine = |ids: Vec<String>| -> Vec<String> {
            ids.into_iter().filter(|i| i.starts_with(&prefix)).collect()
        };
        let first = store.pending_sessions(Some(&prefix), 2).await.unwrap();
        assert_eq!(first, vec![id("a"), id("b")], "{name}");
        let next = mine(store.pending_sessions(Some(&id("b")), 2).await.unwrap());
        assert_eq!(next, vec![id("c")], "{name}");
        // Answered: out of the list; deleted: out of the list.
        store
            .write(&id("a"), 1, vec![SessionWrite::SetPendingInterrupts(None)])
            .await
            .unwrap();
        store.delete(&id("b")).await.unwrap();
        let left = mine(store.pending_sessions(Some(&prefix), 10).await.unwrap());
        assert_eq!(left, vec![id("c")], "{name}");
        for s in ["a", "c", "ab"] {
            store.delete(&id(s)).await.unwrap();
        }
    }
}

/// Sessions a release without the index wrote: the file store's first listing indexes them.
#[tokio::test]
async fn the_file_store_indexes_sessions_written_before_its_index() {
    let dir = TempDir::new("pending-legacy");
    let store = FileSessionStore::new(dir.path().join("files"));
    store.write("old-paused", 0, pause()).await.unwrap();
    std::fs::remove_dir_all(dir.path().join("files/.pending")).unwrap();
    assert_eq!(
        store.pending_sessions(None, 10).await.unwrap(),
        vec!["old-paused".to_owned()]
    );
}

/// The schema version of a stored JSON file.
fn schema_in(path: &std::path::Path) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["schema_version"].as_u64().unwrap()
}

/// Issue 38 (file-store compatibility): a log entry appending approval records, and a
/// snapshot holding some, are marked schema version 2 — release 0.1 (which reads 1) refuses
/// them as written by a newer release instead of reading a corrupt entry or a session without
/// its record — while a session without approval records stays at version 1, readable by it.
#[tokio::test]
async fn the_file_store_marks_records_with_approvals_as_the_newer_schema() {
    let dir = TempDir::new("approvals-schema");
    let root = dir.path().join("files");
    let store = FileSessionStore::new(&root).compact_after(3);
    let with = session_id("with");
    let without = session_id("without");
    for id in [&with, &without] {
        store.write(id, 0, pause()).await.unwrap();
    }
    let answer = vec![
        SessionWrite::SetPendingInterrupts(None),
        SessionWrite::AppendApprovals(vec![record(ApprovalOutcome::Approved)]),
    ];
    store.write(&with, 1, answer).await.unwrap();
    store
        .write(&without, 1, vec![SessionWrite::SetPendingInterrupts(None)])
        .await
        .unwrap();
    let log = |id: &str, v: u64| root.join(id).join("log").join(format!("{v:020}.json"));
    assert_eq!(schema_in(&log(&with, 1)), 1);
    assert_eq!(schema_in(&log(&with, 2)), 2);
    assert_eq!(schema_in(&log(&without, 2)), 1);

    // Compacted: the snapshot of a session with records is 2, of one without 1.
    for id in [&with, &without] {
        let hello = StoredMessage::new(MessageId::new(), Message::user("hello"));
        store
            .write(id, 2, vec![SessionWrite::AppendMessage(hello)])
            .await
            .unwrap();
    }
    let snapshot = |id: &str| {
        root.join(id)
            .join("snapshots")
            .join(format!("{:020}.json", 3))
    };
    assert_eq!(schema_in(&snapshot(&with)), 2);
    assert_eq!(schema_in(&snapshot(&without)), 1);
    // Both load here, the record intact.
    let loaded = store.load(&with).await.unwrap().unwrap();
    assert_eq!(loaded.approvals, vec![record(ApprovalOutcome::Approved)]);
    assert!(
        store
            .load(&without)
            .await
            .unwrap()
            .unwrap()
            .approvals
            .is_empty()
    );
}

/// The SQL stores mark a session's row the same way: 2 from its first write with approval
/// records on (never lowered), 1 before.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_sqlite_store_marks_sessions_with_approvals_as_the_newer_schema() {
    let dir = TempDir::new("approvals-sqlite-schema");
    let path = dir.path().join("sessions.db");
    let store = rein_sessions::SqliteSessionStore::open(&path)
        .await
        .unwrap();
    let id = session_id("sql");
    store.write(&id, 0, pause()).await.unwrap();
    let schema = || {
        let db = rusqlite::Connection::open(&path).unwrap();
        db.query_row(
            "SELECT schema_version FROM rein_sessions WHERE session_id = ?1",
            [&id],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
    };
    assert_eq!(schema(), 1);
    let answer = vec![SessionWrite::AppendApprovals(vec![record(
        ApprovalOutcome::Approved,
    )])];
    store.write(&id, 1, answer).await.unwrap();
    assert_eq!(schema(), 2);
    store
        .write(&id, 2, vec![SessionWrite::SetPendingInterrupts(None)])
        .await
        .unwrap();
    assert_eq!(schema(), 2);
    assert_eq!(store.load(&id).await.unwrap().unwrap().approvals.len(), 1);
}
