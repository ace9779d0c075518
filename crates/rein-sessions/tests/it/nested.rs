//! A paused run restored by a new agent and abandoned there: what was injected into it is
//! rejected `run ended`, and the store keeps no pending state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use rein_agent::{Agent, TOOL_INTERRUPTED, TurnInterceptor};
use rein_core::{ToolHandle, event::BeforeToolCallEvent, stream::StopReason};
use rein_models::{ScriptedModel, ScriptedResponse};
use rein_sessions::{SessionManager, SessionStore, SharedSessionStore};
use serde_json::json;

type Fates = Arc<Mutex<Vec<(String, String)>>>;

/// `note` injects "also check the backups" through the interceptor in `slot`; `count` asks
/// for approval first.
fn agent(store: &SharedSessionStore, id: &str, model: ScriptedModel) -> (Agent, Fates) {
    let slot: Arc<Mutex<Option<TurnInterceptor>>> = Arc::default();
    let note = noting_tool(slot.clone());
    let count = ToolHandle::from_sync_fn("count", "Counts.", json!({"type": "object"}), |_, _| {
        Ok(rein_core::tool::ToolOutput::text("counted"))
    });
    let agent = Agent::builder()
        .model(model)
        .tool(note)
        .tool(count)
        .hook(|e: &mut BeforeToolCallEvent| {
            if e.tool_use().name == "count" {
                let _ = e.interrupt("approval", "Count?");
            }
        })
        .session(SessionManager::new(store.clone(), id))
        .build()
        .unwrap();
    *slot.lock().unwrap() = Some(agent.interceptor());
    let fates: Fates = Arc::default();
    let i = agent.interceptor();
    let f = fates.clone();
    i.on_consumed(move |_, m| f.lock().unwrap().push((m.text(), "consumed".into())));
    let f = fates.clone();
    i.on_rejected(move |_, m, reason| f.lock().unwrap().push((m.text(), reason.into())));
    (agent, fates)
}

#[tokio::test]
async fn discarding_a_restored_pause_rejects_its_queue_and_clears_the_store() {
    let dir = TempDir::new("discard");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("discard");
        let model = ScriptedModel::builder()
            .response(
                ScriptedResponse::new()
                    .tool_use("n1", "note", json!({}))
                    .tool_use("c1", "count", json!({})),
            )
            .build();
        let (mut a, fates) = agent(&store, &id, model);
        let r = a.invoke("note and count").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt, "{name}");
        a.interceptor().inject("and the logs").unwrap();
        a.save_session().await.unwrap();
        drop(a);
        assert!(
            fates.lock().unwrap().is_empty(),
            "{name}: nothing decided yet"
        );

        // A new agent (as after a restart) restores the pause and abandons it.
        let (mut b, fates) = agent(&store, &id, ScriptedModel::builder().build());
        assert!(b.load_session().await.unwrap(), "{name}");
        assert!(b.pending_interrupts().is_some(), "{name}");
        b.discard_interrupts();
        b.save_session().await.unwrap();
        assert_eq!(
            *fates.lock().unwrap(),
            [
                ("also check the backups".to_owned(), "run ended".to_owned()),
                ("and the logs".to_owned(), "run ended".to_owned())
            ],
            "{name}: each rejected once"
        );
        assert_eq!(
            b.interceptor().inject("too late"),
            Err(rein_agent::InjectError::NoActiveRun),
            "{name}: the run is over"
        );
        let s = store.load(&id).await.unwrap().unwrap();
        assert!(
            s.pending_interrupts.is_none(),
            "{name}: no pending state stored"
        );
        let results: Vec<String> = s.messages[2]
            .message
            .tool_results()
            .map(|r| r.text())
            .collect();
        assert_eq!(results, ["noted", TOOL_INTERRUPTED], "{name}");

        // A third agent finds nothing to resume or deliver.
        let model = ScriptedModel::builder().text("fresh start").build();
        let (mut c, fates) = agent(&store, &id, model.clone());
        c.load_session().await.unwrap();
        assert!(c.pending_interrupts().is_none(), "{name}");
        assert_eq!(c.invoke("hello").await.unwrap().text(), "fresh start");
        assert!(
            fates.lock().unwrap().is_empty(),
            "{name}: nothing delivered late"
        );
        let sent = model.requests()[0].messages.last().unwrap().text();
        assert_eq!(sent, "hello", "{name}");
    }
}
