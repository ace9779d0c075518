//! History that is never lost (issue #37): a run killed through Restate's admin API after some
//! tool calls completed leaves every completed call and its result in the session. SKIPPED
//! without `REIN_RESTATE_SERVER`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use rein_core::{ContentBlock, Message, Role, id::MessageId, message::ToolUse, stream::StopReason};
use rein_restate::{Client, wire::InvokeRequest};

/// The tool uses and the ids of their results, in the history.
fn calls(messages: &[(MessageId, Message)]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut uses = BTreeSet::new();
    let mut results = BTreeSet::new();
    for (_, m) in messages {
        for block in &m.content {
            match block {
                ContentBlock::ToolUse(u) => {
                    uses.insert(u.tool_use_id.clone());
                }
                ContentBlock::ToolResult(r) if r.text().contains("recorded") => {
                    results.insert(r.tool_use_id.clone());
                }
                ContentBlock::ToolResult(r) => {
                    results.insert(format!("{} ({})", r.tool_use_id, r.text()));
                }
                _ => {}
            }
        }
    }
    (uses, results)
}

/// Kills `session`'s run through Restate's admin API and waits until it has ended.
async fn kill_the_run(restate: &Restate, session: &str) {
    let run = running_run(restate, session).await.expect("the run goes");
    kill_invocation(restate, &run).await;
    wait_until("the run ended", async || {
        running_run(restate, session).await.is_none()
    })
    .await;
}

