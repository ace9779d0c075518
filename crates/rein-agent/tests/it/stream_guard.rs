//! Stream guards: `model_output` interventions on streamed text (SPEC §3.9).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures_util::StreamExt as _;
use futures_util::stream;
use rein_agent::{Agent, AgentBuilder, AgentEvent, DEFAULT_STREAM_HOLD_BACK};
use rein_core::{
    ContentBlock, Error, Message, ModelError, Role,
    audit::{DecisionAction, DecisionOutcome, EventKind, OnError},
    event::ModelOutputEvent,
    request::ModelRequest,
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent},
};
use rein_interventions::{
    EventSet, HandlerError, Intervention, InterventionContext, InterventionHandler,
    ModelOutputAction,
    policy::{DenyStreamMatch, PolicyHandler, RedactStream},
};
use rein_models::{Model, ModelInfo, ModelStream, ScriptedModel, ScriptedResponse};

const SECRET: &str = "sk-ABCDEFGHIJ0123456789";
const KEY_PATTERN: &str = r"sk-[A-Za-z0-9]{20}";

/// Multi-byte text around the secret, so splits fall inside UTF-8 sequences' neighbours.
fn text() -> String {
    format!("Voilà — your key: {SECRET}; gardez-le sûr ✓ 日本語 done.")
}

fn redacted() -> String {
    text().replace(SECRET, "[KEY]")
}

fn redact_keys() -> PolicyHandler {
    PolicyHandler::new(
        "keys",
        RedactStream {
            pattern: KEY_PATTERN.into(),
            replacement: "[KEY]".into(),
        },
    )
    .unwrap()
}

/// One text block streamed as exactly these deltas.
fn text_events(chunks: &[&str]) -> Vec<StreamEvent> {
    let mut events = vec![StreamEvent::BlockStart(BlockStart::Text)];
    events.extend(
        chunks
            .iter()
            .map(|c| StreamEvent::BlockDelta(BlockDelta::Text((*c).to_owned()))),
    );
    events.push(StreamEvent::BlockStop);
    events.push(StreamEvent::MessageStop {
        stop_reason: StopReason::EndTurn,
    });
    events
}

fn scripted(events: Vec<StreamEvent>) -> ScriptedModel {
    ScriptedModel::builder()
        .response(ScriptedResponse::events(events))
        .build()
}

fn guarded(model: ScriptedModel, hold_back: usize) -> Agent {
    agent(model)
        .intervention(redact_keys())
        .stream_hold_back(hold_back)
        .build()
        .unwrap()
}

/// What a streamed invocation showed: the concatenated text deltas, every event, the result.
struct Shown {
    text: String,
    events: Vec<AgentEvent>,
    result: Result<rein_core::result::AgentResult, Error>,
}

async fn stream_all(agent: &mut Agent, prompt: &str) -> Shown {
    let mut s = agent.stream(prompt);
    let mut shown = Shown {
        text: String::new(),
        events: Vec::new(),
        result: Err(Error::Internal("no result")),
    };
    while let Some(item) = s.next().await {
        match item {
            Ok(AgentEvent::Finished(r)) => shown.result = Ok(r),
            Ok(ev) => {
                if let AgentEvent::TextDelta(t) = &ev {
                    shown.text.push_str(t);
                }
                shown.events.push(ev);
            }
            Err(e) => shown.result = Err(e),
        }
    }
    shown
}

/// The stored text of the last assistant message.
fn stored(agent: &Agent) -> String {
    let last = agent.messages().last().unwrap();
    assert_eq!(last.role, Role::Assistant);
    last.text()
}

/// Streams and invokes the text split into `chunks`; checks the guarantee and returns what
/// the caller saw.
async fn check_split(chunks: &[&str], hold_back: usize) -> String {
    let mut a = guarded(scripted(text_events(chunks)), hold_back);
    let shown = stream_all(&mut a, "key?").await;
    let result = shown.result.unwrap();
    assert_eq!(shown.text, stored(&a), "stored == shown, chunks {chunks:?}");
    assert_eq!(result.text(), shown.text);
    assert_history(&a);

    let mut b = guarded(scripted(text_events(chunks)), hold_back);
    let invoked = b.invoke("key?").await.unwrap();
    assert_eq!(
        invoked.text(),
        shown.text,
        "invoke == stream, chunks {chunks:?}"
    );
    assert_history(&b);
    shown.text
}

fn char_bounds(s: &str) -> Vec<usize> {
    s.char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()))
        .collect()
}

