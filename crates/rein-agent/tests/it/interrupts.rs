//! Interrupts and resume in memory (SPEC §4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_agent::{Input, ToolExecutor};
use rein_core::{
    Error, ToolHandle,
    event::{BeforeInvocationEvent, BeforeToolCallEvent},
    message::InterruptResponse,
    stream::StopReason,
    tool::ToolOutput,
};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::json;

fn two_tools() -> ScriptedModel {
    ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("a", "echo", json!({"text": "delete"}))
                .tool_use("b", "echo", json!({"text": "list"})),
        )
        .text("done")
        .build()
}

/// Asks for approval before echoing "delete"; cancels when the answer is not "yes".
fn approval_hook(e: &mut BeforeToolCallEvent) {
    if e.tool_use().input["text"] == "delete" {
        match e.interrupt("approval", "Delete?") {
            None => {}
            Some(answer) if answer == "yes" => {}
            Some(_) => e.cancel_tool = rein_core::event::Cancel::Message("rejected".into()),
        }
    }
}

#[tokio::test]
async fn concurrent_interrupt_keeps_other_results_and_resume_finishes_in_order() {
    let log = Log::default();
    let model = two_tools();
    let state = Log::default();
    let s = state.clone();
    let mut agent = agent(model.clone())
        .tool(echo_tool(&log))
        .hook(approval_hook)
        .hook(move |e: &mut BeforeInvocationEvent| {
            s.push(format!(
                "resume={} state={}",
                e.is_resume(),
                e.invocation_state()
                    .get("user")
                    .cloned()
                    .unwrap_or_default()
            ))
        })
        .build()
        .unwrap();
    let r = agent
        .invoke(Input::text("go").with_state(json!({"user": "ann"})))
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert_eq!(r.interrupts.len(), 1);
    let id = r.interrupts[0].clone();
    assert!(id.id.starts_with("v1:before_tool_call:a:"), "{id:?}");
    assert_eq!(r.interrupts[0].name, "approval");
    assert!(
        r.message.has_tool_use(),
        "result message holds the tool uses"
    );
    assert_eq!(log.take(), vec!["ran echo:list"], "b ran, a waits");
    assert_eq!(agent.messages().len(), 2, "no results stored yet");
    let Some(rein_agent::Pause::Tools(tools)) = agent.pending_interrupts().map(|p| p.pause())
    else {
        panic!("paused in the tool phase");
    };
    assert_eq!(tools.completed.len(), 1);

    // Errors while pending.
    assert!(matches!(
        agent.invoke("new prompt").await,
        Err(Error::InterruptsPending)
    ));
    assert!(matches!(
        agent
            .invoke(vec![InterruptResponse::new("nope", "yes")])
            .await,
        Err(Error::UnknownInterrupt(_))
    ));

    let r = agent.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(r.text(), "done");
    assert_eq!(
        log.take(),
        vec!["ran echo:delete"],
        "only the tool without a result ran"
    );
    assert_history_valid(agent.messages());
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![
            ("a".into(), "delete".into(), false),
            ("b".into(), "list".into(), false)
        ],
        "results in tool-use order after the resume"
    );
    assert_eq!(
        state.take(),
        vec!["resume=false state=\"ann\"", "resume=true state=\"ann\""]
    );
    assert_eq!(
        model.requests().len(),
        2,
        "the resume replays without a model call"
    );
    assert!(agent.pending_interrupts().is_none());
    assert!(matches!(
        agent.invoke(vec![id.answer("yes")]).await,
        Err(Error::NoPendingInterrupts)
    ));
}

#[tokio::test]
async fn rejected_answer_and_null_answer() {
    let log = Log::default();
    let mut agent = agent(two_tools())
        .tool(echo_tool(&log))
        .hook(approval_hook)
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    let id = r.interrupts[0].clone();
    // null is no answer at all: asked again.
    let r = agent
        .invoke(vec![id.answer(serde_json::Value::Null)])
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert_eq!(r.interrupts[0].id, id.id);
    let r = agent
        .invoke(vec![r.interrupts[0].answer("no")])
        .await
        .unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![
            ("a".into(), "rejected".into(), true),
            ("b".into(), "list".into(), false)
        ]
    );
}

