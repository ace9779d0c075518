//! Handler errors (SPEC §3.4): the three `on_error` policies on before and after events,
//! panics in sync and async handlers, failing transforms, and trait-based async handlers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_interventions::{
    AfterModelCallAction, AfterModelCallEvent, AfterToolCallAction, AfterToolCallEvent,
    BeforeToolCallAction, BeforeToolCallEvent, Cancel, DecisionAction, DecisionOutcome, Error,
    EventSet, HandlerError, Intervention, InterventionContext, InterventionHandler, Mode, OnError,
    SharedHandler, ToolResult, json,
};

fn failing_before(on_error: OnError) -> SharedHandler {
    Intervention::named("flaky")
        .on_error(on_error)
        .before_tool_call(|_, _| Err::<BeforeToolCallAction, _>(HandlerError::new("db down")))
        .into()
}

fn failing_after(on_error: OnError) -> SharedHandler {
    Intervention::named("flaky")
        .on_error(on_error)
        .after_tool_call(|_, _| Err::<AfterToolCallAction, _>(HandlerError::new("db down")))
        .into()
}

fn error_record_policy(decisions: &[rein_interventions::DecisionRecord]) -> Option<OnError> {
    let d = decisions
        .iter()
        .find(|d| d.action == DecisionAction::Error)?;
    assert_eq!(d.outcome, DecisionOutcome::Error);
    assert_eq!(d.text.as_deref(), Some("db down"));
    d.on_error
}

