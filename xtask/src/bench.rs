//! Rein's side of the peer benchmarks (`xtask/peers/README.md`): the same scenario and metric
//! names, with `sdk: "rein"`.

use std::alloc::System;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cpu_time::ProcessTime;
use rein::core::{
    Message, ModelError, Role, ToolHandle,
    event::{AfterModelCallEvent, AfterToolCallEvent, BeforeModelCallEvent, BeforeToolCallEvent},
    request::ModelRequest,
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, StreamMetrics, Usage},
    tool::ToolOutput,
};
use rein::models::{Model, ModelInfo, ModelStream, ScriptedModel, ScriptedResponse};
use rein::{Agent, AgentEvent, ToolExecutor};
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

use crate::measure::{
    Config, Family, Recorder, Samples, children, delta_latency, http_children, in_flight,
    live_bytes, per_handler, rss_bytes, stream_burst,
};

#[global_allocator]
pub(crate) static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const SDK: &str = "rein";
const EVENTS_TOOLS10: f64 = 42.0;

fn noop_tool() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "noop",
        "Trivial sync tool.",
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
        |_, _| Ok(ToolOutput::text("ok")),
    )
}

/// `n` tools of distinct names and schemas (each an object of three typed properties, two
/// required), as an agent's own tools are.
pub(crate) fn distinct_tools(n: usize) -> Vec<ToolHandle> {
    (0..n)
        .map(|i| {
            ToolHandle::from_sync_fn(
                format!("tool_{i}"),
                format!("Tool number {i}: looks something up."),
                json!({"type": "object",
                    "properties": {
                        "query": {"type": "string", "description": format!("What tool {i} looks up.")},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        "exact": {"type": "boolean"}},
                    "required": ["query", "limit"]}),
                |_, _| Ok(ToolOutput::text("ok")),
            )
        })
        .collect()
}

/// The scripted model of the peers' fake: `turns` tool turns of `per_turn` calls, then text.
pub(crate) fn model(turns: usize, per_turn: usize) -> ScriptedModel {
    let mut b = ScriptedModel::builder().cycle().record_requests(false);
    for t in 0..turns {
        let mut r = ScriptedResponse::new();
        for k in 0..per_turn {
            r = r.tool_use(format!("t{t}_{k}"), "noop", json!({"x": 1}));
        }
        b = b.response(r);
    }
    b.text("Hello! How can I help you today?").build()
}

pub(crate) fn agent_builder(turns: usize, per_turn: usize) -> rein::AgentBuilder {
    Agent::builder()
        .model(model(turns, per_turn))
        .tool(noop_tool())
        .no_conversation_manager()
}

/// The peers' `Invoice` (a pydantic model in bench_strands.py / bench_openai_agents.py).
const INVOICE_JSON: &str = r#"{"customer": "Ada", "total_cents": 1200}"#;

/// `invoke_text` with a typed answer: the one model call answers the invoice's JSON, checked
/// against its schema (SPEC §13; the native strategy, the agent's tool still offered).
pub(crate) fn structured_builder() -> rein::AgentBuilder {
    let model = ScriptedModel::builder()
        .cycle()
        .record_requests(false)
        .text(INVOICE_JSON)
        .build();
    Agent::builder()
        .model(model)
        .tool(noop_tool())
        .no_conversation_manager()
        .output_schema(
            "Invoice",
            json!({"type": "object",
                "properties": {"customer": {"type": "string"}, "total_cents": {"type": "integer"}},
                "required": ["customer", "total_cents"]}),
        )
}

pub(crate) fn build(b: rein::AgentBuilder) -> Agent {
    match b.build() {
        Ok(a) => a,
        Err(e) => panic!("agent build failed: {e}"),
    }
}

/// Times `invoke("hi")` in batches, rewinding history to `base` messages before each call.
fn invocations(
    rt: &tokio::runtime::Runtime,
    agent: &mut Agent,
    base: usize,
    batches: usize,
    per_batch: usize,
) -> Samples {
    rt.block_on(async {
        for _ in 0..per_batch.max(10) {
            agent.truncate_messages(base);
            if let Err(e) = agent.invoke("hi").await {
                panic!("invocation failed: {e}");
            }
        }
        let mut s = Samples::default();
        for _ in 0..batches {
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            for _ in 0..per_batch {
                agent.truncate_messages(base);
                let r = agent.invoke("hi").await;
                std::hint::black_box(&r);
            }
            s.push(t0.elapsed(), c0.elapsed(), per_batch);
        }
        s
    })
}

