//! What is sent on one model call.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::message::{ContentBlock, Message, Role};
use crate::state::InvocationState;
use crate::tool::ToolSpec;

/// Which tool the model must use, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call some tool.
    Any,
    /// The model must call this tool.
    Tool(String),
    /// The model must not call tools.
    None,
}

/// Sampling settings for a model call; `None` leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InferenceConfig {
    /// Output token limit for one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Sampling seed, where the provider supports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// What the provider is asked to cache of the request's prefix (prompt caching).
    #[serde(default, skip_serializing_if = "CachePoints::is_none")]
    pub cache: CachePoints,
}

/// Which parts of a request's prefix a provider is asked to cache: the system prompt, the tool
/// definitions, the conversation up to its last message. A tool loop resends all three every
/// turn, so caching them is usually the largest cost lever; [`CachePoints::AUTO`] asks for all
/// three.
///
/// Anthropic gets `cache_control` breakpoints and Bedrock `cachePoint`s — never more than the
/// four both allow: one after the tools, one after the system prompt, and for the history one
/// on the last message and one on the message the previous request ended with (a turn that adds
/// many blocks still finds that one within Anthropic's lookback). Points sit on whole parts, not
/// on each new message, so the cached prefix does not move between turns. Providers that cache
/// prefixes by themselves (OpenAI, Gemini's implicit caching) ignore it; the cache read and
/// write tokens are in the response's usage either way.
///
/// ```
/// use rein_core::request::{CachePoints, InferenceConfig};
/// let mut config = InferenceConfig::default();
/// config.cache = CachePoints::AUTO;
/// assert!(config.cache.history && !CachePoints::NONE.history);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CachePoints {
    /// Cache the system prompt.
    #[serde(default)]
    pub system: bool,
    /// Cache the tool definitions.
    #[serde(default)]
    pub tools: bool,
    /// Cache the conversation up to its last message.
    #[serde(default)]
    pub history: bool,
}

impl CachePoints {
    /// Nothing cached by request (the default).
    pub const NONE: Self = Self {
        system: false,
        tools: false,
        history: false,
    };
    /// The system prompt, the tools and the history.
    pub const AUTO: Self = Self {
        system: true,
        tools: true,
        history: true,
    };

    /// Whether nothing is asked for.
    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }
}

/// The shape the model's final answer must have (structured output): a JSON Schema under a
/// name. Provider-neutral: each provider maps it to its own constrained output where it has one
/// (OpenAI's `response_format`, the Responses API's `text.format`, Anthropic's
/// `output_config.format`, Ollama's `format`, Gemini's `responseJsonSchema`) and ignores it
/// where it has none; the agent validates the answer either way.
///
/// ```
/// use rein_core::request::OutputFormat;
/// let f = OutputFormat::new("ticket", serde_json::json!({"type": "object"}));
/// assert_eq!(f.name, "ticket");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutputFormat {
    /// A name for the schema (`[a-zA-Z0-9_-]`, as providers require).
    pub name: String,
    /// The JSON Schema of the answer.
    pub schema: Arc<serde_json::Value>,
    /// Whether the schema meets strict constrained decoding (every object closed, every
    /// property required): providers that have a strict mode ask for it only then.
    pub strict: bool,
}

impl OutputFormat {
    /// An output format.
    pub fn new(name: impl Into<String>, schema: serde_json::Value) -> Self {
        Self {
            name: name.into(),
            schema: Arc::new(schema),
            strict: false,
        }
    }
}

/// The request of one model call. Fields are shared (`Arc`) so building it costs no copy of the
/// history; a `BeforeModelCall` hook that edits it copies on write (`Arc::make_mut`), so stored
/// history is never touched.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The system prompt.
    pub system_prompt: Option<Arc<str>>,
    /// The conversation.
    pub messages: Arc<Vec<Message>>,
    /// The tools offered.
    pub tools: Arc<Vec<ToolSpec>>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Sampling settings.
    pub config: InferenceConfig,
    /// The caller's invocation state (read-only for the model).
    pub invocation_state: InvocationState,
    /// The shape a final answer must have, when the agent asks for a typed answer and its
    /// strategy is the provider's own constrained output.
    pub output_format: Option<OutputFormat>,
}

impl ModelRequest {
    /// The fingerprint an approval of this request is bound to: uuid5 over the system
    /// prompt, the names of the tools offered and the messages as sorted-key JSON — what the
    /// model would be sent.
    pub fn fingerprint(&self) -> String {
        let mut data = String::new();
        data.push_str(self.system_prompt.as_deref().unwrap_or_default());
        data.push('\n');
        for (i, t) in self.tools.iter().enumerate() {
            if i > 0 {
                data.push(',');
            }
            data.push_str(&t.name);
        }
        data.push('\n');
        data.push_str(&Message::canonical_list(&self.messages));
        crate::id::fingerprint_of(&data)
    }

    /// A request with these messages and nothing else.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages: Arc::new(messages),
            ..Self::default()
        }
    }

    /// A request sharing the history, tools and invocation state it is given (no copy, no
    /// allocation): how an agent builds each model call's request.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rein_core::{Message, request::ModelRequest, state::InvocationState};
    ///
    /// let history = Arc::new(vec![Message::user("hi")]);
    /// let request = ModelRequest::shared(history.clone(), Arc::default(), InvocationState::new());
    /// assert!(Arc::ptr_eq(&request.messages, &history));
    /// ```
    pub fn shared(
        messages: Arc<Vec<Message>>,
        tools: Arc<Vec<ToolSpec>>,
        invocation_state: InvocationState,
    ) -> Self {
        Self {
            system_prompt: None,
            messages,
            tools,
            tool_choice: ToolChoice::default(),
            config: InferenceConfig::default(),
            invocation_state,
            output_format: None,
        }
    }

    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<Arc<str>>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = Arc::new(tools);
        self
    }

    /// Sets the tool choice.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = choice;
        self
    }

    /// Sets the sampling settings.
    pub fn with_config(mut self, config: InferenceConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the shape a final answer must have.
    pub fn with_output_format(mut self, format: OutputFormat) -> Self {
        self.output_format = Some(format);
        self
    }

    /// The messages, for editing (copies them first if they are shared).
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.messages)
    }

    /// Appends text for the model as the user: to the trailing user message, or as a new user
    /// message when the last message is not the user's (no two messages of one role in a row).
    ///
    /// ```
    /// use rein_core::request::ModelRequest;
    /// use rein_core::Message;
    /// let mut request = ModelRequest::new(vec![Message::user("hi")]);
    /// request.append_user_text("(context: EU user)");
    /// assert_eq!(request.messages.len(), 1);
    /// assert_eq!(request.messages[0].content.len(), 2);
    /// ```
    pub fn append_user_text(&mut self, text: impl Into<String>) {
        let messages = self.messages_mut();
        match messages.last_mut() {
            Some(last) if last.role == Role::User => {
                last.content.push(ContentBlock::Text(text.into()));
            }
            _ => messages.push(Message::user(text)),
        }
    }

    /// The tool specs, for editing (copies them first if they are shared).
    pub fn tools_mut(&mut self) -> &mut Vec<ToolSpec> {
        Arc::make_mut(&mut self.tools)
    }
}
