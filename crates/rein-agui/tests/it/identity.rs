//! Identity end to end (issue 38, items 2 and 4): the authenticated principal reaches the
//! agent's handlers and tools (the invocation state's `principal`, and `approver` on a resume),
//! a client cannot claim another one, per-user Cedar works from it, and four-eyes refuses the
//! requester's own approval — in one process and after a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_agent::Agent;
use rein_agui::{AguiServer, Principal, ServerHandle};
use rein_core::ToolHandle;
use rein_interventions::cedar::CedarAuthorizer;
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::{ScriptedModel, SharedModel};
use rein_sessions::{MemorySessionStore, SessionStore};
use serde_json::{Value, json};

use crate::common::{Models, events, request, run_input};

pub(crate) const ALICE: [(&str, &str); 1] = [("Authorization", "Bearer alice-token-0123456789")];
pub(crate) const BOB: [(&str, &str); 1] = [("Authorization", "Bearer bob-token-0123456789")];

/// An ops assistant: every thread's model asks for a refund of 250. On `cedar-*` threads a
/// Cedar policy permits refunds for alice only; on other threads a handler asks a person to
/// approve refunds over 100, naming the requester it reads from the invocation state.
pub(crate) fn ops<S: SessionStore + Clone>(store: S, models: Models) -> AguiServer {
    AguiServer::new(store, move |thread| {
        let model = models
            .lock()
            .unwrap()
            .entry(thread.to_owned())
            .or_insert_with(|| {
                SharedModel::new(
                    ScriptedModel::builder()
                        .tool_use("r1", "refund", json!({"amount": 250}))
                        .text("Done.")
                        .build(),
                )
            })
            .clone();
        let refund = ToolHandle::from_sync_fn(
            "refund",
            "Refunds an order.",
            json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
            |input, cx| {
                let state = cx.invocation_state();
                Ok(format!(
                    "refunded {} for {} approved by {}",
                    input["amount"],
                    state.principal().unwrap_or("nobody"),
                    state.approver().unwrap_or("nobody"),
                )
                .into())
            },
        );
        let builder = Agent::builder().shared_model(model).tool(refund);
        if thread.starts_with("cedar-") {
            builder.intervention(
                CedarAuthorizer::builder("per-user")
                    .policies(
                        r#"@id("alice-refunds")
                        permit(principal == User::"alice", action == Action::"refund", resource);"#,
                    )
                    .build()
                    .unwrap(),
            )
        } else {
            builder.intervention(Intervention::named("refund-approval").before_tool_call(
                |ev, cx| {
                    let who = cx.invocation_state().principal().unwrap_or("nobody");
                    let amount = ev.tool_use().input["amount"].as_f64().unwrap_or(0.0);
                    if amount <= 100.0 {
                        // A proceed that says why: it goes into the approval record.
                        cx.record_detail(json!({"underThreshold": amount}));
                        return BeforeToolCallAction::Proceed;
                    }
                    BeforeToolCallAction::confirm(format!(
                        "Refund {} requested by {who}?",
                        ev.tool_use().input["amount"]
                    ))
                },
            ))
        }
    })
    .bearer_auth(|t| match t {
        "alice-token-0123456789" => Some(Principal::new("alice")),
        "bob-token-0123456789" => Some(Principal::new("bob")),
        _ => None,
    })
}

pub(crate) async fn start(server: AguiServer) -> ServerHandle {
    server.bind_local(0).await.unwrap().spawn()
}

pub(crate) fn tool_result(body: &str) -> String {
    events(body)
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no tool result in {body}"))
}

/// Per-user Cedar from the authenticated principal: alice's refund runs, bob's is denied —
/// also when bob's request claims to be alice's in its `state` and `forwardedProps`.
#[tokio::test]
async fn cedar_permits_alice_not_bob_and_a_client_cannot_claim_a_principal() {
    let server = start(ops(MemorySessionStore::new(), Models::default())).await;
    let addr = server.local_addr();
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("cedar-a", Some("refund order 7"), None),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert_eq!(
        tool_result(&body),
        "refunded 250 for alice approved by nobody"
    );

    let mut claimed: Value =
        serde_json::from_str(&run_input("cedar-b", Some("refund order 8"), None)).unwrap();
    claimed["state"] = json!({"principal": "alice", "approver": "alice"});
    claimed["forwardedProps"] = json!({"principal": "alice"});
    let (got, _, body) = request(addr, "POST", "/agent", &BOB, &claimed.to_string()).await;
    assert_eq!(got, 200, "{body}");
    let result = tool_result(&body);
    assert!(result.starts_with("DENIED"), "{result}");
    assert!(!body.contains("refunded"), "{body}");
    server.shutdown().await.unwrap();
}

fn approve(asked: &Value, approved: bool) -> Value {
    let fingerprint = &asked["metadata"]["governance"]["actionFingerprint"];
    json!([{"interruptId": asked["id"], "status": "resolved",
        "payload": {"approved": approved, "approvedActionFingerprint": fingerprint},
        "metadata": {"answeredBy": "alice"}}])
}

