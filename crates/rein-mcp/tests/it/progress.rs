//! Issue 42, item 4: a server's progress notifications reach the agent's event stream as
//! `AgentEvent::ToolProgress` of the tool use they belong to, and a cancelled run cancels the
//! server's request (`notifications/cancelled`).

use std::time::Duration;

use rein_agent::{Agent, AgentEvent, TOOL_CANCELLED};
use rein_core::{ToolResult, message::ToolResultContent, stream::StopReason};
use rein_mcp::McpClient;
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::json;

use crate::servers::{connect, ev, server};

const SLOW: &str = "trigger-long-running-operation";

/// The progress of the server's long operation streams as the tool use's events, in order,
/// between its start and its result; two calls at once each get their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_progress_streams_as_the_tool_uses_events() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("slow-a", ev(SLOW), json!({"duration": 0.6, "steps": 3}))
                .tool_use("slow-b", ev(SLOW), json!({"duration": 0.8, "steps": 4})),
        )
        .text("done")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tools(client.tools().await.unwrap())
        .build()
        .unwrap();
    let mut events = Vec::new();
    let mut stream = agent.stream("go");
    while let Some(e) = stream.next().await {
        events.push(e.unwrap());
    }
    drop(stream);
    client.close().await;

    for (id, total) in [("slow-a", 3.0), ("slow-b", 4.0)] {
        let started = events
            .iter()
            .position(|e| matches!(e, AgentEvent::ToolCallStarted { tool_use } if tool_use.tool_use_id == id))
            .unwrap_or_else(|| panic!("{id} never started: {events:#?}"));
        let ended = events
            .iter()
            .position(|e| matches!(e, AgentEvent::ToolResult(r) if r.tool_use_id == id))
            .unwrap_or_else(|| panic!("{id} never ended: {events:#?}"));
        let reports: Vec<(usize, f64)> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                AgentEvent::ToolProgress {
                    tool_use_id,
                    name,
                    progress,
                    total: t,
                    ..
                } if tool_use_id == id => {
                    assert_eq!(name, &ev(SLOW));
                    assert_eq!(*t, Some(total));
                    Some((i, *progress))
                }
                _ => None,
            })
            .collect();
        // The last report may come with the answer and be dropped (the SDK handles a
        // notification in a task of its own); the ones before it arrive.
        assert!(reports.len() >= 2, "{id}: {reports:?} in {events:#?}");
        for w in reports.windows(2) {
            assert!(w[0].1 < w[1].1, "{id}: out of order: {reports:?}");
        }
        for (i, _) in &reports {
            assert!(
                started < *i && *i < ended,
                "{id}: a report outside its call"
            );
        }
    }
}

/// A run cancelled while the server's tool runs: the server is sent
/// `notifications/cancelled` for the request, and the history says the tool was cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_cancels_the_servers_request() {
    let Some(cmd) = server("REIN_MCP_EVERYTHING") else {
        return;
    };
    // What the client sends is copied to a file on its way to the server.
    let dir = std::env::temp_dir().join(format!("rein-mcp-cancel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sent = dir.join("sent.jsonl");
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg("tee \"$0\" | \"$@\"")
        .arg(&sent)
        .args(&cmd);
    let client = McpClient::builder()
        .quiet(true)
        .command(command)
        .await
        .unwrap();
    let model = ScriptedModel::builder()
        .tool_use("slow", ev(SLOW), json!({"duration": 60, "steps": 600}))
        .text("never")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tools(client.tools().await.unwrap())
        .build()
        .unwrap();
    let cancel = agent.cancel_handle();
    let mut finished = None;
    let mut stream = agent.stream("go");
    while let Some(e) = stream.next().await {
        match e.unwrap() {
            // The server works on the call: cancel the run.
            AgentEvent::ToolProgress { .. } => cancel.cancel(),
            AgentEvent::Finished(r) => finished = Some(r),
            _ => {}
        }
    }
    drop(stream);
    assert_eq!(finished.unwrap().stop_reason, StopReason::Cancelled);
    let results: Vec<&ToolResult> = agent
        .messages()
        .iter()
        .flat_map(|m| m.tool_results())
        .collect();
    assert_eq!(results.len(), 1, "{:?}", agent.messages());
    assert_eq!(
        results[0].content,
        vec![ToolResultContent::Text(TOOL_CANCELLED.into())]
    );

    // The notification goes out from a task of its own: wait for it (bounded).
    let mut log = String::new();
    for _ in 0..200 {
        log = std::fs::read_to_string(&sent).unwrap_or_default();
        if log.contains("notifications/cancelled") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    client.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    let call_id = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| m["method"] == "tools/call")
        .map(|m| m["id"].clone())
        .unwrap_or_else(|| panic!("no tools/call sent: {log}"));
    let cancelled = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("the server was not told: {log}"));
    assert_eq!(cancelled["params"]["requestId"], call_id, "{log}");
}
