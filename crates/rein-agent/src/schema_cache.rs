//! Compiled tool-input validators shared by every agent of the process.
//!
//! Compiling a JSON schema is ≈95 % of building an agent (≈10 µs for one small schema), and
//! servers often build an agent per request or per session from the same tools. Validators are
//! therefore kept by schema content: a structural hash picks the bucket, equality confirms the
//! hit. The cache is bounded; when full it starts over, so programs that generate schemas on the
//! fly cannot grow it without limit.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde_json::Value;

/// Most schemas kept at once.
const CAPACITY: usize = 512;

type Buckets = HashMap<u64, Vec<(Value, Arc<jsonschema::Validator>)>>;

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

#[derive(Default)]
struct Cache {
    buckets: Buckets,
    len: usize,
}

/// The validator of `schema`, compiled once per process (per distinct schema).
pub(crate) fn validator_for(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    let key = hash_of(schema);
    {
        let cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, v)) = cache
            .buckets
            .get(&key)
            .and_then(|b| b.iter().find(|(s, _)| s == schema))
        {
            return Ok(v.clone());
        }
    }
    // Compiled outside the lock: another thread may compile the same schema meanwhile, which is
    // harmless (one of the two is kept).
    let validator = Arc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string())?);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len >= CAPACITY {
        cache.buckets.clear();
        cache.len = 0;
    }
    cache
        .buckets
        .entry(key)
        .or_default()
        .push((schema.clone(), validator.clone()));
    cache.len += 1;
    Ok(validator)
}

fn hash_of(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    hash_value(v, &mut h);
    h.finish()
}

/// A hash that agrees with `Value`'s equality: object entries are combined in any order (maps
/// may keep insertion order), numbers by value.
fn hash_value(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => {
            2u8.hash(h);
            match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => (0u8, u).hash(h),
                (None, Some(i), _) => (1u8, i).hash(h),
                (None, None, Some(f)) => (2u8, f.to_bits()).hash(h),
                _ => n.to_string().hash(h),
            }
        }
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            let mut sum = 0u64;
            for (k, x) in o {
                let mut eh = DefaultHasher::new();
                k.hash(&mut eh);
                hash_value(x, &mut eh);
                sum = sum.wrapping_add(eh.finish());
            }
            sum.hash(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equal_schemas_share_one_validator_and_different_ones_do_not() {
        let a = json!({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer", "maximum": 3}}});
        let b = json!({"properties": {"n": {"maximum": 3, "type": "integer"}, "city": {"type": "string"}}, "type": "object"});
        let c = json!({"type": "object", "properties": {"city": {"type": "number"}}});
        assert_eq!(hash_of(&a), hash_of(&b), "key order does not matter");
        let va = validator_for(&a).unwrap();
        let vb = validator_for(&b).unwrap();
        let vc = validator_for(&c).unwrap();
        assert!(Arc::ptr_eq(&va, &vb));
        assert!(!Arc::ptr_eq(&va, &vc));
        assert!(va.is_valid(&json!({"city": "Oslo"})));
        assert!(!vc.is_valid(&json!({"city": "Oslo"})));
    }

    #[test]
    fn an_invalid_schema_is_an_error_and_is_not_kept() {
        let bad = json!({"type": 12});
        assert!(validator_for(&bad).is_err());
        assert!(validator_for(&bad).is_err());
    }
}
