//! Sessions as release 0.1 stored them (`tests/fixtures/release-0.1`, README there): every
//! store's bytes load into today's code — history, ids, agent state, conversation-manager state
//! and pending interrupts exactly as the writing process held them — and each paused session
//! resumes to completion with the interrupt ids that process handed out: the paused tool runs
//! once, nothing runs again, and the history stays valid.
//!
//! The fixtures are written by `write_release_fixtures` (ignored; run by hand, see the README),
//! never by these tests: a test copies a fixture before the store writes to it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
#[path = "common/scenarios.rs"]
mod scenarios;

use std::path::{Path, PathBuf};

use common::*;
use rein_core::{
    Map, Message, id::MessageId, interrupt::Interrupt, message::InterruptResponse,
    stream::StopReason,
};
use rein_sessions::{FileSessionStore, SessionManager, SessionStore, SharedSessionStore};
use scenarios::{Phase, Proc, SCENARIOS};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The fixtures of release 0.1.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/release-0.1")
}

/// What the writing process held when it was done with a session, and what its store held.
#[derive(Debug, Serialize, Deserialize)]
struct Expected {
    /// The agent in control.
    agent: String,
    /// The agent's history, with the messages' ids.
    messages: Vec<(MessageId, Message)>,
    agent_state: Map,
    conversation_manager_state: Value,
    /// What the store holds: every message ever stored, and where the history starts.
    stored_messages: usize,
    history_start: u64,
    /// The interrupts the writing process handed out (the ids a human answers with).
    interrupts: Vec<Interrupt>,
    /// The interrupts of injected messages parked on a `Confirm`.
    parked: Vec<Interrupt>,
    /// What the writing process's tools did.
    tool_log: Vec<String>,
}

/// The agent's history with the messages' ids.
fn history(agent: &rein_agent::Agent) -> Vec<(MessageId, Message)> {
    let ids = agent.message_ids().iter().copied();
    ids.zip(agent.messages().iter().cloned()).collect()
}

