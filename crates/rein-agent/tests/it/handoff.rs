//! Handoffs between agents (SPEC §9.2): the transfer tool, the run going on with the other
//! agent, the limit, a denied handoff, injection staleness, and a caller's handoff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::*;
use rein_agent::{Agent, AgentEvent, Checkpoint, Pause, TurnInterceptor};
use rein_core::{
    Error, ToolHandle, audit::DecisionAction, id::InjectionId, result::HandoffRecord,
    tool::ToolOutput,
};
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::ScriptedModel;
use serde_json::json;

fn refunds(model: &ScriptedModel) -> Agent {
    Agent::builder()
        .name("refunds")
        .system_prompt("You handle refunds.")
        .model(model.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_model_hands_off_and_the_other_agent_answers_over_the_same_history() {
    let triage_model = ScriptedModel::builder()
        .tool_use("h1", "transfer_to_refunds", json!({}))
        .build();
    let refunds_model = ScriptedModel::builder().text("Refund issued.").build();
    let mut agent = agent(triage_model.clone())
        .name("triage")
        .system_prompt("You route requests.")
        .handoff(refunds(&refunds_model))
        .build()
        .unwrap();
    assert!(agent.tool_names().contains(&"transfer_to_refunds"));
    let mut stream = agent.stream("I want my money back");
    let mut handoffs = Vec::new();
    let mut result = None;
    while let Some(ev) = stream.next().await {
        match ev.unwrap() {
            AgentEvent::Handoff { from, to } => handoffs.push((from, to)),
            AgentEvent::Finished(r) => result = Some(r),
            _ => {}
        }
    }
    drop(stream);
    let r = result.unwrap();
    assert_eq!(r.text(), "Refund issued.");
    assert_eq!(handoffs, [("triage".to_owned(), "refunds".to_owned())]);
    assert_eq!(
        r.handoffs,
        [HandoffRecord::new("triage", "refunds", Some("h1".into()))]
    );
    let audit = r
        .decisions
        .iter()
        .find(|d| d.handler == "rein:handoff")
        .unwrap();
    assert_eq!(audit.action, DecisionAction::Handoff);
    assert_eq!(audit.text.as_deref(), Some("triage -> refunds"));
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("h1".into(), "Transferred to refunds.".into(), false)]
    );
    // The refunds agent's request: its own system prompt, the whole conversation.
    let req = &refunds_model.requests()[0];
    assert_eq!(req.system_prompt.as_deref(), Some("You handle refunds."));
    assert_eq!(req.messages.len(), 3);
    assert_eq!(
        agent.name(),
        "refunds",
        "the next invocation goes on with refunds"
    );
    assert_eq!(agent.state().get("rein:agent"), Some(json!("refunds")));
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn an_intervention_may_deny_a_handoff() {
    let triage_model = ScriptedModel::builder()
        .tool_use("h1", "transfer_to_refunds", json!({}))
        .text("I will help you myself.")
        .build();
    let refunds_model = ScriptedModel::builder().text("never").build();
    let mut agent = agent(triage_model)
        .name("triage")
        .handoff(refunds(&refunds_model))
        .intervention(Intervention::named("no-refunds").before_tool_call(|ev, _| {
            if ev.tool_use().name.starts_with("transfer_to_") {
                BeforeToolCallAction::deny("refunds are closed today")
            } else {
                BeforeToolCallAction::Proceed
            }
        }))
        .build()
        .unwrap();
    let r = agent.invoke("refund please").await.unwrap();
    assert_eq!(r.text(), "I will help you myself.");
    assert!(r.handoffs.is_empty());
    assert!(refunds_model.requests().is_empty());
    assert_eq!(agent.name(), "triage");
}

#[tokio::test]
async fn handoffs_per_invocation_are_bounded() {
    let c_model = ScriptedModel::builder().text("never").build();
    let b_model = ScriptedModel::builder()
        .tool_use("h2", "transfer_to_c", json!({}))
        .text("b stays")
        .build();
    let c = Agent::builder()
        .name("c")
        .model(c_model.clone())
        .build()
        .unwrap();
    let b = Agent::builder()
        .name("b")
        .model(b_model)
        .handoff(c)
        .build()
        .unwrap();
    let a_model = ScriptedModel::builder()
        .tool_use("h1", "transfer_to_b", json!({}))
        .build();
    let mut agent = agent(a_model)
        .name("a")
        .handoff(b)
        .max_handoffs(1)
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.text(), "b stays");
    assert_eq!(r.handoffs.len(), 1);
    let last_results = results_of(&agent.messages()[4]);
    assert_eq!(
        last_results,
        vec![("h2".into(), "Error: handoff limit (1) reached".into(), true)]
    );
    assert!(c_model.requests().is_empty());
}

