//! The message path: the one place that stores messages. It owns the conversation and the
//! session binding, and for every message stored or rewritten during a run it persists it,
//! fires `MessageAdded` / `MessageUpdated` and streams it — in that order.

use std::pin::Pin;

use rein_core::{
    ContentBlock, Error, Map, Message, Role, ToolResult, ToolUse,
    event::{InvocationContext, MessageAddedEvent, MessageUpdatedEvent},
    id::MessageId,
};
use rein_hooks::{HookEvent, HookRegistry};
use serde_json::Value;

use crate::checkpoint::{Checkpoint, PausedRun};
use crate::conversation::Conversation;
use crate::session::SharedBinding;
use crate::stream::{AgentEvent, Sink};

/// The text of the error result given to a tool use whose call was abandoned.
pub const TOOL_INTERRUPTED: &str = "Tool was interrupted.";
/// The text of the error result given to a tool use whose call was cancelled.
pub const TOOL_CANCELLED: &str = "Tool execution cancelled";

/// Who hears about a stored message: the run's hooks and its stream.
pub(crate) struct Listeners<'a> {
    pub(crate) hooks: &'a HookRegistry,
    pub(crate) sink: &'a Sink,
    pub(crate) cx: &'a InvocationContext,
}

impl Listeners<'_> {
    /// Whether anyone listens for stored messages (otherwise they are not copied).
    fn want_added(&self) -> bool {
        self.sink.is_enabled() || self.hooks.has::<MessageAddedEvent>()
    }

    /// Streams a stored message (nothing is copied when nobody streams).
    fn stream_added(&self, id: MessageId, message: &Message) {
        self.sink.emit(|| AgentEvent::MessageAdded {
            id,
            message: message.clone(),
        });
    }

    /// Streams a stored message; what fires `MessageAdded`, if a hook listens (made here, not
    /// in an async fn, so that the caller carries only the box).
    fn added(
        &self,
        id: MessageId,
        message: Message,
    ) -> Option<Pin<Box<impl Future<Output = Result<(), Error>> + use<'_>>>> {
        self.stream_added(id, &message);
        self.hooks.has::<MessageAddedEvent>().then(|| {
            fire(
                self.hooks,
                MessageAddedEvent::new(self.cx.clone(), id, message),
            )
        })
    }
}

/// The hooks' pass over an owned event, boxed (layout rule 1: runs without such a hook must not
/// carry the event across the hooks' awaits).
fn fire<E: HookEvent>(
    hooks: &HookRegistry,
    mut ev: E,
) -> Pin<Box<impl Future<Output = Result<(), Error>> + use<'_, E>>> {
    Box::pin(async move { hooks.dispatch(&mut ev).await })
}

/// The conversation and where it is persisted.
pub(crate) struct History {
    conv: Conversation,
    session: Option<SharedBinding>,
    /// Whether the session was restored yet (nothing is persisted before).
    loaded: bool,
}

impl History {
    pub(crate) fn new(conv: Conversation, session: Option<SharedBinding>) -> Self {
        Self {
            conv,
            session,
            loaded: false,
        }
    }

    pub(crate) fn conv(&self) -> &Conversation {
        &self.conv
    }

    /// The conversation, for changes made outside a run (nothing is persisted or fired).
    pub(crate) fn conv_mut(&mut self) -> &mut Conversation {
        &mut self.conv
    }

    pub(crate) fn session(&self) -> Option<&SharedBinding> {
        self.session.as_ref()
    }

    pub(crate) fn is_loaded(&self) -> bool {
        self.loaded
    }

    pub(crate) fn set_loaded(&mut self) {
        self.loaded = true;
    }

    /// Appends a message. Returns its index.
    pub(crate) async fn add(
        &mut self,
        message: Message,
        to: &Listeners<'_>,
    ) -> Result<usize, Error> {
        let copy = to.want_added().then(|| message.clone());
        let (idx, id) = self.conv.push(message);
        self.persist_added(idx).await?;
        if let Some(message) = copy
            && let Some(fire) = to.added(id, message)
        {
            fire.await?;
        }
        Ok(idx)
    }

    /// Appends a message at once when storing it awaits nothing — no session to persist it
    /// to, no `MessageAdded` hook (the stream still hears of it) — and returns its index; else
    /// hands it back for [`add`](Self::add). The common step then builds no future.
    pub(crate) fn add_now(
        &mut self,
        message: Message,
        to: &Listeners<'_>,
    ) -> Result<usize, Message> {
        if self.session.is_some() || to.hooks.has::<MessageAddedEvent>() {
            return Err(message);
        }
        let (idx, id) = self.conv.push(message);
        if let Some(message) = self.conv.get(idx) {
            to.stream_added(id, message);
        }
        Ok(idx)
    }

