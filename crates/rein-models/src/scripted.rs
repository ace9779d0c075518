//! [`ScriptedModel`]: a model that replays scripted responses, for tests, demos and benchmarks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream;
use rein_core::{
    ModelError, Role,
    error::ModelErrorKind,
    request::ModelRequest,
    stream::{BlockDelta, BlockStart, StopReason, StreamEvent, StreamMetrics, Usage},
};
use serde_json::Value;

use crate::model::{Model, ModelInfo, ModelStream};

/// One block of a scripted response.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    Reasoning {
        text: String,
        signature: Option<String>,
    },
}

/// A scripted response: blocks, stop reason, usage — or raw stream events for malformed-stream
/// tests.
///
/// ```
/// use rein_models::ScriptedResponse;
/// use serde_json::json;
/// let r = ScriptedResponse::new()
///     .reasoning("The user wants the time.", Some("sig"))
///     .text("Let me check.")
///     .tool_use("t1", "clock", json!({}));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedResponse {
    blocks: Vec<Block>,
    stop_reason: Option<StopReason>,
    usage: Usage,
    raw: Option<Vec<RawItem>>,
}

#[derive(Debug, Clone, PartialEq)]
enum RawItem {
    Event(StreamEvent),
    Error(ErrorSpec),
}

impl Default for ScriptedResponse {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedResponse {
    /// An empty response (usage 12 in / 4 out, stop reason derived from the blocks).
    pub fn new() -> Self {
        Self {
            blocks: Vec::new(),
            stop_reason: None,
            usage: Usage::new(12, 4),
            raw: None,
        }
    }

    /// Adds a text block.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.blocks.push(Block::Text(text.into()));
        self
    }

    /// Adds a tool use.
    pub fn tool_use(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        input: Value,
    ) -> Self {
        self.blocks.push(Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input: input.to_string(),
        });
        self
    }

    /// Adds a tool use whose input JSON is sent verbatim (it may not parse).
    pub fn tool_use_raw(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        raw_input: impl Into<String>,
    ) -> Self {
        self.blocks.push(Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input: raw_input.into(),
        });
        self
    }

    /// Adds a reasoning block.
    pub fn reasoning(mut self, text: impl Into<String>, signature: Option<&str>) -> Self {
        self.blocks.push(Block::Reasoning {
            text: text.into(),
            signature: signature.map(str::to_owned),
        });
        self
    }

    /// Sets the stop reason (default: `ToolUse` with tool uses, else `EndTurn`).
    pub fn stop_reason(mut self, reason: StopReason) -> Self {
        self.stop_reason = Some(reason);
        self
    }

    /// Sets the usage reported.
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// A response given as raw stream events (for malformed-stream tests).
    pub fn events(events: Vec<StreamEvent>) -> Self {
        Self {
            raw: Some(events.into_iter().map(RawItem::Event).collect()),
            ..Self::new()
        }
    }

    /// A raw response that breaks off with an error after `events` (a dropped stream).
    pub fn events_then_error(events: Vec<StreamEvent>, error: &ModelError) -> Self {
        let mut raw: Vec<RawItem> = events.into_iter().map(RawItem::Event).collect();
        raw.push(RawItem::Error(ErrorSpec::of(error)));
        Self {
            raw: Some(raw),
            ..Self::new()
        }
    }
}

/// The events of one scripted response, made one at a time as the call's stream is read: a
/// call holds the response's `Arc` and a cursor instead of a vector of every event made up
/// front (one allocation and ≈600 B fewer per call; each delta's text is still copied once,
/// when it is yielded).
struct Replay {
    response: Arc<ScriptedResponse>,
    /// Deltas of at most this many characters (0: one delta per block).
    chunk_chars: usize,
    next: Cursor,
}

