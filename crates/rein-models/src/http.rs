//! The provider kit (feature `http-kit`): the HTTP plumbing Rein's own providers are built
//! on, for writing a provider of your own.
//!
//! - [`client`]: a reqwest client with rustls (ring, webpki roots) and a connect timeout;
//! - [`client`]'s [`redirect_policy`]: redirects are followed only within the origin of the
//!   request (307 and 308), so an API key, a gateway header or the conversation never reach
//!   another host;
//! - [`stream_sse`] / [`stream_body`]: send a request with the idle timeout bounding the wait
//!   for the response headers, map an error status to a typed [`ModelError`] (reading at most
//!   [`MAX_ERROR_BODY`] of the body, each read bounded by the idle timeout), treat a JSON body
//!   where a stream was expected (an error sent with status 200) as an error, then run your
//!   wire decoder ([`SseDecoder`] over server-sent events, [`BodyDecoder`] over raw chunks)
//!   with every wait for more bytes bounded by the idle timeout and the response's size by
//!   [`StreamLimits`], and end with the `Metadata` event (usage, latency, time to first
//!   byte). Dropping the stream closes the connection;
//! - [`send`], [`read_error_body`]: the first half alone;
//! - [`status_error`], [`default_error`], [`is_context_overflow`], [`error_message`]: status →
//!   [`ModelError`] (401/403 auth, 408 timeout, 429/529 throttled, context-overflow wording,
//!   4xx bad request, 5xx server), [`retry_after`] / [`parse_retry_after`]: `retry-after-ms`,
//!   `retry-after` seconds, decimal seconds or HTTP date;
//! - [`TokenProvider`]: a bearer token fetched per request, for credentials that rotate (Vertex
//!   AI, Azure OpenAI with Microsoft Entra ID), set on any provider's builder with
//!   `token_provider(..)` instead of a fixed key;
//! - [`LineDecoder`]: newline-delimited framing with a line-length bound; [`Blocks`]: opens
//!   and closes content blocks so a decoder emits a valid event sequence; [`parse_json`].
//!
//! **Versioning**: [`client`], [`send`], [`stream_sse`], [`stream_body`], [`ErrorMap`] and
//! [`retry_after`] take or return reqwest types, re-exported as [`reqwest`]: this module follows
//! reqwest's major version (today 0.13), and a reqwest major bump is a breaking change of this
//! module (not of the rest of `rein-models`). Use `rein_models::http::reqwest` rather than a
//! reqwest dependency of your own, so the versions always match.
//!
//! `crates/rein-models/examples/kit_provider.rs` is a complete provider built on the kit; it
//! passes the conformance suite (`tests/it/kit_provider.rs`).

#![cfg_attr(
    not(all(feature = "openai", feature = "anthropic", feature = "ollama")),
    allow(dead_code, reason = "each driver serves only some providers")
)]

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_core::Stream;
use futures_util::StreamExt as _;
use rein_core::{
    Error, ModelError,
    error::{BuildError, ModelErrorKind},
    message::MediaSource,
    stream::{BlockDelta, BlockStart, StreamEvent, StreamMetrics, Usage},
};

use crate::model::ModelStream;

/// The reqwest crate the kit's signatures use (see the module docs on versioning).
pub use reqwest;

/// Default connect timeout of Rein's providers (10 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default stream idle timeout of Rein's providers (120 s; it also bounds the wait for the
/// response headers).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// At most this much of an error response body is read and kept (64 KiB).
pub const MAX_ERROR_BODY: usize = 64 * 1024;
/// At most this many same-origin redirects are followed for one request.
const MAX_REDIRECTS: usize = 10;

/// Size limits of one streamed response: what a hostile or broken endpoint can make Rein
/// buffer. Exceeding one ends the stream with a [`ModelErrorKind::ResponseTooLarge`] error
/// (not retryable) and closes the connection. Set them on a provider's builder
/// (`.stream_limits(..)`) or pass them to [`stream_sse`] / [`stream_body`].
///
/// ```
/// use rein_models::http::StreamLimits;
/// let mut limits = StreamLimits::default();
/// limits.max_response = 16 * 1024 * 1024;
/// assert_eq!(limits.max_line, StreamLimits::DEFAULT_MAX_LINE);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamLimits {
    /// The longest line of a line-framed body (an SSE line, an NDJSON line), without its end
    /// of line. Default [`DEFAULT_MAX_LINE`](Self::DEFAULT_MAX_LINE), 8 MiB.
    pub max_line: usize,
    /// The largest event: an SSE event's data (its `data` lines joined), a binary event-stream
    /// frame (Bedrock). Default [`DEFAULT_MAX_EVENT`](Self::DEFAULT_MAX_EVENT), 16 MiB.
    pub max_event: usize,
    /// The most bytes of one response body (every byte counts, keep-alive comments
    /// included). Default [`DEFAULT_MAX_RESPONSE`](Self::DEFAULT_MAX_RESPONSE), 128 MiB: a
    /// streamed answer of 128 000 output tokens takes about 30 MiB of OpenAI's or Anthropic's
    /// event stream.
    pub max_response: usize,
}

impl StreamLimits {
    /// Default [`max_line`](Self::max_line): 8 MiB.
    pub const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;
    /// Default [`max_event`](Self::max_event): 16 MiB (also the event-stream format's own
    /// frame limit).
    pub const DEFAULT_MAX_EVENT: usize = 16 * 1024 * 1024;
    /// Default [`max_response`](Self::max_response): 128 MiB.
    pub const DEFAULT_MAX_RESPONSE: usize = 128 * 1024 * 1024;
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            max_line: Self::DEFAULT_MAX_LINE,
            max_event: Self::DEFAULT_MAX_EVENT,
            max_response: Self::DEFAULT_MAX_RESPONSE,
        }
    }
}

/// The error of a response over one of its [`StreamLimits`].
pub(crate) fn too_large(provider: &str, what: &str, limit: usize) -> ModelError {
    ModelError::response_too_large(format!(
        "{provider}: {what} larger than {limit} bytes (a limit of the provider's stream_limits)"
    ))
}

/// An API key. Its `Debug` never shows the key.
#[derive(Clone)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The bytes of an image or document source.
/// Supplies the bearer token of each request, for credentials that rotate: Vertex AI's OAuth
/// access tokens, Azure OpenAI with Microsoft Entra ID, a gateway's short-lived tokens. Set it on
/// a provider's builder with `token_provider(..)` instead of `api_key(..)`; the token is sent as
/// `Authorization: Bearer <token>`, whatever header the provider's API key goes in.
///
/// It is called before every request (each attempt of a retry, each model of a fallback chain),
/// so keep the token and refresh it shortly before it expires rather than fetching one per call.
/// A failure ends the call with the error returned: [`ModelError::auth`] for a refused
/// credential, [`ModelError::transport`] or [`ModelError::timeout`] for a token endpoint that
/// could not be reached (those are retried like any model call). The token never appears in
/// `Debug`, logs or errors.
///
/// ```
/// use rein_models::{ModelError, http::TokenProvider};
///
/// /// A token another task keeps fresh (e.g. from `gcloud auth print-access-token`).
/// struct Refreshed(tokio::sync::watch::Receiver<String>);
///
/// impl TokenProvider for Refreshed {
///     async fn token(&self) -> Result<String, ModelError> {
///         Ok(self.0.borrow().clone())
///     }
/// }
/// ```
pub trait TokenProvider: Send + Sync + 'static {
    /// A token valid now.
    fn token(&self) -> impl Future<Output = Result<String, ModelError>> + Send;
}

