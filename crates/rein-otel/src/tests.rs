//! Spans and metrics of real runs, read back from in-memory exporters: names, kinds, parentage
//! and attributes for every lifecycle path of an intervention.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rein_agent::{Agent, AgentBuilder, CancelHandle, Input, OnRetryLimit};
use rein_core::ModelError;
use rein_core::error::ModelErrorKind;
use rein_core::stream::StopReason;
use rein_core::tool::{ToolError, ToolOutput};
use rein_core::{ToolHandle, audit::OnError};
use rein_interventions::{
    AfterModelCallAction, BeforeInvocationAction, BeforeToolCallAction, Confirm, HandlerError,
    Intervention, Mode,
};
use rein_models::{ModelInfo, ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt as _;

use super::{Otel, OtelBuilder, meter_provider};

/// The content and experimental switches are process-wide: tests take turns.
static SWITCHES: Mutex<()> = Mutex::new(());

struct Harness {
    spans: InMemorySpanExporter,
    metrics: InMemoryMetricExporter,
    otel: Otel,
    _turn: MutexGuard<'static, ()>,
}

fn harness(content: bool, experimental: bool) -> Harness {
    let turn = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let spans = InMemorySpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let builder = OtelBuilder::default()
        .capture_content(content)
        .experimental_conventions(experimental);
    let resource = builder.resource();
    let traces = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let otel = builder.finish(traces, meter_provider(resource, Some(metrics.clone())));
    Harness {
        spans,
        metrics,
        otel,
        _turn: turn,
    }
}

impl Harness {
    /// Runs `f` on a current-thread runtime with the layer as this thread's subscriber.
    fn run<F: Future>(&self, f: impl FnOnce() -> F) -> F::Output {
        let subscriber = tracing_subscriber::registry().with(self.otel.layer());
        let _default = tracing::subscriber::set_default(subscriber);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(f())
    }

    fn spans(&self) -> Vec<SpanData> {
        self.otel.flush().unwrap();
        self.spans.get_finished_spans().unwrap()
    }
}

fn attr(s: &SpanData, key: &str) -> Option<String> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} in {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn is_child(child: &SpanData, parent: &SpanData) -> bool {
    child.parent_span_id == parent.span_context.span_id()
        && child.span_context.trace_id() == parent.span_context.trace_id()
}

fn event_names(s: &SpanData) -> Vec<String> {
    s.events.iter().map(|e| e.name.to_string()).collect()
}

/// A string-array attribute (the conventions' `gen_ai.response.finish_reasons`).
fn strings(s: &SpanData, key: &str) -> Option<Vec<String>> {
    let kv = s.attributes.iter().find(|kv| kv.key.as_str() == key)?;
    match &kv.value {
        opentelemetry::Value::Array(opentelemetry::Array::String(values)) => {
            Some(values.iter().map(|v| v.as_str().to_owned()).collect())
        }
        other => panic!("{key} is not a string array: {other:?}"),
    }
}

/// The data points of the counter `name` in the last export that has it: their attributes (as
/// text) and values.
fn counter(h: &Harness, name: &str) -> Vec<(Vec<(String, String)>, u64)> {
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    h.otel.flush().unwrap();
    let exported = h.metrics.get_finished_metrics().unwrap();
    let mut points = Vec::new();
    for rm in &exported {
        for scope in rm.scope_metrics() {
            for m in scope.metrics().filter(|m| m.name() == name) {
                let AggregatedMetrics::U64(MetricData::Sum(sum)) = m.data() else {
                    panic!("{name} is not a u64 counter");
                };
                points = sum
                    .data_points()
                    .map(|p| {
                        let mut attrs: Vec<(String, String)> = p
                            .attributes()
                            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                            .collect();
                        attrs.sort();
                        (attrs, p.value())
                    })
                    .collect();
            }
        }
    }
    points
}

fn pairs(attrs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = attrs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

fn echo() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "echo",
        "Echoes text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        |input: Value, _| Ok(ToolOutput::text(input["text"].as_str().unwrap_or_default())),
    )
}

fn echo_then_done(text: &str) -> ScriptedModel {
    ScriptedModel::builder()
        .response(ScriptedResponse::new().tool_use("t1", "echo", json!({"text": text})))
        .text("done")
        .build()
}

fn agent(model: ScriptedModel) -> AgentBuilder {
    with_tool(model, echo())
}

/// The agent `support` with one tool.
fn with_tool(model: ScriptedModel, tool: ToolHandle) -> AgentBuilder {
    Agent::builder().name("support").model(model).tool(tool)
}

/// The agent `support` with a tool `fail` that fails, and a model that calls it once.
fn failing_tool_agent() -> AgentBuilder {
    let fail = ToolHandle::from_sync_fn("fail", "Fails.", json!({"type": "object"}), |_, _| {
        Err(ToolError::msg("disk on fire"))
    });
    let model = ScriptedModel::builder()
        .tool_use("t1", "fail", json!({}))
        .text("sorry")
        .build();
    with_tool(model, fail)
}

