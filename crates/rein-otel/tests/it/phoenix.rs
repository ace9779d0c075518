//! End to end against a real trace backend: a run with a deny, a failing tool, a guide that
//! retries and a confirm answered on resume is exported over OTLP/HTTP to Arize Phoenix, then
//! read back from Phoenix's REST API: span names, parentage, status and attributes.
//!
//! Needs the Phoenix of `.ci/peers-phoenix.sh`; without `REIN_TEST_PHOENIX_URL` the test prints
//! SKIPPED (and fails under CI, where the peer must be up).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rein_agent::Agent;
use rein_core::ToolHandle;
use rein_core::stream::StopReason;
use rein_core::tool::{ToolError, ToolOutput};
use rein_interventions::{AfterModelCallAction, BeforeToolCallAction, Confirm, Intervention};
use rein_models::ScriptedModel;
use serde_json::{Value, json};

use crate::common;
use common::{SWITCHES, Span, phoenix, read_back};

/// The agent of the scenario; its name is unique to this run, to find its traces.
fn agent(name: &str) -> Agent {
    let files = ToolHandle::from_sync_fn(
        "rm",
        "Removes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        |input: Value, _| Ok(ToolOutput::text(format!("removed {}", input["path"]))),
    );
    let report = ToolHandle::from_sync_fn(
        "report",
        "The report.",
        json!({"type": "object"}),
        |_, _| Err(ToolError::msg("upstream down")),
    );
    let guard = Intervention::named("guard").before_tool_call(|ev, _| {
        match ev.tool_use().input["path"].as_str() {
            Some(p) if p.starts_with("/etc") => BeforeToolCallAction::deny("not there"),
            Some(p) => BeforeToolCallAction::from(Confirm::new(format!("Remove {p}?"))),
            None => BeforeToolCallAction::Proceed,
        }
    });
    let once = AtomicBool::new(false);
    let style = Intervention::named("style").after_model_call(move |ev, _| {
        let text = ev.response().map(|r| r.message.text()).unwrap_or_default();
        if text == "nope" && !once.swap(true, Ordering::Relaxed) {
            AfterModelCallAction::guide("Explain.")
        } else {
            AfterModelCallAction::Proceed
        }
    });
    let model = ScriptedModel::builder()
        .tool_use("a", "rm", json!({"path": "/etc/hosts"}))
        .tool_use("b", "report", json!({}))
        .text("nope")
        .tool_use("c", "rm", json!({"path": "/tmp/x"}))
        .text("Removed /tmp/x; the report is unavailable.")
        .build();
    Agent::builder()
        .name(name)
        .model(model)
        .tool(files)
        .tool(report)
        .interventions([guard, style])
        .build()
        .unwrap()
}

/// Runs `f` with the export's layer as this thread's subscriber (the tests of this file share a
/// process: no global one).
fn with_layer<T>(otel: &rein_otel::Otel, f: impl FnOnce() -> T) -> T {
    use tracing_subscriber::layer::SubscriberExt as _;
    let subscriber = tracing_subscriber::registry().with(otel.layer());
    tracing::subscriber::with_default(subscriber, f)
}

