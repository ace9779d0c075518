//! The replay itself: a scenario run against its scripted model, and the transcript.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rein_agent::{
    Agent, AgentBuilder, AgentEvent, AgentTool, Handoff, Input, NoConversationManager,
    OnRetryLimit, OutputStrategy, RetryStrategy, SlidingWindow, SummarizingWindow, TokenWindow,
    ToolExecutor, TurnInterceptor,
};
use rein_core::{
    ContentBlock, Error, Message, ToolHandle,
    audit::DecisionRecord,
    error::BuildError,
    event::{AfterModelCallEvent, BeforeModelCallEvent},
    interrupt::Interrupt,
    message::{InterruptResponse, ReasoningContent},
    result::{AgentResult, InjectionRecord},
    state::InvocationState,
    stream::Usage,
    tool::{ToolError, ToolOutput},
};
use rein_interventions::SharedHandler;
use rein_interventions::policy::{LoadOptions, Template, TemplateVars};
use rein_models::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

use crate::scenario::{
    AgentDef, Answer, Executor, Invalid, Join, ManagerDef, ModelEntry, ModelErrorName,
    OutputStrategyDef, RetryLimitDef, Scenario, Step, ToolDef,
};

/// Why a replay did not produce a transcript.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The scenario (or the policy it runs with) is invalid (exit 2).
    Invalid(Invalid),
    /// Something else failed (exit 1).
    Internal(String),
}

impl From<Invalid> for RunError {
    fn from(e: Invalid) -> Self {
        Self::Invalid(e)
    }
}

