//! Resources and prompts of an MCP server, from code (`McpClient::resources`,
//! `read_resource`, `resource_templates`, `prompts`, `prompt`), and — where the user opts in —
//! as tools for the model (`McpClient::resource_tools`, `McpClient::prompt_tools`).
//!
//! The server's answers are read through their wire JSON into Rein's own types, so the MCP
//! SDK's types stay out of the API.

use std::collections::HashMap;
use std::future::Future;

use base64::Engine as _;
use rein_core::{
    Message, ToolHandle,
    message::{ContentBlock, Role, ToolResultContent, ToolResultStatus},
    tool::{ToolError, ToolOutput},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{McpClient, McpError, json_size, map_block};

/// A resource a server offers (`resources/list`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct McpResource {
    /// Its URI (what [`McpClient::read_resource`] takes).
    pub uri: String,
    /// Its name.
    pub name: String,
    /// A title for people.
    #[serde(default)]
    pub title: Option<String>,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(default)]
    pub mime_type: Option<String>,
    /// Its size in bytes, when the server says.
    #[serde(default)]
    pub size: Option<u64>,
}

/// A family of resources a server offers by URI template (`resources/templates/list`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct McpResourceTemplate {
    /// The RFC 6570 URI template (`file:///{path}`).
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// A title for people.
    #[serde(default)]
    pub title: Option<String>,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// The MIME type of its resources.
    #[serde(default)]
    pub mime_type: Option<String>,
}

/// One part of a resource read (`resources/read`): text, or bytes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum McpResourceContents {
    /// Text content.
    Text {
        /// The URI of this part.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// Binary content (decoded from the wire's base64).
    Blob {
        /// The URI of this part.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// The bytes.
        data: Vec<u8>,
    },
}

/// A prompt template a server offers (`prompts/list`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct McpPrompt {
    /// Its name (what [`McpClient::prompt`] takes).
    pub name: String,
    /// A title for people.
    #[serde(default)]
    pub title: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub arguments: Vec<McpPromptArgument>,
}

/// An argument of a prompt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct McpPromptArgument {
    /// Its name.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether the prompt needs it.
    #[serde(default)]
    pub required: bool,
}

impl McpClient {
    /// The server's resources (every page of `resources/list`, at most
    /// [`McpLimits::max_tools`](crate::McpLimits::max_tools) of them).
    pub async fn resources(&self) -> Result<Vec<McpResource>, McpError> {
        self.list("resources/list", "resources", |params| async move {
            let page = self.inner.peer.list_resources(params).await?;
            Ok((serde_json::to_value(page.resources)?, page.next_cursor))
        })
        .await
    }

    /// The server's resource templates (every page of `resources/templates/list`).
    pub async fn resource_templates(&self) -> Result<Vec<McpResourceTemplate>, McpError> {
        self.list(
            "resources/templates/list",
            "resource templates",
            |params| async move {
                let page = self.inner.peer.list_resource_templates(params).await?;
                Ok((
                    serde_json::to_value(page.resource_templates)?,
                    page.next_cursor,
                ))
            },
        )
        .await
    }

    /// The server's prompts (every page of `prompts/list`).
    pub async fn prompts(&self) -> Result<Vec<McpPrompt>, McpError> {
        self.list("prompts/list", "prompts", |params| async move {
            let page = self.inner.peer.list_prompts(params).await?;
            Ok((serde_json::to_value(page.prompts)?, page.next_cursor))
        })
        .await
    }

    /// Reads the resource `uri`: its parts, text or bytes. At most
    /// [`McpLimits::max_result_bytes`](crate::McpLimits::max_result_bytes) as JSON.
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<McpResourceContents>, McpError> {
        let params = serde_json::from_value(json!({"uri": uri}))
            .map_err(|e| self.request_error("resources/read", e))?;
        let read = self
            .bounded("resources/read", self.inner.peer.read_resource(params))
            .await?;
        if json_size(&read) > self.limits.max_result_bytes {
            return Err(self.too_large(
                &format!("the resource '{uri}' (bytes)"),
                self.limits.max_result_bytes,
            ));
        }
        let contents = serde_json::to_value(read.contents).unwrap_or(Value::Null);
        Ok(contents
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(contents_of)
            .collect())
    }

