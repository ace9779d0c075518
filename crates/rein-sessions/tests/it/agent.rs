//! An agent bound to a session: restore, persistence as it runs, interrupts, the repair rule,
//! conflicts surfacing from an invocation, the conversation manager's window.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_agent::{Agent, AgentBuilder, SlidingWindow, TOOL_INTERRUPTED};
use rein_core::{
    ContentBlock, Message, Role, ToolHandle, ToolUse, event::BeforeToolCallEvent, id::MessageId,
    stream::StopReason,
};
use rein_models::ScriptedModel;
use rein_sessions::{
    FileSessionStore, MemorySessionStore, SessionError, SessionManager, SessionStore, SessionWrite,
    SharedSessionStore, StoredMessage,
};
use serde_json::json;

fn counter_tool() -> ToolHandle {
    ToolHandle::from_fn(
        "count",
        "Counts calls in the agent state.",
        json!({"type": "object"}),
        |_, cx| async move {
            let n = cx
                .agent_state()
                .get("count")
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
                + 1;
            cx.agent_state().set("count", n);
            Ok(format!("count={n}").into())
        },
    )
}

fn builder(store: &SharedSessionStore, id: &str, model: ScriptedModel) -> AgentBuilder {
    Agent::builder()
        .model(model)
        .tool(counter_tool())
        .session(SessionManager::new(store.clone(), id))
}

fn approval(e: &mut BeforeToolCallEvent) {
    if let Some(a) = e.interrupt("approval", "Count?")
        && a != "yes"
    {
        e.cancel_tool = rein_core::event::Cancel::Message("rejected".into());
    }
}

#[tokio::test]
async fn loading_a_session_that_does_not_exist_writes_nothing() {
    let dir = TempDir::new("agent");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("absent");
        let mut a = builder(&store, &id, ScriptedModel::repeating_text("hi"))
            .build()
            .unwrap();
        assert!(!a.load_session().await.unwrap(), "{name}");
        assert!(
            store.load(&id).await.unwrap().is_none(),
            "{name}: a read created it"
        );
        // The first invocation creates it.
        a.invoke("hello").await.unwrap();
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 2, "{name}");

        // An agent built with messages keeps them at once.
        let seeded = session_id("seeded");
        let mut b = builder(&store, &seeded, ScriptedModel::repeating_text("hi"))
            .messages(vec![Message::user("from the builder")])
            .build()
            .unwrap();
        assert!(!b.load_session().await.unwrap(), "{name}");
        let s = store.load(&seeded).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 1, "{name}");
    }
}

