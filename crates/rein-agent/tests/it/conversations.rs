//! Many conversations with one built agent (`Agent::new_conversation`): the definition is
//! shared, each conversation is its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use rein_agent::{Agent, NoConversationManager, SlidingWindow};
use rein_core::{Message, event::BeforeToolCallEvent, stream::StopReason};
use rein_models::ScriptedModel;
use serde_json::json;

#[tokio::test]
async fn conversations_share_the_definition_and_keep_their_own_history_and_state() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("e1", "echo", json!({"text": "a"}))
        .text("first done")
        .tool_use("e2", "echo", json!({"text": "b"}))
        .text("second done")
        .build();
    let seen = log.clone();
    let support = agent(model.clone())
        .name("support")
        .system_prompt("Be brief.")
        .tool(echo_tool(&log))
        .hook(move |e: &mut BeforeToolCallEvent| seen.push(format!("hook:{}", e.tool_use().name)))
        .state(state_of("tenant", "acme"))
        .build()
        .unwrap();
    let mut alice = support.new_conversation().build();
    let mut bob = support
        .new_conversation()
        .messages(vec![Message::user("earlier"), Message::assistant("noted")])
        .state(state_of("user", "bob"))
        .build();
    assert_eq!(
        (alice.name(), alice.tool_names()),
        ("support", vec!["echo"])
    );
    assert_eq!(alice.invoke("one").await.unwrap().text(), "first done");
    assert_eq!(bob.invoke("two").await.unwrap().text(), "second done");
    // One hook and one tool, registered once, serve both conversations.
    assert_eq!(
        log.take(),
        ["hook:echo", "ran echo:a", "hook:echo", "ran echo:b"]
    );
    assert_eq!(alice.messages().len(), 4);
    assert_eq!(bob.messages().len(), 6);
    assert_eq!(bob.messages()[0].text(), "earlier");
    // The built agent's conversation and state are its own: a new conversation starts empty.
    assert!(support.messages().is_empty());
    assert_eq!(support.state().get("tenant"), Some(json!("acme")));
    assert_eq!(alice.state().get("tenant"), None);
    assert_eq!(bob.state().get("user"), Some(json!("bob")));
    alice.state().set("k", 1);
    assert_eq!(bob.state().get("k"), None);
    // Same system prompt in both requests, each with its own history.
    let requests = model.requests();
    assert_eq!(requests[0].system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(requests[2].system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(requests[2].messages[0].text(), "earlier");
    assert_history_valid(alice.messages());
    assert_history_valid(bob.messages());
}

#[tokio::test]
async fn a_new_conversation_gets_a_fresh_manager_like_the_agents() {
    let model = ScriptedModel::repeating_text("ok");
    let windowed = agent(model.clone())
        .conversation_manager(SlidingWindow::new(4))
        .build()
        .unwrap();
    let mut a = windowed.new_conversation().build();
    for _ in 0..3 {
        a.invoke("hi").await.unwrap();
    }
    assert_eq!(a.messages().len(), 4, "the agent's window of 4");
    assert_eq!(
        a.conversation_manager_state(),
        json!({"removed_message_count": 2, "window": 4})
    );
    // Fresh: nothing removed yet, though the first conversation removed some.
    let b = windowed.new_conversation().build();
    assert_eq!(
        b.conversation_manager_state(),
        json!({"removed_message_count": 0, "window": 4})
    );
    // Replaced for one conversation.
    let mut c = windowed
        .new_conversation()
        .conversation_manager(NoConversationManager)
        .build();
    for _ in 0..3 {
        c.invoke("hi").await.unwrap();
    }
    assert_eq!(c.messages().len(), 6);
    // The default window when the agent was built with it.
    let plain = agent(model).build().unwrap().new_conversation().build();
    assert_eq!(
        plain.conversation_manager_state(),
        json!({"removed_message_count": 0, "window": 40})
    );
}

#[tokio::test]
async fn a_new_conversation_starts_with_the_agent_as_built_not_the_one_in_control() {
    let triage_model = ScriptedModel::builder()
        .tool_use("h1", "transfer_to_refunds", json!({}))
        .text("Triage here.")
        .build();
    let refunds_model = ScriptedModel::repeating_text("Refund issued.");
    let refunds = Agent::builder()
        .name("refunds")
        .model(refunds_model)
        .build()
        .unwrap();
    let mut triage = agent(triage_model)
        .name("triage")
        .handoff(refunds)
        .build()
        .unwrap();
    assert_eq!(
        triage.invoke("money back").await.unwrap().text(),
        "Refund issued."
    );
    assert_eq!(triage.name(), "refunds");
    let mut fresh = triage.new_conversation().build();
    assert_eq!(fresh.name(), "triage");
    assert!(fresh.tool_names().contains(&"transfer_to_refunds"));
    assert_eq!(fresh.invoke("hello").await.unwrap().text(), "Triage here.");
}

#[tokio::test(start_paused = true)]
async fn interrupts_and_cancels_stay_in_their_conversation() {
    let model = ScriptedModel::builder()
        .tool_use("t1", "echo", json!({"text": "x"}))
        .text("after approval")
        .text("slow answer")
        .call_delay(Duration::from_millis(50))
        .build();
    let log = Log::default();
    let support = agent(model)
        .tool(echo_tool(&log))
        .hook(|e: &mut BeforeToolCallEvent| {
            let _ = e.interrupt("approve", "Run echo?");
        })
        .build()
        .unwrap();
    let mut waiting = support.new_conversation().build();
    let mut other = support.new_conversation().build();
    let r = waiting.invoke("echo x").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert!(other.pending_interrupts().is_none());
    // Both run at once; cancelling one conversation's handle leaves the other's run alone.
    let cancel = waiting.cancel_handle();
    let id = r.interrupts[0].clone();
    let resumed = tokio::spawn(async move {
        let r = waiting.invoke(vec![id.answer("yes")]).await.unwrap();
        (waiting, r)
    });
    let other_run = tokio::spawn(async move {
        let r = other.invoke("hi").await.unwrap();
        (other, r)
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    cancel.cancel();
    let (waiting, r) = resumed.await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    let (other, o) = other_run.await.unwrap();
    assert_eq!(o.stop_reason, StopReason::EndTurn);
    assert_history_valid(waiting.messages());
    assert_history_valid(other.messages());
}
