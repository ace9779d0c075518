//! One dispatch pass over an event's intervention handlers (SPEC §3.3): each handler's verdict
//! in registration order (parallel groups awaited together), the decision records, and the
//! decided effect applied to the event. The registry (`registry.rs`) installs it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{FutureExt as _, StreamExt as _, stream::FuturesUnordered};
use rein_core::{
    Error,
    audit::{AnswerSource, Confirmation, DecisionAction, DecisionOutcome, DecisionRecord, OnError},
    interrupt::{Interrupt, InterruptAnswers},
    tool::BoxFuture,
};
use serde_json::Value;

use crate::action::{ActionVerdict, Confirm, IntoVerdict};
use crate::decision::PendingDecision;
use crate::error::HandlerError;
use crate::event::{Draft, GuideEffect, PassEvent};
use crate::handler::{InterventionContext, Mode, Recheck, RecheckAnswer};
use crate::registry::{Entry, Shared};

/// The tags that decide a record's final outcome at the end of the pass.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// The outcome is already final (applied deny, shadowed, error).
    Fixed,
    Guide,
    Transform,
    ConfirmApproved,
    ConfirmAsked,
    /// A proceed recorded for its detail.
    Proceed,
}

/// How a pass ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Denied,
    Guided,
    Interrupted,
    Done,
}

/// The state of one pass; allocates nothing until a handler does something other than proceed.
struct Pass<D> {
    records: Vec<(DecisionRecord, Tag)>,
    guides: Vec<(Arc<str>, String)>,
    asked: Vec<Interrupt>,
    snapshot: Option<D>,
    denied: Option<String>,
}

impl<D> Pass<D> {
    fn new() -> Self {
        Self {
            records: Vec::new(),
            guides: Vec::new(),
            asked: Vec::new(),
            snapshot: None,
            denied: None,
        }
    }
}

/// Whether the pass goes on after a handler.
enum Flow {
    Continue,
    Stop,
}

fn record<E: PassEvent>(
    event: &E,
    entry: &Entry,
    action: DecisionAction,
    outcome: DecisionOutcome,
    text: Option<String>,
    duration: Option<Duration>,
) -> DecisionRecord {
    let mut r = DecisionRecord::new(&*entry.name, E::KIND, action, outcome)
        .with_tool_use_id(event.tool_use_id().map(str::to_owned));
    r.text = text;
    r.duration = duration;
    r
}

/// Calls one handler; a panic is a handler error.
#[inline(always)]
fn call_handler<'a, E: PassEvent>(
    entry: &'a Entry,
    event: &'a E,
    cx: &'a InterventionContext,
) -> PendingDecision<'a, E::Action> {
    catch_unwind(AssertUnwindSafe(|| entry.handler.call(event, cx)))
        .unwrap_or_else(|panic| PendingDecision::ready(Err(HandlerError::from_panic(panic))))
}

/// Awaits a handler's future; its panics are handler errors.
async fn settle<A>(future: BoxFuture<'_, Result<A, HandlerError>>) -> Result<A, HandlerError> {
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(HandlerError::from_panic(panic)),
    }
}

/// One pass over the handlers of `E` (SPEC §3.3), written once for its two callers: `$settle`
/// turns a handler's boxed future into its result; `$group`, given only in the async pass,
/// runs a parallel group (SPEC §3.7).
macro_rules! pass {
    ($shared:expr, $event:expr, |$future:ident| $settle:expr $(, $group:ident)?) => {{
        let (shared, event): (&Shared, &mut E) = ($shared, $event);
        let entries = shared.entries::<E>();
        if entries.is_empty() || event.settled() {
            return Ok(());
        }
        let mut cx = InterventionContext::from(event.invocation());
        cx.set_recheck(recheck(entries, event));
        let mut pass: Pass<Draft<E>> = Pass::new();
        // (`while let` over the iterator is what `for` expands to; the group skips its members.)
        let mut rest = entries.iter();
        while let Some(entry) = rest.next() {
            $(
                if entry.group >= 2 {
                    let at = entries.len() - rest.len() - 1;
                    let members = entries.get(at..at + entry.group).unwrap_or_default();
                    for _ in 1..members.len() {
                        rest.next();
                    }
                    let flow =
                        $group(&mut pass, members, event, &cx, shared.audit_timing).await?;
                    if let Flow::Stop = flow {
                        break;
                    }
                    continue;
                }
            )?
            let started = shared.audit_timing.then(Instant::now);
            let result = match call_handler(entry, &*event, &cx) {
                PendingDecision::Ready(Some(result)) => result,
                PendingDecision::Ready(None) => Err(HandlerError::new("decision already taken")),
                PendingDecision::Boxed($future) => $settle,
            };
            let result = result.map(IntoVerdict::into_verdict);
            let detail = cx.take_detail();
            if let Flow::Stop = step(&mut pass, entry, event, result, detail, started)? {
                break;
            }
        }
        finish(pass, event);
        Ok(())
    }};
}

