//! Runs the real `rein` binary on every scenario under `examples/scenarios/` and compares the
//! transcript with the checked-in `NAME.expected.json` (random ids ignored). `REIN_BLESS=1`
//! rewrites the expected files. Also checks the exit codes, policy files replayed as shipped
//! (`--policy`, `policy_file`), snapshots (`--expect`, `--bless`), suites and their JUnit XML,
//! and the same from a test (`rein_cli::replay`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios")
}

fn rein<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
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

/// The checked-in scenarios as a suite, through the binary: `rein replay DIR` compares each
/// with its `NAME.expected.json` (random ids ignored) and ends with one summary line.
#[test]
fn every_scenario_matches_its_expected_transcript() {
    let bless = std::env::var("REIN_BLESS").is_ok_and(|v| v == "1");
    let files = scenario_files();
    assert!(files.len() >= 15, "scenarios missing: {files:?}");
    let dir = scenarios_dir();
    let mut args = vec!["replay", dir.to_str().unwrap()];
    if bless {
        args.push("--bless");
    }
    let out = rein(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !bless {
        assert_eq!(
            stdout.lines().last(),
            Some(format!("replay: {} passed, 0 failed", files.len()).as_str())
        );
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
        "manager-typo.json",
        serde_json::json!({"conversation_manager": {"kind": "token_window", "budget": 10},
                           "steps": [ok_step]}),
    );
    assert!(
        e.contains("conversation_manager: unknown field `budget`"),
        "{e}"
    );
    let e = invalid(
        "summarizer-script.json",
        serde_json::json!({"conversation_manager": {"kind": "summarizing_window",
                               "budget_tokens": 10, "summarizer": [{"content": [], "error": "server"}]},
                           "steps": [ok_step]}),
    );
    assert!(
        e.contains("conversation_manager.summarizer[0]: give either `content` or `error`"),
        "{e}"
    );

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

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh scratch directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("replay-suites")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn delete_scenario(extra: Value) -> Value {
    let mut s = serde_json::json!({
        "tools": [{"name": "delete_file", "input_schema": {"type": "object"}, "result": "deleted {path}"}],
        "model": [
            {"content": [{"toolUse": {"toolUseId": "t1", "name": "delete_file", "input": {"path": "a.txt"}}}]},
            {"content": [{"text": "done"}]}
        ],
        "steps": [{"prompt": "delete a.txt"}]
    });
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

const DENY_DELETES_TOML: &str = r#"
[[policy]]
name = "no-deletes"
kind = "deny_tools"
tools = ["delete_file"]
reason = "deletes are off"
"#;

#[test]
fn a_shipped_policy_file_replays_as_a_suite_with_junit() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies/chat-scenarios");
    let junit = temp_dir("shipped").join("junit.xml");
    let out = rein(&[
        "replay".as_ref(),
        dir.as_os_str(),
        "--junit".as_ref(),
        junit.as_os_str(),
    ]);
    let stdout = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.trim_end(), "replay: 2 passed, 0 failed");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        "{xml}"
    );
    assert!(
        xml.contains("tests=\"2\" failures=\"0\" errors=\"0\""),
        "{xml}"
    );
    assert!(
        xml.contains("<testcase name=\"delete-asks-first\""),
        "{xml}"
    );
    assert!(
        xml.contains("<testcase name=\"secrets-stay-secret\""),
        "{xml}"
    );
}