/// An intervention handler that proceeds on the four model/tool events (the peers' `ProceedAll`).
fn proceed_all(i: usize) -> rein::interventions::Intervention {
    use rein::interventions::{
        AfterModelCallAction, AfterToolCallAction, BeforeModelCallAction, BeforeToolCallAction,
        Intervention,
    };
    Intervention::named(format!("proceed-{i}"))
        .before_tool_call(|_, _| BeforeToolCallAction::Proceed)
        .after_tool_call(|_, _| AfterToolCallAction::Proceed)
        .before_model_call(|_, _| BeforeModelCallAction::Proceed)
        .after_model_call(|_, _| AfterModelCallAction::Proceed)
}

/// One plain sync callback on each of the four model/tool events (the peers' `CountingHooks`).
fn counting_hooks(b: rein::AgentBuilder) -> rein::AgentBuilder {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let counter = Arc::new(AtomicU64::new(0));
    let (c1, c2, c3, c4) = (counter.clone(), counter.clone(), counter.clone(), counter);
    b.hook(move |_: &mut BeforeToolCallEvent| {
        c1.fetch_add(1, Relaxed);
    })
    .hook(move |_: &mut AfterToolCallEvent| {
        c2.fetch_add(1, Relaxed);
    })
    .hook(move |_: &mut BeforeModelCallEvent| {
        c3.fetch_add(1, Relaxed);
    })
    .hook(move |_: &mut AfterModelCallEvent| {
        c4.fetch_add(1, Relaxed);
    })
}

/// A shadowed deny on every tool call: one decision (an audit record, a `run_guardrail` span)
/// per tool call, and the call still runs.
pub(crate) fn shadow_decider(i: usize) -> rein::interventions::Intervention {
    use rein::interventions::{BeforeToolCallAction, Intervention, Mode};
    Intervention::named(format!("shadow-{i}"))
        .mode(Mode::Shadow)
        .before_tool_call(|_, _| BeforeToolCallAction::deny("benchmark"))
}

/// The cost of the OpenTelemetry layer: tools10_seq with 0 or 5 deciding handlers (0 or 50
/// decisions per invocation), telemetry off (no subscriber) and on (rein-otel's layer over a
/// batch span processor and a periodic metric reader whose exporters drop what they get).
/// CPU is the whole process's, the batch thread's included.
fn otel(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    const DECIDERS: usize = 5;
    let decisions = (DECIDERS * 10) as f64;
    let agent = |deciders: usize| {
        let mut b = agent_builder(10, 1).tool_executor(ToolExecutor::Sequential);
        for i in 0..deciders {
            b = b.intervention(shadow_decider(i));
        }
        build(b)
    };
    // Telemetry off: agents built with no exporter installed (no handler timing).
    let mut off = [agent(0), agent(DECIDERS)];
    let sink = rein_otel::__discarding(rein_otel::Otel::builder());
    // Built while an exporter is installed: they time their handlers, as in production.
    let mut on = [agent(0), agent(DECIDERS)];
    let subscriber = {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing_subscriber::registry().with(sink.layer())
    };
    let dispatch = tracing::Dispatch::new(subscriber);
    // Warm-up under the layer (the SDK's batch queue and metric aggregations reach their steady
    // state; short runs measured far less than long ones).
    tracing::dispatcher::with_default(&dispatch, || {
        for a in on.iter_mut() {
            invocations(rt, a, 0, 1, 1000);
        }
    });
    let mut samples: Vec<Samples> = (0..4).map(|_| Samples::default()).collect();
    // Interleaved rounds, so load drift hits every variant alike.
    for _ in 0..cfg.batches(60) {
        for (i, a) in off.iter_mut().enumerate() {
            let s = invocations(rt, a, 0, 1, 10);
            samples[i].wall.extend(s.wall);
            samples[i].cpu.extend(s.cpu);
        }
        tracing::dispatcher::with_default(&dispatch, || {
            for (i, a) in on.iter_mut().enumerate() {
                let s = invocations(rt, a, 0, 1, 10);
                samples[2 + i].wall.extend(s.wall);
                samples[2 + i].cpu.extend(s.cpu);
            }
        });
    }
    let mut r = Vec::new();
    for (i, (name, n)) in [
        ("otel_off_0", 0.0),
        ("otel_off_50", decisions),
        ("otel_on_0", 0.0),
        ("otel_on_50", decisions),
    ]
    .into_iter()
    .enumerate()
    {
        r.push(rec.summary(
            name,
            "per_invocation",
            &samples[i],
            1.0,
            json!({"decisions_per_invocation": n, "spans_per_invocation_on": 22.0 + n}),
        ));
    }
    let note_inv = "(otel_on_0 - otel_off_0): tools10_seq, 22 spans (1 invoke_agent, 11 chat, 10 execute_tool), batch processor to a discarding exporter";
    let note_dec = "((otel_on_50 - otel_off_50) - (otel_on_0 - otel_off_0)) / 50: one run_guardrail span + its counter, handler timing included";
    let wall = |x: &(f64, f64)| x.0;
    let cpu = |x: &(f64, f64)| x.1;
    for (suffix, pick) in [("", &wall as &dyn Fn(&(f64, f64)) -> f64), ("_cpu", &cpu)] {
        let inv = pick(&r[2]) - pick(&r[0]);
        let dec = ((pick(&r[3]) - pick(&r[1])) - inv) / decisions;
        let metric = format!("added_per_invocation{suffix}");
        rec.record("otel", &metric, inv, "us", json!({"note": note_inv}));
        let metric = format!("added_per_decision{suffix}");
        rec.record("otel", &metric, dec, "us", json!({"note": note_dec}));
    }
    drop(sink);
}

