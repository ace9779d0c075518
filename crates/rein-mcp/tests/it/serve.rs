//! Rein tools served over MCP (feature `server`), called by rmcp's client in process: each call
//! behind the interventions, a Confirm answered by the client's elicitation.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::{
    Tool, ToolHandle,
    audit::{DecisionAction, DecisionRecord},
    tool::{ToolContext, ToolError, ToolOutput, ToolSpec},
};
use rein_interventions::{
    AfterToolCallAction, BeforeToolCallAction, Intervention, approval::HumanApproval,
};
use rein_mcp::McpServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Value, json};

/// Echoes its `text`; counts its runs.
#[derive(Clone, Default)]
pub(crate) struct Echo(pub(crate) Arc<Mutex<u32>>);

impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "echo",
            "Echoes its text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )
    }
    async fn call(&self, input: Value, _: ToolContext) -> Result<ToolOutput, ToolError> {
        *self.0.lock().unwrap() += 1;
        Ok(ToolOutput::text(
            input["text"].as_str().unwrap_or("").to_owned(),
        ))
    }
}

/// Deletes nothing; counts its runs.
#[derive(Clone, Default)]
pub(crate) struct Delete(pub(crate) Arc<Mutex<u32>>);

impl Tool for Delete {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "delete_file",
            "Deletes a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )
    }
    async fn call(&self, input: Value, _: ToolContext) -> Result<ToolOutput, ToolError> {
        *self.0.lock().unwrap() += 1;
        Ok(ToolOutput::text(format!("deleted {}", input["path"])))
    }
}

/// Never ends.
struct Sleepy;

impl Tool for Sleepy {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new("sleepy", "Sleeps.", json!({"type": "object"}))
    }
    async fn call(&self, _: Value, _: ToolContext) -> Result<ToolOutput, ToolError> {
        std::future::pending().await
    }
}

/// How the test client answers an elicitation, if it declares the capability at all.
#[derive(Clone)]
pub(crate) struct TestClient {
    /// `None`: no elicitation capability.
    answer: Option<ElicitResult>,
    /// The messages it was asked.
    pub(crate) asked: Arc<Mutex<Vec<(String, Value)>>>,
}

impl TestClient {
    pub(crate) fn answering(answer: Option<ElicitResult>) -> Self {
        Self {
            answer,
            asked: Arc::default(),
        }
    }
}

impl rmcp::ClientHandler for TestClient {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        {
            let schema = serde_json::to_value(requested_schema).unwrap();
            self.asked.lock().unwrap().push((message.clone(), schema));
        }
        Ok(self
            .answer
            .clone()
            .unwrap_or(ElicitResult::new(ElicitationAction::Decline)))
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = match self.answer {
            Some(_) => serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(capabilities, Implementation::new("test-client", "0"))
    }
}

/// `server` served to `client` over an in-process duplex.
pub(crate) async fn connect(
    server: McpServer,
    client: TestClient,
) -> RunningService<RoleClient, TestClient> {
    let (c, s) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(s);
    tokio::spawn(async move { server.serve_io(sr, sw).await });
    let (cr, cw) = tokio::io::split(c);
    client.serve((cr, cw)).await.unwrap()
}

