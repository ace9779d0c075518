//! Finding 3 of issue 35: what one client may hold or start is bounded — header time, body
//! size, runs, new threads, injections, turns per run — and a client that goes away takes its
//! run with it. Each test sends what exceeds a bound; before the bounds, each was accepted (or
//! held the server forever).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{events, http, request, run_input};
use rein_agui::ServerLimits;
use rein_sessions::{MemorySessionStore, SessionStore};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An upper bound for what must happen "soon" (a hung server fails the test instead of
/// hanging it); never a speed target.
const EVENTUALLY: Duration = Duration::from_secs(30);

fn code(body: &str) -> String {
    serde_json::from_str::<Value>(body).map_or_else(
        |_| format!("(not JSON: {body})"),
        |v| v["code"].as_str().unwrap_or_default().to_owned(),
    )
}

async fn start(limits: ServerLimits) -> (rein_agui::ServerHandle, MemorySessionStore) {
    let store = MemorySessionStore::new();
    let server = common::server(store.clone())
        .limits(limits)
        .bind_local(0)
        .await
        .unwrap()
        .spawn();
    (server, store)
}

/// Slowloris: a client that sends part of its headers and then nothing, or connects and says
/// nothing, is disconnected after the header timeout rather than holding a connection forever.
#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let (server, _) =
        start(ServerLimits::default().header_timeout(Duration::from_millis(300))).await;
    let addr = server.local_addr();
    let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
    partial
        .write_all(format!("POST /agent HTTP/1.1\r\nHost: {addr}\r\nX-Slow: 1").as_bytes())
        .await
        .unwrap();
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    for s in [&mut partial, &mut silent] {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(EVENTUALLY, s.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "the server kept a slow connection open");
    }
    // The server still answers.
    let (got, _) = http(addr, "GET", "/threads/none", "").await;
    assert_eq!(got, 404);
    server.shutdown().await.unwrap();
}

/// A body over the limit (1 MiB by default) is refused with 413 before it is parsed.
#[tokio::test]
async fn an_oversized_body_is_413() {
    let (server, store) = start(ServerLimits::default()).await;
    let big = "x".repeat(1536 * 1024);
    let (got, resp) = http(
        server.local_addr(),
        "POST",
        "/agent",
        &run_input("plain-big", Some(&big), None),
    )
    .await;
    assert_eq!(
        (got, code(&resp).as_str()),
        (413, "BODY_TOO_LARGE"),
        "{}",
        &resp[..resp.len().min(200)]
    );
    assert!(store.load("plain-big").await.unwrap().is_none());
    server.shutdown().await.unwrap();
}

/// New threads (sessions the store did not hold) come out of a budget per server; past it,
/// 429 with Retry-After, while existing threads go on.
#[tokio::test]
async fn new_threads_beyond_the_budget_are_429() {
    let (server, store) = start(ServerLimits::default().new_threads_per_minute(5)).await;
    let addr = server.local_addr();
    for i in 0..5 {
        let (got, resp) = http(
            addr,
            "POST",
            "/agent",
            &run_input(&format!("plain-{i}"), Some("hi"), None),
        )
        .await;
        assert_eq!(got, 200, "{resp}");
    }
    let (got, head, resp) = request(
        addr,
        "POST",
        "/agent",
        &[("Authorization", &format!("Bearer {}", common::TOKEN))],
        &run_input("plain-5", Some("hi"), None),
    )
    .await;
    assert_eq!(
        (got, code(&resp).as_str()),
        (429, "TOO_MANY_THREADS"),
        "{resp}"
    );
    assert!(head.contains("retry-after: "), "{head}");
    assert!(store.load("plain-5").await.unwrap().is_none());
    // An existing thread is no new thread.
    let (got, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("plain-0", Some("again"), None),
    )
    .await;
    assert_eq!(got, 200, "{resp}");
    server.shutdown().await.unwrap();
}

/// Runs going at once are capped per server: past the cap, 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_beyond_the_cap_are_429() {
    let (server, _) = start(ServerLimits::default().max_runs(1)).await;
    let addr = server.local_addr();
    let slow = tokio::spawn(async move {
        http(
            addr,
            "POST",
            "/agent",
            &run_input("gate-1", Some("go"), None),
        )
        .await
    });
    common::wait_running(addr, "gate-1").await;
    let (got, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("plain-2", Some("hi"), None),
    )
    .await;
    assert_eq!(
        (got, code(&resp).as_str()),
        (429, "TOO_MANY_RUNS"),
        "{resp}"
    );
    common::open_gate("gate-1");
    let (got, body) = slow.await.unwrap();
    assert_eq!(got, 200);
    assert!(body.contains("Through the gate."), "{body}");
    let (got, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("plain-2", Some("hi"), None),
    )
    .await;
    assert_eq!(got, 200, "{resp}");
    server.shutdown().await.unwrap();
}

