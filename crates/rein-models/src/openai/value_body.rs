//! The request body as it was built before it was serialized straight from the request: a
//! `serde_json::Value` tree (test only). `encode_request`'s bytes must parse to the same value.

use rein_core::{
    ContentBlock, Role,
    message::{DocumentBlock, ImageBlock, ReasoningContent},
    request::{ModelRequest, ToolChoice},
};
use serde_json::{Map, Value, json};

use super::{
    DocumentPart, EXTRA_CONTENT, Options, REASONING_FIELD, ToolResultContent, document_part_of,
    image_data_url, reasoning_field, tool_result_text,
};

/// Encodes a Rein request as a Chat Completions request body.
pub(super) fn value_body(
    model_id: &str,
    request: &ModelRequest,
    options: &Options<'_>,
    extra: &Map<String, Value>,
) -> Value {
    let Options {
        include_usage,
        max_completion_tokens,
        ..
    } = *options;
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system_prompt {
        messages.push(json!({"role": "system", "content": &**system}));
    }
    for m in request.messages.iter() {
        match m.role {
            Role::User => encode_user(&m.content, &mut messages),
            Role::Assistant => encode_assistant(&m.content, options, &mut messages),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model_id));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    if include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Any => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            ToolChoice::None => json!("none"),
            _ => json!("auto"),
        };
        body.insert("tool_choice".into(), choice);
    }
    let c = &request.config;
    if let Some(n) = c.max_tokens {
        let field = if max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(field.into(), json!(n));
    }
    if let Some(t) = c.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if !c.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(c.stop_sequences));
    }
    if let Some(s) = c.seed {
        body.insert("seed".into(), json!(s));
    }
    // The typed answer (SPEC §13): OpenAI applies it to the answer, not to tool calls, so it
    // goes with tools too (llama.cpp's server honours the same field).
    if let Some(f) = &request.output_format {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {
                "name": f.name, "schema": *f.schema, "strict": f.strict,
            }}),
        );
    }
    for (k, v) in extra {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

fn image_part(img: &ImageBlock) -> Value {
    json!({"type": "image_url", "image_url": {"url": image_data_url(img)}})
}

fn document_part(doc: &DocumentBlock) -> Value {
    match document_part_of(doc) {
        DocumentPart::Text(text) => json!({"type": "text", "text": text}),
        DocumentPart::File(data) => json!({"type": "file", "file": {
            "filename": doc.name,
            "file_data": data,
        }}),
    }
}

/// Content parts as a plain string when they are all text (understood by every server), else
/// as an array of parts.
fn content_value(parts: Vec<Value>) -> Value {
    if parts.iter().all(|p| p["type"] == "text") {
        let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        Value::String(texts.join("\n"))
    } else {
        Value::Array(parts)
    }
}

fn encode_user(content: &[ContentBlock], messages: &mut Vec<Value>) {
    // Tool results become `role: tool` messages, which must directly follow the assistant's
    // tool calls; the rest of the message follows as one user message.
    let mut parts = Vec::new();
    let mut media = Vec::new();
    for b in content {
        if let ContentBlock::ToolResult(r) = b {
            let text = tool_result_text(r, &mut media);
            messages.push(json!({"role": "tool", "tool_call_id": r.tool_use_id, "content": text}));
        }
    }
    for b in content {
        match b {
            ContentBlock::Text(t) => parts.push(json!({"type": "text", "text": t})),
            ContentBlock::Summary(s) => {
                parts.push(json!({"type": "text", "text": s.as_prompt_text()}));
            }
            ContentBlock::Image(img) => parts.push(image_part(img)),
            ContentBlock::Document(d) => parts.push(document_part(d)),
            _ => {}
        }
    }
    // Images from tool results cannot go into `tool` messages: they follow as user content.
    parts.extend(media.into_iter().filter_map(|c| match c {
        ToolResultContent::Image(img) => Some(image_part(img)),
        ToolResultContent::Document(d) => Some(document_part(d)),
        _ => None,
    }));
    if !parts.is_empty() {
        messages.push(json!({"role": "user", "content": content_value(parts)}));
    }
}

fn encode_assistant(content: &[ContentBlock], options: &Options<'_>, messages: &mut Vec<Value>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    // Reasoning this server wrote, and the field it wrote it in.
    let mut reasoning: Option<(&str, String)> = None;
    for b in content {
        match b {
            ContentBlock::Text(t) => text.push_str(t),
            ContentBlock::ToolUse(u) => {
                let mut call = json!({
                    "id": u.tool_use_id,
                    "type": "function",
                    "function": {"name": u.name, "arguments": u.input.to_string()},
                });
                // Gemini's thought signature, as its OpenAI-compatible endpoint sent it.
                let extra = u
                    .provider_state
                    .as_deref()
                    .and_then(|s| s.data_for(options.source)?.get(EXTRA_CONTENT));
                if let (Some(extra), Value::Object(call)) = (extra, &mut call) {
                    call.insert(EXTRA_CONTENT.into(), extra.clone());
                }
                calls.push(call);
            }
            ContentBlock::ReasoningContent(r) if options.send_reasoning_back => {
                let ReasoningContent::ReasoningText(r) = &**r else {
                    continue;
                };
                let field = r
                    .provider_state
                    .as_deref()
                    .and_then(|s| s.data_for(options.source)?.get(REASONING_FIELD)?.as_str());
                if let Some(field) = field.and_then(reasoning_field) {
                    reasoning
                        .get_or_insert_with(|| (field, String::new()))
                        .1
                        .push_str(&r.text);
                }
            }
            _ => {}
        }
    }
    let mut m = Map::new();
    m.insert("role".into(), json!("assistant"));
    if calls.is_empty() {
        m.insert("content".into(), Value::String(text));
    } else {
        if !text.is_empty() {
            m.insert("content".into(), Value::String(text));
        }
        m.insert("tool_calls".into(), Value::Array(calls));
        // DeepSeek's rule: the reasoning of a turn that called tools goes back with it.
        if let Some((field, reasoning)) = reasoning {
            m.insert(field.into(), Value::String(reasoning));
        }
    }
    messages.push(Value::Object(m));
}

/// The body written straight from the request parses to the `Value` tree it replaced, for a
/// conversation using every field and content kind, under every option and with `extra` fields
/// overriding Rein's. Compared as values: an object's key order follows serde_json's
/// `preserve_order`, which differs between a workspace and a crate-only build.
#[test]
fn the_body_written_straight_is_the_value_tree_it_replaced() {
    use rein_core::{
        Message, ProviderState, ToolResult, ToolUse,
        id::MessageId,
        message::{MediaSource, ReasoningText, Summary},
        request::{InferenceConfig, OutputFormat},
        tool::ToolSpec,
    };

    const SOURCE: &str = "openai@127.0.0.1:8080";
    let image = |bytes: &[u8]| ImageBlock {
        format: "png".into(),
        source: MediaSource::Bytes(bytes.to_vec().into()),
    };
    let document = |format: &str, name: &str| DocumentBlock {
        format: format.into(),
        name: name.into(),
        source: MediaSource::Bytes(b"a,b\n\"1\",2".to_vec().into()),
    };
    let reasoning = |text: &str, source: &str, field: &str| {
        let mut r = ReasoningText::new(text, None);
        r.provider_state = Some(Box::new(ProviderState::new(
            source,
            json!({ REASONING_FIELD: field }),
        )));
        ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(r)))
    };
    let mut signed = ToolUse::new(
        "t1",
        "lookup",
        json!({"q": "caf\u{e9} \"x\"", "n": [1, 2.5]}),
    );
    signed.provider_state = Some(Box::new(ProviderState::new(
        SOURCE,
        json!({ EXTRA_CONTENT: {"google": {"thought_signature": "c2ln"}} }),
    )));
    let mut foreign = ToolUse::new("t2", "noop", json!({}));
    foreign.provider_state = Some(Box::new(ProviderState::new(
        "gemini@other:1",
        json!({ EXTRA_CONTENT: {"google": {}} }),
    )));
    let results = Message::new(
        Role::User,
        vec![
            ContentBlock::ToolResult(Box::new(ToolResult::error("t1", "boom"))),
            ContentBlock::ToolResult(Box::new(ToolResult {
                content: vec![
                    ToolResultContent::Text("line\n".into()),
                    ToolResultContent::Json(json!({"k": [true, null]})),
                    ToolResultContent::Image(image(&[9, 8])),
                    ToolResultContent::Document(document("pdf", "r.pdf")),
                    ToolResultContent::Document(document("csv", "t.csv")),
                ],
                ..ToolResult::success("t2", "")
            })),
            ContentBlock::text("and now?"),
        ],
    );
    let messages = vec![
        Message::new(
            Role::User,
            vec![
                ContentBlock::text("look:"),
                ContentBlock::from(Summary::new(
                    "earlier",
                    MessageId::new(),
                    MessageId::new(),
                    3,
                )),
                ContentBlock::Image(Box::new(image(&[1, 2, 3]))),
                ContentBlock::Document(Box::new(document("md", "n\"ote.md"))),
                ContentBlock::Document(Box::new(document("xlsx", "s.xlsx"))),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                reasoning("think ", SOURCE, "reasoning_content"),
                reasoning("more", SOURCE, "reasoning_content"),
                reasoning("not ours", "other@h:1", "reasoning"),
                ContentBlock::text("calling "),
                ContentBlock::text("two"),
                ContentBlock::ToolUse(Box::new(signed)),
                ContentBlock::ToolUse(Box::new(foreign)),
            ],
        ),
        results,
        Message::new(
            Role::Assistant,
            vec![
                reasoning("why", SOURCE, "reasoning"),
                ContentBlock::ToolUse(Box::new(ToolUse::new("t3", "noop", json!(null)))),
            ],
        ),
        Message::new(Role::User, vec![ContentBlock::text("only text")]),
        // Reasoning of a turn without tool calls is not sent back; empty text still is.
        Message::new(Role::Assistant, vec![reasoning("r", SOURCE, "reasoning")]),
        Message::new(
            Role::User,
            vec![ContentBlock::text("a"), ContentBlock::text("b")],
        ),
        Message::assistant("done"),
    ];
    let mut config = InferenceConfig::default();
    config.max_tokens = Some(256);
    config.temperature = Some(0.7);
    config.top_p = Some(0.9);
    config.stop_sequences = vec!["END".into()];
    config.seed = Some(42);
    let tools = vec![
        ToolSpec::new(
            "lookup",
            "looks up",
            json!({"type": "object", "required": ["q"]}),
        ),
        ToolSpec::new("noop", "", json!({"type": "object"})),
    ];
    let full = ModelRequest::new(messages)
        .with_system_prompt("be brief")
        .with_tools(tools)
        .with_config(config)
        .with_output_format(OutputFormat::new("answer", json!({"type": "object"})));
    let mut extra = Map::new();
    extra.insert("temperature".into(), json!(0.1));
    extra.insert("messages_note".into(), json!("kept"));
    extra.insert("reasoning_effort".into(), json!("low"));
    let mut overriding = extra.clone();
    overriding.insert("messages".into(), json!([]));
    overriding.insert("stream".into(), json!(false));

    let mut checked = 0;
    for choice in [
        ToolChoice::Auto,
        ToolChoice::Any,
        ToolChoice::None,
        ToolChoice::Tool("lookup".into()),
    ] {
        for (include_usage, max_completion_tokens, send_reasoning_back) in
            [(true, false, true), (false, true, false)]
        {
            let options = Options {
                include_usage,
                max_completion_tokens,
                send_reasoning_back,
                source: SOURCE,
            };
            let request = full.clone().with_tool_choice(choice.clone());
            for extra in [&Map::new(), &extra, &overriding] {
                let written = super::body("m", &request, &options, extra);
                assert_eq!(written, value_body("m", &request, &options, extra));
                checked += 1;
            }
        }
    }
    let empty = ModelRequest::new(Vec::new());
    let options = Options {
        include_usage: true,
        max_completion_tokens: false,
        send_reasoning_back: true,
        source: SOURCE,
    };
    assert_eq!(
        super::body("m", &empty, &options, &Map::new()),
        value_body("m", &empty, &options, &Map::new())
    );
    assert_eq!(checked, 24);
}
