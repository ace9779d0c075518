//! A human in the loop at every point that can wait for one: an input held until approved
//! (approved with an edit), a request to the provider approved before it is sent, a message
//! injected mid-run parked until someone answers it on the interceptor (the run goes on), and a
//! guide that never takes escalated to a human at the retry cap. Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example approve_anywhere
//! ```

use rein::OnRetryLimit;
use rein::prelude::*;
use serde_json::json;

/// Payment requests need a human's yes before they reach the agent (inputs and injected
/// messages alike).
fn payment_gate() -> Intervention {
    Intervention::named("payment-gate").before_invocation(|ev, _| {
        if ev.messages.iter().any(|m| m.text().contains('$')) {
            BeforeInvocationAction::confirm(json!({
                "prompt": "Allow this payment request?",
                "input": ev.messages.iter().map(Message::text).collect::<Vec<_>>(),
            }))
        } else {
            BeforeInvocationAction::Proceed
        }
    })
}

/// New text marked confidential does not leave for the provider without a yes.
fn egress() -> Intervention {
    Intervention::named("egress").before_model_call(|ev, _| {
        let confidential = ev
            .request
            .messages
            .last()
            .is_some_and(|m| m.text().contains("confidential"));
        if confidential {
            BeforeModelCallAction::confirm("Send confidential text to the provider?")
        } else {
            BeforeModelCallAction::Proceed
        }
    })
}

/// Wants a source for every figure; the model never gives one.
fn citations() -> Intervention {
    Intervention::named("citations").after_model_call(|ev, _| match ev.response() {
        Some(r) if r.message.text().contains('%') => {
            AfterModelCallAction::guide("cite a source for every figure")
        }
        _ => AfterModelCallAction::Proceed,
    })
}

fn lookup() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "lookup",
        "Looks up a vendor.",
        json!({"type": "object", "properties": {"vendor": {"type": "string"}}}),
        |input, _| {
            Ok(ToolOutput::text(format!(
                "{}: account 4411",
                input["vendor"]
            )))
        },
    )
}

/// Prints the pause and answers it: the human of this example.
async fn answer(
    agent: &mut Agent,
    paused: AgentResult,
    answer: serde_json::Value,
) -> Result<AgentResult, rein::Error> {
    let i = &paused.interrupts[0];
    println!("asked  {}  {i}", i.name);
    let done = agent.invoke(vec![i.answer(answer)]).await?;
    println!("reply  {}", done.text());
    Ok(done)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let model = ScriptedModel::builder()
        .text("Paying ACME $100.")
        .text("The annex limits liability.")
        .tool_use("t1", "lookup", json!({"vendor": "ACME"}))
        .tool_use("t2", "lookup", json!({"vendor": "Bolt"}))
        .tool_use("t3", "lookup", json!({"vendor": "Cargo"}))
        .text("All three found; I noted the $9 payment to ACME.")
        .text("Revenue grew 12%.")
        .text("Revenue grew about 12%.")
        // A model takes a while: the caller sees each event before the run's next step.
        .call_delay(std::time::Duration::from_millis(5))
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(lookup())
        .intervention(payment_gate())
        .intervention(egress())
        .intervention(citations())
        .max_hook_retries(1)
        .on_retry_limit(OnRetryLimit::Confirm)
        .build()?;

    // 1. An input, held until approved; the human lowers the amount.
    println!("-- input");
    let paused = agent.invoke("Pay $120 to ACME").await?;
    let edit = Approval::approve().with_edit("Pay $100 to ACME");
    answer(&mut agent, paused, edit.into()).await?;
    println!("stored {}", agent.messages()[0].text());

    // 2. A request, approved before it is sent.
    println!("-- request");
    let paused = agent.invoke("Summarize the confidential annex").await?;
    answer(&mut agent, paused, json!("yes")).await?;

    // 3. A message injected mid-run: parked, answered on the interceptor, delivered at the
    //    next turn boundary; the run never stops.
    println!("-- injected message");
    let steer = agent.interceptor();
    steer.on_consumed(|_, m| println!("delivered  {}", m.text()));
    let mut stream = agent.stream("Look up ACME, Bolt and Cargo");
    let mut injected = false;
    while let Some(event) = stream.next().await {
        match event? {
            AgentEvent::ToolResult(_) if !injected => {
                injected = true;
                steer.inject(Message::user("also pay $9 to ACME"))?;
            }
            AgentEvent::InjectionAwaitingApproval { interrupts, .. } => {
                for p in steer.pending_approvals() {
                    println!("parked  {}", p.message.text());
                }
                // A UI would ask here; this one says yes.
                steer.answer(interrupts[0].answer(true))?;
            }
            AgentEvent::Finished(r) => println!("reply  {}", r.text()),
            _ => {}
        }
    }
    drop(stream);

    // 4. Guidance that does not take: at the retry cap a human decides instead of a hard deny.
    println!("-- retry cap");
    let paused = agent.invoke("How did revenue do?").await?;
    answer(&mut agent, paused, json!("yes")).await?;
    Ok(())
}