fn history(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(2));
            Message::new(
                if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                vec![rein::core::ContentBlock::Text(text)],
            )
        })
        .collect()
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    main_with(args, None)
}

/// Rein's scenarios; the `http_*` ones against the mock server at `mock` (else one of their
/// own: `REIN_BENCH_MOCK_URL`, or a `mock-openai` process started for them).
fn main_with(args: &[String], mock: Option<&str>) -> ExitCode {
    let (out, cfg, prefixes) = crate::measure::parse_args(args, "target/bench/rein.jsonl");
    let quick = cfg.quick;
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; run with `cargo run --release -p xtask -- bench`");
    }
    let rec = Recorder::new(SDK, out.clone(), json!({}));
    let want =
        |name: &str| prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str()));
    let rt = crate::measure::runtime();

    if want("construct_agent") {
        let mut s = Samples::default();
        for _ in 0..cfg.batches(200) {
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            for _ in 0..20 {
                std::hint::black_box(build(agent_builder(0, 1)));
            }
            s.push(t0.elapsed(), c0.elapsed(), 20);
        }
        rec.summary("construct_agent", "per_agent", &s, 1.0, json!({}));
        // A server's way: one built agent, a new conversation of it per request.
        let agent = build(agent_builder(0, 1));
        let mut s = Samples::default();
        for _ in 0..cfg.batches(200) {
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            for _ in 0..20 {
                std::hint::black_box(agent.new_conversation().build());
            }
            s.push(t0.elapsed(), c0.elapsed(), 20);
        }
        rec.summary("construct_agent", "per_conversation", &s, 1.0, json!({}));
    }
    let mut base = None;
    if want("invoke_text") || want("tools10") {
        let mut a = build(agent_builder(0, 1));
        let s = invocations(&rt, &mut a, 0, cfg.batches(400), 100);
        base = Some(rec.summary("invoke_text", "per_invocation", &s, 1.0, json!({})));
    }
    let marginal = |scn: &str, r: (f64, f64), metric: &str, note: &str| {
        rec.marginal(base, scn, r, metric, note);
    };
    if want("structured") {
        let mut a = build(structured_builder());
        let s = invocations(&rt, &mut a, 0, cfg.batches(400), 100);
        let r = rec.summary("structured", "per_invocation", &s, 1.0, json!({}));
        if let Some(b) = base {
            let note = json!({"note": "structured - invoke_text: asking for, checking and parsing one typed answer"});
            rec.record(
                "structured",
                "typed_answer_marginal",
                r.0 - b.0,
                "us",
                note.clone(),
            );
            rec.record(
                "structured",
                "typed_answer_marginal_cpu",
                r.1 - b.1,
                "us",
                note,
            );
        }
    }
    if want("tools10_seq") {
        let mut a = build(agent_builder(10, 1).tool_executor(ToolExecutor::Sequential));
        let s = invocations(&rt, &mut a, 0, cfg.batches(200), 20);
        let r = rec.summary("tools10_seq", "per_invocation", &s, 1.0, json!({}));
        rec.summary("tools10_seq", "per_tool_call_naive", &s, 10.0, json!({}));
        marginal(
            "tools10_seq",
            r,
            "per_tool_round_marginal",
            "(tools10_seq - invoke_text)/10 = one extra model turn + one sync tool call",
        );
    }
    let mut par = None;
    if want("tools10_par") || want("cedar") {
        let mut a = build(agent_builder(1, 10));
        let s = invocations(&rt, &mut a, 0, cfg.batches(200), 20);
        let r = rec.summary("tools10_par", "per_invocation", &s, 1.0, json!({}));
        par = Some(r);
        marginal(
            "tools10_par",
            r,
            "per_tool_call_marginal",
            "(tools10_par - invoke_text)/10: 10 concurrent sync calls + 1 extra model turn, amortized",
        );
    }
    if want("durable") {
        crate::durable::run(&rec, &rt, quick);
    }
    if want("sub_agent") {
        // One tool turn calling a plain tool vs the same turn calling an agent as a tool
        // (its agent built per call and answering with one text response).
        let mut plain = build(agent_builder(1, 1));
        let p = invocations(&rt, &mut plain, 0, cfg.batches(200), 50);
        let p = rec.summary("sub_agent", "plain_tool_turn", &p, 1.0, json!({}));
        let child = model(0, 1);
        let helper = rein::AgentTool::new("noop", "A sub-agent.", move || {
            Agent::builder()
                .model(child.clone())
                .no_conversation_manager()
                .build()
        });
        let asks = ScriptedModel::builder()
            .cycle()
            .record_requests(false)
            .tool_use("t0", "noop", json!({"input": "hi"}))
            .text("Hello! How can I help you today?")
            .build();
        let mut parent = build(
            Agent::builder()
                .model(asks)
                .tool(helper)
                .no_conversation_manager(),
        );
        let a = invocations(&rt, &mut parent, 0, cfg.batches(200), 50);
        let a = rec.summary("sub_agent", "agent_tool_turn", &a, 1.0, json!({}));
        let note = "agent_tool_turn - plain_tool_turn: the sub-agent built and invoked (target: within 2x of invoke_text)";
        rec.record(
            "sub_agent",
            "per_call_marginal",
            a.0 - p.0,
            "us",
            json!({"note": note}),
        );
        rec.record(
            "sub_agent",
            "per_call_marginal_cpu",
            a.1 - p.1,
            "us",
            json!({"note": note}),
        );
        if let Some(b) = base {
            rec.record(
                "sub_agent",
                "marginal_over_invoke_text",
                (a.1 - p.1) / b.1,
                "x",
                json!({}),
            );
        }
    }
    if want("cedar") {
        // Cedar authorization of each tool call: tools10_par plus a CedarAuthorizer.
        use rein::interventions::cedar::{CedarAuthorizer, Principal};
        for n in [10usize, 1_000] {
            let mut text =
                String::from("permit(principal in Role::\"bench\", action, resource);\n");
            for i in 1..n {
                text.push_str(&format!(
                    "@id(\"p{i}\") permit(principal == User::\"u{i}\", action == Action::\"t{}\", resource) when {{ context.calls_in_invocation < {i} }};\n",
                    i % 50
                ));
            }
            let authz = match CedarAuthorizer::builder("authz")
                .policies(text)
                .principal(|_| Some(Principal::new("User", "bench").parent("Role", "bench")))
                .build()
            {
                Ok(a) => a,
                Err(e) => panic!("cedar policies: {e}"),
            };
            let mut a = build(agent_builder(1, 10).intervention(authz));
            let s = invocations(&rt, &mut a, 0, cfg.batches(100), 10);
            let scn = format!("cedar_{n}");
            let r = rec.summary(&scn, "per_invocation", &s, 1.0, json!({}));
            if let Some(b) = par {
                let note = "(cedar_N - tools10_par)/10: one Cedar authorization per tool call";
                rec.record(
                    &scn,
                    "per_tool_call",
                    (r.0 - b.0) / 10.0,
                    "us",
                    json!({"note": note}),
                );
                rec.record(
                    &scn,
                    "per_tool_call_cpu",
                    (r.1 - b.1) / 10.0,
                    "us",
                    json!({"note": note}),
                );
            }
        }
    }
    if want("history") {
        for h in [0usize, 20, 200, 2000] {
            let mut a = build(agent_builder(0, 1).messages(history(h)));
            let s = invocations(&rt, &mut a, h, cfg.batches(300), 50);
            rec.summary(
                &format!("history_{h}"),
                "per_invocation",
                &s,
                1.0,
                json!({"history": h}),
            );
        }
    }
    for (family, per) in [
        ("interventions", "per_handler_per_event"),
        ("hooks", "per_callback_per_event"),
    ] {
        if !want(family) {
            continue;
        }
        let ns = [0usize, 1, 5, 20];
        let mut agents: Vec<Agent> = ns
            .iter()
            .map(|&n| {
                let mut b = agent_builder(10, 1).tool_executor(ToolExecutor::Sequential);
                for i in 0..n {
                    if family == "interventions" {
                        b = b.intervention(proceed_all(i));
                    } else {
                        b = counting_hooks(b);
                    }
                }
                build(b)
            })
            .collect();
        let note = "least-squares slope of tools10_seq per_invocation over N in {0,1,5,20} / 42 events (interleaved rounds)";
        let rounds = cfg.batches(60);
        per_handler(
            Family {
                rec: &rec,
                family,
                per,
                events: EVENTS_TOOLS10,
                note,
            },
            &ns,
            rounds,
            |i| invocations(&rt, &mut agents[i], 0, 1, 10),
        );
    }
    if want("otel") {
        otel(&rec, &cfg, &rt);
    }
    if want("stream") {
        streaming(&rec, &cfg, &rt);
    }
    if want("stream_guard") {
        stream_guard(&rec, &cfg, &rt);
    }
    if want("retained") {
        retained(&rec, &rt);
    }
    if want("caching") {
        crate::caching::rows(&rec, &rt);
    }
    if want("context") {
        crate::context::rows(&rec, &rt);
    }
    if want("mcp_call") {
        crate::mcp::rows(&rec, &cfg, &rt);
    }
    if want("agui_stream") {
        crate::agui::rows(&rec, &cfg, &rt);
    }
    children(&rec, quick, &want, "bench-child", true);
    if want("http") {
        let env = std::env::var("REIN_BENCH_MOCK_URL").ok();
        let own = (mock.is_none() && env.is_none())
            .then(crate::mock::Mock::start)
            .flatten();
        match mock
            .map(str::to_owned)
            .or(env)
            .or(own.as_ref().map(|m| m.url.clone()))
        {
            Some(url) => http_rows(&rec, quick, &url),
            None => eprintln!("http: no mock server; no http_* rows"),
        }
    }
    eprintln!("rows appended to {}", out.display());
    ExitCode::SUCCESS
}

