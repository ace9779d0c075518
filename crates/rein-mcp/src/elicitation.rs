//! Elicitation: a server asks the user for input during a tool call (`elicitation/create`, or
//! an `input_required` round of the stateless protocol). Rein makes it a durable interrupt of
//! the tool call: the run pauses, a human answers (maybe in another process, much later), and
//! on resume the tool call is issued again and the server's repeated question is answered from
//! the stored answer. The protocol cannot keep a request open across processes, so re-issuing
//! is the only durable way; the answer is bound to exactly the question asked (its message and
//! schema or URL), so a server asking something else on the re-issued call asks a new question.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rein_core::interrupt::Interrupt;
use rein_core::tool::{ToolContext, ToolProgress};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ProgressToken};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use crate::{McpError, McpLimits, json_depth, json_size};

/// The name of every elicitation interrupt (its [`Interrupt::name`]).
pub const ELICITATION_INTERRUPT: &str = "mcp_elicitation";

/// What an MCP server asks the user during a tool call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Elicitation {
    /// The server's message to the user.
    pub message: String,
    /// What it asks for: a form, or a visit to a URL.
    pub request: ElicitationRequest,
}

/// What an elicitation asks for.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ElicitationRequest {
    /// Form mode: values for the fields of `schema` (a JSON schema of an object whose
    /// properties are strings, numbers, booleans or enums).
    Form {
        /// The requested schema.
        schema: Value,
    },
    /// URL mode: the user opens `url` (out of band: a sign-in, a payment) and says when done.
    Url {
        /// The URL.
        url: String,
    },
}

/// Field names the default policy never hands to a server (lower-cased, without `_`, `-` or
/// spaces): the MCP specification forbids servers to ask for sensitive information in form
/// mode (URL mode is for that), so a form asking for one is declined without a human.
const SECRET_PARTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "privatekey",
    "credential",
    "cardnumber",
    "creditcard",
];
/// Short secret names, matched whole (as parts they occur in harmless words).
const SECRET_NAMES: &[&str] = &["pin", "otp", "ssn", "cvv", "cvc", "iban"];

impl Elicitation {
    /// The names of the fields a form asks for (none for URL mode).
    pub fn field_names(&self) -> impl Iterator<Item = &str> {
        let properties = match &self.request {
            ElicitationRequest::Form { schema } => {
                schema.get("properties").and_then(Value::as_object)
            }
            ElicitationRequest::Url { .. } => None,
        };
        properties
            .into_iter()
            .flat_map(|p| p.keys().map(String::as_str))
    }

    /// Whether a form asks for a field whose name says it is a secret (`password`, `api_key`,
    /// `token`, `pin`, ...): what the default policy declines.
    pub fn asks_for_secret(&self) -> bool {
        self.field_names().any(|name| {
            let name: String = name
                .chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect();
            SECRET_NAMES.contains(&name.as_str()) || SECRET_PARTS.iter().any(|p| name.contains(p))
        })
    }