/// A server builds its agent once and binds each conversation to its own session.
#[tokio::test]
async fn conversations_of_one_agent_persist_to_their_own_sessions() {
    let dir = TempDir::new("agent");
    for (name, store, _) in stores(&dir).await {
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .text("counted")
            .text("hello")
            .text("restored")
            .build();
        let support = Agent::builder()
            .model(model)
            .tool(counter_tool())
            .build()
            .unwrap();
        let (ann, ben) = (session_id("ann"), session_id("ben"));
        let bind = |id: &str| {
            support
                .new_conversation()
                .session(SessionManager::new(store.clone(), id))
                .build()
        };
        let mut a = bind(&ann);
        let mut b = bind(&ben);
        a.invoke("count").await.unwrap();
        b.invoke("hi").await.unwrap();
        let (sa, sb) = (
            store.load(&ann).await.unwrap().unwrap(),
            store.load(&ben).await.unwrap().unwrap(),
        );
        assert_eq!((sa.messages.len(), sb.messages.len()), (4, 2), "{name}");
        assert_eq!(sa.agent_state["count"], json!(1), "{name}");
        assert!(sb.agent_state.get("count").is_none(), "{name}");
        // A later request restores its conversation from its session.
        let mut again = bind(&ann);
        assert!(again.load_session().await.unwrap(), "{name}");
        assert_eq!(again.messages(), a.messages(), "{name}");
        assert_eq!(again.state().get("count"), Some(json!(1)), "{name}");
        assert_eq!(again.invoke("more").await.unwrap().text(), "restored");
        assert_eq!(store.load(&ann).await.unwrap().unwrap().messages.len(), 6);
        assert!(support.messages().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn history_state_and_ids_survive_a_new_agent() {
    let dir = TempDir::new("agent");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("restore");
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .text("counted")
            .build();
        let mut a = builder(&store, &id, model).build().unwrap();
        let r = a.invoke("count once").await.unwrap();
        assert_eq!(r.text(), "counted", "{name}");
        assert_eq!(a.messages().len(), 4);

        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 4, "{name}: every message persisted");
        assert_eq!(s.agent_state["count"], json!(1), "{name}");

        let mut b = builder(&store, &id, ScriptedModel::builder().text("again").build())
            .build()
            .unwrap();
        assert!(b.load_session().await.unwrap(), "{name}");
        assert_eq!(b.messages(), a.messages(), "{name}");
        assert_eq!(b.message_ids(), a.message_ids(), "{name}: ids kept");
        assert_eq!(b.state().get("count"), Some(json!(1)), "{name}");
        b.invoke("and again").await.unwrap();
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 6, "{name}");
        assert_eq!(
            s.checkpoint(),
            b.checkpoint(),
            "{name}: the store holds the agent at rest"
        );
        assert_eq!(
            s.messages.iter().map(|m| m.id).collect::<Vec<_>>(),
            b.message_ids(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn interrupt_is_persisted_and_a_new_agent_resumes() {
    let dir = TempDir::new("interrupt");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("hitl");
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .build();
        let mut a = builder(&store, &id, model).hook(approval).build().unwrap();
        let r = a.invoke("count").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        assert_eq!(p.interrupts()[0], iid, "{name}");
        assert_eq!(s.messages.len(), 2, "{name}: no result stored yet");
        // What the store holds is the agent at rest, paused run and all.
        assert_eq!(s.checkpoint(), a.checkpoint(), "{name}");
        drop(a);

        let model = ScriptedModel::builder().text("done").build();
        let mut b = builder(&store, &id, model).hook(approval).build().unwrap();
        // Restoring does not repair a tail whose interrupt is pending.
        b.load_session().await.unwrap();
        assert_eq!(b.messages().len(), 2, "{name}");
        assert!(b.pending_interrupts().is_some(), "{name}");
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert!(
            s.pending_interrupts.is_none(),
            "{name}: cleared once consumed"
        );
        assert_eq!(s.messages.len(), 4, "{name}");
        let result = s.messages[2].message.tool_results().next().unwrap().clone();
        assert_eq!(result.text(), "count=1", "{name}");
        assert_eq!(s.agent_state["count"], json!(1), "{name}");
    }
}

/// A tool budget of two calls per run (`max_tool_calls`, scope invocation) and a confirm on
/// `count`, as one policy file would give them.
fn budget_policies() -> rein_interventions::policy::Policy {
    rein_interventions::policy::Policy::from_toml_str(
        r#"
        [[policy]]
        kind = "confirm_tools"
        name = "ask"
        tools = ["count"]
        prompt = "Count?"

        [[policy]]
        kind = "max_tool_calls"
        name = "budget"
        limit = 2
        "#,
    )
    .unwrap()
}

#[tokio::test]
async fn a_run_budget_survives_a_resume_by_a_new_agent() {
    let dir = TempDir::new("budget");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("budget");
        // One run: `count` (asks first), then two more tool calls. The budget is two calls per
        // run, so the third is denied — also when the run is resumed by a new agent, with new
        // handlers, that knows only what the store kept.
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .build();
        let mut a = builder(&store, &id, model)
            .interventions(budget_policies().into_handlers())
            .build()
            .unwrap();
        let r = a.invoke("count three times").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        assert_eq!(
            p.run_state()["budget:count"]["count"],
            json!(1),
            "{name}: the call asked about is counted once, in the run state"
        );
        drop(a);

        let model = ScriptedModel::builder()
            .tool_use("t2", "count", json!({}))
            .tool_use("t3", "count", json!({}))
            .text("done")
            .build();
        let mut b = builder(&store, &id, model)
            .interventions(budget_policies().into_handlers())
            .build()
            .unwrap();
        b.load_session().await.unwrap();
        assert_eq!(
            b.run_state().get("budget:count").unwrap()["count"],
            json!(1)
        );
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        // t2 asks again (a new call); answer it pre-emptively is not possible, so it pauses.
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        let iid2 = r.interrupts[0].clone();
        let r = b.invoke(vec![iid2.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        let results: Vec<String> = b
            .messages()
            .iter()
            .flat_map(|m| m.tool_results())
            .map(|r| r.text())
            .collect();
        assert_eq!(
            results,
            ["count=1", "count=2", "DENIED: tool call limit (2) reached"],
            "{name}: the third call of the run is over the budget"
        );
        assert!(
            b.run_state().is_empty(),
            "{name}: the run ended, its state went"
        );
        let s = store.load(&id).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");

        // A new run starts with a fresh budget.
        let model = ScriptedModel::builder()
            .tool_use("t4", "count", json!({}))
            .build();
        let mut c = builder(&store, &id, model)
            .interventions(budget_policies().into_handlers())
            .build()
            .unwrap();
        c.load_session().await.unwrap();
        let r = c.invoke("again").await.unwrap();
        assert_eq!(
            r.stop_reason,
            StopReason::Interrupt,
            "{name}: asked, not denied"
        );
    }
}

/// Asks before the model sees what `count` returned.
fn output_review() -> rein_interventions::Intervention {
    rein_interventions::Intervention::named("review").after_tool_call(|ev, _| {
        rein_interventions::AfterToolCallAction::confirm(format!("Send '{}'?", ev.result.text()))
    })
}

#[tokio::test]
async fn a_held_tool_result_is_persisted_and_a_new_agent_resumes_without_running_the_tool() {
    let dir = TempDir::new("held");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("held");
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .build();
        let mut a = builder(&store, &id, model)
            .intervention(output_review())
            .build()
            .unwrap();
        let r = a.invoke("count").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        assert_eq!(r.interrupts[0].reason, json!("Send 'count=1'?"), "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        let rein_agent::Pause::Tools(tools) = p.pause() else {
            panic!("{name}: paused in the tool phase");
        };
        assert_eq!(tools.held[0].text(), "count=1", "{name}");
        assert_eq!(s.agent_state["count"], json!(1), "{name}");
        drop(a);

        let model = ScriptedModel::builder().text("done").build();
        let mut b = builder(&store, &id, model)
            .intervention(output_review())
            .build()
            .unwrap();
        b.load_session().await.unwrap();
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");
        let result = s.messages[2].message.tool_results().next().unwrap().clone();
        assert_eq!(result.text(), "count=1", "{name}");
        assert_eq!(
            s.agent_state["count"],
            json!(1),
            "{name}: the tool ran once"
        );
    }
}

#[tokio::test]
async fn an_approval_with_an_edit_is_applied_by_a_new_agent() {
    let dir = TempDir::new("edit");
    let ask = || {
        rein_interventions::Intervention::named("ask")
            .before_tool_call(|_, _| rein_interventions::BeforeToolCallAction::confirm("Count?"))
    };
    for (name, store, _) in stores(&dir).await {
        let id = session_id("edit");
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({"by": 1}))
            .build();
        let mut a = builder(&store, &id, model)
            .intervention(ask())
            .build()
            .unwrap();
        let r = a.invoke("count").await.unwrap();
        let iid = r.interrupts[0].clone();
        drop(a);

        let model = ScriptedModel::builder().text("done").build();
        let mut b = builder(&store, &id, model)
            .intervention(ask())
            .build()
            .unwrap();
        b.load_session().await.unwrap();
        let edit = rein_core::interrupt::Approval::approve().with_edit(json!({"by": 2}));
        let r = b.invoke(vec![iid.answer(edit)]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        let stored = s.messages[1].message.tool_uses().next().unwrap().clone();
        assert_eq!(
            stored.input,
            json!({"by": 2}),
            "{name}: the edit is persisted"
        );
        assert_eq!(s.agent_state["count"], json!(1), "{name}: ran once");
    }
}

#[tokio::test]
async fn a_held_response_is_persisted_and_a_new_agent_resumes_without_calling_the_model() {
    let dir = TempDir::new("held-response");
    let review = || {
        rein_interventions::Intervention::named("review").after_model_call(|ev, _| {
            if ev.response().is_some_and(|r| r.message.has_tool_use()) {
                rein_interventions::AfterModelCallAction::confirm("Go ahead?")
            } else {
                rein_interventions::AfterModelCallAction::Proceed
            }
        })
    };
    for (name, store, _) in stores(&dir).await {
        let id = session_id("held-response");
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .build();
        let mut a = builder(&store, &id, model)
            .intervention(review())
            .build()
            .unwrap();
        let r = a.invoke("count").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 1, "{name}: the response is not stored");
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        assert!(
            matches!(p.pause(), rein_agent::Pause::Response(_)),
            "{name}"
        );
        drop(a);

        // The new agent's model only has the reply after the tool: the held response is not
        // asked for again.
        let model = ScriptedModel::builder().text("done").build();
        let mut b = builder(&store, &id, model)
            .intervention(review())
            .build()
            .unwrap();
        b.load_session().await.unwrap();
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 4, "{name}");
        assert_eq!(s.agent_state["count"], json!(1), "{name}");
        assert!(s.pending_interrupts.is_none(), "{name}");
    }
}

fn broken_tail() -> Vec<SessionWrite> {
    vec![
        SessionWrite::AppendMessage(StoredMessage::new(MessageId::new(), Message::user("go"))),
        SessionWrite::AppendMessage(StoredMessage::new(
            MessageId::new(),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::ToolUse(Box::new(ToolUse::new("a", "count", json!({})))),
                    ContentBlock::ToolUse(Box::new(ToolUse::new("b", "count", json!({})))),
                ],
            ),
        )),
    ]
}

