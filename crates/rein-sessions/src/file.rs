//! [`FileSessionStore`]: sessions as JSON files, one directory per session.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::SessionError;
use crate::model::{
    SessionSnapshot, SessionWrite, json_err, paused_run, schema_of, schema_of_writes, too_new,
    validate_session_id,
};
use crate::store::SessionStore;

const LOG: &str = "log";
const SNAPSHOTS: &str = "snapshots";
const TMP: &str = "tmp";

/// How long a superseded log entry keeps its name (as an empty tombstone) and how old a
/// temporary file must be before it counts as abandoned.
const GRACE: Duration = Duration::from_secs(600);

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
/// writes a new snapshot and retires what it supersedes, so a load reads one snapshot and at
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
/// A compaction does not free the names of the log entries it folded into its snapshot: it
/// replaces each with an empty *tombstone* (an atomic rename, so the name is never absent),
/// and removes a tombstone only once it is ten minutes old. So `log/<N+1>.json` can be
/// created only while no snapshot covers version N+1, and a link that succeeds is a write
/// that every later snapshot includes: a writer's outcome is decided by its link alone. (Were
/// the names freed at once, a writer that checked the head, stalled while others wrote past
/// it and compacted, and then linked, would slip its entry under a snapshot that ignores it;
/// and a check after the link cannot tell that writer from one that linked in time and whose
/// entry a compaction folded in while it stalled.) The bound: a writer that spends more than
/// ten minutes between its head check and its link may find the name freed. It notices (it
/// times itself) and, if a snapshot then covers its version, fails with an I/O error saying
/// the outcome is unknown, never with a wrong `Ok` or `Conflict`. Tombstones are empty files,
/// which releases before tombstones never have to read: they sit at or below the newest
/// snapshot.
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
            let pending = sets_pending(&writes);
            if pending == Some(true) {
                // Marked before the write: the index may name more than wait, never fewer.
                mark_pending(&root, &id, true)?;
            }
            let version = write_dir(&root, &dir, &id, expected_version, &writes, compact_after)?;
            if pending == Some(false) {
                mark_pending(&root, &id, false)?;
                // A later write may have paused again after the mark was checked: keep it.
                if head(&dir)? != version {
                    mark_pending(&root, &id, true)?;
                }
            }
            Ok(version)
        })
        .await
    }

    async fn pending_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, SessionError> {
        let root = self.root.clone();
        let after = after.map(str::to_owned);
        Self::blocking(move || pending_dir(&root, after.as_deref(), limit)).await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionError> {
        let dir = self.session_dir(session_id)?;
        let root = self.root.clone();
        let id = session_id.to_owned();
        Self::blocking(move || {
            match fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("deleting the session", &dir, e)),
            }
            mark_pending(&root, &id, false)
        })
        .await
    }
}

/// The index of sessions with pending interrupts: an empty file per session, named by its id,
/// in a directory no session id can name (ids do not start with `.`).
const PENDING_INDEX: &str = ".pending";

/// In [`PENDING_INDEX`] once every session of the root was indexed (sessions written by a
/// release without the index are added by the first listing).
const INDEXED: &str = ".indexed";

/// Whether `writes` leave the session paused (`Some(true)`), not paused (`Some(false)`), or do
/// not say.
fn sets_pending(writes: &[SessionWrite]) -> Option<bool> {
    writes.iter().rev().find_map(|w| match w {
        SessionWrite::SetPendingInterrupts(p) => Some(p.is_some()),
        _ => None,
    })
}

/// Adds the session to the pending index, or takes it out.
fn mark_pending(root: &Path, session_id: &str, pending: bool) -> Result<(), SessionError> {
    let index = root.join(PENDING_INDEX);
    let path = index.join(session_id);
    if pending {
        private_dirs(&index).map_err(|e| io_err("creating", &index, e))?;
        new_private_file()
            .open(&path)
            .map(drop)
            .or_else(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(io_err("marking a pending session", &path, e)),
            })
    } else {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(io_err("unmarking a pending session", &path, e))
            }
            _ => Ok(()),
        }
    }
}