    fn from_params(params: &ElicitRequestParams) -> Option<Self> {
        match params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => Some(Self {
                message: message.clone(),
                request: ElicitationRequest::Form {
                    schema: serde_json::to_value(requested_schema).ok()?,
                },
            }),
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => Some(Self {
                message: message.clone(),
                request: ElicitationRequest::Url { url: url.clone() },
            }),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// What the answer is bound to, as JSON: the mode, the message and the schema or URL.
    fn question(&self) -> Value {
        let mut q = Map::new();
        q.insert("message".into(), Value::String(self.message.clone()));
        match &self.request {
            ElicitationRequest::Form { schema } => {
                q.insert("mode".into(), "form".into());
                q.insert("requestedSchema".into(), schema.clone());
            }
            ElicitationRequest::Url { url } => {
                q.insert("mode".into(), "url".into());
                q.insert("url".into(), Value::String(url.clone()));
            }
        }
        Value::Object(q)
    }

    /// The JSON schema of an [`ElicitationAnswer`] to this question, declared on the interrupt
    /// ([`Interrupt::response_schema`]): one alternative per action, told apart by the constant
    /// `action` (a client shows a button each), `accept` with the requested form as `content`
    /// (closed: no field the form does not name) — or, in URL mode, without content — and
    /// `false`, a dismissal (what AG-UI's `cancelled` answers), read as `cancel`. A client
    /// of AG-UI renders the form from it, and the server refuses an answer that does not match
    /// before the run resumes.
    fn answer_schema(&self) -> Value {
        let choice = |title: &str, action: &str, content: Option<Value>| {
            let mut properties = Map::new();
            properties.insert("action".into(), serde_json::json!({"const": action}));
            let mut required = vec![Value::from("action")];
            if let Some(content) = content {
                properties.insert("content".into(), content);
                required.push("content".into());
            }
            serde_json::json!({"title": title, "type": "object", "properties": properties,
                "required": required, "additionalProperties": false})
        };
        let accept = match &self.request {
            ElicitationRequest::Form { schema } => {
                let mut content = schema.clone();
                if let Some(c) = content.as_object_mut() {
                    // A dialect named inside another schema is no business of the answer's.
                    c.remove("$schema");
                    c.insert("additionalProperties".into(), Value::Bool(false));
                }
                choice("Accept", "accept", Some(content))
            }
            ElicitationRequest::Url { .. } => choice("Done", "accept", None),
        };
        serde_json::json!({"oneOf": [
            accept,
            choice("Decline", "decline", None),
            choice("Cancel", "cancel", None),
            {"const": false, "title": "Cancel",
             "description": "a dismissal (AG-UI's `cancelled`): the same as `cancel`"},
        ]})
    }

    /// The SHA-256 of the question's canonical JSON (keys sorted), in hex.
    fn fingerprint(&self) -> String {
        let canonical = sorted(&self.question()).to_string();
        Sha256::digest(canonical.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// `value` with the keys of every object in sorted order (whatever serde_json's map keeps).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// What a policy does with an elicitation before any human sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElicitationVerdict {
    /// Ask a human: the run pauses with an interrupt.
    Ask,
    /// Refuse to give the information (`decline`); the server's tool goes on without it.
    Decline,
    /// Refuse the whole operation (`cancel`).
    Cancel,
}

/// Decides, per elicitation, whether a human is asked (see
/// [`McpClientBuilder::on_elicitation`](crate::McpClientBuilder::on_elicitation)).
pub(crate) type ElicitationPolicy = Arc<dyn Fn(&Elicitation) -> ElicitationVerdict + Send + Sync>;

/// The default policy: decline a form asking for a secret ([`Elicitation::asks_for_secret`]),
/// ask a human about anything else.
pub(crate) fn default_policy() -> ElicitationPolicy {
    Arc::new(|e: &Elicitation| {
        if e.asks_for_secret() {
            ElicitationVerdict::Decline
        } else {
            ElicitationVerdict::Ask
        }
    })
}

/// The answer to an elicitation interrupt, as its JSON form: `{"action": "accept", "content":
/// {...}}`, `{"action": "decline"}` or `{"action": "cancel"}` — the protocol's result. An
/// accepted form's content is checked against the requested schema (and may hold no field
/// the schema does not name); URL mode is accepted without content.
///
/// ```
/// use rein_mcp::ElicitationAnswer;
/// use serde_json::json;
/// let answer = ElicitationAnswer::accept(json!({"name": "Ada"}));
/// assert_eq!(serde_json::Value::from(answer), json!({"action": "accept", "content": {"name": "Ada"}}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase", try_from = "AnswerWire")]
#[non_exhaustive]
pub enum ElicitationAnswer {
    /// The user gives the content (form mode), or did what the URL asked (URL mode: no content).
    Accept {
        /// The form's values.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Value>,
    },
    /// The user refuses to give the information.
    Decline,
    /// The user cancels the operation.
    Cancel,
}

/// The wire form of an answer, read strictly: no field but `action` and `content`, and
/// `content` only with `accept`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerWire {
    action: AnswerAction,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum AnswerAction {
    Accept,
    Decline,
    Cancel,
}

impl TryFrom<AnswerWire> for ElicitationAnswer {
    type Error = String;
    fn try_from(wire: AnswerWire) -> Result<Self, String> {
        match (wire.action, wire.content) {
            (AnswerAction::Accept, content) => Ok(Self::Accept { content }),
            (AnswerAction::Decline, None) => Ok(Self::Decline),
            (AnswerAction::Cancel, None) => Ok(Self::Cancel),
            (_, Some(_)) => Err("only an `accept` answer has content".into()),
        }
    }
}

impl ElicitationAnswer {
    /// Accepts a form with `content` (a JSON object of the schema's fields).
    pub fn accept(content: Value) -> Self {
        Self::Accept {
            content: Some(content),
        }
    }
}

impl From<ElicitationAnswer> for Value {
    fn from(answer: ElicitationAnswer) -> Self {
        // A plain enum of owned JSON: serializing cannot fail.
        serde_json::to_value(answer).unwrap_or(Value::Null)
    }
}

/// Why an elicitation stopped the tool call.
pub(crate) enum Stop {
    /// A human must answer: the interrupt's id.
    Interrupted(String),
    /// The server went past a limit, or the stored answer is not valid for the question.
    Failed(McpError),
}

/// One tool call that elicitations and progress notifications may belong to.
pub(crate) struct Call {
    cx: Option<ToolContext>,
    /// The server's name of the tool.
    tool: String,
    asked: AtomicUsize,
    stop: Mutex<Option<Stop>>,
    stopped: tokio::sync::Notify,
    /// The progress token of the request under way (each `input_required` round is a request
    /// of its own, with a token of its own).
    progress_token: Mutex<Option<ProgressToken>>,
}

impl Call {
    fn new(cx: Option<ToolContext>, tool: &str) -> Self {
        Self {
            cx,
            tool: tool.to_owned(),
            asked: AtomicUsize::new(0),
            stop: Mutex::new(None),
            stopped: tokio::sync::Notify::new(),
            progress_token: Mutex::new(None),
        }
    }

    /// The server's progress notifications with `token` are this call's from now on.
    pub(crate) fn progress_with(&self, token: ProgressToken) {
        *self
            .progress_token
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(token);
    }

    fn has_progress_token(&self, token: &ProgressToken) -> bool {
        self.progress_token
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            == Some(token)
    }

    /// Waits until an elicitation stops the call (a stop before the wait counts).
    pub(crate) async fn stopped(&self) {
        self.stopped.notified().await;
    }

    pub(crate) fn take_stop(&self) -> Option<Stop> {
        self.stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn halt(&self, why: Stop) {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if stop.is_none() {
            *stop = Some(why);
            // `notify_one` keeps a permit: a waiter arriving later still wakes.
            self.stopped.notify_one();
        }
    }
}

/// What the client answers a server's requests and notifications with: its elicitation policy
/// and limits, the calls under way, and whether the tool list changed.
pub(crate) struct Elicitor {
    pub(crate) server: std::sync::OnceLock<String>,
    pub(crate) policy: ElicitationPolicy,
    pub(crate) limits: McpLimits,
    calls: Mutex<Vec<Arc<Call>>>,
    /// Set by `notifications/tools/list_changed`, cleared when the tools are listed again.
    pub(crate) tools_changed: std::sync::atomic::AtomicBool,
    /// Counts `notifications/tools/list_changed` (a tool source's version).
    pub(crate) list_version: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for Elicitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elicitor").finish_non_exhaustive()
    }
}

/// Removes a call from the calls under way when it ends (or is dropped).
pub(crate) struct Registered<'a> {
    elicitor: &'a Elicitor,
    pub(crate) call: Arc<Call>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.elicitor
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|c| !Arc::ptr_eq(c, &self.call));
    }
}

