//! Request encoding: a Rein request as a Converse (`ConverseStream`) request body.

use base64::Engine as _;
use rein_core::{
    ContentBlock, Role, ToolResult,
    message::{DocumentBlock, ImageBlock, ReasoningContent, ToolResultContent},
    request::{ModelRequest, ToolChoice},
};
use serde_json::{Map, Value, json};

use crate::http;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image(img: &ImageBlock) -> Value {
    // Converse names the formats png, jpeg, gif, webp.
    let format = match img.format.to_ascii_lowercase().as_str() {
        "jpg" | "jpeg" | "image/jpeg" => "jpeg".to_owned(),
        "image/png" => "png".to_owned(),
        "image/gif" => "gif".to_owned(),
        "image/webp" => "webp".to_owned(),
        other => other.to_owned(),
    };
    json!({"image": {"format": format, "source": {"bytes": b64(http::media_bytes(&img.source))}}})
}

/// Converse allows only alphanumerics, single spaces, hyphens, parentheses and square brackets
/// in a document name: anything else becomes a hyphen (`report.pdf` → `report-pdf`).
fn document_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().chars() {
        let c = match c {
            c if c.is_alphanumeric() || "-()[]".contains(c) => c,
            c if c.is_whitespace() => ' ',
            _ => '-',
        };
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    if out.is_empty() {
        out.push_str("document");
    }
    out
}

fn document(doc: &DocumentBlock) -> Value {
    json!({"document": {
        "format": doc.format.to_ascii_lowercase(),
        "name": document_name(&doc.name),
        "source": {"bytes": b64(http::media_bytes(&doc.source))},
    }})
}

fn tool_result(r: &ToolResult) -> Value {
    let content: Vec<Value> = r
        .content
        .iter()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(json!({"text": t})),
            ToolResultContent::Json(v) => Some(json!({"json": v})),
            ToolResultContent::Image(img) => Some(image(img)),
            ToolResultContent::Document(d) => Some(document(d)),
            _ => None,
        })
        .collect();
    let mut block = json!({"toolUseId": r.tool_use_id, "content": content});
    if r.is_error() {
        block["status"] = json!("error");
    }
    json!({ "toolResult": block })
}

/// One block as Converse content, or `None` for what Converse cannot take back.
fn block(b: &ContentBlock) -> Option<Value> {
    match b {
        // Converse rejects blank text blocks.
        ContentBlock::Text(t) if t.trim().is_empty() => None,
        ContentBlock::Text(t) => Some(json!({ "text": t })),
        ContentBlock::Summary(s) => Some(json!({ "text": s.as_prompt_text() })),
        ContentBlock::ToolUse(u) => {
            let input = if u.input.is_object() {
                u.input.clone()
            } else {
                json!({})
            };
            Some(json!({"toolUse": {"toolUseId": u.tool_use_id, "name": u.name, "input": input}}))
        }
        ContentBlock::ToolResult(r) => Some(tool_result(r)),
        // Reasoning goes back with its signature; unsigned reasoning (another provider's) would
        // be rejected, so it is left out.
        ContentBlock::ReasoningContent(reasoning) => match &**reasoning {
            ReasoningContent::ReasoningText(r) => {
                let sig = r.signature.as_ref()?;
                Some(
                    json!({"reasoningContent": {"reasoningText": {"text": r.text, "signature": sig}}}),
                )
            }
            ReasoningContent::RedactedContent(data) => {
                Some(json!({"reasoningContent": {"redactedContent": b64(&data.0)}}))
            }
            _ => None,
        },
        ContentBlock::Image(img) => Some(image(img)),
        ContentBlock::Document(d) => Some(document(d)),
        _ => None,
    }
}

fn has_tool_blocks(request: &ModelRequest) -> bool {
    request.messages.iter().any(|m| {
        m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse(_) | ContentBlock::ToolResult(_)))
    })
}

