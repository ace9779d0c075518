//! Fail open: an audit logger whose log service is down must not stop the agent. With
//! `OnError::Proceed` the handler's error is logged and recorded in the decision audit, and the
//! tool runs anyway. (Compare `fail_closed_auth`.) Runs on the scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example fail_open_logger
//! ```

use rein::prelude::*;
use serde_json::json;

/// Ships every tool call to a log service, which is down in this demo.
struct AuditLogger;

impl AuditLogger {
    async fn ship(&self, line: String) -> Result<(), std::io::Error> {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("log service unreachable (dropping: {line})"),
        ))
    }
}

impl InterventionHandler for AuditLogger {
    fn name(&self) -> &str {
        "audit-logger"
    }

    fn on_error(&self) -> OnError {
        OnError::Proceed // logging is not worth an outage
    }

    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        let call = ev.tool_use();
        self.ship(format!("{} {}", call.name, call.input)).await?; // any std error converts
        Ok(BeforeToolCallAction::Proceed)
    }
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let weather = ToolHandle::from_sync_fn(
        "weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        |_, _| Ok(ToolOutput::text("14°C, light rain")),
    );
    let model = ScriptedModel::builder()
        .tool_use("t1", "weather", json!({"city": "Lisbon"}))
        .text("It's 14°C with light rain in Lisbon.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(weather)
        .intervention(AuditLogger)
        .build()?;

    let result = agent.invoke("Weather in Lisbon?").await?;
    for r in agent.messages()[2].tool_results() {
        println!("tool result: {}", r.text());
    }
    for d in &result.decisions {
        println!(
            "decision: {} {:?} {:?} (on_error: {:?}): {}",
            d.handler,
            d.action,
            d.outcome,
            d.on_error,
            d.text.as_deref().unwrap_or("")
        );
    }
    println!("answer: {}", result.text());
    Ok(())
}
