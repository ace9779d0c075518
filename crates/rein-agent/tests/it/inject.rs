//! Mid-run injection (SPEC §5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rein_agent::{Agent, AgentEvent, InjectError, TurnInterceptor};
use rein_core::{
    Message, ToolHandle,
    event::{AfterModelCallEvent, BeforeInvocationEvent},
    id::InjectionId,
    result::InjectionOutcome,
    stream::StopReason,
    tool::ToolOutput,
};
use rein_interventions::{BeforeInvocationAction, Intervention};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::json;

type Seen = Arc<Mutex<Vec<(InjectionId, String)>>>;

fn watch(i: &TurnInterceptor) -> (Seen, Seen) {
    let consumed: Seen = Arc::default();
    let rejected: Seen = Arc::default();
    let c = consumed.clone();
    i.on_consumed(move |id, m| c.lock().unwrap().push((id, m.text())));
    let r = rejected.clone();
    i.on_rejected(move |id, _m, reason| r.lock().unwrap().push((id, reason.to_owned())));
    (consumed, rejected)
}

#[tokio::test]
async fn inject_with_no_run_is_a_typed_error() {
    let agent = agent(ScriptedModel::builder().build()).build().unwrap();
    assert_eq!(
        agent.interceptor().inject("x"),
        Err(InjectError::NoActiveRun)
    );
}

#[tokio::test]
async fn injected_message_is_drained_at_the_turn_boundary() {
    let slot = Arc::new(Mutex::new(None));
    let model = ScriptedModel::builder()
        .tool_use("t1", "research", json!({"inject": "also check X"}))
        .text("done")
        .build();
    let mut agent = agent(model.clone())
        .tool(injecting_tool(slot.clone()))
        .build()
        .unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let (consumed, rejected) = watch(&i);
    let r = agent.invoke("research").await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(consumed.lock().unwrap().len(), 1);
    assert!(rejected.lock().unwrap().is_empty());
    assert_eq!(r.injections.len(), 1);
    assert_eq!(r.injections[0].outcome, InjectionOutcome::Consumed);
    // The model sees it on its next call, joined to the tool results message.
    let sent = &model.requests()[1].messages;
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[2].tool_results().count(), 1);
    assert_eq!(sent[2].text(), "also check X");
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn left_over_items_are_rejected_at_run_end_and_never_delivered_late() {
    let model = ScriptedModel::builder()
        .text("first")
        .text("second")
        .build();
    let slot: Arc<Mutex<Option<TurnInterceptor>>> = Arc::default();
    let s = slot.clone();
    let mut agent = agent(model.clone())
        .hook(move |_: &mut AfterModelCallEvent| {
            if let Some(i) = s.lock().unwrap().as_ref() {
                i.inject("late").unwrap();
            }
        })
        .build()
        .unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let (consumed, rejected) = watch(&i);
    let r = agent.invoke("one").await.unwrap();
    assert_eq!(r.injections[0].reason.as_deref(), Some("run ended"));
    *slot.lock().unwrap() = None;
    agent.invoke("two").await.unwrap();
    assert!(consumed.lock().unwrap().is_empty());
    assert_eq!(rejected.lock().unwrap().len(), 1);
    assert!(
        !model.requests()[1]
            .messages
            .iter()
            .any(|m| m.text().contains("late"))
    );
}

#[tokio::test]
async fn admission_deny_rejects_that_item_only_and_transform_rewrites() {
    let slot = Arc::new(Mutex::new(None));
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().tool_use("t1", "research", json!({"inject": "bad idea"})))
        .response(ScriptedResponse::new().tool_use(
            "t2",
            "research",
            json!({"inject": "good idea"}),
        ))
        .text("done")
        .build();
    let plain = Log::default();
    let p = plain.clone();
    let mut agent = agent(model.clone())
        .tool(injecting_tool(slot.clone()))
        .hook(move |e: &mut BeforeInvocationEvent| {
            p.push(format!("plain injected={}", e.is_injected()))
        })
        .intervention(Intervention::named("admit").before_invocation(|e, _| {
            if !e.is_injected() {
                BeforeInvocationAction::Proceed
            } else if e.messages[0].text().contains("bad") {
                BeforeInvocationAction::deny("no bad ideas")
            } else {
                BeforeInvocationAction::transform(|m| {
                    m[0] = Message::user(m[0].text().to_uppercase());
                })
            }
        }))
        .build()
        .unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let (consumed, rejected) = watch(&i);
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.text(), "done", "the run goes on");
    assert_eq!(rejected.lock().unwrap()[0].1, "DENIED: no bad ideas");
    assert_eq!(consumed.lock().unwrap()[0].1, "GOOD IDEA");
    assert_eq!(
        plain.take(),
        vec!["plain injected=false"],
        "plain hooks do not fire for injected input"
    );
    assert_eq!(model.requests()[2].messages[4].text(), "GOOD IDEA");
}

