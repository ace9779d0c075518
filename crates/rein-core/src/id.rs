//! Identifiers: message ids, invocation ids, and the deterministic ids of interrupts.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A random-looking v4 uuid, cheap enough for the hot path: one process-wide random seed and a
/// counter mixed by splitmix64, instead of a system call per id.
pub(crate) fn fast_uuid() -> Uuid {
    static SEED: OnceLock<(u64, u64)> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (a, b) = *SEED.get_or_init(|| {
        let r = Uuid::new_v4().as_u128();
        (r as u64, (r >> 64) as u64)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let hi = splitmix64(a ^ n);
    let lo = splitmix64(b.wrapping_add(n));
    uuid::Builder::from_random_bytes(((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes())
        .into_uuid()
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new random id.
            #[allow(clippy::new_without_default)]
            pub fn new() -> Self {
                Self(fast_uuid())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

uuid_id!(
    /// The stable id of a message stored in an agent's history. Never sent to a provider.
    MessageId
);
uuid_id!(
    /// The id of one invocation (a resume is a new invocation).
    InvocationId
);
uuid_id!(
    /// The id of one message injected into a running invocation.
    InjectionId
);

/// 128 bits from the operating system's random generator, as 32 hex digits: for what an
/// attacker must not predict nor see repeat — the ids Rein makes up for tool calls a provider
/// sent without one, the nonce of each pause in interrupt ids (SPEC §4). (Not the generator of
/// message ids: its outputs follow from one seed.)
///
/// ```
/// let a = rein_core::id::unguessable();
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, rein_core::id::unguessable());
/// ```
pub fn unguessable() -> String {
    Uuid::new_v4().simple().to_string()
}

/// `uuid5(NAMESPACE_OID, name)` as used in interrupt ids.
pub(crate) fn name_uuid(name: &str) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, name.as_bytes())
}

/// The id of an interrupt raised by a tool through its context:
/// `v1:tool_call:<toolUseId>:<uuid5(NAMESPACE_OID, name)>`.
pub(crate) fn tool_call_interrupt_id(tool_use_id: &str, name: &str) -> String {
    format!("v1:tool_call:{tool_use_id}:{}", name_uuid(name))
}

/// Canonical JSON: object keys sorted at every depth, no insignificant whitespace. Independent of
/// serde_json's `preserve_order` feature, so fingerprints are stable whatever the build unifies.
pub(crate) fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(k) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The fingerprint of a tool call an approval is bound to: uuid5 over the tool name and the
/// input as sorted-key JSON (what `ToolUse::fingerprint` returns).
pub(crate) fn tool_call_fingerprint(name: &str, input: &serde_json::Value) -> String {
    let mut data = String::with_capacity(name.len() + 64);
    data.push_str(name);
    data.push('\n');
    data.push_str(&canonical_json(input));
    fingerprint_of(&data)
}

/// uuid5 (OID namespace) over `data`: the form of every fingerprint.
pub(crate) fn fingerprint_of(data: &str) -> String {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, data.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fast_uuids_are_distinct_v4() {
        let a = MessageId::new();
        let b = MessageId::new();
        assert_ne!(a, b);
        assert_eq!(a.0.get_version_num(), 4);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let v = json!({"b": 1, "a": {"d": [1, {"z": 0, "y": "x"}], "c": null}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":null,"d":[1,{"y":"x","z":0}]},"b":1}"#
        );
    }

    #[test]
    fn fingerprint_ignores_key_order_but_not_values() {
        let a = tool_call_fingerprint("rm", &json!({"path": "/a", "force": true}));
        let b = tool_call_fingerprint("rm", &json!({"force": true, "path": "/a"}));
        let c = tool_call_fingerprint("rm", &json!({"force": true, "path": "/b"}));
        let d = tool_call_fingerprint("rm2", &json!({"force": true, "path": "/a"}));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn interrupt_ids_use_uuid5_oid() {
        let id = crate::audit::EventKind::BeforeToolCall.interrupt_id("t1", "approval");
        let expected = Uuid::new_v5(&Uuid::NAMESPACE_OID, b"approval");
        assert_eq!(id, format!("v1:before_tool_call:t1:{expected}"));
        assert!(tool_call_interrupt_id("t9", "x").starts_with("v1:tool_call:t9:"));
    }
}