/// A model that yields `k` text deltas, stamping the time each one is yielded.
struct StampingModel {
    k: Arc<Mutex<usize>>,
    stamps: Arc<Mutex<Vec<Instant>>>,
}

impl Model for StampingModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("bench", "stamping")
    }

    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ModelError> {
        let k = *self.k.lock().unwrap_or_else(PoisonError::into_inner);
        let stamps = self.stamps.clone();
        stamps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let total = k + 4;
        Ok(Box::pin(futures_util::stream::unfold(0usize, move |i| {
            let stamps = stamps.clone();
            async move {
                let ev = match i {
                    _ if i >= total => return None,
                    0 => StreamEvent::MessageStart {
                        role: Role::Assistant,
                    },
                    1 => StreamEvent::BlockStart(BlockStart::Text),
                    _ if i < k + 2 => {
                        let idx = i - 2;
                        stamps
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(Instant::now());
                        StreamEvent::BlockDelta(BlockDelta::Text(idx.to_string()))
                    }
                    _ if i == k + 2 => StreamEvent::BlockStop,
                    _ => StreamEvent::MessageStop {
                        stop_reason: StopReason::EndTurn,
                    },
                };
                let _ = (Usage::default(), StreamMetrics::default());
                Some((Ok(ev), i + 1))
            }
        })))
    }
}

