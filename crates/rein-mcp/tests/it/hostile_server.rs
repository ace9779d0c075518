//! rein-mcp against hostile MCP servers (issue 35, finding 13): a tool list without end, a
//! tool definition too large or too deep, a tool result too large; each ends with a typed
//! `McpError::TooLarge`. And the builder's `Debug` shows no secret.
//!
//! The hostile server is this test binary itself, started again as a stdio MCP server with
//! `HOSTILE_MCP_MODE` set: it speaks just enough JSON-RPC (initialize, tools/list, tools/call).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::io::{BufRead as _, Write as _};
use std::time::Duration;

use rein_mcp::{McpClient, McpError, McpLimits};
use serde_json::{Value, json};

const MODE: &str = "HOSTILE_MCP_MODE";

/// Runs as the hostile server when the test binary is started with `HOSTILE_MCP_MODE` (the
/// harness runs this test; it returns at once otherwise).
#[test]
fn hostile_server_process() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut page = 0u64;
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            continue; // a notification
        };
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => json!({
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }),
            "tools/list" => tools_page(&mode, &mut page),
            "tools/call" => {
                let text = "x".repeat(5 * 1024 * 1024);
                json!({"content": [{"type": "text", "text": text}]})
            }
            _ => json!({}),
        };
        let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

fn tool(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "description": description, "inputSchema": schema})
}

fn tools_page(mode: &str, page: &mut u64) -> Value {
    let plain = || json!({"type": "object"});
    match mode {
        // Pages of 100 tools, each pointing to a next one, without end.
        "endless_list" => {
            *page += 1;
            let tools: Vec<Value> = (0..100)
                .map(|i| tool(&format!("t{page}_{i}"), "a tool", plain()))
                .collect();
            json!({"tools": tools, "nextCursor": format!("page-{page}")})
        }
        "deep_schema" => {
            let mut schema = json!({"type": "string"});
            for _ in 0..40 {
                schema = json!({"type": "object", "properties": {"a": schema}});
            }
            json!({"tools": [tool("deep", "a deep schema", schema)]})
        }
        "big_tool" => {
            json!({"tools": [tool("big", &"d".repeat(100 * 1024), plain())]})
        }
        _ => json!({"tools": [tool("echo", "echoes", plain())]}),
    }
}

/// This test binary, started as the hostile server in `mode`.
fn server_command(mode: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "hostile_server::hostile_server_process",
        "--nocapture",
        "--quiet",
    ])
    .env(MODE, mode);
    cmd
}

async fn connect(mode: &str) -> McpClient {
    let cmd = server_command(mode);
    McpClient::builder()
        .connect_timeout(Duration::from_secs(20))
        .quiet(true)
        .command(cmd)
        .await
        .expect("connect to the hostile server")
}

fn too_large(e: &McpError) -> (&str, usize) {
    match e {
        McpError::TooLarge { what, limit, .. } => (what, *limit),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[tokio::test]
async fn a_tool_list_without_end_stops_at_max_tools() {
    let client = connect("endless_list").await;
    let e = client.tools().await.unwrap_err();
    assert_eq!(too_large(&e), ("the tool list", 1000), "{e}");
    client.close().await;
}

#[tokio::test]
async fn too_large_or_too_deep_tool_definitions_are_refused() {
    let client = connect("deep_schema").await;
    let e = client.tools().await.unwrap_err();
    assert_eq!(
        too_large(&e),
        ("the input schema of tool 'deep' (depth)", 32),
        "{e}"
    );
    client.close().await;
    let client = connect("big_tool").await;
    let e = client.tools().await.unwrap_err();
    assert_eq!(
        too_large(&e),
        ("the definition of tool 'big' (bytes)", 64 * 1024),
        "{e}"
    );
    client.close().await;
}

#[tokio::test]
async fn a_too_large_tool_result_is_a_tool_error() {
    let client = connect("plain").await;
    let tools = client.tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    let e = client.call_tool("echo", json!({})).await.unwrap_err();
    let source = e
        .source()
        .and_then(|s| s.downcast_ref::<McpError>())
        .unwrap_or_else(|| panic!("an McpError source: {e}"));
    assert_eq!(
        too_large(source),
        ("the result of tool 'echo' (bytes)", 4 * 1024 * 1024)
    );
    // A raised limit lets it through.
    client.close().await;
    let mut limits = McpLimits::default();
    limits.max_result_bytes = 8 * 1024 * 1024;
    let client = McpClient::builder()
        .limits(limits)
        .quiet(true)
        .command(server_command("plain"))
        .await
        .unwrap();
    let out = client.call_tool("echo", json!({})).await.unwrap();
    assert_eq!(out.content.len(), 1);
    client.close().await;
}

#[test]
fn the_builders_debug_shows_no_secret() {
    let builder = McpClient::builder()
        .env("API_KEY", "env-secret-value")
        .prefix("p");
    #[cfg(feature = "http")]
    let builder = builder.bearer_token("bearer-secret-token");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("env-secret-value"), "{shown}");
    assert!(!shown.contains("bearer-secret-token"), "{shown}");
    assert!(shown.contains("API_KEY"), "the names are shown: {shown}");
}

/// Finding 11 (issue 35): the HTTP transport does not follow a redirect to another origin
/// (another port of 127.0.0.1), so the bearer token never reaches it.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_transport_sends_no_token_to_another_origin() {
    use rein_models::conformance::{FixtureResponse, FixtureServer};
    let (first, other) = (
        FixtureServer::start().await.unwrap(),
        FixtureServer::start().await.unwrap(),
    );
    other.push(FixtureResponse::status(200, "{}"));
    first.push(
        FixtureResponse::status(307, "").header("location", &format!("{}/mcp", other.base_url())),
    );
    let result = McpClient::builder()
        .bearer_token("mcp-secret-token")
        .connect_timeout(Duration::from_secs(10))
        .http(format!("{}/mcp", first.base_url()))
        .await;
    assert!(result.is_err(), "no MCP server answered");
    assert!(other.requests().is_empty(), "{:?}", other.requests());
    assert_eq!(
        first.requests()[0].header("authorization"),
        Some("Bearer mcp-secret-token")
    );
}
