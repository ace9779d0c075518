//! A test server: scripted models chosen by the thread id's prefix, a `delete_file` tool that
//! needs approval (an intervention `Confirm`), a `clock`, a slow tool and a gate.
#![allow(unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rein_agent::Agent;
use rein_agui::{AguiServer, ServerHandle};
use rein_core::ToolHandle;
use rein_core::interrupt::Interrupt;
use rein_interventions::approval::HumanApproval;
use rein_interventions::{
    AfterToolCallAction, BeforeInvocationAction, BeforeToolCallAction, Intervention,
};
use rein_models::{ScriptedModel, SharedModel};
use rein_sessions::MemorySessionStore;
use serde_json::json;

const SCRIPTS: [&str; 15] = [
    "tool", "output", "browser", "approve", "reject", "edit", "refuse", "inject", "parked",
    "replay", "gate", "pair", "always", "elicit", "visit",
];

fn script(thread_id: &str) -> ScriptedModel {
    let b = ScriptedModel::builder();
    // The first part of the id that names a script (`alice-approve-1` is an `approve` thread).
    let kind = thread_id
        .split('-')
        .find(|k| SCRIPTS.contains(k))
        .unwrap_or_default();
    match kind {
        "tool" | "output" => b.tool_use("c1", "clock", json!({})).text("It is noon."),
        "browser" => b
            .tool_use("d1", "delete_file", json!({"path": "a.txt"}))
            .text("Done: I asked before deleting.")
            .tool_use("d2", "delete_file", json!({"path": "a.txt"}))
            .text("Asked again."),
        // A model that repeats its tool-use ids (each response starts again at `d1`).
        "replay" => b
            .tool_use("d1", "delete_file", json!({"path": "a.txt"}))
            .tool_use("d1", "delete_file", json!({"path": "b.txt"}))
            .text("Both asked about."),
        "approve" | "reject" | "edit" | "refuse" => b
            .tool_use("d1", "delete_file", json!({"path": "a.txt"}))
            .text("Done: I asked before deleting."),
        "inject" => b
            .tool_use("s1", "slow", json!({}))
            .text("Finished the slow thing."),
        // Two refunds: human_approval asks about the first; "always" trusts the tool, so the
        // second runs without asking.
        "always" => b
            .tool_use("r1", "refund", json!({"amount": 250, "order": 17}))
            .text("Refunded.")
            .tool_use("r2", "refund", json!({"amount": 80, "order": 18}))
            .text("Refunded again."),
        "elicit" => b.tool_use("e1", "sign_up", json!({})).text("Signed up."),
        "visit" => b.tool_use("p1", "pay", json!({})).text("Paid."),
        "gate" => b
            .tool_use("g1", "gate", json!({}))
            .text("Through the gate."),
        // Two deletions asked about in one pause.
        "pair" => b
            .response(
                rein_models::ScriptedResponse::new()
                    .tool_use("d1", "delete_file", json!({"path": "a.txt"}))
                    .tool_use("d2", "delete_file", json!({"path": "b.txt"})),
            )
            .text("Both deleted."),
        "parked" => b
            .tool_use("s1", "slow", json!({}))
            .tool_use("s2", "slow", json!({}))
            .text("Finished both slow things."),
        _ => b.text("Hello from Rein!"),
    }
    .chunk_chars(4)
    .build()
}

/// What `sign_up` asks, in the shape rein-mcp gives a server's `elicitation/create` (form
/// mode): the server's message and fields are untrusted text, here markup that must stay text.
pub const HOSTILE: &str =
    "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>";

fn sign_up_interrupt(tool_use_id: &str) -> Interrupt {
    let form = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": format!("Name {HOSTILE}"), "description": format!("As on your card {HOSTILE}"), "minLength": 1},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "plan": {"type": "string", "enum": ["free", "pro"], "enumNames": ["Free", "Pro"]},
            "newsletter": {"type": "boolean", "title": "Newsletter"},
            "email": {"type": "string", "format": "email"}
        },
        "required": ["name", "age", "plan"]
    });
    let reason = json!({"message": format!("Sign-up details {HOSTILE}"), "mode": "form", "requestedSchema": form, "server": "everything"});
    elicitation(tool_use_id, reason, Some(form))
}

/// A URL-mode question: the user visits the URL, then says when done.
fn pay_interrupt(tool_use_id: &str) -> Interrupt {
    let reason = json!({"message": "Pay for order 17 on the shop's site.", "mode": "url",
        "url": "https://shop.example.com/checkout?order=17", "server": "everything"});
    elicitation(tool_use_id, reason, None)
}

