//! Drives the real `rein chat` binary through stdin/stdout (a pipe): approvals, rejections,
//! policies and the provider extension point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn chat(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rein chat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn approving_a_delete_runs_the_tool() {
    let out = chat(&[], "delete the file\ny\n");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("scripted demo model"), "{text}");
    assert!(text.contains("Approve delete example.txt? [y/N]"), "{text}");
    assert!(
        text.contains("[confirm] delete-approval @ before_tool_call"),
        "{text}"
    );
    assert!(
        text.contains("← deleted example.txt (demo: nothing was removed)"),
        "{text}"
    );
    assert!(text.contains("Done. deleted example.txt"), "{text}");
    // Not a terminal: no spinner, no colour codes.
    assert!(!text.contains("thinking"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
}

#[test]
fn rejecting_a_delete_does_not_run_it() {
    let out = chat(&[], "delete notes.txt\nn\n");
    let text = stdout(&out);
    assert!(text.contains("Approve delete notes.txt? [y/N]"), "{text}");
    assert!(
        text.contains("CONFIRMATION_FAILED: delete notes.txt"),
        "{text}"
    );
    assert!(!text.contains("← deleted"), "{text}");
}

#[test]
fn a_policy_file_guards_the_chat_agent() {
    let dir = std::env::temp_dir().join(format!("rein-chat-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello from the file").unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "[[policy]]\nname = \"no-time\"\nkind = \"deny_tools\"\ntools = [\"current_time\"]\nreason = \"no clocks\"\n",
    )
    .unwrap();
    let out = chat(
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--root",
            dir.to_str().unwrap(),
        ],
        "what time is it?\nread hello.txt\nlist files\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[deny] no-time @ before_tool_call: no clocks"),
        "{text}"
    );
    assert!(
        text.contains("the tool failed (DENIED: no clocks)"),
        "{text}"
    );
    assert!(text.contains("Done. hello from the file"), "{text}");
    assert!(text.contains("hello.txt"), "{text}");
    // Files outside the root are refused.
    let out = chat(
        &["--root", dir.to_str().unwrap()],
        "read ../../etc/hostname\n",
    );
    assert!(
        stdout(&out).contains("outside the root directory"),
        "{}",
        stdout(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_policy_and_unbuilt_provider_exit_2() {
    let dir = std::env::temp_dir().join(format!("rein-chat-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("p.json");
    std::fs::write(
        &policy,
        r#"[{"name": "x", "kind": "deny_prompt_match", "pattern": "("}]"#,
    )
    .unwrap();
    let out = chat(&["--policy", policy.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("policy[0].pattern: invalid regex"));
    let out = chat(&["--model", "nope:x"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown provider `nope`"));
    let out = chat(&["--model", "gpt"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use `demo` or PROVIDER:MODEL"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_example_policy_loads_and_guards() {
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/chat.toml"
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = chat(&["--policy", policy, "--root", root], "read .env\n");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[deny] no-secrets @ before_tool_call"),
        "{text}"
    );
    assert!(
        text.contains("[guide (shadow)] tone @ before_model_call"),
        "{text}"
    );
}

/// On a terminal (a pty from util-linux `script`, when the machine has it): the spinner runs
/// while the model is called, output is coloured, and the approval is answered at the prompt.
#[test]
fn on_a_terminal_spinner_colours_and_approval() {
    let has_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_script {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    }
    let cmd = format!("{} chat", env!("CARGO_BIN_EXE_rein"));
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        // CI may run without TERM, which turns colours off.
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"delete a.txt\ny\n\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(text.contains("thinking"), "{text}");
    assert!(text.contains('\u{1b}'), "{text}");
    assert!(text.contains("delete a.txt? [y/N]"), "{text}");
    assert!(
        text.contains("deleted a.txt (demo: nothing was removed)"),
        "{text}"
    );
}

#[cfg(not(feature = "openai"))]
#[test]
fn a_provider_that_is_not_built_is_reported() {
    let out = chat(&["--model", "openai:gpt-4o"], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("provider support not built"), "{err}");
    assert!(err.contains("--features openai"), "{err}");
}

/// With the provider built in, `--model openai:MODEL` builds it from the environment (no call
/// is made: there is no prompt).
#[cfg(feature = "openai")]
#[test]
fn an_openai_model_is_built_from_the_environment() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["chat", "--model", "openai:gpt-4o-mini"])
        .env("OPENAI_API_KEY", "test-key")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("model gpt-4o-mini"), "{text}");
    assert!(!text.contains("test-key"), "{text}");
}

/// A provider whose configuration is incomplete fails at start with its own message (exit 2),
/// before any prompt is read: here Bedrock without a region.
#[cfg(feature = "bedrock")]
#[test]
fn bedrock_without_a_region_exits_2_naming_the_provider() {
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["chat", "--model", "bedrock:amazon.nova-lite-v1:0"])
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env("AWS_BEARER_TOKEN_BEDROCK", "test-token-not-shown")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Bedrock provider") && err.contains("region"),
        "{err}"
    );
    assert!(!err.contains("test-token-not-shown"), "{err}");
}