fn streaming(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    const K: usize = 200;
    let k = Arc::new(Mutex::new(K));
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let mut agent = build(
        Agent::builder()
            .model(StampingModel {
                k: k.clone(),
                stamps: stamps.clone(),
            })
            .no_conversation_manager(),
    );
    let set_k = |n: usize| *k.lock().unwrap_or_else(PoisonError::into_inner) = n;
    // One streamed call; latencies (ns) from model yield to caller receive.
    let one = |agent: &mut Agent| -> Vec<f64> {
        rt.block_on(async {
            agent.clear_history();
            let mut lat = Vec::with_capacity(K);
            let mut s = agent.stream("hi");
            while let Some(ev) = s.next().await {
                if let Ok(AgentEvent::TextDelta(t)) = ev {
                    lat.extend(delta_latency(&stamps, &t));
                }
            }
            lat
        })
    };
    let iters = cfg.batches(60);
    set_k(K);
    for _ in 0..3 {
        one(&mut agent);
    }
    let mut lat = Vec::new();
    for _ in 0..iters {
        lat.extend(one(&mut agent));
    }
    let s = Samples {
        wall: lat.clone(),
        cpu: lat,
    };
    let (m, p10, p90) = s.summarize(&s.wall, 1.0);
    rec.record("stream_latency", "yield_to_receive", m, "us",
        json!({"p10": p10, "p90": p90, "n": s.wall.len(), "deltas_per_call": K,
               "note": "the stream is driven by the caller's polling: each delta is handed over before the model is polled again"}));
    stream_burst(rec, iters, K, |n| {
        set_k(n);
        one(&mut agent);
    });
}

