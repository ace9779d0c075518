//! Typed answers (structured output, SPEC §13): the schema an agent's final answer must
//! match, how the model is asked for it (the strategy), and the check of each answer — size,
//! JSON, JSON Schema, then the Rust type.

use std::sync::Arc;

use rein_core::{
    ContentBlock, Error, Message,
    error::BuildError,
    request::OutputFormat,
    stream::{ModelResponse, StopReason},
    tool::ToolSpec,
};
use serde_json::Value;

use crate::schema_cache::{self, SchemaCheck};

/// How the model is asked for a typed answer. Whatever the strategy, the answer is checked
/// (schema, then type) and a failing one is sent back with its errors, within the agent's
/// [`max_output_retries`](crate::AgentBuilder::max_output_retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputStrategy {
    /// The provider's own constrained output ([`OutputFormat`] on the request: OpenAI's
    /// `response_format`, Anthropic's `output_config.format`, Ollama's `format` ...). Providers
    /// that cannot constrain an answer while tools are offered (or to an open schema) leave it
    /// out on those calls, so the schema is also stated in the system prompt unless the agent
    /// has no tools and the schema is closed.
    Native,
    /// A final-answer tool ([`FINAL_ANSWER_TOOL`]) whose input is the answer: for models that
    /// only do tools. Its call ends the run (it never runs as a tool).
    Tool,
    /// The schema stated in the system prompt, nothing more: a fallback for providers with
    /// neither (the check and the retry are what hold the answer to the schema).
    Prompt,
}

/// The final-answer tool of [`OutputStrategy::Tool`].
pub const FINAL_ANSWER_TOOL: &str = "final_answer";

/// Output retries when the builder sets none: a model that fails twice after being told the
/// errors rarely complies on a fourth try, and each try is a full model call.
pub const DEFAULT_MAX_OUTPUT_RETRIES: u32 = 2;

/// The largest answer checked by default (bytes): a typed answer larger than this is refused
/// before it is parsed.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// At most this many schema errors are reported per answer (to the model and in the audit).
const MAX_ERRORS: usize = 8;

/// The longest error reported (bytes): a schema error quotes the value at fault, which the
/// model wrote and may be as large as the answer.
const MAX_ERROR_LEN: usize = 300;

/// What the builder was told about the typed answer.
#[derive(Clone)]
pub(crate) struct OutputRequest {
    pub(crate) format: OutputFormat,
    /// Checks that a value fits the Rust type asked for (`output::<T>()`).
    pub(crate) type_check: Option<TypeCheck>,
}

pub(crate) type TypeCheck = fn(&Value) -> Result<(), String>;

/// The typed answer of an agent, as built.
pub(crate) struct OutputSpec {
    pub(crate) format: OutputFormat,
    check: Arc<SchemaCheck>,
    type_check: Option<TypeCheck>,
    pub(crate) strategy: OutputStrategy,
    pub(crate) max_retries: u32,
    pub(crate) max_bytes: usize,
    /// The system prompt with the schema stated, when the strategy states it.
    pub(crate) system_prompt: Option<Arc<str>>,
    /// The tools offered with the final-answer tool ([`OutputStrategy::Tool`]).
    pub(crate) tools: Option<Arc<Vec<ToolSpec>>>,
}

impl std::fmt::Debug for OutputSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSpec")
            .field("name", &self.format.name)
            .field("strategy", &self.strategy)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

/// The settings of a typed answer the builder collects.
pub(crate) struct OutputSettings {
    pub(crate) request: OutputRequest,
    pub(crate) strategy: Option<OutputStrategy>,
    pub(crate) max_retries: u32,
    pub(crate) max_bytes: usize,
}

fn invalid(reason: String) -> Error {
    BuildError::InvalidSetting {
        component: "agent",
        setting: "output schema",
        reason,
    }
    .into()
}

