//! Spans and metrics of real runs, read back from in-memory exporters: names, kinds, parentage
//! and attributes for every lifecycle path of an intervention.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rein_agent::{Agent, AgentBuilder, CancelHandle};
use rein_core::message::InterruptResponse;
use rein_core::stream::StopReason;
use rein_core::tool::{ToolError, ToolOutput};
use rein_core::{ToolHandle, audit::OnError};
use rein_interventions::{
    AfterModelCallAction, BeforeToolCallAction, Confirm, HandlerError, Intervention, Mode,
};
use rein_models::{ScriptedModel, ScriptedResponse};
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
    Agent::builder().name("support").model(model).tool(echo())
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
    assert_eq!(
        attr(chats[0], "gen_ai.response.finish_reasons").as_deref(),
        Some("tool_use")
    );
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
    for (s, verdict, action) in [(upper, "modify", "modify"), (deny, "deny", "block")] {
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
        if attr(s, "rein.intervention.outcome").as_deref() == Some("applied") {
            assert_eq!(
                attr(s, "gen_ai.security.action.type").as_deref(),
                Some(action)
            );
        }
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
    let limit: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("run_guardrail") && !s.name.ends_with("nag"))
        .collect();
    assert_eq!(limit.len(), 1, "{:?}", names(&spans));
    assert_eq!(
        attr(limit[0], "rein.intervention.action").as_deref(),
        Some("deny")
    );
    let run = one(&spans, "invoke_agent support");
    assert!(
        is_child(limit[0], run)
            || named(&spans, "chat scripted")
                .iter()
                .any(|c| is_child(limit[0], c))
    );
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
        let id = r.interrupts[0].id.clone();
        (agent, id)
    });
    let first = h.spans();
    h.spans.reset();
    let (mut agent, id) = paused;
    h.run(|| async move {
        agent
            .invoke(vec![InterruptResponse::new(id, answer)])
            .await
            .unwrap();
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
    assert_eq!(
        attr(approved, "rein.intervention.confirmation").as_deref(),
        Some("approved")
    );
    let tool = one(&second, "execute_tool echo");
    assert!(is_child(approved, tool));
    assert!(is_child(tool, resumed));
    assert_eq!(attr(tool, "gen_ai.tool.status").as_deref(), Some("success"));
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
        let fail = ToolHandle::from_sync_fn("fail", "Fails.", json!({"type": "object"}), |_, _| {
            Err(ToolError::msg("disk on fire"))
        });
        let model = ScriptedModel::builder()
            .tool_use("t1", "fail", json!({}))
            .text("sorry")
            .build();
        let mut agent = Agent::builder()
            .name("support")
            .model(model)
            .tool(fail)
            .build()
            .unwrap();
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
    h.run(|| async {
        let slot: Arc<OnceLock<rein_agent::TurnInterceptor>> = Arc::default();
        let handle = slot.clone();
        // The tool injects a message while the run is under way: delivered at the turn boundary.
        let injecting = ToolHandle::from_sync_fn("echo", "Injects.", json!({"type": "object"}), {
            move |_, _| {
                if let Some(i) = handle.get() {
                    i.inject("also check the logs").ok();
                }
                Ok(ToolOutput::text("ok"))
            }
        });
        let mut agent = Agent::builder()
            .name("support")
            .model(echo_then_done("x"))
            .tool(injecting)
            .build()
            .unwrap();
        slot.set(agent.interceptor()).ok();
        let r = agent.invoke("hi").await.unwrap();
        assert_eq!(r.injections.len(), 1);
    });
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
