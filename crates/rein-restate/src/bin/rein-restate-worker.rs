//! A Restate worker serving a demo agent, for rein-restate's tests and the durable-execution
//! guide (not a stable interface).
//!
//! `rein-restate-worker [--bind ADDR] [--reuse-port] [--identity-key KEY]...
//! [--register ADMIN_URL DEPLOYMENT_URL]`
//!
//! It accepts only requests signed by the Restate holding one of the `--identity-key`s
//! (`publickeyv1_...`), and must have one to bind an address other than loopback. Anyone who
//! reaches the ingress may call its sessions' operations (a demo; a real worker authenticates
//! its callers: see `Worker::authenticate`).
//!
//! `rein-restate-worker inject INGRESS_URL SESSION PREFIX N` injects `PREFIX-0` … `PREFIX-N-1`
//! one after another and prints `<id> <message>` for each accepted one, `refused <message>
//! <status>` for each refused one (a sender process of the injection tests).
//!
//! The demo agent's model answers from the conversation alone (any worker, any replay, gives
//! the same answer to the same history), after `REIN_MODEL_DELAY_MS` and in small chunks:
//! - `steps N`: calls the `ledger` tool N times, then says `Finished N steps.` and lists the
//!   messages injected so far (`seen: a, b`);
//! - `delete PATH`: calls the `delete` tool (an intervention asks a human first), then reports
//!   its result;
//! - `transfer`: hands the conversation to the `support` agent, which answers every message
//!   from then on with `Support: <text>`;
//! - `invoice` (in a session `typed-*`, whose agent has a typed answer): answers
//!   `{"total_cents": "twelve"}`, which the check refuses, then `{"total_cents": 1200}`; each
//!   call appends `<millis> model invoice-attempt-<n>` to the ledger when it starts;
//! - anything else: `You said: <text>`.
//!
//! In a session `screened-*`, an injected message whose text starts with `spam` is rejected (an
//! intervention denies it: `no spam`); elsewhere every injected message is admitted.
//!
//! `REIN_DEMO_REVISION=2` deploys a revision of the agent with one more intervention (it
//! denies every `ledger` call): a run journaled by the first revision no longer replays on it
//! (a journal mismatch).
//!
//! The `ledger` tool takes `REIN_TOOL_DELAY_MS`, then appends `<millis> <session> <tool use id>`
//! to the file `REIN_LEDGER` (when set): one line per execution. SIGTERM or Ctrl-C stops the
//! worker gracefully.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_agent::Agent;
use rein_core::{
    Message, ModelError, Role, ToolHandle,
    state::InvocationState,
    tool::{ToolError, ToolOutput},
};
use rein_interventions::{BeforeInvocationAction, BeforeToolCallAction, Intervention};
use rein_models::{Model, ModelInfo, ModelRequest, ModelStream, ScriptedModel};
use serde_json::json;

fn millis(var: &str) -> Duration {
    let ms = std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Duration::from_millis(ms)
}

/// Answers from the conversation: the last user text and how many turns followed it.
#[derive(Clone)]
struct OpsModel {
    delay: Duration,
}

