//! Role-based tool authorization: the caller's role travels in the invocation state, and an
//! intervention handler decides which tools that role may call. An analyst may query the
//! database; an admin may also send email. Runs on the scripted model (no API key).
//!
//! ```sh
//! cargo run -p rein-examples --example authz_roles
//! ```

use rein::prelude::*;
use serde_json::json;

/// Which tools each role may call.
struct RoleAuthz;

impl RoleAuthz {
    fn allowed(role: &str) -> &'static [&'static str] {
        match role {
            "analyst" => &["query_db"],
            "admin" => &["query_db", "send_email"],
            _ => &[],
        }
    }
}

impl InterventionHandler for RoleAuthz {
    fn name(&self) -> &str {
        "role-authz"
    }

    fn on_error(&self) -> OnError {
        OnError::Deny // an authorization check fails closed
    }

    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        let role = cx
            .invocation_state()
            .get("role")
            .and_then(|v| v.as_str())
            .unwrap_or("anonymous");
        let tool = ev.tool_use().name.as_str();
        Ok(if Self::allowed(role).contains(&tool) {
            BeforeToolCallAction::Proceed
        } else {
            BeforeToolCallAction::deny(format!("role '{role}' may not call {tool}"))
        })
    }
}

fn tools() -> Vec<ToolHandle> {
    let query = ToolHandle::from_sync_fn(
        "query_db",
        "Runs a read-only SQL query.",
        json!({"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]}),
        |input, _cx| {
            Ok(ToolOutput::text(format!(
                "42 rows for `{}`",
                input["sql"].as_str().unwrap_or_default()
            )))
        },
    );
    let email = ToolHandle::from_sync_fn(
        "send_email",
        "Sends an email.",
        json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}),
        |input, _cx| {
            Ok(ToolOutput::text(format!(
                "sent to {}",
                input["to"].as_str().unwrap_or_default()
            )))
        },
    );
    vec![query, email]
}

/// The model asks for both tools, then summarizes.
fn model() -> ScriptedModel {
    ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("q1", "query_db", json!({"sql": "SELECT * FROM sales"}))
                .tool_use("e1", "send_email", json!({"to": "boss@example.com"})),
        )
        .text("Report prepared.")
        .build()
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)");
    for role in ["analyst", "admin"] {
        let mut agent = Agent::builder()
            .model(model())
            .tools(tools())
            .intervention(RoleAuthz)
            .build()?;
        let input =
            Input::text("Email the sales report to my boss.").with_state(json!({ "role": role }));
        let result = agent.invoke(input).await?;
        println!("\n== role: {role}");
        for r in agent.messages()[2].tool_results() {
            let status = if r.is_error() { "error" } else { "ok" };
            println!("  tool {:<3} [{status}] {}", r.tool_use_id, r.text());
        }
        for d in &result.decisions {
            println!(
                "  decision: {} {:?} {:?}: {}",
                d.handler,
                d.action,
                d.outcome,
                d.text.as_deref().unwrap_or("")
            );
        }
        println!("  answer: {}", result.text());
    }
    Ok(())
}
