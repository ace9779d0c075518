#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

struct NoSchema;

/// Returns something that is neither a tool output nor serializable.
#[rein_macros::tool(crate = "crate::deps")]
fn unserializable() -> NoSchema {
    NoSchema
}

fn main() {}