/// research (injects `x`) and `t2`, which waits for an answer; then `done`.
fn paused_with_a_queued_item(slot: &Arc<Mutex<Option<TurnInterceptor>>>) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("t1", "research", json!({"inject": "x"}))
                .tool_use("t2", "research", json!({})),
        )
        .text("done")
        .build();
    let a = agent(model.clone())
        .tool(injecting_tool(slot.clone()))
        .hook(|e: &mut rein_core::event::BeforeToolCallEvent| {
            if e.tool_use().tool_use_id == "t2" && e.interrupt("ask", "ok?").is_none() {
                // Asked: the tool waits.
            }
        })
        .build()
        .unwrap();
    *slot.lock().unwrap() = Some(a.interceptor());
    (a, model)
}

#[tokio::test]
async fn a_paused_run_keeps_its_queue_and_delivers_it_after_the_resume() {
    let slot = Arc::new(Mutex::new(None));
    let (mut a, model) = paused_with_a_queued_item(&slot);
    let i = a.interceptor();
    let (consumed, rejected) = watch(&i);
    let r = a.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert!(r.injections.is_empty(), "a paused run has not ended");
    let queued = a.pending_interrupts().unwrap().queued_injections();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].message.text(), "x");
    // Injected while the run waits for a human.
    let y = i.inject("y").expect("a paused run takes injections");
    let id = r.interrupts[0].clone();
    let r = a.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "done");
    let seen: Vec<String> = consumed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| t.clone())
        .collect();
    assert_eq!(
        seen,
        ["x", "y"],
        "delivered once each, in order, after the resume"
    );
    assert!(rejected.lock().unwrap().is_empty());
    assert_eq!(consumed.lock().unwrap()[1].0, y);
    let last = model.requests()[1].messages.last().unwrap().text();
    assert!(last.contains('x') && last.contains('y'), "{last}");
    assert_history_valid(a.messages());
}

/// An agent makes its interceptor when first asked for one: asked for only while its run
/// waits for a human, it still takes messages for that run.
#[tokio::test]
async fn an_interceptor_first_asked_for_while_the_run_is_paused_takes_messages() {
    let model = ScriptedModel::builder()
        .tool_use("t2", "research", json!({}))
        .text("done")
        .text("again")
        .build();
    let mut a = agent(model.clone())
        .tool(injecting_tool(Arc::new(Mutex::new(None))))
        .hook(|e: &mut rein_core::event::BeforeToolCallEvent| {
            let _ = e.interrupt("ask", "ok?");
        })
        .build()
        .unwrap();
    let r = a.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = a.interceptor();
    let (consumed, rejected) = watch(&i);
    let y = i.inject("y").expect("a paused run takes injections");
    let id = r.interrupts[0].clone();
    let r = a.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(consumed.lock().unwrap().as_slice(), [(y, "y".to_owned())]);
    assert!(rejected.lock().unwrap().is_empty());
    assert!(
        model.requests()[1]
            .messages
            .last()
            .unwrap()
            .text()
            .contains('y')
    );
    assert_eq!(
        i.inject("z"),
        Err(InjectError::NoActiveRun),
        "the run is over"
    );
    assert_history_valid(a.messages());
}

#[tokio::test]
async fn discarding_a_paused_run_rejects_its_queue() {
    let slot = Arc::new(Mutex::new(None));
    let (mut a, _) = paused_with_a_queued_item(&slot);
    let i = a.interceptor();
    let (consumed, rejected) = watch(&i);
    a.invoke("go").await.unwrap();
    i.inject("y").unwrap();
    a.discard_interrupts();
    let reasons: Vec<String> = rejected
        .lock()
        .unwrap()
        .iter()
        .map(|(_, r)| r.clone())
        .collect();
    assert_eq!(reasons, ["run ended", "run ended"]);
    assert!(consumed.lock().unwrap().is_empty());
    assert_eq!(
        i.inject("z"),
        Err(InjectError::NoActiveRun),
        "the run is over"
    );
}

#[tokio::test]
async fn rejected_at_error_and_cancel() {
    // Error: injected while the failing model call is reported; rejected when the run fails.
    let model = ScriptedModel::builder()
        .error(rein_core::ModelError::bad_request("no"))
        .build();
    let slot: Arc<Mutex<Option<TurnInterceptor>>> = Arc::default();
    let s = slot.clone();
    let mut a = agent(model)
        .hook(move |e: &mut AfterModelCallEvent| {
            if e.error().is_some() {
                s.lock().unwrap().as_ref().unwrap().inject("late").unwrap();
            }
        })
        .build()
        .unwrap();
    let i = a.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    let (consumed, rejected) = watch(&i);
    assert!(a.invoke("go").await.is_err());
    assert!(consumed.lock().unwrap().is_empty());
    assert_eq!(rejected.lock().unwrap()[0].1, "run ended");
}

