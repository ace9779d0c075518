//! A research lead delegating to two specialists — agents running as its tools. The analyst
//! may publish only with a human's approval: the approval asked two levels down stops the lead,
//! is answered at the top, and the analyst goes on where it stopped. The specialists' events
//! reach the lead's stream tagged with who they came from; their usage and decisions roll up.
//! Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example research_team
//! ```

use rein::prelude::*;
use serde_json::json;

/// The searcher: looks things up, answers in a line.
fn searcher(model: ScriptedModel) -> AgentTool {
    AgentTool::new("searcher", "Finds sources on a topic.", move || {
        Agent::builder()
            .name("searcher")
            .system_prompt("You find sources.")
            .model(model.clone())
            .build()
    })
}

/// The analyst: writes the summary and publishes it, with a human's approval.
fn analyst(model: ScriptedModel) -> AgentTool {
    let publish = ToolHandle::from_sync_fn(
        "publish",
        "Publishes a summary.",
        json!({"type": "object", "properties": {"title": {"type": "string"}}}),
        |input, _| Ok(ToolOutput::text(format!("published {}", input["title"]))),
    );
    AgentTool::new("analyst", "Writes and publishes summaries.", move || {
        Agent::builder()
            .name("analyst")
            .model(model.clone())
            .tool(publish.clone())
            .intervention(
                Intervention::named("publish-approval").before_tool_call(|ev, _| {
                    if ev.tool_use().name == "publish" {
                        BeforeToolCallAction::confirm("Publish the summary?")
                    } else {
                        BeforeToolCallAction::Proceed
                    }
                }),
            )
            .build()
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let lead_model = ScriptedModel::builder()
        .tool_use(
            "s1",
            "searcher",
            json!({"input": "heat pumps in cold climates"}),
        )
        .tool_use(
            "a1",
            "analyst",
            json!({"input": "summarize and publish: 3 field studies"}),
        )
        .text("Done: the summary is published.")
        .build();
    let searcher_model = ScriptedModel::builder()
        .text("3 field studies: heat pumps keep 2.0+ COP at -15 C.")
        .build();
    let analyst_model = ScriptedModel::builder()
        .tool_use("p1", "publish", json!({"title": "Heat pumps in the cold"}))
        .text("Published 'Heat pumps in the cold'.")
        .build();
    let mut lead = Agent::builder()
        .name("lead")
        .model(lead_model)
        .tool(searcher(searcher_model))
        .tool(analyst(analyst_model))
        .build()?;

    let mut stream = lead.stream("Research heat pumps in cold climates and publish a summary.");
    let mut paused = None;
    while let Some(event) = stream.next().await {
        match event? {
            AgentEvent::SubAgent { agent, event } => match *event {
                AgentEvent::TextDelta(t) => println!("[{agent}] says: {t}"),
                AgentEvent::ToolCallStarted { tool_use } => {
                    println!("[{agent}] calls {}", tool_use.name)
                }
                AgentEvent::Interrupt(i) => println!("[{agent}] waits for: {i}"),
                _ => {}
            },
            AgentEvent::ToolResult(r) => println!("[lead] {} -> {}", r.tool_use_id, r.text()),
            AgentEvent::Finished(r) => paused = Some(r),
            _ => {}
        }
    }
    drop(stream);
    let paused = paused.ok_or("no result")?;
    let ask = &paused.interrupts[0];
    println!("\nasked: {} ({}) — {}", ask.name, ask.id, ask.reason);

    // The human approves at the top; the answer goes down to the analyst.
    let done = lead.invoke(vec![ask.answer("yes")]).await?;
    println!("reply: {}", done.text());
    for d in &done.decisions {
        println!(
            "decision: {:?} by {} in {}",
            d.action,
            d.handler,
            d.agent.as_deref().unwrap_or("lead")
        );
    }
    for (agent, usage) in &done.sub_agent_usage {
        println!("usage of {agent}: {} tokens", usage.total_tokens);
    }
    Ok(())
}
