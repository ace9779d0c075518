//! Who a request is from (a bearer token, checked in constant time), what it may do to a
//! thread (the `authorize` hook), and which Host and Origin headers the server answers.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use subtle::ConstantTimeEq;

use rein_agent::PendingInterrupt;
use rein_core::interrupt::Approval;
use rein_core::message::InterruptResponse;
use serde_json::Value;

use crate::error::ProtocolError;
use crate::interrupts::takes_an_approval;

/// Who a request is from, as the server's authentication says (never as the request claims):
/// the principal given to the [`authorize`](crate::AguiServer::authorize) hook and recorded as
/// who answered an approval.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    id: String,
}

impl Principal {
    /// A principal named `id` (a user name, an e-mail address, a service's name ...).
    pub fn new(id: impl Into<String>) -> Self {
        Self { id: id.into() }
    }

    /// Its name.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

/// What a request does to a thread, as the [`authorize`](crate::AguiServer::authorize) hook
/// sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThreadAction {
    /// `GET /threads/{id}`: read what the store holds (pending approvals, state).
    Read,
    /// A run request with a new user message: start a run (creating the thread if the store
    /// does not hold it).
    Run,
    /// A run request with `resume`: answer the thread's approvals (or those of messages parked
    /// in its running run).
    Resume,
    /// A run request while the thread's run is going: inject its message into that run.
    Inject,
}

impl ThreadAction {
    /// The lower-case name (`read`, `run`, `resume`, `inject`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Run => "run",
            Self::Resume => "resume",
            Self::Inject => "inject",
        }
    }
}

type BearerCheck = dyn Fn(&str) -> Option<Principal> + Send + Sync;
pub(crate) type Authorize = dyn Fn(&Principal, &str, ThreadAction) -> bool + Send + Sync;

/// How requests are authenticated. There is no "anyone": without a configured check the
/// server holds a token it made up.
#[derive(Clone)]
pub(crate) enum Auth {
    /// One shared secret (configured, or made up when nothing was configured); its holder is
    /// the principal [`TOKEN_PRINCIPAL`].
    Token(Arc<Secret>),
    /// The application's own check.
    Bearer(Arc<BearerCheck>),
}

/// The principal of the shared token.
pub(crate) const TOKEN_PRINCIPAL: &str = "token holder";

/// A token: never shown by `Debug`.
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: String) -> Self {
        Self(s)
    }

    /// 256 bits from the operating system's generator, as 64 hex digits.
    pub(crate) fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Constant time in the content (a different length answers at once: the length of a
    /// generated token is no secret).
    fn matches(&self, offered: &str) -> bool {
        self.0.as_bytes().ct_eq(offered.as_bytes()).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Auth {
    /// The principal of `Authorization: Bearer <token>`, or 401.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, ProtocolError> {
        let offered = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty());
        let who = offered.and_then(|t| match self {
            Self::Token(secret) => secret.matches(t).then(|| Principal::new(TOKEN_PRINCIPAL)),
            Self::Bearer(check) => check(t),
        });
        who.ok_or_else(|| {
            ProtocolError::new(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "a valid `Authorization: Bearer <token>` header is required",
            )
        })
    }
}

/// Four-eyes ([`AguiServer::four_eyes`](crate::AguiServer::four_eyes)): `who` may not approve
/// what `requester` asked for. A rejection is allowed (the requester may withdraw); any other
/// answer from the requester — an approval, an approval with an edit, a hook question's
/// answer — is refused, and so is every answer when the requester is unknown (a pause stored
/// without one: closed, not open). Nothing is applied then: the interrupts still wait.
pub(crate) fn check_four_eyes(
    thread_id: &str,
    requester: Option<&str>,
    who: &Principal,
    pending: &[PendingInterrupt],
    responses: &[InterruptResponse],
) -> Result<(), ProtocolError> {
    let withdraws = |r: &InterruptResponse| {
        let approval = pending
            .iter()
            .find(|p| p.interrupt.resume_id() == r.interrupt_id)
            .is_some_and(takes_an_approval);
        if approval {
            Approval::from_wire(&r.response).is_ok_and(|a| !a.approved)
        } else {
            r.response == Value::Bool(false)
        }
    };
    let own = match requester {
        Some(r) => r == who.id(),
        None => true,
    };
    if !own || responses.iter().all(withdraws) {
        return Ok(());
    }
    tracing::info!(
        target: "rein_agui::audit",
        thread_id,
        requester,
        principal = who.id(),
        "four-eyes refused an answer"
    );
    let message = if requester.is_some() {
        "four-eyes: the principal who requested this action may not approve it; another \
         approver must answer (the interrupts still wait)"
    } else {
        "four-eyes: this pause does not record who requested it, so no one may approve it \
         here (the interrupts still wait)"
    };
    Err(
        ProtocolError::new(StatusCode::FORBIDDEN, "FOUR_EYES", message)
            .with_details(serde_json::json!({"requester": requester, "principal": who.id()})),
    )
}

