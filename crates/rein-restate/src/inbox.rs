//! `ReinInbox`: what other processes send a session's run (SPEC §5 across processes).
//!
//! An injected message gets its id here, when it is accepted, and waits in the session's queue
//! in arrival order, and the running run is signalled. The run takes the queue at its first
//! turn boundary after the signal with a call that Restate journals (a crash of the run's
//! worker replays the same items: none lost, none twice) and
//! reports each item's outcome back here, where the sender reads it: one-way as they come, then
//! with one call at its end (`reported`, made only by a run that reported something), which
//! returns once they are all written — `status` agrees with the run's report by the time the
//! report reaches its caller. Items still queued when
//! the run ends are rejected (`run ended`); a run paused on interrupts keeps them for its
//! resume. Injecting when no run is going or paused is a 409 (`NoActiveRun`).
//!
//! Runs do not tell the inbox that they start or end (a run nobody injects into costs no inbox
//! call): `inject`, `cancel` and `status` of a queued item ask the session's `ReinAgent` (its
//! shared `current_run`, which answers while the run holds the object) which run goes, how
//! many runs have ended not paused and whether the last one paused. What was queued before a
//! run ended not paused is rejected then, lazily; a resumed run `attach`es, so that what was
//! queued while the session was paused is signalled to it before its first turn boundary.
//!
//! Only `inject`, `status` and `cancel` are reachable through Restate's ingress (each asks the
//! worker's authenticator first); `attach`, `take`, `report`, `reported`, `running`, `abandoned`
//! and `cancel_now` are the run's own (and `abandon`'s) and ingress-private, as are `claim`,
//! `release`, `open` and `close`, which only an earlier release's invoke or run in flight
//! across the upgrade still calls. The state is kept per item (`item/{seq}`, with the indexes
//! `id/{id}` and `key/{idempotency key}`) beside a small `meta` record, and read lazily: a call
//! reads and writes the few keys it needs, never the whole inbox. The queue and what is
//! remembered are bounded (see the constants). The earlier release's one-record state
//! (`inbox`) is converted on first use.

use rein_core::{Message, id::InjectionId};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::caller::{AUTHENTICATE, Callers, Operation};
use crate::object::{ReinAgentClient, RunView};
use crate::wire::{InjectRequest, InjectionReport, InjectionStatus};

const META: &str = "meta";
/// The earlier release's whole-inbox record.
const LEGACY: &str = "inbox";
/// How many items (and their idempotency keys) an inbox remembers; the oldest are forgotten
/// (their `status` is then unknown, 404).
const REMEMBERED: u64 = 10_000;
/// How many messages may wait for the run's next turn boundary (then 429).
pub(crate) const MAX_QUEUED: u64 = 1_000;
/// How many bytes of message JSON may wait (then 429).
pub(crate) const MAX_QUEUED_BYTES: u64 = 8 << 20;
/// The largest injected message, as JSON (then 413).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// The longest idempotency key (then 400).
pub(crate) const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;
/// How long a cancelled run may take to reach its next turn boundary (its tools finishing)
/// before Restate cancels it where it stands (Kubernetes' default grace period).
pub(crate) const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Why an item queued for a run that ended is rejected.
const RUN_ENDED: &str = "run ended";

fn item_key(seq: u64) -> String {
    format!("item/{seq}")
}

fn id_key(id: InjectionId) -> String {
    format!("id/{}", id.0)
}

fn idempotency_key(key: &str) -> String {
    format!("key/{key}")
}

/// The run an inbox feeds, as the earlier release's `claim`, `open` and `close` told it (this
/// release's runs tell it nothing: it asks the session's `ReinAgent`, [`current`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RunStatus {
    #[default]
    Idle,
    Running,
    Paused,
}

