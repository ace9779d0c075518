//! Issue 42, item 1: an MCP server's elicitation (the reference server's
//! `trigger-elicitation-request`) pauses the run with an interrupt that the SQL stores keep,
//! and a new agent — over a new store connection and a new server process, as after a restart
//! — loads it and resumes with the answer: the tool call is issued again and the server gets
//! the stored form. SQLite always; PostgreSQL with `REIN_TEST_POSTGRES`. Skipped without
//! `REIN_MCP_EVERYTHING` (`.ci/peers-mcp.sh`).

use rein_agent::Agent;
use rein_core::stream::StopReason;
use rein_mcp::{ELICITATION_INTERRUPT, ElicitationAnswer, McpClient};
use rein_models::ScriptedModel;
use rein_sessions::{SessionManager, SharedSessionStore};
use serde_json::json;

const TOOL: &str = "everything__trigger-elicitation-request";

/// A client of a new reference-server process, or `None` (skipped).
async fn everything() -> Option<McpClient> {
    let Ok(command) = std::env::var("REIN_MCP_EVERYTHING") else {
        eprintln!(
            "\n*** SKIPPED: REIN_MCP_EVERYTHING is unset (bash .ci/peers-mcp.sh target/peers) ***\n"
        );
        return None;
    };
    let command: Vec<&str> = command.split_whitespace().collect();
    let (program, args) = command.split_first().unwrap();
    Some(
        McpClient::builder()
            .quiet(true)
            .stdio(program, args)
            .await
            .unwrap(),
    )
}

async fn agent(
    store: SharedSessionStore,
    session: &str,
    client: &McpClient,
    model: ScriptedModel,
) -> Agent {
    Agent::builder()
        .model(model)
        .tools(client.tools().await.unwrap())
        .session(SessionManager::new(store, session))
        .build()
        .unwrap()
}

/// Pauses on the server's question with `first`, resumes with the answer with `second` (a
/// store opened anew on the same database), and checks what the server got.
async fn pause_and_resume(first: SharedSessionStore, second: SharedSessionStore, what: &str) {
    let session = format!("elicit-{what}-{}", uuid::Uuid::new_v4().simple());
    let Some(client) = everything().await else {
        return;
    };
    let model = ScriptedModel::builder()
        .tool_use("t1", TOOL, json!({}))
        .build();
    let mut asking = agent(first, &session, &client, model).await;
    let paused = asking.invoke("Sign me up.").await.unwrap();
    client.close().await;
    assert_eq!(paused.stop_reason, StopReason::Interrupt, "{what}");
    drop(asking);

    let client = everything().await.unwrap();
    let model = ScriptedModel::builder().text("You are signed up.").build();
    let mut answering = agent(second, &session, &client, model).await;
    answering.load_session().await.unwrap();
    let interrupts = answering
        .pending_interrupts()
        .expect("the stored pause")
        .interrupts();
    let [asked] = interrupts.as_slice() else {
        panic!("{what}: {interrupts:?}");
    };
    // As asked: the server's message and form, and the schema of the answer it takes.
    assert_eq!(asked.name, ELICITATION_INTERRUPT, "{what}");
    assert_eq!(asked.reason["mode"], "form", "{what}");
    assert_eq!(
        asked.reason["requestedSchema"]["required"],
        json!(["name"]),
        "{what}"
    );
    assert!(asked.response_schema.is_some(), "{what}");
    let answer = asked.answer(ElicitationAnswer::accept(
        json!({"name": "Ada Lovelace", "check": true}),
    ));
    let done = answering.invoke(vec![answer]).await.unwrap();
    client.close().await;
    assert_eq!(done.text(), "You are signed up.", "{what}");
    let results: Vec<String> = answering
        .messages()
        .iter()
        .flat_map(|m| m.tool_results().map(|r| r.text()).collect::<Vec<_>>())
        .collect();
    assert!(
        results.iter().any(|r| r.contains("- Name: Ada Lovelace")),
        "{what}: {results:?}"
    );
    assert!(answering.pending_interrupts().is_none(), "{what}");
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_pauses_in_sqlite_and_resumes_with_the_answer() {
    let dir = crate::common::TempDir::new("mcp-elicitation");
    let db = dir.path().join("sessions.db");
    let open = async || {
        SharedSessionStore::new(rein_sessions::SqliteSessionStore::open(&db).await.unwrap())
    };
    pause_and_resume(open().await, open().await, "sqlite").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_pauses_in_postgres_and_resumes_with_the_answer() {
    let Some(url) = crate::common::postgres_url() else {
        return;
    };
    let open = async || {
        SharedSessionStore::new(
            rein_sessions::PostgresSessionStore::connect(&url, 2)
                .await
                .unwrap(),
        )
    };
    pause_and_resume(open().await, open().await, "postgres").await;
}
