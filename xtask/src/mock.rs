//! A local OpenAI-compatible Chat Completions server for the `http_*` benchmarks
//! (`xtask mock-openai [--delay-ms MS]`): one server for every SDK, fast, so what is measured is
//! the SDK's client side.
//!
//! It listens on 127.0.0.1 (a free port, printed as the first line of stdout), answers every
//! `POST .../chat/completions` after a fixed delay (default 20 ms, a tokio sleep) and stops when
//! its stdin closes (its parent ended). The reply is keyed by the conversation's length: while
//! the request holds fewer than two `tool` messages, a call of the tool `noop` with
//! `{"x": 1}`; then the text `Hello! How can I help you today?` — a three-turn tool
//! conversation per invocation. `"stream": true` gets the chunks as server-sent events
//! (`chat.completion.chunk`, usage in a last chunk, `[DONE]`), otherwise one
//! `chat.completion` JSON. With `REIN_MOCK_LOG` set, each request is logged to stderr.

use std::convert::Infallible;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Tool turns before the text turn.
const TOOL_TURNS: usize = 2;
/// The text of the last turn.
const TEXT: &str = "Hello! How can I help you today?";

/// `mock-openai [--delay-ms MS]`.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let delay = args
        .iter()
        .position(|a| a == "--delay-ms")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_millis(20), Duration::from_millis);
    // Stops by itself once the parent is gone (its end of our stdin closes).
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mock-openai: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(delay)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-openai: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(delay: Duration) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?.port());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, delay));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    req: Request<Incoming>,
    delay: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let post =
        req.method() == hyper::Method::POST && req.uri().path().ends_with("/chat/completions");
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(status(400, "unreadable body")),
    };
    if !post {
        return Ok(status(404, "only POST /v1/chat/completions"));
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return Ok(status(400, "body is not JSON"));
    };
    let tools = request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let stream = request["stream"].as_bool().unwrap_or(false);
    if std::env::var_os("REIN_MOCK_LOG").is_some() {
        eprintln!("mock-openai: stream={stream} tool_messages={tools}");
    }
    tokio::time::sleep(delay).await;
    let turn = (tools < TOOL_TURNS).then_some(tools);
    Ok(if stream { sse(turn) } else { whole(turn) })
}

fn status(code: u16, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(
        json!({"error": {"message": text}}).to_string(),
    )));
    *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::BAD_REQUEST);
    r
}

const USAGE: (u64, u64) = (20, 10);

/// Tool turn `Some(k)` or the text turn, as server-sent events.
fn sse(turn: Option<usize>) -> Response<Full<Bytes>> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
               "model": "mock", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = match turn {
        Some(k) => vec![
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                       "id": format!("call_{k}"), "type": "function",
                       "function": {"name": "noop", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\": 1}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        None => vec![
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": TEXT}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
    };
    events.push(
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
        "model": "mock", "choices": [], "usage": {"prompt_tokens": USAGE.0,
        "completion_tokens": USAGE.1, "total_tokens": USAGE.0 + USAGE.1}}),
    );
    let mut body = String::new();
    for e in events {
        body.push_str("data: ");
        body.push_str(&e.to_string());
        body.push_str("\n\n");
    }
    body.push_str("data: [DONE]\n\n");
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    r
}

/// Tool turn `Some(k)` or the text turn, as one `chat.completion`.
fn whole(turn: Option<usize>) -> Response<Full<Bytes>> {
    let (message, finish) = match turn {
        Some(k) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{k}"),
                   "type": "function", "function": {"name": "noop", "arguments": "{\"x\": 1}"}}]}),
            "tool_calls",
        ),
        None => (json!({"role": "assistant", "content": TEXT}), "stop"),
    };
    let body = json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 0,
        "model": "mock", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": USAGE.0, "completion_tokens": USAGE.1,
                  "total_tokens": USAGE.0 + USAGE.1}});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// A running `mock-openai` process (this executable), stopped when dropped.
pub(crate) struct Mock {
    child: std::process::Child,
    /// Its base URL, `http://127.0.0.1:PORT/v1`.
    pub(crate) url: String,
}

impl Mock {
    /// Starts the server in a process of its own, so its CPU is not the SDK's.
    pub(crate) fn start() -> Option<Self> {
        use std::io::BufRead as _;
        let exe = std::env::current_exe().ok()?;
        let mut child = std::process::Command::new(exe)
            .arg("mock-openai")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        let port = child.stdout.take().and_then(|out| {
            std::io::BufReader::new(out).read_line(&mut line).ok()?;
            line.trim().parse::<u16>().ok()
        });
        match port {
            Some(port) => Some(Self {
                child,
                url: format!("http://127.0.0.1:{port}/v1"),
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("mock-openai did not start");
                None
            }
        }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
