//! One run: the agent's stream translated into AG-UI events.

use std::sync::{Mutex, PoisonError};

use rein_agent::{Agent, AgentEvent, Checkpoint, Input, PausedRun, PendingInterrupt};
use rein_core::audit::{DecisionAction, DecisionRecord};
use rein_core::interrupt::Approval;
use rein_core::state::{APPROVER_KEY, InvocationState, PRINCIPAL_KEY};
use rein_core::{Error, Role, result::AgentResult, stream::StopReason};
use rein_core::{Message, ToolUse};
use rein_sessions::{ApprovalOutcome, ApprovalRecord, RecordApprovals, SessionSnapshot};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::auth::Principal;
use crate::interrupts::{Asking, parked, to_wire};
use crate::wire::{ResumeEntry, WireEvent};

/// The agent-state key where the server keeps the ids of the last resume's interrupts (so a
/// repeated resume is recognised as already applied). Hidden from STATE_SNAPSHOT.
pub(crate) const ANSWERED_KEY: &str = "rein_agui.answered";

/// Who answered an interrupt: the authenticated principal, and the name the client's resume
/// entry claims (`metadata.answeredBy`), kept beside it — never instead of it.
#[derive(Debug, Clone)]
pub(crate) struct Answerer {
    /// What the answered interrupt asked about (its point's subject: a tool use id; for a
    /// sub-agent's interrupt, the agent tool's use).
    pub(crate) about: Option<String>,
    pub(crate) principal: String,
    pub(crate) claimed: Option<String>,
    /// The interrupt answered (its resume id), the handler that asked and what it said.
    pub(crate) interrupt_id: String,
    pub(crate) handler: String,
    pub(crate) reason: String,
    /// The answer, when the interrupt takes an approval (what the approval record keeps).
    pub(crate) approval: Option<Approval>,
}

/// What a run records in the thread's approval record, written by the thread's session
/// manager with the agent's own writes ([`RecordApprovals`]): a question with the pause that
/// asks it, an answer with the write that consumes the pause, an explained proceed with the
/// invocation's last write. Who answered is set before the run starts ([`Ledger::answered`]).
#[derive(Default)]
pub(crate) struct Ledger {
    run: Mutex<LedgerRun>,
}

#[derive(Default)]
struct LedgerRun {
    /// Who the run is for (its invocation state's `principal`).
    requester: Option<String>,
    answered_by: Vec<Answerer>,
    /// Proceeds a handler explained, for the invocation's last write.
    proceeded: Vec<ApprovalRecord>,
    /// Answers refused (nothing applied), for the next write.
    refused: Vec<ApprovalRecord>,
}

impl Ledger {
    fn run(&self) -> std::sync::MutexGuard<'_, LedgerRun> {
        self.run.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run about to start is for `requester`, answering as `answered_by` says.
    pub(crate) fn answered(&self, requester: Option<String>, answered_by: Vec<Answerer>) {
        let mut run = self.run();
        run.requester = requester;
        run.answered_by = answered_by;
    }

    /// Answers refused before anything was applied, recorded with the next write.
    pub(crate) fn refused(&self, records: Vec<ApprovalRecord>) {
        self.run().refused.extend(records);
    }

    /// Who answered, for the run's events.
    fn answered_by(&self) -> Vec<Answerer> {
        self.run().answered_by.clone()
    }
}

/// The most refused answers recorded for one question.
const MAX_REFUSALS_PER_QUESTION: usize = 20;

