//! Interrupts: a pause for human input, and the answers given on resume (SPEC §4).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::message::InterruptResponse;

/// A request for human input raised at BeforeToolCall (by a hook or a `Confirm`) or by a tool.
///
/// Answer one with [`answer`](Self::answer): the answer names the pause it was asked in (its
/// nonce) and the action it approves (its fingerprint), so it can approve nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Interrupt {
    /// Deterministic id, so a re-run hook finds its answer. A resume names
    /// [`resume_id`](Self::resume_id), which adds the pause's nonce.
    pub id: String,
    /// Name (for `Confirm`: the handler name).
    pub name: String,
    /// Why input is needed (for `Confirm`: the prompt), as JSON: the wire format. To show it,
    /// print the interrupt (`{}`) or [`prompt_text`](Self::prompt_text): `{}` on this value
    /// prints a string with its JSON quotes.
    pub reason: Value,
    /// Fingerprint of the tool call asked about; an answer applies only while it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The tool use the interrupt was raised for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// A random value the agent draws each time a run pauses and gives the pause's interrupts:
    /// part of the id a resume names, so an answer to one pause never matches another, even
    /// when the tool-use id and the handler repeat. `None` until the agent pauses on it, and
    /// in pending interrupts stored by releases before it (answered by their `id` alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// The JSON schema an answer must match, for an interrupt that is not answered with an
    /// [`Approval`] (a tool's question, an MCP server's form): a client builds its form from
    /// it, and a server taking answers from outside refuses one that does not match before
    /// anything runs. `None`: any JSON (the interrupt checks its answer itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

impl Interrupt {
    /// An interrupt.
    pub fn new(id: impl Into<String>, name: impl Into<String>, reason: impl Into<Value>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            reason: reason.into(),
            fingerprint: None,
            tool_use_id: None,
            nonce: None,
            response_schema: None,
        }
    }

    /// The id a resume names: `<id>#<nonce>`, or the `id` alone for an interrupt without a
    /// nonce. Made here and compared whole — never taken apart — to find what an answer is
    /// for.
    ///
    /// ```
    /// use rein_core::interrupt::Interrupt;
    /// let mut i = Interrupt::new("v1:tool_call:t1:x", "ask", "Go?");
    /// assert_eq!(i.resume_id(), "v1:tool_call:t1:x");
    /// i.nonce = Some("5f1c".into());
    /// assert_eq!(i.resume_id(), "v1:tool_call:t1:x#5f1c");
    /// ```
    pub fn resume_id(&self) -> String {
        match &self.nonce {
            Some(nonce) => format!("{}#{nonce}", self.id),
            None => self.id.clone(),
        }
    }

    /// The answer to this interrupt: it names this pause ([`resume_id`](Self::resume_id)) and
    /// the fingerprint of what was asked about, so it approves exactly that — a later pause,
    /// or the same call changed, refuses it. The safe way to answer an interrupt you hold.
    ///
    /// ```
    /// use rein_core::interrupt::Interrupt;
    /// let i = Interrupt::new("v1:before_tool_call:t1:x", "guard", "Delete?").with_fingerprint("f");
    /// let answer = i.answer(true);
    /// assert_eq!(answer.interrupt_id, i.resume_id());
    /// assert_eq!(answer.fingerprint.as_deref(), Some("f"));
    /// ```
    pub fn answer(&self, response: impl Into<Value>) -> InterruptResponse {
        let answer = InterruptResponse::new(self.resume_id(), response);
        match &self.fingerprint {
            Some(f) => answer.with_fingerprint(f.clone()),
            None => answer,
        }
    }

    /// Checks that `response` approves what this interrupt asks about: it names the same
    /// fingerprint (none for an interrupt bound to none). An answer naming no fingerprint, or
    /// another one — given for another call, or for this one before it changed — is
    /// [`Error::FingerprintMismatch`]: nothing is applied.
    pub fn check_bound(&self, response: &InterruptResponse) -> Result<(), Error> {
        if response.fingerprint == self.fingerprint {
            Ok(())
        } else {
            Err(Error::FingerprintMismatch {
                interrupt_id: response.interrupt_id.clone(),
                given: response.fingerprint.clone(),
            })
        }
    }

    /// Binds the interrupt to a tool-call fingerprint.
    pub fn with_fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.fingerprint = Some(fingerprint.into());
        self
    }

    /// The reason as text for a person: a string itself; a payload's `prompt` or `message`
    /// field (a string), else the payload's JSON. The same rule as a `Confirm`'s prompt text.
    ///
    /// ```
    /// use rein_core::interrupt::Interrupt;
    /// use serde_json::json;
    /// assert_eq!(Interrupt::new("i", "n", json!({"prompt": "Go?", "x": 1})).prompt_text(), "Go?");
    /// assert_eq!(Interrupt::new("i", "n", json!({"x": 1})).prompt_text(), r#"{"x":1}"#);
    /// ```
    pub fn prompt_text(&self) -> String {
        prompt_text(&self.reason)
    }

    /// Whether the interrupt is answered with an [`Approval`]: it is bound to an action (it
    /// has a fingerprint: every intervention `Confirm`, a sub-agent's Confirm raised at its
    /// parent, a hook's interrupt bound with [`with_fingerprint`](Self::with_fingerprint)).
    /// Other interrupts — a tool's or a hook's own question, a Confirm stored by a release
    /// before fingerprints — take any JSON. Answers from another process to one that does go
    /// through [`Approval::from_wire`].
    pub fn takes_an_approval(&self) -> bool {
        self.fingerprint.is_some()
    }

    /// Declares the JSON schema its answer must match (see
    /// [`response_schema`](Self::response_schema)).
    pub fn with_response_schema(mut self, schema: Value) -> Self {
        self.response_schema = Some(schema);
        self
    }

    /// Records the tool use the interrupt is about.
    pub fn with_tool_use_id(mut self, tool_use_id: impl Into<String>) -> Self {
        self.tool_use_id = Some(tool_use_id.into());
        self
    }
}

