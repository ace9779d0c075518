//! The message model: Bedrock-Converse-shaped messages and content blocks (SPEC §1).

use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::Error;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The caller, tool results and injected guidance.
    User,
    /// The model.
    Assistant,
}

/// One conversation message: `{"role": ..., "content": [block, ...]}`.
///
/// ```
/// use rein_core::{Message, Role};
/// let m = Message::user("hello");
/// assert_eq!(m.role, Role::User);
/// assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"role":"user","content":[{"text":"hello"}]}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author of the message.
    pub role: Role,
    /// Content blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// The fingerprint an approval of this message is bound to: uuid5 over its sorted-key
    /// JSON.
    pub fn fingerprint(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or_default();
        crate::id::fingerprint_of(&crate::id::canonical_json(&value))
    }

    /// The fingerprint an approval of these messages (an input) is bound to: uuid5 over
    /// them as sorted-key JSON.
    pub fn fingerprint_all(messages: &[Message]) -> String {
        crate::id::fingerprint_of(&Self::canonical_list(messages))
    }

    /// The sorted-key JSON of messages, for fingerprints of what a human approves.
    pub(crate) fn canonical_list(messages: &[Message]) -> String {
        let value = serde_json::to_value(messages).unwrap_or_default();
        crate::id::canonical_json(&value)
    }

    /// A message with the given role and blocks.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self { role, content }
    }

    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![ContentBlock::Text(text.into())])
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![ContentBlock::Text(text.into())])
    }

    /// Parses one message from its JSON form; unknown block kinds are a typed error.
    pub fn from_json(json: &str) -> Result<Self, Error> {
        serde_json::from_str(json).map_err(|e| Error::InvalidMessage(e.to_string()))
    }

    /// Parses a message from a JSON value; unknown block kinds are a typed error.
    pub fn from_value(value: Value) -> Result<Self, Error> {
        serde_json::from_value(value).map_err(|e| Error::InvalidMessage(e.to_string()))
    }

    /// The concatenation of the message's text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text(t) = block {
                out.push_str(t);
            }
        }
        out
    }

    /// The tool uses of this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUse> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(u) => Some(u.as_ref()),
            _ => None,
        })
    }

    /// The tool results of this message, in order.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResult> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.as_ref()),
            _ => None,
        })
    }

    /// Whether the message holds at least one tool use.
    pub fn has_tool_use(&self) -> bool {
        self.tool_uses().next().is_some()
    }
}

impl From<&str> for Message {
    /// A user text message.
    fn from(text: &str) -> Self {
        Self::user(text)
    }
}

impl From<String> for Message {
    /// A user text message.
    fn from(text: String) -> Self {
        Self::user(text)
    }
}

/// One block of message content. Serialized externally tagged, as Converse does
/// (`{"text": "..."}`, `{"toolUse": {...}}`, ...).
///
/// Every kind but text is boxed: a block is as small as a `String`, so a conversation of short
/// text messages keeps no room for the largest kind in each (the JSON is the same). Build one
/// from its content with `From`:
///
/// ```
/// use rein_core::{ContentBlock, ToolUse};
/// use serde_json::json;
/// let block = ContentBlock::from(ToolUse::new("t1", "search", json!({"q": "rust"})));
/// if let ContentBlock::ToolUse(tu) = &block {
///     assert_eq!(tu.name, "search");
/// }
/// assert_eq!(std::mem::size_of::<ContentBlock>(), std::mem::size_of::<String>());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum ContentBlock {
    /// Plain text.
    Text(String),
    /// A request from the model to run a tool.
    ToolUse(Box<ToolUse>),
    /// The result of a tool run.
    ToolResult(Box<ToolResult>),
    /// Model reasoning ("thinking"), kept so it can be sent back to providers that require it.
    ReasoningContent(Box<ReasoningContent>),
    /// An image.
    Image(Box<ImageBlock>),
    /// A document (PDF, text, ...).
    Document(Box<DocumentBlock>),
    /// A human's answer to an interrupt, as stored by a resume.
    InterruptResponse(Box<InterruptResponse>),
    /// A summary that stands for older messages (SPEC §6.1): providers send its text as
    /// ordinary text; the messages it stands for stay in the session store.
    Summary(Box<Summary>),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }
}

/// `From` each boxed kind's content.
macro_rules! content_block_from {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for ContentBlock {
            fn from(content: $ty) -> Self {
                Self::$variant(Box::new(content))
            }
        }
    )*};
}

content_block_from!(
    ToolUse(ToolUse),
    ToolResult(ToolResult),
    ReasoningContent(ReasoningContent),
    Image(ImageBlock),
    Document(DocumentBlock),
    InterruptResponse(InterruptResponse),
    Summary(Summary),
);

