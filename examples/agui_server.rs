//! Serve an agent over AG-UI, with human approvals on a web page. The agent may delete files,
//! but a `Confirm` asks first; in the browser the approval shows up with approve / reject /
//! edit buttons. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example agui_server -- --serve   # open the printed URL
//! cargo run -p rein-examples --example agui_server              # a scripted client, then exits
//! ```
//!
//! Without `--serve` the example is its own client: it POSTs a run request (AG-UI
//! `RunAgentInput`) with the token the server made up, prints the streamed events, answers the
//! approval with a `resume` entry, and prints the rest of the run.

use rein::agui::AguiServer;
use rein::prelude::*;
use rein::sessions::MemorySessionStore;
use serde_json::{Value, json};

/// The agent, built once; every thread is a conversation of it: a tool that deletes files,
/// and a guard that asks first.
fn agent(model: rein::models::SharedModel) -> Result<Agent, rein::Error> {
    let delete_file = ToolHandle::from_sync_fn(
        "delete_file",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |input, _cx| {
            let path = input["path"].as_str().unwrap_or_default();
            Ok(ToolOutput::text(format!("deleted {path}")))
        },
    );
    let guard = Intervention::named("delete-approval").before_tool_call(|ev, _cx| {
        if ev.tool_use().name == "delete_file" {
            let path = ev.tool_use().input["path"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            BeforeToolCallAction::confirm(format!("Delete {path}?"))
        } else {
            BeforeToolCallAction::Proceed
        }
    });
    Agent::builder()
        .shared_model(model)
        .tool(delete_file)
        .intervention(guard)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A scripted model that asks to delete a file, then reports; replayed for each request.
    let script = || {
        ScriptedModel::builder()
            .tool_use("t1", "delete_file", json!({"path": "report.txt"}))
            .text("report.txt is gone.")
            .build()
    };
    let serve = std::env::args().any(|a| a == "--serve");
    let model = rein::models::SharedModel::new(if serve {
        // The browser may ask many times: a model that never runs out.
        ScriptedModel::builder()
            .tool_use("t1", "delete_file", json!({"path": "report.txt"}))
            .text("report.txt is gone.")
            .tool_use("t2", "delete_file", json!({"path": "notes.txt"}))
            .text("notes.txt is gone too.")
            .build()
    } else {
        script()
    });
    let server = AguiServer::for_agent(MemorySessionStore::new(), agent(model)?);
    if serve {
        let bound = server.bind_local(8080).await?;
        // The URL carries the token the server made up; the console keeps it.
        println!("approval console: {}", bound.url());
        bound.serve().await?;
        return Ok(());
    }

    let bound = server.bind_local(0).await?;
    let token = bound.generated_token().unwrap_or_default().to_owned();
    let running = bound.spawn();
    let addr = running.local_addr().to_string();
    println!("serving AG-UI at {}", running.endpoint());

    // Run 1: the request. It stops on the approval.
    let first = post(
        &addr,
        &token,
        json!({"threadId": "demo-thread", "runId": "run-1",
               "messages": [{"id": "m1", "role": "user", "content": "Please delete report.txt"}]}),
    )
    .await?;
    let interrupt = first
        .last()
        .map(|e| e["outcome"]["interrupts"][0].clone())
        .unwrap_or(Value::Null);
    println!(
        "waiting for approval: {} (interrupt {})",
        interrupt["message"], interrupt["id"]
    );

    // Run 2: the human approves (what the console's Approve button sends): the approval names
    // the action it approves, echoing the fingerprint the interrupt carries. The audit names
    // who the token says answered; the name given here is kept beside it as a claim.
    let fingerprint = &interrupt["metadata"]["governance"]["actionFingerprint"];
    post(
        &addr,
        &token,
        json!({"threadId": "demo-thread", "runId": "run-2", "messages": [],
               "resume": [{"interruptId": interrupt["id"], "status": "resolved",
                           "payload": {"approved": true, "approvedActionFingerprint": fingerprint},
                           "metadata": {"answeredBy": "alice"}}]}),
    )
    .await?;
    running.shutdown().await?;
    Ok(())
}

/// POSTs a run request and prints its events, one line each; returns them.
async fn post(
    addr: &str,
    token: &str,
    input: Value,
) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let (_, body) = rein_examples::http(addr, token, "POST", "/agent", &input).await?;
    let events = rein_examples::sse_events(&body);
    for e in &events {
        let detail = match e["type"].as_str().unwrap_or_default() {
            "TEXT_MESSAGE_CONTENT" => e["delta"].to_string(),
            "TOOL_CALL_START" => e["toolCallName"].to_string(),
            "TOOL_CALL_ARGS" => e["delta"].to_string(),
            "TOOL_CALL_RESULT" => e["content"].to_string(),
            "CUSTOM" => {
                let v = &e["value"];
                let status = v["confirmation"]["status"].as_str().unwrap_or_default();
                let claimed = v["claimedAnsweredBy"]
                    .as_str()
                    .map(|c| format!(" (as \"{c}\")"))
                    .unwrap_or_default();
                let by = v["answeredBy"]
                    .as_str()
                    .map(|w| format!(" by {w}{claimed}"))
                    .unwrap_or_default();
                format!("{} {} {status}{by}", e["name"], v["handler"])
            }
            "RUN_FINISHED" => e["outcome"]["type"].to_string(),
            _ => String::new(),
        };
        let kind = e["type"].as_str().unwrap_or_default();
        if detail.is_empty() {
            println!("  {kind}");
        } else {
            println!("  {kind} {detail}");
        }
    }
    Ok(events)
}
