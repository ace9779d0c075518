//! rig (`rig-core`/`rig-agent` 0.44.0) on Rein's benchmark scenarios: the same scenario and
//! metric names, the same measurement method (`xtask/src/measure.rs`, included by path), with
//! `sdk: "rig"`. Outside Rein's workspace: `xtask bench-all` builds and runs it.
//!
//! `rig-peer [--quick] [--out FILE] [SCENARIO-PREFIX ...]` (default out: target/bench/rig.jsonl).

#[path = "../../src/measure.rs"]
mod measure;
mod model;

use std::alloc::System;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use cpu_time::ProcessTime;
use futures::StreamExt as _;
use rig_agent::agent::{
    AgentHook, DispatchAction, DispatchEvent, HookContext, MultiTurnStreamItem, OutcomeAction,
    OutcomeEvent,
};
use rig_agent::completion::Message;
use rig_agent::tool::{Tool, ToolContext};
use rig_agent::{Agent, AgentBuilder};
use rig_core::serve::ServingPolicy;
use rig_core::streaming::{Item, StreamEvent};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

use measure::{
    Config, Family, Recorder, Samples, children, delta_latency, http_children, http_conversations,
    in_flight, live_bytes, per_handler, rss_bytes, stream_burst,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const SDK: &str = "rig";
const RIG_VERSION: &str = "rig-core 0.44.0, rig-agent 0.44.0";
/// tools10_seq: 11 model calls and 10 tool calls, each a dispatch and an outcome.
const EVENTS_TOOLS10: f64 = 42.0;

/// The peers' trivial sync tool: `noop(x: integer) -> "ok"`.
struct Noop;

#[derive(serde::Deserialize)]
struct NoopArgs {
    #[allow(dead_code)]
    x: i64,
}

impl Tool for Noop {
    const NAME: &'static str = "noop";
    type Args = NoopArgs;
    type Output = &'static str;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "Trivial sync tool.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
    }

    async fn call(
        &self,
        _context: &mut ToolContext,
        _args: NoopArgs,
    ) -> Result<&'static str, std::convert::Infallible> {
        Ok("ok")
    }
}

/// One hook counting every model and tool dispatch and outcome (rig's four boundaries that
/// match Rein's before/after model/tool call events), continuing on each.
struct Counting(Arc<AtomicU64>);

impl AgentHook for Counting {
    async fn on_dispatch(&self, _ctx: &HookContext, _event: DispatchEvent<'_>) -> DispatchAction {
        self.0.fetch_add(1, Relaxed);
        DispatchAction::Proceed
    }

    async fn on_outcome(&self, _ctx: &HookContext, _event: OutcomeEvent<'_>) -> OutcomeAction {
        self.0.fetch_add(1, Relaxed);
        OutcomeAction::Proceed
    }
}

/// An agent over `model(turns, per_turn)` with the noop tool. rig's default turn budget is 1;
/// the scripted tool turns need 11.
fn agent(turns: usize, per_turn: usize, hooks: usize, counter: &Arc<AtomicU64>) -> Agent {
    let mut b = AgentBuilder::new(model::scripted(turns, per_turn)).default_max_turns(16);
    for _ in 0..hooks {
        b = b.add_hook(Counting(counter.clone()));
    }
    b.tool(Noop).build()
}

/// One invocation on a reused agent whose conversation the caller keeps (rig's agent holds
/// none): `Agent::chat` with `concurrency` tool calls at once (rig's default is 1).
async fn invoke(agent: &Agent, history: &mut Vec<Message>, concurrency: usize) -> bool {
    if concurrency == 1 {
        return agent.chat("hi", history).await.is_ok();
    }
    // `chat` with a tool concurrency: the same clone-in, extend-after.
    match agent
        .prompt("hi")
        .history(history.clone())
        .tool_concurrency(concurrency)
        .await
    {
        Ok(r) => {
            history.extend(r.messages);
            true
        }
        Err(_) => false,
    }
}

