//! A tool spec shares its schema among its clones (an agent's spec list, each request's), and
//! its JSON is the schema itself, byte for byte as before it was shared.

use std::sync::Arc;

use rein_core::{ToolHandle, tool::ToolSpec};
use serde_json::{Value, json};

fn schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

#[test]
fn a_specs_clones_share_one_schema() {
    let spec = ToolSpec::new("weather", "The weather.", schema());
    let copy = spec.clone();
    assert!(Arc::ptr_eq(&spec.input_schema, &copy.input_schema));
    // A handle's spec is the tool's, and one schema may be given to several specs.
    let shared = Arc::new(schema());
    let a = ToolSpec::new("a", "A.", shared.clone());
    let b = ToolHandle::from_sync_fn("b", "B.", shared.clone(), |_, _| Ok("ok".into()));
    assert!(Arc::ptr_eq(&a.input_schema, &shared));
    assert!(Arc::ptr_eq(&b.spec().input_schema, &shared));
}

#[test]
fn a_specs_json_is_unchanged_and_reads_back() {
    let spec = ToolSpec::new("weather", "The weather.", schema());
    // The JSON of a spec whose schema was a plain `Value` (as stored sessions and journals
    // written by earlier releases hold it).
    let stored = r#"{"name":"weather","description":"The weather.","inputSchema":{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}}"#;
    // The spec as it was before (a plain `Value`), serialized by the same serde_json: the key
    // order of an object depends on serde_json's `preserve_order`, which another crate of the
    // build may enable, so the bytes are compared with that, not with a literal.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Before {
        name: &'static str,
        description: &'static str,
        input_schema: Value,
    }
    let before = Before {
        name: "weather",
        description: "The weather.",
        input_schema: schema(),
    };
    assert_eq!(
        serde_json::to_string(&spec).unwrap(),
        serde_json::to_string(&before).unwrap()
    );
    assert_eq!(
        serde_json::to_value(&spec).unwrap(),
        serde_json::from_str::<Value>(stored).unwrap()
    );
    let back: ToolSpec = serde_json::from_str(stored).unwrap();
    assert_eq!(back, spec);
    assert_eq!(*back.input_schema, schema());
}
