#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// Echoes text.
#[rein_macros::tool(crate = "crate::deps")]
fn echo(text: &str) -> String {
    text.to_owned()
}

fn main() {}