/// Times invocations in batches, rewinding the conversation to `base` messages before each.
fn invocations(
    rt: &tokio::runtime::Runtime,
    agent: &Agent,
    history: &mut Vec<Message>,
    concurrency: usize,
    (base, batches, per_batch): (usize, usize, usize),
) -> Samples {
    rt.block_on(async {
        for _ in 0..per_batch.max(10) {
            history.truncate(base);
            if !invoke(agent, history, concurrency).await {
                panic!("invocation failed");
            }
        }
        if std::env::var_os("RIG_PEER_DEBUG").is_some() {
            eprintln!("conversation after one invocation: {:#?}", &history[base..]);
        }
        let mut s = Samples::default();
        for _ in 0..batches {
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            for _ in 0..per_batch {
                history.truncate(base);
                let r = invoke(agent, history, concurrency).await;
                std::hint::black_box(&r);
            }
            s.push(t0.elapsed(), c0.elapsed(), per_batch);
        }
        s
    })
}

fn history(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(2));
            if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            }
        })
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return child(&args[1..]);
    }
    let (out, cfg, prefixes) = measure::parse_args(&args, "target/bench/rig.jsonl");
    let quick = cfg.quick;
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; run with --release");
    }
    let rec = Recorder::new(SDK, out.clone(), json!({"rig": RIG_VERSION}));
    let want =
        |name: &str| prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str()));
    let rt = measure::runtime();
    let none = Arc::new(AtomicU64::new(0));

    if want("construct_agent") {
        let mut s = Samples::default();
        for _ in 0..cfg.batches(200) {
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            for _ in 0..20 {
                std::hint::black_box(agent(0, 1, 0, &none));
            }
            s.push(t0.elapsed(), c0.elapsed(), 20);
        }
        rec.summary("construct_agent", "per_agent", &s, 1.0, json!({}));
    }
    let mut base = None;
    if want("invoke_text") || want("tools10") {
        let a = agent(0, 1, 0, &none);
        let s = invocations(&rt, &a, &mut Vec::new(), 1, (0, cfg.batches(400), 100));
        base = Some(rec.summary("invoke_text", "per_invocation", &s, 1.0, json!({})));
    }
    let marginal = |scn: &str, r: (f64, f64), metric: &str, note: &str| {
        rec.marginal(base, scn, r, metric, note);
    };
    if want("tools10_seq") {
        let a = agent(10, 1, 0, &none);
        let s = invocations(&rt, &a, &mut Vec::new(), 1, (0, cfg.batches(200), 20));
        let r = rec.summary("tools10_seq", "per_invocation", &s, 1.0, json!({}));
        rec.summary("tools10_seq", "per_tool_call_naive", &s, 10.0, json!({}));
        marginal(
            "tools10_seq",
            r,
            "per_tool_round_marginal",
            "(tools10_seq - invoke_text)/10 = one extra model turn + one sync tool call",
        );
    }
    if want("tools10_par") {
        let a = agent(1, 10, 0, &none);
        let s = invocations(&rt, &a, &mut Vec::new(), 10, (0, cfg.batches(200), 20));
        let r = rec.summary("tools10_par", "per_invocation", &s, 1.0, json!({}));
        marginal(
            "tools10_par",
            r,
            "per_tool_call_marginal",
            "(tools10_par - invoke_text)/10: 10 concurrent calls (tool_concurrency 10) + 1 extra model turn, amortized",
        );
    }
    if want("history") {
        for h in [0usize, 20, 200, 2000] {
            let a = agent(0, 1, 0, &none);
            let mut hist = history(h);
            let s = invocations(&rt, &a, &mut hist, 1, (h, cfg.batches(300), 50));
            rec.summary(
                &format!("history_{h}"),
                "per_invocation",
                &s,
                1.0,
                json!({"history": h, "note": "Agent::chat over a caller-held Vec<Message> (rig's agent keeps no conversation; chat clones it into the run)"}),
            );
        }
    }
    if want("hooks") {
        hooks(&rec, &cfg, &rt);
    }
    if want("stream") {
        streaming(&rec, &cfg, &rt);
    }
    children(&rec, quick, &want, "child", false);
    if want("http") {
        // The mock server is Rein's xtask's (`xtask bench-all` starts one for every SDK).
        match std::env::var("REIN_BENCH_MOCK_URL") {
            Ok(url) => {
                // `Agent::chat` sends unary requests; Rein always streams: both are measured.
                if let Ok(exe) = std::env::current_exe() {
                    http_children(&rec, quick, &exe, "child", "http", &url);
                    http_children(&rec, quick, &exe, "child", "http_stream", &url);
                }
            }
            Err(_) => eprintln!("http: REIN_BENCH_MOCK_URL is not set; no http_* rows"),
        }
    }
    eprintln!("rows appended to {}", out.display());
    ExitCode::SUCCESS
}