#[tokio::test]
async fn the_caller_may_hand_off_between_invocations() {
    let refunds_model = ScriptedModel::builder().text("Refund issued.").build();
    let mut agent = agent(ScriptedModel::builder().text("never").build())
        .name("triage")
        .handoff(refunds(&refunds_model))
        .build()
        .unwrap();
    assert!(matches!(agent.hand_off("billing"), Err(Error::UnknownAgent(n)) if n == "billing"));
    agent.hand_off("refunds").unwrap();
    let r = agent.invoke("refund order 7").await.unwrap();
    assert_eq!(r.text(), "Refund issued.");
    agent.hand_off("triage").unwrap();
    assert_eq!(agent.name(), "triage");
}

#[tokio::test]
async fn two_agents_with_one_name_fail_the_build() {
    let other = Agent::builder()
        .name("triage")
        .model(ScriptedModel::builder().build())
        .build()
        .unwrap();
    let err = agent(ScriptedModel::builder().build())
        .name("triage")
        .handoff(other)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("duplicate agent name"), "{err}");
}

/// A tool (`work`) of both agents: it injects a message from 8 threads, then the model goes
/// on. Every id is consumed or rejected exactly once, whatever the handoffs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injections_across_handoffs_are_each_consumed_or_rejected_exactly_once() {
    let slot: Arc<Mutex<Option<TurnInterceptor>>> = Arc::default();
    let injected: Arc<Mutex<Vec<InjectionId>>> = Arc::default();
    let work = {
        let (slot, injected) = (slot.clone(), injected.clone());
        ToolHandle::from_fn(
            "work",
            "Works while others steer.",
            json!({"type": "object"}),
            move |_, _| {
                let (slot, injected) = (slot.clone(), injected.clone());
                async move {
                    let i = slot.lock().unwrap().clone().unwrap();
                    let threads: Vec<_> = (0..8)
                        .map(|t| {
                            let (i, injected) = (i.clone(), injected.clone());
                            std::thread::spawn(move || {
                                for k in 0..25 {
                                    if let Ok(id) = i.inject(format!("steer {t}/{k}")) {
                                        injected.lock().unwrap().push(id);
                                    }
                                }
                            })
                        })
                        .collect();
                    for t in threads {
                        t.join().unwrap();
                    }
                    Ok(ToolOutput::text("worked"))
                }
            },
        )
    };
    let b_model = ScriptedModel::builder()
        .tool_use("w2", "work", json!({}))
        .tool_use("w3", "work", json!({}))
        .text("b done")
        .build();
    let b = Agent::builder()
        .name("b")
        .model(b_model)
        .tool(work.clone())
        .build()
        .unwrap();
    let a_model = ScriptedModel::builder()
        .response(
            rein_models::ScriptedResponse::new()
                .tool_use("w1", "work", json!({}))
                .tool_use("h1", "transfer_to_b", json!({})),
        )
        .build();
    let mut agent = agent(a_model)
        .name("a")
        .tool(work)
        .handoff(b)
        .build()
        .unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let fates: Arc<Mutex<HashMap<InjectionId, Vec<String>>>> = Arc::default();
    let f = fates.clone();
    i.on_consumed(move |id, _| {
        f.lock()
            .unwrap()
            .entry(id)
            .or_default()
            .push("consumed".into())
    });
    let f = fates.clone();
    i.on_rejected(move |id, _, reason| {
        f.lock()
            .unwrap()
            .entry(id)
            .or_default()
            .push(reason.to_owned())
    });
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.text(), "b done");
    let injected = injected.lock().unwrap().clone();
    assert_eq!(injected.len(), 3 * 200);
    let fates = fates.lock().unwrap();
    for id in &injected {
        let fate = &fates[id];
        assert_eq!(fate.len(), 1, "{id}: {fate:?}");
    }
    // What `a` had queued when control passed to `b` is stale; `b`'s own are delivered.
    let stale = fates.values().filter(|f| f[0] == "stale").count();
    let consumed = fates.values().filter(|f| f[0] == "consumed").count();
    assert_eq!(stale, 200, "a's items");
    assert_eq!(consumed, 400, "b's items");
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn an_input_filter_rewrites_what_the_next_agent_continues_with() {
    use rein_agent::Handoff;
    use rein_core::{Message, Role};
    let user_words = |history: &[Message]| -> Vec<Message> {
        history
            .iter()
            .filter(|m| m.role == Role::User && m.tool_results().next().is_none())
            .cloned()
            .collect()
    };
    let run = |filter: fn(&[Message]) -> Vec<Message>| async move {
        let triage_model = ScriptedModel::builder()
            .tool_use("h1", "transfer_to_refunds", json!({}))
            .build();
        let refunds_model = ScriptedModel::builder().text("Refund issued.").build();
        let mut agent = agent(triage_model)
            .name("triage")
            .handoff(Handoff::to(refunds(&refunds_model)).input_filter(filter))
            .build()
            .unwrap();
        agent.invoke("refund A-7").await.unwrap();
        (agent, refunds_model)
    };
    let (agent, refunds_model) = run(user_words).await;
    assert_eq!(
        refunds_model.requests()[0].messages.len(),
        1,
        "the user's words only"
    );
    assert_eq!(agent.messages().len(), 2);
    assert_history_valid(agent.messages());
    // A filter that breaks the history is not applied.
    let (_, refunds_model) = run(|_| Vec::new()).await;
    assert_eq!(refunds_model.requests()[0].messages.len(), 3);
    let _ = user_words;
}

