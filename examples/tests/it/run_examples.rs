//! Runs the examples (built by `cargo test -p rein-examples`) and checks what they
//! print, so they keep showing what their docs say.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `target/<profile>/examples/<name>`, next to this test's `deps` directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    dir.join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

fn run(name: &str) -> String {
    let path = example(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo test -p rein-examples` (it builds the examples)",
        path.display()
    );
    // The examples use a real provider when one is configured: these tests check the scripted
    // runs, and never reach the internet, whatever the developer's shell holds.
    let mut cmd = Command::new(&path);
    for var in rein_examples::PROVIDER_ENV_VARS {
        cmd.env_remove(var);
    }
    // Nor do they export telemetry (the observability example exports when this is set).
    cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn check(name: &str, expected: &[&str]) {
    let out = run(name);
    for e in expected {
        assert!(out.contains(e), "{name}: missing {e:?} in:\n{out}");
    }
}

#[test]
fn authz_roles() {
    check(
        "authz_roles",
        &[
            "tool e1  [error] DENIED: role 'analyst' may not call send_email",
            "tool e1  [ok] sent to boss@example.com",
        ],
    );
}

#[test]
fn approve_anywhere() {
    check(
        "approve_anywhere",
        &[
            "asked  payment-gate",
            "stored Pay $100 to ACME",
            "asked  egress  Send confidential text to the provider?",
            "reply  The annex limits liability.",
            "parked  also pay $9 to ACME\ndelivered  also pay $9 to ACME",
            "asked  rein:retry-limit",
            "reply  Revenue grew about 12%.",
        ],
    );
}

#[test]
fn research_team() {
    check(
        "research_team",
        &[
            "[searcher] says: 3 field studies",
            "[analyst] waits for: Publish the summary?",
            "asked: analyst/publish-approval (v1:agent:a1:v1:before_tool_call:p1:",
            "reply: Done: the summary is published.",
            "decision: Confirm by publish-approval in analyst",
            "usage of analyst: 16 tokens",
        ],
    );
}

#[test]
fn triage_refunds() {
    check(
        "triage_refunds",
        &[
            "handoff: triage -> refunds",
            "in control: refunds; waiting for: \"Refund this order?\"",
            "restored, in control: refunds",
            "reply: Order A-7 is refunded.",
        ],
    );
}

#[test]
fn stream_guard() {
    let out = run("stream_guard");
    for e in [
        "[shown] Your key is [KEY] — keep it safe.",
        "[stored] Your key is [KEY] — keep it safe.",
        "[withdrawn] DENIED: launch codes are not shown (by no-launch-codes)",
        "[stored] DENIED: launch codes are not shown",
    ] {
        assert!(out.contains(e), "missing {e:?} in:\n{out}");
    }
    assert!(!out.contains("sk-"), "{out}");
    assert!(!out.contains("LAUNCH"), "{out}");
}

#[test]
fn polite_guard() {
    check(
        "polite_guard",
        &[
            "[shown, then retracted] That's a dumb question.",
            "[final] Good question!",
            "model calls: 2",
        ],
    );
}

#[test]
fn parallel_handlers() {
    let out = run("parallel_handlers");
    // Key order follows serde_json's `preserve_order`, which cedar-policy turns on in an
    // all-features build.
    assert!(
        out.contains(r#"tool t1 [ok] wrote {"dry_run":true,"path":"/tmp/notes.txt"}"#)
            || out.contains(r#"tool t1 [ok] wrote {"path":"/tmp/notes.txt","dry_run":true}"#),
        "{out}"
    );
    check(
        "parallel_handlers",
        &[
            "tool t2 [error] DENIED: /etc/hosts is off limits",
            "decision: policy-service Deny Applied on t2",
            "decision: llm-judge None NotRun on t2",
            "decision: llm-judge Transform Applied on t1",
            "both calls checked in under a second: true",
        ],
    );
}

#[test]
fn blocked_tools() {
    check(
        "blocked_tools",
        &[
            "tool t1 [error] DENIED: the shell tool is disabled on this deployment",
            "tool t2 [ok] use `df -h`",
        ],
    );
}

#[test]
fn prod_db_guard() {
    check(
        "prod_db_guard",
        &[
            "run_sql on \"staging-eu\" [ok]",
            "run_sql on \"prod-eu\" [error] DENIED: prod-eu is a production database",
        ],
    );
}

#[test]
fn email_validator() {
    check(
        "email_validator",
        &[
            "result t1: GUIDANCE: [email-validator] Every email needs",
            "result t2: queued",
        ],
    );
}

#[test]
fn delete_approval_without_a_terminal_uses_the_preemptive_answer() {
    check(
        "delete_approval",
        &[
            "stdin is not a terminal",
            "tool result: [ok] deleted /tmp/report-draft.txt",
        ],
    );
}

#[test]
fn pii_redactor() {
    let out = run("pii_redactor");
    assert!(out.contains("received body: \"New hire Ann Lee, SSN [REDACTED], starts Monday.\""));
    assert!(!out.contains("123-45-6789"), "{out}");
}

#[test]
fn rate_limit_then_tone() {
    check(
        "rate_limit_then_tone",
        &[
            "invocation 3: DENIED: rate limit of 2 model calls reached",
            "tone handler called 2 time(s) so far\n\nmodel calls made: 2",
        ],
    );
}

#[test]
fn fail_open_logger() {
    check(
        "fail_open_logger",
        &["tool result: 14°C, light rain", "(on_error: Some(Proceed))"],
    );
}

#[test]
fn fail_closed_auth() {
    let out = run("fail_closed_auth");
    assert!(out.contains(
        "tool result: [error] DENIED: Handler threw: policy service timed out after 50 ms"
    ));
    assert!(!out.contains("transfer_funds ran"), "{out}");
}

#[test]
fn tool_macro() {
    check(
        "tool_macro",
        &[
            "tool get_weather: Gets the current weather in a city.",
            "\"description\": \"the city name, e.g. \\\"Paris\\\"\"",
            "get_weather({\"city\":\"Atlantis\"}) -> Error: no weather station in Atlantis",
            "Error: invalid input for tool 'get_weather': unknown field `town`, expected `city` or `unit`",
            "stats({\"values\":[1.0,2.0,4.5]}) -> Success: [Json(Object {\"count\": Number(3), \"mean\": Number(2.5)})]",
        ],
    );
}

#[test]
fn mcp_tools() {
    // With the MCP reference server installed (`.ci/peers-mcp.sh`), the example talks to it;
    // without, it says what to run and exits 0.
    if std::env::var_os("REIN_MCP_EVERYTHING").is_some() {
        check(
            "mcp_tools",
            &[
                "connected to mcp-servers/everything",
                "everything__echo({\"message\":\"hello from Rein\"}) -> Success: [Text(\"Echo: hello from Rein\")]",
                "The sum of 2 and 3 is 5.",
            ],
        );
    } else {
        check("mcp_tools", &["No MCP server given."]);
    }
}

#[test]
fn mcp_elicitation_answered_in_another_process() {
    // Both steps, each in its own process, each with its own server process.
    if std::env::var_os("REIN_MCP_EVERYTHING").is_some() {
        check(
            "mcp_elicitation",
            &[
                "[ask] stop reason: Interrupt",
                "[ask] mcp_elicitation asks: Please provide inputs for the following fields: (fields: [",
                "[answer] Please provide inputs for the following fields: -> {\"name\":\"Ada Lovelace\",\"check\":true}",
                "[answer] the server got: - Name: Ada Lovelace",
                "[answer] the server got: - Agreed to terms: true",
                "[answer] reply: You are signed up.",
            ],
        );
    } else {
        check("mcp_elicitation", &["No MCP server given."]);
    }
}

#[test]
fn mcp_serve_denies_a_tool_to_an_mcp_client() {
    // The example is its own server (a child process over stdio) and client.
    check(
        "mcp_serve",
        &[
            "tool  add          Adds two numbers.",
            "tool  delete_file  Deletes a file.",
            "call  add          [ok] 5",
            "call  delete_file  [error] DENIED: deleting files is not allowed over MCP",
        ],
    );
}

#[test]
fn context_summary_keeps_the_budget_and_the_store() {
    check(
        "context_summary",
        &[
            "summary call seen by BeforeModelCall",
            "turn 5: summarized 12 messages",
            "first message starts: Text(\"File record 0.\")",
            "summary of 12 messages: The user is filing records",
            "messages sent next: 20, stored in the session: 32",
        ],
    );
}

#[test]
fn run_budget_lasts_the_run_across_a_resume_by_a_new_agent() {
    check(
        "run_budget",
        &[
            "paused: Interrupt, searches so far: 1",
            "tool s1  3 hits for \"draft\"",
            "tool d1  deleted",
            "tool s2  3 hits for \"backup\"",
            "tool s3  DENIED: search budget (2) spent",
            "run state after the run: {}",
        ],
    );
}

#[test]
fn approve_later_in_another_process() {
    // Both steps, each in its own process (the example runs itself twice).
    check(
        "approve_later",
        &[
            "[ask] stop reason: Interrupt",
            "[ask] waiting for a human: Delete report-draft.txt? (v1:before_tool_call:t1:",
            "[approve] Delete report-draft.txt? -> yes",
            "[approve] tool result: deleted report-draft.txt",
            "[approve] reply: The draft is gone.",
        ],
    );
}

#[test]
fn approve_later_rejected_from_the_command_line() {
    let dir = std::env::temp_dir().join(format!("rein-approve-later-test-{}", std::process::id()));
    let step = |args: &[&str]| {
        let out = Command::new(example("approve_later"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let d = dir.to_str().unwrap();
    assert!(step(&["ask", d]).contains("waiting for a human"));
    let out = step(&["approve", d, "no"]);
    assert!(out.contains("tool result: CONFIRMATION_FAILED"), "{out}");
    assert!(out.contains("reply: Understood, I left it."), "{out}");
    // Nothing is waiting any more.
    assert!(step(&["approve", d, "yes"]).contains("nothing is waiting"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn many_conversations() {
    check(
        "many_conversations",
        &[
            "embedded scripted demo model",
            "alice: \"Where is my order A-7?\" -> \"Order A-7 ships tomorrow.\" (restored: false, messages now: 4)",
            "bob: \"Hi!\" -> \"Hello Bob, how can I help?\" (restored: false, messages now: 2)",
            "alice: \"Thanks!\" -> \"You're welcome, Alice.\" (restored: true, messages now: 6)",
            "the built agent holds no conversation: 0 messages",
        ],
    );
}

#[test]
fn quickstart_denies_and_asks_for_an_approval() {
    check(
        "quickstart",
        &[
            "embedded scripted demo model",
            "[decision] no-deletes Deny on before_tool_call",
            "[result:error] DENIED: deleting files is disabled here",
            "[approval] Send the report to team@example.com? -> yes",
            "stop reason: Interrupt",
            "[result:ok] report sent to team@example.com",
            "stop reason: EndTurn",
        ],
    );
}

#[test]
fn observability() {
    check(
        "observability",
        &[
            "nothing is exported",
            "decision: no-system-files Deny Applied on before_tool_call",
            "decision: tone Guide Applied on after_model_call",
            "decision: approve-deletes Confirm Applied on before_tool_call asked",
            "decision: approve-deletes Confirm Applied on before_tool_call approved",
            "reply: I deleted the draft; the report service is down, sorry.",
        ],
    );
}

#[test]
fn pii_guard() {
    check(
        "pii_guard",
        &[
            "stored prompt:  How do I reach Ann? My own number is [PHONE].",
            "tool result t1: Ann Lee, [EMAIL], [PHONE]",
            "tool result t2: DENIED: personal data in tool input: credit_card",
            "shown:          Ann can be reached at [EMAIL] or [PHONE].",
            "detector:       IBAN [IBAN], ssn [SSN]",
        ],
    );
}

#[test]
fn cedar_authz() {
    let out = run("cedar_authz");
    assert!(
        out.contains("bad policy: <policies>:2:18: unexpected token `action`"),
        "{out}"
    );
    let ann = out.split("== root").next().unwrap();
    assert!(
        ann.contains("tool q1  [error] DENIED: cedar: 'query' denied by policy no-prod"),
        "{out}"
    );
    assert!(
        ann.contains("tool d1  [error] DENIED: cedar: no policy permits 'delete_file'"),
        "{out}"
    );
    assert!(out.contains("tool d1  [ok] delete_file ran with"), "{out}");
}

#[test]
fn human_approval() {
    check(
        "human_approval",
        &[
            "asked (approval):\nAllow delete_file?\n  path: a.txt",
            "answered always -> Deleted a.txt.",
            "trusted: [\"delete_file\"]",
            "next call, not asked (0 interrupts) -> Deleted b.txt.",
            "tool t1 -> CONFIRMATION_FAILED: Allow delete_file?\n  path: /etc/passwd",
        ],
    );
}

#[test]
fn llm_judge() {
    check(
        "llm_judge",
        &[
            "tool s1 -> search ran with",
            "tool d1 -> GUIDANCE: [judge] list the files before deleting a folder",
            "decision: judge Proceed verdict=\"proceed\" reason=\"a search is harmless\" tokens=12/4",
            "decision: judge Guide verdict=\"guide\" reason=\"list the files before deleting a folder\" tokens=12/4",
            "asked: judge: this mails every employee",
            "tool e1 -> CONFIRMATION_FAILED: judge: this mails every employee",
            "(resumed: the judge was not asked again)\njudge calls: 1",
            "decision: judge Guide verdict=\"guide\" reason=null tokens=null/null (unjudged: budget spent)\njudge calls: 1",
        ],
    );
}

#[test]
fn agui_server_streams_a_run_and_takes_the_approval() {
    check(
        "agui_server",
        &[
            "  RUN_STARTED",
            "  TOOL_CALL_START \"delete_file\"",
            "  CUSTOM \"rein.decision\" \"delete-approval\" asked",
            "  RUN_FINISHED \"interrupt\"",
            "waiting for approval: \"Delete report.txt?\"",
            "  CUSTOM \"rein.decision\" \"delete-approval\" approved by token holder (as \"alice\")",
            "  TOOL_CALL_RESULT \"deleted report.txt\"",
            "  TEXT_MESSAGE_CONTENT \"report.txt is gone.\"",
            "  RUN_FINISHED \"success\"",
        ],
    );
}

#[test]
fn ops_approvals_refuses_the_requester_and_records_the_edit() {
    check(
        "ops_approvals",
        &[
            "bob asked: \"Refund 250 requested by bob?\"",
            "inbox: \"order-7\" \"refund\" {\"order\":7,\"amount\":250} requested by \"bob\" -> \"./?thread=order-7\"",
            "bob approves his own: 403 \"FOUR_EYES\"",
            "tool: \"refunded 90 on order 7 for bob, approved by alice\"",
            "record: Asked by - asked {\"order\":7,\"amount\":250} edit null note -",
            "record: Approved by alice asked {\"order\":7,\"amount\":250} edit {\"order\":7,\"amount\":90} note partial refund",
        ],
    );
}

/// The shipped chat policy, tested as a user's `cargo test` would: its scenarios under
/// `examples/policies/chat-scenarios/` name it (`policy_file`) and are compared with their blessed
/// transcripts; `--policy` (here `.policy(..)`) gives the file explicitly.
#[test]
fn chat_policy_passes_its_scenarios_as_shipped() {
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let suite = rein_cli::replay::Replay::new()
        .policy(policies.join("chat.toml"))
        .suite(policies.join("chat-scenarios"))
        .unwrap();
    suite.assert_passed();
    assert_eq!(suite.summary(), "replay: 2 passed, 0 failed");
}

#[test]
fn approved_once_counts_the_approved_call_once() {
    check(
        "approved_once",
        &[
            "log    t1 delete_file {\"path\":\"draft.txt\"}\nasked  Delete draft.txt?\nlog    t1 re-checked, answered \"yes\"\nran    delete_file",
            "ran    search {\"q\":\"report\"}",
            "audit  rate-limit Deny rate limit: 2 tool calls per run",
        ],
    );
    assert!(!run("approved_once").contains("ran    search {\"q\":\"more\"}"));
}

#[test]
fn invoice_extractor_sends_a_bad_answer_back_and_returns_the_typed_one() {
    check(
        "invoice_extractor",
        &[
            "decision  rein:output Guide  at /total_cents: \"570.50\" is not of type \"integer\"",
            "decision  rein:output Proceed",
            "customer  C-042",
            "line      Travel 12050",
            "total     57050",
        ],
    );
}

/// A restate-server on free loopback ports, in its own directory; killed when dropped.
struct RestateServer {
    child: std::process::Child,
    dir: PathBuf,
    ingress: u16,
    admin: u16,
}

impl RestateServer {
    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn start(bin: &std::ffi::OsStr) -> Self {
        let (ingress, admin, node) = (Self::free_port(), Self::free_port(), Self::free_port());
        let dir = std::env::temp_dir().join(format!("rein-example-restate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let child = Command::new(bin)
            .arg("--no-logo")
            .env("RESTATE_BASE_DIR", dir.join("data"))
            .env("TMPDIR", dir.join("tmp"))
            .env("RESTATE_LISTEN_MODE", "tcp")
            .env(
                "RESTATE_INGRESS__BIND_ADDRESS",
                format!("127.0.0.1:{ingress}"),
            )
            .env("RESTATE_ADMIN__BIND_ADDRESS", format!("127.0.0.1:{admin}"))
            .env("RESTATE_BIND_ADDRESS", format!("127.0.0.1:{node}"))
            .env(
                "RESTATE_ADVERTISED_ADDRESS",
                format!("http://127.0.0.1:{node}"),
            )
            .env("RESTATE_LOG_FILTER", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("restate-server starts");
        let server = Self {
            child,
            dir,
            ingress,
            admin,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        while !(healthy(admin, "/health") && healthy(ingress, "/restate/health")) {
            assert!(
                std::time::Instant::now() < deadline,
                "restate-server did not answer in 90 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        server
    }
}

impl Drop for RestateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `GET path` on the loopback port answers 200.
fn healthy(port: u16, path: &str) -> bool {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

#[test]
fn durable_worker_pauses_in_restate_and_is_traced() {
    let Some(bin) = std::env::var_os("REIN_RESTATE_SERVER") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "REIN_RESTATE_SERVER is unset in CI: .ci/peers-restate.sh must install Restate"
        );
        println!("SKIPPED: REIN_RESTATE_SERVER is not set (bash .ci/peers-restate.sh)");
        return;
    };
    let server = RestateServer::start(&bin);
    let path = example("durable_worker");
    assert!(path.exists(), "{} is not built", path.display());
    let out = Command::new(&path)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("RUST_LOG")
        .env(
            "RESTATE_INGRESS_URL",
            format!("http://127.0.0.1:{}", server.ingress),
        )
        .env(
            "RESTATE_ADMIN_URL",
            format!("http://127.0.0.1:{}", server.admin),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "durable_worker failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    for expected in [
        "registered: dp_",
        "run stopped: Interrupt",
        "asked: Delete old.txt?",
        "approved; reply: Done: old.txt is gone.",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // The log: the run's spans as they close, and the metric events OTLP would export.
    for expected in [
        "invoke_agent",
        "execute_tool",
        "monotonic_counter.rein.tool.calls=1",
        "histogram.gen_ai.client.operation.duration",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in the log:\n{stderr}"
        );
    }
}

#[test]
fn mcp_elicitation_answered_in_the_web_console() {
    // The answer is what the console's form sends (its rendering is tested in a real browser by
    // rein-agui's `an_elicitation_is_answered_through_its_form_in_a_real_browser`).
    if std::env::var_os("REIN_MCP_EVERYTHING").is_some() {
        check(
            "mcp_elicitation_console",
            &[
                "run 1 finished: \"interrupt\"",
                "the server asks: Please provide inputs for the following fields:",
                "  button: accept\n    field name* (string)\n    field check (boolean)\n",
                "  button: decline\n  button: cancel\n",
                "integer 500: 422 \"INVALID_RESUME_PAYLOAD\" (",
                "(at `/content/integer`))",
                "the server got: - Name: Ada Lovelace",
                "the server got: - Favorite Integer: 7",
                "reply: You are signed up.",
                "run 3 finished: \"success\"",
            ],
        );
    } else {
        check("mcp_elicitation_console", &["No MCP server given."]);
    }
}
