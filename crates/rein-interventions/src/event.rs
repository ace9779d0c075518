//! What the dispatch pass needs to know about each of the five events: how to call a handler,
//! whether the event is already settled, its writable part, and how deny / guide / interrupts
//! are applied to it.

use rein_core::{
    AfterModelCallEvent, AfterToolCallEvent, BeforeInvocationEvent, BeforeModelCallEvent,
    BeforeToolCallEvent, Cancel, DecisionRecord, Interrupt, InterruptAnswers, InvocationContext,
    Message, ModelRequest, ToolResult, ToolUse,
};
use rein_hooks::HookEvent;

use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, ToolResultDraft, ToolUseDraft, Verdict,
};
use crate::handler::{DynHandler, EventSet, HandlerFuture, InterventionContext};
use crate::registry::{Entry, Shared};

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

pub(crate) trait PassEvent: HookEvent + Sync + Sized {
    type Action: Send;
    type Draft: Send;
    const GUIDE: GuideEffect;
    const SET: EventSet;

    fn entries(shared: &Shared) -> &[Entry];
    fn call<'a>(
        handler: &'a dyn DynHandler,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, Self::Action>;
    fn verdict(action: Self::Action) -> Verdict<Self::Draft>;

    /// Already cancelled by an earlier hook (or, after a model call, an error or a withheld
    /// response): the interventions do not run and record nothing.
    fn settled(&self) -> bool;
    fn tool_use_id(&self) -> Option<&str> {
        None
    }
    /// The tool use a `Confirm` asks about, and the answers given on resume.
    fn confirm_target(&self) -> Option<(&ToolUse, &InterruptAnswers)> {
        None
    }

    /// A copy of the writable part (`None` when there is none, e.g. a failed model call).
    fn draft(&self) -> Option<Self::Draft>;
    /// Writes `draft` back; returns the previous value.
    fn commit(&mut self, draft: Self::Draft) -> Self::Draft;
    /// Puts a snapshot back, touching the event only if it changed (so an unchanged tool use
    /// is not rewritten).
    fn restore(&mut self, snapshot: Self::Draft);

    /// Applies a deny (or `OnError::Deny`) with its full text.
    fn deny(&mut self, text: String);
    /// Applies the joined guidance.
    fn guide(&mut self, joined: String);
    fn raise(&mut self, _interrupts: Vec<Interrupt>) {}
    fn push_decision(&mut self, record: DecisionRecord);
    fn invocation(&self) -> &InvocationContext;
}

impl PassEvent for BeforeInvocationEvent {
    type Action = BeforeInvocationAction;
    type Draft = Vec<Message>;
    const GUIDE: GuideEffect = GuideEffect::Cancel;
    const SET: EventSet = EventSet::BEFORE_INVOCATION;

    fn entries(shared: &Shared) -> &[Entry] {
        &shared.before_invocation
    }
    #[inline]
    fn call<'a>(
        handler: &'a dyn DynHandler,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, Self::Action> {
        handler.before_invocation(event, cx)
    }
    #[inline]
    fn verdict(action: Self::Action) -> Verdict<Self::Draft> {
        action.into_verdict()
    }
    fn push_decision(&mut self, record: DecisionRecord) {
        self.record_decision(record);
    }
    fn invocation(&self) -> &InvocationContext {
        self.context()
    }
    fn settled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    fn draft(&self) -> Option<Self::Draft> {
        Some(self.messages.clone())
    }
    fn commit(&mut self, draft: Self::Draft) -> Self::Draft {
        std::mem::replace(&mut self.messages, draft)
    }
    fn restore(&mut self, snapshot: Self::Draft) {
        if self.messages != snapshot {
            self.messages = snapshot;
        }
    }
    fn deny(&mut self, text: String) {
        self.cancel = Cancel::Message(text);
    }
    fn guide(&mut self, joined: String) {
        self.cancel = Cancel::Message(format!("GUIDANCE: {joined}"));
    }
}

impl PassEvent for BeforeModelCallEvent {
    type Action = BeforeModelCallAction;
    type Draft = ModelRequest;
    const GUIDE: GuideEffect = GuideEffect::Inject;
    const SET: EventSet = EventSet::BEFORE_MODEL_CALL;

    fn entries(shared: &Shared) -> &[Entry] {
        &shared.before_model_call
    }
    #[inline]
    fn call<'a>(
        handler: &'a dyn DynHandler,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, Self::Action> {
        handler.before_model_call(event, cx)
    }
    #[inline]
    fn verdict(action: Self::Action) -> Verdict<Self::Draft> {
        action.into_verdict()
    }
    fn push_decision(&mut self, record: DecisionRecord) {
        self.record_decision(record);
    }
    fn invocation(&self) -> &InvocationContext {
        self.context()
    }
    fn settled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    fn draft(&self) -> Option<Self::Draft> {
        // Cheap: the request's fields are shared; an edit copies on write.
        Some(self.request.clone())
    }
    fn commit(&mut self, draft: Self::Draft) -> Self::Draft {
        std::mem::replace(&mut self.request, draft)
    }
    fn restore(&mut self, snapshot: Self::Draft) {
        self.request = snapshot;
    }
    fn deny(&mut self, text: String) {
        self.cancel = Cancel::Message(text);
    }
    fn guide(&mut self, joined: String) {
        self.inject_guidance(joined);
    }
}

