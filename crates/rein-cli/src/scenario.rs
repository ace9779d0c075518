//! The scenario file format (docs/replay.md): parsed strictly, every problem named by its JSON
//! path.

use rein_core::{ContentBlock, Map, stream::StopReason};
use serde::Deserialize;
use serde_json::Value;

/// A scenario file that cannot be run: the message starts with the JSON path of the problem.
#[derive(Debug)]
pub(crate) struct Invalid(pub(crate) String);

impl Invalid {
    pub(crate) fn at(path: impl std::fmt::Display, message: impl std::fmt::Display) -> Self {
        Self(format!("{path}: {message}"))
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Executor {
    #[default]
    Concurrent,
    Sequential,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Scenario {
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) system_prompt: Option<String>,
    #[serde(default)]
    pub(crate) tool_executor: Executor,
    #[serde(default)]
    pub(crate) max_hook_retries: Option<u32>,
    /// What the retry cap does: `deny` (default) or `confirm` (a human is asked).
    #[serde(default)]
    pub(crate) on_retry_limit: RetryLimitDef,
    /// The scripted model streams text in deltas of this many characters (default: one delta
    /// per block).
    #[serde(default)]
    pub(crate) stream_chunk_chars: Option<usize>,
    /// The agent's stream-guard hold-back window, in characters (default the agent's).
    #[serde(default)]
    pub(crate) stream_hold_back: Option<usize>,
    #[serde(default)]
    pub(crate) tools: Vec<ToolDef>,
    #[serde(default)]
    pub(crate) policy: Vec<Value>,
    /// A policy file (TOML or JSON, relative to the scenario's directory) in place of `policy`:
    /// the file as shipped, loaded as an app loads it.
    #[serde(default)]
    pub(crate) policy_file: Option<String>,
    #[serde(default)]
    pub(crate) model: Vec<ModelEntry>,
    /// Other agents: tools of the scenario's agent, or agents it can hand off to.
    #[serde(default)]
    pub(crate) agents: Vec<AgentDef>,
    /// A typed answer the agent must give (SPEC §13): checked, retried within its budget.
    #[serde(default)]
    pub(crate) output: Option<OutputDef>,
    /// The conversation manager of the scenario's agent (SPEC §6.1; default the agent's, a
    /// 40-message sliding window). Setting one adds what each request sent to the transcript.
    #[serde(default, rename = "conversation_manager")]
    manager_json: Option<Value>,
    /// `conversation_manager`, parsed on its own (its `kind` tag would hide the JSON path of a
    /// problem inside it).
    #[serde(skip)]
    pub(crate) conversation_manager: Option<ManagerDef>,
    pub(crate) steps: Vec<Step>,
}

/// `conversation_manager` in a scenario.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ManagerDef {
    /// No manager: the history is never trimmed.
    None,
    /// The last `messages` messages (default 40).
    SlidingWindow {
        #[serde(default)]
        messages: Option<usize>,
    },
    /// The newest turns within `budget_tokens`.
    TokenWindow {
        budget_tokens: u64,
        #[serde(default)]
        low_water_percent: Option<u8>,
    },
    /// A token window whose trims are summaries written by `summarizer` (a model script of
    /// its own), or by the scenario's model (the next entries of `model`) when it is empty.
    SummarizingWindow {
        budget_tokens: u64,
        #[serde(default)]
        low_water_percent: Option<u8>,
        #[serde(default)]
        summarizer: Vec<ModelEntry>,
        #[serde(default)]
        instructions: Option<String>,
    },
}

/// The typed answer of a scenario's agent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputDef {
    /// Its name (1 to 64 of `[a-zA-Z0-9_-]`).
    pub(crate) name: String,
    /// Its JSON Schema.
    pub(crate) schema: Value,
    /// How the model is asked: `native` (the provider's default), `tool` or `prompt`.
    #[serde(default)]
    pub(crate) strategy: Option<OutputStrategyDef>,
    /// Refused answers sent back before the run fails (default the agent's, 2).
    #[serde(default)]
    pub(crate) max_retries: Option<u32>,
}

/// `output.strategy` in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OutputStrategyDef {
    Native,
    Tool,
    Prompt,
}

/// Another agent of a scenario: its own model script, tools and policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentDef {
    pub(crate) name: String,
    /// `tool`: the scenario's agent calls it as a tool (input `{"input": "..."}`); `handoff`:
    /// the scenario's agent can hand the conversation to it (`transfer_to_<name>`).
    pub(crate) join: Join,
    /// The tool's (or the transfer tool's) description.
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) system_prompt: Option<String>,
    #[serde(default)]
    pub(crate) tools: Vec<ToolDef>,
    #[serde(default)]
    pub(crate) policy: Vec<Value>,
    #[serde(default)]
    pub(crate) model: Vec<ModelEntry>,
}

/// How another agent joins the scenario's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Join {
    Tool,
    Handoff,
}

