//! Rein tools served over Streamable HTTP (feature `server-http`): each attack on the endpoint
//! refused, and Rein's own MCP client (feature `http`) served through it.

use rein_core::ToolHandle;
use rein_mcp::{HttpServeOptions, McpClient, McpServer};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::serve::{Delete, Echo};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

fn server() -> McpServer {
    McpServer::builder()
        .tool(ToolHandle::new(Echo::default()))
        .tool(ToolHandle::new(Delete::default()))
        .intervention(
            rein_interventions::Intervention::named("no-deletes").before_tool_call(|ev, _| {
                if ev.tool_use().name == "delete_file" {
                    rein_interventions::BeforeToolCallAction::deny("deleting files is not allowed")
                } else {
                    rein_interventions::BeforeToolCallAction::Proceed
                }
            }),
        )
        .build()
        .unwrap()
}

/// Serves `options` in the background (stopped with the test's runtime); its address and
/// token.
async fn start(options: HttpServeOptions) -> (std::net::SocketAddr, String) {
    let bound = server().bind_http(options).await.unwrap();
    let (addr, token) = (bound.local_addr(), bound.token().to_owned());
    tokio::spawn(bound.serve_until(std::future::pending()));
    (addr, token)
}

/// The status of a raw `POST /mcp` with these extra headers and this body.
async fn post(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    send(addr, "POST", headers, body).await.0
}

/// A raw `METHOD /mcp` with these extra headers and this body: the response's status and its
/// `Mcp-Session-Id`, if any.
async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Option<String>) {
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before it reads the whole body and close: a failed write
    // is no failure here; the status is.
    let _ = s.write_all(body).await;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    // The response's head is all that is needed (an SSE body may stay open).
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let session = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    });
    (status, session)
}

#[tokio::test]
async fn each_attack_on_the_endpoint_is_refused() {
    let (addr, token) = start(HttpServeOptions::new().max_body_bytes(4096)).await;
    assert_eq!(token.len(), 64, "a made-up token has 256 bits");
    let bearer = format!("Bearer {token}");
    let auth = ("Authorization", bearer.as_str());
    let body = INITIALIZE.as_bytes();

    assert_eq!(
        post(addr, &[auth], body).await,
        200,
        "the token holder gets in"
    );
    assert_eq!(post(addr, &[], body).await, 401, "no token");
    let wrong = format!("Bearer {}x", &token[..63]);
    assert_eq!(
        post(addr, &[("Authorization", &wrong)], body).await,
        401,
        "wrong token"
    );
    let prefix = format!("Bearer {}", &token[..32]);
    assert_eq!(
        post(addr, &[("Authorization", &prefix)], body).await,
        401,
        "a prefix of the token"
    );
    assert_eq!(
        post(addr, &[auth, ("Host", "evil.example:80")], body).await,
        403,
        "foreign Host (DNS rebinding)"
    );
    assert_eq!(
        post(addr, &[auth, ("Origin", "https://evil.example")], body).await,
        403,
        "foreign Origin"
    );
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(8192));
    assert_eq!(
        post(addr, &[auth], big.as_bytes()).await,
        413,
        "oversized body"
    );
}

#[tokio::test]
async fn an_allowed_origin_and_host_get_in_and_an_empty_token_is_refused() {
    let (addr, token) = start(
        HttpServeOptions::new()
            .token("s3cret-token")
            .allowed_origin("https://app.example:443")
            .allowed_host("mcp.example"),
    )
    .await;
    assert_eq!(token, "s3cret-token");
    let auth = ("Authorization", "Bearer s3cret-token");
    let body = INITIALIZE.as_bytes();
    let ok = post(addr, &[auth, ("Origin", "https://app.example")], body).await;
    assert_eq!(ok, 200);
    let host = post(addr, &[auth, ("Host", "mcp.example")], body).await;
    assert_eq!(host, 200);
    let other = post(addr, &[auth, ("Origin", "https://app.example:8443")], body).await;
    assert_eq!(other, 403);

    let empty = server()
        .bind_http(HttpServeOptions::new().token(""))
        .await
        .unwrap_err();
    assert!(empty.to_string().contains("token is empty"), "{empty}");
    let options = format!("{:?}", HttpServeOptions::new().token("s3cret-token"));
    assert!(!options.contains("s3cret"), "{options}");
}

