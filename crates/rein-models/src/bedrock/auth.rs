//! Bedrock authentication: AWS credentials (static or from a caller's provider) signed into each
//! request with SigV4 (`aws-sigv4`), or a Bedrock API key sent as a bearer token.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use rein_core::{Error, ModelError, error::BuildError, tool::BoxFuture};

use crate::http::{self, Secret};

/// The SigV4 signing name of the Bedrock runtime API.
const SIGNING_NAME: &str = "bedrock";

/// AWS credentials: an access key id, its secret access key, and a session token for temporary
/// credentials (STS, SSO, instance roles).
///
/// `Debug` shows the access key id only; the secret and the token never appear in `Debug`
/// output, logs or errors.
///
/// ```
/// use rein_models::AwsCredentials;
///
/// let creds = AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
///     .with_session_token("IQoJb3JpZ2luX2VjEXAMPLE");
/// assert_eq!(creds.access_key_id(), "AKIDEXAMPLE");
/// assert!(!format!("{creds:?}").contains("EXAMPLEKEY"));
/// ```
#[derive(Clone)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
}

impl AwsCredentials {
    /// Long-term credentials: an access key id and its secret access key.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: Secret::new(secret_access_key),
            session_token: None,
        }
    }

    /// Adds the session token of temporary credentials (sent as `x-amz-security-token`).
    #[must_use]
    pub fn with_session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(Secret::new(token));
        self
    }

    /// The access key id (not a secret: it shows in the `Authorization` header).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// Whether a session token is set.
    pub fn has_session_token(&self) -> bool {
        self.session_token.is_some()
    }

    /// Checks that the credentials can be sent in HTTP headers, without showing them.
    fn check(&self) -> Result<(), ModelError> {
        let ok = |s: &str| !s.is_empty() && reqwest::header::HeaderValue::from_str(s).is_ok();
        if !ok(&self.access_key_id) || !ok(self.secret_access_key.expose()) {
            return Err(ModelError::auth(
                "bedrock: the AWS access key id or secret access key is empty or not a valid \
                 HTTP header value",
            ));
        }
        if self.session_token.as_ref().is_some_and(|t| !ok(t.expose())) {
            return Err(ModelError::auth(
                "bedrock: the AWS session token is empty or not a valid HTTP header value",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token)
            .finish()
    }
}

/// A source of AWS credentials, asked once per request (so rotating or refreshed credentials
/// are picked up): plug in the AWS SDK's credential chain (profiles, SSO, web identity, IMDS)
/// or your own vault without Rein depending on `aws-config`.
///
/// The provider is called before every model call, so cache in it what is costly to fetch
/// (see `docs/providers.md` for a caching bridge to `aws-config`). An error fails the call
/// before anything is sent; `ModelError::auth` is the usual kind.
///
/// ```
/// use rein_models::{AwsCredentials, AwsCredentialsProvider, BedrockModel};
/// use rein_core::ModelError;
///
/// /// Reads the keys from the caller's own secret store.
/// struct Vault;
///
/// impl AwsCredentialsProvider for Vault {
///     async fn credentials(&self) -> Result<AwsCredentials, ModelError> {
///         Ok(AwsCredentials::new("AKIDEXAMPLE", "secret-from-the-vault"))
///     }
/// }
///
/// let model = BedrockModel::builder("anthropic.claude-3-5-haiku-20241022-v1:0")
///     .region("us-west-2")
///     .credentials_provider(Vault)
///     .build()?;
/// # Ok::<(), rein_core::Error>(())
/// ```
pub trait AwsCredentialsProvider: Send + Sync + 'static {
    /// Credentials for one request.
    fn credentials(&self) -> impl Future<Output = Result<AwsCredentials, ModelError>> + Send;
}

impl AwsCredentialsProvider for AwsCredentials {
    async fn credentials(&self) -> Result<AwsCredentials, ModelError> {
        Ok(self.clone())
    }
}

/// The object-safe twin of [`AwsCredentialsProvider`].
pub(super) trait ErasedCredentialsProvider: Send + Sync {
    fn credentials_erased(&self) -> BoxFuture<'_, Result<AwsCredentials, ModelError>>;
}

impl<P: AwsCredentialsProvider> ErasedCredentialsProvider for P {
    fn credentials_erased(&self) -> BoxFuture<'_, Result<AwsCredentials, ModelError>> {
        Box::pin(self.credentials())
    }
}