/// Each injected item's text and fate (`consumed` or the rejection reason), in order.
fn fates(i: &TurnInterceptor) -> Arc<Mutex<Vec<(String, String)>>> {
    let fates: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let f = fates.clone();
    i.on_consumed(move |_, m| f.lock().unwrap().push((m.text(), "consumed".into())));
    let f = fates.clone();
    i.on_rejected(move |_, m, reason| f.lock().unwrap().push((m.text(), reason.into())));
    fates
}

/// An item injected after the handoff is checked by the new agent's interventions: `b`
/// refuses steering, `a` (which would admit it) no longer decides.
#[tokio::test]
async fn items_injected_after_a_handoff_are_checked_by_the_new_agents_interventions() {
    let slot: Arc<Mutex<Option<TurnInterceptor>>> = Arc::default();
    let b_model = ScriptedModel::builder()
        .tool_use("r1", "research", json!({"inject": "drop the refund"}))
        .text("b done")
        .build();
    let b = Agent::builder()
        .name("b")
        .model(b_model.clone())
        .tool(injecting_tool(slot.clone()))
        .intervention(
            Intervention::named("no-steering").before_invocation(|ev, _| {
                if ev.is_injected() {
                    rein_interventions::BeforeInvocationAction::deny("b takes no steering")
                } else {
                    rein_interventions::BeforeInvocationAction::Proceed
                }
            }),
        )
        .build()
        .unwrap();
    let a_model = ScriptedModel::builder()
        .tool_use("h1", "transfer_to_b", json!({}))
        .build();
    let mut agent = agent(a_model).name("a").handoff(b).build().unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let fates = fates(&i);
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.text(), "b done");
    assert_eq!(
        *fates.lock().unwrap(),
        [(
            "drop the refund".to_owned(),
            "DENIED: b takes no steering".to_owned()
        )]
    );
    let denied = r
        .decisions
        .iter()
        .find(|d| d.handler == "no-steering")
        .unwrap();
    assert_eq!(denied.action, DecisionAction::Deny);
    assert!(
        b_model.requests()[1]
            .messages
            .iter()
            .all(|m| !m.text().contains("drop the refund"))
    );
}

