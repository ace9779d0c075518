#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// Not a function.
#[rein_macros::tool(crate = "crate::deps")]
struct NotAFunction;

fn main() {}