/// The inbox's small record: the run it feeds and where its sequence stands. Items are
/// numbered in order of acceptance; `head..next` are queued, `oldest..next` remembered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Meta {
    status: RunStatus,
    /// The Restate invocation of the running run when the inbox last looked (its signals and
    /// cancel go to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invocation: Option<String>,
    next: u64,
    head: u64,
    oldest: u64,
    /// Bytes of message JSON queued.
    queued_bytes: u64,
    /// The `invoke` that claimed the session for its run, until the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<Claim>,
    /// The running run was cancelled: it stops at its next turn boundary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    stop: bool,
    /// Signals sent to the running run (its `inbox-<n>` is the next one's name).
    #[serde(default, skip_serializing_if = "is_zero")]
    signals: u64,
    /// A signal is out that the run has not answered with a `take` yet (one is enough).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    signalled: bool,
    /// The session's count of runs ended not paused when the inbox last looked: what is queued
    /// was queued since, and is rejected once the count has moved on.
    #[serde(default, skip_serializing_if = "is_zero")]
    finished: u64,
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The name of the run's `n`-th inbox signal.
pub(crate) fn signal_name(n: u64) -> String {
    format!("inbox-{n}")
}

/// Tells the running run that its inbox has something for it (a message queued, a cancel),
/// unless a signal it has not answered yet is out: the run calls `take` at its next turn
/// boundary only after a signal, so a turn with nothing queued costs no call (issue #37).
fn signal(ctx: &ObjectContext<'_>, meta: &mut Meta) {
    if meta.signalled {
        return;
    }
    let Some(run) = meta.invocation.clone() else {
        // No run goes (paused), or claimed by an earlier release's invoke and not opened yet:
        // the run's `attach` (`open`) signals what is queued by then.
        return;
    };
    ctx.invocation_handle(run)
        .signal(signal_name(meta.signals))
        .resolve(());
    meta.signals += 1;
    meta.signalled = true;
}

/// What the run gets at a turn boundary: the queued messages, or the word to stop (the
/// messages then stay queued, and are rejected when the run ends).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Turn {
    pub(crate) items: Vec<(InjectionId, Message)>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) stop: bool,
}

/// A resumed run tells the inbox that it goes (what was queued while the session was paused is
/// its), and how many runs had ended not paused when it started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Attach {
    pub(crate) run: String,
    pub(crate) finished: u64,
}

/// Whether anything may be injected now: a run goes, or the session is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feeding {
    Nothing,
    Something,
}

/// Asks the session's `ReinAgent` which run goes, how many have ended and whether the last one
/// paused (its shared `current_run`: no wait behind the run), and brings the inbox up to date:
/// what was queued for a run that has ended since, not paused, is rejected (`run ended`); a new
/// run's signals count from zero. A session no run of this release has ended on keeps what the
/// earlier release's `claim`, `open` and `close` told the inbox.
async fn current(ctx: &ObjectContext<'_>, meta: &mut Meta) -> Result<Feeding, HandlerError> {
    let Json(view) = ctx
        .object_client::<ReinAgentClient>(ctx.key().to_owned())
        .current_run()
        .call()
        .await?;
    if ended_since(meta, &view) {
        reject_queued(ctx, meta).await?;
        meta.finished = view.finished;
    }
    // An earlier release's run opened (or its invoke claimed) the inbox, and has not closed it.
    let legacy = meta.status == RunStatus::Running;
    let going = view
        .going
        .or_else(|| meta.invocation.clone().filter(|_| legacy));
    let paused = view.paused.unwrap_or(meta.status == RunStatus::Paused);
    follow(meta, going);
    Ok(if meta.invocation.is_some() || legacy || paused {
        Feeding::Something
    } else {
        Feeding::Nothing
    })
}

/// Points the inbox at the run going (none: no run goes): a run it was not pointed at yet
/// gets signals counted from zero and no cancel of the run before it. (Unchanged when it was:
/// a signal sent to it already is not sent again.)
fn follow(meta: &mut Meta, going: Option<String>) {
    if going != meta.invocation {
        meta.invocation = going;
        meta.stop = false;
        meta.signals = 0;
        meta.signalled = false;
    }
}