/// The pass, awaiting the handlers that return a future, and the members of a parallel group
/// together.
pub(crate) async fn run_pass<E: PassEvent>(shared: &Shared, event: &mut E) -> Result<(), Error> {
    pass!(shared, event, |future| settle(future).await, run_group)
}

/// A member's result once known, as a verdict, and how long it took since its group started
/// (with timing).
type Settled<D> = (Result<ActionVerdict<D>, HandlerError>, Option<Duration>);

/// Runs a parallel group (SPEC §3.7): its members are awaited together against the event as it
/// stands, then their results go through `step` in registration order, as if they had run one
/// after the other; the members after the one that stopped the pass are recorded as not run.
async fn run_group<E: PassEvent>(
    pass: &mut Pass<Draft<E>>,
    members: &[Entry],
    event: &mut E,
    cx: &InterventionContext,
    timing: bool,
) -> Result<Flow, Error> {
    // Each member gets a context of its own, so the details they attach stay apart.
    let mut contexts: Vec<InterventionContext> = members.iter().map(|_| cx.clone()).collect();
    let results = gather(members, &*event, &contexts, timing).await;
    for (i, (entry, settled)) in members.iter().zip(results).enumerate() {
        let detail = contexts
            .get_mut(i)
            .and_then(InterventionContext::take_detail);
        // `gather` leaves results out only after a result that stops the pass, which `step`
        // stops at, so this is not reached; fail closed all the same.
        let (result, took) =
            settled.unwrap_or_else(|| (Err(HandlerError::new("decision not gathered")), None));
        // `step` measures from `started`: the instant that gives the member its own duration.
        let started = took.and_then(|took| Instant::now().checked_sub(took));
        let skipped = members.get(i + 1..).unwrap_or_default();
        match step(pass, entry, event, result, detail, started) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => {
                for entry in skipped {
                    pass.records.push((not_run(&*event, entry), Tag::Fixed));
                }
                return Ok(Flow::Stop);
            }
            Err(error) => {
                // The pass's records are already on the event (`handler_failed`).
                for entry in skipped {
                    let r = not_run(&*event, entry);
                    emit(&r);
                    record_on(event, r);
                }
                return Err(error);
            }
        }
    }
    Ok(Flow::Continue)
}

/// The record of a group member after the one that stopped the pass.
fn not_run<E: PassEvent>(event: &E, entry: &Entry) -> DecisionRecord {
    record(
        event,
        entry,
        DecisionAction::None,
        DecisionOutcome::NotRun,
        None,
        None,
    )
}

/// Calls every member of a group and awaits them together, until all have decided or the
/// earliest ones decide something that stops the pass: then the members still running are
/// dropped (cancelled) and those not yet called are not called. The results are in
/// registration order; a member left out (`None`) comes after one that stops the pass.
async fn gather<'a, E: PassEvent>(
    members: &'a [Entry],
    event: &'a E,
    contexts: &'a [InterventionContext],
    timing: bool,
) -> Vec<Option<Settled<Draft<E>>>> {
    let started = timing.then(Instant::now);
    let took = || started.map(|s| s.elapsed());
    let mut results: Vec<Option<Settled<Draft<E>>>> = members.iter().map(|_| None).collect();
    // Members before this one have all decided, and none of them stops the pass.
    let mut resolved = 0;
    let mut running = FuturesUnordered::new();
    for (i, (entry, cx)) in members.iter().zip(contexts).enumerate() {
        let result = match call_handler(entry, event, cx) {
            PendingDecision::Ready(Some(result)) => result,
            PendingDecision::Ready(None) => Err(HandlerError::new("decision already taken")),
            PendingDecision::Boxed(future) => {
                running.push(settle(future).map(move |result| (i, result)));
                continue;
            }
        };
        if let Some(slot) = results.get_mut(i) {
            *slot = Some((result.map(IntoVerdict::into_verdict), took()));
        }
        if stopped(members, &results, &mut resolved) {
            return results;
        }
    }
    while let Some((i, result)) = running.next().await {
        if let Some(slot) = results.get_mut(i) {
            *slot = Some((result.map(IntoVerdict::into_verdict), took()));
        }
        if stopped(members, &results, &mut resolved) {
            // Dropping `running` cancels the members still running.
            break;
        }
    }
    results
}

