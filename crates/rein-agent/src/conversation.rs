//! History storage and conversation managers (SPEC §6).

use std::sync::Arc;

use rein_core::{
    ContentBlock, Message, Role,
    id::MessageId,
    message::{Summary, ToolResultContent},
};
use rein_models::{Model, SharedModel};
use serde_json::Value;

use crate::tokens::{TokenEstimator, raw_message};

/// The stored conversation: messages (shared, copy-on-write) and their stable ids.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conversation {
    messages: Arc<Vec<Message>>,
    ids: Vec<MessageId>,
    /// The heuristic token count of the first messages, remembered so a model call counts
    /// only what was added since the last one (SPEC §6.1).
    counted: Counted,
}

/// The heuristic token count of a prefix of the messages: `raw` for the first `upto`.
#[derive(Debug, Clone, Copy, Default)]
struct Counted {
    upto: usize,
    raw: u64,
}

impl Conversation {
    pub(crate) fn from_parts(messages: Vec<Message>, ids: Vec<MessageId>) -> Self {
        debug_assert_eq!(messages.len(), ids.len());
        Self {
            messages: Arc::new(messages),
            ids,
            counted: Counted::default(),
        }
    }

    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub(crate) fn ids(&self) -> &[MessageId] {
        &self.ids
    }

    /// A shared snapshot (no copy).
    pub(crate) fn snapshot(&self) -> Arc<Vec<Message>> {
        self.messages.clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether `messages` is this conversation's own snapshot, unchanged.
    pub(crate) fn shares(&self, messages: &Arc<Vec<Message>>) -> bool {
        Arc::ptr_eq(&self.messages, messages)
    }

    /// The heuristic token count of the messages; counts only those added since it last
    /// counted.
    pub(crate) fn raw_tokens(&mut self) -> u64 {
        let raw = self.raw_tokens_now();
        self.counted = Counted {
            upto: self.messages.len(),
            raw,
        };
        raw
    }

    /// The same count, remembering nothing: what was counted plus what was added since.
    pub(crate) fn raw_tokens_now(&self) -> u64 {
        let Counted { upto, raw } = self.counted;
        let added = self.messages[upto..].iter().map(raw_message).sum::<u64>();
        raw.saturating_add(added)
    }

    /// Takes messages `idx..` out of the count, before they change or go. The count is a sum
    /// over messages, so it subtracts what leaves rather than counting again what stays: a
    /// truncation of a long history by a turn costs that turn, not the history.
    fn recount_from(&mut self, idx: usize) {
        let Counted { upto, raw } = self.counted;
        if idx >= upto {
            return;
        }
        // `raw` is the count of the first `upto` messages: whichever side is shorter is
        // counted (a history cut back to its start counts nothing).
        let raw = if idx <= upto - idx {
            self.messages[..idx].iter().map(raw_message).sum::<u64>()
        } else {
            let leaving = self.messages[idx..upto]
                .iter()
                .map(raw_message)
                .sum::<u64>();
            raw.saturating_sub(leaving)
        };
        self.counted = Counted { upto: idx, raw };
    }

    pub(crate) fn last(&self) -> Option<&Message> {
        self.messages.last()
    }

    pub(crate) fn push(&mut self, message: Message) -> (usize, MessageId) {
        let id = MessageId::new();
        Arc::make_mut(&mut self.messages).push(message);
        self.ids.push(id);
        (self.messages.len() - 1, id)
    }

    /// Appends user blocks, joining a trailing user message. Returns (index, id, new?).
    pub(crate) fn append_user(&mut self, blocks: Vec<ContentBlock>) -> (usize, MessageId, bool) {
        let joins = self
            .messages
            .last()
            .is_some_and(|last| last.role == Role::User);
        if joins {
            // Out of the count before it changes.
            self.recount_from(self.messages.len() - 1);
        }
        let msgs = Arc::make_mut(&mut self.messages);
        match msgs.last_mut() {
            Some(last) if joins => last.content.extend(blocks),
            _ => {
                msgs.push(Message::new(Role::User, blocks));
                self.ids.push(MessageId::new());
            }
        }
        let idx = self.messages.len() - 1;
        (idx, self.ids[idx], !joins)
    }

    pub(crate) fn get(&self, idx: usize) -> Option<&Message> {
        self.messages.get(idx)
    }

    pub(crate) fn get_mut(&mut self, idx: usize) -> Option<&mut Message> {
        self.recount_from(idx);
        Arc::make_mut(&mut self.messages).get_mut(idx)
    }

    pub(crate) fn id(&self, idx: usize) -> MessageId {
        self.ids[idx]
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.recount_from(len);
            Arc::make_mut(&mut self.messages).truncate(len);
            self.ids.truncate(len);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.messages = Arc::default();
        self.ids.clear();
        self.counted = Counted::default();
    }

    fn drain_front(&mut self, n: usize) {
        let Counted { upto, raw } = self.counted;
        self.counted = if n <= upto {
            // What stays keeps its count; only what leaves is counted.
            let leaving = self.messages[..n].iter().map(raw_message).sum::<u64>();
            Counted {
                upto: upto - n,
                raw: raw.saturating_sub(leaving),
            }
        } else {
            Counted::default()
        };
        Arc::make_mut(&mut self.messages).drain(..n);
        self.ids.drain(..n);
    }
}

/// What a conversation manager may do to the history it manages, with the conversation's
/// calibrated token estimate (SPEC §6.1).
pub struct HistoryEdit<'a> {
    conv: &'a mut Conversation,
    tokens: TokenEstimator,
    /// The heuristic's count of what every request carries besides its messages.
    fixed_raw: u64,
}

