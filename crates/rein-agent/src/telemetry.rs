//! What a run tells `tracing` besides its spans' creation: the `run_guardrail` span of each
//! intervention decision, confirm answers and injections as span events, metrics as events, and
//! the process-wide switches an exporter sets (SPEC §10).
//!
//! Everything here is built from values the run has anyway (the audit records, the usage), after
//! the fact: nothing is added to the dispatch of handlers, and nothing is formatted unless a
//! subscriber is interested in the callsite.
//!
//! ```
//! // An exporter (rein-otel) sets these; a program wiring its own subscriber may too.
//! rein_agent::telemetry::set_capture_content(false);
//! rein_agent::telemetry::set_experimental_conventions(true);
//! assert!(rein_agent::telemetry::experimental_conventions());
//! # rein_agent::telemetry::set_experimental_conventions(false);
//! ```

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rein_core::audit::{
    ConfirmationStatus, DecisionAction, DecisionOutcome, DecisionRecord, EventKind,
};
use rein_core::stream::StopReason;
use tracing::field::Empty;

/// Awaits a future with `span` entered at each poll, like `tracing::Instrument` but without
/// moving the future into a wrapper: the future is pinned where the caller's future keeps it.
/// (The wrapper's move copied the run's and the model call's futures, ≈460 instructions per
/// text invocation with telemetry off.) Unlike `Instrumented`, the span is not entered while
/// the future is dropped.
macro_rules! in_span {
    ($span:expr, $fut:expr) => {{
        let span: &::tracing::Span = $span;
        let mut fut = ::std::pin::pin!($fut);
        ::std::future::poll_fn(|cx| {
            let _entered = span.enter();
            fut.as_mut().poll(cx)
        })
        .await
    }};
}
pub(crate) use in_span;

/// The target of Rein's metric events (`histogram.*`, `monotonic_counter.*` fields, as
/// tracing-opentelemetry's metrics layer reads them).
pub const METRICS_TARGET: &str = "rein::metrics";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);
static EXPERIMENTAL: AtomicBool = AtomicBool::new(false);
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans carry message content: the conventions' opt-in attributes
/// (`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`,
/// `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`) and the reason text of decisions
/// (`rein.intervention.reason`). Off by default: content may hold personal data or secrets.
pub fn set_capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// Whether message content is captured (see [`set_capture_content`]).
pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// Whether `run_guardrail` spans also carry the attributes of the GenAI guardrail proposal
/// (`gen_ai.security.*`, semantic-conventions-genai #427), which may still change. Off by
/// default; the stable `rein.intervention.*` attributes are always there.
pub fn set_experimental_conventions(on: bool) {
    EXPERIMENTAL.store(on, Ordering::Relaxed);
}

/// Whether the experimental guardrail attributes are set (see
/// [`set_experimental_conventions`]).
pub fn experimental_conventions() -> bool {
    EXPERIMENTAL.load(Ordering::Relaxed)
}

/// Declares that an exporter is installed: agents built from now on time their handlers (the
/// audit's `duration`, the spans' `rein.intervention.duration_ns`) as if
/// [`AgentBuilder::audit_timing`](crate::AgentBuilder::audit_timing) were on.
pub fn set_exporting(on: bool) {
    EXPORTING.store(on, Ordering::Relaxed);
}

pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Sets a list of strings as a span attribute, which a `tracing` field cannot hold: the span,
/// the attribute's key, its values.
pub type ListRecorder = fn(&tracing::Span, &'static str, &[&'static str]);

static LIST_RECORDER: OnceLock<ListRecorder> = OnceLock::new();

/// For exporters (rein-otel installs one): how attributes the conventions type as string arrays
/// (`gen_ai.response.finish_reasons`) are set while [`set_exporting`] is on — through the
/// exporter's own span API, so no type of it appears here. Without one they are recorded as a
/// string field (the first value). The first call wins.
pub fn set_list_recorder(recorder: ListRecorder) {
    let _ = LIST_RECORDER.set(recorder);
}

/// The conventions' `gen_ai.response.finish_reasons` of a model call: `stop`, `tool_call`,
/// `length`, `content_filter` (Rein's own name for the others).
fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::ToolUse => "tool_call",
        StopReason::MaxTokens | StopReason::LimitOutputTokens | StopReason::LimitTotalTokens => {
            "length"
        }
        StopReason::ContentFiltered | StopReason::GuardrailIntervened => "content_filter",
        other => other.as_str(),
    }
}

