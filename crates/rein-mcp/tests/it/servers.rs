//! rein-mcp against the real MCP reference servers (`@modelcontextprotocol/server-everything`
//! and `server-filesystem`, installed by `.ci/peers-mcp.sh`).
//!
//! The servers are found through `REIN_MCP_EVERYTHING` and `REIN_MCP_FILESYSTEM` (commands,
//! split on whitespace). Without them the tests print SKIPPED and pass, except under CI (`CI`
//! set), where they fail. Locally:
//! `bash .ci/peers-mcp.sh target/peers && source target/peers/env && cargo test -p rein-mcp`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use rein_core::{
    ToolHandle,
    id::InvocationId,
    interrupt::InterruptAnswers,
    message::{ToolResultContent, ToolResultStatus},
    state::{AgentState, InvocationState},
    tool::{ToolContext, ToolOutput},
};
use rein_mcp::{McpClient, McpError};
use serde_json::{Value, json};

/// The server command from `var`, or `None` (after a loud SKIPPED) when it is not set.
pub(crate) fn server(var: &str) -> Option<Vec<String>> {
    match std::env::var(var) {
        Ok(cmd) if !cmd.trim().is_empty() => {
            Some(cmd.split_whitespace().map(str::to_owned).collect())
        }
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{var} is not set under CI: .ci/peers-mcp.sh must run first"
            );
            eprintln!(
                "\n*** SKIPPED: {var} is not set. Run `bash .ci/peers-mcp.sh target/peers && \
                 source target/peers/env` to test against the real MCP server. ***\n"
            );
            None
        }
    }
}

pub(crate) async fn connect(
    var: &str,
    extra_args: &[&str],
    builder: rein_mcp::McpClientBuilder,
) -> Option<McpClient> {
    let cmd = server(var)?;
    let (program, args) = cmd.split_first().expect("empty command");
    let args: Vec<String> = args
        .iter()
        .cloned()
        .chain(extra_args.iter().map(|s| (*s).to_owned()))
        .collect();
    Some(
        builder
            .quiet(true)
            .stdio(program, args)
            .await
            .expect("connect to MCP server"),
    )
}

pub(crate) fn cx(name: &str) -> ToolContext {
    ToolContext::new(
        "tu-1",
        name,
        InvocationId::new(),
        InvocationState::new(),
        AgentState::new(),
        InterruptAnswers::default(),
    )
}

/// The local name of server-everything's tool `tool` (the default prefix, from the server's
/// name `mcp-servers/everything`).
pub(crate) fn ev(tool: &str) -> String {
    format!("everything__{tool}")
}

pub(crate) fn find<'a>(tools: &'a [ToolHandle], name: &str) -> &'a ToolHandle {
    tools
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:?}"))
}

pub(crate) fn only_text(out: &ToolOutput) -> &str {
    match out.content.as_slice() {
        [ToolResultContent::Text(t)] => t,
        other => panic!("expected one text block, got {other:?}"),
    }
}

#[tokio::test]
async fn everything_lists_tools_and_calls_echo_and_sum() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    assert!(client.server_name().is_some());
    let tools = client.tools().await.unwrap();
    for name in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "trigger-long-running-operation",
    ] {
        find(&tools, &ev(name));
    }
    let echo = find(&tools, &ev("echo"));
    assert_eq!(echo.spec().description, "Echoes back the input string");
    assert_eq!(echo.spec().input_schema["type"], "object");
    assert_eq!(
        echo.spec().input_schema["properties"]["message"]["type"],
        "string"
    );

    let out = echo
        .call(json!({"message": "hello rein"}), cx("echo"))
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Success);
    assert_eq!(only_text(&out), "Echo: hello rein");

    let sum = find(&tools, &ev("get-sum"));
    let out = sum
        .call(json!({"a": 2, "b": 40}), cx("get-sum"))
        .await
        .unwrap();
    assert_eq!(only_text(&out), "The sum of 2 and 40 is 42.");

    // Concurrent calls over one connection.
    let calls = (0..8).map(|i| {
        let sum = sum.clone();
        async move { sum.call(json!({"a": i, "b": 1}), cx("get-sum")).await }
    });
    let outs = futures_join_all(calls).await;
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.unwrap();
        assert_eq!(
            only_text(&out),
            format!("The sum of {i} and 1 is {}.", i + 1)
        );
    }
    client.close().await;
}

