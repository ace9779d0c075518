//! Runs the real `rein` binary on every scenario under `examples/scenarios/` and compares the
//! transcript with the checked-in `NAME.expected.json` (random ids ignored). `REIN_BLESS=1`
//! rewrites the expected files. Also checks the exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios")
}

fn rein(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .output()
        .expect("run rein")
}

fn scenario_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".json") && !name.ends_with(".expected.json")
        })
        .collect();
    files.sort();
    files
}

/// Replaces random ids (injection ids) with a fixed marker.
fn normalize(mut transcript: Value) -> Value {
    if let Some(steps) = transcript["steps"].as_array_mut() {
        for step in steps {
            if let Some(injections) = step["injections"].as_array_mut() {
                for i in injections {
                    i["id"] = Value::String("<random>".into());
                }
            }
        }
    }
    transcript
}

#[test]
fn every_scenario_matches_its_expected_transcript() {
    let bless = std::env::var("REIN_BLESS").is_ok_and(|v| v == "1");
    let files = scenario_files();
    assert!(files.len() >= 15, "scenarios missing: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        let out = rein(&["replay", file.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let got = normalize(serde_json::from_slice(&out.stdout).unwrap());
        let expected_path = file.with_extension("expected.json");
        if bless {
            let text = serde_json::to_string_pretty(&sorted(got.clone())).unwrap() + "\n";
            std::fs::write(&expected_path, text).unwrap();
            continue;
        }
        let expected: Value = match std::fs::read_to_string(&expected_path) {
            Ok(text) => normalize(serde_json::from_str(&text).unwrap()),
            Err(e) => {
                failures.push(format!(
                    "{}: {e} (run with REIN_BLESS=1)",
                    expected_path.display()
                ));
                continue;
            }
        };
        if got != expected {
            failures.push(format!(
                "{}: transcript differs from {}:\n{}",
                file.display(),
                expected_path.display(),
                serde_json::to_string_pretty(&got).unwrap()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Keys in sorted order, whatever serde_json's `preserve_order` (which cedar-policy turns on
/// when the `cedar` feature is in the build), so blessed files do not churn.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut entries: Vec<(String, Value)> = o.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[test]
fn scenarios_cover_every_built_in_kind_and_redact_target() {
    let mut kinds = BTreeSet::new();
    let mut targets = BTreeSet::new();
    for file in scenario_files() {
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for spec in s["policy"].as_array().into_iter().flatten() {
            kinds.insert(spec["kind"].as_str().unwrap().to_owned());
            if let Some(t) = spec["target"].as_str() {
                targets.insert(t.to_owned());
            }
        }
    }
    for kind in rein_interventions::policy::PolicyKind::KIND_NAMES
        .iter()
        .chain(&["fail"])
    {
        assert!(kinds.contains(*kind), "no scenario uses kind {kind}");
    }
    for t in [
        "prompt",
        "model_request",
        "tool_input",
        "tool_result",
        "model_output",
    ] {
        assert!(targets.contains(t), "no scenario redacts {t}");
    }
}

fn write_temp(name: &str, text: &str) -> PathBuf {
    // Cargo's scratch directory for integration tests: removed with `target`, not left in /tmp.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn invalid(name: &str, scenario: Value) -> String {
    let path = write_temp(name, &scenario.to_string());
    let out = rein(&["replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
    assert!(out.stdout.is_empty());
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn invalid_scenarios_exit_2_naming_the_json_path() {
    let ok_step = serde_json::json!({"prompt": "hi"});
    let e = invalid(
        "unknown-field.json",
        serde_json::json!({"steps": [ok_step, {"resume": [{"interrupt": "x", "respnse": "y"}]}]}),
    );
    assert!(
        e.contains("steps[1].resume[0]: unknown field `respnse`"),
        "{e}"
    );

    let e = invalid(
        "bad-regex.json",
        serde_json::json!({
            "policy": [
                {"name": "a", "kind": "deny_tools", "tools": []},
                {"name": "no-prod", "kind": "deny_input_match", "pattern": "(prod"}
            ],
            "steps": [ok_step]
        }),
    );
    assert!(e.contains("policy[1].pattern: invalid regex"), "{e}");
    assert!(e.contains("handler 'no-prod'"), "{e}");

    let e = invalid(
        "unknown-kind.json",
        serde_json::json!({"policy": [{"name": "x", "kind": "deny_all"}], "steps": [ok_step]}),
    );
    assert!(e.contains("policy[0].kind: unknown kind `deny_all`"), "{e}");

    let e = invalid(
        "missing-field.json",
        serde_json::json!({"policy": [{"name": "x", "kind": "guide_model_call"}], "steps": [ok_step]}),
    );
    assert!(
        e.contains("policy[0].feedback: missing field `feedback` (handler 'x')"),
        "{e}"
    );

    let e = invalid(
        "bad-error.json",
        serde_json::json!({"model": [{"content": []}, {"error": "exploded"}], "steps": [ok_step]}),
    );
    assert!(
        e.contains("model[1].error: unknown variant `exploded`"),
        "{e}"
    );

    let e = invalid(
        "bad-block.json",
        serde_json::json!({"model": [{"content": [{"video": {}}]}], "steps": [ok_step]}),
    );
    assert!(e.contains("model[0].content[0]"), "{e}");

    let e = invalid(
        "both.json",
        serde_json::json!({"steps": [{"prompt": "a", "resume": []}]}),
    );
    assert!(
        e.contains("steps[0]: give either `prompt` or `resume`"),
        "{e}"
    );

    let e = invalid("no-steps.json", serde_json::json!({"name": "x"}));
    assert!(e.contains("missing field `steps`"), "{e}");

    let e = invalid(
        "fail-without-event.json",
        serde_json::json!({"policy": [{"name": "f", "kind": "fail"}], "steps": [ok_step]}),
    );
    assert!(e.contains("policy[0].event: missing field `event`"), "{e}");

    let path = write_temp("syntax.json", "{\"steps\": [");
    let out = rein(&["replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid JSON"));
}

#[test]
fn internal_failure_exits_1() {
    let out = rein(&["replay", "/nonexistent/scenario.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn a_scenario_that_runs_exits_0_even_when_a_step_fails() {
    let path = write_temp(
        "exhausted.json",
        &serde_json::json!({"steps": [{"prompt": "hi"}]}).to_string(),
    );
    let out = rein(&["replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["steps"][0]["stop_reason"], Value::Null);
    assert_eq!(t["steps"][0]["message"], Value::Null);
    assert_eq!(t["steps"][0]["error"]["kind"], "model");
}

#[test]
fn tool_calls_lists_the_scripted_tools_of_every_agent_not_the_agent_tool_or_the_transfer() {
    // docs/replay.md: `tool_calls` is what the scenario's scripted tools did, whichever agent
    // called them; an agent called as a tool and `transfer_to_<name>` are not scripted tools
    // (they show in `messages` and the step's `handoffs`).
    let tool = |name: &str| serde_json::json!({"name": name, "description": name, "result": "ok"});
    let call = |id: &str, name: &str, input: Value| serde_json::json!({"content": [{"toolUse": {"toolUseId": id, "name": name, "input": input}}]});
    let none = || serde_json::json!({});
    let text = |t: &str| serde_json::json!({"content": [{"text": t}]});
    let scenario = serde_json::json!({
        "name": "who-ran-what",
        "tools": [tool("lookup")],
        "agents": [
            {"name": "helper", "join": "tool", "tools": [tool("fetch")],
             "model": [call("f1", "fetch", none()), text("fetched")]},
            {"name": "closer", "join": "handoff", "tools": [tool("close")],
             "model": [call("c1", "close", none()), text("closed")]}
        ],
        "model": [
            call("l1", "lookup", none()),
            call("h1", "helper", serde_json::json!({"input": "fetch it"})),
            call("t1", "transfer_to_closer", none())
        ],
        "steps": [{"prompt": "go"}]
    });
    let path = write_temp("who-ran-what.json", &scenario.to_string());
    let out = rein(&["replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["steps"][0]["error"], Value::Null, "{t}");
    let names: Vec<&str> = t["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lookup", "fetch", "close"], "{t}");
}
