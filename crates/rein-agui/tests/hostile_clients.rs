//! Hostile clients all at once (issue 35): slow headers (slowloris), 10 000 new threads,
//! oversized bodies and a flood of injections, while well-behaved clients run, answer an
//! approval and inject a message of their own. It ends with the server answering, every
//! refusal a clear 4xx, and nothing lost for the well-behaved clients.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{TOKEN, events, http, run_input};
use rein_agui::ServerLimits;
use rein_sessions::{MemorySessionStore, SessionStore};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An upper bound for what must happen "soon" (a hung server fails the test instead of
/// hanging it); never a speed target.
const EVENTUALLY: Duration = Duration::from_secs(60);

const NEW_THREADS: usize = 10_000;
const THREAD_BUDGET: u32 = 100;
const FLOOD: usize = 300;
const INJECTION_CAP: u32 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_leave_the_server_answering_and_lose_nothing() {
    let store = MemorySessionStore::new();
    let server = common::server(store.clone())
        .limits(
            ServerLimits::default()
                .header_timeout(Duration::from_millis(500))
                .max_connections(64)
                .new_threads_per_minute(THREAD_BUDGET)
                .max_injections_per_run(INJECTION_CAP),
        )
        .bind_local(0)
        .await
        .unwrap()
        .spawn();
    let addr = server.local_addr();

    // Slowloris: connections that send half a request and stall.
    let mut stalled = Vec::new();
    for _ in 0..40 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /agent HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        stalled.push(s);
    }

    // A well-behaved client asks for something that needs approval.
    let (got, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("good-approve", Some("delete a.txt"), None),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    let interrupt = events(&body).pop().unwrap()["outcome"]["interrupts"][0].clone();

    // Another starts a slow run; the attacker starts one to flood.
    let good_run = tokio::spawn(async move {
        http(
            addr,
            "POST",
            "/agent",
            &run_input("good-gate", Some("go"), None),
        )
        .await
    });
    let flood_run = tokio::spawn(async move {
        http(
            addr,
            "POST",
            "/agent",
            &run_input("flood-gate", Some("go"), None),
        )
        .await
    });
    for thread in ["good-gate", "flood-gate"] {
        common::wait_running(addr, thread).await;
    }

    // The flood of injections, the oversized bodies and the good client's own injection, at
    // once.
    let flood = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for i in 0..FLOOD {
            let (s, _) = http(
                addr,
                "POST",
                "/agent",
                &run_input("flood-gate", Some(&format!("flood {i}")), None),
            )
            .await;
            statuses.push(s);
        }
        statuses
    });
    let big = tokio::spawn(async move {
        let huge = "x".repeat(2 * 1024 * 1024);
        let mut statuses = Vec::new();
        for i in 0..20 {
            let (s, _) = http(
                addr,
                "POST",
                "/agent",
                &run_input(&format!("big-{i}"), Some(&huge), None),
            )
            .await;
            statuses.push(s);
        }
        statuses
    });
    let (got, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("good-gate", Some("and tidy up"), None),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert!(body.contains("rein.injection_queued"), "{body}");

    // 10 000 new threads, 32 requests at a time.
    let mut answers: Vec<(usize, u16)> = Vec::with_capacity(NEW_THREADS);
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..NEW_THREADS {
        if pending.len() >= 32 {
            answers.push(pending.join_next().await.unwrap().unwrap());
        }
        pending.spawn(async move {
            let (s, _) = http(
                addr,
                "POST",
                "/agent",
                &run_input(&format!("spam-{i}"), Some("hi"), None),
            )
            .await;
            (i, s)
        });
    }
    while let Some(a) = pending.join_next().await {
        answers.push(a.unwrap());
    }
    let created: Vec<usize> = answers
        .iter()
        .filter(|(_, s)| *s == 200)
        .map(|(i, _)| *i)
        .collect();
    assert!(
        answers.iter().all(|(_, s)| *s == 200 || *s == 429),
        "{:?}",
        answers
            .iter()
            .filter(|(_, s)| *s != 200 && *s != 429)
            .take(5)
            .collect::<Vec<_>>()
    );
    // The budget, and the refill during the test (a minute's worth at most).
    assert!(
        (THREAD_BUDGET as usize..=2 * THREAD_BUDGET as usize).contains(&created.len()),
        "{} threads created",
        created.len()
    );
    // Every thread that was accepted is stored whole.
    for i in &created {
        let s = store
            .load(&format!("spam-{i}"))
            .await
            .unwrap()
            .expect("an accepted thread was lost");
        assert_eq!(s.active_messages().len(), 2);
    }
    for i in (0..NEW_THREADS)
        .filter(|i| !created.contains(i))
        .step_by(97)
    {
        assert!(store.load(&format!("spam-{i}")).await.unwrap().is_none());
    }

    let big = big.await.unwrap();
    assert!(big.iter().all(|s| *s == 413), "{big:?}");
    let flood = flood.await.unwrap();
    assert!(
        flood.iter().all(|s| [200, 429, 409].contains(s)),
        "{flood:?}"
    );
    assert!(flood.contains(&429), "the flood was never refused");
    // Both runs waited in their tool call for all this; now they may finish.
    common::open_gate("good-gate");
    common::open_gate("flood-gate");

    // The well-behaved runs: the slow one took its injected message and finished; the
    // attacker's run too, with at most the cap of injections.
    let (got, body) = good_run.await.unwrap();
    assert_eq!(got, 200);
    let evs = events(&body);
    let consumed: Vec<&Value> = evs
        .iter()
        .filter(|e| e["name"] == "rein.injection_consumed")
        .collect();
    assert_eq!(consumed.len(), 1, "{body}");
    assert_eq!(consumed[0]["value"]["text"], "and tidy up");
    assert!(body.contains("Through the gate."), "{body}");
    let (_, body) = flood_run.await.unwrap();
    let taken = events(&body)
        .iter()
        .filter(|e| e["name"] == "rein.injection_consumed")
        .count();
    assert!(taken <= INJECTION_CAP as usize, "{taken} injections taken");

    // The approval is still there, and the answer goes through.
    let fingerprint = &interrupt["metadata"]["governance"]["actionFingerprint"];
    let resume = json!([{"interruptId": interrupt["id"], "status": "resolved",
        "payload": {"approved": true, "approvedActionFingerprint": fingerprint}}]);
    let (got, body) = http(
        addr,
        "POST",
        "/agent",
        &run_input("good-approve", None, Some(resume)),
    )
    .await;
    assert_eq!(got, 200, "{body}");
    assert!(body.contains("deleted a.txt"), "{body}");
    assert_eq!(
        events(&body).pop().unwrap()["outcome"]["type"],
        "success",
        "{body}"
    );
    let stored = store.load("good-approve").await.unwrap().unwrap();
    assert!(stored.pending_interrupts.is_none());
    assert_eq!(stored.active_messages().len(), 4);

    // The stalled connections were cut; the server still answers.
    for mut s in stalled {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(EVENTUALLY, s.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "a stalled connection is still open");
    }
    let (got, _) = http(addr, "GET", "/threads/good-approve", "").await;
    assert_eq!(got, 200);
    let (got, _, body) = common::request(
        addr,
        "GET",
        "/threads/good-approve",
        &[("Authorization", "Bearer wrong")],
        "",
    )
    .await;
    assert_eq!(got, 401, "{body}");
    assert!(!body.contains(TOKEN));
    server.shutdown().await.unwrap();
}
