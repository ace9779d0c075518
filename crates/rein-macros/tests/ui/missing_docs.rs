#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

#[rein_macros::tool(crate = "crate::deps")]
fn undocumented(x: i32) -> i32 {
    x
}

fn main() {}
