//! The scripted demo model of `rein chat --model demo`: it picks a tool from keywords in the
//! prompt, then summarises the tool results, or tells a slow story (to try Ctrl-C on). Streams
//! its text in small pieces, after a short pause.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rein_agent::{TOOL_CANCELLED, TOOL_INTERRUPTED};
use rein_core::{ContentBlock, Message, ModelError, Role, ToolResult, request::ModelRequest};
use rein_models::{Model, ModelInfo, ModelStream, ScriptedModel, ScriptedResponse};
use serde_json::json;

/// How fast text streams: a pause per chunk of 4 characters.
const PACE: Duration = Duration::from_millis(8);
/// How fast the story streams: slow enough to read along, and to press Ctrl-C.
const STORY_PACE: Duration = Duration::from_millis(60);

const STORY: &str = "(demo model) A story, told slowly: press Ctrl-C to cancel it. Once upon a \
    time an agent was asked to tidy a project. It listed the files, read the notes, and found one \
    it thought nobody needed. Before deleting it, the agent asked, as its policy said, and the \
    human said no: the file held the only copy of a recipe. The agent wrote that down, tidied \
    everything else, and nobody lost their dinner. The end.";

/// The scripted demo model.
#[derive(Debug, Default)]
pub(super) struct DemoModel {
    calls: AtomicU64,
    /// The history length and last message of the previous request.
    seen: Mutex<(usize, Vec<ContentBlock>)>,
}

impl DemoModel {
    fn respond(&self, request: &ModelRequest) -> (ScriptedResponse, Duration) {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let id = format!("demo-{n}");
        let unseen = self.unseen(&request.messages);
        let Some(last) = request.messages.last() else {
            return (ScriptedResponse::new().text("Hello!"), PACE);
        };
        let prompt = match last.role {
            Role::User => unseen.iter().find_map(|b| match b {
                ContentBlock::Text(t) => Some(t.clone()),
                _ => None,
            }),
            _ => None,
        };
        let results: Vec<&ToolResult> = last.tool_results().collect();
        // Results of tools that never ran (a cancelled turn, an abandoned approval) are not
        // summarised when a new prompt follows them.
        let abandoned = results
            .iter()
            .all(|r| r.is_error() && [TOOL_CANCELLED, TOOL_INTERRUPTED].contains(&&*r.text()));
        if !results.is_empty() && (!abandoned || prompt.is_none()) {
            let results: Vec<String> = results
                .iter()
                .map(|r| {
                    if r.is_error() {
                        format!("the tool failed ({})", r.text())
                    } else {
                        r.text()
                    }
                })
                .collect();
            let text = format!("Done. {}", results.join("; "));
            return (ScriptedResponse::new().text(text), PACE);
        }
        let prompt = prompt.unwrap_or_default();
        let lower = prompt.to_lowercase();
        let path_arg = || {
            prompt
                .split_whitespace()
                .find(|w| w.contains('.') || w.contains('/'))
                .map(|w| w.trim_matches(|c: char| c == '"' || c == '\'' || c == '?' || c == ','))
                .map(str::to_owned)
        };
        let response = if lower.contains("story") {
            return (ScriptedResponse::new().text(STORY), STORY_PACE);
        } else if lower.contains("time") {
            ScriptedResponse::new().tool_use(id, "current_time", json!({}))
        } else if lower.contains("delete") {
            let path = path_arg().unwrap_or_else(|| "example.txt".into());
            ScriptedResponse::new()
                .text(format!("I'll delete {path}."))
                .tool_use(id, "delete_file", json!({"path": path}))
        } else if lower.contains("read") || lower.contains("show") {
            let path = path_arg().unwrap_or_else(|| "README.md".into());
            ScriptedResponse::new().tool_use(id, "read_file", json!({"path": path}))
        } else if lower.contains("list") || lower.split_whitespace().any(|w| w == "ls") {
            let path = path_arg().unwrap_or_else(|| ".".into());
            ScriptedResponse::new().tool_use(id, "list_dir", json!({"path": path}))
        } else {
            ScriptedResponse::new().text(format!(
                "(demo model) You said: \"{prompt}\". I can tell the time, list a directory, \
                 read a file, pretend to delete one, or tell a slow story — try \"what time is \
                 it?\", \"list files\", \"read Cargo.toml\", \"delete notes.txt\" or \"tell me a \
                 story\"."
            ))
        };
        (response, PACE)
    }

