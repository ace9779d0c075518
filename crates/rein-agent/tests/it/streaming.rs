//! Streaming: deltas as they arrive, discard/replace events, holding deltas (SPEC §2).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_agent::AgentEvent;
use rein_core::{event::AfterModelCallEvent, stream::StopReason};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::json;

async fn collect(agent: &mut rein_agent::Agent, prompt: &str) -> Vec<AgentEvent> {
    let mut s = agent.stream(prompt);
    let mut out = Vec::new();
    while let Some(e) = s.next().await {
        out.push(e.unwrap());
    }
    out
}

fn deltas(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_deltas_then_finished() {
    let model = ScriptedModel::builder()
        .text("hello world")
        .chunk_chars(3)
        .build();
    let mut agent = agent(model).build().unwrap();
    let events = collect(&mut agent, "hi").await;
    assert_eq!(deltas(&events), vec!["hel", "lo ", "wor", "ld"]);
    match events.last().unwrap() {
        AgentEvent::Finished(r) => assert_eq!(r.text(), "hello world"),
        other => panic!("{other:?}"),
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::MessageAdded { .. }))
    );
}

#[tokio::test]
async fn tool_events_are_streamed() {
    let log = Log::default();
    let model = ScriptedModel::builder()
        .tool_use("a", "echo", json!({"text": "x"}))
        .text("done")
        .build();
    let mut agent = agent(model).tool(echo_tool(&log)).build().unwrap();
    let events = collect(&mut agent, "go").await;
    assert!(events.iter().any(
        |e| matches!(e, AgentEvent::ToolInputDelta { tool_use_id, .. } if tool_use_id == "a")
    ));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolCallStarted { .. }))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolResult(r) if r.text() == "x"))
    );
}

#[tokio::test]
async fn retried_response_is_discarded_in_the_stream() {
    let model = ScriptedModel::builder().text("bad").text("good").build();
    let mut agent = agent(model)
        .hook(|e: &mut AfterModelCallEvent| {
            if e.response().is_some_and(|r| r.message.text() == "bad") {
                e.retry = true;
            }
        })
        .build()
        .unwrap();
    let events = collect(&mut agent, "hi").await;
    let pos_bad = events
        .iter()
        .position(|e| matches!(e, AgentEvent::TextDelta(t) if t == "bad"))
        .unwrap();
    let pos_discard = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ResponseDiscarded { .. }))
        .unwrap();
    let pos_good = events
        .iter()
        .position(|e| matches!(e, AgentEvent::TextDelta(t) if t == "good"))
        .unwrap();
    assert!(pos_bad < pos_discard && pos_discard < pos_good);
}

#[tokio::test]
async fn held_deltas_never_show_unapproved_text() {
    let model = ScriptedModel::builder().text("bad").text("good").build();
    let mut agent = agent(model)
        .hold_deltas_until_verdict(true)
        .hook(|e: &mut AfterModelCallEvent| {
            if e.response().is_some_and(|r| r.message.text() == "bad") {
                e.retry = true;
            }
        })
        .build()
        .unwrap();
    let events = collect(&mut agent, "hi").await;
    assert_eq!(deltas(&events), vec!["good"]);
    // Nothing of the withdrawn response was shown, so nothing is retracted.
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ResponseDiscarded { .. })),
        "{events:?}"
    );
}

#[tokio::test]
async fn edited_response_is_replaced_in_the_stream() {
    let model = ScriptedModel::builder().text("ssn 123-45-6789").build();
    let mut agent = agent(model)
        .hook(|e: &mut AfterModelCallEvent| {
            if let Some(m) = e.message_mut() {
                *m = rein_core::Message::assistant("ssn [REDACTED]");
            }
        })
        .build()
        .unwrap();
    let events = collect(&mut agent, "hi").await;
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ResponseReplaced { message } if message.text() == "ssn [REDACTED]")));
    assert_eq!(agent.messages()[1].text(), "ssn [REDACTED]");
}

#[tokio::test(start_paused = true)]
async fn deltas_arrive_before_the_stream_ends() {
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::new().text("abcdef"))
        .chunk_chars(1)
        .chunk_delay(std::time::Duration::from_millis(100))
        .build();
    let mut agent = agent(model).build().unwrap();
    let start = tokio::time::Instant::now();
    let mut s = agent.stream("hi");
    let mut first_at = None;
    while let Some(e) = s.next().await {
        if let AgentEvent::TextDelta(_) = e.unwrap()
            && first_at.is_none()
        {
            first_at = Some(start.elapsed());
        }
    }
    // Events are 100 ms apart: the first delta is the third event, the stream lasts ~1 s.
    assert_eq!(first_at.unwrap(), std::time::Duration::from_millis(200));
    assert!(start.elapsed() >= std::time::Duration::from_millis(900));
    let _ = StopReason::EndTurn;
}

