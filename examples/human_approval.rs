//! Human-in-the-loop approval (`HumanApproval`): every tool but `read_file` needs a human. The
//! first run asks through an interrupt (durable: it could be answered in another process); the
//! answer "always" trusts `delete_file` for the rest of the session. A second agent asks
//! through an inline callback instead. Runs on the scripted model (no API key).
//!
//! ```sh
//! cargo run -p rein-examples --example human_approval
//! ```

use rein::interventions::approval::{ApprovalAnswer, HumanApproval};
use rein::prelude::*;
use serde_json::json;

fn tools() -> Vec<ToolHandle> {
    ["read_file", "delete_file"]
        .into_iter()
        .map(|name| {
            ToolHandle::from_sync_fn(
                name,
                "A file tool.",
                json!({"type": "object"}),
                move |i, _| Ok(ToolOutput::text(format!("{name} {}", i["path"]))),
            )
        })
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("t1", "read_file", json!({"path": "a.txt"}))
                .tool_use("t2", "delete_file", json!({"path": "a.txt"})),
        )
        .text("Deleted a.txt.")
        .tool_use("t3", "delete_file", json!({"path": "b.txt"}))
        .text("Deleted b.txt.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tools(tools())
        .intervention(HumanApproval::new("approval").tools(["*", "!read_file"]))
        .build()?;
    let r = agent.invoke("Read and delete a.txt").await?;
    for i in &r.interrupts {
        println!(
            "asked ({}):\n{}",
            i.name,
            i.reason["prompt"].as_str().unwrap_or("")
        );
    }
    let answers: Vec<InterruptResponse> = r.interrupts.iter().map(|i| i.answer("always")).collect();
    let r = agent.invoke(answers).await?;
    println!("answered always -> {}", r.text());
    println!(
        "trusted: {}",
        agent.state().get("approval:trusted").unwrap_or_default()
    );
    let r = agent.invoke("Delete b.txt").await?;
    println!(
        "next call, not asked ({} interrupts) -> {}",
        r.interrupts.len(),
        r.text()
    );

    // Inline: a callback answers at once (a terminal prompt, or a channel to a UI).
    let model = ScriptedModel::builder()
        .tool_use("t1", "delete_file", json!({"path": "/etc/passwd"}))
        .text("I was not allowed to.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tools(tools())
        .intervention(HumanApproval::new("approval").ask_with(|req| async move {
            println!("\ncallback asked:\n{}", req.prompt);
            ApprovalAnswer::Reject
        }))
        .build()?;
    agent.invoke("Delete /etc/passwd").await?;
    for r in agent.messages()[2].tool_results() {
        println!("tool {} -> {}", r.tool_use_id, r.text());
    }
    Ok(())
}