/// The run `run` starts: what is queued (kept for it while the session was paused, or sent
/// while an earlier release's `invoke` claimed the session) is signalled to it. An injection
/// may have pointed the inbox at it already (a run marks itself going before it calls): that
/// signal is out, and is not sent twice.
fn starts(ctx: &ObjectContext<'_>, meta: &mut Meta, run: String) {
    follow(meta, Some(run));
    if meta.head != meta.next {
        signal(ctx, meta);
    }
}

/// Whether a queued item was queued for a run that has ended, not paused, since the inbox
/// last looked (its rejection not written yet: `status` cannot write).
fn ended_since(meta: &Meta, view: &RunView) -> bool {
    view.finished != meta.finished
}

/// An `invoke`'s claim on the session: its invocation, and the status it found (restored when
/// its run is refused or fails before it starts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Claim {
    by: String,
    before: RunStatus,
}

/// One accepted message: its id, where it stands, and its message while it is queued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    id: InjectionId,
    status: InjectionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The sender's idempotency key (to forget it with the item).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<Message>,
}

impl Item {
    fn report(&self) -> InjectionReport {
        InjectionReport {
            id: self.id,
            status: self.status,
            reason: self.reason.clone(),
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
pub(crate) struct ReinInbox {
    pub(crate) callers: Arc<Callers>,
}

#[restate_sdk::object(lazy_state)]
impl ReinInbox {
    /// Accepts a message for the session's run (or returns the first acceptance of the same
    /// idempotency key).
    #[handler]
    async fn inject(
        &self,
        ctx: ObjectContext<'_>,
        request: Json<InjectRequest>,
    ) -> Result<Json<InjectionReport>, HandlerError> {
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::Inject, ctx.key());
        ctx.run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let request = request.into_inner();
        if let Some(key) = &request.idempotency_key
            && (key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_BYTES)
        {
            return Err(refused(
                400,
                format!("an idempotency key has 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes"),
            ));
        }
        let mut meta = load(&ctx).await?;
        let feeding = current(&ctx, &mut meta).await?;
        if let Some(key) = &request.idempotency_key {
            let seq: Option<Json<u64>> = ctx.get(&idempotency_key(key)).await?;
            if let Some(Json(seq)) = seq
                && let Some(item) = item(&ctx, seq).await?
            {
                ctx.set(META, Json(meta));
                return Ok(Json(item.report()));
            }
        }
        if feeding == Feeding::Nothing {
            ctx.set(META, Json(meta));
            return Err(refused(
                409,
                "no run is going or paused on this session (NoActiveRun)",
            ));
        }
        let bytes = serde_json::to_vec(&request.message).map_or(usize::MAX, |b| b.len());
        if bytes > MAX_MESSAGE_BYTES {
            return Err(refused(
                413,
                format!("an injected message has at most {MAX_MESSAGE_BYTES} bytes of JSON"),
            ));
        }
        let bytes = bytes as u64;
        if meta.next - meta.head >= MAX_QUEUED
            || meta.queued_bytes.saturating_add(bytes) > MAX_QUEUED_BYTES
        {
            return Err(refused(
                429,
                format!(
                    "the session's inbox is full ({} messages wait for the run's next turn; at \
                     most {MAX_QUEUED} messages, {MAX_QUEUED_BYTES} bytes): send it again later",
                    meta.next - meta.head
                ),
            ));
        }
        // Derived from this invocation: the same id when Restate retries the handler.
        let name = format!("{}:{}", ctx.invocation_id(), meta.next);
        let id = InjectionId(uuid::Uuid::new_v5(
            &uuid::Uuid::NAMESPACE_OID,
            name.as_bytes(),
        ));
        let seq = meta.next;
        meta.next += 1;
        meta.queued_bytes += bytes;
        let item = Item {
            id,
            status: InjectionStatus::Queued,
            reason: None,
            key: request.idempotency_key,
            message: Some(request.message),
        };
        let report = item.report();
        if let Some(key) = &item.key {
            ctx.set(&idempotency_key(key), Json(seq));
        }
        ctx.set(&id_key(id), Json(seq));
        ctx.set(&item_key(seq), Json(item));
        forget_old(&ctx, &mut meta).await?;
        signal(&ctx, &mut meta);
        ctx.set(META, Json(meta));
        Ok(Json(report))
    }

    /// Where an injected message stands.
    #[handler]
    async fn status(
        &self,
        ctx: SharedObjectContext<'_>,
        id: Json<InjectionId>,
    ) -> Result<Json<InjectionReport>, HandlerError> {
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::InjectionStatus, ctx.key());
        ctx.run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let id = id.into_inner();
        let seq: Option<Json<u64>> = ctx.get(&id_key(id)).await?;
        let report = match seq {
            Some(Json(seq)) => {
                let item: Option<Json<Item>> = ctx.get(&item_key(seq)).await?;
                match item {
                    Some(Json(item)) if item.status == InjectionStatus::Queued => {
                        Some(queued_report(&ctx, item).await?)
                    }
                    item => item.map(|Json(item)| item.report()),
                }
            }
            // Not converted yet (no exclusive call since the upgrade): the earlier record.
            None => {
                let legacy: Option<Json<legacy::Inbox>> = ctx.get(LEGACY).await?;
                legacy.and_then(|Json(legacy)| legacy.report(id))
            }
        };
        report
            .map(Json)
            .ok_or_else(|| refused(404, "unknown injection id"))
    }

    /// A resumed run goes (called by the session's `ReinAgent`, before its first turn
    /// boundary): what was queued while the session was paused is signalled to it, unless a run
    /// ended not paused since it was queued (then it is rejected).
    #[handler(ingress_private)]
    async fn attach(&self, ctx: ObjectContext<'_>, run: Json<Attach>) -> Result<(), HandlerError> {
        let Attach { run, finished } = run.into_inner();
        let mut meta = load(&ctx).await?;
        if meta.finished != finished {
            reject_queued(&ctx, &mut meta).await?;
            meta.finished = finished;
        }
        starts(&ctx, &mut meta, run);
        ctx.set(META, Json(meta));
        Ok(())
    }

    /// Cancels the session's running run: it stops at its next turn boundary, once the tools
    /// it runs have finished and their results are in its history (a tool whose effect
    /// happened is never reported cancelled); a run that has not reached one within
    /// [`CANCEL_GRACE`] is cancelled through Restate where it stands (SPEC §6, §12).
    #[handler]
    async fn cancel(&self, ctx: ObjectContext<'_>) -> Result<Json<bool>, HandlerError> {
        let decision = self
            .callers
            .decide(ctx.headers(), Operation::Cancel, ctx.key());
        ctx.run(|| async move { Ok(decision) })
            .name(AUTHENTICATE)
            .await?
            .into_inner()
            .admitted()?;
        let mut meta = load(&ctx).await?;
        current(&ctx, &mut meta).await?;
        let Some(invocation) = meta.invocation.clone() else {
            ctx.set(META, Json(meta));
            return Ok(Json(false));
        };
        if !meta.stop {
            meta.stop = true;
            signal(&ctx, &mut meta);
            ctx.object_client::<ReinInboxClient>(ctx.key().to_owned())
                .cancel_now(Json(invocation))
                .send_after(CANCEL_GRACE);
        }
        ctx.set(META, Json(meta));
        Ok(Json(true))
    }

    /// The grace of a cancel is over: the run, if it still goes, is cancelled through Restate.
    #[handler(ingress_private)]
    async fn cancel_now(
        &self,
        ctx: ObjectContext<'_>,
        invocation: Json<String>,
    ) -> Result<(), HandlerError> {
        let mut meta = load(&ctx).await?;
        current(&ctx, &mut meta).await?;
        let invocation = invocation.into_inner();
        if meta.invocation.as_deref() == Some(&invocation) {
            ctx.invocation_handle(invocation).cancel();
        }
        ctx.set(META, Json(meta));
        Ok(())
    }

    /// An earlier release's `invoke` claims the session for a new run: `false` when a run goes
    /// (the invoke is refused); the claim holds until the run ends (`close`) or the invoke
    /// `release`s it. (This release's `invoke` asks its own object's state instead — no call —
    /// but an invoke of the earlier release in flight across the upgrade still calls this; so
    /// do such a run's `open` and `close`, which this release's runs no longer call.)
    #[handler(ingress_private)]
    async fn claim(
        &self,
        ctx: ObjectContext<'_>,
        by: Json<String>,
    ) -> Result<Json<bool>, HandlerError> {
        let mut meta = load(&ctx).await?;
        if meta.status == RunStatus::Running {
            return Ok(Json(false));
        }
        meta.claim = Some(Claim {
            by: by.into_inner(),
            before: meta.status,
        });
        meta.status = RunStatus::Running;
        ctx.set(META, Json(meta));
        Ok(Json(true))
    }

    /// The claiming `invoke` (of the earlier release) is done: if its run never closed the
    /// inbox (refused, or failed before it started), the inbox is as the claim found it.
    #[handler(ingress_private)]
    async fn release(&self, ctx: ObjectContext<'_>, by: Json<String>) -> Result<(), HandlerError> {
        let mut meta = load(&ctx).await?;
        let Some(claim) = meta.claim.take_if(|c| c.by == by.0) else {
            return Ok(());
        };
        meta.status = claim.before;
        meta.invocation = None;
        ctx.set(META, Json(meta));
        Ok(())
    }

    /// An earlier release's run starts (not through the ingress: whoever could name the
    /// invocation here could cancel any invocation of the cluster).
    #[handler(ingress_private)]
    async fn open(
        &self,
        ctx: ObjectContext<'_>,
        invocation: Json<String>,
    ) -> Result<(), HandlerError> {
        let mut meta = load(&ctx).await?;
        meta.status = RunStatus::Running;
        starts(&ctx, &mut meta, invocation.into_inner());
        ctx.set(META, Json(meta));
        Ok(())
    }

    /// The run's turn boundary: everything queued, in order — or the word to stop.
    #[handler(ingress_private)]
    async fn take(&self, ctx: ObjectContext<'_>) -> Result<Json<Turn>, HandlerError> {
        let mut meta = load(&ctx).await?;
        if meta.signalled {
            meta.signalled = false;
            ctx.set(META, Json(meta.clone()));
        }
        if meta.stop {
            return Ok(Json(Turn {
                items: Vec::new(),
                stop: true,
            }));
        }
        let mut items = Vec::new();
        for seq in meta.head..meta.next {
            if let Some(mut item) = item(&ctx, seq).await?
                && let Some(message) = item.message.take()
            {
                item.status = InjectionStatus::Delivered;
                items.push((item.id, message));
                ctx.set(&item_key(seq), Json(item));
            }
        }
        if meta.head != meta.next {
            meta.head = meta.next;
            meta.queued_bytes = 0;
            ctx.set(META, Json(meta));
        }
        Ok(Json(Turn { items, stop: false }))
    }

    /// What became of one item the run took.
    #[handler(ingress_private)]
    async fn report(
        &self,
        ctx: ObjectContext<'_>,
        outcome: Json<(InjectionId, InboxOutcome)>,
    ) -> Result<(), HandlerError> {
        let (id, outcome) = outcome.into_inner();
        load(&ctx).await?;
        let seq: Option<Json<u64>> = ctx.get(&id_key(id)).await?;
        if let Some(Json(seq)) = seq
            && let Some(mut item) = item(&ctx, seq).await?
        {
            item.status = if outcome.consumed {
                InjectionStatus::Consumed
            } else {
                InjectionStatus::Rejected
            };
            item.reason = outcome.reason;
            ctx.set(&item_key(seq), Json(item));
        }
        Ok(())
    }

    /// The run has ended and sent every outcome it reports: called after them, this exclusive
    /// handler runs once they are written (Restate runs one invocation's calls to one object
    /// key in order), so the run returns its report only once `status` agrees with it.
    #[handler(ingress_private)]
    async fn reported(&self, _ctx: ObjectContext<'_>) -> Result<(), HandlerError> {
        Ok(())
    }

    /// An earlier release's run ended (`paused`: on interrupts, keeping its queue for the
    /// resume).
    #[handler(ingress_private)]
    async fn close(&self, ctx: ObjectContext<'_>, paused: Json<bool>) -> Result<(), HandlerError> {
        let meta = load(&ctx).await?;
        close(&ctx, meta, paused.into_inner()).await
    }

    /// The running run's invocation and the `invoke` that claimed the session for it, if an
    /// earlier release's run is going (for `abandon`; this release's runs are in `runs`).
    #[handler(ingress_private)]
    async fn running(
        &self,
        ctx: ObjectContext<'_>,
    ) -> Result<Json<Option<(String, Option<String>)>>, HandlerError> {
        let meta = load(&ctx).await?;
        let claimant = meta.claim.map(|c| c.by);
        Ok(Json(
            meta.invocation
                .filter(|_| meta.status == RunStatus::Running)
                .map(|run| (run, claimant)),
        ))
    }

    /// The earlier release's run `invocation` was abandoned (killed): the inbox closes as that
    /// run's end would have closed it — its claim cleared, so new invokes are taken. `false`
    /// (nothing done) when another run has opened the inbox since, or no such run opened it.
    #[handler(ingress_private)]
    async fn abandoned(
        &self,
        ctx: ObjectContext<'_>,
        run: Json<(String, bool)>,
    ) -> Result<Json<bool>, HandlerError> {
        let (invocation, paused) = run.into_inner();
        let meta = load(&ctx).await?;
        if meta.status != RunStatus::Running || meta.invocation.as_deref() != Some(&invocation) {
            return Ok(Json(false));
        }
        close(&ctx, meta, paused).await?;
        Ok(Json(true))
    }
}

/// Closes the inbox at a run's end (`paused`: on interrupts, keeping its queue for the resume;
/// else what is still queued is rejected).
async fn close(ctx: &ObjectContext<'_>, mut meta: Meta, paused: bool) -> Result<(), HandlerError> {
    meta.invocation = None;
    meta.claim = None;
    meta.stop = false;
    meta.signals = 0;
    meta.signalled = false;
    if paused {
        meta.status = RunStatus::Paused;
    } else {
        meta.status = RunStatus::Idle;
        reject_queued(ctx, &mut meta).await?;
    }
    ctx.set(META, Json(meta));
    Ok(())
}

/// Rejects what is still queued: the run it was queued for has ended (not paused).
async fn reject_queued(ctx: &ObjectContext<'_>, meta: &mut Meta) -> Result<(), TerminalError> {
    for seq in meta.head..meta.next {
        if let Some(mut item) = item(ctx, seq).await? {
            item.message = None;
            item.status = InjectionStatus::Rejected;
            item.reason = Some(RUN_ENDED.into());
            ctx.set(&item_key(seq), Json(item));
        }
    }
    meta.head = meta.next;
    meta.queued_bytes = 0;
    Ok(())
}

/// A queued item's report: rejected when the run it was queued for has ended since, not paused
/// (written so at the inbox's next exclusive call).
async fn queued_report(
    ctx: &SharedObjectContext<'_>,
    item: Item,
) -> Result<InjectionReport, HandlerError> {
    let meta: Option<Json<Meta>> = ctx.get(META).await?;
    let meta = meta.map(Json::into_inner).unwrap_or_default();
    let Json(view) = ctx
        .object_client::<ReinAgentClient>(ctx.key().to_owned())
        .current_run()
        .call()
        .await?;
    let mut report = item.report();
    if ended_since(&meta, &view) {
        report.status = InjectionStatus::Rejected;
        report.reason = Some(RUN_ENDED.into());
    }
    Ok(report)
}

fn refused(status: u16, message: impl Into<String>) -> HandlerError {
    TerminalError::new_with_code(status, message).into()
}

async fn item(ctx: &ObjectContext<'_>, seq: u64) -> Result<Option<Item>, TerminalError> {
    let item: Option<Json<Item>> = ctx.get(&item_key(seq)).await?;
    Ok(item.map(Json::into_inner))
}

/// The inbox's record; an earlier release's whole-inbox record is converted to per-item state
/// first (written with this call's other changes).
async fn load(ctx: &ObjectContext<'_>) -> Result<Meta, TerminalError> {
    let meta: Option<Json<Meta>> = ctx.get(META).await?;
    if let Some(Json(meta)) = meta {
        return Ok(meta);
    }
    let old: Option<Json<legacy::Inbox>> = ctx.get(LEGACY).await?;
    let Some(Json(old)) = old else {
        return Ok(Meta::default());
    };
    let converted = old.convert();
    for (seq, item) in converted.items {
        if let Some(key) = &item.key {
            ctx.set(&idempotency_key(key), Json(seq));
        }
        ctx.set(&id_key(item.id), Json(seq));
        ctx.set(&item_key(seq), Json(item));
    }
    ctx.clear(LEGACY);
    ctx.set(META, Json(converted.meta.clone()));
    Ok(converted.meta)
}

/// Forgets the oldest items beyond what is remembered (never a queued one: fewer may be
/// queued than are remembered).
async fn forget_old(ctx: &ObjectContext<'_>, meta: &mut Meta) -> Result<(), TerminalError> {
    while meta.next - meta.oldest > REMEMBERED && meta.oldest < meta.head {
        let seq = meta.oldest;
        if let Some(item) = item(ctx, seq).await? {
            ctx.clear(&id_key(item.id));
            if let Some(key) = &item.key {
                ctx.clear(&idempotency_key(key));
            }
            ctx.clear(&item_key(seq));
        }
        meta.oldest += 1;
    }
    Ok(())
}

/// The earlier release's inbox: one record, rewritten whole by every call.
mod legacy {
    use std::collections::{BTreeMap, HashMap, VecDeque};