fn find<'a>(spans: &'a [&'a Span], name: &str, pred: impl Fn(&Span) -> bool) -> &'a Span {
    spans
        .iter()
        .copied()
        .find(|s| s.name == name && pred(s))
        .unwrap_or_else(|| {
            panic!(
                "no {name} in {:#?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
}

#[test]
fn a_run_with_every_kind_of_decision_reads_back_from_phoenix() {
    let Some(base) = phoenix() else { return };
    let _turn = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!(
        "e2e-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    );
    let otel = rein_otel::Otel::builder()
        .endpoint(&base)
        .service_name("rein-e2e")
        .metrics(false)
        .experimental_conventions(true)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    with_layer(&otel, || {
        rt.block_on(async {
            let mut agent = agent(&name);
            let paused = agent.invoke("Clean up, then the report.").await.unwrap();
            assert_eq!(paused.stop_reason, StopReason::Interrupt);
            let answers = vec![paused.interrupts[0].answer(true)];
            let done = agent.invoke(answers).await.unwrap();
            assert_eq!(done.stop_reason, StopReason::EndTurn);
        })
    });
    otel.shutdown().unwrap();

    // First run: invoke, 4 chats, 3 tools, 3 guardrails (deny, guide, confirm asked). Resume:
    // invoke, 1 tool, 1 guardrail, 1 chat.
    let spans = read_back(&base, &name, 11 + 4);
    let root = format!("invoke_agent {name}");
    let roots: Vec<&Span> = spans.iter().filter(|s| s.name == root).collect();
    assert_eq!(roots.len(), 2, "two traces: the run and its resume");
    let of = |trace: &str| {
        spans
            .iter()
            .filter(|s| s.trace == trace)
            .collect::<Vec<_>>()
    };
    let first_root = find(&roots, &root, |s| {
        s.attr("rein.stop_reason").as_deref() == Some("interrupt")
    });
    let second_root = find(&roots, &root, |s| {
        s.attr("rein.stop_reason").as_deref() == Some("end_turn")
    });
    for r in [first_root, second_root] {
        assert_eq!(r.parent, None);
        assert_eq!(
            r.attr("gen_ai.operation.name").as_deref(),
            Some("invoke_agent")
        );
        assert_eq!(r.attr("gen_ai.agent.name").as_deref(), Some(name.as_str()));
    }
    assert!(first_root.events.contains(&"rein.confirm.asked".to_owned()));
    assert!(
        second_root
            .events
            .contains(&"rein.confirm.approved".to_owned())
    );

    let first = of(&first_root.trace);
    // Every span but the root is a child of a span of its trace; chats and tools of the root.
    for s in &first {
        if s.id != first_root.id {
            let parent = s.parent.as_deref().expect("a parent");
            assert!(
                first.iter().any(|p| p.id == parent),
                "{} has its parent",
                s.name
            );
        }
        if s.name.starts_with("chat ") || s.name.starts_with("execute_tool ") {
            assert_eq!(
                s.parent.as_deref(),
                Some(first_root.id.as_str()),
                "{}",
                s.name
            );
        }
    }
    assert_eq!(
        first.iter().filter(|s| s.name == "chat scripted").count(),
        4
    );

    let deny = find(&first, "run_guardrail guard", |s| {
        s.attr("rein.intervention.action").as_deref() == Some("deny")
    });
    let denied_tool = find(&first, "execute_tool rm", |s| {
        Some(s.id.as_str()) == deny.parent.as_deref()
    });
    assert_eq!(
        denied_tool.attr("gen_ai.tool.call.id").as_deref(),
        Some("a")
    );
    assert_eq!(
        deny.attr("rein.intervention.outcome").as_deref(),
        Some("applied")
    );
    assert_eq!(
        deny.attr("rein.intervention.event").as_deref(),
        Some("before_tool_call")
    );
    assert_eq!(
        deny.attr("gen_ai.security.verdict.type").as_deref(),
        Some("deny")
    );
    assert_eq!(
        deny.attr("gen_ai.security.action.type").as_deref(),
        Some("block")
    );

    let failed = find(&first, "execute_tool report", |_| true);
    assert_eq!(failed.status, "ERROR");
    assert_eq!(failed.attr("error.type").as_deref(), Some("tool_error"));

    let guide = find(&first, "run_guardrail style", |_| true);
    assert_eq!(
        guide.attr("rein.intervention.action").as_deref(),
        Some("guide")
    );
    let guided_chat = find(&first, "chat scripted", |s| {
        Some(s.id.as_str()) == guide.parent.as_deref()
    });
    assert_eq!(
        guided_chat.attributes.get("gen_ai.response.finish_reasons"),
        Some(&json!(["stop"]))
    );

    let asked = find(&first, "run_guardrail guard", |s| {
        s.attr("rein.intervention.confirmation").as_deref() == Some("asked")
    });
    let asked_tool = find(&first, "execute_tool rm", |s| {
        Some(s.id.as_str()) == asked.parent.as_deref()
    });
    assert_eq!(asked_tool.attr("gen_ai.tool.call.id").as_deref(), Some("c"));

    let second = of(&second_root.trace);
    let approved = find(&second, "run_guardrail guard", |_| true);
    assert_eq!(
        approved.attr("rein.intervention.confirmation").as_deref(),
        Some("approved")
    );
    let ran = find(&second, "execute_tool rm", |s| {
        Some(s.id.as_str()) == approved.parent.as_deref()
    });
    assert_eq!(ran.attr("gen_ai.tool.status").as_deref(), Some("success"));
    assert_eq!(ran.parent.as_deref(), Some(second_root.id.as_str()));
    // No content was opted in: neither the prompt nor a tool's input is anywhere.
    let everything = format!("{:?}", spans);
    assert!(!everything.contains("Clean up") && !everything.contains("/tmp/x"));
}

/// The same export over gRPC (Phoenix's OTLP/gRPC port): the run's root span arrives.
#[cfg(feature = "grpc")]
#[test]
fn a_run_exported_over_grpc_reads_back_from_phoenix() {
    let Some(base) = phoenix() else { return };
    let _turn = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let Ok(grpc) = std::env::var("REIN_TEST_PHOENIX_OTLP_GRPC") else {
        eprintln!("SKIPPED: REIN_TEST_PHOENIX_OTLP_GRPC not set (.ci/peers-phoenix.sh sets it)");
        return;
    };
    let name = format!("e2e-grpc-{}", std::process::id());
    // tonic's channel lives on a runtime that keeps running while the guard shuts down.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let otel = {
        let _in = rt.enter();
        rein_otel::Otel::builder()
            .endpoint(grpc)
            .protocol(rein_otel::Protocol::Grpc)
            .metrics(false)
            .build()
            .unwrap()
    };
    with_layer(&otel, || {
        rt.block_on(async {
            let mut agent = agent(&name);
            let paused = agent.invoke("Clean up.").await.unwrap();
            assert_eq!(paused.stop_reason, StopReason::Interrupt);
        })
    });
    otel.shutdown().unwrap();
    let spans = read_back(&base, &name, 11);
    let root = format!("invoke_agent {name}");
    let root = spans
        .iter()
        .find(|s| s.name == root)
        .expect("the run's span");
    assert_eq!(root.attr("rein.stop_reason").as_deref(), Some("interrupt"));
    assert!(spans.iter().any(|s| s.name == "run_guardrail guard"
        && s.attr("rein.intervention.action").as_deref() == Some("deny")));
}
