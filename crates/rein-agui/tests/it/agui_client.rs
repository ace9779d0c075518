//! The official AG-UI client (`@ag-ui/client` in Node, installed by `.ci/peers-agui.sh`) drives
//! the server: a plain answer, a tool call, confirm -> approve / reject / approve with an edit,
//! an injection into a running run, and the protocol's refusals. SKIPPED without
//! `REIN_AGUI_NODE_MODULES`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use rein_sessions::MemorySessionStore;
use serde_json::Value;

/// Runs the driver on `scenarios`; one JSON value per scenario.
async fn drive(scenarios: &[&str]) -> Option<Vec<Value>> {
    let Ok(modules) = std::env::var("REIN_AGUI_NODE_MODULES") else {
        println!("SKIPPED: REIN_AGUI_NODE_MODULES is not set (bash .ci/peers-agui.sh DIR)");
        return None;
    };
    let server = common::start(MemorySessionStore::new()).await;
    let endpoint = server.endpoint();
    let mut args = vec![modules.as_str(), endpoint.as_str()];
    args.extend_from_slice(scenarios);
    let stdout = common::node("agui_driver.cjs", &args).await;
    server.shutdown().await.unwrap();
    Some(
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    )
}

fn types(run: &Value) -> Vec<String> {
    let mut t: Vec<String> = run["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    // Text arrives in chunks: one CONTENT stands for the run of them.
    t.dedup_by(|a, b| a == b && a == "TEXT_MESSAGE_CONTENT");
    t
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_plain_and_tool_call() {
    let Some(out) = drive(&["plain", "tool"]).await else {
        return;
    };
    let plain = &out[0]["runs"][0];
    assert_eq!(
        types(plain),
        s(&[
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_SNAPSHOT",
            "RUN_FINISHED"
        ])
    );
    assert_eq!(plain["text"], "Hello from Rein!");
    assert_eq!(plain["outcome"], "success");
    // The client built the assistant message from the events.
    assert_eq!(out[0]["lastMessage"]["role"], "assistant");
    assert_eq!(out[0]["lastMessage"]["content"], "Hello from Rein!");

    let tool = &out[1]["runs"][0];
    assert_eq!(
        types(tool),
        s(&[
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_SNAPSHOT",
            "RUN_FINISHED"
        ])
    );
    assert_eq!(tool["results"][0], "12:00");
    assert_eq!(out[1]["toolCalls"][0]["function"]["name"], "clock");
    assert_eq!(
        out[1]["roles"],
        serde_json::json!(["user", "assistant", "tool", "assistant"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_confirm_approve_reject_edit() {
    let Some(out) = drive(&["approve", "reject", "edit"]).await else {
        return;
    };
    for o in &out {
        let first = &o["runs"][0];
        assert_eq!(
            types(first),
            s(&[
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "CUSTOM:rein.decision",
                "STATE_SNAPSHOT",
                "RUN_FINISHED"
            ]),
            "{o}"
        );
        assert_eq!(first["outcome"], "interrupt");
        let i = &first["interrupts"][0];
        assert_eq!(i["reason"], "confirm");
        assert_eq!(i["message"], "Delete a.txt?");
        assert_eq!(i["toolCallId"], "d1");
        assert_eq!(i["responseSchema"]["required"][0], "approved");
        assert_eq!(first["decisions"][0]["confirmation"]["status"], "asked");
        // The client recorded the open interrupt, and cleared it after the resume.
        assert_eq!(o["pendingOnClient"].as_array().unwrap().len(), 1);
        assert_eq!(o["pendingAfter"], 0);
        assert_eq!(o["runs"][1]["outcome"], "success");
    }
    let approve = &out[0]["runs"][1];
    assert_eq!(
        types(approve),
        s(&[
            "RUN_STARTED",
            "CUSTOM:rein.decision",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_SNAPSHOT",
            "RUN_FINISHED"
        ])
    );
    assert_eq!(
        approve["decisions"][0]["confirmation"]["status"],
        "approved"
    );
    assert_eq!(approve["results"][0], "deleted a.txt");
    assert_eq!(approve["text"], "Done: I asked before deleting.");

    let reject = &out[1]["runs"][1];
    assert_eq!(reject["decisions"][0]["confirmation"]["status"], "rejected");
    let result = reject["results"][0].as_str().unwrap();
    assert!(result.contains("CONFIRMATION_FAILED"), "{result}");

    let edit = &out[2]["runs"][1];
    let t = types(edit);
    assert!(
        t.contains(&"CUSTOM:rein.message_updated".to_owned()),
        "{t:?}"
    );
    assert_eq!(edit["decisions"][0]["confirmation"]["status"], "approved");
    assert_eq!(
        edit["decisions"][0]["confirmation"]["answer"]["edit"]["path"],
        "b.txt"
    );
    assert_eq!(edit["results"][0], "deleted b.txt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_injection_into_a_running_run() {
    let Some(out) = drive(&["inject"]).await else {
        return;
    };
    let main = &out[0]["runs"][0];
    let injected = &out[0]["runs"][1];
    assert_eq!(
        types(injected),
        s(&[
            "RUN_STARTED",
            "CUSTOM:rein.injection_queued",
            "RUN_FINISHED"
        ]),
        "{injected}"
    );
    let t = types(main);
    assert!(
        t.contains(&"CUSTOM:rein.injection_consumed".to_owned()),
        "{t:?}"
    );
    let consumed = main["custom"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "rein.injection_consumed")
        .unwrap();
    assert_eq!(consumed["value"]["text"], "also check X");
    assert_eq!(main["outcome"], "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_sees_the_protocol_refusals() {
    let Some(out) = drive(&["refusals"]).await else {
        return;
    };
    let runs = out[0]["runs"].as_array().unwrap();
    assert_eq!(runs[0]["outcome"], "interrupt");
    // A new message while the thread waits: 409 INTERRUPTS_PENDING, surfaced by the client.
    assert_eq!(runs[1]["thrown"]["status"], 409, "{}", runs[1]);
    assert_eq!(runs[1]["thrown"]["payload"]["code"], "INTERRUPTS_PENDING");
    assert_eq!(runs[2]["thrown"]["status"], 422);
    assert_eq!(
        runs[2]["thrown"]["payload"]["code"],
        "INVALID_RESUME_PAYLOAD"
    );
    assert_eq!(runs[3]["thrown"]["status"], 404);
    assert_eq!(runs[3]["thrown"]["payload"]["code"], "UNKNOWN_INTERRUPT");
    // Nothing was lost: the right answer still works.
    assert_eq!(runs[4]["outcome"], "success");
    assert_eq!(runs[4]["results"][0], "deleted a.txt");
    // The same resume again changes nothing and succeeds (no second delete).
    assert_eq!(runs[5]["outcome"], "success");
    assert_eq!(runs[5]["results"].as_array().unwrap().len(), 0);
}

/// Through the official client: interrupts carry `metadata.governance.actionFingerprint`, an
/// approval echoes it (`payload.approvedActionFingerprint`); after a new pause on the same
/// tool-use id the first resume sent again approves nothing, and an approval naming the first
/// call's fingerprint is refused with 409 `FINGERPRINT_MISMATCH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_replays_and_forged_approvals_approve_nothing() {
    let Some(out) = drive(&["replay"]).await else {
        return;
    };
    assert_eq!(out[0]["sameToolCall"], true, "{}", out[0]);
    let runs = out[0]["runs"].as_array().unwrap();
    assert_eq!(runs[0]["outcome"], "interrupt");
    assert_eq!(runs[1]["results"][0], "deleted a.txt", "{}", runs[1]);
    assert_eq!(runs[1]["outcome"], "interrupt");
    // The first resume again: succeeds and changes nothing.
    assert_eq!(runs[2]["outcome"], "success", "{}", runs[2]);
    assert_eq!(
        runs[2]["results"].as_array().unwrap().len(),
        0,
        "{}",
        runs[2]
    );
    assert_eq!(runs[3]["thrown"]["status"], 409, "{}", runs[3]);
    assert_eq!(runs[3]["thrown"]["payload"]["code"], "FINGERPRINT_MISMATCH");
    assert_eq!(runs[4]["results"][0], "deleted b.txt", "{}", runs[4]);
    assert_eq!(runs[4]["outcome"], "success");
}