/// Which event a [`Replay`] yields next.
#[derive(Clone, Copy)]
enum Cursor {
    MessageStart,
    /// Item `n` of a raw response.
    Raw(usize),
    BlockStart(usize),
    /// The delta of block `block`'s text (or tool input) starting at byte `from`.
    Delta {
        block: usize,
        from: usize,
    },
    Signature(usize),
    BlockStop(usize),
    MessageStop,
    Metadata,
    Done,
}

impl Replay {
    fn new(response: Arc<ScriptedResponse>, chunk_chars: usize) -> Self {
        let next = if response.raw.is_some() {
            Cursor::Raw(0)
        } else {
            Cursor::MessageStart
        };
        Self {
            response,
            chunk_chars,
            next,
        }
    }

    /// The cursor after block `block`'s last text delta.
    fn after_text(&self, block: usize) -> Cursor {
        match &self.response.blocks[block] {
            Block::Reasoning {
                signature: Some(_), ..
            } => Cursor::Signature(block),
            _ => Cursor::BlockStop(block),
        }
    }

    /// The cursor of what follows block `block`.
    fn after_block(&self, block: usize) -> Cursor {
        if block + 1 < self.response.blocks.len() {
            Cursor::BlockStart(block + 1)
        } else {
            Cursor::MessageStop
        }
    }
}

impl Iterator for Replay {
    type Item = Result<StreamEvent, ModelError>;