/// [`TokenProvider`] made object-safe, so the settings hold any provider behind one pointer.
trait ErasedTokenProvider: Send + Sync {
    fn token(&self) -> Pin<Box<dyn Future<Output = Result<String, ModelError>> + Send + '_>>;
}

impl<T: TokenProvider> ErasedTokenProvider for T {
    fn token(&self) -> Pin<Box<dyn Future<Output = Result<String, ModelError>> + Send + '_>> {
        Box::pin(TokenProvider::token(self))
    }
}

/// A provider's [`TokenProvider`], shared by its clones.
#[derive(Clone)]
pub(crate) struct SharedTokenProvider(Arc<dyn ErasedTokenProvider>);

impl SharedTokenProvider {
    pub(crate) fn new(provider: impl TokenProvider) -> Self {
        Self(Arc::new(provider))
    }
}

pub(crate) fn media_bytes(source: &MediaSource) -> &[u8] {
    match source {
        MediaSource::Bytes(b) => &b.0,
        _ => &[],
    }
}

/// The MIME type of an image block's format (`png` unless it names another one).
pub(crate) fn image_mime(format: &str) -> &'static str {
    match format {
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => "image/png",
    }
}

/// The encoded messages that get the history's prompt-cache points (`CachePoints::history`):
/// the last one, and the user message before it — where the previous request of a tool loop
/// ended, so a turn that adds many blocks still reads what the previous one cached.
pub(crate) fn history_cache_points(messages: &[serde_json::Value]) -> [Option<usize>; 2] {
    let last = messages.len().checked_sub(1);
    let previous_user =
        last.and_then(|last| messages[..last].iter().rposition(|m| m["role"] == "user"));
    [last, previous_user]
}

/// A header value marked sensitive (hidden from HTTP-level debug output), for credentials.
pub(crate) fn secret_header(value: &str) -> Result<reqwest::header::HeaderValue, ModelError> {
    let mut v = reqwest::header::HeaderValue::from_str(value)
        .map_err(|_| ModelError::bad_request("the API key is not a valid HTTP header value"))?;
    v.set_sensitive(true);
    Ok(v)
}

/// Checks that an API key can be sent in a header (without showing it in the error).
pub(crate) fn check_key(key: &Secret) -> Result<(), Error> {
    if reqwest::header::HeaderValue::from_str(key.expose()).is_err() {
        return Err(invalid(
            "API key",
            "it contains characters not allowed in an HTTP header",
        ));
    }
    Ok(())
}

/// A provider setting that cannot work (never pass a secret as `reason`).
fn invalid(setting: &'static str, reason: impl Into<String>) -> Error {
    BuildError::InvalidSetting {
        component: "model provider",
        setting,
        reason: reason.into(),
    }
    .into()
}

/// Reads a non-empty environment variable.
pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Checks a base URL and strips its trailing slashes.
pub(crate) fn check_base_url(base: &str) -> Result<String, Error> {
    let trimmed = base.trim().trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(trimmed.to_owned()),
        Ok(u) => Err(invalid(
            "base URL",
            format!("it must be http or https, not '{}'", u.scheme()),
        )),
        Err(e) => Err(invalid("base URL", format!("'{trimmed}': {e}"))),
    }
}

/// Builds the HTTP client of Rein's providers: rustls (ring, the webpki roots, HTTP/1.1), the
/// connect timeout, no overall timeout (streams may be long: [`stream_sse`] and
/// [`stream_body`] bound each wait instead), [`redirect_policy`]. A failure is an
/// [`Error::Build`].
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config()?)
        .connect_timeout(connect_timeout)
        .redirect(redirect_policy())
        .build()
        .map_err(|e| invalid("HTTP client", e.to_string()))
}

/// The redirect policy of every HTTP client Rein builds (its providers, rein-otel's OTLP
/// exporter): a redirect is followed only when it keeps the method and body (307, 308) and
/// stays within the origin (scheme, host and port) of the request, at most 10 times. Any other
/// redirect is not followed: the 3xx response is the answer (the providers make it a
/// `BadRequest` error naming the origin). reqwest's default follows redirects to other hosts
/// and strips only `Authorization` and cookies on the way: an `x-api-key`, a gateway's header
/// or an OTLP header, and the request body, would reach the other host.
pub fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// The TLS set-up of every provider: rustls with the ring provider and the Mozilla roots of
/// `webpki-roots`, HTTP/1.1. Given to reqwest ready-made, so no process-wide rustls provider
/// is needed or installed (reqwest 0.13 would otherwise look for one, or need aws-lc). Other
/// Rein crates on reqwest (rein-otel's OTLP client) use it too.
pub fn tls_config() -> Result<rustls::ClientConfig, Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| invalid("HTTP client", format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The connection settings every HTTP provider's builder holds: base URL, API key, extra
/// headers and timeouts.
#[derive(Clone)]
pub(crate) struct HttpSettings {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<Secret>,
    pub(crate) token_provider: Option<SharedTokenProvider>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) limits: StreamLimits,
}

impl fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values may carry credentials: only their names are shown.
        f.debug_struct("HttpSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("token_provider", &self.token_provider.is_some())
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("limits", &self.limits)
            .finish()
    }
}

impl HttpSettings {
    /// Settings for `base_url` with no key, no extra header and the default timeouts.
    pub(crate) fn new(base_url: &str) -> Self {
        Self {
            base_url: base_url.to_owned(),
            api_key: None,
            token_provider: None,
            headers: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            limits: StreamLimits::default(),
        }
    }

    /// Takes the base URL from the environment variable `var` when it is set (non-empty).
    pub(crate) fn base_url_from_env(&mut self, var: &str) {
        if let Some(url) = env_var(var) {
            self.base_url = url;
        }
    }

    /// Takes the API key from the environment variable `var` when it is set (non-empty).
    pub(crate) fn key_from_env(&mut self, var: &str) {
        if let Some(key) = env_var(var) {
            self.api_key = Some(Secret::new(key));
        }
    }

    /// Checks the base URL, key and headers and builds the client; requests go to
    /// `{base_url}{path}`.
    pub(crate) fn connect(mut self, path: &str) -> Result<HttpEndpoint, Error> {
        self.base_url = check_base_url(&self.base_url)?;
        if let Some(key) = &self.api_key {
            check_key(key)?;
            if self.token_provider.is_some() {
                return Err(invalid(
                    "token provider",
                    "set an API key or a token provider, not both",
                ));
            }
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        // Parsed once here, not by reqwest on every request.
        let url = reqwest::Url::parse(&format!("{}{path}", self.base_url))
            .map_err(|e| invalid("base URL", e.to_string()))?;
        Ok(HttpEndpoint {
            client: client(self.connect_timeout)?,
            url,
            settings: self,
        })
    }
}

/// Checks that a header name and value can be sent.
pub(crate) fn check_header(name: &str, value: &str) -> Result<(), Error> {
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
        || reqwest::header::HeaderValue::from_str(value).is_err()
    {
        return Err(invalid("HTTP header", format!("'{name}'")));
    }
    Ok(())
}

/// How a provider sends its API key.
#[derive(Clone, Copy)]
pub(crate) enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// The key as the value of this header (e.g. `x-api-key`).
    Named(&'static str),
}

/// A provider's checked settings with the HTTP client built from them.
#[derive(Clone)]
pub(crate) struct HttpEndpoint {
    client: reqwest::Client,
    url: reqwest::Url,
    settings: HttpSettings,
}

impl fmt::Debug for HttpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

impl HttpEndpoint {
    /// The base URL without trailing slashes.
    pub(crate) fn base_url(&self) -> &str {
        &self.settings.base_url
    }

