//! Durable agents against a real Restate server (started by the test, 127.0.0.1 only) and
//! worker processes: runs, typed errors through the ingress, approval from anywhere (raised on
//! worker A, answered by `curl`, resumed on worker B), cancel, injection from four processes,
//! a server restart mid-run, a handoff kept across invocations. SKIPPED without
//! `REIN_RESTATE_SERVER` (`.ci/peers-restate.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use common::*;
use rein_core::{Message, message::InterruptResponse, stream::StopReason};
use rein_restate::{
    Client,
    wire::{InjectRequest, InjectionStatus, InvokeRequest, ResumeRequest},
};
use serde_json::{Value, json};

/// Every tool use in the history has its result (SPEC: history stays valid).
fn assert_answered(messages: &[(rein_core::id::MessageId, Message)]) {
    let json = serde_json::to_value(messages.iter().map(|(_, m)| m).collect::<Vec<_>>()).unwrap();
    let mut uses = BTreeSet::new();
    let mut results = BTreeSet::new();
    collect(&json, &mut uses, &mut results);
    assert_eq!(uses, results, "every tool use answered");
}

fn collect(v: &Value, uses: &mut BTreeSet<String>, results: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(u)) = map.get("toolUse") {
                uses.insert(u["toolUseId"].as_str().unwrap_or_default().to_owned());
            }
            if let Some(Value::Object(r)) = map.get("toolResult") {
                results.insert(r["toolUseId"].as_str().unwrap_or_default().to_owned());
            }
            map.values().for_each(|v| collect(v, uses, results));
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, uses, results)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_typed_errors_through_the_ingress() {
    let Some((restate, _worker, client)) = durable("errors", WorkerOptions::default()).await else {
        return;
    };
    let ledger = restate.ledger();

    let report = client
        .invoke("s1", InvokeRequest::text("steps 2"))
        .await
        .unwrap();
    assert_eq!(report.text, "Finished 2 steps.");
    assert_eq!(report.stop_reason, StopReason::EndTurn);
    assert_eq!(ledger_lines(&ledger).len(), 2);
    let view = client.session("s1").await.unwrap();
    assert_eq!(view.messages.len(), 6);
    assert_answered(&view.messages);

    // Unknown session, nothing pending, unknown interrupt, input while interrupts wait.
    let answer = |id: &str| ResumeRequest::new(vec![InterruptResponse::new(id, json!(true))]);
    let e = client.resume("nobody", answer("x")).await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    assert_eq!(
        client.session("nobody").await.unwrap_err().status(),
        Some(404)
    );
    let e = client.resume("s1", answer("x")).await.unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    let paused = client
        .invoke("s2", InvokeRequest::text("delete /tmp/a"))
        .await
        .unwrap();
    assert_eq!(paused.stop_reason, StopReason::Interrupt);
    let e = client.resume("s2", answer("nope")).await.unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    let e = client
        .invoke("s2", InvokeRequest::text("hello"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    // A wrong-shaped approval is refused and the interrupt still waits.
    let bad = ResumeRequest::new(vec![
        paused.interrupts[0].answer(json!({"approved": "maybe"})),
    ]);
    assert_eq!(
        client.resume("s2", bad).await.unwrap_err().status(),
        Some(400)
    );
    assert_eq!(client.session("s2").await.unwrap().pending.len(), 1);
    // Issue #37: a typo, an empty object, a string are refused too (they were read as a
    // rejection: 200, the approval lost); the error says what an approval is.
    for typo in [
        json!({"approve": true}),
        json!({}),
        json!("yes please"),
        json!(null),
    ] {
        let bad = ResumeRequest::new(vec![paused.interrupts[0].answer(typo.clone())]);
        let e = client.resume("s2", bad).await.unwrap_err();
        assert_eq!(e.status(), Some(400), "{typo}: {e}");
        assert!(e.to_string().contains("an approval is"), "{typo}: {e}");
        assert_eq!(client.session("s2").await.unwrap().pending.len(), 1);
    }

    // Malformed requests (raw HTTP, as any caller might send them).
    let http = reqwest_client();
    for body in ["garbage", "{}", r#"{"answers": 3}"#] {
        for handler in ["invoke", "resume"] {
            let url = format!("{}/ReinAgent/s3/{handler}", restate.ingress);
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 400, "{handler} {body}");
        }
    }

    // Injection with no run: refused; the same idempotency key twice is one injection.
    let e = client
        .inject("s1", InjectRequest::text("late"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    let first = client
        .inject(
            "s2",
            InjectRequest::text("while paused").idempotency_key("k1"),
        )
        .await
        .unwrap();
    let again = client
        .inject(
            "s2",
            InjectRequest::text("while paused").idempotency_key("k1"),
        )
        .await
        .unwrap();
    assert_eq!(first.id, again.id);
    assert_eq!(first.status, InjectionStatus::Queued);
    // The paused run gets it when it resumes, once.
    let approve = ResumeRequest::new(vec![paused.interrupts[0].answer(json!({"approved": true}))]);
    let done = client.resume("s2", approve).await.unwrap();
    assert_eq!(done.text, "Deleted.");
    assert_eq!(done.injections.len(), 1);
    assert_eq!(done.injections[0].id, first.id);
    let status = client.injection("s2", first.id).await.unwrap();
    assert_eq!(status.status, InjectionStatus::Consumed);
    let view = client.session("s2").await.unwrap();
    let text = serde_json::to_string(&view.messages).unwrap();
    assert_eq!(text.matches("while paused").count(), 1);
    assert_answered(&view.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_raised_on_one_worker_answered_by_curl_resumed_on_another() {
    let Some((restate, mut a, client)) = durable("approval", WorkerOptions::default()).await else {
        return;
    };
    let paused = client
        .invoke("ticket-7", InvokeRequest::text("delete /srv/old"))
        .await
        .unwrap();
    assert_eq!(paused.stop_reason, StopReason::Interrupt);
    let id = paused.interrupts[0].clone();
    a.kill();
    // Worker B (another process, another address) is the deployment now.
    let _b = Worker::start(&restate, WorkerOptions::default()).await;
    // A caller answers with the id it was shown (with the pause's nonce) and echoes the
    // fingerprint of the action it approves.
    let body = json!({"answers": [{
        "interruptId": id.resume_id(),
        "fingerprint": id.fingerprint,
        "response": {"approved": true},
    }]});
    let out = Command::new("curl")
        .args([
            "-s",
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-d",
        ])
        .arg(body.to_string())
        .arg(format!("{}/ReinAgent/ticket-7/resume", restate.ingress))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["text"], "Deleted.", "{report}");
    assert_eq!(report["decisions"][0]["confirmation"]["status"], "approved");
    let view = client.session("ticket-7").await.unwrap();
    assert!(view.pending.is_empty());
    assert_answered(&view.messages);
}

/// Approvals through the ingress are bound to their pause and to the action (SPEC §4, §12):
/// an answer naming no fingerprint is refused (409) and the call stays pending; the session
/// pauses again on the same tool-use id (`del-1`) and the first resume, sent again, is an
/// answer to another pause (400), and an answer naming the new id with the first call's
/// fingerprint is refused (409) — `/b` is never deleted until approved as shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_or_unbound_resume_approves_nothing_through_the_ingress() {
    let Some((restate, _worker, client)) = durable("replay", WorkerOptions::default()).await else {
        return;
    };
    let http = reqwest_client();
    let resume = |body: Value| {
        let request = http
            .post(format!("{}/ReinAgent/r/resume", restate.ingress))
            .header("content-type", "application/json")
            .body(body.to_string());
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let deleted_b = |view: &rein_restate::wire::SessionView| {
        serde_json::to_string(&view.messages)
            .unwrap()
            .contains(r#"deleted \"/b\""#)
    };
    let first = client
        .invoke("r", InvokeRequest::text("delete /a"))
        .await
        .unwrap();
    let a = first.interrupts[0].clone();
    let unbound =
        json!({"answers": [{"interruptId": a.resume_id(), "response": {"approved": true}}]});
    let (status, body) = resume(unbound).await;
    assert_eq!(status, 409, "an approval naming no fingerprint: {body}");
    assert_eq!(client.session("r").await.unwrap().pending, vec![a.clone()]);
    let approve_a = json!({"answers": [{
        "interruptId": a.resume_id(),
        "fingerprint": a.fingerprint,
        "response": {"approved": true},
    }]});
    let (status, body) = resume(approve_a.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Deleted."), "{body}");

    let second = client
        .invoke("r", InvokeRequest::text("delete /b"))
        .await
        .unwrap();
    let b = second.interrupts[0].clone();
    assert_eq!(b.id, a.id, "the same handler on the same tool-use id");
    let (status, body) = resume(approve_a).await;
    assert_eq!(status, 400, "the first resume again: {body}");
    let forged = json!({"answers": [{
        "interruptId": b.resume_id(),
        "fingerprint": a.fingerprint,
        "response": {"approved": true},
    }]});
    let (status, body) = resume(forged).await;
    assert_eq!(status, 409, "another call's fingerprint: {body}");
    let view = client.session("r").await.unwrap();
    assert_eq!(view.pending, vec![b.clone()]);
    assert!(!deleted_b(&view), "/b was deleted without its approval");

    let done = client
        .resume(
            "r",
            ResumeRequest::new(vec![b.answer(json!({"approved": true}))]),
        )
        .await
        .unwrap();
    assert_eq!(done.text, "Deleted.");
    assert!(deleted_b(&client.session("r").await.unwrap()));
}

/// The agent in control after a handoff is part of the session: the next invocation, on
/// whichever worker, goes on with it (not with the agent the factory builds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_holds_across_invocations_of_a_durable_session() {
    let Some((_restate, _worker, client)) = durable("handoff", WorkerOptions::default()).await
    else {
        return;
    };
    let first = client
        .invoke("h", InvokeRequest::text("transfer"))
        .await
        .unwrap();
    assert_eq!(first.text, "Support: transfer");
    let next = client
        .invoke("h", InvokeRequest::text("say where is my parcel?"))
        .await
        .unwrap();
    assert_eq!(next.text, "Support: say where is my parcel?");
    assert_answered(&client.session("h").await.unwrap().messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_process_stops_the_run_with_a_valid_history() {
    let Some((_restate, _worker, client)) = durable(
        "cancel",
        WorkerOptions {
            tool_delay_ms: 20,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let invocation = client
        .start("long", InvokeRequest::text("steps 200"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(client.cancel("long").await.unwrap(), "a run was going");
    let report = tokio::time::timeout(Duration::from_secs(20), client.attach(&invocation))
        .await
        .expect("the run ends")
        .unwrap();
    assert_eq!(report.stop_reason, StopReason::Cancelled, "{report:?}");
    let view = client.session("long").await.unwrap();
    assert!(view.messages.len() > 2 && view.messages.len() < 400);
    assert_answered(&view.messages);
    assert!(!client.cancel("long").await.unwrap(), "nothing runs now");
    // The session goes on.
    let next = client
        .invoke("long", InvokeRequest::text("say hi"))
        .await
        .unwrap();
    assert_eq!(next.text, "You said: say hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injections_from_four_processes_each_consumed_or_rejected_once_in_order() {
    let Some((restate, _worker, client)) = durable(
        "inject",
        WorkerOptions {
            tool_delay_ms: 5,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let invocation = client
        .start("busy", InvokeRequest::text("steps 60"))
        .await
        .unwrap();
    // Wait for the run to be going (an injection before it is refused: NoActiveRun).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let children: Vec<_> = (0..4)
        .map(|p| {
            Command::new(WORKER)
                .args(["inject", &restate.ingress, "busy", &format!("q{p}"), "250"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<String> = children
        .into_iter()
        .map(|c| String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap())
        .collect();
    let report = client.attach(&invocation).await.unwrap();
    assert_eq!(report.stop_reason, StopReason::EndTurn);
    let view = client.session("busy").await.unwrap();
    assert_answered(&view.messages);
    let history = serde_json::to_string(&view.messages).unwrap();

    let mut accepted = BTreeMap::new();
    let mut refused = 0;
    for out in &outputs {
        for line in out.lines() {
            let mut parts = line.splitn(2, ' ');
            match (parts.next(), parts.next()) {
                (Some("refused"), Some(_)) => refused += 1,
                (Some(id), Some(text)) => {
                    accepted.insert(text.to_owned(), id.parse::<uuid::Uuid>().unwrap());
                }
                _ => panic!("sender said {line:?}"),
            }
        }
    }
    assert_eq!(accepted.len() + refused, 1_000);
    let mut consumed = 0;
    for (text, id) in &accepted {
        let status = client
            .injection("busy", rein_core::id::InjectionId(*id))
            .await
            .unwrap();
        let quoted = format!("\"{text}\"");
        let in_history = history.matches(&quoted).count();
        match status.status {
            InjectionStatus::Consumed => {
                consumed += 1;
                assert_eq!(in_history, 1, "{text} delivered once");
            }
            InjectionStatus::Rejected => {
                assert_eq!(in_history, 0, "{text} rejected, not delivered");
                assert_eq!(status.reason.as_deref(), Some("run ended"));
            }
            other => panic!("{text} left {other:?}"),
        }
    }
    assert!(consumed > 0, "some were delivered mid-run");
    // Per sender, what was delivered is in the order it was sent.
    for sender in ["q0", "q1", "q2", "q3"] {
        let positions: Vec<usize> = (0..250)
            .filter_map(|i| history.find(&format!("\"{sender}-{i}\"")))
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{sender} in order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_survives_a_restate_restart() {
    let Some((mut restate, _worker, client)) = durable(
        "restart",
        WorkerOptions {
            model_delay_ms: 30,
            tool_delay_ms: 30,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let invocation = client
        .start("survivor", InvokeRequest::text("steps 10"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    restate.restart().await;
    let report = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match client.attach(&invocation).await {
                Ok(report) => return report,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
    .expect("the run finishes after the restart");
    assert_eq!(report.text, "Finished 10 steps.");
    let steps: BTreeSet<String> = ledger_lines(&ledger).into_iter().map(|l| l.2).collect();
    assert_eq!(steps.len(), 10);
    assert_answered(&client.session("survivor").await.unwrap().messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_gracefully_on_sigterm_while_another_serves() {
    let Some(restate) = Restate::start("graceful").await else {
        return;
    };
    let port = free_port();
    let options = |register| WorkerOptions {
        port,
        reuse_port: true,
        register,
        tool_delay_ms: 50,
        ..Default::default()
    };
    // Two processes behind one deployment address.
    let mut first = Worker::start(&restate, options(true)).await;
    let _second = Worker::start(&restate, options(false)).await;
    let client = Client::new(&restate.ingress).unwrap();
    let runs: Vec<_> = (0..4)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let session = format!("g{i}");
                client
                    .invoke(&session, InvokeRequest::text("steps 5"))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let status = tokio::task::spawn_blocking(move || first.terminate())
        .await
        .unwrap();
    assert!(status.success(), "the worker exits cleanly: {status}");
    for run in runs {
        let report = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("every run finishes")
            .unwrap()
            .unwrap();
        assert_eq!(report.text, "Finished 5 steps.");
    }
}

/// Issue #37: a second `invoke` while a run goes is refused at once (409 `RunInProgress`)
/// instead of waiting silently in Restate's queue — unless it asks to queue, and then it runs
/// after the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_invoke_during_a_run_is_refused_unless_it_asks_to_queue() {
    let Some((restate, _worker, client)) = durable(
        "second",
        WorkerOptions {
            tool_delay_ms: 20,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let first = client
        .start("b", InvokeRequest::text("steps 20"))
        .await
        .unwrap();
    // The run goes once its first step is in the ledger.
    while ledger_lines(&ledger).is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e = client
        .invoke("b", InvokeRequest::text("say hi"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    assert!(e.to_string().contains("RunInProgress"), "{e}");
    let queued = client
        .start("b", InvokeRequest::text("say later").queued())
        .await
        .unwrap();
    assert_eq!(
        client.attach(&first).await.unwrap().text,
        "Finished 20 steps."
    );
    assert_eq!(
        client.attach(&queued).await.unwrap().text,
        "You said: say later"
    );
    assert_eq!(ledger_lines(&ledger).len(), 20);
    let view = client.session("b").await.unwrap();
    let history = serde_json::to_string(&view.messages).unwrap();
    assert!(!history.contains("say hi"), "the refused input ran");
    assert_answered(&view.messages);
    // Once the runs ended, an invoke runs at once.
    let next = client
        .invoke("b", InvokeRequest::text("say again"))
        .await
        .unwrap();
    assert_eq!(next.text, "You said: say again");
}

/// Restate's `idempotency-key` header: the same key twice is one effect for `invoke`, `resume`
/// and `inject` (the second request gets the first's answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_twice_is_one_invoke_resume_or_inject() {
    let Some((restate, _worker, client)) = durable("idempotent", WorkerOptions::default()).await
    else {
        return;
    };
    let ledger = restate.ledger();
    let http = reqwest_client();
    let post = |path: &str, key: &str, body: Value| {
        let request = http
            .post(format!("{}/{path}", restate.ingress))
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(body.to_string());
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
            assert_eq!(status, 200, "{body}");
            body
        }
    };

    let invoke = json!({"text": "steps 3"});
    let a = post("ReinAgent/k/invoke", "inv-1", invoke.clone()).await;
    let b = post("ReinAgent/k/invoke", "inv-1", invoke).await;
    assert_eq!(a, b);
    assert_eq!(ledger_lines(&ledger).len(), 3, "one run, not two");
    assert_eq!(client.session("k").await.unwrap().messages.len(), 8);

    let paused = client
        .invoke("d", InvokeRequest::text("delete /x"))
        .await
        .unwrap();
    let injected = json!({"message": "hello"});
    let a = post("ReinInbox/d/inject", "inj-1", injected.clone()).await;
    let b = post("ReinInbox/d/inject", "inj-1", injected).await;
    assert_eq!(a, b);
    let resume = json!({"answers": [paused.interrupts[0].answer(json!({"approved": true}))]});
    let a = post("ReinAgent/d/resume", "res-1", resume.clone()).await;
    // Without the key this would be a 409: nothing is pending any more.
    let b = post("ReinAgent/d/resume", "res-1", resume).await;
    assert_eq!(a, b);
    assert_eq!(a["text"], "Deleted.");
    let view = client.session("d").await.unwrap();
    let history = serde_json::to_string(&view.messages).unwrap();
    assert_eq!(history.matches("hello").count(), 1);
    assert_eq!(
        history.matches("deleted \\\"/x\\\"").count(),
        1,
        "{history}"
    );

    // The same through `Client`: its requests' idempotency keys go as the header.
    let before = ledger_lines(&ledger).len();
    let invoke = || InvokeRequest::text("steps 2").idempotency_key("client-inv");
    let a = client.invoke("k2", invoke()).await.unwrap();
    let b = client.invoke("k2", invoke()).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(ledger_lines(&ledger).len(), before + 2, "one run, not two");
    let paused = client
        .invoke("d2", InvokeRequest::text("delete /y"))
        .await
        .unwrap();
    let resume = || {
        ResumeRequest::new(vec![paused.interrupts[0].answer(json!({"approved": true}))])
            .idempotency_key("client-res")
    };
    let a = client.resume("d2", resume()).await.unwrap();
    let b = client.resume("d2", resume()).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(a.text, "Deleted.");
    let history = serde_json::to_string(&client.session("d2").await.unwrap().messages).unwrap();
    assert_eq!(
        history.matches("deleted \\\"/y\\\"").count(),
        1,
        "{history}"
    );
    // Without a key the second is refused: nothing is pending any more.
    let e = client
        .resume("d2", ResumeRequest::new(resume().answers))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
}

/// Issue #37: SIGTERM lets the run in flight finish on the worker (within its grace period, 5 s
/// for the demo worker) before the worker exits, as the guide says. No other worker serves:
/// a run cut off by the shutdown would be left unfinished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_run_in_flight_finish_before_the_worker_exits() {
    let Some((restate, mut worker, client)) = durable(
        "sigterm",
        WorkerOptions {
            tool_delay_ms: 50,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let invocation = client
        .start("term", InvokeRequest::text("steps 20"))
        .await
        .unwrap();
    while ledger_lines(&ledger).is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = tokio::task::spawn_blocking(move || worker.terminate())
        .await
        .unwrap();
    assert!(status.success(), "the worker exits cleanly: {status}");
    assert_eq!(
        ledger_lines(&ledger).len(),
        20,
        "every step ran before the worker exited"
    );
    // With no worker left, an invoke that did not finish can never complete; one that did may
    // show in Restate's tables a moment after its stream ended (seen as `ready` under load).
    let mut status = String::new();
    for _ in 0..100 {
        status = invocation_status(&restate, &invocation).await;
        if status == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status, "completed",
        "the invoke finished on the exiting worker"
    );
}

/// The session's calls of an inbox handler that Restate knows of (completed ones included).
async fn inbox_calls(restate: &Restate, session: &str, handler: &str) -> u64 {
    let query = format!(
        "SELECT count(*) AS n FROM sys_invocation WHERE target_service_name = 'ReinInbox' AND \
         target_service_key = '{session}' AND target_handler_name = '{handler}'"
    );
    let rows = admin_query(restate, &query).await;
    rows.first()
        .and_then(|row| row["n"].as_u64())
        .unwrap_or_else(|| panic!("no count in {rows:?}"))
}

/// The session's invocations that Restate knows of, of both objects, by handler.
async fn session_calls(restate: &Restate, session: &str) -> BTreeMap<String, u64> {
    let query = format!(
        "SELECT target_service_name || '/' || target_handler_name AS k, count(*) AS n FROM \
         sys_invocation WHERE target_service_key = '{session}' GROUP BY k"
    );
    admin_counts(restate, &query).await
}

/// The counts (`n`) by key (`k`) an SQL query of Restate's admin API answers.
async fn admin_counts(restate: &Restate, query: &str) -> BTreeMap<String, u64> {
    admin_map(restate, query, "k", "n")
        .await
        .into_iter()
        .map(|(k, n)| (k, n.as_u64().unwrap()))
        .collect()
}

/// Expected counts, by key.
fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

/// Issue #37 (a run's fixed cost): an invoke asks its own object whether a run goes — no call
/// to the inbox's `claim` — and a run tells the inbox nothing (the inbox asks the agent's
/// `current_run` when something is injected), so a run nobody injects into is two invocations:
/// `invoke` and the run (it was five, then four with the inbox's `open` and `close`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nobody_injects_into_is_two_invocations_and_calls_no_inbox() {
    let Some((restate, _worker, client)) = durable("fixed-cost", WorkerOptions::default()).await
    else {
        return;
    };
    let report = client
        .invoke("one", InvokeRequest::text("steps 1"))
        .await
        .unwrap();
    assert_eq!(report.text, "Finished 1 steps.");
    let calls = session_calls(&restate, "one").await;
    assert_eq!(
        calls,
        counts(&[("ReinAgent/invoke", 1), ("ReinAgent/run_input", 1)])
    );
    // Inside the run, what its state costs (issue #37): `runs` and the state's key list read
    // (a new session: no checkpoint to get, no tail found), `runs` written at the start and the
    // end, the tail's one chunk written with the input before the first model call, again with
    // the tool use before the tool and again with the result, the checkpoint and the report
    // saved, and the one chunk cleared.
    let query = "SELECT j.entry_type AS k, count(*) AS n FROM sys_journal j JOIN sys_invocation \
                 i ON j.id = i.id WHERE i.target_service_key = 'one' AND \
                 i.target_handler_name = 'run_input' AND j.entry_type LIKE '%State%' GROUP BY k";
    assert_eq!(
        admin_counts(&restate, query).await,
        counts(&[
            ("Command: GetEagerState", 1),
            ("Command: GetEagerStateKeys", 1),
            ("Command: SetState", 7),
            ("Command: ClearState", 1),
        ])
    );
}

/// SPEC §5 across processes, with an inbox that is not told when runs end: what was queued for
/// a run that ended (cancelled here, before it took it) is rejected (`run ended`) and never
/// reaches the session's next run, which gets only its own injections; what was queued while
/// the session was paused waits through a resume that failed (an unknown interrupt) and an
/// invoke refused (interrupts pending), and reaches the resume that runs, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_of_an_ended_run_is_rejected_and_a_paused_ones_waits_for_its_resume() {
    let Some((restate, _worker, client)) = durable(
        "lazy-inbox",
        WorkerOptions {
            tool_delay_ms: 600,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let run = client
        .start("c", InvokeRequest::text("steps 50"))
        .await
        .unwrap();
    wait_until("the first tool call of the run", async || {
        ledger_lines(&ledger).iter().any(|(_, s, _)| s == "c")
    })
    .await;
    // Cancelled, the run stops at its next turn boundary, once its tool (600 ms) is done: what
    // is injected meanwhile stays queued there.
    assert!(client.cancel("c").await.unwrap());
    let left = client
        .inject("c", InjectRequest::text("left behind"))
        .await
        .unwrap();
    let cancelled = answered(client.attach(&run)).await.unwrap();
    assert_eq!(
        cancelled.stop_reason,
        StopReason::Cancelled,
        "{cancelled:?}"
    );
    let status = client.injection("c", left.id).await.unwrap();
    assert_eq!(
        (status.status, status.reason.as_deref()),
        (InjectionStatus::Rejected, Some("run ended"))
    );
    let e = client
        .inject("c", InjectRequest::text("no run"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");

    let lines = ledger_lines(&ledger).len();
    let next = client
        .start("c", InvokeRequest::text("steps 3"))
        .await
        .unwrap();
    wait_until("a tool call of the next run", async || {
        ledger_lines(&ledger).len() > lines
    })
    .await;
    let own = client
        .inject("c", InjectRequest::text("for the next run"))
        .await
        .unwrap();
    let report = answered(client.attach(&next)).await.unwrap();
    assert_eq!(report.text, "Finished 3 steps. seen: for the next run");
    let ids: Vec<_> = report.injections.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![own.id]);
    let status = client.injection("c", left.id).await.unwrap();
    assert_eq!(status.status, InjectionStatus::Rejected);
    // Quoted: the injected message itself (the model's answer quotes it too).
    let history = serde_json::to_string(&client.session("c").await.unwrap().messages).unwrap();
    assert_eq!(history.matches("\"left behind\"").count(), 0);
    assert_eq!(history.matches("\"for the next run\"").count(), 1);

    // Paused: the queue waits through runs that end paused without running.
    let paused = client
        .invoke("p", InvokeRequest::text("delete /tmp/p"))
        .await
        .unwrap();
    assert_eq!(paused.stop_reason, StopReason::Interrupt);
    let note = client
        .inject("p", InjectRequest::text("while paused"))
        .await
        .unwrap();
    let unknown = ResumeRequest::new(vec![InterruptResponse::new("nope", json!(true))]);
    assert_eq!(
        client.resume("p", unknown).await.unwrap_err().status(),
        Some(400)
    );
    let e = client
        .invoke("p", InvokeRequest::text("hello"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    assert_eq!(
        client.injection("p", note.id).await.unwrap().status,
        InjectionStatus::Queued
    );
    let approve = ResumeRequest::new(vec![paused.interrupts[0].answer(json!({"approved": true}))]);
    let done = client.resume("p", approve).await.unwrap();
    assert_eq!(done.text, "Deleted.");
    let ids: Vec<_> = done.injections.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![note.id]);
    assert_eq!(
        client.injection("p", note.id).await.unwrap().status,
        InjectionStatus::Consumed
    );
}

/// One run at a time per session: an invoke sent while a run goes is refused (409
/// `RunInProgress`) and nothing of it runs (the ledger holds the running run's steps only).
/// Two invokes sent together never run at once either: one is refused — at once, or when its
/// own run would start behind the other's (both looked before either started) — or, when the
/// second arrived after the first run ended, both run one after the other. Which of these a
/// pair meets depends on when its requests arrive, so the pair checks only what holds in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_invokes_at_once_one_runs_and_the_other_is_refused() {
    let Some((restate, _worker, client)) = durable(
        "two-at-once",
        WorkerOptions {
            tool_delay_ms: 30,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let mut ran_before = 0;
    for round in 0..3 {
        // Sent while the first run goes (its first step done): refused at once.
        let session = format!("while-{round}");
        let first = tokio::spawn({
            let (client, session) = (client.clone(), session.clone());
            async move {
                client
                    .invoke(&session, InvokeRequest::text("steps 5"))
                    .await
            }
        });
        // A guard against a hang, not a timing: the run's first step reaches the ledger.
        tokio::time::timeout(Duration::from_secs(60), async {
            while ledger_lines(&ledger).len() == ran_before {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the first run starts");
        let refused = client
            .invoke(&session, InvokeRequest::text("steps 6"))
            .await
            .unwrap_err();
        assert_eq!(refused.status(), Some(409), "{refused}");
        assert!(refused.to_string().contains("RunInProgress"), "{refused}");
        let ran = first.await.unwrap().unwrap();
        assert_eq!(ran.text, "Finished 5 steps.");
        let ran_now = ledger_lines(&ledger).len();
        assert_eq!(ran_now - ran_before, 5, "the refused input ran");
        ran_before = ran_now;

        // Sent together.
        let session = format!("together-{round}");
        let (a, b) = tokio::join!(
            client.invoke(&session, InvokeRequest::text("steps 2")),
            client.invoke(&session, InvokeRequest::text("steps 3")),
        );
        let ran_now = ledger_lines(&ledger).len();
        match (a, b) {
            (Ok(ran), Err(refused)) | (Err(refused), Ok(ran)) => {
                assert_eq!(refused.status(), Some(409), "{refused}");
                assert!(refused.to_string().contains("RunInProgress"), "{refused}");
                let steps = if ran.text == "Finished 2 steps." {
                    2
                } else {
                    3
                };
                assert_eq!(ran.text, format!("Finished {steps} steps."));
                assert_eq!(ran_now - ran_before, steps, "the refused input ran");
            }
            (Ok(a), Ok(b)) => {
                // One after the other: the session's history holds both runs whole.
                assert_eq!(
                    (a.text.as_str(), b.text.as_str()),
                    ("Finished 2 steps.", "Finished 3 steps.")
                );
                assert_eq!(ran_now - ran_before, 5);
                let view = client.session(&session).await.unwrap();
                assert_answered(&view.messages);
            }
            other => panic!("an invoke failed otherwise than refused: {other:?}"),
        }
        ran_before = ran_now;
        // The session takes the next invoke.
        let next = client
            .invoke(&session, InvokeRequest::text("say again"))
            .await
            .unwrap();
        assert_eq!(next.text, "You said: say again");
    }
}

/// Issue #37 (a step at the engine's speed): a turn boundary with nothing queued makes no
/// inbox call — the inbox signals the run when it has something — and a message injected
/// during a run still reaches it, at a later boundary, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_boundary_with_nothing_queued_calls_no_inbox() {
    let Some((restate, _worker, client)) = durable(
        "quiet-inbox",
        WorkerOptions {
            tool_delay_ms: 20,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let quiet = client
        .invoke("quiet", InvokeRequest::text("steps 5"))
        .await
        .unwrap();
    assert_eq!(quiet.text, "Finished 5 steps.");
    assert_eq!(inbox_calls(&restate, "quiet", "take").await, 0);

    let run = client
        .start("busy", InvokeRequest::text("steps 30"))
        .await
        .unwrap();
    wait_until("a ledger line of the busy run", async || {
        ledger_lines(&ledger).iter().any(|(_, s, _)| s == "busy")
    })
    .await;
    let injected = client
        .inject("busy", InjectRequest::text("hello"))
        .await
        .unwrap();
    let report = answered(client.attach(&run)).await.unwrap();
    assert_eq!(report.text, "Finished 30 steps. seen: hello", "{report:?}");
    assert_eq!(
        client.injection("busy", injected.id).await.unwrap().status,
        InjectionStatus::Consumed
    );
    let takes = inbox_calls(&restate, "busy", "take").await;
    assert!((1..30).contains(&takes), "{takes} takes");
}

/// Once a run's report is back, `status` gives every injection the outcome the report lists
/// (never `delivered`), read at once: the run reports outcomes to the inbox one-way as it settles
/// them, then — only when it reported any — makes one call to the inbox (a barrier) before it
/// returns. The messages are injected while the run's one tool call goes, so they are taken at
/// its last turn boundary and their outcomes reported just before the run ends; the last one is
/// read first. (With the one-way reports alone, its `status` said `delivered` in the first
/// round of each of four tries.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_the_runs_report_is_back_status_agrees_with_it() {
    let Some((restate, _worker, client)) = durable(
        "agree",
        WorkerOptions {
            tool_delay_ms: 500,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let (mut consumed, mut rejected) = (0, 0);
    for round in 0..5 {
        // A `screened-*` session rejects injected `spam`.
        let session = format!("screened-{round}");
        let run = client
            .start(&session, InvokeRequest::text("steps 1"))
            .await
            .unwrap();
        let mut injected = Vec::new();
        for n in 0..12 {
            let text = if n % 2 == 0 { "note" } else { "spam" };
            let text = format!("{text}-{n}");
            let accepted = answered(async {
                loop {
                    match client
                        .inject(&session, InjectRequest::text(text.as_str()))
                        .await
                    {
                        Ok(accepted) => break Some(accepted.id),
                        // The run has not marked itself going yet (nothing accepted so far)...
                        Err(e) if e.status() == Some(409) && injected.is_empty() => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        // ... or has ended (a slow machine).
                        Err(e) if e.status() == Some(409) => break None,
                        Err(e) => panic!("{session}: {e}"),
                    }
                }
            })
            .await;
            let Some(id) = accepted else { break };
            injected.push(id);
        }
        let report = answered(client.attach(&run)).await.unwrap();
        // The last reported first: the outcome most likely still on its way.
        for id in injected.iter().rev() {
            let status = client.injection(&session, *id).await.unwrap();
            match report.injections.iter().find(|r| r.id == *id) {
                Some(reported) => assert_eq!(&status, reported, "{session}"),
                // Queued after the run's last turn boundary: rejected from the run's end.
                None => assert_eq!(
                    (status.status, status.reason.as_deref()),
                    (InjectionStatus::Rejected, Some("run ended")),
                    "{session}"
                ),
            }
        }
        for reported in &report.injections {
            match reported.status {
                InjectionStatus::Consumed => consumed += 1,
                InjectionStatus::Rejected => {
                    let reason = reported.reason.as_deref().unwrap_or_default();
                    assert!(reason.contains("no spam"), "{session}: {reason}");
                    rejected += 1;
                }
                other => panic!("{session}: reported {other:?}"),
            }
        }
        // One barrier for a run that reported outcomes, none for one that reported nothing.
        let barriers = inbox_calls(&restate, &session, "reported").await;
        assert_eq!(
            barriers,
            u64::from(!report.injections.is_empty()),
            "{session}"
        );
    }
    assert!(
        consumed > 0 && rejected > 0,
        "{consumed} consumed, {rejected} rejected"
    );
}

/// SPEC §13 on Restate: a durable agent with an output type gives its typed answer (in the
/// run's report); the refused attempt and its retry are journaled like any model call — the
/// worker running the call that follows the refusal is killed and another takes the run over:
/// its replay does not ask the model for the refused attempt again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_answer_is_journaled_and_a_replay_does_not_ask_again() {
    let Some(restate) = Restate::start("typed").await else {
        return;
    };
    let ledger = restate.ledger();
    let port = free_port();
    let log = ledger.with_extension("typed.log");
    let options = |register| WorkerOptions {
        port,
        reuse_port: true,
        register,
        model_delay_ms: 1500,
        ledger: Some(&ledger),
        log: Some(&log),
        ..Default::default()
    };
    let mut first = Worker::start(&restate, options(true)).await;
    let client = Client::new(&restate.ingress).unwrap();
    let invocation = client
        .start("typed-1", InvokeRequest::text("invoice"))
        .await
        .unwrap();
    let attempts = |n: &str| {
        ledger_lines(&ledger)
            .iter()
            .filter(|l| l.1 == "model" && l.2 == format!("invoice-attempt-{n}"))
            .count()
    };
    // The refused answer is in the journal once the retry's call starts.
    wait_until("the retry's model call", async || attempts("2") >= 1).await;
    first.kill();
    let _second = Worker::start(&restate, options(false)).await;
    let report = tokio::time::timeout(Duration::from_secs(60), client.attach(&invocation))
        .await
        .expect("the run finishes on the second worker")
        .unwrap();
    assert_eq!(report.stop_reason, StopReason::EndTurn, "{report:?}");
    assert_eq!(report.output, Some(json!({"total_cents": 1200})));
    let checks: Vec<&Value> = report
        .decisions
        .iter()
        .filter(|d| d["handler"] == "rein:output")
        .map(|d| &d["action"])
        .collect();
    assert_eq!(checks, [&json!("guide"), &json!("proceed")], "{report:?}");
    assert_eq!(attempts("1"), 1, "the refused attempt was not asked again");
    // The retry's call, cut short by the kill, is asked again by the second worker (it was
    // not journaled yet); it may have finished first on a slow machine.
    let retries = attempts("2");
    eprintln!("model calls for the retry: {retries}");
    assert!((1..=2).contains(&retries), "{retries}");
    let session = client.session("typed-1").await.unwrap();
    assert_eq!(
        session.messages.last().unwrap().1.text(),
        r#"{"total_cents": 1200}"#
    );
}