    fn next(&mut self) -> Option<Self::Item> {
        let response = &*self.response;
        let (event, next) = match self.next {
            Cursor::Done => return None,
            Cursor::Raw(n) => {
                let item = response.raw.as_deref().and_then(|raw| raw.get(n))?;
                let event = match item {
                    RawItem::Event(e) => Ok(e.clone()),
                    RawItem::Error(e) => Err(e.build()),
                };
                (event, Cursor::Raw(n + 1))
            }
            Cursor::MessageStart => {
                let event = StreamEvent::MessageStart {
                    role: Role::Assistant,
                };
                let next = if response.blocks.is_empty() {
                    Cursor::MessageStop
                } else {
                    Cursor::BlockStart(0)
                };
                (Ok(event), next)
            }
            Cursor::BlockStart(block) => {
                let start = match &response.blocks[block] {
                    Block::Text(_) => BlockStart::Text,
                    Block::ToolUse { id, name, .. } => BlockStart::ToolUse {
                        tool_use_id: id.clone(),
                        name: name.clone(),
                    },
                    Block::Reasoning { .. } => BlockStart::Reasoning,
                };
                let next = Cursor::Delta { block, from: 0 };
                (Ok(StreamEvent::BlockStart(start)), next)
            }
            Cursor::Delta { block, from } => {
                let b = &response.blocks[block];
                let text = match b {
                    Block::Text(t) => t,
                    Block::ToolUse { input, .. } => input,
                    Block::Reasoning { text, .. } => text,
                };
                let rest = &text[from..];
                let end = match self.chunk_chars {
                    0 => rest.len(),
                    n => rest.char_indices().nth(n).map_or(rest.len(), |(i, _)| i),
                };
                // The first piece is sent even when the text is empty, later ones only while
                // text is left.
                let piece = rest[..end].to_owned();
                let delta = match b {
                    Block::Text(_) => BlockDelta::Text(piece),
                    Block::ToolUse { .. } => BlockDelta::ToolInput(piece),
                    Block::Reasoning { .. } => BlockDelta::ReasoningText(piece),
                };
                let next = if end < rest.len() {
                    Cursor::Delta {
                        block,
                        from: from + end,
                    }
                } else {
                    self.after_text(block)
                };
                (Ok(StreamEvent::BlockDelta(delta)), next)
            }
            Cursor::Signature(block) => match &response.blocks[block] {
                Block::Reasoning {
                    signature: Some(s), ..
                } => {
                    let event = StreamEvent::BlockDelta(BlockDelta::ReasoningSignature(s.clone()));
                    (Ok(event), Cursor::BlockStop(block))
                }
                // (`after_text` points here only for a block with a signature.)
                _ => (Ok(StreamEvent::BlockStop), self.after_block(block)),
            },
            Cursor::BlockStop(block) => (Ok(StreamEvent::BlockStop), self.after_block(block)),
            Cursor::MessageStop => {
                let has_tool = response
                    .blocks
                    .iter()
                    .any(|b| matches!(b, Block::ToolUse { .. }));
                let stop_reason = response.stop_reason.unwrap_or(if has_tool {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                });
                (
                    Ok(StreamEvent::MessageStop { stop_reason }),
                    Cursor::Metadata,
                )
            }
            Cursor::Metadata => {
                let event = StreamEvent::Metadata {
                    usage: response.usage,
                    metrics: StreamMetrics::default(),
                };
                (Ok(event), Cursor::Done)
            }
        };
        self.next = next;
        Some(event)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct ErrorSpec {
    kind: ModelErrorKind,
    message: String,
    status: Option<u16>,
    retry_after: Option<Duration>,
    retryable_transport: bool,
}

impl ErrorSpec {
    fn of(e: &ModelError) -> Self {
        Self {
            kind: e.kind(),
            message: e.message().to_owned(),
            status: e.status(),
            retry_after: e.retry_after(),
            retryable_transport: matches!(
                e.kind(),
                ModelErrorKind::Transport | ModelErrorKind::Timeout
            ) && e.is_retryable(),
        }
    }

    fn build(&self) -> ModelError {
        let mut e = ModelError::new(self.kind, self.message.clone());
        if let Some(s) = self.status {
            e = e.with_status(s);
        }
        if let Some(r) = self.retry_after {
            e = e.with_retry_after(r);
        }
        if self.retryable_transport {
            e = e.before_first_byte();
        }
        e
    }
}

#[derive(Debug, Clone)]
enum Entry {
    Response(Arc<ScriptedResponse>),
    Error(ErrorSpec),
}

#[derive(Debug, Default)]
struct Script {
    queue: VecDeque<Entry>,
    all: Vec<Entry>,
}

#[derive(Debug)]
struct Inner {
    script: Mutex<Script>,
    requests: Mutex<Vec<ModelRequest>>,
    record: bool,
    cycle: bool,
    chunk_chars: usize,
    chunk_delay: Option<Duration>,
    call_delay: Option<Duration>,
    model_id: String,
}

/// A model that replays a script of responses and errors, one per call, and records every
/// request it receives. Cloning shares the script and the record.
///
/// ```
/// use rein_models::{Model, ScriptedModel};
/// use serde_json::json;
/// let model = ScriptedModel::builder()
///     .tool_use("t1", "clock", json!({}))
///     .text("It is noon.")
///     .build();
/// assert_eq!(model.remaining(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
}

/// Builds a [`ScriptedModel`].
#[derive(Debug)]
pub struct ScriptedModelBuilder {
    entries: Vec<Entry>,
    record: bool,
    cycle: bool,
    chunk_chars: usize,
    chunk_delay: Option<Duration>,
    call_delay: Option<Duration>,
    model_id: String,
}

impl ScriptedModelBuilder {
    /// Scripts a text answer.
    pub fn text(self, text: impl Into<String>) -> Self {
        self.response(ScriptedResponse::new().text(text))
    }

    /// Scripts a response holding one tool use.
    pub fn tool_use(self, id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        self.response(ScriptedResponse::new().tool_use(id, name, input))
    }

    /// Scripts a response.
    pub fn response(mut self, response: ScriptedResponse) -> Self {
        self.entries.push(Entry::Response(Arc::new(response)));
        self
    }

    /// Scripts an error for one call.
    pub fn error(mut self, error: ModelError) -> Self {
        self.entries.push(Entry::Error(ErrorSpec::of(&error)));
        self
    }

