//! `ReinInbox`: what other processes send a session's run (SPEC §5 across processes).
//!
//! An injected message gets its id here, when it is accepted, and waits in the session's queue
//! in arrival order. The run takes the queue at each turn boundary with a call that Restate
//! journals (a crash of the run's worker replays the same items: none lost, none twice) and
//! reports each item's outcome back here, where the sender reads it. Items still queued when
//! the run ends are rejected (`run ended`); a run paused on interrupts keeps them for its
//! resume. Injecting when no run is going or paused is a 409 (`NoActiveRun`).

use std::collections::{BTreeMap, VecDeque};

use rein_core::{Message, id::InjectionId};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::wire::{InjectRequest, InjectionReport, InjectionStatus};

const INBOX: &str = "inbox";
/// How many outcomes (and idempotency keys) an inbox remembers.
const REMEMBERED: usize = 10_000;

/// The run an inbox feeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RunStatus {
    #[default]
    Idle,
    Running,
    Paused,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct InboxState {
    status: RunStatus,
    /// The Restate invocation of the running run (for cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invocation: Option<String>,
    queue: VecDeque<(InjectionId, Message)>,
    /// Outcomes by id, oldest first (bounded).
    outcomes: BTreeMap<u64, InjectionReport>,
    /// Sequence of acceptance, and the sequence number of each remembered id.
    next: u64,
    seq_of: BTreeMap<InjectionId, u64>,
    /// The sender's idempotency keys → ids.
    keys: BTreeMap<String, InjectionId>,
}

impl InboxState {
    fn set(&mut self, id: InjectionId, status: InjectionStatus, reason: Option<String>) {
        let seq = match self.seq_of.get(&id) {
            Some(seq) => *seq,
            None => return,
        };
        if let Some(report) = self.outcomes.get_mut(&seq) {
            report.status = status;
            report.reason = reason;
        }
    }

    fn forget_old(&mut self) {
        while self.outcomes.len() > REMEMBERED {
            if let Some((_, old)) = self.outcomes.pop_first() {
                self.seq_of.remove(&old.id);
            }
        }
        if self.keys.len() > REMEMBERED {
            let live: std::collections::BTreeSet<InjectionId> =
                self.seq_of.keys().copied().collect();
            self.keys.retain(|_, id| live.contains(id));
        }
    }
}

/// An outcome the run reports for one item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InboxOutcome {
    consumed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl InboxOutcome {
    pub(crate) fn consumed() -> Self {
        Self {
            consumed: true,
            reason: None,
        }
    }

    pub(crate) fn rejected(reason: &str) -> Self {
        Self {
            consumed: false,
            reason: Some(reason.to_owned()),
        }
    }
}

/// The `ReinInbox` object.
pub(crate) struct ReinInbox;

#[restate_sdk::object]
impl ReinInbox {
    /// Accepts a message for the session's run (or returns the first acceptance of the same
    /// idempotency key).
    #[handler]
    async fn inject(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<InjectRequest>,
    ) -> Result<Json<InjectionReport>, HandlerError> {
        let request = request.into_inner();
        let mut inbox = load(&ctx).await?;
        if let Some(id) = request
            .idempotency_key
            .as_ref()
            .and_then(|k| inbox.keys.get(k))
        {
            let report = inbox.seq_of.get(id).and_then(|s| inbox.outcomes.get(s));
            if let Some(report) = report {
                return Ok(Json(report.clone()));
            }
        }
        if inbox.status == RunStatus::Idle {
            return Err(TerminalError::new_with_code(
                409,
                "no run is going or paused on this session (NoActiveRun)",
            )
            .into());
        }
        // Derived from this invocation: the same id when Restate retries the handler.
        let name = format!("{}:{}", ctx.invocation_id(), inbox.next);
        let id = InjectionId(uuid::Uuid::new_v5(
            &uuid::Uuid::NAMESPACE_OID,
            name.as_bytes(),
        ));
        let seq = inbox.next;
        inbox.next += 1;
        inbox.seq_of.insert(id, seq);
        let report = InjectionReport {
            id,
            status: InjectionStatus::Queued,
            reason: None,
        };
        inbox.outcomes.insert(seq, report.clone());
        if let Some(key) = request.idempotency_key {
            inbox.keys.insert(key, id);
        }
        inbox.queue.push_back((id, request.message));
        inbox.forget_old();
        ctx.set(INBOX, Json(inbox));
        Ok(Json(report))
    }