#[tokio::test]
async fn restore_repairs_a_broken_tail_only_without_a_pending_interrupt() {
    let store = SharedSessionStore::new(MemorySessionStore::new());
    // A process died mid tool phase: tool uses without results, nothing pending.
    store.write("crashed", 0, broken_tail()).await.unwrap();
    let mut a = builder(
        &store,
        "crashed",
        ScriptedModel::builder().text("ok").build(),
    )
    .build()
    .unwrap();
    a.load_session().await.unwrap();
    assert_eq!(a.messages().len(), 3);
    let results: Vec<_> = a.messages()[2].tool_results().cloned().collect();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.is_error() && r.text() == TOOL_INTERRUPTED)
    );
    let s = store.load("crashed").await.unwrap().unwrap();
    assert_eq!(s.messages.len(), 3, "the repair is persisted at once");
    a.invoke("next").await.unwrap();

    // Same tail, but an interrupt is pending for it: left alone, the resume finishes it.
    let model = ScriptedModel::builder()
        .tool_use("t1", "count", json!({}))
        .build();
    let mut b = builder(&store, "pending", model)
        .hook(approval)
        .build()
        .unwrap();
    let r = b.invoke("count").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let mut c = builder(
        &store,
        "pending",
        ScriptedModel::builder().text("x").build(),
    )
    .build()
    .unwrap();
    c.load_session().await.unwrap();
    assert_eq!(c.messages().len(), 2, "not repaired");
    // Abandoning it repairs and persists.
    c.discard_interrupts();
    c.save_session().await.unwrap();
    let s = store.load("pending").await.unwrap().unwrap();
    assert!(s.pending_interrupts.is_none());
    assert_eq!(
        s.messages[2].message.tool_results().next().unwrap().text(),
        TOOL_INTERRUPTED
    );
}

