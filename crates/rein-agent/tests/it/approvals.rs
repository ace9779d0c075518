//! Approvals cannot be replayed (SPEC §4): an answer given to one pause never approves a call
//! of a later pause — not through repeated tool-use ids (providers that send none, providers
//! that repeat theirs), not through an answer that names no fingerprint or another one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use rein_core::{Error, message::InterruptResponse, stream::StopReason};
use rein_interventions::{BeforeToolCallAction, Confirm, Intervention};
use rein_models::conformance::{FixtureResponse, FixtureServer};
use rein_models::{OllamaModel, OpenAiModel, ScriptedModel};
use serde_json::json;

/// Asks before echoing anything that starts with `delete`.
fn guard() -> Intervention {
    Intervention::named("guard").before_tool_call(|ev, _| {
        let text = ev.tool_use().input["text"].as_str().unwrap_or_default();
        if text.starts_with("delete") {
            BeforeToolCallAction::Confirm(Confirm::new(format!("Run {text}?")))
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

/// An agent with the `echo` tool (its runs logged) behind the guard, on `model`.
fn guarded(model: impl rein_models::Model + 'static) -> (rein_agent::Agent, Log) {
    let log = Log::default();
    let agent = rein_agent::Agent::builder()
        .model(model)
        .tool(echo_tool(&log))
        .intervention(guard())
        .build()
        .unwrap();
    (agent, log)
}

/// Scripted calls of `echo`, one response each, all with the tool-use id `t1`, then `done`.
fn repeating_t1(texts: &[&str]) -> ScriptedModel {
    let mut b = ScriptedModel::builder();
    for text in texts {
        b = b.tool_use("t1", "echo", json!({ "text": text }));
    }
    b.text("done").build()
}

/// An OpenAI-compatible stream with one tool call that carries no id (llama.cpp, some vLLM and
/// LiteLLM setups send none).
fn openai_idless_call(text: &str) -> FixtureResponse {
    let args = json!({ "text": text }).to_string();
    let first = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "type": "function", "function": {"name": "echo", "arguments": args}}
    ]}, "finish_reason": null}]});
    let last = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
    FixtureResponse::sse(&format!(
        "data: {first}\n\ndata: {last}\n\ndata: [DONE]\n\n"
    ))
}

fn openai_text(text: &str) -> FixtureResponse {
    let first = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
    let last = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    FixtureResponse::sse(&format!(
        "data: {first}\n\ndata: {last}\n\ndata: [DONE]\n\n"
    ))
}

/// An Ollama NDJSON stream with one tool call without an id (Ollama sends none before 0.12).
fn ollama_idless_call(text: &str) -> FixtureResponse {
    let call = json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "echo", "arguments": {"text": text}}}
    ]}, "done": false});
    let done = json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": true});
    // One line per chunk, as Ollama sends them.
    FixtureResponse::sse(&format!("{call}\n\n{done}\n\n"))
}

fn ollama_text(text: &str) -> FixtureResponse {
    let line =
        json!({"model": "m", "message": {"role": "assistant", "content": text}, "done": false});
    let done = json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": true});
    FixtureResponse::sse(&format!("{line}\n\n{done}\n\n"))
}

/// Pauses on `delete a`, approves it, pauses again on `delete b` (a new call of a new
/// response), then replays the first resume: it must not approve `delete b`.
async fn replay_after_a_new_pause((mut agent, log): (rein_agent::Agent, Log)) {
    let r = agent.invoke("go").await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Interrupt);
    let first = r.interrupts[0].answer("yes");
    let r = agent.invoke(vec![first.clone()]).await.unwrap();
    assert_eq!(log.take(), vec!["ran echo:delete a"]);
    assert_eq!(r.stop_reason, StopReason::Interrupt, "paused on delete b");
    let waiting = r.interrupts.clone();

    // The same resume again (a retried request, a replayed one): refused, nothing runs.
    let replayed = agent.invoke(vec![first]).await;
    assert!(log.take().is_empty(), "the replay approved delete b");
    assert!(
        matches!(replayed, Err(Error::UnknownInterrupt(_))),
        "{replayed:?}"
    );
    let still = agent.pending_interrupts().expect("still pending");
    assert_eq!(still.interrupts(), waiting);
    assert_history(&agent);
}

#[tokio::test]
async fn a_replayed_resume_does_not_approve_the_next_idless_openai_call() {
    let server = FixtureServer::start().await.unwrap();
    server.push(openai_idless_call("delete a"));
    server.push(openai_idless_call("delete b"));
    server.push(openai_text("done"));
    let model = OpenAiModel::builder("m")
        .base_url(server.base_url())
        .api_key("k")
        .idle_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    replay_after_a_new_pause(guarded(model)).await;
}

#[tokio::test]
async fn a_replayed_resume_does_not_approve_the_next_idless_ollama_call() {
    let server = FixtureServer::start().await.unwrap();
    server.push(ollama_idless_call("delete a"));
    server.push(ollama_idless_call("delete b"));
    server.push(ollama_text("done"));
    let model = OllamaModel::builder("m")
        .base_url(server.base_url())
        .idle_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    replay_after_a_new_pause(guarded(model)).await;
}

/// A provider that repeats its own tool-use ids (each response starts again at `t1`): the
/// interrupt id repeats, the pause's nonce does not.
#[tokio::test]
async fn a_replayed_resume_does_not_approve_a_call_with_a_repeated_tool_use_id() {
    let model = repeating_t1(&["delete a", "delete b"]);
    replay_after_a_new_pause(guarded(model)).await;
}

