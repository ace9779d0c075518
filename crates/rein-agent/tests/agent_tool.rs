//! Agents as tools: results, roll-up of usage and decisions, streams tagged with the agent
//! path, the parent's interventions on the call, and interrupts through the levels (SPEC §9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use rein_agent::{Agent, AgentEvent, AgentTool};
use rein_core::{
    ToolHandle,
    audit::{DecisionAction, EventKind},
    message::InterruptResponse,
    stream::StopReason,
    tool::ToolOutput,
};
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::ScriptedModel;
use serde_json::json;

/// A `delete` tool that counts its runs.
fn delete_tool(runs: &Arc<AtomicUsize>) -> ToolHandle {
    let runs = runs.clone();
    ToolHandle::from_sync_fn(
        "delete",
        "Deletes a file.",
        json!({"type": "object"}),
        move |_, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::text("deleted"))
        },
    )
}

fn approval() -> Intervention {
    Intervention::named("approval").before_tool_call(|ev, _| {
        if ev.tool_use().name == "delete" {
            BeforeToolCallAction::confirm("Delete the draft?")
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

fn researcher(model: &ScriptedModel, built: &Arc<AtomicUsize>) -> AgentTool {
    let (model, built) = (model.clone(), built.clone());
    AgentTool::new("researcher", "Researches a topic.", move || {
        built.fetch_add(1, Ordering::SeqCst);
        Agent::builder()
            .name("researcher")
            .model(model.clone())
            .intervention(
                Intervention::named("no-shell")
                    .before_tool_call(|_, _| BeforeToolCallAction::deny("no")),
            )
            .build()
    })
}

#[tokio::test]
async fn a_sub_agent_answers_as_a_tool_and_its_usage_and_decisions_roll_up() {
    let child = ScriptedModel::builder()
        .tool_use("s1", "shell", json!({}))
        .text("three sources agree")
        .build();
    let built = Arc::new(AtomicUsize::new(0));
    let parent = ScriptedModel::builder()
        .tool_use("r1", "researcher", json!({"input": "solar power"}))
        .text("done")
        .build();
    let mut agent = agent(parent.clone())
        .tool(researcher(&child, &built))
        .build()
        .unwrap();
    let r = agent.invoke("research solar").await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("r1".into(), "three sources agree".into(), false)]
    );
    assert_eq!(child.requests()[0].messages[0].text(), "solar power");
    let denied = r
        .decisions
        .iter()
        .find(|d| d.handler == "no-shell")
        .unwrap();
    assert_eq!(denied.agent.as_deref(), Some("researcher"));
    assert_eq!(denied.action, DecisionAction::Deny);
    // The child's two model calls (4 output tokens each), not in the parent's own usage.
    assert_eq!(r.sub_agent_usage["researcher"].output_tokens, 8);
    assert_eq!(r.usage.output_tokens, 8, "the parent's own two calls only");
    assert_eq!(built.load(Ordering::SeqCst), 1);
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn the_parent_may_deny_a_sub_agent_call_and_the_child_never_runs() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder().text("never").build();
    let parent = ScriptedModel::builder()
        .tool_use("r1", "researcher", json!({"input": "x"}))
        .text("ok")
        .build();
    let mut agent = agent(parent)
        .tool(researcher(&child, &built))
        .intervention(
            Intervention::named("no-delegation").before_tool_call(|ev, _| {
                if ev.tool_use().name == "researcher" {
                    BeforeToolCallAction::deny("do it yourself")
                } else {
                    BeforeToolCallAction::Proceed
                }
            }),
        )
        .build()
        .unwrap();
    agent.invoke("go").await.unwrap();
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("r1".into(), "DENIED: do it yourself".into(), true)]
    );
    assert_eq!(built.load(Ordering::SeqCst), 0);
    assert!(child.requests().is_empty());
}

#[tokio::test]
async fn the_sub_agent_stream_reaches_the_parent_tagged_with_its_path() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder().text("found it").build();
    let parent = ScriptedModel::builder()
        .tool_use("r1", "researcher", json!({"input": "x"}))
        .text("ok")
        .build();
    let mut agent = agent(parent)
        .tool(researcher(&child, &built))
        .build()
        .unwrap();
    let mut stream = agent.stream("go");
    let mut tagged = Vec::new();
    while let Some(ev) = stream.next().await {
        if let AgentEvent::SubAgent { agent, event } = ev.unwrap() {
            tagged.push((agent, *event));
        }
    }
    assert!(tagged.iter().all(|(a, _)| a == "researcher"));
    assert!(
        tagged
            .iter()
            .any(|(_, e)| matches!(e, AgentEvent::TextDelta(t) if t == "found it")),
        "{tagged:?}"
    );
}