/// Runs the agent `support` whose tool injects "also check the logs" while the run is under
/// way (delivered, or rejected, at the turn boundary), with `gate` if any.
fn run_injecting(h: &Harness, gate: Option<Intervention>) {
    h.run(|| async {
        let slot: Arc<OnceLock<rein_agent::TurnInterceptor>> = Arc::default();
        let handle = slot.clone();
        let injecting = ToolHandle::from_sync_fn("echo", "Injects.", json!({"type": "object"}), {
            move |_, _| {
                if let Some(i) = handle.get() {
                    i.inject("also check the logs").ok();
                }
                Ok(ToolOutput::text("ok"))
            }
        });
        let mut builder = with_tool(echo_then_done("x"), injecting);
        if let Some(gate) = gate {
            builder = builder.intervention(gate);
        }
        let mut agent = builder.build().unwrap();
        slot.set(agent.interceptor()).ok();
        let r = agent.invoke("hi").await.unwrap();
        assert_eq!(r.injections.len(), 1);
    });
}

/// Runs the echo agent with one handler; the result's audit.
fn run_one(h: &Harness, handler: Intervention) -> Vec<rein_core::audit::DecisionRecord> {
    h.run(|| async {
        let mut agent = agent(echo_then_done("x"))
            .intervention(handler)
            .build()
            .unwrap();
        agent.invoke("hi").await.unwrap().decisions
    })
}

fn shadowed_deny() -> Intervention {
    Intervention::named("trial")
        .mode(Mode::Shadow)
        .before_tool_call(|_, _| BeforeToolCallAction::deny("would block"))
}

/// Every attribute and event attribute value of every span, as text.
fn all_values(spans: &[SpanData]) -> String {
    let mut out = String::new();
    for s in spans {
        out.push_str(&s.name);
        for kv in &s.attributes {
            out.push_str(&kv.value.to_string());
        }
        for e in s.events.iter() {
            out.push_str(&e.name);
            for kv in &e.attributes {
                out.push_str(&kv.value.to_string());
            }
        }
        if let Status::Error { description } = &s.status {
            out.push_str(description);
        }
    }
    out
}

#[test]
fn the_run_span_is_the_parent_of_its_chat_and_tool_spans() {
    let h = harness(false, false);
    h.run(|| async {
        let mut agent = agent(echo_then_done("x")).build().unwrap();
        agent.invoke("hi").await.unwrap();
    });
    let spans = h.spans();
    let run = one(&spans, "invoke_agent support");
    assert_eq!(run.span_kind, SpanKind::Internal);
    assert_eq!(
        attr(run, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(attr(run, "gen_ai.agent.name").as_deref(), Some("support"));
    assert_eq!(
        attr(run, "gen_ai.usage.input_tokens").as_deref(),
        Some("24")
    );
    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2, "{:?}", names(&spans));
    for chat in &chats {
        assert_eq!(chat.span_kind, SpanKind::Client);
        assert!(is_child(chat, run));
        assert_eq!(
            attr(chat, "gen_ai.provider.name").as_deref(),
            Some("scripted")
        );
        assert!(attr(chat, "gen_ai.usage.output_tokens").is_some());
        assert_eq!(attr(chat, "gen_ai.input.messages"), None);
        assert_eq!(attr(chat, "gen_ai.output.messages"), None);
    }
    // The conventions' values, as a string array.
    assert_eq!(
        strings(chats[0], "gen_ai.response.finish_reasons"),
        Some(vec!["tool_call".to_owned()])
    );
    assert_eq!(
        strings(chats[1], "gen_ai.response.finish_reasons"),
        Some(vec!["stop".to_owned()])
    );
    // A scripted model calls no server.
    assert_eq!(attr(chats[0], "server.address"), None);
    let tool = one(&spans, "execute_tool echo");
    assert_eq!(tool.span_kind, SpanKind::Internal);
    assert!(is_child(tool, run));
    assert_eq!(attr(tool, "gen_ai.tool.call.id").as_deref(), Some("t1"));
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("success"));
    assert_eq!(attr(tool, "gen_ai.tool.call.arguments"), None);
    assert_eq!(tool.status, Status::Unset);
    // The audit's own log events stay out of traces: each decision is a span.
    assert!(
        spans
            .iter()
            .all(|s| s.events.iter().all(|e| e.name != "intervention decision"))
    );
}

#[test]
fn a_deny_is_a_guardrail_span_under_the_tool_span() {
    let h = harness(false, false);
    let no_echo = Intervention::named("no-echo")
        .before_tool_call(|_, _| BeforeToolCallAction::deny("echo is off today"));
    let decisions = run_one(&h, no_echo);
    assert_eq!(decisions.len(), 1);
    let spans = h.spans();
    let tool = one(&spans, "execute_tool echo");
    let guard = one(&spans, "run_guardrail no-echo");
    assert_eq!(guard.span_kind, SpanKind::Internal);
    assert!(is_child(guard, tool));
    for (key, value) in [
        ("gen_ai.operation.name", "run_guardrail"),
        ("rein.intervention.handler", "no-echo"),
        ("rein.intervention.event", "before_tool_call"),
        ("rein.intervention.action", "deny"),
        ("rein.intervention.outcome", "applied"),
        ("rein.intervention.order", "0"),
        ("rein.intervention.tool_call.id", "t1"),
    ] {
        assert_eq!(attr(guard, key).as_deref(), Some(value), "{key}");
    }
    // An exporter times the handlers.
    assert!(attr(guard, "rein.intervention.duration_ns").is_some());
    // Reason text is content; the draft conventions are opt-in.
    assert_eq!(attr(guard, "rein.intervention.reason"), None);
    assert_eq!(attr(guard, "gen_ai.security.verdict.type"), None);
    assert!(!all_values(&spans).contains("echo is off today"));
    // The tool did not run: its span is no error.
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("error"));
    assert_eq!(tool.status, Status::Unset);
}

