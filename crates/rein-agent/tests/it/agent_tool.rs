//! Agents as tools: results, roll-up of usage and decisions, streams tagged with the agent
//! path, the parent's interventions on the call, and interrupts through the levels (SPEC §9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use rein_agent::{Agent, AgentEvent, AgentTool, TOOL_CANCELLED};
use rein_core::{
    ToolHandle,
    audit::{DecisionAction, EventKind},
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

/// A parent's model: calls `researcher` with `input` (as `r1`), then answers `ok`.
fn delegating(input: &str) -> ScriptedModel {
    ScriptedModel::builder()
        .tool_use("r1", "researcher", json!({"input": input}))
        .text("ok")
        .build()
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
    let parent = delegating("x");
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
    let parent = delegating("x");
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
    let rein_agent::Pause::Tools(tools) = p.pause() else {
        panic!("paused in the tool phase: {:?}", p.pause());
    };
    assert!(
        tools.children.contains_key("m1"),
        "the manager's checkpoint is kept"
    );

    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
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
    let id = r.interrupts[0].clone();
    agent.invoke(vec![id.answer("no")]).await.unwrap();
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

/// Cancels `agent`'s invocation once `slow` (a model deeper down) has been called; the
/// invocation must end long before that model's 30 s delay would: the child stops, not just
/// the parent.
async fn invoke_and_cancel(
    agent: &mut Agent,
    slow: &ScriptedModel,
) -> rein_core::result::AgentResult {
    let (cancel, slow) = (agent.cancel_handle(), slow.clone());
    tokio::spawn(async move {
        while slow.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(10), agent.invoke("go"))
        .await
        .expect("the cancelled child kept the parent waiting")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    r
}

#[tokio::test]
async fn cancelling_the_parent_mid_child_leaves_history_valid() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder()
        .text("slow")
        .call_delay(Duration::from_secs(30))
        .build();
    let parent = delegating("x");
    let mut agent = agent(parent.clone())
        .tool(researcher(&child, &built))
        .build()
        .unwrap();
    let r = invoke_and_cancel(&mut agent, &child).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(built.load(Ordering::SeqCst), 1, "the child was running");
    assert_eq!(child.requests().len(), 1, "its model call had started");
    assert_eq!(parent.requests().len(), 1);
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("r1".into(), TOOL_CANCELLED.into(), true)]
    );
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn cancelling_the_top_mid_grandchild_leaves_history_valid() {
    let top = ScriptedModel::builder()
        .tool_use("m1", "manager", json!({"input": "clean up"}))
        .text("never")
        .build();
    let manager = ScriptedModel::builder()
        .tool_use("c1", "clerk", json!({"input": "delete the draft"}))
        .text("never")
        .build();
    let clerk = ScriptedModel::builder()
        .tool_use("d1", "delete", json!({}))
        .call_delay(Duration::from_secs(30))
        .build();
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = three_levels(&top, &manager, &clerk, &deletes);
    let r = invoke_and_cancel(&mut agent, &clerk).await;
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    let calls = (
        top.requests().len(),
        manager.requests().len(),
        clerk.requests().len(),
    );
    assert_eq!(calls, (1, 1, 1), "the grandchild's model call had started");
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("m1".into(), TOOL_CANCELLED.into(), true)]
    );
    assert!(agent.pending_interrupts().is_none());
    assert_history_valid(agent.messages());
}

/// The parent's interventions on a call of `researcher`.
fn on_delegation(action: fn() -> BeforeToolCallAction) -> Intervention {
    Intervention::named("delegation").before_tool_call(move |ev, _| {
        if ev.tool_use().name == "researcher" {
            action()
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

#[tokio::test]
async fn the_parent_may_confirm_a_sub_agent_call_and_the_child_runs_once_approved() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder().text("found it").build();
    let parent = delegating("x");
    let mut agent = agent(parent.clone())
        .tool(researcher(&child, &built))
        .intervention(on_delegation(|| {
            BeforeToolCallAction::confirm("Delegate to the researcher?")
        }))
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = r.interrupts[0].clone();
    assert_eq!(
        i.id,
        EventKind::BeforeToolCall.interrupt_id("r1", "delegation")
    );
    assert_eq!(
        i.name, "delegation",
        "the parent's own interrupt, not a child's"
    );
    assert_eq!(
        built.load(Ordering::SeqCst),
        0,
        "not built before the answer"
    );
    assert!(child.requests().is_empty());

    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "ok");
    assert_eq!(built.load(Ordering::SeqCst), 1, "built once");
    assert_eq!(child.requests().len(), 1);
    assert_eq!(child.requests()[0].messages[0].text(), "x");
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("r1".into(), "found it".into(), false)]
    );
    assert_eq!(parent.requests().len(), 2);
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn the_parent_may_transform_a_sub_agent_call_and_the_child_gets_the_new_prompt() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder().text("trouvé").build();
    let parent = delegating("solar power");
    let mut agent = agent(parent)
        .tool(researcher(&child, &built))
        .intervention(on_delegation(|| {
            BeforeToolCallAction::transform(|draft| {
                let prompt = draft.input["input"].as_str().unwrap_or_default();
                draft.input = json!({"input": format!("{prompt}, in French")});
            })
        }))
        .build()
        .unwrap();
    agent.invoke("go").await.unwrap();
    assert_eq!(
        child.requests()[0].messages[0].text(),
        "solar power, in French"
    );
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("r1".into(), "trouvé".into(), false)]
    );
}