/// A summary of older messages, written by a model for a conversation manager (SPEC §6.1):
/// `{"text", "firstMessageId", "lastMessageId", "messageCount"}`. The summarized messages
/// are no longer sent, but stay in the session store; the ids name them there.
///
/// ```
/// use rein_core::{ContentBlock, id::MessageId, message::Summary};
/// let (first, last) = (MessageId::new(), MessageId::new());
/// let block = ContentBlock::from(Summary::new("The user asked for X; Y was found.", first, last, 12));
/// let json = serde_json::to_value(&block).unwrap();
/// assert_eq!(json["summary"]["messageCount"], 12);
/// assert_eq!(serde_json::from_value::<ContentBlock>(json).unwrap(), block);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Summary {
    /// The summary, sent to the model as text.
    pub text: String,
    /// The first message it stands for.
    pub first_message_id: crate::id::MessageId,
    /// The last message it stands for.
    pub last_message_id: crate::id::MessageId,
    /// How many messages it stands for (`first_message_id` to `last_message_id`).
    pub message_count: u64,
}

impl Summary {
    /// A summary of the `message_count` messages from `first_message_id` to
    /// `last_message_id`.
    pub fn new(
        text: impl Into<String>,
        first_message_id: crate::id::MessageId,
        last_message_id: crate::id::MessageId,
        message_count: u64,
    ) -> Self {
        Self {
            text: text.into(),
            first_message_id,
            last_message_id,
            message_count,
        }
    }

    /// The text a provider sends for it: the summary, introduced as one.
    pub fn as_prompt_text(&self) -> String {
        format!("Summary of the earlier conversation:\n{}", self.text)
    }
}

/// A tool use: `{"toolUseId", "name", "input", "providerState"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolUse {
    /// Provider-assigned id that the tool result refers to.
    pub tool_use_id: String,
    /// Tool name.
    pub name: String,
    /// Tool input (a JSON object for well-behaved models).
    pub input: Value,
    /// What the provider attached to the call for its next request (Gemini's thought
    /// signature); not part of the call's fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<Box<ProviderState>>,
}

impl ToolUse {
    /// A tool use.
    pub fn new(tool_use_id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            name: name.into(),
            input,
            provider_state: None,
        }
    }

    /// The fingerprint an approval of this call is bound to: uuid5 over the tool name and the
    /// input as sorted-key JSON, so key order does not matter and any other change does.
    ///
    /// ```
    /// use rein_core::ToolUse;
    /// use serde_json::json;
    /// let a = ToolUse::new("t1", "rm", json!({"path": "/a", "force": true}));
    /// let b = ToolUse::new("t2", "rm", json!({"force": true, "path": "/a"}));
    /// assert_eq!(a.fingerprint(), b.fingerprint());
    /// ```
    pub fn fingerprint(&self) -> String {
        crate::id::tool_call_fingerprint(&self.name, &self.input)
    }
}

/// Whether a tool ran successfully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolResultStatus {
    /// The tool succeeded.
    Success,
    /// The tool failed (or was cancelled, denied, unknown ...); the content says why.
    Error,
}

/// A tool result: `{"toolUseId", "status", "content": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The tool use this answers.
    pub tool_use_id: String,
    /// Success or error.
    pub status: ToolResultStatus,
    /// Result content.
    pub content: Vec<ToolResultContent>,
}

impl ToolResult {
    /// The fingerprint an approval of this result of `tool_use` is bound to: uuid5 over the
    /// call's fingerprint, the status and the content as sorted-key JSON.
    pub fn fingerprint(&self, tool_use: &ToolUse) -> String {
        let content = serde_json::to_value(&self.content).unwrap_or_default();
        let mut data = tool_use.fingerprint();
        data.push('\n');
        data.push_str(match self.status {
            ToolResultStatus::Success => "success",
            ToolResultStatus::Error => "error",
        });
        data.push('\n');
        data.push_str(&crate::id::canonical_json(&content));
        crate::id::fingerprint_of(&data)
    }

    /// A successful result with one text item.
    pub fn success(tool_use_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            status: ToolResultStatus::Success,
            content: vec![ToolResultContent::Text(text.into())],
        }
    }

    /// An error result with one text item.
    pub fn error(tool_use_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            status: ToolResultStatus::Error,
            content: vec![ToolResultContent::Text(text.into())],
        }
    }

    /// Whether the status is `error`.
    pub fn is_error(&self) -> bool {
        self.status == ToolResultStatus::Error
    }

    /// The concatenation of the result's text items.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.content {
            if let ToolResultContent::Text(t) = c {
                out.push_str(t);
            }
        }
        out
    }
}

/// One item of tool-result content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum ToolResultContent {
    /// Text.
    Text(String),
    /// Structured JSON.
    Json(Value),
    /// An image.
    Image(ImageBlock),
    /// A document.
    Document(DocumentBlock),
}

/// Model reasoning: `{"reasoningText": {"text", "signature"?}}` or `{"redactedContent": base64}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum ReasoningContent {
    /// Readable reasoning text, with the provider's signature when it gives one.
    ReasoningText(ReasoningText),
    /// Encrypted reasoning the provider returns opaque.
    RedactedContent(Bytes),
}