/// Moves `resolved` past the members that decided without stopping the pass; whether the next
/// one decided something that stops it.
///
/// Only what is known without the event counts: an applied deny, and an error that `on_error`
/// turns into a deny or a failure. A transform whose edit fails and a rejected confirm stop the
/// pass too, but only `step` can tell (against the event); they stop it there.
fn stopped<D>(members: &[Entry], results: &[Option<Settled<D>>], resolved: &mut usize) -> bool {
    while let (Some(entry), Some(Some((result, _)))) =
        (members.get(*resolved), results.get(*resolved))
    {
        let stops = entry.mode != Mode::Shadow
            && match result {
                Ok(verdict) => matches!(verdict, ActionVerdict::Deny(_)),
                Err(_) => entry.on_error != OnError::Proceed,
            };
        if stops {
            return true;
        }
        *resolved += 1;
    }
    false
}

/// The pass of an event whose handlers all decide at once: a plain loop on the stack, with no
/// future to poll (an async pass polled once costs ≈90 instructions more per event).
pub(crate) fn run_pass_now<E: PassEvent>(shared: &Shared, event: &mut E) -> Result<(), Error> {
    pass!(shared, event, |_future| return Err(Error::Internal(
        "an intervention pass suspended although every handler of it decides at once"
    )))
}

/// Acts on one handler's result, with the detail it attached; an `Err` fails the invocation
/// (`OnError::Throw`). The plain proceed is the hot path: everything else is out of line.
#[inline]
fn step<E: PassEvent>(
    pass: &mut Pass<Draft<E>>,
    entry: &Entry,
    event: &mut E,
    result: Result<ActionVerdict<Draft<E>>, HandlerError>,
    detail: Option<Box<Value>>,
    started: Option<Instant>,
) -> Result<Flow, Error> {
    match result {
        Ok(verdict) => match verdict {
            ActionVerdict::Proceed if detail.is_none() => Ok(Flow::Continue),
            verdict => decided(pass, entry, event, verdict, detail, started),
        },
        // An error record carries the detail too (a judge's usage for an unparsable verdict);
        // a throw hands the records over at once, so it is attached there.
        Err(error) => handler_failed(pass, entry, event, error, detail, started),
    }
}

/// A decision other than a plain proceed: recorded, applied, the detail on its record.
#[inline(never)]
fn decided<E: PassEvent>(
    pass: &mut Pass<Draft<E>>,
    entry: &Entry,
    event: &mut E,
    verdict: ActionVerdict<Draft<E>>,
    detail: Option<Box<Value>>,
    started: Option<Instant>,
) -> Result<Flow, Error> {
    let detail = match (&verdict, detail) {
        (ActionVerdict::Proceed, Some(detail)) => {
            let (outcome, tag) = if entry.mode == Mode::Shadow {
                (DecisionOutcome::Shadowed, Tag::Fixed)
            } else {
                (DecisionOutcome::Applied, Tag::Proceed)
            };
            let mut r = record(
                event,
                entry,
                DecisionAction::Proceed,
                outcome,
                None,
                elapsed(started),
            );
            r.detail = Some(detail);
            pass.records.push((r, tag));
            return Ok(Flow::Continue);
        }
        (_, detail) => detail,
    };
    let before = pass.records.len();
    let flow = decide(pass, entry, event, verdict, started);
    // Puts the detail on the record the decision added, if it added one.
    if let (Some(detail), true) = (detail, pass.records.len() > before)
        && let Some((r, _)) = pass.records.last_mut()
    {
        r.detail = Some(detail);
    }
    match flow {
        Ok(flow) => Ok(flow),
        // A decision that failed (an edit, an evaluation): its detail went nowhere yet.
        Err(error) => handler_failed(pass, entry, event, error, None, started),
    }
}

fn elapsed(started: Option<Instant>) -> Option<Duration> {
    started.map(|s| s.elapsed())
}