    /// The prompt `name` with `arguments` (a JSON object of strings, or `null`), as Rein
    /// messages: each of the server's messages with its role; text as text, an image as an
    /// image block, an embedded resource's text as text, anything else described in a text
    /// block (as in tool results, see [`McpClient::call_tool`]).
    pub async fn prompt(&self, name: &str, arguments: Value) -> Result<Vec<Message>, McpError> {
        let mut params = json!({"name": name});
        if !arguments.is_null() {
            params["arguments"] = arguments;
        }
        let params =
            serde_json::from_value(params).map_err(|e| self.request_error("prompts/get", e))?;
        let response = self
            .bounded("prompts/get", self.inner.peer.get_prompt_once(params))
            .await?;
        let rmcp::model::GetPromptResponse::Complete(prompt) = response else {
            return Err(self.unsupported(format!(
                "prompt '{name}' asked for client-side input, which Rein does not give prompts"
            )));
        };
        if json_size(&prompt) > self.limits.max_result_bytes {
            return Err(self.too_large(
                &format!("the prompt '{name}' (bytes)"),
                self.limits.max_result_bytes,
            ));
        }
        Ok(prompt
            .messages
            .into_iter()
            .map(|m| {
                let role = match m.role {
                    rmcp::model::Role::Assistant => Role::Assistant,
                    _ => Role::User,
                };
                let block = match map_block(m.content) {
                    ToolResultContent::Text(t) => ContentBlock::Text(t),
                    ToolResultContent::Image(i) => ContentBlock::from(i),
                    ToolResultContent::Document(d) => ContentBlock::from(d),
                    ToolResultContent::Json(v) => ContentBlock::Text(v.to_string()),
                    #[allow(unreachable_patterns)]
                    _ => ContentBlock::Text("[unsupported MCP content]".into()),
                };
                Message::new(role, vec![block])
            })
            .collect())
    }

    /// The server's resources as two tools for the model — opt in by adding them to the
    /// agent: `<alias>__list_resources` (no input: the resources' URIs, names, descriptions
    /// and types, as JSON) and `<alias>__read_resource` (`{"uri": ...}`: the text of its text
    /// parts; an image part as an image; other bytes described). Interventions see them as
    /// any tool (a policy on `<alias>__read_resource` can allow some URIs only).
    pub fn resource_tools(&self) -> Vec<ToolHandle> {
        let lister = self.clone();
        let list = ToolHandle::from_fn(
            self.local_name("list_resources"),
            format!(
                "Lists the resources of the MCP server {}.",
                self.inner.server
            ),
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            move |_input, _cx| {
                let client = lister.clone();
                async move {
                    let listed = client.resources().await?;
                    let listed: Vec<Value> = listed
                        .iter()
                        .map(|r| {
                            json!({"uri": r.uri, "name": r.name, "description": r.description,
                                   "mimeType": r.mime_type})
                        })
                        .collect();
                    Ok(ToolOutput::json(Value::Array(listed)))
                }
            },
        );
        let reader = self.clone();
        let read = ToolHandle::from_fn(
            self.local_name("read_resource"),
            format!(
                "Reads a resource of the MCP server {} by its URI.",
                self.inner.server
            ),
            json!({
                "type": "object",
                "properties": {"uri": {"type": "string", "description": "the resource's URI"}},
                "required": ["uri"],
                "additionalProperties": false,
            }),
            move |input, _cx| {
                let client = reader.clone();
                async move {
                    let uri = input["uri"]
                        .as_str()
                        .ok_or_else(|| ToolError::msg("`uri` must be a string"))?;
                    let parts = client.read_resource(uri).await?;
                    let content = parts.into_iter().map(part_for_the_model).collect();
                    Ok(ToolOutput::new(ToolResultStatus::Success, content))
                }
            },
        );
        vec![list, read]
    }

    /// The server's prompts as tools for the model, one per prompt — opt in by adding them to
    /// the agent. The prompt `p` is the tool `<alias>__prompt_<p>` (named as
    /// [`tools`](Self::tools) names the server's tools); its input is an object of the
    /// prompt's arguments, each a string, the required ones required, no other; its result is
    /// the prompt's messages, each a text block `<role>: <text>` (an image or a document as
    /// itself). Under the limits of the server's tools: at most
    /// [`McpLimits::max_tools`](crate::McpLimits::max_tools) prompts, each definition at most
    /// [`McpLimits::max_tool_bytes`](crate::McpLimits::max_tool_bytes) as JSON (else
    /// [`McpError::TooLarge`]), each result at most
    /// [`McpLimits::max_result_bytes`](crate::McpLimits::max_result_bytes) (else an error the
    /// model sees). The list is the server's as of this call.
    pub async fn prompt_tools(&self) -> Result<Vec<ToolHandle>, McpError> {
        let mut named = HashMap::new();
        self.prompts()
            .await?
            .into_iter()
            .map(|prompt| {
                let local = self.local_name(&format!("prompt_{}", prompt.name));
                if let Some(other) = named.insert(local.clone(), prompt.name.clone()) {
                    return Err(self.unsupported(format!(
                        "prompts '{other}' and '{}' would both be named '{local}'",
                        prompt.name
                    )));
                }
                let description = prompt
                    .description
                    .clone()
                    .or_else(|| prompt.title.clone())
                    .unwrap_or_else(|| format!("The prompt '{}'", prompt.name));
                let description = format!(
                    "{description} (a prompt of the MCP server {}: gives its messages)",
                    self.inner.server
                );
                let schema = prompt_schema(&prompt.arguments);
                let spec = rein_core::tool::ToolSpec::new(local, description, schema);
                if crate::json_size(&spec) > self.limits.max_tool_bytes {
                    return Err(self.too_large(
                        &format!("the definition of prompt '{}' (bytes)", prompt.name),
                        self.limits.max_tool_bytes,
                    ));
                }
                let client = self.clone();
                let remote = prompt.name;
                Ok(ToolHandle::from_fn(
                    spec.name,
                    spec.description,
                    spec.input_schema,
                    move |input, _cx| {
                        let client = client.clone();
                        let remote = remote.clone();
                        async move {
                            let messages = client.prompt(&remote, input).await?;
                            Ok(ToolOutput::new(
                                ToolResultStatus::Success,
                                messages
                                    .into_iter()
                                    .flat_map(message_for_the_model)
                                    .collect(),
                            ))
                        }
                    },
                ))
            })
            .collect()
    }