fn assert_no_secret(shown: &str, chunks: &[&str]) {
    assert!(!shown.contains("sk-"), "leaked {shown:?} for {chunks:?}");
    assert_eq!(shown, redacted(), "chunks {chunks:?}");
}

#[tokio::test]
async fn no_split_of_the_secret_reaches_the_caller() {
    let t = text();
    let bounds = char_bounds(&t);
    // A window one shorter than the match is the least that catches it; also the default.
    for hold_back in [SECRET.chars().count() - 1, DEFAULT_STREAM_HOLD_BACK] {
        for &i in &bounds {
            let chunks = [&t[..i], &t[i..]];
            let shown = check_split(&chunks, hold_back).await;
            assert_no_secret(&shown, &chunks);
        }
        // A sample of 3-way splits.
        for (n, &i) in bounds.iter().enumerate().step_by(3) {
            for &j in bounds[n..].iter().step_by(4) {
                let chunks = [&t[..i], &t[i..j], &t[j..]];
                let shown = check_split(&chunks, hold_back).await;
                assert_no_secret(&shown, &chunks);
            }
        }
        // Char by char.
        let chars: Vec<String> = t.chars().map(String::from).collect();
        let chunks: Vec<&str> = chars.iter().map(String::as_str).collect();
        let shown = check_split(&chunks, hold_back).await;
        assert_no_secret(&shown, &chunks);
    }
}

#[tokio::test]
async fn a_window_shorter_than_the_match_guarantees_only_stored_equals_shown() {
    let t = text();
    let chars: Vec<String> = t.chars().map(String::from).collect();
    let chunks: Vec<&str> = chars.iter().map(String::as_str).collect();
    // Char by char with no window, no pass ever sees the whole key: it goes through.
    let shown = check_split(&chunks, 0).await;
    assert_eq!(shown, t);
    // With a window of 10 the start of the key is released before its end arrives.
    let shown = check_split(&chunks, 10).await;
    assert!(shown.contains("sk-"), "{shown}");
    // Whatever the window and the split, the caller saw what is stored.
    for hold_back in [0, 5, 10, 21] {
        for &i in char_bounds(&t).iter().step_by(2) {
            check_split(&[&t[..i], &t[i..]], hold_back).await;
        }
    }
    // A key within one delta is caught whatever the window.
    assert_eq!(check_split(&[&t], 0).await, redacted());
}