/// The interrupt's [`prompt_text`](Interrupt::prompt_text): what to show a human.
///
/// ```
/// use rein_core::interrupt::Interrupt;
/// let i = Interrupt::new("i", "delete-approval", "Delete a.txt?");
/// assert_eq!(format!("asked: {i}"), "asked: Delete a.txt?");
/// assert_eq!(format!("{}", i.reason), "\"Delete a.txt?\""); // the JSON value
/// ```
impl std::fmt::Display for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.prompt_text())
    }
}

/// Where an interrupt was raised: the lifecycle point, what it was about, who asked, and —
/// for an interrupt of an agent running as a tool (SPEC §9.1) — the tool use it came up
/// through. The run keeps it with the interrupt while it waits (it decides what an answer may
/// edit, and which child an answer goes down to); the interrupt's `id` is for the wire only,
/// never taken apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InterruptPoint {
    /// The lifecycle point.
    pub event: InterruptEvent,
    /// What it is about: a tool use id, `m<model call index>`, `input`, an injection id.
    pub subject: String,
    /// Who asked: the handler, hook or tool's name for the interrupt (its `name` where it was
    /// raised).
    pub handler: String,
    /// The tool use of the agent tool whose sub-agent raised it (its own point is the
    /// sub-agent's); `None` for an interrupt of this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

impl InterruptPoint {
    /// An interrupt raised at `event` about `subject` by `handler`.
    pub fn new(
        event: InterruptEvent,
        subject: impl Into<String>,
        handler: impl Into<String>,
    ) -> Self {
        Self {
            event,
            subject: subject.into(),
            handler: handler.into(),
            parent: None,
        }
    }

    /// The same point, raised by a sub-agent running as the tool use `tool_use_id`.
    pub fn under(mut self, tool_use_id: impl Into<String>) -> Self {
        self.parent = Some(tool_use_id.into());
        self
    }
}

/// The lifecycle points an interrupt can be raised at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InterruptEvent {
    /// BeforeInvocation: the input (or an injected message) is held.
    BeforeInvocation,
    /// BeforeModelCall: the model call is held.
    BeforeModelCall,
    /// AfterModelCall: the model's response is held.
    AfterModelCall,
    /// BeforeToolCall: the tool call waits.
    BeforeToolCall,
    /// The tool itself asked (`ToolContext::interrupt`).
    ToolCall,
    /// AfterToolCall: the tool's result is held.
    AfterToolCall,
}

/// The text of a prompt (a `Confirm`'s, an interrupt's reason): a string itself; an object's
/// `prompt` or `message` field when it is a string; else the JSON.
pub fn prompt_text(prompt: &Value) -> String {
    match prompt {
        Value::String(s) => s.clone(),
        Value::Object(o) => match (o.get("prompt"), o.get("message")) {
            (Some(Value::String(s)), _) | (_, Some(Value::String(s))) => s.clone(),
            _ => prompt.to_string(),
        },
        _ => prompt.to_string(),
    }
}