#[tokio::test(start_paused = true)]
async fn rejected_on_cancel_and_streamed() {
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().text("slow answer"))
        .chunk_chars(1)
        .chunk_delay(Duration::from_millis(10))
        .build();
    let mut a = agent(model).build().unwrap();
    let i = a.interceptor();
    let cancel = a.cancel_handle();
    let mut s = a.stream("go");
    let mut events = Vec::new();
    let mut injected = false;
    while let Some(e) = s.next().await {
        let e = e.unwrap();
        if matches!(e, AgentEvent::TextDelta(_)) && !injected {
            injected = true;
            i.inject("steer").unwrap();
            cancel.cancel();
        }
        events.push(e);
    }
    assert!(events.iter().any(
        |e| matches!(e, AgentEvent::InjectionRejected { reason, .. } if reason == "run ended")
    ));
    match events.last().unwrap() {
        AgentEvent::Finished(r) => assert_eq!(r.stop_reason, StopReason::Cancelled),
        other => panic!("{other:?}"),
    }
}

#[test]
fn stress_eight_threads_each_id_consumed_or_rejected_exactly_once() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 1250;
    let mut script = ScriptedModel::builder().cycle().record_requests(false);
    for i in 0..100 {
        script =
            script.response(ScriptedResponse::new().tool_use(format!("t{i}"), "tick", json!({})));
    }
    let model = script.text("done").build();
    let tick = ToolHandle::from_fn(
        "tick",
        "Waits a little.",
        json!({"type": "object"}),
        |_, _| async {
            tokio::time::sleep(Duration::from_micros(100)).await;
            Ok(ToolOutput::text("tick"))
        },
    );
    let mut agent = agent(model).tool(tick).build().unwrap();
    let i = agent.interceptor();
    let seen: Arc<Mutex<Vec<InjectionId>>> = Arc::default();
    let s1 = seen.clone();
    i.on_consumed(move |id, _| s1.lock().unwrap().push(id));
    let s2 = seen.clone();
    i.on_rejected(move |id, _, _| s2.lock().unwrap().push(id));

    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let i = i.clone();
            std::thread::spawn(move || {
                let mut ok = Vec::new();
                while ok.len() < PER_THREAD {
                    match i.inject(format!("thread {t} item {}", ok.len())) {
                        Ok(id) => ok.push(id),
                        Err(_) => std::thread::yield_now(),
                    }
                }
                ok
            })
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runs = Vec::new();
    while !handles.iter().all(|h| h.is_finished()) {
        agent.clear_history();
        runs.push(rt.block_on(agent.invoke("go")).unwrap());
    }
    let mut accepted: Vec<InjectionId> = Vec::new();
    for h in handles {
        accepted.extend(h.join().unwrap());
    }
    assert_eq!(accepted.len(), THREADS * PER_THREAD);
    let seen = seen.lock().unwrap();
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no id seen twice");
    assert_eq!(
        seen.len(),
        accepted.len(),
        "every accepted id consumed or rejected"
    );
    let accepted: HashSet<_> = accepted.iter().collect();
    assert_eq!(unique, accepted);
    let records: Vec<_> = runs.iter().flat_map(|r| &r.injections).collect();
    assert_eq!(records.len(), seen.len(), "results account for every id");
    assert!(
        records
            .iter()
            .any(|r| r.outcome == InjectionOutcome::Consumed),
        "some injections were delivered mid-run"
    );
}

#[tokio::test]
async fn panicking_callbacks_are_contained() {
    let slot = Arc::new(Mutex::new(None));
    let model = ScriptedModel::builder()
        .tool_use("t1", "research", json!({"inject": "x"}))
        .text("done")
        .build();
    let mut agent = agent(model)
        .tool(injecting_tool(slot.clone()))
        .build()
        .unwrap();
    let i = agent.interceptor();
    *slot.lock().unwrap() = Some(i.clone());
    i.on_consumed(|_, _| panic!("callback bug"));
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(r.injections[0].outcome, InjectionOutcome::Consumed);
}

#[tokio::test]
async fn an_injection_joined_to_the_tool_results_is_streamed_as_message_updated() {
    let slot = Arc::new(Mutex::new(None));
    let model = ScriptedModel::builder()
        .tool_use("t1", "research", json!({"inject": "also check X"}))
        .text("done")
        .build();
    let mut agent = agent(model)
        .tool(injecting_tool(slot.clone()))
        .build()
        .unwrap();
    *slot.lock().unwrap() = Some(agent.interceptor());
    let mut stream = agent.stream("research");
    let mut events = Vec::new();
    // The stream's own `next`: no StreamExt needed.
    while let Some(e) = rein_agent::AgentStream::next(&mut stream).await {
        events.push(e.unwrap());
    }
    drop(stream);
    // The tool results message is announced, then updated with the injected text joined.
    let (added_id, added) = events
        .iter()
        .find_map(|e| match e {
            rein_agent::AgentEvent::MessageAdded { id, message }
                if message.tool_results().count() == 1 =>
            {
                Some((*id, message.clone()))
            }
            _ => None,
        })
        .expect("the tool results message is added");
    assert_eq!(added.text(), "", "added before the injection joins it");
    let updated = events
        .iter()
        .find_map(|e| match e {
            rein_agent::AgentEvent::MessageUpdated { id, message } if *id == added_id => {
                Some(message.clone())
            }
            _ => None,
        })
        .expect("the join is streamed");
    assert_eq!(updated.text(), "also check X");
    assert_eq!(updated, agent.messages()[2]);
}
