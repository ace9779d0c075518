//! Serve Rein tools to any MCP client, each call behind a policy: the example runs itself twice
//! — as the server (`mcp_serve serve`, over stdio) and as an MCP client (Rein's own
//! `McpClient`) that lists the tools and calls them. The policy denies `delete_file`; the client
//! sees the denial as a tool error, and the tool never runs. Needs no API key and no network.
//!
//! ```sh
//! cargo run -p rein-examples --example mcp_serve
//! # The same server for any MCP client (Claude Desktop, the MCP Inspector...):
//! cargo run -p rein-examples --example mcp_serve -- serve
//! ```

use rein::core::message::{ToolResultContent, ToolResultStatus};
use rein::interventions::policy::Policy;
use rein::mcp::{McpClient, McpServer};
use rein::prelude::*;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("serve") {
        return Ok(server()?.serve_stdio().await?);
    }
    // The client: this same program, started as the server.
    let me = std::env::current_exe()?;
    // Bare names, as served (a client prefixes a server's tools by default: `<alias>__add`).
    let client = McpClient::builder()
        .quiet(true)
        .no_prefix()
        .stdio(&me, ["serve"])
        .await?;
    for tool in client.tools().await? {
        println!("tool  {:12} {}", tool.name(), tool.spec().description);
    }
    for (name, input) in [
        ("add", json!({"a": 2, "b": 3})),
        ("delete_file", json!({"path": "notes.txt"})),
    ] {
        let out = client
            .call_tool(name, input)
            .await
            .map_err(|e| e.to_string())?;
        let status = if out.status == ToolResultStatus::Error {
            "error"
        } else {
            "ok"
        };
        let text: Vec<String> = out
            .content
            .iter()
            .filter_map(|c| match c {
                ToolResultContent::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        println!("call  {name:12} [{status}] {}", text.join(""));
    }
    client.close().await;
    Ok(())
}

/// Two tools, and a policy in front of them that denies one.
fn server() -> Result<McpServer, Box<dyn std::error::Error>> {
    let add = ToolHandle::from_sync_fn(
        "add",
        "Adds two numbers.",
        json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]
        }),
        |input, _| {
            let sum = input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0);
            Ok(ToolOutput::text(sum.to_string()))
        },
    );
    let delete = ToolHandle::from_sync_fn(
        "delete_file",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        |input, _| Ok(ToolOutput::text(format!("deleted {}", input["path"]))),
    );
    let policy = Policy::from_toml_str(
        r#"
        [[policy]]
        name = "no-deletes"
        kind = "deny_tools"
        tools = ["delete_file"]
        reason = "deleting files is not allowed over MCP"
        "#,
    )?;
    Ok(McpServer::builder()
        .name("rein-example")
        .tool(add)
        .tool(delete)
        .interventions(policy.into_handlers())
        .build()?)
}
