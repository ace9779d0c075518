//! Cedar authorization of tool calls (`CedarAuthorizer`, feature `cedar` of the facade): the
//! principal comes from the invocation state, each tool call is a Cedar request, and a denied
//! call is refused with the id of the policy that decided. A bad policy fails when the handler
//! is built, naming line and column. Runs on the scripted model (no API key).
//!
//! ```sh
//! cargo run -p rein-examples --example cedar_authz
//! ```

use rein::interventions::cedar::CedarAuthorizer;
use rein::prelude::*;
use serde_json::json;

const POLICIES: &str = r#"
@id("analysts-read")
permit(principal in Role::"analyst", action in [Action::"search", Action::"query"], resource);

@id("no-prod")
forbid(principal, action == Action::"query", resource)
    when { context.input has db && context.input.db == "prod" };

@id("admins")
permit(principal in Role::"admin", action, resource);
"#;

fn tool(name: &'static str) -> ToolHandle {
    ToolHandle::from_sync_fn(
        name,
        "A demo tool.",
        json!({"type": "object"}),
        move |input, _cx| Ok(ToolOutput::text(format!("{name} ran with {input}"))),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)");
    let bad = CedarAuthorizer::builder("authz")
        .policies("permit(principal, action, resource);\nforbid(principal action, resource);")
        .build();
    if let Err(e) = bad {
        println!("bad policy: {e}");
    }
    for (who, role) in [("ann", "analyst"), ("root", "admin")] {
        let model = ScriptedModel::builder()
            .response(
                ScriptedResponse::new()
                    .tool_use("q1", "query", json!({"db": "prod"}))
                    .tool_use("q2", "query", json!({"db": "staging"}))
                    .tool_use("d1", "delete_file", json!({"path": "/tmp/x"})),
            )
            .text("Done.")
            .build();
        let authz = CedarAuthorizer::builder("authz")
            .policies(POLICIES)
            .build()?;
        let mut agent = Agent::builder()
            .model(model)
            .tools([tool("query"), tool("delete_file")])
            .intervention(authz)
            .build()?;
        let principal =
            json!({"type": "User", "id": who, "parents": [{"type": "Role", "id": role}]});
        agent
            .invoke(Input::text("Clean up").with_state(json!({ "principal": principal })))
            .await?;
        println!("\n== {who} ({role})");
        for r in agent.messages()[2].tool_results() {
            let status = if r.is_error() { "error" } else { "ok" };
            println!("  tool {:<3} [{status}] {}", r.tool_use_id, r.text());
        }
    }
    Ok(())
}
