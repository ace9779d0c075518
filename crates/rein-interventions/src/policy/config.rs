//! The typed configuration of each built-in kind, as written in a policy file.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::pii::{PiiAction, PiiKind, PiiTarget};

/// What a counter counts over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Each run counts from zero: a prompt starts a run, a resume continues it (the count is
    /// kept in the run's state, persisted with pending interrupts).
    #[default]
    Invocation,
    /// Counts over the handler's whole life (every invocation of every agent it serves).
    Agent,
}

/// What a `redact` handler rewrites, and so on which event it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactTarget {
    /// The new input (and injected messages), on `before_invocation`.
    Prompt,
    /// What one model call sends (system prompt and messages), on `before_model_call`;
    /// stored history is not touched.
    ModelRequest,
    /// The tool input, on `before_tool_call`.
    ToolInput,
    /// The tool result, on `after_tool_call`.
    ToolResult,
    /// The model's response, on `after_model_call`.
    ModelOutput,
}

fn default_role_key() -> String {
    "role".to_owned()
}

fn default_replacement() -> String {
    "[REDACTED]".to_owned()
}

/// `deny_tools`: deny a call of a listed tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyTools {
    /// Tool names (`*` = every tool).
    pub tools: Vec<String>,
    /// Deny reason (template); default `tool '{tool}' is not allowed`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `allow_tools_by_role`: deny unless the caller's role allows the tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowToolsByRole {
    /// The invocation-state key holding the role (default `role`).
    #[serde(default = "default_role_key")]
    pub state_key: String,
    /// Role → tools it may use (`*` = every tool). A role that is absent, or not a string,
    /// may use nothing.
    pub allowed: BTreeMap<String, Vec<String>>,
    /// Deny reason (template); default `role '{state.<state_key>}' may not use tool '{tool}'`.
    #[serde(default)]
    pub reason: Option<String>,
}

impl Default for AllowToolsByRole {
    fn default() -> Self {
        Self {
            state_key: default_role_key(),
            allowed: BTreeMap::new(),
            reason: None,
        }
    }
}

/// `deny_input_match`: deny when the tool input matches a pattern.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyInputMatch {
    /// Only these tools (default: every tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Only this top-level field (non-strings compared as their JSON text); default: any string
    /// value at any depth.
    #[serde(default)]
    pub field: Option<String>,
    /// The regular expression.
    pub pattern: String,
    /// Deny reason (template); default `input of '{tool}' matches a denied pattern`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `require_fields`: guide when a listed field is missing or empty.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequireFields {
    /// The tools checked (`*` = every tool).
    pub tools: Vec<String>,
    /// Top-level fields that must be present and not empty (`null`, `""`, `[]`, `{}`).
    pub fields: Vec<String>,
    /// Feedback (template; `{missing}` is the comma-separated list of missing fields); default
    /// `missing required field(s): {missing}`.
    #[serde(default)]
    pub feedback: Option<String>,
}

/// `confirm_tools`: ask a human before a listed tool runs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmTools {
    /// The tools (`*` = every tool).
    pub tools: Vec<String>,
    /// The question (template).
    pub prompt: String,
    /// A pre-emptive answer (`true`, `"yes"`, `false`, ...); absent or `null`: ask.
    #[serde(default)]
    pub response: Option<Value>,
}

/// `confirm_tool_output`: ask a human before the model sees what a listed tool returned (the
/// result is held; the tool does not run again on resume).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmToolOutput {
    /// The tools (`*` = every tool).
    pub tools: Vec<String>,
    /// The question (template; `{output}` is the result's text).
    pub prompt: String,
    /// A pre-emptive answer (`true`, `"yes"`, `false`, ...); absent or `null`: ask.
    #[serde(default)]
    pub response: Option<Value>,
}

/// `confirm_response`: ask a human before a model response is stored or acted on (it is held;
/// the model is not called again on resume).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmResponse {
    /// The question (template; `{output}` is the response's text).
    pub prompt: String,
    /// Only responses that call one of these tools (`*` = any tool); absent: every response.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// A pre-emptive answer (`true`, `"yes"`, `false`, ...); absent or `null`: ask.
    #[serde(default)]
    pub response: Option<Value>,
}

/// `confirm_input`: ask a human before an input is admitted — the invocation's input (held;
/// the invocation stops) or a message injected mid-run (parked; the run goes on).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmInput {
    /// The question (template; `{input}` is the input's text).
    pub prompt: String,
    /// Only inputs matching this regular expression; absent: every input.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Only messages injected mid-run (not the invocation's own input).
    #[serde(default)]
    pub injected_only: bool,
    /// A pre-emptive answer (`true`, `"yes"`, `false`, ...); absent or `null`: ask.
    #[serde(default)]
    pub response: Option<Value>,
}

/// `confirm_request`: ask a human before a request is sent to the model (the invocation stops;
/// on resume the call is made once approved).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRequest {
    /// The question (template; `{input}` is the text of the request's last message).
    pub prompt: String,
    /// Only before the first model call of each run.
    #[serde(default)]
    pub once: bool,
    /// A pre-emptive answer (`true`, `"yes"`, `false`, ...); absent or `null`: ask.
    #[serde(default)]
    pub response: Option<Value>,
}