#[test]
fn experimental_conventions_add_the_draft_guardrail_attributes() {
    let h = harness(false, true);
    h.run(|| async {
        let upper = Intervention::named("upper").before_tool_call(|_, _| {
            BeforeToolCallAction::transform(|d| d.input = json!({"text": "X"}))
        });
        let no_echo = Intervention::named("no-echo")
            .before_tool_call(|_, _| BeforeToolCallAction::deny("no"));
        let mut agent = agent(echo_then_done("x"))
            .intervention(upper)
            .intervention(no_echo)
            .build()
            .unwrap();
        agent.invoke("hi").await.unwrap();
    });
    let spans = h.spans();
    let upper = one(&spans, "run_guardrail upper");
    let deny = one(&spans, "run_guardrail no-echo");
    assert_eq!(
        attr(upper, "rein.intervention.action").as_deref(),
        Some("transform")
    );
    // The deny voids the pass's transform.
    assert_eq!(attr(upper, "rein.intervention.order").as_deref(), Some("0"));
    assert_eq!(attr(deny, "rein.intervention.order").as_deref(), Some("1"));
    assert_eq!(
        attr(upper, "rein.intervention.outcome").as_deref(),
        Some("overridden")
    );
    assert_eq!(
        attr(deny, "rein.intervention.outcome").as_deref(),
        Some("applied")
    );
    // What was enforced: the deny's block; nothing of the voided transform.
    for (s, verdict, action) in [(upper, "modify", "allow"), (deny, "deny", "block")] {
        assert_eq!(
            attr(s, "gen_ai.security.verdict.type").as_deref(),
            Some(verdict)
        );
        assert_eq!(
            attr(s, "gen_ai.security.target.type").as_deref(),
            Some("input")
        );
        assert_eq!(
            attr(s, "gen_ai.security.target.subtype").as_deref(),
            Some("tool_call")
        );
        assert_eq!(
            attr(s, "gen_ai.security.action.type").as_deref(),
            Some(action)
        );
    }
}

#[test]
fn a_guide_retry_is_a_guardrail_span_under_the_chat_span_it_retried() {
    let h = harness(false, false);
    h.run(|| async {
        let model = ScriptedModel::builder().text("draft").text("final").build();
        let once = std::sync::atomic::AtomicBool::new(false);
        let editor = Intervention::named("editor").after_model_call(move |_, _| {
            if once.swap(true, std::sync::atomic::Ordering::Relaxed) {
                AfterModelCallAction::Proceed
            } else {
                AfterModelCallAction::guide("be brief")
            }
        });
        let mut agent = agent(model).intervention(editor).build().unwrap();
        let r = agent.invoke("hi").await.unwrap();
        assert_eq!(r.text(), "final");
    });
    let spans = h.spans();
    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2);
    let guard = one(&spans, "run_guardrail editor");
    assert_eq!(guard.span_kind, SpanKind::Internal);
    assert!(chats.iter().any(|c| is_child(guard, c)));
    assert_eq!(
        attr(guard, "rein.intervention.action").as_deref(),
        Some("guide")
    );
    assert_eq!(
        attr(guard, "rein.intervention.event").as_deref(),
        Some("after_model_call")
    );
}

#[test]
fn the_retry_limit_is_a_guardrail_span_of_its_own() {
    let h = harness(false, false);
    h.run(|| async {
        let model = ScriptedModel::builder()
            .text("a")
            .text("b")
            .text("c")
            .build();
        let nag = Intervention::named("nag")
            .after_model_call(|_, _| AfterModelCallAction::guide("again"));
        let mut agent = agent(model)
            .intervention(nag)
            .max_hook_retries(1)
            .build()
            .unwrap();
        agent.invoke("hi").await.unwrap();
    });
    let spans = h.spans();
    let limit = one(&spans, "run_guardrail rein:retry-limit");
    assert_eq!(limit.span_kind, SpanKind::Internal);
    assert_eq!(
        attr(limit, "rein.intervention.action").as_deref(),
        Some("deny")
    );
    assert_eq!(
        attr(limit, "rein.intervention.event").as_deref(),
        Some("after_model_call")
    );
    // The cap is the run's decision, not a handler's about one call: a child of the run's span
    // (SPEC §10).
    let run = one(&spans, "invoke_agent support");
    assert!(is_child(limit, run), "{:?}", names(&spans));
}

fn confirm_echo() -> Intervention {
    Intervention::named("approve-echo")
        .before_tool_call(|_, _| BeforeToolCallAction::from(Confirm::new("Echo?")))
}

fn confirm_then_answer(answer: Value) -> (Vec<SpanData>, Vec<SpanData>) {
    let h = harness(false, false);
    let paused = h.run(|| async {
        let mut agent = agent(echo_then_done("x"))
            .intervention(confirm_echo())
            .build()
            .unwrap();
        let r = agent.invoke("hi").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt);
        let id = r.interrupts[0].clone();
        (agent, id)
    });
    let first = h.spans();
    h.spans.reset();
    let (mut agent, id) = paused;
    h.run(|| async move {
        agent.invoke(vec![id.answer(answer)]).await.unwrap();
    });
    (first, h.spans())
}