impl OutputSpec {
    /// The spec for an agent with `provider`'s model, this system prompt and these tools.
    pub(crate) fn build(
        settings: OutputSettings,
        provider: &str,
        system_prompt: Option<&str>,
        tools: &Arc<Vec<ToolSpec>>,
    ) -> Result<Self, Error> {
        let OutputSettings {
            request,
            strategy,
            max_retries,
            max_bytes,
        } = settings;
        let mut format = request.format;
        if !ToolSpec::is_valid_name(&format.name) {
            return Err(invalid(format!(
                "the name '{}' is not 1 to 64 of [a-zA-Z0-9_-]",
                format.name
            )));
        }
        let check = schema_cache::check_for(&format.schema).map_err(invalid)?;
        format.strict = is_strict(&format.schema);
        let strategy = strategy.unwrap_or_else(|| default_strategy(provider));
        let schema_text = format.schema.to_string();
        let stated = match strategy {
            // Stated unless every provider that maps the format constrains this call to it: a
            // call without tools, with a closed schema (Anthropic takes only those; Ollama and
            // Gemini constrain only calls without tools).
            OutputStrategy::Native if tools.is_empty() && format.strict => None,
            OutputStrategy::Native | OutputStrategy::Prompt => Some(format!(
                "When you give your final answer (after any tool calls you need), answer with \
                 only a JSON value, no prose and no code fence, that matches this JSON Schema \
                 (`{}`):\n{schema_text}",
                format.name
            )),
            OutputStrategy::Tool => Some(format!(
                "When you have your final answer (after any other tool calls you need), give it \
                 by calling the `{FINAL_ANSWER_TOOL}` tool, alone, with the answer as its input."
            )),
        };
        let system_prompt = stated.map(|s| match system_prompt {
            Some(p) => Arc::<str>::from(format!("{p}\n\n{s}")),
            None => Arc::<str>::from(s),
        });
        let tools = match strategy {
            OutputStrategy::Tool => {
                if format.schema.get("type") != Some(&Value::String("object".into())) {
                    return Err(invalid(
                        "the tool strategy needs an object schema (a tool's input is an object)"
                            .into(),
                    ));
                }
                if tools.iter().any(|t| t.name == FINAL_ANSWER_TOOL) {
                    return Err(BuildError::DuplicateTool(FINAL_ANSWER_TOOL.into()).into());
                }
                let mut all = (**tools).clone();
                all.push(ToolSpec::new(
                    FINAL_ANSWER_TOOL,
                    format!("Gives the final answer (`{}`).", format.name),
                    (*format.schema).clone(),
                ));
                Some(Arc::new(all))
            }
            OutputStrategy::Native | OutputStrategy::Prompt => None,
        };
        Ok(Self {
            format,
            check,
            type_check: request.type_check,
            strategy,
            max_retries,
            max_bytes,
            system_prompt,
            tools,
        })
    }

    /// The output format the request carries (the native strategy only).
    pub(crate) fn request_format(&self) -> Option<&OutputFormat> {
        (self.strategy == OutputStrategy::Native).then_some(&self.format)
    }

    /// Takes the final-answer tool's call out of a response ([`OutputStrategy::Tool`]): alone,
    /// its input becomes the response's text (the answer, and history holds no tool use
    /// without a result); beside other tool uses it is dropped, those run, and the model
    /// answers again.
    pub(crate) fn take_final_answer_tool(&self, response: &mut ModelResponse) {
        if self.strategy != OutputStrategy::Tool {
            return;
        }
        let content = &mut response.message.content;
        let is_final =
            |b: &ContentBlock| matches!(b, ContentBlock::ToolUse(u) if u.name == FINAL_ANSWER_TOOL);
        let Some(at) = content.iter().position(is_final) else {
            return;
        };
        let others = content
            .iter()
            .filter(|b| matches!(b, ContentBlock::ToolUse(_)) && !is_final(b))
            .count();
        let ContentBlock::ToolUse(call) = content.remove(at) else {
            return;
        };
        content.retain(|b| !is_final(b));
        response
            .invalid_tool_inputs
            .retain(|(id, _)| *id != call.tool_use_id);
        if others == 0 {
            content.retain(|b| !matches!(b, ContentBlock::Text(_)));
            content.push(ContentBlock::Text(call.input.to_string()));
            response.stop_reason = StopReason::EndTurn;
        }
    }

