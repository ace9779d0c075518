//! Confirm at before_model_call and before_invocation (the invocation's input and injected
//! messages), and escalation at the retry cap (SPEC §3.8, §5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use rein_agent::{AgentEvent, InjectError, Input, OnRetryLimit, TurnInterceptor};
use rein_core::{
    Error, Message, ToolHandle,
    audit::{ConfirmationStatus, DecisionAction, DecisionOutcome, EventKind},
    interrupt::Approval,
    message::InterruptResponse,
    result::InjectionOutcome,
    stream::StopReason,
    tool::ToolOutput,
};
use rein_interventions::{
    AfterModelCallAction, BeforeInvocationAction, BeforeModelCallAction, Intervention,
    policy::{GuideModelCall, MaxModelCalls, PolicyHandler},
};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// before_model_call

/// Asks before any request is sent.
fn egress() -> Intervention {
    Intervention::named("egress")
        .before_model_call(|_, _| BeforeModelCallAction::confirm("Send to the provider?"))
}

#[tokio::test]
async fn confirm_before_model_call_holds_the_request_until_approved() {
    let model = ScriptedModel::builder().text("hi").build();
    let mut agent = agent(model.clone()).intervention(egress()).build().unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = r.interrupts[0].clone();
    assert_eq!(
        i.id,
        EventKind::BeforeModelCall.interrupt_id("m0", "egress")
    );
    assert_eq!(i.reason, json!("Send to the provider?"));
    assert!(i.fingerprint.is_some());
    assert!(model.requests().is_empty(), "nothing was sent");
    assert_eq!(agent.messages().len(), 1, "the prompt is stored");
    assert_eq!(
        r.message.text(),
        "go",
        "the result is about the request's last message"
    );
    assert!(matches!(
        agent.pending_interrupts().unwrap().pause(),
        rein_agent::Pause::Request { .. }
    ));
    let asked = r.decisions.iter().find(|d| d.handler == "egress").unwrap();
    assert_eq!(
        asked.confirmation.as_ref().unwrap().status,
        ConfirmationStatus::Asked
    );

    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "hi");
    assert_eq!(model.requests().len(), 1);
    assert_eq!(model.requests()[0].messages[0].text(), "go");
    assert!(agent.pending_interrupts().is_none());
    assert_history(&agent);
}

#[tokio::test]
async fn confirm_before_model_call_rejected_cancels_the_call() {
    let model = ScriptedModel::builder().text("never").build();
    let mut agent = agent(model.clone()).intervention(egress()).build().unwrap();
    let r = agent.invoke("go").await.unwrap();
    let id = r.interrupts[0].clone();
    let r = agent.invoke(vec![id.answer(false)]).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(r.text(), "CONFIRMATION_FAILED: Send to the provider?");
    assert!(model.requests().is_empty());
    assert_eq!(agent.messages().len(), 2);
    assert_history(&agent);
}

#[tokio::test]
async fn a_deny_after_a_confirm_before_model_call_never_asks() {
    let model = ScriptedModel::builder().text("never").build();
    let mut agent = agent(model.clone())
        .intervention(egress())
        .intervention(
            Intervention::named("budget")
                .before_model_call(|_, _| BeforeModelCallAction::deny("over budget")),
        )
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert!(r.interrupts.is_empty());
    assert_eq!(r.text(), "DENIED: over budget");
    assert!(agent.pending_interrupts().is_none());
    assert_history(&agent);
}

#[tokio::test]
async fn guidance_with_a_pending_confirm_before_model_call_waits_for_the_answer() {
    let model = ScriptedModel::builder().text("ok").build();
    let mut agent = agent(model.clone())
        .intervention(
            Intervention::named("style")
                .before_model_call(|_, _| BeforeModelCallAction::guide("be brief")),
        )
        .intervention(egress())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert_eq!(agent.messages()[0].text(), "go", "no guidance stored yet");
    let style = r.decisions.iter().find(|d| d.handler == "style").unwrap();
    assert_eq!(style.outcome, DecisionOutcome::Overridden);
    let id = r.interrupts[0].clone();
    agent.invoke(vec![id.answer(true)]).await.unwrap();
    let sent = model.requests()[0].messages[0].text();
    assert_eq!(sent.matches("be brief").count(), 1, "{sent}");
    assert_eq!(agent.messages()[0].text().matches("be brief").count(), 1);
    assert_history(&agent);
}