#[test]
fn a_confirm_is_asked_in_one_run_and_approved_in_the_run_that_resumes() {
    let (first, second) = confirm_then_answer(json!(true));
    let run = one(&first, "invoke_agent support");
    assert_eq!(attr(run, "rein.stop_reason").as_deref(), Some("interrupt"));
    assert!(event_names(run).contains(&"rein.confirm.asked".to_owned()));
    let asked = one(&first, "run_guardrail approve-echo");
    assert_eq!(asked.span_kind, SpanKind::Internal);
    assert!(is_child(asked, one(&first, "execute_tool echo")));
    assert_eq!(
        attr(asked, "rein.intervention.confirmation").as_deref(),
        Some("asked")
    );
    assert_eq!(
        attr(asked, "rein.intervention.action").as_deref(),
        Some("confirm")
    );

    let resumed = one(&second, "invoke_agent support");
    assert!(event_names(resumed).contains(&"rein.confirm.approved".to_owned()));
    let approved = one(&second, "run_guardrail approve-echo");
    assert_eq!(approved.span_kind, SpanKind::Internal);
    assert_eq!(
        attr(approved, "rein.intervention.confirmation").as_deref(),
        Some("approved")
    );
    let tool = one(&second, "execute_tool echo");
    assert!(is_child(approved, tool));
    assert!(is_child(tool, resumed));
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("success"));
}

/// Issue 38: the confirm events carry who the run is for and who answered (the invocation
/// state's `principal` and `approver`, as rein-agui sets them) and whether the answer edited.
#[test]
fn confirm_events_say_who_asked_and_who_answered_with_an_edit() {
    let h = harness(false, false);
    let paused = h.run(|| async {
        let mut agent = agent(echo_then_done("x"))
            .intervention(confirm_echo())
            .build()
            .unwrap();
        let r = agent
            .invoke(Input::from("hi").with_state(json!({"principal": "bob"})))
            .await
            .unwrap();
        let id = r.interrupts[0].clone();
        (agent, id)
    });
    let first = h.spans();
    h.spans.reset();
    let (mut agent, id) = paused;
    h.run(|| async move {
        let answer = id.answer(json!({"approved": true, "edit": {"text": "y"}}));
        let state = json!({"principal": "bob", "approver": "alice"});
        agent
            .invoke(Input::resume(vec![answer]).with_state(state))
            .await
            .unwrap();
    });
    let second = h.spans();
    let event = |spans: &[SpanData], name: &str| {
        let run = one(spans, "invoke_agent support");
        run.events
            .iter()
            .find(|e| e.name == name)
            .map(|e| {
                e.attributes
                    .iter()
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect::<std::collections::HashMap<_, _>>()
            })
            .unwrap_or_else(|| panic!("no {name} event"))
    };
    let asked = event(&first, "rein.confirm.asked");
    assert_eq!(
        asked.get("rein.approval.requester").map(String::as_str),
        Some("bob")
    );
    assert!(!asked.contains_key("rein.approval.approver"), "{asked:?}");
    let approved = event(&second, "rein.confirm.approved");
    assert_eq!(
        approved.get("rein.approval.requester").map(String::as_str),
        Some("bob")
    );
    assert_eq!(
        approved.get("rein.approval.approver").map(String::as_str),
        Some("alice")
    );
    assert_eq!(
        approved.get("rein.approval.edited").map(String::as_str),
        Some("true")
    );
}

#[test]
fn a_rejected_confirm_is_an_event_of_the_resuming_run() {
    let (_, second) = confirm_then_answer(json!(false));
    let resumed = one(&second, "invoke_agent support");
    assert!(event_names(resumed).contains(&"rein.confirm.rejected".to_owned()));
    let rejected = one(&second, "run_guardrail approve-echo");
    assert_eq!(
        attr(rejected, "rein.intervention.confirmation").as_deref(),
        Some("rejected")
    );
    let tool = one(&second, "execute_tool echo");
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("error"));
}

#[test]
fn a_shadowed_deny_is_recorded_and_the_tool_runs() {
    let h = harness(false, false);
    run_one(&h, shadowed_deny());
    let spans = h.spans();
    let guard = one(&spans, "run_guardrail trial");
    assert_eq!(guard.span_kind, SpanKind::Internal);
    assert!(is_child(guard, one(&spans, "execute_tool echo")));
    assert_eq!(
        attr(guard, "rein.intervention.outcome").as_deref(),
        Some("shadowed")
    );
    assert_eq!(
        attr(guard, "rein.intervention.action").as_deref(),
        Some("deny")
    );
    let tool = one(&spans, "execute_tool echo");
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("success"));
}

fn failing_handler(on_error: OnError) -> (Vec<SpanData>, Result<(), rein_core::Error>) {
    let h = harness(false, false);
    let result = h.run(|| async {
        let broken = Intervention::named("broken")
            .on_error(on_error)
            .before_tool_call(|_, _| {
                Err::<BeforeToolCallAction, _>(HandlerError::new("lookup failed"))
            });
        let mut agent = agent(echo_then_done("x"))
            .intervention(broken)
            .build()
            .unwrap();
        agent.invoke("hi").await.map(|_| ())
    });
    (h.spans(), result)
}