#[tokio::test]
async fn the_parent_may_guide_a_sub_agent_call_and_the_child_never_runs() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder().text("never").build();
    let parent = delegating("x");
    let mut agent = agent(parent)
        .tool(researcher(&child, &built))
        .intervention(on_delegation(|| {
            BeforeToolCallAction::guide("ask the archivist first")
        }))
        .build()
        .unwrap();
    agent.invoke("go").await.unwrap();
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![(
            "r1".into(),
            "GUIDANCE: [delegation] ask the archivist first".into(),
            true
        )]
    );
    assert_eq!(built.load(Ordering::SeqCst), 0);
    assert!(child.requests().is_empty());
}

#[tokio::test]
async fn a_factory_that_fails_is_an_error_result() {
    let parent = delegating("x");
    // No model: the build fails.
    let broken = AgentTool::new("researcher", "Researches.", || Agent::builder().build());
    let mut agent = agent(parent).tool(broken).build().unwrap();
    assert_eq!(agent.invoke("go").await.unwrap().text(), "ok");
    let (id, text, is_error) = results_of(&agent.messages()[2]).remove(0);
    assert_eq!(id, "r1");
    assert!(
        text.starts_with("Error: the sub-agent cannot be built: "),
        "{text}"
    );
    assert!(is_error);
}

