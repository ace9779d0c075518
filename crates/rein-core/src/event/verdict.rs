//! What a driver of the loop gets from an event once the hooks and interventions ran on it:
//! each event's `into_verdict` and the verdict it returns. The events themselves are
//! `mod.rs`'s; this is the loop's side of them (SPEC §2).

use super::*;

/// What the hooks and interventions made of an input ([`BeforeInvocationEvent::into_verdict`]).
///
/// Not `#[non_exhaustive]`: a driver of the loop must handle every verdict.
#[derive(Debug)]
pub enum InputVerdict {
    /// Store these messages and go on.
    Admit(Vec<Message>),
    /// Store nothing; the invocation (or the injected item) is refused with this text.
    Deny(String),
    /// Store nothing yet: the input waits for answers to these interrupts (an invocation's
    /// input is held and the invocation stops; an injected message is parked and the run goes
    /// on).
    Hold {
        /// The input as the hooks left it.
        messages: Vec<Message>,
        /// What is asked.
        interrupts: Vec<Interrupt>,
    },
}

impl BeforeInvocationEvent {
    /// What the hooks and interventions made of the input: admitted (as they left it) or
    /// denied with a text. Take the [`decisions`](Self::take_decisions) first.
    pub fn into_verdict(self) -> InputVerdict {
        match self.cancel.text(Self::DEFAULT_CANCEL) {
            Some(text) => InputVerdict::Deny(text.to_owned()),
            None if !self.interrupts.is_empty() => InputVerdict::Hold {
                messages: self.messages,
                interrupts: self.interrupts,
            },
            None => InputVerdict::Admit(self.messages),
        }
    }
}

/// What the hooks and interventions made of a model call before it is made
/// ([`BeforeModelCallEvent::into_verdict`]).
///
/// Not `#[non_exhaustive]`: a driver of the loop must handle every verdict.
#[derive(Debug)]
pub enum RequestVerdict {
    /// Call the model with this request.
    Send(ModelRequest),
    /// Do not call the model; this text stands in for its response.
    Deny(String),
    /// Do not call the model yet: the call waits for answers to these interrupts (the
    /// invocation stops; a resume makes the call again).
    Hold(Vec<Interrupt>),
}

impl BeforeModelCallEvent {
    /// What the hooks and interventions made of the call: send the request (as they left
    /// it), or deny it with a text. Take the [`decisions`](Self::take_decisions) and the
    /// [`guidance`](Self::take_guidance) first.
    pub fn into_verdict(self) -> RequestVerdict {
        match self.cancel.text(Self::DEFAULT_CANCEL) {
            Some(text) => RequestVerdict::Deny(text.to_owned()),
            None if !self.interrupts.is_empty() => RequestVerdict::Hold(self.interrupts),
            None => RequestVerdict::Send(self.request),
        }
    }
}

/// What the hooks and interventions made of a model call ([`AfterModelCallEvent::into_verdict`]).
///
/// Not `#[non_exhaustive]`: a driver of the loop must handle every verdict, so a new one is
/// a compile error there rather than a silent fallthrough.
#[derive(Debug)]
pub enum ModelCallVerdict {
    /// Hold the response for answers to these interrupts: nothing is stored, its tool uses do
    /// not run; the invocation pauses, and a resume passes the response through AfterModelCall
    /// again.
    Hold {
        /// The response, as the model returned it.
        response: ModelResponse,
        /// What a human is asked.
        interrupts: Vec<Interrupt>,
        /// The call's index (its interrupts' subject).
        model_call_index: u32,
    },
    /// Act on this response (`edited` when a hook rewrote it).
    Accept {
        /// The response.
        response: ModelResponse,
        /// Whether it differs from what the model returned.
        edited: bool,
    },
    /// Store this text as the reply instead; the response's tool uses never run.
    Withhold {
        /// The stand-in text.
        text: String,
    },
    /// Discard the response (or the error) and call the model again after storing `guidance`.
    Retry {
        /// Guidance to store as user text before the retry.
        guidance: Vec<String>,
        /// The error of the call, when it failed.
        error: Option<ModelError>,
    },
    /// The call failed.
    Failed(ModelError),
}

