//! Who calls a session's operations: the worker's own code says, from the request Restate's
//! ingress received (its headers), never from the request's body.
//!
//! Restate's ingress lets anyone who reaches it call every public handler. So every public
//! handler of `ReinAgent` and `ReinInbox` first asks the worker's authenticator about its
//! caller; what the authenticator vouches for (a `principal`, its roles, a tenant...) becomes
//! the run's invocation state, with only the keys of the caller's own `state` that the worker
//! allows. The decision is journaled: a replay of the invocation (its worker died) reads the
//! first decision back rather than asking again, so a token that expired since cannot turn a
//! half-done run into a different one.

use std::collections::BTreeSet;
use std::sync::Arc;

use rein_core::{Map, state::InvocationState};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A session operation, as called through Restate's ingress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// `ReinAgent/{session}/invoke`: new input, a run.
    Invoke,
    /// `ReinAgent/{session}/resume`: answers to pending interrupts (approvals).
    Resume,
    /// `ReinAgent/{session}/session`: reads the messages, pending interrupts and last report.
    Session,
    /// `ReinInbox/{session}/inject`: a message for the running run.
    Inject,
    /// `ReinInbox/{session}/status`: where an injected message stands.
    InjectionStatus,
    /// `ReinInbox/{session}/cancel`: cancels the running run.
    Cancel,
    /// `ReinAgent/{session}/abandon`: ends a run that cannot go on (stuck in a journal
    /// mismatch after a deploy, its deployment gone) and saves what it did.
    Abandon,
}

/// A caller of a session operation: what the authenticator decides on.
///
/// The headers are those of the request Restate's ingress received (Restate passes them to
/// the handler and journals them with the invocation). Anyone who reaches the ingress sets
/// any header: trust one only when it proves itself (a signature or token the authenticator
/// verifies), or when only a gateway of yours can reach the ingress and it replaces the
/// header.
#[derive(Debug)]
pub struct Caller<'a> {
    operation: Operation,
    session: &'a str,
    headers: &'a restate_sdk::context::HeaderMap,
}

impl<'a> Caller<'a> {
    pub(crate) fn new(
        operation: Operation,
        session: &'a str,
        headers: &'a restate_sdk::context::HeaderMap,
    ) -> Self {
        Self {
            operation,
            session,
            headers,
        }
    }

    /// The operation called.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The session it is called on (authorize per session here).
    pub fn session(&self) -> &str {
        self.session
    }

    /// A request header, by name (case-insensitive); `None` when absent or repeated (a
    /// repeated credential header is ambiguous, so it counts as none).
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.get_all(name).iter();
        let first = values.next()?;
        values.next().is_none().then_some(first.as_str())
    }

    /// The `Authorization: Bearer <token>` header's token.
    pub fn bearer_token(&self) -> Option<&str> {
        let value = self.header("authorization")?;
        let (scheme, token) = value.split_once(' ')?;
        (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
    }
}

/// Why the authenticator refuses a caller: the operation is not carried out and the caller
/// gets the HTTP status with the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Who is calling is not known (HTTP 401).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The caller is known but may not do this (HTTP 403).
    #[error("forbidden: {0}")]
    Forbidden(String),
}

impl Refusal {
    fn status(&self) -> u16 {
        match self {
            Self::Unauthenticated(_) => 401,
            Self::Forbidden(_) => 403,
        }
    }
}

/// The worker's authenticator: the invocation state it vouches for, or a refusal.
pub(crate) type Authenticate =
    dyn Fn(&Caller<'_>) -> Result<InvocationState, Refusal> + Send + Sync;

/// How the worker admits callers: its authenticator and the keys of `state` it takes from
/// callers.
pub(crate) struct Callers {
    pub(crate) authenticate: Arc<Authenticate>,
    pub(crate) state_keys: BTreeSet<String>,
}

/// The decision about a caller, journaled by the handler (`ctx.run`, named
/// [`AUTHENTICATE`]): a replay reads the first decision back.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Decision {
    Admitted(Map),
    Refused { status: u16, message: String },
}

/// The name of the journaled step that holds the decision.
pub(crate) const AUTHENTICATE: &str = "authenticate caller";

impl Decision {
    /// The state the authenticator vouches for, or its refusal as a terminal error.
    pub(crate) fn admitted(self) -> Result<Map, HandlerError> {
        match self {
            Self::Admitted(state) => Ok(state),
            Self::Refused { status, message } => {
                Err(TerminalError::new_with_code(status, message).into())
            }
        }
    }
}

impl Callers {
    /// Asks the authenticator about a caller (journal the decision before acting on it).
    pub(crate) fn decide(
        &self,
        headers: &restate_sdk::context::HeaderMap,
        operation: Operation,
        session: &str,
    ) -> Json<Decision> {
        Json(
            match (self.authenticate)(&Caller::new(operation, session, headers)) {
                Ok(state) => Decision::Admitted(state.as_map().clone()),
                Err(refusal) => Decision::Refused {
                    status: refusal.status(),
                    message: refusal.to_string(),
                },
            },
        )
    }

    /// The run's invocation state: the caller's `state` keys that the worker allows (another
    /// key is refused, 400: nothing is dropped silently), under what the authenticator vouches
    /// for (which wins on the same key).
    pub(crate) fn invocation_state(
        &self,
        caller_state: Option<Value>,
        trusted: Map,
    ) -> Result<Map, TerminalError> {
        let mut state = match caller_state {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => {
                return Err(TerminalError::new_with_code(
                    400,
                    "`state` must be a JSON object",
                ));
            }
        };
        if let Some(key) = state.keys().find(|k| !self.state_keys.contains(*k)) {
            return Err(TerminalError::new_with_code(
                400,
                format!(
                    "`state.{key}` is not accepted from callers (the worker takes only the keys \
                     it allows: Worker::caller_state_keys)"
                ),
            ));
        }
        state.extend(trusted);
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn callers(keys: &[&str]) -> Callers {
        Callers {
            authenticate: Arc::new(|_| Ok(InvocationState::new())),
            state_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    fn map(v: Value) -> Map {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn a_principal_in_the_body_is_refused_unless_allowed_and_the_trusted_one_wins() {
        let attack = json!({"principal": {"type": "User", "id": "eve",
            "parents": [{"type": "Role", "id": "admin"}]}});
        let e = callers(&[])
            .invocation_state(Some(attack.clone()), Map::new())
            .unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(e.message().contains("state.principal"), "{}", e.message());

        // Allowed keys pass; the authenticator's keys override the caller's.
        let trusted = map(json!({"principal": "ann"}));
        let state = callers(&["principal", "locale"])
            .invocation_state(Some(json!({"principal": "eve", "locale": "fr"})), trusted)
            .unwrap();
        assert_eq!(
            Value::Object(state),
            json!({"principal": "ann", "locale": "fr"})
        );

        let e = callers(&[])
            .invocation_state(Some(json!([1])), Map::new())
            .unwrap_err();
        assert_eq!(e.code(), 400);
    }

    #[test]
    fn headers_repeated_or_absent_are_none_and_bearer_tokens_parse() {
        let mut headers = restate_sdk::context::HeaderMap::default();
        headers.insert("authorization", "Bearer  tok-1 ".to_owned());
        headers.append("x-user", "ann".to_owned());
        headers.append("x-user", "root".to_owned());
        let caller = Caller::new(Operation::Invoke, "s", &headers);
        assert_eq!(caller.bearer_token(), Some("tok-1"));
        assert_eq!(
            caller.header("X-User"),
            None,
            "a repeated header is ambiguous"
        );
        assert_eq!(caller.header("x-missing"), None);
    }
}
