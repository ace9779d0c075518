//! Confirm beyond before_tool_call (SPEC §3.8, §3.10, §5) resumed by a new agent from each
//! session store: rejections and edits at every point, the retry-cap escalation, and injected
//! messages parked across a pause.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use rein_agent::{Agent, AgentBuilder, OnRetryLimit, TurnInterceptor};
use rein_core::{
    Message, Role, ToolHandle,
    interrupt::{Approval, Interrupt},
    stream::StopReason,
    tool::ToolOutput,
};
use rein_interventions::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, Intervention,
};
use rein_models::{ScriptedModel, ScriptedResponse};
use rein_sessions::{SessionManager, SessionStore, SharedSessionStore};
use serde_json::{Value, json};

/// Calls to `count` (shared by the agents of one test: one count for both processes).
type Runs = Arc<Mutex<u32>>;

fn count_tool(runs: &Runs) -> ToolHandle {
    let runs = runs.clone();
    ToolHandle::from_sync_fn(
        "count",
        "Counts.",
        json!({"type": "object"}),
        move |_, _| {
            let mut n = runs.lock().unwrap();
            *n += 1;
            Ok(ToolOutput::text(format!("count={n}")))
        },
    )
}

fn builder(
    store: &SharedSessionStore,
    id: &str,
    model: &ScriptedModel,
    runs: &Runs,
) -> AgentBuilder {
    Agent::builder()
        .model(model.clone())
        .tool(count_tool(runs))
        .session(SessionManager::new(store.clone(), id))
}

/// No two messages of one role in a row; every tool use answered in the next message.
fn assert_history_valid(messages: &[Message], name: &str) {
    for (i, m) in messages.iter().enumerate() {
        if let Some(next) = messages.get(i + 1) {
            assert_ne!(m.role, next.role, "{name}: same role twice: {messages:#?}");
        }
        let uses: Vec<String> = m.tool_uses().map(|u| u.tool_use_id.clone()).collect();
        if !uses.is_empty() {
            let answered: Vec<String> = messages
                .get(i + 1)
                .map(|n| n.tool_results().map(|r| r.tool_use_id.clone()).collect())
                .unwrap_or_default();
            assert_eq!(
                uses, answered,
                "{name}: unanswered tool uses: {messages:#?}"
            );
        }
    }
}

/// Runs `input` on a new agent, expects one interrupt and returns its id; the session now holds
/// the pause.
async fn pause(mut a: Agent, input: &str, name: &str) -> Interrupt {
    let r = a.invoke(input).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
    assert_eq!(r.interrupts.len(), 1, "{name}");
    r.interrupts[0].clone()
}

/// What one pause-and-resume did.
struct Resumed {
    /// The result of the resume.
    result: rein_core::result::AgentResult,
    /// The session's messages after it (no pause left).
    messages: Vec<Message>,
    /// `count` runs, in both processes.
    runs: u32,
    /// The interrupt answered.
    interrupt_id: String,
}

/// One process pauses on `input` with `first`'s script; another — a new agent with new
/// handlers (`setup`) and a model holding only what comes next (`later`) — loads the session
/// and answers.
async fn across_processes(
    store: &SharedSessionStore,
    setup: impl Fn(AgentBuilder) -> AgentBuilder,
    (first, input): (&ScriptedModel, &str),
    later: &ScriptedModel,
    answer: impl Into<Value>,
    name: &str,
) -> Resumed {
    let id = session_id("point");
    let runs = Runs::default();
    let asked = pause(
        setup(builder(store, &id, first, &runs)).build().unwrap(),
        input,
        name,
    )
    .await;
    let mut b = setup(builder(store, &id, later, &runs)).build().unwrap();
    assert!(b.load_session().await.unwrap(), "{name}");
    assert!(b.pending_interrupts().is_some(), "{name}");
    let result = b.invoke(vec![asked.answer(answer)]).await.unwrap();
    let messages = stored(store, &id).await;
    assert_eq!(messages, b.messages(), "{name}: memory and store agree");
    assert_history_valid(&messages, name);
    let runs = *runs.lock().unwrap();
    Resumed {
        result,
        messages,
        runs,
        interrupt_id: asked.id,
    }
}