#[tokio::test]
async fn an_approved_request_beside_a_guide_is_audited_applied() {
    // The guide only injects: the approved request is sent, so neither decision is voided.
    let model = ScriptedModel::builder().text("ok").build();
    let mut agent = agent(model.clone())
        .intervention(
            Intervention::named("style")
                .before_model_call(|_, _| BeforeModelCallAction::guide("be brief")),
        )
        .intervention(egress())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    let id = r.interrupts[0].clone();
    let r = agent.invoke(vec![id.answer(true)]).await.unwrap();
    assert_eq!(model.requests().len(), 1, "the request was sent");
    let outcome = |name: &str| {
        let d = r.decisions.iter().find(|d| d.handler == name).unwrap();
        (d.outcome, d.confirmation.as_ref().map(|c| c.status))
    };
    assert_eq!(outcome("style"), (DecisionOutcome::Applied, None));
    assert_eq!(
        outcome("egress"),
        (DecisionOutcome::Applied, Some(ConfirmationStatus::Approved))
    );
}

/// A policy handler built from its spec.
fn policy(name: &str, kind: impl Into<rein_interventions::policy::PolicyKind>) -> PolicyHandler {
    PolicyHandler::new(name, kind).unwrap()
}

#[tokio::test]
async fn a_once_guide_comes_with_the_resumed_request_after_a_pause() {
    // SPEC §3.8: the paused pass sent nothing, so its guidance comes again with the resumed
    // pass — a `once` guide included (the held call is the run's first call).
    let model = ScriptedModel::builder().text("ok").text("again").build();
    let once = GuideModelCall {
        feedback: "be brief".into(),
        once: true,
    };
    let mut agent = agent(model.clone())
        .intervention(policy("style", once))
        .intervention(egress())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let id = r.interrupts[0].clone();
    agent.invoke(vec![id.answer(true)]).await.unwrap();
    let sent = model.requests()[0].messages[0].text();
    assert_eq!(sent.matches("be brief").count(), 1, "{sent}");
    assert_eq!(agent.messages()[0].text().matches("be brief").count(), 1);
    // Once per run: a call of the next run is asked about again, and guided again.
    let r = agent.invoke("more").await.unwrap();
    let id = r.interrupts[0].clone();
    agent.invoke(vec![id.answer(true)]).await.unwrap();
    let sent = model.requests()[1].messages.last().unwrap().text();
    assert_eq!(sent.matches("be brief").count(), 1, "{sent}");
    assert_history(&agent);
}

#[tokio::test]
async fn a_call_held_for_approval_counts_once_against_max_model_calls() {
    // The pass that paused and the resumed pass are one call: `limit: 1` makes exactly one.
    let model = ScriptedModel::builder().text("hi").build();
    let budget = MaxModelCalls {
        limit: 1,
        ..MaxModelCalls::default()
    };
    let mut agent = agent(model.clone())
        .intervention(policy("budget", budget))
        .intervention(egress())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    let id = r.interrupts[0].clone();
    let r = agent.invoke(vec![id.answer(true)]).await.unwrap();
    assert_eq!(r.text(), "hi");
    assert_eq!(model.requests().len(), 1);
    assert!(
        r.decisions.iter().all(|d| d.handler != "budget"),
        "{:?}",
        r.decisions
    );
    assert_history(&agent);
}

#[tokio::test]
async fn an_answer_before_model_call_is_bound_to_the_request_it_approved() {
    // A transform before the confirm puts the caller's state into the request: a resume with
    // another state sends another request, so the human is asked again.
    let model = ScriptedModel::builder().text("ok").build();
    let mut agent = agent(model.clone())
        .intervention(Intervention::named("tag").before_model_call(|ev, _| {
            let tenant = ev
                .invocation_state()
                .get("tenant")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            BeforeModelCallAction::transform(move |req| {
                req.append_user_text(format!("tenant={tenant}"));
            })
        }))
        .intervention(egress())
        .build()
        .unwrap();
    let state = |t: &str| state_of("tenant", t);
    let r = agent
        .invoke(Input::from("go").with_state(state("a")))
        .await
        .unwrap();
    let first = r.interrupts[0].clone();
    let r = agent
        .invoke(Input::from(vec![first.answer("yes")]).with_state(state("b")))
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt, "asked again");
    assert_eq!(r.interrupts[0].id, first.id);
    assert_ne!(r.interrupts[0].fingerprint, first.fingerprint);
    assert!(model.requests().is_empty());
    let id = r.interrupts[0].clone();
    let r = agent
        .invoke(Input::from(vec![id.answer("yes")]).with_state(state("b")))
        .await
        .unwrap();
    assert_eq!(r.text(), "ok");
    assert!(model.requests()[0].messages[0].text().contains("tenant=b"));
    assert_history(&agent);
}