    /// Host and port of the base URL (the port the scheme's when not given).
    pub(crate) fn server(&self) -> Option<(String, u16)> {
        let url = reqwest::Url::parse(&self.settings.base_url).ok()?;
        Some((url.host_str()?.to_owned(), url.port_or_known_default()?))
    }

    /// [`ModelInfo`](crate::ModelInfo) of a provider calling this endpoint.
    pub(crate) fn info(&self, provider: &str, model_id: &str) -> crate::ModelInfo {
        let info = crate::ModelInfo::new(provider, model_id);
        match self.server() {
            Some((host, port)) => info.with_server(host, port),
            None => info,
        }
    }

    /// The stream idle timeout.
    pub(crate) fn idle_timeout(&self) -> Duration {
        self.settings.idle_timeout
    }

    /// The size limits of a response.
    pub(crate) fn limits(&self) -> StreamLimits {
        self.settings.limits
    }

    /// A JSON `POST` to the endpoint's URL accepting `accept`, with the API key (sent as `key`)
    /// or the token provider's token, and the extra headers.
    pub(crate) async fn post(
        &self,
        accept: &str,
        key: KeyHeader,
        body: impl Into<reqwest::Body>,
    ) -> Result<reqwest::RequestBuilder, ModelError> {
        let mut rb = self
            .client
            .post(self.url.clone())
            .header("accept", accept)
            .header("content-type", "application/json")
            .body(body);
        if let Some(provider) = &self.settings.token_provider {
            let token = provider.0.token().await?;
            rb = rb.header(
                "authorization",
                secret_header(&format!("Bearer {token}")).map_err(|_| {
                    ModelError::auth("the token provider's token is not a valid HTTP header value")
                })?,
            );
        } else if let Some(k) = &self.settings.api_key {
            rb = match key {
                KeyHeader::Bearer => rb.header(
                    "authorization",
                    secret_header(&format!("Bearer {}", k.expose()))?,
                ),
                KeyHeader::Named(name) => rb.header(name, secret_header(k.expose())?),
            };
        }
        for (n, v) in &self.settings.headers {
            rb = rb.header(n.as_str(), v.as_str());
        }
        Ok(rb)
    }
}

impl HttpEndpoint {
    /// Sends `request` and streams the SSE response through `decoder` (see [`stream_sse`]).
    pub(crate) async fn stream_sse<D: SseDecoder>(
        &self,
        provider: &'static str,
        request: reqwest::RequestBuilder,
        decoder: D,
    ) -> Result<ModelStream, ModelError> {
        stream_sse(
            provider,
            request,
            decoder,
            self.idle_timeout(),
            self.limits(),
            default_error,
        )
        .await
    }

    /// Sends `request` and streams the raw response body through `decoder` (see
    /// [`stream_body`]).
    pub(crate) async fn stream_body<D: BodyDecoder>(
        &self,
        provider: &'static str,
        request: reqwest::RequestBuilder,
        decoder: D,
        on_error: ErrorMap,
    ) -> Result<ModelStream, ModelError> {
        stream_body(
            provider,
            request,
            decoder,
            self.idle_timeout(),
            self.limits(),
            on_error,
        )
        .await
    }
}

/// Sends `request` ([`send`]: the wait for the headers bounded by `idle`, an error status
/// mapped by `on_error`, e.g. [`default_error`]) and streams the server-sent events of the
/// response through `decoder`: every wait for more bytes is bounded by `idle` (any bytes count,
/// SSE comments included), a line, an event and the whole body by `limits` (a
/// `ResponseTooLarge` error past one), and the stream ends with a `Metadata` event (the
/// decoder's usage, latency, time to first byte) after [`WireDecoder::finish`]. Dropping the
/// stream closes the connection. `provider` prefixes error messages.
///
/// The events are framed as the WHATWG standard says (lines end with CRLF, LF or CR; `data`
/// lines join with `\n`; a nameless event is `message`; comments, `id` and `retry` are
/// skipped; an event not ended by a blank line when the body ends is dropped), in one pass
/// over the bytes.
pub async fn stream_sse<D: SseDecoder>(
    provider: &'static str,
    request: reqwest::RequestBuilder,
    decoder: D,
    idle: Duration,
    limits: StreamLimits,
    on_error: ErrorMap,
) -> Result<ModelStream, ModelError> {
    let started = Instant::now();
    let response = send(provider, request, idle, on_error).await?;
    let decoder = Sse {
        framer: SseFramer::new(provider, limits),
        decoder,
    };
    Ok(model_stream(
        provider, response, decoder, idle, limits, started,
    ))
}

/// [`stream_sse`] for a body that is not server-sent events (NDJSON, binary frames): the raw
/// chunks go to `decoder` (use [`LineDecoder`] for newline-delimited formats, with
/// `limits.max_line`); `limits.max_response` bounds the body.
pub async fn stream_body<D: BodyDecoder>(
    provider: &'static str,
    request: reqwest::RequestBuilder,
    decoder: D,
    idle: Duration,
    limits: StreamLimits,
    on_error: ErrorMap,
) -> Result<ModelStream, ModelError> {
    let started = Instant::now();
    let response = send(provider, request, idle, on_error).await?;
    Ok(model_stream(
        provider,
        response,
        Body(decoder),
        idle,
        limits,
        started,
    ))
}

/// Server-sent events framing (the WHATWG `text/event-stream` parser), bounded by
/// [`StreamLimits`] and linear in its input: each byte is looked at once, and copied only when
/// a chunk ends inside its line.
#[derive(Debug)]
pub(crate) struct SseFramer {
    provider: &'static str,
    limits: StreamLimits,
    /// The start of a line that a chunk boundary cut.
    partial: Vec<u8>,
    /// The last chunk ended with CR: an LF opening the next one belongs to it.
    after_cr: bool,
    /// No line has ended yet: a byte order mark may open the first.
    first_line: bool,
    /// The event's name (`event:`), empty when none.
    name: String,
    /// The event's data (`data:` lines, each followed by `\n`).
    data: String,
    /// Bytes looked at for a line end, over the whole stream (each exactly once).
    scanned: u64,
}

impl SseFramer {
    pub(crate) fn new(provider: &'static str, limits: StreamLimits) -> Self {
        Self {
            provider,
            limits,
            partial: Vec::new(),
            after_cr: false,
            first_line: true,
            name: String::new(),
            data: String::new(),
            scanned: 0,
        }
    }

