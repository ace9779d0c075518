//! Invocation state (per call, read-only), run state (per run, for hooks and handlers) and agent
//! state (per agent, shared and writable).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::Map;

/// The JSON map a caller passes with one invocation. It reaches hooks, handlers, tools and
/// (read-only) the model request. Cloning is cheap (shared).
///
/// ```
/// use rein_core::state::InvocationState;
/// let s = InvocationState::from_value(serde_json::json!({"role": "analyst"}));
/// assert_eq!(s.get("role").and_then(|v| v.as_str()), Some("analyst"));
/// ```
#[derive(Clone, Default)]
pub struct InvocationState(
    /// `None` when empty: most invocations pass no state, and should not allocate one.
    Option<Arc<Map>>,
);

/// The map of every empty [`InvocationState`].
static EMPTY_MAP: std::sync::LazyLock<Map> = std::sync::LazyLock::new(Map::new);

impl InvocationState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// A state from a map.
    pub fn from_map(map: Map) -> Self {
        Self((!map.is_empty()).then(|| Arc::new(map)))
    }

    /// A state from a JSON value: an object becomes the map, anything else an empty map.
    pub fn from_value(value: Value) -> Self {
        match value {
            Value::Object(m) => Self::from_map(m),
            _ => Self::default(),
        }
    }

    /// A value by key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map().get(key)
    }

    /// The whole map.
    pub fn as_map(&self) -> &Map {
        self.0.as_deref().unwrap_or(&EMPTY_MAP)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.as_map().is_empty()
    }

    /// Who the invocation is for — who sent the message that started the run: the id under
    /// [`PRINCIPAL_KEY`], a string or an object's `id` (the shape Cedar's principal resolver
    /// also reads). A server sets it from its authentication (rein-agui does), never from
    /// what the client sends.
    ///
    /// ```
    /// use rein_core::state::InvocationState;
    /// let s = InvocationState::from_value(serde_json::json!({"principal": "bob", "approver": "alice"}));
    /// assert_eq!((s.principal(), s.approver()), (Some("bob"), Some("alice")));
    /// ```
    pub fn principal(&self) -> Option<&str> {
        principal_id(self.get(PRINCIPAL_KEY)?)
    }

    /// Who answered the interrupts this invocation resumes from (under [`APPROVER_KEY`], read
    /// as [`principal`](Self::principal) is); `None` in an invocation that is no resume.
    pub fn approver(&self) -> Option<&str> {
        principal_id(self.get(APPROVER_KEY)?)
    }
}

/// The invocation-state key of who the invocation is for ([`InvocationState::principal`]).
pub const PRINCIPAL_KEY: &str = "principal";

/// The invocation-state key of who answered the interrupts a resume answers
/// ([`InvocationState::approver`]).
pub const APPROVER_KEY: &str = "approver";

/// A principal's id: a string, or an object's `id` string.
fn principal_id(value: &Value) -> Option<&str> {
    match value {
        Value::String(id) => Some(id),
        Value::Object(o) => o.get("id")?.as_str(),
        _ => None,
    }
}

impl PartialEq for InvocationState {
    fn eq(&self, other: &Self) -> bool {
        self.as_map() == other.as_map()
    }
}

impl std::fmt::Debug for InvocationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InvocationState")
            .field(self.as_map())
            .finish()
    }
}

impl From<Map> for InvocationState {
    fn from(m: Map) -> Self {
        Self::from_map(m)
    }
}

impl From<Value> for InvocationState {
    fn from(v: Value) -> Self {
        Self::from_value(v)
    }
}

impl serde::Serialize for InvocationState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_map().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for InvocationState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::from_map(Map::deserialize(d)?))
    }
}

/// An agent's key-value state: a JSON map that lives with the agent across invocations,
/// readable and writable by tools and hooks, persisted by session stores. Cloning shares it.
///
/// ```
/// use rein_core::state::AgentState;
/// let s = AgentState::new();
/// s.set("count", 1);
/// assert_eq!(s.get("count"), Some(serde_json::json!(1)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct AgentState(Arc<Mutex<Map>>);

/// The methods a shared JSON map offers, the same for the agent's state and a run's.
macro_rules! shared_map {
    ($ty:ident) => {
        impl $ty {
            /// An empty state.
            pub fn new() -> Self {
                Self::default()
            }

            /// A value by key (cloned).
            pub fn get(&self, key: &str) -> Option<Value> {
                self.lock().get(key).cloned()
            }

            /// Sets a value.
            pub fn set(&self, key: impl Into<String>, value: impl Into<Value>) {
                self.lock().insert(key.into(), value.into());
            }

            /// Removes a value.
            pub fn remove(&self, key: &str) -> Option<Value> {
                self.lock().remove(key)
            }

            /// A copy of the whole map.
            pub fn snapshot(&self) -> Map {
                self.lock().clone()
            }

            /// Replaces the whole map.
            pub fn replace(&self, map: Map) {
                *self.lock() = map;
            }

            /// Runs `f` with the map locked.
            pub fn with<R>(&self, f: impl FnOnce(&mut Map) -> R) -> R {
                f(&mut self.lock())
            }
        }
    };
}

shared_map!(AgentState);