#[tokio::test]
async fn sequential_executor_stops_at_first_interrupt() {
    let log = Log::default();
    let mut agent = agent(two_tools())
        .tool(echo_tool(&log))
        .tool_executor(ToolExecutor::Sequential)
        .hook(approval_hook)
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    assert!(log.take().is_empty(), "b waits behind a");
    let id = r.interrupts[0].clone();
    agent.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(log.take(), vec!["ran echo:delete", "ran echo:list"]);
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn tool_raises_interrupt_through_its_context() {
    let model = ScriptedModel::builder()
        .tool_use("t1", "transfer", json!({"amount": 100}))
        .text("sent")
        .build();
    let transfer = ToolHandle::from_fn(
        "transfer",
        "Moves money.",
        json!({"type": "object"}),
        |input, cx| async move {
            let answer = cx.interrupt("confirm-transfer", format!("Send {}?", input["amount"]))?;
            Ok(ToolOutput::text(format!("answer {answer}")))
        },
    );
    let mut agent = agent(model).tool(transfer).build().unwrap();
    let r = agent.invoke("pay").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let i = &r.interrupts[0];
    assert!(i.id.starts_with("v1:tool_call:t1:"));
    assert_eq!(i.reason, json!("Send 100?"));
    let r = agent.invoke(vec![i.answer("ok")]).await.unwrap();
    assert_eq!(r.text(), "sent");
    assert_eq!(
        agent.messages()[2].tool_results().next().unwrap().text(),
        "answer \"ok\""
    );
}

#[tokio::test]
async fn discard_interrupts_repairs_history() {
    let log = Log::default();
    let mut agent = agent(
        ScriptedModel::builder()
            .response(
                ScriptedResponse::new()
                    .tool_use("a", "echo", json!({"text": "delete"}))
                    .tool_use("b", "echo", json!({"text": "list"})),
            )
            .text("after")
            .build(),
    )
    .tool(echo_tool(&log))
    .hook(approval_hook)
    .build()
    .unwrap();
    agent.invoke("go").await.unwrap();
    agent.discard_interrupts();
    assert!(agent.pending_interrupts().is_none());
    assert_history_valid(agent.messages());
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![
            ("a".into(), "Tool was interrupted.".into(), true),
            ("b".into(), "list".into(), false)
        ]
    );
    // A new prompt joins the trailing tool-result message.
    let r = agent.invoke("next").await.unwrap();
    assert_eq!(r.text(), "after");
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn resume_via_interrupt_response_message_and_pending_is_serializable() {
    let log = Log::default();
    let mut agent = agent(two_tools())
        .tool(echo_tool(&log))
        .hook(approval_hook)
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    let json = serde_json::to_string(agent.pending_interrupts().unwrap()).unwrap();
    let back: rein_agent::PausedRun = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, agent.pending_interrupts().unwrap());
    let version: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(version["schema_version"], rein_agent::CHECKPOINT_VERSION);
    let msg = rein_core::Message::new(
        rein_core::Role::User,
        vec![rein_core::ContentBlock::InterruptResponse(Box::new(
            r.interrupts[0].answer("yes"),
        ))],
    );
    let r = agent.invoke(msg).await.unwrap();
    assert_eq!(r.text(), "done");
}

/// A resume whose assistant message is no longer in history (replaced by the caller) fails
/// with a typed error and keeps the pending interrupts: set the history right, resume again.
#[tokio::test]
async fn resume_without_its_assistant_message_fails_and_keeps_the_interrupts() {
    let log = Log::default();
    let mut agent = agent(two_tools())
        .tool(echo_tool(&log))
        .hook(approval_hook)
        .build()
        .unwrap();
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let id = r.interrupts[0].clone();
    let history = agent.messages().to_vec();
    let ids = agent.message_ids().to_vec();
    agent.set_messages(history[..1].to_vec(), None);

    let err = agent.invoke(vec![id.answer("yes")]).await.unwrap_err();
    assert!(matches!(err, Error::PendingMessageMissing), "{err:?}");
    assert!(agent.pending_interrupts().is_some(), "kept");

    agent.set_messages(history, Some(ids));
    let r = agent.invoke(vec![id.answer("yes")]).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(r.message.text(), "done");
    log.take();
}
