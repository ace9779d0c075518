//! Runnable examples for Rein (see the `[[example]]` targets), and the model choice they share.

use rein::models::{AnthropicModel, OllamaModel, OpenAiModel, SharedModel};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The environment variables [`demo_model`] reads to pick a real provider (the examples' tests
/// remove them, so they run the scripted models and never reach a provider).
pub const PROVIDER_ENV_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "OLLAMA_MODEL",
];

/// The model an example runs on: a real provider when one is configured in the environment,
/// else the example's embedded scripted model. The description says which (never the key).
///
/// - `OPENAI_API_KEY` or `OPENAI_BASE_URL` set: the OpenAI-compatible provider, model
///   `OPENAI_MODEL` (default `gpt-4o-mini`);
/// - else `ANTHROPIC_API_KEY` set: the Anthropic provider, model `ANTHROPIC_MODEL` (default
///   `claude-3-5-haiku-latest`);
/// - else `OLLAMA_MODEL` set: Ollama's native API at `OLLAMA_HOST` (default
///   `http://localhost:11434`);
/// - else the scripted model.
pub fn demo_model(scripted: impl rein::models::Model) -> (SharedModel, String) {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if var("OPENAI_API_KEY").is_some() || var("OPENAI_BASE_URL").is_some() {
        let id = var("OPENAI_MODEL").unwrap_or_else(|| "gpt-4o-mini".into());
        match OpenAiModel::from_env(id.clone()).build() {
            Ok(m) => {
                let url = m.base_url().to_owned();
                return (
                    SharedModel::new(m),
                    format!("OpenAI-compatible provider, model {id} at {url} (from OPENAI_* env)"),
                );
            }
            Err(e) => eprintln!("OpenAI provider not usable ({e}); falling back"),
        }
    }
    if var("ANTHROPIC_API_KEY").is_some() {
        let id = var("ANTHROPIC_MODEL").unwrap_or_else(|| "claude-3-5-haiku-latest".into());
        match AnthropicModel::from_env(id.clone()).build() {
            Ok(m) => {
                return (
                    SharedModel::new(m),
                    format!("Anthropic provider, model {id} (from ANTHROPIC_* env)"),
                );
            }
            Err(e) => eprintln!("Anthropic provider not usable ({e}); falling back"),
        }
    }
    if let Some(id) = var("OLLAMA_MODEL") {
        match OllamaModel::from_env(id.clone()).build() {
            Ok(m) => {
                let url = m.base_url().to_owned();
                return (
                    SharedModel::new(m),
                    format!("Ollama, model {id} at {url} (from OLLAMA_* env)"),
                );
            }
            Err(e) => eprintln!("Ollama provider not usable ({e}); falling back"),
        }
    }
    (
        SharedModel::new(scripted),
        "the embedded scripted demo model (no provider configured, no API key needed; set OPENAI_API_KEY, ANTHROPIC_API_KEY or OLLAMA_MODEL to use a real one)".into(),
    )
}

/// One request to a server on 127.0.0.1 with a bearer token, as the web console sends them
/// (the AG-UI examples are their own clients): the status and the body. A null `body` sends
/// none.
pub async fn http(
    addr: &str,
    token: &str,
    method: &str,
    path: &str,
    body: &Value,
) -> Result<(u16, String), Box<dyn std::error::Error>> {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// The JSON events of an SSE body (an AG-UI run's events).
pub fn sse_events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// The MCP reference server (`@modelcontextprotocol/server-everything`) the command in
/// `REIN_MCP_EVERYTHING` starts (set by `.ci/peers-mcp.sh`), connected over stdio. Its tools
/// are named `everything__<tool>` (the default prefix, from the server's name).
pub async fn reference_mcp_server() -> Result<rein::mcp::McpClient, Box<dyn std::error::Error>> {
    let command = std::env::var("REIN_MCP_EVERYTHING")?;
    let command: Vec<&str> = command.split_whitespace().collect();
    let (program, args) = command.split_first().ok_or("empty REIN_MCP_EVERYTHING")?;
    let client = rein::mcp::McpClient::builder()
        .quiet(true)
        .stdio(program, args)
        .await?;
    Ok(client)
}
