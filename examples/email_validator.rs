//! Guiding a tool call: when the model calls `send_email` without a `subject`, a handler returns
//! `Guide`. The call does not run; the model gets `GUIDANCE: [email-validator] ...` as the tool
//! result, and calls again with a subject. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example email_validator
//! ```

use rein::prelude::*;
use serde_json::json;

fn email_validator() -> Intervention {
    Intervention::named("email-validator").before_tool_call(|ev, _cx| {
        let call = ev.tool_use();
        if call.name != "send_email" {
            return BeforeToolCallAction::Proceed;
        }
        let subject = call.input["subject"]
            .as_str()
            .map(str::trim)
            .unwrap_or_default();
        if subject.is_empty() {
            BeforeToolCallAction::guide(
                "Every email needs a short, specific `subject`. Add one and call again.",
            )
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let send_email = ToolHandle::from_sync_fn(
        "send_email",
        "Sends an email.",
        json!({
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"]
        }),
        |input, _cx| {
            println!("  (send_email ran: subject = {})", input["subject"]);
            Ok(ToolOutput::text("queued"))
        },
    );
    let model = ScriptedModel::builder()
        .tool_use("t1", "send_email", json!({"to": "team@example.com", "body": "Standup moved to 10:00."}))
        .tool_use(
            "t2",
            "send_email",
            json!({"to": "team@example.com", "subject": "Standup moved to 10:00", "body": "Standup moved to 10:00."}),
        )
        .text("Sent: the team knows standup moved.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(send_email)
        .intervention(email_validator())
        .build()?;

    let result = agent.invoke("Tell the team standup moved to 10.").await?;
    for m in agent.messages() {
        for call in m.tool_uses() {
            println!("call   {}: {}", call.tool_use_id, call.input);
        }
        for r in m.tool_results() {
            println!("result {}: {}", r.tool_use_id, r.text());
        }
    }
    for d in &result.decisions {
        println!(
            "decision: {} {:?} on {}",
            d.handler,
            d.action,
            d.tool_use_id.as_deref().unwrap_or("-")
        );
    }
    println!("answer: {}", result.text());
    Ok(())
}
