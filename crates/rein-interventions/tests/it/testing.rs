//! The `testing` module (handlers tested without an agent), and the re-exports a handler library
//! needs: everything here is named through `rein_interventions::` only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use rein_interventions::testing::{self, ModelCall, ModelReply, Prompt, ToolCall};
use rein_interventions::{
    AfterModelCallAction, AfterModelCallEvent, AfterToolCallAction, BeforeInvocationAction,
    BeforeModelCallAction, BeforeToolCallAction, BeforeToolCallEvent, Cancel, DecisionAction,
    DecisionOutcome, EventSet, HandlerError, Intervention, InterventionContext,
    InterventionHandler, Message, Mode, ModelError, ModelErrorKind, OnError, SharedHandler,
    ToolHandle, ToolResultContent, ToolUse, Usage, json,
};

/// A realistic handler: it reads the tool that would run, the usage of a model call and the
/// model's errors — every type through `rein_interventions`.
struct Budget {
    max_output_tokens: u64,
}

impl InterventionHandler for Budget {
    fn name(&self) -> &str {
        "budget"
    }

    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL | EventSet::AFTER_MODEL_CALL
    }

    async fn before_tool_call(
        &self,
        event: &BeforeToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        let tool: Option<&ToolHandle> = event.selected_tool.as_ref();
        Ok(match tool {
            None => BeforeToolCallAction::deny("unknown tool"),
            Some(t) if t.spec().description.contains("costly") => {
                BeforeToolCallAction::guide("use the cheap tool")
            }
            Some(_) => BeforeToolCallAction::Proceed,
        })
    }

    async fn after_model_call(
        &self,
        event: &AfterModelCallEvent,
        _cx: &InterventionContext,
    ) -> Result<AfterModelCallAction, HandlerError> {
        if let Some(e) = event.error() {
            let e: &ModelError = e;
            return Err(HandlerError::new(format!("not called on errors: {e}")));
        }
        let usage: Usage = event.response().map(|r| r.usage).unwrap_or_default();
        Ok(if usage.output_tokens > self.max_output_tokens {
            AfterModelCallAction::guide("answer in fewer words")
        } else {
            AfterModelCallAction::Proceed
        })
    }
}

fn tool(name: &str, description: &str) -> ToolHandle {
    ToolHandle::from_sync_fn(name, description, json!({"type": "object"}), |_, _| {
        Ok("ok".into())
    })
}

#[test]
fn a_handler_library_needs_only_this_crate() {
    let budget = || Budget {
        max_output_tokens: 50,
    };
    let call = ToolCall::new("search", json!({"q": "rust"}));

    let out = testing::run([budget()], call.clone().event());
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message("DENIED: unknown tool".into())
    );
    let out = testing::run(
        [budget()],
        call.clone().tool(tool("search", "a costly search")).event(),
    );
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message("GUIDANCE: [budget] use the cheap tool".into())
    );
    let out = testing::run([budget()], call.tool(tool("search", "cheap")).event());
    assert_eq!(out.event.cancel_tool, Cancel::No);
    assert!(out.decisions.is_empty());

    let out = testing::run(
        [budget()],
        ModelReply::text("a long answer")
            .usage(Usage::new(10, 80))
            .event(),
    );
    assert!(out.event.retry);
    assert_eq!(out.event.guidance(), ["[budget] answer in fewer words"]);
    let out = testing::run(
        [budget()],
        ModelReply::text("short").usage(Usage::new(10, 8)).event(),
    );
    assert!(!out.event.retry);

    // Handlers are not called on a failed model call.
    let out = testing::run(
        [budget()],
        ModelReply::error(ModelError::throttled("slow down")).event(),
    );
    assert!(out.result.is_ok() && out.decisions.is_empty());
    assert_eq!(
        out.event.error().map(ModelError::kind),
        Some(ModelErrorKind::Throttled)
    );
}

#[test]
fn run_applies_on_error_and_records_the_audit() {
    let failing = |on_error: OnError| {
        Intervention::named("flaky")
            .on_error(on_error)
            .before_tool_call(|_, _| Err::<BeforeToolCallAction, _>(HandlerError::new("boom")))
    };
    let call = ToolCall::new("send_email", json!({"to": "ann"}));

    let out = testing::run([failing(OnError::Deny)], call.clone().event());
    assert!(out.result.is_ok());
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message("DENIED: Handler threw: boom".into())
    );
    assert_eq!(out.decisions[0].action, DecisionAction::Error);
    assert_eq!(out.decisions[0].on_error, Some(OnError::Deny));

    let out = testing::run([failing(OnError::Throw)], call.clone().event());
    let error = out.result.unwrap_err().to_string();
    assert!(error.contains("flaky") && error.contains("boom"), "{error}");
    assert_eq!(out.decisions.len(), 1);

    let out = testing::run([failing(OnError::Proceed)], call.clone().event());
    assert!(out.result.is_ok());
    assert_eq!(out.event.cancel_tool, Cancel::No);

    // Several handlers, in order: a shadowed deny is recorded, the transform applies.
    let shadow = Intervention::named("shadow")
        .mode(Mode::Shadow)
        .before_tool_call(|_, _| BeforeToolCallAction::deny("would deny"));
    let tag = Intervention::named("tag")
        .before_tool_call(|_, _| BeforeToolCallAction::transform(|t| t.input["tag"] = json!(1)));
    let out = testing::run(
        [SharedHandler::new(shadow), SharedHandler::new(tag)],
        call.clone().state(json!({"user": "ann"})).event(),
    );
    assert_eq!(out.event.cancel_tool, Cancel::No);
    assert_eq!(out.event.tool_use().input, json!({"to": "ann", "tag": 1}));
    let outcomes: Vec<_> = out.decisions.iter().map(|d| d.outcome).collect();
    assert_eq!(
        outcomes,
        [DecisionOutcome::Shadowed, DecisionOutcome::Applied]
    );
    assert_eq!(out.decisions, out.event.decisions());

    // A duplicate name is the build error.
    let a = || Intervention::named("same");
    let out = testing::run([a(), a()], call.event());
    assert_eq!(
        out.result.unwrap_err().to_string(),
        "duplicate intervention handler name: 'same'"
    );
}

