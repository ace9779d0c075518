//! `rein mcp serve`: spawn the binary and call its tools with Rein's own MCP client, over stdio
//! and over Streamable HTTP, the policy file of `rein serve` in front of each call.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use rein_core::message::ToolResultStatus;
use rein_mcp::McpClient;
use serde_json::json;

/// A root with a file and a secret, and the repository's chat policy.
fn root(test: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("rein-mcp-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "hello from a").unwrap();
    std::fs::write(dir.join(".env"), "KEY=1").unwrap();
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/chat.toml"
    );
    (dir, policy.to_owned())
}

/// A served process, killed when dropped: a failing test leaves no server behind (it would
/// also hold the test run's output open).
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rein mcp serve --http 127.0.0.1:0` on `dir` with `policy` and `extra` arguments: the
/// process, the rest of its stdout, the endpoint's URL (its first line).
fn serve_http(
    dir: &std::path::Path,
    policy: &str,
    extra: &[&str],
) -> (
    Served,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
    String,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "mcp",
            "serve",
            "--http",
            "127.0.0.1:0",
            "--policy",
            policy,
            "--root",
        ])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url_line = lines.next().unwrap().unwrap();
    let url = url_line.rsplit(' ').next().unwrap().to_owned();
    (Served(child), lines, url)
}

/// Calls through `client`: a read, a denied read, a delete that needs an approval nobody gives.
async fn exercise(client: &McpClient, dir: &std::path::Path) {
    let tools = client.tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name().to_owned()).collect();
    assert!(names.contains(&"read_file".to_owned()), "{names:?}");
    assert!(names.contains(&"delete_file".to_owned()), "{names:?}");

    let read = client
        .call_tool("read_file", json!({"path": "a.txt"}))
        .await
        .unwrap();
    assert_eq!(read.status, ToolResultStatus::Success);
    assert!(format!("{:?}", read.content).contains("hello from a"));

    let secret = client
        .call_tool("read_file", json!({"path": ".env"}))
        .await
        .unwrap();
    assert_eq!(secret.status, ToolResultStatus::Error);
    let text = format!("{:?}", secret.content);
    assert!(text.contains("may hold secrets"), "{text}");
    assert!(!text.contains("KEY=1"), "{text}");

    // The Confirm of `delete-approval` is an elicitation; outside a run Rein's client cannot
    // pause for a human, so nobody approves: the file stays.
    let delete = client
        .call_tool("delete_file", json!({"path": "a.txt"}))
        .await;
    assert!(
        delete
            .as_ref()
            .map_or(true, |o| o.status == ToolResultStatus::Error),
        "{delete:?}"
    );
    assert!(
        dir.join("a.txt").exists(),
        "an unapproved delete never runs"
    );
}

#[tokio::test]
async fn stdio_serves_the_tools_behind_the_policy() {
    let (dir, policy) = root("stdio");
    // The names as served (a client prefixes a server's tools by default).
    let client = McpClient::builder()
        .no_prefix()
        .stdio(
            env!("CARGO_BIN_EXE_rein"),
            [
                "mcp",
                "serve",
                "--root",
                dir.to_str().unwrap(),
                "--policy",
                &policy,
            ],
        )
        .await
        .unwrap();
    exercise(&client, &dir).await;
    client.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn http_prints_a_token_once_and_requires_it() {
    let (dir, policy) = root("http");
    let (child, mut lines, url) = serve_http(&dir, &policy, &[]);
    let token_line = lines.next().unwrap().unwrap();
    let token = token_line
        .strip_prefix("rein mcp serve: token ")
        .unwrap()
        .to_owned();
    assert_eq!(token.len(), 64, "{token_line}");

    // Without the token: 401.
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/mcp"))
        .unwrap()
        .to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 401"), "{out}");

    let client = McpClient::builder()
        .no_prefix()
        .bearer_token(token)
        .http(url)
        .await
        .unwrap();
    exercise(&client, &dir).await;
    client.close().await;
    drop(child);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Where `.ci/peers-mcp.sh` installed a third-party peer (the environment variable `var` it
/// sets); `None` (SKIPPED) without it, except under CI, where a missing peer fails the test.
fn peer(var: &str) -> Option<std::ffi::OsString> {
    let found = std::env::var_os(var);
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{var} is not set under CI: .ci/peers-mcp.sh must run first"
        );
        eprintln!("SKIPPED: {var} is not set (.ci/peers-mcp.sh)");
    }
    found
}

/// The official TypeScript SDK's client (`.ci/e2e/mcp-sdk-client.cjs`, the SDK found through
/// `REIN_MCP_SDK`, set by `.ci/peers-mcp.sh`) against `rein mcp serve`: what it saw, as JSON.
/// `None` (SKIPPED) without the SDK, except under CI.
fn sdk_client(approve: &str, target: &[&str]) -> Option<serde_json::Value> {
    let sdk = peer("REIN_MCP_SDK")?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.ci/e2e/mcp-sdk-client.cjs"
    );
    let out = Command::new("node")
        .arg(script)
        .arg(target[0])
        .arg(approve)
        .args(&target[1..])
        .env("REIN_MCP_SDK", sdk)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "the SDK client failed: {out:?}");
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// What the SDK client saw, with `approve` its answer to the delete's approval.
fn check_sdk_run(seen: &serde_json::Value, approve: &str) {
    assert_eq!(
        seen["tools"],
        json!(["read_file", "list_dir", "current_time", "delete_file"])
    );
    assert_eq!(
        seen["read"],
        json!({"isError": false, "text": "hello from a"})
    );
    assert_eq!(seen["secret"]["isError"], true);
    assert!(
        seen["secret"]["text"]
            .as_str()
            .unwrap()
            .contains("may hold secrets")
    );
    let delete = &seen["delete"];
    match approve {
        "yes" => {
            assert_eq!(delete["isError"], false, "{seen}");
            assert_eq!(seen["asked"], json!(["delete a.txt"]));
        }
        "no" => {
            assert_eq!(delete["isError"], true, "{seen}");
            assert_eq!(seen["asked"], json!(["delete a.txt"]));
        }
        _ => {
            assert_eq!(delete["isError"], true, "{seen}");
            let text = delete["text"].as_str().unwrap();
            assert!(
                text.contains("did not declare the elicitation capability"),
                "{text}"
            );
        }
    }
}

#[test]
fn the_typescript_sdk_client_over_stdio_sees_the_policy_and_answers_approvals() {
    let (dir, policy) = root("sdk-stdio");
    let root_arg = dir.to_str().unwrap();
    for approve in ["yes", "no", "none"] {
        let target = [
            "stdio",
            env!("CARGO_BIN_EXE_rein"),
            "mcp",
            "serve",
            "--root",
            root_arg,
            "--policy",
            &policy,
        ];
        let Some(seen) = sdk_client(approve, &target) else {
            return;
        };
        check_sdk_run(&seen, approve);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_typescript_sdk_client_over_http_sees_the_policy_and_answers_approvals() {
    let (dir, policy) = root("sdk-http");
    let (child, _lines, url) = serve_http(&dir, &policy, &["--token", "a-token-for-the-sdk-test"]);
    for approve in ["yes", "no", "none"] {
        let Some(seen) = sdk_client(approve, &["http", &url, "a-token-for-the-sdk-test"]) else {
            break;
        };
        check_sdk_run(&seen, approve);
    }
    drop(child);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_typescript_sdk_client_asks_the_served_agent_and_answers_its_approval() {
    let dir = std::env::temp_dir().join(format!("rein-mcp-sdk-agent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root_arg = dir.to_str().unwrap();
    let rein = env!("CARGO_BIN_EXE_rein");
    let target = ["stdio", rein, "mcp", "serve", "--agent", "--root", root_arg];
    for (approve, expected) in [
        ("yes", "deleted notes.txt"),
        ("no", "CONFIRMATION_FAILED: delete notes.txt"),
        ("none", "did not declare the elicitation capability"),
    ] {
        let Some(seen) = sdk_client(approve, &target) else {
            return;
        };
        assert_eq!(seen["tools"], json!(["agent"]));
        let answer = seen["agent"]["text"].as_str().unwrap();
        assert!(answer.contains(expected), "{approve}: {seen}");
        assert_eq!(seen["agent"]["isError"], approve == "none", "{seen}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the MCP Inspector's CLI printed and how it exited.
struct InspectorRun {
    /// The exit code: 0 for a result, 5 for a tool's `isError`, 3 for a refused connection.
    code: i32,
    /// Its JSON (`--format json`): `{"result": ...}` (stdout) when it had one, and
    /// `{"error": ...}` (stderr) when it failed (a tool's `isError` gives both).
    output: serde_json::Value,
}

/// The official MCP Inspector's CLI mode (`npx @modelcontextprotocol/inspector --cli`, its
/// launcher found through `REIN_MCP_INSPECTOR`, set by `.ci/peers-mcp.sh`) with `args`.
/// `None` (SKIPPED) without it, except under CI.
///
/// It never opens a browser nor listens: its stdin is not a terminal, auto-open is off and
/// `--stored-auth-only` (for HTTP) refuses the interactive OAuth whose callback would listen;
/// its catalog and OAuth store live in a fresh HOME, not the user's.
fn inspector(args: &[&str]) -> Option<InspectorRun> {
    let launcher = peer("REIN_MCP_INSPECTOR")?;
    let home = std::env::temp_dir().join(format!("rein-mcp-inspector-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new("node")
        .arg(launcher)
        .args(["--cli", "--format", "json", "--quiet"])
        .args(args)
        .env("HOME", &home)
        .env("MCP_AUTO_OPEN_ENABLED", "false")
        .env_remove("MCP_CATALOG_PATH")
        .env_remove("MCP_CLIENT_CONFIG_PATH")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    let mut output = json!({});
    for printed in [&out.stdout, &out.stderr] {
        if !printed.is_empty() {
            let part: serde_json::Value =
                serde_json::from_slice(printed).unwrap_or_else(|e| panic!("{e}: {out:?}"));
            output
                .as_object_mut()
                .unwrap()
                .extend(part.as_object().unwrap().clone());
        }
    }
    Some(InspectorRun { code, output })
}

/// The Inspector's `tools/list` and `tools/call`s against `target` (a command or a URL, then
/// its options): the policy's read, denial and the approval it cannot give (the Inspector's CLI
/// declares no elicitation capability). `false` when skipped.
fn check_inspector_calls(target: &[&str], dir: &std::path::Path) -> bool {
    let with = |method: &[&str]| inspector(&[target, method].concat());
    let Some(list) = with(&["--method", "tools/list"]) else {
        return false;
    };
    assert_eq!(list.code, 0, "{}", list.output);
    let names: Vec<_> = list.output["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        ["read_file", "list_dir", "current_time", "delete_file"]
    );
    let call = |tool: &str, path: &str| {
        let arg = format!("path={path}");
        with(&[
            "--method",
            "tools/call",
            "--tool-name",
            tool,
            "--tool-arg",
            &arg,
        ])
        .unwrap()
    };
    let text = |run: &InspectorRun| run.output["result"]["content"][0]["text"].clone();

    let read = call("read_file", "a.txt");
    assert_eq!(read.code, 0, "{}", read.output);
    assert_eq!(text(&read), "hello from a");

    let secret = call("read_file", ".env");
    assert_eq!(secret.code, 5, "a tool's error: {}", secret.output);
    let said = text(&secret).as_str().unwrap().to_owned();
    assert!(said.contains("may hold secrets"), "{said}");
    assert!(!said.contains("KEY=1"), "{said}");

    let delete = call("delete_file", "a.txt");
    assert_eq!(delete.code, 5, "{}", delete.output);
    let said = text(&delete).as_str().unwrap().to_owned();
    assert!(
        said.contains("did not declare the elicitation capability"),
        "{said}"
    );
    assert!(
        dir.join("a.txt").exists(),
        "an unapproved delete never runs"
    );
    true
}

#[test]
fn the_mcp_inspector_cli_over_stdio_sees_the_policy() {
    let (dir, policy) = root("inspector-stdio");
    let rein = env!("CARGO_BIN_EXE_rein");
    let root_arg = dir.to_str().unwrap();
    let target = [
        rein, "mcp", "serve", "--root", root_arg, "--policy", &policy,
    ];
    check_inspector_calls(&target, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_mcp_inspector_cli_over_http_sends_the_token_and_sees_the_policy() {
    let (dir, policy) = root("inspector-http");
    let token = "a-token-for-the-inspector-test";
    let (child, _lines, url) = serve_http(&dir, &policy, &["--token", token]);
    let bearer = format!("Authorization: Bearer {token}");
    let target = [url.as_str(), "--stored-auth-only", "--header", &bearer];
    if check_inspector_calls(&target, &dir) {
        // A wrong token: refused at the door (401), and the Inspector, told never to start an
        // interactive OAuth, reports it.
        let wrong = inspector(&[
            url.as_str(),
            "--stored-auth-only",
            "--header",
            "Authorization: Bearer not-the-token",
            "--method",
            "tools/list",
        ])
        .unwrap();
        assert_eq!(wrong.code, 3, "{}", wrong.output);
        assert_eq!(wrong.output["error"]["code"], "auth_required");
    }
    drop(child);
    std::fs::remove_dir_all(&dir).unwrap();
}
