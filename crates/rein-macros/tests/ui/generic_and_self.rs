#[allow(unused_imports)]
mod deps {
    pub use rein_core;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// Generic.
#[rein_macros::tool(crate = "crate::deps")]
fn generic<T: Into<String>>(x: T) -> String {
    x.into()
}

struct Counter;

impl Counter {
    /// A method.
    #[rein_macros::tool(crate = "crate::deps")]
    fn method(&self, n: i64) -> i64 {
        n
    }
}

fn main() {}
