//! Tools: the [`Tool`] trait, its type-erased handle, the tool context, and tool specs.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::BoxError;
use crate::id::{InvocationId, tool_call_interrupt_id};
use crate::interrupt::{Interrupt, InterruptAnswers};
use crate::message::{ToolResultContent, ToolResultStatus};
use crate::state::{AgentState, InvocationState};

/// A boxed, `Send` future, as used by the type-erased twins of Rein's async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the model is told about a tool: name, description and JSON input schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolSpec {
    /// Unique tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the input object. Shared: a spec's clones (an agent's list of specs, each
    /// request's) point to one schema, and the agent's compiled validator is found by it
    /// without reading it. Serialized as the schema itself.
    pub input_schema: Arc<Value>,
}

impl ToolSpec {
    /// A tool spec (`input_schema` a [`Value`], or an `Arc<Value>` to share one).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: impl Into<Arc<Value>>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: input_schema.into(),
        }
    }

    /// Whether `name` is what every model provider accepts as a tool (or output format) name:
    /// 1 to 64 of `[a-zA-Z0-9_-]`.
    pub fn is_valid_name(name: &str) -> bool {
        (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }

    /// `text` made a valid name: any other character becomes `_`, cut to 64 (`_` when empty).
    ///
    /// ```
    /// use rein_core::tool::ToolSpec;
    /// assert_eq!(ToolSpec::name_from("files/read v2"), "files_read_v2");
    /// assert!(ToolSpec::is_valid_name(&ToolSpec::name_from("")));
    /// ```
    pub fn name_from(text: &str) -> String {
        let name: String = text
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        if name.is_empty() { "_".into() } else { name }
    }
}

/// What a tool returns on success (or, with `status: Error`, a failure it reports itself).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolOutput {
    /// Success or error.
    pub status: ToolResultStatus,
    /// Result content.
    pub content: Vec<ToolResultContent>,
}

impl ToolOutput {
    /// A successful text output.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            status: ToolResultStatus::Success,
            content: vec![ToolResultContent::Text(text.into())],
        }
    }

    /// A successful JSON output.
    pub fn json(value: Value) -> Self {
        Self {
            status: ToolResultStatus::Success,
            content: vec![ToolResultContent::Json(value)],
        }
    }

    /// An output with explicit status and content.
    pub fn new(status: ToolResultStatus, content: Vec<ToolResultContent>) -> Self {
        Self { status, content }
    }
}

impl From<String> for ToolOutput {
    fn from(s: String) -> Self {
        Self::text(s)
    }
}

impl From<&str> for ToolOutput {
    fn from(s: &str) -> Self {
        Self::text(s)
    }
}

impl From<Value> for ToolOutput {
    fn from(v: Value) -> Self {
        Self::json(v)
    }
}

/// A tool failure. The model sees `Error: <message>` as an error tool result. Any
/// `std::error::Error` converts into it, so `?` works inside tools.
pub struct ToolError {
    message: String,
    source: Option<BoxError>,
}

impl ToolError {
    /// A failure with a message.
    pub fn msg(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// The message shown to the model (after `Error: `).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The underlying error, if any.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(e: E) -> Self {
        Self {
            message: e.to_string(),
            source: Some(Box::new(e)),
        }
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Returned by [`ToolContext::interrupt`] when no answer is known yet: propagate it with `?`;
/// the agent stops with the interrupt pending and runs the tool again on resume.
#[derive(Debug, Clone, thiserror::Error)]
#[error("interrupt raised: {0}")]
pub struct InterruptRaised(pub String);

/// How far a running tool has come, as it reports it with [`ToolContext::report_progress`]
/// (an MCP server's `notifications/progress` for the call, a long job's own count).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolProgress {
    /// Done so far, in the tool's own unit; grows from one report to the next.
    pub progress: f64,
    /// The whole, when known.
    pub total: Option<f64>,
    /// What the tool is doing now, for a human.
    pub message: Option<String>,
}

impl ToolProgress {
    /// Progress `progress`, of an unknown whole, without a message.
    pub fn new(progress: f64) -> Self {
        Self {
            progress,
            total: None,
            message: None,
        }
    }

    /// Of the whole `total`.
    #[must_use]
    pub fn with_total(mut self, total: f64) -> Self {
        self.total = Some(total);
        self
    }

