//! The two Restate virtual objects, keyed by session id:
//! - `ReinAgent` runs the session's agent: `run_input` (behind `invoke`) and `resume`
//!   (exclusive: one run per session across the cluster); `invoke` (shared: it refuses new input
//!   while a run goes, unless asked to queue), `session` (shared: reads while a run goes on)
//!   and `current_run` (shared, for the inbox: which run goes);
//! - `ReinInbox` takes what other processes send a running session — injected messages and a
//!   cancel — because the agent's own object is busy while it runs.
//!
//! An invocation of `ReinAgent` builds the agent from the user's factory, restores it from the
//! object's state and runs it with a [`Journal`] whose steps this handler carries out on the
//! Restate context, one at a time, in the order the agent asks (the agent's future and the
//! context stay in this one task: the journal sends each step here over a channel).

use std::sync::Arc;

use rein_agent::{
    Agent, AgentBuilder, Checkpoint, Input,
    journal::{Journal, JournalStep, StepKind},
};
use rein_core::{
    Error, Map, Message,
    id::InjectionId,
    interrupt::{Approval, Interrupt},
    message::InterruptResponse,
    tool::BoxFuture,
};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::caller::{AUTHENTICATE, Callers, Operation};
use crate::inbox::{Attach, InboxOutcome, ReinInbox, ReinInboxClient, signal_name};
use crate::tail::{
    self, FoundTail, LEGACY_HEAD, LegacyHead, TailBinding, TailChunk, TailEntry, TailKeys,
    TailWriter, chunk_key, legacy_entry_key,
};
use crate::wire::{InvokeRequest, ResumeRequest, RunReport, SessionView};

/// Builds the agent of a session (its model, tools, interventions): called for every
/// invocation, on whichever worker runs it.
pub(crate) type Factory = Arc<dyn Fn(&str) -> Result<AgentBuilder, Error> + Send + Sync>;

/// The session's record of its runs (none yet, or written by an earlier release: no run
/// going). A macro for the reason `read_tail!` is.
macro_rules! read_runs {
    ($ctx:expr) => {{
        let runs: Option<Json<Runs>> = $ctx.get(RUNS).await?;
        runs.map(Json::into_inner).unwrap_or_default()
    }};
}

/// The tail a run that never finished left ([`FoundTail`]): this release's chunks, or an
/// earlier release's head and entries, found among `$keys`, the state's keys (its key list is one
/// journal entry, a `get` of a key not there another). (A macro: `get` borrows its key for the
/// context's lifetime, which a shared function over both kinds of context cannot name.)
macro_rules! read_tail {
    ($ctx:expr, $keys:expr) => {{
        let keys = TailKeys::among($keys);
        let mut found: Option<FoundTail> = None;
        if let Some(entries) = keys.legacy_entries {
            let head: Option<Json<LegacyHead>> = $ctx.get(LEGACY_HEAD).await?;
            let tail = found.insert(FoundTail {
                run: head.map(|Json(head)| head.run).unwrap_or_default(),
                entries: Vec::new(),
                keys,
            });
            for n in 0..entries {
                let key = legacy_entry_key(n);
                let entry: Option<Json<TailEntry>> = $ctx.get(&key).await?;
                tail.entries.extend(entry.map(Json::into_inner));
            }
        }
        for n in 0..keys.chunks {
            let key = chunk_key(n);
            let chunk: Option<Json<TailChunk>> = $ctx.get(&key).await?;
            let Some(Json(chunk)) = chunk else { continue };
            let tail = found.get_or_insert_with(|| FoundTail {
                run: chunk.run.clone(),
                entries: Vec::new(),
                keys,
            });
            tail.entries.extend(chunk.entries);
        }
        found
    }};
}

const SESSION: &str = "session";
const LAST_RUN: &str = "last_run";
/// The session's runs: how many started, and the one going ([`Runs`]).
const RUNS: &str = "runs";

/// The `ReinAgent` object.
pub(crate) struct ReinAgent {
    pub(crate) factory: Factory,
    pub(crate) callers: Arc<Callers>,
    /// Restate's admin API, through which `abandon` kills a stuck run (none: the operator
    /// kills it).
    pub(crate) admin: Option<Arc<str>>,
}