    /// Where an injected message stands.
    #[handler]
    async fn status(
        &self,
        ctx: SharedObjectContext<'_>,
        id: Json<InjectionId>,
    ) -> Result<Json<InjectionReport>, HandlerError> {
        let id = id.into_inner();
        let inbox: Option<Json<InboxState>> = ctx.get(INBOX).await?;
        let inbox = inbox.map(Json::into_inner).unwrap_or_default();
        inbox
            .seq_of
            .get(&id)
            .and_then(|s| inbox.outcomes.get(s))
            .cloned()
            .map(Json)
            .ok_or_else(|| TerminalError::new_with_code(404, "unknown injection id").into())
    }

    /// Cancels the session's running run (its history stays valid; see SPEC §6).
    #[handler]
    async fn cancel(&self, ctx: ObjectContext<'_>) -> Result<Json<bool>, HandlerError> {
        let inbox = load(&ctx).await?;
        match (inbox.status, inbox.invocation) {
            (RunStatus::Running, Some(invocation)) => {
                ctx.invocation_handle(invocation).cancel();
                Ok(Json(true))
            }
            _ => Ok(Json(false)),
        }
    }

    /// A run starts (called by the session's `ReinAgent`).
    #[handler]
    async fn open(
        &self,
        ctx: ObjectContext<'_>,
        invocation: Json<String>,
    ) -> Result<(), HandlerError> {
        let mut inbox = load(&ctx).await?;
        inbox.status = RunStatus::Running;
        inbox.invocation = Some(invocation.into_inner());
        ctx.set(INBOX, Json(inbox));
        Ok(())
    }

    /// The run's turn boundary: everything queued, in order.
    #[handler]
    async fn take(
        &self,
        ctx: ObjectContext<'_>,
    ) -> Result<Json<Vec<(InjectionId, Message)>>, HandlerError> {
        let mut inbox = load(&ctx).await?;
        let items: Vec<(InjectionId, Message)> = inbox.queue.drain(..).collect();
        if items.is_empty() {
            return Ok(Json(items));
        }
        for (id, _) in &items {
            inbox.set(*id, InjectionStatus::Delivered, None);
        }
        ctx.set(INBOX, Json(inbox));
        Ok(Json(items))
    }

    /// What became of one item the run took.
    #[handler]
    async fn report(
        &self,
        ctx: ObjectContext<'_>,
        outcome: Json<(InjectionId, InboxOutcome)>,
    ) -> Result<(), HandlerError> {
        let (id, outcome) = outcome.into_inner();
        let mut inbox = load(&ctx).await?;
        let status = if outcome.consumed {
            InjectionStatus::Consumed
        } else {
            InjectionStatus::Rejected
        };
        inbox.set(id, status, outcome.reason);
        ctx.set(INBOX, Json(inbox));
        Ok(())
    }

    /// The run ended (`paused`: on interrupts, keeping its queue for the resume).
    #[handler]
    async fn close(&self, ctx: ObjectContext<'_>, paused: Json<bool>) -> Result<(), HandlerError> {
        let mut inbox = load(&ctx).await?;
        inbox.invocation = None;
        if paused.into_inner() {
            inbox.status = RunStatus::Paused;
        } else {
            inbox.status = RunStatus::Idle;
            let left: Vec<InjectionId> = inbox.queue.drain(..).map(|(id, _)| id).collect();
            for id in left {
                inbox.set(id, InjectionStatus::Rejected, Some("run ended".into()));
            }
        }
        ctx.set(INBOX, Json(inbox));
        Ok(())
    }
}

async fn load(ctx: &ObjectContext<'_>) -> Result<InboxState, TerminalError> {
    let inbox: Option<Json<InboxState>> = ctx.get(INBOX).await?;
    Ok(inbox.map(Json::into_inner).unwrap_or_default())
}