impl AfterModelCallEvent {
    /// What the hooks made of the call, in the order the loop honours them: a failed call is
    /// retried when a hook asked for it; a withheld response stands in for the reply; a retry
    /// discards the response; otherwise the (possibly rewritten) response is accepted.
    /// Take the [`decisions`](Self::take_decisions) first.
    #[inline]
    pub fn into_verdict(self) -> ModelCallVerdict {
        let edited = self.is_edited();
        match self.outcome {
            Err(error) if self.retry => ModelCallVerdict::Retry {
                guidance: self.guidance,
                error: Some(error),
            },
            Err(error) => ModelCallVerdict::Failed(error),
            Ok(_) if self.withheld.is_some() => ModelCallVerdict::Withhold {
                text: self.withheld.unwrap_or_default(),
            },
            Ok(_) if self.retry => ModelCallVerdict::Retry {
                guidance: self.guidance,
                error: None,
            },
            Ok(response) if !self.interrupts.is_empty() => ModelCallVerdict::Hold {
                response,
                interrupts: self.interrupts,
                model_call_index: self.model_call_index,
            },
            Ok(response) => ModelCallVerdict::Accept { response, edited },
        }
    }
}

/// What the hooks and interventions made of a tool call ([`BeforeToolCallEvent::into_verdict`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolCallVerdict {
    /// The tool use as the hooks left it.
    pub tool_use: ToolUse,
    /// Whether it differs from what the model asked for.
    pub edited: bool,
    /// The tool to run (`None` for an unknown tool).
    pub tool: Option<ToolHandle>,
    /// What happens to the call.
    pub action: ToolCallAction,
}

/// What happens to a tool call after BeforeToolCall.
///
/// Not `#[non_exhaustive]`: a driver of the loop must handle every verdict, so a new one is
/// a compile error there rather than a silent fallthrough.
#[derive(Debug)]
pub enum ToolCallAction {
    /// Validate the input and run the tool.
    Run,
    /// Do not run it: the model gets an error result with this text.
    Cancel(String),
    /// Do not run it yet: the invocation stops for these interrupts.
    Interrupt(Vec<Interrupt>),
}

impl BeforeToolCallEvent {
    /// What the hooks and interventions decided about the call: interrupts first (the tool
    /// waits for answers), then a cancel, else the call goes ahead with the selected tool.
    /// Take the [`decisions`](Self::take_decisions) first.
    #[inline]
    pub fn into_verdict(self) -> ToolCallVerdict {
        let edited = self.is_edited();
        let action = if !self.interrupts.is_empty() {
            ToolCallAction::Interrupt(self.interrupts)
        } else if let Some(text) = self.cancel_tool.text(Self::DEFAULT_CANCEL) {
            ToolCallAction::Cancel(text.to_owned())
        } else {
            ToolCallAction::Run
        };
        ToolCallVerdict {
            tool_use: self.tool_use,
            edited,
            tool: self.selected_tool,
            action,
        }
    }
}

/// What the hooks made of a tool result ([`AfterToolCallEvent::into_verdict`]).
///
/// Not `#[non_exhaustive]`: a driver of the loop must handle every verdict, so a new one is
/// a compile error there rather than a silent fallthrough.
#[derive(Debug)]
pub enum ToolResultVerdict {
    /// The result stands.
    Keep {
        /// The tool use that ran.
        tool_use: ToolUse,
        /// Its result.
        result: ToolResult,
    },
    /// The result waits for answers to these interrupts; the invocation pauses. On resume the
    /// held result goes through AfterToolCall again (the tool does not run again).
    Hold {
        /// The tool use that ran.
        tool_use: ToolUse,
        /// Its result, held.
        result: ToolResult,
        /// What a human is asked.
        interrupts: Vec<Interrupt>,
    },
    /// Run the tool again, from BeforeToolCall.
    Retry {
        /// The tool use to run again.
        tool_use: ToolUse,
    },
}

impl AfterToolCallEvent {
    /// What the hooks made of the result: hold it for answers (interrupts raised), keep it, or
    /// run the tool again. The tool use comes back out with it. Take the
    /// [`decisions`](Self::take_decisions) first.
    #[inline]
    pub fn into_verdict(self) -> ToolResultVerdict {
        if !self.interrupts.is_empty() {
            ToolResultVerdict::Hold {
                tool_use: self.tool_use,
                result: self.result,
                interrupts: self.interrupts,
            }
        } else if self.retry {
            ToolResultVerdict::Retry {
                tool_use: self.tool_use,
            }
        } else {
            ToolResultVerdict::Keep {
                tool_use: self.tool_use,
                result: self.result,
            }
        }
    }
}
