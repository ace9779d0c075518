//! Instruction counts of chosen scenarios under callgrind (`xtask bench-instr`): deterministic
//! whatever the machine's load, so two builds can be compared to a fraction of a percent where
//! the timed rows move by 10–25 % on a shared VM.
//!
//! Each variant runs in a child process (`<this exe> bench-instr-child VARIANT N`) under
//! `valgrind --tool=callgrind` twice, with N1 and N2 invocations after the same warm-up; the
//! row is (I(N2) − I(N1)) / (N2 − N1): start-up, warm-up and shutdown cancel out. All threads
//! are counted (the OpenTelemetry batch processor's included). The callgrind files stay in
//! `target/bench/callgrind/` for `callgrind_annotate`. Each child also prints the allocations
//! it made (the counting allocator's), so the row `allocations_per_invocation` comes the same way.

use std::path::Path;
use std::process::{Command, ExitCode};

use serde_json::json;

use crate::bench::{agent_builder, build, shadow_decider};
use crate::measure::Recorder;

/// Deciding handlers of the `otel_*_50` variants (5 handlers × 10 tool calls).
const DECIDERS: usize = 5;

/// The variants and their two invocation counts.
const VARIANTS: [(&str, usize, usize); 13] = [
    ("invoke_text", 1_000, 6_000),
    ("invoke_plain", 1_000, 6_000),
    ("built_plain", 1_000, 6_000),
    ("built_tools10", 1_000, 6_000),
    ("fallback_chain", 1_000, 6_000),
    ("fallback_hop", 1_000, 6_000),
    ("structured", 1_000, 6_000),
    ("tools10_seq", 200, 1_200),
    ("tools10_par", 200, 1_200),
    ("otel_off_0", 100, 600),
    ("otel_off_50", 100, 600),
    ("otel_on_0", 100, 600),
    ("otel_on_50", 100, 600),
];

/// `bench-instr [--out FILE] [PREFIX ...]`: the rows `instructions_per_invocation` (unit `Ir`)
/// of each variant, and for `otel` the added instructions per invocation and per decision.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let (out, _cfg, prefixes) = crate::measure::parse_args(args, "target/bench/rein.jsonl");
    let want =
        |name: &str| prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str()));
    if !Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("bench-instr: valgrind not found; no instruction counts");
        return ExitCode::SUCCESS;
    }
    let Ok(exe) = std::env::current_exe() else {
        return ExitCode::FAILURE;
    };
    let dir = out.parent().unwrap_or(Path::new(".")).join("callgrind");
    let _ = std::fs::create_dir_all(&dir);
    let rec = Recorder::new("rein", out, json!({"tool": "callgrind"}));
    let mut per = std::collections::HashMap::new();
    let mut allocs_per = std::collections::HashMap::new();
    for (variant, n1, n2) in VARIANTS {
        if !want(variant) {
            continue;
        }
        // (instructions, allocations) of a child making `n` invocations.
        let count = |n: usize| -> Option<(f64, f64)> {
            let file = dir.join(format!("{variant}.{n}.out"));
            let o = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", file.display()))
                .arg(&exe)
                .args(["bench-instr-child", variant, &n.to_string()])
                .output()
                .ok()?;
            let err = String::from_utf8_lossy(&o.stderr);
            if !o.status.success() {
                eprintln!("bench-instr: {variant} {n} failed: {err}");
                return None;
            }
            Some((
                collected(&err)?,
                allocations(&String::from_utf8_lossy(&o.stdout))?,
            ))
        };
        let (Some((a, alloc_a)), Some((b, alloc_b))) = (count(n1), count(n2)) else {
            continue;
        };
        let v = (b - a) / (n2 - n1) as f64;
        let allocs = (alloc_b - alloc_a) / (n2 - n1) as f64;
        per.insert(variant, v);
        allocs_per.insert(variant, allocs);
        rec.record(
            variant,
            "instructions_per_invocation",
            v,
            "Ir",
            json!({"n": [n1, n2], "note": "callgrind, (I(N2) - I(N1)) / (N2 - N1), all threads"}),
        );
        rec.record(
            variant,
            "allocations_per_invocation",
            allocs,
            "allocations",
            json!({"n": [n1, n2], "note": "the counting allocator's allocation calls, (A(N2) - A(N1)) / (N2 - N1)"}),
        );
    }
    if let (Some(plain), Some(built)) = (per.get("invoke_plain"), per.get("built_plain")) {
        rec.record(
            "built_plain",
            "agent_build_instr",
            built - plain,
            "Ir",
            json!({"note": "built_plain - invoke_plain: building an agent of the defaults (no tools) and dropping it, what the inflight row's agent built per invocation pays"}),
        );
    }
    if let (Some(plain), Some(built)) = (
        allocs_per.get("invoke_plain"),
        allocs_per.get("built_plain"),
    ) {
        rec.record(
            "built_plain",
            "agent_build_allocations",
            built - plain,
            "allocations",
            json!({"note": "built_plain - invoke_plain: the allocations an agent of the defaults owns (made by build, freed when it is dropped)"}),
        );
    }
    if let (Some(plain), Some(tools)) = (per.get("built_plain"), per.get("built_tools10")) {
        rec.record(
            "built_tools10",
            "tools_build_instr",
            (tools - plain) / 10.0,
            "Ir",
            json!({"note": "(built_tools10 - built_plain) / 10: what one tool (a handle made once, its schema distinct) adds to building an agent and dropping it"}),
        );
    }
    for (variant, metric, note) in [
        (
            "fallback_chain",
            "chain_instr",
            "fallback_chain - invoke_text: the model behind a FallbackModel of two whose primary answers (no hop)",
        ),
        (
            "fallback_hop",
            "hop_instr",
            "fallback_hop - invoke_text: the primary throttled (429) on every call, the backup answers; the skip recorded as a rein:fallback decision",
        ),
    ] {
        if let (Some(text), Some(v)) = (per.get("invoke_text"), per.get(variant)) {
            rec.record(variant, metric, v - text, "Ir", json!({"note": note}));
        }
    }
    if let (Some(text), Some(typed)) = (per.get("invoke_text"), per.get("structured")) {
        rec.record(
            "structured",
            "typed_answer_instr",
            typed - text,
            "Ir",
            json!({"note": "structured - invoke_text: the schema stated in the request, the answer's check (size, JSON, JSON Schema), the rein:output decision, AgentResult::output"}),
        );
    }
    if let (Some(off0), Some(off50), Some(on0), Some(on50)) = (
        per.get("otel_off_0"),
        per.get("otel_off_50"),
        per.get("otel_on_0"),
        per.get("otel_on_50"),
    ) {
        let decisions = (DECIDERS * 10) as f64;
        let inv = on0 - off0;
        let dec = ((on50 - off50) - inv) / decisions;
        rec.record("otel", "added_per_invocation_instr", inv, "Ir",
            json!({"note": "otel_on_0 - otel_off_0: tools10_seq, 22 spans, batch processor to a discarding exporter"}));
        rec.record(
            "otel",
            "added_per_decision_instr",
            dec,
            "Ir",
            json!({"note": "((otel_on_50 - otel_off_50) - (otel_on_0 - otel_off_0)) / 50"}),
        );
    }
    ExitCode::SUCCESS
}

