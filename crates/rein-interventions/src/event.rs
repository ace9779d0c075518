//! The semantics of each intervention event, as the dispatch pass needs them: when its callback
//! runs, whether the event is already settled, its writable part, and how deny / guide /
//! interrupts are applied to it. (How a handler is called on it comes from the list of events,
//! in `shared.rs`.)

use rein_core::{
    ToolResult,
    audit::DecisionRecord,
    event::{
        AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
        BeforeToolCallEvent, Cancel, InvocationContext, ModelOutputEvent,
    },
    interrupt::{Interrupt, InterruptAnswers},
};
use rein_hooks::{HookEvent, HookOrder};

use crate::action::{IntoVerdict, ToolResultDraft, ToolUseDraft};
use crate::list::for_each_intervention_event;
use crate::registry::InterventionRegistry;
use crate::shared::Route;

/// How an event applies the guidance of a pass.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuideEffect {
    /// Cancel with `GUIDANCE: <joined>` (staged transforms are discarded).
    Cancel,
    /// Inject the joined text (transforms stay).
    Inject,
    /// Inject the joined text and retry (the response, transformed or not, is discarded).
    InjectAndRetry,
}

pub(crate) trait PassEvent: Route<Action: IntoVerdict> + HookEvent + Common {
    const GUIDE: GuideEffect;
    /// The position of the event in the list of events.
    const POSITION: usize = Self::SET.position();

    /// When the bridging callback runs: `INPUT_ORDER` on Before* events, `OUTPUT_ORDER` on
    /// After* events.
    const ORDER: HookOrder;

    /// Already cancelled by an earlier hook (or, after a model call, an error or a withheld
    /// response): the interventions do not run and record nothing.
    fn settled(&self) -> bool;
    fn tool_use_id(&self) -> Option<&str> {
        None
    }
    /// What a `Confirm` on this event asks about — the subject of its interrupt ids (the tool
    /// use id) — and the answers given on resume; `None` where no confirm is admitted.
    fn confirm_target(&self) -> Option<(String, &InterruptAnswers)> {
        None
    }
    /// The answers a resume gave, without the subject (nothing allocated): `None` where no
    /// confirm is admitted.
    fn resume_answers(&self) -> Option<&InterruptAnswers> {
        None
    }
    /// A fingerprint of exactly what a confirm asks about, as the event stands (computed only
    /// when an interrupt is raised or an answer checked).
    fn confirm_fingerprint(&self) -> String {
        String::new()
    }

    /// A copy of the writable part (`None` when there is none, e.g. a failed model call).
    fn draft(&self) -> Option<Draft<Self>>;
    /// Writes `draft` back; returns the previous value.
    fn commit(&mut self, draft: Draft<Self>) -> Draft<Self>;
    /// Puts a snapshot back, touching the event only if it changed (so an unchanged tool use
    /// is not rewritten).
    fn restore(&mut self, snapshot: Draft<Self>);

    /// Applies a deny (or `OnError::Deny`) with its full text.
    fn deny(&mut self, text: String);
    /// Applies the joined guidance.
    fn guide(&mut self, joined: String);
    fn raise(&mut self, _interrupts: Vec<Interrupt>) {}
}

/// The writable part of an event: what its transforms edit.
pub(crate) type Draft<E> = <<E as Route>::Action as IntoVerdict>::Draft;

/// What every intervention event offers alike, through a trait.
pub(crate) trait Common {
    fn invocation(&self) -> &InvocationContext;
    fn push_decision(&mut self, record: DecisionRecord);
}

macro_rules! common {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {$(
        impl Common for $crate::$event {
            #[inline]
            fn invocation(&self) -> &InvocationContext {
                self.context()
            }
            fn push_decision(&mut self, record: DecisionRecord) {
                self.record_decision(record);
            }
        }
    )*};
}

for_each_intervention_event!(common);

impl PassEvent for BeforeInvocationEvent {
    const GUIDE: GuideEffect = GuideEffect::Cancel;

