//! AWS Bedrock provider (feature `bedrock`): `POST {endpoint}/model/{modelId}/converse-stream`,
//! answered with a binary event stream (`application/vnd.amazon.eventstream`).

mod auth;
#[cfg(any(test, feature = "test-util"))]
pub(crate) mod frames;
mod request;
mod stream;

use std::fmt;

use rein_core::{
    Error, ModelError,
    error::{BuildError, ModelErrorKind},
    request::ModelRequest,
};
use serde_json::{Map, Value};

use auth::Auth;
pub use auth::{AwsCredentials, AwsCredentialsProvider};
pub(crate) use stream::EventStreamDecoder;

use crate::http::{self, HttpEndpoint, HttpSettings, KeyHeader, Secret};
use crate::model::{Model, ModelInfo, ModelStream};

const PROVIDER: &str = "bedrock";
const CONTENT_TYPE: &str = "application/json";
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// A model behind the AWS Bedrock Converse API, streaming (`ConverseStream`).
///
/// Build it with [`BedrockModel::builder`] (reads no environment variable) or
/// [`BedrockModel::from_env`] (`AWS_REGION`, `AWS_ACCESS_KEY_ID` …, `AWS_BEARER_TOKEN_BEDROCK`).
/// Requests are signed with SigV4 from [`AwsCredentials`] or an [`AwsCredentialsProvider`], or
/// carry a Bedrock API key as a bearer token (which wins when both are set, as in the AWS SDKs).
/// Cloning is cheap.
///
/// ```
/// use rein_models::{AwsCredentials, BedrockModel, Model};
///
/// let model = BedrockModel::builder("us.anthropic.claude-sonnet-4-20250514-v1:0")
///     .region("us-east-1")
///     .credentials(AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"))
///     .build()?;
/// assert_eq!(model.info().provider, "bedrock");
/// assert_eq!(model.endpoint(), "https://bedrock-runtime.us-east-1.amazonaws.com");
/// assert!(!format!("{model:?}").contains("EXAMPLEKEY"));
///
/// // A Bedrock API key instead of AWS credentials, and an endpoint of one's own:
/// let with_key = BedrockModel::builder("amazon.nova-lite-v1:0")
///     .region("eu-west-1")
///     .bearer_token("bedrock-api-key-…")
///     .endpoint_url("https://bedrock.internal.example.com")
///     .build()?;
/// # Ok::<(), rein_core::Error>(())
/// ```
#[derive(Clone)]
pub struct BedrockModel {
    http: HttpEndpoint,
    /// The request URL as reqwest sends it (what SigV4 signs).
    url: String,
    region: String,
    model_id: String,
    auth: Auth,
    additional_fields: Map<String, Value>,
    extra_body: Map<String, Value>,
}

impl fmt::Debug for BedrockModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BedrockModel")
            .field("region", &self.region)
            .field("model_id", &self.model_id)
            .field("auth", &self.auth)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// Builder of a [`BedrockModel`].
#[derive(Clone)]
#[must_use]
pub struct BedrockModelBuilder {
    model_id: String,
    region: Option<String>,
    endpoint_url: Option<String>,
    bearer_token: Option<Secret>,
    credentials: Option<Auth>,
    additional_fields: Map<String, Value>,
    extra_body: Map<String, Value>,
    /// Extra headers and timeouts (the base URL is set by `build`).
    http: HttpSettings,
}

impl fmt::Debug for BedrockModelBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BedrockModelBuilder")
            .field("model_id", &self.model_id)
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .field("bearer_token", &self.bearer_token)
            .field("credentials", &self.credentials)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// A non-blank value from an environment lookup.
fn lookup_var(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name).filter(|v| !v.trim().is_empty())
}

impl BedrockModel {
    /// A builder for `model_id` (a model id such as `amazon.nova-pro-v1:0`, an inference
    /// profile id such as `us.anthropic.claude-sonnet-4-20250514-v1:0`, or an ARN), with no
    /// region, no credentials, connect timeout 10 s and stream idle timeout 120 s. Reads no
    /// environment variable.
    pub fn builder(model_id: impl Into<String>) -> BedrockModelBuilder {
        BedrockModelBuilder {
            model_id: model_id.into(),
            region: None,
            endpoint_url: None,
            bearer_token: None,
            credentials: None,
            additional_fields: Map::new(),
            extra_body: Map::new(),
            http: HttpSettings::new(""),
        }
    }