    /// Checks an answer: its size, JSON, the schema, then the type. The errors are what the
    /// model is told.
    pub(crate) fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        if text.len() > self.max_bytes {
            return Err(vec![format!(
                "the answer is {} bytes, more than the {} allowed",
                text.len(),
                self.max_bytes
            )]);
        }
        let value: Value = serde_json::from_str(unfenced(text))
            .map_err(|e| vec![format!("the answer is not a JSON value: {e}")])?;
        let validator = self
            .check
            .validator_unless_accepted(&value)
            .map_err(|e| vec![format!("the answer's schema is invalid: {e}")])?;
        let errors: Vec<String> = match validator {
            None => Vec::new(),
            Some(validator) => validator
                .iter_errors(&value)
                .take(MAX_ERRORS)
                .map(|e| {
                    let path = e.instance_path().to_string();
                    let error = if path.is_empty() {
                        e.to_string()
                    } else {
                        format!("at {path}: {e}")
                    };
                    cut(error, MAX_ERROR_LEN)
                })
                .collect(),
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        if let Some(check) = self.type_check {
            check(&value).map_err(|e| {
                vec![cut(
                    format!("the answer does not fit the type: {e}"),
                    MAX_ERROR_LEN,
                )]
            })?;
        }
        Ok(value)
    }

    /// The typed answer a stored final message holds, if it holds a valid one.
    pub(crate) fn answer_of(&self, message: &Message) -> Option<Value> {
        if message.has_tool_use() {
            return None;
        }
        self.check(&message.text()).ok()
    }

    /// What the model is told when its answer is refused.
    pub(crate) fn guidance(&self, errors: &[String]) -> String {
        let mut g = format!(
            "Your answer does not match the required output `{}`:\n",
            self.format.name
        );
        for e in errors {
            g.push_str("- ");
            g.push_str(e);
            g.push('\n');
        }
        match self.strategy {
            OutputStrategy::Tool => g.push_str(&format!(
                "Call `{FINAL_ANSWER_TOOL}` again with an input that matches its schema."
            )),
            OutputStrategy::Native | OutputStrategy::Prompt => {
                g.push_str("Answer again with only a JSON value matching this JSON Schema:\n");
                g.push_str(&self.format.schema.to_string());
            }
        }
        g
    }

    /// The raw text of an answer, cut to the size bound (what an exhausted outcome carries).
    pub(crate) fn raw(&self, text: &str) -> String {
        cut(text.to_owned(), self.max_bytes)
    }
}

/// The typed answer as it streams (SPEC §13): the text (or the final-answer tool's input)
/// of the current model call, parsed as partial JSON for
/// [`AgentEvent::OutputPartial`](crate::AgentEvent::OutputPartial). Kept only for a typed
/// agent's stream.
#[derive(Debug)]
pub(crate) struct PartialOutput {
    /// The answer is the final-answer tool's input ([`OutputStrategy::Tool`]), not the text.
    from_tool: bool,
    max_bytes: usize,
    /// Output attempt of the current model call (1 is the first answer, 2 the first retry).
    attempt: u32,
    /// The final-answer tool's input is streaming.
    in_tool: bool,
    text: String,
    /// The length of `text` when it was last parsed.
    parsed_len: usize,
    last: Option<Value>,
}

impl PartialOutput {
    pub(crate) fn new(spec: &OutputSpec) -> Self {
        Self {
            from_tool: spec.strategy == OutputStrategy::Tool,
            max_bytes: spec.max_bytes,
            attempt: 1,
            in_tool: false,
            text: String::new(),
            parsed_len: 0,
            last: None,
        }
    }

    /// A model call starts: its answer is output attempt `attempt`.
    pub(crate) fn start(&mut self, attempt: u32) {
        self.attempt = attempt;
        self.in_tool = false;
        self.text.clear();
        self.parsed_len = 0;
        self.last = None;
    }

    /// A tool use starts streaming its input.
    pub(crate) fn tool_started(&mut self, name: &str) {
        self.in_tool = self.from_tool && name == FINAL_ANSWER_TOOL;
        if self.in_tool {
            self.text.clear();
            self.parsed_len = 0;
            self.last = None;
        }
    }