#[test]
fn throw_on_a_before_event_fails_with_a_typed_error() {
    let mut ev = before_tool();
    let err = run(vec![failing_before(OnError::Throw)], &mut ev).unwrap_err();
    match &err {
        Error::Handler {
            handler,
            event,
            message,
        } => {
            assert_eq!(handler, "flaky");
            assert_eq!(*event, "before_tool_call");
            assert_eq!(message, "db down");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(error_record_policy(ev.decisions()), Some(OnError::Throw));
}

#[test]
fn proceed_on_a_before_event_fails_open() {
    let later = Counter::default();
    let l = later.clone();
    let mut ev = before_tool();
    run(
        vec![
            failing_before(OnError::Proceed),
            Intervention::named("later")
                .before_tool_call(move |_, _| {
                    l.hit();
                    BeforeToolCallAction::Proceed
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(!ev.cancel_tool.is_cancelled());
    assert_eq!(later.get(), 1);
    assert_eq!(error_record_policy(ev.decisions()), Some(OnError::Proceed));
}

#[test]
fn deny_on_a_before_event_fails_closed() {
    let mut ev = before_tool();
    run(vec![failing_before(OnError::Deny)], &mut ev).unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("DENIED: Handler threw: db down".into())
    );
    assert_eq!(error_record_policy(ev.decisions()), Some(OnError::Deny));
}

#[test]
fn throw_on_an_after_event_fails() {
    let mut ev = after_tool();
    let err = run(vec![failing_after(OnError::Throw)], &mut ev).unwrap_err();
    assert_eq!(
        err.to_string(),
        "intervention handler 'flaky' failed on after_tool_call: db down"
    );
}

#[test]
fn proceed_on_an_after_event_keeps_the_result() {
    let mut ev = after_tool();
    run(vec![failing_after(OnError::Proceed)], &mut ev).unwrap();
    assert_eq!(ev.result, ToolResult::success("t1", "deleted"));
    assert_eq!(error_record_policy(ev.decisions()), Some(OnError::Proceed));
}

#[test]
fn deny_on_after_tool_call_replaces_the_result_with_an_error() {
    let mut ev = after_tool();
    run(
        vec![
            Intervention::named("t")
                .after_tool_call(|_, _| AfterToolCallAction::transform(|r| r.set_text("edited")))
                .into(),
            failing_after(OnError::Deny),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.result,
        ToolResult::error("t1", "DENIED: Handler threw: db down")
    );
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Overridden);
}

#[test]
fn deny_on_after_model_call_withholds_the_response() {
    let mut ev = after_model();
    run(
        vec![
            Intervention::named("g")
                .after_model_call(|_, _| AfterModelCallAction::guide("retry please"))
                .into(),
            Intervention::named("flaky")
                .on_error(OnError::Deny)
                .after_model_call(|_, _| {
                    Err::<AfterModelCallAction, _>(HandlerError::new("classifier down"))
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.withheld(),
        Some("DENIED: Handler threw: classifier down")
    );
    // Deny beats guide: no retry, no guidance.
    assert!(!ev.retry);
    assert!(ev.guidance().is_empty());
    assert_eq!(ev.decisions()[0].outcome, DecisionOutcome::Overridden);
}

#[test]
fn a_sync_panic_is_a_handler_error() {
    let mut ev = before_tool();
    let err = run(
        vec![
            Intervention::named("boom")
                .before_tool_call(|_, _| -> BeforeToolCallAction { panic!("kaboom") })
                .into(),
        ],
        &mut ev,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "intervention handler 'boom' failed on before_tool_call: handler panicked: kaboom"
    );

    let mut ev = before_tool();
    run(
        vec![
            Intervention::named("boom")
                .on_error(OnError::Deny)
                .before_tool_call(|_, _| -> BeforeToolCallAction { panic!("kaboom") })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("DENIED: Handler threw: handler panicked: kaboom".into())
    );
}

#[test]
fn an_async_panic_is_a_handler_error() {
    let mut ev = before_tool();
    let err = run(
        vec![
            Intervention::named("boom")
                .before_tool_call_async(|ev, _| {
                    Box::pin(async move {
                        if ev.tool_use().name == "delete_file" {
                            panic!("async kaboom");
                        }
                        BeforeToolCallAction::Proceed
                    })
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap_err();
    assert!(err.to_string().ends_with("handler panicked: async kaboom"));
}

#[test]
fn a_failing_transform_is_a_handler_error_and_changes_nothing() {
    let mut ev = before_tool();
    run(
        vec![
            Intervention::named("t")
                .on_error(OnError::Proceed)
                .before_tool_call(|_, _| {
                    BeforeToolCallAction::try_transform(|t| {
                        t.name = "half-edited".into();
                        Err(HandlerError::new("cannot rewrite"))
                    })
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.tool_use(), &tool_use());
    assert!(!ev.is_edited());
    assert_eq!(ev.decisions()[0].action, DecisionAction::Error);

    let mut ev = before_tool();
    let err = run(
        vec![
            Intervention::named("t")
                .before_tool_call(|_, _| {
                    BeforeToolCallAction::transform(|_| panic!("edit panicked"))
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap_err();
    assert!(err.to_string().ends_with("handler panicked: edit panicked"));
    assert_eq!(ev.tool_use(), &tool_use());
}

#[test]
fn shadow_handlers_never_fail_the_invocation() {
    let mut ev = before_tool();
    run(
        vec![
            Intervention::named("new-policy")
                .mode(Mode::Shadow)
                .on_error(OnError::Throw)
                .before_tool_call(|_, _| -> BeforeToolCallAction { panic!("bug in new policy") })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(!ev.cancel_tool.is_cancelled());
    let d = &ev.decisions()[0];
    assert_eq!(d.outcome, DecisionOutcome::Error);
    assert_eq!(d.on_error, Some(OnError::Proceed));
}

/// A trait-based handler with real `async fn` methods.
struct Classifier {
    banned: &'static str,
}

impl InterventionHandler for Classifier {
    fn name(&self) -> &str {
        "classifier"
    }
    fn on_error(&self) -> OnError {
        OnError::Deny
    }
    fn subscriptions(&self) -> EventSet {
        EventSet::BEFORE_TOOL_CALL | EventSet::AFTER_TOOL_CALL
    }
    async fn before_tool_call(
        &self,
        event: &BeforeToolCallEvent,
        cx: &InterventionContext,
    ) -> Result<BeforeToolCallAction, HandlerError> {
        // Suspend once, as a real I/O call would.
        YieldOnce(false).await;
        if cx.invocation_state().get("trusted") == Some(&json!(true)) {
            return Ok(BeforeToolCallAction::Proceed);
        }
        let input = serde_json::to_string(&event.tool_use().input)?;
        if input.contains(self.banned) {
            return Ok(BeforeToolCallAction::deny(format!(
                "{} is banned",
                self.banned
            )));
        }
        Ok(BeforeToolCallAction::Proceed)
    }
    async fn after_tool_call(
        &self,
        event: &AfterToolCallEvent,
        _cx: &InterventionContext,
    ) -> Result<AfterToolCallAction, HandlerError> {
        YieldOnce(false).await;
        if event.result.text().is_empty() {
            return Err(HandlerError::new("empty result"));
        }
        Ok(AfterToolCallAction::Proceed)
    }
}

struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

#[test]
fn trait_handlers_with_async_fn_run_through_the_registry() {
    let mut ev = before_tool();
    run(vec![Classifier { banned: "/tmp" }.into()], &mut ev).unwrap();
    assert_eq!(
        ev.cancel_tool,
        Cancel::Message("DENIED: /tmp is banned".into())
    );

    let mut ev = BeforeToolCallEvent::new(
        rein_interventions::InvocationContext::new(
            rein_interventions::InvocationState::from_value(json!({"trusted": true})),
        ),
        tool_use(),
    );
    run(vec![Classifier { banned: "/tmp" }.into()], &mut ev).unwrap();
    assert!(!ev.cancel_tool.is_cancelled());

    let mut ev = AfterToolCallEvent::new(
        Default::default(),
        tool_use(),
        ToolResult::success("t1", ""),
    );
    run(vec![Classifier { banned: "/tmp" }.into()], &mut ev).unwrap();
    assert_eq!(
        ev.result,
        ToolResult::error("t1", "DENIED: Handler threw: empty result")
    );
}

#[test]
fn sync_and_async_handlers_mix_in_one_pass() {
    let mut ev = AfterModelCallEvent::new(
        Default::default(),
        Ok(rein_interventions::ModelResponse::new(
            rein_interventions::Message::assistant("draft"),
            rein_interventions::StopReason::EndTurn,
        )),
    );
    run(
        vec![
            Intervention::named("sync")
                .after_model_call(|_, _| AfterModelCallAction::guide("one"))
                .into(),
            Intervention::named("async")
                .after_model_call_async(|ev, _| {
                    Box::pin(async move {
                        YieldOnce(false).await;
                        let text = ev.response().map(|r| r.message.text());
                        assert_eq!(text.as_deref(), Some("draft"));
                        AfterModelCallAction::guide("two")
                    })
                })
                .into(),
            std::sync::Arc::new(Classifier { banned: "x" }).into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert!(ev.retry);
    assert_eq!(ev.guidance(), ["[sync] one\n[async] two".to_owned()]);
}

#[test]
fn a_shadow_transform_is_evaluated_and_its_failure_recorded() {
    let mut ev = before_tool();
    run(
        vec![
            Intervention::named("s")
                .mode(Mode::Shadow)
                .before_tool_call(|_, _| {
                    BeforeToolCallAction::try_transform(|_| Err(HandlerError::new("bad edit")))
                })
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(ev.tool_use(), &tool_use());
    let d = &ev.decisions()[0];
    assert_eq!(
        (d.action, d.outcome),
        (DecisionAction::Error, DecisionOutcome::Error)
    );
    assert_eq!(d.text.as_deref(), Some("bad edit"));
}

#[test]
fn deny_on_error_cancels_before_invocation_and_before_model_call() {
    use rein_interventions::{BeforeInvocationAction, BeforeModelCallAction};
    let mut ev = before_invocation();
    run(
        vec![
            Intervention::named("f")
                .on_error(OnError::Deny)
                .before_invocation(|_, _| Err::<BeforeInvocationAction, _>(HandlerError::new("x")))
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel,
        Cancel::Message("DENIED: Handler threw: x".into())
    );

    let mut ev = before_model();
    run(
        vec![
            Intervention::named("f")
                .on_error(OnError::Deny)
                .before_model_call(|_, _| Err::<BeforeModelCallAction, _>(HandlerError::new("y")))
                .into(),
        ],
        &mut ev,
    )
    .unwrap();
    assert_eq!(
        ev.cancel,
        Cancel::Message("DENIED: Handler threw: y".into())
    );
    assert!(ev.guidance().is_empty());
}
