//! Mid-run message injection (SPEC §5): a [`TurnInterceptor`] queues messages from any thread;
//! the loop drains them at the next turn boundary, after admission by the interventions.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use rein_core::{
    ContentBlock, Message,
    id::InjectionId,
    interrupt::{Approval, Interrupt, InterruptAnswer, InterruptAnswers},
    message::InterruptResponse,
};
use serde_json::Value;

use crate::checkpoint::ParkedInjection;

/// Why `inject` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// No invocation is running: there is no turn to inject into.
    #[error("no invocation is running")]
    NoActiveRun,
    /// No parked message waits for an answer to this interrupt.
    #[error("no injected message waits for an answer to interrupt '{0}'")]
    UnknownInterrupt(String),
    /// The answer's edit is not the message's new text.
    #[error("the edit of an injected message is its new text")]
    InvalidEdit,
    /// The answer does not name the fingerprint of what its interrupt asks about (none, or
    /// another one: it was given for another message).
    #[error(
        "the answer to interrupt '{interrupt_id}' does not name the fingerprint of the message it approves"
    )]
    FingerprintMismatch {
        /// The interrupt answered.
        interrupt_id: String,
        /// The fingerprint the answer named.
        given: Option<String>,
    },
    /// The answer is shaped like an [`Approval`] (an object with an `approved` or `edit` key)
    /// but is not one.
    #[error("invalid answer to interrupt '{interrupt_id}': {reason}")]
    InvalidAnswer {
        /// The interrupt answered.
        interrupt_id: String,
        /// Why the answer is refused.
        reason: String,
    },
}

type ConsumedFn = dyn Fn(InjectionId, &Message) + Send + Sync;
type RejectedFn = dyn Fn(InjectionId, &Message, &str) + Send + Sync;

pub(crate) struct Item {
    pub(crate) id: InjectionId,
    pub(crate) message: Message,
    pub(crate) version: u64,
}

/// An injected message a `Confirm` parked until a human answers (SPEC §5).
pub(crate) struct Parked {
    pub(crate) item: Item,
    pub(crate) interrupts: Vec<Interrupt>,
    /// Answers given so far, bound to the fingerprint of what they answered.
    pub(crate) answers: HashMap<String, InterruptAnswer>,
}

/// An injected message waiting for a human's answer before it is delivered: a handler's
/// `Confirm` at `before_invocation` parked it while the run goes on.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PendingInjection {
    /// The injection's id.
    pub id: InjectionId,
    /// The message as injected.
    pub message: Message,
    /// What is asked (ids `v1:before_invocation:<injection id>:<uuid5(OID, handler)>`).
    pub interrupts: Vec<Interrupt>,
}

#[derive(Default)]
struct Queue {
    running: bool,
    /// The run is paused on interrupts: it has not ended, items may still be injected.
    paused: bool,
    version: u64,
    items: VecDeque<Item>,
    parked: Vec<Parked>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    on_consumed: Mutex<Option<Arc<ConsumedFn>>>,
    on_rejected: Mutex<Option<Arc<RejectedFn>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A handle that injects messages into the agent's running invocation. Cloneable, `Send +
/// Sync`, callable from any thread without a runtime.
///
/// Each message is stamped with the run it was injected into and delivered at that run's next
/// turn boundary (after a turn's tool results, before the next model call) — or rejected: when
/// stale, when an intervention denies or guides it, or when the run ends first.
///
/// ```
/// use rein_agent::{Agent, InjectError};
/// use rein_core::Message;
/// use rein_models::ScriptedModel;
/// let agent = Agent::builder().model(ScriptedModel::builder().build()).build().unwrap();
/// let steer = agent.interceptor();
/// steer.on_rejected(|id, _msg, reason| println!("{id} rejected: {reason}"));
/// assert_eq!(steer.inject(Message::user("also check X")), Err(InjectError::NoActiveRun));
/// ```
#[derive(Clone, Default)]
pub struct TurnInterceptor {
    shared: Arc<Shared>,
}

impl fmt::Debug for TurnInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = lock(&self.shared.queue);
        f.debug_struct("TurnInterceptor")
            .field("running", &q.running)
            .field("queued", &q.items.len())
            .field("parked", &q.parked.len())
            .finish()
    }
}

