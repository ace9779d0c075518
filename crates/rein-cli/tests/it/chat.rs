//! Drives the real `rein chat` binary through stdin/stdout (a pipe, or a pty from util-linux
//! `script`): approvals, rejections, policies, Ctrl-C and the provider extension point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    // The audit shows the question, then what the human decided.
    assert!(
        text.contains("[confirm asked] delete-approval @ before_tool_call"),
        "{text}"
    );
    assert!(
        text.contains("[confirm approved] delete-approval @ before_tool_call"),
        "{text}"
    );
    assert!(text.contains("(answer y, on resume)"), "{text}");
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
        text.contains("[confirm rejected] delete-approval"),
        "{text}"
    );
    assert!(
        text.contains("CONFIRMATION_FAILED: delete notes.txt"),
        "{text}"
    );
    assert!(!text.contains("← deleted"), "{text}");
}

/// Runs `rein chat` with the policy file `file` (holding `policy`) in a fresh root directory
/// named after `test`; returns its output and the directory.
fn chat_with_policy(test: &str, file: &str, policy: &str, stdin: &str) -> (Output, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rein-chat-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello from the file").unwrap();
    let path = dir.join(file);
    std::fs::write(&path, policy).unwrap();
    let args = [
        "--policy",
        path.to_str().unwrap(),
        "--root",
        dir.to_str().unwrap(),
    ];
    (chat(&args, stdin), dir)
}