    /// Appends messages in order, user content through [`append_user`](Self::append_user).
    pub(crate) async fn add_all(
        &mut self,
        messages: impl IntoIterator<Item = Message>,
        to: &Listeners<'_>,
    ) -> Result<(), Error> {
        for m in messages {
            if m.role == Role::User {
                self.append_user(m.content, to).await?;
            } else {
                self.add(m, to).await?;
            }
        }
        Ok(())
    }

    /// Appends user blocks, joining a trailing user message (`MessageUpdated`) or as a new one
    /// (`MessageAdded`): history never holds two messages of the same role in a row.
    pub(crate) async fn append_user(
        &mut self,
        blocks: Vec<ContentBlock>,
        to: &Listeners<'_>,
    ) -> Result<(), Error> {
        let (idx, id, new) = self.conv.append_user(blocks);
        if !new {
            return self.updated(idx, to).await;
        }
        self.persist_added(idx).await?;
        if to.want_added()
            && let Some(message) = self.conv.get(idx).cloned()
            && let Some(fire) = to.added(id, message)
        {
            fire.await?;
        }
        Ok(())
    }

    /// Rewrites the tool uses of the stored message at `idx` that `rewrites` names.
    pub(crate) async fn rewrite_tool_uses(
        &mut self,
        idx: usize,
        rewrites: &[ToolUse],
        to: &Listeners<'_>,
    ) -> Result<(), Error> {
        if rewrites.is_empty() {
            return Ok(());
        }
        if let Some(m) = self.conv.get_mut(idx) {
            for b in &mut m.content {
                if let ContentBlock::ToolUse(u) = b
                    && let Some(rw) = rewrites.iter().find(|r| r.tool_use_id == u.tool_use_id)
                {
                    **u = rw.clone();
                }
            }
        }
        self.updated(idx, to).await
    }

    /// The message at `idx` was rewritten.
    async fn updated(&mut self, idx: usize, to: &Listeners<'_>) -> Result<(), Error> {
        self.persist_updated(idx).await?;
        let wants_event = to.hooks.has::<MessageUpdatedEvent>();
        if (wants_event || to.sink.is_enabled())
            && let Some(message) = self.conv.get(idx).cloned()
        {
            let id = self.conv.id(idx);
            to.sink.emit(|| AgentEvent::MessageUpdated {
                id,
                message: message.clone(),
            });
            if wants_event {
                fire(
                    to.hooks,
                    MessageUpdatedEvent::new(to.cx.clone(), id, message),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Answers every open tool use of the last message (an assistant message with tool uses),
    /// through the message path: the results in `completed`, else an error result with `text`.
    pub(crate) async fn close_open_tool_uses(
        &mut self,
        completed: &[ToolResult],
        text: &str,
        to: &Listeners<'_>,
    ) -> Result<(), Error> {
        match self
            .conv
            .last()
            .map(|last| closing_results(last, completed, text))
        {
            Some(blocks) if !blocks.is_empty() => self.append_user(blocks, to).await,
            _ => Ok(()),
        }
    }

    async fn persist_added(&self, idx: usize) -> Result<(), Error> {
        if let (Some(b), Some(m)) = (&self.session, self.conv.get(idx)) {
            b.message_added(self.conv.id(idx), m).await?;
        }
        Ok(())
    }

    async fn persist_updated(&self, idx: usize) -> Result<(), Error> {
        if let (Some(b), Some(m)) = (&self.session, self.conv.get(idx)) {
            b.message_updated(self.conv.id(idx), m).await?;
        }
        Ok(())
    }

    /// Persists whatever differs between the agent and its session (once it is restored).
    pub(crate) async fn sync(
        &self,
        agent_state: Map,
        conversation_manager_state: Value,
        pending_interrupts: Option<&PausedRun>,
    ) -> Result<(), Error> {
        let Some(b) = self.session.as_ref().filter(|_| self.loaded) else {
            return Ok(());
        };
        let messages = self.conv.ids().iter().copied();
        // Boxed (layout rule 1): held across the store's await.
        let checkpoint = Box::new(Checkpoint::new(
            messages.zip(self.conv.messages().iter().cloned()).collect(),
            agent_state,
            conversation_manager_state,
            pending_interrupts.cloned(),
        ));
        b.sync(&checkpoint).await
    }
}

/// Tool-result blocks that close the tool uses of `message` (none unless it is an assistant
/// message with tool uses), in tool-use order: the finished result where `completed` has one,
/// else an error result with `text`. Every "answer what is left open" goes through here.
pub(crate) fn closing_results(
    message: &Message,
    completed: &[ToolResult],
    text: &str,
) -> Vec<ContentBlock> {
    if message.role != Role::Assistant {
        return Vec::new();
    }
    message
        .tool_uses()
        .map(|u| {
            let r = completed
                .iter()
                .find(|r| r.tool_use_id == u.tool_use_id)
                .cloned()
                .unwrap_or_else(|| ToolResult::error(&u.tool_use_id, text));
            ContentBlock::ToolResult(Box::new(r))
        })
        .collect()
}