#[test]
fn a_handler_error_is_an_error_span_under_each_on_error() {
    for (on_error, policy, tool_status) in [
        (OnError::Proceed, "proceed", Some("success")),
        (OnError::Deny, "deny", Some("error")),
        (OnError::Throw, "throw", None),
    ] {
        let (spans, result) = failing_handler(on_error);
        let guard = one(&spans, "run_guardrail broken");
        assert_eq!(
            attr(guard, "rein.intervention.outcome").as_deref(),
            Some("error")
        );
        assert_eq!(
            attr(guard, "rein.intervention.on_error").as_deref(),
            Some(policy)
        );
        assert!(matches!(guard.status, Status::Error { .. }), "{policy}");
        let tool = one(&spans, "execute_tool echo");
        assert_eq!(
            attr(tool, "gen_ai.tool.status").as_deref(),
            tool_status,
            "{policy}"
        );
        let run = one(&spans, "invoke_agent support");
        if on_error == OnError::Throw {
            assert!(result.is_err());
            assert!(matches!(run.status, Status::Error { .. }));
            assert_eq!(attr(run, "error.type").as_deref(), Some("handler"));
        } else {
            assert!(result.is_ok());
            assert_eq!(run.status, Status::Unset);
        }
        // The error's message is content.
        assert!(!all_values(&spans).contains("lookup failed"), "{policy}");
    }
}

#[test]
fn a_failing_tool_is_an_error_span() {
    let h = harness(false, false);
    h.run(|| async {
        let mut agent = failing_tool_agent().build().unwrap();
        agent.invoke("hi").await.unwrap();
    });
    let spans = h.spans();
    let tool = one(&spans, "execute_tool fail");
    assert!(matches!(tool.status, Status::Error { .. }));
    assert_eq!(attr(tool, "error.type").as_deref(), Some("tool_error"));
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("error"));
}

#[test]
fn a_cancelled_run_ends_its_span_with_the_reason() {
    let h = harness(false, false);
    h.run(|| async {
        let slot: Arc<OnceLock<CancelHandle>> = Arc::default();
        let handle = slot.clone();
        // Cancels while the tool waits: the run stops at the tool's await.
        let stopper = Intervention::named("stopper").before_tool_call(move |_, _| {
            if let Some(c) = handle.get() {
                c.cancel();
            }
            BeforeToolCallAction::Proceed
        });
        let slow = ToolHandle::from_fn("slow", "Waits.", json!({"type": "object"}), |_, _| async {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(ToolOutput::text("late"))
        });
        let model = ScriptedModel::builder()
            .tool_use("t1", "slow", json!({}))
            .text("done")
            .build();
        let mut agent = Agent::builder()
            .name("support")
            .model(model)
            .tool(slow)
            .intervention(stopper)
            .build()
            .unwrap();
        slot.set(agent.cancel_handle()).ok();
        let r = agent.invoke("hi").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Cancelled);
    });
    let spans = h.spans();
    let run = one(&spans, "invoke_agent support");
    assert_eq!(attr(run, "rein.stop_reason").as_deref(), Some("cancelled"));
    assert_eq!(run.status, Status::Unset);
    // The span of the tool cut off ends too, under the run. (A Proceed is no decision: the
    // audit has no record of it, so it has no span.)
    let tool = one(&spans, "execute_tool slow");
    assert!(is_child(tool, run));
    assert!(named(&spans, "run_guardrail stopper").is_empty());
}

#[test]
fn content_is_captured_only_when_opted_in() {
    let h = harness(true, false);
    h.run(|| async {
        let no_echo = Intervention::named("no-echo")
            .before_tool_call(|_, _| BeforeToolCallAction::deny("echo is off today"));
        let mut agent = agent(echo_then_done("hello there"))
            .system_prompt("Be kind.")
            .intervention(no_echo)
            .build()
            .unwrap();
        agent.invoke("what's up").await.unwrap();
    });
    let spans = h.spans();
    let chat = &named(&spans, "chat scripted")[0];
    assert!(
        attr(chat, "gen_ai.input.messages")
            .unwrap()
            .contains("what's up")
    );
    assert!(
        attr(chat, "gen_ai.output.messages")
            .unwrap()
            .contains("hello there")
    );
    assert_eq!(
        attr(chat, "gen_ai.system_instructions").as_deref(),
        Some("Be kind.")
    );
    let tool = one(&spans, "execute_tool echo");
    assert!(
        attr(tool, "gen_ai.tool.call.arguments")
            .unwrap()
            .contains("hello there")
    );
    assert!(
        attr(tool, "gen_ai.tool.call.result")
            .unwrap()
            .contains("DENIED")
    );
    let guard = one(&spans, "run_guardrail no-echo");
    assert_eq!(
        attr(guard, "rein.intervention.reason").as_deref(),
        Some("echo is off today")
    );
}

#[test]
fn a_secret_in_a_tool_input_is_in_no_attribute() {
    const SECRET: &str = "sk-live-0123456789abcdef";
    let h = harness(false, true);
    h.run(|| async {
        let keys = Intervention::named("api-keys").before_tool_call(|ev, _| {
            let input = ev.tool_use().input.to_string();
            if input.contains("sk-live") {
                BeforeToolCallAction::deny(format!("key in input: {input}"))
            } else {
                BeforeToolCallAction::Proceed
            }
        });
        let mut agent = agent(echo_then_done(SECRET))
            .intervention(keys)
            .build()
            .unwrap();
        agent
            .invoke(format!("use {SECRET}").as_str())
            .await
            .unwrap();
    });
    let spans = h.spans();
    assert!(named(&spans, "run_guardrail api-keys").len() == 1);
    assert!(!all_values(&spans).contains(SECRET));
}

