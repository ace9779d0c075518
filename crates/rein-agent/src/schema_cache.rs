//! Tool-input and typed-answer schema checks shared by every agent of the process.
//!
//! Compiling a JSON schema is ≈95 % of building an agent (≈10 µs for one small schema), and
//! servers often build an agent per request or per session from the same tools. Checks are
//! therefore kept by the schema's allocation first — a tool handle's schema is one `Arc` shared
//! by every agent given the handle, so it is found without reading it — and then by content: a
//! structural hash picks the bucket, equality confirms the hit (a schema made anew with the same
//! content, as a server listing its tools again makes it). The cache is bounded; when full it
//! starts over, so programs that generate schemas on the fly cannot grow it without limit.
//!
//! A schema of the simple subset ([`crate::simple_schema`]) is not compiled until an input
//! fails its hand check: jsonschema's validator then words the errors.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock, PoisonError};

use serde_json::Value;

use crate::simple_schema;

/// Most schemas kept at once, by content and by allocation each.
const CAPACITY: usize = 512;

/// A schema's check: a simple schema's inputs checked by hand, jsonschema's validator compiled
/// when first needed (at once for any other schema).
pub(crate) struct SchemaCheck {
    schema: Arc<Value>,
    simple: bool,
    compiled: OnceLock<jsonschema::Validator>,
}

impl SchemaCheck {
    fn new(schema: &Arc<Value>) -> Result<Self, String> {
        let check = Self {
            schema: schema.clone(),
            simple: simple_schema::is_simple(schema),
            compiled: OnceLock::new(),
        };
        // A simple schema compiles (`simple_schema`'s property); any other is compiled now, so
        // that an invalid one fails the build.
        if !check.simple {
            check.validator()?;
        }
        Ok(check)
    }

    /// Whether `input` is valid, known without jsonschema: a simple schema's valid input.
    fn quickly_accepts(&self, input: &Value) -> bool {
        self.simple && simple_schema::accepts(&self.schema, input)
    }

    /// The validator that decides `input` and words its errors, or `None` when the input is
    /// known valid without it (compiled only then, on first use).
    pub(crate) fn validator_unless_accepted(
        &self,
        input: &Value,
    ) -> Result<Option<&jsonschema::Validator>, String> {
        if self.quickly_accepts(input) {
            return Ok(None);
        }
        self.validator().map(Some)
    }

    /// jsonschema's validator of the schema, compiled on first use.
    fn validator(&self) -> Result<&jsonschema::Validator, String> {
        if let Some(v) = self.compiled.get() {
            return Ok(v);
        }
        // Two threads may compile at once; one result is kept, the other dropped.
        let v = jsonschema::validator_for(&self.schema).map_err(|e| e.to_string())?;
        Ok(self.compiled.get_or_init(|| v))
    }
}

