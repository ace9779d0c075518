//! Every store: round-trip of every content-block kind, the write operations against the
//! in-memory reference, versioning and conflicts, schema checks, file-store compaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use rein_agent::PausedRun;
use rein_core::{
    Message, ToolResult,
    id::MessageId,
    interrupt::{Interrupt, InterruptAnswer},
};
use rein_sessions::{
    FileSessionStore, SessionError, SessionSnapshot, SessionStore, SessionWrite, StoredMessage,
};
use serde_json::json;

fn pending(assistant: &StoredMessage) -> PausedRun {
    serde_json::from_value(json!({
        "schema_version": 1, // release 0.1's shape: it loads into today's
        "interrupts": [Interrupt::new("v1:before_tool_call:t1:x", "approval", "Delete?")
            .with_fingerprint("fp-1").with_tool_use_id("t1")],
        "answers": {"v1:before_tool_call:t1:y": InterruptAnswer { response: json!("yes"), fingerprint: Some("fp-2".into()) }},
        "assistant_message_id": assistant.id,
        "assistant_message": assistant.message,
        "completed_results": [ToolResult::success("t2", "ok")],
        "invocation_state": {"user": "ann"},
        "model_call_index": 2,
    }))
    .unwrap()
}

#[tokio::test]
async fn every_block_kind_round_trips_through_every_store() {
    let dir = TempDir::new("roundtrip");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("blocks");
        let messages: Vec<StoredMessage> = every_block_kind()
            .into_iter()
            .map(|m| StoredMessage::new(MessageId::new(), m))
            .collect();
        let p = pending(&messages[1]);
        let mut state = rein_core::Map::new();
        state.insert("count".into(), json!(3));
        state.insert("nested".into(), json!({"a": [1.5, "x", null]}));
        let mut writes: Vec<SessionWrite> = messages
            .iter()
            .cloned()
            .map(SessionWrite::AppendMessage)
            .collect();
        writes.push(SessionWrite::SetAgentState(state.clone()));
        writes.push(SessionWrite::SetConversationManagerState(
            json!({"removed_message_count": 0, "window": 40}),
        ));
        writes.push(SessionWrite::SetPendingInterrupts(Some(Box::new(
            p.clone(),
        ))));
        assert_eq!(store.write(&id, 0, writes).await.unwrap(), 1, "{name}");
        let s = store.load(&id).await.unwrap().unwrap();
        assert_eq!(s.version, 1, "{name}");
        assert_eq!(s.messages, messages, "{name}: messages and ids round-trip");
        assert_eq!(s.agent_state, state, "{name}");
        assert_eq!(s.pending_interrupts, Some(p), "{name}");
        assert_eq!(s.conversation_manager_state["window"], json!(40), "{name}");
        store.delete(&id).await.unwrap();
        assert!(store.load(&id).await.unwrap().is_none(), "{name}");
    }
}

#[tokio::test]
async fn writes_match_the_reference_and_versions_conflict_typed() {
    let dir = TempDir::new("ops");
    for (name, store, _) in stores(&dir).await {
        let id = session_id("ops");
        let reference_store = rein_sessions::MemorySessionStore::new();
        let m = |t: &str| StoredMessage::new(MessageId::new(), Message::user(t));
        let (a, b, c) = (m("a"), m("b"), m("c"));
        let steps: Vec<Vec<SessionWrite>> = vec![
            vec![
                SessionWrite::AppendMessage(a.clone()),
                SessionWrite::AppendMessage(b.clone()),
            ],
            vec![SessionWrite::UpdateMessage(StoredMessage::new(
                a.id,
                Message::assistant("a2"),
            ))],
            vec![
                SessionWrite::UpdateMessage(StoredMessage::new(
                    MessageId::new(),
                    Message::user("?"),
                )),
                SessionWrite::AppendMessage(c.clone()),
                SessionWrite::SetHistoryStart(1),
            ],
            vec![SessionWrite::SetPendingInterrupts(Some(Box::new(pending(
                &b,
            ))))],
            vec![SessionWrite::SetPendingInterrupts(None)],
            vec![],
            vec![
                SessionWrite::ReplaceMessages(vec![c.clone(), a.clone()]),
                SessionWrite::AppendMessage(b.clone()),
            ],
        ];
        let mut version = 0;
        for (i, w) in steps.into_iter().enumerate() {
            let v = store.write(&id, version, w.clone()).await.unwrap();
            assert_eq!(v, version + 1, "{name} step {i}");
            reference_store.write(&id, version, w).await.unwrap();
            version = v;
            let got = store.load(&id).await.unwrap().unwrap();
            let want = reference_store.load(&id).await.unwrap().unwrap();
            assert_eq!(got, want, "{name} step {i}");
        }
        let err = store.write(&id, version - 1, vec![]).await.unwrap_err();
        match err {
            SessionError::Conflict {
                session_id,
                expected,
                found,
            } => {
                assert_eq!(
                    (session_id, expected, found),
                    (id.clone(), version - 1, version),
                    "{name}"
                );
            }
            e => panic!("{name}: {e}"),
        }
        let err = store.write(&id, 0, vec![]).await.unwrap_err();
        assert!(
            matches!(err, SessionError::Conflict { expected: 0, .. }),
            "{name}"
        );
        let err = store.write("../evil", 0, vec![]).await.unwrap_err();
        assert!(matches!(err, SessionError::InvalidId(_)), "{name}: {err}");
        let fresh = session_id("fresh");
        let err = store.write(&fresh, 3, vec![]).await.unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Conflict {
                    expected: 3,
                    found: 0,
                    ..
                }
            ),
            "{name}: {err}"
        );
        assert!(store.load(&fresh).await.unwrap().is_none(), "{name}");
    }
}