#[test]
fn metrics_count_tokens_durations_decisions_and_tool_calls() {
    let h = harness(false, false);
    run_one(&h, shadowed_deny());
    h.otel.flush().unwrap();
    let exported = h.metrics.get_finished_metrics().unwrap();
    let mut seen = Vec::new();
    for rm in &exported {
        for scope in rm.scope_metrics() {
            for m in scope.metrics() {
                seen.push((m.name().to_owned(), m.unit().to_owned()));
            }
        }
    }
    for (name, unit) in [
        ("gen_ai.client.token.usage", "{token}"),
        ("gen_ai.client.operation.duration", "s"),
        ("rein.intervention.decisions", ""),
        ("rein.tool.calls", ""),
    ] {
        assert!(
            seen.iter().any(|(n, u)| n == name && u == unit),
            "{name} [{unit}] in {seen:?}"
        );
    }
}

#[test]
fn an_injection_is_an_event_of_the_run_and_a_counter() {
    let h = harness(false, false);
    run_injecting(&h, None);
    let spans = h.spans();
    let run = one(&spans, "invoke_agent support");
    assert!(event_names(run).contains(&"rein.injection.consumed".to_owned()));
    // The message is content: not in the event.
    assert!(!all_values(&spans).contains("also check the logs"));
    h.otel.flush().unwrap();
    let exported = h.metrics.get_finished_metrics().unwrap();
    let counted = exported.iter().any(|rm| {
        rm.scope_metrics()
            .any(|s| s.metrics().any(|m| m.name() == "rein.injections"))
    });
    assert!(counted);
}

#[test]
fn a_handoff_is_an_event_of_the_run_and_the_next_calls_are_its_children() {
    let h = harness(false, false);
    h.run(|| async {
        let refunds = Agent::builder()
            .name("refunds")
            .model(ScriptedModel::builder().text("Refund issued.").build())
            .build()
            .unwrap();
        let mut agent = Agent::builder()
            .name("triage")
            .model(
                ScriptedModel::builder()
                    .tool_use("h1", "transfer_to_refunds", json!({}))
                    .build(),
            )
            .handoff(refunds)
            .build()
            .unwrap();
        let r = agent.invoke("refund please").await.unwrap();
        assert_eq!(r.handoffs.len(), 1);
    });
    let spans = h.spans();
    let run = one(&spans, "invoke_agent triage");
    assert!(event_names(run).contains(&"rein.handoff".to_owned()));
    let record = one(&spans, "run_guardrail rein:handoff");
    assert_eq!(
        attr(record, "rein.intervention.action").as_deref(),
        Some("handoff")
    );
    // Both agents' model calls belong to the one run.
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 2);
    assert!(
        chats
            .iter()
            .all(|c| c.parent_span_id == run.span_context.span_id())
    );
}

/// A scripted model that says which server it calls.
struct Served(ScriptedModel);

impl rein_models::Model for Served {
    fn info(&self) -> ModelInfo {
        self.0.info().with_server("llm.internal", 8443)
    }

    fn stream(
        &self,
        request: rein_core::request::ModelRequest,
    ) -> impl Future<Output = Result<rein_models::ModelStream, ModelError>> + Send {
        self.0.stream(request)
    }
}

#[test]
fn chat_spans_name_the_server_the_model_calls() {
    let h = harness(false, false);
    h.run(|| async {
        let mut agent = Agent::builder()
            .name("support")
            .model(Served(echo_then_done("x")))
            .tool(echo())
            .build()
            .unwrap();
        agent.invoke("hi").await.unwrap();
    });
    let spans = h.spans();
    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2);
    for chat in chats {
        assert_eq!(
            attr(chat, "server.address").as_deref(),
            Some("llm.internal")
        );
        assert_eq!(attr(chat, "server.port").as_deref(), Some("8443"));
    }
}

#[test]
fn an_applied_transform_is_a_modify() {
    let h = harness(false, true);
    let upper = Intervention::named("upper").before_tool_call(|_, _| {
        BeforeToolCallAction::transform(|d| d.input = json!({"text": "X"}))
    });
    run_one(&h, upper);
    let spans = h.spans();
    let guard = one(&spans, "run_guardrail upper");
    assert_eq!(guard.span_kind, SpanKind::Internal);
    assert!(is_child(guard, one(&spans, "execute_tool echo")));
    for (key, value) in [
        ("rein.intervention.action", "transform"),
        ("rein.intervention.outcome", "applied"),
        ("gen_ai.security.verdict.type", "modify"),
        ("gen_ai.security.action.type", "modify"),
        ("gen_ai.security.target.type", "input"),
        ("gen_ai.security.target.subtype", "tool_call"),
    ] {
        assert_eq!(attr(guard, key).as_deref(), Some(value), "{key}");
    }
}