/// Records a model call's finish reason on its `chat` span.
pub(crate) fn finish_reasons(span: &tracing::Span, stop: StopReason) {
    const KEY: &str = "gen_ai.response.finish_reasons";
    let reason = finish_reason(stop);
    match LIST_RECORDER.get() {
        Some(record) if exporting() => record(span, KEY, &[reason]),
        _ => {
            span.record(KEY, reason);
        }
    }
}

/// Records the prompt-cache tokens of `usage` on a `chat` or `invoke_agent` span, when there
/// are any (the GenAI conventions' `gen_ai.usage.cache_read.input_tokens` and
/// `cache_creation.input_tokens`).
pub(crate) fn cache_tokens(span: &tracing::Span, usage: &rein_core::stream::Usage) {
    if usage.cache_read_input_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_read.input_tokens",
            int(usage.cache_read_input_tokens),
        );
    }
    if usage.cache_write_input_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_creation.input_tokens",
            int(usage.cache_write_input_tokens),
        );
    }
}

fn action_str(a: DecisionAction) -> &'static str {
    match a {
        DecisionAction::Deny => "deny",
        DecisionAction::Guide => "guide",
        DecisionAction::Confirm => "confirm",
        DecisionAction::Transform => "transform",
        DecisionAction::Error => "error",
        DecisionAction::Handoff => "handoff",
        DecisionAction::Proceed => "proceed",
        DecisionAction::Fallback => "fallback",
        _ => "none",
    }
}

fn outcome_str(o: DecisionOutcome) -> &'static str {
    match o {
        DecisionOutcome::Applied => "applied",
        DecisionOutcome::Shadowed => "shadowed",
        DecisionOutcome::Overridden => "overridden",
        DecisionOutcome::Error => "error",
        _ => "not_run",
    }
}

/// The proposal's verdict (what the handler said) and enforced action (what Rein did).
fn verdict_and_action(d: &DecisionRecord) -> (&'static str, &'static str) {
    let verdict = match d.action {
        DecisionAction::Deny => "deny",
        DecisionAction::Transform => "modify",
        DecisionAction::Guide => "warn",
        DecisionAction::Confirm => "escalate",
        DecisionAction::Error if d.on_error == Some(rein_core::audit::OnError::Deny) => "deny",
        _ => "allow",
    };
    let enforced = match (d.outcome, d.action) {
        (DecisionOutcome::Applied, DecisionAction::Deny | DecisionAction::Guide) => "block",
        (DecisionOutcome::Applied, DecisionAction::Transform) => "modify",
        (DecisionOutcome::Applied, DecisionAction::Confirm) => {
            match d.confirmation.as_ref().map(|c| c.status) {
                Some(ConfirmationStatus::Rejected) => "block",
                Some(ConfirmationStatus::Approved) => "allow",
                _ => "escalate",
            }
        }
        (DecisionOutcome::Error, _) if d.on_error == Some(rein_core::audit::OnError::Deny) => {
            "block"
        }
        _ => "allow",
    };
    (verdict, enforced)
}

