//! Quickstart: an agent with two tools and a hook that cancels one of them, printing the
//! streamed events.
//!
//! Runs on a real provider when one is configured (`OPENAI_API_KEY` / `OPENAI_BASE_URL`, or
//! `ANTHROPIC_API_KEY`), else on the embedded scripted model (no API key needed). It says which.
//!
//! ```sh
//! cargo run -p rein-examples --example quickstart
//! ```

use rein::prelude::*;
use serde_json::json;

fn scripted_model() -> ScriptedModel {
    ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .text("Let me check the weather and clean up old files.")
                .tool_use("t1", "get_weather", json!({"city": "Lisbon"}))
                .tool_use("t2", "delete_files", json!({"pattern": "/tmp/*.log"})),
        )
        .text("It is 21°C and sunny in Lisbon. I was not allowed to delete the files.")
        .chunk_chars(12)
        .build()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), rein::Error> {
    let (model, description) = rein_examples::demo_model(scripted_model());
    println!("model: {description}\n");

    let weather = ToolHandle::from_sync_fn(
        "get_weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |input, _cx| {
            let city = input["city"].as_str().unwrap_or("?");
            Ok(ToolOutput::text(format!("21°C and sunny in {city}")))
        },
    );
    let delete = ToolHandle::from_sync_fn(
        "delete_files",
        "Deletes files matching a pattern.",
        json!({"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}),
        |_input, _cx| Ok(ToolOutput::text("deleted")),
    );

    let mut agent = Agent::builder()
        .shared_model(model)
        .system_prompt("You are a helpful assistant.")
        .tool(weather)
        .tool(delete)
        // A plain hook: no deletions in this demo.
        .hook(|ev: &mut BeforeToolCallEvent| {
            if ev.tool_use().name == "delete_files" {
                ev.cancel_tool = Cancel::Message("deleting files is disabled in this demo".into());
            }
        })
        .build()?;

    let mut events = agent.stream("What's the weather in Lisbon? Also clean up old logs.");
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::TextDelta(t) => print!("{t}"),
            AgentEvent::ToolCallStarted { tool_use } => {
                println!("\n[tool] {} {}", tool_use.name, tool_use.input)
            }
            AgentEvent::ToolResult(r) => {
                let status = if r.is_error() { "error" } else { "ok" };
                println!("[result:{status}] {}", r.text())
            }
            AgentEvent::Finished(result) => {
                println!(
                    "\n\n[finished] stop reason: {:?}, model calls: {}, tokens: {}",
                    result.stop_reason,
                    result.metrics.cycles.len(),
                    result.usage.total_tokens
                );
            }
            _ => {}
        }
    }
    Ok(())
}
