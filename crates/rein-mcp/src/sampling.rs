//! Sampling: a server asks the client's model for a completion (`sampling/createMessage`).
//!
//! Refused unless the application enables it with [`McpClientBuilder::sampling`]: without it
//! the client does not even declare the capability. When enabled, each request becomes a Rein
//! [`ModelRequest`] that goes through the application's interventions on model calls
//! (`before_model_call`, `after_model_call`; the server is named in the event's invocation
//! state, see [`sampling_server`]), within a per-server [`SamplingBudget`], and — with
//! [`Sampling::approval`] — past a human who approves each request.
//!
//! [`McpClientBuilder::sampling`]: crate::McpClientBuilder::sampling
// rmcp marks sampling deprecated (SEP-2577 plans its removal); servers use it today.
#![allow(deprecated)]

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt as _;
use rein_core::{
    ContentBlock, Message, Role,
    audit::DecisionRecord,
    event::{
        AfterModelCallEvent, BeforeModelCallEvent, InvocationContext, ModelCallVerdict,
        RequestVerdict,
    },
    interrupt::{Approval, Interrupt, InterruptAnswer, InterruptAnswers},
    message::{Bytes, ImageBlock, MediaSource},
    request::ModelRequest,
    state::InvocationState,
    stream::{ModelResponse, StopReason, StreamAssembler},
    tool::{BoxFuture, ToolContext},
};
use rein_hooks::HookRegistry;
use rein_interventions::InterventionRegistry;
use rein_models::SharedModel;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ErrorCode, SamplingMessage,
    SamplingMessageContentBlock,
};
use serde_json::Value;

/// The invocation-state key under which a sampling request's model call names the server that
/// asked ([`sampling_server`] reads it). Rein sets it on every sampling call, over what the
/// tool call's own state holds, so a server cannot pass for another.
pub const SAMPLING_SERVER_KEY: &str = "mcp_sampling_server";

/// The server whose `sampling/createMessage` a model call answers (its handshake name, else
/// its program or URL), when the call is one: what a handler on `before_model_call` or
/// `after_model_call` reads to tell a server's request from the agent's own calls.
///
/// ```
/// use rein_core::state::InvocationState;
/// let state = InvocationState::from_value(serde_json::json!({"mcp_sampling_server": "'everything'"}));
/// assert_eq!(rein_mcp::sampling_server(&state), Some("'everything'"));
/// assert_eq!(rein_mcp::sampling_server(&InvocationState::new()), None);
/// ```
pub fn sampling_server(state: &InvocationState) -> Option<&str> {
    state.get(SAMPLING_SERVER_KEY)?.as_str()
}

/// How much one server may have the model do for it over a connection: past either bound its
/// requests are refused with an error the server sees. A request's estimated input (about 4
/// bytes a token) and its output (its `maxTokens`, capped at what is left) are reserved before
/// the call, then replaced by what the model reports.
///
/// ```
/// let mut budget = rein_mcp::SamplingBudget::default();
/// budget.max_calls = 3;
/// budget.max_tokens = 2_000;
/// # let _ = budget;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplingBudget {
    /// The most sampling requests answered (default 10).
    pub max_calls: u32,
    /// The most tokens (input and output, as the model reports them; a model that reports none
    /// is charged the output cap) spent on them (default 20 000).
    pub max_tokens: u64,
}

impl Default for SamplingBudget {
    fn default() -> Self {
        Self {
            max_calls: 10,
            max_tokens: 20_000,
        }
    }
}

/// What a human approving a sampling request sees: the server and the request as the
/// interventions left it, and the prompts of any `Confirm` a handler raised on it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SamplingApproval {
    /// The server asking (its handshake name, else its program or URL).
    pub server: String,
    /// What the model would be sent.
    pub request: ModelRequest,
    /// The interrupts handlers raised on the request (their `reason`s are the prompts); empty
    /// when only [`Sampling::approval`] asks.
    pub interrupts: Vec<Interrupt>,
}

