//! `rein replay`: runs a scenario against a scripted model and prints the transcript.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rein_agent::{Agent, AgentEvent, Input, RetryStrategy, ToolExecutor, TurnInterceptor};
use rein_core::{
    ContentBlock, Error, Message, ToolHandle,
    audit::DecisionRecord,
    error::BuildError,
    event::AfterModelCallEvent,
    message::{InterruptResponse, ReasoningContent},
    result::{AgentResult, InjectionRecord},
    state::InvocationState,
    stream::Usage,
    tool::{ToolError, ToolOutput},
};
use rein_interventions::policy::{LoadOptions, Template, TemplateVars};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

use crate::scenario::{Executor, Invalid, ModelErrorName, Scenario, Step, ToolDef};

/// Why a replay did not produce a transcript.
#[derive(Debug)]
pub(crate) enum ReplayError {
    /// The scenario is invalid (exit 2).
    Invalid(Invalid),
    /// Something else failed (exit 1).
    Internal(String),
}

impl From<Invalid> for ReplayError {
    fn from(e: Invalid) -> Self {
        Self::Invalid(e)
    }
}

/// Reads, checks and runs a scenario file; returns the transcript.
pub(crate) fn replay_file(path: &std::path::Path) -> Result<Value, ReplayError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ReplayError::Internal(format!("cannot read {}: {e}", path.display())))?;
    let scenario = Scenario::parse(&text)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| ReplayError::Internal(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(run(scenario))
}

fn scripted_model(scenario: &Scenario) -> ScriptedModel {
    let mut b = ScriptedModel::builder().model_id(format!("scenario:{}", scenario.name));
    if let Some(n) = scenario.stream_chunk_chars {
        b = b.chunk_chars(n);
    }
    for entry in &scenario.model {
        if let Some(err) = entry.error {
            b = match err {
                ModelErrorName::Throttled => b.throttled(),
                ModelErrorName::ContextOverflow => b.context_overflow(),
                ModelErrorName::Server => b.server_error(),
            };
            continue;
        }
        let mut r = ScriptedResponse::new();
        for block in entry.content.iter().flatten() {
            r = match block {
                ContentBlock::Text(t) => r.text(t.clone()),
                ContentBlock::ToolUse(u) => r.tool_use(&u.tool_use_id, &u.name, u.input.clone()),
                ContentBlock::ReasoningContent(ReasoningContent::ReasoningText(t)) => {
                    r.reasoning(t.text.clone(), t.signature.as_deref())
                }
                // Checked when parsed: nothing else is accepted.
                _ => r,
            };
        }
        if let Some(s) = entry.stop_reason {
            r = r.stop_reason(s);
        }
        if let Some(u) = entry.usage {
            r = r.usage(Usage::new(u.input_tokens, u.output_tokens));
        }
        b = b.response(r);
    }
    b.build()
}

type CallLog = Arc<Mutex<Vec<Value>>>;

fn scripted_tool(def: &ToolDef, calls: CallLog) -> ToolHandle {
    let name = def.name.clone();
    let result = def.result.as_deref().map(Template::parse);
    let error = def.error.clone();
    ToolHandle::from_sync_fn(
        def.name.clone(),
        def.description.clone(),
        def.input_schema.clone(),
        move |input, cx| {
            calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(json!({"name": name, "input": input}));
            if let Some(e) = &error {
                return Err(ToolError::msg(e.clone()));
            }
            let vars = TemplateVars::new()
                .tool(&name, &input)
                .state(cx.invocation_state());
            Ok(ToolOutput::text(
                result.as_ref().map(|t| t.render(&vars)).unwrap_or_default(),
            ))
        },
    )
}

/// Injections waiting for the step's first model response.
#[derive(Default)]
struct InjectState {
    interceptor: Option<TurnInterceptor>,
    pending: Vec<String>,
}