/// Stream guards (SPEC §3.9): the same stamped stream through 0, 1 and 5 proceeding
/// `model_output` handlers with no hold-back window, so each delta is released right after its
/// pass. Per delta: yield-to-receive latency and (wall of K deltas - wall with no handler) / K;
/// per call: time from `stream()` to the first text delta received.
fn stream_guard(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    use rein::interventions::{Intervention, ModelOutputAction};
    const K: usize = 200;
    let ns = [0usize, 1, 5];
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let mut agents: Vec<Agent> = ns
        .iter()
        .map(|&n| {
            let mut b = Agent::builder()
                .model(StampingModel {
                    k: Arc::new(Mutex::new(K)),
                    stamps: stamps.clone(),
                })
                .no_conversation_manager()
                .stream_hold_back(0);
            for i in 0..n {
                b = b.intervention(Intervention::named(format!("guard-{i}")).model_output(
                    |ev, _| {
                        std::hint::black_box(ev.pending.len());
                        ModelOutputAction::Proceed
                    },
                ));
            }
            build(b)
        })
        .collect();
    // One streamed call: (latencies yield→receive in ns, ns to the first delta, wall ns).
    let one = |agent: &mut Agent| -> (Vec<f64>, f64, f64) {
        rt.block_on(async {
            agent.clear_history();
            let mut lat = Vec::with_capacity(K);
            let mut first = None;
            let t0 = Instant::now();
            let mut s = agent.stream("hi");
            while let Some(ev) = s.next().await {
                if let Ok(AgentEvent::TextDelta(t)) = ev {
                    let now = Instant::now();
                    first.get_or_insert(now.duration_since(t0).as_nanos() as f64);
                    if let Ok(i) = t.parse::<usize>()
                        && let Some(at) =
                            stamps.lock().unwrap_or_else(PoisonError::into_inner).get(i)
                    {
                        lat.push(now.duration_since(*at).as_nanos() as f64);
                    }
                }
            }
            (lat, first.unwrap_or(0.0), t0.elapsed().as_nanos() as f64)
        })
    };
    for a in agents.iter_mut() {
        for _ in 0..3 {
            one(a);
        }
    }
    let mut lat: Vec<Vec<f64>> = ns.iter().map(|_| Vec::new()).collect();
    let mut first: Vec<Vec<f64>> = ns.iter().map(|_| Vec::new()).collect();
    let mut wall: Vec<Vec<f64>> = ns.iter().map(|_| Vec::new()).collect();
    // Interleaved rounds, so load drift hits every N alike.
    for _ in 0..cfg.batches(60) {
        for (i, a) in agents.iter_mut().enumerate() {
            let (l, f, w) = one(a);
            lat[i].extend(l);
            first[i].push(f);
            wall[i].push(w);
        }
    }
    let med = |v: &[f64]| Samples::default().summarize(v, 1.0);
    let base_wall = med(&wall[0]).0;
    for (i, &n) in ns.iter().enumerate() {
        let scn = format!("stream_guard_{n}");
        let (m, p10, p90) = med(&lat[i]);
        rec.record(&scn, "yield_to_receive", m, "us",
            json!({"p10": p10, "p90": p90, "n": lat[i].len(), "handlers": n, "deltas_per_call": K, "hold_back": 0}));
        let (m, p10, p90) = med(&first[i]);
        rec.record(
            &scn,
            "first_delta",
            m,
            "us",
            json!({"p10": p10, "p90": p90, "n": first[i].len(), "handlers": n,
                   "note": "from stream() to the first text delta received"}),
        );
        if n > 0 {
            rec.record(&scn, "per_delta_added", (med(&wall[i]).0 - base_wall) / K as f64, "us",
                json!({"handlers": n, "deltas_per_call": K,
                       "note": "(wall of K deltas with N handlers - with none) / K, interleaved rounds"}));
        }
    }
}

