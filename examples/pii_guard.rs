//! Ready-made PII protection (`PiiGuard`, feature `pii` of the facade): e-mail addresses and
//! phone numbers a tool returns are redacted with typed placeholders before the model sees
//! them, a card number the model tries to send is refused, and a streamed answer is redacted
//! before the caller sees any of it. Runs on the scripted model (no API key).
//!
//! ```sh
//! cargo run -p rein-examples --example pii_guard
//! ```

use rein::interventions::pii::{PiiAction, PiiGuard, PiiKind, PiiTarget};
use rein::prelude::*;
use serde_json::json;

fn tools() -> Vec<ToolHandle> {
    let lookup = ToolHandle::from_sync_fn(
        "lookup_customer",
        "Finds a customer record.",
        json!({"type": "object", "properties": {"name": {"type": "string"}}}),
        |_input, _cx| {
            Ok(ToolOutput::text(
                "Ann Lee, ann@example.com, +44 20 7946 0958",
            ))
        },
    );
    let send = ToolHandle::from_sync_fn(
        "send_message",
        "Sends a message.",
        json!({"type": "object", "properties": {"body": {"type": "string"}}}),
        |input, _cx| Ok(ToolOutput::text(format!("sent: {}", input["body"]))),
    );
    vec![lookup, send]
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .tool_use("t1", "lookup_customer", json!({"name": "Ann"}))
        .tool_use(
            "t2",
            "send_message",
            json!({"body": "Charge 4111111111111111 today"}),
        )
        .text("Ann can be reached at ann@example.com or 415-555-0132.")
        .build();
    // Redact everything by default; a card in a tool input is refused; the stream is guarded.
    let guard = PiiGuard::new("pii")
        .action(PiiKind::CreditCard, PiiAction::Deny)
        .targets([
            PiiTarget::Prompt,
            PiiTarget::ToolInput,
            PiiTarget::ToolResult,
            PiiTarget::Stream,
        ]);
    let mut agent = Agent::builder()
        .model(model)
        .tools(tools())
        .intervention(guard.clone())
        .build()?;
    let mut shown = String::new();
    let mut events = agent.stream("How do I reach Ann? My own number is +1 202 555 0143.");
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::TextDelta(text) => shown.push_str(&text),
            AgentEvent::Finished(result) => {
                for d in &result.decisions {
                    println!(
                        "decision: {} {:?} {:?} {}",
                        d.handler,
                        d.event,
                        d.action,
                        d.text.as_deref().unwrap_or("")
                    );
                }
            }
            _ => {}
        }
    }
    drop(events);
    println!("stored prompt:  {}", agent.messages()[0].text());
    for m in agent.messages() {
        for r in m.tool_results() {
            println!("tool result {}: {}", r.tool_use_id, r.text());
        }
    }
    println!("shown:          {shown}");
    // The detector alone:
    println!(
        "detector:       {}",
        guard
            .detector()
            .redact("IBAN DE89 3704 0044 0532 0130 00, ssn 078-05-1120")
    );
    Ok(())
}
