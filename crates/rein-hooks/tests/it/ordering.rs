//! Ordering, async callbacks and error propagation of the hook registry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use futures_executor::block_on;
use rein_core::{
    Error, ToolResult, ToolUse,
    event::{
        AfterInvocationEvent, AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent,
        BeforeModelCallEvent, BeforeToolCallEvent, Cancel, InvocationContext, MessageAddedEvent,
        MessageUpdatedEvent, ModelOutputEvent,
    },
};
use rein_hooks::{HookEvent, HookOrder, HookRegistry};
use serde_json::json;

fn before() -> BeforeToolCallEvent {
    BeforeToolCallEvent::new(
        InvocationContext::default(),
        ToolUse::new("t1", "x", json!({})),
    )
}

fn after() -> AfterToolCallEvent {
    AfterToolCallEvent::new(
        InvocationContext::default(),
        ToolUse::new("t1", "x", json!({})),
        ToolResult::success("t1", "ok"),
    )
}

#[test]
fn before_events_ascend_then_registration_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = HookRegistry::new();
    for (name, order) in [("a", 0), ("b", -100), ("c", 0), ("d", 100), ("e", 90)] {
        let log = log.clone();
        hooks.add_with(HookOrder(order), move |_: &mut BeforeToolCallEvent| {
            log.lock().unwrap().push(name);
        });
    }
    block_on(hooks.dispatch(&mut before())).unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["b", "a", "c", "e", "d"]);
}

#[test]
fn after_events_reverse_ties_but_orders_still_ascend() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = HookRegistry::new();
    for (name, order) in [("a", 0), ("b", -90), ("c", 0), ("d", 100), ("e", -90)] {
        let log = log.clone();
        hooks.add_with(HookOrder(order), move |_: &mut AfterToolCallEvent| {
            log.lock().unwrap().push(name);
        });
    }
    block_on(hooks.dispatch(&mut after())).unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["e", "b", "c", "a", "d"]);
}

#[test]
fn async_callbacks_mutate_the_event_and_errors_stop_dispatch() {
    let mut hooks = HookRegistry::new();
    hooks.add_async(|ev: &mut BeforeToolCallEvent| {
        Box::pin(async move {
            ev.cancel_tool = Cancel::Message("no".into());
        })
    });
    hooks.add(
        |_: &mut BeforeToolCallEvent| -> Result<(), std::io::Error> {
            Err(std::io::Error::other("boom"))
        },
    );
    let ran = Arc::new(Mutex::new(false));
    let r2 = ran.clone();
    hooks.add(move |_: &mut BeforeToolCallEvent| *r2.lock().unwrap() = true);
    let mut ev = before();
    let err = block_on(hooks.dispatch(&mut ev)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Hook {
                event: "before_tool_call",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(ev.cancel_tool, Cancel::Message("no".into()));
    assert!(!*ran.lock().unwrap(), "dispatch stops at the first error");
}

#[test]
fn core_errors_pass_through_unwrapped() {
    let mut hooks = HookRegistry::new();
    hooks.add(|_: &mut BeforeToolCallEvent| -> Result<(), Error> { Err(Error::InterruptsPending) });
    let err = block_on(hooks.dispatch(&mut before())).unwrap_err();
    assert!(matches!(err, Error::InterruptsPending));
}

#[test]
fn merge_keeps_orders() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut a = HookRegistry::new();
    let mut b = HookRegistry::new();
    let l = log.clone();
    a.add_with(HookOrder::SDK_LAST, move |_: &mut BeforeToolCallEvent| {
        l.lock().unwrap().push("last")
    });
    let l = log.clone();
    b.add_with(HookOrder::SDK_FIRST, move |_: &mut BeforeToolCallEvent| {
        l.lock().unwrap().push("first")
    });
    a.merge(b).unwrap();
    block_on(a.dispatch(&mut before())).unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["first", "last"]);
    assert!(a.has::<BeforeToolCallEvent>());
    assert!(!a.has::<AfterToolCallEvent>());
}

/// Registers in `hooks` one callback that counts into `ran` for the event `E`.
fn count_into<E: HookEvent>(hooks: &mut HookRegistry, ran: &Arc<Mutex<usize>>) {
    let ran = ran.clone();
    hooks.add(move |_: &mut E| *ran.lock().unwrap() += 1);
}

#[test]
fn merge_keeps_the_callbacks_of_every_event_stream_guards_included() {
    // `AgentBuilder::hooks(registry)` merges: an event left out of `merge` silently loses its
    // callbacks (it once dropped `model_output`, the stream guard).
    let ran = Arc::new(Mutex::new(0));
    let mut other = HookRegistry::new();
    count_into::<BeforeInvocationEvent>(&mut other, &ran);
    count_into::<BeforeModelCallEvent>(&mut other, &ran);
    count_into::<AfterModelCallEvent>(&mut other, &ran);
    count_into::<ModelOutputEvent>(&mut other, &ran);
    count_into::<BeforeToolCallEvent>(&mut other, &ran);
    count_into::<AfterToolCallEvent>(&mut other, &ran);
    count_into::<MessageAddedEvent>(&mut other, &ran);
    count_into::<MessageUpdatedEvent>(&mut other, &ran);
    count_into::<AfterInvocationEvent>(&mut other, &ran);
    let mut hooks = HookRegistry::new();
    hooks.merge(other).unwrap();
    assert_eq!(hooks.count::<BeforeInvocationEvent>(), 1);
    assert_eq!(hooks.count::<BeforeModelCallEvent>(), 1);
    assert_eq!(hooks.count::<AfterModelCallEvent>(), 1);
    assert_eq!(hooks.count::<ModelOutputEvent>(), 1, "the stream guard");
    assert_eq!(hooks.count::<BeforeToolCallEvent>(), 1);
    assert_eq!(hooks.count::<AfterToolCallEvent>(), 1);
    assert_eq!(hooks.count::<MessageAddedEvent>(), 1);
    assert_eq!(hooks.count::<MessageUpdatedEvent>(), 1);
    assert_eq!(hooks.count::<AfterInvocationEvent>(), 1);
    let mut output = ModelOutputEvent::new(InvocationContext::default());
    block_on(hooks.dispatch(&mut output)).unwrap();
    assert_eq!(*ran.lock().unwrap(), 1, "the merged stream guard runs");
}