/// Heap retained per finished invocation once history is cleared.
fn retained(rec: &Recorder, rt: &tokio::runtime::Runtime) {
    let mut agent = build(agent_builder(1, 1));
    rt.block_on(async {
        for _ in 0..100 {
            agent.clear_history();
            let _ = agent.invoke("hi").await;
        }
    });
    agent.clear_history();
    let region = Region::new(GLOBAL);
    let k = 1000;
    rt.block_on(async {
        for _ in 0..k {
            let _ = agent.invoke("hi").await;
            agent.clear_history();
        }
    });
    let st = region.change();
    let live = live_bytes(&st);
    rec.record("retained", "retained_per_invocation", live / k as f64, "B",
        json!({"note": "heap kept by the agent per finished invocation after clearing the conversation (counting allocator)"}));
}

/// The `inflight_floor` task: `N` bytes of state that only sleep like the model.
async fn floor_task<const N: usize>() -> bool {
    let state = [0u8; N];
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::hint::black_box(&state);
    true
}

/// Runs `$n_tasks` `inflight_floor` tasks of the first state size `$n…` (a const) whose task
/// is at least `$size` bytes, recording that size as `floor_task_bytes`.
macro_rules! floor_in_flight {
    ($size:expr, $rt:expr, $out:expr, $r0:expr, $n_tasks:expr, [$($n:literal),+]) => {{
        let size: usize = $size;
        $(if size <= std::mem::size_of_val(&floor_task::<$n>()) {
            $out["floor_task_bytes"] = json!(std::mem::size_of_val(&floor_task::<$n>()));
            in_flight(GLOBAL, $rt, &mut $out, $r0, vec![(); $n_tasks], |()| floor_task::<$n>());
        } else)+ {
            $out["floor_task_bytes"] = json!(std::mem::size_of_val(&floor_task::<8192>()));
            in_flight(GLOBAL, $rt, &mut $out, $r0, vec![(); $n_tasks], |()| floor_task::<8192>());
        }
    }};
}

/// A measurement in a fresh process, so RSS growth is its own.
pub(crate) fn child(args: &[String]) -> ExitCode {
    let mode = args.first().map(String::as_str).unwrap_or("");
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return ExitCode::FAILURE,
    };
    let mut out = json!({"mode": mode, "n": n});
    // Warm-up: one agent, two invocations.
    let mut w = build(agent_builder(0, 1));
    rt.block_on(async {
        let _ = w.invoke("hi").await;
        let _ = w.invoke("hi").await;
    });
    drop(w);
    let r0 = rss_bytes();
    match mode {
        "idle_agents_20msg" => {
            let region = Region::new(GLOBAL);
            let model = ScriptedModel::repeating_text("Hello! How can I help you today?");
            let mut agents: Vec<Agent> = (0..n)
                .map(|_| build(Agent::builder().model(model.clone())))
                .collect();
            rt.block_on(async {
                for a in agents.iter_mut() {
                    for _ in 0..10 {
                        let _ = a.invoke("hi").await;
                    }
                }
            });
            assert_eq!(agents[0].messages().len(), 20);
            let st = region.change();
            out["heap"] = json!(live_bytes(&st));
            out["rss_growth"] = json!(rss_bytes() - r0);
            std::hint::black_box(&agents);
        }
        "inflight" | "inflight_conversations" => {
            let model = ScriptedModel::builder()
                .text("ok")
                .cycle()
                .record_requests(false)
                .call_delay(Duration::from_millis(100))
                .build();
            let agents: Vec<Agent> = if mode == "inflight" {
                (0..n)
                    .map(|_| build(Agent::builder().model(model.clone())))
                    .collect()
            } else {
                // A server's way: the agent built once, a new conversation of it per invocation.
                let agent = build(Agent::builder().model(model));
                (0..n).map(|_| agent.new_conversation().build()).collect()
            };
            in_flight(GLOBAL, &rt, &mut out, r0, agents, |mut a| async move {
                a.invoke("hi").await.is_ok()
            });
        }
        "inflight_floor" => {
            // The runtime's own cost on this machine: a task as large as an invocation's
            // (the agent moved in plus its invoke future; the next size up of a few) that only
            // sleeps like the model. The runtime's cost grows with the task's size.
            let mut probe = build(Agent::builder().model(ScriptedModel::repeating_text("ok")));
            let size = std::mem::size_of::<Agent>() + std::mem::size_of_val(&probe.invoke("hi"));
            drop(probe);
            out["task_bytes"] = json!(size);
            floor_in_flight!(
                size,
                &rt,
                out,
                r0,
                n,
                [
                    1024, 1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096,
                    4352, 4608, 4864, 5120, 5632, 6144, 7168
                ]
            );
        }
        _ => return ExitCode::FAILURE,
    }
    println!("{out}");
    ExitCode::SUCCESS
}