#[tokio::test]
async fn a_stale_agent_gets_a_typed_conflict_and_recovers_by_reloading() {
    let dir = TempDir::new("conflict");
    let store = SharedSessionStore::new(FileSessionStore::new(dir.path()));
    let mut a = builder(
        &store,
        "shared",
        ScriptedModel::builder().text("a1").text("a2").build(),
    )
    .build()
    .unwrap();
    let mut b = builder(
        &store,
        "shared",
        ScriptedModel::builder().text("b1").text("b2").build(),
    )
    .build()
    .unwrap();
    a.load_session().await.unwrap();
    b.load_session().await.unwrap();
    a.invoke("from a").await.unwrap();
    let err = b.invoke("from b").await.unwrap_err();
    assert!(
        matches!(
            SessionError::of(&err),
            Some(SessionError::Conflict { expected, found, .. }) if found > expected
        ),
        "{err}"
    );
    // The retry path: reload, redo.
    b.load_session().await.unwrap();
    assert_eq!(b.messages().len(), 2, "sees a's turn");
    b.invoke("from b").await.unwrap();
    let s = store.load("shared").await.unwrap().unwrap();
    let texts: Vec<String> = s.messages.iter().map(|m| m.message.text()).collect();
    // The conflict hit when storing the prompt, before any model call.
    assert_eq!(texts, ["from a", "a1", "from b", "b1"]);
}