    /// Takes a model delta; returns the answer parsed so far when it changed, with the
    /// attempt.
    pub(crate) fn feed(&mut self, delta: &str, tool_input: bool) -> Option<(u32, Value)> {
        if tool_input != self.from_tool || (tool_input && !self.in_tool) {
            return None;
        }
        // Past the size bound the answer is refused anyway: nothing more is parsed.
        if self.text.len() + delta.len() > self.max_bytes {
            return None;
        }
        self.text.push_str(delta);
        // Parsed again once the text grew by an eighth (or at the first delta), and at the
        // block's end (`flush`): the parsing of one answer stays within a small multiple of
        // its size, however finely it streams.
        if self.parsed_len > 0 && self.text.len() - self.parsed_len < self.parsed_len / 8 {
            return None;
        }
        self.parse()
    }

    /// Takes a model delta event (text or tool input; others are no answer).
    pub(crate) fn feed_event(&mut self, event: &crate::AgentEvent) -> Option<(u32, Value)> {
        match event {
            crate::AgentEvent::TextDelta(t) => self.feed(t, false),
            crate::AgentEvent::ToolInputDelta { delta, .. } => self.feed(delta, true),
            _ => None,
        }
    }

    /// The block streaming ended: the last partial, if the text grew since it was parsed.
    pub(crate) fn flush(&mut self) -> Option<(u32, Value)> {
        if self.parsed_len == self.text.len() {
            return None;
        }
        self.parse()
    }

    fn parse(&mut self) -> Option<(u32, Value)> {
        self.parsed_len = self.text.len();
        let value = parse_partial(&self.text)?;
        if self.last.as_ref() == Some(&value) {
            return None;
        }
        self.last = Some(value.clone());
        Some((self.attempt, value))
    }
}

/// The JSON value an unfinished answer holds so far: open strings, arrays and objects closed
/// where they stop (jiter's partial mode). `None` before a value starts or when the text is
/// not JSON.
fn parse_partial(text: &str) -> Option<Value> {
    let mut t = text.trim_start();
    // An answer in a code fence: the value starts after the fence's first line.
    if let Some(fenced) = t.strip_prefix("```") {
        t = fenced.split_once('\n')?.1.trim_start();
    }
    let t = t.trim_end().trim_end_matches('`').trim_end();
    if t.is_empty() {
        return None;
    }
    let value = jiter::JsonValue::parse_with_config(
        t.as_bytes(),
        false,
        jiter::PartialMode::TrailingStrings,
    )
    .ok()?;
    Some(to_serde(value))
}

fn to_serde(value: jiter::JsonValue<'_>) -> Value {
    use jiter::JsonValue as J;
    match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(b),
        J::Int(i) => Value::from(i),
        J::Float(f) => Value::from(f),
        J::Str(s) => Value::String(s.into_owned()),
        J::Array(items) => Value::Array(
            std::sync::Arc::unwrap_or_clone(items)
                .into_iter()
                .map(to_serde)
                .collect(),
        ),
        J::Object(entries) => Value::Object(
            std::sync::Arc::unwrap_or_clone(entries)
                .into_iter()
                .map(|(k, v)| (k.into_owned(), to_serde(v)))
                .collect(),
        ),
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(mut text: String, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// The strategy for a provider when the builder names none: the provider's own constrained
/// output where Rein maps it (see docs/providers.md), the final-answer tool for Bedrock.
fn default_strategy(provider: &str) -> OutputStrategy {
    match provider {
        "bedrock" => OutputStrategy::Tool,
        _ => OutputStrategy::Native,
    }
}

/// The text inside one surrounding Markdown code fence, if the whole answer is one (models
/// told to answer with JSON often fence it); the text itself otherwise.
fn unfenced(text: &str) -> &str {
    let t = text.trim();
    let Some(inner) = t.strip_prefix("```").and_then(|t| t.strip_suffix("```")) else {
        return t;
    };
    // The fence's info string (`json`) runs to the first newline.
    match inner.split_once('\n') {
        Some((info, body)) if !info.contains(['{', '[', '"']) => body.trim(),
        _ => inner.trim(),
    }
}

/// Whether a schema meets OpenAI's strict mode (every object closed, every property
/// required): only then is `strict` asked for, as a strict request with another schema is
/// rejected.
fn is_strict(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            if map.get("type") == Some(&Value::String("object".into()))
                || map.contains_key("properties")
            {
                if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                    return false;
                }
                let props = map.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if props.is_some_and(|p| p.keys().any(|k| !required.contains(&k.as_str()))) {
                    return false;
                }
            }
            map.values().all(is_strict)
        }
        Value::Array(items) => items.iter().all(is_strict),
        _ => true,
    }
}

