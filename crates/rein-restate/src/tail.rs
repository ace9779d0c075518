//! History that is never lost (issue #37): a run's messages reach the session's state as they
//! are added, not only when the run ends.
//!
//! The session's checkpoint (`session`) is written when a run ends. Meanwhile the run's
//! [`TailBinding`] — the agent's session binding — sends every message added or rewritten to the
//! handler, which writes it under its own key (`tail/0`, `tail/1`, …, after a `tail` record
//! naming the run) with one `set` each: Restate applies a `set` as its journal entry is written,
//! so what a run wrote before it was killed stays. The entries name the message's position and
//! carry no message id (an id is random, and a replay must write the same bytes: Restate
//! compares a replayed `set` with the journaled one); the run's end saves the checkpoint and
//! clears the tail.
//!
//! A tail found at a run's start, or by `session`, is what a run that never finished left
//! ([`fold`]): its messages join the checkpoint (ids derived from the run and the position), the
//! pause it went past is dropped, and tool uses left without results are closed as a session
//! store's restore closes them.

use std::collections::HashSet;
use std::sync::Mutex;

use rein_agent::{Checkpoint, SessionBinding};
use rein_core::{
    ContentBlock, Error, Message, Role, id::MessageId, message::ToolResult, tool::BoxFuture,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::object::Op;

/// The key of the record naming the run whose tail follows.
pub(crate) const TAIL: &str = "tail";

/// The key of a tail's entry.
pub(crate) fn entry_key(n: u64) -> String {
    format!("tail/{n}")
}

/// The run that writes the tail (its Restate invocation id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TailHead {
    pub(crate) run: String,
}

/// One change to the history, at its position in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TailEntry {
    /// A message appended at `index`.
    Added { index: usize, message: Message },
    /// The message at `index` was rewritten (a tool use an approval edited, say).
    Updated { index: usize, message: Message },
}

/// The text of the result that closes a tool use a run left open (a session store's restore
/// writes the same).
pub(crate) const TOOL_INTERRUPTED: &str = "Tool was interrupted.";

/// The checkpoint with a tail folded in. `stored` is the checkpoint the tail's run started from.
/// An entry already in it (the run's end saved the checkpoint but was cut before clearing its
/// tail) is skipped. A tail means its run went past the pause it may have started from: the
/// pause is dropped (its answers were taken; asking again could run an approved tool twice).
pub(crate) fn fold(
    stored: Option<Checkpoint>,
    head: &TailHead,
    entries: Vec<TailEntry>,
) -> Checkpoint {
    let mut checkpoint = stored.unwrap_or_else(|| {
        Checkpoint::new(
            Vec::new(),
            Default::default(),
            serde_json::Value::Null,
            None,
        )
    });
    if entries.is_empty() {
        return checkpoint;
    }
    checkpoint.paused = None;
    for entry in entries {
        match entry {
            TailEntry::Added { index, message } if index >= checkpoint.messages.len() => {
                let id = message_id(&head.run, index);
                checkpoint.messages.push((id, message));
            }
            TailEntry::Added { .. } => {}
            TailEntry::Updated { index, message } => {
                if let Some(slot) = checkpoint.messages.get_mut(index) {
                    slot.1 = message;
                }
            }
        }
    }
    close_open_tool_uses(&mut checkpoint);
    checkpoint
}

/// A message's id derived from the run that added it and its position: the same each time
/// the tail is read.
fn message_id(run: &str, index: usize) -> MessageId {
    let name = format!("rein-restate tail {run} {index}");
    MessageId(uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        name.as_bytes(),
    ))
}

/// The last message's tool uses without results get an error result: the run that called them
/// ended before they finished, and a history must answer every tool use.
fn close_open_tool_uses(checkpoint: &mut Checkpoint) {
    let Some((id, last)) = checkpoint.messages.last() else {
        return;
    };
    if last.role != Role::Assistant {
        return;
    }
    let blocks: Vec<ContentBlock> = last
        .tool_uses()
        .map(|u| {
            ContentBlock::ToolResult(Box::new(ToolResult::error(
                &u.tool_use_id,
                TOOL_INTERRUPTED,
            )))
        })
        .collect();
    if blocks.is_empty() {
        return;
    }
    let id = message_id(&id.0.to_string(), usize::MAX);
    checkpoint.messages.push((
        id,
        Message {
            role: Role::User,
            content: blocks,
        },
    ));
}

