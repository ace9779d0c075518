//! The provider-conformance suite (feature `test-util`): one set of checks that every
//! [`Model`] provider runs against recorded wire fixtures served by a local [`FixtureServer`].
//!
//! A provider supplies, in its own wire format, a few recorded response bodies that encode the
//! canonical content described on each [`ProviderFixtures`] method (SSE text, or binary chunks
//! with [`FixtureResponse::chunks`] for APIs such as Bedrock's event stream), plus a factory that builds
//! the provider against a [`FixtureTarget`] (a base URL on 127.0.0.1, an API key, an idle
//! timeout). The suite then checks streaming, tool calls, parallel tool calls, reasoning, usage,
//! stop reasons, the typed error of each HTTP status, broken and stalled streams, hanging
//! servers (no response headers, headers then nothing, an error body that stalls or never
//! ends, an error sent with status 200, a line or frame that never ends, a redirect to another
//! origin), cancellation, connection failures, and that the API key never shows in errors or
//! `Debug` output.
//!
//! ```no_run
//! # #[cfg(feature = "openai")]
//! # async fn demo() {
//! use rein_models::OpenAiModel;
//! use rein_models::conformance::{Conformance, ProviderFixtures};
//!
//! let fixtures = ProviderFixtures::new()
//!     .text(include_str!("../tests/fixtures/openai/text.sse"));
//! let report = Conformance::new(fixtures, |t| {
//!     OpenAiModel::builder("fixture-model")
//!         .base_url(format!("{}/v1", t.base_url))
//!         .api_key(t.api_key.clone())
//!         .idle_timeout(t.idle_timeout)
//!         .build()
//!         .unwrap()
//! })
//! .run()
//! .await;
//! report.assert_passed();
//! # }
//! ```
//!
//! Everything here binds 127.0.0.1 only, needs a Tokio runtime (with the `rt` and `time`
//! drivers, e.g. `#[tokio::test]`), and stops by itself: a server stops when dropped, and every
//! wait is bounded.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt as _;
use rein_core::{
    ContentBlock, Message, ModelError,
    error::ModelErrorKind,
    message::ReasoningContent,
    request::{ModelRequest, ToolChoice},
    stream::{BlockDelta, BlockStart, StopReason, StreamAssembler, StreamEvent},
    tool::ToolSpec,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::model::Model;

/// The API key the suite hands to the factory; it must never appear in errors or `Debug`.
pub const FIXTURE_API_KEY: &str = "rein-conformance-secret-key-0123456789";
/// Longest time any single check may take before it fails.
const CHECK_LIMIT: Duration = Duration::from_secs(20);
/// Longest time a stalled fixture response holds its connection open.
const STALL_LIMIT: Duration = Duration::from_secs(30);
/// The most of an endless error body an error may keep (a provider reads a bounded prefix).
const MAX_KEPT_BODY: usize = 1024 * 1024;
/// How long the endless-line check waits for the provider's error: the fixture server sends
/// 64 MiB a second, past the default line and event limits within a quarter of a second.
const ENDLESS_LIMIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Fixture server

/// One HTTP request the [`FixtureServer`] received.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The request target (path and query).
    pub path: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first header of that (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum After {
    /// End the body properly.
    Finish,
    /// Close the connection in the middle of the (chunked) body.
    Close,
    /// Keep the connection open without sending more, until the client goes away.
    Stall,
    /// Keep sending this chunk (every `chunk_delay`), until the client goes away.
    Endless(Vec<u8>),
}

/// A response the [`FixtureServer`] sends: a status, headers, and a body written in chunks
/// (`Transfer-Encoding: chunked`: one chunk per SSE event, or per given byte chunk, so the
/// client sees real streaming).
#[derive(Debug, Clone)]
#[must_use]
pub struct FixtureResponse {
    /// False: send nothing at all, not even the status line.
    respond: bool,
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
    after: After,
    chunk_delay: Duration,
}

impl FixtureResponse {
    /// `200 OK`, `content-type: text/event-stream`, the body sent one SSE event (blank-line
    /// separated block) per chunk.
    pub fn sse(body: &str) -> Self {
        Self {
            respond: true,
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: split_events(body),
            after: After::Finish,
            chunk_delay: Duration::from_millis(1),
        }
    }

    /// `200 OK` with this `content-type` and a body sent as these chunks, one chunk each (for
    /// binary streams, e.g. AWS event-stream frames; the chunks may split frames anywhere).
    pub fn chunks(content_type: &str, chunks: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self {
            respond: true,
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: chunks.into_iter().collect(),
            after: After::Finish,
            chunk_delay: Duration::from_millis(1),
        }
    }

    /// A plain response with this status and body (`content-type: application/json`).
    pub fn status(status: u16, body: &str) -> Self {
        Self {
            respond: true,
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            after: After::Finish,
            chunk_delay: Duration::ZERO,
        }
    }

    /// Reads the request, then sends nothing at all (not even the status line) and holds the
    /// connection open until the client disconnects (at most 30 s): a server that accepted the
    /// connection and hangs.
    pub fn silent() -> Self {
        Self {
            respond: false,
            ..Self::status(200, "")
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Pause between two body chunks (default 1 ms for event streams).
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Keeps only the first `n` chunks, then drops the connection mid-body.
    pub fn truncated_after(mut self, n: usize) -> Self {
        self.chunks.truncate(n);
        self.after = After::Close;
        self
    }

    /// Keeps only the first `n` chunks, then holds the connection open, sending nothing, until
    /// the client disconnects (at most 30 s).
    pub fn stalled_after(mut self, n: usize) -> Self {
        self.chunks.truncate(n);
        self.after = After::Stall;
        self
    }

    /// After the chunks, sends `filler` again and again (one chunk every `chunk_delay`, at
    /// least 1 ms) until the client disconnects (at most 30 s): a body that never ends.
    pub fn endless(mut self, filler: &[u8]) -> Self {
        self.after = After::Endless(filler.to_vec());
        self.chunk_delay = self.chunk_delay.max(Duration::from_millis(1));
        self
    }

    /// Number of body chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

/// An SSE body: [`FixtureResponse::sse`].
impl From<&str> for FixtureResponse {
    fn from(sse: &str) -> Self {
        Self::sse(sse)
    }
}

/// An SSE body: [`FixtureResponse::sse`].
impl From<&String> for FixtureResponse {
    fn from(sse: &String) -> Self {
        Self::sse(sse)
    }
}

/// An SSE body: [`FixtureResponse::sse`].
impl From<String> for FixtureResponse {
    fn from(sse: String) -> Self {
        Self::sse(&sse)
    }
}

fn split_events(body: &str) -> Vec<Vec<u8>> {
    let body = body.replace("\r\n", "\n");
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in body.split_inclusive('\n') {
        cur.push_str(line);
        if line == "\n" {
            if cur.trim().is_empty() {
                cur.clear();
                continue;
            }
            out.push(std::mem::take(&mut cur).into_bytes());
        }
    }
    if !cur.trim().is_empty() {
        if !cur.ends_with("\n\n") {
            cur.push_str(if cur.ends_with('\n') { "\n" } else { "\n\n" });
        }
        out.push(cur.into_bytes());
    }
    out
}

#[derive(Default)]
struct ServerState {
    queue: VecDeque<FixtureResponse>,
    requests: Vec<RecordedRequest>,
    disconnects: usize,
}

/// A tiny HTTP/1.1 server on 127.0.0.1 that answers each request with the next queued
/// [`FixtureResponse`] (HTTP 500 when none is left) and records every request. It stops when
/// dropped.
pub struct FixtureServer {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<ServerState>>,
    disconnected: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for FixtureServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixtureServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(state: &Mutex<ServerState>) -> std::sync::MutexGuard<'_, ServerState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FixtureServer {
    /// Starts a server on an ephemeral port of 127.0.0.1. Needs a Tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(ServerState::default()));
        let disconnected = Arc::new(Notify::new());
        let (st, dn) = (state.clone(), disconnected.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((sock, _)) = listener.accept().await {
                conns.spawn(serve(sock, st.clone(), dn.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Self {
            addr,
            state,
            disconnected,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a response.
    pub fn push(&self, response: FixtureResponse) {
        lock(&self.state).queue.push_back(response);
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// How many stalled, silent or endless responses saw their client disconnect.
    pub fn disconnects(&self) -> usize {
        lock(&self.state).disconnects
    }

    /// Waits until a stalled, silent or endless response sees its client disconnect; false
    /// after `limit`.
    pub async fn wait_disconnect(&self, limit: Duration) -> bool {
        let notified = self.disconnected.notified();
        if self.disconnects() > 0 {
            return true;
        }
        tokio::time::timeout(limit, notified).await.is_ok() || self.disconnects() > 0
    }
}

async fn read_request(sock: &mut TcpStream) -> Option<RecordedRequest> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        let n = tokio::time::timeout(CHECK_LIMIT, sock.read(&mut tmp))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = tokio::time::timeout(CHECK_LIMIT, sock.read(&mut tmp))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Some(RecordedRequest {
        method,
        path,
        headers,
        body,
    })
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

async fn serve(mut sock: TcpStream, state: Arc<Mutex<ServerState>>, disconnected: Arc<Notify>) {
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    let resp = {
        let mut st = lock(&state);
        st.requests.push(req);
        st.queue.pop_front()
    };
    let resp = resp.unwrap_or_else(|| {
        FixtureResponse::status(500, r#"{"error":{"message":"no fixture response queued"}}"#)
    });
    if !resp.respond {
        hold_until_disconnect(&mut sock, &state, &disconnected).await;
        return;
    }
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n",
        resp.status,
        reason_phrase(resp.status)
    );
    for (n, v) in &resp.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if sock.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for chunk in &resp.chunks {
        if chunk.is_empty() {
            continue;
        }
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(chunk);
        frame.extend_from_slice(b"\r\n");
        if sock.write_all(&frame).await.is_err() || sock.flush().await.is_err() {
            return;
        }
        if !resp.chunk_delay.is_zero() {
            tokio::time::sleep(resp.chunk_delay).await;
        }
    }
    match resp.after {
        After::Finish => {
            let _ = sock.write_all(b"0\r\n\r\n").await;
            let _ = sock.shutdown().await;
        }
        After::Close => {
            let _ = sock.shutdown().await;
        }
        After::Stall => hold_until_disconnect(&mut sock, &state, &disconnected).await,
        After::Endless(filler) if filler.is_empty() => {
            hold_until_disconnect(&mut sock, &state, &disconnected).await;
        }
        After::Endless(filler) => {
            let mut frame = format!("{:x}\r\n", filler.len()).into_bytes();
            frame.extend_from_slice(&filler);
            frame.extend_from_slice(b"\r\n");
            let send = async {
                loop {
                    if sock.write_all(&frame).await.is_err() || sock.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(resp.chunk_delay).await;
                }
            };
            if tokio::time::timeout(STALL_LIMIT, send).await.is_ok() {
                lock(&state).disconnects += 1;
                disconnected.notify_waiters();
            }
        }
    }
}

/// Sends nothing more; counts a disconnect when the client goes away (within 30 s).
async fn hold_until_disconnect(
    sock: &mut TcpStream,
    state: &Mutex<ServerState>,
    disconnected: &Notify,
) {
    let mut tmp = [0u8; 1024];
    let wait = async {
        loop {
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    };
    if let Ok(true) = tokio::time::timeout(STALL_LIMIT, wait).await {
        lock(state).disconnects += 1;
        disconnected.notify_waiters();
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures and the suite

/// What the suite hands the provider factory.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FixtureTarget {
    /// `http://127.0.0.1:<port>` (no trailing slash); append the provider's own path prefix
    /// (e.g. `/v1` for OpenAI-compatible servers). Every path is answered.
    pub base_url: String,
    /// The API key to configure ([`FIXTURE_API_KEY`]).
    pub api_key: String,
    /// The stream idle timeout to configure (short, so the stall check is quick).
    pub idle_timeout: Duration,
}

/// Recorded wire bodies for one provider. Each method documents the exact content its body
/// must encode; a check whose fixture is missing is reported as skipped.
///
/// A body is an SSE text (`&str`, served by [`FixtureResponse::sse`]) or any
/// [`FixtureResponse`], e.g. [`FixtureResponse::chunks`] for a binary stream.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ProviderFixtures {
    text: Option<FixtureResponse>,
    tool_call: Option<FixtureResponse>,
    parallel_tool_calls: Option<FixtureResponse>,
    reasoning: Option<(FixtureResponse, Option<String>)>,
    max_tokens: Option<FixtureResponse>,
    cache_usage: Option<(FixtureResponse, u64, u64)>,
    malformed: Option<FixtureResponse>,
    context_overflow_body: Option<String>,
    error_body: Option<String>,
}

/// The text the `text` fixture streams.
pub const TEXT: &str = "Hello, world!";

impl ProviderFixtures {
    /// No fixtures (every fixture-based check skipped).
    pub fn new() -> Self {
        Self::default()
    }

    /// A streamed answer: the assistant text [`TEXT`] (`Hello, world!`) in at least two
    /// deltas, stop reason end-of-turn, usage 11 input and 5 output tokens (no cache tokens).
    /// Also used, cut short, for the broken-stream, stall, headers-then-stall and
    /// cancellation checks, so it should have at least four SSE events.
    pub fn text(mut self, body: impl Into<FixtureResponse>) -> Self {
        self.text = Some(body.into());
        self
    }

    /// One tool call: id `call_1`, name `get_weather`, input `{"city": "Paris", "unit":
    /// "celsius"}` sent in at least two JSON fragments; stop reason tool use.
    pub fn tool_call(mut self, body: impl Into<FixtureResponse>) -> Self {
        self.tool_call = Some(body.into());
        self
    }

    /// Two parallel tool calls: `call_1` `get_weather` `{"city": "Paris"}` then `call_2`
    /// `get_time` `{"timezone": "Europe/Paris"}`, arguments fragmented; stop reason tool use.
    pub fn parallel_tool_calls(mut self, body: impl Into<FixtureResponse>) -> Self {
        self.parallel_tool_calls = Some(body.into());
        self
    }

    /// Reasoning then text: reasoning `The user greets me.` (with `signature` when the API
    /// signs reasoning), then the text `Hi!`; stop reason end-of-turn.
    pub fn reasoning(mut self, body: impl Into<FixtureResponse>, signature: Option<&str>) -> Self {
        self.reasoning = Some((body.into(), signature.map(str::to_owned)));
        self
    }

    /// An answer cut by the output limit: text `Hello` then the provider's max-tokens stop.
    pub fn max_tokens(mut self, body: impl Into<FixtureResponse>) -> Self {
        self.max_tokens = Some(body.into());
        self
    }

    /// Text `Cached.` with prompt-cache usage: `cache_read` tokens read from the cache and
    /// `cache_write` written to it (0 where the API reports none).
    pub fn cache_usage(
        mut self,
        body: impl Into<FixtureResponse>,
        cache_read: u64,
        cache_write: u64,
    ) -> Self {
        self.cache_usage = Some((body.into(), cache_read, cache_write));
        self
    }

    /// A stream whose data is not valid for the protocol (e.g. a JSON line that does not
    /// parse): must yield a `MalformedStream` error.
    pub fn malformed(mut self, body: impl Into<FixtureResponse>) -> Self {
        self.malformed = Some(body.into());
        self
    }

    /// The provider's HTTP 400 body for a context-window overflow.
    pub fn context_overflow_body(mut self, body: &str) -> Self {
        self.context_overflow_body = Some(body.to_owned());
        self
    }

    /// The provider's error body shape used for the other status checks, the stalled and
    /// endless error bodies, and the error sent with status 200 (default
    /// `{"error":{"message":"fixture error"}}`).
    pub fn error_body(mut self, body: &str) -> Self {
        self.error_body = Some(body.to_owned());
        self
    }
}

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The provider behaved.
    Passed,
    /// It did not; the text says how.
    Failed(String),
    /// The check did not run (its fixture was not given).
    Skipped(String),
}

/// The result of one check.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckResult {
    /// The check's name.
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
}

/// The results of a suite run.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConformanceReport {
    /// One entry per check, in run order.
    pub results: Vec<CheckResult>,
}

impl ConformanceReport {
    /// The failed checks.
    pub fn failures(&self) -> Vec<&CheckResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
            .collect()
    }

    /// Names of the checks that passed.
    pub fn passed(&self) -> Vec<&'static str> {
        self.results
            .iter()
            .filter(|r| r.outcome == Outcome::Passed)
            .map(|r| r.name)
            .collect()
    }

    /// Panics, listing every failure, unless all checks passed or were skipped (for tests).
    #[track_caller]
    pub fn assert_passed(&self) {
        let failures = self.failures();
        if !failures.is_empty() {
            let list: Vec<String> = failures
                .iter()
                .map(|r| format!("  - {}: {:?}", r.name, r.outcome))
                .collect();
            panic!(
                "{} of {} conformance checks failed:\n{}",
                failures.len(),
                self.results.len(),
                list.join("\n")
            );
        }
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            match &r.outcome {
                Outcome::Passed => writeln!(f, "ok      {}", r.name)?,
                Outcome::Failed(m) => writeln!(f, "FAILED  {}: {m}", r.name)?,
                Outcome::Skipped(m) => writeln!(f, "skipped {}: {m}", r.name)?,
            }
        }
        Ok(())
    }
}

/// The suite: fixtures plus a factory building the provider under test.
#[must_use]
pub struct Conformance<F> {
    fixtures: ProviderFixtures,
    factory: F,
    idle_timeout: Duration,
}

impl<F> fmt::Debug for Conformance<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conformance")
            .field("fixtures", &self.fixtures)
            .finish_non_exhaustive()
    }
}

type Collected = (Vec<StreamEvent>, Option<ModelError>);
type CheckFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + 'a>>;

/// The tool uses of a message, without what the provider kept for itself on them.
fn tool_uses(message: &rein_core::Message) -> Vec<rein_core::ToolUse> {
    message
        .tool_uses()
        .cloned()
        .map(|mut u| {
            u.provider_state = None;
            u
        })
        .collect()
}

fn fail(msg: impl Into<String>) -> Outcome {
    Outcome::Failed(msg.into())
}

impl<M, F> Conformance<F>
where
    M: Model + fmt::Debug,
    F: Fn(&FixtureTarget) -> M,
{
    /// A suite for the provider built by `factory`.
    pub fn new(fixtures: ProviderFixtures, factory: F) -> Self {
        Self {
            fixtures,
            factory,
            idle_timeout: Duration::from_secs(1),
        }
    }

    /// The idle timeout handed to the factory (default 1 s). The stall check expects the
    /// `Timeout` error within ten times this, the hostile-server checks (no response headers,
    /// headers then nothing, an error body that stalls or never ends) an error within five
    /// times this; the other checks need every chunk within it.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Runs every check and reports each outcome (never panics; see
    /// [`ConformanceReport::assert_passed`]).
    pub async fn run(&self) -> ConformanceReport {
        let mut report = ConformanceReport::default();
        let checks: Vec<(&'static str, CheckFuture<'_>)> = vec![
            ("text_streaming", Box::pin(self.check_text())),
            ("tool_call", Box::pin(self.check_tool_call())),
            ("parallel_tool_calls", Box::pin(self.check_parallel())),
            ("reasoning", Box::pin(self.check_reasoning())),
            ("max_tokens_stop", Box::pin(self.check_max_tokens())),
            ("cache_usage", Box::pin(self.check_cache_usage())),
            ("request_shape", Box::pin(self.check_request())),
            ("http_errors", Box::pin(self.check_statuses())),
            ("context_overflow", Box::pin(self.check_overflow())),
            ("malformed_stream", Box::pin(self.check_malformed())),
            ("broken_stream", Box::pin(self.check_broken())),
            ("idle_timeout", Box::pin(self.check_idle())),
            ("cancellation", Box::pin(self.check_cancel())),
            ("connection_refused", Box::pin(self.check_refused())),
            ("debug_hides_api_key", Box::pin(self.check_debug())),
        ];
        for (name, fut) in checks {
            let outcome = match tokio::time::timeout(CHECK_LIMIT, fut).await {
                Ok(o) => o,
                Err(_) => fail(format!("did not finish within {CHECK_LIMIT:?}")),
            };
            report.results.push(CheckResult { name, outcome });
        }
        // Hostile servers: each check waits about one idle timeout, so they run together.
        let hostile: Vec<(&'static str, CheckFuture<'_>)> = vec![
            ("no_response_headers", Box::pin(self.check_silent())),
            ("headers_then_stall", Box::pin(self.check_headers_stall())),
            ("error_body_stall", Box::pin(self.check_error_body_stall())),
            (
                "endless_error_body",
                Box::pin(self.check_endless_error_body()),
            ),
            ("error_with_status_200", Box::pin(self.check_error_200())),
            ("endless_line", Box::pin(self.check_endless_line())),
            (
                "cross_origin_redirect",
                Box::pin(self.check_cross_origin_redirect()),
            ),
        ];
        let outcomes =
            futures_util::future::join_all(hostile.into_iter().map(|(name, fut)| async move {
                match tokio::time::timeout(CHECK_LIMIT, fut).await {
                    Ok(outcome) => CheckResult { name, outcome },
                    Err(_) => CheckResult {
                        name,
                        outcome: fail(format!("did not finish within {CHECK_LIMIT:?}")),
                    },
                }
            }))
            .await;
        report.results.extend(outcomes);
        report
    }

    /// How long a check against a hanging server waits for the provider's error: five idle
    /// timeouts (a provider configured with the target's idle timeout gives up after one).
    fn hang_limit(&self) -> Duration {
        self.idle_timeout * 5
    }

    /// Serves `resp` once and expects an error within `limit`; a provider still waiting then
    /// fails with `hint`, naming the timeout it lacks.
    async fn expect_error_within(
        &self,
        resp: FixtureResponse,
        limit: Duration,
        hint: &str,
    ) -> Result<(ModelError, FixtureServer, Duration), String> {
        let server = FixtureServer::start()
            .await
            .map_err(|e| format!("fixture server: {e}"))?;
        server.push(resp);
        let model = (self.factory)(&self.target(server.base_url()));
        let started = tokio::time::Instant::now();
        let (events, err) = match tokio::time::timeout(limit, collect(&model, self.request())).await
        {
            Ok(collected) => collected,
            Err(_) => {
                return Err(format!(
                    "no error within {limit:?} (the provider was given an idle timeout of \
                     {:?}): {hint}",
                    self.idle_timeout
                ));
            }
        };
        let Some(e) = err else {
            return Err(format!(
                "the call succeeded ({} events) where it must fail: {hint}",
                events.len()
            ));
        };
        if format!("{e} {e:?}").contains(FIXTURE_API_KEY) {
            return Err("the error shows the API key".into());
        }
        Ok((e, server, started.elapsed()))
    }

    async fn check_silent(&self) -> Outcome {
        let hint = "the server accepted the connection, read the request and never sent the \
                    response headers; bound the wait for them (e.g. by the idle timeout)";
        match self
            .expect_error_within(FixtureResponse::silent(), self.hang_limit(), hint)
            .await
        {
            Err(m) => fail(m),
            Ok((e, ..)) if e.kind() != ModelErrorKind::Timeout || !e.is_retryable() => {
                fail(format!(
                    "kind {:?} retryable {}, expected a retryable Timeout (nothing was \
                     received) ({e})",
                    e.kind(),
                    e.is_retryable()
                ))
            }
            Ok((_, server, _)) => closed_after_giving_up(&server).await,
        }
    }

    async fn check_headers_stall(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let hint = "the server sent the response headers, then no byte of the body; bound the \
                    wait for each body chunk (the idle timeout)";
        match self
            .expect_error_within(fixture.clone().stalled_after(0), self.hang_limit(), hint)
            .await
        {
            Err(m) => fail(m),
            Ok((e, ..)) if e.kind() != ModelErrorKind::Timeout || !e.is_retryable() => {
                fail(format!(
                    "kind {:?} retryable {}, expected a retryable Timeout (no data was \
                     received) ({e})",
                    e.kind(),
                    e.is_retryable()
                ))
            }
            Ok(_) => Outcome::Passed,
        }
    }

    fn error_body(&self) -> String {
        self.fixtures
            .error_body
            .clone()
            .unwrap_or_else(|| r#"{"error":{"message":"fixture error"}}"#.to_owned())
    }

    async fn check_error_body_stall(&self) -> Outcome {
        let hint = "the server sent HTTP 500 and its error body, then never ended the body; \
                    bound the wait for the error body's chunks and report the status";
        let resp = FixtureResponse::status(500, &self.error_body()).stalled_after(1);
        match self
            .expect_error_within(resp, self.hang_limit(), hint)
            .await
        {
            Err(m) => fail(m),
            Ok((e, ..)) if e.kind() != ModelErrorKind::Server || e.status() != Some(500) => {
                not_server_500(&e)
            }
            Ok(_) => Outcome::Passed,
        }
    }

    async fn check_endless_error_body(&self) -> Outcome {
        let hint = "the server sent HTTP 500 and an error body that never ends (bytes keep \
                    coming, so no idle timeout fires); read at most a bounded prefix of it";
        let filler = [b' '; 4096];
        let resp = FixtureResponse::status(500, &self.error_body()).endless(&filler);
        match self
            .expect_error_within(resp, self.hang_limit(), hint)
            .await
        {
            Err(m) => fail(m),
            Ok((e, ..)) if e.kind() != ModelErrorKind::Server || e.status() != Some(500) => {
                not_server_500(&e)
            }
            Ok((e, ..)) if e.body().is_some_and(|b| b.len() > MAX_KEPT_BODY) => fail(format!(
                "the error keeps {} bytes of the body, expected at most {MAX_KEPT_BODY}",
                e.body().map_or(0, str::len)
            )),
            Ok((_, server, _)) => closed_after_giving_up(&server).await,
        }
    }

    async fn check_error_200(&self) -> Outcome {
        let hint = "the server answered HTTP 200 with a JSON error object instead of a stream";
        let resp = FixtureResponse::status(200, &self.error_body());
        match self
            .expect_error_within(resp, self.hang_limit(), hint)
            .await
        {
            Err(m) => fail(m),
            Ok(_) => Outcome::Passed,
        }
    }

    async fn check_endless_line(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let hint = "the server sent a stream's headers, then one line (or frame) that never \
                    ends (bytes keep coming, so no idle timeout fires); bound what is buffered \
                    (rein_models::http::StreamLimits)";
        let mut resp = fixture.clone();
        resp.chunks.clear();
        let resp = resp.endless(&[b'a'; 64 * 1024]);
        match self.expect_error_within(resp, ENDLESS_LIMIT, hint).await {
            Err(m) => fail(m),
            Ok((e, ..)) if e.kind() != ModelErrorKind::ResponseTooLarge || e.is_retryable() => {
                fail(format!(
                    "kind {:?} retryable {}, expected a ResponseTooLarge that is not \
                     retryable ({e})",
                    e.kind(),
                    e.is_retryable()
                ))
            }
            Ok((_, server, _)) => closed_after_giving_up(&server).await,
        }
    }

    async fn check_cross_origin_redirect(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        // Two servers on 127.0.0.1: different ports, different origins.
        let (first, other) = match (FixtureServer::start().await, FixtureServer::start().await) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return fail(format!("fixture server: {e}")),
        };
        other.push(fixture.clone());
        first.push(
            FixtureResponse::status(307, "")
                .header("location", &format!("{}/elsewhere", other.base_url())),
        );
        let model = (self.factory)(&self.target(first.base_url()));
        let (_, err) = collect(&model, self.request()).await;
        if !other.requests().is_empty() {
            return fail(
                "followed a redirect to another origin: the other server got the request \
                 (its credentials and the conversation); follow redirects within the origin \
                 only (rein_models::http::redirect_policy)",
            );
        }
        match err {
            None => fail("a redirect to another origin ended without an error"),
            Some(e) if format!("{e} {e:?}").contains(FIXTURE_API_KEY) => {
                fail("the error shows the API key")
            }
            Some(e) if e.is_retryable() => {
                fail(format!("an unfollowed redirect must not be retryable: {e}"))
            }
            Some(_) => Outcome::Passed,
        }
    }

    fn target(&self, base_url: String) -> FixtureTarget {
        FixtureTarget {
            base_url,
            api_key: FIXTURE_API_KEY.to_owned(),
            idle_timeout: self.idle_timeout,
        }
    }

    fn request(&self) -> ModelRequest {
        ModelRequest::new(vec![Message::user("Hello?")])
            .with_system_prompt("You are a test fixture.")
            .with_tools(vec![
                ToolSpec::new(
                    "get_weather",
                    "Weather in a city",
                    json!({"type": "object", "properties": {"city": {"type": "string"}}}),
                ),
                ToolSpec::new(
                    "get_time",
                    "Time in a timezone",
                    json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
                ),
            ])
            .with_tool_choice(ToolChoice::Auto)
    }

    /// Serves `resp` once and collects everything the provider yields.
    async fn exchange(&self, resp: FixtureResponse) -> Result<(Collected, FixtureServer), String> {
        let server = FixtureServer::start()
            .await
            .map_err(|e| format!("fixture server: {e}"))?;
        server.push(resp);
        let model = (self.factory)(&self.target(server.base_url()));
        let collected = collect(&model, self.request()).await;
        Ok((collected, server))
    }

    /// Serves a success fixture and assembles the response, checking the event grammar.
    async fn success(
        &self,
        body: &FixtureResponse,
    ) -> Result<(rein_core::stream::ModelResponse, Vec<StreamEvent>), String> {
        let ((events, err), _server) = self.exchange(body.clone()).await?;
        if let Some(e) = err {
            return Err(format!("unexpected error: {e}"));
        }
        check_grammar(&events)?;
        let mut a = StreamAssembler::new();
        for ev in events.iter().cloned() {
            a.push(ev).map_err(|e| e.to_string())?;
        }
        let r = a.finish().map_err(|e| e.to_string())?;
        Ok((r, events))
    }

    async fn check_text(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let (r, events) = match self.success(fixture).await {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let deltas = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::BlockDelta(BlockDelta::Text(_))))
            .count();
        if r.message.text() != TEXT {
            return fail(format!("text {:?}, expected {TEXT:?}", r.message.text()));
        }
        if deltas < 2 {
            return fail(format!(
                "text arrived in {deltas} delta(s), expected streaming"
            ));
        }
        if r.stop_reason != StopReason::EndTurn {
            return fail(format!("stop reason {:?}", r.stop_reason));
        }
        let u = r.usage;
        if (u.input_tokens, u.output_tokens, u.total_tokens) != (11, 5, 16) {
            return fail(format!("usage {u:?}, expected 11 in / 5 out / 16 total"));
        }
        if !matches!(events.first(), Some(StreamEvent::MessageStart { .. })) {
            return fail("first event is not MessageStart");
        }
        if r.metrics.latency.is_none() {
            return fail("no latency in the metadata");
        }
        Outcome::Passed
    }

    async fn check_tool_call(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.tool_call else {
            return Outcome::Skipped("no tool_call fixture".into());
        };
        let (r, events) = match self.success(fixture).await {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let frags = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::BlockDelta(BlockDelta::ToolInput(_))))
            .count();
        let uses = tool_uses(&r.message);
        let expected = vec![rein_core::ToolUse::new(
            "call_1",
            "get_weather",
            json!({"city": "Paris", "unit": "celsius"}),
        )];
        if uses != expected {
            return fail(format!("tool uses {uses:?}, expected {expected:?}"));
        }
        if frags < 2 {
            return fail(format!(
                "tool input arrived in {frags} fragment(s), expected ≥ 2"
            ));
        }
        if r.stop_reason != StopReason::ToolUse {
            return fail(format!("stop reason {:?}", r.stop_reason));
        }
        Outcome::Passed
    }

    async fn check_parallel(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.parallel_tool_calls else {
            return Outcome::Skipped("no parallel_tool_calls fixture".into());
        };
        let (r, _) = match self.success(fixture).await {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let uses = tool_uses(&r.message);
        let expected = vec![
            rein_core::ToolUse::new("call_1", "get_weather", json!({"city": "Paris"})),
            rein_core::ToolUse::new("call_2", "get_time", json!({"timezone": "Europe/Paris"})),
        ];
        if uses != expected {
            return fail(format!("tool uses {uses:?}, expected {expected:?}"));
        }
        if r.stop_reason != StopReason::ToolUse {
            return fail(format!("stop reason {:?}", r.stop_reason));
        }
        Outcome::Passed
    }

    async fn check_reasoning(&self) -> Outcome {
        let Some((fixture, sig)) = &self.fixtures.reasoning else {
            return Outcome::Skipped("no reasoning fixture".into());
        };
        let (r, _) = match self.success(fixture).await {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        let expected = vec![
            ContentBlock::ReasoningContent(Box::new(ReasoningContent::ReasoningText(
                rein_core::message::ReasoningText::new("The user greets me.", sig.clone()),
            ))),
            ContentBlock::Text("Hi!".into()),
        ];
        // What a provider keeps for itself on the block is its own business.
        let mut content = r.message.content;
        for block in &mut content {
            if let ContentBlock::ReasoningContent(r) = block
                && let ReasoningContent::ReasoningText(t) = &mut **r
            {
                t.provider_state = None;
            }
        }
        if content != expected {
            return fail(format!("content {content:?}, expected {expected:?}"));
        }
        Outcome::Passed
    }

    async fn check_max_tokens(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.max_tokens else {
            return Outcome::Skipped("no max_tokens fixture".into());
        };
        match self.success(fixture).await {
            Err(e) => fail(e),
            Ok((r, _)) if r.stop_reason != StopReason::MaxTokens => fail(format!(
                "stop reason {:?}, expected MaxTokens",
                r.stop_reason
            )),
            Ok((r, _)) if r.message.text() != "Hello" => {
                fail(format!("text {:?}", r.message.text()))
            }
            Ok(_) => Outcome::Passed,
        }
    }

    async fn check_cache_usage(&self) -> Outcome {
        let Some((fixture, read, write)) = &self.fixtures.cache_usage else {
            return Outcome::Skipped("no cache_usage fixture".into());
        };
        match self.success(fixture).await {
            Err(e) => fail(e),
            Ok((r, _))
                if (
                    r.usage.cache_read_input_tokens,
                    r.usage.cache_write_input_tokens,
                ) != (*read, *write) =>
            {
                fail(format!(
                    "usage {:?}, expected cache read {read} / write {write}",
                    r.usage
                ))
            }
            Ok(_) => Outcome::Passed,
        }
    }

    async fn check_request(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let ((_, err), server) = match self.exchange(fixture.clone()).await {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        if let Some(e) = err {
            return fail(format!("unexpected error: {e}"));
        }
        let reqs = server.requests();
        let [req] = reqs.as_slice() else {
            return fail(format!("{} requests sent, expected 1", reqs.len()));
        };
        if req.method != "POST" {
            return fail(format!("method {}", req.method));
        }
        let in_header = req.headers.iter().any(|(_, v)| v.contains(FIXTURE_API_KEY));
        if !in_header && !req.path.contains(FIXTURE_API_KEY) {
            return fail("the API key was sent neither in a header nor in the URL");
        }
        if !String::from_utf8_lossy(&req.body).contains("Hello?") {
            return fail("the request body does not carry the user message");
        }
        Outcome::Passed
    }

    async fn expect_error(
        &self,
        resp: FixtureResponse,
        kind: ModelErrorKind,
        what: &str,
    ) -> Result<ModelError, String> {
        let ((events, err), _s) = self.exchange(resp).await?;
        let Some(e) = err else {
            return Err(format!("{what}: no error (events: {})", events.len()));
        };
        if e.kind() != kind {
            return Err(format!(
                "{what}: kind {:?}, expected {kind:?} ({e})",
                e.kind()
            ));
        }
        let shown = format!("{e} {e:?}");
        if shown.contains(FIXTURE_API_KEY) {
            return Err(format!("{what}: the error shows the API key"));
        }
        Ok(e)
    }

    async fn check_statuses(&self) -> Outcome {
        let body = self
            .fixtures
            .error_body
            .clone()
            .unwrap_or_else(|| r#"{"error":{"message":"fixture error"}}"#.to_owned());
        let cases: [(u16, ModelErrorKind, bool); 7] = [
            (401, ModelErrorKind::Auth, false),
            (403, ModelErrorKind::Auth, false),
            (429, ModelErrorKind::Throttled, true),
            (400, ModelErrorKind::BadRequest, false),
            (500, ModelErrorKind::Server, true),
            (502, ModelErrorKind::Server, true),
            (503, ModelErrorKind::Server, true),
        ];
        for (status, kind, retryable) in cases {
            let mut resp = FixtureResponse::status(status, &body);
            if status == 429 {
                resp = resp.header("retry-after", "7");
            }
            let e = match self
                .expect_error(resp, kind, &format!("HTTP {status}"))
                .await
            {
                Ok(e) => e,
                Err(m) => return fail(m),
            };
            if e.status() != Some(status) {
                return fail(format!(
                    "HTTP {status}: status {:?} in the error",
                    e.status()
                ));
            }
            if e.body() != Some(body.as_str()) {
                return fail(format!("HTTP {status}: body {:?} not kept", e.body()));
            }
            if e.is_retryable() != retryable {
                return fail(format!(
                    "HTTP {status}: is_retryable() = {}",
                    e.is_retryable()
                ));
            }
            if status == 429 && e.retry_after() != Some(Duration::from_secs(7)) {
                return fail(format!(
                    "HTTP 429: retry_after {:?}, expected 7 s",
                    e.retry_after()
                ));
            }
        }
        Outcome::Passed
    }

    async fn check_overflow(&self) -> Outcome {
        let Some(body) = &self.fixtures.context_overflow_body else {
            return Outcome::Skipped("no context_overflow_body fixture".into());
        };
        match self
            .expect_error(
                FixtureResponse::status(400, body),
                ModelErrorKind::ContextWindowOverflow,
                "HTTP 400 context overflow",
            )
            .await
        {
            Ok(_) => Outcome::Passed,
            Err(m) => fail(m),
        }
    }

    async fn check_malformed(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.malformed else {
            return Outcome::Skipped("no malformed fixture".into());
        };
        match self
            .expect_error(
                fixture.clone(),
                ModelErrorKind::MalformedStream,
                "malformed stream",
            )
            .await
        {
            Ok(_) => Outcome::Passed,
            Err(m) => fail(m),
        }
    }

    async fn check_broken(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let full = fixture.clone();
        let keep = (full.chunk_count() / 2).max(1);
        let ((_, err), _s) = match self.exchange(full.truncated_after(keep)).await {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        match err {
            Some(e)
                if matches!(
                    e.kind(),
                    ModelErrorKind::MalformedStream | ModelErrorKind::Transport
                ) =>
            {
                if e.is_retryable() {
                    fail(format!(
                        "a stream broken after data must not be retryable: {e}"
                    ))
                } else {
                    Outcome::Passed
                }
            }
            Some(e) => fail(format!(
                "kind {:?}, expected MalformedStream or Transport",
                e.kind()
            )),
            None => fail("a stream cut in the middle ended without an error"),
        }
    }

    async fn check_idle(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let hint = "the stream stalled after its first event; bound the wait for each body \
                    chunk (the idle timeout)";
        let resp = fixture.clone().stalled_after(1);
        match self
            .expect_error_within(resp, self.idle_timeout * 10, hint)
            .await
        {
            Ok((e, ..)) if e.kind() != ModelErrorKind::Timeout => fail(format!(
                "stalled stream: kind {:?}, expected Timeout ({e})",
                e.kind()
            )),
            Ok(_) => Outcome::Passed,
            Err(m) => fail(m),
        }
    }

    async fn check_cancel(&self) -> Outcome {
        let Some(fixture) = &self.fixtures.text else {
            return Outcome::Skipped("no text fixture".into());
        };
        let server = match FixtureServer::start().await {
            Ok(s) => s,
            Err(e) => return fail(format!("fixture server: {e}")),
        };
        server.push(fixture.clone().stalled_after(2));
        let mut target = self.target(server.base_url());
        target.idle_timeout = CHECK_LIMIT;
        let model = (self.factory)(&target);
        // The fixture sends two events at once: the first comes within ten idle timeouts.
        let limit = self.idle_timeout * 10;
        let first = tokio::time::timeout(limit, async {
            let mut stream = model.stream(self.request()).await?;
            let first = stream.next().await;
            Ok::<_, ModelError>((stream, first))
        })
        .await;
        let stream = match first {
            Err(_) => {
                return fail(format!(
                    "no first event within {limit:?} (the server sent two at once)"
                ));
            }
            Ok(Err(e)) => return fail(format!("unexpected error: {e}")),
            Ok(Ok((_, first))) if !matches!(first, Some(Ok(_))) => {
                return fail("no first event");
            }
            Ok(Ok((stream, _))) => stream,
        };
        drop(stream);
        if server.wait_disconnect(Duration::from_secs(5)).await {
            Outcome::Passed
        } else {
            fail("dropping the stream did not close the connection within 5 s")
        }
    }

    async fn check_refused(&self) -> Outcome {
        // A port that was just free: nothing listens there.
        let addr = match std::net::TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr())
        {
            Ok(a) => a,
            Err(e) => return fail(format!("cannot pick a port: {e}")),
        };
        let model = (self.factory)(&self.target(format!("http://{addr}")));
        let (_, err) = collect(&model, self.request()).await;
        match err {
            Some(e) if e.kind() == ModelErrorKind::Transport && e.is_retryable() => {
                if format!("{e} {e:?}").contains(FIXTURE_API_KEY) {
                    fail("the error shows the API key")
                } else {
                    Outcome::Passed
                }
            }
            Some(e) => fail(format!(
                "kind {:?} retryable {}, expected a retryable Transport error ({e})",
                e.kind(),
                e.is_retryable()
            )),
            None => fail("no error for a refused connection"),
        }
    }

    async fn check_debug(&self) -> Outcome {
        let model = (self.factory)(&self.target("http://127.0.0.1:9".into()));
        let shown = format!("{model:?} {model:#?}");
        if shown.contains(FIXTURE_API_KEY) {
            fail("Debug output shows the API key")
        } else {
            Outcome::Passed
        }
    }
}

/// The failure of a hostile-server check that expected `Server` with status 500.
fn not_server_500(e: &ModelError) -> Outcome {
    fail(format!(
        "kind {:?} status {:?}, expected Server with status 500 ({e})",
        e.kind(),
        e.status()
    ))
}

/// Passes when the server sees the provider close the connection after its error.
async fn closed_after_giving_up(server: &FixtureServer) -> Outcome {
    if server.wait_disconnect(Duration::from_secs(2)).await {
        Outcome::Passed
    } else {
        fail("after giving up, the provider kept the connection open (2 s)")
    }
}

/// Runs one call and collects its events, stopping at the first error.
async fn collect<M: Model>(model: &M, request: ModelRequest) -> Collected {
    let mut stream = match model.stream(request).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => events.push(ev),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

/// Checks the normalized event grammar strictly: blocks never overlap, deltas only inside a
/// matching block, exactly one `MessageStop` with no block open, only `Metadata` after it.
pub fn check_grammar(events: &[StreamEvent]) -> Result<(), String> {
    #[derive(PartialEq)]
    enum K {
        Text,
        Tool,
        Reasoning,
    }
    let mut open: Option<K> = None;
    let mut stopped = false;
    for (i, ev) in events.iter().enumerate() {
        if stopped && !matches!(ev, StreamEvent::Metadata { .. }) {
            return Err(format!("event {i} ({ev:?}) after MessageStop"));
        }
        match ev {
            StreamEvent::MessageStart { .. } if i != 0 => {
                return Err(format!("MessageStart at position {i}"));
            }
            StreamEvent::BlockStart(b) => {
                if open.is_some() {
                    return Err(format!("event {i}: block start while a block is open"));
                }
                open = Some(match b {
                    BlockStart::Text => K::Text,
                    BlockStart::ToolUse { .. } => K::Tool,
                    _ => K::Reasoning,
                });
            }
            // A provider's state belongs to a tool use or reasoning (a text block drops it).
            StreamEvent::BlockDelta(d @ BlockDelta::ProviderState(_)) if open.is_none() => {
                return Err(format!("event {i}: {d:?} outside a block"));
            }
            StreamEvent::BlockDelta(BlockDelta::ProviderState(_)) => {}
            StreamEvent::BlockDelta(d) => {
                let want = match d {
                    BlockDelta::Text(_) => K::Text,
                    BlockDelta::ToolInput(_) => K::Tool,
                    _ => K::Reasoning,
                };
                if open.as_ref() != Some(&want) {
                    return Err(format!("event {i}: {d:?} outside a matching block"));
                }
            }
            StreamEvent::BlockStop if open.take().is_none() => {
                return Err(format!("event {i}: block stop without a block"));
            }
            StreamEvent::MessageStop { .. } => {
                if open.is_some() {
                    return Err(format!("event {i}: MessageStop with a block open"));
                }
                stopped = true;
            }
            _ => {}
        }
    }
    if !stopped {
        return Err("no MessageStop".into());
    }
    Ok(())
}
