//! Guarding streamed output: two `model_output` handlers see the model's text while it streams,
//! before the caller does. One redacts API keys (`sk-` + 20 characters) even when the key is
//! split across deltas; the other stops the response the moment a launch code appears, so the
//! caller never sees it and `DENIED: ...` is stored instead. The agent holds back the last 32
//! characters after each pass, so a match of up to 33 characters is always whole when a handler
//! looks. Runs on the scripted model, streaming 3 characters per delta.
//!
//! ```sh
//! cargo run -p rein-examples --example stream_guard
//! ```

use std::sync::Arc;

use regex::Regex;
use rein::prelude::*;

fn redact_keys() -> Result<Intervention, regex::Error> {
    let key = Arc::new(Regex::new(r"sk-[A-Za-z0-9]{20}")?);
    Ok(
        Intervention::named("api-keys").model_output(move |ev, _cx| {
            if !key.is_match(&ev.pending) {
                return ModelOutputAction::Proceed;
            }
            let key = key.clone();
            ModelOutputAction::transform(move |pending: &mut String| {
                *pending = key.replace_all(pending, "[KEY]").into_owned();
            })
        }),
    )
}

fn no_launch_codes() -> Intervention {
    Intervention::named("no-launch-codes")
        .on_error(OnError::Deny)
        .model_output(|ev, _cx| {
            if ev.pending.contains("LAUNCH-CODE") {
                ModelOutputAction::deny("launch codes are not shown")
            } else {
                ModelOutputAction::Proceed
            }
        })
}

/// Streams one invocation, printing what the caller sees.
async fn show(agent: &mut Agent, prompt: &str) -> Result<(), rein::Error> {
    println!("> {prompt}");
    let mut shown = String::new();
    let mut events = agent.stream(prompt);
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::TextDelta(text) => shown.push_str(&text),
            AgentEvent::ResponseDiscarded { reason, handler } => {
                if !shown.is_empty() {
                    println!("[shown] {shown}");
                }
                println!(
                    "[withdrawn] {reason} (by {})",
                    handler.as_deref().unwrap_or("-")
                );
                shown.clear();
            }
            AgentEvent::Finished(result) => {
                if !shown.is_empty() {
                    println!("[shown] {shown}");
                }
                println!("[stored] {}\n", result.text());
            }
            _ => {}
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .text("Your key is sk-Abc123Def456Ghi789Jk — keep it safe.")
        .text("Sure. The code is LAUNCH-CODE-0000, and here is more text that never streams.")
        .chunk_chars(3)
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .intervention(redact_keys()?)
        .intervention(no_launch_codes())
        .stream_hold_back(32)
        .build()?;
    show(&mut agent, "What is my API key?").await?;
    show(&mut agent, "And the launch code?").await?;
    Ok(())
}