impl PassEvent for AfterModelCallEvent {
    type Action = AfterModelCallAction;
    type Draft = Message;
    const GUIDE: GuideEffect = GuideEffect::InjectAndRetry;
    const SET: EventSet = EventSet::AFTER_MODEL_CALL;

    fn entries(shared: &Shared) -> &[Entry] {
        &shared.after_model_call
    }
    #[inline]
    fn call<'a>(
        handler: &'a dyn DynHandler,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, Self::Action> {
        handler.after_model_call(event, cx)
    }
    #[inline]
    fn verdict(action: Self::Action) -> Verdict<Self::Draft> {
        action.into_verdict()
    }
    fn push_decision(&mut self, record: DecisionRecord) {
        self.record_decision(record);
    }
    fn invocation(&self) -> &InvocationContext {
        self.context()
    }
    fn settled(&self) -> bool {
        self.error().is_some() || self.withheld().is_some()
    }
    fn draft(&self) -> Option<Self::Draft> {
        self.response().map(|r| r.message.clone())
    }
    fn commit(&mut self, draft: Self::Draft) -> Self::Draft {
        match self.message_mut() {
            Some(m) => std::mem::replace(m, draft),
            // Unreachable in practice: drafts exist only for responses.
            None => draft,
        }
    }
    fn restore(&mut self, snapshot: Self::Draft) {
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
}

impl PassEvent for BeforeToolCallEvent {
    type Action = BeforeToolCallAction;
    type Draft = ToolUseDraft;
    const GUIDE: GuideEffect = GuideEffect::Cancel;
    const SET: EventSet = EventSet::BEFORE_TOOL_CALL;

    fn entries(shared: &Shared) -> &[Entry] {
        &shared.before_tool_call
    }
    #[inline]
    fn call<'a>(
        handler: &'a dyn DynHandler,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, Self::Action> {
        handler.before_tool_call(event, cx)
    }
    #[inline]
    fn verdict(action: Self::Action) -> Verdict<Self::Draft> {
        action.into_verdict()
    }
    fn push_decision(&mut self, record: DecisionRecord) {
        self.record_decision(record);
    }
    fn invocation(&self) -> &InvocationContext {
        self.context()
    }
    fn settled(&self) -> bool {
        self.cancel_tool.is_cancelled()
    }
    fn tool_use_id(&self) -> Option<&str> {
        Some(&self.tool_use().tool_use_id)
    }
    fn confirm_target(&self) -> Option<(&ToolUse, &InterruptAnswers)> {
        Some((self.tool_use(), self.answers()))
    }
    fn draft(&self) -> Option<Self::Draft> {
        Some(ToolUseDraft::from_tool_use(self.tool_use()))
    }
    fn commit(&mut self, mut draft: Self::Draft) -> Self::Draft {
        let tool_use = self.tool_use_mut();
        std::mem::swap(&mut tool_use.name, &mut draft.name);
        std::mem::swap(&mut tool_use.input, &mut draft.input);
        draft
    }
    fn restore(&mut self, snapshot: Self::Draft) {
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
    type Action = AfterToolCallAction;
    type Draft = ToolResultDraft;
    // No guide on after_tool_call: the action type does not admit one.
    const GUIDE: GuideEffect = GuideEffect::Inject;
    const SET: EventSet = EventSet::AFTER_TOOL_CALL;

    fn entries(shared: &Shared) -> &[Entry] {
        &shared.after_tool_call
    }
    #[inline]
    fn call<'a>(
        handler: &'a dyn DynHandler,
        event: &'a Self,
        cx: &'a InterventionContext,
    ) -> HandlerFuture<'a, Self::Action> {
        handler.after_tool_call(event, cx)
    }
    #[inline]
    fn verdict(action: Self::Action) -> Verdict<Self::Draft> {
        action.into_verdict()
    }
    fn push_decision(&mut self, record: DecisionRecord) {
        self.record_decision(record);
    }
    fn invocation(&self) -> &InvocationContext {
        self.context()
    }
    fn settled(&self) -> bool {
        false
    }
    fn tool_use_id(&self) -> Option<&str> {
        Some(&self.tool_use().tool_use_id)
    }
    fn draft(&self) -> Option<Self::Draft> {
        Some(ToolResultDraft::from_result(&self.result))
    }
    fn commit(&mut self, mut draft: Self::Draft) -> Self::Draft {
        std::mem::swap(&mut self.result.status, &mut draft.status);
        std::mem::swap(&mut self.result.content, &mut draft.content);
        draft
    }
    fn restore(&mut self, snapshot: Self::Draft) {
        self.commit(snapshot);
    }
    fn deny(&mut self, text: String) {
        self.result = ToolResult::error(self.tool_use().tool_use_id.clone(), text);
    }
    fn guide(&mut self, _joined: String) {}
}