/// Session ids with pending interrupts, in id order, after `after`, at most `limit`: the
/// index's names, each checked against the session (a name left by a write that crashed
/// before its unmarking is skipped).
fn pending_dir(
    root: &Path,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, SessionError> {
    let index = root.join(PENDING_INDEX);
    if !index.join(INDEXED).exists() {
        index_root(root)?;
    }
    let mut ids: Vec<String> = fs::read_dir(&index)
        .map_err(|e| io_err("listing", &index, e))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|id| validate_session_id(id).is_ok())
        .filter(|id| after.is_none_or(|a| id.as_str() > a))
        .collect();
    ids.sort_unstable();
    let mut out = Vec::new();
    for id in ids {
        if out.len() >= limit {
            break;
        }
        if is_paused(&root.join(&id), &id) {
            out.push(id);
        }
    }
    Ok(out)
}

/// Whether the session has pending interrupts; one that cannot be read is left out of the
/// listing (its load reports why), not allowed to fail it for every other session.
fn is_paused(dir: &Path, session_id: &str) -> bool {
    matches!(load_dir(dir, session_id), Ok(Some(s)) if s.pending_interrupts.is_some())
}

/// Indexes every session of the root once (those written before the index existed).
fn index_root(root: &Path) -> Result<(), SessionError> {
    let index = root.join(PENDING_INDEX);
    private_dirs(&index).map_err(|e| io_err("creating", &index, e))?;
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) => return Err(io_err("listing", root, e)),
    };
    for entry in entries.filter_map(Result::ok) {
        let Ok(id) = entry.file_name().into_string() else {
            continue;
        };
        if validate_session_id(&id).is_err() || !entry.path().is_dir() {
            continue;
        }
        if is_paused(&entry.path(), &id) {
            mark_pending(root, &id, true)?;
        }
    }
    let sentinel = index.join(INDEXED);
    new_private_file()
        .open(&sentinel)
        .map(drop)
        .or_else(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Ok(()),
            _ => Err(io_err("creating", &sentinel, e)),
        })
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