#[tokio::test]
async fn file_store_compacts_and_reads_the_same() {
    let dir = TempDir::new("compact");
    let store = FileSessionStore::new(dir.path()).compact_after(3);
    let id = "compacting";
    let mut reference = SessionSnapshot::empty(id);
    let mut ids = Vec::new();
    for i in 0..20u64 {
        let m = StoredMessage::new(MessageId::new(), Message::user(format!("m{i}")));
        ids.push(m.id);
        let mut w = vec![SessionWrite::AppendMessage(m)];
        if i % 4 == 3 {
            w.push(SessionWrite::UpdateMessage(StoredMessage::new(
                ids[0],
                Message::user(format!("first, rewritten at {i}")),
            )));
        }
        reference.apply(&w);
        reference.version = store.write(id, i, w).await.unwrap();
        assert_eq!(
            store.load(id).await.unwrap().unwrap(),
            reference,
            "after {i}"
        );
    }
    let session_dir = store.session_dir(id).unwrap();
    // Superseded entries stay as empty tombstones (their names taken) for ten minutes.
    let logs = std::fs::read_dir(session_dir.join("log"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().metadata().unwrap().len() > 0)
        .count();
    let snaps = std::fs::read_dir(session_dir.join("snapshots"))
        .unwrap()
        .count();
    assert!(logs < 3, "old log entries retired: {logs}");
    assert_eq!(snaps, 1, "one snapshot kept");
}

/// Finding 13 of issue 35: the file store's directories are 0700 and its files 0600,
/// whatever the umask (sessions hold conversations, tool results and approvals).
#[cfg(unix)]
#[tokio::test]
async fn file_store_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new("modes");
    let root = dir.path().join("store");
    let store = FileSessionStore::new(&root).compact_after(2);
    let id = "private";
    for i in 0..3u64 {
        let m = StoredMessage::new(MessageId::new(), Message::user(format!("m{i}")));
        store
            .write(id, i, vec![SessionWrite::AppendMessage(m)])
            .await
            .unwrap();
    }
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let session = store.session_dir(id).unwrap();
    for d in [
        root.clone(),
        session.clone(),
        session.join("log"),
        session.join("snapshots"),
        session.join("tmp"),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    let mut files = 0;
    for sub in ["log", "snapshots"] {
        for entry in std::fs::read_dir(session.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            files += 1;
        }
    }
    assert!(
        files >= 3,
        "log entries, tombstones and a snapshot: {files}"
    );
}

#[tokio::test]
async fn newer_schema_is_a_typed_error() {
    let dir = TempDir::new("schema");
    let store = FileSessionStore::new(dir.path());
    let id = "future";
    store
        .write(
            id,
            0,
            vec![SessionWrite::AppendMessage(StoredMessage::new(
                MessageId::new(),
                Message::user("hi"),
            ))],
        )
        .await
        .unwrap();
    let log = store.session_dir(id).unwrap().join("log");
    let file = std::fs::read_dir(&log)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("\"schema_version\": 1", "\"schema_version\": 99"),
    )
    .unwrap();
    let err = store.load(id).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::SchemaTooNew { found: 99, .. }),
        "{err}"
    );
    // A corrupt file is a typed error too, never a panic.
    std::fs::write(&file, b"{not json").unwrap();
    assert!(matches!(
        store.load(id).await,
        Err(SessionError::Io { .. } | SessionError::Corrupt { .. })
    ));
}

/// Whether `err` is the typed refusal of a record of a newer release (`found` 99).
fn is_too_new(err: &SessionError) -> bool {
    matches!(err, SessionError::SchemaTooNew { found: 99, .. })
}