#[restate_sdk::object]
impl ReinAgent {
    /// Runs the session's agent on new input. Shared, so that a second `invoke` during a run
    /// is refused at once (409, `RunInProgress`) instead of waiting in Restate's queue behind
    /// the run — unless it asks to queue (`"queue": true`). The run itself is the exclusive
    /// `run_input`. Whether a run goes is this object's own state (`runs`, which each run sets
    /// when it starts and ends), so an invoke makes no call to learn it; of two invokes that
    /// look at once, before either run started, the second waits behind the first run and is
    /// refused when its own would start (nothing of it runs).
    #[handler]
    async fn invoke(
        &self,
        ctx: SharedObjectContext<'_>,
        request: Json<InvokeRequest>,
    ) -> Result<Json<RunReport>, HandlerError> {
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::Invoke, ctx.key());
        let trusted = ctx
            .run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let request = request.into_inner();
        let state = self.callers.invocation_state(request.state, trusted)?;
        let mut messages = request.messages;
        if let Some(text) = request.text {
            messages.push(Message::user(text));
        }
        if messages.is_empty() {
            return Err(
                TerminalError::new_with_code(400, "invoke needs `text` or `messages`").into(),
            );
        }
        let key = ctx.key().to_owned();
        if request.queue {
            let input = Json(RunInput {
                messages,
                state,
                claim: None,
            });
            return Ok(ctx
                .object_client::<ReinAgentClient>(key)
                .run_input(input)
                .call()
                .await?);
        }
        // Whether a run goes is in this object's own state (sent with the invocation: no
        // call). Two invokes at once may both see none: the run of the second checks, when it
        // starts, that no run started since its invoke looked (the count), and refuses.
        let runs = read_runs!(ctx);
        if runs.going.is_some() {
            return Err(run_in_progress().into());
        }
        let input = Json(RunInput {
            messages,
            state,
            claim: Some(InvokeClaim {
                by: ctx.invocation_id().to_owned(),
                after: runs.started,
            }),
        });
        let call = ctx
            .object_client::<ReinAgentClient>(key.clone())
            .run_input(input)
            .call();
        let run = call.invocation_handle().await?.invocation_id().to_owned();
        match call.await {
            Ok(report) => Ok(report),
            Err(e) => {
                // A run killed through Restate (`restate invocations kill`) left its mark as
                // the run going, its inbox open and its tail: settled, the session takes
                // invokes again. (A run that refused or failed on its own has cleaned up:
                // this changes nothing then.)
                let _ = ctx
                    .object_client::<ReinAgentClient>(key)
                    .settle(Json(Some(run)))
                    .call()
                    .await;
                Err(e.into())
            }
        }
    }

    /// Runs the session's agent on the input `invoke` checked (ingress-private: only `invoke`
    /// calls it).
    #[handler(ingress_private)]
    async fn run_input(
        &self,
        ctx: ObjectContext<'_>,
        input: Json<RunInput>,
    ) -> Result<Json<RunReport>, HandlerError> {
        let RunInput {
            messages,
            state,
            claim,
        } = input.into_inner();
        let input = Input::messages(messages).with_state(state);
        self.run(ctx, Request::Invoke(input), claim).await
    }

    /// Answers the session's pending interrupts and continues its run.
    #[handler]
    async fn resume(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<ResumeRequest>,
    ) -> Result<Json<RunReport>, HandlerError> {
        // The run goes on as the invocation that paused it (its principal, its state): the
        // authenticator decides whether this caller may answer.
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::Resume, ctx.key());
        ctx.run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let answers = request.into_inner().answers;
        if answers.is_empty() {
            return Err(TerminalError::new_with_code(400, "resume needs `answers`").into());
        }
        self.run(ctx, Request::Resume(answers), None).await
    }

    /// Ends the session's run that cannot go on — stuck in a journal mismatch after a deploy,
    /// or on a deployment that is gone — and saves what it did: the run is killed through
    /// Restate's admin API (when the worker has its URL: `Worker::admin_url`; else the operator
    /// kills it, `restate invocations kill <id>`, and this waits for its end), its finished
    /// steps stay in the session, its open tool uses are closed as interrupted, the last run's
    /// report says it was abandoned, and the session takes new invokes again. 409 when no run
    /// is going.
    #[handler]
    async fn abandon(&self, ctx: SharedObjectContext<'_>) -> Result<Json<RunReport>, HandlerError> {
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::Abandon, ctx.key());
        ctx.run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let key = ctx.key().to_owned();
        // Calls of the session stuck with the run (on its dead deployment, or failing as it
        // does) hold the objects: the inbox's own among them, which would block the next step.
        let mut killed = 0;
        if let Some(admin) = self.admin.clone() {
            let session = key.clone();
            killed = ctx
                .run(|| async move { kill_stuck(&admin, &session).await.map(Json) })
                .name("kill the session's stuck calls")
                .await?
                .into_inner();
        }
        // The run going and the `invoke` waiting for it: named by this object's `runs`, or
        // (an earlier release's run) by the inbox's claim.
        let running = match read_runs!(ctx).going {
            Some(going) => Some((going.run, going.by)),
            None => {
                ctx.object_client::<ReinInboxClient>(key.clone())
                    .running()
                    .call()
                    .await?
                    .0
            }
        };
        // The stuck `invoke` killed may have freed the inbox already: the run is still
        // settled.
        let Some((run, invoker)) = running else {
            if killed == 0 {
                return Err(
                    TerminalError::new_with_code(409, "no run is going on this session").into(),
                );
            }
            return Ok(ctx
                .object_client::<ReinAgentClient>(key)
                .settle(Json(None))
                .call()
                .await?);
        };
        match self.admin.clone() {
            Some(admin) => {
                // The `invoke` waiting for the run goes too.
                let targets: Vec<String> = std::iter::once(run.clone()).chain(invoker).collect();
                ctx.run(|| async move {
                    for target in &targets {
                        kill(&admin, target).await?;
                    }
                    Ok(())
                })
                .name("kill the abandoned run")
                .await?;
            }
            None => tracing::warn!(
                session = %key,
                invocation = %run,
                "abandon waits for the run to end: kill it (`restate invocations kill {run}`), \
                 or give the worker Restate's admin URL (Worker::admin_url)"
            ),
        }
        Ok(ctx
            .object_client::<ReinAgentClient>(key)
            .settle(Json(Some(run)))
            .call()
            .await?)
    }

    /// After `abandon` ended the run `run` (none when no record named it any more): what it did
    /// joins the session, its report is the last run's, and the session takes new runs.
    #[handler(ingress_private)]
    async fn settle(
        &self,
        ctx: ObjectContext<'_>,
        run: Json<Option<String>>,
    ) -> Result<Json<RunReport>, HandlerError> {
        let mut run = run.into_inner();
        let key = ctx.key().to_owned();
        let stored: Option<Json<Checkpoint>> = ctx.get(SESSION).await?;
        let mut stored = stored.map(Json::into_inner);
        let mut its_tail = false;
        let keys = ctx.get_keys().await?;
        let unfinished = read_tail!(ctx, &keys);
        if let Some(found) = unfinished {
            its_tail = run.as_ref().is_none_or(|run| *run == found.run);
            let folded = tail::fold(stored, &found.run, found.entries);
            ctx.set(SESSION, Json(folded.clone()));
            clear_tail(&ctx, found.keys);
            stored = Some(folded);
            run.get_or_insert(found.run);
        }
        // The run that marked itself going is over (this handler is exclusive: it runs after
        // it), killed: the session takes invokes again, and the inbox, when next asked, keeps or
        // rejects what was queued for it as the run's own end would have.
        let paused = stored.as_ref().is_some_and(|s| s.paused.is_some());
        let runs = read_runs!(ctx);
        let closed = match (runs.going.as_ref(), &run) {
            (Some(going), Some(run)) if going.run != *run => false,
            (Some(_), _) => {
                // Its tail is folded and cleared (above).
                ctx.set(RUNS, Json(runs.ended(paused, true)));
                true
            }
            // An earlier release's run, which the inbox's claim and `open` named.
            (None, Some(run)) => {
                ctx.object_client::<ReinInboxClient>(key.clone())
                    .abandoned(Json((run.clone(), paused)))
                    .call()
                    .await?
                    .0
            }
            (None, None) => false,
        };
        let run = run.unwrap_or_default();
        let report = RunReport {
            stop_reason: rein_core::stream::StopReason::Cancelled,
            interrupts: stored
                .as_ref()
                .and_then(|s| s.paused.as_ref())
                .map(|p| p.interrupts())
                .unwrap_or_default(),
            error: Some(format!(
                "abandoned: run {run} was ended by an operator; its finished steps are kept"
            )),
            ..RunReport::empty(
                &key,
                stored
                    .as_ref()
                    .and_then(|s| s.messages.last())
                    .map(|(_, m)| m),
            )
        };
        // Unless a later run has ended since (and its report is the last).
        if its_tail || closed {
            ctx.set(LAST_RUN, Json(report.clone()));
        }
        Ok(Json(report))
    }

    /// The session's messages, pending interrupts and last run. While a run goes on, its
    /// messages so far are there too (a tool call still running shows as interrupted until
    /// its result is in); a run that never finished left its messages, its open tool uses
    /// closed as interrupted.
    #[handler]
    async fn session(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<SessionView>, HandlerError> {
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::Session, ctx.key());
        ctx.run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let stored: Option<Json<Checkpoint>> = ctx.get(SESSION).await?;
        let last_run: Option<Json<RunReport>> = ctx.get(LAST_RUN).await?;
        let mut stored = stored.map(Json::into_inner);
        let keys = ctx.get_keys().await?;
        let unfinished = read_tail!(ctx, &keys);
        if let Some(found) = unfinished {
            stored = Some(tail::fold(stored, &found.run, found.entries));
        }
        let Some(stored) = stored else {
            return Err(TerminalError::new_with_code(404, "unknown session").into());
        };
        Ok(Json(SessionView {
            messages: stored.messages,
            pending: stored.paused.map(|p| p.interrupts()).unwrap_or_default(),
            last_run: last_run.map(Json::into_inner),
        }))
    }

    /// Which run goes, how many runs have ended for good and whether the last one paused (for
    /// the session's inbox, which asks instead of being told by every run: shared, it answers
    /// while the run holds the object). Ingress-private: it names the run's invocation. Its
    /// state is read lazily: the one record, not the session's whole history.
    #[handler(ingress_private, lazy_state)]
    async fn current_run(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<RunView>, HandlerError> {
        let runs = read_runs!(ctx);
        Ok(Json(RunView {
            going: runs.going.map(|going| going.run),
            finished: runs.finished,
            paused: runs.paused,
        }))
    }
}