    /// With a message for a human.
    #[must_use]
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

/// Where the progress of a running tool goes: the driver running the tool sets one on its
/// context (rein-agent's agent does when someone reads its event stream).
pub trait ToolProgressListener: Send + Sync {
    /// The tool use `tool_use_id` of the tool `tool_name` reports `progress`. Called from any
    /// task while the tool runs; must not block.
    fn tool_progress(&self, tool_use_id: &str, tool_name: &str, progress: ToolProgress);
}

/// What a running tool can see and do besides its input.
#[derive(Clone)]
pub struct ToolContext {
    /// What every clone of the context shares: one allocation to make, one count to clone.
    call: Arc<ToolCallShared>,
    extension: Option<Arc<dyn Any + Send + Sync>>,
    /// `None` when nobody listens: reporting is then a branch, nothing more.
    progress: Option<Arc<dyn ToolProgressListener>>,
}

/// The part of a [`ToolContext`] its clones share.
struct ToolCallShared {
    /// The tool use id, then the tool's name (one allocation for both).
    ids: Box<str>,
    /// Where the name starts in `ids`.
    name_at: usize,
    invocation_id: InvocationId,
    invocation_state: InvocationState,
    agent_state: AgentState,
    answers: InterruptAnswers,
    raised: Mutex<Vec<Interrupt>>,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("tool_use_id", &self.tool_use_id())
            .field("tool_name", &self.tool_name())
            .field("invocation_id", &self.call.invocation_id)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for one tool call (the agent builds these; tests of tools may too).
    pub fn new(
        tool_use_id: &str,
        tool_name: &str,
        invocation_id: InvocationId,
        invocation_state: InvocationState,
        agent_state: AgentState,
        answers: InterruptAnswers,
    ) -> Self {
        let mut ids = String::with_capacity(tool_use_id.len() + tool_name.len());
        ids.push_str(tool_use_id);
        ids.push_str(tool_name);
        Self {
            call: Arc::new(ToolCallShared {
                ids: ids.into_boxed_str(),
                name_at: tool_use_id.len(),
                invocation_id,
                invocation_state,
                agent_state,
                answers,
                raised: Mutex::default(),
            }),
            extension: None,
            progress: None,
        }
    }

    /// Sends this tool's [progress reports](Self::report_progress) to `listener`. One
    /// listener; a later call replaces it.
    pub fn with_progress_listener(mut self, listener: Arc<dyn ToolProgressListener>) -> Self {
        self.progress = Some(listener);
        self
    }

    /// Reports how far the tool has come: the agent running it streams an
    /// `AgentEvent::ToolProgress` (only while the tool runs; nothing when nobody reads the
    /// agent's events). Check [`progress_listened`](Self::progress_listened) first to skip
    /// building a costly report nobody reads.
    ///
    /// ```
    /// # use rein_core::{id::InvocationId, interrupt::InterruptAnswers, state::{AgentState, InvocationState}, tool::{ToolContext, ToolProgress}};
    /// let cx = ToolContext::new("t1", "copy", InvocationId::new(), InvocationState::new(),
    ///     AgentState::new(), InterruptAnswers::default());
    /// cx.report_progress(ToolProgress::new(3.0).with_total(10.0).with_message("3 of 10 files"));
    /// assert!(!cx.progress_listened()); // nobody listens: the report went nowhere
    /// ```
    pub fn report_progress(&self, progress: ToolProgress) {
        if let Some(listener) = &self.progress {
            listener.tool_progress(self.tool_use_id(), self.tool_name(), progress);
        }
    }

    /// Whether anyone listens to [`report_progress`](Self::report_progress).
    pub fn progress_listened(&self) -> bool {
        self.progress.is_some()
    }

    /// Attaches what the driver running the tool offers tools that know it (an agent running
    /// as a tool finds its parent's run there). One value; a later call replaces it.
    pub fn with_extension(mut self, extension: Arc<dyn Any + Send + Sync>) -> Self {
        self.extension = Some(extension);
        self
    }

    /// The driver's extension, if it is a `T`.
    pub fn extension<T: Any>(&self) -> Option<&T> {
        self.extension.as_deref()?.downcast_ref()
    }

    /// The answer a resume carries for the interrupt `id` (ids of your own, raised with
    /// [`raise_interrupt`](Self::raise_interrupt)).
    pub fn answer(&self, id: &str) -> Option<&Value> {
        self.call.answers.get(id)
    }

    /// The answer a resume carries for the interrupt `id`, only if it was given for
    /// `fingerprint` (an answer bound to no fingerprint or another one is none).
    pub fn answer_bound(&self, id: &str, fingerprint: &str) -> Option<&Value> {
        self.call.answers.get_bound(id, fingerprint)
    }

    /// Raises a prepared interrupt (an id of your own, unique and stable across resumes); the
    /// tool then returns, and runs again on resume.
    pub fn raise_interrupt(&self, interrupt: Interrupt) {
        let mut raised = (self.call.raised.lock()).unwrap_or_else(PoisonError::into_inner);
        if !raised.iter().any(|i| i.id == interrupt.id) {
            raised.push(interrupt);
        }
    }

