//! Requests the providers' unit tests encode alike.
#![allow(clippy::unwrap_used)]

#[cfg(any(feature = "anthropic", feature = "bedrock"))]
use rein_core::{
    ContentBlock, Role, ToolResult, ToolUse,
    message::{ReasoningContent, ReasoningText},
    request::{CachePoints, InferenceConfig},
};
use rein_core::{Message, request::ModelRequest, tool::ToolSpec};
use serde_json::json;

/// The third request of a tool loop (a question, two rounds of a call with reasoning and its
/// result), with a system prompt, two tools and the given cache points.
#[cfg(any(feature = "anthropic", feature = "bedrock"))]
pub(crate) fn tool_loop(cache: CachePoints) -> ModelRequest {
    let mut messages = vec![Message::user("Weather in Paris and Rome?")];
    for (id, city) in [("t1", "Paris"), ("t2", "Rome")] {
        messages.push(Message::new(
            Role::Assistant,
            vec![
                ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                    ReasoningText::new("I call the tool.", Some("sig".into())),
                ))),
                ContentBlock::ToolUse(Box::new(ToolUse::new(
                    id,
                    "get_weather",
                    json!({ "city": city }),
                ))),
            ],
        ));
        messages.push(Message::new(
            Role::User,
            vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                id, "Sunny",
            )))],
        ));
    }
    let mut config = InferenceConfig::default();
    config.cache = cache;
    let tool = |name: &str| ToolSpec::new(name, "a tool", json!({"type": "object"}));
    ModelRequest::new(messages)
        .with_system_prompt("You are terse.")
        .with_tools(vec![tool("get_weather"), tool("get_time")])
        .with_config(config)
}

/// A request for a typed answer (SPEC §13): a closed (strict) or open schema, with or
/// without a tool offered.
#[cfg(any(
    feature = "openai",
    feature = "gemini",
    feature = "anthropic",
    feature = "ollama"
))]
pub(crate) fn typed(tools: bool, strict: bool) -> ModelRequest {
    use rein_core::request::OutputFormat;
    let mut schema = json!({"type": "object", "properties": {"total": {"type": "integer"}},
        "required": ["total"]});
    if strict {
        schema["additionalProperties"] = json!(false);
    }
    let mut format = OutputFormat::new("invoice", schema);
    format.strict = strict;
    let mut request = ModelRequest::new(vec![Message::user("Total?")]).with_output_format(format);
    if tools {
        request = request.with_tools(vec![ToolSpec::new(
            "lookup",
            "a tool",
            json!({"type": "object"}),
        )]);
    }
    request
}
