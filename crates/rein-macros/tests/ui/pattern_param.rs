#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// Adds a pair.
#[rein_macros::tool(crate = "crate::deps")]
fn add((a, b): (i32, i32)) -> i32 {
    a + b
}

fn main() {}
