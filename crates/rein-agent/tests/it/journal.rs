//! The journal seam (a durable engine's view of a run): every model call and tool call is a
//! step; a replay fed the recorded steps reaches the same history without calling the model or
//! the tools again; interrupts a tool raised and state it changed come back on a replay;
//! injected messages reach the run through the journal with their own ids.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rein_agent::journal::{Journal, JournalStep, StepKind};
use rein_agent::{Agent, AgentTool, ToolExecutor};
use rein_core::{
    Error, Message, ModelError, ToolHandle,
    id::InjectionId,
    interrupt::Interrupt,
    result::InjectionOutcome,
    stream::StopReason,
    tool::{BoxFuture, ToolError, ToolOutput},
};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

/// Records each step (live), or serves recorded steps without running them (replay); hands
/// out queued injections at turn boundaries.
#[derive(Clone, Default)]
struct Tape {
    steps: Arc<Mutex<Vec<(StepKind, String, Value)>>>,
    replay: Arc<Mutex<Option<VecDeque<Value>>>>,
    inbox: Arc<Mutex<Vec<(InjectionId, Message)>>>,
}

impl Tape {
    fn replaying(&self) -> Tape {
        let recorded = self
            .steps
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.2.clone())
            .collect();
        Tape {
            replay: Arc::new(Mutex::new(Some(recorded))),
            ..Tape::default()
        }
    }

    fn kinds(&self) -> Vec<(StepKind, String)> {
        let steps = self.steps.lock().unwrap();
        steps.iter().map(|(k, n, _)| (*k, n.clone())).collect()
    }
}

impl Journal for Tape {
    fn step(
        &self,
        step: JournalStep,
        run: BoxFuture<'static, Value>,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let this = self.clone();
        Box::pin(async move {
            let recorded = this
                .replay
                .lock()
                .unwrap()
                .as_mut()
                .map(VecDeque::pop_front);
            let value = match recorded {
                Some(Some(value)) => value,
                Some(None) => return Err(Error::Internal("the replay ran past the tape")),
                None => run.await,
            };
            this.steps
                .lock()
                .unwrap()
                .push((step.kind, step.name, value.clone()));
            Ok(value)
        })
    }

    fn injections(&self) -> BoxFuture<'static, Result<Vec<(InjectionId, Message)>, Error>> {
        let items = std::mem::take(&mut *self.inbox.lock().unwrap());
        Box::pin(async move { Ok(items) })
    }
}

fn counting_tool(name: &'static str, runs: &Arc<AtomicUsize>) -> ToolHandle {
    let runs = runs.clone();
    ToolHandle::from_sync_fn(
        name,
        "Counts.",
        json!({"type": "object"}),
        move |input, cx| {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            cx.agent_state().set(format!("{name}_runs"), n);
            Ok(ToolOutput::text(format!("{name} {n} {input}")))
        },
    )
}

fn texts(agent: &Agent) -> Vec<String> {
    agent
        .messages()
        .iter()
        .map(|m| serde_json::to_string(m).unwrap())
        .collect()
}

#[tokio::test]
async fn a_replay_reaches_the_same_history_without_calling_anything() {
    let tape = Tape::default();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::builder()
        .tool_use("t1", "a", json!({"x": 1}))
        .error(ModelError::throttled("slow down"))
        .tool_use("t2", "b", json!({}))
        .text("Done.")
        .chunk_chars(2)
        .build();
    let mut live = Agent::builder()
        .model(model)
        .tool(counting_tool("a", &runs))
        .tool(counting_tool("b", &runs))
        .journal(tape.clone())
        .build()
        .unwrap();
    let first = live.invoke("go").await.unwrap();
    assert_eq!(first.text(), "Done.");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let kinds: Vec<StepKind> = tape.kinds().into_iter().map(|(k, _)| k).collect();
    use StepKind::{ModelCall as M, ToolCall as T};
    // The throttled call is a step too: the replay retries exactly as the live run did.
    assert_eq!(kinds, [M, T, M, M, T, M]);
    assert_eq!(tape.kinds()[1].1, "a:t1");

    // A replay: a model with nothing scripted and tools that would count again.
    let replay = tape.replaying();
    let mut again = Agent::builder()
        .model(ScriptedModel::builder().build())
        .tool(counting_tool("a", &runs))
        .tool(counting_tool("b", &runs))
        .journal(replay.clone())
        .build()
        .unwrap();
    let second = again.invoke("go").await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2, "no tool ran again");
    assert_eq!(second.text(), "Done.");
    assert_eq!(texts(&again), texts(&live));
    assert_eq!(
        again.state().get("b_runs"),
        Some(json!(2)),
        "state comes back"
    );
    assert_eq!(second.usage, first.usage);
}