impl<'a> HistoryEdit<'a> {
    pub(crate) fn new(conv: &'a mut Conversation) -> Self {
        Self {
            conv,
            tokens: TokenEstimator::default(),
            fixed_raw: 0,
        }
    }

    /// With the conversation's estimator and the heuristic count of its system prompt and
    /// tools.
    pub(crate) fn with_tokens(mut self, tokens: TokenEstimator, fixed_raw: u64) -> Self {
        self.tokens = tokens;
        self.fixed_raw = fixed_raw;
        self
    }

    /// The messages.
    pub fn messages(&self) -> &[Message] {
        self.conv.messages()
    }

    /// The conversation's token estimator, calibrated from the provider's reported usage.
    pub fn tokens(&self) -> &TokenEstimator {
        &self.tokens
    }

    /// The estimated input tokens of the system prompt and tool declarations.
    pub fn fixed_tokens(&self) -> u64 {
        self.tokens.calibrated(self.fixed_raw)
    }

    /// The estimated input tokens of a request with this history: system prompt, tools and
    /// messages.
    pub fn estimated_tokens(&self) -> u64 {
        // The conversation's remembered count: what the last model call counted plus what was
        // added since (a manager asks after every invocation).
        let raw = self.conv.raw_tokens_now();
        self.tokens.calibrated(self.fixed_raw.saturating_add(raw))
    }

    /// Drops the first `n` messages.
    pub fn remove_front(&mut self, n: usize) {
        let n = n.min(self.conv.len());
        self.conv.drain_front(n);
    }

    /// Rewrites a message in place.
    pub fn message_mut(&mut self, idx: usize) -> Option<&mut Message> {
        self.conv.get_mut(idx)
    }

    /// Replaces the first `n` messages with a [`Summary`] of them: they are dropped (a session
    /// keeps them stored) and the summary, naming their ids, leads the message that then
    /// comes first. `n` must leave that message a turn's start (a user message with no tool
    /// result), so no tool result loses its tool use; otherwise nothing changes and this
    /// returns false.
    pub fn summarize_front(&mut self, n: usize, text: impl Into<String>) -> bool {
        let ok = n > 0 && self.conv.get(n).is_some_and(turn_start);
        if !ok {
            return false;
        }
        let summary = Summary::new(
            text,
            self.conv.id(0),
            self.conv.id(n - 1),
            u64::try_from(n).unwrap_or(u64::MAX),
        );
        self.conv.drain_front(n);
        if let Some(m) = self.conv.get_mut(0) {
            m.content.insert(0, ContentBlock::from(summary));
        }
        true
    }
}

/// A summary a conversation manager asks the run to write (SPEC §6.1): of the history's first
/// `end` messages, by `model` (the agent's when `None`), told `instructions`. The run makes
/// the call as a step of its own — through BeforeModelCall/AfterModelCall, marked as a summary
/// call, journaled by a durable engine — and hands the text back to
/// [`ConversationManager::apply_summary`].
#[derive(Clone)]
pub struct SummaryRequest {
    end: usize,
    instructions: Arc<str>,
    model: Option<SharedModel>,
}

impl std::fmt::Debug for SummaryRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryRequest")
            .field("end", &self.end)
            .field("own_model", &self.model.is_some())
            .finish_non_exhaustive()
    }
}

/// What a summarizer is told by default.
pub const SUMMARY_INSTRUCTIONS: &str = "You summarize the earlier part of a conversation \
between a user and an AI assistant that uses tools, so the assistant can go on without it. \
Keep the user's goals and constraints, decisions made, facts and results found (names, \
numbers, ids, paths), tool calls that matter and their outcomes, and open questions. Write \
concise plain text in the third person; do not address the user; do not invent anything.";