impl Model for OpsModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("demo", "ops")
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let messages = &request.messages;
        let start = messages
            .iter()
            .rposition(|m| m.role == Role::User && is_command(&m.text()))
            .or_else(|| messages.iter().rposition(|m| m.role == Role::User))
            .unwrap_or(0);
        let command = messages.get(start).map(Message::text).unwrap_or_default();
        let turns = messages[start..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let seen: Vec<String> = messages[start + 1..]
            .iter()
            .filter(|m| m.role == Role::User)
            .map(Message::text)
            .filter(|t| !t.is_empty())
            .collect();
        let mut script = ScriptedModel::builder()
            .chunk_chars(3)
            .call_delay(self.delay);
        let words: Vec<&str> = command.split_whitespace().collect();
        script = match words.as_slice() {
            ["steps", n] => {
                let n: usize = n.parse().unwrap_or(0);
                if turns < n {
                    script.tool_use(format!("step-{turns}"), "ledger", json!({"step": turns}))
                } else if seen.is_empty() {
                    script.text(format!("Finished {n} steps."))
                } else {
                    script.text(format!("Finished {n} steps. seen: {}", seen.join(", ")))
                }
            }
            ["delete", path] if turns == 0 => {
                script.tool_use("del-1", "delete", json!({"path": path}))
            }
            ["delete", _] => {
                let last = messages.last().and_then(|m| serde_json::to_value(m).ok());
                let done = last.is_some_and(|m| m.to_string().contains("deleted"));
                script.text(if done { "Deleted." } else { "Not deleted." })
            }
            // A typed answer (sessions `typed-*`): a schema violation first; after the
            // check's guidance, a valid answer. Each call is written to the ledger when it
            // starts, so a test sees which calls a replay asked again.
            // The check's guidance is joined to the prompt's message (its text follows the
            // prompt's, with no space between).
            [first, ..] if first.starts_with("invoice") => {
                let refused: usize = messages[start..]
                    .iter()
                    .filter(|m| m.role == Role::User)
                    .map(|m| {
                        m.text()
                            .matches("does not match the required output")
                            .count()
                    })
                    .sum();
                let attempt = refused + 1;
                ledger_line("model", &format!("invoice-attempt-{attempt}"));
                script.text(if refused == 0 {
                    r#"{"total_cents": "twelve"}"#
                } else {
                    r#"{"total_cents": 1200}"#
                })
            }
            ["transfer"] if turns == 0 => {
                script.tool_use("transfer-1", "transfer_to_support", json!({}))
            }
            _ => script.text(format!("You said: {command}")),
        };
        script.build().stream(request).await
    }
}

/// The `support` agent's model: `Support: <the last user text>`.
struct SupportModel;

impl Model for SupportModel {
    fn info(&self) -> ModelInfo {
        ModelInfo::new("demo", "support")
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let last = request
            .messages
            .iter()
            .rev()
            .filter(|m| m.role == Role::User)
            .map(Message::text)
            .find(|t| !t.is_empty())
            .unwrap_or_default();
        let script = ScriptedModel::builder().text(format!("Support: {last}"));
        script.build().stream(request).await
    }
}

/// Injected messages are user text too: a command starts with one of the model's verbs.
/// Appends `{now} {who} {what}` to the ledger (`REIN_LEDGER`), if any.
fn ledger_line(who: &str, what: &str) {
    let Ok(path) = std::env::var("REIN_LEDGER") else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(format!("{now} {who} {what}\n").as_bytes());
    }
}

fn is_command(text: &str) -> bool {
    text.starts_with("invoice")
        || text.starts_with("steps ")
        || text.starts_with("delete ")
        || text.starts_with("say ")
        || text == "transfer"
}

fn ledger_tool(session: String) -> ToolHandle {
    let delay = millis("REIN_TOOL_DELAY_MS");
    let ledger = std::env::var("REIN_LEDGER").ok();
    ToolHandle::from_fn(
        "ledger",
        "Records a step.",
        json!({"type": "object", "properties": {"step": {"type": "integer"}}}),
        move |input, cx| {
            let (ledger, session) = (ledger.clone(), session.clone());
            async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if let Some(path) = ledger {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis();
                    let mut file = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)?;
                    // One write call per line: with O_APPEND, lines from several worker
                    // processes never interleave (`writeln!` may write in pieces).
                    let line = format!("{now} {session} {}\n", cx.tool_use_id());
                    file.write_all(line.as_bytes())?;
                }
                Ok::<_, ToolError>(ToolOutput::text(format!("step {} recorded", input["step"])))
            }
        },
    )
}

fn delete_tool() -> ToolHandle {
    ToolHandle::from_sync_fn(
        "delete",
        "Deletes a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        |input, _| Ok(ToolOutput::text(format!("deleted {}", input["path"]))),
    )
}

