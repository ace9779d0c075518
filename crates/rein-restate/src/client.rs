//! A typed client of the ingress operations (any HTTP client can call them: the JSON shapes
//! are in [`wire`](crate::wire)).

use std::time::Duration;

use rein_core::id::InjectionId;
use serde::{Serialize, de::DeserializeOwned};

use crate::Error;
use crate::wire::{
    InjectRequest, InjectionReport, InvokeRequest, ResumeRequest, RunReport, SessionView,
};

/// Calls durable agents through Restate's ingress, from any process.
///
/// ```no_run
/// use rein_restate::{Client, wire::InvokeRequest};
/// # async fn run() -> Result<(), rein_restate::Error> {
/// let client = Client::new("http://127.0.0.1:8080")?;
/// let report = client.invoke("session-1", InvokeRequest::text("Hello")).await?;
/// println!("{}", report.text);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    ingress: String,
    /// Marked sensitive: `Debug` shows `Sensitive`, not the token.
    authorization: Option<reqwest::header::HeaderValue>,
}

impl Client {
    /// A client of the ingress at `ingress_url` (e.g. `http://127.0.0.1:8080`).
    pub fn new(ingress_url: &str) -> Result<Self, Error> {
        Ok(Self {
            http: rein_models::http::client(Duration::from_secs(10))?,
            ingress: ingress_url.trim_end_matches('/').to_owned(),
            authorization: None,
        })
    }

    /// The same client, sending `Authorization: Bearer <token>` with every request: what the
    /// worker's authenticator reads (`Caller::bearer_token`). Never shown by `Debug`.
    pub fn bearer_token(mut self, token: &str) -> Result<Self, Error> {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Config("a bearer token is visible ASCII".into()))?;
        value.set_sensitive(true);
        self.authorization = Some(value);
        Ok(self)
    }

    /// Runs the session's agent on new input and waits for the run's end (an interrupt ends
    /// it too: answer with [`resume`](Self::resume)). With an
    /// [`idempotency_key`](InvokeRequest::idempotency_key), sending it again runs nothing more
    /// and returns the first run's report.
    pub async fn invoke(&self, session: &str, request: InvokeRequest) -> Result<RunReport, Error> {
        let key = request.idempotency_key.clone();
        self.call("ReinAgent", session, "invoke", Some(&request), key)
            .await
    }

    /// Starts a run without waiting; returns Restate's invocation id.
    pub async fn start(&self, session: &str, request: InvokeRequest) -> Result<String, Error> {
        #[derive(serde::Deserialize)]
        struct Sent {
            #[serde(rename = "invocationId")]
            invocation_id: String,
        }
        let key = request.idempotency_key.clone();
        let sent: Sent = self
            .call("ReinAgent", session, "invoke/send", Some(&request), key)
            .await?;
        Ok(sent.invocation_id)
    }

    /// Waits for the end of a run [`start`](Self::start)ed earlier (by any process).
    pub async fn attach(&self, invocation_id: &str) -> Result<RunReport, Error> {
        let url = format!(
            "{}/restate/invocation/{}/attach",
            self.ingress,
            encode(invocation_id)
        );
        self.send(self.http.get(url)).await
    }

    /// Answers the session's pending interrupts and waits for the run's end. With an
    /// [`idempotency_key`](ResumeRequest::idempotency_key), sending it again returns the first
    /// resume's report.
    pub async fn resume(&self, session: &str, request: ResumeRequest) -> Result<RunReport, Error> {
        let key = request.idempotency_key.clone();
        self.call("ReinAgent", session, "resume", Some(&request), key)
            .await
    }

    /// Injects a message into the session's running (or paused) run. With an
    /// [`idempotency_key`](InjectRequest::idempotency_key), sending it again returns the first
    /// acceptance.
    pub async fn inject(
        &self,
        session: &str,
        request: InjectRequest,
    ) -> Result<InjectionReport, Error> {
        let key = request.idempotency_key.clone();
        self.call("ReinInbox", session, "inject", Some(&request), key)
            .await
    }

    /// Where an injected message stands.
    pub async fn injection(
        &self,
        session: &str,
        id: InjectionId,
    ) -> Result<InjectionReport, Error> {
        self.call("ReinInbox", session, "status", Some(&id), None)
            .await
    }

    /// Cancels the session's running run; `false` when none was running.
    pub async fn cancel(&self, session: &str) -> Result<bool, Error> {
        self.call("ReinInbox", session, "cancel", None::<&()>, None)
            .await
    }

    /// Ends the session's run that cannot go on and saves what it did (see the guide's
    /// "Abandon a run"): the abandoned run's report.
    pub async fn abandon(&self, session: &str) -> Result<RunReport, Error> {
        self.call("ReinAgent", session, "abandon", None::<&()>, None)
            .await
    }

    /// The session's messages, pending interrupts and last run.
    pub async fn session(&self, session: &str) -> Result<SessionView, Error> {
        self.call("ReinAgent", session, "session", None::<&()>, None)
            .await
    }

    async fn call<B: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        object: &str,
        key: &str,
        handler: &str,
        body: Option<&B>,
        idempotency_key: Option<String>,
    ) -> Result<R, Error> {
        let url = format!("{}/{object}/{}/{handler}", self.ingress, encode(key));
        let mut request = self.http.post(url);
        if let Some(idempotency_key) = idempotency_key {
            let value = reqwest::header::HeaderValue::from_str(&idempotency_key)
                .map_err(|_| Error::Config("an idempotency key is visible ASCII".into()))?;
            request = request.header("idempotency-key", value);
        }
        // A handler without input takes no body at all.
        if let Some(body) = body {
            let body = serde_json::to_vec(body).map_err(|e| Error::Decode(e.to_string()))?;
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        self.send(request).await
    }

    async fn send<R: DeserializeOwned>(
        &self,
        mut request: reqwest::RequestBuilder,
    ) -> Result<R, Error> {
        if let Some(authorization) = &self.authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization.clone());
        }
        let response = request.send().await.map_err(Error::unreachable)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(Error::unreachable)?;
        if status >= 300 {
            #[derive(serde::Deserialize)]
            struct Failure {
                message: String,
            }
            let message = serde_json::from_slice::<Failure>(&bytes)
                .map(|f| f.message)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
            return Err(Error::Refused { status, message });
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))
    }
}

/// A session id as a path segment.
fn encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_never_shows_in_debug() {
        let client = Client::new("http://127.0.0.1:8080")
            .and_then(|c| c.bearer_token("s3cr3t-token"))
            .unwrap_or_else(|e| panic!("{e}"));
        let shown = format!("{client:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            Client::new("http://127.0.0.1:8080")
                .and_then(|c| c.bearer_token("line\nbreak"))
                .is_err()
        );
    }
}
