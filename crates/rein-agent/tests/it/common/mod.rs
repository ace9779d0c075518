//! Shared test helpers.
#![allow(unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_agent::TurnInterceptor;
use rein_agent::{Agent, AgentBuilder, RetryStrategy};
use rein_core::{
    ContentBlock, Message, Role, ToolHandle,
    tool::{ToolError, ToolOutput},
};
use rein_models::ScriptedModel;
use serde_json::{Value, json};

/// A log shared between hooks and the test.
#[derive(Clone, Default)]
pub struct Log(pub Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

pub fn echo_tool(log: &Log) -> ToolHandle {
    let log = log.clone();
    ToolHandle::from_fn(
        "echo",
        "Echoes text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        move |input: Value, _cx| {
            let log = log.clone();
            async move {
                let t = input["text"].as_str().unwrap_or_default().to_owned();
                log.push(format!("ran echo:{t}"));
                Ok(ToolOutput::text(t))
            }
        },
    )
}

/// A tool that sleeps `ms` (from input) then answers.
pub fn sleepy_tool(log: &Log) -> ToolHandle {
    let log = log.clone();
    ToolHandle::from_fn(
        "sleep",
        "Sleeps.",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        move |input: Value, _cx| {
            let log = log.clone();
            async move {
                let ms = input["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                log.push(format!("slept {ms}"));
                Ok(ToolOutput::text(format!("slept {ms}")))
            }
        },
    )
}

pub fn failing_tool() -> ToolHandle {
    ToolHandle::from_sync_fn("fail", "Fails.", json!({"type": "object"}), |_, _| {
        Err(ToolError::msg("disk on fire"))
    })
}

pub fn panicking_tool() -> ToolHandle {
    ToolHandle::from_sync_fn("boom", "Panics.", json!({"type": "object"}), |_, _| {
        panic!("kaboom")
    })
}

pub fn agent(model: ScriptedModel) -> AgentBuilder {
    Agent::builder()
        .model(model)
        .retry_strategy(RetryStrategy::default().with_initial_delay(Duration::ZERO))
}

/// Every tool use in history has exactly one result right after it, and roles alternate.
pub fn assert_history_valid(messages: &[Message]) {
    for w in messages.windows(2) {
        assert_ne!(
            w[0].role, w[1].role,
            "two {:?} messages in a row: {messages:#?}",
            w[0].role
        );
    }
    for (i, m) in messages.iter().enumerate() {
        let uses: Vec<_> = m.tool_uses().map(|u| u.tool_use_id.clone()).collect();
        if uses.is_empty() {
            continue;
        }
        assert_eq!(m.role, Role::Assistant);
        let next = messages
            .get(i + 1)
            .unwrap_or_else(|| panic!("tool use without results at the end: {messages:#?}"));
        let results: Vec<_> = next
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult(r) => Some(r.tool_use_id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(uses, results, "results in tool-use order");
    }
}

/// The history invariants of an agent between invocations (SPEC §3.5, §4): roles alternate and
/// every tool use has its results right after it — unless interrupts are pending on a tool
/// phase, when the tool uses of the last message (the paused assistant message) wait for them.
pub fn assert_history(agent: &Agent) {
    let messages = agent.messages();
    let open = messages
        .last()
        .filter(|m| m.role == Role::Assistant && m.tool_uses().next().is_some());
    let (Some(pending), Some(last)) = (agent.pending_interrupts(), open) else {
        return assert_history_valid(messages);
    };
    let ids =
        |m: &Message| -> Vec<String> { m.tool_uses().map(|u| u.tool_use_id.clone()).collect() };
    let rein_agent::Pause::Tools(tools) = pending.pause() else {
        panic!("tool uses wait for results, but the pause is not in a tool phase: {messages:#?}");
    };
    assert_eq!(
        ids(last),
        ids(&tools.message),
        "only the paused assistant message may wait for results"
    );
    let rest = &messages[..messages.len() - 1];
    assert_history_valid(rest);
    assert_ne!(
        rest.last().map(|m| m.role),
        Some(Role::Assistant),
        "two assistant messages in a row: {messages:#?}"
    );
}

/// An invocation state of one string entry.
pub fn state_of(key: &str, value: &str) -> rein_core::Map {
    let mut m = rein_core::Map::new();
    m.insert(key.into(), json!(value));
    m
}

pub fn results_of(m: &Message) -> Vec<(String, String, bool)> {
    m.tool_results()
        .map(|r| (r.tool_use_id.clone(), r.text(), r.is_error()))
        .collect()
}

/// A tool (`research`) that injects its `inject` input through the interceptor in `slot`.
pub fn injecting_tool(slot: Arc<Mutex<Option<TurnInterceptor>>>) -> ToolHandle {
    ToolHandle::from_fn(
        "research",
        "Researches a topic.",
        json!({"type": "object", "properties": {"inject": {"type": "string"}}}),
        move |input: Value, _cx| {
            let slot = slot.clone();
            async move {
                if let Some(text) = input["inject"].as_str() {
                    let i = slot.lock().unwrap().clone().unwrap();
                    i.inject(Message::user(text)).unwrap();
                }
                Ok(ToolOutput::text("findings"))
            }
        },
    )
}

/// The peer's URL, or `None` (after a loud message) when the peers are not running; under CI
/// a missing peer fails the test.
pub fn peer(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI: .ci/peers-llm.sh must start the LLM peers")
        }
        _ => {
            eprintln!(
                "SKIPPED: {var} not set; these end-to-end tests need the peers started by \
                 `bash .ci/peers-llm.sh DIR && source DIR/env`"
            );
            None
        }
    }
}
