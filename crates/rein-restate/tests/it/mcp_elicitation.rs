//! Issue 42, item 1: an MCP server's elicitation in a durable run. The reference server's
//! `trigger-elicitation-request` asks for a form; the Restate invocation ends with the
//! elicitation as its interrupt (kept in the session's object state), an answer the form
//! refuses is a 400 and leaves it waiting, and a resume — another invocation — re-issues the
//! tool call, whose repeated question gets the stored answer.
//!
//! The worker's factory is synchronous and runs for every invocation, so it cannot connect:
//! the worker connects to the MCP server once, at start, and every invocation's agent gets that
//! client's tools (each call is a new MCP request; the re-issued one carries the answer).
//! Skipped without `REIN_RESTATE_SERVER` and `REIN_MCP_EVERYTHING`.

use crate::common::{self, Restate};

use rein_agent::Agent;
use rein_core::{state::InvocationState, stream::StopReason};
use rein_mcp::{ELICITATION_INTERRUPT, ElicitationAnswer, McpClient};
use rein_models::{ScriptedModel, SharedModel};
use rein_restate::{
    Client,
    wire::{InvokeRequest, ResumeRequest},
};
use serde_json::json;

const TOOL: &str = "everything__trigger-elicitation-request";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_elicitation_pauses_durably_and_resumes_with_the_answer() {
    let Ok(command) = std::env::var("REIN_MCP_EVERYTHING") else {
        println!("SKIPPED: REIN_MCP_EVERYTHING is not set (bash .ci/peers-mcp.sh)");
        return;
    };
    let Some(restate) = Restate::start("mcp_elicitation").await else {
        return;
    };
    let command: Vec<&str> = command.split_whitespace().collect();
    let (program, args) = command.split_first().unwrap();
    let mcp = McpClient::builder()
        .quiet(true)
        .stdio(program, args)
        .await
        .unwrap();
    let tools = mcp.tools().await.unwrap();
    // One script across the invocations (a real model is stateless; this one remembers where
    // it is): the tool call, then the answer after the resume.
    let model = SharedModel::new(
        ScriptedModel::builder()
            .tool_use("t1", TOOL, json!({}))
            .text("You are signed up.")
            .build(),
    );
    let worker = rein_restate::Worker::new(move |_session: &str| {
        Ok(Agent::builder()
            .shared_model(model.clone())
            .tools(tools.clone()))
    })
    .authenticate(|_| Ok(InvocationState::new()));
    let stop = common::serve_in_process(&restate, worker).await;
    let client = Client::new(&restate.ingress).unwrap();

    let paused = common::answered(client.invoke("signup", InvokeRequest::text("Sign me up.")))
        .await
        .unwrap();
    assert_eq!(paused.stop_reason, StopReason::Interrupt, "{paused:?}");
    let [asked] = paused.interrupts.as_slice() else {
        panic!("{paused:?}");
    };
    assert_eq!(asked.name, ELICITATION_INTERRUPT);
    assert_eq!(asked.reason["requestedSchema"]["required"], json!(["name"]));
    assert!(asked.response_schema.is_some());

    // Content the form refuses (no name): 400, nothing ran, the question still waits.
    let refused = ResumeRequest::new(vec![
        asked.answer(ElicitationAnswer::accept(json!({"integer": 7}))),
    ]);
    let e = common::answered(client.resume("signup", refused))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    let view = client.session("signup").await.unwrap();
    assert_eq!(view.pending.len(), 1, "{view:?}");

    let answer = ElicitationAnswer::accept(json!({"name": "Ada Lovelace", "check": true}));
    let done =
        common::answered(client.resume("signup", ResumeRequest::new(vec![asked.answer(answer)])))
            .await
            .unwrap();
    assert_eq!(done.stop_reason, StopReason::EndTurn, "{done:?}");
    assert_eq!(done.text, "You are signed up.");
    let view = client.session("signup").await.unwrap();
    let text = serde_json::to_string(&view.messages).unwrap();
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");

    mcp.close().await;
    let _ = stop.send(());
}
