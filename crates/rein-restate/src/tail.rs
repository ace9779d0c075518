//! History that is never lost (issue #37): a run's messages reach the session's state while it
//! runs, not only when it ends.
//!
//! The session's checkpoint (`session`) is written when a run ends. Meanwhile the run's
//! [`TailBinding`] — the agent's session binding — sends every message added or rewritten to the
//! handler, which keeps it in a [`TailWriter`] and writes what it holds as one chunk (`tail.0`,
//! `tail.1`, …, each naming the run) with one `set` before the journaled step that needs it on
//! record: before the run's first step (its input), before a tool call (its tool use, and what
//! led to it), and before the first step after a tool call or an inbox take (the tool's result,
//! the injected messages). Restate applies a `set` as its journal entry is written, so what a run
//! wrote before it was killed stays. A model call has no effect outside the run: model turns that
//! no tool call followed wait for the next such write or the run's end, which saves the
//! checkpoint and clears the tail (a kill before then loses only what a rerun of the model would
//! give again; the input stays, as it does when an agent is cancelled in process). The entries name the
//! message's position and carry no message id (an id is random, and a replay must write the same
//! bytes: Restate compares a replayed `set` with the journaled one).
//!
//! A tail found at a run's start, or by `session`, is what a run that never finished left
//! ([`fold`]): its messages join the checkpoint (ids derived from the run and the position), the
//! pause it went past is dropped, and tool uses left without results are closed as a session
//! store's restore closes them. An earlier release wrote a record `tail` naming the run, then one
//! key per entry (`tail/0`, `tail/1`, …): such a tail is read and cleared too.

use std::collections::HashSet;
use std::sync::Mutex;

use rein_agent::{Checkpoint, SessionBinding, journal::StepKind};
use rein_core::{
    ContentBlock, Error, Message, Role, id::MessageId, message::ToolResult, tool::BoxFuture,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::object::Op;

/// The key of an earlier release's record naming the run whose entries follow.
pub(crate) const LEGACY_HEAD: &str = "tail";

/// The key of an earlier release's tail entry.
pub(crate) fn legacy_entry_key(n: u64) -> String {
    format!("tail/{n}")
}

/// The key of a tail's chunk.
pub(crate) fn chunk_key(n: u64) -> String {
    format!("tail.{n}")
}

/// An earlier release's record naming the run whose entries follow (its Restate invocation id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LegacyHead {
    pub(crate) run: String,
}

/// What one `set` of the tail writes: the run's entries since its previous chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TailChunk {
    /// The run that wrote it (its Restate invocation id).
    pub(crate) run: String,
    pub(crate) entries: Vec<TailEntry>,
}

/// The keys a tail found in the state occupies (what clearing it clears).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TailKeys {
    /// Chunks `tail.0` to `tail.{chunks - 1}`.
    pub(crate) chunks: u64,
    /// An earlier release's tail: its head and this many entries.
    pub(crate) legacy_entries: Option<u64>,
}

impl TailKeys {
    /// The tail's keys among the state's `keys`: the chunks from `tail.0` on, and an earlier
    /// release's head and its entries from `tail/0` on.
    pub(crate) fn among(keys: &[String]) -> Self {
        let present = |key: String| keys.contains(&key);
        let run_of =
            |key: fn(u64) -> String| (0u64..).take_while(|n| present(key(*n))).count() as u64;
        Self {
            chunks: run_of(chunk_key),
            legacy_entries: present(LEGACY_HEAD.to_owned()).then(|| run_of(legacy_entry_key)),
        }
    }

    /// Every key of the tail.
    pub(crate) fn keys(self) -> impl Iterator<Item = String> {
        let legacy = self.legacy_entries.map(|entries| {
            (0..entries)
                .map(legacy_entry_key)
                .chain(std::iter::once(LEGACY_HEAD.to_owned()))
        });
        (0..self.chunks)
            .map(chunk_key)
            .chain(legacy.into_iter().flatten())
    }
}

/// A tail read from the state: the run that left it, its entries in order, and its keys.
pub(crate) struct FoundTail {
    pub(crate) run: String,
    pub(crate) entries: Vec<TailEntry>,
    pub(crate) keys: TailKeys,
}

/// A run's tail as it writes it: the entries it has not written yet, those of the chunk it
/// is filling, and how many chunks it began. A chunk is rewritten whole until it holds what a
/// tool call or a take added (a turn's input and tool use, then with the result): one key per
/// turn to clear at the end, and only the turn's opening entries are written twice.
#[derive(Default)]
pub(crate) struct TailWriter {
    pending: Vec<TailEntry>,
    /// The entries of the chunk being filled (written under the last key begun).
    open: Vec<TailEntry>,
    /// A tool ran, or the inbox was taken from, since the last chunk: what is pending records
    /// it (a result, injected messages) and is written before the next step.
    after_effect: bool,
    chunks: u64,
}

impl TailWriter {
    pub(crate) fn push(&mut self, entry: TailEntry) {
        self.pending.push(entry);
    }

    /// A tool call or an inbox take has happened: the messages it adds are written before the
    /// next step.
    pub(crate) fn effect_happened(&mut self) {
        self.after_effect = true;
    }

    /// The chunk to write before a journaled step of `kind`, if what is pending must be on
    /// record by then: before the run's first step (its input: a run killed during its first
    /// model call keeps the input, as an agent cancelled in process does), before a tool call,
    /// and before any step after a tool call or a take (which closes the chunk). Before a later
    /// model call that only the model's own turns led to, none: a kill during it loses nothing
    /// that was done outside the run.
    pub(crate) fn before_step(&mut self, kind: StepKind, run: &str) -> Option<(String, TailChunk)> {
        if self.after_effect {
            self.after_effect = false;
            self.write(run, true)
        } else if kind == StepKind::ToolCall || self.chunks == 0 {
            self.write(run, false)
        } else {
            None
        }
    }

