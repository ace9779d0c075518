//! Approve later, in another process: `ask` runs an agent whose `delete_file` calls need a
//! human's approval (`Confirm`); it stops with the pending interrupt saved in a session store and
//! exits. `approve` — hours later, any process that reaches the store — restores the session,
//! shows what is waiting, and resumes with the answer: the tool runs (or is refused) and the
//! conversation goes on. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example approve_later -- ask /tmp/approvals
//! cargo run -p rein-examples --example approve_later -- approve /tmp/approvals yes
//! cargo run -p rein-examples --example approve_later     # both steps, each in its own process
//! ```

use std::process::Command;

use rein::prelude::*;
use rein::sessions::{FileSessionStore, SessionManager};
use serde_json::json;

/// The session both processes share: a ticket id, say.
const SESSION: &str = "ticket-42";

/// The same agent in both processes: a tool, the approval guard, the session.
fn agent(store: &FileSessionStore, model: ScriptedModel) -> Result<Agent, rein::Error> {
    let delete_file = ToolHandle::from_sync_fn(
        "delete_file",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |input, _cx| {
            let path = input["path"].as_str().unwrap_or_default();
            Ok(ToolOutput::text(format!("deleted {path}")))
        },
    );
    let approval = Intervention::named("delete-approval").before_tool_call(|ev, _cx| {
        match ev.tool_use().name.as_str() {
            "delete_file" => {
                let path = ev.tool_use().input["path"].as_str().unwrap_or("?");
                BeforeToolCallAction::Confirm(Confirm::new(format!("Delete {path}?")))
            }
            _ => BeforeToolCallAction::Proceed,
        }
    });
    Agent::builder()
        .model(model)
        .tool(delete_file)
        .intervention(approval)
        .session(SessionManager::new(store.clone(), SESSION))
        .build()
}

/// Step 1: the request that needs an approval. The pending interrupt is saved; the process ends.
async fn ask(store: &FileSessionStore) -> Result<(), rein::Error> {
    let model = ScriptedModel::builder()
        .tool_use("t1", "delete_file", json!({"path": "report-draft.txt"}))
        .build();
    let result = agent(store, model)?
        .invoke("Clean up the report draft.")
        .await?;
    println!("[ask] stop reason: {:?}", result.stop_reason);
    for i in &result.interrupts {
        println!("[ask] waiting for a human: {i} ({})", i.id);
    }
    Ok(())
}

/// Step 2, anywhere, later: restore the session, answer what is pending, resume.
async fn approve(store: &FileSessionStore, answer: &str) -> Result<(), rein::Error> {
    let reply = if answer == "yes" {
        "The draft is gone."
    } else {
        "Understood, I left it."
    };
    let model = ScriptedModel::builder().text(reply).build();
    let mut agent = agent(store, model)?;
    agent.load_session().await?;
    let Some(pending) = agent.pending_interrupts() else {
        println!("[approve] nothing is waiting for an approval");
        return Ok(());
    };
    let responses: Vec<InterruptResponse> = pending
        .interrupts()
        .iter()
        .map(|i| {
            println!("[approve] {} -> {answer}", i);
            i.answer(answer)
        })
        .collect();
    let result = agent.invoke(responses).await?;
    for m in agent.messages() {
        for r in m.tool_results() {
            println!("[approve] tool result: {}", r.text());
        }
    }
    println!("[approve] reply: {}", result.text());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ask", dir] => ask(&FileSessionStore::new(dir)).await?,
        ["approve", dir, answer] => approve(&FileSessionStore::new(dir), answer).await?,
        [] => {
            // Both steps, each in a process of its own, over one store directory.
            println!("model: the embedded scripted demo model (no API key needed)\n");
            let dir =
                std::env::temp_dir().join(format!("rein-approve-later-{}", std::process::id()));
            let me = std::env::current_exe()?;
            for step in [vec!["ask"], vec!["approve", "yes"]] {
                let mut cmd = Command::new(&me);
                cmd.arg(step[0]).arg(&dir).args(&step[1..]);
                let status = cmd.status()?;
                if !status.success() {
                    return Err(format!("{} failed: {status}", step[0]).into());
                }
            }
            std::fs::remove_dir_all(&dir).ok();
        }
        _ => {
            eprintln!("usage: approve_later [ask DIR | approve DIR yes|no]");
            std::process::exit(2);
        }
    }
    Ok(())
}
