//! Invoice extractor: a typed answer (docs/structured-output.md). The agent looks the customer
//! up with a tool, then answers with an `Invoice` — checked against its JSON Schema and type,
//! sent back with the errors when it does not match (here the first answer gives the total as
//! text), and held to a business rule by an intervention (totals over 10 000 need a second
//! look, counted in the same retry budget).
//!
//! Runs on a real provider when one is configured (`OPENAI_API_KEY` / `OPENAI_BASE_URL`, or
//! `ANTHROPIC_API_KEY`), else on the embedded scripted model. It says which.
//!
//! ```sh
//! cargo run -p rein-examples --example invoice_extractor
//! ```

use rein::prelude::*;
use serde::Deserialize;
use serde_json::json;

/// What the agent extracts.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Invoice {
    /// The customer's id, as the `find_customer` tool gives it.
    customer_id: String,
    /// The lines of the invoice.
    lines: Vec<Line>,
    /// The total in cents.
    total_cents: u64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Line {
    description: String,
    amount_cents: u64,
}

const EMAIL: &str = "Hi, please bill ACME Corp for 3 hours of consulting (450.00) and the \
                     travel (120.50). Thanks, Jo";

fn scripted_model() -> ScriptedModel {
    ScriptedModel::builder()
        .tool_use("t1", "find_customer", json!({"name": "ACME Corp"}))
        // Not the schema: the total is text. The agent sends the errors back.
        .text(r#"{"customer_id": "C-042", "lines": [], "total_cents": "570.50"}"#)
        .text(
            r#"{"customer_id": "C-042", "lines": [
                {"description": "Consulting, 3 hours", "amount_cents": 45000},
                {"description": "Travel", "amount_cents": 12050}],
              "total_cents": 57050}"#,
        )
        .build()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), rein::Error> {
    let (model, description) = rein_examples::demo_model(scripted_model());
    println!("model: {description}\n");

    let find_customer = ToolHandle::from_sync_fn(
        "find_customer",
        "Finds a customer's id by name.",
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        |_input, _cx| Ok(ToolOutput::text("C-042")),
    );
    // A business rule the schema cannot say: a handler sees only answers that match it.
    let limit = Intervention::named("credit-limit").after_model_call(|ev, _| {
        let total = ev
            .response()
            .and_then(|r| serde_json::from_str::<serde_json::Value>(&r.message.text()).ok())
            .and_then(|v| v["total_cents"].as_u64());
        match total {
            Some(t) if t > 1_000_000 => {
                AfterModelCallAction::guide("totals over 10 000 need a second look: recheck")
            }
            _ => AfterModelCallAction::Proceed,
        }
    });
    let mut agent = Agent::builder()
        .shared_model(model)
        .system_prompt("You turn billing emails into invoices.")
        .tool(find_customer)
        .intervention(limit)
        .output::<Invoice>()
        .max_output_retries(2)
        .build()?;

    let result = agent.invoke(EMAIL).await?;
    for d in &result.decisions {
        println!(
            "decision  {} {:?}  {}",
            d.handler,
            d.action,
            d.text.as_deref().unwrap_or("")
        );
    }
    let invoice: Invoice = result.output()?;
    println!("\ncustomer  {}", invoice.customer_id);
    for line in &invoice.lines {
        println!("line      {} {}", line.description, line.amount_cents);
    }
    println!("total     {}", invoice.total_cents);
    Ok(())
}
