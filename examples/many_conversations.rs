//! One agent, many conversations — what a server does: the agent (model, tools, handlers) is
//! built once; each request takes a new conversation of it, bound to that customer's session,
//! restores it, answers, and drops it. Nothing of the agent is built again per request, and
//! nothing of a conversation stays in memory between requests.
//!
//! Runs on a real provider when one is configured (`OPENAI_API_KEY` / `OPENAI_BASE_URL`, or
//! `ANTHROPIC_API_KEY`), else on the embedded scripted model (no API key needed). It says which.
//!
//! ```sh
//! cargo run -p rein-examples --example many_conversations
//! ```

use rein::prelude::*;
use rein::sessions::{FileSessionStore, SessionManager};
use serde_json::json;

fn scripted_model() -> ScriptedModel {
    ScriptedModel::builder()
        .tool_use("o1", "order_status", json!({"order": "A-7"}))
        .text("Order A-7 ships tomorrow.")
        .text("Hello Bob, how can I help?")
        .text("You're welcome, Alice.")
        .build()
}

/// One request of `customer`: a new conversation of `support`, bound to the customer's
/// session and restored from it.
async fn request(
    support: &Agent,
    store: &FileSessionStore,
    customer: &str,
    text: &str,
) -> Result<(), rein::Error> {
    let mut conversation = support
        .new_conversation()
        .session(SessionManager::new(store.clone(), customer))
        .build();
    let restored = conversation.load_session().await?;
    let reply = conversation.invoke(text).await?;
    println!(
        "{customer}: {text:?} -> {:?} (restored: {restored}, messages now: {})",
        reply.text(),
        conversation.messages().len()
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (model, description) = rein_examples::demo_model(scripted_model());
    println!("model: {description}\n");

    let order_status = ToolHandle::from_sync_fn(
        "order_status",
        "The shipping status of an order.",
        json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}),
        |input, _cx| {
            Ok(ToolOutput::text(format!(
                "order {} ships tomorrow",
                input["order"]
            )))
        },
    );
    // Built once, at start-up.
    let support = Agent::builder()
        .name("support")
        .system_prompt("You answer customers of an online shop. Be brief.")
        .shared_model(model)
        .tool(order_status)
        .build()?;

    let dir = std::env::temp_dir().join(format!("rein-conversations-{}", std::process::id()));
    let store = FileSessionStore::new(&dir);
    request(&support, &store, "alice", "Where is my order A-7?").await?;
    request(&support, &store, "bob", "Hi!").await?;
    request(&support, &store, "alice", "Thanks!").await?;
    println!(
        "\nthe built agent holds no conversation: {} messages",
        support.messages().len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