/// A schema known by its address: its check and, once asked, its token count.
struct Known {
    /// Held so that no other schema can be allocated at this address while it is kept (the
    /// check may hold another allocation of the same content).
    _schema: Arc<Value>,
    check: Arc<SchemaCheck>,
    tokens: Option<u64>,
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

#[derive(Default)]
struct Cache {
    /// By the schema's address.
    by_address: HashMap<usize, Known>,
    /// By content: structural hash, then equality.
    buckets: HashMap<u64, Vec<Arc<SchemaCheck>>>,
    len: usize,
}

impl Cache {
    fn remember_address(&mut self, schema: &Arc<Value>, check: &Arc<SchemaCheck>) {
        if self.by_address.len() >= CAPACITY {
            self.by_address.clear();
        }
        let known = Known {
            _schema: schema.clone(),
            check: check.clone(),
            tokens: None,
        };
        self.by_address.insert(address(schema), known);
    }
}

fn cache() -> MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn address(schema: &Arc<Value>) -> usize {
    Arc::as_ptr(schema).addr()
}

/// The check of `schema`, made once per process (per distinct schema); an error when
/// jsonschema does not compile the schema.
pub(crate) fn check_for(schema: &Arc<Value>) -> Result<Arc<SchemaCheck>, String> {
    if let Some(known) = cache().by_address.get(&address(schema)) {
        return Ok(known.check.clone());
    }
    let key = hash_of(schema);
    {
        let mut cache = cache();
        let found = cache
            .buckets
            .get(&key)
            .and_then(|b| b.iter().find(|c| c.schema == *schema))
            .cloned();
        if let Some(c) = found {
            cache.remember_address(schema, &c);
            return Ok(c);
        }
    }
    // Made outside the lock: another thread may make the same schema's meanwhile, which is
    // harmless (one of the two is kept).
    let check = Arc::new(SchemaCheck::new(schema)?);
    let mut cache = cache();
    if cache.len >= CAPACITY {
        cache.buckets.clear();
        cache.len = 0;
    }
    cache.buckets.entry(key).or_default().push(check.clone());
    cache.len += 1;
    cache.remember_address(schema, &check);
    Ok(check)
}

/// `count(schema)`, counted once per schema allocation the cache knows (an agent's tools'
/// schemas: each agent counts what its requests carry besides the messages).
pub(crate) fn token_count(schema: &Arc<Value>, count: impl FnOnce(&Value) -> u64) -> u64 {
    let key = address(schema);
    if let Some(tokens) = cache().by_address.get(&key).and_then(|k| k.tokens) {
        return tokens;
    }
    let tokens = count(schema);
    if let Some(known) = cache().by_address.get_mut(&key) {
        known.tokens = Some(tokens);
    }
    tokens
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
    fn equal_schemas_share_one_check_and_different_ones_do_not() {
        let a = Arc::new(
            json!({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer", "maximum": 3}}}),
        );
        let b = Arc::new(
            json!({"properties": {"n": {"maximum": 3, "type": "integer"}, "city": {"type": "string"}}, "type": "object"}),
        );
        let c = Arc::new(json!({"type": "object", "properties": {"city": {"type": "number"}}}));
        assert_eq!(hash_of(&a), hash_of(&b), "key order does not matter");
        let ca = check_for(&a).unwrap();
        let cb = check_for(&b).unwrap();
        let cc = check_for(&c).unwrap();
        assert!(Arc::ptr_eq(&ca, &cb));
        assert!(!Arc::ptr_eq(&ca, &cc));
        // `b`, found by content, is kept alive by its address's entry: no other schema can be
        // allocated there and found as `a`'s.
        assert!(Arc::strong_count(&b) >= 2);
        assert!(ca.quickly_accepts(&json!({"city": "Oslo"})));
        assert!(!cc.quickly_accepts(&json!({"city": "Oslo"})));
        assert!(!cc.validator().unwrap().is_valid(&json!({"city": "Oslo"})));
    }

    /// A simple schema's validator is compiled only when an input fails the hand check; any
    /// other schema's at once.
    #[test]
    fn only_a_schema_outside_the_simple_subset_is_compiled_at_once() {
        let simple =
            Arc::new(json!({"type": "object", "properties": {"lazy": {"type": "integer"}}}));
        let check = check_for(&simple).unwrap();
        assert!(check.quickly_accepts(&json!({"lazy": 1})));
        assert!(check.compiled.get().is_none());
        assert!(!check.quickly_accepts(&json!({"lazy": "1"})));
        assert!(!check.validator().unwrap().is_valid(&json!({"lazy": "1"})));
        assert!(check.compiled.get().is_some());
        let pattern = Arc::new(json!({"type": "string", "pattern": "^eager"}));
        let check = check_for(&pattern).unwrap();
        assert!(check.compiled.get().is_some());
        assert!(!check.quickly_accepts(&json!("eager")));
        assert!(check.validator().unwrap().is_valid(&json!("eager")));
    }

    /// A schema seen once is found again by its allocation, and the entry keeps the schema
    /// alive: its address cannot be taken by another schema while the entry says it is this one.
    #[test]
    fn a_schema_seen_once_is_found_by_its_address_and_kept_alive() {
        let schema =
            Arc::new(json!({"type": "object", "properties": {"only_here": {"type": "boolean"}}}));
        let c = check_for(&schema).unwrap();
        let found = cache()
            .by_address
            .get(&address(&schema))
            .map(|k| k.check.clone());
        assert!(Arc::ptr_eq(&found.expect("found by address"), &c));
        assert!(
            Arc::strong_count(&schema) >= 3,
            "the cache holds the schema"
        );
        assert!(Arc::ptr_eq(&check_for(&schema).unwrap(), &c));
        // Its token count is counted once.
        assert_eq!(token_count(&schema, |_| 7), 7);
        assert_eq!(token_count(&schema, |_| unreachable!("counted again")), 7);
        // A schema the cache does not know is counted every time.
        let other = Arc::new(json!({"type": "null"}));
        assert_eq!(token_count(&other, |_| 1), 1);
        assert_eq!(token_count(&other, |_| 2), 2);
    }

    #[test]
    fn an_invalid_schema_is_an_error_and_is_not_kept() {
        let bad = Arc::new(json!({"type": 12}));
        assert!(check_for(&bad).is_err());
        assert!(check_for(&bad).is_err());
        assert!(!cache().by_address.contains_key(&address(&bad)));
    }
}
