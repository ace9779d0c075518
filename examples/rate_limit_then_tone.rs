//! Order matters: handlers run in registration order and a `Deny` short-circuits. Here a rate
//! limiter is registered before a tone-steering handler; once the limit is hit, the model call
//! is denied and the tone handler is never even called. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example rate_limit_then_tone
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rein::prelude::*;

/// At most `max` model calls, across invocations.
fn rate_limiter(max: u32) -> Intervention {
    let used = AtomicU32::new(0);
    Intervention::named("rate-limit").before_model_call(move |_ev, _cx| {
        if used.fetch_add(1, Ordering::SeqCst) < max {
            BeforeModelCallAction::Proceed
        } else {
            BeforeModelCallAction::deny(format!(
                "rate limit of {max} model calls reached; try later"
            ))
        }
    })
}

/// Reminds the model of the house style on the first call of each invocation.
fn tone(calls: Arc<AtomicU32>) -> Intervention {
    Intervention::named("tone").before_model_call(move |ev, _cx| {
        calls.fetch_add(1, Ordering::SeqCst);
        if ev.model_call_index() == 0 {
            BeforeModelCallAction::guide("Answer in a warm, plain-spoken tone.")
        } else {
            BeforeModelCallAction::Proceed
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let tone_calls = Arc::new(AtomicU32::new(0));
    let model = ScriptedModel::builder()
        .text("Sure thing! Here's the gist.")
        .text("Happy to help again.")
        .text("(never sent)")
        .build();
    let mut agent = Agent::builder()
        .model(model.clone())
        .intervention(rate_limiter(2)) // registered first: decides first
        .intervention(tone(tone_calls.clone()))
        .build()?;

    for (i, prompt) in [
        "Summarize the report.",
        "And the appendix?",
        "And the footnotes?",
    ]
    .into_iter()
    .enumerate()
    {
        let result = agent.invoke(prompt).await?;
        println!("invocation {}: {}", i + 1, result.text());
        for d in &result.decisions {
            println!(
                "  decision: {} {:?}: {}",
                d.handler,
                d.action,
                d.text.as_deref().unwrap_or("")
            );
        }
        println!(
            "  tone handler called {} time(s) so far",
            tone_calls.load(Ordering::SeqCst)
        );
    }
    println!("\nmodel calls made: {}", model.requests().len());
    Ok(())
}