/// A transfer and a tool needing approval in one turn: the run pauses with the handoff
/// pending. An item injected during the pause was queued for `a`; the resume finishes the
/// tool phase, the handoff happens at that boundary (SPEC §9.2), and the item is `stale`.
#[tokio::test]
async fn an_item_injected_while_a_handoff_waits_on_an_approval_is_stale_after_the_resume() {
    let log = Log::default();
    let b_model = ScriptedModel::builder().text("b here").build();
    let b = Agent::builder()
        .name("b")
        .model(b_model.clone())
        .build()
        .unwrap();
    let a_model = ScriptedModel::builder()
        .response(
            rein_models::ScriptedResponse::new()
                .tool_use("h1", "transfer_to_b", json!({}))
                .tool_use("e1", "echo", json!({"text": "logged"})),
        )
        .build();
    let mut agent = agent(a_model.clone())
        .name("a")
        .tool(echo_tool(&log))
        .handoff(b)
        .intervention(Intervention::named("approval").before_tool_call(|ev, _| {
            if ev.tool_use().name == "echo" {
                BeforeToolCallAction::confirm("Echo?")
            } else {
                BeforeToolCallAction::Proceed
            }
        }))
        .build()
        .unwrap();
    let i = agent.interceptor();
    let fates = fates(&i);
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, rein_core::stream::StopReason::Interrupt);
    assert!(r.handoffs.is_empty(), "not before the phase completes");
    assert_eq!(agent.name(), "a");
    let Some(Pause::Tools(tools)) = agent.pending_interrupts().map(|p| p.pause()) else {
        panic!("paused in the tool phase");
    };
    assert_eq!(tools.handoff.as_ref().unwrap().to, "b");
    // Injected while the run waits for the human.
    i.inject("and cc the manager").unwrap();
    assert!(
        matches!(agent.hand_off("b"), Err(Error::InterruptsPending)),
        "the caller cannot hand off a paused run"
    );

    let id = r.interrupts[0].clone();
    let r = agent.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "b here");
    assert_eq!(log.take(), ["ran echo:logged"]);
    assert_eq!(
        r.handoffs,
        [HandoffRecord::new("a", "b", Some("h1".into()))]
    );
    assert_eq!(agent.name(), "b");
    assert_eq!(
        *fates.lock().unwrap(),
        [("and cc the manager".to_owned(), "stale".to_owned())],
        "rejected once, never delivered"
    );
    assert!(
        b_model.requests()[0]
            .messages
            .iter()
            .all(|m| !m.text().contains("cc the manager"))
    );
    assert_eq!(a_model.requests().len(), 1);
    assert_history_valid(agent.messages());
}