    /// Frames the next chunk, calling `on_event(name, data)` for each complete event until it
    /// returns `Done` or an error.
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        on_event: &mut impl FnMut(&str, &str) -> Result<Flow, ModelError>,
    ) -> Result<Flow, ModelError> {
        if bytes.is_empty() {
            return Ok(Flow::Continue);
        }
        if std::mem::take(&mut self.after_cr) && bytes[0] == b'\n' {
            bytes = &bytes[1..];
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.scanned += end as u64 + 1;
            let (line, rest) = bytes.split_at(end);
            bytes = &rest[1..];
            if rest[0] == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let flow = if self.partial.is_empty() {
                self.line(line, on_event)?
            } else {
                self.extend_partial(line)?;
                let whole = std::mem::take(&mut self.partial);
                let flow = self.line(&whole, on_event);
                // Keep the allocation for the next cut line.
                self.partial = whole;
                self.partial.clear();
                flow?
            };
            if flow == Flow::Done {
                return Ok(Flow::Done);
            }
        }
        self.scanned += bytes.len() as u64;
        self.extend_partial(bytes)?;
        Ok(Flow::Continue)
    }

    /// Bytes looked at for a line end so far.
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn scanned(&self) -> u64 {
        self.scanned
    }

    fn extend_partial(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        if self.partial.len().saturating_add(bytes.len()) > self.limits.max_line {
            self.partial = Vec::new();
            return Err(too_large(
                self.provider,
                "a server-sent events line",
                self.limits.max_line,
            ));
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    fn line(
        &mut self,
        mut line: &[u8],
        on_event: &mut impl FnMut(&str, &str) -> Result<Flow, ModelError>,
    ) -> Result<Flow, ModelError> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.len() > self.limits.max_line {
            return Err(too_large(
                self.provider,
                "a server-sent events line",
                self.limits.max_line,
            ));
        }
        match line.first() {
            None => return self.dispatch(on_event),
            Some(b':') => return Ok(Flow::Continue),
            Some(_) => {}
        }
        let Ok(line) = std::str::from_utf8(line) else {
            return Err(ModelError::malformed_stream(format!(
                "{}: a server-sent events line is not UTF-8",
                self.provider
            )));
        };
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > self.limits.max_event {
                    self.data = String::new();
                    return Err(too_large(
                        self.provider,
                        "a server-sent event",
                        self.limits.max_event,
                    ));
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => {
                self.name.clear();
                self.name.push_str(value);
            }
            // `id` and `retry` serve reconnection, which a model call does not do; other
            // fields are ignored, as the standard says.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    /// A blank line: the event is complete (no `data`: nothing is dispatched).
    fn dispatch(
        &mut self,
        on_event: &mut impl FnMut(&str, &str) -> Result<Flow, ModelError>,
    ) -> Result<Flow, ModelError> {
        if self.data.is_empty() {
            self.name.clear();
            return Ok(Flow::Continue);
        }
        self.data.pop();
        let name = if self.name.is_empty() {
            "message"
        } else {
            &self.name
        };
        let flow = on_event(name, &self.data);
        self.name.clear();
        self.data.clear();
        flow
    }
}

/// Newline-delimited framing with a bound on the line length, for [`BodyDecoder`]s of NDJSON
/// and similar formats: chunks may split lines anywhere; memory stays bounded on hostile input.
#[derive(Debug, Clone)]
pub struct LineDecoder {
    provider: &'static str,
    max_line: usize,
    buf: Vec<u8>,
}

impl LineDecoder {
    /// Lines of at most `max_line` bytes (without the `\n`); `provider` prefixes the error.
    pub fn new(provider: &'static str, max_line: usize) -> Self {
        Self {
            provider,
            max_line,
            buf: Vec::new(),
        }
    }

    /// Feeds a chunk: calls `on_line` with each complete line (without its `\n`; a `\r`
    /// before it is kept), in order, and stops at the first `Flow::Done` or error. A line
    /// longer than the bound is a `ResponseTooLarge` error. Each byte is looked at once.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        mut on_line: impl FnMut(&[u8]) -> Result<Flow, ModelError>,
    ) -> Result<Flow, ModelError> {
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(pos);
            rest = &tail[1..];
            self.push(head)?;
            let line = std::mem::take(&mut self.buf);
            if on_line(&line)? == Flow::Done {
                return Ok(Flow::Done);
            }
        }
        self.push(rest)?;
        Ok(Flow::Continue)
    }

    /// The bytes after the last `\n` (a final line without a newline), emptied.
    pub fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    fn push(&mut self, b: &[u8]) -> Result<(), ModelError> {
        if self.buf.len().saturating_add(b.len()) > self.max_line {
            self.buf = Vec::new();
            return Err(too_large(self.provider, "a stream line", self.max_line));
        }
        self.buf.extend_from_slice(b);
        Ok(())
    }
}

/// The kind of the content block [`Blocks`] has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenBlock {
    /// A text block.
    Text,
    /// A reasoning block.
    Reasoning,
    /// A tool-use block.
    ToolUse,
}

/// Opens and closes content blocks for a wire decoder, so its events follow the grammar the
/// agent expects (one block at a time; deltas only inside a block of their kind; no block
/// open at `MessageStop`): a text delta after reasoning closes the reasoning block and opens a
/// text block, and so on.
#[derive(Debug, Clone, Default)]
pub struct Blocks {
    open: Option<OpenBlock>,
}

impl Blocks {
    /// No block open.
    pub fn new() -> Self {
        Self::default()
    }

    /// The open block's kind.
    pub fn open(&self) -> Option<OpenBlock> {
        self.open
    }

    /// A text delta (empty text is skipped), opening a text block unless one is open.
    pub fn text(&mut self, text: impl Into<String>, out: &mut VecDeque<StreamEvent>) {
        let text = text.into();
        if text.is_empty() {
            return;
        }
        self.ensure(OpenBlock::Text, BlockStart::Text, out);
        out.push_back(StreamEvent::BlockDelta(BlockDelta::Text(text)));
    }

    /// A reasoning-text delta (empty text is skipped), opening a reasoning block unless one is
    /// open.
    pub fn reasoning(&mut self, text: impl Into<String>, out: &mut VecDeque<StreamEvent>) {
        let text = text.into();
        if text.is_empty() {
            return;
        }
        self.ensure(OpenBlock::Reasoning, BlockStart::Reasoning, out);
        out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningText(text)));
    }

    /// The signature of the reasoning block: opens one unless one is open.
    pub fn reasoning_signature(
        &mut self,
        signature: impl Into<String>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        self.ensure(OpenBlock::Reasoning, BlockStart::Reasoning, out);
        out.push_back(StreamEvent::BlockDelta(BlockDelta::ReasoningSignature(
            signature.into(),
        )));
    }

    /// Starts a tool use (closing the open block, a previous tool use included).
    pub fn tool_use(
        &mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        self.close(out);
        out.push_back(StreamEvent::BlockStart(BlockStart::ToolUse {
            tool_use_id: id.into(),
            name: name.into(),
        }));
        self.open = Some(OpenBlock::ToolUse);
    }

    /// A fragment of the open tool use's JSON input; a `MalformedStream` error (prefixed with
    /// `provider`) when no tool use is open.
    pub fn tool_input(
        &mut self,
        provider: &str,
        fragment: impl Into<String>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ModelError> {
        if self.open != Some(OpenBlock::ToolUse) {
            return Err(ModelError::malformed_stream(format!(
                "{provider}: tool input outside a tool use"
            )));
        }
        let fragment = fragment.into();
        if !fragment.is_empty() {
            out.push_back(StreamEvent::BlockDelta(BlockDelta::ToolInput(fragment)));
        }
        Ok(())
    }

    /// Closes the open block, if any (call it before `MessageStop`).
    pub fn close(&mut self, out: &mut VecDeque<StreamEvent>) {
        if self.open.take().is_some() {
            out.push_back(StreamEvent::BlockStop);
        }
    }

    fn ensure(&mut self, kind: OpenBlock, start: BlockStart, out: &mut VecDeque<StreamEvent>) {
        if self.open != Some(kind) {
            self.close(out);
            out.push_back(StreamEvent::BlockStart(start));
            self.open = Some(kind);
        }
    }
}