/// tools10_seq with N = 0, 1, 5, 20 counting hooks, interleaved rounds (Rein's `hooks_N`).
fn hooks(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    let ns = [0usize, 1, 5, 20];
    let counter = Arc::new(AtomicU64::new(0));
    let agents: Vec<Agent> = ns.iter().map(|&n| agent(10, 1, n, &counter)).collect();
    let mut hists: Vec<Vec<Message>> = ns.iter().map(|_| Vec::new()).collect();
    // The hook sees the 42 events Rein's handlers see per tools10_seq invocation.
    rt.block_on(async {
        let before = counter.load(Relaxed);
        invoke(&agents[1], &mut Vec::new(), 1).await;
        let seen = counter.load(Relaxed) - before;
        if seen as f64 != EVENTS_TOOLS10 {
            eprintln!("warning: one hook saw {seen} events per invocation, not {EVENTS_TOOLS10}");
        }
    });
    let note = "least-squares slope of tools10_seq per_invocation over N in {0,1,5,20} / 42 events (interleaved rounds); one AgentHook per N counting on_dispatch/on_outcome (model and tool)";
    let family = Family {
        rec,
        family: "hooks",
        per: "per_callback_per_event",
        events: EVENTS_TOOLS10,
        note,
    };
    per_handler(family, &ns, cfg.batches(60), |i| {
        invocations(rt, &agents[i], &mut hists[i], 1, (0, 1, 10))
    });
}

/// Stream latency and burst, as Rein measures them: a model streaming K stamped text deltas.
fn streaming(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    const K: usize = 200;
    let stamping = model::Stamping::default();
    stamping.k.store(K, Relaxed);
    let a = AgentBuilder::new(model::stamping(stamping.clone())).build();
    let stamps = stamping.stamps.clone();
    let set_k = |n: usize| stamping.k.store(n, Relaxed);
    // One streamed call; latencies (ns) from model yield to caller receive.
    let one = |agent: &Agent| -> Vec<f64> {
        rt.block_on(async {
            let mut lat = Vec::with_capacity(K);
            let mut s = agent.prompt("hi").stream();
            while let Some(item) = s.next().await {
                if let Ok(MultiTurnStreamItem::StreamAssistantItem(Item::Event(
                    StreamEvent::Text { text, .. },
                ))) = item
                {
                    lat.extend(delta_latency(&stamps, &text));
                }
            }
            lat
        })
    };
    let iters = cfg.batches(60);
    set_k(K);
    for _ in 0..3 {
        let l = one(&a);
        if l.len() != K {
            eprintln!("warning: {} of {K} deltas received", l.len());
        }
    }
    // rig's bus hands stream items to the caller through a bounded queue (ServingPolicy
    // `stream_capacity`, 64 by default) that its driver fills ahead of the caller: the same
    // stream with a queue of 1 shows what that read-ahead adds (a rig-only metric).
    let policy = ServingPolicy {
        stream_capacity: 1,
        ..ServingPolicy::default()
    };
    let a1 = AgentBuilder::new(model::stamping(stamping.clone()))
        .configure_bus(policy)
        .build();
    for (agent, metric) in [
        (&a, "yield_to_receive"),
        (&a1, "yield_to_receive_capacity1"),
    ] {
        let mut lat = Vec::new();
        for _ in 0..iters {
            lat.extend(one(agent));
        }
        let (m, p10, p90) = Samples::default().summarize(&lat, 1.0);
        rec.record(
            "stream_latency",
            metric,
            m,
            "us",
            json!({"p10": p10, "p90": p90, "n": lat.len(), "deltas_per_call": K}),
        );
    }
    stream_burst(rec, iters, K, |n| {
        set_k(n);
        one(&a);
    });
}

