#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// Bad name.
#[rein_macros::tool(crate = "crate::deps", name = "get weather")]
fn bad_name() -> String {
    String::new()
}

/// Unknown attribute.
#[rein_macros::tool(crate = "crate::deps", title = "x")]
fn unknown_attribute() -> String {
    String::new()
}

fn main() {}
