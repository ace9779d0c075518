//! A helper process for rein-sessions' tests (not a stable interface): runs one agent step or
//! a loop of store writes against a store named on the command line, so tests can resume in
//! another process, kill a writer mid-write, or race two writers.
//!
//! `rein-session-worker STORE SESSION COMMAND [ARGS]` where STORE is `file:DIR`,
//! `sqlite:PATH` or `postgres:URL`, and COMMAND is
//! - `interrupt`: an agent asks to run the `delete` tool and stops for approval;
//! - `resume ID ANSWER`: a new agent restores the session and resumes with the answer;
//! - `append WRITER N`: appends messages `WRITER-i` up to `i = N - 1` (continuing after the
//!   ones already stored), retrying on conflicts; prints `ok i` after each commit and
//!   `conflicts C` at the end.

use std::io::Write as _;

use rein_agent::Agent;
use rein_core::{
    Error, Message, ToolHandle, event::BeforeToolCallEvent, id::MessageId,
    message::InterruptResponse,
};

/// What the worker fails with: Rein's errors, or a usage error of its own.
type Failure = Box<dyn std::error::Error + Send + Sync>;
use rein_models::ScriptedModel;
use rein_sessions::{
    FileSessionStore, SessionError, SessionManager, SessionStore, SessionWrite, SharedSessionStore,
    StoredMessage,
};
use serde_json::json;

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
            if let Some(answer) = e.interrupt("approval", "Delete the file?")
                && answer != "yes"
            {
                e.cancel_tool = rein_core::event::Cancel::Message("rejected".into());
            }
        })
        .session(SessionManager::new(store, session))
        .build()
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
            let ids: Vec<&str> = r.interrupts.iter().map(|i| i.id.as_str()).collect();
            let line = json!({"stop_reason": r.stop_reason.as_str(), "interrupts": ids});
            let _ = writeln!(out, "{line}");
        }
        ("resume", [id, answer]) => {
            let model = ScriptedModel::builder().text("The file is gone.").build();
            let mut agent = agent(store, session, model)?;
            let r = agent
                .invoke(vec![InterruptResponse::new(id, answer.as_str())])
                .await?;
            let line = json!({
                "stop_reason": r.stop_reason.as_str(),
                "text": r.text(),
                "messages": agent.messages().len(),
            });
            let _ = writeln!(out, "{line}");
        }
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