impl ReinAgent {
    async fn run(
        &self,
        ctx: ObjectContext<'_>,
        request: Request,
        claim: Option<InvokeClaim>,
    ) -> Result<Json<RunReport>, HandlerError> {
        let key = ctx.key().to_owned();
        crate::drain::note_run(&key, ctx.invocation_id());
        let runs = read_runs!(ctx);
        // Another invoke's run started after this invoke saw none going (both looked at
        // once): this one waited behind it, and is refused as if it had seen it.
        if claim.as_ref().is_some_and(|c| c.after != runs.started) {
            return Err(run_in_progress().into());
        }
        // Unless the last run ended here and cleared its tail, the state's keys say whether
        // there is a tail (below) and a checkpoint (a new session's first run reads none).
        let keys = if runs.going.is_none() && runs.tail_cleared {
            None
        } else {
            Some(ctx.get_keys().await?)
        };
        let stored: Option<Json<Checkpoint>> = match &keys {
            Some(keys) if !keys.iter().any(|key| key == SESSION) => None,
            _ => ctx.get(SESSION).await?,
        };
        let mut stored = stored.map(Json::into_inner);
        // A run that never finished (killed, abandoned, its worker gone for good) left its
        // history in the tail: it joins the session first, so that this run's tail starts
        // afresh. (A replay of this invocation reads what its first attempt read.)
        let unfinished = match &keys {
            Some(keys) => read_tail!(ctx, keys),
            None => None,
        };
        if let Some(found) = unfinished {
            let folded = tail::fold(stored, &found.run, found.entries);
            ctx.set(SESSION, Json(folded.clone()));
            clear_tail(&ctx, found.keys);
            stored = Some(folded);
        }
        // A session paused on interrupts: its inbox may hold what was injected meanwhile.
        let resuming = stored.as_ref().is_some_and(|s| s.paused.is_some());
        let input = match request {
            Request::Invoke(input) => input,
            Request::Resume(answers) => {
                let Some(stored) = &stored else {
                    return Err(TerminalError::new_with_code(404, "unknown session").into());
                };
                let Some(paused) = &stored.paused else {
                    let message = "the session has no pending interrupts";
                    return Err(TerminalError::new_with_code(409, message).into());
                };
                strict_answers(&paused.interrupts(), &answers)?;
                Input::resume(answers)
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let builder = (self.factory)(&key).map_err(|e| TerminalError::new(e.to_string()))?;
        // The session binding restores the agent (the agent in control after a handoff and a
        // repaired tail come back as a session store would restore them) and sends each
        // message added to the tail.
        let mut agent = builder
            .journal(ChannelJournal { tx: tx.clone() })
            .session(TailBinding::new(tx.clone(), stored))
            .build()
            .map_err(|e| TerminalError::new(e.to_string()))?;
        let outcomes = tx.clone();
        agent.interceptor().on_consumed(move |id, _| {
            let _ = outcomes.send(Op::Outcome(id, InboxOutcome::consumed()));
        });
        let outcomes = tx;
        agent.interceptor().on_rejected(move |id, _, reason| {
            let _ = outcomes.send(Op::Outcome(id, InboxOutcome::rejected(reason)));
        });
        // Going: an invoke from now on is refused at once (a run marked going that never
        // ended — killed — is cleared by `abandon`, or by the next run, which runs after it).
        let runs = Runs {
            started: runs.started + 1,
            going: Some(Going {
                run: ctx.invocation_id().to_owned(),
                by: claim.map(|c| c.by),
            }),
            tail_cleared: false,
            ..runs
        };
        ctx.set(RUNS, Json(runs.clone()));
        // The run is over: the session takes invokes again. The inbox is not told: it asks
        // `current_run` when something is injected, and rejects then what was queued for a run
        // that ended not paused.
        let end = |paused: bool, tail_cleared: bool| {
            ctx.set(RUNS, Json(runs.ended(paused, tail_cleared)));
        };
        if resuming {
            // What was injected while the session was paused waits in the inbox: told which
            // run goes, it signals it. Called, not sent: that signal must be journaled before
            // the first turn boundary's timer.
            let run = Attach {
                run: ctx.invocation_id().to_owned(),
                finished: runs.finished,
            };
            ctx.object_client::<ReinInboxClient>(key.clone())
                .attach(Json(run))
                .call()
                .await?;
        }

        let cancel = agent.cancel_handle();
        let this_run = ctx.invocation_id().to_owned();
        let mut tail = TailWriter::default();
        // The inbox signals the run (`inbox-<n>`) when it has something for it; a turn boundary
        // calls `take` only after a signal. Whether the signal came is read against a timer of
        // no duration set at the previous boundary (fired by now, as a rule): the one of the two
        // whose completion Restate journaled first wins, so a replay decides the same way. (Set
        // later — before the turn's tool calls, so that a run with no tool call sets none — a
        // boundary after an instant tool waited for it: +10 % per step in `bench durable`.)
        let mut signals = 0u64;
        let mut timer = ctx.sleep(std::time::Duration::ZERO);
        let mut outcomes = Outcomes::default();
        let result = {
            let run = agent.invoke(input);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    biased;
                    result = &mut run => break result,
                    Some(op) = rx.recv() => match op {
                        Op::Injections { reply } => {
                            let fired = std::mem::replace(
                                &mut timer,
                                ctx.sleep(std::time::Duration::ZERO),
                            );
                            let signal = ctx.signal::<()>(&signal_name(signals));
                            let signalled = restate_sdk::select! {
                                _ = signal => Some(true),
                                _ = fired => Some(false),
                                on_cancel => None,
                            };
                            match signalled {
                                Some(true) => {
                                    signals += 1;
                                    // What it takes (injected messages) is written before
                                    // the next step.
                                    tail.effect_happened();
                                    take(&ctx, &key, &cancel, reply).await;
                                }
                                Some(false) => {
                                    let _ = reply.send(Ok(Vec::new()));
                                }
                                // Cancelled through Restate: the run stops as a cancelled run
                                // does.
                                None => {
                                    cancel.cancel();
                                    let _ = reply.send(Err(Error::Internal(
                                        "the durable invocation was cancelled",
                                    )));
                                }
                            }
                        }
                        Op::Step { step, run: work, reply } => {
                            if let Some((at, chunk)) = tail.before_step(step.kind, &this_run) {
                                ctx.set(&at, Json(chunk));
                            }
                            let kind = step.kind;
                            run_step(&ctx, step, work, reply, &cancel).await;
                            if kind == StepKind::ToolCall {
                                tail.effect_happened();
                            }
                        }
                        op => serve(&ctx, &key, op, &mut tail, &mut outcomes),
                    },
                }
            }
        };
        // What the run's end reported (rejections of items still queued) is journaled too.
        while let Ok(op) = rx.try_recv() {
            serve(&ctx, &key, op, &mut tail, &mut outcomes);
        }
        // Every way out below returns a report (or an error) that may list outcomes: the inbox
        // has written them all first.
        outcomes.settle(&ctx, &key).await;
        let report = match &result {
            Ok(result) => RunReport::of(&key, result),
            Err(e) => match answer_error(e) {
                // The input or the answers were wrong: nothing ran, nothing changed.
                Some(status) => {
                    clear_tail(&ctx, tail.keys());
                    end(agent.pending_interrupts().is_some(), true);
                    return Err(TerminalError::new_with_code(status, e.to_string()).into());
                }
                None => failed_report(&key, &agent, e),
            },
        };
        // What is saved goes through the journal: a replay of this invocation (its worker died
        // after saving) saves the very same bytes, though its message ids and the audit's
        // timings are its own.
        let stored = agent.checkpoint();
        let paused = agent.pending_interrupts().is_some();
        let saved = ctx
            .run(|| async move { Ok(Json((stored, report))) })
            .name("save session")
            .await;
        let Json((stored, report)) = match saved {
            Ok(saved) => saved,
            // Cancelled through Restate as it saved: the run ends unsaved (its tail keeps what
            // it did, what it held back included), and the session is free again.
            Err(e) => {
                if let Some((at, chunk)) = tail.take(&this_run) {
                    ctx.set(&at, Json(chunk));
                }
                end(paused, false);
                return Err(e.into());
            }
        };
        // The checkpoint holds what the tail held, and what it held back.
        ctx.set(SESSION, Json(stored));
        ctx.set(LAST_RUN, Json(report.clone()));
        clear_tail(&ctx, tail.keys());
        end(paused, true);
        Ok(Json(report))
    }
}