/// The `http_*` rows, measured in children of `http-bench` (`xtask/http-bench`): a binary
/// linking only the facade with `openai`, as rig's rows run in its own small peer binary, so
/// peak RSS compares like with like (at N = 1 it is mostly the executable's resident code).
/// Built here (`cargo build -p http-bench` in this build's profile) and found beside this
/// executable; the rows are recorded by `measure.rs` as rig's are. Beside them the
/// `http_floor_*` rows (the same child, no SDK) and each N's ratio to its floor.
fn http_rows(rec: &Recorder, quick: bool, url: &str) {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    build.args(["build", "-p", "http-bench"]);
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    match build.status() {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("http-bench did not build ({s}); no http_* rows");
            return;
        }
        Err(e) => {
            eprintln!("http-bench not built ({e}); no http_* rows");
            return;
        }
    }
    let child = exe.with_file_name(format!("http-bench{}", std::env::consts::EXE_SUFFIX));
    let rein = http_children(rec, quick, &child, "child", "http", url);
    let floor = http_children(rec, quick, &child, "child", "http_floor", url);
    // Each N against its floor: at N = 1 both pay the machine's cold start after the server's
    // 20 ms (the floor's own N = 1 costs several times its N = 1 000), so what is Rein's own
    // is this ratio, compared across N.
    for (n, cpu) in &rein {
        let Some((_, floor_cpu)) = floor.iter().find(|(m, _)| m == n) else {
            continue;
        };
        rec.record(
            &format!("http_{n}"),
            "cpu_per_model_call_vs_floor",
            cpu / floor_cpu,
            "x",
            json!({"floor_cpu_per_model_call_us": floor_cpu,
                   "note": "Rein's CPU per model call / the floor's (http_floor_N: the same requests by the same HTTP client, no SDK), same run"}),
        );
    }
}

/// rig on the same scenarios (`xtask/rig-peer`, outside the workspace, its own target dir),
/// appending `sdk: "rig"` rows to the same file. A rig that does not build or run is reported
/// and skipped: the Python peers still run.
fn rig_peer(args: &[String], mock: Option<&str>) {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    if let Some(url) = mock {
        cmd.env("REIN_BENCH_MOCK_URL", url);
    }
    let status = cmd
        .args([
            "run",
            "--release",
            "--manifest-path",
            "xtask/rig-peer/Cargo.toml",
            "--",
        ])
        .args(args)
        .env("CARGO_TARGET_DIR", "target/rig-peer")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => eprintln!("rig peer failed ({s}); going on without rig rows"),
        Err(e) => eprintln!("rig peer not run ({e}); going on without rig rows"),
    }
}

/// Rein's scenarios, rig's and the Python peers' in one run, then the ratio table.
pub(crate) fn all(args: &[String]) -> ExitCode {
    let quick = args.iter().any(|a| a == "--quick");
    let out = PathBuf::from("target/bench/rein.jsonl");
    let _ = std::fs::remove_file(&out);
    let mut rein_args = vec!["--out".to_owned(), out.display().to_string()];
    if quick {
        rein_args.push("--quick".into());
    }
    // One mock OpenAI server for every SDK's http_* rows.
    let mock = crate::mock::Mock::start();
    let url = mock.as_ref().map(|m| m.url.clone());
    let code = main_with(&rein_args, url.as_deref());
    if code != ExitCode::SUCCESS {
        return code;
    }
    rig_peer(&rein_args, url.as_deref());
    // run_peers.sh changes directory: hand it an absolute path.
    let out = std::fs::canonicalize(&out).unwrap_or(out);
    let mut cmd = Command::new("bash");
    cmd.arg("xtask/peers/run_peers.sh").arg(&out);
    if quick {
        cmd.env("BENCH_SCALE", "0.2").env("MEM_N", "1000");
    }
    if let Some(url) = &url {
        cmd.env("REIN_BENCH_MOCK_URL", url);
    }
    match cmd.status() {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