/// top → manager → clerk, whose `delete` needs approval. Models shared across builds, so a
/// rebuilt child goes on with its script.
fn three_levels(
    top: &ScriptedModel,
    manager: &ScriptedModel,
    clerk: &ScriptedModel,
    deletes: &Arc<AtomicUsize>,
) -> Agent {
    let (clerk, deletes) = (clerk.clone(), deletes.clone());
    let clerk_tool = AgentTool::new("clerk", "Files and deletes.", move || {
        Agent::builder()
            .name("clerk")
            .model(clerk.clone())
            .tool(delete_tool(&deletes))
            .intervention(approval())
            .build()
    });
    let manager_model = manager.clone();
    let manager_tool = AgentTool::new("manager", "Delegates.", move || {
        Agent::builder()
            .name("manager")
            .model(manager_model.clone())
            .tool(clerk_tool.clone())
            .build()
    });
    agent(top.clone()).tool(manager_tool).build().unwrap()
}

#[tokio::test]
async fn a_confirm_two_levels_down_stops_the_top_and_resumes_where_it_stopped() {
    let top = ScriptedModel::builder()
        .tool_use("m1", "manager", json!({"input": "clean up"}))
        .text("all done")
        .build();
    let manager = ScriptedModel::builder()
        .tool_use("c1", "clerk", json!({"input": "delete the draft"}))
        .text("clerk finished")
        .build();
    let clerk = ScriptedModel::builder()
        .tool_use("d1", "delete", json!({"path": "draft"}))
        .text("deleted it")
        .build();
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = three_levels(&top, &manager, &clerk, &deletes);
    let r = agent.invoke("tidy").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = r.interrupts[0].clone();
    let leaf = EventKind::BeforeToolCall.interrupt_id("d1", "approval");
    assert_eq!(i.id, format!("v1:agent:m1:v1:agent:c1:{leaf}"));
    assert_eq!(i.name, "manager/clerk/approval");
    assert_eq!(i.reason, json!("Delete the draft?"));
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    let calls = (
        top.requests().len(),
        manager.requests().len(),
        clerk.requests().len(),
    );
    assert_eq!(calls, (1, 1, 1));
    let p = agent.pending_interrupts().unwrap();
    assert!(
        p.tool_states.contains_key("m1"),
        "the manager's run is kept"
    );

    let r = agent
        .invoke(vec![InterruptResponse::new(&i.id, "yes")])
        .await
        .unwrap();
    assert_eq!(r.text(), "all done");
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "the delete ran once");
    // Nobody's model was asked again for what it had already answered.
    let calls = (
        top.requests().len(),
        manager.requests().len(),
        clerk.requests().len(),
    );
    assert_eq!(calls, (2, 2, 2));
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("m1".into(), "clerk finished".into(), false)]
    );
    let approved = r
        .decisions
        .iter()
        .find(|d| d.handler == "approval")
        .unwrap();
    assert_eq!(approved.agent.as_deref(), Some("manager/clerk"));
    assert!(r.sub_agent_usage.contains_key("manager/clerk"));
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn a_rejection_at_the_top_reaches_the_grandchild() {
    let top = ScriptedModel::builder()
        .tool_use("m1", "manager", json!({"input": "clean up"}))
        .text("all done")
        .build();
    let manager = ScriptedModel::builder()
        .tool_use("c1", "clerk", json!({"input": "delete"}))
        .text("clerk refused")
        .build();
    let clerk = ScriptedModel::builder()
        .tool_use("d1", "delete", json!({}))
        .text("not deleted")
        .build();
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = three_levels(&top, &manager, &clerk, &deletes);
    let r = agent.invoke("tidy").await.unwrap();
    let id = r.interrupts[0].id.clone();
    agent
        .invoke(vec![InterruptResponse::new(&id, "no")])
        .await
        .unwrap();
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    let clerk_saw = clerk.requests()[1].messages.last().unwrap().clone();
    assert_eq!(
        results_of(&clerk_saw),
        vec![(
            "d1".into(),
            "CONFIRMATION_FAILED: Delete the draft?".into(),
            true
        )]
    );
}

#[tokio::test]
async fn cancelling_the_parent_mid_child_leaves_history_valid() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder()
        .text("slow")
        .call_delay(Duration::from_secs(30))
        .build();
    let parent = ScriptedModel::builder()
        .tool_use("r1", "researcher", json!({"input": "x"}))
        .text("ok")
        .build();
    let mut agent = agent(parent)
        .tool(researcher(&child, &built))
        .build()
        .unwrap();
    let cancel = agent.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(built.load(Ordering::SeqCst), 1, "the child was running");
    assert_history_valid(agent.messages());
}