/// Applies (or, in shadow mode, records) one non-Proceed decision.
fn decide<E: PassEvent>(
    pass: &mut Pass<Draft<E>>,
    entry: &Entry,
    event: &mut E,
    verdict: ActionVerdict<Draft<E>>,
    started: Option<Instant>,
) -> Result<Flow, HandlerError> {
    let shadow = entry.mode == Mode::Shadow;
    match verdict {
        ActionVerdict::Proceed => Ok(Flow::Continue),
        ActionVerdict::Deny(reason) => {
            let outcome = if shadow {
                DecisionOutcome::Shadowed
            } else {
                DecisionOutcome::Applied
            };
            let r = record(
                event,
                entry,
                DecisionAction::Deny,
                outcome,
                Some(reason.clone()),
                elapsed(started),
            );
            pass.records.push((r, Tag::Fixed));
            if shadow {
                return Ok(Flow::Continue);
            }
            pass.denied = Some(format!("DENIED: {reason}"));
            Ok(Flow::Stop)
        }
        ActionVerdict::Guide(feedback) => {
            let (outcome, tag) = if shadow {
                (DecisionOutcome::Shadowed, Tag::Fixed)
            } else {
                (DecisionOutcome::Applied, Tag::Guide)
            };
            let r = record(
                event,
                entry,
                DecisionAction::Guide,
                outcome,
                Some(feedback.clone()),
                elapsed(started),
            );
            pass.records.push((r, tag));
            if !shadow {
                pass.guides.push((entry.name.clone(), feedback));
            }
            Ok(Flow::Continue)
        }
        ActionVerdict::Confirm(confirm) => {
            confirm_step(pass, entry, event, confirm, shadow, started)
        }
        ActionVerdict::Transform(transform) => {
            let Some(mut draft) = event.draft() else {
                return Ok(Flow::Continue);
            };
            // The edit runs on a draft, so a failing edit changes nothing; in shadow mode the
            // draft is thrown away (the edit is evaluated, never applied).
            match catch_unwind(AssertUnwindSafe(|| transform.apply(&mut draft))) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(error),
                Err(panic) => return Err(HandlerError::from_panic(panic)),
            }
            if shadow {
                let r = record(
                    event,
                    entry,
                    DecisionAction::Transform,
                    DecisionOutcome::Shadowed,
                    None,
                    elapsed(started),
                );
                pass.records.push((r, Tag::Fixed));
                return Ok(Flow::Continue);
            }
            let previous = event.commit(draft);
            if pass.snapshot.is_none() {
                pass.snapshot = Some(previous);
            }
            let r = record(
                event,
                entry,
                DecisionAction::Transform,
                DecisionOutcome::Applied,
                None,
                elapsed(started),
            );
            pass.records.push((r, Tag::Transform));
            Ok(Flow::Continue)
        }
    }
}

/// What a resume answered for this event's confirms, when it answered any: the pass is then
/// the re-check of the pause (`InterventionContext::recheck`). Nothing is looked up on the
/// common pass, whose event carries no answers.
fn recheck<E: PassEvent>(entries: &[Entry], event: &E) -> Option<Recheck> {
    if event
        .resume_answers()
        .is_none_or(InterruptAnswers::is_empty)
    {
        return None;
    }
    let (subject, answers) = event.confirm_target()?;
    let answers: Vec<RecheckAnswer> = entries
        .iter()
        .filter_map(|entry| {
            let id = E::KIND.interrupt_id(&subject, &entry.name);
            answers.get(&id).map(|response| RecheckAnswer {
                handler: entry.name.to_string(),
                response: response.clone(),
            })
        })
        .collect();
    (!answers.is_empty()).then_some(Recheck { answers })
}