/// Two transfers in one response: one hands off, the other is answered with an error.
#[tokio::test]
async fn a_second_transfer_in_one_turn_is_an_error_result() {
    let b_model = ScriptedModel::builder().text("b here").build();
    let c_model = ScriptedModel::builder().text("c here").build();
    let named = |name: &str, model: &ScriptedModel| {
        Agent::builder()
            .name(name)
            .model(model.clone())
            .build()
            .unwrap()
    };
    let a_model = ScriptedModel::builder()
        .response(
            rein_models::ScriptedResponse::new()
                .tool_use("h1", "transfer_to_b", json!({}))
                .tool_use("h2", "transfer_to_c", json!({})),
        )
        .build();
    let mut agent = agent(a_model)
        .name("a")
        .handoff(named("b", &b_model))
        .handoff(named("c", &c_model))
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.handoffs.len(), 1);
    let to = r.handoffs[0].to.clone();
    let results = results_of(&agent.messages()[2]);
    // Which transfer claims the handoff depends on which runs first (they run concurrently).
    for (id, text, is_error) in &results {
        let target = if id == "h1" { "b" } else { "c" };
        if target == to {
            assert_eq!(
                (text.as_str(), *is_error),
                (format!("Transferred to {to}.").as_str(), false)
            );
        } else {
            assert_eq!(
                (text.as_str(), *is_error),
                ("Error: another handoff is under way", true)
            );
        }
    }
    assert_eq!(agent.name(), to);
    let answered = if to == "b" { &b_model } else { &c_model };
    let idle = if to == "b" { &c_model } else { &b_model };
    assert_eq!(r.text(), format!("{to} here"));
    assert_eq!(answered.requests().len(), 1);
    assert!(idle.requests().is_empty());
    assert_history_valid(agent.messages());
}

/// What a durable engine does between invocations: the session read from the first agent
/// is restored into a freshly built one, which goes on with the agent in control.
#[tokio::test]
async fn a_restored_session_goes_on_with_the_agent_in_control() {
    let build = |triage: ScriptedModel, refunds_model: &ScriptedModel| {
        agent(triage)
            .name("triage")
            .handoff(refunds(refunds_model))
            .build()
            .unwrap()
    };
    let first_refunds = ScriptedModel::builder().text("Refund issued.").build();
    let mut first = build(
        ScriptedModel::builder()
            .tool_use("h1", "transfer_to_refunds", json!({}))
            .build(),
        &first_refunds,
    );
    first.invoke("I want my money back").await.unwrap();
    assert_eq!(first.name(), "refunds");
    let session = first.checkpoint();

    let triage = ScriptedModel::builder().text("triage again").build();
    let refunds_model = ScriptedModel::builder().text("Refund sent.").build();
    let mut second = build(triage.clone(), &refunds_model);
    assert_eq!(second.name(), "triage");
    second.restore(session);
    assert_eq!(second.name(), "refunds", "the agent in control is restored");
    assert_eq!(second.messages(), first.messages());
    assert_eq!(second.message_ids(), first.message_ids());
    let r = second.invoke("and the shipping?").await.unwrap();
    assert_eq!(r.text(), "Refund sent.");
    assert!(triage.requests().is_empty());
    assert_history_valid(second.messages());
}

/// A restored conversation whose last assistant message asked for tools that never answered
/// (the process died in the tool phase) is repaired, as a session store's restore is.
#[tokio::test]
async fn a_restored_session_with_unanswered_tool_uses_is_repaired() {
    let mut cut = agent(
        ScriptedModel::builder()
            .tool_use("t1", "transfer_to_refunds", json!({}))
            .build(),
    )
    .name("triage")
    .handoff(refunds(&ScriptedModel::builder().text("unused").build()))
    .build()
    .unwrap();
    cut.invoke("hi").await.unwrap();
    // The conversation as it stood before the tool's result was stored.
    let messages: Vec<_> = cut.messages()[..2].to_vec();
    let ids = cut.message_ids()[..2].iter().copied();
    let session = Checkpoint::new(
        ids.zip(messages).collect(),
        Default::default(),
        json!(null),
        None,
    );
    let mut agent = agent(ScriptedModel::builder().text("ok").build())
        .build()
        .unwrap();
    agent.restore(session);
    assert_eq!(agent.messages().len(), 3);
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("t1".into(), "Tool was interrupted.".into(), true)]
    );
    assert_history_valid(agent.messages());
}
