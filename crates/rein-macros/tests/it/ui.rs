//! Compile-time error messages of `#[tool]` (trybuild snapshots in `tests/ui`).
//! Regenerate the snapshots with `TRYBUILD=overwrite cargo test -p rein-macros --test it ui::`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
