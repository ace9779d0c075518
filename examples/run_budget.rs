//! A budget that lasts the whole run, approvals included: at most two `search` calls per run,
//! counted in the run state (`cx.run_state()`). The run pauses for a human's approval of a
//! `delete_file` call; a new agent — as another process would, with new handlers and only the
//! session store in common — resumes it, and the count goes on: the third search of the run is
//! denied. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example run_budget
//! ```

use rein::prelude::*;
use rein::sessions::{FileSessionStore, SessionManager};
use serde_json::json;

/// The searches a run may make.
const SEARCHES: usize = 2;

/// Denies `search` past the budget. Counts tool-use ids, not passes: the call that was paused
/// is asked about again on resume.
fn search_budget() -> Intervention {
    Intervention::named("search-budget").before_tool_call(|ev, cx| {
        if ev.tool_use().name != "search" {
            return Ok(BeforeToolCallAction::Proceed);
        }
        let id = ev.tool_use().tool_use_id.clone();
        let used = cx
            .run_state()
            .update("search-budget:ids", |ids: &mut Vec<String>| {
                if !ids.contains(&id) {
                    ids.push(id);
                }
                ids.len()
            })?;
        Ok::<_, HandlerError>(if used > SEARCHES {
            BeforeToolCallAction::deny(format!("search budget ({SEARCHES}) spent"))
        } else {
            BeforeToolCallAction::Proceed
        })
    })
}

fn delete_approval() -> Intervention {
    Intervention::named("delete-approval").before_tool_call(|ev, _| {
        if ev.tool_use().name == "delete_file" {
            BeforeToolCallAction::Confirm(Confirm::new("Delete the draft?"))
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

fn agent(store: &FileSessionStore, model: ScriptedModel) -> Result<Agent, rein::Error> {
    let search = ToolHandle::from_sync_fn(
        "search",
        "Searches the archive.",
        json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        |input, _| Ok(ToolOutput::text(format!("3 hits for {}", input["q"]))),
    );
    let delete_file = ToolHandle::from_sync_fn(
        "delete_file",
        "Deletes a file.",
        json!({"type": "object"}),
        |_, _| Ok(ToolOutput::text("deleted")),
    );
    Agent::builder()
        .model(model)
        .tool(search)
        .tool(delete_file)
        .intervention(search_budget())
        .intervention(delete_approval())
        .session(SessionManager::new(store.clone(), "archive-cleanup"))
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let dir = std::env::temp_dir().join(format!("rein-run-budget-{}", std::process::id()));
    let store = FileSessionStore::new(&dir);

    // First part of the run: one search, then a deletion that waits for a human.
    let model = ScriptedModel::builder()
        .tool_use("s1", "search", json!({"q": "draft"}))
        .tool_use("d1", "delete_file", json!({"path": "draft.txt"}))
        .build();
    let mut first = agent(&store, model)?;
    let paused = first.invoke("Find and delete the old draft.").await?;
    println!("paused: {:?}, searches so far: {}", paused.stop_reason, {
        let ids: Vec<String> = first
            .run_state()
            .load("search-budget:ids")?
            .unwrap_or_default();
        ids.len()
    });
    let approval = paused.interrupts[0].clone();
    drop(first);

    // Later, elsewhere: a new agent restores the session (and the run state with it).
    let model = ScriptedModel::builder()
        .tool_use("s2", "search", json!({"q": "backup"}))
        .tool_use("s3", "search", json!({"q": "copies"}))
        .text("Deleted the draft; the search budget ran out before the last check.")
        .build();
    let mut second = agent(&store, model)?;
    second.load_session().await?;
    let done = second.invoke(vec![approval.answer("yes")]).await?;
    for m in second.messages() {
        for r in m.tool_results() {
            println!("tool {}  {}", r.tool_use_id, r.text());
        }
    }
    println!("reply: {}", done.text());
    println!(
        "run state after the run: {:?}",
        second.run_state().snapshot()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
