//! The PostgreSQL store against a real server (`.ci/peers-postgres.sh`): a restart of the
//! server during a loop of writes, TLS with certificate verification, the pool's size, broken
//! connections replaced. Skipped (loudly) without `REIN_TEST_POSTGRES`.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Its own binary: these tests restart the shared server, which the tests of `it` use.
// The `it` binary's helpers, of which this binary uses a few.
#[allow(dead_code)]
#[path = "it/common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{postgres_url, session_id};
use rein_core::{Message, id::MessageId};
use rein_sessions::{
    PostgresSessionStore, SessionError, SessionStore, SessionWrite, StoredMessage, TlsMode,
    TlsRoots,
};
use serde_json::json;
use tokio_postgres::{Client, NoTls};

/// The tests here restart the server or count its connections: one at a time.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One of the variables `.ci/peers-postgres.sh` exports besides `REIN_TEST_POSTGRES`.
fn peer_var(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{name} is unset in CI: .ci/peers-postgres.sh must export it"
            );
            eprintln!("\n*** SKIPPED: {name} is unset (re-run .ci/peers-postgres.sh) ***\n");
            None
        }
    }
}

/// A plain connection for looking at the server from the side.
async fn side_connection(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The server's connections with `application_name = app`: (count, how many use TLS).
async fn connections(monitor: &Client, app: &str) -> (i64, i64) {
    let row = monitor
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
             LEFT JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

fn message(text: String) -> StoredMessage {
    StoredMessage::new(MessageId::new(), Message::user(text))
}

/// What one writer of the restart test did.
struct Writer {
    session: String,
    /// Writes that returned Ok: each must be stored, once.
    acknowledged: Vec<StoredMessage>,
    /// Writes that returned `Unavailable`: each stored whole or not at all.
    unknown: Vec<StoredMessage>,
}

/// Writes one session in a loop until `stop`: each write appends message `m<i>` and sets the
/// agent state's `last` to `i`, at the version the last write returned (after an
/// `Unavailable`, the version a load finds). Any error but `Unavailable` fails the test.
async fn write_loop(
    store: PostgresSessionStore,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> Writer {
    let session = session_id("restart");
    let mut w = Writer {
        session: session.clone(),
        acknowledged: Vec::new(),
        unknown: Vec::new(),
    };
    let mut version = 0;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let m = message(format!("m{i}"));
        let mut state = rein_core::Map::new();
        state.insert("last".into(), json!(i));
        let writes = vec![
            SessionWrite::AppendMessage(m.clone()),
            SessionWrite::SetAgentState(state),
        ];
        match store.write(&session, version, writes).await {
            Ok(v) => {
                assert_eq!(v, version + 1, "{session} write {i}");
                version = v;
                w.acknowledged.push(m);
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.is_unavailable() => {
                w.unknown.push(m);
                // Until the server is back (an impatient store gives up at once).
                let mut tries = 0;
                version = loop {
                    match store.load(&session).await {
                        Ok(s) => break s.map_or(0, |s| s.version),
                        Err(e) if e.is_unavailable() && tries < 200 => tries += 1,
                        Err(e) => panic!("{session}: reload after unavailable: {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
            }
            Err(e) => panic!("{session} write {i}: not a typed unavailability: {e:?}"),
        }
        i += 1;
    }
    w
}

async fn restart(command: &str, mode: &str) {
    let command = format!("{command} {mode}");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .args(["-c", &command])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn postmaster_start(url: &str) -> String {
    let c = side_connection(url).await;
    c.query_one("SELECT pg_postmaster_start_time()::text", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_during_a_write_loop_loses_nothing_and_fails_typed() {
    let Some(url) = postgres_url() else { return };
    let Some(restart_command) = peer_var("REIN_TEST_POSTGRES_RESTART") else {
        return;
    };
    let _server = SERVER.lock().await;
    // A patient store, whose retries outlast a restart, and an impatient one (no retries),
    // whose writes fail typed while the server is away: two writers each.
    let patient = PostgresSessionStore::builder(&url)
        .pool_size(4)
        .application_name("rein-test-restart")
        .timeout(Duration::from_secs(10))
        .max_retries(12)
        .backoff(Duration::from_millis(50), Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let impatient = PostgresSessionStore::builder(&url)
        .pool_size(2)
        .max_retries(0)
        .build()
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = [&patient, &patient, &impatient, &impatient]
        .into_iter()
        .map(|store| tokio::spawn(write_loop(store.clone(), stop.clone(), acked.clone())))
        .collect();

    let first_start = postmaster_start(&url).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = acked.load(Ordering::Relaxed);
    restart(&restart_command, "fast").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // A crash-like stop too: the server aborts without telling the clients.
    restart(&restart_command, "immediate").await;
    let after_restarts = acked.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for w in writers {
        results.push(w.await.unwrap());
    }
    let total = acked.load(Ordering::Relaxed);
    assert_ne!(
        postmaster_start(&url).await,
        first_start,
        "the server restarted"
    );
    assert!(before > 0, "writes before the restarts");
    assert!(
        total > after_restarts,
        "writes after the restarts: {after_restarts} -> {total}"
    );

    // Every session as a fresh store reads it: each acknowledged write exactly once, each
    // unknown one at most once, in order, and each write whole (its message with its state).
    let reader = PostgresSessionStore::connect(&url, 1).await.unwrap();
    for w in &results {
        let s = reader.load(&w.session).await.unwrap().unwrap();
        let stored_ids: Vec<MessageId> = s.messages.iter().map(|m| m.id).collect();
        let unique: HashSet<_> = stored_ids.iter().collect();
        assert_eq!(
            unique.len(),
            stored_ids.len(),
            "{}: a write applied twice",
            w.session
        );
        assert_eq!(
            s.version,
            s.messages.len() as u64,
            "{}: a version without its message",
            w.session
        );
        let acked_ids: HashSet<_> = w.acknowledged.iter().map(|m| m.id).collect();
        let unknown_ids: HashSet<_> = w.unknown.iter().map(|m| m.id).collect();
        for m in &w.acknowledged {
            assert!(
                unique.contains(&m.id),
                "{}: acknowledged write lost",
                w.session
            );
        }
        for m in &s.messages {
            assert!(
                acked_ids.contains(&m.id) || unknown_ids.contains(&m.id),
                "{}: a message nobody wrote",
                w.session
            );
            let written = w
                .acknowledged
                .iter()
                .chain(&w.unknown)
                .find(|x| x.id == m.id);
            assert_eq!(Some(m), written, "{}: content differs", w.session);
        }
        // In write order (m0, m1, ...), and the state is the last write's.
        let numbers: Vec<u64> = s
            .messages
            .iter()
            .map(|m| m.message.text()[1..].parse().unwrap())
            .collect();
        assert!(
            numbers.windows(2).all(|p| p[0] < p[1]),
            "{}: order",
            w.session
        );
        assert_eq!(
            s.agent_state["last"],
            json!(numbers.last().unwrap()),
            "{}",
            w.session
        );
    }
    let unknown: Vec<usize> = results.iter().map(|w| w.unknown.len()).collect();
    assert!(
        unknown[2] + unknown[3] > 0,
        "the impatient store saw the server away: {unknown:?}"
    );
    eprintln!(
        "restart test: {total} acknowledged writes over 4 sessions; unavailable per writer \
         (two patient, two impatient): {unknown:?}"
    );
}

#[tokio::test]
async fn tls_verifies_the_server_and_fails_typed() {
    let Some(url) = postgres_url() else { return };
    let (Some(ca), Some(other_ca), Some(tls_only)) = (
        peer_var("REIN_TEST_POSTGRES_TLS_CA"),
        peer_var("REIN_TEST_POSTGRES_TLS_OTHER_CA"),
        peer_var("REIN_TEST_POSTGRES_TLS_ONLY"),
    ) else {
        return;
    };
    let _server = SERVER.lock().await;
    let require = |ca: TlsRoots| TlsMode::Require { ca };
    let monitor = side_connection(&url).await;

    // The right CA: the store works, and every connection of it is encrypted.
    let app = "rein-test-tls";
    let store = PostgresSessionStore::builder(&tls_only)
        .tls(require(TlsRoots::PemFile(ca.clone().into())))
        .application_name(app)
        .build()
        .await
        .unwrap();
    let id = session_id("tls");
    let m = message("over TLS".into());
    store
        .write(&id, 0, vec![SessionWrite::AppendMessage(m.clone())])
        .await
        .unwrap();
    assert_eq!(store.load(&id).await.unwrap().unwrap().messages, vec![m]);
    let (n, encrypted) = connections(&monitor, app).await;
    assert!(
        n >= 1 && encrypted == n,
        "{encrypted} of {n} connections use TLS"
    );
    // The CA as PEM text, the server by its DNS name (the certificate names localhost).
    let pem = std::fs::read_to_string(&ca).unwrap();
    let by_name = tls_only.replace("127.0.0.1", "localhost");
    PostgresSessionStore::builder(&format!("{by_name}?sslmode=require"))
        .tls(require(TlsRoots::Pem(pem.clone())))
        .build()
        .await
        .unwrap();

    // Failures are final (not retried: quick despite long backoffs) and typed.
    let refused = async |b: rein_sessions::PostgresSessionStoreBuilder| {
        let started = Instant::now();
        let err = b
            .max_retries(5)
            .backoff(Duration::from_secs(2), Duration::from_secs(2))
            .build()
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "retried: {err}");
        err
    };
    let io_mentioning = |err: &SessionError, needle: &str| {
        let text = format!("{err}");
        assert!(matches!(err, SessionError::Io { .. }), "{err:?}");
        assert!(text.contains(needle), "{text} lacks {needle:?}");
    };
    // A CA that did not sign the server's certificate.
    let b =
        PostgresSessionStore::builder(&tls_only).tls(require(TlsRoots::PemFile(other_ca.into())));
    io_mentioning(&refused(b).await, "UnknownIssuer");
    // The public roots do not know the throwaway CA either.
    let b = PostgresSessionStore::builder(&tls_only).tls(require(TlsRoots::WebPki));
    io_mentioning(&refused(b).await, "UnknownIssuer");
    // The right CA, but the certificate does not name the host asked for (reached through
    // hostaddr): verify-full semantics.
    let port = url::port(&url);
    let b = PostgresSessionStore::builder(&format!(
        "host=db.example.invalid hostaddr=127.0.0.1 port={port} user=postgres dbname=rein_tls_only"
    ))
    .tls(require(TlsRoots::Pem(pem)));
    io_mentioning(&refused(b).await, "not valid for name");
    // Plaintext to a database that refuses it: the server says no, typed.
    let b = PostgresSessionStore::builder(&tls_only);
    io_mentioning(&refused(b).await, "no encryption");
    // A URL asking for TLS with no TLS configured: refused before connecting.
    let err = PostgresSessionStore::builder(&format!("{tls_only}?sslmode=require"))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Config(_)), "{err}");
}

/// Finding 13 of issue 35: unless told otherwise, a server not on this machine gets TLS with
/// the public roots (here it fails: the test server's CA is not one of them), never plaintext;
/// plaintext to it takes `TlsMode::Disable`; a server on this machine keeps plaintext.
#[tokio::test]
async fn tls_is_required_by_default_off_this_machine() {
    let Some(url) = postgres_url() else { return };
    if peer_var("REIN_TEST_POSTGRES_TLS_CA").is_none() {
        return;
    }
    let _server = SERVER.lock().await;
    let port = url::port(&url);
    // The plaintext database, by a name that is not this machine's (hostaddr reaches it).
    let remote = format!(
        "host=db.example.invalid hostaddr=127.0.0.1 port={port} user=postgres dbname=rein_test"
    );
    let err = PostgresSessionStore::builder(&remote)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Io { .. }), "{err:?}");
    assert!(format!("{err}").contains("UnknownIssuer"), "{err}");
    // sslmode=disable in the URL alone does not turn it off.
    let err = PostgresSessionStore::builder(&format!("{remote} sslmode=disable"))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::Config(m) if m.contains("TlsMode::Disable")),
        "{err:?}"
    );
    // Said in code, plaintext works (with a warning in the log).
    PostgresSessionStore::builder(&remote)
        .tls(TlsMode::Disable)
        .build()
        .await
        .unwrap();
    // On this machine plaintext stays the default.
    PostgresSessionStore::builder(&url).build().await.unwrap();
}

/// The port of a `postgres://user@host:port/db` URL.
mod url {
    pub(crate) fn port(url: &str) -> &str {
        let after_host = url.rsplit_once(':').unwrap().1;
        after_host.split('/').next().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_never_opens_more_than_its_size() {
    let Some(url) = postgres_url() else { return };
    let _server = SERVER.lock().await;
    let app = "rein-test-pool";
    let store = PostgresSessionStore::builder(&url)
        .pool_size(2)
        .application_name(app)
        .build()
        .await
        .unwrap();
    let monitor = side_connection(&url).await;
    // Another client holds writes to the table back, so the store's writes pile up.
    let blocker = side_connection(&url).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE rein_sessions IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let writes: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let m = message(format!("w{i}"));
                store
                    .write(&session_id("pool"), 0, vec![SessionWrite::AppendMessage(m)])
                    .await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let waiting = loop {
        let row = monitor
            .query_one(
                "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), count(*) \
                 FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap();
        let (waiting, all): (i64, i64) = (row.get(0), row.get(1));
        assert!(all <= 2, "{all} connections for a pool of 2");
        if waiting == 2 || Instant::now() > deadline {
            break waiting;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        waiting, 2,
        "both pooled connections busy, six writes waiting for them"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(connections(&monitor, app).await.0, 2);
    blocker.batch_execute("COMMIT").await.unwrap();
    for w in writes {
        assert_eq!(w.await.unwrap().unwrap(), 1);
    }
    assert!(connections(&monitor, app).await.0 <= 2);
}

#[tokio::test]
async fn broken_pooled_connections_are_replaced() {
    let Some(url) = postgres_url() else { return };
    let _server = SERVER.lock().await;
    let app = "rein-test-broken";
    let store = PostgresSessionStore::builder(&url)
        .pool_size(2)
        .application_name(app)
        .build()
        .await
        .unwrap();
    let id = session_id("broken");
    store
        .write(
            &id,
            0,
            vec![SessionWrite::AppendMessage(message("a".into()))],
        )
        .await
        .unwrap();
    let monitor = side_connection(&url).await;
    let pids = |rows: Vec<tokio_postgres::Row>| -> HashSet<i32> {
        rows.iter().map(|r| r.get(0)).collect()
    };
    let query = "SELECT pid FROM pg_stat_activity WHERE application_name = $1";
    let old = pids(monitor.query(query, &[&app]).await.unwrap());
    assert!(!old.is_empty());
    // The server ends the pooled (idle) connections, as a fail-over or an admin would.
    monitor
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    let v = store
        .write(
            &id,
            1,
            vec![SessionWrite::AppendMessage(message("b".into()))],
        )
        .await
        .unwrap();
    assert_eq!(v, 2);
    assert_eq!(store.load(&id).await.unwrap().unwrap().messages.len(), 2);
    let new = pids(monitor.query(query, &[&app]).await.unwrap());
    assert!(
        !new.is_empty() && new.is_disjoint(&old),
        "{old:?} -> {new:?}"
    );
}