/// Messages injected into one run are capped: past the cap, 429, and the run is unharmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injections_beyond_the_cap_are_429() {
    let (server, _) = start(ServerLimits::default().max_injections_per_run(3)).await;
    let addr = server.local_addr();
    let slow = tokio::spawn(async move {
        http(
            addr,
            "POST",
            "/agent",
            &run_input("gate-2", Some("go"), None),
        )
        .await
    });
    common::wait_running(addr, "gate-2").await;
    let mut answers = Vec::new();
    for i in 0..6 {
        let (got, resp) = http(
            addr,
            "POST",
            "/agent",
            &run_input("gate-2", Some(&format!("more {i}")), None),
        )
        .await;
        answers.push((got, code(&resp)));
    }
    common::open_gate("gate-2");
    let (got, body) = slow.await.unwrap();
    assert_eq!(got, 200);
    let accepted = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(accepted, 3, "{answers:?}");
    assert!(
        answers[3..]
            .iter()
            .all(|(s, c)| *s == 429 && c == "TOO_MANY_INJECTIONS"),
        "{answers:?}"
    );
    // Each accepted message reached the run.
    let consumed = events(&body)
        .iter()
        .filter(|e| e["name"] == "rein.injection_consumed")
        .count();
    assert_eq!(consumed, 3, "{body}");
    server.shutdown().await.unwrap();
}

/// A served agent that would call its model forever stops at the server's turn budget (32 by
/// default) with stop reason `limit_turns`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stops_at_the_default_turn_budget() {
    use rein_agent::Agent;
    use rein_core::ToolHandle;
    use rein_models::{ScriptedModel, SharedModel};
    use serde_json::json;
    let model = SharedModel::new(
        ScriptedModel::builder()
            .tool_use("c", "clock", json!({}))
            .cycle()
            .build(),
    );
    let server = rein_agui::AguiServer::new(MemorySessionStore::new(), move |_| {
        Agent::builder()
            .shared_model(model.clone())
            .tool(ToolHandle::from_sync_fn(
                "clock",
                "The time.",
                json!({"type": "object"}),
                |_, _| Ok("12:00".into()),
            ))
    })
    .token(common::TOKEN)
    .bind_local(0)
    .await
    .unwrap()
    .spawn();
    let answer = tokio::time::timeout(
        EVENTUALLY,
        http(
            server.local_addr(),
            "POST",
            "/agent",
            &run_input("loop", Some("go"), None),
        ),
    )
    .await;
    let (got, body) = answer.expect("the run never ended");
    assert_eq!(got, 200);
    let evs = events(&body);
    let calls = evs
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_START")
        .count();
    assert_eq!(calls, 32, "{}", evs.len());
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{last}");
    assert_eq!(last["result"]["stopReason"], "limit_turns", "{last}");
    server.shutdown().await.unwrap();
}

/// A client that disconnects cancels its run: it stops at once, and what it stored stays a valid
/// history; the thread takes a new run afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_cancels_its_run() {
    let (server, store) = start(ServerLimits::default()).await;
    let addr = server.local_addr();
    let body = run_input("inject-gone", Some("go"), None);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "POST /agent HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            common::TOKEN,
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Read until the slow tool has started, then go away.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("TOOL_CALL_END") {
        let n = tokio::time::timeout(EVENTUALLY, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    drop(s);
    let t = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let (_, t) = http(addr, "GET", "/threads/inject-gone", "").await;
            let t: Value = serde_json::from_str(&t).unwrap();
            if t["runningRunId"].is_null() {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the run went on after its client left");
    let stored = store.load("inject-gone").await.unwrap().unwrap();
    let texts: Vec<String> = stored
        .active_messages()
        .iter()
        .map(|m| m.message.text())
        .collect();
    assert!(
        !texts.iter().any(|t| t.contains("Finished the slow thing.")),
        "the run finished after its client left: {texts:?} {t}"
    );
    let (got, resp) = http(
        addr,
        "POST",
        "/agent",
        &run_input("inject-gone", Some("again"), None),
    )
    .await;
    assert_eq!(got, 200, "{resp}");
    server.shutdown().await.unwrap();
}

/// The header timeout is for headers only: a run's event stream that lasts longer is not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stream_outlives_the_header_timeout() {
    let (server, _) =
        start(ServerLimits::default().header_timeout(Duration::from_millis(100))).await;
    // A slow tool (900 ms) between the run's first events and its end.
    let (got, body) = http(
        server.local_addr(),
        "POST",
        "/agent",
        &run_input("inject-long", Some("go"), None),
    )
    .await;
    assert_eq!(got, 200);
    assert!(body.contains("Finished the slow thing."), "{body}");
    server.shutdown().await.unwrap();
}

/// A body sent slower than the request timeout allows gets 408 and the connection back.
#[tokio::test]
async fn a_body_that_never_arrives_is_408() {
    let (server, store) =
        start(ServerLimits::default().request_timeout(Duration::from_millis(300))).await;
    let addr = server.local_addr();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "POST /agent HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"threadId\":",
            common::TOKEN
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(EVENTUALLY, s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the server waited for the body forever");
    let answer = String::from_utf8_lossy(&buf);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(store.load("x").await.unwrap().is_none());
    server.shutdown().await.unwrap();
}
