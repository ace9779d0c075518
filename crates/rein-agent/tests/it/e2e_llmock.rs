//! The full agent loop against llmock (a third-party OpenAI/Anthropic protocol mock with an
//! automatic tool loop and fault injection), over real HTTP through Rein's providers.
//!
//! Needs the peers of `.ci/peers-llm.sh`; without `REIN_E2E_LLMOCK_*` the tests print SKIPPED,
//! except under CI where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{assert_history_valid, peer};
use rein_agent::{Agent, RetryStrategy};
use rein_core::{
    Error, ToolHandle, audit::DecisionAction, error::ModelErrorKind, stream::StopReason,
    tool::ToolOutput,
};
use rein_interventions::{BeforeToolCallAction, Intervention};
use rein_models::{AnthropicModel, OpenAiModel, SharedModel};
use serde_json::json;

fn bases() -> Option<(String, String)> {
    Some((
        peer("REIN_E2E_LLMOCK_OPENAI")?,
        peer("REIN_E2E_LLMOCK_ANTHROPIC")?,
    ))
}

fn models(oa: &str, an: &str, model_id: &str) -> Vec<(&'static str, SharedModel)> {
    let openai = OpenAiModel::builder(model_id)
        .base_url(oa)
        .api_key("rein-e2e-key")
        .build()
        .unwrap();
    let anthropic = AnthropicModel::builder(model_id)
        .base_url(an)
        .api_key("rein-e2e-key")
        .build()
        .unwrap();
    vec![
        ("openai", SharedModel::new(openai)),
        ("anthropic", SharedModel::new(anthropic)),
    ]
}

/// Registers a one-shot llmock behaviour (matched by model name, so tests do not collide).
async fn scenario(openai_base: &str, behavior: serde_json::Value) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let root = openai_base.trim_end_matches("/v1");
    let rest = root.strip_prefix("http://").unwrap();
    let host = rest.split('/').next().unwrap();
    let body = json!({"behaviors": [behavior]}).to_string();
    let mut sock = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!(
        "POST /_llmock/scenario HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 201"), "llmock scenario: {out}");
}

fn delete_tool(ran: Arc<AtomicUsize>) -> ToolHandle {
    ToolHandle::from_fn(
        "delete_file",
        "Delete a file from the disk.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        move |_input, _cx| {
            let ran = ran.clone();
            async move {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text("deleted"))
            }
        },
    )
}

#[tokio::test]
async fn an_intervention_denies_a_tool_in_llmocks_tool_loop() {
    let Some((oa, an)) = bases() else {
        return;
    };
    for (provider, model) in models(&oa, &an, "rein-e2e-agent-deny") {
        let ran = Arc::new(AtomicUsize::new(0));
        let mut agent = Agent::builder()
            .shared_model(model)
            .tool(delete_tool(ran.clone()))
            .intervention(
                Intervention::named("no-deletes").before_tool_call(|ev, _cx| {
                    if ev.tool_use().name == "delete_file" {
                        BeforeToolCallAction::deny("deleting files is not allowed")
                    } else {
                        BeforeToolCallAction::Proceed
                    }
                }),
            )
            .build()
            .unwrap();
        let r = agent.invoke("please delete the file").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::EndTurn, "{provider}");
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "{provider}: the tool never ran"
        );
        let results: Vec<_> = agent
            .messages()
            .iter()
            .flat_map(|m| m.tool_results())
            .collect();
        assert_eq!(results.len(), 1, "{provider}: llmock called the tool once");
        assert_eq!(results[0].text(), "DENIED: deleting files is not allowed");
        assert!(r.decisions.iter().any(|d| d.action == DecisionAction::Deny));
        assert_eq!(
            r.metrics.cycles.len(),
            2,
            "{provider}: tool turn + final answer"
        );
        assert!(!r.text().is_empty());
        assert_history_valid(agent.messages());
    }
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_after_the_wait() {
    let Some((oa, an)) = bases() else {
        return;
    };
    for (provider, model) in models(
        &oa,
        &an,
        &format!("rein-e2e-agent-429-{}", std::process::id()),
    ) {
        let id = model.info().model_id;
        scenario(
            &oa,
            json!({"type": "fail", "status": 429, "retry_after": 1,
                             "match": {"model": id}}),
        )
        .await;
        let mut agent = Agent::builder().shared_model(model).build().unwrap();
        let started = Instant::now();
        let r = agent.invoke("hello").await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{provider}: retry-after honoured"
        );
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(
            r.metrics.cycles.len(),
            2,
            "{provider}: one throttled call, one answer"
        );
        assert_history_valid(agent.messages());
    }
}

