//! Durable sessions as release 0.1 stored them in Restate (`tests/fixtures/release-0.1`, README
//! there): the `ReinAgent` and `ReinInbox` objects' state, key by key, byte for byte. Each is
//! put back through Restate's admin API into a server of the test's, and the session goes on
//! through the ingress: it reads back as written, and a paused one resumes to completion with
//! the interrupt ids the writing run handed out — the paused tool runs once, nothing runs
//! again, what was injected during the pause is delivered once, the history stays valid.
//! SKIPPED without `REIN_RESTATE_SERVER` (`.ci/peers-restate.sh`); a failure under `CI`.
//!
//! The sessions are rein-sessions' release scenarios (shared source), but for the one that
//! parks an injected message through the agent's own interceptor, which a durable session
//! does not have.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
// rein-sessions' scenarios, of which this binary uses all but three helpers.
#[allow(dead_code)]
#[path = "../../../rein-sessions/tests/it/common/scenarios.rs"]
mod scenarios;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Restate, reqwest_client};
use rein_core::{
    Message, id::MessageId, interrupt::Interrupt, state::InvocationState, stream::StopReason,
};
use rein_restate::{
    Client,
    wire::{InjectRequest, InjectionStatus, InvokeRequest, ResumeRequest, RunReport},
};
use scenarios::{Phase, Proc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The objects whose state a session is.
const OBJECTS: [&str; 2] = ["ReinAgent", "ReinInbox"];

/// The text injected into `before_tool_call`'s paused run (it waits in the inbox).
const INJECTED: &str = "and the logs";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/release-0.1")
}

/// The scenarios a durable session can hold.
fn scenarios() -> impl Iterator<Item = &'static str> {
    scenarios::SCENARIOS
        .iter()
        .copied()
        .filter(|n| *n != "parked_injection")
}

/// One session as the writing run left it.
#[derive(Debug, Serialize, Deserialize)]
struct Fixture {
    /// Object → state key → the value's bytes (all UTF-8 JSON, so kept as text).
    state: BTreeMap<String, BTreeMap<String, String>>,
    /// The session as the ingress showed it then.
    messages: Vec<(MessageId, Message)>,
    /// The interrupts handed out.
    interrupts: Vec<Interrupt>,
    /// The last run's report.
    report: RunReport,
    /// What the writing run's tools did.
    tool_log: Vec<String>,
}