fn confirm_step<E: PassEvent>(
    pass: &mut Pass<Draft<E>>,
    entry: &Entry,
    event: &mut E,
    mut confirm: Confirm,
    shadow: bool,
    started: Option<Instant>,
) -> Result<Flow, HandlerError> {
    let Some((subject, answers)) = event.confirm_target() else {
        // The event's action type admits no Confirm.
        return Ok(Flow::Continue);
    };
    // A pre-emptive response wins; otherwise the answer given on resume, if it was given for
    // this very call (same fingerprint). Ids and fingerprints are computed only when needed.
    // The answer with where it came from, or the interrupt (id, fingerprint) to raise.
    type Answer = Option<(Value, AnswerSource)>;
    let (response, unanswered): (Answer, Option<(String, String)>) =
        match confirm.response.take().filter(|v| !v.is_null()) {
            Some(v) => (Some((v, AnswerSource::Preemptive)), None),
            None => {
                let id = E::KIND.interrupt_id(&subject, &entry.name);
                let fingerprint = event.confirm_fingerprint();
                match answers.get_bound(&id, &fingerprint) {
                    Some(v) => (Some((v.clone(), AnswerSource::Resume)), None),
                    None => (None, Some((id, fingerprint))),
                }
            }
        };
    let tool_use_id = event.tool_use_id().map(str::to_owned);
    // The text of the prompt, for `CONFIRMATION_FAILED: <prompt>` and the audit; the interrupt
    // carries the prompt itself (a string or a payload) as its reason.
    let prompt = confirm.prompt_text();
    let approved = match &response {
        Some((r, _)) => {
            let judged = catch_unwind(AssertUnwindSafe(|| confirm.evaluate(r)));
            match judged {
                Ok(Ok(approved)) => Some(approved),
                Ok(Err(error)) => return Err(error),
                Err(panic) => return Err(HandlerError::from_panic(panic)),
            }
        }
        None => None,
    };
    if shadow {
        let r = record(
            event,
            entry,
            DecisionAction::Confirm,
            DecisionOutcome::Shadowed,
            Some(prompt),
            elapsed(started),
        );
        pass.records.push((r, Tag::Fixed));
        return Ok(Flow::Continue);
    }
    let answered = |approved: bool| {
        response
            .clone()
            .map(|(answer, source)| Confirmation::answered(approved, answer, source))
    };
    match approved {
        Some(true) => {
            let mut r = record(
                event,
                entry,
                DecisionAction::Confirm,
                DecisionOutcome::Applied,
                Some(prompt),
                elapsed(started),
            );
            r.confirmation = answered(true);
            pass.records.push((r, Tag::ConfirmApproved));
            Ok(Flow::Continue)
        }
        Some(false) => {
            let mut r = record(
                event,
                entry,
                DecisionAction::Confirm,
                DecisionOutcome::Applied,
                Some(prompt.clone()),
                elapsed(started),
            );
            r.confirmation = answered(false);
            pass.records.push((r, Tag::Fixed));
            pass.denied = Some(format!("CONFIRMATION_FAILED: {prompt}"));
            Ok(Flow::Stop)
        }
        None => {
            let Some((id, fingerprint)) = unanswered else {
                return Ok(Flow::Continue);
            };
            let mut interrupt =
                Interrupt::new(id, &*entry.name, std::mem::take(&mut confirm.prompt))
                    .with_fingerprint(fingerprint);
            if let Some(tool_use_id) = tool_use_id {
                interrupt = interrupt.with_tool_use_id(tool_use_id);
            }
            pass.asked.push(interrupt);
            let mut r = record(
                event,
                entry,
                DecisionAction::Confirm,
                DecisionOutcome::Applied,
                Some(prompt),
                elapsed(started),
            );
            r.confirmation = Some(Confirmation::asked());
            pass.records.push((r, Tag::ConfirmAsked));
            Ok(Flow::Continue)
        }
    }
}

/// A handler failed: apply its `on_error` (SPEC §3.4). Returns the flow, or the error that
/// fails the invocation.
fn handler_failed<E: PassEvent>(
    pass: &mut Pass<Draft<E>>,
    entry: &Entry,
    event: &mut E,
    error: HandlerError,
    detail: Option<Box<Value>>,
    started: Option<Instant>,
) -> Result<Flow, Error> {
    let message = error.message().to_owned();
    // A shadow handler never fails the invocation: the error is recorded, the handler skipped.
    let policy = if entry.mode == Mode::Shadow {
        OnError::Proceed
    } else {
        entry.on_error
    };
    let mut r = record(
        event,
        entry,
        DecisionAction::Error,
        DecisionOutcome::Error,
        Some(message.clone()),
        elapsed(started),
    );
    r.on_error = Some(policy);
    r.detail = detail;
    pass.records.push((r, Tag::Fixed));
    match policy {
        OnError::Proceed => {
            tracing::warn!(
                target: "rein_interventions",
                handler = %entry.name,
                event = E::KIND.as_str(),
                error = %message,
                "intervention handler failed; skipped (on_error = proceed)"
            );
            Ok(Flow::Continue)
        }
        OnError::Deny => {
            tracing::warn!(
                target: "rein_interventions",
                handler = %entry.name,
                event = E::KIND.as_str(),
                error = %message,
                "intervention handler failed; denied (on_error = deny)"
            );
            pass.denied = Some(format!("DENIED: Handler threw: {message}"));
            Ok(Flow::Stop)
        }
        // Throw, and (fail closed) any policy this release does not know.
        _ => {
            // Leave the event as it was before the pass, with the audit of what happened.
            let records = std::mem::take(&mut pass.records);
            if let Some(snapshot) = pass.snapshot.take() {
                event.restore(snapshot);
            }
            push_records(event, records, End::Denied);
            Err(Error::Handler {
                handler: entry.name.to_string(),
                event: E::KIND.as_str(),
                message,
            })
        }
    }
}