impl Parked {
    /// The answers, for the admission pass.
    pub(crate) fn answers(&self) -> InterruptAnswers {
        InterruptAnswers::new(self.answers.clone())
    }
}

impl TurnInterceptor {
    /// Queues a message for the running invocation.
    pub fn inject(&self, message: impl Into<Message>) -> Result<InjectionId, InjectError> {
        let id = InjectionId::new();
        self.inject_with_id(id, message)?;
        Ok(id)
    }

    /// Queues a message under an id it was given elsewhere — by a durable inbox that accepted
    /// it from another process, say — so the callbacks and the run's records report that id.
    pub fn inject_with_id(
        &self,
        id: InjectionId,
        message: impl Into<Message>,
    ) -> Result<(), InjectError> {
        let mut q = lock(&self.shared.queue);
        if !q.running && !q.paused {
            return Err(InjectError::NoActiveRun);
        }
        let version = q.version;
        q.items.push_back(Item {
            id,
            message: message.into(),
            version,
        });
        Ok(())
    }

    /// Injected messages parked until a human answers (a `Confirm` at `before_invocation`).
    pub fn pending_approvals(&self) -> Vec<PendingInjection> {
        lock(&self.shared.queue)
            .parked
            .iter()
            .map(|p| PendingInjection {
                id: p.item.id,
                message: p.item.message.clone(),
                interrupts: p.interrupts.clone(),
            })
            .collect()
    }

    /// Answers an interrupt of a parked message, like a resume's answer (`true`, `"yes"`, an
    /// [`Approval`], possibly with an edit: the message's new text) — made with
    /// [`Interrupt::answer`](rein_core::interrupt::Interrupt::answer) on an interrupt of
    /// [`pending_approvals`](Self::pending_approvals), or over a wire naming the fingerprint it
    /// was shown. The message goes through `before_invocation` again at the next turn boundary:
    /// approved, it is delivered there; rejected, it is refused with
    /// `CONFIRMATION_FAILED: <prompt>`. An answer of the wrong shape (`InvalidAnswer`,
    /// `InvalidEdit`) or not naming the interrupt's fingerprint (`FingerprintMismatch`)
    /// records nothing: the message stays parked as it was.
    pub fn answer(&self, answer: InterruptResponse) -> Result<InjectionId, InjectError> {
        let InterruptResponse {
            interrupt_id,
            response,
            fingerprint: named,
        } = answer;
        let mut q = lock(&self.shared.queue);
        let (parked, interrupt) = q
            .parked
            .iter_mut()
            .find_map(|p| {
                let i = p
                    .interrupts
                    .iter()
                    .find(|i| i.resume_id() == interrupt_id)?;
                let (id, bound) = (i.id.clone(), i.fingerprint.clone());
                Some((p, (id, bound)))
            })
            .ok_or_else(|| InjectError::UnknownInterrupt(interrupt_id.clone()))?;
        let (id, mut fingerprint) = interrupt;
        if named != fingerprint {
            return Err(InjectError::FingerprintMismatch {
                interrupt_id,
                given: named,
            });
        }
        let approval = Approval::parse(&response).map_err(|reason| InjectError::InvalidAnswer {
            interrupt_id: id.clone(),
            reason,
        })?;
        if let Some(Approval {
            approved: true,
            edit: Some(edit),
            ..
        }) = approval
        {
            let Value::String(text) = edit else {
                return Err(InjectError::InvalidEdit);
            };
            let message = &mut parked.item.message;
            message
                .content
                .retain(|b| !matches!(b, ContentBlock::Text(_)));
            message.content.insert(0, ContentBlock::Text(text));
            fingerprint = Some(Message::fingerprint_all(std::slice::from_ref(message)));
        }
        parked.answers.insert(
            id,
            InterruptAnswer {
                response,
                fingerprint,
            },
        );
        Ok(parked.item.id)
    }