/// The agent's session binding in a durable run: what it restores is the checkpoint the handler
/// read (with any tail folded in); every message added or rewritten goes to the handler, which
/// writes it to the tail.
pub(crate) struct TailBinding {
    tx: mpsc::UnboundedSender<Op>,
    restored: Mutex<Option<Checkpoint>>,
    /// The history as the tail knows it: message ids by position.
    ids: Mutex<Positions>,
}

#[derive(Default)]
struct Positions {
    order: Vec<MessageId>,
    known: HashSet<MessageId>,
}

impl Positions {
    fn push(&mut self, id: MessageId) -> Option<usize> {
        self.known.insert(id).then(|| {
            self.order.push(id);
            self.order.len() - 1
        })
    }
}

impl TailBinding {
    pub(crate) fn new(tx: mpsc::UnboundedSender<Op>, restored: Option<Checkpoint>) -> Self {
        Self {
            tx,
            restored: Mutex::new(restored),
            ids: Mutex::new(Positions::default()),
        }
    }

    fn send(&self, entry: TailEntry) {
        // A closed channel: the handler has returned and nothing more is saved.
        let _ = self.tx.send(Op::Tail(entry));
    }

    fn positions(&self) -> std::sync::MutexGuard<'_, Positions> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl SessionBinding for TailBinding {
    fn restore(&self) -> BoxFuture<'_, Result<Option<Checkpoint>, Error>> {
        let restored = self
            .restored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(checkpoint) = &restored {
            let mut positions = self.positions();
            for (id, _) in &checkpoint.messages {
                positions.push(*id);
            }
        }
        Box::pin(std::future::ready(Ok(restored)))
    }

    fn message_added<'a>(
        &'a self,
        id: MessageId,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let index = self.positions().push(id);
        if let Some(index) = index {
            self.send(TailEntry::Added {
                index,
                message: message.clone(),
            });
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn message_updated<'a>(
        &'a self,
        id: MessageId,
        message: &'a Message,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let index = self.positions().order.iter().position(|known| *known == id);
        if let Some(index) = index {
            self.send(TailEntry::Updated {
                index,
                message: message.clone(),
            });
        }
        Box::pin(std::future::ready(Ok(())))
    }

    /// Messages the agent added without telling (a restored tail's repair) join the tail; the
    /// rest of the checkpoint is saved when the run ends.
    fn sync<'a>(&'a self, checkpoint: &'a Checkpoint) -> BoxFuture<'a, Result<(), Error>> {
        for (id, message) in &checkpoint.messages {
            let index = self.positions().push(*id);
            if let Some(index) = index {
                self.send(TailEntry::Added {
                    index,
                    message: message.clone(),
                });
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::message::ToolUse;
    use serde_json::json;

    fn tool_call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
                id,
                "ledger",
                json!({}),
            )))],
        }
    }

    fn result(id: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                id, "done",
            )))],
        }
    }

    fn head() -> TailHead {
        TailHead {
            run: "inv-1".into(),
        }
    }

    #[test]
    fn a_tail_joins_the_history_its_open_tool_use_closed_and_folding_twice_changes_nothing() {
        let stored = Checkpoint::new(
            vec![(MessageId::new(), Message::user("steps 3"))],
            Default::default(),
            serde_json::Value::Null,
            None,
        );
        let entries = vec![
            TailEntry::Added {
                index: 1,
                message: tool_call("a"),
            },
            TailEntry::Added {
                index: 2,
                message: result("a"),
            },
            TailEntry::Added {
                index: 3,
                message: tool_call("b"),
            },
        ];
        let folded = fold(Some(stored), &head(), entries.clone());
        let texts: Vec<String> = folded
            .messages
            .iter()
            .map(|(_, m)| serde_json::to_string(m).unwrap())
            .collect();
        assert_eq!(texts.len(), 5, "{texts:?}");
        assert!(texts[2].contains("done"));
        assert!(texts[4].contains(TOOL_INTERRUPTED), "{}", texts[4]);
        // The ids are the same each time the tail is read.
        let again = fold(
            Some(Checkpoint::new(
                folded.messages[..1].to_vec(),
                Default::default(),
                serde_json::Value::Null,
                None,
            )),
            &head(),
            entries.clone(),
        );
        assert_eq!(again.messages, folded.messages);
        // Folded into a checkpoint that already holds it: nothing added twice.
        let twice = fold(Some(folded.clone()), &head(), entries);
        assert_eq!(twice.messages.len(), folded.messages.len());
    }
}
