//! Tracing spans `invoke_agent` / `chat` / `execute_tool` with GenAI attributes (SPEC §6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Its own binary: it reads what tracing hands a scoped subscriber, and tracing caches per
// process whether a callsite is of interest; a test on another thread that reaches a callsite
// first, with no subscriber, can leave it cached as uninteresting (seen in the shared binary).
// The `it` binary's helpers, of which this binary uses a few.
#[allow(dead_code)]
#[path = "it/common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};

use common::*;
use rein_models::{ScriptedModel, ScriptedResponse, Usage};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

type SpanLog = Vec<(String, Vec<(String, String)>)>;

#[derive(Default, Clone)]
struct Spans(Arc<Mutex<SpanLog>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);
impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S>
    for Spans
{
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut f = Vec::new();
        attrs.record(&mut Fields(&mut f));
        self.0
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_owned(), f));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let name = ctx.span(id).unwrap().name().to_owned();
        let mut spans = self.0.lock().unwrap();
        if let Some((_, f)) = spans.iter_mut().rev().find(|(n, _)| *n == name) {
            values.record(&mut Fields(f));
        }
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn spans_carry_gen_ai_attributes() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let log = Log::default();
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let model = ScriptedModel::builder()
                .response(ScriptedResponse::new().tool_use("t1", "echo", json!({"text": "x"})))
                .response(
                    ScriptedResponse::new()
                        .text("done")
                        .usage(Usage::new(12, 4).with_cache_tokens(10, 2)),
                )
                .build();
            let mut agent = agent(model)
                .name("support")
                .tool(echo_tool(&log))
                .build()
                .unwrap();
            agent.invoke("hi").await.unwrap();
        });
    });
    let spans = spans.0.lock().unwrap().clone();
    let names: Vec<&str> = spans.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["invoke_agent", "chat", "execute_tool", "chat"]);
    let inv = &spans[0].1;
    assert_eq!(field(inv, "gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(field(inv, "gen_ai.agent.name"), Some("support"));
    assert_eq!(field(inv, "gen_ai.provider.name"), Some("scripted"));
    assert_eq!(field(inv, "gen_ai.usage.input_tokens"), Some("24"));
    let chat = &spans[1].1;
    assert_eq!(field(chat, "gen_ai.operation.name"), Some("chat"));
    assert_eq!(field(chat, "gen_ai.usage.output_tokens"), Some("4"));
    // The conventions' value; without an exporter's list recorder, one string.
    assert_eq!(
        field(chat, "gen_ai.response.finish_reasons"),
        Some("tool_call")
    );
    // Prompt-cache tokens, where the provider reported some: on that call and on the run.
    assert_eq!(field(chat, "gen_ai.usage.cache_read.input_tokens"), None);
    let cached = &spans[3].1;
    assert_eq!(
        field(cached, "gen_ai.usage.cache_read.input_tokens"),
        Some("10")
    );
    assert_eq!(
        field(cached, "gen_ai.usage.cache_creation.input_tokens"),
        Some("2")
    );
    assert_eq!(
        field(inv, "gen_ai.usage.cache_read.input_tokens"),
        Some("10")
    );
    let tool = &spans[2].1;
    assert_eq!(field(tool, "gen_ai.tool.name"), Some("echo"));
    assert_eq!(field(tool, "gen_ai.tool.call.id"), Some("t1"));
    assert_eq!(field(tool, "gen_ai.tool.status"), Some("success"));
}

/// The events a scoped subscriber saw: each event's fields.
#[derive(Default, Clone)]
struct Events(Arc<Mutex<Vec<Fieldset>>>);

type Fieldset = Vec<(String, String)>;

impl<S: tracing::Subscriber> Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Vec::new();
        event.record(&mut Fields(&mut f));
        self.0.lock().unwrap().push(f);
    }
}

/// Issue 40, item 6: a fallback chain's answer names its model on the `chat` span
/// (`gen_ai.response.model`, the request's model being the chain's first), each hop is a
/// `rein.fallback` event on it and a `run_guardrail rein:fallback` span.
#[test]
fn a_fallback_hop_is_on_the_chat_span() {
    let (spans, events) = (Spans::default(), Events::default());
    let subscriber = tracing_subscriber::registry()
        .with(spans.clone())
        .with(events.clone());
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let chain = rein_models::FallbackModel::new(
                ScriptedModel::builder()
                    .model_id("primary")
                    .throttled()
                    .build(),
            )
            .with_fallback(
                ScriptedModel::builder()
                    .model_id("backup")
                    .text("hi")
                    .build(),
            );
            let mut agent = rein_agent::Agent::builder().model(chain).build().unwrap();
            agent.invoke("hi").await.unwrap();
        });
    });
    let spans = spans.0.lock().unwrap().clone();
    let chat = &spans.iter().find(|(n, _)| n == "chat").unwrap().1;
    assert_eq!(field(chat, "gen_ai.request.model"), Some("primary"));
    assert_eq!(field(chat, "gen_ai.response.model"), Some("backup"));
    let guard = &spans.iter().find(|(n, _)| n == "run_guardrail").unwrap().1;
    assert_eq!(
        field(guard, "rein.intervention.handler"),
        Some("rein:fallback")
    );
    assert_eq!(field(guard, "rein.intervention.action"), Some("fallback"));
    let events = events.0.lock().unwrap().clone();
    let hop = events
        .iter()
        .find(|f| field(f, "message") == Some("rein.fallback"))
        .unwrap();
    assert_eq!(field(hop, "rein.fallback.from"), Some("scripted/primary"));
    assert_eq!(field(hop, "rein.fallback.to"), Some("scripted/backup"));
    assert_eq!(field(hop, "error.type"), Some("throttled"));
    assert_eq!(field(hop, "rein.fallback.status"), Some("429"));
}