    /// Called once for each delivered message (with the message as delivered).
    pub fn on_consumed(&self, f: impl Fn(InjectionId, &Message) + Send + Sync + 'static) {
        *lock(&self.shared.on_consumed) = Some(Arc::new(f));
    }

    /// Called once for each rejected message, with the reason.
    pub fn on_rejected(&self, f: impl Fn(InjectionId, &Message, &str) + Send + Sync + 'static) {
        *lock(&self.shared.on_rejected) = Some(Arc::new(f));
    }

    /// Starts an invocation: a new run gets a new version (anything still queued is stale);
    /// a resume continues the paused run's.
    pub(crate) fn begin(&self, resume: bool) -> u64 {
        let mut q = lock(&self.shared.queue);
        if !resume {
            q.version += 1;
        }
        q.running = true;
        q.paused = false;
        q.version
    }

    /// Control passed to another agent: a new version, so what was queued for the agent that
    /// had it is stale.
    pub(crate) fn bump(&self) -> u64 {
        let mut q = lock(&self.shared.queue);
        q.version += 1;
        q.version
    }

    /// The run paused on interrupts: what is queued stays queued (and may be added to) until
    /// the resume or the end of the run.
    pub(crate) fn pause(&self) {
        let mut q = lock(&self.shared.queue);
        q.running = false;
        q.paused = true;
    }

    /// What is queued for the paused run (to persist with its pending interrupts).
    pub(crate) fn queued(&self) -> Vec<(InjectionId, Message)> {
        let q = lock(&self.shared.queue);
        let version = q.version;
        q.items
            .iter()
            .filter(|i| i.version == version)
            .map(|i| (i.id, i.message.clone()))
            .collect()
    }

    /// Restores what a paused run had queued (from a session), unless already queued.
    pub(crate) fn restore(&self, items: impl IntoIterator<Item = (InjectionId, Message)>) {
        let mut q = lock(&self.shared.queue);
        q.paused = true;
        let version = q.version;
        for (id, message) in items {
            if !q.items.iter().any(|i| i.id == id) {
                q.items.push_back(Item {
                    id,
                    message,
                    version,
                });
            }
        }
    }

    /// What is parked for the paused run, with the answers given so far (to persist with its
    /// pending interrupts).
    pub(crate) fn parked(&self) -> Vec<ParkedInjection> {
        let q = lock(&self.shared.queue);
        let version = q.version;
        q.parked
            .iter()
            .filter(|p| p.item.version == version)
            .map(|p| {
                let answers = p.answers.iter().map(|(k, v)| (k.clone(), v.clone()));
                ParkedInjection::new(p.item.id, p.item.message.clone(), p.interrupts.clone())
                    .with_answers(answers.collect())
            })
            .collect()
    }

    /// Restores what a paused run had parked (from a session), unless already parked: the
    /// interrupt ids and the answers' fingerprints are kept, so an answer given after the
    /// restore is checked against what the human saw.
    pub(crate) fn restore_parked(&self, items: impl IntoIterator<Item = ParkedInjection>) {
        let mut q = lock(&self.shared.queue);
        q.paused = true;
        let version = q.version;
        for p in items {
            if !q.parked.iter().any(|x| x.item.id == p.id) {
                q.parked.push(Parked {
                    item: Item {
                        id: p.id,
                        message: p.message,
                        version,
                    },
                    interrupts: p.interrupts,
                    answers: p.answers.into_iter().collect(),
                });
            }
        }
    }

    /// Takes everything queued, and the parked messages that have answers (first: they were
    /// injected earlier).
    pub(crate) fn drain(&self) -> (Vec<Parked>, Vec<Item>) {
        let mut q = lock(&self.shared.queue);
        let (answered, waiting) = std::mem::take(&mut q.parked)
            .into_iter()
            .partition(|p| !p.answers.is_empty());
        q.parked = waiting;
        (answered, q.items.drain(..).collect())
    }

    /// Parks a message until a human answers `interrupts`.
    pub(crate) fn park(
        &self,
        item: Item,
        interrupts: Vec<Interrupt>,
        answers: HashMap<String, InterruptAnswer>,
    ) {
        lock(&self.shared.queue).parked.push(Parked {
            item,
            interrupts,
            answers,
        });
    }

