//! Governed sampling (issue 42, item 2) against server-everything's `trigger-sampling-request`
//! tool (it sends `sampling/createMessage` with its prompt, a system prompt and `maxTokens`,
//! and returns the client's result as JSON text), answered by a ScriptedModel.

use std::sync::{Arc, Mutex};

use rein_core::{interrupt::Approval, message::ToolResultStatus, tool::ToolOutput};
use rein_interventions::{
    AfterModelCallAction, BeforeModelCallAction, Intervention, InterventionRegistry,
};
use rein_mcp::{McpClient, Sampling, SamplingBudget, sampling_server};
use rein_models::{Model as _, ScriptedModel};
use serde_json::{Value, json};

use crate::servers::{connect, cx, ev, find};

const TOOL: &str = "trigger-sampling-request";

async fn sample(client: &McpClient, prompt: &str) -> ToolOutput {
    let tools = client.tools().await.unwrap();
    find(&tools, &ev(TOOL))
        .call(json!({"prompt": prompt, "maxTokens": 50}), cx(TOOL))
        .await
        .unwrap()
}

fn text(out: &ToolOutput) -> String {
    out.content
        .iter()
        .map(|c| format!("{c:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The server's JSON dump of the client's result.
fn result(out: &ToolOutput) -> Value {
    assert_eq!(out.status, ToolResultStatus::Success, "{}", text(out));
    let rein_core::message::ToolResultContent::Text(t) = &out.content[0] else {
        panic!("{}", text(out));
    };
    let json = t.split_once('\n').unwrap().1;
    serde_json::from_str(json).unwrap()
}

/// Calls the sampling tool expecting a refusal: what the model is shown (the error result's
/// text, or the tool error).
async fn refused(client: &McpClient, prompt: &str) -> String {
    let tools = client.tools().await.unwrap();
    let out = find(&tools, &ev(TOOL))
        .call(json!({"prompt": prompt, "maxTokens": 10}), cx(TOOL))
        .await;
    match out {
        Ok(o) => {
            assert_eq!(o.status, ToolResultStatus::Error, "{}", text(&o));
            text(&o)
        }
        Err(e) => e.to_string(),
    }
}

fn model(texts: &[&str]) -> ScriptedModel {
    let mut b = ScriptedModel::builder().record_requests(true);
    for t in texts {
        b = b.text(*t);
    }
    b.build()
}

#[tokio::test]
async fn everything_sampling_is_refused_by_default() {
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], McpClient::builder()).await else {
        return;
    };
    // The client does not declare sampling, so the server does not even offer its tool (a
    // request sent anyway gets the protocol's unknown-method error).
    let tools = client.tools().await.unwrap();
    assert!(tools.iter().all(|t| t.name() != TOOL), "{tools:?}");
    client.close().await;
}

#[tokio::test]
async fn everything_sampling_enabled_answers_through_the_model() {
    let model = model(&["a haiku about tests"]);
    let builder = McpClient::builder().sampling(Sampling::new(model.clone()));
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    let out = sample(&client, "write a haiku").await;
    client.close().await;
    let r = result(&out);
    assert_eq!(r["role"], "assistant");
    assert_eq!(r["content"]["type"], "text");
    assert_eq!(r["content"]["text"], "a haiku about tests");
    assert_eq!(r["stopReason"], "endTurn");
    assert_eq!(r["model"], model.info().model_id);
    // What the model was sent: the server's system prompt, message and maxTokens, no tools.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(
        req.system_prompt.as_deref(),
        Some("You are a helpful test server.")
    );
    assert!(req.messages[0].text().contains("write a haiku"), "{req:?}");
    assert_eq!(req.config.max_tokens, Some(50));
    assert!(req.tools.is_empty());
}

/// A handler that records the server named in each model call it sees, and denies the
/// requests of the server `deny` (when set).
fn recorder(seen: Arc<Mutex<Vec<String>>>, deny: bool) -> InterventionRegistry {
    let after = seen.clone();
    let handler = Intervention::named("sampling-guard")
        .before_model_call(move |_ev, cx| {
            let server = sampling_server(cx.invocation_state()).map(str::to_owned);
            seen.lock()
                .unwrap()
                .push(format!("before {}", server.clone().unwrap_or_default()));
            match server {
                Some(s) if deny => BeforeModelCallAction::deny(format!("no sampling for {s}")),
                _ => BeforeModelCallAction::Proceed,
            }
        })
        .after_model_call(move |ev, cx| {
            let server = sampling_server(cx.invocation_state()).unwrap_or_default();
            let text = ev.response().map(|r| r.message.text()).unwrap_or_default();
            after
                .lock()
                .unwrap()
                .push(format!("after {server}: {text}"));
            AfterModelCallAction::Proceed
        });
    InterventionRegistry::new([handler]).unwrap()
}