/// New input for a run, as `invoke` checked it: the messages and the invocation state.
#[derive(Serialize, Deserialize)]
pub(crate) struct RunInput {
    messages: Vec<Message>,
    state: Map,
    /// The `invoke` that saw no run going (none: it asked to queue; or an earlier release's
    /// invoke, which claimed the inbox instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<InvokeClaim>,
}

/// An `invoke` that found no run going: its invocation, and how many runs had started then.
#[derive(Serialize, Deserialize)]
pub(crate) struct InvokeClaim {
    by: String,
    after: u64,
}

/// The object's record of its runs (`runs`): how many started, the one going, how many ended
/// not paused and whether the last one paused (what the inbox asks through `current_run`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Runs {
    started: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    going: Option<Going>,
    /// Runs that ended not paused: each one's end rejects what was still queued for it.
    #[serde(default, skip_serializing_if = "crate::inbox::is_zero")]
    finished: u64,
    /// Whether the last run ended paused (none: no run of this release has ended; the inbox
    /// then keeps what the earlier release's `close` told it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
    /// The last run's end left no tail (it cleared it, or `settle` folded it): the next run
    /// need not look for one. False in a record an earlier release wrote.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tail_cleared: bool,
}

/// What the inbox learns from `current_run`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RunView {
    /// The invocation of the run going.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) going: Option<String>,
    /// How many runs have ended not paused (what was queued before such an end is rejected).
    #[serde(default)]
    pub(crate) finished: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) paused: Option<bool>,
}