/// `join_all` without a futures dependency: spawn on the test runtime.
async fn futures_join_all<F>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn everything_prefixed_names_call_the_server_names() {
    let Some(client) = connect(
        "REIN_MCP_EVERYTHING",
        &[],
        McpClient::builder().prefix("ev"),
    )
    .await
    else {
        return;
    };
    let tools = client.tools().await.unwrap();
    assert!(
        tools.iter().all(|t| t.name().starts_with("ev__")),
        "{tools:?}"
    );
    let sum = find(&tools, "ev__get-sum");
    let out = sum
        .call(json!({"a": 1, "b": 2}), cx("ev__get-sum"))
        .await
        .unwrap();
    assert_eq!(only_text(&out), "The sum of 1 and 2 is 3.");
    // Direct calls use the server's own names.
    let out = client
        .call_tool("echo", json!({"message": "x"}))
        .await
        .unwrap();
    assert_eq!(only_text(&out), "Echo: x");
}

#[tokio::test]
async fn everything_image_structured_content_and_resources() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let out = client.call_tool("get-tiny-image", json!({})).await.unwrap();
    assert_eq!(out.status, ToolResultStatus::Success);
    let image = out
        .content
        .iter()
        .find_map(|c| match c {
            ToolResultContent::Image(i) => Some(i),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no image in {out:?}"));
    assert_eq!(image.format, "png");
    let rein_core::message::MediaSource::Bytes(bytes) = &image.source else {
        panic!("not bytes")
    };
    assert_eq!(&bytes.0[..8], b"\x89PNG\r\n\x1a\n");

    let out = client
        .call_tool("get-structured-content", json!({"location": "Chicago"}))
        .await
        .unwrap();
    assert_eq!(
        out.content,
        vec![ToolResultContent::Json(json!({
            "temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82
        }))]
    );

    let out = client
        .call_tool(
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 1}),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Success, "{out:?}");
    assert!(
        out.content
            .iter()
            .all(|c| matches!(c, ToolResultContent::Text(_))),
        "{out:?}"
    );
}

#[tokio::test]
async fn everything_errors() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    // A tool that throws: an `isError` result, so an error status the model sees.
    let out = client
        .call_tool(
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": -3}),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Error);
    let text = only_text(&out);
    assert!(
        text.contains("Invalid resourceId: -3. Must be a finite positive integer."),
        "{text}"
    );

    // Arguments the server's own validation rejects: also an error result.
    let out = client
        .call_tool(
            "get-resource-reference",
            json!({"resourceType": "Nope", "resourceId": 1}),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Error);
    assert!(only_text(&out).contains("resourceType"), "{out:?}");

    // Arguments the server rejects.
    let out = client
        .call_tool("get-sum", json!({"a": "one", "b": 2}))
        .await;
    match out {
        Ok(out) => assert_eq!(out.status, ToolResultStatus::Error, "{out:?}"),
        Err(e) => assert!(e.message().contains("tools/call"), "{e}"),
    }

    // An unknown tool.
    match client.call_tool("no-such-tool", json!({})).await {
        Ok(out) => assert_eq!(out.status, ToolResultStatus::Error, "{out:?}"),
        Err(e) => assert!(e.message().contains("no-such-tool"), "{e}"),
    }

    // Not an object: refused before reaching the server.
    let err = client.call_tool("echo", json!([1])).await.unwrap_err();
    assert!(err.message().contains("expected a JSON object"), "{err}");
}