#[tokio::test]
async fn window_drops_are_recorded_and_restored() {
    let dir = TempDir::new("window");
    let store = SharedSessionStore::new(FileSessionStore::new(dir.path()));
    let mut model = ScriptedModel::builder();
    for i in 0..6 {
        model = model.text(format!("r{i}"));
    }
    let mut a = builder(&store, "win", model.build())
        .conversation_manager(SlidingWindow::new(4))
        .build()
        .unwrap();
    for i in 0..6 {
        a.invoke(format!("q{i}").as_str()).await.unwrap();
    }
    assert_eq!(a.messages().len(), 4);
    let s = store.load("win").await.unwrap().unwrap();
    assert_eq!(s.messages.len(), 12, "dropped messages stay stored");
    assert_eq!(s.history_start, 8);
    assert_eq!(
        s.conversation_manager_state["removed_message_count"],
        json!(8)
    );
    assert_eq!(
        s.checkpoint(),
        a.checkpoint(),
        "the history from history_start on"
    );
    let mut b = builder(&store, "win", ScriptedModel::builder().text("x").build())
        .conversation_manager(SlidingWindow::new(4))
        .build()
        .unwrap();
    b.load_session().await.unwrap();
    assert_eq!(b.messages(), a.messages());
    assert_eq!(
        b.conversation_manager_state()["removed_message_count"],
        json!(8)
    );
}

#[tokio::test]
async fn a_failing_store_is_a_typed_error_not_a_panic() {
    let dir = TempDir::new("failing");
    // The root is a file: every write fails.
    let root = dir.path().join("not-a-dir");
    std::fs::write(&root, b"x").unwrap();
    let store = SharedSessionStore::new(FileSessionStore::new(&root));
    let mut a = builder(&store, "s", ScriptedModel::builder().text("hi").build())
        .build()
        .unwrap();
    let err = a.invoke("hello").await.unwrap_err();
    assert!(
        matches!(SessionError::of(&err), Some(SessionError::Io { .. })),
        "{err}"
    );
    let bad = SharedSessionStore::new(MemorySessionStore::new());
    let mut b = builder(&bad, "bad/id", ScriptedModel::builder().text("hi").build())
        .build()
        .unwrap();
    let err = b.invoke("x").await.unwrap_err();
    assert!(
        matches!(SessionError::of(&err), Some(SessionError::InvalidId(_))),
        "{err}"
    );
}

#[tokio::test]
async fn a_rewritten_message_is_persisted_through_message_updated() {
    let store = SharedSessionStore::new(MemorySessionStore::new());
    let model = ScriptedModel::builder()
        .tool_use("t1", "count", json!({"n": 1}))
        .text("ok")
        .build();
    let mut a = builder(&store, "rewrite", model)
        .hook(|e: &mut BeforeToolCallEvent| {
            e.tool_use_mut().input = json!({"n": 2, "rewritten": true});
        })
        .build()
        .unwrap();
    a.invoke("go").await.unwrap();
    let s = store.load("rewrite").await.unwrap().unwrap();
    let stored_use = s.messages[1].message.tool_uses().next().unwrap().clone();
    assert_eq!(stored_use.input, json!({"n": 2, "rewritten": true}));
    assert_eq!(
        s.messages.iter().map(|m| &m.message).collect::<Vec<_>>(),
        a.messages().iter().collect::<Vec<_>>(),
        "memory and the persisted session agree"
    );
    // Every message was written as it was stored, and the rewrite as one more write.
    assert!(s.version >= 5, "version {}", s.version);
}