impl SummaryRequest {
    /// A summary of the history's first `end` messages, with [`SUMMARY_INSTRUCTIONS`].
    pub fn new(end: usize) -> Self {
        Self {
            end,
            instructions: Arc::from(SUMMARY_INSTRUCTIONS),
            model: None,
        }
    }

    /// The system prompt of the summary call.
    pub fn instructions(mut self, instructions: impl Into<Arc<str>>) -> Self {
        self.instructions = instructions.into();
        self
    }

    /// Writes the summary with this model instead of the agent's.
    pub fn model(mut self, model: SharedModel) -> Self {
        self.model = Some(model);
        self
    }

    /// How many leading messages the summary replaces.
    pub fn end(&self) -> usize {
        self.end
    }

    pub(crate) fn system_prompt(&self) -> &Arc<str> {
        &self.instructions
    }

    pub(crate) fn own_model(&self) -> Option<&SharedModel> {
        self.model.as_ref()
    }
}

/// The messages as one plain-text transcript: what a summarizer is given (one user message,
/// so no tool use or tool result is sent without its pair or without its tool's declaration).
pub(crate) fn transcript(messages: &[Message]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        for b in &m.content {
            // Writing to a String cannot fail.
            let _ = match b {
                ContentBlock::Text(t) => writeln!(out, "{who}: {t}"),
                ContentBlock::Summary(s) => {
                    writeln!(out, "Summary of what came before: {}", s.text)
                }
                ContentBlock::ToolUse(u) => {
                    writeln!(out, "{who} called tool `{}` with {}", u.name, u.input)
                }
                ContentBlock::ToolResult(r) => {
                    let status = if r.is_error() { "error" } else { "result" };
                    writeln!(out, "Tool {status}: {}", r.text())
                }
                ContentBlock::Image(_) => writeln!(out, "{who}: [an image]"),
                ContentBlock::Document(_) => writeln!(out, "{who}: [a document]"),
                _ => Ok(()),
            };
        }
    }
    out
}

/// Keeps the history within what the model can take.
pub trait ConversationManager: Send + Sync {
    /// Called after every invocation.
    fn apply(&mut self, history: &mut HistoryEdit<'_>);

    /// Called when the model reports a context-window overflow; returns whether anything was
    /// reduced (the call is then retried).
    fn reduce_on_overflow(&mut self, history: &mut HistoryEdit<'_>) -> bool;

    /// State to persist with a session.
    fn state(&self) -> Value {
        Value::Null
    }

    /// Restores persisted state.
    fn restore(&mut self, _state: &Value) {}

    /// Called after every invocation, before [`apply`](Self::apply): a summary the manager
    /// wants written (SPEC §6.1). The run writes it and calls
    /// [`apply_summary`](Self::apply_summary) with it. The default asks for none.
    fn summary_request(&mut self, _history: &HistoryEdit<'_>) -> Option<SummaryRequest> {
        None
    }

    /// The summary written for `request` (trimmed, not empty), or `None` when it could not be
    /// (the model failed, a handler denied the call, the output was empty or no shorter than
    /// what it summarizes): the manager then falls back to trimming. Never loses history
    /// beyond what a trim drops (a session keeps every dropped message stored).
    fn apply_summary(
        &mut self,
        _history: &mut HistoryEdit<'_>,
        _request: &SummaryRequest,
        _summary: Option<&str>,
    ) {
    }
}

/// An agent's conversation manager: the default sliding window held inline (no allocation per
/// agent), any other boxed. Cloneable, so a new conversation of the same agent gets a fresh
/// one like it (`Agent::new_conversation`).
pub(crate) enum Manager {
    Window(SlidingWindow),
    Boxed(Box<dyn CloneManager>),
}

/// A [`ConversationManager`] that can be copied: the private twin behind `Manager::Boxed`,
/// implemented for every cloneable manager.
pub(crate) trait CloneManager: ConversationManager {
    fn clone_box(&self) -> Box<dyn CloneManager>;
}

impl<M: ConversationManager + Clone + 'static> CloneManager for M {
    fn clone_box(&self) -> Box<dyn CloneManager> {
        Box::new(self.clone())
    }
}

impl Default for Manager {
    fn default() -> Self {
        Self::Window(SlidingWindow::default())
    }
}

impl Clone for Manager {
    fn clone(&self) -> Self {
        match self {
            Self::Window(w) => Self::Window(w.clone()),
            Self::Boxed(b) => Self::Boxed(b.clone_box()),
        }
    }
}

impl Manager {
    /// Whether this is the default (a sliding window of 40 messages that removed nothing).
    pub(crate) fn is_default(&self) -> bool {
        matches!(self, Self::Window(w) if w.window == SlidingWindow::default().window && w.removed == 0)
    }

