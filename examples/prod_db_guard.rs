//! Guarding production: a handler inspects each `run_sql` call's input and denies the ones that
//! target a production database, so the same agent can work freely on staging. Runs on the
//! scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example prod_db_guard
//! ```

use rein::prelude::*;
use serde_json::json;

fn prod_db_guard() -> Intervention {
    Intervention::named("prod-db-guard")
        .on_error(OnError::Deny)
        .before_tool_call(|ev, _cx| {
            let call = ev.tool_use();
            if call.name != "run_sql" {
                return BeforeToolCallAction::Proceed;
            }
            let db = call.input["database"].as_str().unwrap_or_default();
            if db.starts_with("prod") || db.contains("production") {
                BeforeToolCallAction::deny(format!(
                    "{db} is a production database; run this on staging"
                ))
            } else {
                BeforeToolCallAction::Proceed
            }
        })
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let run_sql = ToolHandle::from_sync_fn(
        "run_sql",
        "Runs SQL on a database.",
        json!({
            "type": "object",
            "properties": {"database": {"type": "string"}, "sql": {"type": "string"}},
            "required": ["database", "sql"]
        }),
        |input, _cx| {
            Ok(ToolOutput::text(format!(
                "{}: 3 rows deleted",
                input["database"].as_str().unwrap_or_default()
            )))
        },
    );
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use(
                    "t1",
                    "run_sql",
                    json!({"database": "staging-eu", "sql": "DELETE FROM carts WHERE stale"}),
                )
                .tool_use(
                    "t2",
                    "run_sql",
                    json!({"database": "prod-eu", "sql": "DELETE FROM carts WHERE stale"}),
                ),
        )
        .text("Cleaned staging; production was refused, so it needs a human.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(run_sql)
        .intervention(prod_db_guard())
        .build()?;

    let result = agent.invoke("Delete stale carts everywhere.").await?;
    for (call, r) in agent.messages()[1]
        .tool_uses()
        .zip(agent.messages()[2].tool_results())
    {
        let status = if r.is_error() { "error" } else { "ok" };
        println!(
            "{} on {} [{status}] {}",
            call.name,
            call.input["database"],
            r.text()
        );
    }
    for d in &result.decisions {
        println!(
            "decision: {} {:?}: {}",
            d.handler,
            d.action,
            d.text.as_deref().unwrap_or("")
        );
    }
    println!("answer: {}", result.text());
    Ok(())
}