/// Reads, checks and runs a scenario file; returns the transcript. `policy` (a policy file)
/// replaces the policy the scenario gives (inline or by `policy_file`).
pub(crate) fn replay_file(path: &Path, policy: Option<&Path>) -> Result<Value, RunError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RunError::Internal(format!("cannot read {}: {e}", path.display())))?;
    let scenario = Scenario::parse(&text)?;
    let handlers = match (policy, &scenario.policy_file) {
        // The file is loaded as an app loads it (no `fail` kind), relative files in it are
        // relative to it.
        (Some(file), _) => crate::policies::load_file(file, None)
            .map_err(|e| Invalid(format!("policy {}: {e}", file.display())))?,
        (None, Some(file)) => {
            let file = path.parent().unwrap_or(Path::new("")).join(file);
            crate::policies::load_file(&file, None)
                .map_err(|e| Invalid::at("policy_file", format!("{}: {e}", file.display())))?
        }
        (None, None) => {
            crate::policies::load(scenario.policy.clone(), &LoadOptions::scenario(), None)
                .map_err(Invalid)?
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| RunError::Internal(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(run(scenario, handlers))
}

/// The scripted model of one agent: `model_id`, its script, deltas of `chunk` characters.
fn scripted_model(model_id: String, script: &[ModelEntry], chunk: Option<usize>) -> ScriptedModel {
    let mut b = ScriptedModel::builder().model_id(model_id);
    if let Some(n) = chunk {
        b = b.chunk_chars(n);
    }
    for entry in script {
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
                ContentBlock::ReasoningContent(reasoning) => match &**reasoning {
                    ReasoningContent::ReasoningText(t) => {
                        r.reasoning(t.text.clone(), t.signature.as_deref())
                    }
                    _ => r,
                },
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

/// Another agent of the scenario, built the way it is joined.
fn other_agent(
    def: &Arc<AgentDef>,
    model: &ScriptedModel,
    calls: &CallLog,
) -> Result<Agent, Error> {
    let policy = crate::policies::load(def.policy.clone(), &LoadOptions::scenario(), None)
        .map_err(|reason| {
            Error::Build(BuildError::InvalidSetting {
                component: "scenario agent",
                setting: "policy",
                reason,
            })
        })?;
    let mut b = Agent::builder()
        .name(def.name.as_str())
        .model(model.clone())
        .retry_strategy(RetryStrategy::none())
        .tools(
            def.tools
                .iter()
                .map(|t| scripted_tool(t, Arc::clone(calls))),
        )
        .interventions(policy);
    if let Some(p) = &def.system_prompt {
        b = b.system_prompt(p.as_str());
    }
    b.build()
}

/// What each model call of the scenario's agent was to send, as built (a BeforeModelCall hook
/// registered before the policy): kept when the scenario sets a conversation manager.
type ContextLog = Arc<Mutex<Vec<Value>>>;

/// The scenario's conversation manager on `builder`, with the log of what each request sent;
/// the summarizer's own script, when it has one.
fn with_manager(
    builder: AgentBuilder,
    def: &ManagerDef,
    name: &str,
    log: &ContextLog,
) -> (AgentBuilder, Option<ScriptedModel>) {
    let mut summarizer = None;
    let builder = match def {
        ManagerDef::None => builder.conversation_manager(NoConversationManager),
        ManagerDef::SlidingWindow { messages } => {
            builder.conversation_manager(SlidingWindow::new(messages.unwrap_or(40)))
        }
        ManagerDef::TokenWindow {
            budget_tokens,
            low_water_percent,
        } => {
            let mut w = TokenWindow::new(*budget_tokens);
            if let Some(p) = low_water_percent {
                w = w.low_water_percent(*p);
            }
            builder.conversation_manager(w)
        }
        ManagerDef::SummarizingWindow {
            budget_tokens,
            low_water_percent,
            summarizer: script,
            instructions,
        } => {
            let mut w = SummarizingWindow::new(*budget_tokens);
            if let Some(p) = low_water_percent {
                w = w.low_water_percent(*p);
            }
            if let Some(i) = instructions {
                w = w.instructions(i.as_str());
            }
            if !script.is_empty() {
                let model = scripted_model(format!("scenario:{name}:summarizer"), script, None);
                w = w.summarizer(model.clone());
                summarizer = Some(model);
            }
            builder.conversation_manager(w)
        }
    };
    let log = Arc::clone(log);
    let builder = builder.hook(move |ev: &mut BeforeModelCallEvent| {
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(json!({
                "summary_call": ev.is_summary(),
                "messages": ev.request.messages.len(),
                "estimated_input_tokens": ev.estimated_input_tokens(),
            }));
    });
    (builder, summarizer)
}

async fn run(scenario: Scenario, policy: Vec<SharedHandler>) -> Result<Value, RunError> {
    let model = scripted_model(
        format!("scenario:{}", scenario.name),
        &scenario.model,
        scenario.stream_chunk_chars,
    );
    let calls = CallLog::default();
    // The other agents' policies are checked before anything runs.
    for (i, a) in scenario.agents.iter().enumerate() {
        crate::policies::load(a.policy.clone(), &LoadOptions::scenario(), None)
            .map_err(|e| RunError::Invalid(Invalid::at(format!("agents[{i}]"), e)))?;
    }
    let others: Vec<(Arc<AgentDef>, ScriptedModel)> = scenario
        .agents
        .iter()
        .map(|a| {
            let model = scripted_model(format!("scenario:{}", a.name), &a.model, None);
            (Arc::new(a.clone()), model)
        })
        .collect();
    let inject = Arc::new(Mutex::new(InjectState::default()));
    let hook_inject = Arc::clone(&inject);
    let context = ContextLog::default();
    let mut summarizer = None;
    let mut builder = Agent::builder();
    if let Some(def) = &scenario.conversation_manager {
        (builder, summarizer) = with_manager(builder, def, &scenario.name, &context);
    }
    builder = builder
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
    for (def, model) in &others {
        let description = def.description.clone();
        builder = match def.join {
            Join::Tool => {
                let (d, m, c) = (Arc::clone(def), model.clone(), Arc::clone(&calls));
                let description =
                    description.unwrap_or_else(|| format!("The agent '{}'.", def.name));
                builder.tool(AgentTool::new(def.name.clone(), description, move || {
                    other_agent(&d, &m, &c)
                }))
            }
            Join::Handoff => {
                let agent = other_agent(def, model, &calls).map_err(|e| {
                    RunError::Invalid(Invalid(format!("agent '{}': {e}", def.name)))
                })?;
                let mut handoff = Handoff::to(agent);
                if let Some(d) = description {
                    handoff = handoff.description(d);
                }
                builder.handoff(handoff)
            }
        };
    }
    if let Some(n) = scenario.max_hook_retries {
        builder = builder.max_hook_retries(n);
    }
    if scenario.on_retry_limit == RetryLimitDef::Confirm {
        builder = builder.on_retry_limit(OnRetryLimit::Confirm);
    }
    if let Some(n) = scenario.stream_hold_back {
        builder = builder.stream_hold_back(n);
    }
    if let Some(output) = &scenario.output {
        builder = builder.output_schema(output.name.as_str(), output.schema.clone());
        if let Some(s) = output.strategy {
            builder = builder.output_strategy(match s {
                OutputStrategyDef::Native => OutputStrategy::Native,
                OutputStrategyDef::Tool => OutputStrategy::Tool,
                OutputStrategyDef::Prompt => OutputStrategy::Prompt,
            });
        }
        if let Some(n) = output.max_retries {
            builder = builder.max_output_retries(n);
        }
    }
    let mut agent = builder
        .build()
        .map_err(|e| RunError::Invalid(Invalid(format!("the agent cannot be built: {e}"))))?;
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
        let typed = scenario.output.is_some();
        steps.push(run_step(&mut agent, input, &step.answer_injections, typed).await);
        inject
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .clear();
    }

    let requests = requests_json(&model);
    let tool_calls = calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut transcript = json!({
        "steps": steps,
        "messages": messages_json(agent.messages()),
        "model_requests": requests,
        "tool_calls": tool_calls,
    });
    // The other agents' model requests, by agent (only in scenarios that have others).
    if let (false, Some(obj)) = (others.is_empty(), transcript.as_object_mut()) {
        let by_agent: serde_json::Map<String, Value> = others
            .iter()
            .map(|(def, model)| (def.name.clone(), requests_json(model)))
            .collect();
        obj.insert("agent_requests".into(), Value::Object(by_agent));
    }
    // What each request sent, and the summarizer's requests (scenarios that set a manager).
    if let (Some(_), Some(obj)) = (&scenario.conversation_manager, transcript.as_object_mut()) {
        let sent = std::mem::take(&mut *context.lock().unwrap_or_else(PoisonError::into_inner));
        obj.insert("context".into(), Value::Array(sent));
        if let Some(m) = &summarizer {
            obj.insert("summarizer_requests".into(), requests_json(m));
        }
    }
    Ok(transcript)
}

fn step_input(agent: &Agent, step: &Step) -> Input {
    let mut input = match (&step.prompt, &step.resume) {
        (Some(p), _) => Input::text(p.clone()),
        (None, answers) => {
            // The scenario is the human: it answers the pending interrupts it names (by id or
            // name), each as asked (`Interrupt::answer`: this pause, this fingerprint).
            let pending = agent
                .pending_interrupts()
                .map(rein_agent::PausedRun::interrupts)
                .unwrap_or_default();
            let mut responses = Vec::new();
            for a in answers.iter().flatten() {
                let named: Vec<&Interrupt> = pending
                    .iter()
                    .filter(|i| match (&a.id, &a.interrupt) {
                        (Some(id), _) => &i.id == id,
                        (None, Some(name)) => &i.name == name,
                        (None, None) => false,
                    })
                    .collect();
                if named.is_empty() {
                    // Nothing pending by that id or name: the agent reports the typed error.
                    if let Some(id) = a.id.as_ref().or(a.interrupt.as_ref()) {
                        responses.push(InterruptResponse::new(id.clone(), a.response.clone()));
                    }
                }
                for i in named {
                    responses.push(i.answer(a.response.clone()));
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

/// The attempts at a typed answer in one step: each model call's answer as the model gave it
/// (its text, or a tool's input: the final-answer tool's, with the tool strategy) and the
/// check's verdict on it.
#[derive(Default)]
struct Attempts {
    /// The answer of the model call under way.
    answer: String,
    tool_id: String,
    list: Vec<Value>,
}

impl Attempts {
    fn see(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::ModelCallStarted { .. } => {
                self.answer.clear();
                self.tool_id.clear();
            }
            AgentEvent::TextDelta(t) if self.tool_id.is_empty() => self.answer.push_str(t),
            AgentEvent::ToolInputDelta { tool_use_id, delta } => {
                if *tool_use_id != self.tool_id {
                    self.tool_id.clone_from(tool_use_id);
                    self.answer.clear();
                }
                self.answer.push_str(delta);
            }
            AgentEvent::Decision(d) if d.handler == "rein:output" => {
                let attempt = self.list.len() + 1;
                self.list.push(json!({
                    "attempt": attempt,
                    "answer": self.answer,
                    "action": d.action,
                    "text": d.text,
                }));
            }
            _ => {}
        }
    }
}

async fn run_step(agent: &mut Agent, input: Input, answers: &[Answer], typed: bool) -> Value {
    let mut decisions = Vec::new();
    let mut injections = Vec::new();
    let mut attempts = Attempts::default();
    let mut summary = None;
    let interceptor = agent.interceptor();
    let mut stream = agent.stream(input);
    let mut outcome: Option<Result<AgentResult, Error>> = None;
    while let Some(event) = stream.next().await {
        if let (true, Ok(e)) = (typed, &event) {
            attempts.see(e);
        }
        match event {
            Ok(AgentEvent::Decision(d)) => decisions.push(decision_json(&d)),
            Ok(AgentEvent::InjectionConsumed { id, .. }) => {
                injections
                    .push(json!({"id": id.to_string(), "outcome": "consumed", "reason": null}));
            }
            // A parked message's approvals are answered at once (an unanswered one waits and is
            // rejected when the run ends).
            Ok(AgentEvent::InjectionAwaitingApproval { interrupts, .. }) => {
                for i in &interrupts {
                    let answer = answers.iter().find(|a| {
                        a.id.as_deref() == Some(i.id.as_str())
                            || a.interrupt.as_deref() == Some(i.name.as_str())
                    });
                    if let Some(a) = answer {
                        // Cannot fail: the interrupt was just parked in this run.
                        let _ = interceptor.answer(i.answer(a.response.clone()));
                    }
                }
            }
            Ok(AgentEvent::InjectionRejected { id, reason }) => {
                injections
                    .push(json!({"id": id.to_string(), "outcome": "rejected", "reason": reason}));
            }
            Ok(AgentEvent::ContextSummarized {
                message_count,
                estimated_tokens_before,
                estimated_tokens_after,
                summary: text,
                failure,
            }) => {
                summary = Some(json!({
                    "message_count": message_count,
                    "estimated_tokens_before": estimated_tokens_before,
                    "estimated_tokens_after": estimated_tokens_after,
                    "summary": text,
                    "failure": failure,
                }));
            }
            Ok(AgentEvent::Finished(r)) => outcome = Some(Ok(r)),
            Ok(_) => {}
            Err(e) => outcome = Some(Err(e)),
        }
    }
    let step = match outcome {
        Some(Ok(r)) => json!({
            "stop_reason": r.stop_reason.as_str(),
            "message": r.message,
            "interrupts": r.interrupts.iter().map(|i| json!({
                "id": i.id, "name": i.name, "reason": i.reason,
            })).collect::<Vec<_>>(),
            "decisions": r.decisions.iter().map(decision_json).collect::<Vec<_>>(),
            "injections": r.injections.iter().map(injection_json).collect::<Vec<_>>(),
            "error": null,
        })
        .as_object()
        .cloned()
        .map(|mut o| {
            if !r.handoffs.is_empty() {
                o.insert("handoffs".into(), json!(r.handoffs));
            }
            if typed {
                o.insert("output".into(), r.output.clone().unwrap_or(Value::Null));
            }
            Value::Object(o)
        })
        .unwrap_or_default(),
        Some(Err(e)) => failed(&e, decisions, injections),
        None => failed(
            &Error::Internal("the invocation ended without a result"),
            decisions,
            injections,
        ),
    };
    // The conversation manager's summary after the step, when it made one.
    let step = match (step, summary) {
        (Value::Object(mut o), Some(s)) => {
            o.insert("summary".into(), s);
            Value::Object(o)
        }
        (step, _) => step,
    };
    // A typed agent's step: its answer (null without one) and each attempt at it.
    match step {
        Value::Object(mut o) if typed => {
            o.entry("output").or_insert(Value::Null);
            o.insert("output_attempts".into(), Value::Array(attempts.list));
            Value::Object(o)
        }
        other => other,
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
        Error::InvalidAnswer { .. } => "invalid_answer",
        Error::PendingMessageMissing => "pending_message_missing",
        Error::Session(_) => "session",
        Error::Output(_) => "output",
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
    if let (Some(agent), Some(obj)) = (&d.agent, v.as_object_mut()) {
        obj.insert("agent".into(), json!(agent));
    }
    // What the human decided: asked, or the answer and where it came from.
    if let (Some(c), Some(obj)) = (&d.confirmation, v.as_object_mut()) {
        obj.insert("confirmation".into(), json!(c));
    }
    // What the handler attached (an LLM judge's verdict, reason and usage).
    if let (Some(detail), Some(obj)) = (&d.detail, v.as_object_mut()) {
        obj.insert("detail".into(), json!(detail));
    }
    v
}

fn injection_json(i: &InjectionRecord) -> Value {
    json!({"id": i.id.to_string(), "outcome": i.outcome, "reason": i.reason})
}

/// What a scripted model was sent.
fn requests_json(model: &ScriptedModel) -> Value {
    let sent = model.requests();
    let requests = sent.iter().map(|r| {
        json!({
            "system_prompt": r.system_prompt.as_deref(),
            "messages": messages_json(&r.messages),
            "tools": r.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        })
    });
    Value::Array(requests.collect())
}

fn messages_json(messages: &[Message]) -> Value {
    Value::Array(messages.iter().map(|m| json!(m)).collect())
}