    /// The blocks of the last message that the previous request did not have. After a
    /// cancelled turn the agent adds the next prompt to the unanswered user message: the demo
    /// answers that prompt, not the cancelled one.
    fn unseen<'m>(&self, messages: &'m [Message]) -> &'m [ContentBlock] {
        let Some(last) = messages.last() else {
            return &[];
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let start = if seen.0 == messages.len() && last.content.starts_with(&seen.1) {
            seen.1.len()
        } else {
            0
        };
        *seen = (messages.len(), last.content.clone());
        &last.content[start..]
    }
}

impl Model for DemoModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("demo", "scripted-demo")
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        // Asked for a typed answer (`--output-schema`): a sample value of the schema.
        let (response, pace) = match &request.output_format {
            Some(format) => (
                ScriptedResponse::new().text(sample(&format.schema, 0).to_string()),
                PACE,
            ),
            None => self.respond(&request),
        };
        let one_shot = ScriptedModel::builder()
            .response(response)
            .chunk_chars(4)
            .chunk_delay(pace)
            .call_delay(Duration::from_millis(350))
            .record_requests(false)
            .build();
        one_shot.stream(request).await
    }
}

/// A value of `schema` for the demo's typed answers: its `const`, first `enum` value or first
/// alternative, the required properties of an object, the lowest number allowed. (A demo: a
/// schema it cannot satisfy shows the check refusing it.)
fn sample(schema: &serde_json::Value, depth: u32) -> serde_json::Value {
    use serde_json::Value;
    if depth > 16 {
        return Value::Null;
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.as_array()?.first()) {
        return first.clone();
    }
    if let Some(first) = ["anyOf", "oneOf", "allOf"]
        .iter()
        .find_map(|k| schema.get(*k)?.as_array()?.first())
    {
        return sample(first, depth + 1);
    }
    let ty = match schema.get("type") {
        Some(Value::Array(types)) => types.first().and_then(Value::as_str),
        Some(t) => t.as_str(),
        None => schema.get("properties").map(|_| "object"),
    };
    match ty {
        Some("object") => {
            let props = schema.get("properties").and_then(Value::as_object);
            let required = schema.get("required").and_then(Value::as_array);
            let mut out = serde_json::Map::new();
            for name in required.into_iter().flatten().filter_map(Value::as_str) {
                let prop = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                out.insert(name.to_owned(), sample(prop, depth + 1));
            }
            Value::Object(out)
        }
        Some("array") => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = sample(schema.get("items").unwrap_or(&Value::Null), depth + 1);
            Value::Array((0..min.min(8)).map(|_| item.clone()).collect())
        }
        Some("string") => Value::String("demo".into()),
        Some("integer" | "number") => schema
            .get("minimum")
            .cloned()
            .unwrap_or_else(|| Value::from(0)),
        Some("boolean") => Value::Bool(false),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use rein_core::ToolUse;

    use super::*;

    fn user(blocks: Vec<ContentBlock>) -> Message {
        Message::new(Role::User, blocks)
    }

    fn time_tool(id: &str) -> ScriptedResponse {
        ScriptedResponse::new().tool_use(id, "current_time", json!({}))
    }

    #[test]
    fn after_a_cancelled_answer_the_newest_prompt_counts() {
        let model = DemoModel::default();
        let story = ContentBlock::text("tell me a story");
        let (response, pace) = model.respond(&ModelRequest::new(vec![user(vec![story.clone()])]));
        assert_eq!(
            (response, pace),
            (ScriptedResponse::new().text(STORY), STORY_PACE)
        );
        // The story was cancelled: the next prompt joins the unanswered user message.
        let request = ModelRequest::new(vec![user(vec![
            story,
            ContentBlock::text("what time is it?"),
        ])]);
        assert_eq!(model.respond(&request), (time_tool("demo-1"), PACE));
    }

    #[test]
    fn abandoned_tool_results_give_way_to_a_new_prompt() {
        let model = DemoModel::default();
        let delete = ToolUse::new("d1", "delete_file", json!({"path": "a.txt"}));
        let mut messages = vec![
            Message::user("delete a.txt"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(Box::new(delete))],
            ),
            user(vec![ContentBlock::ToolResult(Box::new(ToolResult::error(
                "d1",
                TOOL_INTERRUPTED,
            )))]),
        ];
        // Alone, the results are summarised.
        let (response, _) = model.respond(&ModelRequest::new(messages.clone()));
        let summary = format!("Done. the tool failed ({TOOL_INTERRUPTED})");
        assert_eq!(response, ScriptedResponse::new().text(summary));
        // Followed by a prompt, the prompt is answered.
        if let Some(last) = messages.last_mut() {
            last.content.push(ContentBlock::text("what time is it?"));
        }
        assert_eq!(
            model.respond(&ModelRequest::new(messages)),
            (time_tool("demo-1"), PACE)
        );
    }
}