/// An interrupt as rein-mcp raises it for an elicitation: the schema of its answer declared
/// (accept with the form's content, closed — none in URL mode —, decline, cancel, `false`).
fn elicitation(
    tool_use_id: &str,
    reason: serde_json::Value,
    form: Option<serde_json::Value>,
) -> Interrupt {
    let choice = |title: &str, action: &str, content: Option<serde_json::Value>| {
        let mut c = json!({"title": title, "type": "object", "properties": {"action": {"const": action}},
            "required": ["action"], "additionalProperties": false});
        if let Some(mut content) = content {
            content["additionalProperties"] = json!(false);
            c["properties"]["content"] = content;
            c["required"] = json!(["action", "content"]);
        }
        c
    };
    let accept = if form.is_some() { "Accept" } else { "Done" };
    let id = format!("v1:tool_call:{tool_use_id}:mcp_elicitation:0");
    Interrupt::new(id, "mcp_elicitation", reason)
        .with_response_schema(json!({"oneOf": [
            choice(accept, "accept", form),
            choice("Decline", "decline", None),
            choice("Cancel", "cancel", None),
            {"const": false, "title": "Cancel"}
        ]}))
        .with_tool_use_id(tool_use_id)
}

/// A tool that asks `asked` and, answered, returns what it got.
fn asking_tool(name: &str, asked: fn(&str) -> Interrupt) -> ToolHandle {
    ToolHandle::from_sync_fn(
        name,
        "Asks the user (as an MCP server's elicitation).",
        json!({"type": "object"}),
        move |_, cx| {
            let asked = asked(cx.tool_use_id());
            match cx.answer(&asked.id) {
                Some(answer) => Ok(format!("answered {answer}").into()),
                None => {
                    let id = asked.id.clone();
                    cx.raise_interrupt(asked);
                    Err(rein_core::tool::InterruptRaised(id).into())
                }
            }
        },
    )
}

/// The gates of `gate` tool calls, one per thread: a run on a `gate` thread stays in its tool
/// call until the test opens that thread's gate, so what a test does while a run is going does
/// not depend on how fast the machine is.
fn gate(thread_id: &str) -> tokio::sync::watch::Sender<bool> {
    static GATES: OnceLock<Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>> =
        OnceLock::new();
    GATES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap()
        .entry(thread_id.to_owned())
        .or_insert_with(|| tokio::sync::watch::channel(false).0)
        .clone()
}

/// Lets the run on `thread_id` through its `gate` tool call (now, or when it gets there).
pub fn open_gate(thread_id: &str) {
    gate(thread_id).send_replace(true);
}

/// The scripted model of each thread. A real model is stateless; a scripted one remembers
/// where its script is, so two servers standing for two processes share this map.
pub type Models = Arc<Mutex<HashMap<String, SharedModel>>>;

pub fn server(store: MemorySessionStore) -> AguiServer {
    server_with(store, Models::default())
}

/// The shared token the test servers require (`Authorization: Bearer TOKEN`).
pub const TOKEN: &str = "test-token-0123456789abcdef";

pub fn server_with(store: MemorySessionStore, models: Models) -> AguiServer {
    unauthenticated_server(store, models).token(TOKEN)
}