    const ORDER: HookOrder = InterventionRegistry::INPUT_ORDER;
    fn settled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    fn draft(&self) -> Option<Draft<Self>> {
        Some(self.messages.clone())
    }
    fn commit(&mut self, draft: Draft<Self>) -> Draft<Self> {
        std::mem::replace(&mut self.messages, draft)
    }
    fn restore(&mut self, snapshot: Draft<Self>) {
        if self.messages != snapshot {
            self.messages = snapshot;
        }
    }
    fn confirm_target(&self) -> Option<(String, &InterruptAnswers)> {
        Some((self.interrupt_subject(), self.answers()))
    }
    fn resume_answers(&self) -> Option<&InterruptAnswers> {
        Some(self.answers())
    }
    fn confirm_fingerprint(&self) -> String {
        self.input_fingerprint()
    }
    fn deny(&mut self, text: String) {
        self.cancel = Cancel::Message(text);
    }
    fn guide(&mut self, joined: String) {
        self.cancel = Cancel::Message(format!("GUIDANCE: {joined}"));
    }
    fn raise(&mut self, interrupts: Vec<Interrupt>) {
        for interrupt in interrupts {
            self.raise_interrupt(interrupt);
        }
    }
}

impl PassEvent for BeforeModelCallEvent {
    const GUIDE: GuideEffect = GuideEffect::Inject;

    const ORDER: HookOrder = InterventionRegistry::INPUT_ORDER;
    fn settled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    fn draft(&self) -> Option<Draft<Self>> {
        // Cheap: the request's fields are shared; an edit copies on write.
        Some(self.request.clone())
    }
    fn commit(&mut self, draft: Draft<Self>) -> Draft<Self> {
        std::mem::replace(&mut self.request, draft)
    }
    fn restore(&mut self, snapshot: Draft<Self>) {
        self.request = snapshot;
    }
    fn confirm_target(&self) -> Option<(String, &InterruptAnswers)> {
        Some((self.interrupt_subject(), self.answers()))
    }
    fn resume_answers(&self) -> Option<&InterruptAnswers> {
        Some(self.answers())
    }
    fn confirm_fingerprint(&self) -> String {
        self.request_fingerprint()
    }
    fn deny(&mut self, text: String) {
        self.cancel = Cancel::Message(text);
    }
    fn guide(&mut self, joined: String) {
        self.inject_guidance(joined);
    }
    fn raise(&mut self, interrupts: Vec<Interrupt>) {
        for interrupt in interrupts {
            self.raise_interrupt(interrupt);
        }
    }
}

impl PassEvent for AfterModelCallEvent {
    const GUIDE: GuideEffect = GuideEffect::InjectAndRetry;

    const ORDER: HookOrder = InterventionRegistry::OUTPUT_ORDER;
    fn settled(&self) -> bool {
        self.error().is_some() || self.withheld().is_some()
    }
    fn confirm_target(&self) -> Option<(String, &InterruptAnswers)> {
        Some((self.interrupt_subject(), self.answers()))
    }
    fn resume_answers(&self) -> Option<&InterruptAnswers> {
        Some(self.answers())
    }
    fn confirm_fingerprint(&self) -> String {
        self.response_fingerprint()
    }
    fn draft(&self) -> Option<Draft<Self>> {
        self.response().map(|r| r.message.clone())
    }
    fn commit(&mut self, draft: Draft<Self>) -> Draft<Self> {
        match self.message_mut() {
            Some(m) => std::mem::replace(m, draft),
            // Unreachable in practice: drafts exist only for responses.
            None => draft,
        }
    }
    fn restore(&mut self, snapshot: Draft<Self>) {
        let changed = self.response().is_some_and(|r| r.message != snapshot);
        if changed && let Some(m) = self.message_mut() {
            *m = snapshot;
        }
    }
    fn deny(&mut self, text: String) {
        self.withhold(text);
    }
    fn guide(&mut self, joined: String) {
        self.inject_guidance(joined);
        self.retry = true;
    }
    fn raise(&mut self, interrupts: Vec<Interrupt>) {
        for interrupt in interrupts {
            self.raise_interrupt(interrupt);
        }
    }
}

impl PassEvent for ModelOutputEvent {
    // No guide on model_output: the action type does not admit one.
    const GUIDE: GuideEffect = GuideEffect::Inject;

