//! A hand check for the schemas most tools declare: `#[tool]`'s (schemars, sub-schemas
//! inlined) and hand-written `{"type": "object", "properties": ..., "required": ...}` ones.
//!
//! They use a small part of JSON Schema 2020-12 whose meaning is plain (types, properties,
//! required, additional properties, items, `anyOf`, scalar enums and constants, integer bounds,
//! lengths, annotations). An input valid under such a schema is accepted here without
//! jsonschema: a process whose tools get valid inputs never runs jsonschema's compiler and
//! meta-schema check, nor keeps their code and memory resident (issue 44 item 2: the peak RSS of
//! one conversation). An input this check does not accept goes to jsonschema, compiled then, so
//! every error reads as before.
//!
//! What makes the shortcut safe: [`is_simple`] ⇒ jsonschema compiles the schema (so building
//! an agent fails for the same schemas), and [`accepts`] ⇒ jsonschema finds the input valid.
//! `accepts` never negates a sub-result (no `not`, `oneOf`, `if`), so answering false where it
//! is unsure (a float against an integer bound past 2^53, a number past `f64`) only sends the
//! input to jsonschema. The tests check both, and the converse, against jsonschema on random
//! schemas and inputs.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// The one `$schema` a simple schema may name: the draft jsonschema assumes without one, whose
/// `format` is an annotation (draft 7 and older assert formats).
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Deeper schemas are left to jsonschema (and `accepts` recurses at most this deep).
const MAX_DEPTH: usize = 32;

/// Whether `schema` is in the subset [`accepts`] checks. Every keyword's value has the shape the
/// 2020-12 meta-schema requires, so jsonschema compiles it.
pub(crate) fn is_simple(schema: &Value) -> bool {
    let names_other_draft = schema
        .get("$schema")
        .is_some_and(|s| s.as_str() != Some(DRAFT_2020_12));
    !names_other_draft && is_simple_at(schema, 0)
}

fn is_simple_at(schema: &Value, depth: usize) -> bool {
    let map = match schema {
        Value::Bool(_) => return true,
        Value::Object(map) if depth < MAX_DEPTH => map,
        _ => return false,
    };
    let simple = |s: &Value| is_simple_at(s, depth + 1);
    map.iter().all(|(keyword, v)| match keyword.as_str() {
        // Checked by `is_simple`, and only at the root.
        "$schema" => depth == 0,
        "title" | "description" | "$comment" | "format" => v.is_string(),
        "default" => true,
        "examples" => v.is_array(),
        "deprecated" | "readOnly" | "writeOnly" => v.is_boolean(),
        "type" => match v {
            Value::String(name) => is_type_name(name),
            Value::Array(names) => {
                !names.is_empty()
                    && names.iter().all(|n| n.as_str().is_some_and(is_type_name))
                    && distinct_strings(names)
            }
            _ => false,
        },
        "properties" => v.as_object().is_some_and(|p| p.values().all(simple)),
        "additionalProperties" | "items" => simple(v),
        "anyOf" => v
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(simple)),
        "required" => v.as_array().is_some_and(|r| distinct_strings(r)),
        "enum" => v.as_array().is_some_and(|e| e.iter().all(is_plain_scalar)),
        "const" => is_plain_scalar(v),
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => integer(v).is_some(),
        "minLength" | "maxLength" | "minItems" | "maxItems" => v.as_u64().is_some(),
        _ => false,
    })
}

/// Whether `instance` is valid under `schema`, a schema [`is_simple`] accepts; false also when
/// unsure (see the module's documentation).
pub(crate) fn accepts(schema: &Value, instance: &Value) -> bool {
    let map = match schema {
        Value::Bool(b) => return *b,
        Value::Object(map) => map,
        _ => return false,
    };
    map.iter()
        .all(|(keyword, v)| keyword_accepts(map, keyword, v, instance))
}

