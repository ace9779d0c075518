//! Elicitation as a durable interrupt (issue 42, item 1), against server-everything's
//! `trigger-elicitation-request` tool: the call pauses with an interrupt carrying the server's
//! message and schema; a resume — with another client and another server process, as after a
//! restart — re-issues the call, the server asks the same question again, and the stored
//! answer goes to it.

use rein_core::{interrupt::Interrupt, tool::ToolContext};
use rein_mcp::{ELICITATION_INTERRUPT, ElicitationAnswer, McpClient, McpError};
use serde_json::{Value, json};

use crate::servers::{connect, ev, find, only_text};

const TOOL: &str = "trigger-elicitation-request";

fn cx(answers: &[(&str, Value)]) -> ToolContext {
    crate::common::answered_cx("tu-elicit", TOOL, answers)
}

/// The interrupt the first call raises, as a session store keeps it (JSON round trip).
async fn ask(client: &McpClient) -> Interrupt {
    let tools = client.tools().await.unwrap();
    let cx = cx(&[]);
    let e = find(&tools, &ev(TOOL))
        .call(json!({}), cx.clone())
        .await
        .unwrap_err();
    let raised = cx.raised_interrupts();
    assert_eq!(raised.len(), 1, "{e}: {raised:?}");
    let stored = serde_json::to_string(&raised[0]).unwrap();
    serde_json::from_str(&stored).unwrap()
}

/// Answers `interrupt` with `answer` on a new connection (a new server process) and returns
/// the tool's text, or its error.
async fn resume(interrupt: &Interrupt, answer: Value) -> (ToolContext, Result<String, String>) {
    let client = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder())
        .await
        .unwrap();
    let tools = client.tools().await.unwrap();
    let cx = cx(&[(&interrupt.id, answer)]);
    let out = find(&tools, &ev(TOOL)).call(json!({}), cx.clone()).await;
    client.close().await;
    let out = out.map(|o| only_text_or_all(&o)).map_err(|e| {
        let source = e.source().and_then(|s| s.downcast_ref::<McpError>());
        format!("{e} / {source:?}")
    });
    (cx, out)
}

fn only_text_or_all(out: &rein_core::tool::ToolOutput) -> String {
    if out.content.len() == 1 {
        return only_text(out).to_owned();
    }
    format!("{:?}", out.content)
}

#[tokio::test]
async fn everything_elicitation_pauses_and_resumes_in_another_process() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let interrupt = ask(&client).await;
    client.close().await;
    assert_eq!(interrupt.name, ELICITATION_INTERRUPT);
    assert_eq!(interrupt.tool_use_id.as_deref(), Some("tu-elicit"));
    assert_eq!(
        interrupt.prompt_text(),
        "Please provide inputs for the following fields:"
    );
    assert_eq!(interrupt.reason["mode"], "form");
    let schema = &interrupt.reason["requestedSchema"];
    assert_eq!(schema["properties"]["name"]["type"], "string", "{schema}");
    assert_eq!(schema["required"], json!(["name"]));
    // Not an approval: the answer is the form's content, bound by the id to this question.
    assert!(!interrupt.takes_an_approval());
    // It declares the schema of its answer: the form's content under `accept`, closed.
    let answers = interrupt.response_schema.as_ref().unwrap();
    assert_eq!(
        answers["oneOf"][0]["properties"]["content"]["properties"]["name"]["type"],
        "string"
    );
    assert_eq!(
        answers["oneOf"][0]["properties"]["content"]["additionalProperties"],
        false
    );

    let answer =
        ElicitationAnswer::accept(json!({"name": "Ada Lovelace", "check": true, "integer": 7}));
    let (cx, out) = resume(&interrupt, answer.into()).await;
    let text = out.unwrap();
    assert!(cx.raised_interrupts().is_empty());
    assert!(
        text.contains("User provided the requested information"),
        "{text}"
    );
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");
    assert!(text.contains("- Agreed to terms: true"), "{text}");
    assert!(text.contains("- Favorite Integer: 7"), "{text}");
}

#[tokio::test]
async fn everything_elicitation_decline_cancel_and_invalid_answers() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let interrupt = ask(&client).await;
    client.close().await;

    let (_, out) = resume(&interrupt, ElicitationAnswer::Decline.into()).await;
    assert!(out.unwrap().contains("User declined"));
    let (_, out) = resume(&interrupt, ElicitationAnswer::Cancel.into()).await;
    assert!(out.unwrap().contains("User cancelled"));
    // A dismissal without a choice (AG-UI's `cancelled` answers `false`) is a cancel.
    let (_, out) = resume(&interrupt, json!(false)).await;
    assert!(out.unwrap().contains("User cancelled"));

    // Content the form refuses (out of range, missing the required name, a field it does not
    // ask for, not the answer's shape) is a typed error, never sent to the server.
    for bad in [
        ElicitationAnswer::accept(json!({"name": "A", "integer": 500})).into(),
        ElicitationAnswer::accept(json!({"check": true})).into(),
        ElicitationAnswer::accept(json!({"name": "A", "password": "x"})).into(),
        json!({"approved": true}),
    ] {
        let (cx, out) = resume(&interrupt, bad.clone()).await;
        let e = out.unwrap_err();
        assert!(e.contains("InvalidAnswer"), "{bad}: {e}");
        assert!(cx.raised_interrupts().is_empty());
    }
}

#[tokio::test]
async fn everything_elicitation_answer_for_another_question_is_not_replayed() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let interrupt = ask(&client).await;
    client.close().await;
    // An answer to another question (another fingerprint in the id) answers nothing here:
    // the server's question is asked again, as the same interrupt.
    let other = interrupt.id.replace(':', ";");
    let answer: Value = ElicitationAnswer::accept(json!({"name": "Mallory"})).into();
    let client = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder())
        .await
        .unwrap();
    let tools = client.tools().await.unwrap();
    let cx = cx(&[(&other, answer)]);
    find(&tools, &ev(TOOL))
        .call(json!({}), cx.clone())
        .await
        .unwrap_err();
    let raised = cx.raised_interrupts();
    assert_eq!(raised.len(), 1);
    assert_eq!(raised[0].id, interrupt.id);
    client.close().await;
}

#[tokio::test]
async fn everything_elicitation_from_code_without_a_run_is_cancelled() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let out = client.call_tool(TOOL, json!({})).await.unwrap();
    assert!(only_text_or_all(&out).contains("User cancelled"));
    client.close().await;
}