    /// Scripts a throttling error.
    pub fn throttled(self) -> Self {
        self.error(ModelError::throttled("scripted throttling").with_status(429))
    }

    /// Scripts a context-window overflow.
    pub fn context_overflow(self) -> Self {
        self.error(ModelError::context_window_overflow(
            "scripted context window overflow",
        ))
    }

    /// Scripts a server error.
    pub fn server_error(self) -> Self {
        self.error(ModelError::server("scripted server error").with_status(500))
    }

    /// Splits text, tool input and reasoning into deltas of at most `n` characters
    /// (default 0: one delta per block).
    pub fn chunk_chars(mut self, n: usize) -> Self {
        self.chunk_chars = n;
        self
    }

    /// Waits this long before each stream event after the first. A zero delay waits for
    /// nothing (tokio's `sleep(0)` would wait for the timer's next tick, ≈ 1 ms).
    pub fn chunk_delay(mut self, d: Duration) -> Self {
        self.chunk_delay = (!d.is_zero()).then_some(d);
        self
    }

    /// Waits this long before the first event of each call. The call's response is taken from
    /// the script after the wait: a call dropped while it waits (a timeout) consumes none. A
    /// zero delay waits for nothing: the call answers when first polled.
    pub fn call_delay(mut self, d: Duration) -> Self {
        self.call_delay = (!d.is_zero()).then_some(d);
        self
    }

    /// Starts the script over when it runs out, instead of failing (for benchmarks).
    pub fn cycle(mut self) -> Self {
        self.cycle = true;
        self
    }

    /// Whether to record requests (default true; benchmarks turn it off).
    pub fn record_requests(mut self, record: bool) -> Self {
        self.record = record;
        self
    }

    /// The model id reported (default `scripted`).
    pub fn model_id(mut self, id: impl Into<String>) -> Self {
        self.model_id = id.into();
        self
    }

    /// Builds the model.
    pub fn build(self) -> ScriptedModel {
        ScriptedModel {
            inner: Arc::new(Inner {
                script: Mutex::new(Script {
                    queue: self.entries.iter().cloned().collect(),
                    all: if self.cycle { self.entries } else { Vec::new() },
                }),
                requests: Mutex::new(Vec::new()),
                record: self.record,
                cycle: self.cycle,
                chunk_chars: self.chunk_chars,
                chunk_delay: self.chunk_delay,
                call_delay: self.call_delay,
                model_id: self.model_id,
            }),
        }
    }
}

impl ScriptedModel {
    /// A builder.
    pub fn builder() -> ScriptedModelBuilder {
        ScriptedModelBuilder {
            entries: Vec::new(),
            record: true,
            cycle: false,
            chunk_chars: 0,
            chunk_delay: None,
            call_delay: None,
            model_id: "scripted".into(),
        }
    }

    /// A model that answers every call with `text` (cycling), recording nothing.
    pub fn repeating_text(text: impl Into<String>) -> Self {
        Self::builder()
            .text(text)
            .cycle()
            .record_requests(false)
            .build()
    }

    /// Every request received so far (recorded when the call is made).
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many scripted entries are left.
    pub fn remaining(&self) -> usize {
        self.inner
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .queue
            .len()
    }

    /// Appends responses to the script.
    pub fn push_response(&self, response: ScriptedResponse) {
        self.inner
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .queue
            .push_back(Entry::Response(Arc::new(response)));
    }

    /// The next entry of the script, as the call's stream or its error.
    fn respond(&self) -> Result<ModelStream, ModelError> {
        let entry = self.next_entry().ok_or_else(|| {
            ModelError::new(
                ModelErrorKind::ScriptExhausted,
                "the scripted model has no more responses",
            )
        })?;
        let response = match entry {
            Entry::Error(e) => return Err(e.build()),
            Entry::Response(r) => r,
        };
        let events = Replay::new(response, self.inner.chunk_chars);
        match self.inner.chunk_delay {
            None => Ok(Box::pin(stream::iter(events))),
            Some(delay) => {
                let state = (events, true);
                Ok(Box::pin(stream::unfold(
                    state,
                    move |(mut it, first)| async move {
                        let next = it.next()?;
                        if !first {
                            tokio::time::sleep(delay).await;
                        }
                        Some((next, (it, false)))
                    },
                )))
            }
        }
    }

