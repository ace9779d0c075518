//! Redacting PII before it leaves: a handler transforms every `send_email` call's body,
//! replacing US social security numbers (`\d{3}-\d{2}-\d{4}`) with `[REDACTED]`. The tool runs
//! with the redacted input, and the stored conversation is rewritten to match what ran.
//! Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example pii_redactor
//! ```

use std::sync::Arc;

use regex::Regex;
use rein::prelude::*;
use serde_json::json;

fn pii_redactor() -> Result<Intervention, regex::Error> {
    let ssn = Arc::new(Regex::new(r"\d{3}-\d{2}-\d{4}")?);
    Ok(Intervention::named("pii-redactor")
        .on_error(OnError::Deny) // if redaction fails, the email is not sent
        .before_tool_call(move |ev, _cx| {
            let call = ev.tool_use();
            let body = call.input["body"].as_str().unwrap_or_default();
            if call.name != "send_email" || !ssn.is_match(body) {
                return BeforeToolCallAction::Proceed;
            }
            let redacted = ssn.replace_all(body, "[REDACTED]").into_owned();
            BeforeToolCallAction::transform(move |draft| {
                draft.input["body"] = json!(redacted);
            })
        }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let send_email = ToolHandle::from_sync_fn(
        "send_email",
        "Sends an email.",
        json!({
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"]
        }),
        |input, _cx| {
            println!("send_email received body: {}", input["body"]);
            Ok(ToolOutput::text("sent"))
        },
    );
    let model = ScriptedModel::builder()
        .tool_use(
            "t1",
            "send_email",
            json!({"to": "hr@example.com", "body": "New hire Ann Lee, SSN 123-45-6789, starts Monday."}),
        )
        .text("HR has been told.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(send_email)
        .intervention(pii_redactor()?)
        .build()?;

    let result = agent
        .invoke("Tell HR about Ann's start date. Her SSN is 123-45-6789.")
        .await?;
    let stored = agent.messages()[1]
        .tool_uses()
        .next()
        .map(|u| u.input.clone());
    println!(
        "stored tool call body:     {}",
        stored.unwrap_or_default()["body"]
    );
    for d in &result.decisions {
        println!("decision: {} {:?} {:?}", d.handler, d.action, d.outcome);
    }
    println!("answer: {}", result.text());
    Ok(())
}
