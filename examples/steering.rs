//! Steering a running agent: a long research loop on the scripted model, while a second
//! thread injects "also check X" mid-run and later cancels. Prints a timeline.
//!
//! ```sh
//! cargo run -p rein-examples --example steering
//! ```

use std::time::{Duration, Instant};

use rein::prelude::*;
use serde_json::json;

fn research_model() -> ScriptedModel {
    let mut b = ScriptedModel::builder();
    for (i, topic) in ["solar", "wind", "hydro", "geothermal", "tidal", "nuclear"]
        .iter()
        .enumerate()
    {
        b = b.response(
            ScriptedResponse::new()
                .text(format!("Researching {topic} energy. "))
                .tool_use(format!("t{i}"), "search", json!({"query": topic})),
        );
    }
    b.text("Summary: renewables are growing fast.")
        .chunk_chars(4)
        .chunk_delay(Duration::from_millis(40))
        .build()
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let search = ToolHandle::from_fn(
        "search",
        "Searches the web.",
        json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        |input, _cx| async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok(ToolOutput::text(format!(
                "3 articles about {}",
                input["query"].as_str().unwrap_or_default()
            )))
        },
    );
    let mut agent = Agent::builder()
        .model(research_model())
        .tool(search)
        .build()?;

    let start = Instant::now();
    let t = move || format!("{:>6.2}s", start.elapsed().as_secs_f64());
    let steer = agent.interceptor();
    steer.on_consumed(move |id, m| println!("{} [injection consumed] {id}: {}", t(), m.text()));
    steer
        .on_rejected(move |id, _m, reason| println!("{} [injection rejected] {id}: {reason}", t()));
    let cancel = agent.cancel_handle();

    // A second thread — no runtime needed — steers, then stops the run.
    let controller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        match steer.inject("Also check X: offshore wind subsidies.") {
            Ok(id) => println!("{} [controller] injected {id}", t()),
            Err(e) => println!("{} [controller] inject failed: {e}", t()),
        }
        std::thread::sleep(Duration::from_millis(1500));
        println!("{} [controller] cancel", t());
        cancel.cancel_with("Stopped by the controller.");
    });

    let mut events = agent.stream("Research energy sources for me.");
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::ModelCallStarted { model_call_index } => {
                println!("{} [model call {model_call_index}]", t())
            }
            AgentEvent::ToolCallStarted { tool_use } => {
                println!("{} [tool] {} {}", t(), tool_use.name, tool_use.input)
            }
            AgentEvent::ToolResult(r) => println!("{} [result] {}", t(), r.text()),
            AgentEvent::ResponseDiscarded { reason, .. } => {
                println!("{} [discarded] {reason}", t())
            }
            AgentEvent::Finished(r) => {
                println!("{} [finished] {:?}: {}", t(), r.stop_reason, r.text())
            }
            _ => {}
        }
    }
    drop(events);
    controller.join().ok();
    println!(
        "\nhistory: {} messages, every tool use answered",
        agent.messages().len()
    );
    Ok(())
}