    /// Ends the run: nothing more can be queued; returns what is left (to be rejected). Items
    /// of an earlier run (one whose stream was dropped before it ended) are among them.
    pub(crate) fn end(&self) -> Vec<Item> {
        let mut q = lock(&self.shared.queue);
        q.running = false;
        q.paused = false;
        let parked = std::mem::take(&mut q.parked).into_iter().map(|p| p.item);
        parked.chain(q.items.drain(..)).collect()
    }

    pub(crate) fn consumed(&self, id: InjectionId, message: &Message) {
        let f = lock(&self.shared.on_consumed).clone();
        if let Some(f) = f
            && std::panic::catch_unwind(AssertUnwindSafe(|| f(id, message))).is_err()
        {
            tracing::error!(%id, "on_consumed callback panicked");
        }
    }

    pub(crate) fn rejected(&self, id: InjectionId, message: &Message, reason: &str) {
        let f = lock(&self.shared.on_rejected).clone();
        if let Some(f) = f
            && std::panic::catch_unwind(AssertUnwindSafe(|| f(id, message, reason))).is_err()
        {
            tracing::error!(%id, "on_rejected callback panicked");
        }
    }
}

/// An agent's interceptor, made when first asked for: an agent nobody injects into makes no
/// allocation for it, and its runs take no lock for it. Without one, nothing can be queued:
/// the run's version is 0 and there is nothing to drain, persist or reject.
#[derive(Debug, Default)]
pub(crate) struct Injections(OnceLock<TurnInterceptor>);

impl Injections {
    /// The interceptor, made now if none was; `paused` when the agent's run waits on
    /// interrupts (it may be injected into until it resumes).
    pub(crate) fn handle(&self, paused: bool) -> TurnInterceptor {
        self.made(|q| q.paused = paused).clone()
    }

    /// The interceptor for the running run of `version`, made now if none was (a durable
    /// inbox delivers into a run that started without one).
    pub(crate) fn for_run(&self, version: u64) -> &TurnInterceptor {
        self.made(|q| {
            q.running = true;
            q.version = version;
        })
    }

    /// The interceptor, made now with its queue set by `init` if none was.
    fn made(&self, init: impl FnOnce(&mut Queue)) -> &TurnInterceptor {
        self.0.get_or_init(|| {
            let i = TurnInterceptor::default();
            init(&mut lock(&i.shared.queue));
            i
        })
    }

    /// The interceptor, if anyone asked for one.
    pub(crate) fn get(&self) -> Option<&TurnInterceptor> {
        self.0.get()
    }

    /// Starts an invocation (see [`TurnInterceptor::begin`]); 0 without an interceptor.
    pub(crate) fn begin(&self, resume: bool) -> u64 {
        self.get().map_or(0, |i| i.begin(resume))
    }

    /// Ends the run: what is left, to be rejected (see [`TurnInterceptor::end`]).
    pub(crate) fn end(&self) -> Vec<Item> {
        self.get().map(TurnInterceptor::end).unwrap_or_default()
    }

    /// Takes what is queued and answered (see [`TurnInterceptor::drain`]).
    pub(crate) fn drain(&self) -> (Vec<Parked>, Vec<Item>) {
        self.get().map(TurnInterceptor::drain).unwrap_or_default()
    }

    /// The run paused on interrupts (see [`TurnInterceptor::pause`]).
    pub(crate) fn pause(&self) {
        if let Some(i) = self.get() {
            i.pause();
        }
    }

    /// Control passed to another agent: the run's new version (see
    /// [`TurnInterceptor::bump`]); `version` unchanged without an interceptor.
    pub(crate) fn bump(&self, version: u64) -> u64 {
        self.get().map_or(version, TurnInterceptor::bump)
    }

    pub(crate) fn consumed(&self, id: InjectionId, message: &Message) {
        if let Some(i) = self.get() {
            i.consumed(id, message);
        }
    }

    pub(crate) fn rejected(&self, id: InjectionId, message: &Message, reason: &str) {
        if let Some(i) = self.get() {
            i.rejected(id, message, reason);
        }
    }
}