/// The proposal's target type (input / output) and subtype (llm / tool_call) of an event.
fn target(event: EventKind) -> (&'static str, &'static str) {
    match event {
        EventKind::BeforeInvocation | EventKind::BeforeModelCall => ("input", "llm"),
        EventKind::BeforeToolCall => ("input", "tool_call"),
        EventKind::AfterToolCall => ("output", "tool_call"),
        _ => ("output", "llm"),
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A count as a span attribute: signed, as OpenTelemetry's integers are (tracing-opentelemetry
/// turns a `u64` field into a string).
pub(crate) fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// One `run_guardrail {handler}` span per record of a pass, children of the current span (the
/// span of the event the pass guarded), and the confirm answers as events on `invocation` (the
/// `invoke_agent` span of the run that asked or resumed). `records` are one pass's, in order.
pub(crate) fn decisions(
    records: &[DecisionRecord],
    invocation: &tracing::Span,
    state: &rein_core::state::InvocationState,
) {
    let content = capture_content();
    let experimental = experimental_conventions();
    for (order, d) in records.iter().enumerate() {
        // Values known now are given at creation: each later `record` is a lookup of the span
        // and a visit by every layer (≈850 instructions each under rein-otel's), and `%` fields
        // go through `fmt` (the name is joined without it). Field values are only evaluated
        // when the span is enabled.
        let span = tracing::info_span!(
            target: "rein::intervention",
            "run_guardrail",
            otel.name = join("run_guardrail ", &d.handler).as_str(),
            otel.kind = "internal",
            otel.status_code = Empty,
            otel.status_message = Empty,
            gen_ai.operation.name = "run_guardrail",
            rein.intervention.handler = d.handler.as_str(),
            rein.intervention.event = d.event.as_str(),
            rein.intervention.action = action_str(d.action),
            rein.intervention.outcome = outcome_str(d.outcome),
            rein.intervention.order = int(order),
            rein.intervention.duration_ns = d.duration.map(nanos),
            rein.intervention.tool_call.id = d.tool_use_id.as_deref(),
            rein.intervention.on_error = Empty,
            rein.intervention.confirmation = Empty,
            rein.intervention.reason = Empty,
            gen_ai.security.guardrail.name = Empty,
            gen_ai.security.verdict.type = Empty,
            gen_ai.security.action.type = Empty,
            gen_ai.security.target.type = Empty,
            gen_ai.security.target.subtype = Empty,
        );
        // Every record goes through the same callsite: nobody listens to one, nobody to any.
        if span.is_disabled() {
            break;
        }
        if let Some(on_error) = d.on_error {
            span.record(
                "rein.intervention.on_error",
                match on_error {
                    rein_core::audit::OnError::Proceed => "proceed",
                    rein_core::audit::OnError::Deny => "deny",
                    _ => "throw",
                },
            );
        }
        if let Some(c) = &d.confirmation {
            span.record("rein.intervention.confirmation", c.status.as_str());
        }
        if content && let Some(text) = &d.text {
            span.record("rein.intervention.reason", text.as_str());
        }
        if d.outcome == DecisionOutcome::Error {
            span.record("otel.status_code", "error");
            // The error's message may quote input: it is content.
            if content && let Some(text) = &d.text {
                span.record("otel.status_message", text.as_str());
            }
        }
        if experimental {
            let (verdict, enforced) = verdict_and_action(d);
            let (kind, subtype) = target(d.event);
            span.record("gen_ai.security.guardrail.name", d.handler.as_str());
            span.record("gen_ai.security.verdict.type", verdict);
            span.record("gen_ai.security.action.type", enforced);
            span.record("gen_ai.security.target.type", kind);
            span.record("gen_ai.security.target.subtype", subtype);
        }
        if let Some(c) = &d.confirmation {
            confirmation_event(d, c.status, invocation, state);
        }
        // Entered and left at once: the span ends here, after its event's pass.
        drop(span);
    }
    decision_metrics(records);
}

/// `prefix` followed by `name`, without `fmt`.
fn join(prefix: &str, name: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + name.len());
    s.push_str(prefix);
    s.push_str(name);
    s
}

/// A confirm's question or answer as an event of the invocation, with who the run is for
/// (`rein.approval.requester`: the invocation state's `principal`) and, on an answer, who gave
/// it (`rein.approval.approver`: its `approver`, set by a server from its authentication) and
/// whether it approved with an edit — the approval record's who and what, without the input.
fn confirmation_event(
    d: &DecisionRecord,
    status: ConfirmationStatus,
    invocation: &tracing::Span,
    state: &rein_core::state::InvocationState,
) {
    let source = d
        .confirmation
        .as_ref()
        .and_then(|c| c.source)
        .map(|s| match s {
            rein_core::audit::AnswerSource::Preemptive => "preemptive",
            _ => "resume",
        });
    let answered = status != ConfirmationStatus::Asked;
    let edited = d
        .confirmation
        .as_ref()
        .and_then(|c| c.answer.as_ref())
        .and_then(|a| a.get("edit"))
        .is_some_and(|e| !e.is_null());
    tracing::event!(
        target: "rein::intervention",
        parent: invocation,
        tracing::Level::INFO,
        rein.intervention.handler = %d.handler,
        rein.intervention.event = d.event.as_str(),
        rein.intervention.tool_call.id = d.tool_use_id.as_deref(),
        rein.intervention.confirmation = status.as_str(),
        rein.intervention.answer_source = source,
        rein.approval.requester = state.principal(),
        rein.approval.approver = answered.then(|| state.approver()).flatten(),
        rein.approval.edited = answered.then_some(edited),
        "rein.confirm.{}",
        status.as_str()
    );
}

fn decision_metrics(records: &[DecisionRecord]) {
    if !tracing::enabled!(target: METRICS_TARGET, tracing::Level::TRACE) {
        return;
    }
    for d in records {
        tracing::event!(
            target: METRICS_TARGET,
        tracing::Level::TRACE,
            monotonic_counter.rein.intervention.decisions = 1u64,
            rein.intervention.handler = d.handler.as_str(),
            rein.intervention.event = d.event.as_str(),
            rein.intervention.action = action_str(d.action),
            rein.intervention.outcome = outcome_str(d.outcome),
        );
    }
}

/// A delivered or rejected injection: an event on the run's span and a counter.
pub(crate) fn injection(consumed: bool, reason: Option<&str>) {
    let outcome = if consumed { "consumed" } else { "rejected" };
    // The reason of a rejection is a handler's text or Rein's own ("stale", "run ended").
    let reason = reason.filter(|_| capture_content());
    tracing::event!(
        target: "rein::injection",
        tracing::Level::INFO,
        rein.injection.outcome = outcome,
        rein.injection.reason = reason,
        "rein.injection.{outcome}"
    );
    tracing::event!(
        target: METRICS_TARGET,
        tracing::Level::TRACE,
        monotonic_counter.rein.injections = 1u64,
        rein.injection.outcome = outcome,
    );
}

/// A handoff: an event on the run's span (SPEC §9.2).
pub(crate) fn handoff(from: &str, to: &str) {
    tracing::event!(
        target: "rein::handoff",
        tracing::Level::INFO,
        rein.handoff.from = from,
        rein.handoff.to = to,
        "rein.handoff"
    );
}

/// The conventions' client metrics of one model call (the model's names asked only when the
/// metrics are recorded).
pub(crate) fn model_call_metrics<'a>(
    info: impl FnOnce() -> &'a rein_models::ModelInfo,
    took: Duration,
    usage: Option<(u64, u64)>,
    error: Option<&str>,
) {
    if !tracing::enabled!(target: METRICS_TARGET, tracing::Level::TRACE) {
        return;
    }
    let info = info();
    let (provider, model) = (info.provider.as_str(), info.model_id.as_str());
    tracing::event!(
        target: METRICS_TARGET,
        tracing::Level::TRACE,
        histogram.gen_ai.client.operation.duration = took.as_secs_f64(),
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        "error.type" = error,
    );
    if let Some((input, output)) = usage {
        for (kind, n) in [("input", input), ("output", output)] {
            tracing::event!(
                    target: METRICS_TARGET,
            tracing::Level::TRACE,
                    histogram.gen_ai.client.token.usage = n,
                    gen_ai.operation.name = "chat",
                    gen_ai.provider.name = provider,
                    gen_ai.request.model = model,
                    gen_ai.token.type = kind,
                );
        }
    }
}