    /// The id of the tool use being answered.
    pub fn tool_use_id(&self) -> &str {
        self.call.ids.get(..self.call.name_at).unwrap_or_default()
    }

    /// The tool's name.
    pub fn tool_name(&self) -> &str {
        self.call.ids.get(self.call.name_at..).unwrap_or_default()
    }

    /// The invocation id.
    pub fn invocation_id(&self) -> InvocationId {
        self.call.invocation_id
    }

    /// The caller's invocation state.
    pub fn invocation_state(&self) -> &InvocationState {
        &self.call.invocation_state
    }

    /// The agent's state (shared, writable).
    pub fn agent_state(&self) -> &AgentState {
        &self.call.agent_state
    }

    /// Asks a human: returns the answer when this invocation is a resume that carries one,
    /// otherwise records the interrupt (id `v1:tool_call:<toolUseId>:<uuid5(OID, name)>`) and
    /// returns [`InterruptRaised`] for the tool to propagate.
    ///
    /// ```
    /// # use rein_core::{id::InvocationId, interrupt::InterruptAnswers, state::{AgentState, InvocationState}, tool::ToolContext};
    /// let cx = ToolContext::new("t1", "rm", InvocationId::new(), InvocationState::new(),
    ///     AgentState::new(), InterruptAnswers::default());
    /// assert!(cx.interrupt("approve", "delete /tmp?").is_err());
    /// assert_eq!(cx.raised_interrupts().len(), 1);
    /// ```
    pub fn interrupt(
        &self,
        name: &str,
        reason: impl Into<Value>,
    ) -> Result<Value, InterruptRaised> {
        let id = tool_call_interrupt_id(self.tool_use_id(), name);
        if let Some(answer) = self.call.answers.get(&id) {
            return Ok(answer.clone());
        }
        let interrupt =
            Interrupt::new(id.clone(), name, reason).with_tool_use_id(self.tool_use_id());
        self.call
            .raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(interrupt);
        Err(InterruptRaised(id))
    }

    /// The interrupts this tool raised (the agent reads them after the call).
    pub fn raised_interrupts(&self) -> Vec<Interrupt> {
        self.call
            .raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A tool the model can call.
///
/// Implement it for a type, or build a tool from a closure with [`ToolHandle::from_fn`].
///
/// ```
/// use rein_core::{Tool, tool::{ToolContext, ToolError, ToolOutput, ToolSpec}};
/// use serde_json::{json, Value};
///
/// struct Clock;
/// impl Tool for Clock {
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::new("clock", "The current time.", json!({"type": "object"}))
///     }
///     async fn call(&self, _input: Value, _cx: ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok("12:00".into())
///     }
/// }
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The tool's spec (read once, when the tool is registered).
    fn spec(&self) -> ToolSpec;

    /// Runs the tool.
    fn call(
        &self,
        input: Value,
        cx: ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;

    /// What the tool asks of the driver running it beyond a call, read before the call: a
    /// value of a type the driver knows (rein-agent's agent running as a tool, a handoff);
    /// a driver ignores a type it does not know. `None` by default: a plain tool.
    fn capability(&self) -> Option<&(dyn Any + Send + Sync)> {
        None
    }
}

/// The object-safe twin of [`Tool`], so tools of different types can be stored together.
trait ErasedTool: Send + Sync {
    fn call_erased(
        &self,
        input: Value,
        cx: ToolContext,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>>;
    fn capability_erased(&self) -> Option<&(dyn Any + Send + Sync)>;
}

impl<T: Tool> ErasedTool for T {
    fn call_erased(
        &self,
        input: Value,
        cx: ToolContext,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(self.call(input, cx))
    }
    fn capability_erased(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.capability()
    }
}

/// Tools whose list may change while an agent lives (an MCP server's, after
/// `notifications/tools/list_changed`). An agent given one asks for the list again before a
/// model call whenever [`version`](Self::version) changed, so the model is offered the current
/// tools and a tool the source dropped is unknown to the agent.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use rein_core::{ToolHandle, tool::{BoxFuture, ToolError, ToolOutput, ToolSource}};
///
/// /// A fixed list, announced once.
/// struct Fixed(Vec<ToolHandle>, AtomicU64);
/// impl ToolSource for Fixed {
///     fn version(&self) -> u64 {
///         self.1.load(Ordering::SeqCst)
///     }
///     fn tools(&self) -> BoxFuture<'_, Result<Vec<ToolHandle>, ToolError>> {
///         Box::pin(async move { Ok(self.0.clone()) })
///     }
/// }
/// ```
pub trait ToolSource: Send + Sync + 'static {
    /// A number that changes whenever the list may have changed. Asked before every model
    /// call: it must be cheap (no I/O).
    fn version(&self) -> u64;

    /// The current list.
    fn tools(&self) -> BoxFuture<'_, Result<Vec<ToolHandle>, ToolError>>;
}

/// A registered tool: its spec and the erased implementation. Cloning is cheap.
#[derive(Clone)]
pub struct ToolHandle {
    spec: Arc<ToolSpec>,
    inner: Arc<dyn ErasedTool>,
}

impl fmt::Debug for ToolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolHandle")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ToolHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.spec, &other.spec)
    }
}

impl ToolHandle {
    /// Wraps a tool.
    pub fn new<T: Tool>(tool: T) -> Self {
        Self {
            spec: Arc::new(tool.spec()),
            inner: Arc::new(tool),
        }
    }

