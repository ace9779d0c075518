//! Append-message latency for each store: one `AppendMessage` write (one new version) to a
//! session that already holds some messages. `REIN_TEST_POSTGRES` enables the PostgreSQL run.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::{Message, id::MessageId};
use rein_sessions::{
    FileSessionStore, MemorySessionStore, SessionStore, SessionWrite, SharedSessionStore,
    StoredMessage,
};

fn message() -> SessionWrite {
    SessionWrite::AppendMessage(StoredMessage::new(
        MessageId::new(),
        Message::user(
            "A typical user turn of a few dozen words, asking the agent to do something.",
        ),
    ))
}

/// Appends to a session of 20 to 520 messages (it is recreated every 500 appends, outside
/// the measured time), then loads a session of 100 messages.
fn bench_store(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    store: SharedSessionStore,
) {
    let fresh = |len: usize| {
        let session = format!("bench-{}", uuid::Uuid::new_v4().simple());
        let version = rt.block_on(async {
            let mut v = 0;
            for _ in 0..len {
                v = store.write(&session, v, vec![message()]).await.unwrap();
            }
            v
        });
        (session, version)
    };
    c.bench_function(&format!("append_message/{name}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let (mut session, mut version) = fresh(20);
            for i in 0..iters {
                if i > 0 && i % 500 == 0 {
                    rt.block_on(store.delete(&session)).unwrap();
                    (session, version) = fresh(20);
                }
                let w = vec![message()];
                let t = Instant::now();
                version = rt.block_on(store.write(&session, version, w)).unwrap();
                total += t.elapsed();
            }
            rt.block_on(store.delete(&session)).unwrap();
            total
        })
    });
    let (session, _) = fresh(100);
    c.bench_function(&format!("load_100_messages/{name}"), |b| {
        b.iter(|| rt.block_on(store.load(&session)).unwrap())
    });
    rt.block_on(store.delete(&session)).unwrap();
}

fn stores(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("rein-sessions-bench-{}", std::process::id()));
    bench_store(
        c,
        &rt,
        "memory",
        SharedSessionStore::new(MemorySessionStore::new()),
    );
    bench_store(
        c,
        &rt,
        "file",
        SharedSessionStore::new(FileSessionStore::new(dir.join("files"))),
    );
    #[cfg(feature = "sqlite")]
    {
        let s = rt
            .block_on(rein_sessions::SqliteSessionStore::open(
                dir.join("bench.db"),
            ))
            .unwrap();
        bench_store(c, &rt, "sqlite", SharedSessionStore::new(s));
    }
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("REIN_TEST_POSTGRES") {
        let s = rt
            .block_on(rein_sessions::PostgresSessionStore::connect(&url, 1))
            .unwrap();
        bench_store(c, &rt, "postgres", SharedSessionStore::new(s));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = stores
}
criterion_main!(benches);