    fn inner(&self) -> &dyn ConversationManager {
        match self {
            Self::Window(w) => w,
            Self::Boxed(b) => &**b,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn ConversationManager {
        match self {
            Self::Window(w) => w,
            Self::Boxed(b) => &mut **b,
        }
    }
}

impl ConversationManager for Manager {
    fn apply(&mut self, history: &mut HistoryEdit<'_>) {
        self.inner_mut().apply(history);
    }

    fn reduce_on_overflow(&mut self, history: &mut HistoryEdit<'_>) -> bool {
        self.inner_mut().reduce_on_overflow(history)
    }

    fn state(&self) -> Value {
        self.inner().state()
    }

    fn restore(&mut self, state: &Value) {
        self.inner_mut().restore(state);
    }

    fn summary_request(&mut self, history: &HistoryEdit<'_>) -> Option<SummaryRequest> {
        match self {
            // The default window never summarizes: nothing to ask.
            Self::Window(_) => None,
            Self::Boxed(b) => b.summary_request(history),
        }
    }

    fn apply_summary(
        &mut self,
        history: &mut HistoryEdit<'_>,
        request: &SummaryRequest,
        summary: Option<&str>,
    ) {
        self.inner_mut().apply_summary(history, request, summary);
    }
}

/// Whether the history may start at `m`: a user message that holds no tool result (so no
/// result is separated from its tool use).
fn turn_start(m: &Message) -> bool {
    m.role == Role::User
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// Leaves the history alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoConversationManager;

impl ConversationManager for NoConversationManager {
    fn apply(&mut self, _history: &mut HistoryEdit<'_>) {}
    fn reduce_on_overflow(&mut self, _history: &mut HistoryEdit<'_>) -> bool {
        false
    }
}

/// Keeps the last `window` messages (default 40), never separating a tool use from its result.
/// On context overflow it first shortens old tool results, then drops the oldest turns.
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    window: usize,
    removed: usize,
}

impl Default for SlidingWindow {
    fn default() -> Self {
        Self::new(40)
    }
}

/// The text that replaces a tool result shortened on context overflow.
pub const TRUNCATED_TOOL_RESULT: &str = "The tool result was too large and was removed.";

impl SlidingWindow {
    /// A window of `window` messages.
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            removed: 0,
        }
    }

    /// Messages removed so far.
    pub fn removed(&self) -> usize {
        self.removed
    }

    fn trim_to(&mut self, history: &mut HistoryEdit<'_>, keep: usize) -> bool {
        let len = history.messages().len();
        if len <= keep {
            return false;
        }
        match (len - keep..len).find(|&i| turn_start(&history.messages()[i])) {
            Some(cut) if cut > 0 => {
                history.remove_front(cut);
                self.removed += cut;
                true
            }
            _ => false,
        }
    }
}

impl ConversationManager for SlidingWindow {
    fn apply(&mut self, history: &mut HistoryEdit<'_>) {
        self.trim_to(history, self.window);
    }

    fn reduce_on_overflow(&mut self, history: &mut HistoryEdit<'_>) -> bool {
        // The call is retried once (SPEC §6.1), so one reduction must be enough: first shorten
        // the tool results of the older half, and unless that halved the estimate, also drop
        // the oldest turns.
        let before = history.estimated_tokens();
        let half = history.messages().len() / 2;
        let mut shortened = false;
        for i in 0..half {
            let Some(m) = history.message_mut(i) else {
                continue;
            };
            for b in &mut m.content {
                if let ContentBlock::ToolResult(r) = b {
                    let already = matches!(r.content.as_slice(),
                        [ToolResultContent::Text(t)] if t == TRUNCATED_TOOL_RESULT);
                    if !already {
                        r.content = vec![ToolResultContent::Text(TRUNCATED_TOOL_RESULT.into())];
                        shortened = true;
                    }
                }
            }
        }
        if shortened && history.estimated_tokens() <= before / 2 {
            return true;
        }
        // Drop the oldest turns: keep at most half of what is there.
        let len = history.messages().len();
        self.trim_to(history, (len / 2).max(1)) || shortened
    }

    fn state(&self) -> Value {
        serde_json::json!({"removed_message_count": self.removed, "window": self.window})
    }

    fn restore(&mut self, state: &Value) {
        if let Some(n) = state.get("removed_message_count").and_then(Value::as_u64) {
            self.removed = n as usize;
        }
    }
}

/// Keeps the newest turns that fit a token budget, by the conversation's calibrated estimate
/// (SPEC §6.1). It never separates a tool use from its result (the history starts at a user
/// message that holds no tool result), keeps the first user message's content unless told
/// otherwise, and trims in steps: once the budget is exceeded it trims down to the low-water
/// mark (default 75% of the budget), so the history's start — the provider's prompt-cache
/// prefix — then stays the same for the turns until the next trim.
#[derive(Debug, Clone)]
pub struct TokenWindow {
    budget: u64,
    low_water_percent: u8,
    keep_first: bool,
    /// The first user message's content, set at the first trim: from then on it leads the
    /// history's first message.
    first: Option<Vec<ContentBlock>>,
    removed: usize,
}

impl TokenWindow {
    /// A window of `budget_tokens` estimated input tokens (system prompt and tools included).
    pub fn new(budget_tokens: u64) -> Self {
        Self {
            budget: budget_tokens.max(1),
            low_water_percent: 75,
            keep_first: true,
            first: None,
            removed: 0,
        }
    }