/// The builder methods every HTTP provider shares. The builder has a field `http:
/// HttpSettings`. With doc texts, the `base_url` and `api_key` setters too (their docs say what
/// the provider's URL and key look like).
#[cfg(any(
    feature = "openai",
    feature = "anthropic",
    feature = "gemini",
    feature = "ollama",
    feature = "bedrock"
))]
macro_rules! http_builder_methods {
    (base_url: $base_url_doc:literal, api_key: $api_key_doc:literal $(,)?) => {
        #[doc = $base_url_doc]
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.http.base_url = url.into();
            self
        }

        #[doc = $api_key_doc]
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            self.http.api_key = Some($crate::http::Secret::new(key));
            self
        }

        /// Where each request's bearer token comes from, instead of a fixed API key (Vertex
        /// AI, Azure OpenAI with Microsoft Entra ID): sent as `Authorization: Bearer`, fetched
        /// before every request. Setting both this and an API key fails the build. See
        /// [`TokenProvider`](crate::http::TokenProvider).
        pub fn token_provider(mut self, provider: impl $crate::http::TokenProvider) -> Self {
            self.http.token_provider = Some($crate::http::SharedTokenProvider::new(provider));
            self
        }

        $crate::http::http_builder_methods!();
    };
    () => {
        /// An extra HTTP header on every request (e.g. for a gateway). Only its name is shown
        /// by `Debug`.
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.http.headers.push((name.into(), value.into()));
            self
        }

        /// TCP connect timeout (default 10 s); exceeding it is a retryable `Timeout` error.
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.connect_timeout = timeout;
            self
        }

        /// Longest wait for the response headers and between two stream chunks (default
        /// 120 s); exceeding it is a retryable `Timeout` error.
        pub fn idle_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.idle_timeout = timeout;
            self
        }

        /// Size limits of a streamed response (default [`StreamLimits::default`]: lines of
        /// 8 MiB, events of 16 MiB, 128 MiB in all); exceeding one is a `ResponseTooLarge`
        /// error.
        ///
        /// [`StreamLimits::default`]: crate::http::StreamLimits
        pub fn stream_limits(mut self, limits: $crate::http::StreamLimits) -> Self {
            self.http.limits = limits;
            self
        }
    };
}
#[cfg(any(
    feature = "openai",
    feature = "anthropic",
    feature = "gemini",
    feature = "ollama",
    feature = "bedrock"
))]
pub(crate) use http_builder_methods;

/// Classifies a reqwest error raised before any response byte arrived.
fn send_error(provider: &str, e: reqwest::Error) -> ModelError {
    if e.is_redirect() {
        return ModelError::bad_request(format!("{provider}: {}", error_chain(&e))).with_source(e);
    }
    let what = if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let kind = if e.is_timeout() {
        ModelErrorKind::Timeout
    } else {
        ModelErrorKind::Transport
    };
    let msg = format!("{provider}: {what}: {}", error_chain(&e));
    ModelError::new(kind, msg)
        .before_first_byte()
        .with_source(e)
}

/// An error and its sources on one line (reqwest's own `Display` omits the cause).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        cur = c.source();
    }
    s
}

/// Maps an HTTP error response (provider, status, headers, body) to a typed error; see
/// [`default_error`].
pub type ErrorMap = fn(&str, u16, &reqwest::header::HeaderMap, String) -> ModelError;

/// The error mapping of [`status_error`] with the shared context-overflow wording
/// ([`is_context_overflow`]) and the `retry-after` headers ([`retry_after`]).
pub fn default_error(
    provider: &str,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: String,
) -> ModelError {
    status_error(
        provider,
        status,
        retry_after(headers),
        body,
        is_context_overflow,
    )
}

/// Sends a request and checks the status, the wait for the response headers bounded by
/// `idle_timeout` (a retryable `Timeout`). A non-success status becomes the typed error that
/// `on_error` makes of it (with at most [`MAX_ERROR_BODY`] of the response body, see
/// [`read_error_body`]). A success with a JSON body (a server that ignored the stream flag, or
/// an error sent with status 200) is a `MalformedStream` error carrying the body and its
/// message. A redirect the client did not follow (see [`redirect_policy`]) is a `BadRequest`
/// naming the origin it pointed to. Connection failures are retryable `Transport` errors.
pub async fn send(
    provider: &str,
    request: reqwest::RequestBuilder,
    idle_timeout: Duration,
    on_error: ErrorMap,
) -> Result<reqwest::Response, ModelError> {
    let response = match tokio::time::timeout(idle_timeout, request.send()).await {
        Err(_) => {
            return Err(ModelError::timeout(format!(
                "{provider}: no response within {} ms",
                idle_timeout.as_millis()
            ))
            .before_first_byte());
        }
        Ok(Err(e)) => return Err(send_error(provider, e)),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if status.is_success() {
        let json_body = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().starts_with("application/json"));
        if !json_body {
            return Ok(response);
        }
        // A JSON body where an event stream was asked for: a proxy or server that ignored
        // `stream: true`, or an error reported with status 200.
        let body = read_error_body(response, idle_timeout).await;
        let detail = error_message(&body).unwrap_or_else(|| "no event stream".to_owned());
        return Err(ModelError::malformed_stream(format!(
            "{provider}: expected an event stream, got a JSON body: {detail}"
        ))
        .with_status(status.as_u16())
        .with_body(body));
    }
    if status.is_redirection() {
        // Not followed by [`redirect_policy`]: say where it pointed (the origin only: a
        // query may carry secrets).
        let to = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|l| response.url().join(l).ok())
            .map_or_else(
                || "nowhere".to_owned(),
                |u| u.origin().ascii_serialization(),
            );
        return Err(ModelError::bad_request(format!(
            "{provider}: HTTP {}: a redirect to {to} was not followed (only 307 and 308 \
             within the origin are, so credentials and the conversation never reach another \
             host): configure the final URL",
            status.as_u16()
        ))
        .with_status(status.as_u16()));
    }
    let headers = response.headers().clone();
    let body = read_error_body(response, idle_timeout).await;
    Err(on_error(provider, status.as_u16(), &headers, body))
}

