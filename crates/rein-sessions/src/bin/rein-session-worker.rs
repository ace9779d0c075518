//! A helper process for rein-sessions' tests (not a stable interface): runs one agent step or
//! a loop of store writes against a store named on the command line, so tests can resume in
//! another process, kill a writer mid-write, or race two writers.
//!
//! `rein-session-worker STORE SESSION COMMAND [ARGS]` where STORE is `file:DIR`,
//! `sqlite:PATH` or `postgres:URL`, and COMMAND is
//! - `interrupt`: an agent asks to run the `delete` tool and stops for approval;
//! - `resume ID ANSWER`: a new agent restores the session and resumes with the answer;
//! - `hold POINT`: an agent with a confirm at POINT (`after_tool_call`, `after_model_call`,
//!   `before_model_call`, `before_invocation`) runs until it pauses there;
//! - `resume-at POINT ID ANSWER`: a new agent with the same confirm resumes with the answer
//!   (JSON, e.g. `{"approved":true,"edit":"..."}`, or else a plain string);
//! - `append WRITER N`: appends messages `WRITER-i` up to `i = N - 1` (continuing after the
//!   ones already stored), retrying on conflicts; prints `ok i` after each commit and
//!   `conflicts C` at the end;
//! - `nested-interrupt LEDGER`: top → manager → clerk (agents as tools); the clerk's `delete`
//!   stops for approval; every run of `delete` appends a line to the file LEDGER;
//! - `nested-resume LEDGER ID ANSWER`: new agents and factories resume with the answer;
//! - `queued-interrupt`: a run stops for approval with an item injected before the pause and
//!   one injected during it, saved with the pending interrupts;
//! - `queued-resume ID ANSWER` / `queued-discard`: a new agent resumes (or discards) that run,
//!   printing what was consumed and rejected.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use rein_agent::{Agent, AgentBuilder};
use rein_core::{
    Error, Message, ToolHandle, event::BeforeToolCallEvent, id::MessageId, interrupt::Interrupt,
    message::InterruptResponse,
};

use rein_interventions::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    Intervention,
};
use rein_models::ScriptedModel;
use rein_sessions::{
    FileSessionStore, SessionError, SessionManager, SessionStore, SessionWrite, SharedSessionStore,
    StoredMessage,
};
use serde_json::{Value, json};

/// What the worker fails with: Rein's errors, or a usage error of its own.
type Failure = Box<dyn std::error::Error + Send + Sync>;