    /// A builder pre-filled from the standard AWS environment variables; builder calls made
    /// afterwards override them:
    ///
    /// - region: `AWS_REGION`, else `AWS_DEFAULT_REGION`;
    /// - endpoint: `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL` (both ignored
    ///   when `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is `true`);
    /// - a Bedrock API key: `AWS_BEARER_TOKEN_BEDROCK`;
    /// - credentials: `AWS_ACCESS_KEY_ID` with `AWS_SECRET_ACCESS_KEY`, and `AWS_SESSION_TOKEN`.
    ///
    /// Profiles, SSO and instance roles are not read: plug the AWS SDK's chain in with
    /// [`BedrockModelBuilder::credentials_provider`].
    pub fn from_env(model_id: impl Into<String>) -> BedrockModelBuilder {
        Self::from_env_with(model_id, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables read through `lookup` (name → value)
    /// instead of the process environment: for tests, or configuration kept elsewhere.
    ///
    /// ```
    /// use rein_models::BedrockModel;
    ///
    /// let vars = [("AWS_REGION", "eu-central-1"), ("AWS_BEARER_TOKEN_BEDROCK", "key")];
    /// let lookup = |name: &str| {
    ///     vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    /// };
    /// let model = BedrockModel::from_env_with("amazon.nova-micro-v1:0", lookup).build()?;
    /// assert_eq!(model.region(), "eu-central-1");
    /// # Ok::<(), rein_core::Error>(())
    /// ```
    pub fn from_env_with(
        model_id: impl Into<String>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> BedrockModelBuilder {
        let mut b = Self::builder(model_id);
        let var = |name: &str| lookup_var(&lookup, name);
        b.region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION"));
        let ignore_endpoints = var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if !ignore_endpoints {
            b.endpoint_url =
                var("AWS_ENDPOINT_URL_BEDROCK_RUNTIME").or_else(|| var("AWS_ENDPOINT_URL"));
        }
        b.bearer_token = var("AWS_BEARER_TOKEN_BEDROCK").map(Secret::new);
        if let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            let mut creds = AwsCredentials::new(id, secret);
            if let Some(token) = var("AWS_SESSION_TOKEN") {
                creds = creds.with_session_token(token);
            }
            b.credentials = Some(Auth::Static(creds));
        }
        b
    }

    /// The endpoint (requests go to `{endpoint}/model/{modelId}/converse-stream`).
    pub fn endpoint(&self) -> &str {
        self.http.base_url()
    }

    /// The AWS region (in the SigV4 scope, and in the default endpoint).
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Whether requests carry a Bedrock API key (bearer token) rather than a SigV4 signature.
    pub fn uses_bearer_token(&self) -> bool {
        matches!(self.auth, Auth::Bearer(_))
    }
}

impl BedrockModelBuilder {
    /// The AWS region, e.g. `us-east-1`: the default endpoint is
    /// `https://bedrock-runtime.{region}.amazonaws.com`. Required.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// An endpoint instead of the region's (a VPC endpoint, a proxy, a local test server):
    /// scheme, host and optional path prefix, without `/model`.
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Fixed AWS credentials, signed into each request with SigV4. Replaces an earlier
    /// [`credentials_provider`](Self::credentials_provider).
    pub fn credentials(mut self, credentials: AwsCredentials) -> Self {
        self.credentials = Some(Auth::Static(credentials));
        self
    }

    /// A source of AWS credentials asked before every request (rotating credentials, the AWS
    /// SDK's chain, a vault). Replaces earlier [`credentials`](Self::credentials).
    pub fn credentials_provider(mut self, provider: impl AwsCredentialsProvider) -> Self {
        self.credentials = Some(Auth::provider(provider));
        self
    }

    /// A Bedrock API key, sent as `Authorization: Bearer …` instead of a SigV4 signature. When
    /// set it wins over credentials, as in the AWS SDKs. Never shown by `Debug` or errors.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(Secret::new(token));
        self
    }

    /// Model-specific request fields, sent as `additionalModelRequestFields` (merged with
    /// earlier calls), e.g. Claude's `{"thinking": {"type": "enabled", "budget_tokens": 2048}}`
    /// or `{"top_k": 40}`.
    pub fn additional_model_request_fields(mut self, fields: Map<String, Value>) -> Self {
        self.additional_fields.extend(fields);
        self
    }

    /// Extra top-level request fields (e.g. `guardrailConfig`, `performanceConfig`,
    /// `requestMetadata`); they override the fields Rein sets.
    pub fn extra_body(mut self, fields: Map<String, Value>) -> Self {
        self.extra_body.extend(fields);
        self
    }

    http::http_builder_methods!();

    /// Builds the model. Fails ([`Error::Build`]) without a region or a valid one, without
    /// credentials or a bearer token, or on an invalid endpoint.
    pub fn build(self) -> Result<BedrockModel, Error> {
        let Some(region) = self.region.map(|r| r.trim().to_owned()) else {
            return Err(BuildError::MissingSetting {
                component: "bedrock",
                setting: "AWS region",
                hint: "call .region(..) or set AWS_REGION",
            }
            .into());
        };
        if region.is_empty()
            || !region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(BuildError::InvalidSetting {
                component: "bedrock",
                setting: "AWS region",
                reason: format!("'{region}'"),
            }
            .into());
        }
        if self.model_id.trim().is_empty() {
            return Err(BuildError::InvalidSetting {
                component: "bedrock",
                setting: "model id",
                reason: "it is empty".into(),
            }
            .into());
        }
        let auth = match (self.bearer_token, self.credentials) {
            (Some(token), _) => Auth::Bearer(token),
            (None, Some(auth)) => auth,
            (None, None) => {
                return Err(BuildError::MissingSetting {
                    component: "bedrock",
                    setting: "credentials",
                    hint: "call .credentials(..), .credentials_provider(..) or .bearer_token(..), \
                           or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or \
                           AWS_BEARER_TOKEN_BEDROCK",
                }
                .into());
            }
        };
        auth.check()?;
        let mut settings = self.http;
        settings.base_url = match self.endpoint_url {
            Some(url) => url,
            None => format!("https://bedrock-runtime.{region}.amazonaws.com"),
        };
        let path = format!(
            "/model/{}/converse-stream",
            encode_path_segment(&self.model_id)
        );
        let http = settings.connect(&path)?;
        // The URL exactly as reqwest will send it, for the signature.
        let url = format!("{}{path}", http.base_url());
        let url = reqwest::Url::parse(&url)
            .map_err(|e| BuildError::InvalidSetting {
                component: "bedrock",
                setting: "request URL",
                reason: format!("'{url}': {e}"),
            })?
            .to_string();
        Ok(BedrockModel {
            http,
            url,
            region,
            model_id: self.model_id,
            auth,
            additional_fields: self.additional_fields,
            extra_body: self.extra_body,
        })
    }
}