fn result(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
    let mut r = ElicitResult::new(action);
    r.content = content;
    r
}

impl Elicitor {
    pub(crate) fn new(policy: ElicitationPolicy, limits: McpLimits) -> Self {
        Self {
            server: std::sync::OnceLock::new(),
            policy,
            limits,
            calls: Mutex::new(Vec::new()),
            tools_changed: std::sync::atomic::AtomicBool::new(false),
            list_version: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn server(&self) -> String {
        self.server.get().cloned().unwrap_or_default()
    }

    pub(crate) fn register(&self, cx: Option<ToolContext>, tool: &str) -> Registered<'_> {
        let call = Arc::new(Call::new(cx, tool));
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call.clone());
        Registered {
            elicitor: self,
            call,
        }
    }

    /// A progress notification: reported to the tool call whose request carries its progress
    /// token ([`ToolContext::report_progress`]: the agent streams it as an
    /// `AgentEvent::ToolProgress`), and logged (event `MCP progress`, target `rein_mcp`, at
    /// `debug`) with the server, the tool and the numbers. A token of no call under way (the
    /// call ended, or the server made it up) is only logged. Nothing is kept: a server
    /// flooding progress costs one report each, which the agent's stream coalesces.
    pub(crate) fn on_progress(&self, params: rmcp::model::ProgressNotificationParam) {
        let call = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|c| c.has_progress_token(&params.progress_token))
            .cloned();
        tracing::debug!(
            target: "rein_mcp",
            server = %self.server(),
            tool = %call.as_ref().map_or("", |c| c.tool.as_str()),
            progress = params.progress,
            total = params.total,
            message = params.message.as_deref().unwrap_or_default(),
            "MCP progress"
        );
        if let Some(cx) = call.as_ref().and_then(|c| c.cx.as_ref()) {
            let mut progress = ToolProgress::new(params.progress);
            progress.total = params.total;
            progress.message = params.message;
            cx.report_progress(progress);
        }
    }

    /// The run's context of the tool call under way, when there is exactly one and it runs in
    /// a run (a server's request over stdio says nothing of the call it belongs to).
    pub(crate) fn sole_context(&self) -> Option<ToolContext> {
        self.sole_call()?.cx.clone()
    }

    /// The call under way, when there is exactly one.
    fn sole_call(&self) -> Option<Arc<Call>> {
        match self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_slice()
        {
            [call] => Some(call.clone()),
            _ => None,
        }
    }

    /// An `elicitation/create` request from the server. Over stdio nothing says which tool
    /// call it belongs to: with exactly one call under way it is that call's; otherwise it is
    /// cancelled (an answer must never reach a question asked for another call).
    pub(crate) fn on_request(&self, params: &ElicitRequestParams) -> ElicitResult {
        match self.sole_call() {
            Some(call) => self.elicit(&call, params),
            None => {
                tracing::warn!(
                    server = %self.server(),
                    "MCP elicitation cancelled: not during exactly one tool call of this client"
                );
                result(ElicitationAction::Cancel, None)
            }
        }
    }

    /// Answers one elicitation of `call`: from the policy, from the stored answer to this very
    /// question, or by raising an interrupt (which stops the call: it runs again on resume).
    pub(crate) fn elicit(&self, call: &Call, params: &ElicitRequestParams) -> ElicitResult {
        let cancel = || result(ElicitationAction::Cancel, None);
        if call.is_stopped() {
            return cancel();
        }
        let seq = call.asked.fetch_add(1, Ordering::SeqCst);
        if seq >= self.limits.max_elicitations {
            call.halt(Stop::Failed(self.too_large(
                "the number of elicitations in one tool call",
                self.limits.max_elicitations,
            )));
            return cancel();
        }
        if json_size(params) > self.limits.max_elicitation_bytes {
            call.halt(Stop::Failed(self.too_large(
                "an elicitation request (bytes)",
                self.limits.max_elicitation_bytes,
            )));
            return cancel();
        }
        let Some(elicitation) = Elicitation::from_params(params) else {
            return cancel();
        };
        if let ElicitationRequest::Form { schema } = &elicitation.request
            && json_depth(schema) > self.limits.max_schema_depth
        {
            call.halt(Stop::Failed(self.too_large(
                "the schema of an elicitation (depth)",
                self.limits.max_schema_depth,
            )));
            return cancel();
        }
        match (self.policy)(&elicitation) {
            ElicitationVerdict::Ask => {}
            ElicitationVerdict::Decline => {
                tracing::info!(server = %self.server(), "MCP elicitation declined by policy");
                return result(ElicitationAction::Decline, None);
            }
            ElicitationVerdict::Cancel => {
                tracing::info!(server = %self.server(), "MCP elicitation cancelled by policy");
                return cancel();
            }
        }
        // Without a tool context (a call from code) there is nobody to ask.
        let Some(cx) = &call.cx else {
            return cancel();
        };
        let fingerprint = elicitation.fingerprint();
        let id = format!(
            "v1:tool_call:{}:{ELICITATION_INTERRUPT}:{seq}:{fingerprint}",
            cx.tool_use_id()
        );
        if let Some(answer) = cx.answer(&id) {
            return match self.check_answer(&elicitation, answer) {
                Ok(r) => r,
                Err(e) => {
                    call.halt(Stop::Failed(e));
                    cancel()
                }
            };
        }
        let mut reason = elicitation.question();
        reason["server"] = Value::String(self.server());
        reason["fingerprint"] = Value::String(fingerprint);
        cx.raise_interrupt(
            Interrupt::new(id.clone(), ELICITATION_INTERRUPT, reason)
                .with_response_schema(elicitation.answer_schema())
                .with_tool_use_id(cx.tool_use_id()),
        );
        call.halt(Stop::Interrupted(id));
        cancel()
    }

    /// The stored answer as the protocol's result, if it is a valid answer to `elicitation`.
    fn check_answer(
        &self,
        elicitation: &Elicitation,
        answer: &Value,
    ) -> Result<ElicitResult, McpError> {
        let invalid = |why: String| McpError::InvalidAnswer {
            server: self.server(),
            message: why,
        };
        // A dismissal without a choice (AG-UI's `cancelled`) is the protocol's `cancel`.
        if *answer == Value::Bool(false) {
            return Ok(result(ElicitationAction::Cancel, None));
        }
        let answer: ElicitationAnswer = serde_json::from_value(answer.clone()).map_err(|e| {
            invalid(format!(
                "expected {{\"action\": \"accept\"|\"decline\"|\"cancel\", \"content\"?: {{...}}}}: {e}"
            ))
        })?;
        Ok(match (answer, &elicitation.request) {
            (ElicitationAnswer::Decline, _) => result(ElicitationAction::Decline, None),
            (ElicitationAnswer::Cancel, _) => result(ElicitationAction::Cancel, None),
            (ElicitationAnswer::Accept { content: None }, ElicitationRequest::Url { .. }) => {
                result(ElicitationAction::Accept, None)
            }
            (ElicitationAnswer::Accept { content: Some(_) }, ElicitationRequest::Url { .. }) => {
                return Err(invalid(
                    "a URL elicitation is accepted without content".into(),
                ));
            }
            (ElicitationAnswer::Accept { content }, ElicitationRequest::Form { schema }) => {
                let content = content.unwrap_or(Value::Null);
                check_content(schema, &content).map_err(invalid)?;
                result(ElicitationAction::Accept, Some(content))
            }
        })
    }

    fn too_large(&self, what: &str, limit: usize) -> McpError {
        McpError::TooLarge {
            server: self.server(),
            what: what.to_owned(),
            limit,
        }
    }
}