#[tokio::test]
async fn everything_timeout_then_the_connection_still_works() {
    let Some(client) = connect(
        "REIN_MCP_EVERYTHING",
        &[],
        McpClient::builder().timeout(Duration::from_millis(500)),
    )
    .await
    else {
        return;
    };
    let tools = client.tools().await.unwrap();
    let slow = find(&tools, &ev("trigger-long-running-operation"));
    let started = std::time::Instant::now();
    let err = slow
        .call(json!({"duration": 5, "steps": 1}), cx("slow"))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.message().contains("timed out after 500ms"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("trigger-long-running-operation"));
    let source = err.source().expect("source");
    assert!(source.downcast_ref::<McpError>().is_some());

    let out = find(&tools, &ev("echo"))
        .call(json!({"message": "still here"}), cx("echo"))
        .await
        .unwrap();
    assert_eq!(only_text(&out), "Echo: still here");

    // A longer timeout lets the same operation finish.
    let patient = client.clone().with_timeout(Duration::from_secs(20));
    let out = patient
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 1, "steps": 1}),
        )
        .await
        .unwrap();
    assert!(only_text(&out).starts_with("Long running operation completed"));
}

#[tokio::test]
async fn stdio_servers_do_not_inherit_secrets() {
    // `REIN_MCP_EVERYTHING` (set in this process) stands for a secret: a server started with
    // the default options must not see it; one started with `inherit_env(true)` does.
    let Some(restricted) = connect(
        "REIN_MCP_EVERYTHING",
        &[],
        McpClient::builder().env("REIN_VISIBLE", "yes"),
    )
    .await
    else {
        return;
    };
    let out = restricted.call_tool("get-env", json!({})).await.unwrap();
    let env: Value = serde_json::from_str(only_text(&out)).unwrap();
    assert_eq!(env["REIN_VISIBLE"], "yes", "{env}");
    assert!(env.get("PATH").is_some());
    assert!(env.get("REIN_MCP_EVERYTHING").is_none(), "{env}");
    assert!(env.get("CARGO").is_none(), "{env}");

    let inheriting = connect(
        "REIN_MCP_EVERYTHING",
        &[],
        McpClient::builder().inherit_env(true),
    )
    .await
    .unwrap();
    let out = inheriting.call_tool("get-env", json!({})).await.unwrap();
    let env: Value = serde_json::from_str(only_text(&out)).unwrap();
    assert!(env.get("REIN_MCP_EVERYTHING").is_some());
}

#[tokio::test]
async fn closed_client_fails_calls() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let tools = client.tools().await.unwrap();
    client.close().await;
    client.close().await; // twice is fine
    let err = find(&tools, &ev("echo"))
        .call(json!({"message": "x"}), cx("echo"))
        .await
        .unwrap_err();
    assert!(err.message().contains("closed"), "{err}");
}

#[tokio::test]
async fn spawn_failure_is_a_typed_error() {
    let err = McpClient::connect_stdio("/definitely/not/a/program", ["x"])
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Spawn { .. }), "{err:?}");
    // A process that is not an MCP server.
    let err = McpClient::builder()
        .connect_timeout(Duration::from_secs(5))
        .quiet(true)
        .stdio("sh", ["-c", "echo not-json; exec sleep 30"])
        .await
        .unwrap_err();
    assert!(
        matches!(err, McpError::Connect { .. } | McpError::Timeout { .. }),
        "{err:?}"
    );
}

