//! Helpers shared by the integration tests.
#![allow(unreachable_pub)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_executor::block_on;
use rein_hooks::{HookEvent, HookRegistry};
use rein_interventions::{
    AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
    BeforeToolCallEvent, Error, InterruptAnswer, InterruptAnswers, InterventionRegistry,
    InvocationContext, Message, ModelRequest, ModelResponse, SharedHandler, StopReason, ToolResult,
    ToolUse, Value, json,
};

pub fn dispatch<E: HookEvent>(hooks: &HookRegistry, event: &mut E) -> Result<(), Error> {
    block_on(hooks.dispatch(event))
}

/// Builds a registry from `handlers`, installs it into a fresh hook registry, dispatches.
pub fn run<E: HookEvent>(handlers: Vec<SharedHandler>, event: &mut E) -> Result<(), Error> {
    let registry = InterventionRegistry::new(handlers)?;
    dispatch(&registry.to_hooks(), event)
}

pub fn tool_use() -> ToolUse {
    ToolUse::new("t1", "delete_file", json!({"path": "/tmp/a"}))
}

pub fn before_tool() -> BeforeToolCallEvent {
    before_tool_with(InterruptAnswers::default())
}

pub fn before_tool_with(answers: InterruptAnswers) -> BeforeToolCallEvent {
    BeforeToolCallEvent::new(InvocationContext::default(), tool_use()).with_answers(answers)
}

/// Answers keyed by id, each bound to the fingerprint of `tool_use` as given.
pub fn answers(entries: &[(&str, Value, &ToolUse)]) -> InterruptAnswers {
    let mut map = HashMap::new();
    for (id, response, tu) in entries {
        map.insert(
            (*id).to_owned(),
            InterruptAnswer {
                response: response.clone(),
                fingerprint: Some(tu.fingerprint()),
            },
        );
    }
    InterruptAnswers::new(map)
}

pub fn after_tool() -> AfterToolCallEvent {
    AfterToolCallEvent::new(
        InvocationContext::default(),
        tool_use(),
        ToolResult::success("t1", "deleted"),
    )
}

pub fn before_invocation() -> BeforeInvocationEvent {
    BeforeInvocationEvent::new(
        InvocationContext::default(),
        vec![Message::user("hello")],
        Arc::new(Vec::new()),
    )
}

pub fn before_model() -> BeforeModelCallEvent {
    BeforeModelCallEvent::new(
        InvocationContext::default(),
        ModelRequest::new(vec![Message::user("hello")]).with_system_prompt("be nice"),
    )
}

pub fn after_model() -> AfterModelCallEvent {
    AfterModelCallEvent::new(
        InvocationContext::default(),
        Ok(ModelResponse::new(
            Message::assistant("the answer"),
            StopReason::EndTurn,
        )),
    )
}

/// A call counter.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    pub fn hit(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
