//! The approval record and the inbox (issue 38, items 3 and 5): every answer is stored with the
//! thread — who, when, what was asked (the original input), the answer, the edit — and served
//! on `GET /threads/{id}`; `GET /approvals` lists what waits across the threads a principal
//! may answer, a page at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use rein_agui::{Principal, ThreadAction};
use rein_sessions::{
    ApprovalOutcome, MemorySessionStore, SessionError, SessionSnapshot, SessionStore, SessionWrite,
};
use serde_json::{Value, json};

use crate::common::{Models, events, request, run_input};
use crate::identity::{ALICE, BOB, ops, pending, start, tool_result};

async fn ask(addr: std::net::SocketAddr, thread: &str) -> Value {
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input(thread, Some("refund order 7"), None),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    events(&body).pop().unwrap()["outcome"]["interrupts"][0].clone()
}

async fn get(addr: std::net::SocketAddr, path: &str, who: &[(&str, &str)]) -> (u16, Value) {
    let (got, _, body) = request(addr, "GET", path, who, "").await;
    (got, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Issue 38, item 3: an edit that brings a refund under the threshold (so the handler lets it
/// through without asking again) still leaves an "approved with edit" record holding the
/// original input, the principal and the claimed name beside it.
#[tokio::test]
async fn an_edit_under_the_threshold_is_recorded_as_approved_with_the_original_input() {
    let store = MemorySessionStore::new();
    let server = start(ops(store.clone(), Models::default())).await;
    let addr = server.local_addr();
    let asked = ask(addr, "edit-1").await;
    let fingerprint = &asked["metadata"]["governance"]["actionFingerprint"];
    let resume = json!([{"interruptId": asked["id"], "status": "resolved",
        "payload": {"approved": true, "edit": {"amount": 90}, "note": "partial refund",
            "approvedActionFingerprint": fingerprint},
        "metadata": {"answeredBy": "the CEO"}}]);
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("edit-1", None, Some(resume)),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert_eq!(tool_result(&body), "refunded 90 for bob approved by alice");

    let stored = store.load("edit-1").await.unwrap().unwrap().approvals;
    let outcomes: Vec<_> = stored.iter().map(|r| r.outcome).collect();
    // Asked; approved with the edit; and the handler's own proceed on the edited input (it
    // is under the threshold now), with the reason it attached.
    assert_eq!(
        outcomes,
        [
            ApprovalOutcome::Asked,
            ApprovalOutcome::Approved,
            ApprovalOutcome::Proceeded
        ],
        "{stored:?}"
    );
    assert_eq!(stored[2].detail, Some(json!({"underThreshold": 90.0})));
    assert_eq!(stored[2].requester.as_deref(), Some("bob"));
    let answer = &stored[1];
    assert_eq!(answer.asked, json!({"amount": 250}));
    assert_eq!(answer.edit, Some(json!({"amount": 90})));
    assert_eq!(answer.note.as_deref(), Some("partial refund"));
    assert_eq!(answer.tool_name.as_deref(), Some("refund"));
    assert_eq!(answer.requester.as_deref(), Some("bob"));
    assert_eq!(answer.approver.as_deref(), Some("alice"));
    assert_eq!(answer.claimed_approver.as_deref(), Some("the CEO"));
    assert_eq!(answer.handler, "refund-approval");
    assert!(answer.asked_at.is_some() && answer.answered_at >= answer.asked_at);

    let (got, thread) = get(addr, "/threads/edit-1", &BOB).await;
    assert_eq!(got, 200);
    let served = &thread["approvals"][1];
    assert_eq!(served["outcome"], "approved", "{thread}");
    assert_eq!(served["asked"], json!({"amount": 250}));
    assert_eq!(served["edit"], json!({"amount": 90}));
    assert_eq!(served["approver"], "alice");
    assert_eq!(served["claimedApprover"], "the CEO");
    server.shutdown().await.unwrap();
}

/// A memory store that keeps the list of every write it applied, in order.
#[derive(Clone, Default)]
struct WriteLog {
    store: MemorySessionStore,
    writes: Arc<Mutex<Vec<Vec<SessionWrite>>>>,
}

impl SessionStore for WriteLog {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        self.store.load(session_id).await
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        let version = self
            .store
            .write(session_id, expected_version, writes.clone())
            .await?;
        self.writes.lock().unwrap().push(writes);
        Ok(version)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        self.store.delete(session_id).await
    }
}

impl WriteLog {
    /// The outcomes of the approval records a write appends.
    fn recorded(write: &[SessionWrite]) -> Vec<ApprovalOutcome> {
        write
            .iter()
            .filter_map(|w| match w {
                SessionWrite::AppendApprovals(r) => Some(r.iter().map(|r| r.outcome)),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The write that sets (`true`) or clears the pending interrupts.
    fn pause_write(&self, set: bool) -> Vec<SessionWrite> {
        let writes = self.writes.lock().unwrap();
        writes
            .iter()
            .find(|w| {
                w.iter().any(
                    |w| matches!(w, SessionWrite::SetPendingInterrupts(p) if p.is_some() == set),
                )
            })
            .cloned()
            .unwrap_or_else(|| panic!("no write sets the pause to {set}: {writes:?}"))
    }
}

/// Issue 38 (records in the run's own write): the question is recorded in the write that
/// stores the pause, the answer in the write that consumes it, and no write carries records
/// alone — a process that dies after the run's write keeps its records (there is no second
/// write to lose).
#[tokio::test]
async fn records_are_in_the_runs_own_writes() {
    let store = WriteLog::default();
    let server = start(ops(store.clone(), Models::default())).await;
    let addr = server.local_addr();
    let asked = ask(addr, "atomic-1").await;
    assert_eq!(
        WriteLog::recorded(&store.pause_write(true)),
        [ApprovalOutcome::Asked]
    );
    let resume = json!([{"interruptId": asked["id"], "status": "resolved",
        "payload": {"approved": true,
            "approvedActionFingerprint": asked["metadata"]["governance"]["actionFingerprint"]}}]);
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("atomic-1", None, Some(resume)),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert_eq!(tool_result(&body), "refunded 250 for bob approved by alice");
    assert_eq!(
        WriteLog::recorded(&store.pause_write(false)),
        [ApprovalOutcome::Approved]
    );
    let writes = store.writes.lock().unwrap().clone();
    let alone = writes.iter().filter(|w| {
        w.iter()
            .all(|w| matches!(w, SessionWrite::AppendApprovals(_)))
    });
    assert_eq!(alone.count(), 0, "{writes:?}");
    let stored = store.load("atomic-1").await.unwrap().unwrap().approvals;
    assert_eq!(stored[1].asked, json!({"amount": 250}), "{stored:?}");
    server.shutdown().await.unwrap();
}

/// A rejection is recorded with its reason.
#[tokio::test]
async fn a_rejection_is_recorded_with_its_reason() {
    let store = MemorySessionStore::new();
    let server = start(ops(store.clone(), Models::default())).await;
    let addr = server.local_addr();
    let asked = ask(addr, "reject-1").await;
    let resume = json!([{"interruptId": asked["id"], "status": "resolved",
        "payload": {"approved": false, "note": "over the limit",
            "approvedActionFingerprint": asked["metadata"]["governance"]["actionFingerprint"]}}]);
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("reject-1", None, Some(resume)),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    let stored = store.load("reject-1").await.unwrap().unwrap().approvals;
    let answer = stored.last().unwrap();
    assert_eq!(answer.outcome, ApprovalOutcome::Rejected);
    assert_eq!(answer.note.as_deref(), Some("over the limit"));
    assert_eq!(answer.asked, json!({"amount": 250}));
    assert!(answer.edit.is_none());
    server.shutdown().await.unwrap();
}

/// The inbox: 401 without a token; a page of what waits with the wire contract's fields;
/// threads the principal may not answer are not listed; the page size is capped and a cursor
/// pages on; a cross-site request is refused like on the other routes.
#[tokio::test]
async fn the_inbox_lists_what_the_principal_may_answer_a_page_at_a_time() {
    let store = MemorySessionStore::new();
    // bob may answer only threads named `shared-*`; alice any.
    let server = ops(store.clone(), Models::default()).authorize(
        |who: &Principal, thread: &str, action: ThreadAction| {
            who.id() == "alice" || action != ThreadAction::Resume || thread.starts_with("shared-")
        },
    );
    let server = start(server).await;
    let addr = server.local_addr();
    for thread in ["shared-1", "shared-2", "secret-1"] {
        ask(addr, thread).await;
    }
    let (got, _) = get(addr, "/approvals", &[]).await;
    assert_eq!(got, 401);

    let (got, page) = get(addr, "/approvals", &ALICE).await;
    assert_eq!(got, 200, "{page}");
    let threads: Vec<&str> = page["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(threads, ["secret-1", "shared-1", "shared-2"]);
    assert_eq!(page["next"], Value::Null);
    let first = &page["approvals"][0];
    let pending_id = pending(addr, "secret-1").await[0]["id"].clone();
    assert_eq!(first["interruptId"], pending_id);
    assert_eq!(first["toolName"], "refund");
    assert_eq!(first["input"], json!({"amount": 250}));
    assert_eq!(first["reason"], "Refund 250 requested by bob?");
    assert_eq!(first["requester"], "bob");
    assert!(first["askedAt"].as_u64().is_some(), "{first}");
    assert_eq!(first["link"], "./?thread=secret-1");

    let (_, page) = get(addr, "/approvals", &BOB).await;
    let threads: Vec<&str> = page["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["threadId"].as_str().unwrap())
        .collect();
    assert_eq!(threads, ["shared-1", "shared-2"], "{page}");

    let (_, page) = get(addr, "/approvals?limit=1", &ALICE).await;
    assert_eq!(page["approvals"].as_array().unwrap().len(), 1);
    assert_eq!(page["next"], "secret-1");
    let (_, page) = get(addr, "/approvals?limit=2&after=secret-1", &ALICE).await;
    assert_eq!(page["approvals"][0]["threadId"], "shared-1");
    assert_eq!(page["next"], "shared-2");
    for bad in ["limit=0", "limit=101", "limit=x", "after=..%2F", "other=1"] {
        let (got, body) = get(addr, &format!("/approvals?{bad}"), &ALICE).await;
        assert_eq!(
            (got, body["code"].as_str()),
            (400, Some("INVALID_QUERY")),
            "{bad}"
        );
    }
    let cross_site = [ALICE[0], ("Origin", "http://evil.example")];
    let (got, body) = get(addr, "/approvals", &cross_site).await;
    assert_eq!(got, 403, "{body}");
    assert_eq!(body["code"], "ORIGIN_NOT_ALLOWED");
    server.shutdown().await.unwrap();
}

/// Issue 38 (a refusal is recorded too): bob's own approval under four-eyes and an answer
/// naming another action's fingerprint are refused; each refusal is in the durable record —
/// who tried (the principal, the claimed name beside it), when, what they answered, why —
/// and the question still waits; alice's approval then goes through and is recorded.
#[tokio::test]
async fn refused_answers_are_recorded_with_who_and_why() {
    let store = MemorySessionStore::new();
    let server = start(ops(store.clone(), Models::default()).four_eyes(true)).await;
    let addr = server.local_addr();
    let asked = ask(addr, "refused-1").await;
    let fingerprint = &asked["metadata"]["governance"]["actionFingerprint"];
    let answer = |fingerprint: &Value| {
        json!([{"interruptId": asked["id"], "status": "resolved",
            "payload": {"approved": true, "edit": {"amount": 200}, "note": "mine",
                "approvedActionFingerprint": fingerprint},
            "metadata": {"answeredBy": "the CEO"}}])
    };
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input("refused-1", None, Some(answer(fingerprint))),
    )
    .await;
    assert_eq!(got, 403, "{body}");
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("refused-1", None, Some(answer(&json!("sha256:another")))),
    )
    .await;
    assert_eq!(got, 409, "{body}");

    let stored = store.load("refused-1").await.unwrap().unwrap();
    assert!(
        stored.pending_interrupts.is_some(),
        "the question still waits"
    );
    let refused: Vec<_> = stored
        .approvals
        .iter()
        .filter(|r| r.outcome == ApprovalOutcome::Refused)
        .collect();
    assert_eq!(refused.len(), 2, "{:?}", stored.approvals);
    let own = refused[0];
    assert_eq!(own.approver.as_deref(), Some("bob"));
    assert_eq!(own.claimed_approver.as_deref(), Some("the CEO"));
    assert_eq!(own.requester.as_deref(), Some("bob"));
    assert_eq!(own.edit, Some(json!({"amount": 200})));
    assert_eq!(own.asked, json!({"amount": 250}));
    assert_eq!(own.tool_name.as_deref(), Some("refund"));
    assert!(
        own.refusal.as_deref().unwrap().contains("four-eyes"),
        "{own:?}"
    );
    assert!(own.answered_at.is_some());
    assert_eq!(refused[1].approver.as_deref(), Some("alice"));
    assert!(refused[1].refusal.is_some(), "{:?}", refused[1]);

    let (got, thread) = get(addr, "/threads/refused-1", &ALICE).await;
    assert_eq!(got, 200);
    let served = &thread["approvals"][1];
    assert_eq!(served["outcome"], "refused", "{thread}");
    assert_eq!(served["approver"], "bob");
    assert!(served["refusal"].as_str().unwrap().contains("four-eyes"));

    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("refused-1", None, Some(answer(fingerprint))),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    let stored = store.load("refused-1").await.unwrap().unwrap().approvals;
    let last = stored.last().unwrap();
    assert_eq!(last.outcome, ApprovalOutcome::Approved, "{stored:?}");
    assert_eq!(last.approver.as_deref(), Some("alice"));
    server.shutdown().await.unwrap();
}
