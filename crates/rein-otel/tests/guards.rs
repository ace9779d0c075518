//! Two export guards in one process: closing one leaves export on for the other (agents built
//! while any guard lives time their handlers, and string-array attributes stay arrays).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_agent::Agent;
use rein_core::ToolHandle;
use rein_core::tool::ToolOutput;
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::ScriptedModel;
use serde_json::json;

async fn timed_decision() -> bool {
    let mut agent = Agent::builder()
        .model(
            ScriptedModel::builder()
                .tool_use("t1", "rm", json!({}))
                .text("ok")
                .build(),
        )
        .tool(ToolHandle::from_sync_fn(
            "rm",
            "Removes.",
            json!({"type": "object"}),
            |_, _| Ok(ToolOutput::text("gone")),
        ))
        .intervention(
            Intervention::named("no-rm").before_tool_call(|_, _| BeforeToolCallAction::deny("no")),
        )
        .build()
        .unwrap();
    let result = agent.invoke("go").await.unwrap();
    result.decisions[0].duration.is_some()
}

#[tokio::test]
async fn closing_one_guard_leaves_export_on_for_the_other() {
    let first = rein_otel::__discarding(rein_otel::Otel::builder());
    let second = rein_otel::__discarding(rein_otel::Otel::builder());
    assert!(timed_decision().await, "exporting: handlers are timed");
    drop(first);
    assert!(timed_decision().await, "the second guard still exports");
    drop(second);
    assert!(!timed_decision().await, "no guard: export off");
}