/// The run going: its invocation and the `invoke` waiting for it (none: a resume, or queued).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Going {
    run: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<String>,
}

impl Runs {
    /// The record once the run going has ended (`paused`: on interrupts, its inbox's queue kept
    /// for the resume; else what is still queued is rejected, lazily, by the inbox).
    /// `tail_cleared`: the run's tail is cleared or folded (else the next run looks for it).
    fn ended(&self, paused: bool, tail_cleared: bool) -> Self {
        Self {
            started: self.started,
            going: None,
            finished: self.finished + u64::from(!paused),
            paused: Some(paused),
            tail_cleared,
        }
    }
}

fn run_in_progress() -> TerminalError {
    TerminalError::new_with_code(
        409,
        "a run is going on this session (RunInProgress): wait for it, cancel it, or send \
         `\"queue\": true` to run after it",
    )
}

/// What a `ReinAgent` handler asks its run for.
enum Request {
    /// New input.
    Invoke(Input),
    /// Answers to the pending interrupts.
    Resume(Vec<InterruptResponse>),
}

/// An answer from the ingress to an interrupt that takes an approval must be one, strictly
/// ([`Approval::from_wire`]): a typo such as `{"approve": true}` or a string such as
/// `"yes please"` is a 400 and nothing is applied (the interrupt still waits), never read as a
/// rejection. Unknown ids are left to the agent (400 too).
fn strict_answers(
    pending: &[Interrupt],
    answers: &[InterruptResponse],
) -> Result<(), TerminalError> {
    for answer in answers {
        let Some(interrupt) = pending
            .iter()
            .find(|i| i.resume_id() == answer.interrupt_id)
        else {
            continue;
        };
        if interrupt.takes_an_approval() {
            Approval::from_wire(&answer.response).map_err(|why| {
                TerminalError::new_with_code(
                    400,
                    format!("the answer to interrupt {}: {why}", answer.interrupt_id),
                )
            })?;
        }
    }
    Ok(())
}