    /// Every page of a list, at most `max_tools` items in all, within the connect timeout.
    async fn list<T, F, Fut>(&self, method: &str, what: &str, page: F) -> Result<Vec<T>, McpError>
    where
        T: serde::de::DeserializeOwned,
        F: Fn(Option<rmcp::model::PaginatedRequestParams>) -> Fut,
        Fut: Future<Output = Result<(Value, Option<String>), ListError>>,
    {
        let all = async {
            let mut items = Vec::new();
            let mut cursor = None;
            loop {
                let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                let (listed, next) = page(Some(params)).await.map_err(|e| match e {
                    ListError::Service(e) => self.request_error(method, e),
                    ListError::Json(e) => self.request_error(method, e),
                })?;
                let listed: Vec<T> =
                    serde_json::from_value(listed).map_err(|e| self.request_error(method, e))?;
                items.extend(listed);
                if items.len() > self.limits.max_tools {
                    return Err(
                        self.too_large(&format!("the list of {what}"), self.limits.max_tools)
                    );
                }
                cursor = next;
                if cursor.is_none() {
                    return Ok(items);
                }
            }
        };
        self.bounded(method, async { Ok::<_, rmcp::ServiceError>(all.await) })
            .await?
    }

    /// `request` within the connect timeout, its error named by `method`.
    pub(crate) async fn bounded<T>(
        &self,
        method: &str,
        request: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        match tokio::time::timeout(self.connect_timeout, request).await {
            Err(_) => Err(McpError::Timeout {
                server: self.inner.server.clone(),
                what: method.to_owned(),
                timeout: self.connect_timeout,
            }),
            Ok(Err(e)) => Err(self.request_error(method, e)),
            Ok(Ok(v)) => Ok(v),
        }
    }
}

/// Why one page of a list failed.
enum ListError {
    Service(rmcp::ServiceError),
    Json(serde_json::Error),
}

impl From<rmcp::ServiceError> for ListError {
    fn from(e: rmcp::ServiceError) -> Self {
        Self::Service(e)
    }
}

impl From<serde_json::Error> for ListError {
    fn from(e: serde_json::Error) -> Self {
        Self::Json(e)
    }
}

/// The input schema of a prompt's tool: its arguments as string properties.
fn prompt_schema(arguments: &[McpPromptArgument]) -> Value {
    let properties: serde_json::Map<String, Value> = arguments
        .iter()
        .map(|a| {
            let mut property = json!({"type": "string"});
            if let Some(d) = &a.description {
                property["description"] = Value::String(d.clone());
            }
            (a.name.clone(), property)
        })
        .collect();
    let required: Vec<&str> = arguments
        .iter()
        .filter(|a| a.required)
        .map(|a| a.name.as_str())
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A prompt's message as the model gets it from a prompt tool: its text as `<role>: <text>`,
/// an image or a document as itself.
fn message_for_the_model(message: Message) -> Vec<ToolResultContent> {
    let role = match message.role {
        Role::Assistant => "assistant",
        _ => "user",
    };
    let mut out = vec![ToolResultContent::Text(format!(
        "{role}: {}",
        message.text()
    ))];
    for block in message.content {
        match block {
            ContentBlock::Image(i) => out.push(ToolResultContent::Image(*i)),
            ContentBlock::Document(d) => out.push(ToolResultContent::Document(*d)),
            _ => {}
        }
    }
    out
}

/// One part of `resources/read`'s wire JSON; `None` for a part with neither text nor blob.
fn contents_of(part: &Value) -> Option<McpResourceContents> {
    let uri = part
        .get("uri")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mime_type = part
        .get("mimeType")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Some(McpResourceContents::Text {
            uri,
            mime_type,
            text: text.to_owned(),
        });
    }
    let blob = part.get("blob").and_then(Value::as_str)?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(blob.trim())
        .ok()?;
    Some(McpResourceContents::Blob {
        uri,
        mime_type,
        data,
    })
}

/// A resource part as the model gets it from `read_resource`: text as text, an image as an
/// image, other bytes described.
fn part_for_the_model(part: McpResourceContents) -> ToolResultContent {
    match part {
        McpResourceContents::Text { text, .. } => ToolResultContent::Text(text),
        McpResourceContents::Blob {
            uri,
            mime_type,
            data,
        } => {
            let wire = json!({
                "uri": uri,
                "mimeType": mime_type,
                "blob": base64::engine::general_purpose::STANDARD.encode(&data),
            });
            match serde_json::from_value::<rmcp::model::ResourceContents>(wire) {
                Ok(contents) => crate::resource(&contents),
                Err(_) => ToolResultContent::Text(format!("[resource {uri}: not shown]")),
            }
        }
    }
}