#[tokio::test]
async fn a_held_request_is_persisted_and_a_new_agent_makes_the_call_once_approved() {
    let dir = TempDir::new("held-request");
    let egress = || {
        rein_interventions::Intervention::named("egress").before_model_call(|_, _| {
            rein_interventions::BeforeModelCallAction::confirm("Send to the provider?")
        })
    };
    for (name, store, _) in stores(&dir).await {
        let id = session_id("held-request");
        let model = ScriptedModel::builder().text("never sent").build();
        let mut a = builder(&store, &id, model.clone())
            .intervention(egress())
            .build()
            .unwrap();
        let r = a.invoke("hello").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        assert!(model.requests().is_empty(), "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 1, "{name}: the prompt is stored");
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        assert!(
            matches!(p.pause(), rein_agent::Pause::Request { .. }),
            "{name}"
        );
        drop(a);

        let model = ScriptedModel::builder().text("hi").build();
        let mut b = builder(&store, &id, model.clone())
            .intervention(egress())
            .build()
            .unwrap();
        b.load_session().await.unwrap();
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "hi", "{name}");
        assert_eq!(model.requests().len(), 1, "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 2, "{name}");
        assert!(s.pending_interrupts.is_none(), "{name}");
    }
}

#[tokio::test]
async fn a_held_input_is_persisted_and_a_new_agent_admits_it_once_approved() {
    let dir = TempDir::new("held-input");
    let gate = || {
        rein_interventions::Intervention::named("gate").before_invocation(|_, _| {
            rein_interventions::BeforeInvocationAction::confirm("Let this in?")
        })
    };
    for (name, store, _) in stores(&dir).await {
        let id = session_id("held-input");
        let mut a = builder(&store, &id, ScriptedModel::builder().build())
            .intervention(gate())
            .build()
            .unwrap();
        let r = a.invoke("wire $5").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        assert!(s.messages.is_empty(), "{name}: nothing stored");
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        assert_eq!(
            p.pause(),
            &rein_agent::Pause::Input {
                messages: vec![Message::user("wire $5")]
            },
            "{name}"
        );
        drop(a);

        let model = ScriptedModel::builder().text("wired").build();
        let mut b = builder(&store, &id, model.clone())
            .intervention(gate())
            .build()
            .unwrap();
        b.load_session().await.unwrap();
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "wired", "{name}");
        assert_eq!(model.requests()[0].messages[0].text(), "wire $5", "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 2, "{name}");
        assert!(s.pending_interrupts.is_none(), "{name}");
    }
}

/// Asks before `count` only.
fn count_approval(e: &mut BeforeToolCallEvent) {
    if e.tool_use().name == "count" {
        approval(e);
    }
}

#[tokio::test]
async fn an_item_queued_at_a_pause_is_delivered_once_after_the_resume_in_another_process() {
    use std::sync::{Arc, Mutex};
    let dir = TempDir::new("queued");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("queued");
        let slot: Arc<Mutex<Option<rein_agent::TurnInterceptor>>> = Arc::default();
        let noting = noting_tool(slot.clone());
        let model = ScriptedModel::builder()
            .response(
                rein_models::ScriptedResponse::new()
                    .tool_use("n1", "note", json!({}))
                    .tool_use("c1", "count", json!({})),
            )
            .build();
        let mut a = builder(&store, &id, model)
            .tool(noting)
            .hook(count_approval)
            .build()
            .unwrap();
        *slot.lock().unwrap() = Some(a.interceptor());
        let rejected: Arc<Mutex<Vec<String>>> = Arc::default();
        let r2 = rejected.clone();
        a.interceptor()
            .on_rejected(move |_, _, reason| r2.lock().unwrap().push(reason.to_owned()));
        let r = a.invoke("note and count").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        let iid = r.interrupts[0].clone();
        let s = store.load(&id).await.unwrap().unwrap();
        let p = s.pending_interrupts.as_ref().expect("pending persisted");
        assert_eq!(
            p.queued_injections().len(),
            1,
            "{name}: the queue is persisted"
        );
        // Injected while the run waits for the human; saved with the pending interrupts.
        a.interceptor().inject("and the logs").unwrap();
        a.save_session().await.unwrap();
        drop(a);
        assert!(
            rejected.lock().unwrap().is_empty(),
            "{name}: nothing rejected"
        );

        let model = ScriptedModel::builder().text("done").build();
        let mut b = builder(&store, &id, model.clone())
            .hook(count_approval)
            .build()
            .unwrap();
        let consumed: Arc<Mutex<Vec<String>>> = Arc::default();
        let c = consumed.clone();
        b.interceptor()
            .on_consumed(move |_, m| c.lock().unwrap().push(m.text()));
        b.load_session().await.unwrap();
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "done", "{name}");
        assert_eq!(
            *consumed.lock().unwrap(),
            ["also check the backups", "and the logs"],
            "{name}: each delivered once, in order"
        );
        let sent = model.requests()[0].messages.last().unwrap().text();
        assert!(sent.contains("also check the backups"), "{name}: {sent}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");
    }
}