/// The test server without a configured token: it makes up its own.
pub fn unauthenticated_server(store: MemorySessionStore, models: Models) -> AguiServer {
    AguiServer::new(store, move |thread_id| {
        let model = models
            .lock()
            .unwrap()
            .entry(thread_id.to_owned())
            .or_insert_with(|| SharedModel::new(script(thread_id)))
            .clone();
        let guard = Intervention::named("delete-guard").before_tool_call(|ev, _cx| {
            if ev.tool_use().name == "delete_file" {
                let path = ev.tool_use().input["path"]
                    .as_str()
                    .unwrap_or("?")
                    .to_owned();
                BeforeToolCallAction::confirm(format!("Delete {path}?"))
            } else {
                BeforeToolCallAction::Proceed
            }
        });
        // On `output-*` threads a person approves what the clock returned (an after_tool_call
        // confirm) before the model sees it.
        let gate = gate(thread_id);
        let check_output = thread_id.starts_with("output-");
        let output_check = Intervention::named("output-check").after_tool_call(move |ev, _cx| {
            if check_output && ev.tool_use().name == "clock" {
                AfterToolCallAction::confirm("Show the time to the model?")
            } else {
                AfterToolCallAction::Proceed
            }
        });
        // On `parked-*` threads an injected message waits for a person's approval.
        let park = thread_id.starts_with("parked-");
        let injected_check =
            Intervention::named("injection-check").before_invocation(move |ev, _cx| {
                if park && ev.is_injected() {
                    BeforeInvocationAction::confirm("Let this message through?")
                } else {
                    BeforeInvocationAction::Proceed
                }
            });
        // On `always-*` threads human_approval asks before a refund (and takes "always").
        let asked: &[&str] = if thread_id.starts_with("always-") {
            &["refund"]
        } else {
            &[]
        };
        let refunds = HumanApproval::new("refund-approval").tools(asked);
        Agent::builder()
            .shared_model(model)
            .tool(ToolHandle::from_sync_fn(
                "refund",
                "Refunds an order.",
                json!({"type": "object", "properties": {"amount": {"type": "number"}, "order": {"type": "integer"}}, "required": ["amount", "order"]}),
                |input, _| Ok(format!("refunded {} to order {}", input["amount"], input["order"]).into()),
            ))
            .tool(asking_tool("sign_up", sign_up_interrupt))
            .tool(asking_tool("pay", pay_interrupt))
            .tool(ToolHandle::from_sync_fn(
                "clock",
                "The time.",
                json!({"type": "object"}),
                |_, _| Ok("12:00".into()),
            ))
            .tool(ToolHandle::from_sync_fn(
                "delete_file",
                "Deletes a file.",
                // A file name in the working directory: no path (an edit may not reach elsewhere).
                json!({"type": "object", "properties": {"path": {"type": "string", "pattern": "^[^/]+$"}}, "required": ["path"], "additionalProperties": false}),
                |input, _| Ok(format!("deleted {}", input["path"].as_str().unwrap_or("?")).into()),
            ))
            .tool(ToolHandle::from_fn(
                "slow",
                "Takes a while.",
                json!({"type": "object"}),
                |_, _| async {
                    tokio::time::sleep(Duration::from_millis(900)).await;
                    Ok("slow done".into())
                },
            ))
            .tool(ToolHandle::from_fn(
                "gate",
                "Waits for the test to open its gate.",
                json!({"type": "object"}),
                move |_, _| {
                    let mut open = gate.subscribe();
                    async move {
                        // The map keeps the sender: the wait ends only when the gate opens.
                        let _ = open.wait_for(|o| *o).await;
                        Ok("through".into())
                    }
                },
            ))
            .intervention(guard)
            .intervention(output_check)
            .intervention(injected_check)
            .intervention(refunds)
    })
}

pub async fn start(store: MemorySessionStore) -> ServerHandle {
    server(store).bind_local(0).await.unwrap().spawn()
}

pub async fn start_with(store: MemorySessionStore, models: Models) -> ServerHandle {
    server_with(store, models)
        .bind("127.0.0.1:0")
        .await
        .unwrap()
        .spawn()
}

/// A minimal HTTP/1.1 request (Connection: close) with the test token: status and body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let (status, _, body) = request(
        addr,
        method,
        path,
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        body,
    )
    .await;
    (status, body)
}

/// A request with these headers besides Host, Content-Type: application/json (unless given),
/// Content-Length and Connection: close: status, head (lower-cased) and body.
pub async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Accept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    let text = raw(addr, head.as_bytes()).await;
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_lowercase(), body.to_owned())
}

/// Sends `bytes` and reads the answer until the server closes the connection.
pub async fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    // A reset after the answer (the server closed with our bytes unread) ends the read too.
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A run request: `text` as the new user message, or `resume` entries.
pub fn run_input(thread: &str, text: Option<&str>, resume: Option<serde_json::Value>) -> String {
    let messages = match text {
        Some(t) => json!([{"id": "m1", "role": "user", "content": t}]),
        None => json!([]),
    };
    let mut v = json!({"threadId": thread, "runId": "r1", "messages": messages});
    if let Some(r) = resume {
        v["resume"] = r;
    }
    v.to_string()
}

/// The JSON events of an SSE body (lines that are not `data:` frames are skipped).
pub fn events(body: &str) -> Vec<serde_json::Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// Runs `node tests/js/<script> <args>` with the test token as `REIN_AGUI_TOKEN`; its stdout
/// (the test fails when node does).
pub async fn node(script: &str, args: &[&str]) -> String {
    let path = format!("{}/tests/js/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new("node")
        .env("REIN_AGUI_TOKEN", TOKEN)
        .arg(path)
        .args(args)
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Waits until the thread's run shows in `GET /threads` (a hung server fails the test after a
/// minute instead of hanging it).
pub async fn wait_running(addr: std::net::SocketAddr, thread: &str) {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (_, t) = http(addr, "GET", &format!("/threads/{thread}"), "").await;
            if serde_json::from_str::<serde_json::Value>(&t)
                .is_ok_and(|t| t["runningRunId"].is_string())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the run never started");
}
