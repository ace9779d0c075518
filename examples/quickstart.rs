//! Quickstart: an agent with three tools and two interventions — one denies deleting files,
//! one asks a human before a report is sent — printing the streamed events, the decisions, and
//! the approval (given here by the program; a real application asks a person).
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
                .text("Let me check the weather, clean up the logs and send the report.")
                .tool_use("t1", "get_weather", json!({"city": "Lisbon"}))
                .tool_use("t2", "delete_files", json!({"pattern": "/tmp/*.log"}))
                .tool_use("t3", "send_report", json!({"to": "team@example.com"})),
        )
        .text("It is 21°C and sunny in Lisbon; the report is sent. I was not allowed to delete the files.")
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
    let report = ToolHandle::from_sync_fn(
        "send_report",
        "Sends the daily report by e-mail.",
        json!({"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}),
        |input, _cx| {
            let to = input["to"].as_str().unwrap_or("?");
            Ok(ToolOutput::text(format!("report sent to {to}")))
        },
    );

    let mut agent = Agent::builder()
        .shared_model(model)
        .system_prompt("You are a helpful assistant.")
        .tool(weather)
        .tool(delete)
        .tool(report)
        // Interventions: typed decisions at the agent's lifecycle points, in registration order.
        .intervention(
            Intervention::named("no-deletes").before_tool_call(|ev, _cx| {
                match ev.tool_use().name.as_str() {
                    "delete_files" => BeforeToolCallAction::deny("deleting files is disabled here"),
                    _ => BeforeToolCallAction::Proceed,
                }
            }),
        )
        .intervention(
            Intervention::named("approve-reports").before_tool_call(|ev, _cx| {
                match ev.tool_use().name.as_str() {
                    "send_report" => {
                        let to = ev.tool_use().input["to"].as_str().unwrap_or("?");
                        BeforeToolCallAction::Confirm(Confirm::new(format!(
                            "Send the report to {to}?"
                        )))
                    }
                    _ => BeforeToolCallAction::Proceed,
                }
            }),
        )
        .build()?;

    let prompt = "What's the weather in Lisbon? Also clean up old logs and send the daily report.";
    let mut input = Input::text(prompt);
    // A run stops on a `Confirm` with the question; answering resumes it where it stopped.
    while let Some(approvals) = show(agent.stream(input)).await? {
        input = Input::resume(approvals);
    }
    Ok(())
}

/// Prints a run's events; returns the answers to give when it stopped for approvals.
async fn show(
    mut events: rein::AgentStream<'_>,
) -> Result<Option<Vec<InterruptResponse>>, rein::Error> {
    let mut approvals = Vec::new();
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
            AgentEvent::Decision(d) => {
                println!("[decision] {} {:?} on {}", d.handler, d.action, d.event)
            }
            AgentEvent::Interrupt(i) => {
                let question = i.reason.as_str().unwrap_or("Approve?");
                // A real application asks a person here, now or hours later (see approve_later).
                println!("[approval] {question} -> yes (answered by the demo)");
                approvals.push(i.answer("yes"));
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
    Ok((!approvals.is_empty()).then_some(approvals))
}