/// Ends the pass: settles staged transforms, applies the strongest outcome, records the audit.
fn finish<E: PassEvent>(mut pass: Pass<Draft<E>>, event: &mut E) {
    // Guidance that cancels (or discards the response) settles the event without asking; guidance
    // that is only injected (before_model_call) would let the call go out unasked, so there an
    // unanswered confirm pauses first and the guidance comes again with the resumed pass.
    let asks = !pass.asked.is_empty();
    let guide_settles = !pass.guides.is_empty() && (!asks || E::GUIDE != GuideEffect::Inject);
    let end = if pass.denied.is_some() {
        End::Denied
    } else if guide_settles {
        End::Guided
    } else if asks {
        End::Interrupted
    } else {
        End::Done
    };
    let discard = match end {
        End::Denied | End::Interrupted => true,
        End::Guided => E::GUIDE != GuideEffect::Inject,
        End::Done => false,
    };
    if discard && let Some(snapshot) = pass.snapshot.take() {
        event.restore(snapshot);
    }
    match end {
        End::Denied => {
            if let Some(text) = pass.denied.take() {
                event.deny(text);
            }
        }
        End::Guided => {
            let mut joined = String::new();
            for (i, (name, feedback)) in pass.guides.iter().enumerate() {
                if i > 0 {
                    joined.push('\n');
                }
                joined.push('[');
                joined.push_str(name);
                joined.push_str("] ");
                joined.push_str(feedback);
            }
            event.guide(joined);
        }
        End::Interrupted => event.raise(std::mem::take(&mut pass.asked)),
        End::Done => {}
    }
    push_records(event, pass.records, end);
}

fn push_records<E: PassEvent>(event: &mut E, records: Vec<(DecisionRecord, Tag)>, end: End) {
    for (mut r, tag) in records {
        r.outcome = final_outcome::<E>(r.outcome, tag, end);
        // A confirm is only asked when the pass ends in its interrupt: one a deny or a guide
        // of the same pass cancelled was never put to anyone, and says so by having no
        // confirmation (as a shadowed one).
        if tag == Tag::ConfirmAsked && end != End::Interrupted {
            r.confirmation = None;
        }
        emit(&r);
        record_on::<E>(event, r);
    }
}

fn final_outcome<E: PassEvent>(current: DecisionOutcome, tag: Tag, end: End) -> DecisionOutcome {
    use DecisionOutcome::{Applied, Overridden};
    match (tag, end) {
        (Tag::Fixed, _) => current,
        (_, End::Denied) => Overridden,
        (Tag::Guide, End::Interrupted) => Overridden,
        (Tag::Guide, _) => Applied,
        (Tag::Transform, End::Guided) if E::GUIDE != GuideEffect::Inject => Overridden,
        (Tag::Transform, End::Interrupted) => Overridden,
        // A guide that only injects (before_model_call) cancels nothing: the call goes out
        // as the approval and the proceed let it.
        (Tag::ConfirmApproved | Tag::ConfirmAsked | Tag::Proceed, End::Guided)
            if E::GUIDE != GuideEffect::Inject =>
        {
            Overridden
        }
        _ => Applied,
    }
}

fn record_on<E: PassEvent>(event: &mut E, record: DecisionRecord) {
    // `record_decision` is an inherent method on each event type; reach it through the trait.
    event.push_decision(record);
}

/// Emits an audit record as a `tracing` event (nothing is formatted unless someone listens).
fn emit(record: &DecisionRecord) {
    if tracing::enabled!(target: "rein_interventions::audit", tracing::Level::INFO) {
        tracing::info!(
            target: "rein_interventions::audit",
            handler = %record.handler,
            event = record.event.as_str(),
            action = ?record.action,
            outcome = ?record.outcome,
            text = record.text.as_deref(),
            tool_use_id = record.tool_use_id.as_deref(),
            on_error = ?record.on_error,
            confirmation = record.confirmation.as_ref().map(|c| c.status.as_str()),
            answer_source = ?record.confirmation.as_ref().and_then(|c| c.source),
            duration_ns = record.duration.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            detail = record.detail.as_ref().map(tracing::field::display),
            "intervention decision"
        );
    }
}