    /// Trims down to `percent` of the budget (10–100; default 75): lower trims less often, so
    /// the cached prefix lasts longer, at the cost of sending less history after a trim.
    pub fn low_water_percent(mut self, percent: u8) -> Self {
        self.low_water_percent = percent.clamp(10, 100);
        self
    }

    /// Lets trimming drop the first user message like any other (by default its content is
    /// kept at the start of the history: it usually holds the task).
    pub fn drop_first_user_message(mut self) -> Self {
        self.keep_first = false;
        self
    }

    /// The budget in tokens.
    pub fn budget_tokens(&self) -> u64 {
        self.budget
    }

    /// Messages removed so far.
    pub fn removed(&self) -> usize {
        self.removed
    }

    /// The low-water mark: where a trim brings the estimate.
    fn low_water(&self) -> u64 {
        let target = u128::from(self.budget) * u128::from(self.low_water_percent) / 100;
        u64::try_from(target).unwrap_or(self.budget)
    }

    /// At the first trim, takes the first user message's content to pin.
    fn capture_first(&mut self, messages: &[Message]) {
        if self.keep_first && self.first.is_none() && self.removed == 0 {
            self.first = messages.first().filter(|m| turn_start(m)).map(|m| {
                m.content
                    .iter()
                    .filter(|b| {
                        matches!(
                            b,
                            ContentBlock::Text(_)
                                | ContentBlock::Image(_)
                                | ContentBlock::Document(_)
                        )
                    })
                    .cloned()
                    .collect()
            });
        }
    }

    /// Where to cut so the estimate is at most `target`: the first turn start from which the
    /// rest fits, or the newest turn if nothing less fits; `None` when there is no turn to
    /// cut at. `extra` is what will be added at the start (a summary).
    fn cut(&mut self, history: &HistoryEdit<'_>, target: u64, extra: u64) -> Option<usize> {
        let tokens = *history.tokens();
        let messages = history.messages();
        self.capture_first(messages);
        let pinned = match (&self.first, self.keep_first) {
            (Some(blocks), true) => {
                tokens.calibrated(raw_message(&Message::new(Role::User, blocks.clone())))
            }
            _ => 0,
        };
        // Suffix sums: what the history from each index on costs.
        let mut from = vec![0u64; messages.len() + 1];
        for i in (0..messages.len()).rev() {
            from[i] = from[i + 1].saturating_add(tokens.message(&messages[i]));
        }
        let fixed = history
            .fixed_tokens()
            .saturating_add(pinned)
            .saturating_add(extra);
        let starts = || (1..messages.len()).filter(|&i| turn_start(&messages[i]));
        starts()
            .find(|&i| fixed.saturating_add(from[i]) <= target)
            .or_else(|| starts().next_back())
    }

    /// Puts the pinned first user message's content at the start of the history.
    fn pin_first(&self, history: &mut HistoryEdit<'_>) {
        if let (Some(blocks), true) = (&self.first, self.keep_first)
            && let Some(m) = history.message_mut(0)
        {
            m.content.splice(0..0, blocks.iter().cloned());
        }
    }

    /// Trims the oldest turns until the estimate is at most `target`, or to the newest turn
    /// if nothing less fits. Returns whether anything was removed.
    fn trim_to(&mut self, history: &mut HistoryEdit<'_>, target: u64) -> bool {
        let Some(cut) = self.cut(history, target, 0) else {
            return false;
        };
        history.remove_front(cut);
        self.removed += cut;
        self.pin_first(history);
        true
    }
}

impl ConversationManager for TokenWindow {
    fn apply(&mut self, history: &mut HistoryEdit<'_>) {
        if history.estimated_tokens() > self.budget {
            self.trim_to(history, self.low_water());
        }
    }

    fn reduce_on_overflow(&mut self, history: &mut HistoryEdit<'_>) -> bool {
        // The estimate said it fits and the provider said no: halve what is sent.
        let target = history.estimated_tokens().min(self.budget) / 2;
        self.trim_to(history, target)
    }

    fn state(&self) -> Value {
        serde_json::json!({
            "budget_tokens": self.budget,
            "removed_message_count": self.removed,
            "first_user_message": self.first,
        })
    }