/// Creates `dir` and its missing parents readable by the owner only (0700 on Unix, whatever
/// the umask): sessions hold conversations, tool results and approvals. Directories that exist
/// keep their mode.
fn private_dirs(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Options creating a new file readable by the owner only (0600 on Unix, whatever the umask).
fn new_private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Writes `bytes` to a new fsynced temporary file in `tmp`.
fn write_temp(tmp: &Path, bytes: &[u8]) -> Result<PathBuf, SessionError> {
    let path = tmp.join(format!(
        "{}-{}.json",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut f = new_private_file().open(&path)?;
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
    link_temp(&temp, dir, name)
}

/// Links the fsynced temporary file `temp` as `dir/name` unless that name exists, removes
/// the temporary name and fsyncs the directory. Returns false when the name was taken.
fn link_temp(temp: &Path, dir: &Path, name: &str) -> Result<bool, SessionError> {
    let target = dir.join(name);
    let linked = fs::hard_link(temp, &target);
    let _ = fs::remove_file(temp);
    match linked {
        Ok(()) => {
            fsync_dir(dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err("publishing", &target, e)),
    }
}

/// Replaces the file at `path` with an empty tombstone, atomically (a rename). Best effort:
/// a file left as it is stays valid, and the next compaction retires it. Nothing to fsync:
/// the tombstone holds no data, and what it replaces is covered by a durable snapshot.
fn retire(tmp: &Path, path: &Path) {
    let temp = tmp.join(format!(
        "{}-{}.tombstone",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let made = new_private_file()
        .open(&temp)
        .and_then(|_| fs::rename(&temp, path));
    if made.is_err() {
        let _ = fs::remove_file(&temp);
    }
}

/// Reads the record `what` of the session from `path`; `None` for a tombstone or no file.
fn read_json<T: for<'de> Deserialize<'de>>(
    path: &Path,
    session_id: &str,
    what: &str,
) -> Result<Option<T>, SessionError> {
    match fs::read(path) {
        // An empty file is a tombstone: the entry was folded into a snapshot.
        Ok(bytes) if bytes.is_empty() => Ok(None),
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            too_new_within(session_id, what, &bytes)
                .unwrap_or_else(|| json_err(&format!("reading {}", path.display()), e))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("reading", path, e)),
    }
}

/// Why a record that does not decode may be of a newer release, which may change a record's
/// shape, not only its number: `SchemaTooNew` for a record of a newer schema, or one holding a
/// paused run of a newer checkpoint version.
fn too_new_within(session_id: &str, what: &str, bytes: &[u8]) -> Option<SessionError> {
    let record = serde_json::from_slice::<Value>(bytes).ok();
    let too_new_record = record
        .as_ref()
        .and_then(schema_of)
        .and_then(|found| too_new(session_id, what, found));
    // Where a record of this schema holds a paused run: a snapshot's `pending_interrupts`, a
    // log entry's `setPendingInterrupts` writes.
    let paused = record.iter().flat_map(|r| {
        let writes = r
            .get("writes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        let of_writes = writes.filter_map(|w| w.get(PENDING_WRITE));
        r.get("pending_interrupts").into_iter().chain(of_writes)
    });
    let too_new_paused = || {
        paused
            .filter(|p| !p.is_null())
            .filter_map(|p| paused_run(session_id, p.clone()).err())
            .find(|e| matches!(e, SessionError::SchemaTooNew { .. }))
    };
    too_new_record.or_else(too_new_paused)
}

/// The tag of a [`SessionWrite::SetPendingInterrupts`] in a log entry.
const PENDING_WRITE: &str = "setPendingInterrupts";

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
        Some(&v) => match read_json::<SessionSnapshot>(
            &dir.join(SNAPSHOTS).join(file_name(v)),
            session_id,
            &format!("snapshot {v}"),
        )? {
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
            // A gap: entries were retired by a compaction after we listed the snapshots.
            return Ok(Attempt::Raced);
        }
        let what = format!("log entry {v}");
        let path = dir.join(LOG).join(file_name(v));
        let Some(entry) = read_json::<LogEntry>(&path, session_id, &what)? else {
            return Ok(Attempt::Raced);
        };
        if let Some(e) = too_new(session_id, &what, entry.schema_version.into()) {
            return Err(e);
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
    let staged = stage(root, dir, session_id, expected, writes)?;
    let version = link_staged(dir, session_id, staged)?;
    settle(dir, session_id, version, compact_after)
}

/// A write between its head check and its link: the version it claims and the temporary
/// file holding its log entry.
struct Staged {
    expected: u64,
    version: u64,
    temp: PathBuf,
    /// Taken before the head check.
    started: Instant,
}

fn conflict(session_id: &str, expected: u64, found: u64) -> SessionError {
    SessionError::Conflict {
        session_id: session_id.to_owned(),
        expected,
        found,
    }
}

/// Creates the directories, checks the head and writes the log entry to a temporary file.
fn stage(
    root: &Path,
    dir: &Path,
    session_id: &str,
    expected: u64,
    writes: &[SessionWrite],
) -> Result<Staged, SessionError> {
    let started = Instant::now();
    let log = dir.join(LOG);
    let tmp = dir.join(TMP);
    if !log.is_dir() || !tmp.is_dir() {
        let fresh = !dir.exists();
        for d in [&log, &tmp, &dir.join(SNAPSHOTS)] {
            private_dirs(d).map_err(|e| io_err("creating", d, e))?;
        }
        if fresh {
            fsync_dir(dir)?;
            fsync_dir(root)?;
        }
    }
    let found = head(dir)?;
    if found != expected {
        return Err(conflict(session_id, expected, found));
    }
    let version = expected + 1;
    let entry = LogEntry {
        schema_version: schema_of_writes(writes),
        version,
        writes: writes.to_vec(),
    };
    let bytes = serde_json::to_vec_pretty(&entry).map_err(|e| json_err("encoding", e))?;
    let temp = write_temp(&tmp, &bytes)?;
    Ok(Staged {
        expected,
        version,
        temp,
        started,
    })
}

/// Links a staged entry as `log/<version>`: the compare-and-swap, which decides the write.
fn link_staged(dir: &Path, session_id: &str, staged: Staged) -> Result<u64, SessionError> {
    let log = dir.join(LOG);
    if !link_temp(&staged.temp, &log, &file_name(staged.version))? {
        return Err(conflict(
            session_id,
            staged.expected,
            head(dir)?.max(staged.version),
        ));
    }
    // Tombstones keep a superseded name taken for GRACE after the compaction that retired
    // it, which came after this writer's head check: a link within GRACE of the check
    // cannot have landed under a snapshot. (Half of it, for clocks that disagree.)
    if staged.started.elapsed() >= GRACE / 2 {
        let newest_snapshot = versions(&dir.join(SNAPSHOTS))?.last().copied().unwrap_or(0);
        if newest_snapshot >= staged.version {
            // Either linked in time and since folded into that snapshot, or linked late
            // under it: nothing on disk tells which.
            return Err(SessionError::io(
                format!("session '{session_id}'"),
                format!(
                    "writing version {}: the writer stalled for {}s between its version check \
                     and its commit and a compaction passed it; whether the write is stored \
                     is unknown: reload the session",
                    staged.version,
                    staged.started.elapsed().as_secs()
                ),
            ));
        }
    }
    Ok(staged.version)
}

/// After a successful link: compacts when the write crossed the mark.
fn settle(
    dir: &Path,
    session_id: &str,
    version: u64,
    compact_after: u64,
) -> Result<u64, SessionError> {
    // The write is stored; a compaction may already have folded it into a snapshot.
    let newest_snapshot = versions(&dir.join(SNAPSHOTS))?.last().copied().unwrap_or(0);
    if version.saturating_sub(newest_snapshot) >= compact_after
        && let Err(e) = compact(dir, session_id)
    {
        tracing::warn!(session_id, error = %e, "session compaction failed; will retry later");
    }
    Ok(version)
}

/// Writes a snapshot of the current version, removes older snapshots, turns the log entries
/// it covers into tombstones and removes tombstones older than [`GRACE`].
fn compact(dir: &Path, session_id: &str) -> Result<(), SessionError> {
    let Some(mut session) = load_dir(dir, session_id)? else {
        return Ok(());
    };
    session.schema_version = session.stored_schema();
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
    let tmp = dir.join(TMP);
    let cutoff = SystemTime::now() - GRACE;
    for v in versions(&log)? {
        if v > session.version {
            break;
        }
        let path = log.join(file_name(v));
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.len() > 0 {
            // Replaced, never removed: the name stays taken (see the type's doc).
            retire(&tmp, &path);
        } else if meta.modified().is_ok_and(|t| t < cutoff) {
            let _ = fs::remove_file(&path);
        }
    }
    // Temporary files left by writers that died: old enough that nobody is writing them.
    if let Ok(entries) = fs::read_dir(&tmp) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Interleavings of writers, replayed step by step: a writer stages (checks the head and
    //! writes its temporary file), links, and settles (compacts), and others run in between.
    use super::*;
    use crate::model::StoredMessage;
    use rein_core::{Message, id::MessageId};

    struct Dir(PathBuf);
    impl Dir {
        fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!(
                "rein-file-{name}-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            Self(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const ID: &str = "s";

    fn msg(text: &str) -> Vec<SessionWrite> {
        vec![SessionWrite::AppendMessage(StoredMessage::new(
            MessageId::new(),
            Message::user(text),
        ))]
    }

    fn texts(dir: &Path) -> (u64, Vec<String>) {
        let s = load_dir(dir, ID).unwrap().unwrap();
        let t = s.messages.iter().map(|m| m.message.text()).collect();
        (s.version, t)
    }

    fn is_conflict(r: &Result<u64, SessionError>) -> bool {
        matches!(r, Err(SessionError::Conflict { .. }))
    }

    /// A writes version 1 legitimately, then stalls after its link while B writes past it
    /// and compacts (the snapshot includes A's entry). A's write succeeded and is stored
    /// exactly once: A must get Ok, not a conflict that makes it write the message again.
    #[test]
    fn a_writer_stalled_after_its_link_keeps_its_write() {
        let root = Dir::new("after-link");
        let dir = root.0.join(ID);
        let a = stage(&root.0, &dir, ID, 0, &msg("a")).unwrap();
        let linked = link_staged(&dir, ID, a);
        // B, meanwhile: reads version 1, writes 2, compacts (snapshot 2).
        assert_eq!(write_dir(&root.0, &dir, ID, 1, &msg("b"), 2).unwrap(), 2);
        assert!(!versions(&dir.join(SNAPSHOTS)).unwrap().is_empty());
        let a = linked.and_then(|v| settle(&dir, ID, v, 2));
        assert_eq!(a.unwrap(), 1, "A's write is in the session");
        assert_eq!(texts(&dir), (2, vec!["a".to_owned(), "b".to_owned()]));
    }

    /// C checks the head (version 0), then stalls before its link while A and B write
    /// versions 1 and 2 and B compacts. C's link must not land: its write is a conflict and
    /// is not in the session.
    #[test]
    fn a_writer_stalled_before_its_link_conflicts() {
        let root = Dir::new("before-link");
        let dir = root.0.join(ID);
        let c = stage(&root.0, &dir, ID, 0, &msg("c")).unwrap();
        assert_eq!(write_dir(&root.0, &dir, ID, 0, &msg("a"), 2).unwrap(), 1);
        assert_eq!(write_dir(&root.0, &dir, ID, 1, &msg("b"), 2).unwrap(), 2);
        let c = link_staged(&dir, ID, c).and_then(|v| settle(&dir, ID, v, 2));
        assert!(is_conflict(&c), "{c:?}");
        assert_eq!(texts(&dir), (2, vec!["a".to_owned(), "b".to_owned()]));
        // And the session goes on: the next write is version 3.
        assert_eq!(write_dir(&root.0, &dir, ID, 2, &msg("d"), 2).unwrap(), 3);
        assert_eq!(texts(&dir).1, ["a", "b", "d"]);
    }

    fn age(path: &Path, by: Duration) {
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(SystemTime::now() - by)
            .unwrap();
    }

    /// Compaction keeps the names it supersedes (as empty tombstones) and removes tombstones
    /// only once they are older than GRACE.
    #[test]
    fn tombstones_keep_names_until_old() {
        let root = Dir::new("tombstones");
        let dir = root.0.join(ID);
        for v in 0..4 {
            write_dir(&root.0, &dir, ID, v, &msg(&format!("m{v}")), 2).unwrap();
        }
        let log = dir.join(LOG);
        assert_eq!(versions(&log).unwrap(), [1, 2, 3, 4]);
        assert_eq!(versions(&dir.join(SNAPSHOTS)).unwrap(), [4]);
        for v in 1..=4 {
            let len = fs::metadata(log.join(file_name(v))).unwrap().len();
            assert_eq!(len, 0, "log {v} is a tombstone");
        }
        assert_eq!(texts(&dir).1, ["m0", "m1", "m2", "m3"]);
        age(&log.join(file_name(1)), GRACE + Duration::from_secs(60));
        write_dir(&root.0, &dir, ID, 4, &msg("m4"), 2).unwrap();
        write_dir(&root.0, &dir, ID, 5, &msg("m5"), 2).unwrap();
        assert_eq!(versions(&log).unwrap(), [2, 3, 4, 5, 6], "the old one went");
        assert_eq!(
            texts(&dir),
            (
                6,
                ["m0", "m1", "m2", "m3", "m4", "m5"]
                    .map(String::from)
                    .to_vec()
            )
        );
    }

    /// A reader that listed an older snapshot and then finds a tombstone where it expected
    /// an entry reads again (and sees the newer snapshot), rather than failing.
    #[test]
    fn a_tombstone_above_the_listed_snapshot_is_a_race() {
        let root = Dir::new("reader");
        let dir = root.0.join(ID);
        write_dir(&root.0, &dir, ID, 0, &msg("m0"), 100).unwrap();
        fs::write(dir.join(LOG).join(file_name(1)), b"").unwrap();
        assert!(matches!(load_once(&dir, ID), Ok(Attempt::Raced)));
    }

    /// C checks the head, then stalls longer than GRACE before its link: the tombstones are
    /// gone and its link lands under a snapshot. It must not report Ok (the write is not in
    /// the session) nor Conflict (it cannot know): an I/O error saying the outcome is unknown.
    #[test]
    fn a_writer_stalled_past_the_grace_period_reports_an_unknown_outcome() {
        let root = Dir::new("grace");
        let dir = root.0.join(ID);
        let mut c = stage(&root.0, &dir, ID, 0, &msg("c")).unwrap();
        let Some(long_ago) = Instant::now().checked_sub(GRACE) else {
            return; // A clock that cannot go back that far: nothing to simulate.
        };
        c.started = long_ago;
        assert_eq!(write_dir(&root.0, &dir, ID, 0, &msg("a"), 2).unwrap(), 1);
        assert_eq!(write_dir(&root.0, &dir, ID, 1, &msg("b"), 2).unwrap(), 2);
        for v in [1, 2] {
            age(
                &dir.join(LOG).join(file_name(v)),
                GRACE + Duration::from_secs(60),
            );
        }
        assert_eq!(write_dir(&root.0, &dir, ID, 2, &msg("d"), 100).unwrap(), 3);
        compact(&dir, ID).unwrap();
        assert!(
            !dir.join(LOG).join(file_name(1)).exists(),
            "tombstone 1 removed"
        );
        let c = link_staged(&dir, ID, c);
        assert!(matches!(&c, Err(SessionError::Io { .. })), "{c:?}");
        assert_eq!(texts(&dir).1, ["a", "b", "d"]);
        // A writer as slow whose version no snapshot covers yet did commit.
        let mut e = stage(&root.0, &dir, ID, 3, &msg("e")).unwrap();
        e.started = long_ago;
        assert_eq!(link_staged(&dir, ID, e).unwrap(), 4);
        assert_eq!(texts(&dir).1, ["a", "b", "d", "e"]);
    }
}
