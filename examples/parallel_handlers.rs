//! Parallel handlers: two slow judges (a remote policy service and an LLM judge, simulated with
//! timers) checked concurrently before each tool call, so a call waits for the slower of them,
//! not for the sum. The outcome is the one of running them in order: the earlier judge's deny
//! wins, and a judge still waiting when the pass is decided is cancelled and recorded as
//! `not run`. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example parallel_handlers
//! ```

use std::time::{Duration, Instant};

use rein::prelude::*;
use serde_json::json;

/// A remote policy service: 150 ms per question; it refuses to let anything touch `/etc`.
struct PolicyService;

impl InterventionHandler for PolicyService {
    fn name(&self) -> &str {
        "policy-service"
    }

    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }

    fn parallel(&self) -> bool {
        true
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let path = ev.tool_use().input["path"].as_str().unwrap_or_default();
        Ok(if path.starts_with("/etc") {
            BeforeToolCallAction::deny(format!("{path} is off limits"))
        } else {
            BeforeToolCallAction::Proceed
        })
    }
}

/// An LLM judge: 200 ms per question (2 s on system paths, where it thinks hard); it asks for
/// a dry run of every write.
fn llm_judge() -> Intervention {
    Intervention::named("llm-judge")
        .parallel()
        .before_tool_call_async(|ev, _cx| {
            Box::pin(async move {
                let path = ev.tool_use().input["path"].as_str().unwrap_or_default();
                let think = if path.starts_with("/etc") { 2_000 } else { 200 };
                tokio::time::sleep(Duration::from_millis(think)).await;
                BeforeToolCallAction::transform(|t| t.input["dry_run"] = json!(true))
            })
        })
}

fn write_tool() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "write_file",
        "Writes a file.",
        json!({"type": "object"}),
        |input, _| Ok(ToolOutput::text(format!("wrote {input}"))),
    )
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .tool_use("t1", "write_file", json!({"path": "/tmp/notes.txt"}))
        .tool_use("t2", "write_file", json!({"path": "/etc/hosts"}))
        .text("Saved the notes; /etc/hosts was refused.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(write_tool())
        // Consecutive parallel handlers form one group, awaited together.
        .intervention(PolicyService)
        .intervention(llm_judge())
        .build()?;

    let started = Instant::now();
    let result = agent.invoke("Save my notes, then fix /etc/hosts.").await?;
    let took = started.elapsed();

    for message in agent.messages() {
        for r in message.tool_results() {
            let status = if r.is_error() { "error" } else { "ok" };
            println!("tool {} [{status}] {}", r.tool_use_id, r.text());
        }
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
    // Sequentially: 350 ms for t1 and 2150 ms for t2. Together: ≈200 ms + ≈150 ms.
    println!(
        "both calls checked in under a second: {}",
        took < Duration::from_secs(1)
    );
    println!("answer: {}", result.text());
    Ok(())
}