/// The `http_N` child: N conversations (an agent and its history each) on rig's OpenAI Chat
/// Completions client (one client, shared), each running the mock's three-turn tool
/// conversation once per round through `Agent::chat` (unary requests), or with `stream`
/// through the runner's `stream()` (streamed requests, as Rein's), its items consumed.
fn http_child(
    rt: &tokio::runtime::Runtime,
    mut out: Value,
    n: usize,
    rounds: usize,
    stream: bool,
) -> ExitCode {
    use rig_core::providers::openai::OpenAIConfig;
    let Ok(url) = std::env::var("REIN_BENCH_MOCK_URL") else {
        eprintln!("http: REIN_BENCH_MOCK_URL is not set");
        return ExitCode::FAILURE;
    };
    // reqwest's client is built inside the runtime (it may not be dropped outside one).
    let client = rt.block_on(async { OpenAIConfig::new("sk-bench").with_base_url(url).client() });
    let convs: Vec<(Agent, Vec<Message>)> = (0..n)
        .map(|_| {
            let agent = AgentBuilder::new(client.chat("mock"))
                .default_max_turns(16)
                .tool(Noop)
                .build();
            (agent, Vec::new())
        })
        .collect();
    http_conversations(
        rt,
        &mut out,
        convs,
        rounds,
        |(agent, mut history)| async move {
            history.clear();
            if stream {
                let mut s = agent.prompt("hi").history(history.clone()).stream();
                let mut ok = true;
                while let Some(item) = s.next().await {
                    if let Err(e) = item {
                        eprintln!("http_stream: {e}");
                        ok = false;
                    }
                }
                return ((agent, history), ok);
            }
            let ok = match agent.chat("hi", &mut history).await {
                Ok(_) => {
                    if std::env::var_os("RIG_PEER_DEBUG").is_some() {
                        eprintln!("http conversation: {history:#?}");
                    }
                    true
                }
                Err(e) => {
                    eprintln!("http: {e}");
                    false
                }
            };
            ((agent, history), ok)
        },
    );
    println!("{out}");
    ExitCode::SUCCESS
}

/// A measurement in a fresh process, so RSS growth is its own (Rein's `bench-child`).
fn child(args: &[String]) -> ExitCode {
    let mode = args.first().map(String::as_str).unwrap_or("");
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::FAILURE;
    };
    let mut out = json!({"mode": mode, "n": n});
    if mode == "http" || mode == "http_stream" {
        let rounds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
        return http_child(&rt, out, n, rounds, mode == "http_stream");
    }
    let none = Arc::new(AtomicU64::new(0));
    // Warm-up: one agent, two invocations.
    let w = agent(0, 1, 0, &none);
    rt.block_on(async {
        let mut h = Vec::new();
        invoke(&w, &mut h, 1).await;
        invoke(&w, &mut h, 1).await;
    });
    drop(w);
    let r0 = rss_bytes();
    match mode {
        "idle_agents_20msg" => {
            let region = Region::new(GLOBAL);
            // Rein's agents share one scripted model (clones); so do these.
            let m = model::text("Hello! How can I help you today?", None);
            let mut convs: Vec<(Agent, Vec<Message>)> = (0..n)
                .map(|_| (AgentBuilder::new(m.clone()).build(), Vec::new()))
                .collect();
            rt.block_on(async {
                for (a, h) in convs.iter_mut() {
                    for _ in 0..10 {
                        invoke(a, h, 1).await;
                    }
                }
            });
            assert_eq!(convs[0].1.len(), 20);
            let st = region.change();
            out["heap"] = json!(live_bytes(&st));
            out["rss_growth"] = json!(rss_bytes() - r0);
            std::hint::black_box(&convs);
        }
        "inflight" => {
            let m = model::text("ok", Some(Duration::from_millis(100)));
            let agents: Vec<Agent> = (0..n)
                .map(|_| AgentBuilder::new(m.clone()).build())
                .collect();
            in_flight(GLOBAL, &rt, &mut out, r0, agents, |a| async move {
                invoke(&a, &mut Vec::new(), 1).await
            });
        }
        "inflight_conversations" => {
            // rig's way for a server: one agent (it holds no conversation) shared by every
            // conversation, each with a vector of its own.
            let m = model::text("ok", Some(Duration::from_millis(100)));
            let agent = std::sync::Arc::new(AgentBuilder::new(m).build());
            in_flight(GLOBAL, &rt, &mut out, r0, vec![agent; n], |a| async move {
                invoke(&a, &mut Vec::new(), 1).await
            });
        }
        _ => return ExitCode::FAILURE,
    }
    println!("{out}");
    ExitCode::SUCCESS
}
