//! The tables of actions × lifecycle points in the READMEs, the crate-level rustdoc and the
//! guides, checked against the action types, so that none goes stale again (issue 41: the README
//! and docs.rs said `Confirm` was before_tool_call only long after it was allowed everywhere).
//!
//! The truth comes from the compiler: each action type's variants are matched exhaustively here
//! (inside the crate `#[non_exhaustive]` does not apply), so a variant added to or removed from
//! an action type fails to compile until this list follows, and then every table is held to it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::action::{
    AfterModelCallAction, AfterToolCallAction, BeforeInvocationAction, BeforeModelCallAction,
    BeforeToolCallAction, ModelOutputAction,
};

const ACTIONS: [&str; 5] = ["Proceed", "Deny", "Guide", "Confirm", "Transform"];

/// The lifecycle points (`POINTS`) and the actions valid at each (`valid_at`), from one list:
/// each point's `match` over its action type is exhaustive, so a variant added or removed fails
/// to compile here until its row follows.
macro_rules! variants {
    ($($point:ident: $action:ident { $($label:ident: $pattern:pat => $make:expr),+ $(,)? })+) => {
        const POINTS: [&str; [$(stringify!($point)),+].len()] = [$(stringify!($point)),+];

        /// The actions valid at a lifecycle point, by the point's name in the tables.
        fn valid_at(point: &str) -> Option<BTreeSet<&'static str>> {
            match point {
                $(stringify!($point) => {
                    use $action as A;
                    Some(
                        [$($make),+]
                            .iter()
                            .map(|a| match a {
                                $($pattern => stringify!($label)),+
                            })
                            .collect(),
                    )
                })+
                _ => None,
            }
        }
    };
}

variants! {
    before_invocation: BeforeInvocationAction {
        Proceed: A::Proceed => A::Proceed,
        Deny: A::Deny { .. } => A::deny(""),
        Guide: A::Guide { .. } => A::guide(""),
        Confirm: A::Confirm(_) => A::confirm(""),
        Transform: A::Transform(_) => A::transform(|_| {}),
    }
    before_model_call: BeforeModelCallAction {
        Proceed: A::Proceed => A::Proceed,
        Deny: A::Deny { .. } => A::deny(""),
        Guide: A::Guide { .. } => A::guide(""),
        Confirm: A::Confirm(_) => A::confirm(""),
        Transform: A::Transform(_) => A::transform(|_| {}),
    }
    after_model_call: AfterModelCallAction {
        Proceed: A::Proceed => A::Proceed,
        Guide: A::Guide { .. } => A::guide(""),
        Confirm: A::Confirm(_) => A::confirm(""),
        Transform: A::Transform(_) => A::transform(|_| {}),
    }
    model_output: ModelOutputAction {
        Proceed: A::Proceed => A::Proceed,
        Deny: A::Deny { .. } => A::deny(""),
        Transform: A::Transform(_) => A::transform(|_| {}),
    }
    before_tool_call: BeforeToolCallAction {
        Proceed: A::Proceed => A::Proceed,
        Deny: A::Deny { .. } => A::deny(""),
        Guide: A::Guide { .. } => A::guide(""),
        Confirm: A::Confirm(_) => A::confirm(""),
        Transform: A::Transform(_) => A::transform(|_| {}),
    }
    after_tool_call: AfterToolCallAction {
        Proceed: A::Proceed => A::Proceed,
        Confirm: A::Confirm(_) => A::confirm(""),
        Transform: A::Transform(_) => A::transform(|_| {}),
    }
}

fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let inner = line
        .strip_prefix('|')
        .and_then(|l| l.strip_suffix('|'))
        .unwrap_or(line);
    inner.split('|').map(|c| c.trim().to_owned()).collect()
}

/// The first word of a header cell (`model_output (§3.9)` → `model_output`) or of a row's
/// backticked action (`` `Deny { reason }` `` → `Deny`).
fn first_word(cell: &str) -> &str {
    cell.trim_start_matches('`')
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("")
}