/// An answer that names no fingerprint is refused for an interrupt bound to one: the call
/// stays pending.
#[tokio::test]
async fn an_answer_without_the_fingerprint_is_refused_and_the_call_stays_pending() {
    let model = repeating_t1(&["delete a"]);
    let (mut agent, log) = guarded(model);
    let r = agent.invoke("go").await.unwrap();
    let asked = r.interrupts[0].clone();
    let raw = InterruptResponse::new(asked.resume_id(), "yes");
    let refused = agent.invoke(vec![raw]).await;
    assert!(
        log.take().is_empty(),
        "an answer naming no fingerprint approved the call"
    );
    assert!(
        matches!(
            &refused,
            Err(Error::FingerprintMismatch { given: None, .. })
        ),
        "{refused:?}"
    );
    assert_eq!(
        agent.pending_interrupts().unwrap().interrupts(),
        vec![asked.clone()]
    );

    // Answered as asked, it runs.
    let r = agent.invoke(vec![asked.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(log.take(), vec!["ran echo:delete a"]);
}

/// An answer naming the new pause's id but the fingerprint of the call approved before (an
/// attacker who read the new id) is refused: the call stays pending.
#[tokio::test]
async fn an_answer_with_another_calls_fingerprint_is_refused_and_the_call_stays_pending() {
    let model = repeating_t1(&["delete a", "delete b"]);
    let (mut agent, log) = guarded(model);
    let r = agent.invoke("go").await.unwrap();
    let first = r.interrupts[0].clone();
    let r = agent.invoke(vec![first.answer("yes")]).await.unwrap();
    assert_eq!(log.take(), vec!["ran echo:delete a"]);
    let second = r.interrupts[0].clone();
    assert_eq!(
        second.id, first.id,
        "the same handler on the same tool-use id"
    );
    assert_ne!(second.resume_id(), first.resume_id(), "another pause");
    assert_ne!(second.fingerprint, first.fingerprint);

    let forged = InterruptResponse::new(second.resume_id(), "yes")
        .with_fingerprint(first.fingerprint.clone().unwrap());
    let refused = agent.invoke(vec![forged]).await;
    assert!(
        matches!(
            &refused,
            Err(Error::FingerprintMismatch { given: Some(_), .. })
        ),
        "{refused:?}"
    );
    assert!(log.take().is_empty());
    assert_eq!(
        agent.pending_interrupts().unwrap().interrupts(),
        vec![second.clone()]
    );
    let r = agent.invoke(vec![second.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(log.take(), vec!["ran echo:delete b"]);
}

/// Every pause draws a fresh nonce, also for the interrupts it asks again.
#[tokio::test]
async fn each_pause_has_a_fresh_nonce() {
    let model = ScriptedModel::builder()
        .response(
            rein_models::ScriptedResponse::new()
                .tool_use("a", "echo", json!({"text": "delete a"}))
                .tool_use("b", "echo", json!({"text": "delete b"})),
        )
        .text("done")
        .build();
    let (mut agent, _log) = guarded(model);
    let r = agent.invoke("go").await.unwrap();
    let (a, b) = (r.interrupts[0].clone(), r.interrupts[1].clone());
    assert!(a.nonce.as_ref().is_some_and(|n| n.len() == 32), "{a:?}");
    assert_eq!(a.nonce, b.nonce, "one nonce per pause");
    // Only `a` answered: `b` is asked again, in a new pause.
    let r = agent.invoke(vec![a.answer("yes")]).await.unwrap();
    let again = &r.interrupts[0];
    assert_eq!(again.id, b.id);
    assert_ne!(again.nonce, b.nonce);
    let stale = agent.invoke(vec![b.answer("yes")]).await;
    assert!(
        matches!(stale, Err(Error::UnknownInterrupt(_))),
        "{stale:?}"
    );
    let r = agent.invoke(vec![again.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "done");
}

/// Pending interrupts stored by a release before nonces (none in the record) are answered by
/// their id alone — through `Interrupt::answer` on the interrupt as loaded — and still only
/// with their fingerprint.
#[tokio::test]
async fn pending_interrupts_stored_without_a_nonce_are_answered_through_the_interrupt() {
    let model = repeating_t1(&["delete a"]);
    let (mut agent, log) = guarded(model);
    agent.invoke("go").await.unwrap();
    // The record as an earlier release wrote it: no `nonce` key.
    let mut record = serde_json::to_value(agent.pending_interrupts().unwrap()).unwrap();
    record["interrupts"][0]
        .as_object_mut()
        .unwrap()
        .remove("nonce");
    let old: rein_agent::PausedRun = serde_json::from_value(record).unwrap();
    agent.set_pending_interrupts(Some(old));
    let loaded = agent.pending_interrupts().unwrap().interrupts()[0].clone();
    assert_eq!(loaded.nonce, None);
    assert_eq!(loaded.resume_id(), loaded.id);

    let raw = InterruptResponse::new(&loaded.id, "yes");
    assert!(matches!(
        agent.invoke(vec![raw]).await,
        Err(Error::FingerprintMismatch { .. })
    ));
    let r = agent.invoke(vec![loaded.answer("yes")]).await.unwrap();
    assert_eq!(r.text(), "done");
    assert_eq!(log.take(), vec!["ran echo:delete a"]);
}
