//! The measurement method of the scenario benchmarks, shared by Rein's side (`bench.rs`, and
//! `xtask/http-bench` for the `http_*` children) and the rig peer (`xtask/rig-peer`); both
//! include this file by path: batches, medians with p10/p90, wall and process CPU, the
//! JSON-lines row schema of `xtask/peers/`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cpu_time::ProcessTime;

use serde_json::{Value, json};

/// `--quick`: a fifth of the batches.
pub(crate) struct Config {
    pub(crate) quick: bool,
}

impl Config {
    /// How many batches of a scenario that takes `n` in a full run.
    pub(crate) fn batches(&self, n: usize) -> usize {
        if self.quick { (n / 5).max(5) } else { n }
    }
}

/// `[--quick] [--out FILE] [SCENARIO-PREFIX ...]`: the output file (`default_out` unless
/// given), the config and the prefixes of the scenarios to run (all when none).
pub(crate) fn parse_args(args: &[String], default_out: &str) -> (PathBuf, Config, Vec<String>) {
    let mut out = PathBuf::from(default_out);
    let mut quick = false;
    let mut prefixes = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--out" => {
                if let Some(p) = it.next() {
                    out = PathBuf::from(p);
                }
            }
            p => prefixes.push(p.to_owned()),
        }
    }
    (out, Config { quick }, prefixes)
}

/// The single-threaded runtime the timed scenarios run on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot start a tokio runtime: {e}"),
    }
}

/// Appends JSON-lines rows to `out` (and prints them).
pub(crate) struct Recorder {
    sdk: &'static str,
    out: PathBuf,
    meta: Value,
}

impl Recorder {
    /// Rows of `sdk`, their `meta` holding `extra_meta` beside the machine's facts.
    pub(crate) fn new(sdk: &'static str, out: PathBuf, extra_meta: Value) -> Self {
        let mut meta = json!({
            "rust": option_env!("CARGO_PKG_RUST_VERSION").unwrap_or(""),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        });
        if let (Some(m), Value::Object(x)) = (meta.as_object_mut(), extra_meta) {
            m.extend(x);
        }
        Self { sdk, out, meta }
    }

    pub(crate) fn record(
        &self,
        scenario: &str,
        metric: &str,
        value: f64,
        unit: &str,
        extra: Value,
    ) {
        let mut row = json!({
            "sdk": self.sdk, "scenario": scenario, "metric": metric,
            "value": (value * 1000.0).round() / 1000.0, "unit": unit,
        });
        if let (Some(r), Value::Object(e)) = (row.as_object_mut(), extra) {
            r.extend(e);
        }
        println!("{row}");
        let mut meta = self.meta.clone();
        meta["loadavg"] = json!(loadavg());
        row["meta"] = meta;
        if let Some(dir) = self.out.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(&self.out) {
            let _ = writeln!(f, "{row}");
        }
    }

    /// Records `<metric>` and `<metric>_cpu` of `scenario`: (`r` - `base`) / 10, the (wall, cpu)
    /// medians of a 10-tool scenario over invoke_text's, when invoke_text ran.
    pub(crate) fn marginal(
        &self,
        base: Option<(f64, f64)>,
        scenario: &str,
        r: (f64, f64),
        metric: &str,
        note: &str,
    ) {
        if let Some(b) = base {
            let note = json!({"note": note});
            self.record(scenario, metric, (r.0 - b.0) / 10.0, "us", note.clone());
            let metric = format!("{metric}_cpu");
            self.record(scenario, &metric, (r.1 - b.1) / 10.0, "us", note);
        }
    }

    /// Records `<metric>` (wall) and `<metric>_cpu`; returns (wall, cpu) medians in µs.
    pub(crate) fn summary(
        &self,
        scenario: &str,
        metric: &str,
        s: &Samples,
        div: f64,
        extra: Value,
    ) -> (f64, f64) {
        let w = s.summarize(&s.wall, div);
        let c = s.summarize(&s.cpu, div);
        let with = |p10: f64, p90: f64| {
            let mut e = json!({"p10": p10, "p90": p90, "n": s.wall.len()});
            if let (Some(m), Value::Object(x)) = (e.as_object_mut(), extra.clone()) {
                m.extend(x);
            }
            e
        };
        self.record(scenario, metric, w.0, "us", with(w.1, w.2));
        self.record(
            scenario,
            &format!("{metric}_cpu"),
            c.0,
            "us",
            with(c.1, c.2),
        );
        (w.0, c.0)
    }
}

pub(crate) fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Per-operation nanoseconds of each batch.
#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) wall: Vec<f64>,
    pub(crate) cpu: Vec<f64>,
}