pub(crate) async fn call(
    client: &RunningService<RoleClient, TestClient>,
    name: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else { panic!() };
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

pub(crate) fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn no_deletes() -> Intervention {
    Intervention::named("no-deletes").before_tool_call(|ev, _| {
        if ev.tool_use().name == "delete_file" {
            BeforeToolCallAction::deny("deleting files is not allowed")
        } else {
            BeforeToolCallAction::Proceed
        }
    })
}

fn accept(approved: Value) -> ElicitResult {
    let mut r = ElicitResult::new(ElicitationAction::Accept);
    r.content = Some(json!({ "approved": approved }));
    r
}

#[tokio::test]
async fn a_denied_call_is_an_error_result_the_tool_does_not_run_and_the_audit_records_it() {
    let deletes = Delete::default();
    let audit: Arc<Mutex<Vec<DecisionRecord>>> = Arc::default();
    let seen = audit.clone();
    let server = McpServer::builder()
        .tool(ToolHandle::new(Echo::default()))
        .tool(ToolHandle::new(deletes.clone()))
        .intervention(no_deletes())
        .on_decision(move |d| seen.lock().unwrap().push(d.clone()))
        .build()
        .unwrap();
    let client = connect(server, TestClient::answering(None)).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["echo", "delete_file"]);

    let ok = call(&client, "echo", json!({"text": "hi"})).await;
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(text(&ok), "hi");

    let denied = call(&client, "delete_file", json!({"path": "/etc/passwd"})).await;
    assert_eq!(denied.is_error, Some(true));
    assert!(
        text(&denied).contains("deleting files is not allowed"),
        "{denied:?}"
    );
    assert_eq!(*deletes.0.lock().unwrap(), 0, "a denied tool never runs");
    let audit = audit.lock().unwrap().clone();
    assert!(
        audit
            .iter()
            .any(|d| d.handler == "no-deletes" && d.action == DecisionAction::Deny),
        "{audit:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn transforms_rewrite_the_input_and_the_result() {
    let server = McpServer::builder()
        .tool(ToolHandle::new(Echo::default()))
        .intervention(
            Intervention::named("shout")
                .before_tool_call(|_, _| {
                    BeforeToolCallAction::transform(|u| {
                        let t = u.input["text"].as_str().unwrap_or("").to_uppercase();
                        u.input = json!({ "text": t });
                    })
                })
                .after_tool_call(|_, _| {
                    AfterToolCallAction::transform(|r| {
                        let t = format!("{}!", r.content.len());
                        r.set_text(t);
                    })
                }),
        )
        .build()
        .unwrap();
    let client = connect(server, TestClient::answering(None)).await;
    let r = call(&client, "echo", json!({"text": "hi"})).await;
    assert_eq!(text(&r), "1!");
    client.cancel().await.unwrap();

    let server = McpServer::builder()
        .tool(ToolHandle::new(Echo::default()))
        .intervention(Intervention::named("shout").before_tool_call(|_, _| {
            BeforeToolCallAction::transform(|u| u.input = json!({"text": "HI"}))
        }))
        .build()
        .unwrap();
    let client = connect(server, TestClient::answering(None)).await;
    assert_eq!(
        text(&call(&client, "echo", json!({"text": "hi"})).await),
        "HI"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn limits_refuse_an_oversized_input_an_invalid_one_and_stop_a_slow_tool() {
    let echo = Echo::default();
    let server = McpServer::builder()
        .tool(ToolHandle::new(echo.clone()))
        .tool(ToolHandle::new(Sleepy))
        .max_input_bytes(100)
        .call_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let client = connect(server, TestClient::answering(None)).await;
    let big = call(&client, "echo", json!({"text": "x".repeat(200)})).await;
    assert_eq!(big.is_error, Some(true));
    assert!(
        text(&big).contains("exceed the limit of 100 bytes"),
        "{big:?}"
    );
    let invalid = call(&client, "echo", json!({"text": 3})).await;
    assert!(
        text(&invalid).starts_with("Error: invalid input"),
        "{invalid:?}"
    );
    assert_eq!(*echo.0.lock().unwrap(), 0);
    let slow = call(&client, "sleepy", json!({})).await;
    assert_eq!(slow.is_error, Some(true));
    assert!(text(&slow).contains("timed out"), "{slow:?}");
    let unknown = call(&client, "nope", json!({})).await;
    assert!(text(&unknown).contains("Unknown tool: nope"), "{unknown:?}");
    client.cancel().await.unwrap();
}

fn approving_server(deletes: &Delete) -> McpServer {
    McpServer::builder()
        .tool(ToolHandle::new(deletes.clone()))
        .intervention(HumanApproval::new("approve-deletes").tools(["delete_file"]))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_confirm_is_an_elicitation_and_only_an_accepted_approval_runs_the_tool() {
    let deletes = Delete::default();
    let client = TestClient::answering(Some(accept(json!(true))));
    let asked = client.asked.clone();
    let c = connect(approving_server(&deletes), client).await;
    let r = call(&c, "delete_file", json!({"path": "a.txt"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(*deletes.0.lock().unwrap(), 1);
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert!(asked[0].0.contains("delete_file"), "{asked:?}");
        assert_eq!(asked[0].1["properties"]["approved"]["type"], "boolean");
        assert_eq!(asked[0].1["required"], json!(["approved"]));
    }
    // Each call asks again: an approval is bound to its call, never remembered.
    call(&c, "delete_file", json!({"path": "a.txt"})).await;
    assert_eq!(asked.lock().unwrap().len(), 2);
    c.cancel().await.unwrap();

    for answer in [
        accept(json!(false)),
        accept(json!("true")),
        ElicitResult::new(ElicitationAction::Accept),
        ElicitResult::new(ElicitationAction::Decline),
        ElicitResult::new(ElicitationAction::Cancel),
    ] {
        let deletes = Delete::default();
        let c = connect(
            approving_server(&deletes),
            TestClient::answering(Some(answer)),
        )
        .await;
        let r = call(&c, "delete_file", json!({"path": "a.txt"})).await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert_eq!(*deletes.0.lock().unwrap(), 0);
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_confirm_for_a_client_without_elicitation_is_refused_with_the_reason() {
    let deletes = Delete::default();
    let c = connect(approving_server(&deletes), TestClient::answering(None)).await;
    let r = call(&c, "delete_file", json!({"path": "a.txt"})).await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.contains("did not declare the elicitation capability"),
        "{t}"
    );
    assert!(t.contains("approve-deletes"), "{t}");
    assert_eq!(*deletes.0.lock().unwrap(), 0);
    c.cancel().await.unwrap();
}

/// Echo behind a Confirm at AfterToolCall: the tool runs, its result is held until approved.
fn result_approving_server(echo: &Echo) -> McpServer {
    McpServer::builder()
        .tool(ToolHandle::new(echo.clone()))
        .intervention(
            Intervention::named("show-results")
                .after_tool_call(|_, _| AfterToolCallAction::confirm("Show the result?")),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_confirm_after_the_call_holds_the_result_until_the_client_approves() {
    let secret = json!({"text": "the held result"});
    let echo = Echo::default();
    let client = TestClient::answering(Some(accept(json!(true))));
    let asked = client.asked.clone();
    let c = connect(result_approving_server(&echo), client).await;
    let r = call(&c, "echo", secret.clone()).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "the held result");
    assert_eq!(*echo.0.lock().unwrap(), 1, "the tool runs once");
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].0.contains("Show the result?"), "{asked:?}");
        assert!(!asked[0].0.contains("the held result"), "{asked:?}");
    }
    c.cancel().await.unwrap();

    // Declined (or not approved): the client gets the refusal, never the held result; the
    // tool is not run again.
    for answer in [
        accept(json!(false)),
        ElicitResult::new(ElicitationAction::Decline),
        ElicitResult::new(ElicitationAction::Cancel),
    ] {
        let echo = Echo::default();
        let c = connect(
            result_approving_server(&echo),
            TestClient::answering(Some(answer)),
        )
        .await;
        let r = call(&c, "echo", secret.clone()).await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let t = text(&r);
        assert!(t.contains("CONFIRMATION_FAILED: Show the result?"), "{t}");
        assert!(!t.contains("the held result"), "{t}");
        assert_eq!(*echo.0.lock().unwrap(), 1);
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_confirm_after_the_call_for_a_client_without_elicitation_is_refused() {
    let echo = Echo::default();
    let c = connect(result_approving_server(&echo), TestClient::answering(None)).await;
    let r = call(&c, "echo", json!({"text": "the held result"})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let t = text(&r);
    assert!(
        t.contains("did not declare the elicitation capability"),
        "{t}"
    );
    assert!(t.contains("show-results"), "{t}");
    assert!(!t.contains("the held result"), "{t}");
    c.cancel().await.unwrap();
}