#[tokio::test]
async fn the_three_level_stream_tags_the_grandchild_events_with_its_path() {
    let top = ScriptedModel::builder()
        .tool_use("m1", "manager", json!({"input": "file it"}))
        .text("all filed")
        .build();
    let manager = ScriptedModel::builder()
        .tool_use("c1", "clerk", json!({"input": "file the report"}))
        .text("the clerk filed it")
        .build();
    let clerk = ScriptedModel::builder().text("filed").build();
    let mut agent = three_levels(&top, &manager, &clerk, &Arc::default());
    let mut stream = agent.stream("file the report");
    let mut tagged = Vec::new();
    let mut result = None;
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            AgentEvent::SubAgent { agent, event } => tagged.push((agent, *event)),
            AgentEvent::Finished(r) => result = Some(r),
            _ => {}
        }
    }
    drop(stream);
    assert_eq!(result.unwrap().text(), "all filed");
    let text_of = |path: &str| -> String {
        tagged
            .iter()
            .filter(|(a, _)| a == path)
            .filter_map(|(_, e)| match e {
                AgentEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(text_of("manager/clerk"), "filed");
    assert_eq!(text_of("manager"), "the clerk filed it");
    assert!(
        tagged
            .iter()
            .all(|(_, e)| !matches!(e, AgentEvent::SubAgent { .. })),
        "flattened, not nested twice"
    );
    let clerk_done = tagged
        .iter()
        .any(|(a, e)| a == "manager/clerk" && matches!(e, AgentEvent::Finished(_)));
    assert!(
        !clerk_done,
        "a child's result is its tool's result, not a stream event"
    );
}

/// SPEC §9.2: injected through the parent's handle while the child runs, an item waits for
/// the parent's next boundary — the child's model never sees it.
#[tokio::test]
async fn an_item_injected_while_a_sub_agent_runs_goes_to_the_parent() {
    use std::sync::Mutex;
    let slot: Arc<Mutex<Option<rein_agent::TurnInterceptor>>> = Arc::default();
    let child = ScriptedModel::builder()
        .tool_use(
            "s1",
            "research",
            json!({"inject": "also cite the 2024 survey"}),
        )
        .text("three sources agree")
        .build();
    let child_model = child.clone();
    let tool_slot = slot.clone();
    let researcher = AgentTool::new("researcher", "Researches a topic.", move || {
        Agent::builder()
            .name("researcher")
            .model(child_model.clone())
            .tool(injecting_tool(tool_slot.clone()))
            .build()
    });
    let parent = ScriptedModel::builder()
        .tool_use("r1", "researcher", json!({"input": "solar power"}))
        .text("done")
        .build();
    let mut agent = agent(parent.clone()).tool(researcher).build().unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let consumed: Arc<Mutex<Vec<String>>> = Arc::default();
    let c = consumed.clone();
    i.on_consumed(move |_, m| c.lock().unwrap().push(m.text()));
    i.on_rejected(|_, m, reason| panic!("{} rejected: {reason}", m.text()));
    let r = agent.invoke("research solar").await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(*consumed.lock().unwrap(), ["also cite the 2024 survey"]);
    let child_saw = child.requests();
    assert_eq!(child_saw.len(), 2, "the child finished its run");
    assert!(
        child_saw
            .iter()
            .flat_map(|q| q.messages.iter())
            .all(|m| !m.text().contains("2024 survey")),
        "the child's model never sees it"
    );
    let parent_saw = parent.requests()[1].messages.last().unwrap().clone();
    assert_eq!(results_of(&parent_saw)[0].1, "three sources agree");
    assert!(parent_saw.text().contains("also cite the 2024 survey"));
    assert_history_valid(agent.messages());
}

/// A sub-agent whose input waits for approval (a `before_invocation` confirm), answering
/// `done` once admitted.
fn gated(model: &ScriptedModel, built: &Arc<AtomicUsize>) -> AgentTool {
    let (model, built) = (model.clone(), built.clone());
    AgentTool::new("worker", "Works once let in.", move || {
        built.fetch_add(1, Ordering::SeqCst);
        Agent::builder()
            .name("worker")
            .model(model.clone())
            .intervention(Intervention::named("gate").before_invocation(|_, _| {
                rein_interventions::BeforeInvocationAction::confirm("Start?")
            }))
            .build()
    })
}

/// SPEC §4 through §9.1: two sub-agent calls of one turn both pause; a resume that answers
/// one finishes that child and raises the other's interrupt again (same id); answering it
/// finishes the turn. A finished child is not built again.
#[tokio::test]
async fn two_paused_sub_agent_calls_are_answered_one_at_a_time() {
    let built = Arc::new(AtomicUsize::new(0));
    let child = ScriptedModel::builder().text("done").cycle().build();
    let parent = ScriptedModel::builder()
        .response(
            rein_models::ScriptedResponse::new()
                .tool_use("w1", "worker", json!({"input": "one"}))
                .tool_use("w2", "worker", json!({"input": "two"})),
        )
        .text("both done")
        .build();
    let mut agent = agent(parent.clone())
        .tool(gated(&child, &built))
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let mut asked = r.interrupts.clone();
    asked.sort_by(|a, b| a.id.cmp(&b.id));
    let ids: Vec<String> = asked.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), 2);
    assert!(
        ids[0].starts_with("v1:agent:w1:v1:before_invocation:"),
        "{ids:?}"
    );
    assert!(
        ids[1].starts_with("v1:agent:w2:v1:before_invocation:"),
        "{ids:?}"
    );
    assert!(child.requests().is_empty(), "both inputs held");

    let r = agent.invoke(vec![asked[0].answer("yes")]).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt, "w2 still waits");
    let again: Vec<&str> = r.interrupts.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(again, [ids[1].as_str()], "asked again, under the same id");
    let asked_again = r.interrupts[0].clone();
    assert_ne!(asked_again.nonce, asked[1].nonce, "in another pause");
    assert_eq!(child.requests().len(), 1, "w1's child ran");
    assert_eq!(child.requests()[0].messages[0].text(), "one");
    let p = agent.pending_interrupts().unwrap();
    let rein_agent::Pause::Tools(tools) = p.pause() else {
        panic!("paused in the tool phase: {:?}", p.pause());
    };
    assert_eq!(tools.completed.len(), 1, "w1's result is kept");
    assert_eq!(parent.requests().len(), 1, "the parent's model waits");

    let built_before = built.load(Ordering::SeqCst);
    let r = agent.invoke(vec![asked_again.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "both done");
    assert_eq!(
        built.load(Ordering::SeqCst) - built_before,
        1,
        "only w2's child is built again"
    );
    assert_eq!(child.requests().len(), 2);
    assert_eq!(child.requests()[1].messages[0].text(), "two");
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![
            ("w1".into(), "done".into(), false),
            ("w2".into(), "done".into(), false)
        ]
    );
    assert_history_valid(agent.messages());
}

