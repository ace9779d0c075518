//! Sessions across processes: an interrupt persisted by one process is resumed by another;
//! a writer killed with SIGKILL at random points never corrupts a session; two writer
//! processes racing on one session lose no message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use rein_sessions::{SessionStore, SharedSessionStore};

const WORKER: &str = env!("CARGO_BIN_EXE_rein-session-worker");

fn worker(spec: &str, session: &str, args: &[&str]) -> String {
    let out = Command::new(WORKER)
        .arg(spec)
        .arg(session)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "worker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn durable_stores(dir: &TempDir) -> Vec<(&'static str, SharedSessionStore, String)> {
    stores(dir)
        .await
        .into_iter()
        .filter_map(|(n, s, spec)| spec.map(|spec| (n, s, spec)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_is_resumed_in_another_process() {
    let dir = TempDir::new("procs");
    for (name, store, spec) in durable_stores(&dir).await {
        let session = session_id("resume");
        let first: serde_json::Value =
            serde_json::from_str(&worker(&spec, &session, &["interrupt"])).unwrap();
        assert_eq!(first["stop_reason"], "interrupt", "{name}: {first}");
        let id = first["interrupts"][0].as_str().unwrap().to_owned();
        let s = store.load(&session).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_some(), "{name}");

        // A second process: a new agent, restored from the store, finishes the tool.
        let second: serde_json::Value =
            serde_json::from_str(&worker(&spec, &session, &["resume", &id, "yes"])).unwrap();
        assert_eq!(second["stop_reason"], "end_turn", "{name}: {second}");
        assert_eq!(second["text"], "The file is gone.", "{name}");
        assert_eq!(second["messages"], 4, "{name}");
        let s = store.load(&session).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");
        let result = s.messages[2].message.tool_results().next().unwrap().text();
        assert!(
            result.starts_with("deleted report.txt in process"),
            "{name}: {result}"
        );
    }
}

/// What one process did: model calls, `count` runs.
type Did = (usize, u64);

/// What each process of a pause at a point did: in the holding process, then in the resuming
/// one, for an approval; and for a rejection, the resume's.
const POINTS: [(&str, [Did; 2], Did); 4] = [
    // The tool ran before the pause; the resume only sends its (approved) result.
    ("after_tool_call", [(1, 1), (1, 0)], (1, 0)),
    // The response asking for the tool is held: the resume runs the tool, never re-calls.
    ("after_model_call", [(1, 0), (1, 1)], (0, 0)),
    // The tool ran; the request carrying its result is held, sent once approved.
    ("before_model_call", [(1, 1), (1, 0)], (0, 0)),
    // Nothing ran before the pause.
    ("before_invocation", [(0, 0), (2, 1)], (0, 0)),
];

fn calls_and_runs(v: &serde_json::Value) -> Did {
    (
        v["model_calls"].as_u64().unwrap() as usize,
        v["tool_runs"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_at_each_point_is_answered_in_another_process_and_nothing_reruns() {
    let dir = TempDir::new("points");
    for (name, store, spec) in durable_stores(&dir).await {
        for (point, [held, resumed], rejected) in POINTS {
            for answer in ["yes", "no"] {
                let session = session_id("point");
                let first: serde_json::Value =
                    serde_json::from_str(&worker(&spec, &session, &["hold", point])).unwrap();
                assert_eq!(first["stop_reason"], "interrupt", "{name} {point}: {first}");
                let id = first["interrupts"][0].as_str().unwrap().to_owned();
                assert!(id.starts_with(&format!("v1:{point}:")), "{name}: {id}");
                assert_eq!(calls_and_runs(&first), held, "{name} {point}: {first}");
                let s = store.load(&session).await.unwrap().unwrap();
                assert!(s.pending_interrupts.is_some(), "{name} {point}");

                let second: serde_json::Value = serde_json::from_str(&worker(
                    &spec,
                    &session,
                    &["resume-at", point, &id, answer],
                ))
                .unwrap();
                let want = if answer == "yes" { resumed } else { rejected };
                assert_eq!(
                    calls_and_runs(&second),
                    want,
                    "{name} {point} {answer}: {second}"
                );
                assert_eq!(
                    second["stop_reason"], "end_turn",
                    "{name} {point}: {second}"
                );
                let s = store.load(&session).await.unwrap().unwrap();
                assert!(s.pending_interrupts.is_none(), "{name} {point}");
                let stored: Vec<String> = s
                    .messages
                    .iter()
                    .flat_map(|m| m.message.tool_results().map(|r| r.text()))
                    .collect();
                if answer == "yes" {
                    assert_eq!(second["text"], "counted", "{name} {point}");
                    // One run in all, in one process or the other.
                    assert_eq!(stored, ["count=1"], "{name} {point}");
                } else {
                    let text = match point {
                        "after_tool_call" => stored[0].clone(),
                        _ => second["text"].as_str().unwrap().to_owned(),
                    };
                    assert!(
                        text.starts_with("CONFIRMATION_FAILED: "),
                        "{name} {point}: {second}"
                    );
                }
            }
        }
    }
}

/// A tiny deterministic PRNG (no dependency).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_killed_at_random_points_never_corrupts_the_session() {
    let dir = TempDir::new("crash");
    let iterations: usize = std::env::var("REIN_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    for (name, store, spec) in durable_stores(&dir).await {
        if name == "postgres" {
            continue; // The server, not the client, owns durability there.
        }
        let session = session_id("crash");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
        let mut killed_mid_run = 0;
        for it in 0..iterations {
            let mut child = Command::new(WORKER)
                .args([spec.as_str(), session.as_str(), "append", "w", "100000"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_micros(2_000 + rng.below(45_000)));
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            let mut acked = 0;
            for line in BufReader::new(child.stdout.take().unwrap()).lines() {
                let line = line.unwrap();
                if let Some(i) = line.strip_prefix("ok ") {
                    acked = acked.max(i.parse::<usize>().unwrap() + 1);
                }
            }
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(err.is_empty(), "{name}: worker failed: {err}");
            // It always loads, and holds a prefix of the writes: w-0, w-1, ... in order.
            let s = store
                .load(&session)
                .await
                .unwrap_or_else(|e| panic!("{name} iteration {it}: {e}"));
            let texts: Vec<String> = s
                .iter()
                .flat_map(|s| s.messages.iter().map(|m| m.message.text()))
                .collect();
            for (i, t) in texts.iter().enumerate() {
                assert_eq!(t, &format!("w-{i}"), "{name} iteration {it}: not a prefix");
            }
            assert!(
                texts.len() >= acked,
                "{name} iteration {it}: an acknowledged write was lost"
            );
            assert_eq!(
                s.as_ref().map_or(0, |s| s.version),
                texts.len() as u64,
                "{name} iteration {it}: one version per write"
            );
            if acked > 0 {
                killed_mid_run += 1;
            }
        }
        assert!(
            killed_mid_run > iterations / 10,
            "{name}: the writer was killed while writing in {killed_mid_run} of {iterations} runs"
        );
        eprintln!(
            "{name}: {iterations} kills, {} writes survived",
            store.load(&session).await.unwrap().map_or(0, |s| s.version)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writer_processes_lose_no_message() {
    let dir = TempDir::new("race");
    let n: usize = std::env::var("REIN_RACE_APPENDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    for (name, store, spec) in durable_stores(&dir).await {
        let session = session_id("race");
        let spawn = |w: &str| {
            Command::new(WORKER)
                .args([spec.as_str(), session.as_str(), "append", w, &n.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn("a"), spawn("b"));
        let mut conflicts = 0u64;
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let last = text.lines().last().unwrap();
            conflicts += last
                .strip_prefix("conflicts ")
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
        let s = store.load(&session).await.unwrap().unwrap();
        assert_eq!(s.messages.len(), 2 * n, "{name}: no message lost");
        assert_eq!(s.version, 2 * n as u64, "{name}: one version per won race");
        for w in ["a", "b"] {
            let mine: Vec<String> = s
                .messages
                .iter()
                .map(|m| m.message.text())
                .filter(|t| t.starts_with(&format!("{w}-")))
                .collect();
            let want: Vec<String> = (0..n).map(|i| format!("{w}-{i}")).collect();
            assert_eq!(mine, want, "{name}: {w}'s messages, once each, in order");
        }
        eprintln!(
            "{name}: {} appends, {conflicts} conflicts (lost races, each retried)",
            2 * n
        );
    }
}

/// SPEC §9.1: three levels deep (top → manager → clerk), the clerk's confirm answered at the
/// top by another process; the ledger (a line per `delete` run, any process) and each level's
/// model calls show nothing ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_in_a_grandchild_is_answered_at_the_top_in_another_process() {
    let dir = TempDir::new("nested-procs");
    for (name, store, spec) in durable_stores(&dir).await {
        let session = session_id("nested");
        let ledger = dir.path().join(format!("{session}.ledger"));
        let ledger = ledger.to_str().unwrap();
        let first: serde_json::Value =
            serde_json::from_str(&worker(&spec, &session, &["nested-interrupt", ledger])).unwrap();
        assert_eq!(first["stop_reason"], "interrupt", "{name}: {first}");
        assert_eq!(
            first["interrupts"][0]["name"], "manager/clerk/approval",
            "{name}"
        );
        let id = first["interrupts"][0]["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("v1:agent:m1:v1:agent:c1:"), "{name}: {id}");
        assert_eq!(first["model_calls"], serde_json::json!([1, 1, 1]), "{name}");
        assert_eq!(
            first["deletes"], 0,
            "{name}: nothing deleted before the answer"
        );
        let s = store.load(&session).await.unwrap().unwrap();
        let p = s.pending_interrupts.as_ref().unwrap();
        let rein_agent::Pause::Tools(tools) = p.pause() else {
            panic!("{name}: paused in the tool phase");
        };
        assert!(
            tools.children.contains_key("m1"),
            "{name}: the manager's checkpoint is persisted"
        );

        let second: serde_json::Value = serde_json::from_str(&worker(
            &spec,
            &session,
            &["nested-resume", ledger, &id, "yes"],
        ))
        .unwrap();
        assert_eq!(second["stop_reason"], "end_turn", "{name}: {second}");
        assert_eq!(second["text"], "all tidy", "{name}");
        // Each level's model was called once in the new process (its script holds one reply),
        // given back the result of the call it made before the restart.
        assert_eq!(
            second["model_calls"],
            serde_json::json!([1, 1, 1]),
            "{name}"
        );
        assert_eq!(
            second["saw"],
            serde_json::json!(["the clerk is done", "deleted the draft", "deleted"]),
            "{name}"
        );
        assert_eq!(second["deletes"], 1, "{name}: the delete ran once, in all");
        let s = store.load(&session).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");
        let results: Vec<String> = s.messages[2]
            .message
            .tool_results()
            .map(|r| r.text())
            .collect();
        assert_eq!(results, ["the clerk is done"], "{name}");
    }
}

/// SPEC §5: an item queued at the pause and one injected while the run waits for the human
/// are delivered once each after the resume in another process; when the pending interrupts
/// are discarded in another process instead, both are rejected `run ended`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_injected_around_a_pause_are_delivered_or_rejected_once_in_another_process() {
    let dir = TempDir::new("queued-procs");
    for (name, store, spec) in durable_stores(&dir).await {
        let pause = |session: &str| {
            let first: serde_json::Value =
                serde_json::from_str(&worker(&spec, session, &["queued-interrupt"])).unwrap();
            assert_eq!(first["stop_reason"], "interrupt", "{name}: {first}");
            first["interrupts"][0].as_str().unwrap().to_owned()
        };
        let resumed = session_id("queued");
        let id = pause(&resumed);
        let s = store.load(&resumed).await.unwrap().unwrap();
        let queued = s.pending_interrupts.as_ref().unwrap().queued_injections();
        assert_eq!(queued.len(), 2, "{name}: both persisted with the pause");

        let out: serde_json::Value =
            serde_json::from_str(&worker(&spec, &resumed, &["queued-resume", &id, "yes"])).unwrap();
        assert_eq!(out["text"], "done", "{name}: {out}");
        assert_eq!(
            out["fates"],
            serde_json::json!([
                ["also check the backups", "consumed"],
                ["and the logs", "consumed"]
            ]),
            "{name}: each delivered once, in order"
        );
        let sent: Vec<&str> = out["sent"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        for item in ["also check the backups", "and the logs"] {
            let times = sent.iter().map(|t| t.matches(item).count()).sum::<usize>();
            assert_eq!(times, 1, "{name}: the model saw {item:?} once: {sent:?}");
        }
        let s = store.load(&resumed).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");

        let discarded = session_id("discarded");
        pause(&discarded);
        let out: serde_json::Value =
            serde_json::from_str(&worker(&spec, &discarded, &["queued-discard"])).unwrap();
        assert_eq!(
            out["fates"],
            serde_json::json!([
                ["also check the backups", "run ended"],
                ["and the logs", "run ended"]
            ]),
            "{name}: {out}"
        );
        let s = store.load(&discarded).await.unwrap().unwrap();
        assert!(s.pending_interrupts.is_none(), "{name}");
        let results: Vec<String> = s
            .messages
            .last()
            .unwrap()
            .message
            .tool_results()
            .map(|r| r.text())
            .collect();
        assert_eq!(
            results,
            ["noted", rein_agent::TOOL_INTERRUPTED],
            "{name}: the history is closed"
        );
    }
}