/// One answer, with the fingerprint of the interrupt it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterruptAnswer {
    /// The answer.
    pub response: Value,
    /// The fingerprint recorded by the interrupt that was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// The answers available to hooks and tools during a resume. Cloning is cheap (shared); no
/// answers (the common case) allocate nothing.
#[derive(Debug, Clone, Default)]
pub struct InterruptAnswers(Option<Arc<HashMap<String, InterruptAnswer>>>);

impl InterruptAnswers {
    /// Answers keyed by interrupt id.
    pub fn new(answers: HashMap<String, InterruptAnswer>) -> Self {
        Self((!answers.is_empty()).then(|| Arc::new(answers)))
    }

    fn answer(&self, id: &str) -> Option<&InterruptAnswer> {
        self.0.as_deref()?.get(id)
    }

    /// Every answer with its interrupt id (in no particular order).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &InterruptAnswer)> {
        self.0
            .iter()
            .flat_map(|m| m.iter())
            .map(|(id, a)| (id.as_str(), a))
    }

    /// Whether there are no answers.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The answer to `id`. A `null` answer is no answer at all.
    pub fn get(&self, id: &str) -> Option<&Value> {
        self.answer(id)
            .map(|a| &a.response)
            .filter(|v| !v.is_null())
    }

    /// The answer to `id`, only if it was given for the same fingerprint (approvals are bound
    /// to the exact tool call). An answer bound to no fingerprint approves nothing here.
    pub fn get_bound(&self, id: &str, fingerprint: &str) -> Option<&Value> {
        let a = self.answer(id)?;
        if a.response.is_null() || a.fingerprint.as_deref() != Some(fingerprint) {
            return None;
        }
        Some(&a.response)
    }
}

/// A human's answer to a confirm, as a typed value with a JSON form for approval UIs:
/// `{"approved": true}`, `{"approved": false, "note": "why"}`, or `{"approved": true, "edit": ...}`
/// — approve with an edit: for a `before_tool_call` confirm, the edit is the tool's new input
/// (validated against the tool's schema, and seen by every handler again, so an edit cannot
/// slip past a deny). The plain answers `true`, `"yes"` and `false` remain valid; an object
/// with an `approved` or `edit` key must be of this shape ([`Approval::parse`]).
///
/// ```
/// use rein_core::interrupt::Approval;
/// use serde_json::json;
/// let answer = Approval::approve().with_edit(json!({"path": "draft-old.txt"}));
/// assert_eq!(
///     serde_json::to_value(&answer).unwrap(),
///     json!({"approved": true, "edit": {"path": "draft-old.txt"}})
/// );
/// assert_eq!(Approval::from_answer(&json!("yes")), Some(Approval::approve()));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Approval {
    /// Whether the human approved.
    pub approved: bool,
    /// What the human changed, when approving with an edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<Value>,
    /// A note from the human (kept in the audit with the answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Approval {
    /// An approval.
    pub fn approve() -> Self {
        Self {
            approved: true,
            edit: None,
            note: None,
        }
    }

    /// A rejection.
    pub fn reject() -> Self {
        Self {
            approved: false,
            ..Self::approve()
        }
    }

    /// The same answer, approving this edit.
    pub fn with_edit(mut self, edit: impl Into<Value>) -> Self {
        self.edit = Some(edit.into());
        self
    }

    /// The same answer, with a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The answer as an approval: an object of this shape, or the plain answers (`true`,
    /// `"y"`/`"yes"` approve; `false`, other strings, numbers, arrays, and objects with neither
    /// an `approved` nor an `edit` key reject). `None` for `null` (no answer) and for an object
    /// with one of those keys that is not of this shape — [`parse`](Self::parse) says why.
    pub fn from_answer(answer: &Value) -> Option<Self> {
        Self::parse(answer).ok().flatten()
    }

    /// Like [`from_answer`](Self::from_answer), but an object with an `approved` or an `edit`
    /// key that is not of this shape (`{"approved": "maybe"}`, an edit without `approved`) is
    /// an error saying why: an answer of the wrong shape, not a rejection.
    ///
    /// ```
    /// use rein_core::interrupt::Approval;
    /// use serde_json::json;
    /// assert!(Approval::parse(&json!({"approved": "maybe"})).is_err());
    /// assert_eq!(Approval::parse(&json!({"ok": 1})), Ok(Some(Approval::reject())));
    /// assert_eq!(Approval::parse(&json!(null)), Ok(None));
    /// ```
    pub fn parse(answer: &Value) -> Result<Option<Self>, String> {
        Ok(Some(match answer {
            Value::Null => return Ok(None),
            Value::Bool(b) => {
                if *b {
                    Self::approve()
                } else {
                    Self::reject()
                }
            }
            Value::String(s) => {
                let s = s.trim();
                let yes = s.eq_ignore_ascii_case("y") || s.eq_ignore_ascii_case("yes");
                if yes { Self::approve() } else { Self::reject() }
            }
            Value::Object(m) if m.contains_key("approved") || m.contains_key("edit") => {
                Self::deserialize(answer).map_err(|e| {
                    format!(
                        "an approval is {{\"approved\": true|false, \"edit\"?, \"note\"?}}: {e}"
                    )
                })?
            }
            Value::Object(_) | Value::Number(_) | Value::Array(_) => Self::reject(),
        }))
    }
}

