//! Runnable examples for Rein (see the `[[example]]` targets).