/// Checks an accepted form: an object valid against the requested schema that names no field
/// the schema does not (the server gets exactly what it asked for).
fn check_content(schema: &Value, content: &Value) -> Result<(), String> {
    let Some(fields) = content.as_object() else {
        return Err("an accepted form's content must be a JSON object".into());
    };
    let known = schema.get("properties").and_then(Value::as_object);
    if let Some(extra) = fields
        .keys()
        .find(|k| !known.is_some_and(|p| p.contains_key(*k)))
    {
        return Err(format!(
            "the content has a field `{extra}` the form does not ask for"
        ));
    }
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the server's schema is not a valid JSON schema: {e}"))?;
    if let Some(error) = validator.iter_errors(content).next() {
        return Err(format!("the content does not match the form: {error}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(schema: Value) -> Elicitation {
        Elicitation {
            message: "m".into(),
            request: ElicitationRequest::Form { schema },
        }
    }

    #[test]
    fn secrets_are_recognised_by_field_name_only() {
        let e = form(json!({"properties": {"name": {}, "Pass-Word": {}}}));
        assert!(e.asks_for_secret());
        assert!(form(json!({"properties": {"github_api_key": {}}})).asks_for_secret());
        assert!(form(json!({"properties": {"PIN": {}}})).asks_for_secret());
        let harmless = form(json!({"properties": {
            "shipping": {"description": "no pin or password please"},
            "footprint": {},
        }}));
        assert!(!harmless.asks_for_secret());
    }

    #[test]
    fn fingerprint_ignores_key_order_and_binds_message_and_schema() {
        let a = form(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        let b: Value =
            serde_json::from_str(r#"{"properties": {"a": {"type": "string"}}, "type": "object"}"#)
                .unwrap();
        assert_eq!(a.fingerprint(), form(b).fingerprint());
        let mut other = a.clone();
        other.message = "n".into();
        assert_ne!(a.fingerprint(), other.fingerprint());
        assert_ne!(
            a.fingerprint(),
            form(json!({"type": "object", "properties": {"a": {"type": "number"}}})).fingerprint()
        );
    }

    #[test]
    fn content_is_checked_against_the_form() {
        let schema = json!({
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
            "required": ["n"],
        });
        assert!(check_content(&schema, &json!({"n": 3})).is_ok());
        assert!(check_content(&schema, &json!({"n": 0})).is_err());
        assert!(check_content(&schema, &json!({"s": "x"})).is_err());
        assert!(check_content(&schema, &json!({"n": 3, "password": "x"})).is_err());
        assert!(check_content(&schema, &json!([1])).is_err());
    }

    /// The schema declared on the interrupt takes exactly the answers `check_answer` takes:
    /// an accepted form of the requested fields, a decline or a cancel.
    #[test]
    fn the_answer_schema_takes_what_the_answer_check_takes() {
        let e = form(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
            "required": ["n"],
        }));
        let schema = e.answer_schema();
        let valid = jsonschema::validator_for(&schema).unwrap();
        for ok in [
            json!({"action": "accept", "content": {"n": 3}}),
            json!({"action": "accept", "content": {"n": 3, "s": "x"}}),
            json!({"action": "decline"}),
            json!({"action": "cancel"}),
            json!(false),
        ] {
            assert!(valid.is_valid(&ok), "{ok}");
        }
        for bad in [
            json!({"action": "accept", "content": {"n": 0}}),
            json!({"action": "accept", "content": {"n": 3, "password": "x"}}),
            json!({"action": "accept"}),
            json!({"action": "decline", "content": {"n": 3}}),
            json!({"action": "maybe"}),
            json!(true),
            json!(null),
        ] {
            assert!(!valid.is_valid(&bad), "{bad}");
        }
        let url = Elicitation {
            message: "m".into(),
            request: ElicitationRequest::Url {
                url: "https://example.com/pay".into(),
            },
        };
        let valid = jsonschema::validator_for(&url.answer_schema()).unwrap();
        assert!(valid.is_valid(&json!({"action": "accept"})));
        assert!(!valid.is_valid(&json!({"action": "accept", "content": {}})));
    }

    #[test]
    fn answers_have_the_protocol_shape() {
        assert_eq!(
            Value::from(ElicitationAnswer::Decline),
            json!({"action": "decline"})
        );
        let parsed: ElicitationAnswer =
            serde_json::from_value(json!({"action": "accept"})).unwrap();
        assert_eq!(parsed, ElicitationAnswer::Accept { content: None });
        assert!(serde_json::from_value::<ElicitationAnswer>(json!({"approved": true})).is_err());
        for bad in [
            json!({"action": "decline", "x": 1}),
            json!({"action": "decline", "content": {}}),
            json!({"action": "maybe"}),
        ] {
            assert!(serde_json::from_value::<ElicitationAnswer>(bad).is_err());
        }
    }
}
