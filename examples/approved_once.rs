//! A resume re-checks the paused pass: when a human approves a call, every handler of the pass
//! that paused runs again for it. A rate limiter written the documented way counts tool-use ids
//! (`RunState::count_once`), so the approved delete is counted once and the next call within the
//! limit still runs; an audit log reads `cx.recheck()` to log the answer instead of the call
//! again. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example approved_once
//! ```

use rein::prelude::*;
use serde_json::json;

/// At most `limit` tool calls per run, counted by tool-use id.
fn rate_limit(limit: u64) -> Intervention {
    Intervention::named("rate-limit").before_tool_call(move |ev, cx| {
        let calls = cx
            .run_state()
            .count_once("rate-limit:calls", &ev.tool_use().tool_use_id)?;
        Ok::<_, HandlerError>(if calls > limit {
            BeforeToolCallAction::deny(format!("rate limit: {limit} tool calls per run"))
        } else {
            BeforeToolCallAction::Proceed
        })
    })
}

/// Logs each call once, and the answer when the pass is the re-check of an approval.
fn audit_log() -> Intervention {
    Intervention::named("audit-log").before_tool_call(|ev, cx| {
        let call = ev.tool_use();
        match cx.recheck() {
            None => println!("log    {} {} {}", call.tool_use_id, call.name, call.input),
            Some(r) => println!(
                "log    {} re-checked, answered {}",
                call.tool_use_id,
                r.answer_of("delete-approval").cloned().unwrap_or_default()
            ),
        }
        BeforeToolCallAction::Proceed
    })
}

fn delete_approval() -> Intervention {
    Intervention::named("delete-approval").before_tool_call(|ev, _| {
        if ev.tool_use().name == "delete_file" {
            let path = ev.tool_use().input["path"].as_str().unwrap_or("?");
            BeforeToolCallAction::confirm(format!("Delete {path}?"))
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

fn tool(name: &'static str) -> ToolHandle {
    ToolHandle::from_sync_fn(name, name, json!({"type": "object"}), move |input, _| {
        println!("ran    {name} {input}");
        Ok(ToolOutput::text(format!("{name} done")))
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), rein::Error> {
    let model = ScriptedModel::builder()
        .tool_use("t1", "delete_file", json!({"path": "draft.txt"}))
        .tool_use("t2", "search", json!({"q": "report"}))
        .tool_use("t3", "search", json!({"q": "more"}))
        .text("Done.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tools([tool("delete_file"), tool("search")])
        .intervention(audit_log())
        .intervention(rate_limit(2))
        .intervention(delete_approval())
        .build()?;
    let paused = agent.invoke("Delete the draft, then search twice.").await?;
    let asked = &paused.interrupts[0];
    println!("asked  {asked}");
    let done = agent.invoke(vec![asked.answer("yes")]).await?;
    for d in &done.decisions {
        println!(
            "audit  {} {:?} {}",
            d.handler,
            d.action,
            d.text.as_deref().unwrap_or_default()
        );
    }
    println!("reply  {}", done.text());
    Ok(())
}
