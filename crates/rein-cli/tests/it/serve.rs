//! `rein serve`: spawn the binary, GET the console, POST a run that needs approval, approve it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// A minimal HTTP/1.1 exchange (Connection: close) with these extra headers: status and body.
fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        extra.push_str(&format!("Host: {addr}\r\n"));
    }
    write!(
        s,
        "{method} {path} HTTP/1.1\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out.split_once("\r\n\r\n").unwrap().1.to_owned())
}

/// A JSON request with `Authorization: Bearer <token>`.
fn http(addr: &str, token: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let auth = format!("Bearer {token}");
    http_with(
        addr,
        method,
        path,
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        body,
    )
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

/// A running `rein serve` (killed on drop): its address, the token in its console URL (if it
/// printed one) and its first line.
struct Served {
    _kill: Kill,
    addr: String,
    url_token: Option<String>,
    first: String,
}

/// Starts `rein serve --port 0 <args>` with `token` as REIN_SERVE_TOKEN (or none).
fn serve(args: &[&std::ffi::OsStr], token: Option<&str>) -> Served {
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
    let kill = Kill(child);
    let first = lines.next().unwrap().unwrap();
    let second = lines.next().unwrap().unwrap();
    assert!(second.contains("AG-UI endpoint POST"), "{second}");
    let url = first
        .strip_prefix("rein serve: approval console at ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"));
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let (base, url_token) = match url.split_once("/?token=") {
        Some((base, t)) => (base, Some(t.to_owned())),
        None => (url.trim_end_matches('/'), None),
    };
    let addr = base.trim_start_matches("http://").to_owned();
    Served {
        _kill: kill,
        addr,
        url_token,
        first,
    }
}

#[test]
fn rein_serve_serves_the_console_and_runs_with_approvals() {
    let root = std::env::temp_dir().join(format!("rein-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let served = serve(
        &[
            "--model".as_ref(),
            "demo".as_ref(),
            "--root".as_ref(),
            root.as_os_str(),
        ],
        None,
    );
    let addr = served.addr.as_str();
    let token = served
        .url_token
        .clone()
        .expect("a token in the console URL");
    let http = |method: &str, path: &str, body: &str| http(addr, &token, method, path, body);

    let (status, page) = http("GET", "/", "");
    assert_eq!(status, 200);
    assert!(page.contains("Rein approval console"));
    let (status, script) = http("GET", "/console.js", "");
    assert_eq!(status, 200);
    assert!(script.contains("RUN_FINISHED"));

    let run = json!({"threadId": "t-1", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "delete notes.txt"}]});
    let (status, body) = http("POST", "/agent", &run.to_string());
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
    let (status, body) = http("POST", "/agent", &resume.to_string());
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
    let secret = "t0ps3cret-t0ps3cret";
    let served = serve(&[], Some(secret));
    // A token the user gave is not printed.
    assert!(!served.first.contains(secret), "{}", served.first);
    assert_eq!(served.url_token, None);
    let run = json!({"threadId": "t-1", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "hi"}]});
    let (status, body) = http(
        &served.addr,
        "wrong-wrong-wrong",
        "POST",
        "/agent",
        &run.to_string(),
    );
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains(secret));
    let (status, body) = http(&served.addr, secret, "POST", "/agent", &run.to_string());
    assert_eq!(status, 200, "{body}");
}

/// Issue 35, finding 1: `rein serve` with no token configured makes one up (it used to serve
/// anyone); a page elsewhere cannot start a run with a "simple" request, a rebinding page is
/// refused by its Host name, and a guessable token is refused at start.
#[test]
fn rein_serve_makes_up_a_token_and_refuses_cross_site_requests() {
    let served = serve(&[], None);
    let token = served
        .url_token
        .clone()
        .expect("no token in the console URL");
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
    let addr = served.addr.as_str();
    let run = json!({"threadId": "t-1", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "hi"}]})
    .to_string();
    // No token.
    let (status, _) = http_with(
        addr,
        "POST",
        "/agent",
        &[("Content-Type", "application/json")],
        &run,
    );
    assert_eq!(status, 401);
    // A page on another origin, text/plain (no preflight).
    let (status, body) = http_with(
        addr,
        "POST",
        "/agent",
        &[
            ("Content-Type", "text/plain"),
            ("Origin", "http://evil.example"),
        ],
        &run,
    );
    assert_eq!(status, 403, "{body}");
    // A rebound host name.
    let port = addr.rsplit(':').next().unwrap();
    let auth = format!("Bearer {token}");
    let (status, body) = http_with(
        addr,
        "GET",
        "/threads/t-1",
        &[
            ("Host", &format!("evil.example:{port}")),
            ("Authorization", &auth),
        ],
        "",
    );
    assert_eq!(status, 403, "{body}");
    let (status, body) = http(addr, &token, "POST", "/agent", &run);
    assert_eq!(status, 200, "{body}");

    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["serve", "--port", "0"])
        .env("REIN_SERVE_TOKEN", "short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("too short"));
}