/// The HTTP status of an error that is the caller's: the run did not start.
fn answer_error(e: &Error) -> Option<u16> {
    match e {
        // An answer not bound to the pending action conflicts with what is pending now.
        Error::NoPendingInterrupts
        | Error::InterruptsPending
        | Error::FingerprintMismatch { .. } => Some(409),
        Error::UnknownInterrupt(_) | Error::InvalidAnswer { .. } | Error::InvalidMessage(_) => {
            Some(400)
        }
        _ => None,
    }
}

fn failed_report(key: &str, agent: &Agent, e: &Error) -> RunReport {
    RunReport {
        error: Some(e.to_string()),
        ..RunReport::empty(key, agent.messages().last())
    }
}

/// Kills, through Restate's admin API, the calls of the session's two objects that Restate is
/// retrying or has paused after retrying (`backing-off`, `paused`): stuck with a run on a
/// deployment that is gone, or failing as it does. Calls waiting their turn or running are left.
/// Returns how many it killed.
async fn kill_stuck(admin: &str, session: &str) -> Result<usize, HandlerError> {
    // A SQL string literal: its quotes doubled (the session id is the caller's).
    let literal = session.replace('\'', "''");
    let query = format!(
        "SELECT id FROM sys_invocation WHERE target_service_name IN ('ReinAgent', 'ReinInbox') \
         AND target_service_key = '{literal}' AND status IN ('backing-off', 'paused')"
    );
    #[derive(Deserialize)]
    struct Rows {
        rows: Vec<Row>,
    }
    #[derive(Deserialize)]
    struct Row {
        id: String,
    }
    let response = admin_http()?
        .post(format!("{}/query", admin.trim_end_matches('/')))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(serde_json::json!({ "query": query }).to_string())
        .send()
        .await
        .map_err(unreachable_admin)?;
    let status = response.status().as_u16();
    let body = response.bytes().await.map_err(unreachable_admin)?;
    if status >= 300 {
        return Err(admin_refused("list the session's calls", status, &body));
    }
    let rows: Rows = serde_json::from_slice(&body).map_err(|e| {
        TerminalError::new_with_code(502, format!("Restate's admin API answered: {e}"))
    })?;
    for row in &rows.rows {
        kill(admin, &row.id).await?;
    }
    Ok(rows.rows.len())
}