/// The record of an answer that was refused, nothing applied: who tried (principal, claimed
/// name beside it), when, what they answered (the edit and note, as sent), why it was refused.
/// What was asked is filled in from the record of the question ([`complete`]).
pub(crate) fn refusal_record(
    who: &Principal,
    entry: &ResumeEntry,
    asked: &PendingInterrupt,
    why: &str,
) -> ApprovalRecord {
    let mut r = ApprovalRecord::new(ApprovalOutcome::Refused, asked.interrupt.name.clone());
    r.interrupt_id = Some(entry.interrupt_id.clone());
    r.reason = Some(asked.interrupt.prompt_text());
    r.approver = Some(who.id().to_owned());
    r.claimed_approver = claimed_name(entry);
    let payload = entry.payload.as_ref();
    r.edit = payload.and_then(|p| p.get("edit")).cloned();
    r.note = payload
        .and_then(|p| p.get("note"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    r.refusal = Some(why.to_owned());
    r.answered_at = Some(now_ms());
    r
}

/// The name a resume entry claims for who answered (`metadata.answeredBy`), kept beside the
/// principal, never instead.
pub(crate) fn claimed_name(entry: &ResumeEntry) -> Option<String> {
    entry
        .metadata
        .as_ref()
        .and_then(|m| m.get("answeredBy"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The resume ids of a paused run's interrupts.
fn pending_ids(paused: Option<&PausedRun>) -> Vec<String> {
    paused
        .map(|p| {
            p.pending()
                .iter()
                .map(|p| p.interrupt.resume_id())
                .collect()
        })
        .unwrap_or_default()
}

impl RecordApprovals for Ledger {
    fn records(&self, stored: &SessionSnapshot, next: &Checkpoint) -> Vec<ApprovalRecord> {
        let was = pending_ids(stored.pending_interrupts.as_ref());
        let now = pending_ids(next.paused.as_ref());
        let mut run = self.run();
        // The answers this write takes (an answer the run refused leaves its interrupt
        // pending), each completed from the record of its question; then what the run
        // explained; then what it asks now.
        let mut records: Vec<ApprovalRecord> = run
            .answered_by
            .iter()
            .filter(|a| was.contains(&a.interrupt_id) && !now.contains(&a.interrupt_id))
            .filter_map(|a| {
                let mut r = answer_record(a, a.approval.as_ref()?, run.requester.as_deref());
                complete(&mut r, &stored.approvals);
                Some(r)
            })
            .collect();
        records.append(&mut run.proceeded);
        // Refusals are bounded per question: a client repeating a refused answer cannot grow
        // the record without end (the audit log still has each one).
        for mut r in std::mem::take(&mut run.refused) {
            let id = r.interrupt_id.as_ref();
            let earlier = stored
                .approvals
                .iter()
                .chain(&records)
                .filter(|q| q.outcome == ApprovalOutcome::Refused && q.interrupt_id.as_ref() == id)
                .count();
            if earlier < MAX_REFUSALS_PER_QUESTION {
                complete(&mut r, &stored.approvals);
                records.push(r);
            }
        }
        if let Some(paused) = &next.paused {
            let requester = paused.invocation_state().principal();
            let messages = next.messages.iter().map(|(_, m)| m);
            records.extend(
                paused
                    .pending()
                    .iter()
                    .filter(|p| !was.contains(&p.interrupt.resume_id()))
                    .map(|p| asked_record(p, messages.clone(), requester)),
            );
        }
        records
    }

    fn invocation_decisions(&self, decisions: &[DecisionRecord]) {
        let mut run = self.run();
        let requester = run.requester.clone();
        let explained = decisions.iter().filter(|d| {
            d.action == DecisionAction::Proceed
                && d.detail.is_some()
                && d.confirmation.as_ref().is_none_or(|c| c.answer.is_none())
        });
        for d in explained {
            let mut r = ApprovalRecord::new(ApprovalOutcome::Proceeded, d.handler.clone());
            r.tool_use_id.clone_from(&d.tool_use_id);
            r.reason.clone_from(&d.text);
            r.detail = d.detail.as_deref().cloned();
            r.requester.clone_from(&requester);
            r.answered_at = Some(now_ms());
            run.proceeded.push(r);
        }
    }
}

/// Completes an answer's record from the thread's record of its question: what was asked
/// (tool, input, when) and, when the answer does not know it, who for.
fn complete(r: &mut ApprovalRecord, recorded: &[ApprovalRecord]) {
    let question = recorded.iter().rev().find(|q| {
        q.outcome == ApprovalOutcome::Asked
            && q.interrupt_id.is_some()
            && q.interrupt_id == r.interrupt_id
    });
    if let Some(q) = question {
        r.tool_use_id.clone_from(&q.tool_use_id);
        r.tool_name.clone_from(&q.tool_name);
        r.asked = q.asked.clone();
        r.asked_at = q.asked_at;
        if r.requester.is_none() {
            r.requester.clone_from(&q.requester);
        }
    }
}

/// The invocation state of a run started by `who`: who it is for, under `principal` — from the
/// server's authentication only; the request's `state` and `forwardedProps` never reach it.
pub(crate) fn requester_state(who: &Principal) -> InvocationState {
    let mut map = Map::new();
    map.insert(PRINCIPAL_KEY.into(), Value::String(who.id().to_owned()));
    InvocationState::from_map(map)
}

/// The invocation state of a resume answered by `who`: the paused run's (its requester kept
/// under `principal`) with `approver` set to `who`.
pub(crate) fn approver_state(paused: &InvocationState, who: &Principal) -> InvocationState {
    let mut map = paused.as_map().clone();
    map.insert(APPROVER_KEY.into(), Value::String(who.id().to_owned()));
    InvocationState::from_map(map)
}

/// What the server allows one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunBounds {
    /// Model calls: at this many, the run stops before the next one.
    pub(crate) max_turns: u32,
}

/// Translates agent events into AG-UI events and sends them; a closed receiver (the client
/// went away) is ignored: the run finishes, so the session stays consistent.
struct Translator {
    tx: mpsc::UnboundedSender<WireEvent>,
    open_text: Option<String>,
    /// The text message of the current model response, the parent of its tool calls.
    response_text_id: Option<String>,
    answered_by: Vec<Answerer>,
    /// `rein.tool_progress` events sent, by tool call.
    progress_sent: std::collections::HashMap<String, u32>,
}

impl Translator {
    fn send(&self, e: WireEvent) {
        let _ = self.tx.send(e);
    }

    fn close_text(&mut self) {
        if let Some(id) = self.open_text.take() {
            self.send(WireEvent::TextMessageEnd { message_id: id });
        }
    }

    fn text(&mut self, delta: String) {
        if self.open_text.is_none() {
            let id = new_id();
            self.send(WireEvent::TextMessageStart {
                message_id: id.clone(),
                role: "assistant".into(),
            });
            self.response_text_id = Some(id.clone());
            self.open_text = Some(id);
        }
        if let Some(id) = &self.open_text {
            self.send(WireEvent::TextMessageContent {
                message_id: id.clone(),
                delta,
            });
        }
    }

    fn event(&mut self, event: AgentEvent) -> Option<AgentResult> {
        match event {
            AgentEvent::ModelCallStarted { .. } => {
                self.close_text();
                self.response_text_id = None;
            }
            AgentEvent::TextDelta(t) if !t.is_empty() => self.text(t),
            AgentEvent::ResponseDiscarded { reason, handler } => {
                self.close_text();
                self.response_text_id = None;
                // A handler's reason is the policy's own text; without a handler the reason is
                // a failed call's error (a provider's answer): that stays in the log.
                let reason = if handler.is_some() {
                    reason
                } else {
                    tracing::info!(reason, "AG-UI run: a model response was withdrawn");
                    "the model call failed or was cancelled".to_owned()
                };
                self.send(WireEvent::custom(
                    "rein.response_discarded",
                    json!({"reason": reason, "handler": handler}),
                ));
            }
            AgentEvent::ResponseReplaced { message } => {
                self.send(WireEvent::custom(
                    "rein.response_replaced",
                    json!({"text": message.text()}),
                ));
            }
            AgentEvent::MessageAdded { message, .. } if message.role == Role::Assistant => {
                // Text that was not streamed (held back until the verdict) is sent whole.
                if self.response_text_id.is_none() && !message.text().is_empty() {
                    self.text(message.text());
                }
                self.close_text();
                for tu in message.tool_uses() {
                    self.send(WireEvent::ToolCallStart {
                        tool_call_id: tu.tool_use_id.clone(),
                        tool_call_name: tu.name.clone(),
                        parent_message_id: self.response_text_id.clone(),
                    });
                    self.send(WireEvent::ToolCallArgs {
                        tool_call_id: tu.tool_use_id.clone(),
                        delta: tu.input.to_string(),
                    });
                    self.send(WireEvent::ToolCallEnd {
                        tool_call_id: tu.tool_use_id.clone(),
                    });
                }
            }
            AgentEvent::MessageUpdated { message, .. } if message.role == Role::Assistant => {
                let calls: Vec<Value> = message
                    .tool_uses()
                    .map(|t| json!({"toolCallId": t.tool_use_id, "name": t.name, "input": t.input}))
                    .collect();
                self.send(WireEvent::custom(
                    "rein.message_updated",
                    json!({"text": message.text(), "toolCalls": calls}),
                ));
            }
            AgentEvent::ToolProgress {
                tool_use_id,
                name,
                progress,
                total,
                message,
            } => {
                let sent = self.progress_sent.entry(tool_use_id.clone()).or_default();
                if *sent < MAX_PROGRESS_EVENTS_PER_CALL {
                    *sent += 1;
                    let message: Option<String> =
                        message.map(|m| m.chars().take(MAX_PROGRESS_MESSAGE_CHARS).collect());
                    self.send(WireEvent::custom(
                        "rein.tool_progress",
                        json!({"toolCallId": tool_use_id, "name": name, "progress": progress,
                               "total": total, "message": message}),
                    ));
                }
            }
            AgentEvent::ToolResult(r) => {
                self.progress_sent.remove(&r.tool_use_id);
                self.close_text();
                self.send(WireEvent::ToolCallResult {
                    message_id: new_id(),
                    tool_call_id: r.tool_use_id.clone(),
                    content: r.text(),
                    role: "tool".into(),
                });
            }
            AgentEvent::Decision(d) => {
                let mut value = serde_json::to_value(&d).unwrap_or(Value::Null);
                if let (Some(c), Some(obj)) = (&d.confirmation, value.as_object_mut())
                    && c.answer.is_some()
                {
                    let who = d.tool_use_id.as_ref().and_then(|t| {
                        self.answered_by
                            .iter()
                            .find(|a| a.about.as_ref() == Some(t))
                    });
                    if let Some(who) = who.or_else(|| self.answered_by.first()) {
                        obj.insert("answeredBy".into(), Value::String(who.principal.clone()));
                        if let Some(claimed) = &who.claimed {
                            obj.insert("claimedAnsweredBy".into(), Value::String(claimed.clone()));
                        }
                    }
                }
                self.send(WireEvent::custom("rein.decision", value));
            }
            AgentEvent::InjectionConsumed { id, message } => self.send(WireEvent::custom(
                "rein.injection_consumed",
                json!({"injectionId": id.to_string(), "text": message.text()}),
            )),
            AgentEvent::InjectionRejected { id, reason } => self.send(WireEvent::custom(
                "rein.injection_rejected",
                json!({"injectionId": id.to_string(), "reason": reason}),
            )),
            AgentEvent::InjectionAwaitingApproval { id, interrupts } => {
                let asks: Vec<_> = parked(id, &interrupts).iter().map(to_wire).collect();
                self.send(WireEvent::custom(
                    "rein.injection_awaiting_approval",
                    json!({"injectionId": id.to_string(), "interrupts": asks}),
                ));
            }
            // The typed answer as it streams (SPEC §13); the checked one is in RUN_FINISHED.
            AgentEvent::OutputPartial { attempt, value } => self.send(WireEvent::custom(
                "rein.output_partial",
                json!({"attempt": attempt, "value": value}),
            )),
            AgentEvent::Handoff { from, to } => self.send(WireEvent::custom(
                "rein.handoff",
                json!({"from": from, "to": to}),
            )),
            AgentEvent::Finished(r) => {
                self.close_text();
                return Some(r);
            }
            _ => {}
        }
        None
    }
}

/// The record of an answer: who (principal, claimed name beside it), when, the answer, its
/// edit and note. What was asked (tool, input, when) is filled in from the thread's record of
/// the question when it is written ([`complete`]).
fn answer_record(who: &Answerer, approval: &Approval, requester: Option<&str>) -> ApprovalRecord {
    let outcome = if approval.approved {
        ApprovalOutcome::Approved
    } else {
        ApprovalOutcome::Rejected
    };
    answered(who, outcome, Some(approval), requester)
}

/// The record of an answer by `who` with this outcome.
fn answered(
    who: &Answerer,
    outcome: ApprovalOutcome,
    approval: Option<&Approval>,
    requester: Option<&str>,
) -> ApprovalRecord {
    let mut r = ApprovalRecord::new(outcome, who.handler.clone());
    r.interrupt_id = Some(who.interrupt_id.clone());
    r.tool_use_id.clone_from(&who.about);
    r.reason = Some(who.reason.clone());
    r.requester = requester.map(str::to_owned);
    r.approver = Some(who.principal.clone());
    r.claimed_approver.clone_from(&who.claimed);
    r.edit = approval.and_then(|a| a.edit.clone());
    r.note = approval.and_then(|a| a.note.clone());
    r.answered_at = Some(now_ms());
    r
}

/// The record of a question the run stopped on: the handler, the tool call as it was asked
/// about (its input before any edit), who the run is for, when.
fn asked_record<'m, I>(p: &PendingInterrupt, messages: I, requester: Option<&str>) -> ApprovalRecord
where
    I: IntoIterator<Item = &'m Message>,
    I::IntoIter: DoubleEndedIterator,
{
    let mut r = ApprovalRecord::new(ApprovalOutcome::Asked, p.interrupt.name.clone());
    r.interrupt_id = Some(p.interrupt.resume_id());
    r.reason = Some(p.interrupt.prompt_text());
    r.requester = requester.map(str::to_owned);
    r.asked_at = Some(now_ms());
    if let Some(tool_use) = asked_about(p, messages) {
        r.tool_use_id = Some(tool_use.tool_use_id.clone());
        r.tool_name = Some(tool_use.name.clone());
        r.asked = tool_use.input.clone();
    }
    r
}

/// The tool call a pending interrupt asks about, found in the history (the newest use of its
/// id: a model may repeat ids across responses).
pub(crate) fn asked_about<'m, I>(p: &PendingInterrupt, messages: I) -> Option<&'m ToolUse>
where
    I: IntoIterator<Item = &'m Message>,
    I::IntoIter: DoubleEndedIterator,
{
    let id = p.interrupt.tool_use_id.as_ref().unwrap_or(&p.point.subject);
    messages
        .into_iter()
        .rev()
        .flat_map(Message::tool_uses)
        .find(|t| &t.tool_use_id == id)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The RUN_ERROR code of an agent error, and whether its text is Rein's own about the
/// client's request (shown) rather than a provider's, a store's or a tool's (kept in the log).
fn error_code(e: &Error) -> (&'static str, bool) {
    match e {
        Error::InvalidAnswer { .. } => ("INVALID_ANSWER", true),
        Error::InterruptsPending => ("INTERRUPTS_PENDING", true),
        Error::UnknownInterrupt(_) => ("UNKNOWN_INTERRUPT", true),
        Error::NoPendingInterrupts => ("NO_PENDING_INTERRUPTS", true),
        Error::Model(_) => ("MODEL_ERROR", false),
        Error::Session(_) => ("SESSION_ERROR", false),
        _ => ("AGENT_ERROR", false),
    }
}

/// The RUN_ERROR of a failed run: Rein's own message about the request, or a code and an error
/// id whose details are in the log.
fn run_error(e: &Error, thread_id: &str, run_id: &str) -> WireEvent {
    let (code, shown) = error_code(e);
    if shown {
        tracing::info!(thread_id, run_id, error = %e, "AG-UI run refused an answer");
        return WireEvent::RunError {
            message: e.to_string(),
            code: code.to_owned(),
        };
    }
    let id = crate::error::error_id();
    tracing::warn!(thread_id, run_id, error_id = %id, error = %e, "AG-UI run failed");
    let what = match code {
        "MODEL_ERROR" => "the model call failed",
        "SESSION_ERROR" => "the thread could not be stored (another process may have changed it)",
        _ => "the run failed",
    };
    WireEvent::RunError {
        message: format!("{what} (error id {id}; the details are in the server's log)"),
        code: code.to_owned(),
    }
}

/// The agent state shown in STATE_SNAPSHOT (the server's own key and the token calibration
/// removed: bookkeeping, not the application's state).
pub(crate) fn visible_state(agent: &Agent) -> Value {
    let mut map: Map<String, Value> = agent.state().snapshot().into_iter().collect();
    hide_bookkeeping(&mut map);
    Value::Object(map)
}

/// Removes the keys the server and the agent keep for themselves from a state shown to clients.
pub(crate) fn hide_bookkeeping(map: &mut Map<String, Value>) {
    map.remove(ANSWERED_KEY);
    map.remove(rein_agent::TOKEN_CALIBRATION_KEY);
}

/// Runs `input` on `agent`, sending the run's AG-UI events (RUN_STARTED first, RUN_FINISHED
/// or RUN_ERROR last). A client that goes away (its stream dropped) cancels the run; at the
/// turn budget the run stops before its next model call.
pub(crate) async fn drive(
    mut agent: Agent,
    input: Input,
    thread_id: String,
    run_id: String,
    ledger: &Ledger,
    bounds: RunBounds,
    tx: mpsc::UnboundedSender<WireEvent>,
) {
    let cancel = agent.cancel_handle();
    let watcher = {
        let (tx, cancel) = (tx.clone(), cancel.clone());
        tokio::spawn(async move {
            tx.closed().await;
            cancel.cancel_with(CLIENT_GONE);
        })
    };
    let mut t = Translator {
        tx,
        open_text: None,
        response_text_id: None,
        answered_by: ledger.answered_by(),
        progress_sent: std::collections::HashMap::new(),
    };
    t.send(WireEvent::RunStarted {
        thread_id: thread_id.clone(),
        run_id: run_id.clone(),
    });
    let mut result = None;
    let mut failure = None;
    let mut turns = 0u32;
    let mut budget_spent = false;
    {
        let mut stream = agent.stream(input);
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => {
                    if matches!(e, AgentEvent::ModelCallStarted { .. }) {
                        turns += 1;
                        if turns >= bounds.max_turns && !budget_spent {
                            budget_spent = true;
                            cancel.cancel_after_tools();
                        }
                    }
                    if t.tx.is_closed() {
                        // Gone before the watcher's cancel could reach a running run.
                        cancel.cancel_with(CLIENT_GONE);
                    }
                    if let Some(r) = t.event(e) {
                        result = Some(r);
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    watcher.abort();
    t.close_text();
    // Answers the agent refused (nothing applied, the questions still wait) are recorded with
    // a write of their own: there is no other change to carry them.
    if let Some(e @ Error::InvalidAnswer { .. }) = &failure {
        let still: Vec<String> = agent
            .pending_interrupts()
            .map(|p| {
                p.pending()
                    .iter()
                    .map(|p| p.interrupt.resume_id())
                    .collect()
            })
            .unwrap_or_default();
        let refused = t
            .answered_by
            .iter()
            .filter(|a| still.contains(&a.interrupt_id))
            .map(|a| {
                let mut r = answered(a, ApprovalOutcome::Refused, a.approval.as_ref(), None);
                r.refusal = Some(e.to_string());
                r
            })
            .collect();
        ledger.refused(refused);
        if let Err(e) = agent.save_session().await {
            tracing::warn!(thread_id, error = %e, "AG-UI run: a refused answer's record not written");
        }
    }
    let result = match (result, failure) {
        (_, Some(e)) => {
            t.send(run_error(&e, &thread_id, &run_id));
            return;
        }
        (Some(r), None) => r,
        (None, None) => {
            t.send(WireEvent::RunError {
                message: "the run ended without a result".into(),
                code: "AGENT_ERROR".into(),
            });
            return;
        }
    };
    if t.tx.is_closed() {
        tracing::info!(thread_id, run_id, stop_reason = ?result.stop_reason, "AG-UI client went away; run ended");
        return;
    }
    t.send(WireEvent::StateSnapshot {
        snapshot: visible_state(&agent),
    });
    // The server's turn budget stopped it: reported as the agent's own turn limit would be.
    let stop_reason = if budget_spent && result.stop_reason == StopReason::Cancelled {
        StopReason::LimitTurns
    } else {
        result.stop_reason
    };
    let outcome = match stop_reason {
        StopReason::Interrupt => {
            let interrupts = Asking::new(agent.pending_interrupts(), &agent).pending();
            json!({"type": "interrupt", "interrupts": interrupts})
        }
        StopReason::Cancelled => json!({"type": "cancelled"}),
        _ => json!({"type": "success"}),
    };
    let finished = match stop_reason {
        StopReason::Interrupt => None,
        StopReason::LimitTurns if budget_spent => Some(json!({
            "text": format!("(stopped: this server allows {} model calls per run)", bounds.max_turns),
            "stopReason": stop_reason,
        })),
        _ => {
            let mut finished = json!({"text": result.text(), "stopReason": stop_reason});
            // The typed answer, checked (SPEC §13): what a client of a typed agent reads.
            if let Some(output) = result.output {
                finished["output"] = output;
            }
            Some(finished)
        }
    };
    t.send(WireEvent::RunFinished {
        thread_id,
        run_id,
        result: finished,
        outcome,
    });
}

/// The cancel message of a run whose client went away.
const CLIENT_GONE: &str = "the client disconnected";

/// The most `rein.tool_progress` events one tool call sends: the channel to the client is not
/// bounded, and a tool (an MCP server's) may report without end; its result still comes.
const MAX_PROGRESS_EVENTS_PER_CALL: u32 = 256;

/// The longest progress message sent, in characters (a report is a status line).
const MAX_PROGRESS_MESSAGE_CHARS: usize = 1024;