#[tokio::test]
async fn guidance_joined_to_the_prompt_is_streamed_as_message_updated() {
    use rein_interventions::{BeforeModelCallAction, Intervention};
    let model = ScriptedModel::builder().text("ok").build();
    let mut agent = agent(model)
        .intervention(Intervention::named("context").before_model_call(|ev, _| {
            if ev.model_call_index() == 0 {
                BeforeModelCallAction::guide("answer in French")
            } else {
                BeforeModelCallAction::Proceed
            }
        }))
        .build()
        .unwrap();
    let events = collect(&mut agent, "hi").await;
    let (id, added) = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::MessageAdded { id, message } => Some((*id, message.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(added.text(), "hi");
    let updated = events.iter().find_map(|e| match e {
        AgentEvent::MessageUpdated { id: u, message } if *u == id => Some(message.clone()),
        _ => None,
    });
    assert_eq!(
        updated.map(|m| m.text()),
        Some("hi[context] answer in French".to_owned())
    );
}

#[tokio::test]
async fn a_discard_names_the_handler_and_the_retry_limit() {
    use rein_interventions::{AfterModelCallAction, Intervention};
    let model = ScriptedModel::builder().text("rude").text("rude").build();
    let mut agent = agent(model)
        .max_hook_retries(1)
        .intervention(
            Intervention::named("tone")
                .after_model_call(|_, _| AfterModelCallAction::guide("be polite")),
        )
        .build()
        .unwrap();
    let events = collect(&mut agent, "hi").await;
    let discards: Vec<(String, Option<String>)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ResponseDiscarded { reason, handler } => {
                Some((reason.clone(), handler.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        discards,
        vec![
            (
                "retry requested by a hook".to_owned(),
                Some("tone".to_owned())
            ),
            (
                "DENIED: retry limit (1) reached".to_owned(),
                Some("rein:retry-limit".to_owned())
            ),
        ]
    );
}

/// Progress reported by a running tool streams as `ToolProgress` of its tool use, between its
/// start and its result; a flood unread is coalesced to the newest report (one event, not ten
/// thousand); a report after the tool returned is dropped; `invoke` offers no listener.
#[tokio::test]
async fn tool_progress_streams_coalesced_and_never_after_the_result() {
    use std::sync::{Arc, Mutex};

    use rein_core::{
        ToolHandle,
        tool::{ToolContext, ToolProgress},
    };

    let kept: Arc<Mutex<Option<ToolContext>>> = Arc::default();
    let listened: Arc<Mutex<Vec<bool>>> = Arc::default();
    let (k, l) = (kept.clone(), listened.clone());
    let flood = ToolHandle::from_sync_fn("flood", "Reports often.", json!({}), move |_, cx| {
        l.lock().unwrap().push(cx.progress_listened());
        // The context of the first call, kept past its return.
        let earlier = k.lock().unwrap().replace(cx.clone());
        if let Some(earlier) = earlier {
            earlier.report_progress(ToolProgress::new(-1.0));
        }
        for i in 1..=10_000 {
            cx.report_progress(ToolProgress::new(f64::from(i)).with_total(10_000.0));
        }
        Ok("flooded".into())
    });
    let model = ScriptedModel::builder()
        .tool_use("first", "flood", json!({}))
        .tool_use("second", "flood", json!({}))
        .text("done")
        .build();
    let mut streamed = agent(model).tool(flood.clone()).build().unwrap();
    let events = collect(&mut streamed, "go").await;
    let position = |f: &dyn Fn(&AgentEvent) -> bool| events.iter().position(f).unwrap();
    for id in ["first", "second"] {
        let reports: Vec<(usize, f64, Option<f64>, &str)> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                AgentEvent::ToolProgress {
                    tool_use_id,
                    name,
                    progress,
                    total,
                    ..
                } if tool_use_id == id => Some((i, *progress, *total, name.as_str())),
                _ => None,
            })
            .collect();
        // One event, the newest; the first call's late report (-1) never arrives.
        assert_eq!(
            reports.iter().map(|r| (r.1, r.2, r.3)).collect::<Vec<_>>(),
            vec![(10_000.0, Some(10_000.0), "flood")],
            "{id}"
        );
        let started = position(
            &|e| matches!(e, AgentEvent::ToolCallStarted { tool_use } if tool_use.tool_use_id == id),
        );
        let ended = position(&|e| matches!(e, AgentEvent::ToolResult(r) if r.tool_use_id == id));
        assert!(started < reports[0].0 && reports[0].0 < ended, "{id}");
    }
    assert_eq!(*listened.lock().unwrap(), vec![true, true]);

    // `invoke`: nobody reads events, the tool's context has no listener.
    let model = ScriptedModel::builder()
        .tool_use("third", "flood", json!({}))
        .text("done")
        .build();
    let mut invoked = agent(model).tool(flood).build().unwrap();
    invoked.invoke("go").await.unwrap();
    assert_eq!(*listened.lock().unwrap(), vec![true, true, false]);
}
