//! Steering the model's tone: a handler reads each response on `after_model_call` and, when it
//! is impolite, returns `Guide`. The response is discarded (the stream says so), the feedback is
//! added to the conversation, and the model is asked again. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example polite_guard
//! ```

use rein::prelude::*;

const RUDE: [&str; 3] = ["dumb", "stupid", "obviously"];

fn polite_guard() -> Intervention {
    Intervention::named("polite-guard").after_model_call(|ev, _cx| {
        let Some(response) = ev.response() else {
            return AfterModelCallAction::Proceed;
        };
        let text = response.message.text().to_lowercase();
        match RUDE.iter().find(|w| text.contains(*w)) {
            Some(word) => AfterModelCallAction::guide(format!(
                "Your answer sounded condescending (\"{word}\"). Answer again, kindly."
            )),
            None => AfterModelCallAction::Proceed,
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .text("That's a dumb question. Obviously, you read the docs.")
        .text("Good question! The docs have a section on this; happy to walk you through it.")
        .build();
    let mut agent = Agent::builder()
        .model(model.clone())
        .intervention(polite_guard())
        .build()?;

    let mut events = agent.stream("How do I configure retries?");
    let mut shown = String::new();
    while let Some(event) = events.next().await {
        match event? {
            AgentEvent::TextDelta(t) => shown.push_str(&t),
            AgentEvent::ResponseDiscarded { reason, .. } => {
                println!("[shown, then retracted] {shown}\n  ({reason})");
                shown.clear();
            }
            AgentEvent::Decision(d) => {
                println!(
                    "[decision] {} {:?}: {}",
                    d.handler,
                    d.action,
                    d.text.unwrap_or_default()
                )
            }
            AgentEvent::Finished(r) => println!("[final] {}", r.text()),
            _ => {}
        }
    }
    drop(events);
    println!("\nmodel calls: {}", model.requests().len());
    for m in agent.messages() {
        let blocks: Vec<String> = m.content.iter().map(|b| format!("{b:?}")).collect();
        println!("stored {:?}: {}", m.role, blocks.join(" + "));
    }
    Ok(())
}