    fn restore(&mut self, state: &Value) {
        if let Some(n) = state.get("removed_message_count").and_then(Value::as_u64) {
            self.removed = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(first) = state
            .get("first_user_message")
            .and_then(|v| serde_json::from_value::<Option<Vec<ContentBlock>>>(v.clone()).ok())
        {
            self.first = first;
        }
    }
}

/// A [`TokenWindow`] that summarizes what it would drop (SPEC §6.1): once the estimate
/// exceeds the budget, the oldest turns down to the low-water mark are replaced by a summary
/// a model writes — the agent's, or a cheaper one ([`summarizer`](Self::summarizer)). The
/// summary is a [`Summary`] block naming the ids of the messages it stands for, at the start
/// of the first message kept; a session keeps those messages stored. It never separates a
/// tool use from its result and keeps the first user message's content, as the window does.
///
/// The run writes the summary as a step of its own, after the invocation, through
/// BeforeModelCall/AfterModelCall (the events say [`is_summary`]); when the summary cannot be
/// written — the model fails, a handler denies the call, the output is empty or no shorter —
/// the window trims instead. On a context overflow it trims (no model call in the middle of a
/// turn).
///
/// [`is_summary`]: rein_core::event::BeforeModelCallEvent::is_summary
#[derive(Clone)]
pub struct SummarizingWindow {
    window: TokenWindow,
    model: Option<SharedModel>,
    instructions: Arc<str>,
    summaries: usize,
}

impl std::fmt::Debug for SummarizingWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummarizingWindow")
            .field("window", &self.window)
            .field("own_model", &self.model.is_some())
            .field("summaries", &self.summaries)
            .finish_non_exhaustive()
    }
}

/// What a summary may cost, as a share of the budget: the cut leaves room for it.
const SUMMARY_SHARE_PERCENT: u64 = 10;

impl SummarizingWindow {
    /// A window of `budget_tokens` estimated input tokens that summarizes with the agent's
    /// model.
    pub fn new(budget_tokens: u64) -> Self {
        Self {
            window: TokenWindow::new(budget_tokens),
            model: None,
            instructions: Arc::from(SUMMARY_INSTRUCTIONS),
            summaries: 0,
        }
    }

    /// Summarizes down to `percent` of the budget (10–100; default 75), as
    /// [`TokenWindow::low_water_percent`].
    pub fn low_water_percent(mut self, percent: u8) -> Self {
        self.window = self.window.low_water_percent(percent);
        self
    }

    /// Lets the first user message go into the summary like any other (by default its
    /// content stays verbatim at the start of the history).
    pub fn drop_first_user_message(mut self) -> Self {
        self.window = self.window.drop_first_user_message();
        self
    }

    /// Writes summaries with this model (e.g. a cheaper one) instead of the agent's.
    pub fn summarizer(mut self, model: impl Model) -> Self {
        self.model = Some(SharedModel::new(model));
        self
    }

    /// The summary call's system prompt (default [`SUMMARY_INSTRUCTIONS`]).
    pub fn instructions(mut self, instructions: impl Into<Arc<str>>) -> Self {
        self.instructions = instructions.into();
        self
    }

    /// The budget in tokens.
    pub fn budget_tokens(&self) -> u64 {
        self.window.budget_tokens()
    }

    /// Summaries written so far.
    pub fn summaries(&self) -> usize {
        self.summaries
    }

    /// Messages summarized or trimmed away so far.
    pub fn removed(&self) -> usize {
        self.window.removed()
    }
}

impl ConversationManager for SummarizingWindow {
    /// Trims like the window when the history is still over budget (after a summary that did
    /// not shrink it enough, or when no run asks for summaries).
    fn apply(&mut self, history: &mut HistoryEdit<'_>) {
        self.window.apply(history);
    }

    fn reduce_on_overflow(&mut self, history: &mut HistoryEdit<'_>) -> bool {
        self.window.reduce_on_overflow(history)
    }

    fn summary_request(&mut self, history: &HistoryEdit<'_>) -> Option<SummaryRequest> {
        if history.estimated_tokens() <= self.window.budget {
            return None;
        }
        let room = self.window.budget / 100 * SUMMARY_SHARE_PERCENT;
        let end = self.window.cut(history, self.window.low_water(), room)?;
        let mut request = SummaryRequest::new(end).instructions(self.instructions.clone());
        if let Some(model) = &self.model {
            request = request.model(model.clone());
        }
        Some(request)
    }

    fn apply_summary(
        &mut self,
        history: &mut HistoryEdit<'_>,
        request: &SummaryRequest,
        summary: Option<&str>,
    ) {
        match summary {
            Some(text) if history.summarize_front(request.end, text) => {
                self.window.removed += request.end;
                self.summaries += 1;
                self.window.pin_first(history);
            }
            // No summary: trim as the window would.
            _ => {
                self.window.trim_to(history, self.window.low_water());
            }
        }
    }

