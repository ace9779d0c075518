//! Fail closed: an authorization check that cannot reach its policy service must block the
//! action. With `OnError::Deny` the handler's error becomes a deny: the tool does not run and
//! the model gets `DENIED: Handler threw: <error>`. (Compare `fail_open_logger`.) Runs on the
//! scripted model.
//!
//! ```sh
//! cargo run -p rein-examples --example fail_closed_auth
//! ```

use std::time::Duration;

use rein::prelude::*;
use serde_json::json;

/// Asks a policy service whether the caller may run the tool. The service times out here.
struct PolicyCheck;

impl PolicyCheck {
    async fn allowed(&self, user: &str, tool: &str) -> Result<bool, HandlerError> {
        let lookup = async {
            tokio::time::sleep(Duration::from_secs(5)).await; // the service hangs
            Ok::<bool, HandlerError>(user == "root" || tool != "transfer_funds")
        };
        tokio::time::timeout(Duration::from_millis(50), lookup)
            .await
            .map_err(|_| HandlerError::new("policy service timed out after 50 ms"))?
    }
}

impl InterventionHandler for PolicyCheck {
    fn name(&self) -> &str {
        "policy-check"
    }

    fn on_error(&self) -> OnError {
        OnError::Deny // no answer from the policy service means no
    }

    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL
    }

    async fn before_tool_call(
        &self,
        ev: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        let user = cx
            .invocation_state()
            .get("user")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let tool = &ev.tool_use().name;
        Ok(if self.allowed(user, tool).await? {
            BeforeToolCallAction::Proceed
        } else {
            BeforeToolCallAction::deny(format!("{user} may not call {tool}"))
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), rein::Error> {
    println!("model: the embedded scripted demo model (no API key needed)\n");
    let transfer = ToolHandle::from_sync_fn(
        "transfer_funds",
        "Moves money between accounts.",
        json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
        |_, _| {
            println!("  (transfer_funds ran!)");
            Ok(ToolOutput::text("transferred"))
        },
    );
    let model = ScriptedModel::builder()
        .tool_use("t1", "transfer_funds", json!({"amount": 250}))
        .text("I couldn't complete the transfer: the authorization check failed.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(transfer)
        .intervention(PolicyCheck)
        .build()?;

    let input = Input::text("Send 250 to savings.").with_state(json!({"user": "ann"}));
    let result = agent.invoke(input).await?;
    for r in agent.messages()[2].tool_results() {
        println!(
            "tool result: [{}] {}",
            if r.is_error() { "error" } else { "ok" },
            r.text()
        );
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