    /// The tool's [capability](Tool::capability), if it is a `T`: how a driver finds what a
    /// tool asks of it (by the capability's type, whatever the tool's own type).
    pub fn capability<T: Any>(&self) -> Option<&T> {
        self.inner.capability_erased()?.downcast_ref()
    }

    /// A tool from an async closure.
    ///
    /// ```
    /// use rein_core::{ToolHandle, tool::ToolOutput};
    /// use serde_json::json;
    /// let add = ToolHandle::from_fn("add", "Adds a and b.",
    ///     json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
    ///     |input, _cx| async move {
    ///         let sum = input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0);
    ///         Ok(ToolOutput::text(sum.to_string()))
    ///     });
    /// assert_eq!(add.name(), "add");
    /// ```
    pub fn from_fn<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: impl Into<Arc<Value>>,
        f: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Self::new(FnTool {
            spec: ToolSpec::new(name, description, input_schema),
            f,
        })
    }

    /// A tool from a synchronous closure.
    pub fn from_sync_fn<F>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: impl Into<Arc<Value>>,
        f: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    {
        Self::from_fn(name, description, input_schema, move |input, cx| {
            std::future::ready(f(input, cx))
        })
    }

    /// The tool's spec.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Runs the tool.
    pub fn call(
        &self,
        input: Value,
        cx: ToolContext,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        self.inner.call_erased(input, cx)
    }
}

struct FnTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(
        &self,
        input: Value,
        cx: ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send {
        (self.f)(input, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a test tool asks of its driver.
    struct Marker(u8);

    struct Marked(Marker);

    impl Tool for Marked {
        fn spec(&self) -> ToolSpec {
            ToolSpec::new("marked", "m", serde_json::json!({"type": "object"}))
        }
        async fn call(&self, _input: Value, _cx: ToolContext) -> Result<ToolOutput, ToolError> {
            Ok("ok".into())
        }
        fn capability(&self) -> Option<&(dyn Any + Send + Sync)> {
            Some(&self.0)
        }
    }

    /// A driver finds a tool's capability by the capability's type, through the handle; a
    /// plain tool has none.
    #[test]
    fn a_handle_offers_its_tools_capability_by_type() {
        let marked = ToolHandle::new(Marked(Marker(7)));
        assert_eq!(marked.capability::<Marker>().map(|m| m.0), Some(7));
        assert!(marked.capability::<Marked>().is_none());
        let plain =
            ToolHandle::from_sync_fn("p", "p", serde_json::json!({}), |_, _| Ok("ok".into()));
        assert!(plain.capability::<Marker>().is_none());
    }

    /// A tool's progress reaches the listener its driver set, with the tool use's id and the
    /// tool's name; without a listener nothing is listened to.
    #[test]
    fn progress_reaches_the_listener_with_the_tool_use() {
        #[derive(Default)]
        struct Heard(Mutex<Vec<(String, String, ToolProgress)>>);
        impl ToolProgressListener for Heard {
            fn tool_progress(&self, tool_use_id: &str, tool_name: &str, progress: ToolProgress) {
                self.0.lock().unwrap_or_else(PoisonError::into_inner).push((
                    tool_use_id.into(),
                    tool_name.into(),
                    progress,
                ));
            }
        }
        let cx = ToolContext::new(
            "tu-7",
            "copy",
            InvocationId::new(),
            InvocationState::new(),
            AgentState::new(),
            InterruptAnswers::default(),
        );
        assert!(!cx.progress_listened());
        cx.report_progress(ToolProgress::new(1.0));
        let heard = Arc::new(Heard::default());
        let cx = cx.with_progress_listener(heard.clone());
        assert!(cx.progress_listened());
        cx.report_progress(ToolProgress::new(2.0).with_total(4.0).with_message("half"));
        let heard = heard.0.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(heard.len(), 1);
        let (id, name, p) = &heard[0];
        assert_eq!((id.as_str(), name.as_str()), ("tu-7", "copy"));
        assert_eq!(
            (p.progress, p.total, p.message.as_deref()),
            (2.0, Some(4.0), Some("half"))
        );
    }
}
