//! Human approval: a handler returns `Confirm` before any `delete_file` call. The agent stops
//! with `StopReason::Interrupt`; the question is asked on the terminal (y/N) and the answer is
//! sent back as an interrupt response, which resumes the run. The answer is bound to the exact
//! call it was given for. When stdin is not a terminal (CI, a pipe), the example says so and
//! passes a pre-emptive answer through the invocation state instead, so it still finishes.
//! Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example delete_approval
//! ```

use std::io::{BufRead, IsTerminal, Write};

use rein::prelude::*;
use serde_json::{Value, json};

/// Asks before deleting; takes a pre-emptive answer from the invocation state when given.
fn delete_approval() -> Intervention {
    Intervention::named("delete-approval").before_tool_call(|ev, cx| {
        let call = ev.tool_use();
        if call.name != "delete_file" {
            return BeforeToolCallAction::Proceed;
        }
        let path = call.input["path"].as_str().unwrap_or("?");
        let mut confirm = Confirm::new(format!("Delete {path}?"));
        if let Some(answer) = cx.invocation_state().get("approve_deletes") {
            confirm = confirm.with_response(answer.clone());
        }
        BeforeToolCallAction::Confirm(confirm)
    })
}

/// Reads y/N from the terminal; `None` when stdin is closed.
fn ask(question: &Value) -> Option<String> {
    print!("{} [y/N] ", question.as_str().unwrap_or("Approve?"));
    std::io::stdout().flush().ok();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_owned()),
    }
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let delete_file = ToolHandle::from_sync_fn(
        "delete_file",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |input, _cx| {
            Ok(ToolOutput::text(format!(
                "deleted {}",
                input["path"].as_str().unwrap_or_default()
            )))
        },
    );
    let model = ScriptedModel::builder()
        .tool_use(
            "t1",
            "delete_file",
            json!({"path": "/tmp/report-draft.txt"}),
        )
        .text("Done.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(delete_file)
        .intervention(delete_approval())
        .build()?;

    let mut input = Input::text("Clean up the report draft.");
    if !std::io::stdin().is_terminal() {
        println!(
            "stdin is not a terminal: answering \"y\" pre-emptively through the invocation state\n"
        );
        input = input.with_state(json!({"approve_deletes": "y"}));
    }
    let mut result = agent.invoke(input).await?;
    while result.stop_reason == StopReason::Interrupt {
        let mut answers = Vec::new();
        for interrupt in &result.interrupts {
            println!("[interrupt] {} asks (id {})", interrupt.name, interrupt.id);
            let answer = ask(&interrupt.reason).unwrap_or_else(|| {
                println!("\nstdin is empty: using the pre-emptive answer \"y\"");
                "y".to_owned()
            });
            answers.push(interrupt.answer(answer));
        }
        result = agent.invoke(answers).await?;
    }
    for r in agent.messages()[2].tool_results() {
        println!(
            "tool result: [{}] {}",
            if r.is_error() { "error" } else { "ok" },
            r.text()
        );
    }
    for d in &result.decisions {
        println!(
            "decision: {} {:?} {:?}: {}",
            d.handler,
            d.action,
            d.outcome,
            d.text.as_deref().unwrap_or("")
        );
    }
    println!("answer: {}", result.text());
    Ok(())
}