#[test]
fn experimental_verdicts_of_guidance_and_escalation_target_the_model_output() {
    let h = harness(false, true);
    h.run(|| async {
        let model = ScriptedModel::builder().text("a").text("b").build();
        let nag = Intervention::named("nag")
            .after_model_call(|_, _| AfterModelCallAction::guide("again"));
        let mut agent = agent(model)
            .intervention(nag)
            .max_hook_retries(1)
            .on_retry_limit(OnRetryLimit::Confirm)
            .build()
            .unwrap();
        let r = agent.invoke("hi").await.unwrap();
        assert_eq!(r.stop_reason, StopReason::Interrupt);
    });
    let spans = h.spans();
    let guided = named(&spans, "run_guardrail nag");
    assert!(
        guided
            .iter()
            .any(|s| attr(s, "rein.intervention.outcome").as_deref() == Some("applied")),
        "{:?}",
        names(&spans)
    );
    for s in &guided {
        assert_eq!(
            attr(s, "gen_ai.security.verdict.type").as_deref(),
            Some("warn")
        );
    }
    let applied = guided
        .iter()
        .find(|s| attr(s, "rein.intervention.outcome").as_deref() == Some("applied"))
        .unwrap();
    assert_eq!(
        attr(applied, "gen_ai.security.action.type").as_deref(),
        Some("block")
    );
    let limit = one(&spans, "run_guardrail rein:retry-limit");
    assert_eq!(
        attr(limit, "rein.intervention.confirmation").as_deref(),
        Some("asked")
    );
    for s in guided.iter().copied().chain([limit]) {
        assert_eq!(
            attr(s, "gen_ai.security.target.type").as_deref(),
            Some("output")
        );
        assert_eq!(
            attr(s, "gen_ai.security.target.subtype").as_deref(),
            Some("llm")
        );
    }
    // OnRetryLimit::Confirm: the cap asks a human.
    for key in [
        "gen_ai.security.verdict.type",
        "gen_ai.security.action.type",
    ] {
        assert_eq!(attr(limit, key).as_deref(), Some("escalate"), "{key}");
    }
}

#[test]
fn a_handler_error_that_proceeds_is_an_allow_verdict() {
    let h = harness(false, true);
    h.run(|| async {
        let broken = Intervention::named("broken")
            .on_error(OnError::Proceed)
            .after_model_call(|_, _| {
                Err::<AfterModelCallAction, _>(HandlerError::new("lookup failed"))
            });
        let model = ScriptedModel::builder().text("fine").build();
        let mut agent = agent(model).intervention(broken).build().unwrap();
        assert_eq!(agent.invoke("hi").await.unwrap().text(), "fine");
    });
    let spans = h.spans();
    let guard = one(&spans, "run_guardrail broken");
    for (key, value) in [
        ("rein.intervention.outcome", "error"),
        ("gen_ai.security.verdict.type", "allow"),
        ("gen_ai.security.action.type", "allow"),
        ("gen_ai.security.target.type", "output"),
        ("gen_ai.security.target.subtype", "llm"),
    ] {
        assert_eq!(attr(guard, key).as_deref(), Some(value), "{key}");
    }
}

#[test]
fn a_model_error_is_the_chat_span_error_status() {
    let h = harness(false, false);
    let result = h.run(|| async {
        let model = ScriptedModel::builder()
            .error(ModelError::new(
                // Not retried (a server error would be, with a span per attempt).
                ModelErrorKind::BadRequest,
                "upstream leaked sk-live-0123456789abcdef",
            ))
            .build();
        let mut agent = agent(model).build().unwrap();
        agent.invoke("hi").await.map(|_| ())
    });
    assert!(result.is_err());
    let spans = h.spans();
    let chat = one(&spans, "chat scripted");
    assert_eq!(chat.span_kind, SpanKind::Client);
    assert!(matches!(chat.status, Status::Error { .. }));
    assert_eq!(attr(chat, "error.type").as_deref(), Some("bad_request"));
    assert_eq!(attr(chat, "gen_ai.response.finish_reasons"), None);
    let run = one(&spans, "invoke_agent support");
    assert!(is_child(chat, run));
    assert!(matches!(run.status, Status::Error { .. }));
    // The message is the provider's text: not exported.
    assert!(!all_values(&spans).contains("sk-live"));
}

#[test]
fn a_rejected_injection_is_an_event_and_a_counter_without_its_message() {
    let h = harness(false, false);
    let gate = Intervention::named("no-steering").before_invocation(|ev, _| {
        if ev.is_injected() {
            BeforeInvocationAction::deny("steering is off")
        } else {
            BeforeInvocationAction::Proceed
        }
    });
    run_injecting(&h, Some(gate));
    let spans = h.spans();
    let run = one(&spans, "invoke_agent support");
    assert!(event_names(run).contains(&"rein.injection.rejected".to_owned()));
    assert!(!event_names(run).contains(&"rein.injection.consumed".to_owned()));
    // Neither the message nor the handler's reason (content) is exported.
    let values = all_values(&spans);
    assert!(!values.contains("also check the logs"));
    assert!(!values.contains("steering is off"));
    assert_eq!(
        counter(&h, "rein.injections"),
        vec![(pairs(&[("rein.injection.outcome", "rejected")]), 1)]
    );
}

#[test]
fn tool_errors_and_decisions_are_counted_by_their_attributes() {
    let h = harness(false, false);
    h.run(|| async {
        let mut agent = failing_tool_agent()
            .intervention(shadowed_deny())
            .build()
            .unwrap();
        agent.invoke("hi").await.unwrap();
    });
    assert_eq!(
        counter(&h, "rein.tool.errors"),
        vec![(pairs(&[("gen_ai.tool.name", "fail")]), 1)]
    );
    assert_eq!(
        counter(&h, "rein.tool.calls"),
        vec![(
            pairs(&[("gen_ai.tool.name", "fail"), ("rein.tool.status", "error")]),
            1
        )]
    );
    assert_eq!(
        counter(&h, "rein.intervention.decisions"),
        vec![(
            pairs(&[
                ("rein.intervention.handler", "trial"),
                ("rein.intervention.event", "before_tool_call"),
                ("rein.intervention.action", "deny"),
                ("rein.intervention.outcome", "shadowed"),
            ]),
            1
        )]
    );
}