/// The output request for `T`: its JSON Schema (schemars) under its schema name, with the
/// type check.
pub(crate) fn request_for<T>() -> OutputRequest
where
    T: schemars::JsonSchema + serde::de::DeserializeOwned,
{
    let schema = schemars::schema_for!(T).to_value();
    OutputRequest {
        format: OutputFormat::new(ToolSpec::name_from(&T::schema_name()), schema),
        type_check: Some(|v| T::deserialize(v).map(drop).map_err(|e| e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_quoting_a_huge_value_is_cut() {
        let settings = OutputSettings {
            request: OutputRequest {
                format: OutputFormat::new("n", json!({"type": "integer"})),
                type_check: None,
            },
            strategy: None,
            max_retries: 0,
            max_bytes: 1 << 20,
        };
        let spec = OutputSpec::build(settings, "x", None, &Arc::default()).unwrap();
        let huge = serde_json::to_string(&"é".repeat(100_000)).unwrap();
        let errors = spec.check(&huge).unwrap_err();
        assert!(errors[0].len() <= MAX_ERROR_LEN, "{}", errors[0].len());
    }

    #[test]
    fn an_unfinished_answer_is_closed_where_it_stops() {
        assert_eq!(
            parse_partial(r#"{"total": 12.5, "items": ["a", "b"#),
            Some(json!({"total": 12.5, "items": ["a", "b"]}))
        );
        assert_eq!(
            parse_partial("```json\n{\"a\": 1}\n```"),
            Some(json!({"a": 1}))
        );
        assert_eq!(parse_partial("```json"), None);
        assert_eq!(parse_partial("Let me look that up."), None);
    }

    /// A hostile model streaming a large answer one byte at a time: parsing stays bounded
    /// (an eighth's growth between parses: ~100 parses for 64 KiB, not 65 536), the last
    /// partial is the whole value, and past the size bound nothing more is parsed.
    #[test]
    fn partials_of_a_finely_streamed_answer_are_bounded() {
        let settings = OutputSettings {
            request: OutputRequest {
                format: OutputFormat::new("n", json!({"type": "array"})),
                type_check: None,
            },
            strategy: None,
            max_retries: 0,
            max_bytes: 70_000,
        };
        let spec = OutputSpec::build(settings, "x", None, &Arc::default()).unwrap();
        let mut p = PartialOutput::new(&spec);
        p.start(1);
        let answer = serde_json::to_string(&vec![1u8; 32 * 1024]).unwrap();
        let mut parses = 0;
        for c in answer.chars() {
            parses += usize::from(p.feed(&c.to_string(), false).is_some());
        }
        let last = p.flush().map(|(_, v)| v);
        assert!(parses < 200, "{parses} partials");
        assert_eq!(last, Some(serde_json::from_str::<Value>(&answer).unwrap()));
        // Past max_bytes: nothing more.
        assert!(p.feed(&" ".repeat(10_000), false).is_none());
        assert!(p.flush().is_none());
    }

    #[test]
    fn fences_are_taken_off_whole_answers_only() {
        assert_eq!(unfenced("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(unfenced(" {\"a\":1} "), "{\"a\":1}");
        assert_eq!(unfenced("x ```{}```"), "x ```{}```");
    }

    #[test]
    fn strict_only_for_closed_objects_with_every_property_required() {
        let closed = json!({"type": "object", "properties": {"a": {"type": "string"}},
            "required": ["a"], "additionalProperties": false});
        assert!(is_strict(&closed));
        let optional = json!({"type": "object", "properties": {"a": {}, "b": {}},
            "required": ["a"], "additionalProperties": false});
        assert!(!is_strict(&optional));
        assert!(!is_strict(&json!({"type": "object", "properties": {}})));
    }
}