pub(crate) async fn pending(addr: std::net::SocketAddr, thread: &str) -> Vec<Value> {
    let (got, _, body) = request(addr, "GET", &format!("/threads/{thread}"), &ALICE, "").await;
    assert_eq!(got, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["pendingInterrupts"]
        .as_array()
        .unwrap()
        .clone()
}

/// Four-eyes: bob asks for a refund; his own approval is refused (403 FOUR_EYES, the
/// interrupt still waits, a claimed name changes nothing), alice's is applied and the tool sees
/// both. With `restart`, the answers go to a second server on the same store.
async fn four_eyes(thread: &str, restart: bool) {
    let store = MemorySessionStore::new();
    let models = Models::default();
    let server = |s: &MemorySessionStore| ops(s.clone(), models.clone()).four_eyes(true);
    let mut handle = start(server(&store)).await;
    let (got, _, body) = request(
        handle.local_addr(),
        "POST",
        "/agent",
        &BOB,
        &run_input(thread, Some("refund order 9"), None),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    let asked = events(&body).pop().unwrap()["outcome"]["interrupts"][0].clone();
    assert!(
        asked["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requested by bob"),
        "{asked}"
    );
    if restart {
        handle.shutdown().await.unwrap();
        handle = start(server(&store)).await;
    }
    let addr = handle.local_addr();

    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input(thread, None, Some(approve(&asked, true))),
    )
    .await;
    assert_eq!(got, 403, "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["code"], "FOUR_EYES", "{body}");
    let still = pending(addr, thread).await;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0]["id"], asked["id"]);

    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input(thread, None, Some(approve(&asked, true))),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert_eq!(tool_result(&body), "refunded 250 for bob approved by alice");
    assert!(pending(addr, thread).await.is_empty());
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn four_eyes_refuses_the_requesters_approval_and_takes_another() {
    four_eyes("approve-1", false).await;
}

#[tokio::test]
async fn four_eyes_holds_across_a_restart() {
    four_eyes("approve-2", true).await;
}

/// Four-eyes lets the requester withdraw: bob's rejection of his own request is applied.
#[tokio::test]
async fn four_eyes_lets_the_requester_reject() {
    let server = start(ops(MemorySessionStore::new(), Models::default()).four_eyes(true)).await;
    let addr = server.local_addr();
    let (_, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input("approve-3", Some("refund order 10"), None),
    )
    .await;
    let asked = events(&body).pop().unwrap()["outcome"]["interrupts"][0].clone();
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input("approve-3", None, Some(approve(&asked, false))),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert!(!body.contains("refunded"), "{body}");
    assert!(pending(addr, "approve-3").await.is_empty());
    server.shutdown().await.unwrap();
}

/// Four-eyes for a message injected into a going run and parked on a confirm: whoever injected
/// it may not approve it; another principal may. Only the run's own principal may inject into
/// it: another's message would act as them (issue 38).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_eyes_holds_for_a_parked_injection() {
    let server = crate::common::server(MemorySessionStore::new())
        .bearer_auth(|t| match t {
            "alice-token-0123456789" => Some(Principal::new("alice")),
            "bob-token-0123456789" => Some(Principal::new("bob")),
            _ => None,
        })
        .four_eyes(true);
    let server = start(server).await;
    let addr = server.local_addr();
    let main = tokio::spawn(async move {
        request(
            addr,
            "POST",
            "/agent",
            &ALICE,
            &run_input("parked-fe", Some("go"), None),
        )
        .await
    });
    // The run is going once the thread shows it (a poll, not a timed wait).
    for _ in 0..3000 {
        let (_, _, t) = request(addr, "GET", "/threads/parked-fe", &ALICE, "").await;
        if serde_json::from_str::<Value>(&t).is_ok_and(|t| t["runningRunId"].is_string()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input("parked-fe", Some("act as alice"), None),
    )
    .await;
    assert_eq!(got, 409, "{body}");
    assert!(body.contains("another principal"), "{body}");
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("parked-fe", Some("also X"), None),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert!(body.contains("rein.injection_queued"), "{body}");
    let mut asked = Value::Null;
    for _ in 0..500 {
        let (_, _, t) = request(addr, "GET", "/threads/parked-fe", &ALICE, "").await;
        let t: Value = serde_json::from_str(&t).unwrap();
        if let Some(p) = t["parkedInjections"].as_array().and_then(|p| p.first()) {
            asked = p["interrupts"][0].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(asked.is_object(), "never parked");
    // The inbox lists it (issue 38), with who injected it as its requester.
    let (got, _, inbox) = request(addr, "GET", "/approvals", &BOB, "").await;
    assert_eq!(got, 200, "{inbox}");
    let inbox: Value = serde_json::from_str(&inbox).unwrap();
    let listed = &inbox["parkedInjections"][0];
    assert_eq!(listed["threadId"], "parked-fe", "{inbox}");
    assert_eq!(listed["interruptId"], asked["id"]);
    assert_eq!(listed["requester"], "alice");
    assert_eq!(listed["text"], "also X");
    assert_eq!(listed["link"], "./?thread=parked-fe");
    let answer = json!([{"interruptId": asked["id"], "status": "resolved",
        "payload": {"approved": true,
            "approvedActionFingerprint": asked["metadata"]["governance"]["actionFingerprint"]}}]);
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &ALICE,
        &run_input("parked-fe", None, Some(answer.clone())),
    )
    .await;
    assert_eq!(got, 403, "{body}");
    assert!(body.contains("FOUR_EYES"), "{body}");
    let (got, _, body) = request(
        addr,
        "POST",
        "/agent",
        &BOB,
        &run_input("parked-fe", None, Some(answer)),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert!(body.contains("rein.injection_answered"), "{body}");
    let (_, _, body) = main.await.unwrap();
    assert!(body.contains("rein.injection_consumed"), "{body}");
    server.shutdown().await.unwrap();
}