#[test]
fn a_panic_message_is_content() {
    const SECRET: &str = "sk-live-0123456789abcdef";
    for content in [false, true] {
        let h = harness(content, false);
        h.run(|| async {
            let boom = ToolHandle::from_sync_fn(
                "boom",
                "Panics.",
                json!({"type": "object"}),
                |input: Value, _| -> Result<ToolOutput, ToolError> {
                    panic!("cannot parse {input}")
                },
            );
            let model = ScriptedModel::builder()
                .tool_use("t1", "boom", json!({"key": SECRET}))
                .text("sorry")
                .build();
            let mut agent = with_tool(model, boom).build().unwrap();
            agent.invoke("hi").await.unwrap();
        });
        let spans = h.spans();
        let tool = one(&spans, "execute_tool boom");
        // The log event is exported either way; its text only with content.
        assert!(
            event_names(tool)
                .iter()
                .any(|e| e.starts_with("tool panicked")),
            "{:?}",
            event_names(tool)
        );
        assert_eq!(all_values(&spans).contains(SECRET), content, "{content}");
    }
}

#[test]
fn a_judge_reason_is_content() {
    const SECRET: &str = "sk-live-0123456789abcdef";
    for content in [false, true] {
        let h = harness(content, false);
        h.run(|| async {
            let verdict = format!(
                r#"{{"verdict": "proceed", "reason": "the key {SECRET} is a test key", "nonce": "{{nonce}}"}}"#
            );
            let judge = rein_agent::judge::LlmJudge::new(
                "judge",
                rein_agent::judge::ScriptedJudge::new([verdict]),
            );
            let mut agent = agent(echo_then_done("x"))
                .intervention(judge)
                .build()
                .unwrap();
            agent.invoke("hi").await.unwrap();
        });
        let spans = h.spans();
        let tool = one(&spans, "execute_tool echo");
        assert!(
            event_names(tool).contains(&"judge verdict".to_owned()),
            "{:?}",
            event_names(tool)
        );
        assert_eq!(all_values(&spans).contains(SECRET), content, "{content}");
    }
}

#[test]
fn spans_of_the_export_stack_are_not_exported() {
    let h = harness(false, false);
    h.run(|| async {
        macro_rules! span_of {
            ($($target:literal),*) => {$(
                let span = tracing::info_span!(target: $target, "internal", otel.name = $target);
                span.in_scope(|| tracing::info!(target: $target, "inside"));
            )*};
        }
        span_of!(
            "h2::proto::connection",
            "hyper::client",
            "hyper_util::client::legacy",
            "tonic::transport",
            "tower::buffer",
            "reqwest::connect",
            "rustls::client",
            "opentelemetry_sdk",
            "opentelemetry-otlp",
            "tracing_opentelemetry::layer",
            "rein_interventions::audit",
            // Anything else is the program's own: exported.
            "my_app::db"
        );
    });
    let spans = h.spans();
    assert_eq!(names(&spans), vec!["my_app::db".to_owned()]);
    assert_eq!(event_names(&spans[0]), vec!["inside".to_owned()]);
}

/// Finding 11 of issue 35: the OTLP client follows no redirect to another origin (another
/// port of 127.0.0.1), so the headers of `OTEL_EXPORTER_OTLP_HEADERS` (a backend's key) and
/// the telemetry never reach it; within the origin a 307 is followed.
#[test]
fn the_otlp_client_sends_no_header_to_another_origin() {
    use rein_models::conformance::{FixtureResponse, FixtureServer};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (first, other, same) = rt.block_on(async {
        (
            FixtureServer::start().await.unwrap(),
            FixtureServer::start().await.unwrap(),
            FixtureServer::start().await.unwrap(),
        )
    });
    other.push(FixtureResponse::status(200, "{}"));
    first.push(
        FixtureResponse::status(307, "")
            .header("location", &format!("{}/v1/traces", other.base_url())),
    );
    same.push(
        FixtureResponse::status(307, "").header("location", &format!("{}/moved", same.base_url())),
    );
    same.push(FixtureResponse::status(200, "{}"));
    // The blocking client is built and used outside the runtime.
    let (base_first, base_same) = (first.base_url(), same.base_url());
    let statuses = std::thread::spawn(move || {
        let client = super::http_client().unwrap();
        [base_first, base_same].map(|base| {
            client
                .post(format!("{base}/v1/traces"))
                .header("x-otlp-token", "otlp-secret")
                .body("spans")
                .send()
                .map(|r| r.status().as_u16())
                .unwrap()
        })
    })
    .join()
    .unwrap();
    assert_eq!(
        statuses,
        [307, 200],
        "the cross-origin redirect is the answer"
    );
    assert_eq!(
        first.requests()[0].header("x-otlp-token"),
        Some("otlp-secret")
    );
    assert!(other.requests().is_empty(), "{:?}", other.requests());
    let same = same.requests();
    assert_eq!(same.len(), 2, "a same-origin 307 is followed");
    assert_eq!(same[1].path, "/moved");
    assert_eq!(same[1].header("x-otlp-token"), Some("otlp-secret"));
}