/// `max_tool_calls`: deny tool calls past a count.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxToolCalls {
    /// How many distinct tool uses are let through.
    pub limit: u64,
    /// Only these tools are counted and limited (default: every tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Per invocation (default) or over the handler's life.
    #[serde(default)]
    pub scope: Scope,
    /// Deny reason (template); default `tool call limit ({limit}) reached`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `max_model_calls`: deny model calls past a count (a budget).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxModelCalls {
    /// How many model calls are let through.
    pub limit: u64,
    /// Per invocation (default) or over the handler's life.
    #[serde(default)]
    pub scope: Scope,
    /// Deny reason (template); default `model call limit ({limit}) reached`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `redact`: replace matches of a pattern in every string of the target.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redact {
    /// What is rewritten.
    pub target: RedactTarget,
    /// The regular expression.
    pub pattern: String,
    /// The replacement (`$1`, `${name}` refer to groups); default `[REDACTED]`.
    #[serde(default = "default_replacement")]
    pub replacement: String,
    /// Only these tools (targets `tool_input` and `tool_result` only).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// `redact_stream`: replace matches of a pattern in the model's text as it streams, before the
/// caller sees it (on `model_output`). A match is caught whole when it is at most the agent's
/// hold-back window plus one character long (SPEC §3.9).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactStream {
    /// The regular expression.
    pub pattern: String,
    /// The replacement (`$1`, `${name}` refer to groups); default `[REDACTED]`.
    #[serde(default = "default_replacement")]
    pub replacement: String,
}

/// `deny_stream_match`: stop a streamed response whose text matches, before the caller sees the
/// match, and withhold it (on `model_output`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyStreamMatch {
    /// The regular expression.
    pub pattern: String,
    /// Deny reason (template); default `output matches a denied pattern`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `deny_prompt_match`: deny an input (prompt or injected message) that matches.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyPromptMatch {
    /// The regular expression.
    pub pattern: String,
    /// Deny reason (template); default `input matches a denied pattern`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `guide_prompt_match`: cancel an input that matches, with feedback to the caller.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuidePromptMatch {
    /// The regular expression.
    pub pattern: String,
    /// The feedback (template).
    pub feedback: String,
}

/// `guide_output_match`: discard a response whose text matches, inject feedback, retry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuideOutputMatch {
    /// The regular expression.
    pub pattern: String,
    /// The feedback (template).
    pub feedback: String,
}

/// `guide_model_call`: inject feedback before a model call.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuideModelCall {
    /// The feedback (template).
    pub feedback: String,
    /// Only before the first model call of each run (a prompt and its resumes; a call held
    /// for approval and made on resume is that call).
    #[serde(default)]
    pub once: bool,
}

/// `pii`: find personal data (e-mail, phone, card, IBAN, SSN, IP, API key) and per kind redact
/// it with a typed placeholder, deny or guide ([`PiiGuard`](crate::pii::PiiGuard)).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pii {
    /// The kinds looked for (default: every kind).
    #[serde(default)]
    pub kinds: Option<Vec<PiiKind>>,
    /// What to do with a kind not listed in `actions` (default `redact`).
    #[serde(default)]
    pub action: PiiAction,
    /// Per-kind actions (`{ credit_card = "deny" }`).
    #[serde(default)]
    pub actions: BTreeMap<PiiKind, PiiAction>,
    /// Where to look (default: `prompt`, `tool_input`, `tool_result`, `model_output`; add
    /// `stream` to guard streamed text, `model_request` for what each model call sends).
    #[serde(default)]
    pub targets: Option<Vec<PiiTarget>>,
    /// Only the inputs and results of these tools (default: every tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// `cedar` (feature `cedar`): authorize tool calls with Cedar policies
/// ([`CedarAuthorizer`](crate::cedar::CedarAuthorizer)). Exactly one of `policies` and
/// `policies_file`; relative paths are relative to the policy file (or the current directory
/// for a policy given as text).
#[cfg(feature = "cedar")]
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cedar {
    /// The policies, as Cedar text.
    #[serde(default)]
    pub policies: Option<String>,
    /// A file of Cedar policies.
    #[serde(default)]
    pub policies_file: Option<String>,
    /// A schema file (Cedar syntax, or JSON when it starts with `{`) the policies are validated
    /// against.
    #[serde(default)]
    pub schema_file: Option<String>,
    /// Reload the files when they change (default false).
    #[serde(default)]
    pub hot_reload: bool,
    /// The principal of invocations whose state names none, as a Cedar entity uid
    /// (`User::"alice"`): for a single-user agent such as `rein chat`. An invocation state's
    /// `principal` still wins (a malformed one still denies).
    #[serde(default)]
    pub principal: Option<String>,
}

fn default_all_tools() -> Vec<String> {
    vec!["*".to_owned()]
}

fn default_true() -> bool {
    true
}

