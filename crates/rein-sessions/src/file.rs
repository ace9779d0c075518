//! [`FileSessionStore`]: sessions as JSON files, one directory per session.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::SessionError;
use crate::model::{
    SESSION_SCHEMA_VERSION, SessionSnapshot, SessionWrite, json_err, validate_session_id,
};
use crate::store::SessionStore;

const LOG: &str = "log";
const SNAPSHOTS: &str = "snapshots";
const TMP: &str = "tmp";

/// Sessions as human-readable JSON files: the embedded default store.
///
/// Layout, under the store's root directory:
/// ```text
/// <root>/<session id>/
///   snapshots/00000000000000000064.json   the whole session at version 64 (SessionSnapshot)
///   log/00000000000000000065.json         {"schema_version", "version": 65, "writes": [...]}
///   log/00000000000000000066.json         one file per later version
///   tmp/                                  files being written
/// ```
/// A session at version N is the newest snapshot plus the log entries after it, replayed in
/// order. Every `compact_after` log entries (default 64) the writer that crossed the mark
/// writes a new snapshot and removes what it supersedes, so a load reads one snapshot and at
/// most that many small files.
///
/// Every write is atomic and durable: the JSON goes to a temporary file which is fsynced, then
/// hard-linked to its final name and the directory fsynced. A hard link, unlike a rename,
/// fails when the name exists, so creating `log/<N+1>.json` *is* the compare-and-swap of the
/// optimistic versioning: two writers (threads or processes) expecting version N race for
/// that name and exactly one wins; the other gets [`SessionError::Conflict`]. No lock file is
/// needed and a writer killed at any point leaves only an unreferenced temporary file (cleared
/// by a later compaction). The store needs a file system with hard links (any local Linux,
/// macOS or NTFS file system).
///
/// Blocking file I/O runs on tokio's blocking pool, so the store needs a tokio runtime.
#[derive(Debug, Clone)]
pub struct FileSessionStore {
    root: PathBuf,
    compact_after: u64,
}

impl FileSessionStore {
    /// A store under `root` (created on the first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            compact_after: 64,
        }
    }

    /// Writes a snapshot once this many log entries follow the last one (default 64; at
    /// least 1).
    pub fn compact_after(mut self, entries: u64) -> Self {
        self.compact_after = entries.max(1);
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of one session.
    pub fn session_dir(&self, session_id: &str) -> Result<PathBuf, SessionError> {
        validate_session_id(session_id)?;
        Ok(self.root.join(session_id))
    }

    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
    ) -> Result<T, SessionError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| SessionError::io("file store task", e))?
    }
}

impl SessionStore for FileSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
        let dir = self.session_dir(session_id)?;
        let id = session_id.to_owned();
        Self::blocking(move || load_dir(&dir, &id)).await
    }

    async fn write(
        &self,
        session_id: &str,
        expected_version: u64,
        writes: Vec<SessionWrite>,
    ) -> Result<u64, SessionError> {
        let dir = self.session_dir(session_id)?;
        let root = self.root.clone();
        let id = session_id.to_owned();
        let compact_after = self.compact_after;
        Self::blocking(move || {
            write_dir(&root, &dir, &id, expected_version, &writes, compact_after)
        })
        .await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        let dir = self.session_dir(session_id)?;
        Self::blocking(move || match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("deleting the session", &dir, e)),
        })
        .await
    }
}

/// One log file: the writes that made one version.
#[derive(Serialize, Deserialize)]
struct LogEntry {
    schema_version: u32,
    version: u64,
    writes: Vec<SessionWrite>,
}

fn io_err(what: &str, path: &Path, e: io::Error) -> SessionError {
    SessionError::io(format!("{what} ({})", path.display()), e)
}

fn file_name(version: u64) -> String {
    format!("{version:020}.json")
}

