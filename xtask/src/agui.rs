//! The `agui_stream` rows (issue 44, item 3): a streamed answer through the AG-UI server of
//! `rein serve` (rein-agui's `AguiServer`, an agent built per request as `rein serve` builds
//! it, a memory session store) read by one client over loopback, against a floor: the same
//! event frames written by a bare hyper SSE handler (no agent, no session, no authentication),
//! read by the same client. The floor is HTTP's and SSE's own cost of the stream — what any
//! server must pay to put these events on the wire; the agent's own event stream without HTTP
//! would leave that out and measure the agent instead (its rows are `stream_burst`).
//!
//! Per token: (a run streaming `TOKENS` deltas - a run streaming 1) / (`TOKENS` - 1), process
//! CPU (server and client share the process and its one thread) and wall; events per second
//! over the long runs. Rounds interleave Rein and the floor. The thread's context switches per
//! long run say where wall time beyond CPU went: waiting (voluntary) or preempted (involuntary).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use cpu_time::ProcessTime;
use http_body_util::StreamBody;
use hyper::body::Frame;
use rein::Agent;
use rein::agui::{AguiServer, ServerLimits};
use rein::models::{ScriptedModel, SharedModel};
use rein::sessions::MemorySessionStore;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::measure::{Config, Recorder, Samples};

/// Deltas of the long answer.
const TOKENS: usize = 500;
/// One delta's text.
const TOKEN: &str = "tok ";
const BEARER: &str = "bench-token-0123456789";

/// The rows.
pub(crate) fn rows(rec: &Recorder, cfg: &Config, rt: &tokio::runtime::Runtime) {
    if let Err(e) = rt.block_on(run(rec, cfg)) {
        eprintln!("agui_stream: {e}; no rows");
    }
}

fn model(tokens: usize) -> SharedModel {
    SharedModel::new(
        ScriptedModel::builder()
            .cycle()
            .record_requests(false)
            .chunk_chars(TOKEN.len())
            .text(TOKEN.repeat(tokens))
            .build(),
    )
}