/// A Restate server of the test's with an in-process worker serving the scenarios' agents
/// (`Phase` for every session; a session key is `<scenario>` or `<scenario>.<label>`).
struct Durable {
    restate: Restate,
    client: Client,
    procs: Arc<Mutex<HashMap<String, Proc>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Durable {
    async fn start(test: &str, phase: Phase) -> Option<Self> {
        let Some(restate) = Restate::start(test).await else {
            assert!(
                std::env::var_os("CI").is_none(),
                "REIN_RESTATE_SERVER is unset in CI: .ci/peers-restate.sh must install Restate"
            );
            return None;
        };
        let procs: Arc<Mutex<HashMap<String, Proc>>> = Arc::default();
        let shared = procs.clone();
        let worker = rein_restate::Worker::new(move |key: &str| {
            let name = key.split('.').next().unwrap_or_default();
            let p = shared
                .lock()
                .unwrap()
                .entry(key.to_owned())
                .or_default()
                .clone();
            Ok(scenarios::builder(name, phase, &p))
        })
        // Anyone on loopback may call; the scenarios' callers send `user` in their state.
        .authenticate(|_| Ok(InvocationState::new()))
        .caller_state_keys(["user"]);
        let stop = common::serve_in_process(&restate, worker).await;
        let client = Client::new(&restate.ingress).unwrap();
        Some(Self {
            restate,
            client,
            procs,
            stop: Some(stop),
        })
    }

    fn log(&self, key: &str) -> Vec<String> {
        self.procs
            .lock()
            .unwrap()
            .get(key)
            .map(Proc::log)
            .unwrap_or_default()
    }

    /// POSTs `body` to the admin API's `path`; the response's body.
    async fn admin(&self, path: &str, body: Value) -> String {
        let response = reqwest_client()
            .post(format!("{}{path}", self.restate.admin))
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let ok = response.status().is_success();
        let text = response.text().await.unwrap();
        assert!(ok, "{path}: {text}");
        text
    }

    /// The state of `object` for `key`: state key → (value as text, its length in bytes).
    async fn state(&self, object: &str, key: &str) -> BTreeMap<String, (String, u64)> {
        let query = format!(
            "SELECT key, value_utf8, value_length FROM state \
             WHERE service_name = '{object}' AND service_key = '{key}'"
        );
        let body = self.admin("/query", json!({"query": query})).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["key"].as_str().unwrap().to_owned(),
                    (
                        r["value_utf8"].as_str().unwrap().to_owned(),
                        r["value_length"].as_u64().unwrap(),
                    ),
                )
            })
            .collect()
    }

    /// Replaces the state of `object` for `key` through the admin API, and waits until it
    /// holds (Restate applies it asynchronously).
    async fn set_state(&self, object: &str, key: &str, state: &BTreeMap<String, String>) {
        let new_state: BTreeMap<&str, &[u8]> = state
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes()))
            .collect();
        let path = format!("/services/{object}/state");
        self.admin(&path, json!({"object_key": key, "new_state": new_state}))
            .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let held: BTreeMap<String, String> = self
                .state(object, key)
                .await
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect();
            if held == *state {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the state of {object}/{key} was not set"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The scenario's answer as a caller sends it through the ingress: an approval in its one wire
/// shape (issue #37: the in-process `"yes"` is `true` there, a string is a 400); a tool's own
/// question takes any JSON.
fn wire_answer(interrupt: &rein_core::interrupt::Interrupt, answer: &Value) -> Value {
    match answer {
        Value::String(s) if interrupt.takes_an_approval() && s == "yes" => Value::Bool(true),
        _ => answer.clone(),
    }
}

fn fixture(name: &str) -> Fixture {
    let path = fixtures().join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restate_sessions_of_release_0_1_load_and_resume() {
    let Some(durable) = Durable::start("release", Phase::Resume).await else {
        return;
    };
    let client = &durable.client;
    for name in scenarios() {
        let written = fixture(name);
        for resume in scenarios::resumes(name) {
            let key = format!("{name}.{}", resume.label);
            let what = format!("restate {key}");
            for object in OBJECTS {
                if let Some(state) = written.state.get(object) {
                    durable.set_state(object, &key, state).await;
                }
            }

            let view = client.session(&key).await.unwrap();
            assert_eq!(view.messages, written.messages, "{what}: history and ids");
            assert_eq!(view.pending, written.interrupts, "{what}");
            assert_eq!(view.last_run.as_ref(), Some(&written.report), "{what}");

            let report = match &resume.answer {
                Some(answer) => {
                    // The interrupts as release 0.1 handed them out (no nonce: their resume
                    // id is their id), answered through the safe API with their fingerprint.
                    let answers = written
                        .interrupts
                        .iter()
                        .map(|i| i.answer(wire_answer(i, answer)))
                        .collect();
                    client.resume(&key, ResumeRequest::new(answers)).await
                }
                None => client.invoke(&key, InvokeRequest::text(resume.next)).await,
            }
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                report.stop_reason,
                StopReason::EndTurn,
                "{what}: {report:?}"
            );
            assert_eq!(report.text, resume.text, "{what}");
            assert_eq!(report.error, None, "{what}");
            assert_eq!(
                durable.log(&key),
                resume.log,
                "{what}: each paused tool ran once"
            );

            let view = client.session(&key).await.unwrap();
            assert!(view.pending.is_empty(), "{what}");
            let mut resume = resume.clone();
            if name == "before_tool_call" {
                // Queued in the inbox while the run waited: delivered at the resume.
                resume.delivered = &[INJECTED];
                assert_eq!(report.injections.len(), 1, "{what}: {report:?}");
                assert_eq!(report.injections[0].status, InjectionStatus::Consumed);
            }
            let messages: Vec<Message> = view.messages.into_iter().map(|(_, m)| m).collect();
            scenarios::assert_resumed_history(&messages, &resume, &what);
        }
    }
}

/// Writes the fixtures with this release's code into `REIN_WRITE_FIXTURES` (a new directory):
/// `REIN_WRITE_FIXTURES=/tmp/release-x REIN_RESTATE_SERVER=... cargo test -p rein-restate
/// --test it -- --ignored release_fixtures::write_release_fixtures`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the fixtures; run by hand with the release that writes them"]
async fn write_release_fixtures() {
    let dir = PathBuf::from(std::env::var("REIN_WRITE_FIXTURES").expect("REIN_WRITE_FIXTURES"));
    assert!(
        !dir.exists(),
        "{} exists: give a new directory",
        dir.display()
    );
    std::fs::create_dir_all(&dir).unwrap();
    let durable = Durable::start("write-release", Phase::Write)
        .await
        .expect("REIN_RESTATE_SERVER");
    let client = &durable.client;
    for name in scenarios() {
        let mut last = None;
        for (text, state) in scenarios::input_texts(name) {
            let mut request = InvokeRequest::text(text);
            if let Some(state) = state {
                request = request.with_state(state);
            }
            last = Some(client.invoke(name, request).await.unwrap());
        }
        let report = last.unwrap();
        assert_eq!(
            report.stop_reason == StopReason::Interrupt,
            scenarios::paused(name),
            "{name}: {report:?}"
        );
        if name == "before_tool_call" {
            let queued = client
                .inject(name, InjectRequest::text(INJECTED).idempotency_key("k1"))
                .await
                .unwrap();
            assert_eq!(queued.status, InjectionStatus::Queued);
        }
        let view = client.session(name).await.unwrap();
        let mut state = BTreeMap::new();
        for object in OBJECTS {
            let values = durable.state(object, name).await;
            let values: BTreeMap<String, String> = values
                .into_iter()
                .map(|(k, (v, len))| {
                    assert_eq!(v.len() as u64, len, "{object}/{name}/{k} is UTF-8 text");
                    (k, v)
                })
                .collect();
            if !values.is_empty() {
                state.insert(object.to_owned(), values);
            }
        }
        let fixture = Fixture {
            state,
            messages: view.messages,
            interrupts: report.interrupts.clone(),
            report,
            tool_log: durable.log(name),
        };
        let json = serde_json::to_string_pretty(&fixture).unwrap();
        std::fs::write(dir.join(format!("{name}.json")), json + "\n").unwrap();
    }
}