    /// Everything pending, as the chunk's last write (the run ends without saving the
    /// checkpoint).
    pub(crate) fn take(&mut self, run: &str) -> Option<(String, TailChunk)> {
        self.write(run, true)
    }

    /// The open chunk with what is pending added, when anything is; `close`: the next write
    /// begins a new chunk.
    fn write(&mut self, run: &str, close: bool) -> Option<(String, TailChunk)> {
        let written = if self.pending.is_empty() {
            None
        } else {
            if self.open.is_empty() {
                self.chunks += 1;
            }
            self.open.append(&mut self.pending);
            let chunk = TailChunk {
                run: run.to_owned(),
                entries: if close {
                    std::mem::take(&mut self.open)
                } else {
                    self.open.clone()
                },
            };
            Some((chunk_key(self.chunks - 1), chunk))
        };
        if close {
            self.open.clear();
        }
        written
    }

    /// The keys written so far (what the run's end clears).
    pub(crate) fn keys(&self) -> TailKeys {
        TailKeys {
            chunks: self.chunks,
            legacy_entries: None,
        }
    }
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
pub(crate) fn fold(stored: Option<Checkpoint>, run: &str, entries: Vec<TailEntry>) -> Checkpoint {
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
                let id = message_id(run, index);
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

    const RUN: &str = "inv-1";

    fn added(index: usize, message: Message) -> TailEntry {
        TailEntry::Added { index, message }
    }

    /// The input is written before the first model call; a model turn waits for the tool call
    /// it leads to, which rewrites the chunk with it; the tool's result is added to that chunk
    /// before the next step, whichever it is, and closes it; the model's last turn is left to
    /// the run's end.
    #[test]
    fn a_chunk_is_written_at_the_start_before_a_tool_call_and_after_one_not_before_a_model_call() {
        let mut tail = TailWriter::default();
        tail.push(added(0, Message::user("steps 2")));
        // The input, before the first model call: the open chunk's first write.
        let (key, chunk) = tail.before_step(StepKind::ModelCall, RUN).unwrap();
        assert_eq!((key.as_str(), chunk.entries.len()), ("tail.0", 1));
        tail.push(added(1, tool_call("a")));
        let (key, chunk) = tail.before_step(StepKind::ToolCall, RUN).unwrap();
        assert_eq!(key, "tail.0");
        assert_eq!(chunk.run, RUN);
        assert_eq!(
            chunk.entries,
            vec![added(0, Message::user("steps 2")), added(1, tool_call("a"))]
        );
        tail.effect_happened();
        tail.push(added(2, result("a")));
        let (key, chunk) = tail.before_step(StepKind::ModelCall, RUN).unwrap();
        assert_eq!((key.as_str(), chunk.entries.len()), ("tail.0", 3));
        assert_eq!(chunk.entries[2], added(2, result("a")));
        // The next turn begins a chunk of its own.
        tail.push(added(3, tool_call("b")));
        let (key, chunk) = tail.before_step(StepKind::ToolCall, RUN).unwrap();
        assert_eq!((key.as_str(), chunk.entries.len()), ("tail.1", 1));
        tail.effect_happened();
        tail.push(added(4, result("b")));
        let (key, chunk) = tail.before_step(StepKind::ModelCall, RUN).unwrap();
        assert_eq!((key.as_str(), chunk.entries.len()), ("tail.1", 2));
        tail.push(added(5, Message::assistant("Finished 2 steps.")));
        assert_eq!(tail.before_step(StepKind::ModelCall, RUN), None);
        assert_eq!(
            tail.keys().keys().collect::<Vec<_>>(),
            vec!["tail.0", "tail.1"]
        );
        // The run ends unsaved: what is left is written.
        let (key, chunk) = tail.take(RUN).unwrap();
        assert_eq!((key.as_str(), chunk.entries.len()), ("tail.2", 1));
        assert_eq!(tail.take(RUN), None);
    }

    /// The tail's keys are found among the state's, an earlier release's too, and clearing
    /// them clears each (an earlier release's head and every entry of it).
    #[test]
    fn a_tail_is_found_among_the_state_keys_and_cleared_key_by_key() {
        let state = |keys: &[&str]| keys.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            TailKeys::among(&state(&["session", "runs", "last_run"])),
            TailKeys::default()
        );
        assert_eq!(
            TailKeys::among(&state(&["tail.1", "session", "tail.0", "tail.3"])).chunks,
            2
        );
        let keys = TailKeys::among(&state(&["tail/1", "tail", "tail.0", "tail/0", "tail10"]));
        assert_eq!(
            keys,
            TailKeys {
                chunks: 1,
                legacy_entries: Some(2),
            }
        );
        assert_eq!(
            keys.keys().collect::<Vec<_>>(),
            vec!["tail.0", "tail/0", "tail/1", "tail"]
        );
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
        let folded = fold(Some(stored), RUN, entries.clone());
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
            RUN,
            entries.clone(),
        );
        assert_eq!(again.messages, folded.messages);
        // Folded into a checkpoint that already holds it: nothing added twice.
        let twice = fold(Some(folded.clone()), RUN, entries);
        assert_eq!(twice.messages.len(), folded.messages.len());
    }
}