/// How requests are authenticated.
#[derive(Clone)]
pub(super) enum Auth {
    /// A Bedrock API key: `Authorization: Bearer <key>`.
    Bearer(Secret),
    /// SigV4 with fixed credentials.
    Static(AwsCredentials),
    /// SigV4 with credentials from the caller's provider, fetched per request.
    Provider(Arc<dyn ErasedCredentialsProvider>),
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bearer(token) => f.debug_tuple("Bearer").field(token).finish(),
            Self::Static(creds) => f.debug_tuple("SigV4").field(creds).finish(),
            Self::Provider(_) => f.write_str("SigV4(<credentials provider>)"),
        }
    }
}

impl Auth {
    pub(super) fn provider<P: AwsCredentialsProvider>(provider: P) -> Self {
        Self::Provider(Arc::new(provider))
    }

    /// Checks what can be checked without a request.
    pub(super) fn check(&self) -> Result<(), Error> {
        match self {
            Self::Bearer(token) => http::check_key(token),
            Self::Static(creds) => creds.check().map_err(|e| {
                Error::from(BuildError::InvalidSetting {
                    component: "bedrock",
                    setting: "credentials",
                    reason: e.message().into(),
                })
            }),
            Self::Provider(_) => Ok(()),
        }
    }

    /// The headers that authenticate a `POST` of `body` (with this `content-type`) to `url`.
    /// Every value is marked sensitive.
    pub(super) async fn headers(
        &self,
        url: &str,
        content_type: &str,
        body: &[u8],
        region: &str,
    ) -> Result<Vec<(&'static str, reqwest::header::HeaderValue)>, ModelError> {
        let creds = match self {
            Self::Bearer(token) => {
                let value = http::secret_header(&format!("Bearer {}", token.expose()))?;
                return Ok(vec![("authorization", value)]);
            }
            Self::Static(creds) => creds.clone(),
            Self::Provider(p) => p.credentials_erased().await?,
        };
        creds.check()?;
        sigv4_headers(&creds, region, SystemTime::now(), url, content_type, body)
    }
}

/// Signs a `POST` with SigV4 (service `bedrock`) and returns the headers to add:
/// `authorization`, `x-amz-date`, and `x-amz-security-token` with temporary credentials.
///
/// The signer's own trace logs print the canonical request, session token included, so they
/// are discarded for the duration of the call.
pub(super) fn sigv4_headers(
    creds: &AwsCredentials,
    region: &str,
    time: SystemTime,
    url: &str,
    content_type: &str,
    body: &[u8],
) -> Result<Vec<(&'static str, reqwest::header::HeaderValue)>, ModelError> {
    let fail = |what: &str, e: &dyn fmt::Display| {
        ModelError::bad_request(format!("bedrock: cannot sign the request: {what}: {e}"))
    };
    let identity = aws_credential_types::Credentials::new(
        creds.access_key_id.clone(),
        creds.secret_access_key.expose(),
        creds.session_token.as_ref().map(|t| t.expose().to_owned()),
        None,
        "rein",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| fail("parameters", &e))?
        .into();
    let request = SignableRequest::new(
        "POST",
        url,
        std::iter::once(("content-type", content_type)),
        SignableBody::Bytes(body),
    )
    .map_err(|e| fail("URL", &e))?;
    let signed = tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
        aws_sigv4::http_request::sign(request, &params)
    })
    .map_err(|e| fail("signer", &e))?;
    let (instructions, _signature) = signed.into_parts();
    let (headers, _query) = instructions.into_parts();
    headers
        .iter()
        .map(|h| Ok((h.name(), http::secret_header(h.value())?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_key_id_only() {
        let c = AwsCredentials::new("AKIDEXAMPLE", "s3cr3t").with_session_token("t0k3n");
        let shown = format!("{c:?} {c:#?} {:?}", Auth::Static(c.clone()));
        assert!(shown.contains("AKIDEXAMPLE"));
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("t0k3n"),
            "{shown}"
        );
        let b = format!("{:?}", Auth::Bearer(Secret::new("bedrock-api-key")));
        assert!(!b.contains("bedrock-api-key"), "{b}");
        assert!(c.has_session_token());
    }

    #[test]
    fn bad_credentials_are_config_errors_without_the_secret() {
        let bad = AwsCredentials::new("AKID", "line\nbreak-secret");
        let e = Auth::Static(bad).check().unwrap_err().to_string();
        assert!(!e.contains("break-secret"), "{e}");
        assert!(Auth::Static(AwsCredentials::new("", "x")).check().is_err());
        assert!(
            Auth::Static(AwsCredentials::new("a", "b").with_session_token(""))
                .check()
                .is_err()
        );
    }
}