/// SPEC §3.8 through §9.1: a child's result held by an `after_tool_call` confirm is answered
/// at the top; the child goes on with the held result — its tool does not run again.
#[tokio::test]
async fn a_result_held_in_a_child_is_released_from_the_top_without_running_the_tool_again() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let clerk = ScriptedModel::builder()
        .tool_use("d1", "delete", json!({"path": "draft"}))
        .text("deleted it")
        .build();
    let (clerk_model, d) = (clerk.clone(), deletes.clone());
    let clerk_tool = AgentTool::new("clerk", "Deletes files.", move || {
        Agent::builder()
            .name("clerk")
            .model(clerk_model.clone())
            .tool(delete_tool(&d))
            .intervention(Intervention::named("review").after_tool_call(|_, _| {
                rein_interventions::AfterToolCallAction::confirm("Show the result?")
            }))
            .build()
    });
    let top = ScriptedModel::builder()
        .tool_use("c1", "clerk", json!({"input": "delete the draft"}))
        .text("all done")
        .build();
    let mut agent = agent(top.clone()).tool(clerk_tool).build().unwrap();
    let r = agent.invoke("tidy").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = r.interrupts[0].clone();
    assert!(
        i.id.starts_with("v1:agent:c1:v1:after_tool_call:d1:"),
        "{}",
        i.id
    );
    assert_eq!(i.name, "clerk/review");
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        1,
        "the tool ran; its result is held"
    );

    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "all done");
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "not run again");
    let clerk_saw = clerk.requests()[1].messages.last().unwrap().clone();
    assert_eq!(
        results_of(&clerk_saw),
        vec![("d1".into(), "deleted".into(), false)]
    );
    assert_eq!(
        (top.requests().len(), clerk.requests().len()),
        (2, 2),
        "no model asked again"
    );
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("c1".into(), "deleted it".into(), false)]
    );
    assert_history_valid(agent.messages());
}

/// Issue 43, item 5: an agent that runs as a tool keeps its own conversation manager and
/// budget. The parent's tight window trims only the parent; the child's requests carry its
/// whole tool loop, and the child's own summarizing window summarizes the child (its record
/// reaches the parent's audit under the child's path).
#[tokio::test]
async fn a_sub_agent_keeps_its_own_manager_and_budget() {
    use rein_agent::{SummarizingWindow, TokenWindow};
    use rein_core::stream::Usage;
    use rein_models::ScriptedResponse;
    let none = || Usage::new(0, 1);
    let child_model = ScriptedModel::builder()
        .record_requests(true)
        .response(
            ScriptedResponse::new()
                .tool_use("c1", "echo", json!({"text": "y".repeat(2_000)}))
                .usage(none()),
        )
        .response(
            ScriptedResponse::new()
                .tool_use("c2", "echo", json!({"text": "z".repeat(2_000)}))
                .usage(none()),
        )
        .response(ScriptedResponse::new().text("found it").usage(none()))
        .build();
    let summarizer = ScriptedModel::builder()
        .text("Two long echoes.")
        .cycle()
        .build();
    let child = child_model.clone();
    let log = Log::default();
    let child_log = log.clone();
    let researcher = AgentTool::new("researcher", "Researches.", move || {
        Agent::builder()
            .name("researcher")
            .model(child.clone())
            .tool(echo_tool(&child_log))
            // What the child knew before (a turn the summary can take).
            .messages(vec![
                rein_core::Message::user("earlier"),
                rein_core::Message::assistant("w".repeat(2_000)),
            ])
            .conversation_manager(SummarizingWindow::new(1_200).summarizer(summarizer.clone()))
            .build()
    });
    let parent_model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("r1", "researcher", json!({"input": "look"}))
                .usage(none()),
        )
        .response(ScriptedResponse::new().text("done").usage(none()))
        .build();
    let mut parent = agent(parent_model)
        .tool(researcher)
        // Far tighter than the child's history: it would trim the child if it reached it.
        .conversation_manager(TokenWindow::new(50))
        .build()
        .unwrap();
    let r = parent.invoke("research").await.unwrap();
    assert_eq!(r.text(), "done");
    // The child's last request held its whole loop: its own window, not the parent's.
    let last = child_model.requests().last().unwrap().clone();
    assert_eq!(
        last.messages.len(),
        7,
        "the earlier turn, the input, two tool pairs"
    );
    // The child summarized itself under its own budget, in its path.
    let summary = r
        .decisions
        .iter()
        .find(|d| d.handler == "rein:summary")
        .expect("the child's summary record");
    assert_eq!(summary.agent.as_deref(), Some("researcher"));
    assert_eq!(summary.action, DecisionAction::Transform);
    assert_history_valid(parent.messages());
}
