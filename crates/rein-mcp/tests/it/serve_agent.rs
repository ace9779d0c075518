//! A Rein agent served as an MCP tool (feature `server-agent`): a prompt in, the answer out (or
//! its typed answer as structured content), a Confirm inside its run asked of the client.

use rein_agent::Agent;
use rein_core::ToolHandle;
use rein_interventions::approval::HumanApproval;
use rein_mcp::{McpServer, ServedAgent};
use rein_models::ScriptedModel;
use rmcp::model::{ElicitResult, ElicitationAction};
use serde_json::json;

use crate::serve::{Delete, TestClient, call, connect, text};

/// An agent that deletes a file (its own policy asks a human first), then answers.
fn deleter(deletes: &Delete) -> ServedAgent {
    let deletes = deletes.clone();
    ServedAgent::new("janitor", "Cleans up files.", move || {
        let model = ScriptedModel::builder()
            .tool_use("t1", "delete_file", json!({"path": "old.log"}))
            .text("cleaned up")
            .build();
        Agent::builder()
            .name("janitor")
            .model(model)
            .tool(ToolHandle::new(deletes.clone()))
            .intervention(HumanApproval::new("approve-deletes").tools(["delete_file"]))
            .build()
    })
}

fn accept(approved: bool) -> ElicitResult {
    let mut r = ElicitResult::new(ElicitationAction::Accept);
    r.content = Some(json!({ "approved": approved }));
    r
}

#[tokio::test]
async fn an_agent_answers_a_prompt_and_its_confirm_is_asked_of_the_client() {
    let deletes = Delete::default();
    let server = McpServer::builder()
        .tool(deleter(&deletes))
        .build()
        .unwrap();
    let client = TestClient::answering(Some(accept(true)));
    let asked = client.asked.clone();
    let c = connect(server, client).await;
    let tools = c.list_all_tools().await.unwrap();
    assert_eq!(tools[0].name, "janitor");
    assert_eq!(tools[0].input_schema["required"], json!(["prompt"]));
    assert!(tools[0].output_schema.is_none());
    let r = call(&c, "janitor", json!({"prompt": "clean up"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "cleaned up");
    assert_eq!(*deletes.0.lock().unwrap(), 1);
    assert_eq!(asked.lock().unwrap().len(), 1);
    c.cancel().await.unwrap();

    // Rejected: the agent's tool never runs, the agent still answers. A client that cannot
    // be asked: refused, with the reason.
    for (answer, is_error, expected) in [
        (Some(accept(false)), false, "cleaned up"),
        (None, true, "did not declare the elicitation capability"),
    ] {
        let deletes = Delete::default();
        let server = McpServer::builder()
            .tool(deleter(&deletes))
            .build()
            .unwrap();
        let c = connect(server, TestClient::answering(answer)).await;
        let r = call(&c, "janitor", json!({"prompt": "clean up"})).await;
        assert_eq!(r.is_error, Some(is_error), "{r:?}");
        assert!(text(&r).contains(expected), "{r:?}");
        assert_eq!(*deletes.0.lock().unwrap(), 0);
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_typed_answer_is_structured_content_under_the_output_schema() {
    let schema = json!({"type": "object", "properties": {"total": {"type": "integer"}},
        "required": ["total"], "additionalProperties": false});
    let s = schema.clone();
    let agent = ServedAgent::new("invoice", "Reads an invoice.", move || {
        Agent::builder()
            .model(ScriptedModel::builder().text(r#"{"total": 12}"#).build())
            .output_schema("invoice", s.clone())
            .build()
    })
    .output_schema(schema.clone());
    let server = McpServer::builder().tool(agent).build().unwrap();
    let c = connect(server, TestClient::answering(None)).await;
    let tools = c.list_all_tools().await.unwrap();
    assert_eq!(
        serde_json::to_value(tools[0].output_schema.as_deref().unwrap()).unwrap(),
        schema
    );
    let r = call(&c, "invoice", json!({"prompt": "Ada, 12 euros"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(r.structured_content, Some(json!({"total": 12})));
    assert_eq!(text(&r), r#"{"total":12}"#);
    let missing = call(&c, "invoice", json!({})).await;
    assert_eq!(missing.is_error, Some(true));
    c.cancel().await.unwrap();
}