/// Reads at most [`MAX_ERROR_BODY`] of a response body (lossy UTF-8), each wait for a chunk
/// bounded by `idle`: a body that stalls or never ends cannot hang the caller.
pub async fn read_error_body(mut response: reqwest::Response, idle: Duration) -> String {
    let mut buf: Vec<u8> = Vec::new();
    while buf.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    buf.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Maps an HTTP error status to a typed error.
///
/// | status | kind |
/// |---|---|
/// | 401, 403 | Auth |
/// | 429, 529 | Throttled (with `retry-after`) |
/// | 400, 413, 422 with a context-length message | ContextWindowOverflow |
/// | other 4xx | BadRequest |
/// | 408 | Timeout (retryable) |
/// | 5xx | Server |
pub fn status_error(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
    body: String,
    overflow: fn(&str) -> bool,
) -> ModelError {
    let detail = error_message(&body);
    let msg = match &detail {
        Some(d) => format!("{provider}: {d}"),
        None => format!("{provider}: HTTP {status}"),
    };
    let mut e = match status {
        401 | 403 => ModelError::auth(msg),
        429 | 529 => ModelError::throttled(msg),
        408 => ModelError::timeout(msg).before_first_byte(),
        400 | 413 | 422 if overflow(&body) => ModelError::context_window_overflow(msg),
        500..=599 => ModelError::server(msg),
        _ => ModelError::bad_request(msg),
    };
    if let Some(after) = retry_after {
        e = e.with_retry_after(after);
    }
    e.with_status(status).with_body(body)
}

/// The human-readable message of a JSON error body (`{"error": {"message": ...}}`,
/// `{"error": "..."}`, `{"message": ...}`).
pub fn error_message(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let err = v.get("error").unwrap_or(&v);
    if let Some(s) = err.as_str() {
        return Some(s.to_owned());
    }
    err.get("message")
        .and_then(|m| m.as_str())
        .or_else(|| v.get("message").and_then(|m| m.as_str()))
        .or_else(|| v.get("detail").and_then(|m| m.as_str()))
        .map(str::to_owned)
}

/// Whether an error body reports a context-window overflow (wording of OpenAI, vLLM, llama.cpp,
/// LM Studio, Ollama, LiteLLM, Anthropic and Gemini).
pub fn is_context_overflow(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "context length",
        "context window",
        "context_window",
        "maximum context",
        "context size",
        "exceed_context_size",
        "prompt is too long",
        "too many tokens",
        "input is too long",
        "reduce the length",
        // Gemini: "The input token count (…) exceeds the maximum number of tokens allowed".
        "input token count",
    ]
    .iter()
    .any(|p| b.contains(p))
}

/// Parses `retry-after-ms` (milliseconds) or `retry-after` (seconds, or an HTTP date).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && (0.0..1e12).contains(&ms)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    parse_retry_after(get("retry-after")?)
}

/// Parses a `retry-after` value: delay seconds (integer or decimal) or an IMF-fixdate. An
/// unparsable value gives `None` (the retry strategy's own backoff applies); a date in the past
/// gives zero.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (0.0..1e9)
            .contains(&secs)
            .then(|| Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(v)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) to Unix seconds.
fn parse_http_date(v: &str) -> Option<u64> {
    let rest = v.split_once(", ")?.1;
    let parts: Vec<&str> = rest.split_whitespace().collect();
    let [day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u64 = day.parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as u64
        + 1;
    let year: i64 = year.parse().ok()?;
    let hms: Vec<u64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    if !(1..=31).contains(&day) || !(1970..=9999).contains(&year) || *h > 23 || *m > 59 || *s > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + (*h * 3600 + *m * 60 + *s) as i64;
    u64::try_from(secs).ok()
}

/// What a wire decoder does with one input (an SSE event, a body chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// The provider said the message is complete; stop reading.
    Done,
}

/// The end of every wire decoder: what happens when the response body is over.
pub trait WireDecoder: Send + 'static {
    /// The byte stream ended (or `Done` was returned): push the final events, or fail when the
    /// message is incomplete.
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError>;

    /// Usage gathered so far (reported in the final `Metadata` event).
    fn usage(&self) -> Usage;
}

/// Turns one provider's SSE events into normalized [`StreamEvent`]s.
pub trait SseDecoder: WireDecoder {
    /// Handles one SSE event (`event` is the event name, empty when none).
    fn event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError>;
}

/// Turns one provider's raw response body (NDJSON lines, binary frames) into normalized
/// [`StreamEvent`]s. Chunks split the body anywhere: the decoder buffers partial units itself,
/// bounded, so hostile input cannot grow memory without limit.
pub trait BodyDecoder: WireDecoder {
    /// Handles the next chunk of the body.
    fn feed(&mut self, bytes: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<Flow, ModelError>;
}

/// A wire decoder as the stream driver runs it: fed the raw chunks of the body.
trait Decode: Send + 'static {
    fn decode(&mut self, chunk: &[u8], out: &mut VecDeque<StreamEvent>)
    -> Result<Flow, ModelError>;
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError>;
    fn usage(&self) -> Usage;
}

/// An [`SseDecoder`] behind the SSE framing.
struct Sse<D> {
    framer: SseFramer,
    decoder: D,
}

impl<D: SseDecoder> Decode for Sse<D> {
    fn decode(
        &mut self,
        chunk: &[u8],
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        let decoder = &mut self.decoder;
        self.framer
            .feed(chunk, &mut |name, data| decoder.event(name, data, out))
    }
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        self.decoder.finish(out)
    }
    fn usage(&self) -> Usage {
        self.decoder.usage()
    }
}

/// A [`BodyDecoder`] fed raw chunks.
struct Body<D>(D);

impl<D: BodyDecoder> Decode for Body<D> {
    fn decode(
        &mut self,
        chunk: &[u8],
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, ModelError> {
        self.0.feed(chunk, out)
    }
    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ModelError> {
        self.0.finish(out)
    }
    fn usage(&self) -> Usage {
        self.0.usage()
    }
}

/// What can interrupt the transport under a decoder.
#[derive(Debug)]
enum SourceError {
    /// The connection failed.
    Http(reqwest::Error),
    /// No bytes arrived within the idle timeout (`after_data`: some had arrived before).
    Idle { after_data: bool },
    /// The body grew past `max_response` bytes.
    TooLarge { limit: usize },
}

type Source<T> = Pin<Box<dyn Stream<Item = Result<T, SourceError>> + Send>>;

/// The response body as a byte stream in which every wait for the next chunk is bounded by
/// `idle` (any bytes, SSE keep-alive comments included, reset the clock), and which ends with
/// an error once more than `max_response` bytes came.
fn bounded_bytes(
    response: reqwest::Response,
    idle: Duration,
    max_response: usize,
) -> impl Stream<Item = Result<impl AsRef<[u8]> + Send + 'static, SourceError>> + Send + 'static {
    let body = Box::pin(response.bytes_stream());
    futures_util::stream::unfold(Some((body, 0usize)), move |state| async move {
        let (mut body, received) = state?;
        match tokio::time::timeout(idle, body.next()).await {
            Err(_) => Some((
                Err(SourceError::Idle {
                    after_data: received > 0,
                }),
                None,
            )),
            Ok(None) => None,
            Ok(Some(Ok(chunk))) => {
                let received = received.saturating_add(chunk.len());
                if received > max_response {
                    return Some((
                        Err(SourceError::TooLarge {
                            limit: max_response,
                        }),
                        None,
                    ));
                }
                Some((Ok(chunk), Some((body, received))))
            }
            Ok(Some(Err(e))) => Some((Err(SourceError::Http(e)), None)),
        }
    })
}

/// Runs a decoder over a successful streaming response. The returned stream owns the
/// response: dropping it closes the connection.
fn model_stream<D: Decode>(
    provider: &'static str,
    response: reqwest::Response,
    decoder: D,
    idle: Duration,
    limits: StreamLimits,
    started: Instant,
) -> ModelStream {
    let chunks = bounded_bytes(response, idle, limits.max_response);
    drive(provider, Box::pin(chunks), decoder, idle, started)
}

/// Runs a body decoder over in-memory chunks (no HTTP): the events, then the error that ended
/// decoding, if any. Used by unit tests, the fuzz targets and the property tests.
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn decode_body_chunks<'a, D: BodyDecoder>(
    decoder: D,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, Option<ModelError>) {
    decode_chunks(&mut Body(decoder), chunks)
}