fn admin_http() -> Result<reqwest::Client, HandlerError> {
    rein_models::http::client(std::time::Duration::from_secs(10))
        .map_err(|e| TerminalError::new(e.to_string()).into())
}

/// Restate's admin API cannot be reached: an error Restate retries (it may be restarting).
fn unreachable_admin(e: reqwest::Error) -> HandlerError {
    HandlerError::from(std::io::Error::other(e.without_url()))
}

fn admin_refused(what: &str, status: u16, body: &[u8]) -> HandlerError {
    let message = String::from_utf8_lossy(body);
    TerminalError::new_with_code(
        502,
        format!("Restate's admin API refused to {what}: {status} {message}"),
    )
    .into()
}

/// Kills an invocation through Restate's admin API. One that has ended already is fine.
async fn kill(admin: &str, invocation: &str) -> Result<(), HandlerError> {
    let http = admin_http()?;
    let url = format!(
        "{}/invocations/{invocation}/kill",
        admin.trim_end_matches('/')
    );
    let response = http.patch(url).send().await.map_err(unreachable_admin)?;
    let status = response.status().as_u16();
    // 404: unknown; 409: completed already (killed by an earlier step, say).
    if (200..300).contains(&status) || status == 404 || status == 409 {
        return Ok(());
    }
    let body = response.bytes().await.unwrap_or_default();
    Err(admin_refused(
        &format!("kill run {invocation}"),
        status,
        &body,
    ))
}

/// What the agent asks of the handler.
pub(crate) enum Op {
    Step {
        step: JournalStep,
        run: BoxFuture<'static, Value>,
        reply: oneshot::Sender<Result<Value, Error>>,
    },
    Injections {
        reply: oneshot::Sender<Result<Vec<(InjectionId, Message)>, Error>>,
    },
    Outcome(InjectionId, InboxOutcome),
    /// A message added or rewritten: saved to the tail ([`TailWriter`]).
    Tail(TailEntry),
}

/// Clears a tail (the checkpoint holds it now).
fn clear_tail(ctx: &ObjectContext<'_>, keys: TailKeys) {
    for key in keys.keys() {
        ctx.clear(&key);
    }
}

/// Carries out one of the agent's requests that needs no step of the run's loop: a message for
/// the tail, an outcome for the inbox; a step or a take once the run has ended.
fn serve(
    ctx: &ObjectContext<'_>,
    key: &str,
    op: Op,
    tail: &mut TailWriter,
    outcomes: &mut Outcomes,
) {
    match op {
        Op::Tail(entry) => tail.push(entry),
        // The run has ended: nothing more is run or taken (what is queued is rejected by the
        // inbox).
        Op::Step { reply, .. } => {
            let _ = reply.send(Err(Error::Internal("the durable invocation has ended")));
        }
        Op::Injections { reply } => {
            let _ = reply.send(Ok(Vec::new()));
        }
        Op::Outcome(id, outcome) => outcomes.send(ctx, key, id, outcome),
    }
}

/// The outcomes a run reports to its inbox: each sent one-way as the agent settles it (the run
/// waits for none), then, once the run has ended, one call if it sent any — a barrier. Restate
/// runs the invocations one invocation makes on one object key in the order it made them (a
/// Virtual Object's ordering guarantee) and the inbox's handlers are exclusive, so the call
/// returns only after every outcome sent before it is written: the caller never gets the run's
/// report while `status` still says `delivered`. A run that reported nothing calls nothing.
#[derive(Default)]
struct Outcomes {
    sent: bool,
}

impl Outcomes {
    fn send(&mut self, ctx: &ObjectContext<'_>, key: &str, id: InjectionId, outcome: InboxOutcome) {
        ctx.object_client::<ReinInboxClient>(key.to_owned())
            .report(Json((id, outcome)))
            .send();
        self.sent = true;
    }

