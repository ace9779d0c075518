//! Resources and prompts from code, and resources as opt-in tools (issue 42, item 3), against
//! server-everything.

use rein_core::{
    Message,
    message::{ContentBlock, Role, ToolResultContent, ToolResultStatus},
};
use rein_mcp::{McpClient, McpResourceContents};
use serde_json::{Value, json};

use crate::servers::{connect, find};

#[tokio::test]
async fn everything_resources_templates_and_reads() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let resources = client.resources().await.unwrap();
    assert!(!resources.is_empty());
    assert!(
        resources.iter().all(|r| r.uri.starts_with("demo://")),
        "{resources:?}"
    );
    let templates = client.resource_templates().await.unwrap();
    let uris: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert!(
        uris.contains(&"demo://resource/dynamic/text/{resourceId}"),
        "{uris:?}"
    );
    assert!(
        uris.contains(&"demo://resource/dynamic/blob/{resourceId}"),
        "{uris:?}"
    );

    let text = client
        .read_resource("demo://resource/dynamic/text/3")
        .await
        .unwrap();
    let [
        McpResourceContents::Text {
            uri,
            mime_type,
            text,
        },
    ] = text.as_slice()
    else {
        panic!("{text:?}");
    };
    assert_eq!(uri, "demo://resource/dynamic/text/3");
    assert_eq!(mime_type.as_deref(), Some("text/plain"));
    assert!(
        text.starts_with("Resource 3: This is a plaintext resource"),
        "{text}"
    );

    let blob = client
        .read_resource("demo://resource/dynamic/blob/4")
        .await
        .unwrap();
    let [McpResourceContents::Blob { data, .. }] = blob.as_slice() else {
        panic!("{blob:?}");
    };
    let decoded = String::from_utf8(data.clone()).unwrap();
    assert!(
        decoded.starts_with("Resource 4: This is a base64 blob"),
        "{decoded}"
    );

    // A resource the server does not have is a typed error.
    let e = client
        .read_resource("demo://resource/dynamic/text/0")
        .await
        .unwrap_err();
    assert!(matches!(e, rein_mcp::McpError::Request { .. }), "{e}");
    client.close().await;
}

#[tokio::test]
async fn everything_prompts_as_rein_messages() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let prompts = client.prompts().await.unwrap();
    let args = prompts
        .iter()
        .find(|p| p.name == "args-prompt")
        .expect("args-prompt");
    let required: Vec<(&str, bool)> = args
        .arguments
        .iter()
        .map(|a| (a.name.as_str(), a.required))
        .collect();
    assert_eq!(required, [("city", true), ("state", false)]);

    let simple = client.prompt("simple-prompt", Value::Null).await.unwrap();
    assert_eq!(
        simple,
        vec![Message::user("This is a simple prompt without arguments.")]
    );
    let messages = client
        .prompt("args-prompt", json!({"city": "Paris", "state": "TX"}))
        .await
        .unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].role, Role::User);
    assert_eq!(
        messages[0].content,
        vec![ContentBlock::Text("What's weather in Paris, TX?".into())]
    );
    assert!(client.prompt("no-such-prompt", Value::Null).await.is_err());
    client.close().await;
}

#[tokio::test]
async fn everything_resources_as_opt_in_tools() {
    let Some(client) = connect(
        "REIN_MCP_EVERYTHING",
        &[],
        McpClient::builder().prefix("everything"),
    )
    .await
    else {
        return;
    };
    // Not among the server's tools: opted in with `resource_tools()`.
    assert!(
        client
            .tools()
            .await
            .unwrap()
            .iter()
            .all(|t| !t.name().ends_with("_resource") && !t.name().ends_with("_resources"))
    );
    let tools = client.resource_tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        ["everything__list_resources", "everything__read_resource"]
    );
    let cx = || crate::servers::cx("read_resource");
    let out = find(&tools, "everything__list_resources")
        .call(json!({}), cx())
        .await
        .unwrap();
    let [ToolResultContent::Json(Value::Array(listed))] = out.content.as_slice() else {
        panic!("{out:?}");
    };
    assert!(listed.iter().all(|r| r["uri"].is_string()));
    let out = find(&tools, "everything__read_resource")
        .call(json!({"uri": "demo://resource/dynamic/text/2"}), cx())
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Success);
    let [ToolResultContent::Text(t)] = out.content.as_slice() else {
        panic!("{out:?}");
    };
    assert!(
        t.starts_with("Resource 2: This is a plaintext resource"),
        "{t}"
    );
    // A blob that is not an image is described, not dumped.
    let out = find(&tools, "everything__read_resource")
        .call(json!({"uri": "demo://resource/dynamic/blob/2"}), cx())
        .await
        .unwrap();
    let [ToolResultContent::Text(t)] = out.content.as_slice() else {
        panic!("{out:?}");
    };
    assert!(t.contains("bytes of binary data: not shown"), "{t}");
    client.close().await;
}

