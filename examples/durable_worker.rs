//! A durable worker on Restate, observed: its runs traced and its metrics exported through
//! OpenTelemetry (`rein-otel`), its logs on stderr. A session asks to delete a file, an
//! intervention asks a human, the run pauses in Restate, and a client in another process (here:
//! the same one, through the ingress) approves it. Runs on a conversation-keyed scripted model.
//!
//! ```sh
//! restate-server                       # ingress :8080, admin :9070 (see docs/durable-execution.md)
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \
//!   cargo run -p rein-examples --example durable_worker
//! ```
//!
//! `RESTATE_INGRESS_URL` and `RESTATE_ADMIN_URL` name another Restate. Without
//! `OTEL_EXPORTER_OTLP_ENDPOINT` nothing is exported; the log lines still show the spans closing
//! and the metric events.

use std::io::IsTerminal as _;

use rein::AgentBuilder;
use rein::core::state::InvocationState;
use rein::models::ConversationModel;
use rein::prelude::*;
use rein::restate::wire::{InvokeRequest, ResumeRequest};
use rein::restate::{Client, Refusal, Worker};
use serde_json::json;
use tracing_subscriber::{EnvFilter, fmt, fmt::format::FmtSpan, layer::SubscriberExt as _};

/// The token of the example's one caller (stands for your own check: a JWT, a session lookup).
const TOKEN: &str = "token-of-ann";

/// The worker's agent, built for every invocation on whichever worker Restate calls: its model
/// answers from the conversation alone, so every worker and every replay answer alike.
fn agent(_session: &str) -> Result<AgentBuilder, rein::Error> {
    let delete = ToolHandle::from_sync_fn(
        "delete",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |input, _| Ok(ToolOutput::text(format!("deleted {}", input["path"]))),
    );
    let model = ConversationModel::new([
        ScriptedResponse::new().tool_use("t1", "delete", json!({"path": "old.txt"})),
        ScriptedResponse::new().text("Done: old.txt is gone."),
    ]);
    Ok(Agent::builder()
        .name("janitor")
        .model(model)
        .tool(delete)
        .intervention(Intervention::named("approval").before_tool_call(|ev, _| {
            if ev.tool_use().name == "delete" {
                BeforeToolCallAction::confirm("Delete old.txt?")
            } else {
                BeforeToolCallAction::Proceed
            }
        })))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Traces and metrics to OTLP when an endpoint is set; log lines (spans as they close, the
    // metric events of target `rein::metrics`) on stderr either way.
    let otel = match std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        Ok(_) => Some(
            rein_otel::Otel::builder()
                .service_name("rein-worker")
                .metrics(true)
                .build()?,
        ),
        Err(_) => {
            println!("OTEL_EXPORTER_OTLP_ENDPOINT is not set: nothing is exported");
            None
        }
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,rein=info,rein::metrics=trace"));
    let logs = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_span_events(FmtSpan::CLOSE);
    let subscriber = tracing_subscriber::registry()
        .with(otel.as_ref().map(|o| o.layer()))
        .with(logs)
        .with(filter);
    tracing::subscriber::set_global_default(subscriber)?;

    let ingress =
        std::env::var("RESTATE_INGRESS_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let admin =
        std::env::var("RESTATE_ADMIN_URL").unwrap_or_else(|_| "http://127.0.0.1:9070".into());

    // The worker: loopback, so no identity key is required (give one anywhere else).
    let worker = Worker::new(agent)
        .authenticate(|caller| match caller.bearer_token() {
            Some(token) if token == TOKEN => Ok(InvocationState::from(json!({
                "principal": {"type": "User", "id": "ann"}
            }))),
            _ => Err(Refusal::Unauthenticated("a valid token is required".into())),
        })
        .bind("127.0.0.1:0".parse()?)
        .listen()
        .await?;
    let url = format!("http://{}", worker.local_addr()?);
    println!("worker listening on {url}");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(worker.serve(async {
        let _ = stopped.await;
    }));
    // Restate asks the worker what it serves while registering it: serve first.
    let deployment = rein::restate::register(&admin, &url).await?;
    println!("registered: {}", deployment.id);

    // A client, as any other process would be.
    let client = Client::new(&ingress)?.bearer_token(TOKEN)?;
    let session = format!("janitor-{}", std::process::id());
    let report = client
        .invoke(&session, InvokeRequest::text("clean up old.txt"))
        .await?;
    println!("run stopped: {:?}", report.stop_reason);
    let Some(asked) = report.interrupts.first() else {
        return Err("the run did not ask".into());
    };
    println!("asked: {}", asked.prompt_text());
    let done = client
        .resume(
            &session,
            ResumeRequest::new(vec![asked.answer(json!({"approved": true}))]),
        )
        .await?;
    println!("approved; reply: {}", done.text);
    println!("decisions in the audit: {}", done.decisions.len());

    let _ = stop.send(());
    serving.await??;
    if let Some(otel) = otel {
        otel.shutdown()?; // flushes: spans and metrics are in the backend when this returns
        println!("exported: the worker's runs and metrics");
    }
    Ok(())
}
