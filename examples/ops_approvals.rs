//! Approvals an ops team runs: refunds over 100 need a person's approval, two operators with
//! their own tokens, the requester may not approve their own refund (four-eyes), an inbox of
//! what waits, and a durable record of who approved what — in SQLite. Runs on the scripted
//! model, as its own client (plain HTTP on 127.0.0.1), then exits.
//!
//! ```sh
//! cargo run -p rein-examples --example ops_approvals
//! ```

use rein::agui::{AguiServer, Principal};
use rein::prelude::*;
use rein::sessions::SqliteSessionStore;
use rein_examples::{http, sse_events as events};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

fn agent() -> Result<Agent, rein::Error> {
    let model = ScriptedModel::builder()
        .tool_use("r1", "refund", json!({"order": 7, "amount": 250}))
        .text("Refund done.")
        .build();
    let refund = ToolHandle::from_sync_fn(
        "refund",
        "Refunds an order.",
        json!({"type": "object", "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}}}),
        |input, cx| {
            // The tool sees who the run is for and who approved it (set by the server).
            let state = cx.invocation_state();
            Ok(ToolOutput::text(format!(
                "refunded {} on order {} for {}, approved by {}",
                input["amount"],
                input["order"],
                state.principal().unwrap_or("?"),
                state.approver().unwrap_or("nobody")
            )))
        },
    );
    let approval = Intervention::named("refund-approval").before_tool_call(|ev, cx| {
        let amount = ev.tool_use().input["amount"].as_f64().unwrap_or(0.0);
        if amount <= 100.0 {
            return BeforeToolCallAction::Proceed;
        }
        let who = cx.invocation_state().principal().unwrap_or("someone");
        BeforeToolCallAction::confirm(format!("Refund {amount} requested by {who}?"))
    });
    Agent::builder()
        .model(model)
        .tool(refund)
        .intervention(approval)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::temp_dir().join(format!("rein-ops-approvals-{}.db", std::process::id()));
    let store = SqliteSessionStore::open(&db).await?;
    let server = AguiServer::for_agent(store.clone(), agent()?)
        .bearer_auth(|token| match token {
            ALICE => Some(Principal::new("alice")),
            BOB => Some(Principal::new("bob")),
            _ => None,
        })
        .four_eyes(true)
        .bind_local(0)
        .await?
        .spawn();
    let addr = server.local_addr().to_string();

    // Bob asks for the refund: the run stops on the approval.
    let ask = json!({"threadId": "order-7", "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": "Refund order 7, 250"}]});
    let (_, body) = http(&addr, BOB, "POST", "/agent", &ask).await?;
    let interrupt = events(&body)
        .last()
        .map(|e| e["outcome"]["interrupts"][0].clone())
        .unwrap_or(Value::Null);
    println!("bob asked: {}", interrupt["message"]);

    // Alice's inbox: what waits across the threads she may answer.
    let (_, inbox) = http(&addr, ALICE, "GET", "/approvals", &Value::Null).await?;
    let inbox: Value = serde_json::from_str(&inbox)?;
    for a in inbox["approvals"].as_array().into_iter().flatten() {
        println!(
            "inbox: {} {} {} requested by {} -> {}",
            a["threadId"], a["toolName"], a["input"], a["requester"], a["link"]
        );
    }

    // Bob approves his own refund: refused, the approval still waits.
    let fingerprint = &interrupt["metadata"]["governance"]["actionFingerprint"];
    let answer = |payload: Value| {
        json!({"threadId": "order-7", "runId": "run-2", "messages": [],
               "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]})
    };
    let approve = answer(json!({"approved": true, "approvedActionFingerprint": fingerprint}));
    let (status, body) = http(&addr, BOB, "POST", "/agent", &approve).await?;
    let refusal: Value = serde_json::from_str(&body)?;
    println!("bob approves his own: {status} {}", refusal["code"]);

    // Alice approves it with an edit: a partial refund of 90.
    let edited = answer(json!({"approved": true, "edit": {"order": 7, "amount": 90},
        "note": "partial refund", "approvedActionFingerprint": fingerprint}));
    let (_, body) = http(&addr, ALICE, "POST", "/agent", &edited).await?;
    for e in events(&body)
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_RESULT")
    {
        println!("tool: {}", e["content"]);
    }

    // The durable record, from the store (also served as `approvals` on GET /threads/order-7).
    let record = store
        .load("order-7")
        .await?
        .map(|s| s.approvals)
        .unwrap_or_default();
    for r in &record {
        println!(
            "record: {:?} by {} asked {} edit {} note {}",
            r.outcome,
            r.approver.as_deref().unwrap_or("-"),
            r.asked,
            r.edit.clone().unwrap_or(Value::Null),
            r.note.as_deref().unwrap_or("-"),
        );
    }
    server.shutdown().await?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    Ok(())
}