async fn open_store(spec: &str) -> Result<SharedSessionStore, Failure> {
    if let Some(dir) = spec.strip_prefix("file:") {
        return Ok(SharedSessionStore::new(FileSessionStore::new(dir)));
    }
    #[cfg(feature = "sqlite")]
    if let Some(path) = spec.strip_prefix("sqlite:") {
        return Ok(SharedSessionStore::new(
            rein_sessions::SqliteSessionStore::open(path).await?,
        ));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = spec.strip_prefix("postgres:") {
        return Ok(SharedSessionStore::new(
            rein_sessions::PostgresSessionStore::connect(url, 1).await?,
        ));
    }
    Err(format!("unknown or disabled store: {spec}").into())
}

fn agent(store: SharedSessionStore, session: &str, model: ScriptedModel) -> Result<Agent, Error> {
    builder(store, session, model).build()
}

/// An agent with `delete`, which asks for approval first.
fn builder(store: SharedSessionStore, session: &str, model: ScriptedModel) -> AgentBuilder {
    let delete = ToolHandle::from_fn(
        "delete",
        "Deletes a file.",
        json!({"type": "object"}),
        |input, _| async move {
            let path = input["path"].as_str().unwrap_or("?").to_owned();
            Ok(format!("deleted {path} in process {}", std::process::id()).into())
        },
    );
    Agent::builder()
        .model(model)
        .tool(delete)
        .hook(|e: &mut BeforeToolCallEvent| {
            if e.tool_use().name == "delete"
                && let Some(answer) = e.interrupt("approval", "Delete the file?")
                && answer != "yes"
            {
                e.cancel_tool = rein_core::event::Cancel::Message("rejected".into());
            }
        })
        .session(SessionManager::new(store, session))
}

/// The answer to the interrupt this process was told about by its resume id: the session's
/// pending interrupt with that id, answered as asked (`Interrupt::answer`; the id's nonce pins
/// the pause it was shown in). An id that names nothing pending is answered as is, for the
/// agent to refuse with its typed error.
async fn answer_to(
    agent: &mut Agent,
    id: &str,
    answer: impl Into<Value>,
) -> Result<InterruptResponse, Failure> {
    agent.load_session().await?;
    Ok(
        match agent.pending_interrupts().and_then(|p| p.interrupt(id)) {
            Some(i) => i.answer(answer),
            None => InterruptResponse::new(id, answer),
        },
    )
}

async fn run(args: &[String]) -> Result<(), Failure> {
    let [store, session, command, rest @ ..] = args else {
        return Err("usage: rein-session-worker STORE SESSION COMMAND [ARGS]".into());
    };
    let store = open_store(store).await?;
    let mut out = std::io::stdout();
    match (command.as_str(), rest) {
        ("interrupt", []) => {
            let model = ScriptedModel::builder()
                .tool_use("t1", "delete", json!({"path": "report.txt"}))
                .build();
            let r = agent(store, session, model)?
                .invoke("Delete report.txt")
                .await?;
            let ids: Vec<String> = r.interrupts.iter().map(Interrupt::resume_id).collect();
            let line = json!({"stop_reason": r.stop_reason.as_str(), "interrupts": ids});
            let _ = writeln!(out, "{line}");
        }
        ("resume", [id, answer]) => {
            let model = ScriptedModel::builder().text("The file is gone.").build();
            let mut agent = agent(store, session, model)?;
            let answer = answer_to(&mut agent, id, answer.as_str()).await?;
            let r = agent.invoke(vec![answer]).await?;
            let line = json!({
                "stop_reason": r.stop_reason.as_str(),
                "text": r.text(),
                "messages": agent.messages().len(),
            });
            let _ = writeln!(out, "{line}");
        }
        (
            "nested-interrupt" | "nested-resume" | "queued-interrupt" | "queued-resume"
            | "queued-discard",
            _,
        ) => {
            let line = across_agents(store, session, command, rest).await?;
            let _ = writeln!(out, "{line}");
        }
        ("hold", [point]) => hold(store, session, point).await?,
        ("resume-at", [point, id, answer]) => resume_at(store, session, point, id, answer).await?,
        ("append", [writer, n]) => {
            let n: usize = n.parse().map_err(|_| format!("not a count: {n}"))?;
            let prefix = format!("{writer}-");
            let mut conflicts = 0u64;
            let mut version;
            let mut i;
            {
                let s = store.load(session).await?;
                version = s.as_ref().map_or(0, |s| s.version);
                i = s.map_or(0, |s| {
                    s.messages
                        .iter()
                        .filter(|m| m.message.text().starts_with(&prefix))
                        .count()
                });
            }
            while i < n {
                let m = StoredMessage::new(MessageId::new(), Message::user(format!("{prefix}{i}")));
                match store
                    .write(session, version, vec![SessionWrite::AppendMessage(m)])
                    .await
                {
                    Ok(v) => {
                        version = v;
                        let _ = writeln!(out, "ok {i}");
                        let _ = out.flush();
                        i += 1;
                    }
                    Err(SessionError::Conflict {
                        expected, found, ..
                    }) => {
                        // One typed conflict per lost race; the retry path: reload, redo.
                        if found <= expected {
                            return Err(format!(
                                "conflict with found {found} <= expected {expected}"
                            )
                            .into());
                        }
                        conflicts += 1;
                        version = store.load(session).await?.map_or(0, |s| s.version);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let _ = writeln!(out, "conflicts {conflicts}");
        }
        _ => return Err(format!("unknown command: {command}").into()),
    }
    Ok(())
}

/// The commands over nested agents and injection across a pause; the JSON line they print.
async fn across_agents(
    store: SharedSessionStore,
    session: &str,
    command: &str,
    rest: &[String],
) -> Result<serde_json::Value, Failure> {
    match (command, rest) {
        ("nested-interrupt", [ledger]) => {
            let models = [
                ScriptedModel::builder()
                    .tool_use("m1", "manager", json!({"input": "clean up"}))
                    .build(),
                ScriptedModel::builder()
                    .tool_use("c1", "clerk", json!({"input": "delete the draft"}))
                    .build(),
                ScriptedModel::builder()
                    .tool_use("d1", "delete", json!({"path": "draft"}))
                    .build(),
            ];
            let r = three_levels(store, session, &models, ledger)?
                .invoke("tidy up")
                .await?;
            let interrupts: Vec<_> = r
                .interrupts
                .iter()
                .map(|i| json!({"id": i.resume_id(), "name": i.name}))
                .collect();
            Ok(json!({
                "stop_reason": r.stop_reason.as_str(),
                "interrupts": interrupts,
                "model_calls": model_calls(&models),
                "deletes": ledger_lines(ledger),
            }))
        }
        ("nested-resume", [ledger, id, answer]) => {
            // Each level's model holds only what comes after the pause: asked again for what
            // it answered before, it would run out and fail the run.
            let models = [
                ScriptedModel::builder().text("all tidy").build(),
                ScriptedModel::builder().text("the clerk is done").build(),
                ScriptedModel::builder().text("deleted the draft").build(),
            ];
            let mut agent = three_levels(store, session, &models, ledger)?;
            let answer = answer_to(&mut agent, id, answer.as_str()).await?;
            let r = agent.invoke(vec![answer]).await?;
            // What each level's model was given back: the result of the call it had made.
            let saw: Vec<String> = models
                .iter()
                .map(|m| {
                    m.requests()
                        .first()
                        .and_then(|q| q.messages.last())
                        .map(|m| m.tool_results().map(|r| r.text()).collect())
                        .unwrap_or_default()
                })
                .collect();
            Ok(json!({
                "stop_reason": r.stop_reason.as_str(),
                "text": r.text(),
                "model_calls": model_calls(&models),
                "saw": saw,
                "deletes": ledger_lines(ledger),
            }))
        }
        ("queued-interrupt", []) => {
            let model = ScriptedModel::builder()
                .response(
                    rein_models::ScriptedResponse::new()
                        .tool_use("n1", "note", json!({}))
                        .tool_use("d1", "delete", json!({"path": "old.log"})),
                )
                .build();
            let mut agent = queued_agent(store, session, model)?;
            let r = agent.invoke("note, then delete old.log").await?;
            // Injected while the run waits for the human; saved with the pending interrupts.
            agent.interceptor().inject("and the logs")?;
            agent.save_session().await?;
            let ids: Vec<String> = r.interrupts.iter().map(Interrupt::resume_id).collect();
            Ok(json!({"stop_reason": r.stop_reason.as_str(), "interrupts": ids}))
        }
        ("queued-resume", [id, answer]) => {
            let model = ScriptedModel::builder().text("done").build();
            let mut agent = queued_agent(store, session, model.clone())?;
            let fates = watch_injections(&agent);
            let answer = answer_to(&mut agent, id, answer.as_str()).await?;
            let r = agent.invoke(vec![answer]).await?;
            let sent: Vec<String> = model
                .requests()
                .iter()
                .flat_map(|q| q.messages.iter().map(|m| m.text()))
                .collect();
            Ok(json!({"text": r.text(), "fates": fates.take(), "sent": sent}))
        }
        ("queued-discard", []) => {
            let model = ScriptedModel::builder().build();
            let mut agent = queued_agent(store, session, model)?;
            let fates = watch_injections(&agent);
            agent.load_session().await?;
            agent.discard_interrupts();
            agent.save_session().await?;
            Ok(json!({"fates": fates.take()}))
        }
        _ => Err(format!("bad arguments for {command}").into()),
    }
}

/// top → manager → clerk, agents as tools built by factories as a restarted process would;
/// the clerk asks before `delete`, which appends a line to `ledger` each time it runs.
fn three_levels(
    store: SharedSessionStore,
    session: &str,
    models: &[ScriptedModel; 3],
    ledger: &str,
) -> Result<Agent, Error> {
    use rein_agent::AgentTool;
    let [top, manager, clerk] = models.clone();
    let ledger = std::path::PathBuf::from(ledger);
    let clerk_tool = AgentTool::new("clerk", "Deletes files.", move || {
        let ledger = ledger.clone();
        let delete = ToolHandle::from_sync_fn(
            "delete",
            "Deletes a file.",
            json!({"type": "object"}),
            move |_, _| {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&ledger)
                    .map_err(|e| rein_core::tool::ToolError::msg(e.to_string()))?;
                writeln!(f, "delete in process {}", std::process::id())
                    .map_err(|e| rein_core::tool::ToolError::msg(e.to_string()))?;
                Ok(rein_core::tool::ToolOutput::text("deleted"))
            },
        );
        Agent::builder()
            .name("clerk")
            .model(clerk.clone())
            .tool(delete)
            .hook(|e: &mut BeforeToolCallEvent| {
                if let Some(answer) = e.interrupt("approval", "Delete the draft?")
                    && answer != "yes"
                {
                    e.cancel_tool = rein_core::event::Cancel::Message("rejected".into());
                }
            })
            .build()
    });
    let manager_tool = AgentTool::new("manager", "Delegates.", move || {
        Agent::builder()
            .name("manager")
            .model(manager.clone())
            .tool(clerk_tool.clone())
            .build()
    });
    Agent::builder()
        .model(top)
        .tool(manager_tool)
        .session(SessionManager::new(store, session))
        .build()
}

fn model_calls(models: &[ScriptedModel]) -> Vec<usize> {
    models.iter().map(|m| m.requests().len()).collect()
}

/// How many times `delete` ran, in any process.
fn ledger_lines(ledger: &str) -> usize {
    std::fs::read_to_string(ledger).map_or(0, |s| s.lines().count())
}

/// An agent with `note` (injects "also check the backups" into the run) and `delete`, which
/// asks first.
fn queued_agent(
    store: SharedSessionStore,
    session: &str,
    model: ScriptedModel,
) -> Result<Agent, Error> {
    let slot: std::sync::Arc<std::sync::OnceLock<rein_agent::TurnInterceptor>> =
        std::sync::Arc::default();
    let s = slot.clone();
    let note = ToolHandle::from_sync_fn(
        "note",
        "Takes a note.",
        json!({"type": "object"}),
        move |_, _| {
            if let Some(i) = s.get() {
                i.inject(Message::user("also check the backups"))
                    .map_err(|e| rein_core::tool::ToolError::msg(e.to_string()))?;
            }
            Ok(rein_core::tool::ToolOutput::text("noted"))
        },
    );
    let agent = builder(store, session, model).tool(note).build()?;
    let _ = slot.set(agent.interceptor());
    Ok(agent)
}

/// What became of each injected item, as `[text, "consumed" or the rejection reason]`, in
/// the order it happened.
#[derive(Clone, Default)]
struct Fates(std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>);

impl Fates {
    fn push(&self, text: String, fate: &str) {
        if let Ok(mut v) = self.0.lock() {
            v.push((text, fate.to_owned()));
        }
    }
    fn take(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

fn watch_injections(agent: &Agent) -> Fates {
    let fates = Fates::default();
    let i = agent.interceptor();
    let f = fates.clone();
    i.on_consumed(move |_, m| f.push(m.text(), "consumed"));
    let f = fates.clone();
    i.on_rejected(move |_, m, reason| f.push(m.text(), reason));
    fates
}

// ---------------------------------------------------------------------------------------------
// `hold` / `resume-at`: a confirm at one lifecycle point (SPEC §3.8), held by one process and
// answered by another. Each prints what its process did: model calls and `count` runs.

/// A handler that asks at `point` (once per run: where the scripts below pause).
fn confirm_at(point: &str) -> Result<Intervention, Failure> {
    let handler = Intervention::named("confirm");
    Ok(match point {
        "after_tool_call" => {
            handler.after_tool_call(|_, _| AfterToolCallAction::confirm("Send the result?"))
        }
        "after_model_call" => handler.after_model_call(|ev, _| {
            if ev.response().is_some_and(|r| r.message.has_tool_use()) {
                AfterModelCallAction::confirm("Run its tools?")
            } else {
                AfterModelCallAction::Proceed
            }
        }),
        // The request carrying the tool's result.
        "before_model_call" => handler.before_model_call(|ev, _| {
            let last = ev.request.messages.last();
            if last.is_some_and(|m| m.tool_results().next().is_some()) {
                BeforeModelCallAction::confirm("Send the result to the provider?")
            } else {
                BeforeModelCallAction::Proceed
            }
        }),
        "before_invocation" => handler.before_invocation(|ev, _| {
            if ev.is_injected() {
                BeforeInvocationAction::Proceed
            } else {
                BeforeInvocationAction::confirm("Let this in?")
            }
        }),
        _ => return Err(format!("unknown point: {point}").into()),
    })
}

/// An agent whose `count` tool counts its runs in `runs`, with a confirm at `point`.
fn point_agent(
    store: SharedSessionStore,
    session: &str,
    point: &str,
    model: &ScriptedModel,
    runs: &Arc<AtomicU32>,
) -> Result<Agent, Failure> {
    let runs = runs.clone();
    let count = ToolHandle::from_sync_fn(
        "count",
        "Counts.",
        json!({"type": "object"}),
        move |_, _| {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(rein_core::tool::ToolOutput::text(format!("count={n}")))
        },
    );
    Ok(Agent::builder()
        .model(model.clone())
        .tool(count)
        .intervention(confirm_at(point)?)
        .session(SessionManager::new(store, session))
        .build()?)
}

/// The model calls `count`, then answers.
async fn hold(store: SharedSessionStore, session: &str, point: &str) -> Result<(), Failure> {
    let model = ScriptedModel::builder()
        .tool_use("t1", "count", json!({}))
        .text("counted")
        .build();
    let runs = Arc::new(AtomicU32::new(0));
    let r = point_agent(store, session, point, &model, &runs)?
        .invoke("Count once")
        .await?;
    let ids: Vec<String> = r.interrupts.iter().map(Interrupt::resume_id).collect();
    let line = json!({
        "stop_reason": r.stop_reason.as_str(),
        "interrupts": ids,
        "model_calls": model.requests().len(),
        "tool_runs": runs.load(Ordering::SeqCst),
    });
    let _ = writeln!(std::io::stdout(), "{line}");
    Ok(())
}

/// A new agent resumes; its model holds only what comes after the pause.
async fn resume_at(
    store: SharedSessionStore,
    session: &str,
    point: &str,
    id: &str,
    answer: &str,
) -> Result<(), Failure> {
    let model = match point {
        // Nothing was sent before the pause.
        "before_invocation" => ScriptedModel::builder()
            .tool_use("t1", "count", json!({}))
            .text("counted"),
        _ => ScriptedModel::builder().text("counted"),
    }
    .build();
    let answer = serde_json::from_str(answer).unwrap_or_else(|_| json!(answer));
    let runs = Arc::new(AtomicU32::new(0));
    let mut agent = point_agent(store, session, point, &model, &runs)?;
    let answer = answer_to(&mut agent, id, answer).await?;
    let r = agent.invoke(vec![answer]).await?;
    let results: Vec<String> = agent
        .messages()
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| r.text())
        .collect();
    let line = json!({
        "stop_reason": r.stop_reason.as_str(),
        "text": r.text(),
        "tool_results": results,
        "model_calls": model.requests().len(),
        "tool_runs": runs.load(Ordering::SeqCst),
    });
    let _ = writeln!(std::io::stdout(), "{line}");
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