    const ORDER: HookOrder = InterventionRegistry::OUTPUT_ORDER;
    fn settled(&self) -> bool {
        self.withheld().is_some()
    }
    fn draft(&self) -> Option<Draft<Self>> {
        Some(self.pending.clone())
    }
    fn commit(&mut self, draft: Draft<Self>) -> Draft<Self> {
        std::mem::replace(&mut self.pending, draft)
    }
    fn restore(&mut self, snapshot: Draft<Self>) {
        if self.pending != snapshot {
            self.pending = snapshot;
        }
    }
    fn deny(&mut self, text: String) {
        self.withhold(text);
    }
    fn guide(&mut self, _joined: String) {}
}

impl PassEvent for BeforeToolCallEvent {
    const GUIDE: GuideEffect = GuideEffect::Cancel;

    const ORDER: HookOrder = InterventionRegistry::INPUT_ORDER;
    fn settled(&self) -> bool {
        self.cancel_tool.is_cancelled()
    }
    fn tool_use_id(&self) -> Option<&str> {
        Some(&self.tool_use().tool_use_id)
    }
    fn confirm_target(&self) -> Option<(String, &InterruptAnswers)> {
        Some((self.tool_use().tool_use_id.clone(), self.answers()))
    }
    fn resume_answers(&self) -> Option<&InterruptAnswers> {
        Some(self.answers())
    }
    fn confirm_fingerprint(&self) -> String {
        self.tool_use().fingerprint()
    }
    fn draft(&self) -> Option<Draft<Self>> {
        Some(ToolUseDraft::from_tool_use(self.tool_use()))
    }
    fn commit(&mut self, mut draft: Draft<Self>) -> Draft<Self> {
        let tool_use = self.tool_use_mut();
        std::mem::swap(&mut tool_use.name, &mut draft.name);
        std::mem::swap(&mut tool_use.input, &mut draft.input);
        draft
    }
    fn restore(&mut self, snapshot: Draft<Self>) {
        let current = self.tool_use();
        if current.name != snapshot.name || current.input != snapshot.input {
            self.commit(snapshot);
        }
    }
    fn deny(&mut self, text: String) {
        self.cancel_tool = Cancel::Message(text);
    }
    fn guide(&mut self, joined: String) {
        self.cancel_tool = Cancel::Message(format!("GUIDANCE: {joined}"));
    }
    fn raise(&mut self, interrupts: Vec<Interrupt>) {
        for interrupt in interrupts {
            self.raise_interrupt(interrupt);
        }
    }
}

impl PassEvent for AfterToolCallEvent {
    // No guide on after_tool_call: the action type does not admit one.
    const GUIDE: GuideEffect = GuideEffect::Inject;

    const ORDER: HookOrder = InterventionRegistry::OUTPUT_ORDER;
    fn settled(&self) -> bool {
        false
    }
    fn tool_use_id(&self) -> Option<&str> {
        Some(&self.tool_use().tool_use_id)
    }
    fn confirm_target(&self) -> Option<(String, &InterruptAnswers)> {
        Some((self.tool_use().tool_use_id.clone(), self.answers()))
    }
    fn resume_answers(&self) -> Option<&InterruptAnswers> {
        Some(self.answers())
    }
    fn confirm_fingerprint(&self) -> String {
        self.result_fingerprint()
    }
    fn draft(&self) -> Option<Draft<Self>> {
        Some(ToolResultDraft::from_result(&self.result))
    }
    fn commit(&mut self, mut draft: Draft<Self>) -> Draft<Self> {
        std::mem::swap(&mut self.result.status, &mut draft.status);
        std::mem::swap(&mut self.result.content, &mut draft.content);
        draft
    }
    fn restore(&mut self, snapshot: Draft<Self>) {
        self.commit(snapshot);
    }
    fn deny(&mut self, text: String) {
        self.result = ToolResult::error(self.tool_use().tool_use_id.clone(), text);
    }
    fn guide(&mut self, _joined: String) {}
    fn raise(&mut self, interrupts: Vec<Interrupt>) {
        for interrupt in interrupts {
            self.raise_interrupt(interrupt);
        }
    }
}