#[tokio::test]
async fn an_edit_of_a_request_is_an_invalid_answer_and_keeps_it_pending() {
    let mut agent = agent(ScriptedModel::builder().text("ok").build())
        .intervention(egress())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    let id = r.interrupts[0].clone();
    let err = agent
        .invoke(vec![id.answer(Approval::approve().with_edit("other"))])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidAnswer { reason, .. } if reason.contains("takes no edit")),
        "{err:?}"
    );
    assert!(matches!(
        agent.pending_interrupts().unwrap().pause(),
        rein_agent::Pause::Request { .. }
    ));
    let r = agent.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "ok");
    assert_history(&agent);
}

#[tokio::test]
async fn every_request_of_a_tool_conversation_is_asked_about_and_tools_answered() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("t1", "echo", json!({"text": "x"}))
        .text("done")
        .build();
    let mut agent = agent(model.clone())
        .tool(echo_tool(&log))
        .intervention(egress())
        .build()
        .unwrap();
    let mut r = agent.invoke("go").await.unwrap();
    let mut rounds = 0;
    while r.stop_reason == StopReason::Interrupt {
        rounds += 1;
        assert_history(&agent);
        let id = r.interrupts[0].clone();
        r = agent.invoke(vec![id.answer("yes")]).await.unwrap();
    }
    assert_eq!(rounds, 2, "one question per request");
    assert_eq!(r.text(), "done");
    assert_eq!(log.take(), vec!["ran echo:x"]);
    assert_history(&agent);
}

// ---------------------------------------------------------------------------------------------
// before_invocation: the invocation's input

/// Asks before an input mentioning money is admitted (injected ones too).
fn money_gate() -> Intervention {
    Intervention::named("money-gate").before_invocation(|ev, _| {
        if ev.messages.iter().any(|m| m.text().contains('$')) {
            BeforeInvocationAction::confirm(json!({"prompt": "Allow a payment request?"}))
        } else {
            BeforeInvocationAction::Proceed
        }
    })
}

/// A held input is not in history: rewinding history (even by nothing) keeps the pause. (It
/// was dropped: the pause named a message id made up for it, found in no history.)
#[tokio::test]
async fn truncating_history_keeps_a_held_input() {
    let model = ScriptedModel::builder().text("paid").build();
    let mut agent = agent(model.clone())
        .intervention(money_gate())
        .build()
        .unwrap();
    let r = agent.invoke("pay $5 to Ann").await.unwrap();
    let i = r.interrupts[0].clone();
    agent.truncate_messages(agent.messages().len());
    assert!(agent.pending_interrupts().is_some(), "still waiting");
    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "paid");
}

#[tokio::test]
async fn confirm_before_invocation_holds_the_input_until_approved() {
    let model = ScriptedModel::builder().text("paid").build();
    let mut agent = agent(model.clone())
        .intervention(money_gate())
        .build()
        .unwrap();
    let r = agent.invoke("pay $5 to Ann").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = r.interrupts[0].clone();
    assert_eq!(
        i.id,
        EventKind::BeforeInvocation.interrupt_id("input", "money-gate")
    );
    assert_eq!(
        i.fingerprint,
        Some(Message::fingerprint_all(&[Message::user("pay $5 to Ann")]))
    );
    assert!(agent.messages().is_empty(), "nothing stored");
    assert!(model.requests().is_empty());
    assert_eq!(r.message.text(), "pay $5 to Ann");
    let p = agent.pending_interrupts().unwrap();
    assert_eq!(
        p.pause(),
        &rein_agent::Pause::Input {
            messages: vec![Message::user("pay $5 to Ann")]
        }
    );
    // A new prompt while it waits is refused.
    assert!(matches!(
        agent.invoke("hello").await,
        Err(Error::InterruptsPending)
    ));

    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "paid");
    assert_eq!(agent.messages()[0].text(), "pay $5 to Ann");
    assert_eq!(model.requests().len(), 1);
    assert_history(&agent);
}