/// The one shape an approval from another process may have (see [`Approval::from_wire`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireApproval {
    approved: bool,
    #[serde(default)]
    edit: Option<Value>,
    #[serde(default)]
    note: Option<String>,
}

impl Approval {
    /// The strict reading of an approval that reached Rein over a wire (Restate's ingress,
    /// AG-UI): `true`, `false`, or `{"approved": true|false, "edit"?, "note"?}` and nothing
    /// else. A typo (`{"approve": true}`), an empty object, a string (`"yes please"`), a
    /// number, `null` or an unknown key is an error saying what was expected, so the caller
    /// gets a 400 and the interrupt still waits — never a silent rejection. (In one process,
    /// [`parse`](Self::parse) also takes the plain answers a terminal prompt gives: `"y"`,
    /// `"yes"`.)
    ///
    /// ```
    /// use rein_core::interrupt::Approval;
    /// use serde_json::json;
    /// assert_eq!(Approval::from_wire(&json!(true)), Ok(Approval::approve()));
    /// assert_eq!(
    ///     Approval::from_wire(&json!({"approved": false, "note": "not now"})),
    ///     Ok(Approval::reject().with_note("not now"))
    /// );
    /// for typo in [json!({"approve": true}), json!({}), json!("yes please"), json!(null)] {
    ///     assert!(Approval::from_wire(&typo).is_err(), "{typo}");
    /// }
    /// ```
    pub fn from_wire(answer: &Value) -> Result<Self, String> {
        const SHAPE: &str =
            "an approval is true, false or {\"approved\": true|false, \"edit\"?, \"note\"?}";
        match answer {
            Value::Bool(true) => Ok(Self::approve()),
            Value::Bool(false) => Ok(Self::reject()),
            Value::Object(_) => WireApproval::deserialize(answer)
                .map(|w| Self {
                    approved: w.approved,
                    edit: w.edit,
                    note: w.note,
                })
                .map_err(|e| format!("{SHAPE}: {e}")),
            other => Err(format!("{SHAPE}, not {}", json_kind(other))),
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl From<Approval> for Value {
    fn from(a: Approval) -> Self {
        serde_json::to_value(a).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_shaped_like_an_approval_must_be_one() {
        for bad in [
            json!({"approved": "maybe"}),
            json!({"approved": null}),
            json!({"edit": "new text"}),
            json!({"approved": true, "note": 5}),
        ] {
            let err = Approval::parse(&bad).unwrap_err();
            assert!(err.starts_with("an approval is "), "{err}");
            assert_eq!(Approval::from_answer(&bad), None, "{bad}");
        }
        let edited = json!({"approved": true, "edit": {"x": 1}, "note": "ok", "trust": true});
        assert_eq!(
            Approval::parse(&edited),
            Ok(Some(
                Approval::approve()
                    .with_edit(json!({"x": 1}))
                    .with_note("ok")
            ))
        );
    }

    /// Issue #37: over a wire, a typo or a plain string is an error, not a silent "no".
    #[test]
    fn a_wire_approval_has_one_shape() {
        for bad in [
            json!({"approve": true}),
            json!({}),
            json!("yes please"),
            json!("yes"),
            json!(1),
            json!(null),
            json!([true]),
            json!({"approved": "yes"}),
            json!({"approved": true, "trust": true}),
        ] {
            let err = Approval::from_wire(&bad).unwrap_err();
            assert!(err.starts_with("an approval is "), "{bad}: {err}");
        }
        let typo = Approval::from_wire(&json!({"approve": true})).unwrap_err();
        assert!(typo.contains("unknown field `approve`"), "{typo}");
        assert_eq!(
            Approval::from_wire(&json!({"approved": true, "edit": {"x": 1}})),
            Ok(Approval::approve().with_edit(json!({"x": 1})))
        );
        assert_eq!(Approval::from_wire(&json!(false)), Ok(Approval::reject()));
    }

    #[test]
    fn bound_interrupts_take_approvals() {
        let id = crate::audit::EventKind::AfterToolCall.interrupt_id("t1", "guard");
        let confirm = Interrupt::new(id.clone(), "guard", "ok?").with_fingerprint("f");
        assert!(confirm.takes_an_approval());
        // A hook's own question on the same event (same id shape, no fingerprint) takes any
        // JSON: its hook reads the answer.
        assert!(!Interrupt::new(id, "ask", "Count?").takes_an_approval());
        let tools_own = Interrupt::new("v1:tool_call:t1:x", "ask", "Which city?");
        assert!(!tools_own.takes_an_approval());
        assert!(tools_own.with_fingerprint("f").takes_an_approval());
    }

    /// An answer applies to a confirm only if it was given for the confirm's fingerprint: one
    /// bound to none (an id-only answer, a hook's own interrupt that shares the id) approves
    /// nothing.
    #[test]
    fn a_bound_answer_needs_the_same_fingerprint() {
        let answer = |fingerprint: Option<&str>| InterruptAnswer {
            response: json!(true),
            fingerprint: fingerprint.map(str::to_owned),
        };
        let answers = |a| InterruptAnswers::new(HashMap::from([("i".to_owned(), a)]));
        assert_eq!(
            answers(answer(Some("f"))).get_bound("i", "f"),
            Some(&json!(true))
        );
        assert_eq!(answers(answer(Some("g"))).get_bound("i", "f"), None);
        assert_eq!(answers(answer(None)).get_bound("i", "f"), None);
        // Unbound lookups (a hook's own interrupt) still see it.
        assert_eq!(answers(answer(None)).get("i"), Some(&json!(true)));
    }

    #[test]
    fn an_answer_names_its_pause_and_its_fingerprint() {
        let mut i =
            Interrupt::new("v1:before_tool_call:t1:x", "guard", "Delete?").with_fingerprint("f");
        assert_eq!(
            i.resume_id(),
            i.id,
            "no nonce: a pending interrupt of an earlier release"
        );
        i.nonce = Some("n1".into());
        let a = i.answer("yes");
        assert_eq!(a.interrupt_id, "v1:before_tool_call:t1:x#n1");
        assert_eq!(a.fingerprint.as_deref(), Some("f"));
        assert!(i.check_bound(&a).is_ok());
        let raw = InterruptResponse::new(i.resume_id(), "yes");
        assert!(matches!(
            i.check_bound(&raw),
            Err(Error::FingerprintMismatch { given: None, .. })
        ));
        let other = raw.with_fingerprint("g");
        assert!(matches!(
            i.check_bound(&other),
            Err(Error::FingerprintMismatch { given: Some(_), .. })
        ));
        // The wire form: `fingerprint` only when named; an answer of an earlier release loads.
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"interruptId": "v1:before_tool_call:t1:x#n1", "response": "yes", "fingerprint": "f"})
        );
        let old: InterruptResponse =
            serde_json::from_value(json!({"interruptId": "i", "response": true})).unwrap();
        assert_eq!(old.fingerprint, None);
    }

    #[test]
    fn other_answers_keep_the_plain_rule() {
        for (answer, approved) in [
            (json!(true), true),
            (json!(" Yes "), true),
            (json!("y"), true),
            (json!(false), false),
            (json!("no"), false),
            (json!(""), false),
            (json!(1), false),
            (json!([true]), false),
            (json!({"ok": true}), false),
            (json!({"approved": false}), false),
        ] {
            assert_eq!(
                Approval::parse(&answer).unwrap().map(|a| a.approved),
                Some(approved),
                "{answer}"
            );
        }
        assert_eq!(Approval::parse(&Value::Null), Ok(None));
    }
}