/// The session's messages, once no pause is left.
async fn stored(store: &SharedSessionStore, id: &str) -> Vec<Message> {
    let s = store.load(id).await.unwrap().unwrap();
    assert!(s.pending_interrupts.is_none(), "the pause was consumed");
    s.messages.into_iter().map(|m| m.message).collect()
}

fn edit(to: &str) -> Value {
    serde_json::to_value(Approval::approve().with_edit(to)).unwrap()
}

// ---------------------------------------------------------------------------------------------
// after_tool_call

fn output_review(b: AgentBuilder) -> AgentBuilder {
    b.intervention(
        Intervention::named("review")
            .after_tool_call(|_, _| AfterToolCallAction::confirm("Send it?")),
    )
}

#[tokio::test]
async fn a_held_tool_result_rejected_or_edited_by_a_new_agent_never_reruns_the_tool() {
    let dir = TempDir::new("atc");
    for (name, store, _) in stores(&dir).await {
        for (answer, expected, is_error) in [
            (json!("no"), "CONFIRMATION_FAILED: Send it?", true),
            (edit("count=99"), "count=99", false),
        ] {
            let first = ScriptedModel::builder()
                .tool_use("t1", "count", json!({}))
                .build();
            let later = ScriptedModel::builder().text("done").build();
            let r = across_processes(
                &store,
                output_review,
                (&first, "count"),
                &later,
                answer,
                name,
            )
            .await;
            assert_eq!(r.result.text(), "done", "{name}");
            assert_eq!(r.runs, 1, "{name}: the tool ran once, before the pause");
            let result = r.messages[2].tool_results().next().unwrap().clone();
            assert_eq!(result.text(), expected, "{name}");
            assert_eq!(result.is_error(), is_error, "{name}");
            let sent = &later.requests()[0].messages[2];
            assert_eq!(
                sent.tool_results().next().unwrap().text(),
                expected,
                "{name}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// after_model_call

fn response_review(b: AgentBuilder) -> AgentBuilder {
    b.intervention(Intervention::named("review").after_model_call(|ev, _| {
        if ev.response().is_some_and(|r| r.message.has_tool_use()) {
            AfterModelCallAction::confirm("Go ahead?")
        } else {
            AfterModelCallAction::Proceed
        }
    }))
}

fn counting_response() -> ScriptedModel {
    ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .text("I will count.")
                .tool_use("t1", "count", json!({})),
        )
        .build()
}

#[tokio::test]
async fn a_held_response_rejected_by_a_new_agent_is_withheld_without_calling_the_model() {
    let dir = TempDir::new("amc-no");
    for (name, store, _) in stores(&dir).await {
        let later = ScriptedModel::builder().text("never asked").build();
        let first = counting_response();
        let r = across_processes(
            &store,
            response_review,
            (&first, "count"),
            &later,
            false,
            name,
        )
        .await;
        assert_eq!(r.result.text(), "CONFIRMATION_FAILED: Go ahead?", "{name}");
        assert_eq!(r.result.stop_reason, StopReason::EndTurn, "{name}");
        assert!(
            later.requests().is_empty(),
            "{name}: the model was not called again"
        );
        assert_eq!(r.runs, 0, "{name}: its tool use never ran");
        assert_eq!(r.messages.len(), 2, "{name}");
        assert_eq!(r.messages[1].role, Role::Assistant);
        assert_eq!(r.messages[1].text(), r.result.text(), "{name}");
        assert!(!r.messages[1].has_tool_use(), "{name}");
    }
}

#[tokio::test]
async fn a_held_response_edited_by_a_new_agent_is_stored_as_edited_and_acted_on() {
    let dir = TempDir::new("amc-edit");
    for (name, store, _) in stores(&dir).await {
        let later = ScriptedModel::builder().text("done").build();
        let first = counting_response();
        let answer = edit("Counting, as asked.");
        let r = across_processes(
            &store,
            response_review,
            (&first, "count"),
            &later,
            answer,
            name,
        )
        .await;
        assert_eq!(r.result.text(), "done", "{name}");
        assert_eq!(
            later.requests().len(),
            1,
            "{name}: one call, after the tool"
        );
        assert_eq!(r.runs, 1, "{name}: the tool use kept and run once");
        assert_eq!(r.messages[1].text(), "Counting, as asked.", "{name}");
        assert!(r.messages[1].has_tool_use(), "{name}");
        assert_eq!(
            later.requests()[0].messages[1].text(),
            "Counting, as asked.",
            "{name}: the model sees the edited response"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// before_model_call

fn egress(b: AgentBuilder) -> AgentBuilder {
    b.intervention(
        Intervention::named("egress")
            .before_model_call(|_, _| BeforeModelCallAction::confirm("Send to the provider?")),
    )
}

#[tokio::test]
async fn a_held_request_rejected_by_a_new_agent_is_never_sent() {
    let dir = TempDir::new("bmc-no");
    for (name, store, _) in stores(&dir).await {
        let first = ScriptedModel::builder().text("never sent").build();
        let later = first.clone();
        let r = across_processes(&store, egress, (&first, "hello"), &later, "no", name).await;
        assert!(
            r.interrupt_id.starts_with("v1:before_model_call:m0:"),
            "{name}"
        );
        assert_eq!(
            r.result.text(),
            "CONFIRMATION_FAILED: Send to the provider?",
            "{name}"
        );
        assert!(first.requests().is_empty(), "{name}: nothing was ever sent");
        assert_eq!(r.messages.len(), 2, "{name}");
        assert_eq!(r.messages[1].text(), r.result.text(), "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// before_invocation

fn gate(b: AgentBuilder) -> AgentBuilder {
    b.intervention(Intervention::named("gate").before_invocation(|ev, _| {
        if ev.is_injected() {
            BeforeInvocationAction::Proceed
        } else {
            BeforeInvocationAction::confirm("Let this in?")
        }
    }))
}

#[tokio::test]
async fn a_held_input_rejected_or_edited_by_a_new_agent() {
    let dir = TempDir::new("bi");
    for (name, store, _) in stores(&dir).await {
        // Rejected: nothing stored, the model never called.
        let model = ScriptedModel::builder().text("wired").build();
        let r = across_processes(&store, gate, (&model, "wire $500"), &model, false, name).await;
        assert_eq!(
            r.result.text(),
            "CONFIRMATION_FAILED: Let this in?",
            "{name}"
        );
        assert!(model.requests().is_empty(), "{name}");
        assert!(r.messages.is_empty(), "{name}: nothing stored");

        // Edited: the edited input is stored and sent.
        let answer = edit("wire $5");
        let r = across_processes(&store, gate, (&model, "wire $500"), &model, answer, name).await;
        assert_eq!(r.result.text(), "wired", "{name}");
        assert_eq!(model.requests().len(), 1, "{name}");
        assert_eq!(model.requests()[0].messages[0].text(), "wire $5", "{name}");
        assert_eq!(r.messages[0].text(), "wire $5", "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Escalation at the retry cap

fn escalating(b: AgentBuilder) -> AgentBuilder {
    b.max_hook_retries(1)
        .on_retry_limit(OnRetryLimit::Confirm)
        .intervention(
            Intervention::named("never-happy")
                .after_model_call(|_, _| AfterModelCallAction::guide("try harder")),
        )
}

#[tokio::test]
async fn an_escalation_at_the_retry_cap_is_answered_by_a_new_agent() {
    let dir = TempDir::new("escalate");
    for (name, store, _) in stores(&dir).await {
        for (answer, expected) in [
            (json!("yes"), "meh"),
            (json!(false), "CONFIRMATION_FAILED: Guidance did not take"),
        ] {
            let first = ScriptedModel::builder().text("meh").cycle().build();
            let later = ScriptedModel::builder().text("never asked").build();
            let r =
                across_processes(&store, escalating, (&first, "go"), &later, answer, name).await;
            let iid = &r.interrupt_id;
            assert!(iid.starts_with("v1:after_model_call:m1:"), "{name}: {iid}");
            assert_eq!(first.requests().len(), 2, "{name}: one call and one retry");
            assert!(
                r.result.text().starts_with(expected),
                "{name}: {}",
                r.result.text()
            );
            assert!(
                later.requests().is_empty(),
                "{name}: no call after the answer"
            );
            assert_eq!(r.messages.len(), 2, "{name}");
            assert!(r.messages[1].text().starts_with(expected), "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parked injections across a pause (SPEC §5)

/// Confirms injected messages only.
fn steering_gate() -> Intervention {
    Intervention::named("steering").before_invocation(|ev, _| {
        if ev.is_injected() {
            BeforeInvocationAction::confirm("Allow this steering message?")
        } else {
            BeforeInvocationAction::Proceed
        }
    })
}

/// Asks before `count`.
fn count_gate() -> Intervention {
    Intervention::named("ask").before_tool_call(|ev, _| {
        if ev.tool_use().name == "count" {
            BeforeToolCallAction::confirm("Count?")
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

/// A tool (`note`) that injects "spend $9" through the interceptor in `slot`.
fn injecting(slot: &Arc<Mutex<Option<TurnInterceptor>>>) -> ToolHandle {
    let slot = slot.clone();
    ToolHandle::from_sync_fn(
        "note",
        "Takes a note.",
        json!({"type": "object"}),
        move |_, _| {
            let i = slot.lock().unwrap().clone().unwrap();
            i.inject(Message::user("spend $9")).unwrap();
            Ok(ToolOutput::text("noted"))
        },
    )
}

type Log = Arc<Mutex<Vec<String>>>;

/// note (the injected item is parked at the boundary) → count (asks: the run pauses). Returns
/// the count interrupt's id and the parked item's interrupt id.
async fn pause_with_a_parked_item(
    store: &SharedSessionStore,
    id: &str,
    runs: &Runs,
    rejected: &Log,
    name: &str,
) -> (Interrupt, Interrupt) {
    let slot = Arc::new(Mutex::new(None));
    let model = ScriptedModel::builder()
        .tool_use("n1", "note", json!({}))
        .tool_use("c1", "count", json!({}))
        .build();
    let a = builder(store, id, &model, runs)
        .tool(injecting(&slot))
        .intervention(steering_gate())
        .intervention(count_gate())
        .build()
        .unwrap();
    *slot.lock().unwrap() = Some(a.interceptor());
    let log = rejected.clone();
    a.interceptor()
        .on_rejected(move |_, m, why| log.lock().unwrap().push(format!("{}: {why}", m.text())));
    let parked = a.interceptor();
    let tool_iid = pause(a, "note, then count", name).await;
    let s = store.load(id).await.unwrap().unwrap();
    let p = s.pending_interrupts.as_ref().expect("pending persisted");
    assert_eq!(
        p.parked_injections().len(),
        1,
        "{name}: the parked item is persisted"
    );
    assert_eq!(
        p.parked_injections()[0].message.text(),
        "spend $9",
        "{name}"
    );
    let item_iid = p.parked_injections()[0].interrupts[0].clone();
    assert!(
        item_iid.id.starts_with("v1:before_invocation:"),
        "{name}: {item_iid:?}"
    );
    assert_eq!(
        parked.pending_approvals().len(),
        1,
        "{name}: still parked here"
    );
    assert!(
        rejected.lock().unwrap().is_empty(),
        "{name}: a pause rejects nothing"
    );
    (tool_iid, item_iid)
}

fn second_process(
    store: &SharedSessionStore,
    id: &str,
    model: &ScriptedModel,
    runs: &Runs,
) -> Agent {
    let slot = Arc::new(Mutex::new(None));
    builder(store, id, model, runs)
        .tool(injecting(&slot))
        .intervention(steering_gate())
        .intervention(count_gate())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_parked_injection_approved_after_a_restart_is_delivered_exactly_once() {
    let dir = TempDir::new("parked");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("parked");
        let runs = Runs::default();
        let rejected = Log::default();
        let (tool_iid, item_iid) =
            pause_with_a_parked_item(&store, &id, &runs, &rejected, name).await;

        let model = ScriptedModel::builder().text("done").text("again").build();
        let mut b = second_process(&store, &id, &model, &runs);
        let consumed = Log::default();
        let c = consumed.clone();
        b.interceptor()
            .on_consumed(move |_, m| c.lock().unwrap().push(m.text()));
        let r = rejected.clone();
        b.interceptor()
            .on_rejected(move |_, m, why| r.lock().unwrap().push(format!("{}: {why}", m.text())));
        b.load_session().await.unwrap();
        let pending = b.interceptor().pending_approvals();
        assert_eq!(pending.len(), 1, "{name}: restored onto the interceptor");
        assert_eq!(
            pending[0].interrupts[0], item_iid,
            "{name}: same interrupt id"
        );
        assert_eq!(
            pending[0].interrupts[0].fingerprint,
            Some(Message::fingerprint_all(&[Message::user("spend $9")])),
            "{name}: the fingerprint of what the human sees"
        );
        b.interceptor().answer(item_iid.answer(true)).unwrap();
        // Saved with its answer: a third process would deliver it too.
        b.save_session().await.unwrap();
        let s = store.load(&id).await.unwrap().unwrap();
        let p = s.pending_interrupts.unwrap();
        assert_eq!(p.parked_injections()[0].answers.len(), 1, "{name}");

        let r = b.invoke(vec![tool_iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        assert_eq!(*runs.lock().unwrap(), 1, "{name}");
        assert_eq!(
            *consumed.lock().unwrap(),
            ["spend $9"],
            "{name}: delivered once"
        );
        assert!(rejected.lock().unwrap().is_empty(), "{name}");
        let sent = model.requests()[0].messages.last().unwrap().text();
        assert!(
            sent.contains("spend $9"),
            "{name}: at the first boundary: {sent}"
        );
        assert!(b.interceptor().pending_approvals().is_empty(), "{name}");
        let messages = stored(&store, &id).await;
        assert_history_valid(&messages, name);

        // The next run does not deliver it again.
        b.invoke("and again").await.unwrap();
        assert_eq!(*consumed.lock().unwrap(), ["spend $9"], "{name}");
        let delivered = b
            .messages()
            .iter()
            .filter(|m| m.text().contains("spend $9"))
            .count();
        assert_eq!(delivered, 1, "{name}: stored once");
    }
}

#[tokio::test]
async fn a_parked_injection_is_rejected_when_the_restored_pause_is_discarded() {
    let dir = TempDir::new("parked-discard");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("parked-discard");
        let runs = Runs::default();
        let rejected = Log::default();
        pause_with_a_parked_item(&store, &id, &runs, &rejected, name).await;

        let model = ScriptedModel::builder().build();
        let mut b = second_process(&store, &id, &model, &runs);
        let r = Log::default();
        let r2 = r.clone();
        b.interceptor()
            .on_rejected(move |_, m, why| r2.lock().unwrap().push(format!("{}: {why}", m.text())));
        b.load_session().await.unwrap();
        assert_eq!(b.interceptor().pending_approvals().len(), 1, "{name}");
        b.discard_interrupts();
        b.save_session().await.unwrap();
        assert_eq!(*r.lock().unwrap(), ["spend $9: run ended"], "{name}");
        assert!(b.interceptor().pending_approvals().is_empty(), "{name}");
        assert_eq!(*runs.lock().unwrap(), 0, "{name}");
        let messages = stored(&store, &id).await;
        assert_history_valid(&messages, name);
    }
}