/// One keyword of `schema` (whose other keywords `additionalProperties` reads) on `instance`;
/// a keyword applies only to instances of its type, as in JSON Schema.
fn keyword_accepts(
    schema: &Map<String, Value>,
    keyword: &str,
    v: &Value,
    instance: &Value,
) -> bool {
    match keyword {
        "type" => match v {
            Value::String(name) => has_type(instance, name),
            Value::Array(names) => names
                .iter()
                .any(|n| n.as_str().is_some_and(|n| has_type(instance, n))),
            _ => false,
        },
        "properties" => match (v, instance) {
            (Value::Object(properties), Value::Object(object)) => properties
                .iter()
                .all(|(name, s)| object.get(name).is_none_or(|x| accepts(s, x))),
            (Value::Object(_), _) => true,
            _ => false,
        },
        "additionalProperties" => match instance {
            Value::Object(object) => {
                let declared = schema.get("properties").and_then(Value::as_object);
                object
                    .iter()
                    .filter(|(name, _)| !declared.is_some_and(|d| d.contains_key(*name)))
                    .all(|(_, x)| accepts(v, x))
            }
            _ => true,
        },
        "items" => match instance {
            Value::Array(items) => items.iter().all(|x| accepts(v, x)),
            _ => true,
        },
        "anyOf" => v
            .as_array()
            .is_some_and(|a| a.iter().any(|s| accepts(s, instance))),
        "required" => match (v, instance) {
            (Value::Array(names), Value::Object(object)) => names
                .iter()
                .all(|n| n.as_str().is_some_and(|n| object.contains_key(n))),
            (Value::Array(_), _) => true,
            _ => false,
        },
        // Plain scalars only (`is_simple`): equal exactly when `==`, as in jsonschema.
        "enum" => v.as_array().is_some_and(|e| e.contains(instance)),
        "const" => v == instance,
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
            let (Value::Number(n), Some(bound)) = (instance, integer(v)) else {
                return !instance.is_number() && integer(v).is_some();
            };
            compare_to_integer(n, bound).is_some_and(|order| match keyword {
                "minimum" => order != Ordering::Less,
                "maximum" => order != Ordering::Greater,
                "exclusiveMinimum" => order == Ordering::Greater,
                _ => order == Ordering::Less,
            })
        }
        "minLength" | "maxLength" => match (instance, v.as_u64()) {
            (Value::String(s), Some(limit)) => {
                within(keyword == "minLength", s.chars().count(), limit)
            }
            (_, limit) => limit.is_some(),
        },
        "minItems" | "maxItems" => match (instance, v.as_u64()) {
            (Value::Array(items), Some(limit)) => within(keyword == "minItems", items.len(), limit),
            (_, limit) => limit.is_some(),
        },
        // Annotations last: the keywords above are what tool schemas mostly hold.
        "$schema" | "title" | "description" | "$comment" | "format" | "default" | "examples"
        | "deprecated" | "readOnly" | "writeOnly" => true,
        _ => false,
    }
}

fn is_type_name(name: &str) -> bool {
    matches!(
        name,
        "null" | "boolean" | "integer" | "number" | "string" | "array" | "object"
    )
}

fn has_type(instance: &Value, name: &str) -> bool {
    match name {
        "null" => instance.is_null(),
        "boolean" => instance.is_boolean(),
        "string" => instance.is_string(),
        "array" => instance.is_array(),
        "object" => instance.is_object(),
        "number" => instance.is_number(),
        // 2020-12: a number with no fractional part, however written (`1.0` too).
        "integer" => instance.as_number().is_some_and(|n| {
            n.is_u64() || n.is_i64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }),
        _ => false,
    }
}

/// A value an enum or constant may hold in the subset: equality of these needs no numeric rules.
fn is_plain_scalar(v: &Value) -> bool {
    matches!(v, Value::Null | Value::Bool(_) | Value::String(_))
}

/// Strings, none twice (the meta-schema's `uniqueItems`).
fn distinct_strings(items: &[Value]) -> bool {
    let mut names = Vec::with_capacity(items.len());
    for item in items {
        match item.as_str() {
            Some(s) => names.push(s),
            None => return false,
        }
    }
    names.sort_unstable();
    names.windows(2).all(|w| w[0] != w[1])
}

/// A bound written as an integer (`0`, `-3`, `255`; not `1.0`).
fn integer(v: &Value) -> Option<i128> {
    v.as_u64()
        .map(i128::from)
        .or_else(|| v.as_i64().map(i128::from))
}

