//! History storage and conversation managers (SPEC §6).

use std::sync::Arc;

use rein_core::{ContentBlock, Message, Role, id::MessageId, message::ToolResultContent};
use serde_json::Value;

/// The stored conversation: messages (shared, copy-on-write) and their stable ids.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conversation {
    messages: Arc<Vec<Message>>,
    ids: Vec<MessageId>,
}

impl Conversation {
    pub(crate) fn from_parts(messages: Vec<Message>, ids: Vec<MessageId>) -> Self {
        debug_assert_eq!(messages.len(), ids.len());
        Self {
            messages: Arc::new(messages),
            ids,
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
        let msgs = Arc::make_mut(&mut self.messages);
        let (idx, new) = match msgs.last_mut() {
            Some(last) if last.role == Role::User => {
                last.content.extend(blocks);
                (msgs.len() - 1, false)
            }
            _ => {
                msgs.push(Message::new(Role::User, blocks));
                (msgs.len() - 1, true)
            }
        };
        if new {
            self.ids.push(MessageId::new());
        }
        (idx, self.ids[idx], new)
    }

    pub(crate) fn get(&self, idx: usize) -> Option<&Message> {
        self.messages.get(idx)
    }

    pub(crate) fn get_mut(&mut self, idx: usize) -> Option<&mut Message> {
        Arc::make_mut(&mut self.messages).get_mut(idx)
    }

    pub(crate) fn id(&self, idx: usize) -> MessageId {
        self.ids[idx]
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        if len < self.len() {
            Arc::make_mut(&mut self.messages).truncate(len);
            self.ids.truncate(len);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.messages = Arc::default();
        self.ids.clear();
    }

    fn drain_front(&mut self, n: usize) {
        Arc::make_mut(&mut self.messages).drain(..n);
        self.ids.drain(..n);
    }
}

/// What a conversation manager may do to the history it manages.
pub struct HistoryEdit<'a> {
    conv: &'a mut Conversation,
}

impl<'a> HistoryEdit<'a> {
    pub(crate) fn new(conv: &'a mut Conversation) -> Self {
        Self { conv }
    }

    /// The messages.
    pub fn messages(&self) -> &[Message] {
        self.conv.messages()
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

    /// The first index ≥ `from` where the history may start: a user message that holds no tool
    /// result (so no result is separated from its tool use).
    fn valid_start(messages: &[Message], from: usize) -> Option<usize> {
        (from..messages.len()).find(|&i| {
            let m = &messages[i];
            m.role == Role::User
                && !m
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult(_)))
        })
    }

    fn trim_to(&mut self, history: &mut HistoryEdit<'_>, keep: usize) -> bool {
        let len = history.messages().len();
        if len <= keep {
            return false;
        }
        match Self::valid_start(history.messages(), len - keep) {
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
        // 1. Shorten tool results in the older half of the history.
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
        if shortened {
            return true;
        }
        // 2. Drop the oldest turns: keep at most half of what is there.
        let len = history.messages().len();
        self.trim_to(history, (len / 2).max(1))
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

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::{ToolResult, ToolUse};
    use serde_json::json;

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
    fn overflow_shortens_results_first_then_drops_turns() {
        let mut c = conv(4);
        let mut m = SlidingWindow::default();
        assert!(m.reduce_on_overflow(&mut HistoryEdit::new(&mut c)));
        assert_eq!(c.len(), 16, "first pass only shortens");
        assert_eq!(
            c.messages()[2].tool_results().next().unwrap().text(),
            TRUNCATED_TOOL_RESULT
        );
        assert!(m.reduce_on_overflow(&mut HistoryEdit::new(&mut c)));
        assert!(c.len() <= 8);
        assert_eq!(m.removed(), 16 - c.len());
    }
}