#[tokio::test]
async fn text_blocks_are_guarded_one_by_one_and_tool_input_is_not() {
    let log = Log::default();
    let events = vec![
        StreamEvent::BlockStart(BlockStart::Text),
        StreamEvent::BlockDelta(BlockDelta::Text("first sk-ABCDEFGHIJ".into())),
        StreamEvent::BlockDelta(BlockDelta::Text("0123456789 end".into())),
        StreamEvent::BlockStop,
        StreamEvent::BlockStart(BlockStart::ToolUse {
            tool_use_id: "t1".into(),
            name: "echo".into(),
        }),
        StreamEvent::BlockDelta(BlockDelta::ToolInput(r#"{"text": "#.into())),
        StreamEvent::BlockDelta(BlockDelta::ToolInput(format!(r#""{SECRET}"}}"#))),
        StreamEvent::BlockStop,
        // A provider that omits the stop of the last block.
        StreamEvent::BlockStart(BlockStart::Text),
        StreamEvent::BlockDelta(BlockDelta::Text(format!("second {SECRET}"))),
        StreamEvent::MessageStop {
            stop_reason: StopReason::ToolUse,
        },
    ];
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::events(events))
        .text("done")
        .build();
    let mut a = agent(model)
        .tool(echo_tool(&log))
        .intervention(redact_keys())
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    shown.result.unwrap();
    let tool_input: String = shown
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolInputDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(tool_input.contains(SECRET), "tool input is not guarded");
    let assistant = &a.messages()[1];
    let texts: Vec<&str> = assistant
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["first [KEY] end", "second [KEY]"]);
    assert_eq!(assistant.tool_uses().count(), 1);
    assert_eq!(shown.text, "first [KEY] endsecond [KEY]done");
    assert_eq!(log.take(), vec![format!("ran echo:{SECRET}")]);
    assert_history(&a);
}

/// A model whose one response is `events`, recording how many were read and whether the
/// stream was dropped. A second call fails (so a regression cannot loop on tool uses).
#[derive(Clone, Default)]
struct Recording {
    events: Arc<Vec<StreamEvent>>,
    read: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Model for Recording {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("recording", "recording")
    }

    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            return Err(ModelError::bad_request("one response only"));
        }
        let flag = DropFlag(self.dropped.clone());
        let me = self.clone();
        let s = stream::iter(0..me.events.len()).map(move |i| {
            let _keep = &flag;
            me.read.fetch_add(1, Ordering::SeqCst);
            Ok(me.events[i].clone())
        });
        Ok(Box::pin(s))
    }
}

fn no_forbidden(on_error: OnError) -> Intervention {
    Intervention::named("no-forbidden")
        .on_error(on_error)
        .model_output(|ev, _| {
            if ev.pending.contains("FORBIDDEN") {
                ModelOutputAction::deny("forbidden word")
            } else {
                ModelOutputAction::Proceed
            }
        })
}

const DENIED_TEXT: &str = "All fine so far, then the FORBIDDEN word, then much more text after it.";

fn chunks_of(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// The text in deltas of `n` chars, then (`with_tool`) a tool use, which must never run when
/// the response is withheld.
fn recording(text: &str, n: usize, with_tool: bool) -> Recording {
    let chunks = chunks_of(text, n);
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    recording_of(&refs, with_tool)
}

/// The text as exactly these deltas, then (`with_tool`) a tool use.
fn recording_of(chunks: &[&str], with_tool: bool) -> Recording {
    let mut events = text_events(chunks);
    if with_tool {
        events.insert(
            events.len() - 1,
            StreamEvent::BlockStart(BlockStart::ToolUse {
                tool_use_id: "t1".into(),
                name: "echo".into(),
            }),
        );
    }
    Recording {
        events: Arc::new(events),
        ..Recording::default()
    }
}

fn builder(model: Recording, log: &Log) -> AgentBuilder {
    Agent::builder()
        .model(model)
        .tool(echo_tool(log))
        .stream_hold_back(16)
}

#[tokio::test]
async fn a_deny_mid_stream_stops_the_stream_and_withholds_the_response() {
    let log = Log::default();
    let model = recording(DENIED_TEXT, 4, true);
    let total = model.events.len();
    let mut a = builder(model.clone(), &log)
        .intervention(no_forbidden(OnError::Throw))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    let result = shown.result.unwrap();

    let at = DENIED_TEXT.find("FORBIDDEN").unwrap();
    assert!(DENIED_TEXT.starts_with(&shown.text));
    assert!(shown.text.len() <= at, "shown {:?}", shown.text);
    assert!(
        !shown.text.is_empty(),
        "text before the window was released"
    );
    // The delta that completed the word was the last one read; the stream was dropped.
    let completing = 1 + (at + "FORBIDDEN".len()).div_ceil(4);
    assert_eq!(model.read.load(Ordering::SeqCst), completing);
    assert!(completing < total);
    assert!(model.dropped.load(Ordering::SeqCst));

    assert_eq!(result.text(), "DENIED: forbidden word");
    assert_eq!(result.stop_reason, StopReason::EndTurn);
    let discarded: Vec<_> = shown
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ResponseDiscarded { reason, handler } => {
                Some((reason.clone(), handler.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        discarded,
        vec![(
            "DENIED: forbidden word".to_owned(),
            Some("no-forbidden".to_owned())
        )]
    );
    let deny = result
        .decisions
        .iter()
        .find(|d| d.action == DecisionAction::Deny)
        .unwrap();
    assert_eq!(deny.event, EventKind::ModelOutput);
    assert_eq!(deny.outcome, DecisionOutcome::Applied);
    assert_eq!(
        a.messages(),
        &[
            Message::user("go"),
            Message::assistant("DENIED: forbidden word")
        ]
    );
    assert!(log.take().is_empty(), "the tool use never ran");
    assert_history(&a);
}

/// A guard that errors (no panic) once the pending text holds the forbidden word.
fn erroring(on_error: OnError) -> Intervention {
    Intervention::named("scanner")
        .on_error(on_error)
        .model_output(|ev, _| -> Result<ModelOutputAction, HandlerError> {
            if ev.pending.contains("FORBIDDEN") {
                Err(HandlerError::new("scanner down"))
            } else {
                Ok(ModelOutputAction::Proceed)
            }
        })
}

/// A stream guard with the given `on_error`.
type Guard = fn(OnError) -> Intervention;

/// Streams, then invokes, `DENIED_TEXT` split into `chunks` under `guard`: no byte of the
/// forbidden word is ever shown, the response is withheld with `expected` (stored, and the
/// result's text), the stream was dropped, and its tool use never ran.
async fn check_denied_split(guard: Guard, hold_back: usize, chunks: &[&str], expected: &str) {
    let at = DENIED_TEXT.find("FORBIDDEN").unwrap();
    let log = Log::default();
    let model = recording_of(chunks, true);
    let mut a = builder(model.clone(), &log)
        .stream_hold_back(hold_back)
        .intervention(guard(OnError::Deny))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    let result = shown.result.unwrap();
    assert!(
        DENIED_TEXT.starts_with(&shown.text) && shown.text.len() <= at,
        "shown {:?} for {chunks:?}",
        shown.text
    );
    let discarded = shown
        .events
        .iter()
        .position(
            |e| matches!(e, AgentEvent::ResponseDiscarded { reason, .. } if reason == expected),
        )
        .unwrap_or_else(|| panic!("no discard for {chunks:?}"));
    assert!(
        !shown.events[discarded..]
            .iter()
            .any(|e| matches!(e, AgentEvent::TextDelta(_))),
        "text after the discard for {chunks:?}"
    );
    assert_eq!(result.text(), expected);
    assert_eq!(stored(&a), expected, "stored == what stands in, {chunks:?}");
    assert!(model.dropped.load(Ordering::SeqCst));
    assert!(log.take().is_empty(), "the tool use never ran");
    assert_history(&a);

    let model = recording_of(chunks, true);
    let mut b = builder(model.clone(), &log)
        .stream_hold_back(hold_back)
        .intervention(guard(OnError::Deny))
        .build()
        .unwrap();
    let invoked = b.invoke("go").await.unwrap();
    assert_eq!(invoked.text(), expected, "invoke == stream, {chunks:?}");
    assert_eq!(b.messages(), a.messages());
    assert!(log.take().is_empty());
    assert_history(&b);
}

#[tokio::test]
async fn no_split_of_a_denied_word_reaches_the_caller() {
    let t = DENIED_TEXT;
    let chars: Vec<String> = t.chars().map(String::from).collect();
    let one_by_one: Vec<&str> = chars.iter().map(String::as_str).collect();
    let cases: [(Guard, &str); 2] = [
        (no_forbidden, "DENIED: forbidden word"),
        (erroring, "DENIED: Handler threw: scanner down"),
    ];
    for (guard, expected) in cases {
        // A window one shorter than the word is the least that catches it; also a wider one.
        for hold_back in ["FORBIDDEN".len() - 1, 16] {
            for &i in &char_bounds(t) {
                check_denied_split(guard, hold_back, &[&t[..i], &t[i..]], expected).await;
            }
            check_denied_split(guard, hold_back, &one_by_one, expected).await;
        }
    }
}

#[tokio::test]
async fn a_guard_returning_an_error_mid_stream_follows_on_error() {
    let at = DENIED_TEXT.find("FORBIDDEN").unwrap();
    // Deny: withheld as a deny, the error recorded.
    let log = Log::default();
    let mut a = builder(recording(DENIED_TEXT, 4, true), &log)
        .intervention(erroring(OnError::Deny))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    let r = shown.result.unwrap();
    assert!(DENIED_TEXT.starts_with(&shown.text) && shown.text.len() <= at);
    assert_eq!(r.text(), "DENIED: Handler threw: scanner down");
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert!(shown.events.iter().any(|e| matches!(
        e,
        AgentEvent::ResponseDiscarded { handler: Some(h), .. } if h == "scanner"
    )));
    let error = r
        .decisions
        .iter()
        .find(|d| d.action == DecisionAction::Error)
        .unwrap();
    assert_eq!(
        (error.event, error.on_error),
        (EventKind::ModelOutput, Some(OnError::Deny))
    );
    assert!(log.take().is_empty());
    assert_history(&a);

    // Throw: the invocation fails with the handler error; nothing from the window on shown.
    let mut a = builder(recording(DENIED_TEXT, 4, true), &log)
        .intervention(erroring(OnError::Throw))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    match shown.result {
        Err(Error::Handler { handler, event, .. }) => {
            assert_eq!((handler.as_str(), event), ("scanner", "model_output"));
        }
        other => panic!(
            "expected a handler error, got {:?}",
            other.map(|r| r.text())
        ),
    }
    assert!(DENIED_TEXT.starts_with(&shown.text) && shown.text.len() <= at);
    assert_eq!(a.messages(), &[Message::user("go")]);
    assert!(log.take().is_empty());
    assert_history(&a);
}

#[tokio::test]
async fn invoke_is_denied_the_same_way() {
    let log = Log::default();
    let model = recording(DENIED_TEXT, 4, true);
    let mut a = builder(model.clone(), &log)
        .intervention(
            PolicyHandler::new(
                "deny",
                DenyStreamMatch {
                    pattern: "FORBIDDEN".into(),
                    reason: None,
                },
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let r = a.invoke("go").await.unwrap();
    assert_eq!(r.text(), "DENIED: output matches a denied pattern");
    assert!(model.dropped.load(Ordering::SeqCst));
    assert!(model.read.load(Ordering::SeqCst) < model.events.len());
    assert_history(&a);
}

/// Panics when the pending text holds `boom`.
fn panicky(on_error: OnError) -> Intervention {
    Intervention::named("panicky")
        .on_error(on_error)
        .model_output(|ev, _| {
            if ev.pending.contains("boom") {
                panic!("handler exploded");
            }
            ModelOutputAction::Proceed
        })
}

const BOOM_TEXT: &str = "A calm start, then boom goes the handler, and the rest of it.";

#[tokio::test]
async fn a_handler_panicking_mid_stream_follows_on_error() {
    let at = BOOM_TEXT.find("boom").unwrap();

    // Throw: the invocation fails; nothing from the window on was shown; history is valid.
    let log = Log::default();
    let mut a = builder(recording(BOOM_TEXT, 3, true), &log)
        .intervention(panicky(OnError::Throw))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    match shown.result {
        Err(Error::Handler { handler, event, .. }) => {
            assert_eq!(handler, "panicky");
            assert_eq!(event, "model_output");
        }
        other => panic!(
            "expected a handler error, got {:?}",
            other.map(|r| r.text())
        ),
    }
    assert!(BOOM_TEXT.starts_with(&shown.text) && shown.text.len() <= at);
    assert!(shown.events.iter().any(|e| matches!(
        e,
        AgentEvent::ResponseDiscarded { handler: Some(h), .. } if h == "panicky"
    )));
    assert_eq!(a.messages(), &[Message::user("go")]);
    assert!(log.take().is_empty());
    assert_history(&a);

    // Proceed: the handler is skipped, the text goes on whole.
    let mut a = builder(recording(BOOM_TEXT, 3, false), &log)
        .intervention(panicky(OnError::Proceed))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    let r = shown.result.unwrap();
    assert_eq!(shown.text, BOOM_TEXT);
    assert_eq!(a.messages()[1].text(), BOOM_TEXT);
    assert!(r.decisions.iter().all(|d| d.action == DecisionAction::Error
        && d.on_error == Some(OnError::Proceed)
        && d.event == EventKind::ModelOutput));
    assert!(!r.decisions.is_empty());
    assert_history(&a);
    log.take();

    // Deny: the response is withheld, as a deny.
    let mut a = builder(recording(BOOM_TEXT, 3, true), &log)
        .intervention(panicky(OnError::Deny))
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    let r = shown.result.unwrap();
    assert!(BOOM_TEXT.starts_with(&shown.text) && shown.text.len() <= at);
    assert!(
        r.text().starts_with("DENIED: Handler threw: "),
        "{}",
        r.text()
    );
    assert!(shown.events.iter().any(|e| matches!(
        e,
        AgentEvent::ResponseDiscarded { handler: Some(h), .. } if h == "panicky"
    )));
    assert_eq!(a.messages().len(), 2);
    assert!(log.take().is_empty());
    assert_history(&a);
}

fn slow(text: &str) -> ScriptedModel {
    ScriptedModel::builder()
        .response(ScriptedResponse::new().text(text))
        .text("next")
        .chunk_chars(1)
        .chunk_delay(Duration::from_millis(10))
        .build()
}

const HELD: &str = "Shorter than the window: all of it is held.";

#[tokio::test(start_paused = true)]
async fn cancel_mid_hold_back_emits_nothing_held() {
    let mut a = agent(slow(HELD))
        .intervention(redact_keys())
        .build()
        .unwrap();
    let handle = a.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        handle.cancel();
    });
    let shown = stream_all(&mut a, "go").await;
    let r = shown.result.unwrap();
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(shown.text, "", "nothing held was released");
    assert!(shown.events.iter().any(|e| matches!(
        e,
        AgentEvent::ResponseDiscarded { reason, .. } if reason == "cancelled"
    )));
    assert_eq!(a.messages(), &[Message::user("go")]);
    assert_history(&a);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_mid_hold_back_emits_nothing_held() {
    let mut a = agent(slow(HELD))
        .intervention(redact_keys())
        .build()
        .unwrap();
    let mut seen = Vec::new();
    {
        let mut s = a.stream("go");
        let deadline = tokio::time::sleep(Duration::from_millis(200));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                item = s.next() => seen.push(item.unwrap().unwrap()),
            }
        }
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e, AgentEvent::ModelCallStarted { .. }))
    );
    assert!(!seen.iter().any(|e| matches!(e, AgentEvent::TextDelta(_))));
    assert!(a.messages().iter().all(|m| m.role == Role::User));
    // The agent goes on; the next response streams as usual.
    let r = a.invoke("again").await.unwrap();
    assert_eq!(r.text(), "next");
    assert_history(&a);
}

#[tokio::test]
async fn passes_see_the_released_text_and_one_final_pass() {
    let passes = Arc::new(Mutex::new(Vec::new()));
    let p = passes.clone();
    let spy = Intervention::named("spy").model_output(move |ev: &ModelOutputEvent, _| {
        p.lock().unwrap().push((
            ev.released().to_owned(),
            ev.pending.clone(),
            ev.is_final(),
            ev.model_call_index(),
        ));
        ModelOutputAction::Proceed
    });
    let mut a = agent(scripted(text_events(&["abc", "def", "gh"])))
        .intervention(spy)
        .stream_hold_back(2)
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    shown.result.unwrap();
    let deltas: Vec<&AgentEvent> = shown
        .events
        .iter()
        .filter(|e| matches!(e, AgentEvent::TextDelta(_)))
        .collect();
    assert_eq!(
        deltas,
        [
            &AgentEvent::TextDelta("a".into()),
            &AgentEvent::TextDelta("bcd".into()),
            &AgentEvent::TextDelta("ef".into()),
            &AgentEvent::TextDelta("gh".into()),
        ]
    );
    let s = |x: &str| x.to_owned();
    assert_eq!(
        *passes.lock().unwrap(),
        vec![
            (s(""), s("abc"), false, 0),
            (s("a"), s("bcdef"), false, 0),
            (s("abcd"), s("efgh"), false, 0),
            (s("abcdef"), s("gh"), true, 0),
        ]
    );
    assert_history(&a);
}

/// A handler that does not narrow its subscriptions.
struct Everywhere;

impl InterventionHandler for Everywhere {
    fn name(&self) -> &str {
        "everywhere"
    }
    async fn model_output(
        &self,
        _event: &ModelOutputEvent,
        _cx: &InterventionContext,
    ) -> Result<ModelOutputAction, HandlerError> {
        panic!("not subscribed: never called");
    }
}

#[tokio::test]
async fn model_output_is_opt_in() {
    assert!(!Everywhere.subscriptions().contains(EventSet::MODEL_OUTPUT));
    let mut a = agent(scripted(text_events(&["a", "b", "c"])))
        .intervention(Everywhere)
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    shown.result.unwrap();
    let deltas = shown
        .events
        .iter()
        .filter(|e| matches!(e, AgentEvent::TextDelta(_)))
        .count();
    assert_eq!(deltas, 3, "nothing held back without a stream guard");
    assert_history(&a);
}

#[tokio::test]
async fn a_plain_hook_can_guard_the_stream_too() {
    let mut a = agent(scripted(text_events(&["one two ", "three"])))
        .hook(|ev: &mut ModelOutputEvent| {
            ev.pending = ev.pending.replace("two", "2");
        })
        .stream_hold_back(0)
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    shown.result.unwrap();
    assert_eq!(shown.text, "one 2 three");
    assert_eq!(stored(&a), "one 2 three");
    assert_history(&a);
}

#[tokio::test]
async fn a_malformed_stream_never_shows_unguarded_text() {
    // A text delta without a block start: the assembler rejects it before it is shown.
    let model = ScriptedModel::builder()
        .response(ScriptedResponse::events(vec![
            StreamEvent::BlockDelta(BlockDelta::Text(format!("raw {SECRET}"))),
            StreamEvent::MessageStop {
                stop_reason: StopReason::EndTurn,
            },
        ]))
        .build();
    let mut a = agent(model)
        .intervention(redact_keys())
        .retry_strategy(rein_agent::RetryStrategy::none())
        .build()
        .unwrap();
    let shown = stream_all(&mut a, "go").await;
    assert_eq!(shown.text, "");
    assert!(shown.result.is_err());
    assert_history(&a);
}