fn agent(session: &str) -> Result<rein_agent::AgentBuilder, rein_core::Error> {
    let support = Agent::builder()
        .name("support")
        .model(SupportModel)
        .build()?;
    let builder = Agent::builder();
    let builder = if std::env::var("REIN_DEMO_REVISION").as_deref() == Ok("2") {
        builder.intervention(Intervention::named("freeze").before_tool_call(|ev, _| {
            if ev.tool_use().name == "ledger" {
                BeforeToolCallAction::deny("the ledger is frozen")
            } else {
                BeforeToolCallAction::Proceed
            }
        }))
    } else {
        builder
    };
    // Sessions `screened-*` reject injected spam (what the run's input says is never checked).
    let builder = if session.starts_with("screened-") {
        builder.intervention(Intervention::named("spam").before_invocation(|ev, _| {
            let spam = ev.messages.iter().any(|m| m.text().starts_with("spam"));
            if ev.is_injected() && spam {
                BeforeInvocationAction::deny("no spam")
            } else {
                BeforeInvocationAction::Proceed
            }
        }))
    } else {
        builder
    };
    // Sessions `typed-*` give a typed answer (SPEC §13).
    let builder = if session.starts_with("typed-") {
        builder.output_schema(
            "invoice",
            json!({"type": "object", "properties": {"total_cents": {"type": "integer"}},
                "required": ["total_cents"], "additionalProperties": false}),
        )
    } else {
        builder
    };
    Ok(builder
        .handoff(support)
        .name("ops")
        .model(OpsModel {
            delay: millis("REIN_MODEL_DELAY_MS"),
        })
        .tool(ledger_tool(session.to_owned()))
        .tool(delete_tool())
        .intervention(Intervention::named("approval").before_tool_call(|ev, _| {
            if ev.tool_use().name == "delete" {
                BeforeToolCallAction::confirm(format!("Delete {}?", ev.tool_use().input["path"]))
            } else {
                BeforeToolCallAction::Proceed
            }
        })))
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("inject") {
        let rest: Vec<String> = args.skip(1).collect();
        return inject(&rest).await;
    }
    let mut bind: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9080));
    let mut reuse_port = false;
    let mut register = None;
    let mut identity_keys = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => match args.next().and_then(|a| a.parse().ok()) {
                Some(addr) => bind = addr,
                None => fail("--bind needs an address"),
            },
            "--reuse-port" => reuse_port = true,
            "--identity-key" => match args.next() {
                Some(key) => identity_keys.push(key),
                None => fail("--identity-key needs a key (publickeyv1_...)"),
            },
            "--register" => match (args.next(), args.next()) {
                (Some(admin), Some(deployment)) => register = Some((admin, deployment)),
                _ => fail("--register needs ADMIN_URL DEPLOYMENT_URL"),
            },
            other => fail(&format!("unknown argument {other}")),
        }
    }
    let mut worker = rein_restate::Worker::new(agent)
        // A demo: anyone who reaches the ingress may call; no principal.
        .authenticate(|_caller| Ok(InvocationState::new()));
    for key in identity_keys {
        worker = worker.identity_key(key);
    }
    // `abandon` kills a stuck run through the admin API it registers with.
    if let Some((admin, _)) = &register {
        worker = worker.admin_url(admin.clone());
    }
    let worker = match worker
        .bind(bind)
        .reuse_port(reuse_port)
        .grace_period(Duration::from_secs(5))
        .listen()
        .await
    {
        Ok(worker) => worker,
        Err(e) => fail(&e.to_string()),
    };
    let addr = worker.local_addr().unwrap_or(bind);
    // Restate asks the worker what it serves while registering it: serve first.
    let serving = tokio::spawn(worker.serve(rein_restate::shutdown_signal()));
    if let Some((admin, deployment)) = register
        && let Err(e) = rein_restate::register(&admin, &deployment).await
    {
        fail(&format!("registration failed: {e}"));
    }
    println!("listening {addr}");
    match serving.await {
        // Whoever started the worker may no longer read its output.
        Ok(Ok(())) => {
            let _ = writeln!(std::io::stdout(), "stopped");
        }
        Ok(Err(e)) => fail(&e.to_string()),
        Err(e) => fail(&e.to_string()),
    }
}

async fn inject(args: &[String]) {
    let [ingress, session, prefix, n] = args else {
        fail("inject needs INGRESS_URL SESSION PREFIX N");
    };
    let n: usize = n.parse().unwrap_or(0);
    let client = match rein_restate::Client::new(ingress) {
        Ok(client) => client,
        Err(e) => fail(&e.to_string()),
    };
    for i in 0..n {
        let text = format!("{prefix}-{i}");
        let request = rein_restate::wire::InjectRequest::text(text.clone())
            .idempotency_key(format!("{session}/{text}"));
        match client.inject(session, request).await {
            Ok(report) => println!("{} {text}", report.id),
            Err(e) => println!("refused {text} {}", e.status().unwrap_or(0)),
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("rein-restate-worker: {message}");
    std::process::exit(2)
}