    /// Waits until the inbox has written every outcome sent. (No deadlock while this run holds
    /// the session's `ReinAgent`: of its handlers, the inbox's exclusive ones call only the
    /// shared `current_run`.)
    async fn settle(self, ctx: &ObjectContext<'_>, key: &str) {
        if !self.sent {
            return;
        }
        for attempt in 0..2 {
            let settled = ctx
                .object_client::<ReinInboxClient>(key.to_owned())
                .reported()
                .call()
                .await;
            match settled {
                Ok(()) => return,
                // A cancel through Restate arriving now cancels the call the run waits for
                // (never the sends before it), and is spent: a second call is not cancelled.
                Err(e) if e.code() == 409 && attempt == 0 => {}
                // The outcomes still arrive; only the wait for them is given up.
                Err(e) => {
                    tracing::warn!(session = %key, "the inbox did not confirm the outcomes: {e}");
                    return;
                }
            }
        }
    }
}

/// Runs one of the agent's steps as a Restate `run`.
async fn run_step(
    ctx: &ObjectContext<'_>,
    step: JournalStep,
    run: BoxFuture<'static, Value>,
    reply: oneshot::Sender<Result<Value, Error>>,
    cancel: &rein_agent::CancelHandle,
) {
    let done = ctx
        .run(|| async move { Ok(Json(run.await)) })
        .name(step.name)
        .await;
    let value = match done {
        Ok(Json(value)) => Ok(value),
        Err(e) => {
            // Restate cancelled the invocation (or the step failed for good): the run stops as
            // a cancelled run does, its history kept valid.
            cancel.cancel();
            Err(Error::Internal(if e.code() == 409 {
                "the durable invocation was cancelled"
            } else {
                "the journal could not record a step"
            }))
        }
    };
    let _ = reply.send(value);
}

/// A turn boundary after the inbox's signal: everything queued, or the word to stop.
async fn take(
    ctx: &ObjectContext<'_>,
    key: &str,
    cancel: &rein_agent::CancelHandle,
    reply: oneshot::Sender<Result<Vec<(InjectionId, Message)>, Error>>,
) {
    let taken = ctx
        .object_client::<ReinInboxClient>(key.to_owned())
        .take()
        .call()
        .await;
    let items = match taken {
        Ok(Json(turn)) => {
            // Cancelled: the run stops here, between turns — every tool it ran has finished
            // and its result is in the history.
            if turn.stop {
                cancel.cancel();
            }
            Ok(turn.items)
        }
        // Cancelled (or failed for good): the run stops as a cancelled run does.
        Err(_) => {
            cancel.cancel();
            Err(Error::Internal("the inbox could not be read"))
        }
    };
    let _ = reply.send(items);
}

/// The journal the agent sees: every request goes to the handler's task.
struct ChannelJournal {
    tx: mpsc::UnboundedSender<Op>,
}

impl Journal for ChannelJournal {
    fn step(
        &self,
        step: JournalStep,
        run: BoxFuture<'static, Value>,
    ) -> BoxFuture<'static, Result<Value, Error>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(Op::Step { step, run, reply });
        Box::pin(async move {
            sent.map_err(|_| Error::Internal("the durable invocation has ended"))?;
            answer
                .await
                .unwrap_or(Err(Error::Internal("the durable invocation has ended")))
        })
    }

    fn injections(&self) -> BoxFuture<'static, Result<Vec<(InjectionId, Message)>, Error>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(Op::Injections { reply });
        Box::pin(async move {
            sent.map_err(|_| Error::Internal("the durable invocation has ended"))?;
            answer
                .await
                .unwrap_or(Err(Error::Internal("the durable invocation has ended")))
        })
    }
}

/// Both objects, bound to one Restate endpoint (its builder carries the identity keys).
pub(crate) fn endpoint(
    builder: restate_sdk::endpoint::Builder,
    factory: Factory,
    callers: Arc<Callers>,
    admin: Option<Arc<str>>,
) -> restate_sdk::endpoint::Endpoint {
    builder
        .bind(ReinAgent {
            factory,
            callers: callers.clone(),
            admin,
        })
        .bind(ReinInbox { callers })
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inbox rejects what was queued once `finished` moves on: a run's end moves it only
    /// when the run did not pause (a paused run's queue waits for its resume), and a record
    /// written before these fields reads as no run of this release ended.
    #[test]
    fn only_a_run_that_ends_not_paused_moves_the_inbox_on() {
        let earlier: Runs =
            serde_json::from_str(r#"{"started": 3, "going": {"run": "inv_1"}}"#).unwrap();
        assert_eq!((earlier.finished, earlier.paused), (0, None));
        assert!(
            !earlier.tail_cleared,
            "an earlier release's run may have left a tail"
        );
        let paused = earlier.ended(true, true);
        assert!(paused.going.is_none());
        assert_eq!(
            (paused.started, paused.finished, paused.paused),
            (3, 0, Some(true))
        );
        let finished = paused.ended(false, true);
        assert_eq!((finished.finished, finished.paused), (1, Some(false)));
        let written = serde_json::to_value(&finished).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"started": 3, "finished": 1, "paused": false, "tail_cleared": true})
        );
    }
}