/// The SHA-256 of `token`, in hex, as a `--users` file holds it.
fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Issue 38, item 9: `rein serve --users FILE` (per-user tokens), `--sessions sqlite:PATH` and
/// `--four-eyes`. Bob asks for a deletion; the server restarts on the same SQLite file; Bob's own
/// approval is refused; Alice approves while her client claims to be someone else: the approval
/// is recorded as Alice's, the claim kept beside it; a token in no entry, or the file's hash
/// sent as a token, is refused.
#[test]
fn rein_serve_knows_each_user_by_their_token_and_keeps_threads_in_sqlite() {
    let dir = std::env::temp_dir().join(format!("rein-serve-users-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (alice, bob) = ("alice-token-0123456789abcdef", "bob-token-0123456789abcdef");
    let users = dir.join("users.toml");
    std::fs::write(
        &users,
        format!(
            "[[user]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n\n[[user]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\n",
            sha256_hex(alice),
            sha256_hex(bob)
        ),
    )
    .unwrap();
    let db = format!("sqlite:{}", dir.join("threads.db").display());
    let args = [
        "--model".as_ref(),
        "demo".as_ref(),
        "--root".as_ref(),
        dir.as_os_str(),
        "--users".as_ref(),
        users.as_os_str(),
        "--sessions".as_ref(),
        db.as_ref(),
        "--four-eyes".as_ref(),
    ];
    let run = json!({"threadId": "t-users", "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "delete notes.txt"}]});
    let interrupt = {
        let served = serve(&args, None);
        // No made-up token when users are configured.
        assert_eq!(served.url_token, None, "{}", served.first);
        let (status, _) = http(
            &served.addr,
            "carol-token-0123456789",
            "POST",
            "/agent",
            &run.to_string(),
        );
        assert_eq!(status, 401);
        let (status, _) = http(
            &served.addr,
            &sha256_hex(alice),
            "POST",
            "/agent",
            &run.to_string(),
        );
        assert_eq!(status, 401, "the stored hash is no token");
        let (status, body) = http(&served.addr, bob, "POST", "/agent", &run.to_string());
        assert_eq!(status, 200, "{body}");
        let evs = events(&body);
        let last = evs.last().unwrap();
        assert_eq!(last["outcome"]["type"], "interrupt", "{body}");
        last["outcome"]["interrupts"][0].clone()
    };
    // Restarted on the same database: the thread and its pending approval are there.
    let served = serve(&args, None);
    let (status, body) = http(&served.addr, alice, "GET", "/threads/t-users", "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(interrupt["id"].as_str().unwrap()), "{body}");
    // Four-eyes: bob asked, so bob may not approve; the approval still waits for another.
    let own = json!({"threadId": "t-users", "runId": "r2", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved",
            "payload": {"approved": true,
                "approvedActionFingerprint": interrupt["metadata"]["governance"]["actionFingerprint"]}}]});
    let (status, body) = http(&served.addr, bob, "POST", "/agent", &own.to_string());
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("FOUR_EYES"), "{body}");
    let resume = json!({"threadId": "t-users", "runId": "r2", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved",
            "metadata": {"answeredBy": "mallory"},
            "payload": {"approved": true,
                "approvedActionFingerprint": interrupt["metadata"]["governance"]["actionFingerprint"]}}]});
    let (status, body) = http(&served.addr, alice, "POST", "/agent", &resume.to_string());
    assert_eq!(status, 200, "{body}");
    let evs = events(&body);
    let decision = evs
        .iter()
        .find(|e| e["name"] == "rein.decision" && e["value"]["answeredBy"].is_string())
        .unwrap_or_else(|| panic!("no answered decision: {body}"));
    assert_eq!(decision["value"]["answeredBy"], "alice", "{decision}");
    assert_eq!(decision["value"]["claimedAnsweredBy"], "mallory");
    assert_eq!(evs.last().unwrap()["outcome"]["type"], "success", "{body}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rein_serve_refuses_a_bad_users_file_and_users_with_a_token() {
    let dir = std::env::temp_dir().join(format!("rein-serve-badusers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let users = dir.join("users.toml");
    std::fs::write(
        &users,
        "[[user]]\nname = \"alice\"\ntoken_sha256 = \"not-a-hash\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["serve", "--port", "0", "--model", "demo", "--users"])
        .arg(&users)
        .env_remove("REIN_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("token_sha256 must be 64 hex digits"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "demo",
            "--token",
            "x-token-0123456789",
            "--users",
        ])
        .arg(&users)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    std::fs::remove_dir_all(&dir).ok();
}
