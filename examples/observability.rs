//! Observability: an agent's run traced into an OpenTelemetry backend (Phoenix, Jaeger,
//! Langfuse...) with `rein-otel`. The run has a deny, a failing tool, a guide that makes the model
//! try again and a confirm answered on resume: each decision is a `run_guardrail` span under the
//! span of the call it guarded. Runs on the scripted model.
//!
//! ```sh
//! # A local Phoenix (see docs/observability.md), then:
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:6006 cargo run -p rein-examples --example observability
//! ```
//!
//! Without `OTEL_EXPORTER_OTLP_ENDPOINT` nothing is exported; the run and its audit are printed.

use std::sync::atomic::{AtomicBool, Ordering};

use rein::prelude::*;
use serde_json::json;

/// The agent: three tools, three handlers, a scripted model.
fn agent() -> Result<Agent, rein::Error> {
    let delete_file = ToolHandle::from_sync_fn(
        "delete_file",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |input, _cx| Ok(ToolOutput::text(format!("deleted {}", input["path"]))),
    );
    let fetch_report = ToolHandle::from_sync_fn(
        "fetch_report",
        "Fetches the weekly report.",
        json!({"type": "object"}),
        |_, _| Err(ToolError::msg("report service timed out")),
    );
    let no_system_files = Intervention::named("no-system-files").before_tool_call(|ev, _| {
        let path = ev.tool_use().input["path"].as_str().unwrap_or_default();
        if path.starts_with("/etc") {
            BeforeToolCallAction::deny("system files are off limits")
        } else {
            BeforeToolCallAction::Proceed
        }
    });
    let approve_deletes = Intervention::named("approve-deletes").before_tool_call(|ev, _| {
        let call = ev.tool_use();
        match call.input["path"].as_str() {
            Some(path) if call.name == "delete_file" && !path.starts_with("/etc") => {
                BeforeToolCallAction::Confirm(Confirm::new(format!("Delete {path}?")))
            }
            _ => BeforeToolCallAction::Proceed,
        }
    });
    // Guides the first text reply only: the model is asked again.
    let guided = AtomicBool::new(false);
    let tone = Intervention::named("tone").after_model_call(move |ev, _| {
        let text = ev.response().map(|r| r.message.text()).unwrap_or_default();
        if text.contains("meh") && !guided.swap(true, Ordering::Relaxed) {
            AfterModelCallAction::guide("Answer politely.")
        } else {
            AfterModelCallAction::Proceed
        }
    });
    let model = ScriptedModel::builder()
        .tool_use("t1", "delete_file", json!({"path": "/etc/passwd"}))
        .tool_use("t2", "fetch_report", json!({}))
        .text("meh, no report")
        .tool_use("t3", "delete_file", json!({"path": "/tmp/draft.txt"}))
        .text("I deleted the draft; the report service is down, sorry.")
        .build();
    Agent::builder()
        .name("assistant")
        .model(model)
        .tool(delete_file)
        .tool(fetch_report)
        .interventions([no_system_files, approve_deletes, tone])
        .build()
}

fn print_decision(d: &DecisionRecord) {
    let asked = d.confirmation.as_ref().map(|c| c.status.as_str());
    println!(
        "decision: {} {:?} {:?} on {} {}",
        d.handler,
        d.action,
        d.outcome,
        d.event,
        asked.unwrap_or_default()
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One call: OTLP from the OTEL_* variables, a global tracing subscriber, a flushing guard.
    let otel = match std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        Ok(endpoint) => {
            println!("exporting to {endpoint}");
            Some(rein_otel::init()?)
        }
        Err(_) => {
            println!("OTEL_EXPORTER_OTLP_ENDPOINT is not set: nothing is exported");
            None
        }
    };
    let mut agent = agent()?;
    let mut result = agent.invoke("Tidy up and get me the report.").await?;
    while result.stop_reason == StopReason::Interrupt {
        let answers = result
            .interrupts
            .iter()
            .map(|i| {
                println!("asked: {i} -> approved");
                i.answer(true)
            })
            .collect::<Vec<_>>();
        for d in &result.decisions {
            print_decision(d);
        }
        result = agent.invoke(answers).await?;
    }
    for d in &result.decisions {
        print_decision(d);
    }
    println!("reply: {}", result.text());
    if let Some(otel) = otel {
        otel.shutdown()?; // flushes: the spans are in the backend when this returns
        println!("exported: invoke_agent assistant (2 traces: the run and its resume)");
    }
    Ok(())
}