/// triage hands off to refunds, whose `refund` needs approval.
fn triage_team(
    store: &SharedSessionStore,
    id: &str,
    triage: &ScriptedModel,
    refunds: &ScriptedModel,
) -> Agent {
    let refund = rein_core::ToolHandle::from_sync_fn(
        "refund",
        "Refunds an order.",
        json!({"type": "object"}),
        |_, _| Ok(rein_core::tool::ToolOutput::text("refunded")),
    );
    let refunds = Agent::builder()
        .name("refunds")
        .model(refunds.clone())
        .tool(refund)
        .intervention(
            rein_interventions::Intervention::named("refund-approval").before_tool_call(|_, _| {
                rein_interventions::BeforeToolCallAction::confirm("Refund order 7?")
            }),
        )
        .build()
        .unwrap();
    Agent::builder()
        .name("triage")
        .model(triage.clone())
        .handoff(refunds)
        .session(SessionManager::new(store.clone(), id))
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_approval_after_a_handoff_resumes_with_the_agent_in_control_after_a_restart() {
    let dir = TempDir::new("handoff");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("handoff");
        let triage = ScriptedModel::builder()
            .tool_use("h1", "transfer_to_refunds", json!({}))
            .build();
        let refunds = ScriptedModel::builder()
            .tool_use("r1", "refund", json!({"order": 7}))
            .build();
        let mut a = triage_team(&store, &id, &triage, &refunds);
        let r = a.invoke("refund order 7").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        assert_eq!(r.handoffs.len(), 1, "{name}");
        let iid = r.interrupts[0].clone();
        drop(a);

        let triage = ScriptedModel::builder().text("never").build();
        let refunds = ScriptedModel::builder()
            .text("Order 7 is refunded.")
            .build();
        let mut b = triage_team(&store, &id, &triage, &refunds);
        b.load_session().await.unwrap();
        assert_eq!(
            b.name(),
            "refunds",
            "{name}: the agent in control is restored"
        );
        let r = b.invoke(vec![iid.answer("yes")]).await.unwrap();
        assert_eq!(r.text(), "Order 7 is refunded.", "{name}");
        assert!(triage.requests().is_empty(), "{name}");
    }
}

