//! An MCP server's elicitation answered later, in another process: `ask` runs an agent whose
//! model calls the reference server's `trigger-elicitation-request` tool; the server asks the
//! user for a form, the run pauses with the elicitation as an interrupt (its message and
//! schema) saved in a session store, and the process exits. `answer` — any process that
//! reaches the store — restores the session, shows what the server asked, and resumes with the
//! form's content: the tool call is issued again (to a new server process), the server asks the
//! same question, gets the stored answer, and the run goes on. Runs on the scripted model.
//!
//! ```sh
//! bash .ci/peers-mcp.sh target/peers && source target/peers/env   # installs the reference server
//! cargo run -p rein-examples --example mcp_elicitation -- ask /tmp/elicit
//! cargo run -p rein-examples --example mcp_elicitation -- answer /tmp/elicit '{"name": "Ada"}'
//! cargo run -p rein-examples --example mcp_elicitation     # both steps, each in its own process
//! ```

use std::process::Command;

use rein::mcp::{ELICITATION_INTERRUPT, ElicitationAnswer, McpClient};
use rein::prelude::*;
use rein::sessions::{FileSessionStore, SessionManager};
use serde_json::{Value, json};

/// The session both processes share.
const SESSION: &str = "signup-7";

/// The same agent in both processes: the server's tools, the session.
async fn agent(
    store: &FileSessionStore,
    model: ScriptedModel,
) -> Result<(Agent, McpClient), Box<dyn std::error::Error>> {
    // Its tools are named `everything__<tool>` (the default prefix, from the server's name).
    let client = rein_examples::reference_mcp_server().await?;
    let agent = Agent::builder()
        .model(model)
        .tools(client.tools().await?)
        .session(SessionManager::new(store.clone(), SESSION))
        .build()?;
    Ok((agent, client))
}

/// Step 1: the model calls the tool; the server's question pauses the run; the process ends.
async fn ask(store: &FileSessionStore) -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::builder()
        .tool_use("t1", "everything__trigger-elicitation-request", json!({}))
        .build();
    let (mut agent, client) = agent(store, model).await?;
    let result = agent.invoke("Sign me up.").await?;
    client.close().await;
    println!("[ask] stop reason: {:?}", result.stop_reason);
    for i in &result.interrupts {
        let fields: Vec<&String> = i.reason["requestedSchema"]["properties"]
            .as_object()
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        println!("[ask] {} asks: {i} (fields: {fields:?})", i.name);
    }
    Ok(())
}

/// Step 2, anywhere, later: restore the session, answer the form, resume.
async fn answer(store: &FileSessionStore, content: &str) -> Result<(), Box<dyn std::error::Error>> {
    let content: Value = serde_json::from_str(content)?;
    let model = ScriptedModel::builder().text("You are signed up.").build();
    let (mut agent, client) = agent(store, model).await?;
    agent.load_session().await?;
    let Some(pending) = agent.pending_interrupts() else {
        println!("[answer] nothing is waiting");
        return Ok(());
    };
    let responses: Vec<InterruptResponse> = pending
        .interrupts()
        .iter()
        .filter(|i| i.name == ELICITATION_INTERRUPT)
        .map(|i| {
            println!("[answer] {i} -> {content}");
            // `decline()` / `cancel()` refuse; the content is checked against the schema.
            i.answer(ElicitationAnswer::accept(content.clone()))
        })
        .collect();
    let result = agent.invoke(responses).await?;
    client.close().await;
    for m in agent.messages() {
        for r in m.tool_results() {
            for line in r.text().lines().filter(|l| l.starts_with("- ")) {
                println!("[answer] the server got: {line}");
            }
        }
    }
    println!("[answer] reply: {}", result.text());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("REIN_MCP_EVERYTHING").is_none() {
        println!(
            "No MCP server given. Install the reference server and point the example at it:\n\
             \n  bash .ci/peers-mcp.sh target/peers && source target/peers/env\
             \n  cargo run -p rein-examples --example mcp_elicitation"
        );
        return Ok(());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ask", dir] => ask(&FileSessionStore::new(dir)).await?,
        ["answer", dir, content] => answer(&FileSessionStore::new(dir), content).await?,
        [] => {
            println!("model: the embedded scripted demo model (no API key needed)\n");
            let dir =
                std::env::temp_dir().join(format!("rein-mcp-elicitation-{}", std::process::id()));
            let me = std::env::current_exe()?;
            let form = r#"{"name": "Ada Lovelace", "check": true}"#;
            for step in [vec!["ask"], vec!["answer", form]] {
                let status = Command::new(&me)
                    .arg(step[0])
                    .arg(&dir)
                    .args(&step[1..])
                    .status()?;
                if !status.success() {
                    return Err(format!("{} failed: {status}", step[0]).into());
                }
            }
            std::fs::remove_dir_all(&dir).ok();
        }
        _ => {
            eprintln!("usage: mcp_elicitation [ask DIR | answer DIR JSON]");
            std::process::exit(2);
        }
    }
    Ok(())
}
