//! A triage agent hands the conversation to a refunds agent, whose refunds need a human's
//! approval. The approval is answered later by a new agent — as another process would, with only
//! the session store in common — and the refunds agent, still in control, finishes. Runs on the
//! scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example triage_refunds
//! ```

use rein::prelude::*;
use rein::sessions::{FileSessionStore, SessionManager};
use serde_json::json;

fn team(
    store: &FileSessionStore,
    triage: ScriptedModel,
    refunds: ScriptedModel,
) -> Result<Agent, rein::Error> {
    let refund = ToolHandle::from_sync_fn(
        "refund",
        "Refunds an order.",
        json!({"type": "object", "properties": {"order": {"type": "string"}}}),
        |input, _| {
            Ok(ToolOutput::text(format!(
                "refunded order {}",
                input["order"]
            )))
        },
    );
    let refunds = Agent::builder()
        .name("refunds")
        .system_prompt("You handle refunds.")
        .model(refunds)
        .tool(refund)
        .intervention(
            Intervention::named("refund-approval").before_tool_call(|ev, _| {
                if ev.tool_use().name == "refund" {
                    BeforeToolCallAction::confirm("Refund this order?")
                } else {
                    BeforeToolCallAction::Proceed
                }
            }),
        )
        .build()?;
    Agent::builder()
        .name("triage")
        .system_prompt("You route customers to the right team.")
        .model(triage)
        .handoff(Handoff::to(refunds).description("Hand refund requests to the refunds team."))
        .session(SessionManager::new(store.clone(), "customer-42"))
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let dir = std::env::temp_dir().join(format!("rein-triage-{}", std::process::id()));
    let store = FileSessionStore::new(&dir);

    let triage = ScriptedModel::builder()
        .tool_use("h1", "transfer_to_refunds", json!({}))
        .build();
    let refunds = ScriptedModel::builder()
        .tool_use("r1", "refund", json!({"order": "A-7"}))
        .build();
    let mut first = team(&store, triage, refunds)?;
    let paused = first.invoke("I want my money back for order A-7.").await?;
    for h in &paused.handoffs {
        println!("handoff: {} -> {}", h.from, h.to);
    }
    println!(
        "in control: {}; waiting for: {}",
        first.name(),
        paused.interrupts[0].reason
    );
    let approval = paused.interrupts[0].clone();
    drop(first);

    // Later, elsewhere: the session says who is in control.
    let triage = ScriptedModel::builder()
        .text("(triage is not asked again)")
        .build();
    let refunds = ScriptedModel::builder()
        .text("Order A-7 is refunded.")
        .build();
    let mut second = team(&store, triage, refunds)?;
    second.load_session().await?;
    println!("restored, in control: {}", second.name());
    let done = second.invoke(vec![approval.answer("yes")]).await?;
    println!("reply: {}", done.text());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