/// The human-in-the-loop handler across agents sharing a store (as processes would): the
/// interrupt is resumed by a new agent, and "always" trusts the tool for the rest of the
/// session — a third agent on the same session runs it without asking; another session asks.
#[tokio::test]
async fn human_approval_resumes_in_a_new_agent_and_trust_lasts_the_session() {
    use rein_interventions::approval::HumanApproval;
    let dir = TempDir::new("hitl");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("hitl");
        let agent = |model: ScriptedModel, session: &str| {
            builder(&store, session, model)
                .intervention(HumanApproval::new("approval").tools(["count"]))
                .build()
                .unwrap()
        };
        let model = ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .build();
        let r = agent(model, &id).invoke("count once").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        assert_eq!(r.interrupts[0].reason["prompt"], "Allow count?", "{name}");
        let interrupt = r.interrupts[0].clone();

        let model = ScriptedModel::builder().text("counted").build();
        let mut second = agent(model, &id);
        let r = second
            .invoke(vec![interrupt.answer("always")])
            .await
            .unwrap();
        assert_eq!(r.text(), "counted", "{name}");
        assert_eq!(
            second.state().get("approval:trusted"),
            Some(json!(["count"])),
            "{name}"
        );

        let model = ScriptedModel::builder()
            .tool_use("t2", "count", json!({}))
            .text("counted again")
            .build();
        let r = agent(model, &id).invoke("count again").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::EndTurn, "{name}");
        assert_eq!(r.text(), "counted again", "{name}");

        let model = ScriptedModel::builder()
            .tool_use("t3", "count", json!({}))
            .build();
        let other = session_id("hitl-other");
        let r = agent(model, &other).invoke("count").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
    }
}

/// The first `Summary` block of a message.
fn summary_of(m: &Message) -> Option<&rein_core::message::Summary> {
    m.content.iter().find_map(|b| match b {
        ContentBlock::Summary(s) => Some(&**s),
        _ => None,
    })
}

/// Issue 43: a summary replaces older messages in the agent's history, but the store keeps
/// them (before `history_start`), the summary names their ids, and a new agent loads the
/// history with the summary as it was.
#[tokio::test]
async fn a_summary_keeps_its_source_in_the_store_and_round_trips() {
    use rein_agent::SummarizingWindow;
    use rein_core::stream::Usage;
    use rein_models::ScriptedResponse;
    let dir = TempDir::new("summary");
    let store = SharedSessionStore::new(FileSessionStore::new(dir.path()));
    // Long answers, no reported usage (the estimate stays the heuristic's).
    let mut model = ScriptedModel::builder();
    for i in 0..6 {
        model = model.response(
            ScriptedResponse::new()
                .text(format!("r{i} {}", "x".repeat(800)))
                .usage(Usage::new(0, 1)),
        );
    }
    let summarizer = ScriptedModel::builder()
        .text("Earlier: long answers r0..")
        .cycle()
        .build();
    let manager = || SummarizingWindow::new(700).summarizer(summarizer.clone());
    let mut a = builder(&store, "sum", model.build())
        .conversation_manager(manager())
        .build()
        .unwrap();
    for i in 0..6 {
        a.invoke(format!("q{i}").as_str()).await.unwrap();
    }
    let summary = summary_of(&a.messages()[0])
        .expect("the history starts with a summary")
        .clone();
    assert_eq!(a.messages()[0].content[0], ContentBlock::text("q0"));
    let s = store.load("sum").await.unwrap().unwrap();
    assert_eq!(s.messages.len(), 12, "summarized messages stay stored");
    assert!(s.history_start > 0);
    assert_eq!(s.checkpoint(), a.checkpoint());
    // The summary's range names stored messages, ending just before the history starts
    // (where the latest summary's source ends).
    let ids: Vec<MessageId> = s.messages.iter().map(|m| m.id).collect();
    let first = ids.iter().position(|id| *id == summary.first_message_id);
    let last = ids.iter().position(|id| *id == summary.last_message_id);
    let (Some(first), Some(last)) = (first, last) else {
        panic!("the summary's range is not stored: {summary:?}");
    };
    assert!(first <= last && last < s.history_start as usize);
    assert_eq!(
        s.conversation_manager_state["summary_count"],
        a.conversation_manager_state()["summary_count"]
    );

    let mut b = builder(&store, "sum", ScriptedModel::builder().text("y").build())
        .conversation_manager(manager())
        .build()
        .unwrap();
    b.load_session().await.unwrap();
    assert_eq!(b.messages(), a.messages());
    assert_eq!(
        b.conversation_manager_state(),
        a.conversation_manager_state()
    );
}