impl AgentState {
    fn lock(&self) -> MutexGuard<'_, Map> {
        // Values are whole JSON values written under the lock, never half-written: recover
        // from poisoning rather than lose the state.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Storage for hooks and intervention handlers that lasts one run: from a prompt until the run
/// ends without pending interrupts. A resume continues the run, even in another process: the
/// state is persisted with the pending interrupts (it is JSON, so it always can be). It is empty
/// when a run starts and cleared when the run ends, after `AfterInvocation`. Cloning shares it.
///
/// Keys are shared by every hook and handler of the agent: prefix yours with your handler's
/// name. Typed access goes through serde:
///
/// ```
/// use rein_core::state::RunState;
/// let s = RunState::new();
/// let calls = s.update("my-guard:calls", |n: &mut u32| {
///     *n += 1;
///     *n
/// })?;
/// assert_eq!(calls, 1);
/// assert_eq!(s.load::<u32>("my-guard:calls")?, Some(1));
/// # Ok::<(), rein_core::state::RunStateError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct RunState(Arc<RunMap>);

#[derive(Debug, Default)]
struct RunMap {
    map: Mutex<Map>,
    /// Whether the map may hold something: most runs never touch it, and ending them then
    /// costs no lock.
    touched: AtomicBool,
}

shared_map!(RunState);

impl RunState {
    fn lock(&self) -> MutexGuard<'_, Map> {
        // As for the agent's state: recover from poisoning.
        let map = self.0.map.lock().unwrap_or_else(PoisonError::into_inner);
        // Marked under the lock, so a `clear` that saw it unset cannot miss this write.
        self.0.touched.store(true, Ordering::Relaxed);
        map
    }

    /// A value by key, as `T`; `None` when absent, an error when it does not deserialize.
    pub fn load<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, RunStateError> {
        match self.lock().get(key) {
            None => Ok(None),
            Some(v) => T::deserialize(v)
                .map(Some)
                .map_err(|e| RunStateError::new(key, e)),
        }
    }

    /// Stores `value` under `key`.
    pub fn store<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<(), RunStateError> {
        let v = serde_json::to_value(value).map_err(|e| RunStateError::new(key, e))?;
        self.lock().insert(key.to_owned(), v);
        Ok(())
    }

    /// Reads the value under `key` as `T` (its default when absent), lets `f` change it and
    /// stores it back, all under one lock: concurrent updates (parallel tool calls) do not
    /// lose each other's writes. Nothing is stored if `f` panics or the value does not
    /// (de)serialize.
    pub fn update<T, R>(&self, key: &str, f: impl FnOnce(&mut T) -> R) -> Result<R, RunStateError>
    where
        T: Serialize + DeserializeOwned + Default,
    {
        let mut map = self.lock();
        let mut value = match map.get(key) {
            None => T::default(),
            Some(v) => T::deserialize(v).map_err(|e| RunStateError::new(key, e))?,
        };
        let out = f(&mut value);
        let v = serde_json::to_value(&value).map_err(|e| RunStateError::new(key, e))?;
        map.insert(key.to_owned(), v);
        Ok(out)
    }

    /// Counts `id` (a tool-use id, say) under `key` once, however often it is asked about;
    /// returns how many distinct ids `key` has counted, this one included. What a limit or a
    /// rate limiter should count by: a pass runs again for the same call when a resume re-checks
    /// an answered pause, and when a hook retries the call, so counting passes counts a call
    /// the human approved twice. Updated under one lock, like [`update`](Self::update).
    ///
    /// ```
    /// use rein_core::state::RunState;
    /// let s = RunState::new();
    /// assert_eq!(s.count_once("limiter:calls", "t1")?, 1);
    /// assert_eq!(s.count_once("limiter:calls", "t1")?, 1); // t1's pass again: not counted
    /// assert_eq!(s.count_once("limiter:calls", "t2")?, 2);
    /// # Ok::<(), rein_core::state::RunStateError>(())
    /// ```
    pub fn count_once(&self, key: &str, id: &str) -> Result<u64, RunStateError> {
        self.update(key, |ids: &mut BTreeSet<String>| {
            if !ids.contains(id) {
                ids.insert(id.to_owned());
            }
            ids.len() as u64
        })
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        !self.0.touched.load(Ordering::Relaxed)
            || self
                .0
                .map
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
    }

    /// Empties the state (a driver ending a run).
    pub fn clear(&self) {
        // Loaded first: a swap writes the line even when it was unset (most runs), which a
        // cold line per agent makes a cache miss for ownership twice per invocation.
        if self.0.touched.load(Ordering::Relaxed) && self.0.touched.swap(false, Ordering::Relaxed) {
            self.0
                .map
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
    }
}

/// A run-state value that does not (de)serialize as the type asked for.
#[derive(Debug, Clone, thiserror::Error)]
#[error("run state '{key}': {message}")]
#[non_exhaustive]
pub struct RunStateError {
    /// The key.
    pub key: String,
    /// What serde said.
    pub message: String,
}

impl RunStateError {
    fn new(key: &str, error: serde_json::Error) -> Self {
        Self {
            key: key.to_owned(),
            message: error.to_string(),
        }
    }
}