    fn state(&self) -> Value {
        let mut state = self.window.state();
        state["summary_count"] = self.summaries.into();
        state
    }

    fn restore(&mut self, state: &Value) {
        self.window.restore(state);
        if let Some(n) = state.get("summary_count").and_then(Value::as_u64) {
            self.summaries = usize::try_from(n).unwrap_or(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::{ToolResult, ToolUse};
    use serde_json::json;

    #[test]
    fn the_remembered_token_count_follows_every_change_to_the_messages() {
        let whole = |c: &Conversation| c.messages().iter().map(raw_message).sum::<u64>();
        let mut c = Conversation::default();
        let check = |c: &mut Conversation, what: &str| {
            assert_eq!(
                c.raw_tokens_now(),
                whole(c),
                "after {what}, before counting"
            );
            assert_eq!(c.raw_tokens(), whole(c), "after {what}");
        };
        for m in turn_with_tool(0) {
            c.push(m);
        }
        check(&mut c, "pushes");
        c.append_user(vec![ContentBlock::Text("and a long afterthought".into())]);
        check(&mut c, "a user block joining the last message");
        c.push(Message::assistant("ok"));
        check(&mut c, "a push");
        if let Some(m) = c.get_mut(0) {
            m.content.push(ContentBlock::Text("x".repeat(400)));
        }
        check(&mut c, "an edit of the first message");
        c.drain_front(1);
        check(&mut c, "a drop from the front");
        c.truncate(1);
        check(&mut c, "a truncation");
        // Changes that reach into the counted part while later messages are not counted yet.
        for i in 1..4 {
            for m in turn_with_tool(i) {
                c.push(m);
            }
            check(&mut c, "a turn");
        }
        c.push(Message::assistant("not counted yet"));
        c.truncate(6);
        check(&mut c, "a truncation into the counted part");
        c.push(Message::user("not counted yet"));
        c.drain_front(2);
        check(&mut c, "a drop from the front of the counted part");
        c.push(Message::user("not counted yet"));
        c.push(Message::assistant("nor this"));
        c.drain_front(6);
        check(&mut c, "a drop past the counted part");
        c.clear();
        check(&mut c, "clearing");
        assert_eq!(c.raw_tokens(), 0);
    }

    fn turn_with_tool(i: usize) -> Vec<Message> {
        vec![
            Message::user(format!("q{i}")),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
                    format!("t{i}"),
                    "x",
                    json!({}),
                )))],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                    format!("t{i}"),
                    "r",
                )))],
            ),
            Message::assistant(format!("a{i}")),
        ]
    }

    fn conv(n_turns: usize) -> Conversation {
        let msgs: Vec<Message> = (0..n_turns).flat_map(turn_with_tool).collect();
        let ids = msgs.iter().map(|_| MessageId::new()).collect();
        Conversation::from_parts(msgs, ids)
    }

    #[test]
    fn window_never_starts_with_an_orphan_tool_result() {
        for window in 1..=12 {
            let mut c = conv(5);
            let mut m = SlidingWindow::new(window);
            m.apply(&mut HistoryEdit::new(&mut c));
            assert!(c.len() <= 20);
            let first = &c.messages()[0];
            assert_eq!(first.role, Role::User, "window {window}");
            assert!(first.tool_results().next().is_none(), "window {window}");
            assert_eq!(c.ids().len(), c.len());
        }
    }

    #[test]
    fn overflow_shortens_results_and_drops_turns_at_once() {
        // Short results: shortening them does not halve the estimate, so the same reduction
        // drops the oldest turns too (the call is retried only once).
        let mut c = conv(4);
        let mut m = SlidingWindow::default();
        assert!(m.reduce_on_overflow(&mut HistoryEdit::new(&mut c)));
        assert!(c.len() <= 8, "one reduction also drops turns: {}", c.len());
        assert_eq!(m.removed(), 16 - c.len());
        assert!(turn_start(&c.messages()[0]));

        // One huge old result: shortening it halves the estimate, nothing is dropped.
        let mut c = conv(4);
        if let Some(ContentBlock::ToolResult(r)) = c.get_mut(2).map(|m| &mut m.content[0]) {
            r.content = vec![ToolResultContent::Text("x".repeat(10_000))];
        }
        let mut m = SlidingWindow::default();
        assert!(m.reduce_on_overflow(&mut HistoryEdit::new(&mut c)));
        assert_eq!(c.len(), 16, "only shortened");
        assert_eq!(
            c.messages()[2].tool_results().next().unwrap().text(),
            TRUNCATED_TOOL_RESULT
        );
    }

    fn fits(c: &mut Conversation, budget: u64) -> TokenWindow {
        let mut w = TokenWindow::new(budget);
        w.apply(&mut HistoryEdit::new(c));
        w
    }

    fn estimate(c: &mut Conversation) -> u64 {
        HistoryEdit::new(c).estimated_tokens()
    }

    #[test]
    fn token_window_keeps_the_newest_turns_within_budget_and_every_tool_pair() {
        let full = estimate(&mut conv(20));
        for budget in (10..=full + 10).step_by(7) {
            let mut c = conv(20);
            fits(&mut c, budget);
            let first = &c.messages()[0];
            assert!(turn_start(first), "budget {budget}: starts at a turn");
            assert_eq!(c.messages().last().unwrap().text(), "a19", "newest kept");
            // Every tool result's use is in the history.
            for (i, m) in c.messages().iter().enumerate() {
                for r in m.tool_results() {
                    assert!(
                        c.messages()[..i]
                            .iter()
                            .flat_map(Message::tool_uses)
                            .any(|u| u.tool_use_id == r.tool_use_id),
                        "budget {budget}: orphan result"
                    );
                }
            }
            // Within budget unless only the newest turn is left.
            let one_turn = estimate(&mut conv(1)) + 2;
            assert!(estimate(&mut c) <= budget.max(one_turn), "budget {budget}");
            assert_eq!(c.ids().len(), c.len());
        }
    }

    #[test]
    fn token_window_keeps_the_first_user_message_unless_told() {
        let budget = estimate(&mut conv(5));
        let mut c = conv(20);
        let w = fits(&mut c, budget);
        assert!(w.removed() > 0);
        assert_eq!(c.messages()[0].content[0], ContentBlock::text("q0"));
        assert_eq!(c.messages()[0].role, Role::User);
        assert!(estimate(&mut c) <= budget);

        let mut c = conv(20);
        let mut w = TokenWindow::new(budget).drop_first_user_message();
        w.apply(&mut HistoryEdit::new(&mut c));
        assert!(c.messages().iter().all(|m| m.text() != "q0"));
    }

    /// How often the first `n` messages sent change over a 200-turn tool loop.
    fn prefix_changes(mut manager: impl ConversationManager, n: usize) -> usize {
        let mut c = conv(0);
        let mut last: Vec<Message> = Vec::new();
        let mut changes = 0;
        for t in 0..200 {
            for m in turn_with_tool(t) {
                c.push(m);
            }
            manager.apply(&mut HistoryEdit::new(&mut c));
            let prefix = c.messages()[..n.min(c.len())].to_vec();
            if !last.is_empty() && prefix != last {
                changes += 1;
            }
            last = prefix;
        }
        changes
    }

    #[test]
    fn token_window_trims_in_steps_so_the_prefix_stays_stable() {
        let budget = estimate(&mut conv(10));
        let window = prefix_changes(TokenWindow::new(budget), 4);
        let sliding = prefix_changes(SlidingWindow::new(40), 4);
        // 10 turns fit, a trim keeps ~7: the prefix moves about every 3 turns, not every turn.
        assert!(
            window <= 200 / 3 + 1,
            "token window moved the prefix {window} times"
        );
        assert!(sliding >= 150, "sliding window moved it {sliding} times");
        let wide = prefix_changes(TokenWindow::new(budget).low_water_percent(50), 4);
        eprintln!(
            "prefix changes in 200 turns: token window {window}, at 50% {wide}, sliding {sliding}"
        );
        assert!(
            wide < window,
            "a lower mark trims less often: {wide} vs {window}"
        );
    }

    #[test]
    fn token_window_state_round_trips() {
        let budget = estimate(&mut conv(5));
        let mut c = conv(20);
        let w = fits(&mut c, budget);
        let mut restored = TokenWindow::new(budget);
        restored.restore(&w.state());
        assert_eq!(restored.removed(), w.removed());
        assert_eq!(restored.first, w.first);
        for t in 20..30 {
            for m in turn_with_tool(t) {
                c.push(m);
            }
        }
        restored.apply(&mut HistoryEdit::new(&mut c));
        assert_eq!(c.messages()[0].content[0], ContentBlock::text("q0"));
        // Garbage state is ignored, not a panic.
        restored.restore(&json!({"removed_message_count": "x", "first_user_message": 3}));
    }

    #[test]
    fn token_window_overflow_halves_what_is_sent() {
        let mut c = conv(20);
        let before = estimate(&mut c);
        let mut w = TokenWindow::new(u64::MAX);
        assert!(w.reduce_on_overflow(&mut HistoryEdit::new(&mut c)));
        assert!(estimate(&mut c) <= before / 2 + 10);
    }
}
