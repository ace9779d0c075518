//! Cancelling a running invocation (SPEC §6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use rein_agent::AgentEvent;
use rein_core::{event::AfterInvocationEvent, stream::StopReason};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn cancel_mid_stream_discards_the_partial_response() {
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().text("a long answer"))
        .chunk_chars(1)
        .chunk_delay(Duration::from_millis(50))
        .build();
    let fired = Log::default();
    let f = fired.clone();
    let mut agent = agent(model)
        .hook(move |e: &mut AfterInvocationEvent| {
            f.push(format!("{:?}", e.result().unwrap().stop_reason))
        })
        .build()
        .unwrap();
    let handle = agent.cancel_handle();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(120)).await;
        handle.cancel();
        tokio::time::Instant::now()
    });
    let r = agent.invoke("hi").await.unwrap();
    let cancelled_at = canceller.await.unwrap();
    assert!(tokio::time::Instant::now() - cancelled_at < Duration::from_millis(50));
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(r.text(), "Cancelled by user");
    assert_eq!(
        agent.messages().len(),
        1,
        "partial response not stored, cancel text not stored"
    );
    assert_eq!(fired.take(), vec!["Cancelled"]);
}

#[tokio::test(start_paused = true)]
async fn cancel_during_a_tool_gives_cancelled_results() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("fast", "sleep", json!({"ms": 1}))
                .tool_use("slow", "sleep", json!({"ms": 10_000})),
        )
        .text("never")
        .build();
    let mut agent = agent(model).tool(sleepy_tool(&log)).build().unwrap();
    let handle = agent.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.cancel_with("stop now");
    });
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(r.text(), "stop now");
    assert_history_valid(agent.messages());
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![
            ("fast".into(), "slept 1".into(), false),
            ("slow".into(), "Tool execution cancelled".into(), true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_during_back_off() {
    let model = ScriptedModel::builder().throttled().text("never").build();
    let mut agent = rein_agent::Agent::builder().model(model).build().unwrap();
    let handle = agent.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        handle.cancel();
    });
    let start = tokio::time::Instant::now();
    let r = agent.invoke("hi").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert!(start.elapsed() < Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn cancel_after_tools_lets_tools_finish() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("a", "sleep", json!({"ms": 200}))
        .text("never")
        .build();
    let mut agent = agent(model.clone())
        .tool(sleepy_tool(&log))
        .build()
        .unwrap();
    let handle = agent.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        handle.cancel_after_tools();
    });
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(log.take(), vec!["slept 200"]);
    assert_eq!(model.requests().len(), 1);
    assert_history_valid(agent.messages());
}

/// A cancel ends the run it was made in, not the next one; the handle, taken once, cancels
/// each run it is used in.
#[tokio::test(start_paused = true)]
async fn a_cancel_ends_only_its_run() {
    let model = ScriptedModel::builder()
        .text("answer")
        .cycle()
        .call_delay(Duration::from_millis(100))
        .build();
    let mut agent = agent(model).build().unwrap();
    let handle = agent.cancel_handle();
    let h = handle.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        h.cancel();
    });
    let r = agent.invoke("one").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    let r = agent.invoke("two").await.unwrap();
    assert_eq!(
        (r.stop_reason, r.text()),
        (StopReason::EndTurn, "answer".to_owned())
    );
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        handle.cancel_with("stop");
    });
    let r = agent.invoke("three").await.unwrap();
    assert_eq!(
        (r.stop_reason, r.text()),
        (StopReason::Cancelled, "stop".to_owned())
    );
    assert_history_valid(agent.messages());
}

#[tokio::test]
async fn cancel_when_idle_does_nothing() {
    let model = ScriptedModel::builder().text("fine").build();
    let mut agent = agent(model).build().unwrap();
    agent.cancel_handle().cancel();
    let r = agent.invoke("hi").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
}

