//! Placeholder until the agent lands.
fn main() {}