#[tokio::test]
async fn an_answer_before_invocation_is_bound_to_the_input_it_approved() {
    // A transform before the gate stamps the caller's state into the input: a resume with
    // another state holds another input, so the human is asked again.
    let model = ScriptedModel::builder().text("paid").build();
    let mut agent = agent(model.clone())
        .intervention(Intervention::named("stamp").before_invocation(|ev, _| {
            let who = ev
                .invocation_state()
                .get("user")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            BeforeInvocationAction::transform(move |messages| {
                messages.push(Message::user(format!("(from {who})")));
            })
        }))
        .intervention(money_gate())
        .build()
        .unwrap();
    let state = |u: &str| state_of("user", u);
    let r = agent
        .invoke(Input::from("pay $5").with_state(state("ann")))
        .await
        .unwrap();
    let first = r.interrupts[0].clone();
    let r = agent
        .invoke(Input::from(vec![first.answer("yes")]).with_state(state("bob")))
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt, "asked again");
    assert_ne!(r.interrupts[0].fingerprint, first.fingerprint);
    assert!(agent.messages().is_empty());
    assert!(model.requests().is_empty());
    let id = r.interrupts[0].clone();
    let r = agent
        .invoke(Input::from(vec![id.answer("yes")]).with_state(state("bob")))
        .await
        .unwrap();
    assert_eq!(r.text(), "paid");
    assert!(agent.messages()[0].text().contains("(from bob)"));
    assert_history(&agent);
}

#[tokio::test]
async fn confirm_before_invocation_rejected_stores_nothing() {
    let model = ScriptedModel::builder().text("never").build();
    let mut agent = agent(model.clone())
        .intervention(money_gate())
        .build()
        .unwrap();
    let r = agent.invoke("pay $5").await.unwrap();
    let id = r.interrupts[0].clone();
    let r = agent.invoke(vec![id.answer("no")]).await.unwrap();
    assert_eq!(r.text(), "CONFIRMATION_FAILED: Allow a payment request?");
    assert!(agent.messages().is_empty());
    assert!(model.requests().is_empty());
    assert!(agent.pending_interrupts().is_none());
    assert_history(&agent);
}

#[tokio::test]
async fn an_approval_with_an_edit_of_an_input_stores_the_edited_text() {
    let model = ScriptedModel::builder().text("paid").build();
    let mut agent = agent(model.clone())
        .intervention(money_gate())
        .build()
        .unwrap();
    let r = agent.invoke("pay $500 to Ann").await.unwrap();
    let id = r.interrupts[0].clone();
    let r = agent
        .invoke(vec![
            id.answer(Approval::approve().with_edit("pay $50 to Ann")),
        ])
        .await
        .unwrap();
    assert_eq!(r.text(), "paid");
    assert_eq!(agent.messages()[0].text(), "pay $50 to Ann");
    assert_eq!(model.requests()[0].messages[0].text(), "pay $50 to Ann");
    let d = r
        .decisions
        .iter()
        .find(|d| d.handler == "money-gate")
        .unwrap();
    assert_eq!(
        d.confirmation.as_ref().unwrap().status,
        ConfirmationStatus::Approved
    );
    assert_history(&agent);
}

#[tokio::test]
async fn a_guide_after_a_confirm_before_invocation_never_asks() {
    let mut agent = agent(ScriptedModel::builder().text("never").build())
        .intervention(money_gate())
        .intervention(
            Intervention::named("polite")
                .before_invocation(|_, _| BeforeInvocationAction::guide("say please")),
        )
        .build()
        .unwrap();
    let r = agent.invoke("pay $5").await.unwrap();
    assert!(r.interrupts.is_empty());
    assert_eq!(r.text(), "GUIDANCE: [polite] say please");
    assert!(agent.pending_interrupts().is_none());
    assert_history(&agent);
}

#[tokio::test]
async fn a_deny_after_a_confirm_before_invocation_never_asks() {
    let model = ScriptedModel::builder().text("never").build();
    let mut agent = agent(model.clone())
        .intervention(money_gate())
        .intervention(
            Intervention::named("payments-off")
                .before_invocation(|_, _| BeforeInvocationAction::deny("payments are off")),
        )
        .build()
        .unwrap();
    let r = agent.invoke("pay $5").await.unwrap();
    assert!(r.interrupts.is_empty());
    assert_ne!(r.stop_reason, StopReason::Interrupt);
    assert_eq!(r.text(), "DENIED: payments are off");
    assert!(agent.pending_interrupts().is_none());
    assert!(agent.messages().is_empty(), "nothing stored");
    assert!(model.requests().is_empty());
    let gate = r
        .decisions
        .iter()
        .find(|d| d.handler == "money-gate")
        .unwrap();
    assert_eq!(gate.outcome, DecisionOutcome::Overridden);
    assert_history(&agent);
}