/// The versions named in a directory (`NNN.json`), ascending; empty when it does not exist.
fn versions(dir: &Path) -> Result<Vec<u64>, SessionError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("listing", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err("listing", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(v) = name
            .strip_suffix(".json")
            .and_then(|n| n.parse::<u64>().ok())
        {
            out.push(v);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The current version: the newest log entry or snapshot.
fn head(dir: &Path) -> Result<u64, SessionError> {
    let log = versions(&dir.join(LOG))?.last().copied().unwrap_or(0);
    let snap = versions(&dir.join(SNAPSHOTS))?.last().copied().unwrap_or(0);
    Ok(log.max(snap))
}

fn fsync_dir(dir: &Path) -> Result<(), SessionError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err("syncing the directory", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Writes `bytes` to a new fsynced temporary file in `tmp`.
fn write_temp(tmp: &Path, bytes: &[u8]) -> Result<PathBuf, SessionError> {
    let path = tmp.join(format!(
        "{}-{}.json",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&path);
        return Err(io_err("writing", &path, e));
    }
    Ok(path)
}

/// Publishes `bytes` as `dir/name` unless that name exists: temp file + fsync + link + fsync
/// of the directory. Returns false when the name was taken.
fn publish(tmp: &Path, dir: &Path, name: &str, bytes: &[u8]) -> Result<bool, SessionError> {
    let temp = write_temp(tmp, bytes)?;
    let target = dir.join(name);
    let linked = fs::hard_link(&temp, &target);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            fsync_dir(dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err("publishing", &target, e)),
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, SessionError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| json_err(&format!("reading {}", path.display()), e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("reading", path, e)),
    }
}

enum Attempt {
    Done(Option<Box<SessionSnapshot>>),
    /// A compaction changed the files under the reader: read again.
    Raced,
}

fn load_dir(dir: &Path, session_id: &str) -> Result<Option<SessionSnapshot>, SessionError> {
    for attempt in 0..20u32 {
        match load_once(dir, session_id)? {
            Attempt::Done(s) => return s.map(|s| s.check_schema()).transpose(),
            Attempt::Raced => std::thread::sleep(Duration::from_millis(u64::from(attempt) + 1)),
        }
    }
    Err(SessionError::io(
        format!("session '{session_id}'"),
        "no consistent view after 20 reads (compactions kept racing)",
    ))
}

fn load_once(dir: &Path, session_id: &str) -> Result<Attempt, SessionError> {
    let snaps = versions(&dir.join(SNAPSHOTS))?;
    let mut session = match snaps.last() {
        Some(&v) => match read_json::<SessionSnapshot>(&dir.join(SNAPSHOTS).join(file_name(v)))? {
            Some(s) if s.version == v => s,
            Some(s) => {
                return Err(SessionError::corrupt(
                    session_id,
                    format!("snapshot {v} holds version {}", s.version),
                ));
            }
            None => return Ok(Attempt::Raced),
        },
        None => SessionSnapshot::empty(session_id),
    };
    let base = session.version;
    let logs: Vec<u64> = versions(&dir.join(LOG))?
        .into_iter()
        .filter(|&v| v > base)
        .collect();
    if snaps.is_empty() && logs.is_empty() {
        return Ok(Attempt::Done(None));
    }
    for (i, &v) in logs.iter().enumerate() {
        if v != base + 1 + i as u64 {
            // A gap: entries were removed by a compaction after we listed the snapshots.
            return Ok(Attempt::Raced);
        }
        let Some(entry) = read_json::<LogEntry>(&dir.join(LOG).join(file_name(v)))? else {
            return Ok(Attempt::Raced);
        };
        if entry.schema_version > SESSION_SCHEMA_VERSION {
            return Err(SessionError::SchemaTooNew {
                session_id: session_id.to_owned(),
                what: format!("log entry {v}"),
                found: entry.schema_version,
                supported: SESSION_SCHEMA_VERSION,
            });
        }
        if entry.version != v {
            return Err(SessionError::corrupt(
                session_id,
                format!("log file {v} holds version {}", entry.version),
            ));
        }
        session.apply(&entry.writes);
        session.version = v;
    }
    Ok(Attempt::Done(Some(Box::new(session))))
}

fn write_dir(
    root: &Path,
    dir: &Path,
    session_id: &str,
    expected: u64,
    writes: &[SessionWrite],
    compact_after: u64,
) -> Result<u64, SessionError> {
    let conflict = |found| SessionError::Conflict {
        session_id: session_id.to_owned(),
        expected,
        found,
    };
    let log = dir.join(LOG);
    let tmp = dir.join(TMP);
    if !log.is_dir() || !tmp.is_dir() {
        let fresh = !dir.exists();
        for d in [&log, &tmp, &dir.join(SNAPSHOTS)] {
            fs::create_dir_all(d).map_err(|e| io_err("creating", d, e))?;
        }
        if fresh {
            fsync_dir(dir)?;
            fsync_dir(root)?;
        }
    }
    let found = head(dir)?;
    if found != expected {
        return Err(conflict(found));
    }
    let version = expected + 1;
    let entry = LogEntry {
        schema_version: SESSION_SCHEMA_VERSION,
        version,
        writes: writes.to_vec(),
    };
    let bytes = serde_json::to_vec_pretty(&entry).map_err(|e| json_err("encoding", e))?;
    if !publish(&tmp, &log, &file_name(version), &bytes)? {
        return Err(conflict(head(dir)?.max(version)));
    }
    // A writer that checked the head, then stalled while others wrote past it and compacted
    // (removing log/<version>), must not slip its entry under a snapshot: undo and lose.
    let newest_snapshot = versions(&dir.join(SNAPSHOTS))?.last().copied().unwrap_or(0);
    if newest_snapshot >= version {
        let _ = fs::remove_file(log.join(file_name(version)));
        return Err(conflict(head(dir)?));
    }
    if version - newest_snapshot >= compact_after
        && let Err(e) = compact(dir, session_id)
    {
        tracing::warn!(session_id, error = %e, "session compaction failed; will retry later");
    }
    Ok(version)
}

/// Writes a snapshot of the current version and removes the files it supersedes.
fn compact(dir: &Path, session_id: &str) -> Result<(), SessionError> {
    let Some(session) = load_dir(dir, session_id)? else {
        return Ok(());
    };
    let snaps_dir = dir.join(SNAPSHOTS);
    let bytes = serde_json::to_vec_pretty(&session).map_err(|e| json_err("encoding", e))?;
    publish(
        &dir.join(TMP),
        &snaps_dir,
        &file_name(session.version),
        &bytes,
    )?;
    for v in versions(&snaps_dir)? {
        if v < session.version {
            let _ = fs::remove_file(snaps_dir.join(file_name(v)));
        }
    }
    let log = dir.join(LOG);
    for v in versions(&log)? {
        if v <= session.version {
            let _ = fs::remove_file(log.join(file_name(v)));
        }
    }
    // Temporary files left by writers that died: old enough that nobody is writing them.
    if let Ok(entries) = fs::read_dir(dir.join(TMP)) {
        let cutoff = SystemTime::now() - Duration::from_secs(600);
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < cutoff);
            if old {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    Ok(())
}