/// Rewrites every file of `dir` with `edit` applied to its text.
fn edit_files(dir: &std::path::Path, edit: impl Fn(&str) -> String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.is_empty() {
            std::fs::write(&path, edit(&text)).unwrap();
        }
    }
}

/// A session and its paused run, as this release writes them.
fn paused_session() -> Vec<SessionWrite> {
    let assistant = StoredMessage::new(MessageId::new(), Message::assistant("calling"));
    vec![
        SessionWrite::AppendMessage(assistant.clone()),
        SessionWrite::SetPendingInterrupts(Some(Box::new(pending(&assistant)))),
    ]
}

/// A newer release may change a record's shape, not only its number: the file store refuses
/// it as `SchemaTooNew` (never `Io`/`Corrupt`) whether it is a log entry, a snapshot, or the
/// paused run inside a record of this release.
#[tokio::test]
async fn file_store_refuses_newer_records_it_cannot_decode_as_too_new() {
    let dir = TempDir::new("too-new");
    for snapshot in [false, true] {
        // Compacting after every write: the session is in a snapshot, not the log.
        let store = FileSessionStore::new(dir.path()).compact_after(if snapshot { 1 } else { 64 });
        let files = |id: &str| {
            let sub = if snapshot { "snapshots" } else { "log" };
            store.session_dir(id).unwrap().join(sub)
        };
        let what = if snapshot { "snapshot" } else { "log entry" };

        // The record itself: a newer version with a shape this release does not know.
        let id = session_id("newer-record");
        store.write(&id, 0, paused_session()).await.unwrap();
        edit_files(&files(&id), |t| {
            t.replace("\"schema_version\": 1", "\"schema_version\": 99")
                .replace("\"writes\": [", "\"writes\": [{\"setSomethingNew\": 7},")
                .replace("\"messages\": [", "\"messages\": {\"v99\": [")
                .replace("\"history_start\"", "\"later\": 1}, \"history_start\"")
        });
        let err = store.load(&id).await.unwrap_err();
        assert!(is_too_new(&err), "{what}: {err}");

        // A record of this release whose paused run is of a newer one.
        let id = session_id("newer-paused-run");
        store.write(&id, 0, paused_session()).await.unwrap();
        edit_files(&files(&id), |t| {
            t.replace("\"schema_version\": 2", "\"schema_version\": 99")
        });
        let err = store.load(&id).await.unwrap_err();
        assert!(is_too_new(&err), "{what}, paused run: {err}");
    }
}

/// The SQL stores check a row's schema version before they decode its columns: a newer
/// release's row with a column in a shape this release does not know is `SchemaTooNew`, not
/// `Corrupt`; and a paused run of a newer release in a row of this one is `SchemaTooNew` too.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_store_refuses_newer_rows_it_cannot_decode_as_too_new() {
    let dir = TempDir::new("too-new-sqlite");
    let path = dir.path().join("sessions.db");
    let store = rein_sessions::SqliteSessionStore::open(&path)
        .await
        .unwrap();
    let side = rusqlite::Connection::open(&path).unwrap();
    for (tag, update) in [
        (
            "row",
            "UPDATE rein_sessions SET schema_version = 99, agent_state = 'v99:{}' \
             WHERE session_id = ?1",
        ),
        (
            "paused-run",
            "UPDATE rein_sessions SET pending_interrupts = '{\"schema_version\": 99, \"x\": 1}' \
             WHERE session_id = ?1",
        ),
    ] {
        let id = session_id(tag);
        store.write(&id, 0, paused_session()).await.unwrap();
        assert_eq!(side.execute(update, [&id]).unwrap(), 1);
        let err = store.load(&id).await.unwrap_err();
        assert!(is_too_new(&err), "{tag}: {err}");
    }
}

/// The same for the PostgreSQL store (with `REIN_TEST_POSTGRES`).
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_store_refuses_newer_rows_it_cannot_decode_as_too_new() {
    let Some(url) = postgres_url() else { return };
    let store = rein_sessions::PostgresSessionStore::connect(&url, 2)
        .await
        .unwrap();
    let (side, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for (tag, update) in [
        (
            "row",
            "UPDATE rein_sessions SET schema_version = 99, agent_state = 'v99:{}' \
             WHERE session_id = $1",
        ),
        (
            "paused-run",
            "UPDATE rein_sessions SET pending_interrupts = '{\"schema_version\": 99, \"x\": 1}' \
             WHERE session_id = $1",
        ),
    ] {
        let id = session_id(tag);
        store.write(&id, 0, paused_session()).await.unwrap();
        assert_eq!(side.execute(update, &[&id]).await.unwrap(), 1);
        let err = store.load(&id).await.unwrap_err();
        assert!(is_too_new(&err), "{tag}: {err}");
        store.delete(&id).await.unwrap();
    }
}