/// A tool call, and whether it failed.
pub(crate) fn tool_call_metrics(tool: &str, is_error: bool) {
    if !tracing::enabled!(target: METRICS_TARGET, tracing::Level::TRACE) {
        return;
    }
    tracing::event!(
        target: METRICS_TARGET,
        tracing::Level::TRACE,
        monotonic_counter.rein.tool.calls = 1u64,
        gen_ai.tool.name = tool,
        rein.tool.status = if is_error { "error" } else { "success" },
    );
    if is_error {
        tracing::event!(
            target: METRICS_TARGET,
        tracing::Level::TRACE,
            monotonic_counter.rein.tool.errors = 1u64,
            gen_ai.tool.name = tool,
        );
    }
}

/// JSON of a value for a content attribute (content capture is checked by the caller).
pub(crate) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The conventions' `error.type` of a run's or a call's error: a low-cardinality name, never
/// the message (which may quote input).
pub(crate) fn error_type(e: &rein_core::Error) -> &'static str {
    use rein_core::Error;
    match e {
        Error::Model(m) => model_error_type(m),
        Error::Hook { .. } => "hook",
        Error::Handler { .. } => "handler",
        Error::Build(_) => "build",
        Error::Session(_) => "session",
        Error::Internal(_) => "internal",
        Error::InvalidMessage(_) | Error::MalformedStream(_) => "invalid_message",
        _ => "input",
    }
}

/// `error.type` of a model error: its kind.
pub(crate) fn model_error_type(e: &rein_core::ModelError) -> &'static str {
    model_error_kind(e.kind())
}

/// The `error.type` of a model error of kind `kind`.
pub(crate) fn model_error_kind(kind: rein_core::error::ModelErrorKind) -> &'static str {
    use rein_core::error::ModelErrorKind as K;
    match kind {
        K::Auth => "auth",
        K::Throttled => "throttled",
        K::ContextWindowOverflow => "context_window_overflow",
        K::BadRequest => "bad_request",
        K::Server => "server",
        K::Transport => "transport",
        K::Timeout => "timeout",
        K::MalformedStream => "malformed_stream",
        K::ResponseTooLarge => "response_too_large",
        K::ScriptExhausted => "script_exhausted",
        _ => "other",
    }
}