/// The total of callgrind's "Collected : N" line.
fn collected(stderr: &str) -> Option<f64> {
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
}

/// The count the child prints: `allocations N`.
fn allocations(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("allocations "))
        .and_then(|n| n.trim().parse().ok())
}

/// The child: `VARIANT N` — a warm-up of 100 invocations, then N; prints the allocations the
/// process made (`allocations N`: start-up and warm-up cancel out between two counts).
pub(crate) fn child(args: &[String]) -> ExitCode {
    let variant = args.first().map(String::as_str).unwrap_or("");
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let rt = crate::measure::runtime();
    let (b, otel) = match variant {
        "invoke_text" => (agent_builder(0, 1), false),
        // The `inflight` row's agent: the defaults, one shared model.
        "invoke_plain" | "built_plain" | "built_tools10" => (
            rein::Agent::builder().model(crate::bench::model(0, 1)),
            false,
        ),
        // `invoke_text` behind a chain of two: its primary answers, or fails every call.
        "fallback_chain" | "fallback_hop" => {
            let primary = if variant == "fallback_hop" {
                rein::models::ScriptedModel::builder()
                    .cycle()
                    .record_requests(false)
                    .throttled()
                    .build()
            } else {
                crate::bench::model(0, 1)
            };
            let chain =
                rein::models::FallbackModel::new(primary).with_fallback(crate::bench::model(0, 1));
            (agent_builder(0, 1).model(chain), false)
        }
        "structured" => (crate::bench::structured_builder(), false),
        "tools10_seq" => (
            agent_builder(10, 1).tool_executor(rein::ToolExecutor::Sequential),
            false,
        ),
        // The default executor: the ten calls run concurrently.
        "tools10_par" => (agent_builder(10, 1), false),
        "otel_off_0" | "otel_on_0" | "otel_off_50" | "otel_on_50" => {
            let mut b = agent_builder(10, 1).tool_executor(rein::ToolExecutor::Sequential);
            if variant.ends_with("_50") {
                for i in 0..DECIDERS {
                    b = b.intervention(shadow_decider(i));
                }
            }
            (b, variant.starts_with("otel_on"))
        }
        _ => {
            eprintln!("bench-instr-child: unknown variant {variant}");
            return ExitCode::FAILURE;
        }
    };
    // As in `bench otel`: the export is set up before the agent is built (it then times its
    // handlers), and the layer is the thread's default subscriber.
    let sink = otel.then(|| rein_otel::__discarding(rein_otel::Otel::builder()));
    let mut agent = build(b);
    // `built_plain`: `invoke_plain`'s agent built anew for each invocation (on one shared
    // model), as the `inflight` row builds them; the others reuse one agent.
    // `built_tools10`: the same with ten tools, their handles made once (as a server keeps them)
    // and given to each agent.
    let per_invocation = variant
        .starts_with("built_")
        .then(|| crate::bench::model(0, 1));
    let tools = if variant == "built_tools10" {
        crate::bench::distinct_tools(10)
    } else {
        Vec::new()
    };
    let run = |agent: &mut rein::Agent, k: usize| {
        rt.block_on(async {
            for _ in 0..k {
                let r = match &per_invocation {
                    Some(model) => {
                        let mut built = build(
                            rein::Agent::builder()
                                .model(model.clone())
                                .tools(tools.iter().cloned()),
                        );
                        built.invoke("hi").await
                    }
                    None => {
                        agent.truncate_messages(0);
                        agent.invoke("hi").await
                    }
                };
                std::hint::black_box(&r);
            }
        });
    };
    match &sink {
        Some(sink) => {
            use tracing_subscriber::layer::SubscriberExt as _;
            let subscriber = tracing_subscriber::registry().with(sink.layer());
            tracing::subscriber::with_default(subscriber, || run(&mut agent, 100 + n));
        }
        None => run(&mut agent, 100 + n),
    }
    drop(sink);
    println!("allocations {}", crate::bench::GLOBAL.stats().allocations);
    ExitCode::SUCCESS
}