/// `human_approval`: ask a human before selected tools run, with "trust this tool for the
/// session" ([`HumanApproval`](crate::approval::HumanApproval)).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanApprovalConfig {
    /// Selectors: `*`, names, `!name` exclusions (default `["*"]`).
    #[serde(default = "default_all_tools")]
    pub tools: Vec<String>,
    /// Whether `"always"` (approve and trust the tool for the session) is honoured (default
    /// true).
    #[serde(default = "default_true")]
    pub trust: bool,
    /// A pre-emptive answer; absent or `null`: ask.
    #[serde(default)]
    pub response: Option<Value>,
}

impl Default for HumanApprovalConfig {
    fn default() -> Self {
        Self {
            tools: default_all_tools(),
            trust: true,
            response: None,
        }
    }
}

/// A built-in kind with its configuration.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PolicyKind {
    /// `deny_tools`.
    DenyTools(DenyTools),
    /// `allow_tools_by_role`.
    AllowToolsByRole(AllowToolsByRole),
    /// `deny_input_match`.
    DenyInputMatch(DenyInputMatch),
    /// `require_fields`.
    RequireFields(RequireFields),
    /// `confirm_tools`.
    ConfirmTools(ConfirmTools),
    /// `confirm_tool_output`.
    ConfirmToolOutput(ConfirmToolOutput),
    /// `confirm_response`.
    ConfirmResponse(ConfirmResponse),
    /// `confirm_input`.
    ConfirmInput(ConfirmInput),
    /// `confirm_request`.
    ConfirmRequest(ConfirmRequest),
    /// `max_tool_calls`.
    MaxToolCalls(MaxToolCalls),
    /// `max_model_calls`.
    MaxModelCalls(MaxModelCalls),
    /// `redact`.
    Redact(Redact),
    /// `deny_prompt_match`.
    DenyPromptMatch(DenyPromptMatch),
    /// `guide_prompt_match`.
    GuidePromptMatch(GuidePromptMatch),
    /// `guide_output_match`.
    GuideOutputMatch(GuideOutputMatch),
    /// `guide_model_call`.
    GuideModelCall(GuideModelCall),
    /// `redact_stream`.
    RedactStream(RedactStream),
    /// `deny_stream_match`.
    DenyStreamMatch(DenyStreamMatch),
    /// `pii`.
    Pii(Pii),
    /// `human_approval`.
    HumanApproval(HumanApprovalConfig),
    /// `cedar` (feature `cedar`).
    #[cfg(feature = "cedar")]
    Cedar(Cedar),
}

macro_rules! kinds {
    ($($(#[$m:meta])* $variant:ident($ty:ident) => $name:literal),* $(,)?) => {
        impl PolicyKind {
            /// The kind's name in a policy file.
            pub fn kind_name(&self) -> &'static str {
                match self {
                    $($(#[$m])* Self::$variant(_) => $name,)*
                }
            }

            /// The names of every built-in kind (of the features enabled).
            pub const KIND_NAMES: &'static [&'static str] = &[$($(#[$m])* $name),*];

            pub(crate) fn from_value(
                kind: &str,
                value: Value,
            ) -> Option<Result<Self, serde_path_to_error::Error<serde_json::Error>>> {
                match kind {
                    $($(#[$m])* $name => Some(serde_path_to_error::deserialize(value).map(Self::$variant)),)*
                    _ => None,
                }
            }
        }

        $($(#[$m])* impl From<$ty> for PolicyKind {
            fn from(c: $ty) -> Self {
                Self::$variant(c)
            }
        })*
    };
}

kinds!(
    DenyTools(DenyTools) => "deny_tools",
    AllowToolsByRole(AllowToolsByRole) => "allow_tools_by_role",
    DenyInputMatch(DenyInputMatch) => "deny_input_match",
    RequireFields(RequireFields) => "require_fields",
    ConfirmTools(ConfirmTools) => "confirm_tools",
    ConfirmToolOutput(ConfirmToolOutput) => "confirm_tool_output",
    ConfirmResponse(ConfirmResponse) => "confirm_response",
    ConfirmInput(ConfirmInput) => "confirm_input",
    ConfirmRequest(ConfirmRequest) => "confirm_request",
    MaxToolCalls(MaxToolCalls) => "max_tool_calls",
    MaxModelCalls(MaxModelCalls) => "max_model_calls",
    Redact(Redact) => "redact",
    DenyPromptMatch(DenyPromptMatch) => "deny_prompt_match",
    GuidePromptMatch(GuidePromptMatch) => "guide_prompt_match",
    GuideOutputMatch(GuideOutputMatch) => "guide_output_match",
    GuideModelCall(GuideModelCall) => "guide_model_call",
    RedactStream(RedactStream) => "redact_stream",
    DenyStreamMatch(DenyStreamMatch) => "deny_stream_match",
    Pii(Pii) => "pii",
    HumanApproval(HumanApprovalConfig) => "human_approval",
    #[cfg(feature = "cedar")]
    Cedar(Cedar) => "cedar",
);