async fn run(scenario: Scenario) -> Result<Value, ReplayError> {
    let policy = crate::policies::load(scenario.policy.clone(), &LoadOptions::scenario(), None)
        .map_err(|e| ReplayError::Invalid(Invalid(e)))?;
    let model = scripted_model(&scenario);
    let calls = CallLog::default();
    let inject = Arc::new(Mutex::new(InjectState::default()));
    let hook_inject = Arc::clone(&inject);
    let mut builder = Agent::builder()
        .name(if scenario.name.is_empty() {
            "replay"
        } else {
            scenario.name.as_str()
        })
        .model(model.clone())
        .retry_strategy(
            RetryStrategy::default()
                .with_initial_delay(Duration::ZERO)
                .with_max_delay(Duration::ZERO)
                .with_jitter(false),
        )
        .tool_executor(match scenario.tool_executor {
            Executor::Concurrent => ToolExecutor::default(),
            Executor::Sequential => ToolExecutor::Sequential,
        })
        .tools(
            scenario
                .tools
                .iter()
                .map(|t| scripted_tool(t, Arc::clone(&calls))),
        )
        .interventions(policy)
        .hook(move |_ev: &mut AfterModelCallEvent| {
            let mut s = hook_inject.lock().unwrap_or_else(PoisonError::into_inner);
            let pending = std::mem::take(&mut s.pending);
            if let Some(interceptor) = &s.interceptor {
                for text in pending {
                    // Cannot fail: the hook runs inside the invocation.
                    let _ = interceptor.inject(Message::user(text));
                }
            }
        });
    if let Some(p) = &scenario.system_prompt {
        builder = builder.system_prompt(p.as_str());
    }
    if let Some(n) = scenario.max_hook_retries {
        builder = builder.max_hook_retries(n);
    }
    if let Some(n) = scenario.stream_hold_back {
        builder = builder.stream_hold_back(n);
    }
    let mut agent = builder
        .build()
        .map_err(|e| ReplayError::Invalid(Invalid(format!("the agent cannot be built: {e}"))))?;
    inject
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .interceptor = Some(agent.interceptor());

    let mut steps = Vec::with_capacity(scenario.steps.len());
    for step in &scenario.steps {
        inject
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending = step.inject.clone();
        let input = step_input(&agent, step);
        steps.push(run_step(&mut agent, input).await);
        inject
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .clear();
    }

    let requests: Vec<Value> = model
        .requests()
        .iter()
        .map(|r| {
            json!({
                "system_prompt": r.system_prompt.as_deref(),
                "messages": messages_json(&r.messages),
                "tools": r.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let tool_calls = calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Ok(json!({
        "steps": steps,
        "messages": messages_json(agent.messages()),
        "model_requests": requests,
        "tool_calls": tool_calls,
    }))
}

fn step_input(agent: &Agent, step: &Step) -> Input {
    let mut input = match (&step.prompt, &step.resume) {
        (Some(p), _) => Input::text(p.clone()),
        (None, answers) => {
            let pending = agent.pending_interrupts();
            let mut responses = Vec::new();
            for a in answers.iter().flatten() {
                if let Some(id) = &a.id {
                    responses.push(InterruptResponse::new(id.clone(), a.response.clone()));
                } else if let Some(name) = &a.interrupt {
                    let ids: Vec<&str> = pending
                        .map(|p| {
                            p.interrupts
                                .iter()
                                .filter(|i| &i.name == name)
                                .map(|i| i.id.as_str())
                                .collect()
                        })
                        .unwrap_or_default();
                    if ids.is_empty() {
                        // No pending interrupt has that name: the agent reports the typed error.
                        responses.push(InterruptResponse::new(name.clone(), a.response.clone()));
                    }
                    for id in ids {
                        responses.push(InterruptResponse::new(id, a.response.clone()));
                    }
                }
            }
            Input::resume(responses)
        }
    };
    if let Some(state) = &step.invocation_state {
        input = input.with_state(InvocationState::from_map(state.clone()));
    }
    input
}

async fn run_step(agent: &mut Agent, input: Input) -> Value {
    let mut decisions = Vec::new();
    let mut injections = Vec::new();
    let mut stream = agent.stream(input);
    let mut outcome: Option<Result<AgentResult, Error>> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(AgentEvent::Decision(d)) => decisions.push(decision_json(&d)),
            Ok(AgentEvent::InjectionConsumed { id, .. }) => {
                injections
                    .push(json!({"id": id.to_string(), "outcome": "consumed", "reason": null}));
            }
            Ok(AgentEvent::InjectionRejected { id, reason }) => {
                injections
                    .push(json!({"id": id.to_string(), "outcome": "rejected", "reason": reason}));
            }
            Ok(AgentEvent::Finished(r)) => outcome = Some(Ok(r)),
            Ok(_) => {}
            Err(e) => outcome = Some(Err(e)),
        }
    }
    match outcome {
        Some(Ok(r)) => json!({
            "stop_reason": r.stop_reason.as_str(),
            "message": r.message,
            "interrupts": r.interrupts.iter().map(|i| json!({
                "id": i.id, "name": i.name, "reason": i.reason,
            })).collect::<Vec<_>>(),
            "decisions": r.decisions.iter().map(decision_json).collect::<Vec<_>>(),
            "injections": r.injections.iter().map(injection_json).collect::<Vec<_>>(),
            "error": null,
        }),
        Some(Err(e)) => failed(&e, decisions, injections),
        None => failed(
            &Error::Internal("the invocation ended without a result"),
            decisions,
            injections,
        ),
    }
}

fn failed(e: &Error, decisions: Vec<Value>, injections: Vec<Value>) -> Value {
    json!({
        "stop_reason": null,
        "message": null,
        "interrupts": [],
        "decisions": decisions,
        "injections": injections,
        "error": {"kind": error_kind(e), "message": e.to_string()},
    })
}

/// The error variant in snake_case.
pub(crate) fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::InvalidMessage(_) => "invalid_message",
        Error::MalformedStream(_) => "malformed_stream",
        Error::Model(_) => "model",
        Error::Hook { .. } => "hook",
        Error::Handler { .. } => "handler",
        Error::Build(BuildError::DuplicatePlugin(_)) => "duplicate_plugin",
        Error::Build(BuildError::DuplicateHandler(_)) => "duplicate_handler",
        Error::Build(_) => "config",
        Error::NoPendingInterrupts => "no_pending_interrupts",
        Error::UnknownInterrupt(_) => "unknown_interrupt",
        Error::InterruptsPending => "interrupts_pending",
        Error::PendingMessageMissing => "pending_message_missing",
        Error::Session(_) => "session",
        Error::Internal(_) => "internal",
        _ => "other",
    }
}

fn decision_json(d: &DecisionRecord) -> Value {
    let mut v = json!({
        "handler": d.handler,
        "event": d.event.as_str(),
        "action": d.action,
        "text": d.text,
        "tool_use_id": d.tool_use_id,
        "outcome": d.outcome,
    });
    if let (Some(on_error), Some(obj)) = (d.on_error, v.as_object_mut()) {
        obj.insert("on_error".into(), json!(on_error));
    }
    v
}

fn injection_json(i: &InjectionRecord) -> Value {
    json!({"id": i.id.to_string(), "outcome": i.outcome, "reason": i.reason})
}

fn messages_json(messages: &[Message]) -> Value {
    Value::Array(messages.iter().map(|m| json!(m)).collect())
}