#[tokio::test]
async fn discarding_a_held_input_stores_nothing() {
    let mut agent = agent(ScriptedModel::builder().text("hi").build())
        .intervention(money_gate())
        .build()
        .unwrap();
    agent.invoke("pay $5").await.unwrap();
    agent.discard_interrupts();
    assert!(agent.messages().is_empty());
    let r = agent.invoke("hello").await.unwrap();
    assert_eq!(r.text(), "hi");
    assert_history(&agent);
}

// ---------------------------------------------------------------------------------------------
// before_invocation: injected messages are parked, the run goes on

/// A tool (`approve`) that answers every parked injection through the interceptor in `slot`
/// with its `answer` input, and records what it saw pending.
fn approving_tool(slot: Arc<Mutex<Option<TurnInterceptor>>>, log: &Log) -> ToolHandle {
    let log = log.clone();
    ToolHandle::from_fn(
        "approve",
        "Answers parked injections.",
        json!({"type": "object", "properties": {"answer": {}, "try": {"type": "array"}}}),
        move |input: Value, _cx| {
            let slot = slot.clone();
            let log = log.clone();
            async move {
                let i = slot.lock().unwrap().clone().unwrap();
                for p in i.pending_approvals() {
                    log.push(format!("pending {}", p.message.text()));
                    for q in &p.interrupts {
                        // Answers of the wrong shape first (`try`), refused; then `answer`,
                        // if any.
                        for bad in input["try"].as_array().into_iter().flatten() {
                            let refused = match i.answer(q.answer(bad.clone())) {
                                Err(InjectError::InvalidEdit) => "edit".to_owned(),
                                Err(InjectError::InvalidAnswer {
                                    interrupt_id,
                                    reason,
                                }) if interrupt_id == q.id => format!("answer: {reason}"),
                                other => format!("unexpected {other:?}"),
                            };
                            let unchanged = i.pending_approvals() == vec![p.clone()];
                            log.push(format!("refused {refused} (unchanged: {unchanged})"));
                        }
                        if !input["answer"].is_null() {
                            i.answer(q.answer(input["answer"].clone())).unwrap();
                        }
                    }
                }
                Ok(ToolOutput::text("answered"))
            }
        },
    )
}

fn injected_money_gate() -> Intervention {
    Intervention::named("money-gate").before_invocation(|ev, _| {
        if ev.is_injected() && ev.messages.iter().any(|m| m.text().contains('$')) {
            BeforeInvocationAction::confirm("Allow this steering message?")
        } else {
            BeforeInvocationAction::Proceed
        }
    })
}

/// research (injects `inject`) → approve (answers) → research → done.
fn parked_script(answer: Value) -> ScriptedModel {
    ScriptedModel::builder()
        .response(ScriptedResponse::new().tool_use("t1", "research", json!({"inject": "spend $9"})))
        .response(ScriptedResponse::new().tool_use("t2", "approve", json!({ "answer": answer })))
        .response(ScriptedResponse::new().tool_use("t3", "research", json!({})))
        .text("done")
        .build()
}

type Parked = (
    rein_agent::Agent,
    rein_core::result::AgentResult,
    ScriptedModel,
    Vec<AgentEvent>,
    Log,
);

async fn run_parked(answer: Value) -> Parked {
    run_injecting(parked_script(answer), vec![injected_money_gate()]).await
}

