//! Compile-time validity of actions (SPEC §3.2): an action that is not valid on an event does
//! not compile.

#[test]
fn invalid_actions_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