type Approver = Arc<dyn Fn(SamplingApproval) -> BoxFuture<'static, Approval> + Send + Sync>;

/// The model and the governance of a server's sampling requests; give it to
/// [`McpClientBuilder::sampling`](crate::McpClientBuilder::sampling).
///
/// ```
/// use rein_mcp::{McpClient, Sampling, SamplingBudget};
/// use rein_models::ScriptedModel;
/// let model = ScriptedModel::builder().text("a haiku").build();
/// let mut budget = SamplingBudget::default();
/// budget.max_calls = 5;
/// let builder = McpClient::builder().sampling(Sampling::new(model).budget(budget));
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct Sampling {
    model: SharedModel,
    hooks: Arc<HookRegistry>,
    budget: SamplingBudget,
    approver: Option<Approver>,
}

impl fmt::Debug for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sampling")
            .field("model", &self.model)
            .field("budget", &self.budget)
            .field("approval", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

impl Sampling {
    /// Sampling answered by `model` (the agent's, or a cheaper one), with no interventions,
    /// the default [`SamplingBudget`] and no approval.
    pub fn new(model: impl Into<SharedModel>) -> Self {
        Self {
            model: model.into(),
            hooks: Arc::new(HookRegistry::new()),
            budget: SamplingBudget::default(),
            approver: None,
        }
    }

    /// Runs these interventions' `before_model_call` and `after_model_call` handlers on every
    /// sampling request (pass the agent's registry to govern the server's calls as the agent's
    /// own). A `Deny` refuses the request; a `Transform` edits what is sent or returned; a
    /// `Confirm` asks the [`approval`](Self::approval) callback, and without one refuses.
    pub fn interventions(mut self, interventions: &InterventionRegistry) -> Self {
        self.hooks = Arc::new(interventions.to_hooks());
        self
    }

    /// The server's budget (default [`SamplingBudget::default`]).
    pub fn budget(mut self, budget: SamplingBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Asks a human before each request reaches the model (after the interventions, so the
    /// human sees what would be sent): `approver` answers with an [`Approval`]; a rejection
    /// refuses the request (an edit is refused too: the server's request is not edited).
    /// It also answers the `Confirm`s handlers raise on a request. The answer is given
    /// in-process while the server waits (see docs/mcp.md on why it is not a durable
    /// interrupt).
    pub fn approval<F, Fut>(mut self, approver: F) -> Self
    where
        F: Fn(SamplingApproval) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Approval> + Send + 'static,
    {
        self.approver = Some(Arc::new(move |a| Box::pin(approver(a))));
        self
    }
}

/// The error code of a refused request (the MCP specification's example for a user who
/// rejects a sampling request uses -1).
const REFUSED: ErrorCode = ErrorCode(-1);

/// What was spent of a server's budget.
#[derive(Default)]
struct Spent {
    calls: u32,
    tokens: u64,
}

/// One connection's sampling: the application's [`Sampling`] and what the server spent.
pub(crate) struct Sampler {
    sampling: Sampling,
    timeout: Duration,
    pub(crate) server: OnceLock<String>,
    spent: Mutex<Spent>,
    /// Numbers the requests (the events' model-call index, the interrupts' subject).
    seq: AtomicU32,
}

impl Sampler {
    pub(crate) fn new(sampling: Sampling, timeout: Duration) -> Self {
        Self {
            sampling,
            timeout,
            server: OnceLock::new(),
            spent: Mutex::new(Spent::default()),
            seq: AtomicU32::new(0),
        }
    }

    fn server(&self) -> String {
        self.server.get().cloned().unwrap_or_default()
    }

    fn refuse(&self, why: impl fmt::Display) -> rmcp::ErrorData {
        let message = format!("sampling request refused by the client: {why}");
        tracing::info!(target: "rein_mcp", server = %self.server(), %message, "MCP sampling refused");
        rmcp::ErrorData::new(REFUSED, message, None)
    }

    /// Answers one `sampling/createMessage`; `call` is the tool call under way, when exactly
    /// one is (its invocation state — the principal — and agent state reach the handlers).
    pub(crate) async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        call: Option<ToolContext>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        let server = self.server();
        let index = self.seq.fetch_add(1, Ordering::SeqCst);
        // About 4 bytes a token, counted high (base64 images, JSON): what the input may cost.
        let input = (crate::json_size(&params.messages)
            + params.system_prompt.as_ref().map_or(0, String::len)) as u64
            / 4
            + 1;
        let (max_tokens, reserved) = self.reserve(params.max_tokens, input)?;
        let (answer, spent) = self.answer(params, max_tokens, call, index, &server).await;
        // What was reserved is given back, what the model used is kept. (A request dropped on
        // the way keeps its reservation: closed rather than open.)
        let mut budget = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        budget.tokens = budget.tokens.saturating_sub(reserved).saturating_add(spent);
        drop(budget);
        answer
    }

    /// The request's way through the interventions and the model, and the tokens it spent.
    async fn answer(
        &self,
        params: CreateMessageRequestParams,
        max_tokens: u32,
        call: Option<ToolContext>,
        index: u32,
        server: &str,
    ) -> (Result<CreateMessageResult, rmcp::ErrorData>, u64) {
        let request = match self.request(params, max_tokens, server, call.as_ref()) {
            Ok(request) => request,
            Err(e) => return (Err(e), 0),
        };
        let cx = context(request.invocation_state.clone(), call.as_ref());
        let request = match self.before(cx.clone(), request, index, server).await {
            Ok(request) => request,
            Err(e) => return (Err(e), 0),
        };
        let response = match tokio::time::timeout(self.timeout, self.call_model(request)).await {
            Err(_) => {
                let e = self.refuse(format!("the model timed out after {:?}", self.timeout));
                return (Err(e), u64::from(max_tokens));
            }
            Ok(response) => response,
        };
        // The model's report, else (none, or a failure) the most the request could cost.
        let spent = match &response {
            Ok(r) if r.usage.input_tokens + r.usage.output_tokens > 0 => {
                r.usage.input_tokens + r.usage.output_tokens
            }
            _ => u64::from(max_tokens),
        };
        let answer = match self.after(cx, response, index).await {
            Ok(response) => Ok(self.result(response)),
            Err(e) => Err(e),
        };
        (answer, spent)
    }

    /// Takes one call of the budget and reserves the request's estimated input and its output
    /// (capped at what is left): the output tokens it may have, and the tokens reserved.
    fn reserve(&self, requested: u32, input: u64) -> Result<(u32, u64), rmcp::ErrorData> {
        let budget = self.sampling.budget;
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        if spent.calls >= budget.max_calls {
            return Err(self.refuse(format!(
                "the sampling budget of {} requests for this server is spent",
                budget.max_calls
            )));
        }
        let left = budget.max_tokens.saturating_sub(spent.tokens);
        if input >= left {
            return Err(self.refuse(format!(
                "the request's input (about {input} tokens) leaves nothing of the {left} tokens \
                 left of the sampling budget of {} for this server",
                budget.max_tokens
            )));
        }
        let output = u32::try_from(left - input)
            .unwrap_or(u32::MAX)
            .min(requested);
        spent.calls += 1;
        spent.tokens += input + u64::from(output);
        Ok((output, input + u64::from(output)))
    }

    /// The Rein request for the server's: its messages (text and images), system prompt,
    /// temperature and stop sequences, no tools.
    fn request(
        &self,
        params: CreateMessageRequestParams,
        max_tokens: u32,
        server: &str,
        call: Option<&ToolContext>,
    ) -> Result<ModelRequest, rmcp::ErrorData> {
        if params.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(self.refuse("tools in a sampling request are not supported"));
        }
        let mut messages = Vec::with_capacity(params.messages.len());
        for m in params.messages {
            messages.push(self.message(m)?);
        }
        let mut state = call
            .map(|c| c.invocation_state().as_map().clone())
            .unwrap_or_default();
        state.insert(SAMPLING_SERVER_KEY.into(), Value::String(server.to_owned()));
        let mut request = ModelRequest::new(messages);
        request.invocation_state = InvocationState::from_map(state);
        request.system_prompt = params.system_prompt.map(Into::into);
        request.config.max_tokens = Some(max_tokens);
        request.config.temperature = params.temperature;
        request.config.stop_sequences = params.stop_sequences.unwrap_or_default();
        Ok(request)
    }

    fn message(&self, m: SamplingMessage) -> Result<Message, rmcp::ErrorData> {
        let role = match m.role {
            rmcp::model::Role::User => Role::User,
            rmcp::model::Role::Assistant => Role::Assistant,
        };
        let mut content = Vec::new();
        for block in m.content.into_vec() {
            content.push(match block {
                SamplingMessageContentBlock::Text(t) => ContentBlock::Text(t.text),
                SamplingMessageContentBlock::Image(i) => {
                    let format = crate::image_format(&i.mime_type).ok_or_else(|| {
                        self.refuse(format!("image type {} is not supported", i.mime_type))
                    })?;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(i.data.trim())
                        .map_err(|e| self.refuse(format!("an image is not valid base64: {e}")))?;
                    ContentBlock::Image(Box::new(ImageBlock {
                        format: format.to_owned(),
                        source: MediaSource::Bytes(Bytes(bytes)),
                    }))
                }
                _ => {
                    return Err(self
                        .refuse("only text and image content is supported in a sampling request"));
                }
            });
        }
        Ok(Message::new(role, content))
    }

    /// BeforeModelCall: the request as the interventions leave it, past the approver.
    async fn before(
        &self,
        cx: InvocationContext,
        request: ModelRequest,
        index: u32,
        server: &str,
    ) -> Result<ModelRequest, rmcp::ErrorData> {
        let hooks = &self.sampling.hooks;
        let mut asked = false;
        let mut answers = InterruptAnswers::default();
        let mut resume = false;
        // Two passes at most: the first, and the one that sees a human's answers.
        let request = loop {
            let mut ev = BeforeModelCallEvent::new(cx.clone(), request.clone())
                .with_model_call_index(index)
                .with_answers(answers.clone());
            if resume {
                ev = ev.as_resume();
            }
            let dispatched = hooks.dispatch(&mut ev).await;
            self.log(ev.take_decisions());
            dispatched.map_err(|e| self.refuse(format!("an intervention failed: {e}")))?;
            let guidance = ev.take_guidance();
            match ev.into_verdict() {
                RequestVerdict::Send(mut request) => {
                    // Guidance goes into this call (there is no history to store it in).
                    for g in guidance {
                        request.append_user_text(g);
                    }
                    break request;
                }
                RequestVerdict::Deny(text) => return Err(self.refuse(text)),
                RequestVerdict::Hold(interrupts) if !resume => {
                    let approval = self.ask(server, &request, interrupts.clone()).await?;
                    asked = true;
                    let response = serde_json::to_value(&approval).unwrap_or(Value::Bool(true));
                    answers = InterruptAnswers::new(
                        interrupts
                            .iter()
                            .map(|i| {
                                let answer = InterruptAnswer {
                                    response: response.clone(),
                                    fingerprint: i.fingerprint.clone(),
                                };
                                (i.resume_id(), answer)
                            })
                            .collect::<HashMap<_, _>>(),
                    );
                    resume = true;
                }
                RequestVerdict::Hold(_) => {
                    return Err(self.refuse("an intervention still holds the request"));
                }
            }
        };
        if !asked && self.sampling.approver.is_some() {
            self.ask(server, &request, Vec::new()).await?;
        }
        Ok(request)
    }

    /// Asks the approver; `Ok` only for a plain approval.
    async fn ask(
        &self,
        server: &str,
        request: &ModelRequest,
        interrupts: Vec<Interrupt>,
    ) -> Result<Approval, rmcp::ErrorData> {
        let Some(approver) = &self.sampling.approver else {
            return Err(self.refuse("it needs a human's approval and no approver is configured"));
        };
        let approval = approver(SamplingApproval {
            server: server.to_owned(),
            request: request.clone(),
            interrupts,
        })
        .await;
        match approval {
            Approval {
                approved: true,
                edit: None,
                ..
            } => Ok(approval),
            Approval { edit: Some(_), .. } => {
                Err(self.refuse("the approver edited it; a sampling request is not edited"))
            }
            Approval { note, .. } => Err(self.refuse(match note {
                Some(note) => format!("a human rejected it: {note}"),
                None => "a human rejected it".to_owned(),
            })),
        }
    }

    async fn call_model(
        &self,
        request: ModelRequest,
    ) -> Result<ModelResponse, rein_core::ModelError> {
        let mut stream = self.sampling.model.stream(request).await?;
        let mut assembler = StreamAssembler::new();
        while let Some(event) = stream.next().await {
            assembler
                .push(event?)
                .map_err(|e| rein_core::ModelError::malformed_stream(e.to_string()))?;
        }
        assembler
            .finish()
            .map_err(|e| rein_core::ModelError::malformed_stream(e.to_string()))
    }

    /// AfterModelCall: the response as the interventions leave it; anything but an accepted
    /// response refuses the request (a withheld response, a retry, a hold, a failure).
    async fn after(
        &self,
        cx: InvocationContext,
        outcome: Result<ModelResponse, rein_core::ModelError>,
        index: u32,
    ) -> Result<ModelResponse, rmcp::ErrorData> {
        let mut ev = AfterModelCallEvent::new(cx, outcome).with_model_call_index(index);
        let dispatched = self.sampling.hooks.dispatch(&mut ev).await;
        self.log(ev.take_decisions());
        dispatched.map_err(|e| self.refuse(format!("an intervention failed: {e}")))?;
        match ev.into_verdict() {
            ModelCallVerdict::Accept { response, .. } => Ok(response),
            ModelCallVerdict::Withhold { text } => Err(self.refuse(text)),
            ModelCallVerdict::Retry { .. } => {
                Err(self.refuse("an intervention asked for a retry, which sampling does not do"))
            }
            ModelCallVerdict::Hold { .. } => Err(self.refuse(
                "an intervention holds the response for a human, which sampling does not do",
            )),
            ModelCallVerdict::Failed(e) => Err(rmcp::ErrorData::internal_error(
                format!("the client's model failed: {e}"),
                None,
            )),
        }
    }

    /// The protocol's result: the response's text, its stop reason, the model's id.
    fn result(&self, response: ModelResponse) -> CreateMessageResult {
        let text = response.message.text();
        let stop = match response.stop_reason {
            StopReason::MaxTokens => CreateMessageResult::STOP_REASON_END_MAX_TOKEN,
            StopReason::StopSequence => CreateMessageResult::STOP_REASON_END_SEQUENCE,
            StopReason::ToolUse => CreateMessageResult::STOP_REASON_TOOL_USE,
            _ => CreateMessageResult::STOP_REASON_END_TURN,
        };
        let model = self.sampling.model.info().model_id;
        CreateMessageResult::new(
            SamplingMessage::new(
                rmcp::model::Role::Assistant,
                SamplingMessageContentBlock::text(text),
            ),
            model,
        )
        .with_stop_reason(stop)
    }

    /// The interventions' decisions, in the log (a sampling call has no invocation audit).
    fn log(&self, decisions: Vec<DecisionRecord>) {
        for d in decisions {
            tracing::info!(
                target: "rein_mcp",
                server = %self.server(),
                handler = %d.handler,
                action = ?d.action,
                outcome = ?d.outcome,
                "MCP sampling decision"
            );
        }
    }
}

/// The events' context: the tool call's invocation (its id and agent state) when there is
/// one, with the sampling request's invocation state.
fn context(state: InvocationState, call: Option<&ToolContext>) -> InvocationContext {
    let mut cx = InvocationContext::new(state);
    if let Some(call) = call {
        cx.invocation_id = call.invocation_id();
        cx.agent_state = call.agent_state().clone();
    }
    cx
}
