//! The approvals inbox (`GET /approvals`): what waits for an answer across the threads a
//! principal may answer, a page at a time; and the approval record's wire shape.

use axum::http::{StatusCode, Uri};
use rein_sessions::{
    ApprovalOutcome, ApprovalRecord, SessionError, SessionStore, SharedSessionStore,
};
use serde_json::{Value, json};

use crate::error::ProtocolError;
use crate::run::asked_about;
use crate::server::check_thread_id;

/// Page size without `limit`.
const DEFAULT_PAGE: usize = 50;
/// The largest page: each listed thread is one load from the store.
pub(crate) const MAX_PAGE: usize = 100;

fn invalid_query(why: impl Into<String>) -> ProtocolError {
    ProtocolError::new(StatusCode::BAD_REQUEST, "INVALID_QUERY", why)
}

/// One page of the inbox for a principal who may answer the threads `may_answer` admits:
/// `{"approvals": [{threadId, interruptId, toolName, input, reason, requester, askedAt,
/// link}], "next": <cursor or null>}`. A page lists the pending interrupts of up to `limit`
/// paused threads in id order; threads the principal may not answer are left out (a page
/// may then hold fewer, even none, with a `next` still to follow).
///
/// The first page (no `after`) also lists, under `parkedInjections`, the messages injected into
/// runs going in this process and parked on a confirm (`going`: `{threadId, interruptId,
/// injectionId, text, reason, requester (who injected it), link}`), of threads `may_answer`
/// admits: they are few (one per run at most the server's injection budget) and live only
/// while their run goes, so they are not paged.
pub(crate) async fn page(
    store: &SharedSessionStore,
    uri: &Uri,
    may_answer: impl Fn(&str) -> bool,
    going: impl FnOnce() -> Vec<GoingParked>,
) -> Result<Value, ProtocolError> {
    let (mut after, mut limit) = (None, DEFAULT_PAGE);
    for (key, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match &*key {
            "after" if after.is_none() => {
                check_thread_id(&value).map_err(|_| invalid_query("`after` is a thread id"))?;
                after = Some(value.into_owned());
            }
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| invalid_query(format!("`limit` is 1 to {MAX_PAGE}")))?;
            }
            _ => {
                return Err(invalid_query(
                    "the query takes `after` and `limit` once each",
                ));
            }
        }
    }
    let ids = store
        .pending_sessions(after.as_deref(), limit)
        .await
        .map_err(|e| match e {
            SessionError::Unsupported(_) => ProtocolError::new(
                StatusCode::NOT_IMPLEMENTED,
                "INBOX_UNSUPPORTED",
                "this server's session store does not list paused threads",
            ),
            e => ProtocolError::internal("the paused threads could not be listed", &e),
        })?;
    let next = (ids.len() == limit).then(|| ids.last().cloned()).flatten();
    let mut approvals = Vec::new();
    for id in ids.iter().filter(|id| may_answer(id)) {
        let snapshot = store
            .load(id)
            .await
            .map_err(|e| ProtocolError::internal("a paused thread could not be loaded", &e))?;
        let Some(snapshot) = snapshot else { continue };
        let Some(paused) = &snapshot.pending_interrupts else {
            continue;
        };
        for p in paused.pending() {
            let interrupt_id = p.interrupt.resume_id();
            let question = snapshot.approvals.iter().rev().find(|q| {
                q.outcome == ApprovalOutcome::Asked
                    && q.interrupt_id.as_deref() == Some(interrupt_id.as_str())
            });
            let (tool_name, input) = match question {
                Some(q) => (q.tool_name.clone(), q.asked.clone()),
                None => {
                    let messages = snapshot.active_messages().iter().map(|m| &m.message);
                    asked_about(p, messages).map_or((None, Value::Null), |t| {
                        (Some(t.name.clone()), t.input.clone())
                    })
                }
            };
            let requester = question
                .and_then(|q| q.requester.clone())
                .or_else(|| paused.invocation_state().principal().map(str::to_owned));
            approvals.push(json!({
                "threadId": id,
                "interruptId": interrupt_id,
                "toolName": tool_name,
                "input": input,
                "reason": p.interrupt.prompt_text(),
                "requester": requester,
                "askedAt": question.and_then(|q| q.asked_at),
                // Relative to `{base}/approvals`: the console at `{base}/` opens the thread.
                "link": format!("./?thread={id}"),
            }));
        }
    }
    let mut parked: Vec<Value> = Vec::new();
    if after.is_none() {
        for g in going().into_iter().filter(|g| may_answer(&g.thread_id)) {
            parked.push(json!({
                "threadId": g.thread_id,
                "interruptId": g.interrupt_id,
                "injectionId": g.injection_id,
                "text": g.text,
                "reason": g.reason,
                "requester": g.injected_by,
                "link": format!("./?thread={}", g.thread_id),
            }));
        }
    }
    Ok(json!({"approvals": approvals, "next": next, "parkedInjections": parked}))
}

/// A question about a message injected into a going run and parked on a confirm.
pub(crate) struct GoingParked {
    pub(crate) thread_id: String,
    pub(crate) interrupt_id: String,
    pub(crate) injection_id: String,
    pub(crate) text: String,
    pub(crate) reason: String,
    /// Who injected it.
    pub(crate) injected_by: Option<String>,
}

/// An approval record as `GET /threads/{id}` shows it (camelCase, like the rest of the wire).
pub(crate) fn record_to_wire(r: &ApprovalRecord) -> Value {
    json!({
        "outcome": r.outcome,
        "handler": r.handler,
        "interruptId": r.interrupt_id,
        "toolCallId": r.tool_use_id,
        "toolName": r.tool_name,
        "asked": r.asked,
        "reason": r.reason,
        "requester": r.requester,
        "approver": r.approver,
        "claimedApprover": r.claimed_approver,
        "edit": r.edit,
        "note": r.note,
        "refusal": r.refusal,
        "detail": r.detail,
        "askedAt": r.asked_at,
        "answeredAt": r.answered_at,
    })
}
