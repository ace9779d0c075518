//! Use an MCP server's tools as Rein tools: connect over stdio, list the tools, call two of
//! them directly through `ToolHandle::call`, then give them to an agent (on the embedded
//! scripted model). Needs no API key.
//!
//! ```sh
//! bash .ci/peers-mcp.sh target/peers && source target/peers/env   # installs the reference server
//! cargo run -p rein-examples --example mcp_tools
//! # or any MCP server command:
//! cargo run -p rein-examples --example mcp_tools -- npx -y @modelcontextprotocol/server-everything
//! ```

use std::time::Duration;

use rein::core::{
    id::InvocationId,
    interrupt::InterruptAnswers,
    state::{AgentState, InvocationState},
};
use rein::mcp::McpClient;
use rein::prelude::*;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server command: from the arguments, else from REIN_MCP_EVERYTHING.
    let mut command: Vec<String> = std::env::args().skip(1).collect();
    if command.is_empty() {
        match std::env::var("REIN_MCP_EVERYTHING") {
            Ok(c) => command = c.split_whitespace().map(str::to_owned).collect(),
            Err(_) => {
                println!(
                    "No MCP server given. Install the reference server and point the example at it:\n\
                     \n  bash .ci/peers-mcp.sh target/peers && source target/peers/env\
                     \n  cargo run -p rein-examples --example mcp_tools\n\
                     \nor pass a server command:\
                     \n  cargo run -p rein-examples --example mcp_tools -- npx -y @modelcontextprotocol/server-everything"
                );
                return Ok(());
            }
        }
    }
    let Some((program, args)) = command.split_first() else {
        return Ok(());
    };

    // Tools named `everything__<tool>` whatever the server calls itself (by default the alias
    // comes from the server's name).
    let client = McpClient::builder()
        .prefix("everything")
        .timeout(Duration::from_secs(10))
        .quiet(true)
        .stdio(program, args)
        .await?;
    println!(
        "connected to {}",
        client.server_name().unwrap_or("an unnamed MCP server")
    );

    let tools = client.tools().await?;
    for t in &tools {
        println!("  {:40} {}", t.name(), t.spec().description);
    }

    for (name, input) in [
        ("everything__echo", json!({"message": "hello from Rein"})),
        ("everything__get-sum", json!({"a": 20, "b": 22})),
    ] {
        let Some(tool) = tools.iter().find(|t| t.name() == name) else {
            println!("(this server has no {name})");
            continue;
        };
        let cx = ToolContext::new(
            "toolu_1",
            name,
            InvocationId::new(),
            InvocationState::new(),
            AgentState::new(),
            InterruptAnswers::default(),
        );
        match tool.call(input.clone(), cx).await {
            Ok(out) => println!("{name}({input}) -> {:?}: {:?}", out.status, out.content),
            Err(e) => println!("{name}({input}) -> Error: {e}"),
        }
    }

    // The same tools in an agent (the scripted model, or a real provider when one is
    // configured: see `rein_examples::demo_model`).
    let scripted = ScriptedModel::builder()
        .tool_use("t1", "everything__get-sum", json!({"a": 2, "b": 3}))
        .text("2 + 3 = 5, says the MCP server.")
        .build();
    let (model, about) = rein_examples::demo_model(scripted);
    println!("\nagent run (model: {about}):");
    let mut agent = Agent::builder().shared_model(model).tools(tools).build()?;
    let result = agent.invoke("What is 2 + 3? Use the tool.").await?;
    for message in agent.messages() {
        println!("  {}", serde_json::to_string(message)?);
    }
    println!("  [answer] {}", result.text());

    client.close().await;
    Ok(())
}