fn object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolDef {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: String,
    #[serde(default = "object_schema")]
    pub(crate) input_schema: Value,
    #[serde(default)]
    pub(crate) result: Option<String>,
    #[serde(default)]
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ModelErrorName {
    Throttled,
    ContextOverflow,
    Server,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct UsageDef {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ModelEntry {
    #[serde(default)]
    pub(crate) content: Option<Vec<ContentBlock>>,
    #[serde(default)]
    pub(crate) stop_reason: Option<StopReason>,
    #[serde(default)]
    pub(crate) usage: Option<UsageDef>,
    #[serde(default)]
    pub(crate) error: Option<ModelErrorName>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    #[serde(default)]
    pub(crate) interrupt: Option<String>,
    #[serde(default)]
    pub(crate) id: Option<String>,
    pub(crate) response: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Step {
    #[serde(default)]
    pub(crate) prompt: Option<String>,
    #[serde(default)]
    pub(crate) invocation_state: Option<Map>,
    #[serde(default)]
    pub(crate) resume: Option<Vec<Answer>>,
    #[serde(default)]
    pub(crate) inject: Vec<String>,
    /// Answers to the approvals asked about injected messages (by interrupt name or id), given
    /// as soon as a message is parked.
    #[serde(default)]
    pub(crate) answer_injections: Vec<Answer>,
}

/// `on_retry_limit` in a scenario.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RetryLimitDef {
    #[default]
    Deny,
    Confirm,
}

impl Scenario {
    /// Parses and checks a scenario (the policy is checked when it is built).
    pub(crate) fn parse(text: &str) -> Result<Self, Invalid> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let mut scenario: Self = serde_path_to_error::deserialize(de).map_err(|e| {
            let mut path = e.path().to_string();
            let inner = e.into_inner();
            // An unknown field is reported at the object that holds it, as a JSON path should.
            let message = inner.to_string();
            if let Some(rest) = message.strip_prefix("unknown field `")
                && let Some(field) = rest.split('`').next()
                && let Some(parent) = path.strip_suffix(&format!(".{field}"))
            {
                path = parent.to_owned();
            } else if message.starts_with("unknown field `") && !path.contains(['.', '[']) {
                path = "$".to_owned();
            }
            if inner.is_syntax() || inner.is_eof() {
                Invalid(format!("invalid JSON: {inner}"))
            } else {
                Invalid::at(path, inner)
            }
        })?;
        if let Some(v) = scenario.manager_json.take() {
            let def =
                serde_json::from_value(v).map_err(|e| Invalid::at("conversation_manager", e))?;
            scenario.conversation_manager = Some(def);
        }
        scenario.check()?;
        Ok(scenario)
    }

    fn check(&self) -> Result<(), Invalid> {
        if self.policy_file.is_some() && !self.policy.is_empty() {
            return Err(Invalid::at(
                "$",
                "give either `policy` or `policy_file`, not both",
            ));
        }
        check_agent("", &self.tools, &self.model)?;
        if let Some(ManagerDef::SummarizingWindow { summarizer, .. }) = &self.conversation_manager {
            check_script("conversation_manager.summarizer", summarizer)?;
        }
        for (i, a) in self.agents.iter().enumerate() {
            check_agent(&format!("agents[{i}]."), &a.tools, &a.model)?;
        }
        if self.steps.is_empty() {
            return Err(Invalid::at("steps", "at least one step is needed"));
        }
        for (i, s) in self.steps.iter().enumerate() {
            let path = format!("steps[{i}]");
            match (&s.prompt, &s.resume) {
                (Some(_), Some(_)) => {
                    return Err(Invalid::at(
                        path,
                        "give either `prompt` or `resume`, not both",
                    ));
                }
                (None, None) => {
                    return Err(Invalid::at(path, "missing field `prompt` (or `resume`)"));
                }
                _ => {}
            }
            for (j, a) in s.resume.iter().flatten().enumerate() {
                if a.interrupt.is_some() == a.id.is_some() {
                    return Err(Invalid::at(
                        format!("{path}.resume[{j}]"),
                        "give exactly one of `interrupt` (a name) or `id`",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks an agent's tools and model script (`prefix` locates them: `""` or `agents[i].`).
fn check_agent(prefix: &str, tools: &[ToolDef], model: &[ModelEntry]) -> Result<(), Invalid> {
    {
        for (i, t) in tools.iter().enumerate() {
            if t.result.is_some() && t.error.is_some() {
                return Err(Invalid::at(
                    format!("{prefix}tools[{i}]"),
                    "give either `result` or `error`, not both",
                ));
            }
        }
    }
    check_script(&format!("{prefix}model"), model)
}

/// Checks a model script (`at` locates it: `model`, `agents[i].model`, ...).
fn check_script(at: &str, model: &[ModelEntry]) -> Result<(), Invalid> {
    {
        for (i, m) in model.iter().enumerate() {
            let path = format!("{at}[{i}]");
            match (&m.content, m.error) {
                (Some(_), Some(_)) => {
                    return Err(Invalid::at(
                        path,
                        "give either `content` or `error`, not both",
                    ));
                }
                (None, None) => {
                    return Err(Invalid::at(path, "missing field `content` (or `error`)"));
                }
                (None, Some(_)) if m.stop_reason.is_some() || m.usage.is_some() => {
                    return Err(Invalid::at(
                        path,
                        "an `error` entry takes no `stopReason` or `usage`",
                    ));
                }
                _ => {}
            }
            for (j, b) in m.content.iter().flatten().enumerate() {
                if !matches!(
                    b,
                    ContentBlock::Text(_)
                        | ContentBlock::ToolUse(_)
                        | ContentBlock::ReasoningContent(_)
                ) {
                    return Err(Invalid::at(
                        format!("{path}.content[{j}]"),
                        "a scripted response holds only text, toolUse and reasoningContent blocks",
                    ));
                }
            }
        }
    }
    Ok(())
}