impl Samples {
    pub(crate) fn push(&mut self, wall: Duration, cpu: Duration, per: usize) {
        self.wall.push(wall.as_nanos() as f64 / per as f64);
        self.cpu.push(cpu.as_nanos() as f64 / per as f64);
    }

    /// (median, p10, p90) in µs.
    pub(crate) fn summarize(&self, xs: &[f64], div: f64) -> (f64, f64, f64) {
        let mut v: Vec<f64> = xs.iter().map(|x| x / 1000.0 / div).collect();
        v.sort_by(f64::total_cmp);
        let pct = |q: f64| {
            if v.is_empty() {
                return f64::NAN;
            }
            let k = (v.len() - 1) as f64 * q;
            let lo = k.floor() as usize;
            let hi = (lo + 1).min(v.len() - 1);
            v[lo] + (v[hi] - v[lo]) * (k - lo as f64)
        };
        (pct(0.5), pct(0.1), pct(0.9))
    }
}

/// Least-squares slope of y over x.
pub(crate) fn slope(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let num: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = pts.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    num / den
}

/// Resident set size of this process.
pub(crate) fn rss_bytes() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map(|pages| pages * 4096.0)
        .unwrap_or(f64::NAN)
}

/// The memory and concurrency scenarios (`idle_agents_20msg`, `inflight` — N agents, each
/// built — `inflight_conversations` — N conversations of one agent, each SDK's way for a
/// server — and with `floor` `inflight_floor`), each N measured by a fresh process (`<this exe> <child> <mode> <N>`, so
/// RSS growth is its own) printing one JSON object, recorded as rows.
pub(crate) fn children(
    rec: &Recorder,
    quick: bool,
    want: &dyn Fn(&str) -> bool,
    child: &str,
    floor: bool,
) {
    let exe = std::env::current_exe().ok();
    let by_quick = |q: Vec<usize>, full: Vec<usize>| if quick { q } else { full };
    for (mode, ns) in [
        (
            "idle_agents_20msg",
            by_quick(vec![1000], vec![1000, 5000, 10_000]),
        ),
        (
            "inflight",
            by_quick(vec![1000], vec![1000, 5000, 10_000, 100_000]),
        ),
        (
            "inflight_conversations",
            by_quick(vec![1000], vec![10_000, 100_000]),
        ),
        ("inflight_floor", by_quick(vec![], vec![10_000, 100_000])),
    ] {
        if mode == "inflight_floor" && !floor {
            continue;
        }
        if !want(mode) {
            continue;
        }
        // An in-flight row is one wall-clock shot, which the VM's phase moves by ±15 %: a full
        // run takes the median of three fresh processes (every SDK alike).
        let reps = if quick || mode == "idle_agents_20msg" {
            1
        } else {
            3
        };
        for n in ns {
            let Some(exe) = &exe else { continue };
            let mut runs: Vec<Value> = (0..reps)
                .filter_map(|_| {
                    let out = Command::new(exe)
                        .args([child, mode, &n.to_string()])
                        .output()
                        .ok()?;
                    let v = serde_json::from_slice::<Value>(&out.stdout).ok();
                    if v.is_none() {
                        eprintln!(
                            "child {mode} {n} failed: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                    }
                    v
                })
                .collect();
            let wall = |v: &Value| v["wall_s"].as_f64().unwrap_or(f64::NAN);
            runs.sort_by(|a, b| wall(a).total_cmp(&wall(b)));
            let walls: Vec<f64> = runs.iter().map(wall).collect();
            let Some(v) = runs.get(runs.len() / 2) else {
                continue;
            };
            let mib = 1024.0 * 1024.0;
            let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
            if mode == "idle_agents_20msg" {
                let per1k = f("rss_growth") / n as f64 * 1000.0 / mib;
                rec.record(mode, "rss_per_1000", per1k, "MiB", json!({"agents": n}));
                rec.record(
                    mode,
                    "agents_per_gib",
                    1024.0 / per1k * 1000.0,
                    "agents",
                    json!({"agents": n}),
                );
                rec.record(
                    mode,
                    "heap_per_agent",
                    f("heap") / n as f64,
                    "B",
                    json!({"agents": n, "note": "bytes live per agent, counting allocator"}),
                );
            } else if mode == "inflight_floor" {
                let note = "a bare tokio task of at least an invocation's size (task_bytes: the agent and its invoke future) sleeping 100 ms, same harness: the runtime's own cost";
                let extra = json!({
                    "agents": n,
                    "task_bytes": v["task_bytes"],
                    "floor_task_bytes": v["floor_task_bytes"],
                    "note": note,
                });
                let mut walled = extra.clone();
                walled["runs"] = json!(walls);
                rec.record(mode, "wall_s", f("wall_s"), "s", walled);
                rec.record(mode, "cpu_s", f("cpu_s"), "s", extra);
            } else {
                let a1k = f("rss_agents") / n as f64 * 1000.0 / mib;
                let f1k = f("rss_inflight_peak") / n as f64 * 1000.0 / mib;
                rec.record(
                    mode,
                    "rss_agents_per_1000",
                    a1k,
                    "MiB",
                    json!({"agents": n}),
                );
                rec.record(
                    mode,
                    "rss_inflight_per_1000",
                    f1k,
                    "MiB",
                    json!({"agents": n}),
                );
                rec.record(
                    mode,
                    "concurrent_per_gib",
                    1024.0 / (a1k + f1k) * 1000.0,
                    "agents",
                    json!({"agents": n}),
                );
                rec.record(
                    mode,
                    "wall_s",
                    f("wall_s"),
                    "s",
                    json!({"agents": n, "ideal": 0.1, "runs": walls}),
                );
                rec.record(
                    mode,
                    "overhead_per_invocation",
                    (f("wall_s") - 0.1) / n as f64 * 1e6,
                    "us",
                    json!({"agents": n, "note": "(wall - 0.1 s) / N"}),
                );
                rec.record(mode, "cpu_s", f("cpu_s"), "s", json!({"agents": n}));
                rec.record(mode, "heap_per_inflight_invocation", f("heap_inflight") / n as f64, "B",
                    json!({"agents": n, "note": "heap live per parked invocation (counting allocator), agents excluded"}));
            }
        }
    }
}

/// A family of `<family>_N` scenarios: tools10_seq with N handlers.
pub(crate) struct Family<'a> {
    pub(crate) rec: &'a Recorder,
    /// `hooks` or `interventions`.
    pub(crate) family: &'a str,
    /// The slope's metric, `per_callback_per_event` or `per_handler_per_event`.
    pub(crate) per: &'a str,
    /// Handler events per invocation.
    pub(crate) events: f64,
    pub(crate) note: &'a str,
}

/// Interleaved rounds (so load drift hits every N alike) of `batch(i)`, one batch on the agent
/// with `ns[i]` handlers; records each `<family>_N` and the least-squares slope over N per event.
pub(crate) fn per_handler(
    f: Family<'_>,
    ns: &[usize],
    rounds: usize,
    mut batch: impl FnMut(usize) -> Samples,
) {
    let mut samples: Vec<Samples> = ns.iter().map(|_| Samples::default()).collect();
    for _ in 0..rounds {
        for (i, s) in samples.iter_mut().enumerate() {
            let b = batch(i);
            s.wall.extend(b.wall);
            s.cpu.extend(b.cpu);
        }
    }
    let mut pw = Vec::new();
    let mut pc = Vec::new();
    for (s, &n) in samples.iter().zip(ns) {
        let r = f.rec.summary(
            &format!("{}_{n}", f.family),
            "per_invocation",
            s,
            1.0,
            json!({"handlers": n, "events_per_invocation": f.events}),
        );
        pw.push((n as f64, r.0));
        pc.push((n as f64, r.1));
    }
    let note = json!({"note": f.note});
    f.rec
        .record(f.family, f.per, slope(&pw) / f.events, "us", note.clone());
    let per_cpu = format!("{}_cpu", f.per);
    f.rec
        .record(f.family, &per_cpu, slope(&pc) / f.events, "us", note);
}

/// `stream_burst` per delta, (a stream of `k` deltas - a text-only stream of 1) / `k`, and
/// `stream_text_only`: `iters` alternating pairs of `call(1)` and `call(k)`, each one streamed
/// call of that many deltas.
pub(crate) fn stream_burst(rec: &Recorder, iters: usize, k: usize, mut call: impl FnMut(usize)) {
    let (mut tw, mut tc, mut bw, mut bc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iters {
        let (t0, c0) = (Instant::now(), ProcessTime::now());
        call(1);
        tw.push(t0.elapsed().as_nanos() as f64);
        tc.push(c0.elapsed().as_nanos() as f64);
        let (t0, c0) = (Instant::now(), ProcessTime::now());
        call(k);
        bw.push(t0.elapsed().as_nanos() as f64);
        bc.push(c0.elapsed().as_nanos() as f64);
    }
    let med = |v: &[f64]| Samples::default().summarize(v, 1.0).0;
    let per = |b: &[f64], t: &[f64]| (med(b) - med(t)) / k as f64;
    let note = "(stream K deltas - text-only stream)/K, wall";
    let extra = json!({"n": iters, "deltas_per_call": k, "note": note});
    rec.record("stream_burst", "per_delta", per(&bw, &tw), "us", extra);
    let extra = json!({"n": iters, "deltas_per_call": k});
    rec.record("stream_burst", "per_delta_cpu", per(&bc, &tc), "us", extra);
    let extra = json!({"n": iters});
    rec.record("stream_text_only", "per_invocation", med(&tw), "us", extra);
}

/// The peak RSS while it lives, sampled every 5 ms by a thread of its own.
pub(crate) struct PeakRss {
    peak: Arc<Mutex<f64>>,
    sampler: std::thread::JoinHandle<()>,
}

impl PeakRss {
    /// Starts sampling; the peak is at least `from`.
    pub(crate) fn start(from: f64) -> Self {
        let peak = Arc::new(Mutex::new(from));
        let p = peak.clone();
        // Samples until `finish` drops the other handle, however long the run takes.
        let sampler = std::thread::spawn(move || {
            while Arc::strong_count(&p) > 1 {
                let r = rss_bytes();
                let mut m = p.lock().unwrap_or_else(PoisonError::into_inner);
                if r > *m {
                    *m = r;
                }
                drop(m);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { peak, sampler }
    }

    /// Stops sampling; the peak seen.
    pub(crate) fn finish(self) -> f64 {
        let pk = *self.peak.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.peak);
        let _ = self.sampler.join();
        pk
    }
}

/// Nanoseconds from the model yielding delta `text` (its index, stamped in `stamps`) to now.
pub(crate) fn delta_latency(stamps: &Mutex<Vec<Instant>>, text: &str) -> Option<f64> {
    let now = Instant::now();
    let i = text.parse::<usize>().ok()?;
    let stamps = stamps.lock().unwrap_or_else(PoisonError::into_inner);
    stamps
        .get(i)
        .map(|at| now.duration_since(*at).as_nanos() as f64)
}

/// Bytes left live by a region. stats_alloc already counts a realloc's growth in
/// `bytes_allocated` (and a shrink in `bytes_deallocated`); `bytes_reallocated` is the same
/// growth again, so adding it (as these rows did before 2026-11-26) counted it twice.
pub(crate) fn live_bytes(st: &stats_alloc::Stats) -> f64 {
    st.bytes_allocated as f64 - st.bytes_deallocated as f64
}

/// The `inflight` child: every agent invokes at once on the multi-thread runtime `rt` (a model
/// that sleeps 100 ms); records in `out` the agents' RSS (over `r0`), the heap live 50 ms in
/// (counted by `global`), wall and process CPU until all finished, how many succeeded, and the
/// peak RSS while in flight.
pub(crate) fn in_flight<A, F>(
    global: &'static stats_alloc::StatsAlloc<std::alloc::System>,
    rt: &tokio::runtime::Runtime,
    out: &mut Value,
    r0: f64,
    agents: Vec<A>,
    invoke: impl Fn(A) -> F,
) where
    F: Future<Output = bool> + Send + 'static,
{
    let r1 = rss_bytes();
    out["rss_agents"] = json!(r1 - r0);
    let peak = PeakRss::start(r1);
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    let region = stats_alloc::Region::new(global);
    let (heap_inflight, ok) = rt.block_on(async {
        let handles: Vec<_> = agents
            .into_iter()
            .map(|a| tokio::spawn(invoke(a)))
            .collect();
        // All invocations are parked in the 100 ms model call by now (for a large N, only
        // those the runtime reached: the rest are tasks not yet polled).
        tokio::time::sleep(Duration::from_millis(50)).await;
        let live = live_bytes(&region.change());
        let mut ok = 0;
        for h in handles {
            ok += usize::from(matches!(h.await, Ok(true)));
        }
        (live, ok)
    });
    out["heap_inflight"] = json!(heap_inflight);
    out["wall_s"] = json!(t0.elapsed().as_secs_f64());
    out["cpu_s"] = json!(c0.elapsed().as_secs_f64());
    out["ok"] = json!(ok);
    out["rss_inflight_peak"] = json!(peak.finish() - r1);
}

/// Peak resident set size of this process so far (`VmHWM` of `/proc/self/status`), bytes.
pub(crate) fn peak_rss_bytes() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb * 1024.0)
        .unwrap_or(f64::NAN)
}

/// Model calls per `http_N` conversation: two tool turns, then text (the mock's script).
pub(crate) const HTTP_CALLS: usize = 3;
/// The mock server's delay per request.
pub(crate) const HTTP_DELAY_MS: f64 = 20.0;

/// Rounds of the `http_N` child: (N, rounds); the first round more is a warm-up (connections
/// opened, allocator grown) and not measured.
pub(crate) fn http_rounds(quick: bool) -> [(usize, usize); 3] {
    if quick {
        [(1, 10), (100, 5), (1000, 3)]
    } else {
        [(1, 40), (100, 15), (1000, 6)]
    }
}

/// The `http_N` child: `rounds` rounds of every conversation at once (`run` takes a
/// conversation and gives it back with whether its three-turn invocation succeeded) on the
/// multi-thread runtime `rt`, after a warm-up round; records in `out` wall and process CPU of
/// the measured rounds, the model calls made, how many conversations failed, and the process's
/// peak RSS. Run by the children (`xtask/http-bench`, rig's peer), not by xtask itself.
#[allow(dead_code)]
pub(crate) fn http_conversations<A, F>(
    rt: &tokio::runtime::Runtime,
    out: &mut Value,
    convs: Vec<A>,
    rounds: usize,
    run: impl Fn(A) -> F,
) where
    A: Send + 'static,
    F: Future<Output = (A, bool)> + Send + 'static,
{
    let n = convs.len();
    // One round: every conversation at once; the conversations back and how many failed.
    let round = |convs: Vec<A>| -> (Vec<A>, usize) {
        rt.block_on(async {
            let handles: Vec<_> = convs.into_iter().map(|c| tokio::spawn(run(c))).collect();
            let mut back = Vec::with_capacity(handles.len());
            let mut failed = 0;
            for h in handles {
                match h.await {
                    Ok((c, ok)) => {
                        failed += usize::from(!ok);
                        back.push(c);
                    }
                    Err(_) => failed += 1,
                }
            }
            (back, failed)
        })
    };
    let (mut convs, mut failed) = round(convs);
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    for _ in 0..rounds {
        let (back, f) = round(convs);
        convs = back;
        failed += f;
    }
    out["wall_s"] = json!(t0.elapsed().as_secs_f64());
    out["cpu_s"] = json!(c0.elapsed().as_secs_f64());
    out["calls"] = json!(n * rounds * HTTP_CALLS);
    out["rounds"] = json!(rounds);
    out["failed"] = json!(failed);
    out["peak_rss"] = json!(peak_rss_bytes());
    drop(convs);
}

/// The `<variant>_N` scenarios (`http`: N = 1, 100, 1 000 concurrent conversations over real
/// HTTP against the mock server at `url`), each N measured by a fresh process of `exe`
/// (`<exe> <child> <variant> N ROUNDS` with `REIN_BENCH_MOCK_URL`), recorded as rows; gives
/// back (N, CPU per model call in µs) of each child that ran.
pub(crate) fn http_children(
    rec: &Recorder,
    quick: bool,
    exe: &std::path::Path,
    child: &str,
    variant: &str,
    url: &str,
) -> Vec<(usize, f64)> {
    let mut cpu_per_call = Vec::new();
    for (n, rounds) in http_rounds(quick) {
        let out = Command::new(exe)
            .args([child, variant, &n.to_string(), &rounds.to_string()])
            .env("REIN_BENCH_MOCK_URL", url)
            .output();
        let Ok(out) = out else { continue };
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            eprintln!(
                "child {variant} {n} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        };
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let scn = format!("{variant}_{n}");
        let extra = json!({"agents": n, "rounds": rounds, "calls": f("calls"),
                           "failed": f("failed"), "server_delay_ms": HTTP_DELAY_MS});
        if f("failed") > 0.0 {
            eprintln!("{scn}: {} conversations failed", f("failed"));
        }
        rec.record(
            &scn,
            "requests_per_s",
            f("calls") / f("wall_s"),
            "req/s",
            extra.clone(),
        );
        cpu_per_call.push((n, f("cpu_s") / f("calls") * 1e6));
        rec.record(
            &scn,
            "cpu_per_model_call",
            f("cpu_s") / f("calls") * 1e6,
            "us",
            extra.clone(),
        );
        // Wall of a round beyond the server's delays, per model call (at N = 1 the client's
        // latency per call: request encoding, connection, decoding, the agent loop).
        let per_round = f("wall_s") / rounds as f64;
        rec.record(
            &scn,
            "overhead_per_model_call",
            (per_round - HTTP_CALLS as f64 * HTTP_DELAY_MS / 1e3) / HTTP_CALLS as f64 * 1e6,
            "us",
            extra.clone(),
        );
        rec.record(
            &scn,
            "peak_rss",
            f("peak_rss") / (1024.0 * 1024.0),
            "MiB",
            extra,
        );
    }
    cpu_per_call
}