#[tokio::test]
async fn everything_sampling_goes_through_interventions_naming_the_server() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sampling = Sampling::new(model(&["fine"])).interventions(&recorder(seen.clone(), false));
    let builder = McpClient::builder().sampling(sampling);
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    let out = sample(&client, "hi").await;
    let name = format!("'{}'", client.server_name().unwrap());
    client.close().await;
    assert_eq!(result(&out)["content"]["text"], "fine");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![format!("before {name}"), format!("after {name}: fine")]
    );
}

#[tokio::test]
async fn everything_sampling_denied_by_a_handler_is_refused() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = model(&["never sent"]);
    let sampling = Sampling::new(model.clone()).interventions(&recorder(seen.clone(), true));
    let builder = McpClient::builder().sampling(sampling);
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    let shown = refused(&client, "hi").await;
    client.close().await;
    assert!(shown.contains("DENIED: no sampling for"), "{shown}");
    assert!(model.requests().is_empty(), "the model was called");
}

#[tokio::test]
async fn everything_sampling_budget_is_per_server_and_refuses_when_spent() {
    let mut budget = SamplingBudget::default();
    budget.max_calls = 1;
    let model = model(&["one", "two"]);
    let builder = McpClient::builder().sampling(Sampling::new(model.clone()).budget(budget));
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    assert_eq!(
        result(&sample(&client, "a").await)["content"]["text"],
        "one"
    );
    let shown = refused(&client, "b").await;
    client.close().await;
    assert!(
        shown.contains("sampling budget of 1 requests for this server is spent"),
        "{shown}"
    );
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn everything_sampling_token_budget_caps_the_output_and_refuses_a_large_input() {
    let mut budget = SamplingBudget::default();
    budget.max_tokens = 80;
    let model = model(&["short"]);
    let builder = McpClient::builder().sampling(Sampling::new(model.clone()).budget(budget));
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    // The server asks for 50 tokens; its input (about 4 bytes a token) takes some of the 80.
    assert_eq!(
        result(&sample(&client, "a").await)["content"]["text"],
        "short"
    );
    let capped = model.requests()[0].config.max_tokens.unwrap();
    assert!(capped > 0 && capped < 50, "{capped}");
    // A prompt larger than what is left is refused before the model is called.
    let shown = refused(&client, &"many words ".repeat(100)).await;
    client.close().await;
    assert!(shown.contains("leaves nothing of the"), "{shown}");
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn everything_sampling_approval_asks_a_human_per_request() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::new(Mutex::new(vec![Approval::reject(), Approval::approve()]));
    let sampling = Sampling::new(model(&["approved text"])).approval({
        let asked = asked.clone();
        move |a: rein_mcp::SamplingApproval| {
            asked
                .lock()
                .unwrap()
                .push((a.server.clone(), a.request.messages[0].text()));
            let answer = answers.lock().unwrap().remove(0);
            async move { answer }
        }
    });
    let builder = McpClient::builder().sampling(sampling);
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    let shown = refused(&client, "first").await;
    assert!(shown.contains("a human rejected it"), "{shown}");
    let out = sample(&client, "second").await;
    client.close().await;
    assert_eq!(result(&out)["content"]["text"], "approved text");
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert!(asked[0].1.contains("first") && asked[1].1.contains("second"));
}

#[tokio::test]
async fn everything_sampling_confirm_of_a_handler_goes_to_the_approver() {
    let confirm = Intervention::named("ask-before-sampling").before_model_call(|_ev, cx| {
        if sampling_server(cx.invocation_state()).is_some() {
            BeforeModelCallAction::confirm("Let the server use the model?")
        } else {
            BeforeModelCallAction::Proceed
        }
    });
    let interventions = InterventionRegistry::new([confirm]).unwrap();
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let sampling = Sampling::new(model(&["ok"]))
        .interventions(&interventions)
        .approval({
            let prompts = prompts.clone();
            move |a: rein_mcp::SamplingApproval| {
                let p: Vec<String> = a.interrupts.iter().map(|i| i.prompt_text()).collect();
                prompts.lock().unwrap().push(p);
                async { Approval::approve() }
            }
        });
    let builder = McpClient::builder().sampling(sampling.clone());
    let Some(client) = connect("REIN_MCP_EVERYTHING", &[], builder).await else {
        return;
    };
    let out = sample(&client, "x").await;
    client.close().await;
    assert_eq!(result(&out)["content"]["text"], "ok");
    // Asked once, with the handler's prompt (not a second time for the approval option).
    assert_eq!(
        *prompts.lock().unwrap(),
        vec![vec!["Let the server use the model?".to_owned()]]
    );

    // Without an approver the Confirm refuses (closed by default).
    let model = model(&["never"]);
    let builder =
        McpClient::builder().sampling(Sampling::new(model.clone()).interventions(&interventions));
    let client = connect("REIN_MCP_EVERYTHING", &[], builder).await.unwrap();
    let shown = refused(&client, "y").await;
    client.close().await;
    assert!(shown.contains("no approver is configured"), "{shown}");
    assert!(model.requests().is_empty());
}