    fn next_entry(&self) -> Option<Entry> {
        let mut s = self
            .inner
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let s = &mut *s;
        if s.queue.is_empty() && self.inner.cycle {
            // Refilled in place: the queue keeps its room, so a cycling script allocates nothing.
            s.queue.extend(s.all.iter().cloned());
        }
        s.queue.pop_front()
    }
}

impl Model for ScriptedModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("scripted", self.inner.model_id.clone())
    }

    // A plain fn returning the call's future: the request is recorded (or dropped) at once
    // (docs/performance.md, layout rule 3). The entry is still taken after the delay: a call
    // dropped while it waits (a timeout) consumes nothing.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> impl Future<Output = Result<ModelStream, ModelError>> + Send {
        if self.inner.record {
            self.inner
                .requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request);
        }
        async move {
            if let Some(d) = self.inner.call_delay {
                tokio::time::sleep(d).await;
            }
            self.respond()
        }
    }
}

/// A [`ConversationModel`]'s responses by model turn, each in an `Arc`: a call's stream replays
/// it from there.
type Turns = Arc<[Arc<ScriptedResponse>]>;

/// A scripted model that keeps nothing between calls: it answers from the conversation alone.
/// The n-th model turn after the user's latest text message (counted by the assistant messages
/// since) gets the n-th response of the script; a turn past the script is an error
/// (`ScriptExhausted`), never a response from the top again.
///
/// [`ScriptedModel`] keeps its place in the script in itself: built in a durable worker's
/// factory, which runs for every invocation, it starts over each time — the model asks for
/// finished steps and the same approval again, forever. This model, built anew or replayed,
/// gives the same history the same answer (docs/durable-execution.md: models and tools keep no
/// per-process state across invocations). An injected user message starts the count again.
///
/// One model can serve many conversations at once (a server's threads, a test's sessions) with
/// a script per kind of request: [`when`](Self::when) picks the script by what the user's latest
/// message says, so a restarted server or another worker answers each thread where it stands.
///
/// ```
/// use rein_models::{ConversationModel, ScriptedResponse};
/// use serde_json::json;
/// let model = ConversationModel::new([ScriptedResponse::new().text("I can look up or refund orders.")])
///     .when("refund", [
///         ScriptedResponse::new().tool_use("t1", "refund", json!({"order": 17, "amount": 250})),
///         ScriptedResponse::new().text("Refunded."),
///     ])
///     .when("status", [ScriptedResponse::new().text("Order 17 shipped yesterday.")]);
/// # let _ = model;
/// ```
#[derive(Debug, Clone)]
pub struct ConversationModel {
    turns: Turns,
    /// Scripts for user messages containing a phrase (lower-cased), first match wins.
    rules: Arc<[(String, Turns)]>,
}

impl ConversationModel {
    /// The responses to the first, second... model turn after the user's message (any message
    /// no [`when`](Self::when) rule matches).
    pub fn new(turns: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        Self {
            turns: turns.into_iter().map(Arc::new).collect(),
            rules: Arc::new([]),
        }
    }

    /// Answers with `turns` instead when the user's latest message contains `phrase` (ignoring
    /// case). Rules are tried in the order they were added; the first that matches wins.
    #[must_use]
    pub fn when(
        mut self,
        phrase: impl Into<String>,
        turns: impl IntoIterator<Item = ScriptedResponse>,
    ) -> Self {
        let mut rules = self.rules.to_vec();
        let turns = turns.into_iter().map(Arc::new).collect();
        rules.push((phrase.into().to_lowercase(), turns));
        self.rules = rules.into();
        self
    }

