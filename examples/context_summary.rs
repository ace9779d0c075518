//! A long tool loop kept within a token budget by summaries: `SummarizingWindow` replaces the
//! oldest turns with a summary a (cheaper) model writes, the summary call passes through the
//! agent's interventions like any model call (marked as a summary call), and the session store
//! keeps every summarized message. Runs on scripted models.
//!
//! ```sh
//! cargo run -p rein-examples --example context_summary
//! ```

use rein::SummarizingWindow;
use rein::core::{ContentBlock, stream::Usage};
use rein::models::ScriptedResponse;
use rein::prelude::*;
use rein::sessions::{FileSessionStore, SessionManager, SessionStore};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    // Each turn looks up a long record, then answers. (No reported usage: the estimate stays
    // the bytes/4 heuristic, so the run is the same on every machine.)
    let mut script = ScriptedModel::builder();
    for i in 0..8 {
        script = script
            .response(
                ScriptedResponse::new()
                    .tool_use(format!("l{i}"), "lookup", json!({"id": i}))
                    .usage(Usage::new(0, 1)),
            )
            .response(
                ScriptedResponse::new()
                    .text(format!("Record {i} is filed."))
                    .usage(Usage::new(0, 1)),
            );
    }
    let summarizer = ScriptedModel::builder()
        .text("The user is filing records; each lookup returned a long record that was filed.")
        .cycle()
        .build();
    let lookup = ToolHandle::from_sync_fn(
        "lookup",
        "Looks a record up.",
        json!({"type": "object", "properties": {"id": {"type": "integer"}}}),
        |input, _| {
            Ok(ToolOutput::text(format!(
                "record {}: {}",
                input["id"],
                "…".repeat(300)
            )))
        },
    );
    let dir = std::env::temp_dir().join(format!("rein-context-summary-{}", std::process::id()));
    let store = FileSessionStore::new(&dir);
    let mut agent = Agent::builder()
        .model(script.build())
        .tool(lookup)
        // Summarize once the next request is estimated past 1 500 tokens, with its own model.
        .conversation_manager(SummarizingWindow::new(1_500).summarizer(summarizer))
        // Interventions see the summary call; this one only reports it.
        .hook(|e: &mut BeforeModelCallEvent| {
            if e.is_summary() {
                println!("summary call seen by BeforeModelCall");
            }
        })
        .session(SessionManager::new(store.clone(), "filing"))
        .build()?;
    for i in 0..8 {
        let r = agent.invoke(format!("File record {i}.")).await?;
        for d in r.decisions.iter().filter(|d| d.handler == "rein:summary") {
            println!("turn {i}: {}", d.text.as_deref().unwrap_or_default());
        }
    }
    let first = &agent.messages()[0];
    println!("first message starts: {:?}", first.content[0]);
    if let Some(ContentBlock::Summary(s)) = first.content.get(1) {
        println!("summary of {} messages: {}", s.message_count, s.text);
    }
    let stored = store.load("filing").await?.map_or(0, |s| s.messages.len());
    println!(
        "messages sent next: {}, stored in the session: {stored}",
        agent.messages().len(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
