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