/// Checks every actions × points table of `text` (markdown, or rustdoc with `//!` stripped);
/// returns how many there were, or what is wrong.
fn check_tables(file: &Path, text: &str) -> Result<usize, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim_start().strip_prefix("//!").unwrap_or(l).trim())
        .collect();
    let mut found = 0;
    let mut i = 0;
    while i < lines.len() {
        let header = cells(lines[i]);
        if !lines[i].starts_with('|') || header.first().map(String::as_str) != Some("action") {
            i += 1;
            continue;
        }
        found += 1;
        let at = format!("{}:{}", file.display(), i + 1);
        let points: Vec<&str> = header[1..].iter().map(|c| first_word(c)).collect();
        let mut valid = Vec::new();
        for p in &points {
            valid.push(valid_at(p).ok_or(format!("{at}: unknown lifecycle point `{p}`"))?);
        }
        let wanted: BTreeSet<&str> = POINTS.into();
        let have: BTreeSet<&str> = points.iter().copied().collect();
        if have != wanted {
            return Err(format!(
                "{at}: the table's points are {have:?}; every point is wanted: {wanted:?}"
            ));
        }
        let mut rows = BTreeSet::new();
        i += 2; // the header and its `|---|` line
        while i < lines.len() && lines[i].starts_with('|') {
            let row = cells(lines[i]);
            let action = first_word(&row[0]).to_owned();
            let at = format!("{}:{}", file.display(), i + 1);
            if !ACTIONS.contains(&action.as_str()) {
                return Err(format!("{at}: unknown action `{action}`"));
            }
            if row.len() != points.len() + 1 {
                return Err(format!(
                    "{at}: {} cells, {} wanted",
                    row.len(),
                    points.len() + 1
                ));
            }
            for ((point, valid), cell) in points.iter().zip(&valid).zip(&row[1..]) {
                let allowed = valid.contains(action.as_str());
                if allowed == cell.is_empty() {
                    return Err(format!(
                        "{at}: `{action}` at {point} is {} in the code but the table says {:?}",
                        if allowed { "valid" } else { "not valid" },
                        cell
                    ));
                }
            }
            rows.insert(action);
            i += 1;
        }
        if rows.len() != ACTIONS.len() {
            return Err(format!("{at}: the table lists {rows:?}, not every action"));
        }
    }
    Ok(found)
}

/// The files whose tables are checked: this crate's README and rustdoc, and — in the
/// repository — every crate's README and `lib.rs`, the top README and the guides.
fn documents() -> Vec<PathBuf> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![crate_dir.join("README.md"), crate_dir.join("src/lib.rs")];
    let root = crate_dir.join("../..");
    if root.join("docs/SPEC.md").is_file() {
        files.push(root.join("README.md"));
        for dir in ["docs", "crates"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "md") {
                    files.push(path);
                } else if path.is_dir() {
                    files.push(path.join("README.md"));
                    files.push(path.join("src/lib.rs"));
                }
            }
        }
    }
    files.retain(|f| f.is_file());
    let mut seen = BTreeSet::new();
    files.retain(|f| seen.insert(f.canonicalize().unwrap()));
    files
}

#[test]
fn every_actions_table_matches_the_action_types() {
    let mut tables = 0;
    let mut problems = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        match check_tables(&file, &text) {
            Ok(n) => tables += n,
            Err(e) => problems.push(e),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // This crate's README and rustdoc, docs/interventions.md and SPEC.md at least.
    assert!(tables >= 4, "only {tables} tables found");
}

#[test]
fn a_stale_table_is_caught() {
    let file = Path::new("README.md");
    let table = |confirm: &str| {
        format!(
            "| action | before_invocation | before_tool_call | before_model_call | after_tool_call | after_model_call |\n\
             |---|---|---|---|---|---|\n\
             | `Proceed` | ✓ | ✓ | ✓ | ✓ | ✓ |\n\
             | `Confirm(Confirm)` | {confirm} |\n"
        )
    };
    // The README as it was: no model_output column.
    let e = check_tables(file, &table("| ask | | | |")).unwrap_err();
    assert!(e.contains("every point is wanted"), "{e}");
    let with_output = |confirm: &str, deny: &str| {
        format!(
            "//! | action | before_invocation | before_tool_call | before_model_call | after_tool_call | after_model_call | model_output (§3.9) |\n\
             //! |---|---|---|---|---|---|---|\n\
             //! | `Proceed` | ✓ | ✓ | ✓ | ✓ | ✓ | ✓ |\n\
             //! | `Deny {{ reason }}` | {deny} |\n\
             //! | `Guide {{ feedback }}` | cancel | cancel | inject | | inject + retry | |\n\
             //! | `Confirm(..)` | {confirm} |\n\
             //! | `Transform(edit)` | apply | apply | apply | apply | apply | apply |\n"
        )
    };
    let deny = "cancel | cancel | cancel | | | withhold";
    // The rustdoc as it was: Confirm at before_tool_call only.
    let e = check_tables(file, &with_output(" | ask | | | | ", deny)).unwrap_err();
    assert!(
        e.contains("`Confirm` at before_invocation is valid in the code but the table says \"\""),
        "{e}"
    );
    // A deny after a tool ran, which does not compile.
    let e = check_tables(
        file,
        &with_output(
            "ask | ask | ask | ask | ask | ",
            "cancel | cancel | cancel | cancel | | withhold",
        ),
    )
    .unwrap_err();
    assert!(
        e.contains("`Deny` at after_tool_call is not valid in the code"),
        "{e}"
    );
    assert_eq!(
        check_tables(file, &with_output("ask | ask | ask | ask | ask | ", deny)),
        Ok(1)
    );
}
