//! Invocation state (per call, read-only) and agent state (per agent, shared and writable).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InvocationState(Arc<Map>);

impl InvocationState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// A state from a map.
    pub fn from_map(map: Map) -> Self {
        Self(Arc::new(map))
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
        self.0.get(key)
    }

    /// The whole map.
    pub fn as_map(&self) -> &Map {
        &self.0
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
        self.0.serialize(s)
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

impl AgentState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // A panic while holding the lock cannot leave a JSON map half-written in a way that
        // matters more than losing the state, so recover from poisoning.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
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