#[test]
fn the_policy_option_replaces_the_scenarios_policy_and_loads_as_an_app_does() {
    let dir = temp_dir("policy-option");
    let scenario = dir.join("s.json");
    std::fs::write(
        &scenario,
        delete_scenario(serde_json::json!({"policy": [
            {"name": "ask", "kind": "confirm_tools", "tools": ["delete_file"]}
        ]}))
        .to_string(),
    )
    .unwrap();
    let toml = dir.join("policy.toml");
    std::fs::write(&toml, DENY_DELETES_TOML).unwrap();
    let json = dir.join("policy.json");
    std::fs::write(
        &json,
        r#"{"policy": [{"name": "no-deletes", "kind": "deny_tools", "tools": ["delete_file"], "reason": "deletes are off"}]}"#,
    )
    .unwrap();
    for file in [&toml, &json] {
        let out = rein(&[
            "replay".as_ref(),
            scenario.as_os_str(),
            "--policy".as_ref(),
            file.as_os_str(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let t: Value = serde_json::from_slice(&out.stdout).unwrap();
        let d = &t["steps"][0]["decisions"][0];
        assert_eq!(d["handler"], "no-deletes", "{t}");
        assert_eq!(d["action"], "deny");
        assert_eq!(t["steps"][0]["interrupts"], serde_json::json!([]));
        assert_eq!(t["tool_calls"], serde_json::json!([]));
    }
    // The loader of an app, not of scenario files: no `fail` kind, no unknown top-level key.
    let test_only = dir.join("fail.toml");
    std::fs::write(
        &test_only,
        "[[policy]]\nname = \"f\"\nkind = \"fail\"\nevent = \"before_tool_call\"\n",
    )
    .unwrap();
    let extra_key = dir.join("extra.json");
    std::fs::write(&extra_key, r#"{"policy": [], "polcy": []}"#).unwrap();
    for (file, says) in [
        (
            &test_only,
            "policy[0].kind: kind `fail` is only accepted in scenario files",
        ),
        (&extra_key, "unknown top-level key `polcy`"),
    ] {
        let out = rein(&[
            "replay".as_ref(),
            scenario.as_os_str(),
            "--policy".as_ref(),
            file.as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    }
}

#[test]
fn a_scenario_names_its_policy_file_relative_to_itself() {
    let dir = temp_dir("policy-file");
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::write(dir.join("policies/app.toml"), DENY_DELETES_TOML).unwrap();
    let scenario = dir.join("scenarios/s.json");
    std::fs::write(
        &scenario,
        delete_scenario(serde_json::json!({"policy_file": "../policies/app.toml"})).to_string(),
    )
    .unwrap();
    let out = rein(&["replay".as_ref(), scenario.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["steps"][0]["decisions"][0]["handler"], "no-deletes");

    let both = dir.join("scenarios/both.json");
    std::fs::write(
        &both,
        delete_scenario(serde_json::json!({
            "policy_file": "../policies/app.toml",
            "policy": [{"name": "x", "kind": "deny_tools", "tools": []}]
        }))
        .to_string(),
    )
    .unwrap();
    let e = String::from_utf8(rein(&["replay".as_ref(), both.as_os_str()]).stderr).unwrap();
    assert!(
        e.contains("$: give either `policy` or `policy_file`, not both"),
        "{e}"
    );

    let missing = dir.join("scenarios/missing.json");
    std::fs::write(
        &missing,
        delete_scenario(serde_json::json!({"policy_file": "nope.toml"})).to_string(),
    )
    .unwrap();
    let out = rein(&["replay".as_ref(), missing.as_os_str()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("policy_file: ") && e.contains("nope.toml: cannot read"),
        "{e}"
    );
}

#[test]
fn expect_shows_a_unified_diff_and_bless_rewrites() {
    let dir = temp_dir("expect");
    let scenario = dir.join("s.json");
    std::fs::write(
        &scenario,
        delete_scenario(serde_json::json!({})).to_string(),
    )
    .unwrap();
    let expected = dir.join("blessed.json");
    // Nothing blessed yet: a failure that says how to bless.
    let args = |extra: &[&str]| {
        let mut a: Vec<std::ffi::OsString> = vec!["replay".into(), scenario.clone().into()];
        a.extend(extra.iter().map(Into::into));
        a
    };
    let expect = ["--expect", expected.to_str().unwrap()];
    let out = rein(&args(&expect));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout_of(&out).contains("no expected transcript"),
        "{out:?}"
    );
    // Blessed, then compared: it passes.
    let out = rein(&args(&[&expect[..], &["--bless"]].concat()));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout_of(&out).ends_with("replay: 0 passed, 0 failed (1 blessed)\n"));
    let out = rein(&args(&expect));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout_of(&out), "replay: 1 passed, 0 failed\n");
    // The policy changes under the blessed transcript: exit 1 and a readable diff.
    let toml = dir.join("policy.toml");
    std::fs::write(&toml, DENY_DELETES_TOML).unwrap();
    let out = rein(&args(
        &[&expect[..], &["--policy", toml.to_str().unwrap()]].concat(),
    ));
    let stdout = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("the transcript differs from the expected one"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("--- {} (expected)", expected.display())),
        "{stdout}"
    );
    assert!(stdout.contains("+++ replayed"), "{stdout}");
    assert!(
        stdout.contains("+          \"handler\": \"no-deletes\","),
        "{stdout}"
    );
    assert!(
        stdout.contains("-                \"text\": \"deleted a.txt\""),
        "{stdout}"
    );
    assert!(stdout.ends_with("replay: 0 passed, 1 failed\n"), "{stdout}");
    // --bless without --expect writes NAME.expected.json beside the scenario.
    let out = rein(&args(&["--bless"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(dir.join("s.expected.json")).unwrap(),
        std::fs::read_to_string(&expected).unwrap()
    );
}

#[test]
fn a_suite_with_a_failure_and_an_invalid_scenario_reports_both() {
    let dir = temp_dir("mixed");
    let ok = delete_scenario(serde_json::json!({}));
    std::fs::write(dir.join("a-ok.json"), ok.to_string()).unwrap();
    std::fs::write(dir.join("b-differs.json"), ok.to_string()).unwrap();
    std::fs::write(dir.join("c-invalid.json"), r#"{"steps": [], "nme": "x"}"#).unwrap();
    let out = rein(&["replay".as_ref(), dir.as_os_str(), "--bless".as_ref()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    std::fs::write(dir.join("b-differs.expected.json"), "{\"steps\": []}\n").unwrap();
    let junit = dir.join("out.xml");
    let out = rein(&[
        "replay".as_ref(),
        dir.as_os_str(),
        "--junit".as_ref(),
        junit.as_os_str(),
    ]);
    let stdout = stdout_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("c-invalid.json: $: unknown field `nme`"),
        "{stdout}"
    );
    assert!(
        stdout.contains("b-differs.json: the transcript differs"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("replay: 1 passed, 2 failed"));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("tests=\"3\" failures=\"1\" errors=\"1\""),
        "{xml}"
    );
    assert!(xml.contains("<testcase name=\"a-ok\""), "{xml}");
    assert!(
        xml.contains(
            "<failure message=\"the transcript differs from the expected one\" type=\"differs\">"
        ),
        "{xml}"
    );
    assert!(
        xml.contains("<error message=\"invalid scenario\" type=\"invalid\">"),
        "{xml}"
    );
    // A diff's quotes and angle brackets are escaped in the XML.
    assert!(xml.contains("&quot;steps&quot;"), "{xml}");
    // --expect names one file's expected transcript, not a directory's.
    let out = rein(&[
        "replay".as_ref(),
        dir.as_os_str(),
        "--expect".as_ref(),
        junit.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// The same from a test: what a user's `cargo test` does with `rein-cli` as a dev-dependency.
#[test]
fn the_library_runs_a_suite_for_cargo_test() {
    use rein_cli::replay::{Outcome, Replay};
    Replay::new()
        .suite(scenarios_dir())
        .unwrap()
        .assert_passed();

    let dir = temp_dir("library");
    let scenario = dir.join("s.json");
    std::fs::write(
        &scenario,
        delete_scenario(serde_json::json!({})).to_string(),
    )
    .unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(&policy, DENY_DELETES_TOML).unwrap();
    let expected = dir.join("s.expected.json");
    assert_eq!(
        Replay::new()
            .bless(true)
            .check(&scenario, &expected)
            .outcome(),
        &Outcome::Blessed
    );
    let suite = Replay::new().policy(&policy).suite(&dir).unwrap();
    assert!(!suite.is_success());
    let case = &suite.cases()[0];
    assert_eq!(case.name(), "s");
    assert!(matches!(case.outcome(), Outcome::Differs { diff } if diff.contains("no-deletes")));
    let panic = std::panic::catch_unwind(|| suite.assert_passed()).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.ends_with("replay: 0 passed, 1 failed"), "{message}");
}

/// SPEC §13 in `rein replay`: a scenario declares an output schema; the transcript shows the
/// typed answer and each attempt (the answer as the model gave it, and the check's verdict).
#[test]
fn a_typed_scenario_shows_its_output_and_each_attempt() {
    let out = rein(&[
        "replay",
        scenarios_dir().join("typed-answer.json").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = &t["steps"][0];
    assert_eq!(
        step["output"],
        serde_json::json!({"customer": "Ada", "total_cents": 1200})
    );
    let attempts = step["output_attempts"].as_array().unwrap();
    let actions: Vec<&str> = attempts
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["guide", "guide", "proceed"], "{attempts:?}");
    assert_eq!(attempts[0]["answer"], "Ada owes 12 euros.");
    assert!(
        attempts[0]["text"]
            .as_str()
            .unwrap()
            .contains("not a JSON value")
    );
    assert!(
        attempts[1]["text"]
            .as_str()
            .unwrap()
            .contains("/total_cents"),
        "{attempts:?}"
    );
    assert_eq!(
        attempts[2]["answer"],
        r#"{"customer": "Ada", "total_cents": 1200}"#
    );
}

/// A typed scenario whose model never complies: the step ends with the `output` error after
/// exactly the budget, every attempt shown, no output.
#[test]
fn a_typed_scenario_that_never_complies_shows_the_exhaustion() {
    let scenario = serde_json::json!({
        "output": {"name": "n", "schema": {"type": "integer"}, "max_retries": 1},
        "model": [{"content": [{"text": "one"}]}, {"content": [{"text": "two"}]}],
        "steps": [{"prompt": "a number"}]
    });
    let path = write_temp("typed-exhausted.json", &scenario.to_string());
    let out = rein(&["replay", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = &t["steps"][0];
    assert_eq!(step["error"]["kind"], "output", "{step}");
    assert_eq!(step["output"], Value::Null);
    let attempts = step["output_attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[1]["action"], "deny");
    assert_eq!(attempts[1]["answer"], "two");
}