async fn run(rec: &Recorder, cfg: &Config) -> Result<(), Box<dyn std::error::Error>> {
    let (one, long) = (model(1), model(TOKENS));
    // As `rein serve` makes its agent (crates/rein-cli/src/serve.rs): per request, a shared
    // model, a turn and token budget.
    let server = AguiServer::new(MemorySessionStore::new(), move |thread: &str| {
        let model = if thread.starts_with("long") {
            &long
        } else {
            &one
        };
        Agent::builder()
            .name("rein-serve")
            .shared_model(model.clone())
            .max_turns(8)
            .max_total_tokens(1_000_000)
    })
    .token(BEARER)
    // Every run is a new thread (its own session): the default cap on new threads per minute
    // (60, a bound on how fast a client fills the store) would answer 429 to a fast machine's
    // rounds. The cap is not what is measured; the rest of the limits stay the defaults.
    .limits(ServerLimits::default().new_threads_per_minute(u32::MAX))
    .console(false)
    .bind("127.0.0.1:0")
    .await?
    .spawn();
    let rein_addr = server.local_addr();
    let floor_addr = floor_server().await?;

    // Samples of: rein 1, rein TOKENS, floor 1, floor TOKENS; events of the long runs.
    let mut s: [Samples; 4] = Default::default();
    let mut events = [0usize; 4];
    // Per variant: this thread's voluntary context switches (it waited: nothing to run),
    // involuntary ones (it was preempted: runnable, but another process had the CPU), and the
    // runs preempted at least once. Read outside the timed part.
    let mut switches = [(0u64, 0u64, 0usize); 4];
    let mut thread = 0usize;
    // `REIN_AGUI_ONLY=i`: variant i alone (0 Rein 1, 1 Rein 500, 2 floor 1, 3 floor 500), to
    // profile one under strace, perf or callgrind; no rows then.
    let only: Option<usize> = std::env::var("REIN_AGUI_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    for round in 0..=cfg.batches(60) {
        for (i, sample) in s.iter_mut().enumerate() {
            if only.is_some_and(|o| o != i) {
                continue;
            }
            let (addr, tokens) = match i {
                0 => (rein_addr, 1),
                1 => (rein_addr, TOKENS),
                2 => (floor_addr, 1),
                _ => (floor_addr, TOKENS),
            };
            thread += 1;
            let prefix = if tokens == 1 { "one" } else { "long" };
            let body = json!({"threadId": format!("{prefix}-{thread}"), "runId": "r1",
                "messages": [{"id": "m1", "role": "user", "content": "hi"}]})
            .to_string();
            let switches0 = context_switches();
            let (t0, c0) = (Instant::now(), ProcessTime::now());
            let n = post(addr, &body).await?;
            let (wall, cpu) = (t0.elapsed(), c0.elapsed());
            if n < tokens {
                return Err(format!("{n} events for {tokens} tokens from {addr}").into());
            }
            // Round 0 warms up and is not kept.
            if round > 0 {
                sample.push(wall, cpu, 1);
                if let (Some(a), Some(b)) = (switches0, context_switches()) {
                    let k = &mut switches[i];
                    k.0 += b.0 - a.0;
                    k.1 += b.1 - a.1;
                    k.2 += usize::from(b.1 > a.1);
                }
                events[i] = n;
            }
        }
    }
    if only.is_some() {
        server.shutdown().await?;
        return Ok(());
    }
    let med = |x: &Samples| (x.summarize(&x.wall, 1.0).0, x.summarize(&x.cpu, 1.0).0);
    let m: Vec<(f64, f64)> = s.iter().map(med).collect();
    let per = |short: (f64, f64), long: (f64, f64)| {
        let k = (TOKENS - 1) as f64;
        ((long.0 - short.0) / k, (long.1 - short.1) / k)
    };
    let (rein_tok, floor_tok) = (per(m[0], m[1]), per(m[2], m[3]));
    let extra = |note: &str, n_events: usize| json!({"n": s[0].wall.len(), "tokens": TOKENS, "events_per_run": n_events, "note": note});
    let rein_note = "(a run of 500 streamed deltas - a run of 1) / 499 through AguiServer (rein serve's agent per request, memory store), one loopback client reading the SSE stream; server and client CPU";
    let floor_note =
        "the floor: the same event frames from a bare hyper SSE handler, the same client";
    let fixed_note = "a run of one delta through AguiServer: the request's fixed cost (agent built, session loaded and saved)";
    // Events per second of the long runs, whole request included.
    let eps = |n: usize, wall_us: f64| n as f64 / (wall_us / 1e6);
    let rows = [
        ("per_token", rein_tok.0, "us", rein_note, events[1]),
        ("per_token_cpu", rein_tok.1, "us", rein_note, events[1]),
        ("floor_per_token", floor_tok.0, "us", floor_note, events[3]),
        (
            "floor_per_token_cpu",
            floor_tok.1,
            "us",
            floor_note,
            events[3],
        ),
        ("per_run_1", m[0].0, "us", fixed_note, events[0]),
        ("per_run_1_cpu", m[0].1, "us", fixed_note, events[0]),
        (
            "events_per_s",
            eps(events[1], m[1].0),
            "1/s",
            rein_note,
            events[1],
        ),
        (
            "floor_events_per_s",
            eps(events[3], m[3].0),
            "1/s",
            floor_note,
            events[3],
        ),
    ];
    for (metric, value, unit, note, n_events) in rows {
        rec.record("agui_stream", metric, value, unit, extra(note, n_events));
    }
    // Where a long run's wall goes beyond its CPU: waiting (voluntary switches) or preempted
    // by other processes on a loaded machine (involuntary), per run of 500 tokens.
    let runs = s[1].wall.len().max(1) as f64;
    for (metric, (vol, invol, preempted)) in
        [("long_run", switches[1]), ("floor_long_run", switches[3])]
    {
        let note = "context switches of the serving and reading thread per 500-token run (/proc/thread-self/status): voluntary = it waited with nothing to run; involuntary = another process had the CPU";
        rec.record(
            "agui_stream",
            &format!("{metric}_waits"),
            vol as f64 / runs,
            "1",
            json!({"note": note}),
        );
        rec.record(
            "agui_stream",
            &format!("{metric}_preemptions"),
            invol as f64 / runs,
            "1",
            json!({"note": note}),
        );
        rec.record(
            "agui_stream",
            &format!("{metric}_preempted_share"),
            preempted as f64 / runs,
            "1",
            json!({"note": "the share of 500-token runs preempted at least once"}),
        );
    }
    let ratio = json!({"note": "per token, to the floor of the same run (medians)"});
    rec.record(
        "agui_stream",
        "ratio",
        rein_tok.0 / floor_tok.0,
        "x",
        ratio.clone(),
    );
    rec.record(
        "agui_stream",
        "ratio_cpu",
        rein_tok.1 / floor_tok.1,
        "x",
        ratio,
    );
    server.shutdown().await?;
    Ok(())
}