/// Every tool use answered; every ledger line's call answered with its result — but the last
/// one's, whose effect may have happened before its step was journaled when the kill came
/// (Restate then never learns of it: it is answered as interrupted).
fn assert_history_holds(messages: &[(MessageId, Message)], ledger: &[(u128, String, String)]) {
    let (uses, results) = calls(messages);
    for (_, _, id) in &ledger[..ledger.len().saturating_sub(1)] {
        assert!(
            results.contains(id),
            "ledger call {id} has its result: {results:?}"
        );
    }
    for id in &uses {
        assert!(
            results.contains(id) || results.iter().any(|r| r.starts_with(&format!("{id} ("))),
            "tool use {id} answered: {results:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_keeps_every_completed_tool_call() {
    let Some((restate, _worker, client)) = durable(
        "killed",
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
    client
        .start("k", InvokeRequest::text("steps 200"))
        .await
        .unwrap();
    wait_until("3 ledger lines", async || ledger_lines(&ledger).len() >= 3).await;
    kill_the_run(&restate, "k").await;
    let done = ledger_lines(&ledger);
    assert!(done.len() < 200, "killed before its end");

    // The session holds every call the ledger saw, with its result; the one in flight, if
    // any, is closed as interrupted.
    let view = client.session("k").await.unwrap();
    assert_history_holds(&view.messages, &done);

    // The next run starts from that history and keeps it.
    let next = answered(client.invoke("k", InvokeRequest::text("say hi")))
        .await
        .unwrap();
    assert_eq!(next.text, "You said: say hi");
    let view = client.session("k").await.unwrap();
    assert_history_holds(&view.messages, &done);
    assert_eq!(ledger_lines(&ledger).len(), done.len(), "nothing ran again");
}

/// A run killed during its first model call keeps its input (written before that call), as an
/// agent cancelled in process does; the next run starts after it. Nothing else of the run is
/// there: its model call never ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_in_its_first_model_call_keeps_its_input() {
    let Some((restate, _worker, client)) = durable(
        "killed-input",
        WorkerOptions {
            model_delay_ms: 60_000,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    client
        .start("i", InvokeRequest::text("say first"))
        .await
        .unwrap();
    wait_until("the input is on record", async || {
        client
            .session("i")
            .await
            .is_ok_and(|v| v.messages.iter().any(|(_, m)| m.text() == "say first"))
    })
    .await;
    kill_the_run(&restate, "i").await;
    let view = client.session("i").await.unwrap();
    let texts: Vec<(Role, String)> = view
        .messages
        .iter()
        .map(|(_, m)| (m.role, m.text()))
        .collect();
    assert_eq!(texts, vec![(Role::User, "say first".to_owned())]);
}

/// A run on a deployment that is gone (its only worker killed; a new worker is another
/// deployment, and a run stays on the deployment it started on): `abandon` ends it, the session
/// keeps what it did and says so, and takes new invokes again (the `invoke` stuck with the run
/// held its claim on the session: every invoke was a 409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandon_ends_a_run_stuck_on_a_dead_deployment_and_keeps_its_history() {
    let Some((restate, mut a, client)) = durable(
        "abandon",
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
    let e = client.abandon("z").await.unwrap_err();
    assert_eq!(e.status(), Some(409), "no run: {e}");
    client
        .start("z", InvokeRequest::text("steps 200"))
        .await
        .unwrap();
    wait_until("3 ledger lines", async || ledger_lines(&ledger).len() >= 3).await;
    a.kill();
    let done = ledger_lines(&ledger);
    let _b = Worker::start(
        &restate,
        WorkerOptions {
            ledger: Some(&ledger),
            ..Default::default()
        },
    )
    .await;
    // An invoke meanwhile finds the session held by the stuck run (it may wait behind the
    // stuck run's own inbox call first).
    let early = client
        .start("z", InvokeRequest::text("say hi"))
        .await
        .unwrap();

    let report = answered(client.abandon("z")).await.unwrap();
    let e = answered(client.attach(&early)).await.unwrap_err();
    assert_eq!(e.status(), Some(409), "the stuck run held the session: {e}");
    assert_eq!(report.stop_reason, StopReason::Cancelled, "{report:?}");
    assert!(
        report
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("abandoned"),
        "{report:?}"
    );
    wait_until("the run ended", async || {
        running_run(&restate, "z").await.is_none()
    })
    .await;
    let view = client.session("z").await.unwrap();
    assert_history_holds(&view.messages, &done);
    assert_eq!(view.last_run.unwrap().error, report.error);

    let next = answered(client.invoke("z", InvokeRequest::text("say hi")))
        .await
        .unwrap();
    assert_eq!(next.text, "You said: say hi");
    assert_history_holds(&client.session("z").await.unwrap().messages, &done);
    assert_eq!(ledger_lines(&ledger).len(), done.len(), "nothing ran again");
}

/// A deploy that changes the agent under a run in flight (one more intervention): Restate
/// replays the run on the new code, which takes another path (RT0016). The worker logs it
/// with the session and the invocation; `abandon` ends the run and keeps its finished steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_mismatch_after_a_deploy_is_logged_and_the_run_can_be_abandoned() {
    let Some(restate) = Restate::start("mismatch").await else {
        return;
    };
    let ledger = restate.ledger();
    let log = restate.dir.join("worker-2.log");
    let port = free_port();
    let mut first = Worker::start(
        &restate,
        WorkerOptions {
            port,
            tool_delay_ms: 30,
            ledger: Some(&ledger),
            ..Default::default()
        },
    )
    .await;
    let client = Client::new(&restate.ingress).unwrap();
    client
        .start("m", InvokeRequest::text("steps 200"))
        .await
        .unwrap();
    wait_until("3 ledger lines", async || ledger_lines(&ledger).len() >= 3).await;
    let run = running_run(&restate, "m").await.expect("the run goes");
    first.kill();
    let done = ledger_lines(&ledger);
    // Revision 2 at the same address: Restate replays the run there.
    let _second = Worker::start(
        &restate,
        WorkerOptions {
            port,
            ledger: Some(&ledger),
            revision: 2,
            log: Some(&log),
            ..Default::default()
        },
    )
    .await;
    wait_until("the mismatch in the worker's log", async || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("journal mismatch")
    })
    .await;
    let logged = std::fs::read_to_string(&log).unwrap();
    let line = logged
        .lines()
        .find(|l| l.contains("journal mismatch"))
        .unwrap();
    assert!(line.contains("session=\"m\""), "{line}");
    assert!(line.contains(&run), "the invocation {run}: {line}");

    let report = answered(client.abandon("m")).await.unwrap();
    assert!(report.error.unwrap().contains("abandoned"));
    let view = client.session("m").await.unwrap();
    assert_history_holds(&view.messages, &done);
    let next = answered(client.invoke("m", InvokeRequest::text("say hi")))
        .await
        .unwrap();
    assert_eq!(next.text, "You said: say hi");
}

/// Honest cancel: cancels at random points of runs calling a ledger tool; each run stops
/// cancelled, and its history holds exactly the calls the ledger saw, each with its result (a
/// tool whose effect happened is never reported cancelled: the run stops at its next turn
/// boundary, once its tools have finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_at_any_point_keeps_the_result_of_every_tool_that_ran() {
    let Some((restate, _worker, client)) = durable(
        "honest-cancel",
        WorkerOptions {
            tool_delay_ms: 25,
            model_delay_ms: 5,
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let ledger = restate.ledger();
    let mut seed = std::process::id() as u64;
    let mut runs = Vec::new();
    for i in 0..6 {
        let session = format!("c{i}");
        let invocation = client
            .start(&session, InvokeRequest::text("steps 200"))
            .await
            .unwrap();
        runs.push((session, invocation));
    }
    for (session, _) in &runs {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let wait = 30 + (seed >> 33) % 400;
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        assert!(
            answered(client.cancel(session)).await.unwrap(),
            "{session} runs"
        );
    }
    for (session, invocation) in &runs {
        let report = answered(client.attach(invocation)).await.unwrap();
        assert_eq!(report.stop_reason, StopReason::Cancelled, "{report:?}");
        let ran: BTreeSet<String> = ledger_lines(&ledger)
            .into_iter()
            .filter(|(_, s, _)| s == session)
            .map(|(_, _, id)| id)
            .collect();
        let view = client.session(session).await.unwrap();
        let (uses, results) = calls(&view.messages);
        assert_eq!(results, ran, "{session}: results are the ledger's calls");
        assert_eq!(uses, ran, "{session}: every tool use ran and was answered");
    }
}

/// The session's state as Restate's admin API reports it: each key with its value as text.
async fn state_of(restate: &Restate, session: &str) -> BTreeMap<String, String> {
    let query = format!(
        "SELECT key, value_utf8 FROM state WHERE service_name = 'ReinAgent' AND \
         service_key = '{session}'"
    );
    admin_map(restate, &query, "key", "value_utf8")
        .await
        .into_iter()
        .map(|(key, value)| (key, value.as_str().unwrap().to_owned()))
        .collect()
}

/// An earlier release's tail — a record `tail` naming the run, then one key per message,
/// `tail/0`, … — left by a run that never ended (and no `runs` record, as before session 21):
/// the next run folds it into the session (its open tool use answered as interrupted) and
/// clears it; its own tail is cleared at its end too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_releases_tail_joins_the_history_of_the_next_run() {
    let Some((restate, _worker, client)) = durable("legacy-tail", WorkerOptions::default()).await
    else {
        return;
    };
    let first = client
        .invoke("old", InvokeRequest::text("say hi"))
        .await
        .unwrap();
    assert_eq!(first.text, "You said: say hi");
    let mut state = state_of(&restate, "old").await;
    assert!(
        state.keys().all(|k| !k.starts_with("tail")),
        "the run's end cleared its tail: {state:?}"
    );
    state.remove("runs");
    let tool_use = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
            "legacy-1",
            "ledger",
            serde_json::json!({}),
        )))],
    };
    state.insert("tail".into(), r#"{"run": "inv_legacy"}"#.into());
    state.insert(
        "tail/0".into(),
        serde_json::json!({"added": {"index": 2, "message": tool_use}}).to_string(),
    );
    let new_state: serde_json::Map<String, serde_json::Value> = state
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::json!(v.as_bytes())))
        .collect();
    let response = reqwest_client()
        .post(format!("{}/services/ReinAgent/state", restate.admin))
        .header("content-type", "application/json")
        .body(serde_json::json!({"object_key": "old", "new_state": new_state}).to_string())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{response:?}");
    wait_until("the state replaced", async || {
        state_of(&restate, "old").await.contains_key("tail/0")
    })
    .await;

    let next = answered(client.invoke("old", InvokeRequest::text("steps 1")))
        .await
        .unwrap();
    assert_eq!(next.text, "Finished 1 steps.");
    let view = client.session("old").await.unwrap();
    let (uses, results) = calls(&view.messages);
    assert!(uses.contains("legacy-1"), "{uses:?}");
    assert!(
        results.contains("legacy-1 (Tool was interrupted.)"),
        "{results:?}"
    );
    assert_eq!(uses.len(), 2, "the legacy call and the new run's: {uses:?}");
    let state = state_of(&restate, "old").await;
    assert!(
        state.keys().all(|k| !k.starts_with("tail")),
        "both tails cleared: {state:?}"
    );
}