/// Streams a run of `model` with the `research` and `approve` tools and these interventions,
/// logging what the interceptor delivers and rejects.
async fn run_injecting(model: ScriptedModel, interventions: Vec<Intervention>) -> Parked {
    let slot = Arc::new(Mutex::new(None));
    let log = Log::default();
    let mut builder = agent(model.clone())
        .tool(injecting_tool(slot.clone()))
        .tool(approving_tool(slot.clone(), &log));
    for i in interventions {
        builder = builder.intervention(i);
    }
    let mut agent = builder.build().unwrap();
    let steer = agent.interceptor();
    let l = log.clone();
    steer.on_rejected(move |_, m, reason| l.push(format!("rejected {}: {reason}", m.text())));
    let l = log.clone();
    steer.on_consumed(move |_, m| l.push(format!("consumed {}", m.text())));
    *slot.lock().unwrap() = Some(steer);
    let mut events = Vec::new();
    let r = {
        let mut s = agent.stream("research");
        let mut result = None;
        while let Some(ev) = s.next().await {
            let ev = ev.unwrap();
            if let AgentEvent::Finished(r) = &ev {
                result = Some(r.clone());
            }
            events.push(ev);
        }
        result.unwrap()
    };
    (agent, r, model, events, log)
}

#[tokio::test]
async fn an_injected_message_awaiting_approval_is_parked_and_delivered_once_approved() {
    let (agent, r, model, events, log) = run_parked(json!(true)).await;
    assert_eq!(r.text(), "done", "the run never stopped");
    assert!(r.interrupts.is_empty());
    let parked = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::InjectionAwaitingApproval { interrupts, .. } => Some(interrupts.clone()),
            _ => None,
        })
        .expect("the stream shows the pending approval");
    assert!(parked[0].id.starts_with("v1:before_invocation:"));
    assert_eq!(
        log.take(),
        vec!["pending spend $9", "consumed spend $9"],
        "visible on the interceptor, then delivered"
    );
    let reqs = model.requests();
    let saw = |i: usize| {
        reqs[i]
            .messages
            .iter()
            .any(|m| m.text().contains("spend $9"))
    };
    assert!(!saw(1), "not delivered before approval");
    assert!(saw(2), "delivered at the first boundary after approval");
    assert_eq!(r.injections[0].outcome, InjectionOutcome::Consumed);
    assert!(agent.interceptor().pending_approvals().is_empty());
    assert_history(&agent);
}

#[tokio::test]
async fn an_injected_message_refused_by_the_human_is_rejected() {
    let (agent, r, model, _, log) = run_parked(json!("no")).await;
    assert_eq!(r.text(), "done");
    assert_eq!(
        log.take(),
        vec![
            "pending spend $9",
            "rejected spend $9: CONFIRMATION_FAILED: Allow this steering message?"
        ]
    );
    assert!(
        !model
            .requests()
            .iter()
            .flat_map(|q| q.messages.iter())
            .any(|m| m.text().contains("spend $9"))
    );
    assert_eq!(r.injections[0].outcome, InjectionOutcome::Rejected);
    assert_history(&agent);
}

fn saw(model: &ScriptedModel, text: &str) -> Vec<bool> {
    model
        .requests()
        .iter()
        .map(|q| q.messages.iter().any(|m| m.text().contains(text)))
        .collect()
}