/// Encodes a Rein request as a Converse request body. `additional_fields` becomes
/// `additionalModelRequestFields`; `extra` top-level fields override Rein's.
pub(crate) fn encode_request(
    request: &ModelRequest,
    additional_fields: &Map<String, Value>,
    extra: &Map<String, Value>,
) -> Value {
    let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
    let mut last_role = None;
    for m in request.messages.iter() {
        // Tool results lead their user message (Claude on Bedrock requires it).
        let (results, rest): (Vec<&ContentBlock>, Vec<&ContentBlock>) = m
            .content
            .iter()
            .partition(|b| matches!(b, ContentBlock::ToolResult(_)));
        let content: Vec<Value> = results.into_iter().chain(rest).filter_map(block).collect();
        if content.is_empty() {
            continue;
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        // Converse wants alternating roles: a message left without its neighbour's blocks
        // joins the previous one of the same role.
        if last_role == Some(role)
            && let Some(Value::Array(prev)) = messages.last_mut().and_then(|p| p.get_mut("content"))
        {
            prev.extend(content);
            continue;
        }
        last_role = Some(role);
        messages.push(json!({"role": role, "content": content}));
    }
    let c = &request.config;
    if c.cache.history {
        mark_history(&mut messages);
    }
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    if let Some(system) = request.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        let system = if c.cache.system {
            json!([{ "text": system }, cache_point()])
        } else {
            json!([{ "text": system }])
        };
        body.insert("system".into(), system);
    }
    let mut inference = Map::new();
    if let Some(n) = c.max_tokens {
        inference.insert("maxTokens".into(), json!(n));
    }
    if let Some(t) = c.temperature {
        inference.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        inference.insert("topP".into(), json!(p));
    }
    if !c.stop_sequences.is_empty() {
        inference.insert("stopSequences".into(), json!(c.stop_sequences));
    }
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    // Converse has no "none" tool choice. Tools are left out then, unless the history holds
    // tool blocks: Converse requires `toolConfig` with them, so the tools go without a choice.
    let none = matches!(request.tool_choice, ToolChoice::None);
    if !request.tools.is_empty() && (!none || has_tool_blocks(request)) {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"toolSpec": {"name": t.name, "description": t.description,
                    "inputSchema": {"json": t.input_schema}}})
            })
            .collect();
        if c.cache.tools {
            tools.push(cache_point());
        }
        let mut config = json!({ "tools": tools });
        let choice = match &request.tool_choice {
            ToolChoice::Any => Some(json!({"any": {}})),
            ToolChoice::Tool(name) => Some(json!({"tool": {"name": name}})),
            ToolChoice::None => None,
            _ => Some(json!({"auto": {}})),
        };
        if let Some(choice) = choice {
            config["toolChoice"] = choice;
        }
        body.insert("toolConfig".into(), config);
    }
    if !additional_fields.is_empty() {
        body.insert(
            "additionalModelRequestFields".into(),
            Value::Object(additional_fields.clone()),
        );
    }
    for (k, v) in extra {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// A prompt-cache checkpoint: everything before it is cached.
fn cache_point() -> Value {
    json!({"cachePoint": {"type": "default"}})
}

/// The history's cache checkpoints (`CachePoints::history`, placed by
/// [`http::history_cache_points`]); with the system prompt's and the tools', never more than
/// Bedrock's four.
fn mark_history(messages: &mut [Value]) {
    for i in http::history_cache_points(messages).into_iter().flatten() {
        if let Some(content) = messages[i]["content"].as_array_mut() {
            content.push(cache_point());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::{
        Message, ToolUse,
        message::{Bytes, MediaSource, ReasoningText, ToolResultStatus},
        request::InferenceConfig,
        tool::ToolSpec,
    };

    #[test]
    fn cache_points_become_at_most_four_checkpoints() {
        use rein_core::request::CachePoints;
        let body = |cache| {
            encode_request(
                &crate::test_requests::tool_loop(cache),
                &Map::new(),
                &Map::new(),
            )
        };
        let points = |body: &Value| -> Vec<String> {
            let mut at = Vec::new();
            let mut scan = |name: String, list: &Value| {
                for (i, b) in list.as_array().into_iter().flatten().enumerate() {
                    if b.get("cachePoint").is_some() {
                        at.push(format!("{name}[{i}]"));
                    }
                }
            };
            scan("system".into(), &body["system"]);
            scan("tools".into(), &body["toolConfig"]["tools"]);
            for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
                scan(format!("messages[{i}]"), &m["content"]);
            }
            at
        };
        assert!(points(&body(CachePoints::NONE)).is_empty());
        assert_eq!(
            points(&body(CachePoints::AUTO)),
            ["system[1]", "tools[2]", "messages[2][1]", "messages[4][1]"]
        );
    }

    fn img(format: &str, bytes: &[u8]) -> ImageBlock {
        ImageBlock {
            format: format.into(),
            source: MediaSource::Bytes(Bytes(bytes.to_vec())),
        }
    }

    fn doc(name: &str) -> DocumentBlock {
        DocumentBlock {
            format: "pdf".into(),
            name: name.into(),
            source: MediaSource::Bytes(Bytes(b"%PDF".to_vec())),
        }
    }

    #[test]
    fn every_content_kind_is_encoded() {
        let mut config = InferenceConfig::default();
        config.max_tokens = Some(512);
        config.temperature = Some(0.5);
        config.top_p = Some(0.25);
        config.stop_sequences = vec!["STOP".into()];
        config.seed = Some(7);
        let req = ModelRequest::new(vec![
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("look"),
                    ContentBlock::Image(Box::new(img("jpg", b"\x89img"))),
                    ContentBlock::Document(Box::new(doc("Q3 report.final.pdf"))),
                    ContentBlock::text("  "),
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                        ReasoningText::new("think", Some("sig==".into())),
                    ))),
                    ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                        ReasoningText::new("unsigned", None),
                    ))),
                    ContentBlock::ReasoningContent(Box::new(ReasoningContent::RedactedContent(
                        Bytes(b"opaque".to_vec()),
                    ))),
                    ContentBlock::text("calling"),
                    ContentBlock::ToolUse(Box::new(ToolUse::new("t1", "f", json!({"a": 1})))),
                    ContentBlock::ToolUse(Box::new(ToolUse::new(
                        "t2",
                        "g",
                        json!("not an object"),
                    ))),
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("and?"),
                    ContentBlock::ToolResult(Box::new(ToolResult {
                        tool_use_id: "t1".into(),
                        status: ToolResultStatus::Success,
                        content: vec![
                            ToolResultContent::Text("ok".into()),
                            ToolResultContent::Json(json!({"n": 1})),
                            ToolResultContent::Image(img("png", b"p")),
                            ToolResultContent::Document(doc("d")),
                        ],
                    })),
                    ContentBlock::ToolResult(Box::new(ToolResult::error("t2", "boom"))),
                ],
            ),
        ])
        .with_system_prompt("be brief")
        .with_config(config)
        .with_tools(vec![ToolSpec::new(
            "f",
            "does f",
            json!({"type": "object"}),
        )])
        .with_tool_choice(ToolChoice::Tool("f".into()));
        let mut additional = Map::new();
        additional.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 1024}),
        );
        let body = encode_request(&req, &additional, &Map::new());
        let expected = json!({
            "messages": [
                {"role": "user", "content": [
                    {"text": "look"},
                    {"image": {"format": "jpeg", "source": {"bytes": "iWltZw=="}}},
                    {"document": {"format": "pdf", "name": "Q3 report-final-pdf",
                        "source": {"bytes": "JVBERg=="}}},
                ]},
                {"role": "assistant", "content": [
                    {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig=="}}},
                    {"reasoningContent": {"redactedContent": "b3BhcXVl"}},
                    {"text": "calling"},
                    {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}},
                    {"toolUse": {"toolUseId": "t2", "name": "g", "input": {}}},
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "t1", "content": [
                        {"text": "ok"},
                        {"json": {"n": 1}},
                        {"image": {"format": "png", "source": {"bytes": "cA=="}}},
                        {"document": {"format": "pdf", "name": "d", "source": {"bytes": "JVBERg=="}}},
                    ]}},
                    {"toolResult": {"toolUseId": "t2", "status": "error",
                        "content": [{"text": "boom"}]}},
                    {"text": "and?"},
                ]},
            ],
            "system": [{"text": "be brief"}],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.5, "topP": 0.25,
                "stopSequences": ["STOP"]},
            "toolConfig": {
                "tools": [{"toolSpec": {"name": "f", "description": "does f",
                    "inputSchema": {"json": {"type": "object"}}}}],
                "toolChoice": {"tool": {"name": "f"}},
            },
            "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn tool_choices_and_the_none_rule() {
        let tools = vec![ToolSpec::new("f", "", json!({}))];
        let plain = ModelRequest::new(vec![Message::user("hi")]).with_tools(tools.clone());
        let enc = |r: &ModelRequest| encode_request(r, &Map::new(), &Map::new());
        assert_eq!(enc(&plain)["toolConfig"]["toolChoice"], json!({"auto": {}}));
        let any = plain.clone().with_tool_choice(ToolChoice::Any);
        assert_eq!(enc(&any)["toolConfig"]["toolChoice"], json!({"any": {}}));
        let none = plain.clone().with_tool_choice(ToolChoice::None);
        assert!(enc(&none).get("toolConfig").is_none());
        let with_history = ModelRequest::new(vec![
            Message::user("hi"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse(Box::new(ToolUse::new(
                    "t",
                    "f",
                    json!({}),
                )))],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::ToolResult(Box::new(ToolResult::success(
                    "t", "x",
                )))],
            ),
        ])
        .with_tools(tools)
        .with_tool_choice(ToolChoice::None);
        let body = enc(&with_history);
        assert!(body["toolConfig"]["tools"].is_array());
        assert!(body["toolConfig"].get("toolChoice").is_none());
        let bare = enc(&ModelRequest::new(vec![Message::user("hi")]));
        assert_eq!(
            bare,
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})
        );
    }

    #[test]
    fn emptied_messages_merge_and_extra_fields_override() {
        let req = ModelRequest::new(vec![
            Message::user("a"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ReasoningContent(Box::new(
                    ReasoningContent::ReasoningText(ReasoningText::new("unsigned", None)),
                ))],
            ),
            Message::user("b"),
        ]);
        let mut extra = Map::new();
        extra.insert(
            "guardrailConfig".into(),
            json!({"guardrailIdentifier": "g"}),
        );
        let body = encode_request(&req, &Map::new(), &extra);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"text": "a"}, {"text": "b"}]}])
        );
        assert_eq!(body["guardrailConfig"]["guardrailIdentifier"], "g");
    }

    /// A conversation manager's summary (SPEC §6.1) goes out as ordinary text.
    #[test]
    fn a_summary_block_is_sent_as_text() {
        use rein_core::{id::MessageId, message::Summary};
        let summary = Summary::new("They counted.", MessageId::new(), MessageId::new(), 4);
        let lead = summary.as_prompt_text();
        let req = ModelRequest::new(vec![Message::new(
            Role::User,
            vec![ContentBlock::from(summary), ContentBlock::text("next")],
        )]);
        let body = encode_request(&req, &Map::new(), &Map::new());
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"text": lead}, {"text": "next"}]}])
        );
    }

    #[test]
    fn document_names_are_made_valid() {
        assert_eq!(document_name("a.b_c  d (1) [x]"), "a-b-c d (1) [x]");
        assert_eq!(document_name("..."), "---");
        assert_eq!(document_name("  "), "document");
    }
}
