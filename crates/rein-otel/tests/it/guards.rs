//! Two export guards in one process: closing one leaves export on for the other (agents built
//! while any guard lives time their handlers, and string-array attributes stay arrays).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_agent::Agent;
use rein_core::ToolHandle;
use rein_core::tool::ToolOutput;
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::ScriptedModel;
use serde_json::json;

use crate::common::SWITCHES;

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

#[test]
fn closing_one_guard_leaves_export_on_for_the_other() {
    // No other test's guard may live meanwhile (the phoenix tests make some).
    let _turn = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let first = rein_otel::__discarding(rein_otel::Otel::builder());
        let second = rein_otel::__discarding(rein_otel::Otel::builder());
        assert!(timed_decision().await, "exporting: handlers are timed");
        drop(first);
        assert!(timed_decision().await, "the second guard still exports");
        drop(second);
        assert!(!timed_decision().await, "no guard: export off");
    });
}