#[test]
fn apply_shows_what_an_action_does_to_a_draft() {
    let event = ToolCall::new("query", json!({"db": "prod"})).event();
    let draft = testing::apply(
        &event,
        BeforeToolCallAction::transform(|t| t.input["db"] = json!("staging")),
    )
    .unwrap();
    assert_eq!(draft.input, json!({"db": "staging"}));
    assert_eq!(draft.name, "query");
    assert_eq!(event.tool_use().input, json!({"db": "prod"}), "a copy");

    let unchanged = testing::apply(&event, BeforeToolCallAction::Proceed).unwrap();
    assert_eq!(unchanged.input, json!({"db": "prod"}));
    let failed = testing::apply(
        &event,
        BeforeToolCallAction::try_transform(|_| Err(HandlerError::new("bad edit"))),
    );
    assert_eq!(failed.unwrap_err().message(), "bad edit");
    let deny = testing::apply(&event, BeforeToolCallAction::deny("no"));
    assert!(deny.unwrap_err().message().contains("deny"));

    let after = ToolCall::new("read", json!({})).returned("SECRET 42");
    let draft = testing::apply(
        &after,
        AfterToolCallAction::transform(|r| r.set_text("[redacted] 42")),
    )
    .unwrap();
    assert_eq!(
        draft.content,
        vec![ToolResultContent::Text("[redacted] 42".into())]
    );

    let reply = ModelReply::text("hi").event();
    let message = testing::apply(
        &reply,
        AfterModelCallAction::transform(|m| *m = Message::assistant("hello")),
    )
    .unwrap();
    assert_eq!(message.text(), "hello");
    let failed = ModelReply::error(ModelError::server("down")).event();
    assert!(testing::apply(&failed, AfterModelCallAction::Proceed).is_err());
}

#[test]
fn every_event_has_a_builder() {
    let handler = Arc::new(
        Intervention::named("in")
            .before_invocation(|ev, _| {
                if ev.messages[0].text().contains("secret") {
                    BeforeInvocationAction::deny("no secrets")
                } else {
                    BeforeInvocationAction::Proceed
                }
            })
            .before_model_call(|ev, _| match ev.model_call_index() {
                0 => BeforeModelCallAction::guide("be brief"),
                _ => BeforeModelCallAction::Proceed,
            })
            .after_tool_call(|ev, _| {
                if ev.result.is_error() {
                    AfterToolCallAction::transform(|r| r.set_text("the tool failed"))
                } else {
                    AfterToolCallAction::Proceed
                }
            }),
    );
    let handlers = || [handler.clone()];

    let out = testing::run(handlers(), Prompt::new("my secret").injected().event());
    assert!(out.event.is_injected());
    assert_eq!(
        out.event.cancel,
        Cancel::Message("DENIED: no secrets".into())
    );

    let out = testing::run(handlers(), ModelCall::new("hi").event());
    assert_eq!(out.event.guidance(), ["[in] be brief"]);
    let out = testing::run(handlers(), ModelCall::new("hi").index(1).event());
    assert!(out.event.guidance().is_empty());

    let out = testing::run(
        handlers(),
        ToolCall::new("fetch", json!({})).failed("HTTP 500 at /internal"),
    );
    assert_eq!(out.event.result.text(), "the tool failed");
    let out = testing::run(handlers(), ToolCall::new("fetch", json!({})).returned("ok"));
    assert_eq!(out.event.result.text(), "ok");

    let reply = ModelReply::text("Let me look.")
        .tool_use(ToolUse::new("t1", "search", json!({})))
        .event();
    assert!(reply.response().unwrap().message.has_tool_use());
}

/// Waits for another thread (as an async handler waits for I/O): pending until it wakes us.
async fn woken_by_another_thread() {
    let done = Arc::new(Mutex::new((false, None::<Waker>)));
    let other = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        let mut state = other.lock().unwrap();
        state.0 = true;
        if let Some(waker) = state.1.take() {
            waker.wake();
        }
    });
    std::future::poll_fn(|cx| {
        let mut state = done.lock().unwrap();
        if state.0 {
            Poll::Ready(())
        } else {
            state.1 = Some(cx.waker().clone());
            Poll::Pending
        }
    })
    .await;
}

struct Slow;

impl InterventionHandler for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    async fn before_tool_call(
        &self,
        _event: &BeforeToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        woken_by_another_thread().await;
        Ok(BeforeToolCallAction::deny("after a wait"))
    }
}

#[test]
fn async_handlers_run_without_a_runtime() {
    let event = ToolCall::new("x", json!({})).event();
    let cx = InterventionContext::from(event.context());
    let action = testing::block_on(Slow.before_tool_call(&event, &cx)).unwrap();
    assert!(matches!(action, BeforeToolCallAction::Deny { .. }));
    let out = testing::run([Slow], event);
    assert_eq!(
        out.event.cancel_tool,
        Cancel::Message("DENIED: after a wait".into())
    );
}