#[tokio::test]
async fn reins_own_client_lists_calls_and_sees_a_deny_over_http() {
    let (addr, token) = start(HttpServeOptions::new()).await;
    // The names as served (a client prefixes a server's tools by default).
    let client = McpClient::builder()
        .no_prefix()
        .bearer_token(token)
        .http(format!("http://{addr}/mcp"))
        .await
        .unwrap();
    let tools = client.tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(names, ["echo", "delete_file"]);
    let out = client
        .call_tool("echo", json!({"text": "over http"}))
        .await
        .unwrap();
    assert_eq!(out.content.len(), 1);
    assert!(format!("{:?}", out.content).contains("over http"));
    let denied = client
        .call_tool("delete_file", json!({"path": "a"}))
        .await
        .unwrap();
    assert!(denied.status == rein_core::message::ToolResultStatus::Error);
    assert!(format!("{:?}", denied.content).contains("deleting files is not allowed"));
    client.close().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let (addr, _) =
        start(HttpServeOptions::new().header_timeout(std::time::Duration::from_millis(200))).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // No more bytes are sent: the server closes the connection (EOF or a reset), whatever the
    // reply. Without a header timeout the read never returns: the guard (far longer than the
    // header timeout) turns that into a failure rather than a hung test.
    let mut buf = Vec::new();
    let guard = std::time::Duration::from_secs(30);
    let closed = tokio::time::timeout(guard, s.read_to_end(&mut buf)).await;
    assert!(
        closed.is_ok(),
        "the server kept a headerless connection open"
    );
}

#[tokio::test]
async fn sessions_past_the_cap_are_refused_until_one_is_closed() {
    let (addr, token) = start(HttpServeOptions::new().max_sessions(3)).await;
    let bearer = format!("Bearer {token}");
    let auth = ("Authorization", bearer.as_str());
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let (status, id) = send(addr, "POST", &[auth], INITIALIZE.as_bytes()).await;
        assert_eq!(status, 200);
        sessions.push(id.expect("a session id"));
    }
    // The attack: one session more than the cap.
    assert_eq!(post(addr, &[auth], INITIALIZE.as_bytes()).await, 503);
    // Nothing else changes: the open sessions still answer.
    let ping = br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    for id in &sessions {
        let headers = [
            auth,
            ("Mcp-Session-Id", id.as_str()),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        assert_eq!(post(addr, &headers, ping).await, 200);
    }
    // A closed session frees its slot, for one session only.
    let closed = send(
        addr,
        "DELETE",
        &[auth, ("Mcp-Session-Id", &sessions[0])],
        b"",
    )
    .await;
    assert!(closed.0 < 300, "{closed:?}");
    assert_eq!(post(addr, &[auth], INITIALIZE.as_bytes()).await, 200);
    assert_eq!(post(addr, &[auth], INITIALIZE.as_bytes()).await, 503);
}

#[tokio::test]
async fn concurrent_openings_never_pass_the_cap_together() {
    let (addr, token) = start(HttpServeOptions::new().max_sessions(3)).await;
    let bearer = format!("Bearer {token}");
    let openings: Vec<_> = (0..12)
        .map(|_| {
            let bearer = bearer.clone();
            tokio::spawn(async move {
                post(addr, &[("Authorization", &bearer)], INITIALIZE.as_bytes()).await
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for opening in openings {
        statuses.push(opening.await.unwrap());
    }
    let opened = statuses.iter().filter(|s| **s == 200).count();
    assert!(opened <= 3, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "{statuses:?}"
    );
    // Whatever the interleaving, the cap is reached, not undershot, once they are done.
    assert_eq!(
        post(addr, &[("Authorization", &bearer)], INITIALIZE.as_bytes()).await == 200,
        opened < 3
    );
}

#[tokio::test]
async fn an_idle_session_expires_and_frees_its_slot() {
    let (addr, token) = start(
        HttpServeOptions::new()
            .max_sessions(1)
            .session_idle_timeout(std::time::Duration::from_millis(100)),
    )
    .await;
    let bearer = format!("Bearer {token}");
    let auth = ("Authorization", bearer.as_str());
    let (status, id) = send(addr, "POST", &[auth], INITIALIZE.as_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(post(addr, &[auth], INITIALIZE.as_bytes()).await, 503);
    // The idle session expires, then a new one may open. The guard (far longer than the
    // idle timeout) turns a session that never expires into a failure, not a hung test.
    let reopened = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while post(addr, &[auth], INITIALIZE.as_bytes()).await != 200 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(reopened.is_ok(), "the idle session {id:?} never expired");
}