/// Reasoning text and its signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReasoningText {
    /// The reasoning.
    pub text: String,
    /// The provider's signature over it (sent back verbatim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// What the provider attached to the reasoning for its next request (which server wrote
    /// it, an encrypted reasoning item).
    #[serde(
        default,
        rename = "providerState",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_state: Option<Box<ProviderState>>,
}

impl ReasoningText {
    /// Reasoning text, with the provider's signature when it gave one.
    pub fn new(text: impl Into<String>, signature: Option<String>) -> Self {
        Self {
            text: text.into(),
            signature,
            provider_state: None,
        }
    }
}

/// Data a provider attached to a block that only it can read — a thought signature, an
/// encrypted reasoning item, the name of the field it sent reasoning in — kept in history as
/// it came, and sent back only to the provider that wrote it: a request to any other provider
/// (a fallback model, a session moved to another server) leaves it out.
///
/// `source` is the provider's name and the server it calls (`openai@api.deepseek.com:443`,
/// see [`ProviderState::source_of`]); `data` is the provider's own JSON, opaque to Rein.
///
/// ```
/// use rein_core::message::ProviderState;
/// use serde_json::json;
/// let source = ProviderState::source_of("openai", Some(("api.deepseek.com", 443)));
/// let state = ProviderState::new(&source, json!({"reasoningField": "reasoning_content"}));
/// assert!(state.data_for(&source).is_some());
/// assert!(state.data_for("openai@api.openai.com:443").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProviderState {
    /// Who wrote it and alone may read it back.
    pub source: String,
    /// What it wrote.
    pub data: Value,
}

impl ProviderState {
    /// State written by `source`.
    pub fn new(source: impl Into<String>, data: Value) -> Self {
        Self {
            source: source.into(),
            data,
        }
    }

    /// The source name of a provider calling `server` (host and port), or of one that calls
    /// none: `provider@host:port`, or `provider`.
    pub fn source_of(provider: &str, server: Option<(&str, u16)>) -> String {
        match server {
            Some((host, port)) => format!("{provider}@{host}:{port}"),
            None => provider.to_owned(),
        }
    }

    /// The data, when `source` wrote it; another source's state is `None`, so it is never sent
    /// to a provider that did not write it.
    pub fn data_for(&self, source: &str) -> Option<&Value> {
        (self.source == source).then_some(&self.data)
    }
}

/// An image: `{"format": "png", "source": {"bytes": base64}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageBlock {
    /// `png`, `jpeg`, `gif` or `webp`.
    pub format: String,
    /// Where the bytes are.
    pub source: MediaSource,
}

/// A document: `{"format": "pdf", "name": "...", "source": {"bytes": base64}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentBlock {
    /// `pdf`, `csv`, `doc`, `docx`, `xls`, `xlsx`, `html`, `txt` or `md`.
    pub format: String,
    /// A name for the document.
    pub name: String,
    /// Where the bytes are.
    pub source: MediaSource,
}

/// The source of an image or document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum MediaSource {
    /// Inline bytes (base64 in JSON).
    Bytes(Bytes),
}

/// A human's answer to an interrupt: `{"interruptId", "response", "fingerprint"?}`.
///
/// Made from the interrupt answered ([`Interrupt::answer`](crate::interrupt::Interrupt::answer))
/// it names that pause and the fingerprint of what was asked. An answer that reaches Rein over a
/// wire names them itself (the client echoes what it was shown): an interrupt bound to a
/// fingerprint refuses an answer naming no fingerprint or another one
/// ([`Error::FingerprintMismatch`]), so an answer cannot
/// approve a call it was not given for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptResponse {
    /// The interrupt answered: its [`resume_id`](crate::interrupt::Interrupt::resume_id).
    pub interrupt_id: String,
    /// The answer (any JSON).
    pub response: Value,
    /// The fingerprint of what the answer approves: the interrupt's, as shown to whoever
    /// answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl InterruptResponse {
    /// An answer to the interrupt whose resume id is `interrupt_id`, naming no fingerprint —
    /// enough for an interrupt bound to none (a hook's or a tool's own question). For one
    /// bound to a fingerprint (every `Confirm`) add it with
    /// [`with_fingerprint`](Self::with_fingerprint), or answer the interrupt itself with
    /// [`Interrupt::answer`](crate::interrupt::Interrupt::answer).
    pub fn new(interrupt_id: impl Into<String>, response: impl Into<Value>) -> Self {
        Self {
            interrupt_id: interrupt_id.into(),
            response: response.into(),
            fingerprint: None,
        }
    }

    /// The same answer, naming the fingerprint of what it approves (as the interrupt shown
    /// carried it).
    pub fn with_fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.fingerprint = Some(fingerprint.into());
        self
    }
}

/// Binary data, serialized as standard base64 in JSON.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.0.len())
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Self(v)
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}
