//! Tool names prefixed by default (issue 42, item 6): a server's tool cannot shadow a local
//! tool or be matched by a policy rule on a bare name.

use rein_agent::Agent;
use rein_core::{
    ContentBlock, Error, ToolHandle, ToolResult, error::BuildError, message::ToolResultStatus,
    tool::ToolOutput,
};
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_mcp::McpClient;
use rein_models::ScriptedModel;
use serde_json::json;

use crate::servers::{connect, cx, find, only_text};

#[tokio::test]
async fn everything_tools_are_prefixed_by_default_and_bare_on_request() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    // The alias comes from the server's name, `mcp-servers/everything`.
    assert_eq!(client.server_name(), Some("mcp-servers/everything"));
    assert_eq!(client.prefix(), Some("everything"));
    let tools = client.tools().await.unwrap();
    assert!(
        tools.iter().all(|t| t.name().starts_with("everything__")),
        "{tools:?}"
    );
    // The server is called with its own name.
    let out = find(&tools, "everything__echo")
        .call(json!({"message": "x"}), cx("everything__echo"))
        .await
        .unwrap();
    assert_eq!(only_text(&out), "Echo: x");
    client.close().await;

    let builder = McpClient::builder().no_prefix();
    let client = connect("REIN_MCP_EVERYTHING", &[], builder).await.unwrap();
    assert_eq!(client.prefix(), None);
    let tools = client.tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name() == "echo"), "{tools:?}");
    client.close().await;
}

/// A local `echo` beside the server's, and a policy that lets only the local one run.
fn local_echo() -> ToolHandle {
    ToolHandle::from_fn(
        "echo",
        "The application's own echo.",
        json!({"type": "object", "properties": {"message": {"type": "string"}}}),
        |input, _cx| async move {
            Ok(ToolOutput::text(format!(
                "local: {}",
                input["message"].as_str().unwrap_or_default()
            )))
        },
    )
}

#[tokio::test]
async fn a_server_tool_neither_shadows_a_local_tool_nor_matches_a_bare_policy_rule() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let only_echo = Intervention::named("only-echo").before_tool_call(|ev, _| {
        if ev.tool_use().name == "echo" {
            BeforeToolCallAction::Proceed
        } else {
            BeforeToolCallAction::deny("only echo may run")
        }
    });
    let model = ScriptedModel::builder()
        .tool_use("t1", "echo", json!({"message": "hi"}))
        .tool_use("t2", "everything__echo", json!({"message": "hi"}))
        .text("done")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(local_echo())
        .tools(client.tools().await.unwrap())
        .intervention(only_echo)
        .build()
        .unwrap();
    agent.invoke("go").await.unwrap();
    let results: Vec<&ToolResult> = agent
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(&**r),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    // `echo` is the local tool, not the server's.
    assert_eq!(results[0].status, ToolResultStatus::Success);
    assert_eq!(
        format!("{:?}", results[0].content),
        r#"[Text("local: hi")]"#
    );
    // The rule on the bare name does not let the server's tool through.
    assert_eq!(results[1].status, ToolResultStatus::Error);
    assert!(
        format!("{:?}", results[1].content).contains("only echo may run"),
        "{results:?}"
    );

    // Bare names: the server's `echo` clashes with the local one, and the agent refuses both.
    client.close().await;
    let builder = McpClient::builder().no_prefix();
    let client = connect("REIN_MCP_EVERYTHING", &[], builder).await.unwrap();
    let built = Agent::builder()
        .model(ScriptedModel::builder().text("x").build())
        .tool(local_echo())
        .tools(client.tools().await.unwrap())
        .build();
    client.close().await;
    assert!(
        matches!(built, Err(Error::Build(BuildError::DuplicateTool(ref name))) if name == "echo"),
        "{:?}",
        built.err()
    );
}
