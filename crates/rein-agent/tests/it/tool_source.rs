//! Tool sources (issue 42, item 4): tools whose list changes while the agent lives are listed
//! again before a model call after a change; a dropped tool is unknown; interventions keyed by
//! name apply; a source never shadows a built tool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rein_agent::Agent;
use rein_core::{
    ToolHandle,
    tool::{BoxFuture, ToolError, ToolOutput, ToolSource},
};
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::ScriptedModel;
use serde_json::json;

use crate::common::results_of;

/// A source whose list the test replaces, counting how often the agent listed it.
#[derive(Clone, Default)]
struct Source {
    names: Arc<Mutex<Vec<&'static str>>>,
    version: Arc<AtomicU64>,
    listed: Arc<AtomicU64>,
}

impl Source {
    fn set(&self, names: &[&'static str]) {
        *self.names.lock().unwrap() = names.to_vec();
        self.version.fetch_add(1, Ordering::SeqCst);
    }
}

fn tool(name: &'static str, says: &'static str) -> ToolHandle {
    ToolHandle::from_fn(
        name,
        "a tool",
        json!({"type": "object"}),
        move |_, _| async move { Ok(ToolOutput::text(says)) },
    )
}

impl ToolSource for Source {
    fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }
    fn tools(&self) -> BoxFuture<'_, Result<Vec<ToolHandle>, ToolError>> {
        self.listed.fetch_add(1, Ordering::SeqCst);
        let names = self.names.lock().unwrap().clone();
        Box::pin(async move {
            Ok(names
                .into_iter()
                .map(|n| tool(n, "from the source"))
                .collect())
        })
    }
}

/// Every tool result of the conversation, in order.
fn all_results(agent: &Agent) -> Vec<(String, String, bool)> {
    agent.messages().iter().flat_map(results_of).collect()
}

fn offered(model: &ScriptedModel, call: usize) -> Vec<String> {
    model.requests()[call]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

#[tokio::test]
async fn a_tool_source_is_listed_again_after_a_change_between_turns() {
    let source = Source::default();
    source.set(&["x", "local"]);
    let model = ScriptedModel::builder()
        .record_requests(true)
        .tool_use("t1", "x", json!({}))
        .tool_use("t2", "local", json!({}))
        .text("turn 1 done")
        .tool_use("t3", "x", json!({}))
        .tool_use("t4", "y", json!({}))
        .text("turn 2 done")
        .build();
    let denied = Intervention::named("no-y").before_tool_call(|ev, _| {
        if ev.tool_use().name == "y" {
            BeforeToolCallAction::deny("y is not allowed")
        } else {
            BeforeToolCallAction::Proceed
        }
    });
    let mut agent = Agent::builder()
        .model(model.clone())
        .tool(tool("local", "built"))
        .tool_source(source.clone())
        .intervention(denied)
        .build()
        .unwrap();

    agent.invoke("one").await.unwrap();
    // Listed once for the three model calls of the turn (no change in between); the built
    // `local` is not shadowed by the source's.
    assert_eq!(source.listed.load(Ordering::SeqCst), 1);
    assert_eq!(offered(&model, 0), ["local", "x"]);
    let results = all_results(&agent);
    assert_eq!(results[0], ("t1".into(), "from the source".into(), false));
    assert_eq!(results[1], ("t2".into(), "built".into(), false));

    // The source drops `x` and offers `y`: the next turn sees the new list.
    source.set(&["y"]);
    agent.invoke("two").await.unwrap();
    assert_eq!(source.listed.load(Ordering::SeqCst), 2);
    assert_eq!(offered(&model, 3), ["local", "y"]);
    let results = all_results(&agent);
    assert_eq!(results[2], ("t3".into(), "Unknown tool: x".into(), true));
    assert_eq!(results[3].0, "t4");
    assert!(results[3].1.contains("y is not allowed"), "{results:?}");
    assert!(results[3].2);
}