#[tokio::test]
async fn a_5xx_is_retried_and_a_broken_stream_is_a_typed_error() {
    let Some((oa, an)) = bases() else {
        return;
    };
    let fast = RetryStrategy::default().with_initial_delay(Duration::from_millis(10));
    for (provider, model) in models(
        &oa,
        &an,
        &format!("rein-e2e-agent-5xx-{}", std::process::id()),
    ) {
        let id = model.info().model_id;
        scenario(
            &oa,
            json!({"type": "fail", "status": 503, "match": {"model": id}}),
        )
        .await;
        let mut agent = Agent::builder()
            .shared_model(model.clone())
            .retry_strategy(fast.clone())
            .build()
            .unwrap();
        let r = agent.invoke("hello").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::EndTurn, "{provider}");
        assert_eq!(r.metrics.cycles.len(), 2, "{provider}");

        // A stream that breaks after two chunks: not retryable (bytes were received).
        scenario(
            &oa,
            json!({"type": "stream_fault", "kind": "disconnect", "after_chunks": 2,
                             "match": {"model": id, "stream": true}}),
        )
        .await;
        let err = agent.invoke("hello again").await.unwrap_err();
        match &err {
            Error::Model(e) => assert!(
                matches!(
                    e.kind(),
                    ModelErrorKind::Transport | ModelErrorKind::MalformedStream
                ),
                "{provider}: {e}"
            ),
            other => panic!("{provider}: {other}"),
        }
        assert_history_valid(agent.messages());
        // The failed prompt stays; the next input joins it.
        assert_eq!(agent.messages().last().unwrap().role, rein_core::Role::User);
    }
}

/// Issue 39, item 6: a typed answer through a third-party server that honours OpenAI's
/// `response_format: json_schema` (llmock writes an answer following the schema it is sent):
/// what Rein sends is a schema the server can act on, and what comes back is checked and typed.
#[tokio::test]
async fn a_typed_answer_through_llmock_follows_the_schema_sent() {
    let Some((oa, _)) = bases() else {
        return;
    };
    let model = OpenAiModel::builder("rein-e2e-typed")
        .base_url(&oa)
        .api_key("rein-e2e-key")
        .build()
        .unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "customer": {"type": "string"},
            "total_cents": {"type": "integer"},
            "paid": {"type": "boolean"}
        },
        "required": ["customer", "total_cents", "paid"],
        "additionalProperties": false
    });
    let mut agent = Agent::builder()
        .model(model)
        .output_schema("invoice", schema)
        .build()
        .unwrap();
    let r = agent.invoke("Extract the invoice.").await.unwrap();
    let invoice: serde_json::Value = r.output().unwrap();
    println!("{invoice}");
    assert!(invoice["customer"].is_string(), "{invoice}");
    assert!(invoice["total_cents"].is_i64(), "{invoice}");
    assert!(invoice["paid"].is_boolean(), "{invoice}");
    assert_eq!(invoice.as_object().unwrap().len(), 3, "{invoice}");
    // Accepted on the first answer: the server followed the schema Rein sent.
    assert_eq!(r.metrics.cycles.len(), 1, "{:?}", r.decisions);
}