/// A fresh directory under the system temp dir (removed on drop).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "rein-mcp-test-{}-{}",
            std::process::id(),
            InvocationId::new()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir.canonicalize().unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn filesystem_reads_a_file_in_a_temp_dir() {
    let dir = TempDir::new();
    let file = dir.0.join("notes.txt");
    std::fs::write(&file, "first line\nsecond line\n").unwrap();
    let root = dir.0.to_str().unwrap().to_owned();
    let Some(client) = connect(
        "REIN_MCP_FILESYSTEM",
        &[&root],
        McpClient::builder().prefix("fs"),
    )
    .await
    else {
        return;
    };
    let tools = client.tools().await.unwrap();
    let read = find(&tools, "fs__read_text_file");
    let out = read
        .call(
            json!({"path": file.to_str().unwrap()}),
            cx("fs__read_text_file"),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Success);
    assert_eq!(only_text(&out), "first line\nsecond line\n");

    let out = read
        .call(
            json!({"path": file.to_str().unwrap(), "head": 1}),
            cx("fs__read_text_file"),
        )
        .await
        .unwrap();
    assert_eq!(only_text(&out), "first line");

    // Outside the allowed directory: the server refuses, as an error result.
    let out = read
        .call(json!({"path": "/etc/hostname"}), cx("fs__read_text_file"))
        .await
        .unwrap();
    assert_eq!(out.status, ToolResultStatus::Error, "{out:?}");

    let list = find(&tools, "fs__list_directory");
    let out = list
        .call(json!({"path": root}), cx("fs__list_directory"))
        .await
        .unwrap();
    let Value::String(_) = json!(only_text(&out)) else {
        unreachable!()
    };
    assert!(only_text(&out).contains("notes.txt"), "{out:?}");
}

#[cfg(feature = "http")]
#[tokio::test]
async fn everything_over_streamable_http() {
    use tokio::io::AsyncBufReadExt;
    let Some(cmd) = server("REIN_MCP_EVERYTHING") else {
        return;
    };
    // `node <index.js> stdio` -> `node <index.js> streamableHttp`, bound to 127.0.0.1 only
    // (the server itself listens on every interface: a preloaded module pins the host).
    let dir = TempDir::new();
    let pin = dir.0.join("pin-localhost.mjs");
    std::fs::write(
        &pin,
        r#"import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== "string") args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
"#,
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (program, args) = cmd.split_first().unwrap();
    let script = args.first().expect("script path").clone();
    let mut child = tokio::process::Command::new(program)
        .arg("--import")
        .arg(format!("file://{}", pin.display()))
        .arg(&script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait for "listening" on stderr (bounded).
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening") {
                return;
            }
        }
        panic!("server exited before listening");
    })
    .await
    .expect("server did not start in 20 s");
    // Keep draining stderr so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    // Only the loopback address is served.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "not on 127.0.0.1"
    );

    let client = McpClient::builder()
        .prefix("http")
        .timeout(Duration::from_secs(10))
        .http(format!("http://127.0.0.1:{port}/mcp"))
        .await
        .expect("connect over HTTP");
    let tools = client.tools().await.unwrap();
    let echo = find(&tools, "http__echo");
    let out = echo
        .call(json!({"message": "over http"}), cx("http__echo"))
        .await
        .unwrap();
    assert_eq!(only_text(&out), "Echo: over http");
    let out = client.call_tool("get-tiny-image", json!({})).await.unwrap();
    assert!(
        out.content
            .iter()
            .any(|c| matches!(c, ToolResultContent::Image(_)))
    );
    client.close().await;
    child.kill().await.unwrap();
}

/// A writer the progress test's subscriber logs into.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Issue 42, item 4: a call carries a progress token of its own, and the server's progress
/// notifications for it are logged (event `MCP progress`) with the server and the tool.
#[tokio::test]
async fn everything_progress_is_traced_with_the_tool() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    // The test's runtime has one thread: the connection's tasks log into this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    let tools = client.tools().await.unwrap();
    let slow = find(&tools, &ev("trigger-long-running-operation"));
    slow.call(json!({"duration": 0.3, "steps": 3}), cx("slow"))
        .await
        .unwrap();
    client.close().await;
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("MCP progress")).collect();
    assert!(!lines.is_empty(), "{log}");
    for l in &lines {
        assert!(l.contains("tool=trigger-long-running-operation"), "{l}");
        assert!(l.contains("total=3.0"), "{l}");
        assert!(l.contains(" rein_mcp: MCP progress"), "{l}");
    }
    assert!(lines.iter().any(|l| l.contains("progress=1.0")), "{log}");
}