/// Which `Host` and `Origin` headers the server answers.
#[derive(Debug, Clone)]
pub(crate) struct Sites {
    /// Allowed `Host` values (`name` or `name:port`, lower case); `None`: any.
    pub(crate) hosts: Option<Vec<String>>,
    /// Origins allowed besides the server's own (`scheme://host[:port]`, lower case).
    pub(crate) origins: Vec<String>,
    /// Any origin (`Cors::AnyOrigin`).
    pub(crate) any_origin: bool,
}

impl Sites {
    /// The Host header is one of the server's names: DNS rebinding gives a page the server's
    /// address under the attacker's name, and the browser sends that name.
    pub(crate) fn check_host(&self, headers: &HeaderMap) -> Result<(), ProtocolError> {
        let Some(allowed) = &self.hosts else {
            return Ok(());
        };
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        match host {
            Some(h) if allowed.contains(&h) => Ok(()),
            _ => Err(ProtocolError::new(
                StatusCode::FORBIDDEN,
                "HOST_NOT_ALLOWED",
                "this server does not answer to that host name (see AguiServer::allow_hosts)",
            )),
        }
    }

    /// A request a browser sends from a page carries `Origin`: it must be the server's own
    /// (the Origin's host and port are the Host header's, as Jupyter and Tornado check it) or
    /// one configured. No Origin: not a cross-site browser request (the token still decides).
    pub(crate) fn check_origin(&self, headers: &HeaderMap) -> Result<(), ProtocolError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        if self.any_origin {
            return Ok(());
        }
        let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let own = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|rest| Some(rest) == host.as_deref());
        if own || self.origins.contains(&origin) {
            Ok(())
        } else {
            Err(ProtocolError::new(
                StatusCode::FORBIDDEN,
                "ORIGIN_NOT_ALLOWED",
                "requests from pages of this origin are not allowed (see AguiServer::cors)",
            ))
        }
    }
}

/// The Host names of a server bound to a loopback address on `port`: what a browser on this
/// machine sends for it.
pub(crate) fn loopback_hosts(port: u16) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|h| format!("{h}:{port}"))
        .collect();
    if port == 80 {
        hosts.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
    }
    hosts
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_generated_token_is_long_random_and_compared_whole() {
        let a = Secret::generate().unwrap();
        let b = Secret::generate().unwrap();
        assert_eq!(a.expose().len(), 64);
        assert_ne!(a.expose(), b.expose());
        assert!(a.matches(a.expose()));
        assert!(!a.matches(&a.expose()[..63]));
        assert!(!a.matches(b.expose()));
        assert_eq!(format!("{a:?}"), "Secret(..)");
        let auth = Auth::Token(Arc::new(a));
        let ok = format!(
            "bearer {}",
            match &auth {
                Auth::Token(s) => s.expose().to_owned(),
                Auth::Bearer(_) => unreachable!(),
            }
        );
        assert_eq!(
            auth.authenticate(&headers(&[(header::AUTHORIZATION, &ok)]))
                .unwrap()
                .id(),
            TOKEN_PRINCIPAL
        );
        assert!(auth.authenticate(&headers(&[])).is_err());
    }

    #[test]
    fn origins_and_hosts() {
        let sites = Sites {
            hosts: Some(loopback_hosts(8080)),
            origins: vec!["https://app.example".into()],
            any_origin: false,
        };
        let ok = headers(&[
            (header::HOST, "localhost:8080"),
            (header::ORIGIN, "http://localhost:8080"),
        ]);
        assert!(sites.check_host(&ok).is_ok() && sites.check_origin(&ok).is_ok());
        let other_port = headers(&[
            (header::HOST, "localhost:8080"),
            (header::ORIGIN, "http://localhost:9999"),
        ]);
        assert!(sites.check_origin(&other_port).is_err());
        let listed = headers(&[
            (header::HOST, "localhost:8080"),
            (header::ORIGIN, "https://APP.example"),
        ]);
        assert!(sites.check_origin(&listed).is_ok());
        let rebound = headers(&[(header::HOST, "evil.example:8080")]);
        assert!(sites.check_host(&rebound).is_err());
        assert!(sites.check_host(&headers(&[])).is_err());
        let null = headers(&[(header::HOST, "localhost:8080"), (header::ORIGIN, "null")]);
        assert!(sites.check_origin(&null).is_err());
    }
}