/// This thread's (voluntary, involuntary) context switches so far; `None` off Linux.
fn context_switches() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .parse::<u64>()
            .ok()
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
}

/// POSTs a run request to `/agent` (HTTP/1.1, Connection: close) and reads the SSE answer to
/// its end: the number of `data:` frames.
async fn post(addr: SocketAddr, body: &str) -> Result<usize, Box<dyn std::error::Error>> {
    let request = format!(
        "POST /agent HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {BEARER}\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(request.as_bytes()).await?;
    let mut out = Vec::with_capacity(64 * 1024);
    s.read_to_end(&mut out).await?;
    if !out.starts_with(b"HTTP/1.1 200") {
        let head = String::from_utf8_lossy(&out[..out.len().min(300)]).into_owned();
        return Err(format!("not a 200 from {addr}: {head}").into());
    }
    Ok(out.windows(6).filter(|w| w == b"data: ").count())
}

/// The floor server: each request answered with the events of a run streaming `TOKENS` deltas
/// (or one, when the body names a `one-` thread), each event serialized and sent as its own SSE
/// frame. Its port.
async fn floor_server() -> std::io::Result<SocketAddr> {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                use http_body_util::BodyExt as _;
                let body = req.into_body().collect().await.map(|b| b.to_bytes());
                let one = body.is_ok_and(|b| b.windows(4).any(|w| w == b"one-"));
                let tokens = if one { 1 } else { TOKENS };
                let frames = floor_events(tokens).map(|e| {
                    let data = format!("data: {e}\n\n");
                    Ok::<_, Infallible>(Frame::data(Bytes::from(data)))
                });
                let body = StreamBody::new(futures_util::stream::iter(frames));
                hyper::Response::builder()
                    .header("content-type", "text/event-stream")
                    .header("cache-control", "no-cache")
                    .body(body)
            });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// The events AG-UI sends for a text answer of `tokens` deltas, in its shapes.
fn floor_events(tokens: usize) -> impl Iterator<Item = String> {
    let (thread, run, msg) = ("long-1", "r1", "m-0");
    let head = [
        json!({"type": "RUN_STARTED", "threadId": thread, "runId": run}),
        json!({"type": "TEXT_MESSAGE_START", "messageId": msg, "role": "assistant"}),
    ];
    let deltas = (0..tokens)
        .map(move |_| json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": msg, "delta": TOKEN}));
    let tail = [
        json!({"type": "TEXT_MESSAGE_END", "messageId": msg}),
        json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run,
            "outcome": "success", "result": {"text": TOKEN.repeat(tokens), "stopReason": "end_turn"}}),
    ];
    head.into_iter()
        .chain(deltas)
        .chain(tail)
        .map(|e| e.to_string())
}