fn parked_events(events: &[AgentEvent]) -> Vec<Vec<String>> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::InjectionAwaitingApproval { interrupts, .. } => {
                Some(interrupts.iter().map(|i| i.id.clone()).collect())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_deny_after_a_confirm_on_an_injected_message_rejects_it_without_parking() {
    let no_spending = Intervention::named("no-spending").before_invocation(|ev, _| {
        if ev.is_injected() && ev.messages.iter().any(|m| m.text().contains('$')) {
            BeforeInvocationAction::deny("no spending mid-run")
        } else {
            BeforeInvocationAction::Proceed
        }
    });
    let (agent, r, model, events, log) = run_injecting(
        parked_script(json!(true)),
        vec![injected_money_gate(), no_spending],
    )
    .await;
    assert_eq!(r.text(), "done");
    assert!(parked_events(&events).is_empty(), "never parked");
    assert_eq!(
        log.take(),
        vec!["rejected spend $9: DENIED: no spending mid-run"],
        "rejected at once; the approve tool found nothing pending"
    );
    assert!(agent.interceptor().pending_approvals().is_empty());
    assert_eq!(r.injections.len(), 1);
    assert_eq!(r.injections[0].outcome, InjectionOutcome::Rejected);
    let gate = r
        .decisions
        .iter()
        .find(|d| d.handler == "money-gate")
        .unwrap();
    assert_eq!(gate.outcome, DecisionOutcome::Overridden);
    assert!(saw(&model, "spend $9").iter().all(|s| !s));
    assert_history(&agent);
}

#[tokio::test]
async fn an_injected_message_changed_after_its_answer_is_parked_again() {
    // A transform before the gate stamps the message with a version that changes after the
    // first pass: the answer was given for what no longer is, so the item is parked again (the
    // stale answer dropped) and delivered only after a second answer.
    let passes = Arc::new(Mutex::new(0));
    let p = passes.clone();
    let stamp = Intervention::named("stamp").before_invocation(move |ev, _| {
        if !ev.is_injected() {
            return BeforeInvocationAction::Proceed;
        }
        let n = {
            let mut n = p.lock().unwrap();
            *n += 1;
            *n
        };
        let version = if n == 1 { "v1" } else { "v2" };
        BeforeInvocationAction::transform(move |messages| {
            let text = format!("{} ({version})", messages[0].text());
            messages[0] = Message::user(text);
        })
    });
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().tool_use("t1", "research", json!({"inject": "spend $9"})))
        .response(ScriptedResponse::new().tool_use("t2", "approve", json!({"answer": true})))
        .response(ScriptedResponse::new().tool_use("t3", "approve", json!({"answer": true})))
        .text("done")
        .build();
    let (agent, r, model, events, log) =
        run_injecting(model, vec![stamp, injected_money_gate()]).await;
    assert_eq!(r.text(), "done");
    let parked = parked_events(&events);
    assert_eq!(parked.len(), 2, "parked, then parked again");
    assert_eq!(parked[0], parked[1], "the same question");
    assert_eq!(*passes.lock().unwrap(), 3);
    assert_eq!(
        log.take(),
        vec![
            "pending spend $9",
            "pending spend $9",
            "consumed spend $9 (v2)"
        ],
        "the first answer did not deliver it"
    );
    assert_eq!(saw(&model, "spend $9"), vec![false, false, false, true]);
    assert_eq!(r.injections.len(), 1);
    assert_eq!(r.injections[0].outcome, InjectionOutcome::Consumed);
    assert_history(&agent);
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_for_an_injected_message_records_nothing() {
    // Only wrong answers at the first boundary: nothing recorded, so the item is not even
    // looked at again (one parking) until the good answer, and then delivered unedited.
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().tool_use("t1", "research", json!({"inject": "spend $9"})))
        .response(ScriptedResponse::new().tool_use(
            "t2",
            "approve",
            json!({"try": [
                Approval::approve().with_edit(5),
                {"approved": "maybe"},
                {"edit": "spend $1"},
            ]}),
        ))
        .response(ScriptedResponse::new().tool_use("t3", "approve", json!({"answer": true})))
        .text("done")
        .build();
    let (agent, r, model, events, log) = run_injecting(model, vec![injected_money_gate()]).await;
    assert_eq!(r.text(), "done");
    let log = log.take();
    assert_eq!(log.len(), 6, "{log:?}");
    assert_eq!(log[0], "pending spend $9");
    assert_eq!(log[1], "refused edit (unchanged: true)");
    for refused in &log[2..4] {
        assert!(
            refused.starts_with("refused answer: an approval is ")
                && refused.ends_with("(unchanged: true)"),
            "{refused}"
        );
    }
    assert_eq!(
        log[4..],
        ["pending spend $9", "consumed spend $9"],
        "still parked, then delivered unedited after the good answer"
    );
    assert_eq!(parked_events(&events).len(), 1);
    assert_eq!(saw(&model, "spend $9"), vec![false, false, false, true]);
    assert_history(&agent);
}

#[tokio::test]
async fn an_injected_message_still_parked_when_the_run_ends_is_rejected() {
    let slot = Arc::new(Mutex::new(None));
    let log = Log::default();
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().tool_use("t1", "research", json!({"inject": "spend $9"})))
        .text("done")
        .build();
    let mut agent = agent(model)
        .tool(injecting_tool(slot.clone()))
        .intervention(injected_money_gate())
        .build()
        .unwrap();
    let steer = agent.interceptor();
    let l = log.clone();
    steer.on_rejected(move |_, m, reason| l.push(format!("rejected {}: {reason}", m.text())));
    *slot.lock().unwrap() = Some(steer.clone());
    let r = agent.invoke("research").await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(log.take(), vec!["rejected spend $9: run ended"]);
    assert!(steer.pending_approvals().is_empty());
    assert!(matches!(
        steer.answer(InterruptResponse::new("v1:before_invocation:x:y", true)),
        Err(rein_agent::InjectError::UnknownInterrupt(_))
    ));
    assert_history(&agent);
}