#[tokio::test]
async fn journaled_tools_run_one_after_another_in_tool_use_order() {
    let tape = Tape::default();
    let order = Arc::new(Mutex::new(Vec::new()));
    let slow = |name: &'static str, ms: u64| {
        let order = order.clone();
        ToolHandle::from_fn(name, "Sleeps.", json!({"type": "object"}), move |_, _| {
            let order = order.clone();
            async move {
                order.lock().unwrap().push(format!("{name} start"));
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                order.lock().unwrap().push(format!("{name} end"));
                Ok::<_, ToolError>(ToolOutput::text(name))
            }
        })
    };
    let model = ScriptedModel::builder()
        .response(
            ScriptedResponse::new()
                .tool_use("t1", "slow", json!({}))
                .tool_use("t2", "fast", json!({})),
        )
        .text("ok")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(slow("slow", 30))
        .tool(slow("fast", 1))
        .tool_executor(ToolExecutor::Concurrent { max: 8 })
        .journal(tape.clone())
        .build()
        .unwrap();
    agent.invoke("go").await.unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["slow start", "slow end", "fast start", "fast end"]
    );
    let names: Vec<String> = tape.kinds().into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["scripted", "slow:t1", "fast:t2", "scripted"]);
}

#[tokio::test]
async fn a_tools_interrupt_and_panic_come_back_on_a_replay() {
    let tape = Tape::default();
    let runs = Arc::new(AtomicUsize::new(0));
    let make = |runs: Arc<AtomicUsize>| {
        ToolHandle::from_sync_fn("ask", "Asks.", json!({"type": "object"}), move |_, cx| {
            runs.fetch_add(1, Ordering::SeqCst);
            match cx.answer("q1") {
                Some(a) => Ok(ToolOutput::text(format!("answer {a}"))),
                None => {
                    cx.raise_interrupt(Interrupt::new("q1", "ask", json!("Which?")));
                    Err(ToolError::msg("waiting"))
                }
            }
        })
    };
    let boom = ToolHandle::from_sync_fn("boom", "Panics.", json!({"type": "object"}), |_, _| {
        panic!("kaboom")
    });
    let script = || {
        ScriptedModel::builder()
            .tool_use("t0", "boom", json!({}))
            .tool_use("t1", "ask", json!({}))
            .text("fine")
            .build()
    };
    let mut live = Agent::builder()
        .model(script())
        .tool(make(runs.clone()))
        .tool(boom.clone())
        .journal(tape.clone())
        .build()
        .unwrap();
    let paused = live.invoke("go").await.unwrap();
    assert_eq!(paused.stop_reason, StopReason::Interrupt);
    assert_eq!(paused.interrupts[0].id, "q1");
    let panicked = serde_json::to_string(&live.messages()[2]).unwrap();
    assert!(
        panicked.contains("tool 'boom' panicked: kaboom"),
        "{panicked}"
    );

    let replay = tape.replaying();
    let mut again = Agent::builder()
        .model(ScriptedModel::builder().build())
        .tool(make(runs.clone()))
        .tool(boom)
        .journal(replay)
        .build()
        .unwrap();
    let paused_again = again.invoke("go").await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the asking tool did not run again"
    );
    assert_eq!(paused_again.stop_reason, StopReason::Interrupt);
    // The same interrupts; each execution draws its own pause nonce (like message ids, it
    // is not journaled: what a durable run keeps is saved through a journaled step).
    let without_nonce = |is: &[rein_core::interrupt::Interrupt]| {
        is.iter()
            .map(|i| {
                let mut i = i.clone();
                i.nonce = None;
                i
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        without_nonce(&paused_again.interrupts),
        without_nonce(&paused.interrupts)
    );
    assert_eq!(texts(&again), texts(&live));

    // The resume is journaled too, on the live agent.
    let done = live
        .invoke(vec![paused.interrupts[0].answer(json!("left"))])
        .await
        .unwrap();
    assert_eq!(done.text(), "fine");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A journaled agent whose `clock` tool has its journal's inbox take `also say hi` (as if
/// accepted elsewhere while the tool runs; taken at the next boundary), with its model and
/// the injection's id.
fn journaled_with_an_injection() -> (Agent, ScriptedModel, InjectionId) {
    let tape = Tape::default();
    let id = InjectionId::new();
    let inbox = tape.inbox.clone();
    let clock =
        ToolHandle::from_sync_fn("clock", "Time.", json!({"type": "object"}), move |_, _| {
            inbox
                .lock()
                .unwrap()
                .push((id, Message::user("also say hi")));
            Ok(ToolOutput::text("noon"))
        });
    let model = ScriptedModel::builder()
        .tool_use("t1", "clock", json!({}))
        .text("Noon. Hi!")
        .record_requests(true)
        .build();
    let agent = Agent::builder()
        .model(model.clone())
        .tool(clock)
        .journal(tape)
        .build()
        .unwrap();
    (agent, model, id)
}

#[tokio::test]
async fn injections_arrive_through_the_journal_with_their_ids() {
    let (mut agent, model, id) = journaled_with_an_injection();
    let consumed = Arc::new(Mutex::new(Vec::new()));
    let seen = consumed.clone();
    agent
        .interceptor()
        .on_consumed(move |id, _| seen.lock().unwrap().push(id));
    let result = agent.invoke("time?").await.unwrap();
    assert_eq!(*consumed.lock().unwrap(), [id]);
    assert_eq!(result.injections.len(), 1);
    assert_eq!(result.injections[0].id, id);
    let second = &model.requests()[1];
    let last = serde_json::to_string(second.messages.last().unwrap()).unwrap();
    assert!(last.contains("also say hi"), "{last}");
}

/// An agent makes its interceptor on first use: one never asked for still takes what its
/// journal delivers into the run.
#[tokio::test]
async fn journal_injections_reach_an_agent_nobody_asked_an_interceptor_of() {
    let (mut agent, model, id) = journaled_with_an_injection();
    let result = agent.invoke("time?").await.unwrap();
    assert_eq!(result.injections.len(), 1);
    assert_eq!(result.injections[0].id, id);
    assert_eq!(result.injections[0].outcome, InjectionOutcome::Consumed);
    assert!(
        model.requests()[1]
            .messages
            .last()
            .unwrap()
            .text()
            .contains("also say hi")
    );
    // Its run is over: the interceptor made for it takes nothing more.
    assert_eq!(
        agent.interceptor().inject("late"),
        Err(rein_agent::InjectError::NoActiveRun)
    );
}

#[tokio::test]
async fn an_agent_running_as_a_tool_journals_its_steps_in_the_parents_run() {
    let tape = Tape::default();
    let runs = Arc::new(AtomicUsize::new(0));
    let child_runs = runs.clone();
    let researcher = AgentTool::new("researcher", "Researches.", move || {
        Agent::builder()
            .name("researcher")
            .model(
                ScriptedModel::builder()
                    .tool_use("c1", "look", json!({}))
                    .text("found it")
                    .build(),
            )
            .tool(counting_tool("look", &child_runs))
            .build()
    });
    let model = ScriptedModel::builder()
        .tool_use("p1", "researcher", json!({"input": "find"}))
        .text("The researcher found it.")
        .build();
    let mut agent = Agent::builder()
        .model(model)
        .tool(researcher)
        .journal(tape.clone())
        .build()
        .unwrap();
    agent.invoke("go").await.unwrap();
    let names: Vec<String> = tape.kinds().into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        names,
        ["scripted", "scripted", "look:c1", "scripted", "scripted"]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_journal_that_fails_fails_the_step_not_the_process() {
    struct Broken;
    impl Journal for Broken {
        fn step(
            &self,
            _: JournalStep,
            _: BoxFuture<'static, Value>,
        ) -> BoxFuture<'static, Result<Value, Error>> {
            Box::pin(async { Err(Error::Internal("engine down")) })
        }
    }
    let mut agent = Agent::builder()
        .model(ScriptedModel::builder().text("hi").build())
        .journal(Broken)
        .build()
        .unwrap();
    let err = agent.invoke("go").await.unwrap_err();
    assert!(err.to_string().contains("engine down"), "{err}");
    assert!(agent.messages().len() <= 1);
}

/// Issue 40, item 6: a fallback chain's route is journaled with its call: a replay records the
/// same `rein:fallback` hops without calling a model.
#[tokio::test]
async fn a_replay_records_the_fallback_hops_again() {
    let tape = Tape::default();
    let chain = rein_models::FallbackModel::new(
        ScriptedModel::builder()
            .model_id("primary")
            .throttled()
            .build(),
    )
    .with_fallback(
        ScriptedModel::builder()
            .model_id("backup")
            .text("ok")
            .build(),
    );
    let mut live = Agent::builder()
        .model(chain)
        .retry_strategy(rein_agent::RetryStrategy::none())
        .journal(tape.clone())
        .build()
        .unwrap();
    let first = live.invoke("go").await.unwrap();
    let hops = |r: &rein_core::result::AgentResult| -> Vec<Option<String>> {
        r.decisions
            .iter()
            .filter(|d| d.handler == "rein:fallback")
            .map(|d| d.text.clone())
            .collect()
    };
    assert_eq!(hops(&first).len(), 1);

    let mut again = Agent::builder()
        .model(ScriptedModel::builder().build())
        .journal(tape.replaying())
        .build()
        .unwrap();
    let second = again.invoke("go").await.unwrap();
    assert_eq!(second.text(), "ok");
    assert_eq!(hops(&second), hops(&first));
}

/// Issue 43: a conversation manager's summary call is a step like any model call — recorded
/// live, served from the journal on a replay (the summarizer is not called again), reaching
/// the same history with the same summary.
#[tokio::test]
async fn a_summary_call_is_a_journaled_step() {
    use rein_agent::SummarizingWindow;
    use rein_core::stream::Usage;
    let tape = Tape::default();
    let runs = Arc::new(AtomicUsize::new(0));
    let big = "x".repeat(2_000);
    // No usage reported: the estimate stays the heuristic's.
    let text = |t: &str| ScriptedResponse::new().text(t).usage(Usage::new(0, 1));
    let model = ScriptedModel::builder()
        .response(text(&big))
        .response(text(&big))
        .response(text("third"))
        .build();
    let summarizer = ScriptedModel::builder()
        .record_requests(true)
        .text("Two long answers were given.")
        .build();
    let manager = || SummarizingWindow::new(800);
    let mut live = Agent::builder()
        .model(model)
        .tool(counting_tool("a", &runs))
        .conversation_manager(manager().summarizer(summarizer.clone()))
        .journal(tape.clone())
        .build()
        .unwrap();
    for q in ["one", "two", "three"] {
        live.invoke(q).await.unwrap();
    }
    assert_eq!(summarizer.requests().len(), 1, "summarized once");
    let kinds: Vec<StepKind> = tape.kinds().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kinds,
        [StepKind::ModelCall; 4],
        "three turns and the summary"
    );
    let replay = tape.replaying();
    let idle = ScriptedModel::builder().record_requests(true).build();
    let mut again = Agent::builder()
        .model(ScriptedModel::builder().build())
        .tool(counting_tool("a", &runs))
        .conversation_manager(manager().summarizer(idle.clone()))
        .journal(replay)
        .build()
        .unwrap();
    for q in ["one", "two", "three"] {
        again.invoke(q).await.unwrap();
    }
    assert!(
        idle.requests().is_empty(),
        "the summary came from the journal"
    );
    // The same history; message ids are each agent's own, so the summary's differ.
    let without_ids = |agent: &Agent| {
        let mut v = serde_json::to_value(agent.messages()).unwrap();
        let summary = &mut v[0]["content"][1]["summary"];
        assert_eq!(summary["text"], "Two long answers were given.");
        summary["firstMessageId"] = Value::Null;
        summary["lastMessageId"] = Value::Null;
        v
    };
    assert_eq!(without_ids(&again), without_ids(&live));
}
