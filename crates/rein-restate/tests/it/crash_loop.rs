//! The crash loop: many durable runs while worker processes are SIGKILLed at random points
//! (mid-model-stream, mid-tool, between steps, in the inbox, during a resume) and restarted. Every run must
//! finish with the history of an uncrashed run; the tool ledger shows every tool use ran, and
//! ran again only when its worker died before the result was journaled; every injected message
//! is consumed or rejected exactly once. SKIPPED without `REIN_RESTATE_SERVER`.
//! `REIN_CRASH_RUNS` sets the number of runs (default 200).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use rein_core::Message;
use rein_restate::{
    Client,
    wire::{InjectRequest, InjectionStatus, InvokeRequest},
};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// A small deterministic generator (the kill schedule needs no crate).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below.max(1)
    }
}

fn contents(messages: &[(rein_core::id::MessageId, Message)]) -> Vec<String> {
    messages
        .iter()
        .map(|(_, m)| serde_json::to_string(m).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_survive_workers_killed_at_random_points() {
    let Some(restate) = Restate::start("crash").await else {
        return;
    };
    let restate = Arc::new(restate);
    let runs: usize = std::env::var("REIN_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let ledger = restate.ledger();
    let port = free_port();
    let options = |register| WorkerOptions {
        port,
        reuse_port: true,
        register,
        model_delay_ms: 15,
        tool_delay_ms: 15,
        ledger: Some(&ledger),
        ..Default::default()
    };
    // Two worker processes behind one deployment address.
    let workers = vec![
        Worker::start(&restate, options(true)).await,
        Worker::start(&restate, options(false)).await,
    ];
    let client = Client::new(&restate.ingress).unwrap();

    // The reference: the same script, nothing killed.
    client
        .invoke("reference", InvokeRequest::text("steps 3"))
        .await
        .unwrap();
    let reference = contents(&client.session("reference").await.unwrap().messages);
    // And a run that pauses for an approval and is resumed.
    let approve = |report: &rein_restate::wire::RunReport| {
        let id = report.interrupts[0].clone();
        rein_restate::wire::ResumeRequest::new(vec![
            id.answer(serde_json::json!({"approved": true})),
        ])
    };
    let paused = client
        .invoke("reference-approve", InvokeRequest::text("delete /tmp/x"))
        .await
        .unwrap();
    client
        .resume("reference-approve", approve(&paused))
        .await
        .unwrap();
    let reference_approve = contents(&client.session("reference-approve").await.unwrap().messages);
    std::fs::write(&ledger, "").unwrap();

    let kills: Arc<Mutex<Vec<u128>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (kills, done) = (kills.clone(), done.clone());
        let restate = restate.clone();
        let mut workers = workers;
        let ledger = ledger.clone();
        tokio::spawn(async move {
            let mut rng = Lcg(0x5eed);
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(80 + rng.next(250))).await;
                let i = usize::try_from(rng.next(2)).unwrap();
                kills.lock().unwrap().push(now_ms());
                workers[i].kill();
                n += 1;
                // A fresh worker takes the dead one's place (the other serves meanwhile).
                let options = WorkerOptions {
                    port,
                    reuse_port: true,
                    register: false,
                    model_delay_ms: 15,
                    tool_delay_ms: 15,
                    ledger: Some(&ledger),
                    ..Default::default()
                };
                workers[i] = Worker::start(&restate, options).await;
            }
            // The workers serve the checks below.
            (n, workers)
        })
    };

    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let limit = Arc::new(tokio::sync::Semaphore::new(20));
    for i in 0..runs {
        let client = client.clone();
        let permit = limit.clone().acquire_owned().await.unwrap();
        tasks.spawn(async move {
            let session = format!("run-{i}");
            let inject = {
                let (client, session) = (client.clone(), session.clone());
                async move {
                    // Sent while the run goes (or refused once it has ended).
                    tokio::time::sleep(Duration::from_millis(40)).await;
                    let request = InjectRequest::text(format!("note for {session}"))
                        .idempotency_key(format!("{session}/note"));
                    for _ in 0..100 {
                        match client.inject(&session, request.clone()).await {
                            Ok(report) => return Some(report.id),
                            // Not started yet, or over: try again shortly / give up.
                            Err(e) if e.status() == Some(409) => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                        }
                    }
                    None
                }
            };
            let run = async {
                tokio::time::timeout(
                    Duration::from_secs(180),
                    client.invoke(&session, InvokeRequest::text("steps 3")),
                )
                .await
            };
            let (report, injected) = tokio::join!(run, inject);
            drop(permit);
            (session, report, injected)
        });
    }
    // A quarter as many runs pause for an approval and are resumed while workers die.
    let mut resumes = tokio::task::JoinSet::new();
    for i in 0..runs / 4 {
        let client = client.clone();
        resumes.spawn(async move {
            let session = format!("approve-{i}");
            let paused = client
                .invoke(&session, InvokeRequest::text("delete /tmp/x"))
                .await
                .unwrap();
            assert_eq!(paused.interrupts.len(), 1, "{session}");
            let id = paused.interrupts[0].clone();
            let answer = rein_restate::wire::ResumeRequest::new(vec![
                id.answer(serde_json::json!({"approved": true})),
            ]);
            let done = client.resume(&session, answer).await.unwrap();
            (session, done)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = resumes.join_next().await {
        let (session, done) = joined.unwrap();
        assert_eq!(done.text, "Deleted.", "{session}");
        let got = contents(&client.session(&session).await.unwrap().messages);
        assert_eq!(got, reference_approve, "{session}");
    }
    while let Some(joined) = tasks.join_next().await {
        results.push(joined.unwrap());
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (killed, _workers) = killer.await.unwrap();
    let wall = started.elapsed();

    let kills = kills.lock().unwrap().clone();
    let mut redone = 0;
    let mut injected_consumed = 0;
    let lines = ledger_lines(&ledger);
    let mut by_key: BTreeMap<(String, String), Vec<u128>> = BTreeMap::new();
    for (t, session, id) in lines {
        by_key.entry((session, id)).or_default().push(t);
    }
    for (session, report, injected) in &results {
        let report = report.as_ref().expect("no run hangs").as_ref().unwrap();
        assert!(
            report.text.starts_with("Finished 3 steps."),
            "{session}: {}",
            report.text
        );
        let view = client.session(session).await.unwrap();
        let mut got = contents(&view.messages);
        let history = serde_json::to_string(&view.messages).unwrap();
        let note = format!("note for {session}");
        // The injected note, if delivered, is extra user text: the rest is the reference.
        if let Some(id) = injected {
            let status = client.injection(session, *id).await.unwrap();
            let delivered = history.matches(&note).count();
            match status.status {
                InjectionStatus::Consumed => {
                    injected_consumed += 1;
                    // Once in the history (and echoed once by the final answer).
                    let stored = view
                        .messages
                        .iter()
                        .filter(|(_, m)| m.role == rein_core::Role::User)
                        .filter(|(_, m)| m.text().contains(&note))
                        .count();
                    assert_eq!(stored, 1, "{session}: {history}");
                }
                InjectionStatus::Rejected => assert_eq!(delivered, 0, "{session}"),
                other => panic!("{session}: the note is left {other:?}"),
            }
            got = got
                .into_iter()
                .map(|m| m.replace(&format!("\",\"text\":\"{note}"), ""))
                .collect();
        }
        if injected.is_none() || !history.contains(&note) {
            assert_eq!(got, reference, "{session}");
        } else {
            assert_eq!(got.len(), reference.len(), "{session}");
        }
        for step in 0..3 {
            let key = (session.clone(), format!("step-{step}"));
            let times = by_key
                .get(&key)
                .unwrap_or_else(|| panic!("{key:?} never ran"));
            // Ran again only when a worker died after the tool finished and before its result
            // was journaled.
            let first = times[0];
            for _ in &times[1..] {
                assert!(
                    kills
                        .iter()
                        .any(|k| *k + 50 >= first && *k <= first + 1_000),
                    "{key:?} ran {} times with no kill near {first}",
                    times.len()
                );
                redone += 1;
            }
        }
    }
    println!(
        "crash loop: {runs} runs and {} approved resumes, {killed} kills, {redone} tool calls re-run (in flight at a kill), \
         {injected_consumed} notes delivered, {:.1} s",
        runs / 4,
        wall.as_secs_f64()
    );
    assert!(
        killed >= 3,
        "the workers were killed while runs went on ({killed})"
    );
}