fn expected(name: &str) -> Expected {
    let path = fixtures().join("expected").join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// Loads the session `id` of `store` (the fixture of `name`) into a new agent, checks it came
/// back as written, resumes it as `resume` says and checks what came of it.
async fn load_and_resume(
    store: &SharedSessionStore,
    id: &str,
    name: &str,
    resume: &scenarios::Resume,
    what: &str,
) {
    let want = expected(name);
    let stored = store.load(id).await.unwrap().expect("the session is there");
    assert_eq!(stored.messages.len(), want.stored_messages, "{what}");
    assert_eq!(stored.history_start, want.history_start, "{what}");
    assert_eq!(
        stored.pending_interrupts.is_some(),
        scenarios::paused(name),
        "{what}"
    );

    let p = Proc::default();
    let b =
        scenarios::builder(name, Phase::Resume, &p).session(SessionManager::new(store.clone(), id));
    let mut agent = scenarios::build(&p, b);
    assert!(agent.load_session().await.unwrap(), "{what}");
    assert_eq!(agent.name(), want.agent, "{what}");
    assert_eq!(history(&agent), want.messages, "{what}: history and ids");
    assert_eq!(agent.state().snapshot(), want.agent_state, "{what}");
    assert_eq!(
        agent.conversation_manager_state(),
        want.conversation_manager_state,
        "{what}"
    );
    let pending = agent
        .pending_interrupts()
        .map(rein_agent::PausedRun::interrupts);
    assert_eq!(pending.unwrap_or_default(), want.interrupts, "{what}");
    let parked: Vec<Interrupt> = agent
        .interceptor()
        .pending_approvals()
        .into_iter()
        .flat_map(|p| p.interrupts)
        .collect();
    assert_eq!(parked, want.parked, "{what}");

    let result = match &resume.answer {
        // Answered through the safe API on the interrupts as the writing process handed them
        // out: they have no nonce (their resume id is their id) and carry their fingerprint.
        Some(answer) => {
            for i in &want.parked {
                assert_eq!(i.nonce, None, "{what}");
                agent
                    .interceptor()
                    .answer(i.answer(answer.clone()))
                    .unwrap();
            }
            let answers: Vec<InterruptResponse> = want
                .interrupts
                .iter()
                .inspect(|i| assert_eq!(i.resume_id(), i.id, "{what}"))
                .map(|i| i.answer(answer.clone()))
                .collect();
            agent.invoke(answers).await
        }
        None => agent.invoke(resume.next).await,
    }
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        result.stop_reason,
        StopReason::EndTurn,
        "{what}: {result:?}"
    );
    assert_eq!(result.text(), resume.text, "{what}");
    assert_eq!(p.log(), resume.log, "{what}: each paused tool ran once");
    assert_eq!(agent.name(), resume.agent, "{what}");
    scenarios::assert_resumed_history(agent.messages(), resume, what);

    // What the store now holds is what the agent holds.
    let after = store.load(id).await.unwrap().unwrap();
    assert!(after.pending_interrupts.is_none(), "{what}");
    let active: Vec<(MessageId, Message)> = after
        .active_messages()
        .iter()
        .map(|m| (m.id, m.message.clone()))
        .collect();
    assert_eq!(active, history(&agent), "{what}: store and agent agree");
    // The agent stores its state with the conversation's token calibration (taken out of the
    // live state on load): its checkpoint is what it writes.
    assert_eq!(after.agent_state, agent.checkpoint().agent_state, "{what}");
    assert!(
        after
            .agent_state
            .contains_key(rein_agent::TOKEN_CALIBRATION_KEY),
        "{what}: the calibration learnt in the resumed run is stored"
    );
    assert_eq!(
        after.conversation_manager_state,
        agent.conversation_manager_state(),
        "{what}"
    );
    if let Some(start) = resume.history_start {
        assert_eq!(after.history_start, start, "{what}");
    }
}

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[tokio::test]
async fn file_store_sessions_of_release_0_1_load_and_resume() {
    for name in SCENARIOS {
        for resume in scenarios::resumes(name) {
            let dir = TempDir::new("release-file");
            copy_dir(&fixtures().join("file").join(name), &dir.path().join(name));
            let store = SharedSessionStore::new(FileSessionStore::new(dir.path()));
            let what = format!("file {name} {}", resume.label);
            load_and_resume(&store, name, name, &resume, &what).await;
        }
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_sessions_of_release_0_1_load_and_resume() {
    for name in SCENARIOS {
        for resume in scenarios::resumes(name) {
            let dir = TempDir::new("release-sqlite");
            let db = dir.path().join("sessions.db");
            std::fs::copy(fixtures().join("sqlite/sessions.db"), &db).unwrap();
            let store = SharedSessionStore::new(
                rein_sessions::SqliteSessionStore::open(&db).await.unwrap(),
            );
            let what = format!("sqlite {name} {}", resume.label);
            load_and_resume(&store, name, name, &resume, &what).await;
        }
    }
}

/// The rows of both tables, as the PostgreSQL store wrote them (`postgres/rows.json`).
#[cfg(feature = "postgres")]
#[derive(Debug, Serialize, Deserialize)]
struct PostgresRows {
    rein_sessions: Vec<SessionRow>,
    rein_session_messages: Vec<MessageRow>,
}

#[cfg(feature = "postgres")]
#[derive(Debug, Serialize, Deserialize)]
struct SessionRow {
    session_id: String,
    version: i64,
    schema_version: i32,
    history_start: i64,
    agent_state: String,
    conversation_manager_state: String,
    pending_interrupts: Option<String>,
}

#[cfg(feature = "postgres")]
#[derive(Debug, Serialize, Deserialize)]
struct MessageRow {
    session_id: String,
    seq: i64,
    message_id: String,
    message: String,
}

#[cfg(feature = "postgres")]
async fn side_connection(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Inserts the rows of the session `name` under the session id `id`, byte for byte.
#[cfg(feature = "postgres")]
async fn insert_rows(client: &tokio_postgres::Client, rows: &PostgresRows, name: &str, id: &str) {
    for r in rows.rein_sessions.iter().filter(|r| r.session_id == name) {
        client
            .execute(
                "INSERT INTO rein_sessions (session_id, version, schema_version, history_start, \
                 agent_state, conversation_manager_state, pending_interrupts) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &id,
                    &r.version,
                    &r.schema_version,
                    &r.history_start,
                    &r.agent_state,
                    &r.conversation_manager_state,
                    &r.pending_interrupts,
                ],
            )
            .await
            .unwrap();
    }
    for m in rows
        .rein_session_messages
        .iter()
        .filter(|m| m.session_id == name)
    {
        client
            .execute(
                "INSERT INTO rein_session_messages (session_id, seq, message_id, message) \
                 VALUES ($1, $2, $3, $4)",
                &[&id, &m.seq, &m.message_id, &m.message],
            )
            .await
            .unwrap();
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_sessions_of_release_0_1_load_and_resume() {
    let Some(url) = postgres_url() else { return };
    let rows: PostgresRows =
        serde_json::from_slice(&std::fs::read(fixtures().join("postgres/rows.json")).unwrap())
            .unwrap();
    // The store makes its tables; the rows go in as they were, under fresh session ids.
    let store = SharedSessionStore::new(
        rein_sessions::PostgresSessionStore::connect(&url, 2)
            .await
            .unwrap(),
    );
    let client = side_connection(&url).await;
    for name in SCENARIOS {
        for resume in scenarios::resumes(name) {
            let id = session_id(name);
            insert_rows(&client, &rows, name, &id).await;
            let what = format!("postgres {name} {}", resume.label);
            load_and_resume(&store, &id, name, &resume, &what).await;
            store.delete(&id).await.unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The generator

/// Every write goes to each store alike (same versions), so they all hold the same sessions.
#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[derive(Clone)]
struct Tee(std::sync::Arc<Vec<SharedSessionStore>>);

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl SessionStore for Tee {
    async fn load(
        &self,
        session_id: &str,
    ) -> Result<Option<rein_sessions::SessionSnapshot>, rein_sessions::SessionError> {
        let mut loaded = Vec::new();
        for s in self.0.iter() {
            loaded.push(s.load(session_id).await?);
        }
        assert!(loaded.windows(2).all(|w| w[0] == w[1]), "the stores agree");
        Ok(loaded.swap_remove(0))
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<rein_sessions::SessionWrite>,
    ) -> Result<u64, rein_sessions::SessionError> {
        let mut versions = Vec::new();
        for s in self.0.iter() {
            versions.push(
                s.write(session_id, expected_version, writes.clone())
                    .await?,
            );
        }
        assert!(
            versions.windows(2).all(|w| w[0] == w[1]),
            "the stores agree"
        );
        Ok(versions[0])
    }

    async fn delete(&self, session_id: &str) -> Result<(), rein_sessions::SessionError> {
        for s in self.0.iter() {
            s.delete(session_id).await?;
        }
        Ok(())
    }
}

/// Writes the fixtures with this release's code into `REIN_WRITE_FIXTURES` (a new directory):
/// `REIN_WRITE_FIXTURES=/tmp/release-x REIN_TEST_POSTGRES=... cargo test -p rein-sessions
/// --all-features --test it -- --ignored release_fixtures::write_release_fixtures`.
#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[tokio::test]
#[ignore = "writes the fixtures; run by hand with the release that writes them"]
async fn write_release_fixtures() {
    let dir = PathBuf::from(std::env::var("REIN_WRITE_FIXTURES").expect("REIN_WRITE_FIXTURES"));
    assert!(
        !dir.exists(),
        "{} exists: give a new directory",
        dir.display()
    );
    let url = std::env::var("REIN_TEST_POSTGRES").expect("REIN_TEST_POSTGRES");
    for d in ["expected", "sqlite", "postgres"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let postgres = rein_sessions::PostgresSessionStore::connect(&url, 2)
        .await
        .unwrap();
    for name in SCENARIOS {
        postgres.delete(name).await.unwrap();
    }
    let tee = Tee(std::sync::Arc::new(vec![
        // Compacting every 4 writes: the files hold snapshots and tombstones too.
        SharedSessionStore::new(FileSessionStore::new(dir.join("file")).compact_after(4)),
        SharedSessionStore::new(
            rein_sessions::SqliteSessionStore::open(dir.join("sqlite/sessions.db"))
                .await
                .unwrap(),
        ),
        SharedSessionStore::new(postgres.clone()),
    ]));
    for name in SCENARIOS {
        let p = Proc::default();
        let b = scenarios::builder(name, Phase::Write, &p)
            .session(SessionManager::new(tee.clone(), *name));
        let mut agent = scenarios::build(&p, b);
        let mut last = None;
        for input in scenarios::inputs(name) {
            last = Some(agent.invoke(input).await.unwrap());
        }
        let result = last.unwrap();
        let paused = result.stop_reason == StopReason::Interrupt;
        assert_eq!(paused, scenarios::paused(name), "{name}: {result:?}");
        if *name == "parked_injection" {
            // Injected while the run waits for the human: queued for the resume.
            agent.interceptor().inject("and the logs").unwrap();
            agent.save_session().await.unwrap();
        }
        let stored = tee.load(name).await.unwrap().unwrap();
        let expected = Expected {
            agent: agent.name().to_owned(),
            messages: history(&agent),
            agent_state: agent.state().snapshot(),
            conversation_manager_state: agent.conversation_manager_state(),
            stored_messages: stored.messages.len(),
            history_start: stored.history_start,
            interrupts: result.interrupts.clone(),
            parked: agent
                .interceptor()
                .pending_approvals()
                .into_iter()
                .flat_map(|p| p.interrupts)
                .collect(),
            tool_log: p.log(),
        };
        let json = serde_json::to_string_pretty(&expected).unwrap();
        std::fs::write(
            dir.join("expected").join(format!("{name}.json")),
            json + "\n",
        )
        .unwrap();
    }
    drop(tee);

    // The PostgreSQL rows, exactly as stored.
    let client = side_connection(&url).await;
    let names: Vec<String> = SCENARIOS.iter().map(|s| (*s).to_owned()).collect();
    let sessions = client
        .query(
            "SELECT session_id, version, schema_version, history_start, agent_state, \
             conversation_manager_state, pending_interrupts FROM rein_sessions \
             WHERE session_id = ANY($1) ORDER BY session_id",
            &[&names],
        )
        .await
        .unwrap();
    let messages = client
        .query(
            "SELECT session_id, seq, message_id, message FROM rein_session_messages \
             WHERE session_id = ANY($1) ORDER BY session_id, seq",
            &[&names],
        )
        .await
        .unwrap();
    let rows = PostgresRows {
        rein_sessions: sessions
            .iter()
            .map(|r| SessionRow {
                session_id: r.get(0),
                version: r.get(1),
                schema_version: r.get(2),
                history_start: r.get(3),
                agent_state: r.get(4),
                conversation_manager_state: r.get(5),
                pending_interrupts: r.get(6),
            })
            .collect(),
        rein_session_messages: messages
            .iter()
            .map(|r| MessageRow {
                session_id: r.get(0),
                seq: r.get(1),
                message_id: r.get(2),
                message: r.get(3),
            })
            .collect(),
    };
    let json = serde_json::to_string_pretty(&rows).unwrap();
    std::fs::write(dir.join("postgres/rows.json"), json + "\n").unwrap();
    for name in SCENARIOS {
        postgres.delete(name).await.unwrap();
    }
}

/// Issue 43: a session of release 0.1 loads into an agent whose manager summarizes, and its
/// first summary names the old messages, which stay stored.
#[tokio::test]
async fn a_release_0_1_session_loads_into_a_summarizing_agent() {
    use rein_agent::SummarizingWindow;
    use rein_core::ContentBlock;
    use rein_models::ScriptedModel;
    let dir = TempDir::new("release-summary");
    copy_dir(
        &fixtures().join("file").join("finished"),
        &dir.path().join("finished"),
    );
    let store = SharedSessionStore::new(FileSessionStore::new(dir.path()));
    let before = store.load("finished").await.unwrap().unwrap();
    let summarizer = ScriptedModel::builder().text("They counted.").build();
    let mut agent = rein_agent::Agent::builder()
        .model(ScriptedModel::builder().text("Done.").build())
        // The scripted model reports few input tokens, which calibrates the estimate low: a
        // budget of 1 summarizes at the first chance.
        .conversation_manager(SummarizingWindow::new(1).summarizer(summarizer))
        .session(SessionManager::new(store.clone(), "finished"))
        .build()
        .unwrap();
    assert!(agent.load_session().await.unwrap());
    let old: Vec<MessageId> = history(&agent).iter().map(|(id, _)| *id).collect();
    agent.invoke("next").await.unwrap();
    let summary = agent.messages()[0]
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::Summary(s) => Some(s.clone()),
            _ => None,
        })
        .expect("summarized");
    assert_eq!(summary.text, "They counted.");
    assert_eq!(summary.first_message_id, old[0]);
    let after = store.load("finished").await.unwrap().unwrap();
    assert_eq!(after.messages.len(), before.messages.len() + 2);
    for id in &old {
        assert!(after.messages.iter().any(|m| m.id == *id), "kept {id}");
    }
}