/// Percent-encodes a path segment: every byte but the unreserved ones (model ids, inference
/// profile ids and ARNs hold `:` and `/`).
fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Model for BedrockModel {
    fn info(&self) -> ModelInfo {
        self.http.info(PROVIDER, &self.model_id)
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let body = request::encode_request(&request, &self.additional_fields, &self.extra_body)
            .to_string();
        let auth = self
            .auth
            .headers(&self.url, CONTENT_TYPE, body.as_bytes(), &self.region)
            .await?;
        // No key in the endpoint's settings: `auth` carries the bearer token or the signature.
        let mut rb = self
            .http
            .post(EVENT_STREAM, KeyHeader::Bearer, body)
            .await?;
        for (name, value) in auth {
            rb = rb.header(name, value);
        }
        let decoder = EventStreamDecoder::with_max_frame(self.http.limits().max_event);
        self.http
            .stream_body(PROVIDER, rb, decoder, http_error)
            .await
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Whether an error message reports a context-window overflow: the shared wording plus what
/// Bedrock's models say ("input length and `max_tokens` exceed context limit", "too many
/// total text bytes", Nova's "Input Tokens Exceeded").
fn is_overflow(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    http::is_context_overflow(msg)
        || [
            "exceed context limit",
            "too many total text bytes",
            "input tokens exceeded",
            "too many input tokens",
        ]
        .iter()
        .any(|p| m.contains(p))
}

/// The typed error for an AWS error type (`x-amzn-ErrorType`, an `:exception-type` or an
/// `:error-code`), or `None` for a type this mapping does not know.
fn error_for_type(error_type: &str, message: &str) -> Option<ModelError> {
    // `ValidationException:http://internal.amazon.com/...` and `validationException` alike.
    let name = error_type.split(':').next().unwrap_or_default().trim();
    let key = name.to_ascii_lowercase();
    let key = key.strip_suffix("exception").unwrap_or(&key);
    let text = if message.is_empty() {
        format!("{PROVIDER}: {name}")
    } else {
        format!("{PROVIDER}: {name}: {message}")
    };
    let kind = match key {
        "throttling" | "toomanyrequests" | "servicequotaexceeded" | "limitexceeded" => {
            ModelErrorKind::Throttled
        }
        "validation" if is_overflow(message) => ModelErrorKind::ContextWindowOverflow,
        "validation" | "resourcenotfound" | "conflict" | "serialization" => {
            ModelErrorKind::BadRequest
        }
        "accessdenied"
        | "unrecognizedclient"
        | "expiredtoken"
        | "invalidsignature"
        | "incompletesignature"
        | "missingauthenticationtoken"
        | "invalidclienttokenid"
        | "unauthorized" => ModelErrorKind::Auth,
        "modelnotready" | "serviceunavailable" | "internalserver" | "internalfailure"
        | "modelstreamerror" | "modelerror" => ModelErrorKind::Server,
        "modeltimeout" | "requesttimeout" => ModelErrorKind::Timeout,
        _ => return None,
    };
    Some(ModelError::new(kind, text))
}

/// Maps an HTTP error: by `x-amzn-ErrorType` when it names a known type, else by status.
fn http_error(
    _provider: &str,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: String,
) -> ModelError {
    let error_type = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok());
    let retry_after = http::retry_after(headers);
    let message = http::error_message(&body)
        .or_else(|| {
            serde_json::from_str::<Value>(&body)
                .ok()?
                .get("Message")?
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let Some(mut e) = error_type.and_then(|t| error_for_type(t, &message)) else {
        return http::status_error(PROVIDER, status, retry_after, body, is_overflow);
    };
    if e.kind() == ModelErrorKind::Timeout {
        // Nothing was streamed: a retry is safe.
        e = e.before_first_byte();
    }
    if let Some(after) = retry_after {
        e = e.with_retry_after(after);
    }
    e.with_status(status).with_body(body)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn model_ids_are_percent_encoded_in_the_path() {
        assert_eq!(
            encode_path_segment("arn:aws:bedrock:us-east-1:123:inference-profile/us.x-v1:0"),
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.x-v1%3A0"
        );
        let m = BedrockModel::builder("anthropic.claude-3-haiku-20240307-v1:0")
            .region("us-west-2")
            .bearer_token("k")
            .build()
            .unwrap();
        assert_eq!(
            m.url,
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/\
             anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"
        );
    }

    #[test]
    fn error_types_map_to_kinds() {
        let k = |t: &str, m: &str| error_for_type(t, m).map(|e| e.kind());
        use ModelErrorKind as K;
        assert_eq!(k("ThrottlingException", ""), Some(K::Throttled));
        assert_eq!(k("throttlingException", ""), Some(K::Throttled));
        assert_eq!(k("ServiceQuotaExceededException", ""), Some(K::Throttled));
        assert_eq!(
            k(
                "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/",
                "Malformed input request"
            ),
            Some(K::BadRequest)
        );
        assert_eq!(
            k(
                "validationException",
                "Input is too long for requested model."
            ),
            Some(K::ContextWindowOverflow)
        );
        assert_eq!(
            k(
                "ValidationException",
                "The model returned the following errors: input length and `max_tokens` \
                 exceed context limit: 199000 + 8192 > 200000"
            ),
            Some(K::ContextWindowOverflow)
        );
        assert_eq!(k("AccessDeniedException", ""), Some(K::Auth));
        assert_eq!(k("UnrecognizedClientException", ""), Some(K::Auth));
        assert_eq!(k("ExpiredTokenException", ""), Some(K::Auth));
        assert_eq!(k("ModelNotReadyException", ""), Some(K::Server));
        assert_eq!(k("ModelErrorException", ""), Some(K::Server));
        assert_eq!(k("modelStreamErrorException", ""), Some(K::Server));
        assert_eq!(k("internalServerException", ""), Some(K::Server));
        assert_eq!(k("serviceUnavailableException", ""), Some(K::Server));
        assert_eq!(k("modelTimeoutException", ""), Some(K::Timeout));
        assert_eq!(k("ResourceNotFoundException", ""), Some(K::BadRequest));
        assert_eq!(k("SomethingNewException", ""), None);
    }

    /// [`http_error`] for a response with these `x-amzn-ErrorType` and `retry-after` headers.
    fn mapped(
        status: u16,
        error_type: Option<&str>,
        retry_after: Option<Duration>,
        body: String,
    ) -> ModelError {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = error_type {
            headers.insert("x-amzn-errortype", t.parse().unwrap());
        }
        if let Some(after) = retry_after {
            headers.insert("retry-after", after.as_secs().into());
        }
        http_error(PROVIDER, status, &headers, body)
    }

    #[test]
    fn http_errors_use_the_error_type_then_the_status() {
        let e = mapped(
            424,
            Some("ModelErrorException"),
            None,
            r#"{"message":"The model failed"}"#.into(),
        );
        assert_eq!(e.kind(), ModelErrorKind::Server);
        assert!(e.is_retryable());
        assert_eq!(e.status(), Some(424));
        assert_eq!(
            e.message(),
            "bedrock: ModelErrorException: The model failed"
        );
        let e = mapped(
            429,
            Some("ThrottlingException"),
            Some(Duration::from_secs(2)),
            r#"{"message":"Too many requests, please wait before trying again."}"#.into(),
        );
        assert_eq!(e.kind(), ModelErrorKind::Throttled);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        let e = mapped(408, Some("ModelTimeoutException"), None, "{}".into());
        assert_eq!(e.kind(), ModelErrorKind::Timeout);
        assert!(e.is_retryable());
        let e = mapped(
            400,
            Some("ServiceQuotaExceededException"),
            None,
            "{}".into(),
        );
        assert_eq!(e.kind(), ModelErrorKind::Throttled);
        let e = mapped(403, None, None, r#"{"Message":"denied"}"#.into());
        assert_eq!(e.kind(), ModelErrorKind::Auth);
        let e = mapped(
            400,
            Some("ValidationException"),
            None,
            r#"{"message":"prompt is too long: 210000 tokens > 200000 maximum"}"#.into(),
        );
        assert_eq!(e.kind(), ModelErrorKind::ContextWindowOverflow);
    }

    #[test]
    fn build_requires_a_region_and_credentials() {
        let err = |b: BedrockModelBuilder| b.build().unwrap_err().to_string();
        assert!(err(BedrockModel::builder("m").bearer_token("k")).contains("no AWS region"));
        assert!(err(BedrockModel::builder("m").region("us-east-1")).contains("no credentials"));
        assert!(
            err(BedrockModel::builder("m")
                .region("us-east-1/../x")
                .bearer_token("k"))
            .contains("invalid AWS region")
        );
        assert!(
            err(BedrockModel::builder("m")
                .region("us-east-1")
                .bearer_token("k")
                .endpoint_url("ftp://x"))
            .contains("http or https")
        );
        assert!(
            err(BedrockModel::builder(" ")
                .region("us-east-1")
                .bearer_token("k"))
            .contains("invalid model id: it is empty")
        );
    }
}