    use rein_core::{Message, id::InjectionId};
    use serde::Deserialize;

    use super::{Item, Meta, RunStatus};
    use crate::wire::{InjectionReport, InjectionStatus};

    #[derive(Debug, Default, Deserialize)]
    pub(super) struct Inbox {
        #[serde(default)]
        status: RunStatus,
        #[serde(default)]
        invocation: Option<String>,
        #[serde(default)]
        queue: VecDeque<(InjectionId, Message)>,
        /// Reports by sequence number.
        #[serde(default)]
        outcomes: BTreeMap<u64, InjectionReport>,
        #[serde(default)]
        next: u64,
        #[serde(default)]
        seq_of: BTreeMap<InjectionId, u64>,
        /// Idempotency keys → ids.
        #[serde(default)]
        keys: BTreeMap<String, InjectionId>,
    }

    pub(super) struct Converted {
        pub(super) meta: Meta,
        pub(super) items: Vec<(u64, Item)>,
    }

    impl Inbox {
        pub(super) fn report(&self, id: InjectionId) -> Option<InjectionReport> {
            self.seq_of
                .get(&id)
                .and_then(|seq| self.outcomes.get(seq))
                .cloned()
        }

        /// The same inbox, per item: every remembered outcome with its idempotency key, the
        /// queued messages on their items.
        pub(super) fn convert(self) -> Converted {
            let key_of: HashMap<InjectionId, String> =
                self.keys.into_iter().map(|(key, id)| (id, key)).collect();
            let mut items: BTreeMap<u64, Item> = self
                .outcomes
                .into_iter()
                .map(|(seq, report)| {
                    let item = Item {
                        id: report.id,
                        status: report.status,
                        reason: report.reason,
                        key: key_of.get(&report.id).cloned(),
                        message: None,
                    };
                    (seq, item)
                })
                .collect();
            let mut head = self.next;
            let mut next = self.next;
            let mut queued_bytes = 0u64;
            for (id, message) in self.queue {
                // The queue was the newest items, in order (`head..next`). One whose record
                // was forgotten (more than 10 000 were queued) is queued again after them,
                // under a new sequence number: nothing queued is lost.
                let seq = match self.seq_of.get(&id) {
                    Some(seq) => *seq,
                    None => {
                        next += 1;
                        next - 1
                    }
                };
                head = head.min(seq);
                queued_bytes += serde_json::to_vec(&message).map_or(0, |b| b.len() as u64);
                let item = items.entry(seq).or_insert_with(|| Item {
                    id,
                    status: InjectionStatus::Queued,
                    reason: None,
                    key: key_of.get(&id).cloned(),
                    message: None,
                });
                item.message = Some(message);
            }
            let oldest = items.keys().next().copied().unwrap_or(self.next);
            Converted {
                meta: Meta {
                    status: self.status,
                    invocation: self.invocation,
                    next,
                    head,
                    oldest: oldest.min(head),
                    queued_bytes,
                    claim: None,
                    stop: false,
                    signals: 0,
                    signalled: false,
                    finished: 0,
                },
                items: items.into_iter().collect(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The earlier release's state of a session paused on an approval, its inbox holding one
    /// consumed message (key `k1`) and one queued (key `k2`), as its worker wrote it.
    const EARLIER_RELEASE: &str = include_str!("../tests/fixtures/release-0.1-inbox.json");

    fn id(text: &str) -> InjectionId {
        InjectionId(text.parse().unwrap())
    }

    #[test]
    fn an_inbox_written_by_the_earlier_release_converts_to_per_item_state() {
        let fixture: std::collections::BTreeMap<String, String> =
            serde_json::from_str(EARLIER_RELEASE).unwrap();
        let old: legacy::Inbox = serde_json::from_str(&fixture["ReinInbox/inbox"]).unwrap();
        let queued = id("e1d5828c-8651-55ed-923e-f7b73cc3594c");
        assert_eq!(old.report(queued).unwrap().status, InjectionStatus::Queued);
        let converted = old.convert();
        assert_eq!(
            converted.meta,
            Meta {
                status: RunStatus::Paused,
                invocation: None,
                next: 2,
                head: 1,
                oldest: 0,
                queued_bytes: 45,
                claim: None,
                stop: false,
                signals: 0,
                signalled: false,
                finished: 0,
            }
        );
        let items: Vec<(u64, Item)> = converted.items;
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].1.status, InjectionStatus::Consumed);
        assert_eq!(items[0].1.message, None);
        assert_eq!(items[1].0, 1);
        assert_eq!(items[1].1.id, queued);
        assert_eq!(items[0].1.key.as_deref(), Some("k1"));
        assert_eq!(items[1].1.key.as_deref(), Some("k2"));
        assert_eq!(
            items[1].1.message.as_ref().map(Message::text).as_deref(),
            Some("second")
        );
    }

    #[test]
    fn a_queued_item_whose_record_the_earlier_release_forgot_stays_queued() {
        let old: legacy::Inbox = serde_json::from_value(serde_json::json!({
            "status": "running",
            "queue": [["e1d5828c-8651-55ed-923e-f7b73cc3594c", {"role": "user", "content": [{"text": "old"}]}]],
            "outcomes": {}, "next": 12000, "seq_of": {}, "keys": {}
        }))
        .unwrap();
        let converted = old.convert();
        assert_eq!((converted.meta.head, converted.meta.next), (12000, 12001));
        assert_eq!(converted.items.len(), 1);
        assert_eq!(converted.items[0].0, 12000);
        assert_eq!(converted.items[0].1.status, InjectionStatus::Queued);
    }
}