/// Subscriptions (issue 42, item 3): a subscribed resource's updates reach the reader the
/// application took; unsubscribed, they stop; a closed client ends the reader. server-everything
/// sends an update of every subscribed resource at once when `toggle-subscriber-updates`
/// starts its updates (then every 5 s, too slow for a test).
#[tokio::test]
async fn everything_resource_updates_reach_the_reader() {
    use rein_mcp::McpResourceUpdate;
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let uri = "demo://resource/static/document/architecture.md";
    let mut updates = client.resource_updates();
    client.subscribe(uri).await.unwrap();
    client.subscribe(uri).await.unwrap(); // again: harmless
    client
        .call_tool("toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    // Bounded wait: the update is sent before the tool's answer.
    let update = tokio::time::timeout(std::time::Duration::from_secs(30), updates.next())
        .await
        .expect("no update from the server");
    assert_eq!(update, Some(McpResourceUpdate::Updated { uri: uri.into() }));
    client.unsubscribe(uri).await.unwrap();
    client.close().await;
    // Closed: what waits, then the end (an update of the unsubscribed resource never waits).
    while let Some(u) = updates.next().await {
        assert_ne!(u, McpResourceUpdate::Updated { uri: uri.into() });
    }
}

/// A server that does not declare `resources.subscribe` is not asked: a typed error.
#[tokio::test]
async fn subscribing_where_the_server_offers_no_subscriptions_is_unsupported() {
    let root = std::env::temp_dir().display().to_string();
    let Some(client) = connect("REIN_MCP_FILESYSTEM", &[&root], McpClient::builder()).await else {
        return;
    };
    let refused = client.subscribe("file:///etc/hosts").await.unwrap_err();
    assert!(
        matches!(&refused, rein_mcp::McpError::Unsupported { message, .. }
            if message.contains("does not offer resource subscriptions")),
        "{refused}"
    );
    client.close().await;
}

/// Prompts as opt-in tools (issue 42, item 3): one tool per prompt, named like the server's
/// tools, its arguments the input schema (required ones required), its messages the result;
/// the agent's validation refuses an input the prompt does not take.
#[tokio::test]
async fn everything_prompts_as_opt_in_tools() {
    use rein_agent::Agent;
    use rein_models::ScriptedModel;
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let tools = client.prompt_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert!(
        names.contains(&"everything__prompt_simple-prompt"),
        "{names:?}"
    );
    let args = find(&tools, "everything__prompt_args-prompt");
    let schema = &args.spec().input_schema;
    assert_eq!(schema["required"], json!(["city"]));
    assert_eq!(schema["properties"]["state"]["type"], "string");
    assert_eq!(schema["additionalProperties"], false);

    let model = ScriptedModel::builder()
        .tool_use(
            "p1",
            "everything__prompt_args-prompt",
            json!({"city": "Paris"}),
        )
        .tool_use(
            "p2",
            "everything__prompt_args-prompt",
            json!({"town": "Paris"}),
        )
        .text("done")
        .build();
    let mut agent = Agent::builder().model(model).tools(tools).build().unwrap();
    agent.invoke("go").await.unwrap();
    let results: Vec<_> = agent
        .messages()
        .iter()
        .flat_map(|m| m.tool_results())
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].status, ToolResultStatus::Success);
    assert_eq!(
        results[0].content,
        vec![ToolResultContent::Text(
            "user: What's weather in Paris?".into()
        )]
    );
    assert_eq!(results[1].status, ToolResultStatus::Error);
    assert!(
        results[1].text().contains("invalid input"),
        "{:?}",
        results[1]
    );
    client.close().await;
}

/// A prompt definition past `max_tool_bytes` is refused as a tool definition would be.
#[tokio::test]
async fn prompt_tools_are_under_the_tool_limits() {
    let mut limits = rein_mcp::McpLimits::default();
    limits.max_tool_bytes = 64;
    let builder = McpClient::builder().limits(limits);
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    let refused = client.prompt_tools().await.unwrap_err();
    assert!(
        matches!(&refused, rein_mcp::McpError::TooLarge { limit: 64, .. }),
        "{refused}"
    );
    client.close().await;
}