    /// The script for `messages` and which of its turns they ask for: the assistant messages
    /// after the user's latest message with text (a tool result is a user message too, but not
    /// the user's).
    fn turn(&self, messages: &[rein_core::Message]) -> (&[Arc<ScriptedResponse>], usize) {
        let is_users = |m: &rein_core::Message| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, rein_core::ContentBlock::Text(_)))
        };
        let at = messages.iter().rposition(is_users);
        let start = at.map_or(0, |i| i + 1);
        let turn = messages[start..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let said = at.map(|i| messages[i].text().to_lowercase());
        let script = said
            .and_then(|said| {
                self.rules
                    .iter()
                    .find(|(phrase, _)| said.contains(phrase.as_str()))
            })
            .map_or(&*self.turns, |(_, turns)| &**turns);
        (script, turn)
    }
}

impl Model for ConversationModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("scripted", "conversation")
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let (script, turn) = self.turn(&request.messages);
        let response = script.get(turn).ok_or_else(|| {
            ModelError::new(
                ModelErrorKind::ScriptExhausted,
                format!(
                    "the conversation model's script for this message has {} responses; model \
                     turn {} after the user's message has none",
                    script.len(),
                    turn + 1
                ),
            )
        })?;
        Ok(Box::pin(stream::iter(Replay::new(response.clone(), 0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use rein_core::stream::StreamAssembler;
    use serde_json::json;

    async fn run(model: &ScriptedModel) -> Result<rein_core::stream::ModelResponse, ModelError> {
        let mut s = model.stream(ModelRequest::default()).await?;
        let mut a = StreamAssembler::new();
        while let Some(ev) = s.next().await {
            a.push(ev?).map_err(ModelError::from)?;
        }
        a.finish().map_err(ModelError::from)
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn replays_in_order_then_errors() {
        let m = ScriptedModel::builder()
            .response(
                ScriptedResponse::new()
                    .reasoning("hmm", Some("s"))
                    .text("a")
                    .tool_use("t1", "x", json!({"k": 1})),
            )
            .throttled()
            .text("done")
            .chunk_chars(1)
            .chunk_delay(Duration::from_millis(5))
            .build();
        let r = run(&m).await.unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.message.tool_uses().next().unwrap().input, json!({"k": 1}));
        let e = run(&m).await.unwrap_err();
        assert!(e.is_throttled() && e.is_retryable());
        assert_eq!(run(&m).await.unwrap().message.text(), "done");
        let e = run(&m).await.unwrap_err();
        assert_eq!(e.kind(), ModelErrorKind::ScriptExhausted);
        assert_eq!(m.requests().len(), 4);
    }

    /// Issue #37: built anew for every call (a durable factory), it goes on where the
    /// conversation stands, and a turn past the script fails instead of starting over.
    #[tokio::test(flavor = "current_thread")]
    async fn a_conversation_model_answers_from_the_history_alone() {
        use rein_core::{ContentBlock, Message, ToolResult, ToolUse};
        let ask = |messages: Vec<Message>| async move {
            let model = ConversationModel::new([
                ScriptedResponse::new().tool_use("t1", "delete", json!({})),
                ScriptedResponse::new().text("Deleted."),
            ]);
            let mut s = model.stream(ModelRequest::new(messages)).await?;
            let mut a = StreamAssembler::new();
            while let Some(ev) = s.next().await {
                a.push(ev?).map_err(ModelError::from)?;
            }
            a.finish().map_err(ModelError::from)
        };
        let user = Message::user("delete it");
        let first = ask(vec![user.clone()]).await.unwrap();
        assert!(first.message.tool_uses().any(|u| u.tool_use_id == "t1"));
        let tool_use = Message::new(
            Role::Assistant,
            vec![ContentBlock::from(ToolUse::new("t1", "delete", json!({})))],
        );
        let result = Message::new(
            Role::User,
            vec![ContentBlock::from(ToolResult::success("t1", "deleted"))],
        );
        let second = ask(vec![user.clone(), tool_use.clone(), result.clone()])
            .await
            .unwrap();
        assert_eq!(second.message.text(), "Deleted.");
        let done = Message::assistant("Deleted.");
        let e = ask(vec![user, tool_use, result, done]).await.unwrap_err();
        assert_eq!(e.kind(), ModelErrorKind::ScriptExhausted);
        // A new user message starts a new count.
        let again = ask(vec![Message::user("once more")]).await.unwrap();
        assert!(again.message.tool_uses().any(|u| u.tool_use_id == "t1"));
    }

    /// Two threads of one server, interleaved, each answered where it stands, by the script
    /// its user's words pick — as a model built after a restart would answer them.
    #[tokio::test(flavor = "current_thread")]
    async fn a_conversation_model_picks_each_threads_script_by_what_its_user_said() {
        use rein_core::{ContentBlock, Message, ToolResult};
        let model = ConversationModel::new([ScriptedResponse::new().text("How can I help?")])
            .when(
                "Refund",
                [
                    ScriptedResponse::new().tool_use("r1", "refund", json!({"amount": 250})),
                    ScriptedResponse::new().text("Refunded."),
                ],
            )
            .when("status", [ScriptedResponse::new().text("Shipped.")]);
        let ask = |messages: Vec<Message>| {
            let model = model.clone();
            async move {
                let mut s = model.stream(ModelRequest::new(messages)).await?;
                let mut a = StreamAssembler::new();
                while let Some(ev) = s.next().await {
                    a.push(ev?).map_err(ModelError::from)?;
                }
                a.finish().map_err(ModelError::from)
            }
        };
        let refund = vec![Message::user("please REFUND order 17")];
        let status = vec![Message::user("what is the status of 18?")];
        let first = ask(refund.clone()).await.unwrap();
        assert!(first.message.tool_uses().any(|u| u.tool_use_id == "r1"));
        assert_eq!(ask(status).await.unwrap().message.text(), "Shipped.");
        let mut refund = refund;
        refund.push(first.message);
        refund.push(Message::new(
            Role::User,
            vec![ContentBlock::from(ToolResult::success("r1", "ok"))],
        ));
        assert_eq!(ask(refund).await.unwrap().message.text(), "Refunded.");
        let other = ask(vec![Message::user("hello")]).await.unwrap();
        assert_eq!(other.message.text(), "How can I help?");
        // The status script has one turn: a second one is an error, not the default script.
        let e = ask(vec![
            Message::user("status?"),
            Message::assistant("Shipped."),
        ])
        .await
        .unwrap_err();
        assert_eq!(e.kind(), ModelErrorKind::ScriptExhausted);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn cycle_restarts() {
        let m = ScriptedModel::repeating_text("x");
        for _ in 0..3 {
            assert_eq!(run(&m).await.unwrap().message.text(), "x");
        }
        assert!(m.requests().is_empty());
    }

    #[test]
    fn chunks_split_by_characters() {
        let all = |s: &str, n| {
            Replay::new(Arc::new(ScriptedResponse::new().text(s)), n)
                .filter_map(|e| match e {
                    Ok(StreamEvent::BlockDelta(BlockDelta::Text(t))) => Some(t),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(all("héllo", 0), ["héllo"]);
        assert_eq!(all("héllo", 5), ["héllo"]);
        assert_eq!(all("héllo", 2), ["hé", "ll", "o"]);
        assert_eq!(all("", 3), [""]);
    }

    /// Every kind of block, in order, each closed; the stop reason derived from the blocks
    /// unless set; usage last. A raw response is replayed as given, its error included.
    #[test]
    fn a_response_replays_as_its_events() {
        use StreamEvent as E;
        let response = ScriptedResponse::new()
            .reasoning("hm", Some("sig"))
            .reasoning("", None)
            .text("abc")
            .tool_use("t1", "x", json!({}));
        let events: Vec<_> = Replay::new(Arc::new(response), 2)
            .map(Result::unwrap)
            .collect();
        let text = |t: &str| E::BlockDelta(BlockDelta::Text(t.into()));
        assert_eq!(
            events,
            [
                E::MessageStart {
                    role: Role::Assistant
                },
                E::BlockStart(BlockStart::Reasoning),
                E::BlockDelta(BlockDelta::ReasoningText("hm".into())),
                E::BlockDelta(BlockDelta::ReasoningSignature("sig".into())),
                E::BlockStop,
                E::BlockStart(BlockStart::Reasoning),
                E::BlockDelta(BlockDelta::ReasoningText(String::new())),
                E::BlockStop,
                E::BlockStart(BlockStart::Text),
                text("ab"),
                text("c"),
                E::BlockStop,
                E::BlockStart(BlockStart::ToolUse {
                    tool_use_id: "t1".into(),
                    name: "x".into()
                }),
                E::BlockDelta(BlockDelta::ToolInput("{}".into())),
                E::BlockStop,
                E::MessageStop {
                    stop_reason: StopReason::ToolUse
                },
                E::Metadata {
                    usage: Usage::new(12, 4),
                    metrics: StreamMetrics::default()
                },
            ]
        );
        let empty = ScriptedResponse::new().stop_reason(StopReason::MaxTokens);
        let events: Vec<_> = Replay::new(Arc::new(empty), 0)
            .map(Result::unwrap)
            .collect();
        assert_eq!(events.len(), 3);
        assert_eq!(
            events[1],
            E::MessageStop {
                stop_reason: StopReason::MaxTokens
            }
        );
        let raw = ScriptedResponse::events_then_error(
            vec![E::BlockStop],
            &ModelError::server("cut").with_status(502),
        );
        let mut replay = Replay::new(Arc::new(raw), 0);
        assert_eq!(replay.next().map(Result::unwrap), Some(E::BlockStop));
        let error = replay.next().and_then(Result::err).map(|e| e.status());
        assert_eq!(error, Some(Some(502)));
        assert!(replay.next().is_none());
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_call_dropped_during_its_delay_consumes_no_response() {
        let m = ScriptedModel::builder()
            .text("first")
            .text("second")
            .call_delay(Duration::from_millis(100))
            .build();
        let call = m.stream(ModelRequest::default());
        assert!(
            tokio::time::timeout(Duration::from_millis(10), call)
                .await
                .is_err()
        );
        // Recorded when made, answered by the entry it would have had.
        assert_eq!(m.requests().len(), 1);
        assert_eq!(run(&m).await.unwrap().message.text(), "first");
        assert_eq!(run(&m).await.unwrap().message.text(), "second");
    }

    /// A zero delay is no delay: tokio's `sleep(0)` waits for the timer's next tick (≈ 1 ms
    /// each), which made every scripted step of the durable bench's worker ≈ 1 ms slower.
    #[tokio::test(flavor = "current_thread")]
    async fn a_zero_delay_answers_when_first_polled() {
        use futures_util::FutureExt as _;
        let m = ScriptedModel::builder()
            .chunk_chars(1)
            .text("ab")
            .call_delay(Duration::ZERO)
            .chunk_delay(Duration::ZERO)
            .build();
        let Some(Ok(mut stream)) = m.stream(ModelRequest::default()).now_or_never() else {
            panic!("the call waited");
        };
        let mut events = 0;
        while let Some(event) = stream.next().now_or_never() {
            match event {
                Some(event) => {
                    assert!(event.is_ok());
                    events += 1;
                }
                None => break,
            }
        }
        assert!(events >= 4, "every event at once, got {events}");
    }
}