#[tokio::test(start_paused = true)]
async fn cancel_a_stream() {
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().text("abcdefgh"))
        .chunk_chars(1)
        .chunk_delay(Duration::from_millis(10))
        .build();
    let mut agent = agent(model).build().unwrap();
    let handle = agent.cancel_handle();
    let mut s = agent.stream("hi");
    let mut n = 0;
    let mut last = None;
    while let Some(e) = s.next().await {
        let e = e.unwrap();
        if matches!(e, AgentEvent::TextDelta(_)) {
            n += 1;
            if n == 2 {
                handle.cancel();
            }
        }
        last = Some(e);
    }
    match last.unwrap() {
        AgentEvent::Finished(r) => assert_eq!(r.stop_reason, StopReason::Cancelled),
        other => panic!("{other:?}"),
    }
    drop(s);
    assert_eq!(agent.messages().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_while_a_hook_awaits_an_approval() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("a", "echo", json!({"text": "x"}))
        .text("never")
        .build();
    let mut agent = agent(model)
        .tool(echo_tool(&log))
        .hook_async(|_: &mut rein_core::event::BeforeToolCallEvent| {
            Box::pin(async {
                // An inline approval prompt nobody answers.
                std::future::pending::<()>().await;
            })
        })
        .build()
        .unwrap();
    let handle = agent.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        handle.cancel();
    });
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert!(log.take().is_empty());
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("a".into(), "Tool execution cancelled".into(), true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_mid_tool_leaves_history_repairable() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("a", "sleep", json!({"ms": 10_000}))
        .text("second answer")
        .build();
    let mut agent = agent(model).tool(sleepy_tool(&log)).build().unwrap();
    let steer = agent.interceptor();
    {
        let mut s = agent.stream("go");
        while let Some(e) = s.next().await {
            if matches!(e.unwrap(), AgentEvent::ToolCallStarted { .. }) {
                steer.inject("orphaned").unwrap();
                break; // the caller walks away mid-tool
            }
        }
    }
    let rejected = Log::default();
    let r2 = rejected.clone();
    steer.on_rejected(move |_, _, reason| r2.push(reason.to_owned()));
    let r = agent.invoke("next").await.unwrap();
    assert_eq!(r.text(), "second answer");
    assert_history_valid(agent.messages());
    assert_eq!(
        results_of(&agent.messages()[2]),
        vec![("a".into(), "Tool execution cancelled".into(), true)]
    );
    assert_eq!(
        rejected.take(),
        vec!["stale"],
        "the dropped run's injection is never delivered"
    );
}

/// Issue #37 (honest cancel), in process: cancelled at any point, a run's history answers
/// exactly the tool calls whose effect happened (the ledger's) with their results; a call cut
/// short did nothing and says cancelled.
#[tokio::test(start_paused = true)]
async fn a_cancel_at_any_point_keeps_the_result_of_every_tool_that_ran() {
    use rein_core::{ToolHandle, tool::ToolOutput};
    use std::sync::{Arc, Mutex};

    for point in 0..40u64 {
        let ledger: Arc<Mutex<Vec<String>>> = Arc::default();
        let written = ledger.clone();
        let tool = ToolHandle::from_fn(
            "ledger",
            "Records a step.",
            json!({"type": "object"}),
            move |_, cx| {
                let (written, id) = (written.clone(), cx.tool_use_id().to_owned());
                async move {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                    written.lock().unwrap().push(id);
                    Ok::<_, rein_core::tool::ToolError>(ToolOutput::text("recorded"))
                }
            },
        );
        let mut script = ScriptedModel::builder().call_delay(Duration::from_millis(5));
        for i in 0..20 {
            script = script.tool_use(format!("step-{i}"), "ledger", json!({}));
        }
        let mut agent = agent(script.text("done").build())
            .tool(tool)
            .build()
            .unwrap();
        let handle = agent.cancel_handle();
        // Cancel points 7 ms apart: in model calls, in tools, between them.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1 + point * 7)).await;
            handle.cancel();
        });
        let r = agent.invoke("go").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Cancelled, "point {point}");
        assert_history_valid(agent.messages());
        let ran = ledger.lock().unwrap().clone();
        for m in agent.messages() {
            for (id, text, _) in results_of(m) {
                let effect = ran.contains(&id);
                assert_eq!(
                    text == "recorded",
                    effect,
                    "point {point}: {id} says {text:?}, its effect happened: {effect}"
                );
            }
        }
    }
}
