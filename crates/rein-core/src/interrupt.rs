//! Interrupts: a pause for human input, and the answers given on resume (SPEC §4).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request for human input raised at BeforeToolCall (by a hook or a `Confirm`) or by a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Interrupt {
    /// Deterministic id, so a re-run hook finds its answer.
    pub id: String,
    /// Name (for `Confirm`: the handler name).
    pub name: String,
    /// Why input is needed (for `Confirm`: the prompt).
    pub reason: Value,
    /// Fingerprint of the tool call asked about; an answer applies only while it is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The tool use the interrupt was raised for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
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
        }
    }

    /// Binds the interrupt to a tool-call fingerprint.
    pub fn with_fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.fingerprint = Some(fingerprint.into());
        self
    }

    /// Records the tool use the interrupt is about.
    pub fn with_tool_use_id(mut self, tool_use_id: impl Into<String>) -> Self {
        self.tool_use_id = Some(tool_use_id.into());
        self
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

    /// The answer to `id`, only if the interrupt it answers was raised for the same
    /// fingerprint (approvals are bound to the exact tool call).
    pub fn get_bound(&self, id: &str, fingerprint: &str) -> Option<&Value> {
        let a = self.answer(id)?;
        if a.response.is_null() {
            return None;
        }
        match &a.fingerprint {
            Some(f) if f != fingerprint => None,
            _ => Some(&a.response),
        }
    }
}
