//! `rein serve`: spawn the binary, GET the console, POST a run that needs approval, approve it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// A minimal HTTP/1.1 exchange (Connection: close): status and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out.split_once("\r\n\r\n").unwrap().1.to_owned())
}

fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `rein serve --port 0 <args>` with `token` as REIN_SERVE_TOKEN (or none); the
/// process (killed on drop), the address it printed, and its first line.
fn serve(args: &[&std::ffi::OsStr], token: Option<&str>) -> (Kill, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.args(["serve", "--port", "0"]).args(args);
    match token {
        Some(t) => cmd.env("REIN_SERVE_TOKEN", t),
        None => cmd.env_remove("REIN_SERVE_TOKEN"),
    };
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let guard = Kill(child);
    let first = lines.next().unwrap().unwrap();
    let second = lines.next().unwrap().unwrap();
    assert!(second.contains("AG-UI endpoint POST"), "{second}");
    let url = first
        .strip_prefix("rein serve: approval console at ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"));
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    (guard, addr, first)
}

#[test]
fn rein_serve_serves_the_console_and_runs_with_approvals() {
    let root = std::env::temp_dir().join(format!("rein-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let (_guard, addr, _) = serve(
        &[
            "--model".as_ref(),
            "demo".as_ref(),
            "--root".as_ref(),
            root.as_os_str(),
        ],
        None,
    );

    let (status, page) = http(&addr, "GET", "/", "");
    assert_eq!(status, 200);
    assert!(page.contains("Rein approval console"));
    let (status, script) = http(&addr, "GET", "/console.js", "");
    assert_eq!(status, 200);
    assert!(script.contains("RUN_FINISHED"));

    let run = json!({"threadId": "t-1", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "delete notes.txt"}]});
    let (status, body) = http(&addr, "POST", "/agent", &run.to_string());
    assert_eq!(status, 200);
    let evs = events(&body);
    assert_eq!(evs[0]["type"], "RUN_STARTED");
    let last = evs.last().unwrap();
    assert_eq!(last["outcome"]["type"], "interrupt", "{body}");
    let interrupt = &last["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "confirm");
    assert_eq!(interrupt["message"], "delete notes.txt");

    // The approval names the action it approves (the fingerprint the interrupt carries).
    let fingerprint = &interrupt["metadata"]["governance"]["actionFingerprint"];
    assert!(fingerprint.is_string(), "{interrupt}");
    let resume = json!({"threadId": "t-1", "runId": "r2", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved",
            "payload": {"approved": true, "approvedActionFingerprint": fingerprint}}]});
    let (status, body) = http(&addr, "POST", "/agent", &resume.to_string());
    assert_eq!(status, 200);
    let evs = events(&body);
    let result = evs
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("deleted notes.txt"),
        "{body}"
    );
    assert_eq!(evs.last().unwrap()["outcome"]["type"], "success");
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn rein_serve_refuses_a_bad_model() {
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["serve", "--port", "0", "--model", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid --model"));
}

#[test]
fn rein_serve_with_a_token_refuses_requests_without_it() {
    let (_guard, addr, first) = serve(&[], Some("t0ps3cret"));
    assert!(!first.contains("t0ps3cret"));
    let run = json!({"threadId": "t-1", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "hi"}]});
    let (status, body) = http(&addr, "POST", "/agent", &run.to_string());
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("t0ps3cret"));
}