/// [`decode_body_chunks`] for an SSE decoder (framed with `limits`); also returns the bytes
/// the framing looked at for line ends.
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn decode_sse_chunks<'a, D: SseDecoder>(
    decoder: D,
    limits: StreamLimits,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, Option<ModelError>, u64) {
    let mut sse = Sse {
        framer: SseFramer::new("sse", limits),
        decoder,
    };
    let (events, err) = decode_chunks(&mut sse, chunks);
    (events, err, sse.framer.scanned())
}

/// Feeds in-memory chunks to a decoder and finishes it.
#[cfg(any(test, feature = "test-util"))]
fn decode_chunks<'a>(
    decoder: &mut impl Decode,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, Option<ModelError>) {
    let mut out = VecDeque::new();
    for c in chunks {
        match decoder.decode(c, &mut out) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Done) => break,
            Err(e) => return (out.into(), Some(e)),
        }
    }
    let err = decoder.finish(&mut out).err();
    (out.into(), err)
}

/// Checks the ids of the tool uses started in `events`, `count` of them, as made up for calls a
/// server sent without one: none repeats, and each carries 128 random bits (32 hex digits) —
/// approvals are asked and answered by tool-use id (SPEC §4, §7).
#[cfg(test)]
pub(crate) fn assert_made_up_tool_ids(events: impl IntoIterator<Item = StreamEvent>, count: usize) {
    let ids: Vec<String> = events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::BlockStart(BlockStart::ToolUse { tool_use_id, .. }) => Some(tool_use_id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), count, "{ids:?}");
    for (n, id) in ids.iter().enumerate() {
        assert!(!ids[..n].contains(id), "{id} repeats: {ids:?}");
    }
    for id in &ids {
        let hex = id.rsplit('_').next().unwrap_or_default();
        assert!(
            hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id} is guessable"
        );
    }
}

fn drive<T: AsRef<[u8]> + Send + 'static, D: Decode>(
    provider: &'static str,
    source: Source<T>,
    decoder: D,
    idle: Duration,
    started: Instant,
) -> ModelStream {
    let state = Driver {
        provider,
        source: Some(source),
        decoder,
        pending: VecDeque::new(),
        idle,
        started,
        first_byte: None,
        finished: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut st| async move {
        let item = st.next_item().await?;
        Some((item, st))
    }))
}

/// The state of one streamed response: the transport, its decoder and the events decoded but
/// not yet yielded.
struct Driver<T, D> {
    provider: &'static str,
    source: Option<Source<T>>,
    decoder: D,
    pending: VecDeque<StreamEvent>,
    idle: Duration,
    started: Instant,
    first_byte: Option<Duration>,
    finished: bool,
}

impl<T: AsRef<[u8]>, D: Decode> Driver<T, D> {
    async fn next_item(&mut self) -> Option<Result<StreamEvent, ModelError>> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            if self.finished {
                return None;
            }
            let Some(source) = self.source.as_mut() else {
                return self.end();
            };
            match source.next().await {
                None => {
                    self.source = None;
                    return self.end();
                }
                Some(Err(e)) => {
                    let e = self.source_error(e);
                    self.fail();
                    return Some(Err(e));
                }
                Some(Ok(item)) => {
                    if self.first_byte.is_none() {
                        self.first_byte = Some(self.started.elapsed());
                    }
                    match self.decoder.decode(item.as_ref(), &mut self.pending) {
                        Ok(Flow::Continue) => {}
                        Ok(Flow::Done) => {
                            // Drop the response now: the message is complete.
                            self.source = None;
                            if let Some(e) = self.end_into_pending() {
                                return Some(Err(e));
                            }
                        }
                        Err(e) => {
                            self.fail();
                            return Some(Err(e));
                        }
                    }
                }
            }
        }
    }

    fn fail(&mut self) {
        self.finished = true;
        self.source = None;
        self.pending.clear();
    }

    /// Finishes the decoder into `pending`; returns an error to yield instead.
    fn end_into_pending(&mut self) -> Option<ModelError> {
        match self.decoder.finish(&mut self.pending) {
            Ok(()) => {
                self.pending.push_back(StreamEvent::Metadata {
                    usage: self.decoder.usage(),
                    metrics: StreamMetrics::new(Some(self.started.elapsed()), self.first_byte),
                });
                self.finished = true;
                None
            }
            Err(e) => {
                self.fail();
                Some(e)
            }
        }
    }

    fn end(&mut self) -> Option<Result<StreamEvent, ModelError>> {
        if let Some(e) = self.end_into_pending() {
            return Some(Err(e));
        }
        self.pending.pop_front().map(Ok)
    }

    fn source_error(&self, e: SourceError) -> ModelError {
        match e {
            SourceError::Idle { after_data } => {
                let e = ModelError::timeout(format!(
                    "{}: no stream data for {} ms",
                    self.provider,
                    self.idle.as_millis()
                ));
                if after_data { e } else { e.before_first_byte() }
            }
            SourceError::Http(t) => {
                let kind = if t.is_timeout() {
                    ModelErrorKind::Timeout
                } else {
                    ModelErrorKind::Transport
                };
                let msg = format!(
                    "{}: connection dropped mid-stream: {}",
                    self.provider,
                    error_chain(&t)
                );
                let mut err = ModelError::new(kind, msg).with_source(t);
                if self.first_byte.is_none() {
                    err = err.before_first_byte();
                }
                err
            }
            SourceError::TooLarge { limit } => too_large(self.provider, "the response", limit),
        }
    }
}

