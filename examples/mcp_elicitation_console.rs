//! An MCP server's question answered in the web console: an agent served over AG-UI calls the
//! reference server's `trigger-elicitation-request` tool; the server asks for a form
//! (`elicitation/create`), the run stops with that question as an interrupt whose
//! `responseSchema` is the form, and the console shows it — the server's message, a field per
//! property, **Accept** / **Decline** / **Cancel**. The answer resumes the run: the tool call is
//! issued again, the server asks the same question and gets the form's content. Runs on the
//! scripted model.
//!
//! ```sh
//! bash .ci/peers-mcp.sh target/peers && source target/peers/env   # installs the reference server
//! cargo run -p rein-examples --example mcp_elicitation_console -- --serve   # open the printed URL
//! cargo run -p rein-examples --example mcp_elicitation_console   # a scripted console, then exits
//! ```
//!
//! With `--serve`, ask anything in the console: the model calls the tool, the form appears,
//! and what you submit is what the server gets. Without it the example is its own client and
//! sends what the console's buttons send: first a form the server's schema refuses (422; the
//! question keeps waiting), then a valid one.

use rein::agui::AguiServer;
use rein::prelude::*;
use rein::sessions::MemorySessionStore;
use rein_examples::{http, sse_events};
use serde_json::{Value, json};

/// The tool the model calls (the client prefixes a server's tools with its name).
const TOOL: &str = "everything__trigger-elicitation-request";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("REIN_MCP_EVERYTHING").is_none() {
        println!(
            "No MCP server given. Install the reference server and point the example at it:\n\
             \n  bash .ci/peers-mcp.sh target/peers && source target/peers/env\
             \n  cargo run -p rein-examples --example mcp_elicitation_console"
        );
        return Ok(());
    }
    let client = rein_examples::reference_mcp_server().await?;
    let serve = std::env::args().any(|a| a == "--serve");
    // The model calls the tool, then answers; in the browser, as often as you ask.
    let mut script = ScriptedModel::builder();
    for turn in 0..if serve { 20 } else { 1 } {
        script = script
            .tool_use(format!("t{turn}"), TOOL, json!({}))
            .text("You are signed up.");
    }
    let agent = Agent::builder()
        .model(script.build())
        .tools(client.tools().await?)
        .build()?;
    let server = AguiServer::for_agent(MemorySessionStore::new(), agent);
    if serve {
        let bound = server.bind_local(8080).await?;
        // The URL carries the token the server made up; the console keeps it.
        println!("web console: {}", bound.url());
        bound.serve().await?;
        client.close().await;
        return Ok(());
    }

    let bound = server.bind_local(0).await?;
    let token = bound.generated_token().unwrap_or_default().to_owned();
    let running = bound.spawn();
    let addr = running.local_addr().to_string();

    // Run 1: the request. The server's question stops it.
    let ask = json!({"threadId": "signup", "runId": "run-1",
                     "messages": [{"id": "m1", "role": "user", "content": "Sign me up."}]});
    let (_, body) = http(&addr, &token, "POST", "/agent", &ask).await?;
    let finished = sse_events(&body).pop().unwrap_or(Value::Null);
    println!("run 1 finished: {}", finished["outcome"]["type"]);
    let question = finished["outcome"]["interrupts"][0].clone();
    print_form(&question);

    // What the console sends for a form: the resume entry, `{"action": "accept", "content":
    // <the fields>}` as its payload. First an answer the server's schema refuses.
    let answer = |run: &str, content: Value| {
        json!({"threadId": "signup", "runId": run, "messages": [],
               "resume": [{"interruptId": question["id"], "status": "resolved",
                           "payload": {"action": "accept", "content": content}}]})
    };
    let too_big = json!({"name": "Ada Lovelace", "check": true, "integer": 500});
    let (status, body) = http(&addr, &token, "POST", "/agent", &answer("run-2", too_big)).await?;
    let refusal: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let why = refusal["message"]
        .as_str()
        .and_then(|m| m.split_once("schema: "));
    println!(
        "integer 500: {status} {} ({})",
        refusal["code"],
        why.map_or("", |(_, why)| why)
    );

    // Then a valid one: the call is issued again and the server gets the form.
    let form = json!({"name": "Ada Lovelace", "check": true, "integer": 7});
    println!("submitted: {form}");
    let (_, body) = http(&addr, &token, "POST", "/agent", &answer("run-3", form)).await?;
    for e in sse_events(&body) {
        match e["type"].as_str().unwrap_or_default() {
            "TOOL_CALL_RESULT" => {
                let result = e["content"].as_str().unwrap_or_default();
                for line in result.lines().filter(|l| l.starts_with("- ")) {
                    println!("the server got: {line}");
                }
            }
            "TEXT_MESSAGE_CONTENT" => println!("reply: {}", e["delta"].as_str().unwrap_or("")),
            "RUN_FINISHED" => println!("run 3 finished: {}", e["outcome"]["type"]),
            _ => {}
        }
    }
    running.shutdown().await?;
    client.close().await;
    Ok(())
}

/// What the console renders for `question`: the server's message, the choices its response
/// schema offers, and the form's fields (required ones marked with `*`).
fn print_form(question: &Value) {
    println!(
        "the server asks: {}",
        question["message"].as_str().unwrap_or("")
    );
    let choices = question["responseSchema"]["oneOf"].as_array();
    for choice in choices.into_iter().flatten() {
        let Some(action) = choice["properties"]["action"]["const"].as_str() else {
            continue;
        };
        println!("  button: {action}");
        let content = &choice["properties"]["content"];
        let required: Vec<&str> = content["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let fields = content["properties"].as_object().into_iter().flatten();
        for (name, field) in fields {
            let mark = if required.contains(&name.as_str()) {
                "*"
            } else {
                ""
            };
            let kind = field["type"].as_str().unwrap_or("any");
            println!("    field {name}{mark} ({kind})");
        }
    }
}