#[test]
fn a_policy_file_guards_the_chat_agent() {
    let (out, dir) = chat_with_policy(
        "test",
        "policy.toml",
        "[[policy]]\nname = \"no-time\"\nkind = \"deny_tools\"\ntools = [\"current_time\"]\nreason = \"no clocks\"\n",
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
fn chat_asks_about_inputs_and_requests_and_takes_edits() {
    let policy = serde_json::json!([
        {"name": "secret-gate", "kind": "confirm_input", "pattern": "secret",
         "prompt": "Share: {input}"},
        {"name": "egress", "kind": "confirm_request", "once": true, "prompt": "Send it"},
    ]);
    // The secret input is rejected; the next one is approved with an edit, then its request.
    let (out, dir) = chat_with_policy(
        "pauses",
        "policy.json",
        &policy.to_string(),
        "tell the secret\nn\nthe secret plan\ne the public plan\ny\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Approve Share: tell the secret (input)? [y/N] n"),
        "what is asked: {text}"
    );
    assert!(
        text.contains("CONFIRMATION_FAILED: Share: tell the secret"),
        "{text}"
    );
    assert!(
        text.contains("Approve Send it (request)? [y/N] y"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_ready_made_kinds_load_in_chat() {
    let dir = std::env::temp_dir().join(format!("rein-chat-vended-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "mail ann@example.com").unwrap();
    std::fs::write(
        dir.join("authz.cedar"),
        "permit(principal, action, resource);\n@id(\"no-clocks\") forbid(principal, action == Action::\"current_time\", resource);\n",
    )
    .unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "[[policy]]\nname = \"pii\"\nkind = \"pii\"\ntargets = [\"tool_result\"]\n\n\
         [[policy]]\nname = \"authz\"\nkind = \"cedar\"\npolicies_file = \"authz.cedar\"\n\
         principal_note = 1\n",
    )
    .unwrap();
    // An unknown field is refused with its place.
    let out = chat(&["--policy", policy.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("policy[1].principal_note: unknown field"),
        "{err}"
    );
    std::fs::write(
        &policy,
        "[[policy]]\nname = \"pii\"\nkind = \"pii\"\ntargets = [\"tool_result\"]\n\n\
         [[policy]]\nname = \"authz\"\nkind = \"cedar\"\npolicies_file = \"authz.cedar\"\n\n\
         [[policy]]\nname = \"approval\"\nkind = \"human_approval\"\ntools = [\"delete_file\"]\n",
    )
    .unwrap();
    let out = chat(
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--root",
            dir.to_str().unwrap(),
        ],
        "what time is it?\nread hello.txt\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // The chat has no principal: Cedar fails closed.
    assert!(
        text.contains("cedar: no principal for this invocation"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_llm_judge_policy_judges_the_chat_agent() {
    // Scripted answers: the judge guides the clock call away; the audit shows its reason.
    let (out, dir) = chat_with_policy(
        "judge",
        "policy.toml",
        "[[policy]]\nname = \"judge\"\nkind = \"llm_judge\"\n\
         script = ['{\"verdict\": \"guide\", \"reason\": \"no clocks today\", \"nonce\": \"{nonce}\"}']\n",
        "what time is it?\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[guide] judge @ before_tool_call: no clocks today"),
        "{text}"
    );
    assert!(text.contains("GUIDANCE: [judge] no clocks today"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    // Without a script the judge asks the chat's own model: the demo model answers with a tool
    // call, not a verdict, so `on_error` decides — here, deny.
    let (out, dir) = chat_with_policy(
        "judge-demo",
        "policy.toml",
        "[[policy]]\nname = \"judge\"\nkind = \"llm_judge\"\non_error = \"deny\"\n",
        "what time is it?\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[error (handler error)] judge @ before_tool_call: unparsable judge verdict"),
        "{text}"
    );
    assert!(
        text.contains("DENIED: Handler threw: unparsable judge verdict"),
        "{text}"
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
    if !has_script() {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    }
    let mut child = in_a_pty().spawn().unwrap();
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

fn has_script() -> bool {
    Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `rein chat` in a pty: `script` copies its stdin to the terminal and the terminal to its
/// stdout, and exits with the chat's status (128 + N when signal N killed it).
fn in_a_pty() -> Command {
    // `exec`: the chat itself, not a shell, is the terminal's foreground process.
    let cmd = format!("exec {} chat", env!("CARGO_BIN_EXE_rein"));
    let mut command = Command::new("script");
    command
        .args(["-qec", &cmd, "/dev/null"])
        // CI may run without TERM, which turns colours off.
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A running `rein chat`, driven step by step: type, press Ctrl-C, wait for output.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<Vec<u8>>>,
    pty: bool,
}

impl Session {
    /// In a pty; `None` without util-linux `script`.
    fn pty() -> Option<Self> {
        has_script().then(|| Self::start(in_a_pty(), true))
    }

    /// Through pipes.
    fn piped() -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rein"));
        command
            .arg("chat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Self::start(command, false)
    }

    fn start(mut command: Command, pty: bool) -> Self {
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&out);
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n @ 1..) = stdout.read(&mut buf) {
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let session = Self {
            child,
            stdin,
            out,
            pty,
        };
        // The banner is printed once Ctrl-C is caught.
        session.wait_for("Type a request");
        session
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    fn type_text(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Ctrl-C: in a pty the byte 0x03, which the terminal turns into SIGINT for its foreground
    /// process; through pipes SIGINT from `kill`, as a terminal would send it to a pipeline.
    fn ctrl_c(&mut self) {
        if self.pty {
            self.type_text("\x03");
        } else {
            let status = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
    }

    /// Waits (up to 30 s) until the output holds `needle` after `from` bytes; returns where it
    /// ends.
    fn wait_for_after(&self, from: usize, needle: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|t| t.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                Instant::now() < deadline,
                "no `{needle}` in the output:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_for(&self, needle: &str) -> usize {
        self.wait_for_after(0, needle)
    }

    /// Closes stdin: the end of input.
    fn end_input(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits (up to 30 s) for the chat to exit.
    fn finish(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader thread take the last bytes.
                std::thread::sleep(Duration::from_millis(100));
                return (status, self.text());
            }
            if Instant::now() > deadline {
                self.child.kill().unwrap();
                panic!("rein chat did not exit:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Session {
    /// A failed test leaves no chat behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Types `request`, presses Ctrl-C once `busy` shows, checks `cancelled` is printed, types
/// `next` and waits for `answer`; then the chat must end normally. Returns the transcript.
fn cancel_then_ask(
    mut chat: Session,
    request: &str,
    busy: &str,
    next: &str,
    answer: &str,
) -> String {
    chat.type_text(request);
    let at = chat.wait_for(busy);
    chat.ctrl_c();
    let at = chat.wait_for_after(at, "cancelled");
    chat.type_text(next);
    chat.wait_for_after(at, answer);
    // An empty line ends the chat at a terminal, the end of input in a pipe.
    chat.type_text("\n");
    chat.end_input();
    let (status, text) = chat.finish();
    assert_eq!(status.code(), Some(0), "{text}");
    text
}

/// Ctrl-C while the demo model streams its (slow) story cancels that turn only, and the next
/// request is answered.
fn ctrl_c_cancels_the_running_turn(chat: Session) {
    let text = cancel_then_ask(
        chat,
        "tell me a story\n",
        "A story, told slowly",
        "hello\n",
        "You said: \"hello\"",
    );
    assert!(!text.contains("The end."), "the story was not cut: {text}");
    assert!(!text.contains("withdrawn"), "{text}");
}

#[test]
fn ctrl_c_cancels_the_running_turn_in_a_pty() {
    match Session::pty() {
        Some(chat) => ctrl_c_cancels_the_running_turn(chat),
        None => eprintln!("skipped: util-linux `script` is not installed"),
    }
}

#[cfg(unix)]
#[test]
fn sigint_cancels_the_running_turn_with_piped_input() {
    ctrl_c_cancels_the_running_turn(Session::piped());
}

/// Ctrl-C at `Approve ..? [y/N]` rejects: the tool does not run, the turn ends `cancelled`, and
/// the next request (which uses a tool) is answered.
#[test]
fn ctrl_c_at_an_approval_cancels_the_turn() {
    let Some(chat) = Session::pty() else {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    };
    let text = cancel_then_ask(
        chat,
        "delete a.txt\n",
        "delete a.txt? [y/N]",
        "what time is it?\n",
        "Done. ",
    );
    assert!(!text.contains("deleted a.txt"), "{text}");
    assert!(text.contains(" UTC"), "{text}");
}

/// Ctrl-C at the prompt ends the chat with status 130.
#[test]
fn ctrl_c_at_the_prompt_exits_130() {
    let Some(mut chat) = Session::pty() else {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    };
    chat.ctrl_c();
    let (status, text) = chat.finish();
    assert_eq!(status.code(), Some(130), "{text}");
}

/// The same through pipes, where the status tells an exit (130) from a death by SIGINT (which
/// `script` reports as 130 too).
#[cfg(unix)]
#[test]
fn sigint_at_the_prompt_exits_130_with_piped_input() {
    let mut chat = Session::piped();
    chat.ctrl_c();
    let (status, text) = chat.finish();
    assert_eq!(status.code(), Some(130), "{status:?} {text}");
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

/// `cargo install rein-cli` must give a `rein` that talks to the common providers (a binary is
/// not a library): they are default features.
#[test]
fn the_default_build_ships_the_common_providers() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("the crate's manifest");
    let default = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("default ="))
        .expect("a default feature list");
    for provider in ["\"openai\"", "\"anthropic\"", "\"ollama\""] {
        assert!(
            default.contains(provider),
            "{provider} missing from {default}"
        );
    }
}

#[test]
fn approving_with_an_edit_runs_the_edited_call() {
    let out = chat(&[], "delete the file\ne {\"path\": \"old-draft.txt\"}\n");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Approve delete example.txt? [y/N]"), "{text}");
    assert!(
        text.contains("[confirm approved] delete-approval"),
        "{text}"
    );
    assert!(
        text.contains("← deleted old-draft.txt (demo: nothing was removed)"),
        "{text}"
    );
}

/// Runs `rein chat` with a JSON policy (and `extra` arguments) in a fresh root holding
/// `hello.txt`; returns stdout.
fn chat_json_policy(test: &str, policy: serde_json::Value, extra: &[&str], stdin: &str) -> String {
    let dir = std::env::temp_dir().join(format!("rein-chat-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), "hello from the file").unwrap();
    let path = dir.join("policy.json");
    std::fs::write(&path, policy.to_string()).unwrap();
    let mut args = vec![
        "--policy",
        path.to_str().unwrap(),
        "--root",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = chat(&args, stdin);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    text
}

#[test]
fn a_held_tool_output_is_approved_rejected_or_edited_at_the_prompt() {
    let policy = serde_json::json!([
        {"name": "review", "kind": "confirm_tool_output", "tools": ["read_file"],
         "prompt": "Show: {output}"},
    ]);
    let text = chat_json_policy(
        "tool-output",
        policy,
        &[],
        "read hello.txt\ny\nread hello.txt\nn\nread hello.txt\ne a different text\n",
    );
    let asked = "Approve Show: hello from the file (tool output)? [y/N]";
    assert_eq!(text.matches(asked).count(), 3, "{text}");
    assert!(
        text.contains("Done. hello from the file"),
        "approved: {text}"
    );
    assert!(
        text.contains("Done. the tool failed (CONFIRMATION_FAILED: Show: hello from the file)"),
        "rejected: {text}"
    );
    assert!(text.contains("Done. a different text"), "edited: {text}");
    assert_eq!(
        text.matches("[confirm approved] review @ after_tool_call")
            .count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("[confirm rejected] review @ after_tool_call"),
        "{text}"
    );
}

#[test]
fn a_held_response_is_approved_rejected_or_edited_at_the_prompt() {
    let policy = serde_json::json!([
        {"name": "check", "kind": "confirm_response", "tools": ["delete_file"],
         "prompt": "Go with: {output}"},
    ]);
    let text = chat_json_policy(
        "response",
        policy,
        &[],
        "delete a.txt\ny\ndelete b.txt\nn\ndelete c.txt\ne Deleting c.txt, as asked.\n",
    );
    for file in ["a.txt", "b.txt", "c.txt"] {
        let asked = format!("Approve Go with: I'll delete {file}. (response)? [y/N]");
        assert!(text.contains(&asked), "{asked}: {text}");
    }
    assert!(text.contains("← deleted a.txt"), "approved: {text}");
    assert!(
        text.contains("CONFIRMATION_FAILED: Go with: I'll delete b.txt."),
        "rejected: {text}"
    );
    assert!(!text.contains("← deleted b.txt"), "rejected: {text}");
    assert!(
        text.contains("← deleted c.txt"),
        "edited, its tool kept: {text}"
    );
    assert!(
        text.contains("[confirm rejected] check @ after_model_call"),
        "{text}"
    );
}

#[test]
fn a_redact_stream_policy_rewrites_the_answer_before_it_is_shown() {
    let policy = serde_json::json!([
        {"name": "no-greetings", "kind": "redact_stream", "pattern": "hel+o",
         "replacement": "[X]"},
    ]);
    let text = chat_json_policy("redact-stream", policy, &[], "read hello.txt\n");
    assert!(text.contains("Done. [X] from the file"), "{text}");
    assert!(!text.contains("Done. hello"), "{text}");
    assert!(
        text.contains("[transform] no-greetings @ model_output"),
        "{text}"
    );
}

#[test]
fn an_answer_the_agent_refuses_is_asked_again() {
    // The edit fails delete_file's schema (`path` is a string): an error, then the question
    // again; nothing ran in between.
    let out = chat(&[], "delete the file\ne {\"path\": 5}\ny\n");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let asked = "Approve delete example.txt? [y/N]";
    assert_eq!(text.matches(asked).count(), 2, "{text}");
    let error = text.find("error:").expect("the error is shown");
    assert!(
        text[error..].contains(asked),
        "asked after the error: {text}"
    );
    assert_eq!(text.matches("← deleted").count(), 1, "{text}");
    assert!(text.contains("← deleted example.txt"), "{text}");
}

#[test]
fn on_retry_limit_confirm_asks_when_guidance_fails() {
    let policy = serde_json::json!([
        {"name": "brief", "kind": "guide_output_match", "pattern": "demo model",
         "feedback": "no talking about yourself"},
    ]);
    let text = chat_json_policy(
        "escalate",
        policy.clone(),
        &["--on-retry-limit", "confirm"],
        "hello\ny\nhello again\nn\n",
    );
    assert_eq!(
        text.matches("Approve Guidance did not take after 3 retries.")
            .count(),
        2,
        "{text}"
    );
    assert!(text.contains("(response)? [y/N] y"), "{text}");
    assert!(
        text.contains("[confirm approved] rein:retry-limit @ after_model_call"),
        "{text}"
    );
    assert!(
        text.contains("CONFIRMATION_FAILED: Guidance did not take after 3 retries."),
        "{text}"
    );
    // The default withholds without asking.
    let text = chat_json_policy("no-escalate", policy, &[], "hello\n");
    assert!(!text.contains("Approve"), "{text}");
    assert!(text.contains("DENIED: retry limit (3) reached"), "{text}");
}

/// `rein chat --output-schema FILE`: the answer is checked against the schema and printed as
/// JSON (not streamed as text); a file that is not JSON or not a schema exits 2.
#[test]
fn output_schema_prints_the_checked_answer_as_json() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chat-output-schema");
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("ticket.schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"priority": {"enum": ["high", "low"]},
            "summary": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
            "required": ["priority", "summary", "count"], "additionalProperties": false}"#,
    )
    .unwrap();
    let out = chat(
        &["--output-schema", schema.to_str().unwrap()],
        "file a ticket\n",
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let json_start = text.find('{').unwrap();
    let json_end = text.rfind('}').unwrap();
    let answer: serde_json::Value = serde_json::from_str(&text[json_start..=json_end]).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"priority": "high", "summary": "demo", "count": 1})
    );
    // The audit shows the check's verdict, under the file's name.
    assert!(text.contains("rein:output"), "{text}");

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let out = chat(&["--output-schema", bad.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not JSON"));
    std::fs::write(&bad, r#"{"type": 12}"#).unwrap();
    let out = chat(&["--output-schema", bad.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("output schema"));
}