/// How `n` compares to `bound`, exactly; `None` for a float against a bound past 2^53 (not an
/// `f64` exactly) or a number past `f64`.
fn compare_to_integer(n: &Number, bound: i128) -> Option<Ordering> {
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u).cmp(&bound));
    }
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i).cmp(&bound));
    }
    if bound.unsigned_abs() > 1 << 53 {
        return None;
    }
    // Exact: `bound` is an f64 exactly, and a JSON number is never NaN.
    n.as_f64()?.partial_cmp(&(bound as f64))
}

/// `len` against a `min*` (`is_min`) or `max*` limit.
fn within(is_min: bool, len: usize, limit: u64) -> bool {
    let len = len as u64;
    if is_min { len >= limit } else { len <= limit }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    /// jsonschema's verdict, the reference.
    fn reference(schema: &Value) -> Option<jsonschema::Validator> {
        jsonschema::validator_for(schema).ok()
    }

    /// The schemas tools declare are in the subset: `#[tool]`'s (schemars with sub-schemas
    /// inlined: integer formats and bounds, nullable types, nested objects, string enums, an
    /// optional struct, maps, lengths) and a typical hand-written one; on them the hand check is
    /// jsonschema for a valid input and for each way to break it.
    #[test]
    fn the_schemas_tools_declare_are_simple() {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        enum Units {
            Metric,
            Imperial,
        }
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Place {
            /// The city.
            city: String,
            country: Option<String>,
        }
        #[derive(schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Args {
            /// Where.
            place: Place,
            near: Option<Place>,
            days: Option<u8>,
            limit: u32,
            offset: i64,
            ratio: f64,
            units: Units,
            tags: Vec<String>,
            flags: std::collections::HashMap<String, bool>,
            initial: char,
            #[schemars(range(min = 1, max = 10))]
            count: i32,
            #[schemars(length(max = 2))]
            picks: Vec<u16>,
        }
        let generated = schemars::generate::SchemaSettings::draft2020_12()
            .with(|s| s.inline_subschemas = true)
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<Args>()
            .to_value();
        assert!(is_simple(&generated), "{generated:#}");
        let v = reference(&generated).expect("compiles");
        let valid = json!({"place": {"city": "Oslo"}, "near": null, "days": 3, "limit": 3,
            "offset": -2, "ratio": 0.5, "units": "Metric", "tags": ["a"], "flags": {"f": true},
            "initial": "é", "count": 10, "picks": [1, 65535]});
        assert!(v.is_valid(&valid));
        assert!(accepts(&generated, &valid));
        for (field, bad) in [
            ("place", json!({})),
            ("place", json!({"city": 3})),
            ("near", json!("Oslo")),
            ("days", json!(256)),
            ("days", json!(1.5)),
            ("limit", json!(-1)),
            ("offset", json!("1")),
            ("ratio", json!(null)),
            ("units", json!("SI")),
            ("tags", json!([1])),
            ("flags", json!({"f": 1})),
            ("initial", json!("ab")),
            ("initial", json!("")),
            ("count", json!(0)),
            ("count", json!(11)),
            ("picks", json!([1, 2, 3])),
            ("picks", json!([-1])),
            ("unknown", json!(1)),
        ] {
            let mut input = valid.clone();
            input[field] = bad;
            assert!(!v.is_valid(&input), "{input}");
            assert!(!accepts(&generated, &input), "{input}");
        }
        let hand =
            json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
        assert!(is_simple(&hand));
        assert!(accepts(&hand, &json!({"x": 2.0, "y": "any"})));
        assert!(!accepts(&hand, &json!({"y": 1})));
    }

    /// Outside the subset: what jsonschema must decide (references, regexes, negations,
    /// another draft, keyword values the meta-schema rejects).
    #[test]
    fn schemas_outside_the_subset_are_not_simple() {
        for schema in [
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}),
            json!({"type": "string", "pattern": "^a"}),
            json!({"not": {"type": "string"}}),
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}),
            json!({"type": "object", "properties": {"a": {"$schema": DRAFT_2020_12}}}),
            json!({"type": ["string", "string"]}),
            json!({"type": []}),
            json!({"type": "text"}),
            json!({"required": ["a", "a"]}),
            json!({"enum": [1, 2]}),
            json!({"minimum": 1.5}),
            json!({"minLength": -1}),
            json!({"minLength": 1.0}),
            json!({"anyOf": []}),
            json!({"items": [{"type": "string"}]}),
            json!({"title": 3}),
            json!({"multipleOf": 2}),
            json!(3),
        ] {
            assert!(!is_simple(&schema), "{schema}");
        }
        let mut deep = json!({"type": "string"});
        for _ in 0..MAX_DEPTH {
            deep = json!({"items": deep});
        }
        assert!(!is_simple(&deep), "too deep");
    }

    /// A float against an integer bound past 2^53 is left to jsonschema (false here), as is a
    /// number past `f64` when another crate turns on `arbitrary_precision`.
    #[test]
    fn an_unsure_comparison_is_not_accepted() {
        let schema = json!({"maximum": 9_007_199_254_740_993_u64});
        assert!(is_simple(&schema));
        assert!(!accepts(&schema, &json!(1.5)));
        assert!(accepts(&schema, &json!(9_007_199_254_740_993_u64)));
        assert!(!accepts(&schema, &json!(9_007_199_254_740_994_u64)));
        assert!(reference(&schema).expect("compiles").is_valid(&json!(1.5)));
    }

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn chance(&mut self, in_ten: usize) -> bool {
            self.below(10) < in_ten
        }
        fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.below(items.len())]
        }
    }

    const NAMES: [&str; 4] = ["a", "b", "c", "$ref"];
    const TYPES: [&str; 7] = [
        "null", "boolean", "integer", "number", "string", "array", "object",
    ];

    fn number(rng: &mut Rng) -> Value {
        match rng.below(8) {
            0 => json!(rng.below(5) as i64 - 2),
            1 => json!(rng.below(5) as f64 - 2.0),
            2 => json!(rng.below(9) as f64 / 2.0 - 2.0),
            3 => json!(u64::MAX - rng.below(2) as u64),
            4 => json!(i64::MIN + rng.below(2) as i64),
            5 => json!(9_007_199_254_740_992.0 * (1.0 + rng.below(2) as f64)),
            6 => json!(1e300),
            _ => json!(-0.0),
        }
    }

    /// A bound: an integer (within 2^53: no comparison is left unsure), sometimes a float
    /// (outside the subset).
    fn bound(rng: &mut Rng) -> Value {
        if rng.chance(8) {
            json!(rng.below(5) as i64 - 2)
        } else {
            json!(0.5)
        }
    }

    fn scalar(rng: &mut Rng) -> Value {
        match rng.below(4) {
            0 => Value::Null,
            1 => json!(rng.chance(5)),
            2 => json!(*rng.pick(&["", "x", "xy", "é", "ab"])),
            _ => number(rng),
        }
    }

    /// A schema mostly in the subset, sometimes with a keyword value the meta-schema rejects
    /// or a keyword outside it.
    fn schema(rng: &mut Rng, depth: usize) -> Value {
        if rng.below(12) == 0 {
            return json!(rng.chance(7));
        }
        let mut map = Map::new();
        for _ in 0..rng.below(4) {
            let (k, v) = match rng.below(19) {
                0 | 1 => (
                    "type",
                    if rng.chance(7) {
                        json!(*rng.pick(&TYPES))
                    } else {
                        json!([*rng.pick(&TYPES), *rng.pick(&TYPES)])
                    },
                ),
                2 | 3 if depth < 3 => {
                    let mut props = Map::new();
                    for _ in 0..rng.below(3) {
                        props.insert((*rng.pick(&NAMES)).into(), schema(rng, depth + 1));
                    }
                    ("properties", Value::Object(props))
                }
                4 => ("required", json!([*rng.pick(&NAMES), *rng.pick(&NAMES)])),
                5 if depth < 3 => ("additionalProperties", schema(rng, depth + 1)),
                6 if depth < 3 => ("items", schema(rng, depth + 1)),
                7 if depth < 3 => (
                    "anyOf",
                    json!([schema(rng, depth + 1), schema(rng, depth + 1)]),
                ),
                8 => ("enum", json!([scalar(rng), scalar(rng)])),
                9 => ("const", scalar(rng)),
                10 => (
                    *rng.pick(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
                    bound(rng),
                ),
                11 => (
                    *rng.pick(&["minLength", "maxLength", "minItems", "maxItems"]),
                    json!(rng.below(3)),
                ),
                12 => (
                    *rng.pick(&["title", "description", "format", "$comment"]),
                    json!(*rng.pick(&["email", "uint8", "date-time"])),
                ),
                13 => ("default", scalar(rng)),
                14 => (
                    *rng.pick(&["deprecated", "readOnly", "writeOnly"]),
                    json!(rng.chance(5)),
                ),
                15 => ("examples", json!([scalar(rng)])),
                16 => (
                    "$schema",
                    json!(*rng.pick(&[DRAFT_2020_12, "http://json-schema.org/draft-07/schema#"])),
                ),
                17 => (
                    *rng.pick(&["minLength", "required", "type", "title"]),
                    scalar(rng),
                ),
                _ => (*rng.pick(&["pattern", "not", "uniqueItems"]), json!("a")),
            };
            map.insert(k.into(), v);
        }
        Value::Object(map)
    }

    /// An instance shaped like `schema` often enough to be valid about as often as not.
    fn instance(rng: &mut Rng, schema: &Value, depth: usize) -> Value {
        let any = Value::Bool(true);
        let want = schema.get("type").and_then(|t| match t {
            Value::String(s) => Some(s.as_str()),
            Value::Array(a) => a.first().and_then(Value::as_str),
            _ => None,
        });
        let want = if rng.chance(8) {
            want
        } else {
            Some(*rng.pick(&TYPES))
        };
        match want {
            Some("object") if depth < 4 => {
                let mut object = BTreeMap::new();
                let properties = schema.get("properties").and_then(Value::as_object);
                for name in NAMES {
                    if rng.chance(6) {
                        let sub = properties.and_then(|p| p.get(name)).unwrap_or(&any);
                        object.insert(name.to_owned(), instance(rng, sub, depth + 1));
                    }
                }
                if rng.chance(2) {
                    object.insert("z".into(), scalar(rng));
                }
                json!(object)
            }
            Some("array") if depth < 4 => {
                let sub = schema.get("items").unwrap_or(&any);
                Value::Array(
                    (0..rng.below(4))
                        .map(|_| instance(rng, sub, depth + 1))
                        .collect(),
                )
            }
            Some("string") => match schema.get("enum").and_then(Value::as_array) {
                Some(e) if !e.is_empty() && rng.chance(6) => rng.pick(e).clone(),
                _ => json!(*rng.pick(&["", "x", "xy", "é", "ab"])),
            },
            Some("integer" | "number") => number(rng),
            Some("boolean") => json!(rng.chance(5)),
            Some("null") => Value::Null,
            _ => scalar(rng),
        }
    }

    /// The property the shortcut rests on, against jsonschema itself: a simple schema compiles,
    /// and on it `accepts` is jsonschema's `is_valid` (both ways: the generator's bounds leave
    /// no comparison unsure).
    #[test]
    fn on_random_schemas_and_inputs_the_hand_check_is_jsonschema() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut simple, mut valid, mut invalid, mut not_simple) = (0, 0, 0, 0);
        for _ in 0..4000 {
            let schema = schema(&mut rng, 0);
            if !is_simple(&schema) {
                not_simple += 1;
                continue;
            }
            simple += 1;
            let Some(reference) = reference(&schema) else {
                panic!("a simple schema jsonschema rejects: {schema}");
            };
            for _ in 0..25 {
                let input = instance(&mut rng, &schema, 0);
                let expected = reference.is_valid(&input);
                assert_eq!(
                    accepts(&schema, &input),
                    expected,
                    "schema {schema}\ninput {input}"
                );
                if expected {
                    valid += 1;
                } else {
                    invalid += 1;
                }
            }
        }
        // The generator reaches every side of the property.
        assert!(
            simple > 1500 && not_simple > 500,
            "{simple} simple, {not_simple} not"
        );
        assert!(
            valid > 20_000 && invalid > 5_000,
            "{valid} valid, {invalid} invalid"
        );
    }
}
