//! A block list: tools that must never run, whatever the model asks. The denied call gets the
//! error result `DENIED: <reason>` (the model sees it and can adapt); the other tool calls of
//! the same turn go on. The handler is a type written with `#[intervention]`. Runs on the
//! scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example blocked_tools
//! ```

use std::collections::HashSet;

use rein::prelude::*;
use serde_json::json;

/// Denies every tool on its list.
struct BlockedTools {
    blocked: HashSet<String>,
}

impl BlockedTools {
    fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            blocked: names.into_iter().map(str::to_owned).collect(),
        }
    }
}

// `#[intervention]` writes the `InterventionHandler` impl: name, subscriptions (the methods
// below) and the async signatures.
#[intervention(name = "blocked-tools")]
impl BlockedTools {
    fn before_tool_call(&self, ev: &BeforeToolCallEvent) -> BeforeToolCallAction {
        let tool = &ev.tool_use().name;
        if self.blocked.contains(tool) {
            BeforeToolCallAction::deny(format!("the {tool} tool is disabled on this deployment"))
        } else {
            BeforeToolCallAction::Proceed
        }
    }
}

fn tool(name: &str, answer: &'static str) -> ToolHandle {
    ToolHandle::from_sync_fn(
        name,
        "A demo tool.",
        json!({"type": "object"}),
        move |_, _| Ok(ToolOutput::text(answer)),
    )
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("t1", "shell", json!({"cmd": "cat /etc/passwd"}))
                .tool_use("t2", "search", json!({"q": "disk usage"})),
        )
        .text("I could not use the shell, but the search says: check `df -h`.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tools([tool("shell", "root:x:0:0"), tool("search", "use `df -h`")])
        .intervention(BlockedTools::new(["shell", "python"]))
        .build()?;

    let result = agent.invoke("How full is my disk?").await?;
    for r in agent.messages()[2].tool_results() {
        let status = if r.is_error() { "error" } else { "ok" };
        println!("tool {} [{status}] {}", r.tool_use_id, r.text());
    }
    for d in &result.decisions {
        println!(
            "decision: {} {:?} {:?} on {}",
            d.handler,
            d.action,
            d.outcome,
            d.tool_use_id.as_deref().unwrap_or("-")
        );
    }
    println!("answer: {}", result.text());
    Ok(())
}