/// Parses one SSE data line as JSON, or fails with a typed malformed-stream error.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    provider: &str,
    data: &str,
) -> Result<T, ModelError> {
    serde_json::from_str(data).map_err(|e| {
        let shown: String = data.chars().take(200).collect();
        ModelError::malformed_stream(format!(
            "{provider}: stream data is not valid JSON ({e}): {shown}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames `body` cut into `size`-byte chunks: the (name, data) of each event, or the error.
    fn sse_events(
        body: &[u8],
        size: usize,
        limits: StreamLimits,
    ) -> (Vec<(String, String)>, Option<ModelError>, u64) {
        let mut framer = SseFramer::new("t", limits);
        let mut events = Vec::new();
        let mut on_event = |name: &str, data: &str| {
            events.push((name.to_owned(), data.to_owned()));
            Ok(Flow::Continue)
        };
        for chunk in body.chunks(size.max(1)) {
            if let Err(e) = framer.feed(chunk, &mut on_event) {
                return (events, Some(e), framer.scanned());
            }
        }
        let scanned = framer.scanned();
        (events, None, scanned)
    }

    #[test]
    fn sse_framing_follows_the_standard_at_every_chunk_boundary() {
        let body = "\u{feff}: comment\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\n\
                    data\rid: 7\rretry: 9\r\revent: ignored\n\ndata: x: y\n\
                    unknown: z\n\n\ndata: cut at the end";
        let expected = vec![
            ("a".to_owned(), "one\ntwo".to_owned()),
            ("message".to_owned(), String::new()),
            ("message".to_owned(), "x: y".to_owned()),
        ];
        for size in 1..=body.len() {
            let (events, err, scanned) = sse_events(body.as_bytes(), size, StreamLimits::default());
            assert!(err.is_none(), "{size}: {err:?}");
            assert_eq!(events, expected, "chunks of {size}");
            // A CRLF cut between two chunks is one line end: its LF is skipped, not scanned.
            assert!(scanned <= body.len() as u64, "{size}: {scanned}");
        }
        let (_, err, _) = sse_events(b"data: \xff\n\n", 3, StreamLimits::default());
        assert_eq!(err.unwrap().kind(), ModelErrorKind::MalformedStream);
    }

    /// Linear time without a clock: a 1 MiB line fed one byte at a time is looked at once per
    /// byte. (eventsource-stream, used before, re-parsed its whole buffer on every chunk: n²/2
    /// byte visits here, 5.5·10¹¹.)
    #[test]
    fn sse_framing_looks_at_each_byte_once() {
        let mut body = b"data: ".to_vec();
        body.extend(std::iter::repeat_n(b'a', 1 << 20));
        body.extend_from_slice(b"\n\n");
        for size in [1, 7, 4096] {
            let (events, err, scanned) = sse_events(&body, size, StreamLimits::default());
            assert!(err.is_none(), "{err:?}");
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].1.len(), 1 << 20);
            assert_eq!(scanned, body.len() as u64, "chunks of {size}");
        }
    }

    #[test]
    fn sse_lines_and_events_are_bounded() {
        let limits = StreamLimits {
            max_line: 100,
            max_event: 250,
            ..StreamLimits::default()
        };
        // A line that never ends: the error comes once the bound is passed, whatever the
        // chunking, and nothing past it is kept.
        let endless = vec![b'a'; 10_000];
        for size in [1, 99, 100, 101, 10_000] {
            let (_, err, scanned) = sse_events(&endless, size, limits);
            let err = err.unwrap();
            assert_eq!(err.kind(), ModelErrorKind::ResponseTooLarge, "{err}");
            assert!(
                err.message().contains("line larger than 100 bytes"),
                "{err}"
            );
            assert!(scanned <= 100 + size as u64, "{size}: {scanned}");
        }
        // Small lines adding up to a huge event.
        let huge: Vec<u8> = b"data: 0123456789\n".repeat(100);
        let (events, err, _) = sse_events(&huge, 13, limits);
        assert!(events.is_empty());
        let err = err.unwrap();
        assert_eq!(err.kind(), ModelErrorKind::ResponseTooLarge);
        assert!(
            err.message().contains("event larger than 250 bytes"),
            "{err}"
        );
        // Within the limits: fine.
        let ok = b"data: 0123456789\n".repeat(10);
        let (events, err, _) = sse_events(&[&ok[..], b"\n"].concat(), 5, limits);
        assert!(err.is_none());
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 1.5 "),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("-3"), None);
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("1e300"), None, "no overflow panic");
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after-ms", "1e300".parse().unwrap());
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"), None);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 99999999999999999 08:49:37 GMT"),
            None
        );
    }

    #[test]
    fn status_mapping() {
        let k = |s, body: &str| status_error("p", s, None, body.into(), is_context_overflow).kind();
        assert_eq!(k(401, ""), ModelErrorKind::Auth);
        assert_eq!(k(403, ""), ModelErrorKind::Auth);
        assert_eq!(k(429, ""), ModelErrorKind::Throttled);
        assert_eq!(k(529, ""), ModelErrorKind::Throttled);
        assert_eq!(k(400, "{}"), ModelErrorKind::BadRequest);
        assert_eq!(k(404, "{}"), ModelErrorKind::BadRequest);
        assert_eq!(
            k(
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#
            ),
            ModelErrorKind::ContextWindowOverflow
        );
        assert_eq!(k(500, ""), ModelErrorKind::Server);
        assert_eq!(k(503, ""), ModelErrorKind::Server);
        let e = status_error(
            "p",
            400,
            None,
            r#"{"error":{"message":"bad thing"}}"#.into(),
            is_context_overflow,
        );
        assert_eq!(e.message(), "p: bad thing");
        assert_eq!(e.status(), Some(400));
        assert!(e.body().is_some_and(|b| b.contains("bad thing")));
    }

    #[test]
    fn secret_debug_is_redacted() {
        assert_eq!(format!("{:?}", Secret::new("sk-123")), "<redacted>");
        let mut s = HttpSettings::new("http://127.0.0.1:1/v1/");
        s.api_key = Some(Secret::new("sk-123"));
        s.headers.push(("x-gateway-token".into(), "gw-456".into()));
        let endpoint = s.clone().connect("/chat").unwrap();
        for shown in [format!("{s:?}"), format!("{endpoint:?}")] {
            assert!(
                !shown.contains("sk-123") && !shown.contains("gw-456"),
                "{shown}"
            );
            assert!(shown.contains("x-gateway-token"), "{shown}");
        }
        assert_eq!(endpoint.base_url(), "http://127.0.0.1:1/v1");
    }

    #[test]
    fn tls_is_rustls_with_ring_and_the_webpki_roots_without_a_process_provider() {
        let config = tls_config().unwrap();
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(
            config.crypto_provider().cipher_suites,
            ring.cipher_suites,
            "the ring provider"
        );
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // reqwest 0.13 without a provider feature panics at build time unless it gets a
        // ready-made config or finds a process-wide provider; Rein installs none.
        client(DEFAULT_CONNECT_TIMEOUT).unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }

    #[test]
    fn invalid_settings_are_config_errors() {
        let mut s = HttpSettings::new("ftp://host");
        assert!(matches!(s.clone().connect(""), Err(Error::Build(_))));
        s.base_url = "http://host".into();
        s.headers.push(("bad header".into(), "v".into()));
        assert!(matches!(s.clone().connect(""), Err(Error::Build(_))));
        s.headers.clear();
        s.api_key = Some(Secret::new("line\nbreak"));
        let err = s.connect("").unwrap_err().to_string();
        assert!(!err.contains("break"), "the key is not shown: {err}");
    }
}