// ---------------------------------------------------------------------------------------------
// Escalation at the retry cap

fn never_happy() -> Intervention {
    Intervention::named("never-happy")
        .after_model_call(|_, _| AfterModelCallAction::guide("try harder"))
}

#[tokio::test]
async fn at_the_retry_cap_the_agent_asks_a_human_instead_of_denying() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("t1", "echo", json!({"text": "x"}))
        .cycle()
        .build();
    let mut agent = agent(model.clone())
        .tool(echo_tool(&log))
        .max_hook_retries(1)
        .on_retry_limit(OnRetryLimit::Confirm)
        .intervention(never_happy())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(model.requests().len(), 2, "1 call + 1 retry");
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = r.interrupts[0].clone();
    assert_eq!(i.name, "rein:retry-limit");
    assert_eq!(
        i.id,
        EventKind::AfterModelCall.interrupt_id("m1", "rein:retry-limit")
    );
    assert!(
        i.reason["prompt"]
            .as_str()
            .unwrap()
            .contains("[never-happy] try harder")
    );
    assert!(
        log.take().is_empty(),
        "the held response's tool did not run"
    );
    let asked = r
        .decisions
        .iter()
        .find(|d| d.handler == "rein:retry-limit")
        .unwrap();
    assert_eq!(asked.action, DecisionAction::Confirm);
    let last_guide = r
        .decisions
        .iter()
        .rev()
        .find(|d| d.handler == "never-happy")
        .unwrap();
    assert_eq!(last_guide.outcome, DecisionOutcome::Overridden);

    // Approved: the response is accepted as it is (its tool runs), without another retry.
    let model_calls = model.requests().len();
    let r = agent.invoke(vec![i.answer("yes")]).await.unwrap();
    assert_eq!(log.take(), vec!["ran echo:x"]);
    let answered = r
        .decisions
        .iter()
        .find(|d| d.handler == "rein:retry-limit")
        .unwrap();
    assert_eq!(
        answered.confirmation.as_ref().unwrap().status,
        ConfirmationStatus::Approved
    );
    assert!(
        model.requests().len() > model_calls,
        "the run went on after the tool"
    );
    assert_history(&agent);
}

#[tokio::test]
async fn a_human_refusing_at_the_retry_cap_withholds_the_response() {
    let model = ScriptedModel::builder().text("meh").cycle().build();
    let mut agent = agent(model.clone())
        .max_hook_retries(1)
        .on_retry_limit(OnRetryLimit::Confirm)
        .intervention(never_happy())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    let id = r.interrupts[0].clone();
    let r = agent.invoke(vec![id.answer(false)]).await.unwrap();
    assert!(
        r.text()
            .starts_with("CONFIRMATION_FAILED: Guidance did not take after 1 retry."),
        "{}",
        r.text()
    );
    assert_eq!(model.requests().len(), 2, "no call after the refusal");
    let m = agent.messages();
    assert_eq!(m.last().unwrap().text(), r.text());
    assert_history(&agent);
}

#[tokio::test]
async fn a_handler_may_escalate_itself_when_no_retry_is_left() {
    let model = ScriptedModel::builder().text("meh").cycle().build();
    let mut agent = agent(model.clone())
        .max_hook_retries(1)
        .intervention(Intervention::named("reviewer").after_model_call(|ev, _| {
            if ev.retries_left() > 0 {
                AfterModelCallAction::guide("try harder")
            } else {
                AfterModelCallAction::confirm("Still not right. Accept anyway?")
            }
        }))
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert_eq!(model.requests().len(), 2);
    let id = r.interrupts[0].clone();
    assert_eq!(
        id.id,
        EventKind::AfterModelCall.interrupt_id("m1", "reviewer")
    );
    // The resume goes on counting the turn's retries, so the handler sees none left and its
    // answer applies.
    let r = agent.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "meh");
    assert_eq!(model.requests().len(), 2);
    assert_history(&agent);
}

#[tokio::test]
async fn without_escalation_the_retry_cap_still_denies() {
    let model = ScriptedModel::builder().text("meh").cycle().build();
    let mut agent = agent(model)
        .max_hook_retries(1)
        .intervention(never_happy())
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.text(), "DENIED: retry limit (1) reached");
    assert_history(&agent);
}
